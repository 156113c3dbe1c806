"""Search-augmented QA over an offline corpus (the setting of Search-R1, Jin et al., 2025,
arXiv 2503.09516; Role-Agent's search tasks, Wang et al., 2026, arXiv 2606.10917; ASL's
search environment, Sun et al., 2025, arXiv 2510.14253).

A task is a question with gold answers. The agent writes ``<search>query</search>``
(or ``<tool_call>{"name": "search", "arguments": {"query": ...}}</tool_call>``, where ASL's
tool name ``retrieve`` works as ``search``) and sees
the top-k passages in ``<information>...</information>``, or ``<answer>...</answer>``,
which ends the episode with reward 1 on a match (exact match after Search-R1's
normalisation; ``reward="subem"``: the gold answer is a substring). Any other output gets
Search-R1's fixed invalid-action message and the episode goes on. At most
``max_searches`` searches (default ``max_steps``), queries cut to ``max_query_chars``.

The task CONTRACT (tasks generated at run time, e.g. by ASL, satisfy it too): any
``roleagent.types.Task`` whose question is ``payload["question"]`` (or
``payload["instruction"]``, ``metadata["question"]``) and whose ``metadata["answers"]`` is
a list of gold strings (``metadata["hops"]``: how many passages it needs, informational).
``tasks(split)`` serves the shipped QA sets: ``train``, ``dev``, ``test`` (disjoint by
entity; see docs/search.md).

``protocol="chat"`` (default) reports the conversation (``info["messages"]``): the rollout
then keeps one growing chat, Search-R1's context, oldest search results trimmed first when
it outgrows the prompt budget. ``protocol="window"``: the actor's bounded prompt instead.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from roleagent.envs.base import Environment, StepResult
from roleagent.envs.search import diagnosis, expert, prompt
from roleagent.envs.search.retriever import RetrieverError, data_path, load_corpus, make_retriever, read_jsonl_gz
from roleagent.envs.search.text import (
    INVALID_MESSAGE,
    exact_match,
    information,
    normalize_answer,
    parse_action,
    substring_match,
    untagged,
)
from roleagent.types import Task, Trajectory

SPLITS = ("train", "dev", "test")
MAX_QUESTION_CHARS = 4000
_RETRIEVERS: dict[tuple, Any] = {}  # one index per process and configuration
_TITLES: dict[str, str] = {}  # passage id -> title of the shipped corpus (the expert's support titles)
_LOCK = threading.Lock()


def task_question(task: Task) -> str:
    """The question of any task that follows the contract (see the module docstring)."""
    for source, key in ((task.payload, "question"), (task.payload, "instruction"), (task.metadata, "question")):
        value = (source or {}).get(key)
        if isinstance(value, str) and value.strip():
            if len(value) > MAX_QUESTION_CHARS:
                raise ValueError(
                    f"task {task.id!r}: the question has {len(value)} characters (limit {MAX_QUESTION_CHARS})"
                )
            return value.strip()
    raise ValueError(f"task {task.id!r} has no question: set payload['question'] to a non-empty string")


def task_answers(task: Task) -> list[str]:
    """The gold answers (``metadata["answers"]``, a list of non-empty strings; one string
    is taken as a one-element list)."""
    answers = (task.metadata or {}).get("answers", (task.payload or {}).get("answers"))
    if isinstance(answers, str):
        answers = [answers]
    if (
        not isinstance(answers, (list, tuple))
        or not answers
        or not all(isinstance(a, str) and a.strip() for a in answers)
    ):
        raise ValueError(f"task {task.id!r}: metadata['answers'] must be a non-empty list of non-empty strings")
    return [a.strip() for a in answers]


class SearchEnv(Environment):
    name = "search"
    max_steps = 4  # Role-Agent: at most 4 turns on search QA
    failure_taxonomy = diagnosis.FAILURE_TAXONOMY
    table_columns = {"1": "single-hop", "2": "multi-hop"}
    step_cpu_seconds = 120.0  # the first search of a process builds the BM25 index

    def __init__(
        self,
        retriever: str = "bm25",
        retriever_url: str | None = None,
        corpus: str | None = None,
        qa: str | None = None,
        topk: int = 3,
        max_steps: int = 4,
        max_searches: int | None = None,
        max_query_chars: int = 512,
        max_passage_chars: int = 500,
        reward: str = "em",
        timeout: float = 10.0,
        protocol: str = "chat",
    ):
        if reward not in ("em", "subem"):
            raise ValueError(f"reward must be 'em' or 'subem', got {reward!r}")
        if protocol not in ("chat", "window"):
            raise ValueError(f"protocol must be 'chat' or 'window', got {protocol!r}")
        for key, value in (("topk", topk), ("max_steps", max_steps), ("max_query_chars", max_query_chars),
                           ("max_passage_chars", max_passage_chars)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        if max_searches is not None and (not isinstance(max_searches, int) or max_searches < 0):
            raise ValueError(f"max_searches must be a non-negative integer, got {max_searches!r}")
        if retriever_url is None and retriever not in ("bm25", "dense"):
            raise ValueError(f"retriever must be 'bm25' or 'dense', got {retriever!r}")
        self.retriever_key = (retriever, retriever_url, corpus, float(timeout))
        self.qa_path = Path(qa) if qa else data_path("qa.jsonl.gz")
        self.topk, self.max_steps, self.reward_kind, self.protocol = topk, max_steps, reward, protocol
        self.max_searches = max_steps if max_searches is None else max_searches
        self.max_query_chars, self.max_passage_chars = max_query_chars, max_passage_chars
        self._rows: list[dict] | None = None
        self._answers: list[str] = []
        self._searches = 0
        self._done = True

    # ------------------------------------------------------------------ tasks --------

    def splits(self) -> tuple[str, ...]:
        return SPLITS

    def tasks(self, split: str) -> list[Task]:
        if split not in SPLITS:
            raise ValueError(f"search splits are {', '.join(SPLITS)}, got {split!r}")
        if self._rows is None:
            self._rows = read_jsonl_gz(self.qa_path)
        return [
            Task(
                id=row["id"],
                env=self.name,
                split=split,
                payload={"question": row["question"]},
                metadata={
                    "answers": list(row["answers"]),
                    "hops": row["hops"],
                    "task_type": str(row["hops"]),
                    "question_type": row["type"],
                    "support": list(row["support"]),
                },  # fmt: skip
            )
            for row in self._rows
            if row["split"] == split
        ]

    # --------------------------------------------------------------- episodes --------

    @property
    def retriever(self) -> Any:
        with _LOCK:
            if self.retriever_key not in _RETRIEVERS:
                kind, url, corpus, timeout = self.retriever_key
                _RETRIEVERS[self.retriever_key] = make_retriever(kind, url, corpus, timeout)
            return _RETRIEVERS[self.retriever_key]

    def reset(self, task: Task, seed: int = 0) -> tuple[str, dict[str, Any]]:
        question, self._answers = task_question(task), task_answers(task)
        self._question, self._support = question, [str(s) for s in task.metadata.get("support") or []]
        self._searches, self._done, self._gold_seen = 0, False, False
        info: dict[str, Any] = {"instruction": prompt.instruction(question)}
        if self.protocol == "chat":
            info["messages"] = [{"role": "user", "content": f"Question: {question}"}]
        return "No search results yet.", info

    def step(self, action: str) -> StepResult:
        if self._done:
            raise RuntimeError("the episode is over: call reset first")
        parsed = parse_action(str(action))
        info: dict[str, Any] = {"kind": parsed.kind, "form": parsed.form, "action_valid": parsed.kind != "invalid"}
        if parsed.kind == "answer":
            return self._answer(parsed.content, info)
        if parsed.kind == "search" and self._searches < self.max_searches:
            observation = self._search(parsed.content, info)
        elif parsed.kind == "search":
            info.update(action_valid=False, search_limit=True)
            observation = (f"The search limit ({self.max_searches}) is reached. "
                           "Give your final answer between <answer> and </answer>.")  # fmt: skip
        else:
            observation = INVALID_MESSAGE
        info["searches"] = self._searches
        return self._reply(observation, 0.0, False, info)

    def search_results(self, queries: list[str]) -> list[str]:
        """What a search for each query returns (the observation :meth:`step` gives: the
        top ``topk`` passages inside ``<information>`` tags), outside any episode: for a
        role that reads the knowledge base beside the policy (ASL's GRM, ``asl.grm_retrieval``)."""
        queries = [self._query(q)[0] for q in queries]
        found = self.retriever.retrieve(queries, self.topk) if queries else []
        return [information(hits[: self.topk], self.max_passage_chars) for hits in found]

    def _query(self, query: str) -> tuple[str, bool]:
        """(the query as searched: whitespace collapsed, cut to ``max_query_chars``; whether it was cut)."""
        query = " ".join(query.split())
        return query[: self.max_query_chars], len(query) > self.max_query_chars

    def _search(self, query: str, info: dict[str, Any]) -> str:
        query, cut = self._query(query)
        if cut:
            info["query_truncated"] = True
        self._searches += 1
        hits = self.retriever.retrieve([query], self.topk)[0][: self.topk]
        observation = information(hits, self.max_passage_chars)
        gold = [normalize_answer(a) for a in self._answers]
        text = f" {normalize_answer(untagged(observation))} "
        info.update(query=query, doc_ids=[str(h["document"].get("id", "")) for h in hits],
                    gold_retrieved=any(g and f" {g} " in text for g in gold))  # fmt: skip
        self._gold_seen = self._gold_seen or info["gold_retrieved"]
        return observation

    def _answer(self, answer: str, info: dict[str, Any]) -> StepResult:
        em, subem = exact_match(answer, self._answers), substring_match(answer, self._answers)
        reward = em if self.reward_kind == "em" else subem
        self._done = True
        info.update(answer=answer[:1000], em=em, subem=subem, searches=self._searches, success=reward == 1.0)
        return self._reply("", reward, True, info)

    def _reply(self, observation: str, reward: float, done: bool, info: dict[str, Any]) -> StepResult:
        info.setdefault("success", False)
        if self.protocol == "chat":
            info["messages"] = [{"role": "tool", "content": observation}] if observation else []
        return StepResult(observation, reward, done, info)

    def expert_action(self) -> str | None:
        """The gold-path expert's next action (``roleagent.envs.search.expert``)."""
        if self._done:
            return None
        with _LOCK:
            if not _TITLES:
                _TITLES.update((d["id"], d["contents"].split("\n")[0].strip('"')) for d in load_corpus())
        titles = [_TITLES[s] for s in self._support if s in _TITLES]
        return expert.next_action(
            self._question, self._answers, titles, self._searches, self._gold_seen, self.max_searches
        )

    def step_failed(self, action: str, error: BaseException) -> StepResult:
        """A retriever that is down or slow is an infrastructure fault, not the agent's:
        it propagates (the run stops with the reason) instead of failing the episode."""
        if isinstance(error, RetrieverError):
            raise error
        return super().step_failed(action, error)

    def diagnose(self, trajectory: Trajectory) -> dict[str, Any] | None:
        return diagnosis.diagnose_trajectory(trajectory)
