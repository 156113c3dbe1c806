"""The SEAL authors' released BFCL split as an option (env.kwargs.split: authors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("bfcl_eval")

from roleagent.config import load_config  # noqa: E402
from roleagent.envs import make_env  # noqa: E402
from roleagent.envs.bfcl import data  # noqa: E402

SHARED = Path(__file__).resolve().parents[1] / "roleagent" / "data" / "seal_bfcl_400_split.json"


def test_authors_split_recipe_evaluates_on_the_authors_test_ids():
    released = json.loads(SHARED.read_text())
    cfg = load_config("seal_bfcl_authors_split")
    assert cfg.env.kwargs["split"] == "authors"
    env = make_env("bfcl", **cfg.env.kwargs)
    eval_ids = [t.payload["entry_id"] for t in env.tasks(cfg.env.eval_split)]
    train_ids = [t.payload["entry_id"] for t in env.tasks(cfg.env.train_split)]
    assert sorted(eval_ids) == sorted(released["test"]) and len(eval_ids) == 400
    assert sorted(train_ids) == sorted(released["train"]) and len(train_ids) == 400
    assert all(t.id == f"bfcl/eval/{t.payload['entry_id']}" for t in env.tasks("eval"))


def test_default_split_differs_and_subsets_apply_to_the_authors_split():
    authors_eval = set(data.split_ids("eval", source="authors"))
    assert len(authors_eval & set(data.split_ids("eval"))) == 193  # as the README says
    env = make_env("bfcl", split="authors", classes=["TradingBot"], eval_per_category=1)
    picked = [t.payload["entry_id"] for t in env.tasks("eval")]
    assert picked and set(picked) <= authors_eval
    assert [data.category_of(i) for i in picked] == list(data.CATEGORIES)


def test_unknown_split_source_is_an_error():
    with pytest.raises(ValueError, match="split must be one of"):
        make_env("bfcl", split="paper")
    with pytest.raises(KeyError, match="split source"):
        data.split_ids("eval", source="nope")
