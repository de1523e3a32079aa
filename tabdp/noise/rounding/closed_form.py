"""Closed-form float64 quantile bounds (exact rounding, docs/exact-rounding.md §4).

Strategies for laws whose ``|Z|`` quantile is a closed form with a proven relative error bound
relative to libm:

* `RelErrorBounds`: the generic bound from a relative error ``ρ`` of the law's float64
  ``_abs_isf`` (a constant, or per value) and the mean value theorem (PolyPlace, SaS α = 1,
  Logistic). ``ρ = None`` gives ``(0, inf)``: every cell goes to the exact path.
* `LaplaceBounds`: ``−b·ln u`` (one ``log`` per draw).
* `LogisticBounds`: `RelErrorBounds` plus a one-constant fast path.
* `ScaledBounds`: another strategy's bounds widened by a relative margin (SaS α = 2 is
  the Gaussian ``N(0, 2γ²)`` with ``σ = fl(√2·γ)``).

Example:
    >>> lo, hi = LaplaceBounds(1.0).bounds(np.array([0.5]), np.array([0.5]))
    >>> bool(lo[0] < 0.6931471805599453 < hi[0])
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tabdp.noise.rounding._core import UNIT_ROUNDOFF, QuantileBounds

__all__ = ["RelErrorBounds", "LaplaceBounds", "LogisticBounds", "ScaledBounds",
           "LAPLACE_ISF_RTOL", "LOGISTIC_ISF_RTOL"]

_U = UNIT_ROUNDOFF
#: Relative error bound of ``-scale * log(u)`` (libm / numpy SIMD log: <= 4 ulp); 64 ulps.
LAPLACE_ISF_RTOL = 64 * _U
#: Relative error bound of the Logistic ``s·log1p(2(1 − u)/u)``: the argument carries at most 3
#: roundings and log1p's condition number is ≤ 1; measured ≤ 1.1 ulps against 200-bit references
#: for u in [1e-300, 1], so 64 ulps leave a 50× margin (docs §4.2).
LOGISTIC_ISF_RTOL = 64 * _U
#: ``10·ln 2``: the largest Laplace quantile ``−ln u`` (scale 1) on the fast path (u >= 2**-10),
#: rounded up.
_LN_2_POW_10 = 6.931471805599454

RelError = float | None | Callable[[np.ndarray, np.ndarray], "np.ndarray | float | None"]


class RelErrorBounds(QuantileBounds):
    """Bounds from the relative error of the law's float64 quantile and the mean value theorem.

    Evaluates ``_abs_isf`` once, at ``u_lo`` (the largest magnitude), widens it by twice the
    relative error bound, and bounds the decrease over the interval by the mean value theorem:
    ``m(u_lo) − m(u_hi) <= (u_hi − u_lo) / (2 f(hi))`` since the density ``f`` is
    non-increasing in ``|z|`` (every law here is unimodal) and ``|Z|`` has density ``2f``; a
    factor 2 of slack covers the float64 error of ``logpdf``. Cells whose bounds are not finite
    get ``(0, inf)`` and go to the exact path.

    Args:
        law: The noise law (``_abs_isf`` and ``logpdf`` are used).
        rtol: The relative error bound: a float, None (no bound) or ``(u, m) -> bound``.

    Example:
        >>> from tabdp.noise import StudentT
        >>> b = RelErrorBounds(StudentT(df=3.0), 1e-15)
        >>> lo, hi = b.bounds(np.array([0.1]), np.array([0.1 + 1e-16]))
        >>> bool(lo[0] <= float(StudentT(df=3.0)._abs_isf(np.array([0.1]))[0]) <= hi[0])
        True
    """

    def __init__(self, law: Any, rtol: RelError) -> None:
        """Bounds for ``law`` with relative error ``rtol``."""
        self.law = law
        self.rtol = rtol

    def _rel_error(self, u: np.ndarray, m: np.ndarray) -> np.ndarray | float | None:
        return self.rtol(u, m) if callable(self.rtol) else self.rtol

    def bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One float64 quantile at ``u_lo``, widened by ``rtol``, minus the mean-value decrease.

        Arguments and result as in `QuantileBounds.bounds`.

        Example:
            >>> from tabdp.noise import StudentT
            >>> RelErrorBounds(StudentT(df=3.0), None).bounds(np.array([0.1]), np.array([0.2]))
            (array([0.]), array([inf]))
        """
        u_lo = np.asarray(u_lo, dtype=np.float64)
        u_hi = np.asarray(u_hi, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            m = self.law._abs_isf(u_lo)
            rt = self._rel_error(u_lo, m)
            if rt is None:
                return np.zeros_like(u_lo), np.full_like(u_lo, np.inf)
            w = 2.0 * np.asarray(rt, dtype=np.float64) + 4.0 * _U
            hi = m * (1.0 + w)
            dens = np.exp(self.law.logpdf(hi))
            lo = m * (1.0 - w) - (u_hi - u_lo) / dens * (1.0 + 8.0 * _U)
        ok = np.isfinite(hi) & np.isfinite(lo) & (w < 0.25)
        return np.where(ok, np.maximum(lo, 0.0), 0.0), np.where(ok, hi, np.inf)


class LaplaceBounds(QuantileBounds):
    """Laplace(b): ``m(u) = −b·ln u``, proven relative to libm's ``log`` (at most 4 ulps).

    Args:
        scale: The Laplace scale b.

    Example:
        >>> mid, rad = LaplaceBounds(1.0).fine(np.array([0.5]))
        >>> bool(abs(mid[0] - 0.6931471805599453) <= rad < 1e-12)
        True
    """

    def __init__(self, scale: float) -> None:
        """Bounds for Laplace(``scale``)."""
        self.scale = scale

    def bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One ``log`` per draw: ``m(u_lo) − m(u_hi) = b·ln(u_hi/u_lo) <= b·(u_hi − u_lo)/u_lo``.

        Arguments and result as in `QuantileBounds.bounds`.

        Example:
            >>> lo, hi = LaplaceBounds(1.0).bounds(np.array([0.5]), np.array([0.5]))
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
            w = 2.0 * LAPLACE_ISF_RTOL
            lo += m * (1.0 - w)
            m *= 1.0 + w
        return lo, m

    def fine(self, u_lo: np.ndarray) -> tuple[np.ndarray, float]:
        """Fast-path bounds: ``|m(u) − mid| <= rad`` for all u in ``[u_lo, u_lo + 2**-53]``.

        ``mid = −b·ln u_lo`` is within ``ρ·m <= ρ·b·10 ln 2`` of the exact value (relative bound
        ρ = ``LAPLACE_ISF_RTOL``, applied twice over, and ``m <= b·10 ln 2`` for
        ``u_lo >= 2**-10``), and the decrease ``b·ln(1 + 2**-53/u_lo) <= b·2**-43`` is added:
        ``rad`` is one constant (2 array passes in all).

        Args:
            u_lo: Lower ends, multiples of ``2**-53`` in ``[2**-10, 1)``.

        Returns:
            ``(mid, rad)``: a new array and a float.

        Example:
            >>> mid, rad = LaplaceBounds(2.0).fine(np.array([1.0]))
            >>> float(mid[0]) == 0.0 and rad < 1e-11
            True
        """
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = np.log(u_lo)
            m *= -self.scale
        rad = self.scale * (2.0 * LAPLACE_ISF_RTOL * _LN_2_POW_10 + 2.0**-43) * (1.0 + 2.0**-40)
        return m, rad


class LogisticBounds(RelErrorBounds):
    """Logistic(s): `RelErrorBounds` (ρ = 64u) and a one-constant fast path.

    Args:
        law: The Logistic law (its ``scale`` and float quantile are used).

    Example:
        >>> from tabdp.noise import Logistic
        >>> mid, rad = LogisticBounds(Logistic(scale=1.0)).fine(np.array([0.5]))
        >>> bool(abs(mid[0] - np.log(3.0)) <= rad < 1e-12)
        True
    """

    def __init__(self, law: Any) -> None:
        """Bounds for the Logistic ``law``."""
        super().__init__(law, LOGISTIC_ISF_RTOL)

    def fine(self, u_lo: np.ndarray) -> tuple[np.ndarray, float]:
        """Fast-path bounds: ``|m(u) − mid| <= rad`` for all u in ``[u_lo, u_lo + 2**-53]``.

        ``mid = s·log1p(2(1 − u_lo)/u_lo)`` is within ``ρ·m`` of ``m(u_lo)`` (ρ =
        ``LOGISTIC_ISF_RTOL``, applied twice over), and ``m <= s·ln(2**11)`` for
        ``u_lo >= 2**-10``. The decrease over the interval is at most
        ``2**-53·|m′(u_lo)| = 2**-53·2s/(u_lo(2 − u_lo)) <= s·2**-42``. So ``rad`` is one
        constant (docs/exact-rounding.md §4.2).

        Args:
            u_lo: Lower ends, multiples of ``2**-53`` in ``[2**-10, 1)``.

        Returns:
            ``(mid, rad)``: a new array and a float.

        Example:
            >>> from tabdp.noise import Logistic
            >>> mid, rad = LogisticBounds(Logistic(scale=2.0)).fine(np.array([1.0 - 2.0**-53]))
            >>> bool(0.0 <= mid[0] <= rad)
            True
        """
        scale = self.law.scale
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = np.subtract(1.0, u_lo)
            m *= 2.0
            m /= u_lo
            np.log1p(m, out=m)
            m *= scale
        rad = scale * (2.0 * LOGISTIC_ISF_RTOL * 7.624618986159399 + 2.0**-42) * (1 + 2.0**-40)
        return m, rad


class ScaledBounds(QuantileBounds):
    """Another strategy's bounds widened outwards by a relative ``margin``.

    Args:
        inner: The strategy whose bounds are widened.
        margin: Relative widening (e.g. ``2**-48`` for a scale rounded to double).

    Example:
        >>> b = ScaledBounds(LaplaceBounds(1.0), 2.0**-48)
        >>> lo, hi = b.bounds(np.array([0.5]), np.array([0.5]))
        >>> bool(lo[0] < 0.6931471805599453 < hi[0])
        True
    """

    def __init__(self, inner: QuantileBounds, margin: float) -> None:
        """``inner`` widened by ``margin``."""
        self.inner = inner
        self.margin = margin

    def bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The inner bounds times ``(1 − margin, 1 + margin)``.

        Arguments and result as in `QuantileBounds.bounds`.

        Example:
            >>> ScaledBounds(LaplaceBounds(1.0), 0.5).bounds(np.ones(1), np.ones(1))[1].tolist()
            [-0.0]
        """
        lo, hi = self.inner.bounds(u_lo, u_hi)
        with np.errstate(invalid="ignore", over="ignore"):
            return lo * (1.0 - self.margin), hi * (1.0 + self.margin)
