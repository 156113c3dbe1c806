"""Runs survive kills and damaged files and lose nothing (a tiny model that really trains).

A kill is simulated by raising :class:`Killed` at the chosen point (nothing after it runs,
as with SIGKILL); every resumed run is compared, file by file and line by line (wall-clock
fields aside), with one uninterrupted run of the same command.
"""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
import torch

from roleagent.methods.role_agent.aiw.memory import MemoryDamaged
from roleagent.trainer import Trainer
from roleagent.trainer.checkpoint import CheckpointError, RunDirBusy, _file_entry
from tests.run_helpers import AIW, TINY, Killed, assert_same_run, config, memory_rows, metrics, run, trainable

ITERATIONS = 2


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted 2-iteration run with Agent-In-World on, and its final weights."""
    root = tmp_path_factory.mktemp("reference")
    trainer = run(root / "run", ITERATIONS, AIW)
    records = metrics(root / "run")
    assert [r.get("iteration", r.get("eval")) for r in records] == ["before", 0, 1, "after"]
    assert all(r["update/samples"] > 0 and r["update/grad_norm"] > 0 for r in records if "iteration" in r)
    rows = memory_rows(root / "run")
    assert {it for _, _, it, *_ in rows["failures"]} == {0, 1}  # both iterations filed failures
    return root / "run", trainable(trainer)


def _copy(reference, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(reference[0], run_dir)
    return run_dir


def _kill_at(monkeypatch, method: str, when):
    real = getattr(Trainer, method)

    def patched(self, *args):
        if when(*args):
            raise Killed(f"{method}{args}")
        return real(self, *args)

    monkeypatch.setattr(Trainer, method, patched)


def _resume_and_compare(run_dir, reference, *, expect_start=None):
    trainer = Trainer(config(run_dir, ITERATIONS, AIW), quiet=True)
    try:
        if expect_start is not None:
            assert trainer.start_iteration == expect_start
        trainer.run()
    finally:
        trainer.close()
    assert_same_run(run_dir, reference[0])
    for name, value in trainable(trainer).items():
        assert torch.equal(value, reference[1][name]), name


# ----------------------------------------------------------- item 18: exactly once -------


@pytest.mark.parametrize("where", ["before_first_checkpoint", "between_metrics_and_checkpoint"])
def test_killed_run_resumes_to_the_uninterrupted_files(tmp_path, monkeypatch, reference, where):
    at = 0 if where == "before_first_checkpoint" else 1
    _kill_at(monkeypatch, "save", lambda iteration: iteration == at)
    with pytest.raises(Killed):
        run(tmp_path / "run", ITERATIONS, AIW)
    monkeypatch.undo()
    # The kill left iteration `at`'s metrics line and failure rows behind.
    assert [r.get("iteration", r.get("eval")) for r in metrics(tmp_path / "run")][-1] == at
    assert {row[2] for row in memory_rows(tmp_path / "run")["failures"]} >= {at}
    _resume_and_compare(tmp_path / "run", reference, expect_start=at)


def test_kill_during_final_evaluation_writes_it_once(tmp_path, monkeypatch, reference):
    _kill_at(monkeypatch, "write_summary", lambda: True)  # after the "after" metrics line
    with pytest.raises(Killed):
        run(tmp_path / "run", ITERATIONS, AIW)
    monkeypatch.undo()
    assert metrics(tmp_path / "run")[-1]["eval"] == "after"
    _resume_and_compare(tmp_path / "run", reference, expect_start=ITERATIONS)


def test_rerunning_a_finished_run_changes_nothing(tmp_path, reference, capsys):
    run_dir = _copy(reference, tmp_path)

    def files():
        return {
            p.relative_to(run_dir): p.read_bytes()
            for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name != ".lock" and "failure_memory" not in p.name
        }

    before, rows = files(), memory_rows(run_dir)
    trainer = run(run_dir, ITERATIONS, AIW)
    assert trainer.finished and [e.label for e in trainer.evals] == ["before", "after"]
    assert "already finished" in capsys.readouterr().err
    assert files() == before and memory_rows(run_dir) == rows


def test_a_spent_budget_stops_training_checkpoints_and_evaluates(tmp_path, monkeypatch, capsys):
    """budget_minutes: no iteration starts once it is spent; the last iteration trained is
    checkpointed (here between checkpoint_every's), the final evaluation runs, and the run
    counts as finished (rerunning it changes nothing)."""
    asked = []

    def spent(self):
        asked.append(self.cfg.budget_minutes)
        return len(asked) > 2  # spent before the third iteration

    extra = ["checkpoint_every=3", "budget_minutes=5"]
    monkeypatch.setattr(Trainer, "budget_spent", spent)
    run(tmp_path / "run", 5, extra)
    monkeypatch.undo()
    assert [r.get("iteration", r.get("eval")) for r in metrics(tmp_path / "run")] == ["before", 0, 1, "after"]
    assert "budget_minutes spent after 2 of 5 iterations" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "checkpoints" / "iter_000001" / "finished.json").read_text())["evals"]
    assert run(tmp_path / "run", 5, extra).finished  # not trained again

    trainer = Trainer(config(tmp_path / "timed", 1, ["budget_minutes=1"]), quiet=True)
    try:
        trainer.started -= 59
        assert not trainer.budget_spent()
        trainer.started -= 2
        assert trainer.budget_spent()
        trainer.cfg.budget_minutes = 0  # no limit
        assert not trainer.budget_spent()
    finally:
        trainer.close()


# ------------------------------------------------------- item 19: damaged checkpoints ------


def _newest(run_dir):
    return run_dir / "checkpoints" / f"iter_{ITERATIONS - 1:06d}"


@pytest.mark.parametrize("damage", ["deleted_newest", "missing_latest", "truncated_state", "truncated_adapter"])
def test_damaged_checkpoint_falls_back_and_loses_nothing(tmp_path, reference, capsys, damage):
    run_dir = _copy(reference, tmp_path)
    newest = _newest(run_dir)
    if damage == "deleted_newest":  # checkpoints/latest now dangles
        shutil.rmtree(newest)
    elif damage == "missing_latest":  # the newest complete checkpoint is still found
        (run_dir / "checkpoints" / "latest").unlink()
        (newest / "finished.json").unlink()  # so the run must redo its final evaluation
    else:
        victim = newest / ("state.pt" if damage == "truncated_state" else "adapter/adapter_model.safetensors")
        victim.write_bytes(victim.read_bytes()[:100])
    expect = ITERATIONS if damage == "missing_latest" else ITERATIONS - 1
    _resume_and_compare(run_dir, reference, expect_start=expect)
    err = capsys.readouterr().err
    if damage.startswith("truncated"):
        assert str(victim) in err  # the warning names the damaged file


def test_dangling_latest_without_any_checkpoint_stops(tmp_path, reference):
    run_dir = _copy(reference, tmp_path)
    for path in (run_dir / "checkpoints").glob("iter_*"):
        shutil.rmtree(path)
    metrics_before = (run_dir / "metrics.jsonl").read_bytes()
    with pytest.raises(CheckpointError, match="latest names iter_000001, which does not exist"):
        Trainer(config(run_dir, ITERATIONS, AIW), quiet=True)
    (run_dir / "checkpoints" / "latest").unlink()  # no trace of checkpoints left at all
    trainer = Trainer(config(run_dir, ITERATIONS, AIW), quiet=True)
    try:
        with pytest.raises(CheckpointError, match="checkpoints were saved"):
            trainer.run()
    finally:
        trainer.close()
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics_before


@pytest.mark.parametrize("loss", ["deleted", "rows_lost"])
def test_lost_failure_memory_is_detected(tmp_path, reference, loss):
    run_dir = _copy(reference, tmp_path)
    shutil.rmtree(_newest(run_dir))  # resume must use iteration 0's record of the memory
    memory = run_dir / "failure_memory.sqlite"
    if loss == "deleted":
        for path in run_dir.glob("failure_memory.sqlite*"):
            path.unlink()
    else:  # what a lost -wal file does: the last committed transactions are gone
        conn = sqlite3.connect(str(memory))
        conn.execute("DELETE FROM retrievals")
        conn.commit()
        conn.close()
    before = memory_rows(run_dir) if memory.exists() else None
    with pytest.raises(MemoryDamaged, match=str(memory)):
        Trainer(config(run_dir, ITERATIONS, AIW), quiet=True)
    if before is not None:  # the refused resume deleted nothing
        assert memory_rows(run_dir) == before


def test_edited_metrics_file_is_detected(tmp_path, reference):
    run_dir = _copy(reference, tmp_path)
    shutil.rmtree(_newest(run_dir))
    path = run_dir / "metrics.jsonl"
    path.write_text(path.read_text().replace('"before"', '"b4"'))
    trainer = Trainer(config(run_dir, ITERATIONS, AIW), quiet=True)
    try:
        with pytest.raises(RuntimeError, match="metrics.jsonl does not start with"):
            trainer.run()
    finally:
        trainer.close()


# -------------------------------------------------- item 20: no code from a run dir --------


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # unpickling opens (creates) the marker file
        return (open, (self.marker, "w"))


def test_crafted_state_is_refused_and_never_runs(tmp_path, reference, capsys):
    run_dir = _copy(reference, tmp_path)
    newest = _newest(run_dir)
    marker = tmp_path / "pwned"
    torch.save({"format": 3, "x": _Payload(str(marker))}, newest / "state.pt")
    if (newest / "manifest.json").exists():  # an attacker can fix the manifest up too
        manifest = json.loads((newest / "manifest.json").read_text())
        manifest["files"]["state.pt"] = _file_entry(newest / "state.pt")
        (newest / "manifest.json").write_text(json.dumps(manifest))
    try:
        trainer = Trainer(config(run_dir, ITERATIONS, AIW), quiet=True)
    finally:
        assert not marker.exists()  # the payload never ran
    trainer.close()
    assert trainer.start_iteration == ITERATIONS - 1  # fell back to the previous checkpoint
    assert f"{newest / 'state.pt'}: refused" in capsys.readouterr().err


# --------------------------------------------------- item 21: one trainer per run dir -------


def test_second_trainer_on_a_run_dir_is_refused(tmp_path):
    first = Trainer(config(tmp_path / "run", 1), quiet=True)
    try:
        with pytest.raises(RunDirBusy, match="in use by another trainer"):
            Trainer(config(tmp_path / "run", 1), quiet=True)
    finally:
        first.close()
    Trainer(config(tmp_path / "run", 1), quiet=True).close()  # released on close


def test_safe_load_refuses_pickled_code(tmp_path):
    from roleagent.trainer.checkpoint import safe_load

    marker, path = tmp_path / "pwned", tmp_path / "state.pt"
    torch.save({"x": _Payload(str(marker))}, path)
    with pytest.raises(CheckpointError, match=f"{path}: refused"):
        safe_load(path)
    assert not marker.exists()


def test_cli_reports_a_busy_run_dir_in_one_line(tmp_path, capsys):
    from roleagent import cli
    from roleagent.trainer.checkpoint import RunDirLock

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lock = RunDirLock(run_dir)
    try:
        args = ["train"] + [a for item in TINY for a in ("--set", item)]
        code = cli.main(args + ["--set", f"run_dir={run_dir}", "--set", "iterations=1"])
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert code == 3
    assert err.startswith("run directory error: ") and err.count("\n") == 1, err
    assert "in use by another trainer" in err


def test_starting_over_does_not_keep_the_earlier_runs_checkpoints(tmp_path):
    # With --no-resume, an earlier run's higher-numbered checkpoints used to outrank and
    # prune the new run's, leaving `latest` dangling.
    run_dir = tmp_path / "run"
    run(run_dir, 3)
    run(run_dir, 1, resume=False)
    folders = sorted(p.name for p in (run_dir / "checkpoints").glob("iter_*"))
    assert folders == ["iter_000000"]
    resumed = Trainer(config(run_dir, 1), quiet=True)
    try:
        assert resumed.finished and resumed.start_iteration == 1
    finally:
        resumed.close()


def test_a_method_switched_on_at_resume_starts_with_an_empty_memory(tmp_path):
    # A failure memory an earlier attempt left in the run directory must not be taken over.
    run(tmp_path / "other", 1, AIW)
    run_dir = tmp_path / "run"
    run(run_dir, 1)  # no Agent-In-World: its checkpoint holds no AIW state
    shutil.copy(tmp_path / "other" / "failure_memory.sqlite", run_dir / "failure_memory.sqlite")
    assert memory_rows(run_dir)["failures"]
    trainer = Trainer(config(run_dir, 2, AIW), quiet=True)  # switched on for more iterations
    try:
        assert trainer.start_iteration == 1
        assert memory_rows(run_dir)["failures"] == []
    finally:
        trainer.close()
