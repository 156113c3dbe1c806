"""Returns and episode-level advantages (GRPO eq. 1, RLOO, GiGPO episode branch)."""

import math

import numpy as np
import pytest

from roleagent.algos import (
    apply_invalid_penalty,
    discounted_returns,
    episode_scores,
    gigpo_episode_advantages,
    grpo_advantages,
    rloo_advantages,
)

EPS = 1e-6


def test_discounted_returns_per_trajectory():
    # a: rewards [1, 0, 2], γ = 0.5 → R2 = 2, R1 = 0 + 0.5·2 = 1, R0 = 1 + 0.5·1 = 1.5
    # b: [3] → 3 (does not leak into a)
    out = discounted_returns(["a", "a", "a", "b"], [1, 0, 2, 3], gamma=0.5)
    np.testing.assert_allclose(out, [1.5, 1.0, 2.0, 3.0])


def test_discounted_returns_gamma_one_is_reward_to_go_and_zero_is_reward():
    r = [1.0, 2.0, 3.0, 4.0]
    np.testing.assert_allclose(discounted_returns([7, 7, 9, 9], r, gamma=1.0), [3, 2, 7, 4])
    np.testing.assert_allclose(discounted_returns([7, 7, 9, 9], r, gamma=0.0), r)


def test_discounted_returns_matches_loop_on_ragged_batch():
    rng = np.random.default_rng(0)
    lengths = [1, 5, 3, 12, 2]
    traj = np.repeat(np.arange(len(lengths)), lengths)
    r = rng.normal(size=traj.size)
    expected = []
    for j, n in enumerate(lengths):
        rr = r[traj == j]
        run, out = 0.0, [0.0] * n
        for t in reversed(range(n)):
            run = rr[t] + 0.95 * run
            out[t] = run
        expected += out
    np.testing.assert_array_equal(discounted_returns(traj, r, gamma=0.95), expected)  # bit-identical


def test_interleaved_trajectories_are_accepted():
    # step-major batch: a0, b0, a1, b1, a2. a: rewards [1, 0, 2] → [1.5, 1.0, 2.0] (γ = 0.5);
    # b: [3, 4] → [3 + 0.5·4, 4] = [5, 4]
    out = discounted_returns(["a", "b", "a", "b", "a"], [1, 3, 0, 4, 2], gamma=0.5)
    np.testing.assert_allclose(out, [1.5, 5.0, 1.0, 4.0, 2.0])
    np.testing.assert_allclose(episode_scores(["a", "b", "a"], [1, 3, 2]), [3, 3, 3])
    # episode advantages are per trajectory whatever the layout: GRPO scores a 3, b 7
    np.testing.assert_allclose(
        grpo_advantages([0] * 5, ["a", "b", "a", "b", "a"], [1, 3, 0, 4, 2], mode="mean_norm"), [-2, 2, -2, 2, -2]
    )


def test_trajectory_layout_interleaved_positions():
    from roleagent.algos._segments import trajectory_layout

    traj, pos, lengths = trajectory_layout(["x", "y", "x", "z", "y", "x"])
    assert traj.tolist() == [0, 1, 0, 2, 1, 0]
    assert pos.tolist() == [0, 0, 1, 0, 1, 2]
    assert lengths.tolist() == [3, 2, 1]


def test_trajectory_spanning_two_groups_is_rejected():
    with pytest.raises(ValueError, match="same group"):
        grpo_advantages(["g1", "g2"], ["a", "a"], [0, 1])


def test_episode_scores_broadcast():
    np.testing.assert_allclose(episode_scores(["a", "a", "b"], [0.5, 1, -1]), [1.5, 1.5, -1.0])


def test_step_penalty_placement_grpo_and_rloo():
    # one group: a = rewards [0, 1] with the first step invalid (penalty 0.1), b = [0]
    # "step": trajectory scores from raw rewards (1, 0); the penalty lowers a0's value only
    g, t, r, p = [0, 0, 0], ["a", "a", "b"], [0, 1, 0], [0.1, 0, 0]
    out = grpo_advantages(g, t, r, penalties=p, mode="mean_norm")
    np.testing.assert_allclose(out, [0.5 - 0.1, 0.5, -0.5])
    out = grpo_advantages(g, t, r, penalties=p, penalty_placement="reward", mode="mean_norm")
    np.testing.assert_allclose(out, [0.45, 0.45, -0.45])  # folded: scores 0.9 and 0
    np.testing.assert_allclose(rloo_advantages(g, t, r, penalties=p), [0.9, 1.0, -1.0])
    with pytest.raises(ValueError, match="placement"):
        grpo_advantages(g, t, r, penalties=p, penalty_placement="nope")


def test_invalid_penalty():
    out = apply_invalid_penalty([0.0, 1.0, 0.0], [True, True, False])
    np.testing.assert_allclose(out, [0.0, 1.0, -0.1])
    out = apply_invalid_penalty(np.array([1.0, 1.0]), np.array([False, False]), penalty=0.25)
    np.testing.assert_allclose(out, [0.75, 0.75])


def test_grpo_counts_each_trajectory_once():
    # group g: a (2 steps, score 1), b (1 step, score 0) → trajectory scores [1, 0]
    # mean 0.5, unbiased std sqrt(0.5) = 0.70711 → ±0.5/0.70711 = ±0.70711
    out = grpo_advantages(["g"] * 3, ["a", "a", "b"], [0, 1, 0])
    s = 0.5 / (math.sqrt(0.5) + EPS)
    np.testing.assert_allclose(out, [s, s, -s])
    # mean_norm: no division
    out = grpo_advantages(["g"] * 3, ["a", "a", "b"], [0, 1, 0], mode="mean_norm")
    np.testing.assert_allclose(out, [0.5, 0.5, -0.5])


def test_grpo_singleton_group_is_mean0_std1_and_equal_rewards_zero():
    # group h has one trajectory with score 2 → 2 / (1 + eps); group g all equal → 0
    out = grpo_advantages(["h", "h", "g", "g"], ["x", "x", "y", "z"], [1, 1, 0.3, 0.3])
    np.testing.assert_allclose(out, [2 / (1 + EPS), 2 / (1 + EPS), 0.0, 0.0], atol=1e-9)


def test_grpo_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode"):
        grpo_advantages([0], [0], [1.0], mode="std")


def test_rloo_leave_one_out():
    # scores 1, 0, 0, 3 in one group of 4: baselines (0+0+3)/3=1, (1+0+3)/3, (1+0+3)/3, 1/3
    out = rloo_advantages([0, 0, 0, 0, 0], ["a", "b", "c", "d", "d"], [1, 0, 0, 1, 2])
    np.testing.assert_allclose(out, [0.0, -4 / 3, -4 / 3, 3 - 1 / 3, 3 - 1 / 3])


def test_rloo_singleton_group_is_zero():
    np.testing.assert_allclose(rloo_advantages(["g", "g"], ["a", "a"], [1, 1]), [0.0, 0.0])


def test_gigpo_episode_counts_step_samples():
    # samples carry scores [1, 1, 0] → mean 2/3, unbiased std sqrt(1/3) = 0.57735
    out = gigpo_episode_advantages(["g"] * 3, ["a", "a", "b"], [0, 1, 0])
    std = math.sqrt(1 / 3)
    np.testing.assert_allclose(out, [(1 / 3) / (std + EPS)] * 2 + [(-2 / 3) / (std + EPS)])
    out = gigpo_episode_advantages(["g"] * 3, ["a", "a", "b"], [0, 1, 0], mode="mean_norm")
    np.testing.assert_allclose(out, [1 / 3, 1 / 3, -2 / 3])


def test_gigpo_episode_singleton_is_per_step_sample():
    # verl-agent counts step samples: one trajectory of 2 steps is NOT a singleton
    # (mean = score, std = 0 → 0); one trajectory of 1 step is (mean 0, std 1 → score).
    out = gigpo_episode_advantages(["g", "g", "h"], ["a", "a", "b"], [1, 1, 5])
    np.testing.assert_allclose(out, [0.0, 0.0, 5 / (1 + EPS)])
    out = gigpo_episode_advantages(["g", "g", "h"], ["a", "a", "b"], [1, 1, 5], mode="mean_norm")
    np.testing.assert_allclose(out, [0.0, 0.0, 5.0])


def test_group_and_traj_ids_accept_mixed_hashables():
    # int 1 and str "1" are different groups; tuples are fine as ids
    out = grpo_advantages([1, 1, "1", "1"], [(0, 0), (0, 1), (1, 0), (1, 1)], [1, 0, 2, 2], mode="mean_norm")
    np.testing.assert_allclose(out, [0.5, -0.5, 0.0, 0.0])
