"""``tabdp run --engine spark``: the runner's input steps and confidential writes on Spark.

`tabdp.release.runner` runs a spec on either engine with the same steps (the engine itself,
started and stopped, is `tabdp.frame.backends.run_engine`'s); this module holds
the Spark twins of the steps that touch the confidential data before the releases (reading the
input, numbering rows, the input rules, author-mode key casts, derived keys). The releases
themselves are the accessor's (``spark_df.dp``, `tabdp.frame._spark`); the released tables'
collection and the per-record report's write are the run engine's
(`tabdp.frame.backends.run.SparkRun`).

What reaches the driver: the input's schema, the counters of the input rules (one aggregate),
the number of rows of each input partition (row ids), the released tables (at most the key
sets) and the summaries `tabdp.frame._spark` collects. The per-record report is written by
Spark's own writer into the staging folder and renamed like every other output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tabdp.exceptions import DataValidationError, SpecError
from tabdp.frame.keys import KeySet
from tabdp.release._input import _key_cast_needed

__all__ = ["read_input", "read_declared", "number_rows", "input_rules", "author_key_casts",
           "declared_casts", "add_derived", "schema_of", "refuse_case_clashes"]


_CASE = "spark.sql.caseSensitive"


def read_input(spark: Any, table: str | None, path: Path | None, hive: bool | None,
               domains: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    """The input as a Spark DataFrame and its schema as text (Polars dtype names).

    Hive partition folders (``state=01/``) of a folder become columns typed like their key
    domains (else text), as the Polars engine does: Spark's own type inference of partition
    values is turned off while the folder is listed, so codes such as ``"01"`` stay codes.

    Args:
        spark: The SparkSession.
        table: ``input.table``, or ``None`` to read ``path``.
        path: A Parquet file, a folder of Parquet files or a glob (Hadoop glob syntax).
        hive: ``input.hive_partitioning`` (``False``: partition folders are not columns).
        domains: Key column → Polars dtype of its public domain.

    Returns:
        The frame and ``{column: dtype}``.

    Raises:
        DataValidationError: The input cannot be read.
    """
    from pyspark.sql import functions as F

    from tabdp.frame.backends.spark import polars_schema, spark_type, try_cast

    infer = "spark.sql.sources.partitionColumnTypeInference.enabled"
    try:
        if table is not None:
            sdf = spark.table(table)
        else:
            assert path is not None
            reader = spark.read
            if hive is False:
                reader = reader.option("recursiveFileLookup", "true")
            before = spark.conf.get(infer, "true")
            spark.conf.set(infer, "false")
            # read case sensitively: a file with columns ``x`` and ``X`` is refused by Spark's
            # reader otherwise (`refuse_case_clashes` then refuses it with what to do)
            case_before = spark.conf.get(_CASE, "false")
            spark.conf.set(_CASE, "true")
            try:
                sdf = reader.parquet(str(path))
                parts = list(sdf.inputFiles()[:1])
            finally:
                spark.conf.set(infer, before)
                spark.conf.set(_CASE, case_before)
            # before the folders' casts name their columns (a folder ``year=`` over a column
            # ``Year``: Spark's AMBIGUOUS_REFERENCE, reported as an unreadable input; rev63d)
            refuse_case_clashes(spark, sdf)
            hive_cols = _hive_parts(parts[0], path) if parts and hive is not False else []
            casts = {}
            for c in hive_cols:
                want = domains.get(c)
                if c in sdf.columns and want is not None and want != pl.String and \
                        not isinstance(want, (pl.Categorical, pl.Enum)):
                    st = spark_type(want)
                    col = F.col(c)
                    casts[c] = try_cast(col, st)
            if casts:
                sdf = sdf.withColumns(casts)
        schema = polars_schema(sdf)
    except SpecError:  # `refuse_case_clashes`: the cause, with what to do
        raise
    except Exception as err:
        raise DataValidationError(
            f"cannot read the input {str(table or path)!r} with Spark: "
            f"{type(err).__name__}.\nHint: input.path must be a Parquet file, a folder of "
            "Parquet files or a hive-partitioned dataset; input.table a table of the "
            "session's catalog.") from err
    return sdf, {k: str(v) for k, v in schema.items()}


def read_declared(spark: Any, path: Path, schema: dict[str, Any], hive: bool | None
                  ) -> tuple[Any, dict[str, str], list[dict[str, Any]]]:
    """Author mode: a dataset read file by file against its declared schema, as on Polars.

    `tabdp.release.declared.read_declared_spark` (the Polars engine's files, folder values,
    per-file decisions and conversions), with the ``LOST`` columns that `input_rules` counts
    into the confidential ``input_rules.declared_nulls`` and removes.

    Args:
        spark: The SparkSession.
        path: The dataset (a Parquet file or a folder read whole).
        schema: Declared column -> Polars dtype.
        hive: ``input.hive_partitioning``.

    Returns:
        The frame, ``{column: dtype}`` (the declared columns) and the curator's notes of the
        file columns read as nulls because of a twin in letter case (which file, which
        column, why: `read_declared_spark`'s ``notes``; confidential, never the author's).

    Raises:
        SpecError: Declared columns whose names differ only in letter case, on a
            case-insensitive session (`refuse_case_clashes`; before any file is opened).
        DataValidationError: A data file is not readable Parquet.
    """
    from tabdp.release.declared import LOST, read_declared_spark

    # the declared columns, before any file is opened: the same refusal as every Spark input
    # (stop 64: a declared ``v`` and ``V`` failed as an unreadable input on a dataset where a
    # file held both, and listed the internal columns otherwise)
    _refuse_case_clashes(spark, list(schema))
    notes: list[dict[str, Any]] = []
    try:
        sdf = read_declared_spark(spark, path, schema, hive=hive, flag_lost=True, notes=notes)
        types = {k: str(v) for k, v in _pl_schema(sdf).items() if not k.startswith(LOST)}
    except BaseException as err:  # noqa: BLE001 - as the Polars engine (Rust panics too)
        raise DataValidationError(
            f"cannot read the input {str(path)!r} with Spark: {type(err).__name__}.\n"
            "Hint: input.path must be a Parquet file, a folder of Parquet files or a "
            "hive-partitioned dataset.") from err
    return sdf, types, notes


def declared_casts(sdf: Any, schema: dict[str, Any]) -> Any:
    """Author mode: the columns of a declared schema take the declared types (Polars dtypes).

    A value that does not convert becomes null (the declared null rule then applies), as in
    the Polars engine; the files' own types never decide.

    Args:
        sdf: The input frame.
        schema: Column -> Polars dtype (the curator configuration's declared schema).

    Only the declared columns are kept, taken by position under their exact names: a catalog
    table's other columns are the curator's, and a view over files whose schema Spark infers
    from the records (JSON) has a column for a key one record holds. Kept, such a column was
    refused with the input (`refuse_case_clashes`: a name this Python's Unicode does not know,
    or the twin in letter case of a declared one, which also made the declared one ambiguous),
    so the author's run stopped (exit 4) where its neighbour without that record released
    (review rev66x). A declared column the table lacks stays missing (refused as before).

    Returns:
        The frame of the declared columns it has, cast.
    """
    from pyspark.sql import functions as F

    from tabdp.release.declared import convert_leniently_spark

    fields = list(sdf.schema.fields)
    where = {f.name: i for i, f in enumerate(fields)}
    # by position: under spark.sql.caseSensitive=false a name is ambiguous beside its twin
    by_pos = sdf.toDF(*[f"__tabdp_decl{i}" for i in range(len(fields))])
    cols = [convert_leniently_spark(F.col(f"__tabdp_decl{where[c]}"), fields[where[c]].dataType,
                                    t).alias(c)
            for c, t in schema.items() if c in where]
    return by_pos.select(*cols)


def refuse_case_clashes(spark: Any, sdf: Any) -> None:
    """Refuse an input whose column names differ only in letter case (its schema alone).

    Under ``spark.sql.caseSensitive=false`` (Spark's default) Spark cannot read an input with
    columns ``x`` and ``X``, whichever columns the spec uses: every such run stopped with
    Spark's own error after the read began (exit 4, "data-dependent failure", from the schema
    alone) where the Polars engine (case sensitive) released the tables (review rev63k).
    `read_input` lists the columns case sensitively; this refuses them before any row is
    read, with what to do.

    Args:
        spark: The SparkSession.
        sdf: The input.

    Raises:
        SpecError: Columns whose names differ only in letter case.
    """
    _refuse_case_clashes(spark, list(sdf.columns))


def check_table_columns(spark: Any, table: str) -> None:
    """Curator mode: refuse a catalog table's column names from its schema (nothing written).

    Under ``spark.sql.caseSensitive=false`` (Spark's default), names equal in letter case as
    Spark compares them, or holding a code point this Python's Unicode database does not know,
    cannot be read apart (`refuse_case_clashes`). A catalog table's names come from its
    schema (for a table, the catalog's: ``spark.table`` runs no job and reads no row):
    `tabdp.frame.backends.run.SparkRun` calls this with the check that the table exists, before
    the data phase, so such a table is a spec/usage error (exit 2, nothing written), like a
    missing one. A view over files whose schema Spark infers from their records (JSON, CSV
    with ``inferSchema``) runs a job that reads them for its schema here (review rev66x: a
    temporary or stored view ``SELECT * FROM json.`<folder>``` ran one job, and the refusal
    said "Nothing was read or written"); the message says so. Until stop 66 it
    was refused in the data phase: exit 4, "the run stopped after reading the confidential
    data", with a ``failure.json`` saying "Nothing was read". Author mode keeps that generic
    failure (the table's columns are the curator's); files keep the data phase's refusal
    (their schema is read with the data).

    Args:
        spark: The SparkSession.
        table: ``input.table``.

    Raises:
        SpecError: Such column names.
    """
    _refuse_case_clashes(spark, list(spark.table(table).columns), table=table)


def _refuse_case_clashes(spark: Any, columns: list[str], table: str | None = None) -> None:
    """`refuse_case_clashes` of a list of column names.

    ``table``: a catalog table's, from its schema before the data phase (`check_table_columns`:
    nothing written); ``None``: the input's, in the data phase (no row read).
    """
    import unicodedata

    from tabdp.frame.backends.spark import case_clashes, unknown_letters

    if str(spark.conf.get(_CASE, "false")).lower() == "true":
        return
    # the data phase has opened the input (its schema), never a row
    read = "No row was read." if table is None else (
        "Nothing was written (the names are the table's schema: the catalog's, no row read, "
        "unless the table is a view over files whose schema Spark infers from their records, "
        "e.g. JSON, which it reads for that).")
    where, key = ("the input", "input") if table is None else \
        (f"the Spark catalog's table {table!r}", "input.table")
    unknown = unknown_letters(columns)
    if unknown:
        raise SpecError(
            key, f"{where} has column(s) {unknown} holding characters this Python's "
            f"Unicode database (version {unicodedata.unidata_version}) does not know; the "
            "Spark session resolves column names without regard to case "
            "(spark.sql.caseSensitive=false, Spark's default), and whether its JVM takes such "
            f"a name for another cannot be checked. {read}\nHint: rename those "
            "columns in the data, or run with the Polars engine (case sensitive).")
    # (in any letter case as Spark compares names: `fold_case`; `ıd` and `Id`, `X_Σ` and
    # `x_ς` are one name to Spark, two to Python's str.lower; stop 65)
    clash = case_clashes(columns)
    if clash:
        raise SpecError(
            key, f"{where} has columns whose names differ only in letter case ({clash}); "
            "the Spark session resolves column names without regard to case "
            "(spark.sql.caseSensitive=false, Spark's default) and cannot read them apart. "
            f"{read}\nHint: rename or drop all but one of each group in the data, or "
            "run with the Polars engine (case sensitive).")


def _hive_parts(file: str, root: Path) -> list[str]:
    """Names of the ``name=value`` folders between ``root`` and one of its data files."""
    rel = file.split(str(root).rstrip("/") + "/", 1)[-1]
    return [p.split("=", 1)[0] for p in rel.split("/")[:-1] if "=" in p]


def number_rows(sdf: Any, name: str) -> tuple[Any, Any]:
    """Add the row id column ``name`` in the order Spark reads the input.

    Rows are numbered partition by partition, row by row (only the number of rows of each
    partition reaches the driver), before any rule, join or filter. The numbered rows are a
    local checkpoint, not a cache: every table's pass reads the rows the first one numbered,
    and a lost block fails the job instead of being recomputed from an input that may have
    changed since (the ids are positions: a changed input would charge one row's loss to
    another's record; review r35).

    Args:
        sdf: The input.
        name: The row id column.

    Returns:
        The numbered frame and the checkpointed frame it reads (`free_rows` after the run).
    """
    from pyspark.sql import functions as F

    from tabdp.frame.backends.spark import row_ids

    base, rid, _ = row_ids(sdf, sdf.columns, checkpoint=True)
    return base.select(rid.alias(name), *[F.col(c) for c in sdf.columns]), base


def free_rows(base: Any) -> None:
    """Free the blocks of `number_rows`' checkpoint now (``unpersist`` leaves them to Spark).

    Args:
        base: The checkpointed frame `number_rows` returned.
    """
    from tabdp.frame.backends.spark import free_checkpoint

    free_checkpoint(base)


def _pl_schema(sdf: Any) -> dict[str, Any]:
    from tabdp.frame.backends.spark import polars_schema

    return polars_schema(sdf)


def schema_of(sdf: Any) -> dict[str, Any]:
    """The Polars dtypes of a Spark DataFrame's columns (a public fact: its schema).

    Example:
        >>> schema_of.__name__
        'schema_of'
    """
    return _pl_schema(sdf)


def input_rules(sdf: Any, *, unit: str | None, unit_nulls: str, nonfinite: str,
                negatives: str, bounds: dict[str, tuple[float, float]],
                measures: Sequence[str]) -> tuple[Any, dict[str, int], list[str]]:
    """The Spark twin of the runner's input rules: the new frame, the counts, the measures.

    Same rules, order and counts as `tabdp.release.runner._input_rules` (one aggregate
    collected: the counts). Nulls and NaN are left to the engine. The caller raises on the
    counts (``nonfinite`` / ``negatives`` = ``"error"``) before using the frame.

    Returns:
        The frame after the rules (lazy), the counts keyed like the Polars runner's (and
        ``rows``: the rows read), and the measures the rules apply to.
    """
    from pyspark.sql import functions as F

    schema = _pl_schema(sdf)
    ms = [m for m in measures if m in schema and schema[m].is_numeric()
          and schema[m] != pl.Boolean]
    exprs: dict[str, Any] = {m: F.col(m) for m in ms}
    changed: set[str] = set()
    drop: list[Any] = []
    stats: dict[str, Any] = {}

    def count(cond: Any) -> Any:
        return F.sum(F.when(cond, 1).otherwise(0))

    stats["rows"] = F.count(F.lit(1))  # rows read (row ids: the rows the report lists)
    # author mode: values the declared types could not represent (now null; read_declared),
    # counted in the same aggregation (confidential, curator only)
    from tabdp.release.declared import LOST

    lost = [c for c in sdf.columns if c.startswith(LOST)]
    for c in lost:
        stats[f"lost:{c[len(LOST):]}"] = count(F.col(c))

    if unit is not None and unit_nulls == "drop" and unit in schema:
        bad = F.col(unit).isNull()
        if schema[unit].is_float():
            bad = bad | F.isnan(F.col(unit))
        stats["unit_nulls"] = count(bad)
        drop.append(bad)
    for m in ms:
        if not schema[m].is_float():
            continue
        is_inf = F.abs(F.col(m).cast("double")) == F.lit(float("inf"))
        stats[f"inf:{m}"] = count(is_inf)
        if nonfinite == "zero":
            exprs[m] = F.when(is_inf, F.lit(0.0)).otherwise(exprs[m])
            changed.add(m)
        elif nonfinite == "drop":
            drop.append(is_inf)
    for m, (lo, hi) in bounds.items():
        if m not in exprs:
            continue
        e = exprs[m]
        if schema[m].is_integer() and float(lo).is_integer() and float(hi).is_integer() \
                and abs(lo) < 2.0 ** 63 and abs(hi) < 2.0 ** 63:
            low: Any = F.lit(int(lo)).cast("long")
            high: Any = F.lit(int(hi)).cast("long")
        else:
            e = e.cast("double")
            low, high = F.lit(float(lo)), F.lit(float(hi))
        number = ~F.isnan(F.col(m).cast("double"))
        stats[f"below:{m}"] = count((e < low) & number)
        stats[f"above:{m}"] = count((e > high) & number)
        # Spark's least / greatest skip nulls and order NaN above every number: keep both as
        # they are (Polars' clip does)
        keep = e.isNull() | F.isnan(e.cast("double"))
        exprs[m] = F.when(keep, e).otherwise(F.least(F.greatest(e, low), high))
        changed.add(m)
    for m in ms:  # counted under every rule, "allow" included (confidential audit)
        stats[f"neg:{m}"] = count(exprs[m] < 0)
    if negatives == "drop":
        drop += [exprs[m] < 0 for m in ms]
    any_drop = None
    if drop:
        any_drop = drop[0]
        for d in drop[1:]:
            any_drop = any_drop | d
        any_drop = F.coalesce(any_drop, F.lit(False))
        stats["dropped"] = count(any_drop)
    row = sdf.agg(*[e.alias(f"__s{i}") for i, e in enumerate(stats.values())]).collect()[0]
    counts = {k: int(row[f"__s{i}"] or 0) for i, k in enumerate(stats)}
    if negatives == "zero":
        for m in ms:
            if counts.get(f"neg:{m}"):
                exprs[m] = F.when(exprs[m] < 0, F.lit(0)).otherwise(exprs[m])
                changed.add(m)
    if any_drop is not None:
        sdf = sdf.filter(~any_drop)
    if changed:
        sdf = sdf.withColumns({m: exprs[m] for m in ms if m in changed})
    if lost:
        sdf = sdf.drop(*lost)
    return sdf, counts, ms


def author_key_casts(sdf: Any, key_columns: Sequence[str], domains: dict[str, Any]) -> Any:
    """Author mode: key columns take their domain's type (a value that does not convert is null).

    The twin of `tabdp.release.runner._author_key_casts`, by the declared types' conversion
    (`tabdp.release.declared.convert_leniently_spark`): a fraction in a key of an integer
    domain is null, never truncated (Spark's cast read ``1.5`` as ``1``; review r76), and a
    timestamp's date is its UTC date whatever the session's time zone. A number / text
    mismatch is left alone (the engine refuses it from the schema alone); keys of another
    kind than the domain's are refused (`tabdp.frame.keys.check_key_pair`).
    """
    from pyspark.sql import functions as F

    from tabdp.release.declared import convert_leniently_spark

    schema = _pl_schema(sdf)
    casts = {}
    for c in dict.fromkeys(key_columns):
        if c not in schema or c not in domains:
            continue
        have, want = schema[c], domains[c].dtype
        if isinstance(want, (pl.Categorical, pl.Enum)):
            want = pl.String
        if not _key_cast_needed(c, have, want):
            continue
        casts[c] = convert_leniently_spark(F.col(c), sdf.schema[c].dataType, want)
    return sdf.withColumns(casts) if casts else sdf


def add_derived(spark: Any, sdf: Any, need: dict[str, pl.DataFrame], national: str | None,
                members: Mapping[str, KeySet] | None = None) -> Any:
    """Derived key columns of direct releases: joins with the public hierarchy mappings.

    Args:
        spark: The SparkSession.
        sdf: The input.
        need: Derived column → its public mapping (two columns: the finer one, then it).
        national: Name of the constant national key column to add, or ``None``.
        members: Membership column → its table's public key set: ``"all"`` on the rows
            the engine's cell matching puts in one of its cells, else null
            (`tabdp.frame.backends.spark.mark_members`).

    Each mapping's finer codes are converted to the input column's type on the driver, as
    the Polars engine converts them (``cast(strict=False)``: a code the type cannot hold is
    null and matches no row), and the mapping reaches Spark as an Arrow table, exactly
    (`tabdp.frame.backends.spark.local_frame`), never through pandas (review r76: an unsigned
    64-bit code above ``2**63`` went through pandas' ``uint64``, which Spark's Arrow
    conversion refuses, and its fallback lost the code; the result also depended on the
    session's Arrow settings). Coarser codes keep their type; an unsigned one takes the next
    signed type, and ``UInt64`` and ``Int128`` codes are ``long`` (Spark integers are at most
    64-bit: a code beyond it is null there, outside the key set, as Spark's key sets drop such
    keys).

    Returns:
        The frame with the new columns (mappings broadcast: they are public and small).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tabdp.frame.backends.spark import RESERVED, local_frame, mark_members, polars_dtype
    from tabdp.release.declared import _spark_read_type

    # tabdp's prefix: the join column is dropped by name, with any input column so named
    tmp = f"{RESERVED}_fine"
    for col, mapping in need.items():
        fine = mapping.columns[0]
        have = sdf.schema[fine].dataType
        coarse: Any = mapping.schema[col]
        if isinstance(coarse, (pl.Categorical, pl.Enum)):
            coarse = pl.String
        st = T.LongType() if coarse in (pl.UInt64, pl.Int128) else _spark_read_type(coarse)
        assert st is not None  # (mapping codes are text, integers or Booleans: the spec)
        frame = mapping.select(pl.col(fine).cast(polars_dtype(have), strict=False).alias(tmp),
                               pl.col(col).cast(polars_dtype(st), strict=False))
        mdf = local_frame(spark, frame, T.StructType([T.StructField(tmp, have, True),
                                                      T.StructField(col, st, True)]))
        sdf = sdf.join(F.broadcast(mdf), sdf[fine] == mdf[tmp], "left").drop(tmp)
    if national is not None:
        sdf = sdf.withColumn(national, F.lit("all"))
    for col, keys in (members or {}).items():
        sdf = mark_members(spark, sdf, keys, col)
    return sdf
