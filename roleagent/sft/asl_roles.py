"""Warm start of Agentic Self-Learning's prompt generator and generative verifier (ASL,
Sun et al., 2025, arXiv 2510.14253, §3.3 and Appendix A, Figures 9-12): supervised
examples built from the labelled question/answer pairs of the environment's TRAINING split,
and the held-out measure of both roles' competence. ASL itself is zero-data at every
level; this warm start is an opt-in deviation (``sft.asl_roles``, ``docs/asl.md``).

Questions follow the search environment's task contract (``task_question``,
``metadata["answers"]``, ``metadata["support"]``: the passages holding the facts, hop by
hop; ``metadata["question_type"]``). Every prompt is the one ``ASLMethod`` gives the role,
built by the same functions (``meta_prompt``, ``role_chat``, ``grm_chat``; the system
prompts with ``asl.system_prompts``), so an example's encoded prompt is the method's token
for token (``tests/test_sft_asl_roles.py``). The roles generate without a stop string, so
a target ends with the end-of-turn token (``eos``). Only the role's reply carries the loss.

**Generator examples** (:func:`generator_examples`), the target being the question's own
pair in the Figures 9-11 output format (no ``<think>``; the system prompt allows it)::

    <question>
    What is the chemical symbol of beryllium?
    </question>
    <answer>
    Be
    </answer>

- round 0 (Figure 9): ``"Please generate a question about {topic}."``, the topic of the
  question's type (:data:`TYPE_TOPICS`, or ``metadata["topic"]``); a question without one
  gives no round-0 example;
- a follow-up (Figure 10 in round 1, Figure 11 later; the two alternate over the
  questions) when another training question is the same question with one reasoning hop
  fewer or more: its supporting passages are this one's minus the last (the flag is
  HARDER: "most students answered it correctly") or plus one (EASIER). Worked example:
  "What is the atomic number of beryllium?" (support ``[beryllium]``, gold "4") is the
  parent of "Which chemical element has an atomic number one less than that of
  beryllium?" (``[beryllium, lithium]``): the prompt names the first question, its answer
  4 and HARDER ("adding one reasoning hop", Figure 11), the target is the second
  question with answer "lithium"; the reverse pair gives an EASIER example.

With ``asl.pg_retrieval`` each prompt opens with search results (``PG_EVIDENCE``): a
round-0 example's are those for the title of the question's last supporting passage (for
the beryllium question, the search for "Beryllium", whose first passage says "Atomic number:
4"), a follow-up's those the method's query returns; an example whose results lack its
answer is left out (:func:`generator_examples`).

**Verifier examples** (:func:`verifier_examples`): per question, two GRM prompts (Figure 12:
the question and a student's answer, and with ``asl.grm_retrieval`` the question's search
results; the GRM sees no gold answer, as in the method) with
the verdict the method parses (``algos.asl.parse_verdict``) as target::

    <answer>
    conclusion: correct
    </answer>

The attempts are real answers: the question's gold answer (its aliases in turn: "reflex
action" for a question whose gold is "reflex"), and the gold answer of another question of
the same type (a plausible entity of the right kind, "Li" for the symbol of beryllium),
else of any type. The label is exact match against the gold answers (Search-R1's
normalisation), so a distractor that happens to equal a gold answer is labelled correct;
a question with no distractor that differs gives no example, so the data stay balanced.

The held-out measure of both roles: ``roleagent.sft.asl_competence``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from roleagent.algos.asl import EASIER, HARDER
from roleagent.envs.search.env import task_answers, task_question
from roleagent.envs.search.text import exact_match, normalize_answer, untagged
from roleagent.methods.asl.prompts import PG_SYSTEM, meta_prompt, role_chat, verdict_target
from roleagent.methods.asl.roles import Evidence, PGEvidence, grm_chat
from roleagent.sft.data import ChatExample
from roleagent.types import Task

#: The round-0 topic (one of ``asl.topics``' defaults) of each question type of the shipped search QA set.
TYPE_TOPICS = {
    "element_symbol": "chemistry",
    "element_number": "chemistry",
    "symbol_element": "chemistry",
    "next_element_symbol": "chemistry",
    "previous_element": "chemistry",
    "abbreviation": "computer science",
    "hypernym": "linguistics",
    "hypernym_of_hypernym": "linguistics",
}


def pair_target(question: str, answer: str) -> str:
    """The generator's reply for a pair (Figures 9-11's output format).

    >>> pair_target("Q?", "A")
    '<question>\\nQ?\\n</question>\\n<answer>\\nA\\n</answer>'
    """
    return f"<question>\n{question}\n</question>\n<answer>\n{answer}\n</answer>"


def topic_of(task: Task) -> str | None:
    """``metadata["topic"]``, else the topic of the question's type, else None."""
    meta = task.metadata or {}
    topic = meta.get("topic") or TYPE_TOPICS.get(str(meta.get("question_type", "")))
    return str(topic) if topic else None


def follow_up_parents(pool: Sequence[Task]) -> dict[str, tuple[Task, str]]:
    """For each question of ``pool`` that is another one with a hop added or removed
    (module docstring), that other question and the flag: ``{child id: (parent, flag)}``.
    HARDER: the child's support is the parent's plus one passage; EASIER: minus its last.
    Among several parents the first in ``pool``'s order is taken."""
    by_support: dict[tuple, list[Task]] = {}
    for task in pool:
        by_support.setdefault(tuple(task.metadata.get("support") or ()), []).append(task)
    out: dict[str, tuple[Task, str]] = {}
    for task in pool:
        support = tuple(task.metadata.get("support") or ())
        if len(support) >= 2 and by_support.get(support[:-1]):
            out[task.id] = (by_support[support[:-1]][0], HARDER)
    for task in pool:
        support = tuple(task.metadata.get("support") or ())
        if task.id in out or not support:
            continue
        longer = [
            t for key, ts in by_support.items() if len(key) == len(support) + 1 and key[:-1] == support for t in ts
        ]
        if longer:
            out[task.id] = (longer[0], EASIER)
    return out


def _example(chat: list[dict], reply: str, meta: dict[str, Any]) -> ChatExample:
    return ChatExample(chat + [{"role": "assistant", "content": reply, "loss": True}], "", meta, eos=True)


def generator_examples(
    tasks: Sequence[Task],
    pool: Sequence[Task],
    *,
    with_system: bool,
    evidence: PGEvidence | None = None,
    titles: Mapping[str, str] | None = None,
) -> list[ChatExample]:
    """The generator's examples of ``tasks`` (module docstring): a round-0 example per
    question with a topic, a follow-up example per question with a parent in ``pool``.
    ``evidence`` (``asl.pg_retrieval``): each prompt opens with the search results the
    method would show, with the query :class:`PGEvidence` makes, except that a round-0
    example searches the title (``titles``: passage id -> title) of the question's last
    supporting passage, which holds its answer, where the method draws a passage; an
    example without that title, whose answer is not in its results, or is in its question,
    is left out."""
    if evidence is not None and titles is None:
        raise ValueError("grounded generator examples need the passages' titles")
    parents = follow_up_parents(pool)
    out = []
    for index, task in enumerate(tasks):
        question, answer = task_question(task), task_answers(task)[0]
        base = {"task": task.id, "split": task.split, "role": "asl_generator", "question": question, "answer": answer}
        items = []
        if (topic := topic_of(task)) is not None:
            items.append(({"topic": topic}, 0, {"prompt": "topic", "topic": topic}))
        if task.id in parents:
            parent, flag = parents[task.id]
            item = {"question": task_question(parent), "answer": task_answers(parent)[0], "flag": flag}
            items.append((item, 1 + index % 2, {"prompt": "follow_up", "parent": parent.id, "flag": flag}))
        for item, round_index, meta in items:
            shown = ""
            if evidence is not None:
                support = [str(s) for s in task.metadata.get("support") or ()]
                title = titles.get(support[-1], "") if support else ""
                if "topic" in item and not title:
                    continue
                shown = evidence.results([title if "topic" in item else evidence.query(item, "")])[0]
                if not contains(shown, answer) or contains(question, answer):
                    continue
                meta = {**meta, "pg_evidence": shown}
            chat = role_chat(PG_SYSTEM, meta_prompt(item, round_index, shown), with_system)
            out.append(_example(chat, pair_target(question, answer), {**base, **meta, "round": round_index}))
    return out


def verifier_examples(
    tasks: Sequence[Task],
    pool: Sequence[Task],
    *,
    with_system: bool,
    seed: int = 0,
    evidence: Evidence | None = None,
    check: bool = False,
) -> list[ChatExample]:
    """The verifier's examples of ``tasks`` (module docstring): per question its gold
    answer (aliases in turn) and another question's gold answer, as the student's answer,
    labelled by exact match; distractors from ``pool``, same type first, seeded.
    ``evidence``: the search results the GRM is shown (``asl.grm_retrieval``), None for none.
    ``check``: the target first states whether the results hold the answer (:func:`evidence_check`)."""
    if check and evidence is None:
        raise ValueError("the verifier's evidence check needs the search results (asl.grm_retrieval)")
    rng = random.Random(f"{seed}/asl_verifier")
    shown = evidence([task_question(t) for t in tasks]) if evidence is not None else [""] * len(tasks)
    by_type: dict[str, list[Task]] = {}
    for task in pool:
        by_type.setdefault(str(task.metadata.get("question_type", "")), []).append(task)
    out = []
    for index, task in enumerate(tasks):
        question, answers = task_question(task), task_answers(task)
        kind = str(task.metadata.get("question_type", ""))
        same = [t for t in by_type.get(kind, []) if t.id != task.id]
        wrong = _distractor(rng.sample(same, len(same)), answers)
        if wrong is None:
            other = [t for t in pool if str(t.metadata.get("question_type", "")) != kind]
            wrong = _distractor(rng.sample(other, len(other)), answers)
        if wrong is None:
            continue
        right = answers[index % len(answers)]
        for attempt, source in ((right, "gold"), (wrong[0], wrong[1])):
            label = int(exact_match(attempt, answers))
            meta = {"task": task.id, "split": task.split, "role": "asl_verifier", "question": question,
                    "attempt": attempt, "source": source, "label": label, "answers": list(answers),
                    "evidence": bool(shown[index]), "attempt_in_evidence": contains(shown[index], attempt)}  # fmt: skip
            chat = grm_chat(question, attempt, with_system, shown[index])
            reply = evidence_check(attempt, meta["attempt_in_evidence"]) if check else ""
            out.append(_example(chat, reply + verdict_target(label), meta))
    return out


def evidence_check(attempt: str, found: bool) -> str:
    """The check a verifier target states before its verdict with ``sft.asl_verifier_check``:
    the student's answer copied, then whether the search results contain it (:func:`contains`,
    as the example's ``meta["attempt_in_evidence"]``). Figure 12 asks the GRM to "think it
    through" before concluding; this is that thought, written from the data.

    >>> evidence_check("La", False)
    "<think>\\nThe student's answer is La. The search results do not contain it.\\n</think>\\n"
    """
    found_text = "contain it" if found else "do not contain it"
    return f"<think>\nThe student's answer is {attempt}. The search results {found_text}.\n</think>\n"


def _distractor(candidates: Sequence[Task], answers: list[str]) -> tuple[str, str] | None:
    """(answer, source id) of the first candidate whose gold answer is not a gold answer here."""
    for candidate in candidates:
        attempt = task_answers(candidate)[0]
        if not exact_match(attempt, answers):
            return attempt, candidate.id
    return None


def contains(text: str, answer: str) -> bool:
    """Whether ``answer``, normalised, occurs as whole words in ``text`` (search results: its
    tags dropped), normalised.

    >>> contains("Beryllium (Be), atomic number 4.", "be"), contains("Berlin", "Be")
    (True, False)
    """
    needle = normalize_answer(answer)
    return bool(needle) and f" {needle} " in f" {normalize_answer(untagged(text))} "
