"""ALFWorld command and feedback text: parse a command, name an entity's type, read the
contents a feedback lists. Used by the rule-based failure diagnosis (``diagnosis.py``)."""

from __future__ import annotations

import re

NOTHING = "Nothing happens."

_COMMANDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("goto", re.compile(r"^go to (?P<r>.+)$")),
    ("open", re.compile(r"^open (?P<r>.+)$")),
    ("close", re.compile(r"^close (?P<r>.+)$")),
    ("take", re.compile(r"^take (?P<o>.+?) from (?P<r>.+)$")),
    ("put", re.compile(r"^(?:move|put) (?P<o>.+?) (?:to|in/on|in|on) (?P<r>.+)$")),
    ("heat", re.compile(r"^heat (?P<o>.+?) with (?P<r>.+)$")),
    ("cool", re.compile(r"^cool (?P<o>.+?) with (?P<r>.+)$")),
    ("clean", re.compile(r"^clean (?P<o>.+?) with (?P<r>.+)$")),
    ("slice", re.compile(r"^slice (?P<o>.+?) with (?P<r>.+)$")),
    ("use", re.compile(r"^use (?P<o>.+)$")),
    ("examine", re.compile(r"^examine (?P<o>.+)$")),
    ("look", re.compile(r"^look$")),
    ("inventory", re.compile(r"^inventory$")),
    ("help", re.compile(r"^help$")),
)


def parse_command(text: str | None) -> tuple[str, str | None, str | None] | None:
    """ALFWorld command -> (verb, object, receptacle); None when not a command form."""
    if not text:
        return None
    text = " ".join(text.strip().lower().split())
    for verb, pattern in _COMMANDS:
        m = pattern.match(text)
        if m:
            groups = m.groupdict()
            return verb, groups.get("o"), groups.get("r")
    return None


def entity_type(name: str | None) -> str:
    """ "apple 1" -> "apple"; "sinkbasin 2" -> "sinkbasin"."""
    if not name:
        return ""
    text = name.strip().lower()
    # Strip a trailing number in linear time (re.sub(r"\s*\d+$", ...) rescans every
    # suffix of a long digit run in a model-written name: quadratic).
    end = len(text)
    while end and text[end - 1].isdecimal():
        end -= 1
    return text if end == len(text) else text[:end].rstrip()


_OPEN = re.compile(r"The (?P<r>[\w ]+?) is open\. In it, you see (?P<items>[^.]*)\.")
_ROOM = re.compile(r"Looking quickly around you, you see (?P<items>[^.]*)\.")


def _items(text: str) -> list[str]:
    text = text.strip()
    if not text or text == "nothing":
        return []
    parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", text)
    out = []
    for part in parts:
        part = part.strip()
        part = re.sub(r"^(a|an|some|the)\s+", "", part)
        if part:
            out.append(part)
    return out


def visible_contents(feedback: str) -> dict[str, list[str]]:
    """Receptacle -> entities listed in a feedback text ("On the desk 1, you see ...")."""
    out: dict[str, list[str]] = {}
    m = _OPEN.search(feedback)
    if m:
        out[m.group("r").strip().lower()] = _items(m.group("items"))
    for m in re.finditer(r"On the (?P<r>[\w ]+?), you see (?P<items>[^.]*)\.", feedback):
        out[m.group("r").strip().lower()] = _items(m.group("items"))
    return out


def room_receptacles(observation: str) -> list[str]:
    m = _ROOM.search(observation)
    return _items(m.group("items")) if m else []
