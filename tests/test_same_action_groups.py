"""``algo.same_action_groups``: GiGPO's and Role-Agent's step part in anchor groups where
every sample took the same action, kept (the papers) or zeroed; and the metric that
reports how much of a batch such groups hold."""

from __future__ import annotations

import json

import numpy as np
import pytest
from run_helpers import make_trajectory

from roleagent.algos import same_action_groups
from roleagent.config import AlgoConfig
from roleagent.trainer.advantages import StepBatch, compute_advantages
from roleagent.trainer.metrics import advantage_metrics


def test_the_docstring_example_and_bad_lengths():
    agree = same_action_groups(np.array([0, 0, 1, 1, 2]), ["a", "a", "a", "b", "c"])
    assert agree.tolist() == [True, True, False, False, False]
    assert same_action_groups(np.array([7, 7]), [None, None]).tolist() == [True, True]  # two unparsable
    assert same_action_groups(np.zeros(0, dtype=int), []).tolist() == []
    with pytest.raises(ValueError, match="3 actions for 2 step samples"):
        same_action_groups(np.array([0, 0]), ["a", "b", "c"])


def _batch() -> StepBatch:
    """One task, two rollouts through states s0, s1. At s0 both chose ``open``; at s1 one
    chose ``take`` (and won), the other ``look`` (and lost)."""
    won = make_trajectory("t", [0.0, 1.0], ["s0", "s1"])
    lost = make_trajectory("t", [0.0, 0.0], ["s0", "s1"])
    for trajectory, actions in ((won, ["open", "take"]), (lost, ["open", "look"])):
        for step, action in zip(trajectory.steps, actions, strict=True):
            step.action = action
    return StepBatch.from_trajectories([won, lost])


@pytest.mark.parametrize("name", ["gigpo", "role_agent"])
def test_zero_removes_the_step_part_only_where_the_actions_agree(name):
    batch = _batch()  # samples: won s0, won s1, lost s0, lost s1
    keep = compute_advantages(batch, AlgoConfig(name=name, gamma=0.5, norm="mean_norm"))
    zero = compute_advantages(batch, AlgoConfig(name=name, gamma=0.5, norm="mean_norm", same_action_groups="zero"))
    kept_step = keep.parts["step"]
    assert kept_step[0] == pytest.approx(0.25) and kept_step[2] == pytest.approx(-0.25)  # s0: returns 0.5 vs 0
    assert zero.parts["step"].tolist() == pytest.approx([0.0, kept_step[1], 0.0, kept_step[3]])
    assert kept_step[1] == pytest.approx(0.5) and kept_step[3] == pytest.approx(-0.5)  # s1: take vs look, kept
    np.testing.assert_allclose(zero.parts["episode"], keep.parts["episode"])
    weight = 1.0  # step_weight (GiGPO) and alpha (Role-Agent) at their defaults
    np.testing.assert_allclose(zero.value, zero.parts["episode"] + weight * zero.parts["step"])


def test_the_metric_counts_the_steps_in_agreeing_groups():
    batch = _batch()
    estimate = compute_advantages(batch, AlgoConfig(name="gigpo"))
    metrics = advantage_metrics(batch, estimate)
    assert metrics["train/same_action_step_frac"] == pytest.approx(0.5)  # the two s0 samples of four
    assert metrics["train/anchor_grouped_step_frac"] == pytest.approx(1.0)


def test_the_share_of_a_run_read_from_its_rollout_dumps(tmp_path):
    """``benchmarks/same_action_share.py`` on a dump of the batch above (step parts as the
    trainer writes them into ``extras["algo"]``)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import same_action_share

    batch = _batch()
    estimate = compute_advantages(batch, AlgoConfig(name="gigpo", gamma=0.5, norm="mean_norm"))
    parts, groups = iter(estimate.parts["step"].tolist()), iter(estimate.state_group.tolist())
    lines = []
    for trajectory in batch.trajectories:
        steps = [
            {"action": s.action, "extras": {"algo": {"step": next(parts), "state_group": next(groups)}}}
            for s in trajectory.steps
        ]
        lines.append(json.dumps({"task_id": trajectory.task.id, "steps": steps}))
    dump = tmp_path / "iter_000000.jsonl"
    dump.write_text("\n".join(lines) + "\n")
    n, same, mass, same_mass = same_action_share.iteration_share(dump)
    assert (n, same) == (4, 2)
    assert mass == pytest.approx(0.25 + 0.5 + 0.25 + 0.5) and same_mass == pytest.approx(0.5)  # the two s0 samples
