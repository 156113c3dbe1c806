"""GiGPO (Feng et al. 2025, arXiv:2505.10978): episode-relative plus step-relative advantages,
reproducing verl-agent ``gigpo/core_gigpo.py`` (DESIGN §4).

Conventions reproduced exactly (as of the verl-agent code we read):

- episode score = sum of the trajectory's step rewards, carried by each of its step samples;
  episode statistics over all step samples of the episode group (longer trajectories weigh
  more); a group of one step sample has mean 0, std 1 (``episode_norm_reward``);
- step returns = per-trajectory discounted sums with γ (``compute_step_discounted_returns``);
- anchor groups = exact match of the raw state within the episode group, pooled over all
  trajectories and time steps; optional greedy similarity clustering (``build_step_group``);
- step advantage normalised within the anchor group with the same mode; an anchor group of
  one sample gets 0 (``step_norm_reward``: mean = the value, std 1);
- std unbiased, ``eps = 1e-6`` added to std; modes ``mean_norm`` and ``mean_std_norm``;
- A = A_episode + step_weight · A_step.

Deviations, all deliberate:

- similarity: our symmetric word-level ``lms_score`` (``similarity.py``) instead of
  ``difflib.SequenceMatcher(None, obs, rep).ratio()``; the greedy procedure, the order of
  visit (batch order) and the ``≥ threshold`` test are the same. We accept threshold 1.0
  (verl-agent asserts < 1).
- arithmetic in float64; verl-agent casts rewards and returns to float32, so its numbers
  differ from ours by float32 rounding (~1e-7 relative).
- the default ``mode`` of verl-agent's ``compute_gigpo_outcome_advantage`` signature is
  ``"mean_norm"``; ours is ``"mean_std_norm"`` (recipes set it explicitly).
- verl-agent multiplies by the token response mask; we return one value per step sample and
  leave token broadcasting to the trainer (``policy_loss`` accepts (B,) advantages).
- verl-agent's episode groups contain step samples only of the same task; we validate that a
  trajectory never spans two groups and that its steps are consecutive (ValueError).
- anchor states are whatever hashable the caller passes (verl-agent's ``anchor_obs``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ._segments import normalize_within
from .episode import gigpo_episode_advantages
from .returns import discounted_returns
from .similarity import build_state_groups

Ids = Sequence[Hashable] | np.ndarray


def state_advantages(
    values: Sequence[float] | np.ndarray,
    state_groups: np.ndarray,
    *,
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
) -> np.ndarray:
    """Normalise ``values`` within each state (anchor) group; a singleton group gets 0.

    GiGPO eq. 7 (values = discounted step returns) and Role-Agent eq. 8 (values = R_t).
    ``state_groups`` are dense codes from ``build_state_groups``.

    Example: values [1, 3, 7], groups [0, 0, 1], mean_std_norm, eps 0 → group 0 mean 2,
    std 1.4142 → [-0.7071, 0.7071, 0.0] (group 1 is a singleton).
    """
    x = np.asarray(values, dtype=np.float64)
    g = np.asarray(state_groups, dtype=np.int64)
    if x.shape != g.shape:
        raise ValueError(f"values has shape {x.shape}, state_groups {g.shape}")
    return normalize_within(x, g, mode=mode, eps=eps, singleton="zero")


def gigpo_advantages(
    group_ids: Ids,
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    states: Sequence[Hashable] | np.ndarray,
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    mode: str = "mean_std_norm",
    similarity_threshold: float | None = None,
    eps: float = 1e-6,
) -> np.ndarray:
    """GiGPO advantage per step sample: ``A = A^E + step_weight · A^S`` (GiGPO eqs. 3–8).

    ``A^E`` from ``gigpo_episode_advantages`` (statistics over step samples), ``A^S`` the
    discounted step return normalised within its anchor group (``state_advantages``).

    Worked example (one group, γ = 0.5, mean_norm): trajectory a = states [s0, s1],
    rewards [0, 1]; trajectory b = states [s0], reward [0].
    Episode: samples carry scores [1, 1, 0], mean 2/3 → A^E = [1/3, 1/3, -2/3].
    Step returns: a → [0.5, 1.0], b → [0.0]. Anchor s0 = {a0: 0.5, b0: 0.0}, mean 0.25 →
    [0.25, -, -0.25]; anchor s1 is a singleton → 0. A = [0.5833, 0.3333, -0.9167].
    """
    a_episode = gigpo_episode_advantages(group_ids, traj_ids, step_rewards, mode=mode, eps=eps)
    returns = discounted_returns(traj_ids, step_rewards, gamma=gamma)
    anchors = build_state_groups(group_ids, states, similarity_threshold=similarity_threshold)
    if anchors.shape != returns.shape:
        raise ValueError(f"states has shape {anchors.shape}, expected {returns.shape}")
    a_step = state_advantages(returns, anchors, mode=mode, eps=eps)
    return a_episode + step_weight * a_step
