"""Ground truth of an ALFWorld game for the failure diagnosis: the PDDL goal (target
object type, goal receptacle or lamp type, required transform) from the task metadata and,
when the game file is at hand, where every target instance and lamp starts."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

APPLIANCE = {"clean": "sinkbasin", "hot": "microwave", "cool": "fridge"}


@dataclass
class Truth:
    task_type: str
    obj: str  # target object type, lower case ("apple")
    recep: str | None  # goal receptacle type ("countertop"); None for look tasks
    toggle: str | None  # lamp type ("desklamp") for look tasks
    transform: str | None  # "clean" | "hot" | "cool" | None
    object_locations: dict[str, str] = field(default_factory=dict)  # "apple 1" -> "fridge 1"
    lamp_locations: dict[str, str] = field(default_factory=dict)
    receptacles: list[str] = field(default_factory=list)
    closed: set[str] = field(default_factory=set)  # openable receptacles (start closed)

    @property
    def appliance(self) -> str | None:
        return APPLIANCE.get(self.transform or "")


def truth_from_metadata(metadata: dict[str, Any]) -> Truth:
    def low(value):
        return value.lower() if isinstance(value, str) and value else None

    transform = metadata.get("transform")
    if transform is None:
        transform = {
            "pick_clean_then_place": "clean",
            "pick_heat_then_place": "hot",
            "pick_cool_then_place": "cool",
        }.get(metadata.get("task_type", ""))
    return Truth(
        task_type=metadata.get("task_type", ""),
        obj=low(metadata.get("object_target")) or "",
        recep=low(metadata.get("parent_target")),
        toggle=low(metadata.get("toggle_target")),
        transform=transform,
    )


_CHARS = (("_bar_", "|"), ("_minus_", "-"), ("_plus_", "+"), ("_dot_", "."), ("_comma_", ","))


def demangled_names(ids: list[str]) -> dict[str, str]:
    """Mangled PDDL ids -> "apple 1" names, replicating alfworld's ``Demangler`` (no shuffle).

    fast-downward lower-cases PDDL names, so the ids are lower-cased first, as the
    engine sees them.
    """
    ids = sorted({i.lower() for i in ids})
    counts: dict[str, int] = {}
    for i in ids:
        head = i.split("_bar_", 1)
        if len(head) > 1:
            name = head[0] + ("basin" if "basin" in i else "")
            counts[name] = counts.get(name, 0) + 1
    pools = {name: list(range(1, n + 1)) for name, n in counts.items()}
    out = {}
    for i in ids:
        text = i
        for a, b in _CHARS:
            text = text.replace(a, b)
        head = text.split("|", 1)
        if len(head) == 1:
            out[i] = text
        else:
            name = head[0] + ("basin" if "basin" in i else "")
            out[i] = f"{name} {pools[name].pop()}"
    return out


def truth_from_game(game_file: str, metadata: dict[str, Any]) -> Truth:
    """Metadata truth plus where target instances and lamps start, from the PDDL problem."""
    truth = truth_from_metadata(metadata)
    with open(game_file) as fh:
        problem = json.load(fh)["pddl_problem"]
    objects = re.findall(r"^\s*(\S+) - object\s*$", problem, flags=re.M)
    receps = re.findall(r"^\s*(\S+) - receptacle\s*$", problem, flags=re.M)
    names = demangled_names(objects + receps)
    types = {a.lower(): b.lower()[:-4] for a, b in re.findall(r"\(objectType (\S+) (\S+)\)", problem)}
    truth.receptacles = sorted(names[r.lower()] for r in receps)
    truth.closed = {names[r.lower()] for r in re.findall(r"\(openable (\S+)\)", problem) if r.lower() in names}
    for o, r in re.findall(r"\(inReceptacle (\S+) (\S+)\)", problem):
        o, r = o.lower(), r.lower()
        if o not in names or r not in names:
            continue
        if types.get(o) == truth.obj:
            truth.object_locations[names[o]] = names[r]
        if truth.toggle and types.get(o) == truth.toggle:
            truth.lamp_locations[names[o]] = names[r]
    return truth


def game_truth(task_metadata: dict[str, Any], game_file: str | None) -> Truth:
    """Ground truth from the game file when it exists, else from the task metadata."""
    if game_file and os.path.isfile(game_file):
        try:
            return truth_from_game(game_file, task_metadata)
        except (OSError, ValueError, KeyError):
            pass
    return truth_from_metadata(task_metadata)
