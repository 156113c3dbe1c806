"""Agentic Self-Learning (Sun et al., 2025, "Towards Agentic Self-Learning LLMs in Search
Environment", arXiv 2510.14253), the pure parts: the GRM's verdict, the prompt
generator's entropy reward, the K/C acceptance filter, per-question balancing of the GRM's
self-generated labels, the HARDER/EASIER follow-up, the reward plateau that ends a
phase, and an iteration's metrics pooled over its collection rounds. No model, engine or
trainer imports: every function is tested by hand.

Verdict rule (:func:`parse_verdict`): the LAST ``conclusion:`` in the text decides (the
authors' reward code also splits on the last "conclusion"); the first word after it,
markdown and case aside, must be ``correct`` (1), ``wrong`` / ``incorrect`` / ``not correct``
(0). Anything else after the last ``conclusion:`` — another word, the template's own
``correct/wrong``, nothing — is no verdict (None), even if an earlier conclusion was
clear. The authors' code tests substrings ("incorrect" before "correct"), so their
"conclusion: the answer is not correct" scores 1; here it is None (not a verdict word
first) and "conclusion: not correct" is 0.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Hashable, Sequence

#: A "conclusion" heading with markdown around it and a colon (ASCII or full-width).
_CONCLUSION = re.compile(r"conclusion[\s*_`'\"]*[:：]", re.IGNORECASE)
#: The verdict right after it: markdown, then the word, then not a word character or "/".
_VERDICT = re.compile(
    r"[\s*_`'\"\[\(]*(not\s+correct|incorrect|correct|wrong)(?![\w/-])(?!\s*/)(?!\s+or\s)",
    re.IGNORECASE,
)
_VALUES = {"correct": 1, "incorrect": 0, "wrong": 0}

HARDER, EASIER = "HARDER", "EASIER"


def parse_verdict(text: str) -> int | None:
    """The GRM's verdict: 1 correct, 0 wrong (or incorrect / not correct), None when the
    last ``conclusion:`` carries no verdict word (see the module's rule).

    Examples: ``"conclusion: incorrect"`` → 0; ``"Conclusion: **correct**"`` → 1;
    ``"**Conclusion:** Wrong."`` → 0; ``"conclusion: correct ... conclusion: wrong"`` → 0
    (the last wins); ``"conclusion: correct/wrong"`` → None (the template echoed);
    ``"The answer is correct."`` → None (no conclusion).
    """
    heads = list(_CONCLUSION.finditer(text))
    if not heads:
        return None
    match = _VERDICT.match(text, heads[-1].end())
    if match is None:
        return None
    word = " ".join(match.group(1).lower().split())
    return 0 if word == "not correct" else _VALUES[word]


def verdict_entropy(verdicts: Sequence[Hashable]) -> float:
    """The prompt generator's reward (paper §3.3, Phase 1): the entropy, in nats, of the
    empirical distribution of the GRM's verdicts over the M policy attempts,
    ``H = −Σ_v p_v ln p_v`` with ``p_v`` the share of attempts with verdict ``v`` (None,
    no verdict, is a value of its own).

    Examples: ``[1, 0, 1, 0]`` → ln 2 = 0.693147; ``[1, 1, 1]`` → 0; ``[1, 0, None]`` →
    ln 3 = 1.098612; ``[1, 1, 1, 0]`` → −(¾ ln ¾ + ¼ ln ¼) = 0.562335.
    """
    if not verdicts:
        raise ValueError("verdict_entropy needs at least one verdict")
    n = len(verdicts)
    return float(-sum((c / n) * math.log(c / n) for c in Counter(verdicts).values()) + 0.0)


def acceptance(verdicts: Sequence[int | None], threshold: float) -> tuple[float, bool]:
    """The K/C filter on a generated (question, answer) pair (paper §3.3, Phase 1): the
    GRM judges the pair K times; the mean verdict s̄ (no verdict counts 0) must reach
    ``threshold`` C. Returns ``(s̄, kept)``. The paper writes s̄ > C; the issue and the
    authors' default C = 0.8 with K = 5 ask for "≥ C of K checks", which is what is kept
    here (s̄ ≥ C; 4 of 5 passes, where s̄ > C would need 5 of 5).

    Examples (C = 0.8): ``[1, 1, 1, 1, 0]`` → (0.8, True); ``[1, 1, 1, 0, None]`` →
    (0.6, False); ``[1, 1, 1, 1, 1]`` → (1.0, True).
    """
    if not verdicts:
        raise ValueError("acceptance needs at least one verdict (K >= 1)")
    mean = sum(v == 1 for v in verdicts) / len(verdicts)
    return mean, mean >= threshold - 1e-12


def follow_up(scores: Sequence[int | None], threshold: float = 0.5) -> str:
    """The difficulty flag f of a solved question (paper §3.3, Phase 3): the mean GRM
    score s̄ of the policy's attempts (no verdict counts 0); s̄ > 0.5 → HARDER (too easy),
    else EASIER.

    Examples: ``[1, 1, 0]`` → s̄ = 0.667 → HARDER; ``[1, 0]`` → s̄ = 0.5 → EASIER.
    """
    if not scores:
        raise ValueError("follow_up needs at least one score")
    return HARDER if sum(s == 1 for s in scores) / len(scores) > threshold else EASIER


def follow_up_hops(hops: int, flag: str) -> int:
    """The nominal hop count of a follow-up question: HARDER adds one reasoning hop,
    EASIER removes one (never below 1). Examples: (2, HARDER) → 3; (1, EASIER) → 1."""
    return hops + 1 if flag == HARDER else max(1, hops - 1)


def balance_per_question(
    questions: Sequence[Hashable], labels: Sequence[int], rng: random.Random, limit: int | None = None
) -> list[int]:
    """Indices of the GRM's self-generated labels kept for training, balanced per question.
    The paper adds all M (question, attempt, verdict) triples to D_GRM (§3.3, Phase 1) and
    says nothing of balancing; this is what the authors' released ``asl3.py`` does.
    ``questions[i]`` is the question attempt ``i`` answered, ``labels[i]`` the GRM's
    verdict on it (0 or 1). For each question: all attempts with its minority verdict plus
    an equal random sample of its majority; a question whose verdicts are unanimous adds
    nothing (on a tie every attempt is kept). ``limit``: keep the blocks of the newest
    questions (the last to appear) whose total fits, stopping at the first that does not.
    The indices come back sorted.

    Hand case: question A with verdicts ``[1, 1, 1, 1]`` and B with ``[0, 0, 0, 1]``, i.e.
    ``questions = [A, A, A, A, B, B, B, B]``, ``labels = [1, 1, 1, 1, 0, 0, 0, 1]`` → A
    adds nothing, B adds its only 1 (index 7) and one of its three 0s at random, e.g.
    ``[5, 7]``. (Balancing the pooled labels instead would keep three 1s of A and three
    0s of B and drop B's 1.) ``[A, A, B, B]`` with ``[1, 0, 0, 1]`` and ``limit=2`` →
    ``[2, 3]`` (B is the newest).
    """
    blocks: dict[Hashable, dict[int, list[int]]] = {}
    for index, (question, label) in enumerate(zip(questions, labels, strict=True)):
        blocks.setdefault(question, {}).setdefault(label, []).append(index)
    kept: list[list[int]] = []
    for by_label in blocks.values():
        if len(by_label) < 2:
            continue
        minority, majority = sorted(by_label.values(), key=len)
        kept.append(sorted(minority + rng.sample(majority, len(minority))))
    if limit is not None:
        newest, total = [], 0
        for block in reversed(kept):
            if total + len(block) > limit:
                break
            newest.append(block)
            total += len(block)
        kept = newest
    return sorted(i for block in kept for i in block)


def plateaued(rewards: Sequence[float], window: int, tolerance: float) -> bool:
    """A phase's training reward has converged (paper §3.4: "Phases 2 and 3 stop when their
    training rewards converge"): the mean of the last ``window`` iterations' rewards
    improves on the mean of the ``window`` before by at most ``tolerance``. Fewer than
    ``2·window`` rewards: not yet.

    Examples (window 2, tolerance 0.05): ``[0.1, 0.3, 0.5, 0.6]`` → 0.55 − 0.2 = 0.35 >
    0.05 → False; ``[0.5, 0.6, 0.58, 0.6]`` → 0.59 − 0.55 = 0.04 → True; ``[0.5, 0.6, 0.6]``
    → False (3 < 4 rewards).
    """
    if window < 1:
        raise ValueError("plateau window must be >= 1")
    if len(rewards) < 2 * window:
        return False
    last = sum(rewards[-window:]) / window
    before = sum(rewards[-2 * window : -window]) / window
    return last - before <= tolerance + 1e-12


def pooled_means(parts: Sequence[tuple[dict[str, float], int]]) -> dict[str, float]:
    """Means measured on parts of a batch, ``(means, count)`` each, pooled as the mean over
    the whole batch (each part weighted by its count; a key a part lacks counts 0 there).
    One part is returned as it is.

    >>> pooled_means([({"reward": 1.0}, 1), ({"reward": 0.25}, 4)])
    {'reward': 0.4}
    >>> pooled_means([])
    {}
    """
    if len(parts) == 1:
        return dict(parts[0][0])
    total = sum(n for _, n in parts)
    keys = sorted({k for means, _ in parts for k in means})
    return {k: sum(means.get(k, 0.0) * n for means, n in parts) / max(total, 1) for k in keys}
