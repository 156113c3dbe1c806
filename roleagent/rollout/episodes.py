"""Batched multi-turn rollouts: every active episode advances one turn per model call.

One turn of the loop (all active episodes together):

1. build each episode's actor prompt and generate all actions in one batched call;
2. rollout extensions of the enabled methods (e.g. Role-Agent's World-In-Agent
   predictions): one more batched generation each, recorded in ``step.extras[name]``;
3. step all environments in parallel (worker processes), after step 2 or during it
   (``overlap_env``, :mod:`roleagent.rollout.extensions`);
4. finished episodes drop out of the batch; each extension's ``finish`` sees every
   finished trajectory (e.g. to score the predictions against what followed).

An output without a parsable action is an invalid step: the environment is not stepped,
the observation stays, the step's environment reward is 0 and its ``penalty`` is
``invalid_penalty`` (``Step.reward`` = −penalty; where the advantage functions place the
penalty is ``algo.penalty_placement``). A crashed
environment ends its episode with ``Trajectory.crashed`` set.

Constrained actions (``RolloutSettings.constrain_actions``; a policy over admissible
commands as in GLAM, Carta et al., 2023, arXiv:2302.02662): when the environment lists
admissible commands, the actor's generation is constrained to ``actor.completion(c)`` of
one of them (:mod:`roleagent.engine.constrain`), so every step is valid and the trained
tokens are exactly the executed command, with log-probs renormalised over each
position's allowed tokens (the step keeps those sets in ``Step.action_allowed`` for the
trainer). Environments without a list decode freely. Compare ``project_actions``, which
maps free text onto a command: there the executed command is not what is trained.

Group rollouts (G episodes of one task) share the environment seed, so their first
states coincide and GiGPO's anchor groups have something to compare.

Context modes (``RolloutSettings.context``):

- ``window`` (paper parity): each prompt is rebuilt from the instruction, the last
  ``history`` (action, observation) pairs and the current observation
  (``actor.actor_messages``), so prompts stay bounded;
- ``full``: the episode is one growing chat. Turn 0 is the window prompt (no history yet);
  turn t's prompt is ``engine.extend_chat(prompt_{t-1}, action_ids_{t-1}, [user:
  observation_message])``, i.e. the previous prompt and the sampled ids token for token,
  then the new observation with the admissible actions and the answer format
  (``actor.observation_message``; after an invalid output the message starts with
  "Invalid action format."). With the engine's prefix cache only the new message is
  prefilled. When that continuation would exceed the engine's ``max_prompt_tokens`` it is
  not left-truncated: the episode restarts from its window prompt (which shows the last
  ``history`` steps) and grows from there (counted in ``RolloutStats.context_restarts``).
  Environments that report their chat messages (BFCL) keep their transcript prompt.

Expert play (``RolloutSettings.source=EXPERT``, :mod:`roleagent.rollout.actions`): the
environment's expert chooses each action instead of the engine; prompts are built by the same code as above, the action ids
are the tokens of ``actor.completion(action, action_format)`` (log-probs 0), and each step
records the chat it was prompted with in ``step.extras["chat"]`` (``mode`` "encode": the
whole chat; "extend": the messages added to the previous turn's chat), which
``roleagent.sft.data`` turns into supervised examples. An expert without a move gives an
empty (invalid) output.

Replayed prefixes: a job ``(task, seed, prefix)`` first replays ``prefix``, a list of
assistant texts (``Step.action_text`` as generated), then the policy (or the expert) goes
on until the episode ends or reaches its step limit (``max_steps``, per job when given).
A replayed turn's prompt is built by the same code as any turn; its generation is the
forced text (:mod:`roleagent.rollout.actions`); its step records ``extras["replayed"]``.
The environment is stepped as usual, so a deterministic environment reaches the original
episode's states again (Agent-R's tree search reaches a node this way). In ``context=full``
the next prompt continues the text's token ids as the tokenizer encodes them, which equal
the sampled ids whenever the sample was the tokenizer's own encoding (always so for
constrained and expert turns). Jobs with a prefix, and all jobs with ``record_chat``,
record ``step.extras["chat"]`` like the expert's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from roleagent.engine.base import Engine, SamplingParams
from roleagent.envs.workers import EnvPool
from roleagent.rollout import actor
from roleagent.rollout.actions import POLICY, ActionSource, choose_actions
from roleagent.rollout.extensions import RolloutExtension, Turn, extend_and_step, overlaps_env
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
    constrain_actions: bool = False  # decode only admissible commands (module docstring)
    context: str = "window"  # window | full (module docstring)
    source: ActionSource = POLICY  # who acts: POLICY (the engine) | EXPERT (SFT data; below)
    record_chat: bool = False  # record each step's prompt chat in step.extras["chat"] (below)
    greedy: str = "token"  # at temperature 0: token | command (SamplingParams.greedy)
    overlap_env: str = "auto"  # step the environments during the extensions' generations: auto | always | never


@dataclass
class RolloutStats:
    generate_s: float = 0.0
    extension_s: float = 0.0
    env_s: float = 0.0
    turns: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0  # prefilled by the engine (reused ones not counted)
    reused_prompt_tokens: int = 0  # prompt tokens whose stored KV the engine reused
    prefix_cache_bytes: int = 0  # the engine's stored prefix KV after the rollouts
    context_restarts: int = 0  # context=full: chats restarted from the window prompt
    constrained_actions: int = 0  # constrain_actions: actor generations constrained to the admissible list
    free_actions: int = 0  # actor generations decoded freely (no admissible list, or constraining off)
    timings: dict[str, float] = field(default_factory=dict)

    def add(self, part: RolloutStats) -> None:
        """Accumulate ``part`` (a later call's stats): counts and times add up, the cache
        size is the latest."""
        for f in fields(self):
            value = getattr(part, f.name)
            if f.name == "timings":
                for key, seconds in value.items():
                    self.timings[key] = self.timings.get(key, 0.0) + seconds
            elif f.name == "prefix_cache_bytes":
                self.prefix_cache_bytes = value
            else:
                setattr(self, f.name, getattr(self, f.name) + value)


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
    tools: list[dict] | None = None  # tools for the chat template (env reports "tools")
    last_turn: tuple[list[int], list[int]] | None = None  # context=full: (prompt ids, action ids)
    done: bool = False
    prefix: Sequence[str] = ()  # assistant texts replayed before the policy acts
    max_steps: int = 0  # this episode's step limit


def rollout_settings(cfg, max_steps: int) -> RolloutSettings:
    """The training rollouts' settings: every field a ``TrainConfig``'s ``rollout`` section
    shares with :class:`RolloutSettings`, and the environment's step limit ``max_steps``."""
    r = cfg.rollout
    shared = {f.name for f in fields(RolloutSettings)} & {f.name for f in fields(r)} - {"max_steps"}
    return RolloutSettings(max_steps=max_steps, **{name: getattr(r, name) for name in shared})


def run_episodes(
    *,
    engine: Engine,
    pool: EnvPool,
    jobs: Sequence[tuple[Task, int] | tuple[Task, int, Sequence[str]]],
    settings: RolloutSettings,
    extensions: Sequence[RolloutExtension] = (),
    progress=None,
    max_steps: Sequence[int] | None = None,
) -> tuple[list[Trajectory], RolloutStats]:
    """Play each ``(task, seed)`` or ``(task, seed, prefix)`` once (a prefix is replayed
    first: the module docstring); at most ``pool.size`` episodes run at a time. ``max_steps``
    gives each job its own step limit (default: ``settings.max_steps`` for all)."""
    if not callable(getattr(settings.source, "choose", None)):
        raise ValueError(f"rollout source {settings.source!r} is not an ActionSource (POLICY, EXPERT)")
    jobs = _checked_jobs(jobs, settings.max_steps if max_steps is None else max_steps)
    stats = RolloutStats()
    trajectories: list[Trajectory] = []
    tokens_before = (engine.generated_tokens, engine.prompt_tokens, getattr(engine, "reused_prompt_tokens", 0))
    for start in range(0, len(jobs), pool.size):
        wave = jobs[start : start + pool.size]
        trajectories.extend(_run_wave(engine, pool, wave, settings, extensions, stats, progress))
    stats.generated_tokens = engine.generated_tokens - tokens_before[0]
    stats.prompt_tokens = engine.prompt_tokens - tokens_before[1]
    stats.reused_prompt_tokens = getattr(engine, "reused_prompt_tokens", 0) - tokens_before[2]
    stats.prefix_cache_bytes = getattr(getattr(engine, "prefix_cache", None), "nbytes", 0)
    return trajectories, stats


def _checked_jobs(jobs, max_steps) -> list[tuple[Task, int, tuple[str, ...], int]]:
    """``(task, seed, prefix, step limit)`` per job; a malformed job is a ValueError."""
    limits = [max_steps] * len(jobs) if isinstance(max_steps, int) else list(max_steps)
    if len(limits) != len(jobs):
        raise ValueError(f"max_steps has {len(limits)} entries for {len(jobs)} jobs")
    out = []
    for job, limit in zip(jobs, limits):
        if len(job) not in (2, 3):
            raise ValueError(f"a rollout job is (task, seed) or (task, seed, prefix), got {len(job)} items")
        prefix = () if len(job) == 2 or isinstance(job[2], str) else tuple(job[2])
        if len(job) == 3 and (isinstance(job[2], str) or not all(isinstance(text, str) for text in prefix)):
            raise ValueError(f"a replayed prefix is a list of assistant texts, got {job[2]!r}")
        if not len(prefix) <= limit or limit < 1:
            raise ValueError(f"step limit {limit} of job {job[0].id} is below 1 or its prefix's {len(prefix)} turns")
        out.append((job[0], job[1], prefix, limit))
    return out


def _messages(info: dict | None) -> list[dict[str, str]] | None:
    messages = (info or {}).get("messages")
    return None if messages is None else [dict(m) for m in messages]


def _actor_messages(e: _Episode, settings: RolloutSettings, engine: Engine, count_tokens) -> list[dict[str, str]]:
    """The actor's chat: the whole conversation for environments that report their chat
    messages (BFCL), trimmed to the engine's prompt budget; else the bounded text prompt."""
    if e.transcript is not None:
        return actor.chat_messages(
            instruction=e.instruction,
            transcript=e.transcript,
            count_tokens=count_tokens,
            budget=engine.max_prompt_tokens,
            tools=e.tools,
        )
    return actor.actor_messages(
        instruction=e.instruction,
        observation=e.observation,
        history=e.history,
        admissible=e.admissible,
        action_format=settings.action_format,
        max_history=settings.history,
    )


def _actor_prompt(
    e: _Episode, settings: RolloutSettings, engine: Engine, count_tokens, stats, chat: dict | None = None
) -> list[int]:
    """Turn ids of the actor's prompt: the window prompt, or in ``context=full`` the
    continuation of the episode's chat (the module docstring; never left-truncated).
    ``chat``, when given, receives how the prompt was built (``step.extras["chat"]``)."""
    prefix = actor.RESPONSE_PREFIX[settings.action_format]
    chat = {} if chat is None else chat
    chat["response_prefix"] = prefix
    chat["eos"] = not actor.STOP[settings.action_format]  # generation ends with EOS (no stop string)
    if settings.context == "full" and e.transcript is None and e.last_turn is not None:
        after_invalid = bool(e.trajectory.steps) and not e.trajectory.steps[-1].valid
        content = actor.turn_message(e.observation, e.admissible, settings.action_format, after_invalid)
        chat.update(mode="extend", messages=[{"role": "user", "content": content}])
        ids = engine.extend_chat(*e.last_turn, chat["messages"], response_prefix=prefix)
        if ids is not None:
            return ids
        stats.context_restarts += 1  # over the limit: restart from the window prompt
    chat.update(mode="encode", messages=_actor_messages(e, settings, engine, count_tokens))
    return engine.encode_chat(chat["messages"], response_prefix=prefix)


def _start_wave(pool, wave, stats) -> list[_Episode]:
    started = time.perf_counter()
    replies = pool.reset([(slot, task, seed) for slot, (task, seed, _, _) in enumerate(wave)])
    stats.env_s += time.perf_counter() - started
    return [
        _Episode(
            slot=slot,
            trajectory=Trajectory(task=task, seed=seed, instruction=(reply.info or {}).get("instruction", "")),
            instruction=(reply.info or {}).get("instruction", ""),
            observation=reply.observation,
            state_key=reply.state_key,
            admissible=reply.admissible,
            transcript=_messages(reply.info),
            tools=(reply.info or {}).get("tools"),
            prefix=prefix,
            max_steps=limit,
        )
        for slot, ((task, seed, prefix, limit), reply) in enumerate(zip(wave, replies))
    ]


def _run_wave(engine, pool, wave, settings, extensions, stats, progress) -> list[Trajectory]:
    count_tokens = functools.lru_cache(maxsize=4096)(
        lambda text: len(engine.tokenizer(text, add_special_tokens=False)["input_ids"])
    )
    episodes = _start_wave(pool, wave, stats)
    overlap = overlaps_env(settings.overlap_env, engine) and bool(extensions)
    sampling = SamplingParams(
        max_new_tokens=settings.max_new_tokens,
        temperature=settings.temperature,
        top_p=settings.top_p,
        stop=actor.STOP[settings.action_format],
        greedy=settings.greedy,
    )
    for _ in range(max(e.max_steps for e in episodes)):
        active = [e for e in episodes if not e.done]
        if not active:
            break
        stats.turns += 1

        # 1. actions, one batched generation ---------------------------------------
        started = time.perf_counter()
        chats: list[dict] = [{} for _ in active]
        prompts = [_actor_prompt(e, settings, engine, count_tokens, stats, c) for e, c in zip(active, chats)]
        generations, parsed = choose_actions(engine, pool, active, prompts, settings, sampling, stats)
        stats.generate_s += time.perf_counter() - started

        # 2-3. the methods' extra generations (e.g. World-In-Agent predictions) and the
        # environment steps, all slots in parallel, overlapped or not (``extensions``) ----
        turns = [
            Turn(e.instruction, e.observation, p.action, p.valid, g.prompt_ids, g.ids)
            for e, p, g in zip(active, parsed, generations)
        ]
        to_step = [(e.slot, p.action) for e, p in zip(active, parsed) if p.valid]
        records, replies = extend_and_step(engine, pool, turns, to_step, extensions, overlap, stats)
        replies = iter(replies)

        for i, (e, gen, p) in enumerate(zip(active, generations, parsed)):
            step = Step(
                observation=e.observation,
                state_key=e.state_key,
                prompt_ids=gen.prompt_ids,
                action_ids=gen.ids,
                action_logprobs=gen.logprobs,
                action_allowed=gen.allowed,
                action_text=gen.text,
                action=p.action,
                valid=p.valid,
            )
            step.extras.update({name: rows[i] for name, rows in records if rows[i] is not None})
            if settings.source.records_chat or settings.record_chat or e.prefix:
                step.extras["chat"] = chats[i]
            if len(e.trajectory.steps) < len(e.prefix):
                step.extras["replayed"] = {"turn": len(e.trajectory.steps)}
            _apply(e, step, p, next(replies) if p.valid else None, settings)
            e.last_turn = (gen.prompt_ids, gen.ids)
        if progress is not None:
            progress.update(1)

    for e in episodes:
        if not e.done:  # the loop ran out of turns
            e.trajectory.final_observation = e.observation
        for ext in extensions:
            ext.finish(e.trajectory)
    return [e.trajectory for e in episodes]


def _apply(e: _Episode, step: Step, p, reply, settings: RolloutSettings) -> None:
    """Record the environment's reply (None: an invalid output, not stepped) in ``step``
    and the episode, and append the step."""
    if reply is not None:
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
    if step.done or e.trajectory.crashed or len(e.trajectory.steps) >= e.max_steps:
        e.done = True
        e.trajectory.final_observation = e.observation
