"""The analyst and retriever roles of one Agent-In-World iteration (Role-Agent: Wang et
al., 2026, arXiv 2606.10917, §3.3, Figures 8 and 9), as ``AgentInWorld.process_failures``
calls them: which failures are analysed (:func:`round_robin`), one batched ``generate``
call per role, the fallbacks of an unusable answer, and the counts in the metrics dict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from roleagent.engine.chat import PromptFits
from roleagent.methods.role_agent.aiw.prompts import (
    ANALYSIS_ANSWER_PREFIX,
    ANALYSIS_ANSWER_PREFIXES,
    ANALYSIS_STOP,
    ANALYSIS_STOP_AFTER_PREFIX,
    RETRIEVAL_ANSWER_PREFIX,
    RETRIEVAL_STOP,
    RETRIEVAL_STOP_AFTER_PREFIX,
    analysis_messages,
)
from roleagent.methods.role_agent.aiw.reflection import (
    Reflection,
    fallback_reflection,
    parse_reflection,
    rule_reflection,
)
from roleagent.methods.role_agent.aiw.retrieval import Retriever
from roleagent.methods.role_agent.config import AIWConfig
from roleagent.types import Trajectory

Messages = list[dict[str, str]]
Generate = Callable[[list[Messages]], list[str]]
Diagnose = Callable[[Trajectory], "dict[str, Any] | None"]
#: ``fits(messages, response_prefix)``: whether a role's prompt is within the engine's
#: prompt limit (:func:`roleagent.engine.chat.prompt_fits`).
Fits = PromptFits
#: (failure id, trajectory, reflection) of a failure filed this iteration.
NewFailure = tuple[int, Trajectory, Reflection]


def _ask(generate: Generate, prompts: list[Messages]) -> list[str]:
    """One batched call; one answer per prompt (``None`` becomes ``""``)."""
    outputs = list(generate(prompts))
    if len(outputs) != len(prompts):
        raise ValueError(f"generate returned {len(outputs)} answers for {len(prompts)} prompts")
    return [str(o or "") for o in outputs]


def analyst_prefix(cfg: AIWConfig) -> str:
    """Where the policy analyst's answer starts (prefilled with ``aiw.answer_prefix``: the
    first field of ``aiw.analysis_order``)."""
    return ANALYSIS_ANSWER_PREFIXES[cfg.analysis_order] if cfg.answer_prefix else ""


def analyst_stop(cfg: AIWConfig) -> tuple[str, ...]:
    """The policy analyst's stop strings (``aiw.stop_at_close``; more once the answer was
    started for it); ``()``: it writes until EOS or ``aiw.analysis_max_new_tokens``."""
    if not cfg.stop_at_close:
        return ()
    return ANALYSIS_STOP_AFTER_PREFIX if cfg.answer_prefix else ANALYSIS_STOP


def retriever_prefix(cfg: AIWConfig) -> str:
    """Where the policy retriever's answer starts (prefilled with ``aiw.answer_prefix``)."""
    return RETRIEVAL_ANSWER_PREFIX if cfg.answer_prefix else ""


def retriever_stop(cfg: AIWConfig) -> tuple[str, ...]:
    """The policy retriever's stop strings, as :func:`analyst_stop`."""
    if not cfg.stop_at_close:
        return ()
    return RETRIEVAL_STOP_AFTER_PREFIX if cfg.answer_prefix else RETRIEVAL_STOP


def parse_answer(answer: str, taxonomy: Sequence[str], cfg: AIWConfig) -> Reflection | None:
    """``parse_reflection``, except that an answer we started at ``DOMINANT_TYPE:``
    (``aiw.answer_prefix`` with ``aiw.analysis_order: type_first``) whose type maps to no
    label counts as unparsable: that key is ours, not the model's, so it is no evidence of
    a type, and the rule diagnosis takes over as it does for an answer without the key."""
    ref = parse_reflection(answer, taxonomy, source=cfg.analyst)
    if ref is not None and ref.type_status == "other" and cfg.answer_prefix:
        if answer.startswith(ANALYSIS_ANSWER_PREFIX):
            return None
    return ref


def analyse(
    trajs: list[Trajectory],
    cfg: AIWConfig,
    taxonomy: Sequence[str],
    generate: Generate | None,
    diagnose: Diagnose | None,
    m: dict[str, float],
    fits: Fits | None = None,
) -> tuple[list[Reflection], list[str]]:
    """The analyst role: one reflection per trajectory and the raw answers. ``"policy"`` /
    ``"llm"`` ask ``generate`` (Figure 8, within the prompt limit ``fits``); an unusable
    answer, and analyst ``"rule"``, take the rule diagnosis (the trajectory's, else
    ``diagnose``), else a heuristic."""
    if not trajs:
        return [], []
    raws = [""] * len(trajs)
    parsed: list[Reflection | None] = [None] * len(trajs)
    if cfg.analyst in ("policy", "llm"):
        if generate is None:
            raise ValueError(f"aiw.analyst={cfg.analyst!r} needs a generate callable")
        prefix = analyst_prefix(cfg)
        fit = None if fits is None else (lambda messages: fits(messages, prefix))
        raws = _ask(
            generate,
            [
                analysis_messages(
                    t, taxonomy, cfg.analysis_chars, cfg.observation_chars, cfg.analyst_prompt, fit, cfg.analysis_order
                )
                for t in trajs
            ],
        )
        parsed = [parse_answer(o, taxonomy, cfg) for o in raws]
    out: list[Reflection] = []
    for traj, ref in zip(trajs, parsed):
        if ref is None:
            if cfg.analyst != "rule":
                m["n_parse_fallback"] += 1
            diag = traj.diagnosis
            if diag is None and diagnose is not None:
                diag = diagnose(traj)
            ref = rule_reflection(diag, taxonomy)
            if ref is not None:
                m["n_rule"] += 1
            else:
                ref = fallback_reflection(traj, taxonomy)
                m["n_heuristic"] += 1
        elif not ref.parsed_ok:
            m["n_partial"] += 1
        if ref.source in ("policy", "llm", "rule"):
            if ref.type_status == "mapped":
                m["n_type_mapped"] += 1
            elif ref.type_status == "other":
                m["n_type_other"] += 1
        out.append(ref)
    return out, raws


def retrieve(
    retriever: Retriever,
    new: list[NewFailure],
    generate: Generate | None,
    cfg: AIWConfig,
    m: dict[str, float],
    fits: Fits | None = None,
) -> list[list[Any]]:
    """The retriever role: for each new failure, the candidates (other tasks) it picks —
    through ``generate`` (Figure 9) when the retriever uses an LLM, else the top-k; an
    unusable answer falls back to the top-k and is counted. Within the prompt limit
    ``fits``, the LLM is shown the best candidates whose prompt fits (at least one; the
    default 20 candidates of up to ~450 characters each can pass a 1024-token limit)."""
    cand_lists = [retriever.candidates(ref, exclude_task=traj.task.id) for _fid, traj, ref in new]
    if retriever.uses_llm and fits is not None:
        prefix = retriever_prefix(cfg)
        for (_fid, _traj, ref), cands in zip(new, cand_lists):
            while len(cands) > 1 and not fits(retriever.messages(ref, cands), prefix):
                cands.pop()
    if cand_lists:
        m["n_candidates_mean"] = float(np.mean([len(c) for c in cand_lists]))
    answers: list[str | None] = [None] * len(new)
    if retriever.uses_llm:
        asked = [i for i, c in enumerate(cand_lists) if c]
        if asked and generate is None:
            raise ValueError(f"aiw.retriever={cfg.retriever!r} needs a generate callable")
        if asked:
            outputs = _ask(generate, [retriever.messages(new[i][2], cand_lists[i]) for i in asked])
            for i, out in zip(asked, outputs):
                answers[i] = out
            m["n_retrieval_queries"] = float(len(asked))
    selections = []
    for cands, answer in zip(cand_lists, answers):
        chosen, ok = retriever.select(cands, answer)
        if not ok:
            m["n_retrieval_fallback"] += 1
        selections.append(chosen)
    return selections


def round_robin(trajs: list[Trajectory], limit: int) -> list[Trajectory]:
    """At most ``limit`` trajectories: one per task in first-seen order, then a second
    per task, and so on (deterministic). E.g. tasks ``a a a b`` with limit 3 give
    ``a b a``."""
    if len(trajs) <= limit:
        return list(trajs)
    per_task: dict[str, list[Trajectory]] = {}
    for t in trajs:
        per_task.setdefault(t.task.id, []).append(t)
    out: list[Trajectory] = []
    depth = 0
    while len(out) < limit:
        added = False
        for group in per_task.values():
            if depth < len(group):
                out.append(group[depth])
                added = True
                if len(out) >= limit:
                    break
        if not added:
            break
        depth += 1
    return out
