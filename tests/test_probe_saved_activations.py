"""benchmarks/probe_saved_activations.py's two parts on the tiny model in bf16: undoing the
shipped wiring brings back the fp32 adapter path (log-probs apart from the model's own
forward, more saved for the backward), and restoring it gives the model's numbers again."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from probe_saved_activations import saved_bytes, set_wiring  # noqa: E402

from roleagent.models.loading import load_policy  # noqa: E402
from roleagent.models.precision import master_params  # noqa: E402
from roleagent.trainer.samples import token_logprobs  # noqa: E402


def test_the_old_wiring_saves_more_and_computes_otherwise_than_the_shipped_one():
    policy = load_policy("tiny", device="cpu", dtype="bfloat16", lora_rank=4, seed=0)
    master_params(policy.model)
    with torch.no_grad():
        for name, weight in policy.model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.05, generator=torch.Generator().manual_seed(0))
    ids = torch.randint(5, 200, (2, 32), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    positions, targets = attention.cumsum(-1) - 1, ids[:, -6:]
    where = torch.ones(2, 6, dtype=torch.bool)

    def run(**wiring):
        set_wiring(policy, **wiring)
        total, by_kind = saved_bytes(
            lambda: token_logprobs(policy.model, ids, attention, positions, targets, 6, where=where)[0].sum().backward()
        )
        with torch.no_grad():
            whole, _ = token_logprobs(policy.model, ids, attention, positions, targets, 6)
            split, _ = token_logprobs(policy.model, ids, attention, positions, targets, 6, where=where)
        return total, by_kind, (split - whole).abs().max().item()

    before, shipped = run(decoder_autocast=False, peft_cast=True), run(decoder_autocast=True, peft_cast=False)
    assert before[2] > 0 and shipped[2] == 0.0
    assert shipped[0] < before[0] and sum(b for (dtype, _), b in shipped[1].items() if dtype == "float32") < sum(
        b for (dtype, _), b in before[1].items() if dtype == "float32"
    )
