"""The task lists of ``AlfWorldEnv``: generated tasks (``generator.py``) and ALFWorld's
released games (``official.py``), as ``Task`` objects with the metadata the reports and
the diagnosis read (task type, targets, transform, scene, room, source)."""

from __future__ import annotations

from collections.abc import Sequence

from roleagent.envs.alfworld import generator as G
from roleagent.envs.alfworld import official
from roleagent.envs.alfworld import scenes as S
from roleagent.types import Task

#: Metadata copied from an official game's record (``official.collect_games``).
_OFFICIAL_METADATA = (
    "task_type",
    "alfred_task_type",
    "object_target",
    "parent_target",
    "toggle_target",
    "scene",
    "room",
    "task_dir",
    "trial",
)


def _transform(task_type: str) -> str | None:
    return S.TRANSFORMS[task_type][0] if task_type in S.TRANSFORMS else None


def generated_tasks(
    difficulty: str,
    split: str,
    task_types: Sequence[str],
    size: int,
    knobs: G.Knobs | None = None,
    *,
    env: str = "alfworld",
) -> list[Task]:
    """``size`` generated tasks per task type, interleaved so that any prefix is balanced
    across types. ``difficulty`` is the label in the task ids; the specs are drawn from
    ``knobs`` when given (custom knobs), else from the named difficulty."""
    out = []
    for index in range(size):
        for tt in task_types:
            spec = G.sample_spec(knobs if knobs is not None else difficulty, split, tt, index)
            scene = S.load_scene(spec.scene)
            out.append(
                Task(
                    id=f"alfworld/{difficulty}/{split}/{tt}/{index:04d}",
                    env=env,
                    payload={
                        "source": "generated",
                        "difficulty": difficulty,
                        "split": split,
                        "index": index,
                        "spec": spec.to_json(),
                    },
                    split=split,
                    metadata={
                        "task_type": tt,
                        "alfred_task_type": S.ALFRED_TASK_TYPES[tt],
                        "object_target": spec.object_target,
                        "parent_target": spec.parent_target,
                        "toggle_target": spec.toggle_target,
                        "transform": _transform(tt),
                        "scene": spec.scene,
                        "room": scene.room,
                        "difficulty": difficulty,
                        "source": "generated",
                    },
                )
            )
    return out


def official_tasks(root: str, split: str, task_types: Sequence[str], *, env: str = "alfworld") -> list[Task]:
    """The released games of ``split`` under ``root`` whose type is in ``task_types``,
    numbered per task type in the order ``official.collect_games`` lists them."""
    counters: dict[str, int] = {}
    out = []
    for rec in official.collect_games(root, split):
        tt = rec["task_type"]
        if tt not in task_types:
            continue
        index = counters.get(tt, 0)
        counters[tt] = index + 1
        metadata = {k: rec[k] for k in _OFFICIAL_METADATA}
        metadata["transform"] = _transform(tt)
        metadata["source"] = "official"
        out.append(
            Task(
                id=f"alfworld/official/{split}/{tt}/{index:04d}",
                env=env,
                payload={"source": "official", "game_file": rec["game_file"]},
                split=split,
                metadata=metadata,
            )
        )
    return out
