"""The stages of one training iteration, each a small protocol with today's behaviour as
its default. A method (``roleagent.methods.Method``) may replace a stage or hook around it;
the loop (``roleagent.trainer.loop``) only calls the stages.

=============  =============================  ==========================================
stage          default                        replaced by (examples)
=============  =============================  ==========================================
TaskSource     uniform sampling, no repeats   Agent-In-World's failure-weighted sampler
Collector      batched rollouts               (MCTS collection, Agent-R)
Scorer         environment reward (no-op)     (a generative reward model, ASL)
Objective      PPO-clip on the advantages     (SFT on masked targets, Agent-R)
=============  =============================  ==========================================
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from roleagent.rollout import RolloutSettings, RolloutStats, run_episodes
from roleagent.trainer.update import TrainSample, Updater
from roleagent.types import Task, Trajectory

if TYPE_CHECKING:
    from roleagent.methods.base import Method
    from roleagent.trainer.advantages import StepBatch


class TaskSource(Protocol):
    """Where an iteration's tasks come from; draws only from ``rng`` (the trainer's)."""

    def sample(self, n: int, rng: np.random.Generator) -> list[Task]: ...


class UniformTaskSource:
    """``n`` distinct training tasks, uniformly."""

    def __init__(self, tasks: list[Task]):
        self.tasks = tasks

    def sample(self, n: int, rng: np.random.Generator) -> list[Task]:
        picks = rng.choice(len(self.tasks), size=n, replace=False)
        return [self.tasks[i] for i in picks]


class Collector(Protocol):
    """Plays ``(task, seed)`` jobs; the G jobs of a task share the seed."""

    def collect(self, jobs: list[tuple[Task, int]], progress=None) -> tuple[list[Trajectory], RolloutStats]: ...


class RolloutCollector:
    """Batched multi-turn rollouts (``roleagent.rollout.run_episodes``) with the methods'
    rollout extensions (e.g. World-In-Agent predictions)."""

    def __init__(self, engine, pool, settings: RolloutSettings, extensions: Iterable = ()):
        self.engine, self.pool, self.settings = engine, pool, settings
        self.extensions = tuple(extensions)

    def collect(self, jobs: list[tuple[Task, int]], progress=None) -> tuple[list[Trajectory], RolloutStats]:
        return run_episodes(
            engine=self.engine,
            pool=self.pool,
            jobs=jobs,
            settings=self.settings,
            extensions=self.extensions,
            progress=progress,
        )


class Scorer(Protocol):
    """Sets ``Step.reward`` (and ``Trajectory.success``) of collected trajectories."""

    def score(self, trajectories: list[Trajectory]) -> dict[str, float]: ...


class EnvironmentReward:
    """The environment's own rewards, as collected: nothing to do."""

    def score(self, trajectories: list[Trajectory]) -> dict[str, float]:
        return {}


class Objective(Protocol):
    """Turns a scored batch and its advantages into training samples and updates the
    policy. ``optimizer`` is saved in checkpoints."""

    optimizer: Any

    def samples(self, batch: StepBatch, advantages: np.ndarray, methods: list[Method]) -> list[TrainSample]: ...

    def update(self, samples: list[TrainSample], rng: random.Random) -> dict[str, float]: ...


class PPOObjective:
    """PPO-clip with token-mean aggregation (``roleagent.trainer.update.Updater``): one
    sample per generated turn, plus what each method adds for that turn
    (``Method.extra_samples``, e.g. World-In-Agent's prediction tokens)."""

    def __init__(self, policy, optim_cfg, *, temperature: float):
        self.updater = Updater(policy, optim_cfg, temperature=temperature)
        self.optimizer = self.updater.optimizer

    def samples(self, batch: StepBatch, advantages: np.ndarray, methods: list[Method]) -> list[TrainSample]:
        return training_samples(batch, advantages, methods)

    def update(self, samples: list[TrainSample], rng: random.Random) -> dict[str, float]:
        return self.updater.update(samples, rng)


def training_samples(batch: StepBatch, advantages: np.ndarray, methods: list[Method] = ()) -> list[TrainSample]:
    """One sample per generated turn, each followed by the methods' extra samples of that
    turn; zero advantages included: the Updater skips them but keeps their tokens in the
    denominator."""
    samples = []
    for step, advantage in zip(batch.steps, advantages):
        if step.action_ids:
            samples.append(TrainSample(step.prompt_ids, step.action_ids, step.action_logprobs, float(advantage)))
        for method in methods:
            samples.extend(method.extra_samples(step, float(advantage)))
    return samples
