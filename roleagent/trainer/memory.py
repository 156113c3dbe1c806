"""Resident memory per phase of a run: which phase makes a run's peak.

``memory/peak_rss_mb`` (``ru_maxrss``) says how high the process went, not when. A
:class:`PhaseMemory` samples the process's resident set size every ``interval`` seconds on
a thread that runs while a phase does (Linux: one read of ``/proc/self/statm``) and keeps,
for each phase,

- ``memory/<phase>_start_mb``: the resident memory when the phase (its last run) began;
- ``memory/<phase>_peak_mb``: the highest sample while it ran (the highest over its runs
  since :meth:`PhaseMemory.metrics` last reported it).

Peak − start is what the phase allocated and held at once (activations, logits, KV,
environment observations); a start that grows from one iteration to the next is memory
that the run keeps (caches, fragmentation). Worked example: a phase entered at 2,000 MB that
allocates 1,500 MB of activations and frees them reports start 2,000, peak ~3,500, and the
next phase starts near 2,000 again (or above it, if the allocator keeps the pages).

A peak shorter than ``interval`` (50 ms) can be missed, and the peak is a lower bound of
the truth by at most the memory allocated within one interval. The kernel's own high-water
mark could be reset per phase (``/proc/self/clear_refs``), but that also resets
``ru_maxrss`` and what ``/usr/bin/time -v`` reports for the whole run, so it is not used.
Where ``/proc/self/statm`` does not exist (macOS, Windows) nothing is sampled and
:meth:`~PhaseMemory.metrics` returns ``{}``.

**Giving memory back** (:func:`release_memory`, at the end of every phase unless
``release=False``). glibc's allocator serves blocks below its mmap threshold (which grows
to 32 MiB as large blocks are freed) from its heaps and keeps freed pages there. A run's
tensors of a few MiB (a stored prefix KV, an activation) thus stay resident after they
are freed: after one 16-game evaluation of the main recipe, clearing the engine's prefix
store (1.4 GiB of KV) lowered the resident memory by 0.34 GiB, and ``malloc_trim(0)`` then
by 1.36 GiB more (2.71 → 1.01 GiB). A release costs 0.1–0.2 s (a garbage collection and
a pass over the heap: measured with 1 GiB of freed 256 KiB blocks), a dozen of them per main
job, and changes no computed value.

**Within a phase** freed blocks are not given back either: each freed mapped block raises
glibc's mmap threshold to its size, so the next activations of that size come from the heap
and stay resident after the backward that frees them. :func:`set_mmap_threshold`
(``mmap_threshold_kb``) fixes the threshold, which stops the rise: every block above it is
mapped and unmapped when freed. One SFT step on a 2,000-token chat (embedded model, LoRA,
one thread) held 3.77 GB at glibc's rising threshold and 2.48 GB at 1,024 KiB (22.5 → 25.4 s:
each mapping is zero-filled again); with activation checkpointing 1.82 → 0.80 GB
(27.3 → 35.4 s) (``benchmarks/RESULTS.md``, "Memory").

**oneDNN's primitive cache** (:func:`roleagent.models.loading.limit_onednn_cache`, applied by
every model load, at 64 unless the environment sets
``ONEDNN_PRIMITIVE_CACHE_CAPACITY``). On the CPU torch runs matrix products through oneDNN,
which keeps each primitive it built (one per
operation, shape and data type; bf16 ones with their own buffers) in a cache of 1,024 by
default. Prompts of every length give a new shape per prefill, micro-batch and backward, so
the cache fills with primitives that are never used again. The main job shortened
(``benchmarks/bench_memory.py``, bf16) peaked at 3,827 MiB with the default and 3,019 MiB
with 64 (wall 554 s and 555 s, the same SFT loss to every digit); with 0 its SFT ran 5.8×
slower (primitives rebuilt at every call). oneDNN reads the capacity from the environment
when it builds its first primitive, so the cap is set when a model is loaded.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from roleagent.allocator import set_mmap_threshold, trim_heap

__all__ = ["PhaseMemory", "release_memory", "resident_mb", "set_mmap_threshold"]

_STATM = "/proc/self/statm"
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 0.0


def resident_mb() -> float | None:
    """This process's resident set size now, in MiB (None where ``/proc`` is missing)."""
    try:
        with open(_STATM, "rb") as f:
            return int(f.read().split()[1]) * _PAGE_MB
    except (OSError, IndexError, ValueError):
        return None


def release_memory() -> None:
    """Free what only reference cycles hold (``gc.collect``), then give the allocator's free
    heap pages back to the operating system (:func:`roleagent.allocator.trim_heap`)."""
    gc.collect()
    trim_heap()


class PhaseMemory:
    """Start and peak resident memory of named phases; ``with memory.phase("sft"): ...``.

    A phase samples on its own thread, started when it begins and joined when it ends
    (nothing runs between phases, nothing to close). Phases do not nest. With ``release``
    every phase ends with :func:`release_memory`.
    """

    def __init__(self, interval: float = 0.05, *, release: bool = True):
        self.interval = interval
        self.release = release
        self.enabled = resident_mb() is not None
        self._start: dict[str, float] = {}
        self._peak: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        stop, thread = threading.Event(), None
        if self.enabled:
            self._start[name] = resident_mb() or 0.0
            self._peak[name] = max(self._peak.get(name, 0.0), self._start[name])
            thread = threading.Thread(target=self._sample, args=(name, stop), name="roleagent-memory", daemon=True)
            thread.start()
        try:
            yield
        finally:
            if thread is not None:
                stop.set()
                thread.join()
            if self.release:
                release_memory()

    def metrics(self, *names: str) -> dict[str, float]:
        """``memory/<phase>_start_mb`` and ``_peak_mb`` of ``names`` (every phase seen when
        none is named); a reported peak starts again from the next run of its phase."""
        out = {}
        for n in [n for n in (names or tuple(self._peak)) if n in self._peak]:
            out[f"memory/{n}_start_mb"] = round(self._start[n], 1)
            out[f"memory/{n}_peak_mb"] = round(self._peak.pop(n), 1)
        return out

    def _sample(self, name: str, stop: threading.Event) -> None:
        while True:
            now = resident_mb()
            if now is not None:
                self._peak[name] = max(self._peak[name], now)
            if stop.wait(self.interval):  # one last sample after the phase's end is signalled
                now = resident_mb()
                self._peak[name] = max(self._peak[name], now or 0.0)
                return
