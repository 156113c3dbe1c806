"""Training: the loop (``loop``), the update (``update``), advantages, checkpoints, metrics."""

from roleagent.trainer.loop import Trainer

__all__ = ["Trainer"]
