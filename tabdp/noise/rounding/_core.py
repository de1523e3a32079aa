"""The exact-rounding layer's contract: float64 quantile bounds plus an exact tail, per law.

A noise law ([`NoiseDistribution`][tabdp.noise.NoiseDistribution]) knows its density, tails,
quantile and variance. To be released with exact rounding (`tabdp.noise.exact.round_noisy`) it is
composed with a `Rounding`: two strategy objects, chosen by the law, never inherited.

* A `QuantileBounds` (float64 side, the fast path): proven bounds ``lo <= m(u) <= hi`` on
  the exact ``|Z|`` quantile ``m`` (``P(|Z| > m) = u``) over intervals of u. Strategies:
  closed-form bounds (`closed_form`), Taylor tables
  (`taylor`), certified Arb tables
  (`certified`), or `NoBounds` (every cell goes to the exact
  path, which is still exact).
* An exact tail (high-precision side, the few undecided cells): ``P(Z > x)`` in mpmath at any
  precision, and optionally certified Arb balls (`highprec`).

A law without a `Rounding` (``law.rounding is None``) is refused by ``round_noisy``
(`tabdp.noise.rounding.rounder_for`).

Example:
    >>> from tabdp.noise import Laplace
    >>> r = Laplace(scale=1.0).rounding
    >>> lo, hi = r.bounds(np.array([0.5]), np.array([0.5]))
    >>> bool(lo[0] < 0.6931471805599453 < hi[0]), r.certified, r.arb_tail_available()
    (True, False, True)
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

__all__ = ["QuantileBounds", "NoBounds", "ExactTail", "Rounding", "mid_rad", "UNIT_ROUNDOFF"]

#: Unit roundoff of float64 (2**-53).
UNIT_ROUNDOFF = 2.0**-53
_U = UNIT_ROUNDOFF


def mid_rad(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mid, rad)`` with ``|m − mid| <= rad`` for every real ``m`` in ``[lo, hi]``.

    ``mid = fl(fl(lo + hi)/2)`` is within ``1.01u·|mid| + 2**-1074`` of the exact midpoint, and
    ``rad = fl(fl(fl(|hi − lo|·(1/2 + 4u)) + 2u·|mid|) + 2**-1060)`` exceeds that plus the
    half-width after its own three roundings (docs §3.2). NaN and ±inf propagate (such cells
    are undecided).

    Args:
        lo: Lower bounds.
        hi: Upper bounds.

    Returns:
        ``(mid, rad)`` float64 arrays.

    Example:
        >>> mid, rad = mid_rad(np.array([1.0]), np.array([1.5]))
        >>> float(mid[0]), bool(0.25 <= rad[0] < 0.25 + 1e-15)
        (1.25, True)
    """
    with np.errstate(all="ignore"):
        mid = np.add(lo, hi)
        mid *= 0.5
        rad = np.subtract(hi, lo)
        np.abs(rad, out=rad)
        rad *= 0.5 + 4.0 * _U
        t = np.abs(mid)
        t *= 2.0 * _U
        rad += t
        rad += 2.0**-1060
    return mid, rad


class QuantileBounds:
    """Float64 bounds on the exact ``|Z|`` quantile (a fast-path strategy).

    Subclasses implement `bounds`; `fine` (the common case of the fast path) defaults
    to converting `bounds` rigorously and is overridden where a cheaper proof exists.

    Example:
        >>> NoBounds().bounds(np.array([0.5]), np.array([0.5]))
        (array([0.]), array([inf]))
    """

    #: True for certified Arb tables (reports and tests).
    certified: bool = False

    def bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Float64 bounds ``lo <= m(u) <= hi`` for all ``u`` in ``[u_lo, u_hi]`` (exact m).

        Args:
            u_lo: Lower ends of the uniform intervals (float64, in [0, 1]).
            u_hi: Upper ends (``u_hi >= u_lo``).

        Returns:
            ``(lo, hi)`` float64 arrays.

        Example:
            >>> NoBounds().bounds(np.array([0.1]), np.array([0.2]))[1].tolist()
            [inf]
        """
        raise NotImplementedError  # pragma: no cover - every strategy implements it

    def fine(self, u_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray | float]:
        """Fast-path bounds ``|m(u) − mid| <= rad`` for all u in ``[u_lo, u_lo + 2**-53]``.

        Called by `tabdp.noise.exact.round_noisy` for almost every draw, with ``u_lo`` a
        multiple of ``2**-53`` in ``[2**-10, 1)`` (results for other ``u_lo`` are discarded).
        ``mid`` must be a new array (the caller overwrites it); ``rad`` may be an array or one
        float for all cells.

        Args:
            u_lo: Lower ends, multiples of ``2**-53`` in ``[2**-10, 1)``.

        Returns:
            ``(mid, rad)``.

        Example:
            >>> mid, rad = NoBounds().fine(np.array([0.5]))
            >>> bool(np.isinf(rad[0]))
            True
        """
        u_lo = np.asarray(u_lo, dtype=np.float64)
        return mid_rad(*self.bounds(u_lo, u_lo + 2.0**-53))


class NoBounds(QuantileBounds):
    """No float64 bound: ``(0, inf)`` everywhere, so every cell is decided on the exact path.

    Example:
        >>> lo, hi = NoBounds().bounds(np.zeros(2), np.ones(2))
        >>> lo.tolist(), hi.tolist()
        ([0.0, 0.0], [inf, inf])
    """

    def bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(0, inf)`` for every cell.

        Args:
            u_lo: Lower ends.
            u_hi: Upper ends (unused).

        Returns:
            ``(zeros, infs)`` shaped like ``u_lo``.

        Example:
            >>> NoBounds().bounds(np.array([0.3]), np.array([0.4]))[0].tolist()
            [0.0]
        """
        u_lo = np.asarray(u_lo, dtype=np.float64)
        return np.zeros_like(u_lo), np.full_like(u_lo, np.inf)


class ExactTail(Protocol):
    """The high-precision side of a `Rounding` (see `highprec`).

    ``mp_sf(x, mp)`` is ``P(Z > x)`` for ``x >= 0`` at the working precision ``mp.prec``;
    ``mp_abs_isf(u, mp)`` the exact ``|Z|`` quantile; ``arb`` tells whether certified Arb tails
    (``arb_unit()``, ``arb_tail(xs, central)``) are available.
    """

    arb: bool

    def mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x)`` in mpmath."""

    def mp_abs_isf(self, u: Any, mp: Any) -> Any:
        """The exact ``|Z|`` quantile in mpmath."""

    def arb_unit(self) -> float:
        """The scale that standardizes the law for `arb_tail`."""

    def arb_tail(self, xs: Any, central: bool = False) -> Any:
        """Standardized two-sided tail on an Arb series (``1 −`` it with ``central``)."""


class Rounding:
    """Exact rounding for one law: a `QuantileBounds` strategy and an `ExactTail`.

    Args:
        law: The noise law (for its float64 quantile ``_abs_isf``, the exact path's guesses).
        quantile: The float64 bounds strategy.
        tail: The exact tail strategy.

    Example:
        >>> from tabdp.noise import StudentT
        >>> r = StudentT(df=3.0).rounding
        >>> lo, hi = r.bounds(np.array([0.1]), np.array([0.1 + 1e-16]))
        >>> bool(lo[0] <= float(StudentT(df=3.0)._abs_isf(np.array([0.1]))[0]) <= hi[0])
        True
    """

    def __init__(self, law: Any, quantile: QuantileBounds, tail: ExactTail) -> None:
        self.law = law
        self.quantile = quantile
        self.tail = tail

    @property
    def certified(self) -> bool:
        """Whether the float64 bounds come from certified Arb tables.

        Example:
            >>> from tabdp.noise import Gaussian
            >>> Gaussian(sigma=1.0).rounding.certified
            False
        """
        return self.quantile.certified

    def bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Float64 bounds on the exact ``|Z|`` quantile over ``[u_lo, u_hi]`` (the strategy's).

        Args:
            u_lo: Lower ends of the uniform intervals.
            u_hi: Upper ends.

        Returns:
            ``(lo, hi)`` float64 arrays.

        Example:
            >>> from tabdp.noise import Gaussian
            >>> lo, hi = Gaussian(sigma=1.0).rounding.bounds(np.array([0.05]), np.array([0.05]))
            >>> bool(lo[0] < 1.959963984540054 < hi[0])
            True
        """
        return self.quantile.bounds(u_lo, u_hi)

    def fine(self, u_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray | float]:
        """The fast path's common case (see `QuantileBounds.fine`).

        Args:
            u_lo: Lower ends, multiples of ``2**-53`` in ``[2**-10, 1)``.

        Returns:
            ``(mid, rad)``.

        Example:
            >>> from tabdp.noise import Laplace
            >>> mid, rad = Laplace(scale=1.0).rounding.fine(np.array([0.5]))
            >>> bool(abs(mid[0] - 0.6931471805599453) <= rad < 1e-12)
            True
        """
        return self.quantile.fine(u_lo)

    def mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x)`` for ``x >= 0`` at the working precision (the exact tail's).

        Args:
            x: A non-negative ``mpf``.
            mp: The mpmath context.

        Returns:
            The tail probability as an ``mpf``.

        Example:
            >>> import mpmath
            >>> from tabdp.noise import Laplace
            >>> float(Laplace(scale=1.0).rounding.mp_sf(mpmath.mpf(1), mpmath.mp))   # e^-1 / 2
            0.18393972058572117
        """
        return self.tail.mp_sf(x, mp)

    def mp_abs_isf(self, u: Any, mp: Any) -> Any:
        """The exact ``|Z|`` quantile ``m`` with ``P(|Z| > m) = u`` in working precision.

        Args:
            u: Two-sided tail mass in (0, 1], an ``mpf``.
            mp: The mpmath context.

        Returns:
            ``m`` as an ``mpf``.

        Example:
            >>> import mpmath
            >>> from tabdp.noise import StudentT
            >>> m = StudentT(df=1.0).rounding.mp_abs_isf(mpmath.mpf("0.5"), mpmath.mp)  # Cauchy
            >>> abs(float(m) - 1.0) < 1e-12
            True
        """
        return self.tail.mp_abs_isf(u, mp)

    def arb_tail_available(self) -> bool:
        """Whether the exact path evaluates tails in Arb ball arithmetic (certified).

        Example:
            >>> from tabdp.noise import PolyPlace
            >>> PolyPlace(s=1.0, alpha=10.0).rounding.arb_tail_available()
            False
        """
        return bool(self.tail.arb)

    def arb_unit(self) -> float:
        """The scale that standardizes the law for `arb_tail`.

        Example:
            >>> from tabdp.noise import Laplace
            >>> Laplace(scale=2.0).rounding.arb_unit()
            2.0
        """
        return self.tail.arb_unit()

    def arb_tail(self, xs: Any, central: bool = False) -> Any:
        """Standardized two-sided tail ``P(|Z/unit| > x)`` on an Arb series.

        Args:
            xs: A python-flint ``arb_series``.
            central: Return ``1 −`` the tail (no cancellation).

        Returns:
            The tail series.

        Example:
            >>> import flint
            >>> from tabdp.noise import Laplace
            >>> t = Laplace(1.0).rounding.arb_tail(flint.arb_series([flint.arb(1)]))
            >>> round(float(t.coeffs()[0].mid()), 6)
            0.367879
        """
        return self.tail.arb_tail(xs, central)

    def __repr__(self) -> str:
        return (f"Rounding({type(self.quantile).__name__}, {type(self.tail).__name__}) "
                f"for {self.law!r}")
