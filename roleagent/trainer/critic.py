"""PPO's critic: a value function V(s) over agent steps, trained on the GAE value targets.

Where the value sits. Each agent step t is one state s_t — the step's prompt, exactly the
tokens the policy saw — and one action (the generated turn). The critic reads ``V(s_t)``
from the last hidden state at the LAST PROMPT TOKEN (a linear value head), and GAE
(``roleagent.algos.gae``) runs over the steps of each trajectory with the environment's
step rewards, so a value bootstraps the next step's and the whole episode shares one
recursion (turn-level GAE). This is the granularity of everything else here — step
rewards, one advantage per generated turn shared by its tokens, step-level estimators —
and it needs one value per step, not one per token. verl's ``compute_gae_advantage_return``
is token-level inside one response (values at every response token, reward at the last);
verl-agent keeps each step as its own row and applies that per step. With γ = λ = 1 inside
a turn, verl's token advantages are the turn's return minus each token's value; here the
turn's one advantage is the step-level GAE.

Two backbones (``critic.backbone``):

- ``separate`` (verl's critic): a second copy of the policy's starting model — with its own
  fresh LoRA adapters when ``model.lora_rank > 0``, else all its weights trainable — plus
  the value head; the critic's AdamW (``critic.lr``) trains both.
- ``shared``: the value head on the policy's own last hidden state, read without gradient
  (the policy is untouched by the value loss); only the head learns. No second model.

The head starts at zero, so the first iteration's values are 0 and its advantages are the
(normalised) discounted returns. The loop computes the values before the advantages (old
values) and trains the critic on that batch before the policy update (as verl updates the
critic before the actor), so the ``shared`` head sees the features its values came from.
"""

from __future__ import annotations

import contextlib
import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from roleagent.algos.gae import clipped_value_loss, explained_variance
from roleagent.critic_config import CriticConfig
from roleagent.models.loading import Policy, kept_positions, policy_from_config
from roleagent.models.precision import master_params
from roleagent.trainer.optimizer import Optimizer
from roleagent.trainer.samples import micro_batches


@dataclass
class _Prompt:
    """One step's state for :func:`micro_batches` (which packs by ``length``)."""

    index: int
    ids: list[int]

    @property
    def length(self) -> int:
        return len(self.ids)


class Critic:
    """A value head on a backbone, its optimizer and its mini-batch order (all checkpointed)."""

    def __init__(self, cfg: CriticConfig, policy: Policy, backbone: torch.nn.Module | None = None, *, seed: int = 0):
        self.cfg = cfg
        self.shared = backbone is None
        self.backbone = policy.model if backbone is None else backbone
        self.pad_id = policy.tokenizer.pad_token_id
        self.device = next(self.backbone.parameters()).device
        self.head = torch.nn.Linear(self.backbone.config.hidden_size, 1).to(self.device)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.backbone_params = [] if self.shared else master_params(self.backbone)  # fp32 master weights
        self.params = [*self.head.parameters(), *self.backbone_params]
        self.stepper = Optimizer.from_config(self.params, cfg, what="critic")
        self.optimizer = self.stepper.adamw  # what checkpoints save
        self.rng = random.Random(seed)

    # ------------------------------------------------------------------ values ------

    def forward(self, prompts: list[list[int]]) -> torch.Tensor:
        """``V(s)`` of each prompt, (B,) float32: the head on the last hidden state at the
        last prompt token (rows are left-padded, so that is the last position)."""
        if any(not ids for ids in prompts):
            raise ValueError("the critic needs a non-empty prompt for every step")
        width = max(len(ids) for ids in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)  # (B, L)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, L)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention[row, width - len(ids) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)  # (B, L)
        tensors = dict(input_ids=input_ids, attention_mask=attention, position_ids=positions)
        tensors = {k: v.to(self.device) for k, v in tensors.items()}
        with torch.no_grad() if self.shared else contextlib.nullcontext():
            last = kept_positions(width - 1, width, self.device)  # the LM head's logits go unused
            out = self.backbone(**tensors, output_hidden_states=True, logits_to_keep=last)
        last = out.hidden_states[-1][:, -1, :].float()  # (B, H)
        return self.head(last).squeeze(-1)  # (B,)

    def values(self, batch) -> np.ndarray:
        """The old values ``V(s_t)`` of every step of ``batch`` (a StepBatch), (n,)."""
        prompts = [_Prompt(i, list(step.prompt_ids)) for i, step in enumerate(batch.steps)]
        out = np.zeros(len(prompts))
        if not prompts:
            return out
        if not self.shared:
            self.backbone.eval()
        with torch.no_grad():
            for micro in micro_batches(prompts, self.cfg.micro_batch_tokens):
                out[[p.index for p in micro]] = self.forward([p.ids for p in micro]).double().cpu().numpy()
        return out

    # ------------------------------------------------------------------ update ------

    def update(self, batch, estimate) -> dict[str, float]:
        """Train on the clipped value loss toward ``estimate.parts["returns"]`` around the
        old values ``batch.values``; metrics ``critic/...`` (explained variance of the old
        values, mean value loss and clip fraction over the optimizer steps, grad norm)."""
        if "returns" not in estimate.parts:
            raise ValueError("the critic trains on the estimator's value targets (parts['returns']): use algo.name=ppo")
        returns = np.asarray(estimate.parts["returns"], dtype=np.float64)
        old = np.asarray(batch.values, dtype=np.float64)
        steps = batch.steps
        n = len(steps)
        out = {"explained_variance": explained_variance(old, returns)}
        out.update(value_mean=float(old.mean()) if n else 0.0, return_mean=float(returns.mean()) if n else 0.0)
        if n == 0:
            return {f"critic/{k}": v for k, v in out.items()}
        if not self.shared:
            self.backbone.train()
        totals: dict[str, float] = {"value_loss": 0.0, "value_clip_frac": 0.0}
        norms: list[float] = []
        for _ in range(self.cfg.epochs):
            order = list(range(n))
            self.rng.shuffle(order)
            for mini in np.array_split(np.asarray(order), min(self.cfg.mini_batches, n)):
                metrics, norm = self._step([_Prompt(int(i), list(steps[i].prompt_ids)) for i in mini], old, returns)
                for key in totals:
                    totals[key] += metrics[key]
                norms.append(norm)
        applied = [x for x in norms if math.isfinite(x)]
        out.update({k: v / len(norms) for k, v in totals.items()})
        out["grad_norm"] = float(np.mean(applied)) if applied else math.nan
        out["nonfinite_skipped"] = len(norms) - len(applied)
        return {f"critic/{k}": v for k, v in out.items()}

    def _step(self, mini: list[_Prompt], old: np.ndarray, returns: np.ndarray) -> tuple[dict[str, float], float]:
        """One optimizer step on a mini-batch (micro-batched; the loss is its sample mean)."""
        self.stepper.zero_grad()
        metrics = {"value_loss": 0.0, "value_clip_frac": 0.0}
        for micro in micro_batches(mini, self.cfg.micro_batch_tokens):
            index = [p.index for p in micro]
            values = self.forward([p.ids for p in micro])  # (B,)
            old_t = torch.tensor(old[index], dtype=torch.float32, device=self.device)  # (B,)
            ret_t = torch.tensor(returns[index], dtype=torch.float32, device=self.device)  # (B,)
            loss, parts = clipped_value_loss(values, old_t, ret_t, clip=self.cfg.value_clip)
            share = len(micro) / len(mini)
            (loss * share).backward()
            for key in metrics:
                metrics[key] += parts[key] * share
        norm = self.stepper.step()  # None: a non-finite norm, not applied
        return metrics, math.nan if norm is None else norm

    # ------------------------------------------------------------- checkpoints ------

    def state_dict(self) -> dict[str, Any]:
        """Plain data for ``state.pt``: head, trainable backbone weights, optimizer, rng."""
        named = {name: p for name, p in self.backbone.named_parameters() if p.requires_grad}
        return {
            "backbone_kind": "shared" if self.shared else "separate",
            "head": {k: v.detach().cpu().clone() for k, v in self.head.state_dict().items()},
            "backbone": {} if self.shared else {k: v.detach().cpu().clone() for k, v in named.items()},
            "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.getstate(),
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore :meth:`state_dict`; a checkpoint without a critic, or with the other
        backbone, is an error (resume with the settings it was written with)."""
        kind = "shared" if self.shared else "separate"
        if state is None:
            raise ValueError(
                "this checkpoint holds no critic (written with critic.enabled=false): resume with "
                "critic.enabled=false, or start over (--no-resume)"
            )
        if state.get("backbone_kind") != kind:
            raise ValueError(
                f"this checkpoint's critic has critic.backbone={state.get('backbone_kind')!r}, not {kind!r}"
            )
        self.head.load_state_dict(state["head"])
        named = dict(self.backbone.named_parameters())
        with torch.no_grad():
            for name, value in state["backbone"].items():
                named[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


class NoCritic:
    """The critic of a run without one (``critic.enabled`` off): no values, no update, no state."""

    def values(self, batch) -> None:
        return None

    def update(self, batch, estimate) -> dict[str, float]:
        return {}

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state) -> None:
        pass


def build_critic(cfg, policy: Policy, init_from: str = "") -> Critic | NoCritic:
    """The run's critic (``cfg`` a TrainConfig), a :class:`NoCritic` when ``critic.enabled``
    is off. A ``separate`` backbone is loaded like the policy (same model, ``init_from``
    weights and adapter settings)."""
    if not cfg.critic.enabled:
        return NoCritic()
    backbone = None
    if cfg.critic.backbone == "separate":
        backbone = policy_from_config(cfg.model, seed=cfg.seed, init_from=init_from).model
    return Critic(cfg.critic, policy, backbone, seed=cfg.seed)
