"""The option benchmark's report (benchmarks/bench_options.py) on fake run folders: its
pooling over seeds and its per-(seed, game) paired tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_options  # noqa: E402


def fake_run(run_dir: Path, before: list[int], after: list[int], greedy: list[int]) -> Path:
    """A finished run of two games × 8 sampled episodes: ``before[g]``/``after[g]`` won."""
    run_dir.mkdir(parents=True)
    records = [
        {
            "eval": label,
            "eval/outcomes": outcomes,
            "eval/sampled_game_successes": wins,
            "eval/sampled_game_episodes": [8, 8],
        }
        for label, wins, outcomes in (("before", before, [0, 0]), ("after", after, greedy))
    ]
    records[1:1] = [{"iteration": i, "train/successes": 2 + i, "train/episodes": 16} for i in range(2)]
    (run_dir / "metrics.jsonl").write_text("\n".join(map(json.dumps, records)) + "\n")
    return run_dir


def test_report_pairs_each_arm_with_the_reference_game_by_game(tmp_path):
    for seed in range(3):
        fake_run(tmp_path / "keep" / f"seed{seed}", [1, 0], [2, 1], [0, 0])
        fake_run(tmp_path / "zero" / f"seed{seed}", [1, 0], [6, 5], [1, 0])
    runs = {
        arm: {s: bench_options.run_arm("signpost_probe", [], tmp_path / arm / f"seed{s}") for s in range(3)}
        for arm in ("keep", "zero")
    }
    text = bench_options.table(runs)
    keep, zero = (line for line in text.splitlines() if line.startswith(("| keep", "| zero")))
    assert "| 0/6 = 0.0% [0.0, 39.0] | 3/48 = 6.2%" in keep and "9/48 = 18.8%" in keep
    # every one of the 6 (seed, game) pairs rose by 4/8: only the two all-same sign vectors are as extreme
    assert zero.endswith("| +50.0 points, 6 up 0 down of 6, p=0.0312: gain |")
    assert "| 3/6 = 50.0%" in zero and "33/48 = 68.8%" in zero
    assert "| 1 | 9/48 = 18.8% [10.2, 31.9] | 9/48 = 18.8% [10.2, 31.9] |" in text


def test_an_arm_is_a_name_and_its_settings():
    assert bench_options.parse_arm("dyn:dynamic_sampling.enabled=true") == ("dyn", ["dynamic_sampling.enabled=true"])
    with pytest.raises(Exception, match="NAME:KEY=VALUE"):
        bench_options.parse_arm("algo.same_action_groups=zero")
