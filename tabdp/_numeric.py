"""Small numeric helpers shared across tabdp (package-private).

Example:
    >>> ceil_snap(np.array([2.1 / 0.7, 1e7 / 0.37])).tolist()
    [3.0, 27027028.0]
"""

from __future__ import annotations

import functools
import math
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

__all__ = ["floats_quiet", "ceil_snap", "integer_dtype", "div_up", "mul_up", "add_up",
           "add_up_fresh", "add_up_into", "add_up_any", "half_square_up", "inflate",
           "safe_range", "SAFE_LO",
           "SAFE_HI", "ZCDP_ULPS", "work_threads", "one_thread", "quiet_thread",
           "work_pool", "engine_thread", "SLICE_ROWS", "on_slices", "any_nonzero", "increasing",
           "filled"]


_F = TypeVar("_F", bound=Callable[..., Any])


def floats_quiet(fn: _F) -> _F:
    """Run ``fn`` with NumPy's floating-point error handling off (``all="ignore"``).

    NumPy's handling is the caller's (``numpy.seterr``): a caller who set underflow to
    ``"raise"`` saw a release of a record of payroll 1e-320 fail with ``FloatingPointError``,
    and other values warn, an exception or a warning that depends on one record (review r68).
    tabdp's entry points that compute on records (a release, a report) run with every
    category ignored, whatever the caller set; tabdp's code chooses its own handling where it
    needs one (its own `numpy.errstate` blocks inside), and reports what it detects itself.
    NumPy's error state belongs to the calling thread: the threads tabdp starts set it with
    `quiet_thread`, and the streaming engine's batch functions (on Polars' threads) with their
    own ``numpy.errstate(all="ignore")``.

    Example:
        >>> old = np.seterr(under="raise")
        >>> floats_quiet(lambda: float(np.float64(1e-300) * 1e-300))()
        0.0
        >>> _ = np.seterr(**old)
    """
    @functools.wraps(fn)
    def quiet(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return quiet  # type: ignore[return-value]


_ONE_THREAD = threading.local()


def work_threads() -> int:
    """Threads tabdp's own elementwise NumPy work on long arrays may use.

    Polars' thread pool size (its cores, or ``POLARS_MAX_THREADS``), or 1 inside
    `one_thread`: a batch function that Polars already runs on each of its threads (a
    streaming pass) starts no threads of its own, which would compete with the engine's for
    the same cores and cost a thread start per batch.

    Returns:
        The number of threads (≥ 1).

    Example:
        >>> with one_thread():
        ...     work_threads()
        1
    """
    if getattr(_ONE_THREAD, "on", False):
        return 1
    import polars as pl  # not at load: a Spark worker imports this module without Polars

    return max(1, int(pl.thread_pool_size()))


@contextmanager
def one_thread() -> Iterator[None]:
    """Within the block, on this thread, `work_threads` is 1 (tabdp's work starts no threads).

    Per thread: the engine's other threads keep their own setting. Nested blocks restore the
    outer setting on exit.

    Example:
        >>> with one_thread():
        ...     inside = work_threads()
        >>> inside, work_threads() >= 1
        (1, True)
    """
    before = getattr(_ONE_THREAD, "on", False)
    _ONE_THREAD.on = True
    try:
        yield
    finally:
        _ONE_THREAD.on = before


def quiet_thread() -> None:
    """NumPy's floating-point error handling off (``all="ignore"``) for the rest of this thread.

    The ``initializer`` of every thread pool tabdp starts for its own work
    (``ThreadPoolExecutor(workers, initializer=quiet_thread)``). NumPy's error state is per
    thread and a new thread starts with NumPy's defaults (a warning per overflow, division by
    zero or invalid operation), not the state of the thread that started it: the in-memory
    engine evaluated its first chunk of rows on the release's thread (errors off,
    `floats_quiet`) and the others on its worker threads, where a record whose loss overflowed
    warned, a warning that depended on one record (review r69).

    Example:
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> with ThreadPoolExecutor(1, initializer=quiet_thread) as pool:
        ...     pool.submit(lambda: np.geterr()["over"]).result()
        'ignore'
    """
    np.seterr(all="ignore")


def work_pool(workers: int) -> ThreadPoolExecutor:
    """A thread pool for tabdp's own work: its threads run with NumPy's errors off.

    Every pool tabdp starts is made here, so none runs with NumPy's defaults
    (`quiet_thread`).

    Args:
        workers: The number of threads (``work_threads`` or fewer).

    Returns:
        The pool (use it as a context manager).

    Example:
        >>> with work_pool(1) as pool:
        ...     pool.submit(lambda: np.geterr()["over"]).result()
        'ignore'
    """
    return ThreadPoolExecutor(workers, initializer=quiet_thread)


@contextmanager
def engine_thread() -> Iterator[None]:
    """Code Polars runs on its own threads (a batch function), or a side thread of a pass.

    Inside, tabdp's work starts no threads (`one_thread`: the engine already runs it on each
    of its threads) and NumPy's errors are ignored, as on the release's own thread
    (`floats_quiet`), not those threads' defaults.

    Example:
        >>> with engine_thread():
        ...     work_threads(), np.geterr()["over"]
        (1, 'ignore')
    """
    with one_thread(), np.errstate(all="ignore"):
        yield


#: Values per slice below which `on_slices` makes one call: a thread's hand-off costs more
#: than elementwise work on fewer values (131,072 doubles: 1 MiB).
SLICE_ROWS = 1 << 17


def on_slices(n: int, fn: Callable[[int, int], None], workers: int | None = None) -> None:
    """``fn(lo, hi)`` over consecutive slices covering ``range(n)``, on `work_threads` threads.

    For elementwise NumPy work on long arrays (NumPy's loops release the GIL): each call writes
    its own slice of a preallocated output, so the result is that of one call ``fn(0, n)``,
    whatever the number of threads. One call for short arrays, inside `one_thread` (a batch
    function Polars runs on each of its threads) and on one core (``POLARS_MAX_THREADS=1``).

    Args:
        n: The length covered.
        fn: Called with each slice's bounds (``0 <= lo < hi <= n``).
        workers: The most threads to use (default `work_threads`).

    Example:
        >>> out = np.zeros(5)
        >>> def f(lo, hi): out[lo:hi] = np.arange(lo, hi)
        >>> on_slices(5, f); out.tolist()
        [0.0, 1.0, 2.0, 3.0, 4.0]
    """
    workers = min(work_threads() if workers is None else workers, n // SLICE_ROWS)
    if workers <= 1:
        if n:
            fn(0, n)
        return
    step = -(-n // workers)
    with work_pool(workers) as pool:
        for _ in pool.map(lambda lo: fn(lo, min(lo + step, n)), range(0, n, step)):
            pass


def _all_slices(n: int, test: Callable[[int, int], bool]) -> bool:
    """Whether ``test(lo, hi)`` holds on every slice of `on_slices` (each slice tested once)."""
    fails: list[bool] = []

    def run(lo: int, hi: int) -> None:
        if not test(lo, hi):
            fails.append(True)  # (list.append is atomic)

    on_slices(n, run)
    return not fails


def any_nonzero(a: np.ndarray) -> bool:
    """``bool(numpy.any(a))`` of a 1-d array, its slices on `work_threads` threads.

    A constant view (stride 0: `numpy.broadcast_to` of one value) reads its one value.

    Example:
        >>> any_nonzero(np.zeros(3)), any_nonzero(np.broadcast_to(np.nan, (4,)))
        (False, True)
    """
    a = np.asarray(a)
    if a.ndim != 1:
        return bool(np.any(a))
    if a.size and a.strides[0] == 0:
        return bool(np.any(a[:1]))
    return not _all_slices(a.size, lambda lo, hi: not bool(np.any(a[lo:hi])))


def increasing(a: np.ndarray) -> bool:
    """Whether the 1-d array ``a`` is strictly increasing, its slices on `work_threads` threads.

    Example:
        >>> increasing(np.array([1, 2, 3])), increasing(np.array([1, 2, 2]))
        (True, False)
    """
    a = np.asarray(a)
    n = a.size - 1  # the n pairs (a[i], a[i + 1])
    return n < 1 or _all_slices(n, lambda lo, hi: bool(np.all(a[lo + 1:hi + 1] > a[lo:hi])))


def filled(n: int, value: float) -> np.ndarray:
    """``numpy.full(n, value)`` (float64), written by slices on `work_threads` threads.

    An array of millions of doubles is a fresh memory mapping: writing it faults its pages
    in, the kernel's work, here on both cores. 0.0 is ``numpy.zeros`` (pages zeroed when
    first read).

    Example:
        >>> filled(3, 0.5).tolist(), filled(2, 0.0).tolist()
        ([0.5, 0.5, 0.5], [0.0, 0.0])
    """
    v = np.float64(value)
    if v == 0.0 and not np.signbit(v):
        return np.zeros(n)
    out = np.empty(n)

    def fill(lo: int, hi: int) -> None:
        out[lo:hi] = v

    on_slices(n, fill)
    return out


def ceil_snap(x: np.ndarray) -> np.ndarray:
    """``ceil`` that snaps ratios within a few ulps of an integer to it (2.1/0.7 → 3).

    A ratio is snapped down to an integer only when it is within 8 ulps of it **and** less
    than 2**-20 above it: a real fraction of a large ratio (1e7/0.37 = 27027027.027) is never
    snapped down, however large the ratio (above about 2**40, 8 ulps are 2**-9 or more of a
    row: such ratios are rounded up as ``ceil`` does). Snapping down under-counts, so only
    float noise of a ratio of decimals is snapped.

    Args:
        x: Ratios.

    Returns:
        Their ceilings, with near-integers snapped.

    Example:
        >>> ceil_snap(np.array([0.5, 2.0000000000000004, 2.0**47 + 0.25])).tolist()
        [1.0, 2.0, 140737488355329.0]
    """
    r = np.rint(x)
    d = np.abs(x - r)
    near = (d <= 8.0 * np.finfo(np.float64).eps * np.maximum(1.0, np.abs(x))) & (d < _SNAP_MAX)
    return np.where(near, r, np.ceil(x))


#: The largest distance below which `ceil_snap` snaps to an integer (a fraction of a row).
_SNAP_MAX = 2.0**-20


#: The bound an integer-declared estimate is clamped to (flag ``L``): the largest double below
#: 2**63, which converts to Int64 exactly. The ``.dp`` accessor clamps to it
#: (`tabdp.frame._output`) and the release workflow flags estimates at it (`tabdp.release.publish`).
INT64_CLAMP = 2**63 - 1024


def integer_dtype(dtype: Any) -> bool:
    """Whether a measure's Polars dtype gives integer estimates (Int64 output).

    Integer dtypes of at most 64 bits, except UInt64: sums of wider integers (Int128, UInt64,
    UInt128) are far more likely to pass the Int64 range, so they stay Float64 (a public choice
    made from the schema alone). An Int64 estimate beyond ±(2**63 - 1024) is clamped to it
    (flag ``L``).

    Args:
        dtype: A Polars dtype.

    Returns:
        True for Int8 ... Int64 and UInt8 ... UInt32.

    Example:
        >>> import polars as pl
        >>> integer_dtype(pl.Int32), integer_dtype(pl.UInt64), integer_dtype(pl.Float64)
        (True, False, False)
    """
    import polars as pl

    wide = tuple(t for t in (getattr(pl, "Int128", None), getattr(pl, "UInt128", None), pl.UInt64)
                 if t is not None)
    return bool(dtype.is_integer()) and dtype not in wide


# -- rounding up (per-record losses) ------------------------------------------------------------
# A reported per-record loss is never below the exact one (docs/privacy-semantics.md). These
# helpers give a double >= the exact real result using only correctly rounded operations (+, −,
# ×, comparisons), so `tabdp.frame`'s engine expressions repeat them bit for bit: a result that
# is exact in floating point stays as it is (Dekker's error-free product or Knuth's sum
# decides), an inexact one moves up one or two places (a product by 1 + 2**-52). Outside the
# range where the error-free transformations hold (magnitudes below 2**-900 or above 2**900)
# the result is raised by a relative 4·2**-52 plus the smallest subnormal instead.

#: Ulps (plus one) by which `tabdp.mechanisms.pure_to_zcdp` raises ε·tanh(ε/2): tanh is within
#: 2 ulps, the products add one each (`tabdp.frame`'s engine expressions use the same constant).
ZCDP_ULPS = 8.0
#: Safe range of the error-free transformations (no overflow of a split, no underflow of an
#: error term).
SAFE_LO = 2.0**-900
SAFE_HI = 2.0**900
_SPLIT = 134217729.0  # 2**27 + 1
_TINY = 2.0**-1074
_EPS = 2.0**-52
_UP = 1.0 + _EPS


def _two_prod_err(a: np.ndarray, b: Any, p: np.ndarray) -> np.ndarray:
    """``a·b − p`` exactly (Dekker; ``p = fl(a·b)``) where a, b, a·b are in the safe range."""
    ca = a * _SPLIT
    ah = ca - (ca - a)
    al = a - ah
    if np.ndim(b) == 0:  # a constant: split once
        cbf = float(b) * _SPLIT
        bh: Any = cbf - (cbf - float(b))
        bl: Any = float(b) - bh
    else:
        cb = b * _SPLIT
        bh = cb - (cb - b)
        bl = b - bh
    e = ah * bh
    e -= p
    e += ah * bl
    e += al * bh
    e += al * bl
    return e


def _up_where(r: np.ndarray, below: np.ndarray) -> None:
    """``r`` times ``1 + 2**-52`` where ``below``, in place; elsewhere unchanged.

    Every value is multiplied, by ``1 + 2**-52`` or by exactly 1.0 (which gives every double
    back as it is, a quiet NaN with its sign and payload too): the same doubles as NumPy's
    masked multiply (``where=below``), at about a third of its cost. The one exception, a
    signalling NaN, comes back quieted; ``r`` is always the result of an arithmetic operation
    (a sum, quotient or product of the callers), which never is one.
    """
    f = below * _EPS
    f += 1.0
    np.multiply(r, f, out=r)


def _next_up(x: np.ndarray) -> np.ndarray:
    # x·(1 + 2**-52) for a positive normal x: one or two doubles up (a product, so engine
    # expressions repeat it with a small tree)
    return x * (1.0 + _EPS)


def _fallback(r: np.ndarray, pos: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.where(pos, r * (1.0 + 4.0 * _EPS) + _TINY, r)


def safe_range(c: float) -> tuple[float, float]:
    """The x in which ``x/c`` and ``x·1/c``-type checks hold: x and its quotient by c safe.

    Example:
        >>> safe_range(1.0) == (2.0 * SAFE_LO, SAFE_HI / 2.0)
        True
    """
    return 2.0 * SAFE_LO * max(1.0, c), SAFE_HI * min(1.0, c) / 2.0


def _rounded_up(r: np.ndarray, x: np.ndarray, below: np.ndarray, lo: float, hi: float,
                ok: bool) -> np.ndarray:
    """``r`` one or two places up where ``below``; the fallback where x > 0 is not in [lo, hi]."""
    if not ok:
        return _fallback(r, x > 0)
    bad = np.zeros(0, dtype=np.intp)
    if x.size and (float(x.max()) > hi or float(x.min()) < lo):
        bad = np.flatnonzero((x > 0) & ((x < lo) | (x > hi)))
    keep = r[bad]
    _up_where(r, below)
    if bad.size:
        r[bad] = _fallback(keep, np.ones(bad.size, dtype=bool))
    return r


_CHUNK = 1 << 15


def _chunked(fn: Any, x: np.ndarray, *args: Any) -> np.ndarray:
    """``fn`` over cache-sized slices of a large array (the same values, less memory traffic)."""
    flat = x.reshape(-1)
    if flat.size <= _CHUNK:
        return np.asarray(fn(flat, *args)).reshape(x.shape)
    out = np.empty(flat.size, dtype=np.float64)
    for i in range(0, flat.size, _CHUNK):
        out[i:i + _CHUNK] = fn(flat[i:i + _CHUNK], *args)
    return out.reshape(x.shape)


def div_up(x: Any, q: float) -> np.ndarray:
    """A double >= x/q (exact when ``fl(x/q)`` is), for doubles x >= 0 and a double q > 0.

    Args:
        x: Numerators (≥ 0; ``inf`` allowed).
        q: A positive double.

    Returns:
        ``fl(x/q)``, moved one or two places up where it is below x/q.

    Example:
        >>> from fractions import Fraction
        >>> third = float(div_up(np.array([1.0]), 3.0)[0])     # fl(1/3) is below 1/3
        >>> div_up(np.array([4.0, 1.0]), 2.0).tolist(), Fraction(third) > Fraction(1, 3)
        ([2.0, 0.5], True)
    """
    return _chunked(_div_up, np.asarray(x, dtype=np.float64), float(q))


def _div_up(x: np.ndarray, q: float) -> np.ndarray:
    lo, hi = safe_range(q)
    with np.errstate(all="ignore"):
        r = np.atleast_1d(x / q)
        xx = np.atleast_1d(x)
        p = r * q
        # r·q − x has the sign of (p − x) + e; p − x is exact (Sterbenz: p ≈ x)
        e = _two_prod_err(r, q, p)
        p -= xx
        p += e
        out = _rounded_up(r, xx, p < 0.0, lo, hi, SAFE_LO <= q <= SAFE_HI)
    return out.reshape(x.shape)


def mul_up(x: Any, c: float) -> np.ndarray:
    """A double >= x·c (exact when ``fl(x·c)`` is), for doubles x >= 0 and a double c > 0.

    Args:
        x: Factors (≥ 0).
        c: A positive double.

    Returns:
        ``fl(x·c)``, moved one or two places up where it is below x·c.

    Example:
        >>> from fractions import Fraction
        >>> v = float(mul_up(np.array([3.0]), 0.1)[0])
        >>> mul_up(np.array([3.0]), 0.5).tolist(), Fraction(v) >= 3 * Fraction(0.1)
        ([1.5], True)
    """
    return _chunked(_mul_up, np.asarray(x, dtype=np.float64), float(c))


def _mul_up(x: np.ndarray, c: float) -> np.ndarray:
    lo, hi = safe_range(1.0 / c) if c > 0 else (math.inf, 0.0)
    with np.errstate(all="ignore"):
        xx = np.atleast_1d(x)
        p = xx * c
        out = _rounded_up(p, xx, _two_prod_err(xx, c, p) > 0.0, lo, hi,
                          SAFE_LO <= c <= SAFE_HI)
    return out.reshape(x.shape)


def add_up(a: Any, b: Any) -> np.ndarray:
    """A double >= a + b (exact when ``fl(a + b)`` is), for doubles a, b >= 0 (Knuth's sum).

    The error of ``s = fl(a + b)`` is computed exactly (Knuth's TwoSum: six additions, no
    branch, valid in any order of a and b); where it is positive, ``s`` is multiplied by
    ``1 + 2**-52`` (one or two doubles up, at least the half unit in the last place that
    ``s`` can be below ``a + b``). ``inf`` and NaN stay as they are. Every total of losses
    (over currencies, cells, releases and runs) is added this way: a certified upper bound of
    the exact sum of its terms, the same doubles on every backend (`add_up_any`).

    Args:
        a: Addends (≥ 0, ``inf`` allowed).
        b: Addends (≥ 0, ``inf`` allowed).

    Returns:
        ``fl(a + b)``, moved one or two places up where it is below a + b.

    Example:
        >>> from fractions import Fraction
        >>> v = float(add_up(0.1, 0.2))
        >>> exact = Fraction(0.1) + Fraction(0.2)
        >>> add_up(np.array([0.5]), np.array([0.25])).tolist(), Fraction(v) >= exact
        ([0.75], True)
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        a, b = np.broadcast_arrays(a, b)
    shape = a.shape
    a, b = a.reshape(-1), b.reshape(-1)
    with np.errstate(all="ignore"):
        out = a + b
    for i in range(0, out.size, _CHUNK):  # the error in cache-sized slices, in place
        _round_up(out[i:i + _CHUNK], a[i:i + _CHUNK], b[i:i + _CHUNK])
    return out.reshape(shape)


def _round_up(s: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``s = fl(a + b)`` times ``1 + 2**-52`` (in place) where it is below ``a + b``."""
    with np.errstate(all="ignore"):
        bb = s - a
        t = s - bb
        np.subtract(a, t, out=t)
        np.subtract(b, bb, out=bb)
        t += bb  # the exact error a + b - s (NaN where s is not finite)
        _up_where(s, t > 0.0)


def _add_up(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        s = a + b
    _round_up(s, a, b)
    return s


def add_up_into(acc: np.ndarray, v: Any, at: Any = None) -> None:
    """``acc[at] = add_up(acc[at], v)`` in place (``at`` None: the whole array).

    Args:
        acc: Running totals (a 1-d float64 array, written).
        v: The terms to add (≥ 0).
        at: A slice or index array into ``acc`` (distinct positions), or None.

    Example:
        >>> acc = np.array([0.5, 1.0])
        >>> add_up_into(acc, np.array([2.0**-60]), np.array([1]))
        >>> acc[0], acc[1] > 1.0
        (np.float64(0.5), np.True_)
    """
    if at is None:  # a 1-d array: in cache-sized slices, on the threads (each its own)
        vv = np.broadcast_to(np.asarray(v, dtype=np.float64), acc.shape)

        def run(lo: int, hi: int) -> None:
            with np.errstate(all="ignore"):
                for i in range(lo, hi, _CHUNK):
                    j = min(i + _CHUNK, hi)
                    acc[i:j] = _add_up(acc[i:j], vv[i:j])

        on_slices(acc.size, run)
        return
    if isinstance(at, slice):
        add_up_into(acc[at], v)  # a view: written in place
        return
    acc[at] = add_up(acc[at], v)


def add_up_fresh(a: np.ndarray, v: Any) -> np.ndarray:
    """``add_up(a, v)`` into a new array, in cache-sized slices (as `add_up_into` adds).

    The doubles `add_up_into` writes into ``a``, without writing ``a``: for totals that
    another holder still reads, and without a copy of ``a`` written over.

    Args:
        a: Running totals (a 1-d float64 array, read only).
        v: The terms to add (≥ 0), broadcast to ``a``'s shape.

    Returns:
        A new array.

    Example:
        >>> a = np.array([0.5, 1.0])
        >>> add_up_fresh(a, np.array([0.25, 2.0**-60])).tolist()[0], a.tolist()
        (0.75, [0.5, 1.0])
    """
    out = np.empty(a.shape, dtype=np.float64)
    vv = np.broadcast_to(np.asarray(v, dtype=np.float64), a.shape)

    def run(lo: int, hi: int) -> None:  # (each value a function of its own row)
        with np.errstate(all="ignore"):
            for i in range(lo, hi, _CHUNK):
                j = min(i + _CHUNK, hi)
                s = out[i:j]
                np.add(a[i:j], vv[i:j], out=s)
                _round_up(s, a[i:j], vv[i:j])

    on_slices(a.size, run)
    return out


def add_up_any(a: Any, b: Any, where: Any) -> Any:
    """`add_up` for any array or column type with ``+``, ``-``, ``*``, ``>`` (Polars, Spark).

    The same operations as `add_up`, so the same doubles (IEEE arithmetic, round to nearest):
    a Polars expression or a Spark column gives the values numpy does. Where the error is NaN
    (a non-finite sum) some engines order NaN above 0 and multiply: ``inf`` or NaN either way.

    Args:
        a: Addends (≥ 0).
        b: Addends (≥ 0).
        where: ``where(condition, x, y)`` for the type (``np.where``;
            ``lambda c, x, y: pl.when(c).then(x).otherwise(y)``; the same with ``F.when``).

    Returns:
        The rounded-up sum, of the addends' type.

    Example:
        >>> add_up_any(np.array([1.0]), np.array([2.0**-60]), np.where).tolist() == [
        ...     1.0 + 2.0**-52]
        True
    """
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return where(err > 0.0, s * _UP, s)


def half_square_up(t: Any, scale: float = 0.5) -> np.ndarray:
    """A double >= scale·t² (exact when ``fl(t²)`` is), for doubles t >= 0, scale 0.5 or 0.25.

    Args:
        t: Values (≥ 0, ``inf`` allowed).
        scale: 0.5 (ρ = (Δ/σ)²/2) or 0.25 (the stable law at α = 2).

    Returns:
        ``scale·fl(t²)``, t² moved one or two places up where it is inexact.

    Example:
        >>> half_square_up(np.array([2.0, 3.0])).tolist()
        [2.0, 4.5]
    """
    return _chunked(_half_square_up, np.asarray(t, dtype=np.float64), float(scale))


def _half_square_up(t: np.ndarray, scale: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        tt = np.atleast_1d(t)
        p = tt * tt
        _up_where(p, _two_prod_err(tt, tt, p) > 0.0)
        p *= scale
        if tt.size and (float(tt.max()) > 2.0**440 or float(tt.min()) < 2.0**-440):
            bad = np.flatnonzero((tt > 0) & ((tt < 2.0**-440) | (tt > 2.0**440)))
            if bad.size:
                tb = tt[bad]
                p[bad] = _fallback((scale * tb) * tb, np.ones(bad.size, dtype=bool))
    return p.reshape(t.shape)


def inflate(x: Any, ulps: Any, positive: Any = None) -> np.ndarray:
    """``x`` raised by a relative ``ulps·2**-52`` (0 and ``inf`` unchanged).

    This covers an error of the float evaluation of at most about ``ulps − 1`` ulps; values
    below 2**-1000 also get the smallest subnormal added.

    Args:
        x: Float evaluations (≥ 0) of a loss.
        ulps: A bound on their error in ulps, plus one (scalar or per value).
        positive: Where the exact value is > 0 (default: where x > 0); a 0 there (an underflow)
            becomes the smallest subnormal.

    Returns:
        Values never below the exact ones when the bound holds.

    Example:
        >>> v = inflate(np.array([0.0, 1.0, np.inf]), 8.0)
        >>> v[0], v[1] == 1.0 + 8.0 * 2.0**-52, v[2]
        (np.float64(0.0), np.True_, np.float64(inf))
    """
    x = np.asarray(x, dtype=np.float64)
    xx = np.atleast_1d(x)
    with np.errstate(over="ignore", invalid="ignore"):
        y = xx * (1.0 + np.asarray(ulps, dtype=np.float64) * _EPS)
        y = np.atleast_1d(np.asarray(y, dtype=np.float64))
        if y.shape != xx.shape:
            y = np.broadcast_to(y, xx.shape).copy()
        small = np.flatnonzero(xx < 2.0**-1000)   # 0 and tiny values (inf and NaN: unchanged)
        if small.size:
            xs = xx[small]
            pos = (xs > 0) if positive is None else (
                np.atleast_1d(np.broadcast_to(np.asarray(positive), xx.shape))[small] | (xs > 0))
            y[small] = np.where(pos, y[small] + _TINY, xs)
    return y.reshape(x.shape)


_PAGES_LOCK = threading.Lock()
_PAGES_DEPTH = [0, True]  # blocks inside `small_pages`, NumPy's setting before the first


def hugepage_setter() -> Any:
    """NumPy's switch of its huge-page advice (``_set_madvise_hugepage``), or ``None``.

    ``numpy._core.multiarray`` from NumPy 2, ``numpy.core.multiarray`` before (read without
    touching NumPy 2's deprecated ``numpy.core``).

    Example:
        >>> hugepage_setter() is None or callable(hugepage_setter())
        True
    """
    core = np.__dict__.get("_core")
    if core is None and int(np.__version__.split(".")[0]) < 2:
        core = getattr(np, "core", None)
    return getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)


@contextmanager
def small_pages() -> Iterator[None]:
    """NumPy's new large arrays without transparent huge pages while the block runs.

    NumPy advises the kernel to back each array of 4 MiB or more with 2 MiB pages
    (``madvise(MADV_HUGEPAGE)``). Where the kernel compacts memory to find such pages when they
    are first touched (``/sys/kernel/mm/transparent_hugepage/defrag`` = ``madvise``, as on the
    project's benchmark VM), the in-memory engine's fresh per-row arrays of millions of rows
    spent more system time in that compaction than in ordinary page faults: at 10M rows in
    row mode about 2 of 7.6 CPU-s (docs/performance.md). The advice is switched off for the
    block and restored when the last block open in the process ends (blocks may nest and run
    in several threads). It changes where memory comes from, never a value. A process started
    with ``NUMPY_MADVISE_HUGEPAGE`` set keeps NumPy's setting: its owner chose it.

    Example:
        >>> with small_pages():
        ...     float(np.ones(4).sum())
        4.0
    """
    setter = hugepage_setter()
    if setter is None or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        # another NumPy (its own default), or the process's owner chose the advice
        yield
        return
    with _PAGES_LOCK:
        if _PAGES_DEPTH[0] == 0:
            _PAGES_DEPTH[1] = bool(setter(False))
        _PAGES_DEPTH[0] += 1
    try:
        yield
    finally:
        with _PAGES_LOCK:
            _PAGES_DEPTH[0] -= 1
            if _PAGES_DEPTH[0] == 0:
                setter(_PAGES_DEPTH[1])
