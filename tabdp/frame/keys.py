"""Key sets: the public list of cells a grouped release reports.

A [`KeySet`][tabdp.KeySet] is public input. Every key in it appears exactly once in the output,
empty cells included; rows whose keys are outside it are dropped (and counted in the confidential
report). Keys taken from the confidential data ([`KeySet.from_data`][tabdp.KeySet.from_data]) reveal
which cells exist; such releases are flagged in the public summary.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import narwhals as nw
import numpy as np
import polars as pl

from tabdp.exceptions import (
    ColumnNotFoundError,
    ColumnTypeError,
    InvalidParameterError,
    PrivacyWarning,
    UnsupportedBackendError,
)

__all__ = ["KeySet", "check_cell_keys", "check_key_pair", "check_keys_distinct", "common_dtype",
           "pandas_keys"]


#: The largest key set a cross product may have: every cell index (mixed radix, first column
#: slowest) and every partial product of the radix fit an Int64 with room to spare.
_MAX_CELLS = 2**62


def _cross(domains: list[pl.Series]) -> pl.DataFrame:
    """Cross product of domains, first column slowest (mixed-radix order).

    The size is a Python integer (numpy's int64 product wraps silently: 64 domains of 2 values
    made an empty key set whose domains still spanned 2**64 cells); a product of more than
    `_MAX_CELLS` cells is refused.
    """
    sizes = [len(d) for d in domains]
    total = math.prod(sizes) if sizes else 0
    if total > _MAX_CELLS:
        raise InvalidParameterError(
            f"a key set of {total:.3g} cells (the cross product of domains of sizes {sizes}) is "
            "too large to enumerate or index.\nHint: release by fewer key columns, or give "
            "the public list of combinations that occur (KeySet.from_frame).")
    cols = []
    inner = total
    for d, n in zip(domains, sizes, strict=True):
        inner = inner // n if n else 0
        outer = total // (n * inner) if n and inner else 0
        idx = np.tile(np.repeat(np.arange(n, dtype=np.int64), inner), outer)
        cols.append(d.gather(idx) if total else d.clear())
    return pl.DataFrame(cols)


def _to_polars(frame: Any, what: str) -> pl.DataFrame:
    if isinstance(frame, pl.DataFrame):
        return frame
    if isinstance(frame, pl.LazyFrame):
        return frame.collect()
    try:
        nwf = nw.from_native(frame)
    except TypeError as err:
        raise UnsupportedBackendError(
            f"{what}: expected a pandas or Polars frame; got {type(frame).__name__}.") from err
    if isinstance(nwf, nw.LazyFrame):
        nwf = nwf.collect()
    return nwf.to_polars()


class KeySet:
    """The public set of group keys (cells) of a release.

    Build one with [`from_dict`][tabdp.KeySet.from_dict] (cross product of public domains),
    [`from_frame`][tabdp.KeySet.from_frame] (public list of allowed combinations) or ``ks1 * ks2``
    (product).

    Example:
        >>> ks = KeySet.from_dict({"state": ["01", "02"], "naics": ["11", "21", "23"]})
        >>> len(ks), ks.columns
        (6, ['state', 'naics'])
    """

    def __init__(self, frame: pl.DataFrame, *, from_data: bool = False,
                 source: str = "frame", domains: list[pl.Series] | None = None) -> None:
        """Wrap an already deduplicated key ``frame``; use the ``from_*`` constructors instead."""
        self._df = frame
        self._from_data = from_data
        # Public flag read as ``ks.from_data``: on an instance it shadows the classmethod of the
        # same name, which the type system cannot express; internal code reads ``_from_data``.
        self.from_data = from_data  # type: ignore[method-assign, assignment]
        self.source = source
        # For full cross products: the domain of each column, in column order; row i of the
        # frame is the mixed-radix number of its codes (first column slowest). Lets releases
        # place cells by integer codes instead of joining on the whole key table.
        self._domains = domains

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, domains: Mapping[str, Iterable[Any]] | None = None,
                  **kwargs: Iterable[Any]) -> KeySet:
        """Cross product of public domains, one per column.

        Args:
            domains: ``{column: values}``; values are deduplicated, order kept.
            **kwargs: More ``column=values`` pairs (``KeySet.from_dict(county=..., naics=...)``).

        Returns:
            The key set.

        Raises:
            InvalidParameterError: If no column is given or a domain is empty or not iterable.

        Example:
            >>> KeySet.from_dict(county=["a", "b"], year=[2024]).to_polars().shape
            (2, 2)
        """
        items = dict(domains or {})
        overlap = set(items) & set(kwargs)
        if overlap:
            raise InvalidParameterError(
                f"KeySet.from_dict: column(s) {sorted(overlap)} given twice.")
        items.update(kwargs)
        if not items:
            raise InvalidParameterError(
                "KeySet.from_dict needs at least one column domain; got none.\n"
                "Hint: KeySet.from_dict({'county': counties, 'naics': sectors}).")
        columns: list[pl.Series] = []
        for name, values in items.items():
            if not isinstance(name, str):
                raise InvalidParameterError(
                    f"KeySet.from_dict: column names must be str; got {name!r}.")
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise InvalidParameterError(
                    f"KeySet.from_dict: the domain of {name!r} must be a list of values; got "
                    f"{type(values).__name__}.\nHint: wrap a single value in a list: [{values!r}].")
            series = (values if isinstance(values, pl.Series)
                      else pl.Series(name, list(values), strict=False))
            if len(series) == 0:
                raise InvalidParameterError(
                    f"KeySet.from_dict: the domain of {name!r} is empty, so the key set would "
                    "have no cells.\nHint: give at least one value per column.")
            columns.append(series.alias(name).unique(maintain_order=True))
        return cls(_cross(columns), source="domains", domains=columns)


    @classmethod
    def from_frame(cls, frame: Any, columns: Sequence[str] | None = None) -> KeySet:
        """Public list of allowed key combinations (e.g. the counties of each state).

        Args:
            frame: A pandas or Polars frame of public key combinations (not the confidential
                data: use [`from_data`][tabdp.KeySet.from_data] for that).
            columns: Columns to keep (default: all). Duplicate rows are merged.

        Returns:
            The key set.

        Example:
            >>> import polars as pl
            >>> frame = pl.DataFrame({"s": ["01", "01"], "c": ["01001", "01001"]})
            >>> KeySet.from_frame(frame).to_polars().height
            1
        """
        df = _to_polars(frame, "KeySet.from_frame")
        if columns is not None:
            missing = [c for c in columns if c not in df.columns]
            if missing:
                raise ColumnNotFoundError(
                    f"KeySet.from_frame: column(s) {missing} not in the frame; "
                    f"it has {df.columns}.")
            df = df.select(list(columns))
        if df.width == 0:
            raise InvalidParameterError("KeySet.from_frame: the frame has no columns.")
        return cls(df.unique(maintain_order=True), source="frame")

    @classmethod
    def from_data(cls, frame: Any, columns: Sequence[str]) -> KeySet:
        """Keys read from the confidential data itself (explicit opt-in; weakens privacy).

        The release then does **not** protect which cells exist: an establishment alone in its
        county × industry cell is revealed to exist. Emits a
        [`PrivacyWarning`][tabdp.exceptions.PrivacyWarning], and the public summary flags every
        release using these keys.

        Args:
            frame: The confidential frame.
            columns: Key columns.

        Returns:
            A key set flagged ``from_data=True``.

        Example:
            >>> import warnings, polars as pl
            >>> with warnings.catch_warnings():
            ...     warnings.simplefilter("ignore")
            ...     ks = KeySet.from_data(pl.DataFrame({"c": ["a", "b", "a"]}), ["c"])
            >>> ks.from_data, len(ks)
            (True, 2)
        """
        ks = cls.from_frame(frame, columns)
        warnings.warn(
            "KeySet.from_data reads the keys from the confidential data: the release will not "
            "protect which cells exist, and the public summary says so. Prefer public domains "
            "(KeySet.from_dict) or a public list of combinations (KeySet.from_frame).",
            PrivacyWarning, stacklevel=2)
        return cls(ks._df, from_data=True, source="data")

    # -- algebra ------------------------------------------------------------------------------
    def __mul__(self, other: KeySet) -> KeySet:
        """Cross product of two key sets with disjoint columns.

        Args:
            other: Another key set.

        Returns:
            The product.

        Example:
            >>> (KeySet.from_dict(a=[1, 2]) * KeySet.from_dict(b=["x", "y", "z"])).columns
            ['a', 'b']
        """
        if not isinstance(other, KeySet):
            return NotImplemented
        shared = set(self.columns) & set(other.columns)
        if shared:
            raise InvalidParameterError(
                f"KeySet product: both key sets have column(s) {sorted(shared)}.\n"
                "Hint: a product combines different dimensions; use from_frame for linked keys.")
        domains = (self._domains + other._domains
                   if self._domains is not None and other._domains is not None else None)
        frame = _cross(domains) if domains is not None else self._df.join(other._df, how="cross")
        return KeySet(frame, from_data=self._from_data or other._from_data, source="product",
                      domains=domains)

    def project(self, columns: Sequence[str]) -> KeySet:
        """The distinct combinations of a subset of the columns (a coarser level).

        Args:
            columns: Columns to keep.

        Returns:
            The projected key set.

        Example:
            >>> KeySet.from_dict(a=[1, 2], b=[3]).project(["a"]).columns
            ['a']
        """
        self._check_columns(columns, "KeySet.project")
        if self._domains is not None:
            doms = [d for c in columns for d in self._domains if d.name == c]
            return KeySet(_cross(doms), from_data=self._from_data, source=self.source,
                          domains=doms)
        return KeySet(self._df.select(list(columns)).unique(maintain_order=True),
                      from_data=self._from_data, source=self.source)

    @property
    def domains(self) -> list[pl.Series] | None:
        """The per-column domains of a cross product (key order: first column slowest).

        ``None`` for key sets that are not a cross product of domains (e.g. from a file).

        Example:
            >>> [d.to_list() for d in KeySet.from_dict(a=["x", "y"], b=[1]).domains]
            [['x', 'y'], [1]]
        """
        return None if self._domains is None else list(self._domains)

    def cell_index(self, frame: pl.DataFrame) -> np.ndarray:
        """Position in this key set of each row's key (−1 for keys outside it).

        Cross products of domains are coded by mixed-radix arithmetic on per-column codes (small
        lookups, no join on the full key table); other key sets use a join on the indexed keys.
        The frame's key columns must already have the key set's dtypes. Null keys match null
        keys.

        Args:
            frame: A Polars frame holding the key columns.

        Returns:
            int64 positions, one per row.

        Example:
            >>> import polars as pl
            >>> ks = KeySet.from_dict(a=["x", "y"], b=[1, 2, 3])
            >>> ks.cell_index(pl.DataFrame({"a": ["y", "z"], "b": [3, 1]})).tolist()
            [5, -1]
        """
        domains = self._domains
        if domains is not None and not any(d.null_count() for d in domains):
            idx = np.zeros(frame.height, dtype=np.int64)
            inside = np.ones(frame.height, dtype=bool)
            for dom in domains:
                codes = frame[dom.name].replace_strict(
                    dom, pl.int_range(len(dom), dtype=pl.Int64, eager=True), default=-1,
                    return_dtype=pl.Int64).fill_null(-1).to_numpy()
                inside &= codes >= 0
                idx = idx * len(dom) + codes
            return np.where(inside, idx, -1)
        indexed = self._df.with_row_index("__tabdp_key")
        joined = frame.select(self.columns).join(indexed, on=self.columns, how="left",
                                                 maintain_order="left", nulls_equal=True)
        return joined["__tabdp_key"].fill_null(-1).cast(pl.Int64).to_numpy()

    # -- access -------------------------------------------------------------------------------
    @property
    def columns(self) -> list[str]:
        """Key column names.

        Example:
            >>> KeySet.from_dict(x=[1]).columns
            ['x']
        """
        return list(self._df.columns)

    def to_polars(self) -> pl.DataFrame:
        """The keys as a Polars DataFrame.

        Returns:
            One row per key.

        Example:
            >>> KeySet.from_dict(x=[1, 2]).to_polars().height
            2
        """
        return self._df

    def to_pandas(self) -> Any:
        """The keys as a pandas DataFrame.

        Returns:
            One row per key.

        Example:
            >>> len(KeySet.from_dict(x=[1, 2]).to_pandas())
            2
        """
        return self._df.to_pandas()

    def to_dict(self) -> dict[str, Any]:
        """Public description: columns, size, source, whether keys came from data.

        Returns:
            A JSON-serializable dict (the keys themselves are public but may be large; they are
            not listed).

        Example:
            >>> KeySet.from_dict(x=[1, 2]).to_dict()["size"]
            2
        """
        return {"columns": self.columns, "size": len(self), "source": self.source,
                "keys_from_data": self._from_data}

    def __len__(self) -> int:
        """Number of key combinations (cells)."""
        return self._df.height

    def __eq__(self, other: object) -> bool:
        """Same columns, dtypes and rows in the same order."""
        return isinstance(other, KeySet) and self._df.equals(other._df)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """Columns and size only: the keys themselves may be long."""
        flag = ", from_data=True" if self._from_data else ""
        return f"KeySet(columns={self.columns}, size={len(self)}{flag})"

    def _check_columns(self, columns: Sequence[str], what: str) -> None:
        missing = [c for c in columns if c not in self._df.columns]
        if missing:
            raise ColumnNotFoundError(
                f"{what}: column(s) {missing} are not key columns; the key set has {self.columns}.")


# -- the key set against a data schema (no data read) ------------------------------------
_TEXT = (pl.String, pl.Categorical, pl.Enum)


def _key_kind(dtype: Any) -> str | None:
    """The kind of values a key dtype holds (`common_dtype`); None: any kind or not a scalar.

    Integers of every width, floats and decimals are numbers; ``Date`` and ``Datetime`` (any
    unit, any zone) are dates and times; ``Duration`` (any unit) durations; ``Time`` times of
    day. ``Null`` (a column or key set of nulls only) holds no value to misread (`common_dtype`
    compares it in the other side's dtype); lists, arrays and structs take `common_dtype`'s
    nested rule, objects are left to the conversion checks.
    """
    if isinstance(dtype, _TEXT):
        return "text"
    if dtype == pl.Binary:
        return "bytes"
    if dtype == pl.Boolean:
        return "Booleans"
    if dtype.is_numeric():
        return "numbers"
    if dtype == pl.Date or isinstance(dtype, pl.Datetime):
        return "dates and times"
    if isinstance(dtype, pl.Duration):
        return "durations"
    if dtype == pl.Time:
        return "times of day"
    return None


#: (the data's kind, the key set's kind) pairs that are compared although the kinds differ:
#: bytes against text (compared as bytes), and a date, timestamp or time of day against text
#: keys (compared as its text, its UTC wall time for a timestamp; docs/privacy-semantics.md).
_KINDS_COMPARED = frozenset({("bytes", "text"), ("text", "bytes"), ("dates and times", "text"),
                             ("times of day", "text")})


def _check_key_kinds(col: str, have: Any, want: Any) -> None:
    """Refuse keys of another kind of value than the data's (decided from the two dtypes).

    Polars converts integers to dates (a day number), durations and timestamps (microseconds),
    times of day (nanoseconds) and Booleans (``1`` is ``True``), and the reverse; matched that
    way, the key ``1970-01-02`` took the rows holding ``1`` and published them as its cell
    (stop 64). What a number means as a date is the caller's to say: only keys of the data's
    kind are compared (`_key_kind`, with the pairs of `_KINDS_COMPARED`).
    """
    kh, kw = _key_kind(have), _key_kind(want)
    if kh is None or kw is None or kh == kw or (kh, kw) in _KINDS_COMPARED:
        return
    raise ColumnTypeError(
        f"key column {col!r} is {have} in the data ({kh}) but {want} in the key set ({kw}); "
        f"tabdp cannot compare {kh} with {kw} as keys: it would have to choose what a value "
        "of one kind means in the other (a day number for a date, microseconds for a "
        "duration, 1 for True), and rows would fall silently into the wrong cells. Keys "
        "are compared with data of the same kind only: numbers of any width or type "
        "(integers, floats, decimals), text (String, Categorical, Enum), Booleans, dates "
        "and datetimes, durations, times of day (and bytes against text, compared as bytes; "
        "dates, datetimes or times of day against text keys, compared as their text; a "
        "column of nulls only against any type).\nHint: cast the data's key column or "
        "the key set to one kind first, saying what the values mean: build the key set "
        "with values of the data's type, or convert the column before the release (e.g. "
        "pl.from_epoch(pl.col(c), time_unit='d') for day numbers as dates, "
        "pl.col(c).cast(pl.Int64) for Booleans as 0/1).")


def _is_nested(dtype: Any) -> bool:
    """Whether ``dtype`` is a List, Array or Struct (an instance or the class)."""
    return isinstance(dtype, (pl.List, pl.Array, pl.Struct)) or dtype in (pl.List, pl.Array,
                                                                           pl.Struct)


def _nested_leaves(have: Any, want: Any) -> list[tuple[Any, Any]]:
    """The pairs of scalar dtypes a conversion of nested ``have`` to ``want`` compares.

    Lists and arrays pair their inner dtypes, structs their fields by position (as Polars'
    cast does; fields of other names or number are refused by the conversion check). A
    nested dtype against a scalar inside is a pair (`common_dtype` refuses it); a list
    against a struct pairs nothing (left to the conversion check).

    Example:
        >>> _nested_leaves(pl.List(pl.Struct({"a": pl.Int8})), pl.List(pl.Struct({"a": pl.Date})))
        [(Int8, Date)]
        >>> _nested_leaves(pl.List(pl.Struct({"a": pl.Int8})), pl.List(pl.Int8))
        [(Struct({'a': Int8}), Int8)]
    """
    if isinstance(have, (pl.List, pl.Array)) and isinstance(want, (pl.List, pl.Array)):
        return _nested_leaves(have.inner, want.inner)
    if isinstance(have, pl.Struct) and isinstance(want, pl.Struct):
        if len(have.fields) != len(want.fields):
            return []
        return [p for h, w in zip(have.fields, want.fields, strict=True)
                for p in _nested_leaves(h.dtype, w.dtype)]
    if _is_nested(have) and _is_nested(want):
        return []
    return [(have, want)]


def _check_nested_kinds(col: str, have: Any, want: Any) -> None:
    """Nested keys (List, Array, Struct): each pair of values inside under `common_dtype`'s rule.

    A list of integers against a list of dates converted the day numbers as the scalars did
    (review rev65w: the key ``[1970-01-02]`` took the rows holding ``[1]``).
    """
    for h, w in _nested_leaves(have, want):
        if isinstance(h, type) and not _is_nested(h):  # (a nested inner may be a dtype class)
            h = h()
        if isinstance(w, type) and not _is_nested(w):
            w = w()
        try:
            common_dtype(col, h, w)
        except ColumnTypeError as err:
            raise ColumnTypeError(
                f"key column {col!r} is {have} in the data but {want} in the key set, whose "
                f"values inside are compared as {h} against {w}: {err}") from None


def _nested_name(dtype: Any) -> str:
    """``"list"``, ``"array"`` or ``"struct"`` for a nested dtype (instance or class)."""
    for cls, name in ((pl.Array, "array"), (pl.List, "list"), (pl.Struct, "struct")):
        if isinstance(dtype, cls) or dtype == cls:
            return name
    return "nested value"  # pragma: no cover - only nested dtypes are named


def _refuse_nested_against_scalar(col: str, have: Any, want: Any) -> None:
    """Refuse a nested key dtype (List, Array, Struct) against a scalar one, or the reverse.

    Polars converts a one-field struct to its field's type and any struct to text (``{1}``),
    and an integer to a one-field struct, so a struct column against integer keys failed in
    the join (a ``SchemaError``, a panic on the streaming engine) once the data had a row and
    ran on an empty frame, and against text keys ``'{1}'`` ran with every row outside the key
    set (review keys65b). Which value inside is the key is the caller's to say.
    """
    nested = have if _is_nested(have) else want
    raise ColumnTypeError(
        f"key column {col!r} is {have} in the data but {want} in the key set, and tabdp "
        f"cannot compare the two: a {_nested_name(nested)} holds several values and the other "
        "side one, so tabdp would have to choose which value inside is the key, and rows would "
        "fall silently outside the key set or into the wrong cells. Nested keys (List, Array, "
        "Struct) are compared with nested data only, scalar keys with scalar data (a column "
        "of nulls only against any type).\nHint: build the key set with values of the data's "
        "type, or convert the nested side first: the value inside that is the key "
        "(pl.col(c).struct.field('a'), pl.col(c).list.first(); on Spark F.col(c).getField('a'), "
        "F.col(c)[0]) or its JSON text (pl.col(c).struct.json_encode(); F.to_json(c)).")


def common_dtype(col: str, have: Any, want: Any) -> Any:
    """The dtype in which data keys and public keys are compared (decided without data).

    Keys are compared with data of the same kind only (`_check_key_kinds`): numbers with
    numbers (integers of any width, floats, decimals), text with text, Booleans, dates and
    datetimes, durations and times of day each with their own kind (and bytes with text of
    any text dtype, String, Categorical or Enum, a date, datetime or time of day with text
    keys). A ``Null`` column (nulls only) on either side goes with every dtype and is
    compared in the other side's dtype: a key set of nulls only holds the null key, which
    matches the rows whose key is null and no other, whatever the data's dtype. Nested
    dtypes (List, Array, Struct) are compared with nested dtypes only, under the same rule
    value by value inside (`_check_nested_kinds`); a nested dtype against a scalar one, or
    the reverse, is refused (`_refuse_nested_against_scalar`).

    Args:
        col: The key column (for the message).
        have: Its dtype in the data.
        want: Its dtype in the key set.

    Returns:
        ``None`` when the dtypes agree, else the comparison dtype.

    Raises:
        ColumnTypeError: Numbers against text; values of two different kinds (numbers against
            dates, durations, times of day or Booleans; Booleans against dates...); a
            nested dtype against a scalar one (a struct against integer or text keys).

    Example:
        >>> common_dtype("s", pl.Int32, pl.Int64), common_dtype("s", pl.Int32, pl.Float64)
        (Int128, Float64)
        >>> common_dtype("s", pl.Date, pl.Null), common_dtype("s", pl.Null, pl.Date)
        (Date, Date)
        >>> common_dtype("s", pl.Int64, pl.Date)
        Traceback (most recent call last):
        ...
        tabdp.exceptions.ColumnTypeError: key column 's' is Int64 in the data (numbers) but Date ...
        >>> common_dtype("s", pl.Struct({"a": pl.Int64}), pl.Int64)
        Traceback (most recent call last):
        ...
        tabdp.exceptions.ColumnTypeError: key column 's' is Struct({'a': Int64}) in the data but ...
        >>> common_dtype("s", pl.Struct({"a": pl.Int64}), pl.Null)
        Struct({'a': Int64})
    """
    if have == want:
        return None
    if want == pl.Null or have == pl.Null:
        # a column of nulls only holds no value of any kind: compared in the other side's
        # dtype, its null matches nulls only. Polars casts nothing of some dtypes (dates,
        # decimals, Categorical...) to Null, so a key set of nulls was refused against
        # those and accepted against others (stop 65)
        return have if want == pl.Null else want
    if _is_nested(have) != _is_nested(want):
        # a struct against integer keys failed in Polars' join once the data had a row (and
        # ran on an empty frame); against text keys its text matched nothing (review keys65b)
        _refuse_nested_against_scalar(col, have, want)
    if _is_nested(have):
        _check_nested_kinds(col, have, want)
        return want
    if isinstance(have, _TEXT) and isinstance(want, _TEXT):
        return pl.String
    if pl.Binary in (have, want) and (isinstance(have, _TEXT) or isinstance(want, _TEXT)):
        # bytes against text are compared as bytes: text always converts to bytes, while
        # bytes that are not UTF-8 made Polars' cast to text fail, so whether a release ran
        # depended on one record's bytes (review rev64b)
        return pl.Binary
    if have.is_numeric() and want.is_numeric():
        if have.is_integer() and want.is_integer():
            return pl.Int128
        return pl.Float64
    if (have.is_numeric() and isinstance(want, _TEXT)) or \
            (want.is_numeric() and isinstance(have, _TEXT)):
        raise ColumnTypeError(
            f"key column {col!r} is {have} in the data but {want} in the key set; tabdp does "
            "not convert between numbers and text for keys, because codes such as '06037' and "
            "6037 would silently fall into different cells.\nHint: build the key set with "
            "values of the data's type (e.g. strings '06037' vs integers 6037).")
    _check_key_kinds(col, have, want)
    return want


def check_keys_distinct(converted: pl.DataFrame, by: list[str], schema: Any,
                         key_schema: Any) -> None:
    """Refuse a key set whose distinct keys become equal in the comparison dtypes (no data read).

    Keys are compared with the data after a conversion decided from the two schemas; a lossy one
    (Int64 keys 2**53 and 2**53 + 1 as Float64, long decimals as Float64) can merge two public
    keys, and a row with that key would then fall into two cells (counted twice, charged once).
    Depends only on the key set and the schemas.

    Args:
        converted: The key set's ``by`` columns converted to the comparison dtypes.
        by: The key columns.
        schema: The data's schema (for the message).
        key_schema: The key set's schema (for the message).

    Raises:
        ColumnTypeError: Two distinct keys became equal.

    Example:
        >>> check_keys_distinct(pl.DataFrame({"s": [1.0, 2.0]}), ["s"], {"s": pl.Float64},
        ...                     {"s": pl.Int64})
    """
    if converted.height and converted.select(by).is_duplicated().any():
        raise ColumnTypeError(
            f"key column(s) {by} of the key set hold distinct keys that become equal when "
            f"converted to compare them with the data ({[str(schema[c]) for c in by]} in the "
            f"data, {[str(key_schema[c]) for c in by]} in the key set): two keys would share "
            "one cell's rows.\nHint: build the key set with values of the data's type, or cast "
            "the data's key column to the key set's type first.")


def pandas_keys(keys: KeySet, columns: Iterable[str] | None = None) -> KeySet:
    """The key set of a pandas input: a NaN key of a float column is pandas' missing value.

    A pandas float column has one missing value (``NaN`` and ``None`` are the same there), and
    the input reaches the engine with it as null; a key set's NaN key (``np.nan`` in
    ``KeySet.from_dict``) therefore matched no row: its cell was published empty and the rows
    were counted outside the key set (review r77). It now matches them, as a null key does.
    A pandas nullable (``Float64``) or Arrow-backed float column keeps NaN and ``NA`` apart,
    as Polars does: its NaN key is left as it is (``columns``; review r80). Public: depends
    on the key set and the input's dtypes only.

    Args:
        keys: The public key set.
        columns: The key columns whose input column has NaN as its missing value
            (`tabdp.frame.backends.nan_is_missing`); ``None``: every column.

    Returns:
        ``keys`` itself when no float key column holds NaN, else the key set with those NaN
        keys as nulls.

    Raises:
        InvalidParameterError: A column holds both NaN and null keys (one cell on pandas).

    Example:
        >>> pandas_keys(KeySet.from_dict(c=[1.0, float("nan")])).to_polars()["c"].to_list()
        [1.0, None]
    """
    df = keys._df
    only = None if columns is None else set(columns)
    cols = [c for c in df.columns if (only is None or c in only)
            and df.schema[c] in (pl.Float32, pl.Float64) and df[c].is_nan().any()]
    if not cols:
        return keys
    if keys._domains is not None:
        doms = [d.fill_nan(None) if d.name in cols else d for d in keys._domains]
        merged = any(d.null_count() > 1 for d in doms)
    else:
        frame = df.with_columns(pl.col(c).fill_nan(None) for c in cols)
        merged = bool(frame.select(keys.columns).is_duplicated().any())
    if merged:
        raise InvalidParameterError(
            f"key column(s) {cols} of the key set hold both NaN and null keys; in a pandas "
            "frame a float column has one missing value (NaN and None are the same value), "
            "so the two keys would be one cell.\nHint: keep one of them in the key set.")
    if keys._domains is not None:
        return KeySet(_cross(doms), from_data=keys._from_data, source=keys.source,
                      domains=doms)
    return KeySet(frame, from_data=keys._from_data, source=keys.source)


def _zone(dtype: Any) -> str | None:
    """The time zone of a zoned Datetime; ``""`` for a date or a Datetime without one."""
    if isinstance(dtype, pl.Datetime):
        return dtype.time_zone or ""
    return "" if dtype == pl.Date else None


#: Zone names whose wall time is always UTC's (the tz database's aliases and fixed offsets
#: of zero): against naive keys, the UTC convention holds for them as for ``"UTC"``.
_UTC_ZONES = frozenset({
    "UTC", "Etc/UTC", "UCT", "Etc/UCT", "Universal", "Etc/Universal", "Zulu", "Etc/Zulu",
    "GMT", "Etc/GMT", "GMT0", "Etc/GMT0", "GMT+0", "Etc/GMT+0", "GMT-0", "Etc/GMT-0",
    "Greenwich", "Etc/Greenwich", "+00:00", "-00:00", "Z"})


def _check_time_zones(col: str, have: Any, want: Any) -> None:
    """Refuse timestamps of a time zone against keys without one, or the reverse (no data read).

    Polars compares a Datetime without a zone (or a Date) with a zoned one as a UTC wall time,
    so a key set of naive datetimes or dates against New York timestamps matched no row
    recorded at local midnight: every cell was published empty and its key relabelled
    (``2023-12-31 19:00 EST`` for the key ``2024-01-01``; review r86). Which wall time a naive
    key means is the caller's to say. UTC timestamps keep the UTC convention (their wall time
    is the naive one), under any of UTC's names (`_UTC_ZONES`: ``Etc/UTC``, ``+00:00``...).
    Decided from the two schemas alone.
    """
    zh, zw = _zone(have), _zone(want)
    if zh is None or zw is None or zh == zw or (zh and zw):
        return  # not times, the same zone, or two zones (compared as instants)
    if (zh or zw) in _UTC_ZONES:
        return
    raise ColumnTypeError(
        f"key column {col!r} is {have} in the data but {want} in the key set: one has a time "
        f"zone ({zh or zw!r}) and the other none, so which wall time a key means is "
        "ambiguous (tabdp would compare them as UTC wall times, and rows at local midnight "
        "would fall outside the key set).\nHint: give both the same time zone, e.g. "
        f"KeySet.from_dict({col}=pl.Series(keys).dt.replace_time_zone({zh or zw!r})) for "
        f"local wall times, or convert the data's column with .dt.replace_time_zone(None) "
        "(polars) / .dt.tz_localize(None) (pandas).")


def check_key_pair(col: str, have: Any, want: Any, *, declared: bool = False) -> None:
    """Refuse a data key dtype and a public key dtype that are never compared (no data read).

    The dtype rules of `check_cell_keys` without its key values: time zones
    (`_check_time_zones`), numbers against text and keys of another kind than the data's
    (`common_dtype`). Author mode converts a key column from its declared type to its
    domain's type (`tabdp.release._input._author_key_casts`) under the same rule, so that
    conversion never matches a Boolean as 1 or a day number as a date, and never meets a
    pair Polars refuses only for a non-null value (stop 65: a Boolean column against a
    decimal domain stopped the run when one record held a value). The one pair it adds
    (``declared``): text against a ``Date`` domain, read as the declared conversion reads
    dates, ``YYYY-MM-DD`` and nothing else (`tabdp.release.declared.convert_leniently`).

    Args:
        col: The key column (for the message).
        have: Its dtype in the data (in author mode: the declared one).
        want: Its dtype in the key set (the domain's).
        declared: Author mode's declared conversion (text against a ``Date`` domain too).

    Raises:
        ColumnTypeError: A pair the engine refuses (see `common_dtype`).

    Example:
        >>> check_key_pair("k", pl.Datetime("us"), pl.Date)
        >>> check_key_pair("k", pl.Boolean, pl.Decimal(5, 0))
        Traceback (most recent call last):
        ...
        tabdp.exceptions.ColumnTypeError: key column 'k' is Boolean in the data (Booleans) but ...
    """
    if declared and isinstance(have, _TEXT) and want == pl.Date:
        return  # ISO dates only, as a declared Date column reads text
    _check_time_zones(col, have, want)
    common_dtype(col, have, want)


def key_conversion(col: str, have: Any, target: Any) -> tuple[pl.Expr, pl.Expr]:
    """The data's key column ``col`` in the comparison dtype, and where that is exact.

    Args:
        col: The key column.
        have: Its dtype in the data.
        target: The comparison dtype (`common_dtype`).

    Returns:
        The converted column (null where it does not convert) and a Boolean expression true
        where the conversion is exact (the value converts back to itself).

    Example:
        >>> conv, ok = key_conversion("k", pl.Int64, pl.Float64)
        >>> pl.DataFrame({"k": [1, 2**53 + 1]}).select(ok)["k"].to_list()
        [True, False]
    """
    from tabdp._temporal import formattable

    # a date Polars cannot format as text is null before a cast to text (a Rust panic
    # otherwise, whose message reached the author's stderr; review R14)
    src = formattable(pl.col(col), have) if target == pl.String else pl.col(col)
    base = have
    if target == pl.Binary and isinstance(have, (pl.Categorical, pl.Enum)):
        # text of any text dtype against bytes keys: its String's bytes (Polars casts no
        # Categorical or Enum to bytes, so such data was refused where String data was not;
        # stop 65)
        src, base = src.cast(pl.String), pl.String
    conv = src.cast(target, strict=False)
    if target == pl.String and have.is_temporal():
        # a date or time as text is exact wherever it can be formatted (Polars 2 has no cast
        # back from text to a date: the check failed every such release, after the data was
        # read; review R16)
        return conv, conv.is_not_null()
    return conv, conv.cast(base, strict=False).eq_missing(src)


def _probe_sample(dtype: Any) -> pl.Series | None:
    """One public, non-null value of ``dtype`` (a zero, ``"0"``, ``False``...), or None.

    Nested dtypes (List, Array, Struct, of any depth) hold probe values at every level.

    Example:
        >>> _probe_sample(pl.Array(pl.Int8, (2, 3))).to_list()
        [[[0, 0, 0], [0, 0, 0]]]
        >>> _probe_sample(pl.List(pl.Struct({"d": pl.Array(pl.String, (1, 2))}))).to_list()
        [[{'d': [['0', '0']]}]]
    """
    try:
        if isinstance(dtype, type):  # a dtype class (``pl.String``, as a nested inner may be)
            dtype = dtype()
        if isinstance(dtype, pl.Enum):
            return pl.Series(dtype.categories[:1]).cast(dtype) if len(dtype.categories) else None
        if isinstance(dtype, _TEXT):
            return pl.Series(["0"]).cast(dtype)
        if dtype == pl.Binary:
            return pl.Series([b"0"], dtype=pl.Binary)
        if dtype == pl.Boolean:
            return pl.Series([False])
        if dtype.is_numeric() or dtype.is_temporal():
            return pl.Series([0]).cast(dtype)
        if isinstance(dtype, (pl.List, pl.Array)):
            # a list of one inner value: an empty or null list converts whatever the inner
            # dtypes, so only a row holding a value met a cast Polars refuses (review rev64r).
            # An Array holds its first dimension's count of the inner probe, itself built the
            # same way: nested Array, List and Struct of any depth (an Array of Array too)
            inner = _probe_sample(dtype.inner)
            if inner is None:
                return None
            n = dtype.size if isinstance(dtype, pl.Array) else 1
            return (pl.concat([inner] * n) if n else inner.clear()).implode().cast(dtype)
        if isinstance(dtype, pl.Struct):
            fields = [_probe_sample(f.dtype) for f in dtype.fields]
            if any(f is None for f in fields):
                return None
            return pl.DataFrame([f.alias(d.name) for f, d in zip(fields, dtype.fields,
                                                                 strict=True)
                                 if f is not None]).to_struct().cast(dtype)
    except Exception:  # noqa: BLE001 - no sample of this dtype: nothing to probe
        return None
    return None


def _check_conversion(col: str, have: Any, want: Any, target: Any) -> None:
    """Refuse a comparison dtype Polars cannot convert the data's keys to (no data read).

    The conversion (`key_conversion`) is run on one public value of the data's dtype: Polars
    refuses some casts (text to a date, a date to a Boolean, a time to a datetime...) only
    when it meets a value, so a release over such keys failed with Polars' own error after it
    began reading the data, and succeeded on an empty frame (review rev64b).
    """
    sample = _probe_sample(have)
    if sample is None:
        return
    conv, ok = key_conversion(col, have, target)
    try:
        pl.DataFrame({col: sample}).select(conv.alias("conv"), ok.alias("ok"))
    except Exception as err:  # a cast Polars does not do: decided from the dtypes alone
        raise ColumnTypeError(
            f"key column {col!r} is {have} in the data but {want} in the key set, and tabdp "
            f"cannot compare the two (the data's keys do not convert to {target}).\nHint: "
            "build the key set with values of the data's type, or convert the data's key "
            "column to the key set's type first (e.g. pl.col(c).str.to_date() for dates "
            "written as text).") from err


def check_cell_keys(schema: pl.Schema, keys: KeySet, by: list[str]
                    ) -> tuple[pl.DataFrame, dict[str, Any], list[pl.Series]]:
    """The key set against the data's schema: every refusal of the cell matching, no data read.

    Text against numbers, keys of another kind than the data's (numbers against dates...),
    key values that cannot be converted to the comparison dtype, and
    distinct keys that become equal there are refused from the key set and the schema alone, so
    a release (or a batch of releases, before any of them runs) can be checked up front.

    Args:
        schema: The data's schema.
        keys: The public key set.
        by: The key columns.

    Returns:
        The key set's ``by`` columns, the comparison dtype per column (None: the key set's
        own) and the key columns converted to it.

    Raises:
        ColumnTypeError: Key dtypes that cannot be compared with the data's (numbers against
            text; keys of another kind of value than the data's, such as integers against
            dates, durations or Booleans (`common_dtype`); timestamps of a time zone other
            than UTC against keys without a zone, or the reverse; a data dtype Polars does not
            convert to the comparison dtype, such as lists of text against lists of dates).

    Example:
        >>> k = KeySet.from_dict(s=[1, 2])
        >>> check_cell_keys(pl.Schema({"s": pl.Int32}), k, ["s"])[1]
        {'s': Int128}
    """
    keys_pl = keys.to_polars().select(by)
    for c in by:
        _check_time_zones(c, schema[c], keys_pl.schema[c])
    targets = {c: common_dtype(c, schema[c], keys_pl.schema[c]) for c in by}
    casts = []
    for c, target in targets.items():
        if target is None:
            continue
        if target != schema[c]:
            _check_conversion(c, schema[c], keys_pl.schema[c], target)
        col = keys_pl[c]
        if target == pl.Binary and isinstance(col.dtype, (pl.Categorical, pl.Enum)):
            col = col.cast(pl.String)  # text keys of any text dtype: their String's bytes
        try:
            casts.append(col.cast(target, strict=True).alias(c))
        except Exception as err:  # the public key set does not convert: data-free error
            raise ColumnTypeError(
                f"key column {c!r} is {schema[c]} in the data but {keys_pl.schema[c]} in "
                f"the key set, and the key set's values cannot be converted to {target}.\n"
                "Hint: build the key set with values of the data's type.") from err
    if casts:
        check_keys_distinct(keys_pl.with_columns(casts), by, schema, keys_pl.schema)
    return keys_pl, targets, casts
