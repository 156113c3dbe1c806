"""Analyses of Agent-In-World runs.

* :func:`failure_mode_series` / :func:`plot_failure_modes` — cumulative failure counts
  per failure mode over training iterations (Role-Agent Figure 4, "Failure Mode
  Evolution"), read from the SQLite failure memory. The plot needs matplotlib (not a
  dependency); without it, :func:`plot_failure_modes` says so and returns None.
* :func:`point_biserial` — correlation of a continuous score (the WIA predictive reward)
  with a binary outcome, with its two-sided p-value (Appendix B.2: r = 0.41, p < 0.01 on
  200 ALFWorld rollouts); the p-value needs scipy.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from roleagent.methods.role_agent.aiw.memory import FailureMemory


def failure_mode_series(
    source: FailureMemory | Mapping[int, Mapping[str, int]], cumulative: bool = True
) -> tuple[list[int], dict[str, np.ndarray]]:
    """``(iterations, {mode: counts})``: one count per listed iteration (cumulative by
    default, as Figure 4 plots), modes ordered by their final total, largest first."""
    per_iter = (
        source.count_by_type_per_iteration()
        if isinstance(source, FailureMemory)
        else {int(k): dict(v) for k, v in source.items()}
    )
    iterations = sorted(per_iter)
    modes = sorted({label for counts in per_iter.values() for label in counts})
    series = {label: np.asarray([per_iter[it].get(label, 0) for it in iterations], dtype=np.int64) for label in modes}
    totals = {k: int(v.sum()) for k, v in series.items()}
    if cumulative:
        series = {k: np.cumsum(v) for k, v in series.items()}
    order = sorted(series, key=lambda k: (-totals[k], k))
    return iterations, {k: series[k] for k in order}


def plot_failure_modes(
    source: FailureMemory | Mapping[int, Mapping[str, int]], path: str | Path, title: str = "Failure mode evolution"
) -> Path | None:
    """Stacked cumulative failure counts per mode over iterations → PNG at ``path``.

    Returns the path, or None (with a printed message) when matplotlib is missing or
    there is nothing to plot.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_failure_modes: matplotlib is not installed (pip install matplotlib); skipping the plot")
        return None
    iterations, series = failure_mode_series(source, cumulative=True)
    if not iterations:
        print("plot_failure_modes: the failure memory is empty; nothing to plot")
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.stackplot(iterations, *series.values(), labels=[k.replace("_", " ") for k in series])
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training iteration")
    ax.set_ylabel("cumulative failures")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=7, ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def point_biserial(scores: Sequence[float], outcomes: Sequence[float | bool]) -> tuple[float, float | None]:
    """Point-biserial correlation ``r_pb`` of ``scores`` with binary ``outcomes`` and its
    two-sided p-value (t-test with n − 2 degrees of freedom).

    ``r_pb = (M1 − M0)/s · sqrt(n1·n0/n²)`` with s the population standard deviation of
    all scores — identical to Pearson's r with the 0/1 outcome. NaN scores are dropped.
    Returns ``(nan, nan)`` when a class is empty or the scores are constant. The p-value
    is ``I_{df/(df+t²)}(df/2, 1/2)`` from ``scipy.special.betainc``, imported here; without
    scipy (an optional dependency) it is None, with a warning.
    """
    x = np.asarray(scores, dtype=float)
    y = np.asarray(outcomes, dtype=float)
    if x.shape != y.shape:
        raise ValueError("scores and outcomes must have the same length")
    if not np.all(np.isin(y[~np.isnan(y)], (0.0, 1.0))):
        raise ValueError("outcomes must be binary (0/1 or bool)")
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    n = len(x)
    n1 = int(y.sum())
    n0 = n - n1
    s = float(x.std())
    if n1 == 0 or n0 == 0 or s == 0.0:
        return float("nan"), float("nan")
    r = (x[y == 1].mean() - x[y == 0].mean()) / s * math.sqrt(n1 * n0 / n**2)
    r = float(np.clip(r, -1.0, 1.0))
    df = n - 2
    if df <= 0:
        return r, float("nan")
    if abs(r) >= 1.0:
        return r, 0.0
    try:
        from scipy.special import betainc
    except ImportError:
        warnings.warn("scipy is not installed: point_biserial returns no p-value (None)", stacklevel=2)
        return r, None
    t2 = r * r * df / (1.0 - r * r)
    p = float(betainc(df / 2.0, 0.5, df / (df + t2)))  # two-sided Student-t p-value
    return r, min(max(p, 0.0), 1.0)
