"""The training loop: one iteration = tasks → collect → score → advantages → update → hooks.

One iteration (Role-Agent Algorithm 1; GRPO / RLOO / GiGPO are the same loop with another
advantage estimator)::

    tasks   = task_source.sample(N, rng)                  # uniform, or a method's
    it      = Iteration(jobs = tasks × G, same env seed per task)  # roleagent.trainer.stages
    trajs   = collector.collect(it)                       # + rollout extensions
    scorer.score(trajs)                                   # environment reward by default
    A       = estimator(algo.name)(StepBatch(trajs))      # roleagent.trainer.advantages; ppo: with critic V(s)
    A       = method.adjust_advantages(batch, A)          # for each enabled method
    objective.update(objective.samples(it))               # PPO-clip on A by default
    engine.weights_changed()                              # stored prefix KV is stale
    metrics = method.after_iteration(trajs, iteration)    # for each enabled method
    dump(trajs)                                           # with advantages and method records

The stages are in ``roleagent.trainer.stages``, the methods in ``roleagent.methods``; this
file knows no method by name (``docs/architecture.md``).

Everything random draws from generators stored in the checkpoint, so a resumed run continues
exactly where an uninterrupted one would be. The run directory's files are written once: the
checkpoint records how far ``metrics.jsonl`` (and each method's own files) had got, a resumed
run cuts them back to that record (no checkpoint yet: starts them empty), and a run whose final
evaluation is done is not run again. One trainer at a time holds ``run_dir/.lock``.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from roleagent.config import ConfigError, TrainConfig
from roleagent.dynamic_sampling import check_collector, collect_rounds
from roleagent.engine import SamplingParams, create_engine, drop_prefix_kv, engine_settings
from roleagent.envs.workers import make_pool
from roleagent.evaluation import eval_panel, eval_splits, split_tasks
from roleagent.models.hub import check_hub_model
from roleagent.models.loading import engine_policy, sft_info
from roleagent.rollout import rollout_settings
from roleagent.run_config import portable, recorded_config, same_init
from roleagent.sft.warm_start import warm_start_weights
from roleagent.trainer.advantages import StepBatch, compute_advantages, estimator_settings, write_records
from roleagent.trainer.checkpoint import (
    CheckpointError,
    LoadedCheckpoint,
    RunDirLock,
    apply_checkpoint,
    find_checkpoint,
    mark_finished,
    save_checkpoint,
)
from roleagent.trainer.checks import prepare
from roleagent.trainer.critic import NoCritic, build_critic
from roleagent.trainer.evaluate import evaluate_panel
from roleagent.trainer.memory import PhaseMemory, set_mmap_threshold
from roleagent.trainer.methods import MethodContext, build_methods, method_classes
from roleagent.trainer.metrics import MetricsWriter, advantage_metrics, peak_rss_mb, reuse_metrics, rollout_metrics
from roleagent.trainer.run_files import (
    EvalResult,
    dump_trajectories,
    log_line,
    prepare_run_files,
    write_run_summary,
)
from roleagent.trainer.stages import EnvironmentReward, Iteration, PPOObjective, RolloutCollector, UniformTaskSource
from roleagent.types import Task


class Trainer:
    world_size = 1  # data-parallel processes sharing each iteration's episodes (roleagent.trainer.distributed)

    def __init__(self, cfg: TrainConfig, *, resume: bool = True, quiet: bool = False):
        self.cfg = prepare(cfg)  # the components and methods, before a model loads or run_dir is made
        self.quiet = quiet
        self.run_dir = Path(cfg.run_dir)
        check_hub_model(cfg.model.name)  # an unreachable HF id: one line, before the run folder is made
        (self.run_dir / "rollouts").mkdir(parents=True, exist_ok=True)
        self._lock = RunDirLock(self.run_dir)  # before anything in run_dir is touched
        try:
            self._setup(cfg, resume)
        except BaseException:
            self.close()
            raise

    def _setup(self, cfg: TrainConfig, resume: bool) -> None:
        self.resume = resume
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        set_mmap_threshold(cfg.mmap_threshold_kb)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)

        m, r = cfg.model, cfg.rollout
        self.init_from = warm_start_weights(cfg) or m.init_from  # the weights under the adapters
        self.policy = engine_policy(m, seed=cfg.seed, init_from=self.init_from)  # model None: a served model
        limits = {"max_batch": r.max_batch, "max_prompt_tokens": r.max_prompt_tokens}
        reuse = {"prefix_cache_tokens": r.prefix_cache_tokens} if r.prefix_cache_tokens else {}
        self.engine = create_engine(m.engine, self.policy, settings=engine_settings(cfg), **limits, **reuse)
        self.engine.seed(cfg.seed)
        wave = max([r.tasks_per_iter * r.group_size] + [m.episodes_at_once(cfg) for m in method_classes(cfg)])
        slots = -(-wave // self.world_size)  # this rank's share of the episodes played at once
        self.pool = make_pool(cfg.env, slots=slots)  # worker processes, in-process or Ray actors
        env = self.pool.meta
        self.train_tasks = split_tasks(env, cfg.env, cfg.env.train_split)
        self.eval_panels = {split: eval_panel(env, cfg, split) for split in eval_splits(cfg)}
        self.eval_tasks = next(iter(self.eval_panels.values()))  # the first panel
        if len(self.train_tasks) < r.tasks_per_iter:
            raise ValueError(f"{len(self.train_tasks)} training tasks < rollout.tasks_per_iter={r.tasks_per_iter}")
        self.max_steps = r.max_steps or env.max_steps
        self.settings = rollout_settings(cfg, self.max_steps)
        self.rng = np.random.default_rng(cfg.seed)  # task sampling and environment seeds
        self.shuffle_rng = random.Random(cfg.seed)  # mini-batch order
        self._build_stages(cfg)
        self.metrics, self.memory = MetricsWriter.from_config(cfg), PhaseMemory(release=cfg.release_memory)
        self.start_iteration = 0
        self.started = time.perf_counter()  # budget_minutes counts from here
        self.evals: list[EvalResult] = []
        self.resumed_from: Path | None = None
        self.finished = False  # the run's final evaluation is already on disk
        self._metrics_position: dict | None = None
        lora, device = self.policy.lora, self.policy.device
        if (
            resume
            and self.policy.model is not None
            and (loaded := find_checkpoint(self.run_dir, lora=lora, device=device, warn=self._warn))
        ):
            self._restore(loaded)

    # ------------------------------------------------------------ components ---------

    def _build_stages(self, cfg: TrainConfig) -> None:
        """The enabled methods, then each stage: a method's replacement or the default."""
        context = MethodContext(
            cfg=cfg,
            run_dir=self.run_dir,
            pool=self.pool,
            engine=self.engine,
            chat=self.chat,
            train_tasks=self.train_tasks,
            settings=self.settings,
            policy=self.policy,
        )
        self.methods = build_methods(cfg, context)
        self.task_source = self._stage("task_source", lambda: UniformTaskSource(self.train_tasks))
        extensions = [x for m in self.methods if (x := m.rollout_extension()) is not None]
        self.collector = self._stage(
            "collector", lambda: RolloutCollector(self.engine, self.pool, self.settings, extensions)
        )
        self.scorer = self._stage("scorer", EnvironmentReward)
        check_collector(cfg, self.collector)
        self.reset_objective()

    def reset_objective(self) -> None:
        """A fresh objective stage (optimizer, KL reference) and critic for the policy's current weights."""
        cfg = self.cfg
        if self.policy.model is None:  # a served model: evaluation only (check_server_config)
            self.critic, self.objective = NoCritic(), None
            return
        self.critic = build_critic(cfg, self.policy, self.init_from)
        self.objective = self._stage("objective", lambda: PPOObjective.for_run(self))

    def _stage(self, kind: str, default):
        """The one method's replacement for stage ``kind`` (``Method.<kind>()``), else ``default()``."""
        offered = [(m.name, stage) for m in self.methods if (stage := getattr(m, kind)()) is not None]
        if len(offered) > 1:
            raise ConfigError(f"methods {', '.join(n for n, _ in offered)} all replace the {kind} stage")
        return offered[0][1] if offered else default()

    def method(self, name: str):
        """The enabled method called ``name`` (KeyError if none)."""
        if (found := {m.name: m for m in self.methods}.get(name)) is None:
            raise KeyError(f"no enabled method {name!r}")
        return found

    def chat(
        self,
        conversations: list[list[dict[str, str]]],
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        stop: tuple[str, ...] = (),
        response_prefix: str = "",
    ) -> list[str]:
        """Batched chat completion with the policy (e.g. Agent-In-World's analyst and retriever):
        each answer starts after ``response_prefix`` (prefilled, not returned) and ends at a
        ``stop`` string (returned), EOS or ``max_new_tokens``."""
        prompts = [self.engine.encode_chat(c, response_prefix=response_prefix) for c in conversations]
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, stop=tuple(stop))
        return [g.text for g in self.engine.generate(prompts, params)]

    # ------------------------------------------------------------------ loop ---------

    def run(self) -> list[EvalResult]:
        cfg = self.cfg
        if self.finished:
            self._warn(
                f"{self.run_dir}: this run already finished ({cfg.iterations} iterations, final "
                "evaluation written); nothing to do"
            )
            return self.evals
        prepare_run_files(
            self.metrics,
            self.methods,
            cfg,
            start_iteration=self.start_iteration,
            position=self._metrics_position,
            resume=self.resume,
            quiet=self.quiet,
        )
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(recorded_config(cfg), sort_keys=False))
        if self.start_iteration == 0 and cfg.sft.enabled:
            from roleagent.sft.warm_start import warm_start

            warm_start(self)  # evaluates "base" and "sft" (eval.at_start), fine-tunes in between
        elif self.start_iteration == 0 and cfg.eval.at_start:
            self.evaluate("before")
        checkpoint = self.resumed_from
        for iteration in range(self.start_iteration, cfg.iterations):
            if self.budget_spent():  # checkpoint what was trained, then the final evaluation
                self._warn(f"budget_minutes spent after {iteration} of {cfg.iterations} iterations")
                if iteration > self.start_iteration and iteration % cfg.checkpoint_every:
                    checkpoint = self.save(iteration - 1)
                break
            record = self.train_iteration(iteration)
            self.metrics.write(record)
            self._log(record)
            if cfg.eval.every and (iteration + 1) % cfg.eval.every == 0 and iteration + 1 < cfg.iterations:
                self.evaluate(f"iter{iteration + 1}")
            if (iteration + 1) % cfg.checkpoint_every == 0 or iteration + 1 == cfg.iterations:
                checkpoint = self.save(iteration)
        self.evaluate("after")
        self.write_summary()
        if checkpoint is not None:
            mark_finished(checkpoint, {"iterations": cfg.iterations, "evals": [e.row() for e in self.evals]})
        return self.evals

    def budget_spent(self) -> bool:
        """``budget_minutes`` (0: none) have passed since the trainer was built."""
        return bool(self.cfg.budget_minutes) and time.perf_counter() - self.started >= 60 * self.cfg.budget_minutes

    def train_iteration(self, iteration: int) -> dict:
        cfg, started = self.cfg, time.perf_counter()

        # 1. Tasks; the G rollouts of a task share one environment seed.
        it = Iteration(iteration, self._jobs(cfg.rollout.tasks_per_iter))

        # 2. Collect and score (dynamic_sampling: more tasks until enough groups disagree) --
        t0 = time.perf_counter()
        with self.memory.phase("rollout"), self._progress(f"iter {iteration} rollout", self.max_steps) as bar:
            trained, score_metrics, sampling = collect_rounds(it, self.collector, self.scorer, self._jobs, cfg, bar)
        rollout_s = time.perf_counter() - t0

        # 3. Advantages (pure functions over flattened steps), then the methods' adjustments
        t0 = time.perf_counter()
        it.batch = StepBatch.from_trajectories(trained)
        it.batch.values = self.critic.values(it.batch)
        it.estimate = compute_advantages(it.batch, cfg.algo, estimator_settings(cfg))
        for method in self.methods:
            it.estimate.value = method.adjust_advantages(it.batch, it.estimate.value)
        write_records(it.batch, it.estimate)
        it.samples = self.objective.samples(it, self.methods)
        advantage_s = time.perf_counter() - t0

        # 4. Critic and policy update ---------------------------------------------------------
        t0 = time.perf_counter()
        with self.memory.phase("update"):
            drop_prefix_kv(self.engine)  # stale after the update anyway: its memory goes to the update
            critic_metrics = self.critic.update(it.batch, it.estimate)
            update = self.objective.update(it.samples, self.shuffle_rng)
        self.engine.weights_changed()  # stored prefix KV was computed with the old weights
        update_s = time.perf_counter() - t0

        # 5. The methods' hooks after the update ---------------------------------------------
        method_metrics, method_times = {}, {}
        for method in self.methods:
            t0 = time.perf_counter()
            metrics = method.after_iteration(it.trajectories, iteration)
            method_metrics.update({f"{method.name}/{k}": v for k, v in metrics.items()})
            method_times[f"time/{method.name}_s"] = time.perf_counter() - t0
        dump_trajectories(self.run_dir, f"iter_{iteration:06d}", it.trajectories)  # with what the algorithm computed

        stats = it.stats
        return {
            "iteration": iteration,
            **rollout_metrics(it.trajectories, prefix="train/"),
            **sampling,
            **reuse_metrics(stats),
            **{f"score/{k}": v for k, v in score_metrics.items()},
            **advantage_metrics(it.batch, it.estimate),
            **{f"update/{k}": v for k, v in update.items()},
            **critic_metrics,
            **method_metrics,
            "env_restarts": self.pool.restarts,
            "time/rollout_s": rollout_s,
            "time/generate_s": stats.generate_s,
            "time/extension_s": stats.extension_s,
            "time/env_s": stats.env_s,
            "time/advantage_s": advantage_s,
            "time/update_s": update_s,
            **method_times,
            "time/iteration_s": time.perf_counter() - started,
            "speed/rollout_tokens_per_s": (stats.generated_tokens + stats.prompt_tokens) / max(rollout_s, 1e-9),
            "speed/generated_tokens_per_s": stats.generated_tokens / max(stats.generate_s + stats.extension_s, 1e-9),
            "speed/train_tokens_per_s": update.get("trained_tokens", 0) / max(update_s, 1e-9),
            "memory/peak_rss_mb": peak_rss_mb(),
            **self.memory.metrics(),  # rollout, update; sft and load_sft in the first one
        }

    def _jobs(self, n: int) -> list[tuple[Task, int]]:
        """``n`` tasks from the task source, each G times with one environment seed."""
        tasks = self.task_source.sample(n, self.rng)
        seeds = self.rng.integers(0, 2**31 - 1, size=len(tasks))
        return [(task, int(seed)) for task, seed in zip(tasks, seeds) for _ in range(self.cfg.rollout.group_size)]

    def evaluate(self, label: str) -> EvalResult:
        """Greedy episodes on each fixed panel (``eval.splits``), and ``eval.sampled``
        sampled ones per game, without the methods' rollout extensions; returns the first
        panel's result (all are in ``self.evals``)."""
        return [evaluate_panel(self, label, split, tasks) for split, tasks in self.eval_panels.items()][0]

    # ------------------------------------------------------- persistence -------------

    def save(self, iteration: int) -> Path:
        state = {
            "rng_np": self.rng.bit_generator.state,
            "rng_shuffle": self.shuffle_rng.getstate(),
            "engine_generator": self.engine.get_rng_state(),
            "methods": {method.name: method.state_dict() for method in self.methods},
            "evals": [e.row() for e in self.evals],
            "metrics": self.metrics.position(),
            "init_from": portable(self.init_from, self.run_dir),  # relative to the run folder inside it
            "critic": self.critic.state_dict(),
        }
        base = sft_info(self.cfg.model.name, self.init_from, self.cfg.seed)  # the checkpoint is an init_from
        return save_checkpoint(self.run_dir, iteration, policy=self.policy, optimizer=self.objective.optimizer,
                               state=state, base=base)  # fmt: skip

    def _restore(self, loaded: LoadedCheckpoint) -> None:
        state = loaded.state
        if not same_init(state.get("init_from", ""), self.init_from, self.run_dir):
            raise CheckpointError(
                f"{loaded.path}: trained from init_from={state.get('init_from', '')!r}, but this run starts "
                f"from {self.init_from!r}; resume with the same model.init_from (and sft.enabled), or --no-resume"
            )
        apply_checkpoint(loaded, policy=self.policy, optimizer=self.objective.optimizer)
        self.critic.load_state_dict(state.get("critic"))
        self.engine.weights_changed()
        self.rng.bit_generator.state = state["rng_np"]
        self.shuffle_rng.setstate(state["rng_shuffle"])
        self.engine.set_rng_state(state["engine_generator"])
        for method in self.methods:
            if method.name in state["methods"]:
                method.load_state_dict(state["methods"][method.name])
            else:  # switched on after this checkpoint: no earlier files of its count
                method.start_fresh()
        self.evals = [EvalResult.restored(row) for row in state.get("evals", [])]
        self.start_iteration = state["iteration"] + 1
        self.resumed_from = loaded.path
        self._metrics_position = state["metrics"]
        done = loaded.finished
        if done is not None and done.get("iterations") == self.cfg.iterations:
            self.finished = True
            self.evals = [EvalResult.restored(row) for row in done.get("evals", [])]
        elif not self.quiet:
            print(f"resuming from {loaded.path} (next iteration {self.start_iteration})")

    def write_summary(self) -> None:
        write_run_summary(self.cfg, self.evals, self.eval_panels, self.methods, quiet=self.quiet)

    def close(self) -> None:
        """Release everything, also after a failed ``__init__`` (whatever was built)."""
        try:
            for part in [*getattr(self, "methods", []), getattr(self, "pool", None), getattr(self, "metrics", None)]:
                if part is not None:
                    part.close()
        finally:
            self._lock.release()

    # -------------------------------------------------------------- plumbing ---------

    def _warn(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def _progress(self, desc: str, total: int):
        return tqdm(total=total, desc=desc, leave=False, disable=self.quiet, unit="turn")

    def _log(self, record: dict) -> None:
        if not self.quiet:
            print(log_line(record), flush=True)
