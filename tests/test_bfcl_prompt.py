"""The policy's prompt on BFCL: bfcl's chat protocol (every user turn, the model's own
calls as assistant messages, tool results as tool messages), trimmed oldest tool result
first to a token budget, never dropping the current request."""

from __future__ import annotations

import pytest

from roleagent.rollout.actor import TRIMMED_TOOL_RESULT, chat_messages
from tests.bfcl_helpers import bfcl_task


def _words(text: str) -> int:
    return len(text.split())


def _transcript() -> list[dict[str, str]]:
    return [
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "c"},
        {"role": "tool", "content": " ".join(["r"] * 10)},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "c"},
        {"role": "tool", "content": " ".join(["q"] * 9)},
    ]


def _trim(budget: int) -> list[tuple[str, str]]:
    out = chat_messages(
        instruction="s", transcript=_transcript(), count_tokens=_words, budget=budget, message_overhead=0
    )
    return [(m["role"], m["content"]) for m in out]


def test_trimming_worked_example_from_docstring():
    assert _words(TRIMMED_TOOL_RESULT) == 8
    full = [("system", "s")] + [(m["role"], m["content"]) for m in _transcript()]
    assert _trim(24) == full  # fits: untouched
    assert _trim(23) == full[:3] + [("tool", TRIMMED_TOOL_RESULT)] + full[4:]  # oldest first
    assert _trim(20) == [
        ("system", "s"),
        ("assistant", "c"),
        ("tool", TRIMMED_TOOL_RESULT),
        ("user", "u2"),
        ("assistant", "c"),
        ("tool", TRIMMED_TOOL_RESULT),
    ]
    assert _trim(5) == [("system", "s"), ("user", "u2")]  # never the current request
    assert _trim(0) == [("system", "s"), ("user", "u2")]


def test_trimming_never_mutates_the_transcript():
    transcript = _transcript()
    chat_messages(instruction="s", transcript=transcript, count_tokens=_words, budget=0, message_overhead=0)
    assert transcript == _transcript()


# ------------------------------------------------------- a real bfcl episode ----------

bfcl_eval = pytest.importorskip("bfcl_eval")

from roleagent.envs.bfcl import data  # noqa: E402
from roleagent.envs.bfcl.env import BFCLEnv  # noqa: E402


def _play(env: BFCLEnv, actions: list[str]) -> tuple[str, list[dict[str, str]]]:
    """What the rollout does: the reset messages, then per step the model's output as an
    assistant message followed by the step's messages."""
    _, info = env.reset(bfcl_task("multi_turn_base_1"), seed=0)
    transcript = list(info["messages"])
    for action in actions:
        r = env.step(action)
        transcript += [{"role": "assistant", "content": action}] + r.info["messages"]
    return info["instruction"], transcript


CALL = '<tool_call>\n{"name": "ls", "arguments": {"a": true}}\n</tool_call>'
FIND = '<tool_call>\n{"name": "find", "arguments": {"path": "."}}\n</tool_call>'


def test_request_stays_in_the_prompt_after_tool_calls():
    env = BFCLEnv()
    request = data.entry("multi_turn_base_1")["question"][0][0]["content"]
    instruction, transcript = _play(env, [CALL, CALL])
    messages = chat_messages(instruction=instruction, transcript=transcript, count_tokens=_words, budget=10**6)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert messages[0]["content"] == instruction and messages[1]["content"] == request
    assert messages[2]["content"] == CALL and "workspace" in messages[3]["content"]
    # the turn ends: the next request joins the conversation, the first one stays
    instruction, transcript = _play(env, [CALL, "It holds workspace.", CALL])
    messages = chat_messages(instruction=instruction, transcript=transcript, count_tokens=_words, budget=10**6)
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == [request, data.entry("multi_turn_base_1")["question"][1][0]["content"]]
    assert messages[-1]["role"] == "tool"


def test_tight_budget_drops_old_tool_results_first_and_keeps_the_request():
    env = BFCLEnv()
    instruction, transcript = _play(env, [FIND, "It holds workspace.", CALL, CALL])
    current = transcript[4]["content"]  # the second user turn
    assert transcript[4]["role"] == "user"
    full = chat_messages(instruction=instruction, transcript=transcript, count_tokens=len, budget=10**6)
    size = sum(len(m["content"]) + 8 for m in full)
    toollen = len(transcript[2]["content"])  # the oldest tool result
    saved = toollen - len(TRIMMED_TOOL_RESULT)
    assert saved > 0
    one = chat_messages(instruction=instruction, transcript=transcript, count_tokens=len, budget=size - saved)
    assert one[3] == {"role": "tool", "content": TRIMMED_TOOL_RESULT}  # oldest trimmed
    assert one[1:3] == full[1:3] and one[4:] == full[4:]  # nothing else touched
    tiny = chat_messages(instruction=instruction, transcript=transcript, count_tokens=len, budget=1)
    assert tiny == [full[0], {"role": "user", "content": current}]


def test_rollout_prompts_carry_the_conversation(scripted_engine):
    """The prompt the rollout sends after two tool calls still holds the user's request,
    the model's calls and the tool results (the old prompt kept only two clipped
    action/observation pairs)."""
    from roleagent.envs.workers import EnvPool
    from roleagent.rollout import RolloutSettings, run_episodes

    replies = [CALL, FIND, "The directory holds workspace."]
    engine = scripted_engine(lambda prompt, call: replies[min(call, 2)])
    engine.tokenizer = lambda text, add_special_tokens=False: {"input_ids": text.split()}
    engine.max_prompt_tokens = 10**6
    prompts: list[str] = []
    encode = engine.encode_chat
    engine.encode_chat = lambda messages, **kw: (prompts.append(messages), encode(messages, **kw))[1]
    request = data.entry("multi_turn_base_1")["question"][0][0]["content"]
    with EnvPool("bfcl", {}, slots=1, processes=False) as pool:
        run_episodes(
            engine=engine,
            pool=pool,
            jobs=[(bfcl_task("multi_turn_base_1"), 0)],
            settings=RolloutSettings(max_steps=4, action_format="raw"),
        )
    third = prompts[2]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert third[1]["content"] == request
    assert third[2]["content"] == CALL and third[4]["content"] == FIND
    assert "workspace" in third[3]["content"] and "matches" in third[5]["content"]
    fourth = prompts[3]  # the turn ended: the next request follows the whole first turn
    assert fourth[:6] == third and fourth[6]["role"] == "assistant" and fourth[7]["role"] == "user"
