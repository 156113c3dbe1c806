"""State similarity (LMS) and state grouping, shared by GiGPO anchor groups and Role-Agent's
state groups (Role-Agent, Wang et al., 2026, arXiv 2606.10917, eqs. 4 and 7; GiGPO, Feng et al., 2025, arXiv 2505.10978).

LMS — our definition
--------------------
``lms_score(a, b) = 2·LCS(tok(a), tok(b)) / (|tok(a)| + |tok(b)|)`` over word tokens, where

- ``tok`` case-folds the text and splits it into words and single punctuation marks
  (regex ``\\w+|[^\\w\\s]``), so whitespace runs and case never matter;
- each side keeps at most ``MAX_LMS_TOKENS`` (1024) tokens — the tail past that is ignored;
  ALFWorld / WebShop / search states are far shorter, the cap only bounds the cost of
  pathological generations;
- both empty → 1.0, exactly one empty → 0.0.

It is symmetric (LCS and the denominator are), lies in [0, 1], is 1 iff the token sequences
are equal, and has no heuristics. The LCS length is exact, computed with the bit-parallel
algorithm of Allison & Dix (1986) / Hyyrö (2004) on Python integers:
O(|b|·⌈|a|/64⌉) word operations instead of an O(|a|·|b|) Python DP.

Difference from verl-agent and the Role-Agent code: they use ``difflib.SequenceMatcher(None,
a, b).ratio()`` on characters. That ratio is ``2·M/(|a|+|b|)`` where M is the size of a
greedy longest-*block* matching, not the LCS, so it depends on argument order (it is not
symmetric) and, for strings of 200+ characters, its "autojunk" heuristic ignores characters
that occur in more than 1% of the text (spaces, 'e', ...), which lowers scores erratically.
Word-level LCS measures what changed in a templated state ("you see a apple 1" vs "you see a
bread 1" differ by one token) instead of character overlap.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence

import numpy as np

from ._segments import factorize

MAX_LMS_TOKENS = 1024
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def lms_tokens(text: str) -> list[str]:
    """Normalised word tokens used by ``lms_score``.

    >>> lms_tokens("You see  a Apple 1,")
    ['you', 'see', 'a', 'apple', '1', ',']
    """
    return _TOKEN_RE.findall(text.casefold())[:MAX_LMS_TOKENS]


def _match_masks(tokens: Sequence[str]) -> dict[str, int]:
    """For each token, the bitmask of its positions in ``tokens``."""
    masks: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        masks[tok] = masks.get(tok, 0) | (1 << i)
    return masks


def _lcs_length(masks_a: dict[str, int], len_a: int, tokens_b: Sequence[str]) -> int:
    """Exact LCS length via the bit-parallel recurrence V ← (V + (V & M)) | (V & ~M)."""
    full = (1 << len_a) - 1
    v = full
    for tok in tokens_b:
        m = masks_a.get(tok)
        if m is not None:
            u = v & m
            v = ((v + u) | (v - u)) & full
    return len_a - v.bit_count()


def _lms_from_tokens(masks_a: dict[str, int], len_a: int, tokens_b: Sequence[str]) -> float:
    len_b = len(tokens_b)
    if len_a == 0 and len_b == 0:
        return 1.0
    if len_a == 0 or len_b == 0:
        return 0.0
    return 2.0 * _lcs_length(masks_a, len_a, tokens_b) / (len_a + len_b)


def lms_score(predicted: str, actual: str) -> float:
    """Longest-matching-subsequence similarity in [0, 1] (Role-Agent eq. 4), symmetric.

    ``2·LCS / (len_a + len_b)`` over normalised word tokens (see the module docstring).

    Example: "You see a apple 1." vs "you see a bread 1." → tokens
    [you, see, a, apple, 1, .] and [you, see, a, bread, 1, .], LCS 5 → 2·5/12 = 0.8333.
    """
    if not isinstance(predicted, str) or not isinstance(actual, str):
        raise TypeError("lms_score compares two strings")
    a, b = lms_tokens(predicted), lms_tokens(actual)
    return _lms_from_tokens(_match_masks(a), len(a), b)


def build_state_groups(
    group_ids: Sequence[Hashable] | np.ndarray,
    states: Sequence[Hashable] | np.ndarray,
    *,
    similarity_threshold: float | None = None,
) -> np.ndarray:
    """Dense state-group code per step sample (GiGPO anchor groups, Role-Agent eq. 7).

    States are grouped only within their episode group, pooled over all trajectories and
    time steps. Without a threshold, two samples share a group iff their raw states are
    equal (hash match, verl-agent ``build_step_group``). With ``similarity_threshold`` in
    (0, 1], verl-agent's greedy clustering: visit the group's samples in batch order; a
    sample joins the first existing cluster whose representative (its first member) has
    ``lms_score ≥ threshold`` with it, else it opens a new cluster. States must be str.

    Greedy assignment is a function of the state alone (representatives never change and
    new clusters are appended), so we cluster each distinct (group, state) once, in order of
    first appearance, and broadcast — the same result as visiting every sample, with far
    fewer comparisons. A comparison is skipped when the length bound
    ``2·min(la, lb)/(la + lb) < threshold`` already rules it out.

    Example: group g, states ["a b c d e f g h i j", "a b c d e f g h i k", "x"], threshold
    0.9: lms of the first two is 2·9/20 = 0.9 → one cluster; codes [0, 0, 1].
    """
    groups, _ = factorize(group_ids)
    state_codes, state_first = factorize(states)
    if groups.shape != state_codes.shape:
        raise ValueError(f"group_ids has shape {groups.shape}, states {state_codes.shape}")
    if groups.size == 0:
        return np.zeros(0, dtype=np.int64)
    pair_codes, pair_first = factorize(groups * (int(state_codes.max()) + 1) + state_codes)
    if similarity_threshold is None:
        return pair_codes
    thr = float(similarity_threshold)
    if not 0.0 < thr <= 1.0:
        raise ValueError("similarity_threshold must be in (0, 1]")

    state_list = states.tolist() if isinstance(states, np.ndarray) else list(states)
    tokens: list[list[str]] = []
    for loc in state_first.tolist():
        s = state_list[loc]
        if not isinstance(s, str):
            raise ValueError("similarity-based state grouping needs text (str) states")
        tokens.append(lms_tokens(s))

    pair_group = groups[pair_first]
    pair_state = state_codes[pair_first]
    cluster_of_pair = np.empty(pair_first.size, dtype=np.int64)
    order = np.argsort(pair_group, kind="stable")  # pairs by group, first appearance inside
    bounds = np.flatnonzero(np.diff(pair_group[order])) + 1
    next_cluster = 0
    for members in np.split(order, bounds):  # loop over episode groups: greedy is sequential
        reps: list[tuple[dict[str, int], int, int]] = []  # (masks, length, cluster code)
        for p in members.tolist():
            tok = tokens[pair_state[p]]
            lb = len(tok)
            for masks, la, code in reps:
                if la + lb and 2.0 * min(la, lb) / (la + lb) < thr:
                    continue
                if _lms_from_tokens(masks, la, tok) >= thr:
                    cluster_of_pair[p] = code
                    break
            else:
                reps.append((_match_masks(tok), lb, next_cluster))
                cluster_of_pair[p] = next_cluster
                next_cluster += 1
    return cluster_of_pair[pair_codes]
