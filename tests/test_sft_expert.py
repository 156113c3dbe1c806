"""Real ALFWorld: expert episodes played through the rollout code encode back, token for
token, to the prompts the rollout recorded (both context modes)."""

from __future__ import annotations

import pytest
from test_sft_warm_start import check_prompt_identity

from roleagent.engine.hf import HFEngine
from roleagent.envs.workers import EnvPool
from roleagent.models.loading import load_policy
from roleagent.rollout import RolloutSettings
from roleagent.sft.expert import expert_trajectories

pytest.importorskip("alfworld")
pytest.importorskip("textworld")


@pytest.mark.slow
@pytest.mark.parametrize("context,action_format", [("window", "action"), ("full", "action"), ("full", "think_action")])
def test_alfworld_expert_examples_encode_to_the_rollout_prompts(tmp_path_factory, context, action_format):
    cache = str(tmp_path_factory.getbasetemp() / "alfcache")
    kwargs = {"difficulty": "easy", "panel_size": 1, "train_size": 2, "cache_dir": cache, "source": "generated"}
    engine = HFEngine(load_policy("tiny", device="cpu", lora_rank=0), max_prompt_tokens=8192)
    settings = RolloutSettings(max_steps=30, action_format=action_format, context=context)
    with EnvPool("alfworld", kwargs, slots=2, processes=False) as pool:
        tasks = pool.meta.tasks("train")[:2]
        trajectories = expert_trajectories(engine, pool, tasks, settings)
    assert all(t.success for t in trajectories)
    assert check_prompt_identity(engine, trajectories, settings) == (
        sum(len(t.steps) for t in trajectories) if context == "window" else 2
    )
