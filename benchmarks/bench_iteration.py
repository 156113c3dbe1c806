"""Iteration cost of Role-Agent vs GiGPO at equal settings, and Agent-In-World's share.

Builds three trainers from the same recipe, seed and tasks — GiGPO, Role-Agent (WIA on),
Role-Agent with Agent-In-World (policy analyst and retriever) — and times one training
iteration of each (rollout, advantages, update, AIW). The paper reports ~5% total overhead
for Role-Agent's extra roles (Role-Agent, Wang et al., 2026, arXiv 2606.10917, §4.4); here the 135M model and short episodes make
the prediction pass a larger share, which the table shows.

    python benchmarks/bench_iteration.py [--recipe role_agent_alfworld] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile

from roleagent.config import load_config
from roleagent.trainer import Trainer

VARIANTS = {
    "GiGPO": ["algo.name=gigpo", "wia.enabled=false"],
    "Role-Agent (WIA)": ["algo.name=role_agent", "wia.enabled=true"],
    "Role-Agent (WIA+AIW)": ["algo.name=role_agent", "wia.enabled=true", "aiw.enabled=true"],
}
PHASES = ["time/generate_s", "time/extension_s", "time/env_s", "time/update_s", "time/aiw_s", "time/iteration_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="role_agent_alfworld")
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()

    rows = {}
    for name, overrides in VARIANTS.items():
        run_dir = tempfile.mkdtemp(prefix="bench_iter_")
        cfg = load_config(
            args.recipe, [*overrides, f"run_dir={run_dir}", "tensorboard=false", "eval.at_start=false", *args.set]
        )
        trainer = Trainer(cfg, resume=False, quiet=True)
        try:
            record = trainer.train_iteration(0)
        finally:
            trainer.close()
            shutil.rmtree(run_dir, ignore_errors=True)
        rows[name] = record
        print(f"{name}: done in {record['time/iteration_s']:.1f}s", flush=True)

    print(f"\nrecipe {args.recipe} {' '.join(args.set)}")
    print(f"{'variant':22s}" + "".join(f"{p.split('/')[1][:-2]:>11s}" for p in PHASES) + f"{'success':>9s}")
    for name, record in rows.items():
        print(
            f"{name:22s}" + "".join(f"{record.get(p, 0.0):11.1f}" for p in PHASES) + f"{record['train/success']:9.2f}"
        )
    base = rows["GiGPO"]["time/iteration_s"]
    wia = rows["Role-Agent (WIA)"]
    full = rows["Role-Agent (WIA+AIW)"]
    print(f"\nRole-Agent (WIA) / GiGPO iteration time = {wia['time/iteration_s'] / base:.2f}")
    print(f"prediction pass share of the WIA iteration = {wia['time/extension_s'] / wia['time/iteration_s']:.1%}")
    print(
        f"Agent-In-World share of the full iteration = {full['time/aiw_s'] / full['time/iteration_s']:.1%} "
        f"({full.get('aiw/n_failures', 0):.0f} failures analysed)"
    )


if __name__ == "__main__":
    main()
