"""Build the offline search-QA corpus and question sets shipped in ``roleagent/data/search/``.

Reads Debian dictionary packages installed on this machine (``apt-get install -y
dict-elements dict-foldoc dict-jargon wordnet-base``) and writes, deterministically:

- ``corpus.jsonl.gz``: passages ``{"id", "title", "text", "source"}`` (a dictd entry or a
  WordNet noun synset, cut into chunks of at most ``CHUNK_WORDS`` words);
- ``qa.jsonl.gz``: questions ``{"id", "split", "question", "answers", "hops", "type",
  "support"}`` (``support``: the passage ids that hold the facts, hop by hop);
- ``manifest.json``: sizes, counts per split / type / hops, sources and licences.

Every question comes from a template over a structured field (see ``docs/search.md``); a
question is kept only if each gold answer, normalised as Search-R1's evaluation does,
occurs in its last supporting passage, no gold answer occurs in the question, and (two
hops) no gold answer occurs in the first supporting passage. Splits are drawn by SHA-1 of
the question's entity (an element, an abbreviation, a WordNet lemma), so no entity of the
test set is asked about in training.

    python3 scripts/build_search_data.py            # writes roleagent/data/search/
    python3 scripts/build_search_data.py --out /tmp/search --check
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

from roleagent.envs.search.text import normalize_answer

DICTD = Path("/usr/share/dictd")
WORDNET = Path("/usr/share/wordnet")
OUT = Path(__file__).resolve().parents[1] / "roleagent" / "data" / "search"
CHUNK_WORDS = 80
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
SPLIT_SHARES = (("test", 20), ("dev", 10), ("train", 70))  # percent of entities
LICENCES = {
    "elements": "dict-elements (Jay F. Kominek, 2000): public domain",
    "foldoc": "dict-foldoc (Free On-line Dictionary of Computing, Denis Howe): GNU FDL 1.1 or later",
    "jargon": "dict-jargon (The Jargon File 4.4.7, Eric S. Raymond): public domain",
    "wordnet": "wordnet-base (WordNet 3.0, Princeton University): WordNet 3.0 licence (BSD-style)",
}


# ------------------------------------------------------------------ readers ---------


def b64(text: str) -> int:
    value = 0
    for char in text:
        value = value * 64 + B64.index(char)
    return value


def read_dictd(name: str) -> list[tuple[list[str], str]]:
    """Entries of a dictd database as (headwords, text), in file order. Headwords come from
    the entry's own leading lines (FOLDOC lists every alias there), else the index."""
    data = gzip.open(DICTD / f"{name}.dict.dz").read()
    by_offset: dict[tuple[int, int], list[str]] = defaultdict(list)
    for line in (DICTD / f"{name}.index").read_text(encoding="utf-8", errors="replace").splitlines():
        word, offset, length = line.split("\t")[:3]
        if not word.startswith("00database"):
            by_offset[(b64(offset), b64(length))].append(word)
    entries = []
    for (offset, length), words in sorted(by_offset.items()):
        text = data[offset : offset + length].decode("utf-8", errors="replace")
        head, _, body = text.partition("\n\n")
        heads = [h.strip() for h in head.splitlines() if h.strip()]
        entries.append((heads or words, body if body.strip() else text))
    return entries


def clean(text: str) -> str:
    """Collapse whitespace, drop FOLDOC's ``{link}`` braces and trailing ``(YYYY-MM-DD)``."""
    text = re.sub(r"[{}]", "", text)
    text = re.sub(r"\(\d{4}-\d{2}-\d{2}\)", "", text)
    return " ".join(text.split())


def elements() -> list[dict]:
    out = []
    for heads, body in read_dictd("elements"):
        fields = dict(re.findall(r"^(Symbol|Atomic number|Atomic weight): *(.+)$", body, re.M))
        if "Symbol" not in fields or "Atomic number" not in fields:
            continue
        desc = clean(re.sub(r"^(Symbol|Atomic number|Atomic weight):.*$", "", body, flags=re.M))
        out.append({"name": heads[0].strip().lower(), "symbol": fields["Symbol"].strip(),
                    "number": int(fields["Atomic number"]), "weight": fields.get("Atomic weight", "").strip(),
                    "desc": desc})  # fmt: skip
    return sorted(out, key=lambda e: e["number"])


def wordnet_nouns() -> tuple[dict[str, dict], dict[str, int]]:
    """Noun synsets {offset: {"lemmas", "hypernyms", "gloss"}} and sense counts per lemma."""
    synsets = {}
    for line in (WORDNET / "data.noun").read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(" "):
            continue
        fields, _, gloss = line.partition(" | ")
        parts = fields.split()
        count = int(parts[3], 16)
        lemmas = [re.sub(r"\(.*\)$", "", parts[4 + 2 * i]).replace("_", " ") for i in range(count)]
        rest = parts[4 + 2 * count :]
        pointers = int(rest[0])
        hypernyms = [rest[1 + 4 * i + 1] for i in range(pointers) if rest[1 + 4 * i] == "@"]
        gloss = gloss.split(";")[0].strip()
        synsets[parts[0]] = {"lemmas": lemmas, "hypernyms": hypernyms, "gloss": gloss}
    senses = {}
    for line in (WORDNET / "index.noun").read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith(" "):
            parts = line.split()
            senses[parts[0].replace("_", " ")] = int(parts[2])
    return synsets, senses


# ----------------------------------------------------------------- passages ---------


def chunks(words: list[str], limit: int) -> list[str]:
    return [" ".join(words[i : i + limit]) for i in range(0, len(words), limit)] or [""]


class Corpus:
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.ids: set[str] = set()

    def add(self, source: str, key: str, title: str, text: str, max_chunks: int = 2) -> str:
        """Add an entry's passages (at most ``max_chunks`` chunks); returns the first id."""
        base = f"{source}/{re.sub(r'[^a-z0-9]+', '_', key.lower()).strip('_') or 'x'}"
        while base in self.ids or f"{base}#0" in self.ids:
            base += "_"
        for i, chunk in enumerate(chunks(text.split(), CHUNK_WORDS)[:max_chunks]):
            pid = f"{base}#{i}"
            self.ids.add(pid)
            self.rows.append({"id": pid, "title": title, "text": chunk, "source": source})
        return f"{base}#0"

    def text(self, pid: str) -> str:
        return next(r["title"] + " " + r["text"] for r in self.rows if r["id"] == pid)


# ---------------------------------------------------------------- questions ---------


def qa(qtype: str, entity: str, question: str, answers: list[str], support: list[str]) -> dict:
    return {"type": qtype, "entity": entity, "question": question, "answers": answers,
            "hops": len(support), "support": support}  # fmt: skip


def element_questions(corpus: Corpus) -> list[dict]:
    rows = elements()
    pid = {}
    for e in rows:
        text = f"Chemical element. Symbol: {e['symbol']}. Atomic number: {e['number']}. Atomic weight: {e['weight']}. {e['desc']}"
        pid[e["name"]] = corpus.add("elements", e["name"], e["name"].capitalize(), text, max_chunks=1)
    counts = Counter(e["number"] for e in rows)  # 110: both darmstadtium and its old name
    by_number = {e["number"]: e for e in rows if counts[e["number"]] == 1}
    out = []
    for e in rows:
        name, p = e["name"], pid[e["name"]]
        out.append(qa("element_symbol", name, f"What is the chemical symbol of {name}?", [e["symbol"]], [p]))
        out.append(qa("element_number", name, f"What is the atomic number of {name}?", [str(e["number"])], [p]))
        out.append(qa("symbol_element", name, f"Which chemical element has the symbol {e['symbol']}?", [name], [p]))
        nxt, prv = by_number.get(e["number"] + 1), by_number.get(e["number"] - 1)
        if nxt:
            q = f"What is the chemical symbol of the element whose atomic number is one greater than that of {name}?"
            out.append(qa("next_element_symbol", name, q, [nxt["symbol"]], [p, pid[nxt["name"]]]))
        if prv:
            q = f"Which chemical element has an atomic number one less than that of {name}?"
            out.append(qa("previous_element", name, q, [prv["name"]], [p, pid[prv["name"]]]))
    return out


def acronym_of(abbrev: str, expansion: str) -> bool:
    """``abbrev`` is the initials of ``expansion``'s words (all of them, or the content words).

    >>> acronym_of("TCP", "Transmission Control Protocol"), acronym_of("TCP", "Internet Protocol")
    (True, False)
    """
    words = [w for w in re.split(r"[\s\-/]+", expansion) if w]
    content = [w for w in words if w.lower() not in {"of", "and", "the", "for", "a", "an", "to", "in", "on"}]
    target = abbrev.upper()
    return any(len(ws) > 1 and "".join(w[0] for w in ws).upper() == target for ws in (words, content))


def foldoc_questions(corpus: Corpus, rng: random.Random, extra: int) -> list[dict]:
    entries = read_dictd("foldoc")
    counts = Counter(h for heads, _ in entries for h in heads)
    picked, out = [], []
    for heads, body in entries:
        abbrevs = [h for h in heads if re.fullmatch(r"[A-Z][A-Z0-9]{1,5}", h) and counts[h] == 1]
        pairs = [(a, x) for a in abbrevs for x in heads if x != a and acronym_of(a, x)]
        if len(pairs) == 1:
            picked.append((heads, body, pairs[0]))
    chosen = {id(b) for _, b, _ in picked}
    others = [(h, b) for h, b in entries if id(b) not in chosen and len(b.split()) > 12]
    for heads, body in rng.sample(others, min(extra, len(others))):
        corpus.add("foldoc", heads[0], heads[0], _foldoc_text(heads, body))
    for heads, body, (abbrev, expansion) in picked:
        p = corpus.add("foldoc", heads[0], heads[0], _foldoc_text(heads, body))
        q = f"In computing, what does the abbreviation {abbrev} stand for?"
        out.append(qa("abbreviation", abbrev, q, [expansion], [p]))
    return out


def _foldoc_text(heads: list[str], body: str) -> str:
    also = f"Also: {', '.join(heads[1:])}. " if len(heads) > 1 else ""
    return also + clean(body)


def jargon_passages(corpus: Corpus, rng: random.Random, count: int) -> None:
    entries = [(h, b) for h, b in read_dictd("jargon") if len(b.split()) > 12]
    for heads, body in rng.sample(entries, min(count, len(entries))):
        corpus.add("jargon", heads[0], heads[0], clean(body), max_chunks=1)


def wordnet_questions(corpus: Corpus, rng: random.Random, per_type: int, distractors: int) -> list[dict]:
    synsets, senses = wordnet_nouns()

    def clear(offset: str) -> bool:  # its first lemma names only this noun sense
        lemma = synsets[offset]["lemmas"][0]
        return senses.get(lemma.lower(), 0) == 1 and re.fullmatch(r"[a-z][a-z ]{2,30}", lemma) is not None

    candidates = sorted(o for o, s in synsets.items() if clear(o) and len(s["hypernyms"]) == 1)
    rng.shuffle(candidates)
    pids: dict[str, str] = {}

    def passage(offset: str) -> str:
        if offset not in pids:
            s = synsets[offset]
            kinds = "; ".join(", ".join(synsets[h]["lemmas"]) for h in s["hypernyms"])
            text = f"Noun. Synonyms: {', '.join(s['lemmas'])}. Meaning: {s['gloss']}." + (
                f" A kind of: {kinds}." if kinds else ""
            )
            pids[offset] = corpus.add("wordnet", s["lemmas"][0] + "_" + offset, s["lemmas"][0], text, max_chunks=1)
        return pids[offset]

    out, used = [], set()
    for offset in candidates:
        lemma, (hyper,) = synsets[offset]["lemmas"][0], synsets[offset]["hypernyms"]
        n1 = sum(1 for q in out if q["type"] == "hypernym")
        if n1 < per_type and lemma not in used:
            used.add(lemma)
            q = f"In WordNet, a {lemma} is a kind of what?"
            out.append(qa("hypernym", lemma, q, synsets[hyper]["lemmas"], [passage(offset)]))
            continue
        grand = synsets[hyper]["hypernyms"]
        if len(grand) == 1 and clear(hyper) and lemma not in used and len(out) - n1 < per_type:
            used.add(lemma)
            q = (f"In WordNet, a {lemma} is a kind of X (its direct hypernym). "
                 "What is X, in turn, a kind of?")  # fmt: skip
            out.append(
                qa("hypernym_of_hypernym", lemma, q, synsets[grand[0]]["lemmas"], [passage(offset), passage(hyper)])
            )
        if len(out) >= 2 * per_type:
            break
    for offset in rng.sample(sorted(synsets), distractors):
        passage(offset)
    return out


# -------------------------------------------------------------- checks, splits -------


def checked(rows: list[dict], corpus: Corpus) -> tuple[list[dict], Counter]:
    """Keep questions whose answers occur (normalised) in the last supporting passage, not in
    the question, and (multi-hop) not already in the first passage."""
    text = {r["id"]: normalize_answer(r["title"] + " " + r["text"]) for r in corpus.rows}
    kept, dropped = [], Counter()
    for row in rows:
        gold = [normalize_answer(a) for a in row["answers"]]
        question = normalize_answer(row["question"])
        padded = {pid: f" {text[pid]} " for pid in row["support"]}
        if not all(f" {g} " in padded[row["support"][-1]] for g in gold):
            dropped["answer not in last passage"] += 1
        elif any(f" {g} " in f" {question} " for g in gold):
            dropped["answer in question"] += 1
        elif row["hops"] > 1 and any(f" {g} " in padded[row["support"][0]] for g in gold):
            dropped["answer reachable in one hop"] += 1
        else:
            kept.append(row)
    return kept, dropped


def split_of(entity: str) -> str:
    bucket = int(hashlib.sha1(entity.lower().encode()).hexdigest(), 16) % 100
    for name, share in SPLIT_SHARES:
        if bucket < share:
            return name
        bucket -= share
    return "train"


def write_jsonl_gz(path: Path, rows: list[dict]) -> None:
    raw = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows).encode()
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw)


def build(out: Path, seed: int = 0) -> dict:
    rng = random.Random(seed)
    corpus = Corpus()
    rows = element_questions(corpus)
    rows += foldoc_questions(corpus, rng, extra=3000)
    rows += wordnet_questions(corpus, rng, per_type=1200, distractors=4000)
    jargon_passages(corpus, rng, 800)
    rows, dropped = checked(rows, corpus)
    for i, row in enumerate(rows):
        row["split"] = split_of(row.pop("entity"))
        row["id"] = f"search/{row['split']}/{row['type']}/{i:05d}"
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_gz(out / "corpus.jsonl.gz", corpus.rows)
    write_jsonl_gz(out / "qa.jsonl.gz", rows)
    manifest = {
        "passages": len(corpus.rows),
        "passages_by_source": dict(sorted(Counter(r["source"] for r in corpus.rows).items())),
        "questions_by_split": dict(sorted(Counter(r["split"] for r in rows).items())),
        "questions_by_split_and_hops": dict(sorted(Counter(f"{r['split']}/{r['hops']}" for r in rows).items())),
        "questions_by_type": dict(sorted(Counter(r["type"] for r in rows).items())),
        "dropped_by_checks": dict(sorted(dropped.items())),
        "licences": LICENCES,
        "seed": seed,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    missing = [
        p
        for p in (DICTD / "elements.index", DICTD / "foldoc.index", DICTD / "jargon.index", WORDNET / "data.noun")
        if not p.exists()
    ]
    if missing:
        raise SystemExit(
            f"missing {', '.join(map(str, missing))}: apt-get install -y dict-elements dict-foldoc dict-jargon wordnet-base"
        )
    print(json.dumps(build(args.out, args.seed), indent=1))


if __name__ == "__main__":
    main()
