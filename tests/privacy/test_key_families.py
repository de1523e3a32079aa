"""Key dtypes of different kinds (numbers, dates, durations, Booleans) are never compared.

Origin: stop 64. The cell matching converted the data's keys to the key set's dtype whenever
Polars could: integer data against date keys compared day numbers (the key 1970-01-02 matched
the data value 1), against duration keys microseconds, Boolean data against integer keys
matched ``True`` to ``1``, and dates against integer keys the other way round. Such releases
ran silently and published wrong cells. The pairing is refused now from the two dtypes alone
(never from the values), on every engine, before any data is read.
"""

from __future__ import annotations

import datetime as dt
import pathlib
import re

import pandas as pd
import polars as pl
import pytest
from _specs import release_spec, table

import tabdp
from tabdp.exceptions import ColumnTypeError
from tabdp.frame.keys import common_dtype
from tabdp.mechanisms import Gaussian

TINY = Gaussian(1e-4)  # nearly noiseless: estimates are checked to a few hundred sigma

# (data column, key set's values): each pair converts in Polars and matched rows before
REFUSED = {
    "int-date": (pl.Series([1, 5], dtype=pl.Int64), [dt.date(1970, 1, 2)]),
    "int-datetime": (pl.Series([1, 5], dtype=pl.Int32), [dt.datetime(1970, 1, 1, 0, 0, 0, 1)]),
    "int-duration": (pl.Series([1, 5], dtype=pl.Int64), [dt.timedelta(microseconds=1)]),
    "int-time": (pl.Series([1000, 5], dtype=pl.Int64), [dt.time(0, 0, 0, 1)]),
    "uint-date": (pl.Series([1, 5], dtype=pl.UInt8), [dt.date(1970, 1, 2)]),
    "float-date": (pl.Series([1.0, 5.0]), [dt.date(1970, 1, 2)]),
    "int-boolean": (pl.Series([1, 5], dtype=pl.Int64), [True]),
    "float-boolean": (pl.Series([1.0, 5.0]), [True]),
    "boolean-int": (pl.Series([True, False]), [1]),
    "boolean-float": (pl.Series([True, False]), [1.0]),
    "date-int": (pl.Series([dt.date(1970, 1, 2), dt.date(2020, 1, 1)]), [1]),
    "datetime-int": (pl.Series([dt.datetime(1970, 1, 1, 0, 0, 0, 1)]), [1]),
    "duration-int": (pl.Series([dt.timedelta(microseconds=1)]), [1]),
    "time-float": (pl.Series([dt.time(0, 0, 0, 1)]), [1000.0]),
}


def _frame(data: pl.Series) -> pl.DataFrame:
    return pl.DataFrame({"k": data, "x": [1.0] * len(data)})


@pytest.mark.parametrize("pair", list(REFUSED))
def test_keys_of_another_kind_are_refused_from_the_dtypes(pair: str) -> None:
    data, key = REFUSED[pair]
    keys = tabdp.KeySet.from_dict(k=key)
    want = keys.to_polars().schema["k"]
    full, empty = _frame(data), _frame(data).clear()
    frames: list[object] = [full, full.lazy(), empty, empty.lazy()]
    if data.dtype != pl.UInt8:  # pandas has no Polars-only dtypes to lose here
        frames.append(full.to_pandas())
    for frame in frames:
        s = tabdp.Session(seed=1)
        with pytest.raises(ColumnTypeError, match="cannot compare") as err:
            frame.dp.sum("x", by="k", keys=keys, mechanism=TINY, session=s)  # type: ignore[attr-defined]
        msg = str(err.value)
        # both dtypes, what is allowed and the fix; no key value of the data
        assert str(want).split("(")[0] in msg and "Hint:" in msg and "cast" in msg
        assert "same kind" in msg
        assert s.records == []


def test_the_rule_is_decided_once_above_the_engines() -> None:
    """`common_dtype` (the Polars and Spark engines' shared rule) refuses the pairs itself."""
    for data, key in REFUSED.values():
        want = tabdp.KeySet.from_dict(k=key).to_polars().schema["k"]
        with pytest.raises(ColumnTypeError, match=re.escape(str(data.dtype))):
            common_dtype("k", data.dtype, want)


@pytest.mark.parametrize(("data", "key", "dtype"), [
    (pl.Series([1, 5], dtype=pl.Int32), [1, 2], pl.Int64),  # integers of any width
    (pl.Series([1, 5], dtype=pl.UInt16), [1, 2], pl.Int64),
    (pl.Series([1, 5], dtype=pl.Int64), [1.0, 2.0], pl.Float64),  # integers and floats
    (pl.Series([1.0, 5.0]), [1, 2], pl.Int64),
    (pl.Series(["a", "e"], dtype=pl.Categorical), ["a", "b"], pl.String),
    (pl.Series([dt.date(2020, 1, 1), dt.date(2020, 1, 5)]),
     [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2)], pl.Datetime),  # dates and datetimes
    (pl.Series([dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 5)]),
     [dt.date(2020, 1, 1), dt.date(2020, 1, 2)], pl.Date),
    (pl.Series([dt.timedelta(1), dt.timedelta(5)], dtype=pl.Duration("ms")),
     [dt.timedelta(1), dt.timedelta(2)], pl.Duration),  # durations of any unit
    (pl.Series([True, None]), [True, False], pl.Boolean),  # a null key: outside
])
def test_keys_of_the_same_kind_still_match(data: pl.Series, key: list, dtype: object) -> None:
    keys = tabdp.KeySet.from_dict(k=key)
    assert isinstance(keys.to_polars().schema["k"], dtype)  # type: ignore[arg-type]
    df = _frame(data).with_columns(x=pl.Series([2.0, 3.0]))
    for frame in (df, df.lazy(), df.to_pandas()):
        s = tabdp.Session(seed=1)
        out = frame.dp.sum("x", by="k", keys=keys, mechanism=TINY, session=s)  # type: ignore[attr-defined]
        got = (pl.from_pandas(out) if isinstance(out, pd.DataFrame) else out)["x"]
        assert [round(v, 2) for v in got.to_list()] == [2.0, 0.0]
        assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 1


# nested keys (list, array, struct) of another kind inside: Polars converted them as it did
# the scalars (review rev65w: the key [1970-01-02] took the rows holding [1], published there)
NESTED_REFUSED = {
    "list int-date": (pl.Series([[1], [5]]), pl.Series([[dt.date(1970, 1, 2)]])),
    "array int-date": (pl.Series([[1], [5]], dtype=pl.Array(pl.Int64, 1)),
                       pl.Series([[dt.date(1970, 1, 2)]], dtype=pl.Array(pl.Date, 1))),
    "struct int-date": (pl.Series([{"a": 1}, {"a": 5}]),
                        pl.Series([{"a": dt.date(1970, 1, 2)}])),
    "list of struct int-duration": (pl.Series([[{"a": 1}], [{"a": 5}]]),
                                    pl.Series([[{"a": dt.timedelta(microseconds=1)}]])),
    "list bool-int": (pl.Series([[True], [False]]), pl.Series([[1]])),
    "list int-text": (pl.Series([[1], [5]]), pl.Series([["1"]])),
}


@pytest.mark.parametrize("pair", list(NESTED_REFUSED))
def test_nested_keys_of_another_kind_inside_are_refused(pair: str) -> None:
    data, key = NESTED_REFUSED[pair]
    keys = tabdp.KeySet(pl.DataFrame({"k": key}))
    for frame in (_frame(data), _frame(data).clear()):
        s = tabdp.Session(seed=1)
        with pytest.raises(ColumnTypeError, match="values inside") as err:
            frame.dp.count(by="k", keys=keys, session=s)
        assert str(data.dtype) in str(err.value) and "Hint:" in str(err.value)
        assert s.records == []


@pytest.mark.parametrize(("data", "key"), [
    (pl.Series([[1], [5]], dtype=pl.List(pl.Int32)), pl.Series([[1], [2]])),
    (pl.Series([[1.0], [5.0]]), pl.Series([[1], [2]])),
    (pl.Series([["a"], ["e"]], dtype=pl.List(pl.Categorical)), pl.Series([["a"], ["b"]])),
    (pl.Series([{"a": dt.date(2020, 1, 1)}, {"a": dt.date(2020, 1, 5)}]),
     pl.Series([{"a": dt.datetime(2020, 1, 1)}, {"a": dt.datetime(2020, 1, 2)}])),
])
def test_nested_keys_of_the_same_kind_still_match(data: pl.Series, key: pl.Series) -> None:
    keys = tabdp.KeySet(pl.DataFrame({"k": key}))
    s = tabdp.Session(seed=1)
    _frame(data).with_columns(x=pl.Series([2.0, 3.0])).dp.sum(  # type: ignore[attr-defined]
        "x", by="k", keys=keys, mechanism=TINY, session=s)
    assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 1


# a nested key column against scalar keys, or the reverse (review keys65b): Polars converts a
# one-field struct to its field's type and any struct to text, and an integer to a struct, so
# a struct column against the keys [1] failed in the join (SchemaError, a panic on the
# streaming engine) once the data had a row and ran on an empty frame: whether the release ran
# told whether the data had rows. Against the text keys ['{1}'] it ran, every row outside.
NESTED_SCALAR = {
    "struct-int": (pl.Series([{"a": 1}, {"a": 5}]), pl.Series([1])),
    "struct-text": (pl.Series([{"a": 1}, {"a": 5}]), pl.Series(["{1}"])),
    "struct-float": (pl.Series([{"a": 1.0}, {"a": 5.0}]), pl.Series([1.0])),
    "struct of text-text": (pl.Series([{"a": "x"}, {"a": "y"}]), pl.Series(["x"])),
    "int-struct": (pl.Series([1, 5]), pl.Series([{"a": 1}])),
    "text-struct": (pl.Series(["{1}", "x"]), pl.Series([{"a": 1}])),
    "list-int": (pl.Series([[1], [5]]), pl.Series([1])),
    "array-text": (pl.Series([[1], [5]], dtype=pl.Array(pl.Int64, 1)), pl.Series(["[1]"])),
    "int-list": (pl.Series([1, 5]), pl.Series([[1]])),
}


@pytest.mark.parametrize("pair", list(NESTED_SCALAR))
def test_nested_keys_against_scalars_are_refused_from_the_dtypes(pair: str) -> None:
    """The same ColumnTypeError on every path, with rows or without, before any data is read."""
    data, key = NESTED_SCALAR[pair]
    keys = tabdp.KeySet(pl.DataFrame({"k": key}))
    full, empty = _frame(data), _frame(data).clear()
    runs: list[tuple[object, bool]] = [(f, streaming) for f in (full, empty, full.lazy(),
                                                                empty.lazy())
                                       for streaming in (False, True)]
    runs.append((full.to_pandas(), False))
    for frame, streaming in runs:
        s = tabdp.Session(seed=1, streaming=streaming)
        with pytest.raises(ColumnTypeError, match="cannot compare the two") as err:
            frame.dp.sum("x", by="k", keys=keys, mechanism=TINY, session=s)  # type: ignore[attr-defined]
        msg = str(err.value)
        assert "several values" in msg and "Hint:" in msg
        assert str(key.dtype) in msg
        assert s.records == []


def test_nested_keys_against_scalars_inside_are_refused() -> None:
    """A struct inside a list against integers inside a list: the rule applies inside too."""
    data = pl.Series([[{"a": 1}], [{"a": 5}]])
    keys = tabdp.KeySet(pl.DataFrame({"k": pl.Series([[1]])}))
    for frame in (_frame(data), _frame(data).clear()):
        s = tabdp.Session(seed=1)
        with pytest.raises(ColumnTypeError, match="values inside.*several values"):
            frame.dp.count(by="k", keys=keys, session=s)
        assert s.records == []


def test_a_null_key_set_still_goes_with_nested_data() -> None:
    """A key set of nulls only is no scalar against a struct: its null key matches null rows."""
    data = pl.Series([{"a": 1}, None, {"a": 5}])
    keys = tabdp.KeySet(pl.DataFrame({"k": pl.Series([None])}))
    df = pl.DataFrame({"k": data, "x": [2.0, 3.0, 4.0]})
    for frame, want in ((df, 3.0), (df.lazy(), 3.0), (df.clear(), 0.0)):
        s = tabdp.Session(seed=1)
        out = frame.dp.sum("x", by="k", keys=keys, mechanism=TINY, session=s)  # type: ignore[attr-defined]
        assert [round(v, 2) for v in out["x"].to_list()] == [want]


@pytest.mark.spark
def test_spark_refuses_keys_of_another_kind(spark: object) -> None:
    """The Spark engine's own key comparison takes the same rule (`common_dtype`).

    Before: integer data against date keys failed in Spark's analysis (not a ColumnTypeError),
    an interval column against integer keys matched its seconds (the key 1 took the rows of one
    second), and a ``timestamp_ntz`` column against integer keys failed in Spark's analysis.
    """
    sql = spark.sql  # type: ignore[attr-defined]
    ints = sql("select 1L as k, 1.0d as x union all select 5L, 1.0d")
    intervals = sql("select make_dt_interval(0, 0, 0, 1) as k, 1.0d as x")
    stamps = sql("select timestamp_ntz'1970-01-01 00:00:01' as k, 1.0d as x")
    for sdf, key in ((ints, [dt.date(1970, 1, 2)]), (ints, [True]), (intervals, [1]),
                     (stamps, [1_000_000])):
        s = tabdp.Session(seed=1)
        with pytest.raises(ColumnTypeError, match="cannot compare"):
            sdf.dp.sum("x", by="k", keys=tabdp.KeySet.from_dict(k=key), mechanism=TINY,
                       session=s)
        assert s.records == []


# Spark's nested key columns against nested key sets of another kind inside: (data as Spark
# SQL, the Polars dtype the data is matched as, the key set's values). Before (review nest65)
# the kind check saw ``List(Null)`` / an empty ``Struct`` and paired nothing: every one was
# refused only as a key dtype Spark cannot hold, not by the kinds rule Polars applies.
_INTS = "select {} as k, 1.0d as x union all select {}, 1.0d"
SPARK_NESTED_REFUSED = {
    "array int-date": (_INTS.format("array(1L)", "array(5L)"), "List(Int64)",
                       pl.Series([[dt.date(1970, 1, 2)]])),
    "struct int-date": (_INTS.format("named_struct('a', 1L)", "named_struct('a', 5L)"),
                        "Struct({'a': Int64})", pl.Series([{"a": dt.date(1970, 1, 2)}])),
    "array bool-int": (_INTS.format("array(true)", "array(false)"), "List(Boolean)",
                       pl.Series([[1]])),
    "array int-text": (_INTS.format("array(1L)", "array(5L)"), "List(Int64)",
                       pl.Series([["1"]])),
    "array of struct int-duration": (
        _INTS.format("array(named_struct('a', 1L))", "array(named_struct('a', 5L))"),
        "List(Struct({'a': Int64}))", pl.Series([[{"a": dt.timedelta(microseconds=1)}]])),
    "array date-int": (_INTS.format("array(date'1970-01-02')", "array(date'2020-01-01')"),
                       "List(Date)", pl.Series([[1]])),
    "map int-date": (_INTS.format("map(1L, 1L)", "map(5L, 5L)"),
                     "List(Struct({'key': Int64, 'value': Int64}))",
                     pl.Series([[{"key": dt.date(1970, 1, 2), "value": 1}]])),
}


@pytest.mark.spark
@pytest.mark.parametrize("pair", list(SPARK_NESTED_REFUSED))
def test_spark_refuses_nested_keys_of_another_kind_inside(spark: object, pair: str) -> None:
    """Spark's arrays, structs and maps take the kinds rule inside, with Polars' message."""
    query, shown, key = SPARK_NESTED_REFUSED[pair]
    sdf = spark.sql(query)  # type: ignore[attr-defined]
    keys = tabdp.KeySet(pl.DataFrame({"k": key}))
    for frame in (sdf, sdf.limit(0)):  # from the schema alone: an empty frame too
        s = tabdp.Session(seed=1)
        with pytest.raises(ColumnTypeError, match="values inside") as err:
            frame.dp.sum("x", by="k", keys=keys, mechanism=TINY, session=s)
        assert shown in str(err.value) and "Hint:" in str(err.value)
        assert s.records == []


@pytest.mark.spark
@pytest.mark.parametrize(("data", "key", "message"), [
    # the control: keys of the same kind inside are refused as nested keys Spark cannot hold
    ("array(1L)", pl.Series([[1]]), "not supported on Spark frames"),
    ("named_struct('a', 1)", pl.Series([{"a": 1}]), "not supported on Spark frames"),
    # a nested column against scalar keys: Spark's analysis failed (AnalysisException)
    ("array(1L)", pl.Series([1]), "cannot compare the two"),
    ("array(1L)", pl.Series([dt.date(1970, 1, 2)]), "cannot compare the two"),
    ("named_struct('a', 1L)", pl.Series([1]), "cannot compare the two"),
    ("named_struct('a', 1L)", pl.Series(["{1}"]), "cannot compare the two"),
    ("map(1L, 1L)", pl.Series([1]), "cannot compare the two"),
    ("1L", pl.Series([[1]]), "cannot compare the two"),
])
def test_spark_refuses_nested_keys_against_scalars_from_the_schema(
        spark: object, data: str, key: pl.Series, message: str) -> None:
    """A nested key column against scalar keys (or the reverse): a ColumnTypeError, no data read."""
    sdf = spark.sql(f"select {data} as k, 1.0d as x")  # type: ignore[attr-defined]
    keys = tabdp.KeySet(pl.DataFrame({"k": key}))
    for frame in (sdf, sdf.limit(0)):
        s = tabdp.Session(seed=1)
        with pytest.raises(ColumnTypeError, match=message) as err:
            frame.dp.sum("x", by="k", keys=keys, mechanism=TINY, session=s)
        assert "Hint:" in str(err.value)
        assert s.records == []


@pytest.mark.parametrize(("have", "domain", "refused"), [
    (pl.Int64, [True, False], True),  # Boolean domain, integer column
    (pl.Boolean, [0, 1], True),  # integer domain, Boolean column
    (pl.Int32, [2023, 2024], False),  # integers of another width: allowed
    (pl.Boolean, [True, False], False),
])
def test_a_spec_domain_of_another_kind_is_refused_before_any_data(
        tmp_path: pathlib.Path, have: object, domain: list[object], refused: bool) -> None:
    """A spec's domains (curator mode) go through the same rule, from the input's schema."""
    from tabdp.exceptions import SpecError
    from tabdp.release.input_schema import check_input_schema
    from tabdp.release.spec import load_spec

    spec = tmp_path / "s.toml"
    spec.write_text(release_spec(
        table("n", ["k"], '{ family = "gaussian", sigma = 1.0 }', kind="count"),
        name="kinds", path=(tmp_path / "d.parquet").as_posix(), input_extra='unit = "id"',
        domains={"k": domain}, public=(tmp_path / "pub").as_posix(),
        confidential=(tmp_path / "conf").as_posix()))
    schema = {"id": pl.Int64, "k": have}
    if not refused:
        check_input_schema(load_spec(spec), schema, source="the input")
        return
    with pytest.raises(SpecError, match="cannot compare") as err:
        check_input_schema(load_spec(spec), schema, source="the input")
    assert err.value.path == "tables[0].by[0]"
