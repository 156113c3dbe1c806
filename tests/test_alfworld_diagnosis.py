"""ALFWorld failure diagnosis (Role-Agent Table 6) and the Table 1 report: no engine needed."""

from __future__ import annotations

from roleagent.envs.alfworld.diagnosis import (
    FAILURE_TAXONOMY,
    demangled_names,
    diagnose_trajectory,
    parse_command,
    truth_from_metadata,
)
from roleagent.envs.alfworld.report import alfworld_table, success_rates
from roleagent.types import Step, Task, Trajectory


def test_taxonomy_is_the_papers_table6():
    assert FAILURE_TAXONOMY == (
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


def test_parse_command_forms():
    assert parse_command("go to countertop 1") == ("goto", None, "countertop 1")
    assert parse_command("take apple 1 from fridge 1") == ("take", "apple 1", "fridge 1")
    assert parse_command("move apple 1 to countertop 2") == ("put", "apple 1", "countertop 2")
    assert parse_command("put apple 1 in/on countertop 2") == ("put", "apple 1", "countertop 2")
    assert parse_command("heat apple 1 with microwave 1") == ("heat", "apple 1", "microwave 1")
    assert parse_command("use desklamp 1") == ("use", "desklamp 1", None)
    assert parse_command("I think I should go") is None


def test_demangler_replica_numbers_like_alfworld():
    ids = [
        "Apple_bar__plus_00_dot_10_bar__plus_00_dot_90_bar__minus_01_dot_00",
        "Apple_bar__minus_00_dot_10_bar__plus_00_dot_90_bar__minus_01_dot_00",
        "Sink_bar__minus_01_dot_90_bar__plus_00_dot_97_bar__minus_01_dot_50_bar_SinkBasin",
    ]
    names = demangled_names(ids)
    assert sorted(names.values()) == ["apple 1", "apple 2", "sinkbasin 1"]


ROOM = (
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, "
    "a countertop 1, a countertop 2, a drawer 1, a fridge 1, a microwave 1, and a sinkbasin 1."
)
HEAT_META = {
    "task_type": "pick_heat_then_place",
    "object_target": "Apple",
    "parent_target": "CounterTop",
    "toggle_target": None,
    "transform": "hot",
}


def _trajectory(metadata, pairs, success=False, first=ROOM + "\n\nYour task is to: put a hot apple in countertop."):
    """pairs: (action or None, feedback). Observation of step t = feedback of step t-1."""
    task = Task(id="alfworld/test/0", env="alfworld", metadata=metadata)
    steps, obs = [], first
    for action, feedback in pairs:
        steps.append(
            Step(
                observation=obs,
                state_key=obs,
                action_text=action or "???",
                action=action,
                valid=action is not None,
                info={},
            )
        )
        obs = feedback
    return Trajectory(task=task, steps=steps, success=success, final_observation=obs)


def _diagnose(metadata, pairs, **kw):
    traj = _trajectory(metadata, pairs)
    return diagnose_trajectory(traj, truth_from_metadata(metadata), max_steps=kw.get("max_steps", len(pairs)))


ARRIVE_CT1 = "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a tomato 1."
TAKE = "You pick up the apple 1 from the countertop 1."


def test_success_has_no_diagnosis():
    traj = _trajectory(HEAT_META, [("go to countertop 1", ARRIVE_CT1)], success=True)
    assert diagnose_trajectory(traj) is None


def test_missing_precondition_place_without_heating():
    d = _diagnose(
        HEAT_META,
        [
            ("go to countertop 1", ARRIVE_CT1),
            ("take apple 1 from countertop 1", TAKE),
            ("go to countertop 2", "You arrive at countertop 2. On the countertop 2, you see nothing."),
            ("move apple 1 to countertop 2", "You move the apple 1 to the countertop 2."),
        ],
    )
    assert d["dominant_type"] == "missing_precondition" and d["critical_step"] == 3
    assert set(d) >= {"dominant_type", "labels", "detail", "critical_step"}
    assert all(label in FAILURE_TAXONOMY for label in d["labels"])


def test_wrong_receptacle():
    d = _diagnose(
        HEAT_META,
        [
            ("go to countertop 1", ARRIVE_CT1),
            ("take apple 1 from countertop 1", TAKE),
            ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed."),
            ("heat apple 1 with microwave 1", "You heat the apple 1 using the microwave 1."),
            ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
            ("open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you see nothing."),
            ("move apple 1 to cabinet 1", "You move the apple 1 to the cabinet 1."),
        ],
    )
    assert d["dominant_type"] == "wrong_receptacle" and d["critical_step"] == 6


def test_navigation_loop():
    pairs = []
    for _ in range(3):
        pairs.append(("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."))
        pairs.append(("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."))
    d = _diagnose(HEAT_META, pairs)
    assert d["dominant_type"] == "navigation_loop" and d["critical_step"] == 0


def test_repeated_failed_action():
    pairs = [("go to countertop 1", ARRIVE_CT1)] + [("go to bathtubbasin 1", "Nothing happens.")] * 3
    d = _diagnose(HEAT_META, pairs)
    assert d["dominant_type"] == "repeated_failed_action" and d["critical_step"] == 2


def test_action_format_error():
    pairs = [(None, "Nothing happens."), (None, "Nothing happens."), ("go to countertop 1", ARRIVE_CT1)]
    d = _diagnose(HEAT_META, pairs)
    assert d["dominant_type"] == "action_format_error" and d["critical_step"] == 0


def test_entity_confusion_wrong_instance():
    d = _diagnose(
        HEAT_META,
        [
            ("go to countertop 1", ARRIVE_CT1),
            ("take apple 2 from countertop 1", "Nothing happens."),
            ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ],
    )
    assert d["dominant_type"] == "entity_confusion" and d["critical_step"] == 1


def test_wrong_object_interaction():
    d = _diagnose(
        HEAT_META,
        [
            ("go to countertop 1", ARRIVE_CT1),
            ("take tomato 1 from countertop 1", "You pick up the tomato 1 from the countertop 1."),
            ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed."),
        ],
    )
    assert d["dominant_type"] == "wrong_object_interaction" and d["critical_step"] == 1


def test_premature_give_up():
    traj = _trajectory(HEAT_META, [("go to countertop 1", ARRIVE_CT1), ("take apple 1 from countertop 1", TAKE)])
    d = diagnose_trajectory(traj, max_steps=50)
    assert d["dominant_type"] == "premature_give_up" and d["critical_step"] == 1


def test_exhaustive_exploration_failure():
    pairs = [
        ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
        ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a tomato 1."),
        ("go to countertop 2", "You arrive at countertop 2. On the countertop 2, you see a apple 1."),
        ("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."),
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed."),
        ("go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."),
    ]
    d = _diagnose(HEAT_META, pairs)
    assert d["dominant_type"] == "exhaustive_exploration_failure" and d["critical_step"] == 2


def test_wrong_target_location_with_game_truth():
    from roleagent.envs.alfworld.diagnosis import Truth

    truth = Truth(
        task_type="pick_heat_then_place",
        obj="apple",
        recep="countertop",
        toggle=None,
        transform="hot",
        object_locations={"apple 1": "countertop 2"},
        receptacles=["cabinet 1", "countertop 1", "countertop 2", "drawer 1", "fridge 1", "microwave 1", "sinkbasin 1"],
    )
    traj = _trajectory(
        HEAT_META,
        [
            ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
            ("open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you see nothing."),
            ("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."),
            ("open drawer 1", "You open the drawer 1. The drawer 1 is open. In it, you see nothing."),
            ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
            ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1."),
        ],
    )
    d = diagnose_trajectory(traj, truth, max_steps=6)
    assert d["dominant_type"] == "wrong_target_location" and d["critical_step"] == 0


def test_repetitive_exploration():
    d = _diagnose(
        HEAT_META,
        [
            ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
            ("look", "You are facing the cabinet 1. Next to it, you see nothing."),
            ("inventory", "You are not carrying anything."),
            ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a tomato 1."),
            ("examine countertop 1", "On the countertop 1, you see a tomato 1."),
            ("look", "You are facing the countertop 1. Next to it, you see nothing."),
            ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ],
    )
    assert d["dominant_type"] == "repetitive_exploration" and d["critical_step"] == 1


def test_report_table_format():
    records = {
        "valid_seen": [
            {"task_type": "pick_and_place", "success": True},
            {"task_type": "pick_and_place", "success": False},
            {"task_type": "pick_two_obj_and_place", "success": True},
        ],
        "valid_unseen": [("look_at_obj_in_light", True)],
    }
    table = alfworld_table(records)
    lines = table.splitlines()
    assert lines[0].split() == ["panel", "Pick", "Look", "Clean", "Heat", "Cool", "Pick2", "All"]
    assert lines[1].split() == ["valid_seen", "50.0", "-", "-", "-", "-", "100.0", "66.7"]
    assert success_rates(records["valid_unseen"])["Look"] == (100.0, 1)
