"""``roleagent report RUN [RUN...]``: one self-contained HTML file per call (no network):
learning curves of every metric (runs overlaid), the evaluation tables, the wall-time
breakdown, Agent-In-World's failure modes, SEAL's weights and failure profile, and a
rollout browser showing a task's G rollouts side by side with what the algorithm computed.
"""

from __future__ import annotations

from pathlib import Path

from roleagent.report.data import ReportError, RunData, load_run, unique_names
from roleagent.report.page import render_page

__all__ = ["ReportError", "RunData", "load_run", "render_page", "write_report"]


def write_report(
    runs: list[Path], out: Path | None = None, *, max_files: int = 10, max_chars: int = 1500, title: str = ""
) -> Path:
    """Write the report of ``runs`` to ``out`` (default: ``<first run>/report.html``) and
    return its path. ``max_files``: the last iteration rollout dumps shown per run (all
    evaluation dumps are); ``max_chars``: longest text kept per observation or generation."""
    if not runs:
        raise ReportError("give at least one run directory")
    if max_files < 0 or max_chars < 1:
        raise ReportError(f"max_files={max_files} must be >= 0 and max_chars={max_chars} >= 1")
    paths = [Path(r) for r in runs]
    loaded = [load_run(p, name=n, max_files=max_files, max_chars=max_chars) for p, n in zip(paths, unique_names(paths))]
    out = Path(out) if out is not None else paths[0] / "report.html"
    try:
        page = render_page(loaded, title=title or "roleagent report: " + ", ".join(r.name for r in loaded))
    except (AttributeError, KeyError, TypeError, ValueError) as error:  # a record of an unexpected shape
        raise ReportError(
            f"a malformed record in {', '.join(map(str, paths))} ({type(error).__name__}: {error})"
        ) from None
    tmp = out.with_name(out.name + ".tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(out)
    except OSError as error:  # e.g. an archived, read-only run folder
        raise ReportError(f"cannot write {out} ({error.strerror or error}): choose another file with --out") from None
    return out
