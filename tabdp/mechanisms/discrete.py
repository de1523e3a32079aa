"""Exact integer mechanisms for counts: discrete Gaussian and discrete Laplace noise.

Both release ``q + Z`` for an integer query value ``q`` and integer noise ``Z`` drawn exactly with
the samplers of Canonne, Kamath & Steinke (2020) (:mod:`tabdp.noise.discrete`): no floating point
decides the output, which closes the precision attacks on float noise (Mironov 2012).

* :class:`DiscreteGaussian` — ``Z`` discrete Gaussian with parameter σ: ρ(Δ) = Δ²/(2σ²) for
  integer Δ (CKS Thm 4), with an exact (ε, δ) policy (CKS Thm 7);
* :class:`DiscreteLaplace` — ``Z`` discrete Laplace with scale t: pure, ε(Δ) = Δ/t for integer Δ.

**Integer inputs only.** The guarantees hold for neighbouring values that differ by an integer Δ:
the outputs of ``q`` and ``q + Δ`` then live on the same lattice. For a non-integer Δ they live on
different lattices (``q + Z`` and ``q + Δ + Z`` never take the same value), so ρ = ε = ∞; the
policies return ``inf`` there. Values must be integers held in float64 (|q| < 2**53); anything else
is refused before noise is drawn. The estimates are ``q + Z`` computed exactly in int64 and
returned as float64 (exact below 2**53; beyond, the float64 rounding is a post-processing of the
exact integer and costs no privacy).

Example:
    >>> m = DiscreteGaussian(sigma=2.0)
    >>> float(m.rho(2)), float(m.rho(0.5))
    (0.5, inf)
    >>> r = m.release_table([10.0, 20.0], rng=0)
    >>> bool(np.all(r.estimate == np.round(r.estimate)))
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp.exceptions import DataValidationError
from tabdp.mechanisms._base import (
    DEFAULT_LEVEL,
    Mechanism,
    ReleasedValues,
    check_level,
    not_pure,
    pure_to_zcdp,
)
from tabdp.noise.discrete import DiscreteGaussianNoise, DiscreteLaplaceNoise
from tabdp.rng import as_random_source

__all__ = ["DiscreteAdditiveMechanism", "DiscreteGaussian", "DiscreteLaplace"]

_EXACT_INT = 2.0**53
#: The exact (ε, δ) search aims at δ·(1 − this) so that rounding in the tail sums (relative error
#: far below 1e-9) cannot take the true δ(ε) above δ.
_DELTA_MARGIN = 1e-7
#: Below this δ the exact search is not used (tail sums near the underflow range); the zCDP
#: conversion still applies.
_MIN_EXACT_DELTA = 1e-280


def _integer_sensitivity(delta: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """|Δ| and a mask of the finite integer values."""
    d = np.abs(np.asarray(delta, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        is_int = np.isfinite(d) & (d == np.floor(d))
    return d, is_int


class DiscreteAdditiveMechanism(Mechanism):
    """Release ``q + Z`` for integer ``q`` and exact integer noise ``Z`` (symmetric).

    Subclasses set :attr:`noise` and the policies. The estimate is mean- and median-unbiased; its
    standard deviation is the noise's; the margin of error is the smallest integer ``h`` with
    ``P(|Z| <= h) >= level``, so the interval ``[est − h, est + h]`` covers the true value with
    probability **at least** ``level`` (a discrete law cannot hit ``level`` exactly).

    Args:
        noise: The integer noise law.

    Example:
        >>> m = DiscreteLaplace(scale=1.0)
        >>> isinstance(m, DiscreteAdditiveMechanism), m.noise.interval_halfwidth(0.9)
        (True, 2)
    """

    unbiased = "mean"

    def __init__(self, noise: DiscreteGaussianNoise | DiscreteLaplaceNoise) -> None:
        self.noise = noise

    def _prepare_integers(self, values: ArrayLike) -> np.ndarray:
        q = self._prepare(values)
        frac = q != np.floor(q)
        if np.any(frac):
            bad = int(frac.sum())
            raise DataValidationError(
                f"{type(self).__name__}.release: {bad} value(s) are not integers; the discrete "
                "mechanisms release integer queries only (non-integer neighbours would have no "
                "privacy guarantee).\nHint: release an integer measure (a count, or a sum of "
                "integer amounts such as whole dollars), round the inputs to integers before "
                "aggregating (public rule), or use a continuous mechanism (Gaussian, Laplace).")
        big = np.abs(q) >= _EXACT_INT
        if np.any(big):
            bad = int(big.sum())
            raise DataValidationError(
                f"{type(self).__name__}.release: {bad} value(s) have magnitude >= 2**53, where "
                "float64 no longer holds every integer exactly.\nHint: rescale the measure "
                "(e.g. thousands of dollars) before aggregating.")
        return q

    def release_table(self, values: ArrayLike, rng: Any = None,
                      level: float = DEFAULT_LEVEL) -> ReleasedValues:
        """Release ``values + Z`` (exact integers) with sd, integer margin of error and interval.

        Args:
            values: Exact cell values; must be integers (float64 holding integers, |q| < 2**53).
            rng: Randomness (default: secure).
            level: Confidence level; the interval's coverage is at least ``level``.

        Returns:
            Estimates with sd, moe and interval.

        Raises:
            DataValidationError: If a value is NaN, infinite, not an integer or >= 2**53.

        Example:
            >>> r = DiscreteGaussian(sigma=1.0).release_table([3.0, 4.0], rng=1, level=0.9)
            >>> r.moe.tolist(), r.sd.round(6).tolist()
            ([2.0, 2.0], [1.0, 1.0])
        """
        level = check_level(level)
        q = self._prepare_integers(values)
        src = as_random_source(rng)
        h = float(self.noise.interval_halfwidth(level))
        z = self.noise.sample(q.shape, src)
        est = (q.astype(np.int64) + z).astype(np.float64)
        sd = np.full(q.shape, self.noise.std())
        moe = np.full(q.shape, h)
        return ReleasedValues(est, sd, moe, est - h, est + h, level)

    def sd_at(self, values: ArrayLike) -> np.ndarray:
        """Standard deviation of the estimate: the noise's, whatever the true value.

        Args:
            values: True values (only their shape matters).

        Returns:
            Standard deviations.

        Example:
            >>> DiscreteLaplace(scale=1.0).sd_at([0.0, 5.0]).round(4).tolist()
            [1.357, 1.357]
        """
        return np.full(np.shape(np.asarray(values, dtype=np.float64)), self.noise.std())

    def moe_at(self, values: ArrayLike, level: float = DEFAULT_LEVEL) -> np.ndarray:
        """Margin of error: the integer half-width ``h`` (coverage ≥ ``level``) for every cell.

        Args:
            values: True values (only their shape matters).
            level: Confidence level.

        Returns:
            Half-widths.

        Example:
            >>> DiscreteGaussian(sigma=10.0).moe_at([0.0], 0.9).tolist()
            [16.0]
        """
        h = float(self.noise.interval_halfwidth(check_level(level)))
        return np.full(np.shape(np.asarray(values, dtype=np.float64)), h)

    def rho(self, delta: ArrayLike) -> np.ndarray:  # pragma: no cover - overridden
        """PRzCDP policy (each subclass gives its own).

        Example:
            >>> float(DiscreteLaplace(scale=1.0).rho(0))
            0.0
        """
        raise NotImplementedError

    def epsilon(self, delta: ArrayLike) -> np.ndarray:  # pragma: no cover - overridden
        """PRDP policy (each subclass gives its own).

        Example:
            >>> float(DiscreteLaplace(scale=1.0).epsilon(2))
            2.0
        """
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """Public parameters (the noise's).

        Example:
            >>> DiscreteLaplace(scale=2.0).params()
            {'scale': 2.0}
        """
        return self.noise.params()


class DiscreteGaussian(DiscreteAdditiveMechanism):
    """Discrete Gaussian mechanism: ``q + Z``, Z exact discrete Gaussian with parameter σ.

    Guarantee (CKS 2020, Thm 4): for integer Δ, D_α(q + Z ‖ q + Δ + Z) ≤ α·Δ²/(2σ²), so
    ρ(Δ) = Δ²/(2σ²); ρ = ∞ for non-integer Δ (different lattices). Not pure (ε = ∞ for Δ > 0).
    Its (ε, δ) profile is computed exactly from the discrete law (:meth:`approx_epsilon`); it is
    *not* the continuous Gaussian's, so :attr:`gaussian_dp` is False.

    Args:
        sigma: σ > 0 (≤ 2**40); int, float (taken exactly) or ``fractions.Fraction``.

    Example:
        >>> m = DiscreteGaussian(sigma=2.0)
        >>> float(m.rho(4)), float(m.epsilon(4)), float(m.epsilon(0))
        (2.0, inf, 0.0)
    """

    family = "discrete_gaussian"
    policy_formula = "rho(D) = D^2 / (2 sigma^2) for integer D; inf for non-integer D"
    noise: DiscreteGaussianNoise

    def __init__(self, sigma: Any) -> None:
        super().__init__(DiscreteGaussianNoise(sigma))
        self.sigma = self.noise.sigma
        self._s2 = float(self.noise.sigma2_exact)

    def rho(self, delta: ArrayLike) -> np.ndarray:
        """ρ(Δ) = Δ²/(2σ²) for integer Δ, ``inf`` otherwise.

        Args:
            delta: Per-record sensitivities.

        Returns:
            PRzCDP losses.

        Example:
            >>> DiscreteGaussian(sigma=1.0).rho([0, 1, 2, 1.5]).tolist()
            [0.0, 0.5, 2.0, inf]
        """
        d, is_int = _integer_sensitivity(delta)
        with np.errstate(invalid="ignore", over="ignore"):
            r = d * d / (2.0 * self._s2)
        return np.where(is_int, r, np.inf)

    def epsilon(self, delta: ArrayLike) -> np.ndarray:
        """``inf`` for Δ > 0 (no pure guarantee), 0 at Δ = 0.

        Args:
            delta: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> DiscreteGaussian(sigma=1.0).epsilon([0, 1]).tolist()
            [0.0, inf]
        """
        return not_pure(delta)

    def delta_at(self, sensitivity: ArrayLike, epsilon: float) -> np.ndarray:
        """Exact δ(ε) of a shift by integer Δ (CKS Thm 7), ``1`` for non-integer Δ.

        δ(ε) = P[Z > εσ²/Δ − Δ/2] − e^ε·P[Z > εσ²/Δ + Δ/2] with Z the discrete Gaussian: the
        hockey-stick divergence between ``q + Z`` and ``q + Δ + Z`` (the loss exceeds ε exactly on
        ``Z > εσ²/Δ − Δ/2``).

        Args:
            sensitivity: Per-record sensitivities Δ.
            epsilon: ε ≥ 0.

        Returns:
            δ for each Δ (0 at Δ = 0).

        Example:
            >>> float(DiscreteGaussian(sigma=1.0).delta_at(1, 0.0)) > 0.38
            True
        """
        d, is_int = _integer_sensitivity(sensitivity)
        eps = np.full(d.shape, float(epsilon))
        out = np.where(is_int, 0.0, 1.0)
        pos = is_int & (d > 0)
        if np.any(pos):
            out[pos] = self._delta_exact(d[pos], eps[pos])
        return out

    def _delta_exact(self, d: np.ndarray, eps: np.ndarray) -> np.ndarray:
        s2 = self._s2
        x1 = eps * s2 / d - 0.5 * d
        x2 = x1 + d
        a = self.noise.sf(x1)
        t2 = self.noise.sf(x2)
        with np.errstate(divide="ignore", over="ignore", under="ignore"):
            # e^ε·P[Z > x2] ≤ P[Z > x1] ≤ 1 mathematically; a tail in the subnormal range is
            # dropped (b = 0 only over-states δ).
            b = np.where(t2 >= 1e-290, np.exp(eps + np.log(np.maximum(t2, 1e-300))), 0.0)
        return np.maximum(a - b, 0.0)

    def approx_epsilon(self, sensitivity: ArrayLike, delta: float) -> np.ndarray:
        """Per-record (ε, δ) policy: exact for the discrete law (CKS Thm 7), by bisection.

        ε(Δ) is the smallest ε with δ(ε) ≤ δ (:meth:`delta_at`), searched to within a relative
        1e-7 of δ on the safe side, and never above the zCDP conversion of ρ(Δ). ``inf`` for
        non-integer Δ, 0 at Δ = 0.

        Args:
            sensitivity: Per-record sensitivities Δ.
            delta: δ in (0, 1).

        Returns:
            ε(Δ) at δ.

        Example:
            >>> m = DiscreteGaussian(sigma=4.0)
            >>> e = float(m.approx_epsilon(1, 1e-6))
            >>> round(e, 4), bool(m.delta_at(1, e) <= 1e-6)
            (1.0634, True)
        """
        from tabdp.privacy.conversions import check_dp_delta, zcdp_epsilon

        dd = check_dp_delta(delta, "DiscreteGaussian.approx_epsilon")
        d, is_int = _integer_sensitivity(sensitivity)
        out = np.where(is_int, 0.0, np.inf)
        pos = is_int & (d > 0)
        if not np.any(pos):
            return out
        uniq, inv = np.unique(d[pos], return_inverse=True)
        zc = zcdp_epsilon(self.rho(uniq), dd)
        best = zc.copy()
        if dd >= _MIN_EXACT_DELTA:
            target = dd * (1.0 - _DELTA_MARGIN)
            lo = np.zeros(uniq.shape)
            hi = np.where(np.isfinite(zc), zc, 0.0)
            ok_hi = np.isfinite(zc) & (self._delta_exact(uniq, hi) <= target)
            zero = self._delta_exact(uniq, lo) <= target
            for _ in range(100):
                mid = 0.5 * (lo + hi)
                good = self._delta_exact(uniq, mid) <= target
                hi = np.where(good, mid, hi)
                lo = np.where(good, lo, mid)
            exact = np.where(zero, 0.0, hi)
            best = np.where(ok_hi, np.minimum(exact, zc), zc)
        out[pos] = best[inv.reshape(-1)]
        return out

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> DiscreteGaussian(sigma=1.5).params()
            {'sigma': 1.5}
        """
        return self.noise.params()


class DiscreteLaplace(DiscreteAdditiveMechanism):
    """Discrete Laplace mechanism: ``q + Z``, P(Z = k) ∝ exp(−|k|/scale), exact.

    Pure: for integer Δ the log-ratio of the two output laws is at most Δ/scale everywhere, so
    ε(Δ) = Δ/scale and ρ(Δ) = ε·tanh(ε/2); both are ``inf`` for non-integer Δ.

    Args:
        scale: Scale > 0 (≤ 2**40); int, float (taken exactly) or ``fractions.Fraction``.

    Example:
        >>> float(DiscreteLaplace(scale=4.0).epsilon(2)), float(DiscreteLaplace(4.0).epsilon(0.5))
        (0.5, inf)
    """

    family = "discrete_laplace"
    pure = True
    policy_formula = ("eps(D) = D / scale for integer D (inf for non-integer D); "
                      "rho = eps * tanh(eps / 2)")

    noise: DiscreteLaplaceNoise

    def __init__(self, scale: Any) -> None:
        super().__init__(DiscreteLaplaceNoise(scale))
        self.scale = self.noise.scale

    def epsilon(self, delta: ArrayLike) -> np.ndarray:
        """ε(Δ) = Δ/scale for integer Δ, ``inf`` otherwise.

        Args:
            delta: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> DiscreteLaplace(scale=2.0).epsilon([0, 1, 3, 0.5]).tolist()
            [0.0, 0.5, 1.5, inf]
        """
        d, is_int = _integer_sensitivity(delta)
        with np.errstate(invalid="ignore"):
            e = d / self.scale
        return np.where(is_int, e, np.inf)

    def rho(self, delta: ArrayLike) -> np.ndarray:
        """ρ(Δ) = ε(Δ)·tanh(ε(Δ)/2) (pure to zCDP).

        Args:
            delta: Per-record sensitivities.

        Returns:
            PRzCDP losses.

        Example:
            >>> round(float(DiscreteLaplace(scale=1.0).rho(1)), 6)
            0.462117
        """
        return pure_to_zcdp(self.epsilon(delta))

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> DiscreteLaplace(scale=0.5).params()
            {'scale': 0.5}
        """
        return self.noise.params()
