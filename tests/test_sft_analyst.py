"""Agent-In-World analyst warm start (``roleagent.sft.analyst``): its examples are the
prompts the AIW gives the policy analyst with a Figure-8 analysis of the rule diagnosis as
the only trained tokens, the AIW parses every target as the rule's reflection, its
competence metric on a hand case, and the recipe switch in a tiny warm-started run."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import pytest
import torch
from run_helpers import TINY, run
from test_metrics_doc import run_keys, undocumented

from roleagent.config import load_config
from roleagent.engine.base import Generation
from roleagent.engine.chat import encode_chat, prompt_fits
from roleagent.engine.hf import HFEngine
from roleagent.envs.alfworld.diagnosis import FAILURE_TAXONOMY
from roleagent.envs.workers import EnvPool
from roleagent.fields import ConfigError
from roleagent.methods.role_agent.aiw.method import AgentInWorldMethod
from roleagent.methods.role_agent.aiw.prompts import (
    ANALYSIS_ANSWER_PREFIX,
    ANALYSIS_STOP_AFTER_PREFIX,
    analysis_messages,
    render_trajectory,
)
from roleagent.methods.role_agent.aiw.roles import analyst_prefix, parse_answer
from roleagent.methods.role_agent.config import AIWConfig
from roleagent.models.loading import load_policy
from roleagent.rollout import RolloutSettings, run_episodes
from roleagent.sft.analyst import (
    analysis_target,
    analyst_competence,
    analyst_examples,
    competence,
    lesson,
    one_based,
)
from roleagent.sft.data import check_example, encode_example
from roleagent.sft.failures import per_game
from roleagent.trainer import Trainer
from roleagent.types import Step, Task, Trajectory

SFT = ["sft.enabled=true", "sft.expert_tasks=3", "sft.epochs=1", "sft.lr=1e-2", "eval.splits=[eval]"]
ANALYST = ["aiw.enabled=true", "aiw.analyst=policy", "aiw.retriever=bm25", "aiw.analysis_max_new_tokens=12"]


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    return HFEngine(load_policy("tiny", device="cpu", lora_rank=0, seed=0), max_prompt_tokens=4096)


@pytest.fixture(scope="module")
def failures(engine):
    """The tiny policy's failed episodes of the scripted corridor, and the env's pool."""
    settings = RolloutSettings(max_steps=4, action_format="action", max_new_tokens=6)
    with EnvPool("scripted", {}, slots=4, processes=False) as pool:
        tasks = pool.meta.tasks("train")[:4]
        played = run_episodes(engine=engine, pool=pool, jobs=[(t, 0) for t in tasks], settings=settings)[0]
        yield [t for t in played if not t.success], pool


class AnsweringEngine:
    """The tiny engine's chat encoding; each generation answers its prompt with the text
    ``answers`` maps it to (a prompt the AIW builds differently is a KeyError)."""

    def __init__(self, engine, answers):
        self.inner, self.answers, self.prompts, self.sampling = engine, answers, [], []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, sampling):
        self.prompts += prompts
        self.sampling.append(sampling)
        return [Generation(p, [1], [0.0], self.answers[tuple(p)], False) for p in prompts]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"analyst_prompt": "paper"},
        {"answer_prefix": False},
        {"stop_at_close": False, "analyst_prompt": "paper"},
        {"analysis_order": "evidence_first"},
        {"analysis_order": "action_first"},
    ],
)
def test_examples_are_the_aiw_analysis_prompts_trained_on_the_rule_analysis(engine, failures, tmp_path, options):
    trajectories, pool = failures
    aiw = AIWConfig(enabled=True, analyst="policy", retriever="bm25", **options)
    taxonomy = pool.meta.failure_taxonomy
    examples = analyst_examples(trajectories, taxonomy, aiw, diagnose=pool.diagnose)
    assert len(examples) == len(trajectories) > 0
    prefix = analyst_prefix(aiw)
    first = ANALYSIS_ANSWER_PREFIX if aiw.analysis_order == "type_first" else "<reflection>\nCRITICAL_STEP:"
    assert prefix == first * aiw.answer_prefix
    tok, answers, prompts = engine.tokenizer, {}, []
    for example in examples:
        check_example(example.to_json())  # a valid JSONL line of roleagent.sft.data
        encoded = encode_example(engine, example)
        target = example.messages[-1]["content"]
        assert target.startswith("<reflection>\n") and target.endswith("</reflection>") and "\n\n" not in target
        # the loss covers the analysis after the prefix (and EOS without a stop string), nothing else
        ids = tok(target[len(prefix) :], add_special_tokens=False)["input_ids"]
        ids += [] if aiw.stop_at_close else [tok.eos_token_id]
        n = len(ids)
        assert encoded.ids[-n:] == ids and encoded.ids[:-n] == encoded.prompts[-1]
        assert encoded.loss_mask == [0] * (len(encoded.ids) - n) + [1] * n
        answers[tuple(encoded.prompts[-1])] = target[len(prefix) :]
        prompts.append(encoded.prompts[-1])
    # the AIW, driven as the trainer drives it, prompts the policy with exactly these ids,
    # and files every target as the rule's reflection (no fallback)
    recorder = AnsweringEngine(engine, answers)
    context = SimpleNamespace(
        train_tasks=[t.task for t in trajectories],
        run_dir=tmp_path,
        pool=SimpleNamespace(meta=pool.meta, diagnose=pool.diagnose),
        engine=recorder,
        chat=functools.partial(Trainer.chat, SimpleNamespace(engine=recorder)),
    )
    method = AgentInWorldMethod(context, aiw)
    try:
        m = method.after_iteration(trajectories, iteration=0)
        rows = {r.task_id: r for r in method.aiw.memory.failures(limit=100)}
    finally:
        method.close()
    assert recorder.prompts == prompts
    assert recorder.sampling[0].max_new_tokens == aiw.analysis_max_new_tokens
    assert m["n_failures"] == len(examples) and m["n_parse_fallback"] == 0 and m["n_partial"] == 0
    for example in examples:
        row = rows[example.meta["task"]]
        assert (row.dominant_type, row.critical_step) == (example.meta["label"], example.meta["critical_step"])


def alfworld_failure() -> Trajectory:
    task = Task(
        id="alfworld/easy/train/pick_cool_then_place/0001",
        env="alfworld",
        metadata={"task_type": "pick_cool_then_place"},
    )
    actions = ["go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "move apple 1 to countertop 1"]
    steps = [
        Step(observation=f"obs {i}", state_key=i, action_text=a, action=a, valid=True) for i, a in enumerate(actions)
    ]
    return Trajectory(task=task, steps=steps, success=False, instruction="Your task is to: put a cool apple in fridge.")


@pytest.mark.parametrize("label", FAILURE_TAXONOMY)
def test_every_target_parses_as_its_rule_reflection_in_one_block(label):
    """The module docstring's worked example, for every ALFWorld failure type."""
    diagnosis = {
        "dominant_type": label,
        "detail": "put the apple 1 into the countertop 1 at step 3",
        "critical_step": 3,
    }
    target = analysis_target(alfworld_failure(), diagnosis, FAILURE_TAXONOMY)
    assert target.splitlines() == [
        "<reflection>",
        f"DOMINANT_TYPE: {label}",
        "DETAIL: put the apple 1 into the countertop 1 at step 4",
        'CRITICAL_STEP: Step 4, "move apple 1 to countertop 1"',
        f"CORE_LESSON: {lesson(label)}",
        f"RETRIEVAL_QUERY: {label.replace('_', ' ')} in pick cool then place task: put a cool apple in fridge.",
        "</reflection>",
    ]
    # generated after the prefix, the analysis stops at its closing tag and nowhere before
    answer = target[len(ANALYSIS_ANSWER_PREFIX) :]
    assert [answer.find(s) for s in ANALYSIS_STOP_AFTER_PREFIX] == [len(answer) - len("</reflection>"), -1, -1, -1]
    ref = parse_answer(target, FAILURE_TAXONOMY, AIWConfig())
    assert (ref.dominant_type, ref.type_status, ref.critical_step, ref.parsed_ok) == (label, "exact", 4, True)
    assert ref.core_lesson == lesson(label) and lesson(label) != lesson("something_else")
    # evidence first: the same lines, the step and the detail before the type, parsed alike
    lines = analysis_target(alfworld_failure(), diagnosis, FAILURE_TAXONOMY, "evidence_first").splitlines()
    assert lines == [target.splitlines()[i] for i in (0, 3, 2, 1, 4, 5, 6)]
    cfg = AIWConfig(analysis_order="evidence_first")
    assert parse_answer("\n".join(lines), FAILURE_TAXONOMY, cfg) == ref
    # action first: the action quoted before its step number, which still parses as step 4
    action = analysis_target(alfworld_failure(), diagnosis, FAILURE_TAXONOMY, "action_first").splitlines()
    assert action == [lines[0], 'CRITICAL_STEP: "move apple 1 to countertop 1", step 4', *lines[2:]]
    assert parse_answer("\n".join(action), FAILURE_TAXONOMY, AIWConfig(analysis_order="action_first")) == ref


def test_step_numbers_and_per_game_cap():
    assert one_based("from step 0 only idle; steps 11 left") == "from step 1 only idle; steps 12 left"
    made = [SimpleNamespace(meta={"task": g, "label": lab}) for g, lab in ["aa", "aa", "aa", "ab", "ba"]]
    assert [x.meta for x in per_game(made, 3)] == [made[i].meta for i in (0, 3, 1, 4)]
    assert per_game(made, 0) == made


def test_competence_on_a_hand_case():
    """The module docstring's example: rule labels wrong_receptacle ×3 (steps 4, 2, 2);
    a right answer, an off-taxonomy type mapped to navigation_loop with step 2, and prose
    without a type → parsed 2/3, agreement 1/3, critical step 2/3 (the second answer's
    step matches, its type does not: a step counts on its own)."""
    right = "<reflection>\nDOMINANT_TYPE: wrong_receptacle\nDETAIL: d\nCRITICAL_STEP: Step 4\nCORE_LESSON: l\n"
    right += "RETRIEVAL_QUERY: q\n</reflection>"
    other = "<reflection>\nDOMINANT_TYPE: navigation loop\nCRITICAL_STEP: Step 2, go\n</reflection>"
    result = competence(
        [right, other, "I think the agent failed"],
        ["wrong_receptacle"] * 3,
        [4, 2, 2],
        FAILURE_TAXONOMY,
        AIWConfig(),
        [False, False, True],
    )
    assert [r["type"] for r in result.rows] == ["wrong_receptacle", "navigation_loop", None]
    m = result.metrics
    assert m["aiw_analyst/parsed"] == pytest.approx(2 / 3) and m["aiw_analyst/complete"] == pytest.approx(1 / 3)
    assert m["aiw_analyst/agreement"] == pytest.approx(1 / 3) and m["aiw_analyst/critical_step"] == pytest.approx(2 / 3)
    assert m["aiw_analyst/truncated"] == pytest.approx(1 / 3) and m["aiw_analyst/failures"] == 3
    # an answer we started whose type maps to nothing is not parsed (the AIW falls back)
    started = ANALYSIS_ANSWER_PREFIX + " something odd\n</reflection>"
    assert competence([started], ["wrong_receptacle"], [1], FAILURE_TAXONOMY, AIWConfig()).rows[0]["parsed"] is False


def test_analyst_competence_generates_from_the_example_prompts(engine, failures):
    trajectories, pool = failures
    aiw = AIWConfig(enabled=True, analyst="policy")
    examples = analyst_examples(trajectories, pool.meta.failure_taxonomy, aiw, diagnose=pool.diagnose)
    prefix = len(ANALYSIS_ANSWER_PREFIX)
    answers = {tuple(encode_example(engine, e).prompts[-1]): " ... " for e in examples}
    first = encode_example(engine, examples[0]).prompts[-1]
    answers[tuple(first)] = examples[0].messages[-1]["content"][prefix:]
    canned = AnsweringEngine(engine, answers)
    result = analyst_competence(canned, examples, pool.meta.failure_taxonomy, aiw, batch_size=2)
    assert canned.prompts == [encode_example(engine, e).prompts[-1] for e in examples]
    assert {s.temperature for s in canned.sampling} == {0.0}
    assert {s.stop for s in canned.sampling} == {ANALYSIS_STOP_AFTER_PREFIX}
    assert result.rows[0]["type"] == examples[0].meta["label"] and result.rows[0]["complete"]
    assert result.metrics["aiw_analyst/agreement"] == pytest.approx(1 / len(examples))
    # examples written in one field order, measured with the other: refused, nothing generated
    with pytest.raises(ValueError, match="CRITICAL_STEP"):
        analyst_competence(canned, examples, pool.meta.failure_taxonomy, AIWConfig(analysis_order="evidence_first"))
    assert len(canned.prompts) == len(examples)


def test_the_switch_needs_the_policy_analyst():
    with pytest.raises(ConfigError, match="sft.analyst needs aiw.enabled"):
        load_config(None, TINY + SFT + ["sft.analyst=true"])
    with pytest.raises(ConfigError, match="sft.analyst needs aiw.enabled"):
        load_config(None, TINY + SFT + ANALYST + ["sft.analyst=true", "aiw.analyst=rule"])
    with pytest.raises(ConfigError, match="sft.analyst_tasks"):
        load_config(None, TINY + SFT + ANALYST + ["sft.analyst=true", "sft.analyst_tasks=0"])


def test_warm_start_trains_and_measures_the_analyst(tmp_path):
    extra = ["sft.analyst=true", "sft.analyst_tasks=2", "sft.analyst_episodes=3", "sft.analyst_eval_tasks=2"]
    run(tmp_path / "run", 1, SFT + ANALYST + extra)
    sft = tmp_path / "run" / "sft"
    counts = json.loads((sft / "analyst_counts.json").read_text())
    assert counts["analyst_episodes"] == counts["analyst_valid_episodes"] == 6
    train = [json.loads(line)["meta"] for line in (sft / "analyst.jsonl").read_text().splitlines()]
    held_out = [json.loads(line)["meta"] for line in (sft / "analyst_valid.jsonl").read_text().splitlines()]
    assert len(train) == counts["analyst_examples"] > 0 and len(held_out) == counts["analyst_valid_examples"] > 0
    expert = {json.loads(line)["meta"]["task"] for line in (sft / "expert.jsonl").read_text().splitlines()}
    assert not {m["task"] for m in held_out} & ({m["task"] for m in train} | expert)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    measured = [r for r in records if "analyst" in r]
    assert [r["analyst"] for r in measured] == ["base", "sft"]
    assert all(r["aiw_analyst/failures"] == len(held_out) for r in measured)
    assert undocumented(run_keys(tmp_path / "run")) == set()


def long_failure(seen: int) -> Trajectory:
    """An ALFWorld failure of 12 steps whose Figure-8 prompt is over 1024 tokens at the
    default budget; each observation lists ``seen`` × 3 receptacles (8: clipped to 400
    characters, the text over the budget; 3: the text within it, as in the main job)."""
    task = Task(id="alfworld/easy/train/pick_and_place_simple/0002", env="alfworld", metadata={})
    seen = ", ".join(f"a drawer {i}, a shelf {i}, a cabinet {i}" for i in range(1, seen + 1))
    steps_ = [
        Step(
            observation=f"You arrive at cabinet {i}. You see {seen}.", state_key=i, action_text=a, action=a, valid=True
        )
        for i, a in enumerate([f"go to cabinet {i}" for i in range(1, 13)])
    ]
    return Trajectory(task=task, steps=steps_, success=False, instruction="Your task is to: put a pen in shelf.")


@pytest.mark.parametrize("seen", [8, 3])
def test_a_long_failure_is_shortened_to_the_prompt_limit_not_cut_from_the_front(engine, tmp_path, seen):
    """An engine keeps a long prompt's last tokens, which would drop the system message and
    the instructions with the taxonomy; the analyst's prompt (example and AIW alike) instead
    shortens the trajectory until the whole prompt fits."""
    small = HFEngine(engine.policy, max_prompt_tokens=1024)
    aiw = AIWConfig(enabled=True, analyst="policy", retriever="bm25")
    failure = long_failure(seen)
    args = (FAILURE_TAXONOMY, aiw.analysis_chars, aiw.observation_chars, aiw.analyst_prompt)
    whole = analysis_messages(failure, *args)
    assert len(encode_chat(small.tokenizer, whole, response_prefix=ANALYSIS_ANSWER_PREFIX)) > 1024
    fits = prompt_fits(small)
    fit = functools.partial(fits, response_prefix=ANALYSIS_ANSWER_PREFIX)
    diagnosis = {"dominant_type": "repetitive_exploration", "detail": "d", "critical_step": 11}
    (example,) = analyst_examples([failure], FAILURE_TAXONOMY, aiw, diagnose=lambda t: diagnosis, fits=fits)
    prompt = encode_example(small, example).prompts[-1]
    assert len(prompt) <= 1024
    instructions, case = whole[1]["content"].split("## Task Context")
    text = example.messages[1]["content"]
    assert example.messages[0] == whole[0] and text.startswith(instructions + "## Task Context")
    assert text.count("OBSERVATION (step") < case.count("OBSERVATION (step")
    # the budget shrank to a tenth below the text it had rendered, and no further than it had to
    budget, shrinks = aiw.analysis_chars, 0
    while not fit(messages := analysis_messages(failure, FAILURE_TAXONOMY, budget, *args[2:])):
        budget, shrinks = (
            min(budget, len(render_trajectory(failure, budget, aiw.observation_chars))) * 9 // 10,
            shrinks + 1,
        )
    assert shrinks > 0 and example.messages[:-1] == messages
    # and the AIW prompts the policy with these ids
    target = example.messages[-1]["content"][len(ANALYSIS_ANSWER_PREFIX) :]
    recorder = AnsweringEngine(small, {tuple(prompt): target})
    context = SimpleNamespace(
        train_tasks=[failure.task],
        run_dir=tmp_path,
        pool=SimpleNamespace(meta=SimpleNamespace(failure_taxonomy=FAILURE_TAXONOMY), diagnose=lambda t: diagnosis),
        engine=recorder,
        chat=functools.partial(Trainer.chat, SimpleNamespace(engine=recorder)),
    )
    method = AgentInWorldMethod(context, aiw)
    try:
        m = method.after_iteration([failure], iteration=0)
    finally:
        method.close()
    assert recorder.prompts == [prompt] and m["n_parse_fallback"] == 0
    # without a tokenizer (a scripted engine) nothing is measured
    assert prompt_fits(SimpleNamespace()) is None
