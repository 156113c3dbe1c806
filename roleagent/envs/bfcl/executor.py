"""Safe execution of parsed tool calls on fresh BFCL backend instances.

bfcl_eval's own executor (``multi_turn_utils.execute_multi_turn_func_call``) rewrites the
call string and ``eval``s it, and caches backend instances in its module globals by
model name + test id. We do neither: each ``Backends`` object instantiates the backend
classes directly (a fresh instance per episode), loads the scenario exactly as bfcl does
(``_load_scenario(deepcopy(config), long_context=...)``, skipped for stateless classes)
and invokes a method only after these checks:

1. the name is a plain identifier (``[A-Za-z][A-Za-z0-9_]*``: no dunder, no private
   name, no dotted attribute path);
2. the name is one of the tools *currently available* (miss_func tools stay unavailable
   until their turn), and belongs to one of the episode's backend classes;
3. the attribute on the instance is a bound method defined by the backend class itself;
4. positional arguments (python format only) bind to the method's parameters; no
   unknown parameter; every required parameter present; each value has the schema type
   (``integer``: int, ``float``: int or float, ``string``: str, ``boolean``: bool,
   ``array``: list/tuple with typed items, ``dict``: dict; ``None`` only for optional
   parameters).

A rejected call is never executed. Results are stringified as bfcl does (str as is, dict
via ``json.dumps``, else ``str``; exceptions as ``"Error during execution: ..."``), so
the official response checker sees the same strings it would see in bfcl.

Bounds (what a model writes cannot stall the worker or grow without limit; the limits
and their checks are in ``limits.py``):

5. arguments that set the cost of a single C-level operation are capped before the call
   (``COST_LIMITS``: MathAPI's ``precision``, an integer ``power``'s result size,
   ``round_number``'s ``decimal_places``); Python checks signals only between bytecodes,
   so no deadline could interrupt such a call;
6. the call and the stringification of its result run under a CPU-time deadline
   (``call_cpu_seconds``, ``roleagent.envs.safety.cpu_deadline``); an exception there,
   the deadline included, is an ``exec_error`` result like any backend exception;
7. a call that leaves its backend's state over ``max_state_items`` containers/entries
   or ``max_state_chars`` characters is undone (the state is restored from a copy taken
   before the call) and reported as an ``exec_error``: five ``cp`` calls can otherwise
   double a file system each time;
8. global numeric contexts the backends set (``decimal``'s precision, ``mpmath``'s
   ``dps``) are restored after every call, and each instance's state is deep-copied
   after ``_load_scenario`` so no episode shares a module-level default (long-context
   TravelAPI otherwise aliases ``CREDIT_CARD_EXTENSION``'s dicts, and a booking in one
   episode changed the balances of the next).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import re
from dataclasses import dataclass
from typing import Any

from roleagent.envs.bfcl.data import BACKENDS, STATELESS_CLASSES, func_docs
from roleagent.envs.bfcl.limits import (
    CALL_CPU_SECONDS,
    MAX_STATE_CHARS,
    MAX_STATE_ITEMS,
    cost_problem,
    numeric_contexts,
    state_size,
)
from roleagent.envs.bfcl.parsing import ParsedCall
from roleagent.envs.safety import DeadlineExceeded, cpu_deadline, describe_error, truncate

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

OK, TOOL_ERROR, EXEC_ERROR, REJECTED, PARSE_ERROR = ("ok", "tool_error", "exec_error", "rejected", "parse_error")

#: Characters of a result or error kept in ``CallRecord.to_json`` (the observation itself
#: is capped by ``Environment.max_observation_chars``).
RECORD_CHARS = 4096


@dataclass
class CallRecord:
    """What happened to one parsed call."""

    name: str | None
    arguments: dict[str, Any]
    status: str  # ok | tool_error | exec_error | rejected | parse_error
    result: str  # the string the model sees (bfcl formatting for executed calls)
    error: str | None = None
    error_kind: str | None = None  # for recovery hints: unknown_tool, unavailable_tool, ...
    raw: str = ""

    @property
    def decoded(self) -> bool:
        """bfcl would have decoded this call (it names a function), executed or not."""
        return self.status != PARSE_ERROR

    @property
    def executed(self) -> bool:
        return self.status in (OK, TOOL_ERROR, EXEC_ERROR)

    @property
    def failed(self) -> bool:
        return self.status != OK

    def to_json(self) -> dict[str, Any]:
        """The record for ``info["calls"]`` and the diagnosis; long texts are capped."""
        return {
            "name": self.name,
            "arguments": _jsonable(self.arguments),
            "status": self.status,
            "result": truncate(self.result, RECORD_CHARS),
            "error": None if self.error is None else truncate(self.error, RECORD_CHARS),
            "error_kind": self.error_kind,
        }


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        try:
            return truncate(repr(value), RECORD_CHARS)
        except ValueError:  # e.g. an int beyond Python's digit limit for str()
            return f"<{type(value).__name__}>"


def format_result(value: Any) -> str:
    """bfcl's stringification of a tool's return value."""
    if type(value) is str:  # noqa: E721 - bfcl checks the exact type
        return value
    if type(value) is dict:  # noqa: E721
        try:
            return json.dumps(value)
        except Exception:  # noqa: BLE001 - bfcl falls back to str on any failure
            return str(value)
    return str(value)


def tool_schemas(involved_classes: list[str]) -> dict[str, dict[str, Any]]:
    """name → schema for every tool of the involved classes (bfcl's func docs)."""
    out: dict[str, dict[str, Any]] = {}
    for class_name in involved_classes:
        for doc in func_docs(class_name):
            out[doc["name"]] = dict(doc, _class=class_name)
    return out


class Backends:
    """The backend instances of one episode (or of its ground-truth replay)."""

    def __init__(
        self,
        involved_classes: list[str],
        initial_config: dict[str, Any],
        long_context: bool,
        call_cpu_seconds: float | None = None,
    ) -> None:
        self.instances: dict[str, Any] = {}
        self.call_cpu_seconds = CALL_CPU_SECONDS if call_cpu_seconds is None else call_cpu_seconds
        for class_name in involved_classes:
            module_name, _ = BACKENDS[class_name]
            cls = getattr(importlib.import_module(module_name), class_name)
            instance = cls()
            if class_name not in STATELESS_CLASSES:
                instance._load_scenario(copy.deepcopy(initial_config.get(class_name, {})), long_context=long_context)
                # _load_scenario may keep references to module-level defaults (rule 8)
                instance.__dict__ = copy.deepcopy(instance.__dict__)
            self.instances[class_name] = instance
        self.schemas = tool_schemas(involved_classes)

    # ------------------------------------------------------------------ checks -------

    def check(
        self, call: ParsedCall, available: set[str] | frozenset[str], type_check: bool = True
    ) -> tuple[dict[str, Any] | None, str | None, str | None]:
        """Validate a call. Returns (kwargs, None, None) or (None, error, error_kind).
        ``type_check=False`` skips rule 4's value types (names, availability, binding,
        unknown and required parameters are always checked)."""
        name = call.name
        if call.error is not None:
            return None, call.error, "parse_error"
        if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > 64:
            return None, f"invalid tool name {str(name)[:64]!r}", "unknown_tool"
        if name not in self.schemas:
            return None, f"no tool named {name!r}", "unknown_tool"
        if name not in available:
            return None, f"tool {name!r} is not available now", "unavailable_tool"
        schema = self.schemas[name]
        instance = self.instances.get(schema["_class"])
        method = getattr(type(instance), name, None) if instance is not None else None
        if not inspect.isfunction(method) or name not in vars(type(instance)):
            return None, f"tool {name!r} has no implementation", "unknown_tool"
        params = schema.get("parameters", {})
        props: dict[str, Any] = params.get("properties", {}) or {}
        required = list(params.get("required", []) or [])
        kwargs = dict(call.arguments)
        if call.positional:
            sig_names = [
                p.name
                for p in inspect.signature(method).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ][1:]
            if len(call.positional) > len(sig_names):
                return None, f"{name} takes at most {len(sig_names)} positional arguments", "bad_arguments"
            for pname, value in zip(sig_names, call.positional):
                if pname in kwargs:
                    return None, f"{name}: argument {pname!r} given twice", "bad_arguments"
                kwargs[pname] = value
        unknown = [k for k in kwargs if k not in props]
        if unknown:
            return (
                None,
                (
                    f"{name}: unexpected argument(s) {', '.join(map(repr, unknown[:5]))}; "
                    f"parameters are {', '.join(props) or 'none'}"
                ),
                "unexpected_argument",
            )
        missing = [r for r in required if r not in kwargs]
        if missing:
            return None, f"{name}: missing required argument(s) {', '.join(map(repr, missing))}", "missing_argument"
        for key, value in kwargs.items():
            if not type_check:
                break
            problem = _type_problem(value, props[key], optional=key not in required)
            if problem:
                return None, f"{name}: argument {key!r} {problem}", "type_error"
        return kwargs, None, None

    # --------------------------------------------------------------- execution -------

    def execute(self, call: ParsedCall, available: set[str] | frozenset[str], type_check: bool = True) -> CallRecord:
        kwargs, error, kind = self.check(call, available, type_check)
        if kwargs is None:
            status = PARSE_ERROR if kind == "parse_error" else REJECTED
            return CallRecord(
                call.name,
                dict(call.arguments),
                status,
                f"Error: {error}. The call was not executed.",
                error,
                kind,
                call.raw,
            )
        name = call.name
        assert name is not None
        instance = self.instances[self.schemas[name]["_class"]]
        bound = getattr(instance, name)
        if not inspect.ismethod(bound) or bound.__self__ is not instance:
            return CallRecord(
                name, kwargs, REJECTED, "Error: not a tool method.", "not a tool method", "unknown_tool", call.raw
            )
        problem = cost_problem(name, kwargs)
        if problem:
            return CallRecord(
                name, kwargs, EXEC_ERROR, f"Error during execution: {problem}", problem, "resource_limit", call.raw
            )
        stateful = type(instance).__name__ not in STATELESS_CLASSES
        saved = copy.deepcopy(instance.__dict__) if stateful else None
        try:
            with numeric_contexts(), cpu_deadline(self.call_cpu_seconds) as deadline:
                value = bound(**kwargs)
                result = format_result(value)
        except DeadlineExceeded:
            if not deadline.expired:  # the step's own deadline (an enclosing block) fired
                raise
            return self._undo(
                instance,
                saved,
                name,
                kwargs,
                call.raw,
                f"the call used more than {self.call_cpu_seconds:g} s of CPU time",
            )
        except Exception as exc:  # noqa: BLE001 - a backend error is an observation
            message = f"Error during execution: {describe_error(exc, with_type=False, limit=None)}"
            return CallRecord(
                name,
                kwargs,
                EXEC_ERROR,
                message,
                describe_error(exc, with_type=False, limit=None),
                "exec_error",
                call.raw,
            )
        if stateful:
            items, chars = state_size(instance)
            if items > MAX_STATE_ITEMS or chars > MAX_STATE_CHARS:
                return self._undo(
                    instance,
                    saved,
                    name,
                    kwargs,
                    call.raw,
                    f"the call would grow the {type(instance).__name__} state past "
                    f"{MAX_STATE_ITEMS} entries or {MAX_STATE_CHARS} characters",
                )
        if isinstance(value, dict) and "error" in value:
            return CallRecord(name, kwargs, TOOL_ERROR, result, str(value["error"]), "tool_error", call.raw)
        return CallRecord(name, kwargs, OK, result, None, None, call.raw)

    @staticmethod
    def _undo(
        instance: Any, saved: dict[str, Any] | None, name: str, kwargs: dict[str, Any], raw: str, why: str
    ) -> CallRecord:
        """Restore the state from before the call and report it as a resource limit."""
        if saved is not None:
            instance.__dict__ = saved
        message = f"{why}; it was undone"
        return CallRecord(
            name, kwargs, EXEC_ERROR, f"Error during execution: {message}", message, "resource_limit", raw
        )

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Public attributes of every instance (what bfcl's state checker compares)."""
        return {
            c: {k: copy.deepcopy(v) for k, v in vars(i).items() if not k.startswith("_")}
            for c, i in self.instances.items()
        }


_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "float": (int, float),
    "number": (int, float),
    "boolean": (bool,),
    "dict": (dict,),
    "object": (dict,),
    "array": (list, tuple),
    "tuple": (list, tuple),
    "list": (list, tuple),
}


def _type_problem(value: Any, schema: dict[str, Any], optional: bool) -> str | None:
    expected = schema.get("type")
    if value is None:
        return None if optional else "must not be null"
    if expected in (None, "any"):
        return None
    allowed = _SCALAR_TYPES.get(expected)
    if allowed is None:
        return None  # a type we do not know: let the backend decide
    if isinstance(value, bool) and bool not in allowed:
        return f"must be of type {expected}, got boolean"
    if not isinstance(value, allowed):
        return f"must be of type {expected}, got {type(value).__name__}"
    items = schema.get("items")
    if expected in ("array", "tuple", "list") and isinstance(items, dict):
        for i, item in enumerate(value):
            problem = _type_problem(item, items, optional=False)
            if problem:
                return f"item {i} {problem}"
    return None
