"""PPO with a learned critic: generalised advantage estimation over agent steps, the clipped
value loss, and the critic's explained variance.

GAE (Schulman et al., 2016, arXiv 1506.02438, eqs. 11–16) runs over the STEPS (turns) of
each trajectory, not over tokens: step t has the state s_t (the step's prompt), the value
``V(s_t)`` the critic reads at the last prompt token, and the environment reward r_t. The
inputs are flattened step samples as everywhere in ``roleagent.algos`` (each trajectory's
steps in time order; trajectories consecutive or interleaved).

The clipped value loss is PPO's (Schulman et al., 2017, arXiv 1707.06347) as verl's
``compute_value_loss`` computes it: ``½ · mean(max((V − R)², (clip(V, V_old ± ε) − R)²))``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

from ._segments import trajectory_layout


def gae(
    traj_ids: Sequence[Hashable] | np.ndarray,
    rewards: Sequence[float] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    *,
    gamma: float,
    lam: float,
    bootstrap: Sequence[float] | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and value targets per step, ``(advantages, returns)``, shapes (n,).

    ``δ_t = r_t + γ V(s_{t+1}) − V(s_t)``, ``A_t = δ_t + γλ A_{t+1}`` (eq. 16 as a backward
    recursion), ``R_t = A_t + V(s_t)`` (the λ-return, the critic's target, as verl). After a
    trajectory's last step ``V = 0`` (the episode ended), or ``bootstrap`` — an (n,) array
    read only at each trajectory's last step — for an episode cut off with a value to go.
    λ = 1 gives ``A_t = G_t − V(s_t)`` with ``G_t`` the discounted return; λ = 0 the one-step
    TD error.

    Example (one trajectory, rewards [0, 1], values [0.5, 0.5], γ = 0.9, λ = 0.5):
    δ_1 = 1 − 0.5 = 0.5, A_1 = 0.5; δ_0 = 0 + 0.9·0.5 − 0.5 = −0.05,
    A_0 = −0.05 + 0.9·0.5·0.5 = 0.175 → advantages [0.175, 0.5], returns [0.675, 1.0].
    With λ = 1: A_0 = −0.05 + 0.45 = 0.4, returns [0.9, 1.0] (the discounted returns).
    With bootstrap [·, 2.0]: δ_1 = 1 + 0.9·2 − 0.5 = 2.3, A_0 = −0.05 + 0.45·2.3 = 0.985.
    """
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    traj, pos, lengths = trajectory_layout(traj_ids)
    for name, arr in (("rewards", r), ("values", v)):
        if arr.shape != traj.shape:
            raise ValueError(f"{name} has shape {arr.shape}, expected {traj.shape}")
    if not (np.all(np.isfinite(r)) and np.all(np.isfinite(v))):
        raise ValueError("rewards and values must be finite")
    if r.size == 0:
        return r.copy(), r.copy()
    t_max = int(lengths.max())
    shape = (lengths.size, t_max + 1)  # one zero column past every end
    pad_r, pad_v = np.zeros(shape), np.zeros(shape)
    pad_r[traj, pos], pad_v[traj, pos] = r, v
    if bootstrap is not None:
        b = np.asarray(bootstrap, dtype=np.float64)
        if b.shape != traj.shape or not np.all(np.isfinite(b)):
            raise ValueError(f"bootstrap must be finite with shape {traj.shape}")
        last = pos == lengths[traj] - 1
        pad_v[traj[last], pos[last] + 1] = b[last]  # V after the last step
    adv = np.zeros(shape)
    for t in range(t_max - 1, -1, -1):  # over time, vectorised over trajectories
        live = t < lengths  # a finished trajectory has nothing at t
        delta = pad_r[:, t] + gamma * pad_v[:, t + 1] - pad_v[:, t]
        adv[:, t] = np.where(live, delta + gamma * lam * adv[:, t + 1], 0.0)
    advantages = adv[traj, pos]
    return advantages, advantages + v


def whiten(advantages: np.ndarray, *, std: bool = True, eps: float = 1e-6) -> np.ndarray:
    """Batch normalisation of the advantages, as verl's ``masked_whiten`` (per step sample
    here, not per token): ``(A − mean) / (std + ε)``, or only ``A − mean`` with ``std=False``.

    Example: [1, 2, 3] → mean 2, std √(2/3) = 0.8165 → [−1.2247, 0, 1.2247]; centred only
    → [−1, 0, 1]. One sample or none is returned centred (its std is undefined).
    """
    a = np.asarray(advantages, dtype=np.float64)
    if a.size == 0:
        return a.copy()
    centred = a - a.mean()
    if not std or a.size < 2:
        return centred
    return centred / (a.std() + eps)


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, *, clip: float | None
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped value loss, all (B,): ``½ · mean(max((V − R)², (V_c − R)²))`` with
    ``V_c = clip(V, V_old − ε, V_old + ε)`` (``clip=None``: ``½ · mean((V − R)²)``).
    Metrics: ``value_loss``, ``value_clip_frac`` (share of samples where the clipped term
    is the larger, as verl's ``vf_clipfrac``).

    Example: V [1.0, 0.6], V_old [0.5, 0.5], R [2.0, 0.0], ε = 0.2 → V_c [0.7, 0.6];
    squared errors unclipped [1, 0.36], clipped [1.69, 0.36] → loss ½ · (1.69 + 0.36) / 2
    = 0.5125, clip fraction 0.5. Without clipping: ½ · (1 + 0.36) / 2 = 0.34.
    """
    unclipped = (values - returns) ** 2  # (B,)
    if clip is None:
        loss = 0.5 * unclipped.mean()
        return loss, {"value_loss": float(loss.detach()), "value_clip_frac": 0.0}
    clipped_values = old_values + (values - old_values).clamp(-clip, clip)  # (B,)
    clipped = (clipped_values - returns) ** 2  # (B,)
    loss = 0.5 * torch.maximum(unclipped, clipped).mean()
    frac = float((clipped > unclipped).float().mean())
    return loss, {"value_loss": float(loss.detach()), "value_clip_frac": frac}


def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    """``1 − Var(R − V) / Var(R)``: 1 for a perfect critic, 0 for a constant one, negative
    when worse than a constant; NaN when the returns do not vary.

    Example: R [1, 2, 3], V [1, 2, 2] → 1 − (2/9) / (2/3) = 0.6667.
    """
    v = np.asarray(values, dtype=np.float64)
    r = np.asarray(returns, dtype=np.float64)
    var = r.var() if r.size else 0.0
    return float(1.0 - (r - v).var() / var) if var > 0 else float("nan")
