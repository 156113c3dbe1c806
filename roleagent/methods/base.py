"""The plug-in points of a training method. Every hook is a no-op by default, so a method
overrides only what it changes; the loop calls the hooks of every enabled method, in the
order they were built, and knows nothing else about them.

::

    class MyMethod(Method):
        name = "mine"                      # metrics "mine/...", checkpoint state "mine"
        config_class = MyConfig            # optional: settings from method_settings.mine

        def adjust_advantages(self, batch, advantages):
            return advantages * 0.5

        def after_iteration(self, trajectories, iteration):
            return {"episodes": float(len(trajectories))}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from roleagent.rollout import RolloutExtension, RolloutSettings
    from roleagent.trainer.advantages import StepBatch
    from roleagent.trainer.samples import TrainSample
    from roleagent.trainer.stages import Collector, Objective, Scorer, TaskSource
    from roleagent.types import Step, Task, Trajectory

#: chat(conversations, *, max_new_tokens=256, temperature=0.0, stop=(), response_prefix="")
Chat = Callable[..., list[str]]


@dataclass
class MethodContext:
    """What the trainer gives a method: the run, the environments, the model."""

    cfg: Any  # the whole TrainConfig
    run_dir: Path
    pool: Any  # roleagent.envs.workers.EnvPool (diagnose, call_all, meta)
    engine: Any  # roleagent.engine.Engine
    chat: Chat  # batched chat completion with the policy
    train_tasks: list[Task]
    settings: RolloutSettings  # the training rollouts' settings (max_steps, temperature, ...)


class Method:
    """Base class of a training method (Agent-In-World, SEAL, an external one)."""

    name: str = "method"
    #: Dataclass of the method's settings. Built-in methods read their section of
    #: TrainConfig; external ones get ``from_dict(config_class, method_settings[name])``.
    config_class: type | None = None
    #: False when the method's objective ignores the loop's advantages (Agent-R's SFT), so
    #: rollout groups of one task need not be compared (``rollout.group_size`` may be 1).
    uses_advantages: bool = True

    def __init__(self, context: MethodContext, config: Any = None):
        self.context = context
        self.config = config

    # -- configuration (class level, before anything is built) --------------------------
    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Cross-field checks of the whole TrainConfig; raise ConfigError, never change it."""

    @classmethod
    def resolve_config(cls, cfg: Any) -> None:
        """Fill in what a valid config leaves implied (runs after validation)."""

    # -- replacing a stage (None keeps the default) --------------------------------------
    def task_source(self) -> TaskSource | None:
        return None

    def collector(self) -> Collector | None:
        return None

    def scorer(self) -> Scorer | None:
        return None

    def objective(self) -> Objective | None:
        return None

    def rollout_extension(self) -> RolloutExtension | None:
        """An extra batched generation per turn (after the actions, before the
        environments step), recorded in ``step.extras[extension.name]``."""
        return None

    # -- hooks around the stages -----------------------------------------------------------
    def adjust_advantages(self, batch: StepBatch, advantages: np.ndarray) -> np.ndarray:
        """The advantages to train on, shape (n,), one per step sample of ``batch``."""
        return advantages

    def extra_samples(self, step: Step, advantage: float) -> list[TrainSample]:
        """Training samples this method adds for one step (after the action's own)."""
        return []

    def after_iteration(self, trajectories: list[Trajectory], iteration: int) -> dict[str, float]:
        """Called once per iteration after the update; metrics are logged as ``name/key``."""
        return {}

    # -- run directory and checkpoints ---------------------------------------------------
    def start_fresh(self) -> None:
        """The run starts at iteration 0: forget files an earlier attempt left."""

    def state_dict(self) -> dict[str, Any]:
        """Plain data saved in every checkpoint, including any record of the method's own
        files (row counts, digests) that :meth:`load_state_dict` checks them against."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint: verify the method's files and cut them back to the record."""

    def write_summary(self, run_dir: Path) -> None:
        """At the end of the run (plots, tables)."""

    def close(self) -> None:
        pass
