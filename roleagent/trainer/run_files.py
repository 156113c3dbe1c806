"""The run directory's files besides the checkpoints: ``metrics.jsonl`` and the methods'
files made exactly-once at the start of ``Trainer.run``, the rollout dumps
(``rollouts/*.jsonl``), ``eval_table.txt`` / ``summary.json``, and the console line of an
iteration."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from roleagent.config import TrainConfig
from roleagent.evaluation import crashed_count, format_table, success_by_type
from roleagent.stats import format_rate, paired_test, wilson_interval
from roleagent.trainer.checkpoint import CheckpointError, checkpoint_candidates
from roleagent.trainer.metrics import MetricsWriter, finished_counts, peak_rss_mb, rollout_metrics, success_metrics
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


Outcome = bool | None  # a game's success; None: its episode crashed (after the replays)


@dataclass
class EvalResult:
    label: str
    trajectories: list[Trajectory]
    table: dict[str, float] = field(default_factory=dict)
    split: str = ""  # the panel's split ("": the run's env.eval_split, as in older checkpoints)
    record: dict[str, Any] = field(default_factory=dict)  # its metrics.jsonl record
    # (task id, greedy success) per panel game in panel order; None: not recorded (older runs)
    outcomes: list[tuple[str, Outcome]] | None = None
    # (task id, successes, finished episodes) of each panel game's ``samples`` sampled episodes
    sampled: list[tuple[str, int, int]] | None = None
    samples: int = 0  # eval.sampled: sampled episodes per panel game (0: none)

    @classmethod
    def of(
        cls,
        label: str,
        split: str,
        trajectories: list[Trajectory],
        labels: dict,
        replays: int,
        sampled: Sequence[list[Trajectory]] = (),
    ) -> EvalResult:
        """One panel's evaluation: its success table (``labels``: the environment's column
        names), per-game outcomes and metrics record. ``sampled``: one list of episodes per
        sample index, each in panel order like ``trajectories``."""
        table = success_by_type(trajectories, labels)
        outcomes = [(t.task.id, None if t.crashed else bool(t.success)) for t in trajectories]
        per_game = [(t.task.id, *finished_counts(episodes)) for t, episodes in zip(trajectories, zip(*sampled))]
        record = {
            "eval": label,
            "split": split,
            **rollout_metrics(trajectories, prefix="eval/"),
            **{f"eval/success_{k}": v for k, v in table.items()},
            "eval/crashed_episodes": crashed_count(trajectories),
            "eval/replayed_episodes": replays,
            "eval/outcomes": [None if o is None else int(o) for _, o in outcomes],
        }
        if sampled:
            record.update(success_metrics([t for episodes in sampled for t in episodes], prefix="eval/sampled_"))
            record["eval/sampled_game_successes"] = [k for _, k, _ in per_game]
            record["eval/sampled_game_episodes"] = [n for _, _, n in per_game]
        return cls(label, trajectories, table, split, record, outcomes, per_game or None, len(sampled))

    @property
    def counts(self) -> tuple[int, int] | None:
        """(successes, finished episodes) of the greedy panel; None when not recorded."""
        if self.outcomes is None:
            return None
        done = [o for _, o in self.outcomes if o is not None]
        return sum(done), len(done)

    @property
    def sampled_counts(self) -> tuple[int, int] | None:
        """(successes, finished episodes) over all sampled episodes; None without them."""
        if not self.sampled:
            return None
        return sum(k for _, k, _ in self.sampled), sum(n for _, _, n in self.sampled)

    def row(self) -> dict[str, Any]:
        """What a checkpoint, ``finished.json`` and ``sft/evals.json`` keep (plain data;
        :meth:`restored` reads it back)."""
        return {
            "label": self.label,
            "split": self.split,
            "table": self.table,
            "outcomes": None if self.outcomes is None else [list(o) for o in self.outcomes],
            "sampled": None if self.sampled is None else [list(g) for g in self.sampled],
            "samples": self.samples,
        }

    @classmethod
    def restored(cls, row) -> EvalResult:
        """From :meth:`row` (plus its metrics ``record``, when it has one), or from an older
        checkpoint's ``(label, table[, split])``, whose per-game outcomes are unknown (no
        counts, no paired test)."""
        if not isinstance(row, dict):
            return cls(row[0], [], row[1], row[2] if len(row) > 2 else "")
        outcomes, sampled = row.get("outcomes"), row.get("sampled")
        return cls(
            row["label"],
            [],
            row["table"],
            row.get("split", ""),
            row.get("record", {}),
            None if outcomes is None else [(str(task), o) for task, o in outcomes],
            None if sampled is None else [(str(task), int(k), int(n)) for task, k, n in sampled],
            int(row.get("samples", 0)),
        )


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
    run_dir = Path(cfg.run_dir)
    if start_iteration > 0:
        dropped = metrics.rewind(position)
        if dropped and not quiet:
            print(f"dropped {dropped} bytes of {metrics.path} written after the checkpoint")
        _remove_dumps(run_dir, start_iteration)
        return
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
    _remove_dumps(run_dir, 0)
    for method in methods:
        method.start_fresh()


def _remove_dumps(run_dir: Path, start_iteration: int) -> None:
    """Delete the rollout dumps a run resumed (or started over) at ``start_iteration``
    discards, so ``view`` and the report never show iterations of a run that no longer
    exists (a longer run restarted with ``--no-resume``): iteration dumps from
    ``start_iteration`` on, evaluations after them (``eval_iterN`` with N >
    ``start_iteration``, ``eval_after``), and ``eval_before`` when it starts over. The
    warm start's ``eval_base`` and ``eval_sft`` stay: it restores them without playing."""
    for path in (run_dir / "rollouts").glob("*.jsonl"):
        stem = path.stem
        iteration = re.fullmatch(r"iter_(\d+)", stem)
        evaluated = re.fullmatch(r"eval_iter(\d+)(_.+)?", stem)
        if (
            (iteration and int(iteration.group(1)) >= start_iteration)
            or (evaluated and int(evaluated.group(1)) > start_iteration)
            or re.fullmatch(r"eval_after(_.+)?", stem)
            or (start_iteration == 0 and re.fullmatch(r"eval_before(_.+)?", stem))
        ):
            path.unlink()


def dump_trajectories(run_dir: Path, name: str, trajectories: list[Trajectory]) -> None:
    """``rollouts/<name>.jsonl``: one trajectory per line (``Trajectory.to_json``)."""
    with (run_dir / "rollouts" / f"{name}.jsonl").open("w") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_json(), default=str) + "\n")


def eval_rows(cfg: TrainConfig, evals: list[EvalResult]) -> dict[str, dict[str, EvalResult]]:
    """``{split: {row label: evaluation}}`` in evaluation order; warm-started runs name their
    rows ``base`` / ``after SFT`` / ``after RL``."""
    names = WARM_START_LABELS if cfg.sft.enabled else {}
    out: dict[str, dict[str, EvalResult]] = {}
    for e in evals:
        out.setdefault(e.split or cfg.env.eval_split, {})[names.get(e.label, e.label)] = e
    return out


def rate_entry(k: int, n: int) -> dict[str, Any]:
    """A success count in ``summary.json``: ``{"successes": 3, "episodes": 12, "ci_low":
    0.089, "ci_high": 0.532, "text": "3/12 = 25.0% [8.9, 53.2]"}`` (95 % Wilson interval)."""
    low, high = wilson_interval(k, n)
    return {"successes": k, "episodes": n, "ci_low": low, "ci_high": high, "text": format_rate(k, n)}


def paired_entry(before: tuple[str, EvalResult], after: tuple[str, EvalResult]) -> dict[str, Any]:
    """The exact McNemar test of two rows ``(label, evaluation)`` of one panel
    (:func:`roleagent.stats.paired_test`), or ``verdict: None`` and the reason when their
    per-game outcomes are unknown or not of the same games."""
    entry: dict[str, Any] = {"before": before[0], "after": after[0]}
    a, b = before[1].outcomes, after[1].outcomes
    if a is None or b is None:
        return {**entry, "verdict": None, "reason": "per-game outcomes not recorded"}
    if [task for task, _ in a] != [task for task, _ in b]:
        return {**entry, "verdict": None, "reason": "not the same games"}
    return {**entry, **asdict(paired_test([o for _, o in a], [o for _, o in b]))}


def panel_statistics(rows: dict[str, EvalResult]) -> dict[str, Any]:
    """What ``summary.json`` keeps beside one panel's table: each row's greedy success count
    (None when not recorded) and sampled one (``eval.sampled``), with 95 % Wilson intervals,
    and the paired test of each consecutive pair of rows (``base`` → ``after SFT`` →
    ``after RL``)."""
    rates: dict[str, dict[str, Any]] = {}
    for label, e in rows.items():
        rates[label] = {"greedy": rate_entry(*e.counts) if e.counts else None}
        if e.sampled_counts:
            rates[label]["sampled"] = {"samples": e.samples, **rate_entry(*e.sampled_counts)}
    pairs = list(rows.items())
    return {"rates": rates, "paired": [paired_entry(a, b) for a, b in zip(pairs, pairs[1:])]}


def statistics_lines(stats: dict[str, Any]) -> list[str]:
    """:func:`panel_statistics` as the lines under the panel's table, indented and aligned:
    ``"  base               0/12 = 0.0% [0.0, 24.2]"``, a ``"  after SFT (sampled, k=4)  …"``
    line per sampled row, and ``"  base -> after SFT  +25.0 points, b=0 c=3 of 12 games,
    p=0.25: unresolved"`` per consecutive pair."""
    lines = []
    for label, rate in stats["rates"].items():
        lines.append((label, rate["greedy"]["text"] if rate["greedy"] else "counts not recorded"))
        if sampled := rate.get("sampled"):
            lines.append((f"{label} (sampled, k={sampled['samples']})", sampled["text"]))
    for p in stats["paired"]:
        text = (
            f"no paired test ({p['reason']})"
            if p["verdict"] is None
            else f"{p['difference']:+.1f} points, b={p['b']} c={p['c']} of {p['pairs']} games, "
            f"p={p['p_value']:.3g}: {p['verdict']}"
        )
        lines.append((f"{p['before']} -> {p['after']}", text))
    width = max(len(name) for name, _ in lines)
    return [f"  {name.ljust(width)}  {text}" for name, text in lines]


#: Under the tables of ``eval_table.txt``: how to read the lines beneath each.
STATISTICS_LEGEND = (
    "k/n = success [95% Wilson interval], in %. A -> B: exact McNemar test on the games both played,\n"
    "b = solved by A and failed by B, c = the reverse; gain/loss at p < 0.05, else unresolved "
    "(unchanged: no game changed)"
)


def write_run_summary(
    cfg: TrainConfig,
    evals: list[EvalResult],
    panels: dict[str, list[Task]],
    methods: Sequence[Any],
    *,
    quiet: bool,
) -> None:
    """``eval_table.txt`` (per panel: one table row per evaluation, then each row's success
    count with its interval and the paired test of consecutive rows) and ``summary.json``
    in the run directory, then each method's own summary; prints the tables and the
    process's peak resident memory unless ``quiet``."""
    run_dir = Path(cfg.run_dir)
    by_split = eval_rows(cfg, evals)
    tables = {split: {label: e.table for label, e in rows.items()} for split, rows in by_split.items()}
    statistics = {split: panel_statistics(rows) for split, rows in by_split.items()}
    blocks = [
        "\n".join([format_table(tables[split], title=f"{cfg.env.name} {split} success (%)"), *statistics_lines(stats)])
        for split, stats in statistics.items()
    ]
    table = "\n\n".join([training_line(cfg, methods), *blocks, STATISTICS_LEGEND] if blocks else [])
    (run_dir / "eval_table.txt").write_text(table + "\n")
    first = next(iter(panels), cfg.env.eval_split)
    summary = {
        "run_dir": str(run_dir),
        "algo": cfg.algo.name,
        "evals": {e.label: e.table for e in evals if (e.split or cfg.env.eval_split) == first},  # first panel
        "eval_tasks": [t.id for t in panels.get(first, [])],
        "evals_by_split": tables,
        "statistics_by_split": statistics,
        "eval_panels": {split: [t.id for t in tasks] for split, tasks in panels.items()},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    for method in methods:
        method.write_summary(run_dir)
    if not quiet:
        print("\n" + table)
        print(f"\npeak resident memory: {peak_rss_mb():,.0f} MiB (this process, ru_maxrss)")


def training_line(cfg: TrainConfig, methods: Sequence[Any]) -> str:
    """What the ``after RL`` rows measure, above the tables: the estimator and the plug-in
    methods that ran, e.g. ``trained with: algo role_agent; methods: none`` for the main job
    (the Role-Agent paper's "w/o Agent-In-World" row: Agent-In-World is the ``aiw`` method)."""
    return f"trained with: algo {cfg.algo.name}; methods: {', '.join(m.name for m in methods) or 'none'}"


def log_line(record: dict) -> str:
    """E.g. ``{"iteration": 3, "train/success": 0.25, "train/successes": 4, "train/episodes":
    16, "update/kl": 0.0012}`` → ``"iter 3: success=4/16 kl=0.0012"`` (training success as a
    count when the record has one)."""
    shown = " ".join(
        f"{key.split('/')[-1]}={_shown(record, key)}" for key in LOG_KEYS if isinstance(record.get(key), (int, float))
    )
    return f"iter {record['iteration']}: {shown}"


def _shown(record: dict, key: str) -> str:
    if key == "train/success" and isinstance(record.get("train/episodes"), int):
        return f"{record['train/successes']}/{record['train/episodes']}"
    return f"{record[key]:.3g}"
