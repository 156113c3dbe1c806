"""Play prompting policies (ReAct, Reflexion's actor) on an :class:`EnvPool`: every
active episode advances one line per batched generation, as in :mod:`roleagent.rollout`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from roleagent.baselines.react import Episode, Turn, parse_chat, parse_line, react_messages
from roleagent.engine.base import Engine, SamplingParams
from roleagent.envs.workers import EnvPool
from roleagent.evaluation import run_expert_episodes
from roleagent.types import Step, Task, Trajectory


def expert_examples(pool: EnvPool, tasks: list[Task], train_split: str, seed: int) -> dict[str, str]:
    """One solved expert example per task type of ``tasks``, played on the first training
    task of that type (never on ``tasks`` themselves). Types without one get none."""
    from roleagent.baselines.react import example_text

    wanted = {task_type(t) for t in tasks}
    chosen: dict[str, Task] = {}
    for task in pool.meta.tasks(train_split):
        kind = task_type(task)
        if kind in wanted and kind not in chosen:
            chosen[kind] = task
    if not chosen:
        return {}
    jobs = [(task, seed) for task in chosen.values()]
    played = run_expert_episodes(pool, jobs, max_steps=pool.meta.max_steps)
    if any("messages" in (s.info or {}) for t in played for s in t.steps):
        return {}  # a conversational environment (BFCL): its ReAct prompt is its chat, zero-shot
    return {kind: example_text(t) for kind, t in zip(chosen, played) if t.success}


def task_type(task: Task) -> str:
    return str(task.metadata.get("task_type", "all"))


def play(
    engine: Engine,
    pool: EnvPool,
    jobs: list[tuple[Task, int]],
    *,
    max_steps: int,
    params: SamplingParams,
    examples: dict[str, str] | None = None,
    reflections: Callable[[Task], list[str]] = lambda task: [],
    history: int = 10,
) -> list[Trajectory]:
    """Each ``(task, seed)`` once with the ReAct prompt (plus the task's reflections)."""
    out: list[Trajectory] = []
    for start in range(0, len(jobs), pool.size):
        out.extend(
            _wave(
                engine, pool, jobs[start : start + pool.size], max_steps, params, examples or {}, reflections, history
            )
        )
    return out


def _wave(engine, pool, wave, max_steps, params, examples, reflections, history) -> list[Trajectory]:
    count = functools.lru_cache(maxsize=4096)(lambda s: len(engine.tokenizer(s, add_special_tokens=False)["input_ids"]))
    replies = pool.reset([(slot, task, seed) for slot, (task, seed) in enumerate(wave)])
    trajectories, episodes = [], []
    for (task, seed), reply in zip(wave, replies):
        info = reply.info or {}
        trajectories.append(
            Trajectory(task=task, seed=seed, instruction=info.get("instruction", ""), crashed=reply.crashed)
        )
        transcript = info.get("messages")
        episodes.append(
            Episode(
                instruction=info.get("instruction", ""),
                observation=reply.observation,
                example=examples.get(task_type(task), ""),
                reflections=list(reflections(task)),
                transcript=None if transcript is None else [dict(m) for m in transcript],
                tools=info.get("tools"),
            )
        )
    current = [r.observation for r in replies]
    keys = [r.state_key for r in replies]
    active = [i for i, r in enumerate(replies) if not r.crashed]
    chat = [e.transcript is not None for e in episodes]
    for _ in range(max_steps):
        if not active:
            break
        prompts = [
            engine.encode_chat(
                react_messages(episodes[i], history=history, count_tokens=count, budget=engine.max_prompt_tokens),
                response_prefix="" if chat[i] else "> ",
            )
            for i in active
        ]
        generations = _generate(engine, prompts, [() if chat[i] else ("\n",) for i in active], params)
        parsed = [(parse_chat if chat[i] else parse_line)(g.text) for i, g in zip(active, generations)]
        acting = [(i, content) for i, (kind, content) in zip(active, parsed) if kind == "act"]
        results = dict(zip([i for i, _ in acting], pool.step(acting) if acting else []))
        still = []
        for i, g, (kind, content) in zip(active, generations, parsed):
            t, e = trajectories[i], episodes[i]
            step = Step(current[i], keys[i], g.text, content if kind == "act" else None, kind != "invalid")
            step.prompt_ids, step.action_ids, step.action_logprobs = g.prompt_ids, g.ids, g.logprobs
            reply = results.get(i)
            if reply is None:  # a thought or an unparsable line: the environment is not stepped
                step.info = {"thought": content} if kind == "think" else {"invalid": True}
                e.turns.append(
                    Turn(
                        f"think: {content}" if kind == "think" else g.text.strip(),
                        "OK." if kind == "think" else "Invalid output.",
                    )
                )
            else:
                step.reward, step.done, step.info = reply.reward, reply.done, dict(reply.info or {})
                t.success = t.success or bool(step.info.get("success"))
                t.crashed = reply.crashed
                e.turns.append(Turn(content, reply.observation))
                current[i], keys[i] = reply.observation, reply.state_key
                if e.transcript is not None and not reply.crashed:
                    e.transcript += [{"role": "assistant", "content": content}] + list(step.info.get("messages") or [])
            t.steps.append(step)
            if not (step.done or t.crashed):
                still.append(i)
        active = still
    for t, obs in zip(trajectories, current):
        t.final_observation = obs
    return trajectories


def _generate(engine, prompts, stops, params):
    """One batched call per distinct stop setting (text rows stop at a newline, chat rows don't)."""
    out = [None] * len(prompts)
    for stop in dict.fromkeys(stops):
        index = [k for k, s in enumerate(stops) if s == stop]
        setting = dataclasses.replace(params, stop=stop)
        for k, g in zip(index, engine.generate([prompts[k] for k in index], setting)):
            out[k] = g
    return out
