"""Generalized Gaussian noise: density p/(2σΓ(1/p))·exp(−(|z|/σ)^p) (MATH.md §1.4).

For p ≤ 1 it is the noise of the per-record mechanism of seed 001 Cor 5.6; any p > 0 is a valid
noise law (p = 1 is Laplace with scale σ, p = 2 is Gaussian with standard deviation σ/√2).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaincc, gammainccinv, gammaincinv, gammaln

from tabdp._validation import check_real
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.rounding import ArbShape, ArbTail, CertifiedBounds, Rounding

__all__ = ["GeneralizedGaussian"]

#: log of the largest finite double.
_LOG_DBL_MAX = math.log(np.finfo(np.float64).max)
_U = 2.0**-53


class GeneralizedGaussian(ArbShape, NoiseDistribution):
    """Generalized Gaussian (Subbotin / ``scipy.stats.gennorm``) noise with scale σ and shape p.

    Density ``p / (2 σ Γ(1/p)) · exp(-(|z|/σ)^p)``; ``|Z| = σ·G^(1/p)`` with ``G ~ Gamma(1/p)``.

    Args:
        sigma: Scale σ > 0.
        p: Shape p > 0 (the per-record mechanism uses 0 < p ≤ 1).

    Example:
        >>> g = GeneralizedGaussian(sigma=1.0, p=1.0)   # Laplace(1)
        >>> g.variance(), round(float(g.sf(1.0)), 6)
        (2.0, 0.18394)
    """

    name = "generalized_gaussian"

    def __init__(self, sigma: float, p: float) -> None:
        owner = "GeneralizedGaussian noise"
        self.sigma = check_real("sigma", sigma, owner=owner, gt=0.0,
                                hint="sigma is the scale of the noise, e.g. sigma=1.0")
        self.p = check_real("p", p, owner=owner, gt=0.0,
                            hint="p is the shape; p = 0.5 gives a heavy, Weibull-like tail")
        self._shape = 1.0 / self.p
        self._lognorm = math.log(self.p) - math.log(2.0 * self.sigma) - math.lgamma(self._shape)

    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density ``ln p − ln(2σ) − lnΓ(1/p) − (|x|/σ)^p``.

        Args:
            x: Points.

        Returns:
            Log densities (``-inf`` where ``(|x|/σ)^p`` overflows).

        Example:
            >>> round(float(GeneralizedGaussian(sigma=1.0, p=0.5).logpdf(4.0)), 6)
            -3.386294
        """
        z = np.abs(np.asarray(x, dtype=np.float64)) / self.sigma
        with np.errstate(over="ignore"):
            return self._lognorm - z**self.p

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        """``P(Z > x) = Q(1/p, (x/σ)^p) / 2`` for ``x ≥ 0``."""
        with np.errstate(over="ignore"):
            w = (np.asarray(x, dtype=np.float64) / self.sigma) ** self.p
        return 0.5 * gammaincc(self._shape, w)

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        """``σ·(Q⁻¹(1/p, u))^(1/p)``; uses ``P⁻¹(1/p, 1−u)`` for u > ½ (exact ``1 − u``).

        Very near the centre (``P⁻¹`` below ``e^-40``, where it may even be subnormal) the leading
        term ``P(a, w) ≈ w^a/Γ(a + 1)`` gives ``m = σ·(1 − u)·Γ(1 + 1/p)`` directly.
        """
        u = np.asarray(u, dtype=np.float64)
        a = self._shape
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            one_minus = 1.0 - np.clip(u, 0.5, 1.0)      # exact for u >= 1/2
            g = np.where(u > 0.5, gammaincinv(a, one_minus),
                         gammainccinv(a, np.clip(u, 0.0, 0.5)))
            m = self.sigma * g ** a
            log_m_series = math.log(self.sigma) + np.log(one_minus) + math.lgamma(1.0 + a)
            series = (u > 0.5) & ((np.log(one_minus) + math.lgamma(1.0 + a)) * self.p < -40.0)
            m = np.where(series, np.exp(log_m_series), m)
            return np.where(u <= 0.0, np.inf, np.where(u >= 1.0, 0.0, m))

    # certified tables (docs/exact-rounding.md §4.5): |Z|/σ = G^(1/p), G ~ Gamma(1/p)
    @functools.cached_property
    def rounding(self) -> Rounding:
        """Exact rounding: certified Arb tables and tails.

        Example:
            >>> GeneralizedGaussian(sigma=1.0, p=0.5).rounding.certified
            True
        """
        return Rounding(self, CertifiedBounds(self), ArbTail(self))

    def _arb_unit(self) -> float:
        return self.sigma

    def _arb_key(self) -> tuple[Any, ...]:
        return ("generalized_gaussian", self.p)

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        """``Q(1/p, x^p)`` (``P(1/p, x^p)`` with ``central``), regularized, in Arb."""
        from flint import arb, arb_series

        fn = arb_series.gamma_lower if central else arb_series.gamma_upper
        return fn(1 / arb(self.p), xs ** arb(self.p), regularized=1)

    def _arb_density(self, xs: Any) -> Any:
        """``p/Γ(1/p)·exp(−x^p)`` in Arb."""
        from flint import arb

        p = arb(self.p)
        return p / (1 / p).gamma() * (-(xs**p)).exp()

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x) = Q(1/p, (x/σ)^p)/2`` in mpmath (regularized upper incomplete gamma).

        Args:
            x: A non-negative ``mpf``.
            mp: The mpmath context.

        Returns:
            The tail probability.

        Example:
            >>> import mpmath
            >>> round(float(GeneralizedGaussian(1.0, 1.0)._mp_sf(mpmath.mpf(1), mpmath.mp)), 6)
            0.18394
        """
        p = mp.mpf(self.p)
        w = (x / mp.mpf(self.sigma)) ** p
        return mp.gammainc(1 / p, w, mp.inf, regularized=True) / 2

    def variance(self) -> float:
        """Variance σ²Γ(3/p)/Γ(1/p), evaluated as ``exp(lgamma(3/p) − lgamma(1/p))·σ²``.

        Returns ``inf`` when the (finite) value exceeds the double range (p ≲ 0.01).

        Example:
            >>> round(GeneralizedGaussian(sigma=1.0, p=0.5).variance(), 6)
            120.0
        """
        lv = float(gammaln(3.0 * self._shape) - gammaln(self._shape)) + 2.0 * math.log(self.sigma)
        return math.exp(lv) if lv < _LOG_DBL_MAX else math.inf

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> GeneralizedGaussian(sigma=2.0, p=0.5).params()
            {'sigma': 2.0, 'p': 0.5}
        """
        return {"sigma": self.sigma, "p": self.p}
