"""What a method adds to every turn of a rollout, and when the environments step meanwhile.

A rollout extension (:class:`RolloutExtension`, ``Method.rollout_extension``) makes one more
batched generation per turn from what the turn chose (:class:`Turn`), e.g. World-In-Agent's
predictions of the next observations (``roleagent.methods.role_agent.wia``), and sees every
finished trajectory. Its generations need only the chosen actions, not what the environment
answers, so a turn's environment steps may run in the worker processes while the engine
generates them (:func:`extend_and_step`, ``rollout.overlap_env``):

- ``always``: the steps are sent before the extensions' generations and collected after
  them; the outputs are the same as in the sequential order;
- ``never``: the steps are sent after the generations, so environment processes never share
  the cores with torch;
- ``auto`` (the default): ``always`` when the engine decodes elsewhere than on this machine's
  CPU (a GPU, or a server), else ``never``. On a 2-core CPU the overlap hid 3 s of an ALFWorld
  World-In-Agent iteration's environment time and slowed its prediction pass by 4–10 s, the
  workers taking CPU time from torch (``benchmarks/RESULTS.md``, "Iteration cost"); on a GPU
  the environments took about as long as generation.

``RolloutStats.env_s`` counts only the time the loop waited for the environments.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from roleagent.engine.base import Engine
    from roleagent.envs.workers import EnvPool, EnvReply
    from roleagent.types import Trajectory


@dataclass
class Turn:
    """What a rollout extension sees of one episode's turn: the state and the chosen action."""

    instruction: str
    observation: str
    action: str | None
    valid: bool
    prompt_ids: list[int] = field(default_factory=list)  # the actor's prompt of this turn
    action_ids: list[int] = field(default_factory=list)  # the ids it generated (as sampled)


class RolloutExtension(Protocol):
    """A method's extra batched generation per turn (``Method.rollout_extension``)."""

    name: str  # the step.extras key of its records

    def after_actions(self, engine: Engine, turns: Sequence[Turn]) -> list[dict[str, Any] | None]:
        """One record per turn (None: nothing to record), from at most one batched call."""
        ...

    def finish(self, trajectory: Trajectory) -> None:
        """Called once per finished episode of the wave."""
        ...


def overlaps_env(mode: str, engine: Engine) -> bool:
    """Whether a turn's environment steps run during the extensions' generations
    (``overlap_env``: the module docstring; a server engine has no local ``policy``)."""
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"overlap_env={mode!r}: choose auto, always or never")
    if mode != "auto":
        return mode == "always"
    device = getattr(getattr(engine, "policy", None), "device", None)
    return device is None or getattr(device, "type", str(device)) != "cpu"


def extend_and_step(
    engine: Engine,
    pool: EnvPool,
    turns: Sequence[Turn],
    to_step: list[tuple[int, str]],
    extensions: Sequence[RolloutExtension],
    overlap: bool,
    stats,
) -> tuple[list[tuple[str, list]], list[EnvReply]]:
    """Each extension's records of ``turns`` (``(name, one record per turn)``) and the
    environments' replies to ``to_step`` (``(slot, action)`` pairs, in order); with
    ``overlap`` the steps run during the generations. Times go to ``stats``."""
    started = time.perf_counter()
    pending = pool.begin_steps(to_step) if to_step and overlap else None
    stats.env_s += time.perf_counter() - started
    started = time.perf_counter()
    try:
        records = [(ext.name, ext.after_actions(engine, turns)) for ext in extensions]
    except BaseException:
        if pending is not None:
            pool.finish_steps(pending)  # collect the workers' replies: the pool stays usable
        raise
    stats.extension_s += time.perf_counter() - started
    started = time.perf_counter()
    if pending is not None:
        replies = pool.finish_steps(pending)
    else:
        replies = pool.step(to_step) if to_step else []
    stats.env_s += time.perf_counter() - started
    return records, replies
