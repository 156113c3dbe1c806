"""A deterministic key-and-door puzzle for unit tests and learning checks (no dependencies).

Two layouts (``layout``):

- ``corridor``: the agent starts in room 0 of a corridor of ``n_rooms`` (2–4); a key lies in
  room ``key_room`` and a locked door closes the last room. Success: ``take key`` then
  ``open door`` in the last room. A fixed preference (take > open > go right) solves every
  task, so a random policy's greedy decoding often does too.
- ``signpost``: three rooms; the agent starts in the middle one, where the locked door is,
  and the key lies at the left or the right end (alternating over tasks). While the key is
  not held, the middle room's description says which way: "A sign points left to the key."
  Success: go that way, ``take key``, come back, ``open door`` (4 steps). No fixed
  preference solves both kinds of task: a policy must read the sign, so a policy that
  learns shows it (``tests/test_learning.py``).

Admissible actions are given, so prompts look like ALFWorld's.
"""

from __future__ import annotations

from typing import Any

from roleagent.envs.base import Environment, StepResult
from roleagent.types import Task, Trajectory

LAYOUTS = ("corridor", "signpost")


class ScriptedEnv(Environment):
    name = "scripted"
    failure_taxonomy = ("premature_give_up", "missing_precondition", "action_format_error")

    def __init__(self, n_tasks: int = 8, max_steps: int = 8, layout: str = "corridor"):
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
        self.n_tasks = n_tasks
        self.max_steps = max_steps
        self.layout = layout
        self._room = 0
        self._has_key = False
        self._task: Task | None = None

    def tasks(self, split: str) -> list[Task]:
        offset = {"train": 0, "eval": 1000}[split]
        tasks = []
        for i in range(self.n_tasks):
            if self.layout == "signpost":
                payload = {"n_rooms": 3, "key_room": 2 * ((i + offset) % 2), "start": 1, "door_room": 1}
            else:
                n_rooms = 2 + (i + offset) % 3
                payload = {"n_rooms": n_rooms, "key_room": (i * 7 + offset) % n_rooms, "start": 0}
                payload["door_room"] = n_rooms - 1
            tasks.append(
                Task(
                    id=f"scripted/{split}/{i:03d}",
                    env=self.name,
                    split=split,
                    payload=payload,
                    metadata={"task_type": "key_door"},
                )
            )
        return tasks

    def reset(self, task: Task, seed: int) -> tuple[str, dict[str, Any]]:
        self._task, self._room, self._has_key = task, task.payload.get("start", 0), False
        goal = (
            "open the door at the end of the corridor"
            if self.layout == "corridor"
            else "find the key and open the door"
        )
        info = {"instruction": f"Your task is to: {goal}."}
        return self._describe(), info | {"admissible_actions": self.admissible_actions()}

    def _door_room(self) -> int:
        payload = self._task.payload
        return payload.get("door_room", payload["n_rooms"] - 1)

    def _describe(self) -> str:
        payload = self._task.payload
        text = f"You are in room {self._room}."
        if self._room == payload["key_room"] and not self._has_key:
            text += " You see a key."
        if self._room == self._door_room():
            text += " You see a locked door."
            if self.layout == "signpost" and not self._has_key:
                way = "left" if payload["key_room"] < self._room else "right"
                text += f" A sign points {way} to the key."
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
        if self._room == self._door_room():
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
        door = self._door_room()
        return "open door" if self._room == door else "go right" if self._room < door else "go left"

    def expert_distance(self) -> int:
        """The expert's remaining steps: to the key and ``take key`` (unless held), to the
        door, ``open door``. Example: corridor of 3, key in room 1, start in room 0 → 4."""
        door, key = self._door_room(), self._task.payload["key_room"]
        if self._has_key:
            return abs(self._room - door) + 1
        return abs(self._room - key) + 1 + abs(key - door) + 1

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
