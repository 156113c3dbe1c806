"""Generation engines behind one protocol (:class:`roleagent.engine.base.Engine`).

Engines are named in a registry; ``model.engine`` picks one (a short name, an entry point
in the ``roleagent.engines`` group, or ``module:Class``)::

    engine = create_engine("hf", policy, max_batch=32, max_prompt_tokens=1024)

An engine with settings declares them as a dataclass, ``config_class``, and receives them
as ``settings=``. A built-in engine's settings are a typed section of the config, named by
``config_section`` (the OpenAI-compatible client: ``server``); a plug-in engine's come from
the ``engine_settings`` mapping, checked against its ``config_class`` as a plug-in method's
are (:func:`engine_settings`).
"""

from __future__ import annotations

from typing import Any

from roleagent.engine.base import Engine, Generation, SamplingParams
from roleagent.fields import ConfigError, from_dict
from roleagent.plugins import load_object, resolve

#: Short name → ``module:Class``. The class is built as ``cls(policy, **kwargs)``, plus
#: ``settings=`` when it declares a ``config_class``.
ENGINES: dict[str, str] = {"hf": "roleagent.engine.hf:HFEngine", "openai": "roleagent.engine.openai:OpenAIEngine"}


def engine_class(name: str) -> type:
    """The class ``name`` resolves to; unknown names raise ``PluginError``."""
    return load_object(resolve("engines", name, ENGINES))


def create_engine(name: str, policy: Any, *, settings: Any = None, **kwargs: Any) -> Engine:
    """Build the engine ``name`` for ``policy``, with its ``settings`` if it declares a
    ``config_class`` (``None``: that class's defaults)."""
    cls = engine_class(name)
    if getattr(cls, "config_class", None) is None:
        if settings is not None:
            raise ConfigError(f"engine {name!r} takes no settings")
        return cls(policy, **kwargs)
    return cls(policy, settings=settings if settings is not None else cls.config_class(), **kwargs)


def engine_settings(cfg: Any) -> Any:
    """The settings of the engine ``cfg.model.engine`` names: its typed section of the config
    (``config_section``), or ``cfg.engine_settings`` checked against its ``config_class``
    (unknown keys and wrong types are :class:`ConfigError`), or ``None`` for an engine
    without settings."""
    name = cfg.model.engine
    cls = engine_class(name)
    section = getattr(cls, "config_section", None)
    if cfg.engine_settings and (section or getattr(cls, "config_class", None) is None):
        where = f"its '{section}' section" if section else "none"
        raise ConfigError(f"engine_settings: model.engine={name} takes its settings from {where}")
    if section:
        return getattr(cfg, section)
    if getattr(cls, "config_class", None) is None:
        return None
    return from_dict(cls.config_class, cfg.engine_settings, "engine_settings")


def loads_weights(name: str) -> bool:
    """Whether engine ``name`` runs the policy's weights here (an OpenAI-compatible client
    does not: the server has its own, and the client only tokenizes)."""
    return getattr(engine_class(name), "loads_weights", True)


def drop_prefix_kv(engine: Any) -> None:
    """Drop the prefix KV an engine stores between calls (``HFEngine.clear_prefix_cache``;
    engines without a store, plugins included, are left alone). What is generated does not
    change, only what must be prefilled again: call it when the stored prompts will not come
    back (an evaluation panel's) or are about to go stale (before an optimizer step), so the
    store's memory (up to ``rollout.prefix_cache_tokens`` × 45 KiB for the embedded model) is
    not held meanwhile."""
    clear = getattr(engine, "clear_prefix_cache", None)
    if clear is not None:
        clear()


__all__ = [
    "ENGINES",
    "Engine",
    "Generation",
    "SamplingParams",
    "create_engine",
    "drop_prefix_kv",
    "engine_class",
    "engine_settings",
    "loads_weights",
]
