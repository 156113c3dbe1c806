"""BFCL's ground-truth expert as an SFT teacher: its episodes, played through the rollout
code with the shipped recipes' settings, encode back token for token to the prompts the
rollout recorded (one example per episode), and it solves the training tasks under the
official checker."""

from __future__ import annotations

import pytest
from test_sft_warm_start import check_prompt_identity

from roleagent.config import load_config
from roleagent.sft.data import trajectory_examples
from roleagent.types import Step, Task, Trajectory


def _step(messages: list[dict], action: str) -> Step:
    chat = {"mode": "encode", "response_prefix": "", "messages": messages}
    return Step(observation="", state_key="", action_text=action, action=action, valid=True, extras={"chat": chat})


def test_conversation_prompts_that_continue_the_last_example_extend_it():
    """Steps prompted with the whole conversation (BFCL) make one example whose every
    assistant turn is trained; a prompt in which the rollout trimmed an earlier message
    (here the first tool result) no longer repeats the example and starts a new one."""
    sys, u1 = {"role": "system", "content": "S"}, {"role": "user", "content": "u1"}
    tool, trimmed = {"role": "tool", "content": "r1"}, {"role": "tool", "content": "[trimmed]"}
    a1, a2, a3 = "<tool_call>c1</tool_call>", "Done.", "<tool_call>c3</tool_call>"
    u2 = {"role": "user", "content": "u2"}
    steps = [
        _step([sys, u1], a1),
        _step([sys, u1, {"role": "assistant", "content": a1}, tool], a2),
        _step([sys, u1, {"role": "assistant", "content": a1}, trimmed, {"role": "assistant", "content": a2}, u2], a3),
    ]
    traj = Trajectory(task=Task(id="bfcl/train/x", env="bfcl", split="train"), steps=steps)
    first, second = trajectory_examples(traj)
    reply = lambda text: {"role": "assistant", "content": text, "loss": True}  # noqa: E731
    assert first.messages == [sys, u1, reply(a1), tool, reply(a2)] and first.meta["steps"] == [0, 1]
    assert second.messages == steps[2].extras["chat"]["messages"] + [reply(a3)] and second.meta["steps"] == [2]


def _expert_rollout(recipe: str, n_tasks: int):
    from roleagent.engine.hf import HFEngine
    from roleagent.envs.workers import EnvPool
    from roleagent.models.loading import load_policy
    from roleagent.rollout import rollout_settings
    from roleagent.sft.expert import expert_trajectories

    cfg = load_config(recipe, ["model.name=tiny"])
    engine = HFEngine(load_policy("tiny", device="cpu", lora_rank=0), max_prompt_tokens=cfg.rollout.max_prompt_tokens)
    with EnvPool("bfcl", cfg.env.kwargs, slots=2, processes=False) as pool:
        tasks = pool.meta.tasks("train")[:n_tasks]
        settings = rollout_settings(cfg, cfg.rollout.max_steps or pool.meta.max_steps)
        return engine, settings, expert_trajectories(engine, pool, tasks, settings)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["grpo_bfcl_sft", "seal_bfcl_sft"])
def test_bfcl_expert_examples_encode_to_the_rollout_prompts(recipe):
    pytest.importorskip("bfcl_eval")
    engine, settings, trajectories = _expert_rollout(recipe, 2)
    assert all(t.success for t in trajectories) and all(len(t.steps) > 2 for t in trajectories)
    assert check_prompt_identity(engine, trajectories, settings) == len(trajectories)  # one example per episode


@pytest.mark.slow
def test_bfcl_expert_targets_end_with_the_end_of_turn_token():
    """BFCL generates without a stop string: every trained assistant turn of its expert
    examples ends with the EOS token the policy stops on (``<|im_end|>``)."""
    pytest.importorskip("bfcl_eval")
    from test_sft_eos import trained_spans

    from roleagent.sft.data import encode_example
    from roleagent.sft.expert import expert_examples

    engine, settings, trajectories = _expert_rollout("grpo_bfcl_sft", 2)
    assert settings.action_format == "raw"
    examples, _ = expert_examples(trajectories)
    eos = engine.tokenizer.eos_token_id
    for example in examples:
        assert example.eos
        encoded = encode_example(engine, example)
        spans = trained_spans(encoded.loss_mask)
        assert len(spans) == sum(m["role"] == "assistant" for m in example.messages)
        assert all(encoded.ids[end - 1] == eos and eos not in encoded.ids[start : end - 1] for start, end in spans)


@pytest.mark.slow
@pytest.mark.parametrize("split", ["roleagent", "authors"])
def test_bfcl_expert_solves_every_training_task(split):
    """The ground-truth expert solves all 400 training tasks of either split under the
    official checker (bfcl's own limits: 20 steps per user turn, any number of turns)."""
    pytest.importorskip("bfcl_eval")
    from roleagent.envs.bfcl.env import BFCLEnv
    from roleagent.envs.bfcl.replay import replay

    env = BFCLEnv(split=split)
    tasks = env.tasks("train")
    out = replay(env, tasks)
    assert len(tasks) == 400 and not out["failures"], out["failures"]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["grpo_bfcl_sft", "seal_bfcl_sft"])
def test_sft_recipes_let_the_policy_write_every_expert_step(recipe):
    """Each ground-truth step the warm start trains on fits the recipe's
    rollout.max_new_tokens (else RL would cut the very turns SFT taught)."""
    pytest.importorskip("bfcl_eval")
    from roleagent.envs import make_env
    from roleagent.models.loading import load_tokenizer

    cfg = load_config(recipe)
    tokenizer, env = load_tokenizer(cfg.model.name), make_env("bfcl", **cfg.env.kwargs)
    tasks = env.tasks("train")
    assert len(tasks) >= cfg.sft.expert_tasks
    longest = 0
    for task in tasks:
        env.reset(task, seed=0)
        while (action := env.expert_action()) is not None:
            longest = max(longest, len(tokenizer(action, add_special_tokens=False)["input_ids"]))
            env.step(action)
    assert 64 < longest <= cfg.rollout.max_new_tokens
