"""Pure functions of the search-QA environment: Search-R1's answer normalisation and
matching, action parsing (tags and JSON tool calls), the information block."""

from __future__ import annotations

import time

import pytest

from roleagent.envs.search.text import (
    INVALID_MESSAGE,
    Action,
    exact_match,
    information,
    normalize_answer,
    parse_action,
    passages_text,
    substring_match,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("  The Transmission-Control  Protocol! ", "transmissioncontrol protocol"),
        ("An apple a day", "apple day"),
        ("THEORY of the atom", "theory of atom"),  # "the" inside a word stays
        ("", ""),
    ],
)
def test_normalize_answer_hand_computed(text, expected):
    assert normalize_answer(text) == expected


def test_exact_and_substring_match_hand_computed():
    assert exact_match("the Iron", ["iron", "Fe"]) == 1.0
    assert exact_match("iron ore", ["iron"]) == 0.0
    assert substring_match("iron ore", ["iron"]) == 1.0
    assert substring_match("ir", ["iron"]) == 0.0
    assert exact_match("Fe.", ["fe"]) == 1.0


def test_parse_action_follows_search_r1_first_complete_block():
    assert parse_action("<think>x</think><search> capital of France </search>") == Action(
        "search", "capital of France", "tag"
    )
    # the first complete block wins, whichever tag it is
    assert parse_action("<answer>Paris</answer><search>q</search>").kind == "answer"
    # an unclosed opening tag is skipped, a later complete block counts (re.search semantics)
    assert parse_action("<search>oops <answer>Paris</answer>") == Action("answer", "Paris", "tag")
    assert parse_action("<answer>Paris").kind == "invalid"
    assert parse_action("no tags at all").kind == "invalid"
    assert parse_action("</search>late<search>").kind == "invalid"


def test_parse_action_tool_call_form():
    call = '<tool_call>{"name": "search", "arguments": {"query": "iron"}}</tool_call>'
    assert parse_action(call) == Action("search", "iron", "tool_call")
    as_string = '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"neon\\"}"}</tool_call>'
    assert parse_action(as_string) == Action("search", "neon", "tool_call")
    answer = '<tool_call>{"name": "answer", "arguments": {"answer": "Fe"}}</tool_call>'
    assert parse_action(answer) == Action("answer", "Fe", "tool_call")
    for bad in (
        "<tool_call>not json</tool_call>",
        '<tool_call>{"name": "delete_everything", "arguments": {"query": "x"}}</tool_call>',
        '<tool_call>{"name": "search", "arguments": {"query": 3}}</tool_call>',
        "<tool_call>[1, 2]</tool_call>",
        "<tool_call>" + "[" * 100000 + "</tool_call>",
    ):
        assert parse_action(bad).kind == "invalid", bad


def test_hostile_text_parses_fast_and_never_raises():
    hostile = "<search>" * 200000 + "x"  # re.search with a backreference is quadratic here
    start = time.perf_counter()
    assert parse_action(hostile).kind == "invalid"
    assert parse_action("\x00\udcff<search>\u202e</search>").kind == "search"
    assert time.perf_counter() - start < 2.0


def test_information_block_is_search_r1s_doc_lines():
    hits = [
        {"document": {"id": "a", "contents": '"Iron"\nSymbol: Fe. Atomic number: 26.'}, "score": 3.0},
        {"document": {"id": "b", "contents": '"Neon"\n' + "n" * 50}, "score": 1.0},
    ]
    assert (
        passages_text(hits, 20) == 'Doc 1(Title: "Iron") Symbol: Fe. Atomi...\nDoc 2(Title: "Neon") ' + "n" * 17 + "..."
    )
    assert (
        information(hits[:1], 100) == '<information>Doc 1(Title: "Iron") Symbol: Fe. Atomic number: 26.</information>'
    )
    assert information([], 100) == "<information></information>"


def test_invalid_message_is_search_r1s():
    assert INVALID_MESSAGE.startswith("My previous action is invalid. If I want to search, I should put the query")
    assert INVALID_MESSAGE.endswith("between <answer> and </answer>. Let me try again.")
