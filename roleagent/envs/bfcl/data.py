"""BFCL v3 multi-turn data: entries, ground truth, tool schemas and the fixed split.

Everything is read from the installed ``bfcl_eval`` wheel (``bfcl-eval==2025.6.8``):
``data/BFCL_v3_multi_turn_{category}.json`` (one JSON object per line),
``data/possible_answer/...`` (ground-truth call strings per user turn) and
``data/multi_turn_func_doc/*.json`` (the tool schemas of the 8 backends).

We deliberately do not import ``bfcl_eval.constants``: its ``eval_config`` creates
``result/`` and ``score/`` folders next to the installed package on import.

Splits (SEAL, Hu et al., 2026, §4: 100 training and 100 held-in evaluation tasks per
category). ``"roleagent"`` (default): 200 entries per category; for each category the
entries are ordered by ``sha256(f"{split_seed}:{entry_id}")`` and the first 100 form
``train``, the other 100 ``eval``. This depends only on the ids, never on the machine or
on Python's hash seed. ``"authors"``: the split the SEAL authors released
(``data/bfcl_400_split.json`` of their code at a0d22db, Apache-2.0), shipped as
``roleagent/data/seal_bfcl_400_split.json``: its ``train`` ids are ``train``, its
``test`` ids are ``eval``; only 193 of those 400 are in the ``roleagent`` eval split, so
use it when numbers must be comparable with the paper. Task ids look like
``"bfcl/eval/multi_turn_base_12"``.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

CATEGORIES: tuple[str, ...] = ("base", "miss_func", "miss_param", "long_context")
PER_CATEGORY_PER_SPLIT = 100
DEFAULT_SPLIT_SEED = 0
SPLIT_SOURCES: tuple[str, ...] = ("roleagent", "authors")
AUTHORS_SPLIT_FILE = Path(__file__).resolve().parents[2] / "data" / "seal_bfcl_400_split.json"

#: backend class → (module, func-doc file). Same as bfcl_eval's CLASS_FILE_PATH_MAPPING
#: and MULTI_TURN_FUNC_DOC_FILE_MAPPING.
BACKENDS: dict[str, tuple[str, str]] = {
    "GorillaFileSystem": (
        "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system",
        "gorilla_file_system.json",
    ),
    "MathAPI": ("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api", "math_api.json"),
    "MessageAPI": ("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.message_api", "message_api.json"),
    "TwitterAPI": ("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.posting_api", "posting_api.json"),
    "TicketAPI": ("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.ticket_api", "ticket_api.json"),
    "TradingBot": ("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.trading_bot", "trading_bot.json"),
    "TravelAPI": ("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.travel_booking", "travel_booking.json"),
    "VehicleControlAPI": (
        "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.vehicle_control",
        "vehicle_control.json",
    ),
}
#: bfcl_eval's STATELESS_CLASSES: no ``_load_scenario`` call.
STATELESS_CLASSES: tuple[str, ...] = ("MathAPI",)


def data_dir() -> Path:
    import bfcl_eval  # noqa: PLC0415 - optional dependency

    return Path(bfcl_eval.__file__).resolve().parent / "data"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@functools.cache
def _load_category(category: str) -> tuple[dict[str, dict[str, Any]], tuple[str, ...]]:
    if category not in CATEGORIES:
        raise KeyError(f"unknown BFCL multi-turn category {category!r}; known: {CATEGORIES}")
    root = data_dir()
    name = f"BFCL_v3_multi_turn_{category}.json"
    entries = _read_jsonl(root / name)
    answers = {row["id"]: row["ground_truth"] for row in _read_jsonl(root / "possible_answer" / name)}
    out: dict[str, dict[str, Any]] = {}
    for entry in entries:
        entry = dict(entry)
        entry["ground_truth"] = answers[entry["id"]]
        entry["category"] = category
        out[entry["id"]] = entry
    return out, tuple(e["id"] for e in entries)


def entry(entry_id: str) -> dict[str, Any]:
    """A deep copy of one test entry (question, initial_config, involved_classes,
    missed_function, ground_truth, category)."""
    category = category_of(entry_id)
    entries, _ = _load_category(category)
    return copy.deepcopy(entries[entry_id])


def entry_question_turns(category: str) -> tuple[int, ...]:
    """The number of user turns of every entry of a category, in file order."""
    entries, ids = _load_category(category)
    return tuple(len(entries[i]["question"]) for i in ids)


def category_of(entry_id: str) -> str:
    for category in sorted(CATEGORIES, key=len, reverse=True):
        prefix = f"multi_turn_{category}_"
        if entry_id.startswith(prefix) and entry_id[len(prefix) :].isdigit():
            return category
    raise KeyError(f"not a BFCL v3 multi-turn id: {entry_id!r}")


def entry_ids(category: str) -> tuple[str, ...]:
    return _load_category(category)[1]


@functools.cache
def func_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """The tool schemas of one backend class, in file order."""
    _, doc_file = BACKENDS[class_name]
    return tuple(_read_jsonl(data_dir() / "multi_turn_func_doc" / doc_file))


def split_key(entry_id: str, split_seed: int = DEFAULT_SPLIT_SEED) -> str:
    return hashlib.sha256(f"{split_seed}:{entry_id}".encode()).hexdigest()


@functools.cache
def authors_split() -> dict[str, tuple[str, ...]]:
    """The SEAL authors' released split: ``{"train": ids, "eval": their test ids}``."""
    with open(AUTHORS_SPLIT_FILE, encoding="utf-8") as fh:
        raw = json.load(fh)
    out = {"train": tuple(raw["train"]), "eval": tuple(raw["test"])}
    for ids in out.values():
        for entry_id in ids:
            category_of(entry_id)  # KeyError names a malformed id
    if set(out["train"]) & set(out["eval"]):
        raise ValueError(f"{AUTHORS_SPLIT_FILE}: train and test ids overlap")
    return out


def split_ids(
    split: str,
    split_seed: int = DEFAULT_SPLIT_SEED,
    categories: tuple[str, ...] = CATEGORIES,
    source: str = "roleagent",
) -> list[str]:
    """Entry ids of ``train`` or ``eval`` (100 per category each) of the ``source`` split
    (``SPLIT_SOURCES``; ``split_seed`` applies to ``roleagent`` only), category by
    category, each category in numeric id order."""
    if split not in ("train", "eval"):
        raise KeyError(f"unknown BFCL split {split!r}; known: train, eval")
    if source not in SPLIT_SOURCES:
        raise KeyError(f"unknown BFCL split source {source!r}; known: {', '.join(SPLIT_SOURCES)}")
    out: list[str] = []
    for category in categories:
        if source == "authors":
            chosen = [i for i in authors_split()[split] if category_of(i) == category]
        else:
            ids = sorted(entry_ids(category), key=lambda i: split_key(i, split_seed))
            chosen = (
                ids[:PER_CATEGORY_PER_SPLIT]
                if split == "train"
                else ids[PER_CATEGORY_PER_SPLIT : 2 * PER_CATEGORY_PER_SPLIT]
            )
        out.extend(sorted(chosen, key=lambda i: int(i.rsplit("_", 1)[1])))
    return out


def task_id(split: str, entry_id: str) -> str:
    return f"bfcl/{split}/{entry_id}"


def entry_id_of_task(task_id_: str) -> str:
    return task_id_.rsplit("/", 1)[-1]
