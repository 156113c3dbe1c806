"""PPO-clip policy loss with asymmetric/dual clip, k3 KL, entropy, masks."""

import math

import pytest
import torch

from roleagent.algos import approx_kl_k3, masked_mean, policy_loss, token_entropy_from_logits


def _lp(values):
    return torch.tensor(values, dtype=torch.float64)


def test_ratio_one_gives_minus_token_mean_advantage():
    logp = _lp([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = _lp([2.0, -1.0])  # per sequence
    loss, m = policy_loss(logp, logp.clone(), adv, mask)
    # valid tokens: A = 2, 2, -1 → token mean 1 → loss -1
    assert loss.item() == pytest.approx(-1.0)
    assert m["pg_loss"] == pytest.approx(-1.0)
    assert m["ratio_mean"] == pytest.approx(1.0)
    assert m["clip_frac"] == 0.0 and m["approx_kl"] == pytest.approx(0.0)


def test_asymmetric_clip_bounds():
    old = _lp([[0.0, 0.0, 0.0, 0.0]])
    logp = _lp([[math.log(2.0), math.log(2.0), math.log(0.5), math.log(0.5)]])
    mask = torch.ones(1, 4)
    adv = _lp([[1.0, -1.0, 1.0, -1.0]])
    loss, m = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    # ρ=2, A=+1 → -min(2, 1.28) = -1.28 (clipped)
    # ρ=2, A=-1 → -min(-2, -1.28) = 2 (unclipped, pessimistic)
    # ρ=.5, A=+1 → -min(.5, .8) = -0.5 (unclipped)
    # ρ=.5, A=-1 → -min(-.5, -.8) = 0.8 (clipped)
    assert loss.item() == pytest.approx((-1.28 + 2.0 - 0.5 + 0.8) / 4)
    assert m["clip_frac"] == pytest.approx(0.5)
    assert m["ratio_mean"] == pytest.approx(1.25)


def test_dual_clip_caps_negative_advantage_loss():
    old = _lp([[0.0, 0.0]])
    logp = _lp([[math.log(5.0), math.log(5.0)]])
    adv = _lp([[-1.0, 1.0]])
    mask = torch.ones(1, 2)
    plain, _ = policy_loss(logp, old, adv, mask)
    dual, m = policy_loss(logp, old, adv, mask, dual_clip=3.0)
    # A=-1: plain loss 5; dual clip caps at 3. A=+1: -1.28 both ways
    assert plain.item() == pytest.approx((5.0 - 1.28) / 2)
    assert dual.item() == pytest.approx((3.0 - 1.28) / 2)
    assert m["dual_clip_frac"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        policy_loss(logp, old, adv, mask, dual_clip=0.5)


def test_k3_kl_values_and_zero_when_equal():
    a = _lp([[math.log(0.5)]])
    b = _lp([[math.log(0.25)]])
    assert approx_kl_k3(a, b).item() == pytest.approx(0.5 + math.log(2) - 1)  # 0.19315
    assert approx_kl_k3(a, a.clone()).item() == 0.0
    # verl's low_var_kl clamps the k3 VALUE to ±10, not the log-ratio:
    # d = ref − logp = −12 → k3 = e^−12 + 12 − 1 = 11.000006 → 10 (clamping d would give 9.00005)
    low = approx_kl_k3(_lp([[0.0]]), _lp([[-12.0]]))
    assert low.item() == 10.0
    # d = −8 → 7.000335, below the clamp
    assert approx_kl_k3(_lp([[0.0]]), _lp([[-8.0]])).item() == pytest.approx(math.exp(-8) + 7)
    # d = 50 (clamped to 20 before exp for float safety) → k3 = 10, finite
    big = approx_kl_k3(_lp([[0.0]]), _lp([[50.0]]), clamp=10.0)
    assert big.item() == 10.0
    # a clamped token carries no gradient (as torch.clamp in verl)
    logp = torch.zeros(1, 1, requires_grad=True)
    approx_kl_k3(logp, _lp([[-12.0]])).sum().backward()
    assert logp.grad.item() == 0.0


def test_kl_and_entropy_terms_enter_the_loss():
    logp = _lp([[math.log(0.5), 0.0]])
    ref = _lp([[math.log(0.25), 0.0]])
    ent = _lp([[1.0, 3.0]])
    mask = torch.tensor([[1, 0]])
    adv = _lp([0.0])
    loss, m = policy_loss(logp, logp.clone(), adv, mask, ref_logprobs=ref, kl_coef=0.5, entropy=ent, entropy_coef=0.1)
    k3 = 0.5 + math.log(2) - 1
    assert m["kl"] == pytest.approx(k3)
    assert m["entropy"] == pytest.approx(1.0)  # masked token (3.0) ignored
    assert loss.item() == pytest.approx(0.5 * k3 - 0.1 * 1.0)
    loss0, m0 = policy_loss(logp, logp.clone(), adv, mask, ref_logprobs=logp.clone(), kl_coef=1.0)
    assert m0["kl"] == 0.0 and loss0.item() == 0.0


def test_mask_excludes_tokens_and_token_mean_is_over_all_valid_tokens():
    old = torch.zeros(2, 3, dtype=torch.float64)
    logp = old.clone()
    logp[0, 2] = 30.0  # garbage under the mask must not matter
    adv = _lp([1.0, 4.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, _ = policy_loss(logp, old, adv, mask)
    # token mean: (1 + 1 + 4) / 3 = 2 (sequence-mean-then-batch-mean would give 2.5)
    assert loss.item() == pytest.approx(-2.0)
    assert torch.isfinite(loss)


def test_per_sequence_advantages_broadcast_like_per_token():
    torch.manual_seed(0)
    logp, old = torch.randn(3, 4, dtype=torch.float64) * 0.1, torch.randn(3, 4, dtype=torch.float64) * 0.1
    adv = _lp([0.5, -1.0, 2.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    a, _ = policy_loss(logp, old, adv, mask)
    b, _ = policy_loss(logp, old, adv[:, None].expand(3, 4), mask)
    assert a.item() == pytest.approx(b.item())


def test_gradient_flows_only_through_unclipped_valid_tokens():
    old = torch.zeros(1, 3, dtype=torch.float64)
    logp = _lp([[0.0, math.log(2.0), 0.0]]).requires_grad_(True)
    adv = _lp([[1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss, _ = policy_loss(logp, old, adv, mask)
    loss.backward()
    # token 0: ℓ = -ρA, dℓ/dlogp = -ρA = -1, divided by 2 valid tokens → -0.5
    # token 1: clipped (ρ = 2 > 1.28) → 0; token 2: masked → 0
    torch.testing.assert_close(logp.grad, _lp([[-0.5, 0.0, 0.0]]))


def test_masked_mean_and_entropy_helpers():
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    m = torch.tensor([[1, 0], [1, 1]])
    assert masked_mean(v, m).item() == pytest.approx(8 / 3)
    torch.testing.assert_close(masked_mean(v, m, dim=-1), torch.tensor([1.0, 3.5]))
    assert masked_mean(v, torch.zeros(2, 2)).item() == 0.0  # empty mask: 0, not NaN
    ent = token_entropy_from_logits(torch.zeros(2, 3, 4))
    torch.testing.assert_close(ent, torch.full((2, 3), math.log(4)))
    peaked = token_entropy_from_logits(torch.tensor([[[100.0, 0.0, 0.0]]]))
    assert peaked.item() == pytest.approx(0.0, abs=1e-6)
