"""Environments and engines from outside the package: by ``module:Class`` and by entry
point, wherever a name is used (make_env, config validation, worker processes, training),
and the one "did you mean" message for names nothing provides."""

from __future__ import annotations

import collections
import json
import os
import os.path
import sys
import textwrap

import pytest

from roleagent import cli, plugins
from roleagent.config import ConfigError, load_config
from roleagent.engine import create_engine
from roleagent.envs import env_specs, make_env, missing_requirements
from roleagent.envs.base import env_spec, factory_of
from roleagent.envs.workers import EnvPool
from roleagent.plugins import PluginError, is_reference, load_object, resolve, unknown
from tests.run_helpers import run

TMPMOD = '''
    import dataclasses
    import os
    from pathlib import Path

    from roleagent.envs.base import Environment, StepResult
    from roleagent.types import Task


    class TinyEnv(Environment):
        """One room; an action with an even number of characters wins."""

        name = "tinyenv"
        max_steps = 3

        def __init__(self, n_tasks: int = 2, log_dir: str = ""):
            self.n_tasks = n_tasks
            if log_dir:  # which processes built an instance
                (Path(log_dir) / str(os.getpid())).touch()

        def tasks(self, split):
            return [Task(id=f"tiny/{split}/{i}", env=self.name, split=split,
                         metadata={"task_type": "tiny"}) for i in range(self.n_tasks)]

        def reset(self, task, seed):
            self._turn = 0
            return "A tiny room.", {"instruction": "Say a word with an even number of letters."}

        def step(self, action):
            self._turn += 1
            won = len(action.strip()) % 2 == 0
            return StepResult("You win." if won else "Nothing happens.", float(won),
                              won or self._turn >= self.max_steps, {"success": won})


    class NotAnEnv:
        pass


    class FakeEngine:
        def __init__(self, policy, **kwargs):
            self.policy, self.kwargs = policy, kwargs


    @dataclasses.dataclass
    class BeamSettings:
        beams: int = 2


    class BeamEngine(FakeEngine):
        config_class = BeamSettings
'''


@pytest.fixture(scope="module")
def tmpmod(tmp_path_factory):
    """``tmpmod`` (TinyEnv, NotAnEnv, FakeEngine) and a fake installed distribution
    ``tmpdist`` whose entry points name ``tinyenv`` and an unimportable ``brokenenv``, on
    ``sys.path`` (spawned workers inherit it) and ``PYTHONPATH``."""
    root = tmp_path_factory.mktemp("plugins")
    (root / "tmpmod.py").write_text(textwrap.dedent(TMPMOD))
    dist = root / "tmpdist-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tmpdist\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text(
        "[roleagent.envs]\ntinyenv = tmpmod:TinyEnv\nbrokenenv = tmpmod_absent:Nope\n"
        "[roleagent.engines]\nfake = tmpmod:FakeEngine\n"
    )
    old_path, old_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), old_env]))
    yield root
    sys.path[:] = old_path
    if old_env is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old_env
    sys.modules.pop("tmpmod", None)


def _cfg(*overrides):
    return load_config(None, ["model.name=tiny", *overrides])


# ------------------------------------------------------- (a) module:Class reference ----


def test_make_env_by_reference(tmpmod):
    env = make_env("tmpmod:TinyEnv", n_tasks=3)
    assert type(env).__name__ == "TinyEnv" and type(env).__module__ == "tmpmod"
    assert [t.id for t in env.tasks("eval")] == ["tiny/eval/0", "tiny/eval/1", "tiny/eval/2"]
    assert env.reset(env.tasks("train")[0], 0)[0] == "A tiny room."
    assert env.step("go").reward == 1.0 and env.step("abc").reward == 0.0
    assert factory_of("tmpmod:TinyEnv") == "tmpmod:TinyEnv"
    assert missing_requirements("tmpmod:TinyEnv") == []
    assert missing_requirements("tmpmod_absent:Nope") == ["tmpmod_absent"]


def test_config_accepts_a_reference_and_checks_its_kwargs(tmpmod):
    _cfg("env.name=tmpmod:TinyEnv", "env.kwargs={n_tasks: 3}")  # validated, no error
    with pytest.raises(ConfigError, match=r"env.kwargs.size: tmpmod:TinyEnv takes no argument 'size'"):
        _cfg("env.name=tmpmod:TinyEnv", "env.kwargs={size: 3}")
    with pytest.raises(ConfigError, match=r"env.name='tmpmod_absent:Env': cannot import 'tmpmod_absent'"):
        _cfg("env.name=tmpmod_absent:Env")
    with pytest.raises(ConfigError, match=r"module 'tmpmod' has no attribute 'Missing'"):
        _cfg("env.name=tmpmod:Missing")
    with pytest.raises(ConfigError, match=r"'tmpmod:NotAnEnv' is not a subclass of roleagent.envs.Environment"):
        _cfg("env.name=tmpmod:NotAnEnv")


def test_pool_workers_build_a_reference_env(tmpmod, tmp_path):
    with EnvPool("tmpmod:TinyEnv", {"log_dir": str(tmp_path)}, slots=2, processes=True, timeout=60) as pool:
        task = pool.meta.tasks("train")[0]
        assert [r.observation for r in pool.reset([(0, task, 0), (1, task, 0)])] == ["A tiny room."] * 2
        assert [(r.reward, r.done) for r in pool.step([(0, "go"), (1, "abc")])] == [(1.0, True), (0.0, False)]
    pids = {int(p.name) for p in tmp_path.iterdir()}
    assert os.getpid() in pids and len(pids) == 3  # the local meta instance and two workers


# ------------------------------------------------------ (b) a real tiny training run ----


@pytest.mark.parametrize("processes", [True, False])
def test_training_run_with_a_reference_env(tmpmod, tmp_path, processes):
    log = tmp_path / "built"
    log.mkdir()
    run(
        tmp_path / "run",
        1,
        [
            "env.name=tmpmod:TinyEnv",
            f"env.processes={str(processes).lower()}",
            f"env.kwargs={{log_dir: '{log}'}}",
            "eval.at_start=false",
        ],
    )
    rollouts = [json.loads(line) for line in (tmp_path / "run" / "rollouts" / "iter_000000.jsonl").open()]
    assert len(rollouts) == 4 and {r["task_id"] for r in rollouts} <= {"tiny/train/0", "tiny/train/1"}
    assert all(r["steps"][0]["observation"] == "A tiny room." for r in rollouts)
    record = next(json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open() if '"iteration"' in line)
    assert record["iteration"] == 0 and record["update/samples"] > 0
    workers = {int(p.name) for p in log.iterdir()} - {os.getpid()}
    assert bool(workers) == processes  # in worker processes exactly when asked


# ------------------------------------------------------------------ (c) entry points ----


def test_entry_point_env_by_short_name(tmpmod, capsys):
    assert factory_of("tinyenv") == "tmpmod:TinyEnv"
    assert type(make_env("tinyenv")).__name__ == "TinyEnv"
    assert env_spec("tinyenv").requires == ("tmpmod",)
    assert {"tinyenv", "brokenenv", "scripted"} <= set(env_specs())
    _cfg("env.name=tinyenv")
    with pytest.raises(ConfigError, match=r"env.name='brokenenv': cannot import 'tmpmod_absent'"):
        _cfg("env.name=brokenenv")
    with pytest.raises(PluginError, match="cannot import 'tmpmod_absent'"):
        make_env("brokenenv")
    assert cli.main(["envs"]) == 0
    listing = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "ready" in listing["tinyenv"] and "plug-in tmpmod:TinyEnv" in listing["tinyenv"]
    assert "cannot import tmpmod_absent" in listing["brokenenv"]
    assert "ready" in listing["scripted"]


def test_registered_names_win_over_entry_points(tmpmod):
    assert resolve("envs", "tinyenv", {"tinyenv": "pkg:Registered"}) == "pkg:Registered"
    assert resolve("envs", "tinyenv", {}) == "tmpmod:TinyEnv"
    assert resolve("envs", "a.b:C", {}) == "a.b:C"


# ------------------------------------------------------------------- (d) unknown names ----


def test_unknown_env_names_suggest(tmpmod):
    with pytest.raises(PluginError, match=r"unknown env 'scriptd'; did you mean 'scripted'\?"):
        make_env("scriptd")
    with pytest.raises(ConfigError, match=r"env.name='tinyenvv': unknown env 'tinyenvv'; did you mean 'tinyenv'\?"):
        _cfg("env.name=tinyenvv")
    with pytest.raises(ConfigError, match=r"env.name='nope': unknown env 'nope' \(known: .*scripted.*'module:Class'\)"):
        _cfg("env.name=nope")
    with pytest.raises(PluginError, match="unknown env"):
        EnvPool("alfwrld", slots=1, processes=True)  # before any worker starts


# ----------------------------------------------------------------------- (e) engines ----


def test_create_engine_by_name_reference_and_entry_point(tmpmod, tiny_policy):
    from roleagent.engine.hf import HFEngine

    assert isinstance(create_engine("hf", tiny_policy), HFEngine)
    engine = create_engine("tmpmod:FakeEngine", tiny_policy, max_batch=3)
    assert type(engine).__name__ == "FakeEngine" and engine.policy is tiny_policy
    assert engine.kwargs == {"max_batch": 3}
    assert type(create_engine("fake", tiny_policy)).__name__ == "FakeEngine"
    with pytest.raises(PluginError, match=r"unknown engine 'hff'; did you mean 'hf'\?"):
        create_engine("hff", tiny_policy)


def test_a_plugin_engine_gets_its_own_settings(tmpmod, tiny_policy):
    """``engine_settings`` is checked against the engine's ``config_class`` when a run
    starts and handed to it as ``settings=``; the built-in client reads ``server``."""
    from roleagent.engine import engine_settings
    from roleagent.trainer.checks import prepare

    base = ["env.name=scripted", "model.engine=tmpmod:BeamEngine"]
    settings = engine_settings(load_config(None, [*base, "engine_settings={beams: 4}"]))
    assert type(settings).__name__ == "BeamSettings" and settings.beams == 4
    engine = create_engine("tmpmod:BeamEngine", tiny_policy, settings=settings, max_batch=3)
    assert engine.kwargs == {"settings": settings, "max_batch": 3}
    assert create_engine("tmpmod:BeamEngine", tiny_policy).kwargs["settings"].beams == 2  # the defaults
    with pytest.raises(
        ConfigError, match="unknown config key 'engine_settings.beam'; did you mean 'engine_settings.beams'"
    ):
        prepare(load_config(None, [*base, "engine_settings={beam: 4}"]))
    with pytest.raises(ConfigError, match="engine_settings.beams: expected int"):
        prepare(load_config(None, [*base, "engine_settings={beams: many}"]))
    with pytest.raises(ConfigError, match="model.engine=tmpmod:FakeEngine takes its settings from none"):
        prepare(load_config(None, ["env.name=scripted", "model.engine=tmpmod:FakeEngine", "engine_settings={a: 1}"]))
    with pytest.raises(ConfigError, match="takes no settings"):
        create_engine("tmpmod:FakeEngine", tiny_policy, settings=object())
    openai = ["env.name=scripted", "model.engine=openai", "iterations=0"]
    assert engine_settings(load_config(None, [*openai, "server.mode=text"])).mode == "text"
    with pytest.raises(ConfigError, match="model.engine=openai takes its settings from its 'server' section"):
        prepare(load_config(None, [*openai, "engine_settings={mode: text}"]))


def test_model_server_is_read_as_the_server_section():
    """Recipes and run folders of older versions wrote ``model.server``."""
    with pytest.warns(FutureWarning, match="`model.server` is now the top-level section `server`"):
        cfg = load_config(None, ["model.server.mode=text", "server.retries=5"])
    assert (cfg.server.mode, cfg.server.retries) == ("text", 5)
    assert not hasattr(cfg.model, "server")


# ------------------------------------------------------------- (f) plugins by hand ----


@pytest.mark.parametrize(
    "name, expected",
    [
        ("mypkg.envs:MyEnv", True),
        ("a:b", True),
        ("tmpmod:TinyEnv.sub", True),
        ("alfworld", False),
        (":Env", False),
        ("pkg:", False),
        ("my pkg:Env", False),
        ("pkg:1Env", False),
        ("a..b:C", False),
        ("a:b:c", False),
        ("C:\\models\\x", False),
    ],
)
def test_is_reference(name, expected):
    assert is_reference(name) is expected


def test_load_object():
    assert load_object("collections:OrderedDict") is collections.OrderedDict
    assert load_object("os.path:join") is os.path.join
    assert load_object("collections:OrderedDict.fromkeys") == collections.OrderedDict.fromkeys
    with pytest.raises(PluginError, match="'collections' is not a 'module:attribute' reference"):
        load_object("collections")
    with pytest.raises(PluginError, match="cannot import 'no_such_module_xyz'"):
        load_object("no_such_module_xyz:X")
    with pytest.raises(PluginError, match="module 'collections' has no attribute 'Nope'"):
        load_object("collections:Nope")


def test_unknown_message():
    assert unknown("env", "alfwrld", ["bfcl", "alfworld", "bfcl"]) == (
        "unknown env 'alfwrld'; did you mean 'alfworld'? (known: alfworld, bfcl; or 'module:Class')"
    )
    assert unknown("engine", "zzz", ["hf"]) == "unknown engine 'zzz' (known: hf; or 'module:Class')"
    with pytest.raises(PluginError, match=r"^unknown estimator 'gpro'; did you mean 'grpo'\?"):
        plugins.resolve("estimators", "gpro", {"grpo": "m:a", "gigpo": "m:b"})


def test_plugins_docstring_examples():
    import doctest

    import roleagent.plugins

    assert doctest.testmod(roleagent.plugins).failed == 0
