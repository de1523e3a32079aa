"""Transformation mechanisms ([FCD+24] §4, Alg. 1; docs/math/transformation.md, policies.md §4.2).

A transformation mechanism maps a non-negative cell total ``q`` to ``v = f(q + a)`` with a concave,
strictly increasing ``f`` and a public offset ``a``, adds Gaussian noise, ``ṽ = v + σZ``, and
releases an estimate ``g(ṽ)`` of ``q``. Because ``f`` is concave, a record of per-record
sensitivity Δ moves ``v`` by at most ``f(Δ + a) − f(a)`` (the worst case is the empty cell
``q = 0``), so the PRzCDP policy is (Thm 4.4)::

    ρ(Δ) = (f(Δ + a) − f(a))² / (2σ²)

whatever the estimator ``g`` (it is post-processing). Two families are provided:

* [`RootTransform`][tabdp.mechanisms.RootTransform], ``f(x) = x^(1/k)`` for real ``k ≥ 1``: ρ grows
  like Δ^(2/k) (``k = 4``: like √Δ; ``k = 1`` is the Gaussian mechanism);
* [`LogTransform`][tabdp.mechanisms.LogTransform], ``f(x) = ln x`` with ``a > 0``: ρ grows like (ln
  Δ)².

Estimators (``estimator=``):

* ``"mean"``: mean-unbiased, E[g(ṽ)] = q (Thm 4.9; integer ``k`` only for roots);
* ``"median"``: median-unbiased, g(x) = f⁻¹(x) − a extended monotonically to ℝ, so that
  P(g(ṽ) ≤ q) = 1/2 exactly.

Floating-point safety (docs/exact-rounding.md): the noisy transformed value is released as
``ṽ = round_grid(f(q + a) + σZ)`` on a public grid in transformed space, drawn exactly by
`tabdp.noise.exact.round_noisy` (``f`` evaluated exactly where the float64 value could
decide the rounding), and the data-independent estimator ``g`` is applied to ``ṽ``. Default grid
(``grid=None``): the largest power of ten ``<= 0.02·σ``, so half a step is at most 1% of the
transformed-space standard deviation.

Uncertainty: ``sd`` is the exact standard deviation of the chosen estimator (it depends on the true
``q``; releases report the plug-in value at the median-unbiased estimate clipped at 0), and the
interval ``[g_med(ṽ − zσ − g/2), g_med(ṽ + zσ + g/2)]`` inverts the Gaussian pivot in transformed
space, widened by half a grid step, so its coverage of ``q`` is at least ``level`` whatever the
estimator (exactly ``level`` before rounding).

Example:
    >>> m = RootTransform(k=4, sigma=2.0)
    >>> m.rho([5, 5, 10, 20, 30, 10000]).round(4).tolist()        # [FCD+24], Example 4.6
    [0.2795, 0.2795, 0.3953, 0.559, 0.6847, 12.5]
    >>> LogTransform(sigma=2.0, offset=1.0).rho([10000]).round(4).tolist()  # ln(10001)²/8
    [10.604]
"""

from __future__ import annotations

import math
from abc import abstractmethod
from fractions import Fraction
from functools import lru_cache
from typing import Any

import mpmath
import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaln, log_ndtr, logsumexp, ndtri

from tabdp import registry
from tabdp._numeric import div_up, half_square_up, inflate
from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms._base import (
    DEFAULT_LEVEL,
    LawOfSums,
    Mechanism,
    ReleasedValues,
    check_level,
    not_pure,
)
from tabdp.mechanisms._totals import ExactTotals
from tabdp.noise import exact as _exact
from tabdp.noise.gaussian import Gaussian as _GaussianNoise

_U = 2.0**-53

__all__ = ["TransformationMechanism", "RootTransform", "LogTransform"]

_ESTIMATORS = ("mean", "median")
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
#: Above this standardized distance t = v/σ from 0, the negative-side term of the even-k median
#: variance (relative size ≤ 4e^(−t²/2)(t + √k)²/k² < 1e-28) is dropped (``_log_var_int_median``).
_EVEN_K_CUTOFF = 12.0
#: Maximum number of (value, node) pairs evaluated at once by the quadrature (memory bound).
_CHUNK_ELEMENTS = 1 << 21


def _check_estimator(estimator: Any, owner: str) -> str:
    if not isinstance(estimator, str) or estimator not in _ESTIMATORS:
        raise InvalidParameterError(
            f"{owner}: estimator must be 'mean' or 'median'; got {estimator!r}.\n"
            "Hint: 'mean' gives mean-unbiased estimates (they add up without bias); 'median' "
            "gives median-unbiased estimates that are never below -offset.")
    return estimator


def _abs_delta(sensitivity: ArrayLike) -> np.ndarray:
    return np.abs(np.asarray(sensitivity, dtype=np.float64))


def _log1p_ratio(sensitivity: np.ndarray, a: float) -> np.ndarray:
    """``ln(1 + Δ/a)`` for a > 0, without cancellation for tiny Δ nor overflow of Δ/a."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        r = sensitivity / a
        out = np.log1p(r)
        if not np.isfinite(r).all():  # Δ/a overflowed: ln Δ + ln(1 + a/Δ) − ln a
            big = np.isinf(r) & np.isfinite(sensitivity)
            out = np.where(big, np.log(sensitivity) + np.log1p(a / sensitivity) - math.log(a), out)
    return out


def _log_moment_recursion(log_m0: np.ndarray, log_m1: np.ndarray, log_mu: np.ndarray,
                          k: int) -> list[np.ndarray]:
    """Log of M_j for j = 0..k with M_j = μ·M_{j−1} + (j−1)·M_{j−2} (σ = 1 units, μ ≥ 0).

    Every term is non-negative, so the recursion is evaluated in log space without cancellation
    and without overflow. With M_0 = 1, M_1 = μ it gives the raw moments E[X^j] of X ~ N(μ, 1);
    with M_0 = Φ(μ), M_1 = μΦ(μ) + φ(μ) it gives the partial moments E[X^j·1{X > 0}].
    """
    out = [log_m0, log_m1]
    for j in range(2, k + 1):
        out.append(np.logaddexp(log_mu + out[j - 1], math.log(j - 1) + out[j - 2]))
    return out[: k + 1]


def _log_binom(k: int) -> np.ndarray:
    j = np.arange(k + 1, dtype=np.float64)
    return gammaln(k + 1.0) - gammaln(j + 1.0) - gammaln(k - j + 1.0)


def _log_var_int_mean(log_t: np.ndarray, k: int) -> np.ndarray:
    """Logarithm of Var/σ^{2k} of σ^k He_k(ṽ/σ) at t = v/σ ([FCD+24] Thm 4.9, transformation.md §2).

    Var = Σ_{i=0}^{k−1} C(k,i)² (k−i)! σ^{2(k−i)} v^{2i}, summed in log space.
    """
    i = np.arange(k, dtype=np.float64)[:, None]
    lc = _log_binom(k)[:k, None]
    with np.errstate(invalid="ignore"):
        pw = np.where(i == 0, 0.0, 2.0 * i * log_t[None, :])
    return logsumexp(2.0 * lc + gammaln(k - i + 1.0) + pw, axis=0)


def _log_var_int_median(t: np.ndarray, log_t: np.ndarray, k: int) -> np.ndarray:
    """Logarithm of Var/σ^{2k} of sign(X)|X|^k for X ~ N(t, 1), integer k (all terms non-negative).

    Odd k: X^k = Σ_j c_j He_j(Z) with c_j = C(k,j)·E[X^{k−j}] (Gaussian integration by parts:
    E[F(Z) He_j(Z)] = E[F^{(j)}(Z)]), so Var = Σ_{j≥1} j!·c_j²; the raw moments of N(t, 1) with
    t ≥ 0 have only non-negative terms. Even k: sign(X)X^k = X^k − 2·X^k·1{X<0}, which gives
    Var = Var[X^k] + 4·N·(E[X^k] − N) with N = E[X^k·1{X<0}] = E[X^k] − M_k(t),
    M_k(t) = E[X^k·1{X>0}]. N ≤ e^(−t²/2)·E[X^k] and E[X^k]²/Var[X^k] ≲ (t + √k)²/k², so the
    term is negligible for t > 12 and dropped there; below, computing N as a difference costs
    an absolute error ≲ 4·eps·(t + √k)²/k² ≤ 1e-13 relative to the variance.
    """
    zero = np.zeros_like(t)
    lmu = _log_moment_recursion(zero, log_t, log_t, k)
    j = np.arange(1, k + 1)
    lc = _log_binom(k)
    terms = np.stack([gammaln(jj + 1.0) + 2.0 * lc[jj] + 2.0 * lmu[k - jj] for jj in j])
    log_var = logsumexp(terms, axis=0)
    if k % 2 == 0:
        tc = np.minimum(t, _EVEN_K_CUTOFF + 1.0)
        log_phi = -0.5 * tc * tc - _LOG_SQRT_2PI
        lm0 = log_ndtr(tc)
        with np.errstate(divide="ignore"):
            lm1 = np.logaddexp(np.log(tc) + lm0, log_phi)
            lmk = _log_moment_recursion(lm0, lm1, np.log(tc), k)[k]
            diff = np.minimum(lmk - lmu[k], 0.0)
            log_n = lmu[k] + np.log(-np.expm1(diff))
        log_n = np.where(t <= _EVEN_K_CUTOFF, log_n, -np.inf)
        log_var = np.logaddexp(log_var, math.log(4.0) + log_n + lmk)
    return log_var


@lru_cache(maxsize=8)
def _legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(n)


def _log_sd_frac_median(t: np.ndarray, log_t: np.ndarray, k: float) -> np.ndarray:
    """Logarithm of sd/σ^k of sign(X)|X|^k for X ~ N(t, 1), real k ≥ 1, by Gauss–Legendre rule.

    The integrals over z (X = t + z) run over [−L, L], L = 10 + √(2k) (the neglected Gaussian
    tail is below 1e-20 relatively), split at the kink z = −t into two panels of ``n`` nodes.
    The integrand is centred at its value at z = 0 and scaled by W = max(t, 1)^k, computed with
    ``expm1``/``log1p``, so Var = E[D²] − E[D]² has no harmful cancellation. The endpoint
    singularity |X|^k limits the rule to algebraic convergence O(n^(−2k−2)); with
    n = max(128, 6L) nodes per panel the relative error of the sd is below 1e-9 (worst near
    k = 1.1, t = 1; checked against adaptive quadrature for k in [1.01, 50.5], t in [0, 1e8]).
    """
    L = 10.0 + math.sqrt(2.0 * k)
    n = max(128, int(math.ceil(6.0 * L)))
    xg, wg = _legendre(n)
    out = np.empty_like(t)
    step = max(1, _CHUNK_ELEMENTS // (2 * n))
    for s in range(0, t.size, step):
        tt = t[s:s + step, None]
        lt = log_t[s:s + step, None]
        cut = -np.minimum(tt, L)
        # two panels: [-L, cut] and [cut, L]
        z = np.concatenate([-L + (cut + L) * (xg + 1.0) * 0.5,
                            cut + (L - cut) * (xg + 1.0) * 0.5], axis=1)
        w = np.concatenate([(cut + L) * 0.5 * wg, (L - cut) * 0.5 * wg], axis=1)
        w = w * np.exp(-0.5 * z * z - _LOG_SQRT_2PI)
        x = tt + z
        big = tt >= 1.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # t >= 1: scale by t^k; positive side as t^k·expm1(k·log1p(z/t)) / t^k
            d_big_pos = np.expm1(k * np.log1p(z / np.where(big, tt, 1.0)))
            d_big_neg = -np.exp(k * (np.log(np.abs(x)) - lt)) - 1.0
            # t < 1: scale 1; direct formula (no cancellation beyond O(1) absolute)
            tk = np.where(big, 0.0, tt) ** k
            d_small = np.sign(x) * np.abs(x) ** k - tk
        d = np.where(big, np.where(x > 0, d_big_pos, d_big_neg), d_small)
        d = np.where(w > 0, d, 0.0)
        m1 = np.sum(w * d, axis=1)
        m2 = np.sum(w * d * d, axis=1)
        var = np.maximum(m2 - m1 * m1, 0.0)
        with np.errstate(divide="ignore"):
            out[s:s + step] = (k * np.maximum(log_t[s:s + step], 0.0) + 0.5 * np.log(var))
    return out


#: The σ (transformed space) a transformation mechanism can release with
#: (`TransformationMechanism.check_releasable`).
SIGMA_RANGE = (1e-150, 1e100)


class TransformationMechanism(Mechanism):
    """Release ``g(f(q + a) + N(0, σ²))`` for a concave, strictly increasing ``f`` (001 Alg. 1).

    Subclasses define ``f`` (``_f``), its monotone inverse extended to ℝ (``_finv``), the
    mean-unbiased estimator and the exact standard deviations. The PRzCDP policy is
    ρ(Δ) = (f(Δ + a) − f(a))²/(2σ²) (Thm 4.4); the noise is Gaussian, so there is no pure (PRDP)
    guarantee. Cell totals must be non-negative.

    Args:
        sigma: Noise standard deviation in transformed space, > 0.
        offset: The offset ``a`` (public; never derive it from the data).
        estimator: ``"mean"`` (mean-unbiased) or ``"median"`` (median-unbiased).

    Example:
        >>> m = RootTransform(k=2, sigma=1.0, offset=1.0)
        >>> isinstance(m, TransformationMechanism), m.requires_nonnegative, m.unbiased
        (True, True, 'mean')
    """

    family = "transformation"
    gaussian_dp = True
    pure = False
    requires_nonnegative = True

    def __init__(self, sigma: float, offset: float, estimator: str) -> None:
        """Store the parameters that the subclass has already checked."""
        # subclasses validate and set sigma, offset, estimator before calling this
        self.sigma = float(sigma)
        self.offset = float(offset)
        self.estimator = estimator
        self.unbiased = estimator

    def check_releasable(self) -> None:
        """Refuse a σ the release cannot compute with (public parameters only).

        σ must lie in `SIGMA_RANGE` (1e-150 to 1e100), far beyond any useful value on either
        side: below it the interval's and sd's formulas underflow (σ² is 0 in doubles), above
        it the back-transformed noise overflows a double. Releases (and spec checks) call
        this before any data is read.

        Raises:
            InvalidParameterError: With σ, the allowed range and the fix.

        Example:
            >>> from tabdp.mechanisms import LogTransform
            >>> LogTransform(sigma=0.5, offset=1.0).check_releasable()
            >>> try:
            ...     LogTransform(sigma=1e-200, offset=1.0).check_releasable()
            ... except Exception as e:
            ...     print(str(e)[:45])
            LogTransform: sigma=1e-200 is outside the ran
        """
        lo, hi = SIGMA_RANGE
        if not lo <= self.sigma <= hi:
            raise InvalidParameterError(
                f"{type(self).__name__}: sigma={self.sigma:g} is outside the range the release "
                f"can compute with ({lo:g} to {hi:g}): "
                + ("its variance underflows to 0" if self.sigma < lo else
                   "the back-transformed noise overflows a double")
                + ".\nHint: sigma is the noise's standard deviation in transformed space "
                "(useful values are about 0.01 to 2); calibrate it from loss targets "
                "(tabdp.calibrate) or choose one in that range.")

    # -- hooks --------------------------------------------------------------------------------
    def sum_law(self) -> LawOfSums:
        """Transformation mechanisms have none: their cell errors are not identically distributed.

        Raises:
            InvalidParameterError: Always (rollups use the normal approximation instead).

        Example:
            >>> from tabdp.mechanisms import LogTransform
            >>> LogTransform(sigma=0.5, offset=1.0).sum_law()
            Traceback (most recent call last):
            ...
            tabdp.exceptions.InvalidParameterError: LogTransform is a transformation mechanism; ...
        """
        raise InvalidParameterError(
            f"{type(self).__name__} is a transformation mechanism; its cell errors "
            "are not identically distributed (the noise is added on a transformed scale), so the "
            "sum has no fixed law.\nHint: use rollup(), which gives transformation mechanisms the "
            "normal approximation z * sqrt(sum of sd^2).")

    @abstractmethod
    def _f(self, x: np.ndarray) -> np.ndarray:
        """The transformation at ``x = q + a``."""

    @abstractmethod
    def _finv(self, y: np.ndarray) -> np.ndarray:
        """Strictly increasing extension of f⁻¹ to ℝ (the median-unbiased estimator plus a)."""

    @abstractmethod
    def _g_mean(self, y: np.ndarray) -> np.ndarray:
        """Mean-unbiased estimator g(ṽ)."""

    @abstractmethod
    def _policy_gap(self, sensitivity: np.ndarray) -> np.ndarray:
        """f(Δ + a) − f(a) ≥ 0, computed without cancellation."""

    @abstractmethod
    def _half_width(self, center: np.ndarray, h: float | np.ndarray) -> np.ndarray:
        """(f⁻¹(c + h) − f⁻¹(c − h))/2, computed without cancellation."""

    @abstractmethod
    def _sd(self, q: np.ndarray) -> np.ndarray:
        """Exact sd of the chosen estimator at true values ``q`` (validated, ≥ 0)."""

    @abstractmethod
    def _mp_f(self, x: Any, mp: Any) -> Any:
        """``f(x)`` in mpmath at the working precision (relative error of a few ulps)."""

    @abstractmethod
    def _f_error(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Absolute error bound of the float64 ``v = _f(x)``, ``x = fl(q + a)``, as f(q + a)."""

    @abstractmethod
    def _f_slope(self, y: np.ndarray) -> np.ndarray:
        """``f'(y)`` for ``y > 0`` (decreasing: f is concave), within a few ulps."""

    def _conversion_error(self, x: np.ndarray, terr: np.ndarray) -> np.ndarray:
        """Bound on ``|f(T + a) − f(fl(T) + a)|`` from ``|T − fl(T)| <= terr`` (0 where exact).

        f is concave and increasing, so the change is at most ``terr·f'(y_min)`` with
        ``y_min = fl(T) + a − terr`` (bounded below by ``x(1 − 4u) − terr``, ``x = fl(fl(T) + a)``);
        the factor 2 covers the float evaluation of the bound. ``inf`` where ``y_min <= 0``
        (then the cell is decided exactly).
        """
        with np.errstate(all="ignore"):
            ymin = x * (1.0 - 4.0 * _U) - terr
            slope = self._f_slope(np.where(ymin > 0, ymin, 1.0))
            conv = np.where(ymin > 0, 2.0 * terr * slope, np.inf)
        return np.where(terr > 0, conv, 0.0)

    def default_grid(self) -> float:
        """Default grid in transformed space: the largest power of ten ``<= 0.02·σ``.

        Returns:
            The grid step (of ``ṽ``, not of the estimate).

        Example:
            >>> LogTransform(sigma=0.5, offset=1.0).default_grid()
            0.01
        """
        return _exact.default_grid(self.sigma)

    # -- public API ---------------------------------------------------------------------------
    def transform(self, values: ArrayLike) -> np.ndarray:
        """The noiseless transformed values ``v = f(q + a)``.

        Args:
            values: Non-negative cell totals.

        Returns:
            ``f(q + a)``, one per value (flattened to 1-D).

        Raises:
            DataValidationError: If a value is NaN, infinite or negative.

        Example:
            >>> RootTransform(k=2, sigma=1.0, offset=0.0).transform([4.0, 9.0]).tolist()
            [2.0, 3.0]
        """
        return self._f(self._prepare(values) + self.offset)

    def estimate(self, noisy: ArrayLike) -> np.ndarray:
        """Apply the mechanism's estimator ``g`` to noisy transformed values ``ṽ``.

        Args:
            noisy: Values of ``ṽ = f(q + a) + σZ`` (any reals).

        Returns:
            The estimates ``g(ṽ)``.

        Example:
            >>> RootTransform(k=2, sigma=1.0, offset=0.0).estimate([3.0]).tolist()  # 3² − 1
            [8.0]
        """
        y = np.asarray(noisy, dtype=np.float64)
        if self.estimator == "mean":
            return self._g_mean(y)
        return self.median_estimate(y)

    def median_estimate(self, noisy: ArrayLike) -> np.ndarray:
        """The median-unbiased estimator ``f⁻¹(ṽ) − a`` (extended monotonically to ℝ).

        It is strictly increasing and ``ṽ`` has median ``f(q + a)``, so
        P(estimate ≤ q) = 1/2 exactly.

        Args:
            noisy: Values of ``ṽ``.

        Returns:
            The median-unbiased estimates.

        Example:
            >>> RootTransform(k=2, sigma=1.0, offset=1.0).median_estimate([-2.0, 3.0]).tolist()
            [-5.0, 8.0]
        """
        return self._finv(np.asarray(noisy, dtype=np.float64)) - self.offset

    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRzCDP policy ρ(Δ) = (f(Δ + a) − f(a))²/(2σ²) ([FCD+24] Thm 4.4), vectorized.

        Computed without cancellation, so tiny Δ keep full relative accuracy.

        Args:
            sensitivity: Per-record sensitivities (their absolute values are used).

        Returns:
            PRzCDP losses.

        Example:
            >>> float(LogTransform(sigma=1.0, offset=1.0).rho(math.e - 1.0))
            0.5
        """
        d = _abs_delta(sensitivity)
        if self._gap_is_delta():   # f(Δ) − f(0) = Δ: (Δ/σ)²/2 rounded up, exact stays exact
            return half_square_up(div_up(d, self.sigma))
        gap = self._policy_gap(d)
        with np.errstate(over="ignore"):
            gap /= self.sigma   # (gap/σ)²/2: gap² and σ² under/overflow where gap/σ does not
            gap *= gap
            gap *= 0.5
        # rounded up by a bound on the float error of the gap (a few ulps, more where expm1
        # amplifies it), so a reported loss is never below the exact one
        return inflate(gap, self._gap_ulps(d), d > 0)

    def _gap_is_delta(self) -> bool:
        """Whether f(Δ + a) − f(a) = Δ (the identity transformation at a = 0)."""
        return False

    def _gap_ulps(self, sensitivity: np.ndarray) -> Any:
        """Ulps (plus one) covering the float error of ρ computed from `_policy_gap`."""
        return 16.0

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """``inf`` for Δ > 0 (Gaussian noise has no pure guarantee), 0 at Δ = 0.

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> RootTransform(k=4, sigma=2.0).epsilon([0.0, 3.0]).tolist()
            [0.0, inf]
        """
        return not_pure(sensitivity)

    def sd_at(self, values: ArrayLike) -> np.ndarray:
        """Exact standard deviation of the estimator when the true totals are ``values``.

        Args:
            values: Hypothetical non-negative true totals.

        Returns:
            Standard deviations, shaped like ``values``.

        Raises:
            DataValidationError: If a value is NaN, infinite or negative.

        Example:
            >>> RootTransform(k=2, sigma=1.0).sd_at([4.0]).tolist()   # √(2σ⁴ + 4σ²q)
            [4.242640687119285]
        """
        shape = np.shape(values)
        return self._sd(self._prepare(values)).reshape(shape)

    def moe_at(self, values: ArrayLike, level: float = DEFAULT_LEVEL,
               grid: float | None = None) -> np.ndarray:
        """Planning margin of error: the interval half-width at the central draw ṽ = f(q + a).

        That is ``(f⁻¹(v + h) − f⁻¹(v − h))/2`` with ``v = f(q + a)``,
        ``h = Φ⁻¹((1 + level)/2)·σ + g/2`` and ``g`` the transformed-space grid. The realized
        half-width grows with the draw: for the log transform this value is its exact median;
        for roots it is the half-width of a typical (central) draw.

        Args:
            values: Hypothetical non-negative true totals.
            level: Confidence level.
            grid: The release's transformed-space grid (None:
                [`default_grid`][tabdp.mechanisms.TransformationMechanism.default_grid]).

        Returns:
            Half-widths, shaped like ``values``.

        Example:
            >>> round(float(RootTransform(k=1, sigma=1.0).moe_at([5.0])[0]), 3)   # 1.645 + 0.005
            1.65
        """
        level = check_level(level)
        g = _exact.as_grid(self.default_grid() if grid is None else grid, "moe_at")
        shape = np.shape(values)
        v = self._f(self._prepare(values) + self.offset)
        h = float(ndtri(0.5 + 0.5 * level)) * self.sigma + float(np.max(g.halfstep(v), initial=0))
        return self._half_width(v, h).reshape(shape)

    def release_table(self, values: ArrayLike, rng: Any = None,
                      level: float = DEFAULT_LEVEL, grid: float | None = None) -> ReleasedValues:
        """Release ``g(ṽ)``, ``ṽ = round_grid(f(q + a) + σZ)``, with sd, moe and an interval.

        * ``ṽ``: the exact noisy transformed value rounded to the public grid (float-safe);
        * ``estimate``: the chosen estimator ``g(ṽ)``;
        * ``sd``: the exact sd of the estimator, plugged in at ``q̂ = max(f⁻¹(ṽ) − a, 0)``
          (the median-unbiased estimate, clipped at 0 since q ≥ 0);
        * ``lower``, ``upper``: ``f⁻¹(ṽ ∓ h) − a``, ``h = zσ + grid/2``,
          ``z = Φ⁻¹((1 + level)/2)``: the Gaussian pivot inverted in transformed space and
          widened by half a grid step, so P(lower ≤ q ≤ upper) ≥ ``level`` whatever the
          estimator (the interval is not centred on the estimate);
        * ``moe``: ``(upper − lower)/2``, computed without cancellation.

        Args:
            values: Exact non-negative cell totals (1-D float64), or an
                [`ExactTotals`][tabdp.mechanisms.ExactTotals]: then ``f`` is applied to the exact
                totals (``ṽ = round_grid(f(T + a) + σZ)`` for the exact T), and a negative total
                is released as 0 (``max(T, 0)``: a public rule that keeps the policy, since it
                moves neighbouring totals no further apart; nothing is refused).
            rng: Randomness (default: secure OS randomness; int seeds for tests only).
            level: Confidence level of the interval.
            grid: Public grid step of ``ṽ`` in transformed space; None:
                [`default_grid`][tabdp.mechanisms.TransformationMechanism.default_grid].

        Returns:
            Estimates with sd, moe and interval (``grid`` records the transformed-space step).

        Raises:
            DataValidationError: If a float64 value is NaN, infinite or negative (never for an
                [`ExactTotals`][tabdp.mechanisms.ExactTotals]).
            InvalidParameterError: For an invalid grid.

        Example:
            >>> m = LogTransform(sigma=0.1, offset=1.0, estimator="median")
            >>> r = m.release_table([100.0, 1000.0], rng=0, level=0.9)
            >>> bool(np.all((r.lower < r.estimate) & (r.estimate < r.upper))), r.grid
            (True, 0.001)
        """
        level = check_level(level)
        g = self.default_grid() if grid is None else grid
        a = self.offset
        if isinstance(values, ExactTotals):
            # exact totals, negative ones clamped at 0 (a public rule, see the class notes)
            neg = np.array([k < 0 for k in values.numer], dtype=bool)
            q = np.where(neg, 0.0, values.approx)
            terr = np.where(neg, 0.0, values.error)
            x = q + a
            v = self._f(x)
            cerr = self._f_error(x, v) + self._conversion_error(x, terr)
            a_frac = Fraction(a)

            def exact_center(i: int, mp: Any) -> Any:
                t = values.fraction(i)
                y = (t if t > 0 else Fraction(0)) + a_frac           # exact q + a
                return self._mp_f(mp.mpf(y.numerator) / y.denominator, mp)
        else:
            q = self._prepare(values)
            x = q + a
            v = self._f(x)
            cerr = self._f_error(x, v)

            def exact_center(i: int, mp: Any) -> Any:
                return self._mp_f(mpmath.fadd(mp.mpf(float(q[i])), mp.mpf(a), exact=True), mp)

        draw = _exact.round_noisy(_GaussianNoise(self.sigma), v, g, rng,
                                  center_error=cerr, exact_center=exact_center,
                                  owner=f"{type(self).__name__}.release")
        vt = draw.values
        est = self.estimate(vt)
        q_hat = np.maximum(self.median_estimate(vt), 0.0)
        sd = self._sd(q_hat)
        h = float(ndtri(0.5 + 0.5 * level)) * self.sigma + draw.grid.halfstep(vt)
        lower = self.median_estimate(vt - h)
        upper = self.median_estimate(vt + h)
        moe = self._half_width(vt, h)
        return ReleasedValues(est, sd, moe, lower, upper, level, grid=draw.grid.describe(),
                              fallbacks=draw.fallbacks)


@registry.mechanism('root', aliases=('root_transform',),
                    tags=('spec', 'calibrate', 'transformation'), rank=5)
class RootTransform(TransformationMechanism):
    """k-th root transformation mechanism, ``f(x) = x^(1/k)`` ([FCD+24] §4.1, Cor 4.5).

    PRzCDP policy ρ(Δ) = ((Δ + a)^(1/k) − a^(1/k))²/(2σ²): like Δ^(2/k) for large Δ (k = 2:
    linear, k = 4: √Δ). ``k = 1`` is the Gaussian mechanism.

    Estimators:

    * ``"mean"`` (integer k only): ``σ^k He_k(ṽ/σ) − a`` (Thm 4.9), evaluated by the recursion
      h₀ = 1, h₁ = x, h_{j+1} = x·h_j − j·σ²·h_{j−1} (no overflow of He_k);
      Var = Σ_{i<k} C(k,i)²(k−i)! σ^{2(k−i)} (q+a)^{2i/k}. Near ṽ ≈ 0 the polynomial cancels
      heavily: its absolute error stays small next to the sd, its relative error does not.
    * ``"median"`` (any real k ≥ 1): ``sign(ṽ)|ṽ|^k − a``.

    Args:
        k: Root order, real ≥ 1 (whole numbers for the mean estimator).
        sigma: Noise standard deviation in transformed space, > 0.
        offset: Offset a ≥ 0.
        estimator: ``"mean"`` or ``"median"``.

    Raises:
        InvalidParameterError: For k < 1, σ ≤ 0, a < 0, an unknown estimator, or a fractional k
            with ``estimator="mean"``.

    Example:
        >>> m = RootTransform(k=4, sigma=2.0)        # [FCD+24] Example 4.6: ρ = √Δ / 8
        >>> float(m.rho(10000.0)), m.params()
        (12.5, {'k': 4.0, 'sigma': 2.0, 'offset': 0.0, 'estimator': 'mean'})
    """

    policy_formula = "rho(D) = ((D + a)^(1/k) - a^(1/k))^2 / (2 sigma^2)"

    def __init__(self, k: float, sigma: float, offset: float = 0.0,
                 estimator: str = "mean") -> None:
        """Check ``k``, ``sigma``, ``offset`` and ``estimator``."""
        owner = "RootTransform"
        self.k = check_real("k", k, owner=owner, ge=1.0,
                            hint="k is the root order: k = 2 (square root), k = 4 (fourth root)")
        sigma = check_real("sigma", sigma, owner=owner, gt=0.0,
                           hint="sigma is the noise standard deviation on the root scale")
        offset = check_real("offset", offset, owner=owner, ge=0.0,
                            hint="offset (a in the paper) must be >= 0; offset = 0.0 is the "
                                 "usual choice")
        estimator = _check_estimator(estimator, owner)
        self._kint: int | None = int(self.k) if self.k.is_integer() else None
        if estimator == "mean" and self._kint is None:
            raise InvalidParameterError(
                f"{owner}: estimator='mean' needs a whole-number k; got k={k!r}. The "
                "mean-unbiased estimator σ^k He_k(x/σ) − a exists only for integer k.\n"
                "Hint: use estimator='median' (median-unbiased, any real k >= 1), or round k.")
        super().__init__(sigma, offset, estimator)

    def _f(self, x: np.ndarray) -> np.ndarray:
        if self.k == 1.0:
            return x
        if self.k == 2.0:
            return np.sqrt(x)
        return np.power(x, 1.0 / self.k)

    def _mp_f(self, x: Any, mp: Any) -> Any:
        if self.k == 1.0:
            return +x
        if self.k == 2.0:
            return mp.sqrt(x)
        if self._kint is not None:
            return mp.root(x, self._kint)
        return mp.zero if x == 0 else mp.exp(mp.log(x) / mp.mpf(self.k))

    def _f_error(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        # x = fl(q + a) (relative error u) and v = fl(x^(1/k)): k = 1 is that rounding; sqrt is
        # correctly rounded; pow(x, fl(1/k)) adds the exponent's rounding, |ln x|·u/k relative,
        # and libm pow's ≤ 4 ulps. Bounds are doubled.
        av = np.abs(v)
        if self.k == 1.0:
            return 2.0 * _U * av + 1e-300
        if self.k == 2.0:
            return 4.0 * _U * av + 1e-300
        with np.errstate(divide="ignore"):
            lx = np.where(x > 0, np.abs(np.log(np.where(x > 0, x, 1.0))), 0.0)
        return av * (2.0 * _U * (lx + 1.0) / self.k + 16.0 * _U) + 1e-300

    def _f_slope(self, y: np.ndarray) -> np.ndarray:
        if self.k == 1.0:
            return np.ones(np.shape(y))
        with np.errstate(over="ignore"):
            return np.power(y, 1.0 / self.k - 1.0) / self.k

    def _finv(self, y: np.ndarray) -> np.ndarray:
        if self.k == 1.0:
            return y.copy()
        with np.errstate(over="ignore"):
            return np.sign(y) * np.abs(y) ** self.k

    def _g_mean(self, y: np.ndarray) -> np.ndarray:
        assert self._kint is not None
        s2 = self.sigma**2
        h_prev = np.ones_like(y)
        h = y.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            for j in range(1, self._kint):
                h, h_prev = y * h - j * s2 * h_prev, h
        return h - self.offset

    def _gap_is_delta(self) -> bool:
        return self.k == 1.0 and self.offset == 0.0

    def _gap_ulps(self, sensitivity: np.ndarray) -> Any:
        if self.offset == 0.0:
            return 16.0
        # a^(1/k)·expm1(lk) (or e^(lk + ln a/k) − a^(1/k)): the error of lk is amplified by lk
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            lk = _log1p_ratio(sensitivity, self.offset) / self.k
        # beyond lk = 700 the gap is e^(lk + ln a/k) − a^(1/k): ln a's error adds in
        return 16.0 * (3.0 + lk + np.where(lk < 700.0, 0.0, abs(math.log(self.offset)) / self.k))

    def _policy_gap(self, sensitivity: np.ndarray) -> np.ndarray:
        k, a = self.k, self.offset
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            if a == 0.0:
                return sensitivity if k == 1.0 else np.power(sensitivity, 1.0 / k)
            lk = _log1p_ratio(sensitivity, a) / k
            ak = a ** (1.0 / k)
            safe = lk < 700.0
            return np.where(safe, ak * np.expm1(np.where(safe, lk, 0.0)),
                            np.exp(lk + math.log(a) / k) - ak)

    def _half_width(self, center: np.ndarray, h: float | np.ndarray) -> np.ndarray:
        k = self.k
        if k == 1.0:
            return np.full(np.shape(center), h)
        c = np.abs(center)  # sign(x)|x|^k is odd, so the width depends on |c| only
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            u = h / c
            inner = c**k * 0.5 * (np.expm1(k * np.log1p(u))
                                  - np.expm1(k * np.log1p(-np.minimum(u, 0.5))))
            outer = 0.5 * ((c + h) ** k + np.abs(h - c) ** k * np.sign(h - c))
        return np.where(u < 0.5, inner, outer)

    def _sd(self, q: np.ndarray) -> np.ndarray:
        k = self.k
        if k == 1.0:
            return np.full(q.shape, self.sigma)
        v = self._f(q + self.offset)
        log_sigma = math.log(self.sigma)
        with np.errstate(divide="ignore", over="ignore"):
            log_t = np.log(v) - log_sigma
            t = np.exp(log_t)
        if self._kint is None:
            log_sd = _log_sd_frac_median(t, log_t, k)
        else:
            # O(k) arrays per value: evaluate in chunks to bound memory for large k
            log_sd = np.empty_like(t)
            step = max(1, _CHUNK_ELEMENTS // (self._kint + 1))
            for s in range(0, t.size, step):
                sl = slice(s, s + step)
                if self.estimator == "mean":
                    log_sd[sl] = 0.5 * _log_var_int_mean(log_t[sl], self._kint)
                else:
                    log_sd[sl] = 0.5 * _log_var_int_median(t[sl], log_t[sl], self._kint)
        with np.errstate(over="ignore"):
            return np.exp(k * log_sigma + log_sd)

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> RootTransform(k=2.5, sigma=1.0, offset=1.0, estimator="median").params()
            {'k': 2.5, 'sigma': 1.0, 'offset': 1.0, 'estimator': 'median'}
        """
        return {"k": self.k, "sigma": self.sigma, "offset": self.offset,
                "estimator": self.estimator}


@registry.mechanism('log', aliases=('log_transform',),
                    tags=('spec', 'calibrate', 'transformation'), rank=6)
class LogTransform(TransformationMechanism):
    """Log transformation mechanism, ``f(x) = ln x`` with offset a > 0 ([FCD+24] §4.2, Cor 4.7).

    PRzCDP policy ρ(Δ) = ln(1 + Δ/a)²/(2σ²): grows like (ln Δ)², the slowest transformation.

    Estimators:

    * ``"mean"``: ``exp(ṽ − σ²/2) − a`` (Thm 4.9), sd = √(e^{σ²} − 1)·(q + a);
    * ``"median"``: ``exp(ṽ) − a`` (lognormal), sd = √((e^{σ²} − 1)·e^{σ²})·(q + a).

    Args:
        sigma: Noise standard deviation on the log scale, > 0 (roughly the relative error).
        offset: Offset a > 0.
        estimator: ``"mean"`` or ``"median"``.

    Raises:
        InvalidParameterError: For σ ≤ 0, a ≤ 0 or an unknown estimator.

    Example:
        >>> m = LogTransform(sigma=2.0, offset=1.0)   # [FCD+24] Example 4.8: ρ = ln(1 + Δ)² / 8
        >>> m.rho([5, 5, 10, 20, 30]).round(1).tolist()
        [0.4, 0.4, 0.7, 1.2, 1.5]
    """

    policy_formula = "rho(D) = (ln(D + a) - ln(a))^2 / (2 sigma^2)"

    def __init__(self, sigma: float, offset: float, estimator: str = "mean") -> None:
        """Check ``sigma``, ``offset`` and ``estimator``."""
        owner = "LogTransform"
        sigma = check_real("sigma", sigma, owner=owner, gt=0.0,
                           hint="sigma is the noise standard deviation on the log scale")
        offset = check_real("offset", offset, owner=owner, gt=0.0,
                            hint="ln(total + offset) needs offset > 0 for empty cells (offset "
                                 "is a in the paper); e.g. offset = 1.0")
        estimator = _check_estimator(estimator, owner)
        super().__init__(sigma, offset, estimator)

    def _f(self, x: np.ndarray) -> np.ndarray:
        return np.log(x)

    def _mp_f(self, x: Any, mp: Any) -> Any:
        return mp.log(x)

    def _f_error(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        # fl(q + a) = (q + a)(1 + δ) shifts ln by ≤ 1.01u; libm log ≤ 4 ulps ≤ 8u|v|; doubled
        return 4.0 * _U + 16.0 * _U * np.abs(v) + 1e-300

    def _f_slope(self, y: np.ndarray) -> np.ndarray:
        return 1.0 / np.asarray(y, dtype=np.float64)

    def _finv(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.exp(y)

    def _g_mean(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.exp(y - 0.5 * self.sigma**2) - self.offset

    def _policy_gap(self, sensitivity: np.ndarray) -> np.ndarray:
        return _log1p_ratio(sensitivity, self.offset)

    def _half_width(self, center: np.ndarray, h: float | np.ndarray) -> np.ndarray:
        # (e^{c+h} − e^{c−h})/2 = e^c·sinh(h), in logs to avoid intermediate overflow
        hh = np.asarray(h, dtype=np.float64)
        log_sinh = np.where(hh < 300.0, np.log(np.sinh(np.minimum(hh, 300.0))),
                            hh - math.log(2.0))
        with np.errstate(over="ignore"):
            return np.exp(np.asarray(center, dtype=np.float64) + log_sinh)

    def _sd(self, q: np.ndarray) -> np.ndarray:
        s2 = self.sigma**2
        # log(e^{s2} − 1) without overflow
        log_em1 = s2 + math.log1p(-math.exp(-s2)) if s2 > 30.0 else math.log(math.expm1(s2))
        log_sd = 0.5 * log_em1 + (0.5 * s2 if self.estimator == "median" else 0.0)
        with np.errstate(over="ignore"):
            return np.exp(log_sd + np.log(q + self.offset))

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> LogTransform(sigma=0.5, offset=1.0).params()
            {'sigma': 0.5, 'offset': 1.0, 'estimator': 'mean'}
        """
        return {"sigma": self.sigma, "offset": self.offset, "estimator": self.estimator}
