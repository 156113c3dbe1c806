"""The actor as its own verifier: Agent-R's transition-point prompt (Yuan et al., 2025,
arXiv 2501.11425, Table 4), one prompt per judged step, all judged in one batched call.

The paper's prompt speaks of "interactive environments"; the authors' SciWorld code says
"science task" for every environment. We keep the paper's wording and name the
environment (:data:`ENVIRONMENTS`), so a TextCraft judge is not told it does science.
Each step is judged with the task description, up to ``history`` earlier turns as
``Action: … Observation: …`` lines, and the current action and observation; the answer
is parsed by :func:`roleagent.algos.agent_r.parse_judgement` (the verdict word first on the
last ``Judgment:`` line). Every answer is kept with its verdict (None: unparsed) and whether
it hit the token limit (``agent_r.judge_max_new_tokens``), so a run counts them
(:func:`judge_counts`) instead of reading an unparsed answer as a verdict.

The limit: the paper's nine judge answers (Table 8) are 19-91 tokens with the embedded
SmolLM2 tokenizer; the default 256 leaves 2.8 times the longest (the authors generate up to
500 tokens for every call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from roleagent.algos.agent_r import parse_judgement
from roleagent.engine.base import SamplingParams

#: How the judge prompt names each environment (others: "an interactive environment").
ENVIRONMENTS = {
    "textcraft": "a Minecraft crafting environment (TextCraft)",
    "scienceworld": "a science experiment environment (ScienceWorld)",
    "alfworld": "a household environment (ALFWorld)",
    "scripted": "a text puzzle environment",
}

JUDGE_PROMPT = (
    "You are a good verifier of interactive environments. You will be given a history log that "
    "memorizes an agent interacting with {environment} to solve a task. The format of the log is\n"
    "###\nAction: Action\nObservation: Observation\n###\n"
    "Log:\nTask Description: {task}\n{history}\n"
    "Current Action: {action}\nCurrent Observation: {observation}\n\n"
    "You need to verify whether the current action is good or bad or uncertain.\n"
    "- A good action is one that is greatly helpful to solve the task.\n"
    "- A bad action is one that is greatly harmful to solve the task.\n"
    "- An uncertain action is one that is neither good nor bad. You cannot judge based on the "
    "current information.\n"
    "You must give reasons first and then give the response with the format: "
    "Judgment: <Good or Bad or Uncertain>"
)

#: Length caps of what the judge reads (characters): the task and each observation.
TASK_CHARS, OBSERVATION_CHARS = 1200, 400


def judge_prompt(env: str, task: str, steps: Sequence[tuple[str, str]], index: int, history: int) -> str:
    """The prompt judging ``steps[index]`` (``(action, observation)`` pairs of one path).

    Example: env "textcraft", steps [("get 1 oak log", "Got 1 oak log"), ("craft 4 oak
    planks using 1 oak log", "Crafted 4 oak planks")], index 1 → a log with one
    "Action: get 1 oak log" / "Observation: Got 1 oak log" turn and "Current Action: craft
    4 oak planks using 1 oak log".
    """
    earlier = steps[max(0, index - history) : index]
    lines = [f"Action: {a}\nObservation: {_clip(o, OBSERVATION_CHARS)}" for a, o in earlier]
    action, observation = steps[index]
    return JUDGE_PROMPT.format(
        environment=ENVIRONMENTS.get(env, "an interactive environment"),
        task=_clip(task, TASK_CHARS),
        history="\n".join(lines) if lines else "(no earlier actions)",
        action=action,
        observation=_clip(observation, OBSERVATION_CHARS),
    )


@dataclass(frozen=True)
class Judgement:
    """One judge answer: its verdict (None: unparsed), the text, and whether generation
    stopped at the token limit rather than at the end of the answer."""

    verdict: str | None
    answer: str
    truncated: bool = False


def judge_steps(
    engine, requests: Sequence[tuple[str, str, Sequence[tuple[str, str]], int]], *, history: int, max_new_tokens: int
) -> list[Judgement]:
    """Judgements of ``(env, task, steps, index)`` requests, one batched greedy generation
    of ``engine`` (``roleagent.engine.Engine``)."""
    if not requests:
        return []
    prompts = [engine.encode_chat([{"role": "user", "content": judge_prompt(*r, history=history)}]) for r in requests]
    generations = engine.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0))
    return [Judgement(parse_judgement(g.text), g.text, bool(g.truncated)) for g in generations]


def judge_counts(judgements: Sequence[Judgement]) -> dict[str, float]:
    """Per-iteration counts (metrics ``agent_r/judge_*`` and ``agent_r/verdict_*``): answers
    parsed into a verdict, unparsed, and truncated (cut at the token limit, parsed or not).

    Example: verdicts ["bad", None, "good"], the second truncated → judge_answers 3,
    judge_parsed 2, judge_unparsed 1, judge_truncated 1, verdict_good 1, verdict_bad 1,
    verdict_uncertain 0.
    """
    verdicts = [j.verdict for j in judgements]
    counts = {
        "judge_answers": len(verdicts),
        "judge_parsed": sum(v is not None for v in verdicts),
        "judge_unparsed": verdicts.count(None),
        "judge_truncated": sum(j.truncated for j in judgements),
        **{f"verdict_{v}": verdicts.count(v) for v in ("good", "bad", "uncertain")},
    }
    return {k: float(v) for k, v in counts.items()}


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
