"""Releases on whichever engine the input belongs to: one call for every engine.

The accessor (``frame.dp.sum`` / ``count`` / ``median`` / ``quantile``) releases through
`release_grouped` and `release_quantile`. The release workflow (`tabdp.release`) releases a
spec's tables with `release_requests`, binds its session to the input's engine with
`bind_session_engine`, brings the released tables to the driver with `released_table` and
writes the per-record report with `report_frames` and `write_report`. The engine is decided
by `tabdp.frame.backends` (from the frame's class), never by the caller.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tabdp.frame.backends import is_spark_frame, release_engine
from tabdp.frame.binding import use_engine
from tabdp.privacy.ledger import PER_RECORD_PARQUET
from tabdp.privacy.session import Session

__all__ = ["release_requests", "bind_session_engine", "release_grouped", "release_quantile",
           "released_table", "report_frames", "write_report", "lifetime_turn"]


def bind_session_engine(session: Session, native: Any, *, replay: bool, row_mode: bool,
                        rows: int | None = None) -> None:
    """Bind a fresh session to the engine of ``native`` before any release (no data read).

    On Spark the session's ledger lives in Spark: the releases' definitions, replayed
    (``replay``: row ids kept one to one, no per-row state), or a Spark table per unit (per row
    id in row mode, listing ``rows`` rows read). On Polars the session's own ledger is kept.

    Args:
        session: The session, with no releases yet.
        native: The input frame.
        replay: Row mode with one row per record: keep the releases' definitions.
        row_mode: Each row is a record (the units are row ids).
        rows: Row mode on a per-row Spark table: the number of rows read.

    Example:
        >>> import polars as pl
        >>> s = Session()
        >>> bind_session_engine(s, pl.LazyFrame(), replay=True, row_mode=True)
        >>> type(s.ledger).__name__
        'DenseLedger'
    """
    if release_engine(native, session) != "spark":
        return
    from tabdp.frame._spark import SparkReplayLedger, SparkUnitLedger

    spark = native.sparkSession
    if replay:
        use_engine(session, "spark", SparkReplayLedger(spark))
    else:
        use_engine(session, "spark", SparkUnitLedger(spark, row_mode=row_mode, rows=rows))


def release_requests(native: Any, session: Session,
                     requests: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Release several sums and counts of one input in one session, on the input's engine.

    Every request is checked (the accessor's output names and integer grids, and on Polars
    every argument and schema check) before the first is executed; they run in order, each as
    it would alone (the same tables, noise and per-record losses as ``frame.dp.sum`` /
    ``frame.dp.count`` one by one).

    Args:
        native: The input: a pandas or Polars frame, or a PySpark DataFrame.
        session: The session all the releases are recorded in.
        requests: One mapping per release (``kind``, ``measures``, ``by``, ``keys``, ...: the
            keywords of ``frame.dp.sum`` / ``frame.dp.count``).

    Returns:
        The released tables in the input's library, in order.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1)
        >>> k = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> outs = release_requests(pl.DataFrame({"c": ["a"]}), s,
        ...                         [dict(kind="count", by="c", keys=k, name="n")])
        >>> outs[0].height, [r.name for r in s.records]
        (2, ['n'])
    """
    with lifetime_turn(session):
        if release_engine(native, session) == "spark":
            from tabdp.frame._requests import accessor_request
            from tabdp.frame._spark import spark_grouped_release

            checked = [accessor_request(native, session, r) for r in requests]
            return [spark_grouped_release(native, session=session, **{"measures": None, **r})
                    for r in checked]
        from tabdp.frame._release import execute_planned, planned_releases

        return execute_planned(planned_releases(native, session, requests))


def release_grouped(native: Any, **kwargs: Any) -> Any:
    """A sum or count of ``native``, on the engine `tabdp.frame.backends` decides for it.

    Args:
        native: The input: a pandas or Polars frame, or a PySpark DataFrame.
        **kwargs: The release's checked arguments (``kind``, ``measures``, ``by``, ``keys``,
            ``mechanism``, ``session``, ...: those of the accessor's ``sum`` / ``count``).

    Returns:
        The released table in the input's library.

    Example:
        >>> import polars as pl, tabdp
        >>> out = release_grouped(pl.DataFrame({"c": ["a"]}), kind="count", measures=None,
        ...                       by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
        ...                       mechanism=None, session=tabdp.Session(seed=1))
        >>> out.height
        2
    """
    with lifetime_turn(kwargs.get("session")):
        if release_engine(native, kwargs.get("session")) == "spark":
            from tabdp.frame._spark import spark_grouped_release

            return spark_grouped_release(native, **kwargs)
        from tabdp.frame._release import grouped_release

        return grouped_release(native, **kwargs)


def release_quantile(native: Any, **kwargs: Any) -> Any:
    """A median or quantile of ``native``, on the engine `tabdp.frame.backends` decides for it.

    Args:
        native: The input: a pandas or Polars frame, or a PySpark DataFrame.
        **kwargs: The release's arguments (``column``, ``q``, ``median``, ``by``, ``keys``,
            ``bounds``, ``epsilon``, ``session``, ...: those of the accessor's ``median`` /
            ``quantile``).

    Returns:
        The released table in the input's library.

    Example:
        >>> import polars as pl, tabdp
        >>> out = release_quantile(pl.DataFrame({"c": ["a"], "x": [1.0]}), column="x", q=0.5,
        ...                        median=True, by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
        ...                        bounds=(0.0, 2.0), epsilon=1.0,
        ...                        session=tabdp.Session(seed=1))
        >>> out.height
        1
    """
    with lifetime_turn(kwargs.get("session")):
        if release_engine(native, kwargs.get("session")) == "spark":
            from tabdp.frame._spark import spark_quantile_release

            return spark_quantile_release(native, **kwargs)
        from tabdp.frame._release import quantile_release

        return quantile_release(native, **kwargs)


def lifetime_turn(session: Session | None) -> contextlib.AbstractContextManager[Any]:
    """The session's lifetime ledger held for a release (`tabdp.Ledger.one_release`).

    Held from before the release reads its input to after its charge (and commit): sessions
    sharing one ledger, one thread each, take turns, so no two releases pass the lifetime
    filter on the same losses (review rev63e). A session without a ledger (or one-off):
    nothing held.

    Args:
        session: The release's session (``None``: a one-off session).

    Returns:
        A context manager.

    Example:
        >>> with lifetime_turn(Session()):
        ...     pass
    """
    hold = getattr(getattr(session, "lifetime", None), "one_release", None)
    return contextlib.nullcontext() if hold is None else hold()


def released_table(native: Any) -> pl.DataFrame:
    """A released table (at most its key set) as a Polars frame on the driver.

    Args:
        native: A table `release_requests` returned (Polars, or Spark: collected).

    Returns:
        The table as a Polars frame.

    Example:
        >>> released_table(pl.DataFrame({"a": [1]})).height
        1
    """
    if is_spark_frame(native):
        from tabdp.frame.backends.spark import to_polars

        return to_polars(native)
    assert isinstance(native, pl.DataFrame)
    return native


def report_frames(per_record: Any, rename: Mapping[str, str]) -> tuple[Any, pl.DataFrame]:
    """The CONFIDENTIAL per-record report to write (renamed) and the driver's view of it.

    A Polars report is sorted by its first column (the unit id, nulls last): the engine's order
    of first sight depends on its parallel group-bys, so two identically seeded runs then write
    the same bytes; the view is the report. A Spark report stays in Spark (`write_report`
    sorts it as it writes); the view is at most `tabdp.frame.backends.spark.REPORT_UNITS`
    units (the largest ρ), collected.

    Args:
        per_record: ``Report.per_record`` (a Polars or a Spark frame).
        rename: Columns to rename (``{old: new}``).

    Returns:
        The report to write, and the rows the confidential page shows.

    Example:
        >>> rep = pl.DataFrame({"__row": [2, 0], "rho": [0.1, 0.2]})
        >>> out, view = report_frames(rep, {"__row": "row"})
        >>> out["row"].to_list(), view is out
        ([0, 2], True)
    """
    if is_spark_frame(per_record):
        from tabdp.frame.backends.spark import report_view

        for old, new in rename.items():
            per_record = per_record.withColumnRenamed(old, new)
        return per_record, report_view(per_record)
    assert isinstance(per_record, pl.DataFrame)
    out = per_record.rename(dict(rename))
    if out.width and out.height:
        out = out.sort(out.columns[0], nulls_last=True)
    return out, out


def write_report(per_record: Any, path: Path) -> None:
    """Write a report of `report_frames` to one Parquet file (units in id order).

    Polars writes it with `tabdp.privacy.ledger.PER_RECORD_PARQUET`'s options; a Spark report
    is written by Spark's writer (sorted by its first column; nothing through the driver).

    Args:
        per_record: The report (Polars or Spark).
        path: The file to write (its folder exists).

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.parquet"
        >>> write_report(pl.DataFrame({"row": [0], "rho": [0.1]}), p)
        >>> pl.read_parquet(p).height
        1
    """
    if is_spark_frame(per_record):
        from tabdp.frame.backends import spark

        spark.write_single_parquet(per_record, path, sort_by=per_record.columns[0])
        return
    per_record.write_parquet(path, **PER_RECORD_PARQUET)
