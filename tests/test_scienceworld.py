"""ScienceWorld: the JVM-free catalog and reward bookkeeping (fast), and the real
simulator (slow: one JVM per test module, plus worker processes for the pool tests)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from roleagent.envs.base import env_spec
from roleagent.envs.scienceworld import tasks as T
from roleagent.envs.scienceworld.env import ScienceWorldEnv

# sha256 of the ids of the first 60 test tasks (two variations per task type) and of the
# whole test split: a change of ids or order shows up here.
PANEL60_HASH = "a3f3caa1026bdbd8aad6cd12a1974a28594a553ca26ccd88972e85bd33cecb4c"
TEST_SPLIT_HASH = "4cb26ba72fa449b29063853fc04cd96096196658455f4be3e46f5f4b3ff7f1e1"


# ------------------------------------------------------------- catalog (no JVM) -----


def test_catalog_has_30_task_types_and_the_simulators_split_sizes():
    env = ScienceWorldEnv()
    assert len(T.TASK_NAMES) == 30 and env.splits() == ("train", "dev", "test")
    sizes = {split: len(env.tasks(split)) for split in env.splits()}
    assert sizes == {"train": 3592, "dev": 1796, "test": 1819}
    assert list(T.variations("boil", "test")) == list(range(21, 30))
    assert list(T.variations("identify-life-stages-2", "dev")) == [4, 5]
    ids = [t.id for split in env.splits() for t in env.tasks(split)]
    assert len(ids) == len(set(ids)) == 7207  # disjoint splits, every variation once
    assert [t.id for t in env.tasks("eval")] == [t.id for t in env.tasks("test")]
    assert env._sim is None  # listing tasks started no JVM


def test_split_order_is_round_robin_over_task_types():
    tasks = ScienceWorldEnv().tasks("test")
    first, second = tasks[:30], tasks[30:60]
    assert [t.payload["task_name"] for t in first] == list(T.TASK_NAMES)
    assert [t.payload["variation"] for t in first[:2]] == [21, 21]  # boil, melt: first test variation
    assert [t.payload["variation"] for t in second[:2]] == [22, 22]
    assert first[0].id == "scienceworld/boil/21"
    assert first[0].metadata == {"task_type": "Matter", "task_name": "boil", "task_num": "1-1"}
    assert {t.metadata["task_type"] for t in tasks} == set(T.TOPIC_ORDER)


def test_panel_hash_is_pinned():
    env = ScienceWorldEnv()
    assert env.panel_hash("test", 60) == PANEL60_HASH
    assert env.panel_hash("test") == TEST_SPLIT_HASH


def test_agentgym_task_set_leaves_out_seven_task_types():
    tasks = ScienceWorldEnv(task_set="agentgym").tasks("test")
    names = {t.payload["task_name"] for t in tasks}
    assert len(names) == 23 and "grow-plant" not in names and "mendelian-genetics-known-plant" not in names


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="unknown simplification"):
        ScienceWorldEnv(simplification="easy,teleport")
    with pytest.raises(ValueError, match="task_set"):
        ScienceWorldEnv(task_set="some")
    with pytest.raises(KeyError, match="ScienceWorld splits"):
        ScienceWorldEnv().tasks("valid")
    assert ScienceWorldEnv(simplification="teleportAction,openDoors").simplification == "teleportAction,openDoors"


def test_registered_with_its_extra():
    spec = env_spec("scienceworld")
    assert spec.requires == ("scienceworld",) and spec.extra == "scienceworld"


class FakeSimulator:
    """Stands in for the package's simulator: replays a fixed list of scores."""

    def __init__(self, scores, completed_at=None):
        self.scores, self.completed_at, self.moves = list(scores), completed_at, 0

    def step(self, action):
        score = self.scores[self.moves]
        self.moves += 1
        info = {"score": score, "valid": ["look around", "wait"], "look": "room", "inv": "inventory"}
        return f"obs {self.moves}", None, self.moves == self.completed_at or score < 0, info


def _fake_env(scores, completed_at=None, **kwargs) -> ScienceWorldEnv:
    env = ScienceWorldEnv(**kwargs)
    env._sim = FakeSimulator(scores, completed_at)
    env._task = env.tasks("test")[0]
    env._gold = ["a", "b", "c"]
    env.close = lambda: None
    return env


def test_reward_is_the_score_delta_and_sums_to_the_final_score():
    # scores 25, 25, 60, 100 -> rewards 0.25, 0, 0.35, 0.40; sum 1.0 = 100 / 100.
    env = _fake_env([25, 25, 60, 100], completed_at=4)
    results = [env.step(a) for a in ("a", "b", "c", "d")]
    assert [r.reward for r in results] == pytest.approx([0.25, 0.0, 0.35, 0.40])
    assert [r.done for r in results] == [False, False, False, True]
    assert results[-1].info == {"success": True, "score": 100}


def test_a_failed_task_ends_the_episode_with_its_progress_taken_back():
    # scores 25, 50, -100 (failed) -> rewards 0.25, 0.25, -0.5: the sum is 0, success False.
    env = _fake_env([25, 50, -100])
    results = [env.step(a) for a in ("a", "b", "c")]
    assert [r.reward for r in results] == pytest.approx([0.25, 0.25, -0.5])
    assert results[-1].done and results[-1].info == {"success": False, "score": -100}


def test_expert_follows_the_gold_path_until_the_agent_deviates():
    env = _fake_env([0, 0, 0])
    assert env.expert_action() == "a"
    env.step("a")
    assert env.expert_action() == "b"
    env.step("x")
    assert env.expert_action() is None


def test_admissible_actions_are_capped_by_the_limit():
    env = _fake_env([0, 0], admissible_limit=2)
    env.step("a")
    assert env.admissible_actions() == ["look around", "wait"]
    env.admissible_limit = 1
    assert env.admissible_actions() is None
    env.admissible_limit = 0
    assert env.admissible_actions() is None


# -------------------------------------------------------- the real simulator -----


@pytest.fixture(scope="module")
def sim_env():
    pytest.importorskip("scienceworld")
    env = ScienceWorldEnv()
    yield env
    env.close()


def _task(env, name, split="test"):
    return next(t for t in env.tasks(split) if t.payload["task_name"] == name)


def _play_expert(env, task):
    observation, info = env.reset(task, seed=0)
    results = []
    while (action := env.expert_action()) is not None:
        results.append(env.step(action))
        if results[-1].done:
            break
    return info, results


@pytest.mark.slow
def test_gold_path_succeeds_and_rewards_sum_to_the_final_score(sim_env):
    info, results = _play_expert(sim_env, _task(sim_env, "find-living-thing"))
    assert "Your task is to find a(n) living thing" in info["instruction"]
    assert "focus on OBJ" in info["instruction"]  # the action templates
    assert results[-1].done and results[-1].info == {"success": True, "score": 100}
    assert sum(r.reward for r in results) == pytest.approx(1.0)
    assert 0 < sum(r.reward > 0 for r in results) < len(results)  # partial credit on the way


@pytest.mark.slow
def test_invalid_and_fatal_actions(sim_env):
    observation, _ = sim_env.reset(_task(sim_env, "find-living-thing"), seed=0)
    assert observation.startswith("This room is called")
    assert len(sim_env.admissible_actions()) > 100 and "look around" in sim_env.admissible_actions()
    result = sim_env.step("fly to the moon")
    assert result.observation == "No known action matches that input."
    assert (result.reward, result.done, result.info["success"]) == (0.0, False, False)
    assert sim_env.expert_action() is None  # off the gold path
    result = sim_env.step("focus on air")  # air is not a living thing: the task is failed
    assert result.done and result.info == {"success": False, "score": -100} and result.reward == 0.0


@pytest.mark.slow
def test_expert_mid_episode_regenerates_the_gold_path_and_replays(sim_env):
    task = _task(sim_env, "find-non-living-thing")
    sim_env.reset(task, seed=0)
    gold = [sim_env.expert_action()]
    sim_env.step(gold[0])
    gold.append(sim_env.expert_action())
    sim_env.reset(task, seed=0)  # a fresh episode: no gold path generated yet
    sim_env.step(gold[0])
    assert sim_env._gold is None
    assert sim_env.expert_action() == gold[1]
    assert sim_env.step(gold[1]).observation  # the replay left the simulator in step


@pytest.mark.slow
def test_catalog_matches_the_simulator(sim_env):
    sim = sim_env.simulator
    assert sorted(sim.get_task_names()) == sorted(T.TASK_NAMES)
    for name in T.TASK_NAMES:
        sim.load(name, 0, "")
        assert sim.get_max_variations(name) == T.VARIATION_RANGES[name][2], name
        for split, listed in (("train", sim.get_variations_train), ("dev", sim.get_variations_dev)):
            assert list(listed()) == list(T.variations(name, split)), (name, split)
        assert list(sim.get_variations_test()) == list(T.variations(name, "test")), name


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "zombie" not in fh.read()
    except OSError:
        return False


@pytest.mark.slow
def test_close_stops_the_jvm():
    pytest.importorskip("scienceworld")
    env = ScienceWorldEnv()
    env.reset(env.tasks("test")[0], seed=0)
    pid = env.simulator._gateway.java_process.pid
    assert _alive(pid) and 0 < env.jvm_rss_mb() < 1500
    env.close()
    assert not _alive(pid) and env.jvm_rss_mb() == 0.0
    env.close()  # twice is fine


@pytest.mark.slow
def test_a_dead_jvm_is_a_crash_and_the_next_reset_starts_a_new_one():
    pytest.importorskip("scienceworld")
    from roleagent.envs.base import EnvironmentCrashed

    env = ScienceWorldEnv()
    task = env.tasks("test")[0]
    env.reset(task, seed=0)
    pid = env.jvm_pid()
    os.kill(pid, signal.SIGKILL)  # without waiting: py4j may see the broken socket first
    with pytest.raises(EnvironmentCrashed, match=f"JVM \\(pid {pid}\\) exited"):
        env.step("look around")
    observation, _ = env.reset(task, seed=0)
    assert observation.startswith("This room is called") and env.jvm_pid() not in (0, pid)
    env.close()


@pytest.mark.slow
def test_a_jvm_killed_mid_episode_crashes_the_episode_in_the_pool(scripted_engine):
    pytest.importorskip("scienceworld")
    from roleagent.envs.workers import EnvPool
    from roleagent.rollout import RolloutSettings, run_episodes

    with EnvPool("scienceworld", slots=1, timeout=120) as pool:
        task = pool.meta.tasks("test")[0]
        killed = []

        def policy(prompt, call):
            if call == 1:  # the second action: the JVM dies while the episode is on
                (pid,) = pool.call_all("jvm_pid")[1:]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return "look around</action>"

        (trajectory,), _ = run_episodes(
            engine=scripted_engine(policy),
            pool=pool,
            jobs=[(task, 0)],
            settings=RolloutSettings(max_steps=5, action_format="action"),
        )
        assert trajectory.crashed and len(trajectory.steps) == 2, trajectory.steps[-1].info
        assert "JVM" in trajectory.steps[-1].info["error"] and pool.restarts == 1
        pool.reset([(0, task, 0)])  # the restarted worker starts a new JVM
        (pid,) = pool.call_all("jvm_pid")[1:]
        assert pid not in (0, killed[0]) and not pool.step([(0, "look around")])[0].crashed


@pytest.mark.slow
def test_a_killed_worker_takes_its_jvm_with_it():
    pytest.importorskip("scienceworld")
    from roleagent.envs.workers import EnvPool

    with EnvPool("scienceworld", slots=1, timeout=120) as pool:
        task = pool.meta.tasks("test")[0]
        pool.reset([(0, task, 0)])
        (pid,) = pool.call_all("jvm_pid")[1:]
        assert _alive(pid)
        pool._slots[0].process.kill()
        deadline = time.time() + 15
        while _alive(pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(pid), "the JVM outlived its killed worker"
        pool.reset([(0, task, 0)])  # the restarted worker starts a new JVM
        (pid,) = pool.call_all("jvm_pid")[1:]
    deadline = time.time() + 15
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(pid), "the JVM outlived EnvPool.close"


@pytest.mark.slow
def test_expert_eval_through_the_cli_scores_100(capsys):
    pytest.importorskip("scienceworld")
    from roleagent.cli import main

    # the first 2 test tasks: boil/21 and melt/21 (75 and 54 gold steps).
    args = ["eval", "--env", "scienceworld", "--policy", "expert", "--split", "test", "--max-tasks", "2"]
    assert main(args + ["--workers", "2"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("expert test"))
    assert row.split()[2:] == ["100.0", "100.0"]  # Matter, All
