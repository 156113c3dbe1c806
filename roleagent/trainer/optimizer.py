"""One optimizer for every update in roleagent: the RL updater, the critic, SFT and Agent-R.

AdamW (Loshchilov & Hutter, 2019, arXiv 1711.05101) over the trainable parameters, with

1. **a learning-rate schedule** over optimizer steps s = 0, 1, …, S − 1 (S = ``total_steps``,
   W = ``warmup_steps``, η the base rate, η_min = ``min_lr_ratio`` · η)::

       warm-up (s < W):    η_s = η · (s + 1) / W
       constant:           η_s = η
       cosine:             η_s = η_min + (η − η_min) · ½ · (1 + cos(π · min(1, (s − W) / max(1, S − W))))

   Worked example: η = 1e-3, W = 2, S = 6, cosine, η_min = 0 → steps 0..5 use
   5e-4, 1e-3, 1e-3, 1e-3 · ½(1 + cos(π/4)) = 8.54e-4, 5e-4, 1.46e-4 (:func:`lr_at`; the
   cosine part as transformers' ``get_cosine_schedule_with_warmup``, whose warm-up starts at
   0 where this one starts at η/W, so that no step is wasted).
   The step count lives in AdamW's own ``param_groups`` (key ``schedule_step``), so it is
   saved and restored with the optimizer's state: a resumed run continues the schedule.
2. **gradient clipping** to ``grad_clip`` (global L2 norm, as ``clip_grad_norm_``);
3. **the same handling of a non-finite gradient norm everywhere**: the step is not applied
   (gradients zeroed, AdamW moments and the schedule untouched), the skip is counted, a
   ``diagnosis(norm)`` callback (the RL updater's, ``roleagent.trainer.nonfinite``) may
   describe it, and after ``max_nonfinite_skips`` consecutive skips the next one raises
   ``FloatingPointError`` — as verl's actor skips such steps (and DeepSpeed / Megatron skip
   an overflow step).

How many optimizer steps an RL iteration makes, in the anchors' terms: roleagent makes
``optim.epochs × optim.mini_batches`` steps over an iteration's N · G episodes; verl's
``ppo_epochs × (train_batch_size / ppo_mini_batch_size)`` and TRL GRPO's
``num_iterations × steps_per_generation`` are the same two factors.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

SCHEDULES = ("constant", "cosine")


def lr_at(step: int, lr: float, *, schedule: str = "constant", warmup_steps: int = 0, total_steps: int = 0,
          min_lr_ratio: float = 0.0) -> float:  # fmt: skip
    """The learning rate of optimizer step ``step`` (0-based; module docstring).

    >>> [round(lr_at(s, 1e-3, schedule="cosine", warmup_steps=2, total_steps=6), 7) for s in range(6)]
    [0.0005, 0.001, 0.001, 0.0008536, 0.0005, 0.0001464]
    >>> lr_at(10, 1e-3, schedule="cosine", total_steps=4)  # past the end: the floor
    0.0
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown learning-rate schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    floor = min_lr_ratio * lr
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def grad_norm(params: list[torch.nn.Parameter]) -> float:
    """L2 norm of all gradients together, each reduced in float32, before clipping.

    Example: gradients [3.0] and [[0.0, 4.0]] → 5.0; a NaN anywhere → nan.
    """
    norms = [torch.linalg.vector_norm(p.grad.detach(), dtype=torch.float32) for p in params if p.grad is not None]
    norms = [n.full_tensor() if isinstance(n, DTensor) else n for n in norms]  # FSDP: reduced over ranks
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


class Optimizer:
    """AdamW with a schedule, clipping and non-finite skips (module docstring).

    ``adamw`` is the plain ``torch.optim.AdamW`` that checkpoints save and restore (FSDP's
    full state dicts need a real torch optimizer). Use: ``zero_grad()``, backward passes,
    then ``step()``, which returns the gradient norm before clipping, or ``None`` when the
    step was skipped.
    """

    def __init__(
        self,
        params: list[torch.nn.Parameter],
        *,
        lr: float,
        weight_decay: float = 0.0,
        grad_clip: float = 1.0,
        schedule: str = "constant",
        warmup_steps: int = 0,
        total_steps: int = 0,
        min_lr_ratio: float = 0.0,
        max_nonfinite_skips: int = 3,
        diagnostics_path: str | Path | None = None,
        what: str = "optimizer",
    ):
        self.params = list(params)
        low = [p.dtype for p in self.params if p.dtype in (torch.bfloat16, torch.float16)]
        if low:  # AdamW steps below a bf16 weight's rounding would be lost
            raise ValueError(
                f"{what}: {len(low)} trainable tensors in {low[0]}; an optimizer needs fp32 master "
                "weights (roleagent.models.precision.master_params)"
            )
        self.adamw = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay)
        for group in self.adamw.param_groups:  # present from the start: FSDP's state dicts need equal keys
            group["schedule_step"] = 0
        self.base_lr = lr
        self.grad_clip = grad_clip
        self.schedule = dict(schedule=schedule, warmup_steps=warmup_steps, total_steps=total_steps,
                             min_lr_ratio=min_lr_ratio)  # fmt: skip
        lr_at(0, lr, **self.schedule)  # an unknown schedule fails here, not at the first step
        self.max_nonfinite_skips = max_nonfinite_skips
        self.diagnostics_path = diagnostics_path
        self.what = what  # names the optimizer in errors ("policy", "critic", "SFT")
        self.nonfinite_records: deque[dict] = deque(maxlen=16)
        self.nonfinite_streak = 0  # consecutive skipped steps
        self.attempts = 0  # steps attempted (applied or skipped) by this object

    @classmethod
    def from_config(cls, params, cfg, **extra) -> Optimizer:
        """From a settings block with ``lr``, ``weight_decay``, ``grad_clip`` and, where it
        has them, ``lr_schedule``, ``warmup_steps``, ``min_lr_ratio``, ``max_nonfinite_skips``."""
        return cls(
            params,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            grad_clip=cfg.grad_clip,
            schedule=getattr(cfg, "lr_schedule", "constant"),
            warmup_steps=getattr(cfg, "warmup_steps", 0),
            min_lr_ratio=getattr(cfg, "min_lr_ratio", 0.0),
            max_nonfinite_skips=getattr(cfg, "max_nonfinite_skips", 3),
            **extra,
        )

    @property
    def applied_steps(self) -> int:
        """Optimizer steps applied so far, restored with the AdamW state."""
        return int(self.adamw.param_groups[0].get("schedule_step", 0))

    @property
    def lr(self) -> float:
        """The learning rate the next step will use."""
        return lr_at(self.applied_steps, self.base_lr, **self.schedule)

    def zero_grad(self) -> None:
        self.adamw.zero_grad(set_to_none=True)

    def step(self, diagnosis: Callable[[float], dict] | None = None) -> float | None:
        """Clip and apply the accumulated gradients at the scheduled rate; returns their
        norm before clipping. A non-finite norm skips the step (gradients zeroed,
        ``diagnosis(norm)`` recorded) and returns ``None``; the skip after
        ``max_nonfinite_skips`` consecutive ones raises ``FloatingPointError``."""
        self.attempts += 1
        norm = grad_norm(self.params)
        if not math.isfinite(norm):
            self._skip(norm, diagnosis)
            return None
        coef = min(1.0, self.grad_clip / (norm + 1e-6))  # as torch.nn.utils.clip_grad_norm_
        if coef < 1.0:
            for p in self.params:
                if p.grad is not None:
                    p.grad.mul_(coef)
        lr = self.lr
        for group in self.adamw.param_groups:
            group["lr"] = lr
        self.adamw.step()
        for group in self.adamw.param_groups:
            group["schedule_step"] = group.get("schedule_step", 0) + 1
        self.nonfinite_streak = 0
        return norm

    def _skip(self, norm: float, diagnosis) -> None:
        self.nonfinite_streak += 1
        record = {"step": self.attempts, "consecutive_skips": self.nonfinite_streak, "grad_norm": norm}
        if diagnosis is not None:
            try:
                record.update(diagnosis(norm))
            except Exception as error:  # noqa: BLE001 - a failed diagnosis must not turn a skip into a crash
                record["diagnosis_error"] = f"{type(error).__name__}: {error}"
        self.zero_grad()  # never apply a NaN step
        self.nonfinite_records.append(record)
        where = "nonfinite_records"
        if self.diagnostics_path is not None:
            from roleagent.trainer.nonfinite import append_record

            append_record(self.diagnostics_path, record)
            where = str(self.diagnostics_path)
        if self.nonfinite_streak > self.max_nonfinite_skips:
            raise FloatingPointError(
                f"{self.what}: non-finite gradient norm in {self.nonfinite_streak} consecutive steps "
                f"(max_nonfinite_skips={self.max_nonfinite_skips}); diagnosis in {where}: "
                "lower the learning rate or check the loss inputs"
            )
        warnings.warn(
            f"{self.what}: skipped optimizer step {self.attempts}: gradient norm {norm}; diagnosis in {where}",
            RuntimeWarning,
            stacklevel=3,
        )
