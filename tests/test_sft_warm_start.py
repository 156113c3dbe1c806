"""Expert play through the rollout code, the warm-start recipe stage, init_from and
several evaluation panels (tiny model, scripted environment)."""

from __future__ import annotations

import json

import pytest
import torch
from run_helpers import TINY, Killed, assert_same_run, config, run

from roleagent.engine.hf import HFEngine
from roleagent.envs.workers import EnvPool
from roleagent.models.loading import load_init_model, load_policy
from roleagent.rollout import RolloutSettings, actor
from roleagent.sft import train as sft_train
from roleagent.sft import warm_start
from roleagent.sft.data import encode_example
from roleagent.sft.expert import expert_examples, expert_tasks, expert_trajectories
from roleagent.trainer import Trainer
from roleagent.trainer.checkpoint import CheckpointError
from roleagent.types import Task

SFT = ["sft.enabled=true", "sft.expert_tasks=3", "sft.epochs=1", "sft.lr=1e-2", "eval.splits=[eval, train]"]


def check_prompt_identity(engine, trajectories, settings) -> int:
    """Encoding the written examples gives the prompts and action ids the rollout recorded."""
    examples, counts = expert_examples(trajectories)
    assert counts["successes"] == len(trajectories) > 0
    steps = [s for t in trajectories for s in t.steps]
    prompts = [p for e in examples for p in encode_example(engine, e).prompts]
    assert prompts == [s.prompt_ids for s in steps]
    for s in steps:
        text = actor.completion(s.action, settings.action_format)
        assert s.action_ids == engine.tokenizer(text, add_special_tokens=False)["input_ids"] and s.action_logprobs == [
            0.0
        ] * len(s.action_ids)
    return len(examples)


@pytest.mark.parametrize("context", ["window", "full"])
def test_expert_rollouts_encode_back_to_the_recorded_prompts(context):
    policy = load_policy("tiny", device="cpu", lora_rank=0)
    engine = HFEngine(policy, max_prompt_tokens=4096)
    settings = RolloutSettings(max_steps=8, action_format="action", context=context)
    with EnvPool("scripted", {}, slots=3, processes=False) as pool:
        tasks = pool.meta.tasks("train")[:3]
        trajectories = expert_trajectories(engine, pool, tasks, settings)
    n = check_prompt_identity(engine, trajectories, settings)
    assert n == (sum(len(t.steps) for t in trajectories) if context == "window" else len(trajectories))


def test_expert_tasks_are_training_tasks_outside_the_panels():
    tasks = [Task(id=f"t{i}", env="e", split="train") for i in range(6)]
    picked = expert_tasks(tasks, 4, seed=1, exclude={"t0", "t1"})
    assert len({t.id for t in picked}) == 4 and not {"t0", "t1"} & {t.id for t in picked}
    assert picked == expert_tasks(tasks, 4, seed=1, exclude={"t0", "t1"})
    with pytest.raises(ValueError, match="only 4 training tasks"):
        expert_tasks(tasks, 5, seed=1, exclude={"t0", "t1"})


def test_warm_start_run_evaluates_base_sft_and_rl_on_every_panel(tmp_path):
    trainer = run(tmp_path / "run", 1, SFT)
    labels = [(e.label, e.split) for e in trainer.evals]
    assert labels == [(lab, s) for lab in ("base", "sft", "after") for s in ("eval", "train")]
    table = (tmp_path / "run" / "eval_table.txt").read_text()
    assert "scripted" not in table and "lucky eval success" in table and "lucky train success" in table
    for row in ("base", "after SFT", "after RL"):
        assert table.count(f"\n{row} ") == 2
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(summary["evals_by_split"]) == {"eval", "train"} and set(summary["evals"]) == {"base", "sft", "after"}
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["eval"], r["split"]) for r in records if "eval" in r] == labels
    final = tmp_path / "run" / "sft" / "final"
    assert sft_train.is_finished(tmp_path / "run" / "sft")
    # the RL policy's base (its KL reference, adapters off) is the SFT policy
    merged = load_init_model("tiny", final, dtype=torch.float32).state_dict()
    base = trainer.policy.model.get_base_model().state_dict()
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged[name], load_policy("tiny", device="cpu").model.state_dict()[name])
    assert torch.allclose(base[name.replace("q_proj.weight", "q_proj.base_layer.weight")], merged[name])
    examples = (tmp_path / "run" / "sft" / "expert.jsonl").read_text().splitlines()
    assert examples and all(json.loads(x)["meta"]["split"] == "train" for x in examples)
    panel_ids = set(summary["eval_panels"]["train"])
    assert not panel_ids & {json.loads(x)["meta"]["task"] for x in examples}


def test_warm_start_resumes_after_sft_without_redoing_it(tmp_path, monkeypatch):
    run(tmp_path / "whole", 1, SFT)

    def killed(self, iteration):
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "train_iteration", killed)
        with pytest.raises(Killed):
            run(tmp_path / "cut", 1, SFT)
    assert sft_train.is_finished(tmp_path / "cut" / "sft")
    monkeypatch.setattr(warm_start, "train_sft", lambda *a, **k: pytest.fail("SFT redone"))
    monkeypatch.setattr(Trainer, "evaluate", _only(Trainer.evaluate, "after"))
    run(tmp_path / "cut", 1, SFT)
    assert_same_run(tmp_path / "whole", tmp_path / "cut", memory=False)


def _only(evaluate, allowed):
    def guarded(self, label):
        assert label == allowed, f"evaluation {label!r} redone"
        return evaluate(self, label)

    return guarded


def test_resume_with_another_init_from_is_refused(tmp_path):
    run(tmp_path / "sftrun", 1, SFT)
    final = tmp_path / "sftrun" / "sft" / "final"
    run(tmp_path / "plain", 1)
    with pytest.raises(CheckpointError, match="init_from"):
        Trainer(config(tmp_path / "plain", 2, [f"model.init_from={final}"]), quiet=True)
    trainer = run(tmp_path / "from_sft", 1, [f"model.init_from={final}"])
    assert trainer.init_from == str(final) and [e.label for e in trainer.evals] == ["before", "after"]
    assert "model.name=tiny" in TINY
