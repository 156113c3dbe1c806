"""How much of GiGPO's step credit comes from anchor groups where every rollout took the
same action (``algo.same_action_groups``)? Reads a run's training rollout dumps
(``rollouts/iter_*.jsonl``, whose steps carry ``extras["algo"]``) and prints, per
iteration and in all: the share of step samples in such groups and the share of the step
part's mass |A^S| they carry.

    python benchmarks/same_action_share.py runs/rl_curve [runs/other ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from roleagent.algos import same_action_groups


def iteration_share(path: Path) -> tuple[int, int, float, float]:
    """(steps, steps in same-action groups, |A^S| in all, |A^S| in those groups) of one dump."""
    keys, actions, step_parts = [], [], []
    for line in path.read_text().splitlines():
        episode = json.loads(line)
        for step in episode["steps"]:
            algo = step.get("extras", {}).get("algo")
            if algo is None or "step" not in algo:
                continue
            keys.append((episode["task_id"], algo["state_group"]))  # group ids are per episode group
            actions.append(step["action"])
            step_parts.append(abs(algo["step"]))
    if not keys:
        return 0, 0, 0.0, 0.0
    codes = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    agree = same_action_groups(np.array([codes[k] for k in keys]), actions)
    mass = np.asarray(step_parts)
    return len(keys), int(agree.sum()), float(mass.sum()), float(mass[agree].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    total = np.zeros(4)
    print("| run | iteration | steps | in same-action groups | share of |A^S| |")
    print("|---|---|---|---|---|")
    for run in args.runs:
        for path in sorted(Path(run, "rollouts").glob("iter_*.jsonl")):
            n, same, mass, same_mass = iteration_share(path)
            total += (n, same, mass, same_mass)
            share = same_mass / mass if mass else 0.0
            print(f"| {run} | {int(path.stem.split('_')[1])} | {n} | {same} ({same / max(n, 1):.0%}) | {share:.0%} |")
    n, same, mass, same_mass = total
    print(f"| all | | {int(n)} | {int(same)} ({same / max(n, 1):.0%}) | {same_mass / max(mass, 1e-12):.0%} |")


if __name__ == "__main__":
    main()
