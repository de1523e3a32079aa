"""Histogram bins of the reports' figures, without matplotlib.

The confidential report counts its per-record losses into these bins while it reads them (during
the release, before any figure is drawn); `tabdp.plotting` draws the counts. Kept apart so a
release imports matplotlib only when it renders its HTML pages, after the data's pass: its
figures' library is not resident while the release holds the data.
"""

from __future__ import annotations

import math
import sys

import numpy as np

__all__ = ["histogram_edges", "histogram_bin_index"]


def histogram_edges(n: int, lo: float, hi: float, *, log_x: bool = True) -> np.ndarray:
    """Bin edges of `histogram_svg` for ``n`` shown values between ``lo`` and ``hi``.

    Args:
        n: Number of values shown (finite; with ``log_x`` also > 0). At least 1.
        lo: Smallest shown value.
        hi: Largest shown value.
        log_x: Logarithmic bins.

    Returns:
        The ``nb + 1`` edges, ``nb = min(60, max(10, round(2 √n)))``: geometric with ``log_x``
        (widened by a factor 1.5 each side when all values are equal), else linear (widened by
        0.5).

    Example:
        >>> e = histogram_edges(100, 1.0, 1e4)
        >>> e.size, float(e[0]), float(e[-1])
        (21, 1.0, 10000.0)
    """
    nb = int(min(60, max(10, round(2 * math.sqrt(n)))))
    if log_x:
        if hi <= lo:  # (within the doubles: the largest one is not widened past them)
            lo, hi = lo / 1.5, min(hi * 1.5, sys.float_info.max)
        # (numpy's power can round the top edge past the largest double before geomspace
        # puts the given end in place: no warning, and no edge above ``hi``)
        with np.errstate(over="ignore"):
            edges = np.geomspace(lo, hi, nb + 1)
        return np.minimum(edges, hi)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    if not math.isfinite(hi - lo):  # the span overflows: spaced at half scale, doubled (exact)
        return np.linspace(lo / 2, hi / 2, nb + 1) * 2
    return np.linspace(lo, hi, nb + 1)


def histogram_bin_index(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value as `numpy.histogram` counts it (last bin closed), -1 outside.

    Args:
        values: The values.
        edges: Increasing bin edges.

    Returns:
        One int64 index per value: ``i`` with ``edges[i] <= v < edges[i + 1]`` (``v ==
        edges[-1]`` in the last bin); -1 for values outside the edges or NaN.

    Example:
        >>> import numpy as np
        >>> histogram_bin_index(np.array([0.5, 1.0, 1.5, 2.0, 3.0]), np.array([1.0, 2.0])
        ...                     ).tolist()
        [-1, 0, 0, 0, -1]
    """
    v = np.asarray(values, dtype=np.float64)
    e = np.asarray(edges, dtype=np.float64)
    idx = np.searchsorted(e, v, side="right").astype(np.int64) - 1
    idx[v == e[-1]] = e.size - 2
    idx[(idx < 0) | (idx > e.size - 2) | np.isnan(v)] = -1
    return idx
