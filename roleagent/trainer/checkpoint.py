"""Resumable checkpoints: weights (or adapters), optimizer, sampler/curriculum state, RNGs.

Layout (``run_dir/checkpoints/iter_000003/``)::

    adapter/ or model.safetensors   trainable weights (LoRA adapters, or the full model)
    optimizer.pt                    AdamW state
    state.pt                        iteration, Python/numpy/torch/engine RNG states,
                                    extra component states (e.g. the AIW task sampler)

A checkpoint is written to a temporary folder and renamed into place, and
``checkpoints/latest`` names the newest complete one, so a run killed mid-save resumes
from the previous checkpoint.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roleagent.models.loading import Policy


def save_checkpoint(
    run_dir: Path, iteration: int, *, policy: Policy, optimizer: torch.optim.Optimizer,
    state: dict[str, Any], keep: int = 2,
) -> Path:
    root = run_dir / "checkpoints"
    final = root / f"iter_{iteration:06d}"
    tmp = root / f".tmp_iter_{iteration:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if policy.lora:
        policy.model.save_pretrained(tmp / "adapter")
    else:
        from safetensors.torch import save_file

        tensors = {k: v.detach().contiguous().cpu() for k, v in policy.model.state_dict().items()}
        save_file(_untie(tensors), tmp / "model.safetensors")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"iteration": iteration, "rng": rng_state(), **state}, tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    (root / "latest.tmp").write_text(final.name)
    (root / "latest.tmp").replace(root / "latest")
    for old in sorted(root.glob("iter_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = run_dir / "checkpoints" / pointer.read_text().strip()
    return path if path.exists() else None


def load_checkpoint(path: Path, *, policy: Policy, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights and optimizer in place; returns the saved state (RNGs restored)."""
    if policy.lora:
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        set_peft_model_state_dict(policy.model, load_peft_weights(str(path / "adapter"), device=str(policy.device)))
    else:
        from safetensors.torch import load_file

        policy.model.load_state_dict(load_file(path / "model.safetensors", device=str(policy.device)), strict=False)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=policy.device, weights_only=False))
    state = torch.load(path / "state.pt", weights_only=False)
    set_rng_state(state["rng"])
    return state


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _untie(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage (tied embeddings): give each name its own copy."""
    seen: dict[int, str] = {}
    out = {}
    for name, tensor in tensors.items():
        pointer = tensor.untyped_storage().data_ptr()
        out[name] = tensor.clone() if pointer in seen else tensor
        seen.setdefault(pointer, name)
    return out
