"""Rule diagnosis of failed search episodes (Role-Agent's Table 6, search column), on
episodes played in the real environment with scripted actions."""

from __future__ import annotations

import pytest

from roleagent.envs.search.diagnosis import FAILURE_TAXONOMY, diagnose_trajectory, is_partial
from roleagent.types import Step, Task, Trajectory

TCP = Task(id="t/tcp", env="search", payload={"question": "In computing, what does the abbreviation TCP stand for?"},
           metadata={"answers": ["Transmission Control Protocol"], "hops": 1})  # fmt: skip
NEXT = Task(id="t/as", env="search",
            payload={"question": "What is the chemical symbol of the element whose atomic number is one greater than that of arsenic?"},
            metadata={"answers": ["Se"], "hops": 2})  # fmt: skip


@pytest.fixture(scope="module")
def env():
    pytest.importorskip("bm25s")
    from roleagent.envs.search import SearchEnv

    return SearchEnv(max_steps=4)


def play(env, task: Task, actions: list[str | None]) -> Trajectory:
    """What the rollout records: s_t before each action, the env's info after it; None is
    an output the actor could not parse (the env is not stepped)."""
    observation, info = env.reset(task)
    trajectory = Trajectory(task=task, instruction=info["instruction"])
    for action in actions:
        if action is None:
            trajectory.steps.append(Step(observation, observation, "??", None, False, info={"invalid": True}))
            continue
        result = env.step(action)
        trajectory.steps.append(Step(observation, observation, action, action, True, reward=result.reward,
                                     done=result.done, info=result.info))  # fmt: skip
        observation = result.observation
        trajectory.success = trajectory.success or bool(result.info.get("success"))
    trajectory.final_observation = observation
    return trajectory


def test_taxonomy_is_table6_search_column():
    assert FAILURE_TAXONOMY == (
        "wrong_answer", "insufficient_retrieval", "irrelevant_retrieval_query", "repeated_retrieval_query",
        "information_misinterpretation", "partial_answer", "hallucinated_answer", "premature_answer",
        "action_format_error",
    )  # fmt: skip


def test_success_has_no_diagnosis(env):
    assert (
        diagnose_trajectory(play(env, TCP, ["<search>TCP</search>", "<answer>transmission control protocol</answer>"]))
        is None
    )


def test_premature_answer_without_search(env):
    d = diagnose_trajectory(play(env, NEXT, ["<answer>As</answer>"]))
    assert d["dominant_type"] == "premature_answer" and d["critical_step"] == 0
    # "As" occurs in no passage (none was retrieved): unsupported too, but answering early comes first
    assert {"premature_answer", "hallucinated_answer", "insufficient_retrieval", "wrong_answer"} <= set(d["labels"])


def test_partial_answer(env):
    d = diagnose_trajectory(
        play(env, TCP, ["<search>TCP abbreviation</search>", "<answer>Transmission Control</answer>"])
    )
    assert d["dominant_type"] == "partial_answer" and d["critical_step"] == 1


def test_information_misinterpretation(env):
    d = diagnose_trajectory(play(env, TCP, ["<search>TCP abbreviation</search>", "<answer>Internet Protocol</answer>"]))
    assert d["dominant_type"] == "information_misinterpretation"
    assert "hallucinated_answer" not in d["labels"]  # "Internet Protocol" is in the passage


def test_repeated_query(env):
    d = diagnose_trajectory(
        play(env, NEXT, ["<search>arsenic</search>", "<search>Arsenic!</search>", "<answer>Ge</answer>"])
    )
    assert d["dominant_type"] == "repeated_retrieval_query" and d["critical_step"] == 1


def test_irrelevant_query_and_hallucination(env):
    d = diagnose_trajectory(
        play(env, TCP, ["<search>chocolate cake recipe</search>", "<answer>Tiny Cat Protocol</answer>"])
    )
    assert d["dominant_type"] == "irrelevant_retrieval_query" and d["critical_step"] == 0
    assert {"hallucinated_answer", "insufficient_retrieval", "wrong_answer"} <= set(d["labels"])


def test_format_errors_dominate_at_a_quarter(env):
    d = diagnose_trajectory(play(env, TCP, [None, "no tags here", "<search>TCP</search>", "<answer>UDP</answer>"]))
    assert d["dominant_type"] == "action_format_error" and d["critical_step"] == 0


def test_no_answer_after_gold_was_retrieved(env):
    d = diagnose_trajectory(play(env, TCP, ["<search>TCP abbreviation</search>", "<search>TCP protocol</search>"]))
    assert d["dominant_type"] == "information_misinterpretation" and "wrong_answer" not in d["labels"]


def test_is_partial_hand_cases():
    assert is_partial("Transmission Control", ["Transmission Control Protocol"])
    assert is_partial("the Transmission Control Protocol suite", ["Transmission Control Protocol"])
    assert not is_partial("UDP", ["TCP"]) and not is_partial("", ["TCP"])
    assert not is_partial("transmission control protocol", ["Transmission Control Protocol"])  # exact
