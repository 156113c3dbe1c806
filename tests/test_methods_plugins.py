"""Methods and advantage estimators plug in from outside the package by name; the loop
has no method-specific branch; rollout dumps carry what the algorithm computed and
``Trajectory.from_json`` inverts ``to_json``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from roleagent.config import AlgoConfig, ConfigError, load_config
from roleagent.trainer import Trainer
from roleagent.trainer.advantages import StepBatch, compute_advantages
from roleagent.types import Step, Task, Trajectory
from tests.run_helpers import TINY, checked_config, make_trajectory

ROOT = Path(__file__).resolve().parents[1]

EXTERNAL = '''
from dataclasses import dataclass

import numpy as np

from roleagent.fields import setting
from roleagent.trainer.methods import Method

CALLS = []


@dataclass
class HalfConfig:
    factor: float = setting(0.5, "advantage multiplier")


class Half(Method):
    """Scales every advantage and records what it saw."""

    name = "half"
    config_class = HalfConfig

    def adjust_advantages(self, batch, advantages):
        CALLS.append(("adjust", len(batch)))
        for t in batch.trajectories:
            t.extras["half"] = {"factor": self.config.factor}
        return advantages * self.config.factor

    def after_iteration(self, trajectories, iteration):
        CALLS.append(("after", iteration))
        return {"episodes": float(len(trajectories))}

    def state_dict(self):
        return {"calls": len(CALLS)}

    def write_summary(self, run_dir):
        (run_dir / "half.txt").write_text(str(len(CALLS)))


def doubled_grpo(batch, cfg):
    from roleagent.trainer.advantages import grpo

    return 2.0 * grpo(batch, cfg).value


@dataclass
class ScaleSettings:
    factor: float = setting(2.0, "multiplies GRPO's advantage")


def scaled_grpo(batch, cfg, settings):
    from roleagent.trainer.advantages import grpo

    return settings.factor * grpo(batch, cfg).value


scaled_grpo.config_class = ScaleSettings
'''


@pytest.fixture
def external(tmp_path, monkeypatch):
    """A module outside the package, importable as ``ext_method_mod``."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "ext_method_mod.py").write_text(textwrap.dedent(EXTERNAL))
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("ext_method_mod", None)
    yield
    sys.modules.pop("ext_method_mod", None)


def test_external_method_by_name_runs_its_hooks(tmp_path, external):
    cfg = load_config(
        None,
        TINY
        + [
            "algo.name=grpo",
            "wia.enabled=false",
            "iterations=2",
            f"run_dir={tmp_path / 'run'}",
            "methods=[ext_method_mod:Half]",
            "method_settings={half: {factor: 0.25}}",
        ],
    )
    trainer = Trainer(cfg, quiet=True, resume=False)
    try:
        trainer.run()
    finally:
        trainer.close()
    import ext_method_mod

    assert [c[0] for c in ext_method_mod.CALLS] == ["adjust", "after", "adjust", "after"]
    assert trainer.method("half").config.factor == 0.25
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["half/episodes"] for r in records if "iteration" in r] == [4.0, 4.0]
    dump = [json.loads(line) for line in (tmp_path / "run" / "rollouts" / "iter_000001.jsonl").read_text().splitlines()]
    assert all(t["extras"]["half"] == {"factor": 0.25} for t in dump if t["steps"])
    # the dumped advantage is the one trained on: the estimator's episode part times the factor
    for t in dump:
        for s in t["steps"]:
            assert s["extras"]["algo"]["advantage"] == pytest.approx(0.25 * s["extras"]["algo"]["episode"])
    assert (tmp_path / "run" / "half.txt").exists()
    from roleagent.trainer.checkpoint import read_checkpoint

    saved = read_checkpoint(tmp_path / "run" / "checkpoints" / "iter_000001", lora=True).state["methods"]
    assert saved == {"half": {"calls": 4}}


def test_method_from_an_entry_point(external, monkeypatch):
    import roleagent.plugins

    real = roleagent.plugins.entry_points
    monkeypatch.setattr(
        roleagent.plugins,
        "entry_points",
        lambda kind: {"half": "ext_method_mod:Half"} if kind == "methods" else real(kind),
    )
    cfg = load_config(None, TINY + ["algo.name=grpo", "wia.enabled=false", "methods=[half]"])
    from roleagent.trainer.methods import method_classes

    assert [c.__name__ for c in method_classes(cfg)] == ["Half"]


def test_external_method_settings_are_typed(external):
    base = TINY + ["algo.name=grpo", "wia.enabled=false", "methods=[ext_method_mod:Half]"]
    with pytest.raises(ConfigError, match="method_settings.half.factr.*did you mean"):
        checked_config(None, base + ["method_settings={half: {factr: 1}}"])
    with pytest.raises(ConfigError, match="method_settings.half.factor: expected float"):
        checked_config(None, base + ["method_settings={half: {factor: fast}}"])
    with pytest.raises(ConfigError, match="method_settings.other: no method 'other'"):
        checked_config(None, base + ["method_settings={other: {}}"])
    with pytest.raises(ConfigError, match="methods: .*no_such_mod"):
        checked_config(None, TINY + ["methods=[no_such_mod:Thing]"])
    with pytest.raises(ConfigError, match="seal.enabled=true"):
        checked_config(None, TINY + ["methods=[seal]"])


def test_external_estimator_by_name(external):
    batch = StepBatch.from_trajectories(
        [make_trajectory("a", [0, 1], ["x", "y"]), make_trajectory("a", [0, 0], ["x", "z"])]
    )
    plain = compute_advantages(batch, AlgoConfig(name="grpo")).value
    doubled = compute_advantages(batch, AlgoConfig(name="ext_method_mod:doubled_grpo"))
    np.testing.assert_allclose(doubled.value, 2 * plain)
    np.testing.assert_allclose(plain, [0.7071, 0.7071, -0.7071, -0.7071], atol=1e-4)
    load_config(None, TINY + ["algo.name=ext_method_mod:doubled_grpo", "wia.enabled=false"])  # validates


def test_an_external_estimator_gets_its_own_settings(external):
    """``algo_settings`` is checked against the estimator's ``config_class`` when a run
    starts and passed as its third argument; the defaults when none is given."""
    from roleagent.trainer.advantages import estimator_settings

    batch = StepBatch.from_trajectories(
        [make_trajectory("a", [0, 1], ["x", "y"]), make_trajectory("a", [0, 0], ["x", "z"])]
    )
    plain = compute_advantages(batch, AlgoConfig(name="grpo")).value
    base = TINY + ["algo.name=ext_method_mod:scaled_grpo", "wia.enabled=false"]
    cfg = checked_config(None, [*base, "algo_settings={factor: 3}"])
    settings = estimator_settings(cfg)
    np.testing.assert_allclose(compute_advantages(batch, cfg.algo, settings).value, 3 * plain)
    np.testing.assert_allclose(compute_advantages(batch, cfg.algo).value, 2 * plain)  # ScaleSettings()
    with pytest.raises(ConfigError, match="unknown config key 'algo_settings.factr'; did you mean"):
        checked_config(None, [*base, "algo_settings={factr: 3}"])
    with pytest.raises(ConfigError, match="algo_settings: algo.name=grpo takes none .its settings are the 'algo'"):
        checked_config(None, TINY + ["algo.name=grpo", "wia.enabled=false", "algo_settings={factor: 3}"])


def test_gigpo_parts_add_up_and_name_the_state_groups():
    # GiGPO's worked example (algos.gigpo_advantages): γ = 0.5, mean_norm
    batch = StepBatch.from_trajectories([make_trajectory("g", [0, 1], ["s0", "s1"]), make_trajectory("g", [0], ["s0"])])
    out = compute_advantages(batch, AlgoConfig(name="gigpo", gamma=0.5, norm="mean_norm"))
    np.testing.assert_allclose(out.parts["episode"], [1 / 3, 1 / 3, -2 / 3])
    np.testing.assert_allclose(out.parts["step"], [0.25, 0.0, -0.25])
    np.testing.assert_allclose(out.value, [0.5833, 0.3333, -0.9167], atol=1e-4)
    assert list(out.state_group) == [0, 1, 0]


def test_from_json_inverts_to_json():
    step = Step(
        observation="o",
        state_key=("room", 1),
        prompt_ids=[1, 2],
        action_ids=[3],
        action_logprobs=[-0.5],
        action_text="<action>go</action>",
        action="go",
        valid=True,
        reward=1.0,
        done=True,
        info={"success": True, "obj": object()},
        extras={
            "wia": {"predictions": ["p"], "scores": [math.nan], "ids": [4], "logprobs": [-1.0], "prompt_ids": [5]},
            "algo": {"advantage": 0.5, "episode": 0.25, "step": 0.25, "state_group": 0},
        },
    )
    t = Trajectory(
        task=Task("t/1", "scripted", split="eval", metadata={"type": "pick"}),
        steps=[step],
        success=True,
        instruction="do",
        final_observation="end",
        seed=7,
        diagnosis={"x": 1},
        extras={"seal": {"weight": 1.5}},
    )
    for tokens in (False, True):
        data = json.loads(json.dumps(t.to_json(tokens=tokens)))
        again = Trajectory.from_json(data)
        assert json.dumps(again.to_json(tokens=tokens)) == json.dumps(data)
    full = Trajectory.from_json(json.loads(json.dumps(t.to_json(tokens=True))))
    assert full.task == t.task and full.steps[0].state_key == ("room", 1)
    assert full.steps[0].action_ids == [3] and full.steps[0].extras["wia"]["ids"] == [4]
    assert "obj" not in full.steps[0].info
    short = t.to_json()
    assert "ids" not in short["steps"][0]["extras"]["wia"] and "action_ids" not in short["steps"][0]


def test_loop_has_no_method_specific_branch():
    found = subprocess.run(
        ["grep", "-rn", r"aiw is not None\|if cfg.algo.name ==", "roleagent/trainer"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    assert found == ""
    loop = (ROOT / "roleagent" / "trainer" / "loop.py").read_text().lower()
    assert not [name for name in ("seal", "wia", "aiw") if name in loop]


def test_the_interface_lives_with_the_trainer_and_the_old_imports_still_work():
    """The trainer owns the plug-in interface (``roleagent.trainer.methods``); the paths plug-ins
    used before (``roleagent.methods``, ``roleagent.methods.base``) name the same objects."""
    import roleagent.methods
    import roleagent.methods.base
    import roleagent.trainer.methods as api

    assert api.Method.__module__ == "roleagent.trainer.methods"
    for old in (roleagent.methods, roleagent.methods.base):
        assert old.Method is api.Method and old.MethodContext is api.MethodContext
    assert roleagent.methods.build_methods is api.build_methods and roleagent.methods.METHODS is api.METHODS
