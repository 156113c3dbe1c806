"""glibc's allocator, from Python: give free heap pages back, fix the mmap threshold.

On Linux torch's CPU tensors come from glibc's ``malloc``. Blocks below its mmap threshold
(which rises to 32 MiB as larger blocks are freed) are carved from heaps whose freed pages
stay resident until ``malloc_trim`` hands them back. A run's prefills free activations of a
new size at every call, so without trims a process holds far more than it uses
(``roleagent.trainer.memory``'s docstring; ``benchmarks/RESULTS.md``, "Memory" and "bf16 on
the CPU"). Elsewhere (macOS, Windows, musl) both functions do nothing.

- :func:`trim_heap`: ``malloc_trim(0)``, every free page of every heap back to the system.
  It changes no value and costs a pass over the heap: 12 rollout-like turns of 16 rows
  (24 engine calls, bf16) spent 1.35 s in it of 345 s, and peaked at 2,311 MB against
  3,309 without it, side by side (``hf_engine.trim_heap``).
- :func:`set_mmap_threshold`: every block of at least that size is mapped, and unmapped when
  freed. The same turns peaked at 1,628 MB with 4 MiB, but took 1.28× as long: each mapped
  block is zero-filled again (``mmap_threshold_kb``).
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["set_mmap_threshold", "trim_heap"]


def _libc(name: str):
    """glibc's function ``name`` (None on another C library)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


_TRIM, _MALLOPT = _libc("malloc_trim"), _libc("mallopt")
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def trim_heap() -> bool:
    """Give every free heap page back to the system (glibc ``malloc_trim(0)``); True when
    glibc did (False on another C library)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def set_mmap_threshold(kib: int) -> bool:
    """Fix glibc's mmap threshold at ``kib`` KiB; 0 leaves glibc's rising default. True
    when it was set (False for 0 or on another C library)."""
    if not kib or _MALLOPT is None:
        return False
    return bool(_MALLOPT(_M_MMAP_THRESHOLD, int(kib) * 1024))
