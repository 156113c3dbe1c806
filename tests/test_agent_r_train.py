"""Agent-R through the training loop (roleagent.methods.agent_r.method): trees, pairs and
examples per iteration, the α schedule, the SFT update, prompt identity with the rollout,
and resume after a crash.

The policy is the tiny random model; its engine (``ActingEngine``, a test stand-in) writes
a ReAct turn around an action drawn with the engine's own seeded generator, so the lucky
corridor is won on some paths and lost on others and the trees have pairs."""

from __future__ import annotations

import json

import pytest
import torch

from roleagent.engine.hf import Generation, HFEngine
from roleagent.methods.agent_r.data import is_revision_turn
from roleagent.methods.agent_r.method import AgentRMethod
from roleagent.rollout import RolloutSettings, run_episodes
from roleagent.sft.data import check_example, encode_example
from tests.run_helpers import TINY, Killed, config, metrics, run
from tests.test_metrics_doc import run_keys, undocumented

ACTIONS = ("go right", "look", "jump", "go left")  # "jump" wins the lucky corridor


class ActingEngine(HFEngine):
    """Writes ``<think>…</think><action>A</action>`` turns: A is drawn from ACTIONS with
    the engine's generator at temperature > 0 and is "go right" when greedy; judge prompts
    get "Judgment: Bad"."""

    def generate(self, prompts, params, allowed=None):
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            if "good verifier" in text:
                reply = "It does not help.\nJudgment: Bad"
            else:
                pick = 0 if params.temperature <= 0 else int(torch.randint(4, (1,), generator=self.generator))
                reply = f"<think>try</think><action>{ACTIONS[pick]}</action>"
            ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
            self.generated_tokens += len(ids)
            out.append(Generation(list(prompt), ids, [0.0] * len(ids), reply, False))
        return out


AGENT_R = [
    "model.engine=tests.test_agent_r_train:ActingEngine",
    "agent_r.enabled=true",
    "wia.enabled=false",
    "algo.name=grpo",
    "agent_r.mcts_iterations=3",
    "agent_r.max_depth=3",
    "agent_r.candidates=3",
    "agent_r.epochs_first=2",
    "agent_r.batch_examples=4",
    "rollout.context=full",
    "rollout.action_format=think_action",
    "rollout.group_size=1",
    "rollout.max_new_tokens=16",
    "rollout.max_prompt_tokens=2048",
    "optim.micro_batch_tokens=4096",
]


def _files(run_dir, iteration):
    return run_dir / "agent_r" / f"iter_{iteration:06d}"


@pytest.mark.slow
def test_agent_r_iterations_write_data_and_train(tmp_path):
    trainer = run(tmp_path, 2, AGENT_R)
    assert trainer.pool.size == 2 * 3  # a search round's expansions at once: tasks x candidates
    records = [r for r in metrics(tmp_path) if "iteration" in r]
    assert [r["agent_r/alpha"] for r in records] == [0.5, 0.7]
    assert records[0]["update/epochs"] == 2.0 and records[1]["update/epochs"] == 1.0
    for iteration in (0, 1):
        folder = _files(tmp_path, iteration)
        assert len(list((folder / "trees").glob("*.json"))) == 2  # one tree per task
        examples = [json.loads(line) for line in (folder / "examples.jsonl").read_text().splitlines()]
        for e in examples:
            check_example(e)
            kinds = {e["meta"]["kind"] for e in examples}
            assert kinds <= {"good", "revision"}
    examples = [json.loads(line) for line in (_files(tmp_path, 0) / "examples.jsonl").read_text().splitlines()]
    revisions = [e for e in examples if e["meta"]["kind"] == "revision"]
    assert revisions, "the lucky corridor gives won and lost leaves: at least one pair"
    assert records[0]["update/examples"] == len(examples) > 0
    assert records[0]["update/loss_last"] < records[0]["update/loss_first"]  # SFT lowered its own loss
    pairs = [json.loads(line) for line in (_files(tmp_path, 0) / "pairs.jsonl").read_text().splitlines()]
    assert all(v == "bad" for p in pairs for v in p["verdicts"])  # the judge's answers, parsed
    answers = sum(len(p["verdicts"]) for p in pairs)
    assert records[0]["agent_r/judge_answers"] == records[0]["agent_r/judge_parsed"] == answers > 0
    assert records[0]["agent_r/judge_unparsed"] == records[0]["agent_r/judge_truncated"] == 0
    assert records[0]["agent_r/revision_judged"] == records[0]["agent_r/revision"] == len(revisions)
    assert undocumented(run_keys(tmp_path)) == set()  # docs/metrics.md
    for e in revisions:  # first Bad step = the first step after the shared prefix
        assert e["meta"]["transition"] == e["meta"]["shared"]
        trained = [m for m in e["messages"] if m.get("loss")]
        assert "I" in trained[0]["content"] and is_revision_turn(trained[0]["content"])  # no action
    assert trainer.evals[-1].label == "after"


@pytest.mark.slow
def test_sft_prompts_equal_the_rollout_prompts(tmp_path):
    """An example's turn prompts are, token for token, the prompts a rollout builds when it
    replays the same turns."""
    trainer = run(tmp_path, 1, AGENT_R)
    examples = [json.loads(line) for line in (_files(tmp_path, 0) / "examples.jsonl").read_text().splitlines()]
    good = next(e for e in examples if e["meta"]["kind"] == "good")
    trainer2 = type(trainer)(config(tmp_path / "again", 1, AGENT_R), quiet=True)
    try:
        engine, pool = trainer2.engine, trainer2.pool
        example = check_example(good)
        encoded = encode_example(engine, example)
        texts = [m["content"] for m in example.messages if m["role"] == "assistant"]
        task = next(t for t in trainer2.train_tasks if t.id == good["meta"]["task"])
        settings = RolloutSettings(max_steps=len(texts), action_format="think_action", context="full")
        (trajectory,), _ = run_episodes(
            engine=engine, pool=pool, jobs=[(task, good["meta"]["seed"], texts)], settings=settings
        )
        assert [s.prompt_ids for s in trajectory.steps] == encoded.prompts
    finally:
        trainer2.close()


@pytest.mark.slow
def test_agent_r_resumes_after_a_crash(tmp_path, monkeypatch):
    whole = tmp_path / "whole"
    run(whole, 2, AGENT_R)
    broken = tmp_path / "broken"
    real = AgentRMethod.collect

    def dies_in_iteration_1(self, jobs, progress=None):
        if self.iteration == 1:
            raise Killed()
        return real(self, jobs, progress)

    monkeypatch.setattr(AgentRMethod, "collect", dies_in_iteration_1)
    with pytest.raises(Killed):
        run(broken, 2, AGENT_R)
    monkeypatch.setattr(AgentRMethod, "collect", real)
    run(broken, 2, AGENT_R)
    assert metrics(whole) == metrics(broken)
    for name in ("examples.jsonl", "pairs.jsonl"):
        assert (_files(whole, 1) / name).read_text() == (_files(broken, 1) / name).read_text()


def test_tiny_settings_are_valid():
    assert "env.name=lucky" in TINY
    cfg = config("unused", 1, AGENT_R)
    assert cfg.agent_r.enabled and cfg.rollout.group_size == 1
