"""fp32 against bf16 compute on this machine, side by side in one process: what
``model.dtype: fast`` buys (``roleagent.models.loading.resolve_dtype``) and what it changes.

Both policies are loaded as a run loads them (``load_policy``: the embedded SmolLM2-135M-Instruct,
or ``--init-from`` a checkpoint such as the main job's ``sft/final``, with fresh LoRA adapters of
rank 16 on the attention projections; bf16: base weights in bf16, every forward under autocast,
the adapters fp32 master weights, ``roleagent.models.precision``). On B ALFWorld-style actor
prompts (``bench_engine.alfworld_prompt``, ~290 tokens, each with its 13 admissible commands),
the phases of an RL iteration are timed, best of ``--repeats`` after a warm-up, the two dtypes
interleaved so that a slow moment of a shared machine hits both:

- **greedy step**: ``HFEngine.generate`` at T = 0 constrained to the admissible commands (an
  evaluation turn: one prefill of every prompt, a few decode steps);
- **sampled step**: the same at T = 0.9 (a rollout turn);
- **train step**: one LoRA forward, backward and AdamW step over the B prompts with their
  greedy commands as targets (the update's and SFT's work per sample).

Then what bf16 changes: how many of the B greedy commands equal fp32's, and the mean and largest
|log π_bf16 − log π_fp32| over the commands' tokens (the gap ``optim.recompute_old_logprobs``
keeps out of the PPO ratio when rollouts and training run in bf16). It prints whether this CPU
computes bf16 natively (``cpu_computes_bf16``: AVX512-BF16 or AMX); where it does not, bf16 is
emulated and the ratios come out far above 1. One line per phase ``bf16 / fp32 time, PHASE = R``.

    python benchmarks/bench_precision.py [--batch 16] [--repeats 3] [--threads 2] [--init-from DIR] [--model embedded]
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_engine import alfworld_prompt, left_pad

from roleagent.engine import create_engine
from roleagent.engine.base import SamplingParams
from roleagent.models.loading import cpu_computes_bf16, load_policy
from roleagent.models.precision import master_params

DTYPES = ("float32", "bfloat16")


def command_batch(engine, prompts: list[list[int]], commands: list[list[int]]):
    """Input ids, attention mask (``bench_engine.left_pad``, as the engine pads) and labels
    (-100 outside the command) of prompt + command rows."""
    ids, mask = left_pad(
        [p + c for p, c in zip(prompts, commands)], engine.tokenizer.pad_token_id, engine.policy.device
    )
    labels = torch.full_like(ids, -100)
    for i, c in enumerate(commands):
        labels[i, ids.shape[1] - len(c) :] = torch.tensor(c)
    return ids, mask, labels


@torch.no_grad()
def command_logprobs(model, batch) -> list[list[float]]:
    """log π of each command token under ``model`` (T = 1), per row."""
    ids, mask, labels = batch
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    keep = labels[:, 1:] != -100
    return [row[k].tolist() for row, k in zip(logp, keep)]


def run(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    states = [alfworld_prompt(i) for i in range(args.batch)]
    setups = {}
    for name in DTYPES:
        policy = load_policy(args.model, dtype=name, lora_rank=16, init_from=args.init_from)
        engine = create_engine("hf", policy, max_batch=args.batch, max_prompt_tokens=4096)
        tok = engine.tokenizer
        prompts = [engine.encode_chat(messages) for messages, _ in states]
        allowed = [[tok.encode(a + "</action>", add_special_tokens=False) for a in adm] for _, adm in states]
        params = master_params(policy.model)
        setups[name] = (policy, engine, prompts, allowed, torch.optim.AdamW(params, lr=1e-6))
    longest = max(len(seq) for row in setups["float32"][3] for seq in row)
    greedy = SamplingParams(max_new_tokens=longest, temperature=0.0)
    sampled = SamplingParams(max_new_tokens=longest, temperature=0.9)

    commands = {name: [g.ids for g in st[1].generate(st[2], greedy, st[3])] for name, st in setups.items()}
    fp32, bf16 = setups["float32"], setups["bfloat16"]
    reference = command_batch(fp32[1], fp32[2], commands["float32"])  # before any training step
    gaps = [
        abs(a - b)
        for ra, rb in zip(command_logprobs(fp32[0].model, reference), command_logprobs(bf16[0].model, reference))
        for a, b in zip(ra, rb)
    ]

    def phases(name):
        policy, engine, prompts, allowed, optimizer = setups[name]
        batch = command_batch(engine, prompts, commands[name])

        def train_step():
            policy.model.train()
            out = policy.model(input_ids=batch[0], attention_mask=batch[1], labels=batch[2])
            out.loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            policy.model.eval()

        return {
            "greedy step": lambda: engine.generate(prompts, greedy, allowed),
            "sampled step": lambda: engine.generate(prompts, sampled, allowed),
            "train step": train_step,
        }

    calls = {name: phases(name) for name in DTYPES}
    best = {(name, phase): float("inf") for name in DTYPES for phase in calls[name]}
    for name in DTYPES:  # warm-up
        for call in calls[name].values():
            call()
    for _ in range(args.repeats):
        for name in DTYPES:
            for phase, call in calls[name].items():
                start = time.perf_counter()
                call()
                best[name, phase] = min(best[name, phase], time.perf_counter() - start)

    mean_prompt = sum(map(len, fp32[2])) / len(fp32[2])
    print(
        f"{args.model}{' from ' + args.init_from if args.init_from else ''}, LoRA r 16, "
        f"{args.batch} prompts of {mean_prompt:.0f} tokens, {torch.get_num_threads()} threads, "
        f"best of {args.repeats}; this CPU computes bf16 natively: {cpu_computes_bf16()}"
    )
    for phase in ("greedy step", "sampled step", "train step"):
        a, b = best["float32", phase], best["bfloat16", phase]
        print(f"  {phase:13s} fp32 {a:6.2f} s   bf16 {b:6.2f} s")
    for phase in ("greedy step", "sampled step", "train step"):
        print(f"bf16 / fp32 time, {phase} = {best['bfloat16', phase] / best['float32', phase]:.2f}")
    same = sum(a == b for a, b in zip(commands["float32"], commands["bfloat16"]))
    print(f"greedy commands equal in bf16 and fp32: {same}/{args.batch}")
    print(
        f"|log pi bf16 - log pi fp32| over {len(gaps)} command tokens: mean {sum(gaps) / len(gaps):.4f}, "
        f"max {max(gaps):.4f} nats"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--model", default="embedded", help="model.name: embedded (SmolLM2-135M), tiny (tests), a folder"
    )
    parser.add_argument("--init-from", default="", help="a checkpoint (e.g. RUN/sft/final); default the base model")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
