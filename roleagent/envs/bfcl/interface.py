"""SEAL learning-interface evolution for BFCL (Hu et al., 2026, §3.3), train-only.

The interface changes only how existing information is shown; it never reveals the
answer (no ground-truth call, argument value or final state is used anywhere here):

- **schema cues** (Φ_schema): each parameter description is prefixed with ``[required]``
  or ``[optional]``, and the allowed values that bfcl writes inside descriptions
  (``"[Enum]: [\\"a\\", \\"b\\"]"`` or ``"[Enum]: A, B"``) become an explicit ``"enum"``
  list (the authors' ``observation_lite`` with ``add_required_hint`` and
  ``add_enum_hint``);
- **recovery hints** (Φ_recover): a failed call's result is followed by ``Hint: ...``,
  chosen by the *class* of the error (unknown/unavailable tool, missing or unexpected
  argument, type error, backend error message patterns) — never by the task;
- **capability guidelines** (Φ_profile): up to three guidelines chosen from the current
  ``FailureProfile``: tags with count ≥ 8, prevalence ≥ 0.10 and reward_mean < 0.6,
  ranked by prevalence·(1 − reward_mean).

``FailureProfile`` statistics are per trajectory over a sliding window: ``count`` = how
many trajectories in the window carry the tag at least once, ``prevalence`` = count /
trajectories in the window, ``reward_mean`` = mean verifier reward of those
trajectories. The same definitions feed ``roleagent.algos.seal.ClosedLoopWeights``.
"""

from __future__ import annotations

import copy
import json
import re
from collections import deque
from collections.abc import Iterable
from typing import Any

from roleagent.algos.seal import tag_statistics
from roleagent.envs.bfcl.executor import CallRecord

_ENUM_RE = re.compile(r"\[Enum\]:\s*(\[[^\]]*\]|[^.\"\]]+)")

#: Guideline text per paper priority label (what to do, never which answer).
GUIDELINES: dict[str, str] = {
    "invalid_tool_call": (
        "Call only tools listed in the schema, with their exact names, inside the required "
        "tool-call format; a tool that is not listed is not available yet."
    ),
    "argument_mismatch": (
        "Before calling a tool, match every argument to its schema: include all [required] "
        "arguments, use the documented type, and pick values only from the allowed enum "
        "list when one is given."
    ),
    "state_mismatch": (
        "Make sure your calls change the environment exactly as the user asked: check the "
        "current state (e.g. current directory, login status, existing items) before acting, "
        "and do not perform extra state-changing operations."
    ),
    "recovery_failure": (
        "When a tool returns an error, read it, fix the cause (a missing prerequisite call, a "
        "wrong argument) and retry before ending your turn."
    ),
    "missing_tool_call": (
        "If the request can be done with the available tools, call them; answer in plain text "
        "only after every requested operation is done. If a needed tool or parameter is "
        "missing, say so instead of guessing."
    ),
    "response_mismatch": (
        "Call the tools whose results the user asked for (look-ups, reads, computations) "
        "rather than answering from memory."
    ),
    # authors' code vocabulary, in case a profile is kept over those tags
    "spurious_tool_call": (
        "If a needed function or a required parameter is missing, do not call tools with "
        "guessed values: ask the user for what is missing."
    ),
    "empty_turn_model_response": (
        "Every user request that the tools can serve needs at least one tool call in that turn."
    ),
    "instance_mismatch": ("Keep track of the state your earlier calls produced; later requests build on it."),
}

MIN_COUNT = 8
MIN_PREVALENCE = 0.10
MAX_REWARD_MEAN = 0.6
MAX_GUIDELINES = 3
NON_FAILURE_TAGS = frozenset({"pass", "correct_abstention", "checker_error", "gt_error"})


class FailureProfile:
    """Per-tag failure statistics over the last ``window`` diagnosed trajectories."""

    def __init__(self, window: int = 512) -> None:
        self.window = int(window)
        self._items: deque[tuple[tuple[str, ...], float]] = deque(maxlen=self.window)

    def update(self, labels: Iterable[str], reward: float) -> None:
        self._items.append((tuple(sorted(set(labels))), float(reward)))

    def update_from_diagnosis(self, diagnosis: dict[str, Any], reward: float, key: str = "priority_labels") -> None:
        self.update(diagnosis.get(key, []), reward)

    def __len__(self) -> int:
        return len(self._items)

    def stats(self) -> dict[str, dict[str, float]]:
        """{tag: {"count", "prevalence", "reward_mean"}} over the window's trajectories."""
        return tag_statistics([tags for tags, _ in self._items], [reward for _, reward in self._items])

    def select_guidelines(
        self,
        max_guidelines: int = MAX_GUIDELINES,
        *,
        min_count: int = MIN_COUNT,
        min_prevalence: float = MIN_PREVALENCE,
        max_reward_mean: float = MAX_REWARD_MEAN,
    ) -> list[str]:
        """Tags whose guideline is shown: count ≥ 8, prevalence ≥ 0.10, reward_mean < 0.6,
        ranked by prevalence·(1 − reward_mean) (ties: tag name)."""
        ranked = []
        for tag, s in self.stats().items():
            if tag in NON_FAILURE_TAGS or tag not in GUIDELINES:
                continue
            if s["count"] >= min_count and s["prevalence"] >= min_prevalence and s["reward_mean"] < max_reward_mean:
                ranked.append((-(s["prevalence"] * (1.0 - s["reward_mean"])), tag))
        return [tag for _, tag in sorted(ranked)[:max_guidelines]]

    def state_dict(self) -> dict[str, Any]:
        return {"window": self.window, "items": [[list(t), r] for t, r in self._items]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window = int(state["window"])
        self._items = deque(((tuple(t), float(r)) for t, r in state["items"]), maxlen=self.window)


# ------------------------------------------------------------------ schema cues -------


def parse_enum(description: str) -> list[str] | None:
    """Allowed values written in a bfcl description as ``[Enum]: [...]`` or ``[Enum]: A, B``."""
    m = _ENUM_RE.search(description or "")
    if not m:
        return None
    body = m.group(1).strip()
    if body.startswith("["):
        try:
            values = json.loads(body)
            return [str(v) for v in values] if isinstance(values, list) else None
        except ValueError:
            body = body.strip("[]")
    values = [v.strip().strip("'\"") for v in body.split(",")]
    return [v for v in values if v] or None


def schema_cues(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of a tool doc with ``[required]``/``[optional]`` markers and ``enum`` lists."""
    doc = copy.deepcopy(doc)
    params = doc.get("parameters", {})
    required = set(params.get("required", []) or [])
    for name, prop in (params.get("properties") or {}).items():
        desc = prop.get("description", "")
        marker = "[required]" if name in required else "[optional]"
        prop["description"] = f"{marker} {desc}".strip()
        enum = parse_enum(desc)
        if enum and "enum" not in prop:
            prop["enum"] = enum
    return doc


# --------------------------------------------------------------- recovery hints -------

_ERROR_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"no such file|not found|does not exist|no such", re.I),
        "The item you referred to does not exist where you looked. Inspect the current state "
        "(e.g. list the current directory or look the item up) before referring to it.",
    ),
    (
        re.compile(r"already exists", re.I),
        "That item already exists; check the current state instead of creating it again.",
    ),
    (
        re.compile(r"log ?in|authenticat|not logged|permission|unauthori", re.I),
        "This operation needs an authenticated session or a permission; look for a tool that "
        "logs in or authenticates first.",
    ),
    (
        re.compile(r"invalid|not valid|must be|should be", re.I),
        "An argument value is not acceptable; re-read the parameter description (types, "
        "formats, allowed values) and correct it.",
    ),
    (
        re.compile(r"insufficient|not enough|exceed|limit", re.I),
        "A precondition is not met (balance, capacity, limit); check the relevant status with "
        "a look-up tool before retrying.",
    ),
]


def recovery_hint(record: CallRecord, schema: dict[str, Any]) -> str | None:
    """A hint for a failed call, chosen by the error class only."""
    kind = record.error_kind
    if kind == "parse_error":
        return 'Write each call as <tool_call>{"name": ..., "arguments": {...}}</tool_call> with valid JSON.'
    if kind == "unknown_tool":
        return "Use only the tool names listed in the schema."
    if kind == "unavailable_tool":
        return (
            "That tool is not available in this conversation yet; use the available tools "
            "or tell the user what is missing."
        )
    props = (schema.get("parameters") or {}).get("properties") or {}
    required = (schema.get("parameters") or {}).get("required") or []
    if kind == "missing_argument":
        return f"Include every required argument of {record.name}: {', '.join(required)}."
    if kind == "unexpected_argument":
        return f"{record.name} accepts only: {', '.join(props) or 'no arguments'}."
    if kind == "type_error":
        types = ", ".join(f"{k}: {v.get('type')}" for k, v in props.items())
        return f"Use the documented argument types of {record.name} ({types})."
    if kind in ("tool_error", "exec_error"):
        for pattern, hint in _ERROR_PATTERNS:
            if pattern.search(record.error or ""):
                return hint
        return (
            "The call failed; read the error, fix its cause (a prerequisite call or an "
            "argument) and retry instead of ending the turn."
        )
    return None


# ------------------------------------------------------------- compact schemas -------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_PREAMBLE = "Tool description:"


def _first_sentence(text: str, limit: int = 160) -> str:
    text = " ".join((text or "").split())
    head = _SENTENCE_END.split(text, maxsplit=1)[0]
    return head if len(head) <= limit else head[: limit - 3].rstrip() + "..."


def compact_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """A shorter copy of a tool doc for CPU-sized prompts (``tool_format="compact"``).

    Drops bfcl's per-backend preamble ("This tool belongs to ... Tool description:")
    and the ``"type": "dict"`` wrapper, and keeps the first sentence of every
    description, plus any ``[Enum]: ...`` fragment and any ``[required]/[optional]``
    marker (which lead the description). Names, parameter names, types, the
    ``required`` list, ``enum``/``items``/``default`` keys are kept unchanged: nothing a
    call needs is removed, only prose. Applied after the schema cues, to both the plain
    and the evolved interface, so evaluation and training see the same format.
    """
    desc = doc.get("description", "") or ""
    if _PREAMBLE in desc:
        desc = desc.split(_PREAMBLE, 1)[1]
    params = doc.get("parameters") or {}
    props: dict[str, Any] = {}
    for name, prop in (params.get("properties") or {}).items():
        short = {k: v for k, v in prop.items() if k != "description"}
        text = prop.get("description", "") or ""
        head = _first_sentence(text)
        enum = _ENUM_RE.search(text)
        if enum and enum.group(0) not in head:
            head = f"{head} {enum.group(0).strip()}".strip()
        if head:
            short = {"description": head, **short}
        props[name] = short
    out: dict[str, Any] = {"name": doc.get("name"), "description": _first_sentence(desc)}
    out["parameters"] = {"properties": props, "required": list(params.get("required", []) or [])}
    return out


class PlainInterface:
    """The benchmark interface (always used for evaluation).

    ``compact=True`` renders ``compact_doc`` schemas as minified JSON (the env's
    ``tool_format="compact"``); the default is bfcl's full schemas, one JSON per line.
    """

    name = "plain"
    compact = False

    def render_tools(self, docs: list[dict[str, Any]]) -> str:
        if self.compact:
            return "\n".join(json.dumps(compact_doc(d), ensure_ascii=False, separators=(",", ":")) for d in docs)
        return "\n".join(json.dumps(d, ensure_ascii=False) for d in docs)

    def hint(self, record: CallRecord, schema: dict[str, Any]) -> str | None:
        return None

    def guidelines(self) -> list[str]:
        return []


class EvolvedInterface(PlainInterface):
    """Schema cues + recovery hints + profile-selected guidelines (training only)."""

    name = "evolved"

    def __init__(
        self,
        profile: FailureProfile | None = None,
        *,
        schema_cues: bool = True,
        recovery_hints: bool = True,
        guidelines: bool = True,
    ) -> None:
        self.profile = profile if profile is not None else FailureProfile()
        self.use_schema_cues = schema_cues
        self.use_recovery_hints = recovery_hints
        self.use_guidelines = guidelines

    def render_tools(self, docs: list[dict[str, Any]]) -> str:
        if self.use_schema_cues:
            docs = [schema_cues(d) for d in docs]
        return super().render_tools(docs)

    def hint(self, record: CallRecord, schema: dict[str, Any]) -> str | None:
        return recovery_hint(record, schema) if self.use_recovery_hints else None

    def guidelines(self) -> list[str]:
        if not self.use_guidelines:
            return []
        return [GUIDELINES[t] for t in self.profile.select_guidelines()]
