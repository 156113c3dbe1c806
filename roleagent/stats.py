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

import math
from collections.abc import Sequence
from dataclasses import dataclass

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
