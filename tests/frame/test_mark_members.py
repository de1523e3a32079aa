"""A direct rollup's population is exactly the rows its table puts in a cell.

`mark_members` (both engines) marks the rows of a table's population for its direct
releases. It is the engines' own cell matching, so for every pair of key dtypes (the data's
and the key set's) a row is marked exactly when a release by the key set counts it: checked
here against an actual count release (no noise: a huge-ρ count is rounded to the exact
count, so each cell's released value is its number of rows) on awkward keys: integers that do
not convert exactly to the other type, text against categoricals, nulls, dates.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tabdp
from tabdp.frame.backends.polars import mark_members

D = dt.date

# (data column, key set column): each pair has rows in, out of, and not convertible to keys
CASES: dict[str, tuple[pl.Series, pl.Series]] = {
    "int32-vs-int64": (pl.Series("k", [1, 2, 3, None, 7], dtype=pl.Int32),
                       pl.Series("k", [1, 3, 2**40, None], dtype=pl.Int64)),
    "int64-vs-float64": (pl.Series("k", [2**53, 2**53 + 1, 4, 5, None], dtype=pl.Int64),
                         pl.Series("k", [2.0**53, 4.0, 4.5], dtype=pl.Float64)),
    "float64-vs-int64": (pl.Series("k", [1.0, 1.5, 2.0, float("nan"), None]),
                         pl.Series("k", [1, 2, 3], dtype=pl.Int64)),
    "categorical-vs-string": (pl.Series("k", ["a", "b", "c", None, "a"], dtype=pl.Categorical),
                              pl.Series("k", ["a", "c", "z"], dtype=pl.String)),
    "string-vs-enum": (pl.Series("k", ["x", "y", None, "w"]),
                       pl.Series("k", ["x", "w"], dtype=pl.Enum(["x", "w"]))),
    "date-vs-date": (pl.Series("k", [D(2024, 1, 1), D(2024, 1, 2), None]),
                     pl.Series("k", [D(2024, 1, 2)])),
    "bool-vs-bool": (pl.Series("k", [True, False, None, True]),
                     pl.Series("k", [True, None], dtype=pl.Boolean)),
}


def _frames(case: str) -> tuple[pl.DataFrame, tabdp.KeySet]:
    data, keys = CASES[case]
    frame = pl.DataFrame({"k": data, "g": ["a", "b"] * (len(data) // 2) + ["a"] * (len(data) % 2)})
    return frame, tabdp.KeySet.from_frame(pl.DataFrame({"k": keys}))


def _counted(frame: pl.DataFrame, keys: tabdp.KeySet) -> int:
    """Rows a count release by ``keys`` puts in its cells (exact: no noise at this ρ)."""
    s = tabdp.Session(seed=1)
    out = frame.dp.count(by="k", keys=keys, mechanism=tabdp.mechanisms.Gaussian(1e-9),
                         session=s)
    return int(pl.DataFrame(out)["count"].sum())


@pytest.mark.parametrize("case", sorted(CASES))
def test_members_are_the_rows_a_release_counts(case: str) -> None:
    frame, keys = _frames(case)
    marked = mark_members(frame.lazy(), keys, "m").collect()
    assert marked.columns == [*frame.columns, "m"]  # the input's columns kept, in order
    assert marked.drop("m").equals(frame)  # ... and its rows, in order
    assert set(marked["m"].drop_nulls().to_list()) <= {"all"}
    assert marked["m"].is_not_null().sum() == _counted(frame, keys)


def test_members_replace_an_existing_column_and_refuse_text_against_numbers() -> None:
    frame = pl.DataFrame({"k": [1, 2], "m": ["x", "y"]})
    got = mark_members(frame.lazy(), tabdp.KeySet.from_dict(k=[2]), "m").collect()
    assert got["m"].to_list() == [None, "all"]
    with pytest.raises(tabdp.exceptions.ColumnTypeError):
        mark_members(frame.lazy(), tabdp.KeySet.from_dict(k=["2"]), "m").collect()


@pytest.mark.spark
@pytest.mark.parametrize("case", sorted(c for c in CASES if "categorical" not in c
                                        and "enum" not in c))
def test_spark_marks_the_rows_polars_marks(spark: Any, case: str, tmp_path: Path) -> None:
    """The Spark twin marks the same rows, in its own cell matching.

    The data is read from Parquet, as a run reads it: the data's dtypes kept.
    """
    from tabdp.frame.backends.spark import mark_members as spark_members

    frame, keys = _frames(case)
    want = mark_members(frame.lazy(), keys, "m").collect()["m"].to_list()
    frame.with_row_index("i").with_columns(pl.col("i").cast(pl.Int64)).write_parquet(
        tmp_path / "d.parquet")
    sdf = spark.read.parquet(str(tmp_path / "d.parquet"))
    got = spark_members(spark, sdf, keys, "m").orderBy("i").select("m").collect()
    assert [r["m"] for r in got] == want
