"""A crashed evaluation episode (dead worker) is replayed, and never counted as a failure."""

from __future__ import annotations

import math

from roleagent.envs.workers import EnvPool, EnvReply
from roleagent.evaluation import crashed_count, replay_crashed, success_by_type
from roleagent.rollout import RolloutSettings, run_episodes
from roleagent.trainer import Trainer
from roleagent.types import Task, Trajectory
from tests.run_helpers import config, metrics
from tests.test_rollout import expert_reply


def _traj(i, success=False, crashed=False, task_type="a"):
    return Trajectory(task=Task(f"t{i}", "toy", metadata={"task_type": task_type}), success=success, crashed=crashed)


def test_success_rate_leaves_crashed_episodes_out():
    # 3 successes, 1 failure, 1 crash: 3/4 = 75 %, not 3/5 = 60 %.
    trajectories = [
        _traj(0, True),
        _traj(1, True),
        _traj(2, True),
        _traj(3),
        _traj(4, crashed=True),
        _traj(5, crashed=True, task_type="b"),
    ]
    table = success_by_type(trajectories)
    assert table["a"] == 75.0 and table["All"] == 75.0
    assert math.isnan(table["b"])  # every "b" episode crashed: no rate, not 0 %
    assert crashed_count(trajectories) == 2


def test_replay_crashed_is_bounded():
    # Job 1 crashes twice, then completes; job 0 never crashes.
    attempts = {0: 0, 1: 0}

    def play(jobs):
        out = []
        for task, _seed in jobs:
            i = int(task.id[1:])
            attempts[i] += 1
            out.append(_traj(i, success=True, crashed=i == 1 and attempts[i] <= 2))
        return out

    jobs = [(Task("t0", "toy"), 0), (Task("t1", "toy"), 0)]
    trajectories, replays = replay_crashed(play, jobs, retries=2)
    assert [t.crashed for t in trajectories] == [False, False] and replays == 2 and attempts == {0: 1, 1: 3}
    attempts.update({0: 0, 1: 0})
    trajectories, replays = replay_crashed(play, jobs, retries=1)
    assert [t.crashed for t in trajectories] == [False, True] and replays == 1


def test_dead_worker_during_evaluation_is_replayed(scripted_engine):
    """Real worker processes: the first move of every episode kills its worker; the replayed
    panel scores what a crash-free evaluation scores."""
    settings = RolloutSettings(max_steps=8, action_format="action")
    with EnvPool("crashing", slots=2, processes=True, timeout=30) as pool:
        jobs = [(t, 0) for t in pool.meta.tasks("eval")[:2]]
        clean = run_episodes(engine=scripted_engine(expert_reply), pool=pool, jobs=jobs, settings=settings)[0]
        engine = scripted_engine(lambda prompt, call: "crash</action>" if call == 0 else expert_reply(prompt, call))
        trajectories, replays = replay_crashed(
            lambda wave: run_episodes(engine=engine, pool=pool, jobs=wave, settings=settings)[0], jobs, 2
        )
        assert pool.restarts == 2
    assert replays == 2 and not any(t.crashed for t in trajectories)
    assert any(t.success for t in clean)
    assert [t.success for t in trajectories] == [t.success for t in clean]
    assert success_by_type(trajectories) == success_by_type(clean)


def test_trainer_evaluation_replays_and_reports_crashes(tmp_path):
    trainer = Trainer(config(tmp_path / "run", 0), quiet=True)
    real_step, calls = trainer.pool.step, []

    def flaky_step(actions):  # the first environment call finds its workers dead
        calls.append(len(actions))
        if len(calls) == 1:
            return [EnvReply("", None, 0.0, True, {"crashed": True}, None, crashed=True) for _ in actions]
        return real_step(actions)

    trainer.pool.step = flaky_step
    try:
        trainer.evaluate("replayed")  # 2 episodes crash once each (one wave), then complete
        trainer.cfg.eval.crash_retries = 0
        calls.clear()
        trainer.evaluate("kept")  # no replay: both crashed, reported apart
    finally:
        trainer.close()
    replayed, kept = metrics(tmp_path / "run")
    assert replayed["eval/replayed_episodes"] == 2 and replayed["eval/crashed_episodes"] == 0
    assert replayed["eval/crashed"] == 0.0
    assert kept["eval/replayed_episodes"] == 0 and kept["eval/crashed_episodes"] == 2
    assert kept["eval/success"] is None and kept["eval/success_All"] is None  # no finished episode: no rate
