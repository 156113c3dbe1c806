"""A run folder works from any directory (issue 27, items 1 and 28): ``roleagent export``
and ``roleagent eval --run`` of a warm-started run trained elsewhere, moved and read from
another working directory; evaluation writes to its own folder, never into the run's
records; ``--run`` without a checkpoint is an error; ``--split`` wins over ``eval.splits``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from roleagent import cli
from tests.run_helpers import TINY

SFT = ["sft.enabled=true", "sft.expert_tasks=3", "sft.epochs=1", "sft.lr=1e-2", "eval.max_tasks=2"]


def _sets(items) -> list[str]:
    return [a for item in items for a in ("--set", item)]


@pytest.fixture(scope="module")
def moved_run(tmp_path_factory):
    """A warm-started run trained in one directory with a relative ``run_dir``, then moved."""
    root = tmp_path_factory.mktemp("carry")
    (root / "trained_here").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root / "trained_here")
        argv = ["train", *_sets([*TINY, *SFT, "run_dir=runs/warm", "iterations=1"])]
        assert cli.main(argv) == 0
    moved = root / "moved" / "warm"
    shutil.move(str(root / "trained_here" / "runs" / "warm"), str(moved))
    shutil.rmtree(root / "trained_here")
    return moved


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _actions(path: Path) -> list[list[str]]:
    return [[s["action"] for s in json.loads(line)["steps"]] for line in path.read_text().splitlines()]


def test_the_run_stores_paths_relative_to_its_folder(moved_run):
    recorded = yaml.safe_load((moved_run / "config.yaml").read_text())
    assert Path(recorded["run_dir"]).is_absolute()  # a record of where it was written, not used to read it
    state = torch.load(moved_run / "checkpoints" / "iter_000000" / "state.pt", weights_only=True)
    assert state["init_from"] == "sft/final"


def test_export_of_a_moved_run_from_another_directory(moved_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["export", str(moved_run), "--merge-lora", "--out", "merged"]) == 0
    info = json.loads((tmp_path / "merged" / "roleagent_export.json").read_text())
    assert Path(info["init_from"]) == moved_run / "sft" / "final"
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(tmp_path / "merged") is not None


def test_eval_of_a_run_reads_it_and_writes_to_its_own_folder(moved_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = _files(moved_run)
    assert cli.main(["eval", "--run", str(moved_run), "--label", "ckpt"]) == 0
    assert "ckpt eval" in capsys.readouterr().out
    after = _files(moved_run)
    assert {k: v for k, v in after.items() if not k.startswith("eval/")} == before  # the run's records untouched
    assert not any(tmp_path.iterdir())  # nothing in the working directory (no ./runs/...)
    # the trained checkpoint, not the base model: the same greedy episodes as the run's final evaluation
    assert _actions(moved_run / "eval" / "rollouts" / "eval_ckpt.jsonl") == _actions(
        moved_run / "rollouts" / "eval_after.jsonl"
    )
    assert cli.main(["eval", "--run", str(moved_run), "--label", "again", "--out", "elsewhere"]) == 0
    assert (tmp_path / "elsewhere" / "rollouts" / "eval_again.jsonl").is_file()
    assert _files(moved_run).keys() == after.keys()


def test_eval_of_a_run_without_a_checkpoint_is_an_error(moved_run, tmp_path, monkeypatch, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(moved_run / "config.yaml", bare / "config.yaml")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    code = cli.main(["eval", "--run", str(bare)])
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1 and "holds no checkpoint" in err, err
    assert not any((tmp_path / "cwd").iterdir()) and sorted(p.name for p in bare.iterdir()) == ["config.yaml"]


def test_eval_split_wins_over_the_recipes_eval_splits(tmp_path, capsys):
    argv = ["eval", *_sets([*TINY, "eval.splits=[eval, train]", "eval.max_tasks=1"]), "--split", "train"]
    assert cli.main([*argv, "--label", "x", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "x train" in out and "x eval" not in out, out


def test_adapter_export_of_a_warm_started_run_names_its_base_relatively(moved_run, tmp_path, monkeypatch):
    """Issue 27 item 9: the base under the adapters (the SFT weights) is written to DIR/base
    in the precision asked for and named ``base``; the card names the SFT warm start."""
    from safetensors.torch import load_file

    from roleagent.models.loading import policy_from_config
    from roleagent.run_config import load_run_config

    monkeypatch.chdir(tmp_path)
    assert cli.main(["export", str(moved_run), "--dtype", "bf16", "--out", "adapters"]) == 0
    out = tmp_path / "adapters"
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "base"
    card = (out / "README.md").read_text()
    assert "`tiny`, initialised from `sft/final` (its SFT warm start)" in card and str(tmp_path) not in card
    assert "| after SFT | eval |" in card and "| the starting weights |" in card and "SFT warm start |" in card
    cfg = load_run_config(moved_run, check=False)
    sft = policy_from_config(cfg.model, seed=cfg.seed, init_from=str(moved_run / "sft" / "final"), lora=False)
    expected = {k: v.to(torch.bfloat16) for k, v in sft.model.state_dict().items()}
    written = load_file(out / "base" / "model.safetensors")
    assert written and all(torch.equal(v, expected[k]) for k, v in written.items())
