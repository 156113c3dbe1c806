"""The World-In-Agent predictor role (Role-Agent §3.2, eq. 2).

After the actor chooses a_t, the same model is prompted with the augmented prompt x_pre
(task, current state, the action) to predict the next H observations ŝ_{t,1..H}. The
answer format is ``<state1>…</state1><state2>…</state2>…``; the assistant turn is
pre-filled with ``<state1>`` so small models start in format. A missing or unparsable
state is the empty string (it scores 0 against any non-empty real state).
"""

from __future__ import annotations

import re

PREFIX = "<state1>"


def predictor_messages(*, instruction: str, observation: str, action: str, horizon: int,
                       max_observation_chars: int = 400) -> list[dict[str, str]]:
    """x_pre for one step: predict the observations after ``action`` and the next H−1 steps."""
    tags = "".join(f"<state{h}>...</state{h}>" for h in range(1, horizon + 1))
    steps = "the next observation" if horizon == 1 else f"the next {horizon} observations"
    content = (
        f"{instruction.strip()}\n\nCurrent observation: {observation[:max_observation_chars]}\n"
        f"Action taken: {action}\n\nPredict {steps} the environment will show, "
        f"in this format: {tags}"
    )
    return [
        {"role": "system", "content": "You predict how a text environment responds to actions."},
        {"role": "user", "content": content},
    ]


def parse_predictions(text: str, horizon: int) -> list[str]:
    """Predicted states ŝ_{t,1..H} from a generation that followed the ``<state1>`` prefix.

    >>> parse_predictions("You see a key.</state1><state2>You win.</state2>", 2)
    ['You see a key.', 'You win.']
    >>> parse_predictions("garbage", 2)
    ['garbage', '']
    """
    text = PREFIX + text
    out = []
    for h in range(1, horizon + 1):
        match = re.search(rf"<state{h}>(.*?)(?:</state{h}>|<state{h + 1}>|$)", text, re.DOTALL)
        out.append(" ".join(match.group(1).split()) if match else "")
    return out


def stop_strings(horizon: int) -> tuple[str, ...]:
    return (f"</state{horizon}>",)
