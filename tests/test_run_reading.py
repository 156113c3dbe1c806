"""Reading runs (issue 27, item 24): ``view`` and ``report`` read an archived run folder
without changing it (the failure memory through a copy), skip a torn or malformed rollout
line, turn bad YAML or a malformed record into one ``report error:`` line, and a run
started over with ``--no-resume`` leaves no rollout dumps of the iterations it discarded."""

from __future__ import annotations

import json

from roleagent import cli
from roleagent.methods.role_agent.aiw.memory import FailureMemory
from roleagent.methods.role_agent.aiw.reflection import Reflection
from tests.run_helpers import TINY

STEP = {
    "observation": "o", "state_key": "o", "action_text": "go", "action": "go", "valid": True,
    "reward": 1.0, "penalty": 0.0, "done": True, "info": {}, "extras": {},
}  # fmt: skip
TRAJECTORY = {"task_id": "t/1", "env": "x", "seed": 1, "success": True, "return": 1.0, "steps": [STEP]}


def _run_folder(root):
    """A small finished run: metrics, config, one rollout dump, a failure memory."""
    run = root / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "train/success": 0.5}) + "\n")
    (run / "config.yaml").write_text("env:\n  name: lucky\n")
    (run / "rollouts" / "iter_000000.jsonl").write_text(json.dumps(TRAJECTORY) + "\n")
    with FailureMemory(run / "failure_memory.sqlite", ("wrong_object",)) as memory:
        memory.add_failure("t/2", 0, Reflection(dominant_type="wrong_object", detail="took the key", source="rule"))
        memory.commit()
    return run


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line(err: str, prefix: str) -> None:
    assert err.startswith(prefix) and err.count("\n") == 1 and "Traceback" not in err, err


def test_view_memory_and_report_leave_the_run_folder_as_it_was(tmp_path, capsys):
    run = _run_folder(tmp_path)
    before = _files(run)
    assert cli.main(["view", str(run), "--memory"]) == 0
    assert "took the key" in capsys.readouterr().out
    assert cli.main(["report", str(run), "--out", str(tmp_path / "report.html")]) == 0
    assert "took the key" in (tmp_path / "report.html").read_text()
    assert _files(run) == before  # no -shm or -wal beside the memory: an archived folder opens


def test_a_report_that_cannot_be_written_is_one_line(tmp_path, capsys):
    run = _run_folder(tmp_path)
    (tmp_path / "a_file").write_text("")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "a_file" / "report.html")]) == 2
    _one_line(capsys.readouterr().err, "report error: cannot write ")


def test_torn_and_malformed_rollout_lines_are_skipped(tmp_path, capsys):
    run = _run_folder(tmp_path)
    dump = run / "rollouts" / "iter_000000.jsonl"
    malformed = {**TRAJECTORY, "steps": "not a list"}
    dump.write_text(dump.read_text() + json.dumps(malformed) + "\n" + json.dumps(TRAJECTORY) + "\n" + '{"task_id": "t')
    assert cli.main(["view", str(run)]) == 0
    out = capsys.readouterr().out
    assert "iter_000000.jsonl: skipped 2 unreadable line(s)" in out and "2 trajectories, 2 successful" in out
    assert cli.main(["view", str(run), "--file", "iter_000000", "--index", "2"]) == 0  # numbered by line
    assert "#2 t/1" in capsys.readouterr().out
    assert cli.main(["view", str(run), "--group", "t/1"]) == 0
    assert cli.main(["report", str(run), "--out", str(tmp_path / "report.html")]) == 0


def test_bad_yaml_is_one_report_error_line(tmp_path, capsys):
    run = _run_folder(tmp_path)
    (run / "config.yaml").write_text("env: [unclosed\n")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 2
    _one_line(capsys.readouterr().err, f"report error: {run / 'config.yaml'}: not valid YAML (")


def _train(run_dir, iterations: int, *extra: str) -> int:
    items = [*TINY, f"run_dir={run_dir}", f"iterations={iterations}", "eval.at_start=false"]
    return cli.main(["train", *[a for item in items for a in ("--set", item)], *extra])


def test_no_resume_over_a_longer_run_removes_its_later_dumps(tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(run, 2) == 0
    assert sorted(p.stem for p in (run / "rollouts").glob("*.jsonl")) == ["eval_after", "iter_000000", "iter_000001"]
    assert _train(run, 1, "--no-resume") == 0
    assert sorted(p.stem for p in (run / "rollouts").glob("*.jsonl")) == ["eval_after", "iter_000000"]
    capsys.readouterr()
    assert cli.main(["view", str(run)]) == 0
    assert "iter_000001" not in capsys.readouterr().out
