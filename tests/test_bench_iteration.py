"""benchmarks/bench_iteration.py's smoke run (tiny model, scripted environment): each variant
runs one iteration in its own process, and the report and the ``--out`` file carry the
roles' cost: the predictions' length and cut share, Agent-In-World's share and fallbacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_smoke_reports_the_roles_cost(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_iteration.py", "--smoke", "--paths", "new"]
        + ["--methods", "GiGPO,Role-Agent (WIA+AIW)", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["method"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"GiGPO", "Role-Agent (WIA+AIW)"}
    full = rows["Role-Agent (WIA+AIW)"]
    assert full["wia/tokens"] == 6.0 and full["wia/cut"] == 1.0  # the tiny model never closes its tag
    assert "wia/tokens" not in rows["GiGPO"]
    assert "predictions of 6.0 tokens on average, 100% cut at wia.max_new_tokens" in done.stdout
    assert f"{full['aiw/n_retrieval_fallback']:.0f} of {full['aiw/n_retrieval_queries']:.0f} retrievals" in done.stdout
    assert "Agent-In-World share of a full iteration = " in done.stdout
