"""The most that prompt-lookup drafts could save World-In-Agent's predictions, on this machine.

Prompt-lookup decoding (Saxena, 2023, "Prompt Lookup Decoding", github.com/apoorvumang/prompt-lookup-decoding;
speculative sampling: Leviathan et al., 2023, arXiv 2211.17192) drafts the next k tokens by
copying what followed the last occurrence of the generated text's last n-gram in the prompt,
and one forward over the last token and the k drafts checks them all. A trained predictor's
observations repeat the prompt's names ("You arrive at cabinet 1. The cabinet 1 is closed."),
so drafts often match. Issue "Episodes an order of magnitude cheaper", item 6, names it as
the way to fewer decode steps per prediction. Before building it into the engine, two numbers
bound its gain, both measured here:

- **tokens per step**: replaying a trained predictor's greedy answers (``predictor_sft.jsonl``
  of a run with ``sft.predictor``) against their prompts (``predictor_valid.jsonl``), a step
  emits the drafts up to the first mismatch plus one token. Greedy matching is the ceiling:
  a sampled row accepts a draft token with its probability, at most 1.
- **cost per step**: one cached forward over the last token and k drafts (logits at every
  position, as verification needs) against a plain decode step (logits of the last position),
  the same rows and cache, timed alternately (the cache cropped back after each).

The gain per prediction is at most tokens per step ÷ cost ratio; it prints one line per k.

    python benchmarks/probe_prompt_lookup.py --sft RUN/sft [--ks 2 4 6] [--batch 16] [--ngram 3] [--threads 2] [--dtype float32|bfloat16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from bench_engine import left_pad, load_model

from roleagent.engine.chat import encode_chat
from roleagent.models.loading import load_tokenizer


def draft(seq: list[int], ngram: int, k: int) -> list[int]:
    """The k tokens after the latest earlier occurrence of ``seq``'s last n-gram (n from
    ``ngram`` down to 1); [] without one. E.g. seq 5 6 7 1 5 6, ngram 2, k 2 -> [7, 1]."""
    for n in range(min(ngram, len(seq) - 1), 0, -1):
        tail = seq[-n:]
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start : start + n] == tail:
                return seq[start + n : start + n + k]
    return []


def replay(prompt: list[int], answer: list[int], ngram: int, k: int) -> int:
    """Steps to emit ``answer`` after ``prompt`` when each step accepts the matching drafts and one token."""
    seq, done, steps = list(prompt), 0, 0
    while done < len(answer):
        guess = draft(seq, ngram, k)
        accepted = 0
        while accepted < len(guess) and done + accepted < len(answer) and guess[accepted] == answer[done + accepted]:
            accepted += 1
        seq += answer[done : done + accepted + 1]
        done, steps = done + accepted + 1, steps + 1
    return steps


def pairs(sft: Path, tokenizer) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) of each held-out transition: the prediction prompt as the
    warm start encodes it, and the trained predictor's greedy answer with its closing tag and end of turn."""
    valid = [json.loads(line) for line in (sft / "predictor_valid.jsonl").read_text().splitlines()]
    answers = [json.loads(line) for line in (sft / "predictor_sft.jsonl").read_text().splitlines()]
    out = []
    for example, answer in zip(valid, answers):
        turns = example["messages"][:-1]
        prefix = example["messages"][-1].get("prefix", "")
        prompt = encode_chat(
            tokenizer, [{"role": m["role"], "content": m["content"]} for m in turns], response_prefix=prefix
        )
        text = answer["predictions"][0] + prefix.replace("<", "</", 1)
        out.append((prompt, tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]))
    return out


def step_cost(model, prompts: list[list[int]], pad: int, ks: list[int], repeats: int) -> dict[int, float]:
    """Median seconds of one cached forward over 1 + k tokens per row (k = 0: the plain
    decode step, last logits only), all on the same prefilled cache."""
    ids, attention = left_pad(prompts, pad, "cpu")
    with torch.no_grad():
        cache = model(input_ids=ids, attention_mask=attention, use_cache=True).past_key_values
        times: dict[int, list[float]] = {k: [] for k in [0, *ks]}
        for _ in range(repeats):
            for k in times:
                x = torch.randint(100, 1000, (len(prompts), 1 + k))
                mask = torch.cat([attention, attention.new_ones((len(prompts), 1 + k))], dim=1)
                started = time.perf_counter()
                model(
                    input_ids=x,
                    attention_mask=mask,
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=0 if k else 1,
                )
                times[k].append(time.perf_counter() - started)
                cache.crop(-(1 + k))  # back to the prefill (a negative count works in every transformers)
    return {k: statistics.median(t) for k, t in times.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sft", type=Path, required=True, help="a run's sft folder with predictor_valid.jsonl and predictor_sft.jsonl"
    )
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 4, 6])
    parser.add_argument("--ngram", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer("embedded")
    data = pairs(args.sft, tokenizer)
    tokens = sum(len(a) for _, a in data)
    prompt_mean = statistics.mean(len(p) for p, _ in data)
    print(
        f"{len(data)} transitions, {tokens} answer tokens ({tokens / len(data):.1f} each), prompts {prompt_mean:.0f} tokens"
    )
    model = load_model("embedded", "cpu", getattr(torch, args.dtype))
    cost = step_cost(model, [p for p, _ in data[: args.batch]], tokenizer.pad_token_id, args.ks, args.repeats)
    print(f"plain decode step at batch {args.batch}, {args.dtype}: {cost[0] * 1000:.0f} ms")
    for k in args.ks:
        per_step = tokens / sum(replay(p, a, args.ngram, k) for p, a in data)
        ratio = cost[k] / cost[0]
        print(
            f"k = {k}: {per_step:.2f} tokens per step (greedy ceiling), step cost {ratio:.2f}x the plain step, "
            f"prompt-lookup / plain decoding time per prediction at batch {args.batch} >= {ratio / per_step:.2f}"
        )


if __name__ == "__main__":
    main()
