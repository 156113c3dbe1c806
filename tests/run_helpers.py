"""Shared by the trainer tests: tiny settings that really train, runs, kills, comparisons."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import torch

from roleagent.config import load_config
from roleagent.envs import EnvSpec, register_env
from roleagent.envs.base import StepResult
from roleagent.envs.scripted import ScriptedEnv
from roleagent.trainer import Trainer
from roleagent.trainer.checks import prepare
from roleagent.types import Step, Task, Trajectory


class LuckyEnv(ScriptedEnv):
    """ScriptedEnv where an action whose code points sum to a multiple of 12 also wins.

    A random tiny model then wins some episodes and loses others (about half of them in 8
    steps), so groups have mixed returns, advantages are nonzero and the optimizer moves
    the weights; the plain corridor is never solved by it (every return 0, nothing trains).
    """

    name = "lucky"

    def step(self, action: str) -> StepResult:
        if sum(map(ord, action.strip())) % 12 == 0:
            return StepResult(
                "A hidden door opens. You win.",
                1.0,
                True,
                {"success": True, "admissible_actions": self.admissible_actions()},
            )
        return super().step(action)


register_env(EnvSpec("lucky", "tests.run_helpers:LuckyEnv", (), "dev", "test env with random wins"))

#: A small Role-Agent run (World-In-Agent on) on the tiny model; tests of another estimator
#: set ``algo.name`` and ``wia.enabled=false``.
TINY = [
    "algo.name=role_agent",
    "wia.enabled=true",
    "model.name=tiny",
    "model.device=cpu",
    "env.name=lucky",
    "env.processes=false",
    "rollout.tasks_per_iter=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=6",
    "rollout.action_format=action",
    "wia.max_new_tokens=6",
    "report_to=[jsonl]",
    "eval.max_tasks=2",
    "optim.lr=1e-2",
    "threads=1",
]
AIW = ["aiw.enabled=true", "aiw.analyst=rule", "aiw.retriever=bm25"]


class Killed(BaseException):
    """Stands for SIGKILL at a chosen point (nothing after it runs)."""


def checked_config(path=None, overrides=()):
    """``load_config`` and then the run's start checks (``prepare``): the config a Trainer runs."""
    return prepare(load_config(path, list(overrides)))


def config(run_dir: Path, iterations: int, extra=()):
    return checked_config(None, TINY + [f"run_dir={run_dir}", f"iterations={iterations}", *extra])


def run(run_dir: Path, iterations: int, extra=(), **kwargs) -> Trainer:
    trainer = Trainer(config(run_dir, iterations, extra), quiet=True, **kwargs)
    try:
        trainer.run()
    finally:
        trainer.close()
    return trainer


def trainable(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.policy.model.named_parameters() if v.requires_grad}


def metrics(run_dir: Path) -> list[dict]:
    """metrics.jsonl records without wall-clock and memory fields (the only ones allowed to differ)."""
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        out.append(
            {
                k: v
                for k, v in record.items()
                if "time" not in k and "rss" not in k and not k.startswith(("memory/", "speed/"))
            }
        )
    return out


def memory_rows(run_dir: Path) -> dict[str, list[tuple]]:
    """Every row of the failure memory but the wall-clock ``created`` column."""
    conn = sqlite3.connect(str(run_dir / "failure_memory.sqlite"))
    try:
        out = {}
        for table in ("failure_modes", "failures", "retrievals"):
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1] != "created"]
            out[table] = conn.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY id").fetchall()
        return out
    finally:
        conn.close()


def rollouts(run_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((run_dir / "rollouts").glob("*.jsonl"))}


def assert_same_sampled_run(a: Path, b: Path) -> None:
    """The same rollouts token for token and the same evaluation; the update's metrics agree
    to float rounding (the old log-probs they start from do), every other metric exactly."""
    assert rollouts(a) == rollouts(b)
    assert (a / "eval_table.txt").read_text() == (b / "eval_table.txt").read_text()
    for x, y in zip(metrics(a), metrics(b), strict=True):
        assert x.keys() == y.keys()
        for key in x:
            same = x[key] == y[key] or (key.startswith("update/") and abs(x[key] - y[key]) < 1e-5)
            assert same, (key, x[key], y[key])


def assert_same_run(a: Path, b: Path, *, memory: bool = True) -> None:
    """Two run directories hold the same run, file by file and line by line."""
    assert metrics(a) == metrics(b)
    assert rollouts(a) == rollouts(b)
    assert (a / "eval_table.txt").read_text() == (b / "eval_table.txt").read_text()
    if memory:
        assert memory_rows(a) == memory_rows(b)


def make_trajectory(task_id: str, rewards, states=None, *, crashed: bool = False, env: str = "scripted") -> Trajectory:
    """A trajectory of ``env`` with one valid one-token action per reward (states s0, s1, ...)."""
    steps = [
        Step(
            observation=s,
            state_key=s,
            prompt_ids=[1],
            action_ids=[2],
            action_logprobs=[0.0],
            action_text="a",
            action="a",
            valid=True,
            reward=r,
        )
        for r, s in zip(rewards, states or [f"s{i}" for i in range(len(rewards))])
    ]
    return Trajectory(task=Task(task_id, env), steps=steps, crashed=crashed)
