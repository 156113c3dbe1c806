"""Rollouts with scripted generations: batching, invalid actions, WIA scores, crashes."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from roleagent.envs.workers import EnvPool
from roleagent.methods.role_agent.wia import PredictionExtension
from roleagent.rollout import RolloutSettings, run_episodes
from roleagent.rollout.extensions import overlaps_env


def expert_reply(prompt: str, _call: int) -> str:
    """Solve the key-and-door corridor from the prompt text alone (a scripted policy)."""
    if "Predict the next" in prompt:
        return "You are in room 1.</state1>"
    admissible = re.search(r"Admissible actions: (.*)", prompt).group(1).split(", ")
    for action in ("open door", "take key", "go right"):
        if action in admissible and (action != "open door" or "pick up the key" in prompt or "take key" in prompt):
            return f"{action}</action>"
    return "go left</action>"


def test_expert_script_solves_and_batches(scripted_engine):
    engine = scripted_engine(expert_reply)
    with EnvPool("scripted", slots=4, processes=False) as pool:
        tasks = pool.meta.tasks("train")[:2]
        jobs = [(t, 7) for t in tasks for _ in range(2)]
        trajectories, stats = run_episodes(
            engine=engine, pool=pool, jobs=jobs, settings=RolloutSettings(max_steps=8, action_format="action")
        )
    assert [t.task.id for t in trajectories] == [j[0].id for j in jobs]
    assert all(t.success for t in trajectories)
    assert engine.calls[0] == 4  # one batched call for all four episodes on the first turn
    assert all(n <= 4 for n in engine.calls)
    # Finished episodes drop out: later calls are not larger than the number still active.
    assert stats.turns == max(len(t.steps) for t in trajectories)
    for t in trajectories:
        assert t.steps[-1].done and t.steps[-1].reward == 1.0
        assert t.steps[0].prompt_ids and t.steps[0].action_logprobs == [-1.0] * len(t.steps[0].action_ids)


def test_invalid_output_is_penalised_not_stepped(scripted_engine):
    engine = scripted_engine(lambda prompt, call: "no tags here" if call == 0 else "<action>look</action>")
    with EnvPool("scripted", slots=1, processes=False) as pool:
        task = pool.meta.tasks("train")[0]
        (trajectory,), _ = run_episodes(
            engine=engine,
            pool=pool,
            jobs=[(task, 0)],
            settings=RolloutSettings(max_steps=3, action_format="think_action", invalid_penalty=0.1),
        )
    first, second = trajectory.steps[:2]
    assert not first.valid and first.action is None and first.reward == pytest.approx(-0.1)
    # the penalty is recorded apart from the environment's reward, so the advantage
    # functions can place it (verl-agent: on the invalid step's own return only)
    assert first.penalty == pytest.approx(0.1) and first.env_reward == 0.0
    assert second.penalty == 0.0 and second.env_reward == second.reward
    assert second.valid and second.action == "look"
    assert second.observation == first.observation  # the invalid step did not move the env
    assert len(trajectory.steps) == 3 and not trajectory.success


def test_wia_predictions_are_scored_against_next_observation(scripted_engine):
    engine = scripted_engine(expert_reply)
    with EnvPool("scripted", slots=1, processes=False) as pool:
        task = next(t for t in pool.meta.tasks("train") if t.payload["key_room"] == 1)
        (trajectory,), stats = run_episodes(
            engine=engine,
            pool=pool,
            jobs=[(task, 0)],
            settings=RolloutSettings(max_steps=8, action_format="action"),
            extensions=[PredictionExtension(2, max_new_tokens=48, temperature=1.0, top_p=1.0)],
        )
    assert stats.extension_s >= 0
    step0 = trajectory.steps[0].extras["wia"]
    assert step0["predictions"][0] == "You are in room 1."
    assert len(step0["scores"]) == 2 and step0["ids"] and len(step0["ids"]) == len(step0["logprobs"])
    # The first action moves to room 1, which shows a key: partial word overlap, in (0, 1).
    truth = trajectory.steps[1].observation
    assert truth.startswith("You are in room 1.")
    assert 0.0 < step0["scores"][0] < 1.0
    # The last step's second horizon lies past the end of the trajectory.
    assert math.isnan(trajectory.steps[-1].extras["wia"]["scores"][1])


def test_crashed_environment_is_restarted_and_marked(scripted_engine):
    def respond(prompt, call):
        return "crash</action>" if call == 1 else "look</action>"

    engine = scripted_engine(respond)
    with EnvPool("crashing", slots=2, processes=True, timeout=30) as pool:
        tasks = pool.meta.tasks("train")[:2]
        trajectories, _ = run_episodes(
            engine=engine,
            pool=pool,
            jobs=[(t, 0) for t in tasks],
            settings=RolloutSettings(max_steps=4, action_format="action"),
        )
        assert all(t.crashed for t in trajectories)
        assert all(len(t.steps) == 2 for t in trajectories)
        assert pool.restarts == 2
        # The restarted workers serve the next episodes normally.
        engine2 = scripted_engine(lambda p, c: "look</action>")
        again, _ = run_episodes(
            engine=engine2,
            pool=pool,
            jobs=[(t, 0) for t in tasks],
            settings=RolloutSettings(max_steps=2, action_format="action"),
        )
        assert not any(t.crashed for t in again) and all(len(t.steps) == 2 for t in again)


def test_more_jobs_than_slots_run_in_waves(scripted_engine):
    engine = scripted_engine(expert_reply)
    with EnvPool("scripted", slots=2, processes=False) as pool:
        tasks = pool.meta.tasks("eval")[:5]
        trajectories, _ = run_episodes(
            engine=engine,
            pool=pool,
            jobs=[(t, 0) for t in tasks],
            settings=RolloutSettings(max_steps=8, action_format="action"),
        )
    assert [t.task.id for t in trajectories] == [t.id for t in tasks]
    assert all(1 <= len(t.steps) <= 8 for t in trajectories)
    assert engine.calls[0] == 2  # waves of at most pool.size episodes


def test_step_batch_separates_env_rewards_and_penalties_and_places_them_per_step():
    from roleagent.config import AlgoConfig
    from roleagent.trainer.advantages import StepBatch, compute_advantages
    from roleagent.types import Step, Task, Trajectory

    def traj(rewards, penalties, states):
        steps = [
            Step(
                observation=s,
                state_key=s,
                prompt_ids=[1],
                action_ids=[2],
                action_logprobs=[0.0],
                action_text="a",
                action=None if p else "a",
                valid=not p,
                reward=r - p,
                penalty=p,
            )
            for r, p, s in zip(rewards, penalties, states)
        ]
        return Trajectory(task=Task("g", "scripted"), steps=steps)

    # same worked example as test_invalid_penalty_step_placement_as_verl_agent (test_algos_gigpo)
    batch = StepBatch.from_trajectories([traj([0, 1], [0, 0], ["s", "t"]), traj([0, 1], [0.1, 0], ["s", "t"])])
    np.testing.assert_allclose(batch.rewards, [0, 1, 0, 1])
    np.testing.assert_allclose(batch.penalties, [0, 0, 0.1, 0])
    cfg = AlgoConfig(name="gigpo", gamma=1.0, norm="mean_norm")
    np.testing.assert_allclose(compute_advantages(batch, cfg).value, [0.075, 0.025, -0.125, 0.025])
    cfg.penalty_placement = "reward"
    np.testing.assert_allclose(compute_advantages(batch, cfg).value, [0.1, 0.05, -0.1, -0.05])


def test_the_rollout_settings_defaults_are_the_configs():
    """``RolloutSettings`` (the rollout's own arguments, for callers without a config) and the
    config's ``rollout`` section agree on every default they share; the trainer builds its
    settings from the config (``rollout_settings``)."""
    import dataclasses

    from roleagent.config import RolloutConfig

    config = {f.name: f.default for f in dataclasses.fields(RolloutConfig)}
    shared = [f for f in dataclasses.fields(RolloutSettings) if f.name in config and f.name != "max_steps"]
    assert len(shared) >= 9
    assert {f.name: f.default for f in shared} == {f.name: config[f.name] for f in shared}


def test_a_rollout_source_must_choose(scripted_engine):
    with EnvPool("scripted", slots=1, processes=False) as pool:
        with pytest.raises(ValueError, match="is not an ActionSource"):
            run_episodes(
                engine=scripted_engine(None), pool=pool, jobs=[], settings=RolloutSettings(max_steps=2, source="expert")
            )


class _InFlightProbe:
    """A rollout extension that records, at each call, which slots' steps are unanswered."""

    name = "probe"

    def __init__(self, pool):
        self.pool, self.seen = pool, []

    def after_actions(self, engine, turns):
        self.seen.append(self.pool._in_flight)
        return [None for _ in turns]

    def finish(self, trajectory):
        pass


@pytest.mark.parametrize("processes", [True, False])
def test_environments_step_while_the_extensions_generate_and_nothing_changes(tiny_policy, processes):
    """``overlap_env=always``: each turn's steps are sent before the extensions' generations
    and collected after them (the workers step meanwhile); the sampled actions, predictions
    and observations equal those of the sequential order (``never``, and ``auto`` on a CPU)."""
    from roleagent.engine.hf import HFEngine

    def play(overlap):
        engine = HFEngine(tiny_policy)
        engine.seed(3)
        settings = RolloutSettings(
            max_steps=3, action_format="action", max_new_tokens=6, constrain_actions=True, overlap_env=overlap
        )
        with EnvPool("scripted", slots=2, processes=processes) as pool:
            probe = _InFlightProbe(pool)
            extensions = [PredictionExtension(1, max_new_tokens=5, temperature=1.0, top_p=1.0), probe]
            jobs = [(task, 0) for task in pool.meta.tasks("train")[:2]]
            trajectories, _ = run_episodes(
                engine=engine, pool=pool, jobs=jobs, settings=settings, extensions=extensions
            )
        steps = [
            (s.action_ids, s.action, s.observation, s.reward, s.extras["wia"]["ids"])
            for t in trajectories
            for s in t.steps
        ]
        return steps, probe.seen

    overlapped, seen_on = play("always")
    sequential, seen_off = play("never")
    on_cpu, seen_auto = play("auto")
    assert overlapped == sequential == on_cpu and len(overlapped) >= 4
    assert seen_off == seen_auto == [None] * len(seen_off)
    assert seen_on and all(slots for slots in seen_on)  # every turn's steps were out during the generations


def test_auto_overlaps_where_the_engine_does_not_decode_on_this_cpu():
    from types import SimpleNamespace

    import torch

    on = {name: SimpleNamespace(policy=SimpleNamespace(device=torch.device(name))) for name in ("cpu", "cuda")}
    assert [overlaps_env("auto", on["cpu"]), overlaps_env("auto", on["cuda"])] == [False, True]
    assert overlaps_env("auto", SimpleNamespace(tokenizer=None))  # a server generates elsewhere
    assert overlaps_env("always", on["cpu"]) and not overlaps_env("never", on["cuda"])
    with pytest.raises(ValueError, match="auto, always or never"):
        overlaps_env("true", on["cpu"])


def test_an_extension_that_fails_leaves_the_pool_usable(scripted_engine):
    class Failing(_InFlightProbe):
        def after_actions(self, engine, turns):
            raise ValueError("boom")

    with EnvPool("scripted", slots=1, processes=True) as pool:
        jobs = [(pool.meta.tasks("train")[0], 0)]
        settings = RolloutSettings(max_steps=2, action_format="action", overlap_env="always")
        with pytest.raises(ValueError, match="boom"):
            run_episodes(
                engine=scripted_engine(expert_reply),
                pool=pool,
                jobs=jobs,
                settings=settings,
                extensions=[Failing(pool)],
            )
        (trajectory,), _ = run_episodes(engine=scripted_engine(expert_reply), pool=pool, jobs=jobs, settings=settings)
        assert len(trajectory.steps) == 2 and not trajectory.crashed


def test_a_pool_with_steps_out_refuses_other_commands():
    with EnvPool("scripted", slots=2, processes=True) as pool:
        pool.reset([(i, task, 0) for i, task in enumerate(pool.meta.tasks("train")[:2])])
        pending = pool.begin_steps([(0, "look"), (1, "look")])
        with pytest.raises(RuntimeError, match="unanswered"):
            pool.step([(0, "look")])
        assert [r.crashed for r in pool.finish_steps(pending)] == [False, False]
        with pytest.raises(RuntimeError, match="finished already"):
            pool.finish_steps(pending)
        assert not pool.step([(0, "look")])[0].crashed  # the pool serves commands again
