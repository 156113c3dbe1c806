"""Resumable checkpoints: weights (or adapters), optimizer, sampler/curriculum state, RNGs.

Layout (``run_dir/checkpoints/iter_000003/``)::

    adapter/ or model.safetensors   trainable weights (LoRA adapters, or the full model
                                    with config.json and the tokenizer: save_pretrained);
                                    either is a ``model.init_from`` as it is (the adapters
                                    with ``roleagent_sft.json`` naming their base)
    optimizer.pt                    AdamW state (under FSDP the full state, keyed by parameter name)
    state.pt                        iteration, Python/numpy/torch/engine RNG states,
                                    each method's state (``methods``: name -> state, e.g.
                                    the AIW sampler and its failure-memory record), and
                                    the record of metrics.jsonl (length and digest)
    manifest.json                   size and SHA-256 of every file above (written last)
    finished.json                   only after the run's final evaluation: the run is done

Writing: everything goes to ``.tmp_iter_*`` first, is fsynced, and the folder is renamed
into place; ``checkpoints/latest`` is then replaced atomically, and only after that are
checkpoints beyond the newest ``keep`` deleted, so a complete previous checkpoint exists
at every instant.

Reading: candidates are the ``iter_*`` folders, newest first (``latest`` is only a hint).
Each is validated against its manifest before use; a missing, truncated or altered file is
reported by name and the previous checkpoint is tried. Nothing is unpickled with code:
``state.pt`` and ``optimizer.pt`` load with ``torch.load(weights_only=True)``, so every
state stored here is plain data (dicts, lists, tuples, numbers, strings, tensors).

Checkpoints written before manifests and weights-only state existed (format 1), or before
methods became plug-ins (format 2: ``aiw`` and ``hooks`` states instead of ``methods``),
are rejected with a message saying so.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.distributed.fsdp import FSDPModule

from roleagent.models.loading import SFT_INFO, Policy
from roleagent.trainer.disk_space import checkpoint_bytes, disk_full
from roleagent.trainer.run_lock import RunDirBusy as RunDirBusy  # (re-exported)
from roleagent.trainer.run_lock import RunDirLock as RunDirLock

MANIFEST = "manifest.json"
FINISHED = "finished.json"
FORMAT = 3


class CheckpointError(RuntimeError):
    """A checkpoint (or the run directory around it) cannot be used; the message names the file."""


class DiskFull(CheckpointError):
    """The disk filled up while a checkpoint was written; the partial one was removed."""


# ------------------------------------------------------------------ writing ----------


def save_checkpoint(
    run_dir: Path,
    iteration: int,
    *,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int = 2,
    base: dict[str, Any] | None = None,
) -> Path:
    """Write checkpoint ``iteration`` (module docstring) and return its folder. ``base``
    ({"base", "base_init_from", "seed"}) names the model under LoRA adapters, written as
    ``adapter/roleagent_sft.json`` so that the folder loads as ``model.init_from``
    (``roleagent.models.loading.load_init_model``). When the disk fills up, the partial
    ``.tmp_iter_*`` folder is removed and :class:`DiskFull` says how much the checkpoint
    needs; the previous checkpoint is untouched."""
    root = run_dir / "checkpoints"
    final = root / f"iter_{iteration:06d}"
    tmp = root / f".tmp_iter_{iteration:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        _write_files(tmp, iteration, policy=policy, optimizer=optimizer, state=state, base=base)
        if final.exists():  # e.g. a damaged copy of this iteration: replace it only now
            trash = root / f".old_{final.name}"
            shutil.rmtree(trash, ignore_errors=True)
            final.rename(trash)
            shutil.rmtree(trash, ignore_errors=True)
        tmp.rename(final)
        _write_atomic(root / "latest", final.name)
    except Exception as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if not disk_full(error):
            raise
        previous = next((p.name for p in checkpoint_candidates(run_dir) if p != final), None)
        raise DiskFull(
            f"disk full while writing checkpoint {final.name} in {root}: it needs about "
            f"{checkpoint_bytes(policy, optimizer) / 2**20:.1f} MiB, {shutil.disk_usage(root).free / 2**20:.1f} MiB "
            "are free; the partial checkpoint was removed. Free space and rerun the same command: "
            + (f"the run resumes from {previous}" if previous else "the run starts again (no earlier checkpoint)")
        ) from None
    for old in checkpoint_candidates(run_dir)[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _write_files(
    tmp: Path,
    iteration: int,
    *,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    base: dict[str, Any] | None = None,
) -> None:
    """Weights (or adapters), optimizer state, state and manifest into ``tmp``, fsynced."""
    weights, optimizer_state = None, None
    if isinstance(policy.model, FSDPModule):  # the full weights and AdamW state, gathered from the shards
        from roleagent.trainer.fsdp import full_state_dicts  # (it imports the trainer, which imports this)

        weights, optimizer_state = full_state_dicts(policy.model, optimizer)
    if policy.lora:
        policy.model.save_pretrained(tmp / "adapter")
        if base is not None:
            (tmp / "adapter" / SFT_INFO).write_text(json.dumps(base))
    elif torch.distributed.is_initialized() and torch.distributed.get_rank() > 0:
        _save_weights_file(policy.model, policy.model.state_dict() if weights is None else weights, tmp)
    else:  # a folder transformers (and vLLM) load as it is: config, weights, tokenizer
        policy.model.save_pretrained(tmp, max_shard_size="1000GB", state_dict=weights)  # one model.safetensors
        policy.tokenizer.save_pretrained(tmp)
    torch.save(optimizer.state_dict() if optimizer_state is None else optimizer_state, tmp / "optimizer.pt")
    torch.save(plain({"format": FORMAT, "iteration": iteration, "rng": rng_state(), **state}), tmp / "state.pt")
    files = {str(p.relative_to(tmp)): _file_entry(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    _write_atomic(tmp / MANIFEST, json.dumps({"format": FORMAT, "iteration": iteration, "files": files}))
    for p in tmp.rglob("*"):
        if p.is_file():
            _fsync(p)


def _save_weights_file(model: torch.nn.Module, weights: dict[str, torch.Tensor], folder: Path) -> None:
    """``model.safetensors`` and ``config.json`` on a rank > 0 of a process group, where
    ``save_pretrained`` writes nothing (transformers saves on rank 0 only). A tensor sharing
    storage with an earlier one (lm_head tied to the embeddings) is left out, as there."""
    from safetensors.torch import save_file

    seen: set[int] = set()
    unique = {}
    for name, tensor in weights.items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            unique[name] = tensor.detach().cpu().contiguous()
    save_file(unique, folder / "model.safetensors", metadata={"format": "pt"})
    model.config.save_pretrained(folder)


def mark_finished(checkpoint: Path, info: dict[str, Any]) -> None:
    """Record that the run ended (final evaluation written) after ``checkpoint``."""
    _write_atomic(checkpoint / FINISHED, json.dumps(info))


# ------------------------------------------------------------------ reading ----------


@dataclass
class LoadedCheckpoint:
    path: Path
    weights: dict[str, torch.Tensor]  # adapter or full-model tensors
    optimizer: dict[str, Any]
    state: dict[str, Any]
    finished: dict[str, Any] | None


def checkpoint_candidates(run_dir: Path) -> list[Path]:
    """Complete-looking checkpoint folders, newest iteration first."""
    root = run_dir / "checkpoints"
    found = []
    for path in root.glob("iter_*") if root.is_dir() else ():
        suffix = path.name[len("iter_") :]
        if path.is_dir() and suffix.isdigit():
            found.append((int(suffix), path))
    return [p for _, p in sorted(found, reverse=True)]


def find_checkpoint(
    run_dir: Path, *, lora: bool, device: str | torch.device = "cpu", warn: Callable[[str], None] = print
) -> LoadedCheckpoint | None:
    """The newest checkpoint that validates and loads; ``None`` if the run never saved one.

    A checkpoint that fails is reported through ``warn`` (naming the file) and the previous
    one is tried. Raises :class:`CheckpointError` if checkpoints existed but none is usable.
    """
    root = run_dir / "checkpoints"
    pointer = root / "latest"
    named = pointer_name(pointer) if pointer.is_file() else None  # "": not a checkpoint's name
    candidates = checkpoint_candidates(run_dir)
    if not candidates:
        if named:
            raise CheckpointError(
                f"{pointer} names {named}, which does not exist, and {root} holds no other "
                "checkpoint: refusing to restart this run from iteration 0 (restore the checkpoint, "
                "or move the run directory away to start over)"
            )
        return None
    if named is None:
        warn(f"{pointer} is missing; looking for the newest valid checkpoint in {root}")
    elif not named:
        warn(f"{pointer} does not name a checkpoint (damaged): treated as missing; looking for the newest valid one")
    elif not (root / named).is_dir():
        warn(f"{pointer} names {named}, which does not exist; trying the newest other checkpoint")
    problems = []
    for path in candidates:
        try:
            return read_checkpoint(path, lora=lora, device=device)
        except CheckpointError as error:
            problems.append(str(error))
            warn(f"skipping damaged checkpoint: {error}")
    raise CheckpointError(f"no usable checkpoint in {root}: " + "; ".join(problems))


def pointer_name(pointer: Path) -> str:
    """The checkpoint folder name ``checkpoints/latest`` holds (``iter_000003``), or ``""``
    when it holds anything else (binary garbage, a torn write)."""
    try:
        name = pointer.read_bytes()[:64].decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    suffix = name[len("iter_") :]
    return name if name.startswith("iter_") and suffix.isdigit() and suffix.isascii() else ""


def read_checkpoint(path: Path, *, lora: bool, device: str | torch.device = "cpu") -> LoadedCheckpoint:
    """Validate ``path`` against its manifest and load its files (no code runs)."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(
            f"{manifest_path} is missing (incomplete checkpoint, or one written "
            "by an older roleagent, which this version cannot validate)"
        )
    manifest = _read_json(manifest_path)
    if manifest.get("format") != FORMAT:
        raise CheckpointError(
            f"{manifest_path}: checkpoint format {manifest.get('format')}, this roleagent reads {FORMAT}"
        )
    for name, entry in manifest.get("files", {}).items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{file} is missing")
        if file.stat().st_size != entry["size"]:
            raise CheckpointError(
                f"{file} has {file.stat().st_size} bytes, the manifest recorded {entry['size']} (truncated or altered)"
            )
        if _sha256(file) != entry["sha256"]:
            raise CheckpointError(f"{file} does not match its SHA-256 in the manifest (altered)")
    weights_file = path / ("adapter" if lora else "model.safetensors")
    try:
        if lora:
            from peft.utils import load_peft_weights

            weights = load_peft_weights(str(weights_file), device=str(device))
        else:
            from safetensors.torch import load_file

            weights = load_file(weights_file, device=str(device))
    except Exception as error:  # noqa: BLE001 - reported with the file's name
        raise CheckpointError(f"{weights_file}: cannot load weights ({error})") from error
    optimizer = safe_load(path / "optimizer.pt", map_location=device)
    state = safe_load(path / "state.pt")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path / 'state.pt'}: not a format-{FORMAT} state")
    finished = _read_json(path / FINISHED) if (path / FINISHED).is_file() else None
    return LoadedCheckpoint(path, weights, optimizer, state, finished)


def apply_checkpoint(loaded: LoadedCheckpoint, *, policy: Policy, optimizer: torch.optim.Optimizer) -> None:
    """Put loaded weights, optimizer state and global RNG states in place."""
    if isinstance(policy.model, FSDPModule):  # full state dicts into the shards
        from roleagent.trainer.fsdp import load_full_state_dicts

        load_full_state_dicts(policy.model, optimizer, loaded.weights, loaded.optimizer)
    else:
        apply_weights(loaded, policy)
        optimizer.load_state_dict(loaded.optimizer)
    set_rng_state(loaded.state["rng"])


def apply_weights(loaded: LoadedCheckpoint, policy: Policy) -> None:
    """Put the loaded adapters (or full-model weights) into ``policy``."""
    if policy.lora:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(policy.model, loaded.weights)
    else:  # strict=False: save_pretrained leaves out tied weights (lm_head = embeddings)
        policy.model.load_state_dict(loaded.weights, strict=False)


def safe_load(path: Path, **kwargs: Any) -> Any:
    """``torch.load`` that refuses pickled code (``weights_only=True``); errors name the file."""
    try:
        return torch.load(path, weights_only=True, **kwargs)
    except Exception as error:  # noqa: BLE001 - includes UnpicklingError for forbidden globals
        raise CheckpointError(
            f"{path}: refused or unreadable ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''})"
        ) from error


# --------------------------------------------------------------------- RNGs ----------


def rng_state() -> dict[str, Any]:
    """Global RNG states as plain data (loadable with ``weights_only=True``)."""
    legacy = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {**legacy, "state": {"key": legacy["state"]["key"].tolist(), "pos": int(legacy["state"]["pos"])}},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    numpy_state = state["numpy"]
    key = np.asarray(numpy_state["state"]["key"], dtype=np.uint32)
    np.random.set_state({**numpy_state, "state": {"key": key, "pos": numpy_state["state"]["pos"]}})
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def plain(value: Any) -> Any:
    """numpy scalars/arrays → Python numbers/lists, recursively (tensors stay tensors)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [plain(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---------------------------------------------------------------- plumbing -----------


def _file_entry(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": _sha256(path)}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from error


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    _fsync(path.parent)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
