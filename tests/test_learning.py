"""Learning tests that can fail: RL with each advantage estimator must raise the success of a
policy on a fixed task set, and the same run with its advantages zeroed must not.

The task set is the scripted environment's ``signpost`` layout (``roleagent.envs.scripted``):
two games, the key to the left in one and to the right in the other, four steps each when
played well. The policy is the tiny random model acting through the admissible commands
(constrained decoding), trained with all its weights. Before training its greedy decoding
solves neither game and sampling solves a few episodes in ten; a fixed preference can solve
at most one of the two games.

Each run is evaluated before and after on the same two games, greedily and ``eval.sampled``
= 8 times at the training temperature (:func:`learned` is the criterion). The control runs the same
budget with the estimator's advantages replaced by zeros: nothing is trained (every sample
is skipped), the weights stay the start's, and the criterion must then be false — so a
broken update, a sign error or a no-op optimizer fails these tests. Zeroed advantages
leave nothing of the estimator, so one control run serves all five.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from roleagent.config import load_config
from roleagent.trainer import Trainer
from roleagent.trainer import loop as loop_module

#: the probe's recipe (its comments say why each setting), shared with the benchmarks
RECIPE = "signpost_probe"
ITERATIONS = load_config(RECIPE).iterations
#: the estimators and what each needs besides the recipe
ESTIMATORS = {
    "grpo": [],
    "rloo": [],
    "gigpo": [],
    "role_agent": ["wia.enabled=true", "wia.max_new_tokens=6"],
    "ppo": ["critic.enabled=true", "critic.backbone=shared", "critic.lr=1e-2"],
}


def learned(before: dict, after: dict) -> bool:
    """The criterion: sampled success on the games rose by at least 25 points (e.g. from 2
    of 16 episodes to at least 6 of 16), and greedy success did not fall.

    Greedy success on two games moves in steps of 50 points and needs every step of a game
    right; in the 10-iteration sweep over seeds 0-5 it stayed 0/2 in 4 of 6 RLOO runs and
    3 of 6 PPO runs whose sampled success rose by 25-56 points (``benchmarks/RESULTS.md``,
    "Learning tests"), so it is reported, not required to rise."""
    return after["sampled"] - before["sampled"] >= 0.25 and after["greedy"] >= before["greedy"]


def evaluations(run_dir) -> dict[str, dict]:
    """``{"before": {...}, "after": {...}}`` with greedy and sampled success (fractions)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        r["eval"]: {"greedy": r["eval/success"], "sampled": r["eval/sampled_success"]}
        for r in records
        if r.get("eval") in ("before", "after")
    }


def zero_advantages_in(patch: pytest.MonkeyPatch) -> None:
    """Replace the estimator's answer by zeros (before any method adjusts it): the update
    switched off, the controls' setting."""
    real = loop_module.compute_advantages

    def zeroed(batch, cfg, settings=None):
        out = real(batch, cfg, settings)
        out.value = np.zeros_like(out.value)
        return out

    patch.setattr(loop_module, "compute_advantages", zeroed)


def train(run_dir, algo: str, *, zero_advantages: bool = False, seed: int = 0) -> dict[str, dict]:
    with pytest.MonkeyPatch.context() as patch:
        if zero_advantages:
            zero_advantages_in(patch)
        sets = [*ESTIMATORS[algo], f"algo.name={algo}", f"run_dir={run_dir}", f"seed={seed}"]
        trainer = Trainer(load_config(RECIPE, sets), resume=False, quiet=True)
        try:
            trainer.run()
        finally:
            trainer.close()
    return evaluations(run_dir)


@pytest.fixture(scope="module")
def control(tmp_path_factory) -> dict[str, dict]:
    """The control run, shared by the estimators: zero advantages skip every sample, so
    whatever the estimator computed, nothing is trained and the policy is the start's."""
    run_dir = tmp_path_factory.mktemp("control")
    result = train(run_dir, "grpo", zero_advantages=True)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    result["samples"] = [r["update/samples"] for r in records if "iteration" in r]
    return result


def test_the_control_does_not_learn(control):
    assert control["samples"] == [0] * ITERATIONS  # nothing trained: every sample skipped
    assert control["after"]["greedy"] == control["before"]["greedy"]  # the same weights
    assert not learned(control["before"], control["after"]), f"the control passes the criterion: {control}"


#: seeds tried in turn; the criterion must hold on two of them (as SEAL's test): on 2026-12-01's
#: libraries (transformers 5.24, torch 2.13) RLOO's seed 0 drew other samples and collapsed
#: (sampled 2/16 -> 0/16) where every seed 0-5 had risen before, while seeds 1 and 2 rose
#: (2 -> 8 and 1 -> 5 of 16): one seed's draws, not the estimator
SEEDS, NEEDED = (0, 1, 2), 2


@pytest.mark.parametrize("algo", list(ESTIMATORS))
def test_rl_raises_success(algo, tmp_path, control):
    runs = []
    for seed in SEEDS:
        result = train(tmp_path / f"rl{seed}", algo, seed=seed)
        before, after = result["before"], result["after"]
        assert before["greedy"] == 0.0 and before["sampled"] < 0.25, f"the start solves too much: {before}"
        if algo != "role_agent" and seed == 0:  # the control's start, evaluated the same way
            assert before == control["before"]  # (World-In-Agent's prompts differ)
        runs.append((seed, before, after))
        if sum(learned(b, a) for _, b, a in runs) >= NEEDED:
            return
    pytest.fail(f"{algo} learned on fewer than {NEEDED} of seeds {SEEDS}: {runs}")
