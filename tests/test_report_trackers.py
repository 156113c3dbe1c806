"""``report_to``: the optional W&B and trackio sinks next to ``metrics.jsonl``, tested in
their offline (W&B) and local (trackio) modes in a child process with its own folders;
skipped where the package is not installed (``scripts/setup.sh --all`` installs both).
``report_to`` defaults to ``[jsonl]``; any other sink it names must be installed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import checked_config

from roleagent.config import ConfigError, load_config
from roleagent.trainer.metrics import MetricsWriter, check_report_to, tracker_scalars

ROOT = Path(__file__).resolve().parents[1]

WRITE = """
import sys
from pathlib import Path
from roleagent.trainer.metrics import MetricsWriter
run = Path(sys.argv[2])
run.mkdir(parents=True)
w = MetricsWriter(run, tensorboard=False, report_to=["jsonl", sys.argv[1]], config={"algo": {"name": "grpo_marker"}})
w.write({"iteration": 0, "train/success": 0.25, "update/kl": float("nan")})
w.write({"iteration": 1, "train/success": 0.5})
w.write({"eval": "after", "split": "valid_seen", "eval/success": 0.75})
w.close()
"""


def test_tracker_scalars_keep_finite_numbers_and_name_the_panel():
    assert tracker_scalars({"iteration": 3, "train/success": 0.5, "update/kl": float("nan"), "flag": True}) == {
        "iteration": 3,
        "train/success": 0.5,
    }
    assert tracker_scalars({"eval": "after", "split": "valid_seen", "eval/success": 0.75, "eval/length": 4}) == {
        "eval/valid_seen/success": 0.75,
        "eval/valid_seen/length": 4,
    }


def test_report_to_is_checked(monkeypatch):
    assert checked_config(None, []).report_to == ["jsonl"]
    with pytest.raises(ConfigError, match="report_to: unknown 'mlflow'"):
        checked_config(None, ["report_to=[jsonl, mlflow]"])
    with pytest.raises(ConfigError, match="must include 'jsonl'"):
        checked_config(None, ["report_to=[tensorboard]"])
    with pytest.raises(ConfigError, match="named twice"):
        check_report_to(["jsonl", "jsonl"])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    for sink in ("tensorboard", "wandb", "trackio"):  # one rule for every sink: named and missing is an error
        with pytest.raises(ConfigError, match=rf"{sink} is not installed: pip install 'roleagent\[{sink}\]'"):
            check_report_to(["jsonl", sink])
    check_report_to(["jsonl"])  # the default needs nothing


def test_default_sinks_write_the_jsonl_record_alone(tmp_path):
    """The default ``report_to`` makes no TensorBoard folder, installed or not (no silent skip)."""
    cfg = load_config(None, [f"run_dir={tmp_path}"])
    writer = MetricsWriter.from_config(cfg)
    writer.write({"iteration": 0, "train/success": 0.5})
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def _write(tracker: str, tmp_path: Path, env: dict[str, str]) -> Path:
    if importlib.util.find_spec(tracker) is None:
        pytest.skip(f"{tracker} is not installed (scripts/setup.sh --all installs roleagent[wandb,trackio])")
    run = tmp_path / "run"
    full_env = {**os.environ, "HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    result = subprocess.run(
        [sys.executable, "-c", WRITE, tracker, str(run)], env={**full_env, **env}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and lines[0]["update/kl"] is None  # the JSONL record is unchanged
    return run


@pytest.mark.slow
def test_wandb_offline_run_holds_the_metrics(tmp_path):
    run = _write("wandb", tmp_path, {"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    files = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    data = files[0].read_bytes()  # W&B's record log: the keys and JSON values appear as written
    assert b"train/success" in data and b"0.25" in data and b"eval/valid_seen/success" in data
    assert b"update/kl" not in data  # the NaN is not logged
    assert b"grpo_marker" in data  # the run's config


@pytest.mark.slow
def test_trackio_local_run_holds_the_metrics(tmp_path):
    run = _write("trackio", tmp_path, {"TRACKIO_DIR": str(tmp_path / "trackio")})
    read = (
        "from trackio.sqlite_storage import SQLiteStorage as S; import json; "
        "print(json.dumps([{k: v for k, v in r.items() if k != 'timestamp'} for r in S.get_logs('roleagent', 'run')]))"
    )
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    logs = json.loads(out.stdout.strip().splitlines()[-1])
    assert [{k: v for k, v in r.items() if k != "step"} for r in logs] == [
        {"iteration": 0, "train/success": 0.25},
        {"iteration": 1, "train/success": 0.5},
        {"eval/valid_seen/success": 0.75},
    ]
    assert run.exists()
