"""Per-step returns over flattened step samples: discounted reward-to-go, episode totals,
and the placement of the format penalty for invalid actions.

All inputs are arrays of length n in which each trajectory's steps are in time order
(trajectories consecutive or interleaved).

Invalid-action penalty placement (``PLACEMENTS``):

- ``"step"`` (default, verl-agent's): returns and episode scores are computed from the raw
  environment rewards; then the penalty is subtracted only from the invalid step's own
  return and from its own sample's episode score. verl-agent ``verl/trainer/ppo/
  ray_trainer.py``: ``compute_step_discounted_returns`` runs on the raw ``rewards`` right
  after the rollout, and ``apply_invalid_action_penalty`` later subtracts
  ``invalid_action_penalty_coef`` from that sample's ``step_rewards`` (its discounted
  return) and from the last token of its ``token_level_scores`` (its episode score).
- ``"reward"``: the penalty is folded into the step reward before anything else, so it is
  discounted into every earlier step's return and lowers the episode score of every step
  of the trajectory (roleagent's behaviour before this option existed).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ._segments import trajectory_layout

PLACEMENTS = ("step", "reward")


def discounted_returns(
    traj_ids: Sequence[Hashable] | np.ndarray,
    step_rewards: Sequence[float] | np.ndarray,
    *,
    gamma: float,
) -> np.ndarray:
    """Reward-to-go ``R_t = Σ_{k≥t} γ^{k−t} r_k`` inside each trajectory.

    This is GiGPO's step return (Feng et al., 2025, arXiv 2505.10978) and Role-Agent's ``R_task(a_t)``
    (Wang et al., 2026, arXiv 2606.10917, eq. 5). It runs the
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

    GiGPO / verl-agent's invalid-action penalty (0.1) folded into the reward — the
    ``"reward"`` placement; see ``split_penalties`` for verl-agent's. Returns a new array.

    Example: rewards [0, 1, 0], valid [True, True, False] → [0.0, 1.0, -0.1].
    """
    r = np.asarray(step_rewards, dtype=np.float64)
    ok = np.asarray(valid, dtype=bool)
    if r.shape != ok.shape:
        raise ValueError(f"valid has shape {ok.shape}, expected {r.shape}")
    return r - penalty * (~ok)


def split_penalties(
    penalties: Sequence[float] | np.ndarray | None,
    n: int,
    *,
    placement: str = "step",
) -> tuple[np.ndarray, np.ndarray]:
    """Split per-step penalties into ``(folded, own)`` for the chosen placement.

    ``folded`` is subtracted from the step reward before returns and episode scores are
    computed (``"reward"`` placement); ``own`` is subtracted afterwards from the step's own
    return and its own sample's episode score only (``"step"``, verl-agent). The other
    array is zeros; ``penalties=None`` gives two zero arrays.

    Example: penalties [0, 0.1], placement "step" → folded [0, 0], own [0, 0.1].
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown penalty placement {placement!r}; expected one of {PLACEMENTS}")
    zeros = np.zeros(n)
    if penalties is None:
        return zeros, zeros.copy()
    p = np.asarray(penalties, dtype=np.float64)
    if p.shape != (n,):
        raise ValueError(f"penalties has shape {p.shape}, expected ({n},)")
    if np.any(p < 0) or not np.all(np.isfinite(p)):
        raise ValueError("penalties must be finite and non-negative (the amount subtracted)")
    return (p.copy(), zeros) if placement == "reward" else (zeros, p.copy())


def penalised_step_values(
    traj_ids: Sequence[Hashable] | np.ndarray,
    step_rewards: Sequence[float] | np.ndarray,
    penalties: Sequence[float] | np.ndarray | None = None,
    *,
    gamma: float,
    placement: str = "step",
) -> tuple[np.ndarray, np.ndarray]:
    """Per-step ``(discounted return, episode score)`` with the invalid-action penalty placed.

    ``step_rewards`` are the raw environment rewards and ``penalties`` the amounts to
    subtract (``penalty · invalid``). GiGPO's step return and episode score as verl-agent
    computes them (``placement="step"``), or with the penalty folded into the reward.

    Example (one trajectory, rewards [0, 1], penalties [0, 0.1], γ = 0.5):
    ``"step"`` → returns [0.5, 1 − 0.1] = [0.5, 0.9], scores [1, 1 − 0.1] = [1, 0.9];
    ``"reward"`` → rewards [0, 0.9] → returns [0.45, 0.9], scores [0.9, 0.9].
    """
    r = np.asarray(step_rewards, dtype=np.float64)
    folded, own = split_penalties(penalties, r.shape[0], placement=placement)
    effective = r - folded
    returns = discounted_returns(traj_ids, effective, gamma=gamma) - own
    scores = episode_scores(traj_ids, effective) - own
    return returns, scores
