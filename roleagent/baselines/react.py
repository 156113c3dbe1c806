"""ReAct (Yao et al., 2023, arXiv:2210.03629) as a prompting policy on any engine.

The model interleaves thoughts and actions, one line per turn: a line starting with
``think:`` is a thought (the environment is not stepped; the agent sees "OK.", as in the
paper's ALFWorld setup), any other line is an action. Every line counts towards the
step limit, as in the paper. The prompt holds one solved example of the same task type,
the task, and the episode so far (its last ``history`` turns) written ``> line`` then
the observation; the assistant turn is pre-filled with ``> ``.

Examples come from the environment's own expert on *training* tasks (never the
evaluation panel): the expert's commands and observations, with one templated thought
after the task (the paper's examples are hand-written, with a thought before most
steps; the expert has no thoughts to show).

Conversational environments (BFCL, which report chat messages) keep their chat
(:func:`roleagent.rollout.actor.chat_messages`); the system message asks for a
``Thought:`` line before the calls, and thought lines are removed from the output before
it reaches the environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from roleagent.rollout import actor
from roleagent.types import Trajectory

THOUGHT_PREFIXES = ("think:", "thought:")
REACT_SYSTEM = (
    "You are an agent acting in a text environment. Interleave thinking and acting, one line at a time: "
    "write 'think: ...' to reason (the environment answers OK.) or write exactly one action."
)
REACT_CHAT_HINT = (
    "\n\nBefore acting, write one line 'Thought: ...' with your reasoning, then your answer on the next lines."
)


@dataclass
class Turn:
    line: str  # what the agent wrote (a thought or an action)
    observation: str  # what came back ("OK." after a thought)


@dataclass
class Episode:
    """What a prompting policy knows of one running episode."""

    instruction: str
    observation: str  # the first observation (text envs) or the current one
    example: str = ""  # a solved example of the same task type
    reflections: list[str] = field(default_factory=list)  # Reflexion's memory for this task
    turns: list[Turn] = field(default_factory=list)
    transcript: list[dict[str, str]] | None = None  # conversational envs
    tools: list[dict] | None = None  # tools for the chat template (env reports "tools")


_TASK_PREFIX = re.compile(r"^your task is to:?\s*", re.IGNORECASE)


def example_text(trajectory: Trajectory, *, max_chars: int = 1500) -> str:
    """A solved trajectory as a ReAct example: the task, the first observation, one
    templated thought, then ``> action`` / observation lines (clipped to ``max_chars``).

    >>> from roleagent.types import Step, Task
    >>> t = Trajectory(task=Task("t/0", "x", "train"), instruction="put a key in a box", success=True)
    >>> t.steps = [Step("You are in a room.", 0, "", "take key", True, info={})]
    >>> t.final_observation = "You take the key."
    >>> print(example_text(t))
    Task: put a key in a box
    You are in a room.
    > think: My task is to put a key in a box. I will act one step at a time.
    OK.
    > take key
    You take the key.
    """
    goal = _TASK_PREFIX.sub("", trajectory.instruction.strip()).rstrip(".")  # ALFWorld's "Your task is to: ..."
    first = trajectory.steps[0].observation if trajectory.steps else trajectory.final_observation
    lines = [f"Task: {goal}", first.strip(), f"> think: My task is to {goal}. I will act one step at a time.", "OK."]
    observations = [s.observation for s in trajectory.steps[1:]] + [trajectory.final_observation]
    for step, after in zip(trajectory.steps, observations):
        lines += [f"> {step.action}", after.strip()]
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 4] + "\n..."


def react_messages(e: Episode, *, history: int = 10, count_tokens=None, budget: int = 1024) -> list[dict[str, str]]:
    """The chat of one ReAct turn (module docstring).

    >>> m = react_messages(Episode("find a key", "You are in a room.", turns=[Turn("think: look", "OK.")]))
    >>> print(m[1]["content"])
    Here is your task.
    Task: find a key
    You are in a room.
    > think: look
    OK.
    """
    if e.transcript is not None:
        memory = memory_text(e.reflections)
        system = e.instruction + REACT_CHAT_HINT + ("\n\n" + memory if memory else "")
        return actor.chat_messages(
            instruction=system, transcript=e.transcript, count_tokens=count_tokens or len, budget=budget, tools=e.tools
        )
    parts = [f"Here is an example of a solved task.\n{e.example}"] if e.example else []
    memory = memory_text(e.reflections)
    if memory:
        parts.append(memory)
    recent = e.turns[-history:] if history > 0 else []
    lines = ["Here is your task.", f"Task: {e.instruction.strip()}", e.observation.strip()]
    if len(recent) < len(e.turns):
        lines.append(f"({len(e.turns) - len(recent)} earlier lines omitted)")
    for turn in recent:
        lines += [f"> {turn.line}", turn.observation.strip()]
    parts.append("\n".join(lines))
    return [{"role": "system", "content": REACT_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def memory_text(reflections: list[str]) -> str:
    if not reflections:
        return ""
    return "Your memory (reflections on your earlier failed attempts at this task):\n" + "\n".join(
        f"- {r.strip()}" for r in reflections
    )


def parse_line(text: str) -> tuple[str, str]:
    """``("think", thought)``, ``("act", action)`` or ``("invalid", "")`` of one output.

    >>> parse_line(" think: the key is in the box\\n")
    ('think', 'the key is in the box')
    >>> parse_line("go to desk 1.\\n> look")
    ('act', 'go to desk 1')
    >>> parse_line("\\n")
    ('invalid', '')
    """
    lines = [line.strip() for line in text.strip().splitlines()]
    line = lines[0].removeprefix(">").strip() if lines else ""
    for prefix in THOUGHT_PREFIXES:
        if line.lower().startswith(prefix):
            return "think", line[len(prefix) :].strip()
    action = " ".join(line.split()).rstrip(".")
    return ("act", action) if action else ("invalid", "")


def parse_chat(text: str) -> tuple[str, str]:
    """A conversational environment's output without its thought lines.

    >>> parse_chat("Thought: I need the weather.\\n[get_weather(city='Paris')]")
    ('act', "[get_weather(city='Paris')]")
    >>> parse_chat("Thought: hmm")
    ('invalid', '')
    """
    kept = [line for line in text.splitlines() if not line.strip().lower().startswith(THOUGHT_PREFIXES)]
    action = "\n".join(kept).strip()
    return ("act", action) if action else ("invalid", "")
