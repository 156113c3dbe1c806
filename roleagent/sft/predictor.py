"""World-In-Agent predictor warm start (Role-Agent, Wang et al., 2026, arXiv 2606.10917,
§3.2, eq. 2): supervised examples that teach the policy to predict what the environment
will show, from data the environment gives for free, and the held-out measure of that
competence.

**Examples.** For step t of an expert episode (state s_t, action a_t) the target is the
environment's real next H observations s_{t+1..t+H}, written in the predictor's answer
format after the ``<state1>`` prefix the rollout pre-fills::

    <state1>s_{t+1}</state1><state2>s_{t+2}</state2>…<stateH>s_{t+H}</stateH>

(``</stateH>`` is the rollout's stop string and, as an action's ``</action>``, part of
what a generation emits). The prompt is the rollout's prediction prompt for that step,
built from the same pieces as :class:`~roleagent.methods.role_agent.wia.PredictionExtension`
(``wia.prompt``):

- ``continuation``: the actor's chat of step t (``step.extras["chat"]``, with every
  earlier turn of a ``rollout.context=full`` episode), the action turn ``<action>a_t``
  (context, no loss), then the user message ``prediction_request(a_t, H)`` and the
  prediction turn (its own ``prefix`` ``<state1>``: ``roleagent.sft.data``). Encoding it
  gives ``engine.extend_chat(prompt_ids, action_ids, [request], response_prefix="<state1>")``,
  the rollout's prompt token for token (``tests/test_sft_predictor.py``); when that is over
  ``max_prompt_tokens`` the rollout falls back to ``separate``, and so does
  :func:`encode_predictor`;
- ``separate``: ``predictor_messages(instruction, observation, a_t, H)``, the paper's x_pre.

Only the prediction turn carries the loss, so the existing SFT objective
(``roleagent.sft.train``) trains the predictor's output tokens and nothing else. Steps with
fewer than H real observations after them (t + H > T) give no example: their missing
states could only be invented. Worked example, H = 1, an episode "go to cabinet 1" →
"You arrive at cabinet 1. The cabinet 1 is closed.", "open cabinet 1" → "You open the
cabinet 1. …": two examples, the first with target
``<state1>You arrive at cabinet 1. The cabinet 1 is closed.</state1>``.

**Competence** (:func:`competence`, on held-out transitions: expert episodes of games that
were never SFT data). Each prediction ŝ_{t,h} is generated as in the rollouts (same
prompt, ``wia.max_new_tokens``, stop string; greedy by default) and parsed by
``parse_predictions``. Reported over all (t, h):

- ``score``: mean LMS(ŝ_{t,h}, s_{t+h}) (``algos.lms_score``, eq. 4, the function the
  rollouts score with; the paper reports ≈0.60 at the start of RL);
- ``observation_form``: the share of predictions that could be an observation rather than
  an echo of the action: ŝ has a word (a run of letters or digits) and its first word is
  not the action's first word, the verb (``go``, ``take``, ``open``…); when the real
  observation itself starts with that word (TextCraft: ``inventory`` → "Inventory: …"), a
  prediction starting with it counts too. So ``go to bed 1``, ``Go to bed 1 and look`` and
  ``...`` are echoes of "go to bed 1", "You arrive at bed 1." is an observation.
  ALFWorld's observations start with "You", "On the", "Nothing", "The"…, never with
  their action's verb;
- ``truncated``: the share of generations cut at ``wia.max_new_tokens``.

Example (:func:`competence`): action "go to bed 1", truth "You arrive at bed 1." (word
tokens you, arrive, at, bed, 1, .), predictions "You arrive at bed 2." (LMS 2·5/12 = 0.833,
observation form) and "go to bed 1" (LMS 2·2/10 = 0.4: bed, 1 in common; an echo) →
score 0.617, observation_form 0.5.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from roleagent.algos.similarity import lms_score
from roleagent.engine.base import SamplingParams
from roleagent.methods.role_agent.wia import (
    PREFIX,
    parse_predictions,
    prediction_request,
    predictor_messages,
    stop_strings,
)
from roleagent.sft.data import ChatExample, EncodedExample, SFTDataError, encode_example, trajectory_examples
from roleagent.types import Trajectory

PROMPTS = ("continuation", "separate")


def prediction_target(states: Sequence[str]) -> str:
    """The predictor's answer naming ``states``, prefix included.

    >>> prediction_target(["You see a key.", "You win."])
    '<state1>You see a key.</state1><state2>You win.</state2>'
    """
    return "".join(f"<state{h}>{s}</state{h}>" for h, s in enumerate(states, 1))


def next_observations(trajectory: Trajectory, horizon: int) -> list[list[str] | None]:
    """Per step t, the real observations s_{t+1..t+H} (as ``score_predictions`` scores
    them: the next steps' observations, then the final one), or None when fewer than H
    follow."""
    future = [s.observation for s in trajectory.steps[1:]] + [trajectory.final_observation]
    return [future[t : t + horizon] if t + horizon <= len(future) else None for t in range(len(future))]


def predictor_examples(trajectory: Trajectory, *, horizon: int, prompt: str = "continuation") -> list[ChatExample]:
    """One example per step of a teacher episode with H observations after it (module
    docstring); ``prompt`` is ``wia.prompt``. Steps need their recorded chat
    (``step.extras["chat"]``, as ``trajectory_examples``)."""
    if prompt not in PROMPTS:
        raise ValueError(f"prompt {prompt!r} is not one of {', '.join(PROMPTS)}")
    task = trajectory.task
    chats = {t: e for e in trajectory_examples(trajectory) for t in e.meta["steps"]}
    out = []
    for t, (step, truth) in enumerate(zip(trajectory.steps, next_observations(trajectory, horizon))):
        if truth is None:
            continue
        meta = {
            "task": task.id,
            "split": task.split,
            "task_type": task.metadata.get("task_type"),
            "role": "predictor",
            "step": t,
            "prompt": prompt,
            "horizon": horizon,
            "action": step.action,
            "truth": truth,
            "instruction": trajectory.instruction,
            "observation": step.observation,
        }
        target = {"role": "assistant", "content": prediction_target(truth), "loss": True, "prefix": PREFIX}
        if prompt == "separate":
            out.append(separate_example(meta))
            continue
        actor = chats[t]
        turns = [i for i, m in enumerate(actor.messages) if m["role"] == "assistant"]
        upto = turns[actor.meta["steps"].index(t)]
        context = [{**m, "loss": False} if m["role"] == "assistant" else dict(m) for m in actor.messages[: upto + 1]]
        request = {"role": "user", "content": prediction_request(step.action, horizon)}
        out.append(ChatExample(context + [request, target], actor.response_prefix, meta))
    return out


def separate_example(meta: dict[str, Any]) -> ChatExample:
    """The ``separate`` prompt's example of the transition ``meta`` describes."""
    messages = predictor_messages(
        instruction=meta["instruction"], observation=meta["observation"], action=meta["action"], horizon=meta["horizon"]
    )
    target = {"role": "assistant", "content": prediction_target(meta["truth"]), "loss": True}
    return ChatExample(messages + [target], PREFIX, {**meta, "prompt": "separate"})


def encode_predictor(engine, example: ChatExample) -> EncodedExample:
    """``encode_example``, falling back to the separate prompt when a continuation is over
    the engine's ``max_prompt_tokens`` (as ``PredictionExtension.prompt_ids`` does)."""
    try:
        return encode_example(engine, example)
    except SFTDataError:
        if example.meta.get("prompt") != "continuation":
            raise
        return encode_example(engine, separate_example(example.meta))


# ------------------------------------------------------------------ competence -------


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def observation_form(prediction: str, action: str, truth: str = "") -> bool:
    """Whether ``prediction`` could be an observation, not an echo of ``action`` (module
    docstring).

    >>> observation_form("go to bed 1", "go to bed 1"), observation_form("...", "go to bed 1")
    (False, False)
    >>> observation_form("You arrive at bed 1.", "go to bed 1")
    True
    >>> observation_form("Inventory: [oak log]", "inventory", "Inventory: [birch log]")
    True
    """
    said, verb = words(prediction), words(action)[:1]
    return bool(said) and (said[:1] != verb or words(truth)[:1] == verb)


@dataclass
class Competence:
    """:func:`competence`'s result: ``metrics`` (the ``wia_predictor/`` keys of
    ``docs/metrics.md``) and one row per transition."""

    metrics: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)


def competence(
    predictions: Sequence[Sequence[str]],
    truths: Sequence[Sequence[str]],
    actions: Sequence[str],
    truncated: Sequence[bool] | None = None,
) -> Competence:
    """Score, observation form and truncation (module docstring) of transitions: per
    transition i, predictions ŝ_{i,1..H}, the real states and the action."""
    rows, scores, forms = [], [], []
    for predicted, truth, action in zip(predictions, truths, actions, strict=True):
        row_scores = [lms_score(p, s) for p, s in zip(predicted, truth, strict=True)]
        row_forms = [observation_form(p, action, s) for p, s in zip(predicted, truth)]
        scores += row_scores
        forms += row_forms
        rows.append({"action": action, "truth": list(truth), "predictions": list(predicted), "scores": row_scores})
    n = max(len(scores), 1)
    cut = list(truncated) if truncated is not None else [False] * len(rows)
    metrics = {
        "wia_predictor/score": sum(scores) / n if scores else float("nan"),
        "wia_predictor/observation_form": sum(forms) / n if forms else float("nan"),
        "wia_predictor/truncated": sum(cut) / max(len(cut), 1),
        "wia_predictor/transitions": len(rows),
    }
    return Competence(metrics, rows)


def predictor_competence(
    engine, examples: Sequence[ChatExample], *, max_new_tokens: int, temperature: float = 0.0, batch_size: int = 16
) -> Competence:
    """:func:`competence` of ``engine``'s predictions on held-out predictor ``examples``
    (their prompts as encoded for training, their ``meta`` truth and action), generated
    as in the rollouts with ``max_new_tokens`` (``wia.max_new_tokens``) at ``temperature``
    (0: greedy)."""
    predictions: list[list[str]] = [[] for _ in examples]
    truncated = [False] * len(examples)
    for horizon in sorted({e.meta["horizon"] for e in examples}):
        sampling = SamplingParams(max_new_tokens, temperature, top_p=1.0, stop=stop_strings(horizon))
        rows = [i for i, e in enumerate(examples) if e.meta["horizon"] == horizon]
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            prompts = [encode_predictor(engine, examples[i]).prompts[-1] for i in batch]
            for i, gen in zip(batch, engine.generate(prompts, sampling)):
                predictions[i], truncated[i] = parse_predictions(gen.text, horizon), gen.truncated
    truths, actions = [e.meta["truth"] for e in examples], [e.meta["action"] for e in examples]
    return competence(predictions, truths, actions, truncated)


def summary(label: str, result: Competence) -> str:
    """One line for the run's log."""
    m = result.metrics
    return (
        f"World-In-Agent predictor ({label}): LMS score {m['wia_predictor/score']:.3f}, "
        f"observation form {100 * m['wia_predictor/observation_form']:.1f}%, truncated "
        f"{100 * m['wia_predictor/truncated']:.1f}% over {m['wia_predictor/transitions']} held-out transitions"
    )


# ------------------------------------------------------------------ command line -----

USAGE = """python -m roleagent.sft.predictor data RECIPE --out DIR [--tasks N] [--valid K] [--set KEY=VALUE]
python -m roleagent.sft.predictor eval RECIPE --examples FILE [--limit N] [--rows FILE] [--set KEY=VALUE]

data: the expert plays N + K training games (never a panel game; the first N are the N that
`roleagent sft --expert RECIPE --tasks N` plays); writes DIR/expert.jsonl (action
examples), DIR/predictor.jsonl (predictor examples of the N), DIR/train.jsonl (both) and
DIR/predictor_valid.jsonl (predictor examples of the K held-out games).
eval: the recipe's policy (--set model.init_from=SFT/final for a checkpoint) predicts the
held-out transitions of FILE; prints the competence (module docstring) as JSON."""


def main(argv: Sequence[str] | None = None) -> int:
    import json

    from roleagent.config import load_config
    from roleagent.sft.role_cli import load_engine, role_parser
    from roleagent.trainer.checks import prepare

    parser = role_parser("python -m roleagent.sft.predictor", USAGE)
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--valid", type=int, default=8)
    args = parser.parse_args(argv)
    cfg = prepare(load_config(args.recipe, args.set))
    _, engine = load_engine(cfg)
    if args.command == "data":
        counts = write_data(cfg, engine, args.out, tasks=args.tasks, valid=args.valid)
        print(json.dumps(counts))
        return 0
    from roleagent.sft.sources import read_examples

    examples = read_examples(args.examples)[: args.limit or None]
    result = predictor_competence(engine, examples, max_new_tokens=cfg.wia.max_new_tokens)
    if args.rows:
        with open(args.rows, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in result.rows)
    print(summary(cfg.model.init_from or cfg.model.name, result))
    print(json.dumps(result.metrics))
    return 0


def write_data(cfg, engine, out, *, tasks: int, valid: int) -> dict[str, int]:
    """The ``data`` command (:data:`USAGE`); returns the counts of what it wrote."""
    from pathlib import Path

    from roleagent.algos import prediction_horizon
    from roleagent.sft.data import write_examples
    from roleagent.sft.expert import expert_examples, play_expert_trajectories, solved

    trajectories, settings = play_expert_trajectories(cfg, engine, tasks + valid)
    horizon = cfg.wia.horizon or prediction_horizon(settings.max_steps, cfg.wia.horizon_fraction)
    actions, counts = expert_examples(trajectories[:tasks])
    train, held_out = (
        [e for t in solved(part) for e in predictor_examples(t, horizon=horizon, prompt=cfg.wia.prompt)]
        for part in (trajectories[:tasks], trajectories[tasks:])
    )
    out = Path(out)
    write_examples(out / "expert.jsonl", actions)
    write_examples(out / "predictor.jsonl", train)
    write_examples(out / "train.jsonl", actions + train)
    write_examples(out / "predictor_valid.jsonl", held_out)
    return {**counts, "predictor_examples": len(train), "predictor_valid_examples": len(held_out), "horizon": horizon}


if __name__ == "__main__":
    raise SystemExit(main())
