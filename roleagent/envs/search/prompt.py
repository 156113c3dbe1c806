"""The search agent's prompt: Role-Agent's Figure 7 (Wang et al., 2026, arXiv 2606.10917,
Appendix D), the template verl-agent's search environment also uses.

Figure 7 is rebuilt at every step with ``{step_count}`` and ``{memory_context}`` (the
earlier queries and their ``<information>`` blocks). Here the environment gives the fixed
part once, as the instruction, and the history reaches the model through the rollout:
in the ``chat`` protocol as the conversation itself (each search result a tool message,
Search-R1's growing context), in the ``window`` protocol as the actor's numbered list of
previous actions. ``figure7`` renders the full template for a given history.
"""

from __future__ import annotations

FIGURE7 = (
    "You are an expert assistant whose task is to answer the given question step by step. "
    "Your question: {question}. So far, you have completed {step_count} step(s). Below is the interaction "
    "history, where <search> and </search> enclose your previous search queries, and <information> and "
    "</information> enclose the corresponding results returned by the external search engine. "
    "History: {memory_context} Now it is your turn to respond at the current step. "
    "Begin by conducting your reasoning process. This reasoning must be enclosed within <think> and </think> tags. "
    "After reasoning, choose only one of the following actions (do not attempt both): "
    "(1) If you determine that you are missing some necessary information, you may use a search engine to obtain "
    "more external knowledge by formatting your query as: <search> your query </search>. "
    "(2) If you have sufficient knowledge to confidently answer the question, provide your final answer enclosed "
    "within <answer> and </answer> tags, without any detailed explanation."
)

HISTORY_NOTE = "(the interaction so far follows this instruction)"


def figure7(question: str, step_count: int = 0, memory_context: str = "") -> str:
    """Figure 7 with its three fields filled in.

    >>> figure7("What is the symbol of iron?").split(". So far")[0]
    'You are an expert assistant whose task is to answer the given question step by step. Your question: What is the symbol of iron?'
    """
    return FIGURE7.format(
        question=question.strip(),
        step_count=step_count,
        memory_context=memory_context or "(none yet)",
    )


def instruction(question: str) -> str:
    """The instruction the environment gives at reset: Figure 7 at step 0, its history
    field pointing at the interaction that follows."""
    return figure7(question, 0, HISTORY_NOTE)
