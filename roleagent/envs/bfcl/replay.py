"""Expert replay: play every task of a split with ``expert_action`` and score it.

    python -m roleagent.envs.bfcl.replay --split eval [--call-format python]

Prints the per-category table and the wall time. The expert (ground-truth turns
through the env's own parser, validator, executor and checker) must score 100%.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from roleagent.envs.bfcl.report import bfcl_table


def replay(env: Any, tasks: list[Any], max_steps: int = 0) -> dict[str, Any]:
    """Play each task with the expert, at most ``max_steps`` steps (0: ``env.max_steps``,
    the rollout's own bound); the env's own limits (steps per user turn) apply inside."""
    results: dict[str, bool] = {}
    failures: list[tuple[str, Any]] = []
    for task in tasks:
        env.reset(task, seed=0)
        result = None
        for _ in range(max_steps or env.max_steps):
            result = env.step(env.expert_action())
            if result.done:
                break
        ok = bool(result is not None and result.done and result.info.get("success"))
        results[task.id] = ok
        if not ok:
            failures.append((task.id, None if result is None else result.info.get("official")))
    return {"results": results, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    from roleagent.envs.bfcl.env import BFCLEnv  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--split", default="eval")
    parser.add_argument("--call-format", default="qwen")
    parser.add_argument("--type-check", action="store_true", help="reject type-violating calls (bfcl executes them)")
    parser.add_argument("--limit", type=int, default=0, help="tasks per category (0: all)")
    args = parser.parse_args(argv)
    env = BFCLEnv(call_format=args.call_format, type_check=args.type_check)
    tasks = env.tasks(args.split)
    if args.limit:
        seen: dict[str, int] = {}
        kept = []
        for t in tasks:
            c = t.metadata["category"]
            if seen.get(c, 0) < args.limit:
                kept.append(t)
                seen[c] = seen.get(c, 0) + 1
        tasks = kept
    start = time.perf_counter()
    out = replay(env, tasks)
    elapsed = time.perf_counter() - start
    print(bfcl_table({"expert": out["results"]}))
    print(f"{sum(out['results'].values())}/{len(tasks)} solved in {elapsed:.1f}s")
    for tid, official in out["failures"]:
        print("FAIL", tid, official)
    return 0 if not out["failures"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
