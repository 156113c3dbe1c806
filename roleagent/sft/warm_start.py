"""The warm-start stage of a recipe (``sft.enabled``), run by the trainer before RL:

1. evaluate the base policy ("base", with ``eval.at_start``);
2. let the environment's expert play ``sft.expert_tasks`` training tasks through the
   rollout code (``roleagent.sft.expert``; never a task of an evaluation panel), keep
   the successful episodes as chat examples (``run_dir/sft/expert.jsonl``), add
   ``sft.data``; with ``sft.predictor`` also the World-In-Agent predictor's examples of
   the same episodes (``predictor.jsonl``, ``roleagent.sft.predictor``), and the expert
   plays ``sft.predictor_eval_tasks`` more training games whose transitions
   (``predictor_valid.jsonl``) measure the predictor before and after SFT
   (``wia_predictor/*`` records of ``metrics.jsonl``, kept in ``predictor_evals.json``);
   with ``sft.asl_roles`` also ASL's generator and verifier examples of the training
   split's labelled pairs, measured before and after SFT on held-out questions
   (``roleagent.sft.asl_warm_start``: ``asl_generator/*``, ``asl_verifier/*``);
   with ``sft.analyst`` the base policy plays ``sft.analyst_tasks`` training games and
   ``sft.analyst_eval_tasks`` held-out ones (never SFT data), and their failures become the
   Agent-In-World analyst's examples (``analyst.jsonl``, ``analyst_valid.jsonl``,
   ``roleagent.sft.analyst``), the held-out ones measured before and after SFT
   (``aiw_analyst/*`` records, kept in ``analyst_evals.json``); with ``sft.retriever`` the
   same failures also become the retriever's examples (``retriever.jsonl``,
   ``retriever_valid.jsonl``, ``roleagent.sft.retriever``: the training failures are its
   library), measured likewise (``aiw_retriever/*``, ``retriever_evals.json``);
3. fine-tune a copy of the base (LoRA of rank ``model.lora_rank``, or all weights) into
   ``run_dir/sft`` (``roleagent.sft.train``, resumable per epoch);
4. put the fine-tuned weights under the RL policy's fresh adapters, so the KL reference
   (adapters off) is the SFT policy; with ``sft.judge`` the Agent-R judge's warm start
   follows (``roleagent.sft.judge_stage``: trees, judge examples, a second SFT into
   ``run_dir/sft/judge``, ``agent_r_judge/*`` records); then evaluate it ("sft");

then RL runs as usual and the final evaluation is "after". Every step is done once:
evaluations are kept in ``run_dir/sft/evals.json`` (restored into the run's metrics
when the run restarts before its first RL checkpoint), the expert data and the finished
SFT checkpoint are reused, and a run resumed from an RL checkpoint loads the SFT weights
directly (``warm_start_weights``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from roleagent.engine.chat import prompt_fits
from roleagent.evaluation import panel_ids
from roleagent.models.loading import copy_base_weights, load_init_model, policy_from_config, sft_info
from roleagent.rollout import run_episodes
from roleagent.sft import analyst as analyst_sft
from roleagent.sft import retriever as retriever_sft
from roleagent.sft.asl_warm_start import EVALS as ASL_EVALS
from roleagent.sft.asl_warm_start import measure_asl_roles
from roleagent.sft.asl_warm_start import train_examples as asl_train_examples
from roleagent.sft.data import encode_example, role_flags, write_examples
from roleagent.sft.expert import expert_examples, expert_tasks, expert_trajectories, solved
from roleagent.sft.failures import diagnosed
from roleagent.sft.judge_stage import judge_warm_start, judge_weights
from roleagent.sft.predictor import encode_predictor, predictor_competence, predictor_examples, summary
from roleagent.sft.sources import format_eos, read_examples
from roleagent.sft.train import final_dir, is_finished, train_sft

PREDICTOR_TRAIN, PREDICTOR_VALID, PREDICTOR_EVALS = "predictor.jsonl", "predictor_valid.jsonl", "predictor_evals.json"
ANALYST_TRAIN, ANALYST_VALID, ANALYST_EVALS = "analyst.jsonl", "analyst_valid.jsonl", "analyst_evals.json"
RETRIEVER_TRAIN, RETRIEVER_VALID = "retriever.jsonl", "retriever_valid.jsonl"


def sft_dir(cfg) -> Path:
    return Path(cfg.run_dir) / "sft"


def warm_start_weights(cfg) -> str:
    """The finished SFT checkpoint a warm-started run's policy starts from, else ''."""
    if judge_weights(cfg):
        return judge_weights(cfg)
    if cfg.sft.enabled and is_finished(sft_dir(cfg)):
        return str(final_dir(sft_dir(cfg)))
    return ""


def warm_start(trainer) -> None:
    """Steps 1-4 of the module docstring on ``trainer`` (a ``roleagent.trainer.Trainer``)."""
    cfg = trainer.cfg
    out = sft_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    final = str(final_dir(out))
    held = {final, judge_weights(cfg)} - {""}  # the warm start's weights, the policy may hold them
    if cfg.eval.at_start:
        if trainer.init_from in held and "base" not in _saved(out):
            _warn("the policy already holds the SFT weights: no 'base' evaluation to restore")
        else:
            _evaluate(trainer, "base", out)
    if not (trainer.init_from == final and "base" not in _saved(out, PREDICTOR_EVALS)):
        _measure_predictor(trainer, "base", out)
    if not (trainer.init_from == final and "base" not in _saved(out, ASL_EVALS)):
        measure_asl_roles(trainer, "base", out)
    for role in ROLES:
        if not (trainer.init_from == final and "base" not in _saved(out, ROLES[role].evals)):
            _measure_role(trainer, role, "base", out)
    if not is_finished(out):
        with trainer.memory.phase("sft"):  # the expert's play and the fine-tuning
            run_sft(trainer, out)
    if trainer.init_from not in held:
        policy = trainer.policy
        dtype = next(policy.model.parameters()).dtype
        with trainer.memory.phase("load_sft"):
            copy_base_weights(policy, load_init_model(cfg.model.name, final, dtype=dtype))
        trainer.init_from = final
        trainer.engine.weights_changed()
        trainer.reset_objective()  # its KL reference and optimizer belong to the new weights
    judge_warm_start(trainer)
    if cfg.eval.at_start:
        _evaluate(trainer, "sft", out)
    _measure_predictor(trainer, "sft", out)
    measure_asl_roles(trainer, "sft", out)
    for role in ROLES:
        _measure_role(trainer, role, "sft", out)


def collect_examples(trainer, out: Path) -> list:
    """The expert's examples (played once, kept in ``out/expert.jsonl``), with
    ``sft.predictor`` the predictor's (``out/predictor.jsonl``), and ``sft.data``'s."""
    cfg = trainer.cfg
    examples = []
    if cfg.sft.expert_tasks > 0:
        play_expert_data(trainer, out)
        examples += read_examples(out / "expert.jsonl")
        if cfg.sft.predictor:
            examples += read_examples(out / PREDICTOR_TRAIN)
    if cfg.sft.analyst:
        play_analyst_data(trainer, out)
        for name in (ANALYST_TRAIN, RETRIEVER_TRAIN) if cfg.sft.retriever else (ANALYST_TRAIN,):
            if (out / name).stat().st_size:
                examples += read_examples(out / name)
    if cfg.sft.data:
        examples += read_examples(cfg.sft.data, eos=format_eos(cfg))
    if cfg.sft.asl_roles:
        examples += asl_train_examples(trainer, out)
    return examples


def play_expert_data(trainer, out: Path) -> None:
    """Let the expert play ``sft.expert_tasks`` training tasks (never a panel's), and with
    ``sft.predictor`` ``sft.predictor_eval_tasks`` more, unless their files are written."""
    cfg = trainer.cfg
    files = [out / "expert.jsonl"] + ([out / PREDICTOR_TRAIN, out / PREDICTOR_VALID] if cfg.sft.predictor else [])
    if all(f.exists() for f in files):
        return
    exclude = panel_ids(trainer.cfg, trainer.pool.meta)
    n, held_out = cfg.sft.expert_tasks, cfg.sft.predictor_eval_tasks if cfg.sft.predictor else 0
    room = sum(t.id not in exclude for t in trainer.train_tasks) - n
    if 0 <= room < held_out:
        _warn(f"sft.predictor_eval_tasks={held_out}: only {room} training tasks left after the SFT tasks")
        held_out = room
    tasks = expert_tasks(trainer.train_tasks, n + held_out, seed=cfg.seed, exclude=exclude)
    trajectories = expert_trajectories(
        trainer.engine, trainer.pool, tasks, trainer.settings, seed=cfg.seed, quiet=trainer.quiet
    )
    chat, counts = expert_examples(trajectories[:n])
    if not chat:
        raise RuntimeError(f"the expert solved none of {n} training tasks: no SFT data")
    if cfg.sft.predictor:
        wia = next(m for m in trainer.methods if m.name == "wia")
        for name, part in ((PREDICTOR_TRAIN, trajectories[:n]), (PREDICTOR_VALID, trajectories[n:])):
            made = [
                e for t in solved(part) for e in predictor_examples(t, horizon=wia.horizon, prompt=wia.config.prompt)
            ]
            counts[name.removesuffix(".jsonl") + "_examples"] = write_examples(out / name, made)
    (out / "expert_counts.json").write_text(json.dumps(counts))
    if not (out / "expert.jsonl").exists():
        write_examples(out / "expert.jsonl", chat)


def play_analyst_data(trainer, out: Path) -> None:
    """Let the base policy play ``sft.analyst_episodes`` episodes of each of
    ``sft.analyst_tasks`` training games (the first of :func:`expert_tasks`' order) and of
    ``sft.analyst_eval_tasks`` held-out games (after every game the expert plays, so never
    SFT data), unless their files are written; their failures become analyst examples, and
    with ``sft.retriever`` retriever examples over the training games' failures."""
    cfg, sft = trainer.cfg, trainer.cfg.sft
    names = [ANALYST_TRAIN, ANALYST_VALID] + ([RETRIEVER_TRAIN, RETRIEVER_VALID] if sft.retriever else [])
    if all((out / name).exists() for name in names):
        return
    exclude = panel_ids(trainer.cfg, trainer.pool.meta)
    start = max(sft.expert_tasks + (sft.predictor_eval_tasks if sft.predictor else 0), sft.analyst_tasks)
    room = sum(t.id not in exclude for t in trainer.train_tasks)
    held_out = max(min(sft.analyst_eval_tasks, room - start), 0)
    if held_out < sft.analyst_eval_tasks:
        _warn(f"sft.analyst_eval_tasks={sft.analyst_eval_tasks}: only {held_out} training games left for it")
    tasks = expert_tasks(trainer.train_tasks, min(start, room) + held_out, seed=cfg.seed, exclude=exclude)
    counts, failures = {}, {}
    taxonomy, fits = trainer.pool.meta.failure_taxonomy, prompt_fits(trainer.engine)
    for name, games in ((ANALYST_TRAIN, tasks[: sft.analyst_tasks]), (ANALYST_VALID, tasks[start:])):
        jobs = [(t, cfg.seed + k) for t in games for k in range(sft.analyst_episodes)]
        played = run_episodes(engine=trainer.engine, pool=trainer.pool, jobs=jobs, settings=trainer.settings)[0]
        made = analyst_sft.analyst_examples(played, taxonomy, cfg.aiw, diagnose=trainer.pool.diagnose, fits=fits)
        failures[name] = diagnosed(played, trainer.pool.diagnose) if sft.retriever else []
        key = name.removesuffix(".jsonl")
        counts[key + "_episodes"], counts[key + "_examples"] = len(played), write_examples(out / name, made)
    if sft.retriever:
        parts = retriever_sft.make_examples(failures[ANALYST_TRAIN], failures[ANALYST_VALID], taxonomy, cfg.aiw,
                                            out / "retriever_memory.sqlite", seed=cfg.seed, fits=fits,
                                            shuffled_valid=False)  # fmt: skip
        for name in (RETRIEVER_TRAIN, RETRIEVER_VALID):
            counts[name.removesuffix(".jsonl") + "_examples"] = write_examples(out / name, parts[name])
    (out / "analyst_counts.json").write_text(json.dumps(counts))


@dataclass(frozen=True)
class Role:
    """An Agent-In-World role's held-out measure (switched by ``sft.<role>``, recorded as
    ``{"<role>": label, "aiw_<role>/...": ...}``): its held-out data, its record file, its
    competence and its log line (``roleagent.sft.analyst``, ``roleagent.sft.retriever``)."""

    valid: str
    evals: str
    measure: Callable
    summary: Callable


ROLES = {
    "analyst": Role(
        ANALYST_VALID,
        ANALYST_EVALS,
        lambda trainer, valid: analyst_sft.analyst_competence(
            trainer.engine, valid, trainer.pool.meta.failure_taxonomy, trainer.cfg.aiw
        ),
        analyst_sft.summary,
    ),
    "retriever": Role(
        RETRIEVER_VALID,
        "retriever_evals.json",
        lambda trainer, valid: retriever_sft.retriever_competence(trainer.engine, valid, trainer.cfg.aiw),
        retriever_sft.summary,
    ),
}


def _measure_role(trainer, name: str, label: str, out: Path) -> None:
    """Agent-In-World role ``name``'s held-out competence as policy ``label``, measured
    once: a record in ``metrics.jsonl`` and a line in the log."""
    cfg, role = trainer.cfg, ROLES[name]
    if not (getattr(cfg.sft, name) and cfg.sft.analyst_eval_tasks > 0):
        return
    saved = _saved(out, role.evals)
    if label not in saved:
        play_analyst_data(trainer, out)
        if not (out / role.valid).stat().st_size:
            _warn(f"sft.{name}: the policy failed no held-out game: no {name} measurement")
            return
        result = role.measure(trainer, read_examples(out / role.valid))
        saved[label] = {"metrics": result.metrics, "line": role.summary(label, result)}
        write_jsonl(out / f"{name}_{label}.jsonl", result.rows)
        _save(out, role.evals, saved)
    trainer.metrics.write({name: label, **saved[label]["metrics"]})
    if not trainer.quiet:
        _warn(saved[label]["line"])


def _measure_predictor(trainer, label: str, out: Path) -> None:
    """The predictor's held-out competence (``roleagent.sft.predictor``) as policy
    ``label`` ("base", "sft"), measured once: a ``{"predictor": label, "wia_predictor/...":
    ...}`` record in ``metrics.jsonl`` and a line in the log."""
    cfg = trainer.cfg
    if not (cfg.sft.predictor and cfg.sft.predictor_eval_tasks > 0):
        return
    saved = _saved(out, PREDICTOR_EVALS)
    if label not in saved:
        play_expert_data(trainer, out)
        valid = read_examples(out / PREDICTOR_VALID)
        if not valid:
            _warn("sft.predictor: the expert solved no held-out game: no predictor measurement")
            return
        result = predictor_competence(trainer.engine, valid, max_new_tokens=cfg.wia.max_new_tokens)
        saved[label] = {"metrics": result.metrics, "line": summary(label, result)}
        write_jsonl(out / f"predictor_{label}.jsonl", result.rows)
        _save(out, PREDICTOR_EVALS, saved)
    trainer.metrics.write({"predictor": label, **saved[label]["metrics"]})
    if not trainer.quiet:
        _warn(saved[label]["line"])


def run_sft(trainer, out: Path) -> Path:
    """Fine-tune a fresh copy of the base policy on the collected examples into ``out``."""
    cfg, m = trainer.cfg, trainer.cfg.model
    examples = collect_examples(trainer, out)
    encoded = [
        (encode_predictor if e.meta.get("role") == "predictor" else encode_example)(trainer.engine, e) for e in examples
    ]
    policy = policy_from_config(m, seed=cfg.seed, init_from=m.init_from)
    base = sft_info(m.name, m.init_from, cfg.seed)
    log = None if trainer.quiet else _warn
    return train_sft(
        policy,
        encoded,
        out,
        cfg=cfg.sft,
        seed=cfg.seed,
        base=base,
        log=log,
        quiet=trainer.quiet,
        roles=role_flags(examples),
    )


def _saved(out: Path, name: str = "evals.json") -> dict:
    path = out / name
    return json.loads(path.read_text()) if path.exists() else {}


def _save(out: Path, name: str, saved: dict) -> None:
    tmp = out / f"{name}.tmp"
    tmp.write_text(json.dumps(saved))
    tmp.replace(out / name)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


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
    _save(out, "evals.json", saved)


def _older_row(label: str, row: list):
    """An ``evals.json`` row written before per-game outcomes were kept: ``[split, table,
    record]`` (no counts, no paired test)."""
    from roleagent.trainer.run_files import EvalResult

    split, table, record = row
    return EvalResult(label, [], table, split, record)


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
