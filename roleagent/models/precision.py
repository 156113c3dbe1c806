"""Mixed precision: low-precision compute, fp32 master weights (``model.dtype``).

With ``model.dtype`` bfloat16 (the CUDA default) the weights are loaded in bf16, but

1. **every forward runs under** ``torch.autocast(device, bf16)`` (:func:`autocast_forward`
   wraps the model's ``forward``, as accelerate's ``prepare_model`` does), so matmuls run in
   bf16 whatever dtype a parameter is stored in, and rollouts, the training forward, the
   critic and any method's generation share one numeric path;
2. **every trained tensor is fp32** (:func:`master_params`, called wherever an optimizer is
   built: the RL update, the critic, SFT and Agent-R): LoRA adapters (peft already makes
   them fp32) or, with ``model.lora_rank=0``, all weights. AdamW updates fp32 values;
   autocast casts them to bf16 inside each forward, and their gradients accumulate in fp32.
   Frozen weights (the LoRA base, a KL reference copy) stay in bf16.

Why: bf16 keeps 8 significant bits, so a weight w moves only when its update exceeds about
|w| · 2⁻⁹. Worked example: w = 0.5 and an AdamW step of lr = 1e-5 → 0.5 + 1e-5 rounds back
to 0.5 in bf16 (its spacing at 0.5 is 2⁻⁸ ≈ 3.9e-3): the step is lost; in fp32 (spacing
6e-8) it is kept. Micikevicius et al., 2018, arXiv 1710.03740 (fp32 master weights).

fp16 is refused for training (:func:`master_params` raises): its 5 exponent bits underflow
small gradients to 0 unless the loss is scaled (a GradScaler), which roleagent does not do.
fp16 still loads for generation and evaluation. fp32 (the CPU default) changes nothing:
no autocast, no casts.
"""

from __future__ import annotations

import contextlib
import functools
import types

import torch

LOW = (torch.bfloat16, torch.float16)
_ATTR = "_roleagent_compute_dtype"  # set on the wrapped (innermost HF) model


def _inner(model: torch.nn.Module) -> torch.nn.Module:
    """The HF model whose ``forward`` every path calls: a peft model's base model."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def compute_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype ``model``'s forwards compute in: the autocast dtype set by
    :func:`autocast_forward`, else fp32."""
    return getattr(_inner(model), _ATTR, torch.float32)


def _autocast(func, dtype: torch.dtype):
    @functools.wraps(func)  # keeps the signature (the engine inspects ``forward``)
    def forward(self, *args, **kwargs):
        with torch.autocast(self.device.type, dtype=dtype):
            return func(self, *args, **kwargs)

    return forward


def autocast_forward(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Make every forward of ``model`` run under ``torch.autocast(device, dtype)``; fp32:
    nothing. Wrapped: a peft model's base (which generation and the peft wrapper both call)
    and its decoder (``get_decoder()``), which the update and SFT call on their own to run
    the LM head on the positions they read (``roleagent.trainer.samples.output_head``).
    Without the decoder's wrapper those forwards ran LoRA adapters in fp32 on fp32 copies
    of their inputs, unlike the rollout: log-probs 3e-4 nats apart on average, 4e-3 at most
    (the main job's SFT policy, random nonzero adapters), and 21% more activations kept for
    the backward (``benchmarks/probe_saved_activations.py``; RESULTS.md, "bf16 on the CPU").

    peft casts an adapter's input to the adapter's dtype (fp32 master weights) before its
    matmul, which autocast then casts back to bf16: the same values, but a new bf16 copy of
    the input kept for the backward per adapter (three of the same tensor for q, k and v).
    Every forward runs under autocast here, so that cast is switched off
    (``cast_input_dtype_enabled``, peft's own switch) and the adapters read the bf16 input.

    The wrappers are bound with ``MethodType`` to their module, so a ``copy.deepcopy`` (the
    KL reference) rebinds them to the copy rather than calling the original's weights."""
    inner = _inner(model)
    if dtype not in LOW or getattr(inner, _ATTR, None) is not None:
        return
    modules = [inner]
    try:
        decoder = inner.get_decoder()
    except (AttributeError, NotImplementedError):
        decoder = None
    if isinstance(decoder, torch.nn.Module) and decoder is not inner:
        modules.append(decoder)
    for module in modules:
        module.forward = types.MethodType(_autocast(type(module).forward, dtype), module)
    for layer in inner.modules():  # peft's adapter layers: no fp32 copy of their inputs
        if hasattr(layer, "_cast_input_dtype"):
            layer.cast_input_dtype_enabled = False
    setattr(inner, _ATTR, dtype)


def autocast_region(model: torch.nn.Module):
    """One autocast region around many forwards (a decode loop): autocast caches its casts
    of trainable weights until the outermost region exits, so fp32 master weights are cast
    once per region instead of once per forward. A no-op context in fp32."""
    dtype = compute_dtype(model)
    if dtype not in LOW:
        return contextlib.nullcontext()
    return torch.autocast(next(model.parameters()).device.type, dtype=dtype)


def master_params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The trainable parameters of ``model``, each made fp32 in place if it was bf16 (the
    master weights an optimizer updates; module docstring). fp16 compute or fp16 weights
    raise a one-line ``ValueError``.

    Example: a bf16 model with LoRA adapters → the adapters (fp32 already), base unchanged;
    a bf16 model with all weights trainable → every weight fp32, forwards still bf16."""
    if compute_dtype(model) == torch.float16 or any(p.dtype == torch.float16 for p in model.parameters()):
        raise ValueError(
            "model.dtype=float16 cannot train: fp16 gradients underflow without loss scaling, which "
            "roleagent does not do; use model.dtype=bfloat16 or float32"
        )
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.dtype in LOW:
            p.data = p.data.float()
            p.grad = None
    return params
