"""What crosses the environment boundary: sanitized, bounded, and a raising step is the
action's failure, never a crashed episode (only a dead or hung worker is a crash)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from roleagent.envs import EnvSpec, base
from roleagent.envs.safety import DeadlineExceeded, cpu_deadline, deadline_supported, sanitize, sanitize_text, truncate
from roleagent.envs.scripted import ScriptedEnv
from roleagent.envs.workers import EnvPool
from roleagent.rollout import RolloutSettings, run_episodes


class FaultyEnv(ScriptedEnv):
    """ScriptedEnv with actions that raise, spin, die, hang, lose their simulator, or echo
    undecodable text."""

    name = "faulty"
    step_cpu_seconds = 0.5
    max_observation_chars = 1000

    def step(self, action: str):
        action = action.strip()
        if action == "raise":
            raise RuntimeError("the action broke the environment")
        if action == "spin":
            while True:
                pass
        if action == "swallow":  # spins, and catches Exception like a careless backend
            while True:
                try:
                    sum(range(10_000))
                except Exception:  # noqa: BLE001, S112
                    continue
        if action == "die":
            os._exit(3)
        if action == "hang":
            time.sleep(60)
        if action == "lost":  # the simulator behind the environment died
            raise base.EnvironmentCrashed("the simulator exited")
        if action == "echo":
            result = super().step("look")
            result.observation = "no such file: \ud800 \ud83d\ude00"
            result.info["detail"] = {"name\udfff": ["\ud800"]}
            return result
        if action == "flood":
            result = super().step("look")
            result.observation = "x" * 5000 + "END"
            return result
        return super().step(action)


@pytest.fixture
def faulty(monkeypatch):
    monkeypatch.setitem(
        base._REGISTRY,
        "faulty",
        EnvSpec("faulty", "tests.test_env_boundary:FaultyEnv", (), "dev", "test env with faults"),
    )
    return "faulty"


def _pool(name, processes):
    return EnvPool(name, slots=1, processes=processes, timeout=10)


def test_sanitize_and_truncate_by_hand():
    assert sanitize_text("a\ud800b") == "a\ufffdb"
    assert sanitize_text("\ud83d\ude00") == "\U0001f600"  # a well-formed pair is joined
    assert sanitize_text("plain ü") == "plain ü"
    out = sanitize({"k\udfff": ["\ud800", 3, ("x\ud800",)]})
    assert out == {"k\ufffd": ["\ufffd", 3, ("x\ufffd",)]}
    assert truncate("abcdefghij", 4) == "abc\n[... 6 characters truncated ...]\nj"
    assert truncate("abc", 4) == "abc"


def test_cpu_deadline_interrupts_python_code_and_nests():
    if not deadline_supported():
        pytest.skip("needs the main thread and setitimer")
    started = time.process_time()
    with pytest.raises(DeadlineExceeded):
        with cpu_deadline(5.0):
            with cpu_deadline(0.2):
                while True:
                    pass
    assert time.process_time() - started < 2.0
    with cpu_deadline(0.2):  # the inner one left: the outer one still fires
        with cpu_deadline(10.0):
            pass
        with pytest.raises(DeadlineExceeded):
            while True:
                pass


def test_a_block_can_tell_its_own_deadline_from_an_enclosing_one():
    # A tool call's handler must not swallow the step's deadline as its own timeout.
    if not deadline_supported():
        pytest.skip("needs the main thread and setitimer")
    seen = []
    with pytest.raises(DeadlineExceeded):
        with cpu_deadline(0.2) as step:
            try:
                with cpu_deadline(10.0) as call:
                    while True:
                        pass
            except DeadlineExceeded:
                seen.append((call.expired, step.expired))
                raise
    assert seen == [(False, True)]
    with cpu_deadline(10.0) as step:
        with pytest.raises(DeadlineExceeded):
            with cpu_deadline(0.2) as call:
                while True:
                    pass
    assert call.expired and not step.expired


def test_cpu_deadline_is_not_enforced_off_the_main_thread():
    seen = []

    def work():
        seen.append(deadline_supported())
        with cpu_deadline(0.01):
            sum(range(200_000))
        seen.append("finished")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [False, "finished"]


@pytest.mark.parametrize("processes", [False, True])
def test_raising_and_spinning_steps_are_failures_not_crashes(faulty, processes):
    with _pool(faulty, processes) as pool:
        task = pool.meta.tasks("train")[0]
        for action in ("raise", "spin", "swallow"):
            pool.reset([(0, task, 0)])
            reply = pool.step([(0, action)])[0]
            assert not reply.crashed, (action, reply.info)
            assert reply.done and reply.info["success"] is False
            assert reply.observation.startswith("Error: the environment could not process")
            expected = "RuntimeError" if action == "raise" else "DeadlineExceeded"
            assert expected in reply.info["step_error"], reply.info
        assert pool.restarts == 0


def test_dead_or_hung_worker_is_a_crash(faulty):
    with EnvPool(faulty, slots=1, processes=True, timeout=60) as pool:
        task = pool.meta.tasks("train")[0]
        for action in ("die", "hang"):
            pool.reset([(0, task, 0)])  # a (re)started worker may take a while to import
            pool._slots[0].timeout = 3 if action == "hang" else 60
            assert pool.step([(0, action)])[0].crashed, action
        assert pool.restarts == 2


@pytest.mark.parametrize("processes", [False, True])
def test_a_lost_simulator_is_a_crash_and_the_environment_is_rebuilt(faulty, processes, scripted_engine):
    engine = scripted_engine(lambda prompt, call: "lost</action>" if call == 1 else "look</action>")
    with EnvPool(faulty, slots=1, processes=processes, timeout=60) as pool:
        task = pool.meta.tasks("train")[0]
        first = pool._slots[0].process.pid if processes else id(pool._slots[0].env)
        (trajectory,), _ = run_episodes(
            engine=engine, pool=pool, jobs=[(task, 0)], settings=RolloutSettings(max_steps=4, action_format="action")
        )
        assert trajectory.crashed and len(trajectory.steps) == 2  # not trained on, not a failure
        assert pool.restarts == 1
        assert (pool._slots[0].process.pid if processes else id(pool._slots[0].env)) != first
        pool.reset([(0, task, 0)])  # the rebuilt environment plays on
        reply = pool.step([(0, "look")])[0]
        assert not reply.crashed and not reply.done


@pytest.mark.parametrize("processes", [False, True])
def test_replies_are_sanitized_and_capped(faulty, processes):
    with _pool(faulty, processes) as pool:
        pool.reset([(0, pool.meta.tasks("train")[0], 0)])
        reply = pool.step([(0, "echo")])[0]
        assert reply.observation == "no such file: \ufffd \U0001f600"
        assert reply.info["detail"] == {"name\ufffd": ["\ufffd"]}
        reply.observation.encode("utf-8")
        reply = pool.step([(0, "flood")])[0]
        assert len(reply.observation) < 1100 and reply.observation.endswith("END")
        assert "[... 4003 characters truncated ...]" in reply.observation


def test_a_raising_step_stays_in_the_batch_as_a_failure(faulty, scripted_engine):
    engine = scripted_engine(lambda prompt, call: "raise</action>" if call == 1 else "look</action>")
    with _pool(faulty, False) as pool:
        task = pool.meta.tasks("train")[0]
        (trajectory,), _ = run_episodes(
            engine=engine, pool=pool, jobs=[(task, 0)], settings=RolloutSettings(max_steps=4, action_format="action")
        )
    assert not trajectory.crashed and not trajectory.success
    assert len(trajectory.steps) == 2 and trajectory.steps[-1].done
    assert "RuntimeError" in trajectory.steps[-1].info["step_error"]
