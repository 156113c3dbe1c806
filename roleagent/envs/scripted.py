"""A deterministic key-and-door corridor for unit tests (no dependencies).

The agent starts in room 0 of a corridor of ``n_rooms``; a key lies in room ``key_room``
and a locked door closes the last room. Success: ``take key`` then ``open door`` in the
last room. Admissible actions are given, so prompts look like ALFWorld's.
"""

from __future__ import annotations

from typing import Any

from roleagent.envs.base import Environment, StepResult
from roleagent.types import Task, Trajectory


class ScriptedEnv(Environment):
    name = "scripted"
    failure_taxonomy = ("premature_give_up", "missing_precondition", "action_format_error")

    def __init__(self, n_tasks: int = 8, max_steps: int = 8):
        self.n_tasks = n_tasks
        self.max_steps = max_steps
        self._room = 0
        self._has_key = False
        self._task: Task | None = None

    def tasks(self, split: str) -> list[Task]:
        offset = {"train": 0, "eval": 1000}[split]
        tasks = []
        for i in range(self.n_tasks):
            n_rooms = 2 + (i + offset) % 3
            key_room = (i * 7 + offset) % n_rooms
            tasks.append(
                Task(
                    id=f"scripted/{split}/{i:03d}",
                    env=self.name,
                    split=split,
                    payload={"n_rooms": n_rooms, "key_room": key_room},
                    metadata={"task_type": "key_door"},
                )
            )
        return tasks

    def reset(self, task: Task, seed: int) -> tuple[str, dict[str, Any]]:
        self._task, self._room, self._has_key = task, 0, False
        info = {"instruction": "Your task is to: open the door at the end of the corridor."}
        return self._describe(), info | {"admissible_actions": self.admissible_actions()}

    def _describe(self) -> str:
        payload = self._task.payload
        text = f"You are in room {self._room}."
        if self._room == payload["key_room"] and not self._has_key:
            text += " You see a key."
        if self._room == payload["n_rooms"] - 1:
            text += " You see a locked door."
        return text

    def admissible_actions(self) -> list[str]:
        payload = self._task.payload
        actions = ["look"]
        if self._room > 0:
            actions.append("go left")
        if self._room < payload["n_rooms"] - 1:
            actions.append("go right")
        if self._room == payload["key_room"] and not self._has_key:
            actions.append("take key")
        if self._room == payload["n_rooms"] - 1:
            actions.append("open door")
        return actions

    def step(self, action: str) -> StepResult:
        action = action.strip().lower()
        done, reward, observation = False, 0.0, None
        if action not in self.admissible_actions():
            observation = "Nothing happens."
        elif action == "go left":
            self._room -= 1
        elif action == "go right":
            self._room += 1
        elif action == "take key":
            self._has_key = True
            observation = "You pick up the key."
        elif action == "open door":
            if self._has_key:
                done, reward, observation = True, 1.0, "The door opens. You win."
            else:
                observation = "The door is locked."
        observation = observation or self._describe()
        info = {"success": done and reward > 0, "admissible_actions": self.admissible_actions()}
        return StepResult(observation, reward, done, info)

    def expert_action(self) -> str:
        payload = self._task.payload
        if not self._has_key:
            if self._room == payload["key_room"]:
                return "take key"
            return "go right" if self._room < payload["key_room"] else "go left"
        return "open door" if self._room == payload["n_rooms"] - 1 else "go right"

    def diagnose(self, trajectory: Trajectory) -> dict[str, Any] | None:
        if trajectory.success:
            return None
        if any(not step.valid for step in trajectory.steps):
            label = "action_format_error"
        elif any(step.action == "open door" for step in trajectory.steps):
            label = "missing_precondition"
        else:
            label = "premature_give_up"
        return {"dominant_type": label, "labels": [label], "detail": label, "critical_step": 0}
