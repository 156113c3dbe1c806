"""Learning benchmark: vanilla RL (GRPO) vs full SEAL on BFCL v3 multi-turn, embedded model.

SEAL: Hu et al., 2026, "SEAL: Synergistic Co-Evolution of Agents and Learning Environments".

Both arms start from the embedded SmolLM2-135M-Instruct and use the shipped recipes
(``grpo_bfcl`` vs ``seal_bfcl``) with the same fixed subset, seeds and budgets; only the
SEAL section differs. The "before" evaluation is run once: it is the same for every arm and
seed (same weights — LoRA starts as a no-op — same plain-interface panel, greedy decoding).

Printed per arm: eval success before/after per category (mean ± std over seeds; then the
counts pooled over seeds with 95 % Wilson intervals, the paired test of the shared start
against every seed's final evaluation, and vanilla < SEAL with the seed-level difference ±
s.e. and the paired test over (seed, task) pairs, ``_stats_table.py``), and what
the policy does on the eval panel after training: valid tool-call ratio, calls per turn,
and the distribution of the diagnosis labels (SEAL's code vocabulary per ground-truth turn
and the dominant paper-priority type per episode); for training, the SEAL arm's mean
trajectory weight and zero-variance-group share from ``metrics.jsonl``.

Run (about 17-20 min on the 2-core CPU with one torch thread; one iteration of 2 tasks × G=2
is ~220 s of rollout, one 4-task evaluation ~200 s, at ~150 prompt tokens/s)::

    nice -n 15 python benchmarks/bench_seal_learning.py --seeds 0 --iterations 1

``--measure`` times one training iteration and one evaluation and exits (for sizing).

From a ground-truth-SFT start (``--warm-start DIR``, or ``--expert-tasks N`` to build it
first with ``roleagent sft --expert grpo_bfcl_sft``): both arms (``grpo_bfcl_sft`` and
``seal_bfcl_sft``) start from that ONE checkpoint (``model.init_from``, fresh LoRA
adapters, no warm start of their own); "before" is the checkpoint's shared evaluation and
the base model is evaluated on the same panel too. Results go to ``--out``/results.json::

    nice -n 10 python benchmarks/bench_seal_learning.py --expert-tasks 32 --seeds 0 1 2 \
        --iterations 1 --max-new-tokens 256
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

import _stats_table as st  # noqa: E402

from roleagent.config import load_config  # noqa: E402
from roleagent.methods.seal.method import diagnosis_metrics  # noqa: E402
from roleagent.trainer import Trainer  # noqa: E402

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
ARMS = {"vanilla": "grpo_bfcl", "seal": "seal_bfcl"}
SFT_ARMS = {"vanilla": "grpo_bfcl_sft", "seal": "seal_bfcl_sft"}  # from a ground-truth-SFT start


def arms(args) -> dict[str, str]:
    return SFT_ARMS if args.warm_start else ARMS


def overrides(args, run_dir: Path, seed: int, iterations: int) -> list[str]:
    start = [f"model.init_from={args.warm_start}", "sft.enabled=false"] if args.warm_start else []
    return start + [
        f"run_dir={run_dir}",
        f"seed={seed}",
        f"iterations={iterations}",
        f"threads={args.threads}",
        "report_to=[jsonl]",
        "env.processes=false",
        "eval.at_start=false",
        f"env.kwargs.train_per_category={args.train_per_category}",
        f"env.kwargs.eval_per_category={args.eval_per_category}",
        f"env.kwargs.max_steps_per_turn={args.max_steps_per_turn}",
        f"rollout.tasks_per_iter={args.tasks_per_iter}",
        f"rollout.group_size={args.group_size}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        f"rollout.history={args.history}",
    ]


def panel_stats(trainer: Trainer, trajectories) -> dict:
    """Per-category success (% and, under ``evaluations``, counts and per-task outcomes in
    panel order) and what the policy does (calls, labels) on a set of episodes."""
    diagnoses = []
    for t in trajectories:
        d = t.diagnosis
        if d is None and not t.crashed and t.steps:
            d = next((s.info["diagnosis"] for s in reversed(t.steps) if "diagnosis" in (s.info or {})), None)
            d = d or trainer.pool.diagnose(t)
        if d is not None:
            diagnoses.append(d)
    success = {c: [t.success for t in trajectories if t.task.metadata.get("category") == c] for c in CATEGORIES}
    out = {
        "success": {c: 100.0 * float(np.mean(v)) for c, v in success.items() if v},
        "behaviour": diagnosis_metrics(trajectories, diagnoses),
    }
    out["success"]["All"] = 100.0 * float(np.mean([t.success for t in trajectories]))
    outcomes = [(t.task.metadata.get("category"), None if t.crashed else bool(t.success)) for t in trajectories]
    out["evaluations"] = {
        c: st.panel_evaluation({"eval/outcomes": [o for category, o in outcomes if c in (category, "All")]})
        for c in out["success"]
    }
    # turns that ran into rollout.max_new_tokens: the policy did not end its turn
    limit = trainer.cfg.rollout.max_new_tokens
    steps = [s for t in trajectories for s in t.steps if s.action_ids]
    out["behaviour"]["cut_turns"] = float(np.mean([len(s.action_ids) >= limit for s in steps])) if steps else 0.0
    return out


def run_arm(args, arm: str, seed: int) -> dict:
    run_dir = Path(args.out) / f"{arm}_s{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = load_config(arms(args)[arm], overrides(args, run_dir, seed, args.iterations))
    started = time.perf_counter()
    trainer = Trainer(cfg, quiet=True)
    try:
        trainer.run()
        after = panel_stats(trainer, trainer.evals[-1].trajectories)
    finally:
        trainer.close()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "iteration" in r]
    return {"after": after, "train": train, "seconds": time.perf_counter() - started}


def fmt_mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:6.2f}"
    return f"{np.mean(values):6.2f} ± {np.std(values, ddof=1):.2f}"


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--tasks-per-iter", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--train-per-category", type=int, default=2)
    parser.add_argument("--eval-per-category", type=int, default=1)
    parser.add_argument("--max-steps-per-turn", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--history", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="runs/bench_seal_learning")
    parser.add_argument("--measure", action="store_true", help="time one iteration and one eval, then exit")
    parser.add_argument("--warm-start", default="", help="an SFT checkpoint both arms start from (model.init_from)")
    parser.add_argument(
        "--expert-tasks", type=int, default=0, help="without --warm-start: build it from the expert on N train tasks"
    )
    parser.add_argument("--skip-base", action="store_true", help="with a warm start: do not evaluate the base model")
    return parser.parse_args()


def _build_warm_start(args: argparse.Namespace) -> None:
    """``args.warm_start``: the given checkpoint, or one built from the ground-truth expert
    on ``--expert-tasks`` training tasks (``roleagent sft --expert grpo_bfcl_sft``)."""
    if args.warm_start or not args.expert_tasks:
        return
    from bench_learning import warm_start  # noqa: PLC0415 - the same builder as the ALFWorld benchmark

    args.warm_start = str(
        warm_start(
            recipe=SFT_ARMS["vanilla"],
            overrides=[f"threads={args.threads}"],
            out=Path(args.out),
            tasks=args.expert_tasks,
        )
    )


def _evaluate_before(args: argparse.Namespace) -> tuple[dict, int] | None:
    """Shared "before" evaluation: (panel stats, panel size); with --measure, time one
    training iteration instead and return None."""
    run_dir = Path(args.out) / "before"
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = load_config(arms(args)["seal" if args.measure else "vanilla"], overrides(args, run_dir, args.seeds[0], 1))
    trainer = Trainer(cfg, quiet=True)
    try:
        print(
            f"train tasks {len(trainer.train_tasks)}, eval panel {len(trainer.eval_tasks)}: "
            f"{[t.id.rsplit('/', 1)[-1] for t in trainer.eval_tasks]}",
            flush=True,
        )
        t0 = time.perf_counter()
        before = panel_stats(trainer, trainer.evaluate("before").trajectories)
        eval_s = time.perf_counter() - t0
        print(f"eval before: {eval_s:.0f}s", flush=True)
        if args.measure:
            t0 = time.perf_counter()
            record = trainer.train_iteration(0)
            print(
                f"one SEAL iteration: {time.perf_counter() - t0:.0f}s "
                f"(rollout {record['time/rollout_s']:.0f}s, update {record['time/update_s']:.0f}s, "
                f"samples {record.get('update/samples')}, prompt tokens/s "
                f"{record['speed/rollout_tokens_per_s']:.0f})",
                flush=True,
            )
            print(json.dumps({k: v for k, v in record.items() if k.startswith(("seal/", "train/"))}, indent=1))
            return None
        return before, len(trainer.eval_tasks)
    finally:
        trainer.close()


def _print_success(
    args: argparse.Namespace, before: dict, results: dict[str, list[dict]], n_eval: int, base: dict | None = None
) -> None:
    cols = list(CATEGORIES) + ["All"]
    print(
        f"\nBFCL v3 multi-turn eval success (%), {n_eval}-task plain-interface panel, "
        f"seeds {args.seeds}, {args.iterations} iterations × {args.tasks_per_iter} tasks × G={args.group_size}"
    )
    print(f"{'':18s}" + "".join(f"{c:>16s}" for c in cols))
    if base is not None:
        print(f"{'base model':18s}" + "".join(f"{base['success'].get(c, float('nan')):16.2f}" for c in cols))
    label = "SFT start" if args.warm_start else "before (shared)"
    print(f"{label:18s}" + "".join(f"{before['success'].get(c, float('nan')):16.2f}" for c in cols))
    for arm, runs in results.items():
        cells = [fmt_mean_std([r["after"]["success"].get(c, float("nan")) for r in runs]) for c in cols]
        print(f"{arm + ' after':18s}" + "".join(f"{x:>16s}" for x in cells))

    print("\nCounts pooled over seeds, 95% Wilson intervals, paired tests over (seed, task) pairs")
    print("\n".join(st.md_header(["row", "category", *st.BEFORE_AFTER_COLUMNS])))
    compared = {f"{arm} after": [r["after"] for r in runs] for arm, runs in results.items()}
    if base is not None:  # the SFT start against the base model, on the same panel
        compared = {"SFT start (from base)": [before]} | compared
    for label, finals in compared.items():
        start = base if label.startswith("SFT start") else before
        for c in cols:
            cells = st.before_after_cells(start["evaluations"].get(c), [f["evaluations"].get(c, {}) for f in finals])
            print(f"| {label} | {c} | " + " | ".join(cells) + " |")
    runs = {arm: {s: (r["after"]["success"]["All"], r["after"]["evaluations"]["All"]) for s, r in zip(args.seeds, v)}
            for arm, v in results.items()}  # fmt: skip
    print("\n".join(["", *st.ordering_table([("vanilla", "seal")], runs)]))

    print("\nEval-panel behaviour (greedy; mean over seeds for the trained arms)")
    keys = sorted({k for r in [before] + [x["after"] for v in results.values() for x in v] for k in r["behaviour"]})
    rows = (
        ({"base model": [base["behaviour"]]} if base is not None else {})
        | {"before": [before["behaviour"]]}
        | {f"{arm} after": [x["after"]["behaviour"] for x in runs] for arm, runs in results.items()}
    )
    print(f"{'':28s}" + "".join(f"{label:>16s}" for label in rows))
    for k in keys:
        print(f"{k:28s}" + "".join(f"{np.mean([b.get(k, 0.0) for b in v]):16.3f}" for v in rows.values()))


def _print_training(results: dict[str, list[dict]]) -> None:
    print("\nTraining rollouts (mean over iterations and seeds)")
    train_keys = [
        "train/success",
        "train/zero_variance_groups",
        "train/advantage_abs_mean",
        "update/samples",
        "seal/weight_mean",
        "seal/weight_min",
        "seal/weight_max",
        "seal/valid_call_ratio",
        "seal/guidelines",
        "time/iteration_s",
    ]
    print(f"{'':28s}" + "".join(f"{arm:>16s}" for arm in results))
    for k in train_keys:
        vals = [
            [rec[k] for r in runs for rec in r["train"] if isinstance(rec.get(k), (int, float))]
            for runs in results.values()
        ]
        print(f"{k:28s}" + "".join(f"{np.mean(v):16.3f}" if v else f"{'-':>16s}" for v in vals))
    train_labels = Counter()
    for r in results["seal"]:
        for rec in r["train"]:
            train_labels.update({k[len("seal/") :]: v for k, v in rec.items() if k.startswith("seal/label_")})
    n = sum(1 for r in results["seal"] for _ in r["train"])
    print("SEAL train turn-label shares: " + ", ".join(f"{k[6:]} {v / n:.3f}" for k, v in sorted(train_labels.items())))


def main() -> None:
    args = _parse_args()
    started = time.perf_counter()
    _build_warm_start(args)
    print(f"config: {vars(args)}", flush=True)
    base = None
    if args.warm_start and not args.skip_base:
        base = _evaluate_before(argparse.Namespace(**{**vars(args), "warm_start": ""}))
    shared = _evaluate_before(args)
    if shared is None:
        return
    before, n_eval = shared
    results: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for seed in args.seeds:
        for arm in ARMS:
            r = run_arm(args, arm, seed)
            results[arm].append(r)
            print(f"{arm} seed {seed}: {r['seconds']:.0f}s, after {r['after']['success']}", flush=True)
            summary = {"config": vars(args), "base": base and base[0], "before": before, "runs": results}
            (Path(args.out) / "results.json").write_text(json.dumps(summary, indent=1, default=str))
    _print_success(args, before, results, n_eval, base=base and base[0])
    _print_training(results)
    print(f"\ntotal {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
