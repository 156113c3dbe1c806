"""The policy update: training samples → mini-batches → micro-batches → AdamW steps.

A training sample is one generated turn: the exact prompt ids and generated ids from the
rollout (no re-tokenisation), the rollout log-probs as π_old, and one advantage that every
generated token shares. The loss is ``roleagent.algos.policy_loss`` (PPO-clip, asymmetric
clip, optional dual clip, k3 KL, entropy), aggregated as a token mean over the whole
mini-batch: each micro-batch's token-mean loss is weighted by its share of the
mini-batch's tokens before ``backward``, so gradient accumulation changes nothing.

Zero-advantage samples (``optim.skip_zero_advantage``): mini-batches are drawn from ALL
samples, and the token-mean denominator is every generated token of the mini-batch, as in
verl-agent (whose token-mean runs over the whole mini-batch, zero advantages included).
Skipping only saves the forward/backward of samples whose advantage is exactly 0: their
policy-gradient term is 0, so with ``kl_coef = entropy_coef = 0`` the gradient is the same
as without skipping; with KL or entropy on, their KL/entropy terms are lost. A mini-batch
whose samples are all skipped makes no optimizer step (verl-agent would step AdamW on a
zero gradient, which still moves the weights by momentum).

Packed episodes (``optim.pack_episodes``, see ``roleagent.trainer.stages.training_samples``):
when an episode's steps nest (each prompt starts with the previous prompt and action, as in
``rollout.context=full``), they form ONE sample whose ``output_ids`` run from the end of the
first prompt to the end of the last action; ``action_mask`` marks the generated tokens and
``token_advantages`` gives each its own step's advantage. The denominator counts only
action tokens (the same generated tokens as unpacked), and with skipping on the tokens of
zero-advantage steps are masked out of the loss (as their unpacked samples would be
skipped), so the loss and gradient equal the unpacked ones, KL and entropy included, when
the mini-batch holds whole episodes (``mini_batches = 1``; with more, the episodes rather
than the steps are split between mini-batches).

Constrained decoding (``rollout.constrain_actions``): a sample carries, per output token,
the token ids it was sampled among (``TrainSample.allowed``); its log-prob, the reference
log-prob for the KL and the entropy are recomputed from the logits (over T) renormalised
over that set, as the engine sampled it, so π_θ/π_old is a ratio of one restricted policy.
A position with a single allowed token has log-prob 0 for every θ: no gradient.

Rows are left-padded, so every generated segment ends at the last position and the LM head
runs only on the last ``max_generated + 1`` positions (``logits_to_keep``) — the full
(B, L, V) logits of a 49k vocabulary would dominate memory on a laptop.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
from dataclasses import dataclass

import numpy as np
import torch

from roleagent.algos import policy_loss, token_entropy_from_logits
from roleagent.config import OptimConfig
from roleagent.engine.constrain import restrict_logits
from roleagent.models.loading import Policy


@dataclass
class TrainSample:
    """``old_logprobs`` has one entry per output token. A packed episode also sets
    ``action_mask`` (1 on generated tokens, 0 on the observations between them) and
    ``token_advantages`` (per output token); otherwise every output token is generated and
    shares ``advantage``."""

    prompt_ids: list[int]
    output_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    action_mask: list[int] | None = None
    token_advantages: list[float] | None = None
    # constrained decoding: per output token None (free) or the token ids it was sampled
    # among; its log-prob is recomputed renormalised over them (``token_logprobs``)
    allowed: list[list[int] | None] | None = None

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def n_generated(self) -> int:
        """Generated tokens: the sample's share of the token-mean denominator."""
        return len(self.output_ids) if self.action_mask is None else int(sum(self.action_mask))

    def skippable(self) -> bool:
        """Every generated token has advantage exactly 0."""
        if self.token_advantages is None:
            return self.advantage == 0.0
        return all(a == 0.0 for a, m in zip(self.token_advantages, self.action_mask) if m)

    def loss_mask(self, skip_zero: bool) -> list[float]:
        """Tokens in the loss: generated ones, less those of zero-advantage steps when
        skipping (an unpacked zero-advantage step would be skipped whole)."""
        if self.action_mask is None:
            return [1.0] * len(self.output_ids)
        return [float(m and not (skip_zero and a == 0.0)) for m, a in zip(self.action_mask, self.token_advantages)]


def micro_batches(samples: list[TrainSample], token_budget: int) -> list[list[TrainSample]]:
    """Pack samples (sorted by length) so that rows × longest row ≤ ``token_budget``."""
    ordered = sorted(samples, key=lambda s: s.length)
    batches: list[list[TrainSample]] = []
    current: list[TrainSample] = []
    for sample in ordered:
        if current and (len(current) + 1) * sample.length > token_budget:
            batches.append(current)
            current = []
        current.append(sample)
    if current:
        batches.append(current)
    return batches


def _collate(samples: list[TrainSample], pad_id: int, device: torch.device, skip_zero: bool = False):
    width = max(s.length for s in samples)
    keep = max(len(s.output_ids) for s in samples)
    n = len(samples)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)  # (B, L)
    attention = torch.zeros((n, width), dtype=torch.long)  # (B, L)
    old = torch.zeros((n, keep))  # (B, K) aligned to the last K positions
    mask = torch.zeros((n, keep))  # (B, K)
    targets = torch.full((n, keep), pad_id, dtype=torch.long)  # (B, K)
    per_token = any(s.token_advantages is not None for s in samples)
    advantages = torch.zeros((n, keep)) if per_token else torch.zeros(n)  # (B, K) packed, else (B,)
    for row, s in enumerate(samples):
        ids = s.prompt_ids + s.output_ids
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
        k = len(s.output_ids)
        targets[row, keep - k :] = torch.tensor(s.output_ids)
        old[row, keep - k :] = torch.tensor(s.old_logprobs)
        mask[row, keep - k :] = torch.tensor(s.loss_mask(skip_zero))
        if not per_token:
            advantages[row] = s.advantage
        elif s.token_advantages is None:
            advantages[row, keep - k :] = s.advantage
        else:
            advantages[row, keep - k :] = torch.tensor(s.token_advantages)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)  # (B, L)
    return [t.to(device) for t in (input_ids, attention, positions, targets, old, mask, advantages)] + [keep]


def allowed_positions(samples: list[TrainSample], keep: int) -> dict[tuple[int, int], list[int]]:
    """The constrained positions of a collated micro-batch, ``(row, column) → allowed ids``
    with columns aligned as in :func:`_collate` (the last ``keep``); empty when none.

    Example: keep 3, one sample with 2 output tokens, allowed ``[[4, 7], None]`` →
    ``{(0, 1): [4, 7]}``.
    """
    out: dict[tuple[int, int], list[int]] = {}
    for row, s in enumerate(samples):
        start = keep - len(s.output_ids)
        for j, ids in enumerate(s.allowed or ()):
            if ids is not None:
                out[(row, start + j)] = list(ids)
    return out


def token_logprobs(
    model,
    input_ids,
    attention,
    positions,
    targets,
    keep: int,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    allowed: dict[tuple[int, int], list[int]] | None = None,
):
    """Log-probs of ``targets`` (the last ``keep`` tokens of each row); (B, K) each.
    Positions in ``allowed`` (:func:`allowed_positions`) use the distribution renormalised
    over their allowed tokens, as constrained decoding sampled them (entropy likewise)."""
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=keep + 1)
    logits = out.logits[:, -keep - 1 : -1, :].float()  # (B, K, V): position i predicts token i+1
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logits = restrict_logits(logits, allowed or {})  # (B, K, V)
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)  # (B, K)
    entropy = token_entropy_from_logits(logits) if with_entropy else None  # (B, K)
    return logprobs, entropy


class Updater:
    """Holds the optimizer and the reference policy; runs one iteration's update."""

    def __init__(self, policy: Policy, cfg: OptimConfig, *, temperature: float = 1.0):
        self.policy = policy
        self.cfg = cfg
        self.temperature = temperature
        params = [p for p in policy.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.reference = None
        if cfg.kl_coef > 0 and not policy.lora:  # LoRA: the base with adapters off is the reference
            self.reference = copy.deepcopy(policy.model).eval().requires_grad_(False)

    def _reference_model(self):
        if self.policy.lora:
            return self.policy.model, self.policy.model.disable_adapter()
        return self.reference, contextlib.nullcontext()

    def update(self, samples: list[TrainSample], rng: random.Random) -> dict[str, float]:
        cfg = self.cfg
        skipped = [cfg.skip_zero_advantage and s.skippable() for s in samples]
        n_trained = len(samples) - sum(skipped)
        if n_trained == 0:  # every advantage was zero: nothing to learn this iteration
            return {
                "samples": 0,
                "skipped_samples": len(samples),
                "trained_tokens": 0,
                "pg_loss": 0.0,
                "kl": 0.0,
                "entropy": 0.0,
                "clip_frac": 0.0,
                "approx_kl": 0.0,
                "ratio_mean": 1.0,
                "grad_norm": 0.0,
            }
        self.policy.model.train()
        totals: dict[str, list[float]] = {}
        grad_norms: list[float] = []
        trained_tokens = 0
        for _ in range(cfg.epochs):
            order = list(range(len(samples)))
            rng.shuffle(order)
            for mini in np.array_split(np.arange(len(order)), cfg.mini_batches):
                mini_samples = [samples[order[i]] for i in mini]
                # verl-agent's denominator: every generated token of the mini-batch, skipped or not
                n_tokens = sum(s.n_generated for s in mini_samples)
                computed = [samples[order[i]] for i in mini if not skipped[order[i]]]
                if not computed:
                    continue
                trained_tokens += self._accumulate(computed, n_tokens, totals)
                grad_norms.append(self._step())
        # Metrics: token-weighted over the trained samples of a mini-batch, averaged over steps.
        out = {key: float(np.sum(values)) / len(grad_norms) for key, values in totals.items()}
        out["grad_norm"] = float(np.mean(grad_norms))
        out["samples"] = n_trained
        out["skipped_samples"] = len(samples) - n_trained
        out["trained_tokens"] = trained_tokens
        return out

    def _accumulate(self, computed: list[TrainSample], n_tokens: int, totals: dict[str, list[float]]) -> int:
        """Backward of ``Σ_tokens ℓ / n_tokens`` over ``computed``, in micro-batches; returns the
        number of tokens run through the model."""
        cfg, model = self.cfg, self.policy.model
        pad_id = self.policy.tokenizer.pad_token_id
        n_computed = sum(sum(s.loss_mask(cfg.skip_zero_advantage)) for s in computed)
        self.optimizer.zero_grad(set_to_none=True)
        ran = 0
        for micro in micro_batches(computed, cfg.micro_batch_tokens):
            *tensors, keep = _collate(micro, pad_id, self.policy.device, cfg.skip_zero_advantage)
            input_ids, attention, positions, targets, old, mask, advantages = tensors
            common = dict(temperature=self.temperature, allowed=allowed_positions(micro, keep))
            ref = None
            if cfg.kl_coef > 0:
                ref_model, context = self._reference_model()
                with torch.no_grad(), context:
                    ref, _ = token_logprobs(ref_model, input_ids, attention, positions, targets, keep, **common)
            logprobs, entropy = token_logprobs(
                model, input_ids, attention, positions, targets, keep, with_entropy=cfg.entropy_coef > 0, **common
            )
            loss, metrics = policy_loss(
                logprobs,
                old,
                advantages,
                mask,
                clip_low=cfg.clip_low,
                clip_high=cfg.clip_high,
                dual_clip=cfg.dual_clip,
                ref_logprobs=ref,
                kl_coef=cfg.kl_coef,
                entropy=entropy,
                entropy_coef=cfg.entropy_coef,
            )
            (loss * (float(mask.sum()) / n_tokens)).backward()
            ran += int(attention.sum())
            for key, value in metrics.items():
                totals.setdefault(key, []).append(value * float(mask.sum()) / n_computed)
        return ran

    def _step(self) -> float:
        params = [p for p in self.policy.model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)
        if not math.isfinite(float(grad_norm)):  # never apply a NaN step
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError("non-finite gradient norm: lower optim.lr or check the advantages")
        self.optimizer.step()
        return float(grad_norm)
