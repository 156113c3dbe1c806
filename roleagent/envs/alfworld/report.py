"""ALFWorld results in the paper's Table 1 format: Pick Look Clean Heat Cool Pick2 All.

Each cell is the success rate (%) over the episodes of that task type; "All" is the
success rate over all episodes of the panel (episode-weighted, which is how the paper's
"All" relates to its per-type columns: e.g. GiGPO 1.5B (Feng et al., 2025, arXiv 2505.10978) has per-type mean 84.6 and All
86.7), not the mean of the six columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from roleagent.envs.alfworld.scenes import SHORT_TASK_TYPES, TABLE_COLUMNS, TASK_TYPES


def _record(item: Any) -> tuple[str, bool]:
    """(task type, success) from a Trajectory, a Trajectory.to_json() dict or a plain record."""
    if hasattr(item, "task") and hasattr(item, "success"):
        return item.task.metadata.get("task_type", ""), bool(item.success)
    if isinstance(item, Mapping):
        tt = item.get("task_type") or (item.get("metadata") or {}).get("task_type", "")
        return tt, bool(item.get("success", item.get("won", False)))
    tt, success = item  # (task_type, success) pair
    return tt, bool(success)


def success_rates(records: Iterable[Any]) -> dict[str, tuple[float | None, int]]:
    """Per column name (Pick ... Pick2, All): (success %, number of episodes)."""
    counts = {tt: [0, 0] for tt in TASK_TYPES}
    total = [0, 0]
    for item in records:
        tt, ok = _record(item)
        tt = SHORT_TASK_TYPES.get(tt, tt)
        if tt in counts:
            counts[tt][0] += int(ok)
            counts[tt][1] += 1
        total[0] += int(ok)
        total[1] += 1
    out: dict[str, tuple[float | None, int]] = {}
    for tt in TASK_TYPES:
        s, n = counts[tt]
        out[TABLE_COLUMNS[tt]] = (100.0 * s / n if n else None, n)
    out["All"] = (100.0 * total[0] / total[1] if total[1] else None, total[1])
    return out


def alfworld_table(results: Mapping[str, Iterable[Any]], title: str | None = None) -> str:
    """Text table, one row per panel (e.g. "valid_seen", "valid_unseen", or a method name).

    ``results`` maps a row name to its episodes: Trajectory objects, ``to_json()`` dicts,
    ``{"task_type": ..., "success": ...}`` records or ``(task_type, success)`` pairs. Task
    types without episodes print "-". The layout is :func:`roleagent.evaluation.format_table`'s.
    """
    from roleagent.evaluation import format_table

    rows = {
        name: {column: value for column, (value, _n) in success_rates(list(records)).items() if value is not None}
        for name, records in results.items()
    }
    table = format_table(rows, columns=[TABLE_COLUMNS[tt] for tt in TASK_TYPES] + ["All"], title="panel")
    return f"{title}\n{table}" if title else table
