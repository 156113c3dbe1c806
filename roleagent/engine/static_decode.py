"""The engine's decode with shapes fixed for a whole batch, so ``torch.compile`` (and, on
a GPU, CUDA graphs) can capture the decode step: the ``hf_engine`` section.

``hf_engine.decode``:

- ``eager`` (default): a cache that grows by one key column per step; a row that finishes
  leaves the batch and its KV rows are dropped, so later steps cost less. With ``arena``
  (default) that cache is one buffer per batch written in place, and with
  ``prefill_tokens`` > 0 the prefill runs in row chunks (:mod:`roleagent.engine.kv_arena`);
  without it, transformers' ``DynamicCache``.
- ``static``: a ``transformers`` ``StaticCache`` allocated once per batch for
  ``L = P + T`` positions (P the prompt width, T the batch's token limit, rounded up to a
  multiple of ``cache_bucket``) and an attention mask of the same width allocated with it.
  Every step has the same shapes: a (B, 1) input, a (B, L) mask, a (B, heads, L, d) cache.
  Rows stay in the batch to its end; a finished row's forwards are computed and ignored.
- ``compiled``: ``static`` with the decode step (not the prefill, whose width varies)
  through ``torch.compile(mode=hf_engine.compile_mode, dynamic=False)``. Each distinct
  (B, L) compiles once (``cache_bucket`` keeps the L values few; torch's recompile limit,
  ``torch._dynamo.config.cache_size_limit``, applies); ``reduce-overhead`` adds CUDA graphs.

What is generated does not change. Tokens are sampled over the live rows only, in the
order the eager loop keeps them, so each step draws the same uniform numbers; the live
rows' logits differ from the eager loop's by float rounding at most (a padded key column
is masked, so it adds exp(-inf) = 0 to every softmax). ``tests/test_engine_static.py``
compares tokens and log-probs, sampled and greedy, constrained and free.

Cost: the eager loop's step reads a cache of the positions filled so far, for the rows
still alive; the static step reads all L positions for all B rows. Fixed shapes pay where
the per-step host work dominates and cost where it does not, or where rows finish at very
different times. On the 2-core CPU (``benchmarks/RESULTS.md``, "Engine decoding speed"),
compiled / eager was 1.27 at batch 1 and 0.87 at batch 16. The paths are meant for GPUs,
where the issue "Episodes an order of magnitude cheaper" measured the eager step as host
bound (~35 ms at batch 1 on an H200); not measured there yet. The prefix-KV store
(``rollout.prefix_cache_tokens``) is eager-only: it keeps and grafts dynamic per-row caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from roleagent.fields import setting

if TYPE_CHECKING:  # the config imports this module's settings: torch stays out of its imports
    import torch

DECODES = ("eager", "static", "compiled")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class HFEngineConfig:
    decode: str = setting(
        "eager",
        "eager: the cache grows per step, finished rows leave the batch | static: one preallocated "
        "cache and mask per batch, every row to the batch's end (fixed shapes) | compiled: static, "
        "the decode step through torch.compile (roleagent.engine.static_decode)",
    )
    compile_mode: str = setting(
        "default",
        "torch.compile mode of decode=compiled: default | reduce-overhead (CUDA graphs) | max-autotune "
        "| max-autotune-no-cudagraphs",
    )
    cache_bucket: int = setting(
        64, "decode static/compiled: the cache's length is rounded up to a multiple of this (fewer compiles)"
    )
    arena: bool = setting(
        True,
        "decode eager: the batch's keys and values in one buffer allocated once and written in place "
        "(roleagent.engine.kv_arena) | false: transformers' DynamicCache, grown by torch.cat each step",
    )
    prefill_tokens: int = setting(
        0,
        "decode eager with arena: the prefill runs in chunks of at most this many padded prompt tokens "
        "(at least one row; bounds its activations, changes bf16 rounding); 0: all rows in one forward",
    )
    trim_heap: bool = setting(
        True,
        "after each batch, give the allocator's free heap pages back to the system (glibc malloc_trim; "
        "elsewhere nothing): a call's freed activations stop holding memory; changes no value (roleagent.allocator)",
    )


def static_length(prompt_width: int, new_tokens: int, bucket: int) -> int:
    """Positions a static batch needs, rounded up to a multiple of ``bucket``.

    Example: a 290-token prompt width and 64 new tokens with bucket 64 → 384."""
    return -(-(prompt_width + new_tokens) // bucket) * bucket


def static_batch(config, attention: torch.Tensor, new_tokens: int, bucket: int):
    """The (B, L) mask with the prompt's (B, P) mask in its first P columns and zeros
    after, an empty ``StaticCache`` of L positions (allocated at the first forward, in the
    model's dtype and device) and P, the mask's columns in use."""
    from transformers import StaticCache

    rows, width = attention.shape
    length = static_length(width, new_tokens, bucket)
    full = attention.new_zeros((rows, length))
    full[:, :width] = attention
    return full, StaticCache(config=config, max_cache_len=length), width


def static_advance(step_input, attention, positions, filled: int, rows, tokens):
    """The next step's (B, 1) input and positions of a static batch, its mask's column
    ``filled`` opened in place: the live ``rows`` are fed their sampled ``tokens``, a
    finished row its last input again (its outputs are no longer read).

    Example: rows [0, 2] of 3 sampled tokens [7, 9] after inputs [[4], [5], [6]] → [[7], [5], [9]]."""
    fed = step_input[:, -1:].clone()
    fed[rows, 0] = tokens
    attention[:, filled] = 1
    return fed, positions[:, -1:] + 1


def decode_step(forward, settings: HFEngineConfig):
    """The callable each decode step goes through: ``forward`` itself, or compiled."""
    if settings.decode != "compiled":
        return forward
    import torch

    return torch.compile(forward, mode=settings.compile_mode, dynamic=False)
