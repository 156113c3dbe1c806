"""Rule-based failure diagnosis for search QA with the Role-Agent taxonomy (Wang et al.,
2026, arXiv 2606.10917, Table 6, search column: nine modes).

``diagnose_trajectory(trajectory)`` returns, for a failed trajectory,
``{"dominant_type", "labels", "detail", "critical_step", "evidence"}`` (the shape of the
ALFWorld diagnosis that Agent-In-World reads) and ``None`` for a success. It needs no LLM:
it reads the gold answers (``task.metadata["answers"]``, ``"hops"``), the question
(``task.payload["question"]`` or the instruction) and what ``SearchEnv.step`` recorded in
each ``step.info``: ``kind`` (search / answer / invalid), ``query``, ``gold_retrieved``
(a normalised gold answer occurs in the returned passages), ``answer``, ``em``, ``subem``.
The passages are the observations that follow each search. Steps are 0-based.

Rules (each may fire; the step is where it happened):

* ``action_format_error``: an output with no complete action (the rollout's invalid
  output, or the environment's invalid-action / over-the-limit search). Dominant when
  such steps are at least a quarter of the episode.
* ``premature_answer``: answered after fewer searches than the question's hops and
  without a gold answer ever in the results.
* ``partial_answer``: the answer's words are a proper part of a gold answer's, or contain
  one with extra words (normalised; e.g. "transmission control" for "Transmission Control
  Protocol").
* ``information_misinterpretation``: a gold answer was in the results, yet the final
  answer is wrong (or none was given).
* ``repeated_retrieval_query``: a query equal (normalised) to an earlier one.
* ``irrelevant_retrieval_query``: a query sharing no content word with the question or
  with any passage seen before it.
* ``hallucinated_answer``: the answer occurs neither in any passage returned nor in the
  question.
* ``insufficient_retrieval``: no result ever held a gold answer.
* ``wrong_answer``: an answer was given and is wrong (always fires then; the fallback).

Dominant type: the first label present in ``PRIORITY`` (most specific cause first), except
that ``action_format_error`` wins outright at a share of 25% or more.
"""

from __future__ import annotations

from typing import Any

from roleagent.envs.search.text import normalize_answer
from roleagent.types import Trajectory

FAILURE_TAXONOMY: tuple[str, ...] = (
    "wrong_answer",
    "insufficient_retrieval",
    "irrelevant_retrieval_query",
    "repeated_retrieval_query",
    "information_misinterpretation",
    "partial_answer",
    "hallucinated_answer",
    "premature_answer",
    "action_format_error",
)

PRIORITY: tuple[str, ...] = (
    "premature_answer",
    "partial_answer",
    "information_misinterpretation",
    "repeated_retrieval_query",
    "irrelevant_retrieval_query",
    "hallucinated_answer",
    "insufficient_retrieval",
    "action_format_error",
    "wrong_answer",
)

STOP_WORDS = frozenset(
    "what which who whom whose is are was were be of in on at to for by with from as and or it its this that "
    "does do did kind one than stand what's how many much there their".split()
)


def content_words(text: str) -> set[str]:
    """Normalised words of ``text`` minus stop words.

    >>> sorted(content_words("What is the atomic number of Iron?"))
    ['atomic', 'iron', 'number']
    """
    return {w for w in normalize_answer(text).split() if w not in STOP_WORDS}


def is_partial(answer: str, answers: list[str]) -> bool:
    """The answer's words are a proper subset or superset of a gold answer's.

    >>> is_partial("Transmission Control", ["Transmission Control Protocol"]), is_partial("UDP", ["TCP"])
    (True, False)
    """
    words = set(normalize_answer(answer).split())
    golds = [set(normalize_answer(a).split()) for a in answers]
    return bool(words) and any(g and words != g and (words < g or g < words) for g in golds)


def _question(trajectory: Trajectory) -> str:
    task = trajectory.task
    for source, key in ((task.payload, "question"), (task.payload, "instruction"), (task.metadata, "question")):
        if isinstance((source or {}).get(key), str):
            return source[key]
    return trajectory.instruction


def _invalid(step: Any) -> bool:
    info = step.info or {}
    return not step.valid or info.get("invalid") or info.get("action_valid") is False


def diagnose_trajectory(trajectory: Trajectory) -> dict[str, Any] | None:
    """Failure labels of a failed trajectory (None for a success); see the module doc."""
    if trajectory.success:
        return None
    steps = trajectory.steps
    if not steps:
        return _verdict([(0, "insufficient_retrieval", "the agent took no action")], 0.0)
    answers = list(trajectory.task.metadata.get("answers") or [])
    hops = int(trajectory.task.metadata.get("hops") or 1)
    question = _question(trajectory)
    seen = content_words(question)
    passages = [
        steps[t + 1].observation if t + 1 < len(steps) else trajectory.final_observation for t in range(len(steps))
    ]
    events: list[tuple[int, str, str]] = []
    queries: dict[str, int] = {}
    searches, retrieved_at, answer_at = 0, None, None
    for t, step in enumerate(steps):
        info = step.info or {}
        if _invalid(step):
            events.append((t, "action_format_error", f"step {t}: no valid <search> or <answer> action"))
        if info.get("kind") == "search" and "query" in info:
            searches += 1
            query = str(info["query"])
            key = normalize_answer(query)
            if key in queries:
                events.append(
                    (t, "repeated_retrieval_query", f"step {t} repeated the query of step {queries[key]}: {query!r}")
                )
            queries.setdefault(key, t)
            if not content_words(query) & seen:
                events.append(
                    (
                        t,
                        "irrelevant_retrieval_query",
                        f"step {t}: the query {query!r} shares no word with the question or the results so far",
                    )
                )
            seen |= content_words(passages[t] or "")
            if info.get("gold_retrieved") and retrieved_at is None:
                retrieved_at = t
        if info.get("kind") == "answer":
            answer_at = t
    events += _answer_rules(steps, answer_at, answers, question, passages, searches, hops, retrieved_at)
    share = sum(1 for s in steps if _invalid(s)) / len(steps)
    return _verdict(events, share)


def _answer_rules(steps, answer_at, answers, question, passages, searches, hops, retrieved_at) -> list:
    events = []
    if retrieved_at is not None:
        what = (
            f"the answer was given as {steps[answer_at].info.get('answer')!r}"
            if answer_at is not None
            else "no answer was given"
        )
        events.append((answer_at if answer_at is not None else retrieved_at, "information_misinterpretation",
                       f"a gold answer was in the results of step {retrieved_at}, but {what}"))  # fmt: skip
    else:
        events.append((answer_at if answer_at is not None else len(steps) - 1, "insufficient_retrieval",
                       f"no search result held a gold answer ({searches} search(es))"))  # fmt: skip
    if answer_at is None:
        return events
    answer = str(steps[answer_at].info.get("answer", ""))
    if searches < hops and retrieved_at is None:
        events.append(
            (answer_at, "premature_answer", f"answered after {searches} search(es); the question needs {hops}")
        )
    if is_partial(answer, answers):
        events.append((answer_at, "partial_answer", f"{answer!r} is only part of (or more than) the gold answer"))
    evidence = " " + normalize_answer(" ".join(p or "" for p in passages) + " " + question) + " "
    if not is_partial(answer, answers) and f" {normalize_answer(answer)} " not in evidence:
        events.append((answer_at, "hallucinated_answer", f"{answer!r} appears in no passage returned"))
    events.append((answer_at, "wrong_answer", f"the answer {answer!r} does not match {answers[:3]}"))
    return events


def _verdict(events: list[tuple[int, str, str]], format_share: float) -> dict[str, Any]:
    labels = [lab for lab in FAILURE_TAXONOMY if any(e[1] == lab for e in events)]
    if format_share >= 0.25 and "action_format_error" in labels:
        dominant = "action_format_error"
    else:
        dominant = next(lab for lab in PRIORITY if lab in labels)
    first = min((e for e in events if e[1] == dominant), key=lambda e: e[0])
    return {
        "dominant_type": dominant,
        "labels": labels,
        "detail": first[2],
        "critical_step": int(first[0]),
        "evidence": [{"step": s, "label": lab, "detail": d} for s, lab, d in sorted(events)[:20]],
    }
