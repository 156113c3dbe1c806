"""Does RL in roleagent improve a real agent? A learning curve on a fixed set of ALFWorld games.

A recipe (``--recipe``, default ``gigpo_alfworld``: the main recipe's settings, constrained
actions, 8 AdamW steps per iteration, without the World-In-Agent predictions that triple a
CPU rollout's cost and whose 135M predictor is not yet competent) starts from a supervised
warm start (``--init-from``, e.g. the main job's ``runs/role_agent_alfworld/sft/final``,
fresh LoRA adapters) and trains on ``--games`` TRAINING games only (``env.train_tasks``),
every game in every iteration (``rollout.tasks_per_iter = --games``, ``--group-size``
rollouts each). The games are the first ``--games`` that the warm start's expert played
(``roleagent sft --expert RECIPE --tasks 48``: the same seed and exclusions), so the policy
solves them sometimes: games it never solves give a group no signal. The same games are
evaluated before, every ``--eval-every`` iterations and at the end: greedy once, and
``--sampled`` times at the training temperature (``eval.sampled``). This is the existence
proof the framework needs ("RL on these games raises success on them"), not a
generalisation claim: the panel IS the training set, and the report says so.

Output (``--out``): the run directory (resumable: rerun with a larger ``--iterations`` to go
on), ``curve.json`` and ``curve.md``: per evaluation greedy and sampled success with counts
and 95% Wilson intervals and the exact McNemar test of the greedy outcomes against the
start (same games); per iteration training success with its interval, optimizer steps,
KL to the warm start (``update/kl``: the LoRA adapters off are the reference) and how far
log π of positive- and negative-advantage actions moved (``update/logp_shift_*``).

    python benchmarks/bench_rl_curve.py --init-from runs/role_agent_alfworld/sft/final \\
        [--games 8] [--skip-games 0] [--iterations 12] [--eval-every 2] [--sampled 4] [--set key=value ...]

A second run on the next games (``--skip-games 8 --out runs/curve2``) adds power without
replaying the first; ``--pool runs/curve1 runs/curve2 --window 3 5`` then tests per-game
training success, iteration 0 against iterations 3-5, over the games of both runs.

``--shuffle-advantages`` runs the control: each iteration's non-zero advantages permuted among
their samples (``bench_options.shuffled_advantages``), an update of the same size without the
signal. Run with the same seed as a plain run, its iteration 0 is the plain run's (no update
yet); a rise the plain runs show and the control does not is the advantages' doing.
``--pool PLAIN... --against CONTROL...`` compares the two game by game over the window.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import nullcontext
from pathlib import Path

from bench_options import shuffled_advantages

from roleagent.config import load_config
from roleagent.stats import format_rate, paired_rate_test, paired_test, sign_flip_test
from roleagent.trainer import Trainer


def expert_games(recipe: str, n_games: int, expert_tasks: int = 48) -> list[str]:
    """The ids of the first ``n_games`` training games the warm start's expert played
    (``roleagent.sft.expert.play_expert``'s choice for ``recipe``)."""
    from roleagent.envs import make_env
    from roleagent.evaluation import eval_splits, panel
    from roleagent.sft.expert import expert_tasks as choose

    cfg = load_config(recipe)
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    exclude = {t.id for split in eval_splits(cfg) for t in panel(env.tasks(split), cfg.eval.max_tasks)}
    return [t.id for t in choose(env.tasks(cfg.env.train_split), expert_tasks, seed=cfg.seed, exclude=exclude)][
        :n_games
    ]


def overrides(args, games: list[str]) -> list[str]:
    """The recipe's settings for the curve (module docstring), then the user's ``--set``."""
    return [
        "sft.enabled=false",
        f"model.init_from={args.init_from}",
        f"env.train_tasks={json.dumps(games)}",
        "eval.splits=[train]",
        f"eval.max_tasks={args.games}",
        f"eval.sampled={args.sampled}",
        f"eval.every={args.eval_every}",
        f"iterations={args.iterations}",
        f"rollout.tasks_per_iter={args.games}",
        f"rollout.group_size={args.group_size}",
        f"run_dir={args.out}",
        "report_to=[jsonl]",
        *args.set,
    ]


def read_curve(run_dir: Path) -> dict:
    """Evaluations and iterations from a run's metrics.jsonl (the first panel)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    iterations = [r for r in records if "iteration" in r]
    evals = []
    for r in records:
        if "eval" not in r:
            continue
        at = 0 if r["eval"] == "before" else len(iterations) if r["eval"] == "after" else int(r["eval"][4:])
        evals.append({"iteration": at, **{k.removeprefix("eval/"): v for k, v in r.items() if k.startswith("eval/")}})
    return {"evals": evals, "iterations": iterations}


def table(curve: dict) -> str:
    """The markdown tables of ``curve.md``."""
    evals, iterations = curve["evals"], curve["iterations"]
    start = evals[0]
    lines = [
        "| after iteration | greedy | sampled | greedy vs start (McNemar) | sampled vs start, per game |",
        "|---|---|---|---|---|",
    ]
    for e in evals:
        test = paired_test([_bool(x) for x in start["outcomes"]], [_bool(x) for x in e["outcomes"]])
        sampled = format_rate(e["sampled_successes"], e["sampled_episodes"]) if e.get("sampled_episodes") else "-"
        lines.append(
            f"| {e['iteration']} | {format_rate(e['successes'], e['episodes'])} | {sampled} | "
            f"{test.difference:+.1f} points, b={test.b} c={test.c}, p={test.p_value:.3g}: {test.verdict} | "
            f"{_rate_text(_game_rates(start), _game_rates(e))} |"
        )
    first = iterations[0]["train/game_rates"] if iterations and "train/game_rates" in iterations[0] else None
    lines += [
        "",
        "| iteration | training success | vs iteration 0, per game | optimizer steps | KL to start | "
        "Δlog π (A>0) | Δlog π (A<0) | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in iterations:
        versus = _rate_text(first, r["train/game_rates"]) if first and r["iteration"] > 0 else "-"
        lines.append(
            f"| {r['iteration']} | {format_rate(r['train/successes'], r['train/episodes'])} | {versus} | "
            f"{r.get('update/optimizer_steps', 0)} | {r.get('update/kl', float('nan')):.3g} | "
            f"{r.get('update/logp_shift_pos', float('nan')):+.3f} | {r.get('update/logp_shift_neg', float('nan')):+.3f} | "
            f"{r['time/iteration_s']:.0f} |"
        )
    return "\n".join(lines)


def _game_rates(evaluation: dict) -> list[tuple[int, int]] | None:
    """``(successes, episodes)`` per game of an evaluation's sampled episodes, if recorded."""
    if "sampled_game_successes" not in evaluation:
        return None
    return list(zip(evaluation["sampled_game_successes"], evaluation["sampled_game_episodes"]))


def _rate_text(before: list | None, after: list | None) -> str:
    """The per-game paired permutation test (``roleagent.stats.paired_rate_test``) as a cell."""
    if before is None or after is None:
        return "-"
    return str(paired_rate_test(before, after))


def training_rates(run_dir: Path, games: list[str]) -> dict[int, list[tuple[int, int]]]:
    """``{iteration: [(successes, episodes) per game]}`` from the rollout dumps, the games in
    ``games`` order: the training episodes of each iteration, drawn from the policy before
    that iteration's update (iteration 0's are the warm start's own samples)."""
    rates = {}
    for path in sorted((run_dir / "rollouts").glob("iter_*.jsonl")):
        counts = {g: [0, 0] for g in games}
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            task = record.get("task_id")
            if task in counts and not record.get("crashed"):
                counts[task][0] += bool(record.get("success"))
                counts[task][1] += 1
        rates[int(path.stem.removeprefix("iter_"))] = [tuple(counts[g]) for g in games]
    return rates


def run_rates(source: str | Path) -> tuple[str, list[str], dict[int, list[tuple[int, int]]]]:
    """(name, games, ``{iteration: per-game training rates}``) of a curve run: its folder
    (``config.yaml`` and the rollout dumps), or a ``curve.json`` this script wrote
    (``train/game_rates``), or one run of a committed bundle of them, ``FILE.json#KEY``
    (``benchmarks/rl_curve_cpu.json#first_seed1``)."""
    import yaml

    path, _, key = str(source).partition("#")
    if Path(path).is_dir():
        games = yaml.safe_load((Path(path) / "config.yaml").read_text())["env"]["train_tasks"]
        return Path(path).name, games, training_rates(Path(path), games)
    curve = json.loads(Path(path).read_text())
    curve = curve[key] if key else curve
    rates = {r["iteration"]: [tuple(x) for x in r["train/game_rates"]] for r in curve["iterations"]}
    return key or Path(path).parent.name, curve["games"], rates


def pool_counts(run_dirs: list, first: int, last: int) -> dict[str, list]:
    """``{game: [run names, k0, n0, k, n]}``: per game, the training successes and episodes of
    iteration 0 and of iterations ``first``..``last`` summed over the runs (:func:`run_rates`'
    sources) that played it."""
    games_seen: dict[str, list] = {}
    for run_dir in run_dirs:
        name, games, rates = run_rates(run_dir)
        missing = [i for i in (0, *range(first, last + 1)) if i not in rates]
        if missing:
            raise SystemExit(f"{run_dir}: no training rollouts for iterations {missing}")
        for g, game in enumerate(games):
            row = games_seen.setdefault(game, [[], 0, 0, 0, 0])
            row[0].append(name)
            row[1:3] = row[1] + rates[0][g][0], row[2] + rates[0][g][1]
            row[3] += sum(rates[i][g][0] for i in range(first, last + 1))
            row[4] += sum(rates[i][g][1] for i in range(first, last + 1))
    return games_seen


def pooled_training(run_dirs: list, first: int, last: int) -> str:
    """Per-game training success of several curve runs pooled into one paired test:
    iteration 0 (the warm start's own samples) against iterations ``first``..``last``
    together, every game one pair (``roleagent.stats.paired_rate_test``). Runs of the same
    protocol on disjoint games are independent, so their games pool as if one run had
    played them all; runs on the same games (other seeds) add their episodes to those
    games' counts, so a game is still one pair, and the test's unit stays the game."""
    rows, before, after = [], [], []
    for game, (runs, k0, n0, k, n) in pool_counts(run_dirs, first, last).items():
        before.append((k0, n0))
        after.append((k, n))
        rows.append(f"| {', '.join(runs)} | {_short(game)} | {k0}/{n0} | {k}/{n} |")
    pooled = (sum(k for k, _ in before), sum(n for _, n in before), sum(k for k, _ in after), sum(n for _, n in after))
    return "\n".join(
        [
            f"| runs | game | iteration 0 | iterations {first}-{last} |",
            "|---|---|---|---|",
            *rows,
            "",
            f"all games: {format_rate(*pooled[:2])} -> {format_rate(*pooled[2:])}; per game: "
            + _rate_text(before, after),
        ]
    )


def against_control(run_dirs: list, control_dirs: list, first: int, last: int) -> str:
    """The plain runs against the control's (``--shuffle-advantages``) on the games both
    played: per game, training success in iterations ``first``..``last`` of the control
    (before) against the plain runs' (after), one pair per game
    (``roleagent.stats.paired_rate_test``); each side's own iteration 0, which equal seeds
    and code make the same draws; and per game the plain runs' change from their iteration 0
    minus the control's (``roleagent.stats.sign_flip_test``), which starts drawn apart (other
    seeds, another code version) do not bias."""
    plain, control = pool_counts(run_dirs, first, last), pool_counts(control_dirs, first, last)
    games = [g for g in plain if g in control]
    if not games:
        raise SystemExit("--against: the control runs played none of the plain runs' games")
    rows = [
        f"| {_short(g)} | {control[g][1]}/{control[g][2]} | {plain[g][1]}/{plain[g][2]} "
        f"| {control[g][3]}/{control[g][4]} | {plain[g][3]}/{plain[g][4]} |"
        for g in games
    ]

    def total(side: dict, k: int) -> str:
        return format_rate(sum(side[g][k] for g in games), sum(side[g][k + 1] for g in games))

    return "\n".join(
        [
            f"| game | control, iteration 0 | plain, iteration 0 | control, iterations {first}-{last} "
            f"| plain, iterations {first}-{last} |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"iteration 0: control {total(control, 1)}, plain {total(plain, 1)}",
            f"iterations {first}-{last}: control {total(control, 3)} -> plain {total(plain, 3)}; per game: "
            + _rate_text([tuple(control[g][3:]) for g in games], [tuple(plain[g][3:]) for g in games]),
            "change from iteration 0, plain minus control, per game: "
            + str(
                sign_flip_test(
                    [_change(plain[g]) - _change(control[g]) for g in games if plain[g][2] and control[g][2]]
                )
            ),
        ]
    )


def _change(row: list) -> float:
    """A :func:`pool_counts` row's change in training success, iteration 0 to the window."""
    _, k0, n0, k, n = row
    return k / n - k0 / n0


def _short(game: str) -> str:
    """``alfworld/easy/train/pick_cool_then_place/0238`` → ``pick_cool_then_place 0238``."""
    return f"{game.rsplit('/', 2)[-2]} {game.rsplit('/', 1)[-1]}"


def _bool(x) -> bool | None:
    return None if x is None else bool(x)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--init-from", help="the SFT checkpoint RL starts from (its final/ folder); needed to train")
    parser.add_argument("--recipe", default="gigpo_alfworld")
    parser.add_argument("--games", type=int, default=8, help="training games: trained on and evaluated")
    parser.add_argument(
        "--skip-games", type=int, default=0, help="start after the expert's first N games (a second run on new games)"
    )
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--sampled", type=int, default=4, help="sampled episodes per game per evaluation")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per game per iteration")
    parser.add_argument("--out", default="runs/bench_rl_curve")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--summarize", action="store_true", help="only tabulate what --out holds (e.g. a stopped run)")
    parser.add_argument(
        "--pool", nargs="+", metavar="RUN", help="only pool these runs' training success (folder, curve.json, FILE#KEY)"
    )
    parser.add_argument("--window", nargs=2, type=int, default=(3, 5), metavar=("FIRST", "LAST"))
    parser.add_argument(
        "--shuffle-advantages", action="store_true", help="the control: advantages permuted among samples"
    )
    parser.add_argument("--against", nargs="+", metavar="RUN", help="with --pool: the control's runs to compare with")
    args = parser.parse_args(argv)
    if args.pool:  # per-game training success of several runs, iteration 0 vs the window
        print(pooled_training(args.pool, *args.window))
        if args.against:
            print("\n" + against_control(args.pool, args.against, *args.window))
        return
    if not args.summarize and not args.init_from:
        parser.error("--init-from is needed to train (or --summarize / --pool to tabulate)")
    started = time.perf_counter()
    games = expert_games(args.recipe, args.skip_games + args.games)[args.skip_games :]
    if not args.summarize:
        cfg = load_config(args.recipe, overrides(args, games))
        with shuffled_advantages(cfg.seed) if args.shuffle_advantages else nullcontext():
            trainer = Trainer(cfg)
            try:
                trainer.run()
            finally:
                trainer.close()
    out = Path(args.out)
    curve = read_curve(out)
    curve["command"] = (
        "python benchmarks/bench_rl_curve.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "set")
        + "".join(f" --set {s}" for s in args.set)
    )
    if not args.summarize:  # wall minutes of this invocation (a resumed run counts only its part)
        curve["minutes"] = (time.perf_counter() - started) / 60
    curve["games"] = games
    rates = training_rates(out, games)
    for r in curve["iterations"]:
        if r["iteration"] in rates:
            r["train/game_rates"] = rates[r["iteration"]]
    (out / "curve.json").write_text(json.dumps(curve, indent=1))
    text = table(curve)
    (out / "curve.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
