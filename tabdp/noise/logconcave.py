"""Symmetric log-concave noise of [Vin22]: Logistic and Subbotin_r (docs/math/log-concave.md §1).

* [`Logistic`][tabdp.noise.Logistic] — density ``e^{−x/s} / (s·(1 + e^{−x/s})²)``, variance π²s²/3.
  Its tails are computed in log space (``log1p``/``expit``), so ``sf`` and ``isf`` stay accurate far
  out.
* [`Subbotin`][tabdp.noise.Subbotin] — ``scale`` times a standard Subbotin_r variable, with density
  ``exp(−|x|^r/r)/C(r)`` and ``C(r) = 2Γ(1/r)·r^{1/r−1}``, for r ≥ 1 (the log-concave range).
  ``|X|^r/r`` is Gamma(1/r, 1), so tails use the regularized upper incomplete gamma function
  ``Q = gammaincc`` (never ``1 − F``) and quantiles use ``gammainccinv``/``gammaincinv``.
  r = 1 is Laplace(scale) and r = 2 is N(0, scale²); as r → ∞ the law tends to Uniform(−scale,
  scale).

Example:
    >>> from tabdp.noise.logconcave import Logistic, Subbotin
    >>> round(Logistic(scale=1.0).variance(), 6)         # π²/3
    3.289868
    >>> Subbotin(r=2.0, scale=3.0).variance()             # N(0, 9)
    9.0
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit, gammainc

from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.generalized_gaussian import GeneralizedGaussian, gennorm_center_quantile
from tabdp.noise.rounding import ArbTail, LogisticBounds, Rounding

__all__ = ["Logistic", "Subbotin", "subbotin_variance", "subbotin_log_norm",
           "subbotin_center_quantile", "subbotin_center_mass"]


def subbotin_log_norm(r: float) -> float:
    """``ln C(r)`` with ``C(r) = 2Γ(1/r)·r^{1/r−1}``, the standard Subbotin_r normalizer.

    Args:
        r: Shape r > 0.

    Returns:
        The log normalizing constant.

    Example:
        >>> round(subbotin_log_norm(2.0), 6) == round(0.5 * math.log(2 * math.pi), 6)
        True
    """
    return math.log(2.0) + math.lgamma(1.0 / r) + (1.0 / r - 1.0) * math.log(r)


def subbotin_variance(r: float) -> float:
    """Variance of the standard Subbotin_r law: ``r^{2/r}·Γ(3/r)/Γ(1/r)`` (log-concave.md §1).

    Args:
        r: Shape r > 0.

    Returns:
        The variance (1 at r = 2, 2 at r = 1, → 1/3 as r → ∞).

    Example:
        >>> subbotin_variance(1.0), round(subbotin_variance(2.0), 12)
        (2.0, 1.0)
    """
    return math.exp(2.0 / r * math.log(r) + math.lgamma(3.0 / r) - math.lgamma(1.0 / r))


def subbotin_center_quantile(r: float, p: ArrayLike) -> np.ndarray:
    """The x ≥ 0 with ``P(|X| < x) = p`` for standard Subbotin_r: ``(r·P⁻¹(1/r, p))^{1/r}``.

    For small p the Gamma quantile ``G = P⁻¹(1/r, p)`` underflows when r is large (G ≈
    (p·Γ(1+1/r))^r); there ``P(a, G) = G^a/Γ(a+1)·(1 + O(G))`` gives
    ``x = r^{1/r}·p·Γ(1 + 1/r)`` to double precision, which is used whenever G < 1e-17.

    Args:
        r: Shape r > 0.
        p: Central mass ``P(|X| < x)`` in [0, 1].

    Returns:
        The half-widths x.

    Example:
        >>> round(float(subbotin_center_quantile(2.0, 0.6826894921370859)), 10)   # N(0,1): 1
        1.0
        >>> float(subbotin_center_quantile(100.0, 1e-12)) > 0                    # no underflow
        True
    """
    return gennorm_center_quantile(r, r, p)


def subbotin_center_mass(r: float, x: ArrayLike) -> np.ndarray:
    """``P(|X| < x) = P(1/r, x^r/r)`` for standard Subbotin_r, x ≥ 0, without underflow.

    For ``w = x^r/r < 1e-17`` (which underflows for large r), ``P(a, w) = w^a/Γ(a+1)·(1 + O(w))``
    with ``w^a = x·r^{−1/r}`` computed directly.

    Args:
        r: Shape r > 0.
        x: Half-widths ≥ 0.

    Returns:
        The central masses.

    Example:
        >>> round(float(subbotin_center_mass(1.0, 1.0)), 6)          # Laplace: 1 − e^{-1}
        0.632121
        >>> float(subbotin_center_mass(100.0, 1e-6)) > 0
        True
    """
    a = 1.0 / r
    xx = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        w = xx**r / r
        small = xx * r ** (-a) / math.exp(math.lgamma(1.0 + a))
        return np.where(w < 1e-17, small, gammainc(a, w))


def _check_subbotin_r(r: Any, owner: str) -> float:
    """Validate a Subbotin shape r ≥ 1 (the log-concave range) with a helpful message."""
    if isinstance(r, bool) or not isinstance(r, (int, float)) and not hasattr(r, "__float__"):
        raise InvalidParameterError(
            f"{owner}: r must be a real number >= 1; got {r!r} of type {type(r).__name__}.\n"
            "Hint: r is the Subbotin shape; r=1 is Laplace, r=2 is Gaussian, e.g. r=4.0")
    x = float(r)
    if not math.isfinite(x) or x < 1.0:
        raise InvalidParameterError(
            f"{owner}: r must be finite and >= 1; got {r!r}. Subbotin_r noise is log-concave "
            "only for r >= 1, and the (eps, delta) calibration of Vinterbo 2022 (Lemma 1) needs "
            "log-concavity.\nHint: use r >= 1 (r=1 Laplace, r=2 Gaussian, larger r lighter "
            "tails); for heavier tails (r < 1) use tabdp.noise.GeneralizedGaussian(sigma, p), "
            "whose density is proportional to exp(-(|z|/sigma)^p).")
    return x


check_subbotin_r = _check_subbotin_r  # public name, for mechanisms and accounting


class Logistic(NoiseDistribution):
    """Logistic noise with density ``e^{−x/s} / (s·(1 + e^{−x/s})²)``; variance π²s²/3.

    Args:
        scale: The scale s > 0 (the standard deviation is π·s/√3).

    Example:
        >>> z = Logistic(scale=2.0)
        >>> float(z.cdf(0.0)), round(float(z.sf(2.0)), 6)   # 1/(1+e)
        (0.5, 0.268941)
    """

    name = "logistic"

    def __init__(self, scale: float) -> None:
        """Check ``scale``."""
        self.scale = check_real("scale", scale, owner="Logistic noise", gt=0.0,
                                hint="scale is the logistic scale s (sd = pi*s/sqrt(3)), "
                                     "e.g. scale=1.0")

    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density ``−|x|/s − 2·log1p(e^{−|x|/s}) − ln s`` (exact far in the tails).

        Args:
            x: Points.

        Returns:
            Log densities.

        Example:
            >>> round(float(Logistic(scale=1.0).logpdf(0.0)), 6)   # ln(1/4)
            -1.386294
        """
        z = np.abs(np.asarray(x, dtype=np.float64)) / self.scale
        return -z - 2.0 * np.log1p(np.exp(-z)) - math.log(self.scale)

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        """``P(Z > x) = 1/(1 + e^{x/s})`` for ``x ≥ 0``."""
        return expit(-np.asarray(x, dtype=np.float64) / self.scale)

    def logsf(self, x: ArrayLike) -> np.ndarray:
        """Log survival function ``−log1p(e^{x/s})``, accurate far in either tail.

        Args:
            x: Points.

        Returns:
            ``ln P(Z > x)``.

        Example:
            >>> float(Logistic(scale=1.0).logsf(800.0))
            -800.0
        """
        z = np.asarray(x, dtype=np.float64) / self.scale
        return -np.logaddexp(0.0, z)

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        """``m = s·log1p(2(1 − u)/u)`` solves ``P(|Z| > m) = 2/(1 + e^{m/s}) = u``."""
        u = np.asarray(u, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            m = self.scale * np.log1p(2.0 * (1.0 - u) / u)
        return np.where(u <= 0.0, np.inf, np.where(u >= 1.0, 0.0, m))

    def _mp_logpdf(self, x: Any, mp: Any) -> Any:
        """Log density in mpmath: ``−|x|/s − 2·ln(1 + e^{−|x|/s}) − ln s``.

        Example:
            >>> import mpmath
            >>> round(float(Logistic(scale=1.0)._mp_logpdf(mpmath.mpf(0), mpmath.mp)), 6)
            -1.386294
        """
        s = mp.mpf(self.scale)
        z = abs(x) / s
        return -z - 2 * mp.log1p(mp.exp(-z)) - mp.log(s)

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x) = 1/(1 + e^{x/s})`` in mpmath (``x ≥ 0``).

        Example:
            >>> import mpmath
            >>> float(Logistic(scale=2.0)._mp_sf(mpmath.mpf(0), mpmath.mp))
            0.5
        """
        return 1 / (1 + mp.exp(x / mp.mpf(self.scale)))

    @functools.cached_property
    def rounding(self) -> Rounding:
        """Exact rounding: closed-form bounds (ρ = 64u, §4.2) and certified Arb tails.

        Example:
            >>> type(Logistic(scale=1.0).rounding.quantile).__name__
            'LogisticBounds'
        """
        return Rounding(self, LogisticBounds(self), ArbTail(self, abs_isf=self._mp_abs_isf))

    def _arb_unit(self) -> float:
        return self.scale

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        """``2/(1 + e^x)`` (``(1 − e^{−x})/(1 + e^{−x})`` with ``central``) in Arb."""
        e = (-xs).exp()
        return (1 - e) / (1 + e) if central else 2 * e / (1 + e)

    def _mp_abs_isf(self, u: Any, mp: Any) -> Any:
        """``s·ln((2 − u)/u)`` in mpmath: the exact ``|Z|`` quantile.

        Args:
            u: Two-sided tail mass, an ``mpf`` in (0, 1].
            mp: The mpmath context.

        Returns:
            ``m`` with ``P(|Z| > m) = u``.

        Example:
            >>> import mpmath
            >>> float(Logistic(scale=1.0)._mp_abs_isf(mpmath.mpf(1), mpmath.mp))
            0.0
        """
        u = mp.mpf(u)
        return mp.mpf(self.scale) * mp.log((2 - u) / u)

    def variance(self) -> float:
        """Variance π²s²/3.

        Example:
            >>> round(Logistic(scale=math.sqrt(3) / math.pi).variance(), 12)
            1.0
        """
        return math.pi**2 * self.scale**2 / 3.0

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> Logistic(scale=2.0).params()
            {'scale': 2.0}
        """
        return {"scale": self.scale}


class Subbotin(GeneralizedGaussian):
    """``scale`` times a standard Subbotin_r variable: density ``exp(−|x/s|^r/r)/(s·C(r))``.

    ``C(r) = 2Γ(1/r)·r^{1/r−1}``; variance ``s²·r^{2/r}·Γ(3/r)/Γ(1/r)``. r = 1 is Laplace(s),
    r = 2 is N(0, s²). It is the Subbotin parametrization of the one generalized normal law
    ([`GeneralizedGaussian`][tabdp.noise.GeneralizedGaussian] with ``p = r`` and ``σ = s·r^{1/r}``):
    this class only sets the parameters; density, tails, quantiles and exact rounding are shared. In
    ``scipy.stats.gennorm`` terms it is ``gennorm(beta=r, scale=s·r^{1/r})``.

    Args:
        r: Shape r ≥ 1 (log-concave range; refused below 1).
        scale: Scale s > 0.

    Example:
        >>> z = Subbotin(r=1.0, scale=2.0)                      # Laplace(2)
        >>> z.variance(), round(float(z.sf(2.0)), 6)            # 8, e^{-1}/2
        (8.0, 0.18394)
        >>> isinstance(z, GeneralizedGaussian), z.p, z.sigma
        (True, 1.0, 2.0)
    """

    name = "subbotin"

    def __init__(self, r: float, scale: float) -> None:
        """Check ``r`` and ``scale`` and precompute the normalizing constant."""
        self.r = _check_subbotin_r(r, "Subbotin noise")
        self.scale = check_real("scale", scale, owner="Subbotin noise", gt=0.0,
                                hint="scale multiplies a standard Subbotin_r variable "
                                     "(r=2: the standard deviation), e.g. scale=1.0")
        #: the gennorm parameters of the same law (σ rounded to double; the law uses r, scale)
        self.p = self.r
        self.sigma = self.scale * self.r ** (1.0 / self.r)
        self._shape_law(unit=self.scale, c=self.r,
                        logc=subbotin_log_norm(self.r) + math.log(self.scale),
                        # a product, not ** (which raises OverflowError on a huge scale: the
                        # release refuses that scale, check_noise_range)
                        variance=self.scale * self.scale * subbotin_variance(self.r),
                        key=("subbotin", self.r))

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> Subbotin(r=3.0, scale=2.0).params()
            {'r': 3.0, 'scale': 2.0}
        """
        return {"r": self.r, "scale": self.scale}
