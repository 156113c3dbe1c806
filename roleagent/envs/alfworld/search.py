"""A searching expert: the planner, except that it must find what it needs first.

ALFWorld's planner (fast-downward over the full PDDL state) walks straight to the hidden
object: its first "go to" is chosen from information the agent never sees, so a policy
trained on it learns a guess, never a search (measured: after SFT on planner episodes the
embedded model oscillates between two receptacles). ``AlfWorldEnv(expert="search")``
uses this module instead: while the object of the plan's next ``take``/``use`` command
has not appeared in any observation of the episode, the expert searches — it opens the
closed receptacle it stands at, else goes to the first receptacle, in alphabetical order
(the order of the admissible list), that it has not visited — and it follows the planner
from the moment the object has been seen. Every choice is a function of what the agent
has observed, so it can be imitated.
"""

from __future__ import annotations

import re

_TARGET = re.compile(r"^(?:take (.+?) from .+|use (.+))$")


def plan_target(plan: list[str]) -> str | None:
    """The object the plan's next ``take``/``use`` command acts on, or None.

    >>> plan_target(["go to shelf 2", "take creditcard 1 from shelf 2", "go to sofa 1"])
    'creditcard 1'
    >>> plan_target(["go to dresser 1", "use desklamp 1"])
    'desklamp 1'
    >>> plan_target(["move book 1 to desk 1"]) is None
    True
    """
    for command in plan:
        match = _TARGET.match(command)
        if match:
            return match.group(1) or match.group(2)
    return None


def seen(name: str, text: str) -> bool:
    """``name`` (e.g. "pen 1") occurs in ``text`` as a whole name, not as "pen 10".

    >>> seen("pen 1", "you see a pen 10, and a pen 1.")
    True
    >>> seen("pen 1", "you see a pen 10.")
    False
    """
    return re.search(rf"(?<![\w-]){re.escape(name)}(?!\d)", text) is not None


def search_action(plan: list[str], observed: str, visited: set[str], current: str, admissible: list[str]) -> str | None:
    """The searching expert's command, or None to follow the plan.

    ``observed`` is every observation of the episode so far, ``visited`` the receptacles
    gone to, ``current`` the latest observation.

    >>> adm = ["go to cabinet 1", "go to shelf 1", "go to sofa 1", "look"]
    >>> plan = ["go to shelf 1", "take key 1 from shelf 1"]
    >>> search_action(plan, "you see a cabinet 1, a shelf 1, and a sofa 1.", set(), "", adm)
    'go to cabinet 1'
    >>> search_action(plan, "...", {"cabinet 1"}, "The cabinet 1 is closed.", adm + ["open cabinet 1"])
    'open cabinet 1'
    >>> search_action(plan, "...", {"cabinet 1"}, "In it, you see nothing.", adm)
    'go to shelf 1'
    >>> search_action(plan, "On the shelf 1, you see a key 1.", {"cabinet 1", "shelf 1"}, "", adm) is None
    True
    """
    target = plan_target(plan)
    if target is None or seen(target, observed):
        return None
    closed = re.search(r"The (.+?) is closed\.", current)
    if closed and f"open {closed.group(1)}" in admissible:
        return f"open {closed.group(1)}"
    places = sorted(c[len("go to ") :] for c in admissible if c.startswith("go to "))
    fresh = [p for p in places if p not in visited]
    return f"go to {fresh[0]}" if fresh else None
