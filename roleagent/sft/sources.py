"""Reading SFT data: roleagent's own JSONL, AgentGym's AgentTraj records and Hugging Face
``datasets`` datasets, each read as :class:`roleagent.sft.data.ChatExample` by
:func:`read_examples` (so by ``roleagent sft --data``, ``sft.data`` and
``agent_r.general_data``).

Where the records come from (:func:`read_records`):

- a ``.json`` file holding a list of records (as AgentTraj's files, ``alfworld_train.json``);
- a folder written by ``datasets``' ``save_to_disk`` (a ``Dataset``; of a ``DatasetDict``
  its ``train`` split, or its only one), or a ``.parquet`` or ``.arrow`` file: read with the
  ``datasets`` package (``pip install 'roleagent[datasets]'``; roleagent does not need it
  otherwise), from the local files only, nothing downloaded;
- any other file: JSONL, one record per line.

What a record is (:func:`record_example`): roleagent's example (``messages``,
:mod:`roleagent.sft.data`), or an AgentTraj record (Xi et al., 2024, arXiv 2406.04151,
AgentGym)::

    {"item_id": "alfworld_0",
     "conversations": [{"from": "human", "value": "Interact with a household ...", "loss": null},
                       {"from": "gpt", "value": "OK", "loss": false},
                       {"from": "human", "value": "You are in the middle of a room ...", "loss": null},
                       {"from": "gpt", "value": "Thought: ...\\nAction: go to desk 1", "loss": true}]}

converted by :func:`agenttraj_example`: ``human`` → user, ``gpt`` → assistant, ``system`` →
system; a gpt turn is trained unless its ``loss`` is false (``null`` or absent: trained), a
human or system turn never (``loss: true`` on one is an error); turns after the last gpt turn
would train nothing and are dropped. The whole turn is the target (``response_prefix``
empty), and the turn ends with the end-of-turn token when ``eos`` is set
(:func:`format_eos`: the rollout's action format has no stop string). AgentTraj's replies are
AgentGym's text format (``Thought: ... Action: ...``), not roleagent's action tags: they
teach that format.

A ``datasets`` table fills a field a record lacks with null (a struct's missing key, a
missing column): such nulls are dropped before the record is checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from roleagent.sft.data import ChatExample, SFTDataError, check_example

#: AgentTraj's speakers → chat roles.
SPEAKERS = {"human": "user", "gpt": "assistant", "system": "system"}
#: Files read with the ``datasets`` package, by suffix.
DATASETS_SUFFIXES = (".parquet", ".arrow")


def format_eos(cfg) -> bool:
    """Whether a trained turn of data that does not say (AgentTraj) ends with the
    end-of-turn token: when generations of ``cfg.rollout.action_format`` have no stop
    string (``raw``), as a rollout's chat records it (``roleagent.rollout``)."""
    from roleagent.rollout.actor import STOP

    return not STOP[cfg.rollout.action_format]


def record_example(record: Any, where: str, *, eos: bool = False):
    """The :class:`~roleagent.sft.data.ChatExample` of one record (module docstring);
    :class:`~roleagent.sft.data.SFTDataError` naming ``where`` when it is neither format."""

    if isinstance(record, dict) and "conversations" in record and "messages" not in record:
        return agenttraj_example(record, where, eos=eos)
    if isinstance(record, dict) and "messages" in record:
        return check_example(record, where)
    keys = sorted(record) if isinstance(record, dict) else type(record).__name__
    raise SFTDataError(f"{where}: neither a roleagent example (messages) nor an AgentTraj one (conversations): {keys}")


def agenttraj_example(record: dict[str, Any], where: str, *, eos: bool = False):
    """An AgentTraj record as a checked chat example (module docstring)."""

    turns = record["conversations"]
    if not isinstance(turns, list) or not turns:
        raise SFTDataError(f"{where}: conversations must be a non-empty list")
    messages = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or set(turn) - {"from", "value", "loss"}:
            raise SFTDataError(f"{where}: conversations[{i}] must be an object with from, value and loss")
        speaker, loss = turn.get("from"), turn.get("loss")
        if speaker not in SPEAKERS:
            raise SFTDataError(f"{where}: conversations[{i}]: from {speaker!r} is not one of {', '.join(SPEAKERS)}")
        if loss is not None and not isinstance(loss, bool):  # (1 == True: a membership test lets 1 and 0 pass)
            raise SFTDataError(f"{where}: conversations[{i}]: loss must be true, false or null")
        role = SPEAKERS[speaker]
        if role != "assistant" and loss:
            raise SFTDataError(f"{where}: conversations[{i}]: loss is only allowed on gpt turns, not {speaker}")
        extra = {"loss": loss is not False} if role == "assistant" else {}
        messages.append({"role": role, "content": turn.get("value"), **extra})
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()  # trains nothing
    if not messages:
        raise SFTDataError(f"{where}: no gpt turn (nothing to train)")
    meta = {"item_id": record["item_id"]} if record.get("item_id") is not None else {}
    return check_example({"messages": messages, "meta": {**meta, "source": "agenttraj"}, "eos": eos}, where)


def read_records(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` for each record of ``path`` (module docstring); ``where`` is
    ``path:line`` or ``path[index]``."""

    if path.is_dir() or path.suffix in DATASETS_SUFFIXES:
        yield from ((f"{path}[{i}]", _without_nulls(r)) for i, r in enumerate(_dataset(path)))
        return
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise SFTDataError(f"{path}: cannot read ({error})") from None
    if path.suffix == ".json":
        try:
            records = json.loads(text)
        except ValueError as error:
            raise SFTDataError(f"{path}: not valid JSON ({error})") from None
        if not isinstance(records, list):
            raise SFTDataError(f"{path}: a .json file holds a list of records (else write JSONL)")
        yield from ((f"{path}[{i}]", r) for i, r in enumerate(records))
        return
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield f"{path}:{number}", json.loads(line)
            except ValueError as error:
                raise SFTDataError(f"{path}:{number}: not valid JSON ({error})") from None


def _dataset(path: Path):
    """The ``datasets`` dataset at ``path`` (module docstring), from local files only."""

    try:
        import datasets
    except ImportError:
        raise SFTDataError(
            f"{path}: reading a datasets dataset needs the datasets package: pip install 'roleagent[datasets]'"
        ) from None
    try:
        if path.suffix == ".parquet":
            return datasets.Dataset.from_parquet(str(path))
        if path.suffix == ".arrow":
            return datasets.Dataset.from_file(str(path))
        loaded = datasets.load_from_disk(str(path))
    except (OSError, ValueError, FileNotFoundError) as error:
        raise SFTDataError(f"{path}: cannot read as a datasets dataset ({error})") from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded)
        if "train" not in loaded and len(splits) != 1:
            raise SFTDataError(f"{path}: a DatasetDict without a train split ({', '.join(splits)}): save one split")
        return loaded["train" if "train" in loaded else splits[0]]
    return loaded


def _without_nulls(value: Any) -> Any:
    """``value`` with the null fields of mappings dropped, recursively (module docstring)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def read_examples(path: str | Path, *, eos: bool = False) -> list[ChatExample]:
    """Every example of ``path``: JSONL (blank lines allowed), a ``.json`` list, or a
    ``datasets`` dataset, each record roleagent's format or AgentTraj's, whose turns end
    with the end-of-turn token when ``eos`` (this module); the first malformed
    record raises :class:`SFTDataError` naming ``path:line`` (or ``path[index]``)."""
    path = Path(path)
    examples = [record_example(record, where, eos=eos) for where, record in read_records(path)]
    if not examples:
        raise SFTDataError(f"{path}: no examples")
    return examples
