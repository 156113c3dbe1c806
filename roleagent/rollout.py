"""Batched multi-turn rollouts: every active episode advances one turn per model call.

One turn of the loop (all active episodes together):

1. build each episode's actor prompt and generate all actions in one batched call;
2. World-In-Agent (optional): generate all H-step predictions in a second batched call;
3. step all environments in parallel (worker processes) — a separate phase, so
   environment processes never compete with torch for the cores (DESIGN §6);
4. finished episodes drop out of the batch.

An output without a parsable action is an invalid step: the environment is not stepped,
the observation stays, the step's environment reward is 0 and its ``penalty`` is
``invalid_penalty`` (``Step.reward`` = −penalty; where the advantage functions place the
penalty is ``algo.penalty_placement``). A crashed
environment ends its episode with ``Trajectory.crashed`` set.

Group rollouts (G episodes of one task) share the environment seed, so their first
states coincide and GiGPO's anchor groups have something to compare.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

from roleagent.algos import prediction_score_matrix
from roleagent.engine.hf import HFEngine, SamplingParams
from roleagent.envs.workers import EnvPool
from roleagent.roles import actor, predictor
from roleagent.types import Step, Task, Trajectory


@dataclass
class RolloutSettings:
    max_steps: int
    action_format: str = "think_action"
    history: int = 3
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    invalid_penalty: float = 0.1
    project_actions: bool = False  # map a non-admissible action onto the closest admissible one
    wia_horizon: int = 0  # 0: no World-In-Agent predictions
    wia_max_new_tokens: int = 48


@dataclass
class RolloutStats:
    generate_s: float = 0.0
    predict_s: float = 0.0
    env_s: float = 0.0
    turns: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class _Episode:
    slot: int
    trajectory: Trajectory
    instruction: str
    observation: str
    state_key: object
    admissible: list[str] | None
    history: list[tuple[str, str]] = field(default_factory=list)
    transcript: list[dict[str, str]] | None = None  # chat protocol (env reports "messages")
    done: bool = False


def run_episodes(
    *,
    engine: HFEngine,
    pool: EnvPool,
    jobs: list[tuple[Task, int]],
    settings: RolloutSettings,
    progress=None,
) -> tuple[list[Trajectory], RolloutStats]:
    """Play each ``(task, seed)`` once; at most ``pool.size`` episodes run at a time."""
    stats = RolloutStats()
    trajectories: list[Trajectory] = []
    tokens_before = (engine.generated_tokens, engine.prompt_tokens)
    for start in range(0, len(jobs), pool.size):
        wave = jobs[start:start + pool.size]
        trajectories.extend(_run_wave(engine, pool, wave, settings, stats, progress))
    stats.generated_tokens = engine.generated_tokens - tokens_before[0]
    stats.prompt_tokens = engine.prompt_tokens - tokens_before[1]
    return trajectories, stats


def _messages(info: dict | None) -> list[dict[str, str]] | None:
    messages = (info or {}).get("messages")
    return None if messages is None else [dict(m) for m in messages]


def _actor_messages(e: _Episode, settings: RolloutSettings, engine: HFEngine, count_tokens) -> list[dict[str, str]]:
    """The actor's chat: the whole conversation for environments that report their chat
    messages (BFCL), trimmed to the engine's prompt budget; else the bounded text prompt."""
    if e.transcript is not None:
        return actor.chat_messages(instruction=e.instruction, transcript=e.transcript,
                                   count_tokens=count_tokens, budget=engine.max_prompt_tokens)
    return actor.actor_messages(
        instruction=e.instruction, observation=e.observation, history=e.history,
        admissible=e.admissible, action_format=settings.action_format, max_history=settings.history,
    )


def _run_wave(engine, pool, wave, settings, stats, progress) -> list[Trajectory]:
    started = time.perf_counter()
    count_tokens = functools.lru_cache(maxsize=4096)(
        lambda text: len(engine.tokenizer(text, add_special_tokens=False)["input_ids"]))
    replies = pool.reset([(slot, task, seed) for slot, (task, seed) in enumerate(wave)])
    stats.env_s += time.perf_counter() - started
    episodes = [
        _Episode(
            slot=slot, trajectory=Trajectory(task=task, seed=seed, instruction=(reply.info or {}).get("instruction", "")),
            instruction=(reply.info or {}).get("instruction", ""),
            observation=reply.observation, state_key=reply.state_key, admissible=reply.admissible,
            transcript=_messages(reply.info),
        )
        for slot, ((task, seed), reply) in enumerate(zip(wave, replies))
    ]
    sampling = SamplingParams(
        max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
        top_p=settings.top_p, stop=actor.STOP[settings.action_format],
    )
    for _ in range(settings.max_steps):
        active = [e for e in episodes if not e.done]
        if not active:
            break
        stats.turns += 1

        # 1. actions, one batched generation ---------------------------------------
        started = time.perf_counter()
        prompts = [
            engine.encode_chat(_actor_messages(e, settings, engine, count_tokens),
                               response_prefix=actor.RESPONSE_PREFIX[settings.action_format])
            for e in active
        ]
        generations = engine.generate(prompts, sampling)
        parsed = [actor.parse_action(g.text, settings.action_format) for g in generations]
        if settings.project_actions:
            parsed = [actor.project_action(p, e.admissible) for p, e in zip(parsed, active)]
        stats.generate_s += time.perf_counter() - started

        # 2. World-In-Agent predictions of the next H states ------------------------
        predictions: list[list[str]] = [[] for _ in active]
        prediction_gens = [None] * len(active)
        if settings.wia_horizon > 0:
            started = time.perf_counter()
            valid_rows = [i for i, p in enumerate(parsed) if p.valid]
            pred_prompts = [
                engine.encode_chat(
                    predictor.predictor_messages(
                        instruction=active[i].instruction, observation=active[i].observation,
                        action=parsed[i].action, horizon=settings.wia_horizon,
                    ),
                    response_prefix=predictor.PREFIX,
                )
                for i in valid_rows
            ]
            if pred_prompts:
                pred_sampling = SamplingParams(
                    max_new_tokens=settings.wia_max_new_tokens, temperature=settings.temperature,
                    top_p=settings.top_p, stop=predictor.stop_strings(settings.wia_horizon),
                )
                for i, gen in zip(valid_rows, engine.generate(pred_prompts, pred_sampling)):
                    predictions[i] = predictor.parse_predictions(gen.text, settings.wia_horizon)
                    prediction_gens[i] = gen
            stats.predict_s += time.perf_counter() - started

        # 3. environment steps, all slots in parallel --------------------------------
        started = time.perf_counter()
        to_step = [(e.slot, p.action) for e, p in zip(active, parsed) if p.valid]
        replies = iter(pool.step(to_step)) if to_step else iter(())
        stats.env_s += time.perf_counter() - started

        for e, gen, p, preds, pgen in zip(active, generations, parsed, predictions, prediction_gens):
            step = Step(
                observation=e.observation, state_key=e.state_key,
                prompt_ids=gen.prompt_ids, action_ids=gen.ids, action_logprobs=gen.logprobs,
                action_text=gen.text, action=p.action, valid=p.valid, predictions=preds,
            )
            if pgen is not None:
                step.prediction_prompt_ids = pgen.prompt_ids
                step.prediction_ids = pgen.ids
                step.prediction_logprobs = pgen.logprobs
            if p.valid:
                reply = next(replies)
                step.reward, step.done = reply.reward, reply.done
                step.info = dict(reply.info or {})
                if p.projected_from is not None:
                    step.info["projected_from"] = p.projected_from
                if reply.crashed:
                    e.trajectory.crashed = True
                else:
                    e.observation, e.state_key = reply.observation, reply.state_key
                    e.admissible = reply.admissible
                if step.info.get("success"):
                    e.trajectory.success = True
                e.history.append((p.action, reply.observation))
                if e.transcript is not None and not reply.crashed:
                    e.transcript += [{"role": "assistant", "content": p.action}] + _messages(reply.info)
            else:
                step.penalty = settings.invalid_penalty
                step.reward = -step.penalty
                step.info = {"invalid": True}
                e.history.append(("(invalid output)", "Invalid action format."))
            e.trajectory.steps.append(step)
            if step.done or e.trajectory.crashed or len(e.trajectory.steps) >= settings.max_steps:
                e.done = True
                e.trajectory.final_observation = e.observation
        if progress is not None:
            progress.update(1)

    for e in episodes:
        if not e.done:  # the loop ran out of turns
            e.trajectory.final_observation = e.observation
        if settings.wia_horizon > 0:
            score_predictions(e.trajectory, settings.wia_horizon)
    return [e.trajectory for e in episodes]


def score_predictions(trajectory: Trajectory, horizon: int) -> None:
    """Fill ``Step.prediction_scores`` with r̃_{t,h} (eq. 4); NaN past the end or when no
    prediction was made (invalid action), so those terms drop out of R_pre."""
    steps = trajectory.steps
    if not steps:
        return
    future = [s.observation for s in steps[1:]] + [trajectory.final_observation]
    predictions = [s.predictions if s.predictions else [None] * horizon for s in steps]
    matrix = prediction_score_matrix(predictions, future, horizon=horizon)  # (T, H)
    for step, row in zip(steps, matrix):
        step.prediction_scores = [float(x) for x in row] if step.predictions else [math.nan] * horizon
