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

from tabdp.frame._spark import (
    SparkBackend,
    SparkReplayLedger,
    SparkUnitLedger,
    polars_schema,
    quiet,
    row_ids,
    spark_grouped_release,
    spark_quantile_release,
    spark_type,
    try_cast,
    write_single_parquet,
)

__all__ = ["SparkBackend", "SparkReplayLedger", "SparkUnitLedger", "spark_grouped_release",
           "spark_quantile_release", "polars_schema", "quiet", "row_ids", "spark_type",
           "try_cast", "write_single_parquet"]
