"""Reflexion (Shinn et al., 2023, arXiv:2303.11366) on top of the ReAct actor.

Each task gets up to ``trials`` attempts. After a failed attempt the model reads its own
trajectory and writes a short reflection (a diagnosis and a new plan); the reflection
goes into a memory kept per task, and the next attempt's prompt shows the task's last
``keep`` reflections (the paper keeps 3). A solved task is not played again, so the
success rate after trial k counts every task solved in trials 1..k.

The memory is a SQLite file (``ReflectionMemory``): reflections survive the process and a
later evaluation with the same file starts from them. ``":memory:"`` keeps it in memory.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from roleagent.baselines.react import Episode, Turn, react_messages
from roleagent.engine.base import Engine, SamplingParams
from roleagent.types import Task, Trajectory

REFLECT_INSTRUCTION = (
    "You were unsuccessful in completing the task above. In a few sentences, diagnose a possible reason "
    "for failure and devise a new, concise, high level plan that aims to mitigate the same failure."
)


class ReflectionMemory:
    """Reflections per task id, in the order written (SQLite, one row per reflection)."""

    def __init__(self, path: str = ":memory:"):
        self.db = sqlite3.connect(str(path))
        self.db.execute("CREATE TABLE IF NOT EXISTS reflections (task_id TEXT, trial INTEGER, text TEXT, created REAL)")
        self.db.commit()

    def add(self, task_id: str, trial: int, text: str) -> None:
        self.db.execute("INSERT INTO reflections VALUES (?, ?, ?, ?)", (task_id, trial, text, time.time()))
        self.db.commit()

    def recent(self, task_id: str, keep: int = 3) -> list[str]:
        """The task's last ``keep`` reflections, oldest first."""
        rows = self.db.execute(
            "SELECT text FROM reflections WHERE task_id = ? ORDER BY rowid DESC LIMIT ?", (task_id, keep)
        ).fetchall()
        return [text for (text,) in reversed(rows)]

    def close(self) -> None:
        self.db.close()


def reflection_messages(trajectory: Trajectory, *, max_chars: int = 2000) -> list[dict[str, str]]:
    """The chat asking for a reflection on a failed trajectory (its last ``max_chars``).

    >>> from roleagent.types import Step, Task
    >>> t = Trajectory(task=Task("t/0", "x", "eval"), instruction="find a key")
    >>> t.steps = [Step("You are in a room.", 0, "", "look", True)]
    >>> t.final_observation = "Nothing happens."
    >>> print(reflection_messages(t)[1]["content"].splitlines()[:4])
    ['Task: find a key', 'You are in a room.', '> look', 'Nothing happens.']
    """
    lines = [f"Task: {trajectory.instruction.strip()}"]
    lines.append(trajectory.steps[0].observation.strip() if trajectory.steps else trajectory.final_observation)
    after = [s.observation for s in trajectory.steps[1:]] + [trajectory.final_observation]
    for step, obs in zip(trajectory.steps, after):
        thought = step.info.get("thought") if isinstance(step.info, dict) else None
        line = f"think: {thought}" if thought else step.action or step.action_text.strip() or "(no output)"
        lines += [f"> {line}", "OK." if thought else obs.strip()]
    text = "\n".join(lines)
    text = text if len(text) <= max_chars else "...\n" + text[-max_chars:]
    return [
        {
            "role": "system",
            "content": "You are an advanced reasoning agent that improves by reflecting on its mistakes.",
        },
        {"role": "user", "content": f"{text}\n\n{REFLECT_INSTRUCTION}"},
    ]


def reflect(engine: Engine, failed: list[Trajectory], params: SamplingParams) -> list[str]:
    """One reflection per failed trajectory, in one batched generation."""
    if not failed:
        return []
    prompts = [engine.encode_chat(reflection_messages(t), response_prefix="Reflection: ") for t in failed]
    return [" ".join(g.text.split()) or "(empty reflection)" for g in engine.generate(prompts, params)]


def run_reflexion(
    play: Callable[[list[tuple[Task, int]], Callable[[Task], list[str]]], list[Trajectory]],
    engine: Engine,
    jobs: list[tuple[Task, int]],
    memory: ReflectionMemory,
    *,
    trials: int,
    params: SamplingParams,
    keep: int = 3,
) -> list[list[Trajectory]]:
    """Trial 1..``trials``: ``play(jobs, reflections_of)`` for the tasks not yet solved,
    then a reflection for each failure. Returns, per trial, each job's latest
    trajectory up to that trial (a solved task keeps its successful one)."""
    latest: list[Trajectory | None] = [None] * len(jobs)
    per_trial = []
    for trial in range(1, trials + 1):
        todo = [k for k, t in enumerate(latest) if t is None or not t.success]
        if todo:
            played = play([jobs[k] for k in todo], lambda task: memory.recent(task.id, keep))
            for k, t in zip(todo, played):
                latest[k] = t
            failed = [t for t in played if not t.success and not t.crashed]
            for t, text in zip(failed, reflect(engine, failed, params)):  # kept for later runs too
                memory.add(t.task.id, trial, text)
        per_trial.append(list(latest))
    return per_trial


__all__ = ["Episode", "ReflectionMemory", "Turn", "react_messages", "reflect", "reflection_messages", "run_reflexion"]
