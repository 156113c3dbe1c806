"""Learning: GRPO, GiGPO and Role-Agent from the same embedded model on one fixed panel.

Each algorithm trains from the same initial policy with the same recipe, seeds and panel;
the table gives panel success before (shared: the initial policy is the same) and after
training, mean ± std over seeds. Whatever comes out is the result: with a 135M model and a
CPU-sized budget the differences are small and noisy.

    python benchmarks/bench_learning.py [--recipe role_agent_alfworld] [--seeds 0 1] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from roleagent.config import load_config
from roleagent.trainer import Trainer

ALGORITHMS = {
    "GRPO": ["algo.name=grpo", "wia.enabled=false"],
    "GiGPO": ["algo.name=gigpo", "wia.enabled=false"],
    "Role-Agent": ["algo.name=role_agent", "wia.enabled=true"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="role_agent_alfworld")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--algos", nargs="+", default=list(ALGORITHMS))
    parser.add_argument("--out", default="runs/bench_learning")
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()

    results: dict[str, dict[str, list[float]]] = {}
    for algo in args.algos:
        for seed in args.seeds:
            run_dir = Path(args.out) / f"{algo.lower()}_seed{seed}"
            cfg = load_config(args.recipe, [*ALGORITHMS[algo], f"seed={seed}", f"run_dir={run_dir}",
                                            "tensorboard=false", *args.set])
            trainer = Trainer(cfg, quiet=True)
            try:
                evals = {e.label: e.table["All"] for e in trainer.run()}
            finally:
                trainer.close()
            row = results.setdefault(algo, {"before": [], "after": []})
            row["before"].append(evals["before"])
            row["after"].append(evals["after"])
            print(f"{algo} seed {seed}: before {evals['before']:.1f}% after {evals['after']:.1f}%", flush=True)

    cfg = load_config(args.recipe, args.set)
    print(f"\nrecipe {args.recipe} {' '.join(args.set)}: {cfg.iterations} iterations x "
          f"{cfg.rollout.tasks_per_iter} tasks x {cfg.rollout.group_size} rollouts, "
          f"panel {cfg.env.eval_split} (first {cfg.eval.max_tasks or 'all'} tasks), seeds {args.seeds}")
    print(f"{'algorithm':12s}{'before %':>14s}{'after %':>14s}")
    for algo, row in results.items():
        cells = [f"{np.mean(v):6.1f} ± {np.std(v):4.1f}" for v in (row["before"], row["after"])]
        print(f"{algo:12s}{cells[0]:>14s}{cells[1]:>14s}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
