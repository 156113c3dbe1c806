"""Flatten groups of trajectories into step arrays and call the pure advantage functions.

This is the only bridge between the data model (``roleagent.types``) and the algorithm
layer (``roleagent.algos``), which sees nothing but arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roleagent import algos
from roleagent.config import AlgoConfig
from roleagent.types import Trajectory


@dataclass
class StepBatch:
    """Step samples of the non-crashed trajectories, each trajectory's steps in time order."""

    trajectories: list[Trajectory]
    group_ids: np.ndarray  # (n,) task id of each step's episode group
    traj_ids: np.ndarray  # (n,) index into ``trajectories``
    rewards: np.ndarray  # (n,) raw environment rewards (no invalid-action penalty)
    penalties: np.ndarray  # (n,) invalid-action penalty of each step (0 when valid)
    states: list  # (n,) state keys
    prediction_scores: np.ndarray | None  # (n, H) or None without WIA

    @classmethod
    def from_trajectories(cls, trajectories: list[Trajectory], *, horizon: int = 0) -> "StepBatch":
        kept = [t for t in trajectories if not t.crashed and t.steps]
        group_ids, traj_ids, rewards, penalties, states, scores = [], [], [], [], [], []
        for index, trajectory in enumerate(kept):
            for step in trajectory.steps:
                group_ids.append(trajectory.task.id)
                traj_ids.append(index)
                rewards.append(step.env_reward)
                penalties.append(step.penalty)
                states.append(step.state_key)
                if horizon:
                    row = list(step.prediction_scores) or [np.nan] * horizon
                    scores.append(row + [np.nan] * (horizon - len(row)))
        return cls(
            trajectories=kept,
            group_ids=np.asarray(group_ids, dtype=object),
            traj_ids=np.asarray(traj_ids, dtype=np.int64),
            rewards=np.asarray(rewards, dtype=np.float64),
            penalties=np.asarray(penalties, dtype=np.float64),
            states=states,
            prediction_scores=np.asarray(scores, dtype=np.float64).reshape(len(rewards), horizon) if horizon else None,
        )

    def __len__(self) -> int:
        return len(self.rewards)


def compute_advantages(batch: StepBatch, cfg: AlgoConfig, *, wia: bool) -> np.ndarray:
    """One advantage per step sample for the configured algorithm. Shape (n,)."""
    if len(batch) == 0:
        return np.zeros(0)
    placed = dict(penalties=batch.penalties, penalty_placement=cfg.penalty_placement)
    common = dict(mode=cfg.norm, **placed)
    if cfg.name == "grpo":
        return algos.grpo_advantages(batch.group_ids, batch.traj_ids, batch.rewards, **common)
    if cfg.name == "rloo":
        return algos.rloo_advantages(batch.group_ids, batch.traj_ids, batch.rewards, **placed)
    if cfg.name == "gigpo":
        return algos.gigpo_advantages(
            batch.group_ids, batch.traj_ids, batch.rewards, batch.states, gamma=cfg.gamma,
            step_weight=cfg.step_weight, similarity_threshold=cfg.similarity_threshold, **common,
        )
    # Role-Agent. Without World-In-Agent (the "w/o predictive reward" ablation) all
    # prediction scores are 0, so R_t = R_task and A = A^S(R_task) + alpha * A^E.
    scores = batch.prediction_scores if wia else np.zeros((len(batch), 1))
    return algos.role_agent_advantages(
        batch.group_ids, batch.traj_ids, batch.rewards, batch.states, scores,
        gamma=cfg.gamma, alpha=cfg.alpha, similarity_threshold=cfg.similarity_threshold, **common,
    )


def zero_variance_fraction(batch: StepBatch) -> float:
    """Share of episode groups whose trajectories all have the same score (no GRPO signal)."""
    scores: dict[str, set[float]] = {}
    for trajectory in batch.trajectories:
        scores.setdefault(trajectory.task.id, set()).add(round(trajectory.episode_return, 9))
    return float(np.mean([len(s) == 1 for s in scores.values()])) if scores else 0.0
