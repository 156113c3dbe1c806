"""The prompt generator's and the GRM's turns: single-turn generations with the one
backbone, kept token for token as trainable trajectories, the GRM's batched judgements,
and verification pairs built from an environment's questions with gold answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from roleagent.algos.asl import parse_verdict
from roleagent.engine import SamplingParams
from roleagent.fields import ConfigError
from roleagent.methods.asl.prompts import GRM_EVIDENCE, GRM_SYSTEM, GRM_USER, role_chat, verdict_target
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
    search = getattr(env, "search_results", None)
    if not callable(search):
        raise ConfigError(
            f"asl.grm_retrieval: the {getattr(env, 'name', type(env).__name__)!r} environment has no knowledge "
            "base to search (search_results); turn asl.grm_retrieval off or use the search environment"
        )
    store: dict[str, str] = {}

    def evidence(questions: Sequence[str]) -> list[str]:
        missing = list(dict.fromkeys(q for q in questions if q not in store))
        if len(store) + len(missing) > limit:
            store.clear()
            missing = list(dict.fromkeys(questions))
        store.update(zip(missing, search(missing), strict=True))
        return [store[q] for q in questions]

    return evidence


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


def verification_pairs(tasks: Sequence[Task], env: Any, n: int) -> list[dict]:
    """Verification records from the first ``n`` questions with gold answers: the gold
    answer labelled correct (1) and the next such question's gold answer labelled wrong
    (0), skipped when the two normalise to the same text. The paper's verify set takes its
    wrong answers from GPT-4o-mini; no such model is here.

    Example: questions q0 (gold "Paris"), q1 ("Rome"), q2 ("Oslo") with n = 2 →
    (q0, Paris, 1), (q0, Rome, 0), (q1, Rome, 1), (q1, Oslo, 0).
    """
    golden = [t for t in tasks if t.metadata.get("answers")]
    records = []
    for index, task in enumerate(golden[:n]):
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
