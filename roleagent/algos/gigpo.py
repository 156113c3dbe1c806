"""GiGPO (Feng et al. 2025, arXiv:2505.10978): episode-relative plus step-relative advantages,
reproducing verl-agent ``gigpo/core_gigpo.py`` (deviations: ``docs/design.md#gigpo``).

Conventions reproduced exactly (as of the verl-agent code we read):

- episode score = sum of the trajectory's step rewards, carried by each of its step samples;
  episode statistics over all step samples of the episode group (longer trajectories weigh
  more); a group of one step sample has mean 0, std 1 (``episode_norm_reward``);
- step returns = per-trajectory discounted sums with γ (``compute_step_discounted_returns``);
- invalid-action penalty (``penalty_placement="step"``, the default): step returns and
  episode scores from the raw environment rewards, then the penalty subtracted from the
  invalid step's own return and its own sample's episode score only
  (``apply_invalid_action_penalty`` in ``verl/trainer/ppo/ray_trainer.py``, which runs
  after ``compute_step_discounted_returns``); ``"reward"`` folds it into the reward instead;
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
  trajectory never spans two groups (ValueError). Trajectories may be interleaved in the
  batch, as in verl-agent, whose batches are step-major; each trajectory's steps must be in
  time order. Similarity clustering is greedy in batch order (as verl-agent's), so with a
  threshold the anchor groups can depend on the batch order; exact matching cannot.
- anchor states are whatever hashable the caller passes (verl-agent's ``anchor_obs``).

An option that is not GiGPO's (off by default): :func:`same_action_groups` finds the anchor
groups in which every sample took the same action. Their step part compares returns of one
and the same choice, so it credits what happened after the state, not the action taken in
it; ``algo.same_action_groups=zero`` sets it to 0 there (``docs/design.md#gigpo``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ._segments import normalize_within
from .episode import Ids, gigpo_episode_advantages
from .returns import penalised_step_values
from .similarity import build_state_groups


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
    penalties: Sequence[float] | np.ndarray | None = None,
    penalty_placement: str = "step",
    gamma: float = 0.95,
    step_weight: float = 1.0,
    mode: str = "mean_std_norm",
    similarity_threshold: float | None = None,
    eps: float = 1e-6,
) -> np.ndarray:
    """GiGPO advantage per step sample: ``A = A^E + step_weight · A^S`` (GiGPO eqs. 3–8).

    ``A^E`` from ``gigpo_episode_advantages`` (statistics over step samples), ``A^S`` the
    discounted step return normalised within its anchor group (``state_advantages``).
    ``step_rewards`` are the raw environment rewards; ``penalties`` (n,) the invalid-action
    penalty of each step, placed per ``penalty_placement`` (``returns.penalised_step_values``).

    Worked example (one group, γ = 0.5, mean_norm): trajectory a = states [s0, s1],
    rewards [0, 1]; trajectory b = states [s0], reward [0].
    Episode: samples carry scores [1, 1, 0], mean 2/3 → A^E = [1/3, 1/3, -2/3].
    Step returns: a → [0.5, 1.0], b → [0.0]. Anchor s0 = {a0: 0.5, b0: 0.0}, mean 0.25 →
    [0.25, -, -0.25]; anchor s1 is a singleton → 0. A = [0.5833, 0.3333, -0.9167].
    """
    a_episode, a_step, _ = gigpo_advantage_parts(
        group_ids,
        traj_ids,
        step_rewards,
        states,
        penalties=penalties,
        penalty_placement=penalty_placement,
        gamma=gamma,
        mode=mode,
        similarity_threshold=similarity_threshold,
        eps=eps,
    )
    return a_episode + step_weight * a_step


def gigpo_advantage_parts(
    group_ids: Ids,
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    states: Sequence[Hashable] | np.ndarray,
    *,
    penalties: Sequence[float] | np.ndarray | None = None,
    penalty_placement: str = "step",
    gamma: float = 0.95,
    mode: str = "mean_std_norm",
    similarity_threshold: float | None = None,
    eps: float = 1e-6,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^E, A^S, anchor group id)`` per step sample, the parts of ``gigpo_advantages``
    (same arguments; its worked example: A^E = [1/3, 1/3, -2/3], A^S = [0.25, 0, -0.25],
    anchors [0, 1, 0])."""
    a_episode = gigpo_episode_advantages(
        group_ids, traj_ids, step_rewards, penalties=penalties, penalty_placement=penalty_placement, mode=mode, eps=eps
    )
    returns, _ = penalised_step_values(traj_ids, step_rewards, penalties, gamma=gamma, placement=penalty_placement)
    return anchored_parts(
        group_ids, states, returns, a_episode, similarity_threshold=similarity_threshold, mode=mode, eps=eps
    )


def anchored_parts(
    group_ids: Ids,
    states: Sequence[Hashable] | np.ndarray,
    returns: np.ndarray,
    a_episode: np.ndarray,
    *,
    similarity_threshold: float | None = None,
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^E, A^S, anchor group id)`` per step sample: the step part ``A^S``, each step's
    ``returns`` normalised within its anchor state group (``build_state_groups`` within the
    episode group; ``state_advantages``, GiGPO eqs. 6–8), next to the episode part
    ``a_episode`` as given. The one composition of GiGPO (``returns``: the discounted step
    returns) and Role-Agent (``returns``: ``wia_returns``, prediction-modulated).

    Example (mean_norm): group g, states [s0, s1, s0], returns [0.5, 1.0, 0.0] → anchors
    [0, 1, 0], A^S = [0.25, 0, −0.25] (s1 is a singleton: 0).
    """
    anchors = build_state_groups(group_ids, states, similarity_threshold=similarity_threshold)
    if anchors.shape != returns.shape:
        raise ValueError(f"states has shape {anchors.shape}, expected {returns.shape}")
    return a_episode, state_advantages(returns, anchors, mode=mode, eps=eps), anchors


def same_action_groups(anchors: np.ndarray, actions: Sequence[Hashable]) -> np.ndarray:
    """(n,) bool: the sample's anchor group has two or more samples and all took the same
    action. A group of one is False (its step part is 0 anyway).

    Example: anchors [0, 0, 1, 1, 2], actions [a, a, a, b, c] → [True, True, False, False,
    False]: group 0 agrees, group 1 does not, group 2 is a singleton.
    """
    g = np.unique(np.asarray(anchors), return_inverse=True)[1].reshape(-1)  # dense codes
    if len(actions) != len(g):
        raise ValueError(f"{len(actions)} actions for {len(g)} step samples")
    seen: dict[int, set] = {}
    for group, action in zip(g.tolist(), actions, strict=True):
        seen.setdefault(group, set()).add(action)
    counts = np.bincount(g) if len(g) else np.zeros(0, dtype=np.int64)
    agree = np.array([len(seen.get(k, ())) == 1 and counts[k] > 1 for k in range(len(counts))], dtype=bool)
    return agree[g] if len(g) else np.zeros(0, dtype=bool)
