"""The actor role: per-step prompts and action parsing.

Each step's prompt is built from scratch: the task instruction, a bounded history of the
last ``history`` (action, observation) pairs, the current observation, the admissible
actions where the environment has them, and the answer format. Bounded prompts keep the
token budget per step flat, which is what a CPU run can afford.

Conversational environments (BFCL) instead report the chat messages of their protocol
(``info["messages"]``); for them the prompt is the whole conversation so far
(``chat_messages``): the instruction as the system message, every user turn, the model's
own outputs as assistant messages and tool results as tool messages, trimmed to a token
budget oldest tool result first and never dropping the current user request.

Action formats (``ActionFormat``):

- ``think_action`` (default, verl-agent style): ``<think>…</think><action>…</action>``.
- ``action``: the assistant turn is pre-filled with ``<action>``; the action is the first
  line, ended by ``</action>`` or a newline — no reasoning tokens; the format small CPU
  models can follow (SmolLM2-135M rarely closes the tag but writes one command per line).
- ``raw``: the whole generation is the action (tool-call environments parse it).

Unparsable output is an invalid action (``valid=False``), never an exception.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

ACTION_TAG_RE = re.compile(r"<(/?)action>", re.IGNORECASE)

SYSTEM_PROMPT = "You are an agent acting in a text environment. Reach the goal in as few steps as possible."

FORMAT_HINTS = {
    "think_action": "Think briefly inside <think></think>, then give exactly one action inside <action></action>.",
    "action": "Reply with exactly one action inside <action></action>.",
    "raw": "",
}
RESPONSE_PREFIX = {"think_action": "", "action": "<action>", "raw": ""}
STOP = {"think_action": ("</action>",), "action": ("</action>", "\n"), "raw": ()}


@dataclass(frozen=True)
class ParsedAction:
    action: str | None
    valid: bool
    projected_from: str | None = field(default=None, repr=False)  # text ``project_action`` replaced


def completion(action: str, action_format: str) -> str:
    """The text a policy writes after ``RESPONSE_PREFIX[action_format]`` to take ``action``,
    ending with the format's closing tag: what expert (SFT) targets and constrained
    decoding over admissible commands both use, so the two train the same tokens.

    >>> completion("go to desk 1", "action")
    'go to desk 1</action>'
    >>> completion("go to desk 1", "think_action")
    '<action>go to desk 1</action>'
    >>> completion("get 2 oak logs", "raw")
    'get 2 oak logs'
    """
    if action_format == "action":
        return f"{action}</action>"
    if action_format == "think_action":
        return f"<action>{action}</action>"
    if action_format == "raw":
        return action
    raise ValueError(f"unknown action format {action_format!r}")


def project_action(parsed: ParsedAction, admissible: list[str] | None) -> ParsedAction:
    """Map a parsed but non-admissible action onto the most similar admissible command.

    Word-level LCS similarity (``roleagent.algos.lms_score``); ties go to the earlier
    command. Unparsable output stays invalid, and environments without admissible
    actions are untouched. This is an option (``rollout.project_actions``), off by default:
    it lets a model too small to copy commands verbatim explore, while the trained tokens
    stay exactly what it generated.

    >>> project_action(ParsedAction("I go to the sofa 1", True), ["look", "go to sofa 1"]).action
    'go to sofa 1'
    """
    if not parsed.valid or not admissible or parsed.action in admissible:
        return parsed
    from roleagent.algos import lms_score

    best = max(admissible, key=lambda command: lms_score(parsed.action, command))
    return ParsedAction(best, True, projected_from=parsed.action)


def parse_action(text: str, action_format: str) -> ParsedAction:
    """Extract the environment action from a generation.

    >>> parse_action("<think>go</think><action>go to desk 1</action>", "think_action")
    ParsedAction(action='go to desk 1', valid=True)
    >>> parse_action("take key</action>", "action")  # "<action>" was pre-filled
    ParsedAction(action='take key', valid=True)
    >>> parse_action("\\nget 2 oak logs.\\nmore text", "action")
    ParsedAction(action='get 2 oak logs', valid=True)
    >>> parse_action("I would open the door", "think_action")
    ParsedAction(action=None, valid=False)
    """
    if action_format == "raw":
        action = text.strip()
        return ParsedAction(action or None, bool(action))
    if action_format == "action":
        lines = text.split("</action>")[0].strip().splitlines()
        candidate = lines[0] if lines else ""
    elif action_format == "think_action":
        matches = action_blocks(text)
        if len(matches) != 1:
            return ParsedAction(None, False)
        candidate = matches[0]
    else:
        raise ValueError(f"unknown action format {action_format!r}")
    action = " ".join(candidate.split()).rstrip(".")  # a sentence-final period is not part of a command
    return ParsedAction(action or None, bool(action))


def action_blocks(text: str) -> list[str]:
    """The contents of the ``<action>…</action>`` blocks, in one linear pass.

    Same result as ``re.findall(r"<action>(.*?)</action>", text, re.I | re.S)`` (an
    opening tag inside an open block is content), which is quadratic on output that
    repeats ``<action>`` without closing it: each opening tag rescanned the rest.

    >>> action_blocks("<action>a<action>b</action> </action><action>c</action><action>d")
    ['a<action>b', 'c']
    """
    blocks, start = [], None
    for tag in ACTION_TAG_RE.finditer(text):
        if start is None and not tag.group(1):
            start = tag.end()
        elif start is not None and tag.group(1):
            blocks.append(text[start : tag.start()])
            start = None
    return blocks


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def actor_messages(
    *,
    instruction: str,
    observation: str,
    history: list[tuple[str, str]],
    admissible: list[str] | None,
    action_format: str,
    max_history: int = 3,
    max_observation_chars: int = 600,
    max_admissible: int = 40,
) -> list[dict[str, str]]:
    """Chat messages for one actor step. ``history`` holds (action, observation) pairs."""
    parts = [instruction.strip()]
    recent = history[-max_history:] if max_history > 0 else []
    if recent:
        first = len(history) - len(recent) + 1
        lines = [f"{first + i}. {_clip(action, 200)} -> {_clip(obs, 200)}" for i, (action, obs) in enumerate(recent)]
        parts.append("Previous actions:\n" + "\n".join(lines))
    parts.append(observation_message(observation, admissible, action_format, max_observation_chars, max_admissible))
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


def observation_message(
    observation: str,
    admissible: list[str] | None,
    action_format: str,
    max_observation_chars: int = 600,
    max_admissible: int = 40,
) -> str:
    """The end of every actor prompt: the current observation, the admissible actions (at
    most ``max_admissible``) and the answer format. Also the user message of each later
    turn in ``rollout.context=full``, where the chat before it holds the rest."""
    parts = ["Current observation: " + _clip(observation, max_observation_chars)]
    if admissible:
        shown = admissible[:max_admissible]
        parts.append("Admissible actions: " + ", ".join(shown) + (" ..." if len(admissible) > len(shown) else ""))
    if FORMAT_HINTS[action_format]:
        parts.append(FORMAT_HINTS[action_format])
    return "\n\n".join(parts)


def turn_message(observation: str, admissible: list[str] | None, action_format: str, after_invalid: bool) -> str:
    """The user message of a later turn in ``rollout.context=full``: the observation
    message, after "Invalid action format." when the previous output had no action.

    >>> turn_message("You see a key.", None, "action", True).splitlines()[:3]
    ['Invalid action format.', '', 'Current observation: You see a key.']
    """
    content = observation_message(observation, admissible, action_format)
    return "Invalid action format.\n\n" + content if after_invalid else content


#: what a tool result trimmed from the prompt is replaced with
TRIMMED_TOOL_RESULT = "[older tool result omitted to fit the context]"


def chat_messages(
    *,
    instruction: str,
    transcript: list[dict[str, str]],
    count_tokens: Callable[[str], int],
    budget: int,
    message_overhead: int = 8,
    tools: list[dict] | None = None,
) -> list[dict[str, str]]:
    """The chat prompt of a conversational environment: ``[system: instruction] +
    transcript``, trimmed until its estimated size fits ``budget`` tokens. ``tools`` (an
    environment's ``info["tools"]``, BFCL's ``tool_prompt="chat_template"``) ride on the
    system message as its ``"tools"`` key, which ``engine.chat.encode_chat`` hands to the
    chat template; their JSON counts towards the system message's size.

    The size estimate is ``sum(count_tokens(content) + message_overhead)`` over all
    messages (the overhead covers the template's role markers). Trimming order:

    1. tool results, oldest first, are replaced by ``TRIMMED_TOOL_RESULT``;
    2. messages before the current request (the last ``user`` message), oldest first,
       are removed;
    3. messages after it (the model's calls in the current turn and their results),
       oldest first, are removed.

    The system message and the current request are never removed; a prompt that still
    does not fit is returned as it is (the engine then keeps its last tokens).

    Worked example (one token per word, overhead 0; the note is 8 words): system "s",
    then user "u1", assistant "c", tool of 10 words, user "u2", assistant "c", tool of 9
    words: 24 tokens. Budget 23: the 10-word result becomes the note (22). Budget 20: both
    results become notes (21), then "u1" goes (20). Budget 5: everything but the system
    message and "u2" goes (2). ``tests/test_bfcl_prompt.py`` checks these three cases.
    """
    system = {"role": "system", "content": instruction} | ({"tools": tools} if tools else {})
    messages = [system] + [dict(m) for m in transcript]
    cost = [count_tokens(m["content"]) + message_overhead for m in messages]
    cost[0] += count_tokens(json.dumps(tools, ensure_ascii=False)) if tools else 0
    total = sum(cost)
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    current = users[-1] if users else len(messages)
    note = count_tokens(TRIMMED_TOOL_RESULT) + message_overhead
    for i, m in enumerate(messages):  # 1. oldest tool results first
        if total <= budget:
            break
        if m["role"] == "tool" and cost[i] > note:
            m["content"], total, cost[i] = TRIMMED_TOOL_RESULT, total - cost[i] + note, note
    keep = [True] * len(messages)
    order = list(range(1, current)) + list(range(current + 1, len(messages)))
    for i in order:  # 2. before the current request, 3. after it
        if total <= budget:
            break
        keep[i], total = False, total - cost[i]
    return [m for m, k in zip(messages, keep) if k]
