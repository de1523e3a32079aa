"""Exact integer mechanisms for counts: discrete Gaussian and discrete Laplace noise.

Both release ``q + Z`` for an integer query value ``q`` and integer noise ``Z`` drawn exactly with
the samplers of Canonne, Kamath & Steinke (2020) (`tabdp.noise.discrete`): no floating point
decides the output, which closes the precision attacks on float noise (Mironov 2012).

* [`DiscreteGaussian`][tabdp.mechanisms.DiscreteGaussian] — ``Z`` discrete Gaussian with parameter
  σ: ρ(Δ) = Δ²/(2σ²) for integer Δ (CKS Thm 4), with an exact (ε, δ) policy (CKS Thm 7);
* [`DiscreteLaplace`][tabdp.mechanisms.DiscreteLaplace] — ``Z`` discrete Laplace with scale t: pure,
  ε(Δ) = Δ/t for integer Δ.

**Integer inputs only.** The guarantees hold for neighbouring values that differ by an integer Δ:
the outputs of ``q`` and ``q + Δ`` then live on the same lattice. For a non-integer Δ they live on
different lattices (``q + Z`` and ``q + Δ + Z`` never take the same value), so ρ = ε = ∞; the
policies return ``inf`` there. Float64 values must be integers (anything else is refused before
noise is drawn); an [`ExactTotals`][tabdp.mechanisms.ExactTotals] may hold integers of any size (a
fractional exact total is rounded half to even, a public rule that leaves integer totals unchanged).
The estimates are ``q + Z`` computed exactly (int64 while ``|q| <= 2**61``, Python integers beyond,
so no total is refused and nothing wraps) and returned as float64 (exact below 2**53; beyond, the
float64 rounding is a post-processing of the exact integer and costs no privacy).

**Grid.** ``release_table(..., grid=k)`` with an integer ``k > 1`` releases ``q + Z`` rounded to the
nearest multiple of ``k`` (ties to the even multiple): a post-processing of the exact integer
output, so the privacy guarantee is unchanged; the margin of error grows by ``k/2``. ``grid=None``
or ``1`` releases the exact integers; a non-integer grid is refused (the outputs are integers).

**Accounting is rounded up.** ε(Δ) and ρ(Δ) are returned as doubles never below the exact values
(the parameters are exact rationals): the exactly representable ones are exact, the others are
rounded up. The (ε, δ) profile of the discrete Gaussian is computed so that δ(ε) is never
understated (high-precision sums wherever the float evaluation is ill-conditioned).

Example:
    >>> m = DiscreteGaussian(sigma=2.0)
    >>> float(m.rho(2)), float(m.rho(0.5))
    (0.5, inf)
    >>> r = m.release_table([10.0, 20.0], rng=0)
    >>> bool(np.all(r.estimate == np.round(r.estimate)))
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from numbers import Rational, Real
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp import registry
from tabdp._lazy_scipy import LazyModule
from tabdp._validation import check_real
from tabdp.exceptions import DataValidationError, InvalidParameterError
from tabdp.mechanisms._base import (
    DEFAULT_LEVEL,
    LawOfSums,
    Mechanism,
    ReleasedValues,
    check_level,
    not_pure,
    pure_to_zcdp,
)
from tabdp.mechanisms._totals import ExactTotals
from tabdp.noise.discrete import MP_DPS, DiscreteGaussianNoise, DiscreteLaplaceNoise
from tabdp.rng import as_random_source

if TYPE_CHECKING:
    import mpmath
else:  # imported on first use, never by a Spark worker that unpickles a mechanism
    mpmath = LazyModule("mpmath")

__all__ = ["DiscreteAdditiveMechanism", "DiscreteGaussian", "DiscreteLaplace"]

#: int64 fast path: |q| <= 2**61 and |Z| < 2**62, so q + Z stays in int64 (and its rounding to a
#: multiple of k <= 2**53 too); anything larger is added exactly in Python integers.
_INT64_Q = 1 << 61
_INT64_Z = 1 << 62
#: Largest grid step accepted (a whole number held exactly in float64).
_GRID_MAX = 2**53
#: δ(ε) from float tail sums is trusted when the cancellation δ = a − b is mild, a/δ <= this;
#: beyond it (and for σ above the tail table, where the float tails come from Euler–Maclaurin),
#: δ is computed in 60-digit arithmetic.
_KAPPA_MP = 1e6
#: Float δ(ε) is inflated by a relative ``_REL_MARGIN + _COND_MARGIN·a/δ``. A float tail sum has
#: relative error below (g + 8)·2**-52 with g = −ln(tail) <= 700 (the arguments of exp are exact to
#: a relative 2**-52), i.e. below 1.6e-13 < 1e-12, and δ = a − b amplifies it by a/δ: the inflated
#: value is never below the exact δ(ε) (the threshold floor(εσ²/Δ − Δ/2) is settled exactly).
_REL_MARGIN = 1e-9
_COND_MARGIN = 1e-12
#: Relative error bound of the 60-digit tails (Euler–Maclaurin remainder included), used to round
#: the high-precision δ(ε) up.
_MP_REL = 1e-38
#: Below this δ the exact search is not used (tail sums near the underflow range); the zCDP
#: conversion still applies.
_MIN_EXACT_DELTA = 1e-280


def _integer_sensitivity(sensitivity: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """|Δ| and a mask of the finite integer values."""
    d = np.abs(np.asarray(sensitivity, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        is_int = np.isfinite(d) & (d == np.floor(d))
    return d, is_int


# ----------------------------------------------------------------------------------------------
# rounding up (accounting)
# ----------------------------------------------------------------------------------------------
def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp split: a = hi + lo exactly, each half with at most 26 significant bits."""
    c = a * 134217729.0  # 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a·b = p + e exactly (Dekker), for |a|, |b| in [0.5, 1) (no overflow or underflow)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def _float_up(value: Fraction) -> float:
    """The smallest double >= ``value`` (``inf`` beyond the double range)."""
    try:
        x = float(value)  # correctly rounded (int / int true division)
    except OverflowError:
        return math.inf
    if Fraction(x) < value:
        x = math.nextafter(x, math.inf)
    return x


def _exact_up(x: np.ndarray, fn: Callable[[int], Fraction]) -> np.ndarray:
    """``_float_up(fn(v))`` for each integer-valued double v of ``x``, once per distinct value."""
    uniq, inv = np.unique(x, return_inverse=True)
    vals = np.array([_float_up(fn(int(v))) for v in uniq.tolist()], np.float64)
    return vals[inv.reshape(-1)].reshape(x.shape)


def _div_up(x: np.ndarray, q: Fraction) -> np.ndarray:
    """The smallest double >= x/q for finite integer-valued doubles x >= 0 and a rational q > 0.

    When q is a double, ``fl(x/q)`` (correctly rounded) is checked exactly with Dekker's product
    and moved up one place where it is below ``x/q``; otherwise exact fractions are used.
    """
    x = np.atleast_1d(np.asarray(x, np.float64))
    qf = float(q)
    if Fraction(qf) != q:
        return _exact_up(x, lambda v: Fraction(v) / q)
    with np.errstate(over="ignore"):
        r = x / qf
    chk = np.flatnonzero((x > 0) & np.isfinite(r))
    if chk.size:
        rc, xc = r[chk], x[chk]
        mr, er = np.frexp(rc)
        mq, eq = np.frexp(qf)
        mx, ex = np.frexp(xc)
        p, e = _two_prod(mr, np.full(mr.shape, mq))
        k = er + eq - ex  # 0 or 1: r·q ≈ x
        # r·q − x has the sign of (P − mx) + E with P + E = mr·mq·2**k exactly; P − mx is exact
        # (Sterbenz: P ≈ mx), and a rounded sum of two doubles keeps the exact sum's sign
        below = (np.ldexp(p, k) - mx) + np.ldexp(e, k) < 0
        r[chk] = np.where(below, np.nextafter(rc, np.inf), rc)
    return r


def _half_square_up(t: np.ndarray) -> np.ndarray:
    """A double >= t²/2 (at most one place above fl(t²)/2) for doubles t >= 0."""
    out = np.full(t.shape, np.inf)
    fin = np.isfinite(t)
    m, ex = np.frexp(t[fin])
    p, e = _two_prod(m, m)
    p = np.where(e > 0, np.nextafter(p, np.inf), p)
    with np.errstate(over="ignore"):
        out[fin] = np.ldexp(p, 2 * ex - 1)
    return out


def _inflate(x: np.ndarray, ulps: int) -> np.ndarray:
    """``x`` raised by a relative ``ulps·2**-53`` and one more place (0 and ``inf`` unchanged).

    This covers that many ulps of error in a float evaluation.
    """
    with np.errstate(over="ignore"):
        y = x * (1.0 + ulps * 2.0**-53)
    return np.where((x > 0) & np.isfinite(x), np.nextafter(y, np.inf), x)


def _grid_step(grid: Any, owner: str) -> int:
    """The integer grid step of a discrete release (1 for ``None``)."""
    if grid is None:
        return 1
    k = 0  # invalid
    if isinstance(grid, bool | np.bool_) or not isinstance(grid, Real):
        pass
    elif isinstance(grid, Rational):  # int, numpy integer, Fraction: exactly
        if int(grid.denominator) == 1 and 1 <= int(grid.numerator) <= _GRID_MAX:
            k = int(grid.numerator)
    else:
        g = float(grid)
        if math.isfinite(g) and 1 <= g <= _GRID_MAX and g == math.floor(g):
            k = int(g)
    if k == 0:
        raise InvalidParameterError(
            f"{owner}: grid must be a whole number between 1 and 2**53; got {grid!r}. The discrete "
            "mechanisms release exact integers, so the only grids are the integers themselves "
            "(grid=None or 1) and multiples of an integer k > 1 (the exact output rounded to the "
            "nearest multiple of k).\nHint: use grid=None for the exact integer output, or e.g. "
            "grid=10 to publish multiples of 10; for non-integer steps use a continuous "
            "mechanism (Gaussian, Laplace).")
    return k


def _round_int(v: int, k: int) -> int:
    """A Python integer rounded to the nearest multiple of ``k`` (ties: the even multiple)."""
    if k == 1:
        return v
    m, r = divmod(v, k)
    return (m + (2 * r > k or (2 * r == k and m % 2 == 1))) * k


def _round_to_multiple(x: np.ndarray, k: int) -> np.ndarray:
    """Integers ``x`` (int64) rounded to the nearest multiple of ``k`` (ties: the even multiple)."""
    kk = np.int64(k)
    m = np.floor_divide(x, kk)
    r = x - m * kk  # in [0, k)
    up = (2 * r > kk) | ((2 * r == kk) & (m % 2 == 1))
    return (m + up) * kk


class DiscreteAdditiveMechanism(Mechanism):
    """Release ``q + Z`` for integer ``q`` and exact integer noise ``Z`` (symmetric).

    Subclasses set [`noise`][tabdp.noise] and the policies. The estimate is mean- and
    median-unbiased; its standard deviation is the noise's; the margin of error is the smallest
    integer ``h`` with ``P(|Z| <= h) >= level``, so the interval ``[est − h, est + h]`` covers the
    true value with probability **at least** ``level`` (a discrete law cannot hit ``level``
    exactly). With a grid ``k > 1`` (see
    [`release_table`][tabdp.mechanisms.DiscreteAdditiveMechanism.release_table]) the margin of error
    is ``h + k/2`` (the rounding moves the estimate by at most ``k/2``) and the reported sd stays
    the noise's (rounding not included).

    Args:
        noise: The integer noise law.

    Example:
        >>> m = DiscreteLaplace(scale=1.0)
        >>> isinstance(m, DiscreteAdditiveMechanism), m.noise.interval_halfwidth(0.9)
        (True, 2)
    """

    unbiased = "mean"

    def __init__(self, noise: DiscreteGaussianNoise | DiscreteLaplaceNoise) -> None:
        """Add integer ``noise`` (a public discrete law) to each released integer."""
        self.noise = noise

    def sum_law(self) -> LawOfSums:
        """The law of a sum of released cells: exact law of the integer sum.

        Example:
            >>> from tabdp.mechanisms import DiscreteLaplace
            >>> DiscreteLaplace(scale=1.0).sum_law().kind
            'integer'
        """
        return LawOfSums("integer", self.noise)

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
        return q

    def release_table(self, values: ArrayLike, rng: Any = None,
                      level: float = DEFAULT_LEVEL, grid: float | None = None) -> ReleasedValues:
        """Release ``values + Z`` (exact integers) with sd, integer margin of error and interval.

        Args:
            values: Exact cell values: float64 integers, or an
                [`ExactTotals`][tabdp.mechanisms.ExactTotals] (integers of any size; a fractional
                total is rounded half to even first).
            rng: Randomness (default: secure).
            level: Confidence level; the interval's coverage is at least ``level``.
            grid: ``None`` or ``1``: release the exact integers ``q + Z``. An integer ``k > 1``
                (at most 2**53): release ``q + Z`` rounded to the nearest multiple of ``k``, ties
                to the even multiple (post-processing: the privacy guarantee is unchanged); the
                margin of error then grows by ``k/2``.

        Returns:
            Estimates with sd (the noise's; rounding to the grid not included: negligible for
            ``k`` up to a tenth of the sd, the coarsest grid a release spec accepts), moe
            (``h``, plus ``k/2`` with a grid ``k > 1``) and interval; ``grid`` is ``None`` for
            the exact integers, else ``float(k)``.

        Raises:
            DataValidationError: If a float64 value is NaN, infinite or not an integer (never for
                an [`ExactTotals`][tabdp.mechanisms.ExactTotals]).
            InvalidParameterError: For an invalid level, or a grid that is not a whole number in
                [1, 2**53] (the outputs are integers).

        Example:
            >>> r = DiscreteGaussian(sigma=1.0).release_table([3.0, 4.0], rng=1, level=0.9)
            >>> r.moe.tolist(), r.sd.round(6).tolist()
            ([2.0, 2.0], [1.0, 1.0])
            >>> m = DiscreteGaussian(sigma=20.0)
            >>> r10 = m.release_table([1234.0], rng=1, grid=10)
            >>> float(r10.estimate[0] % 10), float(r10.moe[0] - m.moe_at([0.0])[0]), r10.grid
            (0.0, 5.0, 10.0)
        """
        level = check_level(level)
        owner = f"{type(self).__name__}.release"
        k = _grid_step(grid, owner)
        ints: list[int] | None = None
        if isinstance(values, ExactTotals):
            # exact integers of any size; a fractional total is rounded half to even (public rule:
            # integer contributions give integer totals, unchanged; a record whose contribution is
            # not an integer is charged inf by the policies anyway)
            sb = values.scale_bits
            fast = values.int64_numer(_INT64_Q) if sb == 0 else None
            if fast is not None:  # every total an integer in [-2**61, 2**61]: no Python ints
                n, small, q = fast.size, True, fast
            else:
                ints = (list(values.numer) if sb == 0
                        else [round(Fraction(v, 1 << sb)) for v in values.numer])
                n = len(ints)
                small = all(-_INT64_Q <= v <= _INT64_Q for v in ints)
                q = np.array(ints if small else [0] * n, dtype=np.int64)
        else:
            qf = self._prepare_integers(values)
            n = qf.size
            small = bool(np.all(np.abs(qf) <= float(_INT64_Q)))
            if small:
                q = qf.astype(np.int64)
            else:
                ints = [int(v) for v in qf.tolist()]   # doubles are exact integers here
                q = np.zeros(n, np.int64)
        src = as_random_source(rng)
        h = float(self.noise.interval_halfwidth(level))
        z = np.asarray(self.noise.sample((n,), src), dtype=np.int64)
        if k > 1:
            h += 0.5 * k
        if small and bool(np.all((z < _INT64_Z) & (z > -_INT64_Z))):
            exact = q + z                              # |q| <= 2**61, |z| < 2**62: no overflow
            if k > 1:
                exact = _round_to_multiple(exact, k)
            est = exact.astype(np.float64)
        else:
            # exact Python integers (huge totals, or a faulty source's huge draw): never wraps
            base = ints if ints is not None else q.tolist()
            out = [_round_int(v + int(zz), k) for v, zz in zip(base, z.tolist(), strict=True)]
            est = np.array([float(v) for v in out], dtype=np.float64)   # correctly rounded
        sd = np.full(n, self.noise.std())
        moe = np.full(n, h)
        return ReleasedValues(est, sd, moe, est - h, est + h, level,
                              grid=float(k) if k > 1 else None)

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

    def moe_at(self, values: ArrayLike, level: float = DEFAULT_LEVEL,
               grid: float | None = None) -> np.ndarray:
        """Margin of error: the integer half-width ``h`` (coverage ≥ ``level``) for every cell.

        Args:
            values: True values (only their shape matters).
            level: Confidence level.
            grid: The release's grid (``None`` or 1: exact integers; an integer ``k > 1`` adds
                ``k/2``).

        Returns:
            Half-widths.

        Raises:
            InvalidParameterError: For an invalid level or grid.

        Example:
            >>> DiscreteGaussian(sigma=10.0).moe_at([0.0], 0.9).tolist()
            [16.0]
            >>> DiscreteGaussian(sigma=10.0).moe_at([0.0], 0.9, grid=5).tolist()
            [18.5]
        """
        k = _grid_step(grid, f"{type(self).__name__}.moe_at")
        h = float(self.noise.interval_halfwidth(check_level(level)))
        if k > 1:
            h += 0.5 * k
        return np.full(np.shape(np.asarray(values, dtype=np.float64)), h)

    def rho(self, sensitivity: ArrayLike) -> np.ndarray:  # pragma: no cover - overridden
        """PRzCDP policy (each subclass gives its own).

        Example:
            >>> float(DiscreteLaplace(scale=1.0).rho(0))
            0.0
        """
        raise NotImplementedError

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:  # pragma: no cover - overridden
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


@registry.mechanism('discrete_gaussian', tags=('spec', 'additive', 'integer'), rank=12)
class DiscreteGaussian(DiscreteAdditiveMechanism):
    """Discrete Gaussian mechanism: ``q + Z``, Z exact discrete Gaussian with parameter σ.

    Guarantee (CKS 2020, Thm 4): for integer Δ, D_α(q + Z ‖ q + Δ + Z) ≤ α·Δ²/(2σ²), so
    ρ(Δ) = Δ²/(2σ²) (returned rounded up); ρ = ∞ for non-integer Δ (different lattices). Not pure
    (ε = ∞ for Δ > 0). Its (ε, δ) profile is computed from the discrete law
    ([`delta_at`][tabdp.mechanisms.DiscreteGaussian.delta_at],
    [`approx_epsilon`][tabdp.mechanisms.DiscreteGaussian.approx_epsilon]), never understating δ; it
    is *not* the continuous Gaussian's, so `gaussian_dp` is False.

    Args:
        sigma: σ in [2**-40, 2**40]; int, float (taken exactly) or ``fractions.Fraction``.

    Example:
        >>> m = DiscreteGaussian(sigma=2.0)
        >>> float(m.rho(4)), float(m.epsilon(4)), float(m.epsilon(0))
        (2.0, inf, 0.0)
    """

    policy_formula = "rho(D) = D^2 / (2 sigma^2) for integer D; inf for non-integer D"
    noise: DiscreteGaussianNoise

    def __init__(self, sigma: Any) -> None:
        """Check ``sigma`` (kept as an exact rational) and build the noise law."""
        super().__init__(DiscreteGaussianNoise(sigma))
        self.sigma = self.noise.sigma
        self._s2 = float(self.noise.sigma2_exact)

    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """ρ(Δ) = Δ²/(2σ²) for integer Δ, ``inf`` otherwise; rounded up.

        σ is the exact rational parameter. The double returned is never below the exact value:
        when σ is a double, Δ/σ is rounded up exactly and its square (halved) rounded up, so the
        result is at most a few units in the last place above Δ²/(2σ²) (exact when
        representable, e.g. 0.5 for Δ = σ); for a σ that is not a double (a ``Fraction``) it is
        the smallest double ``>= Δ²/(2σ²)``, computed with exact fractions once per distinct Δ.

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRzCDP losses.

        Example:
            >>> DiscreteGaussian(sigma=1.0).rho([0, 1, 2, 1.5]).tolist()
            [0.0, 0.5, 2.0, inf]
            >>> float(DiscreteGaussian(Fraction(1, 31)).rho(1))   # exactly 961/2
            480.5
        """
        d, is_int = _integer_sensitivity(sensitivity)
        shape = d.shape
        dd = np.atleast_1d(np.where(is_int, d, 0.0))
        sig = self.noise.sigma_exact
        if Fraction(float(sig)) == sig:
            r = _half_square_up(_div_up(dd, sig))
        else:
            s2 = self.noise.sigma2_exact
            r = _exact_up(dd, lambda v: Fraction(v * v) / (2 * s2))
        return np.where(is_int, r.reshape(shape), np.inf)

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """``inf`` for Δ > 0 (no pure guarantee), 0 at Δ = 0.

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> DiscreteGaussian(sigma=1.0).epsilon([0, 1]).tolist()
            [0.0, inf]
        """
        return not_pure(sensitivity)

    def delta_at(self, sensitivity: ArrayLike, epsilon: float) -> np.ndarray:
        """δ(ε) of a shift by integer Δ (CKS Thm 7), never understated; ``1`` for non-integer Δ.

        δ(ε) = P[Z > εσ²/Δ − Δ/2] − e^ε·P[Z > εσ²/Δ + Δ/2] with Z the discrete Gaussian: the
        hockey-stick divergence between ``q + Z`` and ``q + Δ + Z`` (the loss exceeds ε exactly on
        ``Z > εσ²/Δ − Δ/2``). The difference cancels badly when σ/Δ is large (a/δ grows like
        σ/Δ), so the value returned is an upper bound within a relative 1e-6 of the exact δ:
        from float tail sums inflated by ``1e-9 + 1e-12·a/δ`` when a/δ <= 1e6, else (and always
        for σ above the tail table, about 5.4e4) from 60-digit sums, rounded up.

        Args:
            sensitivity: Per-record sensitivities Δ.
            epsilon: ε ≥ 0 (finite).

        Returns:
            δ for each Δ (0 at Δ = 0).

        Raises:
            InvalidParameterError: If ``epsilon`` is not a finite number >= 0.

        Example:
            >>> float(DiscreteGaussian(sigma=1.0).delta_at(1, 0.0)) > 0.38
            True
        """
        e = check_real("epsilon", epsilon, owner="DiscreteGaussian.delta_at", ge=0.0,
                       hint="pass the privacy-loss level ε >= 0 at which to evaluate δ, "
                            "e.g. epsilon=1.0")
        d, is_int = _integer_sensitivity(sensitivity)
        out = np.where(is_int, 0.0, 1.0)
        pos = is_int & (d > 0)
        if np.any(pos):
            out[pos] = self._delta_upper(d[pos], np.full(int(pos.sum()), e))
        return out

    def _delta_float(self, d: np.ndarray,
                     eps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Float δ(ε) = a − b (not inflated) with a = P[Z > x1] and P[Z > x1 + Δ]."""
        # Threshold k1 = floor(εσ²/Δ − Δ/2). Near an integer the float value may fall on the
        # wrong side; there the term at the boundary can dominate δ (small σ), so k1 is
        # recomputed exactly from the rationals.
        x1 = eps * self._s2 / d - 0.5 * d
        k1 = np.floor(x1)
        near = np.abs(x1 - np.rint(x1)) <= 1e-13 * (np.abs(x1) + d + 1.0)
        for i in np.flatnonzero(near).tolist():
            k1[i] = math.floor(Fraction(float(eps[i])) * self.noise.sigma2_exact
                               / int(d[i]) - Fraction(int(d[i]), 2))
        a = self.noise.sf(k1)
        t2 = self.noise.sf(k1 + d)
        with np.errstate(divide="ignore", over="ignore", under="ignore", invalid="ignore"):
            # e^ε·P[Z > x2] ≤ P[Z > x1] ≤ 1 mathematically; a tail in the subnormal range is
            # dropped (b = 0 only over-states δ).
            b = np.where(t2 >= 1e-290, np.exp(eps + np.log(np.maximum(t2, 1e-300))), 0.0)
        return np.maximum(a - b, 0.0), a, t2

    def _delta_upper(self, d: np.ndarray, eps: np.ndarray) -> np.ndarray:
        """Upper bounds on δ(ε) for integer Δ > 0 (float where well conditioned, else mpmath)."""
        out = np.empty(d.shape)
        if self.noise._table:
            dl, a, t2 = self._delta_float(d, eps)
            with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                kappa = a / dl  # conditioning of the difference (inf or nan: unusable)
                out[:] = dl * (1.0 + _REL_MARGIN + _COND_MARGIN * kappa)
            # ill-conditioned, or b dropped from an underflowing tail while δ may still matter
            need = ~(kappa <= _KAPPA_MP) | ((t2 < 1e-290) & (a > 1e-300))
        else:  # float tails from Euler–Maclaurin: always high precision
            need = np.ones(d.shape, bool)
        for i in np.flatnonzero(need).tolist():
            out[i] = self._delta_mp(int(d[i]), float(eps[i]))
        return np.minimum(out, 1.0)  # δ <= 1 always

    def _search_mp(self, d: int, delta: float, guess: float, zc: float) -> float:
        """Smallest ε (to a relative 1e-12) with the 60-digit bound on δ(ε) <= δ, for one Δ.

        Used above the tail table, where every evaluation is in high precision: a bracket is
        walked out from ``guess`` (the float search's answer), then narrowed by the Illinois
        (modified regula falsi) method on log δ(ε); only points whose bound is <= δ are ever
        returned. ``zc`` (the zCDP conversion, valid) caps the result.
        """
        def g(e: float) -> float:  # log(bound/δ), its sign decided by the exact bound <= δ test
            b = max(self._delta_mp(d, e), 5e-324)
            v = math.log(b / delta)
            return min(v, 0.0) if b <= delta else max(v, 1e-300)

        if g(0.0) <= 0.0:
            return 0.0
        if not (math.isfinite(zc) and g(zc) <= 0.0):
            return zc
        x0 = guess if 0.0 < guess < zc else 0.5 * zc
        g0 = g(x0)
        step = x0 * 1e-7
        if g0 <= 0.0:  # walk down to a point with δ above the target
            hi, ghi = x0, g0
            while True:
                x = hi - step
                if x <= 0.0:
                    lo, glo = 0.0, g(0.0)
                    break
                gx = g(x)
                if gx > 0.0:
                    lo, glo = x, gx
                    break
                hi, ghi, step = x, gx, 8.0 * step
        else:  # walk up to a point with δ at or below the target
            lo, glo = x0, g0
            while True:
                x = lo + step
                if x >= zc:
                    hi, ghi = zc, g(zc)
                    break
                gx = g(x)
                if gx <= 0.0:
                    hi, ghi = x, gx
                    break
                lo, glo, step = x, gx, 8.0 * step
        kept = 0  # which end the last step kept (+1 hi, −1 lo): Illinois halving
        for _ in range(200):
            if hi - lo <= max(1e-12 * hi, 4.0 * math.ulp(hi)):
                break
            x = hi - ghi * (hi - lo) / (ghi - glo) if glo > ghi else 0.5 * (lo + hi)
            if not lo < x < hi:
                x = 0.5 * (lo + hi)
            gx = g(x)
            if gx > 0.0:
                lo, glo = x, gx
                if kept == 1:
                    ghi *= 0.5
                kept = 1
            else:
                hi, ghi = x, gx
                if kept == -1:
                    glo *= 0.5
                kept = -1
        return hi

    def _delta_mp(self, d: int, eps: float) -> float:
        """δ(ε) for integer Δ = d > 0 in 60-digit arithmetic, rounded up to a double."""
        x1 = Fraction(eps) * self.noise.sigma2_exact / d - Fraction(d, 2)  # exact threshold
        k1 = math.floor(x1)
        with mpmath.workdps(MP_DPS):
            a = self.noise._mp_sf_int(k1)
            b = mpmath.exp(mpmath.mpf(eps)) * self.noise._mp_sf_int(k1 + d)
            dl = a - b
            up = (dl if dl > 0 else mpmath.mpf(0)) + a * _MP_REL  # covers the tails' error
            x = float(up)
            if mpmath.mpf(x) < up:
                x = math.nextafter(x, math.inf)
        return x

    def approx_epsilon(self, sensitivity: ArrayLike, delta: float) -> np.ndarray:
        """Per-record (ε, δ) policy: exact for the discrete law (CKS Thm 7), by bisection.

        ε(Δ) is the smallest ε whose upper bound on δ(ε)
        ([`delta_at`][tabdp.mechanisms.DiscreteGaussian.delta_at]: within a relative 1e-6 of the
        exact δ(ε), never below it) is ``<= δ``, so the true δ(ε) never exceeds δ; and never above
        the zCDP conversion of ρ(Δ) (always valid; used alone for δ < 1e-280). ``inf`` for
        non-integer Δ, 0 at Δ = 0. The search is a bisection to the last bit; above the tail table
        (σ > about 5.4e4, where every bound is computed in 60-digit arithmetic) a float bisection
        gives a starting point that a bracketed Illinois search refines to a relative 1e-12 (a few
        milliseconds per distinct Δ).

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
        if dd >= _MIN_EXACT_DELTA and self.noise._table:
            best = self._bisect(uniq, dd, zc, self._delta_upper)
        elif dd >= _MIN_EXACT_DELTA:  # every rigorous evaluation is in high precision
            guess = self._bisect(uniq, dd, zc, lambda u, e: self._delta_float(u, e)[0])
            best = np.array([self._search_mp(int(u), dd, float(gs), float(z))
                             for u, gs, z in zip(uniq.tolist(), guess.tolist(), zc.tolist(),
                                                 strict=True)])
            best = np.minimum(best, zc)
        out[pos] = best[inv.reshape(-1)]
        return out

    @staticmethod
    def _bisect(uniq: np.ndarray, dd: float, zc: np.ndarray,
                delta_fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """Vectorized bisection for the smallest ε in [0, zc] with ``delta_fn(Δ, ε) <= δ``."""
        lo = np.zeros(uniq.shape)
        hi = np.where(np.isfinite(zc), zc, 0.0)
        ok_hi = np.isfinite(zc) & (delta_fn(uniq, hi) <= dd)
        zero = delta_fn(uniq, lo) <= dd
        active = np.flatnonzero(ok_hi & ~zero)
        for _ in range(100):  # invariant: δ(hi) <= target < δ(lo)
            if not active.size:
                break
            mid = 0.5 * (lo[active] + hi[active])
            moved = (mid > lo[active]) & (mid < hi[active])
            active, mid = active[moved], mid[moved]
            good = delta_fn(uniq[active], mid) <= dd
            hi[active[good]] = mid[good]
            lo[active[~good]] = mid[~good]
        return np.where(zero, 0.0, np.where(ok_hi, np.minimum(hi, zc), zc))

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> DiscreteGaussian(sigma=1.5).params()
            {'sigma': 1.5}
        """
        return self.noise.params()


@registry.mechanism('discrete_laplace', tags=('spec', 'additive', 'integer'), rank=13)
class DiscreteLaplace(DiscreteAdditiveMechanism):
    """Discrete Laplace mechanism: ``q + Z``, P(Z = k) ∝ exp(−|k|/scale), exact.

    Pure: for integer Δ the log-ratio of the two output laws is at most Δ/scale everywhere, so
    ε(Δ) = Δ/scale and ρ(Δ) = ε·tanh(ε/2) (both returned rounded up); both are ``inf`` for
    non-integer Δ.

    Args:
        scale: Scale in [2**-40, 2**40]; int, float (taken exactly) or ``fractions.Fraction``.

    Example:
        >>> float(DiscreteLaplace(scale=4.0).epsilon(2)), float(DiscreteLaplace(4.0).epsilon(0.5))
        (0.5, inf)
    """

    pure = True
    policy_formula = ("eps(D) = D / scale for integer D (inf for non-integer D); "
                      "rho = eps * tanh(eps / 2)")

    noise: DiscreteLaplaceNoise

    def __init__(self, scale: Any) -> None:
        """Check ``scale`` (kept as an exact rational) and build the noise law."""
        super().__init__(DiscreteLaplaceNoise(scale))
        self.scale = self.noise.scale

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """ε(Δ) = Δ/scale for integer Δ, ``inf`` otherwise: the smallest double >= Δ/scale.

        The scale is the exact rational parameter; the quotient is rounded *up* (exact when
        representable), so the loss is never understated.

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> DiscreteLaplace(scale=2.0).epsilon([0, 1, 3, 0.5]).tolist()
            [0.0, 0.5, 1.5, inf]
            >>> float(DiscreteLaplace(scale=3).epsilon(1)) > 1 / 3   # 1/3 rounded up
            True
        """
        d, is_int = _integer_sensitivity(sensitivity)
        dd = np.where(is_int, d, 0.0)
        e = _div_up(dd, self.noise.scale_exact).reshape(d.shape)
        return np.where(is_int, e, np.inf)

    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """ρ(Δ) = ε(Δ)·tanh(ε(Δ)/2) (pure to zCDP), rounded up.

        The float evaluation is raised by a relative 2**-48 and one place, which covers its
        rounding error (the result is at most about 1e-14 relative above the exact value).

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRzCDP losses.

        Example:
            >>> round(float(DiscreteLaplace(scale=1.0).rho(1)), 6)
            0.462117
        """
        return _inflate(pure_to_zcdp(self.epsilon(sensitivity)), 32)

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> DiscreteLaplace(scale=0.5).params()
            {'scale': 0.5}
        """
        return self.noise.params()
