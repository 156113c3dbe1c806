"""Automatic prefix KV reuse in HFEngine: the same generations with and without reuse.

Two patterns, each run by an engine without reuse and one with ``prefix_cache_tokens``,
with the same seed (the generated tokens are compared, and must match):

(a) World-In-Agent: a batch of action prompts (ALFWorld-like, built with
    ``actor_messages``) generating actions, then prediction prompts that continue
    prompt + action with a prediction request; times the prediction pass.
(b) A growing multi-turn conversation (each turn's prompt extends the previous prompt,
    its generation and a new observation); generated tokens/s over all turns.

    python benchmarks/bench_prefix_cache.py [--threads 1] [--batch 8] [--turns 6]
"""

from __future__ import annotations

import argparse
import time

import torch

from roleagent.engine.hf import HFEngine, SamplingParams
from roleagent.models.loading import load_policy
from roleagent.rollout.actor import RESPONSE_PREFIX, actor_messages

ROOMS = [
    "cabinet",
    "countertop",
    "drawer",
    "fridge",
    "garbagecan",
    "microwave",
    "shelf",
    "sinkbasin",
    "stoveburner",
    "toaster",
    "coffeemachine",
    "diningtable",
]
TASKS = [
    "put a clean egg in microwave",
    "heat some mug and put it in cabinet",
    "cool a tomato in fridge",
    "put two soapbar in garbagecan",
    "examine the book with the desklamp",
    "put a hot apple in fridge",
    "clean some knife and put it in drawer",
    "find two pencil and put them in shelf",
]


def action_prompt(engine: HFEngine, i: int) -> list[int]:
    """An ALFWorld-like actor prompt of ~350 tokens (task, history, observation, actions)."""
    seen = ", ".join(f"a {ROOMS[(i + k) % len(ROOMS)]} {k % 3 + 1}" for k in range(9))
    rooms = [ROOMS[(i + k) % len(ROOMS)] for k in range(3)]
    history = [
        (f"go to {room} 1", f"You arrive at {room} 1. On it, you see a {TASKS[k].split()[-1]} {k + 1}.")
        for k, room in enumerate(rooms)
    ]
    admissible = [f"go to {r} {k}" for r in ROOMS for k in (1, 2)][:20] + ["inventory", "look"]
    messages = actor_messages(
        instruction=f"You are in the middle of a room. Looking quickly around you, you see {seen}.\n"
        f"Your task is to: {TASKS[i % len(TASKS)]}.",
        observation=f"You arrive at {ROOMS[i % len(ROOMS)]} 2. The {ROOMS[i % len(ROOMS)]} 2 is closed.",
        history=history,
        admissible=admissible,
        action_format="action",
    )
    return engine.encode_chat(messages, response_prefix=RESPONSE_PREFIX["action"])


REQUEST = (
    "Before acting, predict the observation the environment will show after this action, "
    "in this format: <state1>...</state1>"
)


def timed(engine: HFEngine, prompts, params, seed):
    engine.seed(seed)
    start = time.perf_counter()
    out = engine.generate(prompts, params)
    return out, time.perf_counter() - start


def wia(engines, batch: int):
    """(a): seconds of the prediction pass per engine; checks both emit the same tokens."""
    times, outs = [], []
    for engine in engines:
        prompts = [action_prompt(engine, i) for i in range(batch)]
        actions, _ = timed(engine, prompts, SamplingParams(16, 1.0, stop=("</action>",)), seed=1)
        predictions = [
            engine.extend_chat(p, a.ids, [{"role": "user", "content": REQUEST}], response_prefix="<state1>")
            for p, a in zip(prompts, actions)
        ]
        out, seconds = timed(engine, predictions, SamplingParams(24, 1.0, stop=("</state1>",)), seed=2)
        times.append(seconds)
        outs.append([a.ids + g.ids for a, g in zip(actions, out)])
    sizes = (sum(map(len, prompts)) / batch, sum(map(len, predictions)) / batch)
    return times, outs[0] == outs[1], sizes


def conversation(engines, batch: int, turns: int):
    """(b): generated tokens/s over ``turns`` growing turns per engine."""
    rates, outs = [], []
    for engine in engines:
        prompts = [action_prompt(engine, i) for i in range(batch)]
        seconds, generated, ids = 0.0, 0, []
        for turn in range(turns):
            out, t = timed(engine, prompts, SamplingParams(24, 1.0), seed=10 + turn)
            seconds += t
            generated += sum(len(g.ids) for g in out)
            ids.append([g.ids for g in out])
            obs = [
                {
                    "role": "user",
                    "content": f"Observation {turn}: You open the {ROOMS[turn]} 1. In it, you see nothing.",
                }
            ]
            prompts = [engine.extend_chat(p, g.ids, obs, response_prefix="<action>") for p, g in zip(prompts, out)]
        rates.append(generated / seconds)
        outs.append(ids)
    return rates, outs[0] == outs[1], sum(map(len, prompts)) / batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="1 is steadiest on a shared CPU")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--conversations", type=int, default=4, help="batch of (b)")
    parser.add_argument("--budget", type=int, default=32768, help="prefix_cache_tokens of the reusing engine")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy("embedded", device="cpu", dtype="float32")
    cfg = policy.model.config
    per_token = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4

    plain, reuse = HFEngine(policy), HFEngine(policy, prefix_cache_tokens=args.budget)
    start = time.perf_counter()
    (t_plain, t_reuse), same, (n_action, n_pred) = wia([plain, reuse], args.batch)
    print(
        f"(a) WIA: {args.batch} action prompts of ~{n_action:.0f} tokens, prediction prompts ~{n_pred:.0f} tokens; "
        f"prediction pass {t_plain:.2f}s without reuse, {t_reuse:.2f}s with; same tokens: {same}; "
        f"prefilled {plain.prompt_tokens} vs {reuse.prompt_tokens} (+{reuse.reused_prompt_tokens} reused)"
    )
    print(f"prediction pass with reuse / without = {t_reuse / t_plain:.3f}")
    store = reuse.prefix_cache
    print(
        f"store after (a): {len(store)} sequences, {store.tokens} tokens, {store.nbytes / 2**20:.1f} MiB "
        f"({store.nbytes / max(store.tokens, 1):.0f} B/token; config says {per_token} B/token)"
    )

    plain, reuse = HFEngine(policy), HFEngine(policy, prefix_cache_tokens=args.budget)
    (r_plain, r_reuse), same, final = conversation([plain, reuse], args.conversations, args.turns)
    print(
        f"(b) {args.turns}-turn conversation, batch {args.conversations}, final prompt ~{final:.0f} tokens: "
        f"{r_plain:.1f} generated tokens/s without reuse, {r_reuse:.1f} with; same tokens: {same}; "
        f"prefilled {plain.prompt_tokens} vs {reuse.prompt_tokens} (+{reuse.reused_prompt_tokens} reused)"
    )
    print(f"conversation generated tokens/s with reuse / without = {r_reuse / r_plain:.3f}")
    print(
        f"store after (b): {reuse.prefix_cache.tokens} tokens, {reuse.prefix_cache.nbytes / 2**20:.1f} MiB; "
        f"benchmark {time.perf_counter() - start:.0f}s at {args.threads} thread(s)"
    )


if __name__ == "__main__":
    main()
