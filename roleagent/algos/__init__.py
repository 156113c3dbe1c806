"""The pure algorithm layer: returns, advantages (GRPO, RLOO, GiGPO — Feng et al., 2025, arXiv 2505.10978; Role-Agent
WIA — Wang et al., 2026, arXiv 2606.10917) and the policy loss. numpy / torch only; no engine, trainer or model imports, so every function is
a pure map from our flattened step samples to arrays and can be tested by hand.

Advantage functions take flattened step samples: ``group_ids`` (n,), ``traj_ids`` (n,)
(unique across the batch), ``step_rewards`` (n,) (raw environment rewards), optionally
``penalties`` (n,) (invalid-action penalties, placed per ``penalty_placement``: see
``returns``), with each trajectory's steps in time order — trajectories may be consecutive
or interleaved; they return one float64 advantage per step sample, shape (n,).
"""

from .episode import gigpo_episode_advantages, grpo_advantages, rloo_advantages
from .gigpo import gigpo_advantage_parts, gigpo_advantages, same_action_groups, state_advantages
from .loss import approx_kl_k3, masked_mean, policy_loss, token_entropy_from_logits
from .returns import (
    PLACEMENTS,
    apply_invalid_penalty,
    discounted_returns,
    episode_scores,
    penalised_step_values,
    split_penalties,
)
from .similarity import MAX_LMS_TOKENS, build_state_groups, lms_score, lms_tokens
from .wia import (
    credit_change,
    prediction_horizon,
    prediction_score_matrix,
    role_agent_advantage_parts,
    role_agent_advantages,
    wia_returns,
)

__all__ = [
    "MAX_LMS_TOKENS",
    "PLACEMENTS",
    "apply_invalid_penalty",
    "approx_kl_k3",
    "build_state_groups",
    "credit_change",
    "discounted_returns",
    "episode_scores",
    "gigpo_advantage_parts",
    "gigpo_advantages",
    "gigpo_episode_advantages",
    "grpo_advantages",
    "lms_score",
    "lms_tokens",
    "masked_mean",
    "penalised_step_values",
    "policy_loss",
    "prediction_horizon",
    "prediction_score_matrix",
    "rloo_advantages",
    "split_penalties",
    "role_agent_advantage_parts",
    "role_agent_advantages",
    "same_action_groups",
    "state_advantages",
    "token_entropy_from_logits",
    "wia_returns",
]
