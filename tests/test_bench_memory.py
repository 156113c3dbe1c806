"""benchmarks/bench_memory.py's reading and table: phases in record order, the arms side by
side, each arm's peak and wall time against the first arm's, and environment arms."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_memory  # noqa: E402


def _arm(run_dir: Path, records: list[dict], peak: float) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / "bench_memory.json").write_text(json.dumps({"wall_s": 10.0, "ru_maxrss_mb": peak}))
    return run_dir


def test_phases_side_by_side_and_the_peak_ratio(tmp_path):
    evals = [{"eval": "base", "memory/eval_start_mb": 400.0, "memory/eval_peak_mb": 1500.0}]
    iteration = {
        "iteration": 0,
        "memory/rollout_start_mb": 900.0,
        "memory/rollout_peak_mb": 1200.0,
        "memory/sft_start_mb": 800.0,
        "memory/sft_peak_mb": 2000.0,
        "rollout/reused_prompt_tokens": 4321,
    }
    a = _arm(tmp_path / "a", [*evals, iteration], 2000.0)
    b = _arm(tmp_path / "b", [*evals, {**iteration, "memory/sft_peak_mb": 1500.0}, evals[0]], 1500.0)
    arms = {"a": bench_memory.read_arm(a), "b": bench_memory.read_arm(b)}
    assert arms["b"]["phases"]["eval"] == [(400.0, 1500.0), (400.0, 1500.0)]
    assert arms["a"]["totals"]["reused_prompt_tokens"] == 4321
    table = bench_memory.report(arms)
    assert "| eval 2 | – | 400 → 1,500 |" in table  # a second evaluation in b only
    assert "| sft 1 | 800 → 2,000 | 800 → 1,500 |" in table
    assert table.endswith("peak b / peak a = 0.75; wall b / wall a = 1.00")


def test_upper_case_arm_keys_are_the_arm_process_environment():
    env, sets = bench_memory.arm_environment(["ONEDNN_PRIMITIVE_CACHE_CAPACITY=0", "threads=1", "x.Y=2"])
    assert env == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0"} and sets == ["threads=1", "x.Y=2"]
