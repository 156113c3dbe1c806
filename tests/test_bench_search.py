"""The search benchmarks' tabulation (benchmarks/bench_search.py, bench_asl.py) on fake run
folders, the interleaved test panel, and the search recipes' evaluation splits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from roleagent.config import load_config
from roleagent.envs.search.env import SPLITS
from roleagent.evaluation import eval_splits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_asl  # noqa: E402
import bench_search  # noqa: E402

SEARCH_RECIPES = sorted(p.stem for p in (ROOT / "roleagent" / "recipes").glob("*search*.yaml"))


@pytest.mark.parametrize("recipe", SEARCH_RECIPES)
def test_search_recipes_evaluate_on_splits_the_environment_has(recipe):
    # asl_search asked for split "eval", which the search environment does not have: the
    # run died at start-up with "search splits are train, dev, test, got 'eval'".
    cfg = load_config(recipe)
    assert cfg.env.eval_split in SPLITS
    assert set(eval_splits(cfg)) <= set(SPLITS)


def test_interleaved_panel_covers_every_question_type(tmp_path):
    path = bench_search.write_panel_qa(tmp_path)
    import gzip

    rows = [json.loads(line) for line in gzip.open(path, "rt")]
    shipped = [json.loads(line) for line in gzip.open(bench_search.data_path("qa.jsonl.gz"), "rt")]
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in shipped)  # nothing lost or added
    not_test = [r["id"] for r in shipped if r["split"] != "test"]
    assert [r["id"] for r in rows if r["split"] != "test"] == not_test  # training order untouched
    test = [r for r in rows if r["split"] == "test"]
    types = {r["type"] for r in test}
    assert {r["type"] for r in test[: len(types)]} == types  # the first 8 test rows: one per type
    assert [r["hops"] for r in test[:24]].count(2) == 9  # 3 of each of the 3 two-hop types
    assert bench_search.write_panel_qa(tmp_path).read_bytes() == path.read_bytes()  # seeded


def _run(folder: Path, records: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _eval(label: str, one: float, two: float, every: float) -> dict:
    # as run_files writes it: eval/success a fraction, the per-type table columns in percent
    return {
        "eval": label,
        "split": "test",
        "eval/success": every,
        "eval/success_single-hop": 100 * one,
        "eval/success_multi-hop": 100 * two,
        "eval/success_All": 100 * every,
    }


def test_search_table_before_and_after_per_hop(tmp_path):
    _run(tmp_path / "warm_start_eval", [_eval("before", 0.5, 0.25, 0.4)])
    for seed, (one, two, every) in enumerate([(0.6, 0.2, 0.4), (0.8, 0.4, 0.6), (1.0, 0.6, 0.8)]):
        records = [
            {"iteration": 0, "train/success": 0.5},
            _eval("iter1", 0.5, 0.5, 0.5),
            {"iteration": 1, "train/success": 0.5},
        ]
        _run(tmp_path / f"grpo_seed{seed}", records + [_eval("after", one, two, every)])
        (tmp_path / f"grpo_seed{seed}" / "bench_minutes.txt").write_text(f"{seed + 1:.2f}\n")  # 1, 2, 3 min
    # GiGPO seed 0 stopped after its first evaluation: that one is used and flagged
    _run(tmp_path / "gigpo_seed0", [{"iteration": 0, "train/success": 0.0}, _eval("iter1", 0.0, 0.0, 0.0)])
    text = bench_search.summarize(tmp_path, ["GRPO", "GiGPO", "Role-Agent"], [0, 1, 2], "header")
    grpo = next(line for line in text.splitlines() if line.startswith("| GRPO"))
    # 1-hop after 60/80/100 -> 80.0 ± 20.0; 2-hop 20/40/60 -> 40.0 ± 20.0; all 40/60/80 vs 40 before
    assert grpo == "| GRPO | 50.0 | 80.0 ± 20.0 | 25.0 | 40.0 ± 20.0 | 40.0 | 60.0 ± 20.0 | 20.0 ± 20.0 | 3 | 2.0 |"
    assert "| GiGPO | 50.0 | 0.0 ± 0.0 | 25.0 | 0.0 ± 0.0 | 40.0 | 0.0 ± 0.0 | -40.0 ± 0.0 | 1 | - |" in text
    assert "Role-Agent" not in text.split("header")[1]  # no runs, no row
    assert "GiGPO seed 0 (iteration 1)" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["before"] == {"1-hop": 50.0, "2-hop": 25.0, "all": 40.0}
    assert (tmp_path / "curves.png").stat().st_size > 0


def _asl_iterations(gaps: list[tuple[float, float]], accuracy: float) -> list[dict]:
    records = []
    for number, (reward, success) in enumerate(gaps):
        records += [
            {"iteration": 3 * number, "train/success": 0.0, "asl/round": number, "asl/pg_parsed": 0.5, "asl/pg_kept": 0.25},
            {"iteration": 3 * number + 1, "train/success": 0.0, "asl/round": number, "asl/grm_reward": 0.5},
            {"iteration": 3 * number + 2, "train/success": reward, "asl/round": number, "asl/pm_reward": reward,
             "asl/pm_env_success": success, "asl/pm_grm_agrees_with_env": 0.5, "asl/grm_eval_accuracy": accuracy},
        ]  # fmt: skip
    return records


def test_asl_table_rounds_and_reward_hacking_gap(tmp_path):
    _run(tmp_path / "warm_start_eval", [_eval("before", 0.1, 0.0, 0.1)])
    _run(tmp_path / "rule_reward_em_seed0", [{"iteration": 0, "train/success": 0.2}, _eval("after", 0.3, 0.1, 0.2)])
    for seed, accuracy in enumerate([0.5, 0.75]):
        records = _asl_iterations([(0.75, 0.25), (1.0, 0.5)], accuracy)
        _run(tmp_path / f"asl_seed{seed}", records + [_eval("after", 0.1, 0.0, 0.1)])
    text = bench_asl.summarize(tmp_path, list(bench_asl.ARMS), [0, 1], "header")
    lines = text.splitlines()
    unrecorded = " counts not recorded | counts not recorded | no per-game outcomes |"  # no eval/outcomes
    assert "| Rule reward (EM) | 10.0 | 20.0 ± 0.0 | 10.0 ± 0.0 | - | 1 | - |" + unrecorded in lines
    assert "| ASL | 10.0 | 10.0 ± 0.0 | 0.0 ± 0.0 | 2.0 ± 0.0 | 2 | - |" + unrecorded in lines
    # the papers' comparisons from the seed level: 20 (one seed) against 10 ± 0
    assert "| Rule reward (EM) < ASL | -10.0 ± 0.0 | no per-game outcomes | not resolved (seed-level s.e.) |" in lines
    # round 0: GRM accuracy 50 and 75 -> 62.5 ± 17.7; reward 75 vs EM 25 -> gap 50 pp
    assert (
        "| ASL | 0 | 62.5 ± 17.7 | 50.0 ± 0.0 | 25.0 ± 0.0 | 75.0 ± 0.0 | 25.0 ± 0.0 | 50.0 ± 0.0 | 50.0 ± 0.0 | 2 |"
        in lines
    )
    assert (
        "| ASL | 1 | 62.5 ± 17.7 | 50.0 ± 0.0 | 25.0 ± 0.0 | 100.0 ± 0.0 | 50.0 ± 0.0 | 50.0 ± 0.0 | 50.0 ± 0.0 | 2 |"
        in lines
    )
    assert not any(line.startswith("| ASL, frozen GRM") for line in lines)
    assert (tmp_path / "rounds.png").stat().st_size > 0


def test_asl_bench_needs_the_roles_warm_start_made_once(tmp_path, monkeypatch, capsys):
    """``--recipe asl_search_warm`` trains both roles before RL; the benchmark refuses to make
    that warm start in every arm and asks for it as ``--init-from``."""
    monkeypatch.setattr(sys, "argv", ["bench_asl.py", "--recipe", "asl_search_warm", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        bench_asl.main()
    assert "asl_search_warm warm-starts before RL: make that warm start once" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def _dump(folder: Path, name: str, hops: list[str]) -> None:
    (folder / "rollouts").mkdir(exist_ok=True)
    lines = [
        json.dumps({"task_id": f"q{i}", "metadata": {"task_type": h}, "success": False}) for i, h in enumerate(hops)
    ]
    (folder / "rollouts" / f"{name}.jsonl").write_text("\n".join(lines) + "\n")


def test_search_table_counts_and_paired_tests_per_hop(tmp_path):
    # 4 test questions: 1-hop, 2-hop, 1-hop, 2-hop; the warm start solves the first only
    hops = ["1", "2", "1", "2"]
    before = {**_eval("before", 0.5, 0.0, 0.25), "eval/outcomes": [1, 0, 0, 0]}
    _run(tmp_path / "warm_start_eval", [before])
    _dump(tmp_path / "warm_start_eval", "eval_before_test", hops)
    for seed, outcomes in enumerate([[1, 1, 1, 0], [1, 0, 1, 1]]):  # seed 0: +2 games, seed 1: +2 games
        one, two = (outcomes[0] + outcomes[2]) / 2, (outcomes[1] + outcomes[3]) / 2
        after = {**_eval("after", one, two, sum(outcomes) / 4), "eval/outcomes": outcomes}
        _run(tmp_path / f"grpo_seed{seed}", [{"iteration": 0, "train/success": 0.5}, after])
        _dump(tmp_path / f"grpo_seed{seed}", "eval_after", hops)  # the eval split's name has no suffix
        _run(tmp_path / f"gigpo_seed{seed}", [{"iteration": 0, "train/success": 0.5}, after])  # no dump: no hop counts
    text = bench_search.summarize(tmp_path, ["GRPO", "GiGPO"], [0, 1], "header")
    lines = text.splitlines()
    # 1-hop: before 1/2, after 4/4 (b=0, c=2 of 4: p = 0.5); 2-hop: 0/2, 2/4 (c=2 of 4); all: 1/4, 6/8
    assert (
        "| GRPO | 1-hop | 1/2 = 50.0% [9.5, 90.5] | 4/4 = 100.0% [51.0, 100.0] | +50.0 pts, b=0 c=2 of 4, p=0.5: unresolved |"
        in lines
    )
    assert (
        "| GRPO | 2-hop | 0/2 = 0.0% [0.0, 65.8] | 2/4 = 50.0% [15.0, 85.0] | +50.0 pts, b=0 c=2 of 4, p=0.5: unresolved |"
        in lines
    )
    assert (
        "| GRPO | all | 1/4 = 25.0% [4.6, 69.9] | 6/8 = 75.0% [40.9, 92.9] | +50.0 pts, b=0 c=4 of 8, p=0.125: unresolved |"
        in lines
    )
    assert "| GiGPO | 1-hop | 1/2 = 50.0% [9.5, 90.5] | counts not recorded | no per-game outcomes |" in lines
    assert (
        "| GiGPO | all | 1/4 = 25.0% [4.6, 69.9] | 6/8 = 75.0% [40.9, 92.9] | +50.0 pts, b=0 c=4 of 8, p=0.125: unresolved |"
        in lines
    )
    assert (
        "| GRPO < GiGPO | +0.0 ± 0.0 | +0.0 pts, b=0 c=0 of 8, p=1 | not resolved: no game differs (paired test) |"
        in lines
    )
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["start"]["1-hop"] == {"successes": 1, "episodes": 2, "outcomes": [True, False]}


def test_fresh_panel_starts_after_the_used_questions_and_tests_per_game(tmp_path):
    import gzip

    import bench_fresh_panel as fresh

    used = bench_search.write_panel_qa(tmp_path)
    left = fresh.fresh_panel_qa(used, tmp_path / "fresh.jsonl.gz", 48)
    rows = [json.loads(line) for line in gzip.open(used, "rt")]
    again = [json.loads(line) for line in gzip.open(tmp_path / "fresh.jsonl.gz", "rt")]
    test = [r["id"] for r in rows if r["split"] == "test"]
    assert [r["id"] for r in again if r["split"] == "test"] == test[48:] == left
    assert [r["id"] for r in again if r["split"] == "panel_used"] == test[:48]
    assert [r["id"] for r in again if r["split"] == "train"] == [r["id"] for r in rows if r["split"] == "train"]
    # run folders: arms by bench_asl's folder names, seeds in order, only runs with a checkpoint
    for name in ("rule_reward_em_seed1", "rule_reward_em_seed0", "asl_seed0", "asl_seed1"):
        (tmp_path / name / "checkpoints").mkdir(parents=True)
        if name != "asl_seed1":
            (tmp_path / name / "checkpoints" / "latest").write_text("iter_000001")
    runs = fresh.discover_runs(tmp_path, ["Rule reward (EM)", "ASL"])
    assert {a: [p.name for p in r] for a, r in runs.items()} == {
        "asl": ["asl_seed0"],
        "rule_reward_em": ["rule_reward_em_seed0", "rule_reward_em_seed1"],
    }
    assert list(fresh.discover_runs(tmp_path, ["ASL"])) == ["asl"]
    # six games: the start solved game 0; both seeds solve games 1-5, one seed loses game 0
    start = [True, False, False, False, False, False]
    seeds = [[True, True, True, True, True, True], [False, True, True, True, True, True]]
    text = fresh.tables(start, ["a", "a", "a", "b", "b", "b"], {"rule": seeds}, "header")
    assert "| rule | 2 | 1/6 = 16.7% [3.0, 56.4] | 11/12 = 91.7% [64.6, 98.5] |" in text
    assert "b=1 c=10 of 12, p=0.0117: gain" in text  # McNemar over (seed, game) pairs
    # per game: d = -0.5, 1, 1, 1, 1, 1 (sum 4.5): |sum| >= 4.5 only when the five 1s share a
    # sign, whatever the -0.5's: 4 of 64 sign vectors. The pooled pairs said "gain"; the games do not
    assert "+75.0 points, 5 up 1 down of 6, p=0.0625: unresolved" in text
    assert "| b | 3 | 0/3 = 0.0% [0.0, 56.1] | 6/6 = 100.0% [61.0, 100.0] |" in text


def test_fresh_panel_refuses_an_evaluation_of_other_questions(tmp_path):
    import bench_fresh_panel as fresh

    def evaluation(ids: list[str], outcomes: list[int]) -> Path:
        out = tmp_path / "-".join(ids)
        (out / "rollouts").mkdir(parents=True)
        record = {"eval": fresh.LABEL, "split": "test", "eval/outcomes": outcomes}
        (out / "metrics.jsonl").write_text(json.dumps(record) + "\n")
        dump = [{"task_id": i, "metadata": {"question_type": i.split("/")[0]}} for i in ids]
        (out / "rollouts" / f"eval_{fresh.LABEL}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in dump))
        return out

    played = evaluation(["a/1", "b/2"], [1, 0])
    assert fresh.outcomes_by_type(played, ["a/1", "b/2"]) == ([True, False], ["a", "b"])
    for games in (["b/2", "a/1"], ["a/1", "b/2", "c/3"], ["a/1"]):  # another order, more, fewer
        with pytest.raises(RuntimeError, match="not an evaluation of the fresh panel"):
            fresh.outcomes_by_type(played, games)
