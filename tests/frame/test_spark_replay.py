"""Spark row mode without per-row state: the releases replayed in Spark (``SparkReplayLedger``).

A Spark session in row mode keeps each release's public definition and recomputes every row's
losses in Spark when a later release's budget filter, the per-record report or the loss summary
needs them. For one seed it must give what the Polars engine's in-memory ledger gives, and what
the Spark per-row ledger (``Session(streaming=False)``) gives: the same tables (the same noise),
the same per-record losses to the last bit, the same confidential counts and cell audits; and
it must refuse a release over other rows before any noise is drawn.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from _engines import mixed_rows

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import UsabilityWarning
from tabdp.frame._spark import SparkReplayLedger, SparkUnitLedger
from tabdp.frame.backends.spark import to_polars
from tabdp.privacy.budget import Budget

pytestmark = pytest.mark.spark

KEYS = tabdp.KeySet.from_dict(c=["a", "b", "c"], s=[0, 1, 2])


def _data(n: int = 400, seed: int = 0) -> pl.DataFrame:
    return mixed_rows(n, seed)


#: A released Spark table (or report) on the driver: the engine's own conversion.
_pl = to_polars


def _session_run(frame: Any, budget: Any, delta_mech: bool, streaming: bool | None = None,
                 full: bool = True) -> dict[str, Any]:
    s = tabdp.Session(seed=7, budget=budget, streaming=streaming, track_cells=True)
    out = {
        # a pure sum (its policy in a pandas UDF), a zCDP count (exact Spark expressions)...
        "sum": frame.dp.sum(["x", "y"], by=["c", "s"], keys=KEYS,
                            mechanism=mech.LogTransform(sigma=0.25, offset=1.0),
                            session=s, nulls="zero", negatives="zero"),
        "count": frame.dp.count(by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(3.0),
                                session=s),
        # ... and a third release the budget leaves some rows out of: pure or approximate DP
        "by_int": frame.dp.sum("w", by="s", keys=tabdp.KeySet.from_dict(s=[0, 1, 5]),
                               mechanism=(mech.Subbotin(r=1.5, scale=20.0, delta=1e-9)
                                          if delta_mech else mech.Laplace(20.0)),
                               session=s),
    }
    if full:
        out["median"] = frame.dp.median("w", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                                        bounds=(0, 50), epsilon=1.0, session=s)
        out["joint"] = frame.dp.sum(["w", "y"], by="c", keys=tabdp.KeySet.from_dict(c=["a", "c"]),
                                    mechanism=mech.VectorSubbotin(r=2.0, scale=80.0),
                                    session=s, negatives="drop")
    out = {k: _pl(v) for k, v in out.items()}
    rep = s.report(delta=1e-9)
    pr = _pl(rep.per_record)
    out["per_record"] = pr.sort(pr.columns[0])
    summary = rep.confidential_summary()
    out["summary"] = {k: v for k, v in summary.items() if k != "queries"}
    out["queries"] = summary["queries"]
    out["cells"] = [r.cells for r in s.records]
    out["session"] = s
    return out


def _same(ref: dict[str, Any], got: dict[str, Any]) -> None:
    for k in ("sum", "count", "by_int", "median", "joint", "per_record"):
        if k in ref:
            assert ref[k].equals(got[k]), k
    assert ref["queries"] == got["queries"]
    a, b = ref["summary"], got["summary"]
    assert a["units"] == b["units"] and a["rho_max"] == b["rho_max"] and a["seed"] == b["seed"]
    for q in ("rho_q0.5", "rho_q0.9", "rho_q0.99", "rho_q0.999"):  # numpy vs Spark percentile
        np.testing.assert_allclose(a[q], b[q], rtol=1e-15, err_msg=q)
    for x, y in zip(ref["cells"], got["cells"], strict=True):
        if x is None:  # medians keep no cell audit
            assert y is None
            continue
        cols = x.columns
        assert x.sort(cols).equals(y.select(cols).sort(cols))


BUDGETS = {"none": None, "constant": 0.4, "curve": {1e2: 0.2, 1e4: 0.6},
           "curve-total": Budget({1e2: 0.2, 1e4: 0.6}, total=0.7)}
#: run by default; CI also runs ``PAIRS`` (``slow`` and ``spark_full``)
DEFAULT = {("pure", "constant"), ("approx", "curve-total")}
#: every budget with the approximate policy (ρ = inf: the filter leaves every row out, by Spark
#: expressions under the constant budget, by the pandas UDF under curves; without a budget its
#: ε_a and δ_a reach the replayed totals), and the pure one (whose filter admits some rows and
#: leaves others out) on a budget filtered by Spark expressions (constant) and on one filtered
#: by the pandas UDF (curve-total). The two other combinations (pure-none and pure-curve: 145 s
#: of the 534 test-seconds of this file) repeat paths these cover (no budget: also
#: `test_unfiltered_releases_equal_polars`; a curve without a total: approx-curve); they run
#: with ``TABDP_SPARK_ALL_REPLAYS=1``.
PAIRS = DEFAULT | {("approx", "none"), ("approx", "constant"), ("approx", "curve"),
                   ("pure", "curve-total")}


def _replay_marks(d: str, k: str) -> tuple[Any, ...]:
    if (d, k) in DEFAULT:
        return ()
    full = (pytest.mark.slow, pytest.mark.spark_full)
    if (d, k) in PAIRS or os.environ.get("TABDP_SPARK_ALL_REPLAYS") == "1":
        return full
    return (*full, pytest.mark.skip(reason="repeats the paths of the other combinations; "
                                           "set TABDP_SPARK_ALL_REPLAYS=1 to run it"))


@pytest.mark.parametrize(("delta_mech", "budget"), [
    pytest.param(d == "approx", b, id=f"{d}-{k}", marks=_replay_marks(d, k))
    for d in ("pure", "approx") for k, b in BUDGETS.items()])
def test_replay_equals_polars(spark: Any, budget: Any, delta_mech: bool) -> None:
    """Tables, noise, per-record losses, counts and cell audits: Polars' to the last bit."""
    df = _data()
    ref = _session_run(df, budget, delta_mech)
    got = _session_run(spark.createDataFrame(df.to_arrow()), budget, delta_mech)
    assert isinstance(got["session"].ledger, SparkReplayLedger)
    _same(ref, got)
    assert ref["per_record"].height == 400
    if budget is not None:
        # the third release's filter read the earlier releases' replayed totals: pure, it
        # left some rows out and admitted others; approximate (rho = inf), it left all out
        q3 = got["queries"][2]
        left, rows_in = q3["units_left_out_by_budget"], q3["rows_in_released_cells"]
        assert (left == rows_in) if delta_mech else (0 < left < rows_in)
        assert (got["per_record"]["rho_q3_sum"] > 0).sum() == rows_in - left


@pytest.mark.parametrize("budget", [0.4, Budget({1e2: 0.2, 1e4: 0.6}, total=0.7)],
                         ids=["constant", "curve-total"])
def test_replay_equals_the_spark_per_row_ledger(spark: Any, budget: Any,
                                                tmp_path: Path) -> None:
    """``Session(streaming=False)`` keeps the per-row Spark ledger: the same answer."""
    df = spark.createDataFrame(_data(300, seed=4).to_arrow())
    old = _session_run(df, budget, True, streaming=False, full=False)
    assert isinstance(old["session"].ledger, SparkUnitLedger)
    new = _session_run(df, budget, True, streaming=True, full=False)
    assert isinstance(new["session"].ledger, SparkReplayLedger)
    _same(old, new)
    # the third release (approximate DP, rho = inf) is left out for every row it reads
    q3 = new["queries"][2]
    assert q3["units_left_out_by_budget"] == q3["rows_in_released_cells"] > 0
    # Report.write_per_record: one Parquet file by Spark's writer, rows sorted by id
    for run, name in ((old, "old.parquet"), (new, "new.parquet")):
        run["session"].report(delta=1e-9).write_per_record(tmp_path / name,
                                                           rename={"row": "row_id"})
        assert pl.read_parquet(tmp_path / name).equals(
            new["per_record"].rename({"row": "row_id"}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.parquet", "old.parquet"]


def test_a_changed_frame_is_refused_before_anything_is_drawn(spark: Any) -> None:
    df = _data(200)
    sdf = spark.createDataFrame(df.to_arrow())
    s = tabdp.Session(seed=1, budget=0.5)
    sdf.dp.count(by=["c", "s"], keys=KEYS, session=s)
    state = s.rng._gen.bit_generator.state
    changed = spark.createDataFrame(
        df.with_columns(pl.col("w").reverse()).to_pandas())  # same rows read, other values
    for frame, match in ((changed, "'w'"), (sdf.drop("w"), "'w'"),
                         (sdf.filter("y > 5"), "number of rows")):
        with pytest.raises(tabdp.InvalidParameterError, match="not the rows") as info:
            frame.dp.count(by=["c"], keys=KEYS.project(["c"]), mechanism=mech.Gaussian(5.0),
                           session=s)
        assert re.search(match, str(info.value)), str(info.value)[:300]
        assert "200" not in str(info.value)  # no row count in the message
    assert len(s.records) == 1 and len(s.ledger.programs) == 1
    assert s.rng._gen.bit_generator.state == state  # nothing drawn
    # the same frame is still accepted, and the report replays both releases
    sdf.dp.sum("w", by=["c"], keys=KEYS.project(["c"]), mechanism=mech.Gaussian(5.0),
               session=s)
    assert _pl(s.report().per_record).columns == ["row", "rho", "epsilon", "size",
                                                  "rho_q1_count", "rho_q2_sum"]


@pytest.mark.parametrize("kind", ["count", "median"])
def test_a_changed_frame_the_replay_cannot_evaluate_is_refused_alike(spark: Any,
                                                                     kind: str) -> None:
    """Neighbouring inputs, one record's text a number or not: the same data-free refusal.

    Under a budget a later release replays the earlier ones over its rows. The replay must not
    run over rows the row check has not accepted: a text value the replay casts to a number
    would fail with Spark's error naming the value for one dataset and not the other
    (review r26: the replay's lineage cut by a checkpoint written before the row check).
    """
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    base = pl.DataFrame({"c": ["a", "b"] * 10, "x": list(range(20)),
                         "w": [float(i) for i in range(20)]})
    seen = []
    for value in ("7", "oops"):
        s = tabdp.Session(seed=1, budget=0.5)
        spark.createDataFrame(base.to_arrow()).dp.sum(
            "x", by="c", keys=keys, mechanism=mech.Gaussian(5.0), session=s)
        # the same rows read again with x as text (a CSV without a schema); one record differs
        text = base.with_columns(pl.col("x").cast(pl.String)).with_columns(
            pl.when(pl.int_range(pl.len()) == 3).then(pl.lit(value)).otherwise(pl.col("x"))
            .alias("x"))
        changed = spark.createDataFrame(text.to_arrow())
        with pytest.raises(tabdp.InvalidParameterError, match="not the rows") as info:
            if kind == "count":
                changed.dp.count(by="c", keys=keys, mechanism=mech.Gaussian(5.0), session=s)
            else:
                changed.dp.median("w", by="c", keys=keys, bounds=(0, 50), epsilon=1.0,
                                  session=s)
        seen.append(str(info.value))
        assert value not in str(info.value).split("'")
    assert seen[0] == seen[1]


def test_columns_named_like_the_replays_are_read_from_the_data(spark: Any) -> None:
    """Measures, keys and columns named like the replay's columns were: Polars' answer.

    Later releases and the report replay each release next to the input's columns, adding
    columns of their own. Named ``__acc<n>``, ``__pv<j>_<i>``, ``__pc<j>``, ``__uid``... they
    replaced input columns of the same name (review r27: a measure named ``__acc0`` was summed
    from a replayed total), and db7da7b refused such measures and keys on Spark row mode. They
    all start with ``__tabdp_`` now, a prefix no input column may have, so these names are read
    from the data as on Polars: the same tables (one seed), through a second and third release
    that extend the replay over the numbered snapshot and its checkpoint, a median (replayed
    from the start), and the same per-record report (the report's replay).
    """
    n = 24
    df = pl.DataFrame({"__pc1": ["a", "b", "c"] * (n // 3),
                       "__acc0": [float(9 * i) for i in range(n)],
                       "__pv0_0": [float((5 * i) % 7) for i in range(n)],
                       "x": [float(i % 4) for i in range(n)],
                       # not read by any release: named like the replay's columns were
                       "__uid": [-1] * n, "__keep": [False] * n, "__rel0": [9.0] * n,
                       "__led0": [1e9] * n, "__mono": list(range(n, 0, -1))})
    keys = tabdp.KeySet.from_dict(__pc1=["a", "b", "c"])

    def run(frame: Any) -> list[pl.DataFrame]:
        # the first release leaves the largest __acc0 out of the budget, later ones more rows
        s = tabdp.Session(seed=3, budget=5.0)
        out = [frame.dp.sum("__acc0", by="__pc1", keys=keys, mechanism=mech.Gaussian(50.0),
                            session=s),
               frame.dp.count(by="__pc1", keys=keys, mechanism=mech.Gaussian(2.0), session=s),
               frame.dp.sum(["__pv0_0", "x"], by="__pc1", keys=keys,
                            mechanism=mech.Gaussian(3.0), session=s),
               frame.dp.median("__acc0", by="__pc1", keys=keys, bounds=(0, 250), epsilon=1.0,
                               session=s)]
        pr = _pl(s.report().per_record)
        return [_pl(o) for o in out] + [pr.sort(pr.columns[0])]

    want = run(df)
    got = run(spark.createDataFrame(df.to_arrow()))
    for a, b in zip(want, got, strict=True):
        assert a.equals(b), (a, b)

    def left(c: str) -> set[int]:
        return set(want[-1].filter(pl.col(c) == 0)["row"].to_list())

    # the budget left rows out: of the first release alone (row 0 is charged 0: its value is
    # 0), and of the later ones on the replayed totals of the earlier ones
    assert left("rho_q1_sum") == {0, *range(18, n)}
    assert left("rho_q3_sum") == {0, 15} and left("rho_q4_median") == {16, 17}


@pytest.mark.parametrize("streaming", [None, False])
def test_the_reserved_prefix_is_refused_as_on_polars(spark: Any, streaming: Any) -> None:
    """A measure or key named ``__tabdp...``: refused before anything is read, as on Polars.

    tabdp's own columns (on Spark every column a release or a replay adds) start with
    ``__tabdp``; a query's measure or key so named is refused with the Polars engine's message,
    in row mode (replayed, or the per-row ledger) and unit mode alike. An input that merely has
    such a column is refused on Spark (Polars reads only the query's columns): the added
    columns would replace it.
    """
    df = pl.DataFrame({"c": ["a", "b"] * 5, "x": [float(i) for i in range(10)],
                       "u": list(range(10)), "__tabdp_x": [1.0] * 10})
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    tkeys = tabdp.KeySet.from_dict(__tabdp_x=[1.0])
    sdf = spark.createDataFrame(df.to_arrow())
    for unit in (None, "u"):
        msgs = []
        for frame in (df, sdf):
            s = tabdp.Session(seed=1, budget=5.0, unit=unit,
                              streaming=streaming if unit is None else None)
            for call in (lambda f=frame, s=s: f.dp.sum("__tabdp_x", by="c", keys=keys,
                                                        mechanism=mech.Gaussian(5.0), session=s),
                         lambda f=frame, s=s: f.dp.count(by="__tabdp_x", keys=tkeys,
                                                         mechanism=mech.Gaussian(5.0),
                                                         session=s),
                         lambda f=frame, s=s: f.dp.median("__tabdp_x", by="c", keys=keys,
                                                          bounds=(0, 5), epsilon=1.0,
                                                          session=s)):
                with pytest.raises(tabdp.InvalidParameterError) as info:
                    call()
                msgs.append(str(info.value))
            assert s.records == []
        assert msgs[:3] == msgs[3:]
        assert msgs[0] == ("column name(s) ['__tabdp_x'] start with '__tabdp' (in any letter "
                           "case), which tabdp reserves for its own columns.\nHint: rename "
                           "them before the release.")
        # an input column so named, read by no release: Polars ignores it, Spark refuses it
        s = tabdp.Session(seed=1, budget=5.0, unit=unit)
        df.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(5.0), session=s)
        s = tabdp.Session(seed=1, budget=5.0, unit=unit)
        with pytest.raises(tabdp.InvalidParameterError,
                           match=re.escape("the frame has column(s) ['__tabdp_x'] starting "
                                           "with '__tabdp'")) as info:
            sdf.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(5.0), session=s)
        assert "Hint: drop or rename" in str(info.value) and s.records == []
    sdf.drop("__tabdp_x").dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(5.0))


@pytest.mark.parametrize("unit", [None, "u"])
def test_the_reserved_prefix_in_another_letter_case_is_refused(spark: Any, unit: Any) -> None:
    """``__TABDP_ACC0``, ``__Tabdp_x``: refused as ``__tabdp...`` on both engines (review r28).

    Spark resolves column names without regard to case by default, so a measure named
    ``__TABDP_REL0`` was replaced by the replay's ``__tabdp_rel0`` (a later release summed
    release 0's per-row losses) and a key ``__TABDP_PC1`` grouped by the replay's cell
    positions: wrong tables. The prefix is checked in any letter case now, on both engines
    alike, and an input column so named is refused on Spark.
    """
    df = pl.DataFrame({"c": ["a", "b"] * 5, "x": [float(i) for i in range(10)],
                       "u": list(range(10)), "__TABDP_REL0": [1.0] * 10,
                       "__TABDP_PC1": ["a", "b"] * 5})
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    pkeys = tabdp.KeySet.from_dict(__TABDP_PC1=["a", "b"])
    sdf = spark.createDataFrame(df.to_arrow())
    msgs = []
    for frame in (df, sdf):
        s = tabdp.Session(seed=1, budget=5.0, unit=unit)
        for call in (lambda f=frame, s=s: f.dp.sum("__TABDP_REL0", by="c", keys=keys,
                                                    mechanism=mech.Gaussian(5.0), session=s),
                     lambda f=frame, s=s: f.dp.count(by="__TABDP_PC1", keys=pkeys,
                                                     mechanism=mech.Gaussian(5.0), session=s)):
            with pytest.raises(tabdp.InvalidParameterError) as info:
                call()
            msgs.append(str(info.value))
        assert s.records == []
    assert msgs[:2] == msgs[2:]
    assert msgs[0].startswith("column name(s) ['__TABDP_REL0'] start with '__tabdp' (in any "
                              "letter case)")
    s = tabdp.Session(seed=1, budget=5.0, unit=unit)
    with pytest.raises(tabdp.InvalidParameterError,
                       match=re.escape("the frame has column(s) ['__TABDP_PC1', '__TABDP_REL0'] "
                                       "starting with '__tabdp' (in any letter case")):
        sdf.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(5.0), session=s)
    with pytest.raises(tabdp.InvalidParameterError, match="in any letter case"):
        tabdp.Session(unit="__Tabdp_id")


def test_the_cell_audits_ties_come_in_key_order_as_on_polars(spark: Any) -> None:
    """Cells of equal worst ρ in the cell audit: in the key columns' order, as on Polars (r28).

    Spark sorted the audit by worst ρ only, keeping the order its group-by returned the cells
    in, so tied cells came out in another order than the Polars engines' (worst ρ, then keys).
    """
    df = pl.DataFrame({"c": [c for c in "cba" for _ in range(4)],
                       "s": [s for _ in range(3) for s in (1, 0, 1, 0)],
                       "x": [1.0] * 12})
    keys = tabdp.KeySet.from_dict(c=["a", "b", "c"], s=[0, 1])

    def run(frame: Any) -> pl.DataFrame:
        s = tabdp.Session(seed=2, track_cells=True)
        frame.dp.sum("x", by=["c", "s"], keys=keys, mechanism=mech.Gaussian(2.0), session=s)
        return s.records[0].cells

    want, got = run(df), run(spark.createDataFrame(df.to_arrow()))
    assert want["worst_rho"].n_unique() == 1 and want.height == 6  # all tied
    assert want.equals(got.select(want.columns)), (want, got)
    assert want.select("c", "s").rows() == [(c, s) for c in "abc" for s in (0, 1)]


def test_a_report_over_changed_rows_is_refused(spark: Any) -> None:
    """An input that gives other rows on each evaluation: the report is refused, no count.

    The release's numbered snapshot is the rows it read: the next release over the same frame
    and the report read it, not the input again. Without it (dropped), the report numbers the
    input anew and refuses the other rows; so does a release over another evaluation.
    """
    import random

    from pyspark.sql import functions as F

    noisy = F.udf(lambda: random.random(), "double").asNondeterministic()
    sdf = spark.range(0, 300, numPartitions=2).select(
        F.when(F.col("id") % 2 == 0, "a").otherwise("b").alias("c"), noisy().alias("w"))
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    s = tabdp.Session(seed=2)
    sdf.dp.sum("w", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s)
    sdf.dp.sum("w", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s)
    per = _pl(s.report().per_record)
    assert per["row"].to_list() == list(range(300))
    assert per["rho_q1_sum"].to_list() == per["rho_q2_sum"].to_list()  # the same rows' values
    with pytest.raises(tabdp.InvalidParameterError, match="not the rows") as info:
        sdf.select("*").dp.sum("w", by="c", keys=keys, mechanism=mech.Gaussian(1.0),
                               session=s)
    assert "300" not in str(info.value)
    s.ledger.drop_snapshot()
    with pytest.raises(tabdp.InvalidParameterError, match="report was not produced") as info:
        _ = s.report().per_record
    assert "300" not in str(info.value)


def _unfiltered_run(frame: Any) -> dict[str, Any]:
    s = tabdp.Session(seed=13)
    out = [
        frame.dp.sum(["x", "y", "w"], by=["c", "s"], keys=KEYS,
                     mechanism=mech.LogTransform(sigma=0.25, offset=1.0), session=s,
                     nulls="zero", negatives="zero"),
        frame.dp.sum(["w", "y"], by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(40.0),
                     session=s, nulls="drop", negatives="allow"),
        frame.dp.count(by=["c", "s"], keys=KEYS, session=s),  # the cells of the first: reused
        frame.dp.count(by=["s"], keys=KEYS.project(["s"]), session=s),
    ]
    return {"outputs": [_pl(t) for t in out], "session": s,
            "confidential": [r.confidential for r in s.records],
            "per_record": _pl(s.report().per_record).sort("row")}


def test_unfiltered_releases_equal_polars(spark: Any) -> None:
    """No budget, no cell audit: Polars' tables, counts and losses to the bit.

    One aggregation per release (exact totals in long parts, a count reusing an earlier
    release's cells), the numbered snapshot shared by the releases and the report.
    """
    df = _data(600, seed=3).with_columns(
        # values beyond 2**53 after the fixed-point scale, negatives and a sign mix
        (pl.col("x") * 1e9).alias("x"), (pl.col("y") * 10**12).alias("y"))
    ref = _unfiltered_run(df)
    sdf = spark.createDataFrame(df.to_arrow())
    got = _unfiltered_run(sdf)
    snap = got["session"].ledger._snap
    assert snap is not None and snap.source is sdf and snap.fps is not None
    assert len(snap.cells) == 3  # the first count read the first sum's cells
    for a, b in zip(ref["outputs"], got["outputs"], strict=True):
        assert a.equals(b)
    assert ref["confidential"] == got["confidential"]
    assert got["confidential"][0]["rows_outside_keys"] > 0
    assert ref["per_record"].equals(got["per_record"])


# origin: review R18 (R18-5: the snapshot was a persist(), recomputed from the input when its
# blocks were lost, and trusted without fingerprints); every storage level of the snapshot
@pytest.mark.parametrize("level", [None, "serialized", "disk"])
def test_a_numbered_snapshot_recomputed_from_a_changed_input_is_refused(
        spark: Any, level: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot's cached blocks lost (an executor gone): the next release must not trust it.

    A persisted DataFrame is a cache: Spark recomputes lost blocks from the lineage, i.e. reads
    the input again. Over an input that changed (simulated by a nondeterministic column, the
    stored blocks dropped) the snapshot then holds other rows than the ones its first
    release read and fingerprinted; a release over it (and the budget filter's replay of the
    first release) must refuse them, as a release over the input itself does.
    """
    import random

    from pyspark.sql import functions as F

    from tabdp.frame import _spark as tspark

    monkeypatch.setattr(tspark, "SNAPSHOT_LEVEL", level)
    noisy = F.udf(lambda: random.random(), "double").asNondeterministic()
    sdf = spark.range(0, 300, numPartitions=2).select(
        F.when(F.col("id") % 2 == 0, "a").otherwise("b").alias("c"), noisy().alias("w"))
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    s = tabdp.Session(seed=2, budget=10.0)
    sdf.dp.sum("w", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s)
    # as if the executors holding the snapshot's blocks were lost: every stored block dropped
    for rdd in spark.sparkContext._jsc.getPersistentRDDs().values():
        rdd.unpersist(True)
    # refused (the rows check) or failed (a checkpoint's lost block): never released
    with pytest.raises(Exception) as info:  # noqa: PT011 - either failure is the right one
        sdf.dp.sum("w", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s)
    assert "not the rows" in str(info.value) or "heckpoint" in str(info.value), info.value
    assert len(s.records) == 1
    # dropping a snapshot frees its blocks at once (not left to Spark's cleaner)
    s2 = tabdp.Session(seed=2)
    sdf.dp.sum("w", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s2)
    held = set(spark.sparkContext._jsc.getPersistentRDDs().keys())
    s2.ledger.drop_snapshot()
    assert len(set(spark.sparkContext._jsc.getPersistentRDDs().keys())) < len(held)


# origin: review R18
@pytest.mark.parametrize("budget", [
    pytest.param(None, id="none"),  # R18-6: failed before the fix
    pytest.param(0.4, id="constant")])
def test_the_cell_audit_adds_a_cells_currencies_rounded_up(spark: Any, budget: Any) -> None:
    """A (unit, cell)'s ρ over two currencies in the cell audit: Polars' double (`add_up`).

    R18-6: Spark's charge added the currencies' ρ in plain floats (below the exact sum, one
    ulp under Polars' in most cells).
    """
    df = _data(200, seed=5)

    def run(frame: Any) -> Any:
        s = tabdp.Session(seed=7, budget=budget, track_cells=True)
        frame.dp.sum(["x", "y"], by=["c", "s"], keys=KEYS,
                     mechanism=mech.LogTransform(sigma=0.25, offset=1.0), session=s,
                     nulls="zero", negatives="zero")
        cells = s.records[0].cells
        return cells.sort(cells.columns)

    ref, got = run(df), run(spark.createDataFrame(df.to_arrow()))
    assert ref.equals(got.select(ref.columns))


@pytest.mark.parametrize("unit", [None, "u"])
def test_measures_named_like_the_charges_columns_are_read_from_the_data(spark: Any,
                                                                        unit: Any) -> None:
    """Measures named like the charges' columns (``r0``, ``ok0``, ``cell_rho``): Polars' answer.

    A release's charges (``r<i>``, ``e<i>``, ``s<i>``, ``cell_rho``, ``cell_size``) and the
    filter's decisions (``ok<i>``) were added next to the measures' columns, and a measure so
    named made Spark fail (an ambiguous reference) where Polars released it. The measures'
    values are kept under tabdp's names there now: the same tables, cell audit and report.
    """
    n = 24
    df = pl.DataFrame({"c": ["a", "b"] * (n // 2), "u": [i // 2 for i in range(n)],
                       **{m: [float((k + 3) * i % 97) for i in range(n)]
                          for k, m in enumerate(["r0", "ok0", "cell_rho", "units"])}})
    keys = tabdp.KeySet.from_dict(c=["a", "b"])

    def run(frame: Any) -> list[Any]:
        s = tabdp.Session(seed=5, budget=4.0, unit=unit, track_cells=True)
        out = [frame.dp.sum(["r0", "ok0"], by="c", keys=keys, mechanism=mech.Gaussian(60.0),
                            session=s),
               frame.dp.sum(["cell_rho", "units"], by="c", keys=keys,
                            mechanism=mech.Gaussian(40.0), session=s)]
        pr = _pl(s.report().per_record)
        cells = [s.records[i].cells for i in range(2)]
        return [_pl(o) for o in out] + [pr.sort(pr.columns[0])] + cells

    want = run(df)
    got = run(spark.createDataFrame(df.to_arrow()))
    for a, b in zip(want, got, strict=True):
        assert (a.equals(b) if isinstance(a, pl.DataFrame) else a == b), (a, b)


def test_the_unit_ledgers_lookup_and_attach_fill_alike(spark: Any) -> None:
    """`SparkUnitLedger.lookup` and ``attach``: one rule for a unit never charged, null, NaN.

    Both give 0 (of the column's type) where the table has no row for the unit, a null or a
    NaN total, and keep every other value (``-0.0`` included): Spark's own ``fillna(0.0)``,
    which ``lookup`` used, ``nanvl`` only on float and double columns (`SparkUnitLedger._filled`).
    """
    from pyspark.sql import types as T

    led = SparkUnitLedger(spark, row_mode=False)
    led.table = spark.createDataFrame(
        [(1, 0.5, 2.0, 3), (2, float("nan"), float("nan"), None), (3, None, None, 4),
         (4, -0.0, 1.5, 0)],
        T.StructType([T.StructField("unit", T.LongType()), T.StructField("rho", T.DoubleType()),
                      T.StructField("size", T.FloatType()), T.StructField("n", T.LongType())]))
    units = spark.createDataFrame([(u,) for u in (1, 2, 3, 4, 5)], "unit long")
    cols = ["rho", "size", "n", "epsilon"]  # epsilon: not in the table
    have = ["rho", "size", "n"]
    old = units.join(led.table.select("unit", *have), on="unit", how="left") \
        .fillna(0.0, subset=have)
    want = {r["unit"]: (r["rho"], r["size"], r["n"], 0.0) for r in old.collect()}
    got = {r["unit"]: tuple(r[c] for c in cols) for r in led.lookup(units, cols).collect()}
    att = led.attach(units.withColumnRenamed("unit", "__tabdp_uid"), cols).collect()
    attached = {r["__tabdp_uid"]: tuple(r[f"__tabdp_led:{c}"] for c in cols) for r in att}
    assert repr(sorted(got.items())) == repr(sorted(attached.items())) \
        == repr(sorted(want.items()))
    assert want[2] == want[5] == (0.0, 0.0, 0, 0.0) and repr(want[4][0]) == "-0.0"


def test_the_row_mode_report_under_a_budget_is_a_checkpoint_equal_to_polars(
        spark: Any, tmp_path: Path) -> None:
    """Review r56 F5: the report of three releases under a budget, collected by the caller.

    The caller's collect runs without tabdp's job settings (CollapseProject on): over the
    replay's plan it ran a 1 GB driver out of heap on nine rows and five releases, and this
    test did not finish in 240 s. The report is a checkpoint of the replay's rows, computed
    by tabdp; its losses are Polars' to the bit.
    """
    rng = np.random.default_rng(5)
    df = pl.DataFrame({"c": rng.choice(["a", "b", "z"], 12), "x": rng.uniform(0, 40, 12).round(2),
                       "emp": rng.integers(0, 30, 12)})
    keys = tabdp.KeySet.from_dict(c=["a", "b"])

    def run(frame: Any) -> tabdp.Session:
        s = tabdp.Session(seed=11, budget=0.2)
        kw: dict[str, Any] = dict(by="c", keys=keys, session=s)
        with pytest.warns(UsabilityWarning):  # sigma = 0.3: the log transform's cv floor
            frame.dp.sum(["x", "emp"], mechanism=mech.LogTransform(sigma=0.3, offset=1000.0),
                         nulls="zero", **kw)  # charges by the mechanism's policy (pandas UDF)
        frame.dp.count(mechanism=mech.Gaussian(sigma=2.0), **kw)  # Spark expressions
        frame.dp.sum("x", mechanism=mech.Laplace(scale=50.0), name="lap", **kw)
        return s

    ref = run(df)
    got = run(spark.createDataFrame(df.to_arrow()))
    assert isinstance(got.ledger, SparkReplayLedger)
    # the budget binds: the third release leaves some rows of its cells out, admits others
    q3 = got.report().confidential_summary()["queries"][2]
    assert 0 < q3["units_left_out_by_budget"] < q3["rows_in_released_cells"]
    pr = got.report(delta=1e-9).per_record
    plan = pr._jdf.queryExecution().optimizedPlan().toString()
    assert "__tabdp" not in plan and len(plan) < 2_000  # the checkpoint, not the replay
    want = ref.report(delta=1e-9).per_record
    assert _pl(pr).sort("row").equals(want)
    got.report(delta=1e-9).write_per_record(tmp_path / "pr.parquet")
    assert pl.read_parquet(tmp_path / "pr.parquet").equals(want)
    assert got.report().confidential_summary()["rho_max"] == \
        ref.report().confidential_summary()["rho_max"]
