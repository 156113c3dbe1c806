"""Rollouts that reuse what the model already computed: ``rollout.context=full`` (one growing
chat per episode), ``wia.prompt=continuation`` (the prediction prompt continues the action
prompt) and ``rollout.prefix_cache_tokens`` (the engine's prefix KV store), which changes
what is computed but not what is generated."""

from __future__ import annotations

import json
import math

import pytest

from roleagent.config import ConfigError, load_config
from roleagent.envs.workers import EnvPool
from roleagent.methods.role_agent.wia import PREFIX, PredictionExtension, predictor_messages
from roleagent.rollout import RolloutSettings, actor, run_episodes
from roleagent.trainer.memory import resident_mb
from tests import run_helpers


def _engine(policy, **kwargs):
    from roleagent.engine.hf import HFEngine

    return HFEngine(policy, **kwargs)


def _play(engine, settings, extensions=(), tasks=2):
    pool = EnvPool("lucky", {}, slots=tasks, processes=False)
    try:
        jobs = [(task, i) for i, task in enumerate(pool.meta.tasks("train")[:tasks])]
        return run_episodes(engine=engine, pool=pool, jobs=jobs, settings=settings, extensions=extensions)
    finally:
        pool.close()


def _is_window_prompt(engine, ids, trajectory, step_index) -> bool:
    """``ids`` decode to a fresh window prompt for that step (system prompt, instruction,
    history when there is one, the step's observation, the opened assistant turn)."""
    text = engine.tokenizer.decode(ids)
    step = trajectory.steps[step_index]
    return (
        text.count(actor.SYSTEM_PROMPT) == 1
        and text.count(trajectory.instruction) == 1
        and ("Previous actions:" in text) == (step_index > 0)
        and text.count("<|im_start|>assistant") == 1
        and text.removesuffix("<action>").endswith("<|im_start|>assistant\n")
        and "Current observation: " + step.observation in text
    )


# ------------------------------------------------------------------- config -------------


@pytest.mark.parametrize(
    "setting,key",
    [
        ("rollout.context=sliding", "rollout.context='sliding'"),
        ("rollout.prefix_cache_tokens=-1", "rollout.prefix_cache_tokens=-1"),
        ("rollout.prefix_cache_tokens=100", "rollout.prefix_cache_tokens=100"),
        ("wia.prompt=joint", "wia.prompt='joint'"),
    ],
)
def test_bad_reuse_settings_are_config_errors(setting, key, tmp_path):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[")):
        load_config(None, run_helpers.TINY + [f"run_dir={tmp_path}", setting])


def test_reuse_settings_accepted(tmp_path):
    cfg = load_config(
        None,
        run_helpers.TINY
        + [f"run_dir={tmp_path}", "rollout.context=full", "rollout.prefix_cache_tokens=4096", "wia.prompt=separate"],
    )
    assert (cfg.rollout.context, cfg.rollout.prefix_cache_tokens, cfg.wia.prompt) == ("full", 4096, "separate")
    assert load_config(None, run_helpers.TINY + [f"run_dir={tmp_path}"]).wia.prompt == "continuation"


# ------------------------------------------------------------- prompt structure ---------


def test_full_context_each_prompt_continues_the_previous_turn(tiny_policy):
    engine = _engine(tiny_policy, prefix_cache_tokens=8192)
    settings = RolloutSettings(max_steps=6, action_format="action", max_new_tokens=6, context="full")
    trajectories, stats = _play(engine, settings)
    checked = 0
    for t in trajectories:
        first = t.steps[0]
        assert _is_window_prompt(engine, first.prompt_ids, t, 0)  # turn 0: the window prompt
        for prev, step in zip(t.steps, t.steps[1:]):
            head = prev.prompt_ids + prev.action_ids
            assert step.prompt_ids[: len(head)] == head
            tail = engine.tokenizer.decode(step.prompt_ids[len(head) :])
            assert (
                tail.startswith("<|im_end|>\n<|im_start|>user\n")
                or prev.action_ids[-1] == engine.tokenizer.eos_token_id
            )
            assert "Current observation: " + step.observation[:100] in tail
            checked += 1
    assert checked > 0 and stats.context_restarts == 0
    assert stats.reused_prompt_tokens > 0  # the previous turns' KV was reused


def test_full_context_invalid_output_and_feedback_are_turns_of_the_chat(tiny_policy):
    engine = _engine(tiny_policy)
    # a random tiny model never writes <think>..</think><action>..</action>: every step is invalid
    settings = RolloutSettings(max_steps=3, action_format="think_action", max_new_tokens=5, context="full")
    trajectories, _ = _play(engine, settings, tasks=1)
    [t] = trajectories
    assert len(t.steps) == 3 and not any(s.valid for s in t.steps)
    for prev, step in zip(t.steps, t.steps[1:]):
        head = prev.prompt_ids + prev.action_ids
        assert step.prompt_ids[: len(head)] == head
        tail = engine.tokenizer.decode(step.prompt_ids[len(head) :])
        assert tail.split("<|im_start|>user\n")[1].startswith("Invalid action format.\n\nCurrent observation: ")


def test_full_context_restarts_from_the_window_prompt_instead_of_truncating(tiny_policy):
    engine = _engine(tiny_policy, max_prompt_tokens=260)
    settings = RolloutSettings(max_steps=8, action_format="action", max_new_tokens=6, context="full", history=1)
    trajectories, stats = _play(engine, settings)
    assert stats.context_restarts > 0
    restarts = 0
    for t in trajectories:
        for i, (prev, step) in enumerate(zip(t.steps, t.steps[1:]), start=1):
            assert len(step.prompt_ids) < engine.max_prompt_tokens
            head = prev.prompt_ids + prev.action_ids
            if step.prompt_ids[: len(head)] != head:  # not a continuation: exactly the window prompt
                assert _is_window_prompt(engine, step.prompt_ids, t, i)
                restarts += 1
    assert restarts == stats.context_restarts


def test_window_context_is_unchanged(tiny_policy):
    engine = _engine(tiny_policy)
    settings = RolloutSettings(max_steps=3, action_format="action", max_new_tokens=6)
    trajectories, stats = _play(engine, settings)
    for t in trajectories:
        for i, step in enumerate(t.steps):
            assert _is_window_prompt(engine, step.prompt_ids, t, i)
    assert stats.reused_prompt_tokens == 0 and stats.prefix_cache_bytes == 0


@pytest.mark.parametrize("context", ["window", "full"])
def test_wia_continuation_prompt_starts_with_action_prompt_and_ids(tiny_policy, context):
    engine = _engine(tiny_policy, prefix_cache_tokens=8192)
    settings = RolloutSettings(max_steps=3, action_format="action", max_new_tokens=6, context=context)
    extension = PredictionExtension(1, max_new_tokens=4, temperature=1.0, top_p=1.0, prompt="continuation")
    trajectories, stats = _play(engine, settings, [extension])
    predicted = 0
    for t in trajectories:
        for step in t.steps:
            record = step.extras["wia"]
            if not step.valid:
                assert "prompt_ids" not in record
                continue
            head = step.prompt_ids + step.action_ids
            assert record["prompt_ids"][: len(head)] == head
            tail = engine.tokenizer.decode(record["prompt_ids"][len(head) :])
            assert f"Action taken: {step.action}" in tail and tail.endswith(PREFIX)
            predicted += 1
    assert predicted > 0 and stats.reused_prompt_tokens > 0


def test_wia_separate_prompt_is_the_papers_x_pre(tiny_policy):
    engine = _engine(tiny_policy)
    settings = RolloutSettings(max_steps=2, action_format="action", max_new_tokens=6)
    extension = PredictionExtension(2, max_new_tokens=4, temperature=1.0, top_p=1.0, prompt="separate")
    trajectories, _ = _play(engine, settings, [extension])
    steps = [s for t in trajectories for s in t.steps if s.valid]
    assert steps
    for t in trajectories:
        for step in (s for s in t.steps if s.valid):
            x_pre = predictor_messages(
                instruction=t.instruction, observation=step.observation, action=step.action, horizon=2
            )
            assert step.extras["wia"]["prompt_ids"] == engine.encode_chat(x_pre, response_prefix=PREFIX)


# --------------------------------------------------- cache on == cache off (runs) -------


def _approx_equal(a, b, path="") -> None:
    """Equal JSON values; floats within 1e-4 (prefix reuse changes float rounding only)."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), path
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-4), f"{path}: {a} != {b}"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            _approx_equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, type(a)) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _approx_equal(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _run_records(run_dir):
    metrics = [
        {
            k: v
            for k, v in r.items()
            if not k.startswith(("rollout/reused", "rollout/prefilled", "rollout/prefix_cache"))
        }
        for r in run_helpers.metrics(run_dir)
    ]
    rollouts = {
        name: [json.loads(line) for line in text.splitlines()] for name, text in run_helpers.rollouts(run_dir).items()
    }
    return metrics, rollouts


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        ["rollout.context=window", "wia.prompt=separate"],
        ["rollout.context=window", "wia.prompt=continuation"],
        ["rollout.context=full", "wia.prompt=continuation"],
    ],
    ids=["window-separate", "window-continuation", "full-continuation"],
)
def test_prefix_cache_changes_nothing_in_a_training_run(tmp_path, extra):
    """Sampled training rollouts (T = 1) and greedy evaluations (eval.temperature 0), two
    iterations with policy updates in between: same tokens, same metrics and records."""
    off = run_helpers.run(tmp_path / "off", 2, extra)
    run_helpers.run(tmp_path / "on", 2, extra + ["rollout.prefix_cache_tokens=8192"])
    assert off.cfg.eval.temperature == 0.0 and off.cfg.rollout.temperature == 1.0
    records_off, records_on = _run_records(tmp_path / "off"), _run_records(tmp_path / "on")
    _approx_equal(records_off, records_on)
    trained = [r for r in run_helpers.metrics(tmp_path / "on") if "iteration" in r]
    assert all(r["rollout/reused_prompt_tokens"] > 0 for r in trained)
    assert all(r["rollout/prefix_cache_mib"] > 0 for r in trained)
    assert all(
        r["rollout/reused_prompt_tokens"] == 0 for r in run_helpers.metrics(tmp_path / "off") if "iteration" in r
    )
    assert (tmp_path / "on" / "eval_table.txt").read_text() == (tmp_path / "off" / "eval_table.txt").read_text()


@pytest.mark.slow
def test_weights_changed_after_each_update_and_after_a_restore(tmp_path, monkeypatch):
    from roleagent.engine.hf import HFEngine

    calls = []
    original = HFEngine.weights_changed
    monkeypatch.setattr(HFEngine, "weights_changed", lambda self: (calls.append(1), original(self))[1])
    run_helpers.run(tmp_path, 2, ["rollout.prefix_cache_tokens=4096", "eval.at_start=false"])
    assert len(calls) == 2  # one per policy update
    calls.clear()
    trainer = run_helpers.Trainer(
        run_helpers.config(tmp_path, 3, ["rollout.prefix_cache_tokens=4096", "eval.at_start=false"]), quiet=True
    )
    try:
        assert trainer.start_iteration == 2 and len(calls) == 1  # the checkpoint restore
    finally:
        trainer.close()


@pytest.mark.slow
def test_the_store_is_emptied_after_each_evaluation_and_before_each_update(tmp_path):
    """An evaluation panel's prompts never come back and a store is stale after the update,
    so neither holds the store's memory afterwards; each phase reports its memory."""
    trainer = run_helpers.Trainer(run_helpers.config(tmp_path, 2, ["rollout.prefix_cache_tokens=8192"]), quiet=True)
    store = trainer.engine.prefix_cache
    at_update, after_eval, update, evaluate = [], [], trainer.objective.update, trainer.evaluate
    trainer.objective.update = lambda samples, rng: (at_update.append(store.tokens), update(samples, rng))[1]
    trainer.evaluate = lambda label: (evaluate(label), after_eval.append(store.tokens))[0]
    try:
        trainer.run()
    finally:
        trainer.close()
    assert at_update == [0, 0] and after_eval == [0, 0]  # before, after
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "iteration" in r]
    assert all(r["rollout/reused_prompt_tokens"] > 0 and r["rollout/prefix_cache_mib"] > 0 for r in trained)
    if resident_mb() is not None:
        phases = ("rollout_start", "rollout_peak", "update_start", "update_peak")
        assert all(r[f"memory/{p}_mb"] > 0 for r in trained for p in phases)
        assert all(r["memory/eval_peak_mb"] >= r["memory/eval_start_mb"] > 0 for r in records if "eval" in r)
