"""Checkpoints others can load: save_pretrained full checkpoints, `roleagent export`
(merged LoRA, PEFT adapters with a resolvable base), loaded with plain transformers/peft."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from roleagent.cli import main
from roleagent.trainer import Trainer
from roleagent.trainer.checkpoint import CheckpointError
from tests.run_helpers import config

EXTRA = ["eval.at_start=false", "eval.max_tasks=1"]
IDS = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])


def _trained(run_dir: Path, extra=()) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one iteration; the trained policy's logits on ``IDS``, and a fresh policy's."""
    trainer = Trainer(config(run_dir, 1, [*EXTRA, *extra]), quiet=True)
    try:
        fresh = _logits(trainer.policy.model)
        trainer.run()
        trained = _logits(trainer.policy.model)
    finally:
        trainer.close()
    assert (trained - fresh).abs().max() > 1e-4  # training moved the weights
    return trained, fresh


def _logits(model) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=IDS).logits.float()


def test_full_finetuning_checkpoint_and_export_load_with_plain_transformers(tmp_path):
    run = tmp_path / "run"
    trained, _ = _trained(run, ["model.lora_rank=0"])
    checkpoint = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    assert (checkpoint / "config.json").is_file() and (checkpoint / "tokenizer.json").is_file()
    torch.testing.assert_close(_logits(AutoModelForCausalLM.from_pretrained(checkpoint)), trained, atol=1e-5, rtol=0)

    assert main(["export", str(run), "--out", str(tmp_path / "out")]) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    torch.testing.assert_close(_logits(model), trained, atol=1e-5, rtol=0)
    assert AutoTokenizer.from_pretrained(tmp_path / "out").encode("open door")
    info = json.loads((tmp_path / "out" / "roleagent_export.json").read_text())
    assert info["checkpoint"] == checkpoint.name and info["format"] == "transformers"


def test_lora_export_merged_and_as_peft_adapters(tmp_path, monkeypatch):
    run = tmp_path / "run"
    trained, fresh = _trained(run)
    assert main(["export", str(run), "--merge-lora", "--out", str(tmp_path / "merged")]) == 0
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    torch.testing.assert_close(_logits(merged), trained, atol=1e-5, rtol=0)

    from peft import AutoPeftModelForCausalLM, PeftModel

    assert main(["export", str(run), "--checkpoint", "iter_000000", "--out", str(tmp_path / "adapter")]) == 0
    adapter_config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == "base"  # tiny: no name rebuilds its random base
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "adapter" / "base")
    torch.testing.assert_close(_logits(base), fresh, atol=1e-5, rtol=0)
    peft_model = PeftModel.from_pretrained(base, tmp_path / "adapter")
    torch.testing.assert_close(_logits(peft_model), trained, atol=1e-5, rtol=0)
    monkeypatch.chdir(tmp_path / "adapter")  # the relative name resolves from inside the folder
    torch.testing.assert_close(_logits(AutoPeftModelForCausalLM.from_pretrained(".")), trained, atol=1e-5, rtol=0)


def test_export_refuses_what_it_cannot_use(tmp_path, capsys):
    with pytest.raises(CheckpointError, match="config.yaml is missing"):
        from roleagent.export import export_run

        export_run(tmp_path, tmp_path / "out")
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "out")]) == 3  # a run directory error
    assert "config.yaml is missing" in capsys.readouterr().err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("keep me")
    with pytest.raises(FileExistsError):
        export_run(tmp_path, busy)
    assert (busy / "x").read_text() == "keep me"


def test_adapter_base_name_resolves_from_anywhere(tmp_path, monkeypatch):
    from roleagent.config import ModelConfig
    from roleagent.export import _name_base

    (tmp_path / "models" / "mine").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    for spec, expected in [
        ("models/mine", str(tmp_path / "models" / "mine")),  # a relative folder: made absolute
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),  # an HF id: as it is
    ]:
        (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "x", "r": 4}))
        _name_base(tmp_path, ModelConfig(name=spec), 0, "")
        written = json.loads((tmp_path / "adapter_config.json").read_text())
        assert written == {"base_model_name_or_path": expected, "r": 4}
