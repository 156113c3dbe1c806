"""World-In-Agent predictor warm start (``roleagent.sft.predictor``): its examples are the
rollout's prediction prompts with the real next observations as the only trained tokens,
its competence metric on a hand case, and the recipe switch in a tiny warm-started run."""

from __future__ import annotations

import json

import pytest
import torch
from run_helpers import TINY, run
from test_metrics_doc import run_keys, undocumented

from roleagent.config import load_config
from roleagent.engine.base import Generation
from roleagent.engine.hf import HFEngine
from roleagent.envs.workers import EnvPool
from roleagent.fields import ConfigError
from roleagent.methods.role_agent.wia import PREFIX, PredictionExtension
from roleagent.models.loading import load_policy
from roleagent.rollout import EXPERT, RolloutSettings, run_episodes
from roleagent.sft.data import SFTDataError, check_example
from roleagent.sft.predictor import (
    competence,
    encode_predictor,
    observation_form,
    prediction_target,
    predictor_competence,
    predictor_examples,
)

SFT = ["sft.enabled=true", "sft.expert_tasks=3", "sft.epochs=1", "sft.lr=1e-2", "eval.splits=[eval]"]


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    return HFEngine(load_policy("tiny", device="cpu", lora_rank=0, seed=0), max_prompt_tokens=4096)


def expert_with_predictions(engine, context: str, prompt: str, horizon: int):
    """Expert episodes of the scripted corridor, with the rollout's prediction extension on."""
    settings = RolloutSettings(max_steps=8, action_format="action", context=context, source=EXPERT)
    extension = PredictionExtension(horizon, max_new_tokens=4, temperature=1.0, top_p=1.0, prompt=prompt)
    with EnvPool("scripted", {}, slots=3, processes=False) as pool:
        jobs = [(task, 0) for task in pool.meta.tasks("train")[:3]]
        return run_episodes(engine=engine, pool=pool, jobs=jobs, settings=settings, extensions=[extension])[0]


@pytest.mark.parametrize("context", ["window", "full"])
@pytest.mark.parametrize("prompt", ["continuation", "separate"])
def test_examples_are_the_rollout_prediction_prompts_trained_on_the_real_next_states(engine, context, prompt):
    horizon = 2
    trajectories = expert_with_predictions(engine, context, prompt, horizon)
    tok = engine.tokenizer
    seen = 0
    for trajectory in trajectories:
        examples = predictor_examples(trajectory, horizon=horizon, prompt=prompt)
        future = [s.observation for s in trajectory.steps[1:]] + [trajectory.final_observation]
        assert [e.meta["step"] for e in examples] == list(range(len(trajectory.steps) - horizon + 1))
        for example in examples:
            check_example(example.to_json())  # a valid JSONL line of roleagent.sft.data
            t = example.meta["step"]
            step = trajectory.steps[t]
            assert example.meta["truth"] == future[t : t + horizon] and example.meta["action"] == step.action
            encoded = encode_predictor(engine, example)
            # the prompt is the one the rollout's predictor was given for this state and action
            assert encoded.prompts[-1] == step.extras["wia"]["prompt_ids"]
            # the loss covers the prediction tokens, all of them and nothing else
            target = tok(prediction_target(future[t : t + horizon])[len(PREFIX) :], add_special_tokens=False)
            n = len(target["input_ids"])
            assert encoded.ids[-n:] == target["input_ids"] and encoded.ids[:-n] == encoded.prompts[-1]
            assert encoded.loss_mask == [0] * (len(encoded.ids) - n) + [1] * n
            seen += 1
    assert seen == sum(len(t.steps) - horizon + 1 for t in trajectories) > 0


def test_a_prediction_turn_names_its_own_prefix():
    user = {"role": "user", "content": "u"}
    action = {"role": "assistant", "content": "<action>go</action>"}
    ok = {
        "messages": [
            user,
            action,
            user,
            {"role": "assistant", "content": "<state1>s", "loss": True, "prefix": "<state1>"},
        ]
    }
    assert check_example({**ok, "response_prefix": "<action>"}).messages[-1]["prefix"] == "<state1>"
    with pytest.raises(SFTDataError, match="must start with its prefix"):
        check_example({**ok, "messages": ok["messages"][:3] + [{**ok["messages"][3], "prefix": "<x>"}]})
    with pytest.raises(SFTDataError, match="on an assistant message"):
        check_example({"messages": [{**user, "prefix": "<a>"}, {**action, "loss": True}]})


def test_observation_form_is_not_an_echo_of_the_action():
    assert not observation_form("go to bed 1", "go to bed 1")
    assert not observation_form("Go to bed 1 and look around", "go to bed 1")
    assert not observation_form("...", "go to bed 1") and not observation_form("", "look")
    assert observation_form("You arrive at bed 1. On the bed 1, you see a book 1.", "go to bed 1")
    assert observation_form("Nothing happens.", "open drawer 1")
    # the verb is no evidence of an echo where the real observation starts with it (TextCraft)
    assert observation_form("Inventory: [oak log] (2)", "inventory", "Inventory: [stick] (1)")
    assert not observation_form("inventory", "inventory", "You are carrying nothing.")


def test_competence_on_a_hand_case():
    """Truth "You arrive at bed 1." (tokens you, arrive, at, bed, 1, .): "You arrive at bed
    2." scores 2·5/12, the echo "go to bed 1" 2·2/10 (bed, 1); second transition H = 2:
    an exact first state (1.0) and an empty second one (0.0)."""
    truth = "You arrive at bed 1."
    result = competence(
        [["You arrive at bed 2."], ["go to bed 1"], [truth, ""]],
        [[truth], [truth], [truth, "Nothing happens."]],
        ["go to bed 1", "go to bed 1", "go to bed 1"],
        [False, True, False],
    )
    assert [row["scores"] for row in result.rows] == [[pytest.approx(10 / 12)], [0.4], [1.0, 0.0]]
    m = result.metrics
    assert m["wia_predictor/score"] == pytest.approx((10 / 12 + 0.4 + 1.0 + 0.0) / 4)
    assert m["wia_predictor/observation_form"] == 0.5  # bed 2 and the exact one; not the echo, not ""
    assert m["wia_predictor/truncated"] == pytest.approx(1 / 3) and m["wia_predictor/transitions"] == 3


class CannedEngine:
    """The tiny engine's chat encoding; generations are given texts, one per prompt."""

    def __init__(self, engine, texts):
        self.inner, self.texts, self.prompts = engine, list(texts), []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, sampling):
        assert sampling.temperature == 0.0 and sampling.stop == ("</state1>",)
        self.prompts += prompts
        return [Generation(p, [1], [0.0], self.texts.pop(0), False) for p in prompts]


def test_predictor_competence_generates_from_the_example_prompts(engine):
    trajectory = expert_with_predictions(engine, "window", "continuation", 1)[0]
    examples = predictor_examples(trajectory, horizon=1)
    truths = [e.meta["truth"][0] for e in examples]
    texts = [truths[0] + "</state1>", examples[1].meta["action"]] + ["..."] * (len(examples) - 2)
    canned = CannedEngine(engine, texts)
    result = predictor_competence(canned, examples, max_new_tokens=8, batch_size=2)
    assert canned.prompts == [s.extras["wia"]["prompt_ids"] for s in trajectory.steps]
    assert result.rows[0]["predictions"] == [truths[0]] and result.rows[0]["scores"] == [1.0]
    assert result.metrics["wia_predictor/observation_form"] == pytest.approx(1 / len(examples))


def test_the_switch_needs_world_in_agent_and_expert_data():
    with pytest.raises(ConfigError, match="sft.predictor needs wia.enabled"):
        load_config(None, TINY + SFT + ["sft.predictor=true", "wia.enabled=false", "algo.name=gigpo"])
    with pytest.raises(ConfigError, match="sft.predictor_eval_tasks"):
        load_config(None, TINY + SFT + ["sft.predictor=true", "sft.predictor_eval_tasks=-1"])


def test_warm_start_trains_and_measures_the_predictor(tmp_path):
    """With ``sft.role_epochs=1`` of 2, the second pass trains on the expert's examples alone."""
    roles_first = ["sft.epochs=2", "sft.role_epochs=1", "sft.batch_examples=1"]
    run(tmp_path / "run", 1, SFT + ["sft.predictor=true", "sft.predictor_eval_tasks=2"] + roles_first)
    sft = tmp_path / "run" / "sft"
    counts = json.loads((sft / "expert_counts.json").read_text())
    assert counts["predictor_examples"] > 0 and counts["predictor_valid_examples"] > 0
    steps = [json.loads(line)["steps"] for line in (sft / "metrics.jsonl").read_text().splitlines()]
    assert steps == [counts["examples"] + counts["predictor_examples"], counts["examples"]]
    train = {json.loads(line)["meta"]["task"] for line in (sft / "predictor.jsonl").read_text().splitlines()}
    held_out = {json.loads(line)["meta"]["task"] for line in (sft / "predictor_valid.jsonl").read_text().splitlines()}
    assert train and held_out and not train & held_out
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    measured = [r for r in records if "predictor" in r]
    assert [r["predictor"] for r in measured] == ["base", "sft"]
    assert all(r["wia_predictor/transitions"] == counts["predictor_valid_examples"] for r in measured)
    assert undocumented(run_keys(tmp_path / "run")) == set()
