"""The contract every noise distribution in tabdp follows (as small as scipy's).

A [`NoiseDistribution`][tabdp.noise.NoiseDistribution] is a symmetric continuous law centred at 0
with ``logpdf``/``pdf``, ``cdf``/``sf``, ``ppf``/``isf``, ``variance``/``std``, ``params`` and a
vectorized inverse-CDF sampler ``sample(size, rng)``. Subclasses implement five methods:
``logpdf``, ``_sf_pos`` (``sf`` for ``x >= 0``, accurate in the tail), ``_abs_isf`` (the
magnitude whose two-sided tail mass is ``u``: ``P(|Z| > m) = u``), ``variance`` and ``params``;
everything else follows by symmetry, which keeps tails accurate (no ``1 - cdf`` cancellation).

Exact rounding is not part of this contract: a law that can be released is composed with a
`tabdp.noise.rounding.Rounding` (its ``rounding`` attribute), built from the strategies of
`tabdp.noise.rounding` (docs/exact-rounding.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp._params import ByParams
from tabdp.noise.rounding import Rounding
from tabdp.rng import RandomSource, as_random_source

__all__ = ["NoiseDistribution"]


class NoiseDistribution(ByParams, ABC):
    """A symmetric, continuous noise law centred at 0.

    Example:
        >>> from tabdp.noise import Gaussian
        >>> g = Gaussian(sigma=2.0)
        >>> float(g.cdf(0.0)), float(g.std())
        (0.5, 2.0)
    """

    #: Short name used in reports.
    name: str = "noise"
    # -- to implement -------------------------------------------------------------------------
    @abstractmethod
    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density at ``x`` (vectorized).

        Example:
            >>> from tabdp.noise import Laplace
            >>> round(float(Laplace(scale=1.0).logpdf(0.0)), 6)
            -0.693147
        """

    @abstractmethod
    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        """Survival function ``P(Z > x)`` for ``x >= 0`` (accurate in the tail)."""

    @abstractmethod
    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        """Magnitude ``m >= 0`` with ``P(|Z| > m) = u`` for ``u`` in (0, 1]."""

    @abstractmethod
    def variance(self) -> float:
        """Variance (``inf`` when it does not exist).

        Example:
            >>> from tabdp.noise import ExpPolyLog
            >>> ExpPolyLog(sigma=1.0, a=1.0, d=3.0).variance()
            inf
        """

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Public parameters, for reports.

        Example:
            >>> from tabdp.noise import Gaussian
            >>> Gaussian(sigma=1.0).params()
            {'sigma': 1.0}
        """

    # -- derived ------------------------------------------------------------------------------
    def pdf(self, x: ArrayLike) -> np.ndarray:
        """Density at ``x``.

        Args:
            x: Points.

        Returns:
            Density values.

        Example:
            >>> from tabdp.noise import Laplace
            >>> float(Laplace(scale=1.0).pdf(0.0))
            0.5
        """
        return np.exp(self.logpdf(x))

    def sf(self, x: ArrayLike) -> np.ndarray:
        """Survival function ``P(Z > x)``.

        Args:
            x: Points.

        Returns:
            Tail probabilities.

        Example:
            >>> from tabdp.noise import Laplace
            >>> round(float(Laplace(scale=1.0).sf(1.0)), 6)
            0.18394
        """
        x = np.asarray(x, dtype=np.float64)
        ax = np.abs(x)
        s = self._sf_pos(ax)
        return np.where(x >= 0, s, 1.0 - s)

    def cdf(self, x: ArrayLike) -> np.ndarray:
        """Distribution function ``P(Z <= x)``.

        Args:
            x: Points.

        Returns:
            Probabilities.

        Example:
            >>> from tabdp.noise import Laplace
            >>> float(Laplace(scale=1.0).cdf(0.0))
            0.5
        """
        x = np.asarray(x, dtype=np.float64)
        return self.sf(-x)

    def ppf(self, q: ArrayLike) -> np.ndarray:
        """Quantile function (inverse of [`cdf`][tabdp.noise.NoiseDistribution.cdf]).

        Args:
            q: Probabilities in (0, 1).

        Returns:
            Quantiles; ``-inf``/``inf`` at 0/1.

        Example:
            >>> from tabdp.noise import Gaussian
            >>> round(float(Gaussian(sigma=1.0).ppf(0.95)), 4)
            1.6449
        """
        q = np.asarray(q, dtype=np.float64)
        tail = np.minimum(q, 1.0 - q)  # mass on the far side
        with np.errstate(divide="ignore", invalid="ignore"):
            m = self._abs_isf(np.clip(2.0 * tail, 0.0, 1.0))
        m = np.where(tail <= 0.0, np.inf, m)
        out = np.where(q >= 0.5, m, -m)
        return np.where(np.isnan(q) | (q < 0) | (q > 1), np.nan, out)

    def isf(self, q: ArrayLike) -> np.ndarray:
        """Inverse survival function: ``x`` with ``P(Z > x) = q``.

        Args:
            q: Tail probabilities in (0, 1).

        Returns:
            Points.

        Example:
            >>> from tabdp.noise import Gaussian
            >>> round(float(Gaussian(sigma=1.0).isf(0.05)), 4)
            1.6449
        """
        return -self.ppf(q)

    def std(self) -> float:
        """Standard deviation (``inf`` when the variance is infinite).

        Example:
            >>> from tabdp.noise import Laplace
            >>> round(Laplace(scale=1.0).std(), 6)
            1.414214
        """
        return float(np.sqrt(self.variance()))

    def interval_halfwidth(self, level: float) -> float:
        """Half-width ``h`` of the central interval: ``P(|Z| <= h) = level``.

        Args:
            level: Coverage in (0, 1), e.g. 0.9.

        Returns:
            The half-width (exact quantile of ``|Z|``).

        Example:
            >>> from tabdp.noise import Gaussian
            >>> round(Gaussian(sigma=1.0).interval_halfwidth(0.9), 4)
            1.6449
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(self._abs_isf(np.asarray([1.0 - level]))[0])

    def sample(self, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
        """Draw noise by inverse CDF: a fair sign times the ``|Z|`` quantile of a uniform.

        These are plain float64 draws, for exploration and tests. Releases never add them to
        data: mechanisms release exactly rounded values (`tabdp.noise.exact.round_noisy`),
        because ``q + sample()`` in floating point can leak ``q`` (docs/exact-rounding.md).

        Args:
            size: Output shape.
            rng: A [`RandomSource`][tabdp.RandomSource] (default: secure), int seed or numpy
                Generator.

        Returns:
            float64 array of draws.

        Example:
            >>> from tabdp.noise import Laplace
            >>> Laplace(scale=1.0).sample(5, rng=0).shape
            (5,)
        """
        src: RandomSource = as_random_source(rng)
        u = src.uniform(size)
        return src.signs(np.shape(u)) * self._abs_isf(u)

    # -- exact rounding (tabdp.noise.rounding) -----------------------------------------------
    @property
    def rounding(self) -> Rounding | None:
        """The exact-rounding strategies composed with this law (None: not releasable).

        Laws that can be released override this with their `tabdp.noise.rounding.Rounding`
        (float64 quantile bounds and an exact tail; docs/exact-rounding.md).

        Example:
            >>> from tabdp.noise import Gaussian
            >>> Gaussian(sigma=1.0).rounding is not None
            True
        """
        return None

