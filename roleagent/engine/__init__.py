"""Generation engines behind one protocol (:class:`roleagent.engine.base.Engine`).

Engines are named in a registry; ``model.engine`` picks one (a short name, an entry point
in the ``roleagent.engines`` group, or ``module:Class``)::

    engine = create_engine("hf", policy, max_batch=32, max_prompt_tokens=1024)
"""

from __future__ import annotations

from typing import Any

from roleagent.engine.base import Engine, Generation, SamplingParams
from roleagent.plugins import load_object, resolve

#: Short name → ``module:Class``. The class is built as ``cls(policy, **kwargs)``.
ENGINES: dict[str, str] = {"hf": "roleagent.engine.hf:HFEngine", "openai": "roleagent.engine.openai:OpenAIEngine"}


def create_engine(name: str, policy: Any, **kwargs: Any) -> Engine:
    """Build the engine ``name`` for ``policy``; unknown names raise ``PluginError``."""
    return load_object(resolve("engines", name, ENGINES))(policy, **kwargs)


def loads_weights(name: str) -> bool:
    """Whether engine ``name`` runs the policy's weights here (an OpenAI-compatible client
    does not: the server has its own, and the client only tokenizes)."""
    return getattr(load_object(resolve("engines", name, ENGINES)), "loads_weights", True)


__all__ = ["ENGINES", "Engine", "Generation", "SamplingParams", "create_engine", "loads_weights"]
