"""ALFWorld on the real engine, offline: ``AlfWorldEnv``.

Text is exactly the engine's (ALFWorld's grammar ``alfred.twl2``): the first observation
is the room description and the task sentence ("You are in the middle of a room.
Looking quickly around you, you see ...\\n\\nYour task is to: put a apple in
countertop."), with the "-= Welcome to TextWorld, ALFRED! =-" banner removed as
ALFWorld's ReAct/verl-agent harnesses do; feedback such as "You arrive at countertop 1.
On the countertop 1, you see a apple 1." and "Nothing happens." for a command that is
not admissible. ``admissible_actions`` is the engine's sorted admissible-command list
without "help" (verl-agent drops it too). Note alfworld 0.4's grammar says
"move X to Y" where older releases said "put X in/on Y".

Reward: 1.0 on the step that wins, else 0.0 (the paper's Table 5, "suc=1, fail=0").
verl-agent's ALFWorld environment pays 10.0 on success instead; scale in the trainer if
a recipe needs that. An episode ends when the goal holds or after ``max_steps`` (50).

Tasks come from a deterministic generator (``generator.py``) or, when
``ALFWORLD_DATA`` holds ALFWorld's released ``json_2.1.1`` games (or ``source=
"official"``), from those games (the task lists: ``catalog.py``). Splits: "train",
"valid_seen", "valid_unseen"; "eval" is an alias of "valid_seen".
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Hashable
from dataclasses import asdict
from typing import Any

from roleagent.envs.alfworld import generator as G
from roleagent.envs.alfworld import scenes as S
from roleagent.envs.alfworld.catalog import generated_tasks, official_tasks
from roleagent.envs.alfworld.diagnosis import FAILURE_TAXONOMY, diagnose_trajectory, game_truth
from roleagent.envs.alfworld.search import search_action
from roleagent.envs.base import Environment, StepResult
from roleagent.types import Task, Trajectory

SPLITS = ("train", "valid_seen", "valid_unseen")
SPLIT_ALIASES = {"eval": "valid_seen"}


def default_cache_dir() -> str:
    base = os.environ.get("ROLEAGENT_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "roleagent"))
    return os.path.join(base, "alfworld")


class AlfWorldEnv(Environment):
    """ALFWorld household tasks on TextWorld's PDDL engine.

    Args:
        difficulty: "easy" (5 receptacles, no distractors, nothing hidden: CPU learning
            runs), "medium", or "hard" (whole ALFRED floor plans, like the released
            games). Ignored for official games.
        max_steps: episode length limit (ALFWorld's 50).
        train_size: generated training tasks per task type (ALFWorld has 3,553 in all).
        panel_size: generated tasks per task type in each evaluation panel.
        task_types: restrict to these task types (default: all six).
        cache_dir: where generated games are written
            (default ``~/.cache/roleagent/alfworld``; ``$ROLEAGENT_CACHE`` moves it).
        source: "auto" (official games when ``$ALFWORLD_DATA/json_2.1.1`` exists, else
            generated), "generated" or "official".
        data_dir: official data folder (default ``$ALFWORLD_DATA``).
        knobs: overrides of the difficulty's ``generator.Knobs`` (n_receptacles,
            n_distractors, p_closed, max_extra_duplicates). The difficulty label in task
            ids then becomes ``<difficulty>-<8 hex of the knobs>``.
    """

    name = "alfworld"
    max_steps = 50
    failure_taxonomy = FAILURE_TAXONOMY
    table_columns = S.TABLE_COLUMNS  # paper Table 1 column names per task type
    # the engine's imports: ~0.6 CPU-s of a fresh worker's ~0.9 s before its first reset
    preload = ("roleagent.envs.alfworld.engine", "textworld.envs.pddl", "alfworld.agents.environment.alfred_tw_env")

    def __init__(
        self,
        difficulty: str = "easy",
        max_steps: int = 50,
        train_size: int = 500,
        panel_size: int = 20,
        task_types: list[str] | tuple[str, ...] | None = None,
        cache_dir: str | None = None,
        source: str = "auto",
        data_dir: str | None = None,
        knobs: dict[str, Any] | None = None,
        expert: str = "planner",
    ) -> None:
        from roleagent.envs.alfworld import official

        if difficulty not in G.DIFFICULTIES:
            raise ValueError(f"unknown difficulty {difficulty!r}; choose from {sorted(G.DIFFICULTIES)}")
        if source not in ("auto", "generated", "official"):
            raise ValueError("source must be 'auto', 'generated' or 'official'")
        if expert not in ("planner", "search"):
            raise ValueError(f"expert must be 'planner' or 'search', got {expert!r}")
        self.expert = expert
        self._kwargs = dict(
            difficulty=difficulty,
            max_steps=max_steps,
            train_size=train_size,
            panel_size=panel_size,
            task_types=task_types,
            cache_dir=cache_dir,
            source=source,
            data_dir=data_dir,
            knobs=knobs,
            expert=expert,
        )
        self.knobs = G.DIFFICULTIES[difficulty]
        self.difficulty = difficulty
        self._custom_knobs = bool(knobs)
        if knobs:
            self.knobs = G.Knobs(**{**asdict(self.knobs), **knobs})
            blob = json.dumps(asdict(self.knobs), sort_keys=True)
            self.difficulty = f"{difficulty}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"
        self.max_steps = int(max_steps)
        self.train_size = int(train_size)
        self.panel_size = int(panel_size)
        self.task_types = tuple(task_types) if task_types else S.TASK_TYPES
        unknown = set(self.task_types) - set(S.TASK_TYPES)
        if unknown:
            raise ValueError(f"unknown task types {sorted(unknown)}; known: {S.TASK_TYPES}")
        root = official.official_root(data_dir)
        if source == "official" and root is None:
            raise FileNotFoundError("no json_2.1.1 folder under data_dir / $ALFWORLD_DATA")
        self.official_root = root if source in ("auto", "official") else None
        self.source = "official" if self.official_root else "generated"
        self._cache_root = cache_dir or default_cache_dir()
        self._tasks: dict[str, list[Task]] = {}
        self._engine = None
        self._loaded: str | None = None
        self._task: Task | None = None
        self._state = None
        self._steps = 0
        self._done = False
        self._won = False
        self._plan: list[str] | None = None  # planner commands from the current state on
        self._plan_pos = 0
        self._observed = ""  # every observation of the episode (the searching expert)
        self._visited: set[str] = set()

    # pickling: rebuild from the constructor's kwargs (the engine holds a C library).
    def __reduce__(self):
        return (_rebuild, (self._kwargs,))

    # ------------------------------------------------------------------ tasks -------

    def splits(self) -> tuple[str, ...]:
        return SPLITS

    @property
    def cache_dir(self) -> str:
        from roleagent.envs.alfworld.engine import logic_fingerprint

        return os.path.join(self._cache_root, logic_fingerprint())

    def tasks(self, split: str) -> list[Task]:
        split = SPLIT_ALIASES.get(split, split)
        if split not in SPLITS:
            raise KeyError(f"unknown split {split!r}; ALFWorld splits: {SPLITS} (alias: eval)")
        if split not in self._tasks:
            if self.source == "official":
                self._tasks[split] = official_tasks(self.official_root, split, self.task_types, env=self.name)
            else:
                size = self.train_size if split == "train" else self.panel_size
                knobs = self.knobs if self._custom_knobs else None
                self._tasks[split] = generated_tasks(
                    self.difficulty, split, self.task_types, size, knobs, env=self.name
                )
        return list(self._tasks[split])

    def game_file(self, task: Task) -> str:
        """Path of the task's ``game.tw-pddl`` (generated and planner-checked on first use)."""
        payload = task.payload
        if payload.get("source") == "official":
            return payload["game_file"]
        from roleagent.envs.alfworld.engine import materialize

        return materialize(G.Spec.from_json(payload["spec"]), self._game_folder(task))

    def _game_folder(self, task: Task) -> str:
        p = task.payload
        if p.get("source") == "official":
            return os.path.dirname(p["game_file"])
        return os.path.join(
            self.cache_dir, p["difficulty"], p["split"], p["spec"]["task_type"], f"{int(p['index']):04d}"
        )

    def prepare_task(self, task: Task) -> None:
        self.game_file(task)

    def prepare(self, split: str) -> list[str]:
        """Generate and planner-check every game of a split now (else done lazily on reset)."""
        return [self.game_file(t) for t in self.tasks(split)]

    def panel_hash(self, split: str) -> str:
        """sha256 over (task id, game bytes) of a split: equal on every machine."""
        digest = hashlib.sha256()
        for task in self.tasks(split):
            with open(self.game_file(task), "rb") as fh:
                game_digest = hashlib.sha256(fh.read()).hexdigest()
            digest.update(f"{task.id}\t{game_digest}\n".encode())
        return digest.hexdigest()

    # ------------------------------------------------------------------ episode -----

    def reset(self, task: Task, seed: int = 0) -> tuple[str, dict[str, Any]]:
        """Start ``task``. The engine is deterministic, so ``seed`` changes nothing."""
        from roleagent.envs.alfworld.engine import instruction_of, make_engine, strip_welcome

        path = self.game_file(task)
        if self._engine is None:
            self._engine = make_engine()
            self._loaded = None
        if self._loaded != path:  # a group replaying one task skips the second parse
            self._engine.load(path)
            self._loaded = path
        self._state = self._engine.reset()
        self._task = task
        self._steps = 0
        self._done = False
        self._won = bool(self._state["won"])
        self._plan = self._stored_plan(path)
        self._plan_pos = 0
        observation = strip_welcome(self._state.feedback)
        self._observed, self._visited = observation, set()
        info = {
            "instruction": instruction_of(observation),
            "admissible_actions": self.admissible_actions(),
            "task_type": task.metadata.get("task_type"),
            "gamefile": path,
            "won": self._won,
        }
        return observation, info

    def step(self, action: str) -> StepResult:
        if self._engine is None or self._state is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return StepResult(
                "The episode is over.",
                0.0,
                True,
                {
                    "success": self._won,
                    "admissible_actions": [],
                    "action_valid": False,
                    "won": self._won,
                    "step": self._steps,
                },
            )
        command = (action or "").strip()
        valid = command in self._state["admissible_commands"]
        self._state, _, _ = self._engine.step(command)
        self._steps += 1
        if (
            self._plan is not None
            and self._plan_pos < len(self._plan)
            and valid
            and command == self._plan[self._plan_pos]
        ):
            self._plan_pos += 1  # still on the plan: its remainder stays optimal
        else:
            self._plan = None  # off the plan: replan when the expert is asked next
        self._won = bool(self._state["won"])
        self._observed += "\n" + self._state.feedback
        if valid and command.startswith("go to "):
            self._visited.add(command[len("go to ") :])
        truncated = not self._won and self._steps >= self.max_steps
        self._done = self._won or truncated
        reward = 1.0 if self._won else 0.0
        info = {
            "success": self._won,
            "won": self._won,
            "admissible_actions": self.admissible_actions(),
            "action_valid": valid,
            "step": self._steps,
            "truncated": truncated,
        }
        return StepResult(self._state.feedback.strip(), reward, self._done, info)

    def admissible_actions(self) -> list[str] | None:
        if self._state is None:
            return None
        return [c for c in self._state["admissible_commands"] if c != "help"]

    def expert_action(self) -> str | None:
        """The expert's next command: the planner's (ALFWorld's policy_commands), or with
        ``expert="search"`` a search step while the object it needs is unseen.

        The plan checked at generation time is stored with the game; while the episode
        follows it, its next command is returned without calling the planner (the engine
        is deterministic). After any other command the planner replans from the current
        state (fast-downward; up to seconds on large "hard" rooms).
        """
        plan = self.expert_plan()
        if not plan:
            return None
        if self.expert == "search":
            current = self._state.feedback if self._state is not None else ""
            found = search_action(plan, self._observed, self._visited, current, self.admissible_actions() or [])
            return found or plan[0]
        return plan[0]

    def expert_plan(self) -> list[str]:
        """The planner's remaining commands from the current state."""
        from roleagent.envs.alfworld.engine import plan

        if self._engine is None or self._done:
            return []
        if self._plan is None or self._plan_pos >= len(self._plan):
            self._plan = plan(self._engine)
            self._plan_pos = 0
        return list(self._plan[self._plan_pos :])

    @staticmethod
    def _stored_plan(game_path: str) -> list[str] | None:
        traj = os.path.join(os.path.dirname(game_path), "traj_data.json")
        try:
            with open(traj) as fh:
                stored = json.load(fh).get("roleagent", {}).get("expert_plan")
        except (OSError, ValueError):
            return None
        return list(stored) if stored else None

    def state_key(self, observation: str) -> Hashable:
        return observation

    def diagnose(self, trajectory: Trajectory) -> dict[str, Any] | None:
        """Rule-based Table-6 diagnosis (``diagnosis.py``); None for a success.

        Ground truth comes from the task's game file when it is on disk (where every
        target instance and lamp starts), else from the task metadata alone.
        """
        if trajectory.success:
            return None
        path = None
        if trajectory.task.payload:
            path = os.path.join(self._game_folder(trajectory.task), "game.tw-pddl")
        truth = game_truth(trajectory.task.metadata, path)
        return diagnose_trajectory(trajectory, truth, max_steps=self.max_steps)

    def close(self) -> None:
        if self._engine is not None:
            try:
                self._engine.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._engine = None
        self._loaded = None
        self._state = None


def _rebuild(kwargs: dict[str, Any]) -> AlfWorldEnv:
    return AlfWorldEnv(**kwargs)
