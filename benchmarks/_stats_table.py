"""The statistics cells of the benchmark tables that compare methods (``bench_learning``,
``bench_search``, ``bench_asl``, ``bench_agent_r``, ``bench_seal_learning`` and
``results_stats``): success counts pooled over seeds with 95 % Wilson intervals, and a
verdict for every before → after and every arm-vs-arm comparison. The maths is in
:mod:`roleagent.stats`.

An **evaluation** here is a plain dict (it goes into ``results.json``)::

    {"successes": 3, "episodes": 12, "outcomes": [True, False, None, ...]}

``outcomes``: each panel game's greedy outcome in panel order (None: the episode crashed),
from a run's ``eval/outcomes``; ``None`` for a run older than them. Counts exclude crashed
episodes. An empty dict or ``None`` values: not recorded.

**Pooling over seeds.** Every arm is evaluated on the same panel with every seed, so a
rate pools k and n over the seeds (``7/48`` for 3 seeds of a 16-game panel), and a paired
test pairs outcomes game by game within a seed: pairs are (seed, game). Before → after of
one arm pairs the shared warm-start evaluation with each seed's final one; arm A vs arm B
pairs A's and B's final outcomes of the same seed. The pairs of one game are not
independent across seeds (the same warm-start outcome, the same hard game), so the pooled
test can be somewhat overconfident; its verdict is a guide, not a guarantee.

Without per-game outcomes (older runs; :func:`known_outcomes` for the one case where the
counts fix the test anyway), before → after says "no per-game outcomes" and takes its
verdict from the Wilson intervals (disjoint: gain/loss, else unresolved), and arm vs arm
takes its verdict from the seed-level difference of means ± its standard error; the cell
says which.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roleagent.stats import GAIN, LOSS, UNCHANGED, UNRESOLVED, PairedTest, format_rate, paired_test, wilson_interval

Evaluation = dict[str, Any]

NO_OUTCOMES = "no per-game outcomes"
#: An evaluation that ran but whose counts and outcomes were not recorded (``{}``: none ran)
NOT_RECORDED: Evaluation = {"successes": None, "episodes": None, "outcomes": None}
#: A paired test's verdict read as the verdict on an ordering "A < B" (B's outcomes are "after")
ORDER_VERDICT = {
    GAIN: "shown",
    LOSS: "reversed",
    UNRESOLVED: "not resolved",
    UNCHANGED: "not resolved: no game differs",
}
#: The columns :func:`before_after_cells` fills
BEFORE_AFTER_COLUMNS = [
    "before, 95% CI",
    "after, pooled over seeds, 95% CI",
    "before → after, paired over (seed, game)",
]
#: The header of :func:`ordering_row`'s table (after its first column, the comparison)
ORDERING_COLUMNS = ["seed-level Δ (after) ± s.e.", "paired over (seed, game): Δ, b, c, p", "verdict (from)"]


def md_header(columns: Sequence[str]) -> list[str]:
    """A markdown table's two header lines: ``md_header(["a", "b"]) == ["| a | b |", "|---|---|"]``."""
    return ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]


def eval_record(run_dir: Path, label: str, split: str | None = None) -> dict | None:
    """The ``metrics.jsonl`` record of evaluation ``label`` ("before", "iterK", "after") of
    panel ``split`` (None: the first panel with that label); None when there is none."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return None
    records = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return next((r for r in records if r.get("eval") == label and split in (None, r.get("split"))), None)


def panel_evaluation(record: dict | None) -> Evaluation:
    """An evaluation from its ``metrics.jsonl`` record: the counts (``eval/successes``,
    ``eval/episodes``, else counted from the outcomes) and ``eval/outcomes`` (1/0/null as
    True/False/None); ``{}`` without a record, None values for a record older than them.

    >>> panel_evaluation({"eval/outcomes": [1, 0, None, 1]})
    {'successes': 2, 'episodes': 3, 'outcomes': [True, False, None, True]}
    """
    if record is None:
        return {}
    raw = record.get("eval/outcomes")
    outcomes = None if raw is None else [None if o is None else bool(o) for o in raw]
    if record.get("eval/successes") is not None and record.get("eval/episodes") is not None:
        k, n = int(record["eval/successes"]), int(record["eval/episodes"])
    elif outcomes is not None:
        done = [o for o in outcomes if o is not None]
        k, n = sum(done), len(done)
    else:
        k = n = None
    return {"successes": k, "episodes": n, "outcomes": outcomes}


def subset(evaluation: Evaluation, keep: Sequence[bool] | None) -> Evaluation:
    """The games of ``evaluation`` where ``keep`` is true (e.g. one task type's column);
    :data:`NOT_RECORDED` when its outcomes or ``keep`` are unknown.

    >>> subset({"outcomes": [True, False, None, True]}, [True, True, True, False])
    {'successes': 1, 'episodes': 2, 'outcomes': [True, False, None]}
    """
    outcomes = evaluation.get("outcomes")
    if outcomes is None or keep is None or len(keep) != len(outcomes):
        return dict(NOT_RECORDED)
    return panel_evaluation({"eval/outcomes": [o for o, k in zip(outcomes, keep) if k]})


def from_percent(percent: float, games: int) -> Evaluation:
    """An evaluation older than recorded counts, from its success rate (%) and the panel
    size (no crashed episode assumed): k = percent · games / 100, which must be a whole
    number. With k = 0 or k = games the outcomes are known (every game failed, or every
    game was solved); otherwise they are not.

    >>> from_percent(25.0, 12)
    {'successes': 3, 'episodes': 12, 'outcomes': None}
    >>> from_percent(0.0, 3)
    {'successes': 0, 'episodes': 3, 'outcomes': [False, False, False]}
    """
    k = percent * games / 100
    if abs(k - round(k)) > 1e-6:
        raise ValueError(f"{percent}% of {games} games is not a whole number of games")
    k = round(k)
    outcomes = [k == games] * games if k in (0, games) else None
    return {"successes": k, "episodes": games, "outcomes": outcomes}


def pooled(evaluations: Sequence[Evaluation]) -> tuple[int, int] | None:
    """(successes, episodes) summed over ``evaluations`` (seeds); None when one has no counts."""
    if not evaluations or any(e.get("successes") is None or e.get("episodes") is None for e in evaluations):
        return None
    return sum(e["successes"] for e in evaluations), sum(e["episodes"] for e in evaluations)


def rate_cell(evaluations: Sequence[Evaluation]) -> str:
    """``"k/n = rate% [low, high]"`` pooled over ``evaluations`` ("-" for none, "counts not
    recorded" when one lacks them): ``rate_cell([{"successes": 3, "episodes": 12},
    {"successes": 4, "episodes": 12}]) == "7/24 = 29.2% [14.9, 49.2]"``."""
    if not evaluations:
        return "-"
    counts = pooled(evaluations)
    return format_rate(*counts) if counts else "counts not recorded"


def known_outcomes(first: Evaluation, second: Evaluation) -> tuple[list, list] | None:
    """Both evaluations' per-game outcomes, or None when they are not known. When only one
    side's are known, every game ended the same way on that side (all failed or all
    solved) and the other side counted every game (no crash), the discordant counts are
    fixed by the other side's count alone (all failed: b = 0, c = its successes), so its
    successes are placed first: any order gives the same test.

    >>> known_outcomes({"outcomes": [False, False, False]}, {"successes": 1, "episodes": 3, "outcomes": None})
    ([False, False, False], [True, False, False])
    """
    a, b = first.get("outcomes"), second.get("outcomes")
    if a is not None and b is not None:
        return a, b
    if a is None and b is None:
        return None
    known, other = (a, second) if a is not None else (b, first)
    if None in known or len(set(known)) > 1 or other.get("episodes") != len(known) or other.get("successes") is None:
        return None
    filled = [i < other["successes"] for i in range(len(known))]
    return (known, filled) if a is not None else (filled, known)


def paired(pairs: Sequence[tuple[Evaluation, Evaluation]]) -> PairedTest | str:
    """The exact McNemar test over every (seed, game) pair: ``pairs`` holds one (first,
    second) evaluation per seed, each seed's outcomes paired game by game
    (:func:`known_outcomes`) and the seeds concatenated. Without the outcomes of every
    pair, or when a pair's panels differ in length, the reason instead."""
    known = [known_outcomes(a, b) for a, b in pairs]
    if not known or any(k is None for k in known):
        return NO_OUTCOMES
    if any(len(a) != len(b) for a, b in known):
        return "not the same games"
    return paired_test([o for a, _ in known for o in a], [o for _, b in known for o in b])


def paired_text(test: PairedTest) -> str:
    """``"+8.3 pts, b=0 c=3 of 36, p=0.25"``: the difference in points, the discordant
    counts (b: first solved, second failed; c: the reverse) over the pairs, and p."""
    return f"{test.difference:+.1f} pts, b={test.b} c={test.c} of {test.pairs}, p={test.p_value:.3g}"


def interval_verdict(before: tuple[int, int], after: tuple[int, int]) -> str:
    """Without paired outcomes: gain / loss when the two 95 % Wilson intervals are
    disjoint, else unresolved (a coarser check than the paired test: it needs a larger
    change). ``interval_verdict((0, 12), (9, 12)) == "gain"`` ([0, 24.2] vs [46.8, 91.1])."""
    (low_a, high_a), (low_b, high_b) = wilson_interval(*before), wilson_interval(*after)
    return GAIN if low_b > high_a else LOSS if high_b < low_a else UNRESOLVED


def before_after_cells(before: Evaluation | None, afters: Sequence[Evaluation]) -> list[str]:
    """The :data:`BEFORE_AFTER_COLUMNS` of one arm: the shared start's count, the final
    count pooled over seeds, and the paired test of the start against every seed's final
    evaluation; without outcomes, "no per-game outcomes" and the intervals' verdict."""
    before = before or {}
    start = rate_cell([before]) if before else "-"
    if not before or not afters:
        return [start, rate_cell(afters), "-"]
    test = paired([(before, after) for after in afters])
    if isinstance(test, PairedTest):
        return [start, rate_cell(afters), f"{paired_text(test)}: {test.verdict}"]
    counts_before, counts_after = pooled([before]), pooled(afters)
    if test == NO_OUTCOMES and counts_before and counts_after:
        test += f"; Wilson intervals: {interval_verdict(counts_before, counts_after)}"
    return [start, rate_cell(afters), test]


def seed_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, str]:
    """mean(b) − mean(a) over seeds, its standard error √(s_a²/n_a + s_b²/n_b) (sample
    variances; 0 for one seed) and a verdict on "a < b": "shown" when the difference
    exceeds two standard errors, "reversed" below minus two, else "not resolved".

    >>> seed_difference([10.0, 20.0], [30.0, 40.0])  # s² = 50 each: s.e. = √50 = 7.07
    (20.0, 7.0710678118654755, 'shown')
    """
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = float(xb.mean() - xa.mean())
    se = float(np.sqrt(sum(x.var(ddof=1) / len(x) if len(x) > 1 else 0.0 for x in (xa, xb))))
    verdict = "shown" if diff > 2 * se and se > 0 else "reversed" if diff < -2 * se and se > 0 else "not resolved"
    return diff, se, verdict


def ordering_row(name: str, a: dict[int, tuple[float, Evaluation]], b: dict[int, tuple[float, Evaluation]]) -> str:
    """One row of the :data:`ORDERING_COLUMNS` table for the comparison ``name`` ("A < B"):
    ``a`` and ``b`` map seed → (final success %, final evaluation). The seed-level
    difference ± s.e. uses every seed of each arm; the paired test pairs the seeds both
    arms have, game by game. The verdict comes from the paired test when every such seed
    has outcomes, else from the seed-level s.e.; the cell says which."""
    diff, se, seed_verdict = seed_difference([v for v, _ in a.values()], [v for v, _ in b.values()])
    seeds = sorted(set(a) & set(b))
    test = paired([(a[s][1], b[s][1]) for s in seeds]) if seeds else "no seed in common"
    if isinstance(test, PairedTest):
        cells = [paired_text(test), f"{ORDER_VERDICT[test.verdict]} (paired test)"]
    else:
        cells = [test, f"{seed_verdict} (seed-level s.e.)"]
    return f"| {name} | {diff:+.1f} ± {se:.1f} | " + " | ".join(cells) + " |"


def ordering_table(order: Sequence[tuple[str, str]], runs: dict[str, dict[int, tuple[float, Evaluation]]]) -> list[str]:
    """The :func:`ordering_row` table of every comparison "A < B" in ``order`` whose arms
    both have runs (``runs``: arm → seed → (final success %, final evaluation))."""
    rows = [ordering_row(f"{a} < {b}", runs[a], runs[b]) for a, b in order if runs.get(a) and runs.get(b)]
    return [*md_header(["ordering", *ORDERING_COLUMNS]), *rows] if rows else []
