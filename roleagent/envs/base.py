"""The environment protocol and the registry of environments.

An environment is a plain class with few dependencies::

    env = make_env("textcraft")
    tasks = env.tasks("train")                       # list[Task], stable ids
    obs, info = env.reset(tasks[0], seed=0)          # info["instruction"]: the goal text
    result = env.step("craft 1 stick using 2 oak planks")
    result.observation, result.reward, result.done, result.info["success"]

Rollouts run each environment in a worker process (``roleagent.envs.workers``), so an
environment never needs to be thread-safe, and a crash is contained and restarted.

Wherever an environment is named (``env.name``, ``make_env``, ``roleagent eval --env``), an
environment outside the package works too, by reference or as an entry point in the
``roleagent.envs`` group (resolved by :mod:`roleagent.plugins`)::

    env = make_env("mypkg.envs:MyEnv", level=2)      # an Environment subclass
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from roleagent.envs.safety import describe_error
from roleagent.plugins import PluginError, entry_points, load_object, resolve
from roleagent.types import Task, Trajectory


class EnvironmentCrashed(RuntimeError):
    """Raised by ``Environment.step`` for an infrastructure fault that is not the action's
    doing, e.g. the simulator process behind the environment died. The worker reports it
    as a crash, not as ``step_failed``: the episode ends with ``Trajectory.crashed`` (kept
    out of training and success rates) and the slot's environment is rebuilt. Raise it
    only when the fault is known to be infrastructure (a process that has exited), never
    for an error the action may have caused."""


@dataclass
class StepResult:
    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)  # "success": bool when done


class Environment:
    """Base class. Subclasses implement ``tasks``, ``reset`` and ``step``.

    ``info`` returned by ``reset`` carries ``"instruction"`` (the task text shown to the
    agent once, at the top of every prompt). ``StepResult.info`` carries ``"success"``
    (bool) and, where the environment has them, ``"admissible_actions"``.
    """

    name: str = "base"
    max_steps: int = 50
    #: Failure-mode labels for the rule-based and LLM failure analysts (empty: none).
    failure_taxonomy: tuple[str, ...] = ()
    #: Table column label per ``task.metadata["task_type"]``, in display order (empty: the types).
    table_columns: dict[str, str] = {}
    #: Methods trainer hooks may call on every worker's instance (``EnvPool.call_all``).
    remote_methods: tuple[str, ...] = ()
    #: Longer observations keep head and tail around a truncation note (0: no cap). The
    #: largest legitimate one we know: 70,531 characters (a BFCL long-context turn).
    max_observation_chars: int = 131072
    #: CPU seconds one ``step`` may use before it fails with ``DeadlineExceeded``
    #: (0: no limit; enforced in worker processes and in the main thread, see
    #: ``roleagent.envs.safety.cpu_deadline``).
    step_cpu_seconds: float = 60.0
    #: Modules building and resetting an instance imports, worth importing once in the server
    #: that forks the worker processes (``env.start_method: forkserver``).
    preload: tuple[str, ...] = ()

    def tasks(self, split: str) -> list[Task]:
        """All tasks of a split ("train", "eval", or an environment's own panel names)."""
        raise NotImplementedError

    def splits(self) -> tuple[str, ...]:
        return ("train", "eval")

    def reset(self, task: Task, seed: int) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def prepare_task(self, task: Task) -> None:
        """Build what resetting ``task`` needs and every instance can share (ALFWorld: its
        generated game), ahead of the reset. A pool whose slots reset one task together asks
        one of them first, so the others find it built (default: nothing to build)."""

    def step(self, action: str) -> StepResult:
        raise NotImplementedError

    def step_failed(self, action: str, error: BaseException) -> StepResult:
        """The result of a ``step`` that raised. What a model writes can make an
        environment raise; that is the model's failure, not an infrastructure fault, so
        the step becomes an error observation instead of a crashed episode. The default
        ends the episode as a failure (the environment's state after an exception is not
        trusted); an environment whose state stays consistent may continue instead."""
        message = describe_error(error)
        return StepResult(
            f"Error: the environment could not process this action ({message}).",
            0.0,
            True,
            {"success": False, "step_error": message},
        )

    def admissible_actions(self) -> list[str] | None:
        """Valid commands in the current state, or None when the environment has none."""
        return None

    def state_key(self, observation: str) -> Hashable:
        """Grouping key of a state for step-level advantages (GiGPO: the raw text)."""
        return observation

    def expert_action(self) -> str | None:
        """The next action of a built-in expert (planner, gold path), if there is one."""
        return None

    def expert_distance(self) -> int | None:
        """How many actions the built-in expert still needs from the current state to the
        goal, where it can count them (TextCraft: the planner's remaining commands); None:
        no such count, or the goal cannot be reached. ``roleagent.sft.judge_progress``
        labels steps with it."""
        return None

    def diagnose(self, trajectory: Trajectory) -> dict[str, Any] | None:
        """Rule-based failure diagnosis of a finished trajectory, if the env has one."""
        return None

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- registry ----------


@dataclass(frozen=True)
class EnvSpec:
    name: str
    factory: str  # "module:Class", imported lazily so optional extras stay optional
    requires: tuple[str, ...]  # importable modules the environment needs
    extra: str  # pip extra that installs them: pip install 'roleagent[extra]' ("": a plug-in)
    description: str
    install: str = ""  # the command that installs them, when the extra alone does not

    @property
    def install_command(self) -> str:
        """What to run to make the environment runnable (``roleagent envs``, errors)."""
        return self.install or f"pip install 'roleagent[{self.extra}]'"


_REGISTRY: dict[str, EnvSpec] = {}


def register_env(spec: EnvSpec) -> None:
    _REGISTRY[spec.name] = spec


def env_spec(name: str) -> EnvSpec:
    """The spec of ``name``: a registered environment, an entry point in the
    ``roleagent.envs`` group, or a ``"module:Class"`` reference (imported nowhere here).
    A plug-in's one requirement is its own module. Unknown names raise ``PluginError``
    with the package's "did you mean" message."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    factory = resolve("envs", name, {n: spec.factory for n, spec in _REGISTRY.items()})
    return EnvSpec(name, factory, (factory.partition(":")[0],), "", f"plug-in {factory}")


def env_specs() -> dict[str, EnvSpec]:
    """Registered environments and those installed distributions provide as entry points."""
    plugins = {name: env_spec(name) for name in entry_points("envs") if name not in _REGISTRY}
    return {**plugins, **_REGISTRY}


def module_available(module: str) -> bool:
    """``module`` can be found without importing it (a missing parent package counts as
    missing rather than raising, unlike ``importlib.util.find_spec``)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_requirements(name: str) -> list[str]:
    """Modules the environment needs that are not importable here."""
    missing = []
    for module in env_spec(name).requires:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - any import failure means "not runnable"
            missing.append(module)
    return missing


def make_env(name: str, **kwargs: Any) -> Environment:
    spec = env_spec(name)
    if spec.extra:  # a plug-in's import error is reported by ``env_class`` with its cause
        missing = missing_requirements(name)
        if missing:
            raise RuntimeError(f"environment {name!r} needs {', '.join(missing)}: {spec.install_command}")
    return instantiate(spec.factory, kwargs)


def env_class(factory: str) -> type[Environment]:
    """Import ``"module:Class"`` and check it is an :class:`Environment` subclass (the
    worker relies on its defaults: ``step_failed``, ``state_key``, the limits)."""
    cls = load_object(factory)
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise PluginError(f"{factory!r} is not a subclass of roleagent.envs.Environment")
    return cls


def instantiate(factory: str, kwargs: dict[str, Any]) -> Environment:
    """Build an environment from its ``"module:Class"`` path (what worker processes get)."""
    return env_class(factory)(**kwargs)


def factory_of(name: str) -> str:
    """The ``"module:Class"`` of ``name``; worker processes import it by this path."""
    return env_spec(name).factory
