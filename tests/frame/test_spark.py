"""The Spark engine gives the Polars engine's answer (marker ``spark``; skip: ``-m "not spark"``).

One local[2] SparkSession (fixture ``spark`` in conftest.py) serves every test; data are small so
that Spark's start-up dominates. For one seed, the published tables, the confidential summaries
and the per-record reports must be those of the Polars engine on the same data.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
from decimal import Decimal
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech

pytestmark = pytest.mark.spark

KEYS = tabdp.KeySet.from_dict(county=["c1", "c2", "c3", "c9"], sector=[1, 2, 3])


def _data(n: int = 120, seed: int = 5) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    pay = rng.lognormal(9.0, 2.0, n)
    pay[:3] = [2.5 * 2.0**-24, 1e12 + 0.5, 3.0 * 2.0**-25]  # half-way and large values
    return pl.DataFrame({
        "firm": rng.integers(0, 25, n),
        "county": rng.choice(["c1", "c2", "c3", "c4"], n),  # c4 is outside the key set
        "sector": rng.integers(1, 4, n),
        "payroll": pay,
        "emp": rng.integers(0, 300, n),
    })


def _spark_frame(spark: Any, frame: pl.DataFrame) -> Any:
    return spark.createDataFrame(frame.to_pandas())


def _pl(out: Any) -> pl.DataFrame:
    if hasattr(out, "toArrow"):  # PySpark >= 4.0
        return pl.from_arrow(out.toArrow())
    return pl.from_pandas(out.toPandas())


def _report(session: tabdp.Session) -> pl.DataFrame:
    pr = session.report(delta=1e-9).per_record
    frame = pr if isinstance(pr, pl.DataFrame) else _pl(pr)
    return frame.sort(frame.columns[0])


def _same_reports(a: pl.DataFrame, b: pl.DataFrame, exact: bool) -> None:
    assert a.columns == b.columns and a.height == b.height
    assert a[a.columns[0]].to_list() == b[b.columns[0]].to_list()
    for c in a.columns[1:]:
        x, y = a[c].to_numpy(), b[c].to_numpy()
        if exact or c in ("size", "epsilon"):
            np.testing.assert_array_equal(x, y, err_msg=c)
        else:  # (unused: every engine sums a unit's losses in key-set order)
            np.testing.assert_allclose(x, y, rtol=5e-16, atol=0, err_msg=c)


def _run(frame: Any, unit: str | None, releases: list[tuple[str, dict[str, Any]]],
         budget: Any = None) -> tuple[list[pl.DataFrame], tabdp.Session]:
    s = tabdp.Session(unit=unit, seed=11, budget=budget)
    s.track_cells = True
    outs = []
    for kind, kw in releases:
        out = getattr(frame.dp, kind)(by=["county", "sector"], keys=KEYS, session=s, **kw)
        outs.append(out if isinstance(out, pl.DataFrame) else _pl(out))
    return outs, s


def _compare(spark: Any, data: pl.DataFrame, unit: str | None,
             releases: list[tuple[str, dict[str, Any]]], budget: Any = None) -> tabdp.Session:
    ref, s_pl = _run(data, unit, releases, budget)
    got, s_sp = _run(_spark_frame(spark, data), unit, releases, budget)
    for a, b in zip(ref, got, strict=True):
        assert a.columns == b.columns
        assert a.equals(b), (a, b)
    conf_pl = s_pl.report().confidential_summary()
    conf_sp = s_sp.report().confidential_summary()
    assert conf_pl["queries"] == conf_sp["queries"]
    assert conf_pl["units"] == conf_sp["units"]
    _same_loss_statistics(conf_pl, conf_sp)
    assert s_pl.report().to_dict() == s_sp.report().to_dict()
    for r_pl, r_sp in zip(s_pl.records, s_sp.records, strict=True):
        a = r_pl.cells.sort(["county", "sector"])
        b = r_sp.cells.sort(["county", "sector"])
        assert a["units"].to_list() == b["units"].to_list()
        np.testing.assert_allclose(a["worst_rho"].to_numpy(), b["worst_rho"].to_numpy(),
                                   rtol=5e-16)
    _same_reports(_report(s_pl), _report(s_sp), exact=True)
    return s_sp


def _bits(x: float | None) -> int | None:
    return None if x is None else int(np.float64(x).view(np.int64))


def _same_loss_statistics(a: dict[str, Any], b: dict[str, Any]) -> None:
    """The largest ρ and the ρ quantiles of two confidential summaries, bit for bit."""
    keys = [k for k in a if k.startswith("rho_")]
    assert keys == [k for k in b if k.startswith("rho_")]
    assert [_bits(a[k]) for k in keys] == [_bits(b[k]) for k in keys], (a, b)


# -- exact fixed point --------------------------------------------------------------------------
def test_fixed_point_matches_polars_bit_for_bit(spark):
    from tabdp.frame import _engine, _spark

    tie = 2.0**-25  # half a step of the 2**-24 grid
    vals = [0.0, -0.0, tie, 3 * tie, 5 * tie, -tie, -3 * tie, 1.0 + tie, 2.0**29 + tie,
            2.0**40 + 0.5, 123456789.123456789, -987654321.987654321, 1e15 + 0.25, 2.0**63,
            -(2.0**63), 2.0**64, 2.0**64 * 1.5, -1e30, 1e300, 5e-324, 1.1e19,
            float(np.nextafter(2.0**64, 0.0))]
    rng = np.random.default_rng(1)
    vals += list(rng.normal(0, 1, 40) * 10.0 ** rng.integers(-9, 22, 40))
    rules = _engine._Rules("zero", "allow", "curator")
    frame = pl.DataFrame({"x": vals}, schema={"x": pl.Float64})
    want = frame.select(_engine._measure_parts("x", pl.Float64, rules)["fixed"].alias("v"))
    want = [int(v) for v in want["v"].to_list()]
    sdf = _spark_frame(spark, frame)
    st = sdf.schema["x"].dataType
    got = [int(r[0]) for r in sdf.select(
        _spark._measure_parts("x", st, rules)["fixed"]).collect()]
    assert got == want
    assert isinstance(sdf.select(_spark._measure_parts("x", st, rules)["fixed"]).first()[0],
                      Decimal)
    # half-way values round to even, like Polars: 2.5 steps -> 2, 3 steps -> 3, 5 -> 2 (x2)
    assert got[2:5] == [0, 2, 2] and got[5:7] == [0, -2]
    assert got[15] == 1 << 88 and got[16] == 1 << 88 and got[17] == -(1 << 88)
    # decimal measures: converted to float64 then fixed point, as Polars does
    from pyspark.sql import types as T

    rnd = np.random.default_rng(2)
    for prec, span in ((18, 10**15), (24, 10**17)):
        dec = [Decimal(int(v)) / Decimal(10**6) for v in rnd.integers(-span, span, 300)]
        pframe = pl.DataFrame({"x": pl.Series(dec, dtype=pl.Decimal(prec, 6))})
        want = [int(v) for v in pframe.select(_engine._measure_parts(
            "x", pframe.schema["x"], rules)["fixed"].alias("v"))["v"].to_list()]
        dsdf = spark.createDataFrame([(v,) for v in dec], T.StructType(
            [T.StructField("x", T.DecimalType(prec, 6))]))
        got = [int(r[0]) for r in dsdf.select(_spark._measure_parts(
            "x", dsdf.schema["x"].dataType, rules)["fixed"]).collect()]
        assert got == want
    # why the engine splits the value: Spark's own double -> decimal cast is not exact
    from pyspark.sql import functions as F

    big = 2.0**60 + 2.0**8
    naive = sdf.limit(1).select(F.lit(big).cast("decimal(38,0)")).first()[0]
    assert int(naive) != int(big)


def test_fingerprint_sums_are_exact(spark):
    """Row fingerprints (64-bit hashes) are summed in three long parts, recombined exactly."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tabdp.frame import _spark

    rng = np.random.default_rng(3)
    hashes = [-(2**63), 2**63 - 1, -1, 0, 1, 2**44, -(2**44), 2**22 - 1]
    hashes += [int(v) for v in rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64)]
    schema = T.StructType([T.StructField("h", T.LongType())])
    sdf = spark.createDataFrame([(h,) for h in hashes], schema)
    edges = spark.createDataFrame([(h,) for h in hashes[:8]], schema)
    for sub, part in ((edges, hashes[:8]), (sdf, hashes)):
        row = sub.agg(*_spark._fp_sums(F.col("h"), "fp")).first()
        assert _spark._fp_total(row, "fp") == sum(part)  # Python ints: the exact sum
    empty = sdf.limit(0).agg(*_spark._fp_sums(F.col("h"), "fp")).first()
    assert _spark._fp_total(empty, "fp") == 0


def test_half_even_is_bround_with_a_positive_zero(spark):
    """``_half_even`` (``rint(x) + 0.0``) gives ``bround(x, 0)``'s doubles, zeros' sign too."""
    from pyspark.sql import functions as F

    from tabdp.frame import _spark

    vals = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.3, -0.0, 0.0, 0.49999999999999994,
            2.0**51 + 0.5, -(2.0**51 + 0.5), 2.0**52 - 0.5, 2.0**52 + 1, 2.0**53 + 2, 1e19,
            -1e19, 2.0**64 * 2.0**24, 3.0000000000000004, 123456790.5, 5e-324, float("inf"),
            float("-inf")]
    rng = np.random.default_rng(4)
    vals += list(rng.normal(0, 1, 200) * 10.0 ** rng.integers(-3, 20, 200))
    vals += [float(v) + 0.5 for v in rng.integers(-(2**40), 2**40, 100)]
    sdf = spark.createDataFrame([(float(v),) for v in vals], "x double")
    rows = sdf.select(F.bround("x", 0).alias("b"), _spark._half_even(F.col("x")).alias("r"),
                      F.rint("x").alias("plain")).collect()
    for v, r in zip(vals, rows, strict=True):
        assert r["r"] == r["b"] and math.copysign(1, r["r"]) == math.copysign(1, r["b"]), v
    assert any(math.copysign(1, r["plain"]) < 0 and r["plain"] == 0 for r in rows)  # why + 0.0


@contextlib.contextmanager
def _conf_kept(spark, key):
    """The session's value of ``key`` (or its absence) given back when the block ends."""
    before = spark.conf.get(key, None)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def test_jit_sized_methods_sets_and_restores_the_limit(spark):
    """Spark's huge-method limit is lowered while tabdp's jobs run, then restored."""
    from tabdp.frame import _spark

    key = "spark.sql.codegen.hugeMethodLimit"
    with _conf_kept(spark, key):
        spark.conf.unset(key)
        with _spark._jit_sized_methods(spark):
            assert spark.conf.get(key) == str(_spark.CODEGEN_METHOD_LIMIT)
            with _spark._jit_sized_methods(spark):  # nested: one setting
                assert spark.conf.get(key) == str(_spark.CODEGEN_METHOD_LIMIT)
            assert spark.conf.get(key) == str(_spark.CODEGEN_METHOD_LIMIT)
        assert spark.conf.get(key, None) is None
        spark.conf.set(key, "4000")  # a lower limit of the user's is kept
        with _spark._jit_sized_methods(spark):
            assert spark.conf.get(key) == "4000"
        assert spark.conf.get(key) == "4000"
        spark.conf.set(key, "20000")
        with pytest.raises(RuntimeError), _spark._jit_sized_methods(spark):
            assert spark.conf.get(key) == str(_spark.CODEGEN_METHOD_LIMIT)
            raise RuntimeError("a failed job")
        assert spark.conf.get(key) == "20000"


def test_jit_sized_methods_leaves_collapse_project_out_and_restores_the_rules(spark):
    """CollapseProject is left out of tabdp's jobs after the user's exclusions, then restored."""
    from tabdp.frame import _spark

    key = "spark.sql.optimizer.excludedRules"
    rule = _spark.COLLAPSE_PROJECT
    with _conf_kept(spark, key):
        spark.conf.unset(key)
        with _spark._jit_sized_methods(spark):
            assert spark.conf.get(key) == rule
            with _spark._jit_sized_methods(spark):
                assert spark.conf.get(key) == rule
        assert spark.conf.get(key, None) is None
        user = "org.apache.spark.sql.catalyst.optimizer.ConstantFolding"
        spark.conf.set(key, user)
        with _spark._jit_sized_methods(spark):
            assert spark.conf.get(key) == f"{user},{rule}"
        assert spark.conf.get(key) == user
        with pytest.raises(RuntimeError), _spark._jit_sized_methods(spark):
            assert spark.conf.get(key) == f"{user},{rule}"
            raise RuntimeError("a failed job")
        assert spark.conf.get(key) == user
        spark.conf.set(key, f"{rule}, {user}")  # already left out by the user: kept as it is
        with pytest.raises(RuntimeError), _spark._jit_sized_methods(spark):
            assert spark.conf.get(key) == f"{rule}, {user}"
            raise RuntimeError("a failed job")
        assert spark.conf.get(key) == f"{rule}, {user}"


def test_no_inline_leaves_no_rand_in_the_physical_plan_of_tabdps_jobs(spark):
    """`_no_inline`'s ``rand() >= 0`` guard is planned away, with CollapseProject left out too."""
    from pyspark.sql import functions as F

    from tabdp.frame import _spark

    df = spark.range(10).select(F.col("id").cast("double").alias("x"))
    df = df.select("*", _spark._no_inline(F.col("x") * 2).alias("y"))
    df = df.select("*", _spark._no_inline(F.col("y") + F.col("x")).alias("z"))
    with _spark._jit_sized_methods(spark):
        plan = df.select("*")._jdf.queryExecution().executedPlan().toString()
        assert "rand(" not in plan.lower(), plan
        assert [r["z"] for r in df.collect()] == [3.0 * i for i in range(10)]
    analyzed = df._jdf.queryExecution().analyzed().toString()
    assert "rand(" in analyzed.lower()  # the guard is there before planning


class _Conf:
    """A session's runtime conf that refuses to set some keys (a managed service)."""

    def __init__(self, values: dict, refused: set) -> None:
        self.values, self.refused = dict(values), refused

    def get(self, k, default=None):
        return self.values.get(k, default)

    def set(self, k, v):
        if k in self.refused:
            raise PermissionError(f"{k} cannot be set here")
        self.values[k] = v

    def unset(self, k):
        self.values.pop(k, None)


class _Session:
    def __init__(self, conf: _Conf) -> None:
        self.conf = conf


@pytest.mark.parametrize("refused", ["rules", "limit", "interrupted"])
def test_jit_sized_methods_refused_setting_leaves_the_session_as_it_was(refused):
    """A refused rule exclusion is skipped; a failed setting leaves nothing changed."""
    from tabdp.frame import _spark

    limit, rules = "spark.sql.codegen.hugeMethodLimit", "spark.sql.optimizer.excludedRules"
    before = {rules: "a.B", limit: "20000"}
    assert list(_spark._job_settings(before)) == [limit, rules]  # the order set
    conf = _Conf(before, {rules} if refused == "rules" else {limit} if refused == "limit"
                 else set())
    fake = _Session(conf)
    if refused == "rules":
        with _spark._jit_sized_methods(fake):
            assert conf.values == {rules: "a.B", limit: str(_spark.CODEGEN_METHOD_LIMIT)}
    elif refused == "limit":
        with pytest.raises(PermissionError), _spark._jit_sized_methods(fake):
            pass  # pragma: no cover - never entered
    else:  # interrupted while setting the second key: the first is given back
        real_set = conf.set

        def interrupted(k, v):
            if k == rules:
                raise KeyboardInterrupt
            real_set(k, v)

        conf.set = interrupted
        with pytest.raises(KeyboardInterrupt), _spark._jit_sized_methods(fake):
            pass  # pragma: no cover - never entered
    assert conf.values == before
    assert id(fake) not in _spark._held_limits


# -- seeded equality, Spark vs Polars -------------------------------------------------------------
def test_sum_and_count_row_mode_identical(spark):
    s = _compare(spark, _data(), None, [
        ("sum", {"columns": ["payroll", "emp"], "mechanism": mech.Gaussian(sigma=50.0)}),
        ("sum", {"columns": "payroll",
                 "mechanism": mech.LogTransform(sigma=0.25, offset=1000.0)}),
        ("count", {}),
    ])
    pr = s.report().per_record
    assert type(pr).__module__.startswith("pyspark")  # the report stays in Spark
    assert pr.count() == 120


def test_unit_mode_firms_with_budget_identical(spark):
    # firms of several rows in several cells; the constant budget leaves the large ones out of
    # the second release (the same firms on both engines)
    _compare(spark, _data(), "firm", [
        ("sum", {"columns": ["payroll"], "mechanism": mech.Gaussian(sigma=1e5)}),
        ("sum", {"columns": ["payroll", "emp"],
                 "mechanism": mech.VectorSubbotin(r=2.0, scale=2e4, weights={"emp": 100.0})}),
        ("count", {"max_rows": 3}),
    ], budget=2.0)


def test_curve_budget_and_max_cells_identical(spark):
    s = _compare(spark, _data(80, seed=7), "firm", [
        ("sum", {"columns": "emp", "mechanism": mech.Gaussian(sigma=30.0), "max_cells": 2}),
        ("count", {}),
    ], budget=tabdp.Budget({10.0: 0.2, 1e4: 5.0}))
    q = s.report().confidential_summary()["queries"][0]
    assert q["units_left_out_by_budget"] > 0 and q["unit_cells_dropped_by_max_cells"] > 0


def test_median_and_quantile_identical(spark):
    # smooth sensitivity per cell computed in Spark; row mode, then firms under a budget
    s = _compare_q(spark, _data(), None, budget=None)
    assert type(s.report().per_record).__module__.startswith("pyspark")
    s = _compare_q(spark, _data(90, seed=9), "firm", budget=3.0)
    assert s.report().confidential_summary()["queries"][0]["units_left_out_by_budget"] > 0


def test_loss_quantiles_are_numpys_bit_for_bit(spark):
    """The ρ quantiles of the confidential summary are Polars' (numpy's linear), bit for bit.

    Spark's ``percentile`` interpolated by another formula: for this seed ``rho_q0.99`` was
    49.34551111111115 on Spark and 49.34551111111114 on Polars (stop 63). (Row mode, Spark's
    replay ledger: `test_sum_and_count_row_mode_identical`.)
    """
    data = _data(81, seed=3)
    rels = [("count", {"mechanism": mech.Gaussian(3.0)}),
            ("sum", {"columns": "emp", "mechanism": mech.Gaussian(50.0)})]
    _, s_pl = _run(data, "firm", rels)
    _, s_sp = _run(_spark_frame(spark, data), "firm", rels)
    conf_pl = s_pl.report().confidential_summary()
    assert len([k for k in conf_pl if k.startswith("rho_q")]) == 4
    _same_loss_statistics(conf_pl, s_sp.report().confidential_summary())


def test_order_statistics_exact_under_both_percentile_disc_formulas(spark):
    """`_rho_stats` equals ``numpy.quantile`` (NaN from ∞ reported as ∞), whatever the flag."""
    from tabdp.frame._spark import _rho_stats

    rng = np.random.default_rng(6)  # Spark's percentile gave another q0.999 (last bit)
    qs = [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0]
    v = rng.lognormal(0.0, 2.0, 257) / 3.0
    v[::7] = v[1]  # ties
    v_inf = np.concatenate([v[:40], [np.inf] * 3])
    conf = "spark.sql.legacy.percentileDiscCalculation"
    before = spark.conf.get(conf)
    try:
        for legacy in ("false", "true"):
            spark.conf.set(conf, legacy)
            for vals in (v, v_inf, v[:2]):
                frame = spark.createDataFrame([(float(x),) for x in vals], "rho double")
                got = _rho_stats(frame, qs)
                with np.errstate(invalid="ignore"):
                    want = np.quantile(vals, qs)
                want = np.where(np.isnan(want) & np.isinf(vals).any(), np.inf, want)
                assert [_bits(got[f"rho_q{q}"]) for q in qs] == [_bits(w) for w in want]
                assert got["units"] == vals.size and got["rho_max"] == vals.max()
    finally:
        spark.conf.set(conf, before)


@pytest.mark.parametrize("unit_dtype", [pl.Int32, pl.String])
def test_report_without_units_has_the_input_unit_dtype_as_on_polars(spark, unit_dtype):
    """A session whose only release was refused: the unit column is the input's (stop 63).

    Spark gave a String column and Polars an Int64 one whatever the input's unit column.
    """
    data = _data(20).with_columns(pl.col("firm").cast(unit_dtype))
    bad_keys = tabdp.KeySet.from_dict(county=["c1"], sector=["x"])  # sector is an integer
    got = []
    for frame in (data, _spark_frame(spark, data)):
        s = tabdp.Session(unit="firm", seed=1)
        with pytest.raises(tabdp.ColumnTypeError):
            frame.dp.sum("payroll", by=["county", "sector"], keys=bad_keys, session=s,
                         mechanism=mech.Gaussian(1.0))
        pr = s.report().per_record
        got.append((pr if isinstance(pr, pl.DataFrame) else _pl(pr)).schema)
    assert got[0] == got[1] == pl.Schema({"firm": unit_dtype, "rho": pl.Float64,
                                          "epsilon": pl.Float64, "size": pl.Float64})


def test_timestamp_keys_published_in_the_input_dtype_as_on_polars(spark):
    """Key columns keep the input's type, in a session zone other than UTC (stop 63).

    A ``timestamp_ntz`` key under a date key set was published as ``date`` (Polars: its
    Datetime), under a Datetime key set as a ``timestamp`` (a UTC zone once converted), and
    there its rows matched no key outside UTC (the check of the key's conversion cast back
    in the session's zone); a median's keys took the key set's dtypes (an Int32 key came
    back Int64). A ``timestamp`` (an instant) key stays one, and `released_table` gives it
    as Polars' Datetime without a zone. Values are not shifted by the session's zone.
    """
    import datetime as dt

    from pyspark.sql import types as T

    from tabdp.frame.releases import released_table

    before_1970 = dt.datetime(1969, 12, 31, 23, 59, 59, 999999)
    data = pl.DataFrame({"t": [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 23, 30),
                               before_1970] * 4,
                         "g": pl.Series([1, 2, 3] * 4, dtype=pl.Int32),
                         "x": [float(i) for i in range(12)]})
    ks_date = tabdp.KeySet.from_dict(t=[dt.date(2020, 1, 1), dt.date(2020, 1, 2)])
    ks_time = tabdp.KeySet.from_dict(t=pl.Series([dt.datetime(2020, 1, 1, 23, 30),
                                                  before_1970]))
    ks_g = tabdp.KeySet.from_dict(g=[1, 2, 3])
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        ntz = spark.createDataFrame(data.to_arrow(), T.StructType([
            T.StructField("t", T.TimestampNTZType()), T.StructField("g", T.IntegerType()),
            T.StructField("x", T.DoubleType())]))
        # instants sent with their zone (pandas' naive values would be read in the session's)
        ltz = spark.createDataFrame(
            data.with_columns(pl.col("t").dt.replace_time_zone("UTC")).to_arrow())
        assert isinstance(ltz.schema["t"].dataType, T.TimestampType)
        cases = [(ntz, "t", ks_date, "count"), (ntz, "t", ks_time, "count"),
                 (ltz, "t", ks_date, "count"), (ntz, "g", ks_g, "median")]
        for frame, by, keys, kind in cases:
            outs = []
            for f in (data, frame):
                s = tabdp.Session(seed=2)
                if kind == "count":
                    outs.append(f.dp.count(by=by, keys=keys, session=s))
                else:
                    outs.append(f.dp.median("x", by=by, keys=keys, bounds=(0.0, 12.0),
                                            epsilon=1.0, session=s))
            want, got = outs
            assert got.schema[by].dataType == frame.schema[by].dataType, (by, keys)
            got_pl = released_table(got)
            assert got_pl.schema == want.schema, (got_pl.schema, want.schema)
            assert got_pl.equals(want), (got_pl, want)
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def test_median_rows_left_out_counted_as_polars(spark):
    """A median's rows in released cells (before the filter) and rows left out (stop 61).

    Row mode under a budget (Spark's replay ledger): a sum spends the large values' budget,
    then the median leaves those rows out; Spark counts what Polars counts.
    """
    data = _data(60, seed=3).with_columns(pl.col("emp").cast(pl.Float64))
    got = []
    for frame in (data, _spark_frame(spark, data)):
        s = tabdp.Session(seed=4, budget=1.0)
        frame.dp.sum("emp", by=["county", "sector"], keys=KEYS, session=s,
                     mechanism=mech.Gaussian(sigma=200.0))
        frame.dp.median("emp", by=["county", "sector"], keys=KEYS, bounds=(0.0, 300.0),
                        epsilon=0.3, session=s, name="m")
        got.append(s.report().confidential_summary()["queries"][1])
    assert got[0] == got[1]
    inside = data.filter(pl.col("county") != "c4").height
    assert got[1]["rows_in_released_cells"] == inside
    assert 0 < got[1]["rows_left_out_by_budget"] == got[1]["units_left_out_by_budget"] < inside


def _compare_q(spark: Any, data: pl.DataFrame, unit: str | None, budget: Any
               ) -> tabdp.Session:
    res = []
    for frame in (data, _spark_frame(spark, data)):
        s = tabdp.Session(unit=unit, seed=4, budget=budget)
        a = frame.dp.median("payroll", by=["county", "sector"], keys=KEYS, bounds=(0.0, 5e4),
                            epsilon=1.0, session=s)
        b = frame.dp.quantile("emp", 0.9, by=["county", "sector"], keys=KEYS,
                              bounds=(0.0, 200.0), epsilon=0.5, noise="student_t", session=s,
                              name="q90")
        res.append(([t if isinstance(t, pl.DataFrame) else _pl(t) for t in (a, b)], s))
    (ref, s_pl), (got, s_sp) = res
    for a, b in zip(ref, got, strict=True):
        assert a.equals(b), (a, b)
    conf_pl, conf_sp = (x.report().confidential_summary() for x in (s_pl, s_sp))
    assert conf_pl["queries"] == conf_sp["queries"]
    _same_loss_statistics(conf_pl, conf_sp)
    _same_reports(_report(s_pl), _report(s_sp), exact=True)
    return s_sp


# -- bad input: the same refusals ----------------------------------------------------------------
BAD = {
    "null": ([1.0, None, 3.0, 4.0], "error", "missing_values:payroll"),
    "nan": ([1.0, float("nan"), 3.0, 4.0], "error", "missing_values:payroll"),
    "+inf": ([1.0, math.inf, math.inf, 4.0], "zero", "infinite_values:payroll"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_values_refused_like_polars(spark, case):
    vals, nulls, key = BAD[case]
    data = pl.DataFrame({"county": ["c1", "c1", "c2", "c3"], "sector": [1] * 4,
                         "payroll": vals}, schema_overrides={"payroll": pl.Float64})
    sdf = spark.createDataFrame(data.to_arrow()) if case == "null" else _spark_frame(spark, data)
    errs = []
    for frame in (data, sdf):
        s = tabdp.Session(seed=0)
        with pytest.raises(tabdp.DataValidationError) as info:
            frame.dp.sum("payroll", by=["county", "sector"], keys=KEYS,
                         mechanism=mech.Gaussian(1.0), session=s, nulls=nulls)
        assert not s.records
        errs.append(info.value)
    assert str(errs[0]) == str(errs[1])
    assert errs[0].confidential == errs[1].confidential
    assert errs[1].confidential[key] == (1 if case != "+inf" else 2)


def test_negative_contributions_and_null_units_refused(spark):
    m = mech.LogTransform(sigma=0.25, offset=1000.0)
    data = pl.DataFrame({"u": ["a", "a", "b", None], "county": ["c1"] * 4, "sector": [1] * 4,
                         "net": [5.0, -2.0, -1.0, 1.0]})
    sdf = _spark_frame(spark, data)
    errs = []
    for frame in (data, sdf):
        with pytest.raises(tabdp.DataValidationError) as info:
            frame.dp.sum("net", by=["county", "sector"], keys=KEYS, mechanism=m,
                         session=tabdp.Session(unit="u", seed=1), negatives="allow")
        errs.append(info.value)
    assert str(errs[0]) == str(errs[1]) and errs[0].confidential == errs[1].confidential
    assert errs[1].confidential == {"negative_contributions:net": 1, "null_unit_ids:u": 1}
    # the default negatives='error': one reason, the negative values, as in Polars
    errs = []
    for frame in (data, sdf):
        with pytest.raises(tabdp.DataValidationError) as info:
            frame.dp.sum("net", by=["county", "sector"], keys=KEYS, mechanism=m,
                         session=tabdp.Session(unit="u", seed=1))
        errs.append(info.value)
    assert str(errs[0]) == str(errs[1]) and errs[0].confidential == errs[1].confidential
    assert errs[1].confidential == {"negative_values:net": 2, "null_unit_ids:u": 1}
    # author mode: declared rules, nothing raises on data; same table as Polars
    outs = []
    for frame in (data, sdf):
        s = tabdp.Session(unit="u", seed=1, mode="author")
        out = frame.dp.sum("net", by=["county", "sector"], keys=KEYS, mechanism=m, session=s,
                           nulls="zero", negatives="zero")
        outs.append(out if isinstance(out, pl.DataFrame) else _pl(out))
    assert outs[0].equals(outs[1])


def test_schema_errors_and_engine_mixing(spark):
    sdf = _spark_frame(spark, _data(10))
    s = tabdp.Session(seed=0)
    with pytest.raises(tabdp.ColumnNotFoundError, match="did you mean 'payroll'"):
        sdf.dp.sum("payrol", by=["county", "sector"], keys=KEYS, mechanism=mech.Gaussian(1.0),
                   session=s)
    with pytest.raises(tabdp.ColumnTypeError, match="'county'"):
        sdf.dp.sum("county", by=["sector"], keys=tabdp.KeySet.from_dict(sector=[1]),
                   mechanism=mech.Gaussian(1.0), session=s)
    with pytest.raises(tabdp.ColumnTypeError, match="numbers and text"):
        sdf.dp.count(by=["sector"], keys=tabdp.KeySet.from_dict(sector=["1"]), session=s)
    with pytest.raises(tabdp.InvalidParameterError, match="bounds"):
        sdf.dp.median("payroll", by=["county", "sector"], keys=KEYS, bounds=(1e6, 0.0),
                      epsilon=1.0, session=s)
    assert not s.records
    sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s)
    with pytest.raises(tabdp.InvalidParameterError, match="cannot mix them"):
        _data(10).dp.count(by=["county", "sector"], keys=KEYS, session=s)
    assert len(s.records) == 1
    # row mode: a filtered frame is refused by its fingerprint, before any noise
    with pytest.raises(tabdp.InvalidParameterError, match="not the rows"):
        sdf.filter("emp > 5").dp.count(by=["county", "sector"], keys=KEYS, session=s)
    assert len(s.records) == 1


# -- registration without importing PySpark ------------------------------------------------------
def test_import_tabdp_does_not_import_pyspark() -> None:
    pytest.importorskip("pyspark")
    code = ("import sys, tabdp; assert 'pyspark' not in sys.modules; "
            "import pyspark.sql; print(type(pyspark.sql.DataFrame.__dict__.get('dp')).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "property"


def test_releases_named_like_loss_components(spark):
    # the per-record columns rho_g and rho_z of releases named "g" and "z" share their names
    # with the accounting components rho_g (Gaussian) and rho_z (zCDP) of epsilon_delta
    _compare(spark, _data(40), None, [
        ("sum", {"columns": "payroll", "mechanism": mech.Gaussian(sigma=50.0), "name": "g"}),
        ("count", {"name": "z"}),
    ])


@pytest.mark.parametrize("unit", ["firm", None])
def test_report_columns_that_would_meet_are_refused_before_reading(spark, unit, tmp_path):
    """Unit ``rho_pay`` and a release ``pay``; releases ``Emp`` and ``emp`` (review r29).

    The per-record report had two columns named ``rho_pay`` (the units' ids and the release's
    losses: ambiguous; its file could not be written), or ``rho_Emp`` and ``rho_emp``, which
    Spark does not tell apart (the report failed on an ambiguous reference, or its file could
    not be written). Both are refused by the session, before anything is read.
    """
    data = _data(40)
    if unit is not None:
        data = data.rename({"firm": "rho_pay"})
    sdf = _spark_frame(spark, data)
    s = tabdp.Session(unit=None if unit is None else "rho_pay", seed=1)
    if unit is not None:
        with pytest.raises(tabdp.InvalidParameterError,
                           match="column 'rho_pay', the name .* of the unit column 'rho_pay'"):
            sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s, name="pay")
        assert not s.records
    sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s, name="Emp")
    with pytest.raises(tabdp.InvalidParameterError, match="compared in any letter case"):
        sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s, name="emp")
    assert [r.name for r in s.records] == ["Emp"]
    s.report().write_per_record(tmp_path / "per_record.parquet")
    pr = pl.read_parquet(tmp_path / "per_record.parquet")
    first = "row" if unit is None else "rho_pay"
    assert pr.columns == [first, "rho", "epsilon", "size", "rho_Emp"]
    if unit is not None:
        # the units' ids (those charged: rows in the key set), not losses
        assert pr[first].dtype.is_integer() and pr.height > 0
        assert set(pr[first].to_list()) <= set(data["rho_pay"].to_list())


# -- unit mode: a count reuses the sum's (unit, keys) snapshot ---------------------------------
def _with_nulls(n: int = 120) -> pl.DataFrame:
    data = _data(n)
    pay = data["payroll"].to_list()
    for i in range(0, n, 7):
        pay[i] = None
    return data.with_columns(pl.Series("payroll", pay, pl.Float64))


def test_count_after_sum_reuses_the_snapshot_and_equals_polars(spark):
    from tabdp.frame import binding

    sdf = _spark_frame(spark, _data())
    s = tabdp.Session(unit="firm", seed=3)
    sdf.dp.sum(["payroll", "emp"], by=["county", "sector"], keys=KEYS,
               mechanism=mech.Gaussian(sigma=1e5), session=s)
    (entry,) = binding.of(s).snapshot.values()
    held = entry["held"]
    sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s)
    sdf.dp.sum("emp", by=["county", "sector"], keys=KEYS, mechanism=mech.Gaussian(sigma=30.0),
               session=s)
    (after,) = binding.of(s).snapshot.values()
    assert after["held"] is held  # one aggregation of the input for the three releases
    # and the answers are the Polars engine's (which reuses its own snapshot alike)
    _compare(spark, _data(), "firm", [
        ("sum", {"columns": ["payroll", "emp"], "mechanism": mech.Gaussian(sigma=1e5)}),
        ("count", {}),
        ("sum", {"columns": "emp", "mechanism": mech.Gaussian(sigma=30.0)}),
    ], budget=3.0)


def test_count_after_a_sum_that_drops_rows_reads_every_row(spark):
    # nulls="drop" leaves the rows with a missing payroll out of the sum, not of the count: the
    # count must not reuse the sum's row counts
    data = _with_nulls()
    s = _compare(spark, data, "firm", [
        ("sum", {"columns": "payroll", "mechanism": mech.Gaussian(sigma=1e5), "nulls": "drop"}),
        ("count", {}),
    ])
    q = s.report().confidential_summary()["queries"]
    assert q[0]["rows_read"] == q[1]["rows_read"] == 120, q


def _blocks_on_disk(frame: Any) -> bool:
    return bool(frame._jdf.queryExecution().logical().rdd().getStorageLevel().useDisk())


def test_a_replaced_snapshot_is_freed(spark):
    import gc

    from tabdp.frame import binding

    s = tabdp.Session(unit="firm", seed=3)
    sdf = _spark_frame(spark, _data())
    sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s)
    (entry,) = binding.of(s).snapshot.values()
    first = entry["held"].frame
    assert _blocks_on_disk(first)
    del entry
    _spark_frame(spark, _data(60)).dp.count(by=["county", "sector"], keys=KEYS, session=s)
    gc.collect()
    assert not _blocks_on_disk(first)
    (entry,) = binding.of(s).snapshot.values()
    second = entry["held"].frame
    del entry, s
    gc.collect()
    assert not _blocks_on_disk(second)  # freed with the session


def test_one_evaluation_of_the_input_per_snapshot_even_with_equal_plans(spark):
    """Review r30: the held snapshot was a cache entry, shared by any frame of the same plan.

    Two sums of one frame whose rules differ (not reused: each makes its snapshot) have equal
    plans; with a cache entry the second's was dropped when it replaced the first, and its
    checks and its totals read the input twice. Over rows that differ between evaluations (a
    non-deterministic key), the rows counted then disagreed with the rows in released cells.
    """
    import random

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    pick = F.udf(lambda c: random.choice(["c1", "c2", "c3", "c4"]),
                 T.StringType()).asNondeterministic()
    data = _data(400).drop("payroll")
    sdf = _spark_frame(spark, data).withColumn("county", pick(F.col("county")))
    s = tabdp.Session(unit="firm", seed=3)
    kw = {"by": ["county", "sector"], "keys": KEYS, "mechanism": mech.Gaussian(sigma=30.0),
          "session": s}
    sdf.dp.sum("emp", **kw)
    sdf.dp.sum("emp", nulls="zero", **kw)
    sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s)
    for q in s.report().confidential_summary()["queries"]:
        assert q["rows_read"] - q["rows_outside_keys"] == q["rows_in_released_cells"], q


@pytest.mark.parametrize("aqe", ["true", "false"])
def test_a_snapshot_whose_job_failed_is_not_kept(spark, tmp_path, aqe):
    """Review r30: a sum whose snapshot job failed left its entry, and the count re-ran it.

    A text column cast to a number fails (ANSI) only in the sum, which reads it; the count
    does not read it and succeeds, as in a fresh session and on the Polars engine. With
    adaptive execution the shuffle stage fails as the checkpoint is made; without it, in the
    job that writes the blocks, whose blocks are then freed (review r31).
    """
    import pandas as pd
    from pyspark.sql import functions as F

    rows = _data().with_columns(pl.col("payroll").cast(pl.String)).to_pandas()
    rows.loc[7, "payroll"] = "not-a-number"
    spark.createDataFrame(pd.DataFrame(rows)).write.parquet(str(tmp_path / "bad.parquet"))
    before = spark.conf.get("spark.sql.ansi.enabled")
    before_aqe = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    spark.conf.set("spark.sql.adaptive.enabled", aqe)
    try:
        bad = spark.read.parquet(str(tmp_path / "bad.parquet")) \
            .withColumn("payroll", F.col("payroll").cast("double"))
        s = tabdp.Session(unit="firm", seed=3)
        with pytest.raises(Exception):  # noqa: B017, PT011 - Spark's own error
            bad.dp.sum("payroll", by=["county", "sector"], keys=KEYS,
                       mechanism=mech.Gaussian(sigma=1e5), session=s)
        from tabdp.frame import binding

        assert not binding.of(s).snapshot
        out = bad.dp.count(by=["county", "sector"], keys=KEYS, session=s)
        assert out.count() == len(KEYS)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
        spark.conf.set("spark.sql.adaptive.enabled", before_aqe)


def test_a_snapshot_whose_blocks_are_lost_is_dropped(spark):
    """Review r31: a kept snapshot whose blocks are lost is dropped by the release that fails.

    Before, every later release that reused it failed alike (an executor gone); now the next
    one aggregates the input again.
    """
    from tabdp.frame import _spark, binding

    sdf = _spark_frame(spark, _data())
    s = tabdp.Session(unit="firm", seed=3)
    sdf.dp.sum("emp", by=["county", "sector"], keys=KEYS, mechanism=mech.Gaussian(sigma=30.0),
               session=s)
    (entry,) = binding.of(s).snapshot.values()
    _spark._free_checkpoint(entry["held"].frame)  # the blocks are gone
    del entry
    with pytest.raises(Exception, match="(?i)checkpoint"):  # noqa: PT011 - Spark's own error
        sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s)
    assert not binding.of(s).snapshot
    out = sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s)
    assert out.count() == len(KEYS)
    assert [r.name for r in s.records] == ["q1_sum", "q2_count"]


def test_superseded_ledger_tables_are_freed(spark, tmp_path):
    """Review r31: each unit-mode release checkpointed the ledger's table and none was freed."""
    import gc

    s = tabdp.Session(unit="firm", seed=3, budget=50.0)
    sdf = _spark_frame(spark, _data())
    tables = []
    for _ in range(4):
        sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s)
        tables.append(s.ledger.table)
    # freed at the update after the next: the last two are kept
    assert [_blocks_on_disk(t) for t in tables] == [False, False, True, True]
    # a written report is used up: its table is freed as any other
    s.report().write_per_record(tmp_path / "per_record.parquet")
    for _ in range(2):
        sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s)
        tables.append(s.ledger.table)
    assert [_blocks_on_disk(t) for t in tables] == [False] * 4 + [True, True]
    pr = s.report().per_record  # hands the current table out: a caller may read it later
    ledger = s.ledger
    del s
    gc.collect()
    assert ledger is not None
    del ledger
    gc.collect()
    assert not _blocks_on_disk(tables[-2])  # freed with the ledger
    assert _blocks_on_disk(tables[-1])  # handed out: kept
    assert pr.count() > 0


_UNPICKLE = """
import pickle, sys
from pyspark import cloudpickle
import pandas, pyarrow  # an Arrow UDF's worker has these
before = set(sys.modules)
fns = [cloudpickle.loads(payload) for payload in pickle.load(sys.stdin.buffer)]
if len(sys.argv) > 1:  # and call the charges and the per-cell quantile, as a worker does
    import numpy as np
    n = 1000
    batch = pandas.DataFrame({c: np.arange(n, dtype=float) for c in sys.argv[1].split(",")})
    for f in fns:
        f(batch)
new = sorted(set(sys.modules) - before)
print(" ".join(new))
"""


def test_a_python_worker_unpickles_tabdps_functions_without_polars_or_the_engine(spark):
    """A new Spark worker imports NumPy, pandas and the mechanism's module, not Polars.

    Every pandas UDF and ``mapInPandas`` function tabdp ships (the charges of a sum and a
    count, ε at δ, the filter row by row and by batch) is pickled as PySpark pickles it and
    unpickled in a fresh interpreter, as a new worker does: importing Polars, tabdp's frame
    engine or `tabdp.release` there cost each worker about a CPU-second (stop 66), and Spark
    starts new workers after a minute idle.
    """
    import pickle

    from pyspark import cloudpickle

    from tabdp.frame import _spark as sp
    from tabdp.privacy.budget import Budget

    b = Budget(10.0)
    need = sp._led_need(b, ["rows"])
    fns = [sp._charge_udf(mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0), ["x", "y"], "sum",
                          {"x": 10, "y": 10})[0].func,
           sp._charge_udf(mech.Gaussian(2.0), [], "count", {})[0].func,
           sp._eps_delta_udf(1e-9).func,
           sp._admit_udf(b, ["rows"], "zcdp", need).func,
           sp._admit_fn(b, ["rows"], "zcdp", False)]
    payload = pickle.dumps([cloudpickle.dumps(f) for f in fns])
    done = subprocess.run([sys.executable, "-c", _UNPICKLE], input=payload,
                          capture_output=True, check=True)
    new = done.stdout.decode().split()
    assert "tabdp.mechanisms.additive" in new  # the mechanism's module (the control)
    heavy = [m for m in new if m.split(".")[0] in ("polars", "scipy", "mpmath")
             or m.startswith(("tabdp.frame", "tabdp.release", "tabdp.report"))]
    assert heavy == []


def test_a_python_worker_computes_charges_and_quantiles_without_scipy_or_mpmath():
    """The charges (the count default, a Gaussian, ExpPolyLog) and a cell's quantile, run cold.

    Stop 68: unpickling a mechanism imported `tabdp.mechanisms` and `tabdp.noise` whole, with
    SciPy's special functions and mpmath (0.41-0.45 CPU-s per new worker); the quantile's
    per-cell function was a closure of the frame engine's module (Polars and the engine). Now
    the packages load their names on first use and the noise laws import SciPy and mpmath when
    a table or a tail needs them; the per-record policy needs neither. Each function is pickled
    as PySpark pickles it, unpickled in a fresh interpreter and called on a batch.
    """
    import pickle

    from pyspark import cloudpickle

    from tabdp import _spark_worker as w
    from tabdp.frame._engine import count_mechanism
    from tabdp.frame._spark import _IN

    fns = [w.charge_fn(mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0), ["x", "y"], "sum",
                       {"x": 10, "y": 10}, _IN)[0],
           w.charge_fn(mech.Gaussian(2.0), ["x"], "sum", {"x": 0}, _IN)[0],
           w.charge_fn(count_mechanism(None), [], "count", {}, _IN)[0],
           w.quantile_cell_fn("c", "v", 0.5, 1.0, (0.0, 100.0))]
    assert type(count_mechanism(None)).__name__ == "DiscreteGaussian"  # the count default
    cols = [f"{_IN}rows_in", *(f"{_IN}{k}:{m}" for k in "as" for m in "xy"), "c", "v"]
    payload = pickle.dumps([cloudpickle.dumps(f) for f in fns])
    done = subprocess.run([sys.executable, "-c", _UNPICKLE, ",".join(cols)], input=payload,
                          capture_output=True, check=True)
    new = done.stdout.decode().split()
    assert {"tabdp.mechanisms.discrete", "tabdp.noise.exp_polylog"} <= set(new)  # the control
    heavy = [m for m in new if m.split(".")[0] in ("polars", "scipy", "mpmath")
             or m.startswith(("tabdp.frame", "tabdp.release", "tabdp.report"))]
    assert heavy == []


def test_the_python_workers_run_with_numpys_errors_off(spark, monkeypatch):
    """The pandas UDFs of tabdp run their NumPy work with every error ignored and no thread pools.

    A Spark worker starts with NumPy's defaults (a warning per overflow, printed beside the
    job): the charges, the filter, ε at δ and a policy evaluated by NumPy run inside
    ``engine_thread``, as the release's own thread does. Called here as the worker calls them
    (the UDFs' Python functions), with steps that overflow patched in: nothing warns.
    """
    import warnings

    import pandas as pd

    from tabdp._numeric import work_threads
    from tabdp.frame import _policy_expr as pe
    from tabdp.frame import _spark as sp
    from tabdp.privacy.accounting import COMPONENTS
    from tabdp.privacy.budget import Budget

    threads: list[int] = []

    def loud(fn):
        def run(*a, **k):
            threads.append(work_threads())
            _ = np.array([1e308]) * 10.0  # overflows: warns under NumPy's defaults
            return fn(*a, **k)
        return run

    from tabdp import _spark_worker as w

    monkeypatch.setattr(w, "policy_values", loud(w.policy_values))
    monkeypatch.setattr(w, "admit_batch", loud(w.admit_batch))
    import tabdp.privacy.accounting as acc
    monkeypatch.setattr(acc, "epsilon_at", loud(acc.epsilon_at))
    n = 5
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        udf, _ = sp._charge_udf(mech.Gaussian(2.0), [], "count", {})
        udf.func(pd.DataFrame({f"{sp._IN}rows_in": np.ones(n)}))
        sp._eps_delta_udf(1e-9).func(pd.DataFrame({c: np.full(n, 0.5) for c in COMPONENTS}))
        b = Budget(10.0)
        need = sp._led_need(b, ["rows"])
        frame = pd.DataFrame({"r0": np.full(n, 0.5), "e0": np.full(n, 1.0),
                              "s0": np.ones(n), **{f"l{k}": np.zeros(n)
                                                   for k in range(len(need))}})
        sp._admit_udf(b, ["rows"], "zcdp", need).func(frame)
        list(sp._admit_fn(b, ["rows"], "zcdp", False)(
            iter([frame.rename(columns={f"l{k}": f"{sp._IN}led:{c}" for k, c in enumerate(need)})
                 .assign(**{sp._UID: np.arange(n)})])))
        pe._spark_numpy_udf(loud(np.sqrt)).func(pd.Series(np.ones(n)))
    # (PySpark itself warns about pandas' version when a UDF is made: not a NumPy error)
    assert [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)] == []
    assert threads and set(threads) == {1}
    with warnings.catch_warnings(record=True) as seen:  # the control: the steps do warn
        warnings.simplefilter("always")
        _ = np.array([1e308]) * 10.0
    assert seen


@pytest.mark.parametrize("unit", [None, "id"])
def test_nan_null_and_large_integer_keys_match_as_on_polars(spark, unit):
    """The public key set reaches Spark exactly: NaN is not null, 2**53 + 1 is not 2**53.

    Review r75: the key set (and the released table) went to Spark through pandas, where a
    Float64 column's NaN and null are one value and an Int64 column holding a null is float64.
    A key set holding NaN and null put a null record in both cells (counted twice, charged
    once per cell in row mode: a budget would have admitted it twice) and the NaN record in
    none; a key 2**53 + 1 next to a null became 2**53, which matched the record holding
    2**53 (outside the key set) and was published as 2**53.
    """
    nan = float("nan")
    big = 2**53 + 1
    rows = [(0, None, big, 5.0), (1, 1.0, 2**53, 7.0), (2, nan, None, 11.0), (3, None, big, 13.0)]
    sdf = spark.createDataFrame(rows, "id long, g double, k long, x double")  # NaN kept
    df = pl.DataFrame(rows, schema={"id": pl.Int64, "g": pl.Float64, "k": pl.Int64,
                                    "x": pl.Float64}, orient="row")
    for by, keys in [("g", tabdp.KeySet.from_dict(g=[nan, None, 1.0])),
                     ("k", tabdp.KeySet.from_dict(k=[big, None]))]:
        got = []
        for frame in (df, sdf):
            s = tabdp.Session(unit=unit, seed=3)
            out = frame.dp.sum("x", by=by, keys=keys, mechanism=mech.Gaussian(sigma=1.0),
                               session=s, nulls="zero")
            got.append((out if isinstance(out, pl.DataFrame) else _pl(out),
                        s.records[-1].confidential, _report(s)))
        (t_pl, c_pl, r_pl), (t_sp, c_sp, r_sp) = got
        assert c_sp == c_pl, by  # rows read, rows outside the key set
        _same_reports(r_pl, r_sp, exact=True)  # each record once, in its one cell
        assert t_sp.schema == t_pl.schema
        assert t_sp.drop(by).equals(t_pl.drop(by)), by
        assert t_sp[by].to_list()[1:] == t_pl[by].to_list()[1:]  # (NaN != NaN as a list item)
        assert math.isnan(t_sp[by][0]) if by == "g" else t_sp[by][0] == big


def test_columns_equal_in_letter_case_refused_from_the_schema_or_released(spark):
    """Columns ``x`` and ``X`` (review rev63k): Spark's own AMBIGUOUS_REFERENCE error before.

    A case-insensitive session (Spark's default) cannot name either column, whichever the
    release uses: refused with tabdp's error before anything is read. A case-sensitive one
    releases what Polars releases.
    """
    data = pl.DataFrame({"county": ["c1", "c2", "c1"], "sector": [1, 2, 1],
                         "x": [1.0, 2.0, 3.0], "X": [5.0, 6.0, 7.0]})
    sdf = _spark_frame(spark, data)
    s = tabdp.Session(seed=0)
    with pytest.raises(tabdp.InvalidParameterError, match=r"letter case \(\[\['x', 'X'\]\]\)"):
        sdf.dp.count(by=["county", "sector"], keys=KEYS, session=s)
    assert not s.records
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        outs = [frame.dp.sum("X", by=["county", "sector"], keys=KEYS, session=tabdp.Session(
            seed=0), mechanism=mech.Gaussian(5.0)) for frame in (data, sdf)]
    finally:
        spark.conf.unset("spark.sql.caseSensitive")
    assert outs[0].equals(_pl(outs[1]))


def test_row_mode_over_a_frame_with_a_map_column_equals_polars(spark):
    """An unused map column (review rev63k): the row fingerprints hashed every column.

    Spark's hashes refuse maps, so every row-mode release over a frame with a map column (at
    any depth) stopped with Spark's HASH_MAP_TYPE error; the Polars engines never read it.
    """
    from pyspark.sql import functions as F

    data = _data(12)
    sdf = _spark_frame(spark, data).withColumns({
        "tags": F.create_map(F.lit("k"), F.col("emp")),
        "nested": F.array(F.struct(F.create_map(F.col("county"), F.col("sector")).alias("m")))})
    outs = [frame.dp.sum("payroll", by=["county", "sector"], keys=KEYS, session=tabdp.Session(
        seed=0), mechanism=mech.Gaussian(50.0)) for frame in (data, sdf)]
    assert outs[0].equals(_pl(outs[1]))


def test_unit_mode_over_columns_equal_in_letter_case_it_does_not_name(spark):
    """Columns ``x`` and ``X`` a unit-mode release does not name (review rev63d).

    Unit mode names only the release's columns, so Spark resolved them and the releases went
    through, as on Polars; the refusal of rev63k (meant for row mode, which fingerprints every
    column) stopped them. A release naming either column is still refused.
    """
    data = _data(40).with_columns(x=pl.lit(1.0), X=pl.lit(2.0))
    sdf = _spark_frame(spark, data)
    outs = []
    for frame in (data, sdf):
        s = tabdp.Session(unit="firm", seed=3)
        outs.append([frame.dp.sum("payroll", by=["county", "sector"], keys=KEYS, session=s,
                                  mechanism=mech.Gaussian(5e4)),
                     frame.dp.count(by=["county", "sector"], keys=KEYS, session=s)])
    for a, b in zip(*outs, strict=True):
        assert a.equals(_pl(b))
    s = tabdp.Session(unit="firm", seed=3)
    with pytest.raises(tabdp.InvalidParameterError, match=r"letter case \(\[\['x', 'X'\]\]\)"):
        sdf.dp.sum("X", by=["county", "sector"], keys=KEYS, session=s,
                   mechanism=mech.Gaussian(5.0))
    assert not s.records


@pytest.mark.parametrize("ntz", [False, True])
def test_a_map_column_changed_by_a_microsecond_is_another_frame(spark, ntz):
    """A map's fingerprint is its JSON text, its timestamps to the microsecond (review rev63d).

    Spark's default JSON format keeps a timestamp's milliseconds only, so a frame whose map held
    a timestamp one microsecond later had the same fingerprint and was taken for the bound one.
    """
    import datetime as dt

    kind = "timestamp_ntz" if ntz else "timestamp"
    schema = f"county string, sector long, payroll double, m map<string,{kind}>"

    def frame(us: int) -> Any:
        return spark.createDataFrame(
            [("c1", 1, 10.0, {"t": dt.datetime(2020, 1, 1, 0, 0, 0, us)}),
             ("c2", 2, 20.0, {"t": dt.datetime(2020, 1, 1)})], schema)

    s = tabdp.Session(seed=0)
    frame(1).dp.sum("payroll", by=["county", "sector"], keys=KEYS, session=s,
                    mechanism=mech.Gaussian(5.0))
    with pytest.raises(tabdp.InvalidParameterError):
        frame(2).dp.sum("payroll", by=["county", "sector"], keys=KEYS, session=s,
                        mechanism=mech.Gaussian(5.0))
    assert len(s.records) == 1


@pytest.mark.parametrize("unit", [None, "firm"])
@pytest.mark.parametrize("precision", [10, 38])
def test_decimal_keys_of_the_data_type_released_as_on_polars(spark, unit, precision):
    """A key set of the data's decimal type (stop 64): refused on Spark only.

    Spark had no type for a ``Decimal`` key set ("key columns of dtype Decimal(...) are not
    supported on Spark frames"), while Polars released it. The same cells, keys in the input's
    decimal type and values as Polars', for a sum, a count and a median, row and unit mode;
    a null key and a key without data included.
    """
    from pyspark.sql import types as T

    from tabdp.frame.releases import released_table

    dec = pl.Decimal(precision, 2)
    vals = [Decimal("1.50"), Decimal("2.00"), Decimal("-0.25"), None]
    data = pl.DataFrame({"firm": [i % 5 for i in range(24)],
                         "k": pl.Series([vals[i % 4] for i in range(24)], dtype=dec),
                         "x": [float(i) for i in range(24)]})
    keys = tabdp.KeySet.from_dict(k=pl.Series([Decimal("1.50"), Decimal("2.00"),
                                               Decimal("-0.25"), Decimal("9.99"), None],
                                              dtype=dec))
    sdf = spark.createDataFrame(data.to_arrow())
    assert sdf.schema["k"].dataType == T.DecimalType(precision, 2)
    outs = []
    for frame in (data, sdf):
        s = tabdp.Session(unit=unit, seed=4, budget=50.0)
        kw = {"by": "k", "keys": keys, "session": s}
        got = [frame.dp.sum("x", mechanism=mech.Gaussian(3.0), **kw),
               frame.dp.count(**kw),
               frame.dp.median("x", bounds=(0.0, 24.0), epsilon=1.0, **kw)]
        outs.append([released_table(o) for o in got])
    for want, got in zip(*outs, strict=True):
        assert got.schema == want.schema and got.schema["k"] == dec, (got.schema, want.schema)
        assert got.equals(want), (got, want)


def test_equal_maps_in_another_entry_order_are_the_same_frame(spark):
    """A map's entries in another order are the same map (stop 64): the same bound frame.

    Spark has no order of a map's entries (it compares no maps), but the fingerprint hashed
    a map's JSON text in stored order: a frame rebuilt with the same maps, entries in another
    order, was refused as another frame (the Polars engines never fingerprint such a column).
    At any depth: in an array, in a struct, as a map's value. A changed entry is still caught.
    """
    from pyspark.sql import functions as F

    base = _spark_frame(spark, _data(12))

    def frame(reverse: bool, value: int = 2) -> Any:
        pairs = [(F.lit("a"), F.col("emp")), (F.lit("b"), F.lit(value))]
        if reverse:
            pairs.reverse()
        m = F.create_map(*[x for p in pairs for x in p])
        nested = F.create_map(F.lit("outer"), m, F.lit("other"), F.create_map(F.lit("z"),
                                                                              F.lit(1)))
        if reverse:
            nested = F.create_map(F.lit("other"), F.create_map(F.lit("z"), F.lit(1)),
                                  F.lit("outer"), m)
        return base.withColumns({"m": m, "arr": F.array(m, F.create_map()),
                                 "st": F.struct(m.alias("x"), F.lit(None).cast("int").alias("y")),
                                 "nested": nested})

    s = tabdp.Session(seed=0)
    kw = {"by": ["county", "sector"], "keys": KEYS, "session": s}
    frame(False).dp.sum("payroll", mechanism=mech.Gaussian(50.0), **kw)
    frame(True).dp.sum("payroll", mechanism=mech.Gaussian(50.0), **kw)
    assert len(s.records) == 2
    with pytest.raises(tabdp.InvalidParameterError):
        frame(True, value=3).dp.sum("payroll", mechanism=mech.Gaussian(50.0), **kw)
    assert len(s.records) == 2



@pytest.mark.parametrize("names", [("a", "A"), ("a", "a")])
def test_a_map_in_a_struct_with_fields_of_one_name_is_fingerprinted(spark, names):
    """A struct holding a map, with two fields ``a`` and ``A`` (or ``a`` twice): review rev64s.

    Its map is sorted field by field (`_canonical`), and ``getField("a")`` of such a struct is
    ambiguous: every row-mode release over a frame with such an unused column stopped with
    Spark's ``AMBIGUOUS_REFERENCE_TO_FIELDS``. Fields are now taken by position; a changed
    value in either twin is still another frame.
    """
    from pyspark.sql import functions as F

    base = _spark_frame(spark, _data(12))

    def frame(first: int = 1, second: int = 2) -> Any:
        m = F.create_map(F.lit("k"), F.col("emp"))
        return base.withColumn("st", F.struct(m.alias("m"), F.lit(first).alias(names[0]),
                                              F.lit(second).alias(names[1])))

    s = tabdp.Session(seed=0)
    kw = {"by": ["county", "sector"], "keys": KEYS, "session": s}
    frame().dp.sum("payroll", mechanism=mech.Gaussian(50.0), **kw)
    frame().dp.sum("payroll", mechanism=mech.Gaussian(50.0), **kw)
    assert len(s.records) == 2
    for changed in (frame(first=3), frame(second=3)):
        with pytest.raises(tabdp.InvalidParameterError):
            changed.dp.sum("payroll", mechanism=mech.Gaussian(50.0), **kw)
    assert len(s.records) == 2


class _NoArrow:
    """A Spark DataFrame as PySpark 3.5 gives it: no ``toArrow`` (`to_polars`' other branch)."""

    def __init__(self, sdf: Any) -> None:
        self._sdf = sdf

    def __getattr__(self, name: str) -> Any:
        if name == "toArrow":
            raise AttributeError(name)
        return getattr(self._sdf, name)


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles", "Asia/Kolkata"])
def test_to_polars_without_to_arrow_equals_the_arrow_branch(spark, zone):
    """`to_polars` on PySpark 3.5 (no ``DataFrame.toArrow``; `.ci/spark-floor`), stop 64.

    Forced here on the installed PySpark: its table must be the Arrow branch's, dtype for
    dtype and value for value, in and out of UTC. Through pandas, a ``timestamp`` was the
    session zone's wall time (Arrow branch: the UTC wall time), a ``timestamp_ntz`` and a
    ``date`` took pandas' nanosecond dtypes, an integer column with a null came back
    ``Float64`` (``2**53 + 1`` rounded) and a NaN key was null.
    """
    import datetime as dt

    from pyspark.sql import types as T

    from tabdp.frame.backends.spark import to_polars

    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        t = [dt.datetime(2020, 1, 1, 0, 30), dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
             None]
        data = pl.DataFrame({
            "ts": pl.Series(t, dtype=pl.Datetime("us", "UTC")),
            "ntz": pl.Series(t, dtype=pl.Datetime("us")),
            "d": [dt.date(2020, 1, 1), dt.date(1900, 3, 1), None],
            "i": [2**53 + 1, None, -3],
            "f": [float("nan"), None, 1.5],
            "s": ["a", None, "c"],
            "dec": pl.Series([Decimal("1.50"), None, Decimal("-0.25")], dtype=pl.Decimal(10, 2)),
        })
        sdf = spark.createDataFrame(data.to_arrow(), T.StructType([
            T.StructField("ts", T.TimestampType()), T.StructField("ntz", T.TimestampNTZType()),
            T.StructField("d", T.DateType()), T.StructField("i", T.LongType()),
            T.StructField("f", T.DoubleType()), T.StructField("s", T.StringType()),
            T.StructField("dec", T.DecimalType(10, 2))]))
        assert isinstance(sdf.schema["ts"].dataType, T.TimestampType)
        assert isinstance(sdf.schema["ntz"].dataType, T.TimestampNTZType)
        want = to_polars(sdf)
        assert want["ts"].to_list() == t and want["ntz"].to_list() == t  # UTC wall times
        got = to_polars(_NoArrow(sdf))
        assert got.schema == want.schema, (got.schema, want.schema)
        assert got.equals(want), (got, want)
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def test_case_clashes_fold_names_as_spark_compares_them():
    """Spark's case-insensitive comparisons are Java's, not Python's ``str.lower`` (stop 65).

    Spark resolves ``X_Σ`` and ``x_ς`` as one column (Java's final sigma is decided by word
    boundaries: ``X_Σ`` lowers to ``x_ς``; Python's to ``x_σ``), and ``withColumns``/``drop``
    take ``ıd`` and ``id`` for one (Java's ``equalsIgnoreCase``, through the upper case):
    neither pair was a clash, so a frame with both failed with Spark's own error, and
    ``withColumns`` of ``id`` replaced ``ıd`` too. Both are now clashes; ``ss``/``ß`` and
    ``ﬀ``/``ff`` are not (for Spark neither).
    """
    from tabdp.frame.backends.spark import case_clashes

    assert case_clashes(["X_Σ", "x_ς"]) == [["X_Σ", "x_ς"]]
    assert case_clashes(["A1Σ", "a1ς"]) == [["A1Σ", "a1ς"]]
    assert case_clashes(["ıd", "id"]) == [["ıd", "id"]]
    assert case_clashes(["İD", "id"]) == [["İD", "id"]]
    assert case_clashes(["ſum", "Sum"]) == [["ſum", "Sum"]]
    assert case_clashes(["ss", "ß", "ﬀ", "ff"]) == []


def test_case_clashes_cover_every_pair_the_jvm_takes_for_one(spark):
    """Every pair of names the session's JVM takes for one is a clash for tabdp (stop 65).

    Either of Spark's comparisons (``toLowerCase(Locale.ROOT)``: column resolution;
    ``equalsIgnoreCase``: ``withColumns``, ``drop``), checked against the JVM itself; and
    Spark's own resolution refuses the pairs Python's ``str.lower`` let through.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tabdp.frame.backends.spark import case_clashes

    su = spark._jvm.org.apache.commons.lang3.StringUtils
    root = spark._jvm.java.util.Locale.ROOT
    names = ["x_σ", "X_Σ", "x_ς", "A1Σ", "a1ς", "ΑΣ", "ας", "id", "Id", "ıd", "İd", "i\u0307d",
             "ß", "ẞ", "ss", "SS", "ǅ", "ǆ", "Ǆ", "K", "k", "\u212a", "µ", "μ", "Μ", "ſ", "s",
             "ϑ", "θ", "ᾈ", "ᾀ", "ﬀ", "ff", "Å", "å", "\u212b", "ꟁ", "Ꟁ"]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            jvm_one = su.equalsIgnoreCase(a, b) or su.lowerCase(a, root) == su.lowerCase(b, root)
            if jvm_one:
                assert case_clashes([a, b]), (a, b)
    sdf = spark.createDataFrame([(1, 2)], T.StructType([T.StructField("X_Σ", T.LongType()),
                                                        T.StructField("x_ς", T.LongType())]))
    with pytest.raises(Exception, match="AMBIGUOUS"):
        sdf.select(F.col("X_Σ")).collect()
    two = spark.createDataFrame([(1, 2)], ["ıd", "id"])
    assert two.drop("id").columns == []  # Spark's drop takes both


def test_spark_release_refuses_names_spark_cannot_tell_apart(spark):
    """A row-mode release over a frame with ``X_Σ`` and ``x_ς``: refused (stop 65).

    From the schema, with what to do, not Spark's own error; a name with a letter Python's
    Unicode does not know is refused likewise (the JVM's may fold it).
    """
    base = _spark_frame(spark, _data(12))
    kw = {"by": ["county", "sector"], "keys": KEYS, "mechanism": mech.Gaussian(50.0)}
    with pytest.raises(tabdp.InvalidParameterError, match="differ only in letter case"):
        base.select("*", base["emp"].alias("X_Σ"), base["emp"].alias("x_ς")).dp.sum(
            "payroll", session=tabdp.Session(seed=0), **kw)
    with pytest.raises(tabdp.InvalidParameterError, match="Unicode database"):
        base.withColumn("a" + chr(0x378), base["emp"]).dp.sum(
            "payroll", session=tabdp.Session(seed=0), **kw)


def _parquet_frame(spark: Any, table: Any, path: Any) -> Any:
    """A Spark frame read from ``table`` (pyarrow) written as Parquet.

    Values Spark itself would not build: a map holding both ``-0.0`` and ``0.0``.
    """
    import pyarrow.parquet as pq

    pq.write_table(table, str(path))
    return spark.read.parquet(str(path))


def test_map_keys_minus_zero_and_zero_fingerprint_by_entries_not_order(spark, tmp_path):
    """Map keys ``-0.0`` and ``0.0`` (stop 65): the sorted entries' order is total.

    Spark orders ``-0.0`` and ``0.0`` as equal, so a map read with both keys and equal
    values kept its stored order in `_canonical`'s sort and the fingerprint of two equal
    maps (entries in another order) differed: a frame rebuilt so was refused as another
    frame. At any depth of a key too (a struct key). Unequal maps still differ.
    """
    pa = pytest.importorskip("pyarrow")
    from pyspark.sql import functions as F

    from tabdp.frame._spark import _fingerprint

    def fps(rows: list[Any], key: Any) -> list[int]:
        table = pa.table({"m": pa.array(rows, pa.map_(key, pa.int64()))})
        sdf = _parquet_frame(spark, table, tmp_path / f"m{len(list(tmp_path.iterdir()))}.pq")
        dtype = sdf.schema["m"].dataType
        return [r[0] for r in sdf.select(_fingerprint(F.lit(1), "m", dtype)).collect()]

    f64 = pa.float64()
    a, b, c, d = fps([[(-0.0, 1), (0.0, 1)], [(0.0, 1), (-0.0, 1)], [(0.0, 1)], [(-0.0, 1)]],
                     f64)
    assert a == b  # the same map, entries stored in another order
    assert len({a, c, d}) == 3  # other maps
    sk = pa.struct([("x", f64)])
    a, b = fps([[({"x": -0.0}, 1), ({"x": 0.0}, 1)], [({"x": 0.0}, 1), ({"x": -0.0}, 1)]], sk)
    assert a == b


def _no_arrow_anywhere(monkeypatch: pytest.MonkeyPatch, sdf: Any) -> None:
    """Remove ``DataFrame.toArrow`` from every class that defines it (PySpark 3.5 has none)."""
    for cls in type(sdf).__mro__:
        if "toArrow" in vars(cls):
            monkeypatch.delattr(cls, "toArrow")
    assert not hasattr(sdf, "toArrow")


def test_lifetime_charges_without_to_arrow_are_typed(spark, monkeypatch):
    """PySpark 3.5's collect of the admitted units' lifetime charges (stop 65): typed.

    It went through pandas: an integer unit column holding a null came back Float64 (the id
    ``2**53 + 1`` became ``2**53``: two units charged as one), and no admitted unit came
    back as untyped object columns. Now `to_polars`' rows as Python values.
    """
    import types

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tabdp.frame._spark import _UID, _lifetime_charges
    from tabdp.privacy.accounting import COMPONENTS

    schema = T.StructType([T.StructField(_UID, T.LongType()),
                           T.StructField("ok0", T.BooleanType()),
                           T.StructField("r0", T.DoubleType()),
                           T.StructField("s0", T.DoubleType())])
    decided = spark.createDataFrame([(2**53 + 1, True, 0.5, 1.0), (None, True, 0.25, 2.0),
                                     (7, False, 9.0, 9.0)], schema)
    comps = {c: F.col("r0") for c in COMPONENTS}
    sess = types.SimpleNamespace(lifetime=object())
    _no_arrow_anywhere(monkeypatch, decided)
    got = _lifetime_charges(sess, decided, F.col("ok0"), comps, [("c", ["x"])])
    assert got is not None
    units, sums, maxes = got
    assert units.dtype == pl.Int64 and sorted(units.to_list(), key=str) == [2**53 + 1, None]
    assert sorted(sums["rho@c"].tolist()) == [0.25, 0.5]
    none = _lifetime_charges(sess, decided, F.lit(False), comps, [("c", ["x"])])
    assert none is not None and none[0].dtype == pl.Int64 and none[0].len() == 0


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
def test_to_polars_without_to_arrow_nested_timestamps_are_utc(spark, monkeypatch, zone):
    """A ``timestamp`` in a struct, an array or a map (stop 65), PySpark 3.5's branch.

    PySpark turns an instant into the driver's local wall time: at top level the branch took
    its microseconds (stop 64), in a struct it was the local wall time (Kolkata: 05:30 off).
    Now the Arrow branch's frame, dtype for dtype and value for value: nested instants in
    UTC. Forced here on the installed PySpark, in another driver (``TZ``) and session zone.
    """
    import datetime as dt
    import time

    from pyspark.sql import types as T

    from tabdp.frame.backends.spark import to_polars

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        utc = dt.UTC
        ts = T.TimestampType()
        schema = T.StructType([
            T.StructField("s", T.StructType([T.StructField("t", ts),
                                             T.StructField("n", T.IntegerType())])),
            T.StructField("a", T.ArrayType(ts)),
            T.StructField("m", T.MapType(T.StringType(), ts)),
            T.StructField("deep", T.StructType([T.StructField("in", T.StructType([
                T.StructField("t", ts)]))])),
            T.StructField("plain", T.StructType([T.StructField("x", T.DoubleType()),
                                                 T.StructField("d", T.DateType())]))])
        sdf = spark.createDataFrame([
            ({"t": dt.datetime(2020, 1, 1, 0, 30, tzinfo=utc), "n": 1},
             [dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc), None],
             {"k": dt.datetime(2020, 6, 1, 12, tzinfo=utc)}, {"in": {"t": None}},
             {"x": 2.5, "d": dt.date(2020, 1, 1)}),
            (None, None, None, None, None)], schema)
        want = to_polars(sdf)
        got = to_polars(_NoArrow(sdf))
        assert got.schema == want.schema, (got.schema, want.schema)
        assert got.equals(want), (got, want)
        assert got["s"][0]["t"] == dt.datetime(2020, 1, 1, 0, 30, tzinfo=utc)
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
        monkeypatch.undo()  # TZ as it was
        time.tzset()
