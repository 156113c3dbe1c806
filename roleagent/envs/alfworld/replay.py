"""Replay of an ALFWorld trajectory for the failure diagnosis (``diagnosis.py``): what the
agent knows and did after every command, and the per-command rules that fire labels."""

from __future__ import annotations

from dataclasses import dataclass, field

from roleagent.envs.alfworld.commands import (
    NOTHING,
    entity_type,
    parse_command,
    room_receptacles,
    visible_contents,
)
from roleagent.envs.alfworld.groundtruth import APPLIANCE, Truth
from roleagent.types import Step, Trajectory

VERB_TRANSFORM = {"clean": "clean", "heat": "hot", "cool": "cool"}
IDLE_VERBS = {"look", "inventory", "examine"}
#: A wrongly taken object counts once the agent goes on with it for this many commands.
WRONG_CARRY_STEPS = 4
_CLOSABLE = ("cabinet", "drawer", "fridge", "microwave", "safe")


@dataclass
class Event:
    step: int
    label: str
    detail: str


@dataclass
class Replay:
    """What the agent knows and did, command by command; rules fire into ``events``."""

    truth: Truth
    receptacles: list[str]
    closed: set[str]
    where_target: dict[str, str]
    where_lamp: dict[str, str]
    events: list[Event] = field(default_factory=list)
    contents: dict[str, list[str]] = field(default_factory=dict)  # what the agent has seen where
    location: str | None = None
    holding: str | None = None
    transformed: set[str] = field(default_factory=set)
    placed_goal: set[str] = field(default_factory=set)
    visited: list[str] = field(default_factory=list)
    inspected_at: dict[str, int] = field(default_factory=dict)  # receptacle -> step of last inspection
    changed_since: dict[str, bool] = field(default_factory=dict)
    redundant: list[int] = field(default_factory=list)
    movement_steps: int = 0
    failed_counts: dict[str, int] = field(default_factory=dict)
    prev_failed: str | None = None
    format_errors: list[int] = field(default_factory=list)
    coverage_step: int | None = None
    target_seen_step: int | None = None
    held_target: bool = False
    held_step: int | None = None
    wrong_take: tuple[int, str, int] | None = None
    goto_seq: list[tuple[int, str]] = field(default_factory=list)
    idle_or_failed: list[bool] = field(default_factory=list)
    actions: list[str | None] = field(default_factory=list)

    @classmethod
    def start(cls, trajectory: Trajectory, truth: Truth) -> Replay:
        receptacles = truth.receptacles or room_receptacles(trajectory.steps[0].observation or "")
        closed = set(truth.closed) or {r for r in receptacles if entity_type(r) in _CLOSABLE}
        return cls(
            truth=truth,
            receptacles=receptacles,
            closed=closed,
            where_target=dict(truth.object_locations),
            where_lamp=dict(truth.lamp_locations),
            actions=[s.action for s in trajectory.steps],
        )

    def fire(self, step: int, label: str, detail: str) -> None:
        self.events.append(Event(step, label, detail))

    # ------------------------------------------------------------ one command ------

    def step(self, t: int, step: Step, fb: str) -> None:
        parsed = parse_command(step.action) if step.action is not None else None
        if not step.valid or step.action is None or parsed is None:
            self.format_errors.append(t)
            self.fire(
                t,
                "action_format_error",
                f"step {t}: output {str(step.action_text or step.action)[:60]!r} is not an ALFWorld command",
            )
            self.idle_or_failed.append(True)
            self.prev_failed = None
            return
        verb, o, r = parsed
        info = step.info or {}
        ok = bool(info["action_valid"]) if "action_valid" in info else fb != NOTHING
        if fb == NOTHING:
            ok = False
        if not ok:
            self.failed(t, verb, o, r, " ".join((step.action or "").lower().split()))
            return
        self.prev_failed = None
        self.idle_or_failed.append(verb in IDLE_VERBS)
        self.carry_check()
        self.explore(t, verb, o, r)
        if verb == "take":
            self.take(t, o, r)
        elif verb in ("heat", "cool", "clean"):
            self.transform(t, verb, o)
        elif verb == "put":
            self.put(t, o, r)
        elif verb == "use":
            self.use(t, o)
        self.observe(t, fb)

    def failed(self, t: int, verb: str, o: str | None, r: str | None, command: str) -> None:
        """A failed command: classify the precondition that did not hold."""
        self.idle_or_failed.append(True)
        self.failed_counts[command] = self.failed_counts.get(command, 0) + 1
        if self.prev_failed == command or self.failed_counts[command] >= 3:
            self.fire(t, "repeated_failed_action", f"step {t}: {command!r} failed again")
        self.prev_failed = command
        known = set(self.receptacles)
        contents, holding, location, closed = self.contents, self.holding, self.location, self.closed
        o_type, r_type = entity_type(o), entity_type(r)
        if r and known and r not in known and entity_type(r) in {entity_type(k) for k in known}:
            self.fire(t, "entity_confusion", f"step {t}: {r!r} does not exist in this room")
        elif verb == "take" and r in closed and r not in contents:
            self.fire(t, "missing_precondition", f"step {t}: took from {r} without opening it")
        elif verb == "take" and holding is not None:
            self.fire(t, "missing_precondition", f"step {t}: tried to take {o} while holding {holding}")
        elif verb == "take" and location != r:
            self.fire(t, "missing_precondition", f"step {t}: tried to take from {r} without going there")
        elif (
            verb == "take"
            and r in contents
            and o not in contents[r]
            and any(entity_type(x) == o_type for x in contents[r])
        ):
            self.fire(t, "entity_confusion", f"step {t}: {o} is not in {r}; it shows {', '.join(contents[r])}")
        elif verb in ("put", "heat", "cool", "clean") and holding != o:
            if holding is not None and entity_type(holding) == o_type:
                self.fire(t, "entity_confusion", f"step {t}: named {o} but holds {holding}")
            else:
                self.fire(t, "missing_precondition", f"step {t}: {verb} {o} without holding it")
        elif verb == "put" and r in closed and location == r:
            self.fire(t, "missing_precondition", f"step {t}: put into {r} without opening it")
        elif verb in ("put", "heat", "cool", "clean", "open", "close", "use") and r and location != r:
            self.fire(t, "missing_precondition", f"step {t}: {verb} at {r} without going there")
        elif verb in ("heat", "cool", "clean") and r_type and r_type != APPLIANCE.get(VERB_TRANSFORM[verb]):
            self.fire(t, "wrong_receptacle", f"step {t}: tried to {verb} with a {r_type}")

    def carry_check(self) -> None:
        """A stray pick-up counts once the agent carries it on for WRONG_CARRY_STEPS commands."""
        if self.wrong_take is None:
            return
        w_step, w_obj, w_count = self.wrong_take
        if self.holding != w_obj:
            self.wrong_take = None
        elif w_count + 1 >= WRONG_CARRY_STEPS:
            self.fire(
                w_step,
                "wrong_object_interaction",
                f"step {w_step}: took {w_obj} and carried it on, but the task needs a {self.truth.obj}",
            )
            self.wrong_take = None
        else:
            self.wrong_take = (w_step, w_obj, w_count + 1)

    def explore(self, t: int, verb: str, o: str | None, r: str | None) -> None:
        """Movement and inspection bookkeeping: visits, coverage, redundant revisits."""
        if verb == "goto":
            self.movement_steps += 1
            self.goto_seq.append((t, r))
            if r in self.inspected_at and not self.changed_since.get(r, True):
                self.redundant.append(t)
            self.location = r
            if r not in self.visited:
                self.visited.append(r)
            if (
                self.receptacles
                and self.coverage_step is None
                and len(set(self.visited)) >= 0.75 * len(self.receptacles)
            ):
                self.coverage_step = t
        elif verb in ("open", "examine", "look"):
            self.movement_steps += 1
            target = r or o or self.location
            if verb == "look" or (target in self.inspected_at and not self.changed_since.get(target, True)):
                self.redundant.append(t)
        elif verb == "inventory":
            self.movement_steps += 1
            self.redundant.append(t)
        if verb == "open" and r:
            self.closed.discard(r)

    def take(self, t: int, o: str, r: str) -> None:
        truth, o_type = self.truth, entity_type(o)
        self.holding = o
        seen_before_take = list(self.contents.get(r, []))
        if r in self.contents and o in self.contents[r]:
            self.contents[r].remove(o)
        self.changed_since[r] = True
        if o_type == truth.obj:
            self.held_target = True
            self.held_step = t if self.held_step is None else self.held_step
            if o in self.placed_goal and truth.task_type == "pick_two_obj_and_place":
                self.fire(t, "entity_confusion", f"step {t}: took {o} back out of the goal receptacle")
                self.placed_goal.discard(o)
        elif truth.obj and not (truth.toggle and o_type == truth.toggle):
            beside = [x for x in seen_before_take if entity_type(x) == truth.obj]
            if beside:
                self.fire(t, "wrong_object_interaction", f"step {t}: took {o} although {beside[0]} was right there")
            else:
                self.wrong_take = (t, o, 0)  # confirmed if carried on or used (carry_check)

    def transform(self, t: int, verb: str, o: str) -> None:
        truth, o_type = self.truth, entity_type(o)
        if o_type == truth.obj:
            self.transformed.add(o)
        else:
            self.fire(t, "wrong_object_interaction", f"step {t}: {verb}ed {o}, not a {truth.obj}")
        if truth.transform and VERB_TRANSFORM[verb] != truth.transform and o_type == truth.obj:
            self.fire(
                t,
                "wrong_object_interaction",
                f"step {t}: made {o} {VERB_TRANSFORM[verb]}, the task wants it {truth.transform}",
            )

    def put(self, t: int, o: str, r: str) -> None:
        truth, o_type, r_type = self.truth, entity_type(o), entity_type(r)
        self.holding = None
        self.contents.setdefault(r, []).append(o)
        self.changed_since[r] = True
        if o_type == truth.obj and truth.recep:
            if r_type != truth.recep:
                self.fire(t, "wrong_receptacle", f"step {t}: put {o} in {r}, the goal receptacle is a {truth.recep}")
            elif truth.transform and o not in self.transformed:
                self.fire(
                    t, "missing_precondition", f"step {t}: put {o} in {r} without making it {truth.transform} first"
                )
            else:
                self.placed_goal.add(o)
        elif o_type != truth.obj and r_type == truth.recep:
            self.fire(t, "wrong_object_interaction", f"step {t}: put {o} in the goal {r}")

    def use(self, t: int, o: str) -> None:
        truth, lamp_type = self.truth, entity_type(o)
        if truth.toggle and lamp_type in ("desklamp", "floorlamp") and lamp_type != truth.toggle:
            self.fire(t, "wrong_receptacle", f"step {t}: used a {lamp_type}, the task asks for the {truth.toggle}")
        elif truth.toggle and self.holding is None:
            self.fire(t, "missing_precondition", f"step {t}: turned on {o} without holding a {truth.obj}")
        elif truth.toggle and entity_type(self.holding) != truth.obj:
            self.fire(
                t,
                "wrong_object_interaction",
                f"step {t}: looked at {self.holding} under the lamp; the task needs a {truth.obj}",
            )

    def observe(self, t: int, fb: str) -> None:
        """What the feedback revealed: contents of receptacles, target and lamp sightings."""
        for rec, items in visible_contents(fb).items():
            self.inspected_at[rec] = t
            self.changed_since[rec] = False
            self.contents[rec] = list(items)
            for item in items:
                if entity_type(item) == self.truth.obj:
                    self.where_target.setdefault(item, rec)
                    if self.target_seen_step is None:
                        self.target_seen_step = t
                if self.truth.toggle and entity_type(item) == self.truth.toggle:
                    self.where_lamp.setdefault(item, rec)
