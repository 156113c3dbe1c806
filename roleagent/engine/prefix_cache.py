"""A bounded store of per-sequence KV caches, for automatic prefix reuse across calls.

The idea is vLLM's automatic prefix caching (Kwon et al., 2023, arXiv:2309.06180, and
its "automatic prefix caching" design): the keys and values of a causal LM at position
``t`` depend only on tokens ``0..t``, so the KV of any sequence already processed can
stand in for the prefill of every later prompt that starts with the same tokens. The
engine stores, after each generate call, the KV of each row's processed sequence (its
prompt and the generated tokens whose KV was computed) and, on the next call, prefills
only the part of each prompt that no stored sequence covers.

Differences from vLLM: entries are whole sequences (one contiguous tensor each, no paged
blocks shared between entries), so rows that share a prefix each hold their own copy;
and reuse is across calls only (prompts of one batch do not share their common prefix).

Lookup is cheap: every entry is indexed under the chain hash of each of its full
``block``-token prefixes (hash of the previous block's hash and the block's tokens, as
vLLM hashes blocks); a prompt walks its own block hashes down to the deepest one some
entry shares; those entries agree with it up to there and differ within the next block,
so only that block is compared token by token to find the longest common prefix (which
may end inside a block), and the winner's shared blocks are checked against the prompt
(a hash collision gives no match rather than wrong KV). Eviction is least-recently-used over a
token budget.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch

__all__ = ["PrefixCache", "PrefixEntry", "batch_cache", "plain_dynamic", "row_kv"]


@dataclass
class PrefixEntry:
    tokens: tuple[int, ...]  # the sequence whose KV is stored
    kv: torch.Tensor  # (layers, 2, kv_heads, len(tokens), head_dim): keys [.., 0], values [.., 1]
    hashes: list[int] = field(default_factory=list)  # chain hash of each full block prefix
    key: int = -1  # its id in the store

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()


def block_hashes(tokens, block: int) -> list[int]:
    """Chain hash of every full ``block``-token prefix of ``tokens``: h_j = hash((h_{j-1},
    tokens[(j-1)·block : j·block])), h_0 = 0. E.g. block 2, tokens (5, 6, 7) gives one hash,
    hash((0, (5, 6))); tokens (5, 6, 7, 8) give it and hash((that, (7, 8)))."""
    out, h = [], 0
    for start in range(0, len(tokens) - block + 1, block):
        h = hash((h, tuple(tokens[start : start + block])))
        out.append(h)
    return out


def common_prefix(a, b) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PrefixCache:
    """LRU store of sequence KVs under a token budget (``max_tokens``)."""

    def __init__(self, max_tokens: int, *, block: int = 16):
        if max_tokens < 0 or block < 1:
            raise ValueError(f"prefix cache needs max_tokens >= 0 and block >= 1, got {max_tokens}, {block}")
        self.max_tokens = max_tokens
        self.block = block
        self._entries: OrderedDict[int, PrefixEntry] = OrderedDict()  # id -> entry, oldest first
        self._index: dict[int, set[int]] = {}  # block chain hash -> ids of entries sharing it
        self._next_id = 0
        self.tokens = 0  # tokens stored, <= max_tokens
        self.nbytes = 0  # bytes of KV stored
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._index.clear()
        self.tokens = self.nbytes = 0

    def lookup(self, prompt: list[int]) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest prefix with ``prompt`` and that prefix's length
        (``(None, 0)`` when no entry shares a full block). Marks the entry recently used."""
        candidates: set[int] = set()
        depth = 0  # full blocks shared with every candidate
        for h in block_hashes(prompt, self.block):
            ids = self._index.get(h)
            if not ids:
                break
            candidates, depth = ids, depth + 1
        start = depth * self.block
        best, best_len = None, 0
        for key in candidates:  # they agree up to `start`; they differ within the next block
            length = start + common_prefix(
                self._entries[key].tokens[start : start + self.block], prompt[start : start + self.block]
            )
            if length > best_len:
                best, best_len = key, length
        if best is None or self._entries[best].tokens[:start] != tuple(prompt[:start]):
            return None, 0  # (the second test guards against a hash collision)
        self._entries.move_to_end(best)
        return self._entries[best], best_len

    def insert(self, tokens: list[int], kv: torch.Tensor) -> bool:
        """Store ``kv`` (layers, 2, heads, len(tokens), head_dim) for ``tokens``; evict the
        least recently used entries past the budget. An entry that is a prefix of the new
        sequence is replaced by it; a sequence already covered by an entry is not stored
        twice. Returns whether it was stored."""
        if kv.shape[3] != len(tokens):
            raise ValueError(f"KV covers {kv.shape[3]} tokens but the sequence has {len(tokens)}")
        if not tokens or len(tokens) > self.max_tokens:
            return False
        while True:
            entry, length = self.lookup(tokens)
            if entry is None:
                break
            if length == len(tokens):  # already covered (lookup marked it used)
                return False
            if length < len(entry.tokens):
                break
            self._remove(entry.key)  # a prefix of the new sequence
        key, self._next_id = self._next_id, self._next_id + 1
        entry = PrefixEntry(tuple(tokens), kv, block_hashes(tokens, self.block), key)
        self._entries[key] = entry
        for h in entry.hashes:
            self._index.setdefault(h, set()).add(key)
        self.tokens += len(tokens)
        self.nbytes += entry.nbytes
        while self.tokens > self.max_tokens:
            self._remove(next(iter(self._entries)))
            self.evictions += 1
        return True

    def _remove(self, key: int) -> None:
        entry = self._entries.pop(key)
        for h in entry.hashes:
            ids = self._index.get(h)
            if ids is not None:
                ids.discard(key)
                if not ids:
                    del self._index[h]
        self.tokens -= len(entry.tokens)
        self.nbytes -= entry.nbytes


# ------------------------------------------------ transformers DynamicCache glue ------


def plain_dynamic(cache) -> bool:
    """Whether ``cache`` is a DynamicCache of full-attention layers (what prefix reuse
    stores and rebuilds; sliding-window or quantised layers are left alone)."""
    from transformers.cache_utils import DynamicLayer

    from roleagent.engine.kv_arena import ArenaLayer

    layers = getattr(cache, "layers", None)
    kinds = (DynamicLayer, ArenaLayer)
    return bool(layers) and all(type(layer) in kinds and layer.is_initialized for layer in layers)


def row_kv(cache, row: int, index: torch.Tensor) -> torch.Tensor:
    """A copy of one batch row's KV at positions ``index``: (layers, 2, heads, T, head_dim)."""
    return torch.stack(
        [torch.stack((layer.keys[row][:, index], layer.values[row][:, index])) for layer in cache.layers]
    )


def batch_cache(reuse: list[tuple[PrefixEntry | None, int]], width: int):
    """A DynamicCache whose row i holds the first c_i stored KVs of its entry, right-aligned
    in ``width`` positions (zeros before them, which the attention mask hides)."""
    from transformers import DynamicCache

    ref = next(entry.kv for entry, c in reuse if c)
    layers, _, heads, _, head_dim = ref.shape
    buf = ref.new_zeros((layers, 2, len(reuse), heads, width, head_dim))
    for row, (entry, c) in enumerate(reuse):
        if c:
            buf[:, :, row, :, width - c :, :] = entry.kv[:, :, :, :c, :]
    return DynamicCache([(buf[i, 0], buf[i, 1]) for i in range(layers)])
