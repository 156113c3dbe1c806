"""Evaluation on a fixed panel: the same tasks, the same seed, greedy decoding, any policy.

A panel is the first ``max_tasks`` tasks of an environment's evaluation split in the
split's fixed order (task ids are machine-independent), each played once with environment
seed ``seed``. Policies: the model behind an ``HFEngine`` (base or trained), or the
environment's built-in expert (``expert_action``), which checks the games themselves.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from roleagent.envs.workers import EnvPool
from roleagent.types import Step, Task, Trajectory


def panel(tasks: list[Task], max_tasks: int = 0) -> list[Task]:
    return tasks[:max_tasks] if max_tasks > 0 else list(tasks)


def run_expert_episodes(pool: EnvPool, jobs: list[tuple[Task, int]], *, max_steps: int) -> list[Trajectory]:
    """Play each job with the environment's expert; an env without one fails every task."""
    out: list[Trajectory] = []
    for start in range(0, len(jobs), pool.size):
        wave = jobs[start:start + pool.size]
        replies = pool.reset([(slot, task, seed) for slot, (task, seed) in enumerate(wave)])
        trajectories = [Trajectory(task=task, seed=seed) for task, seed in wave]
        observations = [r.observation for r in replies]
        keys = [r.state_key for r in replies]
        active = list(range(len(wave)))
        for _ in range(max_steps):
            if not active:
                break
            actions = pool.expert_actions(active)
            stepping = [(slot, a) for slot, a in zip(active, actions) if a]
            active = [slot for slot, a in zip(active, actions) if a]  # no expert move: give up
            results = pool.step(stepping) if stepping else []
            still = []
            for (slot, action), reply in zip(stepping, results):
                t = trajectories[slot]
                t.steps.append(Step(
                    observation=observations[slot], state_key=keys[slot], prompt_ids=[], action_ids=[],
                    action_logprobs=[], action_text=action, action=action, valid=True,
                    reward=reply.reward, done=reply.done, info=dict(reply.info or {}),
                ))
                observations[slot], keys[slot] = reply.observation, reply.state_key
                t.success = t.success or bool((reply.info or {}).get("success"))
                t.crashed = reply.crashed
                if not (reply.done or reply.crashed):
                    still.append(slot)
            active = still
        for slot, t in enumerate(trajectories):
            t.final_observation = observations[slot]
        out.extend(trajectories)
    return out


def success_by_type(trajectories: list[Trajectory], labels: dict[str, str] | None = None) -> dict[str, float]:
    """Success rate (%) per ``task.metadata["task_type"]`` (renamed by ``labels``, e.g. an
    environment's ``table_columns``, in that order) plus ``All`` over all episodes."""
    labels = labels or {}
    by_type: dict[str, list[bool]] = defaultdict(list)
    for t in trajectories:
        task_type = str(t.task.metadata.get("task_type", "all"))
        by_type[labels.get(task_type, task_type)].append(t.success)
    order = [label for label in labels.values() if label in by_type] + sorted(set(by_type) - set(labels.values()))
    table = {k: 100.0 * float(np.mean(by_type[k])) for k in order}
    table["All"] = 100.0 * float(np.mean([t.success for t in trajectories])) if trajectories else 0.0
    return table


def format_table(rows: dict[str, dict[str, float]], *, columns: list[str] | None = None,
                 title: str = "success (%)") -> str:
    """A plain-text table: one row per (policy/panel) label, one column per task type."""
    if columns is None:  # first-seen order, "All" last
        columns = list(dict.fromkeys(c for row in rows.values() for c in row if c != "All")) + ["All"]
    label_width = max([len(title)] + [len(label) for label in rows])
    widths = [max(6, len(c)) for c in columns]
    lines = [title.ljust(label_width) + "  " + "  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    for label, row in rows.items():
        cells = [(f"{row[c]:.1f}" if c in row else "-").rjust(w) for c, w in zip(columns, widths)]
        lines.append(label.ljust(label_width) + "  " + "  ".join(cells))
    return "\n".join(lines)
