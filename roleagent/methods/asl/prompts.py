"""The prompts of the prompt generator (PG) and the generative reward model (GRM), from
the paper's Appendix A (Sun et al., 2025, arXiv 2510.14253, Figures 7-12), and the parsers
of what the roles write. The paper's "concreate" typo is corrected.

The tool is left out. In the paper both roles may call ``retrieve`` before they answer;
here each writes one turn and nothing would run a tool call, so the prompts neither
describe a tool nor ask for one. Figures 7-8 lose their tool section; the user prompts'
"use the tool" sentences are dropped (Figures 9-10: "the tool is necessary to answer"
becomes "needs a search of a knowledge base to answer", a property of the question, which
the policy will search for) or become "think" (Figures 11-12). The policy's prompt is the
environment's, and the policy does search (``docs/asl.md``). With ``asl.grm_retrieval`` the
GRM reads the knowledge base after all: the framework makes its first search, with the
question as the query, and the user prompt shows the results (:data:`GRM_EVIDENCE`) between
the student's answer and the request. With ``asl.pg_retrieval`` the PG reads it too: the
framework makes the search the paper's PG makes before it writes ("Use the tool to help you
generate the question, ensure that the question is solvable", Figure 9), and the meta prompt
opens with the results (:data:`PG_EVIDENCE`; ``roles.PGEvidence`` says what is searched)."""

from __future__ import annotations

import re

from roleagent.algos.asl import HARDER

PG_SYSTEM = """You are a helpful assistant.
## Tasks
Generate a question and answer that satisfy the user's request.
You can use <think></think> as many times as you want, but you must use <question></question> and <answer></answer> once and only once at the end of your response.
Your question should be about factual knowledge and can be answered with ONLY ONE concrete entity.
Your answer should be concise and to the point, without detailed illustrations.
For example:
<question>What is the capital of China?</question>
<answer>Beijing</answer>"""

GRM_SYSTEM = """You are a helpful assistant.
## Tasks
Verify the correctness of an answer.
You can use <think></think> as many times as you want, then give your conclusion inside <answer></answer>."""

#: Figure 9: iteration 0.
PG_ITERATION_0 = """Please generate a question about {topic}.
The question should be about factual knowledge and can be answered with ONLY ONE concrete entity.
Ensure that the question is solvable and needs a search of a knowledge base to answer.
Output with the following format:
<question>
...a generated question...
</question>
<answer>
...the answer to the generated question...
</answer>"""

#: Figure 10: iteration 1 (a similar question needing new knowledge).
PG_ITERATION_1 = """I asked a question to my students:
{question}

The true answer to this question is:
{answer}

Most student {answer_type}LY answer this question, therefore, to better train my students, I want you to generate a {question_type} question based on the current question.
You should generate the new question that is similar to the current question but requires new knowledge and is {question_type} to answer.
Follow the following instructions to generate the new question:
1. The new question should be about factual knowledge and can be answered with ONLY ONE concrete entity.
2. The question must be solvable and need a search of a knowledge base to answer. Your final output should be of the following formats:
<question>
...a new question...
</question>
<answer>
...the answer to the new question...
</answer>"""

#: Figure 11: later iterations (add or remove one reasoning hop).
PG_LATER = """I asked a question to my students:
{question}

The true answer to this question is:
{answer}

Most student {answer_type}LY answer this question, therefore, to better train my students, I want you to generate a {question_type} question based on the current question. Think about what the question involves, then generate the new question by {question_constraint} one reasoning hop to the current question.
e.g. {demo}

The new question should be about factual knowledge and can be answered with ONLY ONE concrete entity.

Output with the following format:
<question>
...a new question...
</question>
<answer>
...the answer to the new question...
</answer>"""

DEMO = {
    "adding": "'Who directed Titanic?' (James Cameron) -> 'In which country was the director of Titanic born?' (Canada)",
    "removing": "'In which country was the director of Titanic born?' (Canada) -> 'Who directed Titanic?' (James Cameron)",
}

#: What the PG is shown with ``asl.pg_retrieval``, before its meta prompt: the environment's
#: reply to the search ``roles.PGEvidence`` makes for it.
PG_EVIDENCE = """A search of the knowledge base returned:
{information}

Base the question on these results: its answer must be in them.

"""

#: Figure 12: the GRM; ``{evidence}`` is empty, or :data:`GRM_EVIDENCE` filled in.
GRM_USER = """I asked a question to my student:
{question}

My student's answer is:
{completion}

{evidence}I want you to help me verify the correctness of my student's answer.
Think it through, then draw your conclusion in the following format:
<answer>
conclusion: correct/wrong
</answer>"""

#: What the GRM is shown with ``asl.grm_retrieval``: the environment's reply to a search
#: for the question (``<information>Doc 1(Title: ...) ...</information>``).
GRM_EVIDENCE = """A search of the knowledge base for the question returned:
{information}

"""


def verdict_target(label: int) -> str:
    """The GRM's reply for a label (Figure 12's format), the text :func:`roleagent.algos.asl.parse_verdict`
    reads as that label: the warm start's target and, with ``asl.grm_verdicts: constrained``,
    one of the two replies the GRM may write.

    >>> verdict_target(0)
    '<answer>\\nconclusion: wrong\\n</answer>'
    """
    return f"<answer>\nconclusion: {'correct' if label else 'wrong'}\n</answer>"


_QUESTION = re.compile(r"<question>(.*?)</question>", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def meta_prompt(item: dict, round_index: int, evidence: str = "") -> str:
    """The PG's user prompt for one entry of D_PG: ``{"topic"}`` (iteration 0) or
    ``{"question", "answer", "flag"}`` (a follow-up; Figure 10 in round 1, 11 later);
    ``evidence``: the search results it opens with (``asl.pg_retrieval``), "" for none."""
    shown = PG_EVIDENCE.format(information=evidence) if evidence else ""
    if "topic" in item:
        return shown + PG_ITERATION_0.format(topic=item["topic"])
    harder = item["flag"] == HARDER
    fields = {
        "question": item["question"],
        "answer": item["answer"],
        "answer_type": "CORRECT" if harder else "WRONG",
        "question_type": "harder" if harder else "easier",
    }
    if round_index <= 1:
        return shown + PG_ITERATION_1.format(**fields)
    constraint = "adding" if harder else "removing"
    return shown + PG_LATER.format(**fields, question_constraint=constraint, demo=DEMO[constraint])


def role_chat(system: str, user: str, with_system: bool) -> list[dict[str, str]]:
    return ([{"role": "system", "content": system}] if with_system else []) + [{"role": "user", "content": user}]


def parse_pair(text: str) -> tuple[str, str] | None:
    """``(question, answer)`` from the PG's output: exactly one non-empty ``<question>``
    and one non-empty ``<answer>`` block (the system prompt's "once and only once"), else
    None. Example: ``"<question> Q? </question><answer>A</answer>"`` → ``("Q?", "A")``."""
    questions, answers = _QUESTION.findall(text), _ANSWER.findall(text)
    if len(questions) != 1 or len(answers) != 1:
        return None
    question, answer = " ".join(questions[0].split()), " ".join(answers[0].split())
    return (question, answer) if question and answer else None


def final_answer(text: str) -> str | None:
    """The policy's answer: the last ``<answer>`` block of its final turn, else None."""
    found = _ANSWER.findall(text)
    return " ".join(found[-1].split()) if found and found[-1].strip() else None
