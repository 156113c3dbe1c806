"""Model output is never evaluated: injection attempts run nothing and change nothing."""

from __future__ import annotations

import builtins
import json

import pytest

pytest.importorskip("bfcl_eval")

from roleagent.envs.bfcl import data  # noqa: E402
from roleagent.envs.bfcl.env import BFCLEnv  # noqa: E402
from roleagent.envs.bfcl.parsing import parse_turn  # noqa: E402
from roleagent.types import Task  # noqa: E402


def _task(entry_id: str) -> Task:
    split = "eval" if entry_id in data.split_ids("eval") else "train"
    return Task(id=data.task_id(split, entry_id), env="bfcl", payload={"entry_id": entry_id},
                split=split)


def _qwen(name, arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.fixture
def no_eval(monkeypatch):
    """Fail loudly if anything calls eval/exec or bfcl's eval-based executor."""
    import importlib

    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils  # noqa: F401
    for module, _ in data.BACKENDS.values():  # imports use exec: do them before patching
        importlib.import_module(module)
    calls = []

    def forbidden(*args, **kwargs):
        calls.append(args[:1])
        raise AssertionError(f"eval/exec called with {args[:1]!r}")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(multi_turn_utils, "execute_multi_turn_func_call", forbidden)
    return calls


def _attempts(sentinel) -> dict[str, list[str]]:
    cmd = f"touch {sentinel}"
    return {
        "qwen": [
            _qwen(f"__import__('os').system('{cmd}')", {}),
            _qwen("__import__", {"name": "os"}),
            _qwen("cd.__class__", {}),
            _qwen("cd.__globals__", {}),
            _qwen("__class__", {}),
            _qwen("__init__", {}),
            _qwen("_load_scenario", {"scenario": {}}),
            _qwen("eval", {"source": f"__import__('os').system('{cmd}')"}),
            _qwen("system", {"command": cmd}),
            _qwen("cd", {"folder": {"__class__": "x"}}),           # type check
            _qwen("cd", {"folder": "x", "__class__": 1}),           # unexpected argument
            _qwen("cd", {}),                                         # missing required
            "<tool_call>\n{\"name\": \"cd\", \"arguments\": {\"folder\": __import__('os')}}\n</tool_call>",
            "<tool_call>{not json at all</tool_call>",
            "<tool_call>\n" + json.dumps({"name": "cd", "arguments": json.dumps({"folder": "x"})})[:-3],
            _qwen("mkdir", {"dir_name": "d" * 20000}),              # oversized action
        ],
        "python": [
            f"[__import__('os').system('{cmd}')]",
            f"__import__('os').system('{cmd}')",
            f"[cd(folder=__import__('os').system('{cmd}'))]",
            "[cd.__class__()]",
            "[x.__class__.__bases__[0].__subclasses__()]",
            "[cd(folder=[c for c in ().__class__.__bases__[0].__subclasses__()])]",
            "[cd(**{'folder': 'x'})]",
            "[cd(*['x'])]",
            "[_load_scenario(scenario={})]",
            "[__init__()]",
            "[getattr(cd, '__globals__')]",
            "[cd(folder=lambda: 1)]",
            "[cd(folder=f'{1}')]",
            "[mkdir(dir_name='" + "d" * 20000 + "')]",
        ],
    }


@pytest.mark.parametrize("call_format", ["qwen", "python"])
def test_injection_attempts_run_nothing(tmp_path, no_eval, call_format):
    sentinel = tmp_path / "pwned"
    env = BFCLEnv(call_format=call_format, max_action_chars=10000, type_check=True)
    for attempt in _attempts(sentinel)[call_format]:
        env.reset(_task("multi_turn_base_1"), seed=0)
        before = env.episode.model.snapshot()
        r = env.step(attempt)
        assert not r.done, attempt
        calls = r.info["calls"]  # a (failed) call attempt, or plain text (an unclosed tag)
        assert calls or r.info["turn_ended"], attempt
        assert all(c["status"] in ("rejected", "parse_error") for c in calls), (attempt, calls)
        if r.info["turn_ended"]:  # bfcl could not decode the step (or saw no block)
            assert not calls or (r.info["action_valid"] is False and r.info["decode_error"]), attempt
        else:
            assert r.observation.startswith(("<tool_response>\nError", "Error")), (attempt, r.observation)
        assert env.episode.model.snapshot() == before, attempt
    assert not sentinel.exists()
    assert no_eval == []


def test_string_values_are_data_not_code(tmp_path, monkeypatch, no_eval):
    monkeypatch.chdir(tmp_path)
    sentinel = tmp_path / "pwned"
    env = BFCLEnv()
    env.reset(_task("multi_turn_base_1"), seed=0)
    payload = "__import__('os').system('touch pwned')"
    r = env.step(_qwen("mkdir", {"dir_name": payload}))
    assert r.info["calls"][0]["status"] == "ok"
    r = env.step(_qwen("ls", {}))
    assert payload in r.observation  # created as a plain directory name
    assert not sentinel.exists() and no_eval == []


def test_held_out_tool_runs_as_in_bfcl_without_eval(no_eval):
    """bfcl executes a held-out miss_func tool called before its turn (only its schema is
    hidden); we do too, through the same checks, never through eval."""
    env = BFCLEnv()
    env.reset(_task("multi_turn_miss_func_0"), seed=0)  # 'sort' held out until turn 3
    assert "sort" not in env.episode.available
    r = env.step(_qwen("sort", {"file_name": "final_report.pdf"}))
    assert r.info["calls"][0]["status"] in ("ok", "tool_error") and no_eval == []
    r = env.step(_qwen("tool_that_does_not_exist", {}))
    assert r.info["calls"][0]["error_kind"] == "unknown_tool"


def test_oversized_and_too_many_calls_limits():
    turn = parse_turn("x" * 101, max_chars=100)
    assert turn.has_calls and turn.error and not turn.calls
    many = "\n".join(_qwen("pwd", {}) for _ in range(5))
    turn = parse_turn(many, max_calls=4)
    assert turn.error and not turn.calls
    env = BFCLEnv(max_calls_per_step=4)
    env.reset(_task("multi_turn_base_1"), seed=0)
    before = env.episode.model.snapshot()
    r = env.step("\n".join(_qwen("mkdir", {"dir_name": f"d{i}"}) for i in range(5)))
    assert r.info["action_valid"] is False and "nothing was executed" in r.info["decode_error"]
    assert r.info["turn_ended"]  # treated as a step bfcl could not decode
    assert env.episode.model.snapshot() == before


def test_plain_text_with_code_is_just_text(no_eval):
    env = BFCLEnv()
    env.reset(_task("multi_turn_base_1"), seed=0)
    r = env.step("print(__import__('os').listdir('/'))  # not a tool call, just talk")
    assert r.info["turn_ended"] and r.info["calls"] == []
