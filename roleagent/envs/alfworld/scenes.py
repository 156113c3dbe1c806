"""ALFRED scenes, object types and affordances for the ALFWorld game generator.

Everything here comes from the ``alfworld`` wheel itself, so the generated games use
ALFRED's own vocabulary:

* the 120 AI2-THOR floor plans the wheel ships in ``alfworld/gen/layouts``
  (``FloorPlan<N>-objects.json``: the object types present in the scene;
  ``FloorPlan<N>-openable.json``: receptacle instances with their ALFRED object ids and
  the agent pose next to them). Kitchens are 1-30, living rooms 201-230, bedrooms
  301-330, bathrooms 401-430; ALFRED's seen scenes are 7-30 of each room type and its
  unseen (valid_unseen/test) scenes 1-6 (``alfworld.gen.constants``).
* ``VAL_RECEPTACLE_OBJECTS`` (which object types a receptacle type can contain),
  ``VAL_ACTION_OBJECTS`` (heatable, coolable, cleanable, toggleable, sliceable),
  ``OPENABLE_CLASS_LIST`` and ``GOALS_VALID`` (which room types host which task type).

The ``*-openable.json`` files list only receptacles with precomputed interaction
points; receptacle types that a scene has (per ``*-objects.json``) but that file lacks
(typically garbage cans, coffee machines, toasters, stove burners and bathroom holders)
are added with synthesized, deterministic ALFRED-style ids and locations.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
from dataclasses import dataclass

#: Task types in the paper's Table 1 order (short names) and ALFRED's names for them.
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place",
    "look_at_obj_in_light",
    "pick_clean_then_place",
    "pick_heat_then_place",
    "pick_cool_then_place",
    "pick_two_obj_and_place",
)
ALFRED_TASK_TYPES: dict[str, str] = {
    "pick_and_place": "pick_and_place_simple",
    "look_at_obj_in_light": "look_at_obj_in_light",
    "pick_clean_then_place": "pick_clean_then_place_in_recep",
    "pick_heat_then_place": "pick_heat_then_place_in_recep",
    "pick_cool_then_place": "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place": "pick_two_obj_and_place",
}
SHORT_TASK_TYPES: dict[str, str] = {v: k for k, v in ALFRED_TASK_TYPES.items()}
#: Column names of the paper's Table 1.
TABLE_COLUMNS: dict[str, str] = {
    "pick_and_place": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place": "Clean",
    "pick_heat_then_place": "Heat",
    "pick_cool_then_place": "Cool",
    "pick_two_obj_and_place": "Pick2",
}
#: The state change a task type requires, the receptacle type that performs it and the verb.
TRANSFORMS: dict[str, tuple[str, str, str]] = {
    "pick_clean_then_place": ("clean", "SinkBasin", "clean"),
    "pick_heat_then_place": ("hot", "Microwave", "heat"),
    "pick_cool_then_place": ("cool", "Fridge", "cool"),
}

ROOM_RANGES: dict[str, range] = {
    "Kitchen": range(1, 31),
    "LivingRoom": range(201, 231),
    "Bedroom": range(301, 331),
    "Bathroom": range(401, 431),
}
LAMP_TYPES = ("DeskLamp", "FloorLamp")
#: Where a lamp stands (it is "in/on" one of these receptacles so the agent can use it there).
LAMP_HOSTS = (
    "Desk",
    "SideTable",
    "Dresser",
    "Shelf",
    "CoffeeTable",
    "TVStand",
    "DiningTable",
    "ArmChair",
    "Sofa",
    "Bed",
    "Ottoman",
)
#: Receptacle types never used as a task's target receptacle.
NON_TARGET_RECEPTACLES = {"Toaster"}
SLICED_SUFFIX = "Sliced"


def _constants():
    import alfworld.gen.constants as constants  # pure-python module, no heavy imports

    return constants


def alfworld_data_dir() -> str:
    """The ``alfworld/data`` folder of the installed wheel (domain and grammar)."""
    import importlib.util

    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("alfworld is not installed: pip install alfworld")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def _layouts_dir() -> str:
    return os.path.join(os.path.dirname(alfworld_data_dir()), "gen", "layouts")


def room_of(scene: int) -> str:
    for room, numbers in ROOM_RANGES.items():
        if scene in numbers:
            return room
    raise ValueError(f"not an ALFRED floor plan: {scene}")


def seen_scenes() -> list[int]:
    return list(_constants().TRAIN_SCENE_NUMBERS)


def unseen_scenes() -> list[int]:
    return list(_constants().TEST_SCENE_NUMBERS)


def valid_rooms(task_type: str) -> set[str]:
    return set(_constants().GOALS_VALID[ALFRED_TASK_TYPES[task_type]])


def can_contain(rtype: str, otype: str) -> bool:
    return otype in _constants().VAL_RECEPTACLE_OBJECTS.get(rtype, ())


def openable(rtype: str) -> bool:
    return rtype in _constants().OPENABLE_CLASS_SET


def affordance(kind: str, otype: str) -> bool:
    """``kind`` in Heatable, Coolable, Cleanable, Toggleable, Sliceable."""
    return otype in _constants().VAL_ACTION_OBJECTS[kind]


@functools.lru_cache(maxsize=1)
def pickupable_types() -> frozenset[str]:
    """Object types that some receptacle can hold (ALFRED's pickupable objects)."""
    c = _constants()
    out: set[str] = set()
    for values in c.VAL_RECEPTACLE_OBJECTS.values():
        out |= set(values)
    return frozenset(t for t in out if not t.endswith(SLICED_SUFFIX) and t not in LAMP_TYPES)


@functools.lru_cache(maxsize=1)
def static_receptacle_types() -> frozenset[str]:
    c = _constants()
    return frozenset(set(c.VAL_RECEPTACLE_OBJECTS) - set(c.MOVABLE_RECEPTACLES))


def mangle(alfred_id: str) -> str:
    """ALFRED object id -> PDDL name, exactly as ALFRED's ``fix_pddl_str_chars``."""
    table = {"|": "_bar_", "-": "_minus_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
    return "".join(table.get(ch, ch) for ch in alfred_id)


def format_coord(value: float) -> str:
    return f"{value:+06.2f}"


@dataclass(frozen=True)
class Receptacle:
    alfred_id: str  # e.g. "Cabinet|+00.68|+00.50|-02.20" or "Sink|-01.90|+00.97|-01.50|SinkBasin"
    rtype: str
    location: str  # e.g. "loc|0|-5|180|30"
    xyz: tuple[float, float, float]

    @property
    def name(self) -> str:
        return mangle(self.alfred_id)

    @property
    def location_name(self) -> str:
        return mangle(self.location)


@dataclass(frozen=True)
class Scene:
    number: int
    room: str
    receptacles: tuple[Receptacle, ...]
    object_types: frozenset[str]

    def receptacles_of(self, rtype: str) -> list[Receptacle]:
        return [r for r in self.receptacles if r.rtype == rtype]

    @property
    def receptacle_types(self) -> set[str]:
        return {r.rtype for r in self.receptacles}

    def lamps(self) -> list[str]:
        hosts = [r for r in self.receptacles if r.rtype in LAMP_HOSTS]
        if not hosts:
            return []
        return [t for t in LAMP_TYPES if t in self.object_types]


def _receptacle_type(alfred_id: str) -> str:
    parts = alfred_id.split("|")
    return parts[-1] if len(parts) > 4 else parts[0]


@functools.cache
def load_scene(number: int) -> Scene:
    """One ALFRED floor plan with its receptacles (real ids first, then synthesized)."""
    base = os.path.join(_layouts_dir(), f"FloorPlan{number}")
    with open(base + "-objects.json") as fh:
        object_types = frozenset(json.load(fh))
    with open(base + "-openable.json") as fh:
        points = json.load(fh)
    static = static_receptacle_types()
    receptacles: list[Receptacle] = []
    used_locs: set[str] = set()
    for alfred_id in sorted(points):
        rtype = _receptacle_type(alfred_id)
        if rtype not in static:
            continue
        x, z, rot, hor = points[alfred_id]
        gx, gz, hor = int(round(x / 0.25)), int(round(z / 0.25)), int(hor)
        loc = f"loc|{gx}|{gz}|{int(rot) // 90}|{hor}"
        while loc in used_locs:
            # ALFRED lets receptacles share a standing point (then "go to microwave 1"
            # also reaches the sink next to it). Generated games give every receptacle
            # its own point so that each "go to" means one place.
            hor += 15
            loc = f"loc|{gx}|{gz}|{int(rot) // 90}|{hor}"
        coords = tuple(float(v) for v in alfred_id.split("|")[1:4])
        receptacles.append(Receptacle(alfred_id, rtype, loc, coords))  # type: ignore[arg-type]
        used_locs.add(loc)
    present = {r.rtype for r in receptacles}
    # Receptacle types the scene has but the openable file lacks: synthesize instances.
    rng = random.Random(int(hashlib.sha256(f"scene|{number}".encode()).hexdigest()[:16], 16))
    for rtype in sorted((object_types & static) - present):
        count = 4 if rtype == "StoveBurner" else 1
        for _ in range(count):
            while True:
                x, y, z = rng.uniform(-3, 3), rng.uniform(0, 1.2), rng.uniform(-3, 3)
                alfred_id = "|".join([rtype, format_coord(x), format_coord(y), format_coord(z)])
                if rtype in ("SinkBasin", "BathtubBasin"):
                    alfred_id = alfred_id.replace(rtype, rtype[: -len("Basin")], 1) + "|" + rtype
                loc = (
                    f"loc|{int(round(x / 0.25))}|{int(round(z / 0.25))}|"
                    f"{rng.randrange(4)}|{rng.choice((0, 15, 30, 45, 60))}"
                )
                if loc not in used_locs:
                    break
            used_locs.add(loc)
            receptacles.append(Receptacle(alfred_id, rtype, loc, (round(x, 2), round(y, 2), round(z, 2))))
    return Scene(number, room_of(number), tuple(receptacles), object_types)
