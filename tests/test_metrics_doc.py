"""``docs/metrics.md`` documents every key a real run writes to ``metrics.jsonl``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.run_helpers import AIW, run

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def documented() -> list[re.Pattern]:
    """One pattern per key in the first column of the doc's tables (`a`, `b` in one cell
    are two keys; `<name>` stands for one or more characters)."""
    patterns = []
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            for key in re.findall(r"`([^`]+)`", line.split(" | ")[0]):
                parts = re.split(r"<[a-z]+>", key)
                patterns.append(re.compile(".+".join(re.escape(p) for p in parts) + r"\Z"))
    return patterns


def undocumented(keys: set[str]) -> set[str]:
    patterns = documented()
    return {k for k in keys if not any(p.match(k) for p in patterns)}


def run_keys(run_dir: Path) -> set[str]:
    return {k for line in (run_dir / "metrics.jsonl").read_text().splitlines() for k in json.loads(line)}


def test_doc_patterns_match_families_and_not_strangers():
    assert (
        undocumented({"eval/success_Pick2", "seal/rho_pass", "time/aiw_s", "train/anchor_grouped_step_frac"}) == set()
    )
    assert undocumented({"train/made_up", "update/kl_typo"}) == {"train/made_up", "update/kl_typo"}


def test_every_key_of_a_tiny_role_agent_run_is_documented(tmp_path):
    """Role-Agent (GiGPO-style state groups, World-In-Agent) with Agent-In-World: the
    evaluation records (with sampled episodes), the methods' keys and the anchor-group
    statistics."""
    run(tmp_path / "ra", 1, AIW + ["eval.at_start=true", "eval.sampled=1"])
    keys = run_keys(tmp_path / "ra")
    assert {"train/anchor_group_size_mean", "train/anchor_grouped_step_frac", "aiw/sampler_entropy"} <= keys
    assert {"train/successes", "eval/outcomes", "eval/sampled_success", "eval/sampled_game_successes"} <= keys
    assert undocumented(keys) == set()


@pytest.mark.slow
def test_every_key_of_a_tiny_seal_run_is_documented(tmp_path):
    """SEAL on BFCL (real bfcl-eval environment): its weights, labels and utilities."""
    from roleagent.config import load_config
    from roleagent.trainer import Trainer
    from tests.test_seal_trainer import TINY_BFCL

    trainer = Trainer(load_config(None, TINY_BFCL + [f"run_dir={tmp_path / 'seal'}", "iterations=1"]), quiet=True)
    try:
        trainer.run()
    finally:
        trainer.close()
    keys = run_keys(tmp_path / "seal")
    assert any(k.startswith("seal/rho_") for k in keys)
    assert undocumented(keys) == set()


def test_accepted_action_ratio_counts_what_the_environment_rejected():
    """Hand count: 4 steps, 3 parsed, 1 of those rejected by the environment -> 3/4 valid,
    2/4 accepted (a step without ``action_valid`` is accepted when it parsed)."""
    from roleagent.trainer.metrics import rollout_metrics
    from roleagent.types import Step, Task, Trajectory

    def step(valid: bool, **info) -> Step:
        return Step(observation="o", state_key="s", action_text="a", action="a", valid=valid, info=info)

    steps = [step(True, action_valid=True), step(True, action_valid=False), step(True), step(False)]
    m = rollout_metrics([Trajectory(task=Task(id="t", env="x"), steps=steps)], prefix="train/")
    assert m["train/valid_action_ratio"] == 0.75
    assert m["train/accepted_action_ratio"] == 0.5
