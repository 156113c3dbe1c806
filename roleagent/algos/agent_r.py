"""Agent-R (Yuan et al., 2025, "Agent-R: Training Language Model Agents to Reflect via
Iterative Self-Training", arXiv 2501.11425), the pure parts: UCT, the α schedule, which
leaf paths pair up, the judge's verdict, the transition point and the revision splice.

A revision trajectory (paper Eq. 3) is a bad path up to the first step the actor itself
judges bad, a revision thought, then the good path's continuation::

    τ^r = (τ^i, a^b_{t+1}, o^b_{t+1}, …, a^b_{t'}, o^b_{t'}, rs, a^g_{t+1}, o^g_{t+1}, …, a^g_{T_g})

where τ^i is the prefix both paths share (t turns) and t' ≥ t+1 the transition point. The
loss covers only rs and the good continuation (the authors' released converter drops this
mask, so their bad turns are trained; we keep it).

Pairing (the authors' ``path_collection.py``): a pair (good, bad) of leaf paths of one tree
qualifies when ``value(good) − value(bad) > β`` and ``value(good) ≥ α``. Their code reads
β and α from the environment as strings and compares them with floats (a TypeError in
Python 3); here both are floats. Their test is ``value(good) > α``, which with the paper's
α = 1.0 in iteration 3 admits no path at all (values are at most 1); we use ``≥`` so that
α = 1.0 keeps exactly the optimal trajectories, as the paper describes. The paper's own
Eq. 4 (``r(τ^b) < β < r(τ^g)``) is a different rule; see ``docs/agent_r.md``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

#: The paper's Table 5: one is drawn per revision trajectory.
REVISION_THOUGHTS = (
    "I realize my approach was flawed. I need to revise it.",
    "I took the wrong actions. I need to identify the right path.",
    "My actions were incorrect. I must adjust my strategy.",
    "I see an error in my actions. I need to fix it.",
    "My judgment was incorrect. I need to rethink it.",
    "I overlooked something important. I need to address it.",
    "I recognize my mistake. Let's find a better solution.",
    "I recognize my failure. I need to learn and move forward.",
    "My decision was wrong. I should reevaluate.",
    "I made an error. I must determine how to correct it.",
)

#: α per self-training iteration (paper §4: 0.5, 0.7, then 1.0); later iterations keep the last.
ALPHA_SCHEDULE = (0.5, 0.7, 1.0)

VERDICTS = ("good", "bad", "uncertain")

Turn = tuple[str, str]  # (assistant text, the observation that followed it)

#: The last "Judgment:" (or "Judgement:") label of a line, bold or not, and what follows it.
_JUDGEMENT = re.compile(r".*judg(?:e)?ment[*_\s]*:(.*)$", re.IGNORECASE)
#: The verdict word first (after brackets, bold markers, quotes), then anything but an alternative.
_VERDICT = re.compile(r"[\s*_<>\"'`\[\]()]*(good|bad|uncertain)\b(.*)$", re.IGNORECASE)
_ALTERNATIVE = re.compile(r"[\s*_<>\"'`\[\]()]*(?:/|\||or\b|and\b|nor\b)", re.IGNORECASE)


def uct(value_sum: float, visits: int, parent_visits: int, c: float = 0.25) -> float:
    """UCT score (paper Eq. 5): ``Q(s) + c · sqrt(ln N_p(s) / N(s))`` with ``Q = value_sum / N``;
    an unvisited node scores +inf (expanded first).

    Example: value_sum 1.0, visits 2, parent visits 8, c 0.25 →
    0.5 + 0.25 · sqrt(ln 8 / 2) = 0.5 + 0.25 · 1.01966 = 0.75492.
    """
    if visits <= 0:
        return math.inf
    if parent_visits < 1:
        raise ValueError(f"a visited node's parent has at least one visit, got {parent_visits}")
    return value_sum / visits + c * math.sqrt(math.log(parent_visits) / visits)


def alpha_for_iteration(iteration: int, schedule: Sequence[float] = ALPHA_SCHEDULE) -> float:
    """α of self-training iteration ``iteration`` (0-based); past the schedule, its last value.

    Example: iterations 0, 1, 2, 5 → 0.5, 0.7, 1.0, 1.0.
    """
    if iteration < 0 or not schedule:
        raise ValueError("iteration must be >= 0 and the schedule non-empty")
    return float(schedule[min(iteration, len(schedule) - 1)])


def revision_pairs(values: Sequence[float], *, alpha: float, beta: float) -> list[tuple[int, int]]:
    """Index pairs ``(good, bad)`` of leaf paths with ``values[good] − values[bad] > β`` and
    ``values[good] ≥ α``, the best good path first, then the worst bad path first.

    Example: values [1.0, 0.0, 0.6], α 0.5, β 0.2 → [(0, 1), (0, 2), (2, 1)];
    with α 0.7 → [(0, 1), (0, 2)].
    """
    alpha, beta = float(alpha), float(beta)
    order = sorted(range(len(values)), key=lambda i: (-float(values[i]), i))
    pairs = []
    for g in order:
        if float(values[g]) < alpha:
            continue
        for b in reversed(order):
            if b != g and float(values[g]) - float(values[b]) > beta:
                pairs.append((g, b))
    return pairs


def parse_judgement(text: str) -> str | None:
    """The verdict of a judge's answer: ``"good"``, ``"bad"`` or ``"uncertain"`` from its last
    ``Judgment:`` (or ``Judgement:``) line, or None when that line gives no verdict.

    The verdict is the first word after the label, in any case, give or take brackets,
    bold markers and quotes; what follows it (a full stop, ", because …") is ignored unless
    it offers an alternative ("Good or Bad", "Good/Bad": the prompt's template echoed). So
    "Not bad" and "badly chosen" are no verdict (the authors' code takes any answer without
    "good"/"uncertain" as Bad). Within a line the last label counts, as in the paper's
    Table 8 answers ("… Therefore, Judgment: Bad").

    Examples: "The key is taken.\\nJudgment: Good" → "good"; "Judgement: <Bad>." → "bad";
    "Judgment: Bad, because the key is lost." → "bad"; "**Judgment**: **Uncertain** (no
    information)" → "uncertain"; "Judgment: not bad" → None; "Judgment: <Good or Bad or
    Uncertain>" → None; "Bad." → None.
    """
    verdict = None
    for line in text.splitlines():
        found = _JUDGEMENT.match(line.strip())
        if found:
            word = _VERDICT.match(found.group(1))
            exact = word is not None and not _ALTERNATIVE.match(word.group(2))
            verdict = word.group(1).lower() if exact else None
    return verdict


def shared_prefix(bad: Sequence[Turn], good: Sequence[Turn]) -> int:
    """Number of leading turns two paths from the same start have in common (equal
    assistant text and observation).

    Example: bad [("a", "1"), ("b", "2")], good [("a", "1"), ("c", "3")] → 1.
    """
    n = 0
    while n < min(len(bad), len(good)) and tuple(bad[n]) == tuple(good[n]):
        n += 1
    return n


def transition_point(verdicts: Sequence[str | None], start: int = 0) -> int:
    """Index of the transition turn t' in a bad path whose turns ``start, start+1, …`` were
    judged ``verdicts``: the first ``"bad"`` one; with none, the last turn (the paper's
    direct revision, t' = T_b). An unparsed answer (None) is no verdict: it never sets t'
    (the caller counts it, ``agent_r/judge_unparsed``).

    Example: start 1, verdicts ["good", None, "bad", "bad"] → 3; ["good", "uncertain"] → 2.
    """
    if not verdicts:
        raise ValueError("no judged turns: a bad path must diverge from the good one")
    for offset, verdict in enumerate(verdicts):
        if verdict == "bad":
            return start + offset
    return start + len(verdicts) - 1


def splice_revision(
    bad: Sequence[Turn], good: Sequence[Turn], transition: int, thought: str, *, ack: str = "OK."
) -> list[dict]:
    """The messages of a revision trajectory (paper Eq. 3), after the task's opening messages.

    ``bad`` and ``good`` are lists of ``(assistant_text, observation_text)`` turns from the
    same task start; ``transition`` (t', 0-based) indexes the last bad turn kept and must
    lie after the shared prefix; ``thought`` is the revision signal's assistant text (in the
    actor's format) and ``ack`` the user's reply to it (the paper's "OK."; Agent-R's data
    stage passes what the rollout answers a turn without an action, ``docs/agent_r.md``).
    Result: the bad turns ``0..t'`` (``loss`` false), the revision thought (``loss`` true)
    and ``ack``, then the good turns after the shared prefix (``loss`` true), each followed
    by its observation except the last (an observation after the last assistant turn trains
    nothing). Every message has ``role``, ``content`` and ``loss``; no observation and no
    bad turn has ``loss`` true.

    Example: bad [("a", "o1"), ("b", "o2"), ("x", "o3")], good [("a", "o1"), ("c", "o4"),
    ("d", "won")], transition 1, thought "T" →
    a(F) o1 b(F) o2 T(T) OK. c(T) o4 d(T).
    """
    start = shared_prefix(bad, good)
    if start >= len(good):
        raise ValueError("the good path has no turn after the shared prefix")
    if not start <= transition < len(bad):
        raise ValueError(f"transition {transition} must index a bad turn after the shared prefix ({start} turns)")
    messages: list[dict] = []
    for action, observation in bad[: transition + 1]:
        messages += [_assistant(action, False), _user(observation)]
    messages += [_assistant(thought, True), _user(ack)]
    continuation = list(good[start:])
    for action, observation in continuation[:-1]:
        messages += [_assistant(action, True), _user(observation)]
    messages.append(_assistant(continuation[-1][0], True))
    return messages


def good_messages(good: Sequence[Turn]) -> list[dict]:
    """A good trajectory's messages after the opening: every assistant turn trained, every
    observation but the last in between. Example: [("a", "o1"), ("b", "won")] → a(T) o1 b(T)."""
    if not good:
        raise ValueError("an empty path has nothing to train")
    messages: list[dict] = []
    for action, observation in good[:-1]:
        messages += [_assistant(action, True), _user(observation)]
    messages.append(_assistant(good[-1][0], True))
    return messages


def loop_count(actions: Sequence[str], length: int) -> int:
    """The most back-to-back repetitions of one ``length``-action sequence in ``actions``
    (1: never repeated), the quantity behind the paper's Figure 4 ("average count of
    repeated action lengths": averaged over test trajectories per length).

    Example: [a, b, a, b, a, b, c] → length 2: 3, length 1: 1; [a, a, a, b] → length 1: 3.
    """
    if length < 1:
        raise ValueError("length must be >= 1")
    best = 1 if len(actions) >= length else 0
    for start in range(len(actions) - length + 1):
        block, count = list(actions[start : start + length]), 1
        while list(actions[start + count * length : start + (count + 1) * length]) == block:
            count += 1
        best = max(best, count)
    return best


def _assistant(content: str, loss: bool) -> dict:
    return {"role": "assistant", "content": content, "loss": loss}


def _user(content: str) -> dict:
    return {"role": "user", "content": content, "loss": False}
