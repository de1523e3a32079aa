"""Unit mode's engine: losses summed per unit in key-set order, whatever the input's row order.

The unit path orders the (unit, cell) rows by unit id then cell once per snapshot and key set
(``UnitOrder``: a permutation, the rows are not moved), sums each unit's losses left to right
over its cells and merges them into the ledger without a re-sort when the units are those
already held. These tests pin the semantics
that the faster path must keep: exact per-unit sums in key-set order (checked against the
mechanism's policy evaluated cell by cell), bit-identical reports for any row order and for
integer or text ids, the public contribution bounds, and the ledger's merge.
"""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pytest
from _sums import add_up_ref, sum_up_ref

import tabdp
import tabdp.frame._engine as engine
from tabdp import mechanisms as mech
from tabdp.frame._engine import ROW_ID
from tabdp.privacy.ledger import UnitLedger

COUNTIES = ["c0", "c1", "c2", "c3"]
SECTORS = [11, 22, 33]


def _firms(n: int = 3000, seed: int = 5) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame({
        "firm": rng.integers(0, n // 4, n),           # about 4 establishments per firm
        "county": rng.choice(COUNTIES, n),
        "naics": rng.choice(SECTORS, n),
        "payroll": rng.lognormal(10.0, 2.0, n).round(0),  # whole: Δ is the exact total
        "emp": rng.integers(0, 500, n),
    })


def _keys() -> tabdp.KeySet:
    # key-set order differs from the sorted order of the keys (c3 first)
    return tabdp.KeySet.from_dict(county=["c3", "c0", "c2", "c1"], naics=SECTORS)


def _release(df: pl.DataFrame | pl.LazyFrame, unit: str = "firm", *, budget: float | None = None,
             max_cells: int | None = None) -> tuple[list[pl.DataFrame], pl.DataFrame]:
    s = tabdp.Session(unit=unit, seed=11, budget=budget)
    m = mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)
    a = df.dp.sum(["payroll", "emp"], by=["county", "naics"], keys=_keys(), mechanism=m,
                  session=s, max_cells=max_cells)
    b = df.dp.count(by=["county", "naics"], keys=_keys(), session=s, max_cells=max_cells)
    c = df.dp.sum("payroll", by=["county"], keys=tabdp.KeySet.from_dict(county=COUNTIES),
                  mechanism=mech.Gaussian(2e5), session=s)
    out = [x.collect() if isinstance(x, pl.LazyFrame) else x for x in (a, b, c)]
    return out, s.report().per_record


@pytest.mark.parametrize("max_cells", [None, 2])
@pytest.mark.parametrize("budget", [None, 3.0])
def test_unit_losses_do_not_depend_on_row_order(max_cells: int | None,
                                                budget: float | None) -> None:
    df = _firms()
    tables, per = _release(df, budget=budget, max_cells=max_cells)
    shuffled = df.sample(fraction=1.0, shuffle=True, seed=3)
    tables2, per2 = _release(shuffled.lazy(), budget=budget, max_cells=max_cells)
    for t1, t2 in zip(tables, tables2, strict=True):
        assert t1.equals(t2)
    assert per.equals(per2)  # to the last bit, units in sorted order
    assert per["firm"].is_sorted()
    assert per.height == df["firm"].n_unique() or budget is not None


def test_unit_rho_is_the_left_to_right_sum_over_cells_in_key_set_order() -> None:
    df = _firms(800)
    s = tabdp.Session(unit="firm", seed=1)
    m = mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)
    df.dp.sum("payroll", by=["county", "naics"], keys=_keys(), mechanism=m, session=s)
    per = s.report().per_record
    # the policy per (firm, cell) at the cell's exact total, cells in key-set order
    key_order = {k: i for i, k in enumerate(_keys().to_polars().iter_rows())}
    cells = df.group_by("firm", "county", "naics").agg(pl.col("payroll").sum())
    expected: dict[int, float] = {}
    for firm, rows in cells.group_by("firm"):
        ordered = sorted(rows.iter_rows(named=True),
                         key=lambda r: key_order[(r["county"], r["naics"])])
        # left to right, each addition rounded up where inexact (never below the exact sum)
        total = sum_up_ref(float(np.asarray(m.rho(np.array([abs(r["payroll"])])))[0])
                           for r in ordered)
        expected[int(firm[0])] = total  # type: ignore[arg-type]
    got = dict(zip(per["firm"].to_list(), per["rho"].to_list(), strict=True))
    assert got == expected  # exact: same float operations in the same order
    assert any(rows.height > 2 for _, rows in cells.group_by("firm"))  # sums of several cells


def test_text_ids_give_the_integer_ids_report() -> None:
    df = _firms()
    _, per_int = _release(df)
    text = df.with_columns(pl.col("firm").cast(pl.String).str.zfill(6))
    _, per_text = _release(text)
    assert per_text["firm"].to_list() == [f"{f:06d}" for f in per_int["firm"].to_list()]
    assert per_text.drop("firm").equals(per_int.drop("firm"))


def test_wide_id_range_falls_back_to_the_multi_column_sort() -> None:
    df = _firms()
    wide = df.with_columns((pl.col("firm") * (1 << 50)).alias("firm"))  # no Int64 sort key
    _, per = _release(df)
    _, per_wide = _release(wide)
    assert per_wide["firm"].to_list() == [f * (1 << 50) for f in per["firm"].to_list()]
    assert per_wide.drop("firm").equals(per.drop("firm"))


def test_ledger_merge_of_the_same_units_equals_the_general_merge() -> None:
    units = pl.Series([1, 3, 5, None], dtype=pl.Int64)
    a = {"rho": np.array([0.1, 0.2, 0.3, 0.4])}
    b = {"rho": np.array([1.0, 2.0, 3.0, 4.0]), "epsilon": np.array([1.0, 1.0, 1.0, 1.0])}
    fast = UnitLedger()
    fast.add(units, a, {"size": np.array([5.0, 1.0, 2.0, 3.0])})
    fast.add(units, b, {"size": np.array([1.0, 7.0, 2.0, 0.0])})
    slow = UnitLedger()
    slow.add(units, a, {"size": np.array([5.0, 1.0, 2.0, 3.0])})
    slow.add(units.reverse(), {k: v[::-1].copy() for k, v in b.items()},
             {"size": np.array([1.0, 7.0, 2.0, 0.0])[::-1].copy()})  # not in order: merge
    assert fast.frame().select(sorted(fast.frame().columns)).equals(
        slow.frame().select(sorted(slow.frame().columns)))
    assert fast.frame()["rho"].to_list() == [add_up_ref(a, b) for a, b in
                                             [(0.1, 1.0), (0.2, 2.0), (0.3, 3.0), (0.4, 4.0)]]
    # 0.3 + 3.0 rounds down (to nearest): the total is a double above it
    assert fast.frame()["rho"][2] > 0.3 + 3.0
    assert fast.frame()["size"].to_list() == [5.0, 7.0, 2.0, 3.0]


def test_public_bounds_of_row_ids_do_not_depend_on_repeated_rows() -> None:
    """With caller-given row ids, whether a join repeated a row is data: bounds must not show it.

    Two neighbouring inputs: in one, a row appears twice (a fine code mapped to two coarse
    codes); the public contribution bounds of the release are the same.
    """
    base = pl.DataFrame({ROW_ID: [0, 1, 2], "county": ["c0", "c1", "c2"],
                         "payroll": [1.0, 2.0, 3.0]})
    repeated = pl.concat([base, base.head(1).with_columns(county=pl.lit("c3"))])
    keys = tabdp.KeySet.from_dict(county=COUNTIES)
    public = []
    for frame in (base, repeated):
        s = tabdp.Session(unit=ROW_ID, _row_ids=True, _rows_one_cell=False, seed=0)
        frame.dp.sum("payroll", by="county", keys=keys, mechanism=mech.Gaussian(1.0),
                     session=s)
        public.append(s.records[0].public()["contribution_bounds"])
    assert public[0] == public[1] == {"max_cells": None, "max_rows": None}
    s = tabdp.Session(unit=ROW_ID, _row_ids=True, seed=0)  # joins keep one row per record
    base.dp.sum("payroll", by="county", keys=keys, mechanism=mech.Gaussian(1.0), session=s)
    assert s.records[0].public()["contribution_bounds"] == {"max_cells": 1, "max_rows": 1}


def test_one_to_one_is_decided_after_the_join_conversion() -> None:
    """Fine codes '1001' and '01001' are one code once cast to the input's Int64 column."""
    from tabdp.release import _input

    mapping = pl.DataFrame({"county": ["1001", "01001", "1003"], "region": ["a", "b", "a"]})
    spec = SimpleNamespace(
        tables=[SimpleNamespace(by=["county"], rollups=[
            SimpleNamespace(direct=True, by=["region"], maps={"region": ("geo", "county")})])],
        hierarchies={"geo": SimpleNamespace(mapping=mapping)})
    schema = {"county": "Int64", "payroll": "Float64"}
    as_text = pl.LazyFrame(schema={"county": pl.String, "payroll": pl.Float64})
    as_int = pl.LazyFrame(schema={"county": pl.Int64, "payroll": pl.Float64})
    assert _input._rows_kept_one_to_one(spec, schema, as_text)  # type: ignore[arg-type]
    assert not _input._rows_kept_one_to_one(spec, schema, as_int)  # type: ignore[arg-type]


def test_segment_sums_are_left_to_right_sums_rounded_up() -> None:
    from tabdp.frame._engine import _Segments

    rng = np.random.default_rng(9)
    lengths = np.r_[rng.integers(1, 6, 500), 1, 40, 7, 1]
    v = rng.lognormal(0.0, 3.0, int(lengths.sum()))
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    got = _Segments(starts, len(v)).sum(v)
    for i, (a, n) in enumerate(zip(starts, lengths, strict=True)):
        assert got[i] == sum_up_ref(v[a:a + n].tolist())
    # numpy's reduceat groups the additions otherwise: the test can tell them apart
    assert (np.add.reduceat(v, starts) != got).any()


@pytest.mark.parametrize("long", [64, 65, 300, 2000])
def test_segment_sums_of_units_with_many_cells_are_left_to_right(long: int) -> None:
    """Segments longer than the vector steps are finished by a sequential loop."""
    from tabdp.frame._engine import _Segments

    rng = np.random.default_rng(long)
    lengths = np.r_[rng.integers(1, 4, 300), long, 3, long + 7, 1]
    v = rng.lognormal(0.0, 3.0, int(lengths.sum()))  # losses: >= 0
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    got = _Segments(starts, len(v)).sum(v)
    for i, (a, n) in enumerate(zip(starts, lengths, strict=True)):
        assert got[i] == sum_up_ref(v[a:a + n].tolist())


@pytest.mark.parametrize("case", ["int", "narrow", "wide", "argsort", "uint64", "text", "int128",
                                  "nulls"])
def test_unit_order_gives_the_sums_of_the_sorted_rows(case: str) -> None:
    """UnitOrder (a permutation, rows not moved) equals per_unit over the rows sorted."""
    from tabdp.frame._engine import UnitOrder, _sort_units, per_unit

    rng = np.random.default_rng(4)
    n, n_keys = 5000, 97
    ids = rng.integers(0, 900, n)
    units: pl.Series = {
        "int": pl.Series(ids), "narrow": pl.Series(ids % 100, dtype=pl.Int8),
        "wide": pl.Series(ids * (1 << 50)),  # no Int64 key: multi-column argsort
        "argsort": pl.Series(ids * (1 << 40)),  # a key, but no room for the positions
        "uint64": pl.Series(ids.astype(np.uint64) + np.uint64(2**63 + 5)),
        "text": pl.Series([f"u{i:04d}" for i in ids]),
        "int128": pl.Series(ids, dtype=pl.Int128),
        "nulls": pl.Series([None if i % 7 == 0 else i for i in ids.tolist()], dtype=pl.Int64),
    }[case].alias("u")
    cells = pl.Series("__tabdp_cell", rng.integers(0, n_keys, n), dtype=pl.Int64)
    frame = pl.DataFrame([units, cells]).unique(maintain_order=True)  # distinct pairs
    v = rng.lognormal(0.0, 3.0, frame.height)
    size = rng.lognormal(0.0, 1.0, frame.height)
    frame = frame.with_columns(pl.Series("v", v), pl.Series("size", size))
    order = UnitOrder(frame["u"], frame["__tabdp_cell"], n_keys)
    got = order.reduce({"v": v, "size": size}, lambda c: c == "size")
    srt = frame.sort(["u", "__tabdp_cell"], nulls_last=True)
    if case != "nulls":  # the old path (a sort of the rows) gives the same order
        assert _sort_units(frame, "u", n_keys).equals(srt)
    want_units, want = per_unit(srt["u"], {"v": srt["v"].to_numpy(),
                                           "size": srt["size"].to_numpy()},
                                lambda c: c == "size")
    assert order.units.dtype == frame["u"].dtype
    assert order.units.to_list() == want_units.to_list()
    assert np.array_equal(got["v"], want["v"]) and np.array_equal(got["size"], want["size"])
    assert frame["__tabdp_cell"].gather(pl.Series(order.perm)).equals(srt["__tabdp_cell"])


def test_unit_median_losses_do_not_depend_on_row_order() -> None:
    df = _firms(1500)

    def run(frame: pl.DataFrame) -> pl.DataFrame:
        s = tabdp.Session(unit="firm", seed=4, budget=6.0)
        frame.dp.median("payroll", by=["county", "naics"], keys=_keys(), bounds=(0.0, 5e5),
                        epsilon=1.0, session=s)
        frame.dp.quantile("emp", 0.9, by=["county"], keys=tabdp.KeySet.from_dict(
            county=COUNTIES), bounds=(0.0, 500.0), epsilon=0.5, session=s, name="q90")
        return s.report().per_record

    per = run(df)
    assert per.equals(run(df.sample(fraction=1.0, shuffle=True, seed=8)))
    assert per["firm"].is_sorted() and per["rho"].max() > 0  # type: ignore[operator]


# -- cells by lookup --------------------------------------------------------------------------
def _cell_frames() -> list[tuple[pl.DataFrame, tabdp.KeySet]]:
    rng = np.random.default_rng(5)
    n = 5000
    ints = rng.integers(-3, 40, n)
    nulls = rng.random(n) < 0.05
    texts = np.array(["a", "b", "c", "dd", ""])[rng.integers(0, 5, n)]
    df = pl.DataFrame({
        "i": pl.Series(ints, dtype=pl.Int64).set(pl.Series(nulls), None),  # type: ignore[arg-type]
        "j": pl.Series(rng.integers(0, 6, n), dtype=pl.Int32),
        "t": pl.Series(texts),
        "b": pl.Series(rng.random(n) < 0.5),
        "d": pl.Series(rng.integers(0, 4, n)).cast(pl.Date),
        "big": pl.Series(ints * 2**40, dtype=pl.Int64),
    })
    return [
        (df, tabdp.KeySet.from_dict(i=list(range(0, 30)), j=[0, 1, 2, 9])),  # Int32 vs Int64
        (df, tabdp.KeySet.from_frame(pl.DataFrame({"i": [None, 1, 5, 7, None],
                                                   "t": ["a", "b", "", "zz", "dd"]}))),
        (df, tabdp.KeySet.from_frame(pl.DataFrame({"b": [True, False], "d": [
            pl.Series([1]).cast(pl.Date)[0], pl.Series([3]).cast(pl.Date)[0]]}))),
        (df, tabdp.KeySet.from_frame(pl.DataFrame({"j": pl.Series([0, 3, 5], dtype=pl.Int8),
                                                   "big": [0, 2**40, 7 * 2**40]}))),
        (df.with_columns(pl.col("j").cast(pl.UInt8)),
         tabdp.KeySet.from_dict(j=[-1, 0, 4, 300])),  # keys outside the data's dtype
        (df.with_columns(pl.col("t").cast(pl.Categorical)),
         tabdp.KeySet.from_frame(pl.DataFrame({"t": ["b", "", "x"], "i": [1, 2, None]}))),
    ]


@pytest.mark.parametrize("case", range(6))
def test_cells_by_lookup_equal_the_join(case: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row-wise lookups give every row the cell the join gives it, nulls and conversions too."""
    df, keys = _cell_frames()[case]
    by = keys.columns
    schema = df.schema
    calls: list[bool] = []
    real = engine._lookup_index

    def spy(*args: Any) -> Any:
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(engine, "_lookup_index", spy)
    try:
        lookup = [engine._cells(df.lazy(), schema, keys, by, "cell", ordered=True).collect(),
                  engine._cells(df.lazy(), schema, keys, by, "cell").collect().sort("i", "j")]
    except tabdp.exceptions.ColumnTypeError:
        lookup = None
    assert calls and all(calls)  # the lookup path ran
    monkeypatch.setattr(engine, "_lookup_index", lambda *a: None)
    try:
        joined = [engine._cells(df.lazy(), schema, keys, by, "cell", ordered=True).collect(),
                  engine._cells(df.lazy(), schema, keys, by, "cell").collect().sort("i", "j")]
    except tabdp.exceptions.ColumnTypeError:
        joined = None
    assert (lookup is None) == (joined is None)
    if lookup is not None and joined is not None:
        assert lookup[0].equals(joined[0])
        assert lookup[0]["cell"].null_count() < df.height  # some rows are in cells
        assert lookup[1]["cell"].sort().equals(joined[1]["cell"].sort())


@pytest.mark.parametrize("mechanism", [mech.DiscreteGaussian(2.0), mech.DiscreteLaplace(3.0),
                                       mech.Gaussian(1.5)])
def test_count_losses_from_the_table_equal_those_of_the_distinct_values(
        mechanism: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A count's per-row losses read from a table at every whole Δ are the distinct values'."""
    from tabdp.frame._engine import _Policy, _policy_values

    rng = np.random.default_rng(2)
    policy = _Policy(mechanism, [])
    for delta in (np.minimum(rng.zipf(2.0, 20_000), 3000).astype(np.float64) + 2.0,
                  np.r_[rng.integers(1, 9, 500).astype(np.float64), 2.5]):  # not whole
        got = _policy_values(policy, "count", delta)
        monkeypatch.setattr("tabdp._policy.COUNT_TABLE", 0)  # the distinct values
        want = _policy_values(policy, "count", delta)
        monkeypatch.undo()
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w)


def _ids(kind: str, n_units: int, rng: np.random.Generator, n: int) -> pl.Series:
    u = rng.integers(0, n_units, n)
    if kind == "int":
        return pl.Series("u", u)
    if kind == "uint64_high":      # above 2**63: not an Int64 sort key
        return pl.Series("u", u.astype(np.uint64) + np.uint64(2**63), dtype=pl.UInt64)
    if kind == "int64_extremes":   # the span overflows the packed key: multi-column argsort
        vals = np.array([-(2**63), 2**63 - 1, 0, -1, 1] + list(range(2, n_units)), dtype=np.int64)
        return pl.Series("u", vals[u % len(vals)], dtype=pl.Int64)
    if kind == "int8":
        return pl.Series("u", (u % 256 - 128).astype(np.int8), dtype=pl.Int8)
    if kind == "string":           # text order differs from numeric order ("10" < "9")
        return pl.Series("u", u).cast(pl.String)
    if kind == "categorical":
        return pl.Series("u", u).cast(pl.String).cast(pl.Categorical)
    raise AssertionError(kind)


def _reference_unit_rho(df: pl.DataFrame, key_order: list[str], m: Any) -> dict[Any, float]:
    """Per unit: the policy at each (unit, cell) total, added left to right in key-set order.

    Each addition rounded up where it is inexact (decided with exact rationals): one double
    up, by the product with 1 + 2**-52 the engine uses.
    """
    pos = {k: i for i, k in enumerate(key_order)}
    cells = df.filter(pl.col("k").is_in(key_order)).group_by("u", "k").agg(pl.col("x").sum())
    out: dict[Any, float] = {}
    for (u,), rows in cells.group_by("u"):
        total = 0.0
        for r in sorted(rows.iter_rows(named=True), key=lambda r: pos[r["k"]]):
            term = float(np.asarray(m.rho(np.array([abs(r["x"])])))[0])
            s = total + term
            if Fraction(s) < Fraction(total) + Fraction(term):
                s *= 1.0 + 2.0**-52
            total = s
        out[u] = total
    return out


# origin: review R17
@pytest.mark.parametrize("kind", ["int", "uint64_high", "int64_extremes", "int8", "string",
                                  "categorical"])
def test_unit_losses_follow_ids_for_every_id_dtype(kind: str) -> None:
    rng = np.random.default_rng(17)
    n = 1500
    key_order = [f"k{i}" for i in range(80)][::-1]    # key-set order is not sorted order
    df = pl.DataFrame({"u": _ids(kind, 120, rng, n),
                       "k": rng.choice([f"k{i}" for i in range(85)], n),   # some outside
                       "x": rng.integers(-50, 50, n).astype(np.float64)})
    # one unit with more than 64 cells: the long-segment path (add.accumulate)
    first = df["u"][0]
    long = pl.DataFrame({"u": pl.Series([first] * 80, dtype=df["u"].dtype),
                         "k": [f"k{i}" for i in range(80)],
                         "x": rng.integers(1, 9, 80).astype(np.float64)})
    df = pl.concat([df, long])
    keys = tabdp.KeySet.from_dict(k=key_order)
    m = mech.Gaussian(3.0)

    def run(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        s = tabdp.Session(unit="u", seed=5)
        t = frame.dp.sum("x", by="k", keys=keys, mechanism=m, session=s, negatives="allow")
        return t, s.report().per_record

    t1, per1 = run(df)
    t2, per2 = run(df.sample(fraction=1.0, shuffle=True, seed=2))
    assert t1.equals(t2) and per1.equals(per2)
    ref = _reference_unit_rho(df, key_order, m)
    got = dict(zip(per1["u"].to_list(), per1["rho"].to_list(), strict=True))
    assert got == {u: v for u, v in ref.items()}
    # the report lists units by id (nulls last): the ledger's merges rely on that order
    assert per1["u"].to_list() == per1.sort("u", nulls_last=True)["u"].to_list()


def _two_sessions(df: pl.DataFrame, *, budget: float | None, max_cells: int | None
                  ) -> tuple[list[pl.DataFrame], list[pl.DataFrame]]:
    """A sum, then a count of the same frame object (h72 reuses the snapshot and totals).

    Also the same releases where the count reads a copy (a fresh snapshot): the same noise.
    """
    keys = tabdp.KeySet.from_dict(k=["a", "b", "c", "d"])
    out = []
    for copy in (False, True):
        s = tabdp.Session(unit="u", seed=9, budget=budget)
        a = df.dp.sum("x", by="k", keys=keys, mechanism=mech.Gaussian(2.0), session=s,
                      max_cells=max_cells, nulls="zero", negatives="allow")
        src = df.clone() if copy else df
        b = src.dp.count(by="k", keys=keys, session=s, max_cells=max_cells,
                         mechanism=mech.Gaussian(0.5))
        c = df.dp.sum("x", by="k", keys=keys, mechanism=mech.Gaussian(2.0), session=s,
                      nulls="zero", negatives="allow")
        out.append([a, b, c, s.report().per_record])
    return out[0], out[1]


# origin: review R17
@pytest.mark.parametrize("budget", [None, 1.5])
@pytest.mark.parametrize("max_cells", [None, 1])
def test_count_after_sum_has_the_totals_of_a_fresh_count(budget: float | None,
                                                              max_cells: int | None) -> None:
    rng = np.random.default_rng(3)
    n = 600
    df = pl.DataFrame({"u": rng.integers(0, 60, n), "k": rng.choice(["a", "b", "c", "d", "e"], n),
                       "x": pl.Series([None if r < 0.1 else v for r, v in
                                       zip(rng.random(n), rng.normal(0, 3, n), strict=True)],
                                      dtype=pl.Float64)})
    reused, fresh = _two_sessions(df, budget=budget, max_cells=max_cells)
    for x, y in zip(reused, fresh, strict=True):
        assert x.equals(y)


# origin: review R17
@pytest.mark.parametrize("ids", [[5, 5, 9], ["x", "x", "y"], [2**63 + 1, 2**63 + 1, 3]])
def test_empty_unit_partitions_change_nothing(ids: list[Any]) -> None:
    """Eight partitions of two units: most passes are empty (an empty permutation)."""
    keys = tabdp.KeySet.from_dict(k=["a", "b"])
    df = pl.DataFrame({"u": ids, "k": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]})
    got = []
    for parts in (1, 8):
        s = tabdp.Session(unit="u", seed=1, budget=3.0, unit_partitions=parts)
        t = df.dp.sum("x", by="k", keys=keys, mechanism=mech.Gaussian(1.0), session=s)
        c = df.dp.count(by="k", keys=keys, session=s)
        got.append((t, c, s.report().per_record))
    for x, y in zip(*got, strict=True):
        assert x.equals(y)
@pytest.mark.parametrize("n_keys", [1, 63, 64, 97])
def test_unit_cell_perm_with_null_cells(n_keys: int) -> None:
    """Packed (unit, cell) keys sort null cells (the key count) last, for any key count."""
    from tabdp.frame._engine import UnitOrder

    rng = np.random.default_rng(9)
    n = 4000
    units = pl.Series("u", rng.integers(-50, 700, n))
    cells = pl.Series("c", [None if i % 11 == 0 else int(c) for i, c in
                            enumerate(rng.integers(0, n_keys, n))], dtype=pl.Int64)
    frame = pl.DataFrame([units, cells]).unique(maintain_order=True)
    order = UnitOrder(frame["u"], frame["c"], n_keys)
    want = frame.with_row_index("i").sort(["u", "c"], nulls_last=True)
    assert order.perm.tolist() == want["i"].to_list()
    assert order.units.to_list() == want["u"].unique(maintain_order=True).to_list()


def test_threads_give_the_doubles_of_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy's chunks on several threads: the same losses and report as on one."""
    from tabdp.frame import _engine

    rng = np.random.default_rng(12)
    n = 3 * _engine.POLICY_CHUNK + 123  # several chunks
    df = pl.DataFrame({"u": rng.integers(0, n // 3, n), "c": rng.integers(0, 40, n),
                       "x": rng.lognormal(3.0, 2.0, n).round(2), "y": rng.integers(0, 90, n)})
    keys = tabdp.KeySet.from_dict(c=list(range(40)))

    def run() -> tuple[pl.DataFrame, list[Any]]:
        s = tabdp.Session(unit="u", seed=3, unit_partitions=1)
        df.dp.sum(["x", "y"], by="c", keys=keys,
                  mechanism=mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0), session=s)
        df.dp.count(by="c", keys=keys, session=s)
        return s.report().per_record, [r.losses for r in s.records]

    monkeypatch.setattr(_engine, "policy_threads", lambda: 4)
    many, many_losses = run()
    monkeypatch.setattr(_engine, "policy_threads", lambda: 1)
    one, one_losses = run()
    assert many.equals(one)
    for a, b in zip(many_losses, one_losses, strict=True):
        for f in ("rho", "epsilon", "size"):
            assert np.array_equal(getattr(a, f), getattr(b, f))


def test_segments_sum_and_max_match_references() -> None:
    """`_Segments`: each segment's left-to-right rounded-up sum and its maximum.

    Segments of 1 to 200 elements (64, the last vector step, and 65, the first with a Python
    tail, included): the sums equal `sum_up_ref` per segment, the maxima (with infinities and
    a NaN in a long segment's tail) ``numpy.maximum.reduceat``, bit for bit.
    """
    rng = np.random.default_rng(29)
    counts = np.concatenate([rng.integers(1, 4, 3000), [64, 65, 63, 200, 1, 2, 130]])
    rng.shuffle(counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    n = int(counts.sum())
    v = rng.lognormal(0.0, 6.0, n)
    seg = engine._Segments(starts, n)
    ends = np.append(starts[1:], n)
    want_sum = np.array([sum_up_ref(v[a:b].tolist()) for a, b in zip(starts, ends, strict=True)])
    assert seg.sum(v).tobytes() == want_sum.tobytes()
    v[rng.integers(0, n, 5)] = np.inf  # (the exact reference takes finite terms only)
    v[int(starts[np.flatnonzero(counts == 200)[0]]) + 100] = np.nan
    assert seg.max(v).tobytes() == np.maximum.reduceat(v, starts).tobytes()
    assert np.isnan(seg.sum(v)).sum() == 1


def test_on_slices_covers_the_range_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`on_slices` on several threads calls ``fn`` on disjoint slices covering ``range(n)``."""
    monkeypatch.setattr(engine, "policy_threads", lambda: 3)
    n = 3 * engine.POLICY_CHUNK + 7
    hits = np.zeros(n, dtype=np.int64)

    def mark(lo: int, hi: int) -> None:
        hits[lo:hi] += 1

    engine.on_slices(n, mark)
    assert (hits == 1).all()


def test_a_row_mode_snapshots_row_ids_are_made_once_and_cannot_be_replaced() -> None:
    # the ids were a list that `row_ids` appended to after the snapshot was made: any holder
    # could append, clear or replace them; now one holder makes them once, read-only
    snap = engine._Snapshot(pl.DataFrame({ROW_ID: pl.Series([0, 1, 2], dtype=pl.UInt32)}),
                            {}, {}, 3, True, ids=engine.RowIds())
    ids = engine.row_ids(snap, snap.data)
    assert ids is not None and ids.tolist() == [0, 1, 2] and not ids.flags.writeable
    assert engine.row_ids(snap, snap.data) is ids
    assert engine.row_ids(snap, snap.data.head(2)) is None  # not every row: not the ids
    assert not hasattr(snap.ids, "append") and not hasattr(snap.ids, "__dict__")
    with pytest.raises(AttributeError):
        snap.ids.ids = None  # type: ignore[union-attr]


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_slice_helpers_equal_numpy_at_every_size_and_position(
        monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """`any_nonzero`, `increasing`, `filled`, `add_up_into`, `add_up_fresh` by slices.

    With slices from 2 values (``SLICE_ROWS=1``) on 1 to 4 threads, at sizes 0 to 9 (slice
    bounds at every odd and even place), with a NaN, an inf, a -0.0 or the one nonzero value
    at each position: the bytes (and truth values) of one NumPy call, and no warning.
    """
    import warnings

    from tabdp import _numeric as num

    monkeypatch.setattr(num, "SLICE_ROWS", 1)
    monkeypatch.setattr(pl, "thread_pool_size", lambda: threads)
    rng = np.random.default_rng(threads)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in range(10):
            base = rng.lognormal(0.0, 3.0, n)
            assert num.increasing(np.cumsum(base)) == bool(np.all(np.diff(np.cumsum(base)) > 0))
            assert num.filled(n, -0.0).tobytes() == np.full(n, -0.0).tobytes()
            for pos in range(n):
                z = np.zeros(n)
                z[pos] = 1e-300
                assert num.any_nonzero(z) and not num.any_nonzero(np.zeros(n))
                ids = np.arange(n)
                ids[pos] = ids[pos - 1] if pos else 0
                assert num.increasing(ids) == (pos == 0)
                for bad in (np.nan, np.inf, -0.0, 1.7e308):
                    v = base.copy()
                    v[pos] = bad
                    acc = rng.lognormal(0.0, 3.0, n)
                    want = num.add_up(acc, v)  # (elementwise, one call)
                    assert num.add_up_fresh(acc, v).tobytes() == want.tobytes()
                    num.add_up_into(acc, v)
                    assert acc.tobytes() == want.tobytes()
