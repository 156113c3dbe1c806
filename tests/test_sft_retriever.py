"""The Agent-In-World retriever's warm start (``roleagent.sft.retriever``): its examples are
the AIW's Figure-9 prompts token for token, trained only on a selection of the most
relevant candidates, and its competence is read as the AIW reads an answer."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import pytest
import torch
from run_helpers import TINY, run
from test_metrics_doc import run_keys, undocumented
from test_sft_analyst import SFT, AnsweringEngine

from roleagent.config import load_config
from roleagent.engine.hf import HFEngine
from roleagent.envs.alfworld.diagnosis import FAILURE_TAXONOMY
from roleagent.fields import ConfigError
from roleagent.methods.role_agent.aiw.method import AgentInWorldMethod
from roleagent.methods.role_agent.aiw.prompts import RETRIEVAL_ANSWER_PREFIX, RETRIEVAL_STOP_AFTER_PREFIX
from roleagent.methods.role_agent.aiw.retrieval import parse_selection
from roleagent.methods.role_agent.config import AIWConfig
from roleagent.models.loading import load_policy
from roleagent.sft.analyst import analyst_examples
from roleagent.sft.data import check_example, encode_example
from roleagent.sft.retriever import (
    Library,
    against_fallback,
    competence,
    make_examples,
    retriever_competence,
    retriever_examples,
)
from roleagent.trainer import Trainer
from roleagent.types import Step, Task, Trajectory

#: (rule type, kind of task, goal) of six failures, one task each.
CASES = [
    ("wrong_receptacle", "pick_cool_then_place", "put a cool apple in fridge."),
    ("wrong_receptacle", "pick_cool_then_place", "put a cool mug in cabinet."),
    ("wrong_receptacle", "pick_and_place_simple", "put a pen in shelf."),
    ("navigation_loop", "pick_cool_then_place", "put a cool egg in microwave."),
    ("wrong_receptacle", "pick_heat_then_place", "put a hot potato in countertop."),
    ("missing_precondition", "pick_heat_then_place", "put a hot cup in cabinet."),
]


def failure(i: int) -> tuple[Trajectory, dict]:
    label, kind, goal = CASES[i]
    task = Task(id=f"alfworld/easy/train/{kind}/{i:04d}", env="alfworld", metadata={"task_type": kind})
    actions = ["go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "move apple 1 to countertop 1"]
    steps = [
        Step(observation=f"obs {t}", state_key=t, action_text=a, action=a, valid=True) for t, a in enumerate(actions)
    ]
    trajectory = Trajectory(task=task, steps=steps, success=False, instruction=f"Your task is to: {goal}")
    return trajectory, {"dominant_type": label, "detail": f"{label} at step 3", "critical_step": 3}


class Unanswered(dict):
    """Answers by prompt; a prompt without one (a query with no relevant candidate) gets none."""

    def __missing__(self, prompt):
        return " none"


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    return HFEngine(load_policy("tiny", device="cpu", lora_rank=0, seed=0), max_prompt_tokens=4096)


@pytest.mark.parametrize(
    "options", [{}, {"stop_at_close": False}, {"prefilter": "bm25", "top_k": 2}, {"candidate_entry": "query"}]
)
def test_examples_are_the_aiw_retrieval_prompts_trained_on_the_most_relevant(engine, tmp_path, options):
    aiw = AIWConfig(enabled=True, analyst="policy", retriever="policy", **options)
    failures = [failure(i) for i in range(len(CASES))]
    library = Library(failures, FAILURE_TAXONOMY, aiw, tmp_path / "library.sqlite")
    try:
        examples = retriever_examples(failures, library, FAILURE_TAXONOMY, aiw)
    finally:
        library.close()
    # the navigation loop and the missing precondition have no other failure of their type
    assert [e.meta["task"] for e in examples] == [failures[i][0].task.id for i in (0, 1, 2, 4)]
    first = examples[0].meta
    tasks = [
        m.split('"TASK": "')[1].split('"')[0] for m in examples[0].messages[1]["content"].splitlines() if '"TASK"' in m
    ]
    mug, pen = "Your task is to: put a cool mug in cabinet.", "Your task is to: put a pen in shelf."
    assert {mug: 2, pen: 1}.items() <= dict(zip(tasks, first["relevance"])).items()
    # each entry's REFLECTION: the type and its lesson, or with candidate_entry: query the
    # retrieval query, which names the kind of task
    entries = [x for x in examples[0].messages[1]["content"].splitlines() if '"REFLECTION"' in x]
    kinds = sum("in pick cool then place task: " in x for x in entries)
    assert kinds == (2 if aiw.candidate_entry == "query" else 0)  # the other two cool tasks' failures
    tok, answers = engine.tokenizer, Unanswered()
    for example in examples:
        check_example(example.to_json())
        target = example.messages[-1]["content"]
        rel = example.meta["relevance"]
        picks = parse_selection(target, len(rel), limit=aiw.top_k)
        best = sorted((i for i, r in enumerate(rel) if r), key=lambda i: (-rel[i], i))[: aiw.top_k]
        assert picks == best and target.startswith(RETRIEVAL_ANSWER_PREFIX) and target.endswith("</selected_tasks>")
        # the loss covers the selection after the prefix (and EOS without a stop string), nothing else
        answer = target[len(RETRIEVAL_ANSWER_PREFIX) :]
        assert [answer.find(s) for s in RETRIEVAL_STOP_AFTER_PREFIX] == [
            len(answer) - len("</selected_tasks>"),
            -1,
            -1,
            -1,
        ]
        ids = tok(answer, add_special_tokens=False)["input_ids"] + ([] if aiw.stop_at_close else [tok.eos_token_id])
        encoded, n = encode_example(engine, example), len(ids)
        assert encoded.ids[-n:] == ids and encoded.loss_mask == [0] * (len(encoded.ids) - n) + [1] * n
        answers[tuple(encoded.prompts[-1])] = answer
    # the AIW, analysing these failures as a trained analyst does and filing them all before it
    # retrieves (Alg. 1), prompts its retriever with exactly these ids and files these picks
    diagnoses = {t.task.id: d for t, d in failures}
    for example in analyst_examples(
        [t for t, _ in failures], FAILURE_TAXONOMY, aiw, diagnose=lambda t: diagnoses[t.task.id]
    ):
        prefix = example.response_prefix
        answers[tuple(encode_example(engine, example).prompts[-1])] = example.messages[-1]["content"][len(prefix) :]
    recorder = AnsweringEngine(engine, answers)
    context = SimpleNamespace(
        train_tasks=[t.task for t, _ in failures],
        run_dir=tmp_path,
        pool=SimpleNamespace(
            meta=SimpleNamespace(failure_taxonomy=FAILURE_TAXONOMY), diagnose=lambda t: diagnoses[t.task.id]
        ),
        engine=recorder,
        chat=functools.partial(Trainer.chat, SimpleNamespace(engine=recorder)),
    )
    method = AgentInWorldMethod(context, aiw)
    try:
        m = method.after_iteration([t for t, _ in failures], iteration=0)
        picked = {r["failure_id"]: r for r in method.aiw.memory.retrievals()}
    finally:
        method.close()
    asked = recorder.prompts[len(failures) :]
    assert [tuple(asked[i]) for i in (0, 1, 2, 4)] == [tuple(encode_example(engine, e).prompts[-1]) for e in examples]
    assert m["n_parse_fallback"] == 0 and m["n_retrieval_queries"] == len(failures)
    assert m["n_retrieval_fallback"] == len(failures) - len(examples)  # the two unanswered queries
    assert len(picked) > 0


def test_training_lists_are_shuffled_and_held_out_ones_keep_the_run_order(tmp_path):
    aiw = AIWConfig(enabled=True, analyst="policy", retriever="policy")
    failures = [failure(i) for i in range(len(CASES))]
    parts = make_examples(failures, failures[:3], FAILURE_TAXONOMY, aiw, tmp_path / "m.sqlite", seed=3)
    train, valid, shuffled = (
        parts["retriever.jsonl"],
        parts["retriever_valid.jsonl"],
        parts["retriever_valid_shuffled.jsonl"],
    )
    assert [e.meta["task"] for e in valid] == [e.meta["task"] for e in train[:3]] == [e.meta["task"] for e in shuffled]
    # the same candidates, other orders; the held-out list is the pre-filter's (same type first)
    for a, b in zip(valid, shuffled):
        assert sorted(a.meta["relevance"]) == sorted(b.meta["relevance"])
    first = valid[0].meta["relevance"]  # three other wrong receptacles, one of them a cool task
    assert sorted(first[:3]) == [1, 1, 2] and first[3:] == [0, 0]
    assert any(a.meta["relevance"] != b.meta["relevance"] for a, b in zip(valid, train))
    # a training target still names the most relevant candidates first, its ties drawn at random
    for e in train:
        rel, top_k = e.meta["relevance"], e.meta["top_k"]
        picked = [rel[i] for i in parse_selection(e.messages[-1]["content"], len(rel), limit=top_k)]
        assert picked == sorted(rel, reverse=True)[: len(picked)] and 0 not in picked


def test_competence_on_the_docstring_case():
    """Lists (1, 0, 2, 0) and (0, 1, 1), top-k 2; "[3] ... [1]" and "no idea" → parsed 1/2,
    type 0.75, skill 0.25; the fallback (first two) type 0.5, skill 0."""
    answer = RETRIEVAL_ANSWER_PREFIX + ' [3] "a"\nREASON: r.\nINDEX/TASK/REFLECTIONS: [1] "b"\n</selected_tasks>'
    result = competence([answer, "no idea"], [[1, 0, 2, 0], [0, 1, 1]], 2, [False, True])
    m = result.metrics
    assert [r["chosen"] for r in result.rows] == [[2, 0], [0, 1]]
    assert m["aiw_retriever/parsed"] == 0.5 and m["aiw_retriever/picked"] == 1.0
    assert m["aiw_retriever/type_precision"] == 0.75 and m["aiw_retriever/skill_precision"] == 0.25
    assert m["aiw_retriever/fallback_type_precision"] == 0.5 and m["aiw_retriever/fallback_skill_precision"] == 0.0
    assert m["aiw_retriever/truncated"] == 0.5 and m["aiw_retriever/queries"] == 2
    # per query against the fallback: same type +0.5 and 0, same kind of task +0.5 and 0
    assert (
        str(against_fallback(result, 1))
        == str(against_fallback(result, 2))
        == "+25.0 points, 1 up 0 down of 2, p=1: unresolved"
    )


def test_retriever_competence_generates_from_the_example_prompts(engine, tmp_path):
    aiw = AIWConfig(enabled=True, analyst="policy", retriever="policy")
    failures = [failure(i) for i in range(len(CASES))]
    examples = make_examples(failures, failures, FAILURE_TAXONOMY, aiw, tmp_path / "m.sqlite", seed=0)[
        "retriever_valid.jsonl"
    ]
    prompts = [tuple(encode_example(engine, e).prompts[-1]) for e in examples]
    answers = dict.fromkeys(prompts, " none")
    answers[prompts[0]] = examples[0].messages[-1]["content"][len(RETRIEVAL_ANSWER_PREFIX) :]
    canned = AnsweringEngine(engine, answers)
    result = retriever_competence(canned, examples, aiw, batch_size=3)
    assert [tuple(p) for p in canned.prompts] == prompts
    assert {s.temperature for s in canned.sampling} == {0.0} and {s.stop for s in canned.sampling} == {
        RETRIEVAL_STOP_AFTER_PREFIX
    }
    assert result.metrics["aiw_retriever/parsed"] == pytest.approx(1 / len(examples))
    assert result.rows[0]["picks"] == parse_selection(examples[0].messages[-1]["content"], 99)
    with pytest.raises(ValueError, match="selected_tasks"):
        retriever_competence(canned, examples, AIWConfig(answer_prefix=False))


def test_the_switch_needs_the_analyst_and_the_policy_retriever():
    aiw = ["aiw.enabled=true", "aiw.analyst=policy", "sft.analyst=true", "sft.retriever=true"]
    with pytest.raises(ConfigError, match="sft.retriever needs sft.analyst"):
        load_config(None, TINY + SFT + aiw + ["aiw.retriever=bm25"])
    with pytest.raises(ConfigError, match="sft.retriever needs sft.analyst"):
        load_config(None, TINY + SFT + aiw[:2] + ["aiw.retriever=policy", "sft.retriever=true"])


def test_warm_start_trains_and_measures_the_retriever(tmp_path):
    extra = ["aiw.enabled=true", "aiw.analyst=policy", "aiw.retriever=policy", "aiw.analysis_max_new_tokens=12"]
    extra += ["aiw.retrieval_max_new_tokens=12", "sft.analyst=true", "sft.retriever=true", "sft.analyst_tasks=3"]
    extra += ["sft.analyst_episodes=3", "sft.analyst_eval_tasks=2"]
    run(tmp_path / "run", 1, SFT + extra)
    sft = tmp_path / "run" / "sft"
    counts = json.loads((sft / "analyst_counts.json").read_text())
    train = [json.loads(x)["meta"] for x in (sft / "retriever.jsonl").read_text().splitlines()]
    held_out = [json.loads(x)["meta"] for x in (sft / "retriever_valid.jsonl").read_text().splitlines()]
    assert len(train) == counts["retriever_examples"] > 0 and len(held_out) == counts["retriever_valid_examples"] > 0
    assert not {m["task"] for m in held_out} & {m["task"] for m in train}
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    measured = [r for r in records if "retriever" in r]
    assert [r["retriever"] for r in measured] == ["base", "sft"]
    assert all(r["aiw_retriever/queries"] == len(held_out) for r in measured)
    assert undocumented(run_keys(tmp_path / "run")) == set()
