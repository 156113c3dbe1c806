"""Name → object resolution shared by every registry (environments, engines, methods,
advantage estimators).

A registry maps short names to ``"module:attribute"`` strings, imported on first use so
that optional dependencies load only when their entry is chosen. Anything outside the
package plugs in the same way, either by spelling the reference in a recipe
(``env.name: mypkg.envs:MyEnv``) or through a Python entry point in the registry's group
(``[project.entry-points."roleagent.envs"] myenv = "mypkg.envs:MyEnv"``)::

    >>> load_object("collections:OrderedDict").__name__
    'OrderedDict'
    >>> is_reference("mypkg.envs:MyEnv"), is_reference("alfworld")
    (True, False)
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from importlib import metadata
from typing import Any

#: Entry-point groups, one per registry.
GROUPS = {
    "envs": "roleagent.envs",
    "engines": "roleagent.engines",
    "methods": "roleagent.methods",
    "estimators": "roleagent.estimators",
}


class PluginError(LookupError):
    """A name that no registry, entry point or importable ``module:attribute`` provides."""


def is_reference(name: str) -> bool:
    """``"module.path:Attribute"``: an explicit import reference rather than a short name."""
    module, sep, attribute = name.partition(":")
    return bool(
        sep
        and module
        and attribute
        and all(p.isidentifier() for p in module.split("."))
        and all(p.isidentifier() for p in attribute.split("."))
    )


def load_object(reference: str) -> Any:
    """Import ``"module:attr.sub"`` and return the attribute; a clear error otherwise."""
    if not is_reference(reference):
        raise PluginError(f"{reference!r} is not a 'module:attribute' reference")
    module_name, _, attribute = reference.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise PluginError(f"cannot import {module_name!r} for {reference!r}: {error}") from error
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"module {module_name!r} has no attribute {attribute!r}") from None
    return obj


def entry_points(kind: str) -> dict[str, str]:
    """``{name: "module:attr"}`` registered by installed distributions for ``kind``."""
    return {ep.name: ep.value for ep in metadata.entry_points(group=GROUPS[kind])}


def resolve(kind: str, name: str, registry: dict[str, str]) -> str:
    """The ``module:attr`` reference for ``name``: a registered short name, an entry point,
    or an explicit reference. Unknown names raise :class:`PluginError` with a suggestion."""
    if name in registry:
        return registry[name]
    found = entry_points(kind)
    if name in found:
        return found[name]
    if is_reference(name):
        return name
    raise PluginError(unknown(kind[:-1], name, [*registry, *found]))


def unknown(what: str, name: str, known: Iterable[str]) -> str:
    """``unknown env 'alfwrld'; did you mean 'alfworld'? (known: ...)`` — the one
    "did you mean" message of the package."""
    known = sorted(set(known))
    return f"unknown {what} {name!r}{did_you_mean(name, known)} (known: {', '.join(known)}; or 'module:Class')"


def did_you_mean(name: str, known: Iterable[str], prefix: str = "") -> str:
    """``"; did you mean 'alfworld'?"`` for the closest known name, or ``""``::

    >>> did_you_mean("lrr", ["lr", "seed"], prefix="optim.")
    "; did you mean 'optim.lr'?"
    """
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {prefix + close[0]!r}?" if close else ""
