"""Who chooses each turn's action in :func:`roleagent.rollout.run_episodes`: an
:class:`ActionSource`. A run's source is ``RolloutSettings.source``: :data:`POLICY` (the
engine's generations, free or constrained decoding; the default) or :data:`EXPERT` (the
environment's expert, for SFT data). An episode whose job carries a prefix of assistant
texts replays them first (:data:`REPLAY`), whatever the run's source.

A replayed turn's "generation" is the forced text: its token ids are the tokenizer's
encoding of the text and its log-probs 0 (as for the expert). Its action is what the
policy's own turn would have made of that text: with ``constrain_actions`` and an
admissible list, the command whose ``actor.completion`` has exactly those ids; otherwise
``actor.parse_action`` (then ``actor.project_action`` when ``project_actions`` is on).
"""

from __future__ import annotations

from typing import Any, Protocol

from roleagent.engine.base import Engine, Generation
from roleagent.rollout import actor

Choice = tuple[list[Generation], list[actor.ParsedAction]]


class ActionSource(Protocol):
    """Chooses the actions of a batch of episodes' turns, one generation and one parsed
    action per episode, in order."""

    records_chat: bool  # its steps record the chat they were prompted with (step.extras["chat"])

    def choose(self, engine: Engine, pool, episodes: list[Any], prompts, settings, sampling, stats) -> Choice: ...


class PolicyActions:
    """The engine generates (free or constrained decoding: :func:`_act`)."""

    records_chat = False

    def choose(self, engine, pool, episodes, prompts, settings, sampling, stats) -> Choice:
        return _act(engine, prompts, episodes, settings, sampling, stats)


class ExpertActions:
    """The environment's expert acts; its turns are teacher data, so they record their chat."""

    records_chat = True

    def choose(self, engine, pool, episodes, prompts, settings, sampling, stats) -> Choice:
        generations = _expert_generations(engine, pool, episodes, prompts, settings)
        return generations, [actor.parse_action(g.text, settings.action_format) for g in generations]


class ReplayActions:
    """Each episode's next prefix text, forced (module docstring)."""

    records_chat = True

    def choose(self, engine, pool, episodes, prompts, settings, sampling, stats) -> Choice:
        pairs = [
            _replayed(engine, p, e.prefix[len(e.trajectory.steps)], e.admissible, settings)
            for e, p in zip(episodes, prompts)
        ]
        return [g for g, _ in pairs], [a for _, a in pairs]


POLICY, EXPERT, REPLAY = PolicyActions(), ExpertActions(), ReplayActions()


def choose_actions(engine: Engine, pool, active: list[Any], prompts, settings, sampling, stats) -> Choice:
    """Each active episode's generation and parsed action, in order: the episodes with
    prefix texts still to replay (``len(e.prefix) > len(e.trajectory.steps)``) from
    :data:`REPLAY`, the others from one batched call of ``settings.source``."""
    replaying = [len(e.trajectory.steps) < len(e.prefix) for e in active]
    out: list[tuple[Generation, actor.ParsedAction] | None] = [None] * len(active)
    for source, wanted in ((REPLAY, True), (settings.source, False)):
        rows = [i for i, r in enumerate(replaying) if r == wanted]
        if rows:
            generations, parsed = source.choose(
                engine, pool, [active[i] for i in rows], [prompts[i] for i in rows], settings, sampling, stats
            )
            for i, g, p in zip(rows, generations, parsed, strict=True):
                out[i] = (g, p)
    return [g for g, _ in out], [p for _, p in out]


def _replayed(engine: Engine, prompt: list[int], text: str, admissible, settings) -> tuple[Generation, Any]:
    ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
    generation = Generation(prompt, ids, [0.0] * len(ids), text, False)
    commands = _completions(engine, admissible, settings)
    if commands is not None and tuple(ids) in commands:
        return generation, actor.ParsedAction(commands[tuple(ids)], True)
    parsed = actor.parse_action(text, settings.action_format)
    return generation, (actor.project_action(parsed, admissible) if settings.project_actions else parsed)


def _expert_generations(engine: Engine, pool, active: list[Any], prompts, settings) -> list[Generation]:
    """The environment expert's actions as generations."""
    actions = pool.expert_actions([e.slot for e in active])
    texts = [actor.completion(a, settings.action_format) if a else "" for a in actions]
    ids = [engine.tokenizer(t, add_special_tokens=False)["input_ids"] if t else [] for t in texts]
    return [Generation(p, i, [0.0] * len(i), t, False) for p, i, t in zip(prompts, ids, texts)]


def _act(engine: Engine, prompts, active: list[Any], settings, sampling, stats):
    """The actor's batched generation and each row's parsed action. With
    ``constrain_actions`` an episode whose environment lists admissible commands generates
    exactly ``actor.completion(command)`` of one of them (each command's token ids, as
    the tokenizer encodes that text), and its action is that command, looked up by the
    generated ids rather than parsed from text."""
    commands = [_completions(engine, e.admissible, settings) for e in active]
    constrained = sum(c is not None for c in commands)
    stats.constrained_actions += constrained
    stats.free_actions += len(active) - constrained
    if constrained:
        generations = engine.generate(prompts, sampling, allowed=[None if c is None else list(c) for c in commands])
    else:  # engines without constraint support still serve free decoding
        generations = engine.generate(prompts, sampling)
    parsed = []
    for g, e, c in zip(generations, active, commands):
        if c is not None:
            parsed.append(actor.ParsedAction(c[tuple(g.ids)], True))
            continue
        p = actor.parse_action(g.text, settings.action_format)
        parsed.append(actor.project_action(p, e.admissible) if settings.project_actions else p)
    return generations, parsed


def _completions(engine: Engine, admissible: list[str] | None, settings) -> dict | None:
    """``{token ids of completion(command): command}`` over the admissible commands, or
    None when this turn decodes freely (constraining off, or no admissible list)."""
    if not settings.constrain_actions or not admissible:
        return None
    encode = engine.tokenizer
    out: dict[tuple[int, ...], str] = {}
    for command in admissible:
        ids = tuple(encode(actor.completion(command, settings.action_format), add_special_tokens=False)["input_ids"])
        out.setdefault(ids, command)
    return out
