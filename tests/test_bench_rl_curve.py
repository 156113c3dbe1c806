"""The real-task curve's pooled per-game test (benchmarks/bench_rl_curve.py ``--pool``) on
fake run folders: rollout dumps of two runs on disjoint games."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_rl_curve  # noqa: E402


def fake_run(path: Path, games: list[str], wins: dict[int, list[int]]) -> Path:
    """A run folder whose iteration ``i`` played each game 4 times, ``wins[i][g]`` won."""
    (path / "rollouts").mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"env": {"train_tasks": games}}))
    for i, per_game in wins.items():
        lines = [
            json.dumps({"task_id": game, "success": k < won, "crashed": False})
            for game, won in zip(games, per_game)
            for k in range(4)
        ]
        lines.append(json.dumps({"task_id": games[0], "success": True, "crashed": True}))  # never counted
        (path / "rollouts" / f"iter_{i}.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_pooled_training_pairs_every_game_of_every_run(tmp_path):
    a = fake_run(tmp_path / "a", ["g/a/1", "g/a/2", "g/a/3"], {0: [0, 1, 2], 1: [0, 0, 0], 2: [2, 2, 3], 3: [1, 3, 4]})
    b = fake_run(tmp_path / "b", ["g/b/1", "g/b/2", "g/b/3"], {0: [1, 0, 0], 1: [4, 4, 4], 2: [3, 1, 1], 3: [4, 2, 2]})
    text = bench_rl_curve.pooled_training([a, b], 2, 3)
    assert "| a | a 1 | 0/4 | 3/8 |" in text and "| b | b 3 | 0/4 | 3/8 |" in text  # iteration 1 is outside
    # before 4/24, after 28/48; six games, every one up: only the all-plus and all-minus
    # sign vectors are as extreme, p = 2/64
    assert text.endswith(
        "all games: 4/24 = 16.7% [6.7, 35.9] -> 28/48 = 58.3% [44.3, 71.2]; per game: "
        "+41.7 points, 6 up 0 down of 6, p=0.0312: gain"
    )


def test_a_second_seed_on_the_same_games_adds_to_their_counts(tmp_path):
    """Two seeds on the same three games: each game is one pair, with both runs' episodes."""
    games = ["g/a/1", "g/a/2", "g/a/3"]
    a = fake_run(tmp_path / "a", games, {0: [0, 1, 2], 1: [0, 0, 0], 2: [2, 2, 3], 3: [1, 3, 4]})
    b = fake_run(tmp_path / "b", games, {0: [1, 0, 0], 1: [4, 4, 4], 2: [3, 1, 1], 3: [4, 2, 2]})
    text = bench_rl_curve.pooled_training([a, b], 2, 3)
    assert "| a, b | a 1 | 1/8 | 10/16 |" in text and "| a, b | a 3 | 2/8 | 10/16 |" in text
    assert text.count("\n| a, b |") == 3  # three games, not six pairs
    # every game rises (d = 1/2, 3/8, 3/8): only the all-plus and all-minus sign vectors reach
    # |sum d|, p = 2/8
    assert text.endswith("per game: +41.7 points, 3 up 0 down of 3, p=0.25: unresolved")


def test_pooled_training_refuses_a_run_without_the_window(tmp_path):
    a = fake_run(tmp_path / "a", ["g/a/1"], {0: [1], 1: [2]})
    try:
        bench_rl_curve.pooled_training([a], 1, 3)
    except SystemExit as e:
        assert "iterations [2, 3]" in str(e)
    else:
        raise AssertionError("a missing iteration was not refused")


def test_against_control_pairs_each_game_over_the_window(tmp_path):
    """``--pool PLAIN --against CONTROL``: per game the control's window rate against the
    plain runs'; games only one side played are left out."""
    games = ["g/a/1", "g/a/2", "g/a/3", "g/a/4"]
    plain = fake_run(tmp_path / "plain", games, {0: [1, 0, 2, 0], 3: [4, 3, 4, 2]})
    control = fake_run(tmp_path / "control", [*games[:3], "g/b/9"], {0: [0, 0, 2, 4], 3: [1, 0, 2, 4]})
    text = bench_rl_curve.against_control([plain], [control], 3, 3)
    assert "| a 1 | 0/4 | 1/4 | 1/4 | 4/4 |" in text and "a 4" not in text and "b 9" not in text
    assert "iteration 0: control 2/12 = 16.7%" in text and "plain 3/12 = 25.0% [8.9, 53.2]" in text
    # windows: d = 3/4, 3/4, 1/2 on three games, all up: p = 2/8
    assert "plain 11/12 = 91.7% [64.6, 98.5]; per game: +66.7 points, 3 up 0 down of 3, p=0.25: unresolved" in text
    # changes from iteration 0: plain +3/4, +3/4, +1/2; control +1/4, 0, 0: d = 1/2, 3/4, 1/2
    assert text.endswith("plain minus control, per game: +58.3 points, 3 up 0 down of 3, p=0.25: unresolved")


def test_the_control_flag_reaches_the_trainer(monkeypatch, tmp_path):
    """``--shuffle-advantages`` trains inside ``bench_options.shuffled_advantages`` with the
    run's seed; without it, the estimator is left alone."""
    seen = []

    class FakeTrainer:
        def __init__(self, cfg):
            seen.append(cfg.seed)

        def run(self):
            import roleagent.trainer.loop as loop

            seen.append(loop.compute_advantages.__name__)

        def close(self):
            pass

    monkeypatch.setattr(bench_rl_curve, "Trainer", FakeTrainer)
    monkeypatch.setattr(bench_rl_curve, "expert_games", lambda recipe, n: [f"g/x/{i}" for i in range(n)])
    monkeypatch.setattr(bench_rl_curve, "read_curve", lambda out: {"iterations": [], "evals": []})
    monkeypatch.setattr(bench_rl_curve, "training_rates", lambda out, games: {})
    monkeypatch.setattr(bench_rl_curve, "table", lambda curve: "")
    base = ["--init-from", str(tmp_path), "--recipe", "signpost_probe", "--games", "2", "--set", "seed=3"]
    for extra in ([], ["--shuffle-advantages"]):
        out = tmp_path / f"run{len(extra)}"
        out.mkdir()
        bench_rl_curve.main([*base, "--out", str(out), *extra])
    assert seen == [3, "compute_advantages", 3, "shuffled"]


def test_a_committed_bundle_pools_as_its_run_folders_would(tmp_path):
    """``FILE.json#KEY`` (a run's ``curve.json`` inside a committed bundle) gives the same
    counts as the run folder it was written from."""
    games = ["g/a/1", "g/a/2"]
    run = fake_run(tmp_path / "run", games, {0: [1, 2], 3: [3, 4]})
    rates = bench_rl_curve.training_rates(run, games)
    curve = {"games": games, "iterations": [{"iteration": i, "train/game_rates": r} for i, r in rates.items()]}
    (tmp_path / "bundle.json").write_text(json.dumps({"about": "", "run": curve}))
    from_folder = bench_rl_curve.pooled_training([run], 3, 3)
    from_bundle = bench_rl_curve.pooled_training([f"{tmp_path / 'bundle.json'}#run"], 3, 3)
    assert from_bundle == from_folder and "| run | a 2 | 2/4 | 4/4 |" in from_bundle
