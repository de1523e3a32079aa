"""Reading a curator-declared dataset against its declared schema (author mode).

Every file of a dataset is read on its own and each declared column converted to its declared
type; a value that type cannot represent becomes null (then the spec's null rules apply, which
in author mode never stop a run), so whether a run fails never depends on one record. Used by
the release workflow's input stage and by the Python `tabdp.Curator`.
"""

from __future__ import annotations

import io
import itertools
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote

import polars as pl

from tabdp._temporal import formattable

__all__ = ["scan_declared", "convert_leniently", "convert_leniently_spark", "dataset_files",
           "hive_columns", "LOST", "is_data_file", "file_plans", "parquet_source",
           "file_schema", "file_columns", "read_declared_spark"]

_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: Prefix of `scan_declared`'s ``flag_lost`` columns (a value that became null).
LOST = "__tabdp_lost_"


def convert_leniently(expr: pl.Expr, source: Any, target: Any) -> pl.Expr:
    """``expr`` (of dtype ``source``) in dtype ``target``; a value it cannot represent is null.

    The author-mode conversion to a declared type. "Cannot represent" means: a fraction, NaN,
    an infinity or an out-of-range number in an integer column (never truncated: ``2.5`` is
    null, not ``2``; a whole float such as ``3.0`` is ``3``, and 64-bit values stay exact,
    nothing passes through Float64), text that does not parse, an out-of-range value, a number
    other than 0 and 1 as a Boolean, text other than an ISO date ``YYYY-MM-DD`` as a Date, a
    date or time more than about 260,000 years from 1970 as text (Polars cannot format it; a
    timestamp's text is its UTC wall time, in microseconds from a millisecond or
    microsecond one, ``2020-01-01 23:30:00.000000``, whatever its time zone, as on Spark). A
    conversion between dtypes that Polars does not support for every value (a list or bytes to
    a number or text, text to a datetime) gives a column of nulls, decided from the two dtypes
    alone. The null then meets the declared null rule, which in author mode never stops a run.

    Args:
        expr: The column.
        source: Its dtype (in the file or frame).
        target: The declared dtype.

    Returns:
        An expression of dtype ``target``.

    Example:
        >>> s = pl.DataFrame({"x": [3.0, 2.5, None, float("nan"), 2.0**63]})
        >>> s.select(convert_leniently(pl.col("x"), pl.Float64, pl.Int64))["x"].to_list()
        [3, None, None, None, None]
        >>> big = pl.DataFrame({"x": [2**62 + 1]}, schema={"x": pl.UInt64})
        >>> big.select(convert_leniently(pl.col("x"), pl.UInt64, pl.Int64))["x"].to_list()
        [4611686018427387905]
    """
    if source == target:
        return expr
    textual = (pl.Categorical, pl.Enum)
    if isinstance(source, textual) and not (target == pl.String or isinstance(target, textual)):
        # text is text whatever its dtype: a dictionary-encoded column (read as Categorical)
        # converts as its String would, as on Spark, which reads it as a string (review r81:
        # it was null as a number or a Date on Polars only)
        return convert_leniently(expr.cast(pl.String), pl.String, target)
    if target == pl.String and (source == pl.Date or isinstance(source, pl.Datetime)):
        # Polars holds dates it cannot format as text (a Rust panic, "out-of-range date"):
        # such a value is null before the conversion (review R14)
        expr = formattable(expr, source)
        if isinstance(source, pl.Datetime):
            # a timestamp's text is its UTC wall time in microseconds, as on Spark, whatever
            # the file's zone and unit (Polars wrote a zoned one's local time and offset,
            # ``2020-01-02 08:30:00.000000+09:00``, and milliseconds with 3 digits; review
            # r81); nanoseconds keep their 9 digits (Spark cannot read them: null there)
            expr = expr.cast(pl.Datetime("ns" if source.time_unit == "ns" else "us"))
        return expr.cast(target, strict=False)
    if source == pl.Null:
        return expr.cast(target)
    if target == pl.Date and source == pl.String:  # ISO dates (the text of a partition)
        # only ``YYYY-MM-DD`` itself: Polars' parser also reads `` 2020-01-01``, ``2020-1-1``
        # and ``+2020-01-01``, Spark's ``2020``, ``2020-01`` and ``2020-01-01 10:00``; the
        # two engines agree on this form (review r81)
        return pl.when(expr.str.contains(_ISO_DATE)).then(
            expr.str.strptime(pl.Date, "%Y-%m-%d", strict=False))
    if not _supported(source, target):  # a null per row (a literal alone would be one row)
        null = pl.lit(None, target)
        return pl.when(expr.is_null() & expr.is_not_null()).then(null).otherwise(null)
    cast = expr.cast(target, strict=False)
    number = source.is_numeric()
    if target.is_integer() and (source.is_float() or isinstance(source, pl.Decimal)):
        # whole numbers only: the integer must convert back to the very same value
        return pl.when(cast.cast(source, strict=False) == expr).then(cast).otherwise(
            pl.lit(None, target))
    if target == pl.Float32 and (source.is_float() or isinstance(source, pl.Decimal)):
        return pl.when(cast.is_finite() | ~expr.cast(pl.Float64).is_finite()).then(cast)
    if target == pl.Boolean and number:
        return (pl.when(expr == 0).then(pl.lit(False)).when(expr == 1).then(pl.lit(True))
                .otherwise(pl.lit(None, pl.Boolean)))
    return cast


#: The text both engines read as a Date: ``YYYY-MM-DD`` (ASCII digits), nothing around it; a
#: regex of the same meaning in Rust (Polars) and Java (Spark).
_ISO_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}\z"

#: The text Polars reads as a float (``cast(pl.Float64, strict=False)``), as a Java regex: a
#: sign, digits with an optional point (or a point and digits), an optional exponent; or inf,
#: infinity, nan in any letter case. Nothing around it (no spaces, no ``d``/``f`` suffix).
_FLOAT_TEXT = r"^[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|(?i:inf|infinity|nan))\z"


def convert_leniently_spark(col: Any, source: Any, target: Any) -> Any:
    """A Spark column in the declared Polars dtype ``target``, null where it cannot represent.

    The Spark twin of `tabdp.release.declared.convert_leniently`, value for value where it
    matters: Spark's ``try_cast`` truncates a fraction to an integer (``2.5`` -> ``2``),
    saturates a double at the integer range (``2**63`` -> ``2**63 - 1``), reads ``" 3"`` as
    an integer, ``" 1.5"``, ``1d`` and ``0x1p3`` as floats and any non-zero number as ``true``;
    here a fraction, NaN, an infinity or an out-of-range number in an integer column is null
    (a whole number such as ``3.0`` is ``3``), text is an integer only when it is one (sign
    and digits) and a float only in the forms Polars reads (`_FLOAT_TEXT`), a number is a Boolean
    only when it is 0 or 1, a double that overflows a Float32 is null, text is a date only
    in the form ``YYYY-MM-DD`` (`_ISO_DATE`; Spark's cast also reads ``2020`` and
    ``2020-01-01 10:00``), a timestamp without a time zone is a UTC wall time and a
    timestamp's date its UTC date, a date's timestamp its UTC midnight (Spark's casts take
    all three in the session's time zone, ``spark.sql.session.timeZone``; review r76).

    Args:
        col: The column.
        source: Its Spark type.
        target: The declared Polars dtype.

    Returns:
        The converted column (Spark type of ``target``).

    Example:
        >>> convert_leniently_spark.__name__  # needs a SparkSession: see the spark tests
        'convert_leniently_spark'
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tabdp.frame.backends.spark import try_cast

    st = declared_spark_type(target)
    if not _spark_supported(source, target):
        # a pair Polars does not convert (a null column, from the dtypes alone): Spark refuses
        # some (a date as a number, a Boolean as a date: an AnalysisException, so one file
        # of another type stopped the run) and reads others (text or a number as a timestamp)
        # where Polars gives null (review r81)
        return F.lit(None).cast(st)
    # (dates and timestamps: as Polars converts them, whatever the session's time zone; a
    # timestamp without a zone is a UTC wall time, a timestamp's date its UTC date)
    if target in _UNSIGNED:
        return _unsigned_spark(col, source, target)
    conv = try_cast(col, st, source)
    floating = isinstance(source, (T.FloatType, T.DoubleType))
    if isinstance(st, T.IntegralType):
        if floating or isinstance(source, T.DecimalType):
            # whole numbers only: the integer must convert back to the very same value
            ok = conv.cast(source) == col
            if floating:  # within the range (a double saturates at it in Spark)
                half = 2.0 ** (8 * {T.ByteType: 1, T.ShortType: 2, T.IntegerType: 4}.get(
                    type(st), 8) - 1)
                ok = ok & (col >= F.lit(-half)) & (col < F.lit(half))
            return F.when(ok, conv)
        if isinstance(source, T.StringType):  # (``\z``: Java's ``$`` passes a final newline)
            return F.when(col.rlike(r"^[+-]?[0-9]+\z"), conv)
        return conv
    if isinstance(st, (T.FloatType, T.DoubleType)) and isinstance(source, T.StringType):
        # text is a number only in the forms Polars reads (review r75: Spark's cast trims
        # spaces and reads Java's ``1d``, ``1f``, ``0x1p3``; it gives null for a signed NaN)
        nan = F.lit(float("nan")).cast(st)
        conv = F.when(col.rlike(r"^[+-]?(?i:nan)\z"), nan).when(col.rlike(_FLOAT_TEXT), conv)
    if isinstance(st, T.DateType) and isinstance(source, T.StringType):
        # ISO dates only, as Polars reads them (Spark's cast also reads ``2020``, ``2020-01``,
        # ``2020-01-01 10:00``, ``2020-01-01T00:00`` and trailing spaces; review r81)
        return F.when(col.rlike(_ISO_DATE), conv)
    if isinstance(st, T.BooleanType) and isinstance(source, T.NumericType):
        return F.when(col == 0, F.lit(False)).when(col == 1, F.lit(True))
    if isinstance(st, T.FloatType) and (floating or isinstance(source, T.DecimalType)):
        inf = F.lit(float("inf")).cast(T.FloatType())
        finite = ~conv.isin(inf, -inf)
        was = ~col.cast(T.DoubleType()).isin(float("inf"), float("-inf"))
        return F.when(finite | ~was, conv)
    return conv


#: The largest value of each unsigned Polars integer dtype.
_UNSIGNED = {pl.UInt8: 2**8 - 1, pl.UInt16: 2**16 - 1, pl.UInt32: 2**32 - 1,
             pl.UInt64: 2**64 - 1}


def declared_spark_type(dtype: Any) -> Any:
    """The Spark type a column declared ``dtype`` is held in on Spark (decided from the dtype).

    Spark has no unsigned integers: an unsigned dtype is held in the type Spark reads a Parquet
    column of it as (`_spark_read_type`: ``UInt8`` a ``short``, ``UInt16`` an ``int``,
    ``UInt32`` a ``long``, ``UInt64`` a ``decimal(20,0)``), which holds each of its values
    exactly; other dtypes in `tabdp.frame.backends.spark.spark_type`'s.

    Args:
        dtype: The declared Polars dtype.

    Returns:
        The Spark type.

    Example:
        >>> declared_spark_type.__name__  # needs PySpark: see tests/release/test_key_conversions.py
        'declared_spark_type'
    """
    from tabdp.frame.backends.spark import spark_type

    if dtype in _UNSIGNED:
        return _spark_read_type(dtype)
    return spark_type(dtype)


def _unsigned_spark(col: Any, source: Any, target: Any) -> Any:
    """`convert_leniently_spark` to an unsigned dtype: its exact value, null out of its range.

    As `convert_leniently`: a whole number from 0 to the dtype's largest value (a fraction,
    NaN, an infinity, a negative or too large number is null), text only when it is an unsigned
    integer (digits after an optional ``+``: ``-0`` is null, as in Polars), a Boolean as 0 or 1.
    Held in `declared_spark_type` (a ``UInt64`` in ``decimal(20,0)``: a double at or above
    ``2**63`` is converted in two exact parts, as Spark's own double-to-decimal cast goes
    through a shortest decimal string).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tabdp.frame.backends.spark import try_cast

    st = declared_spark_type(target)
    top = _UNSIGNED[target]
    dec = T.DecimalType(20, 0)  # every value of every source below holds in it exactly
    if isinstance(source, T.BooleanType):
        return F.when(col, F.lit(1)).when(~col, F.lit(0)).cast(st)
    if isinstance(source, (T.FloatType, T.DoubleType)):
        x = col.cast(T.DoubleType())  # (a float is a double exactly)
        half = float(2**63)
        # whole numbers only (a long converts back to the very same double), in two parts
        # at and above 2**63 (x - 2**63 is exact there: x is a multiple of 2**11)
        low = try_cast(x, T.LongType())
        high = try_cast(x - F.lit(half), T.LongType())
        whole = (F.when(x < F.lit(half), F.when(low.cast(T.DoubleType()) == x, low.cast(dec)))
                 .otherwise(F.when(x < F.lit(2.0 * half),
                                   F.when(high.cast(T.DoubleType()) == x - F.lit(half),
                                          (high.cast(dec) + F.lit(str(2**63)).cast(dec))
                                          .cast(dec)))))
        value = F.when((x >= F.lit(0.0)) & (x < F.lit(2.0 * half)), whole)
    elif isinstance(source, T.StringType):  # (``\z``: Java's ``$`` passes a final newline)
        # no minus sign: Polars reads no text with one as an unsigned integer (``-0`` is null)
        value = F.when(col.rlike(r"^\+?[0-9]+\z"), try_cast(col, dec))
    elif isinstance(source, T.DecimalType):  # whole numbers only
        # (rounded half up, the whole number may not fit the source's type: 99.99 in a
        # decimal(4,2) is 100, which its cast back refused with an error under ANSI mode,
        # stopping the job on one value; try_cast makes it null, a fraction as it is)
        conv = try_cast(col, dec)
        value = F.when(try_cast(conv, source) == col, conv)
    else:  # an integer type
        value = try_cast(col, dec)
    ok = (value >= F.lit(0).cast(dec)) & (value <= F.lit(str(top)).cast(dec))
    return F.when(ok, value).cast(st)


def _spark_supported(source: Any, target: Any) -> bool:
    """Whether `convert_leniently` converts a column of Spark type ``source`` (else null).

    Decided from the dtypes alone, by the Polars dtype of the Spark type (a timestamp with or
    without a zone is a ``Datetime``; any text is ``String``).
    """
    from pyspark.sql import types as T

    from tabdp.frame.backends.spark import polars_dtype

    have = pl.Datetime("us") if isinstance(source, (T.TimestampType, T.TimestampNTZType)) \
        else polars_dtype(source)
    if have == target:
        return True
    return _supported(have, target) or (have == pl.String and target == pl.Date)


def _supported(source: Any, target: Any) -> bool:
    """Whether ``cast(target, strict=False)`` of ``source`` never fails, whatever the values.

    Decided from the dtypes alone (a probe is not enough: Polars casts a list column of nulls
    to an integer and refuses the same column holding a list).
    """
    number = source.is_numeric() or source == pl.Boolean
    text = source in (pl.String, pl.Categorical) or isinstance(source, pl.Enum)
    when = source in (pl.Date, pl.Datetime) or isinstance(source, pl.Datetime)
    if target.is_numeric():
        return number or source == pl.String
    if target == pl.Boolean:
        return number
    if target == pl.String:
        return number or text or when
    if target in (pl.Date, pl.Datetime) or isinstance(target, pl.Datetime):
        return when
    if target == pl.Categorical or isinstance(target, pl.Enum):
        return text
    if target == pl.Binary:  # text as its UTF-8 bytes (a key of a bytes domain; stop 65)
        return text
    return False


def is_data_file(name: str) -> bool:
    """Whether a file of a dataset folder is one of its data files (decided from its name).

    A data file's name ends in ``.parquet`` and starts with neither ``.`` nor ``_`` (the
    hidden and bookkeeping files writers leave: ``_SUCCESS``, ``.part-0.parquet.crc``,
    ``_metadata``). Every other file is not read: a rule on names alone, so what a file
    holds never decides whether it is read.

    Args:
        name: The file's name (no folder).

    Returns:
        True for a data file.

    Example:
        >>> [is_data_file(n) for n in ("a.parquet", "notes.txt", "_SUCCESS", ".a.parquet")]
        [True, False, False, False]
    """
    return name.endswith(".parquet") and not name.startswith((".", "_"))


def dataset_files(path: Path) -> list[Path]:
    """The Parquet files of a dataset: the file itself, or a folder's data files, sorted.

    A folder is read whole: every data file below it (`is_data_file`: ``*.parquet``, not
    hidden), at any depth, in the order of their paths. Other files are skipped by name.

    Args:
        path: A Parquet file or a folder.

    Returns:
        The files.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "b").mkdir(); _ = (d / "b" / "x.parquet").write_bytes(b"")
        >>> _ = (d / "a.parquet").write_bytes(b""); _ = (d / "notes.txt").write_text("")
        >>> _ = (d / "_SUCCESS").write_text("")
        >>> [p.relative_to(d).as_posix() for p in dataset_files(d)]
        ['a.parquet', 'b/x.parquet']
    """
    if not path.is_dir():
        return [path]
    found = [Path(root) / f for root, _, files in os.walk(path) for f in files
             if is_data_file(f)]
    return sorted(found, key=lambda p: p.relative_to(path).as_posix())


def parquet_source(file: Path) -> Any:
    """What Polars reads a data file from: its path, or its bytes when the path is not UTF-8.

    Polars takes paths as UTF-8 text; a file whose path on disk is not UTF-8 (a folder named
    in another encoding, which Python holds with lone surrogates) is opened by its bytes
    path and given to Polars in memory, so the name of a folder never stops a read.

    Args:
        file: The file.

    Returns:
        ``str(file)``, or a ``BytesIO`` of the file's contents.

    Example:
        >>> parquet_source(Path("a.parquet"))
        'a.parquet'
    """
    text = str(file)
    try:
        text.encode("utf-8")
    except UnicodeError:
        with open(os.fsencode(file), "rb") as f:
            return io.BytesIO(f.read())
    return text


def file_schema(file: Path) -> pl.Schema:
    """A Parquet data file's own schema, from its footer (Polars dtypes; no value is read).

    A name the file holds more than once is left out (`file_columns`).

    Args:
        file: The file (any path: `parquet_source`).

    Returns:
        Its columns and dtypes.

    Raises:
        polars.exceptions.PolarsError, OSError: The file is not readable Parquet.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> pl.DataFrame({"v": [1]}).write_parquet(d / "a.parquet")
        >>> file_schema(d / "a.parquet")
        Schema([('v', Int64)])
    """
    return file_columns(file)[0]


def file_columns(file: Path) -> tuple[pl.Schema, frozenset[str]]:
    """A Parquet data file's columns held once (Polars dtypes), and the names held twice or more.

    Parquet allows two columns of one name (pyarrow writes them, e.g. from a pandas frame
    with a repeated column name); Polars refuses such a file outright (``DuplicateError``),
    even for its other columns, so one such file, which can hold one record, stopped an
    author-mode run where its neighbour without it ran (review rev65p). Its footer is then
    read with pyarrow: the names held once with their Polars dtypes (as `pl.from_arrow` gives
    them, which is how `scan_declared` reads such a file), and the names held more than once
    (no engine reads them apart: null in that file; so is a column holding a struct with a
    field name twice, which Polars cannot build). No value is read.

    Args:
        file: The file (any path: `parquet_source`).

    Returns:
        The schema of the columns held once, and the names held more than once.

    Raises:
        polars.exceptions.PolarsError, OSError, pyarrow.ArrowException: The file is not
            readable Parquet.

    Example:
        >>> import tempfile
        >>> import pyarrow as pa, pyarrow.parquet as pq
        >>> d = Path(tempfile.mkdtemp())
        >>> pq.write_table(pa.table([[1], [2], [3]], names=["v", "v", "w"]), d / "a.parquet")
        >>> file_columns(d / "a.parquet")
        (Schema([('w', Int64)]), frozenset({'v'}))
    """
    try:
        return (pl.scan_parquet(parquet_source(file), hive_partitioning=False).collect_schema(),
                frozenset())
    except pl.exceptions.DuplicateError:
        pass
    import collections

    import pyarrow as pa
    import pyarrow.parquet as pq

    footer = pq.read_schema(parquet_source(file))
    counts = collections.Counter(footer.names)
    twice = {n for n, k in counts.items() if k > 1}
    # a struct holding a field name twice: Polars panics building even its empty column
    twice |= {f.name for f in footer if _field_twice(f.type)}
    once = pa.schema([f for f in footer if f.name not in twice])
    return (pl.Schema(pl.from_arrow(once.empty_table()).schema),  # type: ignore[union-attr]
            frozenset(twice))


def _field_twice(t: Any) -> bool:
    """Whether an Arrow type holds a struct with a field name twice, at any depth."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        return len(set(names)) < len(names) or any(_field_twice(t.field(i).type)
                                                   for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _field_twice(t.key_type) or _field_twice(t.item_type)
    value = getattr(t, "value_type", None)  # lists of any kind, dictionaries
    return value is not None and _field_twice(value)


#: How one declared column of one file is read (`file_plans`): from the file's folders
#: (``("folder", text or None)``), from the file (``("column", file dtype)``), as nulls because
#: the engine cannot read the file's type (``("unreadable", file dtype)``) or the folder's
#: value is not UTF-8 text (``("unreadable", Binary)``), or as nulls because the file lacks it
#: (``("missing", None)``).
ColumnPlan = tuple[str, Any]


def file_plans(path: Path, schema: Mapping[str, Any], *, hive: bool | None = None,
               readable: Callable[[Any], bool] | None = None,
               twice: set[Path] | None = None,
               footers: dict[Path, tuple[pl.Schema, frozenset[str]]] | None = None
               ) -> list[tuple[Path, dict[str, ColumnPlan]]]:
    """Each data file of a dataset and, for each declared column, where its values come from.

    The per-file decisions of an author-mode read, shared by the engines (`scan_declared` for
    Polars, `read_declared_spark` for Spark): decided from file names, folder names and each
    file's own Parquet footer (its schema; no value is read). A ``name=value`` folder above
    the file gives a declared column ``name`` its value (`_hive_values`; not with ``hive``
    ``False``); else a file column of that name is read when ``readable`` accepts its dtype
    (a Polars dtype, from the footer), and is null otherwise; a column the file lacks is null,
    and so is one whose name the file holds more than once (`file_columns`: no engine reads
    it apart; ``("unreadable", Binary)``).

    Args:
        path: A Parquet file or a folder read whole (`dataset_files`).
        schema: Declared column -> Polars dtype.
        hive: ``False`` reads no partition folders.
        readable: Whether the engine reads a file column of this dtype (default: all).
        twice: Filled with the files holding a name more than once (Polars reads no column
            of them: `scan_declared` reads them with pyarrow).
        footers: Filled with each file's `file_columns` (its footer read once: a caller
            that needs the columns again reads them here, not from the file).

    Returns:
        ``[(file, {column: (how, what)})]`` in the order of `dataset_files` (see `ColumnPlan`).

    Raises:
        polars.exceptions.PolarsError, OSError: A file is not readable Parquet.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()); (d / "k=5-9").mkdir()
        >>> pl.DataFrame({"v": [1.5]}).write_parquet(d / "k=5-9" / "a.parquet")
        >>> [p for _, p in file_plans(d, {"k": pl.Int64, "v": pl.Int64, "w": pl.Int64})]
        [{'k': ('folder', '5-9'), 'v': ('column', Float64), 'w': ('missing', None)}]
    """
    folder = path.is_dir()
    plans = []
    for file in dataset_files(path):
        have, held_twice = file_columns(file)
        if footers is not None:
            footers[file] = (have, held_twice)
        if held_twice and twice is not None:
            twice.add(file)
        values = (_hive_values(file.relative_to(path), schema)
                  if folder and hive is not False else {})
        plan: dict[str, ColumnPlan] = {}
        for c in schema:
            if c in values and values[c] is _NOT_TEXT:
                plan[c] = ("unreadable", pl.Binary)  # a folder value that is not UTF-8
            elif c in values:
                plan[c] = ("folder", values[c])
            elif c in held_twice:  # review rev65p: Polars refused the file, Spark the column
                plan[c] = ("unreadable", pl.Binary)
            elif c in have:
                ok = readable is None or readable(have[c])
                plan[c] = ("column" if ok else "unreadable", have[c])
            else:
                plan[c] = ("missing", None)
        plans.append((file, plan))
    return plans


def _readable(dtype: Any) -> bool:
    """Whether Polars can read a file column of ``dtype`` at all (from the dtype alone).

    Polars reports a ``decimal256`` column (precision above 38) in the schema but fails, or
    panics, on any expression that reads it (review R12); such a column is read as nulls. So
    does a struct holding a field name twice, at any depth (review rev65p: "duplicate struct
    field", one such file stopped the run).
    """
    if isinstance(dtype, pl.Decimal):
        return dtype.precision is None or dtype.precision <= 38
    inner = getattr(dtype, "inner", None)
    if inner is not None:
        return _readable(inner)
    fields = getattr(dtype, "fields", None)
    if fields:
        names = [f.name for f in fields]
        return len(set(names)) == len(names) and all(_readable(f.dtype) for f in fields)
    return True


def scan_declared(path: Path, schema: Mapping[str, Any], *, hive: bool | None = None,
                  flag_lost: bool = False, schema_only: bool = False) -> pl.LazyFrame:
    """Scan a Parquet file or folder against a declared schema, file by file, leniently.

    Each file is scanned on its own (its metadata only, here) and every declared column is
    converted to its declared dtype with `convert_leniently` (a column a file lacks is
    null), then the files are concatenated. So files written one by one, whose dtypes follow
    their contents (pandas stores an integer column with one missing value as float64, an
    empty text column as null), read as the same columns and types whatever they hold, and no
    value can make the scan fail; a value the declared dtype cannot represent is null, and a
    file column Polars cannot read at all (a ``decimal256``) is null. The result has the
    declared columns only, whatever the files hold.

    Hive partition folders (``name=value``: text, percent-decoded,
    ``__HIVE_DEFAULT_PARTITION__`` null) give a declared column of that name its value, for
    the files below them, converted leniently from the text to the declared dtype; they
    replace a file column of that name. Which columns come from folders is decided for each
    file by the declared names on its own path: neither the first file nor any value decides
    it. A partition level that is not declared is not read. A folder without data files
    (`dataset_files`) is an empty frame of the declared schema.

    Text that is not UTF-8 is a value the declared type cannot represent: it is null. A
    partition value that is not UTF-8 (its bytes on disk or its percent escapes) is null for
    its column, and the file is still read (from its bytes path when Polars cannot take the
    path, `parquet_source`; so is a file under any folder whose name is not UTF-8). A file
    column of text holding bytes that are not UTF-8 makes Polars refuse the whole file, so
    the declared text columns of every file are first read on their own (``null_count``,
    all files at once; the only extra cost of the normal path); a file that fails is read
    with pyarrow, its text columns taken as bytes and decoded value by value, a value that
    is not UTF-8 null (and a nested column holding text null). Whichever way a file is read,
    its values are the same wherever they are UTF-8. A file holding a name twice (Parquet
    allows it; Polars refuses the whole file) is read that way too, a declared column of that
    name null there (`file_columns`; review rev65p: one such file stopped the run).

    Args:
        path: A Parquet file or a folder read whole (`dataset_files`).
        schema: Declared column -> Polars dtype.
        hive: ``False`` reads no partition folders.
        flag_lost: Add, for each column, a Boolean column ``LOST + name``: the value was
            not null in the file and is null after the conversion (for the curator's counts;
            every row of a file whose column cannot be read at all, or whose folder value
            is not UTF-8; a value that is not UTF-8).
        schema_only: The frame is for its schema only (no data is read from it): skip the
            text check (the schema is the same; collecting the frame may then fail).

    Returns:
        The lazy frame: the declared columns in the declared order.

    Raises:
        polars.exceptions.PolarsError, OSError: A file is not readable Parquet.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> pl.DataFrame({"id": [2**62 + 1], "emp": [3]}).write_parquet(d / "a.parquet")
        >>> pl.DataFrame({"id": [5, 6], "emp": [None, 2.5]}).write_parquet(d / "b.parquet")
        >>> scan_declared(d, {"id": pl.Int64, "emp": pl.Int64}).collect().rows()
        [(4611686018427387905, 3), (5, None), (6, None)]
    """
    frames = []
    twice: set[Path] = set()
    plans = file_plans(path, schema, hive=hive, readable=_readable, twice=twice)
    broken = set() if schema_only else _not_utf8([p for p in plans if p[0] not in twice])
    for file, plan in plans:
        invalid: dict[str, str] = {}
        if file in twice and schema_only:  # (Polars cannot scan it: its schema alone)
            source = pl.LazyFrame(schema={c: what for c, (how, what) in plan.items()
                                          if how == "column"})
        elif file in broken or file in twice:
            # text that is not UTF-8 (such a value null), or a name held twice (review
            # rev65p: Polars reads no column of the file): read by pyarrow
            source, plan, invalid = _read_not_utf8(file, plan)
        else:
            source = pl.scan_parquet(parquet_source(file), hive_partitioning=False)
        cols, lost = [], []
        for c, t in schema.items():
            how, what = plan[c]
            if how == "folder":
                raw = pl.lit(what, pl.String)
                e = convert_leniently(raw, pl.String, t)
                gone = raw.is_not_null() & e.is_null()
            elif how == "unreadable":
                e = pl.lit(None, t)
                gone = pl.lit(True)
            elif how == "column":
                raw = pl.col(c)
                e = convert_leniently(raw, what, t)
                gone = raw.is_not_null() & e.is_null()
                if c in invalid:
                    gone = gone | pl.col(invalid[c])
            else:  # missing
                e = pl.lit(None, t)
                gone = pl.lit(False)
            cols.append(e.alias(c))
            lost.append(gone.alias(LOST + c))
        # with_columns, then select: a literal (a partition value, a missing column) is
        # broadcast to the file's rows even when no column of the file is read
        new = cols + (lost if flag_lost else [])
        frames.append(source.with_columns(new).select([e.meta.output_name() for e in new]))
    if not frames:
        return pl.LazyFrame(schema={**schema, **({LOST + c: pl.Boolean for c in schema}
                                                 if flag_lost else {})})
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")


#: A partition folder's value that is not text (`_hive_values`): its bytes are not UTF-8.
_NOT_TEXT: Any = object()


def _text(name: str) -> str | None:
    """A folder name's part percent-decoded, or None when it is not UTF-8 text.

    Not text: the name's bytes on disk are not UTF-8 (Python holds them as lone surrogates),
    or a percent escape decodes to bytes that are not UTF-8 (``%FF``).
    """
    try:
        name.encode("utf-8")
        return unquote(name, errors="strict")
    except UnicodeError:
        return None


def _has_text(dtype: Any) -> bool:
    """Whether a file column of ``dtype`` holds text (at any depth: a list of strings too)."""
    if dtype == pl.String or dtype == pl.Categorical or isinstance(dtype, pl.Enum):
        return True
    inner = getattr(dtype, "inner", None)
    if inner is not None:
        return _has_text(inner)
    fields = getattr(dtype, "fields", None) or []
    return any(_has_text(f.dtype) for f in fields)


def _not_utf8(plans: list[tuple[Path, dict[str, ColumnPlan]]]) -> set[Path]:
    """The files Polars cannot read a declared text column of (bytes that are not UTF-8).

    Each file's declared text columns are read on their own (``null_count`` decodes every
    value), all files in one parallel pass; only when that pass fails is each file tried
    alone, to find which. Any failure marks the file (read by `_read_not_utf8`, which fails
    in turn when the file is not readable for another cause).
    """
    todo = [(f, [c for c, (how, what) in plan.items() if how == "column" and _has_text(what)])
            for f, plan in plans]
    todo = [(f, cols) for f, cols in todo if cols]

    def probe(f: Path, cols: list[str]) -> pl.LazyFrame:
        return pl.scan_parquet(parquet_source(f), hive_partitioning=False).select(
            [pl.col(c).null_count() for c in cols])

    if not todo:
        return set()
    try:
        pl.collect_all([probe(f, cols) for f, cols in todo])
        return set()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - Polars' Rust panics are BaseExceptions
        pass
    bad = set()
    for f, cols in todo:
        try:
            probe(f, cols).collect()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # noqa: BLE001
            bad.add(f)
    return bad


def _utf8_or_null(column: Any) -> tuple[Any, Any]:
    """A pyarrow text column (any width, dictionary or not) as UTF-8 text, null where not.

    Returns the text (``large_string``) and a Boolean array: the value was not null and is
    not UTF-8. Chunks of 65,536 values are checked by pyarrow at once; a chunk holding a
    value that is not UTF-8 is decoded value by value.
    """
    import pyarrow as pa

    texts, bad = [], []
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            chunk = chunk.dictionary_decode()
        raw = chunk.cast(pa.large_binary())  # the bytes as stored: no check
        for off in range(0, len(raw), 65_536):
            part = raw.slice(off, 65_536)
            try:
                texts.append(part.cast(pa.large_string()))  # checks UTF-8
                bad.append(pa.array([False] * len(part), pa.bool_()))
            except pa.ArrowInvalid:
                values = [_decoded(v) for v in part.to_pylist()]
                texts.append(pa.array([v for v, _ in values], pa.large_string()))
                bad.append(pa.array([b for _, b in values], pa.bool_()))
    return (pa.chunked_array(texts, pa.large_string()), pa.chunked_array(bad, pa.bool_()))


def _decoded(value: bytes | None) -> tuple[str | None, bool]:
    if value is None:
        return None, False
    try:
        return value.decode("utf-8"), False
    except UnicodeDecodeError:
        return None, True


def _read_not_utf8(file: Path, plan: dict[str, ColumnPlan]
                   ) -> tuple[pl.LazyFrame, dict[str, ColumnPlan], dict[str, str]]:
    """A file holding text that is not UTF-8, read with such a value null (`scan_declared`).

    Its text columns are read by pyarrow as bytes and decoded (`_utf8_or_null`), then given
    their file dtype (``String``, ``Categorical``); its other columns are read by Polars, as
    for any file (by pyarrow when the file holds a name twice, which Polars refuses; such a
    file is read here whatever its text). A nested column holding text is null (no declared
    type converts it).

    Returns:
        The file's frame (in memory), its plan, and for each text column the name of a
        Boolean column: the value was not UTF-8 (for the ``LOST`` counts).
    """
    import pyarrow.parquet as pq

    cols = [c for c, (how, _) in plan.items() if how == "column"]
    flat = [c for c in cols if not (getattr(plan[c][1], "inner", None)
                                    or getattr(plan[c][1], "fields", None))
            and _has_text(plan[c][1])]
    plan = {c: (("unreadable", what) if c in cols and c not in flat and _has_text(what)
                else (how, what)) for c, (how, what) in plan.items()}
    plain = [c for c in cols if plan[c][0] == "column" and c not in flat]
    frame = None
    if plain:
        try:
            frame = pl.read_parquet(parquet_source(file), columns=plain, hive_partitioning=False)
        except pl.exceptions.DuplicateError:  # a name held twice: Polars reads no column
            frame = cast(pl.DataFrame, pl.from_arrow(
                pq.ParquetFile(parquet_source(file)).read(columns=plain)))
    table = pq.ParquetFile(parquet_source(file)).read(columns=flat)
    n = table.num_rows if frame is None else frame.height
    extra: list[pl.Series] = [pl.Series("__tabdp_rows", [None] * n, pl.Null)]
    invalid: dict[str, str] = {}
    for c in flat:
        text, bad = _utf8_or_null(table.column(c))
        series = pl.Series(c, pl.from_arrow(text)).cast(plan[c][1], strict=False)
        invalid[c] = f"__tabdp_not_utf8_{c}"
        extra += [series, pl.Series(invalid[c], pl.from_arrow(bad), pl.Boolean)]
    out = pl.DataFrame(extra) if frame is None else frame.hstack(extra)
    return out.lazy(), plan, invalid


def _hive_values(rel: Path, names: Mapping[str, Any]) -> dict[str, Any]:
    """The partition values on a file's relative path, for the columns ``names`` only.

    The outermost folder of a name wins; a name with no folder on this path is absent. A
    value that is not UTF-8 text (its bytes, or its percent escapes) is `_NOT_TEXT` (then
    null, as a value the declared type cannot represent); a level whose name is not text is
    no declared column's.
    """
    found: dict[str, Any] = {}
    for p in rel.parts[:-1]:
        if "=" in p:
            k, v = _text(p.split("=", 1)[0]), p.split("=", 1)[1]
            if k is not None and k in names:
                found.setdefault(k, None if v == _HIVE_NULL else
                                 (_NOT_TEXT if _text(v) is None else _text(v)))
    return found


def hive_columns(folder: Path) -> list[str]:
    """Names of the hive partition levels (``name=value`` folders) above the first data file.

    Args:
        folder: A dataset's folder (a file has none).

    Returns:
        The level names, outermost first.

    Example:
        >>> hive_columns(Path("no/such/folder"))
        []
    """
    if not folder.is_dir():
        return []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        if any(is_data_file(f) for f in files):
            rel = Path(root).relative_to(folder)
            return [p.split("=", 1)[0] for p in rel.parts if "=" in p]
    return []


def _spark_read_type(dtype: Any) -> Any:
    """The Spark type Spark reads a Parquet column of (Polars footer) ``dtype`` as, or None.

    None: Spark cannot read it (a ``decimal256``, a nanosecond timestamp, a nested or other
    type), or it is all-null (``Null``); that column is then null in that file, as Polars
    reads a ``decimal256`` (decided from the dtype alone).
    """
    from pyspark.sql import types as T

    simple = {pl.Int8: T.ByteType(), pl.Int16: T.ShortType(), pl.Int32: T.IntegerType(),
              pl.Int64: T.LongType(), pl.UInt8: T.ShortType(), pl.UInt16: T.IntegerType(),
              pl.UInt32: T.LongType(), pl.UInt64: T.DecimalType(20, 0),
              pl.Float32: T.FloatType(), pl.Float64: T.DoubleType(), pl.String: T.StringType(),
              pl.Boolean: T.BooleanType(), pl.Date: T.DateType(), pl.Binary: T.BinaryType()}
    for k, v in simple.items():
        if dtype == k:
            return v
    if dtype == pl.Categorical or isinstance(dtype, pl.Enum):
        return T.StringType()
    if isinstance(dtype, pl.Decimal):
        p = 38 if dtype.precision is None else dtype.precision
        return T.DecimalType(p, dtype.scale or 0) if p <= 38 else None
    if isinstance(dtype, pl.Datetime) and dtype.time_unit in ("ms", "us"):
        return T.TimestampType() if dtype.time_zone else T.TimestampNTZType()
    return None


def _spark_path(file: Path) -> str:
    """A file's path as Spark reads it literally (Hadoop glob characters escaped).

    A path that is not UTF-8 (a folder named in another encoding) cannot be named to Java:
    the file is linked (or copied) into a private temporary folder under a UTF-8 name, kept
    until the process exits (`_utf8_alias`).
    """
    path = str(file.resolve())
    try:
        path.encode("utf-8")
    except UnicodeError:
        path = str(_utf8_alias(file))
    return "".join("\\" + ch if ch in "\\{}[]*?" else ch for ch in path)


_ALIASES: dict[str, Path] = {}
_ALIAS_LOCK = threading.Lock()
_ALIAS_COUNT = itertools.count(1)


def _utf8_alias(file: Path) -> Path:
    """A UTF-8 path of the same file: a hard link (or a copy) in a private temporary folder.

    The folder (mode 0700) is removed when the process exits; Spark reads lazily, so the
    alias must outlive the read's plan. One lock and a counter name each alias (review R16:
    two reads at once took one name, and the copy fallback wrote the second file into the
    first one's inode, overwriting the curator's file); a copy never opens an existing path.
    """
    import atexit
    import shutil
    import tempfile

    with _ALIAS_LOCK:
        if "dir" not in _ALIASES:
            _ALIASES["dir"] = Path(tempfile.mkdtemp(prefix="tabdp-declared-"))
            atexit.register(shutil.rmtree, _ALIASES["dir"], True)
        alias = _ALIASES["dir"] / f"{next(_ALIAS_COUNT)}.parquet"
        src = os.fsencode(file)
        try:
            os.link(src, alias)
        except FileExistsError:
            raise
        except OSError:  # another file system: a copy ("x": never into an existing file)
            with open(src, "rb") as f, open(alias, "xb") as g:
                shutil.copyfileobj(f, g)
        _ALIASES[str(alias)] = alias
    return alias


def _spark_utf8(col: Any) -> Any:
    """A Spark text column with a value that is not UTF-8 null (Spark reads text unchecked).

    ``is_valid_utf8`` where Spark has it (4.0); else the value's bytes must survive a round
    trip through Spark's UTF-8 encoder, which replaces a byte sequence that is not UTF-8.
    """
    from pyspark.sql import functions as F

    valid = (F.is_valid_utf8(col) if hasattr(F, "is_valid_utf8")
             else F.encode(col, "UTF-8") == col.cast("binary"))
    return F.when(valid, col)


def _case_twins_unreadable(file: Path, plan: dict[str, ColumnPlan],
                           columns: tuple[pl.Schema, frozenset[str]] | None = None
                           ) -> dict[str, ColumnPlan]:
    """A file's plan on a case-insensitive Spark session: a column with a twin is unreadable.

    Spark's Parquet reader matches a requested column without regard to letter case
    (``spark.sql.caseSensitive=false``, its default) and stops the job when a file holds two
    matches (``v`` and ``V``): one such file stopped an author-mode run (exit 4) where its
    neighbour without it ran (stop 64). Such a column is null in that file, as a column Spark
    cannot read at all; decided from the file's footer alone (``columns``: its `file_columns`
    already read, as `file_plans` gives them; else read here).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> pl.DataFrame({"v": [1], "V": [2], "w": [3]}).write_parquet(d / "a.parquet")
        >>> _case_twins_unreadable(d / "a.parquet", {"v": ("column", pl.Int64),
        ...                                          "w": ("column", pl.Int64)})
        {'v': ('unreadable', Int64), 'w': ('column', Int64)}
    """
    from tabdp.frame.backends.spark import fold_case

    if not any(how == "column" for how, _ in plan.values()):
        return plan
    # names as Spark compares them (`fold_case`; not Python's str.lower: stop 65); a name held
    # twice counts twice (review rev65p)
    folded: dict[str, int] = {}
    once, twice = columns if columns is not None else file_columns(file)
    for c in [*once, *twice, *twice]:
        folded[fold_case(c)] = folded.get(fold_case(c), 0) + 1
    return {c: ("unreadable", what) if how == "column" and folded.get(fold_case(c), 0) > 1
            else (how, what) for c, (how, what) in plan.items()}


def _twin_notes(path: Path, file: Path, before: Mapping[str, ColumnPlan],
                after: Mapping[str, ColumnPlan],
                columns: tuple[pl.Schema, frozenset[str]] | None = None
                ) -> list[dict[str, Any]]:
    """The curator's notes of the columns `_case_twins_unreadable` made null in ``file``.

    ``columns``: the file's `file_columns` if already read (else read here).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> pl.DataFrame({"v": [1], "V": [2]}).write_parquet(d / "a.parquet")
        >>> n = _twin_notes(d, d / "a.parquet", {"v": ("column", pl.Int64)},
        ...                 {"v": ("unreadable", pl.Int64)})
        >>> n[0]["file"], n[0]["column"], n[0]["twins"]
        ('a.parquet', 'v', ['V'])
    """
    from tabdp.frame.backends.spark import fold_case

    changed = [c for c, (how, _) in after.items() if how != before[c][0]]
    if not changed:
        return []
    rel = file.relative_to(path).as_posix() if path.is_dir() else file.name
    once, twice = columns if columns is not None else file_columns(file)
    have = [*once, *sorted(twice)]  # a name held twice is a twin too (review rev65p)
    out = []
    for c in changed:
        twins = [n for n in have if n != c and fold_case(n) == fold_case(c)]
        out.append({"file": rel, "column": c, "twins": twins,
                    "reason": f"the file also holds {twins}, the same name in letter case as "
                              "Spark compares names: a case-insensitive Spark session "
                              "(spark.sql.caseSensitive=false) cannot read the column apart, "
                              "so it is null in this file (counted in declared_nulls)"})
    return out


def read_declared_spark(spark: Any, path: Path, schema: Mapping[str, Any], *,
                        hive: bool | None = None, flag_lost: bool = False,
                        notes: list[dict[str, Any]] | None = None) -> Any:
    """The Spark twin of `scan_declared`: the same files, columns, folder values and nulls.

    The files and the per-file decisions are `file_plans`' (names and footers, on the
    driver; no value is read there); each file column is read with the Spark type of its
    own Parquet type (a column Spark cannot read, `_spark_read_type`: null in that file),
    files with the same plan are read together, and every declared column is converted with
    `convert_leniently_spark`; on a case-insensitive session a file column with a twin in
    letter case in the same file is null there too (`_case_twins_unreadable`: Spark cannot
    read it apart). The groups are joined with ``unionByName``. Spark's own
    partition discovery and schema merging are never used: the first file, or one file's
    type, never decides another file's columns.

    Args:
        spark: The SparkSession.
        path: A Parquet file or a folder read whole (`dataset_files`).
        schema: Declared column -> Polars dtype.
        hive: ``False`` reads no partition folders.
        flag_lost: Add the Boolean columns ``LOST + name`` as `scan_declared` does.
        notes: A list to which each file column read as nulls because of a twin in letter
            case is added, for the curator only (``{"file", "column", "twins",
            "reason"}``; the file relative to ``path``): confidential, it names the file.

    Returns:
        A Spark DataFrame: the declared columns in the declared order (Spark types of the
        declared dtypes), then the ``LOST`` columns.

    Raises:
        polars.exceptions.PolarsError, OSError: A file's footer is not readable Parquet.

    Example:
        >>> read_declared_spark.__name__  # needs a SparkSession: see the spark tests
        'read_declared_spark'
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    groups: dict[tuple[Any, ...], tuple[dict[str, ColumnPlan], list[Path]]] = {}
    insensitive = str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() != "true"
    # each file's footer read once (`file_plans`), not again for its twins in letter case
    footers: dict[Path, tuple[pl.Schema, frozenset[str]]] = {}
    for file, plan in file_plans(path, schema, hive=hive,
                                 readable=lambda d: _spark_read_type(d) is not None,
                                 footers=footers):
        if insensitive:
            before, plan = plan, _case_twins_unreadable(file, plan, footers[file])
            if notes is not None:
                notes.extend(_twin_notes(path, file, before, plan, footers[file]))
        key = tuple((c, how, repr(what)) for c, (how, what) in plan.items())
        groups.setdefault(key, (plan, []))[1].append(file)
    frames = []
    for plan, files in groups.values():
        read = T.StructType([T.StructField(c, _spark_read_type(what), True)
                             for c, (how, what) in plan.items() if how == "column"])
        # the raw local file system: Hadoop's default one reads a ``.crc`` file beside a data
        # file (``.a.parquet.crc``) and fails when it does not match; it is not a data file
        sdf = (spark.read.schema(read).option("recursiveFileLookup", "true")
               .option("mergeSchema", "false")
               .option("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
               .option("fs.file.impl.disable.cache", "true")
               .parquet(*[_spark_path(f) for f in files]))
        cols, lost = [], []
        for c, t in schema.items():
            how, what = plan[c]
            st = declared_spark_type(t)
            if how == "folder":
                raw = F.lit(what).cast(T.StringType())
                e = convert_leniently_spark(raw, T.StringType(), t)
                gone = raw.isNotNull() & e.isNull()
            elif how == "column":
                raw = F.col(c)
                src = _spark_read_type(what)
                # text that is not UTF-8 is null, as on Polars (`scan_declared`)
                text = _spark_utf8(raw) if isinstance(src, T.StringType) else raw
                e = convert_leniently_spark(text, src, t)
                gone = raw.isNotNull() & e.isNull()
            else:
                e = F.lit(None)
                # (an all-null file column, ``Null``, is read as nulls: nothing lost)
                gone = F.lit(how == "unreadable" and what != pl.Null)
            cols.append(e.cast(st).alias(c))
            lost.append(gone.alias(LOST + c))
        frames.append(sdf.select(*cols, *(lost if flag_lost else [])))
    if not frames:
        fields = [T.StructField(c, declared_spark_type(t), True) for c, t in schema.items()]
        if flag_lost:
            fields += [T.StructField(LOST + c, T.BooleanType(), True) for c in schema]
        return spark.createDataFrame([], T.StructType(fields))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out
