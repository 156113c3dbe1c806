"""Agent-R judge examples labelled by the environment's expert: did the step bring the goal
closer? A denser, locally visible label than the search tree's transition point
(:mod:`roleagent.sft.judge`), for a judge too small to learn the latter.

**Why.** The tree's label of a step (Good: some successful path the tree found continues
from its state) depends on what else the search happened to try, not on anything the judge
is shown. From 68 such examples of 9 goals, and again from 82 of 12, the 135M judge learned
the answer format and a constant verdict (``benchmarks/RESULTS.md``, "Roles at 135M"). An environment whose expert
can count the actions it still needs (:meth:`roleagent.envs.base.Environment.expert_distance`,
TextCraft's planner) gives a label per step that the prompt does show: a command the game
refused, an item the goal's recipes do not need, or one they do.

**Label.** Replay a path's actions from the task's reset (the environment is deterministic
for a task and seed, as the search checks); d_i is the expert's distance before step i and
d_{i+1} after it. The step is Good when d_{i+1} < d_i, else Bad, with its kind:

- ``progress`` (Good): the step shortened the expert's remaining plan (or succeeded);
- ``invalid`` (Bad): the output held no action (``(invalid output) …``; nothing is stepped);
- ``unchanged`` (Bad): the state did not change (``state_key``: TextCraft's inventory), a
  refused command or a look at the inventory;
- ``unneeded`` (Bad): the state changed but the plan is no shorter (an item the goal does
  not need, or more of one than it needs), or the goal can no longer be reached.

Worked example (TextCraft, goal stick, task seed 0; the instruction lists both "craft 1 stick
using 2 bamboo" and "craft 4 stick using 2 planks", and the expert's plan from nothing is
get 2 bamboo, craft 1 stick using 2 bamboo: d = 2)::

    step                                   d before → after   label
    get 1 birch logs                       2 → 2              Bad, unneeded
    get 1 oak logs                         2 → 2              Bad, unneeded (a route one command longer)
    craft 4 oak planks using 1 oak logs    2 → 1              Good, progress
    inventory                              1 → 1              Bad, unchanged
    craft 4 oak planks using 1 oak logs    1 → 1              Bad, unchanged (refused: no log left)
    craft 4 stick using 2 oak planks       1 → 0              Good, progress

So a step onto a route longer than the expert's is Bad, though the goal can still be
reached through it: the label asks for a shortest route, which a tree's successes need not
follow (``rule`` below measures how far the two labels agree).

**Examples.** Every step of every path of a tree is labelled (each node once: its prompt and
label depend only on its path), trees without a success included, with the judge prompt the
method asks (:func:`roleagent.methods.agent_r.judge.judge_prompt`) and a Table 4 answer whose
reason names the kind (:data:`REASONS`). ``meta`` is the tree examples' (task, seed, node,
label, path, request) plus ``kind``, so :func:`roleagent.sft.judge.judge_competence` measures
a judge on them as well (its step accuracy is the agreement with this label).

``python -m roleagent.sft.judge_progress data RECIPE --trees DIR --out FILE`` writes the
examples of a tree folder (``roleagent.sft.judge``'s ``trees_train``); ``rule RECIPE
--examples FILE`` scores this label itself as a judge on tree-labelled examples
(``judge_valid.jsonl``): the agreement with the transition point that a judge which learned
the label perfectly would reach.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from roleagent.methods.agent_r.data import judged_steps
from roleagent.methods.agent_r.judge import judge_prompt
from roleagent.sft.data import ChatExample
from roleagent.sft.judge import competence, judge_answer

INVALID = "(invalid output)"

#: The answer's reason per kind (module docstring).
REASONS = {
    "progress": "It gives the goal something it still needs, so the goal is closer.",
    "invalid": "It is not a valid command, so the goal is no closer.",
    "unchanged": "It changed nothing, so the goal is no closer.",
    "unneeded": "What it gives is not something the goal still needs, so the goal is no closer.",
}


def progress_kinds(env, task, seed: int, actions: Sequence[str]) -> list[str]:
    """The kind of each step of ``actions`` (module docstring), replayed in ``env`` from
    ``task``'s reset with ``seed``. Raises ValueError when the environment has no expert
    distance at the start."""
    observation, _ = env.reset(task, seed)
    distance, state = env.expert_distance(), env.state_key(observation)
    if distance is None:
        raise ValueError(f"{task.id}: {type(env).__name__} gives no expert_distance for this task")
    kinds = []
    for action in actions:
        if action.startswith(INVALID):
            kinds.append("invalid")
            continue
        result = env.step(action)
        after, new_state = env.expert_distance(), env.state_key(result.observation)
        if result.info.get("success") or (after is not None and after < distance):
            kinds.append("progress")
        else:
            kinds.append("unchanged" if new_state == state else "unneeded")
        distance, state = (after if after is not None else distance), new_state
        if result.done:
            break
    return kinds


def verdict(kind: str) -> str:
    return "good" if kind == "progress" else "bad"


def task_index(env) -> dict[str, Any]:
    """Every task of ``env`` by id: a tree read back from JSON keeps its task's id, not its
    payload (the goal)."""
    out = {}
    for split in env.splits():
        try:
            out |= {t.id: t for t in env.tasks(split)}
        except ValueError:  # a split this configuration does not have
            continue
    return out


def progress_examples(tree, env, env_name: str, *, history: int, tasks: dict | None = None) -> list[ChatExample]:
    """One judge example per non-root node of ``tree`` (module docstring); ``tasks``:
    :func:`task_index` of ``env``, for a tree read back from JSON."""
    task = (tasks or {}).get(tree.task.id, tree.task)
    out: dict[int, ChatExample] = {}
    for path in tree.leaf_paths():
        steps = judged_steps(tree, path)
        kinds = progress_kinds(env, task, tree.seed, [a for a, _ in steps])
        for i, (node, kind) in enumerate(zip(path, kinds)):
            if node in out:
                continue
            prompt = judge_prompt(env_name, tree.instruction, steps[: i + 1], i, history)
            answer = judge_answer(steps[i][0], verdict(kind), REASONS[kind])
            meta = {
                "task": tree.task.id,
                "seed": tree.seed,
                "split": "train",
                "role": "judge",
                "node": node,
                "label": verdict(kind),
                "kind": kind,
                "path": path[: i + 1],
                "leaf": not tree.nodes[node].children,
                "history": history,
                "request": {"env": env_name, "task": tree.instruction, "steps": [list(s) for s in steps[: i + 1]],
                            "index": i},
            }  # fmt: skip
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer, "loss": True}]
            out[node] = ChatExample(messages, "", meta, eos=True)
    return list(out.values())


def balance(examples: Sequence[ChatExample], seed: int) -> list[ChatExample]:
    """As many Good as Bad examples (the larger label drawn at random, ``seed``), in the
    original order: a judge trained on a skewed label learns its majority."""
    by_label = {v: [i for i, e in enumerate(examples) if e.meta["label"] == v] for v in ("good", "bad")}
    n = min(len(by_label["good"]), len(by_label["bad"]))
    rng = random.Random(f"{seed}/judge_progress")
    keep = {i for ids in by_label.values() for i in (ids if len(ids) == n else rng.sample(ids, n))}
    return [e for i, e in enumerate(examples) if i in keep]


def rule_competence(env, examples: Sequence[ChatExample]):
    """:func:`roleagent.sft.judge.competence` of this label as the judge of tree-labelled
    ``examples`` (their ``meta["request"]`` replayed in ``env``)."""
    tasks = task_index(env)
    verdicts = []
    for e in examples:
        request = e.meta["request"]
        actions = [s[0] for s in request["steps"]]
        kinds = progress_kinds(env, tasks[e.meta["task"]], e.meta["seed"], actions)
        verdicts.append(verdict(kinds[request["index"]]))  # a tree's paths end with their episode
    return competence([e.meta for e in examples], verdicts)


def write_progress_data(cfg, trees_dir, out, *, balanced: bool = True) -> dict[str, int]:
    """The examples of the Agent-R trees in ``trees_dir`` (one JSON file each) in ``out``
    (``balanced``: :func:`balance` with ``cfg.seed``), replayed in a new ``cfg.env``
    environment; returns the counts: trees, steps, written, and steps per kind."""
    from roleagent.envs import make_env
    from roleagent.methods.agent_r.tree import load_trees
    from roleagent.sft.data import write_examples

    trees = load_trees(trees_dir)
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    try:
        tasks, history = task_index(env), cfg.agent_r.judge_history
        made = [e for t in trees for e in progress_examples(t, env, cfg.env.name, history=history, tasks=tasks)]
    finally:
        env.close()
    kept = balance(made, cfg.seed) if balanced else made
    write_examples(out, kept)
    counts = {"trees": len(trees), "steps": len(made), "written": len(kept)}
    return counts | {k: sum(e.meta["kind"] == k for e in made) for k in REASONS}


USAGE = """python -m roleagent.sft.judge_progress data RECIPE --trees DIR --out FILE [--balance] [--set KEY=VALUE]
python -m roleagent.sft.judge_progress rule RECIPE --examples FILE [--set KEY=VALUE]

data: judge examples of every step of the Agent-R trees in DIR (python -m roleagent.sft.judge
data's trees_train), labelled by the environment's expert distance; --balance keeps as many
Good as Bad (seeded by the recipe's seed). Train with `roleagent sft --data FILE`.
rule: this label as a judge of FILE's tree-labelled steps (judge_valid.jsonl); prints the
agent_r_judge/* metrics, the reference a judge trained on the label can reach."""


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from roleagent.config import load_config
    from roleagent.envs import make_env
    from roleagent.sft.sources import read_examples

    parser = argparse.ArgumentParser(prog="python -m roleagent.sft.judge_progress", usage=USAGE)
    parser.add_argument("command", choices=("data", "rule"))
    parser.add_argument("recipe")
    parser.add_argument("--trees", default="")
    parser.add_argument("--out", default="")
    parser.add_argument("--examples", default="")
    parser.add_argument("--balance", action="store_true")
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args(argv)
    cfg = load_config(args.recipe, args.set)
    if args.command == "rule":
        if not args.examples:
            parser.error("rule needs --examples")
        env = make_env(cfg.env.name, **cfg.env.kwargs)
        print(json.dumps(rule_competence(env, read_examples(args.examples)).metrics))
        return 0
    if not (args.trees and args.out):
        parser.error("data needs --trees and --out")
    print(json.dumps(write_progress_data(cfg, args.trees, args.out, balanced=args.balance)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
