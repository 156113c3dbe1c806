"""Metrics to ``metrics.jsonl`` (one JSON object per record) and, when installed, TensorBoard."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

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
    }
    per_traj = [
        np.nanmean(scores) for t in trajectories
        if (scores := [x for s in t.steps for x in s.prediction_scores if not math.isnan(x)])
    ]
    if per_traj:
        successes = [t.success for t in trajectories
                     if any(not math.isnan(x) for s in t.steps for x in s.prediction_scores)]
        out[f"{prefix}wia_score"] = float(np.mean(per_traj))
        out[f"{prefix}wia_success_corr"] = point_biserial(np.asarray(per_traj), np.asarray(successes, dtype=float))
    return out


def point_biserial(scores: np.ndarray, outcomes: np.ndarray) -> float:
    """Pearson correlation of a score with a 0/1 outcome (Role-Agent App. B.2); NaN if either is constant."""
    if len(scores) < 2 or scores.std() == 0 or outcomes.std() == 0:
        return float("nan")
    return float(np.corrcoef(scores, outcomes)[0, 1])
