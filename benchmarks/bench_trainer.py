"""Trainer throughput: ``Updater.update`` vs a bare forward/backward loop on the same batch.

Both sides train the embedded model (LoRA r=16 by default) on the same samples — prompts
and generations of the sizes a CPU Role-Agent iteration produces — with the same micro-batch
packing and one AdamW step. The bare loop is the floor: left-padded batch, forward on the
last K positions, a plain advantage-weighted log-likelihood, backward, step. The ratio is
what the PPO loss, metrics and bookkeeping cost.

    python benchmarks/bench_trainer.py [--samples 32] [--prompt 200] [--output 16] [--full]
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from roleagent.config import OptimConfig
from roleagent.models.loading import load_policy
from roleagent.trainer.samples import TrainSample, collate, micro_batches, token_logprobs
from roleagent.trainer.update import Updater


def make_samples(n: int, prompt: int, output: int, vocab: int, seed: int = 0) -> list[TrainSample]:
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        p = prompt + rng.randint(-prompt // 4, prompt // 4)
        o = max(2, output + rng.randint(-output // 4, output // 4))
        samples.append(
            TrainSample(
                [rng.randrange(vocab) for _ in range(p)],
                [rng.randrange(vocab) for _ in range(o)],
                [-2.0] * o,
                1.0 if i % 2 else -1.0,
            )
        )
    return samples


def bare_loop(policy, samples, optimizer, token_budget: int) -> int:
    """The minimum: forward, weighted log-likelihood, backward, one optimizer step."""
    model, pad = policy.model, policy.tokenizer.pad_token_id
    model.train()
    optimizer.zero_grad(set_to_none=True)
    n_tokens = sum(len(s.output_ids) for s in samples)
    trained = 0
    for micro in micro_batches(samples, token_budget):
        *tensors, keep = collate(micro, pad, policy.device)
        input_ids, attention, positions, targets, _, mask, advantages = tensors
        logprobs, _ = token_logprobs(model, input_ids, attention, positions, targets, keep)  # (B, K)
        loss = -(logprobs * mask * advantages[:, None]).sum() / n_tokens
        loss.backward()
        trained += int(attention.sum())
    optimizer.step()
    return trained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=200)
    parser.add_argument("--output", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=2048, help="micro-batch token budget")
    parser.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA r=16")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    policy = load_policy("embedded", device="cpu", lora_rank=0 if args.full else 16)
    samples = make_samples(args.samples, args.prompt, args.output, len(policy.tokenizer))
    cfg = OptimConfig(lr=1e-5, micro_batch_tokens=args.tokens)
    updater = Updater(policy, cfg)
    bare_optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=1e-5)

    results = {"roleagent Updater.update": [], "bare forward/backward": []}
    for _ in range(args.repeats):  # interleaved, so drift hits both sides alike
        started = time.perf_counter()
        metrics = updater.update(samples, random.Random(0))
        results["roleagent Updater.update"].append((metrics["trained_tokens"], time.perf_counter() - started))
        started = time.perf_counter()
        trained = bare_loop(policy, samples, bare_optimizer, args.tokens)
        results["bare forward/backward"].append((trained, time.perf_counter() - started))

    mode = "full fine-tuning" if args.full else "LoRA r=16"
    print(
        f"embedded SmolLM2-135M, {mode}, {args.samples} samples x ~{args.prompt}+{args.output} tokens, "
        f"micro-batch budget {args.tokens}, torch threads {torch.get_num_threads()}"
    )
    rates = {}
    for name, runs in results.items():
        tokens = sum(t for t, _ in runs)
        seconds = sum(s for _, s in runs)
        rates[name] = tokens / seconds
        print(
            f"{name:28s} {tokens / len(runs):8.0f} tokens/update  {seconds / len(runs):7.2f} s  {rates[name]:7.1f} tokens/s"
        )
    print(f"Updater / bare = {rates['roleagent Updater.update'] / rates['bare forward/backward']:.3f} (tokens/s ratio)")


if __name__ == "__main__":
    main()
