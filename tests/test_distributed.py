"""Data-parallel training on torch.distributed (gloo, 2 CPU processes) against one process."""

from __future__ import annotations

import copy
import json
import os
import pickle
import random
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp

from roleagent.rollout import RolloutStats
from roleagent.trainer import Trainer
from roleagent.trainer.distributed import DataParallel, DistributedTrainer
from tests.run_helpers import config, trainable

# one task x 4 rollouts, split 2 + 2 (a group split between ranks); two mini-batches so
# the shuffled split of samples between ranks matters in every optimizer step
EXTRA = [
    "rollout.tasks_per_iter=1",
    "rollout.group_size=4",
    "optim.mini_batches=2",
    "eval.at_start=false",
    "eval.max_tasks=1",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Recording:
    """Keeps what the (sharded) collector returned and how many jobs this rank played."""

    def __init__(self, collector):
        self.collector, self.batches, self.local_jobs = collector, [], []
        inner = collector.inner
        original = inner.collect

        def local(iteration, progress=None):
            self.local_jobs.append(len(iteration.jobs))
            return original(iteration, progress=progress)

        inner.collect = local

    def collect(self, iteration, progress=None):
        trajectories, stats = self.collector.collect(iteration, progress=progress)
        self.batches.append(copy.deepcopy(trajectories))
        return trajectories, stats


def _rank_main(rank: int, world: int, port: int, run_dir: str, iterations: int, out: str, extra: list) -> None:
    """One rank of a whole training run with ``extra`` overrides; writes what the tests
    compare (this file's data-parallel tests and test_fsdp's) to ``out/rank{rank}.pkl``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    trainer = DistributedTrainer(config(Path(run_dir), iterations, extra), quiet=True, backend="gloo")
    try:
        trainer.collector = recording = _Recording(trainer.collector)
        trainer.run()
        result = {
            "weights": trainable(trainer),
            "batches": recording.batches,
            "local_jobs": recording.local_jobs,
            "start_iteration": trainer.start_iteration,
            "slots": trainer.pool.size,
            "metrics": [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()],
            "sharded": type(trainer.objective.optimizer.param_groups[0]["params"][0]).__name__,
        }
    finally:
        trainer.close()
    Path(out, f"rank{rank}.pkl").write_bytes(pickle.dumps(result))


def _launch(run_dir: Path, iterations: int, out: Path, extra: list = EXTRA) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_rank_main, args=(2, _free_port(), str(run_dir), iterations, str(out), extra), nprocs=2, join=True)
    return [pickle.loads((out / f"rank{r}.pkl").read_bytes()) for r in range(2)]


class _Replay:
    def __init__(self, trajectories):
        self.trajectories = trajectories

    def collect(self, iteration, progress=None):
        assert len(iteration.jobs) == len(self.trajectories)
        return copy.deepcopy(self.trajectories), RolloutStats()


def _single_process(run_dir: Path, batches: list) -> dict[str, torch.Tensor]:
    """One process trained on the same global batches (the ranks' gathered trajectories)."""
    trainer = Trainer(config(run_dir, len(batches), EXTRA), quiet=True)
    try:
        for iteration, batch in enumerate(batches):
            trainer.collector = _Replay(batch)
            trainer.train_iteration(iteration)
        return trainable(trainer)
    finally:
        trainer.close()


def _assert_close(a: dict, b: dict, atol: float = 1e-4) -> None:
    """Equal within 1% of one step at lr 1e-2: a sample missing or counted twice moves a
    weight by ~lr, while summing the same gradients in another order can move one whose
    gradient is near AdamW's eps (1e-8), where g / (|g| + eps) magnifies rounding, by a few
    1e-5 (3.3e-5 on 2 of 1,024 LoRA-A entries in the second step, measured)."""
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=0, msg=name)


def test_share_and_shard_are_contiguous_and_balanced():
    dp = DataParallel.__new__(DataParallel)  # the pure parts, no process group
    dp.world = 2
    shares = []
    for dp.rank in range(2):
        shares.append(dp.share([0, 1, 2, 3, 4]))
    assert shares == [[0, 1, 2], [3, 4]]

    class S:
        def __init__(self, length):
            self.length = length

    samples = [S(5), S(1), S(3), S(2)]
    dp.rank = 0
    assert [s.length for s in dp.shard(samples)] == [1, 3]
    dp.rank = 1
    assert [s.length for s in dp.shard(samples)] == [2, 5]


def test_rank_zeros_clock_decides_the_budget_for_every_rank():
    """budget_minutes under torchrun: ranks stopping at different iterations would wait on
    each other's collectives, so every rank takes rank 0's answer; no budget, no collective."""
    trainer = object.__new__(DistributedTrainer)
    trainer.cfg, trainer.started = SimpleNamespace(budget_minutes=1), time.perf_counter()
    asked = []
    trainer.dp = SimpleNamespace(gather=lambda mine: asked.append(mine) or [True, mine])  # rank 0: spent
    assert trainer.budget_spent() and asked == [False]  # this rank's own clock: 0 of 60 s
    trainer.started -= 61
    trainer.dp = SimpleNamespace(gather=lambda mine: [False, mine])  # rank 0: not yet
    assert not trainer.budget_spent()
    trainer.cfg.budget_minutes, trainer.dp = 0, None  # no budget: dp is not asked
    assert not trainer.budget_spent()


@pytest.mark.slow
def test_two_gloo_processes_equal_one_process_on_the_same_global_batch(tmp_path):
    ranks = _launch(tmp_path / "dp", 1, tmp_path / "out")
    assert [r["local_jobs"] for r in ranks] == [[2], [2]]  # each rank played half of the episodes
    assert [r["slots"] for r in ranks] == [2, 2]  # with environments for its half only
    batch = ranks[0]["batches"][0]
    assert len(batch) == 4 and len({t.task.id for t in batch}) == 1
    actions = [[s.action_ids for s in t.steps] for t in batch]
    assert actions[:2] != actions[2:]  # rank 1 drew other samples than rank 0 for the same task
    assert [t.task.id for t in batch] == [t.task.id for t in ranks[1]["batches"][0]]
    _assert_close(ranks[0]["weights"], ranks[1]["weights"], atol=0.0)  # one step, same on every rank
    single = _single_process(tmp_path / "single", [batch])
    fresh = Trainer(config(tmp_path / "init", 1, EXTRA), quiet=True, resume=False)
    init = trainable(fresh)
    fresh.close()
    moved = max(float((single[k] - init[k]).abs().max()) for k in single)
    assert moved > 1e-3  # the update moved the weights: the comparison below means something
    _assert_close(ranks[0]["weights"], single)
    # rank 0 owns the run directory; rank 1 writes only under ranks/rank1
    assert (tmp_path / "dp" / "checkpoints" / "latest").is_file()
    assert (tmp_path / "dp" / "ranks" / "rank1" / "checkpoints" / "latest").is_file()


@pytest.mark.slow
def test_two_process_resume_equals_an_uninterrupted_run(tmp_path):
    _launch(tmp_path / "resumed", 1, tmp_path / "a")
    resumed = _launch(tmp_path / "resumed", 2, tmp_path / "b")
    assert all(r["start_iteration"] == 1 for r in resumed)
    straight = _launch(tmp_path / "straight", 2, tmp_path / "c")
    _assert_close(resumed[0]["weights"], straight[0]["weights"], atol=0.0)
    _assert_close(resumed[1]["weights"], straight[1]["weights"], atol=0.0)


@pytest.mark.slow
def test_cli_nproc_runs_torchrun_with_a_rank_per_process(tmp_path, capsys):
    from roleagent.cli import main
    from tests.run_helpers import TINY

    settings = [s for s in TINY if not s.startswith("env.name")] + ["env.name=scripted", "eval.at_start=false"]
    args = [f"--set={s}" for s in [*settings, f"run_dir={tmp_path}", "iterations=1", "eval.max_tasks=1"]]
    assert main(["train", "--nproc", "2", *args]) == 0
    assert (tmp_path / "checkpoints" / "latest").is_file()
    assert (tmp_path / "ranks" / "rank1" / "checkpoints" / "latest").is_file()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert sum('"iteration": 0' in line for line in lines) == 1  # rank 0 alone writes the metrics


# ----------------------------------------------- the update alone, through DDP ------


def _ddp_update_rank(rank: int, world: int, port: int, out: str, n_samples: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    from tests.test_fsdp import SAMPLES, _updater

    dp = DataParallel(backend="gloo")
    updater = _updater()
    updater.data_parallel = dp
    try:
        metrics = updater.update(list(SAMPLES[:n_samples]), random.Random(0))
        weights = {k: v.detach().clone() for k, v in updater.policy.model.named_parameters()}
        Path(out, f"rank{rank}.pkl").write_bytes(pickle.dumps((metrics, weights, type(dp._ddp).__name__)))
    finally:
        dp.close()


@pytest.mark.slow
@pytest.mark.parametrize("n_samples", [3, 1])  # 3: ranks run 2 and 1 micro-batches; 1: rank 1 has none
def test_ddp_update_equals_one_process(tmp_path, n_samples):
    from tests.test_fsdp import SAMPLES, _updater

    mp.spawn(_ddp_update_rank, args=(2, _free_port(), str(tmp_path), n_samples), nprocs=2, join=True)
    ranks = [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(2)]
    single = _updater()
    init = {k: v.detach().clone() for k, v in single.policy.model.named_parameters()}
    expected = single.update(list(SAMPLES[:n_samples]), random.Random(0))
    weights = {k: v.detach().clone() for k, v in single.policy.model.named_parameters()}
    assert max(float((weights[k] - init[k]).abs().max()) for k in weights) > 1e-4
    for metrics, ranked, wrapper in ranks:
        assert wrapper == "DistributedDataParallel"
        _assert_close(ranked, weights, atol=1e-5)
        assert metrics["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
