"""What one bf16 SFT step keeps for its backward, and whether its forward computes as the
rollout's: the mixed-precision wiring of ``roleagent.models.precision`` side by side.

The update and SFT run the decoder alone and the LM head on the positions they read
(``roleagent.trainer.samples.output_head``). Three arms, one process, the same weights and
examples:

- ``before``: the decoder's forward without autocast and peft's cast of each adapter input
  to fp32 (the wiring until 2026-12-07);
- ``peft cast``: the decoder autocasts, peft still casts;
- ``shipped``: both as ``autocast_forward`` sets them.

Per arm: the bytes of the tensors autograd saves in one step of ``--examples`` examples
(``torch.autograd.graph.saved_tensors_hooks``, each storage counted once, the tied
embedding weight included), the four kinds holding the most, and the log-probs of the loss
tokens against the model's own forward (the path the engine samples through)::

    python benchmarks/probe_saved_activations.py --data RUN/sft/expert.jsonl \\
        --init-from RUN/sft/final [--examples 4] [--micro-batch-tokens 512]

The adapters are given random nonzero ``lora_B`` weights (as after some training), so
that they change the log-probs. Needs a CPU that computes bf16 natively or a GPU
(``model.dtype: fast`` must resolve to bf16).
"""

from __future__ import annotations

import argparse
import collections

import torch


def saved_bytes(step) -> tuple[int, collections.Counter]:
    """Run ``step()`` under a saved-tensor hook; the bytes of the storages autograd kept
    over all its micro-batches (each once) and the same split by (dtype, last dimension)."""
    seen: dict[int, torch.UntypedStorage] = {}  # kept alive: a freed address is not reused
    by_kind: collections.Counter = collections.Counter()

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen[storage.data_ptr()] = storage
            by_kind[(str(t.dtype).removeprefix("torch."), t.shape[-1] if t.dim() else 1)] += storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(by_kind.values()), by_kind


def set_wiring(policy, *, decoder_autocast: bool, peft_cast: bool) -> None:
    """Undo or restore what ``autocast_forward`` sets on the decoder and the adapters."""
    from roleagent.models.precision import _autocast, _inner, compute_dtype

    decoder = _inner(policy.model).get_decoder()
    decoder.__dict__.pop("forward", None)  # the class's forward: no autocast
    if decoder_autocast:
        decoder.forward = _autocast(type(decoder).forward, compute_dtype(policy.model)).__get__(decoder)
    for layer in policy.model.modules():
        if hasattr(layer, "_cast_input_dtype"):
            layer.cast_input_dtype_enabled = peft_cast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="role_agent_alfworld")
    parser.add_argument("--data", required=True, help="SFT examples (JSONL), e.g. RUN/sft/expert.jsonl")
    parser.add_argument("--init-from", default="", help="weights under the adapters (an SFT checkpoint)")
    parser.add_argument("--examples", type=int, default=4)
    parser.add_argument("--micro-batch-tokens", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from roleagent.config import load_config
    from roleagent.models.precision import compute_dtype, master_params
    from roleagent.sft.data import encode_example
    from roleagent.sft.role_cli import load_engine
    from roleagent.sft.sources import read_examples
    from roleagent.sft.train import collate, sft_step_loss
    from roleagent.trainer.checks import prepare
    from roleagent.trainer.samples import token_logprobs

    sets = [f"threads={args.threads}", "model.dtype=fast", f"model.init_from={args.init_from}"]
    cfg = prepare(load_config(args.recipe, sets))
    policy, engine = load_engine(cfg, lora=True)
    if compute_dtype(policy.model) != torch.bfloat16:
        raise SystemExit("model.dtype=fast is fp32 on this machine: nothing to compare")
    master_params(policy.model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in policy.model.named_parameters():
            if "lora_B" in name:
                weight.copy_(torch.randn(weight.shape, generator=generator) * 0.02)
    examples = [encode_example(engine, e) for e in read_examples(args.data)[: args.examples]]
    ids, attention, positions, targets, mask, keep = collate(examples, policy.tokenizer.pad_token_id, policy.device)
    loss_tokens = mask > 0
    print(f"{len(examples)} examples, {sum(len(e.ids) for e in examples)} tokens, micro-batches of "
          f"<= {args.micro_batch_tokens} tokens, {int(loss_tokens.sum())} loss tokens")  # fmt: skip

    arms = {"before": (False, True), "peft cast": (True, True), "shipped": (True, False)}
    rows = {}
    for name, (decoder_autocast, peft_cast) in arms.items():
        set_wiring(policy, decoder_autocast=decoder_autocast, peft_cast=peft_cast)
        total, by_kind = saved_bytes(lambda: sft_step_loss(policy, examples, args.micro_batch_tokens))
        policy.model.zero_grad(set_to_none=True)
        with torch.no_grad():
            whole, _ = token_logprobs(policy.model, ids, attention, positions, targets, keep)
            split, _ = token_logprobs(policy.model, ids, attention, positions, targets, keep, where=loss_tokens)
        gap = (split - whole)[loss_tokens].abs()
        rows[name] = total
        widest = ", ".join(f"{d} x{w}: {b / 2**20:.0f}" for (d, w), b in by_kind.most_common(4))
        print(f"{name:10s} saved {total / 2**20:7.1f} MiB  (largest: {widest})  "
              f"log-prob gap to the model's forward: mean {gap.mean():.2e}, max {gap.max():.2e}")  # fmt: skip
    print(f"saved shipped / before = {rows['shipped'] / rows['before']:.3f}")


if __name__ == "__main__":
    main()
