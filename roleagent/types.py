"""The data model every part of roleagent shares (DESIGN §3).

``Task`` → ``Step`` → ``Trajectory`` → ``Group``. A task id is a stable string that
survives rollout → failure record → task sampler; nothing refers to a task by its batch
position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable


@dataclass(frozen=True)
class Task:
    """One playable task. ``payload`` is whatever the environment's ``reset`` needs."""

    id: str  # stable across machines and runs, e.g. "textcraft/train/0042"
    env: str  # registry name of the environment, e.g. "textcraft"
    payload: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    split: str = "train"
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Step:
    """One agent turn: the observation it saw, what it generated, what happened next."""

    observation: str  # text the agent saw before acting (s_t)
    state_key: Hashable  # grouping key for step-level advantages (GiGPO anchor state)
    prompt_ids: list[int]  # exact prompt tokens fed to the model
    action_ids: list[int]  # generated tokens, as returned by the engine
    action_logprobs: list[float]  # log π_old of each generated token at generation time
    action_text: str  # decoded generation
    action: str | None  # parsed environment action; None when unparsable
    valid: bool  # False when the output could not be parsed into an action
    reward: float = 0.0  # environment reward minus ``penalty``
    penalty: float = 0.0  # format penalty included in ``reward`` (invalid action), >= 0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    # World-In-Agent (Role-Agent §3.2): predictions ŝ_{t,1..H} and their LMS scores.
    predictions: list[str] = field(default_factory=list)
    prediction_scores: list[float] = field(default_factory=list)  # NaN past the end
    prediction_prompt_ids: list[int] = field(default_factory=list)
    prediction_ids: list[int] = field(default_factory=list)
    prediction_logprobs: list[float] = field(default_factory=list)

    @property
    def env_reward(self) -> float:
        """The environment's own reward, without the format penalty."""
        return self.reward + self.penalty


@dataclass
class Trajectory:
    """One episode of one task."""

    task: Task
    steps: list[Step] = field(default_factory=list)
    success: bool = False
    instruction: str = ""  # the task text the environment gave at reset
    final_observation: str = ""  # observation after the last action (s_{T+1})
    seed: int = 0
    crashed: bool = False  # the environment process died during this episode
    diagnosis: dict[str, Any] | None = None

    @property
    def episode_return(self) -> float:
        return float(sum(step.reward for step in self.steps))

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dump for rollout files and ``roleagent view``."""
        return {
            "task_id": self.task.id,
            "env": self.task.env,
            "split": self.task.split,
            "metadata": self.task.metadata,
            "seed": self.seed,
            "instruction": self.instruction,
            "success": self.success,
            "return": self.episode_return,
            "crashed": self.crashed,
            "diagnosis": self.diagnosis,
            "final_observation": self.final_observation,
            "steps": [
                {
                    "observation": s.observation,
                    "action_text": s.action_text,
                    "action": s.action,
                    "valid": s.valid,
                    "reward": s.reward,
                    "penalty": s.penalty,
                    "done": s.done,
                    "predictions": s.predictions,
                    "prediction_scores": s.prediction_scores,
                    "info": {k: v for k, v in s.info.items() if _jsonable(v)},
                }
                for s in self.steps
            ],
        }


@dataclass
class Group:
    """The G trajectories of one task, rolled out with the same environment seed."""

    task: Task
    trajectories: list[Trajectory]


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, dict))
