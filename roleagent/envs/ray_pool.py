"""Environment slots as Ray actors (``env.backend: ray``), so environments spread over a
Ray cluster's nodes; the same interface as :class:`~roleagent.envs.workers.EnvPool`.

Each slot is one actor holding one environment, built from the environment's
``"module:Class"`` on whichever node Ray places it (the package and the environment's
dependencies must be installed on every node). Commands go to every slot first and the
answers are collected afterwards, as with worker processes. An actor that dies (its
process exits, its node goes away) or gives no answer within ``env.timeout`` seconds is
killed and started again, and the episode it was playing ends with
``info["crashed"] = True``; an error raised by a command is reported as with worker
processes (a ``step`` that raises is the action's failure, ``Environment.step_failed``;
one that raises ``EnvironmentCrashed`` is a crash, and the actor is started again).

Ray is an optional extra (``pip install 'roleagent[ray]'``). The pool joins a running
cluster when ``RAY_ADDRESS`` is set (``ray start --head`` / ``--address``), else starts a
local Ray instance with ``num_cpus`` = the slots, no dashboard and a small object store;
a Ray already initialised by the caller is used as it is.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from roleagent.envs.base import EnvironmentCrashed, instantiate
from roleagent.envs.workers import EnvPool, _handle, crash_reply

OBJECT_STORE_BYTES = 128 * 1024**2  # environment replies are small text


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError("env.backend=ray needs Ray: pip install 'roleagent[ray]'") from None
    return ray


class EnvActor:
    """Runs inside a Ray worker process: one environment, the worker's command protocol."""

    def __init__(self, factory: str, env_kwargs: dict[str, Any]):
        self.env = instantiate(factory, env_kwargs)

    def handle(self, command: str, args: tuple) -> tuple[str, Any]:
        try:
            return "ok", _handle(self.env, command, args)
        except EnvironmentCrashed as error:  # the slot restarts this actor
            return crash_reply(self.env, error)
        except Exception as error:  # noqa: BLE001 - report, keep the actor alive
            return "error", f"{type(error).__name__}: {error}\n{traceback.format_exc()}"

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.env.close()


class _RaySlot:
    """A slot whose environment lives in a Ray actor; ``send``/``receive`` as a worker process."""

    def __init__(self, factory: str, env_kwargs: dict[str, Any], timeout: float, num_cpus: float):
        self.factory, self.env_kwargs, self.timeout, self.num_cpus = factory, env_kwargs, timeout, num_cpus
        self.restarts = 0
        self._pending = None
        self._start()

    def _start(self) -> None:
        ray = _ray()
        actor = ray.remote(num_cpus=self.num_cpus, max_restarts=0)(EnvActor)
        self.actor = actor.remote(self.factory, self.env_kwargs)

    def send(self, command: str, args: tuple) -> None:
        self._pending = self.actor.handle.remote(command, args)

    def receive(self) -> tuple[str, Any]:
        ray = _ray()
        pending, self._pending = self._pending, None
        try:
            reply = ray.get(pending, timeout=self.timeout)
            if reply[0] != "crashed":
                return reply
            error = reply[1]
        except ray.exceptions.GetTimeoutError:
            error = f"TimeoutError: no answer in {self.timeout:.0f}s"
        except ray.exceptions.RayError as failure:  # the actor died (or could not be built)
            error = f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
        self.restart()
        return "crashed", error

    def restart(self) -> None:
        self.restarts += 1
        _ray().kill(self.actor, no_restart=True)
        self._start()

    def close(self) -> None:
        ray = _ray()
        try:
            ray.get(self.actor.close.remote(), timeout=5)
        except ray.exceptions.RayError:
            pass
        ray.kill(self.actor, no_restart=True)


class RayEnvPool(EnvPool):
    """:class:`EnvPool` whose slots are Ray actors (``num_cpus`` each: Ray's scheduling
    unit; 0 packs any number of environments on a node)."""

    def __init__(self, *args: Any, num_cpus: float = 1.0, **kwargs: Any):
        ray = _ray()
        self.num_cpus = num_cpus
        kwargs.pop("processes", None)
        if not ray.is_initialized():
            if os.environ.get("RAY_ADDRESS"):
                ray.init(address=os.environ["RAY_ADDRESS"])
            else:
                slots = kwargs.get("slots", 1)
                ray.init(
                    num_cpus=max(1, int(slots * num_cpus)),
                    include_dashboard=False,
                    object_store_memory=OBJECT_STORE_BYTES,
                    log_to_driver=False,
                )
        super().__init__(*args, processes=True, **kwargs)

    def _new_slot(self, factory: str, timeout: float) -> _RaySlot:
        return _RaySlot(factory, self.env_kwargs, timeout, self.num_cpus)

    def pids(self) -> list[int]:
        """The process id of each slot's actor (tests, diagnosis)."""
        ray = _ray()
        return ray.get([slot.actor.pid.remote() for slot in self._slots])
