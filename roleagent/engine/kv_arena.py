"""One preallocated KV buffer per batch: the prefill runs in row chunks, decode steps write in place.

transformers' ``DynamicLayer`` grows a layer's keys and values by ``torch.cat`` at every
forward, so each decode step allocates the batch's whole cache again, one position longer,
and frees the old copy; and a prefill of all rows at once holds activations of
``rows × width`` tokens (an MLP product of 16 × 570 tokens × 1,536 is 28 MB in bf16). With
glibc's malloc both leave freed blocks of ever-changing sizes in the heap, resident
(``benchmarks/RESULTS.md``, "Memory": a 16-row bf16 rollout turn's resident memory rose
layer by layer through one prefill). A :class:`KVArena` instead holds the whole batch's
keys and values in one tensor allocated once,

    buf: (layers, 2, rows, kv_heads, capacity, head_dim),   capacity = C + S + T,

C the widest reused prefix, S the widest prefilled suffix, T the batch's token limit (the
engine's ``_prefill_inputs`` layout: row i's stored KV right-aligned in the first C
positions, its suffix in the next S, left-padded). Each layer of the cache is an
:class:`ArenaLayer`: a ``DynamicLayer`` whose ``keys`` and ``values`` are views of the
first ``length`` positions of its rows, written in place by ``update``. The prefill runs
in chunks of ``max(1, prefill_tokens // S)`` rows (:func:`row_chunks`), each chunk's cache
a view of its rows of the same buffer, so no KV is copied to join them.

Worked example (SmolLM2-135M: 30 layers, 3 KV heads of 64, bf16): 16 rows, C = 0, S = 301,
T = 32 → one buffer of 30 × 2 × 16 × 3 × 333 × 64 × 2 B = 123 MB, against a new
(16, 3, 301 + t, 64) pair per layer at every step t of the ``cat`` path; with
``prefill_tokens = 2048`` (the default 0: one forward) the prefill runs 6 rows (1,806
tokens) at a time, 3 forwards.

A finished row leaves the batch by moving the rows after it down in place
(:meth:`ArenaLayer.batch_select_indices`, called by :func:`eager_advance` with the mask's
and positions' rows), so the eager loop's later steps read only the live rows, as before.

What is computed: every position a query attends to holds the same key and value as in
the ``cat`` path (the reused rows' padding is zeros, hidden by the attention mask as it
always was), so the arena alone generates the same tokens and log-probs, in fp32
(``tests/test_kv_arena.py``) and in bf16 (a 16-row probe, six calls, equal to the bit).
Prefilling in row chunks changes the matrix products' shapes and so their rounding: in
fp32 the log-probs move by a few 1e-6 and seeded tiny runs stay equal token for token; in bf16
by up to a few hundredths of a nat (0.036 on that probe's first call), enough to change
some sampled tokens. ``prefill_tokens: 0`` keeps a bf16 run's tokens as they were.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

__all__ = ["ArenaLayer", "KVArena", "eager_advance", "full_attention_layers", "row_chunks"]


def full_attention_layers(config) -> int:
    """The number of decoder layers when every one is a plain full-attention ``DynamicLayer``
    (what an arena can stand in for), else 0 (sliding-window or linear-attention layers:
    the engine keeps transformers' own cache)."""
    layers = DynamicCache(config=config).layers
    return len(layers) if layers and all(type(layer) is DynamicLayer for layer in layers) else 0


def row_chunks(rows: int, width: int, prefill_tokens: int) -> list[range]:
    """Consecutive row ranges of at most ``max(1, prefill_tokens // width)`` rows (all rows
    at once when ``prefill_tokens`` is 0).

    Example: ``row_chunks(16, 512, 2048)`` → ranges 0–3, 4–7, 8–11, 12–15."""
    step = rows if prefill_tokens <= 0 else max(1, prefill_tokens // max(width, 1))
    return [range(start, min(start + step, rows)) for start in range(0, rows, step)]


class KVArena:
    """The keys and values of one batch (module docstring), allocated at the first write
    (in the dtype the model's attention produces) and filled with the reused prefixes then.

    ``reuse``: ``(entry, c_i)`` per row as the engine's prefix lookup returns them (entry a
    :class:`~roleagent.engine.prefix_cache.PrefixEntry` or None), right-aligned in the first
    ``width`` positions; ``capacity``: C + S + T."""

    def __init__(self, layers: int, rows: int, capacity: int, reuse=None, width: int = 0):
        self.layers, self.rows, self.capacity = layers, rows, capacity
        self.reuse, self.width = reuse, width
        self.buf: torch.Tensor | None = None

    def ensure(self, like: torch.Tensor) -> torch.Tensor:
        """The buffer, allocated on the first call with ``like``'s (b, heads, s, d) heads,
        head size, dtype and device. Only the reused prefixes' ``width`` positions are
        zeroed (a masked key still enters q·k, so it must be finite); every later position
        is written before a view includes it, so untouched pages (positions rows never
        reach) are never made resident."""
        if self.buf is None:
            _, heads, _, head_dim = like.shape
            self.buf = like.new_empty((self.layers, 2, self.rows, heads, self.capacity, head_dim))
            self.buf[..., : self.width, :].zero_()
            for row, (entry, c) in enumerate(self.reuse or ()):
                if c:
                    self.buf[:, :, row, :, self.width - c : self.width] = entry.kv[:, :, :, :c].to(like.dtype)
        return self.buf

    def cache(self, rows: range | None = None, length: int = 0) -> DynamicCache:
        """A ``DynamicCache`` over ``rows`` (default: all) whose layers hold ``length``
        positions so far (the reused prefix's ``width`` before the prefill)."""
        rows = range(self.rows) if rows is None else rows
        cache = DynamicCache()
        cache.layers = [ArenaLayer(self, index, rows, length) for index in range(self.layers)]
        return cache


class ArenaLayer(DynamicLayer):
    """A ``DynamicLayer`` over rows ``rows`` of layer ``index`` of a :class:`KVArena`:
    ``keys`` / ``values`` are views of its first ``length`` positions."""

    def __init__(self, arena: KVArena, index: int, rows: range, length: int):
        super().__init__()
        self.arena, self.index, self.start, self.count, self.length = arena, index, rows.start, len(rows), length
        if arena.buf is not None:
            self._view()

    def _view(self) -> None:
        kv = self.arena.buf[self.index, :, self.start : self.start + self.count, :, : self.length]
        self.keys, self.values = kv[0], kv[1]
        self.is_initialized, self.device = True, kv.device

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.arena.ensure(key_states)
        self._view()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new positions after the first ``length`` and return the views of all."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new = key_states.shape[-2]
        if self.length + new > self.arena.capacity:
            raise RuntimeError(f"KV arena full: {self.length} + {new} positions > capacity {self.arena.capacity}")
        rows = self.arena.buf[self.index, :, self.start : self.start + self.count]
        rows[0, :, :, self.length : self.length + new] = key_states
        rows[1, :, :, self.length : self.length + new] = value_states
        self.length += new
        self._view()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep rows ``indices`` (ascending), moved down in place: row ``indices[j]`` → j.
        Each source lies at or after its destination and every earlier destination, so no
        row is overwritten before it is read."""
        rows = self.arena.buf[self.index, :, self.start : self.start + self.count, :, : self.length]
        for dest, src in enumerate(indices.tolist()):
            if src != dest:
                rows[:, dest].copy_(rows[:, src])
        self.count = len(indices)
        self._view()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of positions to remove, not {tokens_to_remove}")
        self.length = max(0, self.length + tokens_to_remove)
        if self.is_initialized:
            self._view()

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("a KV arena has a fixed number of rows")


def eager_advance(cache, attention: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor, keep: list[int]):
    """The next step's (b', 1) input, mask and positions of an eager batch: the rows not
    in ``keep`` leave it (their cache rows are dropped), the mask grows by one column."""
    if len(keep) < len(tokens):
        index = torch.tensor(keep, device=tokens.device)
        cache.batch_select_indices(index)  # a DynamicCache's or a KV arena's (in place)
        attention, tokens, positions = attention[index], tokens[index], positions[index]
    attention = torch.cat([attention, attention.new_ones((len(keep), 1))], dim=1)  # (b', L+1)
    return tokens[:, None], attention, positions[:, -1:] + 1
