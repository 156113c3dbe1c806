"""Persistent failure memory ℳ of Agent-In-World (Role-Agent §3.3, Alg. 1 lines 3, 21).

"We store these failure modes along with the corresponding failed trajectories and task
information in an offline interaction history ... In practice, we organize tasks under
unique failure modes rather than referring to every failed trajectory. On ALFWorld, this
library comprises 11 unique modes" (§3.3). Eleven is the size of the ALFWorld taxonomy
(Table 6), so a *mode* here is one taxonomy label (``dominant_type``); every failure
record points to its mode, and a mode lists the task ids that failed that way.

Storage is one SQLite file in the run directory (stdlib ``sqlite3``), in WAL mode with
``synchronous=FULL``: a transaction that :meth:`FailureMemory.commit` returned from is on
disk, so a killed trainer loses nothing committed. The schema, the row types and the
checkpoint's record of the rows are in ``memory_schema.py`` (also ``docs/agent_in_world.md``).

A mode's ``description`` is the core lesson (else the detail) of the first failure filed
under it — a stable, human-readable canonical text.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from roleagent.methods.role_agent.aiw.memory_schema import (
    FAILURE_COLUMNS,
    SCHEMA_SQL,
    SCHEMA_VERSION,
    FailureMode,
    FailureRecord,
    MemoryDamaged,
    check_record,
    rows_record,
)
from roleagent.methods.role_agent.aiw.reflection import Reflection
from roleagent.sqlite_copy import database_copy

__all__ = ["FailureMemory", "FailureMode", "FailureRecord", "MemoryDamaged"]


def _named(method):
    """Turn SQLite's errors inside ``method`` into :class:`MemoryDamaged` naming the file,
    so a damaged memory (a garbled page found mid-run) is one line, not a traceback."""

    @functools.wraps(method)
    def checked(self: FailureMemory, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as error:
            raise MemoryDamaged(f"{self.path}: failure memory unreadable ({error})") from error

    return checked


class FailureMemory:
    """SQLite-backed failure memory. One writer (the trainer's rank 0) at a time.

    The file is opened on first use, not by the constructor, so that a trainer that
    refuses to resume (a damaged checkpoint, a memory that is not the recorded one) leaves
    it exactly as it was: :meth:`restore` checks a copy and only schedules the cut-back.
    """

    def __init__(self, path: str | Path, taxonomy: Sequence[str] = ()):
        self.path = Path(path)
        self.taxonomy = tuple(taxonomy)
        self._connection: sqlite3.Connection | None = None
        self._pending_cut: int | None = None  # truncate_after(this) when the file is opened

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._connection is None:
            self._open()
        assert self._connection is not None
        return self._connection

    def _open(self) -> None:
        """Connect, create the schema if missing, record the taxonomy, check the schema
        version, then apply the cut-back :meth:`restore` scheduled."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # check_same_thread=False: the trainer may call from a worker thread; there is
        # still one writer at a time (calls are sequential).
        try:
            conn = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.executescript(SCHEMA_SQL)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            if self.taxonomy:
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('taxonomy', ?)", (json.dumps(list(self.taxonomy)),))
            conn.commit()
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as error:
            raise MemoryDamaged(f"{self.path}: failure memory unreadable ({error})") from error
        version = int(row[0] if row else SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            conn.close()
            raise RuntimeError(f"{self.path}: failure memory schema {version}, this code reads {SCHEMA_VERSION}")
        self._connection = conn
        if self._pending_cut is not None:
            cut, self._pending_cut = self._pending_cut, None
            self.truncate_after(cut)

    def restore(self, iteration: int, record: dict[str, Any] | None) -> int:
        """Prepare to resume from a checkpoint taken at ``iteration`` (-1: before any).
        On a private copy, cut the memory back to that iteration and check it: its pages
        (``quick_check``) and its rows against the checkpoint's ``record``
        (:class:`MemoryDamaged` if either fails), so a refused resume changes no file.
        The file itself is cut back when next used. Returns the failures the cut removes."""
        with database_copy(self.path) as copy:
            twin = FailureMemory(copy)
            try:
                removed = twin.truncate_after(iteration)
                twin.check_pages()
                now = twin.record()
            except MemoryDamaged as error:  # named by the copy's path: name the file instead
                raise MemoryDamaged(str(error).replace(str(copy), str(self.path))) from None
            finally:
                twin.close()
        if record is not None:
            check_record(self.path, now, record)
        if self._connection is None:
            self._pending_cut = iteration
        else:
            self.truncate_after(iteration)
        return removed

    # ------------------------------------------------------------ writing ----------

    @_named
    def add_failure(
        self,
        task_id: str,
        iteration: int,
        reflection: Reflection,
        *,
        trajectory_summary: str = "",
        task_text: str = "",
        raw_output: str = "",
    ) -> int:
        """File one failure under its mode (created on first use). Not committed yet."""
        cur = self._conn.cursor()
        row = cur.execute(
            "SELECT id FROM failure_modes WHERE dominant_type = ?", (reflection.dominant_type,)
        ).fetchone()
        if row is None:
            cur.execute(
                "INSERT INTO failure_modes (dominant_type, description, first_iteration, "
                "last_iteration, count) VALUES (?, ?, ?, ?, 0)",
                (reflection.dominant_type, reflection.core_lesson or reflection.detail, iteration, iteration),
            )
            mode_id = int(cur.lastrowid)
        else:
            mode_id = int(row[0])
        cur.execute(
            "UPDATE failure_modes SET count = count + 1, "
            "last_iteration = MAX(last_iteration, ?), "
            "first_iteration = MIN(first_iteration, ?) WHERE id = ?",
            (iteration, iteration, mode_id),
        )
        cur.execute(
            "INSERT INTO failures (task_id, iteration, dominant_type, detail, critical_step,"
            " core_lesson, retrieval_query, source, trajectory_summary, mode_id, created,"
            " task_text, raw_output, parsed_ok, type_status)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                task_id,
                int(iteration),
                reflection.dominant_type,
                reflection.detail,
                reflection.critical_step,
                reflection.core_lesson,
                reflection.retrieval_query,
                reflection.source,
                trajectory_summary,
                mode_id,
                time.time(),
                task_text,
                raw_output,
                int(reflection.parsed_ok),
                reflection.type_status,
            ),
        )
        return int(cur.lastrowid)

    @_named
    def add_retrievals(
        self, failure_id: int, iteration: int, rows: Iterable[tuple[str, int | None]], method: str
    ) -> None:
        """Record which tasks were retrieved for a failure (rank order). Not committed."""
        self._conn.executemany(
            "INSERT INTO retrievals (failure_id, iteration, rank, task_id, "
            "candidate_failure_id, method) VALUES (?, ?, ?, ?, ?, ?)",
            [(failure_id, iteration, rank, task_id, cand, method) for rank, (task_id, cand) in enumerate(rows)],
        )

    @_named
    def commit(self) -> None:
        """Make everything written so far durable (called once per iteration)."""
        self._conn.commit()

    @_named
    def rollback(self) -> None:
        self._conn.rollback()

    @_named
    def truncate_after(self, iteration: int, *, commit: bool = True) -> int:
        """Delete failures and retrievals of iterations > ``iteration`` (resume from a
        checkpoint taken at ``iteration``; -1 empties the memory), rebuild mode statistics
        and rewind the id counters, so rows written again get the ids an uninterrupted run
        gives them. Returns the number of failures removed. Commits unless ``commit`` is
        false (the caller then commits or rolls back)."""
        cur = self._conn.cursor()
        cur.execute(
            "DELETE FROM retrievals WHERE iteration > ? OR failure_id IN (SELECT id FROM failures WHERE iteration > ?)",
            (iteration, iteration),
        )
        removed = cur.execute("DELETE FROM failures WHERE iteration > ?", (iteration,)).rowcount
        cur.execute("DELETE FROM failure_modes WHERE id NOT IN (SELECT DISTINCT mode_id FROM failures)")
        cur.execute(
            "UPDATE failure_modes SET "
            "count = (SELECT COUNT(*) FROM failures f WHERE f.mode_id = failure_modes.id),"
            "first_iteration = (SELECT MIN(iteration) FROM failures f "
            "  WHERE f.mode_id = failure_modes.id),"
            "last_iteration = (SELECT MAX(iteration) FROM failures f "
            "  WHERE f.mode_id = failure_modes.id)"
        )
        for table in ("failures", "failure_modes", "retrievals"):
            cur.execute(
                f"UPDATE sqlite_sequence SET seq = (SELECT COALESCE(MAX(id), 0) FROM {table}) WHERE name = ?", (table,)
            )
        if commit:
            self._conn.commit()
        return int(removed)

    @_named
    def record(self) -> dict[str, Any]:
        """Row counts and a SHA-256 over the committed rows' content (``created`` times
        left out), for a checkpoint to verify the memory against on resume."""
        return rows_record(self._conn)

    @_named
    def check_pages(self) -> None:
        """Raise :class:`MemoryDamaged` when SQLite's ``quick_check`` finds damaged pages
        (a file garbled in the middle, which the row record alone may not read)."""
        problems = [str(r[0]) for r in self._conn.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            raise MemoryDamaged(f"{self.path}: failure memory unreadable ({'; '.join(problems[:3])})")

    def verify(self, record: dict[str, Any]) -> None:
        """Raise :class:`MemoryDamaged` naming the file if the memory is not the one the
        checkpoint recorded (file or its WAL lost, rows altered)."""
        check_record(self.path, self.record(), record)

    # ------------------------------------------------------------ reading ----------

    @_named
    def meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    @_named
    def modes(self) -> list[FailureMode]:
        rows = self._conn.execute(
            "SELECT id, dominant_type, description, first_iteration, last_iteration, count "
            "FROM failure_modes ORDER BY count DESC, id"
        ).fetchall()
        return [FailureMode(*r) for r in rows]

    @_named
    def failures(
        self, limit: int | None = None, *, after_id: int = 0, newest_first: bool = False
    ) -> list[FailureRecord]:
        """Failure records with ``id > after_id``, oldest first (or newest first)."""
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {', '.join(FAILURE_COLUMNS)} FROM failures WHERE id > ? ORDER BY id {order}"
        args: tuple[Any, ...] = (after_id,)
        if limit is not None:
            sql += " LIMIT ?"
            args += (int(limit),)
        return [self._record(r) for r in self._conn.execute(sql, args).fetchall()]

    @_named
    def get_failures(self, ids: Sequence[int]) -> list[FailureRecord]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._conn.execute(
            f"SELECT {', '.join(FAILURE_COLUMNS)} FROM failures WHERE id IN ({marks})", tuple(ids)
        ).fetchall()
        by_id = {r[0]: self._record(r) for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    @_named
    def n_failures(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM failures").fetchone()[0])

    @_named
    def count_by_type_per_iteration(self) -> dict[int, dict[str, int]]:
        """``{iteration: {dominant_type: count}}`` (not cumulative; Figure 4 input)."""
        out: dict[int, dict[str, int]] = {}
        for it, label, n in self._conn.execute(
            "SELECT iteration, dominant_type, COUNT(*) FROM failures "
            "GROUP BY iteration, dominant_type ORDER BY iteration, dominant_type"
        ):
            out.setdefault(int(it), {})[label] = int(n)
        return out

    @_named
    def tasks_for_mode(self, mode_id: int) -> list[str]:
        """Distinct task ids filed under a mode, most frequent first."""
        rows = self._conn.execute(
            "SELECT task_id, COUNT(*) AS n, MIN(id) FROM failures WHERE mode_id = ? "
            "GROUP BY task_id ORDER BY n DESC, MIN(id)",
            (mode_id,),
        ).fetchall()
        return [r[0] for r in rows]

    @_named
    def retrievals(self, iteration: int | None = None) -> list[dict[str, Any]]:
        sql = "SELECT failure_id, iteration, rank, task_id, candidate_failure_id, method FROM retrievals"
        args: tuple[Any, ...] = ()
        if iteration is not None:
            sql += " WHERE iteration = ?"
            args = (iteration,)
        keys = ("failure_id", "iteration", "rank", "task_id", "candidate_failure_id", "method")
        return [dict(zip(keys, r)) for r in self._conn.execute(sql + " ORDER BY id", args)]

    @staticmethod
    def _record(row: Sequence[Any]) -> FailureRecord:
        values = list(row)
        values[14] = bool(values[14])
        return FailureRecord(*values)

    def close(self) -> None:
        """Commit and close (nothing to do when the file was never opened)."""
        conn, self._connection = self._connection, None
        if conn is None:
            return
        try:
            conn.commit()
        finally:
            conn.close()

    def __enter__(self) -> FailureMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
