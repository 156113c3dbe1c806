"""The policy update: training samples → mini-batches → micro-batches → AdamW steps.

A training sample is one generated turn: the exact prompt ids and generated ids from the
rollout (no re-tokenisation), the rollout log-probs as π_old (or, with
``optim.recompute_old_logprobs``, the training forward's: ``roleagent.trainer.samples``),
and one advantage that every generated token shares. The loss is ``roleagent.algos.policy_loss`` (PPO-clip, asymmetric
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

SFT replay (``optim.sft_replay_coef``, PPO-ptx): each optimizer step also back-propagates
``c · L_SFT`` over a fresh draw of the warm start's examples (``roleagent.trainer.replay``),
reported as ``sft_replay_loss``.

Non-finite gradients (``optim.max_nonfinite_skips``): a step whose gradient norm is NaN or
inf is not applied (gradients zeroed, AdamW state untouched, counted in ``nonfinite_skipped``),
as verl's actor does; ``roleagent.trainer.nonfinite`` records where it came from, and the
step after that many consecutive skips raises ``FloatingPointError``.

Data parallel (``roleagent.trainer.distributed``, ``roleagent.trainer.fsdp``): each rank
back-propagates its share of a mini-batch with the same global denominator, gradients summed over ranks
(plain data parallel: by ``DistributedDataParallel`` in the last micro-batch's backward).

Rows are left-padded, so every generated segment ends at the last position and the LM head
runs only on the ``max_generated`` positions before the last (``logits_to_keep``, by index) — the full
(B, L, V) logits of a 49k vocabulary would dominate memory on a laptop. With constrained
positions it runs only on their allowed rows (``roleagent.trainer.samples.output_head``,
``roleagent.engine.constrain.HeadLogits``), whole rows only where decoding was free.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import random
from pathlib import Path

import numpy as np
import torch

from roleagent.algos import policy_loss
from roleagent.config import OptimConfig
from roleagent.models.loading import Policy
from roleagent.models.precision import compute_dtype, master_params
from roleagent.trainer.nonfinite import diagnose
from roleagent.trainer.optimizer import Optimizer
from roleagent.trainer.samples import (
    TrainSample,
    allowed_positions,
    collate,
    logprob_shift,
    micro_batches,
    recompute_old_logprobs,
    token_logprobs,
)


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
        replay=None,
    ):
        self.policy = policy
        self.replay = replay  # roleagent.trainer.replay.SFTReplay: PPO-ptx's SFT term, or None
        self.cfg = cfg
        self.temperature = temperature
        self.params = master_params(policy.model)  # fp32 master weights (roleagent.models.precision)
        # total_steps: the schedule's length (a cosine schedule decays over it)
        self.stepper = Optimizer.from_config(
            self.params, cfg, total_steps=total_steps, diagnostics_path=diagnostics_path, what="policy"
        )
        self.optimizer = self.stepper.adamw  # what checkpoints save
        self.data_parallel = None  # roleagent.trainer.distributed.DataParallel: this rank's share, summed grads
        self.reference = None
        if cfg.kl_coef > 0 and not policy.lora:  # LoRA: the base with adapters off is the reference
            self.reference = copy.deepcopy(policy.model).eval().requires_grad_(False)
            self.reference.to(compute_dtype(policy.model))  # frozen: back to bf16 (no-op in fp32)

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
        recomputed = {}
        if cfg.recompute_old_logprobs:  # π_old from the training forward (roleagent.trainer.samples)
            trained = [s for s, skip in zip(samples, skipped) if not skip]
            fresh, recomputed = recompute_old_logprobs(self, trained)
            swap = dict(zip(map(id, trained), fresh))
            samples = [swap.get(id(s), s) for s in samples]
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
                if self.replay is not None:  # PPO-ptx: + c · L_SFT in the same step
                    step_totals["sft_replay_loss"] = [self.replay.backward(self.policy, rng)]
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
        out.update(recomputed)
        if cfg.measure_shift and self.data_parallel is None:
            out.update(logprob_shift(self, [s for s, skip in zip(samples, skipped) if not skip]))
        return out

    def micro_loss(self, micro: list[TrainSample], probe: dict | None = None, model=None):
        """Collate ``micro`` and compute its token-mean policy loss; returns ``(loss,
        metrics, parts)`` with ``parts`` the (B, K) tensors it used (``probe``: see
        :func:`token_logprobs`, filled for the policy's logits). ``model``: what the policy's
        forward runs through (data parallel: its DDP wrapper), else the policy."""
        cfg = self.cfg
        model = self.policy.model if model is None else model
        *tensors, keep = collate(micro, self.policy.tokenizer.pad_token_id, self.policy.device, cfg.skip_zero_advantage)
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
        model = self.policy.model if dp is None else dp.training_model(self.policy.model)
        passes = [*micros, *padding]  # padding: dummy passes of weight 0 (the ranks' collectives match)
        losses = []
        for k, micro in enumerate(passes):
            with contextlib.nullcontext() if dp is None else dp.syncing(last=k == len(passes) - 1):
                loss, metrics, parts = self.micro_loss(micro, model=model)
                share = float(parts["mask"].sum()) if k < len(micros) else 0.0
                (loss * (scale * share / n_tokens)).backward()
            if k < len(micros):
                losses.append(loss.detach())
                for key, value in metrics.items():
                    totals.setdefault(key, []).append(value * share / n_computed)
        return micros, losses

    def _step(self, diagnosis=None) -> float | None:
        """Clip and apply the accumulated gradients (``roleagent.trainer.optimizer``);
        returns their norm before clipping, or ``None`` for a skipped non-finite step."""
        return self.stepper.step(diagnosis)
