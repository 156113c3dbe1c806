"""Learning: the Role-Agent ablation table (Role-Agent, Wang et al., 2026, arXiv 2606.10917, Table 3) from the embedded
model.

Each configuration is a shipped recipe, so the table measures exactly what users run:

    Role-Agent   role_agent_aiw_alfworld     World-In-Agent + Agent-In-World
    w/o AIW      role_agent_no_aiw_alfworld  World-In-Agent only
    w/o WIA      role_agent_no_wia_alfworld  Agent-In-World only (A = A^S + alpha A^E)
    GiGPO        gigpo_alfworld
    GRPO         grpo_alfworld

All runs start from the same policy (LoRA adapters start at zero) and are evaluated greedily
on the same fixed panel, so "before" is one shared evaluation of the initial policy; each
run only evaluates "after" (eval.at_start=false). The table gives mean ± std over seeds of
panel success after training and of training-rollout success (all iterations pooled), the
share of Agent-In-World batches drawn from retrieved tasks, and minutes per run.

Runs go to subprocesses (`roleagent train`), `--jobs` at a time; with more than one job each
uses one torch thread, because two processes that each want every core slow each other ~10x.

    python benchmarks/bench_learning.py [--configs Role-Agent GRPO] [--seeds 0 1 2] [--jobs 2]
                                        [--set key=value ...]

The CPU setting used for benchmarks/RESULTS.md is the `--set` list printed with the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from roleagent.config import load_config
from roleagent.trainer import Trainer

CONFIGS = {
    "Role-Agent": "role_agent_aiw_alfworld",
    "w/o AIW": "role_agent_no_aiw_alfworld",
    "w/o WIA": "role_agent_no_wia_alfworld",
    "GiGPO": "gigpo_alfworld",
    "GRPO": "grpo_alfworld",
}


def run_dir_of(out: Path, name: str, seed: int) -> Path:
    slug = name.lower().replace("/", "").replace(" ", "_").replace("-", "_")
    return out / f"{slug}_seed{seed}"


def initial_evaluation(*, recipe: str, overrides: list[str], out: Path) -> float:
    """Panel success (%) of the initial policy, shared by every configuration and seed."""
    cfg = load_config(recipe, [*overrides, f"run_dir={out / 'initial_policy'}", "tensorboard=false"])
    trainer = Trainer(cfg, quiet=True, resume=False)
    try:
        return trainer.evaluate("before").table["All"]
    finally:
        trainer.close()


def train_one(*, name: str, seed: int, overrides: list[str], out: Path, threads: int) -> dict:
    """Train one (configuration, seed) in a subprocess and read its metrics.jsonl."""
    run_dir = run_dir_of(out, name, seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    sets = [
        *overrides,
        f"seed={seed}",
        f"run_dir={run_dir}",
        "tensorboard=false",
        "eval.at_start=false",
        f"threads={threads}",
    ]
    command = [sys.executable, "-m", "roleagent.cli", "train", CONFIGS[name], "--no-resume"]
    for item in sets:
        command += ["--set", item]
    started = time.perf_counter()
    with open(run_dir / "train.log", "w") as log:
        rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
    minutes = (time.perf_counter() - started) / 60
    if rc != 0:
        raise RuntimeError(f"{name} seed {seed} failed (exit {rc}); see {run_dir / 'train.log'}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    iterations = [r for r in records if "iteration" in r]
    after = next(r for r in records if r.get("eval") == "after")
    result = {
        "config": name,
        "seed": seed,
        "minutes": minutes,
        "after": 100 * after["eval/success"],
        "train_success": 100 * float(np.mean([r["train/success"] for r in iterations])),
        "train_success_by_iteration": [100 * r["train/success"] for r in iterations],
        "retrieved_share": [r["aiw/retrieved_share"] for r in iterations if "aiw/retrieved_share" in r],
    }
    print(
        f"{name} seed {seed}: after {result['after']:.1f}%  train {result['train_success']:.1f}%  ({minutes:.1f} min)",
        flush=True,
    )
    return result


def mean_std(values: list[float]) -> str:
    """Mean ± sample standard deviation (ddof=1) over seeds."""
    if not values:
        return "-"
    return f"{np.mean(values):5.1f} ± {np.std(values, ddof=1) if len(values) > 1 else 0.0:4.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (each then uses 1 thread)")
    parser.add_argument("--out", default="runs/bench_learning")
    parser.add_argument("--set", action="append", default=[], help="override applied to every run")
    args = parser.parse_args()
    out = Path(args.out)
    started = time.perf_counter()

    before = initial_evaluation(recipe=CONFIGS[args.configs[0]], overrides=args.set, out=out)
    print(f"initial policy: {before:.1f}%", flush=True)

    # Seed-major order: an interrupted benchmark still has every configuration for the first seeds.
    runs = [(name, seed) for seed in args.seeds for name in args.configs]
    threads = 1 if args.jobs > 1 else 0
    with ThreadPoolExecutor(max_workers=args.jobs) as executor:
        results = list(
            executor.map(
                lambda run: train_one(name=run[0], seed=run[1], overrides=args.set, out=out, threads=threads), runs
            )
        )

    cfg = load_config(CONFIGS[args.configs[0]], args.set)
    print(
        f"\nrecipes with --set {' '.join(args.set) or '(none)'}: {cfg.iterations} iterations x "
        f"{cfg.rollout.tasks_per_iter} tasks x {cfg.rollout.group_size} rollouts, env {cfg.env.kwargs}, "
        f"panel {cfg.env.eval_split} (first {cfg.eval.max_tasks or 'all'} tasks, greedy), seeds {args.seeds}, "
        f"{(time.perf_counter() - started) / 60:.0f} min in all"
    )
    print(f"{'config':12s}{'before %':>10s}{'after %':>15s}{'train %':>15s}{'retrieved':>11s}{'min/run':>9s}")
    for name in args.configs:
        rows = [r for r in results if r["config"] == name]
        shares = [s for r in rows for s in r["retrieved_share"]]
        print(
            f"{name:12s}{before:10.1f}{mean_std([r['after'] for r in rows]):>15s}"
            f"{mean_std([r['train_success'] for r in rows]):>15s}"
            f"{(f'{np.mean(shares):.2f}' if shares else '-'):>11s}"
            f"{np.mean([r['minutes'] for r in rows]):9.1f}"
        )
    (out / "results.json").write_text(json.dumps({"before": before, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
