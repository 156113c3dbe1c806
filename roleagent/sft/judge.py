"""Agent-R judge warm start (Agent-R, Yuan et al., 2025, arXiv 2501.11425, §3.1 and
Table 4): supervised examples that teach the policy to find the first bad step of a bad
MCTS path, from the search tree itself, and the held-out measure of that competence.

**Transition point.** A tree's nodes are reached by replaying their path's actions in an
environment that is deterministic for a task and seed (``mcts`` checks it), so a node's
state is fixed by the actions the judge is shown for its path: its *key*, per step the
parsed action, or ``(invalid output) <text>`` for an output without one
(:func:`roleagent.methods.agent_r.data.judged_steps`). A leaf is *successful* when the
environment reported success (``Node.success``). A node is *alive* when its key is a
prefix of a successful leaf's key: some continuation the tree found still solves the task
from its state. On a failed leaf path b_1..b_T (root excluded) of a tree with a successful
leaf, the transition point t* is the first step whose node is not alive: the first step
after which no descendant succeeds, equivalently where the bad path leaves every
successful path's actions. Steps before t* are Good, t* is Bad, later steps are not
labelled (their state was already lost). A failed path whose every node is alive (its
actions a prefix of a success's, possible only if the two runs diverged) has none, and a
tree without a success gives no example: there the tree does not show where it went wrong.

Worked example (TextCraft, goal "craft 4 oak planks")::

    root ─ n1 get 1 oak log ─┬─ n2 craft 4 oak planks using 1 oak log   (success)
                             └─ n3 get 1 birch log ─ n4 inventory         (failed, depth limit)
         ─ n5 get 1 stick ───── n6 look                                   (failed)

Successful key: (get 1 oak log, craft 4 oak planks using 1 oak log). Path n1 n3 n4: n1 is
alive (Good), n3's key (get 1 oak log, get 1 birch log) is no successful prefix: t* = 1
(n3, Bad), n4 unlabelled. Path n5 n6: t* = 0 (n5, Bad). A sibling of n2 with another
thought but the same action would be alive too: its state is n2's.

**Examples.** For each node that is Good or Bad on some failed path (each node once: its
prompt depends only on its path), the prompt is the judge prompt the method asks
(:func:`roleagent.methods.agent_r.judge.judge_prompt` with ``agent_r.judge_history``, one
user message, no response prefix: ``judge_steps``' encoding, ``tests/test_sft_judge.py``)
and the target is an answer in Table 4's format, reasons first, then the verdict
(:func:`judge_answer`), ending with the end-of-turn token (``eos``: the judge's generation
has no stop string). Only the answer carries the loss (the existing SFT objective).

**Competence** (:func:`competence`, on trees of held-out goals). Each labelled step is
judged as the method judges (``judge_steps``: greedy, ``agent_r.judge_max_new_tokens``):

- ``agent_r_judge/parsed``: share of answers with a verdict (goal ≥ 0.9);
- ``agent_r_judge/agreement``: per transition node, the judge's t' on its path (the first
  Bad verdict among steps 0..t*; none: the path's last step, the method's direct revision)
  equals t* (goal ≥ 0.6). Stricter than the method, which judges only the steps after the
  prefix a bad path shares with its paired good path (all ≤ t*);
- ``agent_r_judge/always_bad_agreement`` and ``direct_revision_agreement``: the agreement
  of a judge answering Bad to every step (share of transitions at step 0) and of one that
  never gives a verdict (direct revision: share of transitions at their path's last step),
  the references agreement must beat;
- ``agent_r_judge/step_accuracy``, ``truncated``, ``verdict_bad``, ``transitions``, ``steps``.

Example: transitions n3 (chain n1 n3) and n5 (chain n5), verdicts n1 Good, n3 Bad, n5
None → parsed 2/3, agreement 1/2 (n5 gets no Bad: t' is its path's last step n6, not n5),
always_bad_agreement 1/2, direct_revision_agreement 0 (neither ends its path), step_accuracy 2/3.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from roleagent.methods.agent_r.data import judged_steps
from roleagent.methods.agent_r.judge import judge_prompt, judge_steps
from roleagent.sft.data import ChatExample

REASONS = {
    "good": "A successful path continues from the state it reaches, so it helps to solve the task.",
    "bad": "No successful path continues from the state it reaches: here the agent goes wrong.",
}


def judge_answer(action: str, verdict: str, reason: str = "") -> str:
    """The target answer for a step, Table 4's format: reasons (default: the tree's,
    :data:`REASONS`), then the verdict line.

    >>> judge_answer("get 1 stick", "bad").splitlines()[-1]
    'Therefore, Judgment: Bad'
    """
    return f'The action "{action}" was taken. {reason or REASONS[verdict]}\nTherefore, Judgment: {verdict.capitalize()}'


def successful_keys(tree) -> set[tuple[str, ...]]:
    """Every prefix of every successful leaf's key (module docstring)."""
    keys: set[tuple[str, ...]] = set()
    for path in tree.leaf_paths():
        if tree.nodes[path[-1]].success:
            actions = tuple(a for a, _ in judged_steps(tree, path))
            keys.update(actions[: i + 1] for i in range(len(actions)))
    return keys


def transition_index(tree, path: Sequence[int], keys: set[tuple[str, ...]] | None = None) -> int | None:
    """t* of a leaf ``path`` (root excluded): the first step whose node is not alive, or
    None when the tree has no success or every node of the path is alive."""
    keys = successful_keys(tree) if keys is None else keys
    if not keys:
        return None
    actions = tuple(a for a, _ in judged_steps(tree, path))
    return next((i for i in range(len(actions)) if actions[: i + 1] not in keys), None)


@dataclass
class Label:
    """One labelled step: the node, its path up to it, and its verdict."""

    node: int
    path: list[int]
    verdict: str
    leaf: bool = False  # the node ends its path (no children): t* is the path's last step


def labels(tree) -> list[Label]:
    """The labelled steps of a tree's failed leaf paths, each node once, in path order."""
    keys = successful_keys(tree)
    out: dict[int, Label] = {}
    for path in tree.leaf_paths():
        if tree.nodes[path[-1]].success:
            continue
        t = transition_index(tree, path, keys)
        if t is None:
            continue
        for i, node in enumerate(path[: t + 1]):
            verdict = "bad" if i == t else "good"
            out.setdefault(node, Label(node, path[: i + 1], verdict, not tree.nodes[node].children))
    return list(out.values())


def judge_examples(tree, env: str, *, history: int, split: str = "train") -> list[ChatExample]:
    """One chat example per labelled step (module docstring); ``meta`` holds the judge
    request (``request``: env, task, steps, index), the label, the path's nodes up to the
    step (``path``) and whether the step ends its path (``leaf``), so :func:`judge_competence` needs nothing else."""
    out = []
    for label in labels(tree):
        steps = judged_steps(tree, label.path)
        index = len(steps) - 1
        prompt = judge_prompt(env, tree.instruction, steps, index, history)
        answer = {"role": "assistant", "content": judge_answer(steps[index][0], label.verdict), "loss": True}
        meta = {
            "task": tree.task.id,
            "seed": tree.seed,
            "split": split,
            "role": "judge",
            "node": label.node,
            "label": label.verdict,
            "path": label.path,
            "leaf": label.leaf,
            "history": history,
            "request": {"env": env, "task": tree.instruction, "steps": [list(s) for s in steps], "index": index},
        }
        out.append(ChatExample([{"role": "user", "content": prompt}, answer], "", meta, eos=True))
    return out


# ------------------------------------------------------------------ competence -------


@dataclass
class Competence:
    """:func:`competence`'s result: ``metrics`` (``agent_r_judge/*``, ``docs/metrics.md``)
    and one row per judged step."""

    metrics: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)


def competence(
    metas: Sequence[dict[str, Any]], verdicts: Sequence[str | None], truncated: Sequence[bool] | None = None
) -> Competence:
    """The metrics of the module docstring: ``metas`` are the judged examples' ``meta``
    (task, seed, node, label, path, leaf), ``verdicts`` the parsed answers. A transition's
    steps before it are found by node among ``metas`` (each labelled Good there)."""
    if len(metas) != len(verdicts):
        raise ValueError(f"{len(metas)} judged steps but {len(verdicts)} verdicts")
    cut = list(truncated) if truncated is not None else [False] * len(metas)
    said = {(m["task"], m["seed"], m["node"]): v for m, v in zip(metas, verdicts)}
    agree, first, last = [], [], []
    for m in (m for m in metas if m["label"] == "bad"):
        judged = [said[(m["task"], m["seed"], node)] for node in m["path"]]
        bad = next((i for i, v in enumerate(judged) if v == "bad"), None)
        # no Bad verdict up to t*: the method's t' is a later Bad step or the path's last step
        agree.append(bad == len(judged) - 1 if bad is not None else bool(m["leaf"]))
        first.append(len(judged) == 1)
        last.append(bool(m["leaf"]))
    n = len(metas)

    def share(values) -> float:
        values = list(values)
        return sum(values) / len(values) if values else float("nan")

    metrics = {
        "agent_r_judge/parsed": share(v is not None for v in verdicts),
        "agent_r_judge/agreement": share(agree),
        "agent_r_judge/always_bad_agreement": share(first),
        "agent_r_judge/direct_revision_agreement": share(last),
        "agent_r_judge/step_accuracy": share(v == m["label"] for m, v in zip(metas, verdicts)),
        "agent_r_judge/verdict_bad": share(v == "bad" for v in verdicts),
        "agent_r_judge/truncated": share(cut),
        "agent_r_judge/transitions": float(len(agree)),
        "agent_r_judge/steps": float(n),
    }
    rows = [{"task": m["task"], "node": m["node"], "label": m["label"], "verdict": v} for m, v in zip(metas, verdicts)]
    return Competence(metrics, rows)


def judge_competence(engine, examples: Sequence[ChatExample], *, history: int, max_new_tokens: int) -> Competence:
    """:func:`competence` of ``engine``'s judgements of held-out judge ``examples``, asked
    through the method's own ``judge_steps`` (their ``meta["request"]``), 16 per batch."""
    metas = [e.meta for e in examples]
    judgements = []
    for start in range(0, len(metas), 16):
        requests = [
            (r["env"], r["task"], [tuple(s) for s in r["steps"]], r["index"])
            for r in (m["request"] for m in metas[start : start + 16])
        ]
        judgements += judge_steps(engine, requests, history=history, max_new_tokens=max_new_tokens)
    result = competence(metas, [j.verdict for j in judgements], [j.truncated for j in judgements])
    for row, judgement in zip(result.rows, judgements):
        row["answer"] = judgement.answer
    return result


def summary(label: str, result: Competence) -> str:
    """One line for the run's log."""
    m = result.metrics
    return (
        f"Agent-R judge ({label}): parsed {100 * m['agent_r_judge/parsed']:.1f}%, agreement with the tree's "
        f"transition point {100 * m['agent_r_judge/agreement']:.1f}% (always Bad: "
        f"{100 * m['agent_r_judge/always_bad_agreement']:.1f}%, direct revision: "
        f"{100 * m['agent_r_judge/direct_revision_agreement']:.1f}%), step accuracy "
        f"{100 * m['agent_r_judge/step_accuracy']:.1f}%, truncated {100 * m['agent_r_judge/truncated']:.1f}% over "
        f"{m['agent_r_judge/transitions']:.0f} held-out transitions ({m['agent_r_judge/steps']:.0f} steps)"
    )


# ------------------------------------------------------------------ trees and files --


def judge_goals(train_tasks, exclude: set[str], *, seed: int, skip: int, tasks: int, valid: int,
                valid_skip: int = 0, valid_from_sft: bool = False):  # fmt: skip
    """Training goals for the judge's trees and held-out goals for its measurement, in
    ``roleagent.sft.expert.expert_tasks``' seeded order (never a panel goal): the first
    ``tasks``, and ``valid`` after the first ``max(tasks, skip) + valid_skip`` (``skip``: the
    expert's SFT goals, so a held-out goal was never SFT data; ``valid_skip``: held-out goals
    an earlier measurement used).

    ``valid_from_sft``: the held-out goals are SFT goals too, the ``valid`` after the first
    ``tasks + valid_skip`` (all within the ``skip``): a small policy solves only goals it was
    fine-tuned on, so only there do its trees find the successes a transition point needs.
    The judge never sees a held-out tree, but the model it shares with the policy was
    fine-tuned on the expert's path for these goals, which may favour its verdicts there
    (``tests/test_sft_judge.py``)."""
    from roleagent.sft.expert import expert_tasks

    start = (tasks if valid_from_sft else max(tasks, skip)) + valid_skip
    if valid_from_sft and start + valid > skip:
        raise ValueError(f"held-out goals from the SFT goals: {tasks} training + {valid_skip} skipped + {valid} "
                         f"held-out goals need that many SFT goals (sft.expert_tasks), not {skip}")  # fmt: skip
    room = sum(t.id not in exclude for t in train_tasks)
    order = expert_tasks(train_tasks, min(start + valid, room), seed=seed, exclude=exclude)
    return order[:tasks], order[start : start + valid]


def grow_trees(cfg, engine, pool, goals, settings, progress=None) -> list:
    """One Agent-R tree per goal (environment seed ``cfg.seed``), searched as the method
    searches (``agent_r.*`` MCTS settings) with ``engine``'s policy; ``progress`` (a tqdm
    bar or None) counts the search's rounds."""
    import random

    from roleagent.methods.agent_r.mcts import MCTSSettings, search_trees

    a = cfg.agent_r
    mcts = MCTSSettings(a.mcts_iterations, a.max_depth, a.candidates, a.c_uct, a.temperature)
    rng = random.Random(f"{cfg.seed}/agent_r_judge")
    jobs = [(goal, cfg.seed) for goal in goals]
    return search_trees(engine, pool, jobs, settings, mcts, rng, progress=progress)[0]


def write_judge_data(
    cfg,
    engine,
    pool,
    train_tasks,
    exclude,
    settings,
    out,
    *,
    tasks: int,
    valid: int,
    valid_skip: int = 0,
    progress=None,
) -> dict:
    """Trees of ``tasks`` training and ``valid`` held-out goals (:func:`judge_goals`) in
    ``out/trees_{train,valid}``, their examples in ``out/judge.jsonl`` and
    ``out/judge_valid.jsonl``; returns the counts (also ``out/judge_counts.json``).
    ``progress(name)``, when given, makes the progress bar of a tree set's search. A tree
    set whose folder and examples file exist is read back, not grown again (a rerun after
    a stop continues with the next set)."""
    import json
    from pathlib import Path

    from roleagent.methods.agent_r.mcts import save_trees
    from roleagent.methods.agent_r.tree import load_trees
    from roleagent.sft.data import write_examples

    out = Path(out)
    skip = cfg.sft.expert_tasks if cfg.sft.enabled else 0
    train, held_out = judge_goals(
        train_tasks, exclude, seed=cfg.seed, skip=skip, tasks=tasks, valid=valid, valid_skip=valid_skip,
        valid_from_sft=cfg.sft.judge_eval_goals == "sft",
    )  # fmt: skip
    counts: dict[str, int] = {}
    for name, goals in (("train", train), ("valid", held_out)):
        folder, file = out / f"trees_{name}", out / ("judge.jsonl" if name == "train" else "judge_valid.jsonl")
        if file.exists() and folder.is_dir():  # this set's trees are grown: a rerun reads them
            trees = load_trees(folder)
        else:
            trees = grow_trees(cfg, engine, pool, goals, settings, progress and progress(name))
            save_trees(trees, folder)
        made = [e for t in trees for e in judge_examples(t, cfg.env.name, history=cfg.agent_r.judge_history)]
        write_examples(file, made)
        successes = sum(any(tree.nodes[p[-1]].success for p in tree.leaf_paths()) for tree in trees)
        counts |= {f"{name}_trees": len(trees), f"{name}_trees_with_success": successes}
        counts |= {f"{name}_{v}": sum(e.meta["label"] == v for e in made) for v in ("good", "bad")}
    (out / "judge_counts.json").write_text(json.dumps(counts))
    return counts


# ------------------------------------------------------------------ command line -----

USAGE = """python -m roleagent.sft.judge data RECIPE --out DIR [--tasks N] [--valid K] [--valid-skip S] [--set KEY=VALUE]
python -m roleagent.sft.judge eval RECIPE --examples FILE [--limit N] [--rows FILE] [--set KEY=VALUE]

data: the recipe's policy (--set model.init_from=SFT/final: one that solves some goals)
grows an Agent-R tree (agent_r.* search settings) on N training goals and K held-out goals
(never a panel goal; never one of the sft.expert_tasks SFT goals, or with
sft.judge_eval_goals=sft the SFT goals after the N); writes DIR/trees_train,
DIR/trees_valid, DIR/judge.jsonl (judge examples of the N; train with `roleagent sft
--data`) and DIR/judge_valid.jsonl (of the K).
eval: the recipe's policy judges the held-out steps of FILE as Agent-R asks its judge
(agent_r.judge_history, agent_r.judge_max_new_tokens); prints the competence as JSON."""


def main(argv: Sequence[str] | None = None) -> int:
    import json

    from roleagent.config import load_config
    from roleagent.sft.role_cli import load_engine, role_parser
    from roleagent.trainer.checks import prepare

    parser = role_parser("python -m roleagent.sft.judge", USAGE)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--valid", type=int, default=8)
    parser.add_argument("--valid-skip", type=int, default=0, help="data: skip the first S held-out goals")
    args = parser.parse_args(argv)
    cfg = prepare(load_config(args.recipe, args.set))
    _, engine = load_engine(cfg)
    if args.command == "data":
        print(json.dumps(_data(cfg, engine, args.out, tasks=args.tasks, valid=args.valid, valid_skip=args.valid_skip)))
        return 0
    from roleagent.sft.sources import read_examples

    examples = read_examples(args.examples)[: args.limit or None]
    a = cfg.agent_r
    result = judge_competence(engine, examples, history=a.judge_history, max_new_tokens=a.judge_max_new_tokens)
    if args.rows:
        with open(args.rows, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in result.rows)
    print(summary(cfg.model.init_from or cfg.model.name, result))
    print(json.dumps(result.metrics))
    return 0


def _data(cfg, engine, out, *, tasks: int, valid: int, valid_skip: int = 0) -> dict:
    from roleagent.envs.workers import make_pool
    from roleagent.evaluation import panel_ids
    from roleagent.rollout import rollout_settings

    e = cfg.env
    # one slot per expansion of a round (goals × candidates, at most 32), so a round is one
    # or two batched waves, not one wave per 4 expansions
    slots = min(32, max(tasks, valid, 1) * cfg.agent_r.candidates)
    with make_pool(e, slots=slots) as pool:
        meta = pool.meta
        exclude = panel_ids(cfg, meta)
        settings = rollout_settings(cfg, cfg.rollout.max_steps or meta.max_steps)
        train = meta.tasks(e.train_split)
        from tqdm import tqdm

        def bar(name: str):
            return tqdm(desc=f"Agent-R trees of the {name} goals", unit="round")

        return write_judge_data(cfg, engine, pool, train, exclude, settings, out, tasks=tasks, valid=valid,
                                valid_skip=valid_skip, progress=bar)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
