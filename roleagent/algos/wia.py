"""Role-Agent World-In-Agent (Wang et al., 2026, arXiv 2606.10917: §3.2, eqs. 4–8, Appendix E
Algorithm 1).

After action a_t the policy predicts the next H states ŝ_{t,1..H}. Each prediction is scored
against the state that actually followed, ``r̃_{t,h} = LMS(ŝ_{t,h}, s_{t+h})`` (eq. 4), and
the scores modulate the task return multiplicatively (eqs. 5–6); the state-level advantage
normalises that return inside groups of identical (or LMS-similar) states (eqs. 7–8), and
the final advantage adds the episode advantage: ``A = A^S + α·A^E``.

Decisions (the paper leaves them open; also in ``docs/design.md`` under World-In-Agent):

- LMS is ``similarity.lms_score``: symmetric word-level LCS ratio (module docstring there).
  The authors' code uses difflib's asymmetric, autojunk-affected character ratio.
- Horizon: ``H = max(1, round_half_up(fraction · T_max))`` — e.g. ALFWorld T_max = 50 →
  2.5 → H = 3 (Python's banker's ``round`` would give 2).
- Horizons past the end of the trajectory (t + h > T + 1 in the paper's 1-based indexing,
  i.e. no observed ``s_{t+h}``) are NaN in the score matrix and are DROPPED from
  ``R_pre``: they contribute 0 and the remaining terms are not renormalised. Reasons: the
  sum in eq. 5 simply has fewer observable terms; renormalising would give the last steps'
  one or two predictions the weight of H predictions (more variance exactly where the
  sparse terminal reward sits); and dropping can only lower the modulation, consistent with
  the paper's principle that predictions modulate but never create credit.
- A prediction missing inside the horizon (the model produced fewer than H, or None) scores
  0: an absent forecast is a wrong one.
- State groups with one sample get A^S = 0 (as GiGPO's singleton anchors; eq. 8's std is 0/0
  there).
- A^E (``episode_stats``, config ``algo.episode_stats``). Default ``"steps"``: GiGPO's
  episode normalisation (``gigpo_episode_advantages``: statistics over the STEP SAMPLES of
  the group, so a long trajectory weighs more; singleton group mean 0 / std 1), so that
  Role-Agent differs from our GiGPO only in the step-level return, the comparison the
  paper's tables make. ``"trajectories"``: the paper's eq. 1 (``grpo_advantages``:
  statistics over the group's trajectories, each counted once). They differ whenever the
  trajectories of a group differ in length. Hand case: a 3-step success and a 1-step
  failure (scores 1, 0): eq. 1 has mean 1/2, std 0.7071 → [0.7071 ×3, −0.7071]; the step
  statistics see samples [1, 1, 1, 0], mean 3/4, std 0.5 → [0.5 ×3, −1.5].
- State similarity threshold: ``lms ≥ threshold`` (GiGPO's test; the paper writes "exceeds
  0.9"); the two differ only at exactly 0.9.
- Invalid-action penalties and negative environment returns are not scaled by the
  prediction factor (rule in ``wia_returns``), so a better prediction never lowers R_t.
- The authors' public code instead multiplies the raw step reward by 1 + 0.2·sim with a
  one-step inline prediction; we follow the paper (w = 1), and ``algo.prediction_weight``
  (w in ``R_task · (1 + w · R_pre)``) gives the authors' damping as an option.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from .episode import Ids, gigpo_episode_advantages, grpo_advantages
from .gigpo import anchored_parts
from .returns import discounted_returns, split_penalties
from .similarity import lms_score

#: How A^E normalises the episode score: over the group's step samples (GiGPO, the default)
#: or over its trajectories (Role-Agent eq. 1).
EPISODE_STATS = ("steps", "trajectories")

__all__ = [
    "EPISODE_STATS",
    "credit_change",
    "episode_advantages",
    "lms_score",
    "prediction_horizon",
    "prediction_score_matrix",
    "wia_returns",
    "role_agent_advantage_parts",
    "role_agent_advantages",
]


def prediction_horizon(max_steps: int, fraction: float = 0.05) -> int:
    """``H = max(1, round(fraction · T_max))`` with round-half-up (Role-Agent ablation: H = 5%·T_max is best).

    Computed in decimal arithmetic on ``str(fraction)`` so 0.05·50 is exactly 2.5 and rounds
    up. Python's built-in ``round`` rounds half to even; we do not use it.

    Examples: T_max 50 (ALFWorld) → 3; 15 (WebShop) → 1; 4 (search QA) → 1; 30 → 2.
    """
    if max_steps < 0 or fraction < 0:
        raise ValueError("max_steps and fraction must be non-negative")
    h = (Decimal(str(fraction)) * Decimal(int(max_steps))).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return max(1, int(h))


def prediction_score_matrix(
    predictions: Sequence[Sequence[str | None]],
    future_states: Sequence[str],
    *,
    horizon: int | None = None,
) -> np.ndarray:
    """Score matrix ``r̃ ∈ [0,1]^{T×H}`` of ONE trajectory (eq. 4), NaN past the end.

    ``predictions[t][h-1]`` is ŝ_{t,h}, predicted after the (0-based) action t;
    ``future_states[j]`` is the observation after action j, so the truth for ŝ_{t,h} is
    ``future_states[t+h-1]``; ``len(future_states)`` must equal T. H is ``horizon`` when
    given (so trajectories stack into one (n, H) array; longer lists are cut), else the
    longest prediction list. Entries with ``t+h-1 ≥ T`` are NaN; a missing or None prediction
    inside the trajectory scores 0.

    Example: predictions [["b", "c"], ["c", "x"]], future_states ["b", "c"] →
    [[1, 1], [1, nan]].
    """
    t_len = len(predictions)
    if len(future_states) != t_len:
        raise ValueError(f"{len(future_states)} future states for {t_len} steps; expected one per step")
    if horizon is None:
        horizon = max((len(p) for p in predictions), default=0)
    out = np.full((t_len, horizon), np.nan)
    for t, preds in enumerate(predictions):
        for h in range(1, min(horizon, t_len - t) + 1):
            pred = preds[h - 1] if h <= len(preds) else None
            out[t, h - 1] = 0.0 if pred is None else lms_score(pred, future_states[t + h - 1])
    return out


def wia_returns(
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    prediction_scores: Sequence[Sequence[float]] | np.ndarray,
    *,
    gamma: float,
    penalties: Sequence[float] | np.ndarray | None = None,
    penalty_placement: str = "step",
    weight: float = 1.0,
) -> np.ndarray:
    """Prediction-modulated return ``R_t = R_task(a_t) · (1 + w · R_pre(a_t))`` (eqs. 5–6:
    w = 1; ``weight`` w < 1 damps the factor as the authors' public code does with w = 0.2,
    so a wrong prediction of a winning action costs it less of its return).

    ``R_task(a_t) = Σ_{k≥t} γ^{k−t} r_k`` within the trajectory and
    ``R_pre(a_t) = Σ_h γ^{h−1} r̃_{t,h}``; ``prediction_scores`` is (n, H) with NaN where
    t+h lies past the end — those terms are dropped (contribute 0, no renormalisation).

    Rule for penalties and negative returns (the paper's rewards are 0/1, so R_task ≥ 0
    there and the question does not arise): the factor ``1 + R_pre`` scales only the
    non-negative part of the ENVIRONMENT return; a negative environment return and the
    invalid-action penalties are added after, unscaled::

        R_t = max(R_env, 0) · (1 + w · R_pre) + min(R_env, 0) − P_t

    where ``R_env`` is the discounted return of the raw ``step_rewards`` and ``P_t`` the
    penalty term: the step's own penalty (``penalty_placement="step"``, verl-agent's
    placement) or the discounted sum of the penalties from t on (``"reward"``). So a better
    prediction never lowers R_t, and a zero environment return gives R_t = −P_t whatever
    the predictions (predictions modulate credit but never create it). Multiplying the
    penalised return instead would give the better predictor the LOWER return whenever it
    is negative.

    Example: one trajectory, rewards [0, 1], γ = 0.5, scores [[1.0, 0.5], [0.8, nan]]:
    R_task = [0.5, 1.0]; R_pre = [1 + 0.5·0.5, 0.8] = [1.25, 0.8];
    R = [0.5·2.25, 1.0·1.8] = [1.125, 1.8]. With penalties [0.1, 0] ("step"):
    [1.025, 1.8]; with "reward": the first step subtracts 0.1, the same here. With w = 0.2
    (no penalties): R = [0.5·1.25, 1.0·1.16] = [0.625, 1.16].
    """
    if weight < 0:
        raise ValueError(f"the prediction weight must be >= 0, got {weight}")
    r_env = discounted_returns(traj_ids, step_rewards, gamma=gamma)
    scores = np.asarray(prediction_scores, dtype=np.float64)
    if scores.ndim == 1:
        scores = scores[:, None]
    if scores.ndim != 2 or scores.shape[0] != r_env.shape[0]:
        raise ValueError(f"prediction_scores has shape {scores.shape}, expected ({r_env.shape[0]}, H)")
    finite = scores[~np.isnan(scores)]
    if finite.size and (finite.min() < 0.0 or finite.max() > 1.0):
        raise ValueError("prediction scores must lie in [0, 1] (NaN past the end)")
    folded, own = split_penalties(penalties, r_env.shape[0], placement=penalty_placement)
    penalty = own + (discounted_returns(traj_ids, folded, gamma=gamma) if folded.any() else 0.0)
    weights = gamma ** np.arange(scores.shape[1], dtype=np.float64)  # γ^{h−1}, h = 1..H
    r_pre = np.where(np.isnan(scores), 0.0, scores) @ weights
    return np.maximum(r_env, 0.0) * (1.0 + weight * r_pre) + np.minimum(r_env, 0.0) - penalty


def episode_advantages(
    group_ids: Ids,
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    *,
    episode_stats: str = "steps",
    penalties: Sequence[float] | np.ndarray | None = None,
    penalty_placement: str = "step",
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
) -> np.ndarray:
    """Role-Agent's episode advantage ``A^E`` per step sample, the episode score (sum of the
    trajectory's step rewards) normalised within its group:

    - ``"steps"``: over the group's step samples (GiGPO eq. 3, ``gigpo_episode_advantages``);
    - ``"trajectories"``: over its trajectories, each once (Role-Agent eq. 1,
      ``A^E(τ_i) = (R^E(τ_i) − avg_j R^E(τ_j)) / std_j R^E(τ_j)``, ``grpo_advantages``).

    Example (one group, mean_std_norm, eps 0): trajectory a, 3 steps, rewards [0, 0, 1]
    (a success); trajectory b, 1 step, reward [0] (a failure).
    "trajectories": scores {1, 0}, mean 0.5, std 0.7071 → [0.7071, 0.7071, 0.7071, −0.7071].
    "steps": samples [1, 1, 1, 0], mean 0.75, std 0.5 → [0.5, 0.5, 0.5, −1.5].
    """
    if episode_stats not in EPISODE_STATS:
        raise ValueError(f"unknown episode_stats {episode_stats!r}; expected one of {EPISODE_STATS}")
    normalise = gigpo_episode_advantages if episode_stats == "steps" else grpo_advantages
    placed = dict(penalties=penalties, penalty_placement=penalty_placement)
    return normalise(group_ids, traj_ids, step_rewards, mode=mode, eps=eps, **placed)


def role_agent_advantages(
    group_ids: Ids,
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    states: Sequence[Hashable] | np.ndarray,
    prediction_scores: Sequence[Sequence[float]] | np.ndarray,
    *,
    penalties: Sequence[float] | np.ndarray | None = None,
    penalty_placement: str = "step",
    gamma: float = 0.95,
    alpha: float = 1.0,
    mode: str = "mean_std_norm",
    similarity_threshold: float | None = None,
    episode_stats: str = "steps",
    prediction_weight: float = 1.0,
    eps: float = 1e-6,
) -> np.ndarray:
    """Role-Agent advantage ``A = A^S + α·A^E`` (eq. 9, Algorithm 1 lines 11–17).

    ``A^S`` (eq. 8): R_t from ``wia_returns`` normalised (per ``mode``) inside its state
    group; state groups are formed within the episode group by exact state match (eq. 7) or,
    with ``similarity_threshold`` (paper: 0.9), greedy LMS clustering; a singleton state
    group gets 0. ``A^E``: ``episode_advantages``, the trajectory score (sum of step
    rewards) normalised over the group's step samples (``episode_stats="steps"``, GiGPO's)
    or its trajectories (``"trajectories"``, eq. 1). ``penalties`` / ``penalty_placement``:
    the invalid-action penalty, placed as in ``wia_returns`` and
    ``gigpo_episode_advantages`` (default: verl-agent's per-step placement).
    ``prediction_weight``: w of ``wia_returns`` (1: the paper).

    Example (one group, γ = 0.5, mean_norm, α = 1): trajectory a = states [s0, s1], rewards
    [0, 1], scores [[1.0], [0.5]]; trajectory b = states [s0], reward [0], scores [[0.2]].
    R_t: a → [0.5·2, 1·1.5] = [1.0, 1.5], b → [0]. A^S: s0 = {1.0, 0.0} → [0.5, 0, -0.5].
    A^E: scores [1, 1, 0] − 2/3. A = [0.8333, 0.3333, -1.1667]. With
    ``episode_stats="trajectories"`` (eq. 1): A^E = [1, 1, 0] − 1/2 (the trajectory mean), so
    A = [1.0, 0.5, -1.0].
    """
    a_state, a_episode, _ = role_agent_advantage_parts(
        group_ids,
        traj_ids,
        step_rewards,
        states,
        prediction_scores,
        penalties=penalties,
        penalty_placement=penalty_placement,
        gamma=gamma,
        mode=mode,
        similarity_threshold=similarity_threshold,
        episode_stats=episode_stats,
        prediction_weight=prediction_weight,
        eps=eps,
    )
    return a_state + alpha * a_episode


def role_agent_advantage_parts(
    group_ids: Ids,
    traj_ids: Ids,
    step_rewards: Sequence[float] | np.ndarray,
    states: Sequence[Hashable] | np.ndarray,
    prediction_scores: Sequence[Sequence[float]] | np.ndarray,
    *,
    penalties: Sequence[float] | np.ndarray | None = None,
    penalty_placement: str = "step",
    gamma: float = 0.95,
    mode: str = "mean_std_norm",
    similarity_threshold: float | None = None,
    episode_stats: str = "steps",
    prediction_weight: float = 1.0,
    eps: float = 1e-6,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^S, A^E, state group id)`` per step sample, the parts of
    ``role_agent_advantages`` (same arguments; its example: A^S = [0.5, 0, -0.5],
    A^E = [1/3, 1/3, -2/3], groups [0, 1, 0])."""
    placed = dict(penalties=penalties, penalty_placement=penalty_placement)
    r = wia_returns(traj_ids, step_rewards, prediction_scores, gamma=gamma, weight=prediction_weight, **placed)
    a_episode = episode_advantages(
        group_ids, traj_ids, step_rewards, episode_stats=episode_stats, mode=mode, eps=eps, **placed
    )
    a_episode, a_state, groups = anchored_parts(
        group_ids, states, r, a_episode, similarity_threshold=similarity_threshold, mode=mode, eps=eps
    )
    return a_state, a_episode, groups


def credit_change(
    modulated: Sequence[float] | np.ndarray, task: Sequence[float] | np.ndarray, *, tol: float = 1e-9
) -> dict:
    """How the prediction factor moved the state-level credit of one batch: ``modulated`` is
    A^S from the prediction-modulated returns (eq. 8 with eq. 6's R_t), ``task`` the A^S of the
    same steps and state groups from R_task alone (w = 0: GiGPO's step part). Over the
    *credited* samples (|A^S| > ``tol`` on either side):

    - ``credited``: how many there are;
    - ``sign_changed``: the share whose sign differs (0 is a sign of its own, so credit that
      the factor creates or removes counts as changed);
    - ``corr``: Pearson's correlation of the two (NaN with fewer than 2 samples or a constant
      side). 1 means the factor changed the credit's scale only.

    A predictor whose score is the same at every step leaves the credit as it was: R_t =
    (1 + w·c)·R_task, and the normalisation inside each state group removes the constant
    (``mean_std_norm``: the same A^S; ``mean_norm``: A^S times 1 + w·c; corr 1, nothing
    changed sign either way). Only scores that differ between the members of a state group
    move credit, so a near-perfect predictor is as inert as a constant one.

    Example: modulated [0.7, -0.7, 0.0, 0.5], task [0.7, -0.7, 0.0, -0.5]: 3 credited (the
    zero pair is not), 1 of them changed sign, corr 0.7093.
    """
    a = np.asarray(modulated, dtype=np.float64)
    b = np.asarray(task, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"modulated has shape {a.shape}, task {b.shape}")
    credited = (np.abs(a) > tol) | (np.abs(b) > tol)
    a, b = a[credited], b[credited]
    n = int(credited.sum())
    sign_a, sign_b = (np.sign(np.where(np.abs(x) > tol, x, 0.0)) for x in (a, b))
    changed = float(np.mean(sign_a != sign_b)) if n else float("nan")
    constant = n < 2 or float(a.std()) == 0.0 or float(b.std()) == 0.0
    corr = float("nan") if constant else float(np.corrcoef(a, b)[0, 1])
    return {"credited": n, "sign_changed": changed, "corr": corr}
