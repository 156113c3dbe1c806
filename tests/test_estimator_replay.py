"""Results-equality guard: one seeded iteration of each built-in estimator, replayed on the
tiny model and a scripted environment, gives today's advantages and loss.

Refactors of the plumbing around the estimators (registries, the iteration, the methods'
interface) must not change any shipped recipe's numbers; this test holds them to the values
stored in ``tests/data/estimator_replay.json`` (per estimator: each step's action, reward,
advantage and the advantage's named parts, in dump order; the update's ``pg_loss``,
``kl``, ``grad_norm`` and ``samples``).

The environment is ``lucky`` (``tests.run_helpers.LuckyEnv``, the scripted corridor where
some random actions also win), so a random tiny model gets groups of mixed returns and
nonzero advantages; on the plain corridor every return is 0 and every estimator's answer
would be 0.

When a change is *meant* to change the numbers (a new default, a fixed bug), regenerate the
fixture and say so in the commit::

    OMP_NUM_THREADS=1 PYTHONPATH=. python tests/test_estimator_replay.py

The stored values come from float32 on a CPU; another torch build or machine may differ in
the last bits, hence the tolerances below. If a replay samples different actions, the
failure says so (the rollouts changed, not the estimator).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests.run_helpers` when run as a script

from tests.run_helpers import TINY  # noqa: E402  (registers the lucky environment)

FIXTURE = Path(__file__).parent / "data" / "estimator_replay.json"

#: Estimator → the settings its recipes switch on with it (Role-Agent: World-In-Agent, the default).
ESTIMATORS: dict[str, list[str]] = {
    "grpo": ["algo.name=grpo", "wia.enabled=false"],
    "rloo": ["algo.name=rloo", "wia.enabled=false"],
    "gigpo": ["algo.name=gigpo", "wia.enabled=false"],
    "role_agent": ["algo.name=role_agent"],
    "ppo": ["algo.name=ppo", "wia.enabled=false", "critic.enabled=true", "critic.lr=1e-2"],
}
#: Two optimizer steps, so the second one's loss has ratios off 1 and a KL to the reference.
SETTINGS = ["optim.kl_coef=0.05", "optim.mini_batches=2", "rollout.max_steps=5", "rollout.group_size=3"]
LOSS_KEYS = ("pg_loss", "kl", "grad_norm", "samples")
RTOL, ATOL = 1e-4, 1e-6


def replay(name: str, run_dir: Path) -> dict:
    """Iteration 0 of a fresh seeded run with estimator ``name``: per step (in the dump's
    order) its action, reward, advantage and parts; the update's loss metrics."""
    from roleagent.config import load_config
    from roleagent.trainer import Trainer

    cfg = load_config(None, TINY + [f"run_dir={run_dir}", "iterations=1", *SETTINGS, *ESTIMATORS[name]])
    trainer = Trainer(cfg, quiet=True)
    try:
        record = trainer.train_iteration(0)
    finally:
        trainer.close()
    lines = (run_dir / "rollouts" / "iter_000000.jsonl").read_text().splitlines()
    steps = [s for t in map(json.loads, lines) for s in t["steps"]]
    algo = [s.get("extras", {}).get("algo", {}) for s in steps]
    return {
        "actions": [s["action_text"] for s in steps],
        "rewards": [s["reward"] for s in steps],
        "advantages": {key: [a.get(key) for a in algo] for key in sorted({k for a in algo for k in a})},
        "loss": {key: record[f"update/{key}"] for key in LOSS_KEYS},
    }


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_estimator_replays_todays_advantages_and_loss(tmp_path, name):
    stored = json.loads(FIXTURE.read_text())[name]
    now = replay(name, tmp_path)
    assert now["actions"] == stored["actions"], f"{name}: the rollouts sampled other actions (not the estimator)"
    np.testing.assert_allclose(now["rewards"], stored["rewards"], rtol=RTOL, atol=ATOL)
    assert sorted(now["advantages"]) == sorted(stored["advantages"]), f"{name}: other advantage parts"
    for key, values in stored["advantages"].items():
        np.testing.assert_allclose(now["advantages"][key], values, rtol=RTOL, atol=ATOL, err_msg=f"{name} {key}")
    for key, value in stored["loss"].items():
        np.testing.assert_allclose(now["loss"][key], value, rtol=RTOL, atol=ATOL, err_msg=f"{name} update/{key}")


def test_the_fixture_is_not_trivial():
    """Every estimator's stored advantages vary (a guard of all-zero advantages would pass
    whatever the estimator computed) and its update trained samples."""
    stored = json.loads(FIXTURE.read_text())
    assert sorted(stored) == sorted(ESTIMATORS)
    for name, values in stored.items():
        assert np.ptp(values["advantages"]["advantage"]) > 0, name
        assert values["loss"]["samples"] > 0, name


def regenerate() -> None:
    """Rewrite the fixture from today's code (see the module docstring for when)."""
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ESTIMATORS:
            out[name] = replay(name, Path(tmp) / name)
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    regenerate()
