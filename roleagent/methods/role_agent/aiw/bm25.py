"""Okapi BM25 over failure reflections (numpy), and its tokenizer: the lexical score of the
retriever's pre-filter (:mod:`roleagent.methods.role_agent.aiw.retrieval`).

Robertson & Zaragoza, 2009, "The Probabilistic Relevance Framework: BM25 and Beyond"
(Foundations and Trends in Information Retrieval 3(4)); the idf is Lucene's non-negative form.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

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
