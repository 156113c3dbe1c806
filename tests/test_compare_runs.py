"""scripts/compare_runs.py: the tool behind the "behaviour unchanged" evidence."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("compare_runs", ROOT / "scripts" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_runs)


def _run(path: Path, *, loss: float, prediction: str, new_field: bool = False) -> Path:
    (path / "rollouts").mkdir(parents=True)
    metrics = [{"iteration": 0, "update/loss": loss, "time/iteration_s": loss * 7, "aiw/time_s": 3.0}]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    step = {"action": "go", "reward": 1.0, "predictions": [prediction], "prediction_scores": [0.5]}
    if new_field:  # a newer dump: WIA record moved, advantage added
        step = {
            "action": "go",
            "reward": 1.0,
            "advantage": 0.3,
            "extras": {"wia": {"predictions": [prediction], "scores": [0.5]}},
        }
    (path / "rollouts" / "iter_000000.jsonl").write_text(json.dumps({"task_id": "t", "steps": [step]}) + "\n")
    return path


def test_identical_runs_modulo_wall_clock_and_moved_fields(tmp_path, capsys):
    a = _run(tmp_path / "a", loss=0.5, prediction="door opens")
    b = _run(tmp_path / "b", loss=0.5, prediction="door opens", new_field=True)
    assert compare_runs.main([str(a), str(b)]) == 1  # "advantage" exists only in the second run
    assert "ONLY IN SECOND steps[*].advantage" in capsys.readouterr().out
    assert compare_runs.main([str(a), str(b), "--ignore-new"]) == 0


def test_a_changed_value_is_reported(tmp_path, capsys):
    a = _run(tmp_path / "a", loss=0.5, prediction="door opens")
    b = _run(tmp_path / "b", loss=0.5, prediction="door stays shut", new_field=True)
    assert compare_runs.main([str(a), str(b), "--ignore-new"]) == 1
    assert "extras.wia.predictions" in capsys.readouterr().out
    c = _run(tmp_path / "c", loss=0.25, prediction="door opens")
    assert compare_runs.main([str(a), str(c)]) == 1
