"""Per-phase resident memory (roleagent.trainer.memory): a phase's peak is what it held at
once, seen by the sampling thread even when freed before the phase ends, and a phase gives
freed heap pages back."""

import os
import subprocess
import sys
import threading
import time

import pytest

from roleagent.models import loading
from roleagent.trainer import memory as mem
from roleagent.trainer.memory import PhaseMemory, resident_mb

linux = pytest.mark.skipif(resident_mb() is None, reason="needs /proc/self/statm")


def _touch(mib: int) -> bytearray:
    buf = bytearray(mib * 2**20)
    buf[::4096] = b"x" * len(buf[::4096])  # resident, not just reserved
    return buf


@linux
def test_a_buffer_freed_inside_the_phase_still_shows_in_its_peak():
    memory = PhaseMemory(interval=0.01)
    with memory.phase("work"):
        buf = _touch(200)
        time.sleep(0.2)  # the thread samples it
        del buf  # gone before the phase ends: only the thread saw it
    with memory.phase("idle"):
        time.sleep(0.05)
    m = memory.metrics()
    assert m["memory/work_peak_mb"] - m["memory/work_start_mb"] >= 150
    assert m["memory/idle_peak_mb"] - m["memory/idle_start_mb"] < 50
    assert m["memory/idle_start_mb"] < m["memory/work_peak_mb"] - 150  # the buffer was returned
    assert not any(t.name == "roleagent-memory" for t in threading.enumerate())  # no thread between phases


@linux
def test_a_reported_peak_starts_again_and_unseen_phases_are_left_out():
    memory = PhaseMemory(interval=0.01)
    with memory.phase("a"):
        buf = _touch(200)
        time.sleep(0.05)
        del buf
    first = memory.metrics("a", "never")
    with memory.phase("a"):
        time.sleep(0.05)
    second = memory.metrics("a")
    assert memory.metrics("a") == {}  # nothing ran since the last report
    assert set(first) == {"memory/a_start_mb", "memory/a_peak_mb"}
    assert second["memory/a_peak_mb"] < first["memory/a_peak_mb"] - 150


def test_without_proc_nothing_is_sampled(monkeypatch):
    monkeypatch.setattr(mem, "resident_mb", lambda: None)
    memory = PhaseMemory()
    with memory.phase("a"):
        pass
    assert memory.metrics() == {}


@linux
def test_a_phase_gives_freed_heap_pages_back():
    """Many blocks below glibc's mmap threshold, freed: the allocator keeps their pages
    until the phase's release_memory (what a store of prefix KVs leaves behind)."""
    import torch

    big = torch.ones(2**21)
    del big  # an 8 MiB block freed: glibc's mmap threshold rises to 8 MiB
    for release, check in ((False, lambda freed: freed < 100), (True, lambda freed: freed > 150)):
        memory = PhaseMemory(release=release)
        with memory.phase("a"):
            blocks = [torch.ones(64 * 1024) for _ in range(1000)]  # 1000 x 256 KiB on the heap
            last = blocks.pop()  # still held: the freed blocks below it cannot shrink the heap's top
            before = resident_mb()
            del blocks
        freed = before - resident_mb()
        del last
        assert check(freed), (release, freed)


FREED_AFTER_RISE = """
import sys, torch
from roleagent.trainer.memory import resident_mb, set_mmap_threshold
was_set = set_mmap_threshold(int(sys.argv[1]))
big = torch.ones(2**21)
del big  # an 8 MiB mapped block freed: at glibc's default the threshold rises to 8 MiB
blocks = [torch.ones(2**20) for _ in range(100)]  # 100 x 4 MiB: below a risen threshold, on the heap
last = blocks.pop()  # still held: the freed blocks below it cannot shrink the heap's top
before = resident_mb()
del blocks
print(was_set, before - resident_mb())
"""


@linux
@pytest.mark.parametrize("kib", [0, 1024])
def test_a_fixed_mmap_threshold_gives_freed_activations_back_at_once(kib):
    """mmap_threshold_kb: with glibc's rising threshold, 4 MiB blocks freed after an 8 MiB one
    stay resident; with the threshold fixed at 1 MiB they are unmapped when freed (a fresh
    process: the setting is process-wide)."""
    out = subprocess.run([sys.executable, "-c", FREED_AFTER_RISE, str(kib)], capture_output=True, text=True, check=True)
    was_set, freed = out.stdout.split()
    assert was_set == str(kib > 0)
    assert float(freed) > 300 if kib else float(freed) < 100, out.stdout


def test_the_onednn_cache_cap_goes_to_the_environment_unless_it_is_set(monkeypatch):
    """oneDNN reads ONEDNN_PRIMITIVE_CACHE_CAPACITY when it builds its first primitive; every
    model load writes the cap there before the model runs, never over a value the user set."""
    name = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
    monkeypatch.delenv(name, raising=False)
    loading.load_policy("tiny", device="cpu")
    assert os.environ[name] == str(loading.ONEDNN_CACHE) == "64"
    monkeypatch.setenv(name, "1024")
    assert not loading.limit_onednn_cache() and os.environ[name] == "1024"
