"""Run environments in worker processes so resets and steps never serialise a rollout.

``EnvPool`` owns one environment per slot (one slot per concurrent episode). Commands for
all slots are sent first and answers collected afterwards, so slow environments (ALFWorld
resets, JVM-backed ScienceWorld) step in parallel. A worker that dies or hangs is
restarted; the episode it was playing ends with ``info["crashed"] = True`` and the
rollout goes on. Only such infrastructure faults (a dead worker, no answer within
``timeout`` seconds, a reply that cannot be sent, a ``step`` that raises
``EnvironmentCrashed``, e.g. ScienceWorld's JVM found dead) count as crashed, and the
slot's environment is rebuilt: a ``step`` that raises anything else, or exceeds the
environment's ``step_cpu_seconds``, is the action's failure and becomes an error
observation (``Environment.step_failed``), so a policy cannot erase its own failures
from the batch. Every reply is sanitized and its observation capped
(``roleagent.envs.safety``), in worker processes and in-process alike.

Workers never touch torch, and never inherit the parent's torch threads or CUDA state: by
default (``env.start_method: forkserver``) one server process, started as cleanly as a
spawned child, imports the environment's modules once (its ``preload``), and every worker
is a fork of it, given the parent's environment variables of the moment. A 32-slot ALFWorld
pool's first reset then takes 0.25-0.30 of the time it takes with ``spawn``, where each
worker imports everything itself (``benchmarks/probe_pool_cold_start.py``, side by side).
A task that several slots reset is first prepared by one of them (``prepare_task``).
Where the platform has no forkserver (Windows), workers are spawned.

``EnvPool(..., processes=False)`` runs the same API in-process (tests, trivial envs).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from roleagent.envs.base import (
    Environment,
    EnvironmentCrashed,
    StepResult,
    env_class,
    factory_of,
    instantiate,
    make_env,
)
from roleagent.envs.safety import DeadlineExceeded, cpu_deadline, describe_error, sanitize, truncate
from roleagent.types import Task, Trajectory


@dataclass
class EnvReply:
    """What a slot reports after reset or step."""

    observation: str
    state_key: Hashable
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] | None = None
    admissible: list[str] | None = None
    crashed: bool = False


def _handle(env: Environment, command: str, args: tuple) -> Any:
    """Run one command on ``env``; every reply is sanitized (``safety.sanitize``)."""
    return sanitize(_dispatch(env, command, args))


def _reply(env: Environment, observation: str, result: StepResult | None, info: dict | None) -> EnvReply:
    observation = truncate(str(observation), env.max_observation_chars)  # sanitized by _handle
    if result is None:
        return EnvReply(observation, env.state_key(observation), info=info, admissible=env.admissible_actions())
    return EnvReply(
        observation, env.state_key(observation), float(result.reward), bool(result.done), info, env.admissible_actions()
    )


def _step(env: Environment, action: str) -> EnvReply:
    """``env.step`` under its CPU deadline. An exception raised while stepping (or while
    reading the state key and admissible actions after it) is the action's failure:
    ``env.step_failed`` turns it into an error observation, never into a crash."""
    try:
        with cpu_deadline(env.step_cpu_seconds):
            result: StepResult = env.step(action)
            return _reply(env, result.observation, result, result.info)
    except EnvironmentCrashed:
        raise  # an infrastructure fault: the slot reports a crash (``crash_reply``)
    except (Exception, DeadlineExceeded) as error:  # noqa: BLE001 - model-caused: not a crash
        result = env.step_failed(action, error)
        info = dict(result.info or {})
        info.setdefault("step_error", describe_error(error))
        try:
            return _reply(env, result.observation, result, info)
        except Exception:  # noqa: BLE001 - the state itself is broken: end the episode
            observation = truncate(str(result.observation), env.max_observation_chars)
            return EnvReply(observation, None, float(result.reward), True, info, None)


def _dispatch(env: Environment, command: str, args: tuple) -> Any:
    if command == "reset":
        task, seed = args
        observation, info = env.reset(task, seed)
        return _reply(env, observation, None, info)
    if command == "step":
        return _step(env, args[0])
    if command == "prepare_task":
        return env.prepare_task(args[0])
    if command == "expert_action":
        return env.expert_action()
    if command == "diagnose":
        return env.diagnose(args[0])
    if command == "call":  # a method the environment exposes for trainer hooks
        method, method_args = args
        if method not in env.remote_methods:
            raise ValueError(f"{type(env).__name__}.{method} is not in remote_methods")
        return getattr(env, method)(*method_args)
    raise ValueError(f"unknown worker command {command!r}")


def crash_reply(env: Environment, error: EnvironmentCrashed) -> tuple[str, str]:
    """The ``("crashed", message)`` a slot answers when ``env`` raised ``EnvironmentCrashed``,
    after closing ``env`` (best effort: the slot then rebuilds it)."""
    try:
        env.close()
    except Exception:  # noqa: BLE001 - a broken environment may not close cleanly
        pass
    return "crashed", f"EnvironmentCrashed: {error}"


START_METHODS = ("spawn", "forkserver")


def _context(start_method: str, factory: str):
    """The multiprocessing context of ``start_method`` (one of ``START_METHODS``). The
    forkserver preloads this module, the factory's and the environment's ``preload``; it
    reads that list once, when it starts, so a later pool of another environment imports
    its modules in each worker."""
    if start_method not in START_METHODS:
        raise ValueError(f"start_method must be one of {START_METHODS}, not {start_method!r}")
    if start_method not in mp.get_all_start_methods():
        start_method = "spawn"
    context = mp.get_context(start_method)
    if start_method == "forkserver":
        context.set_forkserver_preload([__name__, factory.partition(":")[0], *env_class(factory).preload])
    return context


def _worker_main(conn, factory: str, env_kwargs: dict[str, Any], environ: dict[str, str] | None = None) -> None:
    if environ is not None:  # a fork of the forkserver holds the server's variables, not the parent's
        os.environ.clear()
        os.environ.update(environ)
    env = instantiate(factory, env_kwargs)
    while True:
        try:
            command, args = conn.recv()
        except EOFError:
            break
        if command == "close":
            break
        try:
            conn.send(("ok", _handle(env, command, args)))
        except EnvironmentCrashed as error:  # the parent restarts this worker
            conn.send(crash_reply(env, error))
            return
        except Exception as error:  # noqa: BLE001 - report, keep the worker alive
            conn.send(("error", f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))
    env.close()


class _ProcessSlot:
    """A worker process that builds its environment from ``factory`` ("module:Class", the
    resolved name: a worker imports it by that name unless its forkserver preloaded it, with
    the parent's ``sys.path``)."""

    def __init__(self, factory: str, env_kwargs: dict[str, Any], timeout: float, context):
        self.factory, self.env_kwargs, self.timeout, self.context = factory, env_kwargs, timeout, context
        self.restarts = 0
        self._start()

    def _start(self) -> None:
        self.conn, child = self.context.Pipe()
        environ = dict(os.environ) if self.context.get_start_method() == "forkserver" else None
        args = (child, self.factory, self.env_kwargs, environ)
        self.process = self.context.Process(target=_worker_main, args=args, daemon=True)
        self.process.start()
        child.close()

    def send(self, command: str, args: tuple) -> None:
        try:
            self.conn.send((command, args))
        except (BrokenPipeError, OSError):
            pass  # noticed in receive()

    def receive(self) -> tuple[str, Any]:
        try:
            if not self.conn.poll(self.timeout):
                raise TimeoutError(f"no answer in {self.timeout:.0f}s")
            reply = self.conn.recv()
        except (EOFError, OSError, TimeoutError) as error:
            self.restart()
            return "crashed", f"{type(error).__name__}: {error}"
        if reply[0] == "crashed":  # the worker closed its environment and exits
            self.process.join(timeout=10)
            self.restart()
        return reply

    def restart(self) -> None:
        self.restarts += 1
        self.process.kill()
        self.process.join(timeout=5)
        self._start()

    def close(self) -> None:
        try:
            self.conn.send(("close", ()))
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()


class _LocalSlot:
    def __init__(self, env_name: str, env_kwargs: dict[str, Any]):
        self.env_name, self.env_kwargs = env_name, env_kwargs
        self.env = make_env(env_name, **env_kwargs)
        self.restarts = 0
        self._pending: tuple[str, Any] | None = None

    def send(self, command: str, args: tuple) -> None:
        try:
            self._pending = ("ok", _handle(self.env, command, args))
        except EnvironmentCrashed as error:
            self._pending = crash_reply(self.env, error)
            self.restarts += 1
            self.env = make_env(self.env_name, **self.env_kwargs)
        except Exception as error:  # noqa: BLE001
            self._pending = ("error", f"{type(error).__name__}: {error}")

    def receive(self) -> tuple[str, Any]:
        pending, self._pending = self._pending, None
        return pending

    def close(self) -> None:
        self.env.close()


class EnvPool:
    """A fixed number of environment slots, each playing one episode at a time."""

    def __init__(
        self,
        env_name: str,
        env_kwargs: dict[str, Any] | None = None,
        *,
        slots: int,
        processes: bool = True,
        timeout: float = 120.0,
        start_method: str = "forkserver",
    ):
        self.env_name = env_name
        self.env_kwargs = dict(env_kwargs or {})
        self.processes, self.start_method, self._context = processes, start_method, None
        self._in_flight: list[int] | None = None  # the slots of unanswered begin_steps
        factory = factory_of(env_name)  # a registered name, entry point or module:Class
        self._slots = [self._new_slot(factory, timeout) for _ in range(slots)]
        # One local instance answers questions that need no episode (tasks, taxonomy).
        self.meta = make_env(env_name, **self.env_kwargs)

    def _new_slot(self, factory: str, timeout: float):
        """One slot: a worker process, or in-process (``roleagent.envs.ray_pool``: a Ray actor)."""
        if self.processes:
            if self._context is None:  # once per pool: the forkserver's preload names its modules
                self._context = _context(self.start_method, factory)
            return _ProcessSlot(factory, self.env_kwargs, timeout, self._context)
        return _LocalSlot(self.env_name, self.env_kwargs)

    @property
    def size(self) -> int:
        return len(self._slots)

    @property
    def restarts(self) -> int:
        return sum(slot.restarts for slot in self._slots)

    def _call_many(self, command: str, calls: list[tuple[int, tuple]]) -> list[Any]:
        return self._receive_many(self._send_many(command, calls))

    def _send_many(self, command: str, calls: list[tuple[int, tuple]]) -> list[int]:
        if self._in_flight is not None:
            raise RuntimeError(f"{command} sent while the steps of slots {self._in_flight} are unanswered")
        for slot, args in calls:
            self._slots[slot].send(command, args)
        return [slot for slot, _ in calls]

    def _receive_many(self, slots: list[int]) -> list[tuple[str, Any]]:
        return [self._slots[slot].receive() for slot in slots]

    def reset(self, assignments: list[tuple[int, Task, int]]) -> list[EnvReply]:
        """Reset slot ``i`` to ``(task, seed)`` for each assignment; all in parallel."""
        self._prepare_shared(assignments)
        replies = self._call_many("reset", [(slot, (task, seed)) for slot, task, seed in assignments])
        out = []
        for (slot, task, seed), (status, value) in zip(assignments, replies):
            if status != "ok":
                # A reset that fails twice is a broken task or env: surface it loudly.
                retry = self._call_many("reset", [(slot, (task, seed))])[0]
                if retry[0] != "ok":
                    raise RuntimeError(f"reset of {task.id} failed: {value}")
                value = retry[1]
            out.append(value)
        return out

    def _prepare_shared(self, assignments: list[tuple[int, Task, int]]) -> None:
        """``Environment.prepare_task`` on one slot per task that several slots are about to
        reset (the tasks in parallel), so a group's shared resources are built once, not by
        each of its slots at once. A failure here is left for the reset to report."""
        if type(self.meta).prepare_task is Environment.prepare_task:
            return
        first: dict[str, tuple[int, Task]] = {}
        for slot, task, _ in assignments:
            first.setdefault(task.id, (slot, task))
        if len(first) < len(assignments):
            self._call_many("prepare_task", [(slot, (task,)) for slot, task in first.values()])

    def step(self, actions: list[tuple[int, str]]) -> list[EnvReply]:
        """Step slot ``i`` with its action for each pair; all in parallel."""
        return self.finish_steps(self.begin_steps(actions))

    def begin_steps(self, actions: list[tuple[int, str]]) -> list[int]:
        """Send the steps of :meth:`step` and return at once (the slots stepping): worker
        processes step while the caller goes on (an in-process pool steps here).
        :meth:`finish_steps` collects the replies; until then the pool refuses any other
        command (a RuntimeError)."""
        self._in_flight = self._send_many("step", [(slot, (action,)) for slot, action in actions])
        return self._in_flight

    def finish_steps(self, pending: list[int]) -> list[EnvReply]:
        """The replies of :meth:`begin_steps`, in its order."""
        if self._in_flight is not pending:
            raise RuntimeError("these steps were not the pool's last begin_steps, or were finished already")
        self._in_flight = None
        out = []
        for status, value in self._receive_many(pending):
            if status == "ok":
                out.append(value)
            else:  # the worker died, hung or could not reply: end the episode, mark it, carry on
                out.append(EnvReply("", None, 0.0, True, {"crashed": True, "error": value}, None, crashed=True))
        return out

    def expert_actions(self, slots: list[int]) -> list[str | None]:
        return [
            value if status == "ok" else None
            for status, value in self._call_many("expert_action", [(s, ()) for s in slots])
        ]

    def diagnose(self, trajectory: Trajectory) -> dict[str, Any] | None:
        return sanitize(self.meta.diagnose(trajectory))

    def diagnose_many(self, trajectories: list[Trajectory]) -> list[tuple[str, Any]]:
        """Replay-diagnose on the worker slots, ``size`` trajectories at a time, each
        answer bounded by the worker timeout (a slot that does not answer is restarted).
        Per trajectory ``("ok", diagnosis)``, ``("error", message)`` or ``("crashed",
        message)``. An in-process pool (``processes=False``) has no timeout."""
        out: list[tuple[str, Any]] = []
        for start in range(0, len(trajectories), self.size):
            chunk = trajectories[start : start + self.size]
            out.extend(self._call_many("diagnose", [(i, (t,)) for i, t in enumerate(chunk)]))
        return out

    def call_all(self, method: str, *args: Any) -> list[Any]:
        """Call ``method`` (one of the env's ``remote_methods``) on every slot and on the
        local instance, e.g. to push an updated failure profile to all workers."""
        replies = self._call_many("call", [(slot, (method, args)) for slot in range(self.size)])
        failed = [value for status, value in replies if status != "ok"]
        if failed:
            raise RuntimeError(f"{method} failed in a worker: {failed[0]}")
        return [_handle(self.meta, "call", (method, args))] + [value for _, value in replies]

    def close(self) -> None:
        for slot in self._slots:
            slot.close()
        self.meta.close()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_pool(env, *, slots: int) -> EnvPool:
    """The pool an ``EnvConfig`` asks for: worker processes (in-process with
    ``processes: false``), or Ray actors with ``backend: ray`` (``roleagent.envs.ray_pool``)."""
    if env.backend == "ray":
        from roleagent.envs.ray_pool import RayEnvPool

        return RayEnvPool(env.name, env.kwargs, slots=slots, timeout=env.timeout)
    return EnvPool(
        env.name, env.kwargs, slots=slots, processes=env.processes, timeout=env.timeout, start_method=env.start_method
    )
