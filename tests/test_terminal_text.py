"""Model and environment text the command line prints is made printable: a rollout holding
terminal control sequences (retitle, clear screen, colour) goes through every view mode,
the eval table and the CLI's error line without a raw control character reaching the terminal."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from roleagent.cli import main
from roleagent.evaluation import format_table
from roleagent.methods.agent_r.tree import Node, Tree
from roleagent.terminal import printable
from roleagent.types import Step, Task, Trajectory

EVIL = "\x1b]0;PWNED\x07\x1b[2J\x1b[31m"
TASK = f"tc/train/{EVIL}"
# newlines and tabs structure the output; everything else below 0x20, DEL and C1 must not appear
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e\ud800-\udfff]")


def _rollout() -> Trajectory:
    extras = {"algo": {"advantage": 0.5, "note": EVIL}, "wia": {"predictions": [EVIL], "scores": [0.5]}, "m": {EVIL: 1}}
    steps = [
        Step(f"you see {EVIL} a door\n\u202eoverride\ud800", "s0", f"go {EVIL}", f"go {EVIL}", True, extras=extras),
        Step(f"obs {EVIL}", "s1", f"bad {EVIL}", None, False, reward=-0.1),
    ]
    return Trajectory(
        Task(TASK, "tc"),
        steps=steps,
        final_observation=f"end {EVIL}",
        seed=3,
        diagnosis={"turn_labels": [EVIL, "pass"], "mode": EVIL},
        extras={"seal": {"weight": 1.0, "why": EVIL}},
    )


@pytest.fixture
def run(tmp_path):
    (tmp_path / "rollouts").mkdir()
    line = json.dumps(_rollout().to_json()) + "\n"
    (tmp_path / "rollouts" / "iter_000000.jsonl").write_text(line * 2)
    (tmp_path / "eval_table.txt").write_text(format_table({"base": {EVIL: 50.0, "All": 50.0}}, title="t") + "\n")
    with sqlite3.connect(tmp_path / "failure_memory.sqlite") as db:
        db.execute("CREATE TABLE failures (task TEXT, analysis TEXT)")
        db.execute("INSERT INTO failures VALUES (?, ?)", (TASK, f"the model wrote {EVIL}"))
    tree = Tree(
        Task(TASK, "tc"),
        seed=1,
        instruction=EVIL,
        nodes=[
            Node(0, None, 0, observation=f"start {EVIL}", children=[1, 2]),
            Node(1, 0, 1, text=f"go {EVIL}", action=f"go {EVIL}", observation=EVIL, terminal=True),
            Node(2, 0, 1, text=f"?? {EVIL}", action=None, valid=False, terminal=True),
        ],
        error=f"replay mismatch {EVIL}",
    )
    (tmp_path / "trees").mkdir()
    (tmp_path / "trees" / "t.json").write_text(json.dumps(tree.to_json()))
    return tmp_path


VIEWS = [
    [],
    ["--file", "iter_000000"],
    ["--file", "iter_000000", "--failed"],
    ["--file", "iter_000000", "--task", TASK],
    ["--file", "iter_000000", "--index", "0"],
    ["--group", TASK],
    ["--group", TASK, "--width", "60"],
    ["--memory"],
]


@pytest.mark.parametrize("args", VIEWS, ids=lambda a: " ".join(a[:1] + a[2:3]) or "list")
def test_every_view_escapes_control_characters(run, capsys, args):
    assert main(["view", str(run), *args]) == 0
    out = capsys.readouterr().out
    assert not RAW.findall(out), repr(out)
    assert "\\x1b" in out  # shown, as an escape


def test_tree_view_escapes_control_characters(run, capsys):
    assert main(["view", str(run / "trees")]) == 0
    out = capsys.readouterr().out
    assert not RAW.findall(out) and "\\x1b" in out and "[1]" in out, repr(out)


def test_eval_table_escapes_task_types_and_labels():
    table = format_table({f"after {EVIL}": {f"Pick{EVIL}": 50.0, "All": 50.0}}, title=EVIL)
    assert not RAW.findall(table) and "\\x1b" in table
    rows = table.splitlines()
    assert len(rows) == 2 and len(rows[0]) == len(rows[1])  # still aligned: escapes counted in the widths


def test_cli_error_line_escapes_control_characters(tmp_path, capsys):
    assert main(["sft", "--data", str(tmp_path / f"missing{EVIL}.jsonl"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("data error:") and "\\x1b" in err, repr(err)
    assert not RAW.findall(err) and err.count("\n") == 1, repr(err)


def test_printable():
    assert printable(EVIL) == "\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31m"
    assert printable("a\tb\nc\r") == "a\tb\nc\\r" and printable("a\tb\nc", lines=False) == "a\\tb\\nc"
    assert printable("\u202e\ud800\x9b é 中") == "\\u202e\\ud800\\x9b é 中"
    assert printable(printable(EVIL)) == printable(EVIL)  # nothing left to escape
