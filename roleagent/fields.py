"""The two building blocks of every config section, wherever it is defined:
:class:`ConfigError` and ``_f(default, help)`` (a dataclass field carrying its help text
in ``metadata["help"]``, which ``roleagent train --explain`` prints). Methods define their
sections next to their code (``roleagent/methods/*/config.py``) with these."""

from __future__ import annotations

from dataclasses import field
from typing import Any


class ConfigError(ValueError):
    """A recipe or override that cannot be used; the message says what to change."""


def _f(default: Any, help: str, **kwargs: Any) -> Any:  # noqa: A002 - "help" reads best
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kwargs)
    return field(default=default, metadata={"help": help}, **kwargs)
