"""GAE, the clipped value loss and explained variance by hand (roleagent.algos.gae), the
``ppo`` estimator on a StepBatch, and the ``critic`` config checks."""

import math

import numpy as np
import pytest
import torch

from roleagent.algos.gae import clipped_value_loss, explained_variance, gae, whiten
from roleagent.config import AlgoConfig, ConfigError
from roleagent.trainer.advantages import StepBatch, compute_advantages
from tests.run_helpers import checked_config, make_trajectory


def reference_gae(rewards, values, gamma, lam):
    """The textbook loop over one trajectory, V = 0 after the end."""
    adv, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        running = rewards[t] + gamma * next_value - values[t] + gamma * lam * running
        adv[t] = running
    return np.array(adv), np.array(adv) + np.array(values)


# ------------------------------------------------------------------ docstring examples ---


def test_gae_docstring_example():
    adv, ret = gae(["a", "a"], [0, 1], [0.5, 0.5], gamma=0.9, lam=0.5)
    np.testing.assert_allclose(adv, [0.175, 0.5])
    np.testing.assert_allclose(ret, [0.675, 1.0])


def test_gae_lambda_one_is_discounted_return_minus_value():
    adv, ret = gae(["a", "a"], [0, 1], [0.5, 0.5], gamma=0.9, lam=1.0)
    np.testing.assert_allclose(adv, [0.4, 0.5])
    np.testing.assert_allclose(ret, [0.9, 1.0])  # the discounted returns


def test_gae_lambda_zero_is_one_step_td_error():
    # δ_0 = 0 + 0.9·0.5 − 0.5 = −0.05; δ_1 = 1 − 0.5 = 0.5
    adv, ret = gae(["a", "a"], [0, 1], [0.5, 0.5], gamma=0.9, lam=0.0)
    np.testing.assert_allclose(adv, [-0.05, 0.5])
    np.testing.assert_allclose(ret, [0.45, 1.0])


def test_gae_bootstrap_at_the_last_step_only():
    # δ_1 = 1 + 0.9·2 − 0.5 = 2.3; A_0 = −0.05 + 0.45·2.3 = 0.985; the first entry is never read
    adv, _ = gae(["a", "a"], [0, 1], [0.5, 0.5], gamma=0.9, lam=0.5, bootstrap=[99.0, 2.0])
    np.testing.assert_allclose(adv, [0.985, 2.3])


def test_gae_episode_ends_cut_the_recursion_interleaved():
    # trajectories a (3 steps) and b (2 steps), interleaved; b's end must not see a's values
    ids = ["a", "b", "a", "b", "a"]
    rewards = [0.0, 1.0, 0.0, -1.0, 2.0]
    values = [0.2, 0.4, 0.1, 0.3, 0.6]
    adv, ret = gae(ids, rewards, values, gamma=0.5, lam=0.8)
    # a: δ2 = 2 − 0.6 = 1.4; δ1 = 0 + 0.3 − 0.1 = 0.2, A1 = 0.2 + 0.4·1.4 = 0.76;
    #    δ0 = 0 + 0.05 − 0.2 = −0.15, A0 = −0.15 + 0.4·0.76 = 0.154
    # b: δ1 = −1 − 0.3 = −1.3; δ0 = 1 + 0.15 − 0.4 = 0.75, A0 = 0.75 + 0.4·(−1.3) = 0.23
    np.testing.assert_allclose(adv, [0.154, 0.23, 0.76, -1.3, 1.4])
    np.testing.assert_allclose(ret, np.array(adv) + values)


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.95, 0.95), (0.9, 0.0), (0.5, 0.3)])
def test_gae_matches_the_textbook_loop(gamma, lam):
    rng = np.random.default_rng(0)
    lengths = [1, 4, 7]
    ids = np.concatenate([[i] * n for i, n in enumerate(lengths)])
    rewards, values = rng.normal(size=ids.size), rng.normal(size=ids.size)
    adv, ret = gae(ids, rewards, values, gamma=gamma, lam=lam)
    for i in range(len(lengths)):
        ref_adv, ref_ret = reference_gae(rewards[ids == i], values[ids == i], gamma, lam)
        np.testing.assert_allclose(adv[ids == i], ref_adv)
        np.testing.assert_allclose(ret[ids == i], ref_ret)


def test_gae_rejects_bad_input():
    with pytest.raises(ValueError, match="values has shape"):
        gae(["a", "a"], [0, 1], [0.5], gamma=0.9, lam=0.5)
    with pytest.raises(ValueError, match="finite"):
        gae(["a"], [0], [float("nan")], gamma=0.9, lam=0.5)
    with pytest.raises(ValueError, match="bootstrap"):
        gae(["a"], [0], [0], gamma=0.9, lam=0.5, bootstrap=[1, 2])
    adv, ret = gae([], [], [], gamma=0.9, lam=0.5)
    assert adv.shape == ret.shape == (0,)


def test_whiten_docstring_example():
    np.testing.assert_allclose(whiten(np.array([1.0, 2.0, 3.0])), [-1.2247, 0.0, 1.2247], atol=1e-4)
    np.testing.assert_allclose(whiten(np.array([1.0, 2.0, 3.0]), std=False), [-1.0, 0.0, 1.0])
    np.testing.assert_allclose(whiten(np.array([5.0])), [0.0])


def test_clipped_value_loss_docstring_example():
    values = torch.tensor([1.0, 0.6], requires_grad=True)
    loss, metrics = clipped_value_loss(values, torch.tensor([0.5, 0.5]), torch.tensor([2.0, 0.0]), clip=0.2)
    assert loss.item() == pytest.approx(0.5125)
    assert metrics["value_clip_frac"] == pytest.approx(0.5)
    loss.backward()
    # the first sample's clipped term is the larger: clip(V) is flat at 1.0, so no gradient;
    # the second: ½ · 2 · (0.6 − 0) / 2 = 0.3
    np.testing.assert_allclose(values.grad.numpy(), [0.0, 0.3], atol=1e-6)
    unclipped, metrics = clipped_value_loss(values, torch.tensor([0.5, 0.5]), torch.tensor([2.0, 0.0]), clip=None)
    assert unclipped.item() == pytest.approx(0.34)
    assert metrics["value_clip_frac"] == 0.0


def test_explained_variance_docstring_example():
    assert explained_variance([1, 2, 2], [1, 2, 3]) == pytest.approx(2 / 3)
    assert explained_variance([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert math.isnan(explained_variance([0, 0], [1, 1]))


# ---------------------------------------------------------------- the ppo estimator ------


def _ppo_batch(values, rewards_by_traj, penalties=None):
    trajectories = [make_trajectory(f"t{i}", r) for i, r in enumerate(rewards_by_traj)]
    batch = StepBatch.from_trajectories(trajectories)
    if penalties is not None:
        batch.penalties = np.asarray(penalties, dtype=np.float64)
    batch.values = np.asarray(values, dtype=np.float64)
    return batch


def test_ppo_estimator_is_whitened_gae_with_parts():
    batch = _ppo_batch([0.5, 0.5, 0.0], [[0, 1], [2]])
    cfg = AlgoConfig(name="ppo", gamma=0.9, lam=0.5, norm="mean_std_norm")
    out = compute_advantages(batch, cfg)
    # trajectory 0 as the docstring example; trajectory 1: one step, A = 2 − 0 = 2
    np.testing.assert_allclose(out.parts["gae"], [0.175, 0.5, 2.0])
    np.testing.assert_allclose(out.parts["returns"], [0.675, 1.0, 2.0])
    np.testing.assert_allclose(out.parts["value"], [0.5, 0.5, 0.0])
    raw = np.array([0.175, 0.5, 2.0])
    np.testing.assert_allclose(out.value, (raw - raw.mean()) / (raw.std() + 1e-6))
    centred = compute_advantages(batch, AlgoConfig(name="ppo", gamma=0.9, lam=0.5, norm="mean_norm"))
    np.testing.assert_allclose(centred.value, raw - raw.mean())


def test_ppo_estimator_places_the_invalid_penalty():
    values, rewards, penalties = [0.5, 0.5], [[0, 1]], [0.0, 0.1]
    # step (verl-agent): GAE on raw rewards, then 0.1 off the invalid step's advantage and target
    step = compute_advantages(_ppo_batch(values, rewards, penalties), AlgoConfig(name="ppo", gamma=0.9, lam=0.5))
    np.testing.assert_allclose(step.parts["gae"], [0.175, 0.4])
    np.testing.assert_allclose(step.parts["returns"], [0.675, 0.9])
    # reward: rewards [0, 0.9] → δ_1 = 0.4, A_0 = −0.05 + 0.45·0.4 = 0.13
    cfg = AlgoConfig(name="ppo", gamma=0.9, lam=0.5, penalty_placement="reward")
    folded = compute_advantages(_ppo_batch(values, rewards, penalties), cfg)
    np.testing.assert_allclose(folded.parts["gae"], [0.13, 0.4])


def test_ppo_estimator_without_values_is_a_clear_error():
    batch = StepBatch.from_trajectories([make_trajectory("t", [0, 1])])
    with pytest.raises(ValueError, match="critic.enabled"):
        compute_advantages(batch, AlgoConfig(name="ppo"))


# ------------------------------------------------------------------------- config ---------


def test_critic_config_checks():
    with pytest.raises(ConfigError, match="critic.enabled=true"):
        checked_config(None, ["algo.name=ppo", "model.name=tiny"])
    for bad, key in [
        ("critic.backbone=both", "critic.backbone"),
        ("critic.lr=0", "critic.lr"),
        ("critic.value_clip=-1", "critic.value_clip"),
        ("algo.lam=1.5", "algo.lam"),
    ]:
        with pytest.raises(ConfigError, match=key):
            checked_config(None, ["algo.name=ppo", "critic.enabled=true", "model.name=tiny", bad])
    with pytest.raises(ConfigError, match="no value targets"):
        checked_config(None, ["critic.enabled=true", "model.name=tiny", "algo.name=grpo", "wia.enabled=false"])
    with pytest.raises(ConfigError, match="unknown config key 'critic.lamda'"):
        checked_config(None, ["critic.lamda=0.9"])
    ok = ["algo.name=ppo", "critic.enabled=true", "critic.value_clip=null", "model.name=tiny", "wia.enabled=false"]
    cfg = checked_config(None, ok)
    assert cfg.critic.value_clip is None and cfg.algo.lam == 0.95
