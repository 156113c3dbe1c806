"""Training: the loop (``loop``), its stages (``stages``), the methods' plug-in interface
and registry (``methods``), the update (``update``), the advantage-estimator registry
(``advantages``), checkpoints, metrics.

``Trainer`` is imported on first use, so that a plug-in importing the interface
(``roleagent.trainer.methods``) does not load the whole loop, and the configuration, which
imports the method sections, can be imported by the loop.
"""

from typing import Any

__all__ = ["Trainer"]


def __getattr__(name: str) -> Any:
    if name == "Trainer":
        from roleagent.trainer.loop import Trainer

        return Trainer
    raise AttributeError(f"module 'roleagent.trainer' has no attribute {name!r}")
