"""The BFCL v3 multi-turn table of the SEAL paper (Hu et al., 2026, "SEAL: Synergistic Co-Evolution of Agents and Learning Environments", Table 1): accuracy per category and
their average, one row per model/run.

    print(bfcl_table({"Qwen2.5-7B": {"bfcl/eval/multi_turn_base_1": True, ...},
                      "+ SEAL": results2}))

``results`` maps a row name to ``{task_id: success}`` (task ids or bare entry ids; the
category is read from the id), or to a list of ``Trajectory`` objects. Accuracies are
percentages with two decimals; the average is the unweighted mean of the four category
accuracies (the paper's "Overall Acc"), over the categories present.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from roleagent.envs.bfcl.data import CATEGORIES, category_of, entry_id_of_task

COLUMN_NAMES = {"base": "Base", "miss_func": "Miss Func", "miss_param": "Miss Param", "long_context": "Long Context"}


def category_accuracies(results: Mapping[str, bool] | Iterable[Any]) -> dict[str, float]:
    """{category: accuracy in %} plus "average" (mean over categories present)."""
    if not isinstance(results, Mapping):
        results = {t.task.id: bool(t.success) for t in results}
    hits: dict[str, list[bool]] = {}
    for tid, ok in results.items():
        hits.setdefault(category_of(entry_id_of_task(tid)), []).append(bool(ok))
    out = {c: 100.0 * sum(v) / len(v) for c, v in hits.items() if v}
    present = [c for c in CATEGORIES if c in out]
    out["average"] = sum(out[c] for c in present) / len(present) if present else 0.0
    return out


def bfcl_table(rows: Mapping[str, Mapping[str, bool] | Iterable[Any]], *, fmt: str = "markdown") -> str:
    """A markdown (or ``fmt="tsv"``) table: Model | Base | Miss Func | Miss Param |
    Long Context | Avg, rendered by :func:`roleagent.evaluation.format_table`."""
    from roleagent.evaluation import format_table

    table = {}
    for name, results in rows.items():
        acc = category_accuracies(results)
        table[str(name)] = {COLUMN_NAMES[c]: acc[c] for c in CATEGORIES if c in acc} | {"Avg": acc["average"]}
    columns = [COLUMN_NAMES[c] for c in CATEGORIES] + ["Avg"]
    return format_table(table, columns=columns, title="Model", fmt=fmt, digits=2)
