"""Where an RL run's first iteration goes in its environments: the first reset of a fresh
pool of worker processes, with the iteration's games not yet generated (``cold``) or
generated beforehand in this process (``warm``), then a second reset of the same tasks
(benchmarks/RESULTS.md, the H200 paragraph of "The five-configuration benchmark"). The
default is one ALFWorld RL iteration of the GPU runs: 8 training tasks x 4 slots.

    python benchmarks/probe_pool_cold_start.py cold
    python benchmarks/probe_pool_cold_start.py warm [--tasks 8] [--group 4] [--first 1000]
    python benchmarks/probe_pool_cold_start.py cold --pools spawn:unshared forkserver:unshared forkserver [...]

Each pool generates into a fresh cache folder (``$ROLEAGENT_CACHE`` is set to a temporary
folder), so ``cold`` really generates. Prints one line of seconds per pool: the pool's start
(the workers' processes start at once; each imports and builds its environment before it
answers its first call), the first and the second reset; with several ``--pools`` (their
``env.start_method``, and whether each task's game is built by one slot first), played one
after the other in this process, the ratio of each pool's mean first reset to the first's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["cold", "warm"])
    parser.add_argument("--tasks", type=int, default=8, help="distinct training tasks")
    parser.add_argument("--group", type=int, default=4, help="slots per task (rollout.group_size)")
    parser.add_argument("--first", type=int, default=1000, help="index of the first training task")
    parser.add_argument(
        "--pools",
        nargs="+",
        default=["forkserver"],
        choices=[f"{method}{shared}" for method in ("spawn", "forkserver") for shared in ("", ":unshared")],
        help="pools to time, in this order: env.start_method, and :unshared for every slot building its "
        "group's game itself (no Environment.prepare_task first)",
    )
    args = parser.parse_args()
    first_resets: dict[str, list[float]] = {}
    for pool in args.pools:
        first_resets.setdefault(pool, []).append(probe(args, pool))
    means = {pool: sum(times) / len(times) for pool, times in first_resets.items()}
    for pool, mean in means.items():
        print(f"first reset, {pool} / {args.pools[0]} = {mean / means[args.pools[0]]:.2f}")


def probe(args, variant: str) -> float:
    """One fresh pool's start and two resets, the pool as ``variant`` says (``--pools``);
    returns the first reset's seconds."""
    method, _, unshared = variant.partition(":")
    with tempfile.TemporaryDirectory(prefix="pool-probe-") as cache:
        os.environ["ROLEAGENT_CACHE"] = cache  # read by the workers too
        from roleagent.envs.base import make_env
        from roleagent.envs.workers import EnvPool

        kwargs = {"difficulty": "easy", "max_steps": 12, "expert": "search"}
        tasks = make_env("alfworld", **kwargs).tasks("train")[args.first : args.first + args.tasks]
        if args.mode == "warm":
            started = time.perf_counter()
            meta = make_env("alfworld", **kwargs)
            for task in tasks:
                meta.game_file(task)
            print(f"generated the {len(tasks)} games beforehand in {time.perf_counter() - started:.1f} s")
        assignments = [(slot, tasks[slot // args.group], 0) for slot in range(len(tasks) * args.group)]
        t0 = time.perf_counter()
        pool = EnvPool("alfworld", kwargs, slots=len(assignments), start_method=method)
        if unshared:
            pool._prepare_shared = lambda assignments: None
        try:
            t1 = time.perf_counter()
            pool.reset(assignments)
            t2 = time.perf_counter()
            pool.reset(assignments)
            t3 = time.perf_counter()
        finally:
            pool.close()
    print(
        f"{args.mode}, {variant}: {len(assignments)} slots, pool start {t1 - t0:.1f} s, first reset {t2 - t1:.1f} s, "
        f"second reset {t3 - t2:.1f} s"
    )
    return t2 - t1


if __name__ == "__main__":  # spawned workers import this file without running it
    main()
