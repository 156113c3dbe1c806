"""From MCTS trees to Agent-R's training data (Yuan et al., 2025, arXiv 2501.11425, §3.1).

Per tree, with α of the current iteration and β:

1. leaf paths and their values (``Tree.leaf_paths``, ``Tree.path_value``);
2. good trajectories: paths with value ≥ α, best first, at most ``max_good``;
3. revision pairs: :func:`roleagent.algos.agent_r.revision_pairs`, at most ``max_pairs``;
4. the judge (:mod:`.judge`) reads each bad step after the shared prefix, all pairs of all
   trees in one batched call; the first Bad step is the transition point t' (without a
   judge, or with no Bad verdict, t' is the bad path's last step: direct revision);
5. :func:`roleagent.algos.agent_r.splice_revision` gives the turn messages, after the
   opening messages the actor saw at the root.

The revision signal (paper §3.1: "Assistant: [reflection on the error]", then "Human: OK.")
is a reflection without an action, ``<think>{thought}</think>`` (:func:`revision_turn`). The
rollout never steps an output without an action, in any environment, so the signal is
inert everywhere; the authors' "Action: wait" is a real ScienceWorld action (the simulator
advances 10 ticks). The user message after it is the one the rollout sends after such an
output (:func:`revision_reply`: "Invalid action format." and the same observation again),
not "OK.", so a revising policy sees at test time what it was trained on.

Messages are those of the rollout itself, so the SFT prompts equal the rollout prompts
token for token (``rollout.context=full``; ``roleagent.sft.data.encode_example``): the
opening is the first turn's recorded chat, each assistant message is the response prefix
plus the text the policy generated, and each observation message is the user message the
rollout built for the next turn (:func:`user_message`, checked against the recorded chat
in the tests).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from roleagent.algos.agent_r import (
    REVISION_THOUGHTS,
    good_messages,
    revision_pairs,
    splice_revision,
    transition_point,
)
from roleagent.methods.agent_r.judge import Judgement, judge_steps
from roleagent.rollout import actor
from roleagent.sft.data import ChatExample


@dataclass
class Pair:
    """A revision pair of one tree: path node indices, root excluded."""

    tree: Any
    good: list[int]
    bad: list[int]
    start: int  # turns the two paths share
    verdicts: list[str | None] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)  # per answer: cut at the token limit


def user_message(node, action_format: str) -> str:
    """The user message that follows ``node``'s action in a ``context=full`` rollout, built
    as the rollout builds it (``actor.turn_message``); for a node whose successor was
    generated, :func:`path_turns` takes the recorded message instead."""
    return actor.turn_message(node.observation, node.admissible, action_format, after_invalid=not node.valid)


def path_turns(tree, path: list[int], action_format: str) -> list[tuple[str, str]]:
    """``(assistant content, following user message)`` per node of ``path``."""
    prefix = actor.RESPONSE_PREFIX[action_format]
    nodes = [tree.nodes[i] for i in path]
    turns = []
    for j, node in enumerate(nodes):
        following = _recorded_user_message(nodes[j + 1]) if j + 1 < len(nodes) else None
        turns.append((prefix + node.text, following or user_message(node, action_format)))
    return turns


def opening(tree, path: list[int]) -> list[dict]:
    """The messages before the first assistant turn, as the rollout recorded them."""
    chat = tree.nodes[path[0]].chat
    if not chat or chat.get("mode") != "encode":
        raise ValueError(f"{tree.task.id}: the first turn's chat was not recorded (rollout record_chat)")
    return [{"role": m["role"], "content": m["content"], "loss": False} for m in chat["messages"]]


def select(tree, *, alpha: float, beta: float, max_good: int, max_pairs: int) -> tuple[list[list[int]], list[Pair]]:
    """Good paths and revision pairs of one tree (steps 2-3 of the module docstring)."""
    paths = tree.leaf_paths()
    values = [tree.path_value(p) for p in paths]
    order = sorted(range(len(paths)), key=lambda i: (-values[i], i))
    goods = [paths[i] for i in order if values[i] >= alpha][:max_good]
    pairs = []
    for g, b in revision_pairs(values, alpha=alpha, beta=beta)[:max_pairs]:
        start = _shared_nodes(paths[g], paths[b])
        if start < len(paths[b]) and start < len(paths[g]):
            pairs.append(Pair(tree, paths[g], paths[b], start))
    return goods, pairs


def select_all(trees, *, alpha: float, beta: float, max_good: int, max_pairs: int):
    """:func:`select` over ``trees``: ``([(tree, good path), ...], pairs)``."""
    goods, pairs = [], []
    for tree in trees:
        g, p = select(tree, alpha=alpha, beta=beta, max_good=max_good, max_pairs=max_pairs)
        goods += [(tree, path) for path in g]
        pairs += p
    return goods, pairs


def judge_pairs(pairs: list[Pair], engine, env: str, *, history: int, max_new_tokens: int) -> list[Judgement]:
    """Fill each pair's verdicts, answers and truncation flags for its bad steps after the
    shared prefix (one batched generation of ``engine``); return every judgement."""
    requests, owners = [], []
    for pair in pairs:
        steps = judged_steps(pair.tree, pair.bad)
        for index in range(pair.start, len(pair.bad)):
            requests.append((env, pair.tree.instruction, steps, index))
            owners.append(pair)
    judgements = judge_steps(engine, requests, history=history, max_new_tokens=max_new_tokens)
    for pair, judgement in zip(owners, judgements):
        pair.verdicts.append(judgement.verdict)
        pair.answers.append(judgement.answer)
        pair.truncated.append(judgement.truncated)
    return judgements


def judged_steps(tree, path: list[int]) -> list[tuple[str, str]]:
    """``(action, observation)`` per node of ``path`` as the judge is shown them: the parsed
    action, or ``(invalid output) <text>`` for an output without one."""
    return [(_action(tree.nodes[i]), tree.nodes[i].observation) for i in path]


def revision_example(pair: Pair, action_format: str, rng: random.Random) -> ChatExample:
    """The revision trajectory of a judged pair (or a direct revision without verdicts)."""
    bad = path_turns(pair.tree, pair.bad, action_format)
    good = path_turns(pair.tree, pair.good, action_format)
    start = pair.start  # siblings differ in text, so node and text prefixes coincide
    verdicts = pair.verdicts or [None] * (len(bad) - start)
    transition = transition_point(verdicts, start=start)
    thought = rng.choice(REVISION_THOUGHTS)
    turn = actor.RESPONSE_PREFIX[action_format] + revision_turn(thought, action_format)
    reply = revision_reply(pair.tree.nodes[pair.bad[transition]], action_format)
    messages = opening(pair.tree, pair.bad) + splice_revision(bad, good, transition, turn, ack=reply)
    values = [pair.tree.path_value(pair.good), pair.tree.path_value(pair.bad)]
    judged = "bad" in verdicts  # t' from a Bad verdict; else direct revision at the last bad step
    meta = {**_meta(pair.tree, "revision"), "transition": transition, "shared": start, "values": values}
    meta["judged"] = judged
    return ChatExample(messages, actor.RESPONSE_PREFIX[action_format], meta)


def good_example(tree, path: list[int], action_format: str) -> ChatExample:
    messages = opening(tree, path) + good_messages(path_turns(tree, path, action_format))
    meta = {**_meta(tree, "good"), "value": tree.path_value(path)}
    return ChatExample(messages, actor.RESPONSE_PREFIX[action_format], meta)


def revision_turn(thought: str, action_format: str) -> str:
    """The revision signal in the actor's format (after the response prefix): a reflection
    and no action, which the rollout never sends to the environment.

    >>> revision_turn("I made an error.", "think_action")
    '<think>I made an error.</think>'
    """
    if action_format != "think_action":
        raise ValueError("Agent-R's revision thought needs rollout.action_format=think_action")
    return f"<think>{thought}</think>"


def revision_reply(node, action_format: str) -> str:
    """The user message after the revision signal given at ``node`` (the transition turn):
    what the rollout answers an output without an action (``actor.turn_message`` after an
    invalid output), the node's observation again after "Invalid action format."."""
    return actor.turn_message(node.observation, node.admissible, action_format, after_invalid=True)


def is_revision_turn(text: str) -> bool:
    """Whether an assistant text is a revision signal: a ``<think>`` block and no action.

    >>> is_revision_turn("<think>I made an error.</think>"), is_revision_turn("<think>t</think><action>look</action>")
    (True, False)
    """
    return "</think>" in text and not actor.action_blocks(text)


def _action(node) -> str:
    return node.action if node.valid and node.action else f"(invalid output) {node.text}"


def _shared_nodes(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _recorded_user_message(node) -> str | None:
    chat = getattr(node, "chat", None)
    if chat and chat.get("mode") == "extend" and len(chat["messages"]) == 1:
        return chat["messages"][0]["content"]
    return None


def _meta(tree, kind: str) -> dict:
    return {"task": tree.task.id, "seed": tree.seed, "kind": kind, "task_type": tree.task.metadata.get("task_type")}
