"""The update's data: a training sample (one generated turn, or one packed episode), its
collation into left-padded micro-batches, and its log-probs under a model
(:func:`token_logprobs`), also outside the update's graph (``torch.no_grad``, eval mode,
the update's micro-batches and temperature):

- **before an update**, :func:`recompute_old_logprobs` (``optim.recompute_old_logprobs``)
  replaces each sample's π_old, the log-probs the rollout engine reported while sampling,
  by the training forward's, as verl's actor does (``compute_log_prob`` before
  ``update_policy``). In exact arithmetic the two are equal; in bf16 they are not (a
  KV-cached decode and one padded forward round differently), and every difference enters
  the ratio π_θ/π_old of the first step as if the policy had moved, which the PPO clip then
  cuts. It reports the gap it removed, per trained token::

      old_logp_gap     = mean_t |log π_forward(a_t) − log π_rollout(a_t)|
      old_logp_gap_max = max_t  |…|

  (fp32 on a CPU: ~1e-5; a gap near the clip range, ~0.2, means the ratios were noise).
  Example: a sample whose rollout reported log-probs (−1.0, −2.0) and whose training
  forward gives (−1.1, −2.0) → gap 0.05 (mean over its two tokens), max 0.1, and its π_old
  becomes (−1.1, −2.0), so the first step's ratio is exactly 1 where the weights have not
  moved;
- **after an update**, :func:`logprob_shift` (``optim.measure_shift``) measures how far it
  moved the trained actions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch.distributed.fsdp import FSDPModule

from roleagent.engine.constrain import HeadLogits, restricted_logprobs
from roleagent.models.loading import kept_positions


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


def collate(samples: list[TrainSample], pad_id: int, device: torch.device, skip_zero: bool = False):
    """Left-padded tensors of a micro-batch, the outputs aligned to the last ``keep``
    columns: ``[input_ids, attention, positions, targets, old, mask, advantages, keep]``."""
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
    with columns aligned as in :func:`collate` (the last ``keep``); empty when none.

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
    where: torch.Tensor | None = None,
):
    """Log-probs of ``targets`` (the last ``keep`` tokens of each row) and the entropy there
    (``with_entropy``: True; ``"metric"``: its value, without a graph; False: None); (B, K) each.
    Positions in ``allowed`` (:func:`allowed_positions`) use the distribution renormalised
    over their allowed tokens, as constrained decoding sampled them (entropy likewise).
    ``where`` (B, K), boolean, names the positions whose values the caller reads (a loss
    mask): the others are 0 and, on a plain head (:func:`output_head`), never computed.
    ``probe`` (diagnosis only: it syncs) receives whether the raw logits are finite and
    their largest finite magnitude."""
    head = output_head(model) if (allowed or where is not None) and probe is None else None
    if head is not None:  # the LM head only on the rows read: allowed ids, ``where`` (HeadLogits)
        decoder, linear = head
        hidden = decoder(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=False)
        logits = HeadLogits(hidden.last_hidden_state[:, -keep - 1 : -1, :], linear.weight, linear.bias, temperature)
    else:
        width = input_ids.shape[1]
        needed = kept_positions(width - keep - 1, width - 1, input_ids.device)  # the K positions
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=needed)
        logits = out.logits.float()  # (B, K, V): position i predicts token i+1
        if probe is not None:
            finite = torch.isfinite(logits)  # (B, K, V)
            probe["logits_finite"] = bool(finite.all())
            probe["logits_absmax"] = float(logits.detach().abs().where(finite, 0.0).max()) if logits.numel() else 0.0
        if temperature > 0 and temperature != 1.0:
            logits = logits / temperature
    logprobs, entropy = restricted_logprobs(
        logits, allowed or {}, targets, with_entropy=bool(with_entropy), where=where
    )
    if with_entropy == "metric":  # the value only (optim.entropy_coef = 0): no graph through it
        entropy = entropy.detach()
    return logprobs, entropy  # (B, K) each


#: Model families whose causal-LM logits are exactly ``lm_head(decoder(...).last_hidden_state)``
#: (no soft-capping or logit scaling), so :func:`output_head` may split them.
PLAIN_HEAD_FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


def output_head(model) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
    """``(decoder, lm_head)`` of a plain causal LM (:data:`PLAIN_HEAD_FAMILIES`, a PEFT
    wrapper included) whose output layer is a bare ``nn.Linear`` on ordinary tensors, so
    the update may run the head on the rows it needs; ``None`` for anything else (a
    data-parallel wrapper, FSDP's sharded parameters, an adapter on the head, another
    family), which then takes the model's own forward."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in PLAIN_HEAD_FAMILIES or isinstance(model, FSDPModule):
        return None
    try:
        decoder, linear = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    if type(linear) is not torch.nn.Linear or type(linear.weight) is not torch.nn.Parameter:
        return None
    return decoder, linear


def current_logprobs(updater, samples: list[TrainSample]) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """``{id(sample): (log π_θ of its output tokens, its loss mask)}``, (K_s,) each, on the CPU."""
    cfg, policy = updater.cfg, updater.policy
    out = {}
    was_training = policy.model.training
    policy.model.eval()
    with torch.no_grad():
        for micro in micro_batches(samples, cfg.micro_batch_tokens):
            *tensors, keep = collate(micro, policy.tokenizer.pad_token_id, policy.device, cfg.skip_zero_advantage)
            input_ids, attention, positions, targets, _, mask, _ = tensors
            new, _ = token_logprobs(
                policy.model, input_ids, attention, positions, targets, keep,
                temperature=updater.temperature, allowed=allowed_positions(micro, keep),
            )  # fmt: skip
            for row, sample in enumerate(micro):
                k = len(sample.output_ids)
                out[id(sample)] = (new[row, keep - k :].double().cpu(), mask[row, keep - k :].cpu())
    policy.model.train(was_training)
    return out


def recompute_old_logprobs(updater, samples: list[TrainSample]) -> tuple[list[TrainSample], dict[str, float]]:
    """The samples with π_old from the training forward (copies; the originals keep the
    rollout's) and the gap between the two (module docstring)."""
    current = current_logprobs(updater, samples)
    gaps = []
    out = []
    for sample in samples:
        new, mask = current[id(sample)]
        old = torch.tensor(sample.old_logprobs, dtype=torch.float64)
        gaps.append(((new - old).abs())[mask > 0])
        out.append(dataclasses.replace(sample, old_logprobs=new.tolist()))
    gap = torch.cat(gaps) if gaps else torch.zeros(0)
    if not gap.numel():
        return out, {}
    return out, {"old_logp_gap": float(gap.mean()), "old_logp_gap_max": float(gap.max())}


def logprob_shift(updater, samples: list[TrainSample]) -> dict[str, float]:
    """How far an update moved the trained actions: the mean over actions of
    Δ = log π_θ(a|s) − log π_old(a|s) (summed over the action's trained tokens), apart for
    actions with positive and negative advantage (``logp_shift_pos``/``_neg``; left out
    when there are none). A learning update raises the first and lowers the second.

    Example: one action of advantage +1 whose two tokens went from log-probs (−1, −2) to
    (−0.5, −1.5) and one of advantage −1 from (−1) to (−1.25) → pos +1.0, neg −0.25.
    """
    sums = {1: 0.0, -1: 0.0}
    counts = {1: 0, -1: 0}
    current = current_logprobs(updater, samples)
    for sample in samples:
        new, mask = current[id(sample)]
        delta = (new - torch.tensor(sample.old_logprobs, dtype=torch.float64)) * mask
        if sample.token_advantages is None:
            token_adv = torch.full_like(delta, sample.advantage)
        else:
            token_adv = torch.tensor(sample.token_advantages, dtype=torch.float64)
        # an action is a run of trained tokens (a packed sample holds several)
        starts = (mask > 0) & (torch.diff(mask, prepend=torch.zeros(1)) > 0)
        for sign in (1, -1):
            chosen = (token_adv * sign > 0) & (mask > 0)
            sums[sign] += float(delta[chosen].sum())
            counts[sign] += int((starts & chosen).sum())
    names = {1: "logp_shift_pos", -1: "logp_shift_neg"}
    return {names[sign]: sums[sign] / counts[sign] for sign in (1, -1) if counts[sign]}
