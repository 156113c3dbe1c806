"""Agent-In-World at its cost: the analyst's prompt layout, answer prefix, stop strings and
the one-off prefill of the prompts' shared prefix (Role-Agent: Wang et al., 2026, arXiv
2606.10917, Figure 8)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from roleagent.config import ConfigError, from_dict
from roleagent.methods.role_agent.aiw import AIWConfig
from roleagent.methods.role_agent.aiw.method import (
    MIN_SHARED_PREFIX_TOKENS,
    AgentInWorldMethod,
    prime_shared_prefix,
    shared_prefix_length,
)
from roleagent.methods.role_agent.aiw.prompts import (
    ANALYSIS_ANSWER_PREFIX,
    ANALYSIS_STOP,
    ANALYSIS_STOP_AFTER_PREFIX,
    RETRIEVAL_ANSWER_PREFIX,
    RETRIEVAL_STOP,
    RETRIEVAL_STOP_AFTER_PREFIX,
    analysis_messages,
)
from roleagent.methods.role_agent.aiw.reflection import parse_reflection
from roleagent.types import Task
from tests.test_aiw_orchestrator import TAXONOMY, TRAIN, ScriptedLLM, make_traj


def test_shared_first_layout_starts_every_prompt_with_the_instructions():
    a, b = make_traj(TRAIN[0]), make_traj(TRAIN[1])
    shared = [analysis_messages(t, TAXONOMY, layout="shared_first")[1]["content"] for t in (a, b)]
    paper = [analysis_messages(t, TAXONOMY, layout="paper")[1]["content"] for t in (a, b)]
    # the paper's order starts with the failure: the prompts part after "## Task Context\n"
    assert paper[0].startswith("## Task Context\n") and not paper[0][:40] == paper[1][:40]
    # shared_first: everything up to the failure's own text is identical
    head = shared[0].split("## Task Context")[0]
    assert shared[1].startswith(head) and head.startswith("## Failure Categories")
    assert "missing_precondition" in head and head.rstrip().endswith("</reflection>")
    # the same text in another order
    for s, p in zip(shared, paper):
        assert sorted(s.split("\n\n")) == sorted(p.split("\n\n"))
    with pytest.raises(ValueError, match="layout"):
        analysis_messages(a, TAXONOMY, layout="shuffled")


def test_analyst_prompt_is_a_checked_config_key():
    assert AIWConfig().analyst_prompt == "shared_first"
    with pytest.raises(ConfigError, match="aiw.analyst_prompt"):
        from_dict(AIWConfig, {"analyst_prompt": "reversed"}, "aiw").validate()
    assert from_dict(AIWConfig, {"analyst_prompt": "paper"}, "aiw").analyst_prompt == "paper"


def test_shared_prefix_length_hand_computed():
    assert shared_prefix_length([[1, 2, 3], [1, 2, 4], [1, 5]]) == 1
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 3
    assert shared_prefix_length([[7, 8], [9]]) == 0
    assert shared_prefix_length([]) == 0


class RecordingChat:
    """The trainer's chat, scripted: records each call's keywords and answers like a model
    whose answer was started with ``response_prefix`` (the answer omits the prefix) and cut
    at the first ``stop`` string (the answer keeps it)."""

    def __init__(self):
        self.llm = ScriptedLLM()
        self.calls: list[dict] = []

    def __call__(self, conversations, *, max_new_tokens=256, temperature=0.0, stop=(), response_prefix=""):
        self.calls.append(dict(n=len(conversations), max_new_tokens=max_new_tokens, stop=stop, prefix=response_prefix))
        out = []
        for full in self.llm(conversations):
            full = full + "\nDOMINANT_TYPE: other\n</reflection>"  # a second block a stop string cuts off
            assert full.startswith(response_prefix) or not full.startswith("<reflection>")
            answer = full[len(response_prefix) :] if full.startswith(response_prefix) else full
            cut = [answer.find(s) + len(s) for s in stop if s in answer]
            out.append(answer[: min(cut)] if cut else answer)
        return out


def _method(tmp_path, chat, **kw):
    pool = SimpleNamespace(meta=SimpleNamespace(failure_taxonomy=TAXONOMY), diagnose=lambda traj: None)
    tasks = [Task(id=t, env="toy") for t in TRAIN]
    context = SimpleNamespace(train_tasks=tasks, run_dir=tmp_path, pool=pool, chat=chat)
    return AgentInWorldMethod(context, AIWConfig(enabled=True, **kw))


def test_role_calls_are_bounded_by_stop_strings_and_prefix(tmp_path):
    chat = RecordingChat()
    method = _method(tmp_path, chat, analysis_max_new_tokens=100, retrieval_max_new_tokens=50)
    try:
        m = method.after_iteration([make_traj(TRAIN[i]) for i in range(6)], iteration=0)
        rows = method.aiw.memory.failures(limit=10)
    finally:
        method.close()
    analyst, retriever = chat.calls
    assert analyst == dict(n=6, max_new_tokens=100, stop=ANALYSIS_STOP_AFTER_PREFIX, prefix=ANALYSIS_ANSWER_PREFIX)
    assert retriever == dict(n=6, max_new_tokens=50, stop=RETRIEVAL_STOP_AFTER_PREFIX, prefix=RETRIEVAL_ANSWER_PREFIX)
    # the answers, cut at </reflection>, parse with every field; the stored raw answer
    # starts with the prefix the model did not write and ends at the stop string
    assert m["n_failures"] == 6 and m["n_parse_fallback"] == 0 and m["n_partial"] == 0
    assert m["n_type_other"] == 0 and m["prefix_reused_tokens"] == 0  # no engine here
    for row in rows:
        assert row.raw_output.startswith("<reflection>\nDOMINANT_TYPE: ") and row.raw_output.endswith("</reflection>")
        assert row.raw_output.count("DOMINANT_TYPE") == 1 and row.type_status == "exact"
        assert row.dominant_type == TAXONOMY[int(row.task_id[-2:]) % 3] and row.critical_step == 2


def test_paper_parity_options_send_no_stop_and_no_prefix(tmp_path):
    chat = RecordingChat()
    method = _method(tmp_path, chat, analyst_prompt="paper", answer_prefix=False, stop_at_close=False)
    try:
        method.after_iteration([make_traj(TRAIN[i]) for i in range(3)], iteration=0)
    finally:
        method.close()
    assert [(c["stop"], c["prefix"]) for c in chat.calls] == [((), ""), ((), "")]
    # without the prefix the answer may open with a heading: only the closing tag stops it
    chat = RecordingChat()
    method = _method(tmp_path / "b", chat, answer_prefix=False)
    try:
        method.after_iteration([make_traj(TRAIN[0]), make_traj(TRAIN[1])], iteration=0)
    finally:
        method.close()
    assert [(c["stop"], c["prefix"]) for c in chat.calls] == [(ANALYSIS_STOP, ""), (RETRIEVAL_STOP, "")]
    assert chat.calls[0]["max_new_tokens"] == AIWConfig().analysis_max_new_tokens


@pytest.mark.parametrize(
    "answer",
    [
        # cut at the stop string (the engine returns it)
        " navigation_loop\nDETAIL: kept walking\nCRITICAL_STEP: 2\nCORE_LESSON: stop looping\n"
        "RETRIEVAL_QUERY: loops\n</reflection>",
        # cut by the token limit inside the last field
        " navigation_loop\nDETAIL: kept walking\nCRITICAL_STEP: 2\nCORE_LESSON: stop looping\nRETRIEVAL_QUERY: lo",
        # cut at a heading (the model began echoing the prompt's sections)
        " navigation_loop\nDETAIL: kept walking\nCRITICAL_STEP: 2\nCORE_LESSON: stop looping\nRETRIEVAL_QUERY: loops\n## ",
        # cut at a blank line after the block's last field
        " navigation_loop\nDETAIL: kept walking\nCRITICAL_STEP: 2\nCORE_LESSON: stop looping\nRETRIEVAL_QUERY: loops\n\n",
    ],
)
def test_parser_reads_an_answer_after_the_prefix(answer):
    ref = parse_reflection(ANALYSIS_ANSWER_PREFIX + answer, TAXONOMY, source="policy")
    assert (ref.dominant_type, ref.type_status, ref.critical_step) == ("navigation_loop", "exact", 2)
    assert ref.core_lesson == "stop looping" and ref.retrieval_query.startswith("lo") and ref.parsed_ok


def test_priming_reuses_the_shared_prefix_and_changes_no_token(tiny_policy):
    from roleagent.engine.base import SamplingParams
    from roleagent.engine.hf import HFEngine

    convs = [analysis_messages(make_traj(TRAIN[i]), TAXONOMY, layout="shared_first") for i in range(3)]
    params = SamplingParams(max_new_tokens=5, temperature=0.5)
    texts = {}
    for primed in (False, True):
        engine = HFEngine(tiny_policy, max_prompt_tokens=2048, prefix_cache_tokens=8192)
        engine.seed(3)
        n = prime_shared_prefix(engine, convs) if primed else 0
        reused = engine.reused_prompt_tokens
        prompts = [engine.encode_chat(c) for c in convs]
        texts[primed] = [g.ids for g in engine.generate(prompts, params)]
        if primed:
            assert n == shared_prefix_length(prompts) >= MIN_SHARED_PREFIX_TOKENS
            # every row of the batch reused the primed prefix
            assert 3 * n <= engine.reused_prompt_tokens - reused <= 3 * (n + 1)
        else:
            assert engine.reused_prompt_tokens == 0
    assert texts[True] == texts[False]
    # nothing to share, or no prefix store: no call
    plain = HFEngine(tiny_policy, max_prompt_tokens=2048)
    assert prime_shared_prefix(plain, convs) == 0 and plain.prompt_tokens == 0
    assert prime_shared_prefix(None, convs) == 0


def test_an_unmappable_type_after_our_prefix_falls_back_to_the_rule_diagnosis(tmp_path):
    # the key DOMINANT_TYPE: was written for the model, so a value that maps to no label is
    # treated like an answer without the key: the rule diagnosis fills in
    def chat(conversations, *, max_new_tokens=256, temperature=0.0, stop=(), response_prefix=""):
        if response_prefix:  # the analyst
            return [" xyzzy plugh\nDETAIL: qwerty" for _ in conversations]
        return ["INDEX 1" for _ in conversations]

    pool = SimpleNamespace(
        meta=SimpleNamespace(failure_taxonomy=TAXONOMY), diagnose=lambda traj: {"dominant_type": "navigation_loop"}
    )
    tasks = [Task(id=t, env="toy") for t in TRAIN]
    context = SimpleNamespace(train_tasks=tasks, run_dir=tmp_path, pool=pool, chat=chat)
    method = AgentInWorldMethod(context, AIWConfig(enabled=True))
    try:
        m = method.after_iteration([make_traj(TRAIN[0]), make_traj(TRAIN[1])], iteration=0)
        rows = method.aiw.memory.failures(limit=10)
    finally:
        method.close()
    assert m["n_parse_fallback"] == 2 and m["n_rule"] == 2 and m["n_type_other"] == 0
    assert {(r.dominant_type, r.source) for r in rows} == {("navigation_loop", "rule")}
    # an answer that names a label, or "other" itself, is kept
    assert parse_reflection(ANALYSIS_ANSWER_PREFIX + " other", TAXONOMY).type_status == "exact"


def test_trainer_iteration_with_the_policy_analyst_reuses_the_shared_prefix(tmp_path):
    # through the trainer's own chat and engine (tiny model): the analyst's prompts share
    # their instructions, prefilled once, and every prompt of the batch reuses them
    from roleagent.trainer import Trainer
    from tests import run_helpers

    reused = {}
    for layout in ("shared_first", "paper"):
        extra = [
            "aiw.enabled=true",
            "aiw.analyst=policy",
            "aiw.retriever=bm25",
            f"aiw.analyst_prompt={layout}",
            "aiw.analysis_max_new_tokens=4",
            "rollout.prefix_cache_tokens=16384",
            "rollout.max_prompt_tokens=2048",
            "eval.at_start=false",
        ]
        trainer = Trainer(run_helpers.config(tmp_path / layout, 1, extra), quiet=True)
        try:
            record = trainer.train_iteration(0)
        finally:
            trainer.close()
        if record["aiw/n_failures"] < 2:
            pytest.skip("fewer than two failures to share a prefix")
        reused[layout] = record["aiw/prefix_reused_tokens"]
    # the paper's order shares only the system message and whatever the failures' own texts
    # have in common
    assert reused["shared_first"] >= MIN_SHARED_PREFIX_TOKENS * 2 and reused["shared_first"] > reused["paper"]


def test_retriever_answer_after_its_prefix_selects_the_named_candidates():
    from roleagent.methods.role_agent.aiw.retrieval import parse_selection

    # Figure 9's block started for the model and cut at a blank line
    answer = (
        RETRIEVAL_ANSWER_PREFIX + " [2] Put a clean cloth in toilet.\nREASON: same\nINDEX/TASK/REFLECTIONS: [4]\n\n"
    )
    assert parse_selection(answer, 5, limit=3) == [1, 3]
    # the model echoed the placeholder: nothing usable (the caller takes the top-k)
    assert parse_selection(RETRIEVAL_ANSWER_PREFIX + " <index, task and reflections>", 5) is None
