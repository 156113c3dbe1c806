"""Agent-In-World analyst warm start (Role-Agent, Wang et al., 2026, arXiv 2606.10917,
§3.3, Fig. 8): supervised examples that teach the policy to write the failure analysis
Agent-In-World parses, from the environment's rule diagnosis of its failures, and the
held-out measure of that competence.

**Examples.** For a failed, uncrashed trajectory τ with a rule diagnosis d
(``τ.diagnosis``, else ``Environment.diagnose(τ)``: what the AIW analyst falls back to),
the prompt is the analyst's: ``analysis_messages(τ, taxonomy, aiw.analysis_chars,
aiw.observation_chars, aiw.analyst_prompt, fits, aiw.analysis_order)`` within the engine's prompt limit,
its answer started with ``analyst_prefix(aiw)`` when ``aiw.answer_prefix`` is on; encoded, it is
``engine.encode_chat(messages, response_prefix=prefix)``, the prompt ``Trainer.chat``
gives the policy in ``AgentInWorldMethod.after_iteration``, token for token
(``tests/test_sft_analyst.py``). The target is Fig. 8's block, one field per line (the
AIW analyst stops at a blank line once its answer was started for it), built from
``rule_reflection(d)``, the reflection the AIW would file for τ, in ``aiw.analysis_order``
(here Figure 8's; ``evidence_first``: CRITICAL_STEP, DETAIL, then DOMINANT_TYPE;
``action_first``: the same, with CRITICAL_STEP ``"a_c", step c + 1``)::

    <reflection>
    DOMINANT_TYPE: d.dominant_type
    DETAIL: d.detail, "step k" renumbered k + 1
    CRITICAL_STEP: Step c + 1, "a_c"
    CORE_LESSON: d.core_lesson, else LESSONS[type] (a decision rule for the type)
    RETRIEVAL_QUERY: d.retrieval_query, else "<type> in <task type> task: <goal>"
    </reflection>

Diagnoses number steps from 0 (the index in ``τ.steps``), the prompt from 1 (``OBSERVATION
(step t)``), so the target's step numbers are the prompt's. ``</reflection>`` is the stop
string and, as an action's ``</action>``, part of what a generation emits; with
``aiw.stop_at_close`` off a generation ends at EOS, so the example sets ``eos``. Only the
answer after the prefix carries the loss (``roleagent.sft.data``), so the existing SFT
objective trains the analysis tokens and nothing else. Worked example: an ALFWorld
failure whose diagnosis is ``{"dominant_type": "wrong_receptacle", "detail": "put the apple
1 into the countertop 1 (goal: fridge)", "critical_step": 3}`` on "put a cool apple in
fridge" (task type ``pick_cool_then_place``), step 3 ``move apple 1 to countertop 1``, has
the target (after the prefix ``<reflection>\\nDOMINANT_TYPE:``)::

     wrong_receptacle
    DETAIL: put the apple 1 into the countertop 1 (goal: fridge)
    CRITICAL_STEP: Step 4, "move apple 1 to countertop 1"
    CORE_LESSON: Before placing the object, check that the receptacle is of the type the task names;
    putting it anywhere else does not count.
    RETRIEVAL_QUERY: wrong receptacle in pick cool then place task: put a cool apple in fridge.
    </reflection>

**Competence** (:func:`competence`, on failures of games that were never SFT data). Each
analysis is generated as the AIW generates it (same prompt, prefix, stop strings,
``aiw.analysis_max_new_tokens``; greedy by default) and read by the AIW's own
``parse_answer``. Over n failures:

- ``parsed``: the share the AIW keeps (no fallback to the rule diagnosis);
- ``complete``: the share with all five fields;
- ``agreement``: the share whose dominant type equals the rule label (an unparsed answer
  does not agree);
- ``critical_step``: the share whose critical step is the rule's (1-based);
- ``truncated``: the share cut at ``aiw.analysis_max_new_tokens``.

Example: rule labels ``wrong_receptacle`` ×3 (rule steps 4, 2, 2), answers "…DOMINANT_TYPE:
wrong_receptacle … CRITICAL_STEP: Step 4" (all five fields), "…DOMINANT_TYPE: navigation
loop … CRITICAL_STEP: Step 2" (mapped to ``navigation_loop``) and "I think the agent
failed" (no type) → parsed 2/3, complete 1/3, agreement 1/3, critical_step 2/3 (a step
counts on its own).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from roleagent.engine.base import SamplingParams
from roleagent.methods.role_agent.aiw.prompts import ANALYSIS_ORDERS, _clip, analysis_messages, task_instruction
from roleagent.methods.role_agent.aiw.reflection import rule_reflection
from roleagent.methods.role_agent.aiw.roles import Fits, analyst_prefix, analyst_stop, parse_answer
from roleagent.methods.role_agent.config import AIWConfig
from roleagent.sft.data import ChatExample, answer_examples
from roleagent.types import Trajectory

#: Core lessons per failure type (the Table 6 taxonomies of ALFWorld and the scripted
#: environment): decision rules, not the failure's content (Fig. 8, Step 3).
LESSONS = {
    "repetitive_exploration": "Keep track of the places already inspected and go to an unvisited one; "
    "revisiting a place where nothing changed gives no new information.",
    "wrong_target_location": "Search first where the needed object usually is for its type, and keep "
    "searching new receptacles until it is found instead of staying in the wrong area.",
    "wrong_receptacle": "Before placing the object, check that the receptacle is of the type the task names; "
    "putting it anywhere else does not count.",
    "premature_give_up": "Keep working toward the goal until it is achieved; after a setback, try a new "
    "receptacle or step instead of idling or stopping.",
    "missing_precondition": "Check each action's precondition first: hold the object, open a closed "
    "container and apply the required clean, heat or cool step before placing it.",
    "repeated_failed_action": "When an action fails (Nothing happens), do not repeat it; change the "
    "action or satisfy its precondition first.",
    "navigation_loop": "Do not shuttle between the same receptacles; after two visits, pick a receptacle "
    "not yet visited or act on what is already there.",
    "entity_confusion": "Name exactly the object and receptacle instances the last observation shows "
    "at the current location.",
    "wrong_object_interaction": "Act only on objects of the type the task names; compare the object's "
    "type with the goal before taking, transforming or placing it.",
    "exhaustive_exploration_failure": "Look inside every receptacle on the way, opening closed ones, and "
    "take the target as soon as it is seen; visiting every place without taking it wastes the step budget.",
    "action_format_error": "Answer with exactly one admissible command in the required format.",
}
STEP_RE = re.compile(r"\b([Ss]teps?) (\d{1,9})\b")


def lesson(label: str) -> str:
    """The core lesson of a failure type (:data:`LESSONS`, else a rule naming the type)."""
    return LESSONS.get(label) or f"Before each action, check that it does not repeat the {label.replace('_', ' ')}."


def one_based(text: str) -> str:
    """A diagnosis detail with its 0-based step numbers renumbered as the prompt numbers steps.

    >>> one_based("saw a apple at step 0; from step 11 only idle commands")
    'saw a apple at step 1; from step 12 only idle commands'
    """
    return STEP_RE.sub(lambda m: f"{m.group(1)} {int(m.group(2)) + 1}", text)


def retrieval_query(label: str, trajectory: Trajectory) -> str:
    """``"<type> in <task type> task: <goal>"``: the failure type and the kind of task, so
    the retriever finds tasks failing the same way (the goal without "Your task is to:")."""
    goal = task_instruction(trajectory, 200).split("Your task is to:")[-1].strip()
    kind = str(trajectory.task.metadata.get("task_type") or "").replace("_", " ")
    return f"{label.replace('_', ' ')} in {kind} task: {goal}" if kind else f"{label.replace('_', ' ')}: {goal}"


def analysis_target(
    trajectory: Trajectory, diagnosis: dict[str, Any], taxonomy: Sequence[str], order: str = "type_first"
) -> str:
    """Fig. 8's ``<reflection>`` block for ``trajectory`` from its rule ``diagnosis``
    (module docstring), the whole block from ``<reflection>`` to ``</reflection>``, its
    fields in ``order`` (``aiw.analysis_order``)."""
    ref = rule_reflection(diagnosis, taxonomy)
    if ref is None:
        raise ValueError("no diagnosis: no analysis target")
    step = ref.critical_step
    where = "unknown"
    if step is not None and 0 <= step < len(trajectory.steps):
        quoted = f'"{_clip(trajectory.steps[step].action or trajectory.steps[step].action_text, 120)}"'
        where = f"{quoted}, step {step + 1}" if order == "action_first" else f"Step {step + 1}, {quoted}"
    detail = one_based(_clip(ref.detail, 300)) or ref.dominant_type.replace("_", " ")
    query = str(diagnosis.get("retrieval_query", diagnosis.get("query", "")) or "")
    values = {
        "DOMINANT_TYPE": ref.dominant_type,
        "DETAIL": detail,
        "CRITICAL_STEP": where,
        "CORE_LESSON": _clip(ref.core_lesson, 300) or lesson(ref.dominant_type),
        "RETRIEVAL_QUERY": _clip(query, 200) or retrieval_query(ref.dominant_type, trajectory),
    }
    return "<reflection>\n" + "\n".join(f"{key}: {values[key]}" for key in ANALYSIS_ORDERS[order]) + "\n</reflection>"


def analyst_examples(
    trajectories: Sequence[Trajectory],
    taxonomy: Sequence[str],
    aiw: AIWConfig,
    diagnose: Callable[[Trajectory], dict[str, Any] | None] | None = None,
    fits: Fits | None = None,
) -> list[ChatExample]:
    """One example per failed, uncrashed trajectory with a rule diagnosis (module
    docstring); successes, crashes and undiagnosed failures give none. ``fits``: the
    engine's prompt limit, as the AIW applies it (``roleagent.engine.chat.prompt_fits``)."""
    prefix = analyst_prefix(aiw)
    out = []
    for trajectory in trajectories:
        if trajectory.success or trajectory.crashed:
            continue
        diagnosis = trajectory.diagnosis or (diagnose(trajectory) if diagnose is not None else None)
        if not diagnosis:
            continue
        fit = None if fits is None else (lambda m: fits(m, prefix))
        messages = analysis_messages(
            trajectory, taxonomy, aiw.analysis_chars, aiw.observation_chars, aiw.analyst_prompt, fit, aiw.analysis_order
        )
        target = analysis_target(trajectory, diagnosis, taxonomy, aiw.analysis_order)
        ref = rule_reflection(diagnosis, taxonomy)
        task, step = trajectory.task, ref.critical_step
        meta = {"task": task.id, "split": task.split, "task_type": task.metadata.get("task_type"), "role": "analyst"}
        meta |= {
            "label": ref.dominant_type,
            "critical_step": None if step is None else step + 1,
            "seed": trajectory.seed,
        }
        answer = {"role": "assistant", "content": target, "loss": True}
        out.append(ChatExample(messages + [answer], prefix, meta, eos=not aiw.stop_at_close))
    return out


# ------------------------------------------------------------------ competence -------


@dataclass
class Competence:
    """:func:`competence`'s result: ``metrics`` (the ``aiw_analyst/`` keys of
    ``docs/metrics.md``) and one row per failure."""

    metrics: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)


def competence(
    answers: Sequence[str],
    labels: Sequence[str],
    steps: Sequence[int | None],
    taxonomy: Sequence[str],
    aiw: AIWConfig,
    truncated: Sequence[bool] | None = None,
) -> Competence:
    """Parsed, complete, agreement, critical step and truncation (module docstring) of
    analyses ``answers`` (with the prefix, as the AIW reads them) of failures whose rule
    labels and 1-based critical steps are ``labels`` and ``steps``."""
    rows = []
    for answer, label, step in zip(answers, labels, steps, strict=True):
        ref = parse_answer(answer, taxonomy, aiw)
        rows.append(
            {
                "label": label,
                "step": step,
                "answer": answer,
                "parsed": ref is not None,
                "complete": ref is not None and ref.parsed_ok,
                "type": ref.dominant_type if ref else None,
                "critical_step": ref.critical_step if ref else None,
            }
        )
    n = len(rows)
    cut = list(truncated) if truncated is not None else [False] * n

    def share(values) -> float:
        return sum(values) / n if n else float("nan")

    metrics = {
        "aiw_analyst/parsed": share(r["parsed"] for r in rows),
        "aiw_analyst/complete": share(r["complete"] for r in rows),
        "aiw_analyst/agreement": share(r["type"] == r["label"] for r in rows),
        "aiw_analyst/critical_step": share(r["parsed"] and r["critical_step"] == r["step"] for r in rows),
        "aiw_analyst/truncated": share(cut),
        "aiw_analyst/failures": n,
    }
    return Competence(metrics, rows)


def analyst_competence(
    engine,
    examples: Sequence[ChatExample],
    taxonomy: Sequence[str],
    aiw: AIWConfig,
    *,
    temperature: float = 0.0,
    batch_size: int = 8,
) -> Competence:
    """:func:`competence` of ``engine``'s analyses of held-out analyst ``examples`` (their
    prompts as encoded for training, their ``meta`` label and step), generated as the AIW
    generates them at ``temperature`` (0: greedy); examples written with another answer
    prefix (``aiw.analysis_order``, ``aiw.answer_prefix``) than ``aiw``'s are refused."""
    sampling = SamplingParams(aiw.analysis_max_new_tokens, temperature, top_p=1.0, stop=analyst_stop(aiw))
    answers, truncated = answer_examples(engine, examples, analyst_prefix(aiw), sampling, batch_size)
    labels = [e.meta["label"] for e in examples]
    steps = [e.meta.get("critical_step") for e in examples]
    return competence(answers, labels, steps, taxonomy, aiw, truncated)


def summary(label: str, result: Competence) -> str:
    """One line for the run's log."""
    m = result.metrics
    return (
        f"Agent-In-World analyst ({label}): parsed {100 * m['aiw_analyst/parsed']:.1f}%, dominant type = rule "
        f"{100 * m['aiw_analyst/agreement']:.1f}%, critical step = rule {100 * m['aiw_analyst/critical_step']:.1f}%, "
        f"complete {100 * m['aiw_analyst/complete']:.1f}%, truncated {100 * m['aiw_analyst/truncated']:.1f}% "
        f"over {m['aiw_analyst/failures']} held-out failures"
    )


# ------------------------------------------------------------------ command line -----

USAGE = """python -m roleagent.sft.analyst data RECIPE --rollouts FILE [FILE ...] --out DIR [--valid-games K]
    [--valid-rollouts FILE ...] [--per-game N] [--set KEY=VALUE]
python -m roleagent.sft.analyst eval RECIPE --examples FILE [--limit N] [--rows FILE] [--temperature T]
    [--set KEY=VALUE]

data: the failed, uncrashed episodes of rollout files (a run's rollouts/*.jsonl), diagnosed by
the recipe's environment, become analyst examples (module docstring) with the recipe's aiw.*
prompt settings; the failures of K games (a seeded draw, seed = the recipe's) and of every
game in --valid-rollouts are held out: DIR/analyst.jsonl (training games), DIR/analyst_valid.jsonl
(held-out games, never in analyst.jsonl); --per-game N keeps at most N failures of a game,
taking its failure types in turn (a game's failures are often near-copies).
eval: the recipe's policy (--set model.init_from=SFT/final for a checkpoint) analyses the
held-out failures of FILE as Agent-In-World does; prints the competence (module docstring) as JSON."""


def main(argv: Sequence[str] | None = None) -> int:
    import json

    from roleagent.config import load_config
    from roleagent.engine.chat import prompt_fits
    from roleagent.sft.role_cli import load_engine, role_parser
    from roleagent.sft.sources import read_examples
    from roleagent.trainer.checks import prepare

    parser = role_parser("python -m roleagent.sft.analyst", USAGE)
    parser.add_argument("--rollouts", nargs="+", default=[])
    parser.add_argument("--valid-rollouts", nargs="+", default=[])
    parser.add_argument("--valid-games", type=int, default=0)
    parser.add_argument("--per-game", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args(argv)
    cfg = prepare(load_config(args.recipe, args.set))
    _, engine = load_engine(cfg)
    if args.command == "data":
        counts = write_data(cfg, args.rollouts, args.valid_rollouts, args.out, valid_games=args.valid_games,
                            per_game_cap=args.per_game, fits=prompt_fits(engine))  # fmt: skip
        print(json.dumps(counts))
        return 0
    examples = read_examples(args.examples)[: args.limit or None]
    result = analyst_competence(engine, examples, env_taxonomy(cfg), cfg.aiw, temperature=args.temperature)
    if args.rows:
        with open(args.rows, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in result.rows)
    print(summary(cfg.model.init_from or cfg.model.name, result))
    print(json.dumps(result.metrics))
    return 0


def env_taxonomy(cfg) -> tuple[str, ...]:
    """The failure taxonomy of ``cfg``'s environment (what the AIW prompts with)."""
    from roleagent.envs.base import env_class, factory_of

    return tuple(env_class(factory_of(cfg.env.name)).failure_taxonomy)


def write_data(cfg, rollouts, valid_rollouts, out, *, valid_games: int, per_game_cap=0, fits=None) -> dict[str, int]:
    """The ``data`` command (:data:`USAGE`; ``fits``: the engine's prompt limit): the counts written."""
    from pathlib import Path

    from roleagent.envs.workers import EnvPool
    from roleagent.sft.data import write_examples
    from roleagent.sft.failures import per_game, split_failures

    e = cfg.env
    with EnvPool(e.name, e.kwargs, slots=1, processes=False) as pool:
        failures, held, games = split_failures(pool, cfg.seed, rollouts, valid_rollouts, valid_games)
        taxonomy = pool.meta.failure_taxonomy
        made = analyst_examples(failures, taxonomy, cfg.aiw, diagnose=pool.diagnose, fits=fits)
    made = per_game(made, per_game_cap)
    parts = {"analyst.jsonl": [x for x in made if x.meta["task"] not in held]}
    parts["analyst_valid.jsonl"] = [x for x in made if x.meta["task"] in held]
    counts = {name: write_examples(Path(out) / name, part) for name, part in parts.items()}
    return {**counts, "failures": len(failures), "games": games, "held_out_games": len(held)}


if __name__ == "__main__":
    raise SystemExit(main())
