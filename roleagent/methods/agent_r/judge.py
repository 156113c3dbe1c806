"""The actor as its own verifier: Agent-R's transition-point prompt (Yuan et al., 2025,
arXiv 2501.11425, Table 4), one prompt per judged step, all judged in one batched call.

The paper's prompt speaks of "interactive environments"; the authors' SciWorld code says
"science task" for every environment. We keep the paper's wording and name the
environment (:data:`ENVIRONMENTS`), so a TextCraft judge is not told it does science.
Each step is judged with the task description, up to ``history`` earlier turns as
``Action: … Observation: …`` lines, and the current action and observation; the answer
is parsed exactly by :func:`roleagent.algos.agent_r.parse_judgement`.
"""

from __future__ import annotations

from collections.abc import Sequence

from roleagent.algos.agent_r import parse_judgement

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


def judge_steps(
    chat, requests: Sequence[tuple[str, str, Sequence[tuple[str, str]], int]], *, history: int, max_new_tokens: int
) -> list[tuple[str | None, str]]:
    """Verdicts and raw answers for ``(env, task, steps, index)`` requests, one batched
    greedy ``chat`` call (``roleagent.methods.base.Chat``)."""
    if not requests:
        return []
    conversations = [[{"role": "user", "content": judge_prompt(*r, history=history)}] for r in requests]
    answers = chat(conversations, max_new_tokens=max_new_tokens, temperature=0.0)
    return [(parse_judgement(a), a) for a in answers]


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
