"""``roleagent view RUN --group TASK_ID``: a task's rollouts side by side with advantages."""

from __future__ import annotations

import json

from roleagent.cli import main
from roleagent.types import Step, Task, Trajectory
from roleagent.viewer import group_lines


def _trajectory(actions, rewards, algo, *, success, labels=None, weight=None) -> Trajectory:
    steps = [
        Step(f"obs {t}", f"s{t}", a, a, True, reward=r, extras={"algo": record})
        for t, (a, r, record) in enumerate(zip(actions, rewards, algo))
    ]
    diagnosis = {"turn_labels": labels} if labels else None
    extras = {"seal": {"weight": weight, "applied": True}} if weight is not None else {}
    return Trajectory(
        Task("tc/train/7", "lucky"), steps=steps, success=success, seed=5, diagnosis=diagnosis, extras=extras
    )


def _run(tmp_path):
    a = _trajectory(
        ["go north", "open door"],
        [0.0, 1.0],
        [
            {"advantage": 0.75, "episode": 0.5, "step": 0.25, "state_group": 0, "state_group_size": 2},
            {"advantage": 0.5, "episode": 0.5, "step": 0.0, "state_group": 1, "state_group_size": 1},
        ],
        success=True,
        labels=["pass", "pass"],
        weight=1.25,
    )
    b = _trajectory(
        ["go south"],
        [0.0],
        [{"advantage": -0.75, "episode": -0.5, "step": -0.25, "state_group": 0, "state_group_size": 2}],
        success=False,
    )
    other = _trajectory(["x"], [0.0], [{"advantage": 0.0}], success=False)
    other.task = Task("tc/train/8", "lucky")
    (tmp_path / "rollouts").mkdir()
    with (tmp_path / "rollouts" / "iter_000000.jsonl").open("w") as f:
        for t in (a, other, b):
            f.write(json.dumps(t.to_json()) + "\n")
    return tmp_path, a, b


def test_group_lines_side_by_side(tmp_path):
    _, a, b = _run(tmp_path)
    lines = group_lines([(0, a.to_json()), (2, b.to_json())], 24)
    assert lines[0] == "#0 OK R=1.00 w=1.25".ljust(24) + " | #2 fail R=0.00"
    t0 = lines[1 : lines.index(next(x for x in lines if x.endswith("t=1")))]
    assert t0[0].endswith("t=0")
    assert t0[1:] == [
        "go north".ljust(24) + " | go south",
        "r=+0.00 A=+0.750".ljust(24) + " | r=+0.00 A=-0.750",
        "E=+0.500 S=+0.250".ljust(24) + " | E=-0.500 S=-0.250",
        "group 0 (n=2)".ljust(24) + " | group 0 (n=2)",
        "SEAL pass",
    ]
    # t=1: the second rollout had ended, its column is blank
    assert lines[-5:] == ["open door", "r=+1.00 A=+0.500", "E=+0.500 S=+0.000", "group 1 (n=1)", "SEAL pass"]


def test_cli_view_group_prints_the_task_and_refuses_unknown_ones(tmp_path, capsys):
    run, _, _ = _run(tmp_path)
    assert main(["view", str(run), "--group", "tc/train/7"]) == 0
    out = capsys.readouterr().out
    assert "tc/train/7 in iter_000000.jsonl, seed 5: 2 rollouts" in out
    assert "A=+0.750" in out and "A=-0.750" in out and "group 0 (n=2)" in out
    assert "tc/train/8" not in out.split("\n", 1)[1]
    assert main(["view", str(run), "--group", "nope"]) == 2
    assert "its tasks: tc/train/7, tc/train/8" in capsys.readouterr().out
    assert main(["view", str(run), "--group", "tc/train/7", "--file", "eval_after"]) == 2
