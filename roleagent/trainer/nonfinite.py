"""Where a non-finite gradient norm came from: a diagnosis run only on that path.

When the gradient norm of an optimizer step is NaN or inf, the :class:`Updater` skips the
step (as verl's actor does, and DeepSpeed / Megatron skip an overflow step) and calls
:func:`diagnose` before it zeroes the gradients. The diagnosis costs nothing on finite
steps. On the failing step it costs one extra forward and backward of the step's
micro-batches (the parameters are unchanged, the step was not applied, so the recompute
sees the same weights), plus one forward and backward of the first micro-batch whose
recomputed gradient is non-finite under ``torch.autograd.detect_anomaly``, which records a
stack trace per forward op and checks every backward op's output for NaN (several times
slower than a plain pass, and blind to inf without NaN).

The record (JSON, one line per skipped step, non-finite numbers as the strings ``"nan"``,
``"inf"``, ``"-inf"``) holds: the step's gradient norm and the first names of the
parameters whose accumulated gradient is non-finite; per micro-batch the indices of its
samples in the update's sample list, their lengths, the loss the step computed, and from
the recompute whether the logits, log-probs, reference and old log-probs, advantages and
entropy are finite, the range of ``log π − log π_old`` over the trained tokens, the
trained tokens whose log-prob is below ``NEG / 2`` (a target outside its allowed set),
the output positions whose token is not in its recorded allowed set, and the parameters
whose gradient from that micro-batch alone is non-finite; last the anomaly-mode message
naming the backward op that produced the first NaN (``None`` if it found none).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import torch

from roleagent.engine.constrain import NEG

#: parameter names kept in a record (the total count is recorded too)
MAX_NAMES = 8


def jsonable(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its name, so that the record is
    strict JSON. Example: ``{"a": [1.0, nan], "b": -inf}`` → ``{"a": [1.0, "nan"], "b": "-inf"}``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one line of JSON to ``path``."""
    with Path(path).open("a") as f:
        f.write(json.dumps(jsonable(record), allow_nan=False) + "\n")


def nonfinite_grads(model: torch.nn.Module) -> tuple[list[str], int]:
    """The first :data:`MAX_NAMES` names of parameters whose gradient holds a NaN or inf,
    and how many there are (one device sync per parameter: failure path only)."""
    names = [n for n, p in model.named_parameters() if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
    return names[:MAX_NAMES], len(names)


def out_of_set(sample) -> list[int]:
    """Output positions whose token is not in the allowed set recorded for it: its
    restricted log-prob is ≈ ``NEG`` (float32 min), e.g. after a retokenisation mismatch.

    Example: output ids [5, 9, 3], allowed [[5, 6], [7], None] → [1].
    """
    return [j for j, ids in enumerate(sample.allowed or ()) if ids is not None and sample.output_ids[j] not in ids]


def _finite(t: torch.Tensor | None) -> bool | None:
    return None if t is None else bool(torch.isfinite(t).all())


def _span(t: torch.Tensor) -> list[float]:
    return [float(t.min()), float(t.max())] if t.numel() else []


def micro_batch_report(updater, micro: list, index_of: dict[int, int], step_loss: torch.Tensor) -> dict[str, Any]:
    """Recompute one micro-batch (forward and backward, gradients zeroed first) and say
    which of its inputs, outputs and gradients are non-finite."""
    probe: dict[str, Any] = {}
    updater.optimizer.zero_grad(set_to_none=True)
    loss, _, parts = updater.micro_loss(micro, probe=probe)
    trained = parts["mask"] > 0  # (B, K)
    logprobs = parts["logprobs"].detach()  # (B, K)
    log_ratio = (logprobs - parts["old"])[trained]  # (N,)
    report: dict[str, Any] = {
        "samples": [index_of[id(s)] for s in micro],
        "lengths": [s.length for s in micro],
        "generated": [len(s.output_ids) for s in micro],
        "loss_in_step": float(step_loss),
        "loss": float(loss.detach()),
        **probe,
        "logprobs_finite": _finite(logprobs[trained]),
        "ref_logprobs_finite": None if parts["ref"] is None else _finite(parts["ref"][trained]),
        "old_logprobs_finite": _finite(parts["old"][trained]),
        "advantages_finite": _finite(parts["advantages"]),
        "entropy_finite": None if parts["entropy"] is None else _finite(parts["entropy"].detach()[trained]),
        "log_ratio_range": _span(log_ratio),
        "logprob_below_neg_half": int((logprobs[trained] < NEG / 2).sum()),
        "out_of_set": {index_of[id(s)]: bad for s in micro if (bad := out_of_set(s))},
    }
    if loss.requires_grad:
        loss.backward()
    names, count = nonfinite_grads(updater.policy.model)
    report.update(grads_finite=count == 0 and math.isfinite(report["loss"]), nonfinite_params=names)
    return report


def anomaly_trace(updater, micro: list) -> str | None:
    """Rerun ``micro`` under ``torch.autograd.detect_anomaly``: the message naming the
    first backward op that returned NaN and the last lines of its forward call's trace;
    ``None`` when anomaly mode found no NaN."""
    updater.optimizer.zero_grad(set_to_none=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                loss, _, _ = updater.micro_loss(micro)
                loss.backward()
        except RuntimeError as error:
            traces = [str(w.message) for w in caught if "Traceback of forward call" in str(w.message)]
            tail = traces[-1].strip().splitlines()[-4:] if traces else []
            return "\n".join([str(error).splitlines()[0], *tail])
    return None


def diagnose(updater, micros: list[list], step_losses: list[torch.Tensor], index_of: dict[int, int], norm: float):
    """The record of a step whose gradient norm ``norm`` is non-finite (see the module
    docstring). ``micros`` are the step's micro-batches, ``step_losses`` their losses as
    the step computed them. Leaves the gradients zeroed."""
    names, count = nonfinite_grads(updater.policy.model)  # the step's own accumulated gradients
    record: dict[str, Any] = {"grad_norm": norm, "nonfinite_params": names, "nonfinite_param_count": count}
    reports = [micro_batch_report(updater, m, index_of, loss) for m, loss in zip(micros, step_losses)]
    record["micro_batches"] = reports
    first = next((m for m, r in zip(micros, reports) if not r["grads_finite"]), None)
    record["reproduced"] = first is not None
    record["anomaly"] = anomaly_trace(updater, first) if first is not None else None
    updater.optimizer.zero_grad(set_to_none=True)
    return record
