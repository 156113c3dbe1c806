"""Learning: can roleagent rank methods? The Role-Agent ablation (Wang et al., 2026, arXiv
2606.10917, Table 3) from ONE shared warm start, with curves and seeds.

Each configuration is a shipped recipe, so the table measures exactly what users run:

    Role-Agent   role_agent_aiw_alfworld     World-In-Agent + Agent-In-World
    w/o AIW      role_agent_no_aiw_alfworld  World-In-Agent only
    w/o WIA      role_agent_no_wia_alfworld  Agent-In-World only (A = A^S + alpha A^E)
    GiGPO        gigpo_alfworld
    GRPO         grpo_alfworld

Protocol (the same for every arm): one SFT checkpoint is built first from the planner's
expert episodes on TRAINING games (``roleagent sft --expert``), or given with
``--init-from``; every run starts from it (``model.init_from``, fresh LoRA adapters, no
warm start of its own), trains for the same number of iterations with the same batch, and
is evaluated greedily on the same fixed panel every ``--eval-every`` iterations and at the
end. The panel is never trained on. Iteration 0 of every curve is one shared evaluation
of the warm-start policy (greedy decoding from the same weights is the same for every run).

Output (in ``--out``): ``results.json`` (every run's curve and final per-game outcomes),
``curves.png`` (panel success against iteration, mean over seeds with a ±1 sample-std band),
``table.md`` (before and after, mean ± sample std over seeds, and the counts pooled over
seeds with 95 % Wilson intervals and the paired test of the warm start against every
seed's final evaluation; the orderings the paper reports and what the measurement shows:
the seed-level difference ± s.e. and the paired test over (seed, game) pairs, with the
verdict from the paired test where per-game outcomes were recorded; ``_stats_table.py``).

Runs go to subprocesses (``roleagent train``), ``--jobs`` at a time; with more than one
job each uses one torch thread (two processes that each want every core slow each other
~10x on a 2-core machine).

    python benchmarks/bench_learning.py [--init-from DIR] [--expert-tasks 120]
        [--configs Role-Agent GRPO] [--seeds 0 1 2] [--jobs 2] [--eval-every 2]
        [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _stats_table as st
import numpy as np

from roleagent.config import load_config
from roleagent.trainer import Trainer

CONFIGS = {
    "Role-Agent": "role_agent_aiw_alfworld",
    "w/o AIW": "role_agent_no_aiw_alfworld",
    "w/o WIA": "role_agent_no_wia_alfworld",
    "GiGPO": "gigpo_alfworld",
    "GRPO": "grpo_alfworld",
}
#: the paper's ordering of final success, worst first (Table 3: GRPO < GiGPO < the two
#: ablations < Role-Agent; the ablations are not ordered against each other)
PAPER_ORDER = [("GRPO", "GiGPO"), ("GiGPO", "w/o AIW"), ("GiGPO", "w/o WIA"), ("w/o AIW", "Role-Agent"),
               ("w/o WIA", "Role-Agent")]  # fmt: skip


def slug(name: str) -> str:
    return name.lower().replace("/", "").replace(" ", "_").replace("-", "_")


def run_cli(command: list[str], log: Path) -> None:
    with open(log, "w") as fh:
        rc = subprocess.run([sys.executable, "-m", "roleagent.cli", *command], stdout=fh, stderr=subprocess.STDOUT)
    if rc.returncode != 0:
        raise RuntimeError(f"roleagent {command[0]} failed (exit {rc.returncode}); see {log}")


def warm_start(*, recipe: str, overrides: list[str], out: Path, tasks: int) -> Path:
    """The shared SFT checkpoint, from expert episodes on ``tasks`` training games."""
    target = out / "warm_start"
    target.mkdir(parents=True, exist_ok=True)
    command = ["sft", "--expert", recipe, "--tasks", str(tasks), "--out", str(target)]
    for item in overrides:
        command += ["--set", item]
    started = time.perf_counter()
    run_cli(command, target / "sft.log")
    print(f"warm start: {tasks} expert games, {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    return target / "final"


def shared_evaluation(*, recipe: str, overrides: list[str], out: Path) -> float:
    """Panel success (%) of the warm-start policy: iteration 0 of every curve."""
    sets = [*overrides, f"run_dir={out / 'warm_start_eval'}", "report_to=[jsonl]"]
    trainer = Trainer(load_config(recipe, sets), quiet=True, resume=False)
    try:
        return trainer.evaluate("before").table["All"]  # tables are in percent
    finally:
        trainer.close()


def train_one(*, name: str, seed: int, overrides: list[str], out: Path, threads: int) -> dict | None:
    """Train one (configuration, seed) in a subprocess, then read its curve. A failed or
    interrupted run keeps what it evaluated (``read_run``); the others go on."""
    run_dir = out / f"{slug(name)}_seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    # threads first, so that a user's --set threads=N wins
    sets = [f"threads={threads}", *overrides, f"seed={seed}", f"run_dir={run_dir}", "report_to=[jsonl]"]
    command = [
        "train",
        CONFIGS[name],
        "--no-resume",
        *[x for s in [*sets, "eval.at_start=false"] for x in ("--set", s)],
    ]
    started = time.perf_counter()
    try:
        run_cli(command, run_dir / "train.log")
    except RuntimeError as error:
        print(error, flush=True)
    result = read_run(run_dir, name, seed, minutes=(time.perf_counter() - started) / 60)
    if result is not None:
        print(f"{name} seed {seed}: {result['after']:.1f}% at iteration {result['curve'][-1][0]}", flush=True)
    return result


def read_run(run_dir: Path, name: str, seed: int, minutes: float = float("nan")) -> dict | None:
    """A run's panel curve from its metrics.jsonl: ``(iteration, success %)`` for every
    evaluation of the first panel ("iterK" after K iterations, "after" at the end); None
    when it evaluated nothing. ``complete`` says whether the final evaluation is there;
    ``final`` is the last evaluation's counts and per-game outcomes (``_stats_table``)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    first_panel = next((r.get("split") for r in records if "eval" in r), None)
    iterations = [r for r in records if "iteration" in r]
    curve, evaluated = {}, {}
    for r in records:
        if "eval" not in r or r.get("split") != first_panel:
            continue
        if r["eval"].startswith("iter"):
            evaluated[int(r["eval"][4:])] = r
        elif r["eval"] == "after":
            evaluated[len(iterations)] = r
    curve = {iteration: 100 * r["eval/success"] for iteration, r in evaluated.items()}
    if not curve:
        return None
    points = sorted(curve.items())
    return {
        "config": name,
        "seed": seed,
        "minutes": minutes,
        "curve": points,
        "after": points[-1][1],
        "complete": any(r.get("eval") == "after" for r in records),
        "train_success": 100 * float(np.mean([r["train/success"] for r in iterations])) if iterations else 0.0,
        "final": st.panel_evaluation(evaluated[points[-1][0]]),
    }


def minutes(rows: list[dict]) -> str:
    """Mean minutes per run ("-" when the runs were only tabulated)."""
    values = [r["minutes"] for r in rows if np.isfinite(r["minutes"])]
    return f"{np.mean(values):.1f}" if values else "-"


def stopped_note(results: list[dict]) -> str:
    """The table header's note on runs that stopped before their final evaluation ('' if none)."""
    incomplete = [
        f"{r['config']} seed {r['seed']} (iteration {r['curve'][-1][0]})" for r in results if not r["complete"]
    ]
    return "\n\nStopped before the end (their last evaluation is used): " + ", ".join(incomplete) if incomplete else ""


def mean_std(values: list[float]) -> str:
    """Mean ± sample standard deviation (ddof=1) over seeds.

    >>> mean_std([10.0, 20.0, 30.0])
    ' 20.0 ± 10.0'
    """
    if not values:
        return "-"
    return f"{np.mean(values):5.1f} ± {np.std(values, ddof=1) if len(values) > 1 else 0.0:4.1f}"


def final_runs(results: list[dict], arm: str = "config", value: str = "after") -> dict[str, dict[int, tuple]]:
    """arm → seed → (final success %, final evaluation) of result dicts that name their arm
    and success % under the keys ``arm`` and ``value``: :func:`_stats_table.ordering_table`'s input."""
    runs: dict[str, dict[int, tuple]] = {}
    for r in results:
        runs.setdefault(r[arm], {})[r["seed"]] = (r[value], r.get("final") or {})
    return runs


def plot(results: list[dict], before: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(r["config"] for r in results):
        curves = [dict([(0, before), *r["curve"]]) for r in results if r["config"] == name]
        xs = sorted(set.intersection(*(set(c) for c in curves)))
        ys = np.array([[c[x] for x in xs] for c in curves])  # (seeds, points)
        mean, std = ys.mean(0), ys.std(0, ddof=1) if len(ys) > 1 else np.zeros(len(xs))
        ax.plot(xs, mean, marker="o", label=f"{name} (n={len(ys)})")
        ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("RL iteration")
    ax.set_ylabel("panel success (%)")
    ax.set_ylim(0, 100)
    ax.set_title("success vs iteration (mean ± 1 sample std over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def table(results: list[dict], before: float, configs: list[str], header: str, start: dict | None = None) -> str:
    """Before (``start``: the shared warm-start evaluation's counts and outcomes) and after
    per configuration, mean ± sample std over seeds and pooled counts with the paired
    test; then the paper's orderings (``_stats_table.ordering_table``)."""
    columns = ["before %", "after %", "after − before", "train %", "min/run", *st.BEFORE_AFTER_COLUMNS]
    lines = [header, "", *st.md_header(["config", *columns])]
    for name in configs:
        rows = [r for r in results if r["config"] == name]
        after = [r["after"] for r in rows]
        gain = [a - before for a in after]
        counts = st.before_after_cells(start, [r.get("final") or {} for r in rows])
        lines.append(
            f"| {name} | {before:.1f} | {mean_std(after)} | {mean_std(gain)} | "
            f"{mean_std([r['train_success'] for r in rows])} | {minutes(rows)} | " + " | ".join(counts) + " |"
        )
    return "\n".join([*lines, "", *st.ordering_table(PAPER_ORDER, final_runs(results))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (each then uses 1 thread)")
    parser.add_argument("--init-from", help="an SFT checkpoint every run starts from (else one is built)")
    parser.add_argument("--expert-tasks", type=int, default=120, help="training games for the built warm start")
    parser.add_argument("--eval-every", type=int, default=2, help="panel evaluation every k iterations")
    parser.add_argument("--out", default="runs/bench_learning")
    parser.add_argument("--set", action="append", default=[], help="override applied to every run")
    parser.add_argument("--summarize", action="store_true", help="only tabulate the runs already in --out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    recipe = CONFIGS[args.configs[0]]
    runs = [(name, seed) for seed in args.seeds for name in args.configs]  # seed-major: an
    # interrupted benchmark still has every configuration for the first seeds
    if args.summarize:
        saved = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
        init, before = saved.get("init_from", args.init_from), saved.get("before", float("nan"))
        results = [read_run(out / f"{slug(n)}_seed{s}", n, s) for n, s in runs]
    else:
        init = args.init_from or warm_start(recipe=recipe, overrides=args.set, out=out, tasks=args.expert_tasks)
        before = shared_evaluation(recipe=recipe, overrides=common_sets(args, init), out=out)
        print(f"warm-start policy: {before:.1f}%", flush=True)
        (out / "results.json").write_text(json.dumps({"init_from": str(init), "before": before, "runs": []}))
        threads = 1 if args.jobs > 1 else 0
        with ThreadPoolExecutor(max_workers=args.jobs) as executor:
            results = list(
                executor.map(
                    lambda r: train_one(
                        name=r[0], seed=r[1], overrides=common_sets(args, init), out=out, threads=threads
                    ),
                    runs,
                )
            )
    results = [r for r in results if r is not None]
    start = st.panel_evaluation(st.eval_record(out / "warm_start_eval", "before"))  # {} when not there
    cfg = load_config(recipe, common_sets(args, init))
    header = (
        f"From `{init}`; recipes with --set {' '.join(args.set) or '(none)'}: {cfg.iterations} iterations x "
        f"{cfg.rollout.tasks_per_iter} tasks x {cfg.rollout.group_size} rollouts, env {cfg.env.kwargs}, panel "
        f"{eval_panel(cfg)} (first {cfg.eval.max_tasks or 'all'} tasks, greedy), seeds {args.seeds}, "
        f"{(time.perf_counter() - started) / 60:.0f} min in all"
    )
    header += stopped_note(results)
    text = table(results, before, args.configs, header, start)
    print("\n" + text)
    (out / "table.md").write_text(text + "\n")
    saved = {"init_from": str(init), "before": before, "start": start, "runs": results}
    (out / "results.json").write_text(json.dumps(saved, indent=2))
    plot(results, before, out / "curves.png")
    print(f"curves: {out / 'curves.png'}")


def common_sets(args, init) -> list[str]:
    """The overrides every run (and the shared evaluation) gets."""
    return [*args.set, f"model.init_from={init}", "sft.enabled=false", f"eval.every={args.eval_every}"]


def eval_panel(cfg) -> str:
    return (cfg.eval.splits or [cfg.env.eval_split])[0]


if __name__ == "__main__":
    main()
