"""One process per run folder: an exclusive ``flock`` on ``.lock`` inside it (trainers,
and ``roleagent sft --out``)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any


class RunDirBusy(RuntimeError):
    """Another trainer holds the run directory's lock."""


class RunDirLock:
    """An exclusive ``flock`` on ``run_dir/.lock``: one trainer per run directory.

    The kernel drops the lock when the process exits, however it exits (crash, SIGKILL),
    so a stale lock file never blocks a later run.
    """

    def __init__(self, run_dir: Path):
        self.path = run_dir / ".lock"
        self._file = self.path.open("a+")
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.seek(0)
            holder = self._file.read().strip() or "unknown"
            self._file.close()
            raise RunDirBusy(
                f"{run_dir} is in use by another trainer (pid {holder} holds {self.path}); "
                "wait for it to finish or choose another run_dir"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(str(os.getpid()))
        self._file.flush()

    def __enter__(self) -> RunDirLock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def release(self) -> None:
        if not self._file.closed:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
