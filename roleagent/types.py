"""The data model every part of roleagent shares: ``Task`` → ``Step`` → ``Trajectory``.

A task id is a stable string that survives rollout → failure record → task sampler;
nothing refers to a task by its batch position. What a training method adds to a step or
an episode (World-In-Agent predictions, the advantage the algorithm computed, SEAL's
trajectory weight) lives in namespaced records, ``Step.extras[name]`` and
``Trajectory.extras[name]``, never in fields of the core types.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

#: Keys of an ``extras`` record that hold token data; rollout dumps leave them out
#: unless ``to_json(tokens=True)``.
TOKEN_KEYS = frozenset({"prompt_ids", "ids", "logprobs"})


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
    action_text: str  # decoded generation
    action: str | None  # parsed environment action; None when unparsable
    valid: bool  # False when the output could not be parsed into an action
    # Token in, token out; empty for steps no model generated (expert, replay):
    prompt_ids: list[int] = field(default_factory=list)  # exact prompt tokens fed to the model
    action_ids: list[int] = field(default_factory=list)  # generated tokens, as returned by the engine
    action_logprobs: list[float] = field(default_factory=list)  # log π_old of each generated token
    # constrained decoding: per generated token, the token ids it was sampled among (its
    # log-prob is renormalised over them); None when decoding was free
    action_allowed: list[list[int]] | None = None
    reward: float = 0.0  # environment reward minus ``penalty``
    penalty: float = 0.0  # format penalty included in ``reward`` (invalid action), >= 0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-method records

    @property
    def env_reward(self) -> float:
        """The environment's own reward, without the format penalty."""
        return self.reward + self.penalty

    def to_json(self, *, tokens: bool = False) -> dict[str, Any]:
        out = {
            "observation": self.observation,
            "state_key": _key_json(self.state_key),
            "action_text": self.action_text,
            "action": self.action,
            "valid": self.valid,
            "reward": self.reward,
            "penalty": self.penalty,
            "done": self.done,
            "info": {k: v for k, v in self.info.items() if _jsonable(v)},
            "extras": _extras_json(self.extras, tokens),
        }
        if tokens:
            out.update(prompt_ids=self.prompt_ids, action_ids=self.action_ids, action_logprobs=self.action_logprobs)
            if self.action_allowed is not None:
                out["action_allowed"] = self.action_allowed
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Step:
        key = data.get("state_key")
        return cls(
            observation=data["observation"],
            state_key=tuple(key) if isinstance(key, list) else key,
            prompt_ids=list(data.get("prompt_ids", [])),
            action_ids=list(data.get("action_ids", [])),
            action_logprobs=list(data.get("action_logprobs", [])),
            action_allowed=_allowed_json(data.get("action_allowed")),
            action_text=data["action_text"],
            action=data["action"],
            valid=data["valid"],
            reward=data["reward"],
            penalty=data["penalty"],
            done=data["done"],
            info=dict(data.get("info", {})),
            extras={k: dict(v) for k, v in data.get("extras", {}).items()},
        )


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
    diagnosis: dict[str, Any] | None = None  # the environment's diagnosis (Environment.diagnose)
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-method records

    @property
    def episode_return(self) -> float:
        return float(sum(step.reward for step in self.steps))

    def to_json(self, *, tokens: bool = False) -> dict[str, Any]:
        """A JSON-serialisable dump for rollout files and ``roleagent view``; token ids and
        log-probs only with ``tokens=True``. :meth:`from_json` is its inverse (the task's
        ``payload`` is not dumped: an environment rebuilds it from the task id)."""
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
            "extras": _extras_json(self.extras, tokens),
            "steps": [s.to_json(tokens=tokens) for s in self.steps],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trajectory:
        task = Task(
            id=data["task_id"],
            env=data["env"],
            split=data.get("split", "train"),
            metadata=dict(data.get("metadata") or {}),
        )
        return cls(
            task=task,
            steps=[Step.from_json(s) for s in data["steps"]],
            success=data["success"],
            instruction=data.get("instruction", ""),
            final_observation=data.get("final_observation", ""),
            seed=data.get("seed", 0),
            crashed=data.get("crashed", False),
            diagnosis=data.get("diagnosis"),
            extras={k: dict(v) for k, v in data.get("extras", {}).items()},
        )


def _extras_json(extras: dict[str, dict[str, Any]], tokens: bool) -> dict[str, dict[str, Any]]:
    return {name: {k: v for k, v in record.items() if tokens or k not in TOKEN_KEYS} for name, record in extras.items()}


def _allowed_json(allowed: list | None) -> list[list[int]] | None:
    return None if allowed is None else [[int(t) for t in ids] for ids in allowed]


def _key_json(key: Hashable) -> Any:
    return key if isinstance(key, (str, int, float, bool, type(None), tuple)) else str(key)


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, dict))
