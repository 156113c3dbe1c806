"""Environment slots as Ray actors, on a local Ray instance: the EnvPool interface,
crash restart, call_all, selection by config."""

from __future__ import annotations

import os
import sys

import pytest

from roleagent.config import ConfigError, load_config
from roleagent.envs import EnvSpec, register_env
from roleagent.envs.scripted import ScriptedEnv
from roleagent.envs.workers import EnvPool, make_pool


class NoteEnv(ScriptedEnv):
    """ScriptedEnv with a note trainer hooks can set on every slot (``call_all``)."""

    name = "ray_note"
    remote_methods = ("set_note", "note")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._note = ""

    def set_note(self, text: str) -> str:
        self._note = text
        return text

    def note(self) -> str:
        return f"{self._note}@{os.getpid()}"


register_env(EnvSpec("ray_note", "tests.test_ray_pool:NoteEnv", (), "dev", "test env with a settable note"))


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024**2, log_to_driver=False)
    yield ray
    ray.shutdown()


def _play(pool, actions):
    tasks = pool.meta.tasks("train")
    out = [pool.reset([(0, tasks[1], 7), (1, tasks[2], 7)])]
    for action in actions:
        out.append(pool.step([(0, action), (1, action)]))
    return out


@pytest.mark.slow
def test_ray_pool_plays_as_the_process_pool_and_restarts_a_crashed_actor(ray_local):
    from roleagent.envs.ray_pool import RayEnvPool

    actions = ["look", "go forward", "take key"]
    with EnvPool("crashing", slots=2, processes=False) as local:
        expected = _play(local, actions)
    # a generous timeout: a new actor starts slowly on a loaded machine, and a timeout counts as a crash
    with RayEnvPool("crashing", slots=2, timeout=300) as pool:
        assert _play(pool, actions) == expected
        before = pool.pids()
        assert os.getpid() not in before
        replies = pool.step([(0, "crash"), (1, "look")])
        assert replies[0].crashed and replies[0].info["crashed"] and replies[0].done
        assert not replies[1].crashed and replies[1].observation
        assert pool.restarts == 1
        after = pool.pids()
        assert after[0] != before[0] and after[1] == before[1]  # only the dead actor was replaced
        assert _play(pool, actions) == expected  # the new actor plays on
        before = pool.pids()
        replies = pool.step([(0, "look"), (1, "lost")])  # EnvironmentCrashed: a crash too
        assert replies[1].crashed and "the simulator exited" in replies[1].info["error"]
        assert not replies[0].crashed and pool.restarts == 2
        after = pool.pids()
        assert after[0] == before[0] and after[1] != before[1]
        assert _play(pool, actions) == expected


@pytest.mark.slow
def test_ray_pool_call_all_and_config_selection(ray_local, tmp_path):
    cfg = load_config(None, ["env.name=ray_note", "env.backend=ray", "rollout.tasks_per_iter=1", f"run_dir={tmp_path}"])
    with make_pool(cfg.env, slots=2) as pool:
        assert type(pool).__name__ == "RayEnvPool" and pool.size == 2
        assert pool.call_all("set_note", "v2") == ["v2", "v2", "v2"]
        notes = pool.call_all("note")
        assert notes[0] == f"v2@{os.getpid()}"  # the local instance, then each actor
        assert all(n.startswith("v2@") for n in notes[1:]) and len(set(notes[1:])) == 2
        with pytest.raises(RuntimeError, match="not in remote_methods"):
            pool.call_all("close")


def test_backend_is_checked_and_ray_missing_is_a_clear_error(monkeypatch):
    with pytest.raises(ConfigError, match="env.backend"):
        load_config(None, ["env.backend=slurm"])
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    from roleagent.envs.ray_pool import RayEnvPool

    with pytest.raises(ImportError, match=r"roleagent\[ray\]"):
        RayEnvPool("scripted", slots=1)
