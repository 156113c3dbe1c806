"""The ``critic:`` section of a recipe: PPO's learned value function
(``roleagent.trainer.critic``), used by ``algo.name: ppo`` (GAE over agent steps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roleagent.fields import ConfigError, _f


@dataclass
class CriticConfig:
    enabled: bool = _f(
        False,
        "train a critic V(s) beside the policy; its values feed the estimator (algo.name=ppo needs it: "
        "GAE with algo.gamma and algo.lam over the agent's steps)",
    )
    backbone: str = _f(
        "separate",
        "separate: a second copy of the policy's starting model (its own LoRA adapters when "
        "model.lora_rank > 0, else all its weights) plus a linear value head, trained by the critic's "
        "optimizer (verl's critic) | shared: a linear value head on the policy's own last hidden "
        "state, the policy frozen for the critic (only the head learns; no second model)",
    )
    lr: float = _f(1e-4, "AdamW learning rate of the critic (its trainable weights and the value head)")
    weight_decay: float = _f(0.0, "AdamW weight decay of the critic")
    value_clip: float | None = _f(
        0.5,
        "value clipping epsilon: the loss is max((V - R)^2, (clip(V, V_old +- eps) - R)^2) / 2 "
        "(verl's cliprange_value 0.5); null = unclipped",
    )
    epochs: int = _f(1, "passes of the critic over each iteration's steps")
    mini_batches: int = _f(1, "critic optimizer steps per epoch")
    micro_batch_tokens: int = _f(2048, "padded prompt tokens per critic forward/backward")
    grad_clip: float = _f(1.0, "gradient norm clip of the critic")


def check_critic(cfg: Any) -> None:
    """PPO's estimator has a critic (``cfg`` is a TrainConfig; the fields' ranges are in
    ``roleagent.config_rules.FIELD_RULES``); raises ConfigError, never changes ``cfg``."""
    if cfg.algo.name == "ppo" and not cfg.critic.enabled:
        raise ConfigError("algo.name=ppo estimates advantages with a critic: set critic.enabled=true")
    if cfg.critic.enabled and cfg.algo.name in ("grpo", "rloo", "gigpo", "role_agent"):
        raise ConfigError(
            f"critic.enabled: algo.name={cfg.algo.name} gives the critic no value targets; use algo.name=ppo"
        )
