"""The spec against the input's schema, before any data is read (``tabdp validate`` and ``run``).

A misspelt measure, a missing key or unit column, a text measure or a key column whose type
cannot match its public domain are found from the input's *schema* alone: the column names and
types in the Parquet footer (metadata, no row is read; a hive-partitioned folder adds its
partition columns, typed like their domains). They are reported as spec errors (exit code 2)
with the key path and a "did you mean" suggestion, never as the generic data-dependent failure.

Which schema:

* **curator mode** (``input.mode = "curator"``, the default): the input's own schema, read by
  `read_input_schema()`. The curator owns the data; the schema holds no record.
* **author mode**: the author may not see the input, so the check is made against the schema
  the curator *declares* for the dataset in the curator configuration (``schema = {...}`` of
  ``[datasets.<name>]``), which author mode requires (a spec on a dataset without one is
  refused when it is loaded).

The rules are the engine's (`_engine`): measures must be numeric (not Boolean),
unit ids scalar, and key columns comparable with their domain without converting numbers to text
or text to numbers (author mode converts other key types to the domain's type first, between
the kinds the engine compares only: `tabdp.frame.keys.check_key_pair`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from tabdp.exceptions import ColumnTypeError, DataValidationError, LedgerError, SpecError
from tabdp.frame.keys import KeySet, check_cell_keys, check_key_pair
from tabdp.release._input import ROW_ID, scan_input
from tabdp.release.spec import ReleaseSpec, read_keys

__all__ = ["read_input_schema", "check_input_schema", "check_spec_input_schema",
           "spec_input_schema", "check_ledger_unit_type"]

_TEXT = (pl.String, pl.Categorical, pl.Enum)
#: Ends every message here. Not "the input's metadata": in author mode the schema is the
#: curator's declaration (review r74).
_NO_DATA = "Checked from the schema alone: no data was read."


def _zone_of(dtype: Any) -> str | None:
    """A Datetime's time zone (``""``: none; a Date has none), ``None`` for other types."""
    if isinstance(dtype, pl.Datetime):
        return dtype.time_zone or ""
    return "" if dtype == pl.Date else None


def _key_refusal(err: ColumnTypeError, *, author: bool,
                 pairs: Sequence[tuple[Any, Any]] = ()) -> str:
    """The engine's refusal of a key pair, with a hint for a spec's author (not Python's).

    The engine's message ends with a hint for Python callers (``pl.col(c).cast(...)``), which
    a spec cannot do: the reason is kept, the hint says what to change in the spec instead.
    ``pairs``: the refused (data, public values) dtypes; a nested column or a time zone on one
    side only gets its own hint (review rev66x: both were told to give the public values "in
    the column's own kind", which they were, or which a spec cannot do).

    Example:
        >>> from tabdp.frame.keys import check_key_pair
        >>> try:
        ...     check_key_pair("k", pl.Boolean, pl.Int64)
        ... except ColumnTypeError as err:
        ...     text = _key_refusal(err, author=True)
        >>> "pl.col" in text, "Checked from the schema alone" in text, "curator" in text
        (False, True, True)
    """
    reason = str(err).split("\nHint:", 1)[0].rstrip()
    for have, want in pairs:
        if have.is_nested() or want.is_nested():
            column = ("ask the data's curator for a column holding the value inside that is the "
                      "key" if author else "store the value inside that is the key as a column "
                      "of its own in the data before the release")
            return (f"{reason} {_NO_DATA}\nHint: a nested column (List, Array, Struct) cannot "
                    "key a spec's table, whose public values hold one value each; "
                    f"{column}, and group by that column (or leave this one out of by).")
        zh, zw = _zone_of(have), _zone_of(want)
        if zh is not None and zw is not None and bool(zh) != bool(zw):
            if zh:
                give = (f"timestamps in the column's time zone ({zh!r})")
                store = ("ask the data's curator to declare the column without it" if author
                         else "store the column in the data without a time zone (its wall "
                              "times) before the release")
            else:
                give = ("timestamps without a time zone (the column's wall times"
                        + ("; a declared Datetime column holds UTC times)" if author else ")"))
                store = (f"ask the data's curator to declare the column in {zw!r}" if author
                         else f"store the column in the data in the time zone {zw!r} before "
                              "the release")
            return (f"{reason} {_NO_DATA}\nHint: give the public values (the domain, hierarchy "
                    f"or allowed keys) as a Parquet file of {give}; or {store}.")
    store = ("ask the data's curator to declare the column in that kind" if author else
             "store the column in the data in that kind before the release")
    return (f"{reason} {_NO_DATA}\nHint: give the public values (the domain, hierarchy "
            "level or allowed keys) in the key column's own kind, e.g. `[true, false]` for a "
            "Boolean column, dates as \"YYYY-MM-DD\" text in a domain for a Date column, or "
            f"a Parquet file of that type; or {store}.")


def read_input_schema(spec: ReleaseSpec) -> dict[str, Any]:
    """The input's column names and Polars types, from the Parquet metadata only.

    The schema the run sees: a folder's hive partition columns are included, typed like their
    key domains (else text).

    Args:
        spec: A validated spec whose input is ``input.path`` (Parquet).

    Returns:
        Column name -> Polars dtype, in the input's order.

    Raises:
        SpecError: The input is a catalog table (``input.table``: read by Spark only), or its
            files are not readable Parquet (their metadata cannot be read).

    Example:
        >>> from tabdp.datasets import example_spec_path
        >>> from tabdp.release.spec import load_spec
        >>> schema = read_input_schema(load_spec(example_spec_path()))
        >>> schema["payroll"], schema["county"]
        (Float64, String)
    """
    if spec.input.path is None:
        raise SpecError("input.table", "the input is a Spark catalog table; its schema is read "
                                       "by tabdp run --engine spark.\nHint: set input.path to "
                                       "Parquet files to check the schema before the run.")
    try:
        lf, _ = scan_input(spec, schema_only=True)
    except DataValidationError as err:
        what, _, hint = str(err).partition("\nHint: ")
        raise SpecError("input.path", f"{what} No data was read."
                        + (f"\nHint: {hint}" if hint else "")) from None
    return dict(lf.collect_schema())


def _did_you_mean(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _columns(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:40])
    return shown + (f", ... ({len(names)} columns)" if len(names) > 40 else "")


def _key_values(spec: ReleaseSpec, i: int, col: str) -> tuple[pl.DataFrame, str]:
    """The public values of key column ``col`` of table ``i`` and where they come from."""
    t = spec.tables[i]
    if t.keys_file is not None:
        frame = read_keys(t.keys_file, t.by, spec.domains)
        return frame, f"the allowed keys file {t.keys_file.name!r} (tables[{i}].keys)"
    owner = next((h for h in spec.hierarchies.values() if col in h.levels), None)
    where = (f"its public domain (level {col!r} of hierarchy {owner.name!r})" if owner
             else f"its public domain (domains.{col})")
    return spec.domains[col].to_frame(col), where


def check_input_schema(spec: ReleaseSpec, schema: Mapping[str, Any], *,
                       source: str = "the input") -> None:
    """Check the spec's columns against an input schema (no data is read).

    Curator mode: pass `read_input_schema()`'s result. Author mode: pass the schema the
    curator declares for the dataset (never the data's own, which the author may not see).

    Args:
        spec: A validated spec.
        schema: Column name -> Polars dtype of the input.
        source: How the schema is named in the messages (e.g. ``"the declared dataset
            schema"``).

    Raises:
        SpecError: The first problem, with its key path, the value, what is allowed and the
            fix: ``input.unit`` missing or not scalar; ``tables[i].measures[j]`` missing or not
            numeric; ``tables[i].by[j]`` missing, or numbers against text (or a domain whose
            values cannot be converted to the column's type).

    Example:
        >>> import polars as pl
        >>> from tabdp.datasets import example_spec_path
        >>> from tabdp.release.spec import load_spec
        >>> spec = load_spec(example_spec_path())
        >>> schema = read_input_schema(spec)
        >>> check_input_schema(spec, schema)
        >>> typo = {("payrol" if k == "payroll" else k): v for k, v in schema.items()}
        >>> try:
        ...     check_input_schema(spec, typo)
        ... except SpecError as err:
        ...     print(err.path, "Did you mean 'payrol'?" in str(err))
        tables[0].measures[0] True
    """
    names = list(schema)
    listed = f"{source}'s columns are {_columns(names)}"
    unit = spec.input.unit
    if unit is None and ROW_ID in schema:
        raise SpecError("input.path", f"{source} has a column named {ROW_ID!r}, the name of the "
                                      "row ids a row-mode run gives each row (no input.unit). "
                                      f"{_NO_DATA}\nHint: drop or rename that column in the "
                                      "input, or set input.unit to a column of record ids.")
    if unit is not None:
        if unit not in schema:
            raise SpecError("input.unit", f"the unit column {unit!r} is not a column of "
                                          f"{source}; {listed}.{_did_you_mean(unit, names)} "
                                          f"{_NO_DATA}\nHint: fix input.unit (or omit it when "
                                          "each row is a unit).")
        if isinstance(schema[unit], (pl.List, pl.Struct, pl.Array)):
            raise SpecError("input.unit", f"the unit column {unit!r} has type {schema[unit]} "
                                          f"in {source}; unit ids must be scalar values. "
                                          f"{_NO_DATA}\nHint: name a column of scalar ids.")
    for i, t in enumerate(spec.tables):
        tp = f"tables[{i}]"
        for j, m in enumerate(t.measures if t.kind == "sum" else ()):
            if m not in schema:
                raise SpecError(f"{tp}.measures[{j}]",
                                f"measure {m!r} (table {t.name!r}) is not a column of {source}; "
                                f"{listed}.{_did_you_mean(m, names)} {_NO_DATA}\nHint: fix "
                                "the measure's name in the spec (or the column's in the data).")
            dt = schema[m]
            if not (dt.is_numeric() or isinstance(dt, pl.Decimal)) or dt == pl.Boolean:
                raise SpecError(f"{tp}.measures[{j}]",
                                f"measure {m!r} (table {t.name!r}) has type {dt} in {source}; "
                                f"a sum needs a numeric column (integer or float). {_NO_DATA}"
                                "\nHint: sum a numeric column, or store this one as numbers "
                                "(cleaning its non-numeric values) before the release.")
        for j, c in enumerate(t.by):
            if c not in schema:
                raise SpecError(f"{tp}.by[{j}]",
                                f"key column {c!r} (table {t.name!r}) is not a column of "
                                f"{source}; {listed}.{_did_you_mean(c, names)} {_NO_DATA}"
                                "\nHint: fix the by column's name in the spec (and its domain "
                                "or hierarchy level), or the column's name in the data.")
        _check_key_types(spec, i, schema, source)


def _check_key_types(spec: ReleaseSpec, i: int, schema: Mapping[str, Any], source: str
                     ) -> None:
    """Key columns of table ``i`` against their public values (the engine's rule)."""
    t = spec.tables[i]
    author = spec.input.mode == "author"
    keys_frame: pl.DataFrame | None = None
    compared: dict[str, Any] = {}  # the dtype each key column is compared in
    for j, c in enumerate(t.by):
        values, where = _key_values(spec, i, c)
        have, want = schema[c], values.schema[c]
        if want.is_nested():
            # review r74: a list or struct of public values passed here (author mode converts
            # the key column to the domain's type), then failed every run after reading data
            raise SpecError(
                f"tables[{i}].by[{j}]",
                f"the public values of key column {c!r} (table {t.name!r}) in {where} are "
                f"{want}, not single values; a key's domain holds one text or number per "
                f"row. {_NO_DATA}\nHint: give the domain one value per row (e.g. a Parquet "
                "column of strings or integers, or an inline list).")
        mismatch = ((have.is_numeric() and isinstance(want, _TEXT))
                    or (want.is_numeric() and isinstance(have, _TEXT)))
        if mismatch:
            raise SpecError(
                f"tables[{i}].by[{j}]",
                f"key column {c!r} (table {t.name!r}) is {have} in {source} but {where} holds "
                f"{want} values; tabdp does not convert between numbers and text for keys, "
                "because codes such as '06037' and 6037 would silently fall into different "
                f"cells. {_NO_DATA}\nHint: give the public values in the input's type (a CSV "
                "domain or hierarchy file is read as text: use Parquet for integer codes, or "
                "list them inline), or store the column in the data in the domain's type.")
        if author and have != want and c in spec.domains:
            # author mode converts the key column to the domain's type first, between the
            # kinds the engine compares only (stop 65: a Boolean column and a decimal domain
            # passed here; the conversion failed once a record held a value)
            try:
                check_key_pair(c, have, want, declared=True)
            except ColumnTypeError as err:
                raise SpecError(f"tables[{i}].by[{j}]",
                                f"key column {c!r} (table {t.name!r}) is {have} in {source} "
                                f"and cannot be compared with {where}: "
                                f"{_key_refusal(err, author=author, pairs=[(have, want)])}"
                                ) from None
            have = want
        compared[c] = have
        if t.keys_file is not None:
            keys_frame = values
            continue
        try:
            check_cell_keys(pl.Schema({c: have}), KeySet.from_frame(values), [c])
        except ColumnTypeError as err:
            raise SpecError(f"tables[{i}].by[{j}]",
                            f"key column {c!r} (table {t.name!r}) is {have} in {source} and "
                            f"cannot be compared with {where}: "
                            f"{_key_refusal(err, author=author, pairs=[(have, want)])}"
                            ) from None
    if keys_frame is not None:
        # in author mode a column with a domain is compared in the domain's type; one without
        # (an allowed-keys file alone) in its declared type, as the run compares it (stop 65:
        # skipped, the run stopped with the data-dependent failure, exit 4)
        pairs = [(compared[c], keys_frame.schema[c]) for c in t.by]
        try:
            check_cell_keys(pl.Schema(compared), KeySet.from_frame(keys_frame.select(t.by)),
                            list(t.by))
        except ColumnTypeError as err:
            raise SpecError(f"tables[{i}].keys",
                            f"the allowed keys of table {t.name!r} cannot be compared with "
                            f"{source}'s key columns: "
                            f"{_key_refusal(err, author=author, pairs=pairs)}") from None


def spec_input_schema(spec: ReleaseSpec) -> tuple[dict[str, Any], str] | None:
    """The input schema this spec's mode may use, read before any data, and its name.

    Curator mode with Parquet input: the input's own schema (metadata only). Author mode: the
    schema the curator declares for the dataset (``input.dataset``), never the data's own.

    Args:
        spec: A validated spec whose input exists (`check_input_present()`).

    Returns:
        ``(schema, source)`` (column -> Polars dtype, and how messages name it), or ``None``:
        author mode without a declared schema, or a catalog table in curator mode (read by
        Spark only).

    Raises:
        SpecError: See `read_input_schema()`.

    Example:
        >>> from tabdp.datasets import example_spec_path
        >>> from tabdp.release.spec import load_spec
        >>> schema, source = spec_input_schema(load_spec(example_spec_path()))
        >>> source, str(schema["payroll"])
        ('the input', 'Float64')
    """
    if spec.input.mode != "curator":
        if not spec.input.schema:  # author mode without a declared schema: nothing to check
            return None
        from tabdp.release.curator_config import SCHEMA_DTYPES

        # dtype instances (pl.Schema makes them): the checks ask isinstance(dtype, String),
        # which a class such as pl.String never is (review r74: a key declared "String"
        # against numeric public values passed validate, then stopped every run)
        return (dict(pl.Schema({c: SCHEMA_DTYPES[t] for c, t in spec.input.schema.items()})),
                "the declared dataset schema")
    if spec.input.path is None:
        return None
    return read_input_schema(spec), "the input"


def _ledger_kind(dtype: Any) -> str | None:
    """How a lifetime ledger keys ids of ``dtype`` (`tabdp.Ledger`), or ``None``: it refuses them.

    ``"Int64"`` for integers (not UInt64, refused by the ledger whatever the values),
    ``"String"`` for text.
    """
    if dtype == pl.UInt64:
        return None
    if dtype.is_integer():
        return "Int64"
    if dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum):
        return "String"
    return None


def check_ledger_unit_type(spec: ReleaseSpec, schema: Mapping[str, Any],
                           ledger_dtype: str | None, *, source: str = "the input") -> None:
    """The input's unit id type against the one the series' ledger keys units by (no data).

    A series' ledger records the type of its unit ids (``Int64`` or ``String``) at its first
    release, from its unit column's type whether or not it charged a unit; ids of the other
    type would be accounts of their own (the text ``"7"`` and the integer 7), so the ledger
    refuses them. Decided from the schema alone, before any
    data is read (review C: it was refused only after the data was read, as the generic
    data-dependent failure, exit 4).

    Args:
        spec: A validated spec with a unit and a ledger.
        schema: The input schema (`spec_input_schema`).
        ledger_dtype: The ledger's unit type (`tabdp.Ledger.unit_dtype`; ``None``: no
            release yet, nothing to compare).
        source: How the schema is named in the message.

    Raises:
        LedgerError: The unit column's type is integer against a ``String`` ledger, or text
            against an ``Int64`` one (the message names both and the fix; for a dataset's
            ledger it names the dataset, never the ledger's path).

    Example:
        >>> import types, polars as pl
        >>> spec = types.SimpleNamespace(input=types.SimpleNamespace(unit="id"),
        ...                              ledger=types.SimpleNamespace(series="s", dataset=None))
        >>> check_ledger_unit_type(spec, {"id": pl.Int32}, "Int64")
        >>> try:
        ...     check_ledger_unit_type(spec, {"id": pl.String}, "Int64")
        ... except LedgerError as err:
        ...     print(str(err)[:72])
        the lifetime ledger of series 's' keys units by Int64 ids (the type of t
    """
    unit = spec.input.unit
    led = spec.ledger
    if unit is None or led is None or unit not in schema or schema[unit] == pl.Null:
        return  # a column of no values (type Null) holds no id the ledger could not key
    dtype = schema[unit]
    kind = _ledger_kind(dtype)
    if kind is None:  # refused by its type, before any data is read (review r83)
        where = (f"dataset {led.dataset!r}" if led.dataset is not None else
                 f"series {led.series!r}")
        raise LedgerError(
            f"the lifetime ledger of {where} keys units by integer ids that fit Int64 or by "
            f"text; the unit column {unit!r} has type {dtype} in {source}"
            f"{' (its ids may not fit Int64, whatever the values)' if dtype == pl.UInt64 else ''}"
            ". Refused before any data was read; nothing was read or written.\nHint: store the "
            f"unit column as {ledger_dtype or 'Int64 or String'} in this release's input, the "
            "same type in every release of the series.")
    if ledger_dtype is None or kind == ledger_dtype:
        return  # no release yet, or the same kind
    cast = "pl.Int64" if ledger_dtype == "Int64" else "pl.String"
    if led.dataset is not None:  # a curator-configured ledger: no server path in the message
        raise LedgerError(
            f"the lifetime ledger of dataset {led.dataset!r} keys units by {ledger_dtype} ids "
            f"(the type of the unit column in its earlier releases); the unit column {unit!r} "
            f"has type {dtype} in {source}, so every unit would be a new account, starting at "
            "zero. Refused before any data was read; nothing was read or written.\nHint: ask "
            f"the curator to declare the unit column as {ledger_dtype} again (the same type in "
            "every release charged to the dataset's ledger).")
    raise LedgerError(
        f"the lifetime ledger of series {led.series!r} keys units by {ledger_dtype} ids (the "
        f"type of the unit column in the series' earlier releases); the unit column {unit!r} "
        f"has type {dtype} in {source}, so every unit would be a new account, starting at "
        "zero (the text '7' and the integer 7 are different ids). Refused before any data was "
        "read; nothing was read or written.\nHint: store the unit column as "
        f"{ledger_dtype} in this release's input (e.g. pl.col({unit!r}).cast({cast}) when "
        "writing it), the same type in every release of the series; or start a new series "
        "for ids of the new type.")


def check_spec_input_schema(spec: ReleaseSpec) -> bool:
    """`check_input_schema()` on the schema this spec's mode may use.

    Curator mode with Parquet input: the input's own schema (metadata only). Author mode: the
    schema the curator declares for the dataset (``input.dataset``), never the data's own;
    skipped when none is declared. Catalog tables in curator mode (read by Spark only) are
    skipped.

    Args:
        spec: A validated spec whose input exists
            (`check_input_present()`).

    Returns:
        Whether the check was made.

    Raises:
        SpecError: See `check_input_schema()` and `read_input_schema()`.

    Example:
        >>> from tabdp.datasets import example_spec_path
        >>> from tabdp.release.spec import load_spec
        >>> check_spec_input_schema(load_spec(example_spec_path()))
        True
    """
    got = spec_input_schema(spec)
    if got is None:
        return False
    check_input_schema(spec, got[0], source=got[1])
    return True
