"""Grouped releases on pandas / Polars frames through narwhals.

Records are only touched inside the caller's engine (one validation pass, one group-by, one
select of the per-record contributions); noise is added with numpy to the aggregated table.

Data flow: validate arguments (no data) → validate the schema (no data) → one pass of value checks
(null / NaN / inf) → aggregate true cell values (per unit and cell when ``unit`` is set) → join
onto the public key set → per-unit losses → budget check → noise and uncertainty → record.
"""

from __future__ import annotations

import difflib
import os
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from typing import Any, NamedTuple, NoReturn

import narwhals as nw
import numpy as np
import polars as pl

from tabdp.exceptions import (
    ColumnNotFoundError,
    ColumnTypeError,
    DataValidationError,
    InvalidParameterError,
    UnsupportedBackendError,
)
from tabdp.frame.keys import KeySet
from tabdp.mechanisms._base import DEFAULT_LEVEL, Mechanism, check_level
from tabdp.privacy.ledger import QueryRecord, UnitLosses
from tabdp.privacy.session import Session, _set_last

__all__ = ["grouped_release"]

NULL_POLICIES = ("error", "zero", "drop")
_ROWS = "__tabdp_rows"
_ROW = "__tabdp_row"


def _as_list(value: str | Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return list(value)
    raise InvalidParameterError(
        f"{what} must be a column name or a list of column names; got {value!r}.")


def _check_args(kind: str, measures: list[str], by: list[str], keys: Any, mechanism: Any,
                session: Any, level: float, nulls: str) -> float:
    if not isinstance(mechanism, Mechanism):
        raise InvalidParameterError(
            f"mechanism must be a tabdp mechanism instance; got {mechanism!r}.\n"
            "Hint: e.g. mechanism=tabdp.mechanisms.LogTransform(sigma=0.3, offset=1000.0) or "
            "tabdp.mechanisms.Gaussian(sigma=2.0); see tabdp.mechanisms.__all__.")
    if kind == "sum" and not measures:
        raise InvalidParameterError("dp.sum needs at least one measure column; got none.")
    for what, cols in (("measure", measures), ("by", by)):
        dup = sorted({c for c in cols if cols.count(c) > 1})
        if dup:
            raise InvalidParameterError(
                f"{what} column(s) {dup} are listed more than once in {cols}.\n"
                "Hint: name each column once.")
    both = set(measures) & set(by)
    if both:
        raise InvalidParameterError(
            f"column(s) {sorted(both)} are both measures and group-by keys.\n"
            "Hint: a column is either summed or grouped by; copy it under another name to "
            "do both.")
    outputs = [f"{m}{s}" for m in (measures if kind == "sum" else ["count"])
               for s in ("", "_sd", "_moe")]
    clash = sorted(set(outputs) & set(by))
    if clash:
        raise InvalidParameterError(
            f"group-by column(s) {clash} have the name of an output column of this {kind} "
            f"(outputs: {outputs}); the key would be overwritten in the result.\n"
            "Hint: rename the key column(s) (and the key set's) before the release.")
    if kind == "sum" and getattr(mechanism, "joint", False):
        extra = sorted(set(getattr(mechanism, "weights", {}) or {}) - set(measures))
        if extra:
            raise InvalidParameterError(
                f"{type(mechanism).__name__} has weights for {extra}, which are not among the "
                f"released measures {measures}.\nHint: name the weights after the measure "
                "columns (a measure without a weight gets 1), or release those columns too.")
    if not isinstance(keys, KeySet):
        raise InvalidParameterError(
            f"keys must be a tabdp.KeySet (the public list of cells); got {type(keys).__name__}."
            "\nHint: keys=tabdp.KeySet.from_dict({'county': counties, 'naics': sectors}); keys "
            "are public input and are never read from the data unless you call "
            "KeySet.from_data explicitly.")
    if set(keys.columns) != set(by):
        raise InvalidParameterError(
            f"the key set's columns {keys.columns} must be exactly the group-by columns {by}.\n"
            "Hint: build the key set from the same columns you group by.")
    if session is not None and not isinstance(session, Session):
        raise InvalidParameterError(
            f"session must be a tabdp.Session or None; got {type(session).__name__}.")
    if nulls not in NULL_POLICIES:
        raise InvalidParameterError(
            f"nulls must be one of {NULL_POLICIES}; got {nulls!r}.\n"
            "Hint: 'error' refuses missing values, 'zero' treats them as 0, 'drop' drops the row.")
    return check_level(level)


#: Noise of a count released without a mechanism: exact discrete Gaussian, ρ(Δ) = Δ²/8.
DEFAULT_COUNT_SIGMA = 2.0


def count_mechanism(mechanism: Any, grid: Any = None) -> Any:
    """The mechanism a count is released with: exact integer noise by default.

    Counts are integer queries, so the continuous Gaussian and Laplace laws are replaced by their
    exact integer counterparts, which give the same guarantee at integer Δ (ρ = Δ²/(2σ²);
    ε = Δ/b) and cannot leak through floating point: ``Gaussian(σ)`` → ``DiscreteGaussian(σ)``,
    ``Laplace(b)`` → ``DiscreteLaplace(b)``, ``None`` → ``DiscreteGaussian(2.0)``. The swap is
    skipped when the caller asks for a non-integer grid (the continuous law is then rounded to
    that grid, see docs/exact-rounding.md). Other mechanisms are kept as given.

    Args:
        mechanism: The mechanism the caller passed (or ``None``).
        grid: The caller's grid (a step, ``{"count": step}`` or ``None``).

    Returns:
        The mechanism to use.

    Example:
        >>> from tabdp.mechanisms import Gaussian, Laplace
        >>> count_mechanism(Gaussian(3.0)), count_mechanism(None)
        (DiscreteGaussian(sigma=3.0), DiscreteGaussian(sigma=2.0))
        >>> count_mechanism(Gaussian(3.0), grid=0.5)
        Gaussian(sigma=3.0)
    """
    from tabdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace

    step = grid.get("count") if isinstance(grid, dict) else grid
    integral = step is None or (isinstance(step, (int, float)) and not isinstance(step, bool)
                                and float(step) >= 1 and float(step).is_integer())
    if mechanism is None:
        return DiscreteGaussian(DEFAULT_COUNT_SIGMA)
    if not integral:
        return mechanism
    if type(mechanism) is Gaussian:
        return DiscreteGaussian(mechanism.sigma)
    if type(mechanism) is Laplace:
        return DiscreteLaplace(mechanism.scale)
    return mechanism


def _check_grid(grid: Any, released: list[str]) -> dict[str, Any]:
    """Per-measure grid steps (form only; each mechanism checks fineness against float64)."""
    if isinstance(grid, dict):
        extra = sorted(set(grid) - set(released))
        if extra:
            raise InvalidParameterError(
                f"grid names {extra}, which are not released measures {released}.\n"
                "Hint: give grid={measure: step} for released measures only.")
        steps = {m: grid.get(m) for m in released}
    else:
        steps = {m: grid for m in released}
    for m, g in steps.items():
        if g is None:
            continue
        if isinstance(g, bool) or not isinstance(g, (int, float, np.integer, np.floating)) \
                or not np.isfinite(g) or g <= 0:
            raise InvalidParameterError(
                f"grid for {m!r} must be a positive finite number (the public rounding step) or "
                f"None; got {g!r}.\nHint: e.g. grid=1.0 (one dollar) or grid=1000.0.")
    return steps


def _schema_checks(schema: Any, measures: list[str], by: list[str], unit: str | None) -> None:
    names = list(schema.keys())
    wanted = [*by, *measures, *([unit] if unit else [])]
    missing = [c for c in wanted if c not in names]
    if missing:
        parts = []
        for c in missing:
            close = difflib.get_close_matches(c, names, n=1)
            parts.append(f"{c!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ColumnNotFoundError(
            f"column(s) {', '.join(parts)} not found in the frame; it has {names}.\n"
            "Hint: check the spelling of measures, by= and the session's unit=.")
    for m in measures:
        dt = schema[m]
        if not dt.is_numeric() or dt == nw.Boolean:
            raise ColumnTypeError(
                f"measure {m!r} has dtype {dt}; sums and quantiles need a numeric column (integer or float).\n"
                f"Hint: cast it first, e.g. pl.col({m!r}).cast(pl.Float64) or "
                f"df[{m!r}].astype(float) after cleaning non-numeric values.")


def _is_float(dt: Any) -> bool:
    return dt in (nw.Float32, nw.Float64)


def _count_negative(frame: Any, measures: list[str], lazy: bool) -> dict[str, int]:
    res = frame.select(*[(nw.col(m) < 0).sum().alias(m) for m in measures])
    row = _collect_polars(res, lazy).row(0, named=True)
    return {m: int(v or 0) for m, v in row.items()}


def _value_checks(frame: Any, schema: Any, measures: list[str], unit: str | None,
                  nulls: str, lazy: bool) -> dict[str, Any]:
    exprs = [nw.len().alias(_ROWS)]
    for m in measures:
        missing = nw.col(m).is_null()
        if _is_float(schema[m]):
            missing = missing | nw.col(m).is_nan()
            exprs.append((nw.col(m).abs() == float("inf")).sum().alias(f"inf:{m}"))
        exprs.append(missing.sum().alias(f"missing:{m}"))
    if unit:
        bad_id = nw.col(unit).is_null()
        if _is_float(schema[unit]):
            bad_id = bad_id | nw.col(unit).is_nan()  # NaN ids would merge distinct units
        exprs.append(bad_id.sum().alias(f"null:{unit}"))
    res = frame.select(*exprs)
    if lazy:
        res = res.collect()
    row = {k: (int(v) if v is not None else 0) for k, v in res.to_polars().row(0, named=True).items()}
    problems = []
    for m in measures:
        n_inf = row.get(f"inf:{m}", 0)
        n_missing = row[f"missing:{m}"]
        if n_inf:
            problems.append(f"column {m!r} has {n_inf} infinite value(s) (+inf or -inf); they "
                            "cannot be released under any null policy.\nHint: fix or remove "
                            "those rows before the release.")
        if n_missing and nulls == "error":
            problems.append(f"column {m!r} has {n_missing} missing value(s) (null or NaN).\n"
                            "Hint: pass nulls='zero' to count them as 0, or nulls='drop' to "
                            "drop those rows (the choice is recorded in the report).")
    if unit and row.get(f"null:{unit}", 0):
        problems.append(f"unit column {unit!r} has {row[f'null:{unit}']} null or NaN id(s); "
                        "every row must belong to a unit.\nHint: fill the ids or drop those "
                        "rows first.")
    if problems:
        raise DataValidationError("the data cannot be released as given (nothing was drawn or "
                                  "recorded):\n- " + "\n- ".join(problems))
    return row


def _apply_nulls(frame: Any, schema: Any, measures: list[str], nulls: str) -> Any:
    if nulls == "zero":
        exprs = []
        for m in measures:
            e = nw.col(m).fill_null(0)
            if _is_float(schema[m]):
                e = e.fill_nan(0.0)
            exprs.append(e.alias(m))
        return frame.with_columns(*exprs) if exprs else frame
    if nulls == "drop" and measures:
        cond = None
        for m in measures:
            c = ~nw.col(m).is_null()
            if _is_float(schema[m]):
                c = c & ~nw.col(m).is_nan()
            cond = c if cond is None else cond & c
        return frame.filter(cond)
    return frame


def _collect_polars(frame: Any, lazy: bool) -> pl.DataFrame:
    return (frame.collect() if lazy else frame).to_polars()


def _align_keys(agg: pl.DataFrame, keys: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    casts = []
    for c in by:
        want, have = keys.schema[c], agg.schema[c]
        if want != have:
            hint = ("\nHint: build the key set with values of the data's type (e.g. strings "
                    "'06037' vs integers 6037).")
            textual = (pl.String, pl.Categorical, pl.Enum)
            if (want.is_numeric() and isinstance(have, textual)) or \
                    (have.is_numeric() and isinstance(want, textual)) or \
                    (want.is_numeric() and have == pl.String) or \
                    (have.is_numeric() and want == pl.String):
                raise ColumnTypeError(
                    f"key column {c!r} is {have} in the data but {want} in the key set; tabdp "
                    "does not convert between numbers and text for keys, because codes such "
                    f"as '06037' and 6037 would silently fall into different cells.{hint}")
            try:
                cast = agg[c].cast(want, strict=True)
                changed = cast.cast(have, strict=True).ne_missing(agg[c])
            except Exception as err:  # polars raises InvalidOperationError / ComputeError
                raise ColumnTypeError(
                    f"key column {c!r} is {have} in the data but {want} in the key set, and "
                    f"the values cannot be converted.{hint}") from err
            n_changed = int(changed.sum())
            if n_changed:
                example = agg[c].filter(changed)[0]
                raise ColumnTypeError(
                    f"key column {c!r} is {have} in the data but {want} in the key set, and "
                    f"{n_changed} distinct value(s) change when converted (e.g. {example!r} -> "
                    f"{cast.filter(changed)[0]!r}), which would put rows in the wrong cell."
                    f"{hint}")
            agg = agg.with_columns(cast)
            casts.append(c)
    return agg


def _place_on_keys(agg: pl.DataFrame, keys: KeySet, by: list[str],
                   value_cols: list[str]) -> tuple[pl.DataFrame, int, int]:
    """Put aggregated cells onto the key set: one row per key, in key-set order.

    Returns the table (absent cells filled with 0), the number of rows in cells outside the
    key set and the number of such cells.
    """
    if not by:
        return agg.select(value_cols), 0, 0
    keys_pl = keys.to_polars()
    idx = keys.cell_index(agg)
    inside = idx >= 0
    placed = []
    for c in value_cols:
        src = agg[c]
        if not src.dtype.is_integer():  # floats, and Decimal sums (no truncation)
            src = src.cast(pl.Float64)
        arr = np.zeros(len(keys_pl), dtype=np.int64 if src.dtype.is_integer() else np.float64)
        arr[idx[inside]] = src.to_numpy()[inside]
        placed.append(pl.Series(c, arr))
    rows_outside = int(agg[_ROWS].to_numpy()[~inside].sum())
    return keys_pl.with_columns(placed), rows_outside, int((~inside).sum())


class _Opened(NamedTuple):
    session: Session
    one_off: bool
    name: str
    frame: Any
    lazy: bool
    backend: str
    schema: Any


def _open_release(native: Any, session: Session | None, name: str | None, kind: str,
                  measures: list[str], by: list[str]) -> _Opened:
    """Session, release name, narwhals frame and checked schema of a release (no data read)."""
    one_off = session is None
    sess = Session() if session is None else session
    qname = sess._name(name, kind)  # validate before any data pass or noise draw
    unit = sess.unit
    if unit is not None and (unit in by or unit in measures):
        raise InvalidParameterError(
            f"the unit column {unit!r} cannot also be a measure or a group-by key.\n"
            "Hint: the unit identifies who contributes; group and measure other columns.")
    try:
        frame = nw.from_native(native)
    except TypeError as err:
        raise UnsupportedBackendError(
            f"df.dp works on pandas DataFrames and Polars DataFrames / LazyFrames; got "
            f"{type(native).__name__}.") from err
    lazy = isinstance(frame, nw.LazyFrame)
    backend = "pandas" if frame.implementation == nw.Implementation.PANDAS else "polars"
    schema = frame.collect_schema()
    _schema_checks(schema, measures, by, unit)
    return _Opened(sess, one_off, qname, frame, lazy, backend, schema)


def grouped_release(native: Any, *, kind: str, measures: str | Sequence[str] | None,
                    by: str | Sequence[str] | None, keys: KeySet, mechanism: Mechanism,
                    session: Session | None = None, level: float = DEFAULT_LEVEL,
                    nulls: str = "error", name: str | None = None, grid: Any = None) -> Any:
    """Release noisy sums or counts of ``native`` grouped by ``by`` over the key set ``keys``.

    This is the implementation behind ``df.dp.sum`` and ``df.dp.count``; see those for the
    user documentation.

    Args:
        native: A pandas DataFrame, Polars DataFrame or Polars LazyFrame.
        kind: ``"sum"`` or ``"count"``.
        measures: Columns to sum (ignored for counts).
        by: Group-by columns (exactly the key set's columns).
        keys: The public key set.
        mechanism: The mechanism.
        session: Session to record in (default: a fresh one, see :func:`tabdp.last_session`).
        level: Confidence level of the margins of error.
        nulls: ``"error"``, ``"zero"`` or ``"drop"``.
        name: Label of the release in the session.
        grid: Public rounding grid: a step, ``{measure: step}``, or ``None`` (defaults).

    Returns:
        A frame of the caller's library: keys, then per measure the estimate, ``_sd`` and
        ``_moe`` columns; one row per key.

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"c": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]})
        >>> out = grouped_release(df, kind="sum", measures=["x"], by=["c"],
        ...                       keys=tabdp.KeySet.from_dict(c=["a", "b", "z"]),
        ...                       mechanism=tabdp.mechanisms.Gaussian(1.0),
        ...                       session=tabdp.Session(seed=0))
        >>> out.columns, out.height
        (['c', 'x', 'x_sd', 'x_moe'], 3)
    """
    measure_list = _as_list(measures, "columns") if kind == "sum" else []
    by_list = _as_list(by, "by")
    if kind == "count":
        mechanism = count_mechanism(mechanism, grid)
    level = _check_args(kind, measure_list, by_list, keys, mechanism, session, level, nulls)
    grids = _check_grid(grid, measure_list if kind == "sum" else ["count"])
    sess, one_off, qname, frame, lazy, backend, schema = _open_release(
        native, session, name, kind, measure_list, by_list)
    unit = sess.unit
    impl = frame.implementation

    # One pass of value checks, before anything else is computed.
    checks = _value_checks(frame, schema, measure_list, unit, nulls, lazy)
    n_rows = checks[_ROWS]
    if unit is None:
        sess._check_rows(n_rows)

    needs_index = unit is None and nulls == "drop" and any(
        checks.get(f"missing:{m}", 0) for m in measure_list)

    # Aggregate true values (per unit and cell when a unit column is set), once per frame.
    missing_rows = sum(checks.get(f"missing:{m}", 0) for m in measure_list)
    dropping = nulls == "drop" and missing_rows > 0
    rows_expected = (n_rows - missing_rows if dropping else n_rows, n_rows)
    cols = [*by_list, *measure_list, *([unit] if unit else [])]
    cache_key = (id(native), tuple(by_list), unit)
    cacheable = isinstance(native, (pl.DataFrame, pl.LazyFrame)) and not dropping
    cached = sess._agg_cache.get(cache_key) if cacheable else None
    if cached is not None and (cached["native"] is not native or
                               not set(measure_list) <= set(cached["measures"]) or
                               cached["key_schema"] != keys.to_polars().schema or
                               not _rows_consistent(cached["agg"], rows_expected) or
                               not _unchanged(native, cached["snapshot"], cols)):
        cached = None
    if cached is not None:
        agg, contrib = cached["agg"], cached["contrib"]
    else:
        sums = [nw.col(m).sum().alias(m) for m in measure_list]
        work_nulls = _apply_nulls(frame, schema, measure_list, nulls)
        if unit is None:
            agg_nw = (work_nulls.group_by(*by_list).agg(*sums, nw.len().alias(_ROWS)) if by_list
                      else work_nulls.select(*sums, nw.len().alias(_ROWS)))
            agg = _collect_polars(agg_nw, lazy)
            contrib = None
        else:
            contrib_nw = work_nulls.group_by(unit, *by_list).agg(*sums, nw.len().alias(_ROWS))
            contrib = _align_keys(_collect_polars(contrib_nw, lazy), keys.to_polars(), by_list)
            parts = [*[pl.col(m).sum() for m in measure_list], pl.col(_ROWS).sum()]
            agg = contrib.group_by(by_list).agg(*parts) if by_list else contrib.select(*parts)
        agg = _align_keys(agg, keys.to_polars(), by_list)
        if not _rows_consistent(agg, rows_expected):
            _frame_changed(n_rows, int(agg[_ROWS].sum()), "aggregated")
        # Reusable by a later release of the same Polars frame with the same grouping (e.g. a
        # count after a sum) only when no row was dropped for missing values. A DataFrame can
        # be modified in place (df[i, c] = v, replace_column, extend...): a zero-copy snapshot
        # of its columns is kept and compared before any reuse.
        if cacheable:
            sess._agg_cache.clear()
            sess._agg_cache[cache_key] = {
                "native": native, "agg": agg, "contrib": contrib,
                "measures": tuple(measure_list), "key_schema": keys.to_polars().schema,
                "snapshot": native.select(cols) if isinstance(native, pl.DataFrame) else None}
    table, rows_outside, cells_outside = _place_on_keys(agg, keys, by_list,
                                                        [*measure_list, _ROWS])

    # Transformation mechanisms: Thm 4.4 bounds the loss of a unit with contribution Δ only when
    # both neighbouring totals are >= 0, i.e. every unit's contribution to its cell is >= 0.
    if mechanism.requires_nonnegative and kind == "sum":
        if unit is None:
            neg = _count_negative(frame, measure_list, lazy)
            what = "row(s)"
        else:
            assert contrib is not None
            neg = {m: int((contrib[m] < 0).sum()) for m in measure_list}
            what = f"unit-cell contribution(s) (sum of a {unit!r} unit's rows in a cell)"
        neg = {m: n for m, n in neg.items() if n}
        if neg:
            detail = ", ".join(f"{m!r}: {n} {what}" for m, n in neg.items())
            raise DataValidationError(
                f"{type(mechanism).__name__} needs every unit's contribution to be >= 0 (its "
                f"guarantee assumes non-negative totals with and without any unit), but some "
                f"are negative ({detail}). Nothing was drawn or recorded.\nHint: use an "
                "additive mechanism (Gaussian, ExpPolyLog) for signed measures, or release the "
                "positive and negative parts as separate non-negative measures.")

    # Per-unit losses (confidential).
    if unit is None:
        losses = _row_losses(frame, schema, measure_list, by_list, keys, mechanism, kind, nulls,
                             n_rows, rows_outside, int(table[_ROWS].sum()), needs_index, lazy,
                             impl)
    else:
        assert contrib is not None
        losses = _unit_losses(contrib, keys.to_polars(), unit, measure_list, by_list, mechanism, kind)
    sess.check_budget(losses)
    # Worst loss per cell (confidential), for the release workflow's audit report.
    cells = None
    if getattr(sess, "track_cells", False):
        if unit is None:
            cells = _row_cell_worst(frame, by_list, keys, losses, lazy)
        else:
            assert contrib is not None
            cells = _unit_cell_worst(contrib, keys.to_polars(), by_list,
                                     _Policy(mechanism, measure_list if kind == "sum" else []),
                                     measure_list, kind)

    # Noise: only now, after every check passed.
    out_cols: dict[str, Any] = {}
    fallbacks: dict[str, int] = {}
    grid_used: dict[str, Any] = {}
    released = measure_list if kind == "sum" else ["count"]
    joint = kind == "sum" and bool(getattr(mechanism, "joint", False))
    for m in released:
        truth = table[m if kind == "sum" else _ROWS].cast(pl.Float64).to_numpy()
        # A joint (vector) mechanism releases each measure with its own scaled noise.
        mech_m = mechanism.measure_mechanism(m) if joint else mechanism  # type: ignore[attr-defined]
        rv = mech_m.release_table(truth, sess.rng, level, grid=grids[m])
        out_cols[m] = rv.estimate
        out_cols[f"{m}_sd"] = rv.sd
        out_cols[f"{m}_moe"] = rv.moe
        fallbacks[m] = int(rv.fallbacks)
        grid_used[m] = rv.grid
    out = table.select(by_list).with_columns(
        pl.Series(k, v, dtype=pl.Float64) for k, v in out_cols.items())

    confidential = {
        "rows_read": n_rows,
        "rows_outside_keys": rows_outside,
        "cells_with_data_outside_keys": cells_outside,
        "rows_in_released_cells": int(table[_ROWS].sum()),
        **{f"missing_values_{nulls}:{m}": checks.get(f"missing:{m}", 0)
           for m in measure_list if nulls != "error"},
    }
    record = QueryRecord(
        index=len(sess.records) + 1, name=qname, kind=kind, measures=tuple(released),
        by=tuple(by_list), mechanism=mechanism, keys=keys.to_dict(), level=level, nulls=nulls,
        losses=losses, confidential=confidential, grid=grid_used, fallbacks=fallbacks,
        cells=cells)
    sess._record(record, backend)
    if one_off:
        _set_last(sess)
    return out.to_pandas() if backend == "pandas" else out


class _Policy:
    """Per-record policy of one release: ρ, ε and (approximate-DP mechanisms) ε_a, δ_a.

    A joint (vector) mechanism charges a unit once per cell at the norm of its weighted
    contribution vector; other mechanisms charge once per measure.
    """

    def __init__(self, mechanism: Mechanism, measures: list[str]) -> None:
        self.mechanism = mechanism
        self.measures = measures
        self.joint = bool(getattr(mechanism, "joint", False)) and len(measures) > 0
        self.approx = mechanism.dp_delta is not None
        self.guarantee = UnitLosses.guarantee_of(mechanism)

    def deltas(self, columns: list[np.ndarray]) -> list[np.ndarray]:
        """Sensitivities charged: one array per measure, or the joint norm."""
        if self.joint:
            return [np.asarray(self.mechanism.norm(  # type: ignore[attr-defined]
                dict(zip(self.measures, columns, strict=True))), dtype=np.float64)]
        return [np.abs(c) for c in columns]

    def __call__(self, d: np.ndarray) -> tuple[np.ndarray, ...]:
        r, e = self.mechanism.rho(d), self.mechanism.epsilon(d)
        if not self.approx:
            return r, e
        ea, da = self.mechanism.approx_policy(d)
        return r, e, ea, da

    def losses(self, units: Any, parts: tuple[np.ndarray, ...]) -> UnitLosses:
        if self.approx:
            return UnitLosses(units, parts[0], parts[1], parts[2], "approx", parts[3], parts[4])
        return UnitLosses(units, parts[0], parts[1], parts[2], self.guarantee)


def _rows_consistent(agg: pl.DataFrame, expected: tuple[int, int]) -> bool:
    """Whether the aggregation holds as many rows as the validation pass saw (a range when
    rows with missing values were dropped)."""
    n = int(agg[_ROWS].sum()) if agg.height else 0
    return expected[0] <= n <= expected[1]


def _unchanged(native: Any, snapshot: pl.DataFrame | None, cols: list[str]) -> bool:
    """Whether a Polars DataFrame still holds the data of the snapshot taken when it was
    aggregated (``None``: a LazyFrame, whose plan cannot be modified)."""
    if snapshot is None:
        return True
    try:
        return snapshot.select(cols).equals(native.select(cols))
    except Exception:  # a column was dropped or retyped in place
        return False


def _frame_changed(validated: int, seen: int, where: str) -> NoReturn:
    raise DataValidationError(
        f"the frame gave {validated} row(s) when validated but {seen} when {where}: its data "
        "changed between the passes tabdp makes over it (a LazyFrame whose source changed, or "
        "whose plan samples or shuffles rows at random). The privacy accounting must see the "
        "rows that are released, so nothing was drawn or recorded.\nHint: collect the frame "
        "once (lf.collect()) and release the DataFrame; seed any sampling in the plan.")


def _row_losses(frame: Any, schema: Any, measures: list[str], by: list[str], keys: KeySet,
                mechanism: Mechanism, kind: str, nulls: str, n_rows: int, rows_outside: int,
                rows_released: int, needs_index: bool, lazy: bool, impl: Any) -> UnitLosses:
    """Each row is a unit: its Δ in its cell is |value| (sum) or 1 (count)."""
    policy = _Policy(mechanism, measures if kind == "sum" else [])
    if kind == "count" and rows_outside == 0:
        # Every row pays the policy at Δ = 1: constant (read-only broadcast, no memory).
        one = policy(np.ones(1))
        parts = (one[0], one[1], np.ones(1), *one[2:])
        return policy.losses(None, tuple(np.broadcast_to(p[0], (n_rows,)) for p in parts))
    if rows_outside == 0 and not needs_index:
        vals = _collect_polars(_apply_nulls(frame, schema, measures, nulls).select(*measures),
                               lazy)
        if vals.height != n_rows:
            _frame_changed(n_rows, vals.height, "read for the accounting")
        idx = None
    else:
        if lazy:
            native = frame.to_native()
            if not isinstance(native, pl.LazyFrame):
                raise UnsupportedBackendError(
                    "per-row accounting of a lazy frame with dropped rows needs Polars.")
            indexed = nw.from_native(native.with_row_index(_ROW))
        else:
            indexed = frame.with_row_index(_ROW)
        indexed = _apply_nulls(indexed, schema, measures, nulls)
        if by:
            # Membership as in the aggregation: key dtypes aligned (casts already checked on
            # the distinct values) and null keys equal, so a row counts iff its cell is released.
            keys_pl = keys.to_polars()
            if impl == nw.Implementation.POLARS:
                nat = indexed.to_native()
                nat_schema = nat.collect_schema()
                nat = nat.with_columns(pl.col(c).cast(keys_pl.schema[c]) for c in by
                                       if nat_schema[c] != keys_pl.schema[c])
                nat = nat.join(keys_pl.lazy() if lazy else keys_pl, on=by, how="semi",
                               nulls_equal=True).select(_ROW, *measures)
                vals = nat.collect() if lazy else nat
            else:
                vals = _align_keys(_collect_polars(indexed.select(_ROW, *by, *measures), lazy),
                                   keys_pl, by)
                vals = vals.join(keys_pl, on=by, how="semi", nulls_equal=True)
        else:
            vals = _collect_polars(indexed.select(_ROW, *measures), lazy)
        idx = vals[_ROW].to_numpy()
        if idx.size != rows_released or (idx.size and idx.max() >= n_rows):
            _frame_changed(n_rows, idx.size, "read for the accounting (rows in released cells: "
                           f"{rows_released} when aggregated)")
    if kind == "count":
        one = policy(np.ones(1))
        parts = (one[0], one[1], np.ones(1), *one[2:])
        full = []
        for p in parts:
            arr = np.zeros(n_rows)
            arr[idx] = p[0]
            full.append(arr)
        return policy.losses(None, tuple(full))
    got = _sum_losses(policy, [vals[m].cast(pl.Float64).to_numpy() for m in measures])
    if idx is None:
        return policy.losses(None, got)
    full = []
    for p in got:
        arr = np.zeros(n_rows)
        arr[idx] = p
        full.append(arr)
    return policy.losses(None, tuple(full))


_PARALLEL_MIN = 1 << 18
_BLOCK = 1 << 16


def _sum_losses(policy: _Policy, columns: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Σ over charged sensitivities of ρ, ε (and ε_a, δ_a), and max |x|, elementwise over rows.

    Policies are elementwise numpy code, which releases the GIL: large inputs are split into
    one chunk per core and evaluated in threads.
    """
    n = columns[0].shape[0] if columns else 0
    k = 5 if policy.approx else 3
    out = tuple(np.empty(n) for _ in range(k))

    def block(lo: int, hi: int) -> None:
        cols = [c[lo:hi] for c in columns]
        size = out[2]
        size[lo:hi] = np.abs(cols[0])
        for c in cols[1:]:
            np.maximum(size[lo:hi], np.abs(c), out=size[lo:hi])
        first = True
        for d in policy.deltas(cols):
            vals = policy(d)
            targets = (out[0], out[1], *out[3:])
            for t, v in zip(targets, vals, strict=True):
                if first:
                    t[lo:hi] = v
                else:
                    t[lo:hi] += v
            first = False

    def work(lo: int, hi: int) -> None:
        # Blocks small enough to stay in cache across the policy's many elementwise passes.
        for b in range(lo, hi, _BLOCK):
            block(b, min(b + _BLOCK, hi))

    workers = min(os.cpu_count() or 1, 8)
    if n < _PARALLEL_MIN or workers == 1:
        work(0, n)
    else:
        bounds = np.linspace(0, n, workers + 1).astype(int)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(work, bounds[:-1], bounds[1:]))
    return out


def _unit_cell_worst(contrib: pl.DataFrame, keys_pl: pl.DataFrame, by: list[str],
                     policy: _Policy, measures: list[str], kind: str) -> pl.DataFrame:
    """Per released cell with data: the largest loss of one unit there (``worst_rho``), the
    largest contribution (``worst_size``) and the number of contributing units (``units``)."""
    inside = contrib.join(keys_pl, on=by, how="semi", nulls_equal=True) if by else contrib
    if kind == "count":
        cols = [inside[_ROWS].cast(pl.Float64).to_numpy()]
        deltas = cols
    else:
        cols = [inside[m].cast(pl.Float64).to_numpy() for m in measures]
        deltas = policy.deltas(cols) if inside.height else [np.zeros(0)]
    rho = np.zeros(inside.height)
    size = np.zeros(inside.height)
    for c in cols:
        np.maximum(size, np.abs(c), out=size)
    for d in deltas:
        rho += policy(d)[0]
    frame = inside.select(by).with_columns(worst_rho=pl.Series(rho), worst_size=pl.Series(size))
    return _cell_stats(frame, by)


def _row_cell_worst(frame: Any, by: list[str], keys: KeySet, losses: UnitLosses,
                    lazy: bool) -> pl.DataFrame:
    """As :func:`_unit_cell_worst` when each row is a unit (the row's loss is its loss)."""
    rows = (_collect_polars(frame.select(*by), lazy) if by
            else pl.DataFrame({"_one": np.zeros(len(losses.rho))}).select())
    n = len(losses.rho)
    rows = rows.with_columns(worst_rho=pl.Series(np.asarray(losses.rho, dtype=float)),
                             worst_size=pl.Series(np.asarray(losses.size, dtype=float)))
    if rows.height != n:
        _frame_changed(n, rows.height, "read for the per-cell audit")
    if by:
        keys_pl = keys.to_polars()
        rows = _align_keys(rows, keys_pl, by).join(keys_pl, on=by, how="semi", nulls_equal=True)
    return _cell_stats(rows, by)


def _cell_stats(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    aggs = [pl.col("worst_rho").max(), pl.col("worst_size").max(),
            pl.len().cast(pl.Int64).alias("units")]
    if not by:
        return frame.select(*aggs) if frame.height else pl.DataFrame(
            {"worst_rho": [], "worst_size": [], "units": []},
            schema={"worst_rho": pl.Float64, "worst_size": pl.Float64, "units": pl.Int64})
    return frame.group_by(by).agg(*aggs).sort("worst_rho", descending=True, maintain_order=True)


def _unit_losses(contrib: pl.DataFrame, keys_pl: pl.DataFrame, unit: str, measures: list[str],
                 by: list[str], mechanism: Mechanism, kind: str) -> UnitLosses:
    """A unit's Δ in a cell is |sum of its rows there| (sum) or its number of rows (count)."""
    policy = _Policy(mechanism, measures if kind == "sum" else [])
    inside = contrib.join(keys_pl, on=by, how="semi", nulls_equal=True) if by else contrib
    n = inside.height
    if kind == "count":
        cols = [inside[_ROWS].cast(pl.Float64).to_numpy()]
        deltas = cols
    else:
        cols = [inside[m].cast(pl.Float64).to_numpy() for m in measures]
        deltas = policy.deltas(cols) if n else [np.zeros(0)]
    size = np.zeros(n)
    for c in cols:
        np.maximum(size, np.abs(c), out=size)
    acc = [np.zeros(n) for _ in range(4 if policy.approx else 2)]
    for d in deltas:
        for a, v in zip(acc, policy(d), strict=True):
            a += v
    names = ["rho", "epsilon", "eps_a", "delta_a"][:len(acc)]
    per_unit = (pl.DataFrame({"unit": inside[unit], "size": size,
                              **dict(zip(names, acc, strict=True))})
                .group_by("unit", maintain_order=True)
                .agg(*[pl.col(c).sum() for c in names], pl.col("size").max()))
    parts = [per_unit[c].to_numpy() for c in ("rho", "epsilon", "size", *names[2:])]
    return policy.losses(per_unit["unit"], tuple(parts))
