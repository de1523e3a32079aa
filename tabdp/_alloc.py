"""The C allocator's settings for a one-shot command (``tabdp run``): keep freed memory.

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

__all__ = ["keep_freed_memory"]

#: ``mallopt`` parameters (glibc's ``malloc.h``).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_SETTINGS = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 256 << 20),
             (_M_TOP_PAD, 64 << 20))


def keep_freed_memory() -> bool:
    """Tell glibc's allocator to keep freed memory for reuse (a command's process only).

    Nothing is changed on another C library or system, or when the environment sets any of
    glibc's ``MALLOC_*`` tunables (the user's settings win).

    Returns:
        Whether the settings were applied.

    Example:
        >>> keep_freed_memory() in (True, False)
        True
    """
    if not sys.platform.startswith("linux") or any(
            k.startswith(("MALLOC_", "GLIBC_TUNABLES")) for k in os.environ):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl has no such symbol)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in _SETTINGS)
