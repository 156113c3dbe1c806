"""Recipes, overrides and up-front checks."""

from pathlib import Path

import pytest
from run_helpers import checked_config

from roleagent.config import ConfigError, TrainConfig, apply_overrides, load_config, upgrade_legacy
from roleagent.config_rules import explain

RECIPES = sorted((Path(__file__).parents[1] / "roleagent" / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_shipped_recipe_loads(recipe):
    cfg = load_config(recipe)
    assert cfg.iterations >= 0


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_a_recipe_switches_off_only_what_it_would_inherit_on(recipe):
    """Defaults are neutral (estimator grpo, every method off): a recipe names the methods it
    uses, and ``SECTION: {enabled: false}`` appears only over a base recipe that enabled it."""
    import yaml

    raw = yaml.safe_load(recipe.read_text())
    inherited = load_config(raw["base"]) if "base" in raw else load_config(None, [])
    for section, value in raw.items():
        if isinstance(value, dict) and value.get("enabled") is False:
            assert getattr(inherited, section).enabled, f"{recipe.stem}: {section}.enabled=false repeats the default"


def test_defaults_are_neutral():
    cfg = load_config(None, [])
    assert cfg.algo.name == "grpo" and not cfg.critic.enabled
    assert not any(getattr(cfg, s).enabled for s in ("wia", "aiw", "seal", "agent_r", "asl"))


def test_shipped_recipe_by_name():
    assert load_config("role_agent_textcraft").algo.name == "role_agent"


def test_unknown_key_names_closest():
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.lrr'; did you mean 'optim.lr'"):
        load_config(None, ["optim.lrr=1e-4"])
    with pytest.raises(ConfigError, match="did you mean 'rollout'"):
        load_config(None, ["rolout.group_size=2"])


def test_types_are_checked():
    with pytest.raises(ConfigError, match="rollout.group_size: expected int"):
        load_config(None, ["rollout.group_size=four"])
    assert load_config(None, ["optim.lr=1"]).optim.lr == 1.0  # int where float is fine


def test_overrides_parse_yaml_values():
    data = apply_overrides({}, ["a.b=1e-4", "a.c=true", "d=[1, 2]", "e={k: v}"])
    assert data == {"a": {"b": 1e-4, "c": True}, "d": [1, 2], "e": {"k": "v"}}
    with pytest.raises(ConfigError):
        apply_overrides({}, ["novalue"])


@pytest.mark.parametrize(
    "override,message",
    [
        (["optim.mini_batches=100"], "exceeds the 16 episodes"),
        (["rollout.group_size=1"], "group_size must be >= 2"),
        (["algo.name=ppo2"], "algo.name: unknown estimator 'ppo2'"),
        (["algo.name=grpoo"], "did you mean 'grpo'"),
        (["model.engine=vllm2"], "model.engine: unknown engine .vllm2."),
        (["algo.name=gigpo", "wia.enabled=true"], "wia.enabled needs algo.name=role_agent"),
        (["optim.dual_clip=0.5"], "optim.dual_clip=0.5: must be > 1"),
        (["optim.micro_batch_tokens=8"], "micro_batch_tokens"),
    ],
)
def test_inconsistent_batches_fail_before_any_work(override, message):
    with pytest.raises(ConfigError, match=message):
        checked_config(None, override)


def test_malformed_yaml_is_a_config_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: {lr: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_explain_covers_nested_fields():
    lines = explain(TrainConfig)
    assert any(line.startswith("optim.clip_high = 0.28:") for line in lines)
    assert any(line.startswith("wia.horizon_fraction = 0.05:") for line in lines)


def test_explain_lists_every_agent_in_world_and_seal_knob():
    """Every field of the typed aiw and seal sections (no untyped options dict) is listed
    with its default and help; aiw keys are type-checked and range-checked."""
    import dataclasses

    from roleagent.config import AIWConfig, SEALConfig

    keys = {line.split(" = ")[0] for line in explain(TrainConfig)}
    for prefix, cls in (("aiw", AIWConfig), ("seal", SEALConfig)):
        for f in dataclasses.fields(cls):
            assert f"{prefix}.{f.name}" in keys
    assert any(line.startswith("aiw.decay = 0.9:") and "must be in [0, 1]" in line for line in explain(TrainConfig))
    assert "model.engine" in keys and "methods" in keys and "aiw.options" not in keys
    assert load_config(None, ["aiw.decay=0.5", "aiw.retrieval_max_new_tokens=32"]).aiw.decay == 0.5
    with pytest.raises(ConfigError, match="aiw.top_k=0"):
        load_config(None, ["aiw.top_k=0"])
    with pytest.raises(ConfigError, match="aiw.memory_file"):
        load_config(None, ["aiw.memory_file=../x.sqlite"])


def test_legacy_tensorboard_key_becomes_report_to(tmp_path):
    """Run directories written before ``report_to`` replaced ``tensorboard: BOOL`` still load."""
    old = tmp_path / "config.yaml"
    old.write_text("tensorboard: false\nreport_to: [jsonl, tensorboard, wandb]\n")
    with pytest.warns(FutureWarning, match="report_to"):
        assert load_config(old).report_to == ["jsonl", "wandb"]
    with pytest.warns(FutureWarning):  # (tensorboard itself need not be installed to upgrade the keys)
        assert upgrade_legacy({"tensorboard": True}) == {"report_to": ["jsonl", "tensorboard"]}
    with pytest.warns(FutureWarning):
        assert load_config(None, ["tensorboard=false"]).report_to == ["jsonl"]
