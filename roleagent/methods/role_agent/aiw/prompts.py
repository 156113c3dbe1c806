"""Prompts of the two Agent-In-World roles (Role-Agent: Wang et al., 2026, arXiv 2606.10917, §3.3 and Appendix D).

* :func:`analysis_messages` — the failure analyst, Figure 8 ("Prompt Template for
  Abstracting Failure Modes from Failed Trajectories").
* :func:`retrieval_messages` — the retriever, Figure 9 ("Prompt Template for Retrieving
  Tasks with Similar Failure Modes").

Both return chat messages (``list[dict(role, content)]``) for a batched chat-completion
callable; no model is called here.

Deviations from the paper's templates, on purpose:

* Figure 8 asks for ``DOMINANT_TYPE: [category from Step 1]`` without listing the
  categories, while the paper's runs use a fixed per-environment taxonomy (Table 6). We
  list the environment's taxonomy in the prompt so the label is one of those categories;
  :func:`roleagent.methods.role_agent.aiw.reflection.parse_reflection` still maps off-taxonomy answers.
* Figure 9 asks for ``INDEX/TASK/REFLECTIONS`` blocks. We keep that block and number the
  candidates ``[1]..[K]`` (1-based, as in the paper's case study ``[4] "TASK": ...``);
  the parser in :mod:`roleagent.methods.role_agent.aiw.retrieval` also accepts bare lists such as ``[1, 3]``.
* The trajectory is rendered in the case-study format of Figure 10
  (``OBSERVATION (step t)`` / ``AGENT_ACTION (step t)``) and bounded by a character
  budget (the paper feeds "all interaction sequences"; a 50-step ALFWorld episode does not
  fit a small model's context, so long ones keep their first and last steps). Given the
  engine's prompt limit (``fits``), that budget shrinks until the whole prompt fits: an
  engine keeps a long prompt's last tokens, which would cut the system message and
  Figure 8's instructions, the taxonomy among them, from the front.
* Order ``evidence_first`` (``aiw.analysis_order``; Figure 8's is ``type_first``) asks for
  the critical step and the detail before the type; ``action_first`` too, with the critical
  step as the action quoted, then its step number.
* Layout ``shared_first`` (the default, ``aiw.analyst_prompt``) puts Figure 8's
  instructions before the failure instead of after it, so that every prompt of an
  iteration starts with the same tokens; ``paper`` keeps the figure's order.
* The policy analyst's answer may be started for it (:data:`ANALYSIS_ANSWER_PREFIX`,
  ``aiw.answer_prefix``) and is cut at the closing tag (:data:`ANALYSIS_STOP`,
  ``aiw.stop_at_close``; with the prefix also at a new block, a heading or a blank line,
  :data:`ANALYSIS_STOP_AFTER_PREFIX`); the retriever's likewise
  (:data:`RETRIEVAL_ANSWER_PREFIX`, :data:`RETRIEVAL_STOP`, :data:`RETRIEVAL_STOP_AFTER_PREFIX`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from roleagent.types import Trajectory

Messages = list[dict[str, str]]

ANALYST_SYSTEM = (
    "You are an expert AI trainer specializing in diagnosing why AI agents fail at multi-step reasoning tasks."
)

# Figure 8, verbatim apart from the taxonomy section and whitespace, in two parts: the
# failure's own text (CASE) and the instructions every failure shares (INSTRUCTIONS).
ANALYSIS_CASE = """## Task Context
{task_description}

## Failed Trajectory
The agent attempted the task above but failed. Here are the steps it took:
{trajectory_description}"""

ANALYSIS_INSTRUCTIONS = """## Failure Categories
DOMINANT_TYPE must be exactly one of: {taxonomy}

## Your Analysis Task
Carefully examine the trajectory and produce a structured failure analysis.
**Step 1 - Root Cause Identification**
Identify the PRIMARY failure modes and describe briefly.
**Step 2 - Critical Step Identification**
Identify the SINGLE step where the failure became irreversible (the "point of no return").
**Step 3 - Core Lesson**
State a concise, generalizable lesson (1-2 sentences) that would help an agent avoid this class of mistake on SIMILAR tasks in the future. Focus on the decision rule, not the specific content.

## Output Format
Wrap your entire analysis in <reflection> tags using this exact structure:
<reflection>
{fields}
</reflection>"""

#: Figure 8's output fields, each with its placeholder.
ANALYSIS_FIELDS = {
    "DOMINANT_TYPE": "[category from Step 1]",
    "DETAIL": "[1-2 sentences explaining why this root cause applies]",
    "CRITICAL_STEP": "[step number and brief description of what went wrong]",
    "CORE_LESSON": "[the generalizable rule an agent should follow]",
    "RETRIEVAL_QUERY": "[the query for the retrieval stage]",
}
#: Orders of those fields (``aiw.analysis_order``): ``type_first`` is Figure 8's;
#: ``evidence_first`` asks for the critical step and the detail before the type, so that a
#: small model names its evidence (a step of the trajectory, copied) before it decides,
#: and the type follows from what it wrote. ``action_first`` is ``evidence_first`` with the
#: critical step written as its action, quoted, then its number (``"move bowl 1 to fridge
#: 1", step 11``): the model copies the action, which it can, before the number, which it
#: mostly guesses (:data:`ANALYSIS_PLACEHOLDERS`).
ANALYSIS_ORDERS = {
    "type_first": ("DOMINANT_TYPE", "DETAIL", "CRITICAL_STEP", "CORE_LESSON", "RETRIEVAL_QUERY"),
    "evidence_first": ("CRITICAL_STEP", "DETAIL", "DOMINANT_TYPE", "CORE_LESSON", "RETRIEVAL_QUERY"),
    "action_first": ("CRITICAL_STEP", "DETAIL", "DOMINANT_TYPE", "CORE_LESSON", "RETRIEVAL_QUERY"),
}
#: Placeholders an order writes instead of :data:`ANALYSIS_FIELDS`'.
ANALYSIS_PLACEHOLDERS = {
    "action_first": {"CRITICAL_STEP": "[the action quoted from the trajectory, then its step number]"}
}

#: Prompt layouts of the analyst (``aiw.analyst_prompt``). ``shared_first`` puts the
#: instructions, identical for every failure of an environment, before the failure, so the
#: prompts of one batch share a long token prefix (the system message and the instructions)
#: whose KV an engine with prefix reuse prefills once; ``paper`` keeps Figure 8's order.
ANALYSIS_LAYOUTS = ("shared_first", "paper")

#: The smallest trajectory budget :func:`analysis_messages` shrinks to (a few steps).
MIN_TRAJECTORY_CHARS = 400

#: Where the policy analyst's answer starts (prefilled, not generated, when
#: ``aiw.answer_prefix`` is on: the block's first field, per order) and where it ends (a
#: stop string at the closing tag).
ANALYSIS_ANSWER_PREFIXES = {order: f"<reflection>\n{fields[0]}:" for order, fields in ANALYSIS_ORDERS.items()}
ANALYSIS_ANSWER_PREFIX = ANALYSIS_ANSWER_PREFIXES["type_first"]
ANALYSIS_STOP = ("</reflection>",)
#: Once the answer was started inside the block, a new ``<reflection>``, a markdown heading
#: (a small model echoing Figure 8's sections) or a blank line (Figure 8's block has none:
#: one field per line) also ends it.
ANALYSIS_STOP_AFTER_PREFIX = ("</reflection>", "<reflection>", "\n## ", "\n\n")

RETRIEVER_SYSTEM = (
    "You are an expert AI curriculum designer. Your job is to identify which historical "
    "training tasks are most relevant for helping an agent overcome a specific failure "
    "pattern."
)

# Figure 9, verbatim apart from the numbering note and whitespace.
RETRIEVAL_TEMPLATE = """## Current Failure Pattern
The agent is currently struggling with the following error pattern:
{error_pattern}

## Historical Task Candidates
Below are historical tasks where the agent previously failed. Each entry shows the task description and a brief failure analysis.
{candidates_text}

## Your Task
Select tasks from the list above that are MOST SIMILAR to the current failure pattern (at most {max_select}).
Similarity means:
1. The task requires the same type of reasoning or skill that the agent is currently failing at.
2. The task's failure analysis describes a similar root cause or mistake.
3. Re-training on this task would most directly help the agent overcome the current pattern.

## Output Format
Output ONLY the following structured block, with no additional text:
<selected_tasks>
INDEX/TASK/REFLECTIONS: <index, task and reflections from the candidate list>
REASON: <one sentence explaining why this task matches the current failure pattern>
INDEX/TASK/REFLECTIONS: <index, task and reflections from the candidate list>
REASON: <one sentence explaining why this task matches the current failure pattern>
</selected_tasks>"""

#: Where the retriever's answer starts (prefilled with ``aiw.answer_prefix``) and ends: at
#: the closing tag, and, once started inside the block, also at a new block, a heading or a
#: blank line (Figure 9's block has none).
RETRIEVAL_ANSWER_PREFIX = "<selected_tasks>\nINDEX/TASK/REFLECTIONS:"
RETRIEVAL_STOP = ("</selected_tasks>",)
RETRIEVAL_STOP_AFTER_PREFIX = ("</selected_tasks>", "<selected_tasks>", "\n## ", "\n\n")


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    if limit <= 0 or len(text) <= limit:
        return text
    if limit <= 3:
        return text[:limit]
    return text[: limit - 3] + "..."


def task_instruction(trajectory: Trajectory, limit: int = 600) -> str:
    """The goal text: the instruction the env gave at reset, ``task.metadata["instruction"]``,
    else the first observation."""
    instruction = trajectory.instruction or trajectory.task.metadata.get("instruction")
    if not instruction and trajectory.steps:
        instruction = trajectory.steps[0].observation
    if not instruction:
        instruction = trajectory.task.id
    return _clip(str(instruction), limit)


def _step_block(index: int, observation: str, action: str, obs_chars: int, act_chars: int) -> str:
    return (
        f'OBSERVATION (step {index}) "{_clip(observation, obs_chars)}"\n'
        f'AGENT_ACTION (step {index}) "{_clip(action, act_chars)}"'
    )


def render_trajectory(
    trajectory: Trajectory, budget_chars: int = 3000, obs_chars: int = 400, act_chars: int = 200
) -> str:
    """Figure-10-style text of the episode, at most about ``budget_chars`` characters.

    Every step is ``OBSERVATION (step t)`` + ``AGENT_ACTION (step t)`` (1-based ``t``,
    the numbering CRITICAL_STEP refers to), each field clipped to ``obs_chars`` /
    ``act_chars``. When the whole episode does not fit, the first and the last steps are
    kept (the start shows the setting, the end shows how it failed), alternately adding
    steps from the end and from the start, and a line ``... (k steps omitted) ...`` marks
    the gap. The final observation (after the last action) closes the text.
    """
    blocks = []
    for i, step in enumerate(trajectory.steps, start=1):
        action = step.action if step.action is not None else step.action_text
        if not step.valid:
            action = f"{_clip(step.action_text, act_chars)} [invalid action]"
        blocks.append(_step_block(i, step.observation, action or "", obs_chars, act_chars))
    tail = ""
    if trajectory.final_observation:
        tail = f'FINAL_OBSERVATION "{_clip(trajectory.final_observation, obs_chars)}"'
    budget = max(budget_chars - len(tail), 0)
    total = sum(len(b) + 1 for b in blocks)
    if total <= budget:
        body = "\n".join(blocks)
    else:
        head: list[int] = []
        back: list[int] = []
        used = 60  # room for the omission marker
        lo, hi = 0, len(blocks) - 1
        turn_back = False  # first step first, then the last, then alternate
        while lo <= hi:
            idx = hi if turn_back else lo
            cost = len(blocks[idx]) + 1
            if used + cost > budget and (head or back):
                break
            used += cost
            if turn_back:
                back.append(idx)
                hi -= 1
            else:
                head.append(idx)
                lo += 1
            turn_back = not turn_back
        omitted = len(blocks) - len(head) - len(back)
        parts = [blocks[i] for i in head]
        if omitted:
            parts.append(f"... ({omitted} steps omitted) ...")
        parts.extend(blocks[i] for i in reversed(back))
        body = "\n".join(parts)
    if not body:
        body = "(the agent took no action)"
    return body + ("\n" + tail if tail else "")


def analysis_messages(
    trajectory: Trajectory,
    taxonomy: Sequence[str],
    budget_chars: int = 3000,
    obs_chars: int = 400,
    layout: str = "paper",
    fits: Callable[[Messages], bool] | None = None,
    order: str = "type_first",
) -> Messages:
    """Figure 8 as chat messages for one failed trajectory; ``layout`` is one of
    :data:`ANALYSIS_LAYOUTS` (the same text in another order), ``order`` one of
    :data:`ANALYSIS_ORDERS` (the output fields' order the instructions ask for).

    ``fits`` (e.g. :func:`roleagent.engine.chat.prompt_fits`) says whether a prompt is
    within the engine's limit; while it is not, the trajectory is rendered again with a
    budget a tenth below the length of its last text, down to
    :data:`MIN_TRAJECTORY_CHARS`. Worked example: the main job's ALFWorld failures (12
    steps, 1,620–1,920 characters of trajectory, within 3000) make prompts of 1,016–1,108
    tokens with the embedded tokenizer, over a 1024-token limit; shortened to 1,320–1,660
    characters (one or two middle steps left out) they fit."""
    if layout not in ANALYSIS_LAYOUTS:
        raise ValueError(f"analysis prompt layout must be one of {ANALYSIS_LAYOUTS}, got {layout!r}")
    if order not in ANALYSIS_ORDERS:
        raise ValueError(f"analysis field order must be one of {tuple(ANALYSIS_ORDERS)}, got {order!r}")
    placeholders = ANALYSIS_FIELDS | ANALYSIS_PLACEHOLDERS.get(order, {})
    fields = "\n".join(f"{key}: {placeholders[key]}" for key in ANALYSIS_ORDERS[order])
    labels = ", ".join(taxonomy) if taxonomy else "a short snake_case label of your choice"
    if taxonomy and "other" not in taxonomy:
        labels += " (or other)"
    instructions = ANALYSIS_INSTRUCTIONS.format(taxonomy=labels, fields=fields)
    while True:
        text = render_trajectory(trajectory, budget_chars, obs_chars)
        case = ANALYSIS_CASE.format(task_description=task_instruction(trajectory), trajectory_description=text)
        parts = (instructions, case) if layout == "shared_first" else (case, instructions)
        messages = [{"role": "system", "content": ANALYST_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]
        if fits is None or budget_chars <= MIN_TRAJECTORY_CHARS or fits(messages):
            return messages
        budget_chars = max(min(budget_chars, len(text)) * 9 // 10, MIN_TRAJECTORY_CHARS)


def retrieval_messages(
    error_pattern: str, candidates: Sequence[tuple[str, str]], max_select: int = 3, entry_chars: int = 300
) -> Messages:
    """Figure 9 as chat messages.

    ``candidates`` are ``(task_text, reflection_text)`` pairs, shown as ``[1]``..``[K]``.
    """
    lines = []
    for i, (task_text, reflection_text) in enumerate(candidates, start=1):
        lines.append(
            f'[{i}] "TASK": "{_clip(task_text, entry_chars // 2)}", '
            f'"REFLECTION": "{_clip(reflection_text, entry_chars)}"'
        )
    content = RETRIEVAL_TEMPLATE.format(
        error_pattern=error_pattern,
        candidates_text="\n".join(lines) if lines else "(none)",
        max_select=max_select,
    )
    return [{"role": "system", "content": RETRIEVER_SYSTEM}, {"role": "user", "content": content}]
