"""SEAL in the trainer: weight math on a hand-built batch, state round trips, profile push
to worker processes, config checks and a tiny end-to-end run that resumes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from roleagent.config import ConfigError, SEALConfig, load_config
from roleagent.methods.seal.method import SealMethod
from roleagent.trainer.advantages import StepBatch, compute_advantages
from tests.run_helpers import checked_config, make_trajectory

pytest.importorskip("bfcl_eval")


def _traj(task_id, rewards, labels=None, *, crashed=False, success=False, info_diag=True):
    traj = make_trajectory(task_id, rewards, ["o"] * len(rewards), crashed=crashed, env="bfcl")
    traj.success = success
    if labels is not None and info_diag:
        traj.steps[-1].info = {
            "diagnosis": {
                "turn_labels": list(labels),
                "priority_labels": ["pass"] * len(labels),
                "dominant_type": "pass",
            }
        }
    return traj


def _hook(**kw):
    return SealMethod(None, SEALConfig(enabled=True, interface_evolution=False, **kw))


def test_weights_scale_advantages_without_flipping_signs_and_clip():
    trajectories = [
        _traj("a", [0, 1], ["spurious_tool_call", "spurious_tool_call"], success=True),  # mean 2.0
        _traj("a", [0, 0], ["instance_mismatch", "instance_mismatch"]),  # 0.6
        _traj("a", [0, 0.5], ["pass", "response_mismatch"]),  # 0.95
        _traj("a", [0, 0]),  # no diagnosis: weight 1
    ]
    batch = StepBatch.from_trajectories(trajectories)
    adv = compute_advantages(batch, load_config(None, ["algo.name=grpo", "wia.enabled=false"]).algo).value
    hook = _hook(utility_ema=False)
    out = hook.adjust_advantages(batch, adv)
    w = np.array([2.0, 0.6, 0.95, 1.0])[batch.traj_ids]
    np.testing.assert_allclose(out, adv * w)
    assert np.all(np.sign(out) == np.sign(adv))
    # clip bounds: utilities far outside [0.5, 2] are clipped
    extreme = _hook(utility_ema=False, utilities={"pass": 10.0, "state_mismatch": 0.01})
    ws = extreme.trajectory_weights(
        [
            _traj("b", [0], ["pass"]),
            _traj("b", [0], ["state_mismatch"]),
            _traj("b", [0], ["checker_error"]),
            _traj("b", [0], crashed=True),
        ]
    )
    np.testing.assert_allclose(ws, [2.0, 0.5, 1.0, 1.0])


def test_reweight_off_keeps_advantages_and_still_reports():
    batch = StepBatch.from_trajectories([_traj("a", [1], ["pass"]), _traj("a", [0], ["spurious_tool_call"])])
    adv = np.array([0.7, -0.7])
    hook = _hook(reweight=False, utility_ema=False)
    assert hook.adjust_advantages(batch, adv) is adv
    metrics = hook.after_iteration(batch.trajectories, iteration=0)
    assert metrics["weight_max"] == 2.0 and metrics["label_pass"] == 0.5


def test_closed_loop_updates_after_weighting_and_round_trips():
    hook = _hook()
    failing = [_traj("a", [0], ["empty_turn_model_response"] * 3) for _ in range(40)]
    batch = StepBatch.from_trajectories(failing)
    out = hook.adjust_advantages(batch, np.ones(len(batch)))
    np.testing.assert_allclose(out, 1.5)  # iteration 0 uses the static utilities
    metrics = hook.after_iteration(failing, iteration=0)
    rho = metrics["rho_empty_turn_model_response"]
    assert 1.5 < rho <= 2.0  # prevalent, unrewarded tag gains utility
    clone = _hook()
    clone.load_state_dict(json.loads(json.dumps(hook.state_dict())))
    assert clone.state_dict() == hook.state_dict()
    np.testing.assert_allclose(clone.adjust_advantages(batch, np.ones(len(batch))), rho)


def test_profile_push_reaches_process_workers():
    from roleagent.envs.workers import EnvPool

    with EnvPool("bfcl", {"interface": "evolved", "tool_format": "compact"}, slots=2, processes=True) as pool:
        hook = SealMethod(SimpleNamespace(pool=pool), SEALConfig(enabled=True))
        diag = {
            "turn_labels": ["state_mismatch"],
            "priority_labels": ["argument_mismatch"],
            "dominant_type": "argument_mismatch",
        }
        trajectories = [_traj("a", [0], ["state_mismatch"]) for _ in range(10)]
        for t in trajectories:
            t.steps[-1].info["diagnosis"] = diag
        hook.after_iteration(trajectories, iteration=0)
        states = pool.call_all("profile_state")
        assert len(states) == 3 and all(s == hook.profile.state_dict() for s in states)
        task = next(t for t in pool.meta.tasks("train"))
        replies = pool.reset([(0, task, 0)])
        assert "# Guidelines" in replies[0].info["instruction"]  # the worker shows the guideline
        # a restored hook pushes its profile at once
        fresh = SealMethod(SimpleNamespace(pool=pool), SEALConfig(enabled=True))
        pool.call_all("set_profile", fresh.profile.state_dict())
        fresh.load_state_dict(hook.state_dict())
        assert all(s == hook.profile.state_dict() for s in pool.call_all("profile_state"))
        with pytest.raises(RuntimeError, match="remote_methods"):
            pool.call_all("close")


@pytest.mark.parametrize(
    "override,message",
    [
        (["seal.enabled=true"], "turn labels"),  # default env is textcraft
        (["seal.enabled=true", "env.name=bfcl", "seal.reweight=false"], "needs seal.reweight"),
        (["seal.enabled=true", "env.name=bfcl", "env.kwargs={interface: plain}"], "interface_evolution"),
        (
            [
                "seal.enabled=true",
                "env.name=bfcl",
                "seal.interface_evolution=false",
                "seal.interface_updates=false",
                "env.kwargs={interface: evolved}",
            ],
            "freeze",
        ),
        (["seal.enabled=true", "env.name=bfcl", "env.eval_split=train"], "plain interface"),
        # cues activated by a profile that is never updated would never show
        (["seal.enabled=true", "env.name=bfcl", "seal.interface_updates=false"], "activation=static"),
        (["seal.enabled=true", "env.name=bfcl", "env.kwargs={activation: always}"], "activation='always'"),
    ],
)
def test_seal_config_checks(override, message):
    with pytest.raises(ConfigError, match=message):
        checked_config(None, override)


def test_interface_evolution_sets_evolved_and_eval_stays_plain():
    cfg = checked_config("seal_bfcl")
    assert cfg.env.kwargs["interface"] == "evolved" and cfg.seal.utility_ema and cfg.seal.interface_updates
    from roleagent.envs import make_env

    env = make_env("bfcl", **cfg.env.kwargs)
    assert env.reset(env.tasks("train")[0], 0)[1]["interface"] == "evolved"
    assert env.reset(env.tasks("eval")[0], 0)[1]["interface"] == "plain"
    assert checked_config("seal_bfcl_no_interface").env.kwargs["interface"] == "plain"


TINY_BFCL = [
    "model.name=tiny",
    "model.device=cpu",
    "env.name=bfcl",
    "env.processes=false",
    "env.kwargs={tool_format: compact, classes: [TradingBot], train_per_category: 1, "
    "eval_per_category: 1, categories: [base], max_steps: 2}",
    "rollout.tasks_per_iter=1",
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "rollout.action_format=raw",
    "rollout.max_prompt_tokens=2048",
    "algo.name=grpo",
    "wia.enabled=false",
    "report_to=[jsonl]",
    "eval.at_start=false",
    "eval.max_tasks=1",
    "seal.enabled=true",
    "threads=1",
]


def test_tiny_end_to_end_run_logs_seal_metrics_and_resumes(tmp_path):
    from roleagent.trainer import Trainer

    run = tmp_path / "seal"
    first = Trainer(load_config(None, TINY_BFCL + [f"run_dir={run}", "iterations=1"]), quiet=True)
    try:
        first.run()
    finally:
        first.close()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "iteration" in r]
    assert len(train) == 1
    for key in ("seal/weight_mean", "seal/diagnosed", "seal/valid_call_ratio", "seal/profile_size", "seal/rho_pass"):
        assert key in train[0], key
    assert train[0]["seal/diagnosed"] == 1.0  # max_steps=2 < turns: every rollout replay-diagnosed
    assert any(k.startswith("seal/label_") for k in train[0])
    dumped = [json.loads(line) for line in (run / "rollouts" / "iter_000000.jsonl").read_text().splitlines()]
    assert all(d["split"] == "train" for d in dumped)
    state = first.method("seal").state_dict()
    assert len(state["profile"]["items"]) == 2

    resumed = Trainer(load_config(None, TINY_BFCL + [f"run_dir={run}", "iterations=2"]), quiet=True)
    try:
        assert resumed.start_iteration == 1
        assert resumed.method("seal").state_dict() == state
        assert resumed.pool.meta.profile_state() == state["profile"]  # pushed on load
        resumed.run()
    finally:
        resumed.close()
    assert len(resumed.method("seal").state_dict()["profile"]["items"]) == 4


def test_cpu_sizing_kwargs_compact_schemas_and_subsets():
    from roleagent.envs import make_env
    from roleagent.envs.bfcl import data
    from roleagent.envs.bfcl.interface import compact_doc, schema_cues

    for cls in data.BACKENDS:
        for doc in data.func_docs(cls):
            short = compact_doc(schema_cues(doc))
            params = doc.get("parameters", {})
            assert short["name"] == doc["name"]
            assert set(short["parameters"]["properties"]) == set(params.get("properties", {}))
            assert short["parameters"]["required"] == list(params.get("required", []))
            assert len(json.dumps(short)) <= len(json.dumps(schema_cues(doc)))
            for name, prop in params.get("properties", {}).items():
                assert short["parameters"]["properties"][name]["type"] == prop["type"]
    env = make_env("bfcl", classes=["TradingBot"], train_per_category=2, eval_per_category=1, tool_format="compact")
    train, evl = env.tasks("train"), env.tasks("eval")
    assert len(train) == 8 and len(evl) == 4
    assert all(t.metadata["involved_classes"] == ["TradingBot"] for t in train + evl)
    assert [t.metadata["task_type"] for t in evl] == list(data.CATEGORIES)
    full = make_env("bfcl").reset(evl[0], 0)[1]["instruction"]
    assert len(env.reset(evl[0], 0)[1]["instruction"]) < 0.75 * len(full)


# ----------------------------------------------------- closed-loop switches and recipes ------

RECIPE_SWITCHES = {
    # recipe: (reweight, utility_ema, interface_evolution, interface_updates)
    "seal_bfcl": (True, True, True, True),
    "seal_bfcl_paper": (True, False, True, True),  # the paper's text: rho fixed
    "seal_bfcl_paper_no_closed_loop": (True, False, True, False),  # paper's w/o closed loop
    "seal_bfcl_authors": (True, True, True, False),  # authors' release: static cues + EMA
    "seal_bfcl_authors_split": (True, True, True, False),  # the same on the authors' split
    "seal_bfcl_authors_no_closed_loop": (True, False, True, False),  # authors' dynamic.enable=false
    "seal_bfcl_no_interface": (True, True, False, False),
    "seal_bfcl_no_reweight": (False, False, True, True),
}

ALL_CUES = ["affordance_cues", "recovery_hints", "schema_cues"]
RECIPE_CUES = {
    # recipe: (cues at iteration 0, guidelines switched on) -- profile activation starts plain
    "seal_bfcl": ([], True),
    "seal_bfcl_paper": ([], True),
    "seal_bfcl_paper_no_closed_loop": (ALL_CUES, True),  # frozen with every cue on
    "seal_bfcl_authors": (["schema_cues"], False),  # observation_lite only
    "seal_bfcl_authors_split": (["schema_cues"], False),
    "seal_bfcl_authors_no_closed_loop": (["schema_cues"], False),
    "seal_bfcl_no_reweight": ([], True),
}


@pytest.mark.parametrize("recipe", sorted(RECIPE_SWITCHES))
def test_recipes_resolve_to_their_closed_loop_switches(recipe):
    s = load_config(recipe).seal
    assert (
        s.enabled and (s.reweight, s.utility_ema, s.interface_evolution, s.interface_updates) == RECIPE_SWITCHES[recipe]
    )


@pytest.mark.parametrize("recipe", sorted(RECIPE_CUES))
def test_recipes_show_their_interface_components(recipe):
    """Which cues a recipe's first training episode shows (empty profile), and whether a
    profile full of failures adds guidelines: the authors' settings never do."""
    from roleagent.envs import make_env

    kwargs = {**checked_config(recipe).env.kwargs, "classes": ["GorillaFileSystem"], "categories": ["base"]}
    kwargs.update(train_per_category=1, eval_per_category=1, split=kwargs.get("split", "roleagent"))
    env = make_env("bfcl", **kwargs)
    cues, guidelines = RECIPE_CUES[recipe]
    task = env.tasks("train")[0]
    assert env.reset(task, 0)[1]["cues"] == cues
    for _ in range(10):
        env.update_profile({"priority_labels": ["recovery_failure"]}, 0.0)
    _, info = env.reset(task, 0)
    assert bool(info["guidelines"]) is guidelines
    assert ("recovery_hints" in info["cues"]) is (not recipe.startswith("seal_bfcl_authors"))
    assert env.reset(env.tasks("eval")[0], 0)[1]["cues"] == []  # evaluation stays plain


def test_interface_updates_needs_interface_evolution():
    with pytest.raises(ConfigError, match="interface_updates"):
        checked_config(None, ["seal.enabled=true", "env.name=bfcl", "seal.interface_evolution=false"])
    with pytest.raises(ConfigError, match="unknown config key 'seal.closed_loop'"):
        checked_config(None, ["seal.enabled=true", "env.name=bfcl", "seal.closed_loop=false"])


def _failing_batch(n=40):
    diag = {
        "turn_labels": ["state_mismatch"],
        "priority_labels": ["argument_mismatch"],
        "dominant_type": "argument_mismatch",
    }
    out = [_traj("a", [0], ["state_mismatch"]) for _ in range(n)]
    for t in out:
        t.steps[-1].info["diagnosis"] = diag
    return out


@pytest.mark.parametrize("ema", [True, False])
def test_utility_ema_switch_changes_the_next_batch_weights(ema):
    hook = _hook(utility_ema=ema, interface_updates=False)
    batch = StepBatch.from_trajectories(_failing_batch())
    np.testing.assert_allclose(hook.adjust_advantages(batch, np.ones(len(batch))), 1.0)
    metrics = hook.after_iteration(batch.trajectories, iteration=0)
    after = hook.adjust_advantages(batch, np.ones(len(batch)))
    # count 40 >= 32, prevalence 1, reward 0: target 2.0, one EMA step 0.75*1 + 0.25*2
    np.testing.assert_allclose(after, 1.25 if ema else 1.0)
    assert ("rho_state_mismatch" in metrics) is ema


@pytest.mark.parametrize("updates", [True, False])
def test_interface_updates_switch_decides_whether_guidelines_appear(updates):
    from roleagent.envs.workers import EnvPool

    kwargs = {
        "interface": "evolved",
        "tool_format": "compact",
        "classes": ["TradingBot"],
        "train_per_category": 1,
        "eval_per_category": 1,
        "categories": ["base"],
    }
    with EnvPool("bfcl", kwargs, slots=1, processes=False) as pool:
        hook = SealMethod(SimpleNamespace(pool=pool), SEALConfig(enabled=True, interface_updates=updates))
        metrics = hook.after_iteration(_failing_batch(10), iteration=0)
        task = pool.meta.tasks("train")[0]
        instruction = pool.reset([(0, task, 0)])[0].info["instruction"]
        assert ("# Guidelines" in instruction) is updates
        # the profile also activates the cues its failure types call for (argument_mismatch:
        # schema cues); without updates the profile stays empty and so does the interface
        assert ('"[required] ' in instruction) is updates
        assert ("profile_size" in metrics) is updates
        assert (hook.profile is not None) is updates
