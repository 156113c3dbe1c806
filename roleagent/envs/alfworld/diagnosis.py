"""Rule-based failure diagnosis for ALFWorld with the Role-Agent taxonomy (Wang et al., 2026, arXiv 2606.10917,
Table 6).

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

from typing import Any

from roleagent.envs.alfworld.commands import (  # noqa: F401  (re-exported)
    NOTHING,
    entity_type,
    parse_command,
    room_receptacles,
    visible_contents,
)
from roleagent.envs.alfworld.groundtruth import (  # noqa: F401  (re-exported)
    APPLIANCE,
    Truth,
    demangled_names,
    game_truth,
    truth_from_game,
    truth_from_metadata,
)
from roleagent.envs.alfworld.replay import (  # noqa: F401  (re-exported)
    IDLE_VERBS,
    VERB_TRANSFORM,
    WRONG_CARRY_STEPS,
    Event,
    Replay,
)
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


def diagnose_trajectory(
    trajectory: Trajectory, truth: Truth | None = None, max_steps: int = 50
) -> dict[str, Any] | None:
    """Failure labels of a failed trajectory (None for a success); see the module doc."""
    if trajectory.success:
        return None
    truth = truth or truth_from_metadata(trajectory.task.metadata)
    if not trajectory.steps:
        return {
            "dominant_type": "premature_give_up",
            "labels": ["premature_give_up"],
            "detail": "The agent took no action.",
            "critical_step": 0,
            "evidence": [],
        }
    replay = Replay.start(trajectory, truth)
    for t, (step, feedback) in enumerate(zip(trajectory.steps, _feedbacks(trajectory))):
        replay.step(t, step, (feedback or "").strip())
    _navigation_loop(replay)
    _search_rules(replay)
    _repetition_rule(replay)
    _give_up_rule(replay, trajectory, max_steps)
    return _verdict(replay)


def _feedbacks(trajectory: Trajectory) -> list[str]:
    """The feedback to step t: the next step's observation, ``final_observation`` after the last."""
    steps = trajectory.steps
    return [
        steps[t + 1].observation if t + 1 < len(steps) else (trajectory.final_observation or "")
        for t in range(len(steps))
    ]


def _navigation_loop(rp: Replay) -> None:
    """>= 6 consecutive go-to among <= 2 receptacles, or ABAB with nothing between."""
    run: list[tuple[int, str]] = []
    last_t = -2
    loop_step = None
    for t, r in rp.goto_seq:
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
        rp.fire(
            loop_step, "navigation_loop", f"from step {loop_step}: went back and forth between the same receptacles"
        )


def _search_rules(rp: Replay) -> None:
    """Exploration coverage, and searching elsewhere while holding the target."""
    truth, visited, n_receps = rp.truth, rp.visited, len(rp.receptacles)
    coverage = len(set(visited)) / n_receps if n_receps else 0.0
    if not rp.held_target and truth.obj:
        target_places = set(rp.where_target.values())
        if coverage >= 0.75 and n_receps:
            seen = rp.target_seen_step
            step = seen if seen is not None else (rp.coverage_step or 0)
            rp.fire(
                step,
                "exhaustive_exploration_failure",
                f"visited {len(set(visited))}/{n_receps} receptacles and never took a {truth.obj}"
                + (f" (one was visible at step {seen})" if seen is not None else ""),
            )
        elif rp.movement_steps and target_places and not (target_places & set(visited)):
            first_goto = rp.goto_seq[0][0] if rp.goto_seq else 0
            rp.fire(
                first_goto,
                "wrong_target_location",
                f"never went to {', '.join(sorted(target_places))} where the {truth.obj} is; "
                f"searched {', '.join(visited[:6]) or 'nothing'}",
            )
    # Holding the target, the agent then searched elsewhere for the lamp / appliance.
    held = rp.held_step
    after = [(t, r) for t, r in rp.goto_seq if held is not None and t > held]
    if (
        truth.task_type == "look_at_obj_in_light"
        and len(after) >= 2
        and rp.where_lamp
        and not (set(rp.where_lamp.values()) & {r for _, r in after})
    ):
        rp.fire(
            after[0][0],
            "wrong_target_location",
            f"held the {truth.obj} but never went to {', '.join(sorted(set(rp.where_lamp.values())))} "
            f"where the {truth.toggle} is",
        )
    if (
        truth.appliance
        and len(after) >= 2
        and not rp.transformed
        and truth.appliance not in {entity_type(r) for _, r in after}
    ):
        rp.fire(
            after[0][0],
            "wrong_target_location",
            f"held the {truth.obj} but never went to the {truth.appliance} to make it {truth.transform}",
        )


def _repetition_rule(rp: Replay) -> None:
    redundant, moves = rp.redundant, rp.movement_steps
    if moves and len(redundant) >= 3 and len(redundant) / moves >= 0.4:
        rp.fire(
            redundant[0],
            "repetitive_exploration",
            f"{len(redundant)} of {moves} exploration steps revisited places already inspected "
            f"or repeated look/inventory",
        )


def _give_up_rule(rp: Replay, trajectory: Trajectory, max_steps: int) -> None:
    n = len(trajectory.steps)
    if not trajectory.crashed and n < max_steps:
        rp.fire(n - 1, "premature_give_up", f"stopped after {n} of {max_steps} steps without finishing")
        return
    tail = rp.idle_or_failed[-max(3, n // 3) :]
    if n >= 6 and all(tail):
        start = n - len(tail)
        rp.fire(start, "premature_give_up", f"from step {start} only idle or failing commands")


def _verdict(rp: Replay) -> dict[str, Any]:
    """Dominant label (``PRIORITY``; format errors win at >= 25%), else a progress fallback."""
    events, n = rp.events, len(rp.idle_or_failed)
    labels = [lab for lab in FAILURE_TAXONOMY if any(e.label == lab for e in events)]
    if rp.format_errors and len(rp.format_errors) / n >= 0.25:
        dominant = "action_format_error"
    else:
        dominant = next((lab for lab in PRIORITY if lab in labels), None)
    if dominant is None:
        dominant, detail, critical = _fallback(rp)
        labels = labels + [dominant]
        events.append(Event(critical, dominant, detail))
    first = next(e for e in events if e.label == dominant)
    return {
        "dominant_type": dominant,
        "labels": labels,
        "detail": first.detail,
        "critical_step": int(first.step),
        "evidence": [{"step": e.step, "label": e.label, "detail": e.detail} for e in events[:20]],
    }


def _fallback(rp: Replay) -> tuple[str, str, int]:
    """No rule fired: the progress made decides (never seen / seen / held the target)."""
    if rp.target_seen_step is None and not rp.held_target:
        return ("wrong_target_location", f"never found a {rp.truth.obj}", rp.goto_seq[0][0] if rp.goto_seq else 0)
    if not rp.held_target:
        return (
            "exhaustive_exploration_failure",
            f"saw a {rp.truth.obj} at step {rp.target_seen_step} but never took it",
            rp.target_seen_step or 0,
        )
    critical = next((t for t, a in enumerate(rp.actions) if (parse_command(a) or ("",))[0] == "take"), 0)
    return "repetitive_exploration", "held the target but did not finish the task within the step budget", critical
