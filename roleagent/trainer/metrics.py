"""Metrics to ``metrics.jsonl`` (one JSON object per record) and to the TensorBoard, W&B and
trackio sinks that ``report_to`` names (as in TRL). One rule for every sink: ``report_to``
defaults to ``[jsonl]``, and a sink it names whose package is not installed is a config
error naming its install command (:func:`check_report_to`), never skipped.

Exactly once across kills: a checkpoint stores :meth:`MetricsWriter.position` (byte length
and SHA-256 of the file so far); a resumed run rewinds the file (:meth:`MetricsWriter.rewind`) to
it, dropping records written after the checkpoint (they are written again), and a run
started from iteration 0 resets it (:meth:`MetricsWriter.reset`). TensorBoard event files are
append-only: a resumed run's re-done steps appear twice there (the viewer shows the last);
so are W&B's and trackio's histories (a resumed run starts a new tracker run).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import resource
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roleagent import algos
from roleagent.stats import wilson_interval
from roleagent.trainer.advantages import state_group_sizes, zero_variance_fraction
from roleagent.types import Trajectory


class MetricsWriter:
    """``metrics.jsonl`` always; TensorBoard events (``tensorboard``); and the optional
    trackers of ``report_to`` (:data:`TRACKERS`: ``wandb``, ``trackio``)."""

    def __init__(
        self, run_dir: Path, *, tensorboard: bool = False, report_to: Sequence[str] = (), config: dict | None = None
    ):
        self.path = run_dir / "metrics.jsonl"
        self._tb = None
        if tensorboard:  # installed: check_report_to
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        self._trackers = [TRACKERS[name](run_dir, config or {}) for name in report_to if name in TRACKERS]

    @classmethod
    def from_config(cls, cfg) -> MetricsWriter:
        """The writer of a :class:`~roleagent.config.TrainConfig` (its ``report_to``)."""
        from roleagent.config import to_dict

        tensorboard = "tensorboard" in cfg.report_to
        return cls(Path(cfg.run_dir), tensorboard=tensorboard, report_to=cfg.report_to, config=to_dict(cfg))

    def write(self, record: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with self.path.open("a") as f:
            f.write(json.dumps(clean) + "\n")
        if self._tb is not None and "iteration" in record:
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._tb.add_scalar(key, value, record["iteration"])
            self._tb.flush()
        if self._trackers:
            scalars = tracker_scalars(record)
            for tracker in self._trackers:
                tracker.log(scalars)

    def position(self) -> dict[str, Any]:
        """``{"bytes": n, "sha256": h}`` of the file as written so far."""
        data = self.path.read_bytes() if self.path.exists() else b""
        return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def rewind(self, position: dict[str, Any]) -> int:
        """Cut the file back to ``position`` (from a checkpoint); returns the bytes dropped.
        Raises :class:`~roleagent.trainer.checkpoint.CheckpointError` (a run directory error:
        one line from the CLI) naming the file if its first ``position["bytes"]`` bytes are
        not the ones the checkpoint saw (the file was lost, truncated or edited)."""
        from roleagent.trainer.checkpoint import CheckpointError

        data = self.path.read_bytes() if self.path.exists() else b""
        n = int(position["bytes"])
        if len(data) < n or hashlib.sha256(data[:n]).hexdigest() != position["sha256"]:
            raise CheckpointError(
                f"{self.path} does not start with the {n} bytes the checkpoint recorded "
                f"(it has {len(data)}): the file was lost, truncated or edited; restore it, "
                "or start the run over (--no-resume, or a new run_dir)"
            )
        if len(data) > n:
            with self.path.open("r+b") as f:
                f.truncate(n)
                os.fsync(f.fileno())
        return len(data) - n

    def reset(self) -> None:
        """Start an empty file (a run starting at iteration 0)."""
        self.path.write_bytes(b"")

    def records(self) -> list[dict[str, Any]]:
        """The records so far (lines that do not parse are skipped: a torn last line)."""
        out = []
        for line in self.path.read_text().splitlines() if self.path.exists() else []:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        for tracker in self._trackers:
            tracker.close()
        self._trackers = []


def tracker_scalars(record: dict[str, Any]) -> dict[str, float]:
    """A record's finite numbers for a tracker; an evaluation record's keys name its panel
    (``{"eval": "after", "split": "valid_seen", "eval/success": 0.5}`` →
    ``{"eval/valid_seen/success": 0.5}``), an iteration record keeps ``iteration``."""
    split = record.get("split")
    out = {}
    for key, value in record.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[key.replace("eval/", f"eval/{split}/", 1) if split and key.startswith("eval/") else key] = value
    return out


class WandbTracker:
    """Weights & Biases (``pip install 'roleagent[wandb]'``); ``WANDB_MODE=offline``
    writes the run under ``run_dir/wandb`` without a network; ``WANDB_PROJECT`` names the
    project (default ``roleagent``)."""

    def __init__(self, run_dir: Path, config: dict):
        import wandb

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "roleagent"),
            name=Path(run_dir).name,
            dir=str(run_dir),
            config=config,
            reinit=True,
        )

    def log(self, scalars: dict[str, float]) -> None:
        self.run.log(scalars)

    def close(self) -> None:
        self.run.finish()


class TrackioTracker:
    """trackio (``pip install 'roleagent[trackio]'``): a local, W&B-compatible tracker;
    runs are kept in its local database (``TRACKIO_DIR``), project ``TRACKIO_PROJECT``
    (default ``roleagent``)."""

    def __init__(self, run_dir: Path, config: dict):
        import trackio

        self.run = trackio.init(
            project=os.environ.get("TRACKIO_PROJECT", "roleagent"),
            name=Path(run_dir).name,
            config=config,
            auto_log_cpu=False,  # no background sampling thread
            auto_log_gpu=False,
        )

    def log(self, scalars: dict[str, float]) -> None:
        self.run.log(scalars)

    def close(self) -> None:
        self.run.finish()


#: Optional trackers of ``report_to`` (module to import, class); ``jsonl`` is always written
#: and ``tensorboard`` is the writer's own.
TRACKERS = {"wandb": WandbTracker, "trackio": TrackioTracker}
REPORT_TO = ("jsonl", "tensorboard", *TRACKERS)
#: The module each optional sink needs; its pip extra has the sink's name (pyproject.toml).
SINK_MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def check_report_to(report_to: Sequence[str]) -> None:
    """``report_to`` names known sinks, once each, with ``jsonl`` (the run's own record,
    which resuming relies on); every other sink named is installed, else the error names
    its install command (one rule for all sinks). Raises ``ConfigError``."""
    from roleagent.fields import ConfigError

    unknown = [name for name in report_to if name not in REPORT_TO]
    if unknown:
        raise ConfigError(f"report_to: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(REPORT_TO)}")
    if len(set(report_to)) != len(report_to):
        raise ConfigError(f"report_to={list(report_to)}: a sink is named twice")
    if "jsonl" not in report_to:
        raise ConfigError("report_to must include 'jsonl': metrics.jsonl is the run's record (checkpoints rely on it)")
    for name in report_to:
        if name in SINK_MODULES and importlib.util.find_spec(SINK_MODULES[name]) is None:
            raise ConfigError(
                f"report_to: {name} is not installed: pip install 'roleagent[{name}]' (or drop it from report_to)"
            )


def reuse_metrics(stats) -> dict[str, float]:
    """What the rollouts computed and what they reused (a :class:`roleagent.rollout.RolloutStats`):
    ``rollout/prefilled_prompt_tokens`` (prompt tokens the engine ran through the model),
    ``rollout/reused_prompt_tokens`` (prompt tokens whose stored KV it reused instead;
    0 without ``rollout.prefix_cache_tokens``), ``rollout/prefix_cache_mib`` (the KV it
    holds after the rollouts) and ``rollout/context_restarts`` (``rollout.context=full``
    chats restarted from the window prompt at ``rollout.max_prompt_tokens``)."""
    return {
        "rollout/prefilled_prompt_tokens": stats.prompt_tokens,
        "rollout/reused_prompt_tokens": stats.reused_prompt_tokens,
        "rollout/prefix_cache_mib": stats.prefix_cache_bytes / 2**20,
        "rollout/context_restarts": stats.context_restarts,
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def finished_counts(trajectories: Sequence[Trajectory]) -> tuple[int, int]:
    """(successes, finished episodes): crashed episodes count in neither."""
    finished = [bool(t.success) for t in trajectories if not t.crashed]
    return sum(finished), len(finished)


def success_metrics(trajectories: list[Trajectory], prefix: str = "") -> dict[str, float]:
    """Success among the episodes that ended (a crash is the machine's fault, not a
    failure): ``success`` = successes / episodes (NaN if every episode crashed), the counts
    ``successes`` and ``episodes`` (finished episodes), and the 95 % Wilson interval
    ``success_ci_low`` / ``success_ci_high`` (fractions; [0, 1] without a finished episode).

    Example: 3 successes, 1 failure, 1 crash → success 0.75, successes 3, episodes 4,
    interval (0.3006, 0.9544).
    """
    k, n = finished_counts(trajectories)
    low, high = wilson_interval(k, n)
    return {
        f"{prefix}success": k / n if n else math.nan,
        f"{prefix}successes": k,
        f"{prefix}episodes": n,
        f"{prefix}success_ci_low": low,
        f"{prefix}success_ci_high": high,
    }


def rollout_metrics(trajectories: list[Trajectory], prefix: str = "") -> dict[str, float]:
    """Success with its counts and interval (:func:`success_metrics`), return, length,
    valid-action ratio, crashed fraction (a method's own records: its ``after_iteration``)."""
    if not trajectories:
        return {}
    steps = [s for t in trajectories for s in t.steps]

    def share(flags: list[bool]) -> float:  # of all steps; 0.0 when there are none
        return float(np.mean(flags)) if flags else 0.0

    out = {
        **success_metrics(trajectories, prefix),
        f"{prefix}return": float(np.mean([t.episode_return for t in trajectories])),
        f"{prefix}length": float(np.mean([len(t.steps) for t in trajectories])),
        f"{prefix}valid_action_ratio": share([s.valid for s in steps]),
        # parsed AND taken by the environment (``info["action_valid"]``: ALFWorld's "Nothing
        # happens.", a search action outside Search-R1's format, a BFCL call that failed to parse)
        f"{prefix}accepted_action_ratio": share([s.valid and s.info.get("action_valid") is not False for s in steps]),
        f"{prefix}crashed": float(np.mean([t.crashed for t in trajectories])),
        f"{prefix}projected_action_ratio": share(["projected_from" in s.info for s in steps]),
    }

    return out


def advantage_metrics(batch, estimate) -> dict[str, float]:
    """What the advantage estimator computed for an iteration's batch (a
    :class:`roleagent.trainer.advantages.StepBatch` and its final
    :class:`~roleagent.trainer.advantages.Advantages`, after the methods' adjustments):

    - ``train/zero_variance_groups``: share of episode groups with one score (no GRPO signal);
    - ``train/advantage_abs_mean`` / ``train/advantage_std``: mean |A| and std of A per step;
    - ``train/advantage_<part>_abs_mean``: mean |part| per named part (``episode``, ``step``);
    - ``train/anchor_group_size_mean``: step samples per state (anchor) group, and
      ``train/anchor_grouped_step_frac``: share of steps in a group of more than one member
      (GiGPO's step credit, Feng et al., 2025, arXiv 2505.10978, is 0 in a group of one);
    - ``train/same_action_step_frac``: share of steps in a group of two or more that all took
      the same action (``algo.same_action_groups``).

    Worked example: state groups ``[0, 1, 0]`` → sizes ``[2, 1, 2]``: 3 steps in 2 groups,
    mean size 1.5, grouped fraction 2/3.
    """
    value = np.asarray(estimate.value, dtype=np.float64)
    out = {
        "train/zero_variance_groups": zero_variance_fraction(batch),
        "train/advantage_abs_mean": float(np.abs(value).mean()) if len(value) else 0.0,
        "train/advantage_std": float(value.std()) if len(value) else 0.0,
    }
    for name, part in estimate.parts.items():
        out[f"train/advantage_{name}_abs_mean"] = float(np.abs(part).mean()) if len(part) else 0.0
    if estimate.state_group is not None and len(estimate.state_group):
        sizes = state_group_sizes(estimate.state_group)
        out["train/anchor_group_size_mean"] = float(len(sizes) / len(np.unique(estimate.state_group)))
        out["train/anchor_grouped_step_frac"] = float(np.mean(sizes > 1))
        if len(batch.actions) == len(estimate.state_group):
            agree = algos.same_action_groups(estimate.state_group, batch.actions)
            out["train/same_action_step_frac"] = float(np.mean(agree))
    return out
