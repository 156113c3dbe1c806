"""Agent-R's training-data arms on this machine: good-trajectory SFT, direct revision and
Agent-R from ONE shared warm start (Yuan et al., 2025, arXiv 2501.11425: direct revision and
Agent-R are Table 2's rows; the paper has no good-only row, the nearest arm is Fig. 3's
"w/ Optimal + Good"; loop counts are Figure 4's).

Arms (each a shipped recipe; the same iterations, trees and panel)::

    Warm start       the shared SFT checkpoint, evaluated once (the start of every arm)
    Good only        agent_r_<env>_good_only: self-generated good trajectories only
    Direct revision  agent_r_<env>_direct: no judge, t' = the bad path's last step
    Agent-R          agent_r_<env>: the actor judges; t' = its first Bad step

Protocol: one SFT checkpoint from the environment's expert on TRAINING tasks
(``roleagent sft --expert``; or ``--init-from``), every run starts from it with fresh
adapters, and is evaluated greedily on the recipe's panel at the end; the panel is never
trained on. Per run it also reads the final evaluation's rollouts for the paper's loop
statistic (Figure 4: the most back-to-back repetitions of an action sequence of length 1,
2, 3, averaged over panel episodes; ``roleagent.algos.agent_r.loop_count``) and the
recovery statistics: how many panel episodes wrote the revision signal (a reflection
without an action, ``roleagent.methods.agent_r.data.is_revision_turn``) and how many of
those still succeeded.

Output (``--out``): ``results.json`` and ``table.md`` (mean ± sample std over seeds; the
success counts pooled over seeds with 95 % Wilson intervals and the paired test of the
warm start against every seed's final evaluation; the paper's orderings good only <
direct revision < Agent-R with the seed-level difference ± s.e. and the paired test over
(seed, goal) pairs, ``_stats_table.py``).

    python benchmarks/bench_agent_r.py --env textcraft [--seeds 0 1 2] [--jobs 2]
        [--init-from DIR | --expert-tasks 48] [--set key=value ...] [--summarize]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _stats_table as st
import numpy as np
from bench_learning import final_runs, mean_std, run_cli, slug, warm_start

from roleagent.algos.agent_r import loop_count
from roleagent.methods.agent_r.data import is_revision_turn

ARMS = {"Good only": "_good_only", "Direct revision": "_direct", "Agent-R": ""}  # recipe suffixes
#: the paper's orderings, worst first: direct revision below Agent-R (Table 2, Fig. 3), both
#: above good trajectories without revisions (Fig. 3's "w/ Optimal + Good", the nearest arm to
#: good only; Table 2 has no good-only row)
PAPER_ORDER = [("Good only", "Direct revision"), ("Good only", "Agent-R"), ("Direct revision", "Agent-R")]


def train_one(*, recipe: str, arm: str, seed: int, overrides: list[str], out: Path, threads: int) -> dict | None:
    run_dir = out / f"{slug(arm)}_seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    sets = [
        f"threads={threads}",
        *overrides,
        f"seed={seed}",
        f"run_dir={run_dir}",
        "report_to=[jsonl]",
    ]  # --set threads wins
    sets.append("eval.at_start=false")  # the start is the shared warm-start evaluation
    started = time.perf_counter()
    try:
        run_cli(
            ["train", recipe + ARMS[arm], "--no-resume", *[x for s in sets for x in ("--set", s)]],
            run_dir / "train.log",
        )
    except RuntimeError as error:
        print(error, flush=True)
    (run_dir / "bench_minutes.txt").write_text(f"{(time.perf_counter() - started) / 60:.2f}\n")
    result = read_run(run_dir, arm, seed)
    if result is not None:
        print(f"{arm} seed {seed}: {result['success']:.1f}% ({result['minutes']:.1f} min)", flush=True)
    return result


def read_run(run_dir: Path, arm: str, seed: int, label: str = "after") -> dict | None:
    """Final panel success (%) with its counts and per-game outcomes (``final``), the loop
    and recovery statistics, the data counts and the run's wall minutes
    (``bench_minutes.txt``, written by :func:`train_one`)."""
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()] if run_dir.exists() else []
    final = next((r for r in records if r.get("eval") == label), None)
    rollouts = run_dir / "rollouts" / f"eval_{label}.jsonl"
    if final is None or not rollouts.exists():
        return None
    episodes = [json.loads(line) for line in rollouts.read_text().splitlines() if line.strip()]
    actions = [[s.get("action") or "(invalid)" for s in e["steps"]] for e in episodes]
    revised = [e for e in episodes if any(is_revision_turn(s.get("action_text", "")) for s in e["steps"])]
    iterations = [r for r in records if "iteration" in r]
    timing = run_dir / "bench_minutes.txt"
    minutes = float(timing.read_text()) if timing.exists() else float("nan")
    return {
        "arm": arm,
        "seed": seed,
        "minutes": minutes,
        "success": 100 * final["eval/success"],
        "final": st.panel_evaluation(final),
        "loops": {n: float(np.mean([loop_count(a, n) for a in actions])) for n in (1, 2, 3)},
        "revised": len(revised),
        "revised_success": sum(bool(e.get("success")) for e in revised),
        "episodes": len(episodes),
        "examples": [r.get("update/examples", 0.0) for r in iterations],
        "revisions": [r.get("agent_r/revision", 0.0) for r in iterations],
        "goods": [r.get("agent_r/good", 0.0) for r in iterations],
    }


def table(results: list[dict], start: dict | None, env: str) -> str:
    """Per arm mean ± sample std over seeds, the pooled counts and the paired test against
    the warm start (``start``); then the paper's orderings."""
    warm = (start or {}).get("final") or {}
    lines = st.md_header([f"method ({env})", "success %", "loop count, length 1 / 2 / 3", "revised episodes (succeeded)",
                       "good / revision examples per iteration", "runs", "min/run", "success, pooled over seeds, 95% CI",
                       "warm start → after, paired over (seed, goal)"])  # fmt: skip
    if start is not None:
        loops = " / ".join(f"{start['loops'][n]:.2f}" for n in (1, 2, 3))
        lines.append(f"| Warm start | {start['success']:.1f} | {loops} | - | - | 1 | - | {st.rate_cell([warm])} | - |")
    for arm in ARMS:
        rows = [r for r in results if r["arm"] == arm]
        if not rows:
            continue
        loops = " / ".join(mean_std([r["loops"][n] for r in rows]).strip() for n in (1, 2, 3))
        revised = f"{sum(r['revised'] for r in rows)} of {sum(r['episodes'] for r in rows)}"
        revised += f" ({sum(r['revised_success'] for r in rows)})"
        goods = np.mean([g for r in rows for g in r["goods"]]) if rows[0]["goods"] else 0.0
        revisions = np.mean([v for r in rows for v in r["revisions"]]) if rows[0]["revisions"] else 0.0
        minutes = [r["minutes"] for r in rows if np.isfinite(r["minutes"])]
        counts = st.before_after_cells(warm, [r.get("final") or {} for r in rows])[1:]
        lines.append(
            f"| {arm} | {mean_std([r['success'] for r in rows]).strip()} | {loops} | {revised} | "
            f"{goods:.1f} / {revisions:.1f} | {len(rows)} | {np.mean(minutes) if minutes else float('nan'):.1f} | "
            + " | ".join(counts)
            + " |"
        )
    order = st.ordering_table(PAPER_ORDER, final_runs(results, arm="arm", value="success"))
    return "\n".join([*lines, *([""] + order if order else [])]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="textcraft", choices=["textcraft", "scienceworld"])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (each then uses 1 thread)")
    parser.add_argument("--init-from", help="an SFT checkpoint every run starts from (else one is built)")
    parser.add_argument("--expert-tasks", type=int, default=48, help="training tasks for the built warm start")
    parser.add_argument("--out", default=None)
    parser.add_argument("--set", action="append", default=[], help="override applied to every run")
    parser.add_argument("--summarize", action="store_true", help="only tabulate the runs already in --out")
    args = parser.parse_args()
    recipe = f"agent_r_{args.env}"
    out = Path(args.out or f"runs/bench_agent_r_{args.env}")
    out.mkdir(parents=True, exist_ok=True)
    if not args.summarize:
        init = args.init_from or str(warm_start(recipe=recipe, overrides=args.set, out=out, tasks=args.expert_tasks))
        common = [*args.set, f"model.init_from={init}", "sft.enabled=false"]
        start_dir = out / "warm_start_eval"
        if read_run(start_dir, "Warm start", 0, label="before") is None:
            command = ["eval", recipe, "--out", str(start_dir), "--label", "before"]
            run_cli([*command, *[x for s in common for x in ("--set", s)]], out / "warm_start_eval.log")
        threads = 1 if args.jobs > 1 else 0
        jobs = [(arm, seed) for seed in args.seeds for arm in args.arms]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(
                pool.map(
                    lambda job: train_one(
                        recipe=recipe, arm=job[0], seed=job[1], overrides=common, out=out, threads=threads
                    ),
                    jobs,
                )
            )
    results = [r for arm in ARMS for seed in args.seeds if (r := read_run(out / f"{slug(arm)}_seed{seed}", arm, seed))]
    start = read_run(out / "warm_start_eval", "Warm start", 0, label="before")
    (out / "results.json").write_text(json.dumps({"start": start, "runs": results}, indent=1))
    text = table(results, start, args.env)
    (out / "table.md").write_text(text)
    print(text)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
