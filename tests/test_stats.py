"""``roleagent.stats``: Wilson intervals and the exact McNemar test against hand-computed values."""

from __future__ import annotations

import math

import pytest

from roleagent.stats import format_rate, mcnemar_exact_p, paired_rate_test, paired_test, wilson_interval


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.277533),  # z²/(n + z²) = 3.841459/13.841459
        (5, 10, 0.236593, 0.763407),  # 0.5 ∓ 1.959964·√3.460365/13.841459
        (10, 10, 0.722467, 1.0),
        (1, 10, 0.017876, 0.404150),
        (14, 48, 0.182416, 0.431793),
        (1, 1, 0.206549, 1.0),
    ],
)
def test_wilson_interval_matches_hand_computed_values(k, n, low, high):
    got = wilson_interval(k, n)
    assert got == pytest.approx((low, high), abs=1e-6)


def test_wilson_interval_ends_and_edges():
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0  # exactly, no residue
    assert wilson_interval(0, 0) == (0.0, 1.0)  # nothing known
    low90, high90 = wilson_interval(5, 10, z=1.644854)
    assert (low90, high90) == pytest.approx((0.2692, 0.7308), abs=1e-4)  # narrower at 90 %
    for bad in [(-1, 3), (4, 3)]:
        with pytest.raises(ValueError):
            wilson_interval(*bad)


def test_wilson_interval_approaches_the_textbook_interval_for_large_n():
    low, high = wilson_interval(3000, 10000)  # p̂ ± 1.96·√(0.3·0.7/10000) = 0.3 ∓ 0.008982
    assert (low, high) == pytest.approx((0.291018, 0.308982), abs=1e-4)


def test_format_rate():
    assert format_rate(14, 48) == "14/48 = 29.2% [18.2, 43.2]"
    assert format_rate(0, 12) == "0/12 = 0.0% [0.0, 24.2]"
    assert format_rate(12, 12) == "12/12 = 100.0% [75.8, 100.0]"
    assert format_rate(0, 0) == "0/0 = n/a"


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (0, 6, 0.03125),  # 2 · 1/64
        (6, 0, 0.03125),
        (1, 1, 1.0),  # 2 · 3/4, capped
        (0, 0, 1.0),
        (1, 7, 0.0703125),  # 2 · (1 + 8)/256
        (2, 9, 0.0654296875),  # 2 · (1 + 11 + 55)/2048
        (0, 5, 0.0625),  # 2/32: five games are not enough
        (5, 5, 1.0),
    ],
)
def test_mcnemar_exact_p(b, c, p):
    assert mcnemar_exact_p(b, c) == p


def test_mcnemar_exact_p_large_counts_stay_finite():
    p = mcnemar_exact_p(450, 550)  # 2^1000 does not fit a float; the ratio does
    assert 0.0 < p < 0.01 and math.isfinite(p)


def test_paired_test_gain_loss_and_crashes():
    before = [False] * 6 + [True] * 4 + [None]
    after = [True] * 6 + [True] * 4 + [False]  # six failures turned into successes, a crash left out
    t = paired_test(before, after)
    assert (t.pairs, t.b, t.c, t.p_value, t.verdict) == (10, 0, 6, 0.03125, "gain")
    assert t.difference == pytest.approx(60.0)
    lost = paired_test(after[:10], before[:10])
    assert (lost.b, lost.c, lost.verdict, lost.difference) == (6, 0, "loss", -60.0)


def test_paired_test_unresolved_and_unchanged():
    t = paired_test([True, False, None], [False, True, True])
    assert (t.pairs, t.b, t.c, t.difference, t.p_value, t.verdict) == (2, 1, 1, 0.0, 1.0, "unresolved")
    five = paired_test([False] * 5, [True] * 5)  # +100 points, yet p = 0.0625
    assert (five.verdict, five.p_value) == ("unresolved", 0.0625)
    same = paired_test([True, False, False], [True, False, False])
    assert (same.pairs, same.p_value, same.verdict) == (3, 1.0, "unchanged")
    nothing = paired_test([None, True], [False, None])  # no game played by both
    assert (nothing.pairs, nothing.difference, nothing.verdict) == (0, 0.0, "unresolved")
    with pytest.raises(ValueError, match="same games"):
        paired_test([True], [True, False])


def test_paired_rate_test_docstring_cases_and_magnitudes():
    four = paired_rate_test([(0, 2), (0, 2), (1, 2), (0, 2)], [(1, 2), (1, 2), (2, 2), (1, 2)])
    assert (four.games, four.up, four.down, four.p_value, four.verdict) == (4, 4, 0, 0.125, "unresolved")
    assert four.difference == pytest.approx(50.0)
    six = paired_rate_test([(0, 2)] * 6, [(1, 2)] * 6)
    assert (six.p_value, six.verdict) == (0.03125, "gain")
    # the size of a change counts: one game falling a little does not cancel five rising a lot
    mixed = paired_rate_test([(0, 4)] * 6 + [(2, 4)], [(4, 4)] * 6 + [(1, 4)])
    assert (mixed.up, mixed.down, mixed.verdict) == (6, 1, "gain")
    assert mixed.p_value == pytest.approx(4 / 128)  # the six rises all one way, the small fall either way, mirrored
    lost = paired_rate_test([(1, 2)] * 6, [(0, 2)] * 6)
    assert (lost.verdict, lost.difference) == ("loss", -50.0)


def test_paired_rate_test_ties_gaps_and_many_games():
    odd = paired_rate_test([(0, 2), (1, 2), (0, 2), (1, 2), (0, 2)], [(1, 2), (0, 2), (1, 2), (0, 2), (1, 2)])
    assert (odd.up, odd.down, odd.p_value, odd.verdict) == (3, 2, 1.0, "unresolved")  # five halves never sum to 0
    same = paired_rate_test([(1, 2), (0, 3)], [(2, 4), (0, 1)])
    assert (same.games, same.p_value, same.verdict) == (2, 1.0, "unchanged")
    gap = paired_rate_test([(0, 0), (0, 2)], [(1, 2), (2, 2)])  # the game without episodes is left out
    assert (gap.games, gap.up, gap.difference) == (1, 1, 100.0)
    many = paired_rate_test([(1, 4)] * 20, [(2, 4)] * 20)  # counted, not enumerated, above 16 games
    assert many.verdict == "gain" and many.p_value == pytest.approx(2 / 2**20)  # all plus or all minus
    # 17 games, one falling by a third, 16 rising by two thirds: the fall alone flips freely
    mixed = paired_rate_test([(0, 3)] * 16 + [(1, 3)], [(2, 3)] * 16 + [(0, 3)])
    assert (mixed.games, mixed.up, mixed.down) == (17, 16, 1) and mixed.p_value == pytest.approx(4 / 2**17)
    with pytest.raises(ValueError, match="same games"):
        paired_rate_test([(0, 1)], [])
    with pytest.raises(ValueError, match="successes <= episodes"):
        paired_rate_test([(3, 2)], [(0, 2)])


def test_sign_flip_test_on_given_changes_matches_the_rate_test():
    """``sign_flip_test`` on per-game changes is ``paired_rate_test``'s test; its docstring's
    example holds (2 up, 1 down: 6 of the 8 sign vectors reach |sum| = 1/2)."""
    import doctest

    from roleagent import stats

    before, after = [(0, 2), (1, 2), (2, 4), (0, 4)], [(1, 2), (2, 2), (1, 4), (3, 4)]
    d = [ka / na - kb / nb for (kb, nb), (ka, na) in zip(before, after)]
    assert stats.sign_flip_test(d) == stats.paired_rate_test(before, after)
    assert doctest.testmod(stats).failed == 0


def test_exact_count_above_16_games_equals_the_enumeration():
    """``_sign_sum_tail`` (the count used above 16 games) gives the enumerated p on small
    cases: rates of 1-4 episodes per game, ties of the observed sum included."""
    import itertools
    import random

    from roleagent.stats import _sign_sum_tail

    rng = random.Random(0)
    for _ in range(100):
        n = rng.choice([1, 2, 3, 4])
        d = [rng.randint(-n, n) / n - rng.randint(0, n) / n for _ in range(rng.randint(1, 10))]
        observed = abs(sum(d)) - 1e-12
        signs = list(itertools.product((-1, 1), repeat=len(d)))
        enumerated = sum(abs(sum(s * x for s, x in zip(sign, d))) >= observed for sign in signs) / len(signs)
        assert _sign_sum_tail(d) == pytest.approx(enumerated, abs=1e-12)
    assert _sign_sum_tail([2**-0.5, 0.5]) is None  # not a fraction: the caller draws sign vectors
