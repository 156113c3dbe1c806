"""The task-mix replay (benchmarks/bench_aiw_task_mix.py) on scripted failures: iterations
group episodes by game, and a picked mode reaches more tasks than top-1 task retrieval."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from roleagent.config import load_config
from roleagent.types import Step, Task, Trajectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_aiw_task_mix  # noqa: E402

IDS = [f"toy/train/{i:02d}" for i in range(40)]


def failure(i: int) -> Trajectory:
    task = Task(id=IDS[i], env="toy", split="train", metadata={"instruction": f"goal {i}"})
    step = Step(observation="room", state_key=0, prompt_ids=[1], action_ids=[2], action_logprobs=[-0.1],
                action_text="go to shelf 1", action="go to shelf 1", valid=True)  # fmt: skip
    return Trajectory(task=task, steps=[step], success=False, final_observation="end")


def diagnose(trajectory: Trajectory) -> dict:
    i = int(trajectory.task.id.rsplit("/", 1)[1])
    kind = "missing_precondition" if i % 4 else "navigation_loop"
    return {"dominant_type": kind, "detail": f"{kind.replace('_', ' ')} at shelf {i}"}


def test_a_malformed_arm_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        bench_aiw_task_mix.main(["role_agent_aiw_alfworld", "--rollouts", "x.jsonl", "--arm", "modes"])
    assert "expected UNIT:TOP_K" in capsys.readouterr().err


def test_iterations_group_episodes_by_game_in_first_seen_order():
    stream = [failure(i) for i in (0, 1, 0, 2, 3, 1)]
    groups = bench_aiw_task_mix.iterations(stream, 2)
    assert [[t.task.id for t in g] for g in groups] == [IDS[:1] * 2 + IDS[1:2] * 2, IDS[2:4]]


def test_a_mode_reaches_every_task_that_failed_that_way():
    cfg = load_config("role_agent_aiw_alfworld")
    stream = bench_aiw_task_mix.iterations([failure(i) for i in range(16)], 4)
    taxonomy = ("missing_precondition", "navigation_loop")
    runs = {
        arm: bench_aiw_task_mix.replay(cfg, arm, IDS, taxonomy, stream, diagnose, 4) for arm in ("tasks:1", "modes:1")
    }
    # one pick per failure in either unit; a picked mode reaches every task filed under it, so all
    # but the last navigation loop (task 12: no later failure of its mode) are boosted
    assert [r["failures"] for r in runs["tasks:1"]] == [4.0] * 4
    assert runs["modes:1"][-1]["boosted"] == 15 > runs["tasks:1"][-1]["boosted"]
    assert runs["modes:1"][-1]["mass"] > runs["tasks:1"][-1]["mass"] > runs["tasks:1"][-1]["uniform_mass"]
    for arm in runs.values():
        assert all(a["mass"] <= b["mass"] for a, b in zip(arm, arm[1:]))  # decay 0.9 < the boosts added
        assert abs(arm[-1]["expected"] - 4 * arm[-1]["mass"]) < 1e-12
