"""Per-step returns over flattened step samples: discounted reward-to-go, episode totals,
and the format penalty for invalid actions.

All inputs are arrays of length n whose trajectories are consecutive and in time order.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ._segments import trajectory_layout


def discounted_returns(
    traj_ids: Sequence[Hashable] | np.ndarray,
    step_rewards: Sequence[float] | np.ndarray,
    *,
    gamma: float,
) -> np.ndarray:
    """Reward-to-go ``R_t = Σ_{k≥t} γ^{k−t} r_k`` inside each trajectory.

    This is GiGPO's step return and Role-Agent's ``R_task(a_t)`` (paper eq. 5). It runs the
    same backward recursion ``R_t = r_t + γ R_{t+1}`` as verl-agent's
    ``compute_step_discounted_returns`` — vectorised over trajectories on a padded
    (n_traj, T_max) matrix, one column per time step — so values are bit-identical to the
    loop in float64 (verl-agent itself works in float32).

    Example: traj [a, a, a, b], rewards [0, 0, 1, 2], γ = 0.5 → [0.25, 0.5, 1.0, 2.0].
    """
    r = np.asarray(step_rewards, dtype=np.float64)
    traj, pos, lengths = trajectory_layout(traj_ids)
    if r.shape != traj.shape:
        raise ValueError(f"step_rewards has shape {r.shape}, expected {traj.shape}")
    if r.size == 0:
        return r.copy()
    t_max = int(lengths.max())
    padded = np.zeros((lengths.size, t_max + 1))  # zero column past every end
    padded[traj, pos] = r
    out = np.zeros_like(padded)
    for t in range(t_max - 1, -1, -1):  # loop over time, vectorised over trajectories
        out[:, t] = padded[:, t] + gamma * out[:, t + 1]
    return out[traj, pos]


def episode_scores(
    traj_ids: Sequence[Hashable] | np.ndarray,
    step_rewards: Sequence[float] | np.ndarray,
) -> np.ndarray:
    """The trajectory's total (undiscounted) reward, broadcast to each of its steps.

    This is the episode score ``R^E(τ)`` of Role-Agent eq. 1 and GiGPO's episode reward.

    Example: traj [a, a, b], rewards [0.5, 1, -1] → [1.5, 1.5, -1.0].
    """
    r = np.asarray(step_rewards, dtype=np.float64)
    traj, _, lengths = trajectory_layout(traj_ids)
    if r.shape != traj.shape:
        raise ValueError(f"step_rewards has shape {r.shape}, expected {traj.shape}")
    if r.size == 0:
        return r.copy()
    return np.bincount(traj, weights=r, minlength=lengths.size)[traj]


def apply_invalid_penalty(
    step_rewards: Sequence[float] | np.ndarray,
    valid: Sequence[bool] | np.ndarray,
    *,
    penalty: float = 0.1,
) -> np.ndarray:
    """Subtract ``penalty`` from the reward of each step whose action was invalid (format).

    GiGPO / verl-agent's invalid-action penalty (DESIGN §4: 0.1). Returns a new array.

    Example: rewards [0, 1, 0], valid [True, True, False] → [0.0, 1.0, -0.1].
    """
    r = np.asarray(step_rewards, dtype=np.float64)
    ok = np.asarray(valid, dtype=bool)
    if r.shape != ok.shape:
        raise ValueError(f"valid has shape {ok.shape}, expected {r.shape}")
    return r - penalty * (~ok)
