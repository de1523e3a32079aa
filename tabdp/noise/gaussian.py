"""Gaussian and Laplace noise.

Both laws are composed with exact rounding (`tabdp.noise.rounding`; error analysis:
``docs/exact-rounding.md`` §4) and give closed-form tails in mpmath (``_mp_sf``) and Arb:

* Gaussian: proven float64 bounds on the ``|Z|`` quantile from Taylor tables
  (`GaussianTaylorBounds`); no special function is evaluated in
  float64.
* Laplace: ``−b·ln u``, proven relative to libm's ``log`` accuracy
  (`LaplaceBounds`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp._lazy_scipy import LazyModule
from tabdp._validation import check_real
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.rounding import (
    ArbTail,
    GaussianTaylorBounds,
    LaplaceBounds,
    Rounding,
)

if TYPE_CHECKING:
    import scipy.special as special
else:  # imported on first use, never by a Spark worker that unpickles a mechanism
    special = LazyModule("scipy.special")

__all__ = ["Gaussian", "Laplace"]

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)

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
        """Check ``sigma``."""
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
        return special.ndtr(-x / self.sigma)

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
        return special.log_ndtr(-np.asarray(x, dtype=np.float64) / self.sigma)

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        return -self.sigma * special.ndtri(0.5 * u)

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x) = erfc(x/(σ√2))/2`` in mpmath.

        Example:
            >>> import mpmath
            >>> round(float(Gaussian(sigma=2.0)._mp_sf(mpmath.mpf(2), mpmath.mp)), 6)
            0.158655
        """
        return mp.erfc(x / (mp.mpf(self.sigma) * mp.sqrt(2))) / 2

    @functools.cached_property
    def rounding(self) -> Rounding:
        """Exact rounding: Taylor-table bounds (§4.1) and certified Arb tails.

        Example:
            >>> Gaussian(sigma=1.0).rounding.arb_unit()
            1.0
        """
        return Rounding(self, GaussianTaylorBounds(self.sigma), ArbTail(self))

    def _arb_unit(self) -> float:
        return self.sigma

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        """``erfc(x/√2)`` (``erf`` with ``central``) in Arb."""
        from flint import arb

        z = xs / arb(2).sqrt()
        return z.erf() if central else z.erfc()

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
        """Check ``scale``."""
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

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x) = e^{−x/b}/2`` in mpmath.

        Example:
            >>> import mpmath
            >>> round(float(Laplace(scale=1.0)._mp_sf(mpmath.mpf(0), mpmath.mp)), 6)
            0.5
        """
        return mp.exp(-x / mp.mpf(self.scale)) / 2

    @functools.cached_property
    def rounding(self) -> Rounding:
        """Exact rounding: closed-form bounds ``−b·ln u`` and certified Arb tails.

        Example:
            >>> Laplace(scale=2.0).rounding.arb_unit()
            2.0
        """
        return Rounding(self, LaplaceBounds(self.scale), ArbTail(self, abs_isf=self._mp_abs_isf))

    def _arb_unit(self) -> float:
        return self.scale

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        """``e^{−x}`` (``1 − e^{−x}`` with ``central``) in Arb."""
        return 1 - (-xs).exp() if central else (-xs).exp()

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
