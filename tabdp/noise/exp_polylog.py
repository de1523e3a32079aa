"""Exponential polylogarithmic noise: density ∝ exp(−d·(ln(|z|/σ + a))^p), docs/math/additive.md §3.

Everything is computed in the log-space variable ``s = ln(|z|/σ + a) − ln a = log1p(|z|/(σa))``
(``t = ln a + s`` in the notation of docs/math/additive.md §3.1), so that ``|z| = σ·a·expm1(s)``
keeps full relative accuracy near 0 and the large ``d·(ln a)^p`` parts cancel analytically:

* p = 1 (d > 1): closed forms; |Z|/(σa) is a Lomax (Pareto II) variable with shape d − 1.
* p = 2 (d > 0): closed forms through κ(x, c) = Φ(√(2d)(ln x − c/d)), with every 1 − κ evaluated
  as ``log_ndtr`` of the negated argument and quantiles through ``ndtri_exp``.
* any other p > 1: numerical path. The integrand ``exp(c·s − D(s))``, ``D(s) = d(t^p − (ln a)^p)``,
  is log-concave; it is shifted by its maximum, integrated with composite Gauss–Legendre on an
  adaptive grid until the remaining mass is below e^-80 of the peak, and its cumulative tail
  integral is tabulated once per instance (lazily). Quantiles are found by a table search plus a
  safeguarded Newton polish (in log space) using the exact integrand.

Exact rounding (docs/exact-rounding.md §4.5): every p has certified quantile tables built from
the tail in Arb ball arithmetic (closed forms for p = 1, 2; rigorous quadrature of the tail
integral, `_ArbPolyLogTail`, otherwise); the float quantiles above are only their
starting guesses and the plain sampler.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp._lazy_scipy import LazyModule, brentq
from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.rounding import (
    ArbShape,
    ArbTail,
    CertifiedBounds,
    Rounding,
    mp_quad_checked,
    solve_abs_isf,
)

if TYPE_CHECKING:
    import scipy.special as special
else:  # imported on first use, never by a Spark worker that unpickles a mechanism
    special = LazyModule("scipy.special")

__all__ = ["ExpPolyLog"]

_LOG_DBL_MAX = math.log(np.finfo(np.float64).max)
_LOG_PI = math.log(math.pi)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
#: Tables stop where the integrand is below exp(-_TRUNC) of its peak.
_TRUNC = 80.0
#: Gauss–Legendre nodes per cell; Gauss–Laguerre nodes for the far tail.
_GL_X, _GL_W = np.polynomial.legendre.leggauss(12)
_LAG_X, _LAG_W = np.polynomial.laguerre.laggauss(30)
#: Tail mass used for the overflow guard (the 1 − 1e-12 quantile of |Z|).
_OVERFLOW_TAIL = 1e-12


@dataclass(frozen=True)
class _Table:
    """Tabulated tail integral ``S(s) = ∫_s^∞ exp(ψ(x) − M) dx`` of ``ψ(s) = c·s − D(s)``."""

    nodes: np.ndarray      # s-grid, increasing; nodes[0] = s_lo, nodes[-1] = s_hi
    tails: np.ndarray      # S at the nodes (decreasing); tails[-1] = Gauss–Laguerre tail
    log_tails: np.ndarray  # ln of ``tails``
    log_g: np.ndarray      # ψ − M at the nodes (log of the integrand)
    peak: float            # M = max ψ

    @property
    def total(self) -> float:
        return float(self.tails[0])


class _PolyLogQuad:
    """Integrals of ``exp(c·s − D(s))`` on s ≥ 0, ``D(s) = d((ln a + s)^p − (ln a)^p)``, p > 1."""

    def __init__(self, lo: float, d: float, p: float, c: float) -> None:
        self.lo, self.d, self.p, self.c = lo, d, p, c
        self.dlp = d * lo**p  # d (ln a)^p, finite (checked by the caller)

    # -- the exponent and its derivatives ---------------------------------------------------
    def D(self, s: np.ndarray | float) -> np.ndarray:
        """``d(t^p − lo^p)`` without cancellation for small s."""
        return self.dlp * np.expm1(self.p * np.log1p(s / self.lo))

    def psi(self, s: np.ndarray | float) -> np.ndarray:
        return self.c * s - self.D(s)

    def dpsi(self, s: np.ndarray | float) -> np.ndarray:
        t = self.lo + np.asarray(s, dtype=np.float64)
        return self.c - self.d * self.p * t ** (self.p - 1.0)

    def d2psi(self, s: np.ndarray | float) -> np.ndarray:
        t = self.lo + np.asarray(s, dtype=np.float64)
        return -self.d * self.p * (self.p - 1.0) * t ** (self.p - 2.0)

    def psi_step(self, s: np.ndarray, h: np.ndarray) -> np.ndarray:
        """``ψ(s + h) − ψ(s)`` accurately for large s."""
        t = self.lo + s
        with np.errstate(over="ignore"):
            return self.c * h - self.d * t**self.p * np.expm1(self.p * np.log1p(h / t))

    def log_mode_t(self) -> float:
        """``ln t*`` with t* = (c/(dp))^(1/(p−1)), the unconstrained maximizer of c·t − d·t^p."""
        return (math.log(self.c) - math.log(self.d * self.p)) / (self.p - 1.0)

    # -- grid -------------------------------------------------------------------------------
    def _scale(self, s: float) -> float:
        t = self.lo + s
        d1 = abs(float(self.dpsi(s)))
        d2 = abs(float(self.d2psi(s)))
        h = t  # the exponent t^p is singular at t = 0: grade geometrically towards it
        if d1 > 0.0:
            h = min(h, 1.0 / d1)
        if d2 > 0.0:
            h = min(h, 1.0 / math.sqrt(d2))
        return h

    def _step(self, s: float) -> float:
        h = self._scale(s)
        return min(h, self._scale(s + h))

    def _psi1(self, s: float) -> float:
        return float(self.psi(np.float64(s)))

    def build(self) -> _Table:
        """Tabulate the tail integral (the mode must be representable: ln t* ≤ 50)."""
        lt = self.log_mode_t()
        s_star = max(0.0, math.exp(lt) - self.lo) if lt < 50.0 else math.inf
        if not math.isfinite(s_star):
            raise OverflowError("mode out of range")
        peak = self._psi1(s_star)
        # left end: where the integrand has dropped by e^-_TRUNC (or s = 0)
        s_lo = 0.0
        if s_star > 0.0 and self._psi1(0.0) - peak < -_TRUNC:
            s_lo = brentq(lambda s: self._psi1(s) - peak + _TRUNC, 0.0, s_star, xtol=1e-300,
                          rtol=1e-15)
        # right end: double a step until the integrand is below e^-_TRUNC of the peak
        step = self._scale(s_star)
        for _ in range(4000):
            if self._psi1(s_star + step) - peak < -_TRUNC:
                break
            step *= 2.0
        else:  # pragma: no cover - ψ → −∞ superlinearly, so this cannot happen
            raise OverflowError("tail does not decay")
        s_hi = brentq(lambda s: self._psi1(s) - peak + _TRUNC, s_star, s_star + step,
                      xtol=1e-300, rtol=1e-15)
        nodes = [s_lo]
        for left, right in ((s_lo, s_star), (s_star, s_hi)):
            s = left
            while s < right:
                s = min(right, s + self._step(s))
                if right - s < 1e-12 * (1.0 + right):
                    s = right
                if s > nodes[-1]:
                    nodes.append(s)
                if len(nodes) > 200_000:  # pragma: no cover - defensive
                    raise OverflowError("grid too large")
        grid = np.asarray(nodes, dtype=np.float64)
        cells = self.partial(grid[:-1], grid[1:], peak)
        tail_hi = float(self.tail(np.asarray([s_hi]), peak)[0])
        tails = np.concatenate([np.cumsum(cells[::-1])[::-1], [0.0]]) + tail_hi
        with np.errstate(divide="ignore"):
            log_tails = np.log(tails)
        return _Table(grid, tails, log_tails, self.psi(grid) - peak, peak)

    # -- integrals --------------------------------------------------------------------------
    def integrand(self, s: np.ndarray, peak: float) -> np.ndarray:
        with np.errstate(over="ignore", under="ignore"):
            return np.exp(self.psi(s) - peak)

    def partial(self, a: np.ndarray, b: np.ndarray, peak: float,
                weight: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """``∫_a^b exp(ψ − M)·weight`` by 12-point Gauss–Legendre (vectorized over a, b).

        Cells change ψ by at most ~1 and stay a distance ≥ their width from the singularity of
        t^p at t = 0, so 12 nodes are exact to rounding (8 already agree to ~1e-14).
        """
        half = 0.5 * (b - a)
        mid = 0.5 * (b + a)
        x = mid[..., None] + half[..., None] * _GL_X
        f = self.integrand(x, peak)
        if weight is not None:
            f = f * weight(x)
        return half * (f @ _GL_W)

    def tail(self, s: np.ndarray, peak: float) -> np.ndarray:
        """``∫_s^∞ exp(ψ − M)`` for s beyond the mode, by Gauss–Laguerre in v = r(x − s).

        With r = −ψ'(s) > 0 concavity gives ψ(s + v/r) − ψ(s) ≤ −v, so the Laguerre weight
        carries the decay and the remaining factor lies in (0, 1].
        """
        with np.errstate(over="ignore", under="ignore"):
            return np.exp(self.log_tail(s, peak))

    def log_tail(self, s: np.ndarray, peak: float) -> np.ndarray:
        """``ln ∫_s^∞ exp(ψ − M)`` (as `tail`, without underflow far in the tail)."""
        r = -self.dpsi(s)
        h = _LAG_X / r[..., None]
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            fac = np.exp(self.psi_step(s[..., None], h) + _LAG_X)
            return self.psi(s) - peak - np.log(r) + np.log(fac @ _LAG_W)


class _ArbPolyLogTail:
    """Rigorous ``I(s) = ∫_s^∞ e^{ψ(t)} dt`` in Arb, ``ψ(t) = t − d((ln a + t)^p − (ln a)^p)``.

    ψ is concave (p > 1), so beyond a point B with ``ψ′(B) < 0`` the rest of the integral lies
    in ``[0, e^{ψ(B)}/(−ψ′(B))]``; ``[s, B]`` is integrated by Arb's certified Gauss–Legendre
    quadrature (``acb.integral``). Values at exact double points ("anchors") are cached per
    precision, and a new point is reached from the nearest anchor by a short integral; a ball
    argument adds ``(s − k)·e^{ψ(hull)}`` (mean value theorem). Used by the certified tables
    and the exact path of general-p [`ExpPolyLog`][tabdp.noise.ExpPolyLog] (docs/exact-rounding.md
    §4.5).

    Example:
        >>> from tabdp.noise.rounding.certified import arb_context
        >>> with arb_context(100, 1) as flint:
        ...     t = _ArbPolyLogTail(3.0, 1.0, 1.5).tail(flint.arb(0), central=False)
        >>> float(t.mid())
        1.0
    """

    def __init__(self, a: float, d: float, p: float) -> None:
        self.a, self.d, self.p = a, d, p
        self.lo = math.log(a)
        self._anchors: dict[int, tuple[list[float], dict[float, Any]]] = {}

    def psi(self, t: Any) -> Any:
        """ψ on an arb, acb or arb_series argument."""
        from flint import arb

        la = arb(self.a).log()
        p = arb(self.p)
        return t - arb(self.d) * ((la + t) ** p - la**p)

    def _psi_f(self, t: float) -> float:
        return t - self.d * ((self.lo + t) ** self.p - self.lo**self.p)

    def _integral(self, lo: float, hi: float) -> Any:
        """``∫_lo^hi e^ψ`` (exact double endpoints, lo <= hi) as an arb ball."""
        from flint import acb, arb

        if lo == hi:
            return arb(0)
        la = acb(arb(self.a).log())
        lap = arb(self.a).log() ** arb(self.p)
        p, d = acb(self.p), acb(self.d)

        def f(z: Any, analytic: bool) -> Any:
            w = la + z
            if analytic and not w.real > 0:        # (ln a + z)^p: branch cut at Re <= −ln a
                return acb("nan")
            return (z - d * (w**p - lap)).exp()

        return acb.integral(f, lo, hi).real

    def _far(self, s: float, prec: int) -> float:
        """A point B > s where the neglected tail is below 2**-(prec + 40) of I(s)."""
        ref = min(self._psi_f(s), self._psi_f(s + 1.0))
        target = ref - (prec + 40) * math.log(2.0)
        step = 1.0
        b = s + step
        while True:
            dpsi = 1.0 - self.d * self.p * (self.lo + b) ** (self.p - 1.0)
            if dpsi < 0 and self._psi_f(b) < target:
                return b
            step *= 2.0
            b = s + step

    def _at(self, k: float) -> Any:
        """``I(k)`` at an exact double k >= 0 (cached per precision)."""
        import bisect

        from flint import arb, ctx

        prec = ctx.prec
        keys, vals = self._anchors.setdefault(prec, ([], {}))
        if k in vals:
            return vals[k]
        i = bisect.bisect_left(keys, k)
        near = [keys[j] for j in (i - 1, i) if 0 <= j < len(keys)]
        if near:
            k0 = min(near, key=lambda v: abs(v - k))
            if k < k0:
                val = vals[k0] + self._integral(k, k0)
            else:
                val = vals[k0] - self._integral(k0, k)
        else:
            b = self._far(k, prec)
            lb = arb(b)
            slope = arb(self.d) * arb(self.p) * (arb(self.a).log() + lb) ** (arb(self.p) - 1) - 1
            if not slope > 0:                       # −ψ′(B) not certified positive
                return arb("nan")
            rest = self.psi(lb).exp() / slope       # ∫_B^∞ e^ψ ∈ [0, rest] (ψ concave)
            val = self._integral(k, b) + arb(0).union(rest)
        keys.insert(i, k)
        vals[k] = val
        return val

    def norm(self) -> Any:
        """``N = I(0)``."""
        return self._at(0.0)

    def tail(self, s: Any, central: bool) -> Any:
        """``I(s)/N`` (``1 −`` that with ``central``) for an arb ball ``s >= 0``."""
        k = max(float(s.mid()), 0.0)
        e = self.psi(s.union(type(s)(k))).exp()
        val = self._at(k) - (s - k) * e
        n = self.norm()
        return (n - val) / n if central else val / n


class ExpPolyLog(ArbShape, NoiseDistribution):
    """Exponential polylogarithmic noise, density ∝ exp(−d·(ln(|z|/σ + a))^p) ([FCD+24] Cor 5.7).

    Args:
        sigma: Scale σ > 0.
        a: Offset inside the logarithm; a ≥ e^(p−1) (and a > 1 when p > 1).
        d: Decay; d > 1 when p = 1, d > 0 when p > 1.
        p: Power of the logarithm, p ≥ 1. p = 1 and p = 2 use closed forms; other values a
            tabulated numerical path (built once per instance).

    Raises:
        InvalidParameterError: For parameters outside the ranges above, or when the median or
            the 1 − 1e-12 quantile of |Z| overflows a double (e.g. p = 1 with d close to 1, or
            p slightly above 1 with small d).

    Example:
        >>> z = ExpPolyLog(sigma=1.0, a=1.0, d=4.0)           # p = 1: variance 2/((d-2)(d-3))
        >>> z.variance(), round(float(z.cdf(1.0)), 6)
        (1.0, 0.9375)
    """

    name = "exp_polylog"

    def __init__(self, sigma: float, a: float, d: float, p: float = 1.0) -> None:
        """Check the parameters (``a >= e^(p−1)``, ``d > 1`` for ``p = 1``) and precompute."""
        owner = "ExpPolyLog noise"
        self.sigma = check_real("sigma", sigma, owner=owner, gt=0.0)
        self.p = check_real("p", p, owner=owner, ge=1.0,
                            hint="p = 1 (loss ~ d ln D) and p = 2 have closed forms")
        self.d = check_real("d", d, owner=owner, gt=1.0 if self.p == 1.0 else 0.0,
                            hint="the density is proper only for d > 1 when p = 1 (d > 3 for a "
                                 "finite variance); any d > 0 works when p > 1")
        amin = math.exp(self.p - 1.0) if self.p - 1.0 < _LOG_DBL_MAX else math.inf
        self.a = check_real("a", a, owner=owner, ge=amin,
                            hint=f"the exponent is convex (and the privacy loss formula valid) "
                                 f"only for a >= e^(p-1) = {amin:.12g}: set a to at least that "
                                 f"(a = 1 when p = 1)")
        if self.p > 1.0 and self.a <= 1.0:
            raise InvalidParameterError(
                f"{owner}: for p > 1 the offset a must be > 1 (so ln a > 0); got a={a!r}.")
        self._lo = math.log(self.a)
        self._log_sa = math.log(self.sigma) + self._lo  # ln(σa)
        if self.p > 1.0 and math.log(self.d) + self.p * math.log(self._lo) > 700.0:
            raise InvalidParameterError(
                f"{owner}: d·(ln a)^p overflows a double (d={d!r}, a={a!r}, p={p!r}).\n"
                "Hint: use a smaller p or offset a.")
        # proven float64 quantile bounds from certified tables (docs/exact-rounding.md §4.5);
        # general p evaluates its tail integral by rigorous quadrature (``_ArbPolyLogTail``)
        self._arb_general: _ArbPolyLogTail | None = None
        self._table1: _Table | None = None
        self._quad1: _PolyLogQuad | None = None
        if self.p == 1.0:
            self._c1 = math.log(self.d - 1.0) - math.log(2.0) - self._log_sa
        elif self.p == 2.0:
            self._r2d = math.sqrt(2.0 * self.d)
            self._x0 = self._r2d * (0.5 / self.d - self._lo)  # ln K_{1/2} = log_ndtr(x0)
            self._log_k = float(special.log_ndtr(self._x0))
            self._c2 = (0.5 * math.log(self.d) - math.log(2.0 * self.sigma) - 0.25 / self.d
                        - 0.5 * _LOG_PI - self._log_k)
        else:
            self._quad1 = _PolyLogQuad(self._lo, self.d, self.p, 1.0)
            if self._quad1.log_mode_t() >= 50.0:
                raise InvalidParameterError(self._overflow_message())
        self._check_overflow()

    # -- helpers ----------------------------------------------------------------------------
    def _overflow_message(self) -> str:
        return (f"ExpPolyLog noise: with sigma={self.sigma!r}, a={self.a!r}, d={self.d!r}, "
                f"p={self.p!r} the noise magnitude overflows a double (its median or its "
                "1 - 1e-12 quantile exceeds 1.8e308).\nHint: increase d (p = 1 needs d well above "
                "1; p slightly above 1 needs d*p > 1) or use p = 2.")

    def _check_overflow(self) -> None:
        s = self._abs_isf_s(np.asarray([1.0, _OVERFLOW_TAIL]))
        if not np.all(np.isfinite(s)) or np.any(s + self._log_sa >= _LOG_DBL_MAX):
            raise InvalidParameterError(self._overflow_message())

    def _s_of(self, x: ArrayLike) -> np.ndarray:
        """``s = log1p(|x|/(σa)) = ln(|x|/σ + a) − ln a``."""
        with np.errstate(over="ignore"):
            return np.log1p(np.abs(np.asarray(x, dtype=np.float64)) / (self.sigma * self.a))

    @property
    def _table(self) -> _Table:
        """Tail table of the general-p path, built on first use."""
        if self._table1 is None:
            assert self._quad1 is not None
            self._table1 = self._quad1.build()
        return self._table1

    # -- density ----------------------------------------------------------------------------
    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density ``−d(ln(|x|/σ + a))^p − ln Z_norm``.

        Args:
            x: Points.

        Returns:
            Log densities.

        Example:
            >>> z = ExpPolyLog(sigma=1.0, a=1.0, d=4.0)        # 3/2 · (1 + |x|)^-4
            >>> round(float(z.logpdf(1.0)), 6) == round(float(np.log(1.5 / 16)), 6)
            True
            >>> round(float(ExpPolyLog(sigma=1.0, a=3.0, d=1.0, p=1.5).pdf(0.0)), 6)
            0.170205
        """
        s = self._s_of(x)
        with np.errstate(over="ignore"):
            if self.p == 1.0:
                return self._c1 - self.d * s
            if self.p == 2.0:
                # √d e^{-d(ln u)²} / (2σ e^{1/(4d)} √π K_{1/2}) with ln u = ln a + s
                return self._c2 - self.d * (self._lo + s) ** 2
            tab = self._table
            assert self._quad1 is not None
            return (-self._quad1.D(s) - self._lo - math.log(2.0 * self.sigma) - tab.peak
                    - math.log(tab.total))

    # -- tail probability -------------------------------------------------------------------
    def _tail_s(self, s: np.ndarray) -> np.ndarray:
        """``P(|Z| > σa·expm1(s))`` for s ≥ 0."""
        s = np.asarray(s, dtype=np.float64)
        with np.errstate(over="ignore", under="ignore"):
            if self.p == 1.0:
                return np.exp((1.0 - self.d) * s)
            if self.p == 2.0:
                return np.exp(special.log_ndtr(self._x0 - self._r2d * s) - self._log_k)
        return self._tail_s_general(s)

    def _tail_s_general(self, s: np.ndarray) -> np.ndarray:
        tab = self._table
        q = self._quad1
        assert q is not None
        flat = s.reshape(-1)
        out = np.ones_like(flat)
        nodes = tab.nodes
        inner = (flat > nodes[0]) & (flat < nodes[-1])
        far = flat >= nodes[-1]
        if np.any(inner):
            si = flat[inner]
            j = np.clip(np.searchsorted(nodes, si, side="right") - 1, 0, nodes.size - 2)
            val = tab.tails[j + 1] + q.partial(si, nodes[j + 1], tab.peak)
            out[inner] = np.minimum(val / tab.total, 1.0)
        if np.any(far):
            sf = flat[far]
            fin = np.isfinite(sf)
            vals = np.zeros_like(sf)
            if np.any(fin):
                with np.errstate(under="ignore"):
                    vals[fin] = np.exp(q.log_tail(sf[fin], tab.peak) - math.log(tab.total))
            out[far] = vals
        out[np.isnan(flat)] = np.nan
        return out.reshape(s.shape)

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        """``P(Z > x)`` for x ≥ 0, accurate in the tail (no ``1 − cdf``)."""
        return 0.5 * self._tail_s(self._s_of(x))

    # -- quantiles --------------------------------------------------------------------------
    def _abs_isf_s(self, u: np.ndarray) -> np.ndarray:
        """s-value with ``P(|Z| > σa·expm1(s)) = u``; ``inf`` for u ≤ 0, 0 for u ≥ 1."""
        u = np.asarray(u, dtype=np.float64)
        uc = np.clip(u, 1e-320, 1.0)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            if self.p == 1.0:
                s = -np.log(uc) / (self.d - 1.0)
            elif self.p == 2.0:
                lu = np.log(uc)
                s = (self._x0 - special.ndtri_exp(lu + self._log_k)) / self._r2d
                for _ in range(2):  # Newton polish: ndtri_exp loses digits far in the tail
                    y = self._x0 - self._r2d * s
                    ln = special.log_ndtr(y)
                    f = ln - self._log_k - lu
                    rate = self._r2d * np.exp(-0.5 * y * y - _LOG_SQRT_2PI - ln)
                    s = np.where(np.isfinite(f) & (rate > 0), s + f / rate, s)
            else:
                s = self._abs_isf_s_general(uc)
            s = np.maximum(s, 0.0)
        s = np.where(u <= 0.0, np.inf, np.where(u >= 1.0, 0.0, s))
        return np.where(np.isnan(u), np.nan, s)

    def _abs_isf_s_general(self, u: np.ndarray) -> np.ndarray:
        tab = self._table
        q = self._quad1
        assert q is not None
        flat = u.reshape(-1)
        log_target = np.log(flat) + math.log(tab.total)
        # cell j: tails[j] >= target > tails[j+1]
        j = np.searchsorted(-tab.log_tails, -log_target, side="right") - 1
        j = np.clip(j, 0, tab.nodes.size - 1)
        out = np.full_like(flat, np.nan)
        ok = ~np.isnan(log_target)
        inner = ok & (j < tab.nodes.size - 1)
        outer = ok & (j == tab.nodes.size - 1)
        if np.any(inner):
            out[inner] = self._newton_cells(j[inner], log_target[inner])
        if np.any(outer):
            out[outer] = self._newton_tail(log_target[outer])
        return out.reshape(u.shape)

    def _newton_cells(self, j: np.ndarray, log_target: np.ndarray) -> np.ndarray:
        """Solve ``ln S(s) = ln target`` inside table cell j (safeguarded Newton in log space).

        The start is the cubic Hermite interpolant of s as a function of ln S (slopes
        ``ds/dlnS = −S/g`` are known at the nodes), so two or three steps usually suffice.
        """
        tab = self._table
        q = self._quad1
        assert q is not None
        s0, s1 = tab.nodes[j], tab.nodes[j + 1]
        l0, l1 = tab.log_tails[j], tab.log_tails[j + 1]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            hl = l1 - l0
            k0 = -np.exp(l0 - tab.log_g[j])
            k1 = -np.exp(l1 - tab.log_g[j + 1])
            x = np.clip((log_target - l0) / hl, 0.0, 1.0)
            h00 = (1.0 + 2.0 * x) * (1.0 - x) ** 2
            h10 = x * (1.0 - x) ** 2
            h01 = x * x * (3.0 - 2.0 * x)
            h11 = x * x * (x - 1.0)
            s = h00 * s0 + h10 * hl * k0 + h01 * s1 + h11 * hl * k1
        s = np.where(np.isfinite(s), np.clip(s, s0, s1), s0 + x * (s1 - s0))
        lo_b, hi_b = s0.copy(), s1.copy()
        width = s1 - s0
        active = np.ones(s.shape, dtype=bool)
        ftol = 2e-15 * np.maximum(1.0, np.abs(log_target))
        for _ in range(60):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            si = s[idx]
            tail = tab.tails[j[idx] + 1] + q.partial(si, s1[idx], tab.peak)
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                lt = np.log(tail)
                f = lt - log_target[idx]
                step = f * np.exp(lt - q.psi(si) + tab.peak)
            lo_b[idx] = np.where(f > 0, si, lo_b[idx])
            hi_b[idx] = np.where(f < 0, si, hi_b[idx])
            new = np.where(f == 0, si, si + step)
            bad = ~np.isfinite(new) | (new < lo_b[idx]) | (new > hi_b[idx])
            new = np.where(bad, 0.5 * (lo_b[idx] + hi_b[idx]), new)
            # quadratic convergence: a step below 1e-9 of the cell width leaves an error ~1e-18
            conv = ~bad & ((np.abs(new - si) <= np.maximum(1e-15 * np.abs(si), 1e-9 * width[idx]))
                           | (np.abs(f) <= ftol[idx]))
            conv |= hi_b[idx] - lo_b[idx] <= 1e-15 * np.abs(hi_b[idx])
            s[idx] = new
            active[idx[conv]] = False
        return s

    def _newton_tail(self, log_target: np.ndarray) -> np.ndarray:
        """Solve ``ln S(s) = ln target`` beyond the table (ln S is concave: monotone Newton)."""
        tab = self._table
        q = self._quad1
        assert q is not None
        s = np.full_like(log_target, tab.nodes[-1])
        active = np.isfinite(log_target)
        for _ in range(200):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            si = s[idx]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
                lt = q.log_tail(si, tab.peak)
                step = (lt - log_target[idx]) * np.exp(lt - q.psi(si) + tab.peak)
            new = np.where(np.isfinite(step), si + step, si)
            conv = ~np.isfinite(step) | (np.abs(new - si) <= 1e-15 * np.abs(si))
            s[idx] = new
            active[idx[conv]] = False
        return np.where(np.isfinite(log_target), s, np.inf)

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        """Magnitude m with ``P(|Z| > m) = u``: ``σa·expm1(s(u))``."""
        s = self._abs_isf_s(u)
        with np.errstate(over="ignore", invalid="ignore"):
            return self.sigma * self.a * np.expm1(s)

    # -- exact rounding ---------------------------------------------------------------------
    @functools.cached_property
    def rounding(self) -> Rounding:
        """Exact rounding: certified Arb tables and tails (docs/exact-rounding.md §4.5).

        Example:
            >>> ExpPolyLog(sigma=1.0, a=1.0, d=4.0).rounding.certified
            True
        """
        return Rounding(self, CertifiedBounds(self), ArbTail(self, abs_isf=self._mp_abs_isf))

    def _arb_unit(self) -> float:
        return self.sigma

    def _arb_key(self) -> tuple[Any, ...]:
        return ("exp_polylog", self.a, self.d, self.p)

    def _arb_kbits(self) -> int:
        return 8 if self.p == 1.0 and self.d < 2.0 else 6   # p = 1: m ~ u^{-1/(d-1)}

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        """Standardized tail in Arb.

        ``(1 + x/a)^{1−d}`` (p = 1) or ``Φ(x0 − √(2d)s)/Φ(x0)`` with ``s = ln(1 + x/a)``
        (p = 2); ``central`` gives one minus it (Arb tracks the cancellation; the working
        precision covers it).
        """
        from flint import arb, arb_series

        a, d = arb(self.a), arb(self.d)
        if self.p not in (1.0, 2.0):           # points only: rigorous quadrature
            if self._arb_general is None:
                self._arb_general = _ArbPolyLogTail(self.a, self.d, self.p)
            x = xs.coeffs()[0] if xs.coeffs() else arb(0)
            return arb_series([self._arb_general.tail((1 + x / a).log(), central)])
        s = (1 + xs / a).log()
        if self.p == 1.0:
            t = ((1 - d) * s).exp()
        else:
            r2d = (2 * d).sqrt()
            x0 = r2d * (1 / (2 * d) - a.log())
            sq2 = arb(2).sqrt()
            t = (-(x0 - r2d * s) / sq2).erfc() / (-x0 / sq2).erfc()
        return 1 - t if central else t

    def _arb_density(self, xs: Any) -> Any:
        """Standardized density of ``|Z|`` in Arb.

        ``(d − 1)/a·(1 + x/a)^{−d}`` (p = 1) or ``√(2d)·φ(x0 − √(2d)s)/(Φ(x0)(a + x))`` (p = 2).
        """
        from flint import arb

        a, d = arb(self.a), arb(self.d)
        if self.p == 1.0:
            return (d - 1) / a * (1 + xs / a) ** (-d)
        if self.p != 2.0:                      # e^{ψ(s)}/(N·(a + x)), s = ln(1 + x/a)
            if self._arb_general is None:
                self._arb_general = _ArbPolyLogTail(self.a, self.d, self.p)
            s = (1 + xs / a).log()
            return self._arb_general.psi(s).exp() / (self._arb_general.norm() * (a + xs))
        r2d = (2 * d).sqrt()
        x0 = r2d * (1 / (2 * d) - a.log())
        z = x0 - r2d * (1 + xs / a).log()
        big_phi = (-x0 / arb(2).sqrt()).erfc() / 2
        return r2d * (-(z * z) / 2).exp() / ((2 * arb.pi()).sqrt() * big_phi * (a + xs))

    def _mp_tail_s(self, s: Any, mp: Any) -> Any:
        """Exact ``P(|Z| > σa·expm1(s))`` for ``s >= 0`` in mpmath.

        p = 1: ``e^{(1−d)s}``; p = 2: ``Φ(x0 − √(2d)·s)/Φ(x0)``; other p: the ratio of integrals
        ``∫_s^∞ e^{ψ} / ∫_0^∞ e^{ψ}`` with ``ψ(t) = t − d((ln a + t)^p − (ln a)^p)``, by checked
        quadrature (`tabdp.noise.rounding.mp_quad_checked`) split at the float table's nodes;
        the float table itself is never used for values.
        """
        d = mp.mpf(self.d)
        if self.p == 1.0:
            return mp.exp((1 - d) * s)
        lo = mp.log(mp.mpf(self.a))
        if self.p == 2.0:
            r2d = mp.sqrt(2 * d)
            x0 = r2d * (1 / (2 * d) - lo)
            sq2 = mp.sqrt(2)
            return mp.erfc(-(x0 - r2d * s) / sq2) / mp.erfc(-x0 / sq2)
        p = mp.mpf(self.p)
        lp = lo**p

        def g(t: Any) -> Any:  # log of the integrand
            return t - d * ((lo + t) ** p - lp)

        nodes = self._table.nodes
        idx = np.unique(np.linspace(0, nodes.size - 1, min(nodes.size, 16)).astype(int))
        split = [mp.mpf(float(v)) for v in nodes[idx]]

        def points(start: Any) -> list[Any]:
            pts = [start, *[v for v in split if v > start]]
            # beyond the last point the integrand decays at rate r = −ψ'(last) (or faster, by
            # concavity): add points last + 2^k/r so that every piece holds O(1) e-folds
            assert self._quad1 is not None
            last = pts[-1]
            r = float(-self._quad1.dpsi(float(last)))
            if r > 0 and math.isfinite(r):
                pts += [last + mp.mpf(2.0**k / r) for k in range(-2, 9)]
            return [*pts, mp.inf]

        cache: dict[int, Any] = self.__dict__.setdefault("_mp_norm_cache", {})
        if mp.prec not in cache:
            cache[mp.prec] = mp_quad_checked(g, points(mp.zero), mp)
        return mp_quad_checked(g, points(s), mp) / cache[mp.prec]

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x)`` for ``x >= 0`` in mpmath (exact law; see `_mp_tail_s`).

        Example:
            >>> import mpmath
            >>> z = ExpPolyLog(sigma=1.0, a=1.0, d=4.0)        # (1 + x)^-3 / 2
            >>> float(z._mp_sf(mpmath.mpf(1), mpmath.mp))
            0.0625
        """
        s = mp.log1p(x / (mp.mpf(self.sigma) * mp.mpf(self.a)))
        return self._mp_tail_s(s, mp) / 2

    def _mp_abs_isf(self, u: Any, mp: Any) -> Any:
        """Exact ``|Z|`` quantile in mpmath (closed form for p = 1, root-finding otherwise).

        Args:
            u: Two-sided tail mass, an ``mpf`` in (0, 1].
            mp: The mpmath context.

        Returns:
            The quantile.

        Example:
            >>> import mpmath
            >>> float(ExpPolyLog(sigma=1.0, a=1.0, d=4.0)._mp_abs_isf(mpmath.mpf(1) / 8, mpmath.mp))
            1.0
        """
        if self.p == 1.0:
            s = -mp.log(u) / (mp.mpf(self.d) - 1)
            return mp.mpf(self.sigma) * mp.mpf(self.a) * mp.expm1(s)
        return solve_abs_isf(self._mp_sf, self._abs_isf, u, mp)

    # -- moments ----------------------------------------------------------------------------
    def variance(self) -> float:
        """Variance; ``float('inf')`` when it is infinite (p = 1 with d ≤ 3) or overflows.

        p = 1: 2σ²a²/((d−2)(d−3)). p = 2: σ²[(e^{2/d}K_{3/2} − 2a e^{3/(4d)}K_1)/K_{1/2} + a²]
        (docs/math/additive.md §3), falling back to quadrature where that difference cancels (large
        d·ln a, e.g. a = e^30). Other p: σ²a²·E[expm1(s)²] by quadrature, s = ln(|Z|/σ + a) − ln a.
        Note that for p close to 1 the variance can be finite yet dominated by magnitudes beyond
        the double range (it is then a formal value only).

        Returns:
            The variance.

        Example:
            >>> ExpPolyLog(sigma=1.0, a=1.0, d=4.0).variance()
            1.0
            >>> ExpPolyLog(sigma=1.0, a=1.0, d=2.5).variance()
            inf
            >>> round(ExpPolyLog(sigma=1.0, a=3.0, d=1.0, p=2.0).variance(), 6)
            7.165164
        """
        if self.p == 1.0:
            if self.d <= 3.0:
                return math.inf
            return 2.0 * (self.sigma * self.a) ** 2 / ((self.d - 2.0) * (self.d - 3.0))
        if self.p == 2.0:
            d = self.d

            def log_k(c: float) -> float:
                return float(special.log_ndtr(-self._r2d * (self._lo - c / d)))

            # E[(|Z|/σ)²] = r3 − 2a·r2 + a² = r3·(1 − 2·e^{ln a + lr2 − lr3} + e^{2 ln a − lr3})
            k15, k10 = log_k(1.5), log_k(1.0)
            lr3 = 2.0 / d + k15 - self._log_k
            lr2 = 0.75 / d + k10 - self._log_k
            b = math.exp(self._lo + lr2 - lr3)
            c = math.exp(2.0 * self._lo - lr3)
            frac = 1.0 - 2.0 * b + c
            # absolute error of the logs (log_ndtr is accurate to ~1 ulp of its value), amplified
            # by the cancellation 1 − 2b + c; use the closed form only if the result keeps ~1e-10
            err_log = 2e-15 * (1.0 + abs(k15) + abs(k10) + abs(self._log_k) + self._lo)
            if frac > 0.0 and err_log * (1.0 + 2.0 * b + c) <= 1e-10 * frac:
                lv = 2.0 * math.log(self.sigma) + lr3 + math.log(frac)
                return math.exp(lv) if lv < _LOG_DBL_MAX else math.inf
        return self._variance_quadrature()

    def _variance_quadrature(self) -> float:
        """σ²a²·∫expm1(s)² e^{ψ₁} / ∫e^{ψ₁} with ∫expm1(s)² e^{ψ₁} = ∫(1 − e^{−s})² e^{ψ₃}."""
        if self._quad1 is None:
            self._quad1 = _PolyLogQuad(self._lo, self.d, self.p, 1.0)
        q3 = _PolyLogQuad(self._lo, self.d, self.p, 3.0)
        if q3.log_mode_t() >= 50.0:
            return math.inf
        tab1 = self._table
        tab3 = q3.build()
        nodes = tab3.nodes
        with np.errstate(under="ignore"):
            cells = q3.partial(nodes[:-1], nodes[1:], tab3.peak,
                               weight=lambda x: np.expm1(-x) ** 2)
        mom = float(np.sum(cells))
        lv = (2.0 * self._log_sa + tab3.peak - tab1.peak + math.log(mom) - math.log(tab1.total))
        return math.exp(lv) if lv < _LOG_DBL_MAX else math.inf

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> ExpPolyLog(sigma=1.0, a=3.0, d=2.0, p=2.0).params()
            {'sigma': 1.0, 'a': 3.0, 'd': 2.0, 'p': 2.0}
        """
        return {"sigma": self.sigma, "a": self.a, "d": self.d, "p": self.p}
