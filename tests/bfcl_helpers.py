"""Shared by the BFCL tests: tasks by entry id and tool calls in the Qwen format."""

from __future__ import annotations

import json

from roleagent.envs.bfcl import data
from roleagent.types import Task


def bfcl_task(entry_id: str, split: str | None = None) -> Task:
    """The task of a BFCL entry in ``split`` (default: the split that holds it)."""
    split = split or ("eval" if entry_id in data.split_ids("eval") else "train")
    return Task(
        id=data.task_id(split, entry_id),
        env="bfcl",
        payload={"entry_id": entry_id},
        split=split,
        metadata={"category": data.category_of(entry_id)},
    )


def qwen_call(name: str, arguments: dict) -> str:
    """One ``<tool_call>`` block as Qwen writes it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
