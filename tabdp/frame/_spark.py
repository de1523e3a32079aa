"""Grouped releases on PySpark DataFrames: the same release as the Polars engine, run in Spark.

The steps and their order are those of `tabdp.frame._engine` (read its module docstring);
what differs is where they run. Everything per row or per unit stays in Spark; the driver
receives only small summaries (the validation counters, the number of rows of each input
partition) and the exact totals of the released cells (at most the key set):

1. **Snapshot.** One Spark plan reads the input once and is persisted: per row (row mode, with
   row ids numbered in the order the input is read: partition by partition, row by row) or per
   (unit, group-by key), each measure's contribution as an exact fixed-point integer in
   ``DecimalType(38, 0)`` (Spark has no 128-bit integers): float values times ``2**24``,
   rounded half to even (as Polars' ``round``), integers as they are, ``|x| > 2**64`` clamped.
2. **Counters** (nulls, non-finite, negatives, null unit ids, rows outside the key set, the row
   fingerprints of row mode) are one aggregate over the snapshot.
3. **Cells**: the public key set, aligned to the data's dtypes with the same data-free rules,
   is broadcast-joined to the snapshot.
4. **Losses** per (unit, cell) are computed by the mechanism's own numpy policy functions in a
   pandas UDF on the executors (so each record's loss is the one the Polars engine computes),
   then summed per unit and currency in Spark.
5. **Budget**: in unit mode the session's ledger is a Spark table (`SparkUnitLedger`);
   the individual filter (`tabdp.privacy.filter.individual_filter`, the one every engine uses)
   runs per partition of the units joined with their ledger rows. In row mode the ledger holds
   no per-row state (`SparkReplayLedger`): it keeps each release's public definition, and a
   release under a budget replays the earlier ones on its snapshot as Spark columns
   (`_replay`), then filters row by row on those totals: a constant budget as a Spark expression
   (`tabdp.privacy.filter.constant_admits`, the same operations), a curve budget by
   ``individual_filter`` itself in a scalar pandas UDF. The per-record report replays every
   release over the input, after checking its fingerprints.
6. **Totals** of the admitted contributions are summed per cell in Spark and collected; noise is
   drawn on the driver in key order exactly as the Polars engine does, so for one seed both
   engines publish the same table.

Medians and quantiles (`spark_quantile_release`) sort each cell's values and compute its
smooth sensitivity in Spark (one group per cell), by the same numpy code as the other engines.

The Python workers must run an interpreter with tabdp installed (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import contextlib
import threading
import unicodedata
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import polars as pl

from tabdp import _spark_worker
from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp._numeric import add_up_any
from tabdp._policy import Policy as _Policy
from tabdp._reserved import RESERVED, is_reserved
from tabdp._temporal import MAX_TEXT_DAYS
from tabdp.exceptions import (
    ColumnTypeError,
    InvalidParameterError,
    TabdpError,
    UnsupportedBackendError,
)
from tabdp.frame import binding
from tabdp.frame._author import bind_frame
from tabdp.frame._engine import (
    _ALL,
    _CELL,
    _ROWS,
    MAX_ABS,
    ROW_ID,
    SUM_SCALE_BITS,
    _keep_mask,
    _Opened,
    _prepare_release,
    _release_rules,
    _rule_counts,
    _Rules,
    _schema_checks,
    _strict_checks,
    drops_rows,
    left_out_counts,
    serves_measures,
)
from tabdp.frame._output import check_form
from tabdp.frame._quantiles import PlannedQuantile, cell_quantiles
from tabdp.frame._stream import Planned
from tabdp.frame.backends import is_spark_frame
from tabdp.frame.backends.base import Aggregated, QuantileData
from tabdp.frame.binding import use_engine
from tabdp.frame.keys import (
    _TEXT,
    KeySet,
    _check_conversion,
    _is_nested,
    check_keys_distinct,
    common_dtype,
)
from tabdp.mechanisms import DEFAULT_LEVEL, Mechanism
from tabdp.privacy.accounting import COMPONENTS
from tabdp.privacy.ledger import QueryRecord
from tabdp.privacy.session import Session

__all__ = ["spark_grouped_release", "spark_quantile_release", "SparkBackend", "SparkUnitLedger",
           "SparkReplayLedger", "is_spark_frame"]

_DEC = "decimal(38,0)"
#: The first characters of every column the Spark engine adds to a frame (``__tabdp_uid``,
#: ``__tabdp_acc0``, ``__tabdp_led:rho``...): the prefix tabdp reserves on every engine
#: (`tabdp.frame._engine.RESERVED`), so no measure, key, unit or input column takes one's name.
_IN = f"{RESERVED}_"
_UID = f"{_IN}uid"    # a replay's or the filter's unit (row) ids
_KEEP = f"{_IN}keep"  # the rows the release's rules keep
_MONO = f"{_IN}mono"  # the numbered snapshot's monotonically increasing ids
_SPLIT = 2.0**44  # fixed-point values are split in two parts below 2**53 to cast exactly


def _release_col(name: str) -> str:
    """The ledger table's column of one release's ρ (``rho_<name>`` in the report).

    Kept apart from the component totals: a release named ``g`` or ``z`` would otherwise share
    the column of the components ``rho_g`` / ``rho_z``.
    """
    return f"__release_{name}"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence PySpark's pandas-version FutureWarning around tabdp's own conversions."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                                category=FutureWarning)
        yield


def _local_frame(spark: Any, frame: pl.DataFrame, schema: Any) -> Any:
    """A small driver-side Polars frame (public keys, a released table) as a Spark frame, exactly.

    Not through pandas (review r75): there a Float64 column's NaN and null are one value (Spark
    read both as null) and an Int64 column holding a null is float64 (``2**53 + 1`` became
    ``2**53``). PySpark >= 4.0 takes the Arrow table, whatever the session's Arrow setting;
    PySpark 3.5 the rows as Python values (NaN, null and every integer kept). A Datetime
    without a time zone is a UTC wall time, as Polars holds it: it is sent as its UTC instant
    (PySpark reads a timestamp without a zone in the session's time zone, so the same key
    matched other rows under another ``spark.sql.session.timeZone``; review r76).
    """
    import pyspark
    from pyspark.sql import types as T

    ntz = {f.name for f in schema.fields if isinstance(f.dataType, T.TimestampNTZType)}
    naive = [c for c, d in frame.schema.items() if isinstance(d, pl.Datetime)
             and d.time_zone is None and c not in ntz]  # a timestamp_ntz: the wall time
    if naive:
        frame = frame.with_columns(pl.col(c).dt.replace_time_zone("UTC") for c in naive)
    if int(pyspark.__version__.split(".")[0]) >= 4:
        return spark.createDataFrame(frame.to_arrow(compat_level=pl.CompatLevel.oldest()),
                                     schema)
    return spark.createDataFrame(frame.rows(), schema)


#: The largest generated method (bytes of JVM bytecode) Spark keeps in whole-stage code
#: generation while tabdp's own jobs run (`_jit_sized_methods`): HotSpot compiles no method
#: above 8,000 bytes (``-XX:+DontCompileHugeMethods``, its default), so a larger one runs
#: interpreted on every row. Spark's own default (65,535) lets such methods through.
CODEGEN_METHOD_LIMIT = 8000
_HUGE_METHOD_KEY = "spark.sql.codegen.hugeMethodLimit"
_EXCLUDED_RULES_KEY = "spark.sql.optimizer.excludedRules"
#: The optimizer rule left out of tabdp's own jobs (`_jit_sized_methods`).
COLLAPSE_PROJECT = "org.apache.spark.sql.catalyst.optimizer.CollapseProject"
_held_lock = threading.Lock()
#: id(SparkSession) -> (nesting depth, {key set by tabdp: its value before, None: unset})
_held_limits: dict[int, tuple[int, dict[str, str | None]]] = {}


def _job_settings(prev: dict[str, str | None]) -> dict[str, str]:
    """The settings tabdp's jobs run with, given the session's own (``None``: not set)."""
    out: dict[str, str] = {}
    limit = prev.get(_HUGE_METHOD_KEY)
    try:
        lower = limit is not None and int(limit) <= CODEGEN_METHOD_LIMIT
    except ValueError:
        lower = False
    if not lower:
        out[_HUGE_METHOD_KEY] = str(CODEGEN_METHOD_LIMIT)
    rules = [r.strip() for r in (prev.get(_EXCLUDED_RULES_KEY) or "").split(",") if r.strip()]
    if COLLAPSE_PROJECT not in rules:
        out[_EXCLUDED_RULES_KEY] = ",".join([*rules, COLLAPSE_PROJECT])
    return out


@contextlib.contextmanager
def _jit_sized_methods(spark: Any) -> Iterator[None]:
    """Run tabdp's Spark jobs with JIT-sized generated methods and without CollapseProject.

    The replay of a row-mode report and the releases' aggregations are wide expressions (the
    losses' rounded-up sums, the exact fixed-point parts, the fingerprints); whole-stage code
    generation fuses them into one method per stage, which above 8,000 bytes of bytecode the
    JVM never compiles. With ``spark.sql.codegen.hugeMethodLimit`` at `CODEGEN_METHOD_LIMIT`,
    Spark runs such a stage's operators with their own generated code instead (expressions
    split into small methods, which the JIT compiles); smaller stages keep whole-stage code.
    A lower limit set by the user is kept.

    The optimizer rule CollapseProject (`COLLAPSE_PROJECT`) is added to
    ``spark.sql.optimizer.excludedRules`` (after the user's own): a replay is a chain of
    projections per release (values, cells, charges, the filter, the running totals; the
    charges' fields and the totals wrapped by `_no_inline`, which the rule may not merge), and
    the rule's checks on such a chain grew much faster than the chain (measured on PySpark 4.3,
    four releases of nine rows under a curve budget: the report's summary took 104 s with the
    rule, 8-17 s without; whole-stage code generation still fuses the projections into one
    stage). A service that refuses the setting runs the jobs with the rule. With the rule off, a
    column of an earlier projection is computed for every row even where a later ``when``
    reads it only under a guard: keep a guard in the same expression as what it guards.

    Optimizer rules and code generation do not change values: the same expressions give the
    same values either way. These are settings of the SparkSession: other jobs that run on it
    at the same time get them too, and a change the user makes to these two keys while a
    tabdp job runs is overwritten when it ends. Only the keys set here are restored, to their
    values before the outermost use (nested and concurrent uses on one session share one
    setting); a failure while setting them restores those already set. No-op for
    ``spark=None``.

    Example:
        >>> with _jit_sized_methods(None):
        ...     pass
    """
    if spark is None:
        yield
        return
    key = id(spark)
    with _held_lock:
        depth, prev = _held_limits.get(key, (0, {}))
        if depth == 0:
            prev = {k: spark.conf.get(k, None) for k in (_HUGE_METHOD_KEY, _EXCLUDED_RULES_KEY)}
            applied: dict[str, str | None] = {}  # only the keys set here are restored
            try:
                for k, v in _job_settings(prev).items():
                    try:
                        spark.conf.set(k, v)
                    except Exception:  # noqa: BLE001 - a service that refuses the setting
                        if k == _EXCLUDED_RULES_KEY:
                            continue  # a speed-up only: the job runs with the rule
                        raise
                    applied[k] = prev[k]
            except BaseException:
                _restore(spark, applied)
                raise
            prev = applied
        _held_limits[key] = (depth + 1, prev)
    try:
        yield
    finally:
        with _held_lock:
            depth, prev = _held_limits.pop(key)
            if depth > 1:
                _held_limits[key] = (depth - 1, prev)
            else:
                _restore(spark, prev)


def _restore(spark: Any, before: dict[str, str | None]) -> None:
    """Give each key of ``before`` its value back (``None``: unset it)."""
    for k, v in before.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


#: Seconds in a day (the UTC days of `_try_cast`'s date and timestamp conversions).
_DAY_SECONDS = 86_400
#: The most days from 1970-01-01 whose UTC midnight a timestamp holds (64-bit microseconds,
#: either side; Polars' Date -> Datetime("us") is null beyond).
_MAX_MIDNIGHT_DAYS = (2**63 - 1) // (_DAY_SECONDS * 1_000_000)


def _try_cast(col: Any, st: Any, source: Any = None) -> Any:
    """``col.try_cast(st)`` (PySpark >= 4.0; null where a value does not convert).

    PySpark 3.5 has no ``Column.try_cast`` (and ``hasattr`` is true there: a missing attribute
    is a struct field): ``cast``, which gives null too unless ANSI mode is on.

    With ``source`` (the column's Spark type), dates and timestamps convert as Polars converts
    them, whatever the session's time zone (``spark.sql.session.timeZone``; review r76):
    Spark's own cast of a ``timestamp`` (an instant) to a ``date`` takes the date in the
    session's zone, and of a ``date`` (or a ``timestamp_ntz``) to a ``timestamp`` its midnight
    (wall time) there, so the same rows fell into other cells under another session setting.
    Here a timestamp's date is its UTC date (Polars casts a Datetime to a Date by its UTC
    instant, with or without a time zone), a date's timestamp is its UTC midnight, and a
    timestamp without a zone is a UTC wall time (Polars' naive Datetime); a timestamp as
    text is its UTC wall time as Polars writes a microsecond Datetime,
    ``2020-01-01 23:30:00.000000`` (Spark's cast writes the session's wall time, without the
    microseconds). The session's settings are only read by Spark, never changed.
    """
    import pyspark
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(source, T.TimestampType) and isinstance(st, T.DateType):
        # the instant's whole seconds (floored, zone-free) -> its UTC day (floored; exact:
        # seconds are far below 2**53, and an exact quotient is exact in a double)
        day = F.floor(F.unix_seconds(col) / F.lit(_DAY_SECONDS))
        return F.date_from_unix_date(day.cast(T.IntegerType()))
    if isinstance(source, T.DateType) and isinstance(st, T.TimestampType):
        # null where the midnight's microseconds pass the 64-bit range, as Polars gives
        # (``timestamp_seconds`` raised DATETIME_OVERFLOW there, whatever the ANSI setting:
        # one date stopped the whole job; review r82)
        days = F.unix_date(col).cast(T.LongType())
        return F.when(F.abs(days) <= F.lit(_MAX_MIDNIGHT_DAYS),
                      F.timestamp_seconds(days * F.lit(_DAY_SECONDS)))
    if isinstance(source, T.TimestampNTZType) and isinstance(st, T.TimestampType):
        # a UTC wall time: its microseconds from the wall date (zone-free) and the time of
        # day, exact. (``make_timestamp`` of its fields overflowed in its seconds times 10**6
        # on the first day of the range, -2**63 µs: with ANSI on, one value stopped the job;
        # review r82.) A negative day is taken one day up (so ``days · 86400·10**6`` fits)
        day_us = F.lit(_DAY_SECONDS * 1_000_000)
        days = F.unix_date(col.cast(T.DateType())).cast(T.LongType())
        rest = (F.hour(col).cast(T.LongType()) * F.lit(3_600_000_000)
                + F.minute(col).cast(T.LongType()) * F.lit(60_000_000)
                + (F.extract(F.lit("SECOND"), col) * F.lit(1_000_000)).cast(T.LongType()))
        micros = F.when(days < 0, (days + F.lit(1)) * day_us + (rest - day_us)) \
            .otherwise(days * day_us + rest)
        return F.timestamp_micros(micros)
    if isinstance(source, T.TimestampType) and isinstance(st, T.TimestampNTZType):
        # the instant's UTC wall time (Spark's cast takes the session's: a timestamp_ntz key
        # column matched no row of a Datetime key set outside UTC; stop 63): its UTC date's
        # midnight (zone-free) plus its microseconds into that day, exact
        rest = F.pmod(F.unix_micros(col), F.lit(_DAY_SECONDS * 1_000_000))
        day = F.floor(F.unix_seconds(col) / F.lit(_DAY_SECONDS))
        midnight = F.date_from_unix_date(day.cast(T.IntegerType())).cast(T.TimestampNTZType())
        secs = (rest.cast(T.DecimalType(18, 0)) / F.lit(1_000_000)).cast(T.DecimalType(18, 6))
        return midnight + F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), secs)
    if isinstance(source, (T.TimestampType, T.TimestampNTZType)) and \
            isinstance(st, T.StringType):
        ts = col if isinstance(source, T.TimestampType) else \
            _try_cast(col, T.TimestampType(), source)
        day = F.floor(F.unix_seconds(ts) / F.lit(_DAY_SECONDS))
        # microseconds into the UTC day: exact integers (below 2**37); a remainder, not
        # ``micros - day · 86400·10**6``, whose product overflowed on the range's first day
        # (ANSI on: one value stopped the job; review r82)
        rest = F.pmod(F.unix_micros(ts), F.lit(_DAY_SECONDS * 1_000_000))

        def digits(v: Any, n: int) -> Any:
            return F.lpad(v.cast(T.LongType()).cast(T.StringType()), n, "0")

        hour = F.floor(rest / F.lit(3_600_000_000))
        minute = F.floor(F.pmod(rest, F.lit(3_600_000_000)) / F.lit(60_000_000))
        second = F.floor(F.pmod(rest, F.lit(60_000_000)) / F.lit(1_000_000))
        # null beyond the days Polars formats as text (`tabdp._temporal.formattable`), as there
        text = F.concat(F.date_from_unix_date(day.cast(T.IntegerType())).cast(T.StringType()),
                        F.lit(" "), digits(hour, 2), F.lit(":"), digits(minute, 2), F.lit(":"),
                        digits(second, 2), F.lit("."), digits(F.pmod(rest, F.lit(1_000_000)), 6))
        return F.when(F.abs(day) <= F.lit(MAX_TEXT_DAYS), text)
    if int(pyspark.__version__.split(".")[0]) >= 4:
        return col.try_cast(st)
    return col.cast(st)


# -- schema -----------------------------------------------------------------------------------
def polars_schema(sdf: Any) -> dict[str, Any]:
    """The Polars dtypes a Spark frame's columns are checked and aligned as (no data read).

    Args:
        sdf: A PySpark DataFrame.

    Returns:
        Column name → Polars dtype.
    """
    return {f.name: _pl_dtype(f.dataType) for f in sdf.schema.fields}


def _pl_dtype(st: Any) -> Any:
    """The Polars dtype a Spark type is checked and aligned as (decided without data)."""
    from pyspark.sql import types as T

    # dtype instances, not classes: the shared checks test ``isinstance(dtype, pl.String)``
    simple = {T.ByteType: pl.Int8(), T.ShortType: pl.Int16(), T.IntegerType: pl.Int32(),
              T.LongType: pl.Int64(), T.FloatType: pl.Float32(), T.DoubleType: pl.Float64(),
              T.StringType: pl.String(), T.BooleanType: pl.Boolean(), T.DateType: pl.Date(),
              T.TimestampType: pl.Datetime("us"), T.BinaryType: pl.Binary()}
    for t, d in simple.items():
        if isinstance(st, t):
            return d
    if isinstance(st, T.DecimalType):
        return pl.Decimal(st.precision, st.scale)
    if isinstance(st, (T.VarcharType, T.CharType)):
        return pl.String()
    if isinstance(st, T.ArrayType):
        return pl.List(pl.Null)
    if isinstance(st, T.StructType):
        return pl.Struct([])
    return pl.Object()


def _key_dtypes(sschema: dict[str, Any]) -> dict[str, Any]:
    """The Polars dtypes a release's key columns are published as, from the input's schema.

    `_pl_dtype`, and a ``timestamp_ntz`` (a wall time without a zone) as a ``Datetime``
    without a zone, as Polars publishes its own; `_to_spark` gives such a column back its
    Spark type (review of stop 63: it was published as the key set's ``date`` or as a
    ``timestamp``).
    """
    from pyspark.sql import types as T

    return {c: pl.Datetime("us") if isinstance(t, T.TimestampNTZType) else _pl_dtype(t)
            for c, t in sschema.items()}


def _to_polars(sdf: Any) -> pl.DataFrame:
    """`tabdp.frame.backends.spark.to_polars` (here: the Spark engine collects with it too).

    Example:
        >>> _to_polars(pl.DataFrame({"a": [1]})).height
        1
    """
    if isinstance(sdf, pl.DataFrame):
        return sdf
    if hasattr(sdf, "toArrow"):  # PySpark >= 4.0
        from pyspark.sql import types as T

        out = pl.from_arrow(sdf.toArrow())
        assert isinstance(out, pl.DataFrame)
        instants = [f.name for f in sdf.schema.fields if isinstance(f.dataType, T.TimestampType)
                    and getattr(out.schema[f.name], "time_zone", None) is not None]
        return out.with_columns(pl.col(c).dt.convert_time_zone("UTC")
                                .dt.replace_time_zone(None) for c in instants)
    return _collected(sdf)


def _collected(sdf: Any) -> pl.DataFrame:
    """`to_polars` without ``toArrow`` (PySpark 3.5): the rows as Python values, typed.

    Each column in the dtype `_key_dtypes` gives its Spark type (as the Arrow branch's), a
    ``timestamp`` as its microseconds since 1970 (Spark's ``unix_micros``: PySpark turns an
    instant into the *driver's* local wall time). Until stop 64 this went through pandas: a
    ``timestamp`` was the session zone's wall time (the Arrow branch: the UTC wall time), an
    integer column holding a null came back ``Float64`` (``2**53 + 1`` rounded) and a NaN
    was null. A struct, array or map column is the Arrow branch's too (a struct, a list, a
    list of ``key``/``value`` structs), a ``timestamp`` in it at any depth taken by its
    microseconds as well: an instant in UTC (``Datetime("us", "UTC")``, as Arrow gives it).
    Until stop 65 it was the driver's local wall time there.

    Example:
        >>> _collected.__name__  # needs a SparkSession: see tests/frame/test_spark.py
        '_collected'
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = list(sdf.schema.fields)
    instant = [isinstance(f.dataType, T.TimestampType) for f in fields]
    nested = [isinstance(f.dataType, (T.StructType, T.ArrayType, T.MapType)) for f in fields]
    quoted = ["`" + f.name.replace("`", "``") + "`" for f in fields]
    # (SQL's unix_micros: PySpark 3.5.0's functions may lack its wrapper)
    picked = sdf.select(*[F.expr(f"unix_micros({q})").alias(f.name) if i
                          else _micros(F.col(q), f.dataType).alias(f.name) if n else F.col(q)
                          for f, q, i, n in zip(fields, quoted, instant, nested, strict=True)])
    rows = picked.collect()
    dtypes = _key_dtypes({f.name: f.dataType for f in fields})
    cols = []
    for k, (f, i, n) in enumerate(zip(fields, instant, nested, strict=True)):
        values = [r[k] for r in rows]
        if i:
            cols.append(pl.Series(f.name, values, dtype=pl.Int64).cast(pl.Datetime("us")))
            continue
        if n:
            raw = pl.Series(f.name, [_plain(v, f.dataType) for v in values],
                            dtype=_nested_dtype(f.dataType, micros=True))
            cols.append(raw.cast(_nested_dtype(f.dataType, micros=False)))
            continue
        dt = dtypes[f.name]
        concrete = not (dt == pl.Object or isinstance(dt, (pl.List, pl.Struct)))
        cols.append(pl.Series(f.name, values, dtype=dt if concrete else None))
    return pl.DataFrame(cols)


def _has_instant(st: Any) -> bool:
    """Whether a Spark type holds a ``timestamp`` (an instant) at any depth."""
    from pyspark.sql import types as T

    if isinstance(st, T.TimestampType):
        return True
    if isinstance(st, T.ArrayType):
        return _has_instant(st.elementType)
    if isinstance(st, T.MapType):
        return _has_instant(st.keyType) or _has_instant(st.valueType)
    if isinstance(st, T.StructType):
        return any(_has_instant(f.dataType) for f in st.fields)
    return False


def _micros(col: Any, st: Any) -> Any:
    """``col`` of Spark type ``st`` with every ``timestamp`` in it as its ``unix_micros``."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not _has_instant(st):
        return col
    if isinstance(st, T.TimestampType):
        fn = getattr(F, "unix_micros", None)
        return fn(col) if fn is not None else F.call_function("unix_micros", col)
    if isinstance(st, T.ArrayType):
        return F.transform(col, lambda x: _micros(x, st.elementType))
    if isinstance(st, T.MapType):
        out = F.transform_values(col, lambda _, v: _micros(v, st.valueType))
        return F.transform_keys(out, lambda k, _: _micros(k, st.keyType))
    # a struct: each field by its position (its names may repeat or differ only in case)
    at = col.cast(T.StructType([T.StructField(f"_{i}", f.dataType, True)
                                for i, f in enumerate(st.fields)]))
    return F.when(col.isNotNull(), F.struct(*[_micros(at.getField(f"_{i}"), f.dataType)
                                              .alias(f.name) for i, f in enumerate(st.fields)]))


def _plain(value: Any, st: Any) -> Any:
    """A collected value of Spark type ``st`` as Polars builds it.

    Structs as dicts, maps as lists of ``key``/``value`` dicts, arrays as lists.
    """
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(st, T.StructType):
        return {f.name: _plain(value[i], f.dataType) for i, f in enumerate(st.fields)}
    if isinstance(st, T.ArrayType):
        return [_plain(v, st.elementType) for v in value]
    if isinstance(st, T.MapType):
        return [{"key": _plain(k, st.keyType), "value": _plain(v, st.valueType)}
                for k, v in value.items()]
    return value


def _nested_dtype(st: Any, *, micros: bool) -> Any:
    """The Polars dtype of a Spark type at any depth, as Arrow gives it.

    ``micros``: an instant as its Int64 microseconds, else ``Datetime("us", "UTC")``, and a
    map as a list of ``key``/``value`` structs (the form it is built in), else as Polars
    reads an Arrow map (a ``Map`` from Polars 2.1).
    """
    return _walk_dtype(st, pl.Int64() if micros else pl.Datetime("us", "UTC"),
                       arrow_maps=not micros, intervals=False)


def _walk_dtype(st: Any, instant: Any, *, arrow_maps: bool, intervals: bool) -> Any:
    """The one walk of a Spark type to a Polars dtype (`_nested_dtype`, `_key_compare_dtype`).

    ``instant`` is the dtype of a ``timestamp``; a ``timestamp_ntz`` is a ``Datetime("us")``;
    with ``intervals`` an interval is a ``Duration("us")`` (else `_pl_dtype`'s ``Object``); an
    ``array`` is a ``List`` of its element's dtype, a ``struct`` a ``Struct`` of its fields',
    and a ``map`` a ``List`` of ``key``/``value`` structs, or with ``arrow_maps`` as Polars reads
    an Arrow map (a ``Map`` from Polars 2.1). Other types are `_pl_dtype`'s.
    """
    from pyspark.sql import types as T

    def walk(t: Any) -> Any:
        if isinstance(t, T.TimestampType):
            return instant
        if isinstance(t, T.TimestampNTZType):
            return pl.Datetime("us")
        if intervals and isinstance(t, (T.DayTimeIntervalType, T.YearMonthIntervalType)):
            return pl.Duration("us")
        if isinstance(t, T.ArrayType):
            return pl.List(walk(t.elementType))
        if isinstance(t, T.MapType):
            kv = (walk(t.keyType), walk(t.valueType))
            as_map = getattr(pl, "Map", None)  # Polars >= 2.1 reads an Arrow map as a Map
            if as_map is not None and arrow_maps:
                return as_map(*kv)
            return pl.List(pl.Struct([pl.Field("key", kv[0]), pl.Field("value", kv[1])]))
        if isinstance(t, T.StructType):
            return pl.Struct([pl.Field(f.name, walk(f.dataType)) for f in t.fields])
        return _pl_dtype(t)

    return walk(st)


def _spark_type(dt: Any) -> Any:
    from pyspark.sql import types as T

    if dt == pl.Int128 or dt == pl.Int64:
        return T.LongType()  # Spark integers are at most 64-bit
    table = {pl.Int8: T.ByteType(), pl.Int16: T.ShortType(), pl.Int32: T.IntegerType(),
             pl.Float32: T.FloatType(), pl.Float64: T.DoubleType(), pl.String: T.StringType(),
             pl.Boolean: T.BooleanType(), pl.Date: T.DateType()}
    for k, v in table.items():
        if dt == k:
            return v
    if isinstance(dt, (pl.Categorical, pl.Enum)):
        return T.StringType()
    if isinstance(dt, pl.Datetime):
        return T.TimestampType()
    if isinstance(dt, pl.Decimal):  # a key set of the data's decimal type (stop 64: refused)
        return T.DecimalType(38 if dt.precision is None else dt.precision, dt.scale or 0)
    raise ColumnTypeError(f"key columns of dtype {dt} are not supported on Spark frames.\n"
                          "Hint: use integer, float, decimal, string or date keys.")


def _is_floatlike(st: Any) -> bool:
    from pyspark.sql import types as T

    return isinstance(st, (T.FloatType, T.DoubleType, T.DecimalType))


# -- the ledger -------------------------------------------------------------------------------
def _spark_where(cond: Any, x: Any, y: Any) -> Any:
    from pyspark.sql import functions as F

    return F.when(cond, x).otherwise(y)


def _no_inline(e: Any) -> Any:
    """``e`` itself, as an expression Spark's optimizer does not copy into its uses.

    `add_up_any` reads each operand several times; Spark's CollapseProject inlines a
    deterministic producer into every use when it counts as cheap (a struct's fields), so a
    replay's totals over several releases became expressions that grew exponentially (the
    optimizer ran a 1 GB driver out of heap on nine rows). A non-deterministic producer is never
    inlined: ``rand() >= 0`` always holds, so the value is ``e``, computed once per row.

    What it costs (measured on PySpark 4.3): nothing per row in the report of
    ``bench_floor.py --engine spark``: the analyzed plan holds ``CASE WHEN rand(0) >= 0.0``, the
    optimized plan none (Spark's SimplifyConditionals drops a CASE WHEN whose branches are
    equal, once CollapseProject has run without inlining through it; with CollapseProject left
    out of tabdp's jobs (`_jit_sized_methods`) the physical plan of two chained uses holds no
    ``rand`` either, checked on PySpark 4.3). Removing it (``e``
    itself), or projecting each release's losses as columns and adding the totals from columns
    only, still ran a 1 GB driver out of heap in the analyzer on the nine rows of
    ``test_public_summary_does_not_depend_on_the_data[spark-None]`` (four releases under a curve
    budget): keep it until the growth is found.
    """
    from pyspark.sql import functions as F

    return F.when(F.rand(0) >= F.lit(0.0), e).otherwise(e)


def _add_up_col(a: Any, b: Any) -> Any:
    """`tabdp._numeric.add_up` on Spark columns (the same operations: the same doubles)."""
    return add_up_any(a, b, _spark_where)


class SparkUnitLedger:
    """A session's per-unit running totals as a Spark table (Spark sessions).

    The same role as `tabdp.privacy.ledger.UnitLedger`: one row per unit (its id, or its
    row id when each row is a unit) with summed loss components, the largest size, the per-
    currency columns of curve budgets (``rho@c``, ``size@c``) and each release's ρ
    (``__release_<name>``, reported as ``rho_<name>``). The table never leaves Spark; each
    update is checkpointed locally so the plans of a long session stay short. A superseded
    table's checkpoint is freed at the update after the next (the release that read it has
    ended by then), and the rest when the ledger is garbage-collected, except tables handed
    out (`per_record`, `frame`), which a caller may still read (review r31).

    Args:
        spark: The SparkSession.
        row_mode: Units are row ids (the report then lists every row read).
        rows: Row mode, row ids numbered by the caller: the number of rows read.

    Example:
        >>> SparkUnitLedger(None, row_mode=True).engine
        'spark'
    """

    engine = "spark"
    #: The report is built by Spark from the losses it holds (`tabdp.Report` asks it).
    reports_itself = True

    def __init__(self, spark: Any, row_mode: bool, rows: int | None = None) -> None:
        import weakref

        self.spark = spark
        self.row_mode = row_mode
        self.table: Any = None
        #: The checkpoints this ledger made and has not freed; the ids of those handed out.
        self._owned: list[Any] = []
        self._shown: set[int] = set()
        fin = weakref.finalize(self, _free_unshown, self._owned, self._shown, 0)
        fin.atexit = False  # at exit the Spark context may be gone: nothing to free
        #: Row mode with row ids numbered by the caller (``tabdp run``): the rows read, which
        #: the report lists when the session has not bound its rows itself.
        self.rows = rows
        #: Unit mode: the Spark type of the input's unit column (set when a release reads its
        #: schema before any unit is charged), the unit column of a report without units.
        self.unit_type: Any = None

    @staticmethod
    def _is_max(c: str) -> bool:
        return c == "size" or c.startswith("size@")

    def add(self, frame: Any) -> None:
        """Add a Spark DataFrame of per-unit charges (column ``unit``, ids unique).

        ``size`` columns are combined by maximum, the others by sum; missing columns count as 0.

        Args:
            frame: ``unit`` plus loss columns.

        Example:
            >>> SparkUnitLedger(None, False).table is None
            True
        """
        from pyspark.sql import functions as F

        if self.table is None:  # ids are unique in one release's charges
            self.table = frame.localCheckpoint(eager=True)
            self._owned.append(self.table)
            return
        both = self.table.unionByName(frame, allowMissingColumns=True)
        cols = [c for c in both.columns if c != "unit"]
        # at most two rows per unit (its total, the release's losses): sums by `add_up`
        # (symmetric in its operands: the double the Polars ledger adds), maxima by max
        agg = [F.max(F.coalesce(F.col(c), F.lit(0.0))).alias(c) for c in cols]
        agg += [F.min(F.coalesce(F.col(c), F.lit(0.0))).alias(f"__lo:{c}") for c in cols
                if not self._is_max(c)]
        grouped = both.groupBy("unit").agg(F.count(F.lit(1)).alias("__n"), *agg)
        self.table = grouped.select("unit", *[
            F.col(c) if self._is_max(c) else
            F.when(F.col("__n") > 1, _add_up_col(F.col(f"`__lo:{c}`"), F.col(c)))
            .otherwise(F.col(c)).alias(c) for c in cols]).localCheckpoint(eager=True)
        self._owned.append(self.table)
        # the table before the one this release read: no frame of a running release reads it
        _free_unshown(self._owned, self._shown, 2)

    def lookup(self, units: Any, cols: list[str]) -> Any:
        """Current totals of ``cols`` for a Spark DataFrame of ``unit`` ids (0: never charged).

        Returns a lazy Spark DataFrame over the current table: evaluate (or checkpoint) it
        before the ledger's second update from now, which frees this table (`add`).

        Example:
            >>> SparkUnitLedger(None, False).frame() is None
            True
        """
        from pyspark.sql import functions as F

        have = [c for c in cols if self.table is not None and c in self.table.columns]
        out = units
        if have:
            out = out.join(self.table.select("unit", *have), on="unit", how="left")
            out = out.withColumns({c: self._filled(F.col(f"`{c}`"), c) for c in have})
        return out.select("*", *[F.lit(0.0).alias(c) for c in cols if c not in have])

    def attach(self, frame: Any, cols: list[str]) -> Any:
        """``frame`` (unit ids ``__tabdp_uid``, unique) plus ``__tabdp_led:<c>``: `lookup`'s totals.

        The table is joined to ``frame`` directly: `lookup` on ``frame``'s ids, joined back to
        ``frame``, joined ``frame`` to itself (a shuffle more, and Spark jobs more, per release).
        The same values as `lookup` (`_filled`, its rule): a unit never charged, or a null or
        NaN total, gives 0.0. Lazy, over the current table, as `lookup`'s.

        Example:
            >>> callable(SparkUnitLedger.attach)
            True
        """
        from pyspark.sql import functions as F

        have = [c for c in cols if self.table is not None and c in self.table.columns]
        out = frame
        if have:
            out = out.join(self.table.select(F.col("unit").alias(_UID),
                                             *[F.col(c).alias(f"{_IN}have:{c}") for c in have]),
                           on=_UID, how="left")
        return out.select(*[F.col(f"`{c}`") for c in frame.columns],
                          *[(self._filled(F.col(f"`{_IN}have:{c}`"), c) if c in have
                             else F.lit(0.0)).alias(f"{_IN}led:{c}") for c in cols])

    def _filled(self, col: Any, c: str) -> Any:
        """``col``, the table's total ``c`` after a left join: 0 for a null or NaN (never charged).

        Spark's own ``fillna(0.0)`` on the column's type: ``nanvl`` (NaN to null) on a float or
        double column only, then ``coalesce`` with 0.0 cast to the type. The one rule of
        `lookup` and `attach`.
        """
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        st = self.table.schema[c].dataType
        if isinstance(st, (T.DoubleType, T.FloatType)):
            col = F.nanvl(col, F.lit(None))
        return F.coalesce(col, F.lit(0.0).cast(st))

    def note_unit_type(self, spark_type: Any) -> None:
        """Unit mode: the Spark type of a release's unit column (its schema, never its data).

        Kept while no unit is charged: the unit column of a report without units is of this
        type, as on Polars (`_full`).

        Example:
            >>> led = SparkUnitLedger(None, False)
            >>> led.note_unit_type("long-type")
            >>> led.unit_type
            'long-type'
        """
        if self.table is None:
            self.unit_type = spark_type

    def frame(self) -> Any:
        """The table (a Spark DataFrame, ``None`` before the first release).

        Example:
            >>> SparkUnitLedger(None, True).frame() is None
            True
        """
        return self._show(self.table)

    def _show(self, table: Any) -> Any:
        """``table``, marked as handed out: never freed by the ledger (a caller may read it)."""
        if table is not None:
            self._shown.add(id(table))
        return table

    def _full(self, session: Session) -> Any:
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        want = ["rho", "epsilon", "size", *COMPONENTS,
                *[_release_col(r.name) for r in session.records]]
        want = list(dict.fromkeys(want))
        table = self.table
        if self.row_mode:
            bound = binding.of(session).rows_bound
            n = bound if bound is not None else (self.rows or 0)
            base = self.spark.range(n).withColumnRenamed("id", "unit")
            table = base if table is None else base.join(table, on="unit", how="left")
        elif table is None:  # no unit charged: the input's unit type, as on Polars (else
            # Polars' Int64 for a unit column never read)
            table = self.spark.createDataFrame([], T.StructType(
                [T.StructField("unit", self.unit_type or T.LongType())]))
        have = set(table.columns)
        return table.select("unit", *[(F.coalesce(F.col(c), F.lit(0.0)) if c in have
                                       else F.lit(0.0)).cast("double").alias(c) for c in want])

    def per_record(self, session: Session, delta: float | None) -> Any:
        """CONFIDENTIAL per-record report as a Spark DataFrame (see ``Report.per_record``).

        Example:
            >>> callable(SparkUnitLedger.per_record)
            True
        """
        # the report frame reads the table when the caller evaluates it: never freed
        self._show(self.table)
        return self._report_frame(session, delta)

    def _report_frame(self, session: Session, delta: float | None) -> Any:
        """`per_record`'s frame, the table not marked as handed out (used up by the caller)."""
        from pyspark.sql import functions as F

        full = self._full(session)
        unit_col = session.unit or "row"
        cols = [F.col("unit").alias(unit_col), "rho", "epsilon", "size"]
        if delta is not None:
            cols.append(_eps_delta_udf(delta)(F.struct(*[F.col(c) for c in COMPONENTS]))
                        .alias("epsilon_delta"))
        cols += [F.col(_release_col(r.name)).alias(f"rho_{r.name}") for r in session.records]
        if session.lifetime is not None:  # this run included (committed or not), as Polars
            full = _with_lifetime(session, full, ["rho"], uid="unit", prefix=f"{_IN}life:")
            cols.append(F.col(f"`{_IN}life:rho`").alias("rho_lifetime"))
        with _quiet():
            return full.select(*cols)

    def write_per_record(self, session: Session, delta: float | None, path: Any,
                         rename: dict[str, str] | None = None) -> None:
        """Write the per-record report to one Parquet file by Spark's writer (sorted by id).

        Nothing per row passes through the driver (``Report.write_per_record``).

        Example:
            >>> callable(SparkUnitLedger.write_per_record)
            True
        """
        # written before this returns: the table is not handed out (`per_record`)
        _write_report(self, session, delta, path, rename, frame_of=self._report_frame)

    def rho_summary(self, session: Session, qs: list[float]) -> dict[str, Any]:
        """Units, largest ρ and ρ quantiles (linear interpolation, as numpy), computed in Spark.

        Example:
            >>> callable(SparkUnitLedger.rho_summary)
            True
        """
        return _rho_stats(self._full(session), qs)


def _free_unshown(owned: list[Any], shown: set[int], keep: int) -> None:
    """Free the local checkpoints in ``owned`` but its last ``keep``, except those ``shown``.

    A ledger's superseded tables (`SparkUnitLedger.add`), or all of them when the ledger is
    collected (``keep=0``); a stopped Spark context is ignored (a finalizer must not raise).
    """
    while len(owned) > keep:
        t = owned.pop(0)
        if id(t) not in shown:
            _free_quietly(t)


def _rho_stats(full: Any, qs: list[float], *, pin: bool = False) -> dict[str, Any]:
    """Units, largest ρ and ρ quantiles of a per-unit Spark frame (column ``rho``).

    The quantiles are ``numpy.quantile``'s (linear), bit for bit: Spark finds the order
    statistics they need (exact ranks, `_order_statistics`) and the driver interpolates them
    as numpy does (`tabdp.report.streaming.quantile_ranks`), as the Polars engines do; Spark's
    own ``percentile`` interpolates by another formula (a last-bit difference). Like Polars, a
    null or NaN loss gives NaN quantiles, and a NaN from infinite losses is reported as ∞.
    ``pin``: the ``rho`` column is checkpointed first (a frame costly to evaluate twice, e.g.
    a replay), and freed at the end.
    """
    from pyspark.sql import functions as F

    from tabdp.report.streaming import quantile_ranks

    rho = F.col("rho")
    frame = None
    try:
        with _jit_sized_methods(full.sparkSession):
            frame = _local_checkpoint(full.select(rho)) if pin else full
            row = frame.agg(F.count(F.lit(1)).alias("n"), F.max(rho).alias("mx"),
                            F.sum(F.when(rho == float("inf"), 1).otherwise(0)).alias("inf"),
                            F.sum(F.when(rho.isNull() | F.isnan(rho), 1).otherwise(0))
                            .alias("nan")).collect()[0]
            n = int(row["n"])
            stats: dict[str, Any] = {}
            if n and qs:
                if row["nan"]:
                    vals = np.full(len(qs), np.nan)
                else:
                    ranks, finish = quantile_ranks(n, qs)
                    found = _order_statistics(frame, n, ranks)
                    vals = finish(np.array([found[r] for r in ranks], dtype=np.float64))
                vals = np.where(np.isnan(vals) & bool(row["inf"]), np.inf, vals)
                stats = {f"rho_q{q}": float(v) for q, v in zip(qs, vals, strict=True)}
    finally:
        if pin and frame is not None:
            _free_quietly(frame)
    return {"units": n, "rho_max": float(row["mx"]) if n else None, **stats}


def _order_statistics(frame: Any, n: int, ranks: list[int]) -> dict[int, float]:
    """The values of the 0-based ``ranks`` of the column ``rho`` sorted ascending (no NaN).

    One Spark job: a ``percentile_disc`` per distinct rank, at a level halfway between the
    rank's bounds, so that the rank is exact under both of Spark's formulas (index
    ``ceil(p·n) − 1``, or ``floor(p·(n − 1))`` with ``spark.sql.legacy.percentileDiscCalculation``).
    """
    from pyspark.sql import functions as F

    legacy = str(frame.sparkSession.conf.get("spark.sql.legacy.percentileDiscCalculation",
                                             "false")).lower() == "true"

    def level(r: int) -> float:
        if legacy:
            return 0.0 if n == 1 else min(1.0, (r + 0.5) / (n - 1))
        return (r + 0.5) / n

    wanted = sorted(set(ranks))
    row = frame.agg(*[F.expr(f"percentile_disc({level(r)!r}) WITHIN GROUP (ORDER BY `rho`)")
                      .alias(f"r{i}") for i, r in enumerate(wanted)]).collect()[0]
    return {r: float(row[f"r{i}"]) for i, r in enumerate(wanted)}


class _Checkpoint:
    """A local checkpoint held by a release: ``unpersist`` frees its blocks (`_free_checkpoint`)."""

    def __init__(self, frame: Any) -> None:
        self.frame = frame

    def unpersist(self) -> None:
        """Free the checkpoint's blocks now."""
        _free_checkpoint(self.frame)


class _Numbered:
    """A persisted, numbered snapshot of a row-mode input (`SparkReplayLedger.numbered`).

    ``base`` holds the input's columns and ``__tabdp_mono``; ``rid`` is the row-id expression;
    ``fps`` the row fingerprints of every column, once a release has bound them.
    """

    def __init__(self, source: Any, base: Any, rid: Any) -> None:
        self.source = source
        self.base = base
        self.rid = rid
        self.fps: dict[str, int] | None = None
        #: the programs of ``chain``, in release order
        self.programs: list[Any] = []
        #: (key set, by) -> the rows of an unfiltered release's aggregation (`_unfiltered_rows`)
        self.cells: list[tuple[Any, tuple[str, ...], dict[str, list[Any]]]] = []
        #: the last replay over this snapshot (`replayed`): a plan, no rows
        self.chain: _Replayed | None = None
        #: the session's budget when ``chain`` was built
        self.budget: Any = None

    def replayed(self, spark: Any, sess: Session, programs: list[Any]
                 ) -> tuple[Any, dict[str, str], list[str]]:
        """``programs`` replayed over this snapshot (row ids ``__tabdp_uid``), as `_replay`.

        Each release under a budget replays the earlier ones, and the report all of them: the
        plan of the programs replayed before is extended by the new ones instead of built
        again (every DataFrame operation analyses the whole plan, about 20-45 ms on the deep
        plans of a replay of four or five programs, measured on PySpark 4.3: building every
        replay from the start was 4.4 s of the 13 s of a five-release session of 400 rows).
        Only the plan is kept, no rows; the same plan as a replay from the start.
        """
        st = self.chain
        # the plan reads the session's budget (the filter of each program): a budget assigned
        # since, or another session, or other programs, start the replay again (review r26)
        if st is None or st.session is not sess or self.budget is not sess.budget \
                or st.done > len(programs) \
                or any(a is not b for a, b in zip(self.programs, programs[:st.done],
                                                   strict=False)):
            st = _Replayed(sess, self.base.select("*", self.rid.alias(_UID)), {}, [], [], 0)
        if st.done < len(programs):
            st = _replay_from(spark, sess, st, programs, report=True)
        self.chain = st
        self.budget = sess.budget
        self.programs = list(programs)
        return st.frame, dict(st.names), list(st.rels)

    def rows_per_cell(self, keys: Any, by: list[str]) -> dict[str, list[Any]] | None:
        """The per-cell rows aggregated over this snapshot for ``keys`` and ``by``, if any.

        As columns: name -> one value per cell row (``None`` for a null).
        """
        return next((rows for ks, b, rows in self.cells if ks is keys and b == tuple(by)), None)


def _free_checkpoint(frame: Any) -> None:
    """Free a local checkpoint's blocks now (``unpersist`` leaves them to Spark's cleaner).

    A locally checkpointed DataFrame reads an RDD that holds the blocks; ``unpersist`` of the
    DataFrame only drops a cache entry, which it does not have. Where the plan gives that RDD
    (classic PySpark), it is unpersisted; otherwise the DataFrame is, as before.
    """
    try:
        frame._jdf.queryExecution().logical().rdd().unpersist(False)
    except Exception:  # noqa: BLE001 - not a checkpoint, or no JVM handle: the frame itself
        frame.unpersist()


class SparkReplayLedger:
    """Row mode on Spark without per-row state: the releases' definitions, replayed in Spark.

    The Spark twin of `tabdp.privacy.ledger.ReplayLedger`. In row mode a record's loss
    in a release depends only on its own row and the release's public definition (key set,
    rules, policy, fixed-point scale: a `tabdp.frame._stream.Program`), and whether the
    budget admitted it only on its earlier losses. So the ledger keeps the programs, and every
    record's running totals are recomputed from the input as Spark columns when they are
    needed: by a later release under a budget (its filter reads them), by the per-record report
    and by the loss summary. Nothing per row is kept between releases, in Spark or on the
    driver; the session's row fingerprints make every release (and the report) read the rows
    the earlier releases read.

    Args:
        spark: The SparkSession.

    Example:
        >>> led = SparkReplayLedger(None)
        >>> led.engine, led.programs
        ('spark', [])
    """

    engine = "spark"
    #: The report is built by Spark from the losses it holds (`tabdp.Report` asks it).
    reports_itself = True

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        #: The releases' definitions, in release order.
        self.programs: list[Any] = []
        #: The input of the last release (a Spark DataFrame): the rows the report replays.
        self.source: Any = None
        # the checked, persisted snapshot of the report's input, for len(programs) releases
        self._held: tuple[int, Any, Any] | None = None
        # the numbered snapshot of the last input released (`numbered`)
        self._snap: _Numbered | None = None
        self._replay_of: tuple[Session, tuple[Any, dict[str, str], list[str]]] | None = None
        # row ids numbered by the caller (tabdp run): the last replay over its input (`run`)
        self._run: _Numbered | None = None

    def run(self, source: Any) -> _Numbered:
        """The replays over ``source``, whose rows the caller numbered (``ROW_ID``; tabdp run).

        As over a numbered snapshot (`_Numbered.replayed`): each release under a budget, and
        the report, extend the plan of the last replay over the same DataFrame instead of
        building the replay of every earlier release again. Nothing is persisted: the input
        itself is the base (row ids in ``ROW_ID``).

        Example:
            >>> callable(SparkReplayLedger.run)
            True
        """
        from pyspark.sql import functions as F

        if self._run is None or self._run.source is not source:
            self._run = _Numbered(source, source, F.col(ROW_ID))
        return self._run

    def numbered(self, source: Any) -> _Numbered:
        """The persisted, numbered snapshot of ``source``, shared by its releases and the report.

        The first release over a DataFrame numbers its rows (`_row_ids`) and persists a copy of
        every column; later releases over the same DataFrame object, and the report, read that
        copy instead of the input: the rows the first release read and fingerprinted, with the
        same row ids, so they neither number nor fingerprint them again. A release over
        another DataFrame drops it.

        Example:
            >>> callable(SparkReplayLedger.numbered)
            True
        """
        from pyspark.sql import functions as F

        snap = self._snap
        if snap is not None and snap.source is source:
            return snap
        self.drop_snapshot()
        # a checkpoint, not a cache: the snapshot is trusted without fingerprints by later
        # releases and the report, so blocks lost with an executor must fail the job rather
        # than be recomputed from the input, which may give other rows (review R18-5)
        base, rid, _ = _row_ids(source.select(*[F.col(c) for c in source.columns]),
                                source.columns, checkpoint=True)
        self._snap = _Numbered(source, base, rid)
        return self._snap

    def drop_snapshot(self) -> None:
        """Unpersist the numbered snapshot, if one is held (the next release numbers anew).

        Example:
            >>> SparkReplayLedger(None).drop_snapshot()
        """
        if self._snap is not None:
            self.release()
            _free_checkpoint(self._snap.base)
        self._snap = None

    def install(self, program: Any, source: Any) -> None:
        """Record a release's definition and its input (after the release is drawn).

        Example:
            >>> led = SparkReplayLedger(None)
            >>> led.install("p", None)
            >>> led.programs
            ['p']
        """
        self.release()
        self.programs.append(program)
        self.source = source

    def release(self) -> None:
        """Unpersist the report's snapshot, if one is held.

        Example:
            >>> SparkReplayLedger(None).release()
        """
        if self._held is not None and self._held[2] is not None:
            self._held[2].unpersist()
        self._held = None
        self._replay_of = None

    def lookup(self, units: Any, cols: list[str]) -> dict[str, np.ndarray]:
        """Zeros before any release; after one, the totals exist only as a replay in Spark.

        Raises:
            InvalidParameterError: The session has releases.

        Example:
            >>> SparkReplayLedger(None).lookup(np.array([0, 1]), ["rho"])["rho"].tolist()
            [0.0, 0.0]
        """
        if self.programs:
            raise InvalidParameterError(
                "a Spark session in row mode holds no per-row totals: each release and the "
                "report recompute them in Spark from the input.\nHint: read the totals from "
                "session.report().per_record (a Spark DataFrame).")
        return {c: np.zeros(len(units)) for c in cols}

    def _replayed(self, session: Session) -> tuple[Any, dict[str, str], list[str]]:
        """The input with every program replayed (row ids ``__tabdp_uid``), after the row check."""
        from pyspark.sql import functions as F

        src = self.source
        bound = binding.of(session).bound_columns()
        missing = [c for c in bound if c not in src.columns]
        if session.unit is None and missing:
            _report_refused(session)
        held = self._held
        snap = self._snap
        # tabdp run: the replay over the input extends the releases' (`run`)
        run = self._run if session.unit is not None and self._run is not None \
            and self._run.source is src else None
        if held is not None and held[0] == len(self.programs) and self._replay_of is not None \
                and self._replay_of[0] is session:
            # the per-record report and the loss summary read one replay (a plan, no rows):
            # building it again cost 1.5 s of a five-release session of 400 rows
            return self._replay_of[1]
        if held is None or held[0] != len(self.programs):
            self.release()
            base = None
            if session.unit is None and snap is not None and snap.source is src \
                    and snap.fps is not None:
                # the rows the last release read, numbered and fingerprinted by it
                frame = None
            elif session.unit is None:
                used = list(dict.fromkeys(
                    [*bound, *[c for p in self.programs for c in (*p.by, *p.measures)]]))
                base, rid, _ = _row_ids(src.select(*[F.col(c) for c in used]), used)
                try:
                    row = base.agg(F.count(F.lit(1)).alias("n"), *[
                        a for i, c in enumerate(bound)
                        for a in _fp_sums(_fingerprint(rid, c, src.schema[c].dataType),
                                          f"{_IN}fp{i}")]).collect()[0]
                    try:
                        binding.of(session).bind_rows(
                            int(row["n"] or 0),
                            {c: _fp_total(row, f"{_IN}fp{i}") for i, c in enumerate(bound)})
                    except InvalidParameterError:
                        _report_refused(session)
                except BaseException:
                    base.unpersist()
                    raise
                frame = base.select("*", rid.alias(_UID))
            else:
                frame = src.select("*", F.col(session.unit).alias(_UID))
            held = self._held = (len(self.programs), frame, base)
        frame = held[1]
        if frame is None:  # over the numbered snapshot: the releases' replay, extended
            assert snap is not None
            out = snap.replayed(self.spark, session, self.programs)
        elif run is not None:
            out = run.replayed(self.spark, session, self.programs)
        else:
            out = _replay(self.spark, session, frame, self.programs, report=True)
        self._replay_of = (session, out)
        return out

    def per_record(self, session: Session, delta: float | None) -> Any:
        """CONFIDENTIAL per-record report as a Spark DataFrame, replayed over the input.

        The same columns as `SparkUnitLedger.per_record`: the row id (``row``), ``rho``,
        ``epsilon``, ``size``, ``epsilon_delta`` with a δ, and ``rho_<release>``. Refused
        (nothing computed) when the input no longer holds the rows the releases read.

        The replay is computed here, with tabdp's job settings (`_jit_sized_methods`), and
        the rows are returned as a local checkpoint (`_local_checkpoint`, eager): the frame's
        plan is the checkpoint alone, so the caller's own jobs over it (a collect, a write,
        ``tabdp run``'s view of the largest losses) neither replay the releases again nor
        optimize the replay's chain of projections without those settings (review r56 F5:
        with Spark's CollapseProject, collecting the report of five releases of nine rows ran
        a 1 GB driver out of heap). The blocks are freed by Spark's cleaner once the frame is
        no longer referenced. The report's file (`write_per_record`) and its summary
        (`rho_summary`) read the replay itself (`_report_frame`), within the settings.

        Example:
            >>> callable(SparkReplayLedger.per_record)
            True
        """
        if not self.programs:
            return self._report_frame(session, delta)
        with _jit_sized_methods(self.spark):
            return _local_checkpoint(self._report_frame(session, delta))

    def _report_frame(self, session: Session, delta: float | None) -> Any:
        """The per-record report as the replay's plan (`per_record`; run it within the settings)."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        unit_col = session.unit or "row"
        if not self.programs:
            cols = ["rho", "epsilon", "size", *(["epsilon_delta"] if delta is not None else [])]
            return self.spark.createDataFrame([], T.StructType(
                [T.StructField(unit_col, T.LongType()),
                 *[T.StructField(c, T.DoubleType()) for c in cols]]))
        frame, names, rels = self._replayed(session)

        def total(c: str) -> Any:
            return F.col(names[c]) if c in names else F.lit(0.0)

        cols = [F.col(_UID).cast("long").alias(unit_col),
                *[total(c).cast("double").alias(c) for c in ("rho", "epsilon", "size")]]
        if delta is not None:
            with _quiet():
                cols.append(_eps_delta_udf(delta)(F.struct(*[total(c).alias(c)
                                                             for c in COMPONENTS]))
                            .alias("epsilon_delta"))
        cols += [F.col(r).alias(f"rho_{p.name}") for r, p in zip(rels, self.programs,
                                                                  strict=True)]
        with _quiet():
            return frame.select(*cols)

    def write_per_record(self, session: Session, delta: float | None, path: Any,
                         rename: dict[str, str] | None = None) -> None:
        """Write the per-record report to one Parquet file by Spark's writer (sorted by id).

        Nothing per row passes through the driver (``Report.write_per_record``).

        Example:
            >>> callable(SparkReplayLedger.write_per_record)
            True
        """
        _write_report(self, session, delta, path, rename, frame_of=self._report_frame)

    def rho_summary(self, session: Session, qs: list[float]) -> dict[str, Any]:
        """Units, largest ρ and ρ quantiles, replayed and computed in Spark.

        Example:
            >>> SparkReplayLedger(None).rho_summary(None, [0.5])
            {'units': 0, 'rho_max': None}
        """
        if not self.programs:
            return {"units": 0, "rho_max": None}
        with _jit_sized_methods(self.spark):  # the replay's checks (row ids, fingerprints)
            return _rho_stats(self._report_frame(session, None), qs, pin=True)


def _report_refused(session: Session) -> None:
    """Refuse a report whose input no longer holds the session's rows (no count in it)."""
    raise InvalidParameterError(
        "the per-record report of a Spark session in row mode is recomputed from its input, "
        "and the input no longer holds the rows its releases read (a table or file rewritten "
        "since, or a plan that gives other rows on each evaluation), so the report was not "
        "produced.\nHint: keep the input unchanged until the report is written, or release a "
        "fixed copy (e.g. spark_df.localCheckpoint()).")


class _Replayed(NamedTuple):
    """A replay's state after its first ``done`` programs (`_replay_from`).

    ``frame`` holds the running totals (columns ``names``: ledger column -> its column), each
    program's ρ when the replay was made for a report (``rels``) and the cell column of each
    (key set, by) joined so far (``cells_of``). A replay extended by further programs names
    its columns as a replay of them all from the start would: the same plan.
    """

    session: Any
    frame: Any
    names: dict[str, str]
    rels: list[str]
    cells_of: list[tuple[tuple[Any, Any], str]]
    done: int


def _replay(spark: Any, sess: Session, frame: Any, programs: list[Any], *,
            report: bool = False) -> tuple[Any, dict[str, str], list[str]]:
    """Replay ``programs`` over ``frame`` (row ids in ``__tabdp_uid``): running totals as columns.

    `_replay_from` from the start; see it.
    """
    st = _replay_from(spark, sess, _Replayed(sess, frame, {}, [], [], 0), programs,
                      report=report)
    return st.frame, st.names, st.rels


def _replay_from(spark: Any, sess: Session, start: _Replayed, programs: list[Any], *,
                 report: bool = False) -> _Replayed:
    """Replay ``programs[start.done:]`` after ``start``'s (row ids in ``__tabdp_uid``).

    For each program in release order: its cell (a broadcast join of its key set), the rows
    its rules keep and their fixed-point values, its charges (the exact Spark expressions of
    `_charge_exprs`, else the numpy policy in `_charge_udf`), the budget filter on
    the totals so far (`_admit_udf`: ``individual_filter`` itself) and the admitted losses
    added to the totals in the in-memory ledger's order, so every total is the double the
    in-memory ledger would hold.

    Returns:
        The state after every program: the frame, ledger column → the frame's column of its
        total (``rho``, ``epsilon``, ``size``, the other accounting components and, under a
        curve budget, ``rho@<c>`` / ``size@<c>``), and, with ``report``, the columns of each
        program's ρ.
    """
    from pyspark.sql import functions as F

    budget = sess.budget
    curve = budget is not None and budget.per_currency
    frame = start.frame
    sschema = {f.name: f.dataType for f in frame.schema.fields}
    names = dict(start.names)
    rels = list(start.rels)
    cells_of = list(start.cells_of)  # (key set, by) -> its cell column

    def total(c: str) -> Any:
        return F.col(names[c]) if c in names else F.lit(0.0)

    for j, prog in enumerate(programs[start.done:], start=start.done):
        rules = prog.rules
        parts = {m: _measure_parts(m, sschema[m], rules) for m in prog.measures}
        keep = _keep_mask(parts, rules, F.lit(True), None)
        summed = list(prog.measures) if prog.kind == "sum" else []
        vcol = {m: f"{_IN}pv{j}_{i}" for i, m in enumerate(summed)}
        rcol, ccol, chcol = f"{_IN}pr{j}", f"{_IN}pc{j}", f"{_IN}pch{j}"
        # the fixed-point values as doubles: a charge reads |value| as a double only, and
        # this double is the one the exact decimal converts to (`_fixed_double`)
        frame = frame.select("*", *[F.when(keep & ~parts[m]["bad"],
                                           _fixed_double(m, sschema[m], rules))
                                    .otherwise(F.lit(0.0)).alias(vcol[m]) for m in summed],
                             keep.cast("long").alias(rcol))
        same = next((c for (ks, by), c in cells_of if ks is prog.keys and by == prog.by), None)
        if same is not None:  # the cells of an earlier program: the same keys, the same join
            frame = frame.withColumn(ccol, F.col(same))
        else:
            frame = _attach_cells(spark, frame, prog.keys, list(prog.by), sschema) \
                .withColumnRenamed(_CELL, ccol)
            cells_of.append(((prog.keys, prog.by), ccol))
        inside = F.col(ccol).isNotNull() & (F.col(rcol) > 0)
        mech = prog.policy.mechanism
        exprs = _charge_exprs(mech, summed, prog.kind, prog.bits, True, None, rows_col=rcol,
                              value_cols=vcol)
        if exprs is not None:
            charge = F.struct(*exprs)
        else:
            udf, _ = _charge_udf(mech, summed, prog.kind, prog.bits)
            if prog.kind == "count":
                inp = [F.col(rcol).cast("double").alias(f"{_IN}rows_in")]
            else:
                inp = [F.abs(F.col(vcol[m])).cast("double").alias(f"{_IN}a:{m}") for m in summed]
                if prog.policy.joint:
                    inp += [F.signum(F.col(vcol[m]).cast("double")).alias(f"{_IN}s:{m}")
                            for m in summed]
            charge = udf(F.struct(*inp))
        with _quiet():
            frame = frame.select("*", charge.alias(chcol))
        # the charge's fields as columns of their own (``__tabdp_pch<j>_<field>``): the totals add
        # them rounded up (`add_up_any` reads each operand several times), and a struct whose
        # fields are only extracted counts as cheap to inline in Spark's CollapseProject, which
        # then copied every charge expression into every use: plans grew exponentially with
        # the programs and currencies (a four-release replay ran the 1 GB driver out of heap)
        fields = frame.schema[chcol].dataType.fieldNames()
        frame = frame.select(*[F.col(f"`{c}`") for c in frame.columns if c != chcol],
                             *[_no_inline(F.col(f"{chcol}.{f}")).alias(f"{chcol}_{f}")
                               for f in fields])
        curs = [c for c, _ in prog.policy.currencies()]
        if budget is None:
            oks: dict[str, Any] = {f"ok{i}": F.lit(True) for i in range(len(curs))}
        else:
            need = _led_need(budget, curs)
            ok = _admit_exprs(budget, [F.col(f"{chcol}_r{i}") for i in range(len(curs))],
                              total("rho"))
            if ok is not None:  # a constant budget: a Spark expression
                frame = frame.withColumn(f"{_IN}pok{j}", ok)
                oks = {f"ok{i}": F.col(f"{_IN}pok{j}") for i in range(len(curs))}
            else:
                fields = [F.col(f"{chcol}_{k}{i}").alias(f"{k}{i}")
                          for i in range(len(curs)) for k in ("r", "e", "s")]
                fields += [total(c).alias(f"l{k}") for k, c in enumerate(need)]
                admit = _admit_udf(budget, curs, prog.policy.guarantee, need)
                with _quiet():
                    frame = frame.select("*", admit(F.struct(*fields)).alias(f"{_IN}pok{j}"))
                oks = {f"ok{i}": F.col(f"{_IN}pok{j}.ok{i}") for i in range(len(curs))}

        def col(name: str, _ch: str = chcol, _oks: dict[str, Any] = oks) -> Any:
            return _oks[name] if name in _oks else F.col(f"{_ch}_{name}")

        comps, _, _ = _loss_exprs(len(curs), prog.policy.guarantee, prog.policy.approx, col)
        upd: dict[str, Any] = {}
        for k in COMPONENTS:
            v = F.when(inside, comps[k]).otherwise(F.lit(0.0))
            upd[k] = F.greatest(total(k), v) if k == "size" else _add_up_col(total(k), v)
        if curve:
            for i, c in enumerate(curs):
                ok = inside & col(f"ok{i}")
                upd[f"rho@{c}"] = _add_up_col(total(f"rho@{c}"),
                                              F.when(ok, col(f"r{i}")).otherwise(0.0))
                upd[f"size@{c}"] = F.greatest(total(f"size@{c}"),
                                              F.when(ok, col(f"s{i}")).otherwise(0.0))
        out = {}
        for k, e in upd.items():
            names.setdefault(k, f"{_IN}acc{len(names)}")
            out[names[k]] = _no_inline(e)
        if report:
            rels.append(f"{_IN}rel{j}")
            out[f"{_IN}rel{j}"] = F.when(inside, comps["rho"]).otherwise(F.lit(0.0))
        frame = frame.withColumns(out)
    return _Replayed(sess, frame, names, rels, cells_of, len(programs))


def _eps_delta_udf(delta: float) -> Any:
    """Each row's ε at ``delta``: a pandas UDF of `tabdp._spark_worker.eps_delta_fn`."""
    from pyspark.sql.functions import pandas_udf

    return pandas_udf(_spark_worker.eps_delta_fn(delta), "double")


# -- row-level expressions ---------------------------------------------------------------------
def _half_even(x: Any) -> Any:
    """``x`` rounded half to even, as a double column: Java's ``Math.rint``, then ``+ 0.0``.

    The value of ``bround(x, 0)`` for every finite or infinite double (``bround`` converts each
    double to a ``BigDecimal`` through its decimal string, about four times the CPU at 5M rows,
    measured), except that ``rint`` keeps the sign of a zero result (``rint(-0.3)`` is ``-0.0``):
    adding ``0.0`` makes it ``0.0``, as ``bround`` gives.
    """
    from pyspark.sql import functions as F

    return F.rint(x) + F.lit(0.0)


def _exact_fixed(xd: Any) -> Any:
    """``round_half_even(x·2**24)`` of a double column as an exact ``decimal(38,0)``.

    Spark casts a double to a decimal through its shortest decimal string, which drops digits
    beyond 2**53; the integer is split into two parts below 2**53 (both exact) and recombined
    in decimal arithmetic.
    """
    from pyspark.sql import functions as F

    clipped = F.least(F.greatest(xd, F.lit(-MAX_ABS)), F.lit(MAX_ABS))
    v = _half_even(clipped * F.lit(float(2**SUM_SCALE_BITS)))
    hi = F.floor(v / F.lit(_SPLIT))          # exact: a power-of-two division, then floor
    lo = v - hi.cast("double") * F.lit(_SPLIT)  # exact: the low 44 bits of an integer
    return (hi.cast(_DEC) * F.lit(int(_SPLIT)).cast(_DEC) + lo.cast("long").cast(_DEC)) \
        .cast(_DEC)


_PART_BITS = 22  # an exact fixed-point value in long parts: 22-bit ones and a signed top part


def _fixed_longs(m: str, st: Any, rules: _Rules, use: Any) -> list[Any]:
    """``_measure_parts(m)["fixed"]`` where ``use`` holds, else 0, as ``long`` parts.

    Part ``k`` weighs ``2**(22·k)``: every part but the last is in ``[0, 2**22)``, the last is
    signed (so the value is negative exactly when it is). Each part summed as a ``long`` is
    exact up to 2**40 rows, and a ``long`` sum is code-generated, unlike a ``decimal(38,0)``
    one (Java ``BigDecimal`` additions); `_sum_longs` recombines them on the driver. A float
    value is split from the same double ``round_half_even(x·2**24)`` as `_exact_fixed`.
    """
    from pyspark.sql import functions as F

    mask = F.lit((1 << _PART_BITS) - 1)
    x = F.col(m)
    if _is_floatlike(st):
        xd = x.cast("double")
        clipped = F.least(F.greatest(xd, F.lit(-MAX_ABS)), F.lit(MAX_ABS))
        v = _half_even(clipped * F.lit(float(2**SUM_SCALE_BITS)))
        if rules.negatives == "zero":
            v = F.greatest(v, F.lit(0.0))
        v = F.when(use, v).otherwise(F.lit(0.0))
        hi = F.floor(v / F.lit(_SPLIT))             # exact, |hi| <= 2**44 (a long)
        lo = (v - hi.cast("double") * F.lit(_SPLIT)).cast("long")  # exact, in [0, 2**44)
        return [lo.bitwiseAND(mask), F.shiftright(lo, _PART_BITS), hi.bitwiseAND(mask),
                F.shiftright(hi, _PART_BITS)]
    xl = x.cast("long")
    if rules.negatives == "zero":
        xl = F.greatest(xl, F.lit(0).cast("long"))
    xl = F.when(use, xl).otherwise(F.lit(0).cast("long"))
    return [xl.bitwiseAND(mask), F.shiftright(xl, _PART_BITS).bitwiseAND(mask),
            F.shiftright(xl, 2 * _PART_BITS)]


def _fixed_double(m: str, st: Any, rules: _Rules) -> Any:
    """``_measure_parts(m)["fixed"]`` cast to a double, without the decimal.

    A float value's fixed point is the double ``round_half_even(x·2**24)`` itself (an integer
    a double holds exactly, which the decimal holds exactly too); an integer's is the integer
    rounded to the nearest double, as ``cast(decimal(38,0) as double)`` rounds it.
    """
    from pyspark.sql import functions as F

    x = F.col(m)
    if _is_floatlike(st):
        clipped = F.least(F.greatest(x.cast("double"), F.lit(-MAX_ABS)), F.lit(MAX_ABS))
        v = _half_even(clipped * F.lit(float(2**SUM_SCALE_BITS)))
    else:
        v = x.cast("long").cast("double")
    if rules.negatives == "zero":
        v = F.greatest(v, F.lit(0.0))
    return v


def _measure_parts(m: str, st: Any, rules: _Rules) -> dict[str, Any]:
    """Spark twin of ``_engine._measure_parts``: flags and the exact fixed-point value."""
    from pyspark.sql import functions as F

    x = F.col(m)
    false = F.lit(False)
    if _is_floatlike(st):
        xd = x.cast("double")
        missing = x.isNull() | F.isnan(xd)
        inf = F.coalesce(F.abs(xd) == F.lit(float("inf")), false)
        # NaN is above every number in Spark too: a missing value is never counted as clamped
        big = F.coalesce(F.abs(xd) > F.lit(MAX_ABS), false) & ~inf & ~missing
        fixed = _exact_fixed(xd)
    else:
        missing = x.isNull()
        inf = false
        big = false
        fixed = x.cast(_DEC)
    neg = F.coalesce(x < 0, false)
    if rules.negatives == "zero":
        fixed = F.greatest(fixed, F.lit(0).cast(_DEC))
    return {"missing": missing, "inf": inf, "big": big, "neg": neg, "fixed": fixed,
            "bad": missing | inf}


# -- keys -------------------------------------------------------------------------------------
def _key_compare_dtype(st: Any) -> Any:
    """The Polars dtype a Spark key column is matched as (`common_dtype`), without data.

    `_pl_dtype`, and the kinds it leaves as ``Object``: a ``timestamp_ntz`` is a ``Datetime``
    and an interval a ``Duration``, so that integer keys against them are refused as on Polars
    (stop 64: an interval's cast to ``bigint`` is its seconds, and the key ``1`` took the rows
    of one second; ``timestamp_ntz`` against integer keys failed in Spark's analysis).

    Nested types keep their types inside, as Polars holds the same data: an ``array`` is a
    ``List`` of its element's dtype, a ``struct`` a ``Struct`` of its fields', and a ``map`` a
    ``List`` of ``Struct({"key", "value"})`` (as Polars reads a Parquet or Arrow map), so that
    `common_dtype` applies the kinds rule to the values inside as on Polars (review nest65:
    `_pl_dtype`'s ``List(Null)`` and empty ``Struct`` paired nothing, and an ``array<bigint>``
    against a key set of lists of dates was refused only as a dtype Spark keys cannot hold).

    Example:
        >>> from pyspark.sql import types as T
        >>> _key_compare_dtype(T.ArrayType(T.StructType([T.StructField("a", T.LongType())])))
        List(Struct({'a': Int64}))
        >>> _key_compare_dtype(T.MapType(T.StringType(), T.DateType()))
        List(Struct({'key': String, 'value': Date}))
    """
    # a timestamp as `_pl_dtype`'s (no zone: matched, not converted)
    return _walk_dtype(st, pl.Datetime("us"), arrow_maps=False, intervals=True)


def _check_nested_keys(c: str, have: Any, want: Any, target: Any) -> None:
    """Refuse a nested key column against a nested key set Polars does not convert it to.

    `common_dtype` has already refused values of another kind inside, and a nested column
    against scalar keys or the reverse (the message Polars frames get; Spark refused these in
    its analysis, an ``AnalysisException`` naming ``TRY_CAST``, review nest65, and the check
    here is shared since keys65b). A conversion Polars refuses is refused with Polars' own
    check and message (`_check_conversion`). Nested against nested goes on to `_spark_type`,
    which refuses nested keys on Spark.
    """
    if not (_is_nested(have) or _is_nested(want)) or target == have:
        return
    _check_conversion(c, have, want, target)


def _cell_keys(keys: KeySet, by: list[str], schema: dict[str, Any]
               ) -> tuple[pl.DataFrame, list[Any], dict[str, Any], Any]:
    """The key set as `_attach_cells` joins it, and every refusal of the cells (no data read).

    From the data's Spark schema and the public keys alone: key dtypes Spark cannot hold,
    key values that do not convert to the comparison type, distinct keys that become equal
    there. Returns the keys' frame (with ``_CELL``), their Spark fields, each key column's
    expression over the data, and the expression of a row whose key does not convert.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    keys_pl = keys.to_polars().select(by)
    kcols: dict[str, pl.Series] = {}
    fields = []
    on_data: dict[str, Any] = {}
    bad = F.lit(False)
    for i, c in enumerate(by):
        have = _key_compare_dtype(schema[c])
        want = keys_pl.schema[c]
        target = common_dtype(c, have, want)
        if target is None:
            target = want
        _check_nested_keys(c, have, want, target)
        if target == pl.Int128:
            target = pl.Int64  # Spark integers are at most 64-bit: larger keys match no row
        if target == pl.Binary and pl.Binary != want:
            # bytes against text (or a key set of nulls only): Spark casts bytes to text
            # without failing, and holds no bytes keys
            target = want if isinstance(want, _TEXT) else pl.String
        try:
            kc = keys_pl[c].cast(target, strict=target != pl.Int64)
        except Exception as err:  # the public key set does not convert: data-free error
            raise ColumnTypeError(
                f"key column {c!r} is {have} in the data but {want} in the key set, and the key "
                f"set's values cannot be converted to {target}.\n"
                "Hint: build the key set with values of the data's type.") from err
        if isinstance(kc.dtype, (pl.Categorical, pl.Enum)):
            kc = kc.cast(pl.String)
        kcols[f"{_IN}key{i}"] = kc
        st = _spark_type(kc.dtype)
        fields.append(T.StructField(f"{_IN}key{i}", st, True))
        if st == schema[c]:
            on_data[c] = F.col(c)
        else:
            conv = _try_cast(F.col(c), st, schema[c])
            back = _try_cast(conv, schema[c], st)
            back_ok = F.coalesce(back.eqNullSafe(F.col(c)), F.lit(False))
            on_data[c] = F.when(back_ok | F.col(c).isNull(), conv)
            bad = bad | (F.col(c).isNotNull() & ~back_ok)
    kframe = pl.DataFrame(kcols).with_row_index(_CELL).with_columns(pl.col(_CELL).cast(pl.Int64))
    # keys whose conversion failed (non-strict Int64 cast) cannot match any row: drop them
    kframe = kframe.filter(pl.all_horizontal(
        [pl.col(k).is_not_null() | keys_pl[c].is_null() for k, c in
         zip(kcols, by, strict=True)]))
    check_keys_distinct(kframe.rename({k: c for k, c in zip(kcols, by, strict=True)}), by,
                         {c: _pl_dtype(schema[c]) for c in by}, keys_pl.schema)
    return kframe, fields, on_data, bad


def _attach_cells(spark: Any, data: Any, keys: KeySet, by: list[str],
                  schema: dict[str, Any]) -> Any:
    """Spark twin of ``_engine._attach_cells``: ``_CELL`` by a broadcast join of the key set."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not by:
        return data.withColumn(_CELL, F.lit(0).cast("long"))
    kframe, fields, on_data, bad = _cell_keys(keys, by, schema)
    fields.insert(0, T.StructField(_CELL, T.LongType(), False))
    kdf = _local_frame(spark, kframe, T.StructType(fields))  # NaN, null, Int64 exact
    work = data.select("*", *[e.alias(f"{_IN}dk{i}") for i, e in enumerate(on_data.values())],
                       bad.alias(f"{_IN}badkey"))
    cond = None
    for i in range(len(by)):
        e = work[f"{_IN}dk{i}"].eqNullSafe(kdf[f"{_IN}key{i}"])
        cond = e if cond is None else cond & e
    joined = work.join(F.broadcast(kdf), on=cond, how="left")
    cell = F.when(F.col(f"{_IN}badkey"), F.lit(None).cast("long")).otherwise(F.col(_CELL))
    return joined.select(*[F.col(c) for c in data.columns], cell.alias(_CELL))


# -- policies on the executors ----------------------------------------------------------------
def _charge_udf(mechanism: Mechanism, measures: list[str], kind: str,
                bits: dict[str, int]) -> tuple[Any, list[tuple[str, list[str]]]]:
    """A pandas UDF of per-(unit, cell) charges, by the same numpy code as ``_engine._charges``.

    Per row: each currency's ρ, ε (ε_a, δ_a) and size, and the row's total ρ and size. The
    function is `tabdp._spark_worker.charge_fn`'s: a new Python worker that unpickles it
    imports NumPy, pandas and the mechanism's module, not Polars or the frame engine.
    """
    from pyspark.sql.functions import pandas_udf

    charge, curs = _spark_worker.charge_fn(mechanism, measures, kind, bits, _IN)
    approx = mechanism.dp_delta is not None
    fields = []
    for i, _ in enumerate(curs):
        fields += [f"r{i} double", f"e{i} double", f"s{i} double"]
        if approx:
            fields += [f"ea{i} double", f"da{i} double"]
    fields += ["cell_rho double", "cell_size double"]
    return pandas_udf(charge, ", ".join(fields)), curs


def _charge_exprs(mechanism: Mechanism, measures: list[str], kind: str, bits: dict[str, int],
                  row_mode: bool, max_rows: int | None, rows_col: str = _ROWS,
                  value_cols: dict[str, str] | None = None) -> list[Any] | None:
    """Per-(unit, cell) charges as Spark expressions, when they equal the numpy policy exactly.

    The same columns as `_charge_udf` (``r<i>``, ``e<i>``, ``s<i>`` (``ea<i>``, ``da<i>``)
    per currency, then ``cell_rho`` and ``cell_size``), computed by the same operations in the
    same order: each measure's magnitude ``|x|·2**-bits`` (the next double up from ``2**53``,
    as ``_engine._abs_float_up``) and the policy of `tabdp.frame._policy_expr.policy_plan`
    (an exact closed form, or for counts an exact table of the numpy policy at Δ = 0, 1, … up
    to the public bound on a unit's rows: 1 in row mode, ``max_rows``). None when any output
    would only be an upper bound of the numpy value (joint mechanisms, transcendental forms,
    tables): the caller then keeps the pandas UDF, so both engines charge identical losses.
    ``value_cols`` names the column holding each measure's fixed-point value (default: the
    measure's own name).
    """
    from pyspark.sql import functions as F

    from tabdp.frame._policy_expr import _D as _DELTA
    from tabdp.frame._policy_expr import (
        COUNT_TABLE_MAX,
        _closed_forms,
        _next_up,
        _render_spark,
        policy_plan,
    )

    policy = _Policy(mechanism, measures if kind == "sum" else [])
    if policy.joint:
        return None
    max_delta = (1 if row_mode else max_rows) if kind == "count" else None
    if max_delta is None:
        # only counts' exact tables: the closed forms round up with error-free checks whose
        # Spark trees ran the driver out of heap (h75); the pandas UDF gives the same doubles
        return None
    if max_delta > COUNT_TABLE_MAX and any(
            f is None or f[0] != "exact" for f in (_closed_forms(mechanism) or [None])):
        # above the counts' integer tables only an exact closed form is used: a policy
        # without one would get a table of bounds (or the numpy policy), built here for
        # nothing (the certified Subbotin (ε, δ) table costs several CPU-seconds)
        return None
    plan = policy_plan(mechanism, kind, max_delta=max_delta)
    if not all(m == "exact" for m in plan.methods):
        return None
    cols: list[Any] = []
    cell_rho: Any = F.lit(0.0)
    cell_size: Any = F.lit(0.0)
    for i, (_, ms) in enumerate(policy.currencies()):
        if kind == "count":
            delta = F.col(rows_col).cast("double")
        else:
            a = F.abs(F.col((value_cols or {}).get(ms[0], ms[0]))).cast("double")
            f = a * F.lit(2.0 ** -bits[ms[0]])
            delta = F.when(a >= F.lit(float(1 << 53)), _render_spark(_next_up(_DELTA), f, {})) \
                .otherwise(f)
        size = F.greatest(F.lit(0.0), delta)  # np.maximum(zeros, size) of _size_and_delta
        cache: dict[int, Any] = {}
        vals = [_render_spark(n, delta, cache) for n in plan.nodes]
        cols += [vals[0].alias(f"r{i}"), vals[1].alias(f"e{i}"), size.alias(f"s{i}")]
        if policy.approx:
            cols += [vals[2].alias(f"ea{i}"), vals[3].alias(f"da{i}")]
        cell_rho = vals[0] if i == 0 else _add_up_col(cell_rho, vals[0])  # as `add_up`
        cell_size = F.greatest(cell_size, size)
    return [*cols, cell_rho.alias("cell_rho"), cell_size.alias("cell_size")]


def _admit_batch(budget: Any, curs: list[str], guarantee: str, b: pd.DataFrame,
                 lifetime: Any = None) -> dict[str, np.ndarray]:
    """The one individual filter on a batch of units (charges and ``__tabdp_led:`` ledger columns).

    `tabdp._spark_worker.admit_batch` with this engine's column prefix: with a lifetime budget
    (``lifetime``), the same filter again over the units' lifetime totals (``__tabdp_life:``
    columns), ANDed, as ``Session.admit`` does on the other engines.
    """
    return _spark_worker.admit_batch(budget, curs, guarantee, b, _IN, lifetime)


def _admit_fn(budget: Any, curs: list[str], guarantee: str, approx: bool,
              lifetime: Any = None) -> Any:
    """MapInPandas function: the session's own individual filter on batches of units."""
    return _spark_worker.admit_fn(budget, curs, guarantee, _IN, _UID, lifetime)


def _led_need(budget: Any, curs: list[str]) -> list[str]:
    """The ledger columns the individual filter reads (`tabdp.privacy.filter.prior_columns`)."""
    from tabdp.privacy.filter import prior_columns

    return prior_columns(budget, curs)


def _admit_exprs(budget: Any, rho: list[Any], led_rho: Any) -> Any:
    """A constant budget's filter as a Spark expression (``None`` for curve budgets).

    `tabdp.privacy.filter.constant_admits` itself, on columns: the query's ρ summed over
    currencies from 0.0 in currency order, added to the unit's earlier total, compared with the
    limit (a NaN loss is never within it: Spark orders NaN above every number). Every currency
    gets the same decision.
    """
    from pyspark.sql import functions as F

    from tabdp.privacy.filter import constant_admits

    if budget.per_currency:
        return None
    return constant_admits(F.lit(float(budget.constant)), rho, led_rho, F.lit(0.0),
                           where=_spark_where)


def _admit_udf(budget: Any, curs: list[str], guarantee: str, need: list[str]) -> Any:
    """Scalar pandas UDF of the individual filter, row by row (no join back to the rows).

    Input: a struct of ``r<i>``, ``e<i>``, ``s<i>`` per currency and ``l<k>``, the unit's
    earlier total of ``need[k]``; output: a struct of ``ok<i>`` per currency. The decision is
    `tabdp.privacy.filter.individual_filter` itself (`tabdp._spark_worker.admit_batch`), as
    `_admit_fn`.
    """
    from pyspark.sql.functions import pandas_udf

    admit = _spark_worker.admit_rows_fn(budget, curs, guarantee, need, _IN)
    return pandas_udf(admit, ", ".join(f"ok{i} boolean" for i in range(len(curs))))


# -- the lifetime ledger of a release series (tabdp.Ledger) ------------------------------------
def _filters(sess: Session) -> bool:
    """Whether a release of ``sess`` runs the individual filter (a per-run or lifetime budget)."""
    return sess.budget is not None or sess.lifetime is not None


def _check_lifetime_units(sess: Session, sschema: dict[str, Any]) -> None:
    """Refuse (by the unit column's type, before any data is read) ids the ledger cannot key.

    The ledger's own check (`tabdp.Ledger.check_release`): an open ledger, integer or text
    ids of the type of the series' earlier runs.
    """
    if sess.lifetime is None or sess.unit is None or sess.unit not in sschema:
        return
    sess.lifetime.check_release(_pl_dtype(sschema[sess.unit]))


def _lifetime_frame(sess: Session, spark: Any, cols: list[str], key_type: Any,
                    prefix: str) -> Any:
    """The ledger's lifetime totals of ``cols`` as a Spark frame: ``__tabdp_lkey``, ``prefix+c``.

    Stored plus this run's uncommitted losses (`tabdp.Ledger.totals`), one row per unit the
    series charged; the ids as ``key_type`` (``long`` or ``string``: the ledger's types).
    """
    from pyspark.sql import types as T

    led = sess.lifetime
    assert led is not None
    long = isinstance(key_type, T.LongType)
    tot = led.totals(cols)
    tot = tot.select(pl.col("unit").cast(pl.Int64 if long else pl.String).alias(f"{_IN}lkey"),
                     *[pl.col(c).alias(f"{prefix}{c}") for c in cols])
    schema = T.StructType([T.StructField(f"{_IN}lkey", key_type, True),
                           *[T.StructField(f"{prefix}{c}", T.DoubleType(), True) for c in cols]])
    return _local_frame(spark, tot, schema)


def _life_key(st: Any) -> Any:
    """The type unit ids of Spark type ``st`` are joined to the ledger as (``long``/``string``)."""
    from pyspark.sql import types as T

    return T.LongType() if isinstance(st, T.IntegralType) else T.StringType()


def _with_lifetime(sess: Session, frame: Any, cols: list[str], uid: str = _UID,
                   prefix: str = f"{_IN}life:") -> Any:
    """``frame`` plus each unit's lifetime totals of ``cols`` (``prefix+c``; 0.0: never charged).

    The ledger's totals are joined to the units in Spark: nothing per unit of the data reaches
    the driver.
    """
    from pyspark.sql import functions as F

    key = _life_key(frame.schema[uid].dataType)
    life = _lifetime_frame(sess, frame.sparkSession, cols, key, prefix)
    lkey = f"{_IN}lkey"
    out = frame.withColumn(lkey, F.col(uid).cast(key)).join(life, on=lkey, how="left")
    return out.drop(lkey).fillna(0.0, subset=[f"{prefix}{c}" for c in cols])


def _lifetime_charges(sess: Session, decided: Any, any_ok: Any, comps: dict[str, Any],
                      curs: list[tuple[str, list[str]]]
                      ) -> tuple[pl.Series, dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """The admitted units' lifetime charges, collected for `tabdp.Ledger.charge` (or ``None``).

    The columns ``Session._charge_lifetime`` builds on the other engines, in its order: the
    loss components (sums; ``size`` a maximum), then per currency ``rho@c`` and ``size@c``
    (0.0 where the unit was left out of that currency). The ledger lives on the driver (its
    state is a Polars frame written by delta-rs), so each admitted unit's losses are collected
    once per release: one row per unit, the same doubles as the Spark ledger's.
    """
    from pyspark.sql import functions as F

    if sess.lifetime is None:
        return None
    sums = [c for c in COMPONENTS if c != "size"]
    cols = [F.col(_UID).alias("unit"), *[comps[c].alias(c) for c in sums],
            comps["size"].alias("size")]
    for i, (c, _) in enumerate(curs):
        cols += [F.when(F.col(f"ok{i}"), F.col(f"r{i}")).otherwise(0.0).alias(f"rho@{c}"),
                 F.when(F.col(f"ok{i}"), F.col(f"s{i}")).otherwise(0.0).alias(f"size@{c}")]
    # typed on every PySpark (`_to_polars`: Arrow, or PySpark 3.5's rows as Python values).
    # Until stop 65 PySpark 3.5 went through pandas: an integer unit column holding a null
    # came back Float64 (ids above 2**53 rounded, two units charged as one) and no rows
    # came back untyped (object columns)
    got = _to_polars(decided.filter(any_ok).select(*cols))
    ns = [c for c, _ in curs]
    out_sums = {c: got[c].to_numpy().astype(np.float64) for c in
                [*sums, *[f"rho@{c}" for c in ns]]}
    out_max = {c: got[c].to_numpy().astype(np.float64) for c in
               ["size", *[f"size@{c}" for c in ns]]}
    return got["unit"], out_sums, out_max


# -- the release ------------------------------------------------------------------------------
def _open(native: Any, session: Session | None, name: str | None, kind: str,
          measures: list[str], by: list[str]) -> tuple[Any, Session, bool, str, Any,
                                                       dict[str, Any]]:
    """Session, name, (author mode: pinned) frame and schema of a Spark release (no data read)."""
    spark = native.sparkSession
    one_off = session is None
    sess = Session() if session is None else session
    qname = sess.release_name(name, kind)
    unit = sess.unit
    if unit is not None and (unit in by or unit in measures):
        raise InvalidParameterError(
            f"the unit column {unit!r} cannot also be a measure or a group-by key.\n"
            "Hint: the unit identifies who contributes; group and measure other columns.")
    _refuse_reserved(list(native.columns), unit)
    # row ids that a join may have repeated (Session(_rows_one_cell=False)) are units: grouped
    row_mode = unit is None or (unit == ROW_ID and sess.rows_one_cell)
    # row mode fingerprints every column; unit mode names only the release's columns
    _refuse_case_clashes(list(native.columns), _case_insensitive(spark),
                         None if row_mode else [*by, *measures, *([unit] if unit else [])])
    ledger: Any = None
    if not sess.records:
        # row mode: the releases' definitions, replayed in Spark (no per-row state), unless
        # the session asks for the per-row ledger (streaming=False); unit mode: per unit
        replay = unit is None and binding.of(sess).streaming_choice is not False
        ledger = SparkReplayLedger(spark) if replay else SparkUnitLedger(spark, row_mode)
    use_engine(sess, "spark", ledger)
    sdf = native
    if sess.mode == "author":  # bound to one frame object, its data pinned at binding
        # (a frame other than the bound one raises the data-free refusal)
        sdf = bind_frame(sess, native, pin=lambda f: f.localCheckpoint(eager=True))
    sschema = {f.name: f.dataType for f in sdf.schema.fields}
    pschema = pl.Schema({c: _pl_dtype(t) for c, t in sschema.items()})
    _schema_checks(pschema, measures, by, unit)
    if unit is not None and unit in pschema.names():
        binding.of(sess).check_unit_dtype(unit, pschema[unit], len(sess.records))
        if isinstance(sess.ledger, SparkUnitLedger):
            sess.ledger.note_unit_type(sschema[unit])
    _check_lifetime_units(sess, sschema)
    return spark, sess, one_off, qname, sdf, sschema


def _refuse_reserved(columns: list[str], unit: str | None) -> None:
    """Refuse (from the schema alone) an input with columns named with tabdp's prefix.

    Every column the Spark engine adds next to the input's (the rules' flags, row ids, the
    replayed releases' totals, the ledger's totals...) is named ``__tabdp_...`` (`_IN`), and
    a measure, key or unit so named is refused (`tabdp.frame._engine._check_args`, `Session`);
    an input column so named is refused here, so no added column can replace an input column
    (the Polars engine reads only the query's columns and refuses ``__tabdp_row`` in row
    mode). The row ids a caller numbered itself (``unit=ROW_ID``, tabdp run) are the exception.

    Example:
        >>> _refuse_reserved(["x", "__acc0", "__tabdp_row"], "__tabdp_row")
        >>> _refuse_reserved(["x", "__tabdp_cell"], None)
        Traceback (most recent call last):
        ...
        tabdp.exceptions.InvalidParameterError: the frame has column(s) ['__tabdp_cell'] ...
    """
    clash = sorted(c for c in columns if is_reserved(c) and c != unit)
    if clash:
        raise InvalidParameterError(
            f"the frame has column(s) {clash} starting with {RESERVED!r} (in any letter case: "
            "Spark resolves names without regard to case), which tabdp reserves "
            "for its own columns: the Spark engine adds them next to the input's, where a "
            "column of the same name would be replaced.\nHint: drop or rename those columns "
            "before the release (e.g. spark_df.drop(*names)); they are not read by any release.")


def _case_insensitive(spark: Any) -> bool:
    """Whether the session resolves column names without regard to case (Spark's default)."""
    return str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() != "true"


def fold_case(name: str) -> str:
    """A column name as a case-insensitive Spark session compares it (a key; not a name).

    Spark compares names in two ways, neither Python's ``str.lower``: its column resolution
    by ``toLowerCase(Locale.ROOT)`` (Java's final sigma is decided by word boundaries, so
    ``X_Σ`` lowers to ``x_ς`` there and to ``x_σ`` in Python) and its ``withColumns``/``drop``
    by ``equalsIgnoreCase``, letter by letter through the upper case (``ıd`` and ``id`` are
    one name there, two for both lowerings; stop 65). This key is each letter's lower case
    of its upper case, single letters only (Java's ``Character`` mappings: ``ß`` stays
    ``ß``), ``İ`` as ``i`` and the combining dot above left out: names either comparison of
    Spark takes for one have the same key (a few it keeps apart share one: refused too).

    Args:
        name: A column name.

    Returns:
        The key names that Spark may not tell apart share.

    Example:
        >>> [fold_case(n) for n in ("X_Σ", "x_ς", "ıd", "İD", "ẞ", "ß", "ss")]
        ['x_σ', 'x_σ', 'id', 'id', 'ß', 'ß', 'ss']
    """
    out = []
    for ch in name:
        if ch == "\u0307":  # combining dot above: Java lowers İ to i + it, or to i alone
            continue
        up = ch.upper()
        if len(up) != 1:  # a full mapping (ß -> SS): Java's letter by letter keeps the letter
            up = ch
        low = up.lower()
        if len(low) != 1:  # İ -> i + dot above (its only full lower case mapping)
            low = "i"
        out.append(low)
    return "".join(out)


def unknown_letters(columns: Sequence[str]) -> list[str]:
    """Column names holding a code point Python's Unicode database does not know.

    The JVM's Unicode may be newer: such a letter may have a case twin there that
    `fold_case` cannot know of, so a case-insensitive Spark session's names are refused.

    Example:
        >>> unknown_letters(["x", "a" + chr(0x378), "b" + chr(0x10FFF0)]) == ["a" + chr(0x378)]
        True
    """
    return [c for c in columns if any(unicodedata.category(ch) == "Cn" for ch in c)]


def case_clashes(columns: Sequence[str]) -> list[list[str]]:
    """Groups of column names a case-insensitive Spark session cannot tell apart (`fold_case`).

    Example:
        >>> case_clashes(["x", "g", "X", "G", "y"])
        [['x', 'X'], ['g', 'G']]
        >>> case_clashes(["a", "b"])
        []
        >>> case_clashes(["X_Σ", "x_ς", "ıd", "Id"])
        [['X_Σ', 'x_ς'], ['ıd', 'Id']]
    """
    groups: dict[str, list[str]] = {}
    for c in columns:
        groups.setdefault(fold_case(c), []).append(c)
    return [g for g in groups.values() if len(g) > 1]


def _refuse_case_clashes(columns: list[str], insensitive: bool,
                         used: Sequence[str] | None = None) -> None:
    """Refuse (from the schema alone) columns a case-insensitive Spark session cannot tell apart.

    With ``spark.sql.caseSensitive=false`` (Spark's default) a frame with columns ``x`` and
    ``X`` cannot name either: a row-mode release (which fingerprints every column) over it
    failed with Spark's own ``AMBIGUOUS_REFERENCE`` error, whichever columns it used, where the
    Polars engines (case sensitive) release the tables (review rev63k). ``used``: the only
    columns the release names (unit mode), refused only if one of them is in such a group (a
    unit-mode release that names neither column went through before, and still does: review
    rev63d); None: every column (row mode).

    Example:
        >>> _refuse_case_clashes(["x", "X"], insensitive=False)
        >>> _refuse_case_clashes(["g", "x", "X"], insensitive=True, used=["g"])
        >>> _refuse_case_clashes(["g", "x", "X"], insensitive=True)
        Traceback (most recent call last):
        ...
        tabdp.exceptions.InvalidParameterError: the frame has columns whose names differ only ...
    """
    clash = case_clashes(columns) if insensitive else []
    unknown = unknown_letters(columns if used is None else list(used)) if insensitive else []
    if used is not None:
        named = {fold_case(c) for c in used}
        clash = [g for g in clash if fold_case(g[0]) in named]
    if unknown:
        raise InvalidParameterError(
            f"the frame has column(s) {unknown} holding characters this Python's Unicode "
            f"database (version {unicodedata.unidata_version}) does not know; the Spark "
            "session resolves column names without regard to case "
            "(spark.sql.caseSensitive=false, Spark's default), and whether its JVM takes such "
            "a name for another cannot be checked. Nothing was read.\nHint: rename those "
            "columns (e.g. spark_df.toDF(*new_names), which renames by position), or set "
            "spark.sql.caseSensitive=true in the session.")
    if clash:
        raise InvalidParameterError(
            f"the frame has columns whose names differ only in letter case ({clash}); the "
            "Spark session resolves column names without regard to case "
            "(spark.sql.caseSensitive=false, Spark's default), so it cannot tell them apart. "
            "Nothing was read.\nHint: drop or rename all but one of each group first (e.g. "
            "spark_df.toDF(*new_names), which renames by position), or set "
            "spark.sql.caseSensitive=true in the session.")


# the numbered snapshot's storage level (None: Spark's default for a local checkpoint, rows
# kept deserialized in the JVM heap); PySpark 3.5's localCheckpoint takes no level
SNAPSHOT_LEVEL: Any = "disk"


def _local_checkpoint(frame: Any, eager: bool = True) -> Any:
    """A local checkpoint of ``frame`` at ``SNAPSHOT_LEVEL`` where PySpark takes one.

    A local checkpoint truncates the lineage at any storage level: a lost block fails the job
    ("Checkpoint block ... not found"), it is never recomputed from the input (review R18-5).
    Eager by default; lazy (``eager=False``), its blocks are written by the first job over it.
    """
    import inspect

    from pyspark import StorageLevel

    # PySpark's MEMORY_AND_DISK is serialized in the JVM (Scala's MEMORY_AND_DISK_SER)
    level = {"serialized": StorageLevel.MEMORY_AND_DISK, "disk": StorageLevel.DISK_ONLY,
             None: None}[SNAPSHOT_LEVEL]
    if level is None or "storageLevel" not in inspect.signature(
            type(frame).localCheckpoint).parameters:  # PySpark 3.5: the default level only
        return frame.localCheckpoint(eager=eager)
    return frame.localCheckpoint(eager=eager, storageLevel=level)


def _held_checkpoint(frame: Any, hold: list[Any]) -> Any:
    """A local checkpoint of ``frame``, held in ``hold`` before its blocks are written.

    Lazy, appended to ``hold``, then written by one job: if that job fails, the blocks it
    wrote are still freed with the release's other held frames (`SparkBackend.close`); an
    eager checkpoint that fails returns nothing to free (review r26).
    """
    cp = _local_checkpoint(frame, eager=False)
    hold.append(_Checkpoint(cp))
    cp.count()
    return cp


def _row_ids(flagged: Any, columns: list[str], checkpoint: bool = False
             ) -> tuple[Any, Any, list[str]]:
    """Row ids in the order the input is read (partition by partition, row by row).

    Returns the persisted frame (with ``__tabdp_mono``), the row-id expression and the columns to
    fingerprint. Only the number of rows of each partition reaches the driver. With
    ``checkpoint`` the frame is a local checkpoint (a lost block fails the job; it is never
    recomputed from the input) instead of a persisted cache.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    base = flagged.select("*", F.monotonically_increasing_id().alias(_MONO))
    # a lazy checkpoint: its blocks are written by the job that counts the partitions' rows
    # below (one job over the input, not two: the eager checkpoint's count, then this count
    # over the blocks); if that job fails, the blocks it wrote are freed here
    base = (_local_checkpoint(base, eager=False) if checkpoint
            else base.persist(StorageLevel.MEMORY_AND_DISK))
    try:
        per_part = base.groupBy(F.shiftright(F.col(_MONO), 33).alias("p")) \
            .agg(F.count(F.lit(1)).alias("n")).collect()
    except BaseException:
        if checkpoint:
            _free_checkpoint(base)
        raise
    n_parts = 1 + max((int(r["p"]) for r in per_part), default=-1)
    sizes = [0] * n_parts
    for r in per_part:
        sizes[int(r["p"])] = int(r["n"])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64).tolist() \
        if n_parts else [0]
    pid = F.shiftright(F.col(_MONO), 33).cast("int")
    offset = F.element_at(F.array(*[F.lit(int(o)) for o in offsets]), pid + 1)
    rid = (offset + F.col(_MONO).bitwiseAND(F.lit((1 << 33) - 1))).cast("long")
    return base, rid, list(columns)


def _fingerprint(rid: Any, column: str, dtype: Any) -> Any:
    """A row's fingerprint of ``column``: a hash of its id and value (a signed 64-bit ``long``).

    The row check sums it over the rows, exactly (`_fp_sums`, `_fp_total`). Spark's
    ``xxhash64`` hashes a decimal by its unscaled digits only (``100`` as ``decimal(10,0)`` and
    ``1.00`` as ``decimal(10,2)`` hash alike), so a decimal's scale is hashed with it: a column
    rewritten in other units is another column. Likewise a date or timestamp is hashed with its
    type (an ``int`` and a ``date``, a ``timestamp`` and a ``timestamp_ntz`` of the same integer
    hash alike).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    parts = [rid, F.col(column)]
    if _unhashable(dtype):
        # Spark's hashes refuse a map (its entries have no canonical order) and a variant,
        # at any depth: an unused column of such a type stopped every row-mode release with
        # Spark's HASH_MAP_TYPE error (review rev63k); hashed as its JSON text and its type
        # (timestamps at full precision in UTC: Spark's default JSON format keeps milliseconds
        # in the session's time zone, so maps a microsecond apart hashed alike; review rev63d),
        # each map's entries sorted first (`_canonical`: the order of a map's entries is no
        # part of its value; stop 64)
        canon = _canonical(F.col(column), dtype)  # a variant's: its JSON text already
        text = canon if type(dtype).__name__ == "VariantType" else F.to_json(canon, _JSON_EXACT)
        parts = [rid, text, F.lit(dtype.simpleString())]
    elif isinstance(dtype, T.DecimalType):
        parts.append(F.lit(int(dtype.scale)))
    elif isinstance(dtype, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        parts.append(F.lit(dtype.simpleString()))
    return F.xxhash64(*parts)


#: `to_json` options of a map's fingerprint: every timestamp at its full (microsecond)
#: precision, in UTC whatever the session's time zone
_JSON_EXACT = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
               "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS", "timeZone": "UTC",
               "ignoreNullFields": "false"}


def _canonical(col: Any, dtype: Any) -> Any:
    """A value of ``dtype`` with every map (at any depth) as its entries sorted, for hashing.

    A Spark map has no order of its own (Spark compares no maps; a map built from the same
    entries in another order is the same value), but its JSON text follows the order its
    entries happen to be stored in: two equal maps fingerprinted differently, so a frame
    rebuilt with the same maps was refused as another frame (stop 64). A map becomes the
    array of its ``(key, value)`` entries, sorted (keys are distinct, and orderable once their
    own maps are arrays; a variant is its JSON text), ties broken by the key's JSON text (keys
    Spark orders as equal: ``-0.0`` and ``0.0``); nulls stay nulls, so a null map and an
    empty one differ. Types without a map or a variant are left as they are.

    Example:
        >>> _canonical.__name__  # (PySpark columns: see tests/frame/test_spark.py)
        '_canonical'
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not _unhashable(dtype):
        return col
    if isinstance(dtype, T.MapType):
        kt, vt = dtype.keyType, dtype.valueType
        # sorted by the key, its value, then the key's JSON text: Spark orders -0.0 and 0.0
        # (at any depth of a key) as equal, so a map read with both keys and equal values
        # kept the order it was stored in, and two equal maps hashed differently (stop 65);
        # the text tells them apart (``-0.0``, ``0.0``) and is dropped after the sort
        entries = F.array_sort(F.transform(F.map_entries(col), lambda e: F.struct(
            _canonical(e.getField("key"), kt).alias("k"),
            _canonical(e.getField("value"), vt).alias("v"),
            F.to_json(F.array(_canonical(e.getField("key"), kt)), _JSON_EXACT).alias("t"))))
        return F.transform(entries, lambda e: F.struct(e.getField("k").alias("k"),
                                                       e.getField("v").alias("v")))
    if isinstance(dtype, T.ArrayType):
        et = dtype.elementType
        return F.transform(col, lambda x: _canonical(x, et))
    if isinstance(dtype, T.StructType):
        # each field by its position (a cast renames positionally): a struct's field names may
        # repeat or differ only in letter case, and `getField` of such a name is ambiguous
        # (review rev64s: AMBIGUOUS_REFERENCE_TO_FIELDS stopped the release)
        at = col.cast(T.StructType([T.StructField(f"_{i}", f.dataType, True)
                                    for i, f in enumerate(dtype.fields)]))
        return F.when(col.isNotNull(), F.struct(*[
            _canonical(at.getField(f"_{i}"), f.dataType).alias(f.name)
            for i, f in enumerate(dtype.fields)]))
    return F.to_json(col, _JSON_EXACT)  # a variant


def _unhashable(dtype: Any) -> bool:
    """Whether Spark's hash functions refuse a type: a map or a variant, at any depth.

    Example:
        >>> _unhashable.__name__  # (PySpark types: see tests/frame/test_spark.py)
        '_unhashable'
    """
    from pyspark.sql import types as T

    if isinstance(dtype, T.MapType) or type(dtype).__name__ == "VariantType":
        return True
    if isinstance(dtype, T.ArrayType):
        return _unhashable(dtype.elementType)
    if isinstance(dtype, T.StructType):
        return any(_unhashable(f.dataType) for f in dtype.fields)
    return False


_FP_BITS = 22  # a 64-bit hash in three parts: 22 bits, 22 bits and the signed top 20


def _fp_sums(h: Any, name: str) -> list[Any]:
    """Aggregates of a column of 64-bit hashes whose combination is their exact sum.

    Each hash is split into three parts (two unsigned 22-bit ones and its signed top 20 bits),
    each summed as a ``long``: exact up to 2**40 rows, and codegen'd, unlike a ``decimal(38,0)``
    sum (Java ``BigDecimal`` additions). `_fp_total` recombines them on the driver.
    """
    from pyspark.sql import functions as F

    mask = F.lit((1 << _FP_BITS) - 1)
    return [F.sum(h.bitwiseAND(mask)).alias(f"{name}_0"),
            F.sum(F.shiftright(h, _FP_BITS).bitwiseAND(mask)).alias(f"{name}_1"),
            F.sum(F.shiftright(h, 2 * _FP_BITS)).alias(f"{name}_2")]


def _fp_total(row: Any, name: str) -> int:
    """The exact sum of the hashes `_fp_sums` aggregated under ``name`` (0 for no rows)."""
    return sum(int(row[f"{name}_{k}"] or 0) << (k * _FP_BITS) for k in range(3))


def spark_grouped_release(native: Any, *, kind: str, measures: str | Sequence[str] | None,
                          by: str | Sequence[str] | None, keys: KeySet,
                          mechanism: Mechanism | None, session: Session | None = None,
                          level: float = DEFAULT_LEVEL,
                          nulls: str = "error", name: str | None = None, grid: Any = None,
                          negatives: str = DEFAULT_NEGATIVES, max_cells: int | None = None,
                          max_rows: int | None = None, form: str = "wide",
                          cv: bool = False) -> Any:
    """Release noisy sums or counts of a PySpark DataFrame (``spark_df.dp.sum`` / ``count``).

    Same arguments, checks, privacy accounting and (for one seed) the same estimates as
    `tabdp.frame._release.grouped_release`; see the module docstring for where each step
    runs.

    Args:
        native: A PySpark DataFrame.
        kind: ``"sum"`` or ``"count"``.
        measures: Columns to sum (ignored for counts).
        by: Group-by columns (exactly the key set's columns).
        keys: The public key set.
        mechanism: The mechanism.
        session: Session to record in (default: a fresh one, see
            [`last_session`][tabdp.last_session]).
        level: Confidence level of the margins of error.
        nulls: ``"error"``, ``"zero"`` or ``"drop"``.
        name: Label of the release in the session.
        grid: Public rounding grid.
        negatives: Rule for negative values (see ``grouped_release``).
        max_cells: Public bound on the cells one unit contributes to (unit mode).
        max_rows: Public bound on the rows one unit counts in one cell (counts).
        form: ``"wide"`` or ``"long"`` (see `tabdp.frame._output`).
        cv: Wide form: add ``_cv`` and ``_flag`` columns.

    Returns:
        A PySpark DataFrame: the key columns, then per measure the estimate, ``_sd``, ``_moe``,
        ``_lower`` and ``_upper``; one row per key, in key order.

    Example:
        >>> callable(spark_grouped_release)
        True
    """
    if not is_spark_frame(native):
        raise UnsupportedBackendError(
            f"the Spark engine releases PySpark DataFrames; got {type(native).__name__}.")
    pre = _prepare_release(kind, measures, by, keys, mechanism, session, level, nulls, grid,
                           max_cells, max_rows)
    measure_list, by_list, mechanism = pre.measures, pre.by, pre.mechanism
    spark, sess, one_off, qname, sdf, sschema = _open(native, session, name, kind,
                                                      measure_list, by_list)
    rules, policy = _release_rules(sess, kind, mechanism, nulls, negatives, measure_list)
    bits = {m: 0 if _pl_dtype(sschema[m]).is_integer() else SUM_SCALE_BITS for m in measure_list}
    from tabdp.frame.pipeline import execute

    op = _Opened(sess, one_off, qname, sdf, "spark",
                 pl.Schema({c: _pl_dtype(t) for c, t in sschema.items()}), native)
    rel = Planned(op, pre, kind, keys, rules, policy, bits, nulls, check_form(form), cv)
    with _jit_sized_methods(spark):
        return execute(rel, SparkBackend(spark, sschema))


class _SparkState(NamedTuple):
    """What `SparkBackend.record` needs of a release's pass: the ledger's input."""

    program: Any  # row mode, replayed: (Program, source frame) to install; else None
    decided: Any  # per-unit charges with the filter's decisions (persisted)
    any_ok: Any  # the admitted-unit flag (a column expression)
    comps: dict[str, Any]  # the admitted losses' components (column expressions)
    extra: dict[str, Any]  # the release's report column and curve-budget ledger columns
    curs: list[tuple[str, list[str]]]  # the release's currencies (the lifetime charges)


class SparkBackend:
    """The Spark backend of the release pipeline (`tabdp.frame.backends.base.Backend`).

    Every step that touches records runs in Spark (see the module docstring); the driver
    receives the cell totals (at most the key set) and small summaries. The session's ledger
    is a Spark table (`SparkUnitLedger`) or the releases' definitions (`SparkReplayLedger`).

    Args:
        spark: The SparkSession.
        sschema: The input's Spark schema (column -> Spark type).

    Example:
        >>> SparkBackend(None, {}).engine
        'spark'
    """

    engine = "spark"

    def __init__(self, spark: Any, sschema: dict[str, Any]) -> None:
        """Hold the Spark session and the input's schema; frames persisted go to ``_hold``."""
        self._spark = spark
        self._sschema = sschema
        self._hold: list[Any] = []

    def aggregate(self, rel: Planned) -> Aggregated:
        """Snapshot, checks, cells, charges, the individual filter and totals, in Spark.

        Args:
            rel: The planned release.

        Returns:
            The cell totals and the confidential summaries.
        """
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        op, pre = rel.op, rel.pre
        spark, sschema = self._spark, self._sschema
        sdf: Any = op.lf  # the input: a Spark frame (pinned in author mode)
        sess, qname, kind, keys, nulls = op.session, op.name, rel.kind, rel.keys, rel.nulls
        rules, policy, bits, form, cv = rel.rules, rel.policy, rel.bits, rel.form, rel.cv
        measure_list, by_list, mechanism, level = pre.measures, pre.by, pre.mechanism, pre.level
        released, grids, max_cells, max_rows = (pre.released, pre.grids, pre.max_cells,
                                                pre.max_rows)
        unit = sess.unit
        row_mode = unit is None or (unit == ROW_ID and sess.rows_one_cell)
        uid = unit if unit is not None else ROW_ID
        binding.phase(sess, qname, "reading and aggregating the input (Spark)")

        # 1. One snapshot of the input (persisted: validation, cells and totals read it).
        parts = {m: _measure_parts(m, sschema[m], rules) for m in measure_list}
        unit_bad = None
        if unit is not None:
            unit_bad = F.col(unit).isNull()
            if _is_floatlike(sschema[unit]):
                unit_bad = unit_bad | F.isnan(F.col(unit).cast("double"))
        keep = _keep_mask(parts, rules, F.lit(True), unit_bad)
        counters: dict[str, Any] = {}
        for m, p in parts.items():
            counters[f"missing:{m}"] = p["missing"]
            if _is_floatlike(sschema[m]):
                counters[f"inf:{m}"] = p["inf"]
                counters[f"big:{m}"] = p["big"]
            counters[f"neg:{m}"] = p["neg"]  # counted under every rule (confidential audit)
        if unit_bad is not None:
            counters[f"null:{unit}"] = unit_bad
        names = list(counters)
        cnt = {k: f"{_IN}c{i}" for i, k in enumerate(names)}
        zero = F.lit(0).cast(_DEC)
        vname = {m: f"{_IN}v{i}" for i, m in enumerate(measure_list)}
        row_values = [F.when(F.col(_KEEP) & ~p["bad"], p["fixed"]).otherwise(zero)
                      .alias(vname[m]) for m, p in parts.items()]
        flagged = sdf.select("*", keep.alias(_KEEP))
        row_cols = [*row_values, F.col(_KEEP).cast("long").alias(_ROWS),
                    *[F.when(e, 1).otherwise(0).cast("long").alias(cnt[k])
                      for k, e in counters.items()]]
        fp_cols: list[str] = []
        ledger = sess.ledger
        replay = isinstance(ledger, SparkReplayLedger)
        # under a budget, the earlier releases are replayed on this snapshot: the filter reads
        # each row's totals so far (columns led); without one every row is admitted
        prior = list(ledger.programs) if replay and sess.budget is not None else []
        led: list[str] = []
        if replay and unit is None:
            _require_bound(sess, sdf.columns)
        numbered = None
        if unit is None:
            # row ids in the order the input is read: partition by partition, row by row
            if replay:
                # one numbered snapshot per input, held by the ledger across its releases and
                # the report: a later release over it neither re-reads nor re-numbers the input
                numbered = ledger.numbered(sdf)
                base, rid = numbered.base, numbered.rid
                fp_cols = [] if numbered.fps is not None else list(sdf.columns)
                persisted = []
            else:
                base, rid, fp_cols = _row_ids(sdf.select(*[F.col(c) for c in sdf.columns]),
                                              sdf.columns)
                persisted = [base]
            pre = base
            # the release's own columns are read above the replay: the replay's columns all
            # start with ``__tabdp_``, a prefix no input column has (`_open`), so none replaces
            # an input column (review r27)
            if prior:
                # the earlier releases replayed over the snapshot itself (row ids ``__tabdp_uid``):
                # the ledger extends the plan of the last replay over it (`_Numbered.replayed`)
                assert numbered is not None
                pre, led = _with_totals(spark, sess, None, prior, policy, numbered=numbered)
            src = pre.select("*", keep.alias(_KEEP)).select(
                *[F.col(c) for c in pre.columns], *row_cols)
            if replay and not _filters(sess) and not sess.track_cells:
                # `_unfiltered_rows`: the exact values as long parts (no decimal arithmetic)
                values = [e.alias(f"{_IN}v{i}_{k}") for i, m in enumerate(measure_list)
                          for k, e in enumerate(_fixed_longs(
                              m, sschema[m], rules, (F.col(_ROWS) == 1) & ~parts[m]["bad"]))]
            else:
                values = [F.col(vname[m]).alias(m) for m in measure_list]
            rows = src.select(rid.alias(ROW_ID), *[F.col(c) for c in by_list], *values,
                              F.col(_ROWS), F.lit(1).cast("long").alias(_ALL),
                              *[F.col(v) for v in cnt.values()],
                              *[_fingerprint(rid, c, sschema[c]).alias(f"{_IN}fp{i}")
                                for i, c in enumerate(fp_cols)], *[F.col(c) for c in led])
            snap = rows
            if prior and numbered is not None and numbered.fps is not None:
                # a local checkpoint cuts the replay's lineage: the summary, the charges and
                # the filter each ran the replay again, and each of their DataFrame operations
                # and jobs analysed and optimised its whole plan (a five-release session of
                # 400 rows: 16.2 s -> 14.6 s with this alone, on PySpark 4.3); on disk, as the
                # numbered snapshot, freed when the release ends (`SparkBackend.close`).
                # Only over rows an earlier release has checked (``numbered.fps``): writing
                # the checkpoint evaluates the replay on every row, which over unchecked rows
                # would run before the row check's data-free refusal (`_bind`), and a row the
                # replay cannot evaluate (a text value cast to a number) would fail with an
                # error naming it (review r26)
                snap = _held_checkpoint(rows, self._hold)
        elif unit == ROW_ID and replay:
            # row ids numbered by the caller, one row per record (tabdp run): no group-by needed
            src = flagged.select(*[F.col(c) for c in sdf.columns], *row_cols)
            if prior:
                # the earlier releases replayed over the input itself, extending the plan of
                # the last replay over it (`SparkReplayLedger.run`); the release's keep flags
                # and row values added above the replay (independent columns), as in row mode
                pre, led = _with_totals(spark, sess, None, prior, policy,
                                        numbered=ledger.run(sdf))
                src = pre.select("*", keep.alias(_KEEP)).select(
                    *[F.col(c) for c in pre.columns], *row_cols)
            snap = src.select(F.col(ROW_ID), *[F.col(c) for c in by_list],
                              *[F.col(vname[m]).alias(m) for m in measure_list], F.col(_ROWS),
                              *[F.col(v) for v in cnt.values()], F.lit(1).cast("long").alias(_ALL),
                              *[F.col(c) for c in led])
            snap = snap.persist(StorageLevel.MEMORY_AND_DISK)
            persisted = [snap]
        elif unit == ROW_ID:
            snap = flagged.select(F.col(ROW_ID), *[F.col(c) for c in by_list], *row_cols,
                                  F.lit(1).cast("long").alias(_ALL)) \
                .groupBy(ROW_ID, *by_list).agg(
                    *[F.sum(vname[m]).cast(_DEC).alias(m) for m in measure_list],
                    *[F.sum(c).alias(c) for c in [_ROWS, *cnt.values(), _ALL]])
            snap = snap.persist(StorageLevel.MEMORY_AND_DISK)
            persisted = [snap]
        else:
            # held by the session's snapshot cache, not by the release (`_unit_snapshot`)
            snap = _unit_snapshot(sess, sdf, unit, by_list, measure_list, rules, flagged,
                                  row_cols, vname, cnt)
            persisted = []
        program = None
        if replay:
            from tabdp.frame._stream import Program

            program = (Program(qname, kind, tuple(by_list), keys, tuple(measure_list), rules,
                               policy, bits), sdf)
        self._hold.extend(persisted)
        try:
            return _finish(spark, sess, self._hold, qname, kind, snap, sschema, measure_list,
                           by_list, keys, mechanism, level, nulls, released, grids, max_cells,
                           max_rows, rules, policy, uid, unit, row_mode, bits, cnt, fp_cols,
                           form=form, cv=cv, led=led, program=program, numbered=numbered)
        except Exception as err:
            if not row_mode and not isinstance(err, TabdpError):
                # Spark failed over the kept snapshot (e.g. its blocks lost with an executor):
                # not kept for the next release, which would fail alike (review r31)
                _drop_unit_snapshot(sess)
            raise

    def check(self, rel: Planned | PlannedQuantile) -> None:
        """Spark's refusals from the schema and the public keys alone, before any read.

        The key set against the data's Spark types (`_cell_keys`: key dtypes Spark cannot hold,
        key values that do not convert, keys that become equal) and, in a replaying row-mode
        session, the columns its earlier releases bound (`_require_bound`).

        Args:
            rel: The planned release.
        """
        if rel.by:
            _cell_keys(rel.keys, list(rel.by), self._sschema)
        sess = rel.op.session
        if isinstance(sess.ledger, SparkReplayLedger):
            _require_bound(sess, rel.op.lf.columns)

    def quantile_data(self, rel: PlannedQuantile) -> QuantileData:
        """A median's pass in Spark: checks, cells, charges, the filter, per-cell quantiles.

        Each cell's values are sorted and its quantile and smooth sensitivity computed inside
        Spark (one group per cell, by `tabdp.frame._quantiles.cell_quantiles`); the driver
        receives one (value, smooth sensitivity) pair per released cell.

        Args:
            rel: The planned median or quantile.

        Returns:
            Each cell's exact quantile and smooth sensitivity with the confidential counts;
            ``state`` is the ledger's input for `record_quantile`.
        """
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from tabdp.privacy.budget import ROWS_CURRENCY

        op, column, by_list, keys, nulls = rel.op, rel.column, rel.by, rel.keys, rel.nulls
        spark, sschema = self._spark, self._sschema
        sdf: Any = op.lf
        sess, qname, policy = op.session, op.name, rel.policy
        qv, (lo, hi), gamma = rel.q, rel.bounds, rel.mechanism.gamma
        unit = sess.unit
        row_mode = unit is None
        uid = unit if unit is not None else ROW_ID
        binding.phase(sess, qname, "reading and aggregating the input (Spark)")
        x = F.col(column).cast("double")
        flags: dict[str, Any] = {f"missing:{column}": x.isNull() | F.isnan(x),
                                 f"inf:{column}": F.coalesce(F.abs(x) == F.lit(float("inf")),
                                                             F.lit(False))}
        if unit is not None:
            bad_id = F.col(unit).isNull()
            if _is_floatlike(sschema[unit]):
                bad_id = bad_id | F.isnan(F.col(unit).cast("double"))
            flags[f"null:{unit}"] = bad_id
        fl = {k: f"{_IN}f{i}" for i, k in enumerate(flags)}
        cols = [*[F.col(c) for c in by_list], x.alias(f"{_IN}x"),
                *[e.alias(fl[k]) for k, e in flags.items()]]
        fp_cols: list[str] = []
        ledger = sess.ledger
        replay = row_mode and isinstance(ledger, SparkReplayLedger)
        prior = list(ledger.programs) if replay and sess.budget is not None else []
        led: list[str] = []
        if replay:
            _require_bound(sess, sdf.columns)
        if row_mode:
            base, rid, fp_cols = _row_ids(sdf, sdf.columns)
            self._hold.append(base)
            pre = base
            if prior:
                pre, led = _with_totals(spark, sess, base.select("*", rid.alias(_UID)), prior,
                                        _Policy(policy, []))  # type: ignore[arg-type]
            src = pre.select(rid.alias(ROW_ID), *cols,
                             *[_fingerprint(rid, c, sschema[c]).alias(f"{_IN}fp{i}")
                               for i, c in enumerate(fp_cols)], *[F.col(c) for c in led])
            # no checkpoint here, unlike `aggregate`: these rows are checked by this release's
            # summary (`bind_rows` below), and writing a checkpoint would evaluate the replay
            # on them first (review r26)
        else:
            assert unit is not None
            base = sdf.select(F.col(unit), *cols).persist(StorageLevel.MEMORY_AND_DISK)
            self._hold.append(base)
            src = base
        data = _attach_cells(spark, src, keys, by_list, sschema)
        missing = F.col(fl[f"missing:{column}"]) | F.col(fl[f"inf:{column}"])
        keep = F.lit(True)
        if nulls == "drop":
            keep = keep & ~missing
        if unit is not None:
            keep = keep & ~F.col(fl[f"null:{unit}"])
        summary = data.agg(
            *[F.sum(F.when(F.col(v), 1).otherwise(0)).alias(v) for v in fl.values()],
            *[a for i in range(len(fp_cols))
              for a in _fp_sums(F.col(f"{_IN}fp{i}"), f"{_IN}fp{i}")],
            F.count(F.lit(1)).alias("rows_read"),
            F.sum(F.when(keep & F.col(_CELL).isNull(), 1).otherwise(0)).alias("outside"),
            # rows in released cells before the filter (as a sum's `rows_in_released_cells`)
            F.sum(F.when(keep & F.col(_CELL).isNotNull(), 1).otherwise(0)).alias("inside"),
        ).collect()[0]
        counts = {k: int(summary[v] or 0) for k, v in fl.items()}
        _strict_checks(counts, [column], unit, _Rules(nulls, "allow", sess.mode), False, {})
        n_rows = int(summary["rows_read"] or 0)
        if row_mode:
            binding.of(sess).bind_rows(n_rows, {c: _fp_total(summary, f"{_IN}fp{i}")
                                    for i, c in enumerate(fp_cols)})
        inside = data.filter(keep & F.col(_CELL).isNotNull()).select(
            F.col(uid).alias(_UID), F.col(_CELL),
            F.when(missing, F.lit(0.0)).otherwise(F.col(f"{_IN}x")).alias(f"{_IN}x"),
            *[F.col(c) for c in led])

        # Per-unit losses: Δ = the unit's rows in the cell, the group-privacy policy.
        approx = policy.dp_delta is not None
        if replay:  # one row per unit: Δ = 1 row, every column kept (the filter is row-wise)
            pairs = inside.select("*", F.lit(1).cast("long").alias(f"{_IN}k"))
        else:
            pairs = inside.groupBy(_UID, _CELL).agg(F.count(F.lit(1)).alias(f"{_IN}k"))
        unit_cols = ["r0", "e0", "s0", *(["ea0", "da0"] if approx else [])]
        # row mode: every unit has one row in its cell, so the exact table of the policy at
        # Δ = 0, 1 applies; otherwise the policy's numpy code in a pandas UDF
        exprs = _charge_exprs(policy, [], "count", {}, row_mode, None,  # type: ignore[arg-type]
                              rows_col=f"{_IN}k")
        keep_cols = list(pairs.columns) if replay else [_UID, _CELL]
        if exprs is not None:
            charged = pairs.select(*keep_cols, *exprs).select(*keep_cols, *unit_cols)
        else:
            udf, _ = _charge_udf(policy, [], "count", {})  # type: ignore[arg-type]
            with _quiet():
                charged = pairs.select(*keep_cols, udf(F.struct(
                    F.col(f"{_IN}k").cast("double").alias(f"{_IN}rows_in"))).alias(f"{_IN}ch"))
            charged = charged.select(*keep_cols,
                                     *[F.col(f"{_IN}ch.{c}").alias(c) for c in unit_cols])
        if row_mode:
            per_unit = charged if replay else charged.drop(_CELL)
        else:  # a unit's losses added left to right over its cells in key-set order
            per_unit = _per_unit_fold(charged, [c for c in unit_cols if not c.startswith("s")],
                                      [c for c in unit_cols if c.startswith("s")])
        curs: list[tuple[str, list[str]]] = [(ROWS_CURRENCY, [])]
        guarantee = "approx" if approx else "zcdp"
        if replay:
            decided = _decide_rows(sess, charged, curs, guarantee, led)
        else:
            decided = _decide(sess, per_unit, curs, guarantee, approx)
        self._hold.append(decided)
        comps, extra, any_ok, n_left = _admitted_losses(sess, decided, curs, guarantee,
                                                        approx, qname)
        if not _filters(sess):
            kept = inside
        elif replay:
            kept = decided.filter(F.col("ok0")).select(_UID, _CELL, f"{_IN}x")
        else:
            kept = inside.join(decided.filter(F.col("ok0")).select(_UID), on=_UID,
                               how="left_semi")

        with _quiet():
            rows = kept.groupBy(_CELL).applyInPandas(
                _spark_worker.quantile_cell_fn(_CELL, f"{_IN}x", qv, gamma, (lo, hi)),
                f"{_CELL} long, truth double, ss double, n long, clipped long"
            ).collect()
        n_keys = len(keys) if by_list else 1
        t0, ss0, _ = cell_quantiles(np.zeros(0, dtype=np.int64), np.zeros(0), 1, qv, gamma,
                                    (lo, hi))  # an empty cell's
        truth = np.full(n_keys, float(t0[0]))
        ss = np.full(n_keys, float(ss0[0]))
        n_in = clipped = 0
        for r in rows:
            truth[int(r[_CELL])] = r["truth"]
            ss[int(r[_CELL])] = r["ss"]
            n_in += int(r["n"])
            clipped += int(r["clipped"])
        program = None
        if replay:  # the release's definition (a count of the rows its rule keeps)
            from tabdp.frame._stream import Program

            program = (Program(qname, "count", tuple(by_list), keys, (column,),
                               _Rules(nulls, "allow", sess.mode),
                               _Policy(policy, []),  # type: ignore[arg-type]
                               {}), sdf)
        rows_in = int(summary["inside"] or 0)
        # the values kept are the rows in released cells of the admitted units
        # (`kept` ⊆ `inside`): the rest are the rows of the units left out
        # key columns in the input's dtypes, as the Polars engines publish them (stop 63)
        return QuantileData(truth, ss, _key_dtypes(self._sschema), n_rows,
                            int(summary["outside"] or 0), rows_in,
                            n_left, rows_in - n_in, clipped, counts[f"missing:{column}"], None,
                            state=_SparkState(program, decided, any_ok, comps, extra, curs))

    def record_quantile(self, rel: PlannedQuantile, record: QueryRecord,
                        data: QuantileData) -> None:
        """Add a median's admitted losses (or its definition) to the Spark ledger.

        Args:
            rel: The planned median or quantile.
            record: The query's record.
            data: From `quantile_data`.
        """
        self._record(rel.op.session, record, data.state)

    def record(self, rel: Planned, record: QueryRecord, agg: Aggregated) -> None:
        """Add the admitted losses (or the release's definition) to the Spark ledger.

        Args:
            rel: The planned release.
            record: The query's record.
            agg: From `aggregate`.
        """
        self._record(rel.op.session, record, agg.state)

    def _record(self, sess: Session, record: QueryRecord, st: _SparkState) -> None:
        """The ledger's input (`_SparkState`) into the Spark ledger; the record to the session."""
        from pyspark.sql import functions as F

        ledger = sess.ledger
        life = None
        if st.program is not None:  # the release's definition: its losses are replayed
            ledger.install(*st.program)
        else:
            add = st.decided.filter(st.any_ok).select(
                F.col(_UID).alias("unit"), *[e.alias(k) for k, e in st.comps.items()],
                *[e.alias(k) for k, e in st.extra.items()])
            ledger.add(add)
            life = _lifetime_charges(sess, st.decided, st.any_ok, st.comps, st.curs)
        sess.record_release(record, "spark", lifetime=life)

    def output(self, rel: Planned | PlannedQuantile, table: pl.DataFrame) -> Any:
        """The released table (public, at most the key set) as a Spark DataFrame.

        Args:
            rel: The planned release.
            table: The released table.

        Returns:
            A PySpark DataFrame.
        """
        return _to_spark(self._spark, table, self._sschema, rel.by)

    def close(self, agg: Aggregated | None) -> None:
        """Unpersist what the release persisted, the last persisted first.

        Args:
            agg: Unused.
        """
        while self._hold:
            self._hold.pop().unpersist()


class _HeldSnapshot:
    """A local checkpoint kept in a session's snapshot cache, its blocks freed when dropped.

    The cache (`tabdp.frame.binding.keep_snapshot`) holds one entry and replaces it at the
    next release of another frame or grouping; the entry's holder is then collected and the
    checkpoint's blocks freed (`_free_checkpoint`; also when the session itself is collected,
    or by `free`). A local checkpoint, not a cache entry (review r30): Spark keeps one cache
    entry per plan, so a persisted frame would share its entry with any other frame of the
    same plan (the same files read again, another session's snapshot), and the first to be
    unpersisted would leave the others to be recomputed from the input; a checkpoint's lost
    block fails the job instead of reading the input again (review R18-5).
    """

    def __init__(self, frame: Any) -> None:
        import weakref

        self.frame = frame
        self._fin = weakref.finalize(self, _free_quietly, frame)
        self._fin.atexit = False  # at exit the Spark context may be gone: nothing to free

    def free(self) -> None:
        """Free the checkpoint's blocks now (once)."""
        self._fin()

    def __repr__(self) -> str:
        return "_HeldSnapshot(<local checkpoint>)"


def _drop_unit_snapshot(sess: Session) -> None:
    """Drop (and free) the session's kept unit-mode Spark snapshot, if it holds one."""
    state = binding.of(sess)
    held = [e["held"] for k, e in state.snapshot.items()
            if isinstance(k, tuple) and k and k[0] == "spark"]
    if held:
        state.snapshot = {}
        for h in held:
            h.free()


def _free_quietly(frame: Any) -> None:
    """`_free_checkpoint`, ignoring a stopped Spark context (a finalizer must not raise)."""
    with contextlib.suppress(Exception):
        _free_checkpoint(frame)


def _unit_snapshot(sess: Session, sdf: Any, unit: str, by_list: list[str],
                   measure_list: list[str], rules: _Rules, flagged: Any, row_cols: list[Any],
                   vname: dict[str, str], cnt: dict[str, str]) -> Any:
    """Unit mode's snapshot: the input grouped by (unit, keys), checkpointed, kept for reuse.

    A later release of the same frame object in the same session, with the same grouping,
    unit and mode, whose measures are among the snapshot's (a count after a sum), reads the
    snapshot instead of aggregating the input again, as the Polars engine does
    (`tabdp.frame._engine._take_snapshot`): its rows kept, row counts and counters are those
    the release would compute. Not when a rule drops rows for a measure (``nulls="drop"``,
    ``negatives="drop"``) and the measures differ: the rows kept then depend on them. The
    snapshot is written before anything else reads it (its shuffle stage runs when the
    checkpoint is made, under adaptive execution, and its blocks by `count`) and kept only
    once written: a snapshot whose job failed is freed and never reused (review r30), and one
    over which Spark later fails is dropped (`SparkBackend.aggregate`, review r31).
    """
    from pyspark.sql import functions as F

    key = ("spark", id(sdf), tuple(by_list), unit, rules.mode)
    cached = binding.cached_snapshot(sess, key)
    if cached is not None:
        if (cached["native"] is sdf and serves_measures(cached, measure_list, rules)
                and set(cnt) <= set(cached["cnt"])):
            frame = cached["held"].frame
            return frame.select(F.col(unit), *[F.col(c) for c in by_list],
                                *[F.col(m) for m in measure_list], F.col(_ROWS), F.col(_ALL),
                                *[F.col(cached["cnt"][k]).alias(v) for k, v in cnt.items()])
    plan = flagged.select(F.col(unit), *[F.col(c) for c in by_list], *row_cols) \
        .groupBy(unit, *by_list).agg(
            *[F.sum(vname[m]).cast(_DEC).alias(m) for m in measure_list],
            F.sum(_ROWS).alias(_ROWS), F.count(F.lit(1)).alias(_ALL),
            *[F.sum(v).alias(v) for v in cnt.values()])
    # lazy, held before its blocks are written, then written by one job: if that job fails,
    # the blocks it wrote are freed and nothing is kept (as `_held_checkpoint`)
    snap = _local_checkpoint(plan, eager=False)
    held = _HeldSnapshot(snap)
    try:
        snap.count()
    except BaseException:
        held.free()
        raise
    binding.keep_snapshot(sess, key, {
        "native": sdf, "held": held, "measures": tuple(measure_list),
        "rules": rules, "drops": drops_rows(rules), "cnt": dict(cnt)})
    return snap


def _require_bound(sess: Session, columns: list[str]) -> None:
    """Refuse (data-free, as the row check does) an input that lacks a column the session bound.

    A replayed release reads the earlier releases' columns, so this is checked before any plan.
    """
    state = binding.of(sess)
    if any(c not in columns for c in state.bound_columns()):
        state.bind_rows(state.rows_bound or 0, {})  # raises: the bound columns are absent


def _with_totals(spark: Any, sess: Session, frame: Any, prior: list[Any], policy: _Policy,
                 numbered: _Numbered | None = None) -> tuple[Any, list[str]]:
    """``frame`` (row ids ``__tabdp_uid``) plus ``__tabdp_led<k>``: its totals over ``prior``.

    ``k`` indexes the ledger columns the budget filter of a release of ``policy`` reads
    (`_led_need`). With ``numbered``, ``frame`` is unused: the replay runs over the numbered
    snapshot, extending its last replay (`_Numbered.replayed`).
    """
    from pyspark.sql import functions as F

    if numbered is not None:
        out, names, _ = numbered.replayed(spark, sess, prior)
    else:
        out, names, _ = _replay(spark, sess, frame, prior)
    need = _led_need(sess.budget, [c for c, _ in policy.currencies()])
    led = [f"{_IN}led{k}" for k in range(len(need))]
    out = out.withColumns({led[k]: (F.col(names[c]) if c in names else F.lit(0.0))
                           for k, c in enumerate(need)})
    return out, led


def _finish(spark: Any, sess: Session, hold: list[Any], qname: str, kind: str, snap: Any,
            sschema: dict[str, Any], measure_list: list[str], by_list: list[str], keys: KeySet,
            mechanism: Mechanism, level: float, nulls: str, released: list[str],
            grids: dict[str, Any], max_cells: int | None, max_rows: int | None, rules: _Rules,
            policy: _Policy, uid: str, unit: str | None, row_mode: bool, bits: dict[str, int],
            cnt: dict[str, str], fp_cols: list[str], *, form: str = "wide",
            cv: bool = False, led: list[str] | None = None, program: Any = None,
            numbered: _Numbered | None = None) -> Aggregated:
    """Steps 2 to 5 over the snapshot (persisted frames appended to ``hold``)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # 2. Cells, counters and summaries: one aggregate over the snapshot.
    data = _attach_cells(spark, snap, keys, by_list, sschema)
    needs_nonneg = bool(mechanism.requires_nonnegative) and kind == "sum"
    if numbered is not None and not _filters(sess) and not sess.track_cells:
        return _unfiltered_rows(sess, qname, kind, data, measure_list, by_list, keys,
                                mechanism, nulls, rules, policy, unit, bits, cnt, fp_cols,
                                sschema, program, numbered)
    outside = F.col(_CELL).isNull()
    aggs = [F.sum(F.col(v)).alias(v) for v in cnt.values()]
    aggs += [a for i in range(len(fp_cols)) for a in _fp_sums(F.col(f"{_IN}fp{i}"), f"{_IN}fp{i}")]
    # rows outside the key set that no rule dropped (a row a rule dropped is counted by the
    # rule's counter only, as a median's: each row read is counted once), and their keys
    kept_out = outside & (F.col(_ROWS) > 0)
    aggs += [F.sum(_ALL).alias("rows_read"),
             F.sum(F.when(kept_out, F.col(_ROWS)).otherwise(0)).alias("rows_outside")]
    if by_list:
        aggs.append(F.count_distinct(F.when(kept_out, F.struct(*by_list))).alias("cells_out"))
    check_neg = needs_nonneg and rules.negatives == "allow"
    if check_neg:
        aggs += [F.sum(F.when(F.col(m) < 0, 1).otherwise(0)).alias(f"{_IN}neg{i}")
                 for i, m in enumerate(measure_list)]
    summary = data.agg(*aggs).collect()[0]
    counts = {k: int(summary[v] or 0) for k, v in cnt.items()}
    neg_contrib = ({m: int(summary[f"{_IN}neg{i}"] or 0) for i, m in enumerate(measure_list)}
                   if check_neg else {})
    _strict_checks(counts, measure_list, unit, rules, needs_nonneg, neg_contrib)
    rows_read = int(summary["rows_read"] or 0)
    if unit is None:
        _bind(sess, rows_read,
              {c: _fp_total(summary, f"{_IN}fp{i}") for i, c in enumerate(fp_cols)}, numbered)

    inside = data.filter(~outside & (F.col(_ROWS) > 0))
    cells_dropped = 0
    if not row_mode:
        if max_rows is not None and kind == "count":
            inside = inside.withColumn(_ROWS, F.least(F.col(_ROWS), F.lit(int(max_rows))))
        if max_cells is not None:
            size = (F.col(_ROWS).cast("double") if kind == "count" else
                    F.greatest(*[F.abs(F.col(m)).cast("double") * F.lit(2.0 ** -bits[m])
                                 for m in measure_list]) if len(measure_list) > 1 else
                    F.abs(F.col(measure_list[0])).cast("double") * F.lit(2.0 ** -bits[
                        measure_list[0]]))
            w = Window.partitionBy(uid).orderBy(size.desc(), F.col(_CELL).asc())
            ranked = inside.withColumn(f"{_IN}rank", F.row_number().over(w))
            cells_dropped = ranked.filter(F.col(f"{_IN}rank") > max_cells).count()
            inside = ranked.filter(F.col(f"{_IN}rank") <= max_cells).drop(f"{_IN}rank")

    # 3. Per-(unit, cell) losses: Spark expressions where they equal the mechanism's numpy
    # policy bit for bit, else the numpy policy in a pandas UDF; summed per unit.
    exprs = _charge_exprs(mechanism, measure_list, kind, bits, row_mode, max_rows)
    # the charges' columns (``r<i>``, ``ok<i>``, ``cell_rho``...) are added next to the
    # measures': these are kept under tabdp's names (`_value_col`), never the input's
    vals = [F.col(m).alias(_value_col(i)) for i, m in enumerate(measure_list)]
    if exprs is not None:
        curs = policy.currencies()
        charged = inside.select(F.col(uid).alias(_UID), F.col(_CELL), *vals, F.col(_ROWS),
                                *exprs, *[F.col(c) for c in led or []])
        ch_cols = [c for c in charged.columns if c not in (
            _UID, _CELL, *[_value_col(i) for i in range(len(measure_list))], _ROWS,
            *(led or []))]
        charged = charged.persist(StorageLevel.MEMORY_AND_DISK)
    else:
        with _quiet():
            udf, curs = _charge_udf(mechanism, measure_list, kind, bits)
        if kind == "count":
            udf_in = [F.col(_ROWS).cast("double").alias(f"{_IN}rows_in")]
        else:
            udf_in = [F.abs(F.col(m)).cast("double").alias(f"{_IN}a:{m}") for m in measure_list]
            if policy.joint:
                udf_in += [F.signum(F.col(m).cast("double")).alias(f"{_IN}s:{m}")
                           for m in measure_list]
        with _quiet():
            charged = inside.select(F.col(uid).alias(_UID), F.col(_CELL), *vals, F.col(_ROWS),
                                    udf(F.struct(*udf_in)).alias(f"{_IN}ch"),
                                    *[F.col(c) for c in led or []])
        ch_cols = [f.name for f in charged.schema[f"{_IN}ch"].dataType.fields]
        # on disk only: a partition of the charges read back from disk into memory whole
        # (MEMORY_AND_DISK) ran a 1 GB driver out of heap at 10M rows
        charged = charged.select("*", *[F.col(f"{_IN}ch.{c}").alias(c) for c in ch_cols]) \
            .drop(f"{_IN}ch").persist(StorageLevel.DISK_ONLY)
    hold.append(charged)
    return _admit_and_release(
        spark, sess, hold, qname, kind, charged, ch_cols, curs, measure_list, by_list,
        keys, mechanism, level, nulls, released, grids, max_cells, max_rows, rules, policy,
        row_mode, bits, counts, rows_read, summary, cells_dropped, form=form, cv=cv,
        key_dtypes=_key_dtypes(sschema), led=led,
        program=program)


def _bind(sess: Session, rows: int, fps: dict[str, int], numbered: _Numbered | None) -> None:
    """Row mode: check (or bind) the session's rows; a snapshot already bound is not hashed."""
    if numbered is not None and numbered.fps is not None:
        fps = numbered.fps  # the snapshot's rows: those its first release fingerprinted
    binding.of(sess).bind_rows(rows, fps)
    if numbered is not None:
        numbered.fps = fps


def _collect_columns(sdf: Any) -> dict[str, list[Any]]:
    """A small Spark DataFrame (at most the key set's rows) collected as columns of Python values.

    Integers stay Python ints (exact) and nulls ``None``. Read by name, a ``Row`` searches its
    fields: 59,850 cells x 30-40 columns as Rows were about a second of the driver's CPU per
    release; Arrow (PySpark >= 4.0) also skips building the Rows.
    """
    if len(set(sdf.columns)) != len(sdf.columns):  # pragma: no cover - tabdp's own aggregates
        raise RuntimeError(f"duplicate column names in an aggregate: {sdf.columns}")
    if hasattr(sdf, "toArrow"):
        tbl = sdf.toArrow()
        return {c: tbl.column(c).to_pylist() for c in tbl.column_names}
    got = sdf.collect()  # pragma: no cover - PySpark 3.5 (the minimum-versions job)
    by_col = zip(*got, strict=True) if got else ([] for _ in sdf.columns)  # pragma: no cover
    return {c: list(v) for c, v in zip(sdf.columns, by_col, strict=True)}  # pragma: no cover


def _column_total(values: list[Any]) -> int:
    """The exact sum of a collected column (Python ints or Decimals; nulls count as 0).

    Example:
        >>> from decimal import Decimal
        >>> _column_total([3, None, Decimal(4), 0])
        7
    """
    return sum(int(v) for v in values if v)


def _unfiltered_rows(sess: Session, qname: str, kind: str, data: Any, measure_list: list[str],
                     by_list: list[str], keys: KeySet, mechanism: Mechanism, nulls: str,
                     rules: _Rules, policy: _Policy, unit: str | None, bits: dict[str, int],
                     cnt: dict[str, str], fp_cols: list[str], sschema: dict[str, Any],
                     program: Any, numbered: _Numbered | None) -> Aggregated:
    """Row mode, replayed, no budget and no cell audit: every step in one aggregation.

    Every row is admitted, so a release needs no per-row charges (the report replays them):
    the counters, the row fingerprints, the rows outside the key set and the exact totals of
    each cell are one group-by over the cells (the rows outside the key set form the null cell
    and are grouped by their keys too, which counts their distinct keys), collected (at most
    the key set and one row). The same checks, in the same order, as `_finish`.
    """
    from pyspark.sql import functions as F

    outside = F.col(_CELL).isNull()
    needs_nonneg = bool(mechanism.requires_nonnegative) and kind == "sum"
    check_neg = needs_nonneg and rules.negatives == "allow"
    vparts = {m: [f"{_IN}v{i}_{k}" for k in range(4 if _is_floatlike(sschema[m]) else 3)]
              for i, m in enumerate(measure_list)}  # `_fixed_longs`
    longs = [*cnt.values(), *[f"{_IN}fp{i}_{k}" for i in range(len(fp_cols)) for k in range(3)],
             _ALL, _ROWS, *[c for m in measure_list for c in vparts[m]]]
    first = [F.sum(F.col(v)).alias(v) for v in cnt.values()]
    first += [a for i in range(len(fp_cols)) for a in _fp_sums(F.col(f"{_IN}fp{i}"), f"{_IN}fp{i}")]
    first += [F.sum(_ALL).alias(_ALL), F.sum(_ROWS).alias(_ROWS)]
    # each measure's exact total, part by part (the rows outside the key set: not needed)
    first += [F.sum(F.when(~outside, F.col(c))).alias(c) for m in measure_list
              for c in vparts[m]]
    if check_neg:  # a value is negative exactly when its signed top part is
        first += [F.sum(F.when(F.col(vparts[m][-1]) < 0, 1).otherwise(0)).alias(f"{_IN}neg{i}")
                  for i, m in enumerate(measure_list)]
        longs += [f"{_IN}neg{i}" for i in range(len(measure_list))]
    grouping = [F.col(_CELL)]
    if by_list:
        grouping.append(F.when(outside, F.struct(*by_list)).alias(f"{_IN}out"))
    known = None
    if kind == "count" and not cnt and numbered is not None and numbered.fps is not None:
        # a count after an unfiltered release over the same snapshot, keys and grouping: its
        # rows per cell (a count keeps every row: its rows are all the rows) were aggregated
        known = numbered.rows_per_cell(keys, by_list)
    if known is not None:  # a count keeps every row: so every key outside the key set
        cols = {**known, _ROWS: known[_ALL],
                **({"cells_out": known["cells_all_out"]} if by_list else {})}
    else:
        per_key = data.groupBy(*grouping).agg(*first)
        second = [F.sum(F.col(c)).alias(c) for c in longs]
        if by_list:
            # the keys outside the key set with a row no rule dropped (a row a rule dropped is
            # counted by the rule's counter only, as a median's), and every such key, for a
            # later count over the same cells (`rows_per_cell`: a count keeps every row)
            second += [F.count(F.when(F.col(_ROWS) > 0, F.col(f"{_IN}out"))).alias("cells_out"),
                       F.count(F.col(f"{_IN}out")).alias("cells_all_out")]
        cols = _collect_columns(per_key.groupBy(_CELL).agg(*second))
        if numbered is not None:
            numbered.cells.append((keys, tuple(by_list), cols))

    def total(c: str) -> int:
        return _column_total(cols[c])

    counts = {k: total(v) for k, v in cnt.items()}
    neg_contrib = ({m: total(f"{_IN}neg{i}") for i, m in enumerate(measure_list)}
                   if check_neg else {})
    _strict_checks(counts, measure_list, unit, rules, needs_nonneg, neg_contrib)
    rows_read = total(_ALL)
    fps = {c: sum(total(f"{_IN}fp{i}_{k}") << (k * _FP_BITS) for k in range(3))
           for i, c in enumerate(fp_cols)}
    if unit is None:
        _bind(sess, rows_read, fps, numbered)
    cells = cols[_CELL]
    out_at = next((i for i, c in enumerate(cells) if c is None), None)
    out_row = ({c: v[out_at] for c, v in cols.items()} if out_at is not None else None)
    n_keys = len(keys) if by_list else 1
    numer: dict[str, list[int]] = {c: [0] * n_keys for c in [*measure_list, _ROWS]}
    parts_of = {m: [cols[c] for c in vparts[m]] for m in measure_list}
    for i, cell in enumerate(cells):
        if cell is not None:
            k = int(cell)
            numer[_ROWS][k] = int(cols[_ROWS][i] or 0)
            for m in measure_list:
                numer[m][k] = sum(int(p[i] or 0) << (_PART_BITS * j)
                                  for j, p in enumerate(parts_of[m]))
    rows_in = sum(numer[_ROWS])
    m_before = {m: sum(numer[m]) for m in measure_list}
    left_out_info = left_out_counts(kind, measure_list, bits, m_before,
                                    dict.fromkeys(measure_list, 0), 0)
    full = pl.DataFrame({c: pl.Series(c, v, dtype=pl.Int128) for c, v in numer.items()})
    return Aggregated(
        full=full, key_dtypes=_key_dtypes(sschema),
        rows_read=rows_read,
        # the rows outside the key set no rule dropped (`_ROWS`: the rows kept)
        rows_outside=int(out_row[_ROWS] or 0) if out_row is not None else 0,
        cells_outside=int(out_row["cells_out"] or 0) if out_row is not None and by_list else 0,
        rows_released=rows_in, units_left_out=0, left_out=left_out_info, cells_dropped=0,
        rule_counts=_rule_counts(counts, measure_list, nulls, rules), cells=None, losses=None,
        state=_SparkState(program, None, None, {}, {}, policy.currencies()))


def _decide(sess: Session, per_unit: Any, curs: list[tuple[str, list[str]]], guarantee: str,
            approx: bool) -> Any:
    """Per-unit charges with the filter's decisions ``ok<i>`` (persisted; unpersist after)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    budget = sess.budget
    ledger: SparkUnitLedger = sess.ledger
    life = sess.lifetime
    ncur = len(curs)
    names = [c for c, _ in curs]
    if budget is None and life is None:
        decided = per_unit.select("*", *[F.lit(True).alias(f"ok{i}") for i in range(ncur)])
    else:
        joined = per_unit
        if budget is not None:
            joined = ledger.attach(joined, _led_need(budget, names))
        if life is not None:  # the series' lifetime totals (stored plus this run's so far)
            joined = _with_lifetime(sess, joined, _led_need(life.budget, names))
        ok = _constant_admits_col(budget, life, ncur)
        if ok is not None:  # constant budgets only: Spark expressions, no Python worker
            decided = joined.select(*[F.col(f"`{c}`") for c in per_unit.columns],
                                    *[ok.alias(f"ok{i}") for i in range(ncur)])
        else:
            schema = ", ".join([f"{_UID} " + per_unit.schema[_UID].dataType.simpleString(),
                                *[f"ok{i} boolean" for i in range(ncur)]])
            with _quiet():
                oks = joined.mapInPandas(_admit_fn(budget, names, guarantee, approx,
                                                   None if life is None else life.budget),
                                         schema)
            decided = per_unit.join(oks, on=_UID, how="inner")
    return decided.persist(StorageLevel.MEMORY_AND_DISK)


def _constant_admits_col(budget: Any, life: Any, ncur: int) -> Any:
    """The unit-mode filter as one Spark column when every budget is constant (else ``None``).

    The per-run budget against the session's ledger (``__tabdp_led:rho``) and the lifetime budget
    against the series' totals (``__tabdp_life:rho``), ANDed: `_admit_batch`'s decision
    (`tabdp.privacy.filter.constant_admits`, the same float operations; a NaN or missing loss
    is never within a limit), without sending every unit through a Python worker and joining
    the decisions back.
    """
    from pyspark.sql import functions as F

    rho = [F.col(f"r{i}") for i in range(ncur)]
    oks = []
    for b, prior in ((budget, f"`{_IN}led:rho`"), (None if life is None else life.budget,
                                               f"`{_IN}life:rho`")):
        if b is None:
            continue
        ok = _admit_exprs(b, rho, F.col(prior))
        if ok is None:  # a curve budget: the Python filter
            return None
        oks.append(ok)
    out = oks[0] if len(oks) == 1 else oks[0] & oks[1]
    return F.coalesce(out, F.lit(False))


def _loss_exprs(ncur: int, guarantee: str, approx: bool, col: Any
                ) -> tuple[dict[str, Any], Any, Any]:
    """Loss components of the admitted charges, the admitted-unit flag and the left-out flag.

    ``col(name)`` gives the column of ``ok<i>``, ``r<i>``, ``e<i>``, ``s<i>`` (``ea<i>``,
    ``da<i>``). The components are summed in the order of ``Charges.losses``: the same float
    operations, the same doubles.
    """
    from pyspark.sql import functions as F

    acc: dict[str, Any] = {k: F.lit(0.0) for k in ("rho", "epsilon", "eps_a", "delta_a")}
    size = F.lit(0.0)
    any_ok = F.lit(False)
    left_out = F.lit(False)
    for i in range(ncur):
        ok = col(f"ok{i}")
        any_ok = any_ok | ok
        left_out = left_out | ~ok
        for k, f in (("rho", "r"), ("epsilon", "e"),
                     *((("eps_a", "ea"), ("delta_a", "da")) if approx else ())):
            term = F.when(ok, col(f"{f}{i}")).otherwise(0.0)
            # 0.0 + term is exact; later terms added rounded up (`add_up`)
            acc[k] = term if i == 0 else _add_up_col(acc[k], term)
        size = F.greatest(size, F.when(ok, col(f"s{i}")).otherwise(0.0))
    g = guarantee
    comps = {"rho": acc["rho"], "epsilon": acc["epsilon"], "size": size,
             "rho_z": F.lit(0.0) if g == "approx" else acc["rho"],
             "rho_g": acc["rho"] if g == "gaussian" else F.lit(0.0),
             "eps_a": acc["eps_a"], "delta_a": acc["delta_a"]}
    return comps, any_ok, left_out


def _decide_rows(sess: Session, charged: Any, curs: list[tuple[str, list[str]]],
                 guarantee: str, led: list[str]) -> Any:
    """Row mode, replayed: ``charged`` with the filter's decisions ``ok<i>`` on every row.

    ``led`` are the columns of each row's earlier totals (`_with_totals`; none before
    the session's first release: zeros). Under a budget the result is persisted (on disk).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    budget = sess.budget
    ncur = len(curs)
    if budget is None:
        return charged.select("*", *[F.lit(True).alias(f"ok{i}") for i in range(ncur)])
    names = [c for c, _ in curs]
    need = _led_need(budget, names)
    ok = _admit_exprs(budget, [F.col(f"r{i}") for i in range(ncur)],
                      F.col(led[0]) if led else F.lit(0.0))
    if ok is not None:  # a constant budget: no Python worker needed
        out = charged.select("*", *[ok.alias(f"ok{i}") for i in range(ncur)])
        return out.persist(StorageLevel.DISK_ONLY)
    fields = [F.col(f"{k}{i}") for i in range(ncur) for k in ("r", "e", "s")]
    fields += [(F.col(led[k]) if led else F.lit(0.0)).alias(f"l{k}") for k in range(len(need))]
    admit = _admit_udf(budget, names, guarantee, need)
    with _quiet():
        out = charged.select("*", admit(F.struct(*fields)).alias(f"{_IN}ok"))
    out = out.select("*", *[F.col(f"{_IN}ok.ok{i}").alias(f"ok{i}") for i in range(ncur)]) \
        .drop(f"{_IN}ok")
    # on disk: a copy of every charged row (the charges themselves are cached in memory); with
    # MEMORY_AND_DISK a 1 GB local[2] JVM ran out of heap at 10M rows
    return out.persist(StorageLevel.DISK_ONLY)


def _admitted_losses(sess: Session, decided: Any, curs: list[tuple[str, list[str]]],
                     guarantee: str, approx: bool, qname: str, count_left: bool = True
                     ) -> tuple[dict[str, Any], dict[str, Any], Any, int]:
    """Ledger columns of the admitted losses, the admitted-unit flag and the units left out.

    The losses are summed in the order of ``Charges.losses``: the same float operations, the
    same doubles. Without ``count_left`` the units left out are not counted (0: the caller
    counts them in its own aggregation, `_admit_and_release`).
    """
    from pyspark.sql import functions as F

    budget = sess.budget
    ncur = len(curs)
    comps, any_ok, left_out = _loss_exprs(ncur, guarantee, approx, F.col)
    n_left = 0
    if _filters(sess) and count_left:
        n_left = int(decided.agg(F.sum(F.when(left_out, 1).otherwise(0))).collect()[0][0] or 0)
    extra = {_release_col(qname): comps["rho"]}
    if budget is not None and budget.per_currency:
        for i, (c, _) in enumerate(curs):
            extra[f"rho@{c}"] = F.when(F.col(f"ok{i}"), F.col(f"r{i}")).otherwise(0.0)
            extra[f"size@{c}"] = F.when(F.col(f"ok{i}"), F.col(f"s{i}")).otherwise(0.0)
    return comps, extra, any_ok, n_left


def _add_field(name: str) -> Any:
    """``(acc, x) -> add_up(acc, x[name])``: a left fold step for ``F.aggregate``."""
    return lambda acc, x: _add_up_col(acc, x[name])


def _per_unit_fold(charged: Any, sums: list[str], maxes: list[str],
                   first_cell: bool = False) -> Any:
    """Per ``__tabdp_uid``: ``sums`` added left to right over its cells in key-set order, ``maxes``.

    The Polars engine's order (``tabdp.frame._engine.per_unit``); ``F.sum`` would add them in
    shuffle order, and per-record reports would differ in the last bits. With ``first_cell``,
    also ``__tabdp_cell0``: the unit's first cell (a unit has one row per cell in ``charged``),
    which marks one row per unit for counting units in an aggregation over the cells.
    """
    from pyspark.sql import functions as F

    per = charged.groupBy(_UID).agg(
        *[F.max(c).alias(c) for c in maxes],
        *([F.min(_CELL).alias(f"{_IN}cell0")] if first_cell else []),
        F.array_sort(F.collect_list(F.struct(F.col(_CELL).alias(f"{_IN}cellpos"),
                                             *[F.col(c) for c in sums]))).alias(f"{_IN}cells"))
    return per.select(
        _UID, *maxes, *([f"{_IN}cell0"] if first_cell else []),
        *[F.aggregate(f"{_IN}cells", F.lit(0.0).cast("double"), _add_field(c)).alias(c)
          for c in sums])


def _value_col(i: int) -> str:
    """The column of measure ``i``'s exact values in the charges' frames (`_finish`)."""
    return f"{_IN}val{i}"


def _admit_and_release(spark: Any, sess: Session, hold: list[Any], qname: str, kind: str,
                       charged: Any, ch_cols: list[str], curs: list[tuple[str, list[str]]],
                       measure_list: list[str], by_list: list[str], keys: KeySet,
                       mechanism: Mechanism, level: float, nulls: str, released: list[str],
                       grids: dict[str, Any], max_cells: int | None, max_rows: int | None,
                       rules: _Rules, policy: _Policy, row_mode: bool, bits: dict[str, int],
                       counts: dict[str, int], rows_read: int, summary: Any,
                       cells_dropped: int, *, form: str = "wide", cv: bool = False,
                       key_dtypes: dict[str, Any] | None = None, led: list[str] | None = None,
                       program: Any = None) -> Aggregated:
    """Steps 4 and 5: the individual filter and the exact totals of the admitted contributions.

    The frames it persists are appended to ``hold`` (the backend unpersists them).
    """
    from pyspark.sql import functions as F

    ncur = len(curs)
    unit_cols = [c for c in ch_cols if c not in ("cell_rho", "cell_size")]
    if row_mode:
        per_unit = charged.select(_UID, *unit_cols)
    else:
        # a unit's losses summed left to right over its cells in key-set order, as the Polars
        # engine does (F.sum would add them in shuffle order): bit-identical per-record reports
        sums = [c for c in unit_cols if not c.startswith("s")]
        maxes = [c for c in unit_cols if c.startswith("s")]
        per_unit = _per_unit_fold(charged, sums, maxes, first_cell=_filters(sess))

    # 4. The individual filter (individual_filter itself), per partition of units + ledger rows.
    replay = program is not None  # row mode, replayed: one row per unit, the filter row-wise
    if replay:
        decided = _decide_rows(sess, charged, curs, policy.guarantee, led or [])
    else:
        decided = _decide(sess, per_unit, curs, policy.guarantee, policy.approx)
    # unpersisted by SparkBackend.close, after the ledger has read it (SparkBackend.record)
    hold.append(decided)
    # the units left out are counted by the totals' aggregation below, not by a job of their
    # own (which was the first to read the decisions, and so ran the filter)
    comps, extra, any_ok, n_left = _admitted_losses(sess, decided, curs, policy.guarantee,
                                                    policy.approx, qname, count_left=False)

    # 5. Exact totals of the admitted contributions, per cell (collected: ≤ the key set).
    # each measure's contributions (``charged`` holds them as `_value_col`), and before the
    # filter under another name
    vcol = {m: _value_col(i) for i, m in enumerate(measure_list)}
    before = [F.col(vcol[m]).alias(f"{_IN}m0_{i}") for i, m in enumerate(measure_list)]
    if not _filters(sess):
        work = charged.select("*", F.lit(True).alias(f"{_IN}allok"),
                              F.col(_ROWS).alias(f"{_IN}rows0"), *before)
    else:
        all_ok = F.lit(True)
        for i in range(ncur):
            all_ok = all_ok & F.col(f"ok{i}")
        work = decided if replay else charged.join(
            decided.select(_UID, *([] if row_mode else [f"{_IN}cell0"]),
                           *[f"ok{i}" for i in range(ncur)]), on=_UID, how="inner")
        zeroed = {}
        for i, (_, ms) in enumerate(curs):
            for c in ([vcol[m] for m in ms] if ms else [_ROWS]):
                zeroed[c] = F.when(F.col(f"ok{i}"), F.col(c)).otherwise(
                    F.lit(0).cast(work.schema[c].dataType))
        work = work.select(*[zeroed.get(c, F.col(c)).alias(c) for c in work.columns],
                           all_ok.alias(f"{_IN}allok"), F.col(_ROWS).alias(f"{_IN}rows0"), *before)
    # rows released before the filter (after the contribution bounds), for the summary
    tot = [F.sum(F.col(c)).alias(c) for c in [*vcol.values(), _ROWS, f"{_IN}rows0"]]
    # what the filter left out (confidential): measures before it, rows of left-out units
    tot += [F.sum(F.col(f"{_IN}m0_{i}")).alias(f"{_IN}m0_{i}") for i in range(len(measure_list))]
    tot += [F.sum(F.when(~F.col(f"{_IN}allok"), F.col(f"{_IN}rows0")).otherwise(0))
            .alias(f"{_IN}rows_left")]
    if _filters(sess):
        # the units left out, one row per unit (row mode's rows, a unit's first cell): the
        # filter's left-out flag, ``~ok0 | ~ok1 ...``, is ``~__tabdp_allok``
        first = F.lit(True) if row_mode else F.col(_CELL) == F.col(f"{_IN}cell0")
        tot += [F.sum(F.when(~F.col(f"{_IN}allok") & first, 1).otherwise(0))
                .alias(f"{_IN}units_left")]
    if sess.track_cells:
        tot += [F.max(F.when(F.col(f"{_IN}allok"), F.col("cell_rho"))).alias("worst_rho"),
                F.max(F.when(F.col(f"{_IN}allok"), F.col("cell_size"))).alias("worst_size"),
                F.sum(F.when(F.col(f"{_IN}allok"), 1).otherwise(0)).alias("units")]
    cols = _collect_columns(work.groupBy(_CELL).agg(*tot))

    def total(c: str) -> int:
        return _column_total(cols[c])

    if _filters(sess):
        n_left = total(f"{_IN}units_left")
    n_keys = len(keys) if by_list else 1
    numer: dict[str, list[int]] = {c: [0] * n_keys for c in [*measure_list, _ROWS]}
    rows_in = total(f"{_IN}rows0")
    m_before = {m: total(f"{_IN}m0_{i}") for i, m in enumerate(measure_list)}
    m_after = {m: total(vcol[m]) for m in measure_list}
    left_out_info = left_out_counts(
        kind, measure_list, bits, m_before,
        {m: m_before[m] - m_after[m] for m in measure_list}, total(f"{_IN}rows_left"))
    stats: list[tuple[int, float, float, int]] = []
    for i, cell in enumerate(cols[_CELL]):
        k = int(cell)
        for c in numer:
            numer[c][k] = int(cols[vcol.get(c, c)][i] or 0)
        if sess.track_cells and cols["units"][i]:
            stats.append((k, float(cols["worst_rho"][i]), float(cols["worst_size"][i]),
                          int(cols["units"][i])))
    full = pl.DataFrame({c: pl.Series(c, v, dtype=pl.Int128) for c, v in numer.items()})
    cells = None
    if sess.track_cells:
        kp = keys.to_polars().select(by_list) if by_list else None
        idx = [s[0] for s in stats]
        cells = pl.DataFrame({"worst_rho": [s[1] for s in stats],
                              "worst_size": [s[2] for s in stats],
                              "units": [s[3] for s in stats]},
                             schema={"worst_rho": pl.Float64, "worst_size": pl.Float64,
                                     "units": pl.Int64})
        if kp is not None:
            cells = pl.concat([kp[idx], cells], how="horizontal")
        # ties in the order of the key columns, as the Polars engines (review r28)
        cells = cells.sort(["worst_rho", *by_list], descending=[True, *[False] * len(by_list)],
                           nulls_last=True, maintain_order=True)
    return Aggregated(
        full=full, key_dtypes=key_dtypes or {}, rows_read=rows_read,
        rows_outside=int(summary["rows_outside"] or 0),
        cells_outside=int(summary["cells_out"] or 0) if by_list else 0,
        rows_released=rows_in, units_left_out=n_left, left_out=left_out_info,
        cells_dropped=cells_dropped, rule_counts=_rule_counts(counts, measure_list, nulls, rules),
        cells=cells, losses=None,
        state=_SparkState(program, decided, any_ok, comps, extra, curs))


def _to_spark(spark: Any, out: pl.DataFrame, sschema: dict[str, Any] | None = None,
              by: Sequence[str] = ()) -> Any:
    """The released table (public, at most the key set) as a Spark DataFrame.

    A key column in ``by`` published in its input column's dtype (`_key_dtypes`) takes that
    column's Spark type (a ``timestamp_ntz`` stays one, as the Polars engine keeps its dtype).
    """
    from pyspark.sql import types as T

    own = _key_dtypes({c: sschema[c] for c in by if c in sschema}) if sschema else {}
    fields = []
    for c, dt in out.schema.items():
        if c in own and own[c] == dt:
            st = (sschema or {})[c]
        else:
            st = T.DoubleType() if dt == pl.Float64 else _spark_type(dt)
        fields.append(T.StructField(c, st, True))
    frame = out.with_columns(pl.col(c).cast(pl.String) for c, dt in out.schema.items()
                             if isinstance(dt, (pl.Categorical, pl.Enum)))
    return _local_frame(spark, frame, T.StructType(fields))  # a NaN key stays NaN


# -- medians and quantiles --------------------------------------------------------------------
def spark_quantile_release(native: Any, *, column: str, q: float, median: bool,
                           by: str | Sequence[str] | None, keys: KeySet, bounds: Any,
                           epsilon: float, noise: str = "polyplace", gamma: float | None = None,
                           delta: float | None = None, uncertainty_share: float | None = None,
                           session: Session | None = None, level: float = DEFAULT_LEVEL,
                           nulls: str = "error", name: str | None = None,
                           grid: Any = None, form: str = "wide", cv: bool = False) -> Any:
    """Release a private q-quantile per cell of a PySpark DataFrame (``spark_df.dp.median``).

    Same arguments and (for one seed) the same table, counts and per-record losses as
    `tabdp.frame._quantiles.quantile_release`. Each cell's values are sorted and its
    smooth sensitivity computed inside Spark (one group per cell, by the same numpy code);
    the driver receives one (value, smooth sensitivity) pair per released cell.

    Args:
        native: A PySpark DataFrame.
        column: Measure column.
        q: Quantile level in [0, 1].
        median: Label the output ``_median`` instead of ``_q{100q}``.
        by: Group-by columns (the key set's columns).
        keys: Public key set.
        bounds: Public ``(low, high)``.
        epsilon: Total ε of the release.
        noise: Noise family.
        gamma: Smoothness γ.
        delta: δ for ``noise="laplace"``.
        uncertainty_share: Share of ε spent on the private noise scale.
        session: Session recording the release.
        level: Confidence level of the margin of error.
        nulls: Missing values policy.
        name: Label of the release in the session.
        grid: Public rounding step of the estimates.
        form: ``"wide"`` or ``"long"`` (see `tabdp.frame._output`).
        cv: Wide form: add ``_cv`` and ``_flag`` columns.

    Returns:
        A PySpark DataFrame: keys, the quantile and its ``_sd``, ``_moe``, ``_lower``,
        ``_upper``.

    Example:
        >>> callable(spark_quantile_release)
        True
    """
    from tabdp.frame.pipeline import execute_quantile, plan_quantile

    rel = plan_quantile(native, session, column=column, q=q, median=median, by=by, keys=keys,
                        bounds=bounds, epsilon=epsilon, noise=noise, gamma=gamma, delta=delta,
                        uncertainty_share=uncertainty_share, level=level, nulls=nulls,
                        name=name, grid=grid, form=form, cv=cv, opener=_open_op)
    sdf: Any = rel.op.lf  # the input: a Spark frame (pinned in author mode)
    with _jit_sized_methods(sdf.sparkSession):
        return execute_quantile(rel, SparkBackend(
            sdf.sparkSession, {f.name: f.dataType for f in sdf.schema.fields}))


def _open_op(native: Any, session: Session | None, name: str | None, kind: str,
             measures: list[str], by: list[str]) -> _Opened:
    """`_open` as the pipeline's opener (`tabdp.frame.pipeline.plan_quantile`)."""
    if not is_spark_frame(native):
        raise UnsupportedBackendError(
            f"the Spark engine releases PySpark DataFrames; got {type(native).__name__}.")
    _, sess, one_off, qname, sdf, sschema = _open(native, session, name, kind, measures, by)
    return _Opened(sess, one_off, qname, sdf, "spark",
                   pl.Schema({c: _pl_dtype(t) for c, t in sschema.items()}), native)


def _write_single_parquet(sdf: Any, target: Any, sort_by: str | None = None) -> None:
    """Write a Spark DataFrame as ONE Parquet file at ``target``, by Spark's writer.

    The rows are gathered into one partition on the executors (sorted by ``sort_by``, nulls
    last), written to a scratch folder next to ``target`` and the single part file renamed to
    ``target``; nothing passes through the driver. A failed write leaves no file.
    """
    import os
    import pathlib
    import shutil
    import uuid

    from pyspark.sql import functions as F

    target = pathlib.Path(target)
    scratch = target.parent / f".{target.name}.spark-{uuid.uuid4().hex}"
    one = sdf.repartition(1)
    if sort_by is not None:
        one = one.sortWithinPartitions(F.col(sort_by).asc_nulls_last())
    try:
        with _jit_sized_methods(sdf.sparkSession):
            one.write.mode("error").option("compression", "zstd").parquet(str(scratch))
        parts = sorted(p for p in scratch.iterdir()
                       if p.name.startswith("part-") and p.name.endswith(".parquet"))
        if len(parts) != 1:  # pragma: no cover - one partition writes one file
            raise RuntimeError(f"Spark wrote {len(parts)} part files for one partition")
        os.replace(parts[0], target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _write_report(ledger: Any, session: Session, delta: float | None, path: Any,
                  rename: dict[str, str] | None, frame_of: Any = None) -> None:
    """Write a Spark ledger's per-record report to one Parquet file, by Spark (sorted by id).

    ``frame_of``: what builds the report frame (default: ``ledger.per_record``).
    """
    with _jit_sized_methods(ledger.spark):  # the report's own checks run with the settings too
        table = (frame_of or ledger.per_record)(session, delta)
        for a, b in (rename or {}).items():
            table = table.withColumnRenamed(a, b)
        _write_single_parquet(table, path, sort_by=table.columns[0])


# Names the release workflow's Spark glue (tabdp.release._spark_run) shares with this engine.
quiet = _quiet
row_ids = _row_ids
free_checkpoint = _free_checkpoint
spark_type = _spark_type
try_cast = _try_cast
write_single_parquet = _write_single_parquet
