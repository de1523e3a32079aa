"""Each cell's exact clipped quantile and floored smooth sensitivity, in NumPy (no noise).

The one computation of every engine's medians and quantiles (`cell_quantiles`): the Polars
engine calls it on a release's cells, Spark's Python workers (`tabdp._spark_worker`) on one cell
per group. It lives apart from `tabdp.frame._quantiles` (which re-exports its names) so that a
Spark worker unpickling the per-cell function imports NumPy and `tabdp.sensitivity.smooth`, not
Polars and tabdp's frame engine.

Example:
    >>> t, ss, n = cell_quantiles(np.array([0, 1]), np.array([3.0, 4.0]), 2, 0.5, 1.0, (0.0, 10.0))
    >>> t.tolist(), n
    ([3.0, 4.0], 0)
"""

from __future__ import annotations

import numpy as np

from tabdp.sensitivity.smooth import group_sort, grouped_quantile, smooth_sensitivity_grouped

__all__ = ["SS_FLOOR", "ss_floor", "floored_smooth_sensitivity", "cell_quantiles"]

#: Smooth sensitivities are floored at SS_FLOOR·max(hi − lo, |lo|, |hi|). max(SS, c) is still a
#: γ-smooth upper bound for a public constant c, so the guarantee is unchanged; the floor prevents
#: SS from underflowing to 0 (and the value being released without noise) in huge, tightly packed
#: cells. It is relative to the magnitude of the bounds, not only to their span, so that the noise
#: is not lost to rounding when the bounds are narrow and far from 0 (e.g. (1e9, 1e9 + 1)).
SS_FLOOR = 1e-12


def ss_floor(bounds: tuple[float, float]) -> float:
    """The public floor of the smooth sensitivities: ``SS_FLOOR·max(hi − lo, |lo|, |hi|)``.

    Args:
        bounds: Public ``(lo, hi)``.

    Returns:
        The floor (> 0 for lo < hi).

    Example:
        >>> ss_floor((0.0, 1e9)), ss_floor((1e9, 1e9 + 1.0))
        (0.001, 0.001000000001)
    """
    lo, hi = bounds
    return SS_FLOOR * max(hi - lo, abs(lo), abs(hi))


def floored_smooth_sensitivity(sorted_values: np.ndarray, offsets: np.ndarray, q: float,
                               gamma: float, bounds: tuple[float, float]) -> np.ndarray:
    """The SS a quantile release uses: the γ-smooth sensitivity, floored at `ss_floor`.

    ``max(SS, c)`` is γ-smooth like SS: between neighbouring datasets its logarithm changes by
    at most γ (what the private noise-scale estimate relies on), and it lies in
    ``[floor, max(hi − lo, floor)]`` for any data.

    Args:
        sorted_values: Values sorted inside each cell
            ([`group_sort`][tabdp.sensitivity.group_sort]).
        offsets: Cell boundaries.
        q: Quantile level.
        gamma: Smoothness γ.
        bounds: Public ``(lo, hi)``.

    Returns:
        One SS per cell.

    Example:
        >>> v, off = group_sort([1.0, 2.0, 3.0], [0, 0, 0], 2)
        >>> [round(float(x), 4) for x in floored_smooth_sensitivity(v, off, 0.5, 1.0, (0, 10))]
        [2.943, 10.0]
    """
    ss = smooth_sensitivity_grouped(sorted_values, offsets, q, gamma, bounds)
    return np.maximum(ss, ss_floor(bounds))


def cell_quantiles(codes: np.ndarray, values: np.ndarray, n_keys: int, q: float,
                   gamma: float, bounds: tuple[float, float]
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """Each cell's exact clipped quantile and floored smooth sensitivity (no noise).

    The one computation of every engine: values clipped to the public bounds, sorted inside
    their cell, the order statistic of rank ``quantile_rank(n, q)`` and the γ-smooth
    sensitivity floored at `ss_floor` (an empty cell gets the empty cell's values).

    Args:
        codes: Each value's cell (its position in the key set).
        values: The admitted values (missing ones replaced by the nulls rule).
        n_keys: Cells in the key set.
        q: Quantile level.
        gamma: Smoothness γ.
        bounds: Public ``(lo, hi)``.

    Returns:
        ``(truth, ss, clipped)``: one quantile and one SS per cell, and the CONFIDENTIAL
        number of values outside the bounds.

    Example:
        >>> t, ss, n = cell_quantiles(np.array([0, 0, 0]), np.array([1.0, 2.0, 30.0]), 2, 0.5,
        ...                           1.0, (0.0, 10.0))
        >>> t.tolist(), n
        ([2.0, 0.0], 1)
    """
    lo, hi = bounds
    clipped = int(((values < lo) | (values > hi)).sum())
    sorted_vals, offsets = group_sort(np.clip(values, lo, hi), codes, n_keys)
    truth = grouped_quantile(sorted_vals, offsets, q, (lo, hi))
    ss = floored_smooth_sensitivity(sorted_vals, offsets, q, gamma, (lo, hi))
    return truth, ss, clipped
