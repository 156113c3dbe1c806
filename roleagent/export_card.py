"""The model card (``README.md``) of an exported folder (``roleagent export``): what the
weights are and their precision, their base, the method and recipe that trained them, and
the run's panel results with the rows that measured these weights marked.

It replaces the card PEFT's ``save_pretrained`` writes, whose ``base_model`` is the name
the adapters were created on (a path on the training machine), not the base the folder
names. Everything here is read from the run folder: ``config.yaml``, ``metrics.jsonl``
(one record per evaluation: ``eval`` label, ``split``, ``eval/successes``,
``eval/episodes``) and ``eval_table.txt``'s first line (the methods that ran).

Which evaluation measured the exported weights: ``iter{k}`` (``eval.every``) the
checkpoint saved after iteration k; ``after`` the final checkpoint (the one with
``finished.json``). ``before`` (``base`` in a warm-started run) measured the starting
weights, ``sft`` the weights after the SFT warm start (the base under a warm-started run's
adapters).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from roleagent.methods import METHODS
from roleagent.stats import format_rate
from roleagent.trainer.run_files import WARM_START_LABELS

FORMATS = {"peft_adapter": "LoRA adapters (PEFT)", "transformers": "full weights (transformers)"}


def model_card(cfg, run_dir: Path, loaded, info: dict[str, Any]) -> str:
    """The card's Markdown for ``info`` (``roleagent_export.json``'s fields) of the
    checkpoint ``loaded`` of the run in ``run_dir`` with config ``cfg``."""
    iteration = int(info["iteration"])
    done = "; the run finished here" if loaded.finished is not None else ""
    hub_base = _hub_id(cfg.model.name) if not info["init_from"] else None
    front = [
        "---",
        f"library_name: {'peft' if info['format'] == 'peft_adapter' else 'transformers'}",
        *([f"base_model: {hub_base}"] if hub_base else []),
        "tags:",
        "- roleagent",
        f"- {cfg.algo.name}",
        "---",
    ]
    facts = [
        (
            "weights",
            f"{FORMATS[info['format']]}, {info['dtype']}, checkpoint `{info['checkpoint']}` "
            f"(iteration {iteration + 1} of {cfg.iterations}{done})",
        ),
        ("base", _base_text(cfg, loaded, info)),
        ("method", method_text(cfg, run_dir)),
        (
            "recipe",
            f"env `{cfg.env.name}`, {cfg.iterations} iterations, seed {cfg.seed}, optim.lr {cfg.optim.lr}, "
            f"LoRA rank {cfg.model.lora_rank}; every setting: `roleagent_config.yaml` (the run's config.yaml)",
        ),
    ]
    lines = [*front, "", f"# {run_dir.resolve().name}: a roleagent export", "", "| | |", "|---|---|"]
    lines += [f"| {name} | {text} |" for name, text in facts]
    lines += ["", "## Panel results", "", *_results(cfg, run_dir, iteration, loaded.finished is not None)]
    lines += ["", "## Loading", "", "DIR is this folder.", "", "```python", *_loading(info), "```", ""]
    return "\n".join(lines)


def method_text(cfg, run_dir: Path) -> str:
    """``algo role_agent; methods: wia; SFT warm start``: the run's own line when it wrote
    ``eval_table.txt`` (``trained with: ...``), else the config's enabled methods."""
    table = run_dir / "eval_table.txt"
    first = table.read_text().partition("\n")[0] if table.is_file() else ""
    if first.startswith("trained with: "):
        text = first.removeprefix("trained with: ")
    else:
        names = [s for s in METHODS if getattr(cfg, s).enabled] + list(cfg.methods)
        text = f"algo {cfg.algo.name}; methods: {', '.join(names) or 'none'}"
    return text + ("; SFT warm start" if cfg.sft.enabled else "")


def evaluations(run_dir: Path) -> list[dict[str, Any]]:
    """The evaluation records of ``run_dir/metrics.jsonl`` (an unreadable line is skipped)."""
    path = run_dir / "metrics.jsonl"
    records = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "eval" in record and "eval/episodes" in record:
            records.append(record)
    return records


def _results(cfg, run_dir: Path, iteration: int, finished: bool) -> list[str]:
    """The panel table: one row per evaluation, greedy success with its interval."""
    these = {f"iter{iteration + 1}", *(["after"] if finished else [])}
    start = "sft" if cfg.sft.enabled else "before"
    names = WARM_START_LABELS if cfg.sft.enabled else {}
    rows = []
    for r in evaluations(run_dir):
        label = r["eval"]
        measured = "these weights" if label in these else "the starting weights" if label == start else ""
        rate = format_rate(int(r.get("eval/successes", 0)), int(r["eval/episodes"]))
        rows.append(f"| {names.get(label, label)} | {r.get('split') or cfg.env.eval_split} | {rate} | {measured} |")
    if not rows:
        return ["The run recorded no evaluation (metrics.jsonl)."]
    head = ["Greedy success on the run's evaluation panels: k/n = success [95% Wilson interval], in %.", ""]
    table = [*head, "| evaluation | panel | success | measured |", "|---|---|---|---|", *rows]
    if not any(r["eval"] in these for r in evaluations(run_dir)):
        table += ["", f"No evaluation measured these weights (iteration {iteration + 1}, no final evaluation)."]
    return table


def _base_text(cfg, loaded, info: dict[str, Any]) -> str:
    text = f"`{cfg.model.name}`"
    if stored := loaded.state.get("init_from", ""):  # relative to the run folder when inside it
        text += f", initialised from `{stored}`" + (" (its SFT warm start)" if cfg.sft.enabled else "")
    if info.get("base") == "base":
        text += "; the adapters name `base`: this folder's `base/` (relative to this folder)"
    elif info.get("base"):
        text += f"; the adapters name `{info['base']}`"
    return text


def _loading(info: dict[str, Any]) -> list[str]:
    if info["format"] == "transformers":
        return [
            "from transformers import AutoModelForCausalLM",
            'model = AutoModelForCausalLM.from_pretrained("DIR")  # or: vllm serve DIR',
        ]
    if info.get("base") == "base":
        return [
            "from peft import AutoPeftModelForCausalLM, PeftModel",
            "from transformers import AutoModelForCausalLM",
            'model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("DIR/base"), "DIR")',
            'model = AutoPeftModelForCausalLM.from_pretrained(".")  # from inside DIR: the name `base` is relative',
            "# vLLM: vllm serve DIR/base --enable-lora --lora-modules agent=DIR",
        ]
    return [
        "from peft import AutoPeftModelForCausalLM",
        'model = AutoPeftModelForCausalLM.from_pretrained("DIR")',
        f"# vLLM: vllm serve {info['base']} --enable-lora --lora-modules agent=DIR",
    ]


def _hub_id(name: str) -> str | None:
    """``name`` when it reads as a Hugging Face model id (``owner/name``, not a folder here)."""
    if name in ("tiny", "embedded") or Path(name).expanduser().exists() or name.count("/") != 1:
        return None
    return name
