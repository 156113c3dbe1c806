"""The fixed-shape decode paths (``hf_engine.decode``: static, compiled) generate what the
eager loop generates: the same tokens, log-probs equal up to float rounding, the same
truncation, sampled and greedy, free and constrained, rows finishing at different steps."""

import pytest
import torch

from roleagent.config import load_config
from roleagent.engine import create_engine, engine_settings
from roleagent.engine.hf import HFEngine, HFEngineConfig, SamplingParams
from roleagent.engine.static_decode import static_advance, static_batch, static_length
from roleagent.fields import ConfigError
from roleagent.rollout import actor


def _prompts(engine, n=4):
    return [
        engine.encode_chat([{"role": "user", "content": "word " * (3 * i + 1)}], response_prefix="<action>")
        for i in range(n)
    ]


def _generate(policy, decode, prompts, params, allowed=None, seed=0, **kw):
    engine = HFEngine(policy, settings=HFEngineConfig(decode=decode, cache_bucket=16), **kw)
    engine.seed(seed)
    return engine.generate(prompts, params, allowed=allowed), engine


def _assert_same(out, ref):
    assert [g.ids for g in out] == [g.ids for g in ref]
    for a, b in zip(out, ref):
        assert len(a.logprobs) == len(b.logprobs)
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) < 1e-4
        assert (a.truncated, a.text, a.allowed) == (b.truncated, b.text, b.allowed)


def test_static_advance_feeds_the_live_rows_and_opens_the_next_column():
    attention = torch.tensor([[1, 1, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0]])
    fed, positions = static_advance(
        torch.tensor([[4], [5], [6]]),
        attention,
        torch.tensor([[1], [0], [1]]),
        2,
        torch.tensor([0, 2]),
        torch.tensor([7, 9]),
    )
    assert fed.tolist() == [[7], [5], [9]] and positions.tolist() == [[2], [1], [2]]
    assert attention[:, 2].tolist() == [1, 1, 1] and attention[:, 3].sum() == 0


def test_static_length_rounds_up_to_the_bucket():
    assert static_length(290, 64, 64) == 384
    assert static_length(256, 64, 64) == 320
    assert static_length(5, 3, 1) == 8


def test_static_batch_keeps_the_prompt_mask_and_leaves_the_rest_closed(tiny_policy):
    attention = torch.tensor([[0, 1, 1], [1, 1, 1]])
    full, cache, filled = static_batch(tiny_policy.model.config, attention, 4, 4)
    assert full.shape == (2, 8) and full[:, :3].tolist() == attention.tolist() and full[:, 3:].sum() == 0
    assert filled == 3
    assert {layer.max_cache_len for layer in cache.layers} == {8}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_static_decode_generates_what_the_eager_loop_does(tiny_policy, temperature):
    engine = HFEngine(tiny_policy)
    prompts = _prompts(engine)  # different lengths: left padding
    # a stop string of one common letter ends the sampled rows at different steps
    params = SamplingParams(max_new_tokens=10, temperature=temperature, stop=("e",) if temperature else ())
    for seed in (0, 1, 2):
        ref, _ = _generate(tiny_policy, "eager", prompts, params, seed=seed)
        out, _ = _generate(tiny_policy, "static", prompts, params, seed=seed)
        _assert_same(out, ref)
    assert temperature == 0.0 or len({len(g.ids) for g in ref}) > 1  # rows finished at different steps


def test_static_decode_with_constrained_rows_and_forced_tails(tiny_policy):
    tok = tiny_policy.tokenizer
    engine = HFEngine(tiny_policy)
    commands = [["go to desk 1", "go to drawer 2", "look"], ["take pen 1 from desk 1", "inventory"], None]
    allowed = [
        None
        if cmds is None
        else [tok(actor.completion(c, "action"), add_special_tokens=False)["input_ids"] for c in cmds]
        for cmds in commands
    ]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, stop=actor.STOP["action"])
    prompts = _prompts(engine, 3)
    for seed in (0, 3):
        ref, _ = _generate(tiny_policy, "eager", prompts, params, allowed=allowed, seed=seed)
        out, _ = _generate(tiny_policy, "static", prompts, params, allowed=allowed, seed=seed)
        _assert_same(out, ref)
        assert out[0].ids in allowed[0] and out[1].ids in allowed[1]


def test_static_decode_in_chunks_and_its_counters(tiny_policy):
    engine = HFEngine(tiny_policy)
    prompts = _prompts(engine, 5)
    params = SamplingParams(max_new_tokens=5, temperature=1.0)
    ref, eager = _generate(tiny_policy, "eager", prompts, params, seed=4, max_batch=2)
    out, static = _generate(tiny_policy, "static", prompts, params, seed=4, max_batch=2)
    _assert_same(out, ref)
    assert static.generated_tokens == eager.generated_tokens and static.prompt_tokens == eager.prompt_tokens


def test_compiled_decode_generates_what_the_eager_loop_does(tiny_policy):
    """torch.compile on the CPU (inductor): the decode step compiles once per (batch, length)."""
    pytest.importorskip("torch._inductor")
    from torch._dynamo.utils import counters

    engine = HFEngine(tiny_policy)
    prompts = _prompts(engine, 3)
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    ref, _ = _generate(tiny_policy, "eager", prompts, params, seed=5)
    compiled = HFEngine(tiny_policy, settings=HFEngineConfig(decode="compiled", cache_bucket=16))
    counters.clear()
    graphs = []
    for _ in range(2):  # the second call reuses the compiled step
        compiled.seed(5)
        _assert_same(compiled.generate(prompts, params), ref)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] >= 1 and graphs[1] == graphs[0]  # the step was compiled, once


def test_settings_are_the_hf_engine_section_and_bad_ones_are_refused(tiny_policy):
    cfg = load_config(None, ["hf_engine.decode=static", "hf_engine.cache_bucket=32"])
    engine = create_engine("hf", tiny_policy, settings=engine_settings(cfg))
    assert engine.settings.decode == "static" and engine.settings.cache_bucket == 32
    assert create_engine("hf", tiny_policy).settings == HFEngineConfig()  # the defaults: eager
    with pytest.raises(ConfigError, match="hf_engine.decode"):
        load_config(None, ["hf_engine.decode=graphs"])
    with pytest.raises(ConfigError, match="keeps no prefix KV"):
        load_config(None, ["hf_engine.decode=compiled", "rollout.prefix_cache_tokens=4096"])
    with pytest.raises(ValueError, match="keeps no prefix KV"):
        HFEngine(tiny_policy, settings=HFEngineConfig(decode="static"), prefix_cache_tokens=4096)
    with pytest.raises(ValueError, match="choose one of"):
        HFEngine(tiny_policy, settings=HFEngineConfig(decode="graphs"))


def test_a_seeded_training_run_is_the_same_run_with_static_decoding(tmp_path):
    """Two iterations of a tiny Role-Agent run (actions and World-In-Agent predictions
    sampled, weights updated between iterations): the same rollouts token for token and the
    same evaluation; the update's metrics agree to float rounding (the old log-probs do)."""
    from tests.run_helpers import assert_same_sampled_run, rollouts, run

    eager, static = tmp_path / "eager", tmp_path / "static"
    run(eager, 2)
    run(static, 2, ["hf_engine.decode=static", "hf_engine.cache_bucket=8"])
    assert len(rollouts(eager)) == 4
    assert_same_sampled_run(eager, static)


def test_the_compiled_step_sees_lora_weights_and_their_updates():
    """A LoRA policy, then an optimizer step between two calls of one compiled engine: each
    call generates what a fresh eager engine generates with the weights of that moment."""
    pytest.importorskip("torch._inductor")
    from tests.test_engine_prefix_cache import _lora_policy

    policy = _lora_policy()
    compiled = HFEngine(policy, settings=HFEngineConfig(decode="compiled", cache_bucket=16))
    prompts = _prompts(compiled, 3)
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    before = None
    for _ in range(2):
        ref, _ = _generate(policy, "eager", prompts, params, seed=3)
        compiled.seed(3)
        _assert_same(compiled.generate(prompts, params), ref)
        assert before is None or [g.ids for g in ref] != before  # the step changed what is generated
        before = [g.ids for g in ref]
        trained = [p for p in policy.model.parameters() if p.requires_grad]
        for p in trained:
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()))
        torch.optim.SGD(trained, lr=1.0).step()
