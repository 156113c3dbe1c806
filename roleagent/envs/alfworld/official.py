"""Load ALFWorld's released games (``$ALFWORLD_DATA/json_2.1.1/<split>/<task>/<trial>``).

Same selection rules as ``alfworld.agents.environment.AlfredTWEnv.collect_game_files``:
a trial folder needs ``traj_data.json`` and ``game.tw-pddl``; folders whose path
contains "movable" or "Sliced" are skipped; the game must carry ``"solvable": true``;
only the six task types are kept. Task ids are ``alfworld/official/<split>/<type>/<NNNN>``
numbered in sorted folder order, so they are stable for a given copy of the data.
"""

from __future__ import annotations

import json
import os
from typing import Any

from roleagent.envs.alfworld import scenes as S


def official_root(data_dir: str | None = None) -> str | None:
    """The ``json_2.1.1`` folder under ``data_dir`` or ``$ALFWORLD_DATA``, if it exists."""
    base = data_dir if data_dir is not None else os.environ.get("ALFWORLD_DATA")
    if not base:
        return None
    base = os.path.expanduser(os.path.expandvars(base))
    for candidate in (os.path.join(base, "json_2.1.1"), base):
        if os.path.basename(candidate.rstrip("/")) == "json_2.1.1" and os.path.isdir(candidate):
            return candidate
    return None


def collect_games(root: str, split: str) -> list[dict[str, Any]]:
    """Records {game_file, traj_file, task_type, object_target, ...} of one split."""
    split_dir = os.path.join(root, split)
    if not os.path.isdir(split_dir):
        return []
    records = []
    for task_dir in sorted(os.listdir(split_dir)):
        task_path = os.path.join(split_dir, task_dir)
        if not os.path.isdir(task_path) or "movable" in task_dir or "Sliced" in task_dir:
            continue
        for trial in sorted(os.listdir(task_path)):
            trial_path = os.path.join(task_path, trial)
            game_file = os.path.join(trial_path, "game.tw-pddl")
            traj_file = os.path.join(trial_path, "traj_data.json")
            if not (os.path.isfile(game_file) and os.path.isfile(traj_file)):
                continue
            with open(traj_file) as fh:
                traj = json.load(fh)
            short = S.SHORT_TASK_TYPES.get(traj.get("task_type", ""))
            if short is None:
                continue
            with open(game_file) as fh:
                game = json.load(fh)
            if not game.get("solvable", False):
                continue
            params = traj.get("pddl_params", {})
            scene = traj.get("scene", {}).get("scene_num")
            records.append(
                {
                    "game_file": os.path.abspath(game_file),
                    "task_dir": task_dir,
                    "trial": trial,
                    "task_type": short,
                    "alfred_task_type": traj["task_type"],
                    "object_target": params.get("object_target") or None,
                    "parent_target": params.get("parent_target") or None,
                    "toggle_target": params.get("toggle_target") or None,
                    "scene": scene,
                    "room": S.room_of(scene) if isinstance(scene, int) else None,
                }
            )
    return records
