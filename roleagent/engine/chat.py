"""Chat encoding: token ids of a conversation under the model's chat template, where only
the template makes special tokens (text inside messages stays text), and follow-up turns
that continue a sampled assistant turn token for token."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from roleagent.envs.safety import sanitize_text

_MARK = "\ue000{}\ue001"  # private-use characters: a placeholder for message i's content
_MARK_RE = re.compile("\ue000(\\d+)\ue001")
_BREAK = "\u200b"  # zero-width space: the fallback's way to keep a special string text


def encode_chat(tokenizer, messages: list[dict], *, response_prefix: str = "") -> list[int]:
    """Token ids of a chat prompt in which only the chat template makes special tokens.

    Tokenising the rendered template as one string would turn a ``<|im_end|>`` written in
    an observation, instruction or tool result into the real end-of-turn token, so
    environment text could close the user's turn and open one of its own. Here the
    template is rendered once more with a placeholder for every message content; the
    special tokens of that skeleton (and of ``response_prefix``, which is ours) are the
    only ones kept special, and the text between them is tokenised with
    ``split_special_tokens=True``. A tokenizer splits its input at special tokens before
    anything else, so a prompt without special-token strings in its contents gets exactly
    the ids that plain tokenisation gives.

    When the template rewrites contents (the skeleton with the contents put back differs
    from the real rendering), special-token strings in contents are broken with a
    zero-width space instead, and the result is tokenised as usual.

    Text that did not cross the environment boundary (SFT data, a method's own prompt) may
    hold a lone surrogate, which the tokenizer refuses with a ``TypeError``: contents and
    ``response_prefix`` are made valid UTF-8 here too (``roleagent.envs.safety``).

    A message may carry tools under a ``"tools"`` key (``roles.actor.chat_messages``:
    BFCL's ``tool_prompt="chat_template"``); they go to the template as
    ``apply_chat_template(..., tools=...)``, with special-token strings in their text
    broken as above. A template that renders the same prompt with and without them (it
    has no tool support, e.g. SmolLM2's) is a ``ValueError``: tools silently left out
    would leave the model without its tools.
    """
    messages, tools = _take_tools(tokenizer, messages)
    messages = [
        {**m, "content": sanitize_text(m["content"])} if isinstance(m.get("content"), str) else m for m in messages
    ]
    response_prefix = sanitize_text(response_prefix)
    text = _render(tokenizer, messages, tools)
    if tools and text == _render(tokenizer, messages, None):
        raise ValueError(
            "this model's chat template ignores tools= (it has no tool support): "
            "use the tools block in the prompt instead (env.kwargs.tool_prompt=text)"
        )
    spans = _content_spans(tokenizer, messages, text, tools)
    if spans is None:
        messages = [_break_specials(tokenizer, m) for m in messages]
        text = _render(tokenizer, messages, tools)
        spans = []
    text += response_prefix
    specials = _special_tokens_re(tokenizer)
    ids: list[int] = []
    start = 0
    for match in specials.finditer(text) if specials else ():
        if any(a < match.end() and match.start() < b for a, b in spans):
            continue  # (partly) inside a message content: stays text
        ids += _encode_text(tokenizer, text[start : match.start()])
        ids.append(tokenizer.convert_tokens_to_ids(match.group()))
        start = match.end()
    return ids + _encode_text(tokenizer, text[start:])


def _render(tokenizer, messages: list[dict], tools: list[dict] | None) -> str:
    extra = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)


def _take_tools(tokenizer, messages: list[dict]) -> tuple[list[dict], list[dict] | None]:
    """``messages`` without their ``"tools"`` keys, and the first tools found (with
    special-token strings in their text broken), or None."""
    tools, out = None, []
    for m in messages:
        if "tools" in m:
            tools = tools or m["tools"]
            m = {k: v for k, v in m.items() if k != "tools"}
        out.append(m)
    specials = _special_tokens_re(tokenizer)
    if tools and specials is not None:
        tools = _break_in(tools, specials)
    return out, tools or None


def _break_in(node, specials: re.Pattern[str]):
    """A copy of a JSON-like value whose strings have their special-token strings broken."""
    if isinstance(node, str):
        return specials.sub(lambda m: m.group()[0] + _BREAK + m.group()[1:], node)
    if isinstance(node, list):
        return [_break_in(v, specials) for v in node]
    if isinstance(node, dict):
        return {k: _break_in(v, specials) for k, v in node.items()}
    return node


_ANCHOR = "\ue002"  # private-use character: stands for an assistant turn's content


PromptFits = Callable[[list[dict], str], bool]


def prompt_fits(engine) -> PromptFits | None:
    """``fits(messages, response_prefix)``: whether that chat prompt is within
    ``engine.max_prompt_tokens`` as :func:`encode_chat` encodes it, before the engine's
    guard keeps a long prompt's last tokens; for callers that shorten their own prompts
    (Agent-In-World's analyst and retriever). ``None`` for an engine without a tokenizer or
    a limit (a scripted one)."""
    tokenizer, limit = getattr(engine, "tokenizer", None), getattr(engine, "max_prompt_tokens", None)
    if tokenizer is None or not limit:
        return None
    return lambda messages, response_prefix="": (
        len(encode_chat(tokenizer, messages, response_prefix=response_prefix)) <= limit
    )


def encode_followup(tokenizer, messages: list[dict], *, response_prefix: str = "") -> list[int]:
    """Ids that follow an assistant turn's content: the end of that turn, ``messages`` and
    the opened assistant turn (plus ``response_prefix``), as :func:`encode_chat` encodes
    them. For ChatML (SmolLM2, Qwen) and a user message "V" that is
    ``<|im_end|>\\n<|im_start|>user\\nV<|im_end|>\\n<|im_start|>assistant\\n``."""
    anchor = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": _ANCHOR},
    ]
    ids = encode_chat(tokenizer, anchor + list(messages), response_prefix=response_prefix)
    mark = _encode_text(tokenizer, _ANCHOR)
    for start in range(len(ids) - len(mark) + 1):
        if ids[start : start + len(mark)] == mark:
            return ids[start + len(mark) :]
    raise ValueError(
        "the chat template does not copy an assistant turn's content verbatim; "
        "build the follow-up prompt with encode_chat instead"
    )


def _encode_text(tokenizer, text: str) -> list[int]:
    return list(_encode_segment(tokenizer, text)) if text else []


@functools.lru_cache(maxsize=4096)
def _encode_segment(tokenizer, text: str) -> tuple[int, ...]:
    """The ids of one text segment between special tokens, remembered: a rollout encodes
    the same system prompt, instruction and observations step after step (a growing chat
    is encoded whole at every turn)."""
    return tuple(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def _special_tokens_re(tokenizer) -> re.Pattern[str] | None:
    """Every special token string of ``tokenizer``, longest first."""
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    strings = {t.content for t in decoder.values() if getattr(t, "special", False)}
    strings |= set(getattr(tokenizer, "all_special_tokens", ()))
    strings.discard("")
    if not strings:
        return None
    return re.compile("|".join(re.escape(s) for s in sorted(strings, key=len, reverse=True)))


def _content_spans(tokenizer, messages: list[dict], text: str, tools=None) -> list[tuple[int, int]] | None:
    """Character spans of the message contents in ``text`` (the rendered prompt), or None
    when the template does not copy contents verbatim."""
    marked = [
        {**m, "content": _MARK.format(i)} if isinstance(m.get("content"), str) else m for i, m in enumerate(messages)
    ]
    skeleton = _render(tokenizer, marked, tools)
    parts = _MARK_RE.split(skeleton)  # template, index, template, index, ..., template
    spans, rebuilt, pos = [], [], 0
    for j, part in enumerate(parts):
        if j % 2:
            index = int(part)
            if index >= len(messages):
                return None
            part = messages[index]["content"]
            spans.append((pos, pos + len(part)))
        rebuilt.append(part)
        pos += len(part)
    return spans if "".join(rebuilt) == text else None


def _break_specials(tokenizer, message: dict) -> dict:
    content = message.get("content")
    specials = _special_tokens_re(tokenizer)
    if not isinstance(content, str) or specials is None:
        return message
    return {**message, "content": _break_in(content, specials)}
