"""``optim.sft_replay_coef``: PPO-ptx's SFT term in each RL optimizer step
(``roleagent.trainer.replay``).

The term must pull the policy towards the replayed examples (an update with it leaves their
loss lower than the same update without it), report the loss of what it drew, and find its
examples where the module docstring says, or say clearly that there are none."""

import copy
import json
import random

import pytest

from roleagent.config import ConfigError, OptimConfig, load_config
from roleagent.config_rules import check_fsdp
from roleagent.sft.data import ChatExample, EncodedExample, write_examples
from roleagent.sft.train import evaluate_loss
from roleagent.trainer.replay import SFTReplay, replay_path
from roleagent.trainer.update import Updater
from tests.test_update_skip_zero import _batch, policy  # noqa: F401 - the tiny policy fixture

TARGETS = ["take apple 1 from table 2", "put mug 3 in/on shelf 1", "use desklamp 1"]


def _examples(tmp_path, n=3):
    rows = [
        ChatExample([{"role": "user", "content": f"Task {k}."}, {"role": "assistant", "content": t, "loss": True}])
        for k, t in enumerate(TARGETS[:n])
    ]
    path = tmp_path / "expert.jsonl"
    write_examples(path, rows)
    return path


def _encoder(policy):  # noqa: F811 - the fixture
    """Prompt ids then target ids, the loss on the target (what encode_example makes of one turn)."""

    def encode(example: ChatExample) -> EncodedExample:
        prompt = policy.tokenizer(example.messages[0]["content"], add_special_tokens=False)["input_ids"]
        target = policy.tokenizer(" " + example.messages[1]["content"], add_special_tokens=False)["input_ids"]
        return EncodedExample(prompt + target, [0] * len(prompt) + [1] * len(target), [prompt])

    return encode


def _update(policy, replay, lr):  # noqa: F811
    cfg = OptimConfig(lr=lr, mini_batches=2, epochs=2, kl_coef=0.0)
    state = copy.deepcopy(policy.model.state_dict())
    metrics = Updater(policy, cfg, replay=replay).update(_batch(policy, [1.0, -1.0, 0.5]), random.Random(0))
    return metrics, state


def test_the_replay_term_pulls_the_policy_towards_the_replayed_examples(policy, tmp_path):  # noqa: F811
    replay = SFTReplay(_examples(tmp_path), _encoder(policy), coef=1.0, n_examples=3, micro_batch_tokens=512)
    before = evaluate_loss(policy, replay.examples())
    losses = {}
    for coef in (0.0, 1.0):
        replay.coef = coef
        metrics, state = _update(policy, replay if coef else None, lr=1e-2)
        losses[coef] = evaluate_loss(policy, replay.examples())
        policy.model.load_state_dict(state)
        assert ("sft_replay_loss" in metrics) == bool(coef)
    assert losses[1.0] < before - 0.5  # four steps on the examples themselves
    assert losses[1.0] < losses[0.0] - 0.5  # and not what the policy-gradient steps did anyway


def test_the_reported_loss_is_the_drawn_examples_sft_loss(policy, tmp_path):  # noqa: F811
    replay = SFTReplay(_examples(tmp_path, 1), _encoder(policy), coef=0.5, n_examples=4, micro_batch_tokens=512)
    expected = evaluate_loss(policy, replay.examples())
    metrics, state = _update(policy, replay, lr=0.0)  # lr 0: every step sees the same weights
    policy.model.load_state_dict(state)
    assert metrics["sft_replay_loss"] == pytest.approx(expected, rel=1e-4)  # unscaled by coef
    assert metrics["optimizer_steps"] == 4


def test_the_examples_are_found_beside_the_warm_start(tmp_path):
    sft = tmp_path / "run" / "sft"
    (sft / "final").mkdir(parents=True)
    own = load_config(None, [f"run_dir={tmp_path / 'run'}", "sft.enabled=true", "optim.sft_replay_coef=1"])
    assert replay_path(own) == sft / "expert.jsonl"  # written by the warm start before RL
    other = load_config(None, [f"model.init_from={sft / 'final'}", "optim.sft_replay_coef=1"])
    with pytest.raises(ConfigError, match="needs examples to replay.*expert.jsonl does not exist"):
        replay_path(other)
    _examples(sft)
    assert replay_path(other) == sft / "expert.jsonl"
    with pytest.raises(ConfigError, match="optim.sft_replay_data"):  # refused when the recipe loads
        load_config(None, [f"optim.sft_replay_data={tmp_path / 'none.jsonl'}", "optim.sft_replay_coef=1"])
    with pytest.raises(ConfigError, match="set optim.sft_replay_data"):
        replay_path(load_config(None, ["optim.sft_replay_coef=1"]))


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="sft_replay_coef"):
        load_config(None, ["optim.sft_replay_coef=-1"])
    with pytest.raises(ConfigError, match="sft_replay_examples"):
        load_config(None, ["optim.sft_replay_examples=0"])
    cfg = load_config(None, ["optim.sft_replay_coef=1", "optim.fsdp=true", "model.lora_rank=0"])
    with pytest.raises(ConfigError, match="sft_replay_coef > 0 .the replay term is single-process"):
        check_fsdp(cfg)


def test_a_warm_started_run_replays_its_own_expert_examples(tmp_path):
    """The recipe switch end to end (tiny model, scripted environment): the warm start writes
    the examples after the trainer is built, and each RL iteration that updates reports the
    replayed loss; the RL phase alone from that checkpoint finds them beside it."""
    from run_helpers import run

    sft = ["sft.enabled=true", "sft.expert_tasks=3", "sft.epochs=1", "sft.lr=1e-2"]
    replay = ["optim.sft_replay_coef=1", "optim.sft_replay_examples=2", "optim.skip_zero_advantage=false"]
    for name, sets in (("whole", sft), ("rl", [f"model.init_from={tmp_path / 'whole' / 'sft' / 'final'}"])):
        run(tmp_path / name, 1, sets + replay)
        records = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        losses = [r["update/sft_replay_loss"] for r in records if "iteration" in r]
        assert len(losses) == 1 and 0 < losses[0] < 20, name
