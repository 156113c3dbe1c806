"""Agent-In-World analyst role: Figure-8 prompt and reflection parsing."""

from __future__ import annotations

import pytest

from roleagent.envs.alfworld.diagnosis import FAILURE_TAXONOMY
from roleagent.fields import ConfigError, from_dict
from roleagent.methods.role_agent.aiw.prompts import (
    ANALYSIS_ORDERS,
    analysis_messages,
    render_trajectory,
    task_instruction,
)
from roleagent.methods.role_agent.aiw.reflection import (
    fallback_reflection,
    map_to_taxonomy,
    parse_reflection,
    rule_reflection,
)
from roleagent.methods.role_agent.config import AIWConfig
from roleagent.types import Step, Task, Trajectory

ALFWORLD = FAILURE_TAXONOMY  # Role-Agent Table 6, ALFWorld


def step(obs: str, action: str, valid: bool = True) -> Step:
    return Step(
        observation=obs,
        state_key=obs,
        action_text=action,
        action=action if valid else None,
        valid=valid,
    )


def traj(
    n_steps: int = 3,
    instruction: str | None = "put a clean soapbar in toilet",
    obs_len: int = 20,
    action: str = "go to cabinet {i}",
) -> Trajectory:
    meta = {"instruction": instruction} if instruction else {}
    task = Task(id="alfworld/train/0001", env="alfworld", metadata=meta)
    steps = [step(f"obs{i} " + "x" * obs_len, action.format(i=i)) for i in range(1, n_steps + 1)]
    return Trajectory(task=task, steps=steps, final_observation="episode ended")


WELL_FORMED = """<reflection>
DOMINANT_TYPE: missing_precondition
DETAIL: The agent placed the soapbar without cleaning it.
CRITICAL_STEP: 3, navigated to the target with a dirty soapbar
CORE_LESSON: Verify object-state preconditions before the final placement.
RETRIEVAL_QUERY: clean object before placing it at the target
</reflection>"""


def test_prompt_has_figure8_structure_and_taxonomy():
    msgs = analysis_messages(traj(), ALFWORLD)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "diagnosing why AI agents fail" in msgs[0]["content"]
    user = msgs[1]["content"]
    for needle in (
        "## Task Context",
        "put a clean soapbar in toilet",
        "## Failed Trajectory",
        "<reflection>",
        "DOMINANT_TYPE:",
        "RETRIEVAL_QUERY:",
        "point of no return",
        "OBSERVATION (step 1)",
        'AGENT_ACTION (step 3) "go to cabinet 3"',
        "wrong_receptacle",
        "action_format_error",
    ):
        assert needle in user, needle


def test_evidence_first_asks_for_the_step_and_the_detail_before_the_type():
    paper, evidence, action = (analysis_messages(traj(), ALFWORLD, order=o)[1]["content"] for o in ANALYSIS_ORDERS)
    for order, prompt in (("evidence_first", evidence), ("action_first", action)):
        block = prompt.split("<reflection>\n")[1].split("\n</reflection>")[0].splitlines()
        assert [line.split(":")[0] for line in block] == list(ANALYSIS_ORDERS[order])
    # the same prompt apart from the output format's order (and, action first, the step's placeholder)
    assert sorted(paper.splitlines()) == sorted(evidence.splitlines()) and paper != evidence
    differ = [(a, b) for a, b in zip(evidence.splitlines(), action.splitlines(), strict=True) if a != b]
    assert differ == [
        (
            "CRITICAL_STEP: [step number and brief description of what went wrong]",
            "CRITICAL_STEP: [the action quoted from the trajectory, then its step number]",
        )
    ]
    with pytest.raises(ValueError, match="field order"):
        analysis_messages(traj(), ALFWORLD, order="type_last")
    with pytest.raises(ConfigError, match="aiw.analysis_order"):
        from_dict(AIWConfig, {"analysis_order": "type_last"}, "aiw").validate()


def test_instruction_falls_back_to_first_observation():
    t = traj(instruction=None)
    assert task_instruction(t).startswith("obs1")


def test_long_trajectory_is_bounded_keeping_first_and_last_steps():
    t = traj(n_steps=200, obs_len=300)
    text = render_trajectory(t, budget_chars=3000, obs_chars=200)
    assert len(text) <= 3000 + 200
    assert "OBSERVATION (step 1)" in text
    assert "OBSERVATION (step 200)" in text
    assert "steps omitted" in text
    assert "OBSERVATION (step 100)" not in text
    assert text.rstrip().endswith('FINAL_OBSERVATION "episode ended"')
    short = render_trajectory(traj(n_steps=3), budget_chars=3000)
    assert "omitted" not in short and "step 3" in short


def test_invalid_actions_are_marked():
    t = traj()
    t.steps[1] = step("obs", "blah blah", valid=False)
    assert "[invalid action]" in render_trajectory(t)


def test_parse_well_formed():
    r = parse_reflection(WELL_FORMED, ALFWORLD, source="policy")
    assert r is not None and r.parsed_ok and r.source == "policy"
    assert r.dominant_type == "missing_precondition" and r.type_status == "exact"
    assert r.critical_step == 3
    assert r.core_lesson.startswith("Verify object-state")
    assert r.retrieval_query == "clean object before placing it at the target"
    assert r.missing == ()


def test_parse_markdown_quotes_and_case():
    text = """Sure, here is the analysis.
**Dominant Type:** "MISSING_PRECONDITION"
- **detail**: "The agent picked up the soapbar and went to the target."
"CRITICAL_STEP": "Step 3, agent navigated to the target location",
"CORE_LESSON": "Check preconditions.",
### retrieval-query: `clean before place`
"""
    r = parse_reflection(text, ALFWORLD)
    assert r.dominant_type == "missing_precondition"
    assert r.detail == "The agent picked up the soapbar and went to the target."
    assert r.critical_step == 3
    assert r.core_lesson == "Check preconditions."
    assert r.retrieval_query == "clean before place"
    assert r.parsed_ok


def test_parse_missing_fields_and_unclosed_tag():
    r = parse_reflection(
        "<reflection>\nDOMINANT_TYPE: navigation_loop\nDETAIL: went back and forth\nCRITICAL_STEP: none", ALFWORLD
    )
    assert r.dominant_type == "navigation_loop"
    assert r.critical_step is None
    assert not r.parsed_ok
    assert set(r.missing) == {"CORE_LESSON", "RETRIEVAL_QUERY"}


@pytest.mark.parametrize(
    "value, step",
    [("Step 3, agent went to cabinet 1", 3), ('"take apple 1 from fridge 2", step 5', 5), ("at STEP #7", 7), ("4", 4)],
)
def test_the_critical_step_is_the_number_after_step_else_the_first(value, step):
    """An action quoted before its step (``aiw.analysis_order: action_first``) names its
    objects' numbers first: "step" decides, and a bare number still counts."""
    text = f"<reflection>\nDOMINANT_TYPE: navigation_loop\nCRITICAL_STEP: {value}\n</reflection>"
    assert parse_reflection(text, ALFWORLD).critical_step == step


def test_parse_skips_echoed_schema():
    text = (
        "<reflection>\nDOMINANT_TYPE: [category from Step 1]\nDETAIL: [1-2 sentences "
        "explaining why this root cause applies]\n</reflection>\n" + WELL_FORMED
    )
    r = parse_reflection(text, ALFWORLD)
    assert r.dominant_type == "missing_precondition" and r.parsed_ok


@pytest.mark.parametrize(
    "raw,expected,status",
    [
        ("Wrong location of target", "wrong_target_location", "mapped"),
        ("Repetitive Exploration", "repetitive_exploration", "exact"),
        ("wrong_receptacle because it used the fridge", "wrong_receptacle", "exact"),
        ("premature give-up", "premature_give_up", "exact"),
        ("looping navigation", "navigation_loop", "mapped"),
        ("hallucination", "other", "other"),
    ],
)
def test_off_taxonomy_labels_map_by_token_overlap(raw, expected, status):
    assert map_to_taxonomy(raw, ALFWORLD) == (expected, status)


def test_off_taxonomy_in_reflection():
    r = parse_reflection("DOMINANT_TYPE: hallucinated objects\nDETAIL: x", ALFWORLD)
    assert r.dominant_type == "other" and r.type_status == "other"
    assert r.raw_type == "hallucinated objects"


def test_label_only_in_free_text_and_garbage():
    r = parse_reflection("I think the agent is stuck in a navigation loop.", ALFWORLD)
    assert r is not None and r.dominant_type == "navigation_loop"
    assert r.type_status == "mapped" and not r.parsed_ok
    assert parse_reflection("I cannot help with that.", ALFWORLD) is None
    assert parse_reflection("", ALFWORLD) is None


def test_empty_taxonomy_keeps_normalised_label():
    r = parse_reflection("DOMINANT_TYPE: Tool Misuse\nDETAIL: d", ())
    assert r.dominant_type == "tool_misuse"


def test_rule_reflection():
    r = rule_reflection({"dominant_type": "Wrong Receptacle", "detail": "fridge", "critical_step": "step 4"}, ALFWORLD)
    assert r.source == "rule" and r.dominant_type == "wrong_receptacle"
    assert r.critical_step == 4 and r.retrieval_query
    assert rule_reflection(None, ALFWORLD) is None


def test_fallback_reflection_heuristics():
    t = traj(n_steps=5, action="go to cabinet 1")
    r = fallback_reflection(t, ALFWORLD)
    assert r.source == "fallback" and r.dominant_type == "repeated_failed_action"
    assert r.critical_step == 1
    bad = traj(n_steps=4)
    bad.steps = [step("o", "??", valid=False) for _ in range(4)]
    assert fallback_reflection(bad, ALFWORLD).dominant_type == "action_format_error"
    assert fallback_reflection(traj(n_steps=2), ALFWORLD).dominant_type == "other"
    assert fallback_reflection(t, ("wrong_answer",)).dominant_type == "other"
