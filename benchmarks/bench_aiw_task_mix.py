"""How far Agent-In-World moves the training-task distribution, per retrieval unit.

Agent-In-World (Role-Agent: Wang et al., 2026, arXiv 2606.10917, §3.3) boosts the tasks its
retriever finds for each failure. Which tasks those are decides how much of the next batches
the mechanism can change: ``aiw.retrieve_unit: tasks`` boosts ``top_k`` tasks per failure,
``modes`` (the paper's library of unique failure modes) every task filed under the picked
mode. This benchmark replays one stream of real failed episodes (rollout JSONL files of
training games) through the real :class:`AgentInWorld` once per unit, side by side: the rule
analyst (the environment's diagnosis, so both units see the same reflections), the BM25
retriever, the recipe's sampler settings. The episodes are cut into iterations of
``--tasks-per-iter`` games in file order, as a trainer would have drawn them.

After each iteration it prints, per unit: the tasks whose weight is above uniform, the
sampling mass they hold (uniform would give them #boosted / N), the expected number of
them in a batch of ``--tasks-per-iter`` draws (B × mass, the with-replacement value), and
the sampler's entropy as a share of uniform's. The last lines give each arm's boosted mass
at the end over the first arm's. An arm is ``UNIT:TOP_K`` (default: ``tasks:3``, the
recipe's retrieval, and ``modes:1``, one mode per failure). It measures the task mix, not learning: whether moving the
mix helps the policy is a training benchmark's question.

    python benchmarks/bench_aiw_task_mix.py role_agent_aiw_alfworld --rollouts RUN/rollouts/*.jsonl
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from dataclasses import replace

from roleagent.config import load_config
from roleagent.envs.workers import EnvPool
from roleagent.methods.role_agent.aiw.agent_in_world import AgentInWorld
from roleagent.sft.failures import read_failures
from roleagent.types import Trajectory

ARMS = ("tasks:3", "modes:1")  # UNIT:TOP_K: the default task retrieval, and one mode per failure


def arm(text: str) -> str:
    """``UNIT:TOP_K`` checked (``--arm``)."""
    unit, _, k = text.partition(":")
    if unit not in ("tasks", "modes") or not k.isdecimal() or int(k) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected UNIT:TOP_K with UNIT tasks or modes and TOP_K >= 1")
    return text


def iterations(failures: Sequence[Trajectory], tasks_per_iter: int) -> list[list[Trajectory]]:
    """The failures grouped by game in first-seen order, ``tasks_per_iter`` games per iteration."""
    games: dict[str, list[Trajectory]] = {}
    for t in failures:
        games.setdefault(t.task.id, []).append(t)
    ids = list(games)
    return [[t for g in ids[i : i + tasks_per_iter] for t in games[g]] for i in range(0, len(ids), tasks_per_iter)]


def replay(cfg, spec: str, train_ids, taxonomy, stream, diagnose, batch: int) -> list[dict[str, float]]:
    """One arm's (``UNIT:TOP_K``) per-iteration task-mix records over the failure stream."""
    unit, top_k = spec.split(":")
    aiw_cfg = replace(cfg.aiw, enabled=True, analyst="rule", retriever="bm25", retrieve_unit=unit, top_k=int(top_k))
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        aiw = AgentInWorld(aiw_cfg, train_ids, tmp, taxonomy)
        for it, trajectories in enumerate(stream):
            m = aiw.process_failures(trajectories, iteration=it, diagnose=diagnose)
            p = aiw.sampler.probabilities()
            boosted = aiw.sampler.weights > 1.0 + 1e-9
            mass = float(p[boosted].sum())
            out.append({"failures": m["n_failures"], "retrieved": m["n_retrieved"], "boosted": int(boosted.sum()),
                        "mass": mass, "uniform_mass": float(boosted.mean()), "expected": batch * mass,
                        "entropy": m["sampler_entropy"]})  # fmt: skip
        aiw.memory.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", help="a recipe with the aiw section, e.g. role_agent_aiw_alfworld")
    ap.add_argument("--rollouts", nargs="+", required=True, help="rollout JSONL files of training games")
    ap.add_argument("--tasks-per-iter", type=int, default=16, help="games per replayed iteration, and batch size")
    ap.add_argument(
        "--arm", action="append", type=arm, metavar="UNIT:TOP_K", help=f"retrieve_unit and top_k (default {ARMS})"
    )
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    args = ap.parse_args(argv)
    arms = tuple(args.arm or ARMS)
    cfg = load_config(args.config, args.set)
    failures = [t for t in read_failures(args.rollouts) if t.task.split == cfg.env.train_split]
    stream = iterations(failures, args.tasks_per_iter)
    e = cfg.env
    with EnvPool(e.name, e.kwargs, slots=1, processes=False) as pool:
        tasks = {t.id: t for t in pool.meta.tasks(e.train_split)}
        for t in failures:
            t.task = tasks.get(t.task.id, t.task)  # with its payload: the diagnosis finds the game's ground truth
        runs = {u: replay(cfg, u, list(tasks), pool.meta.failure_taxonomy, stream, pool.diagnose, args.tasks_per_iter)
                for u in arms}  # fmt: skip
    a = cfg.aiw
    print(f"{len(failures)} failures of {len({t.task.id for t in failures})} games, {len(stream)} iterations of "
          f"{args.tasks_per_iter} games; N = {len(tasks)} training tasks; boost {a.boost}, "
          f"decay {a.decay}, cap {a.cap}, mode_tasks {a.mode_tasks}")  # fmt: skip
    print(
        "| iteration | failures | "
        + " | ".join(f"{u}: boosted, mass (uniform), E[in batch], entropy" for u in arms)
        + " |"
    )
    print("|---|---|" + "---|" * len(arms))
    for it in range(len(stream)):
        cells = [f"{r['boosted']}, {100 * r['mass']:.2f}% ({100 * r['uniform_mass']:.2f}%), {r['expected']:.2f}, "
                 f"{r['entropy']:.4f}" for r in (runs[u][it] for u in arms)]  # fmt: skip
        print(f"| {it} | {runs[arms[0]][it]['failures']:.0f} | " + " | ".join(cells) + " |")
    if stream and runs[arms[0]][-1]["mass"] > 0:
        for other in arms[1:]:
            ratio = runs[other][-1]["mass"] / runs[arms[0]][-1]["mass"]
            print(f"boosted mass after {len(stream)} iterations, {other} / {arms[0]} = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
