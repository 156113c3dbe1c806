"""Agent-In-World retrieval latency per failed episode with 4,000 stored failures.

SQLite insert + commit of the memories, index build, then per failure: candidate
pre-filter (failure type + BM25 over reflections), Figure-9 prompt construction and top-k
selection — everything but the LLM call itself (Role-Agent, Wang et al., 2026,
arXiv 2606.10917, §3.3 and Figure 9).

    python benchmarks/bench_retrieval.py [--memories 4000] [--queries 200]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from roleagent.envs.alfworld.diagnosis import FAILURE_TAXONOMY
from roleagent.methods.role_agent.aiw.memory import FailureMemory
from roleagent.methods.role_agent.aiw.reflection import Reflection
from roleagent.methods.role_agent.aiw.retrieval import Retriever

OBJECTS = [
    "apple",
    "mug",
    "soapbar",
    "desklamp",
    "knife",
    "pan",
    "cloth",
    "sponge",
    "book",
    "pen",
    "egg",
    "lettuce",
    "plate",
    "bowl",
    "cd",
    "pillow",
]
PLACES = [
    "cabinet",
    "countertop",
    "sinkbasin",
    "fridge",
    "microwave",
    "drawer",
    "shelf",
    "desk",
    "toilet",
    "garbagecan",
    "sofa",
    "bed",
    "stoveburner",
]
VERBS = ["clean", "heat", "cool", "examine", "put", "find", "take", "open", "check"]


def _sentence(rng: np.random.Generator) -> str:
    """A synthetic ALFWorld-like reflection sentence."""
    words = [
        VERBS[rng.integers(len(VERBS))],
        OBJECTS[rng.integers(len(OBJECTS))],
        "at",
        PLACES[rng.integers(len(PLACES))],
        "before",
        VERBS[rng.integers(len(VERBS))],
        OBJECTS[rng.integers(len(OBJECTS))],
    ]
    return " ".join(words)


def _fill(memory: FailureMemory, n_memories: int, taxonomy: Sequence[str], rng: np.random.Generator) -> None:
    for i in range(n_memories):
        label = taxonomy[int(rng.integers(len(taxonomy)))]
        ref = Reflection(
            dominant_type=label,
            detail=_sentence(rng),
            critical_step=3,
            core_lesson=_sentence(rng),
            retrieval_query=_sentence(rng),
            source="policy",
        )
        memory.add_failure(
            f"bench/train/{i % (n_memories // 2 + 1):05d}", i // 100, ref, task_text=f"put a {_sentence(rng)}"
        )
    memory.commit()


def bench_retrieval(
    n_memories: int = 4000,
    n_queries: int = 200,
    max_candidates: int = 20,
    top_k: int = 3,
    seed: int = 0,
    taxonomy: Sequence[str] = FAILURE_TAXONOMY,
) -> dict[str, float]:
    """Retrieval cost with ``n_memories`` stored failures (synthetic ALFWorld-like
    reflections): SQLite insert + commit, index build, and per-query latency of
    pre-filter + Figure-9 prompt build + top-k selection. Times in seconds / ms."""
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        memory = FailureMemory(Path(tmp) / "failures.sqlite", taxonomy)
        t0 = time.perf_counter()
        _fill(memory, n_memories, taxonomy, rng)
        insert_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        retriever = Retriever(memory, "bm25", max_candidates=max_candidates, top_k=top_k)
        build_s = time.perf_counter() - t0
        lat = []
        for q in range(n_queries):
            ref = Reflection(
                dominant_type=taxonomy[q % len(taxonomy)],
                detail=_sentence(rng),
                core_lesson=_sentence(rng),
                retrieval_query=_sentence(rng),
            )
            t0 = time.perf_counter()
            cands = retriever.candidates(ref, exclude_task="bench/train/00000")
            retriever.messages(ref, cands)
            retriever.select(cands, None)
            lat.append(time.perf_counter() - t0)
        memory.close()
    arr = np.asarray(lat) * 1e3
    return {
        "n_memories": float(n_memories),
        "insert_commit_s": insert_s,
        "index_build_s": build_s,
        "query_ms_mean": float(arr.mean()),
        "query_ms_p50": float(np.percentile(arr, 50)),
        "query_ms_p95": float(np.percentile(arr, 95)),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=4000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    for key, value in bench_retrieval(n_memories=args.memories, n_queries=args.queries).items():
        print(f"{key:16s} {value:.4g}")
