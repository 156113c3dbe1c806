"""Agent-In-World task distribution: boosts, decay, floor/cap, sampling, state."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roleagent.methods.role_agent.aiw.sampler import TaskSampler

IDS = [f"env/train/{i:03d}" for i in range(10)]


def test_uniform_start():
    s = TaskSampler(IDS)
    np.testing.assert_allclose(s.probabilities(), np.full(10, 0.1))
    assert s.entropy() == pytest.approx(1.0)


def test_boost_and_decay_toward_uniform():
    s = TaskSampler(IDS, decay=0.5, floor=0.2, cap=5.0)
    assert s.boost([IDS[0], IDS[0], IDS[1]], 1.0) == 3
    assert s.weights[0] == 3.0 and s.weights[1] == 2.0
    p = s.probabilities()
    assert p[0] == pytest.approx(3 / 13) and p[2] == pytest.approx(1 / 13)
    assert s.entropy() < 1.0
    s.decay()
    assert s.weights[0] == pytest.approx(2.0) and s.weights[1] == pytest.approx(1.5)
    for _ in range(60):
        s.decay()
    np.testing.assert_allclose(s.weights, 1.0, atol=1e-12)


def test_weight_cap_and_probability_bounds():
    s = TaskSampler(IDS, floor=0.2, cap=3.0)
    s.boost([IDS[0]] * 100, 1.0)
    assert s.weights[0] == 3.0  # weight clipped
    big = [f"t{i}" for i in range(100)]
    s = TaskSampler(big, floor=0.8, cap=2.0)
    s.boost(big[:60], 1.0)  # 60 tasks at weight 2 starve the others below floor
    p = s.probabilities()
    assert p.sum() == pytest.approx(1.0)
    assert p.min() >= 0.8 / 100 - 1e-12 and p.max() <= 2.0 / 100 + 1e-12
    assert p[99] == pytest.approx(0.8 / 100)  # unboosted tasks held at the floor
    # negative boost: floor on the weight and on the probability
    s = TaskSampler(IDS, floor=0.25, cap=4.0)
    s.boost([IDS[3]], -10.0)
    assert s.weights[3] == 0.25
    assert s.probabilities()[3] >= 0.25 / 10 - 1e-12


def test_bad_settings():
    with pytest.raises(ValueError):
        TaskSampler([])
    with pytest.raises(ValueError):
        TaskSampler(["a", "a"])
    with pytest.raises(ValueError):
        TaskSampler(IDS, floor=1.5)
    with pytest.raises(ValueError):
        TaskSampler(IDS, cap=0.5)


def test_sample_determinism_and_distinctness():
    s = TaskSampler(IDS)
    s.boost(IDS[:2], 3.0)
    a = s.sample(5, np.random.default_rng(7))
    b = s.sample(5, np.random.default_rng(7))
    assert a == b
    assert len(set(a)) == 5  # without replacement by default
    assert sorted(s.sample(10, np.random.default_rng(0))) == sorted(IDS)
    with pytest.raises(ValueError):
        s.sample(11, np.random.default_rng(0))
    rep = TaskSampler(IDS, replace=True)
    assert len(rep.sample(50, np.random.default_rng(0))) == 50


def test_sampling_follows_weights():
    s = TaskSampler(IDS, cap=5.0)
    s.boost([IDS[0]], 4.0)  # weight 5 of total 14
    rng = np.random.default_rng(0)
    with_rep = TaskSampler(IDS, replace=True, cap=5.0)
    with_rep.boost([IDS[0]], 4.0)
    draws = with_rep.sample(20000, rng)
    assert draws.count(IDS[0]) / 20000 == pytest.approx(5 / 14, abs=0.02)
    # without replacement, a heavier task is more often in a batch of 2
    hits = sum(IDS[0] in s.sample(2, rng) for _ in range(3000))
    assert hits / 3000 > 0.45  # uniform would be 0.2


def test_retrieved_share_tracking():
    s = TaskSampler(IDS, cap=5.0)
    s.sample(10, np.random.default_rng(0))
    assert s.last_batch_share == 0.0 and s.last_batch_boosted == 0.0
    s.boost([IDS[0]], 1.0)  # weight 2: half of its mass comes from the boost
    s.sample(10, np.random.default_rng(0))
    assert s.last_batch_share == pytest.approx(0.5 / 10)
    assert s.last_batch_boosted == pytest.approx(0.1)


def test_unknown_ids_ignored_and_counted_or_strict():
    s = TaskSampler(IDS)
    assert s.boost(["env/eval/000", IDS[1]], 1.0) == 1
    assert s.n_unknown_ignored == 1
    assert "env/eval/000" not in s
    strict = TaskSampler(IDS, strict=True)
    with pytest.raises(KeyError):
        strict.boost(["env/eval/000"])


def test_state_dict_roundtrip_exact():
    s = TaskSampler(IDS, decay=0.83, floor=0.3, cap=4.0)
    s.boost(IDS[:3], 0.7)
    s.boost([IDS[0], "x"], 1.3)
    for _ in range(3):
        s.decay()
    s.sample(4, np.random.default_rng(1))
    state = json.loads(json.dumps(s.state_dict()))
    t = TaskSampler(list(reversed(IDS)))  # other order, other settings
    t.load_state_dict(state)
    for task in IDS:
        assert t.weights[t._index[task]] == s.weights[s._index[task]]  # bit-exact
    assert (t.decay_rate, t.floor, t.cap) == (0.83, 0.3, 4.0)
    assert t.n_unknown_ignored == 1 and t.n_decays == 3
    same = TaskSampler(IDS)
    same.load_state_dict(state)
    assert np.array_equal(same.probabilities(), s.probabilities())
    assert same.sample(5, np.random.default_rng(3)) == s.sample(5, np.random.default_rng(3))
    with pytest.raises(ValueError):
        TaskSampler(IDS[:-1]).load_state_dict(state)
