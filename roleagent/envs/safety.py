"""What crosses the environment boundary is bounded, encodable text.

Model output reaches environments as actions, and environments echo parts of it back
(file names in error messages, message bodies, ...). Three guards keep that echo from
killing or stalling a run; ``roleagent.envs.workers`` applies them to every reply of
every environment, in worker processes and in-process alike:

- ``sanitize``: every string (observation, info values, admissible actions, diagnosis)
  becomes valid UTF-8. A lone surrogate such as the JSON string ``"\\ud800"`` would make
  the tokenizer raise inside the trainer; it is replaced by U+FFFD, while a well-formed
  surrogate pair is joined into its character.
- ``truncate``: an observation longer than the environment's ``max_observation_chars``
  keeps its head and tail around a visible ``[... N characters truncated ...]`` note.
- ``cpu_deadline``: a CPU-time limit (``setitimer(ITIMER_PROF)`` + ``SIGPROF``) that
  raises ``DeadlineExceeded`` in the code it guards. Deadlines nest (the innermost
  earliest one fires). Python checks signals between bytecodes, so a single long C call
  (a huge ``int`` power, ``Decimal.sqrt`` at a million digits) finishes before the
  exception is raised: such calls need argument limits as well (BFCL's executor has them).
  Signals are delivered to the main thread only, so outside the main thread (an
  in-process pool driven from a helper thread) the deadline is not enforced and the
  guarded code runs unbounded; ``deadline_supported()`` says which case applies.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class DeadlineExceeded(BaseException):
    """The guarded code used more CPU time than its deadline allowed. A ``BaseException``
    (like ``KeyboardInterrupt``), so guarded code that catches ``Exception`` to turn
    errors into results (as bfcl's backends do) cannot swallow it."""


# ------------------------------------------------------------------ text ------------


def sanitize_text(text: str) -> str:
    """``text`` as valid UTF-8: lone surrogates become U+FFFD, pairs are joined.

    >>> sanitize_text("a\\ud800b"), sanitize_text("\\ud83d\\ude00") == "\\U0001f600"
    ('a\\ufffdb', True)
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def sanitize(value: Any, _depth: int = 0) -> Any:
    """``sanitize_text`` applied to every string inside ``value`` (dict keys and values,
    lists, tuples, sets, dataclass fields); other values are returned as they are."""
    if isinstance(value, str):
        return sanitize_text(value)
    if _depth > 64:
        return value
    if isinstance(value, dict):
        return {sanitize(k, _depth + 1): sanitize(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [sanitize(v, _depth + 1) for v in value]
        return items if isinstance(value, list) else type(value)(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: sanitize(getattr(value, f.name), _depth + 1) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value


def describe_error(error: BaseException, *, with_type: bool = True, limit: int | None = 500) -> str:
    """``"ValueError: message"`` (or the message alone), at most ``limit`` characters; never
    raises, though ``str()`` of an exception can (its class name is the fallback).

    >>> describe_error(ValueError("bad value"))
    'ValueError: bad value'
    """
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - str() of an exception can itself raise
        return type(error).__name__
    text = f"{type(error).__name__}: {text}" if with_type else text
    return text[:limit] if limit else text


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters plus a note saying how much was cut:
    the first three quarters of the budget from the head, the last quarter from the tail.

    >>> truncate("abcdefghij", 4)
    'abc\\n[... 6 characters truncated ...]\\nj'
    """
    if limit <= 0 or len(text) <= limit:
        return text
    tail = limit // 4
    head = limit - tail
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters truncated ...]\n{text[len(text) - tail :]}"


# ------------------------------------------------------------------ CPU time --------


@dataclasses.dataclass
class Deadline:
    """One ``cpu_deadline`` block: its absolute ``process_time()`` limit, and whether it is
    the limit that fired (so a nested block can tell its own timeout from an outer one)."""

    at: float
    expired: bool = False


_deadlines: list[Deadline] = []  # outermost first


def deadline_supported() -> bool:
    """Whether ``cpu_deadline`` is enforced here (main thread, POSIX ``setitimer``)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _on_sigprof(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    now = time.process_time()
    fired = [d for d in _deadlines if now >= d.at - 1e-3]
    if fired:
        for deadline in fired:
            deadline.expired = True
        signal.setitimer(signal.ITIMER_PROF, 0.05)  # fire again if a bare except swallows it
        raise DeadlineExceeded("CPU time limit exceeded")
    _arm()  # a stale tick (an inner deadline already left): wait for the real one


def _arm() -> None:
    if _deadlines:
        remaining = min(d.at for d in _deadlines) - time.process_time()
        signal.setitimer(signal.ITIMER_PROF, max(remaining, 1e-4))
    else:
        signal.setitimer(signal.ITIMER_PROF, 0)


@contextmanager
def cpu_deadline(seconds: float | None) -> Iterator[Deadline]:
    """Raise ``DeadlineExceeded`` inside the block once it has used ``seconds`` of CPU
    time (the whole process's user + system time, measured by ``ITIMER_PROF``).
    ``None`` or ``<= 0``, or a thread other than the main one: no limit. The yielded
    :class:`Deadline` says whether this block's own limit fired (``expired``); when an
    enclosing block's limit fired instead, a handler of the inner block must re-raise."""
    deadline = Deadline(at=time.process_time() + (seconds or 0.0))
    if not seconds or seconds <= 0 or not deadline_supported():
        yield deadline
        return
    depth = len(_deadlines)
    previous = signal.signal(signal.SIGPROF, _on_sigprof) if depth == 0 else None
    _deadlines.append(deadline)
    try:
        _arm()
        yield deadline
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)  # no tick between here and the cleanup
        del _deadlines[depth:]
        _arm()  # an enclosing block's limit that already passed fires right away
        if depth == 0:
            signal.signal(signal.SIGPROF, previous if previous is not None else signal.SIG_DFL)
