"""Dates and times Polars can format as text (package-private).

Polars holds dates and timestamps far beyond the range its text formatting supports; casting
such a value to text is a Rust panic ("out-of-range date", review R14 of issue 27), whose
message reaches file descriptor 2. `formattable` masks those values first.

Example:
    >>> import polars as pl
    >>> s = pl.Series("d", [0, 2**31 - 1], pl.Int32).cast(pl.Date)
    >>> s.to_frame().select(formattable(pl.col("d"), pl.Date).cast(pl.String))["d"].to_list()
    ['1970-01-01', None]
"""

from __future__ import annotations

from typing import Any

import polars as pl

__all__ = ["formattable", "MAX_TEXT_DAYS"]

#: Days either side of 1970 inside which Polars formats a date or time as text (about 260,000
#: years; chrono's range is about ±262,000 years).
MAX_TEXT_DAYS = 95_000_000


def formattable(expr: pl.Expr, dtype: Any) -> pl.Expr:
    """``expr`` (of dtype ``dtype``) with dates and times Polars cannot format as text null.

    A Date, or a millisecond or microsecond Datetime, more than `MAX_TEXT_DAYS` days from
    1970 is null (a nanosecond Datetime cannot leave the range); other dtypes are returned
    unchanged. The value itself is masked, so a later ``cast(pl.String)`` never sees it (both
    branches of a ``when/then`` are evaluated, so a mask around the cast would not do).

    Args:
        expr: The column.
        dtype: Its dtype.

    Returns:
        The masked expression, of the same dtype.

    Example:
        >>> import datetime as dt
        >>> f = pl.DataFrame({"d": [dt.date(2020, 1, 2)]})
        >>> f.select(formattable(pl.col("d"), pl.Date))["d"].to_list()
        [datetime.date(2020, 1, 2)]
    """
    if not (dtype == pl.Date or isinstance(dtype, pl.Datetime)):
        return expr
    per_day = {"ms": 86_400_000, "us": 86_400_000_000}.get(
        getattr(dtype, "time_unit", None) or "", 1)
    if dtype != pl.Date and per_day == 1:  # nanoseconds
        return expr
    days = MAX_TEXT_DAYS
    inside = expr.to_physical().is_between(-days * per_day, days * per_day)
    return pl.when(inside).then(expr)
