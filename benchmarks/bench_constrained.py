"""Constrained decoding's arithmetic: the restricted distribution computed over the allowed
tokens only (``roleagent.engine.constrain``) vs masking the rest of the vocabulary.

The reference is what the engine and the trainer did before: every forbidden logit set to
float32 min, then a softmax (and, to sample, ``torch.multinomial``) over all V tokens. The
two are the same distribution; the reference is slow on a CPU because ``exp`` of the
masked entries (after subtracting the maximum, below −88) takes the slow underflow path,
and ``torch.multinomial`` over V costs milliseconds per row.

Measured side by side, at the embedded model's vocabulary (V = 49,152), on logits drawn
as N(0, 3²) (a spread like a small instruct model's): one sampling step of ``--rows`` rows
each restricted to ``--allowed`` tokens (an ALFWorld state offers ~9 commands whose first
tokens differ), and the trainer's log-probs with entropy and their backward over
``--batch`` × ``--positions`` constrained positions. Then the LM head in front of those log-probs: the logits of
every vocabulary row (``hidden @ Wᵀ``, what the model's forward computes) against
``HeadLogits``, which computes only the allowed rows' (the update's path for constrained
samples, ``roleagent.trainer.samples.token_logprobs``), with the backward into the hidden
states and W (trained, or frozen as under LoRA), at the tiny test model's width (64) and
the embedded model's (576). Last, an SFT loss over chats (``--chat-rows`` × ``--chat-positions``
free positions, a ``--loss-share`` of them loss-masked, as the observations between a chat's
assistant turns are not): the head at every position and the mask applied after, against
``restricted_logprobs(where=mask)``, which computes the rows of the loss positions only (what
``roleagent.sft.train`` does). Checks that the log-probs agree (≤ 1e-5; the heads ≤ 1e-4) and
that greedy picks the same token; prints the times and their ratio.

    python benchmarks/bench_constrained.py [--rows 16] [--allowed 9] [--batch 32] [--positions 8] [--hidden 64 576]
        [--chat-rows 4] [--chat-positions 512] [--loss-share 0.2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from roleagent.engine.constrain import NEG, HeadLogits, restricted_logprobs, sample_rows

VOCAB = 49152


def masked(logits: torch.Tensor, allowed: dict) -> torch.Tensor:
    """The reference: forbidden logits set to float32 min (the previous ``restrict_logits``)."""
    keep = torch.zeros_like(logits, dtype=torch.bool)
    for position, ids in allowed.items():
        keep[position + (torch.tensor(ids),)] = True
    constrained = torch.zeros(logits.shape[:-1], dtype=torch.bool)
    for position in allowed:
        constrained[position] = True
    return logits.masked_fill(constrained[..., None] & ~keep, NEG)


def reference_sample(logits: torch.Tensor, allowed: dict, generator) -> tuple[torch.Tensor, torch.Tensor]:
    logprobs = torch.log_softmax(masked(logits, allowed), dim=-1)
    tokens = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


def reference_logprobs(logits: torch.Tensor, allowed: dict, targets: torch.Tensor):
    z = masked(logits, allowed)
    log_p = torch.log_softmax(z, dim=-1)
    entropy = torch.logsumexp(z, -1) - (torch.softmax(z, -1) * z).sum(-1)
    return log_p.gather(-1, targets[..., None]).squeeze(-1), entropy


def timed(fn, repeats: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--allowed", type=int, default=9)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--positions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hidden", type=int, nargs="*", default=[64, 576], help="LM-head widths (tiny, embedded)")
    parser.add_argument("--chat-rows", type=int, default=4)
    parser.add_argument("--chat-positions", type=int, default=512)
    parser.add_argument("--loss-share", type=float, default=0.2, help="share of a chat's positions in the SFT loss")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    logits = torch.randn(args.rows, VOCAB) * 3.0
    allowed = {(r,): sorted(torch.randperm(VOCAB)[: args.allowed].tolist()) for r in range(args.rows)}
    generator = torch.Generator().manual_seed(0)
    ref = reference_sample(logits, allowed, generator)
    ours = sample_rows(logits, allowed, greedy=False, generator=generator)
    for tokens, logprobs in (ref, ours):  # each draw's log-prob under the other's maths
        check = torch.log_softmax(masked(logits, allowed), -1).gather(-1, tokens[:, None]).squeeze(-1)
        assert torch.allclose(check, logprobs, atol=1e-5), "the sampled log-probs disagree"
    greedy = sample_rows(logits, allowed, greedy=True)[0]
    assert torch.equal(greedy, torch.log_softmax(masked(logits, allowed), -1).argmax(-1)), "greedy disagrees"
    t_ref = timed(lambda: reference_sample(logits, allowed, generator), args.repeats)
    t_new = timed(lambda: sample_rows(logits, allowed, greedy=False, generator=generator), args.repeats)
    print(f"sampling step, {args.rows} rows x {args.allowed} allowed of V={VOCAB}:")
    print(f"  masked softmax + multinomial over V: {t_ref * 1e3:8.2f} ms")
    print(f"  over the allowed tokens:             {t_new * 1e3:8.2f} ms   ratio {t_ref / t_new:.1f}x")

    b, k = args.batch, args.positions
    train_logits = (torch.randn(b, k, VOCAB) * 3.0).requires_grad_(True)
    train_allowed = {(i, j): sorted(torch.randperm(VOCAB)[: args.allowed].tolist()) for i in range(b) for j in range(k)}
    targets = torch.tensor([[train_allowed[(i, j)][0] for j in range(k)] for i in range(b)])
    a, ea = reference_logprobs(train_logits, train_allowed, targets)
    c, ec = restricted_logprobs(train_logits, train_allowed, targets, with_entropy=True)
    assert torch.allclose(a, c, atol=1e-5) and torch.allclose(ea, ec, atol=1e-4), "the trainer's log-probs disagree"

    def step(fn):
        def run():
            train_logits.grad = None
            logprobs, entropy = fn()
            (logprobs.sum() + 0.01 * entropy.sum()).backward()

        return run

    t_ref = timed(step(lambda: reference_logprobs(train_logits, train_allowed, targets)), args.repeats)
    t_new = timed(
        step(lambda: restricted_logprobs(train_logits, train_allowed, targets, with_entropy=True)), args.repeats
    )
    print(f"trainer log-probs + entropy + backward, {b} x {k} constrained positions:")
    print(f"  masked softmax over V:    {t_ref * 1e3:8.1f} ms")
    print(f"  over the allowed tokens:  {t_new * 1e3:8.1f} ms   ratio {t_ref / t_new:.1f}x")

    for hidden_size, trained in [(h, t) for h in args.hidden for t in (True, False)]:  # W trained, or frozen (LoRA)
        hidden = (torch.randn(b, k, hidden_size) / hidden_size**0.5).requires_grad_(True)
        weight = torch.randn(VOCAB, hidden_size, requires_grad=trained)

        def head_step(lazy: bool, hidden=hidden, weight=weight):
            def run():
                hidden.grad = weight.grad = None
                z = HeadLogits(hidden, weight, None) if lazy else hidden @ weight.T  # (B, K, V) when dense
                logprobs, entropy = restricted_logprobs(z, train_allowed, targets, with_entropy=True)
                (logprobs.sum() + 0.01 * entropy.sum()).backward()
                return logprobs.detach()

            return run

        dense, lazy = head_step(False)(), head_step(True)()
        assert torch.allclose(dense, lazy, atol=1e-4), "the allowed-rows head disagrees with the dense head"
        t_ref = timed(head_step(False), args.repeats)
        t_new = timed(head_step(True), args.repeats)
        what = "W trained" if trained else "W frozen (LoRA)"
        print(f"LM head + trainer log-probs + backward, {b} x {k} constrained positions, H = {hidden_size}, {what}:")
        print(f"  every row of W (B·K·V logits):  {t_ref * 1e3:8.1f} ms")
        print(f"  the allowed rows (HeadLogits):  {t_new * 1e3:8.1f} ms   ratio {t_ref / t_new:.1f}x")
    sft_heads(args)


def sft_heads(args) -> None:
    """An SFT loss over chats: the head at every position, the mask applied after, against
    ``restricted_logprobs(where=mask)`` (module docstring)."""
    rows, positions = args.chat_rows, args.chat_positions
    chat_targets = torch.randint(0, VOCAB, (rows, positions))
    loss_mask = torch.rand(rows, positions, generator=torch.Generator().manual_seed(0)) < args.loss_share
    for hidden_size in args.hidden:
        hidden = (torch.randn(rows, positions, hidden_size) / hidden_size**0.5).requires_grad_(True)
        weight = torch.randn(VOCAB, hidden_size, requires_grad=True)

        def sft_step(masked: bool, hidden=hidden, weight=weight):
            def run():
                hidden.grad = weight.grad = None
                z = HeadLogits(hidden, weight, None) if masked else hidden @ weight.T
                logprobs, _ = restricted_logprobs(z, {}, chat_targets, where=loss_mask if masked else None)
                (logprobs * loss_mask).sum().backward()
                return logprobs.detach() * loss_mask

            return run

        dense, lazy = sft_step(False)(), sft_step(True)()
        assert torch.allclose(dense, lazy, atol=1e-4), "the loss positions' head disagrees with the whole head"
        t_ref = timed(sft_step(False), args.repeats)
        t_new = timed(sft_step(True), args.repeats)
        share = float(loss_mask.float().mean())
        print(
            f"SFT head + log-probs + backward, {rows} x {positions} chat positions ({share:.0%} in the loss), H = {hidden_size}:"
        )
        print(f"  every position:                 {t_ref * 1e3:8.1f} ms")
        print(f"  the loss positions (where=):    {t_new * 1e3:8.1f} ms   ratio {t_ref / t_new:.1f}x")


if __name__ == "__main__":
    main()
