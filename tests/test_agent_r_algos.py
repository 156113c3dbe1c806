"""Agent-R's pure parts (roleagent.algos.agent_r): the docstrings' worked examples, plus the
properties the revision mask must keep for any path pair."""

import math
import random

import pytest

from roleagent.algos.agent_r import (
    REVISION_THOUGHTS,
    alpha_for_iteration,
    good_messages,
    loop_count,
    parse_judgement,
    revision_pairs,
    shared_prefix,
    splice_revision,
    transition_point,
    uct,
)
from roleagent.sft.data import check_example


def test_uct_worked_example_and_unvisited():
    assert uct(1.0, 2, 8, c=0.25) == pytest.approx(0.5 + 0.25 * math.sqrt(math.log(8) / 2))
    assert uct(1.0, 2, 8) == pytest.approx(0.75492, abs=1e-5)
    assert uct(0.0, 0, 8) == math.inf
    assert uct(3.0, 3, 1) == pytest.approx(1.0)  # ln 1 = 0: no exploration bonus
    with pytest.raises(ValueError):
        uct(1.0, 1, 0)


def test_alpha_schedule_is_float_and_saturates():
    assert [alpha_for_iteration(i) for i in (0, 1, 2, 5)] == [0.5, 0.7, 1.0, 1.0]
    assert isinstance(alpha_for_iteration(0, (1,)), float)
    with pytest.raises(ValueError):
        alpha_for_iteration(-1)


def test_revision_pairs_worked_example():
    assert revision_pairs([1.0, 0.0, 0.6], alpha=0.5, beta=0.2) == [(0, 1), (0, 2), (2, 1)]
    assert revision_pairs([1.0, 0.0, 0.6], alpha=0.7, beta=0.2) == [(0, 1), (0, 2)]


def test_revision_pairs_alpha_one_keeps_optimal_paths_and_gap_is_strict():
    # α = 1.0 (the paper's iteration 3) keeps the optimal path; the authors' ">" would keep none
    assert revision_pairs([1.0, 0.5], alpha=1.0, beta=0.2) == [(0, 1)]
    assert revision_pairs([0.9, 0.0], alpha=1.0, beta=0.2) == []
    assert revision_pairs([0.7, 0.5], alpha=0.5, beta=0.2) == []  # gap 0.2 is not > 0.2
    assert revision_pairs([0.5, 0.5], alpha=0.0, beta=-1.0) == [(0, 1), (1, 0)]  # strings never reach here


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("The key is taken.\nJudgment: Good", "good"),
        ("Judgement: <Bad>.", "bad"),
        ("Judgment: **Uncertain**", "uncertain"),
        ("**Judgment:** bad", "bad"),
        ("Judgment: Good\nOn reflection...\nJudgment: Bad", "bad"),  # the last one counts
        ("Judgment: not bad", None),
        ("Judgment: Good or Bad", None),
        ("Judgment: badly chosen", None),
        ("Bad.", None),
        ("", None),
    ],
)
def test_parse_judgement_exact(text, verdict):
    assert parse_judgement(text) == verdict


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("The pick wastes a step.\nJudgment: Bad, because the key is still in room 2.", "bad"),
        ("judgment: BAD - it crafts the wrong item", "bad"),
        ("**Judgment**: **Uncertain** (nothing has changed yet)", "uncertain"),
        ("### Judgement: *Good*, it takes the key", "good"),
        ("The light bulb turned on. Therefore, Judgment: Bad", "bad"),  # the paper's Table 8 form
        ("Judgment: Good. Not bad at all.", "good"),
        ("Judgment: <Good or Bad or Uncertain>", None),  # the prompt's template, echoed
        ("Judgment: Good/Bad", None),
        ("Judgment: Bad or uncertain", None),
        ("Judgment: The action is bad.", None),  # the verdict word must come first
    ],
)
def test_parse_judgement_reads_the_verdict_word_before_trailing_text(text, verdict):
    """Issue 24, item 7: "Judgment: Bad, because …" is Bad (case, bold and trailing text
    allowed); an offered alternative is no verdict."""
    assert parse_judgement(text) == verdict


def test_transition_point_first_bad_or_last_turn():
    assert transition_point(["good", None, "bad", "bad"], start=1) == 3
    assert transition_point(["good", "uncertain"], start=1) == 2
    assert transition_point(["bad"]) == 0
    with pytest.raises(ValueError):
        transition_point([])


def test_splice_revision_worked_example():
    bad = [("a", "o1"), ("b", "o2"), ("x", "o3")]
    good = [("a", "o1"), ("c", "o4"), ("d", "won")]
    messages = splice_revision(bad, good, 1, "T")
    assert [(m["role"][0], m["content"], m["loss"]) for m in messages] == [
        ("a", "a", False),
        ("u", "o1", False),
        ("a", "b", False),
        ("u", "o2", False),
        ("a", "T", True),
        ("u", "OK.", False),
        ("a", "c", True),
        ("u", "o4", False),
        ("a", "d", True),
    ]
    assert shared_prefix(bad, good) == 1


def test_splice_revision_rejects_transition_inside_shared_prefix():
    bad = [("a", "o1"), ("b", "o2")]
    good = [("a", "o1"), ("c", "o4")]
    with pytest.raises(ValueError, match="after the shared prefix"):
        splice_revision(bad, good, 0, "T")
    with pytest.raises(ValueError):
        splice_revision(bad, good, 2, "T")
    with pytest.raises(ValueError, match="no turn after"):
        splice_revision(bad, bad, 1, "T")


def test_splice_revision_mask_properties_fuzz():
    """For random path pairs and transitions: no observation and no bad turn is trained,
    every good turn after the divergence is, and the result is a valid SFT example."""
    rng = random.Random(0)
    for _ in range(200):
        n_shared = rng.randint(0, 3)
        prefix = [(f"s{i}", f"so{i}") for i in range(n_shared)]
        bad = prefix + [(f"b{i}", f"bo{i}") for i in range(rng.randint(1, 4))]
        good = prefix + [(f"g{i}", f"go{i}") for i in range(rng.randint(1, 4))]
        transition = rng.randint(n_shared, len(bad) - 1)
        thought = rng.choice(REVISION_THOUGHTS)
        messages = splice_revision(bad, good, transition, thought)
        trained = [m["content"] for m in messages if m["loss"]]
        assert all(m["role"] == "assistant" for m in messages if m["loss"])
        assert trained == [thought] + [g for g, _ in good[n_shared:]]
        kept_bad = [m["content"] for m in messages if m["role"] == "assistant" and not m["loss"]]
        assert kept_bad == [b for b, _ in bad[: transition + 1]]
        opening = [{"role": "user", "content": "task"}]
        check_example({"messages": opening + messages})


def test_good_messages():
    assert [(m["content"], m["loss"]) for m in good_messages([("a", "o1"), ("b", "won")])] == [
        ("a", True),
        ("o1", False),
        ("b", True),
    ]
    with pytest.raises(ValueError):
        good_messages([])


def test_loop_count_worked_examples():
    assert loop_count(list("ababab") + ["c"], 2) == 3
    assert loop_count(list("ababab") + ["c"], 1) == 1
    assert loop_count(list("aaab"), 1) == 3
    assert loop_count(list("abcabc"), 3) == 2
    assert loop_count(["a"], 2) == 0  # too short to hold one sequence
    with pytest.raises(ValueError):
        loop_count(["a"], 0)
