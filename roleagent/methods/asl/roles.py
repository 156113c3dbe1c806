"""The prompt generator's and the GRM's turns: single-turn generations with the one
backbone, kept token for token as trainable trajectories, the GRM's batched judgements,
and verification pairs built from an environment's questions with gold answers."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from roleagent.algos.asl import parse_verdict
from roleagent.engine import SamplingParams
from roleagent.fields import ConfigError
from roleagent.methods.asl.prompts import (
    GRM_EVIDENCE,
    GRM_SYSTEM,
    GRM_USER,
    PG_SYSTEM,
    meta_prompt,
    role_chat,
    verdict_target,
)
from roleagent.types import Step, Task, Trajectory


def generate_turns(
    engine,
    jobs: Sequence[tuple[Task, int]],
    chats: Sequence[list[dict]],
    *,
    max_new_tokens: int,
    settings,
    replies: list[list[int]] | None = None,
) -> list[Trajectory]:
    """One single-step trajectory per job: the chat's prompt ids, the generated ids and
    their log-probs, sampled as the rollouts sample (``settings``: temperature, top-p), so
    the update's π_old matches. ``replies``: the token sequences every turn must be one of
    (constrained decoding; each position's allowed set is kept on the step, so the update
    renormalises over it as for constrained actions), None for free text."""
    prompts = [engine.encode_chat(chat) for chat in chats]
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=settings.temperature, top_p=settings.top_p)
    generations = engine.generate(prompts, params, None if replies is None else [replies] * len(prompts))
    out = []
    for (task, seed), chat, generation in zip(jobs, chats, generations):
        step = Step(
            observation=chat[-1]["content"],
            state_key=task.id,
            action_text=generation.text,
            action=generation.text,
            valid=True,
            prompt_ids=list(generation.prompt_ids),
            action_ids=list(generation.ids),
            action_logprobs=list(generation.logprobs),
            action_allowed=generation.allowed,
            done=True,
            info={"truncated": generation.truncated},
        )
        out.append(Trajectory(task=task, steps=[step], instruction=chat[-1]["content"], seed=seed))
    return out


def grm_chat(question: str, completion: str, with_system: bool, evidence: str = "") -> list[dict[str, str]]:
    """The GRM's conversation for one (question, answer) pair (paper Figure 12); ``evidence``:
    the search results it is shown (:func:`grm_evidence`), "" for none."""
    shown = GRM_EVIDENCE.format(information=evidence) if evidence else ""
    user = GRM_USER.format(question=question, completion=completion, evidence=shown)
    return role_chat(GRM_SYSTEM, user, with_system)


#: questions -> the search results the GRM is shown for each (``asl.grm_retrieval``)
Evidence = Callable[[Sequence[str]], list[str]]


def grm_chats(
    pairs: Sequence[tuple[str, str]], with_system: bool, evidence: Evidence | None = None
) -> list[list[dict]]:
    """:func:`grm_chat` for each (question, answer) pair, each shown its question's search
    results when ``evidence`` is given (:func:`grm_evidence`), none when it is None."""
    shown = evidence([q for q, _ in pairs]) if evidence is not None else [""] * len(pairs)
    return [grm_chat(q, a, with_system, e) for (q, a), e in zip(pairs, shown, strict=True)]


def grm_evidence(env: Any, limit: int = 4096) -> Evidence:
    """The GRM's evidence from ``env``: its ``search_results`` for each question, kept per
    question (a question is judged K times as a generated pair and M times as an attempt;
    the store is emptied when it holds ``limit`` questions). An environment without a
    knowledge base to search is a ConfigError.

    The paper's GRM shares the policy's ``retrieve`` tool and searches before it concludes
    (Sun et al., 2025, arXiv 2510.14253, Figure 7); here the framework makes that first
    search for it, with the question as the query, so a backbone that does not yet write
    tool calls still judges against the corpus instead of from memory."""
    search = _search_of(env, "grm_retrieval")
    store: dict[str, str] = {}

    def evidence(questions: Sequence[str]) -> list[str]:
        missing = list(dict.fromkeys(q for q in questions if q not in store))
        if len(store) + len(missing) > limit:
            store.clear()
            missing = list(dict.fromkeys(questions))
        store.update(zip(missing, search(missing), strict=True))
        return [store[q] for q in questions]

    return evidence


def _search_of(env: Any, setting: str) -> Callable[[list[str]], list[str]]:
    """``env.search_results``, or a ConfigError naming ``setting`` for an environment
    without a knowledge base to search."""
    search = getattr(env, "search_results", None)
    if not callable(search):
        raise ConfigError(
            f"asl.{setting}: the {getattr(env, 'name', type(env).__name__)!r} environment has no knowledge "
            f"base to search (search_results); turn asl.{setting} off or use the search environment"
        )
    return search


def title_of(document: dict) -> str:
    """A passage's title, its first line unquoted (``'"Hydrogen"\\nChemical element...'`` → ``Hydrogen``)."""
    return str(document.get("contents", "")).split("\n", 1)[0].strip().strip('"')


class PGEvidence:
    """What the prompt generator reads before it writes, with ``asl.pg_retrieval``: the
    environment's reply to one search per meta prompt, made by the framework.

    The paper's PG holds the policy's ``retrieve`` tool and is told to "use the tool to
    help you generate the question, ensure that the question is solvable" (Sun et al.,
    2025, arXiv 2510.14253, Figure 9); a backbone that does not yet write tool calls is
    given the search's result instead, so it can copy its answer from a passage rather
    than recall it. The query:

    - a round-0 item ``{"topic"}``: the title of one passage drawn from the ``pool``
      passages the retriever ranks highest for the topic (or for its search in
      ``queries``, ``asl.pg_topic_queries``), drawn by ``key`` (the method
      passes the task and its environment seed, so the G samples of one prompt see the
      same results and the next iteration another passage). Topic "chemistry" may draw
      ``"Boron"``; the search for "Boron" returns boron's passage first. A passage whose
      title's search does not show it (the environment's ``topk``) is never drawn: in the
      shipped corpus the search for "Iron" shows three other passages, and those for
      "there" and "L&O" none, so the generator would be told to base its question on
      results that hold no passage of the topic. A draw that lands on one draws again
      (the same stream), so the other draws are unchanged and each shown passage is
      equally likely;
    - a follow-up ``{"question", "answer", "flag"}``: the question and its answer, which
      retrieve the passages the new question builds on ("What is the atomic number of
      beryllium? 4" returns beryllium's).

    ``results``: the environment's ``search_results`` (queries -> the text shown). Topic
    pools are kept per topic (two batched retrievals each: the ranking, then its titles)."""

    def __init__(self, env: Any, *, pool: int = 64, seed: int = 0, queries: dict[str, str] | None = None):
        self.results, self.retriever = _search_of(env, "pg_retrieval"), getattr(env, "retriever", None)
        if self.retriever is None:
            raise ConfigError("asl.pg_retrieval: the environment has no retriever to draw topic passages from")
        self.pool, self.seed, self.queries = pool, seed, dict(queries or {})
        self.topk = int(getattr(env, "topk", 3))
        self._titles: dict[str, list[tuple[str, bool]]] = {}

    def _rank(self, topic: str) -> list[tuple[str, bool]]:
        """The topic's pool: (title, whether the title's search shows its passage), best first."""
        hits = self.retriever.retrieve([self.queries.get(topic, topic)], self.pool)[0][: self.pool]
        hits = [(title_of(h["document"]), h["document"].get("id")) for h in hits]
        hits = [(title, doc) for title, doc in hits if title]
        found = self.retriever.retrieve([title for title, _ in hits], self.topk) if hits else []
        return [(title, doc in [h["document"].get("id") for h in shown[: self.topk]])
                for (title, doc), shown in zip(hits, found, strict=True)]  # fmt: skip

    def query(self, item: dict, key: str) -> str:
        """The search made for ``item`` (class docstring)."""
        if "topic" not in item:
            return f"{item['question']} {item['answer']}"
        topic = str(item["topic"])
        if topic not in self._titles:
            self._titles[topic] = self._rank(topic)
        pool = self._titles[topic]
        if not any(shown for _, shown in pool):
            return topic
        draw = random.Random(f"{self.seed}/{key}")
        while not (chosen := pool[draw.randrange(len(pool))])[1]:
            pass
        return chosen[0]

    def __call__(self, items: Sequence[dict], keys: Sequence[str]) -> list[str]:
        """The search results shown with each item (``keys``: one per item, as :meth:`query`)."""
        return self.results([self.query(item, key) for item, key in zip(items, keys, strict=True)]) if items else []


def pg_evidence(env: Any, config: Any, seed: int) -> PGEvidence | None:
    """The prompt generator's :class:`PGEvidence` over ``env`` (``config``: the ``asl``
    section), None with ``asl.pg_retrieval`` off."""
    if not config.pg_retrieval:
        return None
    return PGEvidence(env, pool=config.pg_retrieval_pool, seed=seed, queries=config.pg_topic_queries)


def pg_chats(
    jobs: Sequence[tuple[Task, int]], round_index: int, with_system: bool, evidence: PGEvidence | None = None
) -> list[list[dict[str, str]]]:
    """The PG's conversation for each job (a D_PG item in ``task.metadata["asl"]``, its
    environment seed), opened with its search results when ``evidence`` is given; the key
    of a job's search is its task and seed, so a prompt's G samples see the same results."""
    items = [task.metadata["asl"] for task, _ in jobs]
    shown = evidence(items, [f"{task.id}/{seed}" for task, seed in jobs]) if evidence else [""] * len(items)
    return [role_chat(PG_SYSTEM, meta_prompt(i, round_index, e), with_system) for i, e in zip(items, shown)]


def verdict_replies(tokenizer) -> list[list[int]]:
    """The token ids of the two replies the verdict parser reads (correct, then wrong),
    each ending with the end-of-turn token as the GRM's free turn and its warm-start
    target do: what a constrained GRM (``asl.grm_verdicts: constrained``) chooses between.
    They share their first tokens, so the choice is made at the verdict word."""
    return [
        [*tokenizer(verdict_target(label), add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        for label in (1, 0)
    ]


def judge(
    engine,
    pairs: Sequence[tuple[str, str]],
    *,
    with_system: bool,
    max_new_tokens: int,
    temperature: float,
    constrained: bool = False,
    evidence: Evidence | None = None,
) -> list[tuple[str, int | None]]:
    """The GRM's ``(text, verdict)`` for each (question, answer) pair, in one batch;
    ``constrained``: each reply is one of :func:`verdict_replies`; ``evidence``: the
    search results shown per question (:func:`grm_evidence`), None for none."""
    if not pairs:
        return []
    prompts = [engine.encode_chat(chat) for chat in grm_chats(pairs, with_system, evidence)]
    replies = verdict_replies(engine.tokenizer) if constrained else None
    allowed = None if replies is None else [replies] * len(prompts)
    generations = engine.generate(
        prompts, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature), allowed
    )
    return [(g.text, parse_verdict(g.text)) for g in generations]


def question_of(task: Task, env: Any) -> str:
    """A task's question: ``metadata["question"]`` or ``payload["question"]``, else the
    instruction the environment gives at reset."""
    for record in (task.metadata, task.payload):
        if isinstance(record.get("question"), str) and record["question"].strip():
            return record["question"]
    _, info = env.reset(task, seed=0)
    return str(info.get("instruction", ""))


def verification_pairs(tasks: Sequence[Task], env: Any, n: int, *, spread: bool = False) -> list[dict]:
    """Verification records from the first ``n`` questions with gold answers (``spread``:
    ``n`` evenly spaced over them, the k-th at index ⌊k·len/n⌋): the gold answer labelled
    correct (1) and the next such question's gold answer labelled wrong (0), skipped when
    the two normalise to the same text. The paper's verify set takes its wrong answers from
    GPT-4o-mini; no such model is here. A measurement spreads: a split lists each entity's
    questions together, so its first 8 questions are about 2 entities.

    Example: questions q0 (gold "Paris"), q1 ("Rome"), q2 ("Oslo"), q3 ("Bern") with n = 2 →
    (q0, Paris, 1), (q0, Rome, 0), (q1, Rome, 1), (q1, Oslo, 0); spread: q0 and q2, so the
    last two are (q2, Oslo, 1), (q2, Bern, 0).
    """
    golden = [t for t in tasks if t.metadata.get("answers")]
    chosen = [k * len(golden) // n for k in range(n)] if spread and n < len(golden) else range(min(n, len(golden)))
    records = []
    for index in chosen:
        task = golden[index]
        question = question_of(task, env)
        right = str(task.metadata["answers"][0])
        wrong = str(golden[(index + 1) % len(golden)].metadata["answers"][0])
        records.append({"question": question, "response": right, "label": 1, "source": task.id})
        if " ".join(wrong.lower().split()) != " ".join(right.lower().split()):
            records.append({"question": question, "response": wrong, "label": 0, "source": task.id})
    return records


def question_task(record: dict, env: str) -> Task:
    """A generated question as an environment task (the search environment's contract:
    the question, ``metadata["answers"]`` and ``metadata["hops"]``)."""
    return Task(
        id=record["id"],
        env=env,
        payload={"question": record["question"]},
        split="train",
        metadata={
            "question": record["question"],
            "answers": [record["answer"]],
            "hops": record["hops"],
            "asl": {"round": record["round"], "parent": record["parent"]},
        },
    )


def role_task(task_id: str, env: str, role: str, record: dict) -> Task:
    """A prompt-generator or GRM task (split ``asl_pg`` / ``asl_grm``): the item in
    ``metadata["asl"]``; these never reach an environment."""
    return Task(id=task_id, env=env, split=f"asl_{role}", metadata={"asl": dict(record)})
