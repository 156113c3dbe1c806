"""Agent-In-World analyses: Figure-4 series/plot and the point-biserial helper."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from roleagent.methods.role_agent.aiw.analysis import failure_mode_series, plot_failure_modes, point_biserial
from roleagent.methods.role_agent.aiw.memory import FailureMemory
from roleagent.methods.role_agent.aiw.reflection import Reflection


def test_point_biserial_matches_pearson_and_t_test():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    x = 0.5 * y + rng.normal(size=200)
    r, p = point_biserial(x, y)
    assert r == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
    assert 0.0 < p < 0.01
    # exact small case: r = 1/sqrt(2)... check against the closed-form t-test with df=2
    r2, p2 = point_biserial([1.0, 2.0, 3.0, 4.0], [0, 0, 1, 1])
    assert r2 == pytest.approx(np.corrcoef([1, 2, 3, 4], [0, 0, 1, 1])[0, 1])
    t = r2 * math.sqrt(2 / (1 - r2 * r2))
    # two-sided p for Student t with 2 dof: 1 - t/sqrt(t^2 + 2)
    assert p2 == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-9)
    assert all(math.isnan(v) for v in point_biserial([1, 2, 3], [1, 1, 1]))
    assert all(math.isnan(v) for v in point_biserial([2, 2, 2], [0, 1, 1]))
    with pytest.raises(ValueError):
        point_biserial([1, 2], [0, 2])
    r3, _ = point_biserial([0.1, np.nan, 0.9, 0.8], [False, True, True, True])
    assert r3 > 0


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="scipy not installed")
def test_point_biserial_agrees_with_scipy():
    from scipy import stats

    rng = np.random.default_rng(1)
    for n in (10, 57, 400):
        y = rng.integers(0, 2, n)
        x = 0.2 * y + rng.normal(size=n)
        r, p = point_biserial(x, y)
        ref = stats.pointbiserialr(y, x)
        assert r == pytest.approx(ref.statistic, abs=1e-12)
        assert p == pytest.approx(ref.pvalue, rel=1e-8, abs=1e-15)


@pytest.fixture()
def memory(tmp_path):
    mem = FailureMemory(tmp_path / "m.sqlite")
    for it, label in [(0, "a"), (0, "a"), (0, "b"), (2, "a"), (3, "c")]:
        mem.add_failure("t/train/1", it, Reflection(dominant_type=label, source="rule"))
    mem.commit()
    yield mem
    mem.close()


def test_failure_mode_series(memory):
    its, series = failure_mode_series(memory)
    assert its == [0, 2, 3]
    assert list(series) == ["a", "b", "c"]  # by total, largest first
    assert series["a"].tolist() == [2, 3, 3]
    assert series["c"].tolist() == [0, 0, 1]
    _, raw = failure_mode_series(memory, cumulative=False)
    assert raw["a"].tolist() == [2, 1, 0]


def test_plot_failure_modes(memory, tmp_path, capsys):
    out = plot_failure_modes(memory, tmp_path / "plots" / "failure_modes.png")
    if importlib.util.find_spec("matplotlib") is None:
        assert out is None
        assert "matplotlib is not installed" in capsys.readouterr().out
    else:
        assert out is not None and out.stat().st_size > 1000
    assert plot_failure_modes({}, tmp_path / "empty.png") is None
