"""Supervised fine-tuning on chat examples: token-mean cross-entropy over loss-masked tokens.

One optimizer step takes ``batch_examples`` examples (shuffled each epoch with a seed of
its own, so a resumed run sees the same order) and minimises

    L = - Σ_{tokens t with mask 1} log π(x_t | x_<t) / (number of such tokens in the step)

in micro-batches of at most ``micro_batch_tokens`` padded tokens (rows of similar length
packed together, ``roleagent.trainer.samples.micro_batches``), each micro-batch's sum
divided by the step's token count before ``backward``, so accumulation changes nothing.
Log-probs come from ``roleagent.trainer.samples.token_logprobs`` at temperature 1.
Worked example: two examples with 3 and 1 target tokens of log-probs (-1, -2, -3) and
(-6) give L = (1 + 2 + 3 + 6) / 4 = 3 whatever the micro-batching (``tests/test_sft.py``).

With ``sft.role_epochs`` = k > 0, the first k passes take every example and the later
ones only the acting policy's (``epoch_plan``), so the roles' examples (predictor, analyst,
...) are learned first and the policy's have the last word.

Output folder (``out``)::

    checkpoints/iter_00000k/   after epoch k (``roleagent.trainer.checkpoint``: weights or
                               adapters, AdamW state, the data's digest); a rerun resumes;
                               ``iter_00000k/adapter`` (LoRA) or ``iter_00000k`` (all
                               weights) is that epoch's policy for ``model.init_from``
    metrics.jsonl              one record per epoch: loss, tokens/s, peak RSS
    final/                     the policy for ``model.init_from``: LoRA adapters
                               (``save_pretrained``) + ``roleagent_sft.json`` naming the
                               base, or a full ``save_pretrained`` model; ``done.json`` last

A run whose ``final/done.json`` exists is not redone; a torn ``metrics.jsonl`` line (a kill or
a full disk) is skipped on resume, with a note. ``roleagent sft`` holds ``out/.lock``.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from pathlib import Path

import torch

from roleagent.models.loading import SFT_INFO, Policy, sft_info
from roleagent.models.precision import master_params
from roleagent.progress import bar, phase
from roleagent.sft.data import EncodedExample
from roleagent.trainer.checkpoint import CheckpointError, apply_checkpoint, find_checkpoint, save_checkpoint
from roleagent.trainer.metrics import peak_rss_mb
from roleagent.trainer.optimizer import Optimizer
from roleagent.trainer.samples import micro_batches, token_logprobs

DONE = "done.json"


def final_dir(out: str | Path) -> Path:
    return Path(out) / "final"


def is_finished(out: str | Path) -> bool:
    return (final_dir(out) / DONE).is_file()


def data_digest(examples: list[EncodedExample], roles: list[bool] | None = None, role_epochs: int = 0) -> str:
    """What a resumed run must have trained on: the examples, and with ``role_epochs`` which are the roles'."""
    digest = hashlib.sha256()
    for e in examples:
        digest.update(json.dumps([e.ids, e.loss_mask]).encode())
    if role_epochs:
        digest.update(json.dumps([role_epochs, roles]).encode())
    return digest.hexdigest()


def epoch_plan(roles: list[bool], epochs: int, role_epochs: int) -> list[list[int]]:
    """The example indices of each pass (``sft.role_epochs``): every example in the first
    ``role_epochs`` passes, then only the policy's (``roles[i]`` false); every pass on
    every example at 0. No policy example for a later pass: ValueError. E.g. 3 epochs,
    role_epochs 1, the second of three examples a role's:

    >>> epoch_plan([False, True, False], 3, 1)
    [[0, 1, 2], [0, 2], [0, 2]]
    """
    every = list(range(len(roles)))
    policy = [i for i in every if not roles[i]]
    if role_epochs and role_epochs < epochs and not policy:
        raise ValueError(f"sft.role_epochs={role_epochs} < sft.epochs={epochs}, but every example is a role's")
    return [every if not role_epochs or epoch < role_epochs else policy for epoch in range(epochs)]


def collate(examples: list[EncodedExample], pad_id: int, device: torch.device):
    """Left-padded rows; targets and mask over the last K positions, K reaching back to
    the earliest loss token of any row. Returns input_ids, attention, positions (B, L),
    targets, mask (B, K) and K."""
    width = max(len(e.ids) for e in examples)
    keep = max(len(e.ids) - e.loss_mask.index(1) for e in examples)
    n = len(examples)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)  # (B, L)
    attention = torch.zeros((n, width), dtype=torch.long)  # (B, L)
    targets = torch.full((n, keep), pad_id, dtype=torch.long)  # (B, K)
    mask = torch.zeros((n, keep))  # (B, K)
    for row, e in enumerate(examples):
        input_ids[row, width - len(e.ids) :] = torch.tensor(e.ids)
        attention[row, width - len(e.ids) :] = 1
        k = min(keep, len(e.ids))
        targets[row, keep - k :] = torch.tensor(e.ids[-k:])
        mask[row, keep - k :] = torch.tensor(e.loss_mask[-k:], dtype=torch.float)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)  # (B, L)
    return [t.to(device) for t in (input_ids, attention, positions, targets, mask)] + [keep]


def sft_step_loss(
    policy: Policy, batch: list[EncodedExample], micro_batch_tokens: int, scale: float = 1.0
) -> tuple[float, int]:
    """Backward of ``scale`` times the token-mean cross-entropy of ``batch`` (module
    docstring); returns (loss, loss tokens), the loss unscaled. Gradients accumulate into ``.grad``."""
    n_tokens = sum(e.loss_tokens for e in batch)
    total = 0.0
    for micro in micro_batches(batch, micro_batch_tokens):
        input_ids, attention, positions, targets, mask, keep = collate(
            micro, policy.tokenizer.pad_token_id, policy.device
        )
        logprobs, _ = token_logprobs(policy.model, input_ids, attention, positions, targets, keep, where=mask > 0)
        loss = -(logprobs * mask).sum() / n_tokens
        (loss * scale).backward()
        total += float(loss.detach())
    return total, n_tokens


def train_sft(
    policy: Policy,
    examples: list[EncodedExample],
    out: str | Path,
    *,
    cfg,
    seed: int = 0,
    base: dict | None = None,
    log=None,
    quiet: bool = True,
    roles: list[bool] | None = None,
) -> Path:
    """Fine-tune ``policy`` on ``examples`` (``cfg``: an ``SFTConfig``) into ``out``;
    resumes from ``out``'s newest epoch checkpoint; returns ``final_dir(out)``.
    ``base`` ({"base", "base_init_from", "seed"}) names the model under LoRA adapters.
    ``roles`` marks the examples of a role other than the acting policy, which
    ``cfg.role_epochs`` keeps out of the later passes (:func:`epoch_plan`).
    Unless ``quiet``: a phase line, then a bar per epoch (``roleagent.progress``)."""
    out = Path(out)
    if is_finished(out):
        return final_dir(out)
    if not examples:
        raise ValueError("no SFT examples to train on")
    roles = roles if roles is not None else [False] * len(examples)
    plan = epoch_plan(roles, cfg.epochs, cfg.role_epochs)
    steps = [-(-len(part) // cfg.batch_examples) for part in plan]
    out.mkdir(parents=True, exist_ok=True)
    optimizer = sft_optimizer(policy, cfg, total_steps=sum(steps))
    digest = data_digest(examples, roles, cfg.role_epochs)
    start = _resume(out, policy, optimizer.adamw, digest, log)
    resumed = f", resuming at epoch {start + 1}" if start else ""
    shape = f"{cfg.epochs} epochs × {steps[0]} steps"
    if plan[-1] != plan[0]:
        shape = f"{sum(roles)} of the roles' in the first {cfg.role_epochs} of {cfg.epochs} epochs, {sum(steps)} steps"
    phase(f"SFT: {len(examples)} examples, {shape}{resumed}", quiet=quiet)
    base = base or sft_info(policy.name, "", seed)
    for epoch in range(start, cfg.epochs):
        part = [examples[i] for i in plan[epoch]]
        with bar(len(part), f"SFT epoch {epoch + 1}/{cfg.epochs}", "ex", quiet=quiet) as progress:
            record = sft_epoch(policy, optimizer, part, cfg, seed, epoch, progress=progress)
        with (out / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        if log is not None:
            log(f"sft epoch {epoch}: loss={record['loss']:.4f} tokens/s={record['tokens_per_s']:.0f}")
        state = {"data": digest, "epochs": cfg.epochs}
        save_checkpoint(out, epoch, policy=policy, optimizer=optimizer.adamw, state=state, base=base)
    return save_final(policy, out, base)


def sft_optimizer(policy: Policy, cfg, *, total_steps: int) -> Optimizer:
    """The SFT optimizer (``roleagent.trainer.optimizer``) over the policy's trainable
    weights (made fp32 under bf16 compute), its schedule spread over ``total_steps``."""
    params = master_params(policy.model)  # fp32 master weights (roleagent.models.precision)
    return Optimizer.from_config(params, cfg, total_steps=total_steps, what="SFT")


def _resume(out: Path, policy: Policy, optimizer, digest: str, log) -> int:
    """The first epoch still to run; restores the newest checkpoint and cuts
    metrics.jsonl back to the epochs before it."""
    loaded = find_checkpoint(out, lora=policy.lora, device=policy.device, warn=log or print)
    start = 0
    if loaded is not None:
        if loaded.state.get("data") != digest:
            raise CheckpointError(f"{loaded.path}: trained on other SFT examples than these; use another output folder")
        apply_checkpoint(loaded, policy=policy, optimizer=optimizer)
        start = loaded.state["iteration"] + 1
    metrics = out / "metrics.jsonl"
    if metrics.exists():
        kept, torn = [], 0
        for line in metrics.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line) if line.strip() else None
            except ValueError:  # a line torn by a kill or a full disk
                torn += 1
                continue
            if isinstance(record, dict) and isinstance(record.get("epoch"), int) and record["epoch"] < start:
                kept.append(line)
        if torn:
            (log or print)(f"{metrics}: skipped {torn} unreadable line(s) (torn by a kill or a full disk)")
        metrics.write_text("".join(line + "\n" for line in kept))
    return start


def sft_epoch(
    policy: Policy, optimizer: Optimizer, examples: list[EncodedExample], cfg, seed: int, epoch: int, progress=None
) -> dict:
    """One pass over ``examples`` in ``cfg.batch_examples``-example steps (order seeded by
    ``seed`` and ``epoch``); returns the epoch's metrics record. A step with a non-finite
    gradient norm is skipped and counted (``nonfinite_skipped``), as in RL. ``progress``
    (a tqdm bar) advances by each step's examples."""
    order = list(range(len(examples)))
    random.Random(f"{seed}/{epoch}").shuffle(order)
    policy.model.train()
    started = time.perf_counter()
    loss_sum = tokens = seen = steps = skipped = 0
    for start in range(0, len(order), cfg.batch_examples):
        batch = [examples[i] for i in order[start : start + cfg.batch_examples]]
        optimizer.zero_grad()
        loss, n = sft_step_loss(policy, batch, cfg.micro_batch_tokens)
        if progress is not None:
            progress.update(len(batch))
            progress.set_postfix(loss=f"{loss:.3f}", refresh=False)
        if optimizer.step() is None:
            skipped += 1
            continue
        loss_sum, tokens, steps = loss_sum + loss * n, tokens + n, steps + 1
        seen += sum(len(e.ids) for e in batch)
    elapsed = time.perf_counter() - started
    policy.model.eval()
    return {
        "epoch": epoch,
        "loss": loss_sum / max(tokens, 1),
        "loss_tokens": tokens,
        "steps": steps,
        "nonfinite_skipped": skipped,
        "lr": optimizer.lr,
        "tokens_per_s": seen / max(elapsed, 1e-9),
        "time_s": elapsed,
        "peak_rss_mb": peak_rss_mb(),
    }


def save_final(policy: Policy, out: Path, base: dict) -> Path:
    """``final/``: adapters + ``roleagent_sft.json``, or the full model and tokenizer;
    written to a temporary folder and renamed, ``done.json`` last."""
    final = final_dir(out)
    tmp = final.with_name("final.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.model.save_pretrained(tmp)
    if not policy.lora:
        policy.tokenizer.save_pretrained(tmp)
    (tmp / SFT_INFO).write_text(json.dumps(base))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    (final / DONE).write_text(json.dumps({"base": base}))
    return final


def evaluate_loss(policy: Policy, examples: list[EncodedExample], micro_batch_tokens: int = 4096) -> float:
    """Token-mean cross-entropy of ``examples`` under ``policy`` (no update)."""
    policy.model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for micro in micro_batches(examples, micro_batch_tokens):
            input_ids, attention, positions, targets, mask, keep = collate(
                micro, policy.tokenizer.pad_token_id, policy.device
            )
            logprobs, _ = token_logprobs(policy.model, input_ids, attention, positions, targets, keep, where=mask > 0)
            total += float(-(logprobs * mask).sum())
            tokens += int(mask.sum())
    return total / max(tokens, 1)
