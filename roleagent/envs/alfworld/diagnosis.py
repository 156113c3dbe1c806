"""Rule-based failure diagnosis for ALFWorld with the Role-Agent taxonomy (paper Table 6).

``diagnose_trajectory(trajectory, truth)`` returns, for a failed trajectory,
``{"dominant_type", "labels", "detail", "critical_step", "evidence"}`` and ``None`` for a
success. It needs no LLM: it replays the trajectory's commands against what the engine
answered and compares them with the ground truth of the game (the PDDL goal: target
object type, target receptacle type or lamp type, required transform; and, when the game
file is at hand, where every target instance and lamp starts).

Inputs it reads from ``Trajectory.steps``: ``action`` (the parsed command, ``None`` when
the model output could not be parsed), ``valid`` (parse validity), ``observation``
(s_t, what the agent saw before acting) and ``info`` (``action_valid``: whether the
command was admissible, as ``AlfWorldEnv.step`` reports). The feedback to step t is the
next step's observation (``final_observation`` after the last step); a command counts
as failed when the engine answered "Nothing happens." or ``info["action_valid"]`` is
False. Steps are 0-based; ``critical_step`` is the index in ``trajectory.steps``.

The rules (each may fire; every firing adds its label, with the step where it happened):

* ``action_format_error`` - the output could not be parsed into a command
  (``valid`` False / ``action`` None) or is not an ALFWorld command form
  (go to, open, close, take .. from, move .. to / put .. in/on, heat/cool/clean .. with,
  slice .. with, use, examine, look, inventory). Dominant when such steps are at least a
  quarter of the episode.
* ``wrong_receptacle`` - a target-type object was put into a receptacle of another type
  than the goal's, or (look tasks) a lamp of another type was used.
* ``missing_precondition`` - a step was attempted before its precondition held: placing
  the target in the goal receptacle without the required clean/heat/cool; taking from
  or putting into a closed container; taking while the hands are full; cleaning, heating,
  cooling or placing something the agent does not hold; turning the lamp on without
  holding the target object (look tasks).
* ``wrong_object_interaction`` - the agent acted on an object of a type the task does
  not involve: cleaned/heated/cooled it, put it into a goal-type receptacle, looked at it
  under the lamp, took it although a target instance lay in the same receptacle, or took
  it and carried it on for ``WRONG_CARRY_STEPS`` (4) further commands (a stray pick-up
  that is put back at once is exploration, not this mode).
* ``entity_confusion`` - the command named an entity instance that is not where the
  agent is (e.g. "take apple 2 from fridge 1" when the fridge shows apple 1), a
  receptacle that does not exist, or, for pick-two tasks, took back an instance it had
  already placed in the goal receptacle.
* ``repeated_failed_action`` - the same failing command was issued again (twice in a
  row, or three times in all).
* ``navigation_loop`` - six or more consecutive "go to" commands shuttling between at
  most two receptacles, or an A->B->A->B... cycle of "go to" with nothing done in between.
* ``wrong_target_location`` - the agent never reached a receptacle that held (or, once
  seen, showed) a target instance or the needed lamp / appliance, although it moved; it
  searched the wrong places.
* ``exhaustive_exploration_failure`` - the agent visited at least 75% of the
  receptacles of the room and still never held the target (it searched everywhere but
  missed it, or saw it and did not take it).
* ``repetitive_exploration`` - at least 40% of the movement / inspection commands went
  back to receptacles already inspected with nothing changed since (or repeated
  look / inventory / examine), with at least three such steps.
* ``premature_give_up`` - the episode ended before the step budget without success, or
  its last third consists only of idle commands (look, inventory, examine, failed
  commands) after progress stopped.

Dominant type: the labels are ranked by how directly they explain the failure
(``PRIORITY``); the first one present wins, except that ``action_format_error`` wins
outright when it is the episode's majority pattern (share >= 25%). If no rule fires, the
progress the agent made decides: target never seen -> ``wrong_target_location``; seen but
never taken -> ``exhaustive_exploration_failure``; taken but the task not completed ->
``repetitive_exploration``. ``critical_step`` is the step of the dominant label's first
occurrence.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from roleagent.types import Trajectory

FAILURE_TAXONOMY: tuple[str, ...] = (
    "repetitive_exploration",
    "wrong_target_location",
    "wrong_receptacle",
    "premature_give_up",
    "missing_precondition",
    "repeated_failed_action",
    "navigation_loop",
    "entity_confusion",
    "wrong_object_interaction",
    "exhaustive_exploration_failure",
    "action_format_error",
)

#: Most specific root causes first.
PRIORITY: tuple[str, ...] = (
    "wrong_receptacle",
    "missing_precondition",
    "wrong_object_interaction",
    "entity_confusion",
    "repeated_failed_action",
    "navigation_loop",
    "wrong_target_location",
    "exhaustive_exploration_failure",
    "repetitive_exploration",
    "premature_give_up",
    "action_format_error",
)

APPLIANCE = {"clean": "sinkbasin", "hot": "microwave", "cool": "fridge"}
VERB_TRANSFORM = {"clean": "clean", "heat": "hot", "cool": "cool"}
IDLE_VERBS = {"look", "inventory", "examine"}
NOTHING = "Nothing happens."
#: A wrongly taken object counts once the agent goes on with it for this many commands.
WRONG_CARRY_STEPS = 4

_COMMANDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("goto", re.compile(r"^go to (?P<r>.+)$")),
    ("open", re.compile(r"^open (?P<r>.+)$")),
    ("close", re.compile(r"^close (?P<r>.+)$")),
    ("take", re.compile(r"^take (?P<o>.+?) from (?P<r>.+)$")),
    ("put", re.compile(r"^(?:move|put) (?P<o>.+?) (?:to|in/on|in|on) (?P<r>.+)$")),
    ("heat", re.compile(r"^heat (?P<o>.+?) with (?P<r>.+)$")),
    ("cool", re.compile(r"^cool (?P<o>.+?) with (?P<r>.+)$")),
    ("clean", re.compile(r"^clean (?P<o>.+?) with (?P<r>.+)$")),
    ("slice", re.compile(r"^slice (?P<o>.+?) with (?P<r>.+)$")),
    ("use", re.compile(r"^use (?P<o>.+)$")),
    ("examine", re.compile(r"^examine (?P<o>.+)$")),
    ("look", re.compile(r"^look$")),
    ("inventory", re.compile(r"^inventory$")),
    ("help", re.compile(r"^help$")),
)


def parse_command(text: str | None) -> tuple[str, str | None, str | None] | None:
    """ALFWorld command -> (verb, object, receptacle); None when not a command form."""
    if not text:
        return None
    text = " ".join(text.strip().lower().split())
    for verb, pattern in _COMMANDS:
        m = pattern.match(text)
        if m:
            groups = m.groupdict()
            return verb, groups.get("o"), groups.get("r")
    return None


def entity_type(name: str | None) -> str:
    """"apple 1" -> "apple"; "sinkbasin 2" -> "sinkbasin"."""
    if not name:
        return ""
    text = name.strip().lower()
    # Strip a trailing number in linear time (re.sub(r"\s*\d+$", ...) rescans every
    # suffix of a long digit run in a model-written name: quadratic).
    end = len(text)
    while end and text[end - 1].isdecimal():
        end -= 1
    return text if end == len(text) else text[:end].rstrip()


_OPEN = re.compile(r"The (?P<r>[\w ]+?) is open\. In it, you see (?P<items>[^.]*)\.")
_ROOM = re.compile(r"Looking quickly around you, you see (?P<items>[^.]*)\.")


def _items(text: str) -> list[str]:
    text = text.strip()
    if not text or text == "nothing":
        return []
    parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", text)
    out = []
    for part in parts:
        part = part.strip()
        part = re.sub(r"^(a|an|some|the)\s+", "", part)
        if part:
            out.append(part)
    return out


def visible_contents(feedback: str) -> dict[str, list[str]]:
    """Receptacle -> entities listed in a feedback text ("On the desk 1, you see ...")."""
    out: dict[str, list[str]] = {}
    m = _OPEN.search(feedback)
    if m:
        out[m.group("r").strip().lower()] = _items(m.group("items"))
    for m in re.finditer(r"On the (?P<r>[\w ]+?), you see (?P<items>[^.]*)\.", feedback):
        out[m.group("r").strip().lower()] = _items(m.group("items"))
    return out


def room_receptacles(observation: str) -> list[str]:
    m = _ROOM.search(observation)
    return _items(m.group("items")) if m else []


# ------------------------------------------------------------------ ground truth ------


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
        transform = {"pick_clean_then_place": "clean", "pick_heat_then_place": "hot",
                     "pick_cool_then_place": "cool"}.get(metadata.get("task_type", ""))
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
    types = {a.lower(): b.lower()[:-4] for a, b in
             re.findall(r"\(objectType (\S+) (\S+)\)", problem)}
    truth.receptacles = sorted(names[r.lower()] for r in receps)
    truth.closed = {names[r.lower()] for r in re.findall(r"\(openable (\S+)\)", problem)
                    if r.lower() in names}
    for o, r in re.findall(r"\(inReceptacle (\S+) (\S+)\)", problem):
        o, r = o.lower(), r.lower()
        if o not in names or r not in names:
            continue
        if types.get(o) == truth.obj:
            truth.object_locations[names[o]] = names[r]
        if truth.toggle and types.get(o) == truth.toggle:
            truth.lamp_locations[names[o]] = names[r]
    return truth


# ------------------------------------------------------------------ replay ------------


@dataclass
class _Event:
    step: int
    label: str
    detail: str


def _feedbacks(trajectory: Trajectory) -> list[str]:
    steps = trajectory.steps
    return [steps[t + 1].observation if t + 1 < len(steps) else (trajectory.final_observation or "")
            for t in range(len(steps))]


def diagnose_trajectory(trajectory: Trajectory, truth: Truth | None = None,
                        max_steps: int = 50) -> dict[str, Any] | None:
    """Failure labels of a failed trajectory (None for a success); see the module doc."""
    if trajectory.success:
        return None
    truth = truth or truth_from_metadata(trajectory.task.metadata)
    steps = trajectory.steps
    feedbacks = _feedbacks(trajectory)
    events: list[_Event] = []

    def fire(step: int, label: str, detail: str) -> None:
        events.append(_Event(step, label, detail))

    if not steps:
        return {"dominant_type": "premature_give_up", "labels": ["premature_give_up"],
                "detail": "The agent took no action.", "critical_step": 0, "evidence": []}

    first_obs = steps[0].observation or ""
    receptacles = truth.receptacles or room_receptacles(first_obs)
    known_receps = set(receptacles)
    closed = set(truth.closed) or {r for r in receptacles
                                   if entity_type(r) in ("cabinet", "drawer", "fridge", "microwave", "safe")}
    contents: dict[str, list[str]] = {}  # what the agent has seen where
    where_target: dict[str, str] = dict(truth.object_locations)
    where_lamp: dict[str, str] = dict(truth.lamp_locations)
    location: str | None = None
    holding: str | None = None
    transformed: set[str] = set()
    placed_goal: set[str] = set()
    visited: list[str] = []
    inspected_at: dict[str, int] = {}  # receptacle -> step of last inspection
    changed_since: dict[str, bool] = {}
    redundant: list[int] = []
    movement_steps = 0
    failed_counts: dict[str, int] = {}
    prev_failed: str | None = None
    format_errors: list[int] = []
    coverage_step: int | None = None
    target_seen_step: int | None = None
    held_target = False
    held_step: int | None = None
    wrong_take: tuple[int, str, int] | None = None
    seen_before_take: list[str] = []
    goto_seq: list[tuple[int, str]] = []
    idle_or_failed: list[bool] = []

    for t, step in enumerate(steps):
        fb = (feedbacks[t] or "").strip()
        parsed = parse_command(step.action) if step.action is not None else None
        if not step.valid or step.action is None or parsed is None:
            format_errors.append(t)
            fire(t, "action_format_error",
                 f"step {t}: output {str(step.action_text or step.action)[:60]!r} is not an ALFWorld command")
            idle_or_failed.append(True)
            prev_failed = None
            continue
        verb, o, r = parsed
        info = step.info or {}
        ok = bool(info["action_valid"]) if "action_valid" in info else fb != NOTHING
        if fb == NOTHING:
            ok = False
        command = " ".join((step.action or "").lower().split())
        o_type, r_type = entity_type(o), entity_type(r)

        # ---- failed commands: classify the precondition that did not hold
        if not ok:
            idle_or_failed.append(True)
            failed_counts[command] = failed_counts.get(command, 0) + 1
            if prev_failed == command or failed_counts[command] >= 3:
                fire(t, "repeated_failed_action", f"step {t}: {command!r} failed again")
            prev_failed = command
            if r and known_receps and r not in known_receps and entity_type(r) in {entity_type(k) for k in known_receps}:
                fire(t, "entity_confusion", f"step {t}: {r!r} does not exist in this room")
            elif verb == "take" and r in closed and r not in contents:
                fire(t, "missing_precondition", f"step {t}: took from {r} without opening it")
            elif verb == "take" and holding is not None:
                fire(t, "missing_precondition", f"step {t}: tried to take {o} while holding {holding}")
            elif verb == "take" and location != r:
                fire(t, "missing_precondition", f"step {t}: tried to take from {r} without going there")
            elif verb == "take" and r in contents and o not in contents[r] and \
                    any(entity_type(x) == o_type for x in contents[r]):
                fire(t, "entity_confusion",
                     f"step {t}: {o} is not in {r}; it shows {', '.join(contents[r])}")
            elif verb in ("put", "heat", "cool", "clean") and holding != o:
                if holding is not None and entity_type(holding) == o_type:
                    fire(t, "entity_confusion", f"step {t}: named {o} but holds {holding}")
                else:
                    fire(t, "missing_precondition", f"step {t}: {verb} {o} without holding it")
            elif verb == "put" and r in closed and location == r:
                fire(t, "missing_precondition", f"step {t}: put into {r} without opening it")
            elif verb in ("put", "heat", "cool", "clean", "open", "close", "use") and r and location != r:
                fire(t, "missing_precondition", f"step {t}: {verb} at {r} without going there")
            elif verb in ("heat", "cool", "clean") and r_type and r_type != APPLIANCE.get(VERB_TRANSFORM[verb]):
                fire(t, "wrong_receptacle", f"step {t}: tried to {verb} with a {r_type}")
            continue

        prev_failed = None
        idle_or_failed.append(verb in IDLE_VERBS)
        if wrong_take is not None:
            w_step, w_obj, w_count = wrong_take
            if holding != w_obj:
                wrong_take = None
            elif w_count + 1 >= WRONG_CARRY_STEPS:
                fire(w_step, "wrong_object_interaction",
                     f"step {w_step}: took {w_obj} and carried it on, but the task needs a {truth.obj}")
                wrong_take = None
            else:
                wrong_take = (w_step, w_obj, w_count + 1)

        # ---- successful commands: update the world and look for wrong choices
        if verb == "goto":
            movement_steps += 1
            goto_seq.append((t, r))
            if r in inspected_at and not changed_since.get(r, True):
                redundant.append(t)
            location = r
            if r not in visited:
                visited.append(r)
            if receptacles and coverage_step is None and len(set(visited)) >= 0.75 * len(receptacles):
                coverage_step = t
        elif verb in ("open", "examine", "look"):
            movement_steps += 1
            target = r or o or location
            if verb == "look" or (target in inspected_at and not changed_since.get(target, True)):
                redundant.append(t)
        elif verb == "inventory":
            movement_steps += 1
            redundant.append(t)
        if verb == "open" and r:
            closed.discard(r)
        if verb == "take":
            holding = o
            seen_before_take = list(contents.get(r, []))
            if r in contents and o in contents[r]:
                contents[r].remove(o)
            changed_since[r] = True
            if o_type == truth.obj:
                held_target = True
                held_step = t if held_step is None else held_step
                if o in placed_goal and truth.task_type == "pick_two_obj_and_place":
                    fire(t, "entity_confusion", f"step {t}: took {o} back out of the goal receptacle")
                    placed_goal.discard(o)
            elif truth.obj and not (truth.toggle and o_type == truth.toggle):
                beside = [x for x in seen_before_take if entity_type(x) == truth.obj]
                if beside:
                    fire(t, "wrong_object_interaction",
                         f"step {t}: took {o} although {beside[0]} was right there")
                else:
                    wrong_take = (t, o, 0)  # confirmed if carried on or used (below)
        elif verb in ("heat", "cool", "clean"):
            if o_type == truth.obj:
                transformed.add(o)
            else:
                fire(t, "wrong_object_interaction", f"step {t}: {verb}ed {o}, not a {truth.obj}")
            if truth.transform and VERB_TRANSFORM[verb] != truth.transform and o_type == truth.obj:
                fire(t, "wrong_object_interaction",
                     f"step {t}: made {o} {VERB_TRANSFORM[verb]}, the task wants it {truth.transform}")
        elif verb == "put":
            holding = None
            contents.setdefault(r, []).append(o)
            changed_since[r] = True
            if o_type == truth.obj and truth.recep:
                if r_type != truth.recep:
                    fire(t, "wrong_receptacle",
                         f"step {t}: put {o} in {r}, the goal receptacle is a {truth.recep}")
                elif truth.transform and o not in transformed:
                    fire(t, "missing_precondition",
                         f"step {t}: put {o} in {r} without making it {truth.transform} first")
                else:
                    placed_goal.add(o)
            elif o_type != truth.obj and r_type == truth.recep:
                fire(t, "wrong_object_interaction", f"step {t}: put {o} in the goal {r}")
        elif verb == "use":
            lamp_type = entity_type(o)
            if truth.toggle and lamp_type in ("desklamp", "floorlamp") and lamp_type != truth.toggle:
                fire(t, "wrong_receptacle", f"step {t}: used a {lamp_type}, the task asks for the {truth.toggle}")
            elif truth.toggle and holding is None:
                fire(t, "missing_precondition",
                     f"step {t}: turned on {o} without holding a {truth.obj}")
            elif truth.toggle and entity_type(holding) != truth.obj:
                fire(t, "wrong_object_interaction",
                     f"step {t}: looked at {holding} under the lamp; the task needs a {truth.obj}")

        # ---- what the feedback revealed
        seen = visible_contents(fb)
        for rec, items in seen.items():
            inspected_at[rec] = t
            changed_since[rec] = False
            contents[rec] = list(items)
            for item in items:
                if entity_type(item) == truth.obj:
                    where_target.setdefault(item, rec)
                    if target_seen_step is None:
                        target_seen_step = t
                if truth.toggle and entity_type(item) == truth.toggle:
                    where_lamp.setdefault(item, rec)

    # ---- trajectory-level rules
    # navigation loop: >= 6 consecutive go-to among <= 2 receptacles, or ABAB with nothing between
    run: list[tuple[int, str]] = []
    last_t = -2
    loop_step = None
    for t, r in goto_seq:
        run = run + [(t, r)] if t == last_t + 1 else [(t, r)]
        last_t = t
        names = [x[1] for x in run[-6:]]
        if len(run) >= 6 and len(set(names)) <= 2:
            loop_step = run[-6][0]
            break
        if len(run) >= 4:
            a, b, c, d = [x[1] for x in run[-4:]]
            if a == c and b == d and a != b:
                loop_step = run[-4][0]
                break
    if loop_step is not None:
        fire(loop_step, "navigation_loop", f"from step {loop_step}: went back and forth between the same receptacles")

    # exploration coverage
    n_receps = len(receptacles)
    coverage = len(set(visited)) / n_receps if n_receps else 0.0
    if not held_target and truth.obj:
        target_places = set(where_target.values())
        if coverage >= 0.75 and n_receps:
            step = target_seen_step if target_seen_step is not None else (coverage_step or 0)
            fire(step, "exhaustive_exploration_failure",
                 f"visited {len(set(visited))}/{n_receps} receptacles and never took a {truth.obj}"
                 + (f" (one was visible at step {target_seen_step})" if target_seen_step is not None else ""))
        elif movement_steps and target_places and not (target_places & set(visited)):
            first_goto = goto_seq[0][0] if goto_seq else 0
            fire(first_goto, "wrong_target_location",
                 f"never went to {', '.join(sorted(target_places))} where the {truth.obj} is; "
                 f"searched {', '.join(visited[:6]) or 'nothing'}")
    # Holding the target, the agent then searched elsewhere for the lamp / appliance.
    after = [(t, r) for t, r in goto_seq if held_step is not None and t > held_step]
    if truth.task_type == "look_at_obj_in_light" and len(after) >= 2 and where_lamp and \
            not (set(where_lamp.values()) & {r for _, r in after}):
        fire(after[0][0], "wrong_target_location",
             f"held the {truth.obj} but never went to {', '.join(sorted(set(where_lamp.values())))} "
             f"where the {truth.toggle} is")
    if truth.appliance and len(after) >= 2 and not transformed and \
            truth.appliance not in {entity_type(r) for _, r in after}:
        fire(after[0][0], "wrong_target_location",
             f"held the {truth.obj} but never went to the {truth.appliance} to make it {truth.transform}")

    # repetitive exploration
    if movement_steps and len(redundant) >= 3 and len(redundant) / movement_steps >= 0.4:
        fire(redundant[0], "repetitive_exploration",
             f"{len(redundant)} of {movement_steps} exploration steps revisited places already inspected "
             f"or repeated look/inventory")

    # premature give up
    n = len(steps)
    if not trajectory.crashed and n < max_steps:
        fire(n - 1, "premature_give_up", f"stopped after {n} of {max_steps} steps without finishing")
    else:
        tail = idle_or_failed[-max(3, n // 3):]
        if n >= 6 and all(tail):
            start = n - len(tail)
            fire(start, "premature_give_up", f"from step {start} only idle or failing commands")

    labels = [lab for lab in FAILURE_TAXONOMY if any(e.label == lab for e in events)]
    if format_errors and len(format_errors) / n >= 0.25:
        dominant = "action_format_error"
    else:
        dominant = next((lab for lab in PRIORITY if lab in labels), None)
    if dominant is None:
        if target_seen_step is None and not held_target:
            dominant = "wrong_target_location"
            detail = f"never found a {truth.obj}"
            critical = goto_seq[0][0] if goto_seq else 0
        elif not held_target:
            dominant = "exhaustive_exploration_failure"
            detail = f"saw a {truth.obj} at step {target_seen_step} but never took it"
            critical = target_seen_step or 0
        else:
            dominant = "repetitive_exploration"
            detail = "held the target but did not finish the task within the step budget"
            critical = next((t for t, s in enumerate(steps)
                             if (parse_command(s.action) or ("",))[0] == "take"), 0)
        labels = labels + [dominant]
        events.append(_Event(critical, dominant, detail))
    first = next(e for e in events if e.label == dominant)
    return {
        "dominant_type": dominant,
        "labels": labels,
        "detail": first.detail,
        "critical_step": int(first.step),
        "evidence": [{"step": e.step, "label": e.label, "detail": e.detail} for e in events[:20]],
    }


def game_truth(task_metadata: dict[str, Any], game_file: str | None) -> Truth:
    """Ground truth from the game file when it exists, else from the task metadata."""
    if game_file and os.path.isfile(game_file):
        try:
            return truth_from_game(game_file, task_metadata)
        except (OSError, ValueError, KeyError):
            pass
    return truth_from_metadata(task_metadata)
