"""Parse tool calls out of a model turn, safely: JSON or ``ast``, never ``eval``.

Two call formats:

- ``"qwen"`` (default): one or more ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  blocks anywhere in the turn (the Qwen2.5 / Hermes chat-template format). Text outside
  the blocks is ignored; so is an opening tag that is never closed (bfcl's decoder,
  ``QwenFCHandler._extract_tool_calls``, only sees complete blocks). A turn with no
  complete block is a plain-text answer. The blocks are found with ``str.find`` in one
  left-to-right pass (linear time; a lazy ``.*?`` regex is quadratic on a run of
  unclosed tags). The JSON must be strict: a duplicated key or ``NaN``/``Infinity`` makes
  the block a parse error (``json.loads`` would silently keep the last duplicate and
  accept the non-standard constants).
- ``"python"``: the BFCL prompting format ``[f(a=1, b='x'), g(c=[1, 2])]`` (or one bare
  call), optionally inside a ``` fence. It is parsed with ``ast.parse(mode="eval")``;
  every call must be a plain name (no attribute access such as ``x.__class__``), every
  argument value is read with ``ast.literal_eval`` on its node (literals only: no names,
  calls, attributes, subscripts or comprehensions). Positional arguments are kept and
  bound to parameter names later by the executor (the ground truth uses them, e.g.
  ``sort('final_report.pdf')``).

Nothing here executes anything; the executor (``executor.py``) validates each parsed call
against the schema of the tools available *now* before it touches a backend.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

CALL_FORMATS = ("qwen", "python")
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_FENCE_LANG_RE = re.compile(r"[A-Za-z0-9_]*")
_LOOKS_LIKE_PY_CALL = re.compile(r"^\s*[\[\(]?\s*[A-Za-z_][\w.]*\s*\(")


@dataclass
class ParsedCall:
    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    positional: list[Any] = field(default_factory=list)
    raw: str = ""
    error: str | None = None  # parse error: the call is never executed


@dataclass
class ParsedTurn:
    has_calls: bool  # the turn tried to call tools (even if every call failed to parse)
    calls: list[ParsedCall]
    error: str | None = None  # whole-turn rejection (e.g. oversized): nothing runs


def parse_turn(text: str, call_format: str = "qwen", *, max_chars: int = 16384, max_calls: int = 32) -> ParsedTurn:
    if call_format not in CALL_FORMATS:
        raise ValueError(f"unknown call format {call_format!r}; known: {CALL_FORMATS}")
    if not isinstance(text, str):
        return ParsedTurn(True, [], error="action is not a string")
    if len(text) > max_chars:
        return ParsedTurn(
            True, [], error=f"action has {len(text)} characters, over the limit of {max_chars}; nothing was executed"
        )
    turn = _parse_qwen(text) if call_format == "qwen" else _parse_python(text)
    if len(turn.calls) > max_calls:
        return ParsedTurn(
            True,
            [],
            error=f"{len(turn.calls)} tool calls in one turn, over the limit of {max_calls}; nothing was executed",
        )
    return turn


# ----------------------------------------------------------------- qwen / JSON -------


def tool_call_blocks(text: str) -> list[str]:
    """The bodies of the complete ``<tool_call>…</tool_call>`` blocks, in order (each body
    ends at the first closing tag after its opening tag), in one linear pass.

    >>> tool_call_blocks("a<tool_call>1</tool_call>b<tool_call>2</tool_call><tool_call>3")
    ['1', '2']
    """
    blocks: list[str] = []
    pos = 0
    while True:
        start = text.find(_OPEN, pos)
        if start < 0:
            return blocks
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:  # unclosed: no complete block can start at or after this point
            return blocks
        blocks.append(text[start + len(_OPEN) : end])
        pos = end + len(_CLOSE)


def _parse_qwen(text: str) -> ParsedTurn:
    blocks = tool_call_blocks(text)
    if not blocks:
        return ParsedTurn(False, [])
    return ParsedTurn(True, [_parse_json_call(block) for block in blocks])


class _StrictJSONError(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _StrictJSONError(f"duplicate key {key[:50]!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _StrictJSONError(f"{name} is not allowed (not standard JSON)")


def strict_json_loads(text: str) -> Any:
    """``json.loads`` that rejects duplicate object keys and ``NaN``/``Infinity``.

    >>> strict_json_loads('{"a": 1, "b": [2]}')
    {'a': 1, 'b': [2]}
    >>> for bad in ('{"a": 1, "a": 2}', '{"a": NaN}', '[-Infinity]'):
    ...     try:
    ...         strict_json_loads(bad)
    ...     except ValueError as exc:
    ...         print(exc)
    duplicate key 'a'
    NaN is not allowed (not standard JSON)
    -Infinity is not allowed (not standard JSON)
    """
    return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)


def _parse_json_call(block: str) -> ParsedCall:
    raw = block.strip()
    try:
        obj = strict_json_loads(raw)
    except (ValueError, RecursionError) as exc:  # _StrictJSONError is a ValueError
        return ParsedCall(None, raw=raw[:200], error=f"tool call is not valid JSON: {exc}")
    if not isinstance(obj, dict):
        return ParsedCall(None, raw=raw[:200], error="tool call must be a JSON object")
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = strict_json_loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            return ParsedCall(
                name if isinstance(name, str) else None,
                raw=raw[:200],
                error="'arguments' is a string that is not a JSON object",
            )
    if args is None:
        args = {}
    if not isinstance(name, str):
        return ParsedCall(None, raw=raw[:200], error="tool call needs a string 'name'")
    if not isinstance(args, dict):
        return ParsedCall(name, raw=raw[:200], error="'arguments' must be a JSON object")
    return ParsedCall(name, dict(args), raw=raw)


# -------------------------------------------------------------- python / ast ---------


def _parse_python(text: str) -> ParsedTurn:
    body = _unfence(text.strip())
    if not body:
        return ParsedTurn(False, [])
    try:
        tree = ast.parse(body, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        if _LOOKS_LIKE_PY_CALL.match(body):
            return ParsedTurn(True, [ParsedCall(None, raw=body[:200], error="could not parse the call list")])
        return ParsedTurn(False, [])
    if isinstance(tree, (ast.List, ast.Tuple)):
        nodes = list(tree.elts)
        if not nodes or not all(isinstance(n, ast.Call) for n in nodes):
            if any(isinstance(n, ast.Call) for n in nodes):
                return ParsedTurn(True, [ParsedCall(None, raw=body[:200], error="the list may contain only calls")])
            return ParsedTurn(False, [])
    elif isinstance(tree, ast.Call):
        nodes = [tree]
    else:
        return ParsedTurn(False, [])
    return ParsedTurn(True, [parse_python_call(node, body) for node in nodes])


def _unfence(body: str) -> str:
    """The inside of a markdown code fence around the whole text (else the text as is).

    >>> _unfence("```python\\n[ls()]\\n```")
    '[ls()]'
    """
    if len(body) >= 6 and body.startswith("```") and body.endswith("```"):
        inner = body[3:-3]
        return inner[_FENCE_LANG_RE.match(inner).end() :].strip()
    return body


def parse_python_call(node: ast.Call, source: str = "") -> ParsedCall:
    raw = (ast.get_source_segment(source, node) or "") if source else ""
    if not isinstance(node.func, ast.Name):
        return ParsedCall(None, raw=raw[:200], error="only plain function names may be called (no attribute access)")
    name = node.func.id
    try:
        positional = [_literal(arg) for arg in node.args]
        arguments: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise ValueError("**kwargs expansion is not allowed")
            if kw.arg in arguments:
                raise ValueError(f"argument {kw.arg!r} given twice")
            arguments[kw.arg] = _literal(kw.value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        return ParsedCall(name, raw=raw[:200], error=f"arguments must be literals: {exc}")
    return ParsedCall(name, arguments, positional, raw=raw)


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Starred):
        raise ValueError("*args expansion is not allowed")
    return ast.literal_eval(node)  # literals only; raises ValueError on anything else


def parse_call_string(call: str) -> ParsedCall:
    """Parse one trusted-format call string such as the ground truth's ``cd(folder='x')``."""
    tree = ast.parse(call.strip(), mode="eval").body
    if not isinstance(tree, ast.Call):
        raise ValueError(f"not a call: {call!r}")
    parsed = parse_python_call(tree, call.strip())
    if parsed.error:
        raise ValueError(parsed.error)
    return parsed


# --------------------------------------------------------------- rendering -----------


def render_calls(calls: list[tuple[str, dict[str, Any]]], call_format: str = "qwen") -> str:
    """Render ``(name, kwargs)`` calls as one model turn in ``call_format``."""
    if call_format == "qwen":
        return "\n".join(
            "<tool_call>\n" + json.dumps({"name": n, "arguments": a}, ensure_ascii=False) + "\n</tool_call>"
            for n, a in calls
        )
    if call_format == "python":
        return "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={v!r}" for k, v in a.items()) + ")" for n, a in calls) + "]"
    raise ValueError(f"unknown call format {call_format!r}")
