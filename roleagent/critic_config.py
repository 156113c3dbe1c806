"""The ``critic:`` section of a recipe: PPO's learned value function
(``roleagent.trainer.critic``), used by ``algo.name: ppo`` (GAE over agent steps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roleagent.fields import ConfigError, setting


@dataclass
class CriticConfig:
    enabled: bool = setting(
        False,
        "train a critic V(s) beside the policy; its values feed the estimator (algo.name=ppo needs it: "
        "GAE with algo.gamma and algo.lam over the agent's steps)",
    )
    backbone: str = setting(
        "separate",
        "separate: a second copy of the policy's starting model (its own LoRA adapters when "
        "model.lora_rank > 0, else all its weights) plus a linear value head, trained by the critic's "
        "optimizer (verl's critic) | shared: a linear value head on the policy's own last hidden "
        "state, the policy frozen for the critic (only the head learns; no second model)",
    )
    lr: float = setting(1e-4, "AdamW learning rate of the critic (its trainable weights and the value head)")
    weight_decay: float = setting(0.0, "AdamW weight decay of the critic")
    value_clip: float | None = setting(
        0.5,
        "value clipping epsilon: the loss is max((V - R)^2, (clip(V, V_old +- eps) - R)^2) / 2 "
        "(verl's cliprange_value 0.5); null = unclipped",
    )
    epochs: int = setting(1, "passes of the critic over each iteration's steps")
    mini_batches: int = setting(1, "critic optimizer steps per epoch")
    micro_batch_tokens: int = setting(2048, "padded prompt tokens per critic forward/backward")
    grad_clip: float = setting(1.0, "gradient norm clip of the critic")


def check_critic(cfg: Any, *, estimator_uses_critic: bool) -> None:
    """A critic runs exactly when the advantage estimator reads its values (``cfg`` is a
    TrainConfig; the estimator says so by ``uses_critic = True``, as PPO's does:
    ``roleagent.trainer.advantages``; the fields' ranges are in
    ``roleagent.config_rules.FIELD_RULES``); raises ConfigError, never changes ``cfg``."""
    name = cfg.algo.name
    if estimator_uses_critic and not cfg.critic.enabled:
        raise ConfigError(f"algo.name={name} estimates advantages with a critic: set critic.enabled=true")
    if cfg.critic.enabled and not estimator_uses_critic:
        raise ConfigError(
            f"critic.enabled: algo.name={name} gives the critic no value targets; use algo.name=ppo "
            "(an estimator of your own that reads batch.values declares uses_critic = True)"
        )
