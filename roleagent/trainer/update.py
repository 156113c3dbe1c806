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

Non-finite gradients (``optim.max_nonfinite_skips``): a step whose gradient norm is NaN or
inf is not applied (gradients zeroed, AdamW state untouched, counted in ``nonfinite_skipped``),
as verl's actor does; ``roleagent.trainer.nonfinite`` records where it came from, and the
step after that many consecutive skips raises ``FloatingPointError``.

Data parallel (``roleagent.trainer.distributed``, ``roleagent.trainer.fsdp``): each rank
back-propagates its share of a mini-batch with the same global denominator, gradients summed over ranks.

Rows are left-padded, so every generated segment ends at the last position and the LM head
runs only on the last ``max_generated + 1`` positions (``logits_to_keep``) — the full
(B, L, V) logits of a 49k vocabulary would dominate memory on a laptop.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from roleagent.algos import policy_loss
from roleagent.config import OptimConfig
from roleagent.engine.constrain import restricted_logprobs
from roleagent.models.loading import Policy
from roleagent.trainer.nonfinite import diagnose
from roleagent.trainer.optimizer import Optimizer


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
    with_entropy: bool | str = False,
    allowed: dict[tuple[int, int], list[int]] | None = None,
    probe: dict | None = None,
):
    """Log-probs of ``targets`` (the last ``keep`` tokens of each row) and the entropy there
    (``with_entropy``: True; ``"metric"``: its value, without a graph; False: None); (B, K) each.
    Positions in ``allowed`` (:func:`allowed_positions`) use the distribution renormalised
    over their allowed tokens, as constrained decoding sampled them (entropy likewise).
    ``probe`` (diagnosis only: it syncs) receives whether the raw logits are finite and
    their largest finite magnitude."""
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=keep + 1)
    logits = out.logits[:, -keep - 1 : -1, :].float()  # (B, K, V): position i predicts token i+1
    if probe is not None:
        finite = torch.isfinite(logits)  # (B, K, V)
        probe["logits_finite"] = bool(finite.all())
        probe["logits_absmax"] = float(logits.detach().abs().where(finite, 0.0).max()) if logits.numel() else 0.0
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    if with_entropy == "metric":  # the value only (optim.entropy_coef = 0): no graph through it
        with torch.no_grad():
            entropy = restricted_logprobs(logits.detach(), allowed or {}, targets, with_entropy=True)[1]
        return restricted_logprobs(logits, allowed or {}, targets)[0], entropy
    return restricted_logprobs(logits, allowed or {}, targets, with_entropy=with_entropy)  # (B, K) each


class Updater:
    """Holds the optimizer and the reference policy; runs one iteration's update.

    A step whose gradient norm is non-finite is skipped (``optim.max_nonfinite_skips``):
    its diagnosis (``roleagent.trainer.nonfinite``) is appended to ``diagnostics_path``
    when given, else kept in ``nonfinite_records`` (the last 16)."""

    def __init__(
        self,
        policy: Policy,
        cfg: OptimConfig,
        *,
        temperature: float = 1.0,
        diagnostics_path: str | Path | None = None,
        total_steps: int = 0,
    ):
        self.policy = policy
        self.cfg = cfg
        self.temperature = temperature
        self.params = [p for p in policy.model.parameters() if p.requires_grad]
        # total_steps: the schedule's length (a cosine schedule decays over it)
        self.stepper = Optimizer.from_config(
            self.params, cfg, total_steps=total_steps, diagnostics_path=diagnostics_path, what="policy"
        )
        self.optimizer = self.stepper.adamw  # what checkpoints save
        self.data_parallel = None  # roleagent.trainer.distributed.DataParallel: this rank's share, summed grads
        self.reference = None
        if cfg.kl_coef > 0 and not policy.lora:  # LoRA: the base with adapters off is the reference
            self.reference = copy.deepcopy(policy.model).eval().requires_grad_(False)

    # the non-finite bookkeeping lives in the optimizer helper
    nonfinite_streak = property(lambda self: self.stepper.nonfinite_streak)
    nonfinite_records = property(lambda self: self.stepper.nonfinite_records)
    steps = property(lambda self: self.stepper.attempts)

    def _reference_model(self):
        if self.policy.lora:
            return self.policy.model, self.policy.model.disable_adapter()
        return self.reference, contextlib.nullcontext()

    def update(self, samples: list[TrainSample], rng: random.Random) -> dict[str, float]:
        cfg = self.cfg
        skipped = [cfg.skip_zero_advantage and s.skippable() for s in samples]
        n_trained = len(samples) - sum(skipped)
        if n_trained == 0:  # every advantage was zero: nothing to learn this iteration
            zeros = dict.fromkeys(("pg_loss", "kl", "entropy", "clip_frac", "approx_kl", "grad_norm"), 0.0)
            counts = {"samples": 0, "skipped_samples": len(samples), "trained_tokens": 0, "nonfinite_skipped": 0}
            return {**counts, **zeros, "ratio_mean": 1.0, "optimizer_steps": 0, "lr": self.stepper.lr}
        self.policy.model.train()
        index_of = {id(s): i for i, s in enumerate(samples)}
        totals: dict[str, list[float]] = {}
        grad_norms: list[float] = []
        trained_tokens = nonfinite = 0
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
                step_totals: dict[str, list[float]] = {}
                micros, losses = self._accumulate(computed, n_tokens, step_totals)
                trained_tokens += sum(s.length for s in computed)
                norm = self._step(functools.partial(diagnose, self, micros, losses, index_of))
                if norm is None:  # skipped: its metrics describe no applied step
                    nonfinite += 1
                    step_totals = {key: [] for key in step_totals}
                else:
                    grad_norms.append(norm)
                for key, values in step_totals.items():
                    totals.setdefault(key, []).extend(values)
        if self.data_parallel is not None:
            totals = self.data_parallel.merge_totals(totals)
        # Metrics: token-weighted over the trained samples of a mini-batch, averaged over applied steps.
        steps = len(grad_norms)
        out = {key: float(np.sum(values)) / steps if steps else math.nan for key, values in totals.items()}
        out["grad_norm"] = float(np.mean(grad_norms)) if steps else math.nan
        out["nonfinite_skipped"] = nonfinite
        out["samples"] = n_trained
        out["skipped_samples"] = len(samples) - n_trained
        out["trained_tokens"] = trained_tokens
        out["optimizer_steps"] = steps
        out["lr"] = self.stepper.lr
        if cfg.measure_shift and self.data_parallel is None:
            out.update(self.logprob_shift([s for s, skip in zip(samples, skipped) if not skip]))
        return out

    def logprob_shift(self, samples: list[TrainSample]) -> dict[str, float]:
        """How far this update moved the trained actions: the mean over actions of
        Δ = log π_θ(a|s) − log π_old(a|s) (summed over the action's trained tokens), apart for
        actions with positive and negative advantage (``logp_shift_pos``/``_neg``; left out
        when there are none). A learning update raises the first and lowers the second.

        Example: one action of advantage +1 whose two tokens went from log-probs (−1, −2) to
        (−0.5, −1.5) and one of advantage −1 from (−1) to (−1.25) → pos +1.0, neg −0.25.
        """
        sums = {1: 0.0, -1: 0.0}
        counts = {1: 0, -1: 0}
        self.policy.model.eval()
        with torch.no_grad():
            for micro in micro_batches(samples, self.cfg.micro_batch_tokens):
                *tensors, keep = _collate(
                    micro, self.policy.tokenizer.pad_token_id, self.policy.device, self.cfg.skip_zero_advantage
                )
                input_ids, attention, positions, targets, old, mask, advantages = tensors
                new, _ = token_logprobs(
                    self.policy.model, input_ids, attention, positions, targets, keep,
                    temperature=self.temperature, allowed=allowed_positions(micro, keep),
                )  # fmt: skip
                token_adv = advantages if advantages.dim() == 2 else advantages[:, None].expand_as(mask)  # (B, K)
                delta = ((new - old) * mask).double().cpu()  # (B, K)
                token_adv, mask_cpu = token_adv.double().cpu(), mask.cpu()
                for row in range(len(micro)):
                    # an action is a run of trained tokens (a packed sample holds several)
                    starts = (mask_cpu[row] > 0) & (torch.diff(mask_cpu[row], prepend=torch.zeros(1)) > 0)
                    for sign in (1, -1):
                        chosen = (token_adv[row] * sign > 0) & (mask_cpu[row] > 0)
                        sums[sign] += float(delta[row][chosen].sum())
                        counts[sign] += int((starts & chosen).sum())
        self.policy.model.train()
        names = {1: "logp_shift_pos", -1: "logp_shift_neg"}
        return {names[sign]: sums[sign] / counts[sign] for sign in (1, -1) if counts[sign]}

    def micro_loss(self, micro: list[TrainSample], probe: dict | None = None):
        """Collate ``micro`` and compute its token-mean policy loss; returns ``(loss,
        metrics, parts)`` with ``parts`` the (B, K) tensors it used (``probe``: see
        :func:`token_logprobs`, filled for the policy's logits)."""
        cfg, model = self.cfg, self.policy.model
        *tensors, keep = _collate(
            micro, self.policy.tokenizer.pad_token_id, self.policy.device, cfg.skip_zero_advantage
        )
        input_ids, attention, positions, targets, old, mask, advantages = tensors
        common = dict(temperature=self.temperature, allowed=allowed_positions(micro, keep))
        ref = None
        if cfg.kl_coef > 0:
            ref_model, context = self._reference_model()
            with torch.no_grad(), context:
                ref, _ = token_logprobs(ref_model, input_ids, attention, positions, targets, keep, **common)
        logprobs, entropy = token_logprobs(
            model,
            input_ids,
            attention,
            positions,
            targets,
            keep,
            with_entropy=True if cfg.entropy_coef > 0 else "metric",
            probe=probe,
            **common,
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
        parts = dict(mask=mask, logprobs=logprobs, ref=ref, old=old, advantages=advantages, entropy=entropy)
        return loss, metrics, parts

    def _accumulate(self, computed: list[TrainSample], n_tokens: int, totals: dict[str, list[float]]):
        """Backward of ``Σ_tokens ℓ / n_tokens`` over ``computed``, in micro-batches; returns
        the micro-batches and their (detached) losses."""
        skip_zero = self.cfg.skip_zero_advantage
        n_computed = sum(sum(s.loss_mask(skip_zero)) for s in computed)
        self.optimizer.zero_grad(set_to_none=True)
        dp = self.data_parallel
        micros = micro_batches(computed if dp is None else dp.shard(computed), self.cfg.micro_batch_tokens)
        scale, padding = (1.0, []) if dp is None else (dp.loss_scale, dp.padding(micros, computed))
        losses = []
        for micro in micros:
            loss, metrics, parts = self.micro_loss(micro)
            share = float(parts["mask"].sum())
            (loss * (scale * share / n_tokens)).backward()
            losses.append(loss.detach())
            for key, value in metrics.items():
                totals.setdefault(key, []).append(value * share / n_computed)
        for micro in padding:  # FSDP: as many forward/backward passes (collectives) as every rank
            (self.micro_loss(micro)[0] * 0.0).backward()
        if dp is not None:
            dp.reduce_grads(self.params)
        return micros, losses

    def _step(self, diagnosis=None) -> float | None:
        """Clip and apply the accumulated gradients (``roleagent.trainer.optimizer``);
        returns their norm before clipping, or ``None`` for a skipped non-finite step."""
        return self.stepper.step(diagnosis)
