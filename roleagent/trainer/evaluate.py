"""Evaluation during training: one evaluation of one fixed panel by a
:class:`~roleagent.trainer.Trainer` (greedy, plus ``eval.sampled`` episodes per game), with
crashed episodes replayed, the rollouts dumped and the metrics record written."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from roleagent.engine import drop_prefix_kv
from roleagent.evaluation import replay_crashed, sample_seed
from roleagent.fields import ConfigError
from roleagent.rollout import run_episodes
from roleagent.trainer.run_files import EvalResult, dump_trajectories
from roleagent.types import Task, Trajectory


def evaluate_panel(trainer, label: str, split: str, tasks: list[Task]) -> EvalResult:
    """Crashed episodes are replayed up to ``eval.crash_retries`` times, and those still
    crashed are reported apart (``eval/crashed_episodes``), not as failures. With
    ``eval.sampled`` = k, every game is also played k times at ``rollout.temperature``:
    sample s is one pass over the panel with the engine seeded by
    ``sample_seed(eval.seed, s)``, so it is the same at every evaluation of the run."""
    cfg = trainer.cfg
    jobs = [(task, cfg.eval.seed) for task in tasks]
    generator_state = trainer.engine.get_rng_state()  # evaluation must not shift training randomness
    with trainer.memory.phase("eval"):
        trajectories, replays = play_panel(trainer, f"eval {label}", jobs, cfg.eval.temperature)
        sampled = []
        for s in range(cfg.eval.sampled):
            trainer.engine.seed(sample_seed(cfg.eval.seed, s))
            sampled.append(play_panel(trainer, f"eval {label} sample {s}", jobs, cfg.rollout.temperature)[0])
        drop_prefix_kv(trainer.engine)  # the panel's prompts do not come back in training
    trainer.engine.set_rng_state(generator_state)
    result = EvalResult.of(label, split, trajectories, trainer.pool.meta.table_columns, replays, sampled)
    trainer.evals.append(result)
    name = f"eval_{label}" if split == cfg.env.eval_split else f"eval_{label}_{split}"
    dump_trajectories(trainer.run_dir, name, trajectories)
    if sampled:
        dump_trajectories(trainer.run_dir, f"{name}_sampled", [t for episodes in sampled for t in episodes])
    trainer.metrics.write({**result.record, **trainer.memory.metrics("eval")})
    return result


def play_panel(trainer, desc: str, jobs: list[tuple[Task, int]], temperature: float) -> tuple[list[Trajectory], int]:
    """One episode per job at ``temperature``, without the methods' rollout extensions,
    crashed ones replayed (:func:`~roleagent.evaluation.replay_crashed`); the episodes in
    job order and the number of replays."""
    settings = dataclasses.replace(trainer.settings, temperature=temperature, greedy=trainer.cfg.eval.greedy)

    def play(wave: list[tuple[Task, int]]) -> list[Trajectory]:
        with trainer._progress(desc, trainer.max_steps * -(-len(wave) // trainer.pool.size)) as bar:
            return run_episodes(engine=trainer.engine, pool=trainer.pool, jobs=wave, settings=settings, progress=bar)[0]

    return replay_crashed(play, jobs, trainer.cfg.eval.crash_retries)


def evaluate_checkpoint(cfg, run: Path, label: str, *, quiet: bool = False) -> list[EvalResult]:
    """``roleagent eval --run RUN``: RUN's newest valid checkpoint played on the panels of
    ``cfg`` (RUN's config), by a trainer whose run folder is ``cfg.run_dir``, the
    evaluation's own (``RUN/eval`` or ``--out``): RUN's files are only read. Raises
    :class:`~roleagent.trainer.checkpoint.CheckpointError` when RUN holds no checkpoint."""
    from roleagent.engine import loads_weights
    from roleagent.run_config import resolve_recorded
    from roleagent.trainer import Trainer
    from roleagent.trainer.checkpoint import CheckpointError, apply_weights, checkpoint_candidates, find_checkpoint

    if not loads_weights(cfg.model.engine):
        raise ConfigError(
            f"model.engine={cfg.model.engine} evaluates the server's own weights, not {run}'s checkpoint: "
            f"export it (roleagent export {run} --merge-lora --out DIR), serve DIR and evaluate with a recipe"
        )
    if not checkpoint_candidates(run):
        raise CheckpointError(
            f"{run} holds no checkpoint (no {run / 'checkpoints'}/iter_*): nothing to evaluate; "
            "to evaluate the base model, give the recipe instead: roleagent eval RECIPE"
        )
    loaded = find_checkpoint(run, lora=cfg.model.lora_rank > 0, warn=lambda m: print(m, file=sys.stderr))
    init_from = resolve_recorded(loaded.state.get("init_from", ""), run)
    if init_from and not Path(init_from).is_dir():
        raise CheckpointError(f"{loaded.path} was trained from init_from={init_from!r}, which is missing")
    cfg.model.init_from, cfg.sft.enabled, cfg.iterations = init_from, False, 0  # the weights under the checkpoint's
    trainer = Trainer(cfg, resume=False, quiet=quiet)
    try:
        apply_weights(loaded, trainer.policy)
        trainer.engine.weights_changed()
        trainer.evaluate(label)
    finally:
        trainer.close()
    return trainer.evals
