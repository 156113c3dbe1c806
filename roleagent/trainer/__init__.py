"""Training: the loop (``loop``), its stages (``stages``), the update (``update``), the
advantage-estimator registry (``advantages``), checkpoints, metrics."""

from roleagent.trainer.loop import Trainer

__all__ = ["Trainer"]
