"""Index helpers shared by the advantage estimators: ids → dense codes, trajectory layout,
and normalisation inside segments (groups) with ``np.bincount``.

Everything here works on flattened STEP SAMPLES: arrays of length n in which the steps of
each trajectory appear in time order; trajectories may be consecutive or interleaved (e.g.
step 0 of every episode, then step 1 of every episode).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

MODES = ("mean_norm", "mean_std_norm")


def _to_hashable(x: Any) -> Hashable:
    """Lists / arrays / dicts → tuples, so they can key a dict (as verl-agent's ``to_hashable``)."""
    if isinstance(x, np.ndarray):
        return tuple(_to_hashable(e) for e in x.tolist())
    if isinstance(x, (list, tuple)):
        return tuple(_to_hashable(e) for e in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _to_hashable(v)) for k, v in x.items()))
    if isinstance(x, np.generic):
        return x.item()
    return x


def factorize(values: Sequence[Hashable] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense integer codes in order of first appearance.

    Returns ``(codes, first_index)``: ``codes[i]`` is the code of ``values[i]`` and
    ``first_index[c]`` is the position where code ``c`` first appears.

    Numeric arrays go through ``np.unique``; anything else (str, tuples, mixed types) through
    one dict pass, so ``1`` and ``"1"`` stay distinct.

    >>> factorize(["b", "a", "b"])[0].tolist()
    [0, 1, 0]
    """
    if isinstance(values, np.ndarray) and values.dtype.kind in "biu":
        arr = values.reshape(-1)
        _, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        return rank[inverse.reshape(-1)].astype(np.int64), first[order].astype(np.int64)
    seq = values.tolist() if isinstance(values, np.ndarray) else list(values)
    table: dict[Hashable, int] = {}
    try:
        codes = np.fromiter((table.setdefault(v, len(table)) for v in seq), np.int64, len(seq))
    except TypeError:  # unhashable entries (lists, arrays): key them by a tuple form
        table.clear()
        codes = np.fromiter((table.setdefault(_to_hashable(v), len(table)) for v in seq), np.int64, len(seq))
    first = np.full(len(table), -1, dtype=np.int64)
    # reversed assignment leaves the first occurrence in place
    first[codes[::-1]] = np.arange(len(seq) - 1, -1, -1, dtype=np.int64)
    return codes, first


def trajectory_layout(traj_ids: Sequence[Hashable] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Trajectory index, time step and length of each sample: ``(traj, pos, lengths)``.

    ``traj[i]`` is the trajectory index of sample i (0, 1, ... in order of first
    appearance), ``pos[i]`` its time step inside the trajectory (the number of earlier
    samples of the same trajectory: each trajectory's steps must come in time order, but
    trajectories may be interleaved), ``lengths[j]`` the number of steps of trajectory j.

    >>> [a.tolist() for a in trajectory_layout(["x", "y", "x"])]
    [[0, 1, 0], [0, 0, 1], [2, 1]]
    """
    traj, _ = factorize(traj_ids)
    n = traj.size
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    lengths = np.bincount(traj)
    order = np.argsort(traj, kind="stable")  # by trajectory, batch order (= time order) within
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n) - starts[traj[order]]
    return traj, pos, lengths


def group_of_trajectory(group_codes: np.ndarray, traj: np.ndarray, n_traj: int) -> np.ndarray:
    """Group code of each trajectory; raises if a trajectory spans two groups."""
    first = np.zeros(n_traj, dtype=np.int64)
    first[traj[::-1]] = group_codes[::-1]
    if np.any(first[traj] != group_codes):
        raise ValueError("a trajectory's steps must all carry the same group id")
    return first


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown normalisation mode {mode!r}; expected one of {MODES}")


def segment_stats(values: np.ndarray, segments: np.ndarray, *, singleton: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-segment ``(mean, std)`` of ``values``; std unbiased (``ddof=1``, as ``torch.std``).

    A segment of one sample uses, following verl-agent:

    - ``singleton="episode"``: mean 0, std 1 (``episode_norm_reward``);
    - ``singleton="zero"``: mean x, std 1 (``step_norm_reward``).

    Example: values [1, 3, 5], segments [0, 0, 1], singleton "zero" → mean [2, 5],
    std [1.4142, 1].
    """
    x = np.asarray(values, dtype=np.float64)
    n_seg = int(segments.max()) + 1
    counts = np.bincount(segments, minlength=n_seg).astype(np.float64)
    mean = np.bincount(segments, weights=x, minlength=n_seg) / counts
    dev = x - mean[segments]
    var = np.bincount(segments, weights=dev * dev, minlength=n_seg) / np.maximum(counts - 1.0, 1.0)
    std = np.sqrt(var)
    single = counts == 1
    std[single] = 1.0
    if singleton == "episode":
        mean[single] = 0.0
    elif singleton != "zero":
        raise ValueError(f"unknown singleton policy {singleton!r}")
    return mean, std


def normalize_within(
    values: np.ndarray,
    segments: np.ndarray,
    *,
    mode: str,
    eps: float,
    singleton: str,
) -> np.ndarray:
    """``(x - mean_g) / (std_g + eps)`` (``mean_std_norm``) or ``x - mean_g`` (``mean_norm``).

    ``segments`` are dense codes 0..G-1; statistics from ``segment_stats``, so a segment of
    one sample gives x / (1 + eps) with ``singleton="episode"`` and exactly 0 with
    ``singleton="zero"``.

    Example: values [1, 3, 5], segments [0, 0, 1], mean_std_norm, eps 0, singleton "zero":
    segment 0 has mean 2 and std sqrt(2) → [-0.7071, 0.7071, 0.0].
    """
    check_mode(mode)
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return x.copy()
    mean, std = segment_stats(x, segments, singleton=singleton)
    centred = x - mean[segments]
    if mode == "mean_norm":
        return centred
    return centred / (std[segments] + eps)
