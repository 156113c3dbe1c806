"""SFT runs a user can trust (issue 27, items 18 and 23): one ``roleagent sft`` per output
folder, a torn ``metrics.jsonl`` line does not block the resume, an over-long first
prompt keeps its system message (or says it lost it), and a lone surrogate in SFT data is
made valid text instead of a tokenizer ``TypeError``."""

from __future__ import annotations

import json
import logging

import pytest

from roleagent import cli
from roleagent.engine.hf import HFEngine
from roleagent.sft import train as sft_train
from roleagent.sft.data import ChatExample, encode_example, write_examples
from roleagent.trainer.run_lock import RunDirLock
from tests.test_sft import (  # noqa: F401
    CFG,
    PREFIX,
    Killed,
    conversation,
    engine,
    examples_for,
    kill_in_epoch,
    reply,
    sft_policy,
    tiny,
)

SYSTEM = {"role": "system", "content": "You are an agent. Answer with one action."}


def test_a_lone_surrogate_in_sft_data_is_made_valid_text(engine):  # noqa: F811
    def example(bad: str) -> ChatExample:
        messages = [SYSTEM, {"role": "user", "content": f"You see a desk{bad}."}, reply(f"go to desk{bad} 1")]
        return ChatExample(messages, PREFIX)

    encoded = encode_example(engine, example("\ud800"))  # as json.loads('"\\ud800"') gives it
    assert encoded.ids == encode_example(engine, example("\ufffd")).ids
    assert engine.encode_chat(example("\udfff").messages[:2]) == engine.encode_chat(example("\ufffd").messages[:2])


def test_two_sft_runs_cannot_share_an_output_folder(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    write_examples(data, [conversation()])
    out = tmp_path / "out"
    out.mkdir()
    with RunDirLock(out):  # another `roleagent sft --out out` is running
        code = cli.main(["sft", "--data", str(data), "--out", str(out), "--set", "model.name=tiny"])
    err = capsys.readouterr().err
    assert code == 3 and err.startswith("run directory error: ") and err.count("\n") == 1, err
    assert "in use by another" in err
    assert not (out / "metrics.jsonl").exists()


def test_a_torn_metrics_line_does_not_block_the_resume(tmp_path, engine, monkeypatch):  # noqa: F811
    data = examples_for(engine, 4)
    kill_in_epoch(monkeypatch, 2)
    with pytest.raises(Killed):
        sft_train.train_sft(sft_policy(), data, tmp_path, cfg=CFG, seed=0)
    monkeypatch.undo()
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"epoch": 2, "loss": 0.3')  # the kill tore the write
    said = []
    sft_train.train_sft(sft_policy(), data, tmp_path, cfg=CFG, seed=0, log=said.append)
    assert [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()] == [0, 1, 2]
    assert any("skipped 1 unreadable line" in s for s in said), said


def test_an_over_long_first_prompt_keeps_its_system_message(tiny, caplog):  # noqa: F811
    full = HFEngine(tiny, max_prompt_tokens=100_000)
    old, new = {"role": "user", "content": "old turn " * 60}, {"role": "user", "content": "You see a desk."}
    kept = full.encode_chat([SYSTEM, new], response_prefix=PREFIX)
    short = HFEngine(tiny, max_prompt_tokens=len(kept) + 5)  # room for these two, not for the old turn
    example = ChatExample([SYSTEM, old, new, reply("go to desk 1")], PREFIX, {"n": 7})
    with caplog.at_level(logging.WARNING):
        encoded = encode_example(short, example)
    assert encoded.prompts[0] == kept  # starts with the system prompt, not a cut old turn
    assert "its 1 oldest message(s) after the system prompt are left out" in caplog.text

    caplog.clear()
    tight = HFEngine(tiny, max_prompt_tokens=len(kept) - 5)  # not even these two fit
    with caplog.at_level(logging.WARNING):
        encoded = encode_example(tight, example)
    assert len(encoded.prompts[0]) == len(kept) - 5
    assert "cut from the left, its system prompt is lost" in caplog.text
