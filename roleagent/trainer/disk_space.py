"""A full disk, told apart from other write errors, and what a checkpoint needs on disk:
a checkpoint that cannot be written then says how much space to free (one line, not a
traceback from the writer that happened to hit the limit)."""

from __future__ import annotations

import errno

import torch

#: How a full disk shows in the writers' errors: the OS's, torch's zip writer's
#: ("unexpected pos 8256 vs 8144", "file write failed") and safetensors' (Rust's StorageFull).
_DISK_FULL_TEXT = ("No space left on device", "unexpected pos", "file write failed", "StorageFull", "Disk quota")


def disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` (or an exception it was raised from) is a full disk or quota."""
    seen = 0
    while error is not None and seen < 8:
        if getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(text in str(error) for text in _DISK_FULL_TEXT):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def checkpoint_bytes(policy, optimizer: torch.optim.Optimizer) -> int:
    """About what a checkpoint of ``policy`` and ``optimizer`` takes on disk: the saved
    weights (the trainable ones under LoRA, else all) and the optimizer's state tensors."""
    model = policy.model
    tensors = [p for p in model.parameters() if p.requires_grad] if policy.lora else list(model.state_dict().values())
    tensors += [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)
