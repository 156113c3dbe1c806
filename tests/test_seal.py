"""SEAL diagnosis-guided advantage reweighting and its closed loop (pure numpy)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roleagent.algos.seal import (
    STATIC_UTILITIES,
    ClosedLoopWeights,
    closed_loop_target,
    expand_to_samples,
    reweight_advantages,
    seal_trajectory_weights,
    tag_statistics,
    trajectory_weight,
)


def test_static_utilities_match_the_authors_config():
    assert STATIC_UTILITIES == {
        "spurious_tool_call": 2.0,
        "correct_abstention": 1.8,
        "empty_turn_model_response": 1.5,
        "state_mismatch": 1.0,
        "response_mismatch": 0.9,
        "instance_mismatch": 0.6,
        "pass": 1.0,
    }


def test_trajectory_weight_is_clipped_mean():
    w = seal_trajectory_weights(
        [
            ["pass", "pass"],  # 1.0
            ["spurious_tool_call", "empty_turn_model_response"],  # 1.75
            ["instance_mismatch", "instance_mismatch"],  # 0.6
            ["state_mismatch", "response_mismatch", "instance_mismatch"],  # 2.5/3
            ["pass", "checker_error", "gt_error"],  # excluded -> 1.0
            ["checker_error"],  # nothing usable -> 1.0
            [],  # -> 1.0
        ]
    )
    np.testing.assert_allclose(w, [1.0, 1.75, 0.6, 2.5 / 3, 1.0, 1.0, 1.0])
    assert trajectory_weight(["spurious_tool_call"], {"spurious_tool_call": 5.0}) == 2.0
    assert trajectory_weight(["instance_mismatch"], {"instance_mismatch": 0.1}) == 0.5
    assert trajectory_weight(["unknown_tag"]) == 1.0


def test_reweight_never_flips_sign_and_broadcasts():
    adv = np.array([-1.5, 0.0, 2.0, 0.7])
    w = np.array([2.0, 1.3, 0.5, 0.6])
    out = reweight_advantages(adv, w)
    np.testing.assert_allclose(out, adv * w)
    assert np.all(np.sign(out) == np.sign(adv))
    tok = np.ones((4, 3)) * adv[:, None]
    np.testing.assert_allclose(reweight_advantages(tok, w), tok * w[:, None])
    with pytest.raises(ValueError):
        reweight_advantages(adv, np.array([1.0, -1.0, 1.0, 1.0]))
    with pytest.raises(ValueError):
        reweight_advantages(adv, np.array([1.0, 0.0, 1.0, 1.0]))
    np.testing.assert_allclose(expand_to_samples([0.5, 2.0], [0, 0, 1, 1, 1]), [0.5, 0.5, 2.0, 2.0, 2.0])


def test_tag_statistics_count_once_per_trajectory():
    s = tag_statistics([["pass", "state_mismatch", "state_mismatch"], ["pass"], ["gt_error"]], [0.0, 1.0, 0.0])
    assert s["state_mismatch"] == {"count": 1, "prevalence": 1 / 3, "reward_mean": 0.0}
    assert s["pass"] == {"count": 2, "prevalence": 2 / 3, "reward_mean": 0.5}
    assert "gt_error" not in s


def test_closed_loop_target_formula():
    # base * (1 + prevalence * (1 - reward_mean) * min(1, count/32)), clamped to [0.5, 2]
    assert closed_loop_target(1.0, 16, 0.5, 0.2) == pytest.approx(1.0 * (1 + 0.5 * 0.8 * 0.5))
    assert closed_loop_target(0.9, 64, 0.4, 0.0) == pytest.approx(0.9 * 1.4)
    assert closed_loop_target(1.8, 64, 1.0, 0.0) == 2.0
    assert closed_loop_target(0.4, 0, 0.0, 0.0) == 0.5


def test_closed_loop_ema_window_and_state():
    cl = ClosedLoopWeights(window=64)
    labels = [["state_mismatch", "pass"]] * 32 + [["pass"]] * 32
    rewards = [0.0] * 32 + [1.0] * 32
    w = cl.update(labels, rewards)
    # state_mismatch: count 32, prevalence 0.5, reward_mean 0 -> target 1.5; EMA from 1.0
    assert w["state_mismatch"] == pytest.approx(0.75 * 1.0 + 0.25 * 1.5)
    # pass: target = base (authors' PASS_TAG branch), although count 64, prevalence 1,
    # reward_mean 0.5 would give 1.5 by the formula
    assert w["pass"] == 1.0
    # tags absent from the window decay toward their base (target = base)
    assert w["spurious_tool_call"] == pytest.approx(2.0)
    w2 = cl.update(labels, rewards)
    assert w2["state_mismatch"] == pytest.approx(0.75 * w["state_mismatch"] + 0.25 * 1.5)
    # the window forgets: only successes for a while -> state_mismatch goes back to base
    for _ in range(40):
        cl.update([["pass"]] * 64, [1.0] * 64)
    assert cl.utilities()["state_mismatch"] == pytest.approx(1.0, abs=1e-4)
    assert cl.utilities()["pass"] == pytest.approx(1.0, abs=1e-4)  # reward_mean 1 -> base
    restored = ClosedLoopWeights()
    restored.load_state_dict(json.loads(json.dumps(cl.state_dict())))
    assert restored.utilities() == cl.utilities() and restored.updates == cl.updates
    a = restored.update([["state_mismatch"]], [0.0])
    b = cl.update([["state_mismatch"]], [0.0])
    assert a == b
    np.testing.assert_allclose(
        cl.trajectory_weights([["state_mismatch"]]), [min(2.0, cl.utilities()["state_mismatch"])]
    )


def test_closed_loop_weights_stay_in_range():
    rng = np.random.default_rng(0)
    cl = ClosedLoopWeights(window=128)
    tags = list(STATIC_UTILITIES)
    for _ in range(50):
        labels = [list(rng.choice(tags, size=3)) for _ in range(32)]
        cl.update(labels, rng.integers(0, 2, size=32).tolist())
        assert all(0.5 <= v <= 2.0 for v in cl.utilities().values())


def test_pass_utility_never_moves():
    """The worked example of the module docstring, then 21 batches in which every failing
    trajectory also has passing turns: the formula would pull pass to
    1·(1 + 1·(1 − 0.5)·1) = 1.5 and up-weight successes; the authors keep ρ_pass = base."""
    cl = ClosedLoopWeights(window=64)
    labels = [["state_mismatch", "pass"]] * 32 + [["pass"]] * 32
    rewards = [0.0] * 32 + [1.0] * 32
    w = cl.update(labels, rewards)
    assert w["state_mismatch"] == pytest.approx(1.125) and w["pass"] == 1.0
    for _ in range(20):
        cl.update(labels, rewards)
    assert cl.utilities()["pass"] == 1.0
    assert cl.utilities()["state_mismatch"] == pytest.approx(1.5 - 0.5 * 0.75**21)
    # a successful all-pass trajectory keeps weight 1; a configured base is kept as is
    np.testing.assert_allclose(cl.trajectory_weights([["pass", "pass"]]), [1.0])
    custom = ClosedLoopWeights({**STATIC_UTILITIES, "pass": 0.8}, window=64)
    assert custom.update(labels, rewards)["pass"] == 0.8
