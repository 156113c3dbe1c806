"""benchmarks/probe_prompt_lookup.py's draft and replay: drafts copy what followed the last
n-gram's earlier occurrence, and a step emits the matching drafts plus one token."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from probe_prompt_lookup import draft, replay  # noqa: E402


def test_draft_copies_what_followed_the_longest_recent_ngram():
    assert draft([5, 6, 7, 1, 5, 6], ngram=2, k=2) == [7, 1]
    assert draft([5, 6, 7, 9, 6], ngram=3, k=3) == [7, 9, 6]  # falls back to the 1-gram (6)
    assert draft([1, 2, 3], ngram=3, k=4) == []  # nothing recurs


def test_replay_counts_a_step_per_mismatch_and_accepts_whole_copies():
    prompt = [1, 2, 3, 4, 5, 9]
    assert replay(prompt, [1, 2, 3, 4], ngram=1, k=4) == 1 + 1  # 1 drafted from nothing; then 2 3 4 copied
    assert replay(prompt, [8, 8, 8], ngram=1, k=1) == 3  # 8, 8 (no earlier 8), then the third drafted and accepted
    assert replay([7], [3, 4], ngram=2, k=2) == 2  # no drafts: one token a step
