"""The HF engine keeps generation-time token ids and log-probs (token-in-token-out)."""

import torch

from roleagent.engine.hf import HFEngine, SamplingParams
from roleagent.trainer.update import TrainSample, _collate, token_logprobs


def _prompts(engine, n=3):
    return [engine.encode_chat([{"role": "user", "content": "word " * (i * 5 + 1)}], response_prefix="<action>")
            for i in range(n)]


def test_logprobs_match_a_full_forward_pass(tiny_policy):
    engine = HFEngine(tiny_policy)
    engine.seed(1)
    prompts = _prompts(engine)  # different lengths: left padding and per-row finishing
    generations = engine.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0))
    samples = [TrainSample(g.prompt_ids, g.ids, g.logprobs, 0.0) for g in generations]
    *tensors, keep = _collate(samples, tiny_policy.tokenizer.pad_token_id, torch.device("cpu"))
    input_ids, attention, positions, targets, old, mask, _ = tensors
    with torch.no_grad():
        recomputed, _ = token_logprobs(tiny_policy.model, input_ids, attention, positions, targets, keep)
    assert mask.sum() == sum(len(g.ids) for g in generations)
    assert torch.allclose(recomputed[mask.bool()], old[mask.bool()], atol=1e-4)


def test_generation_is_reproducible_per_seed(tiny_policy):
    engine = HFEngine(tiny_policy)
    prompts = _prompts(engine, 2)
    engine.seed(5)
    a = engine.generate(prompts, SamplingParams(max_new_tokens=5))
    engine.seed(5)
    b = engine.generate(prompts, SamplingParams(max_new_tokens=5))
    assert [g.ids for g in a] == [g.ids for g in b]


def test_greedy_and_limits(tiny_policy):
    engine = HFEngine(tiny_policy, max_batch=2)
    prompts = _prompts(engine, 3)  # 3 prompts, batches of 2
    out = engine.generate(prompts, SamplingParams(max_new_tokens=4, temperature=0.0))
    again = engine.generate(prompts, SamplingParams(max_new_tokens=4, temperature=0.0))
    assert [g.ids for g in out] == [g.ids for g in again]
    assert all(len(g.ids) <= 4 and len(g.logprobs) == len(g.ids) for g in out)
    assert all(g.prompt_ids == p for g, p in zip(out, prompts))
    assert engine.generated_tokens == sum(len(g.ids) for g in out + again)


def test_stop_string_ends_a_row(tiny_policy):
    engine = HFEngine(tiny_policy)
    prompt = _prompts(engine, 1)
    engine.seed(0)
    free = engine.generate(prompt, SamplingParams(max_new_tokens=12, temperature=0.0))[0]
    # Stop on the text of the 3rd generated token: generation must end there.
    stop = tiny_policy.tokenizer.decode(free.ids[2:3])
    if stop.strip():
        cut = engine.generate(prompt, SamplingParams(max_new_tokens=12, temperature=0.0, stop=(stop,)))[0]
        assert len(cut.ids) <= 3 and not cut.truncated


def test_prompt_is_left_truncated(tiny_policy):
    engine = HFEngine(tiny_policy, max_prompt_tokens=16)
    ids = engine.encode_chat([{"role": "user", "content": "long " * 100}], response_prefix="<action>")
    assert len(ids) == 16
    assert tiny_policy.tokenizer.decode(ids).endswith("<action>")
