"""The building blocks of every config section, wherever it is defined:
:class:`ConfigError`, ``setting(default, help)`` (a dataclass field carrying its help text
in ``metadata["help"]``, which ``roleagent train --explain`` prints) and the range rules
(``at_least``, ``above``, ``within``, ``one_of``: ``(accepts value, what a valid value
is)``, collected in ``roleagent.config_rules.FIELD_RULES``). Methods define their sections
next to their code (``roleagent/methods/*/config.py``) with these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A recipe or override that cannot be used; the message says what to change."""


def setting(default: Any, help: str, **kwargs: Any) -> Any:  # noqa: A002 - "help" reads best
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kwargs)
    return field(default=default, metadata={"help": help}, **kwargs)


Rule = tuple[Callable[[Any], bool], str]  # (accepts value, what a valid value is)


def at_least(low: float) -> Rule:
    return (lambda v: v >= low), f">= {low}"


def above(low: float) -> Rule:
    return (lambda v: v > low), f"> {low}"


def within(low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> Rule:
    def ok(v: float) -> bool:
        return (v > low if open_low else v >= low) and (v < high if open_high else v <= high)

    return ok, f"in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"


def one_of(*options: str) -> Rule:
    return (lambda v: v in options), "one of " + " | ".join(options)


#: The most episodes one iteration may play (``rollout.tasks_per_iter * rollout.group_size``):
#: each has its own environment slot, a worker process with ``env.processes``.
MAX_EPISODES = 4096
#: The largest value of any other count (steps, tokens, tasks, epochs): beyond it, a typo.
MAX_COUNT = 2**24


def count(low: int, high: int = MAX_COUNT) -> Rule:
    """An integer count in ``[low, high]``: a bound that catches ``1e11`` before it allocates."""
    return within(low, high)


def check_episodes(rollout: Any) -> None:
    """The episodes of an iteration fit :data:`MAX_EPISODES` (a ``RolloutConfig``)."""
    episodes = rollout.tasks_per_iter * rollout.group_size
    if episodes > MAX_EPISODES:
        raise ConfigError(
            f"rollout.tasks_per_iter * rollout.group_size = {episodes} episodes per iteration, more than "
            f"{MAX_EPISODES}: each episode is an environment slot (a worker process with env.processes)"
        )


NONEMPTY: Rule = (lambda v: bool(str(v).strip())), "a non-empty string"
#: A folder to write into: a non-empty path that is not a file and has no file on its way.
FOLDER: Rule = (
    lambda v: bool(v.strip()) and not any(p.is_file() for p in (Path(v).expanduser(), *Path(v).expanduser().parents)),
    "a folder path (not a file, nor inside one)",
)
