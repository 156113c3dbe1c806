"""A non-finite gradient norm skips the optimizer step, records where it came from, and
raises only after ``optim.max_nonfinite_skips`` consecutive skips (verl's actor skips such
a step; DeepSpeed and Megatron skip overflow steps)."""

import json
import math
import random

import pytest
import torch

from roleagent.config import ConfigError, OptimConfig, TrainConfig
from roleagent.config_rules import check_fields
from roleagent.engine.constrain import NEG
from roleagent.trainer.nonfinite import jsonable, micro_batch_report, out_of_set
from roleagent.trainer.optimizer import grad_norm
from roleagent.trainer.samples import TrainSample
from roleagent.trainer.update import Updater

BAD = "model.layers.0.mlp.down_proj.weight"  # the parameter whose gradient a hook poisons


@pytest.fixture(scope="module")
def tiny():
    from roleagent.models.loading import load_policy

    policy = load_policy("tiny", device="cpu", dtype="float32", seed=0)
    return policy, {k: v.clone() for k, v in policy.model.state_dict().items()}


@pytest.fixture
def policy(tiny):
    policy, weights = tiny
    policy.model.load_state_dict(weights)  # every test starts from the same weights
    return policy


def _samples(policy, advantages=(1.0, -1.0)):
    """Two samples of different lengths (one micro-batch each at 16 tokens), ratios ≠ 1."""
    tok = policy.tokenizer
    out = []
    for k, adv in enumerate(advantages):
        prompt = tok(f"Room {k}. Which way?" + " Think." * (4 * k), add_special_tokens=False)["input_ids"]
        output = tok(" go left now" + " please" * k, add_special_tokens=False)["input_ids"]
        out.append(TrainSample(prompt, output, [-1.0] * len(output), adv))
    return out


def _updater(policy, tmp_path=None, **optim):
    cfg = OptimConfig(**{"lr": 1e-2, "micro_batch_tokens": 16, "kl_coef": 0.0, **optim})
    path = None if tmp_path is None else tmp_path / "nonfinite.jsonl"
    return Updater(policy, cfg, diagnostics_path=path)


def _poison(policy):
    """A hook that turns one parameter's gradient into NaN."""
    param = dict(policy.model.named_parameters())[BAD]
    return param.register_hook(lambda g: torch.full_like(g, math.nan))


def _weights(policy):
    return {n: p.detach().clone() for n, p in policy.model.named_parameters()}


def _same(a, b):
    return all(torch.equal(a[n], b[n]) for n in a)


def test_hand_examples():
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1, 2))
    a.grad, b.grad = torch.tensor([3.0]), torch.tensor([[0.0, 4.0]])
    assert grad_norm([a, b]) == pytest.approx(5.0)
    b.grad[0, 0] = math.nan
    assert math.isnan(grad_norm([a, b]))
    assert jsonable({"a": [1.0, math.nan], "b": -math.inf}) == {"a": [1.0, "nan"], "b": "-inf"}
    s = TrainSample([1], [5, 9, 3], [0.0] * 3, 1.0, allowed=[[5, 6], [7], None])
    assert out_of_set(s) == [1]


def test_nan_gradient_skips_the_step_and_names_the_parameter(policy, tmp_path):
    updater = _updater(policy, tmp_path)
    before = _weights(policy)
    handle = _poison(policy)
    try:
        with pytest.warns(RuntimeWarning, match="skipped optimizer step 1"):
            metrics = updater.update(_samples(policy), random.Random(0))
    finally:
        handle.remove()
    assert metrics["nonfinite_skipped"] == 1 and math.isnan(metrics["grad_norm"]) and math.isnan(metrics["pg_loss"])
    assert _same(before, _weights(policy)) and not updater.optimizer.state  # no AdamW step, no moments
    assert all(p.grad is None for p in updater.params)
    (record,) = [json.loads(line) for line in (tmp_path / "nonfinite.jsonl").read_text().splitlines()]
    assert record["step"] == 1 and record["consecutive_skips"] == 1 and record["grad_norm"] == "nan"
    assert record["nonfinite_params"] == [BAD] and record["nonfinite_param_count"] == 1
    micros = record["micro_batches"]
    assert sorted(i for m in micros for i in m["samples"]) == [0, 1] and len(micros) == 2
    for m in micros:  # the forward is clean: only the hooked gradient is bad
        assert math.isfinite(m["loss"]) and m["logits_finite"] and m["logprobs_finite"] and m["advantages_finite"]
        assert m["nonfinite_params"] == [BAD] and not m["grads_finite"] and m["out_of_set"] == {}
    assert record["reproduced"] is True


def test_inf_advantage_record_names_the_micro_batch_and_the_backward_op(policy, tmp_path):
    updater = _updater(policy, tmp_path)
    samples = _samples(policy, advantages=(1.0, math.inf))
    with pytest.warns(RuntimeWarning):
        metrics = updater.update(samples, random.Random(0))
    assert metrics["nonfinite_skipped"] == 1
    record = json.loads((tmp_path / "nonfinite.jsonl").read_text())
    good, bad = sorted(record["micro_batches"], key=lambda m: m["samples"])
    assert bad["samples"] == [1] and bad["loss_in_step"] in ("nan", "-inf") and not bad["advantages_finite"]
    assert not bad["grads_finite"] and bad["logprobs_finite"] and bad["old_logprobs_finite"]
    assert good["samples"] == [0] and good["grads_finite"] and math.isfinite(good["loss_in_step"])
    assert record["anomaly"].startswith("Function '") and "returned nan values" in record["anomaly"]


def test_raises_after_max_consecutive_skips(policy, tmp_path):
    updater = _updater(policy, tmp_path, max_nonfinite_skips=2)
    handle = _poison(policy)
    try:
        for _ in range(2):
            with pytest.warns(RuntimeWarning):
                assert updater.update(_samples(policy), random.Random(0))["nonfinite_skipped"] == 1
        with pytest.raises(FloatingPointError, match="3 consecutive steps"):
            updater.update(_samples(policy), random.Random(0))
    finally:
        handle.remove()
    assert len((tmp_path / "nonfinite.jsonl").read_text().splitlines()) == 3  # the last one is recorded too


def test_zero_skips_raises_at_once_with_the_record_in_memory(policy):
    updater = _updater(policy, max_nonfinite_skips=0)
    before = _weights(policy)
    handle = _poison(policy)
    try:
        with pytest.raises(FloatingPointError, match="nonfinite_records"):
            updater.update(_samples(policy), random.Random(0))
    finally:
        handle.remove()
    assert _same(before, _weights(policy))
    assert [r["nonfinite_params"] for r in updater.nonfinite_records] == [[BAD]]


def test_a_finite_step_resets_the_count(policy):
    updater = _updater(policy, max_nonfinite_skips=1)

    def poisoned_update():
        handle = _poison(policy)
        try:
            with pytest.warns(RuntimeWarning):
                return updater.update(_samples(policy), random.Random(0))
        finally:
            handle.remove()

    assert poisoned_update()["nonfinite_skipped"] == 1 and updater.nonfinite_streak == 1
    before = _weights(policy)
    metrics = updater.update(_samples(policy), random.Random(0))
    assert metrics["nonfinite_skipped"] == 0 and math.isfinite(metrics["grad_norm"]) and updater.nonfinite_streak == 0
    assert not _same(before, _weights(policy))  # the finite step was applied
    assert poisoned_update()["nonfinite_skipped"] == 1  # a skip again, not a raise


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_target_outside_its_allowed_set_gives_no_nonfinite_gradient(policy, dtype):
    """The hunt (retokenisation mismatch): a target outside its allowed set has log-prob ≈
    NEG; the ±20 clamps of the log-ratio and of k3's difference give it zero gradient, and
    forbidden logits (NEG, probability exactly 0) add 0 to the entropy and its gradient."""
    policy.model.to(dtype)
    try:
        samples = _samples(policy, advantages=(1.0, -1.0))
        for s in samples:  # first token outside its set; second constrained, in its set
            s.allowed = [[s.output_ids[0] + 1, s.output_ids[0] + 2], [s.output_ids[1], 7]] + [None] * (
                len(s.output_ids) - 2
            )
        updater = _updater(policy, kl_coef=1.0, entropy_coef=0.5, dual_clip=3.0, max_nonfinite_skips=0)
        report = micro_batch_report(updater, samples[:1], {id(samples[0]): 0}, torch.tensor(0.0))
        assert report["out_of_set"] == {0: [0]} and report["logprob_below_neg_half"] == 1
        assert report["grads_finite"] and math.isfinite(report["loss"])
        assert report["log_ratio_range"][0] <= NEG / 2
        metrics = updater.update(samples, random.Random(0))
        assert metrics["nonfinite_skipped"] == 0 and math.isfinite(metrics["grad_norm"])
    finally:
        policy.model.to(torch.float32)


def test_max_nonfinite_skips_is_checked():
    cfg = TrainConfig()
    cfg.optim.max_nonfinite_skips = -1
    with pytest.raises(ConfigError, match="optim.max_nonfinite_skips"):
        check_fields(cfg)
    assert OptimConfig().max_nonfinite_skips == 3
