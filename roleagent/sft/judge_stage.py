"""The Agent-R judge's warm start inside a recipe's warm start (``sft.judge``), after the
expert SFT (``roleagent.sft.warm_start`` steps 1-4) and before its "sft" evaluation:

1. the SFT policy grows an Agent-R tree on ``sft.judge_tasks`` training goals and on
   ``sft.judge_eval_tasks`` held-out goals (``roleagent.sft.judge.write_judge_data``:
   ``run_dir/sft/judge/trees_{train,valid}``, ``judge.jsonl``, ``judge_valid.jsonl``);
   the expert's policy is needed first, as the base 135M model's trees hold no success and
   so no transition point;
2. the judge's held-out competence as label "sft" (``agent_r_judge/*``, a ``{"judge":
   "sft", ...}`` record of ``metrics.jsonl``, kept in ``judge_evals.json``);
3. a second SFT from the SFT weights on the judge examples (the transition points', or with
   ``sft.judge_labels: progress`` ``judge_progress.jsonl``) and the expert's examples
   again (the actor and the judge are one model: the action turns keep the actor's
   training in the mixture) into ``run_dir/sft/judge`` (``sft.*`` settings, resumable);
4. its weights under the policy's fresh adapters, and the competence again ("judge").

Each step is done once: files, the evaluations and the finished checkpoint are reused,
and a run restarted later starts from ``run_dir/sft/judge/final``
(:func:`judge_weights`, read by ``warm_start_weights``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from roleagent.evaluation import panel_ids
from roleagent.models.loading import copy_base_weights, load_init_model, policy_from_config, sft_info
from roleagent.sft.data import SFTDataError, encode_example
from roleagent.sft.judge import judge_competence, summary, write_judge_data
from roleagent.sft.judge_progress import write_progress_data
from roleagent.sft.sources import read_examples
from roleagent.sft.train import final_dir, is_finished, train_sft

TRAIN, VALID, EVALS = "judge.jsonl", "judge_valid.jsonl", "judge_evals.json"
PROGRESS = "judge_progress.jsonl"  # sft.judge_labels: progress


def judge_dir(cfg) -> Path:
    return Path(cfg.run_dir) / "sft" / "judge"


def judge_weights(cfg) -> str:
    """The finished judge checkpoint a run with ``sft.judge`` starts from, else ''."""
    if cfg.sft.enabled and cfg.sft.judge and is_finished(judge_dir(cfg)):
        return str(final_dir(judge_dir(cfg)))
    return ""


def judge_warm_start(trainer) -> None:
    """Steps 1-4 of the module docstring on ``trainer`` (nothing without ``sft.judge``)."""
    cfg = trainer.cfg
    if not (cfg.sft.enabled and cfg.sft.judge):
        return
    out = judge_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    final = str(final_dir(out))
    if not (out / TRAIN).exists():
        exclude = panel_ids(trainer.cfg, trainer.pool.meta)
        counts = write_judge_data(
            cfg,
            trainer.engine,
            trainer.pool,
            trainer.train_tasks,
            exclude,
            trainer.settings,
            out,
            tasks=cfg.sft.judge_tasks,
            valid=cfg.sft.judge_eval_tasks,
        )
        _log(trainer, f"Agent-R judge data: {json.dumps(counts)}")
    if trainer.init_from != final:
        _measure(trainer, "sft", out)
        examples = _training_examples(trainer, out)
        if not examples:
            _log(trainer, "sft.judge: the training trees gave no judge example (tree labels: no success): no judge SFT")
            return
        if not is_finished(out):
            _train(trainer, out, examples)
        policy = trainer.policy
        dtype = next(policy.model.parameters()).dtype
        copy_base_weights(policy, load_init_model(cfg.model.name, final, dtype=dtype))
        trainer.init_from = final
        trainer.engine.weights_changed()
        trainer.reset_objective()
    _measure(trainer, "judge", out)


def _training_examples(trainer, out: Path) -> list:
    """The judge's SFT examples: the training trees' transition points (``judge.jsonl``),
    or with ``sft.judge_labels: progress`` every step of those trees labelled by the
    environment's expert distance, label-balanced (``judge_progress.jsonl``, written once;
    ``roleagent.sft.judge_progress``)."""
    if trainer.cfg.sft.judge_labels != "progress":
        return _read(out / TRAIN)
    if not (out / PROGRESS).exists():
        counts = write_progress_data(trainer.cfg, out / "trees_train", out / PROGRESS)
        _log(trainer, f"Agent-R judge progress labels: {json.dumps(counts)}")
    return _read(out / PROGRESS)


def _train(trainer, out: Path, examples: list) -> Path:
    cfg, m = trainer.cfg, trainer.cfg.model
    sft = Path(cfg.run_dir) / "sft"
    expert = _read(sft / "expert.jsonl")
    encoded = [encode_example(trainer.engine, e) for e in examples + expert]
    roles = [True] * len(examples) + [False] * len(expert)  # sft.role_epochs: the judge's, then the policy's
    start = str(final_dir(sft))
    policy = policy_from_config(m, seed=cfg.seed, init_from=start)
    base = sft_info(m.name, start, cfg.seed)
    return train_sft(policy, encoded, out, cfg=cfg.sft, seed=cfg.seed, base=base, log=_logger(trainer), roles=roles)


def _measure(trainer, label: str, out: Path) -> None:
    """The held-out competence as policy ``label``, measured once (module docstring)."""
    cfg = trainer.cfg
    path = out / EVALS
    saved = json.loads(path.read_text()) if path.exists() else {}
    if label not in saved:
        valid = _read(out / VALID)
        if not valid:
            _log(trainer, "sft.judge: no tree of a held-out goal held a success: no judge measurement")
            return
        a = cfg.agent_r
        result = judge_competence(trainer.engine, valid, history=a.judge_history, max_new_tokens=a.judge_max_new_tokens)
        saved[label] = {"metrics": result.metrics, "line": summary(label, result)}
        (out / f"judge_{label}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in result.rows))
        tmp = out / f"{EVALS}.tmp"
        tmp.write_text(json.dumps(saved))
        tmp.replace(path)
    trainer.metrics.write({"judge": label, **saved[label]["metrics"]})
    _log(trainer, saved[label]["line"])


def _read(path: Path) -> list:
    """The examples of ``path``; [] when it holds none (a tree set without a success)."""
    try:
        return read_examples(path)
    except SFTDataError:
        if path.exists() and not path.read_text().strip():
            return []
        raise


def _logger(trainer):
    return None if trainer.quiet else (lambda message: _log(trainer, message))


def _log(trainer, message: str) -> None:
    if not trainer.quiet:
        print(message, file=sys.stderr, flush=True)
