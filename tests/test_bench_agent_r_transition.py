"""The fixed-tree Agent-R benchmark (benchmarks/bench_agent_r_transition.py) on a hand-built
tree: its two arms train the same good paths and revision thoughts and differ only in where
the revision is spliced; its table pairs every arm with the start game by game."""

import sys
from pathlib import Path

from test_agent_r_data import FakeTree

from roleagent.methods.agent_r import data

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_agent_r_transition as bench  # noqa: E402


def judged_pairs():
    tree = FakeTree()
    goods, pairs = data.select(tree, alpha=0.5, beta=0.2, max_good=2, max_pairs=1)
    pairs[0].verdicts = ["bad", "good"]  # t' = the first bad step after the shared one
    return [(tree, g) for g in goods], pairs


def test_arms_differ_only_in_the_transition_point():
    goods, pairs = judged_pairs()
    direct = bench.arm_examples(goods, pairs, "direct", seed=0, fmt="think_action")
    agent_r = bench.arm_examples(goods, pairs, "agent_r", seed=0, fmt="think_action")
    assert [e.meta["kind"] for e in direct] == [e.meta["kind"] for e in agent_r] == ["good", "good", "revision"]
    assert [e.messages for e in direct[:2]] == [e.messages for e in agent_r[:2]]
    assert direct[2].meta["transition"] == 2 and not direct[2].meta["judged"]
    assert agent_r[2].meta["transition"] == 1 and agent_r[2].meta["judged"]
    thought = [m["content"] for m in direct[2].messages if data.is_revision_turn(m["content"])]
    assert thought == [m["content"] for m in agent_r[2].messages if data.is_revision_turn(m["content"])]
    trained = [[m["content"] for m in e.messages if m.get("loss")] for e in (direct[2], agent_r[2])]
    assert trained[0] == trained[1]  # the thought and the good continuation: only the context moves
    assert pairs[0].verdicts == ["bad", "good"]  # the direct arm leaves the judged pair as it was
    assert bench.transition_stats(pairs) == {"pairs": 1, "judged": 1, "steps_cut": 1, "bad_steps_after_shared": 2}


def test_report_pairs_each_arm_with_the_start():
    def play(outcomes, revised=0):
        flags = [i < revised for i in range(len(outcomes))]
        return {"outcomes": outcomes, "revised": revised, "revised_success": 0, "revised_games": flags, "loop1": 1.5}

    start = play([False, False, True, False])
    runs = {"direct": [play([False, False, True, False])] * 3, "agent_r": [play([True, False, True, False], 1)] * 3}
    text = bench.report(start, runs, {"pairs": 1, "judged": 1, "steps_cut": 1, "bad_steps_after_shared": 2})
    assert "| start | - | 1/4 = 25.0% [4.6, 69.9] | - | - | 0 (0) | 1.50 |" in text
    assert "| direct | 3 | 3/12 = 25.0%" in text and "| agent_r | 3 | 6/12 = 50.0%" in text
    assert "b=0 c=3 of 12" in text and "| 3 (0) | 1.50 |" in text  # agent_r gains game 0 in every seed
    assert "agent_r vs direct, paired over (seed, game): +25.0 pts, b=0 c=3 of 12" in text
    assert (
        "revision signal (fewer: fewer turns lost), agent_r vs direct per game (sign flip): +25.0 points, 1 up" in text
    )


def test_union_reports_two_panels_as_one():
    def play(outcomes, revised, loop1):
        flags = [i < revised for i in range(len(outcomes))]
        return {"outcomes": outcomes, "revised": revised, "revised_success": 0, "revised_games": flags, "loop1": loop1}

    stats = {"pairs": 1}
    first = {"start": play([True], 0, 3.0), "runs": {"direct": [play([False], 1, 2.0)] * 2}, "stats": stats}
    later = {"start": play([False, False, True], 0, 1.0), "runs": {"direct": [play([True] * 3, 0, 2.0)] * 2}}
    u = bench.union([first, later])
    assert u["start"] == play([True, False, False, True], 0, 1.5) and u["stats"] == stats
    assert u["runs"]["direct"] == [play([False, True, True, True], 1, 2.0)] * 2  # flags: [True, False, False, False]


def test_panel_play_counts_revised_episodes_and_loops(tmp_path):
    import json

    steps = [
        {"action_text": "<think>I erred.</think>", "action": None},
        {"action_text": "<action>a</action>", "action": "a"},
    ]
    episodes = [{"success": True, "steps": steps}, {"success": False, "steps": [steps[1]] * 3}]
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / "eval_panel.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    record = {"eval": "panel", "split": "eval", "eval/outcomes": [1, 0]}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    play = bench.evaluate("agent_r_textcraft", "unused: already evaluated", tmp_path, 0)
    assert play == {
        "outcomes": [True, False], "revised": 1, "revised_success": 1, "revised_games": [True, False], "loop1": 2.0
    }  # fmt: skip
