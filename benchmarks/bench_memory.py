"""Where a run's memory goes: the main job, shortened, once per arm, each arm in its own
process, with every phase's start and peak resident memory side by side.

Each arm runs ``role_agent_alfworld`` (or ``--recipe``) with the shortening settings below
and its own ``--arm`` settings in a fresh Python process (so one arm's heap cannot lower or
raise another's), and reads the ``memory/<phase>_start_mb`` / ``_peak_mb`` records of
:class:`roleagent.trainer.memory.PhaseMemory` from its ``metrics.jsonl``. Printed: one row
per phase (evaluations ``eval``, ``sft`` with the expert's play, ``load_sft``, the RL
``rollout``, ``update``), each arm's start → peak, then per arm the whole process's peak
(``ru_maxrss``), its wall time, the prompt tokens the RL rollouts reused, SFT and update
tokens/s, and one line per arm ``peak ARM / peak FIRST = R; wall ARM / wall FIRST = W`` (the
first arm is the reference)::

    python benchmarks/bench_memory.py --out runs/bench_memory \\
        --arm before:release_memory=false,rollout.prefix_cache_tokens=32768 --arm shipped:

An arm is ``NAME:KEY=VALUE,...`` (``NAME:`` alone: the recipe as it is); an upper-case KEY is
an environment variable of the arm's process instead of a setting, e.g.
``--arm cache0:ONEDNN_PRIMITIVE_CACHE_CAPACITY=0`` (oneDNN reads it when it first runs).
Shortened (``--short``,
overridable by the arms): 16 games on ``valid_seen`` only, 8 expert games, one SFT epoch,
one RL iteration, one torch thread. Arms run one after the other unless ``--jobs 2``
(then wall times and tokens/s are only roughly comparable; memory is not affected).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_options import parse_arm  # NAME:KEY=VALUE,... (benchmarks/ is on the path)

SHORT = [
    "eval.max_tasks=16",
    "eval.splits=[valid_seen]",
    "sft.expert_tasks=8",
    "sft.epochs=1",
    "iterations=1",
    "threads=1",
]


def child(recipe: str, run_dir: str, sets: list[str]) -> None:
    """Run one arm in this process; write ``run_dir/bench_memory.json``."""
    from roleagent.config import load_config
    from roleagent.trainer import Trainer

    started = time.perf_counter()
    trainer = Trainer(load_config(recipe, [*sets, f"run_dir={run_dir}"]), resume=False, quiet=True)
    try:
        trainer.run()
    finally:
        trainer.close()
    out = {
        "wall_s": time.perf_counter() - started,
        "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    (Path(run_dir) / "bench_memory.json").write_text(json.dumps(out))


def read_arm(run_dir: Path) -> dict:
    """Per phase [(start, peak), ...] in record order, and the arm's totals."""
    phases: dict[str, list[tuple[float, float]]] = {}
    totals = json.loads((run_dir / "bench_memory.json").read_text())
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key, start in record.items():
            if key.startswith("memory/") and key.endswith("_start_mb"):
                name = key.removeprefix("memory/").removesuffix("_start_mb")
                phases.setdefault(name, []).append((start, record[f"memory/{name}_peak_mb"]))
        if "iteration" in record:
            totals["reused_prompt_tokens"] = record.get("rollout/reused_prompt_tokens")
            totals["update_tokens_per_s"] = record.get("speed/train_tokens_per_s")
    sft = run_dir / "sft" / "metrics.jsonl"
    if sft.is_file():
        epochs = [json.loads(line) for line in sft.read_text().splitlines() if '"tokens_per_s"' in line]
        totals["sft_tokens_per_s"] = epochs[-1]["tokens_per_s"] if epochs else None
    return {"phases": phases, "totals": totals}


def report(arms: dict[str, dict]) -> str:
    names = list(arms)
    phases = list(dict.fromkeys(p for a in arms.values() for p in a["phases"]))
    lines = ["| phase (each run) | " + " | ".join(f"{n}: start → peak MiB" for n in names) + " |"]
    lines.append("|---" * (len(names) + 1) + "|")
    for phase in phases:
        runs = max(len(arms[n]["phases"].get(phase, [])) for n in names)
        for k in range(runs):
            cells = []
            for n in names:
                got = arms[n]["phases"].get(phase, [])
                cells.append(f"{got[k][0]:,.0f} → {got[k][1]:,.0f}" if k < len(got) else "–")
            lines.append(f"| {phase} {k + 1} | " + " | ".join(cells) + " |")
    lines.append("")
    keys = ["ru_maxrss_mb", "wall_s", "reused_prompt_tokens", "sft_tokens_per_s", "update_tokens_per_s"]
    lines.append("| arm | " + " | ".join(keys) + " |")
    lines.append("|---" * (len(keys) + 1) + "|")
    for n in names:
        t = arms[n]["totals"]
        lines.append(f"| {n} | " + " | ".join("–" if t.get(k) is None else f"{t[k]:,.0f}" for k in keys) + " |")
    lines.append("")
    ref = arms[names[0]]["totals"]
    for n in names[1:]:
        t = arms[n]["totals"]
        lines.append(
            f"peak {n} / peak {names[0]} = {t['ru_maxrss_mb'] / ref['ru_maxrss_mb']:.2f}; "
            f"wall {n} / wall {names[0]} = {t['wall_s'] / ref['wall_s']:.2f}"
        )
    return "\n".join(lines)


def arm_environment(sets: list[str]) -> tuple[dict[str, str], list[str]]:
    """An arm's settings split into its process's environment (upper-case keys) and the rest.

    >>> arm_environment(["ONEDNN_PRIMITIVE_CACHE_CAPACITY=0", "threads=1"])
    ({'ONEDNN_PRIMITIVE_CACHE_CAPACITY': '0'}, ['threads=1'])
    """
    env = dict(s.split("=", 1) for s in sets if s.split("=", 1)[0].isupper())
    return env, [s for s in sets if not s.split("=", 1)[0].isupper()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="role_agent_alfworld")
    parser.add_argument("--arm", type=parse_arm, action="append", default=[])
    parser.add_argument("--short", nargs="*", default=SHORT, help="settings every arm starts from")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_memory"))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.recipe, args.child[0], args.child[1:])
        return
    if not args.arm:
        parser.error("name at least one --arm (the first is the reference)")

    def run(arm: tuple[str, list[str]]) -> None:
        name, sets = arm
        run_dir = args.out / name
        env, sets = arm_environment(sets)
        if not (run_dir / "bench_memory.json").is_file():
            cmd = [sys.executable, __file__, "--recipe", args.recipe, "--child", str(run_dir)]
            subprocess.run([*cmd, *args.short, *sets], check=True, env={**os.environ, **env})

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(run, args.arm))
    print(report({name: read_arm(args.out / name) for name, _ in args.arm}))


if __name__ == "__main__":
    main()
