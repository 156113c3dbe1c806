"""``roleagent`` subcommands that look at runs or serve data: view, report, retriever, envs
(their parsers and handlers; ``roleagent.cli`` is the entry point)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from roleagent.terminal import one_line


def _view(args: argparse.Namespace) -> int:
    from roleagent.viewer import is_tree_path, view_group, view_run, view_trees

    if is_tree_path(Path(args.run)):
        return view_trees(Path(args.run))
    run = Path(args.run)
    try:
        if args.group:
            return view_group(run, args.group, file=args.file, width=args.width)
        return view_run(run, file=args.file, task=args.task, index=args.index, failed=args.failed, memory=args.memory)
    except (AttributeError, KeyError, TypeError, ValueError) as error:  # a record of an unexpected shape
        print(f"view error: a malformed record in {run} ({type(error).__name__}: {one_line(error)})", file=sys.stderr)
        return 2


def _report(args: argparse.Namespace) -> int:
    from roleagent.report import ReportError, write_report

    try:
        out = write_report(
            [Path(r) for r in args.runs],
            Path(args.out) if args.out else None,
            max_files=args.max_files,
            max_chars=args.max_chars,
        )
    except ReportError as error:
        print(f"report error: {one_line(error)}", file=sys.stderr)
        return 2
    print(f"report: {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return 0


def _envs(args: argparse.Namespace) -> int:
    from roleagent.envs import env_specs, missing_requirements

    rows = []
    for name, spec in sorted(env_specs().items()):
        missing = missing_requirements(name)  # a plug-in (entry point) requires its own module
        status = (
            "ready"
            if not missing
            else f"needs: {spec.install_command}"
            if spec.extra
            else f"cannot import {', '.join(missing)}"
        )
        rows.append((name, status, spec.description))
    widths = [max(len(row[column]) for row in rows) for column in (0, 1)]
    for name, status, description in rows:  # columns as wide as their longest entry
        print(f"{name:{widths[0]}s}  {status:{widths[1]}s}  {description}")
    return 0


def _retriever(args: argparse.Namespace) -> int:
    from roleagent.envs.search.server import main as serve_main

    return serve_main(args)


def add_inspection_parsers(sub) -> None:
    """Subcommands that look at runs or serve data: view, report, retriever, envs."""
    view = sub.add_parser("view", help="browse a run's trajectories and failure memory, or Agent-R trees")
    view.add_argument("run", help="run directory, or an Agent-R tree file (*.json) or directory of them")
    view.add_argument("--file", help="rollout file stem, e.g. iter_000002 or eval_after (default: list files)")
    view.add_argument("--task", help="only trajectories of this task id")
    view.add_argument("--index", type=int, help="show trajectory number k in full")
    view.add_argument("--failed", action="store_true", help="only failed trajectories")
    view.add_argument("--memory", action="store_true", help="show the Agent-In-World failure memory")
    view.add_argument("--group", metavar="TASK_ID", help="a task's rollouts side by side, with their advantages")
    view.add_argument("--width", type=int, default=34, help="column width of --group")
    view.set_defaults(func=_view)

    report = sub.add_parser("report", help="write a self-contained HTML report of one or more runs")
    report.add_argument("runs", nargs="+", help="run directories (overlaid in every chart)")
    report.add_argument("--out", help="HTML file to write (default: FIRST_RUN/report.html)")
    report.add_argument("--max-files", type=int, default=10, help="last iteration rollout dumps per run in the browser")
    report.add_argument("--max-chars", type=int, default=1500, help="longest observation/generation text kept")
    report.set_defaults(func=_report)

    ret = sub.add_parser("retriever", help="serve a corpus over Search-R1's HTTP API (POST /retrieve) until stopped")
    ret.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    ret.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed once bound)")
    ret.add_argument("--retriever", choices=["bm25", "dense"], default="bm25", help="dense: all-MiniLM-L6-v2")
    ret.add_argument("--corpus", help="JSONL(.gz) corpus with id and contents, or title and text (default: shipped)")
    ret.add_argument("--verbose", action="store_true", help="log every request")
    ret.set_defaults(func=_retriever)

    envs = sub.add_parser("envs", help="list environments and whether they can run here")
    envs.set_defaults(func=_envs)
