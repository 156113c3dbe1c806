"""SEAL's diagnosis replays run on the env workers, bounded by the worker timeout: a
replay that hangs costs one timeout, the trajectory gets weight 1 with its diagnosis
marked unavailable, and the run goes on."""

from __future__ import annotations

import signal
import time
from types import SimpleNamespace

import numpy as np

from roleagent.envs import EnvSpec, register_env
from roleagent.envs.scripted import ScriptedEnv
from roleagent.types import Step, Task, Trajectory

# The worker processes import this module for HangingDiagnosisEnv: the trainer modules
# (torch) are imported inside the tests only, so a worker starts quickly.


class HangingDiagnosisEnv(ScriptedEnv):
    """Scripted env whose replay diagnosis hangs on tasks named ``.../hang`` and labels
    every other trajectory ``spurious_tool_call`` (utility 2.0)."""

    name = "hanging_diagnosis"
    diagnosis_turn_labels = True

    def diagnose(self, trajectory):
        if trajectory.task.id.endswith("/hang"):
            time.sleep(3600)
        return {
            "turn_labels": ["spurious_tool_call"],
            "priority_labels": ["invalid_tool_call"],
            "dominant_type": "invalid_tool_call",
            "seen_steps": len(trajectory.steps),
        }


register_env(
    EnvSpec(
        "hanging_diagnosis",
        "tests.test_seal_replay_timeout:HangingDiagnosisEnv",
        (),
        "dev",
        "test env whose diagnosis replay hangs",
    )
)


def _traj(task_id, reward):
    step = Step(
        observation="o",
        state_key="o",
        prompt_ids=[1] * 50,
        action_ids=[2],
        action_logprobs=[0.0],
        action_text="go right",
        action="go right",
        valid=True,
        reward=reward,
    )
    return Trajectory(task=Task(task_id, "hanging_diagnosis", split="train"), steps=[step])


def _hook(pool):
    from roleagent.config import SEALConfig
    from roleagent.methods.seal.method import SealMethod

    return SealMethod(
        SimpleNamespace(pool=pool),
        SEALConfig(enabled=True, utility_ema=False, interface_evolution=False, interface_updates=False),
    )


def test_hanging_replay_is_bounded_by_the_worker_timeout_and_the_run_continues():
    from roleagent.envs.workers import EnvPool
    from roleagent.trainer.advantages import StepBatch

    timeout = 8.0
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("replay not bounded")))
    signal.alarm(120)  # an unbounded replay fails the test instead of hanging it
    try:
        _run_hanging_replay(EnvPool, StepBatch, timeout)
    finally:
        signal.alarm(0)


def _run_hanging_replay(EnvPool, StepBatch, timeout):
    with EnvPool("hanging_diagnosis", {}, slots=2, processes=True, timeout=timeout) as pool:
        task = pool.meta.tasks("train")[0]
        pool.reset([(0, task, 0), (1, task, 0)])  # workers are up (spawn + imports done)
        restarts = pool.restarts
        trajectories = [_traj("t/hang", 0.0), _traj("t/ok", 1.0), _traj("t/ok2", 0.0)]
        batch = StepBatch.from_trajectories(trajectories)
        hook = _hook(pool)
        t0 = time.perf_counter()
        out = hook.adjust_advantages(batch, np.array([1.0, -1.0, 0.5]))
        elapsed = time.perf_counter() - t0
        assert elapsed < timeout + 20  # one timeout (+ restart), not an hour
        np.testing.assert_allclose(out, [1.0, -2.0, 1.0])  # hung: w = 1; replayed: w = 2
        assert trajectories[0].diagnosis["unavailable"].startswith("crashed: TimeoutError")
        assert trajectories[1].diagnosis["seen_steps"] == 1  # replayed in a worker
        metrics = hook.after_iteration(trajectories, iteration=0)
        assert metrics["diagnosis_unavailable"] == 1 / 3 and metrics["diagnosed"] == 2 / 3
        assert pool.restarts == restarts + 1  # only the hung worker was replaced
        # not replayed again, and the restarted worker plays the next episode
        t0 = time.perf_counter()
        assert hook.diagnosis(trajectories[0]) is None and time.perf_counter() - t0 < 1
        assert pool.reset([(0, task, 0)])[0].observation.startswith("You are in room 0")


def test_in_process_replay_that_raises_marks_the_diagnosis_unavailable():
    from roleagent.config import SEALConfig
    from roleagent.methods.seal.method import SealMethod
    from roleagent.trainer.advantages import StepBatch

    def diagnose(trajectory):
        raise RecursionError("replay blew up")

    hook = SealMethod(
        None,
        SEALConfig(enabled=True, utility_ema=False, interface_evolution=False, interface_updates=False),
        diagnose=diagnose,
    )
    trajectories = [_traj("t/a", 0.0), _traj("t/b", 1.0)]
    batch = StepBatch.from_trajectories(trajectories)
    np.testing.assert_allclose(hook.adjust_advantages(batch, np.array([-1.0, 1.0])), [-1.0, 1.0])
    assert trajectories[0].diagnosis == {"unavailable": "error: RecursionError: replay blew up"}
