"""``roleagent export RUN --out DIR``: a run's checkpoint as a folder other tools load.

- full fine-tuning (``model.lora_rank: 0``), or LoRA with ``--merge-lora``: ``config.json``,
  ``model.safetensors`` and the tokenizer files, written by ``save_pretrained``; plain
  ``transformers.AutoModelForCausalLM.from_pretrained(DIR)`` and vLLM (``vllm serve DIR``)
  load it;
- LoRA without merging: the adapters in PEFT's format (``adapter_config.json``,
  ``adapter_model.safetensors``) and the tokenizer, for ``PeftModel.from_pretrained`` or
  vLLM's ``--enable-lora --lora-modules``. ``base_model_name_or_path`` names a base that
  resolves: the HF id or folder of ``model.name``; for the embedded model, its converted
  safetensors folder in this machine's cache (``~/.cache/roleagent/models/...``; elsewhere,
  run ``roleagent`` once there or copy that folder and edit the name); for a base no name
  can rebuild (``model.name: tiny``, or ``model.init_from``/an SFT warm start), the base
  is written under ``DIR/base`` and named by its absolute path.

The checkpoint is validated against its manifest first (``roleagent.trainer.checkpoint``),
and ``roleagent_export.json`` records the run, checkpoint and iteration it came from.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from roleagent.config import TrainConfig
from roleagent.models.loading import embedded_model_dir, policy_from_config
from roleagent.progress import bar, phase
from roleagent.run_config import load_run_config, resolve_recorded
from roleagent.trainer.checkpoint import CheckpointError, apply_weights, pointer_name, read_checkpoint

INFO = "roleagent_export.json"


def find_run_checkpoint(run_dir: Path, checkpoint: str = "latest") -> Path:
    """``latest`` (the run's ``checkpoints/latest``), a folder name in ``checkpoints/``, or a path."""
    root = run_dir / "checkpoints"
    if checkpoint == "latest":
        pointer = root / "latest"
        if not pointer.is_file():
            raise CheckpointError(f"{run_dir}: no checkpoints/latest (has this run saved a checkpoint?)")
        if not (checkpoint := pointer_name(pointer)):
            raise CheckpointError(f"{pointer} does not name a checkpoint (damaged): name one with --checkpoint")
    path = root / checkpoint if (root / checkpoint).is_dir() else Path(checkpoint)
    if not path.is_dir():
        names = sorted(p.name for p in root.glob("iter_*")) if root.is_dir() else []
        raise CheckpointError(f"no checkpoint {checkpoint!r} in {root}; there are: {', '.join(names) or 'none'}")
    return path


def run_config(run_dir: Path) -> TrainConfig:
    """The config the run recorded (``run_dir/config.yaml``), ``run_dir`` its run folder
    (:func:`roleagent.run_config.load_run_config`, unchecked: an export needs no environment)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: not a roleagent run directory")
    return load_run_config(run_dir, check=False)


def export_run(
    run_dir: str | Path, out: str | Path, *, checkpoint: str = "latest", merge_lora: bool = False, quiet: bool = True
) -> Path:
    """Write ``run_dir``'s checkpoint to ``out`` (module docstring); returns ``out``.
    Unless ``quiet``: a phase line and a bar over the stages (``roleagent.progress``)."""
    run_dir, out = Path(run_dir), Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; choose another --out")
    cfg = run_config(run_dir)
    lora = cfg.model.lora_rank > 0
    path = find_run_checkpoint(run_dir, checkpoint)
    kind = "merged" if lora and merge_lora else "adapters" if lora else "full weights"
    phase(f"export: {path.name} of {run_dir} ({cfg.model.name}, {kind}) to {out}", quiet=quiet)
    with bar(4, "export", "stage", quiet=quiet) as progress:
        progress.set_postfix_str("checking the checkpoint")
        loaded = read_checkpoint(path, lora=lora)
        init_from = resolve_recorded(loaded.state.get("init_from", ""), run_dir)  # stored relative to the run
        model_cfg = dataclasses.replace(cfg.model, device="cpu")
        progress.update(1)
        progress.set_postfix_str("loading the base model")
        policy = policy_from_config(model_cfg, seed=cfg.seed, init_from=init_from)
        progress.update(1)
        progress.set_postfix_str("applying the checkpoint")
        apply_weights(loaded, policy)
        progress.update(1)
        progress.set_postfix_str("writing")
        out.mkdir(parents=True, exist_ok=True)
        if lora and merge_lora:
            policy.model.merge_and_unload().save_pretrained(out)
        elif lora:
            policy.model.save_pretrained(out)
            _name_base(out, model_cfg, cfg.seed, init_from)
        else:
            policy.model.save_pretrained(out)
        policy.tokenizer.save_pretrained(out)
        progress.update(1)
    info = {
        "run_dir": str(run_dir.resolve()),
        "checkpoint": loaded.path.name,
        "iteration": loaded.state["iteration"],
        "model": cfg.model.name,
        "init_from": init_from,
        "format": "peft_adapter" if lora and not merge_lora else "transformers",
    }
    (out / INFO).write_text(json.dumps(info, indent=1))
    return out


def _name_base(out: Path, model_cfg, seed: int, init_from: str) -> None:
    """Point the adapters' ``base_model_name_or_path`` at a base that loads (the weights
    under the adapters: the same spec, seed and ``init_from``, no adapters)."""
    spec = model_cfg.name
    if spec == "tiny" or init_from:
        base = out / "base"
        policy_from_config(model_cfg, seed=seed, init_from=init_from, lora=False).model.save_pretrained(base)
        name = str(base.resolve())
    elif spec == "embedded":
        name = str(embedded_model_dir().resolve())
    else:  # an HF id, or a local folder (made absolute, so the name resolves from anywhere)
        name = str(Path(spec).resolve()) if Path(spec).exists() else spec
    config_path = out / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = name
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
