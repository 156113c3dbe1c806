"""Supervised warm start: the chat-example format, its encoding and loss mask, the SFT
trainer (loss, resume, checkpoint for model.init_from) and the command line."""

from __future__ import annotations

import dataclasses
import doctest
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from roleagent.config import ConfigError, SFTConfig, load_config
from roleagent.engine.hf import HFEngine, SamplingParams
from roleagent.models.loading import load_init_model, load_policy
from roleagent.rollout import actor
from roleagent.sft import train as sft_train
from roleagent.sft.data import (
    ChatExample,
    EncodedExample,
    SFTDataError,
    encode_example,
    write_examples,
)
from roleagent.sft.sources import read_examples

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "<action>"


def reply(action: str, loss: bool = True) -> dict:
    return {"role": "assistant", "content": PREFIX + actor.completion(action, "action"), "loss": loss}


def conversation(flags=(True, False, True)) -> ChatExample:
    messages = [{"role": "system", "content": actor.SYSTEM_PROMPT}, {"role": "user", "content": "You see a desk."}]
    for i, (action, flag) in enumerate(zip(["go to desk 1", "take key 1", "open door 1"], flags)):
        if i:
            messages.append({"role": "user", "content": f"Observation {i}: nothing happens."})
        messages.append(reply(action, flag))
    return ChatExample(messages, PREFIX, {"n": 1})


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_policy("tiny", device="cpu", lora_rank=0, seed=0)


@pytest.fixture(scope="module")
def engine(tiny):
    return HFEngine(tiny, max_prompt_tokens=1024)


def test_encoding_is_the_rollout_chain_and_masks_flagged_turns_only(engine):
    example = conversation((True, False, True))
    encoded = encode_example(engine, example)
    tok = engine.tokenizer
    targets = [
        tok(actor.completion(a, "action"), add_special_tokens=False)["input_ids"]
        for a in ["go to desk 1", "take key 1", "open door 1"]
    ]
    first = engine.encode_chat(example.messages[:2], response_prefix=PREFIX)
    second = engine.extend_chat(first, targets[0], [example.messages[3]], response_prefix=PREFIX)
    third = engine.extend_chat(second, targets[1], [example.messages[5]], response_prefix=PREFIX)
    assert encoded.prompts == [first, second, third]
    assert encoded.ids == third + targets[2]
    expected = [0] * len(encoded.ids)
    for start, target in ((len(first), targets[0]), (len(third), targets[2])):  # turn 2 is context only
        expected[start : start + len(target)] = [1] * len(target)
    assert encoded.loss_mask == expected
    assert encoded.loss_tokens == len(targets[0]) + len(targets[2])


def test_loss_counts_only_flagged_assistant_tokens(tiny, engine):
    """The SFT loss equals a hand-made token mean over the flagged turns' targets, and the
    gradient does not see the unflagged turn's targets (flipping its flag changes it)."""
    flagged = encode_example(engine, conversation((True, False, True)))
    ids = torch.tensor([flagged.ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(tiny.model(input_ids=ids).logits[0, :-1].float(), -1)  # (L-1, V)
    per_token = logprobs.gather(-1, ids[0, 1:, None]).squeeze(-1)  # position t predicts token t+1
    mask = torch.tensor(flagged.loss_mask[1:], dtype=torch.float)
    by_hand = float(-(per_token * mask).sum() / mask.sum())
    tiny.model.zero_grad()
    loss, n = sft_train.sft_step_loss(tiny, [flagged], micro_batch_tokens=4096)
    assert n == flagged.loss_tokens and loss == pytest.approx(by_hand, rel=1e-5)
    grad_flagged = tiny.model.model.embed_tokens.weight.grad.clone()
    tiny.model.zero_grad()
    every = encode_example(engine, conversation((True, True, True)))
    sft_train.sft_step_loss(tiny, [every], micro_batch_tokens=4096)
    assert not torch.allclose(grad_flagged, tiny.model.model.embed_tokens.weight.grad)
    tiny.model.zero_grad()


def test_gradient_checkpointing_gives_the_same_gradients_in_every_training_copy(engine):
    """``model.gradient_checkpointing`` reaches every copy ``policy_from_config`` makes (the
    trainer's policy, a warm start's SFT copy, a separate critic): activations are recomputed
    in backward and the SFT step's LoRA gradients are those without it."""
    from roleagent.config import ModelConfig
    from roleagent.models.loading import policy_from_config

    example = encode_example(engine, conversation())
    grads = {}
    for checkpointing in (False, True):
        cfg = ModelConfig(name="tiny", lora_rank=4, gradient_checkpointing=checkpointing)
        policy = policy_from_config(cfg, seed=0)
        model = policy.model  # transformers 5.24 renamed the flag; older ones have the first name only
        flag = (
            "is_activation_checkpointing"
            if hasattr(model, "is_activation_checkpointing")
            else "is_gradient_checkpointing"
        )
        assert getattr(model, flag) is checkpointing
        torch.manual_seed(1)
        for name, weight in policy.model.named_parameters():
            if "lora_B" in name:  # nonzero, so the lora_A weights get gradients too
                torch.nn.init.normal_(weight, std=0.1)
        policy.model.train()
        sft_train.sft_step_loss(policy, [example], micro_batch_tokens=4096)
        grads[checkpointing] = {n: w.grad for n, w in policy.model.named_parameters() if w.requires_grad}
    assert grads[True].keys() == grads[False].keys() and len(grads[True]) > 0
    for name, grad in grads[False].items():
        assert grad is not None and grad.abs().sum() > 0, name
        torch.testing.assert_close(grads[True][name], grad, rtol=1e-5, atol=1e-7)


def test_token_mean_worked_example_is_independent_of_micro_batching(monkeypatch):
    """The module docstring's example: log-probs (-1, -2, -3) and (-6) give L = 3."""
    examples = [EncodedExample([0, 1, 2, 3], [0, 1, 1, 1], []), EncodedExample([0, 6], [0, 1], [])]
    leaf = torch.zeros((), requires_grad=True)

    def fake(model, input_ids, attention, positions, targets, keep, **_):
        return -targets.float() + leaf, None  # the log-prob of token id k is -k

    monkeypatch.setattr(sft_train, "token_logprobs", fake)
    policy = type(
        "P", (), {"tokenizer": type("T", (), {"pad_token_id": 0})(), "device": torch.device("cpu"), "model": None}
    )()
    for budget in (4096, 4):  # one micro-batch, or one per example
        assert sft_train.sft_step_loss(policy, examples, budget) == (pytest.approx(3.0), 4)


BAD = [
    ("not json", "not valid JSON"),
    (json.dumps({"messages": []}), "non-empty list"),
    (
        json.dumps({"messages": [{"role": "user", "content": "u", "loss": True}, reply("a")]}),
        "only allowed on assistant",
    ),
    (
        json.dumps(
            {
                "messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "loss": True}],
                "response_prefix": PREFIX,
            }
        ),
        "must start with response_prefix",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": "u"}, reply("a", False)], "response_prefix": PREFIX}),
        "no assistant message has loss",
    ),
    (
        json.dumps(
            {
                "messages": [{"role": "user", "content": "u"}, reply("a"), {"role": "user", "content": "v"}],
                "response_prefix": PREFIX,
            }
        ),
        "last message",
    ),
    (
        json.dumps({"messages": [{"role": "robot", "content": "u"}, reply("a")], "response_prefix": PREFIX}),
        "role 'robot'",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": "u"}, reply("a")], "response_prefix": PREFIX, "x": 1}),
        "unknown keys",
    ),
]


@pytest.mark.parametrize("line,problem", BAD)
def test_bad_jsonl_names_file_and_line_and_loses_nothing(tmp_path, line, problem):
    path = tmp_path / "data.jsonl"
    good = json.dumps(conversation().to_json())
    text = good + "\n\n" + line + "\n" + good + "\n"
    path.write_text(text)
    with pytest.raises(SFTDataError, match=rf"data.jsonl:3: .*{problem}"):
        read_examples(path)
    assert path.read_text() == text


def test_examples_round_trip_through_jsonl(tmp_path):
    examples = [conversation(), conversation((False, False, True))]
    write_examples(tmp_path / "d.jsonl", examples)
    assert [e.to_json() for e in read_examples(tmp_path / "d.jsonl")] == [e.to_json() for e in examples]
    with pytest.raises(SFTDataError, match="no examples"):
        (tmp_path / "empty.jsonl").write_text("\n")
        read_examples(tmp_path / "empty.jsonl")


def examples_for(engine, n: int = 6) -> list[EncodedExample]:
    actions = [
        "go to desk 1",
        "take key 1 from desk 1",
        "open drawer 2",
        "look",
        "go to sofa 1",
        "put key 1 in drawer 2",
    ]
    out = []
    for i in range(n):
        messages = [
            {"role": "system", "content": actor.SYSTEM_PROMPT},
            {"role": "user", "content": f"Room {i}. Admissible actions: {', '.join(actions)}"},
            reply(actions[i % len(actions)]),
        ]
        out.append(encode_example(engine, ChatExample(messages, PREFIX)))
    return out


def sft_policy(lora_rank: int = 4):
    torch.manual_seed(0)
    return load_policy("tiny", device="cpu", lora_rank=lora_rank, seed=0)


CFG = SFTConfig(epochs=3, lr=3e-2, batch_examples=2, micro_batch_tokens=512)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_sft_run_lowers_the_loss_and_writes_metrics(tmp_path, engine, lora_rank):
    """All weights: the loss on the data measurably falls (LoRA on a random tiny model's
    attention barely moves it; the embedded model is measured in the report)."""
    data = examples_for(engine)
    policy = sft_policy(lora_rank)
    before = sft_train.evaluate_loss(policy, data)
    cfg = SFTConfig(epochs=3, lr=1e-2, batch_examples=2, micro_batch_tokens=512)
    final = sft_train.train_sft(policy, data, tmp_path, cfg=cfg, seed=0)
    if lora_rank:
        assert (final / "adapter_config.json").is_file() and (final / "done.json").is_file()
        assert json.loads((final / "roleagent_sft.json").read_text())["base"] == "tiny"
        # the last epoch's checkpoint is that epoch's policy for model.init_from, as final/ is
        epoch = load_init_model("tiny", tmp_path / "checkpoints" / "iter_000002" / "adapter", dtype=torch.float32)
        last = load_init_model("tiny", final, dtype=torch.float32)
        assert all(torch.equal(a, b) for a, b in zip(epoch.state_dict().values(), last.state_dict().values()))
        return
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [0, 1, 2]
    assert records[-1]["loss"] < 0.7 * records[0]["loss"]
    assert sft_train.evaluate_loss(policy, data) < 0.7 * before
    assert all(r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0 and r["steps"] == 3 for r in records)
    assert (final / "config.json").is_file() and (final / "done.json").is_file()


class Killed(BaseException):
    pass


def kill_in_epoch(monkeypatch, epoch: int) -> None:
    """SFT raises ``Killed`` when it reaches ``epoch`` (a kill -9 between checkpoints)."""
    real_epoch = sft_train.sft_epoch

    def dies(policy, optimizer, examples, cfg, seed, at, **kwargs):
        if at == epoch:
            raise Killed
        return real_epoch(policy, optimizer, examples, cfg, seed, at, **kwargs)

    monkeypatch.setattr(sft_train, "sft_epoch", dies)


def test_interrupted_sft_resumes_to_the_same_weights_and_is_not_redone(tmp_path, engine, monkeypatch):
    data = examples_for(engine)
    whole = sft_policy()
    sft_train.train_sft(whole, data, tmp_path / "whole", cfg=CFG, seed=0)

    kill_in_epoch(monkeypatch, 2)
    with pytest.raises(Killed):
        sft_train.train_sft(sft_policy(), data, tmp_path / "cut", cfg=CFG, seed=0)
    assert not sft_train.is_finished(tmp_path / "cut")
    monkeypatch.undo()  # the real sft_epoch again
    resumed = sft_policy()
    sft_train.train_sft(resumed, data, tmp_path / "cut", cfg=CFG, seed=0)
    for (name, a), b in zip(whole.model.named_parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert drop((tmp_path / "cut" / "metrics.jsonl").read_text()) == drop(
        (tmp_path / "whole" / "metrics.jsonl").read_text()
    )

    monkeypatch.setattr(sft_train, "sft_epoch", lambda *a: pytest.fail("a finished SFT run was redone"))
    assert sft_train.train_sft(sft_policy(), data, tmp_path / "cut", cfg=CFG, seed=0) == tmp_path / "cut" / "final"
    with pytest.raises(sft_train.CheckpointError, match="other SFT examples"):
        (tmp_path / "cut" / "final" / "done.json").unlink()
        sft_train.train_sft(sft_policy(), data[:3], tmp_path / "cut", cfg=CFG, seed=0)


def drop(text: str) -> list[dict]:
    """metrics.jsonl records without the wall-clock and memory fields."""
    skip = ("time", "per_s", "rss")
    return [{k: v for k, v in json.loads(x).items() if not any(s in k for s in skip)} for x in text.splitlines()]


def greedy(policy, prompts):
    return [g.ids for g in HFEngine(policy).generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.0))]


@pytest.mark.parametrize("lora_rank", [4, 0])
def test_init_from_round_trip_generates_what_the_sft_policy_generates(tmp_path, engine, lora_rank):
    data = examples_for(engine)
    policy = sft_policy(lora_rank)
    cfg = SFTConfig(epochs=2, lr=3e-2 if lora_rank else 1e-2, batch_examples=2)
    final = sft_train.train_sft(policy, data, tmp_path, cfg=cfg, seed=0)
    prompts = [e.prompts[0] for e in data[:3]]
    expected = greedy(policy, prompts)
    assert expected != greedy(sft_policy(0), prompts)  # the SFT changed what the policy writes
    loaded = load_policy("tiny", device="cpu", lora_rank=4, seed=0, init_from=final)  # fresh adapters on top
    assert loaded.lora and greedy(loaded, prompts) == expected
    with pytest.raises(ValueError, match="trained from 'tiny'"):
        load_policy("embedded", device="cpu", init_from=final)


def run_cli(*args, cwd):
    env = {
        "PYTHONPATH": str(ROOT),
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
        "TOKENIZERS_PARALLELISM": "false",
    }
    return subprocess.run(
        [sys.executable, "-m", "roleagent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_cli_sft_smoke_and_bad_data(tmp_path):
    data = tmp_path / "data.jsonl"
    write_examples(data, [conversation(), conversation((False, True, False))])
    common = ["--set", "model.name=tiny", "--set", "model.device=cpu", "--set", "threads=1", "--set", "sft.epochs=1"]
    done = run_cli("sft", "--data", str(data), "--out", str(tmp_path / "out"), *common, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "final" / "done.json").is_file() and "model.init_from=" in done.stdout
    data.write_text(data.read_text() + '{"messages": [{"role": "tool", "content": "x", "loss": true}]}\n')
    bad = run_cli("sft", "--data", str(data), "--out", str(tmp_path / "out2"), *common, cwd=tmp_path)
    assert bad.returncode == 2 and f"{data}:3:" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "out2").exists()
    neither = run_cli("sft", "--out", str(tmp_path / "out3"), *common, cwd=tmp_path)
    assert neither.returncode == 2 and "--data" in neither.stderr


def test_role_epochs_keep_the_roles_examples_out_of_the_later_passes(tmp_path, engine, monkeypatch):
    """``sft.role_epochs``: the first passes train on every example, the later ones on the
    policy's alone; a run resumed with another setting is refused (it trained on other data)."""
    assert doctest.testmod(sft_train).failed == 0  # epoch_plan's worked example
    data = examples_for(engine)
    roles = [i % 3 == 1 for i in range(len(data))]  # examples 1 and 4: a role's
    seen: list[list[int]] = []
    real_epoch = sft_train.sft_epoch

    def spy(policy, optimizer, examples, cfg, seed, epoch, **kwargs):
        seen.append([data.index(e) for e in examples])
        return real_epoch(policy, optimizer, examples, cfg, seed, epoch, **kwargs)

    monkeypatch.setattr(sft_train, "sft_epoch", spy)
    cfg = SFTConfig(epochs=3, role_epochs=1, lr=1e-2, batch_examples=2, micro_batch_tokens=512)
    sft_train.train_sft(sft_policy(), data, tmp_path, cfg=cfg, seed=0, roles=roles)
    assert [sorted(s) for s in seen] == [[0, 1, 2, 3, 4, 5], [0, 2, 3, 5], [0, 2, 3, 5]]
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["steps"] for r in records] == [3, 2, 2]

    (tmp_path / "final" / "done.json").unlink()
    with pytest.raises(sft_train.CheckpointError, match="other SFT examples"):
        sft_train.train_sft(sft_policy(), data, tmp_path, cfg=dataclasses.replace(cfg, role_epochs=2), roles=roles)
    with pytest.raises(ValueError, match="every example is a role's"):
        sft_train.train_sft(sft_policy(), data, tmp_path / "roles", cfg=cfg, roles=[True] * len(data))


def test_role_epochs_beyond_the_epochs_is_a_config_error():
    with pytest.raises(ConfigError, match="sft.role_epochs=3"):
        load_config("role_agent_alfworld", overrides=["sft.epochs=2", "sft.role_epochs=3"])
