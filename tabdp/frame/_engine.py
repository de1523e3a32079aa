"""Grouped releases on pandas / Polars frames: one snapshot, exact totals, an individual filter.

Data flow of one release (every step before the noise reads no randomness; nothing a caller sees
depends on one record except through the noise):

1. Arguments, the key set and the schema are checked (no data read).
2. **One snapshot** of the input: a single evaluation of one lazy Polars plan (pandas frames are
   converted) gives, per privacy unit and cell, the unit's contribution to every measure summed
   **exactly** in fixed point (``Int128``: float values on the public ``2**-24`` grid, integers
   as they are), its rows, and counts of values that declared rules handle (null, NaN, ±inf,
   negative, beyond the public magnitude bound). In row mode (``Session(unit=None)``) each row
   is a unit identified by its **row id**, assigned when the input is read, and the snapshot
   holds an order-sensitive fingerprint of every column read by this or an earlier release of
   the session (the session refuses a later release over different rows).
3. Strict rules (curator mode) raise a [`DataValidationError`][tabdp.exceptions.DataValidationError]
   whose message names only columns and rules (counts are in its ``confidential`` attribute); in
   author mode every rule is declared and nothing raises on data.
4. Cells: key columns are compared with the public key set after a data-free dtype alignment
   (rows outside it are not released; their number is confidential).
5. Per-unit losses: the policy of the mechanism at each unit's contribution in each cell,
   summed per unit and *currency* (each measure; ``rows`` for counts).
6. **Individual filter**: the session's budget admits or leaves out each unit (per currency
   under a curve budget); contributions of units left out are dropped.
7. Exact cell totals of the admitted contributions are placed on the key set and handed to the
   mechanism as [`ExactTotals`][tabdp.mechanisms.ExactTotals]; noise is drawn in key order.
8. The session's ledger records the admitted losses, keyed by unit.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np
import polars as pl

from tabdp import _numeric
from tabdp._defaults import NEGATIVE_RULES
from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp._numeric import add_up, add_up_into, work_pool, work_threads
from tabdp._policy import Policy as _Policy
from tabdp._policy import magnitudes_up
from tabdp._policy import policy_values as _policy_values
from tabdp._policy import size_and_delta as _size_and_delta
from tabdp._reserved import RESERVED, is_reserved
from tabdp._reserved import ROW_ID as _ROW_ID
from tabdp._validation import check_level
from tabdp.exceptions import (
    ColumnNotFoundError,
    ColumnTypeError,
    DataValidationError,
    InvalidParameterError,
    UnsupportedBackendError,
)
from tabdp.frame import binding
from tabdp.frame._author import _caller_stacklevel, bind_frame
from tabdp.frame._output import (
    Measure,
    assemble,
    check_key_names,
    integer_dtype,
    is_integral_release,
)
from tabdp.frame.backends import from_pandas, is_pandas_frame, output_library, release_engine
from tabdp.frame.binding import cached_snapshot, choose_ledger, keep_snapshot, use_engine
from tabdp.frame.keys import _TEXT, KeySet, check_cell_keys, key_conversion
from tabdp.mechanisms import ExactTotals, Mechanism
from tabdp.privacy.budget import ROWS_CURRENCY
from tabdp.privacy.ledger import Charges, Deferred
from tabdp.privacy.session import Session

__all__ = ["count_mechanism", "ROW_ID", "SUM_SCALE_BITS", "MAX_ABS",
           "NULL_POLICIES", "NEGATIVE_POLICIES", "OUTPUT_SUFFIXES"]

NULL_POLICIES = ("error", "zero", "drop")
#: Rules for negative values of a summed measure (the spec's input.negatives has the same ones
#: and the same default, tabdp._defaults.NEGATIVES): refuse them (curator mode), allow them
#: (signed measures), set them to 0, or drop the row.
NEGATIVE_POLICIES = NEGATIVE_RULES
#: Row id column assigned when the input is read (row mode: each row is a unit).
ROW_ID = _ROW_ID
#: Fixed-point scale of float measures: values are summed exactly as multiples of 2**-24.
SUM_SCALE_BITS = 24
#: Public magnitude bound of a single value: larger |values| are clamped to it (declared rule).
MAX_ABS = 2.0**64
#: Output columns per measure ``m``: estimate, sd, margin of error, interval ends.
OUTPUT_SUFFIXES = ("", "_sd", "_moe", "_lower", "_upper")
_ROWS = "__tabdp_rows"   # rows released (kept by the rules) per unit and cell
_ALL = "__tabdp_all"     # rows read per unit and cell
_CELL = "__tabdp_cell"   # position of the cell in the key set (null: outside it)
#: Internal columns added to frames that still carry the user's columns: under ``RESERVED``
#: (refused for measures, keys and the unit), so none takes a measure's or key's place.
_KEEP = f"{RESERVED}_keep"   # the rules keep the row
_POS = f"{RESERVED}_pos"     # position of a key (or a row) before a sort
_COMBO = f"{RESERVED}_combo"  # a key's combined code
_SIZE = f"{RESERVED}_size"   # a (unit, cell)'s contribution size (max_cells)
_RANK = f"{RESERVED}_rank"   # its rank among the unit's cells (max_cells)
#: A column's fingerprint (`_fingerprint`): ``FP + <column>``, summed next to the user's keys.
FP = f"{RESERVED}_fp:"
_FP_SEED = 0x7ab0D9
_FP_ROW_SEED = 0x51F0E3
#: A Polars frame, in memory or lazy (functions that take either return the same kind).
_Frame = TypeVar("_Frame", pl.DataFrame, pl.LazyFrame)


def _fingerprint(col: str, dtype: pl.DataType) -> pl.Expr:
    """Row mode: the hash of each row id with the row's value of ``col`` (summed per column).

    Enum / Categorical values are hashed as their strings: their physical codes follow the
    order of the dtype's categories, so a reordered frame whose categories are reordered with
    it would otherwise keep every code in place and pass for the bound rows. A Decimal is
    hashed with its scale and a Datetime or Duration with its time unit: their physical values
    are integers, so ``100`` as ``Decimal(10, 0)`` and ``1.00`` as ``Decimal(10, 2)`` (or the
    same integer in milliseconds and in microseconds) would hash alike.
    """
    value = pl.col(col)
    if isinstance(dtype, (pl.Enum, pl.Categorical)):
        value = value.cast(pl.String)
    if isinstance(dtype, (pl.Decimal, pl.Datetime, pl.Duration)):
        fields = [value.alias(col)]
        if isinstance(dtype, pl.Decimal):
            fields.append(pl.lit(dtype.scale, dtype=pl.Int64).alias("__tabdp_scale"))
        else:
            fields.append(pl.lit(str(dtype.time_unit)).alias("__tabdp_unit"))
        value = pl.struct(fields)
    # the value's hash mixed with the row id's (one hash per row, shared by every column of a
    # plan), hashed again: a third less CPU than hashing a struct of the two per column
    row = pl.col(ROW_ID).hash(seed=_FP_ROW_SEED)
    return (value.hash(seed=_FP_SEED) ^ row).hash(seed=_FP_SEED).alias(f"{FP}{col}")
#: 128-bit integer dtypes (UInt128 exists only in newer Polars)
_WIDE_INTS = tuple(t for t in (getattr(pl, "Int128", None), getattr(pl, "UInt128", None))
                   if t is not None)
#: Integer dtypes whose every value fits in Int64: their fixed-point values always do
_FITS_64 = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32)


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
            "Hint: e.g. mechanism=tabdp.mechanisms.LogTransform(sigma=0.25, offset=1000.0) or "
            "tabdp.mechanisms.Gaussian(sigma=2.0); see tabdp.mechanisms.__all__.")
    # a noise scale the release cannot draw at is refused here, before the data is read (as
    # itself, not as a failure on the data)
    mechanism.check_releasable()
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
               for s in OUTPUT_SUFFIXES]
    check_key_names(by, outputs, f"this {kind} (outputs: {outputs})")
    audit = sorted(set(by) & {"worst_rho", "worst_size", "units"})
    if audit and session is not None and getattr(session, "track_cells", False):
        raise InvalidParameterError(
            f"group-by column(s) {audit} have the name of a column of the cell audit "
            "(track_cells=True lists each cell's keys with worst_rho, worst_size and units).\n"
            "Hint: rename the key column(s) (and the key set's) before the release.")
    reserved = sorted(c for c in [*measures, *by] if is_reserved(c))
    if reserved:
        raise InvalidParameterError(
            f"column name(s) {reserved} start with {RESERVED!r} (in any letter case), which "
            "tabdp reserves for its own columns.\nHint: rename them before the release.")
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


def _check_rules(sess: Session, kind: str, mechanism: Mechanism, nulls: str,
                 negatives: str, has_measures: bool) -> str:
    """The negatives rule of the release; author mode needs every rule declared (no data).

    ``negatives`` defaults to `tabdp._defaults.NEGATIVES` (``"error"``) in every caller, as a
    spec's ``input.negatives``: a curator-mode release refuses negative values whatever the
    mechanism, and an author must declare another rule (refused here, from the arguments).
    """
    needs_nonneg = bool(mechanism.requires_nonnegative) and kind == "sum"
    if negatives not in NEGATIVE_POLICIES:
        raise InvalidParameterError(
            f"negatives must be one of {NEGATIVE_POLICIES}; got {negatives!r}.\n"
            "Hint: 'allow' keeps signed values (additive mechanisms), 'zero' sets negative "
            f"values to 0, 'drop' drops their rows, {DEFAULT_NEGATIVES!r} (the default, as in "
            "a release spec) refuses them (curator mode only)"
            + ("; None no longer picks a rule per mechanism: pass negatives='allow' for a "
               "signed measure." if negatives is None else "."))
    rule = negatives
    if sess.mode == "author":
        # every undeclared rule at once (stop 68): from the arguments alone, no data read
        problems = []
        if nulls == "error" and has_measures:
            problems.append(("nulls='error' would refuse the release depending on the data",
                             "pass nulls='zero' (count missing values as 0) or nulls='drop' "
                             "(drop their rows)"))
        if kind == "sum" and has_measures and rule == "error":
            problems.append(("negatives='error' (the default) would refuse the release "
                             "depending on the data",
                             "declare negatives= in the call: negatives='zero' (set them to 0) "
                             "or negatives='drop' (drop their rows)"
                             + ("" if needs_nonneg else ", or negatives='allow' (a signed "
                                                        "measure)")))
        if needs_nonneg and rule == "allow":
            problems.append((f"{type(mechanism).__name__} needs non-negative contributions, "
                             "so negatives='allow' could make the release fail on the data",
                             "pass negatives='zero' (set them to 0) or negatives='drop' (drop "
                             "their rows)"))
        if problems:
            raise InvalidParameterError(
                "this session is in author mode (the caller may not see the data), where every "
                "data rule must be declared: " + "; ".join(w for w, _ in problems)
                + ".\nHint: " + "; and ".join(h for _, h in problems) + ".")
    return rule


#: Noise of a count released without a mechanism: exact discrete Gaussian, ρ(Δ) = Δ²/8.
DEFAULT_COUNT_SIGMA = 2.0


def count_mechanism(mechanism: Any, grid: Any = None) -> Any:
    """The mechanism a count is released with: exact integer noise by default.

    Counts are integer queries, so the continuous Gaussian and Laplace laws are replaced by their
    exact integer counterparts, which give the same guarantee at integer Δ (ρ = Δ²/(2σ²);
    ε = Δ/b) and cannot leak through floating point: ``Gaussian(σ)`` → ``DiscreteGaussian(σ)``,
    ``Laplace(b)`` → ``DiscreteLaplace(b)``, ``None`` → ``DiscreteGaussian(2.0)``. The swap is
    skipped when the caller asks for a non-integer grid (the continuous law is then rounded to
    that grid, see docs/exact-rounding.md). Each mechanism names its counterpart
    ([`for_counts`][tabdp.mechanisms.Mechanism.for_counts]); others are kept as given. The default
    is `tabdp.registry.COUNT_DEFAULT`.

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
    from tabdp import mechanisms, registry

    step = grid.get("count") if isinstance(grid, dict) else grid
    integral = step is None or (isinstance(step, (int, float)) and not isinstance(step, bool)
                                and float(step) >= 1 and float(step).is_integer())
    if mechanism is None:
        family, params = registry.COUNT_DEFAULT
        return registry.get(family).cls(**params)
    if not integral or not isinstance(mechanism, mechanisms.Mechanism):
        return mechanism
    return mechanism.for_counts()


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


# -- opening a release (no data read) ---------------------------------------------------------
class _Opened(NamedTuple):
    session: Session
    one_off: bool
    name: str
    lf: pl.LazyFrame
    backend: str
    schema: pl.Schema
    native: Any


def _to_lazy(native: Any) -> tuple[pl.LazyFrame, str]:
    if isinstance(native, pl.LazyFrame):
        return native, "polars"
    if isinstance(native, pl.DataFrame):
        return native.lazy(), "polars"
    if is_pandas_frame(native):
        try:
            return from_pandas(native).lazy(), "pandas"
        except Exception as err:  # pyarrow cannot convert a column (mixed object types)
            raise ColumnTypeError(
                f"the pandas frame cannot be converted for the release ({type(err).__name__}); "
                "a column holds values of mixed or unsupported types.\nHint: give every "
                "column one dtype (e.g. df[col].astype(float) or .astype(str)).") from err
    raise UnsupportedBackendError(
        f"df.dp works on pandas DataFrames and Polars DataFrames / LazyFrames; got "
        f"{type(native).__name__}.")


def _schema_checks(schema: pl.Schema, measures: list[str], by: list[str],
                   unit: str | None) -> None:
    names = list(schema.names())
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
        if not (dt.is_numeric() or isinstance(dt, pl.Decimal)) or dt == pl.Boolean:
            what = (f"dtype {dt}" if dt != pl.Null else  # (pandas: an object column of None)
                    "dtype Null (a column of missing values only, without a numeric type)")
            raise ColumnTypeError(
                f"measure {m!r} has {what}; sums and quantiles need a numeric column "
                "(integer or float).\n"
                f"Hint: cast it first, e.g. pl.col({m!r}).cast(pl.Float64) or "
                f"df[{m!r}].astype(float) after cleaning non-numeric values.")
    if unit and unit in names and isinstance(schema[unit], (pl.List, pl.Struct, pl.Array)):
        raise ColumnTypeError(
            f"unit column {unit!r} has dtype {schema[unit]}; unit ids must be scalar values.")


def _open_release(native: Any, session: Session | None, name: str | None, kind: str,
                  measures: list[str], by: list[str]) -> _Opened:
    """Session, release name, lazy input and checked schema of a release (no data read)."""
    one_off = session is None
    sess = Session() if session is None else session
    qname = sess.release_name(name, kind)  # validate before any data pass or noise draw
    use_engine(sess, "polars")
    choose_ledger(sess, release_engine(native, sess) == "streaming")
    unit = sess.unit
    if unit is not None and (unit in by or unit in measures):
        raise InvalidParameterError(
            f"the unit column {unit!r} cannot also be a measure or a group-by key.\n"
            "Hint: the unit identifies who contributes; group and measure other columns.")
    # author mode: the session's one frame, pinned (the frame itself is never converted again:
    # a pandas conversion depends on the values)
    pinned = bind_frame(sess, native)
    backend: str
    if pinned is not None:
        lf, backend = pinned, output_library(native)
    else:
        lf, backend = _to_lazy(native)
    schema = lf.collect_schema()
    if unit is None and ROW_ID in schema.names():
        # row ids are tabdp's own (a streaming session would take this column as the ids)
        raise InvalidParameterError(
            f"the frame has a column named {ROW_ID!r}, a name reserved for the row ids tabdp "
            "assigns in row mode (unit=None).\nHint: rename or drop that column before the "
            "release.")
    _schema_checks(schema, measures, by, unit)
    if unit is not None and unit in schema.names():
        binding.of(sess).check_unit_dtype(unit, schema[unit], len(sess.records))
        if sess.lifetime is not None:  # ids the ledger cannot key, by their type: never
            # only when a row holds one (review r83; the Spark engine's _check_lifetime_units)
            # a closed ledger too
            sess.lifetime.check_release(schema[unit])
    return _Opened(sess, one_off, qname, lf, backend, schema, native)


# -- the snapshot -----------------------------------------------------------------------------
def _is_float(dt: Any) -> bool:
    return dt in (pl.Float32, pl.Float64) or isinstance(dt, pl.Decimal)


def scale_bits(dtype: Any) -> int:
    """Fixed-point scale of a measure's exact sums: 0 for integers, ``SUM_SCALE_BITS`` else.

    Args:
        dtype: The measure's Polars dtype.

    Returns:
        The number of binary fraction digits kept.

    Example:
        >>> scale_bits(pl.Int32), scale_bits(pl.Float64)
        (0, 24)
    """
    return 0 if dtype.is_integer() else SUM_SCALE_BITS


class _Rules(NamedTuple):
    nulls: str
    negatives: str
    mode: str


def _measure_parts(m: str, dt: Any, rules: _Rules, narrow: bool = False
                   ) -> dict[str, pl.Expr]:
    """Row-level expressions of a measure: flags and its fixed-point value (Int128).

    ``narrow``: the fixed-point value as Int64 instead, null where it needs more than 64 bits
    (never for a dtype of `_FITS_64`; `_snapshot_plan` collects those rows' Int128 values).
    """
    x = pl.col(m).cast(pl.Float64) if isinstance(dt, pl.Decimal) else pl.col(m)
    if _is_float(dt):
        missing = x.is_null() | x.is_nan()
        inf = x.is_infinite().fill_null(False)
        # NaN sorts above every number in Polars (NaN > 2**64 is true): a missing value is
        # counted as missing, never as clamped
        big = (x.abs() > MAX_ABS).fill_null(False) & ~inf & ~missing
        # (the same whole double either way: cast to 64 bits, exact, or null when beyond them)
        fixed = (x.clip(-MAX_ABS, MAX_ABS) * float(2**SUM_SCALE_BITS)).round().cast(
            pl.Int64 if narrow else pl.Int128, strict=False)
    elif dt in _WIDE_INTS:
        # 128-bit integers may exceed the public magnitude bound: clamp them like floats (two
        # Int128 values near 2**126 would wrap their sum; a UInt128 above 2**127 cannot be cast)
        lim = 1 << 64
        above = (x > pl.lit(lim, dt)).fill_null(False)
        below = ((x < pl.lit(-lim, pl.Int128)).fill_null(False) if dt == pl.Int128
                 else pl.lit(False))
        missing = x.is_null()
        inf = pl.lit(False)
        big = above | below
        fixed = (pl.when(above).then(pl.lit(lim, pl.Int128))
                 .when(below).then(pl.lit(-lim, pl.Int128))
                 .otherwise(x.cast(pl.Int128, strict=False)))
        if narrow:
            fixed = fixed.cast(pl.Int64, strict=False)
    else:
        missing = x.is_null()
        inf = pl.lit(False)
        big = pl.lit(False)
        fixed = (x.cast(pl.Int64) if dt in _FITS_64 else x.cast(pl.Int64, strict=False)
                 ) if narrow else x.cast(pl.Int128)
    neg = (x < 0).fill_null(False)
    if rules.negatives == "zero":
        fixed = fixed.clip(lower_bound=0)
    # ±inf: refused in curator mode; in author mode a declared rule treats it as missing
    bad = missing | inf
    return {"missing": missing, "inf": inf, "big": big, "neg": neg, "fixed": fixed,
            "bad": bad}


def _keep_mask(parts: dict[str, dict[str, Any]], rules: _Rules, true: Any,
               unit_bad: Any) -> Any:
    """The rows a release keeps, as an expression of either engine (Polars or Spark).

    ``true`` (the engine's literal True) and, in order, not ``bad`` for every measure under
    ``nulls="drop"``, not ``neg`` for every measure under ``negatives="drop"``, and not
    ``unit_bad`` (a missing unit id; None: no unit column) in author mode.
    """
    keep = true
    if rules.nulls == "drop":
        for p in parts.values():
            keep = keep & ~p["bad"]
    if rules.negatives == "drop":
        for p in parts.values():
            keep = keep & ~p["neg"]
    if unit_bad is not None and rules.mode == "author":
        keep = keep & ~unit_bad
    return keep


def _counter_exprs(parts: dict[str, dict[str, Any]], schema: pl.Schema) -> dict[str, pl.Expr]:
    """Row flags counted by a release (confidential): missing, ±inf, beyond 2**64, negative."""
    counters: dict[str, pl.Expr] = {}
    for m, p in parts.items():
        counters[f"missing:{m}"] = p["missing"]
        if _is_float(schema[m]):
            counters[f"inf:{m}"] = p["inf"]
            counters[f"big:{m}"] = p["big"]
        elif schema[m] in _WIDE_INTS:
            counters[f"big:{m}"] = p["big"]
        counters[f"neg:{m}"] = p["neg"]  # counted under every rule (confidential audit)
    return counters


def _missing_unit(schema: pl.Schema, unit: str) -> pl.Expr:
    """Rows without a unit id: null, or NaN for a float id (NaN ids would merge distinct units).

    A Decimal id has no NaN (nor ``is_nan``).
    """
    missing = pl.col(unit).is_null()
    if schema[unit] in (pl.Float32, pl.Float64):
        missing = missing | pl.col(unit).is_nan()
    return missing


def _fp_columns(schema: pl.Schema, read: Sequence[str], bound: Sequence[str]) -> list[str]:
    """Row mode: the columns a release fingerprints (those it reads, then the session's bound).

    Each once, in that order; bound columns absent from the input are left out. A reordered
    frame read through a new column is caught by the earlier columns. Charges depend only on
    the columns read, so rows that agree on every bound column have had identical charges so
    far: exchanging them cannot misattribute a loss. Other columns are not read (no I/O).
    """
    return [c for c in dict.fromkeys([*read, *bound]) if c in schema.names()]


def _snapshot_exprs(schema: pl.Schema, unit: str | None, measures: list[str], rules: _Rules,
                    narrow: bool = False
                    ) -> tuple[pl.Expr, dict[str, pl.Expr], dict[str, pl.Expr]]:
    """A snapshot's row expressions: ``_KEEP``, the fixed-point values and the counters.

    Values are a measure's exact fixed-point contribution (0 where the row is not kept or the
    value is bad); counters flag each row (``null:<unit>`` for a missing unit id).
    ``narrow``: values as Int64, null where one needs more bits (`_measure_parts`).
    """
    parts = {m: _measure_parts(m, schema[m], rules, narrow) for m in measures}
    unit_bad = None if unit is None else _missing_unit(schema, unit)
    keep = _keep_mask(parts, rules, pl.lit(True), unit_bad).alias(_KEEP)
    width = pl.Int64 if narrow else pl.Int128
    values = {m: pl.when(pl.col(_KEEP) & ~p["bad"]).then(p["fixed"])
              .otherwise(pl.lit(0, width)).alias(m) for m, p in parts.items()}
    counters = _counter_exprs(parts, schema)
    if unit_bad is not None:
        counters[f"null:{unit}"] = unit_bad
    return keep, values, counters


def _snapshot_plan(lf: pl.LazyFrame, schema: pl.Schema, unit: str | None, by: list[str],
                   measures: list[str], rules: _Rules, bound: Sequence[str] = (),
                   cell: pl.Expr | None = None, keyless: bool = False
                   ) -> tuple[pl.LazyFrame, pl.LazyFrame | None, pl.LazyFrame | None,
                              pl.LazyFrame | None]:
    """The lazy plans of a row-mode snapshot (one row per row id), its totals, strays, wide rows.

    The totals (the counters, named by flag, and ``FP<column>``, the fingerprints: one row,
    None without any) are a plan over the same input, collected with it (`_row_snapshot`).

    Row ids are assigned here (``unit=None``), or were assigned by the caller when it read the
    input (``unit=ROW_ID``, the release workflow). ``bound``: the columns the session's earlier
    releases bound (fingerprinted again with the columns this release reads; unit=None).
    ``cell``: each row's cell (`_row_cell_expr`), a column ``_CELL`` of the rows' plan.
    ``keyless`` (with ``cell``): the rows' plan leaves out the key columns, and the third
    plan holds the rows outside the key set (``_CELL`` null) with them (``ROW_ID``, ``by``,
    ``_ROWS``); else the third plan is None.

    Row ids assigned here (``unit=None``): the measures' fixed-point values are **Int64**
    columns, not Int128 (half the memory written and zeroed, 80 MB less per measure at 10M
    rows), null where a value needs more than 64 bits; the fourth plan holds those rows'
    ``ROW_ID`` (their position) and Int128 values (every measure whose dtype is not one of
    `_FITS_64`; None when each is), which `_row_snapshot` writes back into a column widened to
    Int128 when it has any. So each column holds the exact fixed-point values either way, and
    every reader sums them as Int128 (`tabdp.frame.backends.polars`): the totals, their dtypes
    and everything shown are the same whichever width a column was given.
    """
    narrow = unit is None
    keep, values, counters = _snapshot_exprs(schema, unit, measures, rules, narrow)
    wide_ms = [m for m in measures if schema[m] not in _FITS_64] if narrow else []
    if unit is None:
        base = lf.with_row_index(ROW_ID).with_columns(keep)
        fps = [_fingerprint(c, schema[c]) for c in _fp_columns(schema, [*by, *measures], bound)]
    else:
        assert unit == ROW_ID  # unit mode has its own plan (_unit_snapshot)
        base = lf.with_columns(keep)
        fps = []
    keyless = keyless and cell is not None
    if keyless:
        assert cell is not None
        base = base.with_columns(cell.alias(_CELL))
    # one evaluation of the input for the rows and their totals (`cache`: the queries of
    # `collect_all` share it): an input whose rows differ between evaluations (a shuffle, a
    # sample, a file rewritten) would otherwise be checked and fingerprinted on other rows
    # than those released (review r19)
    base = base.cache()
    # (no column of the rows read: one per row, its count is the frame's height)
    rows = pl.col(_KEEP).cast(pl.Int64).alias(_ROWS)
    plan = base.select(
        pl.col(ROW_ID), *([] if keyless else [pl.col(c) for c in by]), *values.values(), rows,
        *([] if cell is None else [pl.col(_CELL) if keyless else cell.alias(_CELL)]))
    strays = (base.filter(pl.col(_CELL).is_null()).select(pl.col(ROW_ID), *by, rows)
              if keyless else None)
    # the counters and fingerprints are totals over all rows: summed in the same pass (the
    # scan is shared, `collect_all`), not kept as per-row columns
    sums = [*[e.cast(pl.Int64).sum().alias(k) for k, e in counters.items()],
            *[f.sum() for f in fps]]
    wide = None
    if wide_ms:  # the rows whose value needs more than 64 bits (none, most often), in Int128
        full = _snapshot_exprs(schema, unit, wide_ms, rules)[1]
        wide = base.filter(pl.any_horizontal(values[m].is_null() for m in wide_ms)).select(
            pl.col(ROW_ID), *full.values())
    return plan, base.select(sums) if sums else None, strays, wide


class RowIds:
    """A row-mode snapshot's row ids: one read-only Int64 array, made on first use, set once.

    Shared by a snapshot and the copies a release trims of it; `get` makes the array under a
    lock, so threads reading the ids together make it once, and nothing can replace it.

    Example:
        >>> ids = RowIds()
        >>> a = ids.get(lambda: np.arange(3))
        >>> ids.get(lambda: np.zeros(3)) is a, a.flags.writeable
        (True, False)
    """

    __slots__ = ("_ids", "_lock")

    def __init__(self) -> None:
        self._ids: np.ndarray | None = None
        self._lock = threading.Lock()

    def get(self, make: Callable[[], np.ndarray]) -> np.ndarray:
        """The ids, made by ``make`` (then read-only) on the first call only.

        Args:
            make: Makes the Int64 array of the snapshot's row ids.

        Returns:
            The one array, read-only.
        """
        with self._lock:
            if self._ids is None:
                ids = make()
                ids.flags.writeable = False
                self._ids = ids
            return self._ids


class _Snapshot(NamedTuple):
    data: pl.DataFrame        # unit (or ROW_ID), by, measures (Int128), _ROWS (, _ALL)
    counts: dict[str, int]    # confidential counters over all rows read
    fingerprints: dict[str, int]
    rows_read: int
    per_row: bool             # one row per unit (row ids): charges need no group-by
    # Row mode: one row per row read, without ``_ALL`` (the rows read: the height).
    # Unit mode: ``data`` holds the (unit, cell) rows inside the key set (unit, _CELL,
    # measures, _ROWS, _ALL; in the group-by's order, ``order`` sorts them) and
    # ``outside`` the (unit, key) rows outside it (unit, by, measures, _ROWS, _ALL).
    # ``None`` in row mode (``data`` then holds the key columns).
    outside: pl.DataFrame | None = None
    # Unit mode: the order of ``data``'s rows by unit, then cell (`UnitOrder`; the rows
    # themselves are in the group-by's order).
    order: UnitOrder | None = None
    # Unit mode: per-cell exact totals of ``data``'s columns, kept for the session's next
    # release of the same snapshot (`cell_totals`). Row mode (one row per row id): the same
    # for the cells kept in ``cells`` (cleared when those change).
    totals: dict[str, pl.DataFrame] | None = None
    # Row mode: each row's cell for a (key set, grouping) (`cells_of`), kept for the
    # session's next release of the same snapshot: (id(keys), by) -> (keys, the cell column).
    cells: dict[Any, tuple[KeySet, pl.Series]] | None = None
    # Row mode without the key columns in ``data`` (`_row_snapshot`): the rows outside the
    # key set of ``cells`` (ROW_ID, the key columns, _ROWS); None when ``data`` holds them.
    strays: pl.DataFrame | None = None
    # Row mode (one row per row id): the row ids of ``data`` as one read-only Int64 array,
    # made once, when a release first reads them (`row_ids`), for the next release of the same
    # snapshot (and the copies a release trims, which share it).
    ids: RowIds | None = None


def row_ids(snap: _Snapshot, inside: pl.DataFrame) -> np.ndarray | None:
    """Row mode: the row ids of ``inside`` when it holds every row of ``snap.data``, else None.

    ``inside`` is then ``snap.data`` filtered by a mask that kept every row (the rows in the
    same order): its ids are the snapshot's, converted once per snapshot (a cast and a copy
    of every row otherwise) and shared read-only by the releases' charges and losses.

    Example:
        >>> snap = _Snapshot(pl.DataFrame({ROW_ID: pl.Series([0, 1], dtype=pl.UInt32)}),
        ...                  {}, {}, 2, True, ids=RowIds())
        >>> ids = row_ids(snap, snap.data)
        >>> ids.tolist(), ids.dtype.name, row_ids(snap, snap.data) is ids
        ([0, 1], 'int64', True)
    """
    if snap.ids is None or inside.height != snap.data.height:
        return None
    col = snap.data[ROW_ID]

    def make() -> np.ndarray:
        if col.dtype not in (pl.UInt32, pl.UInt64) or col.null_count():
            return np.asarray(col.cast(pl.Int64).to_numpy(), dtype=np.int64)
        # the row index (below 2**63), widened to Int64 by slices on the threads
        got = np.empty(len(col), dtype=np.int64)

        def widen(lo: int, hi: int) -> None:
            got[lo:hi] = col.slice(lo, hi - lo).to_numpy()

        on_slices(len(col), widen)
        return got

    return snap.ids.get(make)


def drops_rows(rules: _Rules) -> bool:
    """Whether ``rules`` drop rows for a measure's value (the rows kept depend on the measures).

    Example:
        >>> r = _Rules("drop", "error", "curator")
        >>> drops_rows(r), drops_rows(r._replace(nulls="zero"))
        (True, False)
    """
    return rules.nulls == "drop" or rules.negatives == "drop"


def serves_measures(cached: dict[str, Any], measures: list[str], rules: _Rules) -> bool:
    """Whether a kept snapshot (its ``measures``, ``rules``, ``drops``) serves this release.

    Its measures must include the release's, under the same rules when the release sums any
    (a count reads none of them); and when the snapshot's rules dropped rows for a measure,
    its rows kept are this release's only for the same measures. The rule of every engine's
    snapshot reuse (`_take_snapshot`, the Spark engine's `_unit_snapshot`).

    Example:
        >>> r = _Rules("error", "error", "curator")
        >>> kept = {"measures": ("a", "b"), "rules": r, "drops": False}
        >>> serves_measures(kept, [], r), serves_measures(kept, ["c"], r)
        (True, False)
    """
    return (set(measures) <= set(cached["measures"])
            and (not measures or cached["rules"] == rules)
            and (not cached["drops"] or set(measures) == set(cached["measures"])))


def _take_snapshot(op: _Opened, by: list[str], measures: list[str], rules: _Rules,
                   keys: KeySet) -> _Snapshot:
    """One evaluation of the input (cached for a later release of the same Polars frame).

    Unit mode: the cells are found inside the plan and the input is grouped by (unit, cell) —
    integer codes, not the key columns — so the snapshot holds per unit and cell only its
    contributions; the rows outside the key set are grouped by (unit, keys). Row mode (no unit,
    or row ids assigned by the caller): one row per row id (`_row_snapshot`).
    """
    sess, native = op.session, op.native
    unit = sess.unit
    unit_mode = unit is not None and unit != ROW_ID
    cache_key = (id(native), tuple(by), unit, rules.mode, id(keys) if unit_mode else None)
    cols = [*by, *measures, *([unit] if unit else [])]
    cacheable = isinstance(native, (pl.DataFrame, pl.LazyFrame))
    cached = cached_snapshot(sess, cache_key) if cacheable else None
    if cached is not None:
        usable = (cached["native"] is native and _unchanged(native, cached["columns"], cols)
                  and serves_measures(cached, measures, rules)
                  # row mode: columns bound since (e.g. by a median) are fingerprinted afresh
                  and set(binding.of(sess).bound_columns()) <= set(cached["snapshot"].fingerprints)
                  and cached.get("keys") is (keys if unit_mode else None))
        snap_: _Snapshot = cached["snapshot"]
        if usable and snap_.strays is not None:  # no key columns: its own key set only
            known = (snap_.cells or {}).get((id(keys), tuple(by)))
            usable = known is not None and known[0] is keys
        if usable:
            snap: _Snapshot = snap_
            keep_cols = [c for c in snap.data.columns
                         if c not in cached["measures"] or c in measures]
            counts = {k: v for k, v in snap.counts.items()
                      if k.split(":", 1)[-1] in measures or k.startswith("null:")}
            fps: dict[str, int] = dict(snap.fingerprints)
            outside = None if snap.outside is None else snap.outside.select(
                [c for c in snap.outside.columns if c not in cached["measures"] or c in measures])
            return _Snapshot(snap.data.select(keep_cols), counts, fps, snap.rows_read,
                             snap.per_row, outside, snap.order, snap.totals, snap.cells,
                             snap.strays, snap.ids)
    if unit_mode:
        assert unit is not None
        snap = _unit_snapshot(op, unit, by, measures, rules, keys)
    else:
        snap = _row_snapshot(op, unit, by, measures, rules, keys)
    if cacheable:
        keep_snapshot(sess, cache_key, {
            "native": native, "snapshot": snap, "measures": tuple(measures), "rules": rules,
            "drops": drops_rows(rules),
            "keys": keys if unit_mode else None,
            "columns": native.select(cols) if isinstance(native, pl.DataFrame) else None})
    return snap


#: The seed of the hash that assigns a unit to a partition (`unit_partition`).
_PARTITION_SEED = 0x7AB_D9


def unit_partition(unit: str, part: int, parts: int) -> pl.Expr:
    """Whether a row's unit falls in partition ``part`` of ``parts`` (``hash(unit) mod parts``).

    A function of the unit id alone (a null id too): every row of a unit is in one partition,
    so a partition holds its units complete.

    Args:
        unit: The unit column.
        part: The partition, ``0 <= part < parts``.
        parts: The number of partitions.

    Returns:
        A boolean expression.

    Example:
        >>> df = pl.DataFrame({"u": [1, 2, 1, None]})
        >>> a = df.filter(unit_partition("u", 0, 2))["u"].to_list()
        >>> b = df.filter(unit_partition("u", 1, 2))["u"].to_list()
        >>> sorted(a + b, key=str) == sorted(df["u"].to_list(), key=str), a.count(1) in (0, 2)
        (True, True)
    """
    return (pl.col(unit).hash(seed=_PARTITION_SEED) % parts) == part


def _unit_snapshot(op: _Opened, unit: str, by: list[str], measures: list[str], rules: _Rules,
                   keys: KeySet, part: tuple[int, int] | None = None) -> _Snapshot:
    """Unit mode's snapshot: per (unit, cell) inside the key set, per (unit, keys) outside.

    ``part``: ``(p, k)``: only the units of partition ``p`` of ``k`` (`unit_partition`).
    """
    keep, values, counters = _snapshot_exprs(op.schema, unit, measures, rules)
    aggs = [*[v.sum() for v in values.values()],
            pl.col(_KEEP).cast(pl.Int64).sum().alias(_ROWS),
            pl.len().cast(pl.Int64).alias(_ALL)]
    lf = op.lf if part is None else op.lf.filter(unit_partition(unit, *part))
    # one evaluation of the input for the rows inside and outside the key set and the counters
    # (`cache`: the queries of `collect_all` share it; an input whose rows differ between
    # evaluations would otherwise put a row in both or neither: review r19)
    base = _cells(lf.with_columns(keep), op.schema, keys, by, _CELL).cache()
    # the counters are totals over all rows: one plain sum each in the same pass (the scan is
    # shared), not one more aggregation per (unit, cell) group
    queries = [base.filter(pl.col(_CELL).is_not_null()).group_by(unit, _CELL).agg(aggs),
               base.filter(pl.col(_CELL).is_null()).group_by(unit, *by).agg(aggs)]
    if counters:
        queries.append(base.select(e.cast(pl.Int64).sum().alias(k)
                                   for k, e in counters.items()))
    got = pl.collect_all(queries, engine="streaming")  # bounded memory for inputs beyond RAM
    inside, outside = got[0], got[1]
    counts = ({k: int(v or 0) for k, v in got[2].row(0, named=True).items()}
              if counters else {})
    rows_read = sum(int(d[_ALL].sum() or 0) for d in (inside, outside))
    # the rows stay in the group-by's order: only the permutation by (unit, cell) is computed
    # (a unit's losses are summed in key-set order through it), not a sort of every column
    inside = inside.with_columns(pl.col(_CELL).cast(pl.Int64))
    order = UnitOrder(inside[unit], inside[_CELL], len(keys) if by else 1)
    return _Snapshot(inside, counts, {}, rows_read, False, outside, order, {})


def _row_snapshot(op: _Opened, unit: str | None, by: list[str], measures: list[str],
                  rules: _Rules, keys: KeySet | None = None) -> _Snapshot:
    """The snapshot of row mode: one row per row id (``unit`` None or ``ROW_ID``).

    Each row's cell of ``keys`` is computed in the same pass where it is a row-wise expression
    (`_row_cell_expr`; each row a unit): kept as the snapshot's cells (`cells_of`), not found
    again in the collected frame (a copy of its many chunks).
    """
    sess = op.session
    cell = (_row_cell_expr(op.schema, keys, by)
            if unit is None and keys is not None else None)
    # every row's cell known in the pass and no cell audit (which reads the rows' keys): the
    # key columns are kept for the rows outside the key set only (`_Snapshot.strays`), not
    # as two text columns of every row; a later release of the same frame and grouping with
    # another key set takes a snapshot of its own (`_take_snapshot`)
    keyless = cell is not None and bool(by) and not sess.track_cells
    plan, sums, strays, wide = _snapshot_plan(op.lf, op.schema, unit, by, measures, rules,
                                              binding.of(sess).bound_columns(), cell, keyless)
    queries = [plan, *[q for q in (sums, strays, wide) if q is not None]]
    # bounded memory for inputs larger than RAM; one scan for every query
    got = (pl.collect_all(queries, engine="streaming") if len(queries) > 1
           else [plan.collect(engine="streaming")])
    rest = iter(got[1:])
    data = got[0]
    total = next(rest).row(0, named=True) if sums is not None else {}
    stray_rows = next(rest) if strays is not None else None
    if wide is not None:
        data = _widened(data, next(rest))
    counts = {k: int(v or 0) for k, v in total.items() if not k.startswith(FP)}
    rows_read = data.height  # one row per row read (the plan has no group-by)
    fps = {k[len(FP):]: int(v or 0) for k, v in total.items() if k.startswith(FP)}
    per_row = unit is None
    if unit is not None:  # unit == ROW_ID (_snapshot_plan)
        per_row = not bool(data[ROW_ID].is_duplicated().any())
        if not per_row:  # a join repeated rows: they are one unit (same result, group-by)
            data = data.group_by(ROW_ID, *by, maintain_order=True).agg(
                pl.exclude(ROW_ID, *by).sum())
    # one row per unit: the cell totals of the rows as they are, for the cells kept in
    # ``cells``, are kept for the next release of the same snapshot and cells (`cells_of`)
    cells: dict[Any, tuple[KeySet, pl.Series]] = {}
    if cell is not None:
        assert keys is not None
        cells[(id(keys), tuple(by))] = (keys, data[_CELL])
        data = data.drop(_CELL)
    return _Snapshot(data, counts, fps, rows_read, per_row, totals={} if per_row else None,
                     cells=cells, strays=stray_rows, ids=RowIds() if per_row else None)


def _widened(data: pl.DataFrame, wide: pl.DataFrame) -> pl.DataFrame:
    """``data``'s Int64 measures with nulls (values beyond 64 bits) widened to Int128.

    ``wide`` holds those rows (by ``ROW_ID``, the row ids of ``data``) with their exact
    Int128 values (`_snapshot_plan`); a column without nulls stays Int64.

    Example:
        >>> d = pl.DataFrame({ROW_ID: pl.Series([0, 1], dtype=pl.UInt32),
        ...                   "x": pl.Series([5, None], dtype=pl.Int64)})
        >>> w = pl.DataFrame({ROW_ID: pl.Series([1], dtype=pl.UInt32),
        ...                   "x": pl.Series([2**70], dtype=pl.Int128)})
        >>> out = _widened(d, w)
        >>> out["x"].dtype, out["x"].to_list() == [5, 2**70]
        (Int128, True)
    """
    cols = [m for m in wide.columns if m != ROW_ID and data[m].null_count()]
    if not cols:
        return data
    # a left join on the row ids, not `Series.scatter`: Polars 1.32 (the floor) cannot scatter
    # into an Int128 Series ("not yet implemented for dtype: i128")
    patch = data.select(ROW_ID).join(
        wide.select(ROW_ID, *[pl.col(m).alias(f"{m}\x00wide") for m in cols]),
        on=ROW_ID, how="left", maintain_order="left")
    return data.with_columns(
        pl.coalesce(patch[f"{m}\x00wide"], data[m].cast(pl.Int128)).alias(m) for m in cols)


def _unchanged(native: Any, columns: pl.DataFrame | None, cols: list[str]) -> bool:
    """Whether a Polars DataFrame still holds the data it held when its snapshot was taken.

    ``columns`` is ``None`` for a LazyFrame, whose plan cannot be modified.
    """
    if columns is None:
        return True
    try:
        return bool(columns.select(cols).equals(native.select(cols)))
    except Exception:  # a column was dropped or retyped in place
        return False


def _strict_checks(counts: dict[str, int], measures: list[str], unit: str | None,
                   rules: _Rules, needs_nonneg: bool, neg_contrib: dict[str, int]) -> None:
    """Curator mode: refuse data that a strict rule does not accept (generic message)."""
    if rules.mode == "author":
        return
    problems, details = [], {}
    for m in measures:
        n_inf = counts.get(f"inf:{m}", 0)
        n_missing = counts.get(f"missing:{m}", 0)
        if n_inf:
            problems.append(f"column {m!r} holds infinite values (+inf or -inf), which no null "
                            "policy releases.\nHint: fix or remove those rows before the "
                            "release, or use Session(mode='author') where they count as "
                            "missing values under the declared nulls= rule.")
            details[f"infinite_values:{m}"] = n_inf
        if n_missing and rules.nulls == "error":
            problems.append(f"column {m!r} holds missing values (null or NaN) and nulls='error'."
                            "\nHint: pass nulls='zero' to count them as 0, or nulls='drop' to "
                            "drop those rows (the choice is recorded in the report).")
            details[f"missing_values:{m}"] = n_missing
    if rules.negatives == "error":
        for m in measures:
            n_neg = counts.get(f"neg:{m}", 0)
            if n_neg:
                problems.append(
                    f"column {m!r} holds negative values and negatives='error' (the default, "
                    "as in a release spec: a negative value is never summed silently).\n"
                    "Hint: pass negatives='allow' for a signed measure (additive mechanisms), "
                    "'zero' to set them to 0 or 'drop' to drop those rows (counted in the "
                    "report).")
                details[f"negative_values:{m}"] = n_neg
    # One refusal reason per measure, the same on every engine: under "error" a negative
    # value is refused as such (a negative unit-cell contribution needs a negative value, so
    # it adds nothing); the contribution check is the one of signed measures ("allow") under
    # a mechanism that needs non-negative contributions.
    if needs_nonneg and rules.negatives == "allow":
        for m, n in neg_contrib.items():
            if n:
                what = ("rows" if unit is None else
                        f"unit-cell contributions (sums of a {unit!r} unit's rows in a cell)")
                problems.append(
                    f"column {m!r} holds negative {what}, but the mechanism needs every unit's "
                    "contribution to be >= 0 (its guarantee assumes non-negative totals with "
                    "and without any unit).\nHint: pass negatives='zero' or negatives='drop', "
                    "or use an additive mechanism (Gaussian, ExpPolyLog) for signed measures.")
                details[f"negative_contributions:{m}"] = n
    if unit is not None and counts.get(f"null:{unit}", 0):
        problems.append(f"unit column {unit!r} holds null or NaN ids; every row must belong to "
                        "a unit.\nHint: fill the ids or drop those rows first (author mode drops "
                        "them by rule).")
        details[f"null_unit_ids:{unit}"] = counts[f"null:{unit}"]
    if problems:
        raise DataValidationError(
            "the data cannot be released as given under the strict rules of curator mode "
            "(nothing was drawn or recorded; the counts are confidential and kept in this "
            "error's `confidential` attribute):\n- " + "\n- ".join(problems),
            confidential=details)


# -- cells ------------------------------------------------------------------------------------
def _attach_cells(data: pl.DataFrame, keys: KeySet, by: list[str]) -> pl.DataFrame:
    """Add ``_CELL`` to an in-memory frame, rows in their order (the rule of `_cells`)."""
    return _cells(data, data.schema, keys, by, _CELL, ordered=True)


def cells_of(snap: _Snapshot, keys: KeySet, by: list[str], uid: str) -> pl.DataFrame:
    """The snapshot's rows with ``_CELL`` (`_attach_cells`).

    A unit-mode snapshot has its cells already (found in the plan; the rows in the group-by's
    order, with their `UnitOrder`); this adds them to the others. Row ids repeated by a join
    (one unit in several cells) are sorted by unit, then cell. Either way each unit's losses
    are summed over its cells in key-set order (`UnitOrder`), an order that depends on the ids
    and the key set only (reruns agree to the last bit).
    """
    if snap.outside is not None:
        return snap.data
    # row mode: the cells of the same rows for the same key set and grouping (a count after
    # a sum of the same snapshot) are found once; a copy of the snapshot shares its cache
    known = None if snap.cells is None else snap.cells.get((id(keys), tuple(by)))
    if known is not None and known[0] is keys:
        data = snap.data.with_columns(known[1])
    else:
        # (a snapshot without key columns serves its own key set only: `_take_snapshot`)
        assert snap.strays is None
        data = _attach_cells(snap.data, keys, by)
        if snap.cells is not None:
            snap.cells.clear()  # one grouping kept: the last one
            snap.cells[(id(keys), tuple(by))] = (keys, data[_CELL])
            if snap.totals is not None:  # row mode: totals of the previous cells
                snap.totals.clear()
    if not snap.per_row:  # row ids repeated by a join: one unit in several cells
        data = _sort_units(data, uid, len(keys) if by else 1)
    return data


def _sort_units(data: pl.DataFrame, uid: str, n_keys: int) -> pl.DataFrame:
    """``data`` sorted by ``uid`` (nulls last) then ``_CELL`` (nulls last).

    Integer ids of at most 64 bits whose range allows it are sorted by one Int64 key
    (unit - min)·(n+1) + cell (several times faster than Polars' multi-column sort on millions
    of rows; same order). 128-bit ids always take the multi-column sort: their minimum may not
    be a Polars literal (a ``UInt128`` above 2**127), and which path runs depends on the ids, so
    it must never fail.
    """
    if not data.height:
        return data
    # (unit, cell) pairs are distinct: no stable sort needed
    dtype = data.schema[uid]
    if dtype.is_integer() and dtype not in _WIDE_INTS:
        lo: Any = data[uid].min()
        hi: Any = data[uid].max()
        if (lo is not None and hi is not None and -(2**63) <= int(lo) and int(hi) < 2**63
                and (int(hi) - int(lo) + 1) * (n_keys + 1) < 2**62):
            # uid - lo is in [0, 2**62): exact in Int64 arithmetic
            offset = pl.col(uid).cast(pl.Int64) - pl.lit(int(lo), pl.Int64)
            key = offset * (n_keys + 1) + pl.col(_CELL).fill_null(n_keys).cast(pl.Int64)
            return data.sort(key, nulls_last=True)
    return data.sort([uid, _CELL], nulls_last=[True, True])


def _cells(frame: _Frame, schema: pl.Schema, keys: KeySet, by: list[str], name: str,
           ordered: bool = False) -> _Frame:
    """Add column ``name``: each row's position in the key set (null outside it).

    A row is in a cell iff its key equals a key of the set after a lossless conversion to a
    common dtype chosen from the two schemas (never from the values): rows whose keys do not
    convert exactly are outside the key set. A DataFrame is computed now, in its row order; a
    LazyFrame gets a lazy plan, which keeps the row order only with ``ordered``.
    """
    if not by:
        return frame.with_columns(pl.lit(0, pl.Int64).alias(name))
    keys_pl, targets, casts = check_cell_keys(schema, keys, by)
    doms = _code_domains(schema, keys, keys_pl)
    if doms is not None:
        return _cells_by_codes(frame, doms, name)
    if not casts and isinstance(frame, pl.DataFrame):
        # in memory, keys of the key set's dtypes: KeySet.cell_index (per-column lookups of a
        # cross product's codes, or a join of the key columns alone) is several times faster
        # than the join below
        idx = pl.Series(name, keys.cell_index(frame), dtype=pl.Int64)
        return frame.with_columns(idx).with_columns(
            pl.when(pl.col(name) >= 0).then(pl.col(name)).alias(name))
    index = _lookup_index(keys_pl, by, schema)
    if index is not None:  # a row-wise expression: no join, the row order kept
        return frame.with_columns(index.alias(name))
    kp = keys_pl.with_columns(casts).with_row_index(name).with_columns(
        pl.col(name).cast(pl.Int64))
    on_data: list[str] = []
    bad: list[str] = []
    tmp = f"{name}:"
    for c in by:
        target = targets[c]
        if target is not None and target != schema[c]:
            conv, back_ok = key_conversion(c, schema[c], target)
            frame = frame.with_columns(
                pl.when(back_ok | pl.col(c).is_null()).then(conv).otherwise(None)
                .alias(f"{tmp}k:{c}"),
                (pl.col(c).is_not_null() & ~back_ok.fill_null(False)).alias(f"{tmp}bad:{c}"))
            on_data.append(f"{tmp}k:{c}")
            bad.append(f"{tmp}bad:{c}")
        else:
            on_data.append(c)
    right = kp.rename({c: f"{tmp}key:{c}" for c in by})
    frame = frame.join(right.lazy() if isinstance(frame, pl.LazyFrame) else right,
                       left_on=on_data, right_on=[f"{tmp}key:{c}" for c in by], how="left",
                       nulls_equal=True, coalesce=True,
                       maintain_order="left" if ordered else "none")
    if bad:
        frame = frame.with_columns(
            pl.when(pl.any_horizontal(bad)).then(None).otherwise(pl.col(name)).alias(name))
    drop = [c for c in [*on_data, *bad] if c.startswith(tmp)]
    return frame.drop(drop) if drop else frame


def _lookup_index(keys_pl: pl.DataFrame, by: list[str], schema: pl.Schema) -> pl.Expr | None:
    """Each row's position in the key set as a row-wise lookup, or None where only the join applies.

    For integer (at most 64 bits), text, Boolean and date keys. Each column's value is coded by
    its position among the key set's distinct values (a null key value has the last code; a
    value absent from the key set has none), the codes are combined in mixed radix, and the
    combination is looked up among the key set's (``replace_strict``). The matches are the
    join's (``nulls_equal``, compared in a common dtype): integer keys are compared in the
    data's dtype, key values that do not convert to it exactly matching no row (the join
    compares both in 128 bits, where they equal no data value either); text is compared as
    text. Computed row by row, it keeps the input's order without the join's ordering cost.
    """
    data_cols: list[pl.Expr] = []
    key_cols: list[pl.Series] = []
    valid = pl.Series([True] * keys_pl.height, dtype=pl.Boolean)
    for c in by:
        have, want = schema[c], keys_pl.schema[c]
        if have == want and (have in (pl.String, pl.Boolean, pl.Date)
                             or (have.is_integer() and have not in _WIDE_INTS)):
            data_cols.append(pl.col(c))
            key_cols.append(keys_pl[c])
        elif (have.is_integer() and want.is_integer() and have not in _WIDE_INTS
              and want not in _WIDE_INTS):
            conv = keys_pl[c].cast(have, strict=False)
            valid = valid & conv.cast(want, strict=False).eq_missing(keys_pl[c])
            data_cols.append(pl.col(c))
            key_cols.append(conv)
        elif isinstance(have, _TEXT) and isinstance(want, _TEXT):
            data_cols.append(pl.col(c).cast(pl.String))
            key_cols.append(keys_pl[c].cast(pl.String))
        else:
            return None
    codes: list[tuple[pl.Series, bool]] = []
    size = 1
    for k in key_cols:
        vals = k.filter(valid).drop_nulls().unique(maintain_order=True)
        has_null = bool(k.filter(valid).null_count())
        codes.append((vals, has_null))
        size *= len(vals) + has_null
    if size >= 2**62:
        return None

    def combine(cols: list[pl.Expr]) -> pl.Expr:
        idx: pl.Expr = pl.lit(0, pl.Int64)
        for col, (vals, has_null) in zip(cols, codes, strict=True):
            code = col.replace_strict(vals, pl.int_range(len(vals), dtype=pl.Int64, eager=True),
                                      default=None, return_dtype=pl.Int64)
            if has_null:
                code = pl.when(col.is_null()).then(pl.lit(len(vals), pl.Int64)).otherwise(code)
            idx = idx * (len(vals) + has_null) + code
        return idx

    kf = pl.DataFrame(key_cols).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias(_POS)).filter(valid)
    combos = kf.select(combine([pl.col(k.name) for k in key_cols]).alias(_COMBO), _POS)
    return combine(data_cols).replace_strict(combos[_COMBO], combos[_POS], default=None,
                                             return_dtype=pl.Int64)


def _code_domains(schema: pl.Schema, keys: KeySet, keys_pl: pl.DataFrame
                  ) -> list[pl.Series] | None:
    """The key set's domains if its cells are a cross product of text domains, else None.

    ``keys_pl``: the key set's columns (`check_cell_keys`); the data's (``schema``) are text too.
    """
    doms = keys.domains
    if doms is not None and all(
            d.null_count() == 0 and isinstance(schema[d.name], _TEXT)
            and isinstance(keys_pl.schema[d.name], _TEXT) for d in doms):
        return doms
    return None


def _row_cell_expr(schema: pl.Schema, keys: KeySet, by: list[str]) -> pl.Expr | None:
    """Each row's cell as a row-wise expression (`_cells_by_codes`), or None where it is not one.

    Text keys whose key set is a cross product of domains: the expression a snapshot's plan
    computes in its pass (row mode), the same values `_cells` adds afterwards.
    """
    doms = _row_domains(schema, keys, by)
    return None if doms is None else _cell_codes(doms)


def _row_domains(schema: pl.Schema, keys: KeySet, by: list[str]) -> list[pl.Series] | None:
    """The text domains whose cross product is the key set (`_code_domains`), or None."""
    if not by or not all(isinstance(schema[c], _TEXT) for c in by):
        return None
    keys_pl, _, _ = check_cell_keys(schema, keys, by)
    return _code_domains(schema, keys, keys_pl)


def _row_inside_expr(schema: pl.Schema, keys: KeySet, by: list[str]) -> pl.Expr | None:
    """Whether each row is in a cell of the key set, as a row-wise Boolean, or None.

    For the key sets whose cells `_row_cell_expr` finds (text keys, a cross product of
    domains): a row is in a cell iff each key, compared as text, is in its column's domain
    (null, a null key, where it is not: the rows the cell index leaves null). For a pass that
    needs only whether a row is in a cell, not which one (the streaming report): one lookup
    per column, without the codes' casts and arithmetic (about half the CPU per row).
    """
    doms = _row_domains(schema, keys, by)
    if doms is None:
        return None
    return pl.all_horizontal([pl.col(d.name).cast(pl.String).is_in(d.cast(pl.String).implode())
                              for d in doms])


def _cells_by_codes(frame: _Frame, doms: list[pl.Series], name: str) -> _Frame:
    """Cells of a cross product of text domains as a row-wise expression (no join; order kept).

    Each key column is compared as text (as the join of `_cells` does for text keys) by
    a cast to an ``Enum`` of its domain, whose physical code is the value's position in the
    domain (null outside it); the codes are combined in mixed radix like
    [`KeySet.cell_index`][tabdp.KeySet.cell_index].
    """
    return frame.with_columns(_cell_codes(doms).alias(name))


def _cell_codes(doms: list[pl.Series]) -> pl.Expr:
    """The expression of `_cells_by_codes`: the cell's index, null outside the key set.

    A value outside its column's domain has a null code, and Polars' arithmetic propagates
    the null: the index is null exactly where some code is (no mask, no ``fill_null``, no
    ``when``: about half the CPU of those per row; the index is below the key set's size,
    which is materialised, so the mixed radix never overflows an Int64).
    """
    idx: pl.Expr | None = None
    for dom in doms:
        code = (pl.col(dom.name).cast(pl.String)
                .cast(pl.Enum(dom.cast(pl.String).to_list()), strict=False)
                .to_physical().cast(pl.Int64))
        idx = code if idx is None else idx * len(dom) + code
    assert idx is not None  # a key set has at least one column
    return idx


def _check_bound(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidParameterError(
            f"{name} must be a whole number >= 1 or None; got {value!r}.\nHint: a public bound "
            f"chosen without looking at the data, e.g. {name}=10.")
    return int(value)


def _bound_contributions(inside: pl.DataFrame, uid: str, unit_mode: bool, kind: str,
                         measures: list[str], bits: dict[str, int], max_cells: int | None,
                         max_rows: int | None) -> tuple[pl.DataFrame, int]:
    """Enforce the public contribution bounds (unit mode; row mode satisfies them already).

    The cells a unit keeps are chosen from its own contributions only (its largest, ties by
    key-set order), so the choice for one unit never depends on another.
    """
    if not unit_mode:
        return inside, 0
    if max_rows is not None and kind == "count":
        inside = inside.with_columns(pl.col(_ROWS).clip(upper_bound=max_rows))
    if max_cells is None:
        return inside, 0
    if kind == "count":
        size = pl.col(_ROWS).cast(pl.Float64)
    else:
        size = pl.max_horizontal(*[pl.col(m).abs().cast(pl.Float64) * (2.0 ** -bits[m])
                                   for m in measures])
    ranked = (inside.with_row_index(_POS).with_columns(size.alias(_SIZE))
              .sort([_SIZE, _CELL], descending=[True, False], maintain_order=True)
              .with_columns(pl.int_range(pl.len()).over(uid).alias(_RANK)))
    # back in the input's order (sorted by unit, then cell: see cells_of)
    kept = ranked.filter(pl.col(_RANK) < max_cells).sort(_POS).drop(
        _POS, _SIZE, _RANK)
    return kept, inside.height - kept.height


# -- policies ---------------------------------------------------------------------------------
def _abs_float_up(values: pl.Series, bits: int) -> np.ndarray:
    """|value|·2**-bits as float64, never below the exact magnitude (charges are upper bounds).

    Example:
        >>> v = pl.Series([-3, 2**62 + 1, 0], dtype=pl.Int128)
        >>> _abs_float_up(v, 1).tolist() == [1.5, float(np.nextafter(2.0**61, np.inf)), 0.0]
        True
    """
    return magnitudes_up(abs_float(values), bits)


def abs_float(values: pl.Series) -> np.ndarray:
    """|value| as float64, each rounded to nearest as one conversion of the whole integer.

    Fixed-point values (Int128) that all fit in 64 bits (the common case) are narrowed to
    Int64 and converted by NumPy (a hardware conversion: about half the CPU of Polars'
    128-bit one, a software routine per value); others take the 128-bit cast. Both round the
    exact integer to the nearest double (ties to even), and rounding to nearest is symmetric,
    so |float(v)| is float(|v|): the same doubles either way (`magnitudes_up` reads them).

    Example:
        >>> v = pl.Series([-(2**63), 2**53 + 1, 2**64 + 3], dtype=pl.Int128)
        >>> abs_float(v).tolist() == [2.0**63, 2.0**53, 2.0**64]
        True
        >>> abs_float(v.head(2)).tolist() == [2.0**63, 2.0**53]
        True
    """
    if values.dtype == pl.Int64 and not values.null_count():  # (a snapshot's narrow column)
        return np.abs(values.to_numpy().astype(np.float64))
    if values.dtype in _WIDE_INTS and not values.null_count():
        narrow = values.cast(pl.Int64, strict=False)  # null where a value needs more bits
        if not narrow.null_count():
            return np.abs(narrow.to_numpy().astype(np.float64))
    return values.abs().cast(pl.Float64).to_numpy()


def _abs_float_up_threads(values: pl.Series, bits: int) -> np.ndarray:
    """`_abs_float_up` of a long column, its slices on the engine's threads (same doubles).

    Each value is a function of its own row: slices converted side by side (Polars' casts and
    NumPy's ufuncs release the GIL) give the array one call gives.
    """
    n = len(values)
    workers = min(policy_threads(), n // POLICY_CHUNK)
    if workers <= 1:
        return _abs_float_up(values, bits)
    out = np.empty(n)
    step = -(-n // workers)

    def run(lo: int) -> None:
        out[lo:lo + step] = _abs_float_up(values.slice(lo, step), bits)

    with work_pool(workers) as pool:
        for _ in pool.map(run, range(0, n, step)):
            pass
    return out


class _Segments:
    """Sums over contiguous segments, each strictly left to right (``((v0 + v1) + v2) + ...``).

    Each addition rounds up where it is inexact (`tabdp._numeric.add_up`): a unit's total is
    never below the exact sum of its cells' losses (at most 2**-52 relative above per addition).

    NumPy's ``add.reduce``/``reduceat`` sum with several partial sums whose grouping depends
    on the length (and may on the build): a unit's total would not be the plain sum in its
    cells' order. Here each segment starts at its first element and, in step k, the k-th
    element of every segment longer than k is added; the segments longer than one are visited
    longest first, so step k touches a prefix of them (vector operations only). Steps stop at
    `STEPS`: the few segments longer than that are finished one by one by a loop over Python
    doubles (the same operations), so a unit with thousands of cells costs no numpy steps.

    Example:
        >>> _Segments(np.array([0, 3]), 4).sum(np.array([0.1, 0.2, 0.3, 5.0])).tolist()
        [0.6000000000000001, 5.0]
    """

    #: vector steps over the segments; longer segments are finished one by one
    STEPS = 64

    def __init__(self, starts: np.ndarray, n: int) -> None:
        """Segments starting at ``starts`` (increasing, the first 0) of an array of ``n``."""
        self.starts = starts
        counts = np.diff(np.append(starts, n))
        multi = np.flatnonzero(counts > 1)
        order = multi[np.argsort(-counts[multi], kind="stable")]
        self.multi = order
        self.multi_starts = starts[order]
        sorted_counts = counts[order]
        longest = int(sorted_counts[0]) if len(order) else 1
        # number of segments longer than k, for k = 1 .. min(longest, STEPS) - 1
        self.active = np.searchsorted(-sorted_counts, -np.arange(1, min(longest, self.STEPS)),
                                      side="left")
        # the k-th elements of the segments longer than k, step after step, in one gather
        # index: each step then reads a contiguous slice of one gathered array and updates a
        # prefix of the multi-element segments' running totals (no fancy index per step)
        self.step_index = (np.concatenate([self.multi_starts[:m] + k for k, m in
                                           enumerate(self.active, start=1)])
                           if len(self.active) else np.zeros(0, dtype=np.int64))
        self.step_at = np.concatenate([[0], np.cumsum(self.active)]).astype(np.int64)
        # segments longer than STEPS: (position among the multi-element segments, first
        # element left, end)
        n_long = int(np.searchsorted(-sorted_counts, -self.STEPS, side="right"))
        self.long = [(j, int(self.multi_starts[j]) + self.STEPS,
                      int(self.multi_starts[j] + sorted_counts[j])) for j in range(n_long)]

    def sum(self, v: np.ndarray) -> np.ndarray:
        """Each segment's left-to-right sum of ``v``."""
        v = np.asarray(v, dtype=np.float64)
        acc = v[self.starts]  # a new array (fancy index)
        if not len(self.multi):
            return acc
        run = v[self.multi_starts]  # the multi-element segments' totals, longest first
        terms = v[self.step_index]
        for k, m in enumerate(self.active):
            add_up_into(run, terms[self.step_at[k]:self.step_at[k + 1]], slice(0, int(m)))
        for j, lo, hi in self.long:  # run[j] holds the first STEPS elements' sum
            run[j] = _fold_up(float(run[j]), v[lo:hi].tolist())
        acc[self.multi] = run
        return acc

    def max(self, v: np.ndarray) -> np.ndarray:
        """Each segment's largest element of ``v`` (``numpy.maximum``: NaN propagates).

        The values of ``numpy.maximum.reduceat(v, starts)``, by the same steps as `sum`.
        """
        v = np.asarray(v, dtype=np.float64)
        acc = v[self.starts]
        if not len(self.multi):
            return acc
        run = v[self.multi_starts]
        terms = v[self.step_index]
        for k, m in enumerate(self.active):
            np.maximum(run[:m], terms[self.step_at[k]:self.step_at[k + 1]], out=run[:m])
        for j, lo, hi in self.long:
            if hi > lo:
                run[j] = np.maximum(run[j], np.maximum.reduce(v[lo:hi]))
        acc[self.multi] = run
        return acc


def _fold_up(total: float, terms: list[float]) -> float:
    """``total`` plus ``terms`` left to right, each addition `add_up`'s (Python doubles)."""
    up = 1.0 + 2.0**-52
    for b in terms:
        s = total + b
        bb = s - total
        err = (total - (s - bb)) + (b - bb)
        total = s * up if err > 0.0 else s
    return total


def per_unit(units: pl.Series, columns: dict[str, np.ndarray],
             is_max: Callable[[str], bool]) -> tuple[pl.Series, dict[str, np.ndarray]]:
    """Per-unit totals of per-(unit, cell) ``columns`` whose rows are sorted by unit then cell.

    Sums are taken left to right over a unit's cells (`_Segments`), maxima where
    ``is_max(name)``. Returns the units (in order) and the totals.

    Example:
        >>> u, t = per_unit(pl.Series([1, 1, 2]), {"rho": np.array([0.5, 0.25, 1.0])},
        ...                 lambda c: False)
        >>> u.to_list(), t["rho"].tolist()
        ([1, 2], [0.75, 1.0])
    """
    n = len(units)
    if not n:
        return units, dict(columns)
    starts = _unit_starts(units)
    first = units.gather(pl.Series(starts, dtype=pl.Int64))
    if len(starts) == n:  # one cell per unit
        return first, dict(columns)
    seg = _Segments(starts, n)
    return first, {c: seg.max(v) if is_max(c) else seg.sum(v)
                   for c, v in columns.items()}


def _unit_starts(units: pl.Series) -> np.ndarray:
    """Where each run of equal ids starts in ``units`` (sorted, nulls last; not empty).

    The first row always starts one: a null id is equal to the null before it
    (``ne_missing``), so a column of null ids only had no start at all and the release
    failed (review r80: in author mode, where rows of null ids are left out by rule, a
    dataset whose ids were all null raised DataFailure and its neighbour with one more
    unit did not).
    """
    new = units.ne_missing(units.shift(1)).to_numpy().copy()
    new[0] = True
    return np.flatnonzero(new)


class UnitOrder:
    """The order of (unit, cell) rows by unit id (nulls last), then cell, without moving them.

    Unit mode's losses are summed per unit left to right over its cells in key-set order (an
    order that depends on the ids and the key set only: reruns agree to the bit, whatever the
    input's row order). Rather than sorting every column of the (unit, cell) table, this holds
    the permutation that sorts it (``perm``: row positions in sorted order), the sorted units
    (one per unit) and the segments of each unit's rows: per-unit totals gather only the
    per-row arrays they sum (`reduce`). The table itself keeps the group-by's order (its other
    uses, cell totals and the audit, do not depend on it).

    Args:
        units: The unit id of each (unit, cell) row (pairs distinct).
        cells: The cell of each row (its position in the key set; null counts last).
        n_keys: The number of keys (cells are below it).

    Example:
        >>> o = UnitOrder(pl.Series([7, 3, 7]), pl.Series([2, 0, 1]), 3)
        >>> o.units.to_list(), o.perm.tolist()
        ([3, 7], [1, 2, 0])
        >>> o.reduce({"rho": np.array([0.5, 1.0, 0.25])}, lambda c: False)["rho"].tolist()
        [1.0, 0.75]
    """

    def __init__(self, units: pl.Series, cells: pl.Series, n_keys: int) -> None:
        """The order of the rows ``(units, cells)``."""
        n = len(units)
        self.n = n
        self.perm, codes = _unit_cell_perm(units, cells, n_keys)
        if not n:
            starts = np.zeros(0, dtype=np.int64)
            self.units = units
        elif codes is not None:  # unit - min of each sorted row (integer ids)
            new = np.empty(n, dtype=bool)
            new[0] = True

            def cmp(lo: int, hi: int) -> None:
                lo = max(lo, 1)
                np.not_equal(codes[lo:hi], codes[lo - 1:hi - 1], out=new[lo:hi])

            on_slices(n, cmp)
            starts = np.flatnonzero(new)
            lo = units.min()
            self.units = (pl.Series(units.name, codes[starts], dtype=pl.Int64) + lo).cast(
                units.dtype)
        else:
            ordered = units.gather(pl.Series(self.perm, dtype=pl.Int64))
            starts = _unit_starts(ordered)
            self.units = ordered.gather(pl.Series(starts, dtype=pl.Int64))
        #: where each unit's rows start in sorted order
        self.starts = starts
        self.seg = _Segments(starts, n) if n and len(starts) < n else None

    def reduce(self, columns: dict[str, np.ndarray],
               is_max: Callable[[str], bool]) -> dict[str, np.ndarray]:
        """Per-unit totals (aligned with `units`) of per-row ``columns`` (in the rows' order).

        Sums left to right over a unit's cells in key-set order (`_Segments`), maxima where
        ``is_max(name)``: the values `per_unit` gives on the sorted rows.

        Args:
            columns: Name → per-row float64 array.
            is_max: Whether a column is reduced by its maximum.

        Returns:
            Name → per-unit array.
        """
        return self.reduce_sorted({c: np.asarray(v)[self.perm] for c, v in columns.items()},
                                  is_max)

    def reduce_sorted(self, columns: dict[str, np.ndarray],
                      is_max: Callable[[str], bool]) -> dict[str, np.ndarray]:
        """`reduce` of per-row arrays already in sorted order (``v[perm]``).

        Args:
            columns: Name → per-row float64 array, in the order ``perm``.
            is_max: Whether a column is reduced by its maximum.

        Returns:
            Name → per-unit array.
        """
        if self.seg is None:  # one cell per unit
            return dict(columns)
        seg = self.seg

        def one(item: tuple[str, np.ndarray]) -> np.ndarray:
            return seg.max(item[1]) if is_max(item[0]) else seg.sum(item[1])

        items = list(columns.items())
        # the columns are independent and each one's steps are whole-array NumPy operations
        # on contiguous slices (which release the GIL): on the engine's threads side by side,
        # each giving the doubles of a sequential evaluation
        workers = min(policy_threads(), len(items)) if self.n >= POLICY_CHUNK else 1
        if workers <= 1:
            return {c: one((c, v)) for c, v in items}
        with work_pool(workers) as pool:
            return {c: r for (c, _), r in zip(items, pool.map(one, items), strict=True)}


def _unit_cell_perm(units: pl.Series, cells: pl.Series, n_keys: int
                    ) -> tuple[np.ndarray, np.ndarray | None]:
    """Row positions of (unit, cell) pairs sorted by unit (nulls last), then cell (nulls last).

    The pairs are distinct, so the order is total. Integer ids of at most 64 bits whose range
    allows it are sorted by one Int64 key ((unit - min) << c) | cell, with c the bits of
    ``n_keys`` (a null cell counts as ``n_keys``); where that key and the row position fit in
    63 bits together they are packed into one integer and the values sorted (several times
    cheaper than an argsort), else the key is argsorted. A unit's code is the key shifted
    right (no division). Other ids (text, 128-bit, nulls) take the multi-column argsort. Every
    path gives the same order. Returns the permutation and, for integer ids, each sorted row's
    ``unit - min(unit)`` (else None).
    """
    n = len(units)
    if not n:
        return np.zeros(0, dtype=np.int64), None
    dtype = units.dtype
    if dtype.is_integer() and dtype not in _WIDE_INTS and not units.null_count():
        lo: Any = units.min()
        hi: Any = units.max()
        cbits = max(n_keys, 1).bit_length()  # cells (and the null cell, n_keys) < 2**cbits
        span = (int(hi) - int(lo) + 1) << cbits
        if -(2**63) <= int(lo) and int(hi) < 2**63 and span < 2**62:
            bits = max(n - 1, 1).bit_length()
            if span < 2 ** (63 - bits):  # key · 2**bits + position < 2**63
                # ((unit - min) << cbits | cell) << bits | position, built by slices on the
                # engine's threads (integer NumPy arithmetic, exact), then sorted by Polars
                u = units.cast(pl.Int64).to_numpy()
                c = cells.fill_null(n_keys).cast(pl.Int64).to_numpy()
                packed = np.empty(n, dtype=np.int64)
                base = int(lo)

                def pack(a: int, z: int) -> None:
                    out = packed[a:z]
                    np.subtract(u[a:z], base, out=out)
                    np.left_shift(out, cbits, out=out)
                    np.bitwise_or(out, c[a:z], out=out)
                    np.left_shift(out, bits, out=out)
                    np.bitwise_or(out, np.arange(a, z, dtype=np.int64), out=out)

                on_slices(n, pack)
                packed = pl.Series(packed).sort().to_numpy()
                perm, codes = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)

                def split(lo: int, hi: int) -> None:  # position and unit code of each row
                    np.bitwise_and(packed[lo:hi], (1 << bits) - 1, out=perm[lo:hi])
                    np.right_shift(packed[lo:hi], bits + cbits, out=codes[lo:hi])

                on_slices(n, split)
                return perm, codes
            key = (((units.cast(pl.Int64) - int(lo)) * (1 << cbits))
                   + cells.fill_null(n_keys).cast(pl.Int64))
            perm = key.arg_sort().to_numpy().astype(np.int64, copy=False)
            return perm, key.to_numpy()[perm] >> cbits
    frame = pl.DataFrame({"u": units, "c": cells})
    perm = frame.select(pl.arg_sort_by(["u", "c"], nulls_last=[True, True])).to_series() \
        .to_numpy().astype(np.int64, copy=False)
    return perm, None


#: Rows per chunk of the per-row policy evaluation: its temporaries stay small and are reused
#: by the allocator (one array of a few million doubles is a fresh mapping, page-faulted in
#: at every step: most of the time of a whole-column evaluation at 5M rows). 131,072 rows
#: (1 MiB arrays, served from the heap once `tabdp._alloc.warm_heap` ran): a streaming batch
#: (about 122,000 rows) is one chunk; at 10M rows 6% less time than 65,536 in streaming row
#: mode, the same in memory and in unit mode (docs/performance.md, "Stop 54").
POLICY_CHUNK = 1 << 17


def _row_policy(inside: pl.DataFrame, policy: _Policy, kind: str, bits: dict[str, int],
                ms: list[str], perm: np.ndarray | None = None
                ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """One currency's size and policy values (ρ, ε[, ε_a, δ_a]) for every row of ``inside``.

    Evaluated in chunks of `POLICY_CHUNK` rows: every value is a function of its own row only
    (`_size_and_delta`, `_policy_values`), so the doubles are those of one evaluation. With
    ``perm`` (unit mode's `UnitOrder`) the rows are read in that order and the values come out
    in it: each row's contribution is gathered once (a float array), not every result.
    """
    if perm is not None:
        if kind == "count":
            base = {_ROWS: inside[_ROWS].cast(pl.Float64).to_numpy()}
        else:
            base = {m: _abs_float_up_threads(inside[m], bits[m]) for m in ms}
        signs: dict[str, np.ndarray] = {}

        def sign(m: str) -> np.ndarray:  # read only by a joint policy
            if m not in signs:
                signs[m] = np.sign(inside[m].cast(pl.Float64).to_numpy())
            return signs[m]

        def at(idx: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
            if kind == "count":
                size = base[_ROWS][idx]
                delta = size
            else:
                size, delta = _size_and_delta(policy, ms, {m: base[m][idx] for m in ms},
                                              lambda m: sign(m)[idx])
            return size, _policy_values(policy, kind, delta)

        def chunk(lo: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
            assert perm is not None
            return at(perm[lo:lo + POLICY_CHUNK])
    else:
        def chunk(lo: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
            return _chunk_policy(inside.slice(lo, POLICY_CHUNK), policy, kind, bits, ms)

    def flat(lo: int) -> tuple[np.ndarray, ...]:
        size, vals = chunk(lo)
        return (size, *vals)

    out = _by_chunks(inside.height, flat)
    return out[0], tuple(out[1:])


def _chunk_policy(part: pl.DataFrame, policy: _Policy, kind: str, bits: dict[str, int],
                  ms: list[str]) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """One currency's size and policy values for the rows of ``part`` (`_row_policy`)."""
    if kind == "count":
        size = part[_ROWS].cast(pl.Float64).to_numpy()
        delta = size
    else:
        mags = {m: _abs_float_up(part[m], bits[m]) for m in ms}
        size, delta = _size_and_delta(
            policy, ms, mags, lambda m: np.sign(part[m].cast(pl.Float64).to_numpy()))
    return size, _policy_values(policy, kind, delta)


def _by_chunks(n: int, chunk: Callable[[int], tuple[np.ndarray, ...]]
               ) -> tuple[np.ndarray, ...]:
    """Arrays of ``n`` rows computed by `POLICY_CHUNK` rows, ``chunk(lo)`` from row ``lo``.

    ``chunk`` gives the arrays' values for its rows, each a function of its own row only:
    the chunks run on the engine's threads side by side, each written to its own slice (the
    doubles of one sequential evaluation). At most one chunk: ``chunk(0)``'s arrays.
    """
    if n <= POLICY_CHUNK:
        return chunk(0)
    first = chunk(0)
    out = tuple(np.empty(n) for _ in first)

    def put(lo: int, vals: tuple[np.ndarray, ...]) -> None:
        hi = lo + len(vals[0])
        for full, v in zip(out, vals, strict=True):
            full[lo:hi] = v

    def run(lo: int) -> None:
        put(lo, chunk(lo))

    put(0, first)
    rest = range(POLICY_CHUNK, n, POLICY_CHUNK)
    # the chunks are independent (each value a function of its own row) and NumPy's
    # ufuncs release the GIL: the engine's threads evaluate them side by side, each
    # writing its own slice (the doubles are those of one sequential evaluation)
    workers = min(policy_threads(), len(rest))
    if workers <= 1:
        for lo in rest:
            run(lo)
    else:
        with work_pool(workers) as pool:
            for _ in pool.map(run, rest):
                pass
    return out


#: The kinds of per-unit losses, in `Charges.totals`' order (``eps_a``, ``delta_a``: approx).
_KINDS = ("rho", "epsilon", "size", "eps_a", "delta_a")


def _row_totals(inside: pl.DataFrame, policy: _Policy, kind: str, bits: dict[str, int],
                currencies: list[tuple[str, list[str]]]) -> dict[str, np.ndarray]:
    """Row mode: each row's losses totalled over ``currencies`` (two or more), chunk by chunk.

    The doubles `Charges.losses` adds up when every row is admitted (each addition rounded up,
    left to right in currency order; sizes: the maximum), computed while each chunk's
    per-currency values are in cache: no array of every row per currency and kind.
    """
    approx = policy.approx

    def chunk(lo: int) -> tuple[np.ndarray, ...]:
        part = inside.slice(lo, POLICY_CHUNK)
        got = [_chunk_policy(part, policy, kind, bits, ms) for _, ms in currencies]
        # (the order and operations of `Charges.losses`' ``total``)
        size = np.maximum(got[0][0], got[1][0])
        for g in got[2:]:
            np.maximum(size, g[0], out=size)
        sums = []
        for j in range(4 if approx else 2):
            vs = [np.asarray(g[1][j], dtype=np.float64) for g in got]
            t = add_up(vs[0], vs[1])
            for v in vs[2:]:
                add_up_into(t, v)
            sums.append(t)
        return (sums[0], sums[1], size, *sums[2:])

    out = _by_chunks(inside.height, chunk)
    return dict(zip(_KINDS, out, strict=False))


def on_slices(n: int, fn: Callable[[int, int], None]) -> None:
    """``fn(lo, hi)`` over consecutive slices covering ``range(n)``, on the engine's threads.

    `tabdp._numeric.on_slices` on `policy_threads` threads: each call writes its own slice,
    so the result is that of one call ``fn(0, n)``. Short arrays: one call.

    Args:
        n: The length covered.
        fn: Called with each slice's bounds (``0 <= lo < hi <= n``).

    Example:
        >>> out = np.zeros(5)
        >>> def f(lo, hi): out[lo:hi] = np.arange(lo, hi)
        >>> on_slices(5, f); out.tolist()
        [0.0, 1.0, 2.0, 3.0, 4.0]
    """
    _numeric.on_slices(n, fn, policy_threads())


def policy_threads() -> int:
    """Threads evaluating the per-row policy's chunks: `tabdp._numeric.work_threads`.

    Returns:
        The number of threads (≥ 1).

    Example:
        >>> policy_threads() >= 1
        True
    """
    return work_threads()


def _constant_rows(inside: pl.DataFrame, policy: _Policy, kind: str
                   ) -> tuple[np.ndarray, tuple[np.ndarray, ...]] | None:
    """Row mode's count whose rows all hold the same row count: its per-row size and losses.

    Every row's Δ is that count, so every row's size, ρ and ε (and ε_a, δ_a) are one value
    each: the values `_policy_values` writes into arrays of every row (``np.full`` of the
    policy at the first row's Δ), here read-only views of that value
    (``numpy.broadcast_to``: no memory per row). ``None`` for a sum, no rows, or rows of
    different counts.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> df = pl.DataFrame({_ROWS: [1, 1, 1]})
        >>> size, (rho, eps) = _constant_rows(df, _Policy(Gaussian(1.0), []), "count")
        >>> size.tolist(), rho.tolist(), rho.flags.writeable
        ([1.0, 1.0, 1.0], [0.5, 0.5, 0.5], False)
    """
    n = inside.height
    if kind != "count" or not n:
        return None
    rows = inside[_ROWS]
    if rows.null_count() or rows.min() != rows.max():
        return None
    delta = rows.head(1).cast(pl.Float64).to_numpy()
    vals = tuple(np.broadcast_to(np.float64(np.asarray(v)[0]), (n,))
                 for v in policy(delta))
    return np.broadcast_to(np.float64(delta[0]), (n,)), vals


def _charges(inside: pl.DataFrame, uid: str, row_mode: bool, policy: _Policy, kind: str,
             bits: dict[str, int], cells: bool = True, order: UnitOrder | None = None,
             totals: bool = False, constant: bool = False, ids: np.ndarray | None = None
             ) -> tuple[Charges, np.ndarray, np.ndarray]:
    """Per (unit, currency) losses of the release, and each (unit, cell) row's total ρ and size.

    The size of a (unit, cell) row is its largest contribution over the release's currencies
    (with ``cells=False`` the two per-row arrays are left empty: the cell audit is off).

    In row mode every unit is one row in one cell: the per-row arrays are the charges. In unit
    mode they are summed per unit (sizes: the largest contribution) through ``order``, the
    rows' `UnitOrder` (computed here if not given): each row's contribution is read in that
    order, so the per-row losses come out sorted and the charges sorted by unit. The per-row
    ρ and size are returned in the rows' order where ``cells`` (the cell audit), else
    empty.

    ``totals`` (row mode; for a caller whose filter reads no per-currency array: no budget,
    no lifetime ledger): with several currencies and no cell audit, the rows' totals over the
    currencies are computed chunk by chunk (`_row_totals`, `Charges.totals`) and each
    currency's arrays only if something reads them (`Deferred`: the same doubles).

    ``constant`` (row mode; for a caller whose readers of the charges and losses never write
    them in place): a count whose rows all count alike (each row one, its Δ) charges every row
    the same ρ, ε and size, held as read-only views of one value (`_constant_rows`: the
    doubles `_policy_values` gives, without three arrays of every row written).

    ``ids`` (row mode): ``inside``'s row ids as Int64 when the caller holds them (`row_ids`).
    """
    n = inside.height
    curs = policy.currencies()
    if row_mode and totals and not cells and len(curs) > 1:
        got: dict[str, tuple[np.ndarray, tuple[np.ndarray, ...]]] = {}
        of = dict(curs)

        def lazily(k: str) -> Callable[[str], np.ndarray]:
            def compute(cur: str) -> np.ndarray:
                if cur not in got:
                    got[cur] = _row_policy(inside, policy, kind, bits, of[cur])
                size, vals = got[cur]
                # (vals: ρ, ε[, ε_a, δ_a], `_policy_values`)
                return size if k == "size" else vals[("rho", "epsilon", "eps_a",
                                                      "delta_a").index(k)]
            return compute

        names = [c for c, _ in curs]
        return (Charges(inside[ROW_ID].cast(pl.Int64).to_numpy() if ids is None else ids,
                        Deferred(names, lazily("rho")),
                        Deferred(names, lazily("epsilon")), Deferred(names, lazily("size")),
                        policy.guarantee,
                        Deferred(names, lazily("eps_a")) if policy.approx else None,
                        Deferred(names, lazily("delta_a")) if policy.approx else None,
                        totals=_row_totals(inside, policy, kind, bits, curs)),
                np.zeros(0), np.zeros(0))
    perm: np.ndarray | None = None
    if not row_mode:
        if order is None:
            top: Any = inside[_CELL].max()
            order = UnitOrder(inside[uid], inside[_CELL], int(top or 0) + 1)
        perm = order.perm
    cell_rho = np.zeros(n if cells else 0)
    cell_size = np.zeros(n if cells else 0)
    cols: dict[str, dict[str, np.ndarray]] = {k: {} for k in
                                              ("rho", "epsilon", "size", "eps_a", "delta_a")}
    for i, (cur, ms) in enumerate(policy.currencies()):
        fixed = _constant_rows(inside, policy, kind) if row_mode and constant else None
        size, vals = fixed if fixed is not None else _row_policy(inside, policy, kind, bits,
                                                                 ms, perm)
        if cells:  # a (unit, cell)'s ρ over currencies, rounded up (never below the exact sum)
            cell_rho = np.array(vals[0], dtype=np.float64) if i == 0 else add_up(cell_rho,
                                                                                 vals[0])
            np.maximum(cell_size, size, out=cell_size)
        cols["rho"][cur], cols["epsilon"][cur], cols["size"][cur] = vals[0], vals[1], size
        if policy.approx:
            cols["eps_a"][cur], cols["delta_a"][cur] = vals[2], vals[3]
    kinds = ["rho", "epsilon", "size", *(["eps_a", "delta_a"] if policy.approx else [])]
    if row_mode:
        units: Any = inside[ROW_ID].cast(pl.Int64).to_numpy() if ids is None else ids
    else:
        # each unit's losses are summed left to right over its cells in key-set order
        # (UnitOrder, _Segments), an order that depends on the ids and the key set only, never
        # on the input's row order (reruns agree to the bit)
        assert order is not None and perm is not None
        units = order.units
        per = order.reduce_sorted({f"{k}\0{c}": v for k in kinds for c, v in cols[k].items()},
                                  lambda name: name.startswith("size\0"))
        cols = {k: {c: per[f"{k}\0{c}"] for c in cols[k]} for k in kinds}
        if cells:  # back in the rows' order
            rho_rows, size_rows = np.empty(n), np.empty(n)
            rho_rows[perm], size_rows[perm] = cell_rho, cell_size
            cell_rho, cell_size = rho_rows, size_rows
        else:
            cell_rho, cell_size = np.zeros(0), np.zeros(0)
    ch = Charges(units, cols["rho"], cols["epsilon"], cols["size"], policy.guarantee,
                 cols["eps_a"] if policy.approx else None,
                 cols["delta_a"] if policy.approx else None)
    return ch, cell_rho, cell_size


def _cell_stats(inside: pl.DataFrame, by: list[str], rho: np.ndarray, size: np.ndarray,
                keys: KeySet | None = None, dtypes: dict[str, Any] | None = None
                ) -> pl.DataFrame:
    """Per released cell with data: the worst unit loss and size, and the number of units.

    Columns: the key columns, the largest loss of one unit there (``worst_rho``), the largest
    contribution (``worst_size``) and the number of contributing units (``units``). Rows
    without key columns (unit mode's snapshot) are grouped by cell, whose keys are then read
    from ``keys`` in the data's ``dtypes``.
    """
    if by and not set(by) <= set(inside.columns):
        assert keys is not None and dtypes is not None
        return cell_stats_keys([cell_worst(inside[_CELL], rho, size)], by, keys, dtypes)
    frame = inside.select(by).with_columns(worst_rho=pl.Series(rho, dtype=pl.Float64),
                                           worst_size=pl.Series(size, dtype=pl.Float64))
    aggs = [pl.col("worst_rho").max(), pl.col("worst_size").max(),
            pl.len().cast(pl.Int64).alias("units")]
    if not by:
        return frame.select(*aggs) if frame.height else pl.DataFrame(
            {"worst_rho": [], "worst_size": [], "units": []},
            schema={"worst_rho": pl.Float64, "worst_size": pl.Float64, "units": pl.Int64})
    # ties broken by the keys (the group-by's order is the engine's, not reproducible)
    return frame.group_by(by).agg(*aggs).sort(
        ["worst_rho", *by], descending=[True, *[False] * len(by)], nulls_last=True)


def cell_worst(cells: pl.Series, rho: np.ndarray, size: np.ndarray) -> pl.DataFrame:
    """Per cell index: the worst (unit, cell) loss and size there and the number of units.

    Args:
        cells: The cell index (``__cell``) of each (unit, cell) row.
        rho: Each row's ρ.
        size: Each row's size.

    Returns:
        ``__cell``, ``worst_rho``, ``worst_size``, ``units`` (a partial of `cell_stats_keys`).

    Example:
        >>> cell_worst(pl.Series([0, 0]), np.array([1.0, 2.0]), np.ones(2))["units"].to_list()
        [2]
    """
    return pl.DataFrame({_CELL: cells, "worst_rho": pl.Series(rho, dtype=pl.Float64),
                         "worst_size": pl.Series(size, dtype=pl.Float64)}).group_by(
        _CELL).agg(pl.col("worst_rho").max(), pl.col("worst_size").max(),
                   pl.len().cast(pl.Int64).alias("units"))


def cell_stats_keys(parts: list[pl.DataFrame], by: list[str], keys: KeySet,
                    dtypes: dict[str, Any]) -> pl.DataFrame:
    """The per-cell audit (`_cell_stats`) from `cell_worst` partials over disjoint units.

    Maxima of the maxima, sums of the unit counts (each unit is in one partial); sorted by the
    worst loss, ties by key-set order; the key columns read from ``keys`` in ``dtypes``.

    Args:
        parts: `cell_worst` frames (one per partition of the units).
        by: The key columns.
        keys: The key set.
        dtypes: The key columns' dtypes in the data.

    Returns:
        The key columns, ``worst_rho``, ``worst_size``, ``units``.

    Example:
        >>> k = KeySet.from_dict(c=["a", "b"])
        >>> p = [cell_worst(pl.Series([1]), np.ones(1), np.ones(1))] * 2
        >>> cell_stats_keys(p, ["c"], k, {"c": pl.String}).row(0)
        ('b', 1.0, 1.0, 2)
    """
    per = pl.concat(parts).group_by(_CELL).agg(
        pl.col("worst_rho").max(), pl.col("worst_size").max(), pl.col("units").sum()).sort(
        ["worst_rho", _CELL], descending=[True, False])
    kp = keys.to_polars()
    return per.select(
        *[kp[c].gather(per[_CELL]).cast(dtypes[c], strict=False).alias(c) for c in by],
        "worst_rho", "worst_size", "units")


# -- steps shared by every engine (the Spark engine, tabdp.frame._spark, calls them too) ------
class _Prepared(NamedTuple):
    measures: list[str]
    by: list[str]
    mechanism: Mechanism
    level: float
    released: list[str]
    grids: dict[str, Any]
    max_cells: int | None
    max_rows: int | None


def _prepare_release(kind: str, measures: Any, by: Any, keys: Any, mechanism: Any,
                     session: Any, level: float, nulls: str, grid: Any, max_cells: Any,
                     max_rows: Any, stacklevel: int | None = None) -> _Prepared:
    """Argument checks of a release (no data read, no session touched)."""
    measure_list = _as_list(measures, "columns") if kind == "sum" else []
    by_list = _as_list(by, "by")
    if kind == "count":
        mechanism = count_mechanism(mechanism, grid)
    level = _check_args(kind, measure_list, by_list, keys, mechanism, session, level, nulls)
    # Usability warnings: public parameters only, before any data is read.
    from tabdp.planning import ACCESSOR_CV_FLAG, warn_usability

    warn_usability(mechanism, cv_flag=ACCESSOR_CV_FLAG, context=f"dp.{kind}",
                   stacklevel=_caller_stacklevel() if stacklevel is None else stacklevel)
    released = measure_list if kind == "sum" else ["count"]
    grids = _check_grid(grid, released)
    return _Prepared(measure_list, by_list, mechanism, level, released, grids,
                     _check_bound("max_cells", max_cells), _check_bound("max_rows", max_rows))


def _release_rules(sess: Session, kind: str, mechanism: Mechanism, nulls: str,
                   negatives: str, measure_list: list[str]) -> tuple[_Rules, _Policy]:
    """The data rules and the policy of a release; budget currencies checked (no data read)."""
    negative_rule = _check_rules(sess, kind, mechanism, nulls, negatives, bool(measure_list))
    rules = _Rules(nulls if measure_list else "error", negative_rule, sess.mode)
    policy = _Policy(mechanism, measure_list if kind == "sum" else [])
    if sess.budget is not None and sess.budget.per_currency:
        clash = sorted(m for m in measure_list if m == ROWS_CURRENCY or "+" in m)
        if clash:
            raise InvalidParameterError(
                f"measure column(s) {clash} are named like a budget currency of another kind "
                f"({ROWS_CURRENCY!r} is the currency of counts, medians and quantiles; 'a+b' "
                "that of a joint mechanism over a and b), so a curve budget would mix their "
                "losses.\nHint: rename the column(s) before the release, e.g. "
                "df.rename({'rows': 'n_rows'}).")
        for cur, _ in policy.currencies():
            sess.budget.curve_for(cur)  # a missing curve is a data-free error
    return rules, policy


def _output_dtypes(op: _Opened, sess: Session, measures: list[str]) -> dict[str, Any]:
    """The input dtypes the output follows (keys; integer measures come back as integers).

    A pandas frame in author mode lends no measure dtype: pandas makes an integer column float64
    as soon as one record holds a missing value, so the output dtype would reveal it.
    """
    schema = dict(op.schema)
    if op.backend == "pandas" and sess.mode == "author":
        return {c: t for c, t in schema.items() if c not in measures}
    return schema


def _noisy_table(full: pl.DataFrame, kind: str, released: list[str], bits: dict[str, int],
                 mechanism: Mechanism, policy: _Policy, sess: Session, level: float,
                 grids: dict[str, Any], keys: KeySet, by_list: list[str], *,
                 form: str = "wide", cv: bool = False,
                 key_dtypes: dict[str, Any] | None = None
                 ) -> tuple[pl.DataFrame, dict[str, int], dict[str, Any]]:
    """Draw the noise on the exact totals ``full`` (one row per key, in key order).

    ``key_dtypes``: the input's schema (key columns keep their dtypes; integer measures come
    back as integers on an integral grid). Returns the output table (shaped by
    `tabdp.frame._output.assemble`), the exact-rounding fallbacks and the grids used.
    """
    out_cols: dict[str, Any] = {}
    fallbacks: dict[str, int] = {}
    grid_used: dict[str, Any] = {}
    joint = kind == "sum" and policy.joint
    for m in released:
        col = m if kind == "sum" else _ROWS
        numer = full[col].fill_null(0)
        truth = ExactTotals(numer, bits.get(m, 0) if kind == "sum" else 0)
        # A joint (vector) mechanism releases each measure with its own scaled noise.
        mech_m = mechanism.measure_mechanism(m) if joint else mechanism  # type: ignore[attr-defined]
        rv = mech_m.release_table(truth, sess.rng, level, grid=grids[m])
        out_cols[m] = rv.estimate
        out_cols[f"{m}_sd"] = rv.sd
        out_cols[f"{m}_moe"] = rv.moe
        out_cols[f"{m}_lower"] = rv.lower
        out_cols[f"{m}_upper"] = rv.upper
        fallbacks[m] = int(rv.fallbacks)
        grid_used[m] = rv.grid
    dtypes = key_dtypes or {}
    key_frame = keys.to_polars().select(by_list) if by_list else None
    out = assemble(key_frame, [
        Measure(m, out_cols[m], out_cols[f"{m}_sd"], out_cols[f"{m}_moe"],
                out_cols[f"{m}_lower"], out_cols[f"{m}_upper"], integral=is_integral_release(
                    mechanism.measure_mechanism(m) if joint  # type: ignore[attr-defined]
                    else mechanism, grids[m],
                    kind == "count" or (m in dtypes and integer_dtype(dtypes[m])
                                        and binding.of(sess).declares_integer(m))))
        for m in released], form=form, cv=cv, key_dtypes=dtypes)
    return out, fallbacks, grid_used


def _rule_counts(counts: dict[str, int], measure_list: list[str], nulls: str,
                 rules: _Rules) -> dict[str, int]:
    """The confidential counts of values the declared rules handled."""
    return {
        **{f"missing_values_{nulls}:{m}": counts.get(f"missing:{m}", 0)
           for m in measure_list if nulls != "error"},
        **{f"values_clamped_to_2^64:{m}": counts.get(f"big:{m}", 0)
           for m in measure_list if counts.get(f"big:{m}", 0)},
        **{f"negative_values_{rules.negatives}:{m}": counts.get(f"neg:{m}", 0)
           for m in measure_list if rules.negatives != "error"},
    }


def left_out_counts(kind: str, measures: Sequence[str], bits: Mapping[str, int],
                    totals: Mapping[str, int], left: Mapping[str, int], rows_left: int
                    ) -> dict[str, Any]:
    """CONFIDENTIAL: what the individual filter left out of a release, from exact totals.

    Every engine computes, over the rows in released cells (after the contribution bounds),
    each measure's exact fixed-point total and the part of it that units left out by the
    budget contributed, and the rows of those units; this turns them into the confidential
    entries of the release (one definition for every engine). A measure's share is the left-out
    part over the total (for a zero total: ``0.0`` when nothing was left out, else infinite),
    computed from the exact integers.

    Args:
        kind: ``"sum"`` or ``"count"`` (counts report rows only).
        measures: The summed measures.
        bits: Fixed-point scale bits per measure.
        totals: Measure → exact fixed-point total over the rows in released cells.
        left: Measure → exact fixed-point total of the left-out units' contributions.
        rows_left: Rows (in released cells) of units left out of the release.

    Returns:
        ``rows_left_out_by_budget`` and ``left_out_by_budget`` (measure → ``left_out``,
        ``total`` and ``share``).

    Example:
        >>> left_out_counts("sum", ["x"], {"x": 0}, {"x": 40}, {"x": 10}, 1)
        {'rows_left_out_by_budget': 1, 'left_out_by_budget': {'x': {'left_out': 10.0, \
'total': 40.0, 'share': 0.25}}}
    """
    shares: dict[str, dict[str, float]] = {}
    if kind == "sum":
        for m in measures:
            tot, lo = int(totals.get(m) or 0), int(left.get(m) or 0)
            scale = 2.0 ** -bits.get(m, 0)
            # Python's int / int is correctly rounded: the share is exact to the last bit
            shares[m] = {"left_out": float(lo) * scale, "total": float(tot) * scale,
                         # a zero net total (a signed measure whose contributions cancel)
                         # with a part left out: an infinite share (review r80: 0.0 passed
                         # budget.max_left_out whatever was left out)
                         "share": lo / tot if tot else (float("inf") if lo else 0.0)}
    return {"rows_left_out_by_budget": int(rows_left), "left_out_by_budget": shares}
