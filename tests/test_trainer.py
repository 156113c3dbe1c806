"""The training loop on a tiny random model: update direction, exact resume, advantages bridge."""

import importlib.util
import json
import random

import numpy as np
import pytest
import torch

from roleagent.config import AlgoConfig, OptimConfig
from roleagent.models.loading import load_init_model, load_policy
from roleagent.trainer import Trainer
from roleagent.trainer.advantages import StepBatch, compute_advantages
from roleagent.trainer.checkpoint import read_checkpoint
from roleagent.trainer.samples import TrainSample, micro_batches
from roleagent.trainer.update import Updater
from tests.run_helpers import AIW, config, make_trajectory, metrics, run, trainable


def _sample(policy, advantage):
    tok = policy.tokenizer
    prompt = tok("Which way?", add_special_tokens=False)["input_ids"]
    output = tok(" left", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = policy.model(torch.tensor([prompt + output])).logits[0, len(prompt) - 1 : -1]
    old = torch.log_softmax(logits, -1).gather(-1, torch.tensor(output)[:, None]).squeeze(-1)
    return TrainSample(prompt, output, old.tolist(), advantage)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_update_moves_logprob_with_the_advantage(advantage):
    from roleagent.models.loading import load_policy

    policy = load_policy("tiny", device="cpu", dtype="float32", seed=0)
    sample = _sample(policy, advantage)
    updater = Updater(policy, OptimConfig(lr=1e-2))
    metrics = updater.update([sample], random.Random(0))
    after = _sample(policy, advantage)
    change = sum(after.old_logprobs) - sum(sample.old_logprobs)
    assert change * advantage > 0
    assert metrics["samples"] == 1 and metrics["grad_norm"] > 0 and metrics["optimizer_steps"] == 1
    # the update's own measure of how far it moved the action: the same change
    shift = metrics["logp_shift_pos" if advantage > 0 else "logp_shift_neg"]
    assert shift == pytest.approx(change, abs=1e-5)
    assert ("logp_shift_neg" if advantage > 0 else "logp_shift_pos") not in metrics


def test_micro_batches_respect_token_budget():
    samples = [TrainSample([1] * n, [2] * 4, [0.0] * 4, 1.0) for n in (10, 50, 20, 30)]
    batches = micro_batches(samples, token_budget=80)
    assert sorted(len(s.prompt_ids) for b in batches for s in b) == [10, 20, 30, 50]
    assert all(len(b) * max(s.length for s in b) <= 80 or len(b) == 1 for b in batches)


def test_step_batch_skips_crashed_and_matches_grpo():
    trajectories = [make_trajectory("a", [0, 1]), make_trajectory("a", [0, 0]), make_trajectory("a", [1], crashed=True)]
    batch = StepBatch.from_trajectories(trajectories)
    assert len(batch) == 4 and list(batch.traj_ids) == [0, 0, 1, 1]
    adv = compute_advantages(batch, AlgoConfig(name="grpo")).value
    # Two trajectories with scores 1 and 0: mean 0.5, unbiased std 0.7071.
    np.testing.assert_allclose(adv, [0.7071, 0.7071, -0.7071, -0.7071], atol=1e-4)


def test_role_agent_without_wia_uses_task_return_only():
    trajectories = [make_trajectory("a", [0, 1], states=["x", "y"]), make_trajectory("a", [0, 0], states=["x", "z"])]
    batch = StepBatch.from_trajectories(trajectories)
    without = compute_advantages(batch, AlgoConfig(name="role_agent", gamma=1.0)).value  # no WIA records
    for t in batch.trajectories:
        for s in t.steps:
            s.extras["wia"] = {"predictions": ["p"], "scores": [1.0]}  # doubles R_t
    with_wia = compute_advantages(batch, AlgoConfig(name="role_agent", gamma=1.0)).value
    # Same sign pattern, different magnitude only through R_t in the shared state "x".
    assert np.sign(with_wia[0]) == np.sign(without[0]) == 1
    np.testing.assert_allclose(with_wia[[1, 3]], without[[1, 3]])  # singleton states: A^S = 0


def _run(tmp_path, name, iterations, extra=()):
    return run(tmp_path / name, iterations, extra)


def _train_records(run_dir):
    return [r for r in metrics(run_dir) if "iteration" in r]


def test_resume_equals_uninterrupted_run(tmp_path):
    full = _run(tmp_path, "full", 2)
    first = _run(tmp_path, "split", 1)  # "killed" after iteration 0's checkpoint
    after_first = trainable(first)
    resumed = _run(tmp_path, "split", 2)
    assert resumed.start_iteration == 1
    moved = [k for k, v in trainable(resumed).items() if not torch.equal(v, after_first[k])]
    assert moved, "iteration 1 did not change the weights: the comparison below would prove nothing"
    for name, value in trainable(full).items():
        assert torch.equal(value, trainable(resumed)[name]), name
    rollouts = lambda run: (tmp_path / run / "rollouts" / "iter_000001.jsonl").read_text()  # noqa: E731
    assert rollouts("full") == rollouts("split")
    train = _train_records(tmp_path / "full")
    assert [r["iteration"] for r in train] == [0, 1]
    assert all(r["update/samples"] > 0 and r["update/grad_norm"] > 0 for r in train)
    assert train == _train_records(tmp_path / "split")
    stats = lambda run: json.loads((tmp_path / run / "summary.json").read_text())["statistics_by_split"]  # noqa: E731
    assert stats("full") == stats("split")  # "before"'s per-game outcomes came back with the checkpoint
    verdicts = [p["verdict"] for s in stats("split").values() for p in s["paired"]]
    assert verdicts and None not in verdicts
    records = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    for key in (
        "train/success",
        "train/valid_action_ratio",
        "train/zero_variance_groups",
        "update/kl",
        "update/clip_frac",
        "update/grad_norm",
        "speed/generated_tokens_per_s",
        "time/update_s",
    ):
        assert key in records[1], key


def test_a_checkpoint_is_a_model_init_from(tmp_path):
    """An iteration's LoRA adapters name their base (roleagent_sft.json), so the folder
    loads as model.init_from: the trained policy, not the base it started from."""
    trainer = _run(tmp_path, "ck", 1, ["eval.at_start=false"])
    adapter = tmp_path / "ck" / "checkpoints" / "iter_000000" / "adapter"
    loaded = load_init_model("tiny", adapter, dtype=torch.float32).eval()
    base = load_policy("tiny", device="cpu", seed=trainer.cfg.seed).model.eval()
    ids = torch.tensor([[5, 17, 42, 9, 3, 11]])
    with torch.no_grad():
        trained, merged, start = (m(ids).logits for m in (trainer.policy.model.eval(), loaded, base))
    assert not torch.allclose(trained, start, atol=1e-4), "training did not move the policy: nothing to compare"
    assert torch.allclose(merged, trained, atol=1e-5)


@pytest.mark.parametrize("algo", ["grpo", "rloo", "gigpo"])
def test_baselines_run(tmp_path, algo):
    trainer = _run(
        tmp_path, algo, 1, [f"algo.name={algo}", "wia.enabled=false", "eval.at_start=false", "optim.kl_coef=0.05"]
    )
    assert (tmp_path / algo / "eval_table.txt").exists()
    assert trainer.evals[-1].label == "after"
    (record,) = _train_records(tmp_path / algo)
    assert record["update/samples"] > 0 and record["update/grad_norm"] > 0  # the baseline trained


def test_agent_in_world_run_writes_memory_and_restores_sampler(tmp_path):
    extra = AIW + ["eval.at_start=false"]
    first = _run(tmp_path, "aiw", 2, extra)
    assert (tmp_path / "aiw" / "failure_memory.sqlite").exists()
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "aiw" / "failure_modes.png").exists()  # Role-Agent Figure 4
    train = _train_records(tmp_path / "aiw")
    assert all("aiw/sampler_entropy" in r and "aiw/retrieved_share" in r for r in train)
    assert sum(r["aiw/n_failures"] for r in train) > 0
    saved = read_checkpoint(tmp_path / "aiw" / "checkpoints" / "iter_000001", lora=True).state["methods"]["aiw"]
    resumed = Trainer(config(tmp_path / "aiw", 2, extra), quiet=True)
    try:
        assert resumed.finished
        assert resumed.method("aiw").state_dict() == saved
        assert saved["sampler"] == first.method("aiw").aiw.sampler.state_dict()
    finally:
        resumed.close()


def test_train_tasks_restrict_the_training_split_and_its_panels():
    from roleagent.config import EnvConfig
    from roleagent.envs.scripted import ScriptedEnv
    from roleagent.evaluation import split_tasks

    env = ScriptedEnv(n_tasks=4)
    chosen = EnvConfig(name="scripted", train_tasks=["scripted/train/002", "scripted/train/000"])
    assert [t.id for t in split_tasks(env, chosen, "train")] == ["scripted/train/002", "scripted/train/000"]
    assert len(split_tasks(env, chosen, "eval")) == 4  # other splits are left whole
    assert len(split_tasks(env, EnvConfig(name="scripted"), "train")) == 4
    with pytest.raises(ValueError, match="no task 'scripted/train/009'"):
        split_tasks(env, EnvConfig(name="scripted", train_tasks=["scripted/train/009"]), "train")
