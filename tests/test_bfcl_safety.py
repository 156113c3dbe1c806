"""Model output is never evaluated: injection attempts run nothing and change nothing."""

from __future__ import annotations

import builtins
import json
import time

import pytest

pytest.importorskip("bfcl_eval")

from roleagent.envs.bfcl import data  # noqa: E402
from roleagent.envs.bfcl.env import BFCLEnv  # noqa: E402
from roleagent.envs.bfcl.parsing import parse_turn  # noqa: E402
from tests.bfcl_helpers import bfcl_task, qwen_call


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
            qwen_call(f"__import__('os').system('{cmd}')", {}),
            qwen_call("__import__", {"name": "os"}),
            qwen_call("cd.__class__", {}),
            qwen_call("cd.__globals__", {}),
            qwen_call("__class__", {}),
            qwen_call("__init__", {}),
            qwen_call("_load_scenario", {"scenario": {}}),
            qwen_call("eval", {"source": f"__import__('os').system('{cmd}')"}),
            qwen_call("system", {"command": cmd}),
            qwen_call("cd", {"folder": {"__class__": "x"}}),  # type check
            qwen_call("cd", {"folder": "x", "__class__": 1}),  # unexpected argument
            qwen_call("cd", {}),  # missing required
            '<tool_call>\n{"name": "cd", "arguments": {"folder": __import__(\'os\')}}\n</tool_call>',
            "<tool_call>{not json at all</tool_call>",
            "<tool_call>\n" + json.dumps({"name": "cd", "arguments": json.dumps({"folder": "x"})})[:-3],
            qwen_call("mkdir", {"dir_name": "d" * 20000}),  # oversized action
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
        env.reset(bfcl_task("multi_turn_base_1"), seed=0)
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
    env.reset(bfcl_task("multi_turn_base_1"), seed=0)
    payload = "__import__('os').system('touch pwned')"
    r = env.step(qwen_call("mkdir", {"dir_name": payload}))
    assert r.info["calls"][0]["status"] == "ok"
    r = env.step(qwen_call("ls", {}))
    assert payload in r.observation  # created as a plain directory name
    assert not sentinel.exists() and no_eval == []


def test_held_out_tool_runs_as_in_bfcl_without_eval(no_eval):
    """bfcl executes a held-out miss_func tool called before its turn (only its schema is
    hidden); we do too, through the same checks, never through eval."""
    env = BFCLEnv()
    env.reset(bfcl_task("multi_turn_miss_func_0"), seed=0)  # 'sort' held out until turn 3
    assert "sort" not in env.episode.available
    r = env.step(qwen_call("sort", {"file_name": "final_report.pdf"}))
    assert r.info["calls"][0]["status"] in ("ok", "tool_error") and no_eval == []
    r = env.step(qwen_call("tool_that_does_not_exist", {}))
    assert r.info["calls"][0]["error_kind"] == "unknown_tool"


def test_oversized_and_too_many_calls_limits():
    turn = parse_turn("x" * 101, max_chars=100)
    assert turn.has_calls and turn.error and not turn.calls
    many = "\n".join(qwen_call("pwd", {}) for _ in range(5))
    turn = parse_turn(many, max_calls=4)
    assert turn.error and not turn.calls
    env = BFCLEnv(max_calls_per_step=4)
    env.reset(bfcl_task("multi_turn_base_1"), seed=0)
    before = env.episode.model.snapshot()
    r = env.step("\n".join(qwen_call("mkdir", {"dir_name": f"d{i}"}) for i in range(5)))
    assert r.info["action_valid"] is False and "nothing was executed" in r.info["decode_error"]
    assert r.info["turn_ended"]  # treated as a step bfcl could not decode
    assert env.episode.model.snapshot() == before


def test_plain_text_with_code_is_just_text(no_eval):
    env = BFCLEnv()
    env.reset(bfcl_task("multi_turn_base_1"), seed=0)
    r = env.step("print(__import__('os').listdir('/'))  # not a tool call, just talk")
    assert r.info["turn_ended"] and r.info["calls"] == []


# ------------------------------------------------ nothing a model writes kills a run ---


def _bfcl_pool():
    from roleagent.envs.workers import EnvPool  # noqa: PLC0415

    return EnvPool("bfcl", {"max_steps": 200, "max_steps_per_turn": 200}, slots=1, processes=False)


def _first_with(backend: str, category: str = "base") -> str:
    """The first entry of ``category`` whose backends include ``backend``."""
    ids = [i for s in ("train", "eval") for i in data.split_ids(s)]
    return next(
        i for i in ids if backend in data.entry(i)["involved_classes"] and data.entry(i)["category"] == category
    )


def test_undecodable_file_name_reaches_the_tokenizer_as_text(tiny_policy):
    """A JSON ``"\\ud800"`` file name comes back in bfcl's error messages (the call
    records' ``error``, ``arguments``, results); none of it may reach the tokenizer, the
    logs or the memory as a lone surrogate."""
    from roleagent.engine.hf import HFEngine  # noqa: PLC0415

    engine = HFEngine(tiny_policy)
    with _bfcl_pool() as pool:
        pool.reset([(0, bfcl_task("multi_turn_base_3"), 0)])
        for name, arguments in [
            ("cd", {"folder": "\\ud800"}),
            ("mkdir", {"dir_name": "\\ud800"}),
            ("mv", {"source": "\\ud800", "destination": "q"}),
        ]:
            arguments_json = json.dumps(arguments).replace("\\\\", "\\")
            action = f'<tool_call>\n{{"name": "{name}", "arguments": {arguments_json}}}\n</tool_call>'
            reply = pool.step([(0, action)])[0]
            assert not reply.crashed
            call = reply.info["calls"][0]
            assert "\ufffd" in json.dumps(call, ensure_ascii=False), call
            text = json.dumps(reply.info, ensure_ascii=False) + reply.observation
            text.encode("utf-8")
            shown = f"{reply.observation}\n{call['name']}({call['arguments']}): {call['error'] or call['result']}"
            assert engine.encode_chat([{"role": "user", "content": shown}])  # raised before


def test_result_formatting_error_is_an_exec_error_not_a_crash():
    with _bfcl_pool() as pool:
        pool.reset([(0, bfcl_task(_first_with("MathAPI")), 0)])
        reply = pool.step([(0, qwen_call("power", {"base": 10, "exponent": 5000}))])[0]
    assert not reply.crashed and not reply.done
    call = reply.info["calls"][0]
    assert call["status"] == "exec_error" and "4300 digits" in call["result"]
    assert "Error during execution" in reply.observation


def test_costly_arguments_are_refused_quickly_and_contexts_restored():
    import decimal  # noqa: PLC0415

    import mpmath  # noqa: PLC0415

    env = BFCLEnv(max_steps=200, max_steps_per_turn=200)
    env.reset(bfcl_task(_first_with("MathAPI")), seed=0)
    prec, dps = decimal.getcontext().prec, mpmath.mp.dps
    for name, arguments in [
        ("square_root", {"number": 2, "precision": 10**6}),
        ("logarithm", {"value": 2, "base": 3, "precision": 10**6}),
        ("power", {"base": 10, "exponent": 10**8}),
        ("round_number", {"number": 5, "decimal_places": -(10**8)}),
    ]:
        started = time.perf_counter()
        call = env.step(qwen_call(name, arguments)).info["calls"][0]
        assert time.perf_counter() - started < 1.0, name
        assert call["status"] == "exec_error" and call["error_kind"] == "resource_limit", call
    call = env.step(qwen_call("square_root", {"number": 2, "precision": 40})).info["calls"][0]
    assert call["status"] == "ok" and "1.41421356237309504880168872420969807857" in call["result"]
    env.step(qwen_call("logarithm", {"value": 2, "base": 3, "precision": 60}))
    assert (decimal.getcontext().prec, mpmath.mp.dps) == (prec, dps)


def test_tool_call_cpu_deadline(monkeypatch):
    from roleagent.envs.bfcl import executor  # noqa: PLC0415

    env = BFCLEnv()
    env.reset(bfcl_task("multi_turn_base_3"), seed=0)
    fs_class = type(env.episode.model.instances["GorillaFileSystem"])

    def spinning_pwd(self):  # a backend that loops and swallows every Exception
        self.spun = True
        while True:
            try:
                sum(range(1000))
            except Exception:  # noqa: BLE001, S112
                continue

    monkeypatch.setattr(fs_class, "pwd", spinning_pwd)
    monkeypatch.setattr(executor, "CALL_CPU_SECONDS", 0.3, raising=False)
    env.reset(bfcl_task("multi_turn_base_3"), seed=0)
    before = env.episode.model.snapshot()
    started = time.process_time()
    r = env.step(qwen_call("pwd", {}))
    assert time.process_time() - started < 3.0
    call = r.info["calls"][0]
    assert not r.done and call["status"] == "exec_error" and call["error_kind"] == "resource_limit"
    assert "CPU time" in call["result"]
    assert env.episode.model.snapshot() == before  # undone, ``spun`` included


def test_file_system_growth_and_observation_are_bounded():
    # each round nests two shared copies of ``a`` in a new ``a``: find's paths double
    round_ = "\n".join(
        [
            qwen_call("mkdir", {"dir_name": "t"}),
            qwen_call("cp", {"source": "a", "destination": "t"}),
            qwen_call("cd", {"folder": "t"}),
            qwen_call("cp", {"source": "a", "destination": "b"}),
            qwen_call("cd", {"folder": ".."}),
            qwen_call("rm", {"file_name": "a"}),
            qwen_call("mv", {"source": "t", "destination": "a"}),
            qwen_call("find", {"path": "."}),
        ]
    )
    with _bfcl_pool() as pool:
        pool.reset([(0, bfcl_task("multi_turn_base_3"), 0)])
        pool.step([(0, qwen_call("mkdir", {"dir_name": "a"}))])
        limit = getattr(pool.meta, "max_observation_chars", 131072)
        kinds = []
        for _ in range(14):
            reply = pool.step([(0, round_)])[0]
            assert not reply.crashed and len(reply.observation) <= limit + 100
            kinds += [c["error_kind"] for c in reply.info["calls"]]
        fs = pool._slots[0].env.episode.model.instances["GorillaFileSystem"]
        from roleagent.envs.bfcl.limits import MAX_STATE_ITEMS, state_size  # noqa: PLC0415

        assert state_size(fs, 10**7, 10**9)[0] <= 2 * MAX_STATE_ITEMS
    assert "resource_limit" in kinds
    assert "characters truncated ..." in reply.observation or len(reply.observation) < limit


def test_long_context_travel_state_does_not_leak_between_episodes():
    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.long_context import CREDIT_CARD_EXTENSION  # noqa: PLC0415

    entry_id = _first_with("TravelAPI", "long_context")
    card = next(iter(CREDIT_CARD_EXTENSION))
    original = CREDIT_CARD_EXTENSION[card]["balance"]
    env = BFCLEnv(max_steps=200, max_steps_per_turn=200)
    balances = []
    for _ in range(2):
        env.reset(bfcl_task(entry_id), seed=0)
        travel = env.episode.model.instances["TravelAPI"]
        balances.append(travel.credit_card_list[card]["balance"])
        travel.budget_limit = None
        token = json.loads(
            env.step(
                qwen_call(
                    "authenticate_travel",
                    {
                        "client_id": "c",
                        "client_secret": "s",
                        "refresh_token": "r",
                        "grant_type": "read_write",
                        "user_first_name": "A",
                        "user_last_name": "B",
                    },
                )
            ).info["calls"][0]["result"]
        )["access_token"]
        r = env.step(
            qwen_call(
                "book_flight",
                {
                    "access_token": token,
                    "card_id": card,
                    "travel_date": "2024-11-15",
                    "travel_from": "SFO",
                    "travel_to": "LAX",
                    "travel_class": "economy",
                    "travel_cost": 100.0,
                },
            )
        )
        assert r.info["calls"][0]["status"] == "ok", r.info["calls"][0]
    assert balances == [original, original]
    assert CREDIT_CARD_EXTENSION[card]["balance"] == original
