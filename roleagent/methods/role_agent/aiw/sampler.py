"""The training-task distribution p_𝒟 that Agent-In-World reshapes (Role-Agent Alg. 1,
lines 3, 5 and 24: "Update p_𝒟 to prioritize difficult and overlooked tasks").

The paper "reintegrate[s] these retrieved tasks into the training set" (§3.3): each
retrieval adds a copy of the task. Here that is a weight: every task has a weight
relative to uniform (1.0 = its uniform share), :meth:`TaskSampler.boost` adds ``amount``
(1.0 = one more copy), and, unlike the paper's ever-growing set (docs/design.md, "Decisions", asks for a
decay and a floor), :meth:`TaskSampler.decay` pulls weights back toward uniform every
iteration, ``w ← 1 + (w − 1)·decay``.

Bounds are relative to uniform and hold on the *sampling probabilities*, not only on
the weights: ``floor/N ≤ p_i ≤ cap/N`` for N training tasks (so however many tasks are
boosted, no task is starved below ``floor`` × its uniform share, and none takes more than
``cap`` × it). Weights themselves are clipped to ``[floor, cap]`` after every boost.

:meth:`TaskSampler.sample` is drawn anew every iteration (Alg. 1 line 5), **without
replacement** by default (Gumbel-top-k, i.e. successive weighted draws): a batch has N
distinct tasks, so rollout groups keyed by task id never merge and a boosted task shows
up at most once per batch; ``replace=True`` draws i.i.d. from p.

The sampler knows only training task ids. Boosting any other id (a validation task, a
typo) is ignored and counted in ``n_unknown_ignored`` (``strict=True`` raises instead).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


class TaskSampler:
    def __init__(
        self,
        task_ids: Sequence[str],
        *,
        decay: float = 0.9,
        floor: float = 0.2,
        cap: float = 5.0,
        replace: bool = False,
        strict: bool = False,
    ):
        ids = [str(t) for t in task_ids]
        if not ids:
            raise ValueError("TaskSampler needs at least one training task id")
        if len(set(ids)) != len(ids):
            raise ValueError("training task ids must be unique")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay}")
        if not 0.0 <= floor <= 1.0 <= cap:
            raise ValueError(f"need 0 <= floor <= 1 <= cap, got floor={floor}, cap={cap}")
        self.task_ids = ids
        self._index = {t: i for i, t in enumerate(ids)}
        self.decay_rate, self.floor, self.cap = float(decay), float(floor), float(cap)
        self.replace, self.strict = bool(replace), bool(strict)
        self.weights = np.ones(len(ids), dtype=np.float64)
        self.n_boosts = 0
        self.n_unknown_ignored = 0
        self.n_decays = 0
        self.last_batch_share = 0.0
        self.last_batch_boosted = 0.0

    def __len__(self) -> int:
        return len(self.task_ids)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._index

    # ----------------------------------------------------------- updates ----------

    def boost(self, task_ids: Iterable[str], amount: float = 1.0) -> int:
        """Add ``amount`` to the weight of each known id (repeats count each time).
        Returns how many boosts were applied; unknown ids are ignored and counted."""
        applied = 0
        for task_id in task_ids:
            i = self._index.get(task_id)
            if i is None:
                if self.strict:
                    raise KeyError(f"{task_id!r} is not a training task of this sampler")
                self.n_unknown_ignored += 1
                continue
            self.weights[i] = min(max(self.weights[i] + amount, self.floor), self.cap)
            applied += 1
        self.n_boosts += applied
        return applied

    def decay(self) -> None:
        """One iteration of relaxation toward uniform: ``w ← 1 + (w − 1)·decay``."""
        self.weights = 1.0 + (self.weights - 1.0) * self.decay_rate
        self.n_decays += 1

    # ---------------------------------------------------------- sampling ----------

    def probabilities(self) -> np.ndarray:
        """p_i ∝ w_i, then projected onto ``floor/N ≤ p_i ≤ cap/N`` (Σp = 1)."""
        n = len(self.weights)
        p = self.weights / self.weights.sum()
        return _bounded(p, self.floor / n, self.cap / n)

    def entropy(self) -> float:
        """Shannon entropy of p divided by ln N (1.0 = uniform)."""
        n = len(self.weights)
        if n == 1:
            return 1.0
        p = self.probabilities()
        p = p[p > 0]
        return float(-(p * np.log(p)).sum() / math.log(n))

    def sample(self, n: int, rng: np.random.Generator) -> list[str]:
        """Draw this iteration's ``n`` training task ids from p.

        Without replacement (default) ``n`` must not exceed the number of tasks. Also
        records the batch's share attributable to retrieval boosts: ``last_batch_share`` =
        mean over the drawn tasks of ``max(w − 1, 0)/w`` (the probability that the slot
        was filled because of a boost, reading w as 1 uniform copy + boost copies), and
        ``last_batch_boosted`` = fraction of drawn tasks whose weight is above uniform.
        """
        n = int(n)
        if n < 0:
            raise ValueError("n must be >= 0")
        p = self.probabilities()
        if self.replace:
            u = rng.random(n)
            idx = np.searchsorted(np.cumsum(p), u * p.sum(), side="right")
            idx = np.minimum(idx, len(p) - 1)
        else:
            if n > len(p):
                raise ValueError(
                    f"cannot draw {n} distinct tasks from {len(p)} training tasks; use replace=True or a smaller batch"
                )
            # Gumbel-top-k: keys log p_i + G_i, take the n largest (stable on ties).
            u = rng.random(len(p))
            with np.errstate(divide="ignore"):
                keys = np.log(p) - np.log(-np.log(np.clip(u, 1e-300, 1.0 - 1e-16)))
            idx = np.argsort(-keys, kind="stable")[:n]
        w = self.weights[idx]
        self.last_batch_share = float(np.mean(np.maximum(w - 1.0, 0.0) / w)) if n else 0.0
        self.last_batch_boosted = float(np.mean(w > 1.0 + 1e-9)) if n else 0.0
        return [self.task_ids[i] for i in idx]

    # ------------------------------------------------------------- state ----------

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable; floats round-trip exactly (``repr``-exact doubles)."""
        return {
            "task_ids": list(self.task_ids),
            "weights": [float(w) for w in self.weights],
            "decay": self.decay_rate,
            "floor": self.floor,
            "cap": self.cap,
            "replace": self.replace,
            "n_boosts": self.n_boosts,
            "n_unknown_ignored": self.n_unknown_ignored,
            "n_decays": self.n_decays,
            "last_batch_share": self.last_batch_share,
            "last_batch_boosted": self.last_batch_boosted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore weights by task id (the id set must be the same; order may differ)."""
        saved = list(state["task_ids"])
        if set(saved) != set(self.task_ids) or len(saved) != len(self.task_ids):
            missing = len(set(self.task_ids) - set(saved))
            extra = len(set(saved) - set(self.task_ids))
            raise ValueError(f"sampler state is for a different training set ({missing} ids missing, {extra} unknown)")
        by_id = dict(zip(saved, state["weights"]))
        self.weights = np.asarray([float(by_id[t]) for t in self.task_ids], dtype=np.float64)
        self.decay_rate = float(state.get("decay", self.decay_rate))
        self.floor = float(state.get("floor", self.floor))
        self.cap = float(state.get("cap", self.cap))
        self.replace = bool(state.get("replace", self.replace))
        self.n_boosts = int(state.get("n_boosts", 0))
        self.n_unknown_ignored = int(state.get("n_unknown_ignored", 0))
        self.n_decays = int(state.get("n_decays", 0))
        self.last_batch_share = float(state.get("last_batch_share", 0.0))
        self.last_batch_boosted = float(state.get("last_batch_boosted", 0.0))


def _bounded(p: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Euclidean-style projection by clipping and renormalising the free entries until
    every entry lies in ``[lo, hi]`` (feasible because lo ≤ 1/N ≤ hi)."""
    q = p.astype(np.float64).copy()
    fixed = np.zeros(len(q), dtype=bool)
    tol = 1e-12
    for _ in range(len(q) + 1):
        low = ~fixed & (q < lo - tol)
        high = ~fixed & (q > hi + tol)
        if not low.any() and not high.any():
            break
        # Fix only the side that violates more mass first; fixing both at once can
        # overshoot after renormalisation.
        if (lo - q[low]).sum() >= (q[high] - hi).sum():
            q[low], fixed = lo, fixed | low
        else:
            q[high], fixed = hi, fixed | high
        free = ~fixed
        if not free.any():
            break
        mass = 1.0 - q[fixed].sum()
        base = p[free].sum()
        q[free] = p[free] * (mass / base) if base > 0 else mass / free.sum()
    return q / q.sum()
