"""Peak RSS of an Agent-R-like sequence under a fixed glibc mmap threshold
(``mmap_threshold_kb``; benchmarks/RESULTS.md, "Memory"): the ``agent_r_textcraft`` model
with its activation checkpointing, two prefills of 8 x 1,500 tokens (rows padded as a
batch of unequal prompts) and two SFT steps on a 2,000-token chat whose assistant turns
carry the loss. One process per threshold, since a process's peak never comes down:

    for kb in 0 1024 8192 32768; do python benchmarks/probe_mmap_threshold.py $kb; done

Prints one JSON line: the threshold (KiB; 0 = glibc's default), RSS before and the peak
(MB), and each step's seconds."""

from __future__ import annotations

import json
import random
import resource
import sys
import time

import torch

from roleagent.config import load_config
from roleagent.models.loading import policy_from_config
from roleagent.sft.data import EncodedExample
from roleagent.sft.train import sft_step_loss
from roleagent.trainer.memory import set_mmap_threshold


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(kb: int) -> None:
    if kb:
        set_mmap_threshold(kb)
    torch.set_num_threads(1)
    policy = policy_from_config(load_config("agent_r_textcraft").model, seed=0, init_from="")
    rng = random.Random(0)

    def prefill() -> None:
        ids = torch.tensor([[rng.randrange(100, 40000) for _ in range(1500)] for _ in range(8)])
        attention = torch.ones_like(ids)
        for row in range(8):
            attention[row, : (row * 37) % 400] = 0  # left padding, as a batch of unequal prompts
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        policy.model.eval()
        with torch.no_grad():
            policy.model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True,
                         logits_to_keep=1)  # fmt: skip

    def sft() -> None:
        ids = [rng.randrange(100, 40000) for _ in range(2000)]
        mask = [int(i >= 200 and (i - 200) % 450 < 48) for i in range(2000)]  # a 48-token turn every 450
        policy.model.train()
        sft_step_loss(policy, [EncodedExample(ids=ids, loss_mask=mask, prompts=[])], 512)

    before, seconds = rss_mb(), {}
    for name, step in (("prefill", prefill), ("sft", sft), ("prefill2", prefill), ("sft2", sft)):
        started = time.perf_counter()
        step()
        seconds[name] = round(time.perf_counter() - started, 1)
    print(json.dumps({"kb": kb, "base_mb": round(before), "peak_mb": round(rss_mb()), **seconds}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
