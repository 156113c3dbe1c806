"""Agent-In-World end to end with scripted role callables (no model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roleagent.config import ConfigError, from_dict
from roleagent.methods.role_agent.aiw import AgentInWorld, AIWConfig
from roleagent.methods.role_agent.aiw.prompts import ANALYSIS_ANSWER_PREFIX, RETRIEVAL_ANSWER_PREFIX
from roleagent.types import Step, Task, Trajectory

TAXONOMY = ("missing_precondition", "wrong_target_location", "navigation_loop", "action_format_error")
TRAIN = [f"toy/train/{i:02d}" for i in range(12)]
# task index → the failure type the scripted analyst reports for it
KIND = {i: TAXONOMY[i % 3] for i in range(12)}


def make_traj(task_id: str, success: bool = False, split: str = "train", crashed: bool = False) -> Trajectory:
    i = int(task_id.rsplit("/", 1)[1])
    task = Task(
        id=task_id, env="toy", split=split, metadata={"instruction": f"goal number {i} kind {KIND.get(i, 'x')}"}
    )
    steps = [
        Step(
            observation=f"room {t}",
            state_key=t,
            prompt_ids=[1],
            action_ids=[2],
            action_logprobs=[-0.1],
            action_text=f"go to shelf {t}",
            action=f"go to shelf {t}",
            valid=True,
        )
        for t in range(1, 4)
    ]
    return Trajectory(task=task, steps=steps, success=success, final_observation="end", crashed=crashed)


class ScriptedLLM:
    """Answers Figure-8 prompts with a reflection for the task's kind and Figure-9
    prompts with ``selection`` (a string, or a callable of the prompt)."""

    def __init__(self, selection="INDEX 1 REASON: same\nINDEX 2 REASON: same", analysis=None):
        self.calls: list[list[list[dict]]] = []
        self.selection = selection
        self.analysis = analysis

    def __call__(self, batch):
        self.calls.append(batch)
        out = []
        for messages in batch:
            system, user = messages[0]["content"], messages[1]["content"]
            if "diagnosing" in system:
                if self.analysis is not None:
                    out.append(self.analysis)
                    continue
                kind = user.split("kind ", 1)[1].split()[0]
                out.append(
                    f"<reflection>\nDOMINANT_TYPE: {kind}\nDETAIL: failed because "
                    f"of {kind.replace('_', ' ')}\nCRITICAL_STEP: Step 2, went wrong"
                    f"\nCORE_LESSON: avoid {kind.replace('_', ' ')}\n"
                    f"RETRIEVAL_QUERY: {kind.replace('_', ' ')} tasks\n</reflection>"
                )
            else:
                assert "curriculum designer" in system
                sel = self.selection
                out.append(sel(user) if callable(sel) else sel)
        return out


def new_aiw(tmp_path, **kw) -> AgentInWorld:
    return AgentInWorld(AIWConfig(**{"enabled": True, **kw}), TRAIN, tmp_path, TAXONOMY)


@pytest.mark.parametrize(
    "unit, boosted", [("tasks", ["toy/train/06"]), ("modes", ["toy/train/00", "toy/train/03", "toy/train/06"])]
)
def test_a_picked_mode_boosts_every_task_filed_under_it(tmp_path, unit, boosted):
    """retrieve_unit modes (the paper's library of unique failure modes): the retriever is
    offered modes, and the one it picks reaches all its tasks, not only the top-k."""
    llm = ScriptedLLM(selection="INDEX 1 REASON: same mode")
    aiw = new_aiw(tmp_path, retrieve_unit=unit, top_k=1, decay=1.0)
    aiw.process_failures([make_traj(t) for t in TRAIN[:9]], iteration=0, generate=llm)
    before = aiw.sampler.weights.copy()
    m = aiw.process_failures([make_traj("toy/train/09")], iteration=1, generate=llm)  # kind 0, as 0, 3 and 6
    prompt = llm.calls[-1][0][1]["content"]
    assert ("failure mode missing_precondition (3 tasks)" in prompt) == (unit == "modes")
    raised = [TRAIN[i] for i in np.flatnonzero(aiw.sampler.weights > before)]
    assert raised == boosted and m["n_retrieved"] == len(boosted)
    assert sorted(r["task_id"] for r in aiw.memory.retrievals(1)) == boosted  # each recorded in the memory


def test_end_to_end_policy_roles(tmp_path):
    llm = ScriptedLLM()
    aiw = new_aiw(tmp_path, decay=0.5, boost=1.0)
    rng = np.random.default_rng(0)
    batch = aiw.sample_tasks(6, rng)
    assert len(set(batch)) == 6 and set(batch) <= set(TRAIN)

    # iteration 0: tasks 0,1,2,3 fail (0 and 3 share "missing_precondition"); 4 succeeds
    trajs = [make_traj(TRAIN[i]) for i in (0, 1, 2, 3)] + [make_traj(TRAIN[4], success=True)]
    m0 = aiw.process_failures(trajs, iteration=0, generate=llm, diagnose=None)
    assert m0["n_failures"] == 4 and m0["n_failed_train"] == 4
    assert m0["n_parse_fallback"] == 0 and m0["n_type_mapped"] == 0
    assert m0["memory_modes"] == 3 and m0["memory_failures"] == 4
    # the analyst was called once, batched; the retriever once for those with candidates
    assert len(llm.calls[0]) == 4
    assert m0["n_retrieval_queries"] >= 1
    for key in (
        "sampler_entropy",
        "retrieved_share",
        "time_s",
        "n_retrieved",
        "n_retrieval_fallback",
        "n_candidates_mean",
    ):
        assert key in m0
    recs = aiw.memory.failures()
    assert sorted(r.task_id for r in recs) == sorted(TRAIN[i] for i in (0, 1, 2, 3))
    assert all(r.critical_step == 2 and r.source == "policy" for r in recs)
    # task 0 and task 3 are each other's best (same type) candidate: both boosted
    w = dict(zip(aiw.sampler.task_ids, aiw.sampler.weights))
    assert w[TRAIN[0]] > 1.0 and w[TRAIN[3]] > 1.0
    # never-failed tasks are untouched; retrieved tasks are never the failed task itself
    assert w[TRAIN[5]] == 1.0
    for r in aiw.memory.retrievals(0):
        failed = next(x for x in recs if x.id == r["failure_id"]).task_id
        assert r["task_id"] != failed
    assert aiw.sampler.entropy() < 1.0

    # iteration 1: task 6 (kind missing_precondition) fails and retrieves 0 and 3
    before = aiw.sampler.weights.copy()
    m1 = aiw.process_failures([make_traj(TRAIN[6])], iteration=1, generate=llm, diagnose=None)
    assert m1["n_failures"] == 1
    got = {r["task_id"] for r in aiw.memory.retrievals(1)}
    assert got == {TRAIN[0], TRAIN[3]}
    i0 = TRAIN.index(TRAIN[0])
    assert aiw.sampler.weights[i0] == pytest.approx(1 + (before[i0] - 1) * 0.5 + 1.0)
    # the sampler is redrawn per iteration and favours boosted tasks
    hits = sum(TRAIN[0] in aiw.sample_tasks(3, rng) for _ in range(400))
    assert hits / 400 > 0.3  # 0.25 under uniform sampling
    aiw.close()


def test_validation_and_foreign_trajectories_never_touch_the_curriculum(tmp_path):
    llm = ScriptedLLM()
    aiw = new_aiw(tmp_path)
    trajs = [
        make_traj("toy/eval/00", split="eval"),
        make_traj("toy/eval/01", split="eval"),
        make_traj("toy/train/99"),  # a "train" id the sampler does not know
        make_traj(TRAIN[0], crashed=True),
    ]
    m = aiw.process_failures(trajs, iteration=0, generate=llm, diagnose=None)
    assert m["n_rejected_non_train"] == 2 and m["n_unknown_task"] == 1
    assert m["n_crashed"] == 1 and m["n_failures"] == 0
    assert llm.calls == []
    assert aiw.memory.n_failures() == 0
    assert np.all(aiw.sampler.weights == 1.0)
    assert aiw.counters["rejected_non_train"] == 2
    # a retrieval result can never name a validation task: the memory holds none, and
    # the sampler ignores unknown ids
    assert aiw.sampler.boost(["toy/eval/00"]) == 0
    aiw.close()


def test_unparsable_reflection_falls_back_to_rule_then_heuristic(tmp_path):
    llm = ScriptedLLM(analysis="I am not sure what happened.")
    aiw = new_aiw(tmp_path, retriever="bm25")
    diag_calls = []

    def diagnose(traj):
        diag_calls.append(traj.task.id)
        if traj.task.id == TRAIN[0]:
            return {"dominant_type": "navigation_loop", "detail": "looped"}
        return None

    m = aiw.process_failures([make_traj(TRAIN[0]), make_traj(TRAIN[1])], iteration=0, generate=llm, diagnose=diagnose)
    assert m["n_parse_fallback"] == 2 and m["n_rule"] == 1 and m["n_heuristic"] == 1
    assert diag_calls == [TRAIN[0], TRAIN[1]]
    sources = {r.task_id: (r.source, r.dominant_type) for r in aiw.memory.failures()}
    assert sources[TRAIN[0]] == ("rule", "navigation_loop")
    assert sources[TRAIN[1]][0] == "fallback"
    raw = {r.task_id: r.raw_output for r in aiw.memory.failures()}
    assert raw[TRAIN[0]] == "I am not sure what happened."
    aiw.close()


def test_rule_analyst_and_bm25_retriever_need_no_llm(tmp_path):
    aiw = new_aiw(tmp_path, analyst="rule", retriever="bm25", top_k=1)

    def diagnose(traj):
        return {"dominant_type": KIND[int(traj.task.id[-2:])], "detail": "rule says so"}

    aiw.process_failures([make_traj(TRAIN[0]), make_traj(TRAIN[3])], iteration=0, generate=None, diagnose=diagnose)
    got = {(r["failure_id"], r["task_id"], r["method"]) for r in aiw.memory.retrievals(0)}
    assert {t for _, t, _ in got} == {TRAIN[0], TRAIN[3]}
    assert {m for _, _, m in got} == {"bm25"}
    assert all(r.source == "rule" for r in aiw.memory.failures())
    aiw.close()


def test_retrieval_fallback_counted(tmp_path):
    llm = ScriptedLLM(selection="Sorry, none of these.")
    aiw = new_aiw(tmp_path, top_k=1)
    m = aiw.process_failures([make_traj(TRAIN[0]), make_traj(TRAIN[3])], iteration=0, generate=llm, diagnose=None)
    assert m["n_retrieval_fallback"] == 2
    assert m["n_retrieved"] == 2  # fell back to the pre-filter's top-1 for each
    # a separate retrieval model can be passed
    other = ScriptedLLM(selection="[1]")
    m = aiw.process_failures([make_traj(TRAIN[6])], iteration=1, generate=llm, retrieval_generate=other, diagnose=None)
    assert m["n_retrieval_fallback"] == 0 and len(other.calls) == 1
    aiw.close()


def test_self_boost_and_cap_on_failures(tmp_path):
    llm = ScriptedLLM()
    aiw = new_aiw(tmp_path, self_boost=0.5, boost=0.0, max_failures_per_iter=3)
    trajs = [make_traj(TRAIN[0]), make_traj(TRAIN[0]), make_traj(TRAIN[1]), make_traj(TRAIN[2])]
    m = aiw.process_failures(trajs, iteration=0, generate=llm, diagnose=None)
    assert m["n_failures"] == 3 and m["n_over_cap"] == 1
    # round robin: one per task before a second for task 0
    assert sorted(r.task_id for r in aiw.memory.failures()) == sorted(TRAIN[:3])
    w = dict(zip(aiw.sampler.task_ids, aiw.sampler.weights))
    assert w[TRAIN[0]] == 1.5 and w[TRAIN[1]] == 1.5 and w[TRAIN[5]] == 1.0
    aiw.close()


def test_contract_errors(tmp_path):
    aiw = new_aiw(tmp_path)
    with pytest.raises(ValueError, match="generate"):
        aiw.process_failures([make_traj(TRAIN[0])], iteration=0, generate=None, diagnose=None)
    assert aiw.memory.n_failures() == 0
    with pytest.raises(ValueError, match="answers"):
        aiw.process_failures([make_traj(TRAIN[0])], iteration=0, generate=lambda batch: [], diagnose=None)
    aiw.process_failures([], iteration=0, generate=None, diagnose=None)
    with pytest.raises(ValueError, match="once per iteration"):
        aiw.process_failures([], iteration=0, generate=None, diagnose=None)
    aiw.close()
    with pytest.raises(ValueError):
        AIWConfig(analyst="oracle").validate()
    with pytest.raises(ConfigError, match="did you mean 'aiw.decay'"):
        from_dict(AIWConfig, {"decya": 0.5}, "aiw")
    assert from_dict(AIWConfig, {"decay": 0.5}, "aiw").decay == 0.5


def test_disabled_keeps_uniform(tmp_path):
    aiw = new_aiw(tmp_path, enabled=False)
    llm = ScriptedLLM()
    aiw.process_failures([make_traj(TRAIN[0])], iteration=0, generate=llm, diagnose=None)
    assert llm.calls == [] and np.all(aiw.sampler.weights == 1.0)
    aiw.close()


def test_state_dict_roundtrip_and_exact_resume(tmp_path):
    llm = ScriptedLLM()
    aiw = new_aiw(tmp_path)
    fails = [[0, 3, 1], [6, 2], [9, 4, 5]]
    for it in range(2):
        aiw.process_failures([make_traj(TRAIN[i]) for i in fails[it]], iteration=it, generate=llm, diagnose=None)
    ckpt = json.loads(json.dumps(aiw.state_dict()))
    weights_at_ckpt = aiw.sampler.weights.copy()
    n_at_ckpt = aiw.memory.n_failures()
    expected_batch = aiw.sample_tasks(4, np.random.default_rng(5))
    # the run continues one more iteration, then dies before the next checkpoint
    aiw.process_failures([make_traj(TRAIN[i]) for i in fails[2]], iteration=2, generate=llm, diagnose=None)
    after = (aiw.sampler.weights.copy(), aiw.memory.n_failures())
    aiw.close()

    resumed = new_aiw(tmp_path)
    resumed.load_state_dict(ckpt)
    assert np.array_equal(resumed.sampler.weights, weights_at_ckpt)
    assert resumed.memory.n_failures() == n_at_ckpt  # iteration-2 rows dropped
    assert resumed.last_iteration == 1
    assert resumed.sample_tasks(4, np.random.default_rng(5)) == expected_batch
    resumed.process_failures([make_traj(TRAIN[i]) for i in fails[2]], iteration=2, generate=llm, diagnose=None)
    assert np.array_equal(resumed.sampler.weights, after[0])
    assert resumed.memory.n_failures() == after[1]
    assert resumed.state_dict()["counters"]["failures"] == 8
    resumed.close()


def test_exception_in_generate_rolls_back_and_can_retry(tmp_path):
    aiw = new_aiw(tmp_path)
    llm = ScriptedLLM()
    aiw.process_failures([make_traj(TRAIN[0])], iteration=0, generate=llm, diagnose=None)
    weights = aiw.sampler.weights.copy()
    n = aiw.memory.n_failures()

    def broken(batch):
        raise RuntimeError("engine died")

    with pytest.raises(RuntimeError):
        aiw.process_failures([make_traj(TRAIN[3])], iteration=1, generate=llm, retrieval_generate=broken, diagnose=None)
    assert aiw.memory.n_failures() == n and len(aiw.retriever) == n
    assert np.array_equal(aiw.sampler.weights, weights)
    m = aiw.process_failures([make_traj(TRAIN[3])], iteration=1, generate=llm, diagnose=None)
    assert m["n_failures"] == 1 and aiw.memory.n_failures() == n + 1
    aiw.close()


def test_method_makes_one_bounded_call_per_role(tmp_path):
    # through the plug-in (the trainer's batched chat): every failure of the iteration in ONE
    # analyst call at analysis_max_new_tokens, and ONE retrieval call at
    # retrieval_max_new_tokens; this bounds Agent-In-World's generation to two batched calls
    from types import SimpleNamespace

    from roleagent.methods.role_agent.aiw.method import AgentInWorldMethod

    llm = ScriptedLLM()
    calls = []

    def chat(conversations, *, max_new_tokens=256, temperature=0.0, stop=(), response_prefix=""):
        calls.append((len(conversations), max_new_tokens))
        return [a.removeprefix(response_prefix) for a in llm(conversations)]

    pool = SimpleNamespace(meta=SimpleNamespace(failure_taxonomy=TAXONOMY), diagnose=lambda traj: None)
    tasks = [Task(id=t, env="toy") for t in TRAIN]
    context = SimpleNamespace(train_tasks=tasks, run_dir=tmp_path, pool=pool, chat=chat)
    method = AgentInWorldMethod(
        context, AIWConfig(enabled=True, analysis_max_new_tokens=256, retrieval_max_new_tokens=160)
    )
    try:
        m = method.after_iteration([make_traj(TRAIN[i]) for i in range(6)], iteration=0)
        m1 = method.after_iteration([make_traj(TRAIN[i]) for i in range(6, 12)], iteration=1)
    finally:
        method.close()
    assert m["n_failures"] == 6 and m1["n_failures"] == 6
    assert calls[0] == (6, 256) and calls[1][1] == 160 and calls[2] == (6, 256) and calls[3][1] == 160
    assert len(calls) == 4 and calls[3][0] == m1["n_retrieval_queries"] == 6


def test_llm_retriever_sees_the_best_candidates_whose_prompt_fits(tmp_path):
    """Within a prompt limit (``fits``) the retriever is shown the highest-ranked candidates
    whose Figure-9 prompt fits, not a prompt the engine cuts from the front; the analyst's
    prompt is measured with its own answer prefix."""
    prompts, asked = {}, []
    for limit in (None, 4):
        aiw = new_aiw(tmp_path / str(limit), top_k=1)
        llm = ScriptedLLM(selection="[1]")
        aiw.process_failures([make_traj(TRAIN[i]) for i in range(9)], iteration=0, generate=llm, diagnose=None)

        def fits(messages, prefix, limit=limit):
            shown = messages[1]["content"].count('"TASK":')
            asked.append((limit, prefix, shown))
            return "diagnosing" in messages[0]["content"] or shown <= limit

        later = ScriptedLLM(selection="[1]")
        m = aiw.process_failures(
            [make_traj(TRAIN[9])], iteration=1, generate=later, diagnose=None, fits=None if limit is None else fits
        )
        user = later.calls[-1][0][1]["content"]
        prompts[limit] = [line for line in user.splitlines() if line.startswith("[")]
        assert m["n_retrieval_fallback"] == 0 and m["n_candidates_mean"] == len(prompts[limit])
        aiw.close()
    assert len(prompts[None]) > 4 and prompts[4] == prompts[None][:4]
    retrieval = [(prefix, shown) for _, prefix, shown in asked if shown]
    assert retrieval == [(RETRIEVAL_ANSWER_PREFIX, n) for n in range(len(prompts[None]), 3, -1)]
    assert (4, ANALYSIS_ANSWER_PREFIX, 0) in asked
