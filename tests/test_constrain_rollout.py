"""Rollouts with ``constrain_actions``: every step is a valid admissible command whose
tokens are exactly what was generated, on the scripted corridor and on ALFWorld."""

from __future__ import annotations

import pytest

from roleagent.envs.workers import EnvPool
from roleagent.rollout import RolloutSettings, actor, run_episodes


def _check_steps(trajectories, tokenizer, admissible_of):
    steps = 0
    for t in trajectories:
        for i, step in enumerate(t.steps):
            admissible = admissible_of(t, i)
            assert step.valid and step.action in admissible
            completion = tokenizer(actor.completion(step.action, "action"), add_special_tokens=False)["input_ids"]
            assert step.action_ids == completion  # the executed command's tokens are the trained ones
            assert step.action_allowed is not None and len(step.action_allowed) == len(step.action_ids)
            assert all(tok in ids for tok, ids in zip(step.action_ids, step.action_allowed))
            assert "projected_from" not in step.info and not step.info.get("invalid")
            steps += 1
    return steps


def _replayed_admissible(env_factory):
    """The admissible list before each step, by replaying the episode's actions in a fresh env."""
    cache: dict[str, list[list[str]]] = {}

    def admissible_of(trajectory, index):
        key = trajectory.task.id + str(trajectory.seed)
        if key not in cache:
            env = env_factory()
            env.reset(trajectory.task, trajectory.seed)
            lists = [env.admissible_actions()]
            for step in trajectory.steps:
                env.step(step.action)
                lists.append(env.admissible_actions())
            cache[key] = lists
            env.close()
        return cache[key][index]

    return admissible_of


@pytest.mark.parametrize(("temperature", "greedy"), [(0.0, "token"), (0.0, "command"), (1.0, "token")])
def test_constrained_rollout_on_the_scripted_corridor(tiny_policy, temperature, greedy):
    from roleagent.engine.hf import HFEngine
    from roleagent.envs.scripted import ScriptedEnv

    engine = HFEngine(tiny_policy)
    settings = RolloutSettings(
        max_steps=6,
        action_format="action",
        max_new_tokens=2,
        temperature=temperature,
        constrain_actions=True,
        greedy=greedy,
    )
    with EnvPool("scripted", slots=4, processes=False) as pool:
        jobs = [(task, 3) for task in pool.meta.tasks("train")[:4]]
        trajectories, stats = run_episodes(engine=engine, pool=pool, jobs=jobs, settings=settings)
    n = _check_steps(trajectories, tiny_policy.tokenizer, _replayed_admissible(ScriptedEnv))
    assert n == stats.constrained_actions == sum(len(t.steps) for t in trajectories) > 0
    assert stats.free_actions == 0


def test_unconstrained_rollout_stays_free(tiny_policy):
    from roleagent.engine.hf import HFEngine

    settings = RolloutSettings(max_steps=2, action_format="action", max_new_tokens=4, temperature=1.0)
    with EnvPool("scripted", slots=2, processes=False) as pool:
        jobs = [(task, 3) for task in pool.meta.tasks("train")[:2]]
        trajectories, stats = run_episodes(engine=HFEngine(tiny_policy), pool=pool, jobs=jobs, settings=settings)
    assert stats.constrained_actions == 0 and stats.free_actions == sum(len(t.steps) for t in trajectories)
    assert all(step.action_allowed is None for t in trajectories for step in t.steps)


@pytest.mark.slow
def test_constrained_rollout_on_alfworld_easy(tiny_policy, tmp_path):
    pytest.importorskip("alfworld")
    from roleagent.engine.hf import HFEngine
    from roleagent.envs.alfworld.env import AlfWorldEnv

    kwargs = dict(difficulty="easy", panel_size=1, train_size=2, cache_dir=str(tmp_path), source="generated")
    settings = RolloutSettings(
        max_steps=4, action_format="action", max_new_tokens=4, temperature=1.0, constrain_actions=True
    )
    with EnvPool("alfworld", kwargs, slots=2, processes=False) as pool:
        jobs = [(task, 0) for task in pool.meta.tasks("valid_seen")[:2]]
        trajectories, stats = run_episodes(engine=HFEngine(tiny_policy), pool=pool, jobs=jobs, settings=settings)
    n = _check_steps(trajectories, tiny_policy.tokenizer, _replayed_admissible(lambda: AlfWorldEnv(**kwargs)))
    assert n == stats.constrained_actions == 8  # 2 episodes x 4 steps, none invalid, none cut short
