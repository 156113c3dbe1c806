"""Does the main job's RL phase keep what SFT gave? Arms of the RL phase alone, each run from
the same SFT checkpoint for several seeds, compared game by game with the checkpoint's own
evaluation on the same panels.

The main job (``roleagent train role_agent_alfworld``) evaluates its panels after SFT and
after RL. Its RL phase alone is the same recipe with ``sft.enabled=false`` and
``model.init_from=RUN/sft/final``: seeded as the job, it replays the job's RL phase exactly
(the same training successes, KL and panel outcomes; checked on the main job's run 3). So
arms that change a few RL settings can be compared from one start without repeating the SFT
or its evaluation::

    python benchmarks/bench_rl_phase.py --reference runs/role_agent_alfworld --seeds 0 1 2 --jobs 2 \\
        --arm shipped: --arm meannorm:algo.norm=mean_norm --out runs/bench_rl_phase

An arm is ``NAME:KEY=VALUE,...`` (``NAME:`` alone: the recipe as it is); run ``NAME_sSEED``
goes to ``--out``. Two keys are the benchmark's own. ``recipe=NAME`` runs another shipped
recipe's RL phase from the same start (the Role-Agent ablation of Wang et al., 2026, arXiv
2606.10917, Table 3, from the main job's SFT: ``--arm GRPO:recipe=grpo_alfworld``, and
``--compare GRPO:GiGPO`` adds the paired test of the ordering the paper reports). A control,
``shuffle_advantages=true``, permutes each iteration's non-zero advantages among their
samples (the same samples train, with the same magnitudes, each with another sample's
advantage), an update of the same size without the signal: ``--arm shuffled:shuffle_advantages=true``.
The start is the reference run's ``--label`` evaluation (``sft``) of each split (or of the
``--splits`` chosen, the only panels the runs then play), read with its per-game outcomes
from its ``metrics.jsonl``. Per arm and split:

- the after-RL success of each seed (k/48) and pooled over seeds with a 95% Wilson interval;
- games lost (solved at the start, failed after) and won, summed over seeds;
- a paired test with the game as its unit: each game's after-RL success rate over the seeds
  against its start outcome (``roleagent.stats.paired_rate_test``; the seeds of one game
  share their start, so they are not independent pairs), with a one-word verdict;
- the same test against the first arm, and for each ``--compare A:B`` (A expected below B);
- with ``eval.sampled`` (``--set eval.sampled=K``, and a reference evaluated with it): the same
  for the sampled passes, per game the successes over K episodes × seeds, so a game's change
  is a rate and a fragile greedy win weighs what it is worth (``paired_rate_test``);
- per seed, the training successes, optimizer steps and KL of each iteration, and in an arm
  with World-In-Agent its mechanism: the mean prediction score and its correlation with
  success, the scores' spread inside state groups, and how much of the step credit the
  predictions flipped (``wia/credit_*``, docs/metrics.md).

A finished run (its last evaluation written) is not played again; ``--summarize`` only
tabulates what ``--out`` holds. Writes ``OUT/results.json`` and ``OUT/table.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_options import parse_arm, shuffled_advantages

from roleagent.stats import format_rate, paired_rate_test


def evaluations(run_dir: Path, label: str) -> dict[str, list[bool | None]]:
    """``{split: per-game outcomes}`` of the run's ``label`` evaluation (the last of that label)."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if record.get("eval") == label:
            out[record["split"]] = [None if x is None else bool(x) for x in record["eval/outcomes"]]
    return out


def sampled_rates(run_dir: Path, label: str) -> dict[str, list[tuple[int, int]]]:
    """``{split: per game (successes, episodes)}`` of the ``label`` evaluation's sampled passes
    (``eval.sampled`` > 0); a split evaluated greedily only is absent."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if record.get("eval") == label and "eval/sampled_game_successes" in record:
            pairs = zip(record["eval/sampled_game_successes"], record["eval/sampled_game_episodes"])
            out[record["split"]] = [(int(k), int(n)) for k, n in pairs]
    return out


#: World-In-Agent's per-iteration mechanism metrics (docs/metrics.md), in an arm that predicts
WIA_KEYS = ("score", "success_corr", "score_std_in_group", "credit_sign_changed", "credit_corr")


def training(run_dir: Path) -> list[dict]:
    """Per iteration: training successes of episodes, optimizer steps, KL to the start (and
    the SFT replay term's loss, when the arm replays; World-In-Agent's ``WIA_KEYS``, when it
    predicts)."""
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if "iteration" in record:
            rows.append(
                {
                    "successes": f"{record['train/successes']}/{record['train/episodes']}",
                    "steps": record.get("update/optimizer_steps", 0),
                    "kl": record.get("update/kl", 0.0),
                    "replay": record.get("update/sft_replay_loss"),  # optim.sft_replay_coef > 0
                    **({"wia": {k: record.get(f"wia/{k}") for k in WIA_KEYS}} if "wia/score" in record else {}),
                }
            )
    return rows


def _wia_cell(wia: dict) -> str:
    """``WIA_KEYS`` of one iteration: ``score 0.95 (corr 0.12), in-group sd 0.03, credit
    flipped 4%, corr 0.98``; a metric the run did not write is ``-``."""

    def g(key: str, spec: str = ".2f") -> str:
        value = wia.get(key)
        return "-" if value is None or value != value else format(value, spec)

    return (
        f"score {g('score')} (corr {g('success_corr')}), in-group sd {g('score_std_in_group')}, "
        f"credit flipped {g('credit_sign_changed', '.0%')}, corr {g('credit_corr')}"
    )


SHUFFLE = "shuffle_advantages=true"


def arm_recipe(default: str, sets: list[str]) -> tuple[str, list[str]]:
    """The arm's recipe (its ``recipe=NAME`` key, else ``default``) and its other settings.

    >>> arm_recipe("role_agent_alfworld", ["recipe=grpo_alfworld", "seed=1"])
    ('grpo_alfworld', ['seed=1'])
    """
    recipes = [s.partition("=")[2] for s in sets if s.startswith("recipe=")]
    return (recipes[-1] if recipes else default), [s for s in sets if not s.startswith("recipe=")]


def finished(run_dir: Path, splits) -> bool:
    """The run wrote its after-RL evaluation of every split."""
    return (run_dir / "metrics.jsonl").is_file() and set(evaluations(run_dir, "after")) >= set(splits)


def run_arm(recipe: str, init_from: Path, sets: list[str], seed: int, run_dir: Path, splits: list[str]) -> None:
    """One RL phase in its own process (skipped when ``run_dir`` holds every split's after-RL evaluation)."""
    if finished(run_dir, splits):
        return
    recipe, sets = arm_recipe(recipe, sets)
    settings = ["sft.enabled=false", "eval.at_start=false", f"model.init_from={init_from}", f"seed={seed}"]
    command = [sys.executable, __file__, "--child", recipe, *[*settings, f"run_dir={run_dir}", *sets]]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{run_dir}.log", "w") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)


def child(recipe: str, sets: list[str]) -> None:
    """The run itself: ``roleagent train RECIPE --set ...``'s Trainer, with the advantages
    shuffled when the arm says so (module docstring)."""
    from contextlib import nullcontext

    from roleagent.config import load_config
    from roleagent.trainer import Trainer

    control = nullcontext()
    if SHUFFLE in sets:
        sets = [s for s in sets if s != SHUFFLE]
        control = shuffled_advantages(load_config(recipe, sets).seed)
    with control:
        trainer = Trainer(load_config(recipe, sets), resume=False)
        try:
            trainer.run()
        finally:
            trainer.close()


def table(start: dict[str, list], results: dict[str, dict[int, dict]], compare=(), start_sampled=None) -> str:
    """The markdown report (module docstring) of ``{arm: {seed: {"after": ..., "train": ...}}}``:
    each arm over its finished seeds, an arm against the first over the seeds both finished,
    and each ``(worse, better)`` pair of ``compare`` (an ordering to check) over theirs; with
    ``start_sampled`` (:func:`sampled_rates` of the start), the same for the sampled passes
    of the arms whose every seed has them (a seed's ``"sampled"``)."""
    arms, first = list(results), next(iter(results), None)
    lines = [
        "k/n = success [95% Wilson interval], in %. Seeds: " + "; ".join(f"{a} {_seeds(results[a])}" for a in arms),
        "",
    ]
    for split, before in start.items():
        lines += [
            f"**{split}**, start {format_rate(sum(x is True for x in before), len(before))}",
            "",
            "| arm | after, per seed | after, pooled | lost / won (summed over seeds) | "
            f"vs start, per game | vs {first}, per game (common seeds) |",
            "|---|---|---|---|---|---|",
        ]
        start_rates = [(int(b is True), int(b is not None)) for b in before]
        for arm in arms:
            after = [results[arm][s]["after"][split] for s in sorted(results[arm])]
            per_seed = ", ".join(str(sum(x is True for x in a)) for a in after)
            solved, played = sum(x is True for a in after for x in a), sum(x is not None for a in after for x in a)
            lost = sum(b is True and a[g] is False for a in after for g, b in enumerate(before))
            won = sum(b is False and a[g] is True for a in after for g, b in enumerate(before))
            versus = "-"
            if arm != first and (common := _common(results, first, arm)):
                versus = f"{_versus(results, first, arm, split)} (seeds {_seeds(common)})"
            lines.append(
                f"| {arm} | {per_seed} | {format_rate(solved, played)} | {lost} / {won} | "
                f"{paired_rate_test(start_rates, _rates(after))} | {versus} |"
            )
        lines.append("")
        orderings = [(a, b) for a, b in compare if a in results and b in results]
        if orderings:
            lines += ["| ordering | B − A, per game (common seeds) |", "|---|---|"]
        for worse, better in orderings:
            versus = _versus(results, worse, better, split) if _common(results, worse, better) else "no seed in common"
            lines.append(f"| {worse} < {better} | {versus} |")
        lines += [""] if orderings else []
        lines += _sampled_block(split, (start_sampled or {}).get(split), results, first)
    lines += [
        "| arm | seed | per iteration: training successes, optimizer steps, KL (, SFT replay loss; World-In-Agent) |",
        "|---|---|---|",
    ]
    for arm in arms:
        for seed in sorted(results[arm]):
            cells = "; ".join(
                f"{r['successes']}, {r['steps']}, {r['kl']:.2g}"
                + (f", {r['replay']:.3g}" if r.get("replay") is not None else "")
                + (f", {_wia_cell(r['wia'])}" if r.get("wia") else "")
                for r in results[arm][seed]["train"]
            )
            lines.append(f"| {arm} | {seed} | {cells} |")
    return "\n".join(lines)


def _sampled_block(split: str, start: list | None, results: dict, first: str) -> list[str]:
    """The sampled passes of ``split``: each arm's per-game rates summed over its seeds, pooled
    with a Wilson interval, and per game against the start and the first arm (rate tests)."""
    arms = {
        arm: _summed([runs[s]["sampled"][split] for s in sorted(runs)])
        for arm, runs in results.items()
        if all(split in runs[s].get("sampled", {}) for s in runs)
    }
    if start is None or not arms:
        return []
    k, n = (sum(x) for x in zip(*start))
    lines = [
        f"Sampled passes (eval.sampled, at the rollouts' temperature), start {format_rate(k, n)}:",
        "",
        f"| arm | sampled after, pooled over seeds | vs start, per game | vs {first}, per game (all seeds of each) |",
        "|---|---|---|---|",
    ]
    for arm, rates in arms.items():
        k, n = (sum(x) for x in zip(*rates))
        versus = paired_rate_test(arms[first], rates) if arm != first and first in arms else "-"
        lines.append(f"| {arm} | {format_rate(k, n)} | {paired_rate_test(start, rates)} | {versus} |")
    return [*lines, ""]


def _summed(per_seed: list[list[tuple[int, int]]]) -> list[tuple[int, int]]:
    """Per game, (successes, episodes) summed over the seeds' lists."""
    return [(sum(k for k, _ in game), sum(n for _, n in game)) for game in zip(*per_seed)]


def _common(results, a: str, b: str) -> list[int]:
    """The seeds both arms finished."""
    return sorted(set(results[a]) & set(results[b]))


def _versus(results, a: str, b: str, split: str):
    """Arm ``b`` against arm ``a`` on ``split``, per game over their common seeds."""
    seeds = _common(results, a, b)
    return paired_rate_test(*(_rates([results[arm][s]["after"][split] for s in seeds]) for arm in (a, b)))


def _ordering(text: str) -> tuple[str, str]:
    """``"GRPO:GiGPO"`` → ``("GRPO", "GiGPO")``: the first arm expected below the second."""
    worse, sep, better = text.partition(":")
    if not (sep and worse and better):
        raise argparse.ArgumentTypeError(f"an ordering is WORSE:BETTER, not {text!r}")
    return worse, better


def _seeds(seeds) -> str:
    return ", ".join(map(str, sorted(seeds)))


def _rates(outcomes: list[list[bool | None]]) -> list[tuple[int, int]]:
    """Per game, (successes, played episodes) over the seeds' outcome lists."""
    return _summed([[(int(o is True), int(o is not None)) for o in seed] for seed in outcomes])


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1], argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", type=Path, required=True, help="the run whose SFT this starts from")
    parser.add_argument("--label", default="sft", help="its evaluation that is the start")
    parser.add_argument("--init-from", type=Path, help="the checkpoint (default: REFERENCE/sft/final)")
    parser.add_argument("--recipe", default="role_agent_alfworld")
    parser.add_argument("--arm", action="append", type=parse_arm, required=True, metavar="NAME:KEY=VALUE,...")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--set", action="append", default=["threads=1"], metavar="KEY=VALUE", help="every arm's override"
    )
    parser.add_argument("--splits", nargs="+", help="the panels to play after RL (default: the reference's)")
    parser.add_argument(
        "--compare", action="append", default=[], type=_ordering, metavar="A:B", help="check the ordering A < B"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (one torch thread each by default)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_rl_phase"))
    parser.add_argument("--summarize", action="store_true", help="only tabulate the finished runs in --out")
    args = parser.parse_args(argv)
    if len({name for name, _ in args.arm}) != len(args.arm):
        parser.error("arm names must differ")
    start = evaluations(args.reference, args.label)
    if not start:
        parser.error(f"{args.reference}/metrics.jsonl has no {args.label!r} evaluation")
    if args.splits:
        if set(args.splits) - set(start):
            parser.error(f"the reference evaluated {sorted(start)}, not {sorted(set(args.splits) - set(start))}")
        start = {split: start[split] for split in args.splits}
        args.set.append(f"eval.splits=[{','.join(args.splits)}]")
    init_from = args.init_from or args.reference / "sft" / "final"
    jobs = [(name, sets, seed) for seed in args.seeds for name, sets in args.arm]
    if not args.summarize:
        with ThreadPoolExecutor(args.jobs) as pool:
            done = [
                pool.submit(
                    run_arm, args.recipe, init_from, [*args.set, *sets], seed, args.out / f"{name}_s{seed}", list(start)
                )
                for name, sets, seed in jobs
            ]
            for future in done:
                future.result()
    results: dict[str, dict[int, dict]] = {}
    for name, _, seed in jobs:
        run_dir = args.out / f"{name}_s{seed}"
        if finished(run_dir, start):
            results.setdefault(name, {})[seed] = {
                "after": evaluations(run_dir, "after"),
                "sampled": sampled_rates(run_dir, "after"),
                "train": training(run_dir),
            }
    report = table(start, results, args.compare, sampled_rates(args.reference, args.label))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"arms": dict(args.arm), "start": start, "results": results}, indent=1)
    )
    (args.out / "table.md").write_text(report + "\n")
    print(report)


if __name__ == "__main__":
    main()
