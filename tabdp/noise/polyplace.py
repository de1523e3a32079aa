"""The PolyPlace(s, α) distribution of [HT24] (Hladík & Tětek), docs/math/smooth.md §2.

PolyPlace is the noise law of the smooth-sensitivity mechanism ``q(D) + PolyPlace(SS/γ, ε/γ)``
(pure ε-DP for any 0 < γ < ε, docs/math/smooth.md §3). With ``u = |x|/s``, ``A = ((α−1)/α)^α``,
``C = (1 − 1/α²)^α``, ``D = 2A + α − 1`` and ``N = α/(2sD)`` its density is

* ``N·(α−1)·(1 − u)^(α−1)`` for ``u < 1/α`` (a polynomial core), and
* ``N·(α+1)·C·(1 + u)^(−α−1)`` for ``u ≥ 1/α`` (a Pareto-like tail),

continuous at the breakpoint ``|x| = s/α``. Everything is evaluated in log1p/expm1 form so that
shapes up to α ≈ 10⁴ and more (γ ≪ ε) keep full relative accuracy; as α → ∞ with s/α fixed the
law tends to Laplace(s/α) ([HT24] Lemma 15).

The two-sided tail masses ``T(u) = P(|Z| > s·u)`` are closed forms:

* ``T = (α+1)·C·(1 + u)^(−α) / D`` for ``u ≥ 1/α`` (tail-exact, no cancellation);
* ``T = 1 − (α−1)(1 − (1 − u)^α) / D`` for ``u < 1/α``;

and both invert in closed form, which gives the quantile function and the inverse-CDF sampler.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp._validation import check_real
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.rounding import MpTail, RelErrorBounds, Rounding

__all__ = ["PolyPlace"]

_U = 2.0**-53


class PolyPlace(NoiseDistribution):
    """PolyPlace noise with scale ``s > 0`` and shape ``alpha > 1`` ([HT24] Definition 6).

    The smooth-sensitivity mechanism uses ``s = SS/γ`` and ``alpha = ε/γ``. The variance is
    finite iff ``alpha > 2`` ([HT24] Lemma 13, docs/math/smooth.md §2).

    Args:
        s: Scale s > 0.
        alpha: Shape α > 1.

    Example:
        >>> pp = PolyPlace(s=10.0, alpha=10.0)      # ε = 1, γ = 0.1, SS = 1
        >>> round(pp.std(), 6), round(float(pp.cdf(0.0)), 3)
        (1.687487, 0.5)
        >>> round(float(pp.ppf(0.95)), 4) == round(float(-pp.ppf(0.05)), 4)
        True
    """

    name = "polyplace"

    def __init__(self, s: float, alpha: float) -> None:
        """Check ``s`` and ``alpha > 1`` and precompute the constants."""
        owner = "PolyPlace noise"
        self.s = check_real("s", s, owner=owner, gt=0.0,
                            hint="for the smooth-sensitivity mechanism use s = SS/gamma")
        self.alpha = check_real("alpha", alpha, owner=owner, gt=1.0,
                                hint="for the smooth-sensitivity mechanism use alpha = "
                                     "epsilon/gamma with 0 < gamma < epsilon")
        a = self.alpha
        #: ln A = α·ln(1 − 1/α), ln C = α·ln(1 − 1/α²)
        self._log_a = a * math.log1p(-1.0 / a)
        self._log_c = a * math.log1p(-1.0 / (a * a))
        self._dd = 2.0 * math.exp(self._log_a) + (a - 1.0)  # D = 2A + α − 1
        log_d = math.log(self._dd)
        log_norm = math.log(a) - math.log(2.0 * self.s) - log_d  # ln N
        self._log_inner = log_norm + math.log(a - 1.0)  # ln(N(α−1))
        self._log_outer = log_norm + math.log1p(a) + self._log_c  # ln(N(α+1)C)
        #: ln of (α+1)C/D: the outer two-sided tail is exp(this − α·log1p(u)).
        self._log_tail_coef = math.log1p(a) + self._log_c - log_d
        #: two-sided tail mass at the breakpoint u = 1/α: (α+1)A/D
        self._t_break = math.exp(math.log1p(a) + self._log_a - log_d)

    # -- density --------------------------------------------------------------------------------
    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density (exact normalizer, both branches in log1p form).

        Args:
            x: Points.

        Returns:
            Log densities.

        Example:
            >>> pp = PolyPlace(s=2.0, alpha=3.0)
            >>> lo, hi = pp.logpdf([2.0 / 3.0 - 1e-12, 2.0 / 3.0 + 1e-12])  # continuous at s/α
            >>> bool(abs(lo - hi) < 1e-9)
            True
        """
        u = np.abs(np.asarray(x, dtype=np.float64)) / self.s
        a = self.alpha
        inner = u < 1.0 / a
        with np.errstate(invalid="ignore", divide="ignore"):
            li = self._log_inner + (a - 1.0) * np.log1p(-np.where(inner, u, 0.0))
            lo = self._log_outer - (a + 1.0) * np.log1p(u)
        return np.where(inner, li, lo)

    # -- tails ----------------------------------------------------------------------------------
    def _two_sided_tail(self, u: np.ndarray) -> np.ndarray:
        """``P(|Z| > s·u)`` for ``u ≥ 0``."""
        a = self.alpha
        inner = u < 1.0 / a
        ui = np.where(inner, u, 0.0)
        # 1 − (α−1)(1 − (1−u)^α)/D, with 1 − (1−u)^α = −expm1(α·log1p(−u))
        t_in = 1.0 + (a - 1.0) * np.expm1(a * np.log1p(-ui)) / self._dd
        with np.errstate(over="ignore", under="ignore"):
            t_out = np.exp(self._log_tail_coef - a * np.log1p(u))
        return np.where(inner, t_in, t_out)

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        return 0.5 * self._two_sided_tail(np.asarray(x, dtype=np.float64) / self.s)

    def logsf(self, x: ArrayLike) -> np.ndarray:
        """Log survival function ``ln P(Z > x)``, exact far into the tail (no underflow).

        Args:
            x: Points.

        Returns:
            ``ln P(Z > x)``.

        Example:
            >>> pp = PolyPlace(s=1.0, alpha=1e4)
            >>> round(float(pp.logsf(1.0)), 3)    # P(Z > 1) ~ e^-6932: far below 1e-308
            -6932.17
        """
        x = np.asarray(x, dtype=np.float64)
        u = np.abs(x) / self.s
        outer = (x >= 0) & (u >= 1.0 / self.alpha)
        log_out = math.log(0.5) + self._log_tail_coef - self.alpha * np.log1p(u)
        with np.errstate(divide="ignore"):
            rest = np.log(self.sf(np.where(outer, 0.0, x)))
        return np.where(outer, log_out, rest)

    def _abs_isf(self, t: np.ndarray) -> np.ndarray:
        """Magnitude ``m`` with ``P(|Z| > m) = t``: closed-form inverse of both branches."""
        t = np.asarray(t, dtype=np.float64)
        a = self.alpha
        outer = t <= self._t_break
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # (1+u)^(−α) = t·D/((α+1)C)  ⇒  u = expm1((ln((α+1)C/D) − ln t)/α)
            u_out = np.expm1((self._log_tail_coef - np.log(np.where(outer, t, 1.0))) / a)
            # (1−u)^α = 1 − (1−t)·D/(α−1)  ⇒  u = −expm1(log1p(−(1−t)D/(α−1))/α)
            w = np.clip((1.0 - np.where(outer, 1.0, t)) * self._dd / (a - 1.0), 0.0, 1.0)
            u_in = -np.expm1(np.log1p(-w) / a)
            u_in = np.minimum(u_in, 1.0 / a)  # rounding guard at the breakpoint
        u = np.where(outer, u_out, u_in)
        u = np.where(t <= 0.0, np.inf, np.where(t >= 1.0, 0.0, u))
        return self.s * u

    # -- exact rounding ---------------------------------------------------------------------
    @functools.cached_property
    def rounding(self) -> Rounding:
        """Exact rounding: closed-form bounds (per-value relative error) and an mpmath tail.

        Example:
            >>> PolyPlace(s=1.0, alpha=10.0).rounding.arb_tail_available()
            False
        """
        return Rounding(self, RelErrorBounds(self, self._isf_rel_error),
                        MpTail(self, abs_isf=self._mp_abs_isf))

    def _isf_rel_error(self, u: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Relative error bound of the closed-form quantile (per value).

        Outer branch: ``m/s = expm1(y)``, ``y = (L − ln t)/α``. The absolute error of ``y`` is at
        most ``4u(|L| + |ln t|)/α + 2u·y`` (u = 2**-53; libm log within 2 ulps), and ``expm1``
        turns it into a relative error times ``e^y/expm1(y) <= 1 + 1/y``; plus ``4u`` for the
        last operations. Inner branch (log1p/expm1 of arguments of moderate size, condition
        numbers <= 2): ``32u``. Both are multiplied by 16 (measured maxima: 709 ulps for
        α = 1.2 at u = 1e-300; at most 1/10 of the bound everywhere).
        """
        t = np.asarray(u, dtype=np.float64)
        a = self.alpha
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lt = np.abs(np.log(t))
            y = np.log1p(np.asarray(m, dtype=np.float64) / self.s)
            outer = (4.0 * _U * (abs(self._log_tail_coef) + lt) / a + 2.0 * _U * y) \
                * (1.0 + 1.0 / y) + 4.0 * _U
        return 16.0 * np.where(t <= self._t_break, outer, 32.0 * _U)

    def _mp_consts(self, mp: Any) -> tuple[Any, Any, Any]:
        """``(α, C, D)`` in working precision."""
        a = mp.mpf(self.alpha)
        big_a = mp.exp(a * mp.log1p(-1 / a))
        c = mp.exp(a * mp.log1p(-1 / (a * a)))
        return a, c, 2 * big_a + a - 1

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x)`` from the closed-form two-sided tail, in mpmath.

        Example:
            >>> import mpmath
            >>> pp = PolyPlace(s=2.0, alpha=3.0)
            >>> abs(float(pp._mp_sf(mpmath.mpf(1), mpmath.mp)) - float(pp.sf(1.0))) < 1e-15
            True
        """
        a, c, d = self._mp_consts(mp)
        u = x / mp.mpf(self.s)
        if u * a < 1:
            t = 1 + (a - 1) * mp.expm1(a * mp.log1p(-u)) / d
        else:
            t = (a + 1) * c * mp.exp(-a * mp.log1p(u)) / d
        return t / 2

    def _mp_abs_isf(self, u: Any, mp: Any) -> Any:
        """Closed-form inverse of the two-sided tail, in mpmath.

        Args:
            u: Two-sided tail mass, an ``mpf`` in (0, 1].
            mp: The mpmath context.

        Returns:
            The exact ``|Z|`` quantile.

        Example:
            >>> import mpmath
            >>> pp = PolyPlace(s=10.0, alpha=10.0)
            >>> m = pp._mp_abs_isf(mpmath.mpf("0.1"), mpmath.mp)
            >>> abs(float(m) - float(pp.isf(0.05))) < 1e-12
            True
        """
        a, c, d = self._mp_consts(mp)
        t = mp.mpf(u)
        if t >= 1:
            return mp.zero
        t_break = (a + 1) * mp.exp(a * mp.log1p(-1 / a)) / d
        if t <= t_break:
            v = mp.expm1((mp.log((a + 1) * c / d) - mp.log(t)) / a)
        else:
            w = (1 - t) * d / (a - 1)
            v = -mp.expm1(mp.log1p(-w) / a)
        return mp.mpf(self.s) * v

    # -- moments --------------------------------------------------------------------------------
    def variance(self) -> float:
        """Variance ([HT24] Lemma 13 as corrected in docs/math/smooth.md §2); ``inf`` for α ≤ 2.

        ``2s²·[B(19α² + 5)C + (α−2)(α−1)²] / [D(α²−1)(α²−4)]`` with ``B = (1 + 1/α)^(−α)``; it
        tends to ``2s²/α²`` (Laplace with scale s/α) as α → ∞.

        Returns:
            The variance.

        Example:
            >>> round(PolyPlace(s=10.0, alpha=10.0).variance(), 6)
            2.847613
            >>> PolyPlace(s=1.0, alpha=2.0).variance()
            inf
        """
        a = self.alpha
        if a <= 2.0:
            return math.inf
        bc = math.exp(self._log_c - a * math.log1p(1.0 / a))  # B·C
        num = bc * (19.0 * a * a + 5.0) + (a - 2.0) * (a - 1.0) ** 2
        den = self._dd * (a * a - 1.0) * (a - 2.0) * (a + 2.0)
        return 2.0 * self.s**2 * num / den

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> PolyPlace(s=10.0, alpha=10.0).params()
            {'s': 10.0, 'alpha': 10.0}
        """
        return {"s": self.s, "alpha": self.alpha}
