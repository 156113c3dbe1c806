"""Compare two run directories field by field: did a code change alter what a run does?

    python scripts/compare_runs.py runs/before runs/after [--ignore-new]

Compared: every ``metrics.jsonl`` record (wall-clock and speed fields aside), every rollout
file record, ``eval_table.txt``, the evaluation tables of ``summary.json``, the failure
memory's rows (timestamps aside) and the tensors of the newest checkpoint's weights. Fields
that exist on one side only are listed (a newer version may dump more, e.g. advantages);
``--ignore-new`` accepts fields present only in the second run. World-In-Agent fields of
older rollout dumps (``predictions``, ``prediction_scores`` on the step) are compared with
their per-method record (``extras.wia.predictions`` / ``extras.wia.scores``).

Exit status 0 when everything compared is identical, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LEGACY_STEP_FIELDS = {"predictions": ("wia", "predictions"), "prediction_scores": ("wia", "scores")}


def volatile(key: str) -> bool:
    """Wall-clock measurements and paths differ between any two runs."""
    leaf = key.rsplit(".", 1)[-1]
    return key.startswith(("time/", "speed/")) or "/time" in key or leaf in ("run_dir", "created")


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        for index, item in enumerate(value):
            yield from flatten(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def lift_legacy(record: dict) -> dict:
    """Old dumps kept WIA fields on the step; newer ones in ``step.extras.wia``."""
    for step in record.get("steps", []) if isinstance(record, dict) else []:
        for old, (method, new) in LEGACY_STEP_FIELDS.items():
            if old in step:
                value = step.pop(old)
                if value:  # old dumps wrote [] where no method ran
                    step.setdefault("extras", {}).setdefault(method, {})[new] = value
    return record


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


class Report:
    def __init__(self, ignore_new: bool):
        self.ignore_new = ignore_new
        self.differences: list[str] = []
        self.only: dict[str, set[str]] = {"first": set(), "second": set()}
        self.compared = 0

    def records(self, where: str, a: dict, b: dict) -> None:
        fa = {k: v for k, v in flatten(lift_legacy(a)) if not volatile(k)}
        fb = {k: v for k, v in flatten(lift_legacy(b)) if not volatile(k)}
        for key in fa.keys() - fb.keys():
            self.only["first"].add(_pattern(key))
        for key in fb.keys() - fa.keys():
            self.only["second"].add(_pattern(key))
        for key in fa.keys() & fb.keys():
            self.compared += 1
            if not same(fa[key], fb[key]):
                self.differences.append(f"{where}: {key}: {fa[key]!r} != {fb[key]!r}")

    def jsonl(self, name: str, a: Path, b: Path) -> None:
        la, lb = _lines(a), _lines(b)
        if len(la) != len(lb):
            self.differences.append(f"{name}: {len(la)} records != {len(lb)}")
        for index, (ra, rb) in enumerate(zip(la, lb)):
            self.records(f"{name}[{index}]", ra, rb)

    def ok(self) -> bool:
        return not self.differences and not self.only["first"] and (self.ignore_new or not self.only["second"])


def _pattern(key: str) -> str:
    return re.sub(r"\[\d+\]", "[*]", key)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def memory_rows(path: Path) -> dict[str, list[tuple]]:
    if not path.exists():
        return {}
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        out = {}
        for table in tables:
            columns = [r[1] for r in db.execute(f"PRAGMA table_info({table})") if r[1] != "created"]
            out[table] = db.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY rowid").fetchall()
        return out


def weights(run: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    latest = run / "checkpoints" / "latest"
    folder = run / "checkpoints" / latest.read_text().strip() if latest.is_file() else latest
    tensors = {}
    for file in sorted(folder.rglob("*.safetensors")) if folder.exists() else []:
        for key, tensor in load_file(file).items():
            tensors[f"{file.relative_to(folder)}:{key}"] = tensor
    return tensors


def compare(first: Path, second: Path, report: Report) -> None:
    report.jsonl("metrics.jsonl", first / "metrics.jsonl", second / "metrics.jsonl")
    names = sorted(
        {p.name for p in (first / "rollouts").glob("*.jsonl")} | {p.name for p in (second / "rollouts").glob("*.jsonl")}
    )
    for name in names:
        report.jsonl(f"rollouts/{name}", first / "rollouts" / name, second / "rollouts" / name)
    for name in ("eval_table.txt",):
        a, b = first / name, second / name
        if a.exists() != b.exists() or (a.exists() and a.read_text() != b.read_text()):
            report.differences.append(f"{name} differs")
    sa, sb = (
        json.loads((d / "summary.json").read_text()) if (d / "summary.json").exists() else {} for d in (first, second)
    )
    report.records(
        "summary.json",
        {"evals": sa.get("evals"), "eval_tasks": sa.get("eval_tasks")},
        {"evals": sb.get("evals"), "eval_tasks": sb.get("eval_tasks")},
    )
    ma, mb = memory_rows(first / "failure_memory.sqlite"), memory_rows(second / "failure_memory.sqlite")
    if ma != mb:
        report.differences.append("failure_memory.sqlite rows differ")
    wa, wb = weights(first), weights(second)
    if wa.keys() != wb.keys():
        report.differences.append(f"checkpoint tensors differ in names ({len(wa)} vs {len(wb)})")
    for key in wa.keys() & wb.keys():
        report.compared += 1
        if wa[key].shape != wb[key].shape or not bool((wa[key] == wb[key]).all()):
            report.differences.append(f"checkpoint tensor {key} differs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--ignore-new", action="store_true", help="accept fields present only in the second run")
    args = parser.parse_args(argv)
    report = Report(args.ignore_new)
    compare(args.first, args.second, report)
    for line in report.differences[:40]:
        print("DIFF", line)
    for side in ("first", "second"):
        for key in sorted(report.only[side]):
            print(f"ONLY IN {side.upper()}", key)
    verdict = "identical" if report.ok() else "DIFFERENT"
    print(
        f"{args.first} vs {args.second}: {report.compared} values compared, "
        f"{len(report.differences)} differences: {verdict}"
    )
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
