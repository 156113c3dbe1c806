"""A gold-path expert for search QA (SFT warm-start data), the counterpart of ALFWorld's
planner: it knows the gold answers and, for the shipped questions, the supporting passages.

Policy (``next_action``): search the question first; once a gold answer has appeared in the
results, answer it; otherwise search the title of the next supporting passage (the bridge
entity of a two-hop question: "Selenium" after "arsenic"; a one-hop question whose first
search missed: its own passage's title); after one search per supporting passage plus the
question, or with the search budget spent, answer. It never searches a title that is itself a gold answer
(an abbreviation's expansion), so its queries do not carry the answer.
"""

from __future__ import annotations


def next_action(
    question: str,
    answers: list[str],
    support_titles: list[str],
    searches: int,
    gold_seen: bool,
    max_searches: int,
) -> str:
    """The expert's next action.

    >>> next_action("Symbol after arsenic?", ["Se"], ["Arsenic", "Selenium"], 0, False, 4)
    '<search>Symbol after arsenic?</search>'
    >>> next_action("Symbol after arsenic?", ["Se"], ["Arsenic", "Selenium"], 1, False, 4)
    '<search>Selenium</search>'
    >>> next_action("Symbol after arsenic?", ["Se"], ["Arsenic", "Selenium"], 2, True, 4)
    '<answer>Se</answer>'
    """
    from roleagent.envs.search.text import normalize_answer

    gold = {normalize_answer(a) for a in answers}
    if gold_seen or searches >= max_searches:
        return f"<answer>{answers[0]}</answer>"
    if searches == 0:
        return f"<search>{question}</search>"
    if searches > len(support_titles):
        return f"<answer>{answers[0]}</answer>"
    # the next hop's passage; a one-hop question whose first search missed: its own passage
    titles = [t for t in support_titles[searches:] or support_titles[-1:] if normalize_answer(t) not in gold]
    if not titles:
        return f"<answer>{answers[0]}</answer>"
    return f"<search>{titles[0]}</search>"
