"""The search-QA environment in process (BM25 over the shipped corpus): splits, the task
contract (tasks made at run time), episodes in both action forms, limits, hostile input,
the Figure 7 prompt and the conversation the rollout builds from it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("bm25s")

from roleagent.envs import make_env  # noqa: E402
from roleagent.envs.search import SearchEnv, prompt  # noqa: E402
from roleagent.envs.search.text import INVALID_MESSAGE, normalize_answer  # noqa: E402
from roleagent.types import Task  # noqa: E402


@pytest.fixture(scope="module")
def env():
    return SearchEnv()


def test_registered_under_search(env):
    assert type(make_env("search")) is SearchEnv
    assert env.splits() == ("train", "dev", "test")
    assert env.max_steps == 4  # Role-Agent: 4 turns on search QA


def test_splits_are_disjoint_by_question_and_entity(env):
    splits = {s: env.tasks(s) for s in env.splits()}
    assert len(splits["test"]) > 500 and len(splits["train"]) > 1500 and len(splits["dev"]) > 200
    ids = [t.id for ts in splits.values() for t in ts]
    assert len(ids) == len(set(ids))
    questions = {s: {t.payload["question"] for t in ts} for s, ts in splits.items()}
    assert not questions["train"] & questions["test"] and not questions["train"] & questions["dev"]

    # the entity asked about (an element, an abbreviation, a WordNet lemma) never crosses splits
    def entity(task):
        q = task.payload["question"]
        for marker in ("abbreviation ", "In WordNet, a ", "that of ", "symbol of ", "number of ", "symbol "):
            if marker in q:
                return q.split(marker, 1)[1].split(" is a kind")[0].rstrip("?")
        return q

    assert not {entity(t) for t in splits["train"]} & {entity(t) for t in splits["test"]}
    hops = {t.metadata["hops"] for t in splits["test"]}
    assert hops == {1, 2}
    with pytest.raises(ValueError, match="search splits"):
        env.tasks("eval")


def test_shipped_answers_occur_in_their_last_supporting_passage(env):
    from roleagent.envs.search.retriever import load_corpus

    docs = {d["id"]: normalize_answer(d["contents"]) for d in load_corpus()}
    for task in env.tasks("test"):
        last = f" {docs[task.metadata['support'][-1]]} "
        assert all(f" {normalize_answer(a)} " in last for a in task.metadata["answers"]), task.id
        assert len(task.metadata["support"]) == task.metadata["hops"]


def test_single_hop_episode_over_bm25(env):
    task = next(t for t in env.tasks("test") if t.metadata["question_type"] == "element_symbol")
    obs, info = env.reset(task)
    assert task.payload["question"] in info["instruction"]
    assert info["instruction"].startswith("You are an expert assistant whose task is to answer the given question")
    assert info["messages"] == [{"role": "user", "content": "Question: " + task.payload["question"]}]
    element = task.payload["question"].removeprefix("What is the chemical symbol of ").rstrip("?")
    step = env.step(f"<think>look it up</think><search>{element} symbol atomic number</search>")
    assert step.observation.startswith("<information>Doc 1(Title: ") and not step.done
    assert step.info["gold_retrieved"] and step.info["query"] == f"{element} symbol atomic number"
    assert step.info["messages"] == [{"role": "tool", "content": step.observation}]
    end = env.step(f"<answer>{task.metadata['answers'][0]}</answer>")
    assert end.done and end.reward == 1.0 and end.info["success"] and end.info["em"] == 1.0


def test_asl_retrieve_tool_call_searches(env):
    """ASL's policy calls its tool ``retrieve`` (Sun et al., 2025, Figures 7-8): the same
    search as ``search``, not the invalid-action message."""
    task = next(t for t in env.tasks("test") if t.metadata["question_type"] == "element_symbol")
    env.reset(task)
    element = task.payload["question"].removeprefix("What is the chemical symbol of ").rstrip("?")
    call = {"name": "retrieve", "arguments": {"query": f"{element} symbol atomic number"}}
    step = env.step(f"<tool_call>\n{json.dumps(call, indent=2)}\n</tool_call>")  # the paper's layout
    assert step.info["kind"] == "search" and step.info["form"] == "tool_call" and step.info["action_valid"]
    assert step.observation.startswith("<information>") and step.info["gold_retrieved"]
    assert step.info["searches"] == 1 and not step.done
    bad = env.step('<tool_call>{"name": ["retrieve"], "arguments": {"query": "x"}}</tool_call>')
    assert bad.observation == INVALID_MESSAGE and not bad.info["action_valid"]


def test_search_results_are_what_a_search_step_returns(env):
    """``search_results`` (ASL's GRM evidence) gives, outside any episode, the observation a
    search step gives for the same query: same passages, cuts and query normalisation."""
    task = next(t for t in env.tasks("test") if t.metadata["question_type"] == "element_symbol")
    question = task.payload["question"]
    env.reset(task)
    step = env.step(f"<search>  {question}  </search>")
    assert env.search_results([question, "  " + question + "\n"]) == [step.observation] * 2
    assert env.search_results([]) == []
    long = SearchEnv(max_query_chars=12)
    assert long.search_results(["hydrogen " * 50]) == long.search_results(["hydrogen hyd"])


def test_multi_hop_episode_with_tool_calls(env):
    """Two hops: arsenic's atomic number (33), then the element numbered 34 (selenium, Se)."""
    task = next(
        t
        for t in env.tasks("train") + env.tasks("test") + env.tasks("dev")
        if "than that of arsenic" in t.payload["question"] and t.metadata["question_type"] == "next_element_symbol"
    )
    env.reset(task)
    first = env.step('<tool_call>{"name": "search", "arguments": {"query": "arsenic atomic number"}}</tool_call>')
    assert "Atomic number: 33" in first.observation and first.info["form"] == "tool_call"
    second = env.step('<tool_call>{"name": "search", "arguments": {"query": "element atomic number 34"}}</tool_call>')
    assert "Selenium" in second.observation
    assert env.step("<answer>Se</answer>").reward == 1.0


def test_run_time_task_from_the_contract(env):
    """ASL makes tasks at run time: any Task with payload["question"] and metadata["answers"]."""
    task = Task(id="asl/gen/0", env="search", payload={"question": "Which element has symbol Ne?"},
                metadata={"answers": ["neon"], "hops": 1})  # fmt: skip
    env.reset(task)
    assert env.step("<answer>The Neon</answer>").reward == 1.0
    env.reset(Task(id="asl/gen/1", env="search", metadata={"question": "q?", "answers": "x"}))
    assert env.step("<answer>x</answer>").reward == 1.0
    for bad in (
        Task(id="no-question", env="search", metadata={"answers": ["a"]}),
        Task(id="no-answers", env="search", payload={"question": "q?"}),
        Task(id="empty-answer", env="search", payload={"question": "q?"}, metadata={"answers": [""]}),
        Task(id="huge", env="search", payload={"question": "q" * 10000}, metadata={"answers": ["a"]}),
    ):
        with pytest.raises(ValueError, match=bad.id.split("-")[0]):
            env.reset(bad)


def test_invalid_actions_limits_and_hostile_text():
    env = SearchEnv(max_steps=4, max_searches=1, max_query_chars=20)
    env.reset(Task(id="t", env="search", payload={"question": "What is TCP?"}, metadata={"answers": ["x"]}))
    bad = env.step("I think the answer is Paris")
    assert bad.observation == INVALID_MESSAGE and not bad.done and bad.info["action_valid"] is False
    long = env.step("<search>" + "transmission control protocol " * 1000 + "</search>")
    assert long.info["query_truncated"] and len(long.info["query"]) == 20
    limit = env.step("<search>again</search>")
    assert "search limit (1)" in limit.observation and not limit.done and limit.info["action_valid"] is False
    hostile = env.step("<search>\x00\u202e<answer>" + "<" * 5000)
    assert hostile.observation == INVALID_MESSAGE
    assert env.step("<answer>wrong</answer>").reward == 0.0
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("<answer>x</answer>")


def test_subem_reward_and_bad_kwargs():
    env = SearchEnv(reward="subem")
    env.reset(Task(id="t", env="search", payload={"question": "q?"}, metadata={"answers": ["iron"]}))
    result = env.step("<answer>it is iron</answer>")
    assert result.reward == 1.0 and result.info["em"] == 0.0
    for kwargs in ({"reward": "f1"}, {"protocol": "x"}, {"topk": 0}, {"retriever": "google"}, {"max_searches": -1}):
        with pytest.raises(ValueError):
            SearchEnv(**kwargs)


def test_window_protocol_reports_no_messages():
    env = SearchEnv(protocol="window")
    _, info = env.reset(Task(id="t", env="search", payload={"question": "q?"}, metadata={"answers": ["a"]}))
    assert "messages" not in info and "messages" not in env.step("<search>neon</search>").info


def test_figure7_template_fields():
    text = prompt.figure7("Who?", 2, "<search>a</search><information>b</information>")
    assert "Your question: Who?. So far, you have completed 2 step(s)." in text
    assert "History: <search>a</search><information>b</information> Now it is your turn" in text
    assert "provide your final answer enclosed within <answer> and </answer> tags" in text


def test_rollout_keeps_search_r1s_growing_context(scripted_engine):
    """Through the real rollout: the third prompt holds the question, both searches and
    both information blocks; the answer ends the episode with success."""
    from roleagent.envs.workers import EnvPool
    from roleagent.rollout import RolloutSettings, run_episodes

    replies = [
        "<search>arsenic atomic number</search>",
        "<search>element atomic number 34</search>",
        "<answer>Se</answer>",
    ]
    engine = scripted_engine(lambda prompt_text, call: replies[min(call, 2)])
    engine.tokenizer = lambda text, add_special_tokens=False: {"input_ids": text.split()}
    prompts: list = []
    encode = engine.encode_chat
    engine.encode_chat = lambda messages, **kw: (prompts.append(messages), encode(messages, **kw))[1]
    task = Task(id="t", env="search", payload={"question": "Symbol of the element after arsenic?"},
                metadata={"answers": ["Se"], "hops": 2})  # fmt: skip
    with EnvPool("search", {}, slots=1, processes=False) as pool:
        (trajectory,), _ = run_episodes(engine=engine, pool=pool, jobs=[(task, 0)],
                                     settings=RolloutSettings(max_steps=4, action_format="raw"))  # fmt: skip
    third = prompts[2]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert "Atomic number: 33" in third[3]["content"] and "Selenium" in third[5]["content"]
    assert trajectory.success and len(trajectory.steps) == 3


def test_expert_follows_the_gold_path(env):
    """Arsenic's neighbour: the question, then the bridge passage's title, then the answer."""
    task = next(
        t
        for s in env.splits()
        for t in env.tasks(s)
        if t.metadata["question_type"] == "next_element_symbol" and "of arsenic?" in t.payload["question"]
    )
    env.reset(task)
    actions = []
    while (action := env.expert_action()) is not None:
        actions.append(action)
        result = env.step(action)
    assert actions == [
        f"<search>{task.payload['question']}</search>",
        "<search>Selenium</search>",
        "<answer>Se</answer>",
    ]
    assert result.info["success"]


def test_expert_solves_the_dev_split_mostly_from_evidence(env):
    grounded = 0
    tasks = env.tasks("dev")
    for task in tasks:
        env.reset(task)
        for _ in range(env.max_steps):
            result = env.step(env.expert_action())
            if result.done:
                break
        assert result.done and result.info["success"], task.id
        grounded += env._gold_seen
    assert grounded / len(tasks) > 0.8  # the rest: "previous element" and missed abbreviations
