"""Peak RSS of a rollout-like generation, one configuration per process (a process's peak
never comes down; benchmarks/RESULTS.md, "Memory"): the policy loaded as a run loads it
(``load_policy``, LoRA rank 16, ``--init-from`` a checkpoint such as the main job's
``sft/final``), an ``HFEngine`` with the main recipe's prefix store, and 12 turns of 16
ALFWorld-style rows (``bench_engine.alfworld_prompt``, observations growing by ~20 tokens
a turn, ~300 → ~550 prompt tokens): each turn one generation constrained to the row's 13
commands at T = 0.9, then one free 40-token generation continuing the prompt (World-In-
Agent's prediction), as a main-job rollout turn does. One torch thread.

    python benchmarks/probe_rollout_memory.py --dtype fast --init-from RUN/sft/final
    python benchmarks/probe_rollout_memory.py --dtype fast --mmap-threshold-kb 8192 --init-from RUN/sft/final
    python benchmarks/probe_rollout_memory.py --dtype fast --arena 0   # transformers' DynamicCache
    python benchmarks/probe_rollout_memory.py --dtype fast --prefill-tokens 2048

Prints one JSON line: the settings, RSS after loading, the peak (``PhaseMemory`` sampling
every 20 ms, and ``ru_maxrss``), RSS at the end (no ``malloc_trim``) and the seconds of the
12 turns."""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch
from bench_engine import alfworld_prompt

from roleagent.engine import create_engine
from roleagent.engine.base import SamplingParams
from roleagent.engine.static_decode import HFEngineConfig
from roleagent.models.loading import load_policy
from roleagent.trainer.memory import PhaseMemory, resident_mb, set_mmap_threshold


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="fast")
    parser.add_argument("--prefix-tokens", type=int, default=8192)
    parser.add_argument("--mmap-threshold-kb", type=int, default=0)
    parser.add_argument("--init-from", default="")
    parser.add_argument("--arena", type=int, default=1, help="hf_engine.arena: 1 (default) or 0")
    parser.add_argument("--prefill-tokens", type=int, default=0, help="hf_engine.prefill_tokens")
    args = parser.parse_args(argv)
    if args.mmap_threshold_kb:
        set_mmap_threshold(args.mmap_threshold_kb)
    torch.set_num_threads(1)
    memory = PhaseMemory(0.02, release=False)
    with memory.phase("load"):
        policy = load_policy("embedded", dtype=args.dtype, lora_rank=16, init_from=args.init_from)
        engine = create_engine(
            "hf",
            policy,
            max_batch=32,
            max_prompt_tokens=2048,
            prefix_cache_tokens=args.prefix_tokens,
            settings=HFEngineConfig(arena=bool(args.arena), prefill_tokens=args.prefill_tokens),
        )
    with memory.phase("turns"):
        seconds = play(engine)
    m = memory.metrics()
    out = {"dtype": args.dtype, "prefix_tokens": args.prefix_tokens, "mmap_threshold_kb": args.mmap_threshold_kb}
    out |= {"arena": args.arena, "prefill_tokens": args.prefill_tokens}
    out |= {
        "loaded_mb": round(m["memory/turns_start_mb"]),
        "peak_mb": round(max(m["memory/load_peak_mb"], m["memory/turns_peak_mb"])),
    }
    out |= {"maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    print(json.dumps(out | {"end_mb": round(resident_mb()), "seconds": round(seconds, 1)}), flush=True)


def play(engine) -> float:
    """The 12 turns (module docstring); their seconds."""
    started, encode = time.perf_counter(), engine.tokenizer.encode
    for turn in range(12):
        prompts, allowed = [], []
        for i in range(16):
            messages, commands = alfworld_prompt(i + turn)
            messages[-1]["content"] += " You see nothing." * (5 * turn + i % 4)
            prompts.append(engine.encode_chat(messages))
            allowed.append([encode(c, add_special_tokens=False) for c in commands])
        engine.generate(prompts, SamplingParams(16, 0.9), allowed=allowed)
        engine.generate([p + encode(" Next:", add_special_tokens=False) for p in prompts], SamplingParams(40, 0.9))
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
