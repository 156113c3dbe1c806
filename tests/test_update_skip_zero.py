"""Skipping zero-advantage samples must not rescale the gradient of the others.

verl-agent's token-mean runs over every response token of the mini-batch, zero advantages
included; skipping the forward/backward of zero-advantage samples is a saving only when
their tokens stay in the denominator.
"""

import random

import numpy as np
import pytest
import torch

from roleagent.config import OptimConfig
from roleagent.trainer.advantages import StepBatch
from roleagent.trainer.samples import collate, token_logprobs
from roleagent.trainer.stages import training_samples
from roleagent.trainer.update import Updater
from roleagent.types import Step, Task, Trajectory


@pytest.fixture(scope="module")
def policy():
    from roleagent.models.loading import load_policy

    return load_policy("tiny", device="cpu", dtype="float32", seed=0)


def _batch(policy, advantages_per_traj):
    """Two-step trajectories with real prompt/output ids and π_old = the current policy."""
    tok = policy.tokenizer
    trajectories = []
    for k, _ in enumerate(advantages_per_traj):
        steps = []
        for t in range(2):
            prompt = tok(f"Room {k} step {t}. Which way?", add_special_tokens=False)["input_ids"]
            output = tok(" go left" + " now" * (k + t), add_special_tokens=False)["input_ids"]
            steps.append(
                Step(
                    observation="o",
                    state_key=f"s{t}",
                    prompt_ids=prompt,
                    action_ids=output,
                    action_logprobs=[0.0] * len(output),
                    action_text="",
                    action="a",
                    valid=True,
                )
            )
        trajectories.append(Trajectory(task=Task("t", "scripted"), steps=steps))
    batch = StepBatch.from_trajectories(trajectories)
    advantages = np.repeat(np.asarray(advantages_per_traj, dtype=np.float64), 2)
    samples = training_samples(batch, advantages)
    for s in samples:  # old log-probs = current ones, so every ratio is 1 and nothing is clipped
        *tensors, keep = collate([s], tok.pad_token_id, torch.device("cpu"))
        input_ids, attention, positions, targets, _, _, _ = tensors
        with torch.no_grad():
            lp, _ = token_logprobs(policy.model, input_ids, attention, positions, targets, keep)
        s.old_logprobs = lp[0].tolist()
    return samples


def _gradients(policy, samples, *, skip, mini_batches=1):
    """Run Updater.update but record the gradients of each optimizer step instead of stepping."""
    cfg = OptimConfig(
        lr=1e-3,
        skip_zero_advantage=skip,
        mini_batches=mini_batches,
        kl_coef=0.0,
        entropy_coef=0.0,
        grad_clip=1e9,
        micro_batch_tokens=64,
    )
    updater = Updater(policy, cfg)
    recorded = []
    params = [p for p in policy.model.parameters() if p.requires_grad]
    updater.optimizer.step = lambda: recorded.append(
        [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params]
    )
    metrics = updater.update(samples, random.Random(0))
    return recorded, metrics


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_skipping_zero_advantages_leaves_the_gradient_unchanged(policy, mini_batches):
    # four trajectories, two of them with advantage 0 (a zero-variance group): skipping them
    # must give exactly the gradient of training on all of them (their pg term is 0)
    samples = _batch(policy, [1.0, 0.0, -1.0, 0.0])
    with_skip, m_skip = _gradients(policy, samples, skip=True, mini_batches=mini_batches)
    without, m_all = _gradients(policy, samples, skip=False, mini_batches=mini_batches)
    assert len(with_skip) == len(without) == mini_batches
    for step_skip, step_all in zip(with_skip, without):
        flat_skip = torch.cat([g.flatten() for g in step_skip])
        flat_all = torch.cat([g.flatten() for g in step_all])
        # equal up to float32 summation order (micro-batches pad differently); a rescaled
        # update (the zero-advantage tokens leaving the denominator: ×2 here) is far outside
        assert float((flat_skip - flat_all).norm() / flat_all.norm()) < 1e-4
    assert m_skip["grad_norm"] == pytest.approx(m_all["grad_norm"], rel=1e-4) and m_all["grad_norm"] > 0
    assert m_skip["samples"] == 4 and m_skip["skipped_samples"] == 4 and m_all["samples"] == 8


def test_all_zero_advantages_make_no_step(policy):
    samples = _batch(policy, [0.0, 0.0])
    recorded, metrics = _gradients(policy, samples, skip=True)
    assert recorded == [] and metrics["samples"] == 0 and metrics["skipped_samples"] == 4
