"""The stages of one training iteration, each a small protocol with today's behaviour as
its default. A method (``roleagent.trainer.methods.Method``) may replace a stage or hook around it;
the loop (``roleagent.trainer.loop``) only calls the stages.

=============  =============================  ==========================================
stage          default                        replaced by (examples)
=============  =============================  ==========================================
TaskSource     uniform sampling, no repeats   Agent-In-World's failure-weighted sampler
Collector      batched rollouts               (MCTS collection, Agent-R)
Scorer         environment reward (no-op)     (a generative reward model, ASL)
Objective      PPO-clip on the advantages     (SFT on masked targets, Agent-R)
=============  =============================  ==========================================

One :class:`Iteration` object flows through the stages (rLLM's one state object through
numbered stages): the loop fills ``jobs``, the collector returns ``trajectories`` and
``stats``, the advantage stage fills ``batch`` and ``estimate``, the objective turns it into
``samples``. A stage that hands its own later stage something else leaves it in
``extras`` under its plug-in's name (Agent-R's collector, its revision examples, which its
objective trains on).

Training samples (:func:`training_samples`): one per generated turn, except that with
``optim.pack_episodes`` consecutive turns of an episode that nest — turn t+1's prompt
starts with turn t's prompt and generated ids, as with ``rollout.context=full`` — become
one packed sample (the last turn's prompt and action, a mask over every turn's action
tokens, per-token π_old and advantages): one forward/backward per episode instead of one
per turn, with the same loss and gradient. Turns that do not nest (the sliding window)
stay one sample each, as do the methods' extra samples.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from roleagent.rollout import RolloutSettings, RolloutStats, run_episodes
from roleagent.trainer.replay import sft_replay
from roleagent.trainer.samples import TrainSample
from roleagent.trainer.update import Updater
from roleagent.types import Task, Trajectory

if TYPE_CHECKING:
    from roleagent.trainer.advantages import Advantages, StepBatch
    from roleagent.trainer.methods import Method


@dataclass
class Iteration:
    """One training iteration's state, filled stage by stage (module docstring)."""

    index: int
    jobs: list[tuple[Task, int]]  # (task, environment seed); the G jobs of a task share the seed
    trajectories: list[Trajectory] = field(default_factory=list)
    stats: RolloutStats = field(default_factory=RolloutStats)
    batch: StepBatch | None = None  # the trained trajectories' steps (dynamic sampling: a subset), with values
    estimate: Advantages | None = None  # the advantages after the methods' adjustments (``.value``)
    samples: list = field(default_factory=list)  # what the objective trains on
    extras: dict[str, Any] = field(default_factory=dict)  # a stage's data for its later stage, "plugin/key"


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
    """Plays the iteration's ``(task, seed)`` jobs (``iteration.jobs``); may leave data for
    its plug-in's later stages in ``iteration.extras``. ``plays_jobs``: it returns one
    trajectory per job, in the jobs' order (a task's G rollouts consecutive), so dynamic
    sampling (``roleagent.dynamic_sampling``) may play further rounds of new jobs through it
    and keep whole groups; a collector that plays something else (Agent-R's search trees)
    leaves it False."""

    plays_jobs: bool = False

    def collect(self, iteration: Iteration, progress=None) -> tuple[list[Trajectory], RolloutStats]: ...


class RolloutCollector:
    """Batched multi-turn rollouts (``roleagent.rollout.run_episodes``) with the methods'
    rollout extensions (e.g. World-In-Agent predictions)."""

    plays_jobs = True

    def __init__(self, engine, pool, settings: RolloutSettings, extensions: Iterable = ()):
        self.engine, self.pool, self.settings = engine, pool, settings
        self.extensions = tuple(extensions)

    def collect(self, iteration: Iteration, progress=None) -> tuple[list[Trajectory], RolloutStats]:
        return run_episodes(
            engine=self.engine,
            pool=self.pool,
            jobs=iteration.jobs,
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
    """Turns the iteration (its scored batch and advantages, or what its collector left in
    ``extras``) into training samples and updates the policy. ``optimizer`` is saved in
    checkpoints."""

    optimizer: Any

    def samples(self, iteration: Iteration, methods: list[Method]) -> list[TrainSample]: ...

    def update(self, samples: list[TrainSample], rng: random.Random) -> dict[str, float]: ...


class PPOObjective:
    """PPO-clip with token-mean aggregation (``roleagent.trainer.update.Updater``): one
    sample per generated turn, plus what each method adds for that turn
    (``Method.extra_samples``, e.g. World-In-Agent's prediction tokens)."""

    def __init__(
        self, policy, optim_cfg, *, temperature: float, diagnostics_path=None, total_steps: int = 0, replay=None
    ):
        self.updater = Updater(
            policy,
            optim_cfg,
            temperature=temperature,
            diagnostics_path=diagnostics_path,
            total_steps=total_steps,
            replay=replay,
        )
        self.optimizer = self.updater.optimizer
        self.pack = optim_cfg.pack_episodes

    @classmethod
    def for_run(cls, trainer) -> PPOObjective:
        """The recipe's objective for ``trainer``'s policy: ``optim``, the rollout temperature,
        a schedule over the run's optimizer steps, and the SFT replay term (``optim.sft_replay_coef``)."""
        cfg = trainer.cfg
        return cls(
            trainer.policy,
            cfg.optim,
            temperature=cfg.rollout.temperature,
            diagnostics_path=trainer.run_dir / "nonfinite.jsonl",
            total_steps=cfg.iterations * cfg.optim.epochs * cfg.optim.mini_batches,
            replay=sft_replay(cfg, trainer.engine),
        )

    def samples(self, iteration: Iteration, methods: list[Method]) -> list[TrainSample]:
        return training_samples(iteration.batch, iteration.estimate.value, methods, pack=self.pack)

    def update(self, samples: list[TrainSample], rng: random.Random) -> dict[str, float]:
        return self.updater.update(samples, rng)


def nests(step, following) -> bool:
    """``following``'s prompt begins with ``step``'s prompt and generated ids (both generated)."""
    if not step.action_ids or not following.action_ids:
        return False
    n, m = len(step.prompt_ids), len(step.action_ids)
    head = following.prompt_ids[: n + m]
    return len(following.prompt_ids) >= n + m and head[:n] == step.prompt_ids and head[n:] == step.action_ids


def episode_runs(batch: StepBatch, pack: bool) -> list[list[tuple[Any, int]]]:
    """The batch's steps as runs of ``(step, advantage index)``: consecutive nested turns
    of one trajectory form a run when ``pack``; otherwise every step is its own run."""
    runs: list[list] = []
    previous_traj = None
    for index, (traj_id, step) in enumerate(zip(batch.traj_ids, batch.steps)):
        if pack and runs and traj_id == previous_traj and nests(runs[-1][-1][0], step):
            runs[-1].append((step, index))
        else:
            runs.append([(step, index)])
        previous_traj = traj_id
    return runs


def packed_sample(run: list, advantages: np.ndarray) -> TrainSample:
    """One sample for nested turns: the first turn's prompt, then everything up to the end of
    the last turn's action; per output token its π_old, its turn's advantage and whether the
    policy generated it.

    Example: prompts/actions ``[1]/[2]`` then ``[1, 2, 3]/[4, 5]`` with advantages 0.5 and
    −1 → prompt ``[1]``, output ``[2, 3, 4, 5]``, mask ``[1, 0, 1, 1]``, token advantages
    ``[0.5, 0, −1, −1]``. Constrained turns' allowed sets land on their tokens (the
    observation tokens between them stay free, None).
    """
    first, last = run[0][0], run[-1][0]
    start = len(first.prompt_ids)
    output = (last.prompt_ids + last.action_ids)[start:]
    mask, old, token_adv = [0] * len(output), [0.0] * len(output), [0.0] * len(output)
    allowed: list[list[int] | None] = [None] * len(output)
    for step, index in run:
        offset = len(step.prompt_ids) - start
        for j, logprob in enumerate(step.action_logprobs):
            mask[offset + j], old[offset + j], token_adv[offset + j] = 1, logprob, float(advantages[index])
        for j, ids in enumerate(step.action_allowed or ()):
            allowed[offset + j] = ids
    constrained = any(step.action_allowed is not None for step, _ in run)
    return TrainSample(
        first.prompt_ids, output, old, float(advantages[run[0][1]]), mask, token_adv, allowed if constrained else None
    )


def training_samples(
    batch: StepBatch, advantages: np.ndarray, methods: list[Method] = (), *, pack: bool = False
) -> list[TrainSample]:
    """One sample per generated turn (or per run of nested turns with ``pack``), each
    followed by the methods' extra samples of its turns; zero advantages included: the
    Updater skips them but keeps their tokens in the denominator."""
    samples = []
    for run in episode_runs(batch, pack):
        if len(run) > 1:
            samples.append(packed_sample(run, advantages))
        elif run[0][0].action_ids:
            step, index = run[0]
            samples.append(
                TrainSample(
                    step.prompt_ids,
                    step.action_ids,
                    step.action_logprobs,
                    float(advantages[index]),
                    allowed=step.action_allowed,
                )
            )
        for step, index in run:
            for method in methods:
                samples.extend(method.extra_samples(step, float(advantages[index])))
    return samples
