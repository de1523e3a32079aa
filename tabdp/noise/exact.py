"""Exactly rounded noise: releases that floating point cannot leak through (docs/exact-rounding.md).

A mechanism that is private on the reals can leak through floating point: the set of doubles that
``q + rng.laplace(b)`` can produce depends on ``q`` (Mironov 2012). tabdp never releases such a
sum. Every released value is a deterministic rounding of the **exact** mechanism output

    ``x = c + s·Z``  (centre ``c``, per-cell scale ``s >= 0``, ``Z`` drawn from the exact law)

to a public `Grid` (``k·g`` for a `UniformGrid` up to ``2**40·g``, 40 significant
bits in units of g beyond; a fixed partition of the real line, so no magnitude is refused): the
release is a post-processing of the exact real-valued mechanism, so it keeps its guarantee
whatever the floating-point error of the intermediate steps, because that error never decides
the output.

How (vectorized over cells; `round_noisy`):

1. One 64-bit word per cell: its top bit is the sign of ``Z``, the other 63 bits locate a uniform
   ``U`` in ``[J, J + 1)·2^-63``; ``|Z| = m(U)`` with ``P(|Z| > m) = u`` (decreasing in u).
2. The law's rounding strategy (``law.rounding``, `tabdp.noise.rounding`) bounds ``m``
   over that interval in float64 with a proven error (docs §4: certified tables, Taylor tables,
   closed forms proven relative to libm): ``|m(U) − mid| <= rad`` (``Rounding.fine`` for the
   common case ``U >= 2^-10``, one quantile evaluation or a table lookup; ``Rounding.bounds``
   otherwise). On a uniform grid ``r = fl(fl(c + S·mid)·fl(1/g))`` and
   ``k = rint(r)``; a float64 error budget ``e >= |r − k| + 3.01u|r| + rad/g`` (u = 2^-53, each
   of its own roundings accounted for) with ``e < 1/2 − 4u`` proves ``|x/g − k| < 1/2``: k is
   the rounding of the exact x. Relative grids bound x from both sides and round both ends.
3. The other cells (typically 1e-6 and fewer) are decided one by one in arbitrary precision:
   ``x > b`` for a breakpoint ``b`` (exact dyadic rational) is equivalent to comparing ``U``
   with the exact tail ``P(|Z| > |b − c|/s)`` computed in Arb (``Rounding.arb_tail``; the
   mpmath ``Rounding.mp_sf`` for PolyPlace and as a fallback), which is decided exactly on
   rationals once its error interval excludes ``U``; otherwise 64 more random bits
   are drawn for the cell and/or the precision is raised. A bisection over breakpoints, started
   from the float64 estimate (and verified), gives the grid index. Their number is returned
   (`RoundedDraw.fallbacks`).

Extension contract for noise laws: a law is released only when composed with a
`tabdp.noise.rounding.Rounding` (an exact tail required; float64 bounds optional:
`NoBounds` sends every cell to the exact path).

Example:
    >>> from tabdp.noise import Laplace
    >>> d = round_noisy(Laplace(scale=10.0), [100.0, 250.0], grid=1.0, rng=7)
    >>> d.values.tolist() == [float(k) for k in d.index]       # whole numbers: multiples of 1
    True
    >>> d.fallbacks
    0
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp._lazy_scipy import LazyModule
from tabdp.exceptions import InvalidParameterError, TabdpInternalError
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.rounding import Rounding, mid_rad, rounder_for
from tabdp.noise.rounding.certified import arb_context, arb_point_tail
from tabdp.rng import as_random_source

if TYPE_CHECKING:
    import mpmath
else:  # imported on first use, never by a Spark worker that unpickles a mechanism
    mpmath = LazyModule("mpmath")

__all__ = [
    "Grid",
    "UniformGrid",
    "RelativeGrid",
    "RoundedDraw",
    "round_noisy",
    "as_grid",
    "check_grid",
    "default_grid",
    "noise_spread",
    "grid_magnitude",
    "MIN_GRID_RATIO",
    "TAIL_FOR_MAGNITUDE",
]

_U = 2.0**-53
#: Significant bits of a :class:`UniformGrid` beyond its uniform part ``|x| <= 2**40·step``.
UNIFORM_BITS = 40
_UB = UNIFORM_BITS
_UH = 1 << (UNIFORM_BITS - 1)
_TWO63 = 2**63
_MASK63 = np.uint64(_TWO63 - 1)
#: Relative resolution of a UniformGrid beyond its uniform part (kept for compatibility).
MIN_GRID_RATIO = 2.0**-40
#: Two-sided tail mass whose |Z| quantile stands for "the largest noise" (grid_magnitude).
TAIL_FOR_MAGNITUDE = 1e-9
#: Normal-consistent MAD factor 1/Φ⁻¹(3/4) (spread of heavy-tailed laws).
_MAD_TO_SD = 1.482602218505602
#: High-precision path: initial extra precision over the random bits, and refinement limits.
_EXTRA_PREC = 64
_MAX_ROUNDS = 200
_MAX_PREC = 1 << 15
#: Precision beyond which a breakpoint indistinguishable from the centre is taken as equal to it.
_ZERO_PREC = 1024


# -- grids ---------------------------------------------------------------------------------------
class Grid(ABC):
    """A public, data-independent set of output values indexed by integers ``k``.

    Subclasses define the value of index ``k`` (exactly, as a rational and as the float64
    released), the breakpoint between ``k`` and ``k + 1`` (their midpoint: round to nearest), and
    float64 index bounds from bounds on the exact value.

    Example:
        >>> g = UniformGrid(0.5)
        >>> g.value(3), g.breakpoint(3)
        (Fraction(3, 2), Fraction(7, 4))
    """

    #: Largest |index|: outputs beyond it saturate at the extreme grid value.
    cap: int

    @abstractmethod
    def value(self, k: int) -> Fraction:
        """Exact value of index ``k``.

        Example:
            >>> UniformGrid(2.0).value(-3)
            Fraction(-6, 1)
        """

    def breakpoint(self, k: int) -> Fraction:
        """Exact midpoint between the values of ``k`` and ``k + 1`` (where rounding switches).

        Args:
            k: Index.

        Returns:
            The midpoint as a Fraction.

        Example:
            >>> RelativeGrid(4).breakpoint(0) > 0
            True
        """
        return (self.value(k) + self.value(k + 1)) / 2

    @abstractmethod
    def values(self, k: np.ndarray) -> np.ndarray:
        """Released float64 values of indices ``k`` (vectorized).

        Example:
            >>> UniformGrid(0.1).values(np.array([3])).tolist()    # the double nearest 0.3
            [0.30000000000000004]
        """

    @abstractmethod
    def _float_bounds(self, center: np.ndarray, center_err: np.ndarray | None,
                      z_lo: np.ndarray, z_hi: np.ndarray,
                      scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Float64 index bounds ``a <= round(x) <= b`` (integral values; NaN/±inf if unknown).

        May overwrite ``z_lo``, ``z_hi`` and ``scratch`` (float64 arrays owned by the caller).
        """

    def index_bounds(self, center: np.ndarray, center_err: np.ndarray | None, z_lo: np.ndarray,
                     z_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Grid indices bracketing the rounding of every exact ``x`` in the given bounds.

        ``x = c + z`` with ``|c − center| <= center_err`` and ``z_lo <= z <= z_hi`` (all
        float64). Returns ``(k_lo, k_hi, ok)``: for every such x, ``k_lo <= round(x) <= k_hi``
        where ``ok``; cells with ``ok`` false are left to the high-precision path.

        Args:
            center: float64 centres.
            center_err: Absolute error bounds of the centres (None: exact).
            z_lo: Lower bounds of ``s·Z``.
            z_hi: Upper bounds of ``s·Z``.

        Returns:
            ``(k_lo, k_hi, ok)`` (int64, int64, bool arrays).

        Example:
            >>> lo, hi, ok = UniformGrid(1.0).index_bounds(
            ...     np.array([10.0]), None, np.array([0.2]), np.array([0.3]))
            >>> int(lo[0]), int(hi[0]), bool(ok[0])
            (10, 10, True)
        """
        a, b = self._float_bounds(np.asarray(center, dtype=np.float64), center_err,
                                  np.array(z_lo, dtype=np.float64),
                                  np.array(z_hi, dtype=np.float64))
        with np.errstate(invalid="ignore"):
            lim = float(self.cap)
            ok = (np.abs(a) <= lim) & (np.abs(b) <= lim)   # False for NaN and ±inf
        return (np.where(ok, a, 0.0).astype(np.int64), np.where(ok, b, 0.0).astype(np.int64), ok)

    def _values_f(self, k: np.ndarray) -> np.ndarray:
        """Released values of float64 integral indices (``|k| <= cap``)."""
        return self.values(k.astype(np.int64))

    @abstractmethod
    def halfstep(self, values: np.ndarray) -> np.ndarray:
        """Upper bound on ``|released − exact|`` for released ``values`` (half a grid step).

        Example:
            >>> UniformGrid(10.0).halfstep(np.array([0.0, 1e6])).tolist()
            [5.0, 5.0]
        """

    @abstractmethod
    def describe(self) -> float | str:
        """Public description for reports: the step of a uniform grid, or a label.

        Example:
            >>> UniformGrid(1.0).describe(), RelativeGrid(36).describe()
            (1.0, 'relative-36-bit')
        """


class UniformGrid(Grid):
    """The public grid of a step ``g``: uniform near 0, ``UNIFORM_BITS`` significant bits beyond.

    The grid is a fixed partition of the real line, defined by the step alone (no data):

    * for ``|x| <= 2**40·g``: the multiples ``k·g`` (index ``k``, ``|k| <= 2**40``);
    * beyond: ``m·2**j·g`` with an integer ``m`` in ``[2**39, 2**40)`` and ``j >= 1``, i.e. the
      numbers with 40 significant bits in units of ``g`` (spacing ``2**j·g`` in
      ``[2**(39+j)·g, 2**(40+j)·g)``, so a release moves by at most ``2**-40`` of its magnitude).

    The index of ``m·2**j·g`` is ``j·2**39 + m``, so indices are consecutive integers and the grid
    continues the uniform part seamlessly (the spacing doubles at each binade from ``2**40·g``).
    Released values are the float64 nearest the grid value (``fl(k·g)`` in the uniform part, exactly
    ``k·g`` for whole-number steps). Every real number has a grid point (no output magnitude is
    refused); indices stop at `cap`, the largest index whose value is a finite double.

    Args:
        step: The grid step, a positive finite float.

    Raises:
        InvalidParameterError: If ``step`` is not a positive finite number.

    Example:
        >>> UniformGrid(1000.0).values(np.array([-2, 7])).tolist()
        [-2000.0, 7000.0]
        >>> g = UniformGrid(1.0)
        >>> [float(g.value(k)) for k in (2**40, 2**40 + 1, 2**40 + 2**39)]    # spacing 2 beyond
        [1099511627776.0, 1099511627778.0, 2199023255552.0]
    """

    def __init__(self, step: float) -> None:
        """Check ``step`` and find the largest index whose value is a finite double."""
        self.step = _check_step(step, "UniformGrid")
        self._frac = Fraction(self.step)
        # the largest index whose value m·2**j·step is below the double range
        top = Fraction(2) ** 1024 - Fraction(2) ** 970    # values below it round to a finite double
        j = max(0, math.floor(1024 - _UB - math.log2(self.step)) - 3)
        while j > 0 and Fraction((1 << _UB) - 1) * (Fraction(2) ** j) * self._frac >= top:
            j -= 1
        while Fraction((1 << _UB) - 1) * (Fraction(2) ** (j + 1)) * self._frac < top:
            j += 1
        if j == 0:
            lim = int(top / self._frac)
            self.cap = min(lim, 1 << _UB)
        else:
            m = min(int(top / (Fraction(2) ** j * self._frac)), (1 << _UB) - 1)
            self.cap = j * _UH + m

    @staticmethod
    def _split(k: int) -> tuple[int, int]:
        """``(m, j)`` with index ``|k|`` ↦ value ``m·2**j`` (in units of the step)."""
        a = abs(k)
        if a <= 1 << _UB:
            return a, 0
        j = a // _UH - 1
        return a - j * _UH, j

    def value(self, k: int) -> Fraction:
        """Exact value of index ``k`` (``k·step`` in the uniform part).

        Args:
            k: Index.

        Returns:
            The value as a Fraction.

        Example:
            >>> UniformGrid(0.25).value(5)
            Fraction(5, 4)
        """
        m, j = self._split(k)
        v = self._frac * (m << j)
        return -v if k < 0 else v

    def breakpoint(self, k: int) -> Fraction:
        """Midpoint of the values of ``k`` and ``k + 1``: ``(k + 1/2)·step`` in the uniform part.

        Args:
            k: Index.

        Returns:
            The breakpoint as a Fraction.

        Example:
            >>> UniformGrid(1.0).breakpoint(-1)
            Fraction(-1, 2)
        """
        if -(1 << _UB) <= k < 1 << _UB:
            return self._frac * (2 * k + 1) / 2
        return (self.value(k) + self.value(k + 1)) / 2

    def values(self, k: np.ndarray) -> np.ndarray:
        """Released values: ``fl(k·step)`` in the uniform part, ``fl(m·step)·2**j`` beyond.

        Args:
            k: Integer indices with ``|k| <= cap``.

        Returns:
            float64 values.

        Example:
            >>> UniformGrid(3.0).values(np.array([2])).tolist()
            [6.0]
        """
        k = np.asarray(k, dtype=np.int64)
        a = np.abs(k)
        big = a > (1 << _UB)
        if not np.any(big):
            return k.astype(np.float64) * self.step
        j = np.where(big, a // _UH - 1, 0)
        m = a - j * _UH
        with np.errstate(over="ignore"):
            out = np.ldexp(m.astype(np.float64) * self.step, j.astype(np.int32))
        return np.where(k < 0, -out, out)

    def _index(self, y: np.ndarray) -> np.ndarray:
        """Grid index (float64, integral) of the rounding of doubles ``y`` in units of the step.

        ``rint`` in the uniform part; frexp, ldexp and rint beyond (all exact, monotone).
        """
        ay = np.abs(y)
        with np.errstate(invalid="ignore", over="ignore"):
            small = ay < float(1 << _UB)
            m, e = np.frexp(np.where(small, 0.0, ay))           # ay = m·2**e, m in [1/2, 1)
            sig = np.rint(np.ldexp(m, _UB))                      # in [2**39, 2**40]
            ex = e.astype(np.float64) - _UB
            carry = sig >= float(1 << _UB)
            sig = np.where(carry, float(_UH), sig)
            ex = np.where(carry, ex + 1.0, ex)
            idx = np.where(small, np.rint(ay), ex * float(_UH) + sig)
            idx = np.where(np.isfinite(ay), idx, np.nan)
        return np.where(y < 0, -idx, idx)

    def _float_bounds(self, center: np.ndarray, center_err: np.ndarray | None,
                      z_lo: np.ndarray, z_hi: np.ndarray,
                      scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Bounds ``a <= x/step <= b`` with an 8-ulp margin, then the (exact, monotone) index.

        ``r = fl(fl(c + z)·fl(1/step))`` is within ``3.03u·|r|`` of ``(c + z)/step`` (three
        roundings, u = 2**-53); ``a = fl(r − fl(8u|r| + 2·err/step))`` stays below the exact
        value after its own roundings. Underflow needs no term: a sum of doubles that is
        subnormal is exact, and the index can only change across a breakpoint, far from the
        subnormal range. The index map (rint in the uniform part, rounding to 40 significant
        bits beyond) is monotone and exact on doubles, and agrees with rounding the reals.
        """
        inv = 1.0 / self.step
        with np.errstate(over="ignore", invalid="ignore"):
            a = np.add(center, z_lo, out=z_lo)
            a *= inv
            b = np.add(center, z_hi, out=z_hi)
            b *= inv
            t = np.abs(a, out=scratch)
            t *= 8.0 * _U
            if center_err is not None:
                t += (2.0 * inv) * center_err
            a -= t
            np.abs(b, out=t)
            t *= 8.0 * _U
            if center_err is not None:
                t += (2.0 * inv) * center_err
            b += t
        return self._index(a), self._index(b)

    def halfstep(self, values: np.ndarray) -> np.ndarray:
        """Bound on ``|released − exact|``: ``step/2``, or ``|value|·2**-40`` beyond ``2**40·step``.

        Args:
            values: Released values.

        Returns:
            Half-steps.

        Example:
            >>> UniformGrid(1.0).halfstep(np.array([3.0, 2.0**50])).tolist()
            [0.5, 1024.0000000000005]
        """
        av = np.abs(np.asarray(values, dtype=np.float64))
        lim = float(1 << _UB) * self.step
        with np.errstate(over="ignore"):
            rel = av * 2.0**-_UB * (1.0 + 4.0 * _U)
        return np.where(av < lim, 0.5 * self.step, np.maximum(rel, 0.5 * self.step))

    def describe(self) -> float:
        """The step (it defines the whole grid).

        Example:
            >>> UniformGrid(0.01).describe()
            0.01
        """
        return self.step

    def __repr__(self) -> str:
        """``UniformGrid(step)``."""
        return f"UniformGrid({self.step!r})"

    def __eq__(self, other: object) -> bool:
        """Grids with the same step are equal."""
        return isinstance(other, UniformGrid) and other.step == self.step

    def __hash__(self) -> int:
        """Hash of the step, consistent with ``==``."""
        return hash(("UniformGrid", self.step))


class RelativeGrid(Grid):
    """Numbers with ``bits`` significant bits: round to nearest (ties to even) at that precision.

    The grid is a fixed, public set (like the doubles, with a ``bits``-bit significand; spacing
    ``2**(e − bits + 1)`` in the binade ``[2**e, 2**(e+1))``, down to ``2**-1074``), so it depends
    on no data. A release moves by at most ``2**-bits`` of its magnitude. Used where no public scale
    exists for a uniform grid (smooth-sensitivity noise, whose scale is data-dependent).

    Args:
        bits: Significant bits, 4 to 40 (default 36).

    Raises:
        InvalidParameterError: If ``bits`` is not an int in [4, 40].

    Example:
        >>> g = RelativeGrid(36)
        >>> lo, hi, ok = g.index_bounds(np.array([5.0]), None, np.array([0.0]), np.array([0.0]))
        >>> g.values(lo).tolist()
        [5.0]
    """

    def __init__(self, bits: int = 36) -> None:
        """Check ``bits`` (an int in [4, 40]) and precompute the index range."""
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 4 <= bits <= 40:
            raise InvalidParameterError(
                f"RelativeGrid: bits must be an int in [4, 40]; got {bits!r}.\n"
                "Hint: the default bits=36 moves values by at most 1.5e-11 of their magnitude.")
        self.bits = int(bits)
        self._half = 1 << (self.bits - 1)
        # largest value below the double range: significand 2**bits − 1 at exponent 1024 − bits
        self.cap = (1024 - self.bits + 1074) * self._half + (1 << self.bits) - 1

    def _split(self, k: int) -> tuple[int, int]:
        """``(m, e)`` with value ``|k|`` ↦ ``m·2**e``."""
        a = abs(k)
        if a < (1 << self.bits):
            return a, -1074
        j = a // self._half - 1
        return a - j * self._half, j - 1074

    def value(self, k: int) -> Fraction:
        """Exact value of index ``k`` (odd symmetric: ``value(−k) = −value(k)``).

        Args:
            k: Index.

        Returns:
            The value as a Fraction.

        Example:
            >>> g = RelativeGrid(4)
            >>> [float(g.value(k)) > 0 for k in (1, 16, 1000)]
            [True, True, True]
        """
        m, e = self._split(k)
        v = Fraction(m) * (Fraction(2) ** e)
        return -v if k < 0 else v

    def values(self, k: np.ndarray) -> np.ndarray:
        """float64 values (exact: a ``bits``-bit significand fits in a double).

        Args:
            k: Integer indices with ``|k| <= cap``.

        Returns:
            float64 values.

        Example:
            >>> g = RelativeGrid(36)
            >>> lo, _, _ = g.index_bounds(np.array([0.1]), None, np.zeros(1), np.zeros(1))
            >>> bool(abs(g.values(lo)[0] - 0.1) <= 0.1 * 2.0**-36)
            True
        """
        k = np.asarray(k, dtype=np.int64)
        a = np.abs(k)
        small = a < (1 << self.bits)
        j = np.where(small, 0, a // self._half - 1)
        m = a - j * self._half
        e = np.where(small, -1074, j - 1074)
        out = np.ldexp(m.astype(np.float64), e.astype(np.int32))
        return np.where(k < 0, -out, out)

    def _index(self, x: np.ndarray) -> np.ndarray:
        """Index of the rounding of doubles ``x`` (exact: frexp, ldexp and rint are exact)."""
        ax = np.abs(x)
        m, e = np.frexp(ax)                         # ax = m·2**e, m in [0.5, 1)
        sig = np.rint(np.ldexp(m, self.bits))       # in [2**(bits−1), 2**bits]
        ex = e.astype(np.int64) - self.bits
        carry = sig >= float(1 << self.bits)
        sig = np.where(carry, float(self._half), sig)
        ex = np.where(carry, ex + 1, ex)
        sub = ex < -1074                            # below the normal range: spacing 2**-1074
        with np.errstate(over="ignore"):
            sig = np.where(sub, np.rint(np.ldexp(np.where(sub, ax, 0.0), 1074)), sig)
        ex = np.where(sub, -1074, ex)
        idx = (ex + 1074) * self._half + sig.astype(np.int64)
        idx = np.where(ax == 0.0, 0, idx)
        return np.where(x < 0, -idx, idx)

    def _float_bounds(self, center: np.ndarray, center_err: np.ndarray | None,
                      z_lo: np.ndarray, z_hi: np.ndarray,
                      scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on ``x`` with a 4-ulp margin for ``fl(c + z)``, then exact rounding to bits."""
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            xa = center + z_lo
            xb = center + z_hi
            ea = 4.0 * _U * np.abs(xa) + 5e-324
            eb = 4.0 * _U * np.abs(xb) + 5e-324
            if center_err is not None:
                ea = ea + 2.0 * center_err
                eb = eb + 2.0 * center_err
            a = xa - ea
            b = xb + eb
            big = 2.0**1023
            ok = (np.abs(a) < big) & (np.abs(b) < big)
            ka = self._index(np.where(ok, a, 0.0)).astype(np.float64)
            kb = self._index(np.where(ok, b, 0.0)).astype(np.float64)
        return np.where(ok, ka, np.nan), np.where(ok, kb, np.nan)

    def halfstep(self, values: np.ndarray) -> np.ndarray:
        """``|value|·2**-bits`` (at least half the spacing at that magnitude), ``2**-1075`` floor.

        Args:
            values: Released values.

        Returns:
            Bounds on the rounding error.

        Example:
            >>> RelativeGrid(10).halfstep(np.array([1024.0])).tolist()
            [1.0]
        """
        return np.maximum(np.abs(values) * 2.0 ** -self.bits, 2.0**-1074)

    def describe(self) -> str:
        """A label, e.g. ``'relative-36-bit'``.

        Example:
            >>> RelativeGrid(20).describe()
            'relative-20-bit'
        """
        return f"relative-{self.bits}-bit"

    def __repr__(self) -> str:
        """``RelativeGrid(bits)``."""
        return f"RelativeGrid({self.bits})"

    def __eq__(self, other: object) -> bool:
        """Grids with the same number of bits are equal."""
        return isinstance(other, RelativeGrid) and other.bits == self.bits

    def __hash__(self) -> int:
        """Hash of the number of bits, consistent with ``==``."""
        return hash(("RelativeGrid", self.bits))


def _check_step(step: Any, owner: str) -> float:
    if isinstance(step, bool) or not isinstance(step, (int, float, np.integer, np.floating)):
        raise InvalidParameterError(
            f"{owner}: grid must be a positive number (the public rounding step of the "
            f"released values); got {step!r} of type {type(step).__name__}.\n"
            "Hint: e.g. grid=1.0 for counts and whole dollars, grid=1000.0 for thousands of "
            "dollars; grid=None uses the mechanism's default (docs/exact-rounding.md).")
    g = float(step)
    if not math.isfinite(g) or g <= 0.0:
        raise InvalidParameterError(
            f"{owner}: grid must be positive and finite; got {step!r}.\n"
            "Hint: e.g. grid=1.0 for counts; grid=None uses the mechanism's default grid.")
    return g


def as_grid(grid: float | Grid, owner: str = "release") -> Grid:
    """Coerce a grid argument: a positive float step becomes a `UniformGrid`.

    Args:
        grid: A positive finite step or a `Grid`.
        owner: Name used in error messages.

    Returns:
        The grid.

    Raises:
        InvalidParameterError: For non-positive, non-finite or non-numeric steps.

    Example:
        >>> as_grid(0.5), as_grid(RelativeGrid())
        (UniformGrid(0.5), RelativeGrid(36))
    """
    if isinstance(grid, Grid):
        return grid
    return UniformGrid(_check_step(grid, owner))


def grid_magnitude(noise: NoiseDistribution, center: np.ndarray,
                   scale: np.ndarray | None = None) -> float:
    """Largest output magnitude ``max|c| + max(s)·q`` (planning only; no release reads it).

    ``q`` is the |Z| quantile at two-sided tail `TAIL_FOR_MAGNITUDE` (1e-9).

    Args:
        noise: The noise law.
        center: Centres.
        scale: Per-cell scales (None: 1).

    Returns:
        The magnitude (0 for no cells).

    Example:
        >>> from tabdp.noise import Laplace
        >>> round(grid_magnitude(Laplace(scale=1.0), np.array([100.0, -50.0])), 3)   # 100 + 9 ln 10
        120.723
    """
    if center.size == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        qz = float(noise._abs_isf(np.asarray([TAIL_FOR_MAGNITUDE]))[0])
    smax = 1.0 if scale is None else float(np.max(scale)) if scale.size else 0.0
    cmax = max(float(np.max(center)), -float(np.min(center)))
    return cmax + (smax * qz if smax > 0 else 0.0)


def check_grid(grid: float | Grid, magnitude: float = 0.0, owner: str = "release") -> Grid:
    """Validate a grid on its own (positive, finite step or a `Grid`); no data is read.

    Every real number has a point on every grid (a `UniformGrid` turns relative beyond
    ``2**40·step``), so no output magnitude is refused. ``magnitude`` is accepted for backward
    compatibility and ignored: a refusal that depended on ``max|q|`` would reveal that some cell
    is large (docs/exact-rounding.md §5).

    Args:
        grid: A step or `Grid`.
        magnitude: Ignored.
        owner: Name used in error messages.

    Returns:
        The grid as a `Grid`.

    Raises:
        InvalidParameterError: For a non-positive, non-finite or non-numeric step.

    Example:
        >>> check_grid(1.0, magnitude=1e30)
        UniformGrid(1.0)
    """
    return as_grid(grid, owner)


def noise_spread(noise: NoiseDistribution) -> float:
    """The spread that sets default grids: the standard deviation, or 1.4826·MAD if it is infinite.

    ``MAD`` is the median of ``|Z|`` (exact quantile); 1.4826·MAD equals the sd for a Gaussian.

    Args:
        noise: The noise law.

    Returns:
        The spread (> 0).

    Example:
        >>> from tabdp.noise import Gaussian, StudentT
        >>> noise_spread(Gaussian(sigma=2.0)), round(noise_spread(StudentT(df=1.0)), 4)
        (2.0, 1.4826)
    """
    sd = noise.std()
    if math.isfinite(sd) and sd > 0:
        return sd
    return _MAD_TO_SD * float(noise._abs_isf(np.asarray([0.5]))[0])


def default_grid(spread: float) -> float:
    """The largest power of ten ``<= 0.02·spread``: half a step is at most 1% of the spread.

    Returned as the double nearest the power of ten (``float("1e-2")``).

    Args:
        spread: A positive finite spread (sd, or the MAD-based spread of `noise_spread`).

    Returns:
        The grid step.

    Raises:
        InvalidParameterError: If ``spread`` is not positive and finite.

    Example:
        >>> default_grid(1.0), default_grid(50.0), default_grid(0.5)
        (0.01, 1.0, 0.01)
    """
    if not (isinstance(spread, (int, float, np.floating)) and math.isfinite(spread) and spread > 0):
        raise InvalidParameterError(f"default_grid: spread must be positive and finite; got "
                                    f"{spread!r}.")
    x = 0.02 * float(spread)
    e = math.floor(math.log10(x))
    while float(f"1e{e + 1}") <= x:
        e += 1
    while float(f"1e{e}") > x:
        e -= 1
    return float(f"1e{e}")


# -- the sampler ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RoundedDraw:
    """Result of `round_noisy`.

    Attributes:
        values: Released float64 values (grid points).
        index: Their grid indices (int64).
        fallbacks: Number of cells decided by the high-precision path.
        grid: The grid used.

    Example:
        >>> from tabdp.noise import Gaussian
        >>> d = round_noisy(Gaussian(sigma=5.0), np.zeros(3), grid=1.0, rng=0)
        >>> d.values.shape, d.index.dtype, d.grid
        ((3,), dtype('int64'), UniformGrid(1.0))
    """

    values: np.ndarray
    index: np.ndarray
    fallbacks: int
    grid: Grid


#: Cells per block of the fast path (128 KB per float64 temporary; measured best of 2^14..2^20).
_CHUNK = 1 << 14
_SIGN = np.uint64(_TWO63)
_ONE = np.uint64(1)
_ELEVEN = np.uint64(11)
#: The fast path's common case: ``u >= 2**-10``, i.e. the top 53 of the 63 uniform bits
#: ``j53 >= 2**43``; the other cells (about 0.1%) keep all 63 bits.
_J53_FINE = 1 << 43
#: Largest |index| the uniform fast path decides (the uniform part of a UniformGrid), and the
#: float index estimate beyond which an undecided cell goes to the relative part's fast path.
_UNIFORM_LIM = float(1 << UNIFORM_BITS)
_UNIFORM_FAST_LIM = _UNIFORM_LIM - 2.0
#: A cell is decided when its float64 error budget ``e < 1/2 − 4u`` (docs §3.2).
_THRESHOLD = 0.5 - 4.0 * _U


#: ``(mid, rad)`` of bounds (:func:`tabdp.noise.rounding.mid_rad`; the name used here).
_mid_rad = mid_rad


def _decide(w: np.ndarray, c: np.ndarray, zn: np.ndarray, rad: np.ndarray | float,
            s: np.ndarray | None, cerr: np.ndarray | None, inv: float, inv_up: float,
            k: np.ndarray, ok: np.ndarray, r: np.ndarray, e: np.ndarray,
            tmp: np.ndarray) -> None:
    """Uniform grid: the index of ``x = c_exact + S·s·M`` wherever float64 proves it.

    On entry ``|M − zn| <= rad`` (M the exact ``|Z|`` quantile over the cell's uniform
    interval); ``zn`` is overwritten. ``S = +1`` iff the top bit of ``w`` is set. Writes
    ``k = rint(r)`` with ``r = fl(fl(c + S·s·zn)·fl(1/g))`` (−0 normalised to +0) and ``ok``:
    where ``ok``, ``round(x/g) = k`` is proven (docs §3.2):

    ``|x/g − k| <= |r − k| + 3.01u·|r| + ρ/g``, with ``ρ = rad·s + 1.01u·|s·zn| + cerr`` the
    bound on ``|x − (c + S·s·zn)|``; the float64 sum ``e`` of ``|r − k|``, ``4u·|r|`` and
    ``fl(ρ·fl(fl(1/g)·(1 + 8u)))`` satisfies ``e >= (true sum)·(1 − u)²``, so ``e < 1/2 − 4u``
    implies ``|x/g − k| < 1/2``: x lies strictly inside k's rounding cell. NaN and ±inf give
    ``ok = False``.
    """
    np.bitwise_and(w, _SIGN, out=tmp)
    zv = zn.view(np.uint64)
    np.bitwise_xor(zv, tmp, out=zv)                 # zn = −S·m (exact sign flip)
    rho: np.ndarray | None = None
    if s is not None:
        np.multiply(zn, s, out=zn)                  # fl(s·(−S·m))
        rho = np.abs(zn)
        rho *= 2.0 * _U
        rho += s * rad
    elif np.ndim(rad):
        rho = np.asarray(rad)
    if cerr is not None:
        rho = (rho + cerr) if rho is not None else (cerr + float(rad))
    np.subtract(c, zn, out=r)                       # c + S·s·m
    r *= inv
    np.rint(r, out=k)
    np.subtract(r, k, out=e)                        # exact (Sterbenz, or k = 0)
    np.abs(e, out=e)
    np.abs(r, out=r)
    r *= 4.0 * _U
    e += r
    if rho is None:
        e += float(rad) * inv_up
    else:
        np.multiply(rho, inv_up, out=r)
        e += r
    np.less(e, _THRESHOLD, out=ok)
    k += 0.0                                        # −0.0 → +0.0 (the sign is not released)


def _uniform_fast(rnd: Rounding, g: UniformGrid, c: np.ndarray,
                  cerr: np.ndarray | None, s: np.ndarray | None, w: np.ndarray,
                  values: np.ndarray, index: np.ndarray, dec: np.ndarray,
                  fast_path: bool) -> None:
    """Fast path on a uniform grid, in blocks of `_CHUNK` cells (docs §3.2).

    Fills ``dec`` (decided), and ``values``/``index`` for decided cells; an undecided cell gets
    its float64 index estimate (or NaN) in ``values``, as a starting guess for the exact path.
    """
    n = c.size
    step = g.step
    inv = 1.0 / step
    inv_up = inv * (1.0 + 8.0 * _U)
    if not 2.0**-1000 < inv < 2.0**1000:     # absurd steps: no float64 guarantee, decide exactly
        dec[:] = False
        values[:] = np.nan
        return
    ch = min(_CHUNK, n)
    b64, bu, br, be, bk = (np.empty(ch, np.uint64), np.empty(ch), np.empty(ch), np.empty(ch),
                           np.empty(ch))
    bsm = np.empty(ch, dtype=bool)
    smalls: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for lo in range(0, n, ch):
            hi = min(lo + ch, n)
            if hi - lo < ch:
                m_ = hi - lo
                b64, bu, br, be, bk, bsm = b64[:m_], bu[:m_], br[:m_], be[:m_], bk[:m_], bsm[:m_]
            ws = w[lo:hi]
            # U in [J, J + 1)·2^-63 ⊆ [u, u + 2^-53] with u = j53·2^-53 (J: the low 63 bits)
            jb = np.left_shift(ws, _ONE, out=b64)
            np.right_shift(jb, _ELEVEN, out=jb)
            j53 = jb.view(np.int64)
            np.less(j53, _J53_FINE, out=bsm)
            if bsm.any():                           # u < 2^-10: redone below with 63 bits
                smalls.append(np.flatnonzero(bsm) + lo)
            np.multiply(j53, 2.0**-53, out=bu)
            mid, rad = rnd.fine(bu)
            ok = dec[lo:hi]
            _decide(ws, c[lo:hi], mid, rad, None if s is None else s[lo:hi],
                    None if cerr is None else cerr[lo:hi], inv, inv_up, bk, ok, br, be, b64)
            np.abs(bk, out=br)                      # the uniform part only: |k| <= 2**40
            np.less_equal(br, _UNIFORM_LIM, out=bsm)
            ok &= bsm
            np.multiply(bk, step, out=values[lo:hi])
            np.copyto(index[lo:hi], bk, casting="unsafe")
            if not fast_path:
                ok[:] = False
            if not ok.all():
                nd = np.flatnonzero(~ok)
                values[lo + nd] = bk[nd]
        if smalls:
            si = np.concatenate(smalls)
            ws = w[si]
            jj = (ws & _MASK63).astype(np.int64)    # < 2^53: the exact interval of U
            mid, rad = _mid_rad(*rnd.bounds(jj * 2.0**-63, (jj + 1) * 2.0**-63))
            m_ = si.size
            k, ok = np.empty(m_), np.empty(m_, dtype=bool)
            _decide(ws, c[si], mid, rad, None if s is None else s[si],
                    None if cerr is None else cerr[si], inv, inv_up, k, ok, np.empty(m_),
                    np.empty(m_), np.empty(m_, np.uint64))
            ok &= np.abs(k) <= _UNIFORM_LIM
            if not fast_path:
                ok[:] = False
            values[si] = np.where(ok, k * step, k)
            index[si] = k.astype(np.int64)
            dec[si] = ok


def _generic_fast(rnd: Rounding, g: Grid, c: np.ndarray, cerr: np.ndarray | None,
                  s: np.ndarray | None, w: np.ndarray, kf: np.ndarray, dec: np.ndarray,
                  fast_path: bool) -> None:
    """Fast path for other grids (relative), from bounds ``[lo, hi]`` on ``S·x``.

    Uses the grid's own float64 index bounds; fills ``dec`` and the float index (or the low
    end of its float64 bracket, or NaN) ``kf``.
    """
    cap = float(g.cap)
    n = c.size
    with np.errstate(all="ignore"):
        for lo in range(0, n, _CHUNK):
            sl = slice(lo, min(lo + _CHUNK, n))
            ws = w[sl]
            positive = ws >= _SIGN
            buf = np.left_shift(ws, _ONE)
            np.right_shift(buf, _ELEVEN, out=buf)
            j53 = buf.view(np.int64)
            u_lo = np.multiply(j53, 2.0**-53)
            u_hi = u_lo + 2.0**-53
            small = np.flatnonzero(j53 < _J53_FINE)
            if small.size:                          # U < 2^-10: all 63 bits (exact interval)
                js = (ws[small] & _MASK63).astype(np.int64)
                u_lo[small] = js * 2.0**-63
                u_hi[small] = (js + 1) * 2.0**-63
            m_lo, m_hi = rnd.bounds(u_lo, u_hi)
            if s is not None:
                ss = s[sl]
                m_lo = np.where(ss > 0, ss * (m_lo * (1.0 - 4.0 * _U)), 0.0)
                m_hi = np.where(ss > 0, ss * (m_hi * (1.0 + 4.0 * _U)), 0.0)
            else:
                m_lo, m_hi = np.array(m_lo, dtype=np.float64), np.array(m_hi, dtype=np.float64)
            # S·x = S·c + M, and rounding to a symmetric grid with ties to even is odd:
            # index(x) = S·index(S·c + M)
            cs = np.where(positive, c[sl], -c[sl])
            a, b = g._float_bounds(cs, None if cerr is None else cerr[sl], m_lo, m_hi)
            ok = (a == b) & (np.abs(a) <= cap)
            if not fast_path:
                ok[:] = False
            dec[sl] = ok
            kf[sl] = np.where(positive, a, -b)      # index, or the low end of the bracket


#: Smallest noise magnitude (upper quartile, times the per-cell scale) the fast path handles.
_TINY = 2.0 ** -960


def round_noisy(noise: NoiseDistribution, center: ArrayLike, grid: float | Grid, rng: Any = None,
                *, scale: ArrayLike | None = None, center_error: ArrayLike | None = None,
                exact_center: Callable[[int, Any], Any] | None = None, fast_path: bool = True,
                owner: str = "release") -> RoundedDraw:
    """Draw ``round_grid(c + s·Z)`` exactly, for every cell, with ``Z`` from ``noise``.

    Args:
        noise: The noise law, composed with exact rounding (``noise.rounding``).
        center: Centres ``c`` (1-D float64). Exact values unless ``center_error`` is given.
        grid: A positive step (uniform grid) or a `Grid`.
        rng: A [`RandomSource`][tabdp.RandomSource] (default: secure), or an int seed / numpy
            Generator.
        scale: Per-cell scales ``s >= 0`` (default 1); ``s = 0`` releases ``round_grid(c)``.
        center_error: Absolute error bounds of ``center`` as approximations of exact centres.
        exact_center: ``exact_center(i, mp)``: the exact centre ``c`` of cell i as an mpf at the
            working precision, with error at most ``(|c| + 1)·2**-(mp.prec − 16)``; required with
            ``center_error``.
        fast_path: False decides every cell in high precision (audits and tests; slow).
        owner: Name used in error messages.

    Returns:
        A `RoundedDraw`.

    Raises:
        InvalidParameterError: For invalid grids, scales, or a law without an exact tail.

    Example:
        >>> from tabdp.noise import Laplace
        >>> a = round_noisy(Laplace(1.0), [0.5], 1.0, rng=3).values
        >>> b = round_noisy(Laplace(1.0), [0.5], 1.0, rng=3, fast_path=False).values
        >>> bool(a[0] == b[0])
        True
    """
    rnd = rounder_for(noise)
    if rnd is None:
        raise InvalidParameterError(
            f"{owner}: {type(noise).__name__} noise cannot be released with exact rounding: it "
            "has no high-precision tail (no exact-rounding strategy, law.rounding is None).\n"
            "Hint: compose the law with a tabdp.noise.rounding.Rounding (float64 quantile bounds "
            "and an exact tail, e.g. MpTail for a closed-form mpmath tail); see "
            "docs/exact-rounding.md.")
    c = np.asarray(center, dtype=np.float64).reshape(-1)
    n = c.size
    if not np.all(np.isfinite(c)):
        raise InvalidParameterError(f"{owner}: centres must be finite.")
    s: np.ndarray | None = None
    if scale is not None:
        s = np.asarray(scale, dtype=np.float64).reshape(-1)
        if s.shape != c.shape or not np.all(np.isfinite(s)) or np.any(s < 0):
            raise InvalidParameterError(f"{owner}: scale must be finite, >= 0 and one per cell.")
        if np.all(s == 1.0):
            s = None
    cerr: np.ndarray | None = None
    if center_error is not None:
        if exact_center is None:
            raise InvalidParameterError(f"{owner}: center_error needs exact_center.")
        cerr = np.asarray(center_error, dtype=np.float64).reshape(-1)
        if cerr.shape != c.shape or np.any(~(cerr >= 0)):
            raise InvalidParameterError(f"{owner}: center_error must be >= 0, one per cell.")
    g = as_grid(grid, owner)       # data-free: every real has a grid point (no magnitude limit)
    # The fast path's error budgets are relative: they do not cover the absolute error of
    # subnormal intermediates. Laws whose scale is that small are refused; cells whose
    # per-cell scale makes the noise that small are decided on the exact path.
    typical = float(noise.isf(0.25))
    if not typical >= _TINY:
        raise InvalidParameterError(
            f"{owner}: the noise law {noise!r} has a scale below 2**-960 (its upper quartile is "
            f"{typical!r}); floating-point-safe rounding is not supported at that scale.\n"
            "Hint: use a noise scale of ordinary magnitude (rescale the measure instead).")
    tiny = None if s is None else (s > 0) & (s * typical < _TINY)
    src = as_random_source(rng)
    if n == 0:
        return RoundedDraw(np.zeros(0), np.zeros(0, dtype=np.int64), 0, g)

    w = src.bits(n)
    # The fast path runs in blocks of _CHUNK cells: temporaries stay in cache and below the
    # allocator's mmap threshold (fresh 8 MB arrays cost page faults).
    values = np.empty(n)
    index = np.empty(n, dtype=np.int64)
    dec = np.empty(n, dtype=bool)
    if isinstance(g, UniformGrid):
        _uniform_fast(rnd, g, c, cerr, s, w, values, index, dec, fast_path)
        # cells beyond the uniform part (|x| > 2**40·step): the relative part's fast path
        with np.errstate(invalid="ignore"):
            big = np.flatnonzero(~dec & ~(np.abs(values) < _UNIFORM_FAST_LIM))
        if big.size:
            kf = np.empty(big.size)
            db = np.empty(big.size, dtype=bool)
            inv = 1.0 / g.step
            if 2.0**-1000 < inv < 2.0**1000:
                _generic_fast(rnd, g, c[big], None if cerr is None else cerr[big],
                              None if s is None else s[big], w[big], kf, db, fast_path)
            else:
                db[:] = False
                kf[:] = np.nan
            with np.errstate(invalid="ignore"):
                index[big] = np.where(db, kf, 0.0).astype(np.int64)
            values[big] = np.where(db, g.values(index[big]), kf)
            dec[big] = db
    else:
        _generic_fast(rnd, g, c, cerr, s, w, values, dec, fast_path)
        with np.errstate(invalid="ignore"):
            index[:] = np.where(dec, values, 0.0).astype(np.int64)
    if tiny is not None and np.any(tiny):
        dec &= ~tiny
    todo = np.flatnonzero(~dec)
    if todo.size:
        cap = float(g.cap)
        guess = values[todo]
        with np.errstate(invalid="ignore"):
            ok = np.abs(guess) <= cap - 1              # False for NaN and ±inf
        zero = np.zeros(todo.size)
        kc, _, okc = g.index_bounds(c[todo], None, zero, zero)
        for t, i in enumerate(todo):
            cell = _Cell(noise=noise, grid=g, positive=bool(w[i] >= _SIGN),
                         bits=int(w[i] & _MASK63), nbits=63, center=float(c[i]),
                         exact=None if cerr is None else exact_center, index=int(i),
                         scale=1.0 if s is None else float(s[i]), src=src)
            # the float64 estimate of index(x) starts a verified bracket
            bracket = (int(guess[t]) - 1, int(guess[t]) + 1) if ok[t] else None
            index[i] = cell.solve(bracket, int(kc[t]) if okc[t] else 0)
    if isinstance(g, UniformGrid):
        if todo.size:
            values[todo] = g.values(index[todo])
    else:
        values = g.values(index)
    return RoundedDraw(values, index, int(todo.size), g)


# -- the high-precision path ---------------------------------------------------------------------
def _frac_of_mpf(x: Any) -> Fraction:
    """Exact rational value of a finite mpf."""
    man, exp = mpmath.mpf(x).man_exp
    return Fraction(int(man)) * (Fraction(2) ** int(exp))


def _frac_of_arb(x: Any) -> Fraction:
    """Exact rational value of an exact (radius 0) finite Arb number, e.g. a ball endpoint."""
    man, exp = x.mid().man_exp()
    return Fraction(int(man)) * (Fraction(2) ** int(exp))


def _mpf_of_frac(x: Fraction, mp: Any) -> Any:
    """``x`` rounded to the working precision (error at most 2 ulps)."""
    return mp.mpf(x.numerator) / x.denominator


class _Cell:
    """One undecided cell: its random bits, refined on demand, and the exact predicates."""

    def __init__(self, *, noise: NoiseDistribution, grid: Grid, positive: bool, bits: int,
                 nbits: int, center: float, exact: Callable[[int, Any], Any] | None, index: int,
                 scale: float, src: Any) -> None:
        self.noise, self.grid, self.positive = noise, grid, positive
        rnd = rounder_for(noise)
        if rnd is None:  # pragma: no cover - round_noisy refuses such laws first
            raise InvalidParameterError(f"{type(noise).__name__} has no exact rounding")
        self.rounding: Rounding = rnd
        self.J, self.L = bits, nbits
        self.center, self.exact, self.index = center, exact, index
        self.scale = scale
        self.src = src
        self.prec = nbits + _EXTRA_PREC
        self._c_cache: tuple[int, Any] | None = None
        self._median: float | None = None

    # random bits -------------------------------------------------------------------------------
    def _more_bits(self) -> None:
        self.J = (self.J << 64) | int(self.src.bits(1)[0])
        self.L += 64
        self.prec = max(self.prec, self.L + _EXTRA_PREC)

    # exact quantities --------------------------------------------------------------------------
    def _center_interval(self, mp: Any) -> tuple[Any, Any]:
        """``(c, radius)`` at the working precision."""
        if self.exact is None:
            c = mp.mpf(self.center)  # a double is exact in any precision >= 53
            return c, mp.zero
        if self._c_cache is None or self._c_cache[0] != mp.prec:
            self._c_cache = (mp.prec, self.exact(self.index, mp))
        c = self._c_cache[1]
        return c, (abs(c) + 1) * mp.mpf(2) ** (-mp.prec + 16)

    def _tail_arb(self, h: Any, mp: Any) -> tuple[Fraction, Fraction] | None:
        """Certified rational bounds on ``T(h)`` from the law's Arb tail (None if not finite).

        ``h`` (an mpf, exact dyadic) enters Arb exactly; the ball's endpoints are exact dyadics.
        Below the law's median the central form ``1 − T`` is evaluated (no cancellation, and
        fast where e.g. ``I_v`` near ``v = 1`` converges slowly).
        """
        rnd = self.rounding
        unit = rnd.arb_unit()
        central = float(h) < self._median_abs()
        man, exp = mpmath.mpf(h).man_exp
        with arb_context(mp.prec + 32, 1) as flint:
            x = flint.arb(flint.arf((int(man), int(exp)))) / flint.arb(unit)
            t = arb_point_tail(rnd.arb_tail, x, central)
            if central:
                t = 1 - t
            if not t.is_finite():
                return None
            floor = self.L + 2
            if t.upper() < flint.arb(2) ** -floor:        # see _tail
                return Fraction(0), Fraction(1, 1 << floor)
            lo = _frac_of_arb(t.lower())
            hi = _frac_of_arb(t.upper())
        return max(lo, Fraction(0)), min(hi, Fraction(1))

    def _median_abs(self) -> float:
        if self._median is None:
            with np.errstate(all="ignore"):
                self._median = float(self.noise._abs_isf(np.array([0.5]))[0])
        return self._median

    def _tail(self, h: Any, mp: Any) -> tuple[Fraction, Fraction]:
        """Rational bounds on ``T(h) = P(|Z| > h)`` for ``h > 0``.

        Laws with an Arb tail (``Rounding.arb_tail_available``) get certified bounds from ball
        arithmetic (`_tail_arb`). Otherwise mpmath evaluates the tail at the working
        precision and 32 bits more; the error bound is four times their difference plus
        ``2**-(prec − 16)`` relative.
        """
        if self.rounding.arb_tail_available():
            got = self._tail_arb(h, mp)
            if got is not None:
                return got
        p = mp.prec
        t1 = 2 * self.rounding.mp_sf(h, mp)
        with mpmath.workprec(p + 32):
            t2 = 2 * self.rounding.mp_sf(h, mp)
            err = 4 * abs(t1 - t2) + abs(t2) * mp.mpf(2) ** (-p + 16)
            lo, hi = t2 - err, t2 + err
            # A tail far below the resolution 2**-L of the uniform is only ever compared with
            # multiples of 2**-L: the bounds [0, 2**-(L+2)] decide exactly the same comparisons
            # (and ask for more bits when J = 0), without building a Fraction with a huge
            # exponent (T(h) can be as small as exp(-h**2/2) for h of thousands of sigmas).
            floor = self.L + 2
            if hi < mp.mpf(2) ** (-floor):
                return Fraction(0), Fraction(1, 1 << floor)
        return max(_frac_of_mpf(lo), Fraction(0)), min(_frac_of_mpf(hi), Fraction(1))

    def _greater(self, h1: Any, h2: Any, mp: Any) -> tuple[bool | None, Fraction]:
        """Decide ``M > h`` for every h in ``[h1, h2]``: (True/False/None, width of T-interval)."""
        u_lo = Fraction(self.J, 1 << self.L)
        u_hi = Fraction(self.J + 1, 1 << self.L)
        if h2 < 0:
            return True, Fraction(0)
        t_lo2, t_hi2 = (Fraction(1), Fraction(1)) if h2 == 0 else self._tail(h2, mp)
        if u_hi <= t_lo2:                       # U < T(h2) <= T(h): M(U) > h2 >= h
            return True, t_hi2 - t_lo2
        if h1 < 0:
            if self.prec >= _ZERO_PREC:
                # |γ| < 2^-(prec − 8)·|b|: only an exactly rational centre on a breakpoint gets
                # here; treat γ as 0 (M > 0 a.s.). Changes the output with probability < 2^-1000.
                return True, Fraction(0)
            return None, t_hi2 - t_lo2 + Fraction(1, 1 << self.L)
        t_lo1, t_hi1 = (t_lo2, t_hi2) if h1 == h2 else self._tail(h1, mp)
        if u_lo >= t_hi1:                       # U >= T(h1) >= T(h): M(U) <= h1 <= h (a.s. <)
            return False, t_hi1 - t_lo2
        return None, t_hi1 - t_lo2

    def _above(self, k: int) -> bool:
        """Exactly decide ``x > breakpoint(k)`` (refining bits/precision until decided)."""
        b = self.grid.breakpoint(k)
        for _ in range(_MAX_ROUNDS):
            with mpmath.workprec(self.prec):
                mp = mpmath.mp
                c, rc = self._center_interval(mp)
                if self.scale == 0.0:
                    if self.exact is None:
                        return Fraction(self.center) > b
                    bm = _mpf_of_frac(b, mp)
                    rad = abs(bm) * mp.mpf(2) ** (-mp.prec + 2) + rc
                    if c - rc > bm + rad:
                        return True
                    if c + rc < bm - rad:
                        return False
                    if self.prec >= _MAX_PREC:
                        # x = b to 2**-32768 relative: an exact tie, which goes to the lower
                        # grid point (the tie rule of `_solve`: smallest k with x <= b_k)
                        return False
                    self.prec = min(2 * self.prec, _MAX_PREC)
                    continue
                if self.exact is None:
                    gam = _mpf_of_frac((b - Fraction(self.center)) / Fraction(self.scale), mp)
                    rad = abs(gam) * mp.mpf(2) ** (-mp.prec + 4)
                else:
                    bm = _mpf_of_frac(b, mp)
                    sm = mp.mpf(self.scale)
                    gam = (bm - c) / sm
                    rad = ((abs(bm) * mp.mpf(2) ** (-mp.prec + 2) + rc) / sm
                           + abs(gam) * mp.mpf(2) ** (-mp.prec + 4))
                g1, g2 = gam - rad, gam + rad
                if self.positive:                   # x > b  <=>  M > γ
                    res, width = self._greater(g1, g2, mp)
                else:                               # x > b  <=>  M < −γ  <=>  not (M > −γ)
                    res, width = self._greater(-g2, -g1, mp)
                    res = None if res is None else not res
            if res is not None:
                return res
            u_width = Fraction(1, 1 << self.L)
            if width * 4 < u_width:
                self._more_bits()
            elif u_width * 4 < width:
                self.prec = min(self.prec + 64, _MAX_PREC)
            else:
                self._more_bits()
                self.prec = min(self.prec + 64, _MAX_PREC)
        raise TabdpInternalError(
            f"exact rounding could not decide a cell after {_MAX_ROUNDS} refinements "
            f"({self.L} random bits, precision {self.prec})")

    def solve(self, bracket: tuple[int, int] | None, guess: int = 0) -> int:
        """The grid index of ``round(x)``, clipped to ``[−cap, cap]``.

        ``bracket`` is the float64 index bracket (verified here, widened if ever wrong);
        without it the search gallops from ``guess``.
        """
        cap = self.grid.cap
        if bracket is not None:
            lo, hi = (min(max(v, -cap), cap) for v in bracket)
            # verify the float64 bracket (defence in depth), widening it if ever wrong
            while lo > -cap and not self._above(lo - 1):
                lo = max(lo - 2 * (hi - lo + 1), -cap)
            while hi < cap and self._above(hi):
                hi = min(hi + 2 * (hi - lo + 1), cap)
        else:
            k = min(max(guess, -cap), cap)
            if self._above(k):
                lo, step, hi = k + 1, 1, cap
                while lo <= cap:
                    cand = min(k + step, cap)
                    if not self._above(cand):
                        hi = cand
                        break
                    if cand == cap:
                        lo = hi = cap
                        break
                    k, lo, step = cand, cand + 1, step * 2
            else:
                lo, step, hi = -cap, 1, k
                while True:
                    cand = max(k - step, -cap)
                    if self._above(cand):
                        lo = cand + 1
                        break
                    if cand == -cap:
                        lo = hi = -cap
                        break
                    k, hi, step = cand, cand, step * 2
        while lo < hi:
            mid = (lo + hi) // 2
            if self._above(mid):
                lo = mid + 1
            else:
                hi = mid
        return lo
