"""glibc's heap and tabdp's batches (`tabdp._alloc`): what the library and the command change.

The settings are process-wide, so each case runs in a fresh interpreter. Whether glibc served a
block from a mapping of its own is read from ``mallinfo2`` (``hblks``: blocks mapped now).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import polars as pl
import pytest

import tabdp
import tabdp.frame.pipeline as pipeline

_GLIBC = sys.platform.startswith("linux") and "glibc" in " ".join(
    __import__("platform").libc_ver())

#: Prints whether a 31 MiB block (just under glibc's 32 MiB ceiling) is mapped (``hblks`` up
#: while it is held), after ``SETUP``: only a threshold raised to the ceiling serves it from
#: the heap.
_PROBE = """
import ctypes
from tabdp import _alloc
libc = ctypes.CDLL(None)
class M(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = M
libc.malloc.argtypes = [ctypes.c_size_t]; libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
result = SETUP
before = libc.mallinfo2().hblks
block = libc.malloc(31 << 20)
mapped = libc.mallinfo2().hblks > before
libc.free(block)
print(result, mapped)
"""


def _probe(setup: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    out = subprocess.run([sys.executable, "-c", _PROBE.replace("SETUP", setup)],
                         env={**base, **env}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not _GLIBC, reason="glibc's allocator")
def test_warm_heap_serves_blocks_below_32_mib_from_the_heap() -> None:
    """After `warm_heap` a 31 MiB block is not a mapping of its own; before it, it is."""
    assert _probe("None") == "None True"  # glibc's start: 128 KiB threshold, blocks mapped
    assert _probe("_alloc.warm_heap()") == "True False"
    # once per process: a second call answers as the first, allocating nothing
    assert _probe("(_alloc.warm_heap(), _alloc.warm_heap())[1]") == "True False"


@pytest.mark.skipif(not _GLIBC, reason="glibc's allocator")
@pytest.mark.parametrize("var", ["MALLOC_ARENA_MAX", "GLIBC_TUNABLES"])
def test_warm_heap_leaves_a_tuned_allocator_alone(var: str) -> None:
    """An environment that tunes glibc's malloc keeps its allocator as the user set it."""
    value = "glibc.malloc.arena_max=2" if var == "GLIBC_TUNABLES" else "2"
    assert _probe("_alloc.warm_heap()", **{var: value}) == "False True"


#: Prints, after ``SETUP``, how many heaps glibc has once 6 threads allocate at the same time
#: (``malloc_stats`` writes one "Arena" section per heap to standard error).
_ARENAS = """
import ctypes, os, sys, threading
from tabdp import _alloc
libc = ctypes.CDLL(None)
libc.malloc.argtypes = [ctypes.c_size_t]; libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
SETUP
start, held = threading.Barrier(6), threading.Barrier(6)
def work():
    start.wait()
    blocks = [libc.malloc(4096) for _ in range(20000)]
    held.wait()
    for b in blocks:
        libc.free(b)
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
sys.stderr.flush()
libc.malloc_stats()
"""


def _heaps(setup: str) -> int:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    out = subprocess.run([sys.executable, "-c", _ARENAS.replace("SETUP", setup)], env=base,
                         capture_output=True, text=True, check=True)
    return sum(line.startswith("Arena ") for line in out.stderr.splitlines())


@pytest.mark.skipif(not _GLIBC, reason="glibc's allocator")
def test_the_commands_setting_caps_the_heaps_that_keep_freed_memory() -> None:
    """`keep_freed_memory` caps the heaps at `ARENAS`; threads allocating at once share them.

    Each heap keeps up to 256 MiB free under the command's thresholds, and glibc gives a
    thread that finds every heap locked a heap of its own (up to eight per core): a 10M-row
    `tabdp run` peaked at 0.64-1.24 GB without the cap (5 runs), 0.59-0.70 GB with it (3).
    """
    from tabdp import _alloc

    assert _heaps("_alloc.keep_freed_memory()") <= _alloc.ARENAS
    # glibc's own: more heaps than the cap (7 in every run here; threads that never meet in
    # malloc would share one, so the probe is tried three times)
    assert max(_heaps("") for _ in range(3)) > _alloc.ARENAS


@pytest.mark.skipif(not _GLIBC, reason="glibc's allocator")
def test_warm_heap_after_the_commands_fixed_thresholds_does_nothing() -> None:
    """`keep_freed_memory` (the command line) sets fixed thresholds: warm_heap changes none."""
    assert _probe("(_alloc.keep_freed_memory(), _alloc.warm_heap())") == "(True, False) False"


def test_warm_heap_allocates_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """One block just under 32 MiB, however many releases (and threads) call it."""
    from tabdp import _alloc

    sizes: list[int] = []

    def malloc(size: int) -> int:
        sizes.append(size)
        return 1

    class _Libc:  # the two C functions `warm_heap` calls (it sets their ctypes signatures)
        def __init__(self) -> None:
            self.malloc: Any = malloc
            self.free: Any = lambda ptr: None

    monkeypatch.setattr(_alloc, "_warmed", [])
    monkeypatch.setattr(_alloc, "_glibc", _Libc)
    import threading

    threads = [threading.Thread(target=_alloc.warm_heap) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _alloc.warm_heap() is True
    assert sizes == [(32 << 20) - (64 << 10)]


def test_warm_heap_on_another_system_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """No glibc (another system or C library): nothing is allocated, the answer is False."""
    from tabdp import _alloc

    monkeypatch.setattr(_alloc, "_warmed", [])
    monkeypatch.setattr(_alloc.sys, "platform", "darwin")
    assert _alloc.warm_heap() is False
    assert _alloc._warmed == [False]


@pytest.mark.parametrize("kind", ["count", "median"])
def test_every_release_warms_the_heap_first(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """The one pipeline calls `warm_heap` before a release's engine work (counts, medians)."""
    calls: list[str] = []

    def warm() -> bool:
        calls.append("warm")
        return True

    monkeypatch.setattr(pipeline, "warm_heap", warm)
    s = tabdp.Session(seed=1)
    df = pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]})
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    if kind == "count":
        df.dp.count(by="c", keys=keys, session=s)
    else:
        df.dp.median("x", by="c", keys=keys, bounds=(0, 10), epsilon=1.0, session=s)
    assert calls == ["warm"]


#: Prints what `release_freed_memory` returned and the resident memory (MiB) it gave back,
#: after ``SETUP`` with 200 MiB of 1 MiB blocks freed below a block still held (as a pass
#: leaves its heaps: free pages between live blocks, which glibc never trims by itself).
_TRIM = """
import ctypes
from tabdp import _alloc
libc = ctypes.CDLL(None)
libc.malloc.argtypes = [ctypes.c_size_t]; libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    with open('/proc/self/status') as f:
        return next(int(x.split()[1]) for x in f if x.startswith('VmRSS:')) >> 10
SETUP
blocks = [libc.malloc(1 << 20) for _ in range(200)]
guard = libc.malloc(4 << 20)  # held above them: the heap's top cannot shrink past it
for b in blocks:
    ctypes.memset(b, 1, 1 << 20)
for b in blocks:
    libc.free(b)
kept = rss()
done = _alloc.release_freed_memory()
print(done, kept - rss())
"""


@pytest.mark.skipif(not _GLIBC, reason="glibc's allocator")
def test_release_freed_memory_returns_what_the_commands_heaps_keep() -> None:
    """After `keep_freed_memory` freed blocks stay resident until `release_freed_memory`."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}

    def run(setup: str) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", _TRIM.replace("SETUP", setup)], env=base,
                             capture_output=True, text=True, check=True).stdout.split()
        return out[0], int(out[1])

    done, freed = run("_alloc.keep_freed_memory()")
    assert done == "True" and freed >= 150  # the 200 MiB kept by the heap, given back
    # a library caller's process (no keep_freed_memory): its allocator is left as it is
    done, _ = run("")
    assert done == "False"
