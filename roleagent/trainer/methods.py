"""The plug-in interface of a training method, owned by the trainer that calls it: the
:class:`Method` base class (every hook a no-op by default), the :class:`MethodContext` the
trainer gives it, and the registry that finds and builds the enabled methods.

A method overrides only what it changes; the loop (``roleagent.trainer.loop``) calls the
hooks of every enabled method, in the order they were built, around its stages
(``roleagent.trainer.stages``), and knows nothing else about them::

    from roleagent.trainer.methods import Method

    class MyMethod(Method):
        name = "mine"                      # metrics "mine/...", checkpoint state "mine"
        config_class = MyConfig            # optional: settings from method_settings.mine

        def adjust_advantages(self, batch, advantages):
            return advantages * 0.5

        def after_iteration(self, trajectories, iteration):
            return {"episodes": float(len(trajectories))}

Built-in methods (the packages under ``roleagent/methods/``, one per paper) are named by
their config section in :data:`METHODS` and switched on by its ``enabled`` (``wia.enabled``,
``aiw.enabled``, ``seal.enabled``, ``agent_r.enabled``, ``asl.enabled``); the table holds
import strings only, so this module imports no method. Methods from outside the package are
listed in ``methods`` as ``module:Class`` or by the name of an entry point in the
``roleagent.methods`` group; their settings come from ``method_settings.<name>``, checked
against the class's ``config_class``::

    methods: [mypkg.methods:Curriculum]
    method_settings: {curriculum: {temperature: 0.5}}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from roleagent.fields import ConfigError, from_dict
from roleagent.plugins import PluginError, load_object, resolve

if TYPE_CHECKING:
    from roleagent.rollout import RolloutExtension, RolloutSettings
    from roleagent.trainer.advantages import StepBatch
    from roleagent.trainer.samples import TrainSample
    from roleagent.trainer.stages import Collector, Objective, Scorer, TaskSource
    from roleagent.types import Step, Task, Trajectory

#: chat(conversations, *, max_new_tokens=256, temperature=0.0, stop=(), response_prefix="")
Chat = Callable[..., list[str]]


@dataclass
class MethodContext:
    """What the trainer gives a method: the run, the environments, the model."""

    cfg: Any  # the whole TrainConfig
    run_dir: Path
    pool: Any  # roleagent.envs.workers.EnvPool (diagnose, call_all, meta)
    engine: Any  # roleagent.engine.Engine
    chat: Chat  # batched chat completion with the policy
    train_tasks: list[Task]
    settings: RolloutSettings  # the training rollouts' settings (max_steps, temperature, ...)
    policy: Any = None  # the trained roleagent.models.loading.Policy (model None: a served model)


class Method:
    """Base class of a training method (Agent-In-World, SEAL, an external one)."""

    name: str = "method"
    #: Dataclass of the method's settings. Built-in methods read their section of
    #: TrainConfig; external ones get ``from_dict(config_class, method_settings[name])``.
    config_class: type | None = None
    #: False when the method's objective ignores the loop's advantages (Agent-R's SFT), so
    #: rollout groups of one task need not be compared (``rollout.group_size`` may be 1).
    uses_advantages: bool = True

    def __init__(self, context: MethodContext, config: Any = None):
        self.context = context
        self.config = config

    # -- configuration (class level, before anything is built) --------------------------
    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Cross-field checks of the whole TrainConfig; raise ConfigError, never change it."""

    @classmethod
    def resolve_config(cls, cfg: Any) -> None:
        """Fill in what a valid config leaves implied (runs after validation)."""

    @classmethod
    def episodes_at_once(cls, cfg: Any) -> int:
        """Episodes the method's collector plays in one batched call, when more than the
        default's ``rollout.tasks_per_iter × rollout.group_size``: the trainer gives the
        environment pool that many slots (0: the default)."""
        return 0

    # -- replacing a stage (None keeps the default) --------------------------------------
    def task_source(self) -> TaskSource | None:
        return None

    def collector(self) -> Collector | None:
        return None

    def scorer(self) -> Scorer | None:
        return None

    def objective(self) -> Objective | None:
        return None

    def rollout_extension(self) -> RolloutExtension | None:
        """An extra batched generation per turn (after the actions, before the
        environments step), recorded in ``step.extras[extension.name]``."""
        return None

    # -- hooks around the stages -----------------------------------------------------------
    def adjust_advantages(self, batch: StepBatch, advantages: np.ndarray) -> np.ndarray:
        """The advantages to train on, shape (n,), one per step sample of ``batch``."""
        return advantages

    def extra_samples(self, step: Step, advantage: float) -> list[TrainSample]:
        """Training samples this method adds for one step (after the action's own)."""
        return []

    def after_iteration(self, trajectories: list[Trajectory], iteration: int) -> dict[str, float]:
        """Called once per iteration after the update; metrics are logged as ``name/key``."""
        return {}

    # -- run directory and checkpoints ---------------------------------------------------
    def start_fresh(self) -> None:
        """The run starts at iteration 0: forget files an earlier attempt left."""

    def state_dict(self) -> dict[str, Any]:
        """Plain data saved in every checkpoint, including any record of the method's own
        files (row counts, digests) that :meth:`load_state_dict` checks them against."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint: verify the method's files and cut them back to the record."""

    def write_summary(self, run_dir: Path) -> None:
        """At the end of the run (plots, tables)."""

    def close(self) -> None:
        pass


#: Config section → ``module:Class`` of the built-in methods, in the order they run.
METHODS: dict[str, str] = {
    "wia": "roleagent.methods.role_agent.wia:WorldInAgent",
    "aiw": "roleagent.methods.role_agent.aiw.method:AgentInWorldMethod",
    "seal": "roleagent.methods.seal.method:SealMethod",
    "agent_r": "roleagent.methods.agent_r.method:AgentRMethod",
    "asl": "roleagent.methods.asl.method:ASLMethod",
}


def external_class(reference: str) -> type:
    """The Method class of a ``methods`` entry (``module:Class`` or an entry-point name)."""
    if reference in METHODS:
        raise ConfigError(f"methods: {reference!r} is built in: switch it on with {reference}.enabled=true")
    try:
        cls = load_object(resolve("methods", reference, {}))
    except PluginError as error:
        raise ConfigError(f"methods: {error}") from None
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise ConfigError(f"methods: {reference!r} is not a subclass of roleagent.trainer.methods.Method")
    return cls


def method_classes(cfg: Any) -> list[type]:
    """The enabled methods' classes: built-in ones in :data:`METHODS` order, then ``methods``."""
    built_in = [load_object(ref) for section, ref in METHODS.items() if getattr(cfg, section).enabled]
    return built_in + [external_class(ref) for ref in cfg.methods]


def _settings(cls: type, cfg: Any) -> Any:
    """The config object of an external method (``None`` without ``config_class``)."""
    given = cfg.method_settings.get(cls.name, {})
    if cls.config_class is None:
        if given:
            raise ConfigError(f"method_settings.{cls.name}: method {cls.name!r} takes no settings")
        return None
    return from_dict(cls.config_class, given, f"method_settings.{cls.name}")


def check_methods(cfg: Any) -> None:
    """Names resolve, names are unique, settings match, each method's own checks pass."""
    classes = method_classes(cfg)
    names = [cls.name for cls in classes]
    if len(set(names)) != len(names):
        raise ConfigError(f"methods: two methods share a name ({', '.join(names)})")
    external = {cls.name for cls in classes[len(classes) - len(cfg.methods) :]}
    for name in cfg.method_settings:
        if name not in external:
            raise ConfigError(f"method_settings.{name}: no method {name!r} in 'methods'")
    for cls in classes[len(classes) - len(cfg.methods) :]:
        _settings(cls, cfg)
    for cls in classes:
        cls.check_config(cfg)


def build_methods(cfg: Any, context: MethodContext) -> list[Method]:
    """Instances of the enabled methods, in the order their hooks run."""
    methods = []
    try:
        for cls in method_classes(cfg):
            built_in = METHODS.get(cls.name) == f"{cls.__module__}:{cls.__qualname__}"
            config = getattr(cfg, cls.name) if built_in else _settings(cls, cfg)
            methods.append(cls(context, config))
    except BaseException:
        for method in methods:
            method.close()
        raise
    return methods


__all__ = ["METHODS", "Chat", "Method", "MethodContext", "build_methods", "check_methods", "method_classes"]
