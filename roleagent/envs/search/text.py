"""Pure text functions of the search-QA environment: answer normalisation and matching
(Search-R1's evaluation, Jin et al., 2025, arXiv 2503.09516), action parsing (Search-R1's
tags and the JSON tool call ASL's agents write, Sun et al., 2025, arXiv 2510.14253, whose
tool is named ``retrieve``: an alias of ``search`` here) and the ``<information>`` block
of retrieved passages.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass

#: Search-R1's reply to an output with neither a complete ``<search>`` nor ``<answer>`` block.
INVALID_MESSAGE = (
    "My previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again."
)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_OPEN = re.compile(r"<(search|answer|tool_call)>")
#: Tool-call names → action kinds: ``retrieve`` is ASL's name for the search tool.
TOOL_NAMES = {"search": "search", "retrieve": "search", "answer": "answer"}


def normalize_answer(text: str) -> str:
    """Search-R1's (and SQuAD's) answer normalisation: lowercase, drop ASCII punctuation,
    drop the articles a/an/the, collapse whitespace.

    >>> normalize_answer("  The Transmission-Control  Protocol! ")
    'transmissioncontrol protocol'
    """
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: list[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer (Search-R1's EM).

    >>> exact_match("the Iron", ["iron", "Fe"]), exact_match("iron ore", ["iron"])
    (1.0, 0.0)
    """
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


def substring_match(prediction: str, answers: list[str]) -> float:
    """1.0 when a normalised gold answer is a substring of the normalised prediction
    (Search-R1's ``subem_check``).

    >>> substring_match("it is iron ore", ["Iron"]), substring_match("ir", ["iron"])
    (1.0, 0.0)
    """
    pred = normalize_answer(prediction)
    return float(any(normalize_answer(a) in pred for a in answers))


@dataclass(frozen=True)
class Action:
    kind: str  # "search", "answer" or "invalid"
    content: str = ""
    form: str = ""  # "tag" (<search>...</search>) or "tool_call" (JSON)


def parse_action(text: str) -> Action:
    """The first complete action in a generation, as Search-R1's
    ``re.search(r"<(search|answer)>(.*?)</\\1>", text, re.S)`` finds it, plus the tool-call
    form ``<tool_call>{"name": "search", "arguments": {"query": ...}}</tool_call>`` (the
    name ``retrieve``, ASL's tool in Sun et al., 2025, Figures 7-8, is the same search; also
    ``"answer"`` with ``{"answer": ...}``). Linear in the text: the earliest opening tag
    whose closing tag follows it wins.

    >>> parse_action("<think>x</think><search> capital of France </search>")
    Action(kind='search', content='capital of France', form='tag')
    >>> parse_action('<tool_call>{"name": "search", "arguments": {"query": "iron"}}</tool_call>')
    Action(kind='search', content='iron', form='tool_call')
    >>> parse_action('<tool_call>{"name": "retrieve", "arguments": {"query": "iron"}}</tool_call>')
    Action(kind='search', content='iron', form='tool_call')
    >>> parse_action("<answer>Paris").kind
    'invalid'
    """
    last_close = {tag: text.rfind(f"</{tag}>") for tag in ("search", "answer", "tool_call")}
    for match in _OPEN.finditer(text):
        tag = match.group(1)
        if last_close[tag] < match.end():
            continue
        content = text[match.end() : text.find(f"</{tag}>", match.end())].strip()
        if tag != "tool_call":
            return Action(tag, content, "tag")
        return _tool_call(content)
    return Action("invalid")


def _tool_call(body: str) -> Action:
    """A JSON tool call; anything but a well-formed search/answer call is invalid."""
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):
        return Action("invalid", form="tool_call")
    if not isinstance(call, dict):
        return Action("invalid", form="tool_call")
    args = call.get("arguments", call.get("parameters"))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            args = None
    kind = TOOL_NAMES.get(call.get("name")) if isinstance(call.get("name"), str) else None
    key = {"search": "query", "answer": "answer"}.get(kind)
    value = args.get(key) if isinstance(args, dict) and key else None
    if not isinstance(value, str) or not value.strip():
        return Action("invalid", form="tool_call")
    return Action(kind, value.strip(), "tool_call")


def passages_text(results: list[dict], max_passage_chars: int) -> str:
    """Search-R1's ``_passages2string``: one ``Doc i(Title: t) text`` line per passage,
    whose ``contents`` is the title line then the text; each passage cut to
    ``max_passage_chars``.

    >>> passages_text([{"document": {"id": "1", "contents": '"Iron"\\nSymbol: Fe.'}, "score": 2.0}], 100)
    'Doc 1(Title: "Iron") Symbol: Fe.'
    """
    lines = []
    for i, item in enumerate(results, 1):
        title, _, body = str(item["document"]["contents"]).partition("\n")
        if len(body) > max_passage_chars:
            body = body[: max_passage_chars - 3].rstrip() + "..."
        lines.append(f"Doc {i}(Title: {title}) {body}")
    return "\n".join(lines)


def information(results: list[dict], max_passage_chars: int) -> str:
    """The observation after a search: the passages inside ``<information>`` tags."""
    return f"<information>{passages_text(results, max_passage_chars).strip()}</information>"


def untagged(observation: str) -> str:
    """``observation`` with its ``<information>`` tags replaced by spaces, so its first and
    last words stay words once punctuation is dropped (:func:`normalize_answer` would join
    "… number: 4.</information>" into "4information").

    >>> normalize_answer(untagged("<information>Atomic number: 4.</information>"))
    'atomic number 4'
    """
    return re.sub(r"</?information>", " ", observation)
