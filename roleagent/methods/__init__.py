"""Training methods as plug-ins: each paper lives in one package here and plugs into the
stages of the one training loop (``roleagent.trainer.stages``) through
:class:`~roleagent.methods.base.Method`.

Built-in methods are named by their config section and switched on by its ``enabled``
(``wia.enabled``, ``aiw.enabled``, ``seal.enabled``, ``agent_r.enabled``). Methods from outside the package are
listed in ``methods`` as ``module:Class`` or by the name of an entry point in the
``roleagent.methods`` group; their settings come from ``method_settings.<name>``, checked
against the class's ``config_class``::

    methods: [mypkg.methods:Curriculum]
    method_settings: {curriculum: {temperature: 0.5}}
"""

from __future__ import annotations

from typing import Any

from roleagent.fields import ConfigError
from roleagent.methods.base import Method, MethodContext
from roleagent.plugins import PluginError, load_object, resolve

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
        raise ConfigError(f"methods: {reference!r} is not a subclass of roleagent.methods.Method")
    return cls


def method_classes(cfg: Any) -> list[type]:
    """The enabled methods' classes: built-in ones in :data:`METHODS` order, then ``methods``."""
    built_in = [load_object(ref) for section, ref in METHODS.items() if getattr(cfg, section).enabled]
    return built_in + [external_class(ref) for ref in cfg.methods]


def _settings(cls: type, cfg: Any) -> Any:
    """The config object of an external method (``None`` without ``config_class``)."""
    from roleagent.config import from_dict

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


__all__ = ["METHODS", "Method", "MethodContext", "build_methods", "check_methods", "method_classes"]
