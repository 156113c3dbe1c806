"""Which tasks an evaluation plays: the first ``eval.max_tasks`` after ``eval.skip_tasks``,
and the ids training data must leave out."""

from __future__ import annotations

import doctest

import pytest

import roleagent.evaluation
from roleagent.envs import make_env
from roleagent.evaluation import eval_panel, panel_ids
from roleagent.fields import ConfigError
from tests.run_helpers import config
from tests.test_cli import cli


def test_doctests():
    assert doctest.testmod(roleagent.evaluation).failed == 0


def test_a_skipped_panel_plays_the_tasks_after_the_first_k_and_training_leaves_out_both(tmp_path):
    env = make_env("scripted", n_tasks=10)
    every = [t.id for t in env.tasks("eval")]
    cfg = config(tmp_path, 0, ["env.name=scripted", "eval.max_tasks=3", "eval.skip_tasks=4"])
    assert [t.id for t in eval_panel(env, cfg, "eval")] == every[4:7]
    assert panel_ids(cfg, env) == set(every[:7])  # the panel seen before and the one played now
    cfg.eval.max_tasks = 0
    assert [t.id for t in eval_panel(env, cfg, "eval")] == every[4:] and panel_ids(cfg, env) == set(every)
    cfg.eval.skip_tasks = 10
    with pytest.raises(ConfigError, match="eval.skip_tasks=10: 'eval' has 10 tasks, none left"):
        eval_panel(env, cfg, "eval")


def test_eval_cli_skips_tasks():
    first = cli("eval", "--env", "scripted", "--policy", "expert", "--max-tasks", "2", "--set", "env.processes=false")
    later = cli(
        "eval", "--env", "scripted", "--policy", "expert", "--max-tasks", "2", "--skip-tasks", "3",
        "--set", "env.processes=false",
    )  # fmt: skip
    assert "expert eval" in later.stdout and "100.0" in later.stdout
    refused = cli("eval", "--env", "scripted", "--policy", "expert", "--skip-tasks", "999", check=False)
    assert refused.returncode == 2 and "eval.skip_tasks=999" in refused.stderr
    assert first.returncode == 0
