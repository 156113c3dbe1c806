"""The KV arena (``hf_engine.arena``, :mod:`roleagent.engine.kv_arena`) generates what
transformers' DynamicCache generates: the same tokens and log-probs, sampled and greedy,
free and constrained, with prefix reuse, the prefill in row chunks, rows leaving the batch."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from roleagent.config import load_config
from roleagent.engine.hf import HFEngine, HFEngineConfig, SamplingParams
from roleagent.engine.kv_arena import KVArena, full_attention_layers, row_chunks
from roleagent.fields import ConfigError
from roleagent.rollout import actor
from tests.test_engine_static import _assert_same, _prompts


def test_row_chunks_bound_the_padded_tokens_of_each_forward():
    assert [list(r) for r in row_chunks(16, 512, 2048)] == [list(range(i, i + 4)) for i in (0, 4, 8, 12)]
    assert [len(r) for r in row_chunks(5, 300, 1000)] == [3, 2]
    assert [len(r) for r in row_chunks(3, 5000, 2048)] == [1, 1, 1]  # at least one row
    assert [len(r) for r in row_chunks(7, 300, 0)] == [7]  # 0: one forward


def _layer_pair(rows=4, heads=2, length=5, dim=3):
    """An arena layer and a DynamicLayer holding the same random keys and values."""
    keys, values = torch.randn(rows, heads, length, dim), torch.randn(rows, heads, length, dim)
    arena = KVArena(1, rows, length + 2)
    layer = arena.cache().layers[0]
    plain = DynamicLayer()
    for cache_layer in (layer, plain):
        cache_layer.update(keys, values)
    return arena, layer, plain


def test_an_arena_layer_writes_in_place_and_drops_rows_like_a_dynamic_layer():
    arena, layer, plain = _layer_pair()
    buffer = arena.buf.data_ptr()
    for k, v in [(torch.randn(4, 2, 1, 3), torch.randn(4, 2, 1, 3))]:
        assert all(torch.equal(a, b) for a, b in zip(layer.update(k, v), plain.update(k, v)))
    index = torch.tensor([1, 3])
    layer.batch_select_indices(index)
    plain.batch_select_indices(index)
    k, v = torch.randn(2, 2, 1, 3), torch.randn(2, 2, 1, 3)
    assert all(torch.equal(a, b) for a, b in zip(layer.update(k, v), plain.update(k, v)))
    assert layer.get_seq_length() == plain.get_seq_length() == 7
    assert arena.buf.data_ptr() == buffer  # never reallocated
    with pytest.raises(RuntimeError, match="arena full"):
        layer.update(k, v)


def test_full_attention_layers_counts_plain_layers_only(tiny_policy):
    from transformers import MistralConfig

    assert full_attention_layers(tiny_policy.model.config) == tiny_policy.model.config.num_hidden_layers
    windowed = MistralConfig(num_hidden_layers=2, sliding_window=8, hidden_size=16, num_attention_heads=2)
    assert full_attention_layers(windowed) == 0  # sliding-window layers: transformers' own cache


def _engine(policy, seed=0, **settings):
    engine = HFEngine(policy, settings=HFEngineConfig(**settings), prefix_cache_tokens=4096)
    engine.seed(seed)
    return engine


@pytest.mark.parametrize("prefill_tokens", [0, 24, 2048])
def test_the_arena_generates_what_the_dynamic_cache_does(tiny_policy, prefill_tokens):
    """Three calls per engine, so the second and third reuse stored prefixes; rows of
    different lengths, rows finishing at different steps, constrained rows with forced tails,
    a whole-command greedy call; 24 tokens a chunk: one row at a time, or more after reuse."""
    tok = tiny_policy.tokenizer
    commands = [["go to desk 1", "go to drawer 2", "look"], ["take pen 1 from desk 1", "inventory"], None, ["look"]]
    allowed = [
        None if c is None else [tok(actor.completion(x, "action"), add_special_tokens=False)["input_ids"] for x in c]
        for c in commands
    ]
    for seed in (0, 3):
        out = []
        for settings in ({"arena": False}, {"prefill_tokens": prefill_tokens}):
            engine = _engine(tiny_policy, seed, **settings)
            prompts = _prompts(engine, 4)
            calls = [
                engine.generate(prompts, SamplingParams(8, 1.0, stop=("e",))),
                engine.generate(prompts, SamplingParams(6, 1.0, stop=actor.STOP["action"]), allowed=allowed),
                engine.generate(
                    prompts, SamplingParams(6, 0.0, greedy="command"), allowed=[*allowed[:2], *allowed[:2]]
                ),
            ]
            out.append((calls, engine.reused_prompt_tokens))
        (ref, reused_ref), (got, reused) = out
        for a, b in zip(got, ref):
            _assert_same(a, b)
        assert reused == reused_ref > 0
        assert len({len(g.ids) for g in ref[0]}) > 1 or seed  # rows left the batch at different steps


def test_arena_settings_are_checked():
    cfg = load_config(None, ["hf_engine.arena=false", "hf_engine.prefill_tokens=512"])
    assert cfg.hf_engine.arena is False and cfg.hf_engine.prefill_tokens == 512
    with pytest.raises(ConfigError, match="hf_engine.prefill_tokens"):
        load_config(None, ["hf_engine.prefill_tokens=-1"])


def test_a_seeded_training_run_is_the_same_run_without_the_arena(tmp_path):
    """Two iterations of a tiny Role-Agent run (actions and World-In-Agent predictions
    sampled, prefixes reused, weights updated between iterations), with the arena and with
    transformers' cache: the same rollouts token for token and the same evaluation."""
    from tests.run_helpers import assert_same_sampled_run, rollouts, run

    arena, plain = tmp_path / "arena", tmp_path / "plain"
    run(arena, 2, ["hf_engine.prefill_tokens=64"])
    run(plain, 2, ["hf_engine.arena=false"])
    assert len(rollouts(arena)) == 4
    assert_same_sampled_run(arena, plain)
