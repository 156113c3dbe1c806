"""Packed episodes (``optim.pack_episodes``): nested turns trained as one sequence must give
the loss and gradient of training them one turn at a time; turns that do not nest (the
sliding window) must train exactly as before."""

import random

import numpy as np
import pytest
import torch

from roleagent.config import OptimConfig
from roleagent.trainer.advantages import StepBatch
from roleagent.trainer.samples import collate, token_logprobs
from roleagent.trainer.stages import packed_sample, training_samples
from roleagent.trainer.update import Updater
from roleagent.types import Step, Task, Trajectory


def _step(prompt, action, logprobs=None):
    return Step(
        observation="o",
        state_key="s",
        action_text="",
        action="a",
        valid=True,
        prompt_ids=list(prompt),
        action_ids=list(action),
        action_logprobs=list(logprobs if logprobs is not None else [-1.0] * len(action)),
    )


def test_packed_sample_hand_example():
    # the docstring's example: prompts/actions [1]/[2] then [1, 2, 3]/[4, 5]
    run = [(_step([1], [2], [-0.1]), 0), (_step([1, 2, 3], [4, 5], [-0.2, -0.3]), 1)]
    s = packed_sample(run, np.array([0.5, -1.0]))
    assert s.prompt_ids == [1] and s.output_ids == [2, 3, 4, 5]
    assert s.action_mask == [1, 0, 1, 1] and s.token_advantages == [0.5, 0.0, -1.0, -1.0]
    assert s.old_logprobs == [-0.1, 0.0, -0.2, -0.3] and s.n_generated == 3
    assert s.loss_mask(skip_zero=False) == [1.0, 0.0, 1.0, 1.0]
    zero_first = packed_sample(run, np.array([0.0, -1.0]))
    assert zero_first.loss_mask(skip_zero=True) == [0.0, 0.0, 1.0, 1.0] and not zero_first.skippable()
    assert packed_sample(run, np.zeros(2)).skippable()


def _episodes(policy, advantages, *, nested, seed=0):
    """Three-turn episodes with real ids; π_old = current log-probs + noise (ratios ≠ 1, some
    clipped). ``nested``: each prompt extends the previous prompt and action (full context);
    otherwise each prompt is its own window."""
    tok = policy.tokenizer
    gen = torch.Generator().manual_seed(seed)
    trajectories = []
    for k in range(len(advantages)):
        steps, context = [], tok(f"Task {k}: find the key.", add_special_tokens=False)["input_ids"]
        for t in range(3):
            observation = tok(f" Room {t}: a door{' and a chest' * t}. Next?", add_special_tokens=False)["input_ids"]
            prompt = context + observation if nested else observation
            action = tok(" go left" + " now" * (k + t), add_special_tokens=False)["input_ids"]
            *tensors, keep = collate([_sample_of(prompt, action)], tok.pad_token_id, torch.device("cpu"))
            input_ids, attention, positions, targets = tensors[:4]
            with torch.no_grad():
                lp, _ = token_logprobs(policy.model, input_ids, attention, positions, targets, keep)
            old = (lp[0] + 0.3 * torch.randn(len(action), generator=gen)).tolist()
            steps.append(_step(prompt, action, old))
            context = prompt + action
        trajectories.append(Trajectory(task=Task(f"t{k}", "scripted"), steps=steps))
    batch = StepBatch.from_trajectories(trajectories)
    return batch, np.asarray(advantages, dtype=np.float64).reshape(-1)


def _sample_of(prompt, action):
    from roleagent.trainer.samples import TrainSample

    return TrainSample(prompt, action, [0.0] * len(action), 1.0)


def _update(policy, samples, **optim):
    """Updater.update with the optimizer step replaced by a record of the gradients; the
    reference (KL on) is the policy with perturbed weights, so the KL term has a gradient."""
    cfg = OptimConfig(grad_clip=1e9, micro_batch_tokens=256, **optim)
    updater = Updater(policy, cfg)
    if updater.reference is not None:
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in updater.reference.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    params = [p for p in policy.model.parameters() if p.requires_grad]
    recorded = []
    updater.optimizer.step = lambda: recorded.append(
        torch.cat([torch.zeros_like(p).flatten() if p.grad is None else p.grad.detach().flatten() for p in params])
    )
    metrics = updater.update(samples, random.Random(0))
    return recorded, metrics


# each row: one episode's three advantages; zero-advantage turns inside episodes, one whole
# episode at 0
ADVANTAGES = [[1.0, 0.0, -0.5], [0.0, 0.0, 0.0], [-1.0, 2.0, 0.0]]


@pytest.mark.parametrize(
    "optim",
    [
        dict(),
        dict(skip_zero_advantage=False),
        dict(kl_coef=0.1),
        dict(kl_coef=0.1, skip_zero_advantage=False, entropy_coef=0.01),
        dict(dual_clip=3.0),
    ],
)
def test_packed_episode_gradient_equals_unpacked(tiny_policy, optim):
    batch, advantages = _episodes(tiny_policy, ADVANTAGES, nested=True)
    unpacked = training_samples(batch, advantages, pack=False)
    packed = training_samples(batch, advantages, pack=True)
    assert len(unpacked) == 9 and len(packed) == 3  # one sample per episode
    assert sum(s.n_generated for s in packed) == sum(len(s.output_ids) for s in unpacked)
    grads_u, m_u = _update(tiny_policy, unpacked, **optim)
    grads_p, m_p = _update(tiny_policy, packed, **optim)
    assert len(grads_u) == len(grads_p) == 1 and float(grads_u[0].norm()) > 0
    assert float((grads_p[0] - grads_u[0]).norm() / grads_u[0].norm()) < 1e-5
    for key in ("pg_loss", "kl", "entropy", "clip_frac", "approx_kl", "ratio_mean"):
        assert m_p[key] == pytest.approx(m_u[key], rel=1e-5, abs=1e-7), key
    assert m_p["grad_norm"] == pytest.approx(m_u["grad_norm"], rel=1e-5)
    # fewer tokens through the model: each episode's prefix is read once
    assert m_p["trained_tokens"] < m_u["trained_tokens"]


def test_window_mode_is_unchanged(tiny_policy):
    # turns that do not nest stay one sample each, in the same order: the update is
    # byte-identical with packing on or off
    batch, advantages = _episodes(tiny_policy, ADVANTAGES, nested=False)
    unpacked = training_samples(batch, advantages, pack=False)
    packed = training_samples(batch, advantages, pack=True)
    assert packed == unpacked and all(s.action_mask is None for s in packed)
    optim = dict(mini_batches=2, kl_coef=0.1)
    grads_u, m_u = _update(tiny_policy, unpacked, **optim)
    grads_p, m_p = _update(tiny_policy, packed, **optim)
    assert m_p == m_u
    assert all(torch.equal(a, b) for a, b in zip(grads_u, grads_p))


def test_packing_stops_where_turns_stop_nesting(tiny_policy):
    # a truncated (windowed) turn in the middle splits the episode into two runs
    run1 = [_step([1, 2], [3]), _step([1, 2, 3, 4], [5, 6]), _step([9, 4], [7])]
    run2 = [_step([9, 4, 7, 8], [2])]
    trajectory = Trajectory(task=Task("t", "scripted"), steps=run1 + run2)
    other = Trajectory(task=Task("u", "scripted"), steps=[_step([9, 4, 7, 8, 2, 1], [3])])  # nests, other episode
    batch = StepBatch.from_trajectories([trajectory, other])
    samples = training_samples(batch, np.array([1.0, 2.0, 3.0, 4.0, 5.0]), pack=True)
    assert [(s.prompt_ids, s.output_ids) for s in samples] == [
        ([1, 2], [3, 4, 5, 6]),
        ([9, 4], [7, 8, 2]),
        ([9, 4, 7, 8, 2, 1], [3]),
    ]
    assert samples[1].token_advantages == [3.0, 0.0, 4.0] and samples[2].action_mask is None


def test_extra_samples_stay_separate():
    class Extra:
        def extra_samples(self, step, advantage):
            return [_sample_of(step.prompt_ids + step.action_ids, [0])]

    trajectory = Trajectory(task=Task("t", "scripted"), steps=[_step([1], [2]), _step([1, 2, 3], [4])])
    batch = StepBatch.from_trajectories([trajectory])
    samples = training_samples(batch, np.array([1.0, -1.0]), [Extra()], pack=True)
    assert [s.output_ids for s in samples] == [[2, 3, 4], [0], [0]]
    assert [s.prompt_ids for s in samples[1:]] == [[1, 2], [1, 2, 3, 4]]
