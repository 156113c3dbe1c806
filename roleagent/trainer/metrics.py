"""Metrics to ``metrics.jsonl`` (one JSON object per record) and, when installed, TensorBoard."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from roleagent.aiw.analysis import point_biserial
from roleagent.types import Trajectory


class MetricsWriter:
    def __init__(self, run_dir: Path, *, tensorboard: bool = True):
        self.path = run_dir / "metrics.jsonl"
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(run_dir / "tensorboard"))
            except Exception:  # noqa: BLE001 - tensorboard is optional
                self._tb = None

    def write(self, record: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with self.path.open("a") as f:
            f.write(json.dumps(clean) + "\n")
        if self._tb is not None and "iteration" in record:
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._tb.add_scalar(key, value, record["iteration"])
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def rollout_metrics(trajectories: list[Trajectory], prefix: str = "") -> dict[str, float]:
    """Success, return, length, valid-action ratio, crashes; WIA score and its link to success."""
    if not trajectories:
        return {}
    steps = [s for t in trajectories for s in t.steps]
    out = {
        f"{prefix}success": float(np.mean([t.success for t in trajectories])),
        f"{prefix}return": float(np.mean([t.episode_return for t in trajectories])),
        f"{prefix}length": float(np.mean([len(t.steps) for t in trajectories])),
        f"{prefix}valid_action_ratio": float(np.mean([s.valid for s in steps])) if steps else 0.0,
        f"{prefix}crashed": float(np.mean([t.crashed for t in trajectories])),
        f"{prefix}projected_action_ratio": float(np.mean(["projected_from" in s.info for s in steps])) if steps else 0.0,
    }
    per_traj = [
        np.nanmean(scores) for t in trajectories
        if (scores := [x for s in t.steps for x in s.prediction_scores if not math.isnan(x)])
    ]
    if per_traj:
        successes = [t.success for t in trajectories
                     if any(not math.isnan(x) for s in t.steps for x in s.prediction_scores)]
        out[f"{prefix}wia_score"] = float(np.mean(per_traj))
        # Role-Agent App. B.2: point-biserial correlation of the predictive reward with success.
        out[f"{prefix}wia_success_corr"] = point_biserial(per_traj, successes)[0]
    return out
