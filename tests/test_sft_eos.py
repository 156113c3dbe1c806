"""SFT targets end the way the policy's generations end: at the stop string in formats
that have one (encoded exactly as before), with the end-of-turn token (the tokenizer's EOS,
``<|im_end|>`` for the tiny ChatML model) in formats without one (``raw``), so that SFT
teaches the policy to stop (tiny model, scripted environment)."""

from __future__ import annotations

import types

import pytest
import torch
from test_sft_warm_start import check_prompt_identity

from roleagent.config import SFTConfig
from roleagent.engine.hf import HFEngine, SamplingParams
from roleagent.envs.workers import EnvPool
from roleagent.models.loading import load_policy
from roleagent.rollout import RolloutSettings
from roleagent.sft import train as sft_train
from roleagent.sft.data import (
    ChatExample,
    SFTDataError,
    check_example,
    encode_example,
    write_examples,
)
from roleagent.sft.expert import expert_examples, expert_trajectories
from roleagent.sft.sources import read_examples


@pytest.fixture(scope="module")
def engine():
    return HFEngine(load_policy("tiny", device="cpu", lora_rank=0, seed=0), max_prompt_tokens=4096)


def trained_spans(mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of every run of 1s in a loss mask."""
    spans, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_trained_spans_worked_example():
    assert trained_spans([0, 1, 1, 0, 0, 1, 0, 1]) == [(1, 3), (5, 6), (7, 8)]


def expert_chat(engine, action_format: str, context: str):
    settings = RolloutSettings(max_steps=8, action_format=action_format, context=context)
    with EnvPool("scripted", {}, slots=3, processes=False) as pool:
        trajectories = expert_trajectories(engine, pool, pool.meta.tasks("train")[:3], settings)
    check_prompt_identity(engine, trajectories, settings)  # SFT prompts == rollout prompts, token for token
    return expert_examples(trajectories)[0]


@pytest.mark.parametrize("context", ["window", "full"])
def test_raw_format_targets_end_with_the_end_of_turn_token(engine, context, tmp_path):
    examples = expert_chat(engine, "raw", context)
    eos = engine.tokenizer.eos_token_id
    assert engine.tokenizer.convert_ids_to_tokens([eos]) == ["<|im_end|>"]
    assert examples and all(e.eos for e in examples)
    write_examples(tmp_path / "raw.jsonl", examples)
    assert [e.eos for e in read_examples(tmp_path / "raw.jsonl")] == [True] * len(examples)
    for example in examples:
        encoded = encode_example(engine, example)
        replies = [m["content"] for m in example.messages if m["role"] == "assistant"]
        spans = trained_spans(encoded.loss_mask)
        assert len(spans) == len(replies) == len(encoded.prompts)
        for (start, end), text, prompt in zip(spans, replies, encoded.prompts):
            assert start == len(prompt)  # the target starts where the rollout's prompt ends
            assert encoded.ids[start:end] == engine.tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]


@pytest.mark.parametrize("action_format", ["think_action", "action"])
def test_stop_string_formats_encode_as_before(engine, action_format):
    """The target is the content's tokens, ending with ``</action>``'s last token; the
    template's end-of-turn token that follows in the context is not trained."""
    examples = expert_chat(engine, action_format, "full")
    tok = engine.tokenizer
    close = tok("</action>", add_special_tokens=False)["input_ids"][-1]
    assert examples and not any(e.eos for e in examples)
    assert all("eos" not in e.to_json() for e in examples)  # the JSONL lines are unchanged
    for example in examples:
        encoded = encode_example(engine, example)
        prefix = example.response_prefix
        replies = [m["content"][len(prefix) :] for m in example.messages if m["role"] == "assistant"]
        spans = trained_spans(encoded.loss_mask)
        assert len(spans) == len(replies)
        for (start, end), text in zip(spans, replies):
            assert encoded.ids[start:end] == tok(text, add_special_tokens=False)["input_ids"]
            assert encoded.ids[end - 1] == close
            assert tok.eos_token_id not in encoded.ids[start:end]


def test_eos_field_is_checked_and_needs_a_tokenizer_eos():
    base = {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "loss": True}]}
    assert check_example({**base, "eos": True}).eos and not check_example(base).eos
    with pytest.raises(SFTDataError, match="eos must be true or false"):
        check_example({**base, "eos": "yes"})
    no_eos = types.SimpleNamespace(tokenizer=types.SimpleNamespace(eos_token_id=None))
    with pytest.raises(SFTDataError, match="needs a tokenizer with an EOS token"):
        encode_example(no_eos, check_example({**base, "eos": True}))


def test_sft_on_raw_targets_teaches_the_policy_to_stop(engine):
    """The same short raw-format example trained with and without ``eos``: greedy decoding
    of its prompt then ends with EOS before ``max_new_tokens`` only with it."""
    messages = [
        {"role": "user", "content": "Call the tool."},
        {"role": "assistant", "content": '[ls(a="x")]', "loss": True},
    ]
    cfg = SFTConfig(epochs=20, lr=2e-2, batch_examples=1, micro_batch_tokens=512)
    outcomes = {}
    for eos in (True, False):
        torch.manual_seed(0)
        policy = load_policy("tiny", device="cpu", lora_rank=0, seed=0)
        encoded = encode_example(engine, ChatExample(messages, "", {}, eos))
        optimizer = sft_train.sft_optimizer(policy, cfg, total_steps=0)
        for epoch in range(cfg.epochs):
            sft_train.sft_epoch(policy, optimizer, [encoded], cfg, 0, epoch)
        params = SamplingParams(max_new_tokens=24, temperature=0.0)
        outcomes[eos] = HFEngine(policy).generate([encoded.prompts[0]], params)[0]
    stopped, unstopped = outcomes[True], outcomes[False]
    assert stopped.ids[-1] == engine.tokenizer.eos_token_id
    assert not stopped.truncated and len(stopped.ids) < 24
    assert unstopped.truncated and engine.tokenizer.eos_token_id not in unstopped.ids
