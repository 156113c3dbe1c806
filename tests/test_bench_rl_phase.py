"""benchmarks/bench_rl_phase.py's reading and table: the start read from the reference run's
evaluation, lost and won games summed over seeds, the per-game test against the start and
against the first arm, and a run that finished is not played again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_rl_phase  # noqa: E402

import roleagent.trainer.loop as loop  # noqa: E402


def _run(run_dir: Path, label: str, outcomes: dict[str, list], train: list[dict] = ()) -> Path:
    run_dir.mkdir(parents=True)
    records = [*train, *({"eval": label, "split": s, "eval/outcomes": o} for s, o in outcomes.items())]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def test_lost_and_won_games_and_the_per_game_tests(tmp_path):
    start = {"seen": [1, 1, 0, 0], "unseen": [0, 0, 0, 1]}
    reference = _run(tmp_path / "ref", "sft", start)
    train = [
        {"iteration": 0, "train/successes": 3, "train/episodes": 16, "update/optimizer_steps": 8, "update/kl": 0.0014}
    ]
    for seed, seen in enumerate([[0, 1, 0, 0], [0, 1, 1, 0]]):
        _run(tmp_path / "out" / f"a_s{seed}", "after", {"seen": seen, "unseen": [0, 0, 0, 1]}, train)
        _run(tmp_path / "out" / f"b_s{seed}", "after", {"seen": [1, 1, 0, 0], "unseen": [0, 0, None, 1]}, train)
    wia = {"wia/score": 0.91, "wia/success_corr": 0.25, "wia/credit_sign_changed": 0.04, "wia/credit_corr": 0.98}
    _run(tmp_path / "out" / "c_s0", "after", {"seen": [1, 1, 0, 0], "unseen": [0, 0, 0, 1]}, [{**train[0], **wia}])
    # (c: seed 1 unfinished)
    assert bench_rl_phase.evaluations(reference, "sft") == {
        "seen": [True, True, False, False],
        "unseen": [False, False, False, True],
    }
    args = [
        "--reference",
        str(reference),
        "--seeds",
        "0",
        "1",
        "--arm",
        "a:",
        "--arm",
        "b:x=1",
        "--arm",
        "c:",
        "--out",
        str(tmp_path / "out"),
    ]
    bench_rl_phase.main([*args, "--summarize"])
    table = (tmp_path / "out" / "table.md").read_text()
    assert "**seen**, start 2/4 = 50.0%" in table
    # a lost game 0 on both seeds and won game 2 on seed 1: per game, rates 0/2 and 1/2 against
    # 1 and 0, so d = -1 and +0.5 over 4 games: -12.5 points
    assert (
        "| a | 1, 2 | 3/8 = 37.5% [13.7, 69.4] | 2 / 1 | -12.5 points, 1 up 1 down of 4, p=1: unresolved | - |" in table
    )
    assert (
        "| b | 2, 2 | 4/8 = 50.0% [21.5, 78.5] | 0 / 0 | +0.0 points, 0 up 0 down of 4, p=1: unchanged | +12.5 points"
        in table
    )
    assert "| b | 1, 1 | 2/6 = 33.3% [9.7, 70.0] | 0 / 0 |" in table  # unseen: the crashed game left out
    assert "| c | 2 | 2/4 = 50.0% [15.0, 85.0] | 0 / 0 |" in table  # its one finished seed
    assert "+25.0 points, 1 up 0 down of 4, p=1: unresolved (seeds 0) |" in table  # c vs a on seed 0 only
    assert "Seeds: a 0, 1; b 0, 1; c 0" in table
    assert "| a | 0 | 3/16, 8, 0.0014 |" in table
    # World-In-Agent's mechanism where the run predicted; a metric it did not write is "-"
    assert "| c | 0 | 3/16, 8, 0.0014, score 0.91 (corr 0.25), in-group sd -, credit flipped 4%, corr 0.98 |" in table
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["arms"] == {"a": [], "b": ["x=1"], "c": []}

    bench_rl_phase.main(args[:-4] + args[-2:])  # arms a and b, every run finished: no process starts
    assert not list((tmp_path / "out").glob("*.log"))


def test_the_shuffled_control_trains_the_same_samples_with_permuted_advantages(tmp_path):
    """``shuffle_advantages=true``: the same samples train as in the plain run (the draws
    are the same seed's), their advantages permuted: the same multiset, another order."""

    def advantages(run_dir):
        rows = [json.loads(line) for line in (run_dir / "rollouts" / "iter_000000.jsonl").read_text().splitlines()]
        return [s["extras"]["algo"]["advantage"] for r in rows for s in r["steps"]]

    estimator = loop.compute_advantages
    sets = ["iterations=1", "eval.sampled=0", "env.kwargs.n_tasks=2"]
    bench_rl_phase.child("signpost_probe", [*sets, f"run_dir={tmp_path / 'plain'}"])
    bench_rl_phase.child("signpost_probe", [*sets, f"run_dir={tmp_path / 'shuffled'}", bench_rl_phase.SHUFFLE])
    assert loop.compute_advantages is estimator  # restored: later runs in this process are not shuffled
    plain, shuffled = advantages(tmp_path / "plain"), advantages(tmp_path / "shuffled")
    assert sorted(plain) == sorted(shuffled) and plain != shuffled
    assert [a == 0 for a in plain] == [a == 0 for a in shuffled]  # the same samples train


def test_an_arm_runs_another_recipe_on_the_chosen_panels_and_orderings_are_tested(tmp_path, monkeypatch):
    """``recipe=NAME`` runs that recipe's RL phase from the same start (the key is not passed
    on as a setting); ``--splits`` plays and tabulates only those panels; ``--compare A:B``
    adds the paired test of A < B over the seeds both finished."""
    reference = _run(tmp_path / "ref", "sft", {"seen": [1, 1, 0, 0], "unseen": [0, 0, 0, 1]})
    for seed in (0, 1):
        _run(tmp_path / "out" / f"a_s{seed}", "after", {"seen": [0, 1, 0, 0]})
    commands = []

    def play(command, **_):  # what the subprocess would do: write the seen panel's after-RL evaluation
        commands.append(command)
        _run(
            Path(next(s for s in command if s.startswith("run_dir=")).partition("=")[2]),
            "after",
            {"seen": [1, 1, 1, 0]},
        )

    monkeypatch.setattr(bench_rl_phase.subprocess, "run", play)
    out = tmp_path / "out"
    arms = ["--arm", "a:", "--arm", "b:recipe=grpo_alfworld,x=1", "--compare", "a:b", "--compare", "b:zz"]
    bench_rl_phase.main(
        ["--reference", str(reference), "--seeds", "0", "1", "--splits", "seen", *arms, "--out", str(out)]
    )
    assert [c[3] for c in commands] == ["grpo_alfworld", "grpo_alfworld"]  # a finished; b ran for each seed
    assert all(
        "x=1" in c and "eval.splits=[seen]" in c and not any(s.startswith("recipe=") for s in c) for c in commands
    )
    table = (out / "table.md").read_text()
    assert "**seen**" in table and "**unseen**" not in table
    # game 0 lost by a and won back by b on both seeds, game 2 won by b: +50 points over 4 games
    assert "| a < b | +50.0 points, 2 up 0 down of 4, p=0.5: unresolved |" in table
    assert "b < zz" not in table  # an arm that is not in the benchmark is not compared


def test_sampled_passes_are_tested_per_game_as_rates(tmp_path):
    """With eval.sampled, each game's successes over K episodes × seeds form its rate: an arm
    is tested against the start and the first arm with the rate test; an arm one of whose
    seeds was evaluated greedily only gets no sampled row."""

    def sampled_run(run_dir, successes, episodes=2):
        _run(run_dir, "after", {"seen": [0, 0, 0]})
        record = {
            "eval": "after",
            "split": "seen",
            "eval/outcomes": [0, 0, 0],
            "eval/sampled_game_successes": successes,
            "eval/sampled_game_episodes": [episodes] * len(successes),
        }
        (run_dir / "metrics.jsonl").write_text(json.dumps(record) + "\n")

    sampled_run(tmp_path / "ref", [0, 1, 0])
    assert bench_rl_phase.sampled_rates(tmp_path / "ref", "after") == {"seen": [(0, 2), (1, 2), (0, 2)]}
    for seed, successes in enumerate([[1, 1, 1], [2, 1, 1]]):
        sampled_run(tmp_path / "out" / f"a_s{seed}", successes)
        sampled_run(tmp_path / "out" / f"b_s{seed}", [0, 1, 0])
    _run(tmp_path / "out" / "c_s0", "after", {"seen": [0, 0, 0]})  # greedy only
    sampled_run(tmp_path / "out" / "c_s1", [0, 0, 0])
    arms = ["--arm", "a:", "--arm", "b:", "--arm", "c:"]
    out = ["--out", str(tmp_path / "out"), "--summarize"]
    bench_rl_phase.main(["--reference", str(tmp_path / "ref"), "--label", "after", "--seeds", "0", "1", *arms, *out])
    table = (tmp_path / "out" / "table.md").read_text()
    assert "start 1/6 = 16.7%" in table
    # a: per game 3/4, 2/4, 2/4 against 0/2, 1/2, 0/2: d = +0.75, 0, +0.5 -> +41.7 points, 2 up of 3
    assert "| a | 7/12 = 58.3% [32.0, 80.7] | +41.7 points, 2 up 0 down of 3, p=0.5: unresolved | - |" in table
    assert "| b | 2/12 = 16.7% [4.7, 44.8] | +0.0 points, 0 up 0 down of 3, p=1: unchanged | -41.7 points" in table
    assert "| c |" not in table.split("Sampled passes")[1].split("| arm | seed |")[0]  # c's seed 0: greedy only
