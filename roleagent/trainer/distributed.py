"""Data-parallel training on ``torch.distributed``: N processes, one global batch.

Launch the same recipe with ``torchrun --nproc_per_node N -m roleagent.cli train RECIPE``
(or ``roleagent train RECIPE --nproc N``, which runs torchrun for you). Each process:

1. samples the same tasks (same seeds, same generators) and plays its contiguous share of
   the iteration's ``tasks_per_iter × group_size`` episodes (:meth:`DataParallel.share`);
2. gathers every rank's trajectories (``all_gather_object``) in rank order, which is the
   single-process job order, so scores, advantages, method hooks and training samples are
   the same on every rank;
3. in each mini-batch computes the backward of its share of the samples
   (:meth:`DataParallel.shard`), with the loss still divided by the mini-batch's global
   token count, through ``torch.nn.parallel.DistributedDataParallel``
   (:meth:`DataParallel.training_model`): micro-batches accumulate locally (``no_sync``)
   and the last one's backward sums the gradients over ranks in buckets, overlapped with
   that backward (a SUM hook, :func:`_sum_hook`, in place of DDP's mean):
   ``Σ_ranks Σ_{tokens of the rank} ℓ / n_tokens`` is the single-process token mean, so
   clipping and the AdamW step are identical on every rank and the weights stay equal.
   Gradients are summed in the trained weights' dtype, fp32 (``roleagent.models.precision``).

Sampling: rank r > 0 seeds its engine with ``seed + r`` (the same seed everywhere would
repeat rank 0's draws when a task's group is split between ranks). Files: rank 0 owns ``run_dir`` (metrics, rollouts, checkpoints, the lock). Rank r > 0
runs in ``run_dir/ranks/rank<r>``, its own run directory, whose checkpoints hold its own
sampling generator (its episodes differ from rank 0's) next to the same weights; a resume
checks that every rank restarts at the same iteration.

The backend is gloo on CPU and NCCL when the policy is on CUDA (``model.device``;
``LOCAL_RANK`` picks the GPU). Evaluation panels and the SFT warm start are run by every
rank in full (identically), not split. ``optim.fsdp`` shards the policy with FSDP2
(:mod:`roleagent.trainer.fsdp`); the hooks it overrides here are ``loss_scale``,
``padding``, ``training_model`` and ``syncing``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from roleagent.config import ConfigError, TrainConfig
from roleagent.rollout import RolloutStats
from roleagent.trainer.loop import Trainer


def launched() -> bool:
    """Started by torchrun (or another launcher) with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


class DataParallel:
    """This process's place in the process group and the three collectives training needs."""

    def __init__(self, *, backend: str | None = None):
        if not dist.is_initialized():
            if backend is None:
                backend = "nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend=backend)
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.device = torch.device("cpu")
        if dist.get_backend() == "nccl":
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(self.device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def share(self, items: list) -> list:
        """This rank's contiguous block of ``items`` (sizes differ by at most one).

        Example: 5 items, 2 ranks → rank 0 gets items 0-2, rank 1 items 3-4.
        """
        small, extra = divmod(len(items), self.world)
        start = self.rank * small + min(self.rank, extra)
        stop = start + small + (self.rank < extra)
        return items[start:stop]

    def shard(self, samples: list) -> list:
        """This rank's training samples of a mini-batch: sorted by length (stable, the
        same on every rank) and dealt round-robin, so ranks get similar token counts.

        Example: lengths [5, 1, 3, 2], 2 ranks → sorted 1, 2, 3, 5: rank 0 gets the
        samples of lengths 1 and 3, rank 1 those of lengths 2 and 5.
        """
        return sorted(samples, key=lambda s: s.length)[self.rank :: self.world]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order, on every rank."""
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, value)
        return out

    loss_scale = 1.0  # each rank's loss factor before backward (FSDP's mean over ranks needs the world size)
    _ddp: DistributedDataParallel | None = None

    def training_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """What the update's forwards run through: ``model`` wrapped in
        ``DistributedDataParallel`` (built on first use, a collective; rebuilt for another
        model), whose backward sums the gradients over ranks in buckets while it runs."""
        if self._ddp is None or self._ddp.module is not model:
            device_ids = None if self.device.type == "cpu" else [self.device]
            self._ddp = DistributedDataParallel(model, device_ids=device_ids, broadcast_buffers=False)
            self._ddp.register_comm_hook(None, _sum_hook)
        return self._ddp

    def syncing(self, last: bool):
        """Context of one micro-batch's forward and backward: gradients accumulate locally
        (``no_sync``) except in the last one, whose backward sums the accumulated ones."""
        return contextlib.nullcontext() if last else self._ddp.no_sync()

    def padding(self, micros: list[list], computed: list) -> list[list]:
        """Dummy micro-batches to run with weight 0: one when this rank has no samples in
        the mini-batch, so that it still joins the synced backward (the gradient sum)."""
        return [] if micros else [computed[:1]]

    def merge_totals(self, totals: dict[str, list[float]]) -> dict[str, list[float]]:
        """The update's per-step metric terms of all ranks, concatenated by key (each term
        is already weighted by its tokens' share of the mini-batch, so the sum is global)."""
        merged: dict[str, list[float]] = {}
        for part in self.gather(totals):
            for key, values in part.items():
                merged.setdefault(key, []).extend(values)
        return merged

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class ShardedCollector:
    """Wraps a collector: plays this rank's share of the jobs, returns everyone's
    trajectories in job order (rank order), the stats summed over ranks (times: the
    slowest rank's)."""

    def __init__(self, inner, dp: DataParallel):
        self.inner, self.dp = inner, dp

    def collect(self, iteration, progress=None):
        share = dataclasses.replace(iteration, jobs=self.dp.share(iteration.jobs))  # the same extras
        trajectories, stats = self.inner.collect(share, progress=progress)
        parts = self.dp.gather((trajectories, stats))
        merged = RolloutStats()
        for _, part in parts:
            for f in dataclasses.fields(RolloutStats):
                value = getattr(part, f.name)
                if f.name.endswith("_s"):
                    setattr(merged, f.name, max(getattr(merged, f.name), value))
                elif isinstance(value, dict):
                    for key, v in value.items():
                        merged.timings[key] = max(merged.timings.get(key, 0.0), v)
                else:
                    setattr(merged, f.name, getattr(merged, f.name) + value)
        return [t for part, _ in parts for t in part], merged


def _sum_hook(_state, bucket):  # no annotation: DDP checks it against Future[Tensor] unevaluated
    """DDP communication hook: the SUM of a gradient bucket over ranks (DDP's default
    divides by the world size; the loss is already divided by the global token count)."""
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])


def rank_config(cfg: TrainConfig, rank: int) -> TrainConfig:
    """Rank 0's config unchanged; rank r > 0 gets its own run directory and writes only
    ``metrics.jsonl`` there (no TensorBoard, no tracker run per rank)."""
    if rank == 0:
        return cfg
    run_dir = str(Path(cfg.run_dir) / "ranks" / f"rank{rank}")
    return dataclasses.replace(cfg, run_dir=run_dir, report_to=["jsonl"])


class DistributedTrainer(Trainer):
    """:class:`~roleagent.trainer.loop.Trainer` on every rank of a process group, which is
    initialised from the launcher's environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``) unless it already is."""

    def __init__(self, cfg: TrainConfig, *, resume: bool = True, quiet: bool = False, backend: str | None = None):
        self.fsdp = cfg.optim.fsdp
        if self.fsdp:
            from roleagent.trainer.fsdp import FSDPDataParallel

            self.dp = FSDPDataParallel(backend=backend)
        else:
            self.dp = DataParallel(backend=backend)
        self.world_size = self.dp.world  # environment slots for this rank's share of the episodes
        if self.dp.device.type == "cuda" and cfg.model.device in ("auto", "cuda"):
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, device=str(self.dp.device)))
        super().__init__(rank_config(cfg, self.dp.rank), resume=resume, quiet=quiet or not self.dp.is_main)
        if self.dp.rank > 0 and self.resumed_from is None:  # rollouts of one group split over
            self.engine.seed(cfg.seed + self.dp.rank)  # ranks must not repeat each other's draws
        starts = self.dp.gather(self.start_iteration)
        if len(set(starts)) > 1:
            self.close()
            raise RuntimeError(
                f"ranks would resume at different iterations {starts} (a checkpoint of some rank "
                "is missing); restart with --no-resume or remove the newer checkpoints"
            )

    def budget_spent(self) -> bool:
        """Rank 0's clock decides for every rank (``budget_minutes``): ranks that stopped at
        different iterations would wait forever on each other's collectives."""
        return bool(self.cfg.budget_minutes) and self.dp.gather(super().budget_spent())[0]

    def _build_stages(self, cfg: TrainConfig) -> None:
        if self.fsdp:  # sharded before the optimizer sees the parameters; gathered for rollouts
            from roleagent.trainer import fsdp

            fsdp.shard_model(self.policy.model)
        super()._build_stages(cfg)
        self.collector = ShardedCollector(self.collector, self.dp)
        if self.fsdp:
            fsdp.gather(self.policy.model)

    def reset_objective(self) -> None:
        super().reset_objective()  # under FSDP: called by _build_stages on the sharded model
        updater = getattr(self.objective, "updater", None)
        if self.fsdp:  # the optimizer holds the shards (DTensors); the update runs sharded
            from roleagent.trainer.fsdp import ShardedObjective

            if updater is None:
                raise ConfigError("optim.fsdp needs the default objective (a method replaced it)")
            self.objective = ShardedObjective(self.objective, self.policy.model)
        if updater is not None:  # another objective trains every rank on the whole batch
            if updater.replay is not None:
                raise ConfigError("optim.sft_replay_coef > 0 runs in one process only (not under torchrun)")
            updater.data_parallel = self.dp

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.dp.close()


def torchrun(nproc: int, train_args: list[str]) -> int:
    """Run ``roleagent train TRAIN_ARGS`` under torchrun with ``nproc`` processes on this
    machine (``--standalone``: a local rendezvous); returns its exit status."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    return subprocess.call([*command, "-m", "roleagent.cli", "train", *train_args])
