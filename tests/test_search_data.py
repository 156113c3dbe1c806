"""The shipped search corpus and QA sets: what ``scripts/build_search_data.py`` writes
(byte-identical when the Debian dictionaries are installed), sizes, the checks every
question passed, and the splits."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

from roleagent.envs.search.retriever import data_path, load_corpus, read_jsonl_gz
from roleagent.envs.search.text import normalize_answer

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [Path("/usr/share/dictd/elements.index"), Path("/usr/share/dictd/foldoc.index"),
           Path("/usr/share/dictd/jargon.index"), Path("/usr/share/wordnet/data.noun")]  # fmt: skip


def _build_module():
    spec = importlib.util.spec_from_file_location("build_search_data", ROOT / "scripts" / "build_search_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_files_are_small_and_match_the_manifest():
    manifest = json.loads(data_path("manifest.json").read_text())
    size = sum(data_path(n).stat().st_size for n in ("corpus.jsonl.gz", "qa.jsonl.gz"))
    assert size < 4_000_000
    docs, rows = load_corpus(), read_jsonl_gz(data_path("qa.jsonl.gz"))
    assert len(docs) == manifest["passages"] and len({d["id"] for d in docs}) == len(docs)
    counts = {s: sum(r["split"] == s for r in rows) for s in ("train", "dev", "test")}
    assert counts == manifest["questions_by_split"]
    assert set(manifest["licences"]) == {"elements", "foldoc", "jargon", "wordnet"}


def test_every_question_passed_the_build_checks():
    text = {d["id"]: f" {normalize_answer(d['contents'])} " for d in load_corpus()}
    for row in read_jsonl_gz(data_path("qa.jsonl.gz")):
        gold = [normalize_answer(a) for a in row["answers"]]
        assert row["hops"] == len(row["support"]) in (1, 2)
        assert all(f" {g} " in text[row["support"][-1]] for g in gold), row["id"]
        assert not any(f" {g} " in f" {normalize_answer(row['question'])} " for g in gold), row["id"]
        if row["hops"] == 2:
            assert not any(f" {g} " in text[row["support"][0]] for g in gold), row["id"]


def test_acronym_and_split_rules_hand_cases():
    build = _build_module()
    assert build.acronym_of("TCP", "Transmission Control Protocol")
    assert build.acronym_of("DBMS", "database management system") is False  # one word for two letters
    assert build.acronym_of("FTP", "File Transfer Protocol") and not build.acronym_of("TCP", "Internet Protocol")
    assert build.acronym_of("ASCII", "American Standard Code for Information Interchange")  # content words
    assert build.split_of("iron") == build.split_of("IRON") in ("train", "dev", "test")
    assert build.b64("b") == 27 and build.b64("Ba") == 64 * 1 + 26


@pytest.mark.slow
@pytest.mark.skipif(
    not all(p.exists() for p in SOURCES), reason="apt-get install -y dict-elements dict-foldoc dict-jargon wordnet-base"
)
def test_build_script_reproduces_the_shipped_files(tmp_path):
    _build_module().build(tmp_path)
    for name in ("corpus.jsonl.gz", "qa.jsonl.gz"):
        ours = hashlib.sha256(gzip.open(tmp_path / name).read()).hexdigest()
        shipped = hashlib.sha256(gzip.open(data_path(name)).read()).hexdigest()
        assert ours == shipped, name
