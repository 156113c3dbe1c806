"""Every bad configuration is a one-line error naming its key, before any model loads."""

from __future__ import annotations

import subprocess
import sys

import pytest
from run_helpers import checked_config

from roleagent import cli
from roleagent.config import TrainConfig, load_config
from roleagent.config_rules import FIELD_RULES, FREE, fields_of

# (command line after "roleagent", text the one-line message must contain)
BAD = [
    # the audit's tracebacks (after the model loaded, or while loading it)
    (["train", "--set", "env.name=nope"], "env.name='nope'"),
    (["train", "--set", "model.name=/no/such/model"], "model.name='/no/such/model'"),
    (["train", "--set", "model.name=./runs/missing"], "model.name='./runs/missing'"),
    (["train", "--set", "model.dtype=float64"], "model.dtype='float64'"),
    (["train", "--set", "rollout.max_batch=0"], "rollout.max_batch=0"),
    (["train", "--set", "optim.lr=-1"], "optim.lr=-1"),
    (["train", "--set", "optim.lr=[1,"], "optim.lr"),
    (["train", "--set", "env.kwargs={a: [}"], "env.kwargs"),
    # the audit's silent runs
    (["train", "--set", "rollout.max_new_tokens=0"], "rollout.max_new_tokens=0"),
    (["train", "--set", "model.lora_rank=-1"], "model.lora_rank=-1"),
    (["train", "--set", "wia.horizon=-1"], "wia.horizon=-1"),
    # every other field out of range or off its choices
    (["train", "--set", "optim.lr=.nan"], "optim.lr=nan"),
    (["train", "--set", "optim.lr=.inf"], "optim.lr=inf"),
    (["train", "--set", "seed=-1"], "seed=-1"),
    (["train", "--set", "iterations=-1"], "iterations=-1"),
    (["train", "--set", "checkpoint_every=0"], "checkpoint_every=0"),
    (["train", "--set", "threads=-2"], "threads=-2"),
    (["train", "--set", "run_dir=' '"], "run_dir"),
    (["train", "--set", "model.device=gpu"], "model.device='gpu'"),
    (["train", "--set", "model.lora_alpha=0"], "model.lora_alpha=0"),
    (["train", "--set", "model.name=not a model!"], "model.name='not a model!'"),
    (["train", "--set", "env.timeout=0"], "env.timeout=0"),
    (["train", "--set", "env.kwargs={nope: 1}"], "env.kwargs.nope"),
    (["train", "--set", "env.train_split="], "env.train_split"),
    (["train", "--set", "rollout.tasks_per_iter=0"], "rollout.tasks_per_iter=0"),
    (["train", "--set", "rollout.group_size=1"], "rollout.group_size"),
    (["train", "--set", "rollout.max_steps=-1"], "rollout.max_steps=-1"),
    (["train", "--set", "rollout.action_format=json"], "rollout.action_format='json'"),
    (["train", "--set", "rollout.history=-1"], "rollout.history=-1"),
    (["train", "--set", "rollout.temperature=0"], "rollout.temperature=0"),
    (["train", "--set", "rollout.top_p=0"], "rollout.top_p=0"),
    (["train", "--set", "rollout.top_p=1.5"], "rollout.top_p=1.5"),
    (["train", "--set", "rollout.invalid_penalty=-0.1"], "rollout.invalid_penalty=-0.1"),
    (["train", "--set", "rollout.max_prompt_tokens=0"], "rollout.max_prompt_tokens=0"),
    (["train", "--set", "algo.name=dpo"], "algo.name: unknown estimator 'dpo'"),
    (["train", "--set", "algo.name=ppo", "--set", "wia.enabled=false"], "algo.name=ppo"),
    (["train", "--set", "critic.backbone=both"], "critic.backbone='both'"),
    (["train", "--set", "algo.lam=2"], "algo.lam=2"),
    (["train", "--set", "algo.gamma=1.5"], "algo.gamma=1.5"),
    (["train", "--set", "algo.step_weight=-1"], "algo.step_weight=-1"),
    (["train", "--set", "algo.alpha=-1"], "algo.alpha=-1"),
    (["train", "--set", "algo.norm=zscore"], "algo.norm='zscore'"),
    (["train", "--set", "algo.similarity_threshold=0"], "algo.similarity_threshold=0"),
    (["train", "--set", "wia.horizon_fraction=0"], "wia.horizon_fraction=0"),
    (["train", "--set", "wia.max_new_tokens=0"], "wia.max_new_tokens=0"),
    (["train", "--set", "optim.weight_decay=-1"], "optim.weight_decay=-1"),
    (["train", "--set", "optim.epochs=0"], "optim.epochs=0"),
    (["train", "--set", "optim.mini_batches=0"], "optim.mini_batches=0"),
    (["train", "--set", "optim.mini_batches=100"], "optim.mini_batches=100"),
    (["train", "--set", "optim.micro_batch_tokens=8"], "optim.micro_batch_tokens"),
    (["train", "--set", "optim.clip_low=1"], "optim.clip_low=1"),
    (["train", "--set", "optim.clip_high=-0.1"], "optim.clip_high=-0.1"),
    (["train", "--set", "optim.dual_clip=1"], "optim.dual_clip=1"),
    (["train", "--set", "optim.kl_coef=-1"], "optim.kl_coef=-1"),
    (["train", "--set", "optim.entropy_coef=-1"], "optim.entropy_coef=-1"),
    (["train", "--set", "optim.grad_clip=0"], "optim.grad_clip=0"),
    (["train", "--set", "eval.every=-1"], "eval.every=-1"),
    (["train", "--set", "eval.max_tasks=-1"], "eval.max_tasks=-1"),
    (["train", "--set", "eval.temperature=-1"], "eval.temperature=-1"),
    (["train", "--set", "eval.seed=-1"], "eval.seed=-1"),
    (["train", "--set", "eval.sampled=-1"], "eval.sampled=-1"),
    (["train", "--set", "aiw.analyst=human"], "aiw.analyst='human'"),
    (["train", "--set", "aiw.retriever=oracle"], "aiw.retriever='oracle'"),
    (["train", "--set", "aiw.nope=1"], "aiw.nope"),
    (["train", "--set", "aiw.decay=2"], "aiw.decay=2"),
    (["train", "--set", "aiw.prefilter=random"], "aiw.prefilter='random'"),
    (["train", "--set", "seal.enabled=true"], "seal.enabled"),
    (["train", "seal_bfcl", "--set", "seal.w_min=0"], "seal.w_min=0"),
    (["train", "seal_bfcl", "--set", "seal.beta=2"], "seal.beta=2"),
    (["train", "seal_bfcl", "--set", "seal.window=0"], "seal.window=0"),
    (
        [
            "train",
            "seal_bfcl",
            "--set",
            "seal.interface_evolution=false",
            "--set",
            "seal.interface_updates=false",
            "--set",
            "env.kwargs.interface=fancy",
        ],
        "env.kwargs.interface='fancy'",
    ),
    (["train", "--set", "optim.lrr=1"], "optim.lrr"),
    (["train", "--set", "rollout.group_size=four"], "rollout.group_size"),
    (["train", "--set", "optim.lr.x=1"], "optim.lr"),
    (["train", "--set", "novalue"], "novalue"),
    (["train", "no_such_recipe"], "no_such_recipe"),
    (["eval", "--max-tasks", "-1"], "eval.max_tasks=-1"),
    (["eval", "--policy", "expert", "--workers", "0"], "--workers=0"),
]


class _NoModel:
    def __init__(self, *args, **kwargs):
        raise AssertionError("a model was loaded for a bad config")


@pytest.mark.parametrize("argv,key", BAD, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_config_is_one_line_naming_the_key_before_any_model(argv, key, monkeypatch, capsys):
    import roleagent.models.loading
    import roleagent.trainer

    monkeypatch.setattr(roleagent.trainer, "Trainer", _NoModel)
    monkeypatch.setattr(roleagent.models.loading, "load_policy", _NoModel)
    code = cli.main(argv)  # any other exception escapes here: a traceback
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("config error: "), err
    assert key in err, err


def test_bad_configs_exit_2_without_traceback_in_a_subprocess():
    for argv, key in (BAD[0], BAD[1], BAD[6]):
        result = subprocess.run(
            [sys.executable, "-m", "roleagent.cli", *argv], capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and key in result.stderr


def test_every_field_has_a_rule():
    """A new numeric or string field needs a range or choices (or a place in FREE)."""
    unruled = [
        key for key, hint in fields_of(TrainConfig) if hint is not bool and key not in FIELD_RULES and key not in FREE
    ]
    assert not unruled, f"add rules to roleagent.config_rules.FIELD_RULES for {unruled}"
    assert set(FIELD_RULES) | FREE <= {key for key, _ in fields_of(TrainConfig)}


def test_validation_does_not_change_the_config():
    cfg = checked_config("seal_bfcl")
    before = repr(cfg)
    from roleagent.config import validate

    validate(cfg)
    assert repr(cfg) == before
    assert cfg.env.kwargs["interface"] == "evolved"  # filled in by prepare, not by validate


def test_model_paths(tmp_path):
    from roleagent.config import ConfigError

    (tmp_path / "config.json").write_text("{}")
    assert load_config(None, [f"model.name={tmp_path}"]).model.name == str(tmp_path)
    with pytest.raises(ConfigError, match="folder with config.json"):
        load_config(None, [f"model.name={tmp_path.parent}"])
    assert load_config(None, ["model.name=HuggingFaceTB/SmolLM2-135M-Instruct"])  # an HF id: not checked online
