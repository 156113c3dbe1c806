"""Rollout overhead: a real multi-turn rollout vs raw batched generation of the same prompts.

Runs ``run_episodes`` with the embedded model on a real environment, records every turn's
prompts, then replays exactly those prompt batches through ``HFEngine.generate`` with the
same sampling settings and seed. The ratio says what the rollout machinery (prompt
building, parsing, environment worker round-trips, WIA bookkeeping) costs on top of the
model itself.

    python benchmarks/bench_rollout.py [--env textcraft] [--episodes 8] [--steps 4]
"""

from __future__ import annotations

import argparse
import time

import torch

from roleagent.engine.hf import HFEngine, SamplingParams
from roleagent.envs.workers import EnvPool
from roleagent.methods.role_agent.wia import PredictionExtension
from roleagent.models.loading import load_policy
from roleagent.rollout import RolloutSettings, run_episodes


class RecordingEngine(HFEngine):
    """HFEngine that remembers each generate call's prompts and sampling params."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.record: list[tuple[list[list[int]], SamplingParams]] = []

    def generate(self, prompts, params):
        self.record.append((prompts, params))
        return super().generate(prompts, params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="textcraft")
    parser.add_argument("--env-kwargs", default="difficulty=easy")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    kwargs = dict(kv.split("=") for kv in args.env_kwargs.split(",") if kv)

    policy = load_policy("embedded", device="cpu")
    engine = RecordingEngine(policy)
    settings = RolloutSettings(max_steps=args.steps, action_format="action", max_new_tokens=24)
    extensions = [PredictionExtension(1, max_new_tokens=24, temperature=settings.temperature, top_p=settings.top_p)]
    with EnvPool(args.env, kwargs, slots=args.episodes, processes=True) as pool:
        tasks = pool.meta.tasks("train")[: args.episodes // 2]
        jobs = [(t, 0) for t in tasks for _ in range(2)]
        pool.reset([(i, t, s) for i, (t, s) in enumerate(jobs)])  # warm the workers up
        engine.seed(0)
        started = time.perf_counter()
        trajectories, stats = run_episodes(
            engine=engine, pool=pool, jobs=jobs, settings=settings, extensions=extensions
        )
        rollout_s = time.perf_counter() - started

    engine.seed(0)
    started = time.perf_counter()
    replayed_tokens = 0
    for prompts, params in engine.record:
        replayed_tokens += sum(len(g.ids) for g in HFEngine.generate(engine, prompts, params))
    generate_s = time.perf_counter() - started

    steps = sum(len(t.steps) for t in trajectories)
    print(
        f"env={args.env} episodes={len(jobs)} turns={stats.turns} steps={steps} "
        f"generate calls={len(engine.record)} torch threads={torch.get_num_threads()}"
    )
    print(f"{'':28s}{'seconds':>9s}")
    print(f"{'rollout (run_episodes)':28s}{rollout_s:9.2f}")
    print(f"{'  of which generation':28s}{stats.generate_s + stats.extension_s:9.2f}")
    print(f"{'  of which env steps/resets':28s}{stats.env_s:9.2f}")
    print(f"{'raw generate, same prompts':28s}{generate_s:9.2f}")
    print(
        f"rollout / raw generate = {rollout_s / generate_s:.3f}  "
        f"(overhead {100 * (rollout_s - generate_s) / rollout_s:.1f}% of rollout time)"
    )
    print(
        f"sampled tokens: rollout {stats.generated_tokens}, replay {replayed_tokens} "
        f"(equal when sampling is reproduced exactly: {stats.generated_tokens == replayed_tokens})"
    )


if __name__ == "__main__":
    main()
