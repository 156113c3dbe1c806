"""Agent-R judge warm start (``roleagent.sft.judge``): the transition point derived from a
hand-built tree (the module docstring's worked example), the examples' prompt (the one the
method asks, token for token), answer and loss mask, the competence metric on hand cases,
and the recipe switch in a tiny warm-started Agent-R run."""

from __future__ import annotations

import json

import pytest
import torch

from roleagent.algos.agent_r import parse_judgement
from roleagent.config import load_config
from roleagent.engine.base import Generation
from roleagent.engine.hf import HFEngine
from roleagent.fields import ConfigError
from roleagent.methods.agent_r import data
from roleagent.methods.agent_r.tree import Node, Tree
from roleagent.models.loading import load_policy
from roleagent.sft.data import check_example, encode_example
from roleagent.sft.expert import expert_tasks
from roleagent.sft.judge import (
    competence,
    judge_answer,
    judge_competence,
    judge_examples,
    judge_goals,
    labels,
    transition_index,
)
from roleagent.types import Task
from tests.run_helpers import TINY, run
from tests.test_agent_r_train import AGENT_R
from tests.test_metrics_doc import run_keys, undocumented

GOAL = "Crafting commands: ...\nGoal: craft 4 oak planks."


def worked_tree() -> Tree:
    """The module docstring's tree, plus n7: n2's sibling with another thought and the same
    action (alive), and n8: an output without an action under n5 (a failed leaf)."""
    root = Node(0, None, 0, observation="Crafting commands ...")
    tree = Tree(Task("textcraft/oak", "textcraft"), 0, GOAL, [root])

    def add(parent, action, observation, *, success=False, thought="t", valid=True):
        depth = tree.nodes[parent].depth + 1
        text = f"<think>{thought}</think>" + (f"<action>{action}</action>" if valid else "")
        node = Node(len(tree.nodes), parent, depth, text, action if valid else None, valid, observation)
        node.success = node.done = success
        tree.nodes.append(node)
        tree.nodes[parent].children.append(node.index)
        return node.index

    n1 = add(0, "get 1 oak log", "Got 1 oak log")
    add(n1, "craft 4 oak planks using 1 oak log", "Crafted 4 minecraft:oak_planks", success=True)
    n3 = add(n1, "get 1 birch log", "Got 1 birch log")
    add(n3, "inventory", "Inventory: [oak log] (1) [birch log] (1)")
    n5 = add(0, "get 1 stick", "Could not find stick")
    add(n5, "look", "Nothing happens.")
    n7 = add(n1, "craft 4 oak planks using 1 oak log", "Crafted 4 minecraft:oak_planks", thought="u")
    add(n7, "inventory", "Inventory: [oak planks] (4)")  # n8: a failed leaf below an alive node
    add(n5, "", "Invalid action format.", valid=False)  # n9
    for node in tree.nodes[1:]:
        node.terminal = not node.children
        node.visits, node.value_sum = 1, float(node.success)
    return tree


def test_transition_point_of_the_worked_example():
    tree = worked_tree()
    paths = {tuple(p) for p in tree.leaf_paths()}
    assert paths == {(1, 2), (1, 3, 4), (1, 7, 8), (5, 6), (5, 9)}
    assert transition_index(tree, [1, 3, 4]) == 1  # n3 leaves the successful actions
    assert transition_index(tree, [5, 6]) == 0 and transition_index(tree, [5, 9]) == 0
    # n7 has another thought but n2's action: alive; inventory after it is the first loss
    assert transition_index(tree, [1, 7, 8]) == 2
    assert transition_index(tree, [1, 2]) is None  # the successful path itself
    got = {label.node: (label.verdict, label.path, label.leaf) for label in labels(tree)}
    assert got == {
        1: ("good", [1], False),
        3: ("bad", [1, 3], False),
        5: ("bad", [5], False),
        7: ("good", [1, 7], False),
        8: ("bad", [1, 7, 8], True),
    }
    # without a success in the tree nothing is labelled
    tree.nodes[2].success = False
    assert labels(tree) == [] and transition_index(tree, [5, 6]) is None


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    return HFEngine(load_policy("tiny", device="cpu", lora_rank=0, seed=0), max_prompt_tokens=4096)


class Recording:
    """The tiny engine's chat encoding; generation records the prompts and answers
    ``answers`` (one per prompt, in order)."""

    def __init__(self, engine, answers=()):
        self.inner, self.answers, self.prompts = engine, list(answers), []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, sampling):
        assert sampling.temperature == 0.0 and not sampling.stop
        self.prompts += prompts
        texts = [self.answers.pop(0) if self.answers else "Judgment: Good" for _ in prompts]
        return [Generation(p, [1], [0.0], text, text.endswith("...")) for p, text in zip(prompts, texts)]


def test_examples_are_the_method_judge_prompts_trained_on_the_answer_only(engine):
    tree = worked_tree()
    examples = judge_examples(tree, "textcraft", history=1)
    assert [(e.meta["node"], e.meta["label"]) for e in examples] == [
        (1, "good"), (3, "bad"), (7, "good"), (8, "bad"), (5, "bad")
    ]  # fmt: skip
    # the method judges each pair's bad steps after the shared prefix: ask it on every failed path
    pairs = [data.Pair(tree, [1, 2], bad, 0) for bad in ([1, 3, 4], [1, 7, 8], [5, 6])]
    recorder = Recording(engine)
    data.judge_pairs(pairs, recorder, "textcraft", history=1, max_new_tokens=8)
    asked = dict(zip([n for p in pairs for n in p.bad], recorder.prompts))
    eos = engine.tokenizer.eos_token_id
    for example in examples:
        check_example(example.to_json())  # a valid JSONL line of roleagent.sft.data
        encoded = encode_example(engine, example)
        assert encoded.prompts[-1] == asked[example.meta["node"]]  # token for token
        answer = example.messages[-1]["content"]
        assert parse_judgement(answer) == example.meta["label"]
        target = engine.tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos]
        n = len(target)
        assert encoded.ids == asked[example.meta["node"]] + target
        assert encoded.loss_mask == [0] * (len(encoded.ids) - n) + [1] * n
    assert examples[3].meta["request"]["steps"][-1][0] == "inventory"
    assert '"inventory"' in examples[3].messages[-1]["content"]


def test_answer_format_is_table_4s():
    good, bad = judge_answer("get 1 oak log", "good"), judge_answer("get 1 stick", "bad")
    assert good.endswith("\nTherefore, Judgment: Good") and bad.endswith("\nTherefore, Judgment: Bad")
    assert (parse_judgement(good), parse_judgement(bad)) == ("good", "bad")


def _meta(node, label, path, leaf=False):
    return {"task": "t", "seed": 0, "node": node, "label": label, "path": path, "leaf": leaf}


def test_competence_on_the_docstring_example():
    """Transitions n3 (path n1 n3) and n5; verdicts n1 Good, n3 Bad, n5 None."""
    metas = [_meta(1, "good", [1]), _meta(3, "bad", [1, 3]), _meta(5, "bad", [5])]
    m = competence(metas, ["good", "bad", None], [False, False, True]).metrics
    assert m["agent_r_judge/parsed"] == pytest.approx(2 / 3)
    assert m["agent_r_judge/agreement"] == 0.5  # n5 gets no Bad and is no leaf
    assert m["agent_r_judge/always_bad_agreement"] == 0.5  # n5 is at step 0
    assert m["agent_r_judge/direct_revision_agreement"] == 0.0  # n3 and n5 both have children
    assert m["agent_r_judge/step_accuracy"] == pytest.approx(2 / 3)
    assert m["agent_r_judge/truncated"] == pytest.approx(1 / 3)
    assert (m["agent_r_judge/transitions"], m["agent_r_judge/steps"]) == (2, 3)


def test_competence_agreement_cases():
    metas = [_meta(1, "good", [1]), _meta(3, "bad", [1, 3]), _meta(8, "bad", [1, 8], leaf=True)]
    # an early Bad is a wrong transition point for both paths through n1
    assert competence(metas, ["bad", "bad", "bad"]).metrics["agent_r_judge/agreement"] == 0.0
    # no Bad verdict: the method falls back to the path's last step, right only for a leaf
    assert competence(metas, ["good", "good", "uncertain"]).metrics["agent_r_judge/agreement"] == 0.5
    assert competence(metas, ["good", "bad", "bad"]).metrics["agent_r_judge/agreement"] == 1.0
    assert competence(metas, [None] * 3).metrics["agent_r_judge/direct_revision_agreement"] == 0.5
    with pytest.raises(ValueError, match="verdicts"):
        competence(metas, ["good"])


def test_judge_competence_asks_the_method_judge(engine):
    examples = judge_examples(worked_tree(), "textcraft", history=8)
    answers = ["fine.\nJudgment: Good", "Judgment: Bad, because birch", "Judgment: Good", "no verdict", "cut ..."]
    recorder = Recording(engine, answers)
    result = judge_competence(recorder, examples, history=8, max_new_tokens=16)
    assert recorder.prompts == [encode_example(engine, e).prompts[-1] for e in examples]
    m = result.metrics
    assert m["agent_r_judge/parsed"] == 0.6 and m["agent_r_judge/truncated"] == 0.2
    # n3 right; n8 right by the fallback (n7 Good, n8 unparsed, n8 a leaf); n5 (unparsed, not a leaf) wrong
    assert m["agent_r_judge/agreement"] == pytest.approx(2 / 3)
    assert [row["verdict"] for row in result.rows] == ["good", "bad", "good", None, None]


def test_the_switch_needs_agent_r():
    sft = ["sft.enabled=true", "sft.expert_tasks=3", "sft.judge=true"]
    with pytest.raises(ConfigError, match="sft.judge needs agent_r.enabled"):
        load_config(None, TINY + sft)
    with pytest.raises(ConfigError, match="sft.judge_eval_tasks"):
        load_config(None, TINY + AGENT_R + sft + ["sft.judge_eval_tasks=-1"])
    from_sft = ["sft.judge_eval_goals=sft", "sft.judge_tasks=2", "sft.judge_eval_tasks=2"]
    with pytest.raises(ConfigError, match="from the 3 SFT goals"):
        load_config(None, TINY + AGENT_R + sft + from_sft)
    enough = load_config(None, TINY + AGENT_R + sft + from_sft[:2] + ["sft.judge_eval_tasks=1"])
    assert enough.sft.judge_eval_goals == "sft"
    with pytest.raises(ConfigError, match="sft.judge_eval_goals"):
        load_config(None, TINY + AGENT_R + sft + ["sft.judge_eval_goals=old"])


def test_warm_start_trains_and_measures_the_judge(tmp_path):
    sft = ["sft.enabled=true", "sft.expert_tasks=2", "sft.epochs=1", "sft.judge=true"]
    sft += ["sft.judge_tasks=2", "sft.judge_eval_tasks=2", "eval.splits=[eval]", "eval.at_start=false"]
    run(tmp_path / "run", 1, AGENT_R + sft)
    out = tmp_path / "run" / "sft" / "judge"
    counts = json.loads((out / "judge_counts.json").read_text())
    assert counts["train_bad"] > 0 and counts["valid_bad"] > 0
    assert (out / "final" / "done.json").is_file()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    measured = [r for r in records if "judge" in r]
    assert [r["judge"] for r in measured] == ["sft", "judge"]
    # the stand-in engine answers every judge prompt "Judgment: Bad"
    assert all(r["agent_r_judge/parsed"] == 1.0 and r["agent_r_judge/verdict_bad"] == 1.0 for r in measured)
    assert undocumented(run_keys(tmp_path / "run")) == set()


def _goals(n: int) -> list:
    return [Task(id=f"g/{i}", env="textcraft") for i in range(n)]


def test_held_out_goals_are_never_sft_goals_by_default():
    goals = _goals(20)
    sft = {t.id for t in expert_tasks(goals, 6, seed=0, exclude={"g/3"})}
    train, held = judge_goals(goals, {"g/3"}, seed=0, skip=6, tasks=4, valid=5)
    assert {t.id for t in train} <= sft and len(held) == 5
    assert not {t.id for t in held} & sft and "g/3" not in {t.id for t in train + held}


def test_held_out_goals_from_the_sft_goals_follow_the_training_ones():
    goals = _goals(20)
    order = [t.id for t in expert_tasks(goals, 8, seed=0, exclude=set())]
    train, held = judge_goals(goals, set(), seed=0, skip=8, tasks=3, valid=4, valid_skip=1, valid_from_sft=True)
    assert [t.id for t in train] == order[:3] and [t.id for t in held] == order[4:8]
    with pytest.raises(ValueError, match="need that many SFT goals"):
        judge_goals(goals, set(), seed=0, skip=8, tasks=3, valid=5, valid_skip=1, valid_from_sft=True)
