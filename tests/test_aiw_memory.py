"""Agent-In-World failure memory: SQLite schema, queries, durability."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roleagent.methods.role_agent.aiw.memory import FailureMemory, MemoryDamaged
from roleagent.methods.role_agent.aiw.reflection import Reflection

ROOT = Path(__file__).resolve().parents[1]


def ref(label: str, lesson: str = "lesson", step: int | None = 2) -> Reflection:
    return Reflection(
        dominant_type=label,
        detail=f"detail {label}",
        critical_step=step,
        core_lesson=lesson,
        retrieval_query=f"query {label}",
        source="policy",
    )


def test_schema_modes_and_queries(tmp_path):
    path = tmp_path / "run" / "failure_memory.sqlite"
    with FailureMemory(path, ("a_mode", "b_mode")) as mem:
        f1 = mem.add_failure(
            "e/train/1",
            0,
            ref("a_mode", "first lesson"),
            trajectory_summary="3 steps",
            task_text="do x",
            raw_output="raw",
        )
        mem.add_failure("e/train/2", 0, ref("a_mode", "second lesson"))
        mem.add_failure("e/train/1", 2, ref("b_mode", step=None))
        mem.add_failure("e/train/1", 3, ref("a_mode"))
        mem.commit()
        modes = mem.modes()
        assert [(m.dominant_type, m.count) for m in modes] == [("a_mode", 3), ("b_mode", 1)]
        a = modes[0]
        assert (a.first_iteration, a.last_iteration) == (0, 3)
        assert a.description == "first lesson"  # canonical: the first failure's lesson
        assert mem.tasks_for_mode(a.id) == ["e/train/1", "e/train/2"]
        assert mem.count_by_type_per_iteration() == {0: {"a_mode": 2}, 2: {"b_mode": 1}, 3: {"a_mode": 1}}
        recs = mem.failures()
        assert [r.id for r in recs] == sorted(r.id for r in recs)
        r1 = recs[0]
        assert (
            r1.id,
            r1.task_id,
            r1.iteration,
            r1.critical_step,
            r1.task_text,
            r1.raw_output,
            r1.trajectory_summary,
        ) == (f1, "e/train/1", 0, 2, "do x", "raw", "3 steps")
        assert recs[2].critical_step is None
        assert len(mem.failures(limit=2)) == 2
        assert mem.failures(limit=1, newest_first=True)[0].iteration == 3
        assert [r.id for r in mem.failures(after_id=recs[1].id)] == [recs[2].id, recs[3].id]
        assert mem.get_failures([recs[3].id, recs[0].id])[0].id == recs[3].id
        assert mem.meta("schema_version") == "1"
        mem.add_retrievals(f1, 0, [("e/train/2", recs[1].id)], "bm25")
        mem.commit()
        assert mem.retrievals(0)[0]["task_id"] == "e/train/2"
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"failure_modes", "failures", "retrievals", "meta"} <= tables
    con.close()


def test_truncate_after_rebuilds_modes(tmp_path):
    with FailureMemory(tmp_path / "m.sqlite") as mem:
        mem.add_failure("e/train/1", 1, ref("a"))
        fid = mem.add_failure("e/train/2", 2, ref("a"))
        mem.add_failure("e/train/3", 3, ref("b"))
        mem.add_retrievals(fid, 2, [("e/train/1", None)], "llm")
        mem.commit()
        assert mem.truncate_after(1) == 2
        assert [(m.dominant_type, m.count, m.last_iteration) for m in mem.modes()] == [("a", 1, 1)]
        assert mem.retrievals() == []
        assert mem.n_failures() == 1


def test_rows_written_again_after_truncation_get_the_same_ids(tmp_path):
    """A resumed run refiles the dropped iteration under the ids an uninterrupted run used."""
    with FailureMemory(tmp_path / "m.sqlite") as mem:
        mem.add_failure("e/train/1", 0, ref("a"))
        first = mem.add_failure("e/train/2", 1, ref("b"))
        mem.add_retrievals(first, 1, [("e/train/1", 1)], "bm25")
        mem.commit()
        rows = mem.record()
        mem.truncate_after(0)
        again = mem.add_failure("e/train/2", 1, ref("b"))
        mem.add_retrievals(again, 1, [("e/train/1", 1)], "bm25")
        mem.commit()
        assert again == first == 2
        assert [m.id for m in mem.modes()] == [1, 2]
        assert mem.record() == rows  # same rows, same content digest


def test_memory_checked_against_the_checkpoint_record(tmp_path):
    path = tmp_path / "m.sqlite"
    with FailureMemory(path) as mem:
        mem.add_failure("e/train/1", 0, ref("a"))
        mem.commit()
        record = mem.record()
        mem.verify(record)
    assert record["rows"] == {"failure_modes": 1, "failures": 1, "retrievals": 0}
    for p in tmp_path.glob("m.sqlite*"):  # file (and WAL) lost: recreated empty...
        p.unlink()
    with FailureMemory(path) as mem, pytest.raises(MemoryDamaged, match=str(path)):
        mem.verify(record)  # ...but never taken for the recorded one
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(MemoryDamaged, match=f"{path}: failure memory unreadable"):
        FailureMemory(path).n_failures()  # the file is opened on first use


def test_uncommitted_rows_are_not_visible_to_a_reader(tmp_path):
    path = tmp_path / "m.sqlite"
    mem = FailureMemory(path)
    mem.add_failure("e/train/1", 0, ref("a"))
    reader = sqlite3.connect(path)
    assert reader.execute("SELECT COUNT(*) FROM failures").fetchone()[0] == 0
    mem.commit()
    assert reader.execute("SELECT COUNT(*) FROM failures").fetchone()[0] == 1
    reader.close()
    mem.close()


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from roleagent.methods.role_agent.aiw.memory import FailureMemory, MemoryDamaged
    from roleagent.methods.role_agent.aiw.reflection import Reflection
    mem = FailureMemory({path!r}, ("a",))
    for i in range(5):
        mem.add_failure(f"e/train/{{i}}", 0, Reflection(dominant_type="a", source="rule"))
    mem.commit()
    for i in range(5, 8):  # written, never committed
        mem.add_failure(f"e/train/{{i}}", 1, Reflection(dominant_type="a", source="rule"))
    print("committed", flush=True)
    time.sleep(60)
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_memory_survives_sigkill_after_commit(tmp_path):
    path = tmp_path / "run" / "failure_memory.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(root=str(ROOT), path=str(path))], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "committed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with FailureMemory(path) as mem:  # reopen after the crash: WAL recovery
        recs = mem.failures()
        assert [r.task_id for r in recs] == [f"e/train/{i}" for i in range(5)]
        assert mem.modes()[0].count == 5
        # the reopened memory is writable
        mem.add_failure("e/train/9", 2, Reflection(dominant_type="a", source="rule"))
        mem.commit()
        assert mem.n_failures() == 6
