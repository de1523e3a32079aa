"""Gaussian and Laplace noise.

Both laws provide the exact-rounding hooks of :mod:`tabdp.noise.exact`: a float64 quantile with
an error bound evaluated once per draw (``_isf_bounds``) and closed-form tails in mpmath
(``_mp_sf``). Error analysis: ``docs/exact-rounding.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_ndtr, ndtr, ndtri

from tabdp._validation import check_real
from tabdp.noise._base import NoiseDistribution

__all__ = ["Gaussian", "Laplace"]

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
_U = 2.0**-53
#: Relative error bound of ``-sigma * ndtri(u / 2)`` (scipy/cephes ndtri: 4.6e-16 claimed;
#: at most 4.4e-16 = 4 ulps measured against mpmath over u in [1e-300, 1]); 512 ulps, a 128x margin.
_GAUSS_ISF_RTOL = 512 * _U
#: Relative error bound of ``-scale * log(u)`` (libm / numpy SIMD log: <= 4 ulp); 64 ulps.
_LAPLACE_ISF_RTOL = 64 * _U


class Gaussian(NoiseDistribution):
    """Normal noise N(0, sigma²); ``sigma`` is the standard deviation.

    Args:
        sigma: Standard deviation, > 0.

    Example:
        >>> g = Gaussian(sigma=3.0)
        >>> g.variance()
        9.0
    """

    name = "gaussian"

    def __init__(self, sigma: float) -> None:
        self.sigma = check_real("sigma", sigma, owner="Gaussian noise", gt=0.0)

    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density. Example: ``Gaussian(1.0).logpdf(0.0)`` is ``-0.9189...``.

        Args:
            x: Points.

        Returns:
            Log densities.

        Example:
            >>> round(float(Gaussian(sigma=1.0).logpdf(0.0)), 4)
            -0.9189
        """
        z = np.asarray(x, dtype=np.float64) / self.sigma
        return -0.5 * z * z - _LOG_SQRT_2PI - np.log(self.sigma)

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        return ndtr(-x / self.sigma)

    def logsf(self, x: ArrayLike) -> np.ndarray:
        """Log survival function (accurate far in the tail).

        Args:
            x: Points.

        Returns:
            ``log P(Z > x)``.

        Example:
            >>> round(float(Gaussian(sigma=1.0).logsf(40.0)), 1)
            -804.6
        """
        return log_ndtr(-np.asarray(x, dtype=np.float64) / self.sigma)

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        return -self.sigma * ndtri(0.5 * u)

    _isf_rtol = _GAUSS_ISF_RTOL

    def _isf_bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One quantile per draw; the decrease over ``[u_lo, u_hi]`` is bounded without another.

        With ``x = m/σ`` and ``u = 2Q(x)``, ``|dm/du| = σ/(2φ(x))``. The Mills ratio
        ``Q(x) < φ(x)/x`` gives ``|dm/du| < σ/(x·u) <= σ/u`` where x ≥ 1 (u ≤ 0.317), and
        ``φ(x) >= φ(1.1) > 0.217`` gives ``|dm/du| < 2.31σ`` where u ≥ 0.27 (x ≤ 1.1); hence
        ``m(u_lo) − m(u_hi) <= σ·(u_hi − u_lo)/min(u_lo, 0.27)``.

        Args:
            u_lo: Lower ends of the uniform intervals.
            u_hi: Upper ends.

        Returns:
            ``(lo, hi)`` bounds on the exact ``|Z|`` quantile over each interval.

        Example:
            >>> lo, hi = Gaussian(sigma=1.0)._isf_bounds(np.array([0.05]), np.array([0.05]))
            >>> bool(lo[0] < 1.959963984540054 < hi[0])
            True
        """
        # (no clean-up passes: a non-finite or NaN bound makes the cell undecided downstream,
        # and a negative lower bound is valid, m >= 0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = np.multiply(u_lo, 0.5)
            ndtri(m, out=m)
            m *= -self.sigma
            lo = np.minimum(u_lo, 0.27)
            np.divide(np.subtract(u_hi, u_lo), lo, out=lo)      # drop / σ
            lo *= -self.sigma * (1.0 + 8.0 * _U)
            lo += m * (1.0 - 2.0 * _GAUSS_ISF_RTOL)
            m *= 1.0 + 2.0 * _GAUSS_ISF_RTOL
        return lo, m

    def _isf_bounds_fine(self, u_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bounds of :meth:`_isf_bounds` for ``u_hi = u_lo + 2**-53``, ``u_lo >= 2**-10``.

        The decrease over the interval, ``σ·2**-53/min(u, 0.27)``, is at most ``2**-43·m`` where
        ``u <= 0.27`` (there ``m >= σ`` and ``u >= 2**-10``) and at most ``4.2e-16·σ`` elsewhere,
        so it is folded into the relative factor and one absolute term (2 array passes).

        Args:
            u_lo: Lower ends, multiples of ``2**-53`` in ``[2**-10, 1)``.

        Returns:
            ``(lo, hi)`` bounds on the exact ``|Z|`` quantile.

        Example:
            >>> lo, hi = Gaussian(sigma=1.0)._isf_bounds_fine(np.array([0.05]))
            >>> bool(lo[0] < 1.959963984540054 < hi[0])
            True
        """
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = np.multiply(u_lo, 0.5)
            ndtri(m, out=m)
            m *= -self.sigma
            lo = m * (1.0 - 2.0 * _GAUSS_ISF_RTOL - 2.0**-43)
            lo -= 4.2e-16 * self.sigma
            m *= 1.0 + 2.0 * _GAUSS_ISF_RTOL
        return lo, m

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x) = erfc(x/(σ√2))/2`` in mpmath.

        Args:
            x: A non-negative ``mpf``.
            mp: The mpmath context.

        Returns:
            The tail probability.

        Example:
            >>> import mpmath
            >>> round(float(Gaussian(sigma=2.0)._mp_sf(mpmath.mpf(2), mpmath.mp)), 6)
            0.158655
        """
        return mp.erfc(x / (mp.mpf(self.sigma) * mp.sqrt(2))) / 2

    def variance(self) -> float:
        """Variance sigma².

        Example:
            >>> Gaussian(sigma=2.0).variance()
            4.0
        """
        return self.sigma**2

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> Gaussian(sigma=2.0).params()
            {'sigma': 2.0}
        """
        return {"sigma": self.sigma}


class Laplace(NoiseDistribution):
    """Laplace noise with density exp(-|x|/scale)/(2 scale); variance 2 scale².

    Args:
        scale: The scale b > 0 (not the standard deviation, which is √2·b).

    Example:
        >>> Laplace(scale=1.0).variance()
        2.0
    """

    name = "laplace"

    def __init__(self, scale: float) -> None:
        self.scale = check_real("scale", scale, owner="Laplace noise", gt=0.0)

    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density.

        Args:
            x: Points.

        Returns:
            Log densities.

        Example:
            >>> round(float(Laplace(scale=1.0).logpdf(1.0)), 4)
            -1.6931
        """
        return -np.abs(np.asarray(x, dtype=np.float64)) / self.scale - np.log(2.0 * self.scale)

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        return 0.5 * np.exp(-x / self.scale)

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        return -self.scale * np.log(u)

    _isf_rtol = _LAPLACE_ISF_RTOL

    def _isf_bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One ``log`` per draw: ``m(u_lo) − m(u_hi) = b·ln(u_hi/u_lo) <= b·(u_hi − u_lo)/u_lo``.

        Args:
            u_lo: Lower ends of the uniform intervals.
            u_hi: Upper ends.

        Returns:
            ``(lo, hi)`` bounds on the exact ``|Z|`` quantile over each interval.

        Example:
            >>> lo, hi = Laplace(scale=1.0)._isf_bounds(np.array([0.5]), np.array([0.5]))
            >>> bool(lo[0] < 0.6931471805599453 < hi[0])
            True
        """
        # (no clean-up passes: a non-finite or NaN bound makes the cell undecided downstream,
        # and a negative lower bound is valid, m >= 0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = np.log(u_lo)
            m *= -self.scale
            lo = np.subtract(u_hi, u_lo)
            lo /= u_lo                                            # drop / b
            lo *= -self.scale * (1.0 + 8.0 * _U)
            w = 2.0 * _LAPLACE_ISF_RTOL
            lo += m * (1.0 - w)
            m *= 1.0 + w
        return lo, m

    def _isf_bounds_fine(self, u_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bounds of :meth:`_isf_bounds` for ``u_hi = u_lo + 2**-53``, ``u_lo >= 2**-10``.

        The decrease ``b·ln(u_hi/u_lo) <= b·2**-43`` is folded into one absolute term.

        Args:
            u_lo: Lower ends, multiples of ``2**-53`` in ``[2**-10, 1)``.

        Returns:
            ``(lo, hi)`` bounds on the exact ``|Z|`` quantile.

        Example:
            >>> lo, hi = Laplace(scale=1.0)._isf_bounds_fine(np.array([0.5]))
            >>> bool(lo[0] < 0.6931471805599453 < hi[0])
            True
        """
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = np.log(u_lo)
            m *= -self.scale
            w = 2.0 * _LAPLACE_ISF_RTOL
            lo = m * (1.0 - w)
            lo -= self.scale * 2.0**-43
            m *= 1.0 + w
        return lo, m

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x) = e^{−x/b}/2`` in mpmath.

        Args:
            x: A non-negative ``mpf``.
            mp: The mpmath context.

        Returns:
            The tail probability.

        Example:
            >>> import mpmath
            >>> round(float(Laplace(scale=1.0)._mp_sf(mpmath.mpf(0), mpmath.mp)), 6)
            0.5
        """
        return mp.exp(-x / mp.mpf(self.scale)) / 2

    def _mp_abs_isf(self, u: Any, mp: Any) -> Any:
        """``−b·ln u`` in mpmath.

        Args:
            u: Two-sided tail mass, an ``mpf`` in (0, 1].
            mp: The mpmath context.

        Returns:
            The exact ``|Z|`` quantile.

        Example:
            >>> import mpmath
            >>> float(Laplace(scale=2.0)._mp_abs_isf(mpmath.mpf(1), mpmath.mp))
            0.0
        """
        return -mp.mpf(self.scale) * mp.log(u)

    def variance(self) -> float:
        """Variance 2·scale².

        Example:
            >>> Laplace(scale=3.0).variance()
            18.0
        """
        return 2.0 * self.scale**2

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> Laplace(scale=2.0).params()
            {'scale': 2.0}
        """
        return {"scale": self.scale}
