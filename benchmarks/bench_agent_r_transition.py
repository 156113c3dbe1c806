"""Agent-R's judged transition point against direct revision on the same trees (issue
"Roles that work at 135M", item 6): does a judge that says "Bad" change what the policy learns?

Agent-R (Yuan et al., 2025, arXiv 2501.11425, §3.1) cuts a bad path at the judge's first
Bad step t' and splices the revision thought and the good path there; direct revision cuts
at the bad path's last step. In a live run (``bench_agent_r.py``) each arm grows its own
trees, so a difference in success mixes the search's luck with the mechanism, and at 135M
the recipe's 6 trees per iteration often hold no revision pair at all. Here both arms train
on the **same fixed trees** and differ only in t':

1. ``pairs.jsonl``: the pairs of every tree (``data.select`` at the first iteration's α),
   judged once by the ``--start`` checkpoint, which is also the policy both arms start from
   (one model plays both roles, as in the paper);
2. per arm and seed: the good trajectories and one revision trajectory per pair
   (``data.good_example``, ``data.revision_example``; the ``direct`` arm drops the verdicts),
   the same revision thoughts in both arms (drawn from ``seed``), trained as the method's
   first iteration trains (``AgentRObjective``: ``agent_r.lr`` at a constant rate,
   ``agent_r.batch_examples``, ``agent_r.epochs_first`` epochs);
3. the start and every run on the panel (``roleagent eval``, the recipe's eval split,
   greedy), never trained on: pooled counts, McNemar over (seed, game), and per game each
   arm's rate over the seeds against the start's and against the other arm's
   (:func:`roleagent.stats.paired_rate_test`).

    python benchmarks/bench_agent_r_transition.py --trees DIR --start CKPT --out OUT
        [--recipe agent_r_textcraft] [--seeds 0 1 2] [--panel 0] [--skip 0] [--jobs 2]

``--skip k`` evaluates the goals after the first k (a fresh panel after one already seen;
the runs are reused, the evaluations are new); ``--eval-set KEY=VALUE`` is a setting of
every evaluation (e.g. a wider wave); ``--union R1 R2 ...`` reports the panels'
``results_*.json`` files as one panel.

Every step resumes: a finished run, evaluation or ``pairs.jsonl`` is read back.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import _stats_table as st
from bench_fresh_panel import per_game
from bench_learning import run_cli

from roleagent.algos.agent_r import loop_count, transition_point
from roleagent.config import load_config
from roleagent.methods.agent_r import data
from roleagent.methods.agent_r.method import sft_settings
from roleagent.methods.agent_r.tree import load_trees
from roleagent.models.loading import sft_info
from roleagent.sft.data import encode_example, write_examples
from roleagent.sft.role_cli import load_engine
from roleagent.sft.sources import read_examples
from roleagent.sft.train import is_finished, save_final, sft_epoch, sft_optimizer
from roleagent.stats import paired_rate_test

ARMS = ("direct", "agent_r")
LABEL = "panel"


def pairs_of(cfg, trees_dir: Path):
    """Every tree's pairs as the method's first iteration selects them."""
    a = cfg.agent_r
    return data.select_all(
        load_trees(trees_dir), alpha=float(a.alpha_schedule[0]), beta=float(a.beta), max_good=a.max_good_per_tree,
        max_pairs=a.max_pairs_per_tree,
    )  # fmt: skip


def judge(cfg, pairs, out: Path) -> None:
    """Fill the pairs' verdicts: read back from ``out`` (checked to be these pairs), else
    judged by ``cfg``'s model and written there."""
    keys = [[p.tree.task.id, p.good, p.bad] for p in pairs]
    if out.exists():
        rows = [json.loads(line) for line in out.read_text().splitlines() if line]
        if [[r["task"], r["good"], r["bad"]] for r in rows] != keys:
            raise RuntimeError(f"{out}: judged other pairs than these trees'; use another --out")
        for pair, row in zip(pairs, rows):
            pair.verdicts, pair.answers = row["verdicts"], row["answers"]
        return
    a = cfg.agent_r
    data.judge_pairs(
        pairs, load_engine(cfg)[1], cfg.env.name, history=a.judge_history, max_new_tokens=a.judge_max_new_tokens
    )
    rows = [{"task": k[0], "good": k[1], "bad": k[2], "shared": p.start, "verdicts": p.verdicts, "answers": p.answers}
            for k, p in zip(keys, pairs)]  # fmt: skip
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))


def arm_examples(goods, pairs, arm: str, seed: int, fmt: str) -> list:
    """One arm's examples: the same good trajectories and revision thoughts in every arm;
    ``direct`` revises at the bad path's last step."""
    rng = random.Random(f"{seed}/revision")
    chats = [data.good_example(tree, path, fmt) for tree, path in goods]
    for pair in pairs:
        chats.append(data.revision_example(pair if arm == "agent_r" else replace(pair, verdicts=[]), fmt, rng))
    return chats


def train(cfg, examples_file: Path, out: Path, seed: int) -> None:
    """The method's first-iteration SFT (``AgentRObjective.update``) on ``examples_file``."""
    if is_finished(out):
        return
    a = cfg.agent_r
    policy, engine = load_engine(cfg, lora=True)
    encoded = [encode_example(engine, e) for e in read_examples(examples_file)]
    sft = sft_settings(a, cfg.optim.grad_clip)
    stepper = sft_optimizer(policy, sft, total_steps=0)
    records = [sft_epoch(policy, stepper, encoded, sft, seed * 1000, e) for e in range(a.epochs_first)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    save_final(policy, out, sft_info(cfg.model.name, cfg.model.init_from, seed))


def evaluate(recipe: str, init_from: str, out: Path, panel: int, skip: int = 0, sets: tuple = ()) -> dict:
    """The panel's greedy play of ``init_from`` (one ``roleagent eval``, resumed): per-game
    outcomes, the episodes that wrote the revision signal (and of them, those that succeeded)
    and the mean loop count of length 1 (the paper's Figure 4 statistic)."""
    if st.eval_record(out, LABEL) is None:
        out.mkdir(parents=True, exist_ok=True)
        sets = [f"model.init_from={init_from}", "threads=1", *sets]
        command = ["eval", recipe, "--out", str(out), "--label", LABEL, "--max-tasks", str(panel),
                   "--skip-tasks", str(skip)]  # fmt: skip
        run_cli([*command, *[x for s in sets for x in ("--set", s)]], out / "eval.log")
    rollouts = (out / "rollouts" / f"eval_{LABEL}.jsonl").read_text().splitlines()
    episodes = [json.loads(line) for line in rollouts if line.strip()]
    signal = [any(data.is_revision_turn(s.get("action_text", "")) for s in e["steps"]) for e in episodes]
    revised = [e for e, wrote in zip(episodes, signal) if wrote]
    loops = [loop_count([s.get("action") or "(invalid)" for s in e["steps"]], 1) for e in episodes]
    return {
        "outcomes": st.panel_evaluation(st.eval_record(out, LABEL))["outcomes"],
        "revised": len(revised),
        "revised_games": signal,  # per episode, in panel order
        "revised_success": sum(bool(e.get("success")) for e in revised),
        "loop1": sum(loops) / max(len(loops), 1),
    }


def transition_stats(pairs) -> dict:
    """How the judge moved t': pairs with a Bad verdict, and bad steps cut off before it."""
    cut = [len(p.bad) - 1 - transition_point(p.verdicts, start=p.start) for p in pairs]
    return {"pairs": len(pairs), "judged": sum("bad" in p.verdicts for p in pairs), "steps_cut": sum(cut),
            "bad_steps_after_shared": sum(len(p.bad) - p.start for p in pairs)}  # fmt: skip


def report(start: dict, runs: dict[str, list[dict]], stats: dict) -> str:
    """The markdown table: each arm against the start, then agent_r against direct."""
    lines = ["# Agent-R's judged transition point vs direct revision, fixed trees", "",
             f"pairs {stats['pairs']}, with a Bad verdict {stats['judged']}; bad steps after the shared prefix "
             f"{stats['bad_steps_after_shared']}, of which the judge's t' cut {stats['steps_cut']}", "",
             *st.md_header(["arm", "seeds", "success, pooled over seeds", "paired with the start over (seed, game)",
                            "per game: rate over seeds vs start (sign flip)", "revised episodes (succeeded)",
                            "loop count, length 1"])]  # fmt: skip
    base = per_game([start["outcomes"]])

    def row(arm: str, evals: list[dict]) -> str:
        outcomes = [e["outcomes"] for e in evals]
        pooled = st.rate_cell([st.panel_evaluation({"eval/outcomes": o}) for o in outcomes])
        revised = f"{sum(e['revised'] for e in evals)} ({sum(e['revised_success'] for e in evals)})"
        loops = sum(e["loop1"] for e in evals) / len(evals)
        if arm == "start":
            return f"| start | - | {pooled} | - | - | {revised} | {loops:.2f} |"
        test = st.paired([({"outcomes": start["outcomes"]}, {"outcomes": o}) for o in outcomes])
        cell = test if isinstance(test, str) else f"{st.paired_text(test)}: {test.verdict}"
        rate = paired_rate_test(base, per_game(outcomes))
        return f"| {arm} | {len(evals)} | {pooled} | {cell} | {rate} | {revised} | {loops:.2f} |"

    lines += [row("start", [start]), *[row(arm, evals) for arm, evals in runs.items()]]
    if all(arm in runs for arm in ARMS):
        a, b = ([e["outcomes"] for e in runs[arm]] for arm in ARMS)
        test = st.paired(list(zip(({"outcomes": o} for o in a), ({"outcomes": o} for o in b))))
        cell = test if isinstance(test, str) else f"{st.paired_text(test)}: {test.verdict}"
        signal = (per_game([e["revised_games"] for e in runs[arm]]) for arm in ARMS)
        lines += ["", f"agent_r vs direct, paired over (seed, game): {cell}; "
                      f"per game (sign flip): {paired_rate_test(per_game(a), per_game(b))}",
                  "episodes that write the revision signal (fewer: fewer turns lost), agent_r vs direct per game "
                  f"(sign flip): {paired_rate_test(*signal)}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def union(results: list[dict]) -> dict:
    """Several panels' ``results_*.json`` as one panel: outcomes concatenated in order,
    revised episodes summed, loop counts averaged over every episode."""

    def merged(evals: list[dict]) -> dict:
        n = [len(e["outcomes"]) for e in evals]
        return {"outcomes": [o for e in evals for o in e["outcomes"]],
                "revised": sum(e["revised"] for e in evals),
                "revised_success": sum(e["revised_success"] for e in evals),
                "revised_games": [r for e in evals for r in e["revised_games"]],
                "loop1": sum(e["loop1"] * k for e, k in zip(evals, n)) / max(sum(n), 1)}  # fmt: skip

    runs = {
        arm: [merged(list(seeds)) for seeds in zip(*(r["runs"][arm] for r in results))] for arm in results[0]["runs"]
    }
    return {"start": merged([r["start"] for r in results]), "runs": runs, "stats": results[0]["stats"]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trees", help="a folder of MCTS trees (e.g. the judge stage's trees_valid)")
    p.add_argument("--start", help="the checkpoint both arms start from, which also judges")
    p.add_argument("--out")
    p.add_argument("--recipe", default="agent_r_textcraft")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--panel", type=int, default=0, help="first k goals of the eval split (0: all)")
    p.add_argument("--skip", type=int, default=0, help="evaluate on the goals after the first k")
    p.add_argument("--eval-set", action="append", default=[], metavar="KEY=VALUE", help="a setting of every evaluation")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, one torch thread each")
    p.add_argument("--union", nargs="+", metavar="RESULTS", help="report these panels' results_*.json as one panel")
    p.add_argument("--train-one", nargs=3, metavar=("EXAMPLES", "OUT", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.union:  # panels already evaluated, reported as one
        u = union([json.loads(Path(f).read_text()) for f in args.union])
        return print(report(u["start"], u["runs"], u["stats"]))
    if not (args.trees and args.start and args.out):
        p.error("--trees, --start and --out are required (unless --union)")
    out = Path(args.out)
    if args.train_one:  # one run's SFT, in its own process
        examples, target, seed = args.train_one
        cfg = load_config(args.recipe, [f"model.init_from={args.start}", f"seed={seed}", "threads=1"])
        return train(cfg, Path(examples), Path(target), int(seed))
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.recipe, [f"model.init_from={args.start}", f"threads={args.jobs}"])
    goods, pairs = pairs_of(cfg, Path(args.trees))
    if not pairs:
        raise SystemExit(f"{args.trees}: no revision pair in these trees: nothing separates the arms")
    judge(cfg, pairs, out / "pairs.jsonl")
    stats = transition_stats(pairs)
    print(json.dumps({"good": len(goods), **stats}), flush=True)
    jobs = []
    for arm in ARMS:
        for seed in args.seeds:
            run = out / f"{arm}_seed{seed}"
            write_examples(run / "examples.jsonl", arm_examples(goods, pairs, arm, seed, cfg.rollout.action_format))
            jobs.append((arm, seed, run))

    def one(job):
        arm, seed, run = job
        command = [sys.executable, __file__, "--trees", args.trees, "--start", args.start, "--out", args.out,
                   "--recipe", args.recipe, "--train-one", str(run / "examples.jsonl"), str(run / "sft"), str(seed)]  # fmt: skip
        if not is_finished(run / "sft"):
            with open(run / "sft.log", "w") as log:
                subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)
        return evaluate(
            args.recipe, str(run / "sft" / "final"), run / panel_dir, args.panel, args.skip, tuple(args.eval_set)
        )

    # another --panel or --skip evaluates again
    panel_dir = "eval" + (f"_skip{args.skip}" if args.skip else "") + (f"_first{args.panel}" if args.panel else "")
    with ThreadPoolExecutor(args.jobs) as pool:
        start_future = pool.submit(
            evaluate, args.recipe, args.start, out / f"start_{panel_dir}", args.panel, args.skip, tuple(args.eval_set)
        )
        results = list(pool.map(one, jobs))
        start = start_future.result()
    runs = {arm: [r for (a, _, _), r in zip(jobs, results) if a == arm] for arm in ARMS}
    text = report(start, runs, stats)
    (out / f"table_{panel_dir}.md").write_text(text)
    (out / f"results_{panel_dir}.json").write_text(json.dumps({"start": start, "runs": runs, "stats": stats}))
    print(text)


if __name__ == "__main__":
    main()
