"""Tool-schema rewriting for BFCL prompts: SEAL's schema cues (Hu et al., 2026, §3.3) and
the compact format of the CPU recipes. Both copy the doc; neither reads the ground truth.

Example: a required bfcl parameter ``{"type": "string", "description": "Unit of the
reading. [Enum]: C, F"}`` becomes, under ``schema_cues``, ``{"type": "string",
"description": "[required] Unit of the reading. [Enum]: C, F", "enum": ["C", "F"]}``;
``compact_doc`` keeps the first sentence of each description plus any ``[Enum]:``
fragment and drops bfcl's per-backend preamble.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

_ENUM_RE = re.compile(r"\[Enum\]:\s*(\[[^\]]*\]|[^.\"\]]+)")


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


# ------------------------------------------------- tools for a chat template -------

#: bfcl's parameter types → JSON Schema's, as bfcl's own OpenAI-style handlers convert them
JSON_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "bool": "boolean"}


def _json_schema(node: Any) -> Any:
    """A copy of a bfcl schema with its types renamed (``JSON_SCHEMA_TYPES``); an ``"any"``
    type is dropped (JSON Schema's default: any value)."""
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if not (k == "type" and v == "any")}
    if isinstance(out.get("type"), str):
        out["type"] = JSON_SCHEMA_TYPES.get(out["type"], out["type"])
    return out


def chat_template_tools(rendered: str) -> list[dict[str, Any]]:
    """The tools of a rendered tool list (one JSON doc a line, as the interface renders
    them: plain, compact or with schema cues) in the shape chat templates take
    (``tokenizer.apply_chat_template(messages, tools=...)``): ``{"type": "function",
    "function": {"name", "description", "parameters"}}``, bfcl's types renamed to JSON
    Schema's. E.g. ``{"name": "ls", "description": "List.", "parameters": {"type":
    "dict", "properties": {"a": {"type": "boolean"}}}}`` becomes ``{"type": "function",
    "function": {"name": "ls", "description": "List.", "parameters": {"type": "object",
    "properties": {"a": {"type": "boolean"}}}}}``."""
    out = []
    for line in rendered.splitlines():
        doc = json.loads(line)
        parameters = _json_schema(doc.get("parameters") or {})
        parameters.setdefault("type", "object")
        function = {"name": doc["name"], "description": doc.get("description", ""), "parameters": parameters}
        if "response" in doc:
            function["response"] = _json_schema(doc["response"])
        out.append({"type": "function", "function": function})
    return out
