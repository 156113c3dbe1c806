"""SEAL diagnosis-guided advantage reweighting (Hu et al., 2026, "SEAL: Synergistic
Co-Evolution of Agents and Learning Environments", §3.4), pure numpy.

For a trajectory τ with per-ground-truth-turn diagnosis tags y_1..y_K (the authors' code
vocabulary, ``roleagent.envs.bfcl.diagnosis.CODE_LABELS``):

    w(τ) = clip( mean_k ρ(y_k), 0.5, 2.0 )          Â(τ) = w(τ) · A(τ)

where A is the group-normalised (GRPO) advantage. w > 0, so the sign of the advantage
never flips. Tags ``checker_error`` and ``gt_error`` are excluded from the mean; a
trajectory without any usable tag gets w = 1.

Static utilities ρ (authors' ``tocf.advantage.apatch.tag_weights``)::

    spurious_tool_call 2.0, correct_abstention 1.8, empty_turn_model_response 1.5,
    state_mismatch 1.0, response_mismatch 0.9, instance_mismatch 0.6, pass 1.0

Utility EMA (authors' code ``tocf.state.update_dynamic_tag_weights``, switched by
``apatch.dynamic``: ema_beta 0.25, prevalence_alpha 1.0, confidence_samples 32; the
paper's text keeps ρ fixed): after each batch, per tag other than ``pass``,

    target = clamp( base · (1 + α · prevalence · (1 − reward_mean) · min(1, count / 32)),
                    0.5, 2.0 )
    ρ_tag ← (1 − β) · ρ_tag + β · target,   β = 0.25

and for ``pass`` target = base, so ρ_pass stays 1.0 (the authors' ``PASS_TAG`` branch:
successes are never up-weighted by the loop). Statistics come from a sliding window of
recent trajectories: ``count`` = trajectories in the window carrying the tag at least once,
``prevalence`` = count / trajectories in the window, ``reward_mean`` = mean verifier
reward of those trajectories. A tag absent from the window has target = base, so its
utility decays back to the static value.

Worked example (window of 64: 32 trajectories ``[state_mismatch, pass]`` with reward 0,
32 ``[pass]`` with reward 1): state_mismatch has count 32, prevalence 0.5, reward_mean 0
→ target 1.0·(1 + 0.5·1·1) = 1.5 → ρ = 0.75·1.0 + 0.25·1.5 = 1.125; ``pass`` stays 1.0.

Differences from the authors' statistics (kept, documented): they count tag
*occurrences* (a trajectory with three ``state_mismatch`` turns adds 3, each with the
trajectory's reward) and divide by all tag occurrences of the window, and their window is
the current epoch (reset at epoch end) rather than the last ``window`` trajectories.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

STATIC_UTILITIES: dict[str, float] = {
    "spurious_tool_call": 2.0,
    "correct_abstention": 1.8,
    "empty_turn_model_response": 1.5,
    "state_mismatch": 1.0,
    "response_mismatch": 0.9,
    "instance_mismatch": 0.6,
    "pass": 1.0,
}
EXCLUDED_TAGS: frozenset[str] = frozenset({"checker_error", "gt_error"})
PASS_TAG = "pass"  # the utility EMA never moves it (target = base)
W_MIN, W_MAX = 0.5, 2.0


def trajectory_weight(
    turn_labels: Sequence[str],
    utilities: Mapping[str, float] = STATIC_UTILITIES,
    *,
    w_min: float = W_MIN,
    w_max: float = W_MAX,
    unknown: float = 1.0,
) -> float:
    """clip(mean ρ over the usable turn tags, w_min, w_max); 1.0 without usable tags.
    A tag missing from ``utilities`` counts as ``unknown`` (1.0)."""
    values = [float(utilities.get(t, unknown)) for t in turn_labels if t not in EXCLUDED_TAGS]
    if not values:
        return 1.0
    return float(np.clip(np.mean(values), w_min, w_max))


def seal_trajectory_weights(
    turn_labels: Sequence[Sequence[str]],
    utilities: Mapping[str, float] = STATIC_UTILITIES,
    *,
    w_min: float = W_MIN,
    w_max: float = W_MAX,
) -> np.ndarray:
    """One weight per trajectory (float64 array of shape [n_trajectories])."""
    return np.asarray(
        [trajectory_weight(labels, utilities, w_min=w_min, w_max=w_max) for labels in turn_labels], dtype=np.float64
    )


def reweight_advantages(advantages: Any, weights_per_sample: Any) -> np.ndarray:
    """Â = w · A elementwise. ``weights_per_sample`` broadcasts against ``advantages``
    (e.g. shape [n] against [n] or [n, T]); weights must be positive (sign preserved)."""
    adv = np.asarray(advantages, dtype=np.float64)
    w = np.asarray(weights_per_sample, dtype=np.float64)
    if np.any(~np.isfinite(w)) or np.any(w <= 0):
        raise ValueError("SEAL weights must be finite and positive (the sign of A never flips)")
    if w.ndim == 1 and adv.ndim > 1 and w.shape[0] == adv.shape[0]:
        w = w.reshape((-1,) + (1,) * (adv.ndim - 1))
    return adv * w


def expand_to_samples(trajectory_weights: Any, trajectory_index: Sequence[int]) -> np.ndarray:
    """Per-step-sample weights from per-trajectory weights (``trajectory_index[i]`` is the
    trajectory of sample i), for trainers that flatten trajectories into step samples."""
    return np.asarray(trajectory_weights, dtype=np.float64)[np.asarray(trajectory_index, dtype=np.int64)]


def tag_statistics(turn_labels: Iterable[Sequence[str]], rewards: Iterable[float]) -> dict[str, dict[str, float]]:
    """{tag: {"count", "prevalence", "reward_mean"}} over trajectories (a tag counts once
    per trajectory)."""
    labels = [set(t) - EXCLUDED_TAGS for t in turn_labels]
    rewards = [float(r) for r in rewards]
    if len(labels) != len(rewards):
        raise ValueError("turn_labels and rewards differ in length")
    n = len(labels)
    out: dict[str, dict[str, float]] = {}
    for tags, r in zip(labels, rewards):
        for tag in tags:
            s = out.setdefault(tag, {"count": 0.0, "reward_sum": 0.0})
            s["count"] += 1
            s["reward_sum"] += r
    return {
        tag: {"count": s["count"], "prevalence": s["count"] / n, "reward_mean": s["reward_sum"] / s["count"]}
        for tag, s in out.items()
    }


def closed_loop_target(
    base: float,
    count: float,
    prevalence: float,
    reward_mean: float,
    *,
    alpha: float = 1.0,
    confidence_samples: int = 32,
    w_min: float = W_MIN,
    w_max: float = W_MAX,
) -> float:
    """clamp(base·(1 + α·prevalence·(1 − reward_mean)·min(1, count/confidence)), w_min, w_max)."""
    confidence = min(1.0, count / float(confidence_samples))
    return float(np.clip(base * (1.0 + alpha * prevalence * (1.0 - reward_mean) * confidence), w_min, w_max))


class ClosedLoopWeights:
    """Per-tag utilities that track the current failure profile (the utility EMA toward
    the target; ``pass`` stays at its base)."""

    def __init__(
        self,
        base: Mapping[str, float] | None = None,
        *,
        beta: float = 0.25,
        alpha: float = 1.0,
        confidence_samples: int = 32,
        window: int = 512,
        w_min: float = W_MIN,
        w_max: float = W_MAX,
    ) -> None:
        self.base = dict(STATIC_UTILITIES if base is None else base)
        self.beta = float(beta)
        self.alpha = float(alpha)
        self.confidence_samples = int(confidence_samples)
        self.window = int(window)
        self.w_min, self.w_max = float(w_min), float(w_max)
        self.weights: dict[str, float] = dict(self.base)
        self._history: deque[tuple[tuple[str, ...], float]] = deque(maxlen=self.window)
        self.updates = 0

    def update(self, turn_labels: Sequence[Sequence[str]], rewards: Sequence[float]) -> dict[str, float]:
        """Add a batch of diagnosed trajectories to the window and move every tag one EMA
        step toward its target (a tag absent from the window, and ``pass`` always, target
        their base utility); returns the new utilities."""
        if len(turn_labels) != len(rewards):
            raise ValueError("turn_labels and rewards differ in length")
        for labels, r in zip(turn_labels, rewards):
            self._history.append((tuple(labels), float(r)))
        stats = tag_statistics([h[0] for h in self._history], [h[1] for h in self._history])
        absent = {"count": 0.0, "prevalence": 0.0, "reward_mean": 0.0}
        for tag in sorted(set(self.weights) | set(stats)):
            # absent from the window (or pass): prevalence 0, so target = base (decay back)
            s = absent if tag == PASS_TAG else stats.get(tag, absent)
            base = self.base.get(tag, 1.0)
            target = closed_loop_target(
                base,
                s["count"],
                s["prevalence"],
                s["reward_mean"],
                alpha=self.alpha,
                confidence_samples=self.confidence_samples,
                w_min=self.w_min,
                w_max=self.w_max,
            )
            current = self.weights.get(tag, base)
            self.weights[tag] = (1.0 - self.beta) * current + self.beta * target
        self.updates += 1
        return dict(self.weights)

    def utilities(self) -> dict[str, float]:
        return dict(self.weights)

    def trajectory_weights(self, turn_labels: Sequence[Sequence[str]]) -> np.ndarray:
        return seal_trajectory_weights(turn_labels, self.weights, w_min=self.w_min, w_max=self.w_max)

    def state_dict(self) -> dict[str, Any]:
        return {
            "base": dict(self.base),
            "beta": self.beta,
            "alpha": self.alpha,
            "confidence_samples": self.confidence_samples,
            "window": self.window,
            "w_min": self.w_min,
            "w_max": self.w_max,
            "weights": dict(self.weights),
            "history": [[list(t), r] for t, r in self._history],
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.base = dict(state["base"])
        self.beta, self.alpha = float(state["beta"]), float(state["alpha"])
        self.confidence_samples, self.window = int(state["confidence_samples"]), int(state["window"])
        self.w_min, self.w_max = float(state["w_min"]), float(state["w_max"])
        self.weights = dict(state["weights"])
        self._history = deque(((tuple(t), float(r)) for t, r in state["history"]), maxlen=self.window)
        self.updates = int(state["updates"])
