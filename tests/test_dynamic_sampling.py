"""Dynamic sampling (``dynamic_sampling:``, :mod:`roleagent.dynamic_sampling`): an iteration
plays more tasks until enough groups disagree, and trains only on those."""

from __future__ import annotations

import doctest
import json
from types import SimpleNamespace

import pytest

from roleagent import dynamic_sampling
from roleagent.config import ConfigError, load_config
from roleagent.rollout import RolloutStats
from roleagent.trainer.methods import Method
from tests.run_helpers import TINY, checked_config

GRPO = [*TINY, "algo.name=grpo", "wia.enabled=false", "iterations=1", "eval.at_start=false", "eval.max_tasks=1"]


def test_the_docstring_examples_hold():
    assert doctest.testmod(dynamic_sampling).failed == 0


def _run(tmp_path, *sets):
    from roleagent.trainer import Trainer

    trainer = Trainer(load_config(None, [*GRPO, f"run_dir={tmp_path}", *sets]), resume=False, quiet=True)
    try:
        metrics = trainer.train_iteration(0)
    finally:
        trainer.close()
    played = [json.loads(line) for line in (tmp_path / "rollouts" / "iter_000000.jsonl").read_text().splitlines()]
    return metrics, played


def test_rounds_until_the_limit_when_no_group_disagrees(tmp_path):
    """On the plain corridor no random action wins: every group's returns are equal, so each
    round draws the two missing tasks again, up to max_rounds, and nothing is trained."""
    metrics, played = _run(
        tmp_path, "env.name=scripted", "dynamic_sampling.enabled=true", "dynamic_sampling.max_rounds=3"
    )
    assert metrics["train/sampling_rounds"] == 3
    assert metrics["train/groups_played"] == 6 and len(played) == 12  # 3 rounds x 2 tasks x G = 2
    assert metrics["train/groups_trained"] == 0 and metrics["update/samples"] == 0
    assert all("algo" not in step["extras"] for t in played for step in t["steps"])


def test_trains_only_the_groups_that_disagree(tmp_path):
    """Seed 2 on the lucky corridor: 4 rounds play 7 groups, 5 of them with equal returns."""
    metrics, played = _run(tmp_path, "dynamic_sampling.enabled=true", "dynamic_sampling.max_rounds=4", "seed=2")
    groups = [played[i : i + 2] for i in range(0, len(played), 2)]
    assert len(groups) == metrics["train/groups_played"] > metrics["train/groups_trained"]
    assert 1 < metrics["train/sampling_rounds"] <= 4
    trained = [g for g in groups if all("algo" in s["extras"] for t in g for s in t["steps"])]
    assert len(trained) == metrics["train/groups_trained"] <= 2
    for group in groups:
        returns = {t["return"] for t in group}
        assert (group in trained) <= (len(returns) > 1)  # trained groups disagree
    assert metrics["train/groups_trained"] == min(2, sum(len({t["return"] for t in g}) > 1 for g in groups))


def test_off_by_default_and_checked():
    assert not checked_config(None, []).dynamic_sampling.enabled
    with pytest.raises(ConfigError, match="max_rounds=0"):
        checked_config(None, ["dynamic_sampling.max_rounds=0"])
    with pytest.raises(ConfigError, match="group_size >= 2"):
        checked_config(None, ["dynamic_sampling.enabled=true", "rollout.group_size=1"])
    assert checked_config("asl_search", ["dynamic_sampling.enabled=true"]).dynamic_sampling.enabled  # plays jobs


class OwnCollector(Method):
    """Replaces the collector with one that does not declare ``plays_jobs``."""

    name = "own_collector"

    def collector(self):
        return SimpleNamespace(collect=lambda iteration, progress=None: ([], RolloutStats()))


def test_a_collector_that_does_not_play_the_jobs_is_refused(tmp_path):
    from roleagent.trainer import Trainer

    cfg = load_config(
        None, [*GRPO, f"run_dir={tmp_path}", "dynamic_sampling.enabled=true", f"methods=[{__name__}:OwnCollector]"]
    )
    with pytest.raises(
        ConfigError, match="needs a collector that plays the iteration's jobs as groups; SimpleNamespace"
    ):
        Trainer(cfg, resume=False, quiet=True)
