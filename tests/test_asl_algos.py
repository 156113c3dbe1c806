"""ASL's pure parts (roleagent.algos.asl), its prompts and parsers, verification pairs,
the round files' cut-back on resume, and the ``asl`` config section, all by hand."""

from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import pytest
from run_helpers import checked_config

from roleagent.algos.asl import (
    EASIER,
    HARDER,
    acceptance,
    balance_per_question,
    follow_up,
    follow_up_hops,
    parse_verdict,
    plateaued,
    pooled_means,
    verdict_entropy,
)
from roleagent.config import ConfigError, validate
from roleagent.methods.asl.files import RoundFiles
from roleagent.methods.asl.prompts import PG_ITERATION_0, final_answer, meta_prompt, parse_pair
from roleagent.methods.asl.roles import verification_pairs
from roleagent.types import Task


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("conclusion: incorrect", 0),  # "incorrect" contains "correct"
        ("Conclusion: **correct**", 1),
        ("**Conclusion:** Wrong.", 0),
        ("<answer>\nconclusion: correct\n</answer>", 1),
        ("CONCLUSION :  not   correct", 0),
        ("conclusion:\n\n`correct`", 1),
        ("conclusion: correct ... on reflection, conclusion: wrong", 0),  # the last conclusion wins
        ("conclusion: wrong\nconclusion: correct", 1),
        ("conclusion: wrong\nconclusion: unsure", None),  # the last one decides, even unparsable
        ("conclusion: correct/wrong", None),  # the template echoed
        ("conclusion: correct or wrong", None),
        ("conclusion: correctly answered", None),
        ("conclusion: the answer is not correct", None),  # no verdict word first
        ("The answer is correct.", None),  # no conclusion
        ("", None),
    ],
)
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) == verdict


def test_verdict_entropy_by_hand():
    assert verdict_entropy([1, 0, 1, 0]) == pytest.approx(math.log(2))  # 50/50: ln 2
    assert verdict_entropy([1, 1, 1]) == 0.0  # unanimous
    assert verdict_entropy([0]) == 0.0
    assert verdict_entropy([1, 0, None]) == pytest.approx(math.log(3))  # three-way
    assert verdict_entropy([1, 1, 1, 0]) == pytest.approx(0.562335, abs=1e-6)  # −(¾ ln ¾ + ¼ ln ¼)
    assert verdict_entropy([2, 2, 1, 0]) == pytest.approx(1.039721, abs=1e-6)  # −(½ ln ½ + 2 · ¼ ln ¼)
    with pytest.raises(ValueError):
        verdict_entropy([])


def test_acceptance_k_of_c_by_hand():
    assert acceptance([1, 1, 1, 1, 0], 0.8) == (0.8, True)  # 4 of 5 ≥ 0.8
    assert acceptance([1, 1, 1, 0, None], 0.8) == (0.6, False)  # no verdict counts 0
    assert acceptance([1, 1, 1, 1, 1], 0.8) == (1.0, True)
    assert acceptance([0, 0, 0, 0, 0], 0.0) == (0.0, True)
    mean, kept = acceptance([1, 1, 0], 0.7)
    assert mean == pytest.approx(2 / 3) and not kept
    with pytest.raises(ValueError):
        acceptance([], 0.8)


def test_follow_up_by_hand():
    assert follow_up([1, 1, 0]) == HARDER  # 0.667 > 0.5
    assert follow_up([1, 0]) == EASIER  # 0.5 is not > 0.5
    assert follow_up([None, 0, 1]) == EASIER
    assert follow_up([1, 0, 0], threshold=0.3) == HARDER
    assert (follow_up_hops(2, HARDER), follow_up_hops(2, EASIER), follow_up_hops(1, EASIER)) == (3, 1, 1)


def test_balance_per_question_hand_case():
    """Issue 24's hand case: A's verdicts [1, 1, 1, 1] add nothing; B's [0, 0, 0, 1] add its
    1 and one of its 0s. Balancing the pooled labels kept three 1s of A and three 0s of B."""
    questions, labels = ["A"] * 4 + ["B"] * 4, [1, 1, 1, 1, 0, 0, 0, 1]
    seen = set()
    for seed in range(20):
        picked = balance_per_question(questions, labels, random.Random(seed))
        assert len(picked) == 2 and picked[1] == 7 and picked[0] in (4, 5, 6)
        seen.add(picked[0])
    assert seen == {4, 5, 6}  # the majority sample is random


def test_balance_per_question_ties_unanimity_and_limit():
    rng = random.Random(0)
    assert balance_per_question(["A", "A", "A", "A"], [1, 0, 0, 1], rng) == [0, 1, 2, 3]  # a tie: all
    assert balance_per_question(["A", "A", "B"], [1, 1, 0], rng) == []  # unanimous, single
    assert balance_per_question([], [], rng) == []
    # blocks: A 2 (a tie), B 4 (a tie), C 2 (its 0 and one of its two 1s); the newest first
    questions = ["A", "A", "B", "B", "B", "B", "C", "C", "C"]
    labels = [0, 1, 0, 0, 1, 1, 1, 1, 0]
    only_c = balance_per_question(questions, labels, random.Random(0), limit=5)  # B would make 6
    assert len(only_c) == 2 and only_c[0] in (6, 7) and only_c[1] == 8
    picked = balance_per_question(questions, labels, random.Random(0), limit=6)  # C and B; A would make 8
    assert picked[:4] == [2, 3, 4, 5] and picked[4] in (6, 7) and picked[5] == 8 and len(picked) == 6
    assert balance_per_question(questions, labels, random.Random(0), limit=1) == []
    assert len(balance_per_question(questions, labels, random.Random(0))) == 8


def test_grm_examples_are_balanced_per_question(tmp_path):
    """The GRM phase's data on the hand case: only B's (1, 0) pair, none of A's 1s."""
    method = _method(tmp_path)
    method.grm_pool = [
        {"question": q, "response": f"r{i}", "label": label, "source": q}
        for i, (q, label) in enumerate(zip(["A"] * 4 + ["B"] * 4, [1, 1, 1, 1, 0, 0, 0, 1]))
    ]
    examples = method._grm_examples()
    assert [r["source"] for r in examples] == ["B", "B"]
    assert sorted(r["label"] for r in examples) == [0, 1] and examples[-1]["response"] == "r7"
    assert [json.loads(line) for line in (tmp_path / "asl/round_0000/grm_train.jsonl").open()] == examples


def test_plateau_by_hand():
    assert not plateaued([0.1, 0.3, 0.5, 0.6], 2, 0.05)  # 0.55 − 0.2 = 0.35
    assert plateaued([0.5, 0.6, 0.58, 0.6], 2, 0.05)  # 0.59 − 0.55 = 0.04
    assert not plateaued([0.5, 0.6, 0.6], 2, 0.05)  # fewer than 2 windows
    assert plateaued([0.9, 0.4], 1, 0.0)  # a fall is a plateau too
    assert not plateaued([0.4, 0.5], 1, 0.05)
    with pytest.raises(ValueError):
        plateaued([1.0], 0, 0.1)


def test_pair_and_answer_parsing():
    assert parse_pair("<think>x</think><question> What is\n 1+1? </question>\n<answer> 2 </answer>") == (
        "What is 1+1?",
        "2",
    )
    assert parse_pair("<question>Q?</question>") is None  # no answer
    assert parse_pair("<question>Q?</question><answer>a</answer><answer>b</answer>") is None  # twice
    assert parse_pair("<question> </question><answer>a</answer>") is None
    assert final_answer("<search>x</search> then <answer>Paris</answer>") == "Paris"
    assert final_answer("<answer>a</answer><answer> b  c </answer>") == "b c"
    assert final_answer("Paris") is None


def test_meta_prompts_per_round():
    assert meta_prompt({"topic": "rivers"}, 0) == PG_ITERATION_0.format(topic="rivers")
    item = {"question": "Who directed Titanic?", "answer": "James Cameron", "flag": HARDER}
    first = meta_prompt(item, 1)
    assert "Most student CORRECTLY answer" in first and "a harder question" in first and "hop" not in first
    later = meta_prompt({**item, "flag": EASIER}, 2)
    assert "Most student WRONGLY answer" in later and "by removing one reasoning hop" in later


def test_generator_and_verifier_prompts_advertise_no_tool():
    """The PG and GRM write one turn and nothing runs a tool call, so no prompt of theirs
    may describe or ask for one (the paper's Figures 7-12 do: there, both roles retrieve)."""
    from roleagent.methods.asl.prompts import GRM_SYSTEM, PG_SYSTEM
    from roleagent.methods.asl.roles import grm_chat

    item = {"question": "Who directed Titanic?", "answer": "James Cameron"}
    texts = [PG_SYSTEM, GRM_SYSTEM, meta_prompt({"topic": "rivers"}, 0)]
    texts += [meta_prompt({**item, "flag": flag}, r) for flag in (HARDER, EASIER) for r in (1, 2, 3)]
    texts += [m["content"] for m in grm_chat("Q?", "A", with_system=True)]
    for text in texts:
        lowered = text.lower()
        assert not any(word in lowered for word in ("<search>", "tool", "retrieve")), text


def test_grm_evidence_sits_in_the_prompt_and_is_searched_once_per_question():
    """``asl.grm_retrieval``: the GRM's prompt shows the search results between the
    student's answer and the request; without them the prompt is Figure 12's, unchanged;
    each question is searched once while the store has room; an environment with no
    knowledge base is refused by name."""
    from roleagent.methods.asl.prompts import GRM_USER
    from roleagent.methods.asl.roles import grm_chat, grm_evidence

    plain = grm_chat("Q?", "A", with_system=False)[0]["content"]
    assert plain == GRM_USER.format(question="Q?", completion="A", evidence="")
    assert "A\n\nI want you to help me verify" in plain and "search" not in plain
    shown = grm_chat("Q?", "A", with_system=False, evidence="<information>Doc 1(Title: x) y</information>")
    assert shown[0]["content"] == plain.replace(
        "I want you", "A search of the knowledge base for the question returned:\n"
        "<information>Doc 1(Title: x) y</information>\n\nI want you"
    )  # fmt: skip

    class Env:
        name = "search"

        def __init__(self):
            self.asked = []

        def search_results(self, queries):
            self.asked.append(list(queries))
            return [f"<information>{q}</information>" for q in queries]

    env = Env()
    evidence = grm_evidence(env, limit=3)
    assert evidence(["a", "b", "a"]) == ["<information>a</information>", "<information>b</information>",
                                         "<information>a</information>"]  # fmt: skip
    assert evidence(["b", "c"])[1] == "<information>c</information>"
    assert env.asked == [["a", "b"], ["c"]]  # each question searched once
    evidence(["d"])  # the store is full: emptied, then filled with this call's questions
    assert env.asked[-1] == ["d"] and evidence(["a"]) == ["<information>a</information>"]
    with pytest.raises(ConfigError, match="asl.grm_retrieval: the 'scripted' environment has no knowledge base"):
        grm_evidence(type("Scripted", (), {"name": "scripted"})())


class Shelf:
    """A knowledge base of three hand passages: ``search_results`` shows the query and the
    passages whose title it names; ``retriever`` ranks every passage naming a query word."""

    name = "search"
    PASSAGES = {
        "Boron": "Symbol: B. Atomic number: 5.",
        "Carbon": "Symbol: C. Atomic number: 6.",
        "Tar": "A kind of: pitch.",
    }

    def __init__(self):
        self.asked, self.ranked = [], []
        self.retriever = SimpleNamespace(retrieve=self.retrieve, docs=[])

    def retrieve(self, queries, k):
        self.ranked += queries
        words = [set(q.lower().split()) for q in queries]
        docs = [{"id": t, "contents": f'"{t}"\n{p}'} for t, p in self.PASSAGES.items()]
        return [
            [
                {"document": d}
                for d in docs
                if w & set(d["contents"].lower().replace(".", " ").replace(":", " ").replace('"', " ").split())
            ][:k]
            for w in words
        ]

    def search_results(self, queries):
        self.asked += queries
        return [f"<information>{q}: " + " ".join(p for t, p in self.PASSAGES.items() if t in q) + "</information>"
                for q in queries]  # fmt: skip


def test_pg_evidence_opens_the_meta_prompt_and_is_drawn_per_prompt():
    """``asl.pg_retrieval``: the meta prompt opens with the search results (without them it
    is the figure's, unchanged); a topic's query is the title of a passage drawn from its
    pool, the same for the same key and varying over keys; a follow-up searches its
    question and answer; each topic is ranked once; no knowledge base is refused by name."""
    from roleagent.methods.asl.prompts import PG_EVIDENCE
    from roleagent.methods.asl.roles import PGEvidence, pg_chats, role_task, title_of

    item = {"question": "What is the symbol of boron?", "answer": "B", "flag": HARDER, "hops": 1}
    for plain in (meta_prompt({"topic": "symbol"}, 0), meta_prompt(item, 1), meta_prompt(item, 2)):
        assert plain.startswith(("Please generate", "I asked"))
    shown = meta_prompt(item, 2, "<information>x</information>")
    assert shown == PG_EVIDENCE.format(information="<information>x</information>") + meta_prompt(item, 2)
    assert shown.startswith("A search of the knowledge base returned:\n<information>x</information>\n\nBase")

    assert title_of({"contents": '"Boron"\nSymbol: B.'}) == "Boron"
    shelf = Shelf()
    evidence = PGEvidence(shelf, pool=2, seed=0)
    queries = [evidence.query({"topic": "symbol"}, f"t/{seed}") for seed in range(40)]
    assert set(queries) == {"Boron", "Carbon"}  # the pool: the 2 passages "symbol" ranks, never "Tar"
    assert queries == [evidence.query({"topic": "symbol"}, f"t/{seed}") for seed in range(40)]
    assert shelf.ranked == ["symbol", "Boron", "Carbon"]  # ranked once (then each title's search), then kept
    assert evidence.query(item, "any") == "What is the symbol of boron? B"
    assert evidence.query({"topic": "rivers"}, "k") == "rivers"  # nothing ranked: the topic itself
    named = PGEvidence(shelf, pool=2, queries={"elements": "atomic symbol"})  # asl.pg_topic_queries
    assert named.query({"topic": "elements"}, "t/0") in {"Boron", "Carbon"} and shelf.ranked[-3] == "atomic symbol"
    jobs = [(role_task("pg0", "search", "pg", {"topic": "symbol"}), s) for s in (7, 7, 8)]
    chats = pg_chats(jobs, 0, with_system=False, evidence=evidence)
    assert chats[0] == chats[1]  # a prompt's G samples share one search
    drawn = evidence.query({"topic": "symbol"}, "pg0/7")  # the key: the task and its environment seed
    assert chats[0][0]["content"] == meta_prompt({"topic": "symbol"}, 0, shelf.search_results([drawn])[0])
    assert shelf.asked[-4:-1] == [drawn, drawn, evidence.query({"topic": "symbol"}, "pg0/8")]  # one search a job
    assert pg_chats(jobs, 0, with_system=False)[0][0]["content"] == meta_prompt({"topic": "symbol"}, 0)
    with pytest.raises(ConfigError, match="asl.pg_retrieval: the 'scripted' environment has no knowledge base"):
        PGEvidence(type("Scripted", (), {"name": "scripted"})())
    with pytest.raises(ConfigError, match="no retriever"):
        PGEvidence(SimpleNamespace(name="search", search_results=shelf.search_results))


def test_pg_evidence_never_draws_a_passage_its_search_does_not_show():
    """A topic's pool keeps the passages its titles' searches show (the environment's topk);
    a draw that lands on another draws again from the same stream, so the draws that land
    on a shown passage are those of a plain draw; a pool with none shown gives the topic."""
    import random

    from roleagent.methods.asl.roles import PGEvidence

    docs = {t: {"id": t, "contents": f'"{t}"\nabout {t}'} for t in ("Boron", "Carbon", "Iron", "Iron ore", "there")}
    found = {"metal": ["Boron", "Carbon", "Iron"], "Boron": ["Boron"], "Carbon": ["Carbon"], "Iron": ["Iron ore"],
             "stopword": ["there"]}  # fmt: skip

    def retrieve(queries, k):
        return [[{"document": docs[t]} for t in found.get(q, [])][:k] for q in queries]

    env = SimpleNamespace(name="search", topk=1, search_results=lambda qs: [f"<information>{q}</information>" for q in qs],
                          retriever=SimpleNamespace(retrieve=retrieve))  # fmt: skip
    evidence = PGEvidence(env, pool=3, seed=0)
    pool = ["Boron", "Carbon", "Iron"]
    drawn = {key: evidence.query({"topic": "metal"}, key) for key in map(str, range(60))}
    assert set(drawn.values()) == {"Boron", "Carbon"}  # "Iron"'s search shows "Iron ore": never drawn
    plain = {key: pool[random.Random(f"0/{key}").randrange(3)] for key in drawn}
    assert "Iron" in plain.values()
    assert all(drawn[key] == title for key, title in plain.items() if title != "Iron")
    assert evidence.query({"topic": "stopword"}, "0") == "stopword"  # "there" shows nothing: the topic


def test_verification_pairs_by_hand():
    tasks = [
        Task("t0", "x", {}, "eval", {"question": "Capital of France?", "answers": ["Paris"]}),
        Task("t1", "x", {}, "eval", {"question": "Capital of Italy?", "answers": ["Rome"]}),
        Task("t2", "x", {}, "eval", {"question": "No gold"}),
        Task("t3", "x", {}, "eval", {"question": "Capital of Rome's country?", "answers": ["rome"]}),
    ]
    got = [(r["question"], r["response"], r["label"]) for r in verification_pairs(tasks, None, 3)]
    assert got == [
        ("Capital of France?", "Paris", 1),
        ("Capital of France?", "Rome", 0),
        ("Capital of Italy?", "Rome", 1),  # its wrong answer "rome" is the same text: skipped
        ("Capital of Rome's country?", "rome", 1),
        ("Capital of Rome's country?", "Paris", 0),
    ]
    tasks.append(Task("t4", "x", {}, "eval", {"question": "Capital of Switzerland?", "answers": ["Bern"]}))
    spread = [(r["question"], r["response"], r["label"]) for r in verification_pairs(tasks, None, 2, spread=True)]
    assert spread == [got[0], got[1], got[3], ("Capital of Rome's country?", "Bern", 0)]  # the 1st and 3rd of 4
    assert verification_pairs(tasks, None, 9, spread=True) == verification_pairs(tasks, None, 9)


def test_round_files_cut_back_to_the_checkpoint(tmp_path):
    files = RoundFiles(tmp_path)
    files.append(0, "questions.jsonl", [{"a": 1}, {"a": 2}])
    record = dict(files.rows)
    files.append(0, "questions.jsonl", [{"a": 3}])
    files.append(1, "questions.jsonl", [{"a": 4}])
    again = RoundFiles(tmp_path)
    again.restore(record)
    assert again.read(0, "questions.jsonl") == [{"a": 1}, {"a": 2}]
    assert not (tmp_path / "asl" / "round_0001").exists()
    (tmp_path / "asl" / "round_0000" / "questions.jsonl").write_text(json.dumps({"a": 1}) + "\n")
    with pytest.raises(RuntimeError, match="checkpoint recorded 2"):
        RoundFiles(tmp_path).restore(record)


def test_asl_config_section():
    cfg = checked_config(None, ["asl.enabled=true", "wia.enabled=false"])
    assert (cfg.asl.checks, cfg.asl.accept, cfg.asl.attempts) == (5, 0.8, 10)  # the authors' K, C and M
    validate(cfg)
    with pytest.raises(ConfigError, match=r"asl.accept=1.5"):
        validate(checked_config(None, ["asl.enabled=true", "wia.enabled=false", "asl.accept=1.5"]))
    with pytest.raises(ConfigError, match="wia.enabled"):
        validate(checked_config(None, ["asl.enabled=true", "wia.enabled=true"]))
    with pytest.raises(ConfigError, match="phase_min_iterations"):
        validate(checked_config(None, ["asl.enabled=true", "wia.enabled=false", "asl.phase_min_iterations=30"]))
    with pytest.raises(ConfigError):
        checked_config(None, ["asl.no_such_key=1"])


def _method(tmp_path, **settings):
    from types import SimpleNamespace

    from roleagent.methods.asl.config import ASLConfig
    from roleagent.methods.asl.method import ASLMethod

    config = ASLConfig(enabled=True, topics=["rivers", "music"], grm_eval_questions=0, **settings)
    cfg = SimpleNamespace(seed=0, env=SimpleNamespace(name="qa", train_split="train", eval_split="eval"))
    return ASLMethod(SimpleNamespace(run_dir=tmp_path, cfg=cfg), config)


def test_phases_end_on_count_and_plateau_and_skip_empty_ones(tmp_path):
    method = _method(tmp_path, pg_target_questions=2, phase_min_iterations=1, plateau_window=1, plateau_tolerance=0.0)
    question = {"id": "asl/q000000", "question": "Q?", "answer": "A", "hops": 1, "round": 0, "parent": None}
    method.pm_pool = [question]
    method.scored = [({"reward": 0.3}, 4)]
    expected = {"pg_reward": 0.3, "pg_questions": 1.0, "pg_grm_data": 0.0, "round": 0.0, "phase": 0.0}
    assert method.after_iteration([], 0) == expected
    assert method.phase == "pg"  # 1 of 2 questions
    method.pm_pool.append({**question, "id": "asl/q000001"})
    method.grm_pool = [{"question": "Q?", "response": "A", "label": 1, "source": "asl/q000000"}] * 3  # one class
    method.after_iteration([], 1)
    assert method.phase == "pm" and method.phase_iterations == 0  # GRM phase skipped: nothing to balance
    for reward, phase in ((0.2, "pm"), (0.5, "pm"), (0.5, "pg")):  # 0.5 − 0.5 ≤ 0: plateau
        method.scored = [({"reward": reward}, 4)]
        method.after_iteration([], 2)
        assert method.phase == phase
    assert method.round == 1 and method.pg_pool == [{"topic": "rivers"}, {"topic": "music"}]  # no follow-ups
    assert method.pm_pool == [] and method.grm_pool == []
    assert (tmp_path / "asl" / "round_0000" / "followups.jsonl").read_text() == ""


def test_phases_stop_at_their_limit(tmp_path):
    method = _method(tmp_path, pg_target_questions=5, phase_min_iterations=1, phase_max_iterations=2)
    for iteration in range(2):
        method.scored = [({"reward": 0.0}, 4)]
        method.after_iteration([], iteration)
    assert method.phase == "pg" and method.round == 1  # nothing kept in 2 iterations: the round ends


def test_pooled_means_weigh_each_round_by_its_trajectories():
    import doctest

    import roleagent.algos.asl

    assert doctest.testmod(roleagent.algos.asl).failed == 0
    rounds = [({"reward": 0.5, "unparsed": 0.25}, 4), ({"reward": 1.0}, 2)]
    assert pooled_means(rounds) == pytest.approx({"reward": 4 / 6, "unparsed": 1 / 6})
    assert pooled_means([({"reward": 0.1}, 3)]) == {"reward": 0.1}  # one round: as measured
    assert pooled_means([({"reward": 0.0}, 0), ({"reward": 0.0}, 0)]) == {"reward": 0.0}  # nothing played
