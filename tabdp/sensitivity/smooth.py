"""γ-smooth sensitivity of order statistics (medians, quantiles) on a public range.

Neighbouring datasets here are **replacement** neighbours: the group size n is fixed and one value
is changed (Nissim–Raskhodnikova–Smith, docs/math/smooth.md §1; distance = number of changed
values). Values are clipped to the public bounds ``[lo, hi]``, sorted as ``x₁ ≤ … ≤ xₙ`` and padded
with ``x_i = lo`` for ``i < 1`` and ``x_i = hi`` for ``i > n``. For the order statistic of rank
``m`` ([`quantile_rank`][tabdp.sensitivity.quantile_rank]) the smooth sensitivity is

    SS = max_{k ≥ 0} e^{−kγ} · max_{t = 0..k+1} (x_{m+t} − x_{m+t−k−1})
       = max_{a ≤ m ≤ b} (x_b − x_a) · e^{−γ(b − a − 1)},      0 ≤ a, b ≤ n + 1.

The k = 0 term is the local sensitivity ``max(x_m − x_{m−1}, x_{m+1} − x_m)``. The maximum is
computed without the O(n²) double loop: the best b is a non-decreasing function of a (the objective
has the Monge property because x is sorted), so a divide-and-conquer over a finds it in
O(n log n), and pairs with cost ``b − a − 1 ≥ ln((hi − lo)/L)/γ`` are skipped up front, where L is a
cheap lower bound on SS (local sensitivity and the two padded pairs). All groups are processed
together, level by level, in vectorized numpy.

The results are exact (to rounding) γ-smooth sensitivities: SS(D′)/SS(D) ∈ [e^{−γ}, e^{γ}] for
neighbours and ``|q(D) − q(D′)| ≤ min(SS(D), SS(D′))``, the two properties the smooth-sensitivity
mechanisms need (tested against brute force over all neighbours in
``tests/sensitivity/test_smooth_sensitivity.py``).

**Add/remove neighbours.** The same function also has both properties when D′ = D ∪ {y} (the
project's neighbour relation), because the rank satisfies ``r(n+1) − r(n) ∈ {0, 1}``: the padded
order statistics of D′ interleave those of D (``x′_i ∈ [x_{i−1}, x_i]``), so an optimal pair
(a, b) of D gives the pair (a, b+1) of D′ and an optimal pair (a′, b′) of D′ gives (a′−1, b′) of
D, each at one more step of cost (ratio within e^{±γ}); and ``q(D′)`` lies within the gap
``[x_{m−1}, x_m]`` or ``[x_m, x_{m+1}]`` of D that enters SS(D), and q(D) within the gap of D′
around its rank that enters SS(D′). (For n = 0, q(∅) = lo and SS(∅) = hi − lo.) This is checked
exhaustively on a grid in the tests.

Empty groups (n = 0) use rank 0, so their quantile is the padded ``x₀ = lo`` and their smooth
sensitivity is ``hi − lo`` (the padded formula).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp._validation import check_real
from tabdp.exceptions import DataValidationError, InvalidParameterError

__all__ = [
    "quantile_rank",
    "grouped_quantile",
    "group_sort",
    "smooth_sensitivity_grouped",
    "smooth_sensitivity_quantile",
    "smooth_sensitivity_median",
]

#: Quantile levels are read as the nearest fraction with at most this denominator (exact for
#: decimals with up to six digits, e.g. 0.9, 0.25, 0.07, 0.123456).
_Q_DENOMINATOR = 10**6


# -- parameters ---------------------------------------------------------------------------------
def _check_q(q: Any, owner: str) -> Fraction:
    qf = check_real("q", q, owner=owner, ge=0.0, le=1.0,
                    hint="q is the quantile level, e.g. q=0.5 for the median, q=0.9")
    return Fraction(repr(qf)).limit_denominator(_Q_DENOMINATOR)


def _check_gamma(gamma: Any, owner: str) -> float:
    return check_real("gamma", gamma, owner=owner, gt=0.0,
                      hint="gamma is the smoothness parameter, 0 < gamma < epsilon; e.g. "
                           "gamma = epsilon/10 (see tabdp.mechanisms.smooth.choose_gamma)")


def check_bounds(bounds: Any, owner: str) -> tuple[float, float]:
    """Check public bounds ``(lo, hi)``: finite numbers with ``lo <= hi``.

    Args:
        bounds: The pair given.
        owner: The caller, named in error messages.

    Returns:
        ``(lo, hi)`` as floats.

    Raises:
        InvalidParameterError: If ``bounds`` is not such a pair.

    Example:
        >>> check_bounds((0, 10), "median")
        (0.0, 10.0)
    """
    try:
        lo_raw, hi_raw = bounds
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"{owner}: bounds must be a pair (lo, hi) of finite numbers with lo <= hi; got "
            f"{bounds!r}.\nHint: pass public bounds such as bounds=(0.0, 1e9); never derive them "
            "from the data.") from None
    lo = check_real("bounds[0] (lo)", lo_raw, owner=owner,
                    hint="pass public bounds such as bounds=(0.0, 1e9)")
    hi = check_real("bounds[1] (hi)", hi_raw, owner=owner, ge=lo,
                    hint="the upper bound must be >= the lower bound, e.g. bounds=(0.0, 1e9)")
    return lo, hi


def quantile_rank(n: ArrayLike, q: float) -> np.ndarray:
    """Rank (1-based order statistic) of the q-quantile of n values: ``clip(⌈q·n⌉, 1, n)``.

    This is the lower ("inverted CDF") quantile: for q = 0.5 it is ``⌈n/2⌉``, the median for odd n
    and the lower median for even n; q = 0 is the minimum and q = 1 the maximum. ``q·n`` is
    evaluated exactly with q read as a decimal fraction (so 0.07·100 gives rank 7, not 8). For
    n = 0 the rank is 0, i.e. the padded value ``x₀ = lo``.

    Args:
        n: Group sizes (int or array of ints ≥ 0).
        q: Quantile level in [0, 1].

    Returns:
        int64 ranks, shaped like ``n``.

    Raises:
        InvalidParameterError: If q is outside [0, 1] or some n is negative.

    Example:
        >>> quantile_rank([0, 1, 4, 5, 100], 0.5).tolist()
        [0, 1, 2, 3, 50]
        >>> int(quantile_rank(100, 0.07)), int(quantile_rank(10, 0.9)), int(quantile_rank(10, 0.0))
        (7, 9, 1)
    """
    qf = _check_q(q, "quantile_rank")
    nn = np.asarray(n)
    if nn.size and (not np.issubdtype(nn.dtype, np.integer) and not np.all(nn == np.floor(nn))):
        raise InvalidParameterError(f"quantile_rank: n must hold whole numbers; got {n!r}.")
    nn = nn.astype(np.int64)
    if np.any(nn < 0):
        raise InvalidParameterError(f"quantile_rank: n must be >= 0; got {n!r}.")
    num, den = qf.numerator, qf.denominator
    r = -((-num * nn) // den)  # ⌈num·n/den⌉ in integers
    return np.where(nn > 0, np.clip(r, 1, np.maximum(nn, 1)), 0).astype(np.int64)


# -- grouped data -------------------------------------------------------------------------------
def group_sort(values: ArrayLike, codes: ArrayLike, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort values within groups: returns ``(sorted_values, offsets)`` for the grouped functions.

    Args:
        values: Values (any order).
        codes: Group code of each value, integers in ``[0, n_groups)``.
        n_groups: Number of groups (groups without values are empty).

    Returns:
        ``sorted_values`` (grouped by code, ascending inside each group) and ``offsets`` of
        length ``n_groups + 1``: group g is ``sorted_values[offsets[g]:offsets[g+1]]``.

    Raises:
        InvalidParameterError: If shapes differ or a code is out of range.

    Example:
        >>> v, off = group_sort([5.0, 1.0, 3.0, 2.0], [1, 0, 1, 1], 3)
        >>> v.tolist(), off.tolist()
        ([1.0, 2.0, 3.0, 5.0], [0, 1, 4, 4])
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    c = np.asarray(codes).reshape(-1)
    if c.shape != x.shape:
        raise InvalidParameterError(
            f"group_sort: values and codes must have the same length; got {x.size} and {c.size}.")
    g = int(n_groups)
    if c.size and (np.min(c) < 0 or np.max(c) >= g):
        raise InvalidParameterError(
            f"group_sort: codes must lie in [0, {g}); got range [{np.min(c)}, {np.max(c)}].")
    order = np.lexsort((x, c))
    counts = np.bincount(c.astype(np.int64), minlength=g) if c.size else np.zeros(g, np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return x[order], offsets


def _prepare_grouped(sorted_values: ArrayLike, offsets: ArrayLike, lo: float, hi: float,
                     owner: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(sorted_values, dtype=np.float64).reshape(-1)
    off = np.asarray(offsets)
    if off.ndim != 1 or off.size < 1 or not np.issubdtype(off.dtype, np.integer):
        raise InvalidParameterError(
            f"{owner}: offsets must be a 1-D integer array [0, ..., len(sorted_values)]; got "
            f"{offsets!r}.\nHint: build (sorted_values, offsets) with "
            "tabdp.sensitivity.group_sort.")
    off = off.astype(np.int64)
    if off[0] != 0 or off[-1] != x.size or np.any(np.diff(off) < 0):
        raise InvalidParameterError(
            f"{owner}: offsets must start at 0, be non-decreasing and end at "
            f"len(sorted_values) = {x.size}; got {off[:3].tolist()}...{off[-2:].tolist()}.\n"
            "Hint: build (sorted_values, offsets) with tabdp.sensitivity.group_sort.")
    if not np.all(np.isfinite(x)):
        bad = int((~np.isfinite(x)).sum())
        raise DataValidationError(
            f"{owner}: {bad} value(s) are NaN or infinite.\nHint: drop or impute them before "
            "computing medians or quantiles.")
    if x.size > 1:
        inside = np.ones(x.size - 1, dtype=bool)
        starts = off[1:-1]
        starts = starts[(starts > 0) & (starts < x.size)]
        inside[starts - 1] = False  # a new group may start lower
        if np.any(np.diff(x)[inside] < 0):
            raise InvalidParameterError(
                f"{owner}: sorted_values must be sorted ascending inside each group.\n"
                "Hint: build (sorted_values, offsets) with tabdp.sensitivity.group_sort.")
    return np.clip(x, lo, hi), off


class _Padded:
    """Padded order statistics ``x(g, i)`` of many groups (lo for i < 1, hi for i > n_g)."""

    def __init__(self, x: np.ndarray, off: np.ndarray, lo: float, hi: float) -> None:
        self.ext = np.append(x, hi)  # a valid index even for an empty last group
        self.start = off[:-1]
        self.n = np.diff(off)
        self.lo, self.hi = lo, hi

    def __call__(self, g: np.ndarray, i: np.ndarray) -> np.ndarray:
        n = self.n[g]
        idx = self.start[g] + np.clip(i - 1, 0, np.maximum(n - 1, 0))
        v = self.ext[np.minimum(idx, self.ext.size - 1)]
        return np.where(i < 1, self.lo, np.where(i > n, self.hi, v))


def grouped_quantile(sorted_values: ArrayLike, offsets: ArrayLike, q: float,
                     bounds: tuple[float, float]) -> np.ndarray:
    """The q-quantile (padded order statistic of rank `quantile_rank`) of every group.

    Values are clipped to ``bounds`` first; an empty group gets ``lo`` (the padded ``x₀``).

    Args:
        sorted_values: Values sorted ascending inside each group (see
            [`group_sort`][tabdp.sensitivity.group_sort]).
        offsets: Group boundaries, length ``n_groups + 1``.
        q: Quantile level in [0, 1] (0.5: lower median).
        bounds: Public range ``(lo, hi)``.

    Returns:
        One value per group.

    Example:
        >>> grouped_quantile([1.0, 2.0, 3.0, 4.0, 9.0], [0, 0, 2, 5], 0.5, (0.0, 5.0)).tolist()
        [0.0, 1.0, 4.0]
    """
    owner = "grouped_quantile"
    _check_q(q, owner)
    lo, hi = check_bounds(bounds, owner)
    x, off = _prepare_grouped(sorted_values, offsets, lo, hi, owner)
    pad = _Padded(x, off, lo, hi)
    g = np.arange(off.size - 1)
    return pad(g, quantile_rank(pad.n, q)).astype(np.float64)


def smooth_sensitivity_grouped(sorted_values: ArrayLike, offsets: ArrayLike, q: float,
                               gamma: float, bounds: tuple[float, float]) -> np.ndarray:
    """γ-smooth sensitivity of the q-quantile of every group, all groups at once (replacement).

    Runs in O(n log n) over all values (divide and conquer on the monotone optimal pair, with the
    early stop ``e^{−kγ}(hi − lo) ≤`` a lower bound on SS applied before the search).

    Args:
        sorted_values: Values sorted ascending inside each group (see
            [`group_sort`][tabdp.sensitivity.group_sort]).
        offsets: Group boundaries, length ``n_groups + 1`` (empty groups allowed).
        q: Quantile level in [0, 1] (0.5: lower median), see
            [`quantile_rank`][tabdp.sensitivity.quantile_rank].
        gamma: Smoothness γ > 0.
        bounds: Public range ``(lo, hi)``; values are clipped to it.

    Returns:
        SS per group (float64); ``hi − lo`` for an empty group.

    Raises:
        InvalidParameterError: For bad parameters or unsorted groups.
        DataValidationError: For NaN or infinite values.

    Example:
        >>> vals, off = group_sort([3.0, 1.0, 2.0, 50.0, 51.0, 52.0, 53.0],
        ...                        [0, 0, 0, 1, 1, 1, 1], 3)
        >>> ss = smooth_sensitivity_grouped(vals, off, 0.5, 1.0, (0.0, 100.0))
        >>> [round(float(v), 4) for v in ss]      # the empty group gets hi − lo
        [36.0522, 18.7619, 100.0]
    """
    owner = "smooth_sensitivity_grouped"
    _check_q(q, owner)
    gamma = _check_gamma(gamma, owner)
    lo, hi = check_bounds(bounds, owner)
    x, off = _prepare_grouped(sorted_values, offsets, lo, hi, owner)
    n_groups = off.size - 1
    out = np.zeros(n_groups, dtype=np.float64)
    span = hi - lo
    if n_groups == 0 or span <= 0.0:
        return out
    pad = _Padded(x, off, lo, hi)
    n = pad.n
    m = quantile_rank(n, q)
    g_all = np.arange(n_groups)

    def value(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        cost = np.maximum(b - a - 1, 0).astype(np.float64)  # b = a (gap 0) would give −1
        with np.errstate(under="ignore"):
            return (pad(g, b) - pad(g, a)) * np.exp(-gamma * cost)

    # Lower bound L from feasible pairs: the local sensitivity (m−1, m), (m, m+1) and the padded
    # pairs (0, m), (m, n+1). Pairs of cost k with span·e^{−kγ} <= L cannot beat L.
    cand = [(m - 1, m), (m, m + 1), (np.zeros_like(m), m), (m, n + 1)]
    low = np.zeros(n_groups)
    for a, b in cand:
        low = np.maximum(low, value(g_all, np.maximum(a, 0), np.minimum(b, n + 1)))
    out[:] = low
    with np.errstate(divide="ignore"):
        kmax = np.floor(np.log(span / low) / gamma)  # pairs need b − a − 1 <= kmax
    kmax = np.where(np.isfinite(kmax), np.minimum(kmax, n + 1), n + 1).astype(np.int64)

    # Subproblems (g, a in [alo, ahi], b in [blo, bhi]); rows a <= m, columns b >= m.
    g = g_all.copy()
    alo = np.maximum(m - kmax - 1, 0)
    ahi = m.copy()
    blo = m.copy()
    bhi = np.minimum(m + kmax + 1, n + 1)
    while g.size:
        amid = (alo + ahi) // 2
        lens = bhi - blo + 1
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        seg = np.repeat(np.arange(g.size), lens)
        b = blo[seg] + (np.arange(lens.sum()) - starts[seg])
        v = value(g[seg], amid[seg], b)
        best = np.maximum.reduceat(v, starts)
        bstar = np.maximum.reduceat(np.where(v == best[seg], b, -1), starts)
        np.maximum.at(out, g, best)
        left = amid - 1 >= alo
        right = amid + 1 <= ahi
        g = np.concatenate([g[left], g[right]])
        alo, ahi = (np.concatenate([alo[left], amid[right] + 1]),
                    np.concatenate([amid[left] - 1, ahi[right]]))
        blo, bhi = (np.concatenate([blo[left], bstar[right]]),
                    np.concatenate([bstar[left], bhi[right]]))
    return out


def smooth_sensitivity_quantile(values: ArrayLike, q: float, gamma: float,
                                bounds: tuple[float, float]) -> float:
    """γ-smooth sensitivity of the q-quantile (rank `quantile_rank`) of one group.

    Args:
        values: The group's values (any order); clipped to ``bounds``.
        q: Quantile level in [0, 1] (0.5: lower median).
        gamma: Smoothness γ > 0.
        bounds: Public range ``(lo, hi)``.

    Returns:
        The smooth sensitivity (``hi − lo`` for no values).

    Example:
        >>> round(smooth_sensitivity_quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.9, 1.0, (0.0, 10.0)), 6)
        5.0
    """
    x = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    return float(smooth_sensitivity_grouped(x, np.array([0, x.size]), q, gamma, bounds)[0])


def smooth_sensitivity_median(values: ArrayLike, gamma: float,
                              bounds: tuple[float, float]) -> float:
    """γ-smooth sensitivity of the (lower) median of one group's values on ``[lo, hi]``.

    The Nissim–Raskhodnikova–Smith construction of docs/math/smooth.md §1 (replacement neighbours):
    clip, sort, pad with lo/hi, ``SS = max_k e^{−kγ} max_{t=0..k+1} (x_{m+t} − x_{m+t−k−1})`` with
    ``m = ⌈n/2⌉``.

    Args:
        values: The group's values (any order).
        gamma: Smoothness γ > 0.
        bounds: Public range ``(lo, hi)``.

    Returns:
        The smooth sensitivity.

    Example:
        >>> round(smooth_sensitivity_median([10.0, 11.0, 12.0, 13.0, 14.0], 1.0, (0.0, 20.0)), 4)
        1.624
        >>> big = [10.0, 11.0, 12.0, 13.0, 14.0] * 20
        >>> round(smooth_sensitivity_median(big, 1.0, (0.0, 20.0)), 6)
        0.000123
        >>> smooth_sensitivity_median([], 0.1, (0.0, 100.0))
        100.0
    """
    return smooth_sensitivity_quantile(values, 0.5, gamma, bounds)

