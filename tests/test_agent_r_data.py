"""Agent-R's data stage (roleagent.methods.agent_r.data, .judge) on hand-built trees:
which paths are picked, what the judge is asked, where the transition lands, and the
loss mask of the resulting chat examples."""

from dataclasses import dataclass, field

import pytest
from run_helpers import checked_config

from roleagent.config import ConfigError
from roleagent.engine.base import Generation
from roleagent.methods.agent_r import data
from roleagent.methods.agent_r.judge import judge_counts, judge_prompt
from roleagent.rollout import actor
from roleagent.sft.data import check_example
from roleagent.types import Task


@dataclass
class FakeNode:
    text: str
    action: str | None
    observation: str
    valid: bool = True
    admissible: list | None = None
    chat: dict | None = None


@dataclass
class FakeTree:
    """Root → a (shared) → {b → x (value 0), c → d (value 1)}, and root → e (value 0.6)."""

    task: Task = field(default_factory=lambda: Task("toy/0", "scripted"))
    seed: int = 3
    instruction: str = "Open the door."
    nodes: list = field(default_factory=list)

    def __post_init__(self):
        opening = {
            "mode": "encode",
            "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "u0"}],
        }

        def node(name, obs, parent=None):
            # a later turn's recorded chat holds the user message about its parent's observation
            text = f"<think>t</think><action>{name}</action>"
            chat = (
                opening
                if parent is None
                else {"mode": "extend", "messages": [{"role": "user", "content": f"after-{parent}"}]}
            )
            return FakeNode(text, name, obs, chat=chat)

        self.nodes = [
            None,  # the root
            node("a", "o_a"),
            node("b", "o_b", "a"),
            node("x", "o_x", "b"),
            node("c", "o_c", "a"),
            node("d", "won", "c"),
            node("e", "o_e"),
        ]
        self.values = {(1, 2, 3): 0.0, (1, 4, 5): 1.0, (6,): 0.6}

    def leaf_paths(self):
        return [list(p) for p in self.values]

    def path_value(self, path):
        return self.values[tuple(path)]


class JudgeEngine:
    """Answers judge prompts with ``answers`` in order (``truncated``: which hit the limit),
    greedily; records the prompts it was asked."""

    def __init__(self, answers, truncated=None):
        self.answers, self.truncated, self.asked = list(answers), truncated or [False] * len(answers), []

    def encode_chat(self, messages, response_prefix=""):
        self.asked.append(messages[0]["content"])
        return [len(self.asked)]

    def generate(self, prompts, params):
        assert params.temperature == 0.0 and len(prompts) == len(self.answers)
        return [Generation(list(p), [], [], a, t) for p, a, t in zip(prompts, self.answers, self.truncated)]


def test_select_picks_goods_and_pairs_by_alpha_and_beta():
    tree = FakeTree()
    goods, pairs = data.select(tree, alpha=0.5, beta=0.2, max_good=2, max_pairs=4)
    assert goods == [[1, 4, 5], [6]]
    assert [(p.good, p.bad, p.start) for p in pairs] == [
        ([1, 4, 5], [1, 2, 3], 1),
        ([1, 4, 5], [6], 0),
        ([6], [1, 2, 3], 0),
    ]
    goods, pairs = data.select(tree, alpha=1.0, beta=0.2, max_good=1, max_pairs=1)
    assert goods == [[1, 4, 5]] and len(pairs) == 1


def test_judged_revision_example_has_the_paper_mask():
    tree = FakeTree()
    _, pairs = data.select(tree, alpha=0.5, beta=0.2, max_good=2, max_pairs=1)
    engine = JudgeEngine(["b looks fine.\nJudgment: Good", "x wastes a step.\nJudgment: Bad"])
    data.judge_pairs(pairs, engine, "scripted", history=8, max_new_tokens=64)
    asked = engine.asked
    assert pairs[0].verdicts == ["good", "bad"]
    assert "Current Action: b" in asked[0] and "Action: a\nObservation: o_a" in asked[0]
    assert "Current Action: x" in asked[1] and "Current Observation: o_x" in asked[1]

    import random

    example = data.revision_example(pairs[0], "think_action", random.Random(0))
    check_example(example.to_json())
    roles = [(m["role"], m["loss"]) for m in example.messages]
    assert roles == [
        ("system", False),
        ("user", False),
        ("assistant", False),  # a (shared)
        ("user", False),
        ("assistant", False),  # b
        ("user", False),
        ("assistant", False),  # x: the first Bad step, kept untrained
        ("user", False),
        ("assistant", True),  # the revision thought
        ("user", False),
        ("assistant", True),  # c
        ("user", False),
        ("assistant", True),  # d
    ]
    assert example.meta["transition"] == 2 and example.meta["shared"] == 1
    texts = [m["content"] for m in example.messages]
    assert texts[3] == "after-a" and texts[5] == "after-b" and texts[11] == "after-c"  # as recorded
    # x was the bad path's last turn: no recorded successor, so its message is rebuilt
    assert texts[7] == actor.observation_message("o_x", None, "think_action")
    assert texts[8].endswith("</think>") and data.is_revision_turn(texts[8])  # no action
    assert texts[9] == "Invalid action format.\n\n" + actor.observation_message("o_x", None, "think_action")
    assert example.meta["judged"]


def test_direct_revision_without_a_bad_verdict_cuts_at_the_last_bad_step():
    import random

    tree = FakeTree()
    _, pairs = data.select(tree, alpha=0.5, beta=0.2, max_good=2, max_pairs=1)
    pairs[0].verdicts = ["uncertain", None]
    example = data.revision_example(pairs[0], "think_action", random.Random(0))
    assert example.meta["transition"] == 2
    pairs[0].verdicts = ["bad", "good"]
    example = data.revision_example(pairs[0], "think_action", random.Random(0))
    assert example.meta["transition"] == 1
    assert [m["loss"] for m in example.messages if m["role"] == "assistant"] == [False, False, True, True, True]


def test_good_example_trains_every_turn():
    tree = FakeTree()
    example = data.good_example(tree, [1, 4, 5], "think_action")
    check_example(example.to_json())
    assert [m["loss"] for m in example.messages if m["role"] == "assistant"] == [True, True, True]
    assert example.meta["kind"] == "good" and example.meta["value"] == 1.0


def test_judge_prompt_names_the_environment_and_bounds_history():
    steps = [(f"get {i} oak log", f"Got {i}") for i in range(12)]
    prompt = judge_prompt("textcraft", "Goal: craft a stick.", steps, 11, history=3)
    assert "Minecraft crafting" in prompt and "science" not in prompt
    assert "Action: get 8 oak log" in prompt and "Action: get 7 oak log" not in prompt
    assert "Current Action: get 11 oak log" in prompt
    assert prompt.rstrip().endswith("Judgment: <Good or Bad or Uncertain>")


def test_revision_turn_needs_think_action():
    assert data.revision_turn("I erred.", "think_action") == "<think>I erred.</think>"
    with pytest.raises(ValueError):
        data.revision_turn("I erred.", "action")


@pytest.mark.parametrize(
    "override, message",
    [
        ("rollout.context=window", "rollout.context=full"),
        ("rollout.action_format=action", "think_action"),
        ("rollout.group_size=2", "group_size=1"),
        ("agent_r.alpha_schedule=[0.5, 1.5]", "alpha_schedule"),
    ],
)
def test_agent_r_config_checks(override, message):
    base = [
        "env.name=scripted",
        "agent_r.enabled=true",
        "rollout.context=full",
        "rollout.action_format=think_action",
        "rollout.group_size=1",
    ]
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        checked_config(None, base + [override])


def test_revision_mask_end_to_end_on_tokens(tiny_policy):
    """Encoded with a real tokenizer and chat template, the loss mask of a revision example
    covers exactly the tokens of the revision thought and the good turns."""
    import random

    from roleagent.engine.hf import HFEngine
    from roleagent.sft.data import encode_example

    engine = HFEngine(tiny_policy)
    tree = FakeTree()
    _, pairs = data.select(tree, alpha=0.5, beta=0.2, max_good=2, max_pairs=1)
    pairs[0].verdicts = ["good", "bad"]
    example = data.revision_example(pairs[0], "think_action", random.Random(0))
    encoded = encode_example(engine, example)
    trained = [i for i, m in zip(encoded.ids, encoded.loss_mask) if m]
    expected = [m["content"] for m in example.messages if m.get("loss")]
    tokenizer = engine.tokenizer
    assert trained == [t for text in expected for t in tokenizer(text, add_special_tokens=False)["input_ids"]]
    untrained_text = tokenizer.decode([i for i, m in zip(encoded.ids, encoded.loss_mask) if not m])
    for m in example.messages:
        if not m.get("loss"):
            assert m["content"] in untrained_text  # bad turns and observations are context only


def test_judge_answers_are_counted_parsed_unparsed_and_truncated():
    """Issue 24, item 7: every answer is counted; an unparsed one is no verdict (it never
    sets t'), and one cut at the token limit is flagged, parsed or not."""
    import random

    tree = FakeTree()
    _, pairs = data.select(tree, alpha=0.5, beta=0.2, max_good=2, max_pairs=1)
    answers = ["Judgment: Good, it opens the way.", "x leads nowhere, so the judgment is that it"]
    engine = JudgeEngine(answers, truncated=[False, True])
    judgements = data.judge_pairs(pairs, engine, "scripted", history=8, max_new_tokens=16)
    assert pairs[0].verdicts == ["good", None] and pairs[0].truncated == [False, True]
    assert judge_counts(judgements) == {
        "judge_answers": 2.0,
        "judge_parsed": 1.0,
        "judge_unparsed": 1.0,
        "judge_truncated": 1.0,
        "verdict_good": 1.0,
        "verdict_bad": 0.0,
        "verdict_uncertain": 0.0,
    }
    example = data.revision_example(pairs[0], "think_action", random.Random(0))
    assert example.meta["transition"] == 2 and not example.meta["judged"]  # direct revision


def test_judge_token_limit_fits_the_papers_answers():
    """The default limit leaves at least twice the tokens of the longest of the paper's judge
    answers (Yuan et al., 2025, arXiv 2501.11425, Table 8), measured with the embedded
    model's tokenizer: 91 tokens."""
    pytest.importorskip("transformers")
    from roleagent.methods.agent_r.config import AgentRConfig
    from roleagent.models.loading import load_tokenizer

    longest = (  # SciWorld, "Mismatch Observation"
        "The current task is to determine if the aluminum foil is electrically conductive. The agent has already "
        "connected the aluminum foil to the battery and the green light bulb, and observed that the light bulb "
        "turned on. This suggests that the aluminum foil is electrically conductive. Moving the aluminum foil to "
        "the yellow box would mean that the agent is giving up on the possibility of the aluminum foil being "
        "conductive, which is not in line with the current observation. Therefore, Judgment: Bad"
    )
    tokens = len(load_tokenizer("embedded")(longest, add_special_tokens=False)["input_ids"])
    assert tokens == 91
    assert AgentRConfig().judge_max_new_tokens >= 2 * tokens


def test_revision_signal_is_never_stepped_and_its_reply_is_the_rollouts(tiny_policy):
    """Issue 24, item 8: the revision signal is inert in every environment (the rollout does
    not step an output without an action; ScienceWorld's ``wait`` would advance the
    simulator), and the user message after it in the training data is the rollout's own."""
    from roleagent.engine.hf import HFEngine
    from roleagent.envs.workers import EnvPool
    from roleagent.rollout import RolloutSettings, run_episodes

    engine = HFEngine(tiny_policy)
    settings = RolloutSettings(max_steps=3, action_format="think_action", context="full")
    revision = data.revision_turn("I made an error.", "think_action")
    texts = ["<think>t</think><action>go right</action>", revision, "<think>t</think><action>look</action>"]
    with EnvPool("scripted", slots=1, processes=False) as pool:
        task = pool.meta.tasks("train")[0]
        (trajectory,), _ = run_episodes(engine=engine, pool=pool, jobs=[(task, 0, texts)], settings=settings)
    first, signal, after = trajectory.steps
    assert first.valid and not signal.valid and signal.info == {"invalid": True}  # never stepped
    assert after.observation == signal.observation and after.state_key == signal.state_key
    rollout_reply = after.extras["chat"]["messages"][0]["content"]
    before = signal.extras["chat"]["messages"][0]["content"]  # the message after the first action
    assert rollout_reply == "Invalid action format.\n\n" + before
    node = FakeNode("<think>t</think><action>go right</action>", "go right", signal.observation)
    node.admissible = [line for line in before.split("\n\n") if line.startswith("Admissible actions: ")]
    node.admissible = node.admissible[0].removeprefix("Admissible actions: ").split(", ")
    assert data.user_message(node, "think_action") == before
    assert data.revision_reply(node, "think_action") == rollout_reply
