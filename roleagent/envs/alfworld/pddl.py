"""PDDL text of a generated ALFWorld game (see ``generator.py``): the problem's objects,
receptacles, locations and the facts ALFRED writes, and the goal from ALFRED's goal library."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from roleagent.envs.alfworld import scenes as S

if TYPE_CHECKING:
    from roleagent.envs.alfworld.generator import Spec


@dataclass
class PlacedObject:
    """An object instance of the generated game and the receptacle it starts in."""

    alfred_id: str
    otype: str
    receptacle: S.Receptacle


def goal_pddl(spec: Spec) -> str:
    """The goal from ALFRED's goal library (``alfworld.gen.goal_library``)."""
    import alfworld.gen.goal_library as glib

    text = glib.gdict[S.ALFRED_TASK_TYPES[spec.task_type]]["pddl"].format(
        obj=spec.object_target,
        recep=spec.parent_target or "",
        toggle=spec.toggle_target or "",
        mrecep="",
    )
    return text.replace("#", "-")


def problem_text(
    spec: Spec, scene: S.Scene, receptacles: list[S.Receptacle], objects: list[PlacedObject], start: str
) -> str:
    """The PDDL problem ALFRED writes: objects, receptacles, locations, facts and goal."""
    c = S._constants()
    rtypes = sorted(S.static_receptacle_types())
    otypes = sorted((set(c.OBJECTS) | set(c.MOVABLE_RECEPTACLES)) - set(rtypes))
    locations = sorted({r.location for r in receptacles} | {start})
    ind = "\n        "
    lines = [f"(define (problem plan_roleagent_{spec.seed})", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines.append("        " + ind.join(f"{t}Type - otype" for t in otypes))
    lines.append("        " + ind.join(f"{t}Type - rtype" for t in rtypes))
    lines.append("        " + ind.join(f"{S.mangle(o.alfred_id)} - object" for o in objects))
    lines.append("        " + ind.join(f"{r.name} - receptacle" for r in receptacles))
    lines.append("        " + ind.join(f"{S.mangle(loc)} - location" for loc in locations))
    lines.append("        )")
    facts: list[str] = []
    for r in receptacles:
        facts.append(f"(receptacleType {r.name} {r.rtype}Type)")
    for o in objects:
        facts.append(f"(objectType {S.mangle(o.alfred_id)} {o.otype}Type)")
    present_otypes = sorted({o.otype for o in objects})
    for rt in sorted({r.rtype for r in receptacles}):
        for ot in present_otypes:
            if S.can_contain(rt, ot):
                facts.append(f"(canContain {rt}Type {ot}Type)")
    for o in objects:
        name = S.mangle(o.alfred_id)
        if o.otype in S.LAMP_TYPES:
            if o.otype == spec.toggle_target:
                facts.append(f"(toggleable {name})")
            continue
        facts.append(f"(pickupable {name})")
        if o.otype in c.MOVABLE_RECEPTACLES_SET:
            facts.append(f"(isReceptacleObject {name})")
        for kind, pred in (
            ("Cleanable", "cleanable"),
            ("Heatable", "heatable"),
            ("Coolable", "coolable"),
            ("Sliceable", "sliceable"),
        ):
            if S.affordance(kind, o.otype):
                facts.append(f"({pred} {name})")
    for r in receptacles:
        if S.openable(r.rtype):
            facts.append(f"(openable {r.name})")
    facts.append(f"(atLocation agent1 {S.mangle(start)})")
    for o in objects:
        facts.append(f"(inReceptacle {S.mangle(o.alfred_id)} {o.receptacle.name})")
    for r in receptacles:
        facts.append(f"(receptacleAtLocation {r.name} {r.location_name})")
    for o in objects:
        facts.append(f"(objectAtLocation {S.mangle(o.alfred_id)} {o.receptacle.location_name})")
    lines.append("    \n\n(:init\n")
    lines.append("        " + ind.join(facts))
    lines.append("        )\n    \n")
    lines.append(goal_pddl(spec))
    return "\n".join(lines)
