"""Verifier-grounded turn-level diagnosis (SEAL, Hu et al., 2026, §3.2) over executable evidence.

Input: one evidence record per ground-truth user turn (``episode.TurnEvidence`` or its
``to_json()`` dict), produced by executing the model's calls on fresh backends and the
ground-truth calls on a second set of fresh backends, and comparing them with bfcl's
``state_checker`` / ``response_checker`` after every turn. These functions are pure:
they read the evidence and return labels.

Two vocabularies, both computed from the same evidence.

**Authors' code vocabulary** (``turn_label``; the tags the advantage utilities ρ use):

=========================  ==============================================================
``gt_error``               a ground-truth call could not be parsed/executed (excluded)
``checker_error``          the official checker raised (excluded)
``empty_turn_model_response``  GT turn non-empty and the model decoded no call in it
                           (also every such turn the episode never reached)
``spurious_tool_call``     GT turn empty (missing function / parameter: the model should
                           ask) and the model called tools anyway
``correct_abstention``     GT turn empty and the model called no tool (also every such
                           turn the episode never reached: the authors pad unreached
                           turns with no calls)
``instance_mismatch``      never emitted here (see below)
``state_mismatch``         post-turn state differs from the ground truth's (bfcl
                           ``multi_turn:instance_state_mismatch``), whether the divergence
                           arose in this turn or was carried over from an earlier one
``response_mismatch``      states match but a ground-truth result string is missing from
                           the model's results (bfcl ``execution_response_mismatch``)
``pass``                   bfcl's checks pass for this turn
=========================  ==============================================================

These rules follow the authors' classifier (``compute_per_turn_progress`` in
``env_service/environments/bfcl/multi_turn_progress.py`` of the SEAL code release),
check by check and in its order: gt_error, GT-empty turn (spurious / abstention),
empty turn, instance set, state, response. The authors tag ``instance_mismatch`` when the
set of backend instances bfcl's executor returned for the model in this turn differs
from the ground truth's — which happens only when the model's execution raised before
returning any instance, since bfcl returns every involved class otherwise. roleagent
builds both instance sets once per episode from the task's involved classes, so the
condition cannot arise and the tag (utility 0.6) never appears; an inherited state
divergence is ``state_mismatch``, as in the authors' code.

**Paper priority vocabulary** (``priority_label``; Appendix C order
invalid_tool_call > argument_mismatch > state_mismatch > recovery_failure >
missing_tool_call > response_mismatch). A turn that passes (or correctly abstains) is
``pass``. For a failing turn, the first of these that holds:

- ``invalid_tool_call``: a call failed to parse, named an unknown/unavailable tool,
  broke the schema (missing required / unexpected argument / wrong type), or any tool
  call at all in a turn where the ground truth calls nothing (spurious call);
- ``missing_tool_call`` *first* when the model decoded no call in the turn (or never
  reached it): with no executed action there is nothing to attribute a state or argument
  mismatch to;
- ``argument_mismatch``: the model called a tool that the ground truth calls in this turn,
  but none of those calls has the ground truth's arguments (values compared after
  tuple→list normalisation);
- ``state_mismatch``: post-turn state differs (the ``state_mismatch`` tag above);
- ``recovery_failure``: a call returned an error (backend error dict or exception) and no
  later call of the same tool in the turn succeeded;
- ``missing_tool_call``: a tool the ground truth calls in this turn was never called;
- ``response_mismatch``: otherwise (verifier-level response mismatch).

Mapping (typical; both are computed independently from the evidence):
spurious_tool_call → invalid_tool_call; empty_turn_model_response → missing_tool_call;
state_mismatch → argument_mismatch / state_mismatch / invalid_tool_call;
response_mismatch → argument_mismatch / recovery_failure / missing_tool_call /
response_mismatch; pass and correct_abstention → pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

CODE_LABELS: tuple[str, ...] = (
    "spurious_tool_call",
    "correct_abstention",
    "empty_turn_model_response",
    "instance_mismatch",
    "state_mismatch",
    "response_mismatch",
    "pass",
)
EXCLUDED_LABELS: tuple[str, ...] = ("checker_error", "gt_error")
PRIORITY_LABELS: tuple[str, ...] = (
    "invalid_tool_call",
    "argument_mismatch",
    "state_mismatch",
    "recovery_failure",
    "missing_tool_call",
    "response_mismatch",
)

_FAILED_EXEC = ("tool_error", "exec_error")
_INVALID = ("parse_error", "rejected")


def _ev(evidence: Any) -> Mapping[str, Any]:
    return evidence.to_json() if hasattr(evidence, "to_json") else evidence


def _calls(ev: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for step in ev.get("steps", []) for c in step]


def _decoded(ev: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in _calls(ev) if c.get("status") != "parse_error"]


def _norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _norm(v) for k, v in value.items()}
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return value


def turn_label(evidence: Any) -> str:
    """The authors' code-vocabulary tag of one ground-truth turn."""
    ev = _ev(evidence)
    if ev.get("gt_error"):
        return "gt_error"
    if ev.get("checker_error"):
        return "checker_error"
    decoded = _decoded(ev) if ev.get("reached", False) else []  # unreached: no calls
    if not ev.get("gt_calls"):
        return "spurious_tool_call" if decoded else "correct_abstention"
    if not decoded:
        return "empty_turn_model_response"
    if ev.get("state_equal") is False:
        return "state_mismatch"
    if ev.get("response_ok") is False:
        return "response_mismatch"
    if ev.get("state_equal") is None:  # reached but never checked (should not happen)
        return "empty_turn_model_response"
    return "pass"


def priority_label(evidence: Any) -> str:
    """The paper's priority-vocabulary label of one ground-truth turn (``pass`` if it passes)."""
    ev = _ev(evidence)
    code = turn_label(ev)
    if code in EXCLUDED_LABELS:
        return code
    if code in ("pass", "correct_abstention"):
        return "pass"
    calls = _calls(ev)
    decoded = _decoded(ev)
    if any(c.get("status") in _INVALID for c in calls) or code == "spurious_tool_call":
        return "invalid_tool_call"
    if not decoded:
        return "missing_tool_call"
    gt = ev.get("gt_parsed") or []
    gt_names = {g["name"] for g in gt}
    for name in gt_names:
        model_args = [_norm(c.get("arguments", {})) for c in decoded if c.get("name") == name]
        gt_args = [_norm(g.get("arguments", {})) for g in gt if g["name"] == name]
        if model_args and not any(a in gt_args for a in model_args):
            return "argument_mismatch"
    if ev.get("state_equal") is False:
        return "state_mismatch"
    for i, c in enumerate(calls):
        if c.get("status") in _FAILED_EXEC:
            if not any(d.get("name") == c.get("name") and d.get("status") == "ok" for d in calls[i + 1 :]):
                return "recovery_failure"
    if gt_names - {c.get("name") for c in decoded}:
        return "missing_tool_call"
    return "response_mismatch"


def dominant_type(priority_labels: Iterable[str], success: bool | None = None) -> str:
    """Highest-priority failure label present; ``pass`` when none (and the trajectory did
    not fail); a failed trajectory without any failure label (e.g. force-terminated in its
    last turn with matching state) is ``response_mismatch``."""
    labels = set(priority_labels)
    for label in PRIORITY_LABELS:
        if label in labels:
            return label
    if success is False:
        return "response_mismatch"
    return "pass"


def diagnose_evidence(turns: Iterable[Any], success: bool | None = None) -> dict[str, Any]:
    """``{"turn_labels", "priority_labels", "dominant_type", "official"}`` for one episode."""
    evs = [_ev(t) for t in turns]
    code = [turn_label(e) for e in evs]
    prio = [priority_label(e) for e in evs]
    return {
        "turn_labels": code,
        "priority_labels": prio,
        "dominant_type": dominant_type(prio, success),
        "official": [e.get("official", "unchecked") for e in evs],
        "success": success,
    }
