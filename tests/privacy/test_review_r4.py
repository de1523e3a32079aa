"""Review R4 (2026-11-26): attacks on the unit-mode engine's speed-ups and public bounds.

Each test states a claim and tries to break it. The fixed regressions fail without their fix;
the others pin a claim that held under attack (neighbouring inputs, row orders, id dtypes).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp import mechanisms as mech

KEY_AB = tabdp.KeySet.from_dict(c=["a", "b"])


# -- 128-bit unit ids: which sort runs depends on the ids, so neither may fail -------------------
@pytest.mark.skipif(not hasattr(pl, "UInt128"), reason="this Polars has no UInt128")
@pytest.mark.parametrize("dtype", [getattr(pl, "UInt128", None), pl.Int128])
def test_128_bit_unit_ids_release_on_neighbouring_inputs(dtype: pl.DataType) -> None:
    """Unit ids all near the top of the dtype (a narrow range) and the same plus one record.

    The engine sorts integer ids with a narrow range by one Int64 key built from the smallest
    id. Without the fix a ``UInt128`` minimum above 2**127 was no Polars literal: the release
    raised a raw ``InvalidOperationError``, while the neighbour with one more record (id 0, a
    wide range: the multi-column sort) ran. Both release now, each unit charged its exact sum.
    """
    top = 2**128 - 1 if dtype == getattr(pl, "UInt128", None) else 2**127 - 1
    base = pl.DataFrame({"u": pl.Series([top, top - 1, top], dtype=dtype),
                         "c": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]})
    plus = pl.concat([base, pl.DataFrame({"u": pl.Series([0], dtype=dtype), "c": ["a"],
                                          "x": [4.0]})])
    for frame in (base, plus):
        s = tabdp.Session(unit="u", seed=1)
        out = frame.dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(1.0), session=s)
        assert out.columns == ["c", "x", "x_sd", "x_moe", "x_lower", "x_upper"]
        per = s.report().per_record
        want = {top: (1.0 + 9.0) / 2, top - 1: 4.0 / 2}  # Δ²/2 per cell, cells a then b
        if frame.height == 4:
            want[0] = 16.0 / 2
        assert dict(zip(per["u"].to_list(), per["rho"].to_list(), strict=True)) == want
        assert per["u"].to_list() == sorted(want)


# -- row ids whose joins may repeat a row: never a streaming ledger ------------------------------
def test_row_ids_that_may_repeat_never_stream() -> None:
    """``Session(_rows_one_cell=False)``: a record may be several rows; the ledger is per record.

    A streaming ledger charges each row as its own record. Without the fix such a session,
    given a LazyFrame, chose the streaming ledger (``streaming=None``): row 0, repeated by a
    join into cells c0 and c3, was listed twice in the per-record report with 0.5 each, and a
    budget would have been checked per row. Now the in-memory ledger is chosen (row 0: one
    record, 0.5 + 0.5), and ``streaming=True`` is refused before any data is read.
    """
    from tabdp.exceptions import InvalidParameterError
    from tabdp.frame._engine import ROW_ID

    base = pl.DataFrame({ROW_ID: [0, 1, 2], "county": ["c0", "c1", "c2"],
                         "payroll": [1.0, 2.0, 3.0]})
    repeated = pl.concat([base, base.head(1).with_columns(county=pl.lit("c3"))])
    keys = tabdp.KeySet.from_dict(county=["c0", "c1", "c2", "c3"])
    s = tabdp.Session(unit=ROW_ID, _row_ids=True, _rows_one_cell=False, seed=0)
    repeated.lazy().dp.sum("payroll", by="county", keys=keys, mechanism=mech.Gaussian(1.0),
                           session=s)
    assert not s.streaming
    per = s.report().per_record
    assert per[ROW_ID].to_list() == [0, 1, 2]
    assert per["rho"].to_list() == [0.5 + 0.5, 2.0, 4.5]
    with pytest.raises(InvalidParameterError, match="repeat"):
        tabdp.Session(unit=ROW_ID, _row_ids=True, _rows_one_cell=False, streaming=True)
    # one row per record (the release workflow's one-to-one joins): streaming stays available
    assert tabdp.Session(unit=ROW_ID, _row_ids=True, streaming=True).streaming


def test_decimal_unit_ids_are_accounted_like_integer_ids() -> None:
    """Decimal ids have no NaN: without the fix the NaN check raised a raw Polars error."""
    frame = pl.DataFrame({"u": [3, 1, 3, 2], "c": ["a", "b", "b", "a"], "x": [1.0, 2.0, 3.0, 4.0]})
    reports = []
    for dtype in (pl.Int64, pl.Decimal(10, 2)):
        s = tabdp.Session(unit="u", seed=1)
        df = frame.with_columns(pl.col("u").cast(dtype))
        df.dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(1.0), session=s)
        df.dp.count(by="c", keys=KEY_AB, session=s)
        reports.append(s.report().per_record.with_columns(pl.col("u").cast(pl.Int64)))
    assert reports[0].equals(reports[1])
    assert reports[0]["rho_q1_sum"].to_list() == [2.0, 8.0, 0.5 + 4.5]


# -- tabdp run where a hierarchy join repeats one record, on neighbouring inputs -----------------
_JOIN_SPEC = """
[release]
name = "nb"
[input]
path = "d.parquet"
nulls = "zero"
negatives = "zero"
nonfinite = "zero"
[hierarchies.geo]
file = "geo.parquet"
levels = ["state", "county"]
[budget]
rho = 0.6
[randomness]
seed = 3
[output]
public = "out/public"
confidential = "out/confidential"
[[tables]]
name = "pay"
measures = ["payroll"]
by = ["county"]
keys = { file = "keys.parquet" }
mechanism = { family = "gaussian", sigma = 1e6 }
[[tables.rollups]]
by = ["state"]
direct = true
[[tables]]
name = "n"
kind = "count"
by = ["county"]
keys = { file = "keys.parquet" }
mechanism = { family = "gaussian", sigma = 1.0 }
[[tables.rollups]]
by = ["state"]
direct = true
"""
_B = 2**53  # Int64 codes 2**53 and 2**53 + 1 are one Float64 code: the join repeats that row


def _join_run(folder: Path, df: pl.DataFrame) -> dict[str, Any]:
    folder.mkdir()
    df.write_parquet(folder / "d.parquet")
    pl.DataFrame({"state": ["01", "02", "01"],
                  "county": pl.Series([_B, _B + 1, 5], dtype=pl.Int64)}).write_parquet(
        folder / "geo.parquet")
    pl.DataFrame({"county": pl.Series([_B, 5], dtype=pl.Int64)}).write_parquet(
        folder / "keys.parquet")
    (folder / "s.toml").write_text(_JOIN_SPEC, encoding="utf-8")
    err = io.StringIO()
    code = cli.main(["run", str(folder / "s.toml"), "--quiet", "--test-seed"],
                    stdout=io.StringIO(), stderr=err)
    return {"code": code, "stderr": err.getvalue().replace(str(folder), "<folder>"),
            "files": sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))}


def test_run_refuses_mapping_codes_the_join_would_merge(tmp_path: Path) -> None:
    """Mapping codes 2**53 and 2**53 + 1 are one code for a Float64 input column.

    The join would repeat every record with that code (counted in two cells of the rollup).
    The run is refused before the data is read, with the same exit code, message and files
    whether or not the input holds such a record.
    """
    other = pl.DataFrame({"county": [5.0] * 20, "payroll": [1000.0 + i for i in range(20)]})
    full = pl.concat([other, pl.DataFrame({"county": [float(_B)], "payroll": [5000.0]})])
    a = _join_run(tmp_path / "full", full)
    b = _join_run(tmp_path / "minus", other)
    assert a == b
    assert a["code"] == 2  # a spec error, found before any record is read
    assert "become one code when converted to the input column's type" in a["stderr"]
    assert str(_B) in a["stderr"] and str(_B + 1) in a["stderr"]  # public mapping codes
    assert not any(f.startswith("out") for f in a["files"])


# -- the (unit, cell) rows memoized on a snapshot ------------------------------------------------
def _units_frame() -> pl.DataFrame:
    return pl.DataFrame({"u": [5, 1, 5, 3, 1, 5, 2], "c": ["b", "a", "a", "z", "b", "b", "a"],
                         "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]})


def test_memoized_cells_equal_a_fresh_join_and_follow_in_place_changes() -> None:
    """A count after a sum of the same frame and key-set object reuses the sorted cells.

    The reuse gives what a fresh join gives (an equal key set built anew), and a frame changed
    in place since (its unit ids relabelled) is never served the old rows: each unit is charged
    its own rows, whatever object the rows came from.
    """
    keys = tabdp.KeySet.from_dict(c=["b", "a"])
    got = []
    for fresh in (False, True):
        df = _units_frame()
        s = tabdp.Session(unit="u", seed=4)
        t1 = df.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s)
        t2 = df.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["b", "a"]) if fresh else keys,
                         session=s)
        got.append((t1, t2, s.report().per_record))
    assert got[0][0].equals(got[1][0]) and got[0][1].equals(got[1][1])
    assert got[0][2].equals(got[1][2])

    df = _units_frame()
    s = tabdp.Session(unit="u", seed=4)
    df.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s)
    df.replace_column(0, pl.Series("u", [9, 9, 9, 9, 9, 9, 9]))  # in place: one unit now
    df.dp.count(by="c", keys=keys, session=s)
    per = s.report().per_record
    assert per["u"].to_list() == [1, 2, 5, 9]
    assert per["rho_q2_count"].to_list()[:3] == [0.0, 0.0, 0.0]
    alone = tabdp.Session(unit="u", seed=4)
    df.dp.count(by="c", keys=keys, session=alone)
    assert per["rho_q2_count"][3] == alone.report().per_record["rho"][0] > 0.0


# -- unit ids at the edges: every id is its own record, summed in key-set order ------------------
_IDS = {
    "int64_extremes": pl.Series([-(2**63), 2**63 - 1, 0, -(2**63), 7], dtype=pl.Int64),
    "uint64_high": pl.Series([2**64 - 1, 2**63, 2**63 + 1, 2**64 - 1, 2**63], dtype=pl.UInt64),
    "text": pl.Series(["b", "a", "", "b", "ab"]),
    "text_null": pl.Series(["b", None, "a", "b", None]),
}


@pytest.mark.parametrize("ids", list(_IDS))
def test_unit_losses_at_id_edges_are_exact_and_order_free(ids: str) -> None:
    """Each unit pays Σ over its cells, in key-set order, of Δ²/2 (Gaussian σ = 1).

    Ids span the whole Int64 range, sit above 2**63 as UInt64, are text, or are missing (author
    mode drops those rows: they pay nothing and are not listed). The report is the same, bit
    for bit, for every row order of the input.
    """
    keys = tabdp.KeySet.from_dict(c=["b", "a", "c"])  # key-set order differs from sorted order
    rows = 25
    frame = pl.DataFrame({
        "u": pl.concat([_IDS[ids]] * 5),
        "c": [["a", "b", "c", "z"][(3 * i) % 4] for i in range(rows)],
        "x": [float((7 * i) % 11) for i in range(rows)],
    })
    order = {"b": 0, "a": 1, "c": 2}
    want: dict[object, float] = {}
    cells = frame.filter(pl.col("u").is_not_null() & pl.col("c").is_in(list(order))).group_by(
        "u", "c").agg(pl.col("x").sum()).with_columns(
        pl.col("c").replace_strict(order, return_dtype=pl.Int64).alias("k")).sort("u", "k")
    for u, x in cells.select("u", "x").iter_rows():
        want[u] = want.get(u, 0.0) + x * x / 2.0
    reports = []
    for seed in (None, 1, 2):
        df = frame if seed is None else frame.sample(fraction=1.0, shuffle=True, seed=seed)
        s = tabdp.Session(unit="u", seed=3, mode="author")
        df.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s, nulls="zero",
                  negatives="allow")
        reports.append(s.report().per_record)
    per = reports[0]
    assert dict(zip(per["u"].to_list(), per["rho"].to_list(), strict=True)) == want
    assert per["u"].to_list() == sorted(want)  # type: ignore[type-var]
    for other in reports[1:]:
        assert other.equals(per)
