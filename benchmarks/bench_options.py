"""Does a training option change learning? Arms that differ in a few settings, each run from
the same start on the same task set for several seeds, compared game by game.

The default is the learning probe (``roleagent/recipes/signpost_probe.yaml``: two scripted
games, the tiny random model, 10 iterations, evaluation before and after with greedy decoding
and 8 sampled passes), where a run takes about a minute on a CPU core, so options that the
issue "RL that verifiably learns" asks to measure can be measured with seeds::

    python benchmarks/bench_options.py --set algo.name=gigpo --seeds 0 1 2 3 4 \\
        --arm keep: --arm zero:algo.same_action_groups=zero \\
        --arm dynamic:dynamic_sampling.enabled=true --out runs/bench_options

An arm is ``NAME:KEY=VALUE,KEY=VALUE`` (``NAME:`` alone: the recipe as it is); the first arm
is the reference. Seed s seeds everything (the tiny model's random weights, the sampling,
the task order), so the arms of one seed share their start and their before-evaluation, and
differ only by the option. A (seed, game) pair is the test's unit:

- each arm's after-training success, greedy and sampled, pooled over seeds with its count
  and 95% Wilson interval, and its before → after change per (seed, game)
  (``roleagent.stats.paired_rate_test`` on the sampled rates);
- every other arm against the reference: the same test on their after-training sampled
  rates, per (seed, game);
- training success per iteration, pooled over seeds (the episodes the update learned from).

A finished run is not played again (rerun with more ``--seeds`` to add some); ``--summarize``
only tabulates what ``--out`` holds. Writes ``OUT/results.json`` and ``OUT/table.md``.
"""

from __future__ import annotations

import argparse
import json
from contextlib import contextmanager
from pathlib import Path

from roleagent.config import load_config
from roleagent.stats import format_rate, paired_rate_test
from roleagent.trainer import Trainer


def parse_arm(text: str) -> tuple[str, list[str]]:
    """``"zero:algo.same_action_groups=zero"`` → ``("zero", ["algo.same_action_groups=zero"])``.

    >>> parse_arm("keep:"), parse_arm("b:x=1,y=2")
    (('keep', []), ('b', ['x=1', 'y=2']))
    """
    name, sep, sets = text.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"an arm is NAME:KEY=VALUE,... (NAME: alone for none), not {text!r}")
    return name, [s for s in sets.split(",") if s]


@contextmanager
def shuffled_advantages(seed: int):
    """A control without the learning signal, for as long as the ``with`` block runs: each
    iteration's non-zero advantages permuted among their samples (seeded by ``seed``), so the
    same samples train with the same magnitudes, each with another sample's advantage: an
    update of the same size as the estimator's, carrying none of its information about which
    action was better. A real rise that the control does not show is the signal's."""
    import numpy as np

    import roleagent.trainer.loop as loop

    estimate, rng = loop.compute_advantages, np.random.default_rng(1000 + seed)

    def shuffled(batch, cfg, settings=None):
        out = estimate(batch, cfg, settings)
        value = np.array(out.value, copy=True)
        trained = np.flatnonzero(value)
        value[trained] = rng.permutation(value[trained])
        out.value = value
        return out

    loop.compute_advantages = shuffled
    try:
        yield
    finally:
        loop.compute_advantages = estimate  # the process may go on (a test calls this)


def run_arm(recipe: str, sets: list[str], run_dir: Path) -> dict:
    """One run (skipped when ``run_dir`` already holds its after-training evaluation);
    its evaluations and per-iteration training success from ``metrics.jsonl``."""
    if not _finished(run_dir):
        trainer = Trainer(load_config(recipe, [*sets, f"run_dir={run_dir}"]), resume=False, quiet=True)
        try:
            trainer.run()
        finally:
            trainer.close()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = {r["eval"]: _evaluation(r) for r in records if r.get("eval") in ("before", "after")}
    train = [(r["train/successes"], r["train/episodes"]) for r in records if "iteration" in r]
    return {**evals, "train": train}


def _finished(run_dir: Path) -> bool:
    path = run_dir / "metrics.jsonl"
    return path.is_file() and any('"eval": "after"' in line for line in path.read_text().splitlines())


def _evaluation(record: dict) -> dict:
    """Greedy outcomes and sampled (successes, episodes) per game of one evaluation record."""
    return {
        "greedy": [None if x is None else bool(x) for x in record["eval/outcomes"]],
        "sampled": [list(p) for p in zip(record["eval/sampled_game_successes"], record["eval/sampled_game_episodes"])],
    }


def table(results: dict[str, dict[int, dict]]) -> str:
    """The markdown report (module docstring) of ``{arm: {seed: run}}``."""
    arms = list(results)
    reference = arms[0]
    seeds = sorted(set.intersection(*(set(runs) for runs in results.values())))
    lines = [
        f"Seeds {', '.join(map(str, seeds))}; units: (seed, game) pairs. k/n = success [95% Wilson interval], in %.",
        "",
        "| arm | greedy after | sampled before | sampled after | before → after, per (seed, game) | "
        f"vs {reference} after, per (seed, game) |",
        "|---|---|---|---|---|---|",
    ]
    for arm in arms:
        runs = [results[arm][s] for s in seeds]
        greedy = [x for r in runs for x in r["after"]["greedy"] if x is not None]
        before = [tuple(p) for r in runs for p in r["before"]["sampled"]]
        after = [tuple(p) for r in runs for p in r["after"]["sampled"]]
        reference_after = [tuple(p) for s in seeds for p in results[reference][s]["after"]["sampled"]]
        lines.append(
            f"| {arm} | {format_rate(sum(greedy), len(greedy))} | {_pooled(before)} | {_pooled(after)} | "
            f"{paired_rate_test(before, after)} | {'-' if arm == reference else paired_rate_test(reference_after, after)} |"
        )
    iterations = min(len(results[a][s]["train"]) for a in arms for s in seeds)
    lines += ["", "| iteration | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for i in range(iterations):
        cells = [_pooled([results[a][s]["train"][i] for s in seeds]) for a in arms]
        lines.append(f"| {i} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pooled(rates) -> str:
    return format_rate(sum(k for k, _ in rates), sum(n for _, n in rates))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default="signpost_probe")
    parser.add_argument("--arm", action="append", type=parse_arm, required=True, metavar="NAME:KEY=VALUE,...")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="every arm's override")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_options"))
    parser.add_argument("--summarize", action="store_true", help="only tabulate the finished runs in --out")
    args = parser.parse_args(argv)
    if len({name for name, _ in args.arm}) != len(args.arm):
        parser.error("arm names must differ")
    results: dict[str, dict[int, dict]] = {}
    for seed in args.seeds:  # seed by seed, so a stopped benchmark has whole seeds
        for name, sets in args.arm:
            run_dir = args.out / name / f"seed{seed}"
            if args.summarize and not _finished(run_dir):
                continue
            results.setdefault(name, {})[seed] = run_arm(args.recipe, [*args.set, *sets, f"seed={seed}"], run_dir)
            print(f"{name} seed {seed}: sampled {results[name][seed]['after']['sampled']}", flush=True)
    report = table(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"arms": dict(args.arm), "results": results}, indent=1))
    (args.out / "table.md").write_text(report + "\n")
    print(report)


if __name__ == "__main__":
    main()
