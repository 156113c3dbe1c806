"""The warm-start stage of a recipe (``sft.enabled``), run by the trainer before RL:

1. evaluate the base policy ("base", with ``eval.at_start``);
2. let the environment's expert play ``sft.expert_tasks`` training tasks through the
   rollout code (``roleagent.sft.expert``; never a task of an evaluation panel), keep
   the successful episodes as chat examples (``run_dir/sft/expert.jsonl``), add
   ``sft.data``;
3. fine-tune a copy of the base (LoRA of rank ``model.lora_rank``, or all weights) into
   ``run_dir/sft`` (``roleagent.sft.train``, resumable per epoch);
4. put the fine-tuned weights under the RL policy's fresh adapters, so the KL reference
   (adapters off) is the SFT policy, and evaluate it ("sft");

then RL runs as usual and the final evaluation is "after". Every step is done once:
evaluations are kept in ``run_dir/sft/evals.json`` (restored into the run's metrics
when the run restarts before its first RL checkpoint), the expert data and the finished
SFT checkpoint are reused, and a run resumed from an RL checkpoint loads the SFT weights
directly (``warm_start_weights``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from roleagent.models.loading import copy_base_weights, load_init_model, policy_from_config
from roleagent.sft.data import encode_example, read_examples, write_examples
from roleagent.sft.expert import expert_examples, expert_tasks, expert_trajectories
from roleagent.sft.train import final_dir, is_finished, train_sft


def sft_dir(cfg) -> Path:
    return Path(cfg.run_dir) / "sft"


def warm_start_weights(cfg) -> str:
    """The finished SFT checkpoint a warm-started run's policy starts from, else ''."""
    if cfg.sft.enabled and is_finished(sft_dir(cfg)):
        return str(final_dir(sft_dir(cfg)))
    return ""


def warm_start(trainer) -> None:
    """Steps 1-4 of the module docstring on ``trainer`` (a ``roleagent.trainer.Trainer``)."""
    cfg = trainer.cfg
    out = sft_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    final = str(final_dir(out))
    if cfg.eval.at_start:
        if trainer.init_from == final and "base" not in _saved(out):
            _warn("the policy already holds the SFT weights: no 'base' evaluation to restore")
        else:
            _evaluate(trainer, "base", out)
    if not is_finished(out):
        run_sft(trainer, out)
    if trainer.init_from != final:
        policy = trainer.policy
        dtype = next(policy.model.parameters()).dtype
        copy_base_weights(policy, load_init_model(cfg.model.name, final, dtype=dtype))
        trainer.init_from = final
        trainer.engine.weights_changed()
        trainer.reset_objective()  # its KL reference and optimizer belong to the new weights
    if cfg.eval.at_start:
        _evaluate(trainer, "sft", out)


def collect_examples(trainer, out: Path) -> list:
    """The expert's examples (played once, kept in ``out/expert.jsonl``) and ``sft.data``'s."""
    cfg = trainer.cfg
    examples = []
    data_file = out / "expert.jsonl"
    if cfg.sft.expert_tasks > 0:
        if not data_file.exists():
            exclude = {t.id for tasks in trainer.eval_panels.values() for t in tasks}
            tasks = expert_tasks(trainer.train_tasks, cfg.sft.expert_tasks, seed=cfg.seed, exclude=exclude)
            trajectories = expert_trajectories(trainer.engine, trainer.pool, tasks, trainer.settings, seed=cfg.seed)
            chat, counts = expert_examples(trajectories)
            if not chat:
                raise RuntimeError(f"the expert solved none of {len(tasks)} training tasks: no SFT data")
            (out / "expert_counts.json").write_text(json.dumps(counts))
            write_examples(data_file, chat)
        examples += read_examples(data_file)
    if cfg.sft.data:
        examples += read_examples(cfg.sft.data)
    return examples


def run_sft(trainer, out: Path) -> Path:
    """Fine-tune a fresh copy of the base policy on the collected examples into ``out``."""
    cfg, m = trainer.cfg, trainer.cfg.model
    encoded = [encode_example(trainer.engine, e) for e in collect_examples(trainer, out)]
    policy = policy_from_config(m, seed=cfg.seed, init_from=m.init_from)
    base = {"base": m.name, "base_init_from": m.init_from, "seed": cfg.seed}
    log = None if trainer.quiet else _warn
    return train_sft(policy, encoded, out, cfg=cfg.sft, seed=cfg.seed, base=base, log=log)


def _saved(out: Path) -> dict:
    path = out / "evals.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _evaluate(trainer, label: str, out: Path) -> None:
    """Evaluate ``label`` once: later calls restore its results (per-game outcomes
    included) and metrics records."""
    from roleagent.trainer.run_files import EvalResult

    saved = _saved(out)
    if label in saved:
        for row in saved[label]:
            result = EvalResult.restored(row) if isinstance(row, dict) else _older_row(label, row)
            trainer.evals.append(result)
            trainer.metrics.write(result.record)
        return
    trainer.evaluate(label)
    saved[label] = [{**e.row(), "record": e.record} for e in trainer.evals if e.label == label]
    tmp = out / "evals.json.tmp"
    tmp.write_text(json.dumps(saved))
    tmp.replace(out / "evals.json")


def _older_row(label: str, row: list):
    """An ``evals.json`` row written before per-game outcomes were kept: ``[split, table,
    record]`` (no counts, no paired test)."""
    from roleagent.trainer.run_files import EvalResult

    split, table, record = row
    return EvalResult(label, [], table, split, record)


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
