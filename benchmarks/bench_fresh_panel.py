"""Replay a search-QA benchmark's start and final checkpoints on a fresh panel: the test
questions after the ones its panel used.

``bench_search`` and ``bench_asl`` evaluate on the first ``--panel`` questions of their
interleaved test split (``panel_qa.jsonl.gz`` in their output folder). A small gain seen
there was looked at before anyone chose to test it, and a 48-question panel holds only six
questions of each type. This script takes the benchmark's own panel file, drops the first
``--skip`` test questions (the ones its panel used) and plays the next ``--panel`` (0: all
the rest) with the start and with every run's last checkpoint, greedy, through
``roleagent eval``: no run trained on them (test questions never are) and none of them was
seen when the replay was decided.

Each evaluation is the run's own config (``RUN/config.yaml``; the start's is the first
run's with ``model.init_from`` set to ``--start``), so the decoding, the dtype and the
environment are the training run's.

Tables (``--bench``/fresh/table.md, results in results.json):

- per arm: the start's count, the final counts pooled over seeds (95 % Wilson intervals),
  the exact McNemar test over (seed, game) pairs, and the **per-game test**: each game's
  success rate over the seeds against the start's outcome, an exact sign-flip test over
  games (:func:`roleagent.stats.paired_rate_test`). The games are independent; the seeds of
  one game are not, so the per-game test is the one a claim rests on;
- per question type: the start and each arm, pooled over seeds, and the per-game test;
- arm against arm: per game, one arm's rate over its seeds against the other's.

    python benchmarks/bench_fresh_panel.py --bench OUT --start DIR [--skip 48] [--panel 0]
        [--arms "Rule reward (EM)" ...] [--jobs 1] [--start-eval OTHER/fresh/start] [--summarize]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _stats_table as st
from bench_asl import folder
from bench_learning import run_cli

from roleagent.stats import paired_rate_test

LABEL = "fresh"


def fresh_panel_qa(source: Path, target: Path, skip: int) -> list[str]:
    """``target``: ``source``'s rows with the first ``skip`` test rows moved to the split
    ``panel_used`` (which no environment split reads), so the test split starts after them;
    the ids of the test rows left, in panel order.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> rows = [{"split": s, "id": i} for i, s in enumerate(["train", "test", "test", "test"])]
    >>> with gzip.open(d / "a.gz", "wt") as fh:
    ...     _ = fh.write("".join(json.dumps(r) + "\\n" for r in rows))
    >>> fresh_panel_qa(d / "a.gz", d / "b.gz", 2)
    [3]
    >>> [json.loads(line)["split"] for line in gzip.open(d / "b.gz", "rt")]
    ['train', 'panel_used', 'panel_used', 'test']
    """
    with gzip.open(source, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    test = [row for row in rows if row["split"] == "test"]
    for row in test[:skip]:
        row["split"] = "panel_used"
    with gzip.open(target, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)
    return [row["id"] for row in test[skip:]]


def discover_runs(bench: Path, arms: list[str] | None) -> dict[str, list[Path]]:
    """``{arm folder: [run folders, by seed]}``: every ``<arm>_seed<k>`` folder of ``bench``
    with a checkpoint, the arms filtered by ``arms`` (their names, as ``bench_asl`` names folders)."""
    runs: dict[str, list[tuple[int, Path]]] = defaultdict(list)
    wanted = None if arms is None else {folder(a) for a in arms}
    for path in sorted(bench.iterdir()):
        match = re.fullmatch(r"(.+)_seed(\d+)", path.name)
        if match and (path / "checkpoints" / "latest").exists() and (wanted is None or match[1] in wanted):
            runs[match[1]].append((int(match[2]), path))
    return {arm: [p for _, p in sorted(seeds)] for arm, seeds in runs.items()}


def evaluate(command: list[str], out: Path, sets: list[str]) -> None:
    """One ``roleagent eval`` into ``out`` (skipped when ``out`` holds its evaluation)."""
    if st.eval_record(out, LABEL, "test") is not None:
        return
    flags = ["--split", "test", "--out", str(out), "--label", LABEL, *[x for s in sets for x in ("--set", s)]]
    out.mkdir(parents=True, exist_ok=True)
    run_cli(["eval", *command, *flags], out / "eval.log")


def outcomes_by_type(out: Path, games: list[str]) -> tuple[list[bool | None], list[str]]:
    """An evaluation's per-game outcomes and each game's question type, checked to be of
    ``games`` (task ids) in that order, so every paired test pairs the same questions."""
    evaluation = st.panel_evaluation(st.eval_record(out, LABEL, "test"))
    dumps = [out / "rollouts" / f"eval_{LABEL}{tail}.jsonl" for tail in ("_test", "")]  # one panel: no tail
    rows = [json.loads(line) for line in next(p for p in dumps if p.exists()).read_text().splitlines() if line]
    if [row["task_id"] for row in rows] != games or len(evaluation.get("outcomes") or []) != len(games):
        raise RuntimeError(f"{out}: not an evaluation of the fresh panel's {len(games)} questions in its order")
    return evaluation["outcomes"], [row["metadata"].get("question_type", "?") for row in rows]


def per_game(runs: list[list[bool | None]]) -> list[tuple[int, int]]:
    """Per game, (successes, episodes) over the runs (seeds); a crashed episode does not count."""
    return [(sum(bool(o) for o in game if o is not None), sum(o is not None for o in game)) for game in zip(*runs)]


def pooled_cell(runs: list[list[bool | None]], keep: list[bool]) -> str:
    """The kept games' count over the runs (seeds), with its 95 % interval."""
    return st.rate_cell([st.subset(st.panel_evaluation({"eval/outcomes": r}), keep) for r in runs])


def rate_test(before: list[tuple[int, int]], after: list[tuple[int, int]], keep: list[bool]) -> str:
    pairs = [(b, a) for b, a, kept in zip(before, after, keep) if kept and b[1] and a[1]]
    return str(paired_rate_test([b for b, _ in pairs], [a for _, a in pairs]))


def tables(start: list[bool | None], types: list[str], arms: dict[str, list[list[bool | None]]], header: str) -> str:
    every = [True] * len(start)
    lines = [header, "", *st.md_header(["arm", "seeds", "start", "after, pooled over seeds", "paired over (seed, game)",
                                         "per game: rate over seeds vs start (sign flip)"])]  # fmt: skip
    base = per_game([start])
    for arm, runs in arms.items():
        mcnemar = st.paired([({"outcomes": start}, {"outcomes": r}) for r in runs])
        cell = mcnemar if isinstance(mcnemar, str) else st.paired_text(mcnemar) + f": {mcnemar.verdict}"
        lines.append(f"| {arm} | {len(runs)} | {pooled_cell([start], every)} | {pooled_cell(runs, every)} | {cell} | "
                     f"{rate_test(base, per_game(runs), every)} |")  # fmt: skip
    lines += ["", *st.md_header(["question type", "games", "start", *[f"{a}, pooled" for a in arms],
                                 *[f"{a} vs start, per game" for a in arms]])]  # fmt: skip
    for kind in sorted(set(types)):
        keep = [t == kind for t in types]
        pooled = [pooled_cell(runs, keep) for runs in arms.values()]
        tests = [rate_test(base, per_game(runs), keep) for runs in arms.values()]
        lines.append(f"| {kind} | {sum(keep)} | {pooled_cell([start], keep)} | {' | '.join([*pooled, *tests])} |")
    names = list(arms)
    if len(names) > 1:
        lines += ["", *st.md_header(["comparison", "per game: B's rate over its seeds vs A's"])]
        for a, b in zip(names, names[1:]):
            lines.append(f"| {a} → {b} | {rate_test(per_game(arms[a]), per_game(arms[b]), every)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", type=Path, required=True, help="a bench_asl / bench_search output folder")
    parser.add_argument("--start", required=True, help="the checkpoint every run started from (model.init_from)")
    parser.add_argument("--skip", type=int, default=48, help="test questions the benchmark's panel used")
    parser.add_argument("--panel", type=int, default=0, help="fresh questions to play (0: every one left)")
    parser.add_argument("--arms", nargs="+", help="arms to replay (default: every run folder)")
    parser.add_argument("--jobs", type=int, default=1, help="evaluations at once (> 1: one thread each)")
    parser.add_argument("--start-eval", type=Path, help="reuse this evaluation of the start on the same fresh panel")
    parser.add_argument("--summarize", action="store_true", help="only rebuild the tables")
    args = parser.parse_args()
    runs = discover_runs(args.bench, args.arms)
    if not runs:
        raise SystemExit(f"{args.bench}: no <arm>_seed<k> run folder with a checkpoint")
    out = args.bench / "fresh"
    out.mkdir(exist_ok=True)
    left = fresh_panel_qa(args.bench / "panel_qa.jsonl.gz", out / "panel_qa.jsonl.gz", args.skip)
    games = left[: args.panel or len(left)]
    if args.start_eval and not (out / "start").exists():
        outcomes_by_type(args.start_eval, games)  # another benchmark's fresh panel: the same questions?
        (out / "start").symlink_to(args.start_eval.resolve(), target_is_directory=True)
    sets = [f"env.kwargs.qa={out / 'panel_qa.jsonl.gz'}", f"eval.max_tasks={args.panel}"]
    sets.append(f"threads={1 if args.jobs > 1 else 0}")  # 0: every core (the runs' configs may say 1)
    first = next(iter(runs.values()))[0]
    jobs = [([str(first / "config.yaml")], out / "start",
             [f"model.init_from={args.start}", "sft.enabled=false", "asl.enabled=false"])]  # fmt: skip
    jobs += [(["--run", str(run)], out / run.name, []) for seeds in runs.values() for run in seeds]
    if not args.summarize:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(lambda j: evaluate(j[0], j[1], [*sets, *j[2]]), jobs))
    start, types = outcomes_by_type(out / "start", games)
    arms = {arm: [outcomes_by_type(out / run.name, games)[0] for run in seeds] for arm, seeds in runs.items()}
    header = (
        f"Fresh panel of `{args.bench}`: test questions {args.skip + 1}–{args.skip + len(games)} of its "
        f"interleaved test split ({len(left)} after the first {args.skip}), greedy, EM; start `{args.start}`"
    )
    text = tables(start, types, arms, header)
    (out / "table.md").write_text(text)
    (out / "results.json").write_text(json.dumps({"games": games, "types": types, "start": start, "arms": arms}))
    print(text)


if __name__ == "__main__":
    main()
