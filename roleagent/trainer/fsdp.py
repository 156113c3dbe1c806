"""Full fine-tuning with FSDP2 (``optim.fsdp``) through the data-parallel path.

Under torchrun with ``optim.fsdp=true`` and ``model.lora_rank=0``, every rank wraps each
decoder layer of the policy (the classes in the model's ``_no_split_modules``) and then the
root with FSDP2 ``fully_shard`` (Zhao et al., 2023, arXiv:2304.11277, per-parameter
sharding as in torch's FSDP2), so parameters, gradients and the AdamW state are split over
the ranks. The episodes, gathering and mini-batch split are those of
:mod:`roleagent.trainer.distributed`; what changes:

* **Two states.** Outside the update the model is *gathered*: every module is unsharded
  (``unshard()``) with ``set_reshard_after_forward(False)``, so rollouts, evaluation and any
  method's generation run on plain full tensors with no collective — ranks may make
  different numbers of forward calls (generation lengths differ). During the update (and
  while checkpoints are written or read) it is *sharded*: each layer is all-gathered for
  its forward and backward and resharded after, and backward reduce-scatters gradients.
  So every rank holds the full parameters for rollouts, as verl's FSDP workers do when they
  gather the weights for their rollout engine (Sheng et al., 2024, arXiv:2409.19256).
* **Equal collective counts.** Every rank runs the same number of forward/backward passes
  in a mini-batch: a rank with fewer micro-batches adds dummy ones (a real sample of the
  mini-batch with loss weight 0, :meth:`FSDPDataParallel.padding`).
* **A sum, not a mean.** FSDP's reduce-scatter averages the gradients over ranks; the loss
  is divided by the mini-batch's global token count and needs the sum, so each rank's loss
  is multiplied by the world size (``loss_scale``). ``set_gradient_divide_factor(1.0)``
  would say the same, but on gloo it fails ("Cannot use ReduceOp.PREMUL_SUM with Gloo").
* **Norms of DTensors.** The clipping norm reduces each sharded gradient's norm over the
  ranks (:func:`roleagent.trainer.update.grad_norm`).
* **Checkpoints** hold the full weights (``save_pretrained`` format) and the full AdamW
  state keyed by parameter name (``torch.distributed.checkpoint.state_dict`` with
  ``full_state_dict=True``), written by every rank into its own run directory as in the
  plain data-parallel layout, and loaded back into the shards.

Refused (``roleagent.config_rules.check_fsdp``): LoRA, a KL reference (``optim.kl_coef > 0``), the critic, the SFT
warm start, gradient checkpointing and engines other than ``hf``. One process
(``WORLD_SIZE`` 1) trains unsharded as usual.
"""

from __future__ import annotations

import contextlib

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard

from roleagent.models.precision import master_params
from roleagent.trainer.distributed import DataParallel


def shard_model(model: torch.nn.Module) -> list[FSDPModule]:
    """``fully_shard`` each decoder layer, then the root; returns the FSDP modules, root last."""
    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in layer_classes]
    if not layers:
        raise ValueError(f"{type(model).__name__}: no decoder layers (_no_split_modules) to shard with FSDP")
    master_params(model)  # fp32 master weights before sharding (roleagent.models.precision)
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    return [*layers, model]


def fsdp_modules(model: torch.nn.Module) -> list[FSDPModule]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def gather(model: torch.nn.Module) -> None:
    """Full parameters on every rank, kept across forwards (collective: all ranks call it)."""
    for module in fsdp_modules(model):
        module.set_reshard_after_forward(False)
        module.unshard()


def reshard(model: torch.nn.Module) -> None:
    """Back to this rank's shards; forwards gather each layer and free it after."""
    for module in fsdp_modules(model):
        module.reshard()
        module.set_reshard_after_forward(True)


@contextlib.contextmanager
def sharded(model: torch.nn.Module):
    """Run the block on the sharded model and gather it again after (collective)."""
    reshard(model)
    try:
        yield
    finally:
        gather(model)


_FULL = StateDictOptions(full_state_dict=True)


def full_state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """The full weights and the full AdamW state (keyed by parameter name), on CPU, on every
    rank (collective)."""
    with sharded(model):
        weights = get_model_state_dict(model, options=_FULL)
        state = get_optimizer_state_dict(model, optimizer, options=_FULL)
    cpu = {k: v.detach().cpu() for k, v in weights.items()}
    return cpu, state


def load_full_state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer, weights: dict, state: dict):
    """Put full weights (tied ones may be missing, as ``save_pretrained`` leaves them out)
    and a full optimizer state into the shards (collective)."""
    with sharded(model):
        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=False))
        set_optimizer_state_dict(model, optimizer, state, options=_FULL)


class FSDPDataParallel(DataParallel):
    """:class:`DataParallel` whose gradients FSDP reduce-scatters during backward."""

    @property
    def loss_scale(self) -> float:
        return float(self.world)  # FSDP divides the summed gradients by the world size

    def padding(self, micros: list[list], computed: list) -> list[list]:
        """Dummy micro-batches (weight 0) so every rank runs as many as the busiest.

        Example: ranks with 2 and 1 micro-batches → rank 1 gets ``[[computed[0]]]``.
        """
        most = max(self.gather(len(micros)))
        return [computed[:1]] * (most - len(micros))

    def training_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The sharded model itself: its backward reduce-scatters the gradients."""
        return model

    def syncing(self, last: bool):
        """Every micro-batch's backward reduce-scatters (no local accumulation)."""
        return contextlib.nullcontext()


class ShardedObjective:
    """An objective stage whose ``update`` runs on the sharded model (the rest passes through)."""

    def __init__(self, inner, model: torch.nn.Module):
        self.inner, self.model = inner, model

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def update(self, samples, rng):
        with sharded(self.model):
            return self.inner.update(samples, rng)
