"""``optim.recompute_old_logprobs``: π_old from the training forward, not the rollout's
log-probs (``roleagent.trainer.samples.recompute_old_logprobs``).

The samples' rollout log-probs are made wrong by a known offset (as bf16 rounding makes
them wrong by an unknown one). Without recomputing, that offset enters the first step's
ratio π_θ/π_old as if the policy had moved, and the clip cuts it; with it, the first
step's ratio is 1 and the gap reports the offset."""

import copy
import random

import pytest

from roleagent.config import OptimConfig, load_config
from roleagent.trainer.samples import recompute_old_logprobs
from roleagent.trainer.update import Updater
from tests.test_update_skip_zero import _batch, policy  # noqa: F401 - the tiny policy fixture

OFFSET = 0.3  # nats added to every rollout log-prob: ratio exp(-0.3) = 0.74 < 1 - clip_low


def _run(policy, recompute: bool):  # noqa: F811 - the fixture
    samples = _batch(policy, [1.0, -1.0, 0.5])
    true_old = [list(s.old_logprobs) for s in samples]
    for s in samples:
        s.old_logprobs = [x + OFFSET for x in s.old_logprobs]
    cfg = OptimConfig(lr=0.0, mini_batches=1, epochs=1, kl_coef=0.0, recompute_old_logprobs=recompute)
    state = copy.deepcopy(policy.model.state_dict())
    metrics = Updater(policy, cfg).update(samples, random.Random(0))
    policy.model.load_state_dict(state)
    return metrics, samples, true_old


def test_a_wrong_rollout_logprob_is_clipped_without_recompute(policy):  # noqa: F811
    metrics, _, _ = _run(policy, recompute=False)
    assert metrics["ratio_mean"] == pytest.approx(0.7408, abs=1e-3)  # exp(-0.3): the offset, not the policy
    assert metrics["clip_frac"] > 0.0
    assert "old_logp_gap" not in metrics


def test_recompute_restores_ratio_one_and_reports_the_gap(policy):  # noqa: F811
    metrics, samples, true_old = _run(policy, recompute=True)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["clip_frac"] == 0.0
    assert metrics["old_logp_gap"] == pytest.approx(OFFSET, abs=1e-4)
    assert metrics["old_logp_gap_max"] == pytest.approx(OFFSET, abs=1e-4)
    # the caller's samples keep what the rollout reported (the dumps show it)
    assert [s.old_logprobs for s in samples] == [[x + OFFSET for x in old] for old in true_old]


def test_recomputed_logprobs_equal_the_training_forward(policy):  # noqa: F811
    samples = _batch(policy, [1.0, -1.0])  # _batch sets pi_old to the forward's own log-probs
    updater = Updater(policy, OptimConfig(kl_coef=0.0))
    fresh, gap = recompute_old_logprobs(updater, samples)
    for new, old in zip(fresh, samples):
        assert new.old_logprobs == pytest.approx(old.old_logprobs, abs=1e-5)
        assert new.output_ids == old.output_ids and new is not old
    assert gap["old_logp_gap"] < 1e-5


def test_the_setting_is_read_from_recipes():
    assert load_config(None, ["optim.recompute_old_logprobs=true"]).optim.recompute_old_logprobs is True
    assert load_config(None, []).optim.recompute_old_logprobs is False
