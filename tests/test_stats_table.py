"""The benchmark tables' statistics cells (benchmarks/_stats_table.py) on hand-made
evaluations, against hand-computed counts, Wilson intervals and exact McNemar tests, and
the bench scripts' tables that use them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _stats_table as st  # noqa: E402
import bench_learning  # noqa: E402

T, F = True, False


def ev(*outcomes) -> dict:
    """An evaluation with recorded per-game outcomes (counts from them)."""
    return st.panel_evaluation({"eval/outcomes": [None if o is None else int(o) for o in outcomes]})


def counts(k: int, n: int) -> dict:
    """An older evaluation: counts, no per-game outcomes."""
    return {"successes": k, "episodes": n, "outcomes": None}


def test_panel_evaluation_reads_counts_and_outcomes():
    record = {"eval/successes": 2, "eval/episodes": 3, "eval/outcomes": [1, 0, None, 1]}
    assert st.panel_evaluation(record) == {"successes": 2, "episodes": 3, "outcomes": [T, F, None, T]}
    assert st.panel_evaluation({"eval/outcomes": [1, 0, None, 1]})["episodes"] == 3  # the crash is left out
    assert st.panel_evaluation({"eval/success": 0.25}) == st.NOT_RECORDED  # a record older than counts
    assert st.panel_evaluation(None) == {}  # no evaluation


def test_from_percent_recovers_whole_counts_and_the_outcomes_they_fix():
    assert st.from_percent(16.666666666666664, 12) == counts(2, 12)  # as the JSON files store 2/12
    assert st.from_percent(12.5, 16) == counts(2, 16)
    assert st.from_percent(0.0, 3) == {"successes": 0, "episodes": 3, "outcomes": [F, F, F]}
    assert st.from_percent(100.0, 2) == {"successes": 2, "episodes": 2, "outcomes": [T, T]}
    with pytest.raises(ValueError):
        st.from_percent(10.0, 12)  # 1.2 games


def test_rate_cell_pools_counts_over_seeds():
    # 3/12 + 4/12 = 7/24: centre (7 + 1.9208)/27.8415 = 0.3204, half 1.96·√(4.9583 + 0.9604)/27.8415 = 0.1713
    assert st.rate_cell([counts(3, 12), counts(4, 12)]) == "7/24 = 29.2% [14.9, 49.2]"
    assert st.rate_cell([counts(3, 12), st.NOT_RECORDED]) == "counts not recorded"
    assert st.rate_cell([]) == "-"


def test_before_after_pairs_the_start_with_every_seed():
    before = ev(T, F, F, F)  # 1/4
    afters = [ev(T, T, T, F), ev(T, T, F, T)]  # seed 0: c = 2; seed 1: c = 2; no game lost
    start, after, test = st.before_after_cells(before, afters)
    assert start == "1/4 = 25.0% [4.6, 69.9]"  # centre 2.9208/7.8415 = 0.3725, half 0.3269
    assert after == "6/8 = 75.0% [40.9, 92.9]"  # centre 7.9208/11.8415 = 0.6689, half 0.2596
    # 8 (seed, game) pairs, b = 0, c = 4: +50 points, p = 2 · 1/16 = 0.125
    assert test == "+50.0 pts, b=0 c=4 of 8, p=0.125: unresolved"


def test_before_after_without_outcomes_says_so_and_uses_the_intervals():
    # 3/12 [8.9, 53.2] against 19/24 [59.5, 90.8]: disjoint, a gain by the intervals
    cells = st.before_after_cells(counts(3, 12), [counts(9, 12), counts(10, 12)])
    assert cells == [
        "3/12 = 25.0% [8.9, 53.2]",
        "19/24 = 79.2% [59.5, 90.8]",
        "no per-game outcomes; Wilson intervals: gain",
    ]
    # 3/12 against 7/36 [9.8, 35.0]: overlapping
    assert st.before_after_cells(counts(3, 12), [counts(2, 12), counts(2, 12), counts(3, 12)])[2] == (
        "no per-game outcomes; Wilson intervals: unresolved"
    )
    assert st.before_after_cells(counts(3, 12), [st.NOT_RECORDED])[1:] == [
        "counts not recorded",
        "no per-game outcomes",
    ]


def test_known_outcomes_only_where_the_counts_fix_the_test():
    failed, solved = ev(F, F, F), ev(T, T, T)
    assert st.known_outcomes(failed, counts(2, 3)) == ([F, F, F], [T, T, F])  # b = 0, c = 2
    assert st.known_outcomes(counts(1, 3), solved) == ([T, F, F], [T, T, T])  # b = 0, c = 2
    assert st.known_outcomes(ev(T, F, F), counts(2, 3)) is None  # which games? unknown
    assert st.known_outcomes(ev(F, None, F), counts(1, 3)) is None  # a crash: the pairs are unknown
    assert st.known_outcomes(failed, counts(1, 2)) is None  # the other side lost a game to a crash
    assert st.known_outcomes(counts(0, 3), counts(0, 3)) is None
    test = st.paired([(failed, counts(2, 3)), (failed, counts(3, 3))])  # pooled: b = 0, c = 5 of 6
    assert (test.b, test.c, test.pairs, test.p_value, test.verdict) == (0, 5, 6, 0.0625, "unresolved")


def test_paired_needs_every_seed_and_the_same_games():
    assert st.paired([(ev(T, F), ev(T, T)), (ev(T, F), counts(1, 2))]) == st.NO_OUTCOMES
    assert st.paired([(ev(T, F), ev(T, T, F))]) == "not the same games"


def test_subset_keeps_one_columns_games():
    every = ev(T, F, None, T, F)
    assert st.subset(every, [T, T, T, F, F]) == {"successes": 1, "episodes": 2, "outcomes": [T, F, None]}
    assert st.subset(every, None) == st.NOT_RECORDED  # no types recorded
    assert st.subset(counts(2, 5), [T] * 5) == st.NOT_RECORDED  # no outcomes


def test_ordering_row_prefers_the_paired_test_and_says_which():
    # arm A fails every game; arm B solves 3 of 6 on both seeds: b = 0, c = 6 of 12, p = 2/64
    a = {0: (0.0, ev(F, F, F, F, F, F)), 1: (0.0, ev(F, F, F, F, F, F))}
    b = {0: (50.0, ev(T, T, T, F, F, F)), 1: (50.0, ev(F, F, F, T, T, T))}
    assert (
        st.ordering_row("A < B", a, b)
        == "| A < B | +50.0 ± 0.0 | +50.0 pts, b=0 c=6 of 12, p=0.0312 | shown (paired test) |"
    )
    assert st.ordering_row("B < A", b, a).endswith("| reversed (paired test) |")
    # without outcomes: mean 35 − 15 = 20, s.e. √(50/2 + 50/2) = 7.07 → more than 2 s.e.
    a = {0: (10.0, counts(1, 10)), 1: (20.0, counts(2, 10))}
    b = {0: (30.0, counts(3, 10)), 1: (40.0, counts(4, 10))}
    assert st.ordering_row("A < B", a, b) == "| A < B | +20.0 ± 7.1 | no per-game outcomes | shown (seed-level s.e.) |"
    b = {2: (30.0, counts(3, 10))}  # no seed in common: seed level (one run: variance 0)
    assert st.ordering_row("A < B", a, b) == "| A < B | +15.0 ± 5.0 | no seed in common | shown (seed-level s.e.) |"


def test_ordering_table_skips_arms_without_runs():
    runs = {"A": {0: (0.0, ev(F, F))}, "B": {0: (0.0, ev(F, F))}}
    lines = st.ordering_table([("A", "B"), ("B", "C")], runs)
    assert lines[0] == "| ordering | " + " | ".join(st.ORDERING_COLUMNS) + " |"
    assert lines[2:] == [
        "| A < B | +0.0 ± 0.0 | +0.0 pts, b=0 c=0 of 2, p=1 | not resolved: no game differs (paired test) |"
    ]
    assert st.ordering_table([("B", "C")], runs) == []


def _run(folder: Path, records: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _eval(label: str, outcomes: list[int]) -> dict:
    return {
        "eval": label,
        "split": "valid_seen",
        "eval/success": sum(outcomes) / len(outcomes),
        "eval/outcomes": outcomes,
    }


def test_learning_table_from_run_folders(tmp_path):
    # the warm start solves game 0 of 4; GRPO keeps it on both seeds; GiGPO also solves games 1 and 2
    _run(tmp_path / "warm_start_eval", [_eval("before", [1, 0, 0, 0])])
    for seed in (0, 1):
        for name, outcomes in [("grpo", [1, 0, 0, 0]), ("gigpo", [1, 1, 1, 0])]:
            _run(tmp_path / f"{name}_seed{seed}", [{"iteration": 0, "train/success": 0.5}, _eval("after", outcomes)])
    results = [
        bench_learning.read_run(tmp_path / f"{n}_seed{s}", c, s)
        for s in (0, 1)
        for n, c in [("grpo", "GRPO"), ("gigpo", "GiGPO")]
    ]
    assert results[1]["final"] == {"successes": 3, "episodes": 4, "outcomes": [T, T, T, F]}
    start = st.panel_evaluation(st.eval_record(tmp_path / "warm_start_eval", "before"))
    text = bench_learning.table(results, 25.0, ["GRPO", "GiGPO"], "header", start)
    lines = text.splitlines()
    grpo = next(line for line in lines if line.startswith("| GRPO |"))
    assert grpo.endswith(
        "| 1/4 = 25.0% [4.6, 69.9] | 2/8 = 25.0% [7.1, 59.1] | +0.0 pts, b=0 c=0 of 8, p=1: unchanged |"
    )
    gigpo = next(line for line in lines if line.startswith("| GiGPO |"))
    assert gigpo.endswith("| 6/8 = 75.0% [40.9, 92.9] | +50.0 pts, b=0 c=4 of 8, p=0.125: unresolved |")
    # GRPO < GiGPO: b = 0, c = 4 of 8 (seed, game) pairs, p = 0.125; seed level +50 ± 0
    assert "| GRPO < GiGPO | +50.0 ± 0.0 | +50.0 pts, b=0 c=4 of 8, p=0.125 | not resolved (paired test) |" in lines


def test_docstring_examples():
    import doctest

    assert doctest.testmod(st).failed == 0


def test_results_stats_prints_every_committed_table(capsys):
    # benchmarks/results_stats.py rebuilds RESULTS.md's counts from the committed run files
    import results_stats

    results_stats.main()
    out = capsys.readouterr().out
    assert out.count("\n## ") + out.startswith("## ") == 7
    # the fresh search panel (asl_p2_fresh_cpu.json): the rule reward's per-game gain after 24 iterations
    assert "| Rule reward (EM), 24 iterations | 3 | 258/607 = 42.5% [38.6, 46.5] | 834/1821 = 45.8%" in out
    assert "+3.3 points, 53 up 18 down of 607, p=0.000473: gain" in out  # exact (2^16 draws gave 0.000549)
