"""Evaluations keep per-game outcomes; the run summary prints counts with Wilson intervals
and the paired McNemar test of consecutive rows (hand-made trajectories, hand-computed
numbers)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from roleagent.config import load_config
from roleagent.trainer.run_files import EvalResult, log_line, write_run_summary
from roleagent.types import Task, Trajectory
from tests.run_helpers import metrics, rollouts, run

GAMES = [Task(f"g{i}", "lucky", metadata={"task_type": "a" if i < 5 else "b"}) for i in range(10)]


def _episodes(outcomes: str) -> list[Trajectory]:
    """One episode per game: ``1`` solved, ``0`` failed, ``x`` crashed."""
    return [Trajectory(task=g, success=o == "1", crashed=o == "x") for g, o in zip(GAMES, outcomes)]


def _result(label: str, outcomes: str, sampled: tuple[str, ...] = ()) -> EvalResult:
    return EvalResult.of(label, "eval", _episodes(outcomes), {}, 0, [_episodes(s) for s in sampled])


def test_eval_result_keeps_outcomes_counts_and_sampled_success():
    r = _result("sft", "111111000x", sampled=("1100000000", "111000000x"))
    assert r.outcomes[:2] == [("g0", True), ("g1", True)] and r.outcomes[9] == ("g9", None)
    assert r.counts == (6, 9) and r.sampled_counts == (5, 19) and r.samples == 2
    assert r.sampled[:3] == [("g0", 2, 2), ("g1", 2, 2), ("g2", 1, 2)] and r.sampled[9] == ("g9", 0, 1)
    rec = r.record
    assert rec["eval/outcomes"] == [1, 1, 1, 1, 1, 1, 0, 0, 0, None]
    assert (rec["eval/successes"], rec["eval/episodes"], rec["eval/success"]) == (6, 9, pytest.approx(6 / 9))
    assert (rec["eval/success_ci_low"], rec["eval/success_ci_high"]) == pytest.approx((0.3542, 0.8794), abs=1e-4)
    assert (rec["eval/sampled_successes"], rec["eval/sampled_episodes"]) == (5, 19)
    assert rec["eval/sampled_success"] == pytest.approx(5 / 19)
    assert rec["eval/sampled_game_successes"] == [2, 2, 1, 0, 0, 0, 0, 0, 0, 0]
    assert rec["eval/sampled_game_episodes"] == [2] * 9 + [1]
    assert "eval/sampled_success" not in _result("base", "0" * 10).record  # eval.sampled = 0: no keys


def test_rows_survive_json_and_older_rows_load_without_outcomes():
    r = _result("sft", "111111000x", sampled=("1100000000",))
    back = EvalResult.restored(json.loads(json.dumps(r.row())))
    assert (back.label, back.split, back.table) == (r.label, r.split, r.table)
    assert (back.outcomes, back.sampled, back.samples) == (r.outcomes, r.sampled, 1)
    old = EvalResult.restored(("before", {"All": 50.0}, "eval"))  # a checkpoint written before outcomes
    assert (old.label, old.split, old.outcomes, old.counts, old.sampled_counts) == ("before", "eval", None, None, None)
    assert EvalResult.restored(["before", {"All": 50.0}]).split == ""


def test_summary_prints_intervals_and_paired_tests(tmp_path, capsys):
    cfg = load_config(None, ["env.name=scripted", f"run_dir={tmp_path}", "sft.enabled=true"])
    evals = [
        _result("base", "0000000000"),
        _result("sft", "111111000x", sampled=("1100000000", "111000000x")),
        _result("after", "1111010000"),
    ]
    write_run_summary(cfg, evals, {"eval": GAMES}, [], quiet=False)
    table = (tmp_path / "eval_table.txt").read_text()
    lines = table.splitlines()
    assert lines[0] == "trained with: algo grpo; methods: none"
    lines = lines[2:]
    assert lines[0].startswith("scripted eval success (%)") and lines[3].startswith("after RL")  # the table as before
    assert lines[4:10] == [
        "  base                      0/10 = 0.0% [0.0, 27.8]",
        "  after SFT                 6/9 = 66.7% [35.4, 87.9]",
        "  after SFT (sampled, k=2)  5/19 = 26.3% [11.8, 48.8]",
        "  after RL                  5/10 = 50.0% [23.7, 76.3]",
        # g9 crashed in "after SFT": 9 pairs, 6 failures turned into successes
        "  base -> after SFT         +66.7 points, b=0 c=6 of 9 games, p=0.0312: gain",
        # g4 lost (b=1), g5 was already solved, g9 left out: 9 pairs
        "  after SFT -> after RL     -11.1 points, b=1 c=0 of 9 games, p=1: unresolved",
    ]
    assert "McNemar" in lines[-2]
    printed, peak = capsys.readouterr().out.strip().rsplit("\n\n", 1)  # the table, then the peak memory
    assert printed == table.strip() and re.fullmatch(
        r"peak resident memory: [\d,]+ MiB \(this process, ru_maxrss\)", peak
    )
    stats = json.loads((tmp_path / "summary.json").read_text())["statistics_by_split"]["eval"]
    assert stats["rates"]["after SFT"]["greedy"]["successes"] == 6
    assert stats["rates"]["after SFT"]["sampled"]["samples"] == 2 and "sampled" not in stats["rates"]["base"]
    assert stats["rates"]["base"]["greedy"]["ci_high"] == pytest.approx(0.277533, abs=1e-6)
    gain = stats["paired"][0]
    assert (gain["before"], gain["after"], gain["b"], gain["c"], gain["pairs"]) == ("base", "after SFT", 0, 6, 9)
    assert (gain["p_value"], gain["verdict"]) == (0.03125, "gain")


def test_summary_of_a_run_resumed_from_an_older_checkpoint_has_no_paired_test(tmp_path):
    cfg = load_config(None, ["env.name=scripted", f"run_dir={tmp_path}"])
    evals = [EvalResult.restored(("before", {"All": 0.0}, "eval")), _result("after", "1111010000")]
    write_run_summary(cfg, evals, {"eval": GAMES}, [], quiet=True)
    lines = (tmp_path / "eval_table.txt").read_text().splitlines()
    assert "  before           counts not recorded" in lines
    assert "  before -> after  no paired test (per-game outcomes not recorded)" in lines
    paired = json.loads((tmp_path / "summary.json").read_text())["statistics_by_split"]["eval"]["paired"]
    assert paired == [
        {"before": "before", "after": "after", "verdict": None, "reason": "per-game outcomes not recorded"}
    ]


def test_console_line_shows_training_success_as_a_count():
    record = {"iteration": 3, "train/success": 0.25, "train/successes": 4, "train/episodes": 16, "update/kl": 0.0012}
    assert log_line(record) == "iter 3: success=4/16 kl=0.0012"
    assert log_line({"iteration": 0, "train/success": 0.5}) == "iter 0: success=0.5"  # an older record


def test_sampled_evaluation_adds_its_episodes_and_leaves_training_alone(tmp_path):
    """Tiny model, scripted (lucky) environment: eval.sampled=2 plays each of the 2 panel
    games twice more at rollout.temperature; the greedy records and the training
    iteration are those of a run without it (the engine generator is restored)."""
    run(tmp_path / "plain", 1)
    run(tmp_path / "sampled", 1, ["eval.sampled=2"])
    plain, sampled = metrics(tmp_path / "plain"), metrics(tmp_path / "sampled")
    assert [r for r in plain if "iteration" in r] == [r for r in sampled if "iteration" in r]
    assert rollouts(tmp_path / "plain")["iter_000000.jsonl"] == rollouts(tmp_path / "sampled")["iter_000000.jsonl"]
    evals = [r for r in sampled if "eval" in r]
    assert [r["eval"] for r in evals] == ["before", "after"]
    for greedy, with_sampled in zip([r for r in plain if "eval" in r], evals):
        assert greedy == {k: v for k, v in with_sampled.items() if not k.startswith("eval/sampled_")}
        assert len(greedy["eval/outcomes"]) == 2 and greedy["eval/episodes"] == 2
        assert with_sampled["eval/sampled_episodes"] == 4 and len(with_sampled["eval/sampled_game_successes"]) == 2
        assert sum(with_sampled["eval/sampled_game_successes"]) == with_sampled["eval/sampled_successes"]
    assert len(rollouts(tmp_path / "sampled")["eval_after_sampled.jsonl"].splitlines()) == 4
    table = (tmp_path / "sampled" / "eval_table.txt").read_text()
    assert "  after (sampled, k=2)  " in table and "  before -> after  " in table


def test_warm_start_restores_its_evaluations_old_and_new(tmp_path):
    """``sft/evals.json`` rows keep the outcomes; rows written before them still load."""
    from roleagent.sft import warm_start

    r = _result("base", "1000000000")
    (tmp_path / "evals.json").write_text(
        json.dumps({"base": [{**r.row(), "record": r.record}], "sft": [["eval", {"All": 10.0}, {"eval": "sft"}]]})
    )
    written = []
    trainer = SimpleNamespace(evals=[], metrics=SimpleNamespace(write=written.append))
    for label in ("base", "sft"):
        warm_start._evaluate(trainer, label, tmp_path)
    base, sft = trainer.evals
    assert (base.outcomes, base.counts, base.record) == (r.outcomes, (1, 10), json.loads(json.dumps(r.record)))
    assert (sft.label, sft.split, sft.table, sft.outcomes) == ("sft", "eval", {"All": 10.0}, None)
    assert written == [base.record, {"eval": "sft"}]
