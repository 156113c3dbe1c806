"""Token-level policy loss: PPO-clip with asymmetric clip and optional dual clip, token-mean
aggregation, k3 KL to a reference policy, entropy bonus (Role-Agent, Wang et al., 2026,
arXiv 2606.10917, eqs. 1 and 9, with ε split into clip_low / clip_high as in DAPO, Yu et al.,
2025, arXiv 2503.14476; defaults clip 0.2 / 0.28, dual clip c = 3, KL k3 clamped to ±10).

All tensors are (B, T): B sequences (one per step sample) of T response tokens; ``mask``
is 1 on tokens that are trained. Style after tiny-grpo's ``loss.py``.
"""

from __future__ import annotations

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` over positions where ``mask`` is 1 (an empty mask gives 0, not NaN).

    Example: values [[1, 2], [3, 4]], mask [[1, 0], [1, 1]] → (1 + 3 + 4) / 3 = 2.6667;
    with dim=-1 → [1.0, 3.5].
    """
    mask = mask.to(values.dtype)  # (B, T)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1.0)  # ()
    return (values * mask).sum(dim=dim) / mask.sum(dim=dim).clamp(min=1.0)  # (B,) for dim=-1


def approx_kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, *, clamp: float = 10.0) -> torch.Tensor:
    """Per-token k3 estimator of KL(π_θ ‖ π_ref): ``exp(d) − d − 1`` with ``d = ref − logp``.

    Schulman's k3 (non-negative, unbiased under samples from π_θ), as verl's
    ``kl_penalty(..., "low_var_kl")`` in ``verl/trainer/ppo/core_algos.py``: the k3 VALUE is
    clamped to [−clamp, clamp] (verl: ±10), so a token whose KL term exceeds 10 contributes
    10 and no gradient; ``d`` itself is only clamped to ±20 before ``exp`` for float
    safety (as newer verl does; exp(20) is finite in float32).

    Example: logp = log 0.5, ref = log 0.25 → d = −log 2, k3 = 0.5 + 0.6931 − 1 = 0.1931.
    logp = 0, ref = −12 → d = −12, k3 = 11.000006 → clamped to 10.
    """
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)  # (B, T)
    k3 = log_ratio.exp() - log_ratio - 1.0  # (B, T)
    return k3.clamp(-clamp, clamp)  # (B, T)


def token_entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last axis: ``logsumexp(z) − Σ p·z``.

    (B, T, V) → (B, T). Example: uniform logits over V = 4 → log 4 = 1.3863.
    """
    log_z = torch.logsumexp(logits, dim=-1)  # (B, T)
    probs = torch.softmax(logits, dim=-1)  # (B, T, V)
    return log_z - (probs * logits).sum(dim=-1)  # (B, T)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate loss (eq. 9 negated), token-mean over all valid tokens of the batch.

    ``ρ = exp(logp − logp_old)``; per token
    ``ℓ = −min(ρ·A, clip(ρ, 1−clip_low, 1+clip_high)·A)``; with ``dual_clip = c`` (> 1,
    usually 3) tokens with A < 0 use ``min(ℓ, −c·A)`` so a huge ratio cannot blow up the
    loss. ``loss = Σ_valid ℓ / N_valid + kl_coef·mean_valid(k3(π_θ‖π_ref))
    − entropy_coef·mean_valid(entropy)``. ``advantages`` is (B, T) or (B,) (broadcast
    over tokens). The log-ratio is clamped to ±20 before ``exp`` for numerical safety.

    Metrics: pg_loss, kl (to ref, 0 without ref), entropy (0 without), clip_frac (valid
    tokens where the clipped term was the active one), dual_clip_frac, approx_kl (k3 of
    π_θ vs π_old, estimates KL(π_old ‖ π_θ)), ratio_mean.

    Example: ρ = 1 everywhere (logp == old) → loss = −mean_valid(A); with A = [1, −1] on
    one token each → 0. With ρ = 2, A = 1: clipped to 1.28 → ℓ = −1.28.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError("dual_clip must be > 1")
    mask = mask.to(logprobs.dtype)  # (B, T)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # (B, 1), broadcast over tokens
    advantages = advantages.to(logprobs.dtype).detach()  # (B, T) or (B, 1)

    log_ratio = (logprobs - old_logprobs.detach()).clamp(-20.0, 20.0)  # (B, T)
    ratio = log_ratio.exp()  # (B, T)
    surr1 = ratio * advantages  # (B, T)
    surr2 = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages  # (B, T)
    token_loss = -torch.min(surr1, surr2)  # (B, T)
    clipped = (surr2 < surr1).to(logprobs.dtype)  # (B, T)

    dual_clipped = torch.zeros_like(token_loss)  # (B, T)
    if dual_clip is not None:
        cap = -dual_clip * advantages  # (B, T) or (B, 1): loss ceiling for A < 0
        negative = (advantages < 0).expand_as(token_loss)  # (B, T)
        dual_clipped = (negative & (token_loss > cap)).to(logprobs.dtype)  # (B, T)
        token_loss = torch.where(negative, torch.min(token_loss, cap), token_loss)  # (B, T)

    pg_loss = masked_mean(token_loss, mask)  # ()
    loss = pg_loss  # ()

    kl = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)  # ()
    if ref_logprobs is not None:
        kl = masked_mean(approx_kl_k3(logprobs, ref_logprobs.detach()), mask)  # ()
        if kl_coef:
            loss = loss + kl_coef * kl  # ()

    ent = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)  # ()
    if entropy is not None:
        ent = masked_mean(entropy, mask)  # ()
        if entropy_coef:
            loss = loss - entropy_coef * ent  # ()

    with torch.no_grad():
        metrics = {
            "pg_loss": pg_loss.item(),
            "kl": kl.item(),
            "entropy": ent.item(),
            "clip_frac": masked_mean(clipped, mask).item(),
            "dual_clip_frac": masked_mean(dual_clipped, mask).item(),
            "approx_kl": masked_mean(approx_kl_k3(old_logprobs, logprobs), mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
        }
    return loss, metrics
