"""Agent-R (Yuan et al., 2025, "Agent-R: Training Language Model Agents to Reflect via
Iterative Self-Training", arXiv 2501.11425) as a method plug-in: it replaces two stages of
the loop (``roleagent.trainer.stages``).

One loop iteration is one Agent-R iteration i (α = ``alpha_schedule[i]``)::

    tasks        = task_source.sample(rollout.tasks_per_iter)      # one tree per task
    trees        = MCTS with the current policy (collector)        # .mcts.search_trees
    goods, pairs = per tree: value ≥ α; value gap > β              # .data.select
    verdicts     = the policy judges each bad step (one batch)     # .data.judge_pairs
    examples     = good + revision trajectories (+ general data at η)
    SFT          = epochs_first (i = 0) or epochs_later epochs     # objective

Files, per iteration ``i`` (``run_dir/agent_r/iter_00000i/``): ``trees/*.json`` (view with
``roleagent view``), ``pairs.jsonl`` (each pair's paths, values, verdicts and the judge's
answers), ``examples.jsonl`` (the chat examples trained on, ``roleagent.sft.data``
format). A resumed run removes iterations after its checkpoint and redoes them.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

from roleagent.algos.agent_r import alpha_for_iteration
from roleagent.fields import ConfigError
from roleagent.methods.agent_r import data
from roleagent.methods.agent_r.config import AgentRConfig
from roleagent.methods.agent_r.judge import judge_counts
from roleagent.methods.agent_r.mcts import MCTSSettings, save_trees, search_trees
from roleagent.sft.config import SFTConfig
from roleagent.sft.data import SFTDataError, encode_example, write_examples
from roleagent.sft.sources import format_eos, read_examples
from roleagent.sft.train import sft_epoch, sft_optimizer
from roleagent.trainer.methods import Method
from roleagent.trainer.metrics import peak_rss_mb


class AgentRMethod(Method):
    name = "agent_r"
    config_class = AgentRConfig
    uses_advantages = False

    def __init__(self, context, config: AgentRConfig):
        super().__init__(context, config)
        self.iteration = 0  # Agent-R iterations finished
        self.metrics: dict[str, float] = {}
        self.general = read_examples(config.general_data, eos=format_eos(context.cfg)) if config.general_data else []

    @classmethod
    def check_config(cls, cfg) -> None:
        r = cfg.rollout
        if r.context != "full":
            raise ConfigError("agent_r.enabled needs rollout.context=full (revision trajectories are whole chats)")
        if r.action_format != "think_action":
            raise ConfigError("agent_r.enabled needs rollout.action_format=think_action (thought + action turns)")
        if r.group_size != 1:
            raise ConfigError("agent_r builds one tree per task: set rollout.group_size=1")
        for name in ("wia", "aiw", "seal", "dynamic_sampling"):
            if getattr(cfg, name).enabled:
                raise ConfigError(f"agent_r replaces the RL objective: it cannot run with {name}.enabled")

    @classmethod
    def episodes_at_once(cls, cfg) -> int:
        """A search round expands every tree's node into ``candidates`` episodes at once."""
        return cfg.rollout.tasks_per_iter * cfg.agent_r.candidates

    # -- stages ---------------------------------------------------------------------------
    def collector(self):
        return self

    def objective(self):
        return AgentRObjective(self)  # a fresh optimizer for the policy's current weights

    def collect(self, iteration, progress=None):
        """Build the trees and this iteration's examples (left for the objective in
        ``iteration.extras["agent_r/examples"]``); return the leaf paths as trajectories."""
        cfg, ctx, jobs = self.config, self.context, iteration.jobs
        out = self.iteration_dir(self.iteration)
        shutil.rmtree(out, ignore_errors=True)
        started = time.perf_counter()
        mcts = MCTSSettings(
            iterations=cfg.mcts_iterations,
            max_depth=cfg.max_depth,
            candidates=cfg.candidates,
            c=cfg.c_uct,
            temperature=cfg.temperature,
        )
        rng = random.Random(f"{ctx.cfg.seed}/agent_r/{self.iteration}")
        trees, stats = search_trees(ctx.engine, ctx.pool, jobs, ctx.settings, mcts, rng, progress=progress)
        save_trees(trees, out / "trees")
        search_s = time.perf_counter() - started
        examples = self._build(trees, out, rng)
        errors = float(sum(tree.error is not None for tree in trees))  # replay mismatches (see mcts)
        self.metrics = {**self.metrics, "search_time_s": search_s, "trees": float(len(trees)), "tree_errors": errors}
        iteration.extras["agent_r/examples"] = examples
        trajectories = [t for tree in trees for t in tree.trajectories()]
        return trajectories, stats

    def _build(self, trees, out: Path, rng: random.Random) -> list:
        cfg, ctx = self.config, self.context
        fmt = ctx.settings.action_format
        alpha = alpha_for_iteration(self.iteration, [float(a) for a in cfg.alpha_schedule])
        goods, pairs = data.select_all(
            trees, alpha=alpha, beta=float(cfg.beta), max_good=cfg.max_good_per_tree, max_pairs=cfg.max_pairs_per_tree
        )
        started = time.perf_counter()
        judgements = []
        if cfg.judge:
            env, limit = ctx.cfg.env.name, cfg.judge_max_new_tokens
            judgements = data.judge_pairs(pairs, ctx.engine, env, history=cfg.judge_history, max_new_tokens=limit)
        judge_s = time.perf_counter() - started
        chats = [data.good_example(tree, path, fmt) for tree, path in goods]
        revisions = [data.revision_example(pair, fmt, rng) for pair in pairs]
        chats += revisions
        _write_pairs(out / "pairs.jsonl", pairs)
        write_examples(out / "examples.jsonl", chats)
        encoded, too_long = [], 0
        for example in chats:
            try:
                encoded.append(encode_example(ctx.engine, example))
            except SFTDataError:
                too_long += 1
        self.metrics = {
            "alpha": alpha,
            "good": float(len(goods)),
            "revision": float(len(pairs)),
            "revision_judged": float(sum(e.meta["judged"] for e in revisions)),
            "too_long": float(too_long),
            "judge_time_s": judge_s,
            **judge_counts(judgements),
        }
        return encoded + self._general(len(encoded), rng)

    def _general(self, n_agent: int, rng: random.Random) -> list:
        """General examples at η (paper Eq. 6): ``round(n_agent · (1 − η) / η)`` of them,
        each file example at most once per iteration until all are used."""
        if not self.general or n_agent == 0:
            return []
        eta = float(self.config.eta)
        n = round(n_agent * (1 - eta) / eta)
        whole, rest = divmod(n, len(self.general))
        picks = self.general * whole + rng.sample(self.general, rest)
        self.metrics["general"] = float(n)
        return [encode_example(self.context.engine, e) for e in picks]

    def iteration_dir(self, iteration: int) -> Path:
        return self.context.run_dir / "agent_r" / f"iter_{iteration:06d}"

    # -- hooks ------------------------------------------------------------------------------
    def after_iteration(self, trajectories, iteration: int) -> dict[str, float]:
        self.iteration = iteration + 1
        metrics, self.metrics = self.metrics, {}
        return metrics

    def start_fresh(self) -> None:
        shutil.rmtree(self.context.run_dir / "agent_r", ignore_errors=True)

    def state_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state.get("iteration", 0))
        root = self.context.run_dir / "agent_r"
        for folder in sorted(root.glob("iter_*")) if root.exists() else []:
            if int(folder.name.removeprefix("iter_")) >= self.iteration:
                shutil.rmtree(folder)


def sft_settings(agent_r, grad_clip: float) -> SFTConfig:
    """The revision SFT's settings, from the ``agent_r`` block (its rate stays constant)."""
    return SFTConfig(
        lr=agent_r.lr,
        batch_examples=agent_r.batch_examples,
        micro_batch_tokens=agent_r.micro_batch_tokens,
        grad_clip=grad_clip,
    )


class AgentRObjective:
    """Iterative SFT on the iteration's examples (``roleagent.sft.train.sft_epoch``): the
    loop's advantages are not used. ``samples`` returns encoded chat examples."""

    def __init__(self, method: AgentRMethod):
        self.method = method
        cfg = method.config
        policy = method.context.policy
        self.policy = policy
        self.sft = sft_settings(cfg, method.context.cfg.optim.grad_clip)
        self.stepper = sft_optimizer(policy, self.sft, total_steps=0)  # constant rate over the iterations
        self.optimizer = self.stepper.adamw  # what checkpoints save

    def samples(self, iteration, methods) -> list:
        return list(iteration.extras.get("agent_r/examples", []))

    def update(self, samples: list, rng: random.Random) -> dict[str, float]:
        method = self.method
        if not samples:
            return {"examples": 0.0, "trained_tokens": 0.0}
        epochs = method.config.epochs_first if method.iteration == 0 else method.config.epochs_later
        seed = method.context.cfg.seed * 1000 + method.iteration
        records = [sft_epoch(self.policy, self.stepper, samples, self.sft, seed, e) for e in range(epochs)]
        tokens = sum(r["loss_tokens"] for r in records)
        return {
            "examples": float(len(samples)),
            "epochs": float(epochs),
            "loss_first": records[0]["loss"],
            "loss_last": records[-1]["loss"],
            "trained_tokens": float(sum(sum(len(e.ids) for e in samples) for _ in records)),
            "loss_tokens": float(tokens),
            "peak_rss_mb": peak_rss_mb(),
        }


def _write_pairs(path: Path, pairs: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for p in pairs:
            record = {
                "task": p.tree.task.id,
                "seed": p.tree.seed,
                "good": p.good,
                "bad": p.bad,
                "shared": p.start,
                "values": [p.tree.path_value(p.good), p.tree.path_value(p.bad)],
                "verdicts": p.verdicts,
                "answers": p.answers,
                "truncated": p.truncated,
            }
            f.write(json.dumps(record) + "\n")
