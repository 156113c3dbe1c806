"""An export a user can trust and carry (issue 27, items 9 and 24): ``roleagent export``
run from another directory writes adapters whose base is named relative to the folder, in
the precision ``--dtype`` asks for, with a model card that states base, method, recipe and
panel results; ``latest`` is the checkpoint training would resume from (a missing,
garbage or dangling pointer, or a damaged newest checkpoint, is passed over with a
warning); an interrupted export leaves no half-written ``--out`` and a retry succeeds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from roleagent.cli import main
from roleagent.export import INFO, export_run, staging_dir
from roleagent.trainer import Trainer
from roleagent.trainer.checkpoint import find_checkpoint
from tests.run_helpers import config

IDS = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])


def _logits(model) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=IDS).logits.float()


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """A LoRA run of two iterations (``iter_000000``, ``iter_000001``), evaluated after the
    first (``iter1``) and at the end (``after``); and its final policy's logits."""
    run = tmp_path_factory.mktemp("export") / "run"
    trainer = Trainer(config(run, 2, ["eval.every=1", "eval.max_tasks=1", "eval.at_start=false"]), quiet=True)
    try:
        trainer.run()
        trained = _logits(trainer.policy.model)
    finally:
        trainer.close()
    return run, trained


def _dtypes(path: Path) -> set[str]:
    with safe_open(str(path), "pt") as f:
        return {f.get_slice(k).get_dtype() for k in f.keys()}


def test_adapter_export_is_relative_bf16_and_carries_its_card(two_checkpoints, tmp_path, monkeypatch):
    run, trained = two_checkpoints
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["export", str(run), "--out", "fp32"]) == 0
    assert main(["export", str(run), "--dtype", "bf16", "--out", "exports/bf16"]) == 0
    carried = tmp_path / "carried" / "agent"
    shutil.move(tmp_path / "elsewhere" / "exports" / "bf16", carried.parent.mkdir() or carried)
    shutil.rmtree(tmp_path / "elsewhere" / "exports")

    assert json.loads((carried / "adapter_config.json").read_text())["base_model_name_or_path"] == "base"
    for name in ("adapter_config.json", "README.md", "base/config.json", "tokenizer_config.json"):
        assert str(tmp_path) not in (carried / name).read_text(), name  # no machine path names the base
    assert _dtypes(carried / "base" / "model.safetensors") == {"BF16"} == _dtypes(carried / "adapter_model.safetensors")
    fp32_base = (tmp_path / "elsewhere" / "fp32" / "base" / "model.safetensors").stat().st_size
    assert (carried / "base" / "model.safetensors").stat().st_size < 0.55 * fp32_base
    info = json.loads((carried / INFO).read_text())
    assert (info["checkpoint"], info["dtype"], info["base"]) == ("iter_000001", "bf16", "base")

    card = (carried / "README.md").read_text()
    front = card.split("---")[1]
    assert "library_name: peft" in front and "base_model" not in front  # tiny: no hub id to name
    assert "bf16, checkpoint `iter_000001` (iteration 2 of 2; the run finished here)" in card
    assert "| base | `tiny`; the adapters name `base`: this folder's `base/`" in card
    assert "| method | algo role_agent; methods: wia |" in card and "env `lucky`, 2 iterations" in card
    rows = [line for line in card.splitlines() if line.startswith("| iter1 ") or line.startswith("| after ")]
    assert [r.split("|")[-2].strip() for r in rows] == ["", "these weights"], rows  # iter1: iter_000000

    from peft import AutoPeftModelForCausalLM, PeftModel
    from transformers import AutoModelForCausalLM

    fp32 = tmp_path / "elsewhere" / "fp32"  # from outside a folder: give its base
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(fp32 / "base"), fp32)
    torch.testing.assert_close(_logits(model), trained, atol=1e-5, rtol=0)
    monkeypatch.chdir(carried)  # from inside: the relative name resolves
    loaded = AutoPeftModelForCausalLM.from_pretrained(".")
    assert next(loaded.get_base_model().parameters()).dtype == torch.bfloat16
    error = (_logits(loaded) - trained).abs().max()
    assert error < 0.02 * trained.abs().max(), error  # bf16 rounding only (8-bit mantissa)


def test_latest_is_the_checkpoint_resume_would_use(two_checkpoints, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(two_checkpoints[0], run)
    pointer, newest = run / "checkpoints" / "latest", run / "checkpoints" / "iter_000001"
    cases = [
        ("missing", pointer.unlink, "latest is missing", "iter_000001"),
        (
            "dangling",
            lambda: pointer.write_text("iter_000007"),
            "names iter_000007, which does not exist",
            "iter_000001",
        ),
        ("garbage", lambda: pointer.write_bytes(b"\x00\xff garbage"), "does not name a checkpoint", "iter_000001"),
        ("damaged", lambda: (newest / "state.pt").write_bytes(b"torn"), "skipping damaged checkpoint", "iter_000000"),
    ]
    for name, damage, warning, expected in cases:  # cumulative: the last has a garbage pointer too
        damage()
        assert main(["export", str(run), "--merge-lora", "--out", str(tmp_path / name)]) == 0, name
        assert warning in capsys.readouterr().err, name
        info = json.loads((tmp_path / name / INFO).read_text())
        assert info["checkpoint"] == expected == find_checkpoint(run, lora=True, warn=lambda m: None).path.name
    assert main(["export", str(run), "--checkpoint", "iter_000001", "--out", str(tmp_path / "named")]) == 3
    last = capsys.readouterr().err.splitlines()[-1]  # after the phase line, one line
    assert last.startswith("run directory error: ") and "state.pt" in last  # a named one: no fallback
    assert not (tmp_path / "named").exists() and not staging_dir(tmp_path / "named").exists()


def test_an_interrupted_export_does_not_block_a_retry(two_checkpoints, tmp_path, monkeypatch, capsys):
    run, out = two_checkpoints[0], tmp_path / "out"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr("roleagent.export.model_card", interrupted)  # after the weights are written
        with pytest.raises(KeyboardInterrupt):
            export_run(run, out)
    assert not out.exists() and not staging_dir(out).exists()
    # what a killed export leaves (no cleanup ran): its staging folder, and an --out made empty beforehand
    staging_dir(out).mkdir()
    (staging_dir(out) / "adapter_model.safetensors").write_bytes(b"half")
    out.mkdir()
    assert main(["export", str(run), "--out", str(out)]) == 0
    assert json.loads((out / INFO).read_text())["checkpoint"] == "iter_000001"
    assert not staging_dir(out).exists() and (out / "adapter_model.safetensors").stat().st_size > 4
    capsys.readouterr()
    half = tmp_path / "half"  # a folder something else half-wrote is never overwritten
    half.mkdir()
    (half / "config.json").write_text("{}")
    assert main(["export", str(run), "--out", str(half)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("config error: ") and "not a finished export" in err
    assert [p.name for p in half.iterdir()] == ["config.json"]
