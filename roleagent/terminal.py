"""Model, environment and server text shown in a terminal, made printable.

A rollout's observation or a model's output can hold terminal control sequences (``ESC]0;``
retitles the window, ``ESC[2J`` clears it, a bidirectional override reorders what follows),
and a lone surrogate cannot be printed at all. :func:`printable` is the one function the
command line passes such text through before printing it.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, the bidirectional controls, the line/paragraph separators and
# lone surrogates; newline and tab are kept where they structure the output (``lines``)
_CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
_MULTILINE = re.compile(f"[{_CONTROL}]")
_ONE_LINE = re.compile(f"[\t\n{_CONTROL}]")


def _escape(match: re.Match) -> str:
    char = match.group()
    return {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


def printable(text: object, *, lines: bool = True) -> str:
    """``str(text)`` with every control character shown as its escape (``\\x1b``,
    ``\\u202e``); newlines and tabs are kept when ``lines``, escaped otherwise.

    >>> printable("\\x1b]0;PWNED\\x07\\x1b[2J red\\nnext")
    '\\\\x1b]0;PWNED\\\\x07\\\\x1b[2J red\\nnext'
    >>> printable("a\\tb\\nc", lines=False)
    'a\\\\tb\\\\nc'
    """
    return (_MULTILINE if lines else _ONE_LINE).sub(_escape, str(text))


def one_line(error: object) -> str:
    """An error's message on one line, its control characters escaped (it may quote a file or a server)."""
    return printable(" ".join(str(error).split()), lines=False)
