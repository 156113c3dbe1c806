"""``roleagent export RUN --out DIR``: a run's checkpoint as a folder other tools load.

- full fine-tuning (``model.lora_rank: 0``), or LoRA with ``--merge-lora``: ``config.json``,
  ``model.safetensors`` and the tokenizer files, written by ``save_pretrained``; plain
  ``transformers.AutoModelForCausalLM.from_pretrained(DIR)`` and vLLM (``vllm serve DIR``)
  load it;
- LoRA without merging: the adapters in PEFT's format (``adapter_config.json``,
  ``adapter_model.safetensors``) and the tokenizer, for ``PeftModel.from_pretrained`` or
  vLLM's ``--enable-lora --lora-modules``. ``base_model_name_or_path`` names the base: the
  HF id or folder (made absolute) of ``model.name``; for the embedded model, its converted
  safetensors folder in this machine's cache (``~/.cache/roleagent/models/...``; elsewhere,
  run ``roleagent`` once there or copy that folder and edit the name); for a base no name
  can rebuild (``model.name: tiny``, or ``model.init_from``/an SFT warm start), the base
  is written under ``DIR/base`` and named ``base``, relative to DIR, so the folder can be
  moved and carried: load it from inside DIR, or give the base yourself
  (``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("DIR/base"), "DIR")``).

``--dtype`` (``fp32``, the default, ``bf16`` or ``fp16``) is the precision of every weight
written: the checkpoint is applied (and merged) in fp32 and cast last, so a bf16 export is
the fp32 one rounded once, at half the size.

The checkpoint: ``latest`` is the one training would resume from
(:func:`roleagent.trainer.checkpoint.find_checkpoint`: the newest that validates against its
manifest; ``checkpoints/latest`` is only a hint, and a missing, dangling or damaged pointer
or a damaged checkpoint is reported and passed over); a named one is validated and used or
refused. Everything is written to ``.DIR.partial`` beside DIR and renamed to DIR last, so an
interrupted export never leaves a half-written DIR; a retry removes the leftover.

Beside the weights: ``README.md``, the model card (base, method, recipe, panel results:
:mod:`roleagent.export_card`), ``roleagent_config.yaml`` (the run's recorded config), and
``roleagent_export.json``: the run, checkpoint, iteration, format, dtype and base name.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from roleagent.config import TrainConfig
from roleagent.export_card import model_card
from roleagent.models.loading import embedded_model_dir, policy_from_config
from roleagent.progress import bar, phase
from roleagent.run_config import load_run_config, resolve_recorded
from roleagent.trainer.checkpoint import (
    CheckpointError,
    LoadedCheckpoint,
    apply_weights,
    checkpoint_candidates,
    find_checkpoint,
    read_checkpoint,
)

INFO = "roleagent_export.json"
#: ``--dtype`` choices.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def load_run_checkpoint(
    run_dir: Path, checkpoint: str = "latest", *, lora: bool, warn: Callable[[str], None] = _stderr
) -> LoadedCheckpoint:
    """``latest``: the checkpoint training resumes from (module docstring; problems go to
    ``warn``); a folder name in ``checkpoints/`` or a path: that one, validated."""
    root = run_dir / "checkpoints"
    if checkpoint == "latest":
        if not checkpoint_candidates(run_dir):
            raise CheckpointError(f"{run_dir}: no checkpoint in {root} (has this run saved one?)")
        return find_checkpoint(run_dir, lora=lora, warn=warn)
    path = root / checkpoint if (root / checkpoint).is_dir() else Path(checkpoint)
    if not path.is_dir():
        names = [p.name for p in reversed(checkpoint_candidates(run_dir))]
        raise CheckpointError(f"no checkpoint {checkpoint!r} in {root}; there are: {', '.join(names) or 'none'}")
    return read_checkpoint(path, lora=lora)


def run_config(run_dir: Path) -> TrainConfig:
    """The config the run recorded (``run_dir/config.yaml``), ``run_dir`` its run folder
    (:func:`roleagent.run_config.load_run_config`, unchecked: an export needs no environment)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: not a roleagent run directory")
    return load_run_config(run_dir, check=False)


def staging_dir(out: Path) -> Path:
    """Where an export to ``out`` is written before it is renamed to ``out``."""
    return out.parent / f".{out.name}.partial"


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} is a file; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        hint = "" if (out / INFO).is_file() else f" (no {INFO}: not a finished export)"
        raise FileExistsError(f"{out} exists and is not empty{hint}; choose another --out or remove it")


def export_run(
    run_dir: str | Path,
    out: str | Path,
    *,
    checkpoint: str = "latest",
    merge_lora: bool = False,
    dtype: str = "fp32",
    quiet: bool = True,
    warn: Callable[[str], None] = _stderr,
) -> Path:
    """Write ``run_dir``'s checkpoint to ``out`` (module docstring); returns ``out``.
    Unless ``quiet``: a phase line and a bar over the stages (``roleagent.progress``)."""
    run_dir, out = Path(run_dir), Path(out)
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {', '.join(DTYPES)}")
    _check_out(out)
    cfg = run_config(run_dir)
    lora = cfg.model.lora_rank > 0
    kind = "merged" if lora and merge_lora else "adapters" if lora else "full weights"
    loaded = load_run_checkpoint(run_dir, checkpoint, lora=lora, warn=warn)
    init_from = resolve_recorded(loaded.state.get("init_from", ""), run_dir)  # stored relative to the run
    model_cfg = dataclasses.replace(cfg.model, device="cpu")
    which = loaded.path.name + (f" ({checkpoint})" if checkpoint != loaded.path.name else "")
    phase(f"export: {which} of {run_dir} ({cfg.model.name}, {kind}, {dtype}) to {out}", quiet=quiet)
    staging = staging_dir(out)
    with bar(3, "export", "stage", quiet=quiet) as progress:
        progress.set_postfix_str("loading the base model")
        policy = policy_from_config(model_cfg, seed=cfg.seed, init_from=init_from)
        progress.update(1)
        progress.set_postfix_str("applying the checkpoint")
        apply_weights(loaded, policy)
        progress.update(1)
        progress.set_postfix_str("writing")
        shutil.rmtree(staging, ignore_errors=True)  # a leftover of an interrupted export
        staging.mkdir(parents=True)
        try:
            base = _write_weights(policy, staging, merge_lora, DTYPES[dtype], (model_cfg, cfg.seed, init_from))
            info = {
                "run_dir": str(run_dir.resolve()),
                "checkpoint": loaded.path.name,
                "iteration": loaded.state["iteration"],
                "model": cfg.model.name,
                "init_from": init_from,
                "format": "peft_adapter" if base is not None else "transformers",
                "dtype": dtype,
                **({"base": base} if base is not None else {}),
            }
            (staging / "README.md").write_text(model_card(cfg, run_dir, loaded, info))
            shutil.copyfile(run_dir / "config.yaml", staging / "roleagent_config.yaml")
            (staging / INFO).write_text(json.dumps(info, indent=1))  # the last file: the export is whole
            _check_out(out)  # nobody wrote there meanwhile
            if out.is_dir():
                out.rmdir()
            staging.rename(out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        progress.update(1)
    return out


def _write_weights(policy, folder: Path, merge: bool, dtype: torch.dtype, base_spec: tuple) -> str | None:
    """The policy's weights (merged, adapters or full) and tokenizer into ``folder``, cast
    to ``dtype``; for adapters, the name of their base (:func:`_name_base` of ``base_spec``:
    model config, seed, ``init_from``), else ``None``."""
    base = None
    if policy.lora and merge:
        policy.model.merge_and_unload().to(dtype).save_pretrained(folder)
    elif policy.lora:
        policy.model.to(dtype).save_pretrained(folder)
        base = _name_base(folder, *base_spec, dtype=dtype)
    else:
        policy.model.to(dtype).save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    return base


def _name_base(out: Path, model_cfg, seed: int, init_from: str, *, dtype: torch.dtype = torch.float32) -> str:
    """Point the adapters' ``base_model_name_or_path`` at a base that loads (the weights
    under the adapters: the same spec, seed and ``init_from``, no adapters); returns it."""
    spec = model_cfg.name
    if spec == "tiny" or init_from:
        base = policy_from_config(model_cfg, seed=seed, init_from=init_from, lora=False).model
        base.to(dtype).save_pretrained(out / "base")
        name = "base"  # relative to the export folder (module docstring)
    elif spec == "embedded":
        name = str(embedded_model_dir().resolve())
    else:  # an HF id, or a local folder (made absolute, so the name resolves from anywhere)
        name = str(Path(spec).resolve()) if Path(spec).exists() else spec
    config_path = out / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = name
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
    return name
