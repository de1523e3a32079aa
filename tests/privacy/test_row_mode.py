"""Row mode (the unit is the row): a frame is bound to the session's records.

Each test states a claim of docs/privacy-semantics.md and tries to break it on neighbouring
datasets: a frame that is not row for row the session's (sorted, filtered, re-typed, re-ordered
categories, rescaled decimals, another time unit) is refused, the refusal and its message do not
depend on one record, and losses follow records, not positions. Tests marked
``xfail(strict=True)`` are attacks that still succeed. The frame tests run on the engines they
apply to (``tests/_engines.py``).
"""

from __future__ import annotations

import pathlib
import sys
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.frame import binding

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _engines import LAZY_ENGINES, as_polars, session_state  # noqa: E402

KEY1 = tabdp.KeySet.from_dict(c=["a"])


# -- 1. Row mode: the "same rows" refusal is itself a data-dependent oracle ---------------------
def _row_mode_probe(df: pl.DataFrame, derive: Callable[[pl.DataFrame], pl.DataFrame],
                    to_engine: Callable[[Any], Any]) -> str:
    """Author mode, row mode: a release on ``df`` then one on a frame derived from it.

    Returns what the query author sees of the second call: "ok" or the exception's class.
    """
    frame = to_engine(df)
    s = tabdp.Session(mode="author", data=frame)  # the curator pins it
    frame.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1e6), session=s,
                 nulls="zero", negatives="allow")
    try:
        to_engine(derive(df)).dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1e6),
                                     session=s, nulls="zero", negatives="allow")
    except Exception as err:  # noqa: BLE001 - what the author sees
        return type(err).__name__
    return "ok"


# origin: review R1 (issue 13)
def test_author_mode_row_binding_is_no_clip_oracle(to_engine: Callable[[Any], Any]) -> None:
    """Fixed: an author-mode session is bound to one frame object.

    Any other frame is refused by identity, whatever its data.
    """
    d = pl.DataFrame({"c": ["a"] * 5, "x": [10.0, 20.0, 30.0, 40.0, 50.0]})
    d_plus = pl.concat([d, pl.DataFrame({"c": ["a"], "x": [1e6]})])  # one more establishment

    def clip(f: pl.DataFrame) -> pl.DataFrame:
        return f.with_columns(pl.col("x").clip(upper_bound=100.0))

    # Seen by the author: "ok" on D, an InvalidParameterError on D + one record. Repeating with
    # a bisection over the threshold recovers the largest value exactly, at zero recorded cost.
    assert _row_mode_probe(d, clip, to_engine) == _row_mode_probe(d_plus, clip, to_engine)


# origin: review R1 (issue 13)
def test_author_mode_row_binding_is_no_filter_oracle(to_engine: Callable[[Any], Any]) -> None:
    d = pl.DataFrame({"c": ["a"] * 5, "x": [10.0, 20.0, 30.0, 40.0, 50.0]})
    d_plus = pl.concat([d, pl.DataFrame({"c": ["a"], "x": [1e6]})])

    def keep_small(f: pl.DataFrame) -> pl.DataFrame:
        return f.filter(pl.col("x") <= 100.0)

    assert (_row_mode_probe(d, keep_small, to_engine)
            == _row_mode_probe(d_plus, keep_small, to_engine))


# -- 2. Row mode: a reordered frame read through new columns is not detected --------------------
def test_row_mode_sort_then_new_measure_charges_the_right_record(
        to_engine: Callable[[Any], Any]) -> None:
    """Fixed: row mode binds every column of the frame, so the sorted frame is refused."""
    # Two establishments in one cell; record P is large in both measures, Q small in both.
    df = pl.DataFrame({"who": ["P", "Q"], "c": ["a", "a"], "a": [1.0, 0.1], "b": [0.1, 1.0],
                       "w": [1.0, 0.1]})
    budget = 0.6  # Gaussian(1): rho = Δ²/2, so P's true loss 0.5 + 0.5 = 1.0 passes it
    s = tabdp.Session(budget=budget, seed=1)
    to_engine(df).dp.sum("a", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s)
    # Sorting by w reverses the rows; only "c" (identical in both rows) was read before.
    assert df.sort("w")["who"].to_list() == ["Q", "P"]
    resorted = to_engine(df.sort("w"))
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match="unit="):
        resorted.dp.sum("w", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s)
    assert len(s.records) == 1
    assert as_polars(s.report().per_record)["rho"].to_list() == [0.5, pytest.approx(0.005)]


# origin: review R1 (issue 13)
def test_row_mode_per_record_report_follows_records(to_engine: Callable[[Any], Any]) -> None:
    data = pl.DataFrame({"c": ["a", "a"], "a": [3.0, 0.0], "w": [5.0, 1.0]})
    df = to_engine(data)
    s = tabdp.Session(seed=1)
    df.dp.sum("a", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s)
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match="unit="):
        to_engine(data.sort("w")).dp.sum("w", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0),
                                         session=s)
    # the same frame through the new column is accepted and charged to the right records
    df.dp.sum("w", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s)
    rho = as_polars(s.report().per_record)["rho"].to_list()
    # record 0 (a = 3, w = 5): 4.5 + 12.5; record 1 (a = 0, w = 1): 0 + 0.5
    assert rho == pytest.approx([17.0, 0.5])


# origin: review R1 (issue 13)
def test_reserved_row_id_unit_refused_or_safe() -> None:
    """Fixed: the reserved row-id column cannot be a caller's unit."""
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match="reserved"):
        tabdp.Session(unit="__tabdp_row", seed=1)


# origin: review R1 (issue 13)
def test_row_binding_message_holds_no_row_count(to_engine: Callable[[Any], Any]) -> None:
    # The refusal of a filtered frame quoted its row count: with df.filter(x <= t) that is an
    # exact, noiseless count of the records below t.
    d = pl.DataFrame({"c": ["a"] * 7, "x": [10.0, 20.0, 30.0, 40.0, 50.0, 1e6, 2e6]})
    frame = to_engine(d)
    s = tabdp.Session(mode="author", data=frame)  # the curator pins it
    frame.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1e6), session=s,
                 nulls="zero", negatives="allow")
    with pytest.raises(tabdp.exceptions.InvalidParameterError) as info:
        to_engine(d.filter(pl.col("x") <= 35.0)).dp.sum("x", by="c", keys=KEY1,
                                             mechanism=mech.Gaussian(1e6), session=s,
                                             nulls="zero", negatives="allow")
    assert not any(ch.isdigit() for ch in str(info.value))


# origin: review R1 (issue 13)
def test_row_mode_binds_the_columns_read_and_rechecks_them() -> None:
    """Row mode fingerprints the columns releases read, and re-checks all bound columns.

    Exchanging rows that differ only in an unread column misattributes nothing, while a
    reorder visible in any bound column is refused.
    """
    df = pl.DataFrame({"c": ["a", "a", "a"], "x": [2.0, 2.0, 0.5], "w": [9.0, 1.0, 1.0],
                       "note": ["p", "q", "r"]})
    s = tabdp.Session(seed=1)
    df.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s)
    assert binding.of(s).bound_columns() == ["c", "x"]
    # rows 0 and 1 agree on every bound column (c, x): a frame that exchanges them and drops
    # the never-read column is accepted; the new column w is charged to the rows as read now
    swapped = df[[1, 0, 2]].drop("note")
    swapped.dp.sum("w", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s)
    assert binding.of(s).bound_columns() == ["c", "x", "w"]
    rho = s.report().per_record["rho"].to_list()
    # row 0 now holds w = 1 (x = 2): 2 + 0.5; row 1 holds w = 9: 2 + 40.5; row 2: 0.125 + 0.5
    assert rho == pytest.approx([2.5, 42.5, 0.625])
    # a reorder visible in a bound column (x) is refused, whatever column is released
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match="unit="):
        swapped[[2, 1, 0]].dp.count(by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s)
    # so is a frame without a bound column
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match="unit="):
        swapped.drop("w").dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0),
                                 session=s)
    assert len(s.records) == 2


KEY_A = tabdp.KeySet.from_dict(c=["A"])


def _enum_frames() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Record P = (A, 3.0) and record Q = (Z, 100.0); Z is outside the key set.

    The second frame holds the same records in the other order, with the Enum's categories
    reordered too, so every row keeps its physical code.
    """
    f1 = pl.DataFrame({"c": pl.Series(["A", "Z"], dtype=pl.Enum(["A", "Z"])),
                       "x": [3.0, 100.0]})
    f2 = pl.DataFrame({"c": pl.Series(["Z", "A"], dtype=pl.Enum(["Z", "A"])),
                       "x": [100.0, 3.0]})
    assert f1.select(pl.col("c").to_physical()).equals(f2.select(pl.col("c").to_physical()))
    return f1, f2


# origin: review R2
@pytest.mark.parametrize("lazy", [False, True])
def test_row_mode_enum_reordered_with_its_categories_is_refused(lazy: bool) -> None:
    """Row mode binds column values, not Enum codes.

    Without the fix the count charged P's row (position 0) and the sum of x, read from the
    reordered frame, charged P at position 1: the per-record report said max rho 4.5 while P's
    true loss is 0.5 + 4.5 = 5.0 (an under-report; a budget of 4.9 would have admitted P).
    """
    f1, f2 = _enum_frames()
    s = tabdp.Session(seed=1)
    (f1.lazy() if lazy else f1).dp.count(by="c", keys=KEY_A, mechanism=mech.Gaussian(1.0),
                                         session=s)
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match=r"\['c'\]"):
        (f2.lazy() if lazy else f2).dp.sum("x", by="c", keys=KEY_A,
                                           mechanism=mech.Gaussian(1.0), session=s)
    # brute force: the only loss so far is P's count
    assert s.report().per_record["rho"].to_list() == [0.5, 0.0]


# origin: review R2
def test_row_mode_enum_reordered_quantile_is_refused() -> None:
    """The same attack through a median (the quantile path fingerprints on its own)."""
    f1, f2 = _enum_frames()
    s = tabdp.Session(seed=1)
    f1.dp.count(by="c", keys=KEY_A, mechanism=mech.Gaussian(1.0), session=s)
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match=r"\['c'\]"):
        f2.dp.median("x", by="c", keys=KEY_A, bounds=(0.0, 200.0), epsilon=1.0, session=s)


# origin: review R2
def test_row_mode_enum_and_string_of_same_values_bind_alike() -> None:
    """Hashing strings makes the same values in an Enum and a String column one binding."""
    f1, _ = _enum_frames()
    s = tabdp.Session(seed=1)
    f1.dp.count(by="c", keys=KEY_A, mechanism=mech.Gaussian(1.0), session=s)
    f1.with_columns(pl.col("c").cast(pl.String)).dp.sum(
        "x", by="c", keys=KEY_A, mechanism=mech.Gaussian(1.0), session=s)
    # P (row 0): count 0.5 + sum 3²/2; Q outside the key set
    assert s.report().per_record["rho"].to_list() == [5.0, 0.0]


# origin: review R2
def test_row_mode_cached_snapshot_after_a_median_is_not_refused() -> None:
    """The same, unchanged frame: sum of x, median of y, then a count (cached snapshot).

    Without the fix the count reused the sum's cached fingerprints, which lack ``y`` (bound by
    the median in between), and refused the session's own frame as "changed".
    """
    df = pl.DataFrame({"c": ["A", "A", "A"], "x": [1.0, 2.0, 3.0], "y": [5.0, 6.0, 7.0]})
    s = tabdp.Session(seed=1)
    df.dp.sum("x", by="c", keys=KEY_A, mechanism=mech.Gaussian(1.0), session=s)
    df.dp.median("y", by="c", keys=KEY_A, bounds=(0.0, 10.0), epsilon=1.0, session=s)
    df.dp.count(by="c", keys=KEY_A, mechanism=mech.Gaussian(2.0), session=s)
    pr = s.report().per_record
    med = pr["rho_q2_median"].to_list()
    assert med[0] > 0 and med == [med[0]] * 3
    assert pr["rho_q1_sum"].to_list() == [0.5, 2.0, 4.5]
    assert pr["rho_q3_count"].to_list() == [0.125] * 3
    assert pr["rho"].to_list() == pytest.approx([0.5 + med[0] + 0.125, 2.0 + med[0] + 0.125,
                                                 4.5 + med[0] + 0.125])


def _cells_frame(seed: int, n: int, sigma: float) -> tuple[pl.DataFrame, tabdp.KeySet]:
    """Rows in ``c`` × ``k`` cells (some outside the key set) and a lognormal ``x``; the key set.

    The same draws as the tests wrote out before (``c``, then ``k``, then ``x``).
    """
    rng = np.random.default_rng(seed)
    df = pl.DataFrame({"c": rng.choice(["A", "B", "Z"], n), "k": rng.integers(0, 3, n),
                       "x": rng.lognormal(1.0, sigma, n)})
    return df, tabdp.KeySet.from_dict(c=["A", "B"], k=[0, 1])


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_a_count_after_a_sum_of_the_same_snapshot_finds_the_cells_once(
        monkeypatch: pytest.MonkeyPatch, lazy: bool) -> None:
    """In memory, a count of the same frame, key set and grouping reuses the sum's cells.

    The cells are found once for the snapshot (a row-wise lookup over every row); the tables
    and per-record losses are those of a count of a copy of the frame, which finds them again.
    Another grouping or key set finds its own.
    """
    from tabdp.frame import _engine

    df, keys = _cells_frame(3, 500, 1.0)
    calls: list[int] = []
    found = _engine._attach_cells

    def counted(data: pl.DataFrame, *args: Any) -> pl.DataFrame:
        calls.append(data.height)
        return found(data, *args)

    monkeypatch.setattr(_engine, "_attach_cells", counted)
    runs = []
    for same in (True, False):
        s = tabdp.Session(seed=5, streaming=False)
        frame: Any = df.lazy() if lazy else df
        out = [frame.dp.sum("x", by=["c", "k"], keys=keys, mechanism=mech.Gaussian(4.0),
                            session=s)]
        calls.clear()
        out.append((frame if same else df.clone()).dp.count(by=["c", "k"], keys=keys,
                                                           session=s))
        out.append(len(calls))
        out.append(frame.dp.count(by="c", keys=keys.project(["c"]), session=s))
        out.append(s.report().per_record)
        runs.append(out)
    assert runs[0][2] == 0 and runs[1][2] == 1
    for i in (0, 1, 3, 4):
        assert runs[0][i].equals(runs[1][i])


@pytest.mark.parametrize("budget", [None, 3.0], ids=["no-budget", "budget"])
def test_a_count_after_a_sum_of_the_same_cells_takes_the_sums_totals(
        monkeypatch: pytest.MonkeyPatch, budget: float | None) -> None:
    """In memory, a count of the same snapshot and cells takes the sum's exact cell totals.

    The count's rows per cell are those the sum grouped (every row kept, none left out by the
    budget filter): they are not grouped again. Another grouping clears them, and a budget
    that leaves rows out of the sum keeps none. Tables and per-record losses are those of a
    count of a copy of the frame, which groups its own rows.
    """
    from tabdp.frame.backends import polars as backend

    df, keys = _cells_frame(4, 400, 1.5)
    reused: list[bool] = []
    whole = backend._whole_totals

    def spied(memo: Any, cols: list[str]) -> Any:
        got = whole(memo, cols)
        reused.append(got is not None)
        return got

    monkeypatch.setattr(backend, "_whole_totals", spied)
    runs = []
    for same in (True, False):
        s = tabdp.Session(seed=5, streaming=False, budget=budget)
        out: list[Any] = [df.dp.sum("x", by=["c", "k"], keys=keys, mechanism=mech.Gaussian(4.0),
                                    session=s)]
        reused.clear()
        other = df if same else df.clone()
        out.append(other.dp.count(by=["c", "k"], keys=keys, session=s))
        out.append(list(reused))
        out.append(df.dp.count(by="c", keys=keys.project(["c"]), session=s))
        reused.clear()
        out.append(df.dp.count(by=["c", "k"], keys=keys, session=s))
        out.append(list(reused))
        out.append(s.report().per_record)
        runs.append(out)
    left_out = budget is not None
    assert runs[0][2] == [not left_out] and runs[1][2] == [False]
    assert True not in runs[0][5]  # the cells were found again for the other grouping
    for i in (0, 1, 3, 4, 6):
        assert runs[0][i].equals(runs[1][i])


# origin: review R3
@pytest.mark.parametrize("streaming", [False, True])
def test_a_column_named_like_the_row_ids_is_refused_in_row_mode(streaming: bool) -> None:
    """Row ids are tabdp's own: a frame's ``__tabdp_row`` column is never taken as the ids.

    Without the fix a streaming session used the column as its row ids (the per-record report
    listed row 5 twice, with two different losses) and the in-memory ledger raised a raw Polars
    ``DuplicateError``. Both refuse it now from the schema alone, before any data is read.
    """
    df = pl.DataFrame({"__tabdp_row": [5, 5, 9], "c": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]})
    s = tabdp.Session(seed=1, streaming=streaming)
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match="reserved"):
        df.lazy().dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                         mechanism=mech.Gaussian(1.0), session=s)
    assert s.records == []


KEY_AB = tabdp.KeySet.from_dict(c=["a", "b"])


# -- row fingerprints: a decimal column rescaled between releases ------------------------------
@pytest.mark.spark
def test_a_rescaled_decimal_column_is_refused(spark: Any) -> None:
    """A decimal measure whose scale changed (the same unscaled digits) is another column.

    Spark's ``xxhash64`` hashes a decimal by its unscaled digits only, so ``100`` as
    ``decimal(10,0)`` and ``1.00`` as ``decimal(10,2)`` had the same row fingerprint: a
    session whose input was rewritten in other units (cents to dollars) was accepted, and the
    replay charged the earlier release at the new, 100 times smaller, values (its losses
    under-reported to the budget filter and the per-record report). The fingerprint now
    includes the decimal's scale: the release is refused before anything is drawn, and so is
    the report over the rewritten input.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    rows = [("a" if i % 2 else "b", Decimal(100 * (i + 1))) for i in range(24)]
    schema = T.StructType([T.StructField("c", T.StringType()),
                           T.StructField("x", T.DecimalType(10, 0))])
    sdf = spark.createDataFrame(rows, schema)
    rescaled = sdf.select("c", (F.col("x") / 100).cast(T.DecimalType(10, 2)).alias("x"))
    assert rescaled.collect()[0]["x"] == Decimal("1.00")
    s = tabdp.Session(seed=3, budget=1.0)
    sdf.dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(2000.0), session=s)
    state = s.rng._gen.bit_generator.state  # type: ignore[union-attr]
    with pytest.raises(tabdp.InvalidParameterError, match="not the rows"):
        rescaled.dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(2000.0), session=s)
    assert s.rng._gen.bit_generator.state == state  # type: ignore[union-attr]
    assert len(s.records) == 1
    # the report of a session whose last input is the original frame is produced; the
    # replay over the rewritten input is refused
    assert s.report().per_record.count() == 24
    s.ledger.release()
    s.ledger.source = rescaled
    with pytest.raises(tabdp.InvalidParameterError, match="report was not produced"):
        _ = s.report().per_record


# origin: review R5
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "streaming"])
def test_a_rescaled_decimal_column_is_refused_on_polars(lazy: bool) -> None:
    """The same collision in the Polars engine's fingerprint, refused on both ledgers.

    A Decimal's physical value is its unscaled integer: the streaming session replayed the
    first release at the rescaled values.
    """
    import polars as pl

    a = pl.DataFrame({"c": ["a" if i % 2 else "b" for i in range(24)],
                      "x": pl.Series([Decimal(100 * (i + 1)) for i in range(24)],
                                     dtype=pl.Decimal(10, 0))})
    b = a.with_columns(pl.col("x").cast(pl.Float64).truediv(100).cast(pl.Decimal(10, 2)))
    assert b["x"][0] == Decimal("1.00")

    def frame(d: pl.DataFrame) -> Any:
        return d.lazy() if lazy else d

    s = tabdp.Session(seed=3, budget=1.0)
    frame(a).dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(2000.0), session=s)
    with pytest.raises(tabdp.InvalidParameterError, match="not the rows"):
        frame(b).dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(2000.0), session=s)
    assert len(s.records) == 1
    # the same frame is still accepted
    frame(a).dp.count(by="c", keys=KEY_AB, session=s)
    assert len(s.records) == 2


# origin: review R5
def test_a_datetime_key_in_another_time_unit_is_refused() -> None:
    """A Datetime key rewritten with the same integers in another time unit is a changed column.

    The rows move to other instants (here out of the key set's cells), so a streaming replay
    would charge the first release nothing; the fingerprint hashed only the physical integer.
    """
    import datetime as dt

    import polars as pl

    t0 = dt.datetime(2024, 1, 1)
    keys = tabdp.KeySet.from_dict(t=pl.Series([t0], dtype=pl.Datetime("ms")))
    a = pl.DataFrame({"t": pl.Series([t0] * 20, dtype=pl.Datetime("ms"))})
    b = a.with_columns(pl.col("t").cast(pl.Int64).cast(pl.Datetime("us")))
    assert b["t"][0] != t0
    s = tabdp.Session(seed=3, budget=1.0)
    lazy_a: Any = a.lazy()
    lazy_b: Any = b.lazy()
    lazy_a.dp.count(by="t", keys=keys, session=s)
    with pytest.raises(tabdp.InvalidParameterError, match="not the rows"):
        lazy_b.dp.count(by="t", keys=keys, session=s)


# origin: review R5
@pytest.mark.spark
def test_spark_fingerprints_tell_types_with_the_same_integers_apart(spark: Any) -> None:
    """Types Spark's ``xxhash64`` hashes alike get other row fingerprints.

    ``xxhash64`` hashes an ``int`` and a ``date``, a ``timestamp`` and a ``timestamp_ntz`` by
    the same integer; the row fingerprint hashes their type too (and a decimal's scale).
    """
    from pyspark.sql import functions as F

    from tabdp.frame._spark import _fingerprint

    base = spark.range(1).select(F.lit(19000).cast("int").alias("i"),
                                 F.lit(1_700_000_000_000_000).cast("long").alias("l"),
                                 F.lit(100).cast("decimal(10,0)").alias("d0"))
    sdf = base.select("*", F.expr("date_from_unix_date(i)").alias("date"),
                      F.expr("timestamp_micros(l)").alias("ts"),
                      F.expr("cast(timestamp_micros(l) as timestamp_ntz)").alias("ntz"),
                      F.expr("cast(d0 / 100 as decimal(10,2))").alias("d2"))
    assert sdf.select(F.xxhash64("i").alias("a"), F.xxhash64("date").alias("b")).first() \
        .asDict() == sdf.select(F.xxhash64("i").alias("a"), F.xxhash64("i").alias("b")) \
        .first().asDict()  # Spark's own hash: alike
    types = {f.name: f.dataType for f in sdf.schema.fields}
    row = sdf.select(*[_fingerprint(F.lit(0), c, types[c]).alias(c) for c in types]).first()
    assert row["i"] != row["date"]
    assert row["ts"] != row["ntz"]
    assert row["d0"] != row["d2"]


# Nearly noiseless (sigma=1e-4: its default grid 1e-6 is the finest float64 holds exactly for the
# totals up to 1e6 released below; docs/exact-rounding.md). Estimates are checked to 100 sigma.
TINY = mech.Gaussian(sigma=1e-4)


KEYS = tabdp.KeySet.from_dict(c=["a", "b"])



# -- aggregation cache reused after an in-place change of a Polars DataFrame ---------------------
def test_in_place_change_of_a_polars_frame_is_not_served_from_the_cache():
    df = pl.DataFrame({"u": [1, 2, 3], "c": ["a", "a", "b"], "x": [1e6, 1.0, 2.0]})
    s = tabdp.Session(unit="u", seed=0)
    df.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s, name="before")
    df[0, "x"] = 1.0  # in place: same object, other data
    out = df.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s, name="after")
    # the release is of the current data...
    np.testing.assert_allclose(out["x"].to_numpy(), [2.0, 2.0], atol=1e-2)
    # ...and the accounting is of what was released
    pr = s.report().per_record.sort("u")
    np.testing.assert_allclose(pr["rho_after"].to_numpy(), TINY.rho([1.0, 1.0, 2.0]))


# origin: review regression
@pytest.mark.parametrize("change", ["value", "key", "sort", "filter"])
def test_row_mode_refuses_a_frame_that_is_not_row_for_row_the_sessions(change, engine,
                                                                        to_engine):
    """Row mode accounts by row id.

    An in-place change, a sort or a filter between releases would charge one record's loss to
    another; refused before any noise (issue 13).
    """
    if change in ("value", "key") and engine in (*LAZY_ENGINES, "spark"):
        pytest.skip("a LazyFrame or a Spark DataFrame cannot be modified in place")
    data = pl.DataFrame({"c": ["a", "a", "b"], "x": [1e6, 1.0, 2.0]})
    df = to_engine(data)
    s = tabdp.Session(seed=0)
    df.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s)
    if change in ("value", "key"):  # in place: the same object, other data
        col, value = ("x", 1.0) if change == "value" else ("c", "z")
        if engine == "pandas":
            df.loc[0, col] = value
        else:
            df[0, col] = value
        again = df
    elif change == "sort":
        again = to_engine(data.sort("x"))
    else:
        again = to_engine(data.filter(pl.col("x") < 10))
    before = session_state(s)
    with pytest.raises(tabdp.InvalidParameterError, match="unit='<id column>'"):
        again.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s)
    assert session_state(s) == before
    # the same rows in the same order are accepted (a count reads only the key column)
    df0 = to_engine(pl.DataFrame({"c": ["a", "a", "b"], "x": [1e6, 1.0, 2.0]}))
    df0.dp.count(by="c", keys=KEYS, mechanism=TINY, session=s)


# origin: review regression
def test_row_mode_sort_then_release_charges_by_record_not_position(to_engine):
    """The attack of issue 13.

    df then df.sort(...) in one session charged each position the loss of whatever record sat there.
    Now the second release is refused; with unit= the losses follow the records, checked against a
    brute-force per-record loss.
    """
    df = pl.DataFrame({"id": [1, 2, 3], "c": ["a", "a", "b"], "x": [1e6, 1.0, 2.0]})
    g = mech.Gaussian(sigma=1e3)
    s = tabdp.Session(unit="id", seed=0)
    to_engine(df).dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s)
    to_engine(df.sort("x")).dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s)
    pr = as_polars(s.report().per_record).sort("id")
    np.testing.assert_allclose(pr["rho"].to_numpy(), 2 * g.rho(np.array([1e6, 1.0, 2.0])))


# -- row-mode accounting in pieces: the same doubles --------------------------------------------
@pytest.mark.parametrize("kind", ["sum", "count"])
def test_the_policy_evaluated_in_chunks_gives_every_double_of_one_evaluation(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-row charges evaluated chunk by chunk are bit-identical to one whole evaluation."""
    from tabdp.frame import _engine as eng

    rng = np.random.default_rng(5)
    n = 1000
    x = rng.standard_cauchy(n) * 1e6
    fixed = np.round(x * 2.0**24)
    inside = pl.DataFrame({
        eng.ROW_ID: np.arange(n, dtype=np.int64),
        eng._ROWS: rng.integers(1, 4, n),
        "x": pl.Series([int(v) for v in fixed], dtype=pl.Int128),
        "y": pl.Series(rng.integers(-5, 5, n).tolist(), dtype=pl.Int128)})
    measures = ["x", "y"] if kind == "sum" else []
    policy = eng._Policy(mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0) if kind == "sum"
                         else mech.Gaussian(2.0), measures)
    bits = {"x": 24, "y": 0}
    whole = eng._charges(inside, eng.ROW_ID, True, policy, kind, bits)
    monkeypatch.setattr(eng, "POLICY_CHUNK", 7)
    parts = eng._charges(inside, eng.ROW_ID, True, policy, kind, bits)
    for field in ("rho", "epsilon", "size"):
        for cur in getattr(whole[0], field):
            a, b = getattr(whole[0], field)[cur], getattr(parts[0], field)[cur]
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (field, cur)
    assert whole[1].tobytes() == parts[1].tobytes()
    assert whole[2].tobytes() == parts[2].tobytes()


def _row_inside(n: int, seed: int = 5) -> tuple[Any, pl.DataFrame]:
    from tabdp.frame import _engine as eng

    rng = np.random.default_rng(seed)
    x = rng.standard_cauchy(n) * 1e6
    x[::97] = 0.0
    return eng, pl.DataFrame({
        eng.ROW_ID: np.arange(n, dtype=np.int64),
        eng._ROWS: rng.integers(1, 4, n),
        "x": pl.Series([int(v) for v in np.round(x * 2.0**24)], dtype=pl.Int128),
        "y": pl.Series(rng.integers(-5, 5, n).tolist(), dtype=pl.Int128),
        "z": pl.Series((rng.integers(0, 2**40, n) * 3).tolist(), dtype=pl.Int128)})


@pytest.mark.parametrize("chunk", [None, 7])
@pytest.mark.parametrize("mechanism", [
    mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0), mech.Gaussian(3.0),
    mech.Subbotin(r=3.0, scale=5.877443, delta=1e-4)], ids=["epl", "gauss", "approx"])
def test_row_totals_with_the_charges_are_the_losses_of_the_per_currency_arrays(
        mechanism: Any, chunk: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row mode without a budget: losses totalled chunk by chunk are the general path's.

    Bit for bit those `Charges.losses` adds from every currency's arrays (`Charges.totals`),
    and those arrays, computed only when read (`Deferred`), are the general path's.
    """
    eng, inside = _row_inside(1000)
    if chunk is not None:
        monkeypatch.setattr(eng, "POLICY_CHUNK", chunk)
    policy = eng._Policy(mechanism, ["x", "y", "z"])
    bits = {"x": 24, "y": 0, "z": 0}
    general = eng._charges(inside, eng.ROW_ID, True, policy, "sum", bits, cells=False)[0]
    fast = eng._charges(inside, eng.ROW_ID, True, policy, "sum", bits, cells=False,
                        totals=True)[0]
    assert general.totals is None and fast.totals is not None
    ok = {c: np.ones(general.n, dtype=bool) for c in general.currencies}
    a, b = general.losses(ok), fast.losses(ok)
    kinds = ["rho", "epsilon", "size", *(["eps_a", "delta_a"] if policy.approx else [])]
    assert np.array_equal(np.asarray(a.units), np.asarray(b.units))
    for k in kinds:
        assert np.asarray(getattr(a, k)).tobytes() == np.asarray(getattr(b, k)).tobytes(), k
    assert fast.currencies == general.currencies == ["x", "y", "z"]
    for k in kinds:  # read last: the totals did not need them
        for c in general.currencies:
            assert getattr(fast, k)[c].tobytes() == getattr(general, k)[c].tobytes(), (k, c)
    # a left-out unit: the general masked sums from the per-currency arrays (read on demand)
    ok["y"] = ok["y"].copy()
    ok["y"][3] = False
    a, b = general.losses(ok), fast.losses(ok)
    for k in kinds:
        assert np.asarray(getattr(a, k)).tobytes() == np.asarray(getattr(b, k)).tobytes(), k


@pytest.mark.parametrize("budget", [None, 40.0])
def test_in_memory_row_mode_totals_with_the_charges_give_the_same_report(
        budget: float | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """In memory, row mode: the same tables and report with the losses totalled by chunks.

    A sum of two measures, then a count: the same noisy tables and per-record report, bit for
    bit, as with the general path forced.
    """
    from tabdp.frame import _engine as eng
    from tabdp.frame.backends import polars as pb

    rng = np.random.default_rng(11)
    n = 3000
    df = pl.DataFrame({"c": rng.choice(["a", "b", "c"], n),
                       "x": np.abs(rng.standard_cauchy(n)) * 1e4, "y": rng.integers(0, 50, n)})
    keys = tabdp.KeySet.from_dict(c=["a", "b", "c"])
    m = mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)

    def run() -> tuple[list[Any], pl.DataFrame]:
        s = tabdp.Session(seed=3, streaming=False, budget=budget)
        lf = df.lazy()
        t1 = lf.dp.sum(["x", "y"], by="c", keys=keys, mechanism=m, session=s)
        t2 = lf.dp.count(by="c", keys=keys, session=s)
        return [t1, t2], as_polars(s.report().per_record)

    seen: list[bool] = []
    real = eng._charges

    def spy(*a: Any, **k: Any) -> Any:
        out = real(*a, **k)
        seen.append(out[0].totals is not None)
        return out

    monkeypatch.setattr(eng, "POLICY_CHUNK", 64)
    monkeypatch.setattr(pb, "_charges", spy)
    tables, report = run()
    assert seen == [budget is None, False]  # the sum's two currencies; a count has one
    monkeypatch.setattr(pb, "_charges", lambda *a, **k: real(*a, **{**k, "totals": False}))
    tables0, report0 = run()
    for t, t0 in zip(tables, tables0, strict=True):
        assert as_polars(t).equals(as_polars(t0))
    assert report.equals(report0)
    assert report.height == n and report["rho"].min() > 0


def test_the_dense_ledger_keeps_no_column_of_zeros() -> None:
    """An all-zero component is not stored, reads as 0 and is stored once it is charged."""
    from tabdp.privacy.ledger import DenseLedger

    led = DenseLedger()
    led.add(np.arange(3), {"rho": np.ones(3), "eps_a": np.zeros(3)}, {"size": np.ones(3)})
    assert "eps_a" not in led.arrays
    assert led.lookup(np.arange(3), ["eps_a"])["eps_a"].tolist() == [0.0, 0.0, 0.0]
    led.add(np.array([1]), {"rho": np.ones(1), "eps_a": np.array([0.5])},
            {"size": np.array([4.0])})
    assert led.arrays["eps_a"].tolist() == [0.0, 0.5, 0.0]
    assert led.arrays["rho"].tolist() == [1.0, 2.0, 1.0]
    assert led.arrays["size"].tolist() == [1.0, 4.0, 1.0]


def _reference_add(arrays: dict[str, np.ndarray], n: int, ids: np.ndarray,
                   sums: dict[str, np.ndarray], maxes: dict[str, np.ndarray]) -> int:
    """The dense ledger's totals written out plainly.

    Fresh columns ``0.0 + v``, then each addition rounded up (`add_up`) and each maximum, at
    the given row ids.
    """
    from tabdp._numeric import add_up

    if ids.size and int(ids.max()) + 1 > n:
        grow = int(ids.max()) + 1 - n
        for k in arrays:
            arrays[k] = np.concatenate([arrays[k], np.zeros(grow)])
        n += grow
    for k, v in sums.items():
        if k not in arrays and not np.any(v):
            continue
        if k not in arrays:
            arrays[k] = np.zeros(n)
            arrays[k][ids] += v
        elif np.any(v):
            arrays[k][ids] = add_up(arrays[k][ids], v)
    for k, v in maxes.items():
        if k not in arrays:
            arrays[k] = np.zeros(n)
        arrays[k][ids] = np.maximum(arrays[k][ids], v)
    return n


def test_the_dense_ledger_gives_the_plain_totals_and_writes_no_array_it_shares() -> None:
    """The dense ledger gives the plain totals and writes no array it shares (stop 63).

    Releases over every row take the first release's arrays and replace, never write, what
    they share: every total is the plain computation's double, and neither an array a release
    passed in nor a frame the ledger returned changes after a later release.

    Whole-row releases (the in-memory row mode's), partial ones, ids out of order, a twin
    column (ρ_z is ρ), -0.0 and NaN (kept apart: ``0.0 + v`` is not ``v`` there).
    """
    from tabdp.privacy.ledger import DenseLedger

    rng = np.random.default_rng(63)
    n = 50
    led = DenseLedger()
    ref: dict[str, np.ndarray] = {}
    ref_n = 0
    kept: list[tuple[np.ndarray, np.ndarray]] = []   # (array passed or returned, its copy)
    frames: list[tuple[pl.DataFrame, pl.DataFrame]] = []
    for step in range(40):
        kind = step % 5
        ids = (np.arange(n) if kind in (0, 1, 3) else np.sort(rng.choice(n, 20, replace=False))
               if kind == 2 else rng.permutation(n)[:30])
        m = ids.size
        rho = rng.exponential(1.0, m) * (rng.random(m) < 0.8)
        if step == 3:
            rho[5] = -0.0
        if step == 8:
            rho[7] = np.nan
        eps = np.full(m, np.inf) if step % 2 else rng.exponential(2.0, m)
        size = rng.exponential(3.0, m)
        if step == 13:
            size[2] = -0.0
        sums = {"rho": rho, "epsilon": eps, "rho_z": rho, "eps_a": np.zeros(m)}
        maxes = {"size": size}
        for v in (rho, eps, size):
            kept.append((v, v.copy()))
        led.add(ids, sums, maxes)
        ref_n = _reference_add(ref, ref_n, ids, sums, maxes)
        assert led.n == ref_n and set(led.arrays) == set(ref)
        for k, a in ref.items():
            assert led.arrays[k].tobytes() == a.tobytes(), (step, k)
        if step % 7 == 6:
            f = led.frame(n)
            frames.append((f, f.clone()))
            kept.extend((a, a.copy()) for a in led.arrays.values())
    for a, copy in kept:
        assert a.tobytes() == copy.tobytes()
    for f, copy in frames:
        assert f.equals(copy)


def test_a_per_record_report_does_not_change_after_a_later_release() -> None:
    """The report's frame holds the ledger's totals as they were when it was taken.

    Before stop 63 a later release added into the arrays the frame shared (Polars takes
    NumPy's buffers without a copy): a report taken after one count read 0.25 after the next.
    """
    df = pl.DataFrame({"c": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]})
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    s = tabdp.Session(seed=1, streaming=False)
    df.dp.count(by="c", keys=keys, session=s)
    first = s.report().per_record
    df.dp.count(by="c", keys=keys, session=s)
    assert first["rho"].to_list() == [0.125] * 3
    assert s.report().per_record["rho"].to_list() == [0.25] * 3


def test_the_row_snapshot_holds_no_column_of_the_rows_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A row snapshot keeps no per-row column of ones (stop 63): the rows read are its height."""
    from tabdp.frame import _engine as eng

    snaps: list[Any] = []
    take = eng._row_snapshot

    def spied(*a: Any, **k: Any) -> Any:
        snaps.append(take(*a, **k))
        return snaps[-1]

    monkeypatch.setattr(eng, "_row_snapshot", spied)
    df = pl.DataFrame({"c": ["a", "b", "z"], "x": [1.0, 2.0, 3.0]})
    s = tabdp.Session(seed=2, streaming=False)
    df.dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
              mechanism=mech.Gaussian(1.0), session=s)
    assert len(snaps) == 1 and eng._ALL not in snaps[0].data.columns
    assert snaps[0].rows_read == 3


def test_in_memory_releases_follow_records_as_a_streaming_session_does() -> None:
    """In memory, three releases of one frame give the streaming session's tables and report.

    The first release's arrays are taken as the totals and the later ones replace them; the
    second and third see the earlier charges (a budget leaves records out).
    """
    rng = np.random.default_rng(5)
    df = pl.DataFrame({"c": rng.choice(["A", "B", "Z"], 400),
                       "x": rng.lognormal(0.0, 2.0, 400), "y": rng.lognormal(0.0, 1.0, 400)})
    keys = tabdp.KeySet.from_dict(c=["A", "B"])

    def run(streaming: bool) -> list[Any]:
        s = tabdp.Session(seed=11, streaming=streaming, budget=6.0)
        lf = df.lazy()
        g = mech.Gaussian(2.0)
        out = [lf.dp.sum(["x", "y"], by="c", keys=keys, mechanism=g, session=s),
               lf.dp.count(by="c", keys=keys, session=s),
               lf.dp.sum("x", by="c", keys=keys, mechanism=g, session=s)]
        return [*out, s.report().per_record]

    got, want = run(False), run(True)
    for g, w in zip(got, want, strict=True):
        assert g.equals(w)
    rho = got[-1]["rho"].to_numpy()
    assert (rho <= 6.0).all() and (got[-1]["rho_q3_sum"].to_numpy() == 0.0).any()


def test_the_memory_engine_allocates_without_huge_pages_and_restores_numpy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-memory engine's arrays are allocated without huge pages; NumPy's setting returns.

    `small_pages` switches NumPy's advice off while a release aggregates and records (blocks
    nest) and restores the setting when the last block ends; the release is the same either
    way.
    """
    from tabdp import _numeric
    from tabdp.frame.backends import polars as backend

    state = {"hp": True}
    seen: list[bool] = []

    def setter(on: bool) -> bool:
        old, state["hp"] = state["hp"], bool(on)
        return old

    if _numeric.hugepage_setter() is None:
        pytest.skip("this NumPy has no huge-page switch: small_pages does nothing")
    core = np.__dict__.get("_core") or np.core  # NumPy 2, or 1.x
    monkeypatch.setattr(core.multiarray, "_set_madvise_hugepage", setter)
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    df = pl.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]})
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    aggregate = backend.MemoryBackend._aggregate

    def spied(self: Any, rel: Any) -> Any:
        seen.append(state["hp"])
        return aggregate(self, rel)

    monkeypatch.setattr(backend.MemoryBackend, "_aggregate", spied)
    s = tabdp.Session(seed=2, streaming=False)
    got = df.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s)
    assert seen == [False] and state["hp"] is True
    with _numeric.small_pages():
        with _numeric.small_pages():
            assert state["hp"] is False
        assert state["hp"] is False  # the outer block is still open
    assert state["hp"] is True
    # a process started with NUMPY_MADVISE_HUGEPAGE keeps its owner's choice
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    with _numeric.small_pages():
        assert state["hp"] is True
    monkeypatch.undo()
    s2 = tabdp.Session(seed=2, streaming=False)
    assert got.equals(df.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(1.0),
                                session=s2))


@pytest.mark.parametrize("rule", ["nulls", "negatives"])
@pytest.mark.parametrize("unit", [None, "u"], ids=["row-mode", "unit-mode"])
def test_a_sum_of_fewer_measures_keeps_the_rows_the_other_measures_dropped(
        rule: str, unit: str | None) -> None:
    """Review r19: a snapshot cached by a sum of ``[x, y]`` that drops rows is not reused.

    Under ``nulls="drop"`` or ``negatives="drop"`` the rows kept depend on every measure of
    the release: a later sum of ``x`` alone keeps the rows that only ``y`` would drop. Before
    the fix the in-memory engine reused the ``[x, y]`` snapshot (its measures include ``x``)
    and released ``x``'s totals without those rows. The tables, per-record losses and
    confidential counts are those of the sum of ``x`` on a copy of the frame.
    """
    rng = np.random.default_rng(7)
    n = 300
    bad = np.flatnonzero(rng.random(n) < 0.3)
    y = pl.Series("y", rng.lognormal(1.0, 1.0, n))
    y = y.scatter(bad, None) if rule == "nulls" else y.scatter(bad, -1.0)
    df = pl.DataFrame({"u": rng.integers(0, 60, n), "c": rng.choice(["A", "B"], n),
                       "x": rng.lognormal(1.0, 1.0, n), "y": y})
    keys = tabdp.KeySet.from_dict(c=["A", "B"])
    rules = {"nulls": "drop", "negatives": "zero"} if rule == "nulls" else {
        "nulls": "zero", "negatives": "drop"}
    runs = []
    for same in (True, False):
        s = tabdp.Session(seed=5, streaming=False, unit=unit)
        df.dp.sum(["x", "y"], by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s,
                  **rules)
        other = df if same else df.clone()
        out = other.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s,
                           **rules)
        rep = s.report()
        runs.append((out, rep.per_record, rep.confidential_summary()["queries"][1]))
    assert runs[0][0].equals(runs[1][0])
    assert runs[0][1].equals(runs[1][1])
    assert runs[0][2] == runs[1][2]
    assert runs[1][2]["rows_in_released_cells"] == n  # every row released by the sum of x


@pytest.mark.parametrize("unit", [None, "u"], ids=["row-mode", "unit-mode"])
def test_an_input_evaluated_once_for_its_rows_and_their_checks(unit: str | None) -> None:
    """Review r19: the rows released and their counters come from one evaluation of the input.

    The in-memory snapshot collects the rows and the counters (row mode: and fingerprints;
    unit mode: the rows inside and outside the key set) as several queries of one
    ``collect_all``. An input whose rows differ between evaluations (here five rows drawn by an
    unseeded shuffle) was read once per query: a missing value released as 0 under
    ``nulls="error"`` (its counter read other rows), and in unit mode rows counted twice or
    never (5 rows read as 2 to 7). With one evaluation a release either refuses the missing
    value or reads five rows without it.
    """
    df = pl.DataFrame({"u": list(range(10)), "c": ["A"] * 10 if unit is None else
                       ["A"] * 5 + ["B"] * 5, "x": [None] + [1.0] * 9})
    keys = tabdp.KeySet.from_dict(c=["A"])
    seen = set()
    for t in range(60):
        lf = df.lazy().filter(pl.int_range(pl.len()).shuffle() < 5)
        s = tabdp.Session(seed=t, streaming=False, unit=unit)
        try:
            lf.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s,
                      nulls="error", negatives="zero")
        except tabdp.exceptions.DataValidationError:
            seen.add("refused")
            continue
        q = s.report().confidential_summary()["queries"][0]
        seen.add("released")
        assert q["rows_read"] == 5
        if unit is None:  # every row in the released cell, none of them the missing value
            assert q["left_out_by_budget"]["x"]["total"] == 5.0
    assert seen == {"refused", "released"}
@pytest.mark.parametrize("lazy", [True, False])
def test_the_row_snapshot_finds_text_cells_in_its_pass(monkeypatch: pytest.MonkeyPatch,
                                                       lazy: bool) -> None:
    """Row mode: the cells of a cross product of text domains come with the snapshot.

    The snapshot's pass computes each row's cell (`_row_cell_expr`): no release finds them
    again in the collected frame (`_attach_cells`). Tables and reports are those of the path
    that finds them afterwards, the rows outside the key set included.
    """
    from tabdp.frame import _engine as eng

    rng = np.random.default_rng(9)
    df = pl.DataFrame({"c": rng.choice(["A", "B", "Z"], 300),
                       "k": rng.choice(["p", "q"], 300), "x": rng.lognormal(1.0, 1.0, 300)})
    keys = tabdp.KeySet.from_dict(c=["A", "B"], k=["p", "q"])
    attached: list[int] = []
    attach = eng._attach_cells

    def spied(*a: Any, **k: Any) -> Any:
        attached.append(1)
        return attach(*a, **k)

    def run() -> list[Any]:
        s = tabdp.Session(seed=4, streaming=False, budget=30.0)
        frame: Any = df.lazy() if lazy else df
        out = [frame.dp.sum("x", by=["c", "k"], keys=keys, mechanism=mech.Gaussian(3.0),
                            session=s),
               frame.dp.count(by=["c", "k"], keys=keys, session=s)]
        rep = s.report()
        return [*out, rep.per_record, rep.confidential_summary()]

    monkeypatch.setattr(eng, "_attach_cells", spied)
    got = run()
    assert attached == []
    monkeypatch.setattr(eng, "_row_cell_expr", lambda *a: None)
    want = run()
    assert len(attached) == 1  # the sum found them; the count took the sum's
    for g, w in zip(got, want, strict=True):
        assert g.equals(w) if isinstance(g, pl.DataFrame) else g == w


@pytest.mark.parametrize("lazy", [True, False])
def test_the_row_snapshot_keeps_the_keys_of_rows_outside_the_key_set_only(
        monkeypatch: pytest.MonkeyPatch, lazy: bool) -> None:
    """Row mode in memory: a snapshot whose pass finds every row's cell holds no key column.

    The two text key columns of every row were held (16-byte views each) though read only for
    the rows outside the key set (their count of distinct keys) or for another key set. Now
    only the rows outside it keep them (`_Snapshot.strays`); a release with another key set
    of the same frame and grouping takes its own snapshot. Tables, per-record report and
    confidential summary are those of the path that keeps the keys (null keys and keys
    outside the key set included).
    """
    from tabdp.frame import _engine as eng

    rng = np.random.default_rng(11)
    c = rng.choice(["A", "B", "Z"], 400).tolist()
    c[::37] = [None] * len(c[::37])
    df = pl.DataFrame({"c": c, "k": rng.choice(["p", "q", "r"], 400),
                       "x": rng.lognormal(1.0, 1.0, 400)})
    keys = tabdp.KeySet.from_dict(c=["A", "B"], k=["p", "q"])
    other = tabdp.KeySet.from_dict(c=["B", "Z"], k=["q", "r"])
    snaps: list[Any] = []
    take = eng._row_snapshot

    def spied(*a: Any, **k: Any) -> Any:
        snaps.append(take(*a, **k))
        return snaps[-1]

    def run() -> list[Any]:
        s = tabdp.Session(seed=5, streaming=False, budget=40.0)
        frame: Any = df.lazy() if lazy else df
        out = [frame.dp.sum("x", by=["c", "k"], keys=keys, mechanism=mech.Gaussian(3.0),
                            session=s),
               frame.dp.count(by=["c", "k"], keys=keys, session=s),
               frame.dp.count(by=["c", "k"], keys=other, session=s),
               frame.dp.sum("x", by=["c", "k"], keys=keys, mechanism=mech.Gaussian(3.0),
                            session=s)]
        rep = s.report()
        return [*out, rep.per_record, rep.confidential_summary()]

    monkeypatch.setattr(eng, "_row_snapshot", spied)
    got = run()
    # the count of the same key set took the sum's snapshot; the other key set its own
    assert len(snaps) == 3
    outside = df.filter(~(pl.col("c").is_in(["A", "B"]) & pl.col("k").is_in(["p", "q"]))
                        | pl.col("c").is_null())
    for snap in snaps:
        assert not {"c", "k"} & set(snap.data.columns)
        assert snap.strays is not None and snap.data.height == df.height
    assert snaps[0].strays.height == outside.height
    assert set(snaps[0].strays.columns) >= {"c", "k"}
    monkeypatch.setattr(eng, "_row_cell_expr", lambda *a: None)
    snaps.clear()
    want = run()
    assert len(snaps) == 1 and snaps[0].strays is None  # the keys kept: one snapshot
    for g, w in zip(got, want, strict=True):
        assert g.equals(w) if isinstance(g, pl.DataFrame) else g == w


@pytest.mark.parametrize("budget", [None, 0.6])
@pytest.mark.parametrize("cells", [False, True])
def test_a_row_mode_count_charges_every_row_one_value_and_releases_share_the_row_ids(
        monkeypatch: pytest.MonkeyPatch, budget: float | None, cells: bool) -> None:
    """Row mode in memory: a count's per-row losses are one value each, the ids one array.

    Every row of a row-mode count counts one, so its ρ, ε and size are one value for every
    row: they were written as three arrays of every row (and each release converted the row
    ids anew). Now they are read-only views of one value (`_constant_rows`) and the releases
    of one snapshot share its ids (`row_ids`). Tables, per-record report, confidential
    summary and ledger are those of the per-row arrays (a budget that leaves rows out, the
    cell audit, a count first and last, a row dropped outside the key set).
    """
    from tabdp.frame import _engine as eng

    rng = np.random.default_rng(3)
    c = rng.choice(["A", "B", "Z"], 300).tolist()
    c[::41] = [None] * len(c[::41])
    df = pl.DataFrame({"c": c, "x": rng.lognormal(1.0, 1.5, 300)})
    keys = tabdp.KeySet.from_dict(c=["A", "B"])

    def run() -> tuple[list[Any], tabdp.Session]:
        s = tabdp.Session(seed=9, streaming=False, budget=budget, track_cells=cells)
        out = [df.dp.count(by="c", keys=keys, session=s),
               df.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(2.0), session=s),
               df.dp.count(by="c", keys=keys, mechanism=mech.Laplace(3.0), session=s)]
        rep = s.report()
        led = s._ledger.frame(s._ledger.covered)
        return [*out, rep.per_record, rep.confidential_summary(), led], s

    got, s = run()
    n_in = df.filter(pl.col("c").is_in(["A", "B"])).height
    for r in (s.records[0], s.records[2]):  # (the budget left rows out of the last one)
        assert r.losses is not None
        if r is s.records[0] or budget is None:  # every row admitted
            assert r.losses.n == n_in
            for a in (r.losses.rho, r.losses.epsilon, r.losses.size):
                assert a.strides == (0,) and not a.flags.writeable
    if budget is None:  # every row in the key set and admitted: the releases' ids are one array
        one = tabdp.Session(streaming=False, track_cells=cells)
        inside = df.filter(pl.col("c").is_in(["A", "B"]))
        inside.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(2.0), session=one)
        inside.dp.count(by="c", keys=keys, session=one)  # (the sum's snapshot)
        u = [r.losses.units for r in one.records if r.losses is not None]
        assert len(u) == 2 and u[0] is u[1] and u[0].tolist() == list(range(n_in))
    monkeypatch.setattr(eng, "_constant_rows", lambda *a: None)
    monkeypatch.setattr(eng, "row_ids", lambda *a: None)
    want, s2 = run()
    assert s2.records[0].losses is not None
    assert s2.records[0].losses.rho.strides == (8,)
    for g, w in zip(got, want, strict=True):
        assert g.equals(w) if isinstance(g, pl.DataFrame) else g == w


def test_the_row_mode_ledger_is_handed_zero_components_as_views(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Row mode in memory: the loss components a release adds as zeros are not arrays.

    A zCDP release adds zero ``rho_g``, ``eps_a`` and ``delta_a``; they were an array of zeros
    of every row, whose pages the ledger's check for a nonzero value faulted in one by one
    (about 20,000 faults a release at 10M rows). The row ledger reads them only: now a
    read-only view of one 0.0, and the ledger and report are unchanged.
    """
    from tabdp.privacy.ledger import DenseLedger

    seen: list[dict[str, np.ndarray]] = []
    add = DenseLedger.add

    def spy(self: DenseLedger, units: Any, sums: dict[str, np.ndarray],
            maxes: dict[str, np.ndarray]) -> None:
        seen.append(dict(sums))
        add(self, units, sums, maxes)

    monkeypatch.setattr(DenseLedger, "add", spy)
    df = pl.DataFrame({"c": ["a", "b"] * 50, "x": np.linspace(0.0, 9.0, 100)})
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    s = tabdp.Session(seed=1, streaming=False)
    df.dp.sum("x", by="c", keys=keys, mechanism=mech.Laplace(2.0), session=s)
    df.dp.count(by="c", keys=keys, mechanism=mech.Gaussian(2.0), session=s)
    assert len(seen) == 2
    for sums in seen:
        for k in ("eps_a", "delta_a"):
            assert sums[k].strides == (0,) and not sums[k].any()
    assert seen[0]["rho_g"].strides == (0,)  # (zCDP releases: no Gaussian part)
    pr = s.report().per_record
    assert pr["rho"].to_list() == pytest.approx(
        (s.records[0].losses.rho + s.records[1].losses.rho).tolist())
    assert not {"eps_a", "delta_a", "rho_g"} & set(s._ledger.arrays)  # (all zero)


@pytest.mark.parametrize("streaming", [False, True])
def test_the_row_ledger_and_report_work_on_both_threads_gives_the_bytes_of_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path, streaming: bool) -> None:
    """Row mode: the ledger's and report's elementwise work runs on the threads, same bytes.

    In memory, the row ledger's additions over every row (`add_up_fresh`), its checks (a
    nonzero value, increasing ids, a plain first total), the maxima of the sizes, the
    count's constant losses written out for Polars (`dense`) and the row ids' conversion
    ran on the release's one thread, the other core idle (about 0.5 CPU-s at 10M rows). They
    now run by slices on `tabdp._numeric.work_threads` threads (`on_slices`), each slice
    written once: tables, per-record report (file bytes, with and without a δ) and
    confidential summary are those of one thread, seeded, with a budget that leaves rows
    out and without one, rows outside the key set included.
    """
    from tabdp import _numeric
    from tabdp.frame import _engine as eng
    from tabdp.privacy.ledger import DenseLedger

    # slices from 2,048 values (main's code has no SLICE_ROWS: not raised, so it runs there)
    monkeypatch.setattr(_numeric, "SLICE_ROWS", 1024, raising=False)
    monkeypatch.setattr(eng, "POLICY_CHUNK", 1024)
    rng = np.random.default_rng(5)
    n = 6000
    df = pl.DataFrame({"c": rng.choice(["A", "B", "Z"], n).tolist(),
                       "x": rng.lognormal(2.0, 2.0, n), "y": rng.integers(0, 90, n)})
    every = tabdp.KeySet.from_dict(c=["A", "B", "Z"])
    adders: list[int] = []  # the threads of the row ledger's additions
    adding: list[bool] = []
    fresh, add = _numeric._round_up, DenseLedger.add

    def spy(s: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        if adding:
            adders.append(threading.get_ident())
        fresh(s, a, b)

    def ledger_add(self: DenseLedger, *args: Any) -> None:
        adding.append(True)
        try:
            add(self, *args)
        finally:
            adding.clear()

    monkeypatch.setattr(_numeric, "_round_up", spy)
    monkeypatch.setattr(DenseLedger, "add", ledger_add)

    def run(threads: int, budget: float | None, keys: tabdp.KeySet) -> list[Any]:
        monkeypatch.setattr(pl, "thread_pool_size", lambda: threads)
        s = tabdp.Session(seed=4, streaming=streaming, budget=budget)
        lf = df.lazy()
        out = [lf.dp.sum(["x", "y"], by="c", keys=keys, session=s,
                         mechanism=mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)),
               lf.dp.count(by="c", keys=keys, session=s)]
        files = []
        for i, delta in enumerate((None, 1e-9)):
            path = tmp_path / f"{threads}_{budget}_{keys is every}_{i}.parquet"
            rep = s.report(delta=delta)
            rep.write_per_record(str(path))
            files.append(path.read_bytes())
        return [*(as_polars(o).write_ipc(None).getvalue() for o in out), *files,
                s.report().confidential_summary()]

    for budget, keys in [(None, every), (30.0, every),
                         (None, tabdp.KeySet.from_dict(c=["A", "B"]))]:
        one = run(1, budget, keys)
        assert set(adders) <= {threading.get_ident()}
        adders.clear()
        two = run(2, budget, keys)
        assert one == two
        if not streaming and budget is None and keys is every:
            # every row in each release: the totals' additions over every row by slices on
            # the pool's threads, not the release's (a pool may hand both of this test's short
            # slices to one of its threads); streaming: no row ledger, the pass's own threads
            assert len(adders) >= 2 and threading.get_ident() not in adders
        adders.clear()
