"""Training methods as plug-ins: each paper lives in one package here (``role_agent``,
``seal``, ``agent_r``, ``asl``) and plugs into the stages of the one training loop
(``roleagent.trainer.stages``) through :class:`roleagent.trainer.methods.Method`.

The interface and the registry of built-in and external methods belong to the trainer
(:mod:`roleagent.trainer.methods`); the names below are re-exported from there on first
use, so that ``from roleagent.methods import Method`` keeps working and importing a
method's settings (``roleagent.methods.seal.config``, which the config reads) loads no
trainer.
"""

from typing import Any

__all__ = ["METHODS", "Method", "MethodContext", "build_methods", "check_methods", "method_classes"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from roleagent.trainer import methods

        return getattr(methods, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
