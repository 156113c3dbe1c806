"""The HTML report's pure parts (ticks, axis placement, time breakdown, failure counts,
embedded JSON) and the advantage statistics the trainer logs, on hand-computed cases."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from roleagent.report import ReportError, write_report
from roleagent.report.data import RunData, slim_trajectory, unique_names
from roleagent.report.page import embedded_json, eval_x, failure_mode_counts, sectioned, time_breakdown
from roleagent.report.svg import Series, line_chart, nice_ticks, stacked_bars
from roleagent.trainer.advantages import Advantages, StepBatch, state_group_sizes, write_records
from roleagent.trainer.metrics import advantage_metrics
from roleagent.types import Step, Task, Trajectory

HOSTILE = "</script><script>alert(1)</script>"


def test_nice_ticks_docstring_examples():
    assert nice_ticks(0, 1) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert nice_ticks(0, 7) == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert nice_ticks(3, 3) == [3]


def test_eval_x_places_labels_on_the_iteration_axis():
    assert [eval_x(label, 10) for label in ("before", "base", "sft", "iter4", "after", "odd")] == [
        0,
        -1,
        0,
        4,
        10,
        None,
    ]


def test_line_chart_escapes_text_and_skips_nonfinite_points():
    svg = line_chart("a<b", [Series("<run>", [0, 1, 2], [0.5, math.nan, None]), Series("r2", [0, 1], [1.0, 2.0])])
    assert "a&lt;b" in svg and "&lt;run&gt;" in svg and "<run>" not in svg
    assert svg.count("<circle") == 3  # the NaN and the missing value are left out
    assert line_chart("empty", [Series("x", [0], [math.nan])]) == ""


def test_stacked_bars_draw_one_rect_per_positive_part():
    svg = stacked_bars("t", [("run", {"a": 1.0, "b": 0.0, "c": 2.0})])
    assert svg.count("<rect") == 2 + 2  # two bar segments, two legend swatches
    assert stacked_bars("t", [("run", {"a": 0.0})]) == ""


def test_embedded_json_cannot_close_the_script_element():
    value = {"text": HOSTILE + " & \u2028"}
    text = embedded_json(value)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == value


def test_time_breakdown_splits_rollout_and_keeps_the_rest():
    run = RunData("r", path=None)  # type: ignore[arg-type]
    run.train = [
        {"iteration": 0, "time/iteration_s": 10.0, "time/rollout_s": 6.0, "time/generate_s": 3.0,
         "time/extension_s": 1.0, "time/env_s": 1.0, "time/advantage_s": 0.5, "time/update_s": 2.0,
         "time/aiw_s": 1.0},
        {"iteration": 1, "time/iteration_s": 12.0, "time/rollout_s": 8.0, "time/generate_s": 5.0,
         "time/extension_s": 1.0, "time/env_s": 1.0, "time/advantage_s": 0.5, "time/update_s": 2.0,
         "time/aiw_s": 1.0},
    ]  # fmt: skip
    parts = time_breakdown(run)
    # means: rollout 7 = generate 4 + extension 1 + env 1 + other 1; 11 - (7 + 0.5 + 2 + 1) = 0.5
    assert parts == {
        "rollout: generate": 4.0,
        "rollout: extension": 1.0,
        "rollout: env": 1.0,
        "rollout: other": 1.0,
        "advantages": 0.5,
        "update": 2.0,
        "method: aiw": 1.0,
        "other": 0.5,
    }


def test_failure_mode_counts_per_type_and_iteration():
    run = RunData("r", path=None)  # type: ignore[arg-type]
    run.failures = [
        {"dominant_type": "loop", "iteration": 0},
        {"dominant_type": "loop", "iteration": 0},
        {"dominant_type": "wrong_object", "iteration": 1},
        {"dominant_type": "loop", "iteration": 1},
    ]
    assert failure_mode_counts(run) == {"loop": {0: 2, 1: 1}, "wrong_object": {1: 1}}


def test_sectioned_puts_each_key_once_and_keeps_unknown_keys():
    keys = ["train/success", "update/kl", "time/update_s", "time/iteration_s", "mystery", "seal/rho_pass"]
    sections = dict(sectioned(keys))
    assert sections["Success and return"] == ["train/success"]
    assert sections["Speed"] == ["time/iteration_s"]  # other time/* keys are drawn in the wall-time section
    assert sections["Other metrics"] == ["mystery"]
    assert sum(len(v) for v in sections.values()) == 5


def test_slim_trajectory_cuts_long_text_and_drops_nan():
    record = {"task_id": "t", "steps": [{"observation": "x" * 30, "action_text": "a", "action": "a", "valid": True,
              "reward": 1.0, "penalty": 0.0, "info": {"admissible_actions": ["a"], "won": True},
              "extras": {"wia": {"scores": [float("nan"), 0.5]}}}]}  # fmt: skip
    slim = slim_trajectory(record, max_chars=10)
    step = slim["steps"][0]
    assert step["observation"] == "x" * 10 + " … [20 more chars]"
    assert step["info"] == {"won": True} and step["extras"]["wia"]["scores"] == [None, 0.5]


def test_unique_names_and_bad_input(tmp_path):
    assert unique_names([tmp_path / "a" / "run", tmp_path / "b" / "run", tmp_path / "c"]) == ["a/run", "b/run", "c"]
    with pytest.raises(ReportError, match="no metrics.jsonl"):
        write_report([tmp_path])
    with pytest.raises(ReportError, match="at least one"):
        write_report([])


def test_state_group_sizes_and_advantage_metrics_worked_example():
    """advantage_metrics' docstring: groups [0, 1, 0] → sizes [2, 1, 2], mean size 1.5, grouped 2/3."""
    assert state_group_sizes(np.array([0, 1, 0])).tolist() == [2, 1, 2]
    steps = [Step("o", "s", "a", "a", True, reward=r) for r in (0.0, 1.0, 0.0)]
    trajectories = [
        Trajectory(Task("t0", "x"), steps=steps[:2]),
        Trajectory(Task("t0", "x"), steps=steps[2:]),
    ]
    batch = StepBatch.from_trajectories(trajectories)
    estimate = Advantages(
        np.array([1.0, -1.0, 0.5]),
        {"episode": np.array([1.0, -1.0, 0.0]), "step": np.array([0.0, 0.0, 0.5])},
        np.array([0, 1, 0]),
    )
    metrics = advantage_metrics(batch, estimate)
    assert metrics["train/anchor_group_size_mean"] == pytest.approx(1.5)
    assert metrics["train/anchor_grouped_step_frac"] == pytest.approx(2 / 3)
    assert metrics["train/advantage_abs_mean"] == pytest.approx(2.5 / 3)
    assert metrics["train/advantage_episode_abs_mean"] == pytest.approx(2 / 3)
    assert metrics["train/advantage_step_abs_mean"] == pytest.approx(0.5 / 3)
    assert metrics["train/advantage_std"] == pytest.approx(np.std([1.0, -1.0, 0.5]))
    assert metrics["train/zero_variance_groups"] == 0.0  # returns 1 and 0 differ
    write_records(batch, estimate)
    dumped = [Trajectory.from_json(json.loads(json.dumps(t.to_json()))) for t in trajectories]
    sizes = [s.extras["algo"]["state_group_size"] for t in dumped for s in t.steps]
    assert sizes == [2, 1, 2]
    assert dumped[0].steps[0].extras["algo"] == {
        "advantage": 1.0, "episode": 1.0, "step": 0.0, "state_group": 0, "state_group_size": 2
    }  # fmt: skip


def test_advantage_metrics_without_state_groups_has_no_anchor_keys():
    trajectories = [Trajectory(Task("t0", "x"), steps=[Step("o", "s", "a", "a", True, reward=1.0)])]
    metrics = advantage_metrics(StepBatch.from_trajectories(trajectories), Advantages(np.array([0.0])))
    assert "train/anchor_group_size_mean" not in metrics and metrics["train/zero_variance_groups"] == 1.0


def test_cli_report_of_a_run_with_an_older_dump(tmp_path, capsys):
    """A dump written before ``state_group_size`` existed (as the ALFWorld reference run's)
    still loads with ``Trajectory.from_json`` and goes into the report."""
    from roleagent.cli import main

    run_dir = tmp_path / "old_run"
    (run_dir / "rollouts").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text(
        json.dumps({"iteration": 0, "train/success": 0.5, "update/kl": None}) + "\n" + '{"torn": \n'
    )
    step = {
        "observation": "o",
        "state_key": "o",
        "action_text": "go",
        "action": "go",
        "valid": True,
        "reward": 0.0,
        "penalty": 0.0,
        "done": True,
        "info": {},
        "extras": {"algo": {"advantage": 0.5, "state_group": 3}},
    }
    old = {"task_id": "t/1", "env": "x", "seed": 1, "success": False, "return": 0.0, "steps": [step]}  # fmt: skip
    (run_dir / "rollouts" / "iter_000000.jsonl").write_text(json.dumps(old) + "\n")
    assert Trajectory.from_json(old).steps[0].extras["algo"] == {"advantage": 0.5, "state_group": 3}
    assert main(["report", str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    assert f"report: {run_dir / 'report.html'} (" in capsys.readouterr().out
    assert 'aria-label="train/success"' in page and '"state_group": 3' in page
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err


def test_rollout_files_keep_every_eval_and_the_last_iterations(tmp_path):
    from roleagent.report.data import rollout_files

    (tmp_path / "rollouts").mkdir()
    for name in ("iter_000000", "iter_000001", "iter_000002", "iter_000003", "eval_after"):
        (tmp_path / "rollouts" / f"{name}.jsonl").write_text("")
    kept, skipped = rollout_files(tmp_path, 2)
    assert [f.stem for f in kept] == ["eval_after", "iter_000002", "iter_000003"]
    assert [f.stem for f in skipped] == ["iter_000000", "iter_000001"]
    assert [f.stem for f in rollout_files(tmp_path, 0)[0]] == ["eval_after"]
    record = {"steps": [{"observation": "o", "action_text": "a", "action": "a", "extras": {"chat": {"m": "x"}}}]}
    assert slim_trajectory(record, 10)["steps"][0]["extras"] == {}  # prompt chats stay off the page


def test_a_flat_line_gets_round_ticks_around_it():
    svg = line_chart("flat", [Series("r", [0, 1], [0.4, 0.4])])
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([^<]+)<', svg)]
    assert ticks == [0.2, 0.3, 0.4, 0.5, 0.6]  # nice_ticks(0.2, 0.6)


def test_a_spread_below_the_ticks_rounding_is_drawn_as_a_flat_line():
    """A correlation of 1.0 and 0.9999999999999999 (``wia/credit_corr``): nice ticks round the
    spread to one value, which divided by zero; it is drawn as a flat line."""
    assert nice_ticks(0.9999999999999999, 1.0)[0] == nice_ticks(0.9999999999999999, 1.0)[-1]
    svg = line_chart("corr", [Series("corr", [0, 1], [1.0, 0.9999999999999999])])
    assert svg.startswith("<svg") and "nan" not in svg
