"""The C allocator and tabdp's batches: glibc's heaps serve the arrays a pass allocates.

Two levels, both glibc only (another C library or system is left as it is), and both left
alone when the environment sets any of glibc's ``MALLOC_*`` tunables or ``GLIBC_TUNABLES``
(the user's settings win):

* `warm_heap` (the library, once per process, at its first release): glibc's own dynamic
  threshold raised to its ceiling, as glibc does by itself once a process frees a block of
  32 MiB; no ``mallopt``, nothing switched off.
* `keep_freed_memory` (the command line only): fixed thresholds that keep freed memory, in
  at most `ARENAS` heaps.

The command line also runs Polars' streaming engine in batches of `BATCH_ROWS` rows
(`smaller_batches`, unless ``POLARS_IDEAL_MORSEL_SIZE`` is set): the memory a pass holds
follows the batch.

**keep_freed_memory.**

glibc's ``malloc`` returns freed blocks of 128 KiB and more to the system (its ``mmap``
threshold, raised as blocks are freed, up to 32 MiB) and trims the top of its heaps. A streaming
release allocates the same sizes batch after batch (NumPy's arrays of the per-record
policies, about 1 MB each), so each batch's arrays are fresh pages: at 10 million rows about
400,000 page faults, 0.6 CPU-s of system time. Serving blocks up to 32 MiB from the heaps and
keeping up to 256 MiB free at their tops lets later batches reuse the pages. The peak is the
same (a batch's arrays are freed before the next batch's); memory is not returned until the
process ends, which suits a command, not a library: only the command line sets it.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

__all__ = ["keep_freed_memory", "release_freed_memory", "smaller_batches", "warm_heap"]

#: ``mallopt`` parameters (glibc's ``malloc.h``).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -2, -3, -8
#: At most this many heaps (arenas): each keeps its own freed memory, and every thread that
#: runs a batch function (one per core in Polars' pool) would otherwise get a heap of its own.
ARENAS = 2
_SETTINGS = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 256 << 20),
             (_M_TOP_PAD, 64 << 20), (_M_ARENA_MAX, ARENAS))


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc on a 64-bit Linux and no tunable is set, else None."""
    if (not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8
            or any(k.startswith(("MALLOC_", "GLIBC_TUNABLES")) for k in os.environ)):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl has no such symbol)
    except (OSError, AttributeError):
        return None
    return libc


#: glibc's ceiling of its dynamic ``mmap`` threshold on 64-bit systems
#: (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB): a freed mapped block larger than the threshold and
#: at most this raises the threshold to the block's size, and the trim threshold to twice that.
_DYNAMIC_MAX = 32 << 20
_WARM = threading.Lock()
_warmed: list[bool] = []  # [result] once `warm_heap` ran in this process


def warm_heap() -> bool:
    """Raise glibc's dynamic ``mmap`` threshold to its ceiling, as freeing a 32 MiB block does.

    glibc serves a block of at least its ``mmap`` threshold (128 KiB at start) as a fresh
    mapping, unmapped when freed; freeing such a block of up to 32 MiB raises the threshold
    to that size and the trim threshold (the free memory the heap keeps at its top) to twice
    it. tabdp's passes allocate the same arrays batch after batch (the per-record policies,
    running totals and flags: 0.5–1 MB a batch each), so in a process whose largest freed
    mapped block is about a batch's array, the heap keeps only twice that free at its top and
    each batch's pages are returned and faulted in again, zeroed by the kernel: at
    10 million rows in a fresh process a streaming report took 1.9–2.2 s instead of
    1.6–1.7 (docs/performance.md, "Stop 54"). This
    allocates and frees one block just under 32 MiB, once per process: glibc's own
    adaptation, which any program freeing such an array reaches; no ``mallopt`` parameter
    is set, so glibc keeps adapting. Afterwards blocks below 32 MiB come from the heaps,
    and up to 64 MiB free at a heap's top is kept for reuse rather than returned.

    Nothing is done on another C library or system, when the environment sets a ``MALLOC_*``
    tunable or ``GLIBC_TUNABLES``, or after `keep_freed_memory` (its fixed thresholds hold).

    Returns:
        Whether the block was allocated and freed (this call or an earlier one).

    Example:
        >>> warm_heap() in (True, False)
        True
    """
    with _WARM:
        if _warmed:
            return _warmed[0]
        libc = _glibc()
        done = False
        if libc is not None:
            libc.malloc.argtypes = [ctypes.c_size_t]
            libc.malloc.restype = ctypes.c_void_p
            libc.free.argtypes = [ctypes.c_void_p]
            block = libc.malloc(_DYNAMIC_MAX - (64 << 10))  # its chunk at most 32 MiB
            if block:
                libc.free(block)
                done = True
        _warmed.append(done)
        return done


def keep_freed_memory() -> bool:
    """Tell glibc's allocator to keep freed memory for reuse (a command's process only).

    Blocks up to 32 MiB come from the heaps, each heap keeps up to 256 MiB free at its top
    (64 MiB of padding), and the process has at most `ARENAS` heaps: glibc gives each thread
    that allocates while another holds a heap's lock a heap of its own (up to eight per core),
    so each of Polars' threads running a batch function kept its own freed memory. Nothing is
    changed on another C library or system, or when the environment sets any of
    glibc's ``MALLOC_*`` tunables or ``GLIBC_TUNABLES`` (the user's settings win). Afterwards
    `warm_heap` does nothing.

    Returns:
        Whether the settings were applied.

    Example:
        >>> keep_freed_memory() in (True, False)
        True
    """
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = all(mallopt(param, value) == 1 for param, value in _SETTINGS)
    with _WARM:
        if not _warmed:
            _warmed.append(False)  # the fixed thresholds hold: `warm_heap` does nothing
        if done and not _kept:
            _kept.append(True)
    return done


_kept: list[bool] = []  # [True] once `keep_freed_memory` applied its settings


def release_freed_memory() -> bool:
    """Return the free memory glibc's heaps keep to the system, after `keep_freed_memory`.

    `keep_freed_memory` lets each heap keep up to 256 MiB free, so that a pass's batches reuse
    their pages. Once a pass is over, that memory serves nothing the next steps allocate from
    Polars' own allocator (the row check, the report's Parquet file, the loss statistics'
    reads), yet it stays resident and adds to the process's peak: in 10M-row runs of the
    example spec on a loaded machine, glibc's heaps held 200–350 MB free after the releases'
    pass (docs/performance.md, "Stop 66"). ``malloc_trim(0)`` hands every whole free page of
    every heap back; the next allocations take new pages. Nothing is done unless
    `keep_freed_memory` applied its settings in this process (a command's process; a
    library caller's allocator is left as it is).

    Returns:
        Whether the heaps were trimmed.

    Example:
        >>> release_freed_memory() in (True, False)
        True
    """
    if not _kept:
        return False
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.malloc_trim(0)
    return True


#: Rows of a batch of Polars' streaming engine under the command line (Polars' default:
#: 100,000). The releases' pass holds a few batches per thread at a time (the input's columns,
#: the batch function's per-record arrays); three quarters of the default batch keep a 10M-row
#: ``tabdp run`` of the example spec within 478–489 MB instead of 568–686 MB, for a little
#: more time (each batch has its own fixed work): five alternated pairs on 2026-12-06, medians
#: 9.75 s against 9.06 s (three earlier pairs: 9.82 s against 9.81 s).
BATCH_ROWS = 75_000


def smaller_batches() -> bool:
    """Set Polars' streaming batches to `BATCH_ROWS` rows (a command's process only).

    Polars reads ``POLARS_IDEAL_MORSEL_SIZE`` when its streaming engine first runs; this sets
    it unless the environment already does (the user's setting wins). Every table, noise draw
    and per-record loss is the same at any batch size (the releases' sums are exact and their
    per-record losses computed row by row); only memory and time change.

    Returns:
        Whether the setting was made (False when the environment had one).

    Example:
        >>> import os
        >>> before = os.environ.pop("POLARS_IDEAL_MORSEL_SIZE", None)
        >>> smaller_batches(), os.environ["POLARS_IDEAL_MORSEL_SIZE"]
        (True, '75000')
        >>> smaller_batches()  # set already: left as it is
        False
        >>> del os.environ["POLARS_IDEAL_MORSEL_SIZE"]
        >>> if before is not None:
        ...     os.environ["POLARS_IDEAL_MORSEL_SIZE"] = before
    """
    if "POLARS_IDEAL_MORSEL_SIZE" in os.environ:  # (even empty: Polars' default then)
        return False
    os.environ["POLARS_IDEAL_MORSEL_SIZE"] = str(BATCH_ROWS)
    return True
