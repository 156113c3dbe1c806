"""Prompting baselines as evaluation policies: ReAct and Reflexion on any engine.

``roleagent eval RECIPE --policy react`` (or ``reflexion``) plays the recipe's evaluation
panels with the model behind ``model.engine`` (the HF engine, or an OpenAI-compatible
server) prompted as the paper's agent, and prints the same success table as a trained
policy. Reflexion adds one row per trial ("after trial k")."""

from __future__ import annotations

from pathlib import Path

from roleagent.evaluation import eval_panel, eval_splits, replay_crashed, success_by_type


def evaluate_baseline(
    cfg, policy: str, *, splits: list[str] | None = None, workers: int = 4, trials: int = 3, memory: str = ":memory:"
) -> dict[str, dict[str, float]]:
    """Table rows (label → success by type) of ``policy`` ("react" | "reflexion")."""
    from roleagent.baselines.reflexion import ReflectionMemory, run_reflexion
    from roleagent.baselines.runner import expert_examples
    from roleagent.engine import SamplingParams, create_engine
    from roleagent.envs.workers import make_pool
    from roleagent.models.loading import policy_from_config

    if policy not in ("react", "reflexion"):
        raise ValueError(f"unknown prompting baseline {policy!r}: react | reflexion")
    if cfg.threads > 0:
        import torch

        torch.set_num_threads(cfg.threads)
    model = policy_from_config(cfg.model, seed=cfg.seed, init_from=cfg.model.init_from, lora=False)
    engine = create_engine(
        cfg.model.engine, model, max_batch=cfg.rollout.max_batch, max_prompt_tokens=cfg.rollout.max_prompt_tokens
    )
    engine.seed(cfg.seed)
    params = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.eval.temperature)
    rows: dict[str, dict[str, float]] = {}
    with make_pool(cfg.env, slots=workers) as pool:
        max_steps = cfg.rollout.max_steps or pool.meta.max_steps
        columns = pool.meta.table_columns
        panels = {split: eval_panel(pool.meta, cfg, split) for split in splits or eval_splits(cfg)}
        every_task = [task for tasks in panels.values() for task in tasks]  # one expert example per type, played once
        examples = expert_examples(pool, every_task, cfg.env.train_split, cfg.eval.seed)
        for split, tasks in panels.items():
            jobs = [(task, cfg.eval.seed) for task in tasks]

            run = _player(engine, pool, max_steps, params, examples, cfg.eval.crash_retries)
            if policy == "react":
                rows[f"react {split}"] = success_by_type(run(jobs), columns)
                continue
            if memory != ":memory:":
                Path(memory).parent.mkdir(parents=True, exist_ok=True)
            store = ReflectionMemory(memory)
            try:
                per_trial = run_reflexion(run, engine, jobs, store, trials=trials, params=params)
            finally:
                store.close()
            for k, trajectories in enumerate(per_trial, 1):
                rows[f"reflexion {split} after trial {k}"] = success_by_type(trajectories, columns)
    return rows


def _player(engine, pool, max_steps, params, examples, retries):
    """``run(jobs, reflections)``: the episodes of ``jobs``, crashed ones replayed up to
    ``retries`` times as for trained policies (:func:`roleagent.evaluation.replay_crashed`)."""
    from roleagent.baselines.runner import play

    def run(jobs, reflections=lambda task: []):
        def once(wave):
            return play(
                engine, pool, wave, max_steps=max_steps, params=params, examples=examples, reflections=reflections
            )

        return replay_crashed(once, jobs, retries)[0]

    return run
