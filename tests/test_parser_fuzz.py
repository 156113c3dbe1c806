"""Every parser of model output runs in linear time and never raises.

Model output is adversarial: a policy under RL pressure produces whatever it produces,
so each parser is fed hostile texts up to 4x its generation limit (the configured
``max_new_tokens`` at ~4 characters per token; 4x covers long whitespace tokens).

* The input grows by 1.25x from 16 characters and every single call must stay under an
  absolute bound: an exponential parser fails within seconds instead of hanging.
* Time at 4x the limit over time at the limit (best of several timed runs, enough calls
  per run to measure ~15 ms) stays below 10: linear gives ~4, quadratic ~16.
"""

from __future__ import annotations

import random
import time

import pytest

from roleagent.config import TrainConfig
from roleagent.envs.alfworld.diagnosis import entity_type, parse_command
from roleagent.methods.role_agent.aiw.reflection import parse_reflection, parse_small_int
from roleagent.methods.role_agent.aiw.retrieval import parse_selection
from roleagent.methods.role_agent.config import AIWConfig
from roleagent.methods.role_agent.wia import parse_predictions
from roleagent.rollout.actor import action_blocks, parse_action

CHARS_PER_TOKEN = 4
BOUND_S = 1.0  # any single call, any input up to 4x the limit (linear code: milliseconds)
MAX_RATIO = 10.0
TAXONOMY = ("wrong_receptacle", "repetitive_exploration", "action_format_error")


def _limit(tokens: int) -> int:
    return tokens * CHARS_PER_TOKEN


def _best_per_call(fn, text: str, calls: int, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(text)
        best = min(best, time.perf_counter() - t0)
    return best / calls


def assert_linear(fn, make, limit_chars: int) -> None:
    """``make(n)`` builds a hostile text of about ``n`` characters."""
    n = 16
    while n <= 4 * limit_chars:
        text = make(n)
        t0 = time.perf_counter()
        fn(text)
        elapsed = time.perf_counter() - t0
        assert elapsed < BOUND_S, f"{len(text)} characters took {elapsed:.2f} s"
        n = int(n * 1.25) + 1
    small, big = make(limit_chars), make(4 * limit_chars)
    t0 = time.perf_counter()
    fn(small)
    calls = max(1, int(0.015 / max(time.perf_counter() - t0, 1e-6)))
    t_small = _best_per_call(fn, small, calls)
    t_big = _best_per_call(fn, big, calls)
    ratio = t_big / max(t_small, 1e-9)
    assert ratio < MAX_RATIO, f"4x input took {ratio:.1f}x the time ({t_small:.2e} s -> {t_big:.2e} s)"


def _random_mix(fragments: tuple[str, ...], seed: int):
    def make(n: int) -> str:
        rng = random.Random(seed)
        out, size = [], 0
        while size < n:
            out.append(rng.choice(fragments))
            size += len(out[-1])
        return "".join(out)

    return make


def _repeat(unit: str, head: str = "", tail: str = ""):
    return lambda n: head + unit * max(1, (n - len(head)) // len(unit)) + tail


# ------------------------------------------------------------ analyst (Figure 8) ------

REFLECTION_INPUTS = {
    "key_then_spaces": _repeat(" ", "DETAIL", "x"),  # was 9 s at 400 spaces
    "dominant_then_separators": _repeat(" _-", "DOMINANT", "x"),
    "key_then_markup": _repeat(" *_'\"", "DOMINANT_TYPE", "x"),
    "spaces": _repeat(" ", "", "x"),
    "keys_without_colon": _repeat("DETAIL "),
    "many_fields": _repeat("DETAIL: x CRITICAL_STEP= 2 "),
    "open_tags": _repeat("<reflection>"),
    "tag_then_spaces": _repeat(" ", "<reflection><", "x"),
    "lt_spaces": _repeat("< "),
    "long_digits": _repeat("9", "CRITICAL_STEP: "),
    "long_label": _repeat("wrong receptacle ", "<reflection>DOMINANT_TYPE: "),
    "random_fragments": _random_mix(
        (
            "DETAIL",
            "DOMINANT",
            "TYPE",
            "CRITICAL",
            "STEP",
            " ",
            "  ",
            "*",
            "_",
            "-",
            '"',
            "'",
            ":",
            "=",
            "<reflection>",
            "</reflection>",
            "<",
            ">",
            "[",
            "]",
            "9",
            "\n",
            "x",
        ),
        0,
    ),
}


@pytest.mark.parametrize("name", REFLECTION_INPUTS)
def test_parse_reflection_is_linear(name):
    limit = _limit(AIWConfig().analysis_max_new_tokens)
    assert_linear(lambda t: parse_reflection(t, TAXONOMY), REFLECTION_INPUTS[name], limit)


def test_parse_reflection_still_reads_spaced_keys():
    text = 'DETAIL   \n x\n"DOMINANT _ TYPE" ** : wrong receptacle\n**CRITICAL STEP**: 3'
    ref = parse_reflection(text, TAXONOMY)
    assert (ref.dominant_type, ref.critical_step) == ("wrong_receptacle", 3)
    assert ref.detail == ""  # "DETAIL" without a colon is no key


# ------------------------------------------------------------ retriever (Figure 9) -----

SELECTION_INPUTS = {
    "bracket_double_spaces": _repeat("1  ", "[", "x"),  # was 41 s at 86 characters
    "bracket_mixed_separators": _repeat("1 , 2 ; 3 and 4  ", "[", "x"),
    "bracket_valid_long_list": _repeat("1, ", "[", "2]"),
    "open_brackets": _repeat("["),
    "index_then_spaces": _repeat(" ", "INDEX", "x"),
    "index_slash_spaces": _repeat(" ", "INDEX /", "x"),
    "block_then_spaces": _repeat(" ", "<selected_tasks><", "x"),
    "long_digits": _repeat("9"),
    "digits_and_letters": _repeat("1a"),
    "random_fragments": _random_mix(
        (
            "[",
            "]",
            "1",
            "23",
            " ",
            "  ",
            ",",
            ";",
            "and",
            "INDEX",
            "/",
            "TASK",
            ":",
            "<selected_tasks>",
            "</selected_tasks>",
            "\n",
            "x",
        ),
        1,
    ),
}


@pytest.mark.parametrize("name", SELECTION_INPUTS)
def test_parse_selection_is_linear(name):
    limit = _limit(AIWConfig().retrieval_max_new_tokens)
    assert_linear(lambda t: parse_selection(t, 20, limit=3), SELECTION_INPUTS[name], limit)


def test_numbers_beyond_int_limits_are_out_of_range_not_errors():
    huge = "9" * 5000  # int() refuses more than 4,300 digits
    assert parse_small_int(huge) is None and parse_small_int("0" * 5000 + "12") == 12
    assert parse_selection(huge, 3) is None
    assert parse_selection(f"[{huge}, 2]", 3) == [1]
    assert parse_selection(f"INDEX: {huge}\nINDEX: 3", 3) == [2]
    assert parse_selection("[1  2   3]", 3) == [0, 1, 2]
    ref = parse_reflection(f"DOMINANT_TYPE: wrong_receptacle\nCRITICAL_STEP: {huge}", TAXONOMY)
    assert ref.critical_step is None  # and no SQLite integer overflow downstream
    assert parse_reflection("CRITICAL_STEP: 12345678901", TAXONOMY) is None  # no type at all


# ------------------------------------------------------------- actor and predictor -----

ACTION_INPUTS = {
    "open_tags": _repeat("<action>"),  # quadratic before: each tag rescanned the rest
    "open_close_pairs": _repeat("<action>x</action>"),
    "close_tags": _repeat("</action>"),
    "spaces": _repeat(" ", "<action>", "x"),
    "random_fragments": _random_mix(("<action>", "</action>", "<think>", "x", " ", "\n", "<"), 2),
}


@pytest.mark.parametrize("name", ACTION_INPUTS)
@pytest.mark.parametrize("action_format", ["think_action", "action", "raw"])
def test_parse_action_is_linear(name, action_format):
    limit = _limit(TrainConfig().rollout.max_new_tokens)
    assert_linear(lambda t: parse_action(t, action_format), ACTION_INPUTS[name], limit)


def test_action_blocks_equal_the_lazy_regex():
    import re

    lazy = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
    make = _random_mix(("<action>", "</action>", "<ACTION>", "</Action>", "a", " ", "\n"), 3)
    for n in range(0, 400, 7):
        text = make(n)
        assert action_blocks(text) == lazy.findall(text)


PREDICTION_INPUTS = {
    "open_tags": _repeat("<state1>"),
    "next_tags": _repeat("<state2><state3>"),
    "random_fragments": _random_mix(("<state1>", "</state1>", "<state2>", "</state3>", "x", " "), 4),
}


@pytest.mark.parametrize("name", PREDICTION_INPUTS)
def test_parse_predictions_is_linear(name):
    limit = _limit(TrainConfig().wia.max_new_tokens)
    assert_linear(lambda t: parse_predictions(t, 3), PREDICTION_INPUTS[name], limit)


# --------------------------------------------------- ALFWorld diagnosis of actions -----

COMMAND_INPUTS = {
    "take_from": _repeat("a from ", "take "),
    "put_in": _repeat("a in ", "put "),
    "heat_with_newline": _repeat("a with ", "heat ", "\n"),
    "trailing_digits": _repeat("1", "go to ", " x"),
}


@pytest.mark.parametrize("name", COMMAND_INPUTS)
def test_alfworld_command_parsing_is_linear(name):
    limit = _limit(TrainConfig().rollout.max_new_tokens)

    def parse(text: str) -> None:
        parsed = parse_command(text)
        if parsed:
            entity_type(parsed[1]), entity_type(parsed[2])

    assert_linear(parse, COMMAND_INPUTS[name], limit)


def test_entity_type_is_linear_on_digit_runs():
    assert_linear(entity_type, _repeat("1", "", " x"), 4096)  # quadratic before
    assert entity_type("Apple 12") == "apple" and entity_type("desk") == "desk"
