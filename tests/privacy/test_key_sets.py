"""Key sets: refusals that come from the public key set and the schema, never from the data.

A key set whose keys collide after conversion to the column's type is refused before any data
is read (every engine and mode); output names that clash with key columns are refused.
"""

from __future__ import annotations

import pathlib
import sys

import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import ColumnTypeError

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import warnings

from _engines import session_state  # noqa: E402

from tabdp.mechanisms import Gaussian

# Two distinct public Int64 keys that are one Float64 (2**53 + 1 rounds to 2**53).
KEYS_53 = tabdp.KeySet.from_dict(k=[2**53, 2**53 + 1])


KEYS_1 = tabdp.KeySet.from_dict(k=[1.0])


def _frame(first_key: float) -> pl.DataFrame:
    return pl.DataFrame({"k": [first_key, 1.0], "x": [1.0, 2.0]})


# origin: review R3
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("mode", ["curator", "author"])
def test_key_set_colliding_after_conversion_is_refused_without_data(streaming: bool,
                                                                    mode: str) -> None:
    """A key set whose distinct keys collide in the comparison dtype cannot place a row twice.

    Float data against Int64 keys is compared in Float64, where 2**53 and 2**53 + 1 are one
    value: the left join with the key set doubled every row whose key is 2**53. Without the fix
    the in-memory ledger charged such a row once (0.5) while it was counted in two cells (true
    loss 1.0: an under-report, a budget of 0.6 admitted it), and the streaming session counted
    the row twice in its rows read, so the *next* release was refused exactly when some record
    had key 2**53 (a noiseless membership oracle in author mode). The key set alone decides now:
    it is refused, on every dataset, before any data is read.
    """
    for first in (2.0**53, 5.0):  # neighbouring datasets: with and without the probed key
        df = _frame(first)
        s = tabdp.Session(seed=1, streaming=streaming, mode=mode,
                          data=df if mode == "author" else None)
        with pytest.raises(ColumnTypeError, match="two keys") as err:
            df.dp.count(by="k", keys=KEYS_53, mechanism=mech.Gaussian(1.0),
                        session=s)
        assert "9007199254740992" not in str(err.value)
        assert s.records == []
        # the session stays usable, and the next release does not depend on the probed key
        out = df.dp.count(by="k", keys=KEYS_1, mechanism=mech.Gaussian(1.0), session=s)
        assert out.columns[0] == "k" and out.height == 1


# origin: review R3
@pytest.mark.spark
def test_spark_key_set_colliding_after_conversion_is_refused(spark: object) -> None:
    """The Spark engine refuses the same key set (its cast to Float64 merges two keys too)."""
    for first in (2.0**53, 5.0):
        sdf = spark.createDataFrame(_frame(first).to_pandas())  # type: ignore[attr-defined]
        s = tabdp.Session(seed=1)
        with pytest.raises(ColumnTypeError, match="two keys"):
            sdf.dp.count(by="k", keys=KEYS_53, mechanism=mech.Gaussian(1.0), session=s)
        assert s.records == []


# Nearly noiseless (sigma=1e-4: its default grid 1e-6 is the finest float64 holds exactly for the
# totals up to 1e6 released below; docs/exact-rounding.md). Estimates are checked to 100 sigma.
TINY = mech.Gaussian(sigma=1e-4)



# -- an output column named like a key column overwrote the key ---------------------------------
@pytest.mark.parametrize("kind,key", [("sum", "x_sd"), ("count", "count"), ("sum", "x_moe")])
def test_output_names_clashing_with_keys_are_refused(kind, key, to_engine):
    df = to_engine(pl.DataFrame({key: ["a", "b"], "x": [1.0, 2.0]}))
    keys = tabdp.KeySet.from_dict({key: ["a", "b"]})
    s = tabdp.Session(seed=0)
    before = session_state(s)
    with pytest.raises(tabdp.InvalidParameterError, match="rename the key"):
        if kind == "sum":
            df.dp.sum("x", by=key, keys=keys, mechanism=TINY, session=s)
        else:
            df.dp.count(by=key, keys=keys, mechanism=TINY, session=s)
    assert session_state(s) == before


# origin: review R16
# -- R16-4 (fixed): a date key column against a key set of text ----------------------------
def test_r16_4_date_keys_against_text_keys_release_on_neighbours() -> None:
    """R16-4 (fixed, low): a Date (or Datetime) key column and a key set of text never released.

    The key join casts the column to text (`formattable` first: review R14) and checked the
    cast by casting the text back to the date type, which Polars 2 no longer does: every
    such release failed after reading the data (the generic `DataFailure`, alike on both
    servers, so no leak; the R14 test took it for a type refusal). A date or time as text is
    exact wherever it can be formatted, so that is now the check. Held: a neighbour with one
    date Polars cannot format (and a zoned millisecond Datetime) gives the same table.
    """
    import datetime as dt

    keys = tabdp.KeySet.from_dict(d=["2020-01-02", "2021-03-04"])
    for far, dtype in ((2**31 - 1, pl.Date), (2**62, pl.Datetime("ms", "Europe/Paris"))):
        near = (pl.Series([dt.date(2020, 1, 2)]).cast(dtype) if dtype == pl.Date else
                pl.Series([dt.datetime(2020, 1, 2)]).cast(pl.Datetime("ms"))
                .dt.replace_time_zone("Europe/Paris"))
        seen = []
        for extra in ([], [far]):
            col = pl.concat([near, pl.Series(extra, dtype=pl.Int64).cast(
                pl.Int32 if dtype == pl.Date else pl.Int64).cast(dtype)]).alias("d")
            frame = pl.DataFrame({"u": range(len(col)), "d": col, "v": [1.0] * len(col)})
            cur = tabdp.Curator(seed=1, budget=10.0)
            cur.add("x", frame, unit="u")
            s = cur.author_session("x")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = s.sum("v", by="d", keys=keys, mechanism=Gaussian(sigma=1.0), nulls="drop",
                          negatives="zero")
            seen.append((t.columns, t.dtypes, t["d"].to_list(), t["v"].to_list()))
        assert seen[0] == seen[1]  # the same seed: the far record is outside, as on D
    assert seen[0][2] == ["2020-01-02", "2021-03-04"]


# -- pandas: a NaN key is pandas' missing value ---------------------------------------------------
# origin: review r77. A pandas input reaches the engine with its float columns' NaN as null (in
# pandas NaN and None are one missing value), so a key set's NaN key (``np.nan`` in
# ``from_dict``) matched no row: the cell was published empty and its rows counted outside the
# key set; a key set with NaN and None published two cells both labelled NaN.
@pytest.mark.parametrize("how", ["dict", "frame"])
def test_pandas_nan_key_matches_the_missing_rows(how: str) -> None:
    import numpy as np
    import pandas as pd

    from tabdp.exceptions import InvalidParameterError

    pdf = pd.DataFrame({"k": [1.0, np.nan, None, 2.0], "x": [1.0, 2.0, 4.0, 8.0]})
    vals = [1.0, 2.0, float("nan")]
    keys = (tabdp.KeySet.from_dict(k=vals) if how == "dict" else tabdp.KeySet.from_frame(
        pl.DataFrame({"k": pl.Series(vals, nan_to_null=False)})))
    s = tabdp.Session(seed=1)
    out = pdf.dp.sum("x", by="k", keys=keys, mechanism=Gaussian(1e-4), session=s)
    med = pdf.dp.median("x", by="k", keys=keys, bounds=(0.0, 10.0), epsilon=1e6, session=s)
    assert out["x"].round(2).tolist() == [1.0, 8.0, 6.0]
    assert med["x_median"].round(2).tolist() == [1.0, 8.0, 2.0]  # the lower median of 2 and 4
    assert pd.isna(out["k"].iloc[2])
    assert [q["rows_outside_keys"] for q in s.report().confidential_summary()["queries"]] == [0, 0]
    both = tabdp.KeySet.from_dict(k=[*vals, None])
    with pytest.raises(InvalidParameterError, match="both NaN and null"):
        pdf.dp.sum("x", by="k", keys=both, mechanism=Gaussian(1e-4), session=s)
    # a Polars input keeps NaN and null apart
    pout = pl.DataFrame({"k": pl.Series([1.0, float("nan"), None, 2.0], nan_to_null=False),
                         "x": [1.0, 2.0, 4.0, 8.0]}).dp.sum(
        "x", by="k", keys=both, mechanism=Gaussian(1e-4), session=tabdp.Session(seed=1))
    assert pout["x"].round(2).to_list() == [1.0, 8.0, 2.0, 4.0]


# origin: review r77: the same for a curator's pandas dataset (read into Polars when added) and
# its author's releases, whose pandas tables kept integer keys beside a null key as float64
def test_pandas_dataset_of_a_curator_nan_key_and_exact_integer_keys() -> None:
    import numpy as np
    import pandas as pd

    pdf = pd.DataFrame({"k": [1.0, np.nan, 2.0], "i": pd.array([2**53 + 1, None, 2**53],
                                                                dtype="Int64"),
                        "x": [1.0, 2.0, 4.0]})
    cur = tabdp.Curator(seed=1)
    cur.add("d", pdf, schema={"k": "Float64", "i": "Int64", "x": "Float64"})
    author = cur.author_session("d")
    out = author.sum("x", by="k", keys=tabdp.KeySet.from_dict(k=[1.0, 2.0, np.nan]),
                     mechanism=Gaussian(1e-4), nulls="zero", negatives="zero")
    assert out["x"].round(2).tolist() == [1.0, 4.0, 2.0]
    med = author.median("x", by="k", keys=tabdp.KeySet.from_dict(k=[1.0, 2.0, np.nan]),
                        bounds=(0.0, 10.0), epsilon=1e6, nulls="zero")
    assert med["x_median"].round(2).tolist() == [1.0, 4.0, 2.0]
    ints = author.count(by="i", keys=tabdp.KeySet.from_dict(i=[2**53 + 1, 2**53, None]))
    assert ints["i"].iloc[:2].tolist() == [2**53 + 1, 2**53] and pd.isna(ints["i"].iloc[2])


# origin: review r80. A pandas nullable (``Float64``) or Arrow-backed float column keeps NaN and
# NA apart, as Polars does (only a NumPy float or object column has NaN as its missing value):
# the r77 fix turned the key set's NaN key into null there too, so the NaN key matched the NA
# rows, the NaN rows were counted outside the key set, and a key set with both was refused.
@pytest.mark.parametrize("dtype", ["Float64", "double[pyarrow]"])
def test_pandas_nullable_float_keeps_nan_and_na_apart(dtype: str) -> None:
    import numpy as np
    import pandas as pd

    col = (pd.arrays.FloatingArray(np.array([1.0, np.nan, 0.0, 2.0]),
                                   np.array([False, False, True, False]))
           if dtype == "Float64" else pd.Series(
               __import__("pyarrow").array([1.0, float("nan"), None, 2.0]), dtype=dtype).array)
    pdf = pd.DataFrame({"k": col, "x": [1.0, 2.0, 4.0, 8.0]})
    assert pd.isna(pdf["k"]).tolist() == [False, False, True, False]  # NaN is a value here
    s = tabdp.Session(seed=1)
    for keys, want in ((tabdp.KeySet.from_dict(k=[1.0, 2.0, float("nan")]), [1.0, 8.0, 2.0]),
                       (tabdp.KeySet.from_dict(k=[1.0, 2.0, None]), [1.0, 8.0, 4.0]),
                       (tabdp.KeySet.from_dict(k=[1.0, 2.0, float("nan"), None]),
                        [1.0, 8.0, 2.0, 4.0])):
        out = pdf.dp.sum("x", by="k", keys=keys, mechanism=Gaussian(1e-4), session=s)
        assert out["x"].round(2).tolist() == want
    outside = [q["rows_outside_keys"] for q in s.report().confidential_summary()["queries"]]
    assert outside == [1, 1, 0]
    # a curator's pandas dataset and its author: the same
    cur = tabdp.Curator(seed=1)
    cur.add("d", pdf, schema={"k": "Float64", "x": "Float64"})
    author = cur.author_session("d")
    got = author.sum("x", by="k", keys=tabdp.KeySet.from_dict(k=[1.0, 2.0, float("nan"), None]),
                     mechanism=Gaussian(1e-4), nulls="zero", negatives="zero")
    assert got["x"].round(2).tolist() == [1.0, 8.0, 2.0, 4.0]


# origin: review rev64b. The published key columns of a pandas input with a nullable or
# Arrow-backed key dtype went through NumPy: a null key made the dtype check fail (``NA == NA``
# is not true), so the column came back as float64 / object, and a float column's NaN key and
# null key were both published as NaN: two cells with one label.
def test_pandas_nullable_float_keys_published_apart_in_the_input_dtype() -> None:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    for col in (pd.arrays.FloatingArray(np.array([1.0, np.nan, 0.0]),
                                        np.array([False, False, True])),
                pd.Series(pa.array([1.0, float("nan"), None]),
                          dtype=pd.ArrowDtype(pa.float64())).array):
        pdf = pd.DataFrame({"k": col, "x": [1.0, 2.0, 4.0]})
        out = pdf.dp.sum("x", by="k", keys=tabdp.KeySet.from_dict(k=[1.0, float("nan"), None]),
                         mechanism=Gaussian(1e-4), session=tabdp.Session(seed=1))
        assert out["k"].dtype == pdf["k"].dtype
        assert out["x"].round(2).tolist() == [1.0, 2.0, 4.0]
        assert pd.isna(out["k"]).tolist() == [False, False, True]  # NaN is a value, NA missing
        assert np.isnan(float(out["k"].iloc[1]))


def test_pandas_bool_key_with_a_null_key_is_nullable_boolean() -> None:
    import numpy as np
    import pandas as pd

    pdf = pd.DataFrame({"k": np.array([True, False]), "x": [1.0, 2.0]})
    out = pdf.dp.sum("x", by="k", keys=tabdp.KeySet.from_dict(k=[True, None, False]),
                     mechanism=Gaussian(1e-4), session=tabdp.Session(seed=1))
    assert out["k"].dtype == pd.BooleanDtype()  # was object, with None
    assert out["k"].iloc[0] and pd.isna(out["k"].iloc[1]) and not out["k"].iloc[2]
    both = pdf.dp.sum("x", by="k", keys=tabdp.KeySet.from_dict(k=[True, False]),
                      mechanism=Gaussian(1e-4), session=tabdp.Session(seed=1))
    assert both["k"].dtype == np.dtype(bool)  # no null key: the input's dtype


@pytest.mark.parametrize(("dtype", "vals"), [("boolean", [True, None]),
                                             ("string[python]", ["a", None]),
                                             ("int64[pyarrow]", [2**53 + 1, None]),
                                             ("string[pyarrow]", ["é", None])])
def test_pandas_nullable_keys_with_a_null_key_keep_the_input_dtype(dtype: str,
                                                                   vals: list) -> None:
    import pandas as pd

    pdf = pd.DataFrame({"k": pd.array(vals, dtype=dtype), "x": [1.0, 2.0]})
    for form in ("wide", "long"):
        out = pdf.dp.sum("x", by="k", keys=tabdp.KeySet.from_dict(k=vals),
                         mechanism=Gaussian(1e-4), session=tabdp.Session(seed=1), form=form)
        assert out["k"].dtype == pdf["k"].dtype
        assert out["k"].iloc[0] == vals[0] and pd.isna(out["k"].iloc[1])


# origin: review rev64b. Key dtypes that Polars cannot convert (text against date keys, a
# timestamp against time keys, ...) failed with Polars' own error after the release began
# reading the data, and ran on an empty frame; text against duration keys failed only when a
# record's key read as a number ("5"), so in author mode whether a release ran (or was the
# DataFailure) told whether such a record existed. Refused from the two dtypes now.
@pytest.mark.parametrize(("data", "key"), [
    (pl.Series(["x", "5"]), [__import__("datetime").timedelta(0)]),
    (pl.Series(["2020-01-01", "x"]), [__import__("datetime").date(2020, 1, 1)]),
    (pl.Series([__import__("datetime").datetime(2020, 1, 1, 1)]), [__import__("datetime").time(1)]),
    (pl.Series([True, False]), [__import__("datetime").date(2020, 1, 1)]),
])
def test_key_dtypes_polars_cannot_convert_are_refused_whatever_the_data(data, key) -> None:
    keys = tabdp.KeySet.from_dict(k=key)
    for frame in (pl.DataFrame({"k": data, "x": [1.0] * len(data)}),
                  pl.DataFrame({"k": data.clear(), "x": pl.Series([], dtype=pl.Float64)})):
        for f in (frame, frame.lazy()):
            with pytest.raises(ColumnTypeError, match="cannot compare"):
                f.dp.sum("x", by="k", keys=keys, mechanism=Gaussian(1.0),
                         session=tabdp.Session(seed=1))
    # the author of a curator's dataset: refused from the dtypes, never a DataFailure
    for vals in (["x", "y"], ["x", "5"]):
        if data.dtype != pl.String:
            break
        cur = tabdp.Curator(seed=1)
        cur.add("d", pl.DataFrame({"k": vals, "x": [1.0, 2.0]}),
                schema={"k": "String", "x": "Float64"})
        with pytest.raises(ColumnTypeError, match="cannot compare"):
            cur.author_session("d").sum("x", by="k", keys=keys, mechanism=Gaussian(1.0),
                                        nulls="zero", negatives="zero")


# origin: review rev64b. Bytes against text keys were compared as text: a record's bytes that
# are not UTF-8 made Polars' cast fail, so the release failed (in author mode: the
# DataFailure) because of one record. They are compared as bytes now.
def test_binary_keys_against_text_keys_compare_as_bytes() -> None:
    df = pl.DataFrame({"k": pl.Series([b"a", b"\xff", b"b", "é".encode()], dtype=pl.Binary),
                       "x": [1.0, 2.0, 4.0, 8.0]})
    keys = tabdp.KeySet.from_dict(k=["a", "b", "é", "z"])
    for f in (df, df.lazy(), df.to_pandas()):
        s = tabdp.Session(seed=1)
        out = f.dp.sum("x", by="k", keys=keys, mechanism=Gaussian(1e-4), session=s)
        out = out if isinstance(out, pl.DataFrame) else pl.from_pandas(out)
        assert out["x"].round(2).to_list() == [1.0, 4.0, 8.0, 0.0]
        assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 1


# origin: review rev64r. The probe of rev64b had no value of a nested dtype: list keys of text
# against list-of-date keys ran when every record's list was null and failed with Polars' own
# error when one record held a value, so whether the release ran told whether such a record
# existed. A list (struct) of one probe value is converted now: refused from the dtypes.
@pytest.mark.parametrize("data", [
    pl.Series([None, None], dtype=pl.List(pl.String)),
    pl.Series([["2020-01-01"], None], dtype=pl.List(pl.String)),
    pl.Series([{"d": None}, None], dtype=pl.Struct({"d": pl.String})),
    pl.Series([{"d": "2020-01-01"}, None], dtype=pl.Struct({"d": pl.String})),
])
def test_nested_key_dtypes_polars_cannot_convert_are_refused_whatever_the_data(data) -> None:
    import datetime as dt

    day = dt.date(2020, 1, 1)
    want = ([[day]], pl.List(pl.Date)) if isinstance(data.dtype, pl.List) else \
        ([{"d": day}], pl.Struct({"d": pl.Date}))
    keys = tabdp.KeySet(pl.DataFrame({"k": pl.Series(want[0], dtype=want[1])}))
    df = pl.DataFrame({"k": data, "x": [1.0, 2.0]})
    with pytest.raises(ColumnTypeError, match="cannot compare"):
        df.dp.sum("x", by="k", keys=keys, mechanism=Gaussian(1.0), nulls="zero",
                  negatives="zero", session=tabdp.Session(seed=1))


def test_nested_keys_that_convert_still_match() -> None:
    import datetime as dt

    keys = tabdp.KeySet(pl.DataFrame({"k": pl.Series([[dt.date(2020, 1, 1)]],
                                                     dtype=pl.List(pl.Date))}))
    df = pl.DataFrame({"k": pl.Series([[dt.datetime(2020, 1, 1)], None],
                                      dtype=pl.List(pl.Datetime("ms"))), "x": [1.0, 2.0]})
    out = df.dp.sum("x", by="k", keys=keys, mechanism=Gaussian(1e-4), nulls="zero",
                    negatives="zero", session=tabdp.Session(seed=1))
    assert out["x"].round(2).to_list() == [1.0]


# origin: stop 64. The probe of rev64r built no value of a multi-dimensional Array (an Array
# of Array): text against date keys in 2 x 2 arrays ran on an empty frame (or one whose
# arrays were all null) and failed with Polars' own error once a record held a value, so
# whether the release ran told whether such a record existed. The probe is built at every
# level of nesting now: refused from the dtypes.
@pytest.mark.parametrize("data", [
    pl.Series([], dtype=pl.Array(pl.String, (2, 2))),
    pl.Series([None, None], dtype=pl.Array(pl.String, (2, 2))),
    pl.Series([[["2020-01-01", "x"], ["2020-01-02", "2020-01-03"]], None],
              dtype=pl.Array(pl.String, (2, 2))),
])
def test_multi_dimensional_array_keys_polars_cannot_convert_are_refused(data) -> None:
    import datetime as dt

    day = dt.date(2020, 1, 1)
    keys = tabdp.KeySet(pl.DataFrame({"k": pl.Series([[[day, day], [day, day]]],
                                                     dtype=pl.Array(pl.Date, (2, 2)))}))
    df = pl.DataFrame({"k": data, "x": pl.Series([1.0, 2.0][:len(data)], dtype=pl.Float64)})
    for f in (df, df.lazy()):
        with pytest.raises(ColumnTypeError, match="cannot compare"):
            f.dp.sum("x", by="k", keys=keys, mechanism=Gaussian(1.0), nulls="zero",
                      negatives="zero", session=tabdp.Session(seed=1))


def test_multi_dimensional_array_keys_that_convert_still_match() -> None:
    import datetime as dt

    day, other = dt.date(2020, 1, 1), dt.date(2020, 1, 2)
    keys = tabdp.KeySet(pl.DataFrame({"k": pl.Series([[[day], [other]], [[other], [day]]],
                                                     dtype=pl.Array(pl.Date, (2, 1)))}))
    at = [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2)]
    df = pl.DataFrame({"k": pl.Series([[[at[0]], [at[1]]], [[at[1]], [at[0]]], None],
                                      dtype=pl.Array(pl.Datetime("ms"), (2, 1))),
                       "x": [1.0, 2.0, 4.0]})
    out = df.dp.sum("x", by="k", keys=keys, mechanism=Gaussian(1e-4), nulls="zero",
                    negatives="zero", session=tabdp.Session(seed=1))
    assert out["x"].round(2).to_list() == [1.0, 2.0]
