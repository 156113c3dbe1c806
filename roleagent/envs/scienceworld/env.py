"""ScienceWorld (Wang et al., 2022, arXiv 2203.07540) on the real simulator: ``ScienceWorldEnv``.

Used by Agent-R (Yuan et al., 2025, arXiv 2501.11425) through AgentGym's server (Xi et
al., 2024, arXiv 2406.04151). Wraps ``scienceworld==1.2.3`` (a Scala simulator in a JVM,
one per worker process; see ``jvm.py``). Text is exactly the simulator's: the first
observation is its "look around" ("This room is called the hallway. In it, you see:
..."), the instruction its task description ("Task Description:\\nYour task is to boil
water. ..."); an unparsable command answers "No known action matches that input." and an
ambiguous one lists numbered choices (the agent answers with the number).

Reward: the simulator's score (0-100; -100 when the task is failed, e.g. the wrong
object was focused on) is mapped to ``max(score, 0) / 100`` and each step pays that
value's change, so an episode's rewards sum to its final score / 100 (0 for a failed
task). That is the "final reward in [0, 1]" Agent-R reports for SciWorld. ``success``
means the score reached 100. An episode ends when the simulator says completed (score
100, or a negative score), or after ``max_steps`` (200, above the longest gold path of the test panel, 193; Agent-R
uses 100 rounds).

Tasks, splits and the panel order: ``tasks.py``. ``simplification`` is the simulator's
simplification string: "" (none) is what AgentGym's server loads, so it is the default;
"easy" = teleport actions, self-watering flower pots, open containers and doors, no
electrical actions ("connect X to Y") outside the electricity tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from roleagent.envs.base import Environment, StepResult
from roleagent.envs.scienceworld import jvm
from roleagent.envs.scienceworld import tasks as T
from roleagent.types import Task

SIMPLIFICATIONS = ("teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors", "noElectricalAction")
# The task types AgentGym's ScienceWorld server serves: it leaves out 5-1, 5-2, 9-1..9-3,
# 10-1 and 10-2 (the grow-plant, inclined-plane and Mendelian-genetics tasks).
AGENTGYM_EXCLUDED = ("5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2")
TASK_SETS = {
    "all": T.TASK_NAMES,
    "agentgym": tuple(n for n in T.TASK_NAMES if T.TASK_NUMS[n] not in AGENTGYM_EXCLUDED),
}


class ScienceWorldEnv(Environment):
    """ScienceWorld's 30 task types on the real simulator.

    Args:
        simplification: the simulator's simplification string: "" (none; AgentGym's and so
            Agent-R's setting), "easy", or a comma-separated subset of ``SIMPLIFICATIONS``.
        max_steps: episode length limit (Agent-R: 100 rounds; 200 fits every panel gold path).
        task_set: "all" (30 task types) or "agentgym" (the 23 AgentGym serves).
        admissible_limit: ``admissible_actions`` returns None when the simulator lists more
            valid actions than this (0: always None, as AgentGym shows none). Its lists are
            long: over the gold paths of one test variation per task type, the median list
            of a task has 150-1,800 actions with "easy" and 550-3,250 with no
            simplification, up to ~4,400 (Mendelian genetics).
        jvm_options: options of each worker's JVM (default: 1 GiB heap, serial GC).
    """

    name = "scienceworld"
    max_steps = 200
    table_columns = {topic: topic for topic in T.TOPIC_ORDER}
    # The simulator runs in the JVM, whose CPU time is not this process's: the deadline
    # only bounds the Python side. A JVM that hangs is caught by EnvPool's wall timeout.
    step_cpu_seconds = 10.0
    remote_methods = ("jvm_pid", "jvm_rss_mb")

    def __init__(
        self,
        simplification: str = "",
        max_steps: int = 200,
        task_set: str = "all",
        admissible_limit: int = 2000,
        jvm_options: Sequence[str] = jvm.DEFAULT_JVM_OPTIONS,
    ) -> None:
        parts = [p for p in simplification.split(",") if p]
        unknown = [p for p in parts if p not in (*SIMPLIFICATIONS, "easy")]
        if unknown:
            raise ValueError(f"unknown simplification {unknown}; choose 'easy' or from {SIMPLIFICATIONS}")
        if task_set not in TASK_SETS:
            raise ValueError(f"task_set must be one of {sorted(TASK_SETS)}, got {task_set!r}")
        if int(max_steps) < 1 or int(admissible_limit) < 0:
            raise ValueError("max_steps must be >= 1 and admissible_limit >= 0")
        self.simplification = ",".join(parts)
        self.max_steps = int(max_steps)
        self.task_set = task_set
        self.admissible_limit = int(admissible_limit)
        self.jvm_options = tuple(jvm_options)
        self._sim = None  # started on the first reset: listing tasks needs no JVM
        self._task: Task | None = None
        self._gold: list[str] | None = None
        self._actions: list[str] = []
        self._valid: list[str] = []
        self._score = 0  # max(score, 0) after the last step
        self._state = ""

    # ------------------------------------------------------------------ tasks -------

    def splits(self) -> tuple[str, ...]:
        return T.SPLITS

    def tasks(self, split: str) -> list[Task]:
        return T.catalog(split, TASK_SETS[self.task_set], env=self.name)

    def panel_hash(self, split: str, max_tasks: int = 0) -> str:
        """Fingerprint of the first ``max_tasks`` tasks of ``split`` (0: all)."""
        tasks = self.tasks(split)
        return T.panel_hash(tasks[:max_tasks] if max_tasks > 0 else tasks)

    # --------------------------------------------------------------- episodes -------

    @property
    def simulator(self):
        """The running ``scienceworld.ScienceWorldEnv`` (its JVM started on first use, and
        again after it died: the next reset then works)."""
        if self._sim is not None and jvm.java_process(self._sim).poll() is not None:
            jvm.shutdown(self._sim)
            self._sim = None
        if self._sim is None:
            self._sim = jvm.launch(self.jvm_options)
        return self._sim

    def reset(self, task: Task, seed: int) -> tuple[str, dict[str, Any]]:
        """Load the task's variation and look around. The simulator is deterministic per
        variation, so ``seed`` changes nothing."""
        sim = self.simulator
        sim.load(task.payload["task_name"], int(task.payload["variation"]), self.simplification)
        observation, info = sim.reset()
        self._task = task
        self._gold = None  # generated on the first expert_action (seconds per load)
        self._actions = []
        self._score = 0
        self._remember(info)
        templates = "; ".join(sim.get_possible_actions())
        return observation, {"instruction": f"{info['taskDesc']}\n\nAvailable actions: {templates}"}

    def step(self, action: str) -> StepResult:
        if self._sim is None or self._task is None:
            raise RuntimeError("ScienceWorldEnv.step before reset")
        action = action.strip()
        # self._sim, not self.simulator: a JVM that died mid-episode is a crash (the episode
        # is not the action's failure); the next reset starts a new JVM.
        try:
            observation, _, completed, info = self._sim.step(action)
        except Exception as error:
            jvm.raise_if_dead(self._sim, error)
            raise  # the JVM is alive: the action's failure (the worker's step_failed)
        self._actions.append(action)
        score = int(info["score"])
        reward = (max(score, 0) - self._score) / 100.0
        self._score = max(score, 0)
        self._remember(info)
        success = score >= 100
        done = bool(completed or success or score < 0)
        return StepResult(observation, reward, done, {"success": success, "score": score})

    def _remember(self, info: dict[str, Any]) -> None:
        self._valid = sorted(info["valid"])
        self._state = f"{info['look']}\n{info['inv']}"

    def admissible_actions(self) -> list[str] | None:
        """The simulator's valid action-object combinations in this state, sorted (the
        package computes them on every step anyway); None before the first reset or when
        there are more than ``admissible_limit``."""
        if not self._valid or len(self._valid) > self.admissible_limit:
            return None
        return list(self._valid)

    def state_key(self, observation: str) -> str:
        """The room description and the inventory (free actions: they take no game time),
        not the last message ("The door is now open." says little about the state)."""
        return self._state

    def expert_action(self) -> str | None:
        """The next action of the simulator's gold path, while every action so far was the
        gold path's; None once the agent deviated or the path is used up (the gold path
        is a fixed sequence from the start state, not a planner from any state)."""
        if self._task is None:
            return None
        if self._gold is None:
            self._gold = self._gold_path()
        taken = len(self._actions)
        if taken >= len(self._gold) or self._actions != self._gold[:taken]:
            return None
        return self._gold[taken]

    def _gold_path(self) -> list[str]:
        """Reload the variation with its gold path (generating it takes the simulator up to
        ~15 s, so resets skip it) and replay the episode's actions to come back to the
        same state."""
        sim, task = self.simulator, self._task
        sim.load(task.payload["task_name"], int(task.payload["variation"]), self.simplification, generateGoldPath=True)
        _, info = sim.reset()
        for action in self._actions:
            _, _, _, info = sim.step(action)
        self._remember(info)
        return list(sim.get_gold_action_sequence())

    def close(self) -> None:
        if self._sim is not None:
            jvm.shutdown(self._sim)
            self._sim = None

    def jvm_pid(self) -> int:
        """Process id of this environment's JVM (0 when none runs)."""
        return jvm.java_process(self._sim).pid if self._sim is not None else 0

    def jvm_rss_mb(self) -> float:
        """Resident memory of this environment's JVM in MiB (0.0 when none runs)."""
        return jvm.rss_mb(self._sim) if self._sim is not None else 0.0
