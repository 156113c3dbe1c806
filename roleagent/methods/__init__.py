"""Training methods as plug-ins: each paper lives in one package here (``role_agent``,
``seal``, ``agent_r``, ``asl``) and plugs into the stages of the one training loop
(``roleagent.trainer.stages``) through :class:`roleagent.trainer.methods.Method`.

The interface and the registry of built-in and external methods belong to the trainer
(:mod:`roleagent.trainer.methods`); the names below are re-exported from there so that
``from roleagent.methods import Method`` keeps working.
"""

from roleagent.trainer.methods import METHODS, Method, MethodContext, build_methods, check_methods, method_classes

__all__ = ["METHODS", "Method", "MethodContext", "build_methods", "check_methods", "method_classes"]
