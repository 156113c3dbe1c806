"""ASL through the real training loop (roleagent.methods.asl.method): the phase cycle, the
round files, generated questions reaching the rollouts through the task source, the
GRM's verdict as the policy's reward, late injection, the frozen-GRM switch and resume.

The policy is the tiny random model; its engine (``ScriptedEngine``, a test stand-in)
writes each role's text with the engine's own seeded generator: sums as questions, a
digit as the policy's answer, "conclusion: correct" twice as often as "wrong" /
"incorrect" as the GRM's verdict (plus the echoed template, no verdict). ``TinyQAEnv`` is
a two-step QA environment (``<search>``, ``<answer>``) with gold answers, the search
environment's task contract."""

from __future__ import annotations

import json
import re

import pytest
import torch

from roleagent.algos.asl import parse_verdict
from roleagent.engine.hf import Generation, HFEngine
from roleagent.envs import EnvSpec, register_env
from roleagent.envs.base import Environment, StepResult
from roleagent.methods.asl.method import ASLMethod
from roleagent.methods.asl.prompts import verdict_target
from roleagent.methods.asl.roles import generate_turns, grm_chat, judge, role_task, verdict_replies
from roleagent.types import Task
from tests.run_helpers import Killed, metrics, rollouts, run
from tests.test_metrics_doc import undocumented

QA = {
    "train": [("What is 1+1?", "2"), ("What is 2+2?", "4"), ("What is 0+1?", "1"), ("What is 3+3?", "6")],
    "eval": [("What is 1+2?", "3"), ("What is 2+3?", "5"), ("What is 0+0?", "0")],
}
VERDICTS = ("correct", "correct", "correct", "correct", "wrong", "incorrect", "correct/wrong")


class TinyQAEnv(Environment):
    """Questions with gold answers; ``<answer>x</answer>`` ends the episode (exact match),
    ``<search>q</search>`` returns a fixed passage. Any Task with a question plays."""

    name = "tinyqa"
    max_steps = 2

    def tasks(self, split):
        return [
            Task(f"tinyqa/{split}/{i}", "tinyqa", {"question": q}, split, {"question": q, "answers": [a], "hops": 1})
            for i, (q, a) in enumerate(QA[split])
        ]

    def reset(self, task, seed):
        self.task = task
        return "Answer the question.", {"instruction": task.payload["question"]}

    def step(self, action):
        found = re.search(r"<answer>(.*?)</answer>", action, re.DOTALL)
        if found:
            ok = found.group(1).strip() in self.task.metadata["answers"]
            return StepResult("Done.", float(ok), True, {"success": ok})
        return StepResult("Passage: numbers add up.", 0.0, False, {"success": False})


register_env(EnvSpec("tinyqa", "tests.test_asl_train:TinyQAEnv", (), "dev", "test QA env for ASL"))


class ScriptedEngine(HFEngine):
    def generate(self, prompts, params, allowed=None):
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)

            def draw(k: int) -> int:
                return 0 if params.temperature <= 0 else int(torch.randint(k, (1,), generator=self.generator))

            if "verify the correctness" in text:
                reply = f"<answer>\nconclusion: {VERDICTS[draw(len(VERDICTS))]}\n</answer>"
            elif "<question>" in text:
                a, b = draw(3), draw(3)
                reply = f"<think>sums</think><question>What is {a}+{b}?</question><answer>{a + b}</answer>"
            else:
                reply = f"<answer>{draw(4)}</answer>"
            ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
            self.generated_tokens += len(ids)
            out.append(Generation(list(prompt), ids, [0.0] * len(ids), reply, False))
        return out


ASL = [
    "model.engine=tests.test_asl_train:ScriptedEngine",
    "env.name=tinyqa",
    "asl.enabled=true",
    "wia.enabled=false",
    "algo.name=grpo",
    "rollout.action_format=raw",
    "rollout.max_prompt_tokens=2048",
    "rollout.max_new_tokens=16",
    "optim.micro_batch_tokens=4096",
    "asl.checks=3",
    "asl.accept=0.6",
    "asl.attempts=2",
    "asl.pg_target_questions=1",
    "asl.phase_min_iterations=1",
    "asl.phase_max_iterations=1",
    "asl.grm_eval_questions=2",
    "asl.late_injection_round=1",
    "asl.injection_examples=2",
    "asl.pg_max_new_tokens=32",
    "asl.grm_max_new_tokens=32",
    "eval.at_start=false",
    "seed=1",  # round 0 keeps questions whose two attempts split 1/0: a PG reward of ln 2
]


def test_constrained_verdicts_are_the_two_replies_the_parser_reads(tiny_policy):
    """``asl.grm_verdicts: constrained``: every verdict is one of the two replies, parsed;
    the GRM phase's turns keep the allowed set of each position, so the update
    renormalises over it (one branching position: the verdict word)."""
    engine = HFEngine(tiny_policy, max_prompt_tokens=2048)
    replies = verdict_replies(engine.tokenizer)
    assert [engine.tokenizer.decode(r, skip_special_tokens=True) for r in replies] == [
        verdict_target(1),
        verdict_target(0),
    ]
    assert replies[0][-1] == replies[1][-1] == engine.tokenizer.eos_token_id
    pairs = [("What is 1+1?", "2"), ("What is 1+1?", "4")] * 4
    judged = judge(engine, pairs, with_system=True, max_new_tokens=16, temperature=1.0, constrained=True)
    assert all(verdict in (0, 1) and text == verdict_target(verdict) for text, verdict in judged)
    free = judge(engine, pairs[:2], with_system=True, max_new_tokens=16, temperature=1.0)
    assert [parse_verdict(text) for text, _ in free] == [None, None]  # the random model's own text
    record = {"question": "What is 1+1?", "response": "2", "label": 1}
    settings = type("Settings", (), {"temperature": 1.0, "top_p": 1.0})
    [turn] = generate_turns(
        engine,
        [(role_task("g", "tinyqa", "grm", record), 0)],
        [grm_chat(record["question"], record["response"], True)],
        max_new_tokens=16,
        settings=settings,
        replies=replies,
    )
    step = turn.steps[0]
    assert step.action_ids in replies and len(step.action_allowed) == len(step.action_ids)
    assert [len(a) for a in step.action_allowed].count(2) == 1 and max(len(a) for a in step.action_allowed) == 2


def _rows(run_dir, round_index, name):
    path = run_dir / "asl" / f"round_{round_index:04d}" / name
    return [json.loads(line) for line in path.read_text().splitlines()]


def _iteration(run_dir, iteration):
    path = run_dir / "rollouts" / f"iter_{iteration:06d}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_asl_cycle_files_rewards_and_task_source(tmp_path):
    run(tmp_path, 5, ASL)
    records = [r for r in metrics(tmp_path) if "iteration" in r]
    assert [r["asl/phase"] for r in records] == [0.0, 1.0, 2.0, 0.0, 1.0]  # PG, GRM, PM, then round 1
    assert [r["asl/round"] for r in records] == [0, 0, 0, 1, 1]
    assert 0.0 <= records[2]["asl/grm_eval_accuracy"] <= 1.0
    assert undocumented({k for r in metrics(tmp_path) for k in r}) == set()  # docs/metrics.md

    questions = _rows(tmp_path, 0, "questions.jsonl")
    assert len(questions) == 4  # tasks_per_iter 2 × group_size 2 generations
    kept = [q for q in questions if q.get("kept")]
    assert kept and all(len(q["checks"]) == 3 and q["check_mean"] >= 0.6 for q in kept)
    for q in questions:  # the PG's reward: entropy of the M = 2 verdicts (0 or ln 2), else 0
        scores = [1 if v == 1 else 0 for v in q.get("verdicts", [])]
        assert q["reward"] == pytest.approx(0.6931471805599453 if len(set(scores)) == 2 else 0.0)
    assert any(q["reward"] > 0.69 for q in kept) and records[0]["update/trained_tokens"] > 0

    grm_train = _rows(tmp_path, 0, "grm_train.jsonl")
    labels = [r["label"] for r in grm_train]
    assert labels and labels.count(0) == labels.count(1)  # class-balanced, self-generated only
    assert not any(r["source"].startswith("real:") for r in grm_train)
    grm_round1 = _rows(tmp_path, 1, "grm_train.jsonl")  # late injection from round 1
    assert any(r["source"].startswith("real:") for r in grm_round1)
    assert len(_rows(tmp_path, 0, "grm_eval.jsonl")) == 4  # 2 questions: gold and a wrong answer

    # The PM phase plays exactly the kept questions, through the task source, in the env.
    pm = _iteration(tmp_path, 2)
    kept_ids = {q["id"] for q in kept}
    assert {t["task_id"] for t in pm} <= kept_ids and pm
    by_id = {q["id"]: q for q in kept}
    for t in pm:
        assert t["instruction"] == by_id[t["task_id"]]["question"]
        assert t["metadata"]["answers"] == [by_id[t["task_id"]]["answer"]]
        record = t["extras"]["asl"]
        assert t["return"] == record["score"] == (1 if record["verdict"] == 1 else 0)  # GRM verdict as reward
        assert record["env_success"] == (record["answer"] == by_id[t["task_id"]]["answer"])
    followups = _rows(tmp_path, 0, "followups.jsonl")
    assert {f["parent"] for f in followups} == {t["task_id"] for t in pm}
    for f in followups:
        scores = [t["extras"]["asl"]["score"] for t in pm if t["task_id"] == f["parent"]]
        assert f["flag"] == ("HARDER" if sum(scores) / len(scores) > 0.5 else "EASIER")
    round1 = _rows(tmp_path, 1, "questions.jsonl")  # round 1's meta prompts are the follow-ups
    assert {q["meta"].get("parent") for q in round1} <= {f["parent"] for f in followups}


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["grm_retrieval", "pg_retrieval"])
def test_retrieval_needs_a_knowledge_base(tmp_path, setting):
    """``asl.grm_retrieval`` or ``asl.pg_retrieval`` on an environment with nothing to
    search stops the run before any training, naming the setting and the environment."""
    from roleagent.config import load_config
    from roleagent.fields import ConfigError
    from roleagent.trainer import Trainer

    cfg = load_config(None, [*ASL, f"asl.{setting}=true", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=f"asl.{setting}: the 'tinyqa' environment has no knowledge base"):
        Trainer(cfg, quiet=True)


class TinyKBEnv(TinyQAEnv):
    """TinyQAEnv with a knowledge base of four passages (``retriever``, ``search_results``,
    the search environment's interface to the roles that read it)."""

    name = "tinyqa_kb"
    DOCS = [{"id": f"p{n}", "contents": f'"Number {n}"\n{n} is a number of arithmetic.'} for n in range(4)]

    def __init__(self):
        self.retriever = self

    def retrieve(self, queries, k):
        return [[{"document": d, "score": 1.0} for d in self.DOCS][:k] for _ in queries]

    def search_results(self, queries):
        return [f"<information>results for {q}</information>" for q in queries]


register_env(EnvSpec("tinyqa_kb", "tests.test_asl_train:TinyKBEnv", (), "dev", "test QA env with a knowledge base"))


def test_pg_retrieval_opens_each_generator_prompt_with_its_search(tmp_path):
    """``asl.pg_retrieval`` through the loop: every PG turn's prompt opens with the results
    for a drawn passage's title, and the G samples of one prompt share them."""
    run(tmp_path, 1, [*ASL, "env.name=tinyqa_kb", "asl.pg_retrieval=true", "asl.pg_retrieval_pool=3"])
    turns = _iteration(tmp_path, 0)
    assert len(turns) == 4  # tasks_per_iter 2 × group_size 2
    shown = {}
    for turn in turns:
        found = re.match(r"A search of the knowledge base returned:\n<information>results for (Number [0-2])</information>",
                         turn["instruction"])  # fmt: skip
        assert found, turn["instruction"][:200]  # a title of the topic's top 3 passages
        assert "</information>\n\nBase the question on these results" in turn["instruction"]
        assert "\n\nPlease generate a question about " in turn["instruction"]  # then Figure 9
        shown.setdefault(turn["task_id"], set()).add(found.group(1))
    assert len(shown) == 2 and all(len(titles) == 1 for titles in shown.values())


@pytest.mark.slow
def test_dynamic_sampling_trains_the_grm_groups_whose_verdicts_differ(tmp_path):
    """GRM's dead groups: with ``dynamic_sampling`` the GRM phase plays more pairs until its
    groups disagree, trains only those, and its metrics cover every verdict played. Seed 2:
    the first round's two groups include one whose verdicts agree; three rounds play five."""
    run(tmp_path, 2, [*ASL, "dynamic_sampling.enabled=true", "dynamic_sampling.max_rounds=4", "seed=2"])
    grm = [r for r in metrics(tmp_path) if r.get("asl/phase") == 1.0]
    assert len(grm) == 1
    record, played = grm[0], _iteration(tmp_path, 1)
    assert {t["extras"]["asl"]["role"] for t in played} == {"grm"}
    groups = [played[i : i + 2] for i in range(0, len(played), 2)]
    assert len(groups) == record["train/groups_played"] > record["train/groups_trained"]
    assert 1 < record["train/sampling_rounds"] <= 4
    trained = [g for g in groups if all("algo" in s["extras"] for t in g for s in t["steps"])]
    assert (
        len(trained) == record["train/groups_trained"] == min(2, sum(g[0]["return"] != g[1]["return"] for g in groups))
    )
    assert all(g[0]["return"] != g[1]["return"] for g in trained)
    assert record["asl/grm_reward"] == pytest.approx(sum(t["return"] for t in played) / len(played))


def test_frozen_grm_skips_its_phase(tmp_path):
    run(tmp_path, 3, [*ASL, "asl.train_grm=false", "asl.grm_eval_questions=0"])
    records = [r for r in metrics(tmp_path) if "iteration" in r]
    assert [r["asl/phase"] for r in records] == [0.0, 2.0, 0.0]
    assert not (tmp_path / "asl" / "round_0000" / "grm_train.jsonl").exists()
    assert (tmp_path / "asl" / "round_0000" / "grm_data.jsonl").exists()  # still collected


@pytest.mark.slow
def test_asl_resume_equals_uninterrupted(tmp_path, monkeypatch):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    run(whole, 4, ASL)
    real = ASLMethod.score

    def dies_in_the_second_pg_phase(self, trajectories):
        if self.round == 1:
            real(self, trajectories)  # its rows reach the files, then the process dies
            raise Killed()
        return real(self, trajectories)

    monkeypatch.setattr(ASLMethod, "score", dies_in_the_second_pg_phase)
    with pytest.raises(Killed):
        run(broken, 4, ASL)
    monkeypatch.setattr(ASLMethod, "score", real)
    run(broken, 4, ASL)
    assert metrics(whole) == metrics(broken)
    assert rollouts(whole) == rollouts(broken)
    files = sorted(p.relative_to(whole).as_posix() for p in (whole / "asl").rglob("*.jsonl"))
    assert files == sorted(p.relative_to(broken).as_posix() for p in (broken / "asl").rglob("*.jsonl"))
    for name in files:
        assert (whole / name).read_text() == (broken / name).read_text(), name


def test_search_recipe_loads_with_a_qa_environment():
    """The shipped recipe is valid once an environment is there (env ``search`` lands
    separately; here the tiny QA environment stands in)."""
    from roleagent.config import load_config

    cfg = load_config("asl_search", ["env.name=tests.test_asl_train:TinyQAEnv"])
    assert cfg.asl.enabled and (cfg.asl.checks, cfg.asl.accept) == (5, 0.8)
    assert cfg.rollout.action_format == "raw" and not cfg.wia.enabled


def test_headline_recipe_is_zero_data_and_injection_is_its_own_recipe():
    """``asl_search`` is the paper's headline ASL: no real verification data, M = 10 as in
    the authors' code. ``asl_search_injection`` (Figure 6b) is the same run plus injection
    from the third round."""
    from pathlib import Path

    from roleagent.config import load_config, to_dict, validate

    headline, injection = load_config("asl_search"), load_config("asl_search_injection")
    for cfg in (headline, injection):
        validate(cfg)
    assert headline.asl.late_injection_round == 0 and headline.asl.attempts == 10
    assert injection.asl.late_injection_round == 2 and injection.asl.injection_examples > 0
    one, other = to_dict(headline), to_dict(injection)
    for data in (one, other):
        data.pop("run_dir")
        for key in ("late_injection_round", "injection_examples"):
            data["asl"].pop(key)
    assert one == other
    recipe = Path(__file__).parents[1] / "roleagent" / "recipes" / "asl_search_injection.yaml"
    assert "Figure 6b" in recipe.read_text()
