"""The run directory's files besides the checkpoints: ``metrics.jsonl`` and the methods'
files made exactly-once at the start of ``Trainer.run``, the rollout dumps
(``rollouts/*.jsonl``), ``eval_table.txt`` / ``summary.json``, and the console line of an
iteration."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roleagent.config import TrainConfig
from roleagent.evaluation import crashed_count, format_table, success_by_type
from roleagent.trainer.checkpoint import CheckpointError, checkpoint_candidates
from roleagent.trainer.metrics import MetricsWriter, rollout_metrics
from roleagent.types import Task, Trajectory

#: What an iteration's console line shows (those present in the record).
LOG_KEYS = (
    "train/success",
    "train/return",
    "train/valid_action_ratio",
    "train/accepted_action_ratio",
    "train/zero_variance_groups",
    "update/samples",
    "update/kl",
    "update/clip_frac",
    "update/grad_norm",
    "time/iteration_s",
)


@dataclass
class EvalResult:
    label: str
    trajectories: list[Trajectory]
    table: dict[str, float] = field(default_factory=dict)
    split: str = ""  # the panel's split ("": the run's env.eval_split, as in older checkpoints)
    record: dict[str, Any] = field(default_factory=dict)  # its metrics.jsonl record

    @classmethod
    def of(cls, label: str, split: str, trajectories: list[Trajectory], labels: dict, replays: int) -> EvalResult:
        """One panel's evaluation: its success table (``labels``: the environment's column
        names) and its metrics record."""
        table = success_by_type(trajectories, labels)
        record = {
            "eval": label,
            "split": split,
            **rollout_metrics(trajectories, prefix="eval/"),
            **{f"eval/success_{k}": v for k, v in table.items()},
            "eval/crashed_episodes": crashed_count(trajectories),
            "eval/replayed_episodes": replays,
        }
        return cls(label, trajectories, table, split, record)

    @classmethod
    def restored(cls, row) -> EvalResult:
        """From a checkpoint's ``(label, table[, split])``."""
        return cls(row[0], [], row[1], row[2] if len(row) > 2 else "")


#: Row names of the table when the run was warm-started (``sft.enabled``).
WARM_START_LABELS = {"base": "base", "sft": "after SFT", "after": "after RL"}


def prepare_run_files(
    metrics: MetricsWriter,
    methods: Sequence[Any],
    cfg: TrainConfig,
    *,
    start_iteration: int,
    position: dict | None,
    resume: bool,
    quiet: bool,
) -> None:
    """Cut metrics (and, in ``Method.load_state_dict``, each method's files) back to the
    restored checkpoint's ``position``, or, for a run starting at iteration 0, start them
    empty (refusing when they show that checkpoints existed and are gone)."""
    if start_iteration > 0:
        dropped = metrics.rewind(position)
        if dropped and not quiet:
            print(f"dropped {dropped} bytes of {metrics.path} written after the checkpoint")
        return
    run_dir = Path(cfg.run_dir)
    if resume and not checkpoint_candidates(run_dir):
        # A record past the first save point proves a checkpoint was written.
        records = metrics.records()
        late = [
            r["iteration"]
            for r in records
            if isinstance(r.get("iteration"), int) and r["iteration"] >= cfg.checkpoint_every
        ]
        if late or (cfg.iterations > 0 and any(r.get("eval") == "after" for r in records)):
            raise CheckpointError(
                f"{metrics.path} shows that checkpoints were saved, but "
                f"{run_dir / 'checkpoints'} holds none: refusing to restart from iteration 0 "
                "over this run (restore the checkpoints, or start over with --no-resume)"
            )
    if not resume:  # starting over: an earlier run's checkpoints would outrank (and prune) the new ones
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    metrics.reset()
    for method in methods:
        method.start_fresh()


def dump_trajectories(run_dir: Path, name: str, trajectories: list[Trajectory]) -> None:
    """``rollouts/<name>.jsonl``: one trajectory per line (``Trajectory.to_json``)."""
    with (run_dir / "rollouts" / f"{name}.jsonl").open("w") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_json(), default=str) + "\n")


def eval_rows(cfg: TrainConfig, evals: list[EvalResult]) -> dict[str, dict[str, dict[str, float]]]:
    """``{split: {row label: table}}`` in evaluation order; warm-started runs name their
    rows ``base`` / ``after SFT`` / ``after RL``."""
    names = WARM_START_LABELS if cfg.sft.enabled else {}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for e in evals:
        out.setdefault(e.split or cfg.env.eval_split, {})[names.get(e.label, e.label)] = e.table
    return out


def write_run_summary(
    cfg: TrainConfig,
    evals: list[EvalResult],
    panels: dict[str, list[Task]],
    methods: Sequence[Any],
    *,
    quiet: bool,
) -> None:
    """``eval_table.txt`` (one table per panel, one row per evaluation) and
    ``summary.json`` in the run directory, then each method's own summary; prints the
    tables unless ``quiet``."""
    run_dir = Path(cfg.run_dir)
    by_split = eval_rows(cfg, evals)
    table = "\n\n".join(
        format_table(rows, title=f"{cfg.env.name} {split} success (%)") for split, rows in by_split.items()
    )
    (run_dir / "eval_table.txt").write_text(table + "\n")
    first = next(iter(panels), cfg.env.eval_split)
    summary = {
        "run_dir": str(run_dir),
        "algo": cfg.algo.name,
        "evals": {e.label: e.table for e in evals if (e.split or cfg.env.eval_split) == first},  # first panel
        "eval_tasks": [t.id for t in panels.get(first, [])],
        "evals_by_split": by_split,
        "eval_panels": {split: [t.id for t in tasks] for split, tasks in panels.items()},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    for method in methods:
        method.write_summary(run_dir)
    if not quiet:
        print("\n" + table)


def log_line(record: dict) -> str:
    """E.g. ``{"iteration": 3, "train/success": 0.25, "update/kl": 0.0012}`` →
    ``"iter 3: success=0.25 kl=0.0012"``."""
    shown = " ".join(f"{k.split('/')[-1]}={record[k]:.3g}" for k in LOG_KEYS if isinstance(record.get(k), (int, float)))
    return f"iter {record['iteration']}: {shown}"
