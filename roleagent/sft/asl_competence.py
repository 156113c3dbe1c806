"""The held-out competence of ASL's prompt generator and generative verifier after their
warm start (``roleagent.sft.asl_roles``; Sun et al., 2025, arXiv 2510.14253), on held-out
questions (training split, never SFT data):

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
  ``supported`` (with ``asl.pg_retrieval``): share of generations that parsed and whose
  answer occurs in the search results the prompt opened with, not in the question: the
  pair is built on what the generator was shown;
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

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from roleagent.algos.asl import parse_verdict
from roleagent.engine.base import SamplingParams
from roleagent.envs.search.env import task_answers, task_question
from roleagent.envs.search.text import normalize_answer
from roleagent.methods.asl.prompts import parse_pair
from roleagent.sft.asl_roles import contains
from roleagent.sft.data import ChatExample, encode_example
from roleagent.sft.predictor import Competence


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


Retrieve = Callable[[list[str], int], list[list[dict[str, Any]]]]


def generator_competence(
    texts: Sequence[str],
    truncated: Sequence[bool],
    retrieve: Retrieve | None,
    *,
    topk: int = 3,
    seen_questions: Sequence[str] = (),
    gold: Mapping[str, Collection[str]] | None = None,
    shown: Sequence[str] | None = None,
) -> Competence:
    """The generator's held-out competence (module docstring) from its generations;
    ``retrieve`` is the environment's retriever (``retriever.retrieve``; None: no
    ``findable`` and ``answer_retrieved``, NaN); ``seen_questions`` the SFT questions;
    ``gold``: the environment's questions (normalised) and their gold answers
    (:func:`gold_answers`; None: no ``known`` and ``known_gold``, NaN); ``shown``: the
    search results each prompt opened with (``asl.pg_retrieval``; None: no ``supported``, NaN)."""
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
            if shown is not None:
                row.update(supported=contains(shown[len(rows)], pair[1]) and not contains(pair[0], pair[1]))
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
        "asl_generator/supported": sum(r.get("supported", False) for r in rows) / n
        if shown is not None and rows
        else nan,
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
    parts, nan = [], float("nan")
    if generator is not None:
        g = generator.metrics
        gold, shown = g.get("asl_generator/known_gold", nan), g.get("asl_generator/supported", nan)
        line = (
            f"generator parsed {100 * g['asl_generator/parsed']:.1f}%, findable "
            f"{100 * g['asl_generator/findable']:.1f}% of {g['asl_generator/generations']} held-out examples"
        )
        if gold == gold:
            line += f" (answers gold on {100 * gold:.1f}% of the questions the environment asks)"
        if shown == shown:
            line += f", answers in the search results shown {100 * shown:.1f}%"
        parts.append(line)
    if verifier is not None:
        v = verifier.metrics
        parts.append(
            f"verifier accuracy {100 * v['asl_verifier/accuracy']:.1f}% (unparsed "
            f"{100 * v['asl_verifier/unparsed']:.1f}%) on {v['asl_verifier/examples']} held-out examples"
        )
    return f"ASL roles ({label}): " + "; ".join(parts)
