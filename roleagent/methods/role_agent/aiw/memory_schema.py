"""Schema of the Agent-In-World failure memory (``memory.py``), its row types, and the
record of its rows that a checkpoint keeps to verify the file against on resume.

The tables (also in ``docs/agent_in_world.md``)::

    meta(key TEXT PRIMARY KEY, value TEXT)                  -- schema_version, taxonomy
    failure_modes(id INTEGER PRIMARY KEY, dominant_type TEXT UNIQUE, description TEXT,
                  first_iteration INTEGER, last_iteration INTEGER, count INTEGER)
    failures(id INTEGER PRIMARY KEY, task_id TEXT, iteration INTEGER, dominant_type TEXT,
             detail TEXT, critical_step INTEGER NULL, core_lesson TEXT,
             retrieval_query TEXT, source TEXT, trajectory_summary TEXT,
             mode_id INTEGER REFERENCES failure_modes(id), created REAL,
             task_text TEXT, raw_output TEXT, parsed_ok INTEGER, type_status TEXT)
    retrievals(id INTEGER PRIMARY KEY, failure_id INTEGER REFERENCES failures(id),
               iteration INTEGER, rank INTEGER, task_id TEXT,
               candidate_failure_id INTEGER, method TEXT)

A checkpoint's record (:func:`rows_record`) is the row count of each table and a SHA-256
over every row's content, the wall-clock ``created`` column left out, so an uninterrupted
run and a resumed one record the same memory.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roleagent.methods.role_agent.aiw.reflection import Reflection

SCHEMA_VERSION = 1

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS failure_modes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dominant_type TEXT NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    first_iteration INTEGER NOT NULL,
    last_iteration INTEGER NOT NULL,
    count INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    dominant_type TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    critical_step INTEGER,
    core_lesson TEXT NOT NULL DEFAULT '',
    retrieval_query TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL,
    trajectory_summary TEXT NOT NULL DEFAULT '',
    mode_id INTEGER NOT NULL REFERENCES failure_modes(id),
    created REAL NOT NULL,
    task_text TEXT NOT NULL DEFAULT '',
    raw_output TEXT NOT NULL DEFAULT '',
    parsed_ok INTEGER NOT NULL DEFAULT 1,
    type_status TEXT NOT NULL DEFAULT 'exact'
);
CREATE INDEX IF NOT EXISTS failures_task ON failures(task_id);
CREATE INDEX IF NOT EXISTS failures_mode ON failures(mode_id);
CREATE INDEX IF NOT EXISTS failures_iter ON failures(iteration);
CREATE TABLE IF NOT EXISTS retrievals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    failure_id INTEGER NOT NULL REFERENCES failures(id),
    iteration INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    candidate_failure_id INTEGER,
    method TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS retrievals_iter ON retrievals(iteration);
"""

FAILURE_COLUMNS = (
    "id",
    "task_id",
    "iteration",
    "dominant_type",
    "detail",
    "critical_step",
    "core_lesson",
    "retrieval_query",
    "source",
    "trajectory_summary",
    "mode_id",
    "created",
    "task_text",
    "raw_output",
    "parsed_ok",
    "type_status",
)

# What :meth:`FailureMemory.record` digests: every column but the wall-clock ``created``.
_RECORD_COLUMNS = {
    "failure_modes": "id, dominant_type, description, first_iteration, last_iteration, count",
    "failures": ", ".join(c for c in FAILURE_COLUMNS if c != "created"),
    "retrievals": "id, failure_id, iteration, rank, task_id, candidate_failure_id, method",
}


@dataclass(frozen=True)
class FailureMode:
    id: int
    dominant_type: str
    description: str
    first_iteration: int
    last_iteration: int
    count: int


@dataclass(frozen=True)
class FailureRecord:
    id: int
    task_id: str
    iteration: int
    dominant_type: str
    detail: str
    critical_step: int | None
    core_lesson: str
    retrieval_query: str
    source: str
    trajectory_summary: str
    mode_id: int
    created: float
    task_text: str
    raw_output: str
    parsed_ok: bool
    type_status: str

    def reflection(self) -> Reflection:
        return Reflection(
            dominant_type=self.dominant_type,
            detail=self.detail,
            critical_step=self.critical_step,
            core_lesson=self.core_lesson,
            retrieval_query=self.retrieval_query,
            source=self.source,
            parsed_ok=self.parsed_ok,
            type_status=self.type_status,
        )

    def document(self) -> str:
        """What BM25 / embeddings index: the reflection and its retrieval query.

        The task text is left out on purpose: AIW retrieves by error pattern, not by task
        text (§3.3: "Compared with ... task-text retrieval").
        """
        return " ".join(
            x for x in (self.dominant_type.replace("_", " "), self.detail, self.core_lesson, self.retrieval_query) if x
        )


class MemoryDamaged(RuntimeError):
    """The memory file is unreadable or disagrees with the checkpoint's record of it."""


def rows_record(conn: sqlite3.Connection) -> dict[str, Any]:
    """``{"rows": {table: count}, "sha256": ...}`` over the committed rows of the three
    tables, in id order (``created`` left out)."""
    digest = hashlib.sha256()
    counts = {}
    for table, columns in _RECORD_COLUMNS.items():
        rows = conn.execute(f"SELECT {columns} FROM {table} ORDER BY id").fetchall()
        counts[table] = len(rows)
        for row in rows:
            digest.update(json.dumps(row).encode())
    return {"rows": counts, "sha256": digest.hexdigest()}


def check_record(path: Path, now: dict[str, Any], recorded: dict[str, Any]) -> None:
    """Raise :class:`MemoryDamaged` naming ``path`` when the memory's record ``now`` is not
    the ``recorded`` one (file or its WAL lost, rows altered)."""
    if now != recorded:
        raise MemoryDamaged(
            f"{path} holds {now['rows']} rows, the checkpoint recorded {recorded['rows']}"
            + (" (same counts, different content)" if now["rows"] == recorded["rows"] else "")
            + ": the memory file or its -wal file was lost, replaced or damaged; restore it "
            "(or start the run over in a new run_dir)"
        )
