"""Reading a curator-declared dataset against its declared schema (author mode).

Every file of a dataset is read on its own and each declared column converted to its declared
type; a value that type cannot represent becomes null (then the spec's null rules apply, which
in author mode never stop a run), so whether a run fails never depends on one record. Used by
the release workflow's input stage and by the Python `tabdp.Curator`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import polars as pl

__all__ = ["scan_declared", "convert_leniently", "convert_leniently_spark", "dataset_files",
           "hive_columns", "LOST", "is_data_file"]

_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: Prefix of `scan_declared`'s ``flag_lost`` columns (a value that became null).
LOST = "__tabdp_lost_"


def convert_leniently(expr: pl.Expr, source: Any, target: Any) -> pl.Expr:
    """``expr`` (of dtype ``source``) in dtype ``target``; a value it cannot represent is null.

    The author-mode conversion to a declared type. "Cannot represent" means: a fraction, NaN,
    an infinity or an out-of-range number in an integer column (never truncated: ``2.5`` is
    null, not ``2``; a whole float such as ``3.0`` is ``3``, and 64-bit values stay exact,
    nothing passes through Float64), text that does not parse, an out-of-range value, a number
    other than 0 and 1 as a Boolean, text other than an ISO date as a Date. A conversion
    between dtypes that Polars does not support for every value (a list or bytes to a number
    or text, text to a datetime) gives a column of nulls, decided from the two dtypes alone.
    The null then meets the declared null rule, which in author mode never stops a run.

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
    if source == pl.Null:
        return expr.cast(target)
    if target == pl.Date and source == pl.String:  # ISO dates (the text of a partition)
        return expr.str.strptime(pl.Date, "%Y-%m-%d", strict=False)
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


def convert_leniently_spark(col: Any, source: Any, target: Any) -> Any:
    """A Spark column in the declared Polars dtype ``target``, null where it cannot represent.

    The Spark twin of `tabdp.release.declared.convert_leniently`, value for value where it
    matters: Spark's ``try_cast`` truncates a fraction to an integer (``2.5`` -> ``2``),
    saturates a double at the integer range (``2**63`` -> ``2**63 - 1``), reads ``" 3"`` as
    an integer and any non-zero number as ``true``; here a fraction, NaN, an infinity or an
    out-of-range number in an integer column is null (a whole number such as ``3.0`` is
    ``3``), text is an integer only when it is one (sign and digits), a number is a Boolean
    only when it is 0 or 1, and a double that overflows a Float32 is null.

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

    from tabdp.frame.backends.spark import spark_type, try_cast

    st = spark_type(target)
    conv = try_cast(col, st)
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
        if isinstance(source, T.StringType):
            return F.when(col.rlike(r"^[+-]?[0-9]+$"), conv)
        return conv
    if isinstance(st, T.BooleanType) and isinstance(source, T.NumericType):
        return F.when(col == 0, F.lit(False)).when(col == 1, F.lit(True))
    if isinstance(st, T.FloatType) and (floating or isinstance(source, T.DecimalType)):
        inf = F.lit(float("inf")).cast(T.FloatType())
        finite = ~conv.isin(inf, -inf)
        was = ~col.cast(T.DoubleType()).isin(float("inf"), float("-inf"))
        return F.when(finite | ~was, conv)
    return conv


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


def _readable(dtype: Any) -> bool:
    """Whether Polars can read a file column of ``dtype`` at all (from the dtype alone).

    Polars reports a ``decimal256`` column (precision above 38) in the schema but fails, or
    panics, on any expression that reads it (review R12); such a column is read as nulls.
    """
    if isinstance(dtype, pl.Decimal):
        return dtype.precision is None or dtype.precision <= 38
    inner = getattr(dtype, "inner", None)
    if inner is not None:
        return _readable(inner)
    fields = getattr(dtype, "fields", None)
    if fields:
        return all(_readable(f.dtype) for f in fields)
    return True


def scan_declared(path: Path, schema: Mapping[str, Any], *, hive: bool | None = None,
                  flag_lost: bool = False) -> pl.LazyFrame:
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

    Args:
        path: A Parquet file or a folder read whole (`dataset_files`).
        schema: Declared column -> Polars dtype.
        hive: ``False`` reads no partition folders.
        flag_lost: Add, for each column, a Boolean column ``LOST + name``: the value was
            not null in the file and is null after the conversion (for the curator's counts;
            every row of a file whose column cannot be read at all).

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
    folder = path.is_dir()
    frames = []
    for file in dataset_files(path):
        have = pl.scan_parquet(file, hive_partitioning=False).collect_schema()
        values = (_hive_values(file.relative_to(path), schema)
                  if folder and hive is not False else {})
        cols, lost = [], []
        for c, t in schema.items():
            if c in values:
                raw = pl.lit(values[c], pl.String)
                e = convert_leniently(raw, pl.String, t)
                gone = raw.is_not_null() & e.is_null()
            elif c in have and not _readable(have[c]):
                e = pl.lit(None, t)
                gone = pl.lit(True)
            elif c in have:
                raw = pl.col(c)
                e = convert_leniently(raw, have[c], t)
                gone = raw.is_not_null() & e.is_null()
            else:
                e = pl.lit(None, t)
                gone = pl.lit(False)
            cols.append(e.alias(c))
            lost.append(gone.alias(LOST + c))
        # with_columns, then select: a literal (a partition value, a missing column) is
        # broadcast to the file's rows even when no column of the file is read
        new = cols + (lost if flag_lost else [])
        frames.append(pl.scan_parquet(file, hive_partitioning=False).with_columns(new)
                      .select([e.meta.output_name() for e in new]))
    if not frames:
        return pl.LazyFrame(schema={**schema, **({LOST + c: pl.Boolean for c in schema}
                                                 if flag_lost else {})})
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")


def _hive_values(rel: Path, names: Mapping[str, Any]) -> dict[str, str | None]:
    """The partition values on a file's relative path, for the columns ``names`` only.

    The outermost folder of a name wins; a name with no folder on this path is absent.
    """
    found: dict[str, str | None] = {}
    for p in rel.parts[:-1]:
        if "=" in p:
            k, v = unquote(p.split("=", 1)[0]), p.split("=", 1)[1]
            if k in names:
                found.setdefault(k, None if v == _HIVE_NULL else unquote(v))
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
