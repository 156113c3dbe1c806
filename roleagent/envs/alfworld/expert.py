"""The planner expert: episodes and an SFT warm-start dataset of (prompt context, action).

The expert is ALFWorld's PDDL planner (fast-downward inside TextWorld): at every step
``AlfWorldEnv.expert_action()`` replans from the current state and returns the first
command (what ``EnvInfos(policy_commands=True)`` gives), so the expert also recovers
from states it did not cause.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from roleagent.types import Step, Task, Trajectory


def run_expert_episode(env, task: Task, seed: int = 0) -> Trajectory:
    """Play ``task`` with the planner's commands until success or the step limit."""
    observation, _info = env.reset(task, seed)
    steps: list[Step] = []
    while True:
        action = env.expert_action()
        if action is None:
            break
        result = env.step(action)
        steps.append(
            Step(
                observation=observation,
                state_key=env.state_key(observation),
                action_text=action,
                action=action,
                valid=True,
                reward=result.reward,
                done=result.done,
                info=dict(result.info),
            )
        )
        observation = result.observation
        if result.done:
            break
    success = bool(steps and steps[-1].info.get("success"))
    return Trajectory(task=task, steps=steps, success=success, final_observation=observation, seed=seed)


def default_prompt(record: dict[str, Any]) -> str:
    """A compact ALFWorld prompt (verl-agent's layout, short enough for CPU runs)."""
    history = "\n".join(f"[Action] {a}\n[Observation] {o}" for a, o in record["history"])
    lines = [f"You are an agent in a household. {record['instruction']}"]
    if history:
        lines.append(f"Your last {len(record['history'])} actions and what you saw:\n{history}")
    lines.append(f"Step {record['step'] + 1}. Current observation: {record['observation']}")
    lines.append("Admissible actions: " + ", ".join(record["admissible_actions"]))
    lines.append("Choose one admissible action.")
    return "\n".join(lines)


def expert_records(
    env,
    task: Task,
    history_length: int = 2,
    prompt_fn: Callable[[dict[str, Any]], str] | None = default_prompt,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], bool]:
    """One expert episode as per-step records {prompt context ..., "action"}."""
    observation, info = env.reset(task, seed)
    instruction = info["instruction"]
    admissible = list(info["admissible_actions"])
    history: list[tuple[str, str]] = []
    records = []
    success = False
    for t in range(env.max_steps):
        action = env.expert_action()
        if action is None:
            break
        record = {
            "task_id": task.id,
            "task_type": task.metadata.get("task_type"),
            "step": t,
            "instruction": instruction,
            "observation": observation,
            "history": [list(h) for h in history[-history_length:]] if history_length else [],
            "admissible_actions": admissible,
            "action": action,
        }
        if prompt_fn is not None:
            record["prompt"] = prompt_fn(record)
        records.append(record)
        result = env.step(action)
        history.append((action, result.observation))
        observation = result.observation
        admissible = list(result.info.get("admissible_actions") or [])
        if result.done:
            success = bool(result.info.get("success"))
            break
    return records, success


def build_expert_dataset(
    env,
    tasks: Iterable[Task],
    out_path: str,
    history_length: int = 2,
    prompt_fn: Callable[[dict[str, Any]], str] | None = default_prompt,
    only_successful: bool = True,
) -> dict[str, int]:
    """Write JSONL of expert (prompt context, action) steps for SFT warm starts.

    Each line: task_id, task_type, step, instruction, observation, history (last
    ``history_length`` [action, observation] pairs), admissible_actions, action, and
    ``prompt`` (``prompt_fn(record)``; pass ``prompt_fn=None`` to render prompts later with
    the trainer's own template). Returns counts {"episodes", "successes", "records"}.
    """
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    stats = {"episodes": 0, "successes": 0, "records": 0}
    tmp = out_path + ".tmp"
    with open(tmp, "w") as fh:
        for task in tasks:
            records, success = expert_records(env, task, history_length, prompt_fn)
            stats["episodes"] += 1
            stats["successes"] += int(success)
            if only_successful and not success:
                continue
            for record in records:
                fh.write(json.dumps(record) + "\n")
                stats["records"] += 1
    os.replace(tmp, out_path)
    return stats
