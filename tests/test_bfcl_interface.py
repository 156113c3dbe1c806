"""SEAL interface evolution: schema cues, recovery hints, guideline selection, activation by
failure type, the observation note, train-only."""

from __future__ import annotations

import json

import pytest

from roleagent.envs.bfcl.interface import GUIDELINES, FailureProfile, parse_enum, recovery_hint, schema_cues


def test_parse_enum_both_bfcl_spellings():
    assert parse_enum('Mode. [Enum]: ["lines", "words", "characters"]') == ["lines", "words", "characters"]
    assert parse_enum("Base currency. [Enum]: USD, RMB, EUR") == ["USD", "RMB", "EUR"]
    assert parse_enum("no enum here") is None


def test_schema_cues_mark_required_and_enum_without_touching_the_original():
    doc = {
        "name": "wc",
        "description": "count",
        "parameters": {
            "type": "dict",
            "properties": {
                "file_name": {"type": "string", "description": "The file."},
                "mode": {"type": "string", "description": 'Mode. [Enum]: ["lines", "words"]', "default": "lines"},
            },
            "required": ["file_name"],
        },
    }
    cued = schema_cues(doc)
    props = cued["parameters"]["properties"]
    assert props["file_name"]["description"].startswith("[required]")
    assert props["mode"]["description"].startswith("[optional]")
    assert props["mode"]["enum"] == ["lines", "words"]
    assert doc["parameters"]["properties"]["file_name"]["description"] == "The file."


def test_failure_profile_selection_rules_and_state():
    p = FailureProfile(window=100)
    # 100 trajectories: argument_mismatch in 30 (reward 0), state_mismatch in 12 (reward 0.5),
    # recovery_failure in 7 (too few), missing_tool_call in 9 with reward_mean 0.7 (too good),
    # response_mismatch in 9 (prevalence 0.09 < 0.10)
    for i in range(100):
        labels = []
        if i < 30:
            labels.append("argument_mismatch")
        if 30 <= i < 42:
            labels.append("state_mismatch")
        if 42 <= i < 49:
            labels.append("recovery_failure")
        if 49 <= i < 58:
            labels.append("missing_tool_call")
        if 58 <= i < 67:
            labels.append("response_mismatch")
        reward = 0.0 if i < 30 else (0.5 if i < 42 else (1.0 if 49 <= i < 56 else 0.0))
        p.update(labels or ["pass"], reward)
    s = p.stats()
    assert s["argument_mismatch"] == {"count": 30, "prevalence": 0.30, "reward_mean": 0.0}
    assert s["missing_tool_call"]["reward_mean"] == pytest.approx(7 / 9)
    assert p.select_guidelines() == ["argument_mismatch", "state_mismatch"]
    assert p.select_guidelines(max_guidelines=1) == ["argument_mismatch"]
    q = FailureProfile()
    q.load_state_dict(json.loads(json.dumps(p.state_dict())))
    assert q.stats() == s and q.select_guidelines() == p.select_guidelines()
    # at most three, ranked by prevalence * (1 - reward_mean)
    r = FailureProfile(window=50)
    for tag, n in (
        ("invalid_tool_call", 10),
        ("argument_mismatch", 12),
        ("state_mismatch", 9),
        ("recovery_failure", 11),
    ):
        for _ in range(n):
            r.update([tag], 0.0)
    assert r.select_guidelines() == ["argument_mismatch", "recovery_failure", "invalid_tool_call"]
    # window slides
    for _ in range(50):
        r.update(["pass"], 1.0)
    assert r.select_guidelines() == [] and len(r) == 50


pytest.importorskip("bfcl_eval")

from roleagent.envs.bfcl import data  # noqa: E402
from roleagent.envs.bfcl.env import BFCLEnv  # noqa: E402
from roleagent.envs.bfcl.executor import CallRecord  # noqa: E402


def _qwen(name, arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_recovery_hints_by_error_class():
    schema = {"parameters": {"properties": {"folder": {"type": "string"}}, "required": ["folder"]}}
    rec = CallRecord("cd", {}, "rejected", "", "missing", "missing_argument")
    assert "folder" in recovery_hint(rec, schema)
    rec = CallRecord("cd", {"folder": "x"}, "tool_error", "", "cd: x: No such file or directory", "tool_error")
    assert "does not exist" in recovery_hint(rec, schema)
    rec = CallRecord("zz", {}, "rejected", "", "no tool", "unavailable_tool")
    assert "not available" in recovery_hint(rec, schema)


def test_evolved_interface_is_train_only():
    env = BFCLEnv(interface="evolved", activation="static")  # every cue on: what is train-only
    train = next(t for t in env.tasks("train") if t.metadata["category"] == "base")
    evl = next(t for t in env.tasks("eval") if t.metadata["category"] == "base")
    for _ in range(10):
        env.update_profile({"priority_labels": ["argument_mismatch"]}, 0.0)
    obs, info = env.reset(train, seed=0)
    assert info["interface"] == "evolved" and "[required]" in info["instruction"]
    assert info["guidelines"] == [GUIDELINES["argument_mismatch"]]
    assert "# Guidelines" in info["instruction"]
    r = env.step(_qwen("cd", {"folder": "no_such_folder_xyz"}))
    assert "\nHint: " in r.observation
    obs, info = env.reset(evl, seed=0)
    assert info["interface"] == "plain" and "[required]" not in info["instruction"]
    assert "# Guidelines" not in info["instruction"] and info["guidelines"] == []
    r = env.step(_qwen("cd", {"folder": "no_such_folder_xyz"}))
    assert "Hint:" not in r.observation
    plain = BFCLEnv(interface="plain")
    _, pinfo = plain.reset(evl, seed=0)
    assert pinfo["instruction"] == info["instruction"]
    _, tinfo = plain.reset(train, seed=0)
    assert "[required]" not in tinfo["instruction"]
    # the profile is part of the env state
    state = env.state_dict()
    fresh = BFCLEnv(interface="evolved", activation="static")
    fresh.load_state_dict(json.loads(json.dumps(state)))
    assert fresh.reset(train, seed=0)[1]["guidelines"] == info_guidelines(env, train)


def info_guidelines(env, task):
    return env.reset(task, seed=0)[1]["guidelines"]


def test_evolved_interface_never_depends_on_the_answer():
    """Same tools, different tasks (different ground truth): identical evolved instruction,
    and the evolved text adds no ground-truth argument value absent from the plain text."""
    env = BFCLEnv(interface="evolved", activation="static")  # every cue shown
    plain = BFCLEnv()
    by_classes: dict[tuple, list[str]] = {}
    tasks = [t for t in env.tasks("train") if t.metadata["category"] == "base"]
    for task in tasks:
        _, info = env.reset(task, seed=0)
        by_classes.setdefault(tuple(sorted(task.metadata["involved_classes"])), []).append(info["instruction"])
        _, pinfo = plain.reset(task, seed=0)
        for turn in data.entry(task.payload["entry_id"])["ground_truth"]:
            for call in turn:
                for value in call.split("=")[1:]:
                    v = value.split(",")[0].strip("')\" ")
                    if len(v) > 6 and v not in pinfo["instruction"]:
                        assert v not in info["instruction"], (task.id, v)
    assert any(len(v) > 1 for v in by_classes.values())
    for instructions in by_classes.values():
        assert len(set(instructions)) == 1


def test_switches_for_ablations():
    env = BFCLEnv(interface="evolved", schema_cues=False, recovery_hints=False, guidelines=False)
    train = env.tasks("train")[0]
    for _ in range(10):
        env.update_profile({"priority_labels": ["argument_mismatch"]}, 0.0)
    _, info = env.reset(train, seed=0)
    assert info["interface"] == "evolved"
    assert "[required]" not in info["instruction"] and info["guidelines"] == []


# ------------------------------------------------ activation by failure type (§3.3) ------

SMALL = {"tool_format": "compact", "classes": ["GorillaFileSystem"], "categories": ["base"], "train_per_category": 1}
NOTE = (
    "Observation note: parameters marked [required] must be provided exactly when calling a "
    "tool; do not invent tools outside the current schema."
)
MARKER = '"[required] '  # a schema cue in a rendered description (guidelines say "[required]" too)


def _profiled(labels_counts, **kwargs):
    env = BFCLEnv(interface="evolved", **{**SMALL, **kwargs})
    for label, n in labels_counts.items():
        for _ in range(n):
            env.update_profile({"priority_labels": [label]}, 0.0)
    task = env.tasks("train")[0]
    _, info = env.reset(task, seed=0)
    failed = env.step(_qwen("cd", {"folder": "no_such_folder_xyz"})).observation
    return info, failed


def test_empty_profile_trains_on_the_plain_interface():
    """Iteration 0 (nothing diagnosed yet): no failure type is selected, no cue is active."""
    info, failed = _profiled({})
    plain_env = BFCLEnv(**SMALL)
    _, plain = plain_env.reset(plain_env.tasks("train")[0], seed=0)
    assert info["instruction"] == plain["instruction"] and "Hint:" not in failed
    assert info["interface"] == "evolved" and info["cues"] == []


@pytest.mark.parametrize(
    "label,cues",
    [
        ("argument_mismatch", ["schema_cues"]),  # paper: schema and constraint cues
        ("missing_tool_call", ["affordance_cues"]),  # paper: tool-affordance cues
        ("recovery_failure", ["recovery_hints"]),  # paper: structured error feedback
        ("invalid_tool_call", ["recovery_hints", "schema_cues"]),  # paper silent: ours
        ("state_mismatch", []),  # guideline only
    ],
)
def test_failure_type_activates_its_interface_components(label, cues):
    info, failed = _profiled({label: 10})
    assert (MARKER in info["instruction"]) is ("schema_cues" in cues)
    assert ("\nHint: " in failed) is ("recovery_hints" in cues)
    assert ("Tool affordances: the tools you can call now are " in info["instruction"]) is ("affordance_cues" in cues)
    assert info["cues"] == cues and info["guidelines"] == [GUIDELINES[label]]


def test_only_selected_failure_types_activate_and_switches_still_apply():
    # 12 argument_mismatch + 7 missing_tool_call: the second is under the count threshold (8)
    info, _ = _profiled({"argument_mismatch": 12, "missing_tool_call": 7})
    assert info["cues"] == ["schema_cues"]
    # a switched-off component stays off whatever the profile selects
    info, failed = _profiled({"argument_mismatch": 10, "recovery_failure": 10}, schema_cues=False)
    assert info["cues"] == ["recovery_hints"] and MARKER not in info["instruction"] and "Hint: " in failed
    # static: every switched-on component from the start, empty profile included
    info, failed = _profiled({}, activation="static")
    assert info["cues"] == ["affordance_cues", "recovery_hints", "schema_cues"] and "Hint: " in failed
    with pytest.raises(ValueError, match="activation"):
        BFCLEnv(interface="evolved", activation="always")


def test_observation_note_follows_the_schema_cues_into_the_system_prompt():
    """The authors' observation_lite instruction line, after the tools, before the guidelines."""
    info, _ = _profiled({"argument_mismatch": 10})
    instruction = info["instruction"]
    assert NOTE in instruction
    assert instruction.index("</tools>") < instruction.index(NOTE) < instruction.index("# Guidelines")
    info, _ = _profiled({"argument_mismatch": 10}, schema_cues=False)
    assert NOTE not in info["instruction"]
    env = BFCLEnv(interface="evolved", activation="static", **SMALL)
    evl = env.tasks("eval")[0]
    assert NOTE not in env.reset(evl, seed=0)[1]["instruction"]  # evaluation stays plain
