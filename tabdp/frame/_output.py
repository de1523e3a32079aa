"""One output model for the ``.dp`` accessor and the release CLI: wide and long forms.

Both forms hold the same numbers under the same names (docs/release-workflow.md, "Output
model"):

* **long**: the key columns, then ``measure, estimate, sd, moe, lower, upper, cv, flag``; one
  row per cell and measure, measures in release order, cells in key-set order;
* **wide**: the key columns, then per measure ``m`` the columns ``m, m_sd, m_moe, m_lower,
  m_upper`` and, on request (``cv=True`` in the accessor; always in the CLI's wide files),
  ``m_cv, m_flag``; one row per cell.

``cv = sd / |estimate|`` (``inf`` for an estimate of 0 with a positive sd; null where ``sd`` is
not finite) and ``flag`` (codes ``C``: ``cv >= cv_flag``, ``N``: negative estimate, ``X``: no
finite variance, ``L``: an Int64 estimate clamped to the Int64 range; the release workflow adds
``S`` for withheld cells) are computed from the noisy estimate and the public sd only:
post-processing, no privacy cost.

Dtypes: key columns take the dtype of the input frame's key columns (decided from the two
schemas and the public key set, never from data values: an Enum's, a Categorical's or a
pandas categorical's categories are the key set's values, in every mode, as the input's may
have been taken from the data); an estimate is ``Int64`` when the
release is on a whole-number grid of an integer query (counts, integer measures), ``Float64``
otherwise; ``sd``, ``moe``, ``lower``, ``upper``, ``cv`` are ``Float64`` and ``flag`` String.
The dtype never follows the values: a noisy Int64 estimate beyond ``±(2**63 - 1024)`` is
published clamped to that bound with flag ``L`` (``cv``, ``lower`` and ``upper`` are those of the
unclamped estimate); a NaN estimate is null, flagged ``L`` too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tabdp._numeric import INT64_CLAMP, integer_dtype
from tabdp.exceptions import InvalidParameterError
from tabdp.frame.backends import pandas_exact

__all__ = ["FORMS", "LONG_COLUMNS", "WIDE_SUFFIXES", "STAT_SUFFIXES", "Measure", "check_form",
           "coefficient_of_variation", "flag_codes", "assemble", "to_native", "long_to_wide",
           "integer_grid", "integer_dtype", "is_integral_release", "check_key_names"]

#: Output forms of the accessor and the CLI.
FORMS = ("wide", "long")
#: Columns of the long form after the key columns.
LONG_COLUMNS = ("measure", "estimate", "sd", "moe", "lower", "upper", "cv", "flag")
#: Wide-form suffixes of a measure's columns (always present).
WIDE_SUFFIXES = ("", "_sd", "_moe", "_lower", "_upper")
#: Wide-form suffixes of the reliability columns (accessor: with ``cv=True``).
STAT_SUFFIXES = ("_cv", "_flag")
#: Largest whole number an Int64 estimate holds (the largest double below 2**63); an estimate
#: beyond ±_INT64_MAX is clamped to it and flagged ``L``.
_INT64_MAX = float(INT64_CLAMP)


def check_form(form: Any, owner: str = "form") -> str:
    """Check an output form (``"wide"`` or ``"long"``).

    Args:
        form: The value received.
        owner: Name of the argument in messages.

    Returns:
        The form.

    Raises:
        InvalidParameterError: For anything else.

    Example:
        >>> check_form("long")
        'long'
    """
    if not isinstance(form, str) or form not in FORMS:
        raise InvalidParameterError(
            f"{owner} must be one of {FORMS}; got {form!r}.\nHint: form='wide' gives one row "
            "per cell (m, m_sd, m_moe, ...), form='long' one row per cell and measure "
            "(measure, estimate, sd, moe, lower, upper, cv, flag).")
    return form


def check_key_names(keys: Sequence[str], outputs: Sequence[str], what: str) -> None:
    """Refuse key columns that have the name of an output column (the key would be overwritten).

    Args:
        keys: The group-by column names.
        outputs: The output columns' names (they appear in the message).
        what: The release's outputs as the message names them, e.g. ``"this sum (outputs:
            [...])"``.

    Raises:
        InvalidParameterError: If a key column has the name of an output column.

    Example:
        >>> check_key_names(["c"], ["x", "x_sd"], "the wide form")   # no clash: nothing
        >>> try:
        ...     check_key_names(["x"], ["x", "x_sd"], "the wide form")
        ... except InvalidParameterError as e:
        ...     print(str(e).splitlines()[0][:58])
        group-by column(s) ['x'] have the name of an output column
    """
    clash = sorted(set(outputs) & set(keys))
    if clash:
        raise InvalidParameterError(
            f"group-by column(s) {clash} have the name of an output column of {what}; the key "
            "would be overwritten in the result.\nHint: rename the key column(s) (and the key "
            "set's) before the release.")


def coefficient_of_variation(estimate: Any, sd: Any) -> np.ndarray:
    """``sd / |estimate|`` from public values only; NaN where ``sd`` is not finite.

    An estimate of 0 has ``cv = inf`` when its sd is positive (0 when the sd is 0).

    Args:
        estimate: Noisy estimates.
        sd: Their public standard deviations.

    Returns:
        The coefficients of variation (NaN: undefined, published as null).

    Example:
        >>> coefficient_of_variation([10.0, 0.0, 5.0], [1.0, 1.0, float("inf")]).tolist()
        [0.1, inf, nan]
    """
    est = np.asarray(estimate, dtype=np.float64)
    s = np.asarray(sd, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = np.where(est != 0.0, s / np.abs(est), np.where(s > 0, np.inf, 0.0))
    return np.where(np.isfinite(s), cv, np.nan)


def flag_codes(estimate: Any, sd: Any, cv: Any, *, cv_flag: float | None,
               suppressed: Any = None, clamped: Any = None) -> np.ndarray:
    """Publication flags per cell: ``C`` (cv ≥ cv_flag), ``N`` (negative), ``S``, ``X``, ``L``.

    Codes are concatenated in the order C, N, S, X, L (``""`` when none); see
    [`tabdp.release.publish.FLAG_CODES`][tabdp.release.FLAG_CODES]. ``L`` (an Int64 estimate
    outside the Int64 range, published clamped to it) comes from the ``.dp`` accessor and
    sessions; the release workflow finds it in the estimate column (`tabdp.release.publish`).

    Args:
        estimate: Noisy estimates (before any clamping).
        sd: Public standard deviations.
        cv: Coefficients of variation (`coefficient_of_variation`; NaN: undefined).
        cv_flag: Flag threshold (``None``: no ``C`` flags).
        suppressed: Optional boolean mask of withheld cells (``S``).
        clamped: Optional boolean mask of Int64 estimates outside the Int64 range (``L``).

    Returns:
        An array of strings.

    Example:
        >>> flag_codes([10.0, -1.0, 3.0], [1.0, 1.0, float("inf")],
        ...            [0.1, 1.0, float("nan")], cv_flag=0.3).tolist()
        ['', 'CN', 'X']
        >>> flag_codes([1e19], [1.0], [1e-19], cv_flag=0.3, clamped=[True]).tolist()
        ['L']
    """
    est = np.asarray(estimate, dtype=np.float64)
    c = np.asarray(cv, dtype=np.float64)
    finite_sd = np.isfinite(np.asarray(sd, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        flag_c = (np.zeros(est.shape, bool) if cv_flag is None
                  else finite_sd & ~np.isnan(c) & (c >= cv_flag))
        flag_n = est < 0.0
    flag_s = np.zeros(est.shape, bool) if suppressed is None else np.asarray(suppressed, bool)
    flag_l = np.zeros(est.shape, bool) if clamped is None else np.asarray(clamped, bool)
    codes = np.full(est.shape, "", dtype=object)
    for code, mask in (("C", flag_c), ("N", flag_n), ("S", flag_s), ("X", ~finite_sd),
                       ("L", flag_l)):
        codes = np.where(mask, codes + code, codes)
    return codes.astype(str)


@dataclass(frozen=True)
class Measure:
    """One released measure: its public arrays, one value per key (key-set order).

    Attributes:
        name: Output name of the measure (``payroll``, ``count``, ``pay_median``).
        estimate: Noisy estimates.
        sd: Standard deviations.
        moe: Margins of error.
        lower: Lower interval ends.
        upper: Upper interval ends.
        integral: The estimate is a whole number by construction (public: an integer query on
            a whole-number grid); it is returned as Int64, clamped to ``±(2**63 - 1024)``
            (flag ``L``).
    """

    name: str
    estimate: Any
    sd: Any
    moe: Any
    lower: Any
    upper: Any
    integral: bool = False


def _clamped(m: Measure) -> np.ndarray | None:
    """Cells of an Int64 estimate outside the Int64 range (or NaN): flag ``L``; None: none."""
    if not m.integral:
        return None
    est = np.asarray(m.estimate, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = ~(np.abs(est) <= _INT64_MAX)  # NaN included
    return out if out.any() else None


def _estimate_series(name: str, m: Measure) -> pl.Series:
    est = np.asarray(m.estimate, dtype=np.float64)
    if not m.integral:
        return pl.Series(name, est, dtype=pl.Float64)
    # whole numbers by construction, in the declared Int64 whatever the values: beyond the Int64
    # range (a public bound) the noisy value is clamped to it (flag L), a NaN is null
    if _clamped(m) is None:
        return pl.Series(name, est, dtype=pl.Float64).cast(pl.Int64)
    nan = np.isnan(est)
    fit = np.clip(np.where(nan, 0.0, est), -_INT64_MAX, _INT64_MAX)
    out = pl.Series(name, fit, dtype=pl.Float64).cast(pl.Int64)
    return out.scatter(np.flatnonzero(nan), None) if nan.any() else out


def _stats(m: Measure, cv_flag: float | None) -> tuple[np.ndarray, np.ndarray]:
    cv = coefficient_of_variation(m.estimate, m.sd)
    return cv, flag_codes(m.estimate, m.sd, cv, cv_flag=cv_flag, clamped=_clamped(m))


def assemble(key_frame: pl.DataFrame | None, measures: Sequence[Measure], *, form: str = "wide",
             cv: bool = False, cv_flag: float | None = None,
             key_dtypes: Mapping[str, Any] | None = None) -> pl.DataFrame:
    """The output frame of a release, in the wide or the long form.

    Args:
        key_frame: The key set's columns, one row per key (``None`` or no columns: one cell).
        measures: The released measures, in output order.
        form: ``"wide"`` or ``"long"``.
        cv: Wide form only: add ``m_cv`` and ``m_flag`` (the long form always has them).
        cv_flag: Threshold of the ``C`` flag (default: 0.3, the release workflow's default,
            [`tabdp.planning.ACCESSOR_CV_FLAG`][tabdp.planning.ACCESSOR_CV_FLAG]).
        key_dtypes: Key column → dtype of the input frame's column: key columns are cast to it
            where the key set's values convert losslessly (schemas and public keys only).

    Returns:
        A Polars frame (see the module docstring for the columns).

    Example:
        >>> keys = pl.DataFrame({"c": ["a", "b"]})
        >>> m = Measure("x", [10.0, -1.0], [1.0, 1.0], [1.6, 1.6], [8.4, -2.6], [11.6, 0.6])
        >>> for row in assemble(keys, [m], form="long").rows():
        ...     print(row)
        ('a', 'x', 10.0, 1.0, 1.6, 8.4, 11.6, 0.1, '')
        ('b', 'x', -1.0, 1.0, 1.6, -2.6, 0.6, 1.0, 'CN')
        >>> assemble(keys, [m], cv=True).columns
        ['c', 'x', 'x_sd', 'x_moe', 'x_lower', 'x_upper', 'x_cv', 'x_flag']
    """
    form = check_form(form)
    if cv_flag is None:
        from tabdp.planning import ACCESSOR_CV_FLAG

        cv_flag = ACCESSOR_CV_FLAG
    keys = key_frame if key_frame is not None else pl.DataFrame()
    if key_dtypes:
        keys = keys.with_columns(_key_cast(keys[c], key_dtypes[c])
                                 for c in keys.columns if c in key_dtypes)
    n = keys.height if keys.width else (len(np.asarray(measures[0].estimate)) if measures else 1)
    if form == "wide":
        cols: list[pl.Series] = []
        for m in measures:
            cols += [_estimate_series(m.name, m),
                     *(pl.Series(f"{m.name}{s}", np.asarray(v, dtype=np.float64),
                                 dtype=pl.Float64)
                       for s, v in (("_sd", m.sd), ("_moe", m.moe), ("_lower", m.lower),
                                    ("_upper", m.upper)))]
            if cv:
                c, f = _stats(m, cv_flag)
                cols += [pl.Series(f"{m.name}_cv", c, dtype=pl.Float64, nan_to_null=True),
                         pl.Series(f"{m.name}_flag", f, dtype=pl.String)]
        return keys.with_columns(cols) if keys.width else pl.DataFrame(cols)
    integral = bool(measures) and all(m.integral for m in measures)
    parts = []
    for m in measures:
        c, f = _stats(m, cv_flag)
        est = _estimate_series("estimate", m)
        values = pl.DataFrame([
            pl.Series("measure", [m.name] * n, dtype=pl.String),
            est if integral else est.cast(pl.Float64),
            *(pl.Series(k, np.asarray(v, dtype=np.float64), dtype=pl.Float64)
              for k, v in (("sd", m.sd), ("moe", m.moe), ("lower", m.lower),
                           ("upper", m.upper))),
            pl.Series("cv", c, dtype=pl.Float64, nan_to_null=True),
            pl.Series("flag", f, dtype=pl.String)])
        parts.append(pl.concat([keys, values], how="horizontal") if keys.width else values)
    if not parts:
        return keys.clear().with_columns(
            pl.Series(k, [], dtype=pl.String if k in ("measure", "flag") else pl.Float64)
            for k in LONG_COLUMNS)
    return pl.concat(parts, how="vertical")


def _key_cast(s: pl.Series, want: Any) -> pl.Series:
    """``s`` (the key set's public values) in the input's dtype ``want`` where lossless.

    An Enum's categories are the key set's values only, in every mode: the input's categories
    may have been taken from the data (``pl.Enum(df["c"].unique())``), and the output is what
    is published (one record outside the key set would add a category; review r86). A
    Categorical key comes back as such an Enum too: a Categorical's codes come from the
    process-wide category map, in the order strings entered it, so a key's code would tell
    whether the data held other values before it.
    """
    if isinstance(want, (pl.Enum, pl.Categorical)):
        try:
            text = s.cast(pl.String, strict=True)
        except pl.exceptions.PolarsError:  # bytes keys that are not UTF-8 text: kept as bytes
            return s
        vals = text.unique(maintain_order=True).drop_nulls().to_list()
        return text.cast(pl.Enum(vals))
    if s.dtype == want:
        return s
    if want == pl.Binary and isinstance(s.dtype, (pl.Enum, pl.Categorical)):
        s = s.cast(pl.String)  # text keys of any text dtype against bytes: as String keys
    try:
        out = s.cast(want, strict=True)
        if out.cast(s.dtype, strict=False).eq_missing(s).all():
            return out
    except Exception:  # noqa: BLE001 - the key set's values do not fit: keep its dtype
        pass
    return s


def to_native(out: pl.DataFrame, native: Any, backend: str, keys: Sequence[str]) -> Any:
    """Return ``out`` in the caller's library, key columns in the input's dtypes.

    pandas key columns get the input column's dtype back (a categorical's categories are the
    key set's values, in every mode, as the input's may come from the data; its ``ordered``
    flag is kept; a nullable or Arrow-backed dtype keeps a null key as ``NA`` and a NaN key
    apart from it; a NumPy bool column with a null key becomes ``boolean``); Polars frames
    were cast by `assemble`.

    Args:
        out: The assembled Polars frame.
        native: The caller's frame.
        backend: ``"pandas"`` or ``"polars"``.
        keys: Key columns.

    Returns:
        A pandas DataFrame or the Polars frame.

    Example:
        >>> import pandas as pd
        >>> src = pd.DataFrame({"c": pd.Categorical(["a"], categories=["a", "b", "q"])})
        >>> out = to_native(pl.DataFrame({"c": ["b", "a"]}), src, "pandas", ["c"])
        >>> out["c"].cat.categories.tolist()
        ['b', 'a']
    """
    if backend != "pandas":
        return out
    import pandas as pd  # a pandas input: pandas is imported already

    df = pandas_exact(out)
    for c in keys:
        if c not in df.columns or c not in native.columns:
            continue
        want = native[c].dtype
        if isinstance(want, pd.CategoricalDtype):
            vals = df[c].astype(object)
            dtype = pd.CategoricalDtype([v for v in pd.unique(vals) if not pd.isna(v)],
                                        ordered=want.ordered)
            df[c] = pd.Categorical(vals, dtype=dtype)
        elif df[c].dtype != want:
            if want == np.dtype(bool) and out[c].null_count():
                # a null key in a NumPy bool column: pandas' nullable boolean, as an integer
                # column becomes a nullable integer (`pandas_exact`), not object
                want = pd.BooleanDtype()
            exact = _pandas_extension_keys(out[c], want)
            if exact is not None:
                df[c] = exact
                continue
            try:
                conv = df[c].astype(want)
                if (conv.astype(object) == df[c].astype(object)).all():
                    df[c] = conv
            except (TypeError, ValueError, OverflowError):
                pass
    return df


def _pandas_extension_keys(keys: pl.Series, want: Any) -> Any:
    """The key column ``keys`` as a pandas extension array of dtype ``want``, if lossless.

    pandas' nullable (``Float64``, ``boolean``, ``string``, ``Int32``...) and Arrow-backed
    (``double[pyarrow]``...) dtypes hold a null key as ``NA`` and, for floats, a NaN key apart
    from it. Going through NumPy (``to_pandas``, then ``astype``) lost both: a null made the
    value check fail (``NA == NA`` is not true), so the column kept NumPy's dtype, and a float
    column's NaN and null keys both became NaN: two cells of one label (review rev64b). Built
    from the Arrow data (a masked float array from its values and null mask, as pandas would
    turn NaN into ``NA`` otherwise) and kept only when it converts back to the same keys
    (nulls and NaN included); ``None`` otherwise (the caller's NumPy path). Depends on the
    public keys and the input's dtype only.
    """
    import pandas as pd  # a pandas output: pandas is imported already
    import pyarrow as pa

    if not isinstance(want, pd.api.extensions.ExtensionDtype) or isinstance(
            want, pd.CategoricalDtype) or not hasattr(want, "__from_arrow__"):
        return None
    try:
        if isinstance(want, (pd.Float32Dtype, pd.Float64Dtype)):
            if not keys.dtype.is_float():
                return None
            values: np.ndarray[Any, np.dtype[np.floating[Any]]] = np.asarray(
                keys.fill_null(0.0).to_numpy(),
                dtype=np.float32 if isinstance(want, pd.Float32Dtype) else np.float64)
            arr: Any = pd.arrays.FloatingArray(values, keys.is_null().to_numpy())
        else:
            src = keys.to_arrow()
            if isinstance(want, pd.ArrowDtype):
                src = src.cast(want.pyarrow_dtype, safe=True)
            arr = want.__from_arrow__(src)
        if arr.dtype != want:
            return None
        back = pl.Series(pa.array(arr)).cast(keys.dtype, strict=True)
        if len(back) != len(keys) or not back.eq_missing(keys).all():
            return None
        return pd.Series(arr, name=keys.name)
    except Exception:  # noqa: BLE001 - the keys do not fit the dtype: the NumPy path decides
        return None


def long_to_wide(long: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The wide form of a long table (one row per cell; ``m, m_sd, ..., m_cv, m_flag``).

    Args:
        long: A long table (keys, ``measure``, ``estimate``, ``sd``, ``moe``, ``lower``,
            ``upper``, ``cv``, ``flag``), measures stacked in order, cells in the same order
            for every measure.
        keys: The key columns.

    Returns:
        The wide table: cells in the long table's order, measures in order of appearance.

    Example:
        >>> long = pl.DataFrame({"c": ["a", "a"], "measure": ["x", "count"],
        ...     "estimate": [1.0, 2.0], "sd": [1.0, 1.0], "moe": [2.0, 2.0], "lower": [-1.0, 0.0],
        ...     "upper": [3.0, 4.0], "cv": [1.0, 0.5], "flag": ["C", "C"]})
        >>> long_to_wide(long, ["c"]).columns[:4]
        ['c', 'x', 'x_sd', 'x_moe']
    """
    names = long["measure"].unique(maintain_order=True).to_list()
    stats = [c for c in LONG_COLUMNS if c != "measure" and c in long.columns]
    wide: pl.DataFrame | None = None
    for m in names:
        part = long.filter(pl.col("measure") == m).select(
            *keys, *[pl.col(c).alias(m if c == "estimate" else f"{m}_{c}") for c in stats])
        wide = part if wide is None else pl.concat(
            [wide, part.drop(list(keys))], how="horizontal")
    if wide is None:
        return long.select(keys)
    return wide


def integer_grid(grid: Any, mechanism: Any, integer_measures: Sequence[str],
                 released: Sequence[str]) -> Any:
    """The grid argument with a whole-number default for integer measures.

    A continuous additive mechanism's default grid is a power of ten near 2% of its noise's
    spread (``0.1`` for σ = 5), which would give integer measures decimals. Where the caller
    leaves the grid to the default (``None``), integer measures get a step of 1 instead when the
    default is finer (the release stays on a whole-number grid; its moe grows by at most half a
    unit). Transformation mechanisms (grid in transformed space), discrete mechanisms (integer
    already) and explicit grids are unchanged. Decided from the schema and the mechanism only.

    Args:
        grid: The caller's grid (a step, ``{measure: step}`` or ``None``).
        mechanism: The release's mechanism.
        integer_measures: Released measures of an integer dtype (counts included).
        released: All released measures.

    Returns:
        The grid to pass on (unchanged unless a default was replaced).

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> integer_grid(None, Gaussian(5.0), ["emp"], ["emp", "pay"])
        {'emp': 1.0, 'pay': None}
    """
    if not integer_measures or getattr(mechanism, "requires_nonnegative", False):
        return grid
    given = dict(grid) if isinstance(grid, Mapping) else {m: grid for m in released}
    if isinstance(grid, Mapping) and set(grid) - set(released):
        return grid  # the engine reports the unknown names
    changed = False
    for m in integer_measures:
        if given.get(m) is not None:
            continue
        mech = mechanism.measure_mechanism(m) if getattr(mechanism, "joint", False) \
            else mechanism
        try:
            default = mech.default_grid()
        except Exception:  # noqa: BLE001 - a mechanism without a usable default keeps it
            continue
        if isinstance(default, (int, float)) and not isinstance(default, bool) \
                and 0 < float(default) < 1:
            given[m] = 1.0
            changed = True
    return given if changed else grid


def is_integral_release(mechanism: Any, step: Any, integer: bool) -> bool:
    """Whether a release's estimates are whole numbers by construction (public).

    True for an integer query (count or integer measure) released by an additive or discrete
    mechanism on a whole-number grid step (``None`` counts as 1 for discrete mechanisms).

    Args:
        mechanism: The measure's mechanism.
        step: The grid step asked for (``None``: the mechanism's default).
        integer: The query is integer-valued (a count, or a measure of an integer dtype).

    Returns:
        Whether the estimate is returned as Int64.

    Example:
        >>> from tabdp.mechanisms import DiscreteGaussian, Gaussian
        >>> is_integral_release(DiscreteGaussian(2.0), None, True)
        True
        >>> g = Gaussian(2.0)
        >>> is_integral_release(g, None, True), is_integral_release(g, 1.0, True)
        (False, True)
    """
    if not integer or getattr(mechanism, "requires_nonnegative", False):
        return False
    if step is None:
        try:
            step = mechanism.default_grid()
        except Exception:  # noqa: BLE001
            return False
        if step is None:
            return True  # discrete mechanisms: exact integers
    if isinstance(step, bool) or not isinstance(step, (int, float, np.integer, np.floating)):
        return False
    return bool(float(step) >= 1 and float(step).is_integer())
