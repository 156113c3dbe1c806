"""Chat examples for supervised fine-tuning: the JSONL format, its checks, and its encoding.
AgentGym's AgentTraj records and ``datasets`` datasets are read too (``roleagent.sft.sources``).

One JSONL line is one example::

    {"messages": [{"role": "system", "content": "..."},
                  {"role": "user", "content": "..."},
                  {"role": "assistant", "content": "<action>go to desk 1</action>", "loss": true}],
     "response_prefix": "<action>",
     "meta": {"task": "alfworld/easy/train/pick_and_place/0003"}}

and, optionally, ``"eos": true`` (default false).

An assistant message may carry its own ``"prefix"``, which replaces ``response_prefix``
for that turn: a chat in which the model answers in two formats, as the World-In-Agent
prediction example (``roleagent.sft.predictor``), whose action turn starts with
``<action>`` and whose prediction turn, in the same chat, starts with ``<state1>``.

Roles are ``system``, ``user``, ``assistant`` and ``tool``. ``loss`` (default false) may
only be set on assistant messages. Every assistant message is a whole assistant turn and
starts with ``response_prefix``; the prefix belongs to the prompt (in rollouts the engine
pre-fills it), the rest is the target. At least one assistant message carries the loss,
and the last message is an assistant message (a message after it would train nothing).

A target is what the policy generates for that turn, so it ends the way a generation
ends. In action formats with a stop string (``think_action``, ``action``: generation stops
at ``</action>``) the target ends with the content's last token, as the generation does,
and ``eos`` stays false. In formats without one (``rollout.action_format=raw``, BFCL and
search) a generation ends with the engine's end-of-turn token (the tokenizer's EOS, which
the HF engine stops on: ``<|im_end|>`` for SmolLM2 and Qwen), and RL trains it; such
examples set ``"eos": true`` so that every assistant target ends with that token, trained
where the turn carries the loss. Without it the model never learns to stop and runs to
``max_new_tokens``.

Encoding (:func:`encode_example`) uses the engine's own chat encoding, as rollouts do: the
first assistant turn's prompt is ``engine.encode_chat(messages before it,
response_prefix)``, each later one's is ``engine.extend_chat(previous prompt, previous
target ids, messages in between, response_prefix)`` (``rollout.context=full``), and a
target is ``tokenizer(content[len(prefix):], add_special_tokens=False)``, followed by the
tokenizer's EOS id when ``eos`` is set (``extend_chat`` does not repeat an end-of-turn
token the target already ends with, so the prompts are the rollout's either way). The example is
one sequence (the last prompt and target) whose loss mask covers the target tokens of the
flagged turns; unflagged assistant turns are context only.

Expert rollouts (``RolloutSettings.source=EXPERT``) become examples with
:func:`trajectory_examples`: a step whose prompt was a whole chat (``rollout.context=window``,
or a restarted full chat) starts an example, a step whose prompt continued the previous
turn's chat extends it, so window rollouts give one example per step and full-context
rollouts one per episode; an example gets ``eos`` when its chat records that the
rollout's generations had no stop string (``chat["eos"]``). A whole chat that repeats the previous example's messages and
continues them (an environment that reports its chat, BFCL: the rollout prompts with the
whole conversation) extends that example too, so an untrimmed BFCL episode is one
example whose every assistant turn is trained (``extend_chat`` continues a prompt token
for token as ``encode_chat`` encodes the whole conversation).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roleagent.engine.chat import encode_chat
from roleagent.envs.safety import sanitize_text
from roleagent.types import Trajectory

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant", "tool")


class SFTDataError(ValueError):
    """A malformed example; the message names its file and line."""


@dataclass
class ChatExample:
    messages: list[dict[str, Any]]  # role, content, and loss (assistant messages only)
    response_prefix: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    eos: bool = False  # targets end with the end-of-turn token (formats without a stop string)

    def to_json(self) -> dict[str, Any]:
        out = {"messages": self.messages, "response_prefix": self.response_prefix, "meta": self.meta}
        return {**out, "eos": True} if self.eos else out


@dataclass
class EncodedExample:
    """One training sequence: ``ids`` and a 0/1 ``loss_mask`` of the same length;
    ``prompts`` holds every assistant turn's prompt ids (for checks)."""

    ids: list[int]
    loss_mask: list[int]
    prompts: list[list[int]]

    @property
    def length(self) -> int:
        return len(self.ids)

    @property
    def loss_tokens(self) -> int:
        return int(sum(self.loss_mask))


# ------------------------------------------------------------------ checks -----------


def role_flags(examples: Iterable[ChatExample]) -> list[bool]:
    """Which examples train a role other than the acting policy (a meta ``role``: predictor,
    analyst, retriever, judge, ASL roles), for ``sft.role_epochs`` (``roleagent.sft.train.epoch_plan``)."""
    return [bool(e.meta.get("role")) for e in examples]


def check_example(data: Any, where: str = "example") -> ChatExample:
    """A :class:`ChatExample` from a decoded JSON value, or :class:`SFTDataError` naming ``where``."""

    def fail(problem: str) -> SFTDataError:
        return SFTDataError(f"{where}: {problem}")

    if not isinstance(data, dict):
        raise fail(f"expected a JSON object, got {type(data).__name__}")
    unknown = set(data) - {"messages", "response_prefix", "meta", "eos"}
    if unknown:
        raise fail(f"unknown keys {sorted(unknown)} (allowed: messages, response_prefix, meta, eos)")
    prefix, meta, messages = data.get("response_prefix", ""), data.get("meta", {}), data.get("messages")
    eos = data.get("eos", False)
    if not isinstance(eos, bool):
        raise fail("eos must be true or false")
    if not isinstance(prefix, str):
        raise fail("response_prefix must be a string")
    if not isinstance(meta, dict):
        raise fail("meta must be an object")
    if not isinstance(messages, list) or not messages:
        raise fail("messages must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) - {"role", "content", "loss", "prefix"}:
            raise fail(f"message {i} must be an object with role, content and optionally loss and prefix")
        role, content, loss = m.get("role"), m.get("content"), m.get("loss", False)
        own = m.get("prefix", prefix)
        if not isinstance(own, str) or ("prefix" in m and role != "assistant"):
            raise fail(f"message {i}: prefix must be a string, on an assistant message")
        if role not in ROLES:
            raise fail(f"message {i}: role {role!r} is not one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise fail(f"message {i}: content must be a string")
        if not isinstance(loss, bool):
            raise fail(f"message {i}: loss must be true or false")
        if loss and role != "assistant":
            raise fail(f"message {i}: loss is only allowed on assistant messages, not {role}")
        if role == "assistant" and not content.startswith(own):
            what = "its prefix" if "prefix" in m else "response_prefix"
            raise fail(f"message {i}: an assistant message must start with {what} {own!r}")
        kept = {"loss": loss, **({"prefix": own} if "prefix" in m else {})} if role == "assistant" else {}
        out.append({"role": role, "content": content, **kept})
    if not any(m.get("loss") for m in out):
        raise fail("no assistant message has loss: true (nothing to train)")
    if out[0]["role"] == "assistant":
        raise fail("the first message is an assistant turn: it has no prompt")
    if out[-1]["role"] != "assistant":
        raise fail("the last message must be an assistant turn (later messages train nothing)")
    return ChatExample(out, prefix, dict(meta), eos)


def write_examples(path: str | Path, examples: Iterable[ChatExample]) -> int:
    """Write JSONL atomically (a temporary file renamed into place); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    count = 0
    with tmp.open("w") as f:
        for example in examples:
            f.write(json.dumps(example.to_json()) + "\n")
            count += 1
    tmp.replace(path)
    return count


# ---------------------------------------------------------------- encoding -----------


def encode_example(engine, example: ChatExample) -> EncodedExample:
    """The example's training sequence, encoded as rollouts encode their prompts (module
    docstring). Raises :class:`SFTDataError` when a continuation exceeds the engine's
    ``max_prompt_tokens``, or when ``eos`` is set and the tokenizer has no EOS token."""
    end = _end_of_turn(engine) if example.eos else []
    prompt: list[int] | None = None
    target: list[int] = []
    between: list[dict[str, str]] = []
    turns: list[tuple[int, list[int], bool]] = []  # (offset, target ids, loss)
    prompts = []
    for m in example.messages:
        if m["role"] != "assistant":
            between.append({"role": m["role"], "content": m["content"]})
            continue
        prefix = m.get("prefix", example.response_prefix)
        if prompt is None:
            prompt = _first_prompt(engine, between, prefix, example.meta)
        else:
            following = engine.extend_chat(prompt, target, between, response_prefix=prefix)
            if following is None:
                raise SFTDataError(
                    f"example {example.meta or ''} is longer than the engine's max_prompt_tokens="
                    f"{engine.max_prompt_tokens}: split it or raise rollout.max_prompt_tokens"
                )
            prompt = following
        text = sanitize_text(m["content"][len(prefix) :])  # a lone surrogate: U+FFFD, as in prompts
        target = engine.tokenizer(text, add_special_tokens=False)["input_ids"] + end
        turns.append((len(prompt), target, bool(m.get("loss"))))
        prompts.append(list(prompt))
        between = []
    ids = list(prompt) + list(target)
    mask = [0] * len(ids)
    for offset, ids_of_turn, loss in turns:
        if ids[offset : offset + len(ids_of_turn)] != list(ids_of_turn):
            raise SFTDataError("the engine's extend_chat did not keep an earlier turn token for token")
        if loss:
            mask[offset : offset + len(ids_of_turn)] = [1] * len(ids_of_turn)
    return EncodedExample(ids, mask, prompts)


def answer_examples(engine, examples, prefix: str, sampling, batch_size: int = 8) -> tuple[list[str], list[bool]]:
    """A role's answers to the prompts of held-out ``examples`` (as encoded for training),
    ``batch_size`` at a time with ``sampling``, each with the answer ``prefix`` the role
    was started with in front, and whether each was cut at the token limit. Examples
    written with another prefix are refused (the prefix is part of the prompt's setting)."""
    if other := {e.response_prefix for e in examples} - {prefix}:
        raise ValueError(f"examples start their answers with {sorted(other)}, the config with {prefix!r}: set aiw.*")
    answers, truncated = [], []
    for start in range(0, len(examples), batch_size):
        prompts = [encode_example(engine, e).prompts[-1] for e in examples[start : start + batch_size]]
        for gen in engine.generate(prompts, sampling):
            answers.append(prefix + gen.text)
            truncated.append(gen.truncated)
    return answers, truncated


def _first_prompt(engine, messages: list[dict[str, str]], prefix: str, meta: dict[str, Any]) -> list[int]:
    """The first assistant turn's prompt. One longer than the engine's ``max_prompt_tokens``
    would lose its first tokens, the system prompt among them: the oldest messages after
    the system message are left out instead until it fits (the last one is kept), with a
    warning; if the system message and the last one alone are too long, the engine cuts
    the prompt from the left, with a warning that the system prompt is lost."""
    ids = engine.encode_chat(messages, response_prefix=prefix)
    limit = getattr(engine, "max_prompt_tokens", None)
    if limit is None or len(ids) < limit:
        return ids

    def length(chat: list[dict[str, str]]) -> int:
        return len(encode_chat(engine.tokenizer, chat, response_prefix=prefix))

    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    rest = messages[len(head) :]
    dropped = 0
    while length(head + rest) > limit and len(rest) > 1:
        rest, dropped = rest[1:], dropped + 1
    if length(head + rest) > limit:
        log.warning(
            "SFT example %s: its first prompt is over max_prompt_tokens=%d even without earlier turns: "
            "cut from the left, its system prompt is lost (raise rollout.max_prompt_tokens)",
            meta or "",
            limit,
        )
    elif dropped:
        log.warning(
            "SFT example %s: its first prompt is over max_prompt_tokens=%d: its %d oldest message(s) after the "
            "system prompt are left out (raise rollout.max_prompt_tokens to keep them)",
            meta or "",
            limit,
            dropped,
        )
    return engine.encode_chat(head + rest, response_prefix=prefix) if dropped else ids


def _end_of_turn(engine) -> list[int]:
    """The token a generation without stop strings ends with: the tokenizer's EOS, the
    one the HF engine stops on (``<|im_end|>`` for ChatML models)."""
    eos = getattr(engine.tokenizer, "eos_token_id", None)
    if eos is None:
        raise SFTDataError("an example with eos: true needs a tokenizer with an EOS token; this one has none")
    return [int(eos)]


# ---------------------------------------------------------- from rollouts ------------


def trajectory_examples(trajectory: Trajectory) -> list[ChatExample]:
    """Chat examples of a teacher rollout (module docstring); every step is trained.
    Steps without a recorded chat (``step.extras["chat"]``) or without an action are refused."""
    examples: list[ChatExample] = []
    task = trajectory.task
    for index, step in enumerate(trajectory.steps):
        chat = step.extras.get("chat")
        if chat is None or not step.valid or not step.action_text:
            raise ValueError(f"{task.id} step {index}: not a teacher step with an action (chat and action needed)")
        prefix = chat["response_prefix"]
        reply = {"role": "assistant", "content": prefix + step.action_text, "loss": True}
        added = _added_messages(chat, examples[-1] if examples else None)
        if added is not None:
            examples[-1].messages += added + [reply]
            examples[-1].meta["steps"].append(index)
            continue
        meta = {"task": task.id, "split": task.split, "task_type": task.metadata.get("task_type"), "steps": [index]}
        eos = bool(chat.get("eos", False))
        examples.append(ChatExample([dict(m) for m in chat["messages"]] + [reply], prefix, meta, eos))
    return examples


def _added_messages(chat: dict[str, Any], last: ChatExample | None) -> list[dict[str, Any]] | None:
    """What a step's prompt chat adds to the last example, or None when it starts a new
    one. An ``extend`` chat adds its own messages; an ``encode`` chat (a whole chat, e.g.
    BFCL's conversation prompt) adds what follows the last example's messages when it
    starts with them, role and content alike: it does not once the rollout trimmed an
    earlier message to fit its prompt budget, nor for window prompts."""
    if last is None:
        return None
    messages = [dict(m) for m in chat["messages"]]
    if chat["mode"] == "extend":
        return messages
    before = [{"role": m["role"], "content": m["content"]} for m in last.messages]
    same_prefix = last.response_prefix == chat["response_prefix"]
    if same_prefix and len(messages) > len(before) and messages[: len(before)] == before:
        return messages[len(before) :]
    return None
