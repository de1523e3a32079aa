"""Which engine a frame belongs to, decided from its class alone (no optional import)."""

from __future__ import annotations

from typing import Any

__all__ = ["is_spark_frame"]


def is_spark_frame(native: Any) -> bool:
    """Whether ``native`` is a PySpark DataFrame (checked by class name: PySpark not imported).

    Args:
        native: Any object.

    Returns:
        True for a ``pyspark.sql`` DataFrame (classic or Spark Connect).

    Example:
        >>> import polars as pl
        >>> is_spark_frame(pl.DataFrame())
        False
    """
    return any(c.__module__.startswith("pyspark.sql") and c.__name__ == "DataFrame"
               for c in type(native).__mro__)
