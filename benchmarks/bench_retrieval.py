"""Agent-In-World retrieval latency per failed episode with 4,000 stored failures.

SQLite insert + commit of the memories, index build, then per failure: candidate
pre-filter (failure type + BM25 over reflections), Figure-9 prompt construction and top-k
selection — everything but the LLM call itself.

    python benchmarks/bench_retrieval.py [--memories 4000]
"""

import argparse

from roleagent.methods.role_agent.aiw import bench_retrieval

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=4000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    for key, value in bench_retrieval(n_memories=args.memories, n_queries=args.queries).items():
        print(f"{key:16s} {value:.4g}")
