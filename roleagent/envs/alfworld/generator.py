"""Generate ALFRED-style PDDL games (``game.tw-pddl``) for ALFWorld's TextWorld engine.

A game file is JSON ``{"pddl_domain", "grammar", "pddl_problem", "solvable"}`` exactly as
ALFWorld's released ``json_2.1.1`` games: the domain and grammar are the wheel's
``alfworld/data/alfred.pddl`` and ``alfred.twl2`` with the grammar's ``UNKNOWN GOAL``
replaced by the task sentence (ALFRED's goal templates, ``alfworld.gen.goal_library``),
and the problem lists ALFRED-mangled objects, receptacles and locations with the facts
ALFRED writes (``receptacleType``, ``objectType``, ``inReceptacle``,
``receptacleAtLocation``, ``objectAtLocation``, ``pickupable``, ``openable``,
``canContain``, ``cleanable``/``heatable``/``coolable``/``sliceable``, ``toggleable``,
``isReceptacleObject``) and the goal from ALFRED's goal library.

Generation has two deterministic stages:

1. :func:`sample_spec` picks, from a hash of (generator version, difficulty, split,
   task type, index), an ALFRED floor plan valid for the task type (``GOALS_VALID``), the
   target object type, the target receptacle type (or lamp type) and a placement seed.
   Seen splits ("train", "valid_seen") draw from ALFRED's seen scenes, "valid_unseen"
   from its unseen scenes, so valid_unseen has unseen layouts and object combinations.
2. :func:`build_problem` turns a spec into a PDDL problem: which receptacles of the
   scene are present (difficulty knob), where the target instances start (never
   already satisfying the goal; in closed containers with probability ``p_closed``),
   duplicate instances and distractor objects.

The planner check (``materialize`` in :mod:`roleagent.envs.alfworld.engine`) then plays
the planner's plan on the real engine; only a game that the plan wins is written to the
cache, so every playable game is solvable.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from roleagent.envs.alfworld import scenes as S
from roleagent.envs.alfworld.pddl import PlacedObject as _Obj
from roleagent.envs.alfworld.pddl import goal_pddl, problem_text  # noqa: F401  (goal_pddl re-exported)

#: Bump when the generated content changes: it is part of every seed and of the cache key.
GENERATOR_VERSION = "alfgen-1"


class GenerationError(RuntimeError):
    """A spec cannot be realised in its scene (the sampler then draws another one)."""


@dataclass(frozen=True)
class Knobs:
    """Difficulty knobs.

    n_receptacles: receptacles present (None: every receptacle of the floor plan, as in
        ALFWorld's released games); the target receptacle, the transform appliance, the
        lamp's host and the target's source are always present.
    n_distractors: other object types placed in the scene (each 1 + up to
        ``max_extra_duplicates`` instances).
    p_closed: probability that a target instance starts inside a closed container
        (cabinet, drawer, fridge, safe, microwave).
    max_extra_duplicates: extra instances of the target type beyond what the task needs
        (1, or 2 for pick_two), drawn uniformly from 0..max.
    """

    n_receptacles: int | None = 5
    n_distractors: int = 0
    p_closed: float = 0.0
    max_extra_duplicates: int = 0


DIFFICULTIES: dict[str, Knobs] = {
    # CPU learning runs: few receptacles, no distractors, nothing hidden, no duplicates.
    "easy": Knobs(n_receptacles=5, n_distractors=0, p_closed=0.0, max_extra_duplicates=0),
    "medium": Knobs(n_receptacles=10, n_distractors=6, p_closed=0.3, max_extra_duplicates=1),
    # Closer to ALFWorld's released games (which have 8-35 receptacles). Capped at 16 so
    # that the optimal planner (A*, used for the solvability check and the expert) stays
    # within seconds: with a whole 33-receptacle kitchen a pick-two plan takes minutes.
    "hard": Knobs(n_receptacles=16, n_distractors=10, p_closed=0.5, max_extra_duplicates=1),
}


@dataclass(frozen=True)
class Spec:
    """What a generated task is: enough to rebuild its game byte for byte."""

    task_type: str
    scene: int
    object_target: str
    parent_target: str | None  # receptacle type; None for look_at_obj_in_light
    toggle_target: str | None  # lamp type for look_at_obj_in_light
    seed: int
    knobs: Knobs = field(default_factory=Knobs)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Spec:
        data = dict(data)
        data["knobs"] = Knobs(**data["knobs"])
        return cls(**data)


def _rng(*parts: Any) -> random.Random:
    text = "|".join(str(p) for p in (GENERATOR_VERSION,) + parts)
    return random.Random(int(hashlib.sha256(text.encode()).hexdigest()[:16], 16))


# ----------------------------------------------------------------- stage 1: specs ----


def _target_objects(task_type: str, scene: S.Scene) -> list[str]:
    types = sorted(S.pickupable_types() & scene.object_types)
    if task_type in S.TRANSFORMS:
        kind = {"clean": "Cleanable", "hot": "Heatable", "cool": "Coolable"}[S.TRANSFORMS[task_type][0]]
        types = [t for t in types if S.affordance(kind, t)]
    return types


def _target_receptacles(task_type: str, otype: str, scene: S.Scene) -> list[str]:
    excluded = set(S.NON_TARGET_RECEPTACLES)
    if task_type in S.TRANSFORMS:
        excluded.add(S.TRANSFORMS[task_type][1])  # "put a clean apple in sinkbasin" is trivial
    return sorted(t for t in scene.receptacle_types if t not in excluded and S.can_contain(t, otype))


def _scene_supports(task_type: str, scene: S.Scene) -> bool:
    if scene.room not in S.valid_rooms(task_type):
        return False
    if task_type in S.TRANSFORMS and not scene.receptacles_of(S.TRANSFORMS[task_type][1]):
        return False
    if task_type == "look_at_obj_in_light" and not scene.lamps():
        return False
    return True


def _viable(spec: Spec, scene: S.Scene) -> bool:
    """Cheap check that :func:`build_problem` can place the target (its only failure)."""
    forbidden = {spec.parent_target} if spec.parent_target else set()
    if spec.task_type in S.TRANSFORMS:
        forbidden.add(S.TRANSFORMS[spec.task_type][1])
    sources = [r for r in scene.receptacles if S.can_contain(r.rtype, spec.object_target) and r.rtype not in forbidden]
    if spec.knobs.p_closed <= 0:
        sources = [r for r in sources if not S.openable(r.rtype)]
    return bool(sources)


@functools.cache
def scenes_for(split: str, task_type: str) -> list[int]:
    numbers = S.unseen_scenes() if split == "valid_unseen" else S.seen_scenes()
    return [n for n in numbers if _scene_supports(task_type, S.load_scene(n))]


def sample_spec(difficulty: str | Knobs, split: str, task_type: str, index: int) -> Spec:
    """The index-th task of (split, task type): deterministic, machine independent."""
    knobs = DIFFICULTIES[difficulty] if isinstance(difficulty, str) else difficulty
    tag = difficulty if isinstance(difficulty, str) else json.dumps(asdict(knobs), sort_keys=True)
    rng = _rng("spec", tag, split, task_type, index)
    candidates = scenes_for(split, task_type)
    if not candidates:
        raise GenerationError(f"no scene supports {task_type} in {split}")
    for _ in range(200):
        scene = S.load_scene(rng.choice(candidates))
        objects = _target_objects(task_type, scene)
        if not objects:
            continue
        otype = rng.choice(objects)
        parent = toggle = None
        if task_type == "look_at_obj_in_light":
            toggle = rng.choice(scene.lamps())
        else:
            receps = _target_receptacles(task_type, otype, scene)
            if not receps:
                continue
            parent = rng.choice(receps)
        spec = Spec(task_type, scene.number, otype, parent, toggle, rng.getrandbits(62), knobs)
        if _viable(spec, scene):
            return spec
    raise GenerationError(f"could not sample a {task_type} task for {split}/{index}")


# --------------------------------------------------------------- stage 2: problems ----


def _object_id(rng: random.Random, otype: str, host: S.Receptacle, taken: set[str]) -> str:
    x, y, z = host.xyz
    while True:
        alfred_id = "|".join(
            [
                otype,
                S.format_coord(x + rng.uniform(-0.4, 0.4)),
                S.format_coord(y + rng.uniform(0.0, 0.4)),
                S.format_coord(z + rng.uniform(-0.4, 0.4)),
            ]
        )
        if alfred_id not in taken:
            taken.add(alfred_id)
            return alfred_id


def _start_location(rng: random.Random, used: set[str]) -> str:
    while True:
        loc = f"loc|{rng.randint(-12, 12)}|{rng.randint(-12, 12)}|{rng.randrange(4)}|30"
        if loc not in used:
            return loc


def task_sentence(spec: Spec, rng: random.Random) -> str:
    import alfworld.gen.goal_library as glib

    templates = glib.gdict[S.ALFRED_TASK_TYPES[spec.task_type]]["templates"]
    return rng.choice(templates).format(
        obj=spec.object_target.lower(),
        recep=(spec.parent_target or "").lower(),
        toggle=(spec.toggle_target or "").lower(),
        mrecep="",
    )


def build_problem(spec: Spec) -> dict[str, Any]:
    """Spec -> {"problem": PDDL text, "sentence": task sentence, "layout": summary}."""
    rng = _rng("problem", spec.seed)
    scene = S.load_scene(spec.scene)
    required, lamp_host = _required_receptacles(spec, scene, rng)
    target_hosts = _target_hosts(spec, scene, rng)
    chosen = _chosen_receptacles(spec, scene, required + target_hosts, rng)
    taken: set[str] = set()
    objects = [
        _Obj(_object_id(rng, spec.object_target, host, taken), spec.object_target, host) for host in target_hosts
    ]
    if spec.toggle_target is not None and lamp_host is not None:
        objects.append(_Obj(_object_id(rng, spec.toggle_target, lamp_host, taken), spec.toggle_target, lamp_host))
    objects.extend(_distractors(spec, scene, chosen, taken, rng))
    objects.sort(key=lambda o: o.alfred_id)

    start = _start_location(rng, {r.location for r in chosen})
    sentence = task_sentence(spec, rng)
    problem = problem_text(spec, scene, chosen, objects, start)
    layout = {
        "receptacles": [r.alfred_id for r in chosen],
        "objects": {o.alfred_id: o.receptacle.alfred_id for o in objects},
        "target_hosts": [r.alfred_id for r in target_hosts],
    }
    return {"problem": problem, "sentence": sentence, "layout": layout}


def _required_receptacles(
    spec: Spec, scene: S.Scene, rng: random.Random
) -> tuple[list[S.Receptacle], S.Receptacle | None]:
    """The goal receptacle, the transform's appliances and the lamp's host (the lamp host too)."""
    transform = S.TRANSFORMS.get(spec.task_type)
    required: list[S.Receptacle] = []
    if spec.parent_target is not None:
        targets = scene.receptacles_of(spec.parent_target)
        if not targets:
            raise GenerationError("target receptacle type missing")
        required.append(rng.choice(targets))
    if transform is not None:
        appliances = scene.receptacles_of(transform[1])
        if not appliances:
            raise GenerationError("appliance missing")
        required.extend(appliances)
    lamp_host = None
    if spec.toggle_target is not None:
        hosts = [r for r in scene.receptacles if r.rtype in S.LAMP_HOSTS]
        if not hosts:
            raise GenerationError("no lamp host")
        lamp_host = rng.choice(hosts)
        required.append(lamp_host)
    return required, lamp_host


def _target_hosts(spec: Spec, scene: S.Scene, rng: random.Random) -> list[S.Receptacle]:
    """Where target instances start: never somewhere that already satisfies the goal."""
    knobs, transform = spec.knobs, S.TRANSFORMS.get(spec.task_type)
    forbidden_types = {spec.parent_target} if spec.parent_target else set()
    if transform is not None:
        forbidden_types.add(transform[1])
    sources = [
        r for r in scene.receptacles if S.can_contain(r.rtype, spec.object_target) and r.rtype not in forbidden_types
    ]
    open_sources = [r for r in sources if not S.openable(r.rtype)]
    closed_sources = [r for r in sources if S.openable(r.rtype)]
    if not sources or (knobs.p_closed <= 0 and not open_sources):
        raise GenerationError("no place for the target object")
    n_targets = (2 if spec.task_type == "pick_two_obj_and_place" else 1) + rng.randint(0, knobs.max_extra_duplicates)
    target_hosts: list[S.Receptacle] = []
    for _ in range(n_targets):
        closed = closed_sources and (not open_sources or rng.random() < knobs.p_closed)
        target_hosts.append(rng.choice(closed_sources if closed else open_sources))
    return target_hosts


def _chosen_receptacles(
    spec: Spec, scene: S.Scene, needed: list[S.Receptacle], rng: random.Random
) -> list[S.Receptacle]:
    """Which receptacles are in the game: the needed ones, then others up to the knob."""
    chosen: list[S.Receptacle] = []
    for r in needed:
        if r not in chosen:
            chosen.append(r)
    rest = [r for r in scene.receptacles if r not in chosen]
    rng.shuffle(rest)
    if spec.knobs.n_receptacles is None:
        chosen.extend(rest)
    else:
        chosen.extend(rest[: max(0, spec.knobs.n_receptacles - len(chosen))])
    chosen.sort(key=lambda r: r.alfred_id)
    return chosen


def _distractors(
    spec: Spec, scene: S.Scene, chosen: list[S.Receptacle], taken: set[str], rng: random.Random
) -> list[_Obj]:
    """Other object types of the scene, in receptacles that can hold them."""
    knobs = spec.knobs
    distractor_types = [t for t in sorted(S.pickupable_types() & scene.object_types) if t != spec.object_target]
    rng.shuffle(distractor_types)
    objects: list[_Obj] = []
    placed = 0
    for dtype in distractor_types:
        if placed >= knobs.n_distractors:
            break
        hosts = [r for r in chosen if S.can_contain(r.rtype, dtype)]
        if knobs.p_closed <= 0:
            hosts = [r for r in hosts if not S.openable(r.rtype)]
        if not hosts:
            continue
        for _ in range(1 + rng.randint(0, knobs.max_extra_duplicates)):
            host = rng.choice(hosts)
            objects.append(_Obj(_object_id(rng, dtype, host, taken), dtype, host))
        placed += 1
    return objects


def game_json(spec: Spec, domain: str, grammar: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The game file content (before the planner check) and its traj_data-like record."""
    built = build_problem(spec)
    game = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", built["sentence"]),
        "pddl_problem": built["problem"],
        "solvable": False,
    }
    traj = {
        "task_type": S.ALFRED_TASK_TYPES[spec.task_type],
        "pddl_params": {
            "object_target": spec.object_target,
            "parent_target": spec.parent_target or "",
            "toggle_target": spec.toggle_target or "",
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene},
        "turk_annotations": {"anns": [{"task_desc": built["sentence"]}]},
        "roleagent": {"generator": GENERATOR_VERSION, "spec": spec.to_json(), "layout": built["layout"]},
    }
    return game, traj
