"""Extension points of the training loop for methods that add to the standard iteration.

A hook sees each iteration's batch after the advantages are computed and may rescale them
(SEAL's diagnosis weights), and it sees the finished trajectories after the update (to
update its own state, or push state to the environment workers with
``EnvPool.call_all``). Its state is saved in checkpoints. The loop calls hooks in order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from roleagent.envs.workers import EnvPool
from roleagent.trainer.advantages import StepBatch
from roleagent.types import Trajectory


class TrainerHook:
    name = "hook"

    def adjust_advantages(self, batch: StepBatch, advantages: np.ndarray) -> np.ndarray:
        """Return the advantages to train on (shape (n,), one per step sample)."""
        return advantages

    def after_iteration(self, trajectories: list[Trajectory], *, iteration: int, pool: EnvPool) -> dict[str, float]:
        """Called once per training iteration after the update; returns metrics."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
