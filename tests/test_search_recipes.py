"""The search recipes load, validate and carry Role-Agent's search settings (Wang et al.,
2026, arXiv 2606.10917: 4 turns, group size 5, Table 5's temperatures and KL); the GRPO and
GiGPO baselines differ from Role-Agent only in the algorithm and its components."""

from __future__ import annotations

import pytest

from roleagent.config import load_config, validate

NAMES = ("role_agent_search", "gigpo_search", "grpo_search")


@pytest.mark.parametrize("name", NAMES)
def test_search_recipe_settings(name):
    cfg = load_config(name)
    validate(cfg)
    assert cfg.env.name == "search" and cfg.env.kwargs["max_steps"] == 4
    assert cfg.env.eval_split == "dev" and "train" not in cfg.eval.splits
    assert cfg.rollout.group_size == 5 and cfg.rollout.action_format == "raw"
    assert not cfg.rollout.constrain_actions
    assert cfg.sft.enabled and cfg.sft.expert_tasks == 48  # the gold-path expert's warm start
    assert cfg.rollout.temperature == pytest.approx(0.9) and cfg.eval.temperature == 0.0
    assert cfg.optim.kl_coef == pytest.approx(1e-3)


def test_baselines_switch_off_the_role_agent_parts():
    full, gigpo, grpo = (load_config(n) for n in NAMES)
    assert full.algo.name == "role_agent" and full.wia.enabled and full.aiw.enabled
    assert full.aiw.analyst == "rule"  # the environment's Table 6 diagnosis
    assert gigpo.algo.name == "gigpo" and gigpo.algo.similarity_threshold == pytest.approx(0.9)
    assert grpo.algo.name == "grpo"
    assert not (gigpo.wia.enabled or gigpo.aiw.enabled or grpo.wia.enabled or grpo.aiw.enabled)
