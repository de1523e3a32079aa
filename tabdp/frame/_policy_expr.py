"""Per-record policies as engine expressions (Polars and Spark) that never under-report a loss.

A release charges each (unit, cell) row the mechanism's policy at the row's per-record
sensitivity Δ: ``(ρ, ε)`` and, for mechanisms accounted in approximate DP, ``(ε_a, δ_a)`` — the
tuple of ``_engine._Policy.__call__``. This module builds those losses as engine expressions from
public parameters only, one small expression tree per output rendered to Polars
(`policy_exprs`) or Spark (`spark_policy_columns`), so both engines evaluate the same
operations in the same order. Every output has one of four methods:

* ``"exact"``: a closed form using only correctly rounded operations (``+ − × ÷``, ``sqrt``,
  ``ceil``, rounding, comparisons) in the numpy policy's own order, or a constant / an integer
  table of the numpy policy's own values: bit-equal to the numpy policy in every engine.
* ``"bound"``: a closed form with transcendental functions (``log1p``, ``expm1``, ``tanh``,
  ``pow``, ...), whose last bits differ between libraries (numpy's SIMD code, glibc, Java). The
  result is multiplied by ``1 + K·2**-52``, K at least 64 times (1 + the form's condition number)
  — far above the few ulps each library's function may be off (at most 62 ulps apart before
  rounding up, on the test grid) — so it is never below the numpy value; the excess is below
  ``2**-40`` relative for Δ ≤ 2**65 (``2**-32`` beyond, where ``expm1`` chains amplify).
  Divisions by a constant are divisions by a column in Polars (which otherwise multiplies by
  the reciprocal, not a correctly rounded division).
* ``"table"``: policies without a closed form (the SaS ε, the Subbotin (ε, δ) policy): a public
  table over bins of Δ, `BINS_PER_OCTAVE` bins per octave of ``[2**TABLE_MIN_EXP,
  2**TABLE_MAX_EXP)``, each holding the numpy policy at the bin's upper end (rounded up by
  `TABLE_SLACK`); Δ = 0 gives the policy at 0, Δ below the table the first bin's value,
  Δ at or above the table ``inf``. This is an upper bound only where the policy is nondecreasing
  in Δ: the mechanism families tabulated here are (ε increasing in the shift), and every table is
  checked on a grid of points inside each bin when it is built; a table that fails the check is
  not used (the output falls back to ``"numpy"``). One exception: the Subbotin (ε, δ) policy
  (r > 1, r ≠ 2), whose values are certified in Arb at the bin's upper end and whose exact loss
  is nondecreasing in Δ (`_monotone_certified`), is built from its bin ends only: its table is
  never below the exact loss, but is not checked against numpy's value inside a bin.
* ``"numpy"``: the numpy policy itself, per batch (Polars ``map_batches``, a Spark pandas UDF).

Count releases know a public bound on Δ (the unit's rows in a cell: 1 in row mode,
``max_rows`` when set): with ``max_delta`` up to `COUNT_TABLE_MAX` each output is an
integer table of the numpy policy at Δ = 0, 1, …, max_delta (``"exact"``), and ``inf`` above.

The bin index is computed exactly (the exponent of Δ from ``log2`` corrected against exact
powers of two, the mantissa's leading bits by exact arithmetic), so a table gives the same value
in every engine.

Example:
    >>> import polars as pl
    >>> from tabdp.mechanisms import Gaussian
    >>> p = policy_exprs(Gaussian(sigma=2.0), pl.col("d"))
    >>> p.exact, p.methods
    (True, ('exact', 'exact'))
    >>> pl.DataFrame({"d": [0.0, 4.0]}).select(p.exprs[0].alias("rho"))["rho"].to_list()
    [0.0, 2.0]
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tabdp._numeric import ZCDP_ULPS as _ZCDP_ULPS
from tabdp._numeric import div_up, engine_thread, safe_range
from tabdp.exceptions import InvalidParameterError

__all__ = ["PolicyExprs", "PolicyPlan", "policy_plan", "policy_exprs", "spark_policy_columns",
           "next_up_expr", "magnitude_expr", "BINS_PER_OCTAVE", "TABLE_MIN_EXP", "TABLE_MAX_EXP",
           "TABLE_SLACK", "COUNT_TABLE_MAX"]

#: Bins per octave of Δ in a tabulated bound (a power of two; the relative width of a bin is at
#: most 1/BINS_PER_OCTAVE).
BINS_PER_OCTAVE = 64
#: Tables cover Δ in [2**TABLE_MIN_EXP, 2**TABLE_MAX_EXP) (fixed-point contributions are
#: multiples of 2**-24 and at most 2**64; a joint norm of m measures at most √m·2**64).
TABLE_MIN_EXP = -64
TABLE_MAX_EXP = 72
#: Relative amount each tabulated value is raised by above the numpy policy at the bin's end
#: (covers a relative non-monotonicity of the numpy evaluation up to this size, e.g. the
#: tolerance of the root finder behind the Subbotin (ε, δ) policy).
TABLE_SLACK = 2.0**-20
#: Largest public bound on a count's Δ tabulated exactly.
COUNT_TABLE_MAX = 1 << 16
#: Points checked inside each bin when a table is certified.
_CHECK_POINTS = 16
#: Base of the rounding-up factor of "bound" forms: 64 ulps per unit of condition number.
_K = 64.0
_U = 2.0**-52


# -- a tiny expression language, rendered to Polars and to Spark ------------------------------
def _binary(op: str, *, reflected: bool = False) -> Callable[[_N, Any], _N]:
    """The method ``self <op> o`` of `_N` (``o <op> self`` if ``reflected``); ``o`` made a node."""

    def method(self: _N, o: Any) -> _N:
        return _N(op, (_c(o), self) if reflected else (self, _c(o)))

    return method


@dataclass(frozen=True, eq=False)
class _N:
    """One node: ``op`` with child nodes ``args`` and a payload ``value``."""

    op: str
    args: tuple[_N, ...] = ()
    value: Any = None

    __add__ = _binary("+")
    __radd__ = _binary("+", reflected=True)
    __sub__ = _binary("-")
    __rsub__ = _binary("-", reflected=True)
    __mul__ = _binary("*")
    __rmul__ = _binary("*", reflected=True)
    __truediv__ = _binary("/")
    __rtruediv__ = _binary("/", reflected=True)
    __gt__ = _binary(">")
    __ge__ = _binary(">=")
    __lt__ = _binary("<")
    __le__ = _binary("<=")

    def __and__(self, o: _N) -> _N:
        return _N("and", (self, o))

    def __or__(self, o: _N) -> _N:
        return _N("or", (self, o))

    def __invert__(self) -> _N:
        return _N("not", (self,))


def _c(x: Any) -> _N:
    return x if isinstance(x, _N) else _N("c", (), float(x))


def _f(name: str, *args: Any) -> _N:
    return _N(name, tuple(_c(a) for a in args))


def _where(cond: _N, a: Any, b: Any) -> _N:
    return _N("where", (cond, _c(a), _c(b)))


def _eq(a: Any, b: Any) -> _N:
    return _N("==", (_c(a), _c(b)))


_INF = math.inf
_D = _N("d")


def _up(x: _N, k: Any) -> _N:
    """``x·(1 + k·2**-52)``: a bound form rounded up (inf unchanged).

    Below 2**-1000 (and Δ > 0) a few subnormals are added, above numpy's `inflate`.
    """
    y = x * (1.0 + _c(k) * _U) if isinstance(k, _N) else x * (1.0 + float(k) * _U)
    return y + _where((x < 2.0**-1000) & (_f("abs", _D) > 0.0), 8.0 * 2.0**-1074, 0.0)


def _not_pure(d: _N) -> _N:
    return _where(d > 0.0, _INF, 0.0)


def _to_zcdp_up(eps: _N) -> _N:
    """``ε·tanh(ε/2)`` (``inf`` at ε = inf) rounded up; ε must already be >= numpy's ε.

    numpy's `pure_to_zcdp` raises its value by ``ZCDP_ULPS`` ulps: this bound by ``_K`` more.
    """
    return _where(_N("isinf", (eps,)), _INF,
                  _up(eps * _f("tanh", 0.5 * eps), _K + _ZCDP_ULPS) + _where(eps > 0.0, _TINY, 0.0))


def _ceil(x: _N) -> _N:
    return _f("ceil", x)


# -- rounding up, operation for operation as tabdp._numeric (bit-equal to the numpy policy) ------
_SAFE_LO, _SAFE_HI = 2.0**-900, 2.0**900
_TINY = 2.0**-1074


def _bump(x: _N) -> _N:
    """One or two doubles up from a positive normal x (`tabdp._numeric`'s `_next_up`)."""
    return x * (1.0 + _U)


def _two_prod_err(a: _N, b: Any, p: _N) -> _N:
    ca = a * 134217729.0
    ah = ca - (ca - a)
    al = a - ah
    if isinstance(b, _N):
        cb = b * 134217729.0
        bh: Any = cb - (cb - b)
        bl: Any = b - bh
    else:  # a constant: its split in Python (the same correctly rounded operations)
        cbf = float(b) * 134217729.0
        bh = cbf - (cbf - float(b))
        bl = float(b) - bh
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _fallback(r: _N, pos: _N) -> _N:
    return _where(pos, r * (1.0 + 4.0 * _U) + _TINY, r)


def _div_up(x: _N, q: float) -> _N:
    """`tabdp._numeric.div_up` (x >= 0, a constant q > 0)."""
    q = float(q)
    r = x / q
    p = r * q
    below = ((p - x) + _two_prod_err(r, q, p)) < 0.0
    if not _SAFE_LO <= q <= _SAFE_HI:
        return _fallback(r, x > 0.0)
    lo, hi = safe_range(q)
    return _where((x >= lo) & (x <= hi), _where(below, _bump(r), r), _fallback(r, x > 0.0))


def _mul_up(x: _N, c: float) -> _N:
    """`tabdp._numeric.mul_up` (x >= 0, a constant c > 0)."""
    c = float(c)
    p = x * c
    if not _SAFE_LO <= c <= _SAFE_HI:
        return _fallback(p, x > 0.0)
    lo, hi = safe_range(1.0 / c)
    return _where((x >= lo) & (x <= hi),
                  _where(_two_prod_err(x, c, p) > 0.0, _bump(p), p), _fallback(p, x > 0.0))


def _add_up(a: _N, b: _N) -> _N:
    """`tabdp._numeric.add_up` (a, b >= 0)."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return _where(~_N("isinf", (s,)) & (err > 0.0), _bump(s), s)


def _half_square_up(t: _N, scale: float = 0.5) -> _N:
    """`tabdp._numeric.half_square_up` (t >= 0)."""
    p = t * t
    up = _where(_two_prod_err(t, t, p) > 0.0, _bump(p), p)
    safe = (t >= 2.0**-440) & (t <= 2.0**440)
    return _where(safe, up * scale, _fallback((scale * t) * t, t > 0.0))


def _inflate(x: _N, ulps: Any, pos: _N | None = None) -> _N:
    """`tabdp._numeric.inflate`."""
    k = (1.0 + _c(ulps) * _U) if isinstance(ulps, _N) else 1.0 + float(ulps) * _U
    y = x * k + _where(x < 2.0**-1000, _TINY, 0.0)
    p = (x > 0.0) if pos is None else (pos | (x > 0.0))
    return _where(p & ~_N("isinf", (x,)), y, x)


# -- rendering -----------------------------------------------------------------------------------
#: The nodes both engines render with Python's operators on their columns (Polars' division
#: by a constant aside, see `_render_pl`).
_OPERATORS: dict[str, Callable[..., Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "and": operator.and_, "or": operator.or_, "not": operator.invert,
}


def _render_pl(n: _N, d: pl.Expr, cache: dict[int, Any]) -> pl.Expr:
    key = id(n)
    if key in cache:
        return cache[key]
    a = [_render_pl(x, d, cache) for x in n.args]
    op = n.op
    out: pl.Expr
    if op == "d":
        out = d
    elif op == "c":
        out = pl.lit(n.value, dtype=pl.Float64)
    elif op == "/" and n.args[1].op == "c":
        # Polars divides by a scalar as a multiplication by its reciprocal (not correctly
        # rounded): divide by a column of the constant instead (IEEE division)
        out = a[0] / (d.is_nan().cast(pl.Float64) * 0.0 + n.args[1].value)
    elif op in _OPERATORS:
        out = _OPERATORS[op](*a)
    elif op == "where":
        out = pl.when(a[0]).then(a[1]).otherwise(a[2])
    elif op == "isinf":
        out = a[0].is_infinite()
    elif op == "abs":
        out = a[0].abs()
    elif op == "sqrt":
        out = a[0].sqrt()
    elif op == "ceil":
        out = a[0].ceil()
    elif op == "floor":
        out = a[0].floor()
    elif op == "rint":
        out = a[0].round(0, mode="half_to_even")
    elif op == "log1p":
        out = a[0].log1p()
    elif op == "log":
        out = a[0].log()
    elif op == "log2":
        out = a[0].log(2.0)
    elif op == "exp":
        out = a[0].exp()
    elif op == "expm1":
        out = _pl_expm1(a[0])
    elif op == "tanh":
        out = a[0].tanh()
    elif op == "asinh":
        out = a[0].arcsinh()
    elif op == "pow":
        out = a[0].pow(a[1])
    elif op == "pow2":  # 2**k for an integer-valued k, from a table of the exact powers
        k = a[0].clip(-1074.0, 1023.0).cast(pl.Int64) + 1074
        out = pl.lit(_POW2).gather(k)
    elif op == "lookup":  # value[i] for an integer-valued index i in range
        out = pl.lit(pl.Series(n.value, dtype=pl.Float64)).gather(
            a[0].cast(pl.Int64))
    elif op == "numpy":
        fn = n.value
        def batch(s: pl.Series, fn: Callable[[np.ndarray], Any] = fn) -> pl.Series:
            with engine_thread():  # on Polars' threads: NumPy's errors off, as the caller's
                return pl.Series(s.name, np.asarray(fn(s.to_numpy()), dtype=np.float64))

        out = a[0].map_batches(batch, return_dtype=pl.Float64, is_elementwise=True)
    else:  # pragma: no cover - internal
        raise AssertionError(op)
    cache[key] = out
    return out


#: 2**k for k = -1074 … 1023 (exact doubles), indexed by k + 1074.
_POW2 = pl.Series("pow2", np.ldexp(1.0, np.arange(-1074, 1024)), dtype=pl.Float64)


def _pl_expm1(x: pl.Expr) -> pl.Expr:
    # Polars has no expm1: e^x − 1 cancels for small x, so use expm1(x) = 2·tanh(x/2)/(1 −
    # tanh(x/2)) (no cancellation: both factors are computed to a few ulps) where |x| < 1.
    t = (0.5 * x).tanh()
    return pl.when(x.abs() < 1.0).then(2.0 * t / (1.0 - t)).otherwise(x.exp() - 1.0)


def _render_spark(n: _N, d: Any, cache: dict[int, Any]) -> Any:
    from pyspark.sql import functions as F

    key = id(n)
    if key in cache:
        return cache[key]
    a = [_render_spark(x, d, cache) for x in n.args]
    op = n.op
    if op == "d":
        out = d
    elif op == "c":
        out = F.lit(n.value).cast("double")
    elif op in _OPERATORS:
        out = _OPERATORS[op](*a)
    elif op == "where":
        out = F.when(a[0], a[1]).otherwise(a[2])
    elif op == "isinf":
        out = F.abs(a[0]) == F.lit(math.inf)
    elif op == "abs":
        out = F.abs(a[0])
    elif op == "sqrt":
        out = F.sqrt(a[0])
    elif op in ("ceil", "floor"):
        # Spark's ceil/floor return a 64-bit integer: doubles of magnitude >= 2**52 are
        # integers already (and inf/NaN stay as they are)
        fn = F.ceil if op == "ceil" else F.floor
        small = F.abs(a[0]) < F.lit(2.0**52)
        out = F.when(small, fn(F.when(small, a[0])).cast("double")).otherwise(a[0])
    elif op == "rint":
        small = F.abs(a[0]) < F.lit(2.0**52)
        out = F.when(small, F.bround(F.when(small, a[0]), 0)).otherwise(a[0])
    elif op == "log1p":
        out = F.log1p(a[0])
    elif op == "log":
        out = F.log(a[0])
    elif op == "log2":
        out = F.log2(a[0])
    elif op == "exp":
        out = F.exp(a[0])
    elif op == "expm1":
        out = F.expm1(a[0])
    elif op == "tanh":
        out = F.tanh(a[0])
    elif op == "asinh":
        out = F.asinh(a[0])
    elif op == "pow":
        out = F.pow(a[0], a[1])
    elif op == "pow2":  # Java's pow is exact for integer arguments with a representable result
        out = F.pow(F.lit(2.0), a[0])
    elif op == "lookup":
        arr = F.array(*[F.lit(float(v)) for v in n.value])
        out = F.element_at(arr, a[0].cast("int") + F.lit(1))
    elif op == "numpy":
        out = _spark_numpy_udf(n.value)(a[0])
    else:  # pragma: no cover - internal
        raise AssertionError(op)
    cache[key] = out
    return out


def _spark_numpy_udf(fn: Callable[[np.ndarray], np.ndarray]) -> Any:
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    def run(s: pd.Series) -> pd.Series:
        with engine_thread():  # a Spark worker: NumPy's errors off, no thread pools of ours
            return pd.Series(np.asarray(fn(s.to_numpy(dtype=np.float64)), dtype=np.float64))

    # the hints as objects: PySpark reads them to choose the UDF's kind, and the module's
    # postponed annotations name ``pd``, which is not a global here
    run.__annotations__ = {"s": pd.Series, "return": pd.Series}
    return pandas_udf(run, "double")


def next_up_expr(x: pl.Expr) -> pl.Expr:
    """``numpy.nextafter(x, inf)`` for positive normal doubles ``x`` (Polars), exactly.

    The exponent of x is taken from ``log2`` and corrected against exact powers of two, so the
    result is the next double above x (``x + 2**(e − 52)``).

    Args:
        x: A Float64 expression of positive normal values.

    Returns:
        The next double above each value.

    Example:
        >>> import polars as pl
        >>> s = pl.DataFrame({"x": [1.0, 2.0**60 + 2.0**8]}).select(next_up_expr(pl.col("x")))
        >>> s["x"].to_list() == [float(np.nextafter(v, np.inf)) for v in (1.0, 2.0**60 + 2.0**8)]
        True
    """
    return _render_pl(_next_up(_D), x, {})


def magnitude_expr(values: pl.Expr, bits: int) -> pl.Expr:
    """``|value|·2**-bits`` as Float64, never below the exact magnitude (Polars, lazily).

    The expression twin of ``_engine._abs_float_up``: integers of 2**53 and more may round
    down when cast to Float64, so their magnitude is moved to the next double up.

    Args:
        values: Fixed-point integer contributions (any integer dtype, e.g. Int128).
        bits: Their fractional bits (the value is ``integer·2**-bits``).

    Returns:
        A Float64 expression of upper bounds of the magnitudes.

    Example:
        >>> import polars as pl
        >>> df = pl.DataFrame({"x": [-3, 2**60 + 1]}, schema={"x": pl.Int128})
        >>> df.select(magnitude_expr(pl.col("x"), 1))["x"].to_list() == [1.5, 2.0**59 + 2.0**7]
        True
    """
    a = values.abs()
    f = a.cast(pl.Float64) * (2.0 ** -bits)
    return pl.when(a >= (1 << 53)).then(next_up_expr(f)).otherwise(f)


def _exponent(x: _N) -> _N:
    """floor(log2 x) exactly, for positive normal x (one correction of the float log2)."""
    e0 = _f("floor", _f("log2", x))
    p = _f("pow2", e0)
    return _where(p > x, e0 - 1.0, _where(2.0 * p <= x, e0 + 1.0, e0))


def _next_up(x: _N) -> _N:
    return x + _f("pow2", _exponent(x) - 52.0)


# -- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PolicyPlan:
    """The public evaluation plan of one mechanism's per-record policy.

    Attributes:
        outputs: Names of the losses, in the order of ``_Policy.__call__``: ``("rho",
            "epsilon")`` plus ``("eps_a", "delta_a")`` for approximate-DP mechanisms.
        methods: How each output is evaluated: ``"exact"``, ``"bound"``, ``"table"`` or
            ``"numpy"`` (module docstring).
        nodes: Internal expression trees, one per output.

    Example:
        >>> from tabdp.mechanisms import Laplace
        >>> policy_plan(Laplace(scale=1.0)).methods
        ('bound', 'exact')
    """

    outputs: tuple[str, ...]
    methods: tuple[str, ...]
    nodes: tuple[_N, ...]

    @property
    def exact(self) -> bool:
        """Whether every output is bit-equal to the numpy policy (``"exact"`` or ``"numpy"``).

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> policy_plan(Gaussian(sigma=1.0)).exact
            True
        """
        return all(m in ("exact", "numpy") for m in self.methods)

    @property
    def native(self) -> bool:
        """Whether every output is an engine expression (no numpy fallback per batch).

        Example:
            >>> from tabdp.mechanisms import Laplace
            >>> policy_plan(Laplace(scale=1.0)).native
            True
        """
        return all(m != "numpy" for m in self.methods)


@dataclass(frozen=True)
class PolicyExprs:
    """Per-record loss expressions of one mechanism for one engine.

    Attributes:
        exprs: ρ, ε (and ε_a, δ_a for approximate-DP mechanisms) at each row's Δ: Polars
            expressions (`policy_exprs`) or Spark columns (`spark_policy_columns`).
        exact: True when every output is bit-equal to the numpy policy (methods ``"exact"``
            and ``"numpy"``); otherwise the other outputs are upper bounds of it (never below;
            the Subbotin (ε, δ) table: never below the exact loss, see the module notes).
        methods: Per output: ``"exact"``, ``"bound"``, ``"table"`` or ``"numpy"``.

    Example:
        >>> import polars as pl
        >>> from tabdp.mechanisms import Laplace
        >>> p = policy_exprs(Laplace(scale=2.0), pl.col("d"))
        >>> p.exact, len(p.exprs)
        (False, 2)
    """

    exprs: tuple[Any, ...]
    exact: bool
    methods: tuple[str, ...]


def _outputs(mech: Any) -> tuple[str, ...]:
    approx = getattr(mech, "dp_delta", None) is not None
    return ("rho", "epsilon", "eps_a", "delta_a") if approx else ("rho", "epsilon")


def _numpy_fns(mech: Any) -> list[Callable[[np.ndarray], np.ndarray]]:
    """The numpy policy, one function per output (as ``_engine._Policy.__call__``)."""
    def rho(d: np.ndarray) -> np.ndarray:
        return np.asarray(mech.rho(d), dtype=np.float64)

    def eps(d: np.ndarray) -> np.ndarray:
        return np.asarray(mech.epsilon(d), dtype=np.float64)

    fns: list[Callable[[np.ndarray], np.ndarray]] = [rho, eps]
    if getattr(mech, "dp_delta", None) is not None:
        def ea(d: np.ndarray) -> np.ndarray:
            return np.asarray(mech.approx_policy(d)[0], dtype=np.float64)

        def da(d: np.ndarray) -> np.ndarray:
            return np.asarray(mech.approx_policy(d)[1], dtype=np.float64)

        fns += [ea, da]
    return fns


def _closed_forms(mech: Any) -> list[tuple[str, _N] | None] | None:
    """(method, node) per output for the mechanisms with closed forms; None entries: no form."""
    from tabdp.frame._quantiles import GroupPrivacyPolicy
    from tabdp.mechanisms import (
        DiscreteGaussian,
        DiscreteLaplace,
        ExpPolyLog,
        Gaussian,
        GeneralizedGaussian,
        Laplace,
        Logistic,
        LogTransform,
        RootTransform,
        Subbotin,
        SymmetricStable,
        UnitSplitting,
    )
    from tabdp.mechanisms.smooth import SmoothSensitivityMechanism, SmoothSensitivityRelease

    d = _f("abs", _D)
    t = type(mech)

    def half_sq(x: _N) -> _N:  # numpy's 0.5 * x * x
        return (0.5 * x) * x

    if t is Gaussian:
        return [("exact", _half_square_up(_div_up(d, mech.sigma))), ("exact", _not_pure(d))]
    if t in (Laplace, Logistic):
        e = _div_up(d, mech.scale)
        return [("bound", _to_zcdp_up(e)), ("exact", e)]
    if t is GeneralizedGaussian:
        x = _div_up(d, mech.sigma)
        if mech.p in (1.0, 0.5):  # numpy's ** takes these exactly (x, sqrt x)
            e = x if mech.p == 1.0 else _inflate(_f("sqrt", x), 4.0)
            return [("bound", _to_zcdp_up(e)), ("exact", e)]
        e = _up(_f("pow", x, mech.p), 2.0 * _K + 4.0)
        return [("bound", _to_zcdp_up(e)), ("bound", e)]
    if t is ExpPolyLog:
        h = _f("log1p", d / (mech.sigma * mech.a))
        if mech.p == 1.0:
            e = _up(mech.d * h, 2.0 * _K)
        else:
            l0 = math.log(mech.a)
            y = mech.p * _f("log1p", h / l0)
            e = _up((mech.d * l0**mech.p) * _f("expm1", y), _K * (3.0 + y))
        return [("bound", _to_zcdp_up(e)), ("bound", e)]
    if t in (RootTransform, LogTransform):
        a = float(mech.offset)
        k = float(getattr(mech, "k", 1.0))
        exact = False
        if t is RootTransform and a == 0.0 and k == 1.0:
            return [("exact", _half_square_up(_div_up(d, mech.sigma))), ("exact", _not_pure(d))]
        if t is RootTransform and a == 0.0:
            if k == 2.0:
                gap, exact = _f("sqrt", d), True
            else:
                gap = _up(_f("pow", d, 1.0 / k), 2.0 * _K)
        else:
            r = d / a
            lr = _where(_N("isinf", (r,)) & ~_N("isinf", (d,)),
                        (_f("log", d) + _f("log1p", a / d)) - math.log(a), _f("log1p", r))
            if t is LogTransform:
                gap = _up(lr, 2.0 * _K)
            else:
                lk = lr / k
                ak = a ** (1.0 / k)
                big = lk + math.log(a) / k
                gap = _where(lk < 700.0, _up(ak * _f("expm1", lk), _K * (3.0 + lk)),
                             _up(_f("exp", big) - ak, _K * (3.0 + _f("abs", big))))
        g = gap / mech.sigma
        rho = (g * g) * 0.5
        if exact:  # numpy: ρ raised by 16 ulps (`_gap_ulps`), the same operations
            return [("exact", _inflate(rho, 16.0, d > 0.0)), ("exact", _not_pure(d))]
        ulps = (16.0 * (3.0 + lr / k + abs(math.log(a)) / k) if a > 0.0 and t is RootTransform
                else 16.0)  # numpy's `_gap_ulps`
        return [("bound", _up(_inflate(rho, 16.0, d > 0.0), _K) if a == 0.0
                 else _up(rho, _K + ulps)), ("exact", _not_pure(d))]
    if t is UnitSplitting:
        x = d / mech.threshold
        r = _f("rint", x)
        ax = _f("abs", x)
        tol = (8.0 * float(np.finfo(np.float64).eps)) * _where(ax > 1.0, ax, 1.0)
        dist = _f("abs", x - r)
        cs = _where((dist <= tol) & (dist < 2.0**-20), r, _ceil(x))  # `ceil_snap`
        rows = _where(cs > 1.0, cs, 1.0)  # np.maximum(1, ·): cs is never NaN here
        c = float(np.asarray(div_up(mech.threshold, mech.sigma)))
        split = _half_square_up(_mul_up(rows, c))
        gauss = _half_square_up(_div_up(d, mech.sigma))
        return [("exact", _where(split >= gauss, split, gauss)),
                ("exact", _where(d >= 0.0, _INF, _INF))]
    if t is SymmetricStable:
        if mech.alpha == 2.0:
            return [("exact", _half_square_up(_div_up(d, mech.gamma), 0.25)),
                    ("exact", _not_pure(d))]
        if mech.alpha == 1.0:
            g = _div_up(d, mech.gamma)
            e = _up(2.0 * _f("asinh", 0.5 * g), 2.0 * _K + 8.0)
            return [("bound", _to_zcdp_up(e)), ("bound", e)]
        return None  # tabulated
    if t is Subbotin:  # (VectorSubbotin: joint; the engine evaluates it at the norm Δ)
        base: list[tuple[str, _N] | None]
        if mech.r == 1.0:
            e = _div_up(d, mech.scale)
            base = [("bound", _to_zcdp_up(e)), ("exact", e)]
        elif mech.r == 2.0:
            base = [("exact", _half_square_up(_div_up(d, mech.scale))), ("exact", _not_pure(d))]
        else:
            base = [("exact", _not_pure(d)), ("exact", _not_pure(d))]
        if mech.dp_delta is not None:
            base += [None, ("exact", _where(d > 0.0, float(mech.dp_delta), 0.0))]
        return base
    if type(mech).__name__ == "VectorSubbotin":
        if mech.r == 1.0:
            e = _div_up(d, mech.scale)
            return [("bound", _to_zcdp_up(e)), ("exact", e)]
        return [("exact", _half_square_up(_div_up(d, mech.scale))), ("exact", _not_pure(d))]
    if t is DiscreteGaussian:
        # numpy: RU(RU(Δ/σ)²)/2 for integer Δ (≤ (Δ/σ)²/2·(1 + 6.1u)); here fl-based, raised
        is_int = ~_N("isinf", (d,)) & _eq(d, _f("floor", d))
        x = d / float(mech.sigma)
        return [("bound", _where(is_int, _up(half_sq(x), _K), _INF)), ("exact", _not_pure(d))]
    if t is DiscreteLaplace:
        is_int = ~_N("isinf", (d,)) & _eq(d, _f("floor", d))
        e = _where(is_int, _up(d / float(mech.scale), 8.0), _INF)
        return [("bound", _up(_to_zcdp_up(e), 2.0 * _K)), ("bound", e)]
    if t is SmoothSensitivityMechanism:
        r0 = float(np.asarray(mech.rho(np.array([1.0])))[0])
        e0 = float(np.asarray(mech.epsilon(np.array([1.0])))[0])
        return [("exact", _where(d > 0.0, r0, 0.0)), ("exact", _where(d > 0.0, e0, 0.0))]
    if t is GroupPrivacyPolicy and isinstance(mech.mechanism, SmoothSensitivityRelease):
        rel = mech.mechanism
        kk = _ceil(d)
        e1, e2 = float(rel.eps_value), float(rel.eps_scale)
        eps = _add_up(_mul_up(kk, e1), _mul_up(kk, e2))
        if mech.pure:
            out: list[tuple[str, _N] | None] = [
                ("bound", _up(_to_zcdp_up(_mul_up(kk, e1)) + _to_zcdp_up(_mul_up(kk, e2)), 4.0)),
                ("exact", eps)]
        else:
            out = [("exact", _where(kk > 0.0, _INF, 0.0)), ("exact", _where(kk > 0.0, _INF, 0.0))]
        if mech.dp_delta is not None:
            arg = (kk - 1.0) * e1
            dl = _up((kk * _f("exp", arg)) * float(mech.dp_delta), (_K + 8.0) * (3.0 + arg))
            dl = _where(kk > 0.0, dl, 0.0)
            out += [("exact", eps), ("bound", _where(dl < 1.0, dl, 1.0))]
        return out
    return None


def _table_node(fn: Callable[[np.ndarray], np.ndarray], bins: int,
                monotone: bool = False) -> _N | None:
    """A certified tabulated upper bound of ``fn`` over Δ ≥ 0, or None if not certified.

    ``monotone``: ``fn`` is known to bound a loss that is nondecreasing in Δ (see
    `_table_values`).
    """
    vals = _table_values(fn, bins, monotone)
    if vals is None:
        return None
    v0, vlow, table = vals
    d, idx = _table_index(bins)
    lo, hi = 2.0**TABLE_MIN_EXP, 2.0**TABLE_MAX_EXP
    look = _N("lookup", (idx,), tuple(table.tolist()))
    return _where(_eq(d, 0.0), v0, _where(d < lo, vlow, _where(d < hi, look, _INF)))


@functools.lru_cache(maxsize=8)
def _table_index(bins: int) -> tuple[_N, _N]:
    """|Δ| and its bin index (one shared tree, so engines compute it once for all tables)."""
    d = _f("abs", _D)
    lo, hi = 2.0**TABLE_MIN_EXP, 2.0**TABLE_MAX_EXP
    dd = _where((d >= lo) & (d < hi), d, lo)  # keeps the index arithmetic in range
    e = _exponent(dd)
    m = dd / _f("pow2", e)                       # exact: in [1, 2)
    j = _f("floor", (m - 1.0) * float(bins))     # exact: bins is a power of two
    return d, (e - float(TABLE_MIN_EXP)) * float(bins) + j


def _table_values(fn: Callable[[np.ndarray], np.ndarray], bins: int,
                  monotone: bool = False) -> tuple[float, float, np.ndarray] | None:
    """(value at 0, value below the first bin, one value per bin) or None if not certified.

    Each bin holds ``fn`` at the bin's upper end, raised by `TABLE_SLACK`. In general the table
    is certified by evaluating ``fn`` at `_CHECK_POINTS` points inside each bin and at every
    power of two below the first bin. With ``monotone`` (``fn`` is a certified upper bound,
    point by point, of an exact loss that is nondecreasing in Δ) the value at the upper end
    already bounds the exact loss at every Δ of the bin, so only the table's own order is
    checked: 1/(1 + _CHECK_POINTS) of the evaluations, for policies whose every value costs an
    Arb evaluation (the Subbotin (ε, δ) policy).
    """
    octs = np.arange(TABLE_MIN_EXP, TABLE_MAX_EXP, dtype=np.float64)
    j = np.arange(bins, dtype=np.float64)
    lower = (np.ldexp(1.0, octs.astype(int))[:, None] * (1.0 + j[None, :] / bins)).ravel()
    upper = (np.ldexp(1.0, octs.astype(int))[:, None] * (1.0 + (j[None, :] + 1) / bins)).ravel()
    with np.errstate(all="ignore"):
        top = np.asarray(fn(upper), dtype=np.float64)
        table = np.where(np.isfinite(top) & (top > 0), top * (1.0 + TABLE_SLACK), top)
        below = np.asarray(fn(np.array([0.0, 2.0**TABLE_MIN_EXP])), dtype=np.float64)
        if monotone:
            inside = np.zeros((table.size, 0))
            sub = below[:0]
        else:
            # certification: the numpy policy at points inside each bin never exceeds its value
            tau = np.linspace(0.0, 1.0, _CHECK_POINTS, endpoint=False)
            pts = lower[:, None] + (upper - lower)[:, None] * tau[None, :]
            inside = np.asarray(fn(pts.ravel()), dtype=np.float64).reshape(pts.shape)
            sub = np.asarray(fn(np.ldexp(1.0, np.arange(-1074, TABLE_MIN_EXP))),
                             dtype=np.float64)
    if np.any(np.isnan(inside)) or np.any(np.isnan(table)) or np.any(np.isnan(below)):
        return None
    if np.any(inside > table[:, None]):
        return None
    # nondecreasing, compared without subtracting (inf - inf would warn)
    if np.any(sub > below[1]) or np.any(table[1:] < table[:-1]):
        return None
    return float(below[0]), float(below[1] * (1.0 + TABLE_SLACK)), table


def _count_table_node(fn: Callable[[np.ndarray], np.ndarray], max_delta: int) -> _N:
    vals = np.asarray(fn(np.arange(max_delta + 1, dtype=np.float64)), dtype=np.float64)
    d = _f("abs", _D)
    ok = _eq(d, _f("floor", d)) & (d <= float(max_delta))
    safe = _where(ok, d, 0.0)
    return _where(ok, _N("lookup", (safe,), tuple(vals.tolist())), _INF)


def _monotone_certified(mech: Any, output: str) -> bool:
    """Whether the numpy ``output`` of ``mech`` bounds, point by point, a loss nondecreasing in Δ.

    The Subbotin (ε, δ) policy for r > 1, r ≠ 2: each value is certified in Arb ball arithmetic
    (never below the exact ε at δ, `tabdp.privacy.approx`), and the exact ε at δ is
    nondecreasing in Δ. The argument needs a log-concave density (r ≥ 1; for r < 1, which the
    constructor refuses, the set below is an interval, not a half-line, so the guard asks for
    r > 1 itself). For a symmetric log-concave density f, the likelihood ratio of the
    shifted pair is monotone, so the hockey-stick divergence δ_b(ε) = sup_A P(X + b ∈ A) −
    e^ε·P(X ∈ A) is attained on a half-line A = (c_b, ∞). For b′ ≥ b the same half-line gives
    δ_b′(ε) ≥ S(c_b − b′) − e^ε·S(c_b) ≥ S(c_b − b) − e^ε·S(c_b) = δ_b(ε) (S, the tail,
    decreases), so ε(δ) = min{ε : δ_b(ε) ≤ δ} cannot decrease as b grows. (The certified
    policy already relies on this to certify at a shift rounded up.)
    """
    from tabdp.mechanisms import Subbotin

    return (output == "eps_a" and type(mech) is Subbotin and mech.r > 1.0 and mech.r != 2.0
            and mech.dp_delta is not None)


@functools.lru_cache(maxsize=64)
def _plan_cached(mech: Any, kind: str, max_delta: int | None, bins: int) -> PolicyPlan:
    outputs = _outputs(mech)
    fns = _numpy_fns(mech)
    if kind == "count" and max_delta is not None and 0 <= max_delta <= COUNT_TABLE_MAX:
        nodes = tuple(_count_table_node(fn, max_delta) for fn in fns)
        return PolicyPlan(outputs, tuple("exact" for _ in outputs), nodes)
    forms = _closed_forms(mech)
    methods: list[str] = []
    nodes_l: list[_N] = []
    for i, fn in enumerate(fns):
        form = forms[i] if forms is not None else None
        if form is not None:
            methods.append(form[0])
            nodes_l.append(form[1])
            continue
        node = _table_node(fn, bins, _monotone_certified(mech, outputs[i]))
        if node is not None:
            methods.append("table")
            nodes_l.append(node)
        else:
            methods.append("numpy")
            nodes_l.append(_N("numpy", (_D,), fn))
    return PolicyPlan(outputs, tuple(methods), tuple(nodes_l))


def _check_kind(kind: str, owner: str) -> None:
    if kind not in ("sum", "count"):
        raise InvalidParameterError(
            f"{owner}: kind must be 'sum' or 'count'; got {kind!r}.\nHint: the kind of the "
            "release whose per-record losses are charged.")


def policy_plan(mechanism: Any, kind: str = "sum", *, max_delta: int | None = None,
                bins_per_octave: int = BINS_PER_OCTAVE) -> PolicyPlan:
    """How a mechanism's per-record policy is evaluated in an engine (public parameters only).

    Args:
        mechanism: A tabdp mechanism (or a policy object with ``rho``/``epsilon`` and, for
            approximate DP, ``dp_delta``/``approx_policy``, such as ``GroupPrivacyPolicy``).
        kind: ``"sum"`` or ``"count"``.
        max_delta: Counts only: a public bound on Δ (the unit's rows in a cell: 1 in row mode,
            ``max_rows`` when set); up to `COUNT_TABLE_MAX` every output is then an exact
            integer table (``inf`` above the bound).
        bins_per_octave: Bins per octave of tabulated bounds (a power of two).

    Returns:
        The `PolicyPlan` (cached per mechanism and arguments).

    Raises:
        InvalidParameterError: For an unknown kind or a bin count that is not a power of two.

    Example:
        >>> from tabdp.mechanisms import SymmetricStable, DiscreteGaussian
        >>> policy_plan(SymmetricStable(alpha=1.5, gamma=1.0)).methods
        ('table', 'table')
        >>> policy_plan(DiscreteGaussian(sigma=2.0), "count", max_delta=1).methods
        ('exact', 'exact')
    """
    _check_kind(kind, "policy_plan")
    b = bins_per_octave
    if isinstance(b, bool) or not isinstance(b, int) or b < 1 or b & (b - 1):
        raise InvalidParameterError(
            f"policy_plan: bins_per_octave must be a power of two >= 1; got {b!r}.\n"
            "Hint: e.g. bins_per_octave=64 (bins at most 1/64 of an octave wide).")
    md = None if max_delta is None else int(max_delta)
    try:
        hash(mechanism)
    except TypeError:  # unhashable policy object: not cached
        return _plan_cached.__wrapped__(mechanism, kind, md, b)
    return _plan_cached(mechanism, kind, md, b)


def policy_exprs(mechanism: Any, delta: pl.Expr, kind: str = "sum", *,
                 max_delta: int | None = None,
                 bins_per_octave: int = BINS_PER_OCTAVE) -> PolicyExprs:
    """Polars expressions of the per-record losses (ρ, ε[, ε_a, δ_a]) at Δ = ``delta``.

    ``delta`` must be a Float64 expression of values ≥ 0 that are already upper bounds of the
    true per-record sensitivities. Each output is bit-equal to the numpy policy (``"exact"``)
    or never below it (``"bound"``, ``"table"``; the Subbotin (ε, δ) table is never below the
    exact loss, see the module notes); ``"numpy"`` outputs call the numpy policy per batch
    (``map_batches``, elementwise).

    Args:
        mechanism: The mechanism (or policy object) charged.
        delta: Δ per row.
        kind: ``"sum"`` or ``"count"``.
        max_delta: Counts only: public bound on Δ (see `policy_plan`).
        bins_per_octave: Bins per octave of tabulated bounds (a power of two).

    Returns:
        `PolicyExprs` with one expression per output.

    Example:
        >>> import polars as pl
        >>> from tabdp.mechanisms import LogTransform
        >>> p = policy_exprs(LogTransform(sigma=2.0, offset=1.0), pl.col("d"))
        >>> df = pl.DataFrame({"d": [10000.0]}).select(p.exprs[0].alias("rho"))
        >>> round(df["rho"][0], 3), p.methods           # ln(10001)²/8, rounded up
        (10.604, ('bound', 'exact'))
    """
    _check_kind(kind, "policy_exprs")
    plan = policy_plan(mechanism, kind, max_delta=max_delta, bins_per_octave=bins_per_octave)
    cache: dict[int, Any] = {}
    exprs = tuple(_render_pl(n, delta.cast(pl.Float64), cache) for n in plan.nodes)
    return PolicyExprs(exprs, plan.exact, plan.methods)


def spark_policy_columns(mechanism: Any, delta: Any, kind: str = "sum", *,
                         max_delta: int | None = None,
                         bins_per_octave: int = BINS_PER_OCTAVE) -> PolicyExprs:
    """Spark columns of the per-record losses (ρ, ε[, ε_a, δ_a]) at Δ = ``delta``.

    The same expression trees as `policy_exprs`, rendered with
    ``pyspark.sql.functions``: exact outputs equal the numpy policy bit for bit; tables are
    array literals indexed with ``element_at``; ``"numpy"`` outputs are pandas UDFs.

    Args:
        mechanism: The mechanism (or policy object) charged.
        delta: A double Spark column of Δ ≥ 0.
        kind: ``"sum"`` or ``"count"``.
        max_delta: Counts only: public bound on Δ (see `policy_plan`).
        bins_per_octave: Bins per octave of tabulated bounds (a power of two).

    Returns:
        `PolicyExprs` with Spark columns.

    With a Spark session, ``spark_policy_columns(Gaussian(1.0), F.col("d")).exprs[0]`` is the
    column ``(0.5 * (d / 1.0)) * (d / 1.0)`` (``d`` = ``abs(Δ)``), equal to numpy's ρ.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> policy_plan(Gaussian(sigma=1.0)).exact          # the plan this function renders
        True
        >>> try:                                             # checked before Spark is needed
        ...     spark_policy_columns(Gaussian(sigma=1.0), None, kind="mean")
        ... except ValueError as err:
        ...     print(str(err).splitlines()[0])
        spark_policy_columns: kind must be 'sum' or 'count'; got 'mean'.
    """
    _check_kind(kind, "spark_policy_columns")
    plan = policy_plan(mechanism, kind, max_delta=max_delta, bins_per_octave=bins_per_octave)
    cache: dict[int, Any] = {}
    cols = tuple(_render_spark(n, delta, cache) for n in plan.nodes)
    return PolicyExprs(cols, plan.exact, plan.methods)
