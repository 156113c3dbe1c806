"""Mixed precision (``roleagent.models.precision``): with ``model.dtype=bfloat16`` forwards
run under autocast, trained tensors are fp32 master weights, frozen ones stay bf16, and
fp16 training is refused. CPU autocast supports bf16, so all of it runs here."""

import copy
import random

import pytest
import torch

from roleagent.config import OptimConfig
from roleagent.models.loading import load_policy
from roleagent.models.precision import compute_dtype, master_params
from roleagent.trainer.optimizer import Optimizer
from roleagent.trainer.update import Updater
from tests.test_update_skip_zero import _batch

ADVANTAGES = [1.0, -1.0, 0.5]


def _policy(dtype: str, lora_rank: int = 0):
    return load_policy("tiny", device="cpu", dtype=dtype, lora_rank=lora_rank, seed=0)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_bf16_trains_fp32_master_weights_and_keeps_frozen_weights_bf16(lora_rank):
    policy = _policy("bfloat16", lora_rank)
    assert compute_dtype(policy.model) == torch.bfloat16
    updater = Updater(policy, OptimConfig(lr=1e-5, kl_coef=0.0, mini_batches=1, grad_clip=1e9))
    trained = {id(p) for p in updater.params}
    assert updater.params and all(p.dtype == torch.float32 for p in updater.params)
    frozen = [p for p in policy.model.parameters() if id(p) not in trained]
    assert bool(frozen) == (lora_rank > 0) and all(p.dtype == torch.bfloat16 for p in frozen)
    ids = torch.tensor([[5, 6, 7, 8]])
    assert policy.model(input_ids=ids).logits.dtype == torch.bfloat16  # the forward autocasts
    before = [p.detach().clone() for p in updater.params]
    metrics = updater.update(_batch(policy, ADVANTAGES), random.Random(0))
    assert metrics["optimizer_steps"] == 1 and metrics["nonfinite_skipped"] == 0
    # lr 1e-5 moves every weight by ~1e-5 (AdamW's first step): lost in bf16 for any
    # |w| > ~2.6e-3 (its spacing 2^-8 |w|), kept in fp32
    # (elements with a nonzero gradient; the last step's gradients are still in place)
    pushed = [(p.grad != 0) for p in updater.params if p.grad is not None]
    changed = sum(int(((p != b) & g).sum()) for p, b, g in zip(updater.params, before, pushed))
    assert changed >= 0.9 * sum(int(g.sum()) for g in pushed) > 0


def _shift(policy) -> dict[str, float]:
    """One update of lr 1e-4 on a fixed batch; how far it moved the trained actions."""
    cfg = OptimConfig(lr=1e-4, kl_coef=0.0, mini_batches=1, epochs=1, grad_clip=1e9, measure_shift=True)
    metrics = Updater(policy, cfg).update(_batch(policy, ADVANTAGES), random.Random(0))
    return {k: metrics[k] for k in ("logp_shift_pos", "logp_shift_neg")}


def test_a_bf16_update_moves_logprobs_like_fp32():
    low = _policy("bfloat16")
    high = _policy("float32")
    with torch.no_grad():  # the same starting weights: fp32 copies of the bf16 ones
        for target, source in zip(high.model.parameters(), low.model.parameters()):
            target.copy_(source)
    shift_low, shift_high = _shift(low), _shift(high)
    # (a random tiny model: positive actions rise more than negative ones, 0.145 vs 0.105 in fp32)
    assert shift_high["logp_shift_pos"] - shift_high["logp_shift_neg"] > 0.02
    for key, value in shift_high.items():
        assert shift_low[key] == pytest.approx(value, rel=0.15), (shift_low, shift_high)


def test_the_kl_reference_stays_bf16_and_is_its_own_model():
    policy = _policy("bfloat16")
    updater = Updater(policy, OptimConfig(lr=1e-3, kl_coef=0.1, mini_batches=1))
    assert all(p.dtype == torch.bfloat16 for p in updater.reference.parameters())
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        ref_before = updater.reference(input_ids=ids).logits.clone()
    updater.update(_batch(policy, ADVANTAGES), random.Random(0))
    with torch.no_grad():
        assert torch.equal(updater.reference(input_ids=ids).logits, ref_before)  # the copy's forward, not the policy's
        assert not torch.equal(policy.model(input_ids=ids).logits, ref_before)


def test_the_updates_head_split_forward_computes_as_the_rollouts_forward():
    """The update and SFT call the decoder alone (``output_head``) to run the LM head on the
    positions they read; in bf16 that forward must autocast like the model's own (the
    rollout's), and the adapters must read the bf16 input, not an fp32 copy of it. Before
    the decoder was wrapped, the adapters ran in fp32 there and the log-probs differed."""
    from roleagent.trainer.samples import output_head, token_logprobs

    policy = _policy("bfloat16", lora_rank=4)
    master_params(policy.model)
    assert output_head(policy.model) is not None  # the tiny model takes the split path
    with torch.no_grad():  # nonzero adapters, as after training
        for name, weight in policy.model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.05, generator=torch.Generator().manual_seed(0))
    adapter_inputs = []
    for name, module in policy.model.named_modules():
        if name.endswith("lora_A.default"):
            module.register_forward_pre_hook(lambda m, args: adapter_inputs.append(args[0].dtype))
    ids = torch.randint(5, 200, (3, 24), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    positions, targets = attention.cumsum(-1) - 1, ids[:, -8:]
    everywhere = torch.ones(3, 8, dtype=torch.bool)
    with torch.no_grad():
        whole, _ = token_logprobs(policy.model, ids, attention, positions, targets, 8)
        assert adapter_inputs and set(adapter_inputs) == {torch.bfloat16}
        adapter_inputs.clear()
        split, _ = token_logprobs(policy.model, ids, attention, positions, targets, 8, where=everywhere)
    assert adapter_inputs and set(adapter_inputs) == {torch.bfloat16}
    assert torch.equal(split, whole)


def test_fp16_training_is_refused_in_one_line_but_fp16_still_runs_forwards():
    policy = _policy("float16", lora_rank=4)
    assert policy.model(input_ids=torch.tensor([[5, 6, 7]])).logits.dtype == torch.float16
    with pytest.raises(ValueError, match="model.dtype=float16 cannot train") as error:
        Updater(policy, OptimConfig(kl_coef=0.0))
    assert "\n" not in str(error.value)


def test_the_optimizer_refuses_bf16_weights():
    weight = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="fp32 master weights"):
        Optimizer([weight], lr=1e-3, what="policy")
    layer = torch.nn.Linear(2, 2).to(torch.bfloat16)
    assert [p.dtype for p in master_params(layer)] == [torch.float32, torch.float32]
    Optimizer(list(layer.parameters()), lr=1e-3)


def test_bf16_generation_runs_on_fp32_master_weights():
    from roleagent.engine.base import SamplingParams
    from roleagent.engine.hf import HFEngine

    policy = _policy("bfloat16")
    master_params(policy.model)
    engine = HFEngine(policy)
    [generation] = engine.generate([[5, 6, 7, 8]], SamplingParams(max_new_tokens=4, temperature=1.0))
    assert len(generation.ids) >= 1 and all(lp <= 0.0 for lp in generation.logprobs)
    copy.deepcopy(policy.model)  # a copy of a wrapped model is usable (the critic's, the reference's)


def test_fast_dtype_is_bf16_only_where_the_hardware_computes_it(monkeypatch):
    import roleagent.models.loading as loading

    assert isinstance(loading.cpu_computes_bf16(), bool)  # this machine's answer, whichever it is
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    for native, expected in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(loading, "cpu_computes_bf16", lambda native=native: native)
        assert loading.resolve_dtype("fast", cpu) == expected
        assert loading.resolve_dtype("fast", cuda) == torch.bfloat16
        assert loading.resolve_dtype("auto", cpu) == torch.float32  # auto never changes with the CPU


def test_fast_is_a_valid_dtype_and_a_typo_is_refused():
    from roleagent.config import load_config
    from roleagent.fields import ConfigError

    assert load_config("role_agent_alfworld", ["model.dtype=fast"]).model.dtype == "fast"
    with pytest.raises(ConfigError, match="model.dtype"):
        load_config("role_agent_alfworld", ["model.dtype=fastest"])
