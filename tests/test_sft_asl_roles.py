"""ASL's prompt generator and verifier warm start (``roleagent.sft.asl_roles``,
``roleagent.sft.asl_warm_start``): the examples' prompts are the method's token for token,
the loss covers the role's reply and its end-of-turn token only, follow-up pairs and
distractors on hand questions, the competence functions on hand replies (a real BM25
retriever served on 127.0.0.1), and the recipe switch in a tiny warm-started run."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest
import torch
from test_metrics_doc import run_keys, undocumented

from roleagent.algos.asl import EASIER, HARDER, parse_verdict
from roleagent.config import load_config
from roleagent.engine.base import Generation
from roleagent.engine.hf import HFEngine
from roleagent.envs.search.text import normalize_answer
from roleagent.fields import ConfigError
from roleagent.methods.asl.config import ASLConfig
from roleagent.methods.asl.method import ASLMethod
from roleagent.methods.asl.prompts import meta_prompt
from roleagent.methods.asl.roles import PGEvidence, grm_evidence, role_task
from roleagent.models.loading import load_policy
from roleagent.sft.asl_competence import generate, generator_competence, gold_answers, verifier_competence
from roleagent.sft.asl_roles import (
    contains,
    evidence_check,
    follow_up_parents,
    generator_examples,
    pair_target,
    verdict_target,
    verifier_examples,
)
from roleagent.sft.asl_warm_start import competence, drawn_examples, valid_file
from roleagent.sft.data import check_example, encode_example, write_examples
from roleagent.trainer import Trainer
from roleagent.trainer.stages import Iteration
from roleagent.types import Task


def qa(tid, question, answers, kind, support):
    meta = {"answers": answers, "hops": len(support), "question_type": kind, "support": support}
    return Task(id=tid, env="search", payload={"question": question}, split="train", metadata=meta)


NUMBER = qa("n", "What is the atomic number of beryllium?", ["4"], "element_number", ["be"])
PREVIOUS = qa("p", "Which chemical element has an atomic number one less than that of beryllium?", ["lithium"],
              "previous_element", ["be", "li"])  # fmt: skip
BLINK = qa("b", "In WordNet, a blink is a kind of what?", ["reflex", "reflex action"], "hypernym", ["blink"])
WINK = qa("w", "In WordNet, a wink is a kind of what?", ["Reflex"], "hypernym", ["wink"])
NOD = qa("d", "In WordNet, a nod is a kind of what?", ["gesture"], "hypernym", ["nod"])
POOL = [NUMBER, PREVIOUS, BLINK, WINK, NOD]


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    return HFEngine(load_policy("tiny", device="cpu", lora_rank=0, seed=0), max_prompt_tokens=4096)


class Recording:
    """An engine whose generations are canned texts; it records the prompts it is given."""

    def __init__(self, engine, text="<answer>\nconclusion: correct\n</answer>"):
        self.inner, self.text, self.prompts, self.sampling = engine, text, [], []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, sampling, allowed=None):
        self.prompts += [list(p) for p in prompts]
        self.sampling.append(sampling)
        return [Generation(list(p), [1], [0.0], self.text, True) for p in prompts]


class Library:
    """A knowledge base with one hand passage per question (``search_results``)."""

    name = "search"

    def search_results(self, queries):
        return [f"<information>Doc 1(Title: {q[:12]}) about {q}</information>" for q in queries]


class Passages(Library):
    """A knowledge base of hand passages: a search shows those whose title the query names;
    the retriever ranks them all for any query."""

    TEXT = {"Beryllium": "Symbol: Be. Atomic number: 4.", "Lithium": "Symbol: Li. Atomic number: 3.",
            "blink": "A kind of: reflex."}  # fmt: skip
    TITLES = {"be": "Beryllium", "li": "Lithium", "blink": "blink"}  # passage id -> title
    retriever = SimpleNamespace(
        retrieve=lambda queries, k: [
            [{"document": {"id": t, "contents": f'"{t}"\n{p}'}} for t, p in Passages.TEXT.items()][:k] for _ in queries
        ]
    )

    def search_results(self, queries):
        found = [" ".join(f"{t}: {p}" for t, p in self.TEXT.items() if t.lower() in q.lower()) for q in queries]
        return [f"<information>{text}</information>" for text in found]


def method_prompts(engine, tmp_path, phase, round_index, records, with_system, retrieval=False, pg_retrieval=False):
    """The prompts ASLMethod.collect gives ``engine`` for these role records."""
    recording = Recording(engine)
    context = SimpleNamespace(run_dir=tmp_path, engine=recording, settings=SimpleNamespace(temperature=1.0, top_p=1.0),
                              cfg=SimpleNamespace(env=SimpleNamespace(name="search"), seed=0),
                              pool=SimpleNamespace(meta=Passages() if pg_retrieval else Library()))  # fmt: skip
    config = ASLConfig(enabled=True, system_prompts=with_system, grm_retrieval=retrieval, pg_retrieval=pg_retrieval)
    method = ASLMethod(context, config)
    method.phase, method.round = phase, round_index
    method.collect(Iteration(0, [(role_task(f"t{i}", "search", phase, r), 0) for i, r in enumerate(records)]))
    return recording.prompts


@pytest.mark.parametrize("with_system", [True, False])
def test_generator_examples_are_the_method_prompts_with_the_pair_as_the_only_target(engine, tmp_path, with_system):
    examples = generator_examples([NUMBER, PREVIOUS, BLINK], POOL, with_system=with_system)
    # a topic example per question; PREVIOUS follows up NUMBER (Figure 11, round 2: index 1), NUMBER follows up PREVIOUS
    assert [(e.meta["task"], e.meta["prompt"], e.meta["round"]) for e in examples] == [
        ("n", "topic", 0), ("n", "follow_up", 1), ("p", "topic", 0), ("p", "follow_up", 2), ("b", "topic", 0),
    ]  # fmt: skip
    assert examples[0].messages[-2]["content"].startswith("Please generate a question about chemistry.\n")
    assert "generate a harder question" in examples[3].messages[-2]["content"]
    assert "by adding one reasoning hop" in examples[3].messages[-2]["content"]
    assert "What is the atomic number of beryllium?\n\nThe true answer" in examples[3].messages[-2]["content"]
    assert "generate a easier question" in examples[1].messages[-2]["content"]  # the paper's wording
    eos = engine.tokenizer.eos_token_id
    for example in examples:
        check_example(example.to_json())
        record = {"topic": example.meta["topic"]} if example.meta["prompt"] == "topic" else None
        if record is None:
            parent = POOL[[t.id for t in POOL].index(example.meta["parent"])]
            record = {"question": parent.payload["question"], "answer": parent.metadata["answers"][0],
                      "flag": example.meta["flag"]}  # fmt: skip
        prompt = method_prompts(engine, tmp_path, "pg", example.meta["round"], [record], with_system)[0]
        encoded = encode_example(engine, example)
        assert encoded.prompts[-1] == prompt  # token for token the method's PG prompt
        target = engine.tokenizer(pair_target(example.meta["question"], example.meta["answer"]),
                                  add_special_tokens=False)["input_ids"] + [eos]  # fmt: skip
        assert encoded.ids == prompt + target
        assert encoded.loss_mask == [0] * len(prompt) + [1] * len(target)


def test_grounded_generator_examples_open_with_results_holding_their_answer(engine, tmp_path):
    """``asl.pg_retrieval``: a round-0 example shows the results for the title of the
    question's answer passage, a follow-up the method's own search, token for token its
    prompt; an example whose answer the results do not hold, or without a title, is left out."""
    kb = Passages()
    with pytest.raises(ValueError, match="titles"):
        generator_examples([NUMBER], POOL, with_system=True, evidence=PGEvidence(kb))
    examples = generator_examples([NUMBER, PREVIOUS, BLINK, NOD], POOL, with_system=True, evidence=PGEvidence(kb),
                                  titles=Passages.TITLES)  # fmt: skip
    # PREVIOUS's follow-up of NUMBER searches "…beryllium? 4": no lithium; NOD has no titled passage
    assert [(e.meta["task"], e.meta["prompt"]) for e in examples] == [
        ("n", "topic"), ("n", "follow_up"), ("p", "topic"), ("b", "topic"),
    ]  # fmt: skip
    assert [e.meta["pg_evidence"] for e in examples if e.meta["prompt"] == "topic"] == kb.search_results(
        ["Beryllium", "Lithium", "blink"]
    )
    for example in examples:
        shown, prompt = example.meta["pg_evidence"], example.messages[-2]["content"]
        assert prompt.startswith(f"A search of the knowledge base returned:\n{shown}\n\n") and shown in prompt
        assert contains(shown, example.meta["answer"]) and not contains(
            example.meta["question"], example.meta["answer"]
        )
        if example.meta["prompt"] == "topic":
            assert prompt == meta_prompt({"topic": example.meta["topic"]}, 0, shown)
            continue
        record = {"question": PREVIOUS.payload["question"], "answer": "lithium", "flag": example.meta["flag"]}
        method = method_prompts(engine, tmp_path, "pg", example.meta["round"], [record], True, pg_retrieval=True)
        assert encode_example(engine, example).prompts[-1] == method[0]


def test_supported_counts_answers_in_the_results_shown_and_drawn_prompts_replace_them():
    texts = [
        "<question>What is the atomic number of beryllium?</question><answer>4</answer>",  # in the results
        "<question>What is the atomic number of beryllium?</question><answer>5</answer>",  # not in them
        "<question>Which element is lithium?</question><answer>lithium</answer>",  # in the question
        "no pair",
    ]
    shown = ["<information>Beryllium: Atomic number: 4.</information>"] * 2 + ["Lithium"] * 2
    result = generator_competence(texts, [False] * 4, None, shown=shown)
    assert [r.get("supported") for r in result.rows] == [True, False, False, None]
    assert result.metrics["asl_generator/supported"] == 0.25
    assert generator_competence(texts, [False] * 4, None).metrics["asl_generator/supported"] != 0.25  # NaN
    kb = Passages()
    held = generator_examples([NUMBER, PREVIOUS], POOL, with_system=True, evidence=PGEvidence(kb),
                              titles=Passages.TITLES)  # fmt: skip
    drawn = drawn_examples(held, PGEvidence(kb, seed=3), with_system=True)
    assert [e.meta["prompt"] for e in drawn] == [e.meta["prompt"] for e in held] and drawn[1] is held[1]  # follow-up
    for old, new in zip(held, drawn):
        if old.meta["prompt"] == "topic":
            title = PGEvidence(kb, seed=3).query({"topic": "chemistry"}, old.meta["task"])
            assert new.meta["pg_evidence"] == kb.search_results([title])[0]
            assert new.messages[-2]["content"] == meta_prompt({"topic": "chemistry"}, 0, new.meta["pg_evidence"])
            assert new.messages[-1] == old.messages[-1] and new.messages[0] == old.messages[0]


@pytest.mark.parametrize("with_system,retrieval", [(True, False), (False, False), (True, True)])
def test_verifier_examples_are_the_method_grm_prompts_with_the_exact_match_verdict(
    engine, tmp_path, with_system, retrieval
):
    """With ``asl.grm_retrieval`` both show the question's search results, the same text."""
    evidence = grm_evidence(Library()) if retrieval else None
    examples = verifier_examples(POOL, POOL, with_system=with_system, seed=3, evidence=evidence)
    records = [{"question": e.meta["question"], "response": e.meta["attempt"]} for e in examples]
    prompts = method_prompts(engine, tmp_path, "grm", 0, records, with_system, retrieval)
    assert all(("about " + e.meta["question"] in e.messages[-2]["content"]) == retrieval for e in examples)
    assert all(e.meta["evidence"] == retrieval for e in examples)
    eos = engine.tokenizer.eos_token_id
    for example, prompt in zip(examples, prompts, strict=True):
        encoded = encode_example(engine, example)
        assert encoded.prompts[-1] == prompt
        target = engine.tokenizer(verdict_target(example.meta["label"]), add_special_tokens=False)["input_ids"]
        assert encoded.ids == prompt + target + [eos]
        assert encoded.loss_mask == [0] * len(prompt) + [1] * (len(target) + 1)
        assert parse_verdict(example.messages[-1]["content"]) == example.meta["label"]  # the method's parser


def test_the_evidence_check_precedes_the_verdict_in_the_target_and_carries_the_loss(engine):
    """``sft.asl_verifier_check``: the same prompts; the target states whether the results
    contain the student's answer, then the verdict, and the whole reply is trained."""

    def evidence(questions):  # holds the gold answer of the beryllium questions only
        return [
            f"<information>Doc 1 {'4 and lithium' if 'beryllium' in q else 'nothing'}</information>" for q in questions
        ]

    checked = verifier_examples(POOL, POOL, with_system=True, seed=3, evidence=evidence, check=True)
    plain = verifier_examples(POOL, POOL, with_system=True, seed=3, evidence=evidence)
    assert {e.meta["attempt_in_evidence"] for e in checked} == {True, False}
    eos = engine.tokenizer.eos_token_id
    for example, base in zip(checked, plain, strict=True):
        assert example.messages[:-1] == base.messages[:-1] and example.meta == base.meta
        reply = example.messages[-1]["content"]
        found = example.meta["attempt_in_evidence"]
        assert reply == evidence_check(example.meta["attempt"], found) + verdict_target(example.meta["label"])
        assert ("do not contain it" in reply) != found and example.meta["attempt"] in reply
        assert parse_verdict(reply) == example.meta["label"]
        prompt = encode_example(engine, base).prompts[-1]
        encoded = encode_example(engine, example)
        target = engine.tokenizer(reply, add_special_tokens=False)["input_ids"]
        assert encoded.ids == prompt + target + [eos]
        assert encoded.loss_mask == [0] * len(prompt) + [1] * (len(target) + 1)
    with pytest.raises(ValueError, match="asl.grm_retrieval"):
        verifier_examples(POOL, POOL, with_system=True, check=True)


def test_the_grm_judges_with_the_search_results_it_was_trained_on(engine, tmp_path):
    """The K checks, the verdicts on the policy and the per-round measurement (``_judge``)
    give the GRM the same prompts as its own phase (``collect``) and its warm start."""
    records = [{"question": "Q one?", "response": "A"}, {"question": "Q two?", "response": "B"}]
    trained = method_prompts(engine, tmp_path, "grm", 0, records, True, retrieval=True)
    recording = Recording(engine)
    context = SimpleNamespace(run_dir=tmp_path, engine=recording, pool=SimpleNamespace(meta=Library()))
    method = ASLMethod(context, ASLConfig(enabled=True, grm_retrieval=True))
    method._judge([(r["question"], r["response"]) for r in records])
    assert recording.prompts == trained
    assert "about Q two?" in engine.tokenizer.decode(trained[1]) and "Q two?" not in engine.tokenizer.decode(trained[0])


def test_follow_up_parents_add_or_remove_one_hop():
    parents = follow_up_parents(POOL)
    assert parents == {"p": (NUMBER, HARDER), "n": (PREVIOUS, EASIER)}


def test_verifier_attempts_are_real_answers_labelled_by_exact_match_and_balanced():
    examples = verifier_examples([BLINK, NUMBER, NOD], POOL, with_system=True, seed=0)
    by_task = {}
    for e in examples:
        by_task.setdefault(e.meta["task"], []).append((e.meta["attempt"], e.meta["source"], e.meta["label"]))
    # blink: its gold; the distractor is a hypernym answer that is not "reflex" (WINK's "Reflex" is, by EM)
    assert by_task["b"] == [("reflex", "gold", 1), ("gesture", "d", 0)]
    # nod: the alias rotation (index 2 of a one-answer question: its only answer); distractor of its type
    assert by_task["d"][0] == ("gesture", "gold", 1) and by_task["d"][1][2] == 0
    assert by_task["d"][1][0].lower() in {"reflex"}
    # the number question has no other question of its type: a distractor of another type
    assert by_task["n"][0] == ("4", "gold", 1) and by_task["n"][1][2] == 0 and by_task["n"][1][1] != "n"
    labels = [e.meta["label"] for e in examples]
    assert labels.count(1) == labels.count(0) == 3
    # a question whose every other answer equals its gold gives nothing (no unbalanced pair)
    assert verifier_examples([BLINK], [BLINK, WINK], with_system=True) == []
    # the alias rotation: the second question trains the gold's second alias as correct
    second = verifier_examples([NOD, BLINK], POOL, with_system=True)
    assert [e.meta["attempt"] for e in second if e.meta["source"] == "gold"] == ["gesture", "reflex action"]


@pytest.fixture(scope="module")
def retriever_url():
    pytest.importorskip("bm25s")
    from roleagent.envs.search.retriever import BM25Retriever
    from roleagent.envs.search.server import make_server

    docs = [
        {"id": "be", "contents": '"Beryllium"\nBeryllium, symbol Be, atomic number 4, an alkaline earth metal.'},
        {"id": "li", "contents": '"Lithium"\nLithium, symbol Li, atomic number 3, a soft alkali metal.'},
        {"id": "tcp", "contents": '"TCP"\nTransmission Control Protocol, a transport protocol of the internet.'},
        {"id": "nod", "contents": '"nod"\nnod: a sign of assent; a kind of gesture made with the head.'},
    ]
    server = make_server(BM25Retriever(docs), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_generator_competence_on_hand_generations(retriever_url):
    from roleagent.envs.search.retriever import HttpRetriever

    retrieve = HttpRetriever(retriever_url, timeout=30).retrieve
    texts = [
        "<think>metals</think><question>What is the atomic number of beryllium?</question><answer>4</answer>",
        "<question>\nWhat does TCP stand for?\n</question>\n<answer>\nTransmission Control Protocol\n</answer>",
        "<question>What is the capital of France?</question><answer>Paris</answer>",  # not in the corpus
        "<question>Which metal is lithium?</question><answer>lithium</answer>",  # the answer is in the question
        "<question>What is a nod?</question>",  # no answer: unparsed
        "<question>A?</question><answer>1</answer><question>B?</question><answer>2</answer>",  # two pairs
        "<question>What is a nod a kind of?</question><answer>sign of assent</answer>",  # retrieved only with the answer?
    ]
    result = generator_competence(texts, [False] * 6 + [True], retrieve, topk=1,
                                  seen_questions=["what is  the atomic number of Beryllium"])  # fmt: skip
    m = result.metrics
    assert [r["parsed"] for r in result.rows] == [True, True, True, True, False, False, True]
    assert [r.get("findable") for r in result.rows] == [True, True, False, False, None, None, True]
    assert m["asl_generator/parsed"] == pytest.approx(5 / 7)
    assert m["asl_generator/findable"] == pytest.approx(3 / 7)
    assert m["asl_generator/copied"] == pytest.approx(1 / 5)  # the first, after normalisation
    assert m["asl_generator/truncated"] == pytest.approx(1 / 7) and m["asl_generator/generations"] == 7
    gold = {normalize_answer("What is the atomic number of beryllium?"): {"4"}, normalize_answer("What is a nod?"): {"gesture"},
            normalize_answer("What does TCP stand for?"): {normalize_answer("Transmission Control Protocol")}}  # fmt: skip
    library = SimpleNamespace(
        splits=lambda: ("train", "test"), tasks=lambda split: POOL if split == "train" else [WINK]
    )
    assert gold_answers(library)[normalize_answer(BLINK.payload["question"])] == {"reflex", "reflex action"}
    assert gold_answers(library)[normalize_answer(NUMBER.payload["question"])] == {"4"}
    checked = generator_competence(texts, [False] * 7, None, gold=gold)
    assert [r.get("gold") for r in checked.rows] == [True, True, None, None, None, None, None]
    assert checked.metrics["asl_generator/known"] == pytest.approx(2 / 5)  # the unparsed nod does not count
    wrong = generator_competence([texts[0].replace(">4<", ">5<")], [False], None, gold=gold)
    assert wrong.metrics["asl_generator/known_gold"] == 0.0 and checked.metrics["asl_generator/known_gold"] == 1.0
    # the question alone finds the answer for the same ones here (each question names its passage)
    assert [r.get("answer_retrieved") for r in result.rows] == [True, True, False, False, None, None, True]
    no_retriever = generator_competence(texts[:1], [False], None)
    assert no_retriever.metrics["asl_generator/parsed"] == 1.0
    assert no_retriever.metrics["asl_generator/findable"] != no_retriever.metrics["asl_generator/findable"]  # NaN


def test_verifier_competence_on_hand_replies():
    replies = ["<answer>\nconclusion: correct\n</answer>", "conclusion: correct", "no idea", "**Conclusion:** wrong"]
    result = verifier_competence(replies, [1, 0, 0, 0], [False, False, True, False])
    m = result.metrics
    assert [r["verdict"] for r in result.rows] == [1, 1, None, 0]
    assert m["asl_verifier/accuracy"] == 0.5 and m["asl_verifier/accuracy_on_correct"] == 1.0
    assert m["asl_verifier/accuracy_on_wrong"] == pytest.approx(1 / 3)
    assert m["asl_verifier/unparsed"] == 0.25 and m["asl_verifier/truncated"] == 0.25
    assert m["asl_verifier/examples"] == 4


def test_competence_generates_from_the_example_prompts(engine):
    examples = verifier_examples(POOL, POOL, with_system=True)
    recording = Recording(engine)
    texts, cut = generate(recording, examples, max_new_tokens=9, temperature=0.0, batch_size=3)
    assert recording.prompts == [encode_example(engine, e).prompts[-1] for e in examples]
    assert [s.max_new_tokens for s in recording.sampling] == [9, 9, 9, 9] and not recording.sampling[0].stop
    assert texts == [recording.text] * len(examples) and all(cut)


def test_a_constrained_grm_is_measured_choosing_between_the_two_verdicts(engine, tmp_path):
    """With asl.grm_verdicts: constrained the competence decodes as the method's GRM does:
    every reply is one of the two verdicts (the random tiny model's free text parses none)."""
    examples = verifier_examples(POOL, POOL, with_system=True)
    write_examples(tmp_path / valid_file("verifier"), examples)
    cfg = SimpleNamespace(asl=SimpleNamespace(grm_max_new_tokens=12, grm_verdicts="free"))
    free = competence(engine, cfg, None, tmp_path)[1].metrics
    cfg.asl.grm_verdicts = "constrained"
    constrained = competence(engine, cfg, None, tmp_path)[1]
    assert free["asl_verifier/unparsed"] == 1.0
    assert constrained.metrics["asl_verifier/unparsed"] == 0.0
    assert {r["text"] for r in constrained.rows} <= {verdict_target(1), verdict_target(0)}


TINY_ASL = [
    "model.name=tiny",
    "model.device=cpu",
    "threads=1",
    "iterations=0",
    "env.processes=false",
    "rollout.max_new_tokens=6",
    "rollout.tasks_per_iter=2",
    "rollout.group_size=2",
    "asl.pg_max_new_tokens=8",
    "asl.grm_max_new_tokens=8",
    "sft.asl_questions=6",
    "sft.asl_eval_questions=2",
    "sft.epochs=1",
    "sft.lr=1e-2",
    "eval.at_start=false",
    "eval.max_tasks=1",
    "eval.splits=[dev]",
    "report_to=[jsonl]",
]


def test_the_switch_needs_asl_and_is_data_by_itself():
    cfg = load_config("asl_search_warm", TINY_ASL)
    assert cfg.sft.enabled and cfg.sft.asl_roles and cfg.sft.expert_tasks == 0 and cfg.asl.enabled
    with pytest.raises(ConfigError, match="sft.asl_roles needs asl.enabled"):
        load_config("asl_search_warm", TINY_ASL + ["asl.enabled=false"])
    with pytest.raises(ConfigError, match="sft.enabled needs data"):
        load_config("asl_search_warm", TINY_ASL + ["sft.asl_roles=false"])
    with pytest.raises(ConfigError, match="sft.asl_questions"):
        load_config("asl_search_warm", TINY_ASL + ["sft.asl_questions=0"])
    shipped = load_config("asl_search_warm", TINY_ASL)
    assert shipped.sft.asl_verifier_check and shipped.asl.grm_retrieval and shipped.asl.pg_retrieval
    assert not load_config("asl_search_warm", TINY_ASL + ["sft.asl_verifier_check=false"]).sft.asl_verifier_check
    with pytest.raises(ConfigError, match="needs asl.grm_retrieval"):
        load_config("asl_search_warm", TINY_ASL + ["asl.grm_retrieval=false"])
    with pytest.raises(ConfigError, match="asl.grm_verdicts: free"):
        load_config("asl_search_warm", TINY_ASL + ["asl.grm_verdicts=constrained"])


def warm_start(run_dir, extra):
    """Run ``asl_search_warm`` on the tiny model (``TINY_ASL``: the warm start alone) into ``run_dir``; its config."""
    cfg = load_config("asl_search_warm", TINY_ASL + [f"run_dir={run_dir}", *extra])
    trainer = Trainer(cfg, quiet=True)
    try:
        trainer.run()
    finally:
        trainer.close()
    return cfg


def test_warm_start_trains_and_measures_both_roles(tmp_path, retriever_url):
    """The generator from memory (``asl.pg_retrieval`` off) on the hand corpus served on 127.0.0.1."""
    run_dir = tmp_path / "run"
    cfg = warm_start(run_dir, [f"env.kwargs.retriever_url={retriever_url}", "asl.pg_retrieval=false"])
    sft = run_dir / "sft"
    counts = json.loads((sft / "asl_counts.json").read_text())
    assert counts["asl_verifier_examples"] == 12 and counts["asl_verifier_valid_examples"] == 4
    assert counts["asl_generator_examples"] >= 6 and counts["asl_generator_valid_examples"] >= 2

    def tasks(name):
        return {json.loads(line)["meta"]["task"] for line in (sft / name).read_text().splitlines()}

    train, held_out = tasks("asl_generator.jsonl"), tasks("asl_generator_valid.jsonl")
    assert len(train) == 6 and len(held_out) == 2 and not train & held_out
    assert tasks("asl_verifier.jsonl") == train and tasks("asl_verifier_valid.jsonl") == held_out
    assert all(t.startswith("search/train/") for t in train | held_out)
    sft_metrics = [json.loads(line) for line in (sft / "metrics.jsonl").read_text().splitlines()]
    trained = counts["asl_generator_examples"] + counts["asl_verifier_examples"]
    assert sft_metrics[0]["steps"] == -(-trained // cfg.sft.batch_examples)  # both roles' examples, nothing else
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    measured = [r for r in records if "asl_roles" in r]
    assert [r["asl_roles"] for r in measured] == ["base", "sft"]
    assert all(r["asl_verifier/examples"] == 4 and r["asl_generator/generations"] >= 2 for r in measured)
    rows = (sft / "asl_roles_sft.jsonl").read_text().splitlines()
    assert len(rows) == measured[1]["asl_verifier/examples"] + measured[1]["asl_generator/generations"]
    assert undocumented(run_keys(run_dir)) == set()


def test_grounded_role_data_from_the_shipped_corpus(tmp_path):
    """``asl.pg_retrieval`` on the real search environment (in-process BM25 over the shipped
    corpus): every generator example opens with the environment's own search results, a
    round-0 one with those for its answer passage's title, and they hold its answer."""
    pytest.importorskip("bm25s")
    from roleagent.envs import make_env
    from roleagent.envs.search.retriever import load_corpus
    from roleagent.methods.asl.roles import title_of
    from roleagent.sft.asl_warm_start import train_file, write_role_data
    from roleagent.sft.sources import read_examples

    cfg = load_config("asl_search_warm", ["asl.pg_retrieval=true", "sft.asl_questions=16", "sft.asl_eval_questions=4"])
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    counts = write_role_data(cfg, env.tasks(cfg.env.train_split), tmp_path, env=env)
    examples = read_examples(tmp_path / train_file("generator")) + read_examples(tmp_path / valid_file("generator"))
    assert len(examples) == counts["asl_generator_examples"] + counts["asl_generator_valid_examples"]
    assert sum(e.meta["prompt"] == "topic" for e in examples) >= 12  # of 20 questions: most are kept
    titles = {d["id"]: title_of(d) for d in load_corpus()}
    tasks = {t.id: t for t in env.tasks(cfg.env.train_split)}
    for example in examples:
        shown, prompt = example.meta["pg_evidence"], example.messages[-2]["content"]
        assert prompt.startswith(f"A search of the knowledge base returned:\n{shown}\n\n")
        assert contains(shown, example.meta["answer"]) and not contains(
            example.meta["question"], example.meta["answer"]
        )
        if example.meta["prompt"] == "topic":
            passage = tasks[example.meta["task"]].metadata["support"][-1]
            assert shown == env.search_results([titles[passage]])[0]


def test_drawn_prompts_need_the_generator_search(tmp_path, capsys):
    from roleagent.sft.asl_warm_start import main

    with pytest.raises(SystemExit):
        main(["eval", "asl_search_warm", "--data", str(tmp_path), "--drawn", "--set", "asl.pg_retrieval=false"])
    assert "--drawn shows the generator search results: it needs --set asl.pg_retrieval=true" in capsys.readouterr().err


def test_the_recipe_warm_starts_a_grounded_generator(tmp_path):
    """``asl_search_warm`` as shipped (``asl.pg_retrieval``, ``asl.grm_retrieval`` and
    ``sft.asl_verifier_check`` on, in-process BM25 over the shipped corpus): the generator's
    examples open with search results, the questions whose answer they lack are left out (the
    verifier keeps all, each target checking the evidence first), and both measurements report
    ``supported``."""
    pytest.importorskip("bm25s")
    run_dir = tmp_path / "run"
    assert warm_start(run_dir, []).asl.pg_retrieval
    sft = run_dir / "sft"
    generator = [json.loads(line) for line in (sft / "asl_generator.jsonl").read_text().splitlines()]
    checks = [json.loads(line) for line in (sft / "asl_verifier.jsonl").read_text().splitlines()]
    verifier = {e["meta"]["task"] for e in checks}
    assert generator and {e["meta"]["task"] for e in generator} <= verifier and len(verifier) == 6
    assert all(e["messages"][-2]["content"].startswith("A search of the knowledge base returned:") for e in generator)
    assert all(  # the GRM is shown the question's search results and states its evidence check first
        "<information>" in e["messages"][-2]["content"]
        and e["messages"][-1]["content"].startswith("<think>\nThe student's answer is ")
        for e in checks
    )
    measured = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    measured = [r for r in measured if "asl_roles" in r]
    assert [r["asl_roles"] for r in measured] == ["base", "sft"]
    assert all(0.0 <= r["asl_generator/supported"] <= r["asl_generator/parsed"] for r in measured)
