"""How sure a success rate is, and whether two evaluations on the same games differ.

**Wilson score interval** (Wilson, 1927, JASA 22(158), 209–212) for k successes in n
episodes, p̂ = k/n, at normal quantile z (1.959964 for 95 %)::

    centre    = (k + z²/2) / (n + z²)
    half      = z · √(k(n − k)/n + z²/4) / (n + z²)
    [low, high] = [centre − half, centre + half]

Unlike the textbook interval p̂ ± z·√(p̂(1 − p̂)/n) it never leaves [0, 1], is not a single
point at k = 0 or k = n, and keeps close to its nominal coverage at the panel sizes
evaluations use (12 to 134 games); Brown, Cai & DasGupta (2001, Statistical Science 16(2),
101–133) recommend it for n < 40. With n = 0 nothing is known: the interval is [0, 1].

**Exact McNemar test** (McNemar, 1947, Psychometrika 12(2), 153–157) for two evaluations of
the same n games (paired outcomes, e.g. the policy before and after SFT). Only the
discordant games carry information::

    b = #games solved before and failed after      (success → failure)
    c = #games failed before and solved after      (failure → success)
    difference = 100 · (c − b) / n                 (points of success rate)
    p = min(1, 2 · Σ_{i ≤ min(b, c)} C(b + c, i) / 2^(b+c))

Under "no difference" each discordant game is equally likely to go either way, so
min(b, c) ~ Binomial(b + c, ½), and p is the exact two-sided tail (p = 1 when b + c = 0).
Pairing removes the games both evaluations solve or both fail, so it separates a gain from
noise with fewer games than comparing two independent rates. The exact test is
conservative (Fagerland, Lydersen & Laake, 2013, BMC Medical Research Methodology 13:91):
"unresolved" can hide a real but small change; it never calls noise a gain more often than
``alpha``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

Z95 = 1.959964  # standard normal quantile of 0.975: two-sided 95 %

GAIN, LOSS, UNRESOLVED, UNCHANGED = "gain", "loss", "unresolved", "unchanged"


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval ``(low, high)`` of a success rate k/n, as fractions; (0, 1)
    when n = 0 (no episode: every rate is possible).

    Examples (95 %): 0/10 → (0.0, 0.2775); 5/10 → (0.2366, 0.7634); 10/10 → (0.7225, 1.0);
    14/48 → (0.1824, 0.4318). For 5/10: centre = (5 + 1.9208)/(10 + 3.8415) = 0.5,
    half = 1.96 · √(2.5 + 0.9604)/13.8415 = 0.2634.
    """
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    z2 = z * z
    centre = (k + z2 / 2) / (n + z2)
    half = z * math.sqrt(k * (n - k) / n + z2 / 4) / (n + z2)
    low = 0.0 if k == 0 else max(0.0, centre - half)  # exact ends: no rounding residue
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def format_rate(k: int, n: int) -> str:
    """``"k/n = rate% [low, high]"``: the success rate and its 95 % Wilson interval in percent,
    one decimal; ``"0/0 = n/a"`` without episodes.

    >>> format_rate(14, 48)
    '14/48 = 29.2% [18.2, 43.2]'
    >>> format_rate(0, 12)
    '0/12 = 0.0% [0.0, 24.2]'
    """
    if n == 0:
        return "0/0 = n/a"
    low, high = wilson_interval(k, n)
    return f"{k}/{n} = {100 * k / n:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts: the binomial tail
    ``min(1, 2 · P[X ≤ min(b, c)])``, X ~ Binomial(b + c, ½); 1 when b + c = 0.

    Examples: b=0, c=6 → 2/64 = 0.03125; b=1, c=7 → 2·(1 + 8)/256 = 0.0703125;
    b=0, c=3 → 0.25; b=1, c=1 → min(1, 2·3/4) = 1.0.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)  # integer division into a float: exact up to rounding


@dataclass(frozen=True)
class PairedTest:
    """The exact McNemar test of two evaluations of the same games (:func:`paired_test`)."""

    pairs: int  # games with an outcome in both evaluations
    b: int  # success → failure
    c: int  # failure → success
    difference: float  # 100 · (c − b) / pairs: the change in success rate, in points
    p_value: float
    verdict: str  # gain | loss | unresolved | unchanged


def paired_test(before: Sequence[bool | None], after: Sequence[bool | None], *, alpha: float = 0.05) -> PairedTest:
    """Exact McNemar test of ``after`` against ``before``: the outcomes of the same games in
    the same order (None: the episode crashed; such a game is left out of both).

    Verdict: ``gain`` when c > b and p < alpha, ``loss`` when b > c and p < alpha,
    ``unchanged`` when some game was played by both and every one ended the same way
    (b = c = 0), else ``unresolved`` (the data cannot tell a change from noise).

    Examples: 6 games failed before and solved after, nothing else changed → b=0, c=6,
    p=0.03125, gain. ``before=[True, False, None]``, ``after=[False, True, True]`` → the
    crashed third game is left out: pairs=2, b=1, c=1, difference 0.0, p=1.0, unresolved.
    """
    if len(before) != len(after):
        raise ValueError(f"paired outcomes need the same games: {len(before)} before, {len(after)} after")
    pairs = [(x, y) for x, y in zip(before, after) if x is not None and y is not None]
    b = sum(1 for x, y in pairs if x and not y)
    c = sum(1 for x, y in pairs if y and not x)
    p = mcnemar_exact_p(b, c)
    if pairs and b == c == 0:
        verdict = UNCHANGED
    elif p < alpha:
        verdict = GAIN if c > b else LOSS
    else:
        verdict = UNRESOLVED
    difference = 100.0 * (c - b) / len(pairs) if pairs else 0.0
    return PairedTest(len(pairs), b, c, difference, p, verdict)


@dataclass(frozen=True)
class RateTest:
    """The paired sign-flip permutation test of per-game success rates (:func:`paired_rate_test`)."""

    games: int  # games with episodes in both evaluations
    up: int  # games whose success rate rose
    down: int  # games whose success rate fell
    difference: float  # 100 · mean over games of (rate after − rate before), in points
    p_value: float
    verdict: str  # gain | loss | unresolved | unchanged

    def __str__(self) -> str:
        """E.g. ``+12.5 points, 5 up 0 down of 8, p=0.0625: unresolved`` (a table cell)."""
        return f"{self.difference:+.1f} points, {self.up} up {self.down} down of {self.games}, p={self.p_value:.3g}: {self.verdict}"


def paired_rate_test(
    before: Sequence[tuple[int, int]], after: Sequence[tuple[int, int]], *, alpha: float = 0.05
) -> RateTest:
    """Exact two-sided sign-flip permutation test of the mean per-game change in success
    rate, for evaluations that play each game several times (sampled decoding): ``before``
    and ``after`` hold ``(successes, episodes)`` per game, the same games in the same order
    (a game with 0 episodes on either side is left out).

    With d_g = k'_g/n'_g − k_g/n_g over the G games and D = |Σ_g d_g|, under "no change"
    every game's d_g is as likely to carry either sign, so::

        p = #{s ∈ {−1, +1}^G : |Σ_g s_g · d_g| ≥ D} / 2^G

    (enumerated up to G = 16; above, counted exactly by :func:`_sign_sum_tail`; only changes
    that are no fractions of a common denominator ≤ 10^4 fall back to 2^16 sign vectors drawn
    with a fixed seed, the observed one counted: Phipson & Smyth, 2010, Stat. Appl. Genet.
    Mol. Biol. 9(1)). The test pairs each game with itself, so a hard game stays hard on
    both sides, and it weighs a game's change by its size, which the sign test and McNemar
    on one episode per game cannot. Verdicts as :func:`paired_test`; ``unchanged`` when every d_g is 0.

    Example: per-game rates 0/2, 0/2, 1/2, 0/2 → 1/2, 1/2, 2/2, 1/2: d = ½ on all four
    games, only the all-plus and all-minus sign vectors reach |Σ| = 2 → p = 2/16 = 0.125,
    unresolved; the same on 6 games gives p = 2/64 = 0.03125, gain.
    """
    if len(before) != len(after):
        raise ValueError(f"paired rates need the same games: {len(before)} before, {len(after)} after")
    for k, n in [*before, *after]:
        if not 0 <= k <= n:
            raise ValueError(f"need 0 <= successes <= episodes, got {k}/{n}")
    d = [ka / na - kb / nb for (kb, nb), (ka, na) in zip(before, after) if nb > 0 and na > 0]
    return sign_flip_test(d, alpha=alpha)


def sign_flip_test(d: Sequence[float], *, alpha: float = 0.05) -> RateTest:
    """:func:`paired_rate_test`'s exact sign-flip test on given per-game changes ``d`` (rates
    in [-1, 1] or differences of them): a difference-in-differences, e.g. per game (arm's
    change from its start) − (control's change from its start), so that starts drawn apart
    do not count as an effect.

    >>> str(sign_flip_test([0.5, 0.25, -0.25]))
    '+16.7 points, 2 up 1 down of 3, p=0.75: unresolved'
    """
    d = list(d)
    up, down = sum(x > 0 for x in d), sum(x < 0 for x in d)
    observed = abs(sum(d)) - 1e-12  # ties of the observed sum count as extreme
    if len(d) <= 16:
        signs = itertools.product((-1.0, 1.0), repeat=len(d))
        extreme = sum(abs(sum(s * x for s, x in zip(sign, d))) >= observed for sign in signs)
        p = extreme / 2 ** len(d)
    elif (p := _sign_sum_tail(d)) is None:
        rng = random.Random(0)
        draws = 2**16
        extreme = sum(abs(sum(x if rng.random() < 0.5 else -x for x in d)) >= observed for _ in range(draws))
        p = (extreme + 1) / (draws + 1)
    difference = 100.0 * sum(d) / len(d) if d else 0.0
    if d and up == down == 0:
        verdict, p = UNCHANGED, 1.0
    elif p < alpha:
        verdict = GAIN if difference > 0 else LOSS
    else:
        verdict = UNRESOLVED
    return RateTest(len(d), up, down, difference, min(1.0, p), verdict)


def _sign_sum_tail(d: Sequence[float], *, max_denominator: int = 10_000, max_states: int = 4_000_000) -> float | None:
    """P(|Σ_g s_g · d_g| ≥ |Σ_g d_g|) over uniform signs s ∈ {−1, +1}^G, exactly, when every
    d_g is a fraction with a common denominator L ≤ ``max_denominator`` (success rates k/n and
    their differences are); ``None`` otherwise, or when the 2·L·Σ|d_g| + 1 sums would exceed
    ``max_states``. The distribution of the sum is built one game at a time over the integers
    L·d_g: P_g(v) = ½ P_{g−1}(v − L·d_g) + ½ P_{g−1}(v + L·d_g).

    Example: d = (1/3, 1/3, −2/3), L = 3, integers (1, 1, −2), observed sum 0; the 8 signed
    sums are 0, 0, ±2, ±2, ±4, all with |sum| ≥ 0 → 1.0. For d = (1/3, 1/3, 2/3) the observed
    sum is 4, and only the all-plus and all-minus signs reach it → 2/8 = 0.25.

    >>> _sign_sum_tail([1 / 3, 1 / 3, -2 / 3]), _sign_sum_tail([1 / 3, 1 / 3, 2 / 3]), _sign_sum_tail([2**-0.5])
    (1.0, 0.25, None)
    """
    import numpy as np

    fractions = [Fraction(x).limit_denominator(max_denominator) for x in d]
    if any(abs(float(f) - x) > 1e-9 for f, x in zip(fractions, d)):
        return None
    scale = math.lcm(*(f.denominator for f in fractions)) if fractions else 1
    steps = [abs(int(f * scale)) for f in fractions]
    total = sum(steps)
    if scale > max_denominator or 2 * total + 1 > max_states:
        return None
    probs = np.zeros(2 * total + 1)
    probs[total] = 1.0  # index v + total holds P(sum = v); no mass ever reaches the ends and wraps
    for step in steps:
        if step:
            probs = 0.5 * (np.roll(probs, step) + np.roll(probs, -step))
    observed = abs(sum(int(f * scale) for f in fractions))
    return float(probs[np.abs(np.arange(-total, total + 1)) >= observed].sum())
