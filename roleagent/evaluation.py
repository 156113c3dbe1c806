"""Evaluation on a fixed panel: the same tasks, the same seed, greedy decoding, any policy.

A panel is the first ``max_tasks`` tasks of an environment's evaluation split in the
split's fixed order (task ids are machine-independent), after its first ``skip_tasks`` when
those were a panel already seen, each played once with environment seed ``seed``.
Policies: the model behind an ``HFEngine`` (base or trained), or the environment's
built-in expert (``expert_action``), which checks the games themselves.
With ``eval.sampled`` = k the trainer also plays every game k times at the training
temperature, pass s with the engine seeded by :func:`sample_seed` (the same game: the
environment seed stays ``seed``).

Crashed episodes (a worker process died or hung: an infrastructure fault, not the
policy's) are replayed from the start, at most ``retries`` times each
(:func:`replay_crashed`); an episode still crashed after that is counted apart
(:func:`crashed_count`) and left out of the success rate's denominator, so a flaky machine
neither lowers nor raises a reported success rate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from roleagent.envs.workers import EnvPool
from roleagent.terminal import printable
from roleagent.types import Step, Task, Trajectory


def panel(tasks: list[Task], max_tasks: int = 0, skip: int = 0) -> list[Task]:
    """The ``max_tasks`` tasks (0: all) after the first ``skip``.

    >>> panel(["t0", "t1", "t2", "t3", "t4"], 2, skip=1), panel(["t0", "t1", "t2"], 0, skip=1)
    (['t1', 't2'], ['t1', 't2'])
    """
    tasks = list(tasks[skip:])
    return tasks[:max_tasks] if max_tasks > 0 else tasks


def eval_panel(env, cfg, split: str) -> list[Task]:
    """The tasks an evaluation of ``cfg`` plays on ``split``: ``eval.max_tasks`` after the
    first ``eval.skip_tasks``. A skip that leaves no task is a ``ConfigError``."""
    tasks = split_tasks(env, cfg.env, split)
    chosen = panel(tasks, cfg.eval.max_tasks, cfg.eval.skip_tasks)
    if tasks and not chosen:
        from roleagent.fields import ConfigError

        raise ConfigError(f"eval.skip_tasks={cfg.eval.skip_tasks}: {split!r} has {len(tasks)} tasks, none left")
    return chosen


def panel_ids(cfg, env) -> set[str]:
    """The ids every evaluation of ``cfg`` plays or skipped (the first ``eval.skip_tasks``
    + ``eval.max_tasks`` of each evaluation split of ``env``): training data leaves them out."""
    e = cfg.eval
    n = e.skip_tasks + e.max_tasks if e.max_tasks > 0 else 0
    return {t.id for split in eval_splits(cfg) for t in panel(split_tasks(env, cfg.env, split), n)}


def split_tasks(env, env_cfg, split: str) -> list[Task]:
    """The tasks of ``split`` in order; the training split restricted to
    ``env.train_tasks`` (those ids, in that order) when it is set. A split the environment
    does not have is a :class:`~roleagent.fields.ConfigError` naming the ones it has."""
    try:
        tasks = env.tasks(split)
    except (KeyError, ValueError) as error:
        if split in env.splits():
            raise
        from roleagent.fields import ConfigError

        key = "env.train_split" if split == env_cfg.train_split else "env.eval_split (or eval.splits, --split)"
        raise ConfigError(
            f"{key}={split!r}: {env_cfg.name} has no such split; its splits: {', '.join(env.splits())} ({error})"
        ) from None
    if split != env_cfg.train_split or not env_cfg.train_tasks:
        return tasks
    by_id = {t.id: t for t in tasks}
    missing = [i for i in env_cfg.train_tasks if i not in by_id]
    if missing:
        raise ValueError(f"env.train_tasks: no task {missing[0]!r} in split {split!r} ({len(missing)} unknown)")
    return [by_id[i] for i in env_cfg.train_tasks]


def eval_splits(cfg) -> list[str]:
    """A ``TrainConfig``'s evaluation panels: ``eval.splits``, or ``[env.eval_split]`` when empty."""
    return list(cfg.eval.splits) or [cfg.env.eval_split]


def sample_seed(seed: int, sample: int) -> int:
    """The engine seed of sampled evaluation pass ``sample`` (``eval.sampled``), derived from
    ``eval.seed`` alone: the same at every evaluation of a run and independent of training.

    >>> sample_seed(0, 0), sample_seed(0, 1)
    (2968811710, 3964924996)
    """
    return int(np.random.SeedSequence([seed, sample]).generate_state(1)[0])


def run_expert_episodes(
    pool: EnvPool, jobs: list[tuple[Task, int]], *, max_steps: int, quiet: bool = True, desc: str = "expert"
) -> list[Trajectory]:
    """Play each job with the environment's expert; an env without one fails every task.
    Unless ``quiet``: a phase line and a bar over the waves' turns (``roleagent.progress``)."""
    from roleagent.progress import bar, phase

    waves = -(-len(jobs) // pool.size)
    phase(f"expert on {desc}: {len(jobs)} tasks, {pool.size} at a time, up to {max_steps} turns each", quiet=quiet)
    with bar(max_steps * waves, desc, "turn", quiet=quiet) as progress:
        return [
            t for start in range(0, len(jobs), pool.size) for t in _expert_wave(pool, jobs, start, max_steps, progress)
        ]


def _expert_wave(pool: EnvPool, jobs: list[tuple[Task, int]], start: int, max_steps: int, progress) -> list[Trajectory]:
    """The expert's episodes of the wave of ``jobs`` from ``start`` (one per slot); the bar
    advances by ``max_steps`` turns in all, however early the episodes end."""
    wave = jobs[start : start + pool.size]
    replies = pool.reset([(slot, task, seed) for slot, (task, seed) in enumerate(wave)])
    trajectories = [
        Trajectory(task=task, seed=seed, instruction=(r.info or {}).get("instruction", ""))
        for (task, seed), r in zip(wave, replies)
    ]
    observations = [r.observation for r in replies]
    keys = [r.state_key for r in replies]
    active, turns = list(range(len(wave))), 0
    for _ in range(max_steps):
        if not active:
            break
        progress.update(1)
        turns += 1
        actions = pool.expert_actions(active)
        stepping = [(slot, a) for slot, a in zip(active, actions) if a]
        active = [slot for slot, a in zip(active, actions) if a]  # no expert move: give up
        results = pool.step(stepping) if stepping else []
        still = []
        for (slot, action), reply in zip(stepping, results):
            t = trajectories[slot]
            t.steps.append(
                Step(
                    observation=observations[slot],
                    state_key=keys[slot],
                    action_text=action,
                    action=action,
                    valid=True,
                    reward=reply.reward,
                    done=reply.done,
                    info=dict(reply.info or {}),
                )
            )
            observations[slot], keys[slot] = reply.observation, reply.state_key
            t.success = t.success or bool((reply.info or {}).get("success"))
            t.crashed = reply.crashed
            if not (reply.done or reply.crashed):
                still.append(slot)
        active = still
    progress.update(max_steps - turns)  # the wave's turns its episodes did not need
    for slot, t in enumerate(trajectories):
        t.final_observation = observations[slot]
    return trajectories


def replay_crashed(
    play: Callable[[list[tuple[Task, int]]], list[Trajectory]], jobs: list[tuple[Task, int]], retries: int
) -> tuple[list[Trajectory], int]:
    """``play(jobs)``, then replay each job whose episode crashed, up to ``retries`` times.

    Returns the trajectories in job order (a replayed job's last attempt) and the number of
    replays. Example: one job crashes twice, then completes; ``retries=2`` → its third
    episode, 2 replays; ``retries=1`` → still crashed, 1 replay.
    """
    trajectories = list(play(jobs))
    replays = 0
    for _ in range(retries):
        crashed = [i for i, t in enumerate(trajectories) if t.crashed]
        if not crashed:
            break
        for i, t in zip(crashed, play([jobs[i] for i in crashed])):
            trajectories[i] = t
        replays += len(crashed)
    return trajectories, replays


def crashed_count(trajectories: list[Trajectory]) -> int:
    return sum(1 for t in trajectories if t.crashed)


class EvaluationError(RuntimeError):
    """An evaluation that measured nothing: every episode of a panel crashed."""


def check_measured(panels: dict[str, list[Trajectory]]) -> None:
    """Raise :class:`EvaluationError` naming the panel and the first crash's error when
    every episode of a panel crashed (after the replays): its success is NaN, a table of
    NaN is no result (the environment is down: a search env's retriever, a dead JVM)."""
    for name, trajectories in panels.items():
        if trajectories and all(t.crashed for t in trajectories):
            errors = [str(s.info["error"]) for t in trajectories for s in t.steps if s.info.get("error")]
            raise EvaluationError(
                f"every episode of {name} crashed ({len(trajectories)} episodes, after replays): the environment "
                f"failed, no success rate was measured" + (f"; first error: {errors[0]}" if errors else "")
            )


def success_by_type(trajectories: list[Trajectory], labels: dict[str, str] | None = None) -> dict[str, float]:
    """Success rate (%) per ``task.metadata["task_type"]`` (renamed by ``labels``, e.g. an
    environment's ``table_columns``, in that order) plus ``All`` over all episodes.

    Crashed episodes are not in any denominator (NaN where every episode of a column
    crashed): e.g. 3 successes, 1 failure and 1 crash give 75.0, not 60.0.
    """
    labels = labels or {}
    by_type: dict[str, list[bool]] = defaultdict(list)
    for t in trajectories:
        task_type = str(t.task.metadata.get("task_type", "all"))
        by_type[labels.get(task_type, task_type)].append(t)
    order = [label for label in labels.values() if label in by_type] + sorted(set(by_type) - set(labels.values()))
    table = {k: _rate(by_type[k]) for k in order}
    table["All"] = _rate(trajectories) if trajectories else 0.0
    return table


def _rate(trajectories: list[Trajectory]) -> float:
    finished = [t.success for t in trajectories if not t.crashed]
    return 100.0 * float(np.mean(finished)) if finished else float("nan")


def format_table(
    rows: dict[str, dict[str, float]],
    *,
    columns: list[str] | None = None,
    title: str = "success (%)",
    fmt: str = "text",
    digits: int = 1,
) -> str:
    """One row per (policy/panel) label, one column per task type; missing cells print "-".

    ``fmt``: "text" (aligned plain text, numbers right-aligned), "markdown" (a pipe table,
    cells left-aligned) or "tsv"; ``title`` heads the label column; ``digits`` decimals.

    >>> print(format_table({"a": {"Pick": 50.0, "All": 25.0}}, fmt="markdown"))
    | success (%) | Pick | All  |
    |-------------|------|------|
    | a           | 50.0 | 25.0 |
    """
    if columns is None:  # first-seen order, "All" last
        columns = list(dict.fromkeys(c for row in rows.values() for c in row if c != "All")) + ["All"]
    header = [printable(name, lines=False) for name in [title, *columns]]  # task types are the env's text
    body = [
        [printable(label, lines=False)] + [f"{row[c]:.{digits}f}" if c in row else "-" for c in columns]
        for label, row in rows.items()
    ]
    if fmt == "tsv":
        return "\n".join("\t".join(r) for r in [header] + body)
    if fmt == "markdown":
        widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
        line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
        sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line(header), sep] + [line(r) for r in body])
    if fmt != "text":
        raise ValueError(f"unknown table format {fmt!r}; choose 'text', 'markdown' or 'tsv'")
    label_width = max(len(r[0]) for r in [header] + body)
    widths = [max(6, len(c)) for c in header[1:]]
    lines = [header[0].ljust(label_width) + "  " + "  ".join(c.rjust(w) for c, w in zip(header[1:], widths))]
    for cells in body:
        lines.append(cells[0].ljust(label_width) + "  " + "  ".join(c.rjust(w) for c, w in zip(cells[1:], widths)))
    return "\n".join(lines)
