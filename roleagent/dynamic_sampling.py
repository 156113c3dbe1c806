"""Dynamic sampling (DAPO: Yu et al., 2025, arXiv:2503.14476, §3.2): train only on groups
whose rollouts disagree, and play more tasks until the batch holds enough of them.

A group of G rollouts whose returns are all equal (all failed, or all solved in a binary
task) has zero group-relative advantage under GRPO and RLOO and a zero episode term under
GiGPO and Role-Agent: it adds tokens to the loss's denominator and to the KL term, and no
policy-gradient signal. In the main job, 3 of 4 groups of the first RL iteration were such.
With ``dynamic_sampling.enabled`` an iteration plays its ``rollout.tasks_per_iter`` tasks,
then, while fewer than that many groups have unequal returns and fewer than ``max_rounds``
rounds were played, draws as many new tasks as are missing (from the same task source and
random generator) and plays them. It trains on the first ``tasks_per_iter`` informative
groups; every episode played still counts in the training success, reaches the methods'
hooks (Agent-In-World analyses the failures of dropped groups too) and is dumped.

"Equal" compares ``Trajectory.episode_return`` (the sum of step rewards, invalid-action
penalties included), DAPO's accuracy criterion for a 0/1 reward. verl calls the option
``algorithm.filter_groups`` with ``max_num_gen_batches``; DAPO keeps sampling until the batch
is full, here ``max_rounds`` bounds the cost of an iteration (at most ``max_rounds`` × the
rollouts of one without it), and a batch may end with fewer groups.

Worked example (G = 2, tasks_per_iter = 2, max_rounds = 3): round 1 plays tasks a, b with
returns a (0, 0), b (1, 0): one informative group, one missing; round 2 draws c: (1, 1), none;
round 3 draws d: (0, 1). The update trains on b and d; a and c were played, not trained on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from roleagent.fields import ConfigError, setting

__all__ = [
    "DynamicSamplingConfig",
    "check_collector",
    "check_dynamic_sampling",
    "collect_rounds",
    "informative_groups",
    "trained_groups",
]


@dataclass
class DynamicSamplingConfig:
    enabled: bool = setting(
        False,
        "train only on groups whose returns differ, playing more tasks (rounds) until rollout.tasks_per_iter "
        "of them are found (DAPO's dynamic sampling; verl's algorithm.filter_groups)",
    )
    max_rounds: int = setting(
        3, "collection rounds per iteration at most (verl's max_num_gen_batches); the first round is the usual one"
    )


def check_dynamic_sampling(cfg: Any) -> None:
    """``cfg`` is a TrainConfig (``max_rounds``' range: ``roleagent.config_rules``); raises
    ConfigError, never changes it."""
    if cfg.dynamic_sampling.enabled and cfg.rollout.group_size < 2:
        raise ConfigError("dynamic_sampling.enabled compares the returns within a group: set rollout.group_size >= 2")


def check_collector(cfg: Any, collector: Any) -> None:
    """Dynamic sampling plays further rounds of jobs through the iteration's collector: it
    must play them as groups (``plays_jobs``, ``roleagent.trainer.stages.Collector``)."""
    if cfg.dynamic_sampling.enabled and not getattr(collector, "plays_jobs", False):
        raise ConfigError(
            "dynamic_sampling.enabled needs a collector that plays the iteration's jobs as groups; "
            f"{type(collector).__name__} (a method's) does not"
        )


def informative_groups(returns: Sequence[float], group_size: int) -> list[bool]:
    """For each run of ``group_size`` consecutive returns (one group): do they differ?

    >>> informative_groups([0.0, 0.0, 1.0, 0.0, 1.0, 1.0], 2)
    [False, True, False]
    """
    if len(returns) % group_size:
        raise ValueError(f"{len(returns)} returns do not split into groups of {group_size}")
    groups = [returns[i : i + group_size] for i in range(0, len(returns), group_size)]
    return [max(g) != min(g) for g in groups]


def trained_groups(trajectories: Sequence, group_size: int, limit: int) -> list:
    """The trajectories of the first ``limit`` informative groups, in order.

    >>> from types import SimpleNamespace as T
    >>> played = [T(episode_return=r) for r in (0, 0, 1, 0, 1, 1, 0, 1)]
    >>> [t.episode_return for t in trained_groups(played, 2, 2)]
    [1, 0, 0, 1]
    """
    flags = informative_groups([t.episode_return for t in trajectories], group_size)
    kept = [g for g, informative in enumerate(flags) if informative][:limit]
    return [t for g in kept for t in trajectories[g * group_size : (g + 1) * group_size]]


def collect_rounds(iteration, collector, scorer, draw_jobs: Callable[[int], list], cfg: Any, progress=None):
    """Stage 2 of an iteration (``roleagent.trainer.stages``): ``collector`` plays
    ``iteration.jobs`` and ``scorer`` scores them; with dynamic sampling on, further rounds
    play ``draw_jobs(n)`` (the jobs of n new tasks) while tasks are missing (module
    docstring), appended to ``iteration.jobs``, ``.trajectories`` and ``.stats``. Returns the
    trajectories to train on, the scorer's metrics and the sampling metrics
    (``train/sampling_rounds``, ``train/groups_played``, ``train/groups_trained``; none when off)."""
    iteration.trajectories, iteration.stats = collector.collect(iteration, progress=progress)
    score = scorer.score(iteration.trajectories)
    d, g, wanted = cfg.dynamic_sampling, cfg.rollout.group_size, cfg.rollout.tasks_per_iter
    if not d.enabled:
        return iteration.trajectories, score, {}
    rounds = 1
    while rounds < d.max_rounds:
        missing = wanted - sum(informative_groups([t.episode_return for t in iteration.trajectories], g))
        if missing <= 0:
            break
        more = dataclasses.replace(iteration, jobs=draw_jobs(missing), trajectories=[])
        trajectories, stats = collector.collect(more, progress=progress)
        scorer.score(trajectories)
        iteration.jobs, iteration.trajectories = iteration.jobs + more.jobs, iteration.trajectories + trajectories
        iteration.stats.add(stats)
        rounds += 1
    trained = trained_groups(iteration.trajectories, g, wanted)
    played = len(iteration.trajectories) // g
    return (
        trained,
        score,
        {"train/sampling_rounds": rounds, "train/groups_played": played, "train/groups_trained": len(trained) // g},
    )
