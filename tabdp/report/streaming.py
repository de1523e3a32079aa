"""Exact statistics of a large column in bounded memory (Polars streaming queries).

The confidential report summarizes one row per unit, which can be hundreds of millions of rows
read from Parquet. These helpers compute what it needs without holding the column in memory:

* `sortable_key` maps a float column to int64 keys in the same order (by their bits);
* `order_statistics` finds the values of given ranks in sorted order by counting keys
  per bin (their leading bits) and narrowing to the bins that hold the ranks, collecting values
  only once a bin is small;
* `exact_quantiles` is `numpy.quantile` (``method="linear"``) on those order
  statistics, bit for bit.

Every query runs with ``collect(engine="streaming")``; its memory grows with the number of bins
(at most 2¹⁶ per narrowing step) and the collection cap, not with the number of rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

__all__ = ["sortable_key", "sortable_keys", "order_statistics", "exact_quantiles",
           "BatchedOrderStatistics", "quantile_ranks", "interpolate_quantiles"]

_MIN = -(2 ** 63)
_SHIFTS = (48, 32, 16, 0)
#: Bins holding at most this many values are collected and sorted in memory.
COLLECT_CAP = 65536


def _bits_of(s: pl.Series) -> pl.Series:
    return pl.Series(s.name, s.cast(pl.Float64).to_numpy().view(np.int64), dtype=pl.Int64)


def _float_bits(expr: pl.Expr) -> pl.Expr:
    """The IEEE-754 bits of a Float64 expression as Int64 (elementwise, streams).

    ``Expr.reinterpret(dtype=...)`` where Polars has it (newer releases); else numpy's view of
    each batch.
    """
    try:
        return expr.reinterpret(dtype=pl.Int64)
    except TypeError:  # Polars without reinterpret(dtype=): the floor of the dependency range
        return expr.map_batches(_bits_of, return_dtype=pl.Int64, is_elementwise=True)


def sortable_key(expr: pl.Expr) -> pl.Expr:
    """Int64 keys ordered like the float values of ``expr`` (-0.0 counted as 0.0; no NaN).

    Args:
        expr: A Float64 expression without NaN or null.

    Returns:
        The keys: the IEEE-754 bits for values ≥ 0, ``-1 - (bits - MIN)`` for negatives.

    Example:
        >>> df = pl.DataFrame({"v": [-float("inf"), -2.0, -0.0, 0.0, 1e-300, 3.0]})
        >>> k = df.select(sortable_key(pl.col("v")).alias("k"))["k"].to_list()
        >>> k == sorted(k) and k[2] == k[3] == 0
        True
    """
    b = _float_bits(pl.when(expr == 0.0).then(0.0).otherwise(expr))
    return pl.when(b < 0).then(pl.lit(-1, pl.Int64) - (b - pl.lit(_MIN, pl.Int64))).otherwise(b)


def _decode(keys: np.ndarray) -> np.ndarray:
    k = np.asarray(keys, dtype=np.int64)
    with np.errstate(over="ignore"):
        bits = np.where(k < 0, (-1 - k) + np.int64(_MIN), k)
    return bits.astype(np.int64).view(np.float64)


def order_statistics(lf: pl.LazyFrame, column: str, ranks: Sequence[int], *,
                     cap: int | None = None) -> np.ndarray:
    """Values of the given 0-based ranks of a column sorted ascending, in bounded memory.

    Args:
        lf: The frame (e.g. ``pl.scan_parquet(...)``).
        column: A numeric column without NaN or null (cast to Float64).
        ranks: Ranks in ``[0, n)``.
        cap: Bins with at most this many values are collected and sorted in memory
            (default `COLLECT_CAP`).

    Returns:
        ``sorted(values)[r]`` for each rank (a zero as 0.0).

    Raises:
        ValueError: A rank is outside ``[0, n)``.

    Example:
        >>> lf = pl.LazyFrame({"v": [5.0, -1.0, 3.0, 3.0, 0.0]})
        >>> order_statistics(lf, "v", [0, 2, 4], cap=1).tolist()
        [-1.0, 3.0, 5.0]
    """
    cap = COLLECT_CAP if cap is None else int(cap)
    key = lf.select(sortable_key(pl.col(column).cast(pl.Float64)).alias("k"))
    wanted = sorted({int(r) for r in ranks})
    n = int(key.select(pl.len()).collect(engine="streaming").item())
    if any(not 0 <= r < n for r in wanted):
        raise ValueError(f"order_statistics: ranks must lie in [0, {n}); got {wanted}.")
    found: dict[int, float] = {}
    # active: rank -> (prefix of the bin at the previous shift, rank within that bin)
    active: dict[int, tuple[int | None, int]] = {r: (None, r) for r in wanted}
    prev_shift = 64
    for shift in _SHIFTS:
        if not active:
            break
        prefixes = sorted({p for p, _ in active.values() if p is not None})
        q = key
        if prefixes:
            q = q.filter((pl.col("k") // (1 << prev_shift)).is_in(prefixes))
        counts = (q.group_by(g=pl.col("k") // (1 << shift)).agg(c=pl.len())
                  .collect(engine="streaming").sort("g"))
        g_all = counts["g"].to_numpy()
        c_all = counts["c"].to_numpy().astype(np.int64)
        collect: dict[int, list[tuple[int, int]]] = {}  # bin -> [(rank, rank in bin)]
        nxt: dict[int, tuple[int | None, int]] = {}
        for r, (p, within) in active.items():
            sel = (np.ones(g_all.size, bool) if p is None
                   else (g_all // (1 << (prev_shift - shift))) == p)
            gs, cs = g_all[sel], c_all[sel]
            cum = np.cumsum(cs)
            i = int(np.searchsorted(cum, within, side="right"))
            g, below = int(gs[i]), int(cum[i] - cs[i])
            if shift == 0:
                found[r] = float(_decode(np.array([g]))[0])
            elif cs[i] <= cap:
                collect.setdefault(g, []).append((r, within - below))
            else:
                nxt[r] = (g, within - below)
        if collect:
            vals = (key.filter((pl.col("k") // (1 << shift)).is_in(sorted(collect)))
                    .collect(engine="streaming")["k"].to_numpy())
            for g, items in collect.items():
                inbin = np.sort(vals[(vals // (1 << shift)) == g])
                for r, w in items:
                    found[r] = float(_decode(inbin[w:w + 1])[0])
        active = nxt
        prev_shift = shift
    return np.array([found[int(r)] for r in ranks], dtype=np.float64)


def exact_quantiles(lf: pl.LazyFrame, column: str, qs: Sequence[float]) -> np.ndarray:
    """``numpy.quantile(values, qs)`` (linear method) of a column, in bounded memory.

    Nulls count as NaN (as ``Series.to_numpy()`` gives them): like numpy, a column with a NaN
    has NaN quantiles. The interpolation repeats numpy's, including its two-sided formula
    (``b - (b - a)(1 - t)`` for ``t ≥ 0.5``) and its NaN for an infinite order statistic.

    Args:
        lf: The frame.
        column: A numeric column (cast to Float64).
        qs: Quantile levels in ``[0, 1]``.

    Returns:
        One value per level, equal to ``np.quantile`` of the column's values.

    Raises:
        ValueError: The column has no rows.

    Example:
        >>> lf = pl.LazyFrame({"v": [0.0, 1.0, 1.0, 4.0, float("inf")]})
        >>> exact_quantiles(lf, "v", [0.5, 0.7, 0.9]).tolist()
        [1.0, 3.3999999999999995, nan]
    """
    v = pl.col(column).cast(pl.Float64, strict=False)
    row = lf.select(n=pl.len(), nan=(v.is_null() | v.is_nan()).sum()).collect(
        engine="streaming").row(0, named=True)
    n, n_nan = int(row["n"]), int(row["nan"] or 0)
    if n == 0:
        raise ValueError(f"exact_quantiles: the column {column!r} has no rows.")
    if n_nan:
        return np.full(np.asanyarray(qs, dtype=np.float64).shape, np.nan)
    ranks, finish = quantile_ranks(n, qs)
    return finish(order_statistics(lf.select(v.alias("v")), "v", ranks))


def quantile_ranks(n: int, qs: Sequence[float]
                   ) -> tuple[list[int], Callable[[np.ndarray], np.ndarray]]:
    """The order statistics ``numpy.quantile`` (linear) needs, and its interpolation of them.

    Args:
        n: Number of values (at least 1, no NaN).
        qs: Quantile levels in ``[0, 1]``.

    Returns:
        The 0-based ranks to find, and a function of their values (in the order of the ranks)
        giving the quantiles, bit for bit those of ``numpy.quantile``.

    Example:
        >>> ranks, finish = quantile_ranks(5, [0.5, 0.7])
        >>> ranks
        [2, 2, 3, 3]
        >>> finish(np.array([1.0, 1.0, 4.0, 4.0])).tolist()
        [1.0, 3.4]
    """
    q = np.asanyarray(qs, dtype=np.float64)
    # numpy's _quantile / _get_indexes / _get_gamma for method="linear"
    vi = np.asanyarray((n - 1) * q)
    prev = np.floor(vi)
    nxt = prev + 1
    above = vi >= n - 1
    prev[above] = -1
    nxt[above] = -1
    below = vi < 0
    prev[below] = 0
    nxt[below] = 0
    isnan = np.isnan(vi)
    prev[isnan] = -1
    nxt[isnan] = -1
    prev_i, next_i = prev.astype(np.intp), nxt.astype(np.intp)
    gamma = np.asanyarray(np.asanyarray(vi - prev_i), dtype=vi.dtype)
    pr, nr = np.where(prev_i < 0, n + prev_i, prev_i), np.where(next_i < 0, n + next_i, next_i)
    ranks = [int(x) for x in np.concatenate([pr.ravel(), nr.ravel()])]

    def finish(stats: np.ndarray) -> np.ndarray:
        a, b = stats[:pr.size].reshape(q.shape), stats[pr.size:].reshape(q.shape)
        return interpolate_quantiles(a, b, gamma)

    return ranks, finish


def interpolate_quantiles(a: np.ndarray, b: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """Interpolate as numpy's ``_lerp``: ``a + (b - a) γ``, or ``b - (b - a)(1 - γ)`` if γ ≥ 0.5.

    Args:
        a: Lower order statistics.
        b: Upper order statistics.
        gamma: Weights in ``[0, 1]``.

    Returns:
        The interpolated values (NaN where an infinite difference makes them undefined).

    Example:
        >>> interpolate_quantiles(np.array([1.0]), np.array([4.0]), np.array([0.8])).tolist()
        [3.4000000000000004]
    """
    with np.errstate(invalid="ignore", over="ignore"):
        diff = b - a  # numpy's _lerp
        out = np.add(a, diff * gamma)
        np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return np.asarray(out, dtype=np.float64)


def sortable_keys(values: np.ndarray) -> np.ndarray:
    """`sortable_key` on a numpy array: int64 keys ordered like the (non-NaN) float values.

    Args:
        values: Float values without NaN.

    Returns:
        The keys, equal to those `sortable_key` gives in Polars.

    Example:
        >>> k = sortable_keys(np.array([-2.0, -0.0, 0.0, 3.0]))
        >>> bool(k[1] == k[2] == 0) and list(k) == sorted(k)
        True
    """
    v = np.asarray(values, dtype=np.float64)
    bits = np.add(v, 0.0).view(np.int64)  # -0.0 + 0.0 is 0.0; every other value unchanged
    neg = bits < 0
    if neg.any():
        bits[neg] = np.int64(-1) - (bits[neg] - np.int64(_MIN))
    return bits


class BatchedOrderStatistics:
    """`order_statistics` over a column read in batches: the same values, fewer reads.

    The same narrowing as `order_statistics` (counts of the keys' leading bits, then of the
    bins that hold the ranks, collecting a bin's values once it holds at most ``cap``), but
    each pass over the column is a loop over its batches that the caller drives, so that other
    statistics can share the pass: a bin decided in one pass is collected in the next one,
    together with the counts of the next narrowing. The first pass counts every key; the
    ranks are given at its end (when the number of values is known). Memory: the bin counts
    (at most 2¹⁶ per bin narrowed) and the collected values (at most ``cap`` per rank).

    Example:
        >>> vals = np.array([5.0, -1.0, 3.0, 3.0, 0.0])
        >>> os_ = BatchedOrderStatistics(cap=1)
        >>> more = True
        >>> first = True
        >>> while more:
        ...     for part in (vals[:2], vals[2:]):
        ...         os_.feed(sortable_keys(part))
        ...     more = os_.end_pass([0, 2, 4] if first else None)
        ...     first = False
        >>> os_.values([0, 2, 4]).tolist()
        [-1.0, 3.0, 5.0]
    """

    def __init__(self, cap: int | None = None) -> None:
        """Start the first pass; ``cap`` as in `order_statistics` (default `COLLECT_CAP`)."""
        self.cap = COLLECT_CAP if cap is None else int(cap)
        self.n = 0
        self._found: dict[int, float] = {}
        self._active: dict[int, tuple[int | None, int]] = {}
        self._count_shift: int | None = _SHIFTS[0]
        self._prev_shift = 64
        self._prefixes: np.ndarray | None = None  # None: count every key
        self._counts = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        # the counts of this pass, dense: 2¹⁶ per narrowed prefix (one block in the first pass)
        self._dense: np.ndarray | None = None
        self._collect: dict[int, list[tuple[int, int]]] = {}
        self._collect_shift = 0
        self._collect_bins = np.zeros(0, np.int64)
        self._vals: list[np.ndarray] = []

    def feed(self, keys: np.ndarray) -> None:
        """Add one batch of keys (`sortable_keys`) to the current pass."""
        k = np.asarray(keys, dtype=np.int64)
        top: np.ndarray | None = None  # the first 16 bits, offset to [0, 2¹⁶)
        if self._count_shift is not None:
            if self._prefixes is None:  # the first 16 bits: a count per value
                self.n += k.size
                top = (k >> 48) + (1 << 15)
                c = np.bincount(top, minlength=1 << 16)
            else:  # the next 16 bits of the keys under a narrowed prefix: a block per prefix
                p = self._prefixes
                if self._prev_shift == 48:
                    top = (k >> 48) + (1 << 15)
                    block = np.full(1 << 16, -1, np.int64)
                    block[p + (1 << 15)] = np.arange(p.size)
                    at = block[top]
                    sel = at >= 0
                    at = at[sel]
                else:
                    at = np.searchsorted(p, k >> self._prev_shift)
                    sel = p[np.minimum(at, p.size - 1)] == (k >> self._prev_shift)
                    at = at[sel]
                low = (k[sel] >> self._count_shift) & 0xFFFF
                c = np.bincount((at << 16) + low, minlength=p.size << 16)
            self._dense = c if self._dense is None else self._dense + c
        if self._collect:
            b = self._collect_bins
            if self._collect_shift == 48:  # membership of the first 16 bits by a table
                if top is None:
                    top = (k >> 48) + (1 << 15)
                table = np.zeros(1 << 16, bool)
                table[b + (1 << 15)] = True
                self._vals.append(k[table[top]])
            else:
                self._vals.append(k[np.isin(k >> self._collect_shift, b)])

    def end_pass(self, ranks: Sequence[int] | None = None) -> bool:
        """End a pass over the column; True while another pass is needed.

        Args:
            ranks: At the end of the first pass: the 0-based ranks to find, in ``[0, n)``.

        Returns:
            Whether the caller must feed the whole column once more.

        Raises:
            ValueError: A rank is outside ``[0, n)``.
        """
        if self._collect:
            vals = np.concatenate(self._vals) if self._vals else np.zeros(0, np.int64)
            for g, items in self._collect.items():
                inbin = np.sort(vals[(vals >> self._collect_shift) == g])
                for r, w in items:
                    self._found[r] = float(_decode(inbin[w:w + 1])[0])
            self._collect, self._vals = {}, []
        if self._count_shift is None:
            return False
        if self._dense is not None:  # the dense counts as (bins, counts), bins increasing
            nz = np.flatnonzero(self._dense)
            cnt = self._dense[nz]
            if self._prefixes is None:
                nz = nz - (1 << 15)
            else:
                nz = (self._prefixes[nz >> 16] << 16) + (nz & 0xFFFF)
            self._counts, self._dense = (nz.astype(np.int64), cnt.astype(np.int64)), None
        if ranks is not None:
            wanted = sorted({int(r) for r in ranks})
            if any(not 0 <= r < self.n for r in wanted):
                raise ValueError(f"order_statistics: ranks must lie in [0, {self.n}); got "
                                 f"{wanted}.")
            self._active = {r: (None, r) for r in wanted}
        shift, prev_shift = self._count_shift, self._prev_shift
        g_all, c_all = self._counts
        collect: dict[int, list[tuple[int, int]]] = {}
        nxt: dict[int, tuple[int | None, int]] = {}
        for r, (p, within) in self._active.items():
            sel = (np.ones(g_all.size, bool) if p is None
                   else (g_all >> (prev_shift - shift)) == p)
            gs, cs = g_all[sel], c_all[sel]
            cum = np.cumsum(cs)
            i = int(np.searchsorted(cum, within, side="right"))
            g, below = int(gs[i]), int(cum[i] - cs[i])
            if shift == 0:
                self._found[r] = float(_decode(np.array([g]))[0])
            elif cs[i] <= self.cap:
                collect.setdefault(g, []).append((r, within - below))
            else:
                nxt[r] = (g, within - below)
        self._collect, self._collect_shift = collect, shift
        self._collect_bins = np.array(sorted(collect), dtype=np.int64)
        self._active = nxt
        self._counts = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        if nxt:
            self._prev_shift = shift
            self._count_shift = _SHIFTS[_SHIFTS.index(shift) + 1]
            self._prefixes = np.array(sorted({p for p, _ in nxt.values() if p is not None}),
                                      dtype=np.int64)
        else:
            self._count_shift = None
        return bool(self._collect) or self._count_shift is not None

    def values(self, ranks: Sequence[int]) -> np.ndarray:
        """The values of ``ranks`` (all found once `end_pass` returned False)."""
        return np.array([self._found[int(r)] for r in ranks], dtype=np.float64)
