"""The command line in a subprocess, with a tiny model and a tiny budget."""

import json
import os
import re
import subprocess
import sys

import pytest

ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}


def cli(*args, check=True):
    result = subprocess.run(
        [sys.executable, "-m", "roleagent.cli", *args], capture_output=True, text=True, env=ENV, timeout=600
    )
    if check and result.returncode != 0:
        raise AssertionError(f"roleagent {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.mark.slow
def test_train_view_eval_smoke(tmp_path):
    run = tmp_path / "run"
    out = cli(
        "train",
        "role_agent_textcraft",
        "--set",
        "model.name=tiny",
        "--set",
        f"run_dir={run}",
        "--set",
        "iterations=1",
        "--set",
        "rollout.tasks_per_iter=2",
        "--set",
        "rollout.group_size=2",
        "--set",
        "optim.mini_batches=2",  # the recipe's 8 need at least 8 episodes
        "--set",
        "rollout.max_new_tokens=4",
        "--set",
        "wia.max_new_tokens=4",
        "--set",
        "eval.max_tasks=2",
        "--set",
        "env.kwargs={difficulty: easy, max_steps: 2}",
        "--set",
        "report_to=[jsonl]",
    )
    assert "textcraft eval success (%)" in out.stdout and "before" in out.stdout and "after" in out.stdout
    for name in (
        "config.yaml",
        "metrics.jsonl",
        "summary.json",
        "eval_table.txt",
        "checkpoints/latest",
        "rollouts/iter_000000.jsonl",
        "rollouts/eval_before.jsonl",
    ):
        assert (run / name).exists(), name
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["evals"]) == {"before", "after"}
    trajectory = json.loads((run / "rollouts" / "iter_000000.jsonl").read_text().splitlines()[0])
    assert trajectory["task_id"].startswith("textcraft/")
    step = trajectory["steps"][0]  # what the algorithm computed, and World-In-Agent's record
    assert set(step["extras"]) == {"wia", "algo"} and {"advantage", "episode", "step", "state_group"} <= set(
        step["extras"]["algo"]
    )
    assert "scores" in step["extras"]["wia"] and "ids" not in step["extras"]["wia"]  # no token data in dumps

    listing = cli("view", str(run)).stdout
    assert "iter_000000" in listing and "4 trajectories" in listing
    shown = cli("view", str(run), "--file", "iter_000000", "--index", "0").stdout
    assert "step 0" in shown and "observation:" in shown and "advantage" in shown

    evaluated = cli("eval", "--run", str(run), "--max-tasks", "2", "--label", "ckpt").stdout
    assert "ckpt eval" in evaluated
    assert re.search(r"\n  ckpt eval  \d/2 = \d+\.\d% \[", evaluated)  # the count and its 95% interval


def test_envs_lists_registry():
    out = cli("envs").stdout
    for name in ("textcraft", "alfworld", "bfcl", "scripted"):
        assert name in out


def test_bad_config_exits_2_with_a_suggestion():
    result = cli("train", "role_agent_textcraft", "--set", "optim.lrr=1", check=False)
    assert result.returncode == 2
    assert "did you mean 'optim.lr'" in result.stderr


def test_expert_eval_scripted_env():
    out = cli("eval", "--env", "scripted", "--policy", "expert", "--set", "env.processes=false").stdout
    assert "expert eval" in out and "100.0" in out
