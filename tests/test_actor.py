"""Actor prompts and action parsing: unparsable output is an invalid action, never a crash."""

import pytest

from roleagent.methods.role_agent.wia import parse_predictions, predictor_messages
from roleagent.rollout.actor import actor_messages, parse_action


@pytest.mark.parametrize(
    "text,fmt,expected",
    [
        ("<think>hmm</think><action>go to desk 1</action>", "think_action", "go to desk 1"),
        ("<think>x</think><action>  take  apple 1 </action>", "think_action", "take apple 1"),
        ("<action>a</action><action>b</action>", "think_action", None),  # ambiguous
        ("I will go to the desk", "think_action", None),
        ("<action></action>", "think_action", None),
        ("take key</action>", "action", "take key"),
        ("\nget 1 oak logs.\ncraft more", "action", "get 1 oak logs"),
        ("   ", "action", None),
        ('<tool_call>{"name": "ls"}</tool_call>', "raw", '<tool_call>{"name": "ls"}</tool_call>'),
        ("\x00\x01<<<>>>", "think_action", None),
    ],
)
def test_parse_action(text, fmt, expected):
    parsed = parse_action(text, fmt)
    assert parsed.action == expected
    assert parsed.valid == (expected is not None)


def test_unknown_format_is_an_error():
    with pytest.raises(ValueError):
        parse_action("x", "xml")


def test_prompt_has_bounded_history_and_admissible_actions():
    history = [(f"go to shelf {i}", f"You arrive at shelf {i}.") for i in range(10)]
    messages = actor_messages(
        instruction="Your task is to: find a key.",
        observation="You see a key.",
        history=history,
        admissible=["take key", "look"],
        action_format="action",
        max_history=2,
    )
    text = messages[-1]["content"]
    assert "Your task is to: find a key." in text
    assert "9. go to shelf 8" in text and "10. go to shelf 9" in text and "shelf 7" not in text
    assert "Admissible actions: take key, look" in text
    assert messages[0]["role"] == "system"


def test_long_observation_is_clipped():
    text = actor_messages(
        instruction="t",
        observation="x" * 5000,
        history=[],
        admissible=None,
        action_format="think_action",
        max_observation_chars=100,
    )[-1]["content"]
    assert "x" * 97 + "..." in text and "x" * 101 not in text


def test_predictions_parse_and_prompt():
    assert parse_predictions("a</state1><state2>b</state2>", 2) == ["a", "b"]
    assert parse_predictions("only one", 3) == ["only one", "", ""]
    assert parse_predictions("a<state2>b", 2) == ["a", "b"]
    content = predictor_messages(instruction="goal", observation="obs", action="go", horizon=2)[-1]["content"]
    assert "<state1>...</state1><state2>...</state2>" in content and "Action taken: go" in content


def test_projection_onto_admissible_actions():
    from roleagent.rollout.actor import ParsedAction, project_action

    admissible = ["go to sofa 1", "go to shelf 1", "look"]
    projected = project_action(ParsedAction("I'm going to the sofa 1", True), admissible)
    assert projected.action == "go to sofa 1" and projected.projected_from == "I'm going to the sofa 1"
    exact = ParsedAction("look", True)
    assert project_action(exact, admissible) is exact
    invalid = ParsedAction(None, False)
    assert project_action(invalid, admissible) is invalid
    assert project_action(ParsedAction("get 1 log", True), None).action == "get 1 log"
