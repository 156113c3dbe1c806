"""A private copy of a SQLite database for reading or checking it without touching it.

Opening a WAL-mode database, even to read, is not free of side effects: SQLite creates the
``-shm`` index beside it (impossible in a read-only, archived run folder, so the open
fails), and the last connection to close checkpoints the ``-wal`` file into the database
and deletes it, dropping whatever part of it it could not use (a garbled ``-wal`` is lost).
A copy of the database and its ``-wal`` in a temporary folder reads the same rows, WAL
included, and leaves the original files exactly as they were; the failure memories of a
run are small (a few MB), so the copy is cheap. Used by the trainer's check of the failure
memory on resume, by ``roleagent view --memory`` and by ``roleagent report``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def database_copy(path: str | Path) -> Iterator[Path]:
    """The path of a copy of ``path`` and its ``-wal`` file (when they exist) in a fresh
    temporary folder, removed on exit. A missing database gives the path of a missing
    file (SQLite then creates an empty database in the temporary folder)."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="roleagent-sqlite-") as folder:
        copy = Path(folder) / path.name
        for suffix in ("", "-wal"):  # not -shm: SQLite rebuilds its index from the -wal
            source = path.with_name(path.name + suffix)
            if source.is_file():
                shutil.copyfile(source, copy.with_name(copy.name + suffix))
        yield copy
