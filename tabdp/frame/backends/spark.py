"""The Spark backend of the release pipeline, and the Spark helpers other layers use.

The backend (`SparkBackend`) and the Spark engine's steps live in `tabdp.frame._spark`; this is
their public home for the rest of tabdp (the release workflow's Spark input and output,
`tabdp.release`; the curator's declared schemas): importing it does not import PySpark.

Example:
    >>> from tabdp.frame.backends.spark import SparkBackend
    >>> SparkBackend(None, {}).engine
    'spark'
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tabdp._reserved import RESERVED
from tabdp.frame._engine import _CELL
from tabdp.frame._spark import (
    SparkBackend,
    SparkReplayLedger,
    SparkUnitLedger,
    _attach_cells,
    _local_frame,
    _pl_dtype,
    _to_polars,
    case_clashes,
    fold_case,
    free_checkpoint,
    polars_schema,
    quiet,
    row_ids,
    spark_grouped_release,
    spark_quantile_release,
    spark_type,
    try_cast,
    unknown_letters,
    write_single_parquet,
)
from tabdp.frame.keys import KeySet

__all__ = ["SparkBackend", "SparkReplayLedger", "SparkUnitLedger", "spark_grouped_release",
           "spark_quantile_release", "polars_schema", "quiet", "row_ids", "free_checkpoint",
           "spark_type", "try_cast", "write_single_parquet", "to_polars", "report_view",
           "REPORT_UNITS", "RESERVED", "mark_members", "local_frame", "polars_dtype",
           "case_clashes", "fold_case", "unknown_letters"]

#: Most per-record rows the driver receives to render ``confidential_report.html`` (the units
#: with the largest ρ); ``per_record_losses.parquet`` always holds every unit.
REPORT_UNITS = 10_000


def to_polars(sdf: Any) -> pl.DataFrame:
    """A small Spark DataFrame (a released table: at most the key set) as a Polars frame.

    A ``timestamp`` column is a ``Datetime`` without a zone (its UTC wall time), the dtype
    the Spark engine checks it as and the Polars engine publishes for the same data (Arrow
    gave it a UTC zone; stop 63); a ``timestamp_ntz`` one is its wall time already. Without
    ``DataFrame.toArrow`` (PySpark 3.5) the rows are collected as Python values
    (`_collected`): the same frame, never through pandas.

    Example:
        >>> to_polars(pl.DataFrame({"a": [1]})).height
        1
    """
    return _to_polars(sdf)


def local_frame(spark: Any, frame: pl.DataFrame, schema: Any) -> Any:
    """A small public Polars frame as a Spark frame, exactly (Arrow; never through pandas).

    NaN and null stay two values, 64-bit integers exact, a ``Datetime`` without a time zone
    is its UTC instant whatever the session's time zone.

    Args:
        spark: The SparkSession.
        frame: The frame (public: a key set, a mapping, a released table).
        schema: Its Spark ``StructType``.

    Returns:
        The Spark DataFrame.

    Example:
        >>> local_frame.__name__  # needs a SparkSession: see tests/release/test_key_conversions.py
        'local_frame'
    """
    return _local_frame(spark, frame, schema)


def polars_dtype(st: Any) -> Any:
    """The Polars dtype a Spark type is checked and aligned as (see `polars_schema`).

    Args:
        st: A Spark ``DataType``.

    Returns:
        The Polars dtype (``pl.Object()`` for a type tabdp does not read).

    Example:
        >>> polars_dtype.__name__  # needs PySpark: see tests/release/test_key_conversions.py
        'polars_dtype'
    """
    return _pl_dtype(st)


def report_view(per_record: Any, limit: int = REPORT_UNITS) -> pl.DataFrame:
    """The per-record rows ``confidential_report.html`` is rendered from: at most ``limit``.

    All of them when the release has at most ``limit`` units; else the ``limit`` units with
    the largest ρ (ties by id), sorted and cut by Spark.

    Args:
        per_record: The Spark per-record report (first column: the unit id).
        limit: Most rows collected.

    Returns:
        A Polars frame in unit order.

    Example:
        >>> report_view.__name__  # needs a SparkSession: see tests/release/test_spark_run.py
        'report_view'
    """
    from pyspark.sql import functions as F

    unit = per_record.columns[0]
    top = per_record.orderBy(F.col("rho").desc_nulls_last(), F.col(unit).asc_nulls_last()) \
        .limit(limit)
    out = to_polars(top)
    return out.sort(unit, nulls_last=True) if out.height else out


def mark_members(spark: Any, sdf: Any, keys: KeySet, col: str) -> Any:
    """Add ``col``: ``"all"`` on the rows a release by ``keys`` puts in a cell, else null.

    The Spark engine's own cell matching (its releases' ``_attach_cells``: a broadcast join of
    the public keys in a dtype chosen from the two schemas, a key or value that does not
    convert exactly in no cell, nulls equal), so a row is marked exactly when a release of the
    key set counts it; the twin of `tabdp.frame.backends.polars.mark_members`.

    Args:
        spark: The SparkSession.
        sdf: The input (a Spark DataFrame).
        keys: The public key set (its columns are the keys compared).
        col: The column to add (replaced if the input has one).

    Returns:
        ``sdf`` with ``col`` (string).

    Example:
        >>> from tabdp.frame.backends.spark import mark_members
        >>> callable(mark_members)
        True
    """
    from pyspark.sql import functions as F

    if col in sdf.columns:
        sdf = sdf.drop(col)
    schema = {f.name: f.dataType for f in sdf.schema.fields}
    marked = _attach_cells(spark, sdf, keys, list(keys.columns), schema)
    return marked.withColumn(col, F.when(F.col(_CELL).isNotNull(), F.lit("all"))
                             .otherwise(F.lit(None).cast("string"))).drop(_CELL)
