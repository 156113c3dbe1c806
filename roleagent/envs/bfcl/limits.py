"""Resource bounds of one BFCL tool call (rules 5-8 of ``executor.py``).

What a model writes cannot stall the worker or grow without limit:

* ``cost_problem``: arguments that set the cost of a single C-level operation (MathAPI's
  ``precision``, an integer ``power``'s result size, ``round_number``'s
  ``decimal_places``) are refused before the call; Python checks signals only between
  bytecodes, so no deadline could interrupt such a call;
* ``CALL_CPU_SECONDS``: the CPU-time deadline of a call and the stringification of its
  result (``roleagent.envs.safety.cpu_deadline``);
* ``state_size`` against ``MAX_STATE_ITEMS`` / ``MAX_STATE_CHARS``: a call that leaves
  its backend's state past either bound is undone (five ``cp`` calls can otherwise double
  a file system each time);
* ``numeric_contexts``: ``decimal``'s precision and ``mpmath``'s ``dps``, which the
  backends set globally, are restored after every call.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: CPU seconds one tool call (with the stringification of its result) may use.
CALL_CPU_SECONDS = 5.0
#: A backend state past either bound after a call undoes the call. The largest
#: initial states of the 800 entries have at most 277 entries and 74,568 characters
#: (``state_size``).
MAX_STATE_ITEMS = 50_000
MAX_STATE_CHARS = 4_000_000
#: Largest ``precision`` (digits) for MathAPI, largest integer ``power`` result (bits),
#: largest ``|decimal_places|``. The ground truth uses at most a few digits.
MAX_PRECISION = 10_000
MAX_POWER_BITS = 1_000_000
MAX_DECIMAL_PLACES = 10_000


def cost_problem(name: str, kwargs: dict[str, Any]) -> str | None:
    """Why a call's arguments would make one uninterruptible C-level operation too costly
    (rule 5), or None. E.g. ``power(base=10, exponent=10**7)`` (a 33-million-bit integer):
    ``"power: the integer result would have about 30000001 bits (limit 1000000)"``."""
    if name in ("square_root", "logarithm"):
        precision = kwargs.get("precision")
        if isinstance(precision, int) and abs(precision) > MAX_PRECISION:
            return f"{name}: precision {precision} exceeds the limit of {MAX_PRECISION} digits"
    if name == "round_number":
        places = kwargs.get("decimal_places")
        if isinstance(places, int) and abs(places) > MAX_DECIMAL_PLACES:
            return f"round_number: decimal_places {places} exceeds the limit of {MAX_DECIMAL_PLACES}"
    if name == "power":
        base, exponent = kwargs.get("base"), kwargs.get("exponent")
        if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
            bits = exponent * (abs(base).bit_length() - 1) + 1  # lower bound of the size
            if bits > MAX_POWER_BITS:
                return f"power: the integer result would have about {bits} bits (limit {MAX_POWER_BITS})"
    return None


def state_size(obj: Any, max_items: int = MAX_STATE_ITEMS, max_chars: int = MAX_STATE_CHARS) -> tuple[int, int]:
    """(entries, characters) of the *logical* state of ``obj``: what a walk over every
    path enumerates (GorillaFileSystem's ``find``). Containers and objects' ``__dict__``
    are walked; an object reached again through a container is walked again (bfcl's
    ``cp`` shares the children of a copied directory, so paths multiply while memory
    does not), an object reached again through an attribute (a ``parent`` link) is not,
    and a string counts once per object level above it (a path repeats its ancestors'
    names). Stops once a bound is passed, so the walk is bounded. E.g. for
    ``{"a": ["xy", "z"]}``: the dict entry, the list and its two items are 4 entries,
    ``a``, ``xy`` and ``z`` are 4 characters."""
    items = chars = 0
    seen: set[int] = set()
    stack: list[tuple[Any, int, bool]] = [(obj, 1, False)]  # value, object level, via attribute
    while stack and items <= max_items and chars <= max_chars:
        value, level, via_attribute = stack.pop()
        if isinstance(value, (str, bytes)):
            chars += len(value) * level
        elif isinstance(value, dict):
            items += len(value)
            stack.extend((k, level, False) for k in value)
            stack.extend((v, level, False) for v in value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            items += len(value)
            stack.extend((v, level, False) for v in value)
        elif hasattr(value, "__dict__") and not callable(value):
            if via_attribute and id(value) in seen:
                continue  # a parent link or another alias of an object already walked
            seen.add(id(value))
            items += 1
            stack.extend((attr, level + 1, True) for attr in vars(value).values())
    return items, chars


@contextmanager
def numeric_contexts() -> Iterator[None]:
    """Restore ``decimal``'s precision and ``mpmath``'s ``dps`` after a call (rule 8)."""
    import mpmath  # noqa: PLC0415 - a dependency of bfcl_eval's MathAPI

    prec, dps = decimal.getcontext().prec, mpmath.mp.dps
    try:
        yield
    finally:
        decimal.getcontext().prec, mpmath.mp.dps = prec, dps
