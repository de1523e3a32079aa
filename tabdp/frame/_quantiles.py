"""Private medians and quantiles per cell by smooth sensitivity (issue 4; docs/math/smooth.md).

For each cell of the key set: clip the values to the public ``bounds``, take the q-quantile
(order statistic of rank ``quantile_rank(n, q)``), compute its γ-smooth sensitivity SS
(`floored_smooth_sensitivity`) and release ``quantile + SS·Z`` with a smooth-sensitivity
noise law (PolyPlace by default, at ε₁), together with a private estimate of the noise scale
(``ln SS + Laplace(γ/ε₂)``, ε₂-DP) from which alone the ``_sd`` and ``_moe`` columns are computed
([`SmoothSensitivityRelease`][tabdp.mechanisms.SmoothSensitivityRelease]). Each release is ε = ε₁ +
ε₂-DP for add/remove of one row; a unit with k rows in a cell pays k·ε there (group privacy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.frame._engine import (
    _CELL,
    OUTPUT_SUFFIXES,
    ROW_ID,
    _as_list,
    _attach_cells,
    _check_args,
    _check_grid,
    _check_rules,
    _fingerprint,
    _fp_columns,
    _missing_unit,
    _open_release,
    _Rules,
    _sort_units,
    _strict_checks,
    per_unit,
)
from tabdp.frame._output import (
    LONG_COLUMNS,
    STAT_SUFFIXES,
    Measure,
    assemble,
    check_form,
    to_native,
)
from tabdp.frame.keys import KeySet
from tabdp.mechanisms import DEFAULT_LEVEL, pure_to_zcdp
from tabdp.mechanisms.additive import Gaussian
from tabdp.mechanisms.smooth import SmoothSensitivityRelease
from tabdp.privacy.budget import ROWS_CURRENCY
from tabdp.privacy.ledger import Charges, QueryRecord
from tabdp.privacy.session import Session
from tabdp.sensitivity.smooth import (
    group_sort,
    grouped_quantile,
    smooth_sensitivity_grouped,
)

__all__ = ["quantile_release", "quantile_label", "SS_FLOOR", "GroupPrivacyPolicy",
           "floored_smooth_sensitivity", "ss_floor"]

#: Smooth sensitivities are floored at SS_FLOOR·max(hi − lo, |lo|, |hi|). max(SS, c) is still a
#: γ-smooth upper bound for a public constant c, so the guarantee is unchanged; the floor prevents
#: SS from underflowing to 0 (and the value being released without noise) in huge, tightly packed
#: cells. It is relative to the magnitude of the bounds, not only to their span, so that the noise
#: is not lost to rounding when the bounds are narrow and far from 0 (e.g. (1e9, 1e9 + 1)).
SS_FLOOR = 1e-12


def ss_floor(bounds: tuple[float, float]) -> float:
    """The public floor of the smooth sensitivities: ``SS_FLOOR·max(hi − lo, |lo|, |hi|)``.

    Args:
        bounds: Public ``(lo, hi)``.

    Returns:
        The floor (> 0 for lo < hi).

    Example:
        >>> ss_floor((0.0, 1e9)), ss_floor((1e9, 1e9 + 1.0))
        (0.001, 0.001000000001)
    """
    lo, hi = bounds
    return SS_FLOOR * max(hi - lo, abs(lo), abs(hi))


def floored_smooth_sensitivity(sorted_values: np.ndarray, offsets: np.ndarray, q: float,
                               gamma: float, bounds: tuple[float, float]) -> np.ndarray:
    """The SS a quantile release uses: the γ-smooth sensitivity, floored at `ss_floor`.

    ``max(SS, c)`` is γ-smooth like SS: between neighbouring datasets its logarithm changes by
    at most γ (what the private noise-scale estimate relies on), and it lies in
    ``[floor, max(hi − lo, floor)]`` for any data.

    Args:
        sorted_values: Values sorted inside each cell
            ([`group_sort`][tabdp.sensitivity.group_sort]).
        offsets: Cell boundaries.
        q: Quantile level.
        gamma: Smoothness γ.
        bounds: Public ``(lo, hi)``.

    Returns:
        One SS per cell.

    Example:
        >>> v, off = group_sort([1.0, 2.0, 3.0], [0, 0, 0], 2)
        >>> [round(float(x), 4) for x in floored_smooth_sensitivity(v, off, 0.5, 1.0, (0, 10))]
        [2.943, 10.0]
    """
    ss = smooth_sensitivity_grouped(sorted_values, offsets, q, gamma, bounds)
    return np.maximum(ss, ss_floor(bounds))


class GroupPrivacyPolicy:
    """Per-record policy of a smooth-sensitivity release (value ε₁ plus noise scale ε₂).

    Both parts are pure DP for adding or removing one row (ε₁ for the value, ε₂ for the noisy
    ``ln SS``); a unit with Δ rows in a cell differs by k = ⌈Δ⌉ rows, so it pays k·ε₁ and k·ε₂
    (group privacy): ε(Δ) = k·(ε₁ + ε₂), and in zCDP ρ(Δ) = ρ(k·ε₁) + ρ(k·ε₂) with
    ρ(e) = e·tanh(e/2) (the two parts compose). Laplace with smooth sensitivity makes the value
    only (ε₁, δ)-DP: ε and ρ are ``inf`` here, and it is accounted in approximate DP: a unit with
    k rows in a cell pays (k·(ε₁ + ε₂), k·e^{(k−1)ε₁}·δ) (group privacy for (ε₁, δ)-DP, composed
    with the pure k·ε₂ of the scale).

    Args:
        mechanism: The [`SmoothSensitivityRelease`][tabdp.mechanisms.SmoothSensitivityRelease].

    Example:
        >>> p = GroupPrivacyPolicy(SmoothSensitivityRelease("polyplace", 1.0))   # ε₁ 0.6, ε₂ 0.4
        >>> p.epsilon([0, 1, 3]).tolist()
        [0.0, 1.0, 3.0]
    """

    family = SmoothSensitivityRelease.family

    gaussian_dp = False

    def __init__(self, mechanism: SmoothSensitivityRelease) -> None:
        if not isinstance(mechanism, SmoothSensitivityRelease):
            raise InvalidParameterError(
                f"GroupPrivacyPolicy needs a SmoothSensitivityRelease; got "
                f"{type(mechanism).__name__}.\nHint: a bare SmoothSensitivityMechanism "
                "publishes SS-based uncertainty; use SmoothSensitivityRelease.")
        self.mechanism = mechanism
        self.pure = mechanism.pure
        #: Per-row δ of the approximate-DP accounting (Laplace noise only).
        self.dp_delta: float | None = (None if mechanism.pure or mechanism.delta is None
                                       else float(mechanism.delta))

    def _k(self, sensitivity: Any) -> np.ndarray:
        return np.ceil(np.abs(np.asarray(sensitivity, dtype=np.float64)))

    def approx_policy(self, sensitivity: Any) -> tuple[np.ndarray, np.ndarray]:
        """Group-privacy (ε, δ) for Δ rows in a cell: (k·(ε₁+ε₂), k·e^{(k−1)ε₁}·δ), k = ⌈Δ⌉.

        Args:
            sensitivity: Rows of the unit in the cell.

        Returns:
            ``(epsilon, delta)`` arrays (zeros for pure mechanisms, which are accounted in ε).

        Example:
            >>> r = SmoothSensitivityRelease("laplace", 1.0, uncertainty_share=0.5, delta=1e-6)
            >>> eps, delta = GroupPrivacyPolicy(r).approx_policy([2])
            >>> float(eps[0]), round(float(delta[0]) / 1e-6, 6)   # (2 eps, 2 e^{eps_1} delta)
            (2.0, 3.297443)
        """
        k = self._k(sensitivity)
        if self.dp_delta is None:
            z = np.zeros(k.shape)
            return z, z.copy()
        e1 = self.mechanism.eps_value
        with np.errstate(over="ignore"):
            d = np.where(k > 0, k * np.exp((k - 1.0) * e1) * self.dp_delta, 0.0)
        return k * e1 + k * self.mechanism.eps_scale, np.minimum(d, 1.0)

    def epsilon(self, sensitivity: Any) -> np.ndarray:
        """ε(Δ) = ⌈Δ⌉·(ε₁ + ε₂) (``inf`` for Δ > 0 when not pure).

        Args:
            sensitivity: Rows of the unit in the cell.

        Returns:
            PRDP losses.

        Example:
            >>> r = SmoothSensitivityRelease(epsilon=0.5, uncertainty_share=0.2)
            >>> GroupPrivacyPolicy(r).epsilon([2]).tolist()
            [1.0]
        """
        k = self._k(sensitivity)
        if not self.pure:
            return np.where(k > 0, np.inf, 0.0)
        return k * self.mechanism.eps_value + k * self.mechanism.eps_scale

    def rho(self, sensitivity: Any) -> np.ndarray:
        """ρ(Δ) = ρ(k·ε₁) + ρ(k·ε₂) with ρ(e) = e·tanh(e/2), k = ⌈Δ⌉ (``inf`` when not pure).

        Args:
            sensitivity: Rows of the unit in the cell.

        Returns:
            PRzCDP losses.

        Example:
            >>> r = SmoothSensitivityRelease(epsilon=1.0, uncertainty_share=0.5)
            >>> round(float(GroupPrivacyPolicy(r).rho(1)), 6)      # 2 · 0.5·tanh(0.25)
            0.244919
        """
        k = self._k(sensitivity)
        if not self.pure:
            return np.where(k > 0, np.inf, 0.0)
        return (pure_to_zcdp(k * self.mechanism.eps_value)
                + pure_to_zcdp(k * self.mechanism.eps_scale))

    def to_dict(self) -> dict[str, Any]:
        """Public description (release and the group-privacy policy).

        Example:
            >>> GroupPrivacyPolicy(SmoothSensitivityRelease()).to_dict()["policy_rho"][:6]
            'eps(D)'
        """
        return {**self.mechanism.to_dict(),
                "policy_rho": "eps(D) = k * (epsilon_value + epsilon_scale) for k = ceil(D) "
                              "rows of the unit in the cell; rho = r(k * epsilon_value) + "
                              "r(k * epsilon_scale), r(e) = e * tanh(e / 2)"}


def quantile_label(column: str, q: float, median: bool) -> str:
    """Output column name: ``{column}_median`` or ``{column}_q{100q}``.

    Args:
        column: Measure column.
        q: Quantile level.
        median: Whether the call was ``dp.median``.

    Returns:
        The label.

    Example:
        >>> quantile_label("payroll", 0.9, False), quantile_label("payroll", 0.975, False)
        ('payroll_q90', 'payroll_q97.5')
    """
    if median:
        return f"{column}_median"
    return f"{column}_q{round(q * 100.0, 10):g}"


def _check_bounds(bounds: Any) -> tuple[float, float]:
    if isinstance(bounds, np.ndarray):
        bounds = bounds.tolist()
    ok = isinstance(bounds, Sequence) and not isinstance(bounds, str) and len(bounds) == 2
    if ok:
        lo = check_real("bounds[0]", bounds[0], owner="quantile bounds")
        hi = check_real("bounds[1]", bounds[1], owner="quantile bounds")
        if lo < hi and math.isfinite(hi - lo):
            return lo, hi
    raise InvalidParameterError(
        f"bounds must be a pair (low, high) of finite numbers with low < high and a finite span "
        f"high - low; got {bounds!r}.\n"
        "Hint: bounds are public limits chosen without looking at the data, e.g. "
        "bounds=(0.0, 1e9) for payroll; values outside them are clipped.")


def _quantile_args(column: Any, q: Any, median: bool, by: Any, keys: Any, bounds: Any,
                   epsilon: Any, noise: str, gamma: Any, delta: Any, uncertainty_share: Any,
                   session: Any, level: float, nulls: str, grid: Any, stacklevel: int = 3
                   ) -> tuple[float, float, float, list[str], SmoothSensitivityRelease, float,
                              str, Any]:
    """Argument checks of a quantile release (no data read); shared with the Spark engine."""
    if not isinstance(column, str):
        raise InvalidParameterError(f"column must be one column name; got {column!r}.")
    qv = check_real("q", q, owner="dp.quantile", ge=0.0, le=1.0,
                    hint="q is a quantile level, e.g. 0.5 for the median, 0.9 for the 90th "
                         "percentile")
    lo, hi = _check_bounds(bounds)
    by_list = _as_list(by, "by")
    mechanism = SmoothSensitivityRelease(noise, epsilon, gamma, delta=delta,
                                         uncertainty_share=uncertainty_share)
    # Argument checks shared with sums (keys, session, level, nulls); a stand-in mechanism.
    level = _check_args("sum", [column], by_list, keys, Gaussian(1.0), session, level, nulls)
    # Usability warnings: public parameters only, before any data is read.
    from tabdp.planning import ACCESSOR_CV_FLAG, warn_usability

    warn_usability(mechanism, cv_flag=ACCESSOR_CV_FLAG,
                   context="dp.median" if median else "dp.quantile", stacklevel=stacklevel)
    label = quantile_label(column, qv, median)
    grid = _check_grid(grid, [label])[label]
    # fineness against public magnitudes only: the sampler's own check can then never refuse
    grid = mechanism.check_grid(grid, (lo, hi), max(hi - lo, ss_floor((lo, hi))))
    clash = {f"{label}{s}" for s in OUTPUT_SUFFIXES} & set(by_list)
    if clash:
        raise InvalidParameterError(
            f"key column(s) {sorted(clash)} would clash with output columns; rename them first.")
    return qv, lo, hi, by_list, mechanism, level, label, grid


def quantile_release(native: Any, *, column: str, q: float, median: bool,
                     by: str | Sequence[str] | None, keys: KeySet, bounds: Any, epsilon: float,
                     noise: str = "polyplace", gamma: float | None = None,
                     delta: float | None = None, uncertainty_share: float | None = None,
                     session: Session | None = None,
                     level: float = DEFAULT_LEVEL, nulls: str = "error",
                     name: str | None = None, grid: Any = None, form: str = "wide",
                     cv: bool = False) -> Any:
    """Release a private q-quantile of ``column`` per cell of ``keys``.

    This is the implementation behind ``df.dp.median`` and ``df.dp.quantile``.

    Args:
        native: pandas DataFrame, Polars DataFrame or LazyFrame.
        column: Measure column.
        q: Quantile level in [0, 1].
        median: Label the output ``_median`` (``dp.median``) instead of ``_q{100q}``.
        by: Group-by columns (the key set's columns).
        keys: Public key set.
        bounds: Public ``(low, high)``; values are clipped to it.
        epsilon: Total ε of the release (per cell, per row): the value's ε₁ plus the noise
            scale's ε₂ (see [`split_epsilon`][tabdp.mechanisms.smooth.split_epsilon]).
        noise: ``"polyplace"`` (default), ``"student_t"``, ``"cauchy"`` or ``"laplace"``.
        grid: Public rounding step of the estimates (``None``: the mechanism's default
            relative grid, see docs/exact-rounding.md).
        gamma: Smoothness γ (default [`default_gamma`][tabdp.mechanisms.smooth.default_gamma] at
            ε₁).
        delta: δ for ``noise="laplace"``.
        uncertainty_share: Fraction of ε spent on the private noise scale behind ``_sd`` and
            ``_moe``, in (0, 1) (default: 2γ, see
            [`split_epsilon`][tabdp.mechanisms.smooth.split_epsilon]).
        session: Session to record in.
        level: Confidence level of ``_moe``.
        nulls: ``"error"``, ``"zero"`` or ``"drop"``.
        name: Label of the release in the session.
        form: ``"wide"`` (default) or ``"long"`` (`tabdp.frame._output`).
        cv: Wide form: add ``{label}_cv`` and ``{label}_flag``.

    Returns:
        A frame of the caller's library: keys, ``{label}``, ``{label}_sd``, ``{label}_moe``,
        ``{label}_lower``, ``{label}_upper`` (the ``level`` interval, estimate ∓ moe); long
        form: keys, ``measure``, ``estimate``, ``sd``, ``moe``, ``lower``, ``upper``, ``cv``,
        ``flag``.

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"c": ["a", "a", "a", "b"], "x": [1.0, 2.0, 3.0, 9.0]})
        >>> out = quantile_release(df, column="x", q=0.5, median=True, by="c",
        ...                        keys=tabdp.KeySet.from_dict(c=["a", "b"]), bounds=(0, 10),
        ...                        epsilon=1.0, session=tabdp.Session(seed=1))
        >>> out.columns
        ['c', 'x_median', 'x_median_sd', 'x_median_moe', 'x_median_lower', 'x_median_upper']
    """
    qv, lo, hi, by_list, mechanism, level, label, grid = _quantile_args(
        column, q, median, by, keys, bounds, epsilon, noise, gamma, delta, uncertainty_share,
        session, level, nulls, grid, stacklevel=6)
    form = check_form(form)
    outputs = set(LONG_COLUMNS) if form == "long" else {
        f"{label}{s}" for s in (*OUTPUT_SUFFIXES, *(STAT_SUFFIXES if cv else ()))}
    clash = outputs & set(by_list)
    if clash:
        raise InvalidParameterError(
            f"key column(s) {sorted(clash)} would clash with output columns; rename them first.")
    op = _open_release(native, session, name, "median" if median else "quantile", [column],
                       by_list)
    sess, one_off, qname, backend = op.session, op.one_off, op.name, op.backend
    _check_rules(sess, "quantile", Gaussian(1.0), nulls, "allow", True)  # bounded values: any sign
    unit = sess.unit
    uid = unit if unit is not None else ROW_ID

    policy = GroupPrivacyPolicy(mechanism)
    charges = admitted = None
    commit = None
    if sess.streaming:  # row mode, losses recomputed from the data (tabdp.frame._stream)
        from tabdp.frame._stream import streaming_quantile_data

        sess.phase(qname, "reading the input (streaming)")
        got = streaming_quantile_data(op, column, by_list, keys, nulls, policy)
        codes, values, n_rows, outside, n_left_out, counts, commit = got
        losses = None
    else:
        # One evaluation of the input: ids, keys, the values and their flags.
        sess.phase(qname, "reading and aggregating the input")
        x = pl.col(column).cast(pl.Float64)
        flags = {f"missing:{column}": x.is_null() | x.is_nan(),
                 f"inf:{column}": x.is_infinite().fill_null(False)}
        lf = op.lf
        if unit is None:
            lf = lf.with_row_index(ROW_ID)
            fps = [_fingerprint(c, op.schema[c])
                   for c in _fp_columns(op.schema, [*by_list, column], sess.bound_columns())]
        else:
            fps = []
            flags[f"null:{unit}"] = _missing_unit(op.schema, unit)
        data = lf.select(pl.col(uid), *[pl.col(c) for c in by_list], x.alias(column),
                         *[e.alias(k) for k, e in flags.items()], *fps).collect()
        counts = {k: int(data[k].sum()) for k in flags}
        rules = _Rules(nulls, "allow", sess.mode)
        _strict_checks(counts, [column], unit, rules, False, {})
        n_rows = data.height
        if unit is None:
            fp = {c[3:]: int(data[c].sum() or 0) for c in data.columns if c.startswith("fp:")}
            sess.bind_rows(n_rows, fp)
        # Declared rules: ±inf counts as missing (author mode; curator mode refused it above),
        # missing values are 0 ("zero") or their rows dropped ("drop"); rows without a unit id are
        # dropped (author mode).
        missing = pl.col(f"missing:{column}") | pl.col(f"inf:{column}")
        keep = pl.lit(True)
        if nulls == "drop":
            keep = keep & ~missing
        if unit is not None:
            keep = keep & ~pl.col(f"null:{unit}")
        data = (data.with_columns(pl.when(missing).then(0.0).otherwise(pl.col(column))
                                  .alias(column))
                .filter(keep).drop([*flags, *[c for c in data.columns if c.startswith("fp:")]]))
        data = _attach_cells(data, keys, by_list)
        outside = int(data[_CELL].is_null().sum())
        inside = data.filter(pl.col(_CELL).is_not_null())

        # Per-unit losses: Δ = rows of the unit in the cell; ε(Δ) = Δ·(ε₁ + ε₂) (group
        # privacy), then the session's budget as an individual filter (units left out are
        # dropped from their cells).
        approx = policy.dp_delta is not None
        # (unit, cell) pairs sorted by unit then cell: a unit's losses are summed left to
        # right in key-set order, whatever the input's row order (as sums and counts do)
        pairs = inside.group_by(uid, _CELL, maintain_order=True).len()
        if unit is not None:
            pairs = _sort_units(pairs, uid, len(keys) if by_list else 1)
        k = pairs["len"].cast(pl.Float64).to_numpy()
        ea, da = policy.approx_policy(k)
        u, per = per_unit(pairs[uid], {
            "rho": np.asarray(policy.rho(k), dtype=np.float64),
            "epsilon": np.asarray(policy.epsilon(k), dtype=np.float64), "size": k,
            "eps_a": np.asarray(ea, dtype=np.float64), "delta_a": np.asarray(da, dtype=np.float64)},
            lambda c: c == "size")
        units = u.cast(pl.Int64).to_numpy() if unit is None else u
        arrays = {c: {ROWS_CURRENCY: per[c]}
                  for c in ("rho", "epsilon", "size", "eps_a", "delta_a")}
        charges = Charges(units, arrays["rho"], arrays["epsilon"], arrays["size"],
                          "approx" if approx else "zcdp",
                          arrays["eps_a"] if approx else None,
                          arrays["delta_a"] if approx else None)
        admitted = sess.admit(charges)
        losses = charges.losses(admitted)
        ok = admitted[ROWS_CURRENCY]
        n_left_out = int((~ok).sum())
        if n_left_out:
            gone = u.filter(pl.Series(~ok))
            inside = inside.filter(~pl.col(uid).is_in(gone.implode(), nulls_equal=True))

        codes = inside[_CELL].to_numpy()
        values = inside[column].to_numpy()
    clipped = int(((values < lo) | (values > hi)).sum())
    n_keys = len(keys) if by_list else 1
    sorted_vals, offsets = group_sort(np.clip(values, lo, hi), codes, n_keys)
    truth = grouped_quantile(sorted_vals, offsets, qv, (lo, hi))
    ss = floored_smooth_sensitivity(sorted_vals, offsets, qv, mechanism.gamma, (lo, hi))

    # the value (ε₁) and the private noise scale (ε₂); _sd and _moe come from the latter only
    sess.phase(qname, f"drawing noise for {n_keys:,} cells")
    rv = mechanism.release_table(truth, ss, sess.rng, level, grid=grid)
    out = assemble(keys.to_polars().select(by_list) if by_list else None,
                   [Measure(label, rv.estimate, rv.sd, rv.moe, rv.lower, rv.upper)],
                   form=form, cv=cv, key_dtypes=dict(op.schema),
                   author=sess.mode == "author")
    confidential = {
        "rows_read": n_rows,
        "rows_outside_keys": outside,
        "rows_in_released_cells": int(values.size),
        "units_left_out_by_budget": n_left_out,
        "values_clipped_to_bounds": clipped,
        **({f"missing_values_{nulls}:{column}": counts[f"missing:{column}"]}
           if nulls != "error" else {}),
    }
    record = QueryRecord(
        index=len(sess.records) + 1, name=qname, kind="median" if median else "quantile",
        measures=(label,), by=tuple(by_list), mechanism=policy,  # type: ignore[arg-type]
        keys={**keys.to_dict(), "bounds": [lo, hi], "q": qv}, level=level, nulls=nulls,
        losses=losses, confidential=confidential)
    if commit is not None:
        commit()
    sess.record_release(record, backend, charges, admitted)
    if one_off:
        sess.set_as_last()
    return to_native(out, op.native, backend, by_list, author=sess.mode == "author")

