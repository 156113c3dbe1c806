"""What the fault drill of issue 27 found (items 12, 15, 16 and 21): a failure memory
garbled in the middle, a disk that fills up while a checkpoint is written and a refused
resume that deleted a garbled ``-wal`` file each end in one line, and leave the run folder
resumable and exactly as they found it; an evaluation in which every episode crashed stops
with the reason instead of printing a table of NaN."""

from __future__ import annotations

import errno
import shutil

import pytest
import torch

from roleagent import cli
from roleagent.methods.role_agent.aiw.memory import FailureMemory, MemoryDamaged
from roleagent.trainer import Trainer
from roleagent.trainer.disk_space import disk_full
from tests import down_env  # noqa: F401 - registers the env "down"
from tests.run_helpers import AIW, TINY, Killed, config, metrics, run


def _train(run_dir, iterations: int, *extra: str) -> int:
    items = [*TINY, f"run_dir={run_dir}", f"iterations={iterations}", "eval.at_start=false", *extra]
    return cli.main(["train", *[a for item in items for a in ("--set", item)]])


def _one_line(err: str, prefix: str) -> None:
    assert err.startswith(prefix) and err.count("\n") == 1 and "Traceback" not in err, err


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _garble(path, start: int, length: int = 2000) -> None:
    data = bytearray(path.read_bytes())
    data[start : start + length] = bytes((37 * i + 11) % 256 for i in range(length))[: len(data) - start]
    path.write_bytes(bytes(data))


def test_memory_garbled_in_the_middle_is_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert _train(run_dir, 1, *AIW) == 0  # a clean stop: the memory is one file, no -wal
    memory = run_dir / "failure_memory.sqlite"
    assert not memory.with_name(memory.name + "-wal").exists()
    _garble(memory, memory.stat().st_size // 3)  # the header (and so the schema) stays readable
    before = _files(run_dir)
    capsys.readouterr()
    assert _train(run_dir, 2, *AIW) == 3
    err = capsys.readouterr().err
    _one_line(err, f"run directory error: {memory}: failure memory unreadable (")
    assert {k: v for k, v in _files(run_dir).items() if k != ".lock"} == {
        k: v for k, v in before.items() if k != ".lock"
    }


def test_damage_found_mid_run_names_the_memory(tmp_path):
    path = tmp_path / "m.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    memory = FailureMemory(path)  # opened on first use
    with pytest.raises(MemoryDamaged, match=f"{path}: failure memory unreadable"):
        memory.modes()


def test_refused_resume_leaves_a_garbled_wal_as_it_found_it(tmp_path, monkeypatch, capsys):
    """A kill after iteration 1's memory commit leaves rows in the -wal file; garbled, the
    resume is refused, and the -wal file (and every other file) is still there, unchanged."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    monkeypatch.setattr(FailureMemory, "close", lambda self: None)  # as after kill -9: the -wal stays
    real_save = Trainer.save

    def killed_at_second_save(self, iteration):
        if iteration == 1:
            shutil.copytree(live, crashed)  # the folder as SIGKILL leaves it (connection still open)
            raise Killed("save(1)")
        return real_save(self, iteration)

    monkeypatch.setattr(Trainer, "save", killed_at_second_save)
    with pytest.raises(Killed):
        run(live, 2, ["eval.at_start=false", *AIW])
    monkeypatch.undo()
    wal = crashed / "failure_memory.sqlite-wal"
    assert wal.stat().st_size > 4096  # the memory's rows are in it
    _garble(wal, 32 + 24 + 100)  # inside the first frame: SQLite would drop the whole -wal
    before = _files(crashed)
    capsys.readouterr()
    assert _train(crashed, 2, *AIW) == 3
    _one_line(capsys.readouterr().err, f"run directory error: {crashed / 'failure_memory.sqlite'} holds ")
    after = _files(crashed)
    assert after.keys() == before.keys()  # the -wal file is still there...
    assert all(after[k] == before[k] for k in before if k != ".lock")  # ...and nothing changed


def _torch_disk_full(when):
    """``torch.save`` that fails as torch's zip writer does on a full disk while ``when(path)``."""
    real = torch.save

    def save(obj, path, *args, **kwargs):
        if when(str(path)):
            open(path, "wb").write(b"\0" * 100)  # a partial file, as the real failure leaves
            raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 8256 vs 8144")
        return real(obj, path, *args, **kwargs)

    return save


def test_disk_full_while_checkpointing_is_one_line_and_resumes(tmp_path, monkeypatch, capsys):
    reference = tmp_path / "reference"
    run(reference, 2, ["eval.at_start=false"])
    run_dir = tmp_path / "run"
    monkeypatch.setattr(torch, "save", _torch_disk_full(lambda path: ".tmp_iter_000001/state.pt" in path))
    capsys.readouterr()
    assert _train(run_dir, 2) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err
    err = err[err.index("run directory error: ") :]  # after the progress bars
    _one_line(err, "run directory error: disk full while writing checkpoint iter_000001 in ")
    assert "it needs about " in err and "MiB are free" in err and "resumes from iter_000000" in err
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter_000000", "latest"]
    monkeypatch.undo()  # space is back
    trainer = Trainer(config(run_dir, 2), quiet=True)
    try:
        assert trainer.start_iteration == 1
        trainer.run()
    finally:
        trainer.close()
    assert metrics(run_dir) == metrics(reference)


@pytest.mark.parametrize(
    "error,full",
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"), True),
        (OSError(errno.EACCES, "Permission denied"), False),
        (RuntimeError("CUDA out of memory"), False),
    ],
)
def test_a_full_disk_is_told_apart(error, full):
    assert disk_full(error) is full


def test_eval_where_every_episode_crashed_stops_with_the_reason(tmp_path, capsys):
    items = [*TINY, "env.name=down", "env.processes=true", "eval.crash_retries=0"]
    code = cli.main(["eval", "--out", str(tmp_path / "eval"), *[a for item in items for a in ("--set", item)]])
    err = capsys.readouterr().err
    assert code == 4, err
    err = err[err.index("evaluation error: ") :]  # after the progress bars
    _one_line(err, "evaluation error: every episode of panel eval crashed (2 episodes, after replays)")
