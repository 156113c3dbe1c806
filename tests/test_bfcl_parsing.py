"""Parsing model output into tool calls: linear time on hostile input, strict JSON."""

from __future__ import annotations

import time

import pytest

from roleagent.envs.bfcl.parsing import parse_turn, tool_call_blocks


def _best_time(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize(
    "unit",
    [
        "<tool_call>",  # a run of unclosed tags: the lazy regex was quadratic
        "<tool_call>{}",  # unclosed tags with bodies
        "<tool_call></tool_call",  # near-miss closing tags
        "```\n",  # fence markers (python format)
    ],
)
@pytest.mark.parametrize("call_format", ["qwen", "python"])
def test_parsing_is_linear_on_adversarial_output(unit, call_format):
    """Scaling ratio, not absolute time (robust on a loaded machine): 4x the input must
    cost well under 16x (quadratic); the old regex gave ~11-16x, linear code gives ~4x."""

    def run(n_chars: int):
        text = unit * (n_chars // len(unit))
        return lambda: parse_turn(text, call_format, max_chars=10**6, max_calls=10**6)

    small, large = _best_time(run(16_384)), _best_time(run(65_536))
    assert large < 1.0, large  # 64 KB parses in well under a second
    assert large / max(small, 1e-4) < 8, (small, large)


def test_blocks_are_found_in_order_and_unclosed_tags_are_ignored():
    text = 'a<tool_call>{"x": 1}</tool_call> b <tool_call>2</tool_call><tool_call>{"y"'
    assert tool_call_blocks(text) == ['{"x": 1}', "2"]
    assert not parse_turn('<tool_call>{"name": "ls"').has_calls  # bfcl sees no block


@pytest.mark.parametrize(
    "body,message",
    [
        ('{"name": "cd", "name": "rm", "arguments": {}}', "duplicate key 'name'"),
        ('{"name": "cd", "arguments": {"folder": "a", "folder": "b"}}', "duplicate key 'folder'"),
        ('{"name": "add", "arguments": {"a": NaN, "b": 1}}', "NaN is not allowed"),
        ('{"name": "add", "arguments": {"a": Infinity}}', "Infinity is not allowed"),
        ('{"name": "add", "arguments": "{\\"a\\": -Infinity}"}', "'arguments' is a string that is not"),
    ],
)
def test_duplicate_keys_and_non_finite_constants_are_invalid(body, message):
    turn = parse_turn(f"<tool_call>\n{body}\n</tool_call>")
    assert turn.has_calls and len(turn.calls) == 1
    call = turn.calls[0]
    assert call.error is not None and message in call.error, call.error
    ok = parse_turn('<tool_call>\n{"name": "add", "arguments": {"a": 1.5, "b": -2}}\n</tool_call>')
    assert ok.calls[0].error is None and ok.calls[0].arguments == {"a": 1.5, "b": -2}


def test_strict_json_call_is_an_invalid_action_in_the_env():
    pytest.importorskip("bfcl_eval")
    from roleagent.envs.bfcl import data
    from roleagent.envs.bfcl.env import BFCLEnv
    from roleagent.types import Task

    env = BFCLEnv()
    entry_id = "multi_turn_base_1"
    env.reset(Task(id=data.task_id("eval", entry_id), env="bfcl", payload={"entry_id": entry_id}, split="eval"), seed=0)
    before = env.episode.model.snapshot()
    r = env.step('<tool_call>\n{"name": "cd", "arguments": {"folder": "workspace", "folder": "x"}}\n</tool_call>')
    assert r.info["action_valid"] is False and "duplicate key 'folder'" in r.info["decode_error"]
    assert r.info["calls"][0]["status"] == "parse_error"
    assert env.episode.model.snapshot() == before  # nothing ran
