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
from typing import Any, NamedTuple

import numpy as np

from tabdp._numeric import add_up, inflate, mul_up
from tabdp._quantile_cells import SS_FLOOR, cell_quantiles, floored_smooth_sensitivity, ss_floor
from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.frame._author import _caller_stacklevel
from tabdp.frame._engine import (
    OUTPUT_SUFFIXES,
    _as_list,
    _check_args,
    _check_grid,
    _Opened,
)
from tabdp.frame.keys import KeySet
from tabdp.mechanisms import pure_to_zcdp
from tabdp.mechanisms.additive import Gaussian
from tabdp.mechanisms.smooth import SmoothSensitivityRelease

__all__ = ["quantile_label", "SS_FLOOR", "GroupPrivacyPolicy", "PlannedQuantile",
           "cell_quantiles", "floored_smooth_sensitivity", "ss_floor"]


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
            arg = (k - 1.0) * e1
            d = np.where(k > 0, k * np.exp(arg) * self.dp_delta, 0.0)
        # rounded up: exp's argument is inexact, its error amplified by the argument
        d = inflate(d, 8.0 * (3.0 + arg), k > 0)
        return self._eps_sum(k), np.minimum(d, 1.0)

    def _eps_sum(self, k: np.ndarray) -> np.ndarray:
        """k·ε₁ + k·ε₂, never below the exact sum (exact when the doubles are)."""
        return add_up(mul_up(k, self.mechanism.eps_value), mul_up(k, self.mechanism.eps_scale))

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
        return self._eps_sum(k)

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
        return add_up(pure_to_zcdp(mul_up(k, self.mechanism.eps_value)),
                      pure_to_zcdp(mul_up(k, self.mechanism.eps_scale)))

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

    ``100q`` is written in full to 10 decimals (``q = 0.9999999`` is ``q99.99999``; it was
    rounded to 6 significant digits, ``q100``: the label of the maximum, review rev64b).

    Args:
        column: Measure column.
        q: Quantile level.
        median: Whether the call was ``dp.median``.

    Returns:
        The label.

    Example:
        >>> quantile_label("payroll", 0.9, False), quantile_label("payroll", 0.975, False)
        ('payroll_q90', 'payroll_q97.5')
        >>> quantile_label("payroll", 0.9999999, False), quantile_label("pay", 0.07, False)
        ('payroll_q99.99999', 'pay_q7')
    """
    if median:
        return f"{column}_median"
    return f"{column}_q{round(q * 100.0, 10):.15g}"


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
                   session: Any, level: float, nulls: str, grid: Any,
                   stacklevel: int | None = None
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
                   context="dp.median" if median else "dp.quantile",
                   stacklevel=_caller_stacklevel() if stacklevel is None else stacklevel)
    label = quantile_label(column, qv, median)
    grid = _check_grid(grid, [label])[label]
    # fineness against public magnitudes only: the sampler's own check can then never refuse
    grid = mechanism.check_grid(grid, (lo, hi), max(hi - lo, ss_floor((lo, hi))))
    clash = {f"{label}{s}" for s in OUTPUT_SUFFIXES} & set(by_list)
    if clash:
        raise InvalidParameterError(
            f"key column(s) {sorted(clash)} would clash with output columns; rename them first.")
    return qv, lo, hi, by_list, mechanism, level, label, grid


class PlannedQuantile(NamedTuple):
    """A median or quantile release planned but not executed (`tabdp.frame.pipeline`).

    Attributes:
        op: The opened release (session, name, input, schema).
        kind: ``"median"`` or ``"quantile"``.
        column: The measure column.
        q: The quantile level.
        bounds: Public ``(lo, hi)``.
        by: Group-by columns.
        keys: The public key set.
        mechanism: The smooth-sensitivity release.
        policy: Its group-privacy policy (the per-record losses).
        level: Confidence level.
        label: The output column's name.
        grid: The public rounding step of the estimates.
        nulls: The nulls rule.
        form: ``"wide"`` or ``"long"``.
        cv: Add ``_cv`` and ``_flag`` columns.
    """

    op: _Opened
    kind: str
    column: str
    q: float
    bounds: tuple[float, float]
    by: list[str]
    keys: KeySet
    mechanism: SmoothSensitivityRelease
    policy: GroupPrivacyPolicy
    level: float
    label: str
    grid: Any
    nulls: str
    form: str
    cv: bool


