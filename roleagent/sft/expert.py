"""Expert demonstrations through the rollout code: the environment's expert plays training
tasks (``RolloutSettings.source=EXPERT``), so every prompt is built exactly as in RL,
and its successful episodes become chat examples (``roleagent.sft.data``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from roleagent.progress import bar, phase
from roleagent.rollout import EXPERT, RolloutSettings, rollout_settings, run_episodes
from roleagent.sft.data import ChatExample, trajectory_examples
from roleagent.types import Task, Trajectory


def expert_tasks(train_tasks: list[Task], n: int, *, seed: int, exclude: set[str] = frozenset()) -> list[Task]:
    """``n`` distinct training tasks in a seeded random order, never one of ``exclude``
    (the evaluation panels' task ids)."""
    pool = [t for t in train_tasks if t.id not in exclude]
    if n > len(pool):
        raise ValueError(f"sft.expert_tasks={n}: only {len(pool)} training tasks outside the evaluation panels")
    order = np.random.default_rng(seed).permutation(len(pool))[:n]
    return [pool[i] for i in order]


def expert_trajectories(
    engine, pool, tasks: list[Task], settings: RolloutSettings, *, seed: int = 0, quiet: bool = True
) -> list[Trajectory]:
    """One expert episode per task (environment seed ``seed``), prompts as in ``settings``;
    unless ``quiet``, a phase line and a bar over the turns (``roleagent.progress``)."""
    teacher = dataclasses.replace(settings, source=EXPERT)
    waves = -(-len(tasks) // pool.size)
    phase(
        f"expert: {len(tasks)} training tasks, {pool.size} at a time, up to {settings.max_steps} turns each",
        quiet=quiet,
    )
    with bar(settings.max_steps * waves, "expert", "turn", quiet=quiet) as progress:
        jobs = [(t, seed) for t in tasks]
        return run_episodes(engine=engine, pool=pool, jobs=jobs, settings=teacher, progress=progress)[0]


def play_expert(
    cfg, engine, n_tasks: int, *, workers: int = 4, quiet: bool = True
) -> tuple[list[ChatExample], dict[str, int]]:
    """Chat examples of the expert on ``n_tasks`` training tasks of ``cfg``'s environment
    (never a task of ``cfg``'s evaluation panels), prompted as ``cfg.rollout`` prompts."""
    return expert_examples(play_expert_trajectories(cfg, engine, n_tasks, workers=workers, quiet=quiet)[0])


def play_expert_trajectories(
    cfg, engine, n_tasks: int, *, workers: int = 4, quiet: bool = True
) -> tuple[list[Trajectory], RolloutSettings]:
    """:func:`play_expert`'s episodes, one per task, in :func:`expert_tasks`' order (so the
    first ``n`` of ``n + k`` tasks are the ``n`` that ``n_tasks=n`` plays), and the
    rollout settings they were played with."""
    from roleagent.envs.workers import make_pool
    from roleagent.evaluation import panel_ids

    e = cfg.env
    with make_pool(e, slots=workers) as pool:
        meta = pool.meta
        exclude = panel_ids(cfg, meta)
        tasks = expert_tasks(meta.tasks(e.train_split), n_tasks, seed=cfg.seed, exclude=exclude)
        settings = rollout_settings(cfg, cfg.rollout.max_steps or meta.max_steps)
        return expert_trajectories(engine, pool, tasks, settings, seed=cfg.seed, quiet=quiet), settings


def solved(trajectories: list[Trajectory]) -> list[Trajectory]:
    """The successful, uncrashed episodes whose every step had an expert action."""
    return [t for t in trajectories if t.success and not t.crashed and all(s.valid for s in t.steps)]


def expert_examples(trajectories: list[Trajectory]) -> tuple[list[ChatExample], dict[str, int]]:
    """Chat examples of the :func:`solved` episodes, and counts {"episodes", "successes",
    "examples"}."""
    good = solved(trajectories)
    examples = [e for t in good for e in trajectory_examples(t)]
    return examples, {"episodes": len(trajectories), "successes": len(good), "examples": len(examples)}
