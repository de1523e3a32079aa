"""The run's input stage: reading a spec's input and applying its rules, before any release.

Both `tabdp.release.runner` (the run) and `tabdp.release.input_schema` (``validate``'s
metadata-only schema check) scan the input the same way (`scan_input`); the scan lives here so
that neither imports the other. The rest is the run's (Polars) input stage: the input's
presence, the data-quality rules (nulls, negatives, non-finite values, bounds, unit ids), the
author-mode key casts, the keys derived through hierarchies and the declared schema. The
author-mode scan against a declared schema (`scan_declared`) is also the one the Python
`tabdp.Curator` uses for a Parquet path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from tabdp.exceptions import (
    DataValidationError,
    SpecError,
)
from tabdp.frame.keys import KeySet, check_key_pair
from tabdp.release.curator_config import SCHEMA_DTYPES
from tabdp.release.declared import (
    LOST,
    convert_leniently,
    dataset_files,
    hive_columns,
    scan_declared,
)
from tabdp.release.spec import ReleaseSpec, read_keys
from tabdp.release.spec.schema import NATIONAL, ROW_ID

__all__ = ["scan_input", "check_input_present", "read_input", "declared_schema",
           "NATIONAL", "ROW_ID", "ROW_LABEL", "scan_declared", "convert_leniently",
           "dataset_files", "hive_columns", "LOST", "member_column"]

# NATIONAL: the constant key column of national (``by = []``) releases; ROW_ID: the row id
# assigned when the input is read, before any join, filter or sort, the privacy unit when the
# spec has no ``input.unit`` (each row is a unit). Both are defined with the spec's reserved
# names (`tabdp.release.spec.schema`), which refuse a unit, measure or key column so named
# before any data is read.
#: Name of the row id in the confidential per-record report (position in the input as read).
ROW_LABEL = "row"


def scan_input(spec: ReleaseSpec, *, flag_lost: bool = False, schema_only: bool = False
               ) -> tuple[pl.LazyFrame, dict[str, str]]:
    """Scan a spec's Parquet input lazily (metadata only) and return it with its schema.

    A folder is scanned as a dataset (hive partition folders become columns, typed like their
    key domains, else text). In author mode with a declared schema, every file is scanned on
    its own and each declared column converted leniently to its declared type
    (`scan_declared`: a value the type cannot represent becomes null); partition values are
    converted leniently too. Nothing about the files' contents decides whether the scan
    succeeds or which types it has.

    Args:
        spec: A release spec whose input is Parquet (``input.path``).
        flag_lost: Author mode with a declared schema: add `scan_declared`'s ``LOST``
            columns (a value the conversion made null), which `_input_rules` counts into
            the confidential ``input_rules.declared_nulls`` and removes. They are not in the
            returned schema.
        schema_only: The frame is for its schema only: an author-mode scan skips its text
            check (`scan_declared`), which reads the declared text columns.

    Returns:
        The lazy frame and its schema as ``{column: dtype name}``.

    Raises:
        DataValidationError: The input is not readable Parquet.

    Example:
        >>> from tabdp.datasets import example_spec_path
        >>> from tabdp.release.spec import load_spec
        >>> lf, schema = scan_input(load_spec(example_spec_path()))
        >>> schema["county"]
        'String'
    """
    src = spec.input.path
    assert src is not None  # input.table: refused under the Polars engine before any read
    author = spec.input.mode == "author"
    declared = {c: SCHEMA_DTYPES[t] for c, t in spec.input.schema.items()} if author else {}
    hive = spec.input.hive_partitioning
    try:
        if declared:
            # author mode: each file on its own, every declared column converted leniently,
            # partition folders typed by the declared schema (issue 27: one file storing an
            # integer column as float, because pandas writes an integer column with one
            # missing value so, stopped the run; whether it did depended on one record)
            lf = scan_declared(src, declared, hive=hive, flag_lost=flag_lost,
                               schema_only=schema_only)
            return lf, {k: str(v) for k, v in lf.collect_schema().items()
                        if not k.startswith(LOST)}
        parts = hive_columns(src) if src.is_dir() and hive is not False else []
        domain_types = {c: (spec.domains[c].dtype if c in spec.domains else pl.String)
                        for c in parts}
        kwargs: dict[str, Any] = {}
        source: Any = spec.input.source
        if src.is_dir():
            # A folder: scan it as a dataset, so hive partition folders (state=01/...) become
            # columns, typed like their key domains (else text): codes such as "01" stay codes.
            source = src
            if parts:
                kwargs["hive_partitioning"] = True
                # author mode: partition values are read as text, then converted leniently
                # (``size_class=5-9`` against an integer domain becomes null instead of
                # failing the run, which would tell the author that some record holds such a
                # value; issue 27 review)
                kwargs["hive_schema"] = (dict.fromkeys(parts, pl.String) if author
                                         else domain_types)
            elif hive is not None:
                kwargs["hive_partitioning"] = hive
        elif hive is not None:
            kwargs["hive_partitioning"] = hive
        lf = pl.scan_parquet(source, **kwargs)
        schema = lf.collect_schema()
        if author and parts:
            casts = [convert_leniently(pl.col(c), schema[c], t).alias(c)
                     for c, t in domain_types.items() if c in schema and schema[c] != t]
            lf = lf.with_columns(casts) if casts else lf
            schema = lf.collect_schema()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 - Polars' Rust panics are BaseExceptions
        # (review R12: a panic escaped the CLI with a traceback); tabdp's failure, whatever the
        # cause, so the run's failure path (failure.json in author mode) handles it
        raise DataValidationError(
            f"cannot read the input {spec.input.source!r} as Parquet: {err}.\n"
            "Hint: input.path must be a Parquet file, a folder of Parquet files or a "
            "hive-partitioned dataset.") from err
    return lf, {k: str(v) for k, v in schema.items()}


def check_input_present(spec: ReleaseSpec) -> None:
    """Check that the spec's input file, folder or glob exists (nothing is read).

    A data-independent check: the CLI's ``validate`` and ``run`` exit 2 when it fails.

    Args:
        spec: The release spec.

    A catalog table (``input.table``) is checked by ``tabdp run --engine spark`` once Spark
    has started (still before any data is read).

    Raises:
        SpecError: No file matches ``input.path``.

    Example:
        >>> import dataclasses, tempfile, pathlib
        >>> from tabdp.datasets import example_spec_path
        >>> from tabdp.release.spec import load_spec
        >>> spec = load_spec(example_spec_path())
        >>> check_input_present(spec)
        >>> missing = pathlib.Path(tempfile.gettempdir()) / "nope.parquet"
        >>> gone = dataclasses.replace(spec.input, path=missing)
        >>> try:
        ...     check_input_present(dataclasses.replace(spec, input=gone))
        ... except ValueError as err:
        ...     print(str(err).split(":")[0])
        input.path
    """
    src = spec.input.path
    if src is None:
        return
    if spec.input.dataset is not None and spec.input.mode == "author":
        # the curator's dataset: its root is there or not, whatever the records; the message
        # names the dataset, not its server path
        if not src.exists():
            raise SpecError(
                "input.dataset", f"the curator's dataset {spec.input.dataset!r} is not "
                "available on this server. Nothing was read or written.\nHint: ask the "
                "curator (its path in the curator configuration does not exist).")
        return
    if "*" in str(src):
        import glob

        if not glob.glob(str(src), recursive=True):
            raise SpecError(
                "input.path", f"no file matches the input pattern {str(src)!r}. Nothing was "
                "read or written.\nHint: check the pattern; relative paths are resolved "
                "against the spec file's folder.")
    elif not src.exists():
        raise SpecError(
            "input.path", f"input not found: {str(src)!r}. Nothing was read or written.\n"
            "Hint: check the path; relative paths are resolved against the spec file's folder.")


def _measures_used(spec: ReleaseSpec) -> list[str]:
    out: list[str] = []
    for t in spec.tables:
        for m in t.measures if t.kind == "sum" else ():
            if m not in out:
                out.append(m)
    return out


def _input_rules(spec: ReleaseSpec, lf: pl.LazyFrame) -> tuple[pl.LazyFrame, dict[str, Any]]:
    """Apply the spec's declared data-quality rules (one counting pass over the input).

    In order: rows without a unit id (``input.unit_nulls``), ±inf values (``input.nonfinite``),
    public bounds (``input.bounds``: values clamped into them), negative values
    (``input.negatives``). Nulls and NaN are left to the engine (``nulls``). The counts are
    confidential.
    """
    inp = spec.input
    schema = lf.collect_schema()
    measures = [m for m in _measures_used(spec) if m in schema and schema[m].is_numeric()
                and schema[m] != pl.Boolean]
    exprs: dict[str, pl.Expr] = {m: pl.col(m) for m in measures}
    changed: set[str] = set()
    drop: list[pl.Expr] = []
    stats: dict[str, pl.Expr] = {}
    # author mode: values the declared types could not represent (now null), counted in the
    # same pass (confidential, curator only)
    lost = [c for c in schema if c.startswith(LOST)]
    for c in lost:
        stats[f"lost:{c[len(LOST):]}"] = pl.col(c).sum()
    if inp.unit is not None and inp.unit_nulls == "drop" and inp.unit in schema:
        bad = pl.col(inp.unit).is_null()
        if schema[inp.unit].is_float():
            bad = bad | pl.col(inp.unit).is_nan()
        stats["unit_nulls"] = bad.sum()
        drop.append(bad)
    for m in measures:
        if not schema[m].is_float():
            continue
        is_inf = pl.col(m).is_infinite()
        stats[f"inf:{m}"] = is_inf.sum()
        if inp.nonfinite == "zero":
            exprs[m] = pl.when(is_inf).then(0.0).otherwise(exprs[m])
            changed.add(m)
        elif inp.nonfinite == "drop":
            drop.append(is_inf)
    for m, (lo, hi) in inp.bounds.items():
        if m not in exprs:
            continue
        e = exprs[m]
        if schema[m].is_integer() and float(lo).is_integer() and float(hi).is_integer() \
                and abs(lo) < 2.0 ** 63 and abs(hi) < 2.0 ** 63:
            low, high = int(lo), int(hi)
            # bounds outside the declared type's range: Polars cast them to it (an error once
            # the data had a row: exit 4 on a dataset, 0 on its empty neighbour; review r82).
            # Clipped in Int64 as on Spark (a ``long``), or for UInt64 from 0 (no value is
            # below it); a UInt64 column with a negative upper bound, in Float64
            dmin, dmax = _int_range(schema[m])
            if low < dmin or high > dmax:
                if schema[m] != pl.UInt64:
                    e = e.cast(pl.Int64)
                elif high >= 0:
                    low = max(low, 0)
                else:
                    e = e.cast(pl.Float64)
                    low, high = float(lo), float(hi)  # type: ignore[assignment]
        else:
            e = e.cast(pl.Float64)
            low, high = float(lo), float(hi)  # type: ignore[assignment]
        number = ~pl.col(m).cast(pl.Float64).is_nan()  # Polars orders NaN above every number
        stats[f"below:{m}"] = ((e < low) & number).sum()
        stats[f"above:{m}"] = ((e > high) & number).sum()
        exprs[m] = e.clip(low, high)
        changed.add(m)
    for m in measures:  # counted under every rule, "allow" included (confidential audit)
        stats[f"neg:{m}"] = (exprs[m] < 0).sum()
    if inp.negatives == "drop":
        drop += [exprs[m] < 0 for m in measures]
    if drop:
        stats["dropped"] = pl.any_horizontal(*drop).fill_null(False).sum()
    row = (lf.select(**stats).collect(engine="streaming").row(0, named=True) if stats else {})
    row = {k: int(v or 0) for k, v in row.items()}
    info, neg = _rules_outcome(spec, row, measures, [m for m in inp.bounds if m in exprs])
    if inp.negatives == "zero":
        for m in neg:
            exprs[m] = pl.when(exprs[m] < 0).then(0).otherwise(exprs[m])
            changed.add(m)
    if drop:
        lf = lf.filter(~pl.any_horizontal(*drop).fill_null(False))
    if changed:
        lf = lf.with_columns(exprs[m].alias(m) for m in measures if m in changed)
    if lost:
        info["declared_nulls"] = {c[len("lost:"):]: n for c, n in row.items()
                                  if c.startswith("lost:")}
        lf = lf.drop(lost)
    return lf, info


def _rules_outcome(spec: ReleaseSpec, row: Mapping[str, int], measures: Sequence[str],
                   bounded: Sequence[str]) -> tuple[dict[str, Any], dict[str, int]]:
    """The confidential counts of the input rules, and their refusals (either engine).

    ``row`` holds the counts of one pass (``inf:<m>``, ``neg:<m>``, ``below:<m>``,
    ``above:<m>``, ``unit_nulls``, ``dropped``). Returns the counts as ``confidential.json``
    shows them and the negative counts per measure.
    """
    inp = spec.input
    inf = {m: row[f"inf:{m}"] for m in measures if row.get(f"inf:{m}")}
    neg = {m: row[f"neg:{m}"] for m in measures if row.get(f"neg:{m}")}
    info: dict[str, Any] = {
        "policy": inp.negatives, "negative_values": neg, "clipped": 0, "dropped": 0,
        "nonfinite": {"policy": inp.nonfinite, "values": inf},
        "bounds": {m: {"below": row.get(f"below:{m}", 0), "above": row.get(f"above:{m}", 0)}
                   for m in bounded},
        "rows_without_unit_id_dropped": row.get("unit_nulls", 0),
        "rows_dropped_by_input_rules": row.get("dropped", 0),
    }
    if inf and inp.nonfinite == "error":
        detail = ", ".join(f"{m!r}: {n}" for m, n in inf.items())
        err = DataValidationError(
            "the input has +inf / -inf values in measure column(s); input.nonfinite is "
            "'error'. Nothing was released or written.\nHint: set input.nonfinite = \"drop\", "
            "\"zero\" or \"clamp\" (with input.bounds).")
        err.confidential = {"infinite_values": dict(inf), "detail": detail}
        raise err
    if neg and inp.negatives == "error":
        detail = ", ".join(f"{m!r}: {n}" for m, n in neg.items())
        err = DataValidationError(
            f"the input has negative values in measure column(s) ({detail}); input.negatives "
            "is 'error'. Nothing was released or written.\nHint: set input.negatives = "
            "\"allow\" for signed measures (additive mechanisms), \"zero\" to clip them to 0 or "
            "\"drop\" to drop those rows (counted in the confidential report).")
        err.confidential = {"negative_values": dict(neg)}
        raise err
    if inp.negatives == "zero":
        info["clipped"] = int(sum(neg.values()))
    if inp.negatives == "drop":
        info["dropped"] = row.get("dropped", 0)
    return info, neg


def _key_cast_needed(column: str, have: Any, want: Any) -> bool:
    """Author mode: whether key ``column`` of dtype ``have`` is converted to its domain's ``want``.

    Not when the dtypes are equal, nor for a number / text mismatch (the engine refuses it
    from the schema alone). Otherwise only between the kinds the engine compares, decided from
    the two dtypes before any data is read (stop 65): `tabdp.frame.keys.check_key_pair` raises
    for the others. Shared by the Polars run (`_author_key_casts`) and the Spark run
    (`tabdp.release._spark_run.author_key_casts`).

    Example:
        >>> _key_cast_needed("c", pl.Int64, pl.Int64), _key_cast_needed("c", pl.Int64, pl.String)
        (False, False)
        >>> _key_cast_needed("c", pl.Int32, pl.Int64)
        True
    """
    if have == want:
        return False
    textual = (pl.String, pl.Categorical, pl.Enum)
    if (have.is_numeric() and (want == pl.String or isinstance(want, textual))) or \
            (want.is_numeric() and (have == pl.String or isinstance(have, textual))):
        return False
    check_key_pair(column, have, want, declared=True)
    return True


def _author_key_casts(spec: ReleaseSpec, lf: pl.LazyFrame) -> pl.LazyFrame:
    """Author mode: key columns take their domain's type.

    A value that does not convert becomes null and so falls outside the key set (never an
    error that depends on a value). A number / text mismatch is left alone (the engine refuses
    it from the schema alone). The conversion is the declared types' (`convert_leniently`):
    a fraction in a key of an integer domain is not converted (``1.5`` is null, outside the
    key set; Polars' own cast truncated it to ``1``, a cell the record is not in: review r76),
    a whole float such as ``3.0`` is ``3``. Only between the kinds the engine compares
    (`tabdp.frame.keys.check_key_pair`, decided from the dtypes before any data is read):
    a Boolean column against an integer domain is refused, as on the engine.
    """
    schema = lf.collect_schema()
    casts = []
    for c in dict.fromkeys(c for t in spec.tables for c in t.by):
        if c not in schema or c not in spec.domains:
            continue
        have, want = schema[c], spec.domains[c].dtype
        if not _key_cast_needed(c, have, want):
            continue
        # a date Polars cannot format as text is null, not a Rust panic (review R14); a
        # fraction is null in an integer domain, never truncated (review r76)
        casts.append(convert_leniently(pl.col(c), have, want).alias(c))
    return lf.with_columns(casts) if casts else lf


def _derived_mapping(spec: ReleaseSpec, h: str, fine: str, col: str) -> pl.DataFrame:
    return spec.hierarchies[h].mapping.select(fine, col).unique(maintain_order=True)


def _rows_kept_one_to_one(spec: ReleaseSpec, schema: Mapping[str, Any],
                          lf: Any = None) -> bool:
    """Whether the hierarchy joins keep one row per input row (public: the mappings only).

    A fine code mapped to two coarse codes would repeat its rows; the in-memory ledger then
    counts the repeated rows as one record (by row id), which a streaming session cannot do.
    The fine codes are compared as the join compares them: converted to the input column's
    dtype (``lf``'s schema, a public fact), where two codes may become one.
    """
    return _mapping_collision(spec, schema, lf) is None


def _mapping_collision(spec: ReleaseSpec, schema: Mapping[str, Any], lf: Any = None,
                       dtypes: Mapping[str, Any] | None = None
                       ) -> tuple[str, str, pl.DataType, list[Any]] | None:
    """The first hierarchy whose fine codes collide once converted for the join, or ``None``.

    Returns (hierarchy, fine column, the input column's dtype, the colliding mapping codes).
    Decided from the spec's mapping files and the input's schema only (public facts). The
    spec already refuses a fine code mapped to two coarse codes; after the conversion to the
    input column's type (``"1001"`` and ``"01001"`` for an ``Int64`` column, ``2**53`` and
    ``2**53 + 1`` for a ``Float64`` one) two fine codes may still become one, and the join would
    then repeat every record holding it.
    """
    if dtypes is None:
        dtypes = lf.collect_schema() if isinstance(lf, pl.LazyFrame) else {}
    for col, (h, fine) in _derived_needs(spec, schema)[0].items():
        fine_codes = _derived_mapping(spec, h, fine, col)[fine]
        if fine not in dtypes:
            continue
        converted = fine_codes.cast(dtypes[fine], strict=False)
        dup = converted.is_duplicated() & converted.is_not_null()
        if bool(dup.any()):
            first = converted.filter(dup)[0]
            codes = fine_codes.filter(converted.eq_missing(first)).to_list()
            return h, fine, dtypes[fine], codes
    return None


def _refuse_mapping_collisions(spec: ReleaseSpec, schema: Mapping[str, Any], lf: Any = None,
                               dtypes: Mapping[str, Any] | None = None) -> None:
    """Refuse, before the data is read, mapping codes that the join's conversion merges."""
    hit = _mapping_collision(spec, schema, lf, dtypes)
    if hit is None:
        return
    h, fine, dtype, codes = hit
    raise SpecError(
        f"hierarchies.{h}", f"the mapping's {fine!r} codes {_show_codes(codes)} become one code "
        f"when converted to the input column's type {dtype} for the join, so every record "
        "with that code would be joined to several coarser codes and counted in several "
        "cells of the rollups.\nHint: store the mapping's codes with the input column's type "
        f"(e.g. {fine!r} as {dtype} without leading zeros), or cast the input column to the "
        "mapping's type in the data first.")


def _show_codes(codes: list[Any]) -> str:
    return ", ".join(repr(c) for c in codes[:4]) + (" ..." if len(codes) > 4 else "")


def _add_derived(spec: ReleaseSpec, lf: pl.LazyFrame, schema: Mapping[str, Any]) -> pl.LazyFrame:
    """Add the derived key columns of direct releases and the tables' membership columns.

    Coarse key columns come from the hierarchies when the input does not have them; national
    tables get a constant key; each table with direct rollups gets its membership column
    (`_member_needs`). The joins keep the input's row order (accounting follows the row id,
    but the order is kept anyway).
    """
    need, national = _derived_needs(spec, schema)
    for col, (h, fine) in need.items():
        mapping = _derived_mapping(spec, h, fine, col)
        fine_dtype = lf.collect_schema()[fine]
        mapping = mapping.with_columns(pl.col(fine).cast(fine_dtype, strict=False))
        lf = lf.join(mapping.lazy(), on=fine, how="left", maintain_order="left")
    if national:
        lf = lf.with_columns(pl.lit("all", dtype=pl.String).alias(NATIONAL))
    from tabdp.frame.backends.polars import mark_members

    for col, keys in _member_needs(spec).items():
        lf = mark_members(lf, keys, col)
    return lf


def member_column(i: int) -> str:
    """The membership column of the ``i``-th table of a spec (see `_member_needs`).

    Named after `NATIONAL`, whose prefix the spec refuses for any unit, measure or key column.

    Args:
        i: The table's position in the spec.

    Returns:
        The column name.

    Example:
        >>> member_column(0)
        '_tabdp_national_in0'
    """
    return f"{NATIONAL}_in{i}"


def _member_needs(spec: ReleaseSpec) -> dict[str, KeySet]:
    """Membership column → the public key set of its table, for each table with direct rollups.

    Every level of a table is the statistic of one population: the rows whose finest keys
    (the table's ``by``) are in the table's key set, the rows the table itself counts. The run
    marks them with a constant key (``"all"``) in the table's membership column, null for
    every other row, and each direct release of the table is grouped by its level's keys and
    that column: a row outside the table's key set is in no cell of the direct release
    (neither counted nor charged there). Decided from the spec alone (public); the rows are
    matched to the keys by the engine's own cell matching (`tabdp.frame.backends.polars.
    mark_members`, `tabdp.frame.backends.spark.mark_members`), so a row is a member exactly
    when the table puts it in a cell.
    """
    out: dict[str, KeySet] = {}
    for i, t in enumerate(spec.tables):
        if not t.by or not any(r.direct for r in t.rollups):
            continue
        if t.keys_file is not None:
            keys = KeySet.from_frame(read_keys(t.keys_file, t.by, spec.domains))
        else:
            keys = KeySet.from_dict({c: spec.domains[c] for c in t.by})
        out[member_column(i)] = keys
    return out


def read_input(spec: ReleaseSpec) -> pl.LazyFrame:
    """The input as the Polars engine of `run_release()` reads it, before any release.

    The same steps, in the same code: scan, row ids (without a unit), the declared data-quality
    rules, author-mode key casts and the derived key columns. For curator tools that need the
    confidential rows as the run sees them (``tabdp compare``); nothing is released.

    Args:
        spec: A validated spec.

    Returns:
        A lazy frame of the input rows.

    Example:
        >>> import tabdp, pathlib
        >>> from tabdp.release.spec import load_spec
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> lf = read_input(load_spec(root / "examples" / "cbp_release.toml"))
        >>> "payroll" in lf.collect_schema()
        True
    """
    lf, schema = scan_input(spec)
    if spec.input.unit is None:
        lf = lf.with_row_index(ROW_ID)
    lf, _ = _input_rules(spec, lf)
    if spec.input.mode == "author":
        lf = _author_key_casts(spec, lf)
    return _add_derived(spec, lf, schema)


def _derived_needs(spec: ReleaseSpec, schema: Mapping[str, Any]
                   ) -> tuple[dict[str, tuple[str, str]], bool]:
    """Derived key columns the input lacks (column → (hierarchy, finer column)); national?"""
    need: dict[str, tuple[str, str]] = {}
    national = False
    for t in spec.tables:
        if not t.by:
            national = True
        for r in t.rollups:
            if not r.direct:
                continue
            # (a direct national release is keyed by its table's membership column alone)
            for col, (h, fine) in r.maps.items():
                if col not in schema:
                    need[col] = (h, fine)
    return need, national


def declared_schema(spec: ReleaseSpec) -> list[dict[str, Any]]:
    """The input columns the spec reads, with their roles and declared types (no data read).

    Args:
        spec: A validated spec.

    Returns:
        One ``{"name", "role", "type"}`` per column: the unit, key columns (type of their
        public domain), derived keys of direct rollups and measures (with their bounds).

    Example:
        >>> from tabdp.release.spec import load_spec
        >>> import tabdp, pathlib
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> cols = declared_schema(load_spec(root / "examples" / "cbp_release.toml"))
        >>> [(c["name"], c["role"]) for c in cols][:3]
        [('estab_id', 'unit'), ('county', 'key'), ('naics2', 'key')]
    """
    out: dict[str, dict[str, Any]] = {}
    inp = spec.input
    if inp.unit is not None:
        out[inp.unit] = {"name": inp.unit, "role": "unit",
                         "type": "identifier (any type)",
                         "rows_without_id": inp.unit_nulls}
    for t in spec.tables:
        for c in t.by:
            if c in out:
                continue
            if c in spec.domains:
                dtype = str(spec.domains[c].dtype)
            elif t.keys_file is not None:
                dtype = str(read_keys(t.keys_file, t.by, spec.domains).schema[c])
            else:  # pragma: no cover - the spec guarantees a domain or a keys file
                dtype = "unknown"
            out[c] = {"name": c, "role": "key", "type": dtype}
    for t in spec.tables:
        for r in t.rollups:
            if not r.direct:
                continue
            for c, (h, fine) in r.maps.items():
                if c not in out:
                    out[c] = {"name": c, "role": "derived key",
                              "type": str(spec.domains[c].dtype) if c in spec.domains else None,
                              "derived": f"from {fine!r} through hierarchy {h!r} (an input "
                                         "column of that name is used instead if present)"}
    for m in _measures_used(spec):
        if m in out:
            continue
        col: dict[str, Any] = {"name": m, "role": "measure", "type": "numeric"}
        if m in inp.bounds:
            col["bounds"] = list(inp.bounds[m])
        out[m] = col
    return list(out.values())


def _int_range(dtype: pl.DataType) -> tuple[int, int]:
    """The smallest and largest value of a Polars integer dtype (as Python ints)."""
    bits: dict[Any, int] = {pl.Int8: 8, pl.Int16: 16, pl.Int32: 32, pl.Int64: 64, pl.UInt8: 8,
                            pl.UInt16: 16, pl.UInt32: 32, pl.UInt64: 64, pl.Int128: 128}
    width = bits.get(dtype.base_type(), 64)
    if dtype.is_unsigned_integer():
        return 0, 2**width - 1
    return -(2 ** (width - 1)), 2 ** (width - 1) - 1
