"""A pool's cold start: workers forked from one server that imported the environment's
modules once (``env.start_method: forkserver``), with the parent's environment variables of
the moment and the same crash handling as spawned workers; and a task several slots reset
prepared by one of them first (``Environment.prepare_task``)."""

from __future__ import annotations

import os
from multiprocessing import forkserver

import pytest

from roleagent.config import load_config
from roleagent.envs import EnvSpec, base
from roleagent.envs.scripted import ScriptedEnv
from roleagent.envs.workers import EnvPool, make_pool
from roleagent.fields import ConfigError

IMPORTED_IN = os.getpid()  # in a forkserver's worker: the server's pid, not the worker's


class EnvironEnv(ScriptedEnv):
    """ScriptedEnv whose ``getenv NAME`` answers the variable and whether this module was
    imported in the answering process; ``die`` kills the worker."""

    name = "environ"

    def prepare_task(self, task):
        with open(os.path.join(os.environ["ROLEAGENT_PROBE_DIR"], f"{task.id.replace('/', '_')}.{os.getpid()}"), "w"):
            pass

    def step(self, action: str):
        if action == "die":
            os._exit(3)
        if action.startswith("getenv "):
            result = super().step("look")
            here = IMPORTED_IN == os.getpid()
            result.observation = f"{os.environ.get(action.split()[1], '-')} imported_here={here}"
            return result
        return super().step(action)


@pytest.fixture
def environ_env(monkeypatch):
    """The test env, registered, with a forkserver of its own: the process's forkserver reads
    its preload list when it starts, and an earlier test's pool may have started it."""
    spec = EnvSpec("environ", "tests.test_env_pool_start:EnvironEnv", (), "dev", "test env reading its variables")
    monkeypatch.setitem(base._REGISTRY, "environ", spec)
    forkserver._forkserver._stop()
    yield "environ"
    forkserver._forkserver._stop()


def _ask(pool: EnvPool, action: str) -> str:
    pool.reset([(0, pool.meta.tasks("train")[0], 0)])
    return pool.step([(0, action)])[0].observation


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_workers_see_the_parents_variables_of_the_moment(environ_env, start_method, monkeypatch):
    monkeypatch.setenv("ROLEAGENT_PROBE", "first")
    with EnvPool(environ_env, slots=1, timeout=60, start_method=start_method) as pool:
        first = _ask(pool, "getenv ROLEAGENT_PROBE")
    monkeypatch.setenv("ROLEAGENT_PROBE", "second")  # after the forkserver started
    with EnvPool(environ_env, slots=1, timeout=60, start_method=start_method) as pool:
        second = _ask(pool, "getenv ROLEAGENT_PROBE")
    imported_here = start_method == "spawn"  # a spawned worker imports the module itself
    assert first == f"first imported_here={imported_here}"
    assert second == f"second imported_here={imported_here}"


def test_a_dead_forked_worker_is_a_crash_and_restarted(environ_env):
    with EnvPool(environ_env, slots=1, timeout=60, start_method="forkserver") as pool:
        pid = pool._slots[0].process.pid
        pool.reset([(0, pool.meta.tasks("train")[0], 0)])
        assert pool.step([(0, "die")])[0].crashed
        assert pool.restarts == 1 and pool._slots[0].process.pid != pid
        assert _ask(pool, "getenv HOME").endswith("imported_here=False")


def test_the_setting_reaches_the_pool_and_is_checked(environ_env):
    cfg = load_config("grpo_alfworld", ["env.name=environ", "env.kwargs={}", "env.start_method=forkserver"])
    with make_pool(cfg.env, slots=1) as pool:
        assert pool._slots[0].context.get_start_method() == "forkserver"
    with pytest.raises(ConfigError, match="start_method"):
        load_config("grpo_alfworld", ["env.start_method=fork"])
    with pytest.raises(ValueError, match="start_method"):
        EnvPool(environ_env, slots=1, start_method="fork")


@pytest.mark.parametrize("processes", [False, True])
def test_a_task_several_slots_reset_is_prepared_once(environ_env, processes, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLEAGENT_PROBE_DIR", str(tmp_path))
    with EnvPool(environ_env, slots=4, processes=processes, timeout=60) as pool:
        a, b, c, d = pool.meta.tasks("train")[:4]
        pool.reset([(0, a, 0), (1, a, 1), (2, b, 0), (3, b, 1)])  # two groups of two
        prepared = sorted(path.name.split(".")[0] for path in tmp_path.iterdir())
        assert prepared == sorted(task.id.replace("/", "_") for task in (a, b))
        pool.reset([(0, a, 0), (1, b, 0), (2, c, 0), (3, d, 0)])  # no task shared: nothing to prepare first
        assert len(list(tmp_path.iterdir())) == 2
