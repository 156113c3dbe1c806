"""Agentic Self-Learning against the rule-reward baseline on the offline search-QA
environment (Sun et al., 2025, arXiv 2510.14253: ASL with zero labelled data against
Search-R1-style RLVR, Jin et al., 2025, arXiv 2503.09516), and the paper's reward-hacking
check (the GRM frozen against trained).

Arms (the recipe ``asl_search``, the same rollout settings and update budget)::

    Rule reward (EM)   asl.enabled=false: GRPO on the training split, reward = exact match
    ASL                the PG -> GRM -> PM cycle, the GRM's verdict as the policy's reward
    ASL, frozen GRM    asl.train_grm=false: the GRM phase never runs (the backbone still
                       changes through the PG and PM phases, as in the paper's ablation)

Protocol: every run starts from the same weights (the embedded instruct model, as ASL
starts from the instruct model with no labelled data, or ``--init-from``); iteration 0 of
every curve is one shared greedy evaluation of that start. Every arm trains ``3 x --rounds x
--phase-iterations`` iterations (each ASL phase runs exactly ``--phase-iterations``; a phase
with no data is skipped, so an ASL run may finish more rounds in the budget). Measured:

- EM on the held-out ``test`` panel (never trained on; the interleaved panel of
  bench_search), every ``--eval-every`` iterations and at the end;
- per ASL round: the GRM's accuracy on held-out dev questions (gold answer: correct, another
  question's gold: wrong; ``asl/grm_eval_accuracy``), the PG's parse and keep rates, and in
  the PM phase the GRM-judged reward against exact match with the generator's own answer
  (``asl/pm_reward`` − ``asl/pm_env_success``: the reward-hacking gap) and their agreement.

Output (``--out``): ``results.json``, ``table.md`` (test EM before and after, mean ±
sample std over seeds and the counts pooled over seeds with 95 % Wilson intervals and the
paired test of the start against every seed's final evaluation; the papers' comparisons
rule reward < ASL and frozen GRM < ASL with the seed-level difference ± s.e. and the paired
test over (seed, question) pairs, ``_stats_table.py``; the rounds), ``curves.png`` (test EM
against iteration) and ``rounds.png`` (GRM held-out accuracy and the gap per round).

``--recipe asl_search_warm`` runs the arms from the roles' warm start (the generator and the
GRM taught on the training split's labelled pairs, ``sft.asl_roles``; the policy untaught).
That warm start is made once, outside the benchmark, and every arm starts from it:
``--init-from`` is then required, and every run's own SFT is switched off.

    python benchmarks/bench_asl.py [--recipe asl_search] [--seeds 0 1 2] [--rounds 2]
        [--phase-iterations 1] [--panel 24] [--jobs 1] [--init-from DIR] [--set key=value ...]
        [--summarize]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _stats_table as st
import numpy as np
from bench_learning import final_runs, minutes, plot, read_run, run_cli, slug, stopped_note
from bench_search import hop_success, ms, run_minutes, train_recipe, write_panel_qa

RECIPE = "asl_search"
ARMS = {"Rule reward (EM)": ["asl.enabled=false"], "ASL": [], "ASL, frozen GRM": ["asl.train_grm=false"]}
#: the papers' claims on final test EM, worse first: ASL beats RLVR with the rule reward (Sun et
#: al., 2025), and a frozen GRM is reward-hacked, so it ends below the trained one
PAPER_ORDER = [("Rule reward (EM)", "ASL"), ("ASL, frozen GRM", "ASL")]
#: per-round statistics: (metrics key, label), means over the round's iterations that log it
ROUND_KEYS = {
    "grm_eval_accuracy": "asl/grm_eval_accuracy",
    "pg_parsed": "asl/pg_parsed",
    "pg_kept": "asl/pg_kept",
    "pm_reward": "asl/pm_reward",
    "pm_env_success": "asl/pm_env_success",
    "pm_agrees": "asl/pm_grm_agrees_with_env",
}


def folder(arm: str) -> str:
    """A run folder's name for an arm: ``folder("ASL, frozen GRM") == "asl_frozen_grm"``."""
    return "".join(c for c in slug(arm) if c.isalnum() or c == "_")


def rounds_of(records: list[dict]) -> list[dict]:
    """Per ASL round (``asl/round`` of the iteration records), the mean of every
    :data:`ROUND_KEYS` metric the round logged, in percent, and ``gap`` = pm_reward −
    pm_env_success (percentage points) when the round had a PM phase.

    >>> rows = [{"iteration": 0, "asl/round": 0, "asl/pg_parsed": 0.5},
    ...         {"iteration": 1, "asl/round": 0, "asl/pm_reward": 0.75, "asl/pm_env_success": 0.25},
    ...         {"iteration": 2, "asl/round": 0, "asl/pm_reward": 0.25, "asl/pm_env_success": 0.25,
    ...          "asl/grm_eval_accuracy": 0.5}]
    >>> out = rounds_of(rows)[0]
    >>> out["pm_reward"], out["pm_env_success"], out["gap"], out["grm_eval_accuracy"], out["pg_parsed"]
    (50.0, 25.0, 25.0, 50.0, 50.0)
    """
    by_round: dict[int, list[dict]] = {}
    for r in records:
        if "iteration" in r and "asl/round" in r:
            by_round.setdefault(int(r["asl/round"]), []).append(r)
    out = []
    for number, rows in sorted(by_round.items()):
        row: dict = {"round": number}
        for name, key in ROUND_KEYS.items():
            values = [r[key] for r in rows if key in r]
            if values:
                row[name] = 100 * float(np.mean(values))
        if "pm_reward" in row and "pm_env_success" in row:
            row["gap"] = row["pm_reward"] - row["pm_env_success"]
        out.append(row)
    return out


def read_arm(run_dir: Path, arm: str, seed: int) -> dict | None:
    """bench_learning's test-panel curve of the run plus its ASL rounds."""
    result = read_run(run_dir, arm, seed, minutes=run_minutes(run_dir))
    if result is None:
        return None
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    result["rounds"] = rounds_of(records)
    return result


def train_one(*, recipe: str, arm: str, seed: int, overrides: list[str], out: Path, threads: int) -> dict | None:
    run_dir = out / f"{folder(arm)}_seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    train_recipe(recipe, [*overrides, *ARMS[arm], f"seed={seed}", "eval.at_start=false"], run_dir, threads)
    result = read_arm(run_dir, arm, seed)
    if result is not None:
        print(f"{arm} seed {seed}: {result['after']:.1f}% EM at iteration {result['curve'][-1][0]}", flush=True)
    return result


def _cell(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if key in r]
    return ms(values) if values else "-"


def table(results: list[dict], before: float | None, arms: list[str], header: str, warm: dict | None = None) -> str:
    """Test EM before/after per arm (``warm``: the start's counts and outcomes), the
    papers' comparisons, then per ASL arm and round the GRM and hacking columns (mean ±
    sample std over the seeds that reached that round)."""
    start = f"{before:.1f}" if before is not None else "-"
    columns = ["arm", "test EM before %", "after %", "after − before", "rounds done", "runs", "min/run"]
    lines = [header, "", *st.md_header([*columns, *st.BEFORE_AFTER_COLUMNS])]
    for arm in arms:
        rows = [r for r in results if r["config"] == arm]
        if rows:
            gain = ms([r["after"] - before for r in rows]) if before is not None else "-"
            done = ms([float(len(r["rounds"])) for r in rows]) if any(r["rounds"] for r in rows) else "-"
            counts = st.before_after_cells(warm, [r.get("final") or {} for r in rows])
            lines.append(f"| {arm} | {start} | {ms([r['after'] for r in rows])} | {gain} | {done} | "
                         f"{len(rows)} | {minutes(rows)} | " + " | ".join(counts) + " |")  # fmt: skip
    order = st.ordering_table(PAPER_ORDER, final_runs([r for r in results if r["config"] in arms]))
    lines += [""] + order if order else []
    lines += ["", "| arm | round | GRM held-out acc % | PG parsed % | PG kept % | PM GRM reward % | "
              "PM EM (generator's answer) % | gap (pp) | GRM agrees with EM % | seeds |", "|---|" + "---|" * 9]  # fmt: skip
    for arm in arms:
        rows = [r for r in results if r["config"] == arm and r["rounds"]]
        for number in sorted({x["round"] for r in rows for x in r["rounds"]}):
            per = [x for r in rows for x in r["rounds"] if x["round"] == number]
            cells = [_cell(per, k) for k in ("grm_eval_accuracy", "pg_parsed", "pg_kept", "pm_reward",
                                              "pm_env_success", "gap", "pm_agrees")]  # fmt: skip
            lines.append(f"| {arm} | {number} | " + " | ".join(cells) + f" | {len(per)} |")
    return "\n".join(lines) + "\n"


def plot_rounds(results: list[dict], path: Path) -> None:
    """GRM held-out accuracy and the reward-hacking gap per round, mean ± 1 sample std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in zip(
        axes, ("grm_eval_accuracy", "gap"), ("GRM held-out accuracy (%)", "GRM reward − EM (pp)")
    ):
        for arm in dict.fromkeys(r["config"] for r in results):
            points: dict[int, list[float]] = {}
            for r in results:
                for x in r["rounds"] if r["config"] == arm else []:
                    if key in x:
                        points.setdefault(x["round"], []).append(x[key])
            if points:
                xs = sorted(points)
                mean = np.array([np.mean(points[x]) for x in xs])
                std = np.array([np.std(points[x], ddof=1) if len(points[x]) > 1 else 0.0 for x in xs])
                ax.plot(xs, mean, marker="o", label=arm)
                ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
        ax.set_xlabel("ASL round")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def summarize(out: Path, arms: list[str], seeds: list[int], header: str) -> str:
    start = hop_success(out / "warm_start_eval", "before")
    before = start["all"] if start else None
    warm = st.panel_evaluation(st.eval_record(out / "warm_start_eval", "before", "test"))
    results = [r for s in seeds for a in arms if (r := read_arm(out / f"{folder(a)}_seed{s}", a, s))]
    header += stopped_note(results)
    text = table(results, before, arms, header, warm)
    (out / "table.md").write_text(text)
    (out / "results.json").write_text(json.dumps({"before": before, "start": warm, "runs": results}, indent=1))
    if results and before is not None:
        plot(results, before, out / "curves.png")
        plot_rounds(results, out / "rounds.png")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=RECIPE, help="the ASL recipe every arm runs (asl_search_warm: --init-from)")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=2, help="ASL rounds of the budget (3 phases each)")
    parser.add_argument("--phase-iterations", type=int, default=1, help="iterations of every ASL phase")
    parser.add_argument("--panel", type=int, default=24, help="test questions on the panel")
    parser.add_argument("--eval-every", type=int, default=0, help="test evaluation every k iterations (0: a round)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (each then uses 1 thread)")
    parser.add_argument("--init-from", help="a checkpoint every run starts from (default: the recipe's model)")
    parser.add_argument("--out", default="runs/bench_asl")
    parser.add_argument("--set", action="append", default=[], help="override applied to every run")
    parser.add_argument("--summarize", action="store_true", help="only tabulate the runs already in --out")
    args = parser.parse_args()
    from roleagent.config import load_config

    if load_config(args.recipe).sft.enabled and not args.init_from:
        parser.error(f"{args.recipe} warm-starts before RL: make that warm start once and pass it as --init-from")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    p = args.phase_iterations
    budget = [f"iterations={3 * args.rounds * p}", f"asl.phase_min_iterations={p}", f"asl.phase_max_iterations={p}",
              f"eval.every={args.eval_every or 3 * p}"]  # fmt: skip
    panel = [f"env.kwargs.qa={write_panel_qa(out)}", "eval.splits=[test]", f"eval.max_tasks={args.panel}"]
    start = [f"model.init_from={args.init_from}", "sft.enabled=false"] if args.init_from else []
    common = [*args.set, *panel, *budget, *start]
    if not args.summarize:
        if hop_success(out / "warm_start_eval", "before") is None:
            sets = [*common, "asl.enabled=false"]
            command = ["eval", args.recipe, "--out", str(out / "warm_start_eval"), "--label", "before"]
            run_cli([*command, *[x for s in sets for x in ("--set", s)]], out / "warm_start_eval.log")
        threads = 1 if args.jobs > 1 else 0
        jobs = [(arm, seed) for seed in args.seeds for arm in args.arms]  # seed-major
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(lambda j: train_one(recipe=args.recipe, arm=j[0], seed=j[1], overrides=common, out=out,
                                              threads=threads), jobs))  # fmt: skip
    header = (
        f"ASL vs rule reward on search QA: held-out test panel (first {args.panel} questions, types interleaved, "
        f"greedy, EM); from `{args.init_from or 'the recipe model'}`; recipe {args.recipe} with --set "
        f"{' '.join([*args.set, *panel[1:], *budget])}; seeds {args.seeds}"
        + ("" if args.summarize else f"; {(time.perf_counter() - started) / 60:.0f} min in all")
    )
    print(summarize(out, args.arms, args.seeds, header), flush=True)


if __name__ == "__main__":
    main()
