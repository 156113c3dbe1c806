"""A run a user can trust (issue 27, items 2, 13, 14 and 17): a damaged ``latest`` pointer,
a shortened ``metrics.jsonl`` and configs that cannot run get one line from the CLI, not a
traceback; counts have upper bounds; ``update/entropy`` is measured when it is not optimised."""

from __future__ import annotations

import json

import pytest

from roleagent import cli
from tests.run_helpers import TINY, run


def _train(run_dir, iterations: int, *extra: str) -> int:
    items = [*TINY, f"run_dir={run_dir}", f"iterations={iterations}", "eval.at_start=false", *extra]
    return cli.main(["train", *[a for item in items for a in ("--set", item)]])


class _NoTrainer:
    def __init__(self, *args, **kwargs):
        raise AssertionError("a config that cannot run reached the trainer")


def _one_line(err: str, prefix: str) -> None:
    assert err.startswith(prefix) and err.count("\n") == 1 and "Traceback" not in err, err


def test_garbage_latest_pointer_is_a_missing_one(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert _train(run_dir, 1) == 0
    (run_dir / "checkpoints" / "latest").write_bytes(b"\xff\xfe\x00\x9c garbage \x80")
    capsys.readouterr()
    assert _train(run_dir, 2) == 0  # resumed from the newest valid checkpoint
    assert "does not name a checkpoint (damaged): treated as missing" in capsys.readouterr().err
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("iteration", r.get("eval")) for r in records] == [0, 1, "after"]
    assert (run_dir / "checkpoints" / "latest").read_text() == "iter_000001"


def test_shortened_metrics_file_is_one_line_with_the_remedy(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert _train(run_dir, 1) == 0
    metrics = run_dir / "metrics.jsonl"
    metrics.write_bytes(metrics.read_bytes()[:10])
    capsys.readouterr()
    assert _train(run_dir, 2) == 3
    err = capsys.readouterr().err
    _one_line(err, "run directory error: ")
    assert "metrics.jsonl does not start with" in err and "--no-resume" in err


@pytest.mark.parametrize(
    "extra,expected",
    [
        (["env.train_split=nope"], "env.train_split='nope': lucky has no such split; its splits: train, eval"),
        (["rollout.group_size=100000000000"], "rollout.group_size=100000000000: must be in [1, 16777216]"),
        (["rollout.group_size=3000"], "6000 episodes per iteration, more than 4096"),
        (["optim.epochs=10000000000"], "optim.epochs=10000000000: must be in [1,"),
        (["run_dir=FILE"], "must be a folder path (not a file, nor inside one)"),
        (["run_dir=FILE/inside"], "must be a folder path (not a file, nor inside one)"),
    ],
)
def test_configs_that_cannot_run_are_one_line(tmp_path, capsys, monkeypatch, extra, expected):
    if "train_split" not in extra[0]:  # caught by validation: never build 10**11 environments
        import roleagent.trainer

        monkeypatch.setattr(roleagent.trainer, "Trainer", _NoTrainer)
    (tmp_path / "FILE").write_text("a file, not a folder")
    extra = [e.replace("FILE", str(tmp_path / "FILE")) for e in extra]
    code = _train(tmp_path / "run", 1, *extra)  # a later run_dir= wins over the first
    err = capsys.readouterr().err
    assert code == 2
    _one_line(err, "config error: ")
    assert expected in err, err


def test_eval_workers_have_an_upper_bound(capsys, monkeypatch):
    import roleagent.envs.workers

    monkeypatch.setattr(roleagent.envs.workers, "make_pool", _NoTrainer)  # never start 10**11 workers
    assert cli.main(["eval", "--policy", "expert", "--env", "scripted", "--workers", str(10**11)]) == 2
    _one_line(capsys.readouterr().err, "config error: --workers=100000000000")


def test_entropy_is_measured_when_not_optimised(tmp_path):
    run(tmp_path / "run", 1, ["eval.at_start=false", "optim.entropy_coef=0"])
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["update/samples"] > 0
    assert record["update/entropy"] > 0.1  # a random tiny model's tokens: far from collapsed
