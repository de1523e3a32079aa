"""Checks and key handling of `rollup`'s inputs (column names, values, mappings, target keys).

Split from ``tabdp.release.rollup`` (which keeps the laws of sums and the rollup itself); every
message names its caller through ``owner``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tabdp.exceptions import InvalidParameterError


def _names(value: Any, what: str, owner: str, allow_empty: bool) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidParameterError(
            f"{owner}: {what} must be a list of column names; got {value!r}.\n"
            f"Hint: e.g. {what}=[\"county\"] (a list, even for one column).")
    out = list(value)
    for v in out:
        if not isinstance(v, str):
            raise InvalidParameterError(
                f"{owner}: {what} must hold column names (str); got {v!r} in {out!r}.")
    if len(set(out)) != len(out):
        dup = sorted({v for v in out if out.count(v) > 1})
        raise InvalidParameterError(
            f"{owner}: {what} lists {dup} more than once; got {out!r}.\n"
            "Hint: name each column once.")
    if not out and not allow_empty:
        raise InvalidParameterError(
            f"{owner}: {what} must name at least one column; got an empty list.")
    return out


def _examples(values: list[Any], k: int = 5) -> str:
    shown = ", ".join(repr(v) for v in values[:k])
    more = f" and {len(values) - k} more" if len(values) > k else ""
    return f"[{shown}]{more}"


def _float_column(table: pl.DataFrame, name: str, owner: str, allow_inf: bool) -> np.ndarray:
    s = table.get_column(name)
    if not s.dtype.is_numeric():
        raise InvalidParameterError(
            f"{owner}: column {name!r} must be numeric; got dtype {s.dtype}.\n"
            "Hint: pass the released table (Float64 estimates and sds).")
    if s.null_count():
        raise InvalidParameterError(
            f"{owner}: column {name!r} has {s.null_count()} null value(s); released estimates "
            "and sds are never null.\nHint: roll up the released table before any suppression "
            "or flagging.")
    v = s.cast(pl.Float64).to_numpy()
    bad = np.isnan(v) if allow_inf else ~np.isfinite(v)
    if np.any(bad):
        raise InvalidParameterError(
            f"{owner}: column {name!r} has {int(bad.sum())} value(s) that are "
            f"{'NaN' if allow_inf else 'NaN or infinite'}.\nHint: pass the released values "
            "unchanged.")
    return v


def _map_column(table: pl.DataFrame, by_l: list[str], coarse: str, mapping: Any,
                owner: str) -> pl.Series:
    if not isinstance(mapping, pl.DataFrame):
        raise InvalidParameterError(
            f"{owner}: maps[{coarse!r}] must be a Polars DataFrame with 2 columns (fine column, "
            f"{coarse!r}); got {type(mapping).__name__}.")
    if mapping.width != 2 or coarse not in mapping.columns:
        raise InvalidParameterError(
            f"{owner}: maps[{coarse!r}] must have exactly 2 columns, a fine column of by and "
            f"{coarse!r}; got columns {mapping.columns}.\nHint: e.g. "
            f"maps={{{coarse!r}: hierarchy.select('county', {coarse!r})}}.")
    fine = next(c for c in mapping.columns if c != coarse)
    if fine not in by_l:
        raise InvalidParameterError(
            f"{owner}: maps[{coarse!r}] maps from column {fine!r}, which is not a column of by "
            f"{by_l}.\nHint: the mapping's other column must be a key column of the table.")
    if mapping.null_count().row(0) != (0, 0):
        raise InvalidParameterError(
            f"{owner}: maps[{coarse!r}] has null codes.\nHint: drop or fill them; every fine "
            "code maps to one coarse code.")
    tdtype = table.schema[fine]
    try:
        mp = mapping.with_columns(pl.col(fine).cast(tdtype, strict=True)).unique()
    except Exception:  # noqa: BLE001 - any Polars cast failure
        raise InvalidParameterError(
            f"{owner}: maps[{coarse!r}] column {fine!r} (dtype {mapping.schema[fine]}) cannot be "
            f"cast to the table's dtype {tdtype}.\nHint: give the mapping the same code type "
            "as the table (e.g. strings for NAICS codes).") from None
    if mp.get_column(fine).n_unique() != mp.height:
        dup = mp.filter(pl.col(fine).is_duplicated()).get_column(fine).unique().sort().to_list()
        raise InvalidParameterError(
            f"{owner}: maps[{coarse!r}] maps some {fine!r} codes to more than one {coarse!r} "
            f"code: {_examples(dup)}.\nHint: a rollup mapping must be a function (each fine "
            "code in exactly one coarse group).")
    joined = table.select(fine).join(mp, on=fine, how="left", maintain_order="left",
                                     validate="m:1")
    miss = joined.get_column(coarse).is_null()
    if bool(miss.any()):
        codes = joined.filter(miss).get_column(fine).unique(maintain_order=True).to_list()
        raise InvalidParameterError(
            f"{owner}: maps[{coarse!r}] has no row for {len(codes)} {fine!r} code(s) of the "
            f"table: {_examples(codes)}.\nHint: complete the mapping (every code of the table "
            f"must map to a {coarse!r} code).")
    return joined.get_column(coarse)


def _group_ids(target_frame: pl.DataFrame, tgt: list[str], target_keys: pl.DataFrame | None,
               n: int, owner: str) -> tuple[np.ndarray, pl.DataFrame]:
    if not tgt:
        if target_keys is not None and (not isinstance(target_keys, pl.DataFrame)
                                        or target_keys.width != 0):
            raise InvalidParameterError(
                f"{owner}: target_keys must have exactly the target_by columns [] (a national "
                f"total); got {getattr(target_keys, 'columns', target_keys)!r}.\nHint: pass "
                "target_keys=None for a national total.")
        return np.zeros(n, dtype=np.int64), pl.DataFrame()
    if target_keys is None:
        keys = target_frame.unique().sort(tgt, nulls_last=True, maintain_order=True)
    else:
        if not isinstance(target_keys, pl.DataFrame):
            raise InvalidParameterError(
                f"{owner}: target_keys must be a Polars DataFrame with the columns {tgt}; got "
                f"{type(target_keys).__name__}.")
        if sorted(target_keys.columns) != sorted(tgt):
            raise InvalidParameterError(
                f"{owner}: target_keys must have exactly the target_by columns {tgt}; got "
                f"{target_keys.columns}.\nHint: e.g. target_keys=all_keys.select({tgt!r}).")
        try:
            keys = target_keys.select(
                [pl.col(c).cast(target_frame.schema[c], strict=True) for c in tgt])
        except Exception:  # noqa: BLE001 - any Polars cast failure
            raise InvalidParameterError(
                f"{owner}: target_keys columns have dtypes {dict(target_keys.schema)}, which "
                f"cannot be cast to the target key dtypes {dict(target_frame.schema)}.\n"
                "Hint: build target_keys with the same code types as the table and mappings.")\
                from None
        if keys.height and keys.n_unique() != keys.height:
            dup = keys.filter(keys.is_duplicated()).unique(maintain_order=True).head(5).rows()
            raise InvalidParameterError(
                f"{owner}: target_keys has duplicate rows, e.g. {dup}.\nHint: list each target "
                "key once.")
    idx = keys.with_row_index("__tabdp_gid")
    joined = target_frame.join(idx, on=tgt, how="left", nulls_equal=True,
                               maintain_order="left")
    gid = joined.get_column("__tabdp_gid").fill_null(-1).cast(pl.Int64).to_numpy()
    return gid, keys
