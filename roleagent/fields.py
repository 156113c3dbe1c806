"""The building blocks of every config section, wherever it is defined:
:class:`ConfigError`, ``setting(default, help)`` (a dataclass field carrying its help text
in ``metadata["help"]``, which ``roleagent train --explain`` prints) and the range rules
(``at_least``, ``above``, ``within``, ``one_of``: ``(accepts value, what a valid value
is)``, collected in ``roleagent.config_rules.FIELD_RULES``), and :func:`from_dict`, which builds a
section from a mapping (unknown keys and wrong types are errors). Methods define their
sections next to their code (``roleagent/methods/*/config.py``) with these; the trainer
checks a plug-in method's settings with :func:`from_dict` too."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

from roleagent.plugins import did_you_mean


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


def from_dict(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """Build dataclass ``cls`` from a nested dict; unknown keys and bad types are errors."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in fields:
            hint = did_you_mean(key, fields, prefix=where + "." if where else "")
            raise ConfigError(f"unknown config key {path!r}{hint}")
        kwargs[key] = _coerce(hints[key], value, path)
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value or {}, path)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(options[0], value, path)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    expected = origin or hint
    if expected in (dict, list) and isinstance(value, expected):
        return value
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ConfigError(f"{path}: expected {getattr(expected, '__name__', expected)}, got {value!r}")
    return value
