"""The paper-style search table: GRPO, GiGPO and Role-Agent on the offline search-QA
environment from ONE shared warm start (Wang et al., 2026, arXiv 2606.10917, Table 2: EM
success on single-hop and multi-hop QA). Numbers on this environment's questions are not
comparable with the paper's NQ/HotpotQA columns (docs/search.md).

Arms (each a shipped recipe; the same iterations, batch and panel)::

    GRPO        grpo_search
    GiGPO       gigpo_search
    Role-Agent  role_agent_search

Protocol: one SFT checkpoint from the environment's gold-path expert on TRAINING questions
(``roleagent sft --expert``; or ``--init-from``); every run starts from it with fresh
adapters. Iteration 0 of every curve is one shared greedy evaluation of the warm start. The
panel is the held-out ``test`` split (never trained on), evaluated every ``--eval-every``
iterations and at the end. The shipped test split is ordered by entity source (the first
140 questions are all chemical elements), so a short panel would hold one question family:
the benchmark writes ``panel_qa.jsonl.gz`` in ``--out`` (every shipped question, the test
rows interleaved round-robin over question types, seeded) and points ``env.kwargs.qa`` at
it; the training and dev splits, and their order, are untouched.

Output (``--out``): ``results.json``, ``table.md`` (EM success per hop count before and
after, mean ± sample std over seeds; then per hop count the counts pooled over seeds with
95 % Wilson intervals and the paired test of the warm start against every seed's final
evaluation, and the papers' ordering GRPO < GiGPO < Role-Agent with the seed-level
difference ± s.e. and the paired test over (seed, question) pairs; ``_stats_table.py``)
and ``curves.png`` (all-question panel success).

    python benchmarks/bench_search.py [--seeds 0 1 2] [--iterations 2] [--panel 24]
        [--jobs 1] [--init-from DIR | --expert-tasks 48] [--set key=value ...] [--summarize]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _stats_table as st
from bench_learning import final_runs, mean_std, minutes, plot, read_run, run_cli, slug, stopped_note, warm_start

from roleagent.envs.search.env import SearchEnv
from roleagent.envs.search.retriever import data_path

ARMS = {"GRPO": "grpo_search", "GiGPO": "gigpo_search", "Role-Agent": "role_agent_search"}
#: the papers' ordering of final EM, worst first (Wang et al., 2026, Table 2: GRPO < GiGPO < Role-Agent)
PAPER_ORDER = [("GRPO", "GiGPO"), ("GiGPO", "Role-Agent")]
#: the environment's evaluation-table columns (``SearchEnv.table_columns``) and their labels here
HOPS = {"single-hop": "1-hop", "multi-hop": "2-hop", "All": "all"}


def ms(values: list[float]) -> str:
    """bench_learning's mean ± sample std without its column padding: ``ms([1.0, 3.0]) == "2.0 ± 1.4"``."""
    return " ".join(mean_std(values).split())


def interleave_test(rows: list[dict], seed: int = 0) -> list[dict]:
    """The same rows with the ``test`` rows reordered round-robin over question types (each
    type's rows shuffled with ``seed``), so the first N test questions cover every type;
    the other splits keep their rows and their order.

    >>> rows = [{"split": s, "type": t} for s, t in map(str.split, ["test a", "test a", "train c", "test a", "test b"])]
    >>> [(r["split"], r["type"]) for r in interleave_test(rows)]
    [('train', 'c'), ('test', 'a'), ('test', 'b'), ('test', 'a'), ('test', 'a')]
    """
    rng = random.Random(seed)
    by_type: dict[str, list[dict]] = {}
    for row in rows:
        if row["split"] == "test":
            by_type.setdefault(row["type"], []).append(row)
    for bucket in by_type.values():
        rng.shuffle(bucket)
    order, depth = [], max((len(b) for b in by_type.values()), default=0)
    for level in range(depth):
        order += [bucket[level] for _, bucket in sorted(by_type.items()) if level < len(bucket)]
    return [row for row in rows if row["split"] != "test"] + order


def write_panel_qa(out: Path, seed: int = 0) -> Path:
    """``out/panel_qa.jsonl.gz``: the shipped questions with the test rows interleaved."""
    source = data_path("qa.jsonl.gz")
    with gzip.open(source, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    target = out / "panel_qa.jsonl.gz"
    with gzip.open(target, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in interleave_test(rows, seed))
    return target


def hop_success(run_dir: Path, label: str) -> dict[str, float] | None:
    """EM success (%) per hop count of the test-panel evaluation ``label`` ("before",
    "after", "iterK"): ``{"1-hop", "2-hop", "all"}``; None when that evaluation is missing.
    A column with no question on the panel is left out."""
    record = st.eval_record(run_dir, label, "test")
    if record is None:
        return None
    # the per-type keys are the evaluation table's, already in percent (eval/success is a fraction)
    return {short: record[f"eval/success_{key}"] for key, short in HOPS.items() if f"eval/success_{key}" in record}


def hop_evaluations(run_dir: Path, label: str) -> dict[str, dict]:
    """Counts and per-game outcomes (``_stats_table``) per hop count of the test-panel
    evaluation ``label``: "all" from its metrics record, the hop columns by each game's
    type in the evaluation's rollout dump (``rollouts/eval_<label>[_test].jsonl``); a
    column is ``{}`` when they were not recorded."""
    every = st.panel_evaluation(st.eval_record(run_dir, label, "test"))
    dumps = [run_dir / "rollouts" / f"eval_{label}{tail}.jsonl" for tail in ("_test", "")]
    dump = next((path for path in dumps if path.exists()), None)
    lines = dump.read_text().splitlines() if dump else []
    types = [str(json.loads(line)["metadata"].get("task_type")) for line in lines if line.strip()]
    hop_of = {t: HOPS[name] for t, name in SearchEnv.table_columns.items()}  # "1" -> "1-hop"
    out = {hop: st.subset(every, [hop_of.get(t) == hop for t in types] if dump else None) for hop in hop_of.values()}
    return {**out, "all": every}


def read_arm(run_dir: Path, arm: str, seed: int) -> dict | None:
    """bench_learning's curve of the run (its first panel is the test panel), the last
    evaluation's success per hop count and the run's wall minutes."""
    result = read_run(run_dir, arm, seed, minutes=run_minutes(run_dir))
    if result is None:
        return None
    last = "after" if result["complete"] else f"iter{result['curve'][-1][0]}"
    result["hops"] = hop_success(run_dir, last) or {}
    result["hop_finals"] = hop_evaluations(run_dir, last)
    return result


def run_minutes(run_dir: Path) -> float:
    """The wall minutes :func:`train_recipe` wrote (NaN when the run was not timed)."""
    path = run_dir / "bench_minutes.txt"
    return float(path.read_text()) if path.exists() else float("nan")


def train_recipe(recipe: str, sets: list[str], run_dir: Path, threads: int) -> None:
    """``roleagent train recipe`` in a subprocess (a failure is printed; the others go on),
    timed into ``run_dir/bench_minutes.txt``; ``threads`` (when > 0) is the last override."""
    sets = [*sets, f"run_dir={run_dir}", "report_to=[jsonl]", *([f"threads={threads}"] if threads else [])]
    started = time.perf_counter()
    try:
        run_cli(["train", recipe, "--no-resume", *[x for s in sets for x in ("--set", s)]], run_dir / "train.log")
    except RuntimeError as error:
        print(error, flush=True)
    (run_dir / "bench_minutes.txt").write_text(f"{(time.perf_counter() - started) / 60:.2f}\n")


def train_one(*, arm: str, seed: int, overrides: list[str], out: Path, threads: int) -> dict | None:
    run_dir = out / f"{slug(arm)}_seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    train_recipe(ARMS[arm], [*overrides, f"seed={seed}", "eval.at_start=false"], run_dir, threads)
    result = read_arm(run_dir, arm, seed)
    if result is not None:
        print(f"{arm} seed {seed}: {result['after']:.1f}% at iteration {result['curve'][-1][0]}", flush=True)
    return result


def table(
    results: list[dict], before: dict[str, float] | None, arms: list[str], header: str, warm: dict | None = None
) -> str:
    """Before (the shared warm start) and after, per hop count, mean ± sample std over seeds;
    then per arm and hop count the counts and the paired test (``warm``: the warm start's
    :func:`hop_evaluations`), and the papers' ordering on all questions."""
    before, warm = before or {}, warm or {}
    columns = [c for c in HOPS.values() if c in before or any(c in r["hops"] for r in results)]
    lines = [
        header,
        "",
        "| method | " + " | ".join(f"{c} before % | {c} after %" for c in columns) + " | all: after − before | runs | min/run |",
        "|---|" + "---|---|" * len(columns) + "---|---|---|",
    ]  # fmt: skip
    for arm in arms:
        rows = [r for r in results if r["config"] == arm]
        if not rows:
            continue
        cells = []
        for c in columns:
            start = f"{before[c]:.1f}" if c in before else "-"
            cells.append(f"{start} | {ms([r['hops'][c] for r in rows if c in r['hops']])}")
        gain = ms([r["hops"]["all"] - before["all"] for r in rows if "all" in r["hops"] and "all" in before])
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {gain} | {len(rows)} | {minutes(rows)} |")
    lines += ["", *st.md_header(["method", "questions", *st.BEFORE_AFTER_COLUMNS])]
    for arm in arms:
        rows = [r for r in results if r["config"] == arm]
        for c in columns if rows else []:
            cells = st.before_after_cells(warm.get(c), [r.get("hop_finals", {}).get(c, {}) for r in rows])
            lines.append(f"| {arm} | {c} | " + " | ".join(cells) + " |")
    order = st.ordering_table(PAPER_ORDER, final_runs([r for r in results if r["config"] in arms]))
    return "\n".join([*lines, *([""] + order if order else [])]) + "\n"


def summarize(out: Path, arms: list[str], seeds: list[int], header: str) -> str:
    """Tabulate what is in ``out`` (also for an interrupted benchmark): table.md,
    results.json and curves.png."""
    before = hop_success(out / "warm_start_eval", "before")
    start = hop_evaluations(out / "warm_start_eval", "before")
    results = [r for s in seeds for a in arms if (r := read_arm(out / f"{slug(a)}_seed{s}", a, s))]
    header += stopped_note(results)
    text = table(results, before, arms, header, start)
    (out / "table.md").write_text(text)
    (out / "results.json").write_text(json.dumps({"before": before, "start": start, "runs": results}, indent=1))
    if results and before:
        plot(results, before["all"], out / "curves.png")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=None, help="RL iterations per run (default: the recipe's)")
    parser.add_argument("--panel", type=int, default=24, help="test questions on the panel")
    parser.add_argument("--eval-every", type=int, default=1, help="panel evaluation every k iterations")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (each then uses 1 thread)")
    parser.add_argument("--init-from", help="an SFT checkpoint every run starts from (else one is built)")
    parser.add_argument("--expert-tasks", type=int, default=48, help="training questions for the built warm start")
    parser.add_argument("--out", default="runs/bench_search")
    parser.add_argument("--set", action="append", default=[], help="override applied to every run")
    parser.add_argument("--summarize", action="store_true", help="only tabulate the runs already in --out")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    panel = [f"env.kwargs.qa={write_panel_qa(out)}", "eval.splits=[test]", f"eval.max_tasks={args.panel}"]
    panel += [f"iterations={args.iterations}"] if args.iterations else []
    recipe = ARMS["Role-Agent"]
    if not args.summarize:
        init = args.init_from or str(warm_start(recipe=recipe, overrides=args.set, out=out, tasks=args.expert_tasks))
        common = [*args.set, *panel, f"model.init_from={init}", "sft.enabled=false", f"eval.every={args.eval_every}"]
        (out / "init_from.txt").write_text(init + "\n")
        if hop_success(out / "warm_start_eval", "before") is None:
            command = ["eval", recipe, "--out", str(out / "warm_start_eval"), "--label", "before"]
            run_cli([*command, *[x for s in common for x in ("--set", s)]], out / "warm_start_eval.log")
        threads = 1 if args.jobs > 1 else 0
        jobs = [(arm, seed) for seed in args.seeds for arm in args.arms]  # seed-major
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(lambda j: train_one(arm=j[0], seed=j[1], overrides=common, out=out, threads=threads), jobs))
    init = (out / "init_from.txt").read_text().strip() if (out / "init_from.txt").exists() else args.init_from
    header = (
        f"Search QA, held-out test panel (first {args.panel} questions, types interleaved, greedy, EM); from "
        f"`{init}`; recipes {', '.join(ARMS[a] for a in args.arms)} with --set {' '.join(args.set + panel[1:]) or '-'}; "
        f"seeds {args.seeds}" + ("" if args.summarize else f"; {(time.perf_counter() - started) / 60:.0f} min in all")
    )
    print(summarize(out, args.arms, args.seeds, header), flush=True)


if __name__ == "__main__":
    main()
