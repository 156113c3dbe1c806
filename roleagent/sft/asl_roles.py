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

**Competence** on held-out questions (training split, never SFT data):

- generator (:func:`generator_competence`, generations sampled as the PG phase samples):
  ``parsed`` = share of generations ``parse_pair`` reads (one non-empty ``<question>`` and
  ``<answer>``); ``findable`` = share of generations that parsed AND whose answer is in
  the corpus next to the question: the answer, normalised, occurs as whole words in one of
  the top-k passages the retriever returns for the question followed by the answer, and
  not in the question itself (an invented answer, absent from the corpus, fails);
  ``answer_retrieved``: the same for the question alone (one search of the question finds
  the answer; the gold training pairs reach ≈ 0.9 for one-hop and ≈ 0.15 for two-hop
  questions); ``copied``: share of parsed questions equal (normalised) to an SFT question;
  ``known``: share of parsed questions that are questions of the environment's splits
  (:func:`gold_answers`), and ``known_gold``: of those, the share answered with a gold
  answer. ``findable`` is co-occurrence, not correctness: a query holding the answer
  retrieves passages holding it, so "What is the atomic number of iridium?" with "31" is
  findable (gallium's passage), and ``known_gold`` says it is wrong (77);
  ``truncated``: generations cut at ``asl.pg_max_new_tokens``.
- verifier (:func:`verifier_competence`, greedy as the method's ``grm_eval_accuracy``):
  ``accuracy`` (an unparsed verdict is wrong), ``accuracy_on_correct`` and
  ``accuracy_on_wrong`` (a constant verdict scores 1 on one and 0 on the other),
  ``unparsed``, ``truncated``.

Worked example (:func:`verifier_competence`): labels (1, 0, 0) and replies "conclusion:
correct", "conclusion: correct", "no idea" → accuracy 1/3, on correct 1.0, on wrong 0.0,
unparsed 1/3.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from roleagent.algos.asl import EASIER, HARDER, parse_verdict
from roleagent.engine.base import SamplingParams
from roleagent.envs.search.env import task_answers, task_question
from roleagent.envs.search.text import exact_match, normalize_answer
from roleagent.methods.asl.prompts import PG_SYSTEM, meta_prompt, parse_pair, role_chat, verdict_target
from roleagent.methods.asl.roles import Evidence, grm_chat
from roleagent.sft.data import ChatExample, encode_example
from roleagent.sft.predictor import Competence
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


def generator_examples(tasks: Sequence[Task], pool: Sequence[Task], *, with_system: bool) -> list[ChatExample]:
    """The generator's examples of ``tasks`` (module docstring): a round-0 example per
    question with a topic, a follow-up example per question with a parent in ``pool``."""
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
            chat = role_chat(PG_SYSTEM, meta_prompt(item, round_index), with_system)
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


# ------------------------------------------------------------------ competence -------


def gold_answers(env) -> dict[str, set[str]]:
    """Every question of ``env``'s splits (normalised) with its normalised gold answers: the
    ground truth for a generated pair that asks one of them."""
    out: dict[str, set[str]] = {}
    for split in env.splits():
        for task in env.tasks(split):
            out.setdefault(normalize_answer(task_question(task)), set()).update(
                map(normalize_answer, task_answers(task))
            )
    return out


def contains(text: str, answer: str) -> bool:
    """Whether ``answer``, normalised, occurs as whole words in ``text``, normalised.

    >>> contains("Beryllium (Be), atomic number 4.", "be"), contains("Berlin", "Be")
    (True, False)
    """
    needle = normalize_answer(answer)
    return bool(needle) and f" {needle} " in f" {normalize_answer(text)} "


Retrieve = Callable[[list[str], int], list[list[dict[str, Any]]]]


def generator_competence(
    texts: Sequence[str],
    truncated: Sequence[bool],
    retrieve: Retrieve | None,
    *,
    topk: int = 3,
    seen_questions: Sequence[str] = (),
    gold: Mapping[str, Collection[str]] | None = None,
) -> Competence:
    """The generator's held-out competence (module docstring) from its generations;
    ``retrieve`` is the environment's retriever (``retriever.retrieve``; None: no
    ``findable`` and ``answer_retrieved``, NaN); ``seen_questions`` the SFT questions;
    ``gold``: the environment's questions (normalised) and their gold answers
    (:func:`gold_answers`; None: no ``known`` and ``known_gold``, NaN)."""
    pairs = [parse_pair(text) for text in texts]
    parsed = [p for p in pairs if p is not None]
    seen = {normalize_answer(q) for q in seen_questions}
    known = [gold.get(normalize_answer(q)) if gold is not None else None for q, _ in parsed]
    grounded: list[bool] = []
    first: list[bool] = []
    if retrieve is not None and parsed:
        for queries, into in (([f"{q} {a}" for q, a in parsed], grounded), ([q for q, _ in parsed], first)):
            for (q, a), hits in zip(parsed, retrieve(queries, topk), strict=True):
                passages = " ".join(str(h["document"].get("contents", "")) for h in hits[:topk])
                into.append(contains(passages, a) and not contains(q, a))
    rows, j = [], 0
    for text, pair, cut in zip(texts, pairs, truncated, strict=True):
        row: dict[str, Any] = {"text": text, "parsed": pair is not None, "truncated": bool(cut)}
        if pair is not None:
            row.update(question=pair[0], answer=pair[1], copied=normalize_answer(pair[0]) in seen)
            if grounded:
                row.update(findable=grounded[j], answer_retrieved=first[j])
            if known[j] is not None:
                row.update(known=True, gold=normalize_answer(pair[1]) in known[j])
            j += 1
        rows.append(row)
    n = max(len(rows), 1)
    n_known = sum(a is not None for a in known)
    nan = float("nan")
    metrics = {
        "asl_generator/parsed": len(parsed) / n if rows else nan,
        "asl_generator/findable": sum(grounded) / n if retrieve is not None and rows else nan,
        "asl_generator/answer_retrieved": sum(first) / n if retrieve is not None and rows else nan,
        "asl_generator/copied": sum(r["copied"] for r in rows if r["parsed"]) / len(parsed) if parsed else nan,
        "asl_generator/known": n_known / len(parsed) if gold is not None and parsed else nan,
        "asl_generator/known_gold": sum(r.get("gold", False) for r in rows) / n_known if n_known else nan,
        "asl_generator/truncated": sum(map(bool, truncated)) / n,
        "asl_generator/generations": len(rows),
    }
    return Competence(metrics, rows)


def verifier_competence(texts: Sequence[str], labels: Sequence[int], truncated: Sequence[bool]) -> Competence:
    """The verifier's held-out competence (module docstring) from its replies."""
    verdicts = [parse_verdict(text) for text in texts]
    rows = [
        {"text": t, "label": int(label), "verdict": v, "right": v == label, "truncated": bool(c)}
        for t, label, v, c in zip(texts, labels, verdicts, truncated, strict=True)
    ]

    def share(selected: list[dict], key: str) -> float:
        return sum(bool(r[key]) for r in selected) / len(selected) if selected else float("nan")

    metrics = {
        "asl_verifier/accuracy": share(rows, "right"),
        "asl_verifier/accuracy_on_correct": share([r for r in rows if r["label"] == 1], "right"),
        "asl_verifier/accuracy_on_wrong": share([r for r in rows if r["label"] == 0], "right"),
        "asl_verifier/unparsed": sum(v is None for v in verdicts) / max(len(rows), 1),
        "asl_verifier/truncated": share(rows, "truncated"),
        "asl_verifier/examples": len(rows),
    }
    return Competence(metrics, rows)


def generate(
    engine, examples: Sequence[ChatExample], *, max_new_tokens: int, temperature: float, top_p: float = 1.0,
    batch_size: int = 16, replies: list[list[int]] | None = None,
) -> tuple[list[str], list[bool]]:  # fmt: skip
    """``engine``'s replies to the examples' prompts (as encoded for training: the method's
    prompts), no stop string, and whether each was cut at ``max_new_tokens``; ``replies``:
    the token sequences each reply must be one of (constrained decoding), None for free text."""
    sampling = SamplingParams(max_new_tokens, temperature, top_p=top_p)
    texts, truncated = [], []
    for start in range(0, len(examples), batch_size):
        prompts = [encode_example(engine, e).prompts[-1] for e in examples[start : start + batch_size]]
        for generation in engine.generate(prompts, sampling, None if replies is None else [replies] * len(prompts)):
            texts.append(generation.text)
            truncated.append(bool(generation.truncated))
    return texts, truncated


def summary(label: str, generator: Competence | None, verifier: Competence | None) -> str:
    """One line for the run's log."""
    parts = []
    if generator is not None:
        g = generator.metrics
        gold = g.get("asl_generator/known_gold", float("nan"))
        parts.append(
            f"generator parsed {100 * g['asl_generator/parsed']:.1f}%, findable "
            f"{100 * g['asl_generator/findable']:.1f}% of {g['asl_generator/generations']} held-out examples"
            + (f" (answers gold on {100 * gold:.1f}% of the questions the environment asks)" if gold == gold else "")
        )
    if verifier is not None:
        v = verifier.metrics
        parts.append(
            f"verifier accuracy {100 * v['asl_verifier/accuracy']:.1f}% (unparsed "
            f"{100 * v['asl_verifier/unparsed']:.1f}%) on {v['asl_verifier/examples']} held-out examples"
        )
    return f"ASL roles ({label}): " + "; ".join(parts)
