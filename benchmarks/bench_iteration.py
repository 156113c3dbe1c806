"""Iteration cost, old path vs new path: Role-Agent vs GiGPO, Agent-In-World's share, episodes
per CPU-minute and peak memory, in one run with the same recipe, seed and tasks.

Methods: GiGPO, Role-Agent (WIA on), Role-Agent with Agent-In-World (policy analyst and
retriever). Paths:

* ``old``  — no prefix KV reuse, sliding-window prompts, the World-In-Agent prediction as
  a separate prompt, one training sample per turn;
* ``new``  — prefix KV reuse (32768 tokens), the prediction prompt as a continuation of
  the action prompt (its KV reused), window prompts (``optim.pack_episodes`` is on, the
  shipped default, but window turns never nest, so nothing is packed);
* ``full`` — as ``new``, with the full interaction as context (the prompt only grows, so
  each turn reuses the previous turn's KV) and each episode trained as one packed sequence.

Each (method, path) pair runs one training iteration in its own subprocess, so its peak RSS
(``ru_maxrss``) is its own. The paper reports ~5% total overhead for Role-Agent's extra
roles (Role-Agent, Wang et al., 2026, arXiv 2606.10917, §4.4). "Episodes per CPU-minute"
is episodes per minute of iteration wall time on this machine (rollout, update and
Agent-In-World included), for the full Role-Agent method.

    python benchmarks/bench_iteration.py [--recipe role_agent_alfworld] [--set key=value ...]
    python benchmarks/bench_iteration.py --smoke   # tiny model, scripted env: checks it runs
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time

METHODS = {
    "GiGPO": ["algo.name=gigpo", "wia.enabled=false"],
    "Role-Agent (WIA)": ["algo.name=role_agent", "wia.enabled=true"],
    "Role-Agent (WIA+AIW)": [
        "algo.name=role_agent",
        "wia.enabled=true",
        "aiw.enabled=true",
        "aiw.analyst=policy",
        "aiw.retriever=policy",
    ],
}
PATHS = {
    "old": [
        "rollout.prefix_cache_tokens=0",
        "rollout.context=window",
        "wia.prompt=separate",
        "optim.pack_episodes=false",
    ],
    "new": [
        "rollout.prefix_cache_tokens=32768",
        "rollout.context=window",
        "wia.prompt=continuation",
        "optim.pack_episodes=true",
    ],
    "full": [
        "rollout.prefix_cache_tokens=32768",
        "rollout.context=full",
        "wia.prompt=continuation",
        "optim.pack_episodes=true",
    ],
}
SMOKE = [
    "model.name=tiny",
    "model.device=cpu",
    "env.name=scripted",
    "env.kwargs={}",
    "env.eval_split=eval",
    "env.processes=false",
    "rollout.tasks_per_iter=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=6",
    "wia.max_new_tokens=6",
    "aiw.analysis_max_new_tokens=8",
    "aiw.retrieval_max_new_tokens=8",
    "threads=1",
]
PHASES = ["time/generate_s", "time/extension_s", "time/env_s", "time/update_s", "time/aiw_s", "time/iteration_s"]


def run_one(recipe: str, overrides: list[str]) -> dict:
    """One training iteration in this process; its metrics, CPU seconds and peak RSS (MiB)."""
    from roleagent.config import load_config
    from roleagent.trainer import Trainer

    run_dir = tempfile.mkdtemp(prefix="bench_iter_")
    cfg = load_config(recipe, [*overrides, f"run_dir={run_dir}", "tensorboard=false", "eval.at_start=false"])
    trainer = Trainer(cfg, resume=False, quiet=True)
    try:
        cpu = time.process_time()
        record = trainer.train_iteration(0)
        record["cpu_s"] = time.process_time() - cpu
        record["episodes"] = cfg.rollout.tasks_per_iter * cfg.rollout.group_size
    finally:
        trainer.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    record["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {k: v for k, v in record.items() if isinstance(v, int | float)}


def spawn(recipe: str, overrides: list[str]) -> dict:
    """``run_one`` in a fresh interpreter (its own peak RSS); the record comes back as JSON."""
    cmd = [sys.executable, __file__, "--worker", "--recipe", recipe]
    for item in overrides:
        cmd += ["--set", item]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"variant failed ({' '.join(overrides)}): exit {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(rows: dict[tuple[str, str], dict], paths: list[str]) -> None:
    print(
        f"{'variant':30s}" + "".join(f"{p.split('/')[1][:-2]:>11s}" for p in PHASES) + f"{'success':>9s}{'RSS MiB':>9s}"
    )
    for (method, path), r in rows.items():
        cells = "".join(f"{r.get(p, 0.0):11.1f}" for p in PHASES)
        print(
            f"{method + ' [' + path + ']':30s}{cells}{r.get('train/success', float('nan')):9.2f}{r['peak_rss_mib']:9.0f}"
        )

    def ratio(path: str) -> float:
        return rows["Role-Agent (WIA)", path]["time/iteration_s"] / rows["GiGPO", path]["time/iteration_s"]

    def aiw_share(path: str) -> float:
        full = rows["Role-Agent (WIA+AIW)", path]
        return full.get("time/aiw_s", 0.0) / full["time/iteration_s"]

    def per_minute(path: str) -> float:
        r = rows["Role-Agent (WIA+AIW)", path]
        return r["episodes"] / (r["time/iteration_s"] / 60.0)

    others = [p for p in paths if p != "new"]
    print(
        f"\nRole-Agent (WIA) / GiGPO iteration time = {ratio('new'):.2f}  ("
        + ", ".join(f"{p}: {ratio(p):.2f}" for p in others)
        + ")"
    )
    print(
        f"Agent-In-World share of the full iteration = {aiw_share('new'):.1%}  ("
        + ", ".join(f"{p}: {aiw_share(p):.1%}" for p in others)
        + f"; {rows['Role-Agent (WIA+AIW)', 'new'].get('aiw/n_failures', 0):.0f} failures analysed)"
    )
    print(
        f"episodes per CPU-minute new / old = {per_minute('new') / per_minute('old'):.2f}  "
        f"(full / old: {per_minute('full') / per_minute('old'):.2f}; old {per_minute('old'):.1f}, "
        f"new {per_minute('new'):.1f}, full {per_minute('full'):.1f} episodes/min)"
    )
    for path in paths:
        peak = max(r["peak_rss_mib"] for (_, p), r in rows.items() if p == path)
        print(f"peak RSS [{path}] = {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="role_agent_alfworld")
    parser.add_argument("--set", action="append", default=[], help="config override for every variant")
    parser.add_argument("--smoke", action="store_true", help="tiny model, scripted env, 1 iteration: checks it runs")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_one(args.recipe, args.set)))
        return
    base = [*SMOKE, *args.set] if args.smoke else list(args.set)
    rows = {}
    for path, path_overrides in PATHS.items():
        for method, method_overrides in METHODS.items():
            record = spawn(args.recipe, [*method_overrides, *path_overrides, *base])
            rows[method, path] = record
            print(f"{method} [{path}]: {record['time/iteration_s']:.1f}s", flush=True)
    print(f"\nrecipe {args.recipe} {' '.join(base)}")
    report(rows, list(PATHS))


if __name__ == "__main__":
    main()
