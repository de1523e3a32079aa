"""Policies as engine expressions (tabdp.frame._policy_expr): exact, rounded up or tabulated.

Every mechanism family of the registry is evaluated on a wide grid of Δ (0, subnormals, powers
of two and their neighbours, 2**53, 2**64, log-uniform values, integers) by the Polars
expressions and by the numpy policy (``_engine._Policy``): "exact" outputs must be bit-equal,
"bound" outputs never below and within a relative 2**-38, "table" outputs never below and at
most the policy at the end of the Δ's bin (Δ·(1 + 1/64)), times 1 + 2**-20.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
import tabdp.mechanisms as M
from tabdp import registry
from tabdp.frame import _policy_expr as pe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _mechanism_cases import CASES  # noqa: E402

#: Expected method per output (ρ, ε[, ε_a, δ_a]) for the first instance of some families.
METHODS = {
    "gaussian": ("exact", "exact"),
    "laplace": ("bound", "exact"),
    "unit_splitting": ("exact", "exact"),
    "discrete_gaussian": ("bound", "exact"),
}

_ALL = [(fam, i, m) for fam, ms in CASES.items() for i, m in enumerate(ms)]
_IDS = [f"{fam}-{i}" for fam, i, _ in _ALL]
# The table of the Subbotin (ε, δ) policy (r ∉ {1, 2}) evaluates the certified policy (Arb,
# ~1 ms per distinct Δ) at its ~8,700 bin ends (~6 CPU-s; monotone, so no inner points), and
# this test's numpy reference at ~50,000 more (~45 CPU-s): tested as slow.
_SLOW = pytest.mark.slow
_ALL_P = [pytest.param(*c, marks=_SLOW, id=i)
          if isinstance(c[2], M.Subbotin) and c[2].dp_delta is not None and c[2].r not in (1.0, 2.0)
          else pytest.param(*c, id=i) for c, i in zip(_ALL, _IDS, strict=True)]


def _grid() -> np.ndarray:
    rng = np.random.default_rng(20261126)
    p2 = np.exp2(np.arange(-80.0, 90.0))
    return np.concatenate([
        [0.0, 5e-324, 1e-310, 2.0**-1022, 2.0**-24, 0.5, 1.0, 2.1, 2.0**53, 2.0**53 + 2.0,
         2.0**64, 1.5 * 2.0**64, 1e30, 1e300],
        p2, p2 * (1.0 + 2.0**-52), p2 * (1.0 - 2.0**-53),
        np.exp2(rng.uniform(-40.0, 70.0, 20_000)),
        rng.integers(0, 5000, 3000).astype(np.float64),
        rng.integers(0, 5000, 3000) * 0.7,
    ])


GRID = _grid()


def _reference(m: Any, d: np.ndarray) -> list[np.ndarray]:
    """The numpy policy of ``_engine._Policy.__call__`` (also for objects without dp_delta)."""
    out = [np.asarray(m.rho(d), dtype=np.float64), np.asarray(m.epsilon(d), dtype=np.float64)]
    if getattr(m, "dp_delta", None) is not None:
        ea, da = m.approx_policy(d)
        out += [np.asarray(ea, dtype=np.float64), np.asarray(da, dtype=np.float64)]
    return out


def _polars(m: Any, d: np.ndarray, **kw: Any) -> tuple[list[np.ndarray], pe.PolicyExprs]:
    p = pe.policy_exprs(m, pl.col("d"), **kw)
    df = pl.DataFrame({"d": d}).select([e.alias(f"o{i}") for i, e in enumerate(p.exprs)])
    return [df[f"o{i}"].to_numpy() for i in range(len(p.exprs))], p


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a == b) | (np.isnan(a) & np.isnan(b))


def test_every_family_covered() -> None:
    fams = {f.name for f in registry.families("mechanism")}
    assert fams == set(CASES), fams ^ set(CASES)


@pytest.mark.parametrize(("fam", "i", "mech"), _ALL_P)
def test_never_below_numpy_and_exact_where_claimed(fam: str, i: int, mech: Any) -> None:
    vals, p = _polars(mech, GRID)
    ref = _reference(mech, GRID)
    assert len(vals) == len(ref) == len(p.methods)
    if i == 0 and fam in METHODS:
        assert p.methods == METHODS[fam]
    assert p.exact == all(x in ("exact", "numpy") for x in p.methods)
    for v, r, how in zip(vals, ref, p.methods, strict=True):
        assert not np.any(np.isnan(v))
        if how == "exact":
            assert np.array_equal(v, r), np.flatnonzero(~_same(v, r))[:5]
            continue
        assert np.all(v >= r), (how, GRID[v < r][:5])
        fin = np.isfinite(r) & (r > 0)
        assert np.array_equal(np.isfinite(v[(GRID < 2.0**72) | ~fin]),
                              np.isfinite(r[(GRID < 2.0**72) | ~fin]))
        assert np.all(v[r == 0] == 0) or how == "table"
        if how == "bound":
            # below 2**-1000 a bound is a few subnormals above numpy's (rounded up) value
            tiny = fin & (r < 2.0**-1000)
            assert np.all(v[tiny] <= r[tiny] * (1.0 + 2.0**-38) + 16 * 2.0**-1074)
            fin &= ~tiny
            # the slack grows with the form's condition number (≈ ln Δ for expm1 chains)
            small = fin & (GRID <= 2.0**65)
            assert np.all(v[small] <= r[small] * (1.0 + 2.0**-38))
            assert np.all(v[fin] <= r[fin] * (1.0 + 2.0**-32))
        elif how == "table":
            # at most the policy at the end of Δ's bin, raised by TABLE_SLACK. The end is found
            # here from Δ (frexp), apart from the engines' index arithmetic; it is below
            # Δ·(1 + 1/64), the point this compared with before, so for a nondecreasing policy
            # the check is as strict or stricter (a lookup one bin too high now fails), and it
            # needs the policy at the ~6,700 distinct ends instead of at 26,000 points
            # (Subbotin's ε at δ: one Arb certification per point)
            inr = (GRID >= 2.0**pe.TABLE_MIN_EXP) & (GRID < 2.0**pe.TABLE_MAX_EXP)
            frac, ex = np.frexp(GRID[inr])
            j = np.floor((2.0 * frac - 1.0) * pe.BINS_PER_OCTAVE)
            end = np.ldexp(1.0 + (j + 1.0) / pe.BINS_PER_OCTAVE, ex - 1)
            assert np.all(end > GRID[inr])
            assert np.all(end <= GRID[inr] * (1.0 + 1.0 / pe.BINS_PER_OCTAVE))
            ends, back = np.unique(end, return_inverse=True)
            top = _reference(mech, ends)
            k = next(i for i, x in enumerate(ref) if x is r)
            # (the numpy Subbotin ε_a comes from a root finder: allow its tolerance, 1e-9)
            assert np.all(v[inr] <= top[k][back] * (1.0 + pe.TABLE_SLACK) * (1.0 + 1e-9)
                          + 1e-300)
            assert np.all(np.isinf(v[GRID >= 2.0**pe.TABLE_MAX_EXP]))


def test_max_ulp_and_gap_of_bounds_are_small() -> None:
    """The rounding up of transcendental forms costs under 2**-40 relative on this grid."""
    worst = 0.0
    for fam in ("laplace", "exp_polylog", "log", "root", "generalized_gaussian"):
        for m in CASES[fam]:
            vals, p = _polars(m, GRID)
            for v, r, how in zip(vals, _reference(m, GRID), p.methods, strict=True):
                fin = np.isfinite(r) & (r > 1e-290) & (GRID <= 2.0**65)
                if how == "bound":
                    worst = max(worst, float(np.max(v[fin] / r[fin] - 1.0)))
    assert 0.0 < worst < 2.0**-40


def test_tables_gap_stable_and_subbotin() -> None:
    """Tabulated bounds: ε of SaS(1.5) within 1/64 relative (ε ≈ linear in Δ per bin)."""
    m = M.SymmetricStable(1.5, 2.0)
    d = np.exp2(np.random.default_rng(3).uniform(-30.0, 60.0, 20_000))
    vals, p = _polars(m, d)
    assert p.methods == ("table", "table")
    ref = _reference(m, d)
    gap_eps = float(np.max(vals[1] / ref[1] - 1.0))
    gap_rho = float(np.max(vals[0] / ref[0] - 1.0))
    assert 0.0 <= gap_eps <= 1.0 / 64 + 1e-6
    assert 0.0 <= gap_rho <= (1.0 + 1.0 / 64) ** 2 - 1.0 + 1e-6   # ρ ≈ ε²/2 for small ε


@pytest.mark.slow
def test_subbotin_approx_policy_is_tabulated() -> None:
    """The certified Subbotin (ε, δ) policy is monotone and finite: its table certifies."""
    s = M.Subbotin(3.0, 2.0, delta=1e-6)
    assert pe.policy_plan(s).methods == ("exact", "exact", "table", "exact")


def test_monotone_shortcut_only_for_the_certified_subbotin_policy() -> None:
    """Only the Arb-certified Subbotin ε at δ skips the points inside each bin."""
    taken = {(fam, i, out) for fam, ms in CASES.items() for i, m in enumerate(ms)
             for out in pe._outputs(m) if pe._monotone_certified(m, out)}
    assert taken == {("subbotin", 2, "eps_a")}
    assert not pe._monotone_certified(M.Subbotin(2.0, 2.0), "eps_a")
    assert not pe._monotone_certified(M.Subbotin(3.0, 2.0, delta=1e-6), "epsilon")


@pytest.mark.slow
@pytest.mark.parametrize("r", [3.0, 1.5])
def test_subbotin_table_bounds_the_policy_inside_its_bins(r: float) -> None:
    """The check the monotone table skips, on bins across its range: it would have passed.

    Each bin's value (the certified ε at δ at the bin's upper end, raised by TABLE_SLACK) is
    at least the certified ε at points inside the bin, and the certified ε never decreases
    along them beyond its certification tolerance (the exact ε is nondecreasing in Δ). For
    r = 3 and for r = 1.5 (the shape the Spark tests release with).
    """
    m = M.Subbotin(r, 2.0, delta=1e-6)
    bins = pe.BINS_PER_OCTAVE
    rng = np.random.default_rng(7)
    # where ε at δ passes from 0 (r = 3: Δ below about 3.8e-6) through O(1) to large: 40 bins of
    # Δ in [2**-22, 2**13), and the bins on both sides of the first positive ε
    k = rng.choice(np.arange((-22 - pe.TABLE_MIN_EXP) * bins, (13 - pe.TABLE_MIN_EXP) * bins),
                   40, replace=False)
    ends = np.arange((-22 - pe.TABLE_MIN_EXP) * bins, (-12 - pe.TABLE_MIN_EXP) * bins)
    top = np.ldexp(1.0 + (ends % bins + 1) / bins, (ends // bins + pe.TABLE_MIN_EXP).astype(int))
    first = int(ends[np.argmax(np.asarray(m.approx_policy(top)[0]) > 0.0)])
    k = np.unique(np.concatenate([k, [first - 1, first, first + 1]]))
    lower = np.ldexp(1.0 + (k % bins) / bins, (k // bins + pe.TABLE_MIN_EXP).astype(int))
    width = np.ldexp(1.0 / bins, (k // bins + pe.TABLE_MIN_EXP).astype(int))
    tau = np.linspace(0.0, 1.0, 9)[None, :]
    pts = (lower[:, None] + width[:, None] * tau).ravel()
    got, p = _polars(m, pts)
    assert p.methods[2] == "table"
    ea = np.asarray(m.approx_policy(pts)[0]).reshape(k.size, -1)
    tab = got[2].reshape(k.size, -1)[:, :-1]          # Δ inside the bin (the last is its end)
    assert np.all(tab >= ea[:, :-1])
    assert np.all(ea[:, 1:] >= ea[:, :-1] * (1.0 - 1e-9))
    assert np.any(ea[:, -1] == 0.0) and np.any((ea > 0.0) & (ea < 1.0))
    assert np.any(ea > (1e6 if r == 3.0 else 1e3)) and np.all(np.isfinite(ea))


def test_table_edges_zero_below_and_beyond() -> None:
    m = M.SymmetricStable(1.5, 1.0)
    d = np.array([0.0, 5e-324, 2.0**-70, 2.0**-64, 2.0**71, 2.0**72, 1e300])
    vals, _ = _polars(m, d)
    eps = vals[1]
    assert eps[0] == 0.0
    low = float(m.epsilon(2.0**-64))
    assert eps[1] == eps[2] == low * (1.0 + pe.TABLE_SLACK)
    assert eps[3] >= float(m.epsilon(2.0**-64 * (1 + 1 / 64)))
    assert math.isfinite(eps[4]) and np.all(np.isinf(eps[5:]))


def test_bin_index_is_exact_at_bin_edges() -> None:
    """Δ exactly at a bin's lower edge is in that bin; one ulp below is in the previous one."""
    m = M.SymmetricStable(1.5, 1.0)
    edges = np.ldexp(1.0 + np.arange(64) / 64.0, 5)
    below = np.nextafter(edges, 0.0)
    ve, _ = _polars(m, edges)
    vb, _ = _polars(m, below)
    want_e = m.epsilon(edges + 2.0**5 / 64.0) * (1.0 + pe.TABLE_SLACK)
    want_b = m.epsilon(edges) * (1.0 + pe.TABLE_SLACK)
    assert np.array_equal(ve[1], want_e)
    assert np.array_equal(vb[1], want_b)


@pytest.mark.parametrize("mech", [M.DiscreteGaussian(2.0), M.DiscreteLaplace(3.0),
                                  M.Gaussian(3.0), M.LogTransform(1.0, 1.0),
                                  CASES["smooth_sensitivity"][1], CASES["smooth_sensitivity"][2],
                                  M.Subbotin(3.0, 2.0, delta=1e-6)],
                         ids=lambda m: type(m).__name__)
def test_counts_with_a_public_bound_are_exact(mech: Any) -> None:
    d = np.arange(0, 41, dtype=np.float64)
    vals, p = _polars(mech, d, kind="count", max_delta=40)
    assert p.exact
    for v, r in zip(vals, _reference(mech, d), strict=True):
        assert np.array_equal(v, r)
    over, _ = _polars(mech, np.array([41.0, 1e9]), kind="count", max_delta=40)
    assert np.all(np.isinf(over[0]))


@pytest.mark.parametrize("mech", [M.LogTransform(0.25, 1e5), M.SymmetricStable(1.5, 2.0),
                                  M.UnitSplitting(0.7, 1.0)], ids=lambda m: type(m).__name__)
def test_lazy_and_streaming_give_the_same_values(mech: Any) -> None:
    p = pe.policy_exprs(mech, pl.col("d"))
    cols = [e.alias(f"o{i}") for i, e in enumerate(p.exprs)]
    eager = pl.DataFrame({"d": GRID}).select(cols)
    lazy = pl.LazyFrame({"d": GRID}).select(cols).collect(engine="streaming")
    assert eager.equals(lazy)


def test_numpy_fallback_when_no_form_or_table() -> None:
    class Odd:
        """A policy object with a decreasing policy: no closed form, and no table certifies."""

        def rho(self, d: Any) -> np.ndarray:
            return 1.0 / (1.0 + np.abs(np.asarray(d, dtype=np.float64)))

        def epsilon(self, d: Any) -> np.ndarray:
            return np.sqrt(np.abs(np.asarray(d, dtype=np.float64)))

    vals, p = _polars(Odd(), GRID)
    assert p.methods == ("numpy", "table")
    assert np.array_equal(vals[0], Odd().rho(GRID))


def test_the_numpy_fallback_runs_with_numpys_errors_off() -> None:
    """A ``"numpy"`` output's batch function runs on Polars' threads with NumPy's errors off.

    Those threads keep NumPy's defaults (a warning per overflow): a policy step that overflows
    on a record's Δ would warn there. It runs inside ``engine_thread``: nothing warns.
    """
    import warnings

    class Loud:
        """A decreasing policy (the numpy fallback) whose evaluation overflows on the way."""

        def rho(self, d: Any) -> np.ndarray:
            _ = np.array([1e308]) * 10.0  # overflows: warns under NumPy's defaults
            return 1.0 / (1.0 + np.abs(np.asarray(d, dtype=np.float64)))

        def epsilon(self, d: Any) -> np.ndarray:
            return np.sqrt(np.abs(np.asarray(d, dtype=np.float64)))

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        vals, p = _polars(Loud(), np.arange(200_000, dtype=np.float64))
    assert p.methods[0] == "numpy"
    assert [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)] == []
    with warnings.catch_warnings(record=True) as seen:  # the control: the step does warn
        warnings.simplefilter("always")
        Loud().rho(np.zeros(1))
    assert seen


def test_next_up_expr_is_nextafter() -> None:
    x = np.concatenate([np.exp2(np.arange(-1000.0, 1000.0)),
                        np.exp2(np.random.default_rng(1).uniform(-1000, 1000, 5000))])
    got = pl.DataFrame({"x": x}).select(pe.next_up_expr(pl.col("x")))["x"].to_numpy()
    assert np.array_equal(got, np.nextafter(x, np.inf))


def test_magnitude_expr_matches_the_engine() -> None:
    from tabdp.frame._engine import _abs_float_up

    rng = np.random.default_rng(7)
    ints = [0, 1, -1, 2**53 - 1, 2**53, 2**53 + 1, -(2**64), 2**64 + 12345, 3 * 2**70 + 1]
    ints += [int(v) for v in rng.integers(-(2**62), 2**62, 2000)]
    ints += [int(v) << 20 for v in rng.integers(-(2**50), 2**50, 2000)]
    s = pl.Series("x", ints, dtype=pl.Int128)
    for bits in (0, 24):
        got = pl.DataFrame(s).select(pe.magnitude_expr(pl.col("x"), bits))["x"].to_numpy()
        assert np.array_equal(got, _abs_float_up(s, bits))


def test_bad_arguments_refused() -> None:
    with pytest.raises(ValueError, match="kind must be 'sum' or 'count'; got 'mean'"):
        pe.policy_exprs(M.Gaussian(1.0), pl.col("d"), kind="mean")
    with pytest.raises(ValueError, match="power of two >= 1; got 48"):
        pe.policy_plan(M.Gaussian(1.0), bins_per_octave=48)


@pytest.mark.spark
def test_spark_columns_equal_polars(spark: Any) -> None:
    """Spark renders the same trees: exact outputs equal; bounds and tables also never below."""
    d = np.concatenate([[0.0, 1.0, 2.1, 2.0**53, 2.0**64, 1e30],
                        np.exp2(np.random.default_rng(5).uniform(-30.0, 60.0, 300)),
                        np.arange(0.0, 50.0)])
    sdf = spark.createDataFrame([(float(x),) for x in d], "d double").coalesce(1)
    from pyspark.sql import functions as F

    # Only what the Spark engine renders as columns (counts' exact tables): since the losses
    # are rounded up, the sums' trees (Gaussian, unit splitting, ...) outgrow the JVM heap of
    # a local session, and the engine charges sums through the numpy policy in a pandas UDF
    # (`test_spark_engine_uses_expressions_only_where_exact`); their Polars renderings are
    # checked against numpy above.
    cases: list[tuple[Any, dict[str, Any]]] = [
        (M.DiscreteGaussian(2.0), {"kind": "count", "max_delta": 60})]
    for m, kw in cases:
        sp = pe.spark_policy_columns(m, F.col("d"), **kw)
        names = [f"o{i}" for i in range(len(sp.exprs))]
        got = sdf.select("d", *[c.alias(n) for c, n in zip(sp.exprs, names, strict=True)]).collect()
        dv = np.array([r["d"] for r in got], dtype=np.float64)
        order = np.argsort(dv, kind="stable")
        dd = dv[order]
        pv, p = _polars(m, dd, **kw)
        ref = _reference(m, dd)
        for i, how in enumerate(p.methods):
            sv = np.array([r[names[i]] for r in got], dtype=np.float64)[order]
            if how == "exact" or how == "table":
                assert np.array_equal(sv, pv[i]), (m, i)
            assert np.all(sv >= ref[i]), (m, i, dd[sv < ref[i]][:3])
            fin = np.isfinite(ref[i]) & (ref[i] > 1e-290)
            if how == "bound":
                assert np.all(sv[fin] <= ref[i][fin] * (1.0 + 2.0**-38))


@pytest.mark.spark
def test_spark_engine_uses_expressions_only_where_exact(spark: Any) -> None:
    """The Spark release charges by expressions only when they equal the numpy policy."""
    from tabdp.frame._spark import _charge_exprs

    bits = {"x": 24, "y": 24}
    # sums: the rounded-up trees outgrow a local JVM's heap, so the numpy policy runs in a UDF
    assert _charge_exprs(M.Gaussian(2.0), ["x", "y"], "sum", bits, False, None) is None
    assert _charge_exprs(M.LogTransform(1.0, 1.0), ["x"], "sum", bits, True, None) is None
    assert _charge_exprs(M.VectorSubbotin(2.0, 1.0), ["x", "y"], "sum", bits, True,
                         None) is None                     # joint: the norm stays in numpy
    dg = M.DiscreteGaussian(2.0)
    assert _charge_exprs(dg, [], "count", {}, True, None) is not None      # rows = 1
    assert _charge_exprs(dg, [], "count", {}, False, 5) is not None        # max_rows = 5
    assert _charge_exprs(dg, [], "count", {}, False, None) is None         # no public bound


def test_spark_count_above_the_tables_builds_no_table_it_would_not_use(monkeypatch) -> None:
    """A count whose rows bound is above the integer tables: the closed form or the UDF.

    Gaussian's closed form is exact: Spark expressions. A Subbotin (ε, δ) policy has none:
    the pandas UDF, decided before any table of bounds is built (it would be discarded).
    """
    pytest.importorskip("pyspark")
    from tabdp.frame import _policy_expr
    from tabdp.frame._spark import _charge_exprs

    def no_table(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a table was built")

    monkeypatch.setattr(_policy_expr, "_table_node", no_table)
    _policy_expr._plan_cached.cache_clear()
    big = _policy_expr.COUNT_TABLE_MAX + 1
    sub = M.Subbotin(3.0, 2.0, delta=1e-6)
    assert _charge_exprs(sub, [], "count", {}, False, big) is None
    assert _policy_expr.policy_plan(M.Gaussian(2.0), "count", max_delta=big).methods == (
        "exact", "exact")
    with pytest.raises(AssertionError, match="a table was built"):  # what was skipped
        _policy_expr.policy_plan(sub, "count", max_delta=big)


_SPARK_MECHS = [M.Gaussian(0.3), M.Laplace(0.7), M.GeneralizedGaussian(1.5, 0.5),
                M.LogTransform(2.0, 1.0), M.RootTransform(2, 1.0, 5.0),
                M.UnitSplitting(0.7, 1.0), M.SymmetricStable(1.0, 0.5),
                M.Subbotin(2.0, 2.0), M.ExpPolyLog(2.0, 3.0, 1.0, 2.0), M.Logistic(0.9)]


def _expanded_size(node: Any, memo: dict[int, int]) -> int:
    """Nodes of the expression as a tree (a node used twice counted twice): what Spark builds."""
    key = id(node)
    if key not in memo:
        memo[key] = 1 + sum(_expanded_size(c, memo) for c in node.args)
    return memo[key]


# origin: review R17
@pytest.mark.parametrize("m", _SPARK_MECHS, ids=lambda m: type(m).__name__)
def test_spark_never_gets_a_large_policy_tree(m: Any) -> None:
    """Spark receives each policy as a Column tree: shared sub-expressions are copied.

    On main before h75 the largest tree had 363 nodes; h75's rounding-up expressions give 6,239
    for the Gaussian ρ and 165,998 for unit splitting, and a Spark release rendering them dies
    with ``java.lang.OutOfMemoryError: Java heap space``. Fixed by charging sums through the
    numpy policy in a pandas UDF: the Spark engine renders a policy as columns only when its
    trees stay small (Polars shares sub-expressions and takes the large trees).
    """
    pytest.importorskip("pyspark")
    from tabdp.frame._policy_expr import policy_plan
    from tabdp.frame._spark import _charge_exprs

    plan = policy_plan(m)
    sizes = [_expanded_size(n, {}) for n in plan.nodes]
    bits = {"x": 24}
    rendered = _charge_exprs(m, ["x"], "sum", bits, False, None)
    assert rendered is None or max(sizes) <= 2_000, (type(m).__name__, plan.methods, sizes)


# origin: review R17
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("m", [M.Gaussian(0.3), M.UnitSplitting(0.7, 1.0)],
                         ids=lambda m: type(m).__name__)
def test_spark_sum_charges_the_polars_losses(spark: Any, m: Any) -> None:
    """A Spark sum release with the most common mechanism runs and charges Polars' losses."""
    df = pl.DataFrame({"k": ["a"] * 4, "x": [0.5, 1.0, 3.0, 7.0]})
    keys = tabdp.KeySet.from_dict(k=["a"])
    got = []
    for frame in (df, spark.createDataFrame(df.to_pandas())):
        s = tabdp.Session(seed=3, budget=1e300)
        frame.dp.sum("x", by=["k"], keys=keys, mechanism=m, session=s, name="q")
        per = s.report().per_record
        rows = per.collect() if hasattr(per, "collect") and not isinstance(
            per, pl.DataFrame) else per.iter_rows(named=True)
        got.append(sorted((r["row"], r["rho"]) for r in rows))
    assert got[0] == got[1]
