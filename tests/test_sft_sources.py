"""SFT data besides roleagent's JSONL (issue 27, item 10): AgentGym's AgentTraj records
(``conversations`` of ``from``/``value``/``loss``) in JSON or JSONL files, and Hugging Face
``datasets`` datasets (a ``save_to_disk`` folder, a DatasetDict's train split, a parquet
file), read from ``roleagent sft --data``, ``sft.data`` and ``agent_r.general_data``;
without the ``datasets`` package a one-line error names the extra to install."""

from __future__ import annotations

import json
import sys

import pytest

from roleagent.cli import main
from roleagent.config import ConfigError, load_config
from roleagent.engine.hf import HFEngine
from roleagent.models.loading import load_policy
from roleagent.sft.data import SFTDataError, encode_example, write_examples
from roleagent.sft.sources import read_examples
from tests.test_sft import conversation

INSTRUCTION = "Interact with a household to solve a task. Answer with Thought: and Action: lines."
TRAJ = {
    "item_id": "alfworld_7",
    "conversations": [
        {"from": "human", "value": INSTRUCTION, "loss": None},
        {"from": "gpt", "value": "OK", "loss": False},
        {"from": "human", "value": "You are in a room. Your task is to open the door.", "loss": None},
        {"from": "gpt", "value": "Thought: the door is ahead.\nAction: go to door 1", "loss": True},
        {"from": "human", "value": "You arrive at door 1.", "loss": None},
        {"from": "gpt", "value": "Thought: open it.\nAction: open door 1"},  # no loss key: a gpt turn trains
        {"from": "human", "value": "The door opens. You win."},  # after the last gpt turn: dropped
    ],
}
SETS = ["--set", "model.name=tiny", "--set", "model.device=cpu", "--set", "threads=1", "--set", "sft.epochs=1"]


@pytest.fixture(scope="module")
def engine():
    return HFEngine(load_policy("tiny", device="cpu", lora_rank=0, seed=0), max_prompt_tokens=1024)


def test_an_agenttraj_record_trains_its_gpt_turns(tmp_path, engine):
    (tmp_path / "traj.json").write_text(json.dumps([TRAJ]))
    [example] = read_examples(tmp_path / "traj.json")
    assert [m["role"] for m in example.messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert [m["loss"] for m in example.messages if m["role"] == "assistant"] == [False, True, True]
    assert example.response_prefix == "" and not example.eos
    assert example.meta == {"item_id": "alfworld_7", "source": "agenttraj"}
    tok = engine.tokenizer
    trained = [TRAJ["conversations"][i]["value"] for i in (3, 5)]
    for eos in (False, True):  # eos: each trained turn also learns the end-of-turn token
        [example] = read_examples(tmp_path / "traj.json", eos=eos)
        encoded = encode_example(engine, example)
        lengths = [len(tok(text, add_special_tokens=False)["input_ids"]) + eos for text in trained]
        assert encoded.loss_tokens == sum(lengths)
        assert (
            encoded.ids[-lengths[-1] :][: lengths[-1] - eos] == tok(trained[1], add_special_tokens=False)["input_ids"]
        )
        assert encoded.ids[-1] == tok.eos_token_id if eos else True


BAD = [
    (
        {"conversations": [{"from": "human", "value": "x", "loss": True}, {"from": "gpt", "value": "y"}]},
        "only allowed on gpt",
    ),
    ({"conversations": [{"from": "robot", "value": "x"}, {"from": "gpt", "value": "y"}]}, "from 'robot'"),
    ({"conversations": [{"from": "human", "value": "x"}]}, "no gpt turn"),
    ({"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y", "loss": 1}]}, "loss must be"),
    ({"conversations": [{"from": "gpt", "value": "y"}]}, "first message is an assistant turn"),
    (
        {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y", "loss": False}]},
        "no assistant",
    ),
    ({"dialogue": []}, "neither a roleagent example"),
]


@pytest.mark.parametrize("record,problem", BAD)
def test_bad_records_name_their_file_and_place(tmp_path, record, problem):
    lines = [json.dumps(conversation().to_json()), json.dumps(TRAJ), json.dumps(record)]  # both formats in one file
    (tmp_path / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SFTDataError, match=rf"mixed.jsonl:3: .*{problem}"):
        read_examples(tmp_path / "mixed.jsonl")
    (tmp_path / "list.json").write_text(json.dumps([TRAJ, record]))
    with pytest.raises(SFTDataError, match=rf"list.json\[1\]: .*{problem}"):
        read_examples(tmp_path / "list.json")


def test_a_json_file_holds_a_list(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps(TRAJ))
    with pytest.raises(SFTDataError, match="holds a list of records"):
        read_examples(tmp_path / "one.json")


def test_without_the_datasets_package_one_line_names_the_extra(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "saved"
    folder.mkdir()
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets: ImportError
    with pytest.raises(SFTDataError, match=r"needs the datasets package: pip install 'roleagent\[datasets\]'"):
        read_examples(folder)
    assert main(["sft", "--data", str(folder), "--out", str(tmp_path / "out"), *SETS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("data error: ") and "roleagent[datasets]" in err, err
    assert not (tmp_path / "out").exists()


def test_datasets_folders_and_files_read_as_the_jsonl(tmp_path):
    datasets = pytest.importorskip("datasets")
    ours = [conversation(), conversation((False, True, False))]
    write_examples(tmp_path / "ours.jsonl", ours)
    records = [json.loads(line) for line in (tmp_path / "ours.jsonl").read_text().splitlines()]
    expected = [e.to_json() for e in ours]
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "ours"))  # absent keys become nulls
    assert [e.to_json() for e in read_examples(tmp_path / "ours")] == expected
    trajs = datasets.Dataset.from_list([TRAJ, {**TRAJ, "item_id": "alfworld_8"}])
    datasets.DatasetDict({"train": trajs, "test": trajs.select([0])}).save_to_disk(str(tmp_path / "dict"))
    from_dict = read_examples(tmp_path / "dict")  # the train split
    assert [e.meta["item_id"] for e in from_dict] == ["alfworld_7", "alfworld_8"]
    (tmp_path / "traj.json").write_text(json.dumps([TRAJ]))
    assert from_dict[0].to_json() == read_examples(tmp_path / "traj.json")[0].to_json()
    trajs.to_parquet(str(tmp_path / "traj.parquet"))
    assert [e.to_json() for e in read_examples(tmp_path / "traj.parquet")] == [e.to_json() for e in from_dict]
    datasets.DatasetDict({"a": trajs, "b": trajs}).save_to_disk(str(tmp_path / "two"))
    with pytest.raises(SFTDataError, match="without a train split"):
        read_examples(tmp_path / "two")


def test_cli_sft_and_the_recipe_keys_take_agenttraj_data(tmp_path):
    (tmp_path / "traj.json").write_text(json.dumps([TRAJ, {**TRAJ, "item_id": "alfworld_8"}]))
    assert main(["sft", "--data", str(tmp_path / "traj.json"), "--out", str(tmp_path / "out"), *SETS]) == 0
    assert (tmp_path / "out" / "final" / "done.json").is_file()
    (tmp_path / "folder").mkdir()
    for key in ("sft.data", "agent_r.general_data"):  # a file or a datasets folder passes the checks
        for value in (tmp_path / "traj.json", tmp_path / "folder"):
            load_config(None, [f"{key}={value}"])
        with pytest.raises(ConfigError, match=key):
            load_config(None, [f"{key}={tmp_path / 'missing'}"])
