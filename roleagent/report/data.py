"""What the report reads from a run directory (read-only): ``metrics.jsonl``,
``config.yaml``, ``rollouts/*.jsonl`` and Agent-In-World's ``failure_memory.sqlite``.

Rollouts are shortened for the page (:func:`slim_trajectory`): long texts are cut at
``max_chars`` and token data is never read; everything else a step carries (the
advantage and its parts, the state group and its size, World-In-Agent's predictions and
scores, SEAL's weight and turn labels) is kept as it is; the prompt chats are left out.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from roleagent.sqlite_copy import database_copy

#: Failure-memory columns shown with a task's rollouts.
FAILURE_COLUMNS = ("task_id", "iteration", "dominant_type", "critical_step", "core_lesson", "detail", "source")


#: Step records not put on the page: the prompt chat a step was generated from (whole
#: prompts, read them with ``roleagent view --index``).
PAGE_LEFT_OUT = frozenset({"chat"})


class ReportError(ValueError):
    """A path given to the report is not a run directory it can read."""


@dataclass
class RunData:
    name: str
    path: Path
    config: dict[str, Any] = field(default_factory=dict)
    train: list[dict[str, Any]] = field(default_factory=list)  # one record per iteration
    evals: list[dict[str, Any]] = field(default_factory=list)  # one record per evaluation panel
    rollouts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # file stem → trajectories
    failures: list[dict[str, Any]] = field(default_factory=list)  # Agent-In-World's failure memory
    skipped_files: list[str] = field(default_factory=list)  # rollout files left out (max_files)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a file, one a line; a line that does not parse (a torn last
    line) is skipped."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def slim_trajectory(record: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """A dumped trajectory for the page: texts cut at ``max_chars``, NaN scores → null,
    ``info`` reduced to what is not the admissible-action list."""

    def cut(text: Any) -> str:
        text = "" if text is None else str(text)
        return text if len(text) <= max_chars else text[:max_chars] + f" … [{len(text) - max_chars} more chars]"

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, str):
            return cut(value)
        return _finite(value)

    steps = []
    for step in record.get("steps", []):
        info = {k: v for k, v in (step.get("info") or {}).items() if k != "admissible_actions"}
        steps.append(
            {
                "observation": cut(step.get("observation")),
                "action_text": cut(step.get("action_text")),
                "action": step.get("action"),
                "valid": bool(step.get("valid", True)),
                "reward": _finite(step.get("reward", 0.0)),
                "penalty": _finite(step.get("penalty", 0.0)),
                "info": clean(info),
                "extras": clean({k: v for k, v in (step.get("extras") or {}).items() if k not in PAGE_LEFT_OUT}),
            }
        )
    return {
        "task_id": str(record.get("task_id", "")),
        "seed": record.get("seed"),
        "instruction": cut(record.get("instruction")),
        "success": bool(record.get("success")),
        "crashed": bool(record.get("crashed")),
        "return": _finite(record.get("return", 0.0)),
        "final_observation": cut(record.get("final_observation")),
        "diagnosis": clean(record.get("diagnosis")),
        "extras": clean(record.get("extras") or {}),
        "steps": steps,
    }


def _iteration_of(stem: str) -> int | None:
    match = re.fullmatch(r"iter_(\d+)", stem)
    return int(match.group(1)) if match else None


def rollout_files(run: Path, max_files: int) -> tuple[list[Path], list[Path]]:
    """``(kept, skipped)``: every evaluation dump, and the last ``max_files`` iteration
    dumps (an iteration dump is written after the update, with what the algorithm computed)."""
    files = sorted((run / "rollouts").glob("*.jsonl"))
    iters = [f for f in files if _iteration_of(f.stem) is not None]
    kept_iters = iters[-max_files:] if max_files > 0 else []
    kept = [f for f in files if f not in iters] + kept_iters
    return kept, [f for f in iters if f not in kept_iters]


def read_failures(run: Path, limit: int = 2000) -> list[dict[str, Any]]:
    """Agent-In-World's failure records (opened read-only), oldest first; ``[]`` without a memory."""
    db = run / "failure_memory.sqlite"
    if not db.exists():
        return []
    try:  # a copy: a read-only (archived) run folder opens, and its -wal stays as it is
        with database_copy(db) as copy:
            conn = sqlite3.connect(copy)
            try:
                rows = conn.execute(
                    f"SELECT {', '.join(FAILURE_COLUMNS)} FROM failures ORDER BY id LIMIT ?", (limit,)
                ).fetchall()
            finally:
                conn.close()
    except (sqlite3.Error, OSError) as error:
        raise ReportError(f"{db}: cannot read the failure memory ({error})") from None
    return [dict(zip(FAILURE_COLUMNS, row)) for row in rows]


def _config(path: Path) -> dict[str, Any]:
    """The run's recorded config (``{}`` without one); :class:`ReportError` when it is not YAML."""
    config_path = path / "config.yaml"
    if not config_path.exists():
        return {}
    try:
        config = yaml.safe_load(config_path.read_text(errors="replace"))
    except yaml.YAMLError as error:
        raise ReportError(f"{config_path}: not valid YAML ({' '.join(str(error).split())})") from None
    return config if isinstance(config, dict) else {}


def _trajectories(path: Path, max_chars: int) -> list[dict[str, Any]]:
    """A rollout dump's trajectories for the page; a record that is not a dumped
    trajectory (wrong types, a hand-edited line) is skipped, as a torn line is."""
    out = []
    for record in read_jsonl(path):
        try:
            out.append(slim_trajectory(record, max_chars))
        except (AttributeError, TypeError, ValueError):
            continue
    return out


def load_run(path: Path, *, name: str | None = None, max_files: int = 10, max_chars: int = 1500) -> RunData:
    """Read one run directory; :class:`ReportError` when it has no ``metrics.jsonl``."""
    path = Path(path)
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        raise ReportError(f"{path} has no metrics.jsonl: is it a run directory?")
    records = read_jsonl(metrics)
    config = _config(path)
    kept, skipped = rollout_files(path, max_files) if (path / "rollouts").is_dir() else ([], [])
    rollouts = {f.stem: _trajectories(f, max_chars) for f in kept}
    return RunData(
        name=name or path.name,
        path=path,
        config=config,
        train=[r for r in records if isinstance(r.get("iteration"), int)],
        evals=[r for r in records if "eval" in r],
        rollouts=rollouts,
        failures=read_failures(path),
        skipped_files=[f.name for f in skipped],
    )


def unique_names(paths: list[Path]) -> list[str]:
    """Short, distinct labels for runs: the folder names, with their parents where two clash."""
    names = [Path(p).name or str(p) for p in paths]
    return [str(Path(Path(p).parent.name) / Path(p).name) if names.count(n) > 1 else n for p, n in zip(paths, names)]
