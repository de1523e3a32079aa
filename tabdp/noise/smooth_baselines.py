"""Smooth-sensitivity baselines: Student's t and generalized Cauchy (docs/math/smooth.md §4).

Both are scale families whose ``|Z|/scale`` is a transformed Beta variable, so tails and their
inverses are regularized incomplete beta functions (``betainc``/``betaincinv``), accurate down to
the smallest doubles:

* Student's t with ``df = d``: ``P(|T| > t) = I_{d/(d+t²)}(d/2, 1/2)``;
* generalized Cauchy with density ``c·sin(π/c) / (2π(1 + |y|^c))``:
  ``P(|Y| > y) = I_{1/(1+y^c)}(1 − 1/c, 1/c)``.

Near the centre (tail mass close to 1) the complementary form ``1 − I_x(a, b) = I_{1−x}(b, a)`` is
used so that small magnitudes keep their relative accuracy.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import betainc, betainccinv, betaincinv, betaln

from tabdp._validation import check_real
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.rounding import ArbShape, ArbTail, CertifiedBounds, Rounding

__all__ = ["StudentT", "GeneralizedCauchy"]


#: Below this ln v the Beta tail is its leading term v^a/(a·B(a, b)) to double precision.
_LOG_V_SERIES = -40.0
#: Relative error bound of the float64 quantile (boost's ibeta inverses, one per value): measured
#: at most 2532 ulps (5.6e-13; Student t with df = 1000 near u = 1e-264) over df in [0.3, 1e5],
#: c in [1.5, 100], u in [1e-300, 1], and at most 934 ulps (2.1e-13) for the shapes used by the
#: smooth-sensitivity mechanisms (d in (2, 50], c in (3, 50]). 2**-36 = 1.46e-11 is a margin of
#: 27 over the worst and 70 over the mechanisms' range (tests/noise/test_exact_rounding.py).
_BETA_ISF_RTOL = 2.0**-36


class _BetaTailLaw(ArbShape, NoiseDistribution):
    """A symmetric law with ``P(|Z| > scale·y) = I_{v}(a, b)``, ``v = 1/(1 + e^L)``.

    ``L = k·ln y − ln κ`` (Student t: k = 2, κ = d; generalized Cauchy: k = c, κ = 1). Tails are
    evaluated as ``I_v(a, b)`` where v ≤ ½ and as ``1 − I_w(b, a)`` (``w = 1 − v``) otherwise; where
    v underflows the leading term ``v^a/(a·B(a, b))`` is used in log space.
    """

    scale: float
    _a: float
    _b: float
    _k: float
    _log_kappa: float

    def _init_beta(self, a: float, b: float, k: float, kappa: float) -> None:
        self._a, self._b, self._k = a, b, k
        self._log_kappa = math.log(kappa)
        self._log_lead = -math.log(a) - float(betaln(a, b))  # ln of 1/(a·B(a, b))
        self._log_lead_c = -math.log(b) - float(betaln(a, b))  # ln of 1/(b·B(a, b))
        #: tail mass at v = 1/2: below it v < 1/2 (invert I_v(a, b)), above it w = 1 − v < 1/2
        self._t_half = float(betainc(a, b, 0.5))

    def _logit(self, x: np.ndarray) -> np.ndarray:
        """``L = k·ln(|x|/scale) − ln κ`` (``-inf`` at 0)."""
        with np.errstate(divide="ignore"):
            return self._k * np.log(np.abs(x) / self.scale) - self._log_kappa

    def _log_two_sided_tail(self, x: np.ndarray) -> np.ndarray:
        lz = self._logit(np.asarray(x, dtype=np.float64))
        log_v = -np.logaddexp(0.0, lz)
        v = np.exp(log_v)
        w = np.exp(-np.logaddexp(0.0, -lz))
        a, b = self._a, self._b
        with np.errstate(divide="ignore", invalid="ignore"):
            mid = np.where(v > 0.5, np.log1p(-betainc(b, a, w)), np.log(betainc(a, b, v)))
            lead = a * log_v + self._log_lead
        return np.where(log_v < _LOG_V_SERIES, lead, mid)

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        return 0.5 * np.exp(self._log_two_sided_tail(x))

    def logsf(self, x: ArrayLike) -> np.ndarray:
        """Log survival function ``ln P(Z > x)``, exact far into the tail.

        Args:
            x: Points.

        Returns:
            ``ln P(Z > x)``.

        Example:
            >>> round(float(StudentT(df=1.0).logsf(1e200)), 4)   # Cauchy: ln(1/(π·1e200))
            -461.6617
        """
        x = np.asarray(x, dtype=np.float64)
        pos = math.log(0.5) + self._log_two_sided_tail(x)
        with np.errstate(divide="ignore"):
            neg = np.log1p(-0.5 * np.exp(self._log_two_sided_tail(x)))
        return np.where(x >= 0, pos, neg)

    def _abs_isf(self, t: np.ndarray) -> np.ndarray:
        """``scale·y`` with ``I_v(a, b) = t``: one beta inverse per value, never of ``1 − t``.

        Where ``v < 1/2`` (``t <= I_{1/2}(a, b)``) ``v = betaincinv(a, b, t)``; elsewhere
        ``w = 1 − v = betainccinv(b, a, t)``, so no ``1 − t`` is formed for small t and small
        magnitudes keep their relative accuracy. Where v (resp. w) is below ``e^-40`` the leading
        term of the series is used in log space (it also covers values below the double range).
        """
        t = np.asarray(t, dtype=np.float64)
        a, b = self._a, self._b
        low = t <= self._t_half
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            v = betaincinv(a, b, np.where(low, t, 0.25))
            w = betainccinv(b, a, np.where(low, 0.75, t))
            log_v = np.where(low, np.log(v), np.log1p(-w))
            log_w = np.where(low, np.log1p(-v), np.log(w))
            ser_v = (np.log(t) - self._log_lead) / a          # I_v ≈ v^a/(a·B), v → 0
            ser_w = (np.log1p(-t) - self._log_lead_c) / b     # 1 − I_v ≈ w^b/(b·B), w → 0
            use_v = low & (ser_v < _LOG_V_SERIES)
            use_w = ~low & (ser_w < _LOG_V_SERIES)
            log_v = np.where(use_v, ser_v, log_v)
            log_w = np.where(use_v, 0.0, log_w)
            log_w = np.where(use_w, ser_w, log_w)
            log_v = np.where(use_w, 0.0, log_v)
            y = np.exp((log_w - log_v + self._log_kappa) / self._k)
        y = np.where(t <= 0.0, np.inf, np.where(t >= 1.0, 0.0, y))
        return self.scale * y

    def _mp_beta_args(self, y: Any, mp: Any) -> tuple[Any, Any, Any, Any]:
        """``(a, b, v, w)``: ``P(|Z| > scale·y) = I_v(a, b)``, ``w = 1 − v``.

        Both are computed directly, so the smaller one keeps its relative accuracy.
        """
        raise NotImplementedError  # pragma: no cover - overridden

    # certified tables (docs/exact-rounding.md §4.5)
    @functools.cached_property
    def rounding(self) -> Rounding:
        """Exact rounding: certified Arb tables and tails.

        Example:
            >>> StudentT(df=3.0).rounding.certified
            True
        """
        return Rounding(self, CertifiedBounds(self), ArbTail(self))

    def _arb_unit(self) -> float:
        return self.scale

    def _arb_vw(self, ys: Any) -> tuple[Any, Any, Any, Any]:
        """``(a, b, v, w)`` of `_mp_beta_args` on Arb series."""
        raise NotImplementedError  # pragma: no cover - overridden

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        """``I_v(a, b)`` (``I_w(b, a)`` with ``central``), regularized, in Arb."""
        from flint import arb_series

        a, b, v, w = self._arb_vw(xs)
        if central:
            return arb_series.beta_lower(b, a, w, regularized=1)
        return arb_series.beta_lower(a, b, v, regularized=1)

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x) = I_v(a, b)/2`` (regularized incomplete beta) in mpmath.

        Example:
            >>> import mpmath
            >>> round(float(StudentT(df=1.0)._mp_sf(mpmath.mpf(1), mpmath.mp)), 6)   # Cauchy
            0.25
        """
        if x == 0:
            return mp.mpf(0.5)
        a, b, v, w = self._mp_beta_args(x / mp.mpf(self.scale), mp)
        if w >= 2.0**-10:
            direct = mp.betainc(a, b, 0, v, regularized=True)
            if direct <= 0.5:   # small tails: the direct value has full relative accuracy
                return direct / 2
        # tails near 1, or v within 2**-10 of 1 (where v itself has lost w's low bits, e.g. at the
        # median of a generalized Cauchy law with large c): 1 − I_w(b, a), w formed directly
        return (1 - mp.betainc(b, a, 0, w, regularized=True)) / 2


class StudentT(_BetaTailLaw):
    """Student's t noise with ``df`` degrees of freedom, multiplied by ``scale``.

    The smooth-sensitivity baseline of Bun & Steinke uses ``scale = SS/ν`` with
    ``ν = 2√d(ε − γ(d+1))/(d+1)`` (docs/math/smooth.md §4).

    Args:
        df: Degrees of freedom d > 0 (finite variance needs d > 2).
        scale: Scale > 0.

    Example:
        >>> t = StudentT(df=3.0, scale=2.0)
        >>> t.variance(), round(float(t.cdf(0.0)), 3)
        (12.0, 0.5)
    """

    name = "student_t"

    def __init__(self, df: float, scale: float = 1.0) -> None:
        """Check ``df`` and ``scale`` and precompute the normalizing constant."""
        owner = "StudentT noise"
        self.df = check_real("df", df, owner=owner, gt=0.0,
                             hint="df is the degrees of freedom, e.g. df=3.0")
        self.scale = check_real("scale", scale, owner=owner, gt=0.0,
                                hint="scale multiplies a standard t variable, e.g. scale=1.0")
        d = self.df
        self._lognorm = (math.lgamma(0.5 * (d + 1.0)) - math.lgamma(0.5 * d)
                         - 0.5 * math.log(d * math.pi) - math.log(self.scale))
        self._init_beta(0.5 * d, 0.5, 2.0, d)

    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density ``lnΓ((d+1)/2) − lnΓ(d/2) − ½ln(dπ) − ln scale − (d+1)/2·ln(1 + z²/d)``.

        Args:
            x: Points.

        Returns:
            Log densities.

        Example:
            >>> round(float(StudentT(df=1.0).logpdf(0.0)), 6)    # Cauchy: −ln π
            -1.14473
        """
        z = np.asarray(x, dtype=np.float64) / self.scale
        with np.errstate(over="ignore"):
            zz = (z / math.sqrt(self.df)) ** 2
        return self._lognorm - 0.5 * (self.df + 1.0) * np.log1p(zz)

    def _mp_beta_args(self, y: Any, mp: Any) -> tuple[Any, Any, Any, Any]:
        d = mp.mpf(self.df)
        y2 = y * y
        return d / 2, mp.mpf(0.5), d / (d + y2), y2 / (d + y2)

    def _arb_key(self) -> tuple[Any, ...]:
        return ("student_t", self.df)

    def _arb_kbits(self) -> int:
        return 8 if self.df < 1.0 else 6          # m ~ u^{-1/df}

    def _arb_vw(self, ys: Any) -> tuple[Any, Any, Any, Any]:
        from flint import arb

        d = arb(self.df)
        y2 = ys * ys
        return d / 2, arb(0.5), d / (d + y2), y2 / (d + y2)

    def _arb_density(self, xs: Any) -> Any:
        """``2Γ((d+1)/2)/(√(dπ)Γ(d/2))·(1 + x²/d)^{−(d+1)/2}`` in Arb."""
        from flint import arb

        d = arb(self.df)
        c = 2 * ((d + 1) / 2).gamma() / ((d * arb.pi()).sqrt() * (d / 2).gamma())
        return c * (1 + xs * xs / d) ** (-(d + 1) / 2)

    def variance(self) -> float:
        """Variance ``scale²·d/(d−2)`` for d > 2, ``inf`` otherwise.

        Example:
            >>> StudentT(df=4.0, scale=1.0).variance(), StudentT(df=2.0).variance()
            (2.0, inf)
        """
        d = self.df
        return self.scale**2 * d / (d - 2.0) if d > 2.0 else math.inf

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> StudentT(df=3.0, scale=0.5).params()
            {'df': 3.0, 'scale': 0.5}
        """
        return {"df": self.df, "scale": self.scale}


class GeneralizedCauchy(_BetaTailLaw):
    """Generalized Cauchy noise of Nissim, Raskhodnikova & Smith: density ∝ 1/(1 + |y/scale|^c).

    The normalized density of ``Y = Z/scale`` is ``c·sin(π/c) / (2π(1 + |y|^c))`` (c > 1); its
    variance is ``1/(2cos(2π/c) + 1)`` for c > 3. The NRS smooth-sensitivity mechanism uses
    ``scale = SS·(c+1)/(ε − γ(c+1))`` (docs/math/smooth.md §4).

    Args:
        c: Exponent c > 1 (finite variance needs c > 3).
        scale: Scale > 0.

    Example:
        >>> g = GeneralizedCauchy(c=4.0, scale=1.0)
        >>> round(g.variance(), 6), round(float(g.pdf(0.0)), 6)   # 1/(2cos(π/2)+1), 2sin(π/4)/π
        (1.0, 0.450158)
    """

    name = "generalized_cauchy"

    def __init__(self, c: float, scale: float = 1.0) -> None:
        """Check ``c > 1`` and ``scale`` and precompute the normalizing constant."""
        owner = "GeneralizedCauchy noise"
        self.c = check_real("c", c, owner=owner, gt=1.0,
                            hint="c is the tail exponent; c > 3 gives a finite variance")
        self.scale = check_real("scale", scale, owner=owner, gt=0.0,
                                hint="scale multiplies the standard variable, e.g. scale=1.0")
        c_ = self.c
        self._lognorm = (math.log(c_) + math.log(math.sin(math.pi / c_))
                         - math.log(2.0 * math.pi) - math.log(self.scale))
        self._init_beta(1.0 - 1.0 / c_, 1.0 / c_, c_, 1.0)

    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density ``ln(c·sin(π/c)/(2π·scale)) − ln(1 + |x/scale|^c)``.

        Args:
            x: Points.

        Returns:
            Log densities.

        Example:
            >>> round(float(GeneralizedCauchy(c=2.0).logpdf(1.0)), 6)   # standard Cauchy
            -1.837877
        """
        return self._lognorm - np.logaddexp(0.0, self._logit(np.asarray(x, dtype=np.float64)))

    def _mp_beta_args(self, y: Any, mp: Any) -> tuple[Any, Any, Any, Any]:
        c = mp.mpf(self.c)
        yc = y**c
        return 1 - 1 / c, 1 / c, 1 / (1 + yc), yc / (1 + yc)

    def _arb_key(self) -> tuple[Any, ...]:
        return ("generalized_cauchy", self.c)

    def _arb_kbits(self) -> int:
        return 8 if self.c < 2.0 else 6           # m ~ u^{-1/(c-1)}

    def _arb_vw(self, ys: Any) -> tuple[Any, Any, Any, Any]:
        from flint import arb

        c = arb(self.c)
        yc = ys**c
        return 1 - 1 / c, 1 / c, 1 / (1 + yc), yc / (1 + yc)

    def _arb_density(self, xs: Any) -> Any:
        """``c·sin(π/c)/(π(1 + x^c))`` in Arb."""
        from flint import arb

        c = arb(self.c)
        return c * (arb.pi() / c).sin() / (arb.pi() * (1 + xs**c))

    def variance(self) -> float:
        """Variance ``scale²/(2cos(2π/c) + 1)`` for c > 3, ``inf`` otherwise.

        Example:
            >>> g6, g3 = GeneralizedCauchy(c=6.0), GeneralizedCauchy(c=3.0)
            >>> round(g6.variance(), 6), g3.variance()
            (0.5, inf)
        """
        c = self.c
        if c <= 3.0:
            return math.inf
        return self.scale**2 / (2.0 * math.cos(2.0 * math.pi / c) + 1.0)

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> GeneralizedCauchy(c=4.0, scale=2.0).params()
            {'c': 4.0, 'scale': 2.0}
        """
        return {"c": self.c, "scale": self.scale}
