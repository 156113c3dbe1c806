"""Agent-In-World retriever warm start (Role-Agent, Wang et al., 2026, arXiv 2606.10917,
§3.3, Fig. 9): supervised examples that teach the policy to pick, from the Figure-9
candidate list, the historical tasks that failed the way the current failure did, and
the held-out measure of that competence.

**Failures and the memory.** The same failures as the analyst's warm start
(``roleagent.sft.analyst``): failed, uncrashed trajectories with a rule diagnosis. Each is
filed as the reflection a competent analyst writes for it, the parsed
``analysis_target`` (type, detail, critical step, lesson, retrieval query), with the
task's text, in a :class:`FailureMemory` (SQLite) of the *training* failures. A query is
one failure's reflection; its candidates are what :class:`Retriever` offers in a run
(``aiw.prefilter``, ``aiw.candidates``, one entry per other task), cut to the engine's
prompt limit as ``roles.retrieve`` cuts them, and the prompt is ``Retriever.messages``
with the answer started at ``RETRIEVAL_ANSWER_PREFIX``: token for token what the AIW
asks (``tests/test_sft_retriever.py``).

**Relevance** follows Figure 9's own criteria, "the same type of reasoning or skill" and
"a similar root cause", read from the ground truth, not from what was filed: a candidate
is 2 when its failure's rule type equals the query's and its task is of the same kind
(ALFWorld's ``task_type``: pick, clean, heat, cool, look, pick two), 1 when only the type
is the same, else 0. The target names the most relevant candidates, best first, at most
``aiw.top_k`` and none of relevance 0 (a query without a relevant candidate gives no
example), ties in list order::

    <selected_tasks>
    INDEX/TASK/REFLECTIONS: [4] "put a cool mug in cabinet."
    REASON: the same failure (wrong receptacle) in the same kind of task (pick cool then place).
    INDEX/TASK/REFLECTIONS: [1] "put a clean spatula in drawer."
    REASON: the same failure (wrong receptacle).
    </selected_tasks>

The training lists are shuffled (seeded) and their ties drawn at random, so that a position
says nothing: with the ``hybrid`` pre-filter the same-type candidates come first, and a model
that learned "the first three" would match the fallback and never read an entry. (Ties in
list order are not enough: on the main job's failures half of a shuffled list is of the
query's type and kind, so the first entry was the target's first pick in 96 of 166
examples, and the model trained on them named [1], [2], [3] for every held-out query.) The held-out lists keep the
run's order, and :func:`write_data` also writes them shuffled. Only the answer after the
prefix carries the loss (``roleagent.sft.data``).

**Competence** (:func:`competence`), over held-out queries (failures of games that were
never SFT data), generated as the AIW generates them (same prompt, prefix, stop strings,
``aiw.retrieval_max_new_tokens``; greedy) and read by the AIW's ``parse_selection``:

- ``parsed``: the share whose answer names at least one candidate (else the AIW falls back
  to the pre-filter's top-k);
- ``type_precision`` / ``skill_precision``: per query, the share of the picks of relevance
  >= 1 / = 2, averaged over queries; a query whose answer did not parse scores what its
  fallback picks, as in a run;
- ``fallback_type_precision`` / ``fallback_skill_precision``: the same for the pre-filter's
  top-k of the list as shown: what the role must beat to be worth its decode time;
- ``picked``: mean number of picks; ``truncated``: answers cut at the token limit.

Example: lists with relevance (1, 0, 2, 0) and (0, 1, 1), top-k 2, answers "[3] ... [1]"
and "no idea" → parsed 1/2; the first picks (2, 1): type 1.0, skill 0.5; the second falls
back to its first two (0, 1): type 0.5, skill 0 → type_precision 0.75, skill_precision
0.25; fallback: (1, 0) and (0, 1) → type 0.5 and 0.5, skill 0 and 0.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from roleagent.engine.base import SamplingParams
from roleagent.methods.role_agent.aiw.memory import FailureMemory
from roleagent.methods.role_agent.aiw.prompts import _clip, task_instruction
from roleagent.methods.role_agent.aiw.reflection import Reflection, parse_reflection
from roleagent.methods.role_agent.aiw.retrieval import Candidate, Retriever, parse_selection
from roleagent.methods.role_agent.aiw.roles import Fits, retriever_prefix, retriever_stop
from roleagent.methods.role_agent.config import AIWConfig
from roleagent.sft.analyst import analysis_target
from roleagent.sft.data import ChatExample, answer_examples
from roleagent.sft.predictor import Competence
from roleagent.stats import RateTest, sign_flip_test
from roleagent.types import Trajectory

#: (trajectory, its rule diagnosis) of one failure.
Failure = tuple[Trajectory, dict[str, Any]]


def filed_reflection(trajectory: Trajectory, diagnosis: dict[str, Any], taxonomy: Sequence[str]) -> Reflection:
    """The reflection a competent analyst files for a failure: its Figure-8 target, parsed."""
    ref = parse_reflection(analysis_target(trajectory, diagnosis, taxonomy), taxonomy, source="rule")
    if ref is None:  # analysis_target always writes a parsable block
        raise ValueError(f"unparsable analysis target for task {trajectory.task.id}")
    return ref


def task_kind(trajectory: Trajectory) -> str:
    """The kind of task (ALFWorld's ``task_type``; '' when the environment gives none)."""
    return str(trajectory.task.metadata.get("task_type") or "")


def relevance(query: tuple[str, str], candidate: tuple[str, str]) -> int:
    """2: same failure type and kind of task; 1: same type; 0: otherwise (module docstring).

    >>> relevance(("wrong_receptacle", "pick_cool_then_place"), ("wrong_receptacle", "pick_cool_then_place"))
    2
    >>> relevance(("wrong_receptacle", "pick_cool_then_place"), ("wrong_receptacle", "pick_and_place"))
    1
    """
    if query[0] != candidate[0]:
        return 0
    return 2 if query[1] and query[1] == candidate[1] else 1


def selection_target(
    candidates: Sequence[Candidate],
    relevances: Sequence[int],
    query: Reflection,
    kind: str,
    top_k: int,
    rng: random.Random | None = None,
) -> str:
    """Figure 9's block naming the most relevant candidates (module docstring), ties of
    relevance in list order, or in a random order drawn from ``rng``; '' when none is
    relevant."""
    ties = [rng.random() for _ in relevances] if rng is not None else list(range(len(relevances)))
    order = sorted((i for i, r in enumerate(relevances) if r > 0), key=lambda i: (-relevances[i], ties[i]))[:top_k]
    if not order:
        return ""
    failure = query.dominant_type.replace("_", " ")
    lines = []
    for i in order:
        task = _clip(
            (candidates[i].record.task_text or candidates[i].task_id).split("Your task is to:")[-1].strip(), 80
        )
        lines.append(f'INDEX/TASK/REFLECTIONS: [{i + 1}] "{task}"')
        reason = f"the same failure ({failure})"
        if relevances[i] == 2:
            reason += f" in the same kind of task ({kind.replace('_', ' ')})"
        lines.append(f"REASON: {reason}.")
    return "<selected_tasks>\n" + "\n".join(lines) + "\n</selected_tasks>"


class Library:
    """The training failures filed in a SQLite :class:`FailureMemory` (``path``), and a
    :class:`Retriever` over them with the recipe's ``aiw.*`` settings; ``truth`` maps a
    filed failure's id to its (rule type, kind of task)."""

    def __init__(self, failures: Sequence[Failure], taxonomy: Sequence[str], aiw: AIWConfig, path: str | Path):
        Path(path).unlink(missing_ok=True)
        self.memory = FailureMemory(path, taxonomy)
        self.truth: dict[int, tuple[str, str]] = {}
        for trajectory, diagnosis in failures:
            ref = filed_reflection(trajectory, diagnosis, taxonomy)
            fid = self.memory.add_failure(trajectory.task.id, 0, ref, task_text=task_instruction(trajectory, 300))
            self.truth[fid] = (ref.dominant_type, task_kind(trajectory))
        self.memory.commit()
        self.retriever = Retriever(
            self.memory,
            "policy",
            max_candidates=aiw.candidates,
            top_k=aiw.top_k,
            prefilter=aiw.prefilter,
            unit="tasks",
            k1=aiw.bm25_k1,
            b=aiw.bm25_b,
            entry=aiw.candidate_entry,
        )

    def close(self) -> None:
        self.memory.close()


def retriever_examples(
    queries: Sequence[Failure],
    library: Library,
    taxonomy: Sequence[str],
    aiw: AIWConfig,
    *,
    shuffle_seed: int | None = None,
    fits: Fits | None = None,
) -> list[ChatExample]:
    """One example per query failure with a relevant candidate (module docstring); the
    candidate list, cut to the prompt limit ``fits`` as the AIW cuts it, shuffled with
    ``shuffle_seed`` (None: the run's order). The relevances of every list are in
    ``meta["relevance"]``, so the competence needs no memory."""
    if aiw.retrieve_unit != "tasks":
        raise ValueError("the retriever warm start is built for aiw.retrieve_unit: tasks")
    prefix = retriever_prefix(aiw)
    rng = random.Random(shuffle_seed)
    out = []
    for trajectory, diagnosis in queries:
        query = filed_reflection(trajectory, diagnosis, taxonomy)
        cands = library.retriever.candidates(query, exclude_task=trajectory.task.id)
        while fits is not None and len(cands) > 1 and not fits(library.retriever.messages(query, cands), prefix):
            cands.pop()  # the worst-ranked first, as the AIW cuts its list
        if shuffle_seed is not None:
            rng.shuffle(cands)
        key = (query.dominant_type, task_kind(trajectory))
        rel = [relevance(key, library.truth[c.failure_id]) for c in cands]
        target = selection_target(cands, rel, query, key[1], aiw.top_k, rng if shuffle_seed is not None else None)
        if not target:
            continue
        meta = {"task": trajectory.task.id, "split": trajectory.task.split, "role": "retriever"}
        meta |= {"label": key[0], "task_type": key[1], "relevance": rel, "top_k": aiw.top_k}
        answer = {"role": "assistant", "content": target, "loss": True}
        messages = library.retriever.messages(query, cands)
        out.append(ChatExample(messages + [answer], prefix, meta, eos=not aiw.stop_at_close))
    return out


# ------------------------------------------------------------------ competence -------


def competence(
    answers: Sequence[str], relevances: Sequence[Sequence[int]], top_k: int, truncated: Sequence[bool] | None = None
) -> Competence:
    """Parsed, precision and the fallback's precision (module docstring) of selections
    ``answers`` over candidate lists whose relevances are ``relevances``."""
    rows = []
    for answer, rel in zip(answers, relevances, strict=True):
        picks = parse_selection(answer, len(rel), limit=top_k)
        fallback = list(range(min(top_k, len(rel))))
        chosen = fallback if picks is None else picks
        rows.append({"answer": answer, "relevance": list(rel), "picks": picks, "chosen": chosen, "fallback": fallback})
    n = len(rows)

    def mean(values) -> float:
        values = list(values)
        return sum(values) / len(values) if values else float("nan")

    def precision(key: str, level: int) -> float:
        return mean(mean(r["relevance"][i] >= level for i in r[key]) for r in rows if r[key])

    metrics = {
        "aiw_retriever/parsed": mean(r["picks"] is not None for r in rows),
        "aiw_retriever/type_precision": precision("chosen", 1),
        "aiw_retriever/skill_precision": precision("chosen", 2),
        "aiw_retriever/fallback_type_precision": precision("fallback", 1),
        "aiw_retriever/fallback_skill_precision": precision("fallback", 2),
        "aiw_retriever/picked": mean(len(r["picks"] or []) for r in rows),
        "aiw_retriever/truncated": mean(truncated if truncated is not None else [False] * n),
        "aiw_retriever/queries": n,
    }
    return Competence(metrics, rows)


def retriever_competence(
    engine, examples: Sequence[ChatExample], aiw: AIWConfig, *, temperature: float = 0.0, batch_size: int = 8
) -> Competence:
    """:func:`competence` of ``engine``'s selections for held-out retriever ``examples``,
    generated as the AIW generates them at ``temperature`` (0: greedy)."""
    sampling = SamplingParams(aiw.retrieval_max_new_tokens, temperature, top_p=1.0, stop=retriever_stop(aiw))
    answers, truncated = answer_examples(engine, examples, retriever_prefix(aiw), sampling, batch_size)
    return competence(answers, [e.meta["relevance"] for e in examples], aiw.top_k, truncated)


def against_fallback(result: Competence, level: int) -> RateTest:
    """Per query, the precision at relevance >= ``level`` of what the role chose minus that of
    the pre-filter's top-k, under the exact sign-flip test (``roleagent.stats``): does the
    role pick better than what it falls back to?"""

    def precision(rel: list[int], picks: list[int]) -> float:
        return sum(rel[i] >= level for i in picks) / len(picks) if picks else 0.0

    return sign_flip_test(
        [precision(r["relevance"], r["chosen"]) - precision(r["relevance"], r["fallback"]) for r in result.rows]
    )


def summary(label: str, result: Competence) -> str:
    """One line for the run's log."""
    m = result.metrics
    return (
        f"Agent-In-World retriever ({label}): parsed {100 * m['aiw_retriever/parsed']:.1f}%, picks of the same "
        f"failure type {100 * m['aiw_retriever/type_precision']:.1f}% (pre-filter top-k "
        f"{100 * m['aiw_retriever/fallback_type_precision']:.1f}%), same type and kind of task "
        f"{100 * m['aiw_retriever/skill_precision']:.1f}% (top-k {100 * m['aiw_retriever/fallback_skill_precision']:.1f}%) "
        f"over {m['aiw_retriever/queries']} held-out failures"
    )


# ------------------------------------------------------------------ data -------------


def make_examples(
    train: Sequence[Failure],
    valid: Sequence[Failure],
    taxonomy,
    aiw: AIWConfig,
    memory_path,
    *,
    seed: int,
    fits=None,
    shuffled_valid: bool = True,
) -> dict[str, list[ChatExample]]:
    """The examples of training queries (shuffled lists) and of held-out queries (the run's
    order, and with ``shuffled_valid`` shuffled), all against the training failures' library at ``memory_path``."""
    library = Library(train, taxonomy, aiw, memory_path)
    try:
        parts = {
            "retriever.jsonl": retriever_examples(train, library, taxonomy, aiw, shuffle_seed=seed, fits=fits),
            "retriever_valid.jsonl": retriever_examples(valid, library, taxonomy, aiw, fits=fits),
        }
        if shuffled_valid:
            shuffled = retriever_examples(valid, library, taxonomy, aiw, shuffle_seed=seed + 1, fits=fits)
            parts["retriever_valid_shuffled.jsonl"] = shuffled
        return parts
    finally:
        library.close()


USAGE = """python -m roleagent.sft.retriever data RECIPE --rollouts FILE [FILE ...] --out DIR [--valid-games K]
    [--per-game N] [--set KEY=VALUE]
python -m roleagent.sft.retriever eval RECIPE --examples FILE [--limit N] [--rows FILE] [--set KEY=VALUE]

data: the failed, uncrashed episodes of rollout files, diagnosed by the recipe's environment; the
failures of K games (the analyst's seeded draw, so the same games as `roleagent.sft.analyst data`
holds out) are the held-out queries, the rest the library and the training queries (at most N
failures a game with --per-game): DIR/retriever.jsonl, DIR/retriever_valid.jsonl (the run's
order), DIR/retriever_valid_shuffled.jsonl, DIR/retriever_memory.sqlite (the library).
eval: the recipe's policy (--set model.init_from=SFT/final for a checkpoint) answers the held-out
queries of FILE as Agent-In-World does; prints the competence (module docstring) as JSON."""


def main(argv: Sequence[str] | None = None) -> int:
    from roleagent.config import load_config
    from roleagent.engine.chat import prompt_fits
    from roleagent.envs.workers import EnvPool
    from roleagent.sft.data import write_examples
    from roleagent.sft.failures import diagnosed, per_game, split_failures
    from roleagent.sft.role_cli import load_engine, role_parser
    from roleagent.sft.sources import read_examples
    from roleagent.trainer.checks import prepare

    parser = role_parser("python -m roleagent.sft.retriever", USAGE)
    parser.add_argument("--rollouts", nargs="+", default=[])
    parser.add_argument("--valid-games", type=int, default=0)
    parser.add_argument("--per-game", type=int, default=0)
    args = parser.parse_args(argv)
    cfg = prepare(load_config(args.recipe, args.set))
    _, engine = load_engine(cfg)
    if args.command == "eval":
        examples = read_examples(args.examples)[: args.limit or None]
        result = retriever_competence(engine, examples, cfg.aiw)
        if args.rows:
            Path(args.rows).write_text("".join(json.dumps(row) + "\n" for row in result.rows))
        print(summary(cfg.model.init_from or cfg.model.name, result))
        for level, name in ((1, "same type"), (2, "same type and kind of task")):
            print(f"against the pre-filter's top-k, {name}, per query: {against_fallback(result, level)}")
        print(json.dumps(result.metrics))
        return 0
    with EnvPool(cfg.env.name, cfg.env.kwargs, slots=1, processes=False) as pool:
        failures, held, _ = split_failures(pool, cfg.seed, args.rollouts, [], args.valid_games)
        taxonomy = pool.meta.failure_taxonomy
        found = diagnosed(failures, pool.diagnose)
    found = per_game(found, args.per_game, game=lambda f: f[0].task.id, label=lambda f: f[1]["dominant_type"])
    train = [f for f in found if f[0].task.id not in held]
    valid = [f for f in found if f[0].task.id in held]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = make_examples(train, valid, taxonomy, cfg.aiw, out / "retriever_memory.sqlite", seed=cfg.seed,
                          fits=prompt_fits(engine))  # fmt: skip
    counts = {name: write_examples(out / name, part) for name, part in parts.items()}
    print(json.dumps({**counts, "library_failures": len(train), "held_out_failures": len(valid)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
