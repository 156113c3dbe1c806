"""Episode-level (trajectory-level) advantages: GRPO (Role-Agent, Wang et al., 2026, arXiv 2606.10917, eq. 1),
RLOO, and GiGPO's episode branch with verl-agent's conventions (GiGPO, Feng et al., 2025, arXiv 2505.10978).

Inputs are flattened step samples: ``group_ids`` (n,) the episode group (the G rollouts of
one task), ``traj_ids`` (n,) the trajectory (unique across the batch), ``step_rewards`` (n,).
The steps of each trajectory are in time order (trajectories may be interleaved). The
episode score of a trajectory is the sum of its step rewards. Outputs are per step, shape
(n,).

Invalid-action penalties (``penalties`` (n,), the amount subtracted on each step;
``penalty_placement``, see ``returns.split_penalties``): with ``"step"`` (verl-agent) the
trajectory scores come from the raw rewards and each sample's own score is lowered by its
own penalty only; with ``"reward"`` the penalties are folded into the rewards first.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ._segments import check_mode, factorize, group_of_trajectory, normalize_within, segment_stats, trajectory_layout
from .returns import split_penalties

Ids = Sequence[Hashable] | np.ndarray


def _trajectory_scores(
    group_ids: Ids,
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    penalties: Sequence[float] | np.ndarray | None = None,
    placement: str = "step",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(per-trajectory score, per-trajectory group code, per-step trajectory index,
    per-step own penalty). Folded penalties are already inside the scores."""
    r = np.asarray(step_rewards, dtype=np.float64)
    traj, _, lengths = trajectory_layout(traj_ids)
    groups, _ = factorize(group_ids)
    if not (r.shape == traj.shape == groups.shape):
        raise ValueError(f"length mismatch: rewards {r.shape}, traj {traj.shape}, groups {groups.shape}")
    folded, own = split_penalties(penalties, r.shape[0], placement=placement)
    scores = np.bincount(traj, weights=r - folded, minlength=lengths.size)
    return scores, group_of_trajectory(groups, traj, lengths.size), traj, own


def grpo_advantages(
    group_ids: Ids,
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    *,
    penalties: Sequence[float] | np.ndarray | None = None,
    penalty_placement: str = "step",
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
) -> np.ndarray:
    """GRPO episode advantage ``A^E(τ_i) = (R^E(τ_i) − avg_j R^E(τ_j)) / std_j R^E(τ_j)``.

    Role-Agent eq. 1: the statistics are over the TRAJECTORIES of the group, each counted
    once (unlike GiGPO's episode branch, which counts step samples); the value is broadcast
    to every step of the trajectory. std is unbiased, ``eps`` is added to it;
    ``mode="mean_norm"`` drops the division (Dr. GRPO). A group of one trajectory uses
    verl's convention mean 0, std 1, so its advantage is R / (1 + eps). With the ``"step"``
    penalty placement the statistics use the raw trajectory scores and a sample's own
    penalty lowers only its own value: ``(R^E − p_t − mean) / (std + eps)``.

    Example: one group, trajectories a (2 steps, rewards 0, 1) and b (1 step, reward 0):
    scores 1 and 0, mean 0.5, std 0.7071 → per step [0.7071, 0.7071, -0.7071]. With
    penalties [0.1, 0, 0] ("step"): the first sample gets (1 − 0.1 − 0.5) / 0.7071 = 0.5657.
    """
    check_mode(mode)
    scores, traj_group, traj, own = _trajectory_scores(group_ids, traj_ids, step_rewards, penalties, penalty_placement)
    if traj.size == 0:
        return np.zeros(0)
    mean, std = segment_stats(scores, traj_group, singleton="episode")
    g = traj_group[traj]
    centred = scores[traj] - own - mean[g]
    return centred if mode == "mean_norm" else centred / (std[g] + eps)


def rloo_advantages(
    group_ids: Ids,
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    *,
    penalties: Sequence[float] | np.ndarray | None = None,
    penalty_placement: str = "step",
) -> np.ndarray:
    """RLOO: ``A_i = R_i − (1/(G−1)) Σ_{j≠i} R_j`` over the G trajectories of the group.

    Leave-one-out baseline (Kool et al. 2019; Ahmadian et al. 2024), equal to
    ``G/(G−1)·(R_i − mean)``. A group with one trajectory has no baseline → 0. With the
    ``"step"`` placement a sample's own penalty is subtracted from its own value only (the
    baselines use the raw scores).

    Example: one group with scores 1, 0, 0 → 1 − 0 = 1, 0 − 0.5 = −0.5, −0.5.
    """
    scores, traj_group, traj, own = _trajectory_scores(group_ids, traj_ids, step_rewards, penalties, penalty_placement)
    if traj.size == 0:
        return np.zeros(0)
    n_groups = int(traj_group.max()) + 1
    size = np.bincount(traj_group, minlength=n_groups).astype(np.float64)[traj_group]
    total = np.bincount(traj_group, weights=scores, minlength=n_groups)[traj_group]
    baseline = (total - scores) / np.maximum(size - 1.0, 1.0)
    adv = np.where(size > 1, scores - baseline, 0.0)
    return np.where(size[traj] > 1, adv[traj] - own, 0.0)


def gigpo_episode_advantages(
    group_ids: Ids,
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    *,
    penalties: Sequence[float] | np.ndarray | None = None,
    penalty_placement: str = "step",
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
) -> np.ndarray:
    """GiGPO's episode-relative advantage (GiGPO eq. 3) with verl-agent's exact conventions.

    Each step sample carries its trajectory's score (sum of step rewards), and the group
    statistics are taken over ALL STEP SAMPLES of the group (verl-agent's
    ``compute_mean_std_cross_steps=True``): a trajectory of 10 steps weighs 10 times one of
    1 step. A group holding a single step sample has mean 0 and std 1; std is unbiased;
    ``eps`` is added to std. Role-Agent uses this as ``A^E`` (see ``role_agent_advantages``).
    With the ``"step"`` placement a sample's value is its trajectory's raw score minus its
    own penalty, and the statistics are over those values (verl-agent: the penalty sits in
    that sample's ``token_level_scores``).

    Example: one group, trajectory a (2 steps, score 1), b (1 step, score 0): samples
    [1, 1, 0], mean 2/3, std 0.5774 → [0.5774, 0.5774, -1.1547].
    """
    scores, _, traj, own = _trajectory_scores(group_ids, traj_ids, step_rewards, penalties, penalty_placement)
    if traj.size == 0:
        return np.zeros(0)
    groups, _ = factorize(group_ids)
    return normalize_within(scores[traj] - own, groups, mode=mode, eps=eps, singleton="episode")
