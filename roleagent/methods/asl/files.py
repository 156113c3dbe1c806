"""ASL's files under ``run_dir/asl/``, one folder per round, JSONL only, appended as the
round goes. Every append is counted; the counts go into the checkpoint and a resumed run
cuts each file back to its count and removes files the checkpoint never saw.

::

    asl/round_0000/questions.jsonl   every PG output: parsed pair, K checks, kept, M verdicts, reward
    asl/round_0000/grm_data.jsonl    the GRM's self-generated triples (question, response, label)
    asl/round_0000/grm_train.jsonl   what the GRM phase trains on (balanced per question, + real data)
    asl/round_0000/followups.jsonl   D_PG of the next round: (question, answer, HARDER/EASIER)
    asl/round_0000/grm_eval.jsonl    the GRM's verdicts on held-out gold and wrong answers
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path


class RoundFiles:
    def __init__(self, run_dir: Path):
        self.root = Path(run_dir) / "asl"
        self.rows: dict[str, int] = {}  # path relative to root -> rows written

    def path(self, round_index: int, name: str) -> str:
        return f"round_{round_index:04d}/{name}"

    def append(self, round_index: int, name: str, records: Iterable[dict]) -> None:
        relative = self.path(round_index, name)
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in records]
        with target.open("a", encoding="utf-8") as f:
            f.writelines(lines)
        self.rows[relative] = self.rows.get(relative, 0) + len(lines)

    def read(self, round_index: int, name: str) -> list[dict]:
        target = self.root / self.path(round_index, name)
        if not target.exists():
            return []
        return [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]

    def start_fresh(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.rows = {}

    def restore(self, rows: dict[str, int]) -> None:
        """Cut every file back to ``rows`` (a checkpoint's record) and delete the rest; a
        file shorter than its record means the run directory lost data: an error."""
        self.rows = {str(k): int(v) for k, v in rows.items()}
        for path in sorted(self.root.rglob("*.jsonl")) if self.root.exists() else []:
            relative = path.relative_to(self.root).as_posix()
            if relative not in self.rows:
                path.unlink()
                continue
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            if len(lines) < self.rows[relative]:
                raise RuntimeError(
                    f"{path}: {len(lines)} rows, but the checkpoint recorded {self.rows[relative]}; "
                    "the run directory is incomplete (resume from scratch with --no-resume)"
                )
            path.write_text("".join(lines[: self.rows[relative]]), encoding="utf-8")
        missing = [k for k, v in self.rows.items() if v and not (self.root / k).exists()]
        if missing:
            raise RuntimeError(f"{self.root}: files recorded by the checkpoint are missing: {', '.join(missing)}")
        for folder in sorted(self.root.glob("round_*")) if self.root.exists() else []:
            if not any(folder.iterdir()):
                folder.rmdir()
