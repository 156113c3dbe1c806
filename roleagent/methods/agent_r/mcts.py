"""Agent-R's tree search (Yuan et al., 2025, "Agent-R", arXiv 2501.11425, §3.1), as the
authors' released code runs it (``mcts_utils/mcts_raw.py`` and ``mcts_tc.py``), batched
across trees.

Each iteration descends from the root. A node without children is expanded: N candidate
turns are sampled from it (``MCTSSettings.candidates``, at ``temperature``), deduplicated
by their text, and become its children; a child is terminal when the environment is
done, on a disaster (its score went negative) or at the depth limit, and each terminal
child's score is backed up to the root at once (visits + 1, value_sum + score on every
node of its path). The descent then continues into a child chosen by UCT among the
non-terminal children (:func:`roleagent.algos.agent_r.uct`; unvisited first, ties broken
by the caller's ``random.Random``), and ends when it reaches a node whose children are all
terminal (that node becomes terminal: the authors' ``update_terminal``). There is no
separate random simulation phase: values come only from terminal nodes the descents reach.

A node's score is the environment reward summed along its path, clipped to [0, 1]; a
negative sum is a disaster: terminal, score 0 (the authors' rule). Reaching a node means
``reset(task, seed)`` and replaying its path's assistant texts
(:func:`roleagent.rollout.run_episodes` with a prefix); the replayed observations must
equal the stored ones, otherwise the tree is marked (``Tree.error``) and stops growing.

Batching (:func:`search_trees`): every round, each tree still searching names the one
node it expands next, and a single ``run_episodes`` call plays the N candidates of all of
them (each job replays its node's path and then samples one turn: step limit depth + 1).
Each node keeps the chat its turn was prompted with (``Node.chat``, the step's
``extras["chat"]``), from which supervised examples are built.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from roleagent.algos.agent_r import uct
from roleagent.methods.agent_r.tree import Candidate, Node, Tree, save_trees, tree_filename
from roleagent.rollout import POLICY, RolloutSettings, RolloutStats, run_episodes
from roleagent.types import Task, Trajectory

__all__ = [  # the tree types are re-exported: callers need one import
    "Candidate",
    "MCTSSettings",
    "Node",
    "ReplayMismatch",
    "Tree",
    "add_children",
    "backup",
    "next_expansion",
    "save_trees",
    "search",
    "search_trees",
    "select_child",
    "tree_filename",
]


@dataclass
class MCTSSettings:
    iterations: int = 8  # descents from the root per tree (the authors' ITERA)
    max_depth: int = 8  # a node at this depth is terminal (also capped by rollout max_steps)
    candidates: int = 4  # turns sampled per expansion, deduplicated by text (the authors' N_GEN)
    c: float = 0.25  # UCT exploration coefficient c_uct (paper Eq. 5)
    temperature: float = 1.0  # sampling temperature of the expansions (paper: 1)

    def check(self) -> None:
        """Raise ValueError on a setting the search cannot run with."""
        for name in ("iterations", "max_depth", "candidates"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"mcts.{name} must be an integer >= 1, got {value!r}")
        for name in ("c", "temperature"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"mcts.{name} must be a finite number >= 0, got {value!r}")


class ReplayMismatch(RuntimeError):
    """Replaying a node's path did not reach the stored states."""


# ------------------------------------------------------------------ tree logic --------


def select_child(tree: Tree, node: Node, c: float, rng: random.Random) -> Node | None:
    """The non-terminal child with the highest UCT (unvisited: +inf), ties by ``rng``;
    None, and ``node`` becomes terminal, when every child is terminal."""
    best: list[Node] = []
    best_score = -math.inf
    for i in node.children:
        child = tree.nodes[i]
        if child.terminal:
            continue
        score = uct(child.value_sum, child.visits, node.visits, c)
        if score > best_score:
            best, best_score = [child], score
        elif score == best_score:
            best.append(child)
    if not best:
        node.terminal = True
        return None
    return rng.choice(best)


def next_expansion(tree: Tree, mcts: MCTSSettings, rng: random.Random) -> Node | None:
    """The node this tree expands next, or None when its search is over (iterations
    spent, root terminal, or an error): the current descent goes on, through children
    with children, to a childless one; a descent that ends starts the next iteration."""
    while tree.error is None:
        if tree.cursor is None:
            if tree.iterations >= mcts.iterations or tree.root.terminal:
                return None
            tree.iterations += 1
            tree.cursor = 0
        node: Node | None = tree.nodes[tree.cursor]
        while node is not None and node.children:
            node = select_child(tree, node, mcts.c, rng)
        if node is None or node.terminal:
            tree.cursor = None
            continue
        tree.cursor = node.index
        return node
    return None


def backup(tree: Tree, node: Node, value: float) -> None:
    """Add one visit and ``value`` to ``node`` and its ancestors; an ancestor whose
    children are all terminal becomes terminal (and one with a live child is not)."""
    current: Node | None = node
    while current is not None:
        current.visits += 1
        current.value_sum += value
        if current.children:
            current.terminal = all(tree.nodes[i].terminal for i in current.children)
        current = None if current.parent is None else tree.nodes[current.parent]


def add_children(tree: Tree, parent: Node, candidates: Sequence[Candidate], depth_limit: int) -> list[Node]:
    """Make ``parent``'s children from its candidates (first of each text kept) and back
    up every terminal child's score."""
    if parent.children or not candidates:
        raise ValueError(f"node {parent.index} is already expanded or got no candidates")
    seen: set[str] = set()
    for cand in candidates:
        if cand.text in seen:
            continue
        seen.add(cand.text)
        total = parent.score + cand.reward
        disaster = total < 0
        depth = parent.depth + 1
        node = Node(
            index=len(tree.nodes),
            parent=parent.index,
            depth=depth,
            text=cand.text,
            action=cand.action,
            valid=cand.valid,
            observation=cand.observation,
            admissible=cand.admissible,
            reward=cand.reward,
            score=0.0 if disaster else min(1.0, total),
            done=cand.done,
            success=cand.success,
            terminal=cand.done or disaster or depth >= depth_limit,
            disaster=disaster,
            chat=cand.chat,
        )
        tree.nodes.append(node)
        parent.children.append(node.index)
    children = [tree.nodes[i] for i in parent.children]
    for child in children:
        if child.terminal:
            backup(tree, child, child.score)
    return children


#: An expander: for each (tree, node) of a round, that node's candidates or an error message.
Expander = Callable[[list[tuple[Tree, Node]]], list[list[Candidate] | str]]


def search(
    trees: Sequence[Tree], expand: Expander, mcts: MCTSSettings, rng: random.Random, *, depth_limit=None, progress=None
) -> int:
    """Grow all trees together, one ``expand`` call per round; returns the rounds played."""
    mcts.check()
    limit = mcts.max_depth if depth_limit is None else min(mcts.max_depth, depth_limit)
    rounds = 0
    while True:
        frontier = [(tree, node) for tree in trees if (node := next_expansion(tree, mcts, rng)) is not None]
        if not frontier:
            return rounds
        for (tree, node), result in zip(frontier, expand(frontier), strict=True):
            if isinstance(result, str):
                tree.error = result
            else:
                add_children(tree, node, result, limit)
        rounds += 1
        if progress is not None:
            progress.update(1)


# ------------------------------------------------------------ with an engine --------


def search_trees(
    engine, pool, jobs: Sequence[tuple[Task, int]], settings: RolloutSettings, mcts: MCTSSettings, rng, progress=None
) -> tuple[list[Tree], RolloutStats]:
    """One tree per distinct ``(task, seed)`` of ``jobs`` (a group of G gives one tree),
    grown together; each round's expansions are one ``run_episodes`` call."""
    mcts.check()
    if settings.source is not POLICY:
        raise ValueError("the tree search samples from the policy: the rollout source must be POLICY")
    trees = _roots(pool, list(dict.fromkeys((task, seed) for task, seed in jobs)))
    stats = RolloutStats()
    expand_settings = dataclasses.replace(settings, temperature=mcts.temperature, record_chat=True)
    expand = functools.partial(_expand, engine, pool, expand_settings, mcts.candidates, stats)
    search(trees, expand, mcts, rng, depth_limit=settings.max_steps, progress=progress)
    return trees, stats


def _roots(pool, jobs: list[tuple[Task, int]]) -> list[Tree]:
    trees = []
    for start in range(0, len(jobs), pool.size):
        wave = jobs[start : start + pool.size]
        replies = pool.reset([(slot, task, seed) for slot, (task, seed) in enumerate(wave)])
        for (task, seed), reply in zip(wave, replies):
            root = Node(0, None, 0, observation=reply.observation, admissible=reply.admissible)
            trees.append(Tree(task, seed, (reply.info or {}).get("instruction", ""), [root]))
    return trees


def _expand(engine, pool, settings, n: int, stats: RolloutStats, frontier: list[tuple[Tree, Node]]):
    jobs = [(tree.task, tree.seed, tree.path_texts(node.index)) for tree, node in frontier for _ in range(n)]
    limits = [node.depth + 1 for _, node in frontier for _ in range(n)]
    trajectories, round_stats = run_episodes(engine=engine, pool=pool, jobs=jobs, settings=settings, max_steps=limits)
    stats.add(round_stats)
    out: list[list[Candidate] | str] = []
    for k, (tree, node) in enumerate(frontier):
        try:
            out.append([_candidate(tree, node, t) for t in trajectories[k * n : (k + 1) * n]])
        except ReplayMismatch as error:
            out.append(str(error))
    return out


def _candidate(tree: Tree, node: Node, trajectory: Trajectory) -> Candidate:
    """The sampled last turn of an expansion episode, after checking that its replayed
    turns reached the tree's stored observations."""
    where = f"tree {tree.task.id} seed {tree.seed}, node {node.index}"
    steps = trajectory.steps
    if trajectory.crashed or len(steps) != node.depth + 1:
        raise ReplayMismatch(f"{where}: the replay ended after {len(steps)} of {node.depth + 1} turns")
    expected = [tree.root.observation] + [tree.nodes[i].observation for i in tree.path(node.index)]
    for turn, (step, observation) in enumerate(zip(steps, expected)):
        if step.observation != observation:
            raise ReplayMismatch(
                f"{where}: replay turn {turn} saw {step.observation!r} but the tree holds {observation!r}"
                " (is the environment deterministic for a task and seed?)"
            )
    last = steps[-1]
    admissible = last.info.get("admissible_actions", node.admissible) if last.valid else node.admissible
    return Candidate(
        text=last.action_text,
        action=last.action,
        valid=last.valid,
        observation=trajectory.final_observation,
        admissible=admissible,
        reward=last.env_reward,
        done=last.done,
        success=bool(last.info.get("success")),
        chat=last.extras.get("chat"),
    )
