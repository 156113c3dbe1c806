"""SEAL learning-interface evolution for BFCL (Hu et al., 2026, §3.3), train-only.

The interface changes only how existing information is shown; it never reveals the
answer (no ground-truth call, argument value or final state is used anywhere here):

- **schema cues** (Φ_schema): each parameter description is prefixed with ``[required]``
  or ``[optional]``, and the allowed values that bfcl writes inside descriptions
  (``"[Enum]: [\\"a\\", \\"b\\"]"`` or ``"[Enum]: A, B"``) become an explicit ``"enum"``
  list (``schemas.schema_cues``; after the authors' ``observation_lite`` with
  ``add_required_hint`` and ``add_enum_hint``, which append ``[required]`` only and read an
  ``enum`` key that bfcl's docs lack);
- **recovery hints** (Φ_recover): a failed call's result is followed by ``Hint: ...``,
  chosen by the *class* of the error (unknown/unavailable tool, missing or unexpected
  argument, type error, backend error message patterns) — never by the task;
- **capability guidelines** (Φ_profile): up to three guidelines chosen from the current
  ``FailureProfile``: tags with count ≥ 8, prevalence ≥ 0.10 and reward_mean < 0.6,
  ranked by prevalence·(1 − reward_mean);
- **affordance cues**: a line naming the tools callable now and when a request needs a
  call (ours: the paper names "tool-affordance cues" but not their text);
- **observation note**: shown with the schema cues, the authors' ``observation_lite``
  instruction line (``OBSERVATION_NOTE``), appended to the system prompt as they do.

**Activation by failure type** (§3.3: "argument_mismatch activates schema and constraint
cues, missing_tool_call activates tool-affordance cues, and recovery_failure activates
structured error feedback"). With ``activation="profile"`` (default) a training episode
gets only the components that the profile's *selected* failure types activate
(``ACTIVATES``; the selected types are those that get a guideline, so one rule picks
both). Worked example: a window of 20 trajectories, 12 with ``argument_mismatch``
(reward 0) and 8 with ``recovery_failure`` (reward 0) selects both types, so the next
episodes show schema cues + the observation note and recovery hints, not the affordance
line; an empty profile (iteration 0) selects nothing and the training interface equals
the plain one. ``activation="static"`` shows every switched-on component from the start
(the authors' released setting: ``observation_lite`` is always on for training).
Where the paper is silent we chose: ``invalid_tool_call`` → schema cues + recovery hints
(its evidence is parse/schema/unknown-tool errors, which both address);
``state_mismatch`` and ``response_mismatch`` → their guideline only; the authors' code
tags map as their priority counterparts (``spurious_tool_call`` as ``invalid_tool_call``,
``empty_turn_model_response`` as ``missing_tool_call``). Components are fixed per
episode (chosen at ``reset``), so tools revealed mid-episode get the same cues.

``FailureProfile`` statistics are per trajectory over a sliding window: ``count`` = how
many trajectories in the window carry the tag at least once, ``prevalence`` = count /
trajectories in the window, ``reward_mean`` = mean verifier reward of those
trajectories. The same definitions feed ``roleagent.algos.seal.ClosedLoopWeights``.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable
from typing import Any

from roleagent.algos.seal import tag_statistics
from roleagent.envs.bfcl.executor import CallRecord
from roleagent.envs.bfcl.schemas import compact_doc, parse_enum, schema_cues

__all__ = ["compact_doc", "parse_enum", "schema_cues"]  # re-exported: they lived here

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

#: Interface components each failure type activates (``activation="profile"``), see above.
ACTIVATES: dict[str, frozenset[str]] = {
    "argument_mismatch": frozenset({"schema_cues"}),  # paper: schema and constraint cues
    "missing_tool_call": frozenset({"affordance_cues"}),  # paper: tool-affordance cues
    "recovery_failure": frozenset({"recovery_hints"}),  # paper: structured error feedback
    "invalid_tool_call": frozenset({"schema_cues", "recovery_hints"}),  # paper silent: ours
    "state_mismatch": frozenset(),  # guideline only
    "response_mismatch": frozenset(),  # guideline only
    "spurious_tool_call": frozenset({"schema_cues", "recovery_hints"}),
    "empty_turn_model_response": frozenset({"affordance_cues"}),
    "instance_mismatch": frozenset(),
}
ACTIVATIONS = ("profile", "static")

#: The authors' ``observation_lite`` instruction line (Hu et al., 2026, code release), shown
#: in the system prompt whenever the schema cues are.
OBSERVATION_NOTE = (
    "Observation note: parameters marked [required] must be provided exactly when calling a "
    "tool; do not invent tools outside the current schema."
)


def affordance_note(tool_names: list[str]) -> str:
    """The affordance cue: which tools can be called now and when a request needs a call
    (only names already in the schemas; nothing about the task's answer)."""
    return (
        f"Tool affordances: the tools you can call now are {', '.join(tool_names)}. A request "
        "that one of them can serve needs a tool call in this turn; reply in plain text only "
        "when the requested operations are done, or when no listed tool applies (then say "
        "what is missing)."
    )


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

    active: frozenset[str] = frozenset()

    def begin_episode(self) -> None:
        """Fix the episode's components (the evolved interface reads its profile here)."""

    def notes(self, tool_names: list[str]) -> list[str]:
        return []

    def hint(self, record: CallRecord, schema: dict[str, Any]) -> str | None:
        return None

    def guidelines(self) -> list[str]:
        return []


class EvolvedInterface(PlainInterface):
    """Schema cues, affordance cues, recovery hints and profile-selected guidelines
    (training only), each switchable; ``activation`` decides which of the switched-on
    components an episode gets (module docstring). Call ``begin_episode`` at reset."""

    name = "evolved"

    def __init__(
        self,
        profile: FailureProfile | None = None,
        *,
        schema_cues: bool = True,
        recovery_hints: bool = True,
        guidelines: bool = True,
        affordance_cues: bool = True,
        activation: str = "profile",
    ) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.profile = profile if profile is not None else FailureProfile()
        self.use_schema_cues = schema_cues
        self.use_recovery_hints = recovery_hints
        self.use_guidelines = guidelines
        self.use_affordance_cues = affordance_cues
        self.activation = activation
        self.active: frozenset[str] = frozenset()

    def components(self) -> frozenset[str]:
        """The switched-on components this profile activates (all of them when static)."""
        switched = {
            "schema_cues": self.use_schema_cues,
            "affordance_cues": self.use_affordance_cues,
            "recovery_hints": self.use_recovery_hints,
        }
        on = {name for name, flag in switched.items() if flag}
        if self.activation == "static":
            return frozenset(on)
        activated = set().union(*(ACTIVATES.get(t, frozenset()) for t in self.profile.select_guidelines()))
        return frozenset(on & activated)

    def begin_episode(self) -> None:
        self.active = self.components()

    def render_tools(self, docs: list[dict[str, Any]]) -> str:
        if "schema_cues" in self.active:
            docs = [schema_cues(d) for d in docs]
        return super().render_tools(docs)

    def notes(self, tool_names: list[str]) -> list[str]:
        """System-prompt lines of the active cues (observation note, affordance line)."""
        out = [OBSERVATION_NOTE] if "schema_cues" in self.active else []
        if "affordance_cues" in self.active and tool_names:
            out.append(affordance_note(tool_names))
        return out

    def hint(self, record: CallRecord, schema: dict[str, Any]) -> str | None:
        return recovery_hint(record, schema) if "recovery_hints" in self.active else None

    def guidelines(self) -> list[str]:
        if not self.use_guidelines:
            return []
        return [GUIDELINES[t] for t in self.profile.select_guidelines()]
