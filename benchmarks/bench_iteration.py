"""Iteration cost, old path vs new path: Role-Agent vs GiGPO, Agent-In-World's share, episodes
per CPU-minute and peak memory, in one run with the same recipe, seed and tasks.

Methods: GiGPO, Role-Agent (WIA on), Role-Agent with Agent-In-World (policy analyst and
retriever). Paths:

* ``old``  — no prefix KV reuse, sliding-window prompts, the World-In-Agent prediction as
  a separate prompt, one training sample per turn; the Agent-In-World analyst in Figure 8's
  order, writing its whole answer with no stop string, at most 256 tokens (retriever 160);
* ``new``  — prefix KV reuse (32768 tokens), the prediction prompt as a continuation of
  the action prompt (its KV reused), window prompts (``optim.pack_episodes`` is on, the
  shipped default, but window turns never nest, so nothing is packed);
* ``full`` — as ``new``, with the full interaction as context (the prompt only grows, so
  each turn reuses the previous turn's KV) and each episode trained as one packed sequence;
* ``sequential`` / ``overlapped`` — as ``new``, with each turn's environment steps after the
  prediction pass (``rollout.overlap_env=never``, what ``auto`` does on a CPU) or during it
  (``always``, what ``auto`` does on a GPU).

Each (method, path) pair runs one training iteration in its own subprocess, so its peak RSS
(``ru_maxrss``) is its own. The paper reports ~5% total overhead for Role-Agent's extra
roles (Role-Agent, Wang et al., 2026, arXiv 2606.10917, §4.4). "Episodes per CPU-minute"
is episodes per minute of iteration wall time on this machine (rollout, update and
Agent-In-World included), for the full Role-Agent method.

    python benchmarks/bench_iteration.py [--recipe role_agent_alfworld] [--set key=value ...]
    python benchmarks/bench_iteration.py --smoke   # tiny model, scripted env: checks it runs
    python benchmarks/bench_iteration.py --methods "Role-Agent (WIA+AIW)" --paths old,new  # AIW share only
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
        "aiw.analyst_prompt=paper",
        "aiw.answer_prefix=false",
        "aiw.stop_at_close=false",
        "aiw.analysis_max_new_tokens=256",
        "aiw.retrieval_max_new_tokens=160",
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
PATHS["sequential"] = [*PATHS["new"], "rollout.overlap_env=never"]
PATHS["overlapped"] = [*PATHS["new"], "rollout.overlap_env=always"]
SMOKE = [
    "model.name=tiny",
    "model.device=cpu",
    "env.name=scripted",
    "env.kwargs={}",
    "env.eval_split=eval",
    "eval.splits=[eval]",
    "env.processes=false",
    "rollout.tasks_per_iter=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=6",
    "wia.max_new_tokens=6",
    "aiw.analysis_max_new_tokens=8",
    "aiw.retrieval_max_new_tokens=8",
    "optim.mini_batches=1",
    "threads=1",
]
PHASES = ["time/generate_s", "time/extension_s", "time/env_s", "time/update_s", "time/aiw_s", "time/iteration_s"]


def run_one(recipe: str, overrides: list[str]) -> dict:
    """One training iteration in this process; its metrics, CPU seconds and peak RSS (MiB)."""
    from roleagent.config import load_config
    from roleagent.trainer import Trainer

    run_dir = tempfile.mkdtemp(prefix="bench_iter_")
    cfg = load_config(recipe, [*overrides, f"run_dir={run_dir}", "report_to=[jsonl]", "eval.at_start=false"])
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

    def ratio(path: str) -> float | None:
        wia, gigpo = rows.get(("Role-Agent (WIA)", path)), rows.get(("GiGPO", path))
        return wia["time/iteration_s"] / gigpo["time/iteration_s"] if wia and gigpo else None

    def aiw_share(path: str) -> float | None:
        full = rows.get(("Role-Agent (WIA+AIW)", path))
        return full.get("time/aiw_s", 0.0) / full["time/iteration_s"] if full else None

    def per_minute(path: str) -> float | None:
        r = rows.get(("Role-Agent (WIA+AIW)", path))
        return r["episodes"] / (r["time/iteration_s"] / 60.0) if r else None

    def side_by_side(values: dict[str, float | None], fmt: str) -> str:
        """``new`` first, the other paths in brackets (``X (old Y, full Z)``)."""
        shown = {p: v for p, v in values.items() if v is not None}
        head = format(shown.pop("new"), fmt) if "new" in shown else "n/a"
        rest = ", ".join(f"{p} {format(v, fmt)}" for p, v in shown.items())
        return head + (f" ({rest})" if rest else "")

    print(f"\nRole-Agent (WIA) / GiGPO iteration time = {side_by_side({p: ratio(p) for p in paths}, '.2f')}")
    for (method, path), r in rows.items():
        if "wia/tokens" in r:
            print(
                f"  {method} [{path}]: prediction pass {r.get('time/extension_s', 0.0):.1f}s, predictions of "
                f"{r['wia/tokens']:.1f} tokens on average, {r['wia/cut']:.0%} cut at wia.max_new_tokens, "
                f"score {r.get('wia/score', float('nan')):.2f}"
            )
    for method in dict.fromkeys(m for m, _ in rows):
        overlapped, sequential = rows.get((method, "overlapped")), rows.get((method, "sequential"))
        if overlapped and sequential:
            print(
                f"{method}: rollout with the environments stepping during the prediction pass / after it = "
                f"{overlapped['time/rollout_s'] / sequential['time/rollout_s']:.3f} (waited for the environments "
                f"{overlapped['time/env_s']:.1f}s / {sequential['time/env_s']:.1f}s)"
            )
    aiw_rows = {p: rows[m, p] for (m, p) in rows if m == "Role-Agent (WIA+AIW)"}
    if aiw_rows:
        print(f"Agent-In-World share of a full iteration = {side_by_side({p: aiw_share(p) for p in paths}, '.1%')}")
        for p, r in aiw_rows.items():
            print(
                f"  [{p}] AIW {r.get('time/aiw_s', 0.0):.1f}s of {r['time/iteration_s']:.1f}s: "
                f"{r.get('aiw/n_failures', 0):.0f} failures analysed, analysis {r.get('aiw/time_analysis_s', 0):.1f}s, "
                f"retrieval {r.get('aiw/time_retrieval_s', 0):.1f}s, "
                f"{r.get('aiw/prefix_reused_tokens', 0):.0f} prompt tokens reused, "
                f"{r.get('aiw/n_parse_fallback', 0):.0f} unparsable reflections, "
                f"{r.get('aiw/n_retrieval_fallback', 0):.0f} of {r.get('aiw/n_retrieval_queries', 0):.0f} "
                "retrievals fell back"
            )
    if per_minute("new") and per_minute("old"):
        print(
            f"episodes per CPU-minute new / old = {per_minute('new') / per_minute('old'):.2f}  ("
            + ", ".join(f"{p} {per_minute(p):.1f}" for p in paths if per_minute(p))
            + " episodes/min)"
        )
    for path in paths:
        peak = max((r["peak_rss_mib"] for (_, p), r in rows.items() if p == path), default=0.0)
        print(f"peak RSS [{path}] = {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="role_agent_alfworld")
    parser.add_argument("--set", action="append", default=[], help="config override for every variant")
    parser.add_argument("--smoke", action="store_true", help="tiny model, scripted env, 1 iteration: checks it runs")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of: " + ", ".join(METHODS))
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of: " + ", ".join(PATHS))
    parser.add_argument("--out", default="", help="also write every variant's metrics to this JSON file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_one(args.recipe, args.set)))
        return
    base = [*SMOKE, *args.set] if args.smoke else list(args.set)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [x for x in methods if x not in METHODS] + [x for x in paths if x not in PATHS]
    if unknown:
        parser.error(f"unknown method or path: {', '.join(unknown)}")
    rows = {}
    for path in paths:
        for method in methods:
            method_overrides, path_overrides = METHODS[method], PATHS[path]
            record = spawn(args.recipe, [*method_overrides, *path_overrides, *base])
            rows[method, path] = record
            print(f"{method} [{path}]: {record['time/iteration_s']:.1f}s", flush=True)
    print(f"\nrecipe {args.recipe} {' '.join(base)}")
    report(rows, paths)
    if args.out:
        with open(args.out, "w") as f:
            json.dump([{"method": m, "path": p, **r} for (m, p), r in rows.items()], f, indent=1)


if __name__ == "__main__":
    main()
