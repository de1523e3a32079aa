"""The generalized normal law (``scipy.stats.gennorm``), one implementation, two parametrizations.

* [`GeneralizedGaussian`][tabdp.noise.GeneralizedGaussian] ``(sigma, p)``: density
  ``p/(2σΓ(1/p))·exp(−(|z|/σ)^p)``. For p ≤ 1 it is the noise of the per-record mechanism of
  [FCD+24] Cor 5.6; any p > 0 is a valid noise law (p = 1 is Laplace with scale σ, p = 2 is Gaussian
  with standard deviation σ/√2).
* [`Subbotin`][tabdp.noise.Subbotin] ``(r, scale)``: ``scale`` times a standard Subbotin_r
  variable, density ``∝ exp(−|x/s|^r/r)``: the same law with ``p = r`` and
  ``σ = s·r^{1/r}``. It is a parametrization of this class (its constructor only), not a second
  implementation.

Both write ``|Z| = unit·(c·G)^{1/p}`` with ``G ~ Gamma(1/p)``: ``unit = σ, c = 1`` (gennorm) or
``unit = s, c = r`` (Subbotin). Every method is shared; a parametrization fixes its constants
(normalizer, variance, the key of its certified table) so that each keeps its earlier floats.
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

__all__ = ["GeneralizedGaussian", "gennorm_center_quantile"]

#: log of the largest finite double.
_LOG_DBL_MAX = math.log(np.finfo(np.float64).max)
_U = 2.0**-53


def gennorm_center_quantile(p: float, c: float, q: ArrayLike) -> np.ndarray:
    """The ``w >= 0`` with ``P(W < w) = q`` for ``W = (c·G)^{1/p}``, ``G ~ Gamma(1/p)``.

    ``w = (c·P⁻¹(1/p, q))^{1/p}``. For small q the Gamma quantile ``G`` underflows when p is large
    (``G ≈ (q·Γ(1 + 1/p))^p``); there ``P(a, G) = G^a/Γ(a + 1)·(1 + O(G))`` gives
    ``w = c^{1/p}·q·Γ(1 + 1/p)`` to double precision, used whenever ``G < 1e-17``.

    Args:
        p: Shape p > 0.
        c: Scale factor of G (1 for gennorm, r for Subbotin_r).
        q: Central mass ``P(|Z/unit| < w)`` in [0, 1].

    Returns:
        The standardized half-widths w.

    Example:
        >>> round(float(gennorm_center_quantile(2.0, 2.0, 0.6826894921370859)), 10)  # N(0,1): 1
        1.0
        >>> float(gennorm_center_quantile(100.0, 100.0, 1e-12)) > 0                  # no underflow
        True
    """
    a = 1.0 / p
    qq = np.asarray(q, dtype=np.float64)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        g = gammaincinv(a, qq)
        small = c**a * qq * math.exp(math.lgamma(1.0 + a))
        return np.where(g < 1e-17, small, (c * g) ** a)


class GeneralizedGaussian(ArbShape, NoiseDistribution):
    """Generalized Gaussian (Subbotin / ``scipy.stats.gennorm``) noise with scale σ and shape p.

    Density ``p / (2 σ Γ(1/p)) · exp(-(|z|/σ)^p)``; ``|Z| = σ·G^(1/p)`` with ``G ~ Gamma(1/p)``.
    The Subbotin parametrization ``(r, scale)`` is [`tabdp.noise.Subbotin`][tabdp.noise.Subbotin].

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
        """Check ``sigma`` and ``p`` and precompute the normalizing constant."""
        owner = "GeneralizedGaussian noise"
        self.sigma = check_real("sigma", sigma, owner=owner, gt=0.0,
                                hint="sigma is the scale of the noise, e.g. sigma=1.0")
        self.p = check_real("p", p, owner=owner, gt=0.0,
                            hint="p is the shape; p = 0.5 gives a heavy, Weibull-like tail")
        a = 1.0 / self.p
        lognorm = math.log(self.p) - math.log(2.0 * self.sigma) - math.lgamma(a)
        lv = float(gammaln(3.0 * a) - gammaln(a)) + 2.0 * math.log(self.sigma)
        self._shape_law(unit=self.sigma, c=1.0, logc=-lognorm,
                        variance=math.exp(lv) if lv < _LOG_DBL_MAX else math.inf,
                        key=("generalized_gaussian", self.p))

    def _shape_law(self, *, unit: float, c: float, logc: float, variance: float,
                   key: tuple[Any, ...]) -> None:
        """Set the parametrization's constants: ``|Z| = unit·(c·G)^{1/p}``, ``G ~ Gamma(1/p)``.

        ``c`` is 1 (gennorm) or ``p`` (Subbotin_r, r = p).

        ``logc`` is the log normalizer (density ``exp(−(|x|/unit)^p/c − logc)``), ``variance``
        the variance and ``key`` the cache key of the standardized shape ``|Z|/unit``.
        """
        self._a = 1.0 / self.p
        self._unit = unit
        self._c = c
        self._logc = logc
        self._variance = variance
        self._key = key

    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density ``−(|x|/unit)^p/c − ln C``.

        Gennorm: ``ln p − ln(2σ) − lnΓ(1/p) − (|x|/σ)^p``.

        Args:
            x: Points.

        Returns:
            Log densities (``-inf`` where ``(|x|/σ)^p`` overflows).

        Example:
            >>> round(float(GeneralizedGaussian(sigma=1.0, p=0.5).logpdf(4.0)), 6)
            -3.386294
        """
        z = np.abs(np.asarray(x, dtype=np.float64)) / self._unit
        with np.errstate(over="ignore"):
            return -(z**self.p) / self._c - self._logc

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        """``P(Z > x) = Q(1/p, (x/unit)^p/c) / 2`` for ``x ≥ 0``."""
        with np.errstate(over="ignore"):
            w = (np.asarray(x, dtype=np.float64) / self._unit) ** self.p / self._c
        return 0.5 * gammaincc(self._a, w)

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        """``unit·(c·Q⁻¹(1/p, u))^{1/p}``; ``P⁻¹(1/p, 1 − u)`` for u > ½ (exact ``1 − u``).

        The central branch goes through `gennorm_center_quantile` (no underflow for
        large p).
        """
        u = np.asarray(u, dtype=np.float64)
        a = self._a
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            outer = (self._c * gammainccinv(a, np.clip(u, 0.0, 0.5))) ** a
            inner = gennorm_center_quantile(self.p, self._c, 1.0 - np.clip(u, 0.5, 1.0))
            m = np.where(u > 0.5, inner, outer)
            m = np.where(u <= 0.0, np.inf, np.where(u >= 1.0, 0.0, m))
            return self._unit * m

    # certified tables (docs/exact-rounding.md §4.5): (|Z|/unit)^p/c ~ Gamma(1/p)
    @functools.cached_property
    def rounding(self) -> Rounding:
        """Exact rounding: certified Arb tables and tails.

        Example:
            >>> GeneralizedGaussian(sigma=1.0, p=0.5).rounding.certified
            True
        """
        return Rounding(self, CertifiedBounds(self), ArbTail(self))

    def _arb_unit(self) -> float:
        return self._unit

    def _arb_key(self) -> tuple[Any, ...]:
        return self._key

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        """``Q(1/p, x^p/c)`` (``P(1/p, x^p/c)`` with ``central``), regularized, in Arb."""
        from flint import arb, arb_series

        p = arb(self.p)
        w = xs**p if self._c == 1.0 else xs**p / arb(self._c)
        fn = arb_series.gamma_lower if central else arb_series.gamma_upper
        return fn(1 / p, w, regularized=1)

    def _arb_density(self, xs: Any) -> Any:
        """Density of ``|Z|/unit`` in Arb: ``p/(Γ(1/p)·c^{1/p})·exp(−x^p/c)`` (c = 1 or p)."""
        from flint import arb

        p = arb(self.p)
        if self._c == 1.0:
            return p / (1 / p).gamma() * (-(xs**p)).exp()
        c = arb(self._c)        # Subbotin (c = p = r): exp(−x^r/r)/(Γ(1/r)·r^{1/r − 1})
        return (-(xs**p) / c).exp() / ((1 / p).gamma() * c ** (1 / p - 1))

    def _mp_logpdf(self, x: Any, mp: Any) -> Any:
        """Log density in mpmath: ``−(|x|/unit)^p/c − ln C``.

        Example:
            >>> import mpmath
            >>> round(float(GeneralizedGaussian(1.0, 1.0)._mp_logpdf(mpmath.mpf(0), mpmath.mp)), 6)
            -0.693147
        """
        p, c, s = mp.mpf(self.p), mp.mpf(self._c), mp.mpf(self._unit)
        logc = mp.log(2) + mp.loggamma(1 / p) + mp.log(c) / p - mp.log(p) + mp.log(s)
        return -(abs(x) / s) ** p / c - logc

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x) = Q(1/p, (x/unit)^p/c)/2`` in mpmath (regularized upper incomplete gamma).

        Example:
            >>> import mpmath
            >>> round(float(GeneralizedGaussian(1.0, 1.0)._mp_sf(mpmath.mpf(1), mpmath.mp)), 6)
            0.18394
        """
        p = mp.mpf(self.p)
        w = (x / mp.mpf(self._unit)) ** p
        if self._c != 1.0:
            w = w / mp.mpf(self._c)
        return mp.gammainc(1 / p, w, mp.inf, regularized=True) / 2

    def variance(self) -> float:
        """Variance: σ²Γ(3/p)/Γ(1/p) (gennorm), or ``s²·r^{2/r}·Γ(3/r)/Γ(1/r)`` (Subbotin).

        The gennorm form is evaluated as ``exp(lgamma(3/p) − lgamma(1/p))·σ²`` in log space and
        returns ``inf`` when the (finite) value exceeds the double range (p ≲ 0.01).

        Example:
            >>> round(GeneralizedGaussian(sigma=1.0, p=0.5).variance(), 6)
            120.0
        """
        return self._variance

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> GeneralizedGaussian(sigma=2.0, p=0.5).params()
            {'sigma': 2.0, 'p': 0.5}
        """
        return {"sigma": self.sigma, "p": self.p}
