"""The one optimizer (``roleagent.trainer.optimizer``): schedule, clipping, non-finite skips,
its state through a checkpoint, and ``model.lora_target``."""

import math

import pytest
import torch

from roleagent.config import ConfigError, load_config
from roleagent.models.loading import load_policy, lora_targets
from roleagent.trainer.optimizer import Optimizer, lr_at


def test_schedules_by_hand():
    # warm-up 2 of 6 steps, cosine to 0: (s+1)/W, then ½(1 + cos(π (s − W) / (S − W)))
    expected = [0.5, 1.0, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))]
    got = [lr_at(s, 1.0, schedule="cosine", warmup_steps=2, total_steps=6) for s in range(6)]
    assert got == pytest.approx(expected)
    assert [lr_at(s, 2.0, warmup_steps=4) for s in range(6)] == [0.5, 1.0, 1.5, 2.0, 2.0, 2.0]
    assert lr_at(9, 1.0, schedule="cosine", total_steps=4, min_lr_ratio=0.1) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="unknown learning-rate schedule 'linear'"):
        Optimizer([torch.nn.Parameter(torch.zeros(1))], lr=1.0, schedule="linear")


def _quadratic_step(opt: Optimizer, weight: torch.nn.Parameter, target: float = 3.0):
    opt.zero_grad()
    ((weight - target) ** 2).sum().backward()
    return opt.step()


def test_steps_follow_the_schedule_and_resume_it_from_the_adamw_state():
    weight = torch.nn.Parameter(torch.zeros(2))
    opt = Optimizer([weight], lr=0.1, schedule="cosine", warmup_steps=1, total_steps=4, grad_clip=100.0)
    rates = []
    for _ in range(2):
        rates.append(opt.lr)
        assert _quadratic_step(opt, weight) == pytest.approx(6.0 * math.sqrt(2), rel=0.2)
    assert rates == pytest.approx([0.1, 0.1]) and opt.applied_steps == 2
    # a fresh optimizer loading the saved AdamW state continues at step 2
    again = Optimizer([weight], lr=0.1, schedule="cosine", warmup_steps=1, total_steps=4)
    again.adamw.load_state_dict(opt.adamw.state_dict())
    assert again.applied_steps == 2 and again.lr == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi / 3)))


def test_clipping_bounds_the_applied_gradient():
    weight = torch.nn.Parameter(torch.zeros(1))
    opt = Optimizer([weight], lr=1.0, grad_clip=0.5)
    opt.zero_grad()
    (weight * 10.0).sum().backward()
    assert opt.step() == pytest.approx(10.0)  # the norm before clipping
    # AdamW's first step moves by lr whatever the scale; the stored first moment is the clipped gradient's
    assert opt.adamw.state[weight]["exp_avg"].item() == pytest.approx(0.1 * 0.5, rel=1e-4)


def test_non_finite_steps_are_skipped_then_raise():
    weight = torch.nn.Parameter(torch.ones(1))
    opt = Optimizer([weight], lr=0.1, max_nonfinite_skips=1, what="test")
    for attempt in range(2):
        opt.zero_grad()
        (weight * float("nan")).sum().backward()
        if attempt == 0:
            with pytest.warns(RuntimeWarning, match="test: skipped optimizer step 1"):
                assert opt.step() is None
            assert weight.item() == 1.0 and opt.applied_steps == 0 and weight.grad is None
        else:
            with pytest.raises(FloatingPointError, match="test: non-finite gradient norm in 2 consecutive"):
                opt.step()
    assert len(opt.nonfinite_records) == 2


def test_lora_target_chooses_the_adapted_modules():
    assert lora_targets("attention") == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert lora_targets("all-linear") == "all-linear"
    attention = load_policy("tiny", device="cpu", dtype="float32", lora_rank=2)
    every = load_policy("tiny", device="cpu", dtype="float32", lora_rank=2, lora_target="all-linear")
    adapted = lambda policy: {n.split(".")[-4] for n, _ in policy.model.named_parameters() if "lora_A" in n}  # noqa: E731
    assert adapted(attention) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert adapted(every) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    with pytest.raises(ConfigError, match="model.lora_target"):
        load_config(None, ["model.lora_target=q_proj;rm"])
