"""Compatibility: the method plug-in interface lives with the trainer that calls it,
:mod:`roleagent.trainer.methods`; plug-ins written against this module keep working."""

from roleagent.trainer.methods import Chat, Method, MethodContext

__all__ = ["Chat", "Method", "MethodContext"]
