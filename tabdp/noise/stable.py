"""Symmetric α-stable (SaS) noise and its privacy loss (docs/math/stable.md, [ZA23, ZA25]).

``SaS(α, γ)`` has characteristic function ``exp(−|γt|^α)``. The toolkit supports α = 1
(Cauchy, closed forms), α = 2 (the Gaussian ``N(0, 2γ²)`` — note σ = √2·γ, closed forms) and
``ALPHA_MIN <= α <= ALPHA_MAX`` in between (1.001 ≤ α ≤ 1.9999, the range in which the numerics
below are verified to 1e-12; the open gaps (1, 1.001) and (1.9999, 2) are refused, see
`check_alpha`).

Density, distribution and quantiles (γ = 1; a general scale by ``p(x/γ)/γ``), for 1 < α < 2:

* ``|x| <= 0.1``: the convergent small-x series ([ZA25] Lemma 23 with the 1/π restored)
  ``p(x) = 1/(πα)·Σ (−1)^j Γ((2j+1)/α)/(2j)!·x^{2j}`` (18 terms) and its integral for the CDF;
* ``0.1 < |x| < 20``: the Zolotarev/Nolan integrals ``p(x) = α/(π(α−1)x)·∫₀^{π/2} h·e^{−h} dθ``
  and ``P(|Z| > x) = (2/π)·∫₀^{π/2} e^{−h} dθ`` with ``h = x^{α/(α−1)}·V(θ)``, evaluated robustly
  (docs/math/stable.md §1): split at π/4, log variables ``u = ln θ`` and ``w = ln(π/2 − θ)``, the
  near-π/2 trigonometry rewritten without cancellation, ``ln h`` throughout, the peak ``h = 1``
  located by safeguarded Newton, composite Gauss–Legendre panels placed geometrically around it.
  The first two x-derivatives of p come from the same nodes (``dh/dx = a·h/x``), so the score
  ``p′/p`` and its slope cost nothing extra;
* ``|x| >= 20``: the Bergström tail series (with 1/k!, docs/math/stable.md §1; 30 terms), which is
  convergent to double precision there; log densities and log tails are summed in log form, so
  they never underflow.

Measured accuracy (against 20–30 digit mpmath quadrature of the same integrals and of the
Fourier inversion, α ∈ {1.001, 1.01, 1.2, 1.5, 1.9, 1.99, 1.999, 1.9999}, x ∈ [1e-8, 1e6]):
relative error of the density and of the tail ``P(Z > x)`` ≤ 1e-13 (typically 1e-15), of
quantiles ≤ 1e-13. A vectorized density evaluation costs about 0.1 ms per point in the integral
range (series and tail-series points are ~100× cheaper).

Privacy loss (docs/math/stable.md §2.1): ε(α, d) = sup_x [ln p(x − d) − ln p(x)] with d = Δ/γ.

* `stable_loss_sup` / `stable_epsilon` compute it exactly (grid, far-grid check and
  bounded Brent, docs/math/stable.md §2.1), ~1e-12 relative;
* `stable_epsilon_table` builds (once per α, cached; about 1 s) a conservative
  interpolation table for millions of per-record sensitivities (10⁷ values in ~0.6 s): never
  below the exact ε and at most its certified ``rtol`` above it for every d > 0 (measured
  ≈ 4e-10 for α ≥ 1.003 and 3.6e-9 at α = 1.001; guaranteed ≤ ``EPS_TABLE_RTOL`` = 1e-8).

Derivatives of the density come from integrals with an a-fold cancellation (a = α/(α−1)), so the
score p′/p is accurate to ~1e-13 for α ≥ 1.05 but only ~1e-10 at α = 1.001; the ε machinery
accounts for this in its margins (``_exact_rtol``). Exact rounding of releases
(`tabdp.noise.exact`) uses certified quantile tables built from series with proven
remainders in Arb (`tabdp.noise.rounding.stable_series`, docs/exact-rounding.md §4.6);
``_mp_sf`` (Nolan's tail integral in mpmath) remains a reference and a fallback.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaln, ndtr, ndtri

from tabdp._lazy_scipy import minimize_scalar
from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError, TabdpInternalError
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.rounding import (
    ArbShape,
    ArbTail,
    CertifiedBounds,
    GaussianTaylorBounds,
    QuantileBounds,
    RelErrorBounds,
    Rounding,
    ScaledBounds,
    mp_quad_checked,
)
from tabdp.noise.rounding.stable_series import StableArb, register_float_estimates
from tabdp.rng import RandomSource, as_random_source

__all__ = [
    "ALPHA_MIN",
    "ALPHA_MAX",
    "EPS_TABLE_RTOL",
    "SymmetricStable",
    "EpsilonTable",
    "check_alpha",
    "stable_epsilon",
    "stable_loss_sup",
    "stable_epsilon_table",
    "stable_score_sup",
    "stable_shift_for_epsilon",
]

#: Smallest α > 1 supported (below it, except α = 1 itself, the integrals lose accuracy).
ALPHA_MIN = 1.001
#: Largest α < 2 supported (above it, except α = 2 itself, ε and the calibration lose accuracy).
ALPHA_MAX = 1.9999
#: Guaranteed relative tightness of :func:`stable_epsilon_table`: table ε ∈ [ε, ε·(1 + rtol)]
#: with the certified ``rtol`` ≤ this (measured ≈ 4e-10 for α ≥ 1.003, ≈ 2e-9 at α = 1.001).
EPS_TABLE_RTOL = 1e-8

_U_TOP = math.log(math.pi / 4.0)   # both halves of (0, π/2) end at ln(π/4) in log variables
_LH_CAP = 60.0                     # h = e^60: e^{-h} is exactly 0 in double precision
_X_SERIES = 0.1                    # small-x series below this (any α in [1.001, 2))
_X_TAIL = 20.0                     # Bergström tail series from here on
_N_SERIES = 18
_N_TAIL = 30
_CHUNK = 512                       # points per vectorized integral block (memory bound)


def check_alpha(alpha: Any, owner: str = "SymmetricStable") -> float:
    """Validate the stability index α of a SaS law.

    Supported: α = 1 (Cauchy), α = 2 (Gaussian N(0, 2γ²)) and ``ALPHA_MIN <= α <= ALPHA_MAX``
    (1.001 … 1.9999). The gaps (1, 1.001) and (1.9999, 2) are refused: there the integral
    representation of the density amplifies rounding by α/(α−1) (near 1), and the privacy loss
    of the power tail meets the Gaussian core so far out (near 2) that neither the density nor ε
    could be certified to the toolkit's 1e-12 standard.

    Args:
        alpha: The value to check.
        owner: What it belongs to (for the message).

    Returns:
        α as a float.

    Raises:
        InvalidParameterError: If α is not a supported value.

    Example:
        >>> check_alpha(1.5)
        1.5
        >>> check_alpha(1.00001)
        Traceback (most recent call last):
        ...
        tabdp.exceptions.InvalidParameterError: SymmetricStable: alpha = 1.00001 is not ...
    """
    hint = ("use alpha = 1 (Cauchy), 1.001 <= alpha <= 1.9999, or alpha = 2 (Gaussian "
            "N(0, 2 gamma^2), not pure DP); e.g. alpha=1.5")
    a = check_real("alpha", alpha, owner=owner, ge=1.0, le=2.0, hint=hint)
    if a in (1.0, 2.0) or ALPHA_MIN <= a <= ALPHA_MAX:
        return a
    raise InvalidParameterError(
        f"{owner}: alpha = {alpha!r} is not supported; allowed are alpha = 1, "
        f"{ALPHA_MIN} <= alpha <= {ALPHA_MAX}, and alpha = 2. In the gaps (1, {ALPHA_MIN}) and "
        f"({ALPHA_MAX}, 2) the density and the privacy loss cannot be computed to the toolkit's "
        f"1e-12 accuracy.\nHint: {hint}")


# ---------------------------------------------------------------------------------------------
# numerical core, γ = 1, 1 < α < 2
# ---------------------------------------------------------------------------------------------
class _Core:
    """Density, its first two derivatives and the two-sided tail of SaS(α, 1), 1 < α < 2."""

    def __init__(self, alpha: float, start: float = 0.25, ratio: float = math.sqrt(2.0),
                 ngl: int = 10, fast_reach: tuple[float, float] = (8.0, 0.5),
                 slow_reach: float = 45.0, right1: float = 8.0, right2: float = 40.0,
                 top_breaks: tuple[float, ...] = (2.0, 1.0, 0.5, 0.25, 0.0)) -> None:
        # Panel layout (defaults verified against a 4x finer layout and against mpmath):
        # offsets start·r^k/a around the peak (a = α/(α−1) sets the peak width), reaching
        # fast_reach[0]/a + fast_reach[1] where h grows (e^{-h} dies) and slow_reach where
        # h -> 0 (the tail integrand decays only like e^{w}); extra breakpoints at ln(π/4) − t.
        self.top_breaks = _U_TOP - np.asarray(top_breaks, dtype=np.float64)
        self.gl_t, self.gl_w = np.polynomial.legendre.leggauss(ngl)
        al = self.alpha = float(alpha)
        a = self.a = al / (al - 1.0)
        self.c0 = (2.0 - al) * math.pi / 2.0
        self.log_sin_c0 = math.log(math.sin(self.c0))
        # geometric panel offsets around the peak, in units of the peak width 1/a
        base = start / a

        def offsets(reach: float) -> np.ndarray:
            n = max(1, math.ceil(math.log(max(reach, base) / base) / math.log(ratio)) + 1)
            return base * ratio ** np.arange(n)

        fast = offsets(fast_reach[0] / a + fast_reach[1])    # where h grows (fast decay)
        slow = offsets(slow_reach)        # where h -> 0 (slow decay, tail integrand ~ e^{w})
        # half 1 (u = ln θ): h grows to the left; the right side is clipped at ln(π/4)
        self.rel1 = np.concatenate([-fast[::-1], [0.0], offsets(right1)])
        # half 2 (w = ln φ): h shrinks to the left (slow); the right side reaches ln(π/4)
        self.rel2 = np.concatenate([-slow[::-1], [0.0], offsets(right2)])
        j = np.arange(_N_SERIES, dtype=np.float64)
        self.j = j
        self.cj = ((-1.0) ** j * np.exp(gammaln((2.0 * j + 1.0) / al) - gammaln(2.0 * j + 1.0))
                   / (math.pi * al))
        k = np.arange(1, _N_TAIL + 1, dtype=np.float64)
        self.k = k
        # sin(kπα/2) = (−1)^{k+1}·sin(kπ(2−α)/2) without cancellation as α → 2
        sk = np.sin(k * math.pi * (2.0 - al) / 2.0)   # (−1)^{k+1} sin(kπα/2) = sk
        self.bk = sk * np.exp(gammaln(al * k + 1.0) - gammaln(k + 1.0)) / math.pi
        self.bt = 2.0 * sk * np.exp(gammaln(al * k) - gammaln(k + 1.0)) / math.pi
        self.log_b1 = math.log(self.bk[0])
        self.log_bt1 = math.log(self.bt[0])
        self.p0 = float(self.cj[0])

    # -- ln h in the two halves --------------------------------------------------------------
    def _lnh1(self, u: np.ndarray, lx: np.ndarray) -> np.ndarray:
        al, a = self.alpha, self.a
        th = np.exp(u)
        return (a * (lx + np.log(np.cos(th) / np.sin(al * th)))
                + np.log(np.cos((al - 1.0) * th) / np.cos(th)))

    def _dlnh1(self, u: np.ndarray) -> np.ndarray:
        al, a = self.alpha, self.a
        th = np.exp(u)
        t = np.tan(th)
        return th * (a * (-t - al / np.tan(al * th)) - (al - 1.0) * np.tan((al - 1.0) * th) + t)

    def _lnh2(self, w: np.ndarray, lx: np.ndarray) -> np.ndarray:
        al, a, c0 = self.alpha, self.a, self.c0
        ph = np.exp(w)
        s = np.sin(ph)
        return (a * (lx + np.log(s / np.sin(c0 + al * ph)))
                + np.log(np.sin(c0 + (al - 1.0) * ph) / s))

    def _dlnh2(self, w: np.ndarray) -> np.ndarray:
        al, a, c0 = self.alpha, self.a, self.c0
        ph = np.exp(w)
        ct = 1.0 / np.tan(ph)
        return ph * (a * (ct - al / np.tan(c0 + al * ph))
                     + (al - 1.0) / np.tan(c0 + (al - 1.0) * ph) - ct)

    def _root(self, f: Any, df: Any, lo: np.ndarray, hi: np.ndarray, lx: np.ndarray,
              sign_lo: float, z0: np.ndarray) -> np.ndarray:
        """Safeguarded Newton for f = 0 in [lo, hi] (f(lo) has sign ``sign_lo``)."""
        z = np.clip(z0, lo, hi)
        for _ in range(100):
            v = f(z, lx)
            done = (np.abs(v) < 1e-9) | (hi - lo < 1e-12)
            if np.all(done):
                break
            left = np.sign(v) == sign_lo
            lo = np.where(left, z, lo)
            hi = np.where(left, hi, z)
            with np.errstate(divide="ignore", invalid="ignore"):
                zn = z - v / df(z)
            bad = ~((zn >= lo) & (zn <= hi))
            z = np.where(done, z, np.where(bad, 0.5 * (lo + hi), zn))
        return z

    def _peaks(self, lx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log-variable locations of h = 1 in each half (clamped to ln(π/4))."""
        top = np.full(lx.shape, _U_TOP)
        # half 1: ln h decreases in u, and ln h(u) > 0 for u < ln(x/α) − 3 (docs/math/stable.md §1)
        lo = np.minimum(lx - math.log(self.alpha), _U_TOP) - 3.0
        for _ in range(100):
            bad = self._lnh1(lo, lx) <= 0.0
            if not bad.any():
                break
            lo = np.where(bad, lo - 5.0, lo)
        at_top = self._lnh1(top, lx) >= 0.0      # h >= 1 on all of half 1: peak at its end
        lo = np.where(at_top, _U_TOP, lo)
        u0 = self._root(self._lnh1, self._dlnh1, lo, top.copy(), lx, 1.0, lo + 3.0)
        # half 2: ln h increases in w; for small φ, ln h ≈ a·ln x + (a−1)(w − ln sin c0)
        lo2 = np.minimum(self.log_sin_c0 - self.alpha * lx, _U_TOP) - 3.0
        for _ in range(100):
            bad = self._lnh2(lo2, lx) >= 0.0
            if not bad.any():
                break
            lo2 = np.where(bad, lo2 - 5.0, lo2)
        at_top2 = self._lnh2(top, lx) <= 0.0
        lo2 = np.where(at_top2, _U_TOP, lo2)
        w0 = self._root(self._lnh2, self._dlnh2, lo2, top.copy(), lx, -1.0, lo2 + 3.0)
        return u0, w0

    def _half(self, c: np.ndarray, rel: np.ndarray, lx: np.ndarray, lnh: Any) -> np.ndarray:
        """Gauss–Legendre sums of the four integrands over one half (ragged panels)."""
        n = c.shape[0]
        b = np.minimum(c[:, None] + rel[None, :], _U_TOP)
        # The integrands are singular at θ = 0 or π/2 beyond the far end, ln 2 away from
        # ln(π/4) in either log variable: panels there shrink geometrically towards the end.
        b = np.sort(np.concatenate([b, np.maximum(self.top_breaks[None, :], b[:, :1])], axis=1),
                    axis=1)
        lo, hi = b[:, :-1], b[:, 1:]
        keep = hi > lo
        owner = np.broadcast_to(np.arange(n)[:, None], lo.shape)[keep]
        lo, hi = lo[keep], hi[keep]
        half = 0.5 * (hi - lo)
        nodes = (0.5 * (hi + lo))[:, None] + half[:, None] * self.gl_t
        wts = half[:, None] * self.gl_w
        lh = np.minimum(lnh(nodes, lx[owner][:, None]), _LH_CAP)
        h = np.exp(lh)
        a = self.a
        e = np.exp(nodes - h) * wts          # θ e^{-h} du  (or φ e^{-h} dw)
        he = h * e
        g1 = (a * (1.0 - h) - 1.0) * he     # d/dx integrand of p, times x²/K
        g2 = a * h * ((a - 1.0) * (1.0 - h) - 2.0 * a * h + a * h * h) * e - 2.0 * g1
        out = np.empty((4, n))
        for i, g in enumerate((he, g1, g2, e)):
            out[i] = np.bincount(owner, weights=g.sum(axis=1), minlength=n)
        return out

    def _integrals(self, x: np.ndarray) -> np.ndarray:
        """``[∫h e^{-h}, ∫g1, ∫g2, ∫e^{-h}]`` over θ ∈ (0, π/2) for 0 < x (1-D)."""
        out = np.empty((4, x.size))
        for s in range(0, x.size, _CHUNK):
            xs = x[s:s + _CHUNK]
            lx = np.log(xs)
            with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
                u0, w0 = self._peaks(lx)
                out[:, s:s + _CHUNK] = (self._half(u0, self.rel1, lx, self._lnh1)
                                        + self._half(w0, self.rel2, lx, self._lnh2))
        return out

    # -- public evaluators -----------------------------------------------------------------------
    def evaluate(self, x: np.ndarray, tail: bool = True) -> tuple[np.ndarray, ...]:
        """``(p, p′, p″, T)`` at ``x >= 0`` (1-D), T = P(|Z| > x)."""
        x = np.asarray(x, dtype=np.float64)
        p, p1, p2, t = (np.empty(x.shape) for _ in range(4))
        ser = x <= _X_SERIES
        if ser.any():
            xs = x[ser]
            pw = (xs * xs)[:, None] ** self.j
            c, j = self.cj, self.j
            p[ser] = pw @ c
            p1[ser] = (pw[:, :-1] @ (2.0 * j[1:] * c[1:])) * xs
            p2[ser] = pw[:, :-1] @ (2.0 * j[1:] * (2.0 * j[1:] - 1.0) * c[1:])
            t[ser] = 1.0 - 2.0 * xs * (pw @ (c / (2.0 * j + 1.0)))
        big = x >= _X_TAIL
        if big.any():
            xb = x[big]
            al, k = self.alpha, self.k
            with np.errstate(under="ignore"):
                pw = np.exp(-al * np.outer(np.log(xb), k))
            p[big] = (pw @ self.bk) / xb
            p1[big] = -(pw @ (self.bk * (al * k + 1.0))) / xb**2
            p2[big] = (pw @ (self.bk * (al * k + 1.0) * (al * k + 2.0))) / xb**3
            t[big] = pw @ self.bt
        mid = ~(ser | big)
        if mid.any():
            xm = x[mid]
            jj = self._integrals(xm)
            kk = self.a / math.pi
            p[mid] = kk / xm * jj[0]
            p1[mid] = kk / xm**2 * jj[1]
            p2[mid] = kk / xm**3 * jj[2]
            t[mid] = (2.0 / math.pi) * jj[3]
        return p, p1, p2, t

    def _tail_log_correction(self, xb: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """``ln(Σ_k c_k x^{-α(k-1)} / c_1)`` for large x (log form of the tail series)."""
        k = self.k
        with np.errstate(under="ignore"):
            pw = np.exp(-self.alpha * np.outer(np.log(xb), k - 1.0))
        return np.log1p(pw[:, 1:] @ (coef[1:] / coef[0]))

    def logpdf(self, x: np.ndarray) -> np.ndarray:
        """Natural log of p(|x|), never underflowing in the tail."""
        ax = np.abs(np.asarray(x, dtype=np.float64))
        out = np.empty(ax.shape)
        big = ax >= _X_TAIL
        if big.any():
            xb = ax[big]
            out[big] = (self.log_b1 - (self.alpha + 1.0) * np.log(xb)
                        + self._tail_log_correction(xb, self.bk))
        rest = ~big
        if rest.any():
            out[rest] = np.log(self.evaluate(ax[rest])[0])
        return out

    def log_tail(self, x: np.ndarray) -> np.ndarray:
        """Natural log of P(|Z| > x) for x >= 0, never underflowing."""
        ax = np.asarray(x, dtype=np.float64)
        out = np.empty(ax.shape)
        big = ax >= _X_TAIL
        if big.any():
            xb = ax[big]
            out[big] = (self.log_bt1 - self.alpha * np.log(xb)
                        + self._tail_log_correction(xb, self.bt))
        rest = ~big
        if rest.any():
            out[rest] = np.log(self.evaluate(ax[rest])[3])
        return out

    # -- quantiles -------------------------------------------------------------------------------
    @functools.cached_property
    def _isf_grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(z, y, dz/dy)`` on a grid of z = ln m over the integral range, y = ln T(m)."""
        z = np.linspace(math.log(_X_SERIES), math.log(_X_TAIL), 241)
        m = np.exp(z)
        p, _, _, t = self.evaluate(m)
        dy = -2.0 * m * p / t                     # dy/dz < 0
        return z, np.log(t), 1.0 / dy

    def abs_isf(self, u: np.ndarray) -> np.ndarray:
        """Magnitude m with ``P(|Z| > m) = u`` for u in (0, 1) (1-D), ~1e-13 relative."""
        u = np.asarray(u, dtype=np.float64)
        m = np.empty(u.shape)
        t_ser = float(self.evaluate(np.array([_X_SERIES]))[3][0])
        t_tail = float(self.evaluate(np.array([_X_TAIL]))[3][0])
        ser = u >= t_ser
        tail = u <= t_tail
        mid = ~(ser | tail)
        if ser.any():   # centre: solve C(m) = 1 − T(m) = 1 − u with the series (C' = 2p)
            c = 1.0 - u[ser]
            v = c / (2.0 * self.p0)
            for _ in range(40):
                p, _, _, t = self.evaluate(v)
                step = ((1.0 - t) - c) / (2.0 * p)
                v = np.clip(v - step, 0.0, _X_SERIES)
                if np.all(np.abs(step) <= 1e-16 * v):
                    break
            m[ser] = v
        if tail.any():  # tail: solve ln T(m) = ln u in z = ln m with the Bergström series
            lu = np.log(u[tail])
            z = (self.log_bt1 - lu) / self.alpha
            for _ in range(40):
                x = np.exp(z)
                lt = self.log_tail(x)
                p = np.exp(self.logpdf(x) - lt)
                step = (lt - lu) / (-2.0 * x * p)
                z = np.maximum(z - step, math.log(_X_TAIL))
                if np.all(np.abs(step) <= 1e-15):
                    break
            m[tail] = np.exp(z)
        if mid.any():
            m[mid] = self._isf_mid(np.log(u[mid]))
        return m

    def _isf_mid(self, lu: np.ndarray) -> np.ndarray:
        """Safeguarded Newton in z = ln m on ln T(m) = lu, started by Hermite interpolation."""
        zg, yg, dzg = self._isf_grid
        # y decreases along the grid: interpolate on the reversed (increasing) arrays
        yr, zr, dr = yg[::-1], zg[::-1], dzg[::-1]
        i = np.clip(np.searchsorted(yr, lu) - 1, 0, yr.size - 2)
        hy = yr[i + 1] - yr[i]
        s = (lu - yr[i]) / hy
        h00, h10 = (1 + 2 * s) * (1 - s) ** 2, s * (1 - s) ** 2
        h01, h11 = s * s * (3 - 2 * s), s * s * (s - 1)
        z = h00 * zr[i] + h10 * hy * dr[i] + h01 * zr[i + 1] + h11 * hy * dr[i + 1]
        lo, hi = zr[i + 1].copy(), zr[i].copy()      # bracket (z decreasing in y)
        lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
        z = np.clip(z, lo, hi)
        active = np.ones(z.shape, dtype=bool)
        for _ in range(30):
            za = z[active]
            x = np.exp(za)
            p, _, _, t = self.evaluate(x)
            g = np.log(t) - lu[active]                # decreasing in z
            step = g / (-2.0 * x * p / t)
            lo_a = np.where(g > 0, za, lo[active])
            hi_a = np.where(g > 0, hi[active], za)
            zn = za - step
            bad = ~((zn >= lo_a) & (zn <= hi_a))
            zn = np.where(bad, 0.5 * (lo_a + hi_a), zn)
            lo[active], hi[active] = lo_a, hi_a
            z[active] = zn
            # quadratic convergence: after a step of size <= 1e-8 the error is ~1e-16
            done = (np.abs(step) <= 1e-8) & ~bad
            idx = np.flatnonzero(active)
            active[idx[done]] = False
            if not active.any():
                break
        return np.exp(z)


@functools.lru_cache(maxsize=64)
def _core(alpha: float) -> _Core:
    return _Core(alpha)


_LN2 = math.log(2.0)


def _float_estimates(alpha: float) -> tuple[Any, Any]:
    """Float64 ``(ln g, ln T)`` of the standard law (planning estimates for `StableArb`)."""
    core = _core(alpha)

    def log_g(x: float) -> float:
        return float(core.logpdf(np.array([x]))[0]) + _LN2

    def log_t(x: float) -> float:
        return float(core.log_tail(np.array([x]))[0])

    return log_g, log_t


register_float_estimates(_float_estimates)


@functools.lru_cache(maxsize=16)
def _stable_arb(alpha: float) -> StableArb:
    return StableArb(alpha, *_float_estimates(alpha))


def _point_series(xs: Any) -> tuple[Any, int]:
    """``(x, n)`` for an ``arb_series`` ``x + t`` to order n, or ``(x, 1)`` for a constant.

    Anything else raises ValueError (callers give NaN).
    """
    c = xs.coeffs()
    if not c:
        raise ValueError("a series at x = 0")
    if len(c) == 1:
        return c[0], 1
    if len(c) != 2 or not (c[1] == 1):
        raise ValueError("only the series x + t is supported")
    return c[0], xs.prec


# ---------------------------------------------------------------------------------------------
# the noise law
# ---------------------------------------------------------------------------------------------
class SymmetricStable(ArbShape, NoiseDistribution):
    """Symmetric α-stable noise SaS(α, γ): characteristic function ``exp(−|γt|^α)``.

    α = 1 is the Cauchy law with scale γ; α = 2 is the Gaussian ``N(0, 2γ²)`` (standard
    deviation √2·γ, not γ). For 1 < α < 2 the variance is infinite; use
    [`mad`][tabdp.noise.SymmetricStable.mad] (``E|X| = 2γΓ(1 − 1/α)/π``) or quantiles to describe
    the error.

    Args:
        alpha: Stability index: 1, 2, or in [1.001, 1.9999] (see `check_alpha`).
        gamma: Scale γ > 0.

    Example:
        >>> z = SymmetricStable(alpha=1.5, gamma=2.0)
        >>> round(float(z.pdf(0.0)), 10), round(z.mad(), 6), z.variance()
        (0.1436763757, 3.41093, inf)
        >>> round(float(z.cdf(2.0)), 10)
        0.7563420244
    """

    name = "symmetric_stable"

    def __init__(self, alpha: float, gamma: float) -> None:
        """Check ``alpha`` and ``gamma`` and pick the evaluation method for this ``alpha``."""
        owner = "SymmetricStable noise"
        self.alpha = check_alpha(alpha, owner=owner)
        self.gamma = check_real("gamma", gamma, owner=owner, gt=0.0,
                                hint="gamma is the scale of the stable law (the Cauchy scale "
                                     "at alpha = 1), e.g. gamma=1.0")
        self._log_gamma = math.log(self.gamma)

    @functools.cached_property
    def rounding(self) -> Rounding:
        """Exact rounding: every α's tail in Arb, float64 bounds by α.

        Tails: closed forms at α = 1 and 2, the series of
        `tabdp.noise.rounding.stable_series` otherwise. Bounds: certified
        tables for 1 < α < 2 (docs/exact-rounding.md §4.6), the closed form's 64u at α = 1, and
        at α = 2 (``N(0, 2γ²)``) the Gaussian's Taylor tables for ``σ = fl(√2·γ)``, widened by
        ``2**-48`` relative for the rounding of σ (within 2.01u of √2·γ).

        Example:
            >>> SymmetricStable(1.5, 1.0).rounding.certified
            True
            >>> lo, hi = SymmetricStable(2.0, 1.0).rounding.bounds(np.array([0.05]),
            ...                                                    np.array([0.05]))
            >>> bool(lo[0] < 2.77180764869935 < hi[0])              # √2·1.959964
            True
        """
        quantile: QuantileBounds
        if self.alpha == 2.0:
            quantile = ScaledBounds(GaussianTaylorBounds(math.sqrt(2.0) * self.gamma), 2.0**-48)
        elif self.alpha == 1.0:
            quantile = RelErrorBounds(self, self._isf_rel_error)
        else:
            quantile = CertifiedBounds(self)
        return Rounding(self, quantile, ArbTail(self))

    @property
    def _c(self) -> _Core:
        return _core(self.alpha)

    # -- density ---------------------------------------------------------------------------------
    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density (never underflows in the tails).

        Args:
            x: Points.

        Returns:
            Log densities.

        Example:
            >>> round(float(SymmetricStable(1.0, 1.0).logpdf(0.0)), 6)   # Cauchy: −ln π
            -1.14473
            >>> round(float(SymmetricStable(1.5, 1.0).logpdf(1e200)), 3)  # tail, no underflow
            -1152.499
        """
        x = np.asarray(x, dtype=np.float64)
        z = np.abs(x) / self.gamma
        if self.alpha == 1.0:
            return -math.log(math.pi) - self._log_gamma - np.log1p(z * z)
        if self.alpha == 2.0:
            return -0.25 * z * z - math.log(2.0 * math.sqrt(math.pi)) - self._log_gamma
        return self._c.logpdf(z.ravel()).reshape(z.shape) - self._log_gamma

    def score(self, x: ArrayLike) -> np.ndarray:
        """Score ``d/dx ln p(x)`` (odd; it decays like −(α+1)/x in the tails).

        Args:
            x: Points.

        Returns:
            Scores.

        Example:
            >>> round(float(SymmetricStable(1.0, 1.0).score(1.0)), 12)   # −2x/(1+x²)
            -1.0
        """
        x = np.asarray(x, dtype=np.float64)
        z = np.abs(x) / self.gamma
        if self.alpha == 1.0:
            s = -2.0 * z / (1.0 + z * z)
        elif self.alpha == 2.0:
            s = -0.5 * z
        else:
            p, p1, _, _ = self._c.evaluate(z.ravel())
            s = (p1 / p).reshape(z.shape)
        return np.sign(x) * s / self.gamma

    # -- tails -----------------------------------------------------------------------------------
    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        z = np.asarray(x, dtype=np.float64) / self.gamma
        if self.alpha == 1.0:
            return np.arctan2(1.0, z) / math.pi
        if self.alpha == 2.0:
            return ndtr(-z / math.sqrt(2.0))
        flat = z.ravel()
        out = np.empty(flat.shape)
        big = flat >= _X_TAIL
        if big.any():
            out[big] = 0.5 * np.exp(self._c.log_tail(flat[big]))
        if (~big).any():
            out[~big] = 0.5 * self._c.evaluate(flat[~big])[3]
        return out.reshape(z.shape)

    def logsf(self, x: ArrayLike) -> np.ndarray:
        """Log survival function ``ln P(Z > x)``, exact far into the tail (no underflow).

        Args:
            x: Points.

        Returns:
            ``ln P(Z > x)``.

        Example:
            >>> round(float(SymmetricStable(1.0, 1.0).logsf(1e200)), 4)   # ln(1/(π·1e200))
            -461.6617
        """
        x = np.asarray(x, dtype=np.float64)
        z = np.abs(x) / self.gamma
        with np.errstate(divide="ignore"):
            if self.alpha == 1.0:
                pos = np.log(np.arctan2(1.0, z) / math.pi)
            elif self.alpha == 2.0:
                from scipy.special import log_ndtr

                pos = log_ndtr(-z / math.sqrt(2.0))
            else:
                pos = math.log(0.5) + self._c.log_tail(z.ravel()).reshape(z.shape)
            neg = np.log1p(-np.exp(pos))
        return np.where(x >= 0, pos, neg)

    # certified tails in Arb: closed forms (α = 1, 2); series with proven remainders otherwise
    def _arb_unit(self) -> float:
        return self.gamma

    def _arb_key(self) -> tuple[Any, ...]:
        return ("symmetric_stable", self.alpha)

    def _arb_nsub(self) -> int:
        # one ball per node interval: the series re-expansion on a ball costs 13–40 Taylor
        # coefficients; the remainder (about 1e-22 relative) has room for the looser bound
        return 1

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        """Arb tails of ``|Z/γ|``; ``central`` gives ``1 −`` the tail.

        ``(2/π)·atan(1/x)`` (α = 1), ``erfc(x/2)`` (α = 2) and, for 1 < α < 2,
        `tabdp.noise.rounding.stable_series.StableArb` (Maclaurin, Bergström with its proven
        remainder, or an anchored Taylor series). For 1 < α < 2 the argument is a point series
        ``[x]`` or ``[x, 1]`` (``x + t``).
        """
        from flint import arb, arb_series

        if self.alpha == 1.0:
            return 2 / arb.pi() * (xs.atan() if central else (1 / xs).atan())
        if self.alpha == 2.0:
            return (xs / 2).erf() if central else (xs / 2).erfc()
        x, n = _point_series(xs)
        ev = _stable_arb(self.alpha)
        t = ev.tail(x, central)
        if n == 1:
            return arb_series([t], prec=xs.prec)
        g = ev.density(x, n - 1)                      # T(x + t) = T(x) − ∫₀ᵗ g
        sign = 1 if central else -1
        return arb_series([t] + [sign * v / (i + 1) for i, v in enumerate(g)], prec=n)

    def _arb_density(self, xs: Any) -> Any:
        """Density of ``|Z/γ|`` on the series ``x + t`` (1 < α < 2; ball-valid, §4.6)."""
        from flint import arb_series

        x, n = _point_series(xs)
        return arb_series(_stable_arb(self.alpha).density(x, n), prec=xs.prec if n == 1 else n)

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x)`` for ``x >= 0`` in working precision (mpmath), for exact rounding.

        α = 1: ``atan(γ/x)/π``; α = 2: ``erfc(x/(2γ))/2``; otherwise Nolan's integral
        ``(1/π)∫₀^{π/2} e^{−h(θ)} dθ`` in the same log variables and panels as the float64 path,
        integrated by `tabdp.noise.rounding.mp_quad_checked` (error-checked tanh-sinh), and
        truncated where the neglected mass is below ``2^-(prec+20)`` of the tail.

        Example:
            >>> import mpmath
            >>> z = SymmetricStable(1.5, 1.0)
            >>> abs(float(z._mp_sf(mpmath.mpf(1), mpmath.mp)) / float(z.sf(1.0)) - 1) < 1e-14
            True
        """
        z = mp.mpf(x) / mp.mpf(self.gamma)
        if z <= 0:
            return mp.mpf(1) / 2
        if self.alpha == 1.0:
            return mp.atan(1 / z) / mp.pi
        if self.alpha == 2.0:
            return mp.erfc(z / 2) / 2
        core = self._c
        al = mp.mpf(self.alpha)
        a = al / (al - 1)
        c0 = (2 - al) * mp.pi / 2
        lz = mp.log(z)
        top = mp.log(mp.pi / 4)
        zf = float(z)
        if not (0.0 < zf < 1e300):
            zf = min(max(zf, 1e-300), 1e300)
        lxf = np.array([math.log(zf)])
        u0, w0 = (float(v[0]) for v in core._peaks(lxf))
        t_est = float(self._sf_pos(np.array([zf * self.gamma]))[0]) or 1e-300
        cut = (mp.prec + 20) * mp.ln2

        def lnh1(u: Any) -> Any:
            th = mp.exp(u)
            return (a * (lz + mp.log(mp.cos(th) / mp.sin(al * th)))
                    + mp.log(mp.cos((al - 1) * th) / mp.cos(th)))

        def lnh2(w: Any) -> Any:
            ph = mp.exp(w)
            sp = mp.sin(ph)
            return (a * (lz + mp.log(sp / mp.sin(c0 + al * ph)))
                    + mp.log(mp.sin(c0 + (al - 1) * ph) / sp))

        def points(c: float, lo: Any) -> list[Any]:
            rel = np.concatenate([core.rel2, -core.rel2])
            pts = {mp.mpf(float(v)) for v in c + rel if float(lo) < v < float(top)}
            pts |= {mp.mpf(float(v)) for v in core.top_breaks if float(lo) < v < float(top)}
            return [lo, *sorted(pts), top]

        # half 1: h grows to the left; stop where e^{-h} < 2^-(prec+20)
        lo1 = mp.mpf(min(u0, float(top)) - 1.0)
        while lnh1(lo1) < mp.log(cut + 60):
            lo1 -= 1 + (float(top) - float(lo1))
        # half 2: the integrand φ·e^{-h} <= φ: stop where φ < 2^-(prec+20)·tail
        lo2 = mp.log(mp.mpf(t_est)) - cut - 5
        lo2 = min(lo2, mp.mpf(w0) - 60)
        # half 1 is negligible when already h(π/4) (its smallest h) kills e^{-h}
        dead1 = lnh1(top) > mp.log(cut + 60 + abs(mp.log(mp.mpf(t_est))))
        i1 = mp.zero if dead1 else mp_quad_checked(lambda u: u - mp.exp(lnh1(u)),
                                                   points(u0, lo1), mp)
        i2 = mp_quad_checked(lambda w: w - mp.exp(lnh2(w)), points(w0, lo2), mp)
        return (i1 + i2) / mp.pi

    def _isf_rel_error(self, u: np.ndarray, m: np.ndarray) -> float | None:
        """Relative error bound of ``_abs_isf`` at α = 1: 64 ulps (other α use tables).

        α = 1: ``γ·cot(πu/2)`` (u ≤ ½) or ``γ·tan(π(1 − u)/2)`` (``1 − u`` exact): the argument
        ``a <= π/4`` carries 1.4u of rounding, tan's condition number ``2a/sin 2a`` is at most
        π/2 there, libm's tan adds at most 4 ulps (8u), the reciprocal and the scaling 2u: at
        most 12.2u, declared as 64u (docs/exact-rounding.md §4).

        Args:
            u: Tail masses.
            m: The computed quantiles.

        Returns:
            The bound.

        Example:
            >>> SymmetricStable(1.0, 1.0)._isf_rel_error(np.array([0.5]), np.array([1.0])) < 1e-14
            True
        """
        return 64.0 * 2.0**-53 if self.alpha == 1.0 else None

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        u = np.asarray(u, dtype=np.float64)
        out = np.zeros(u.shape)
        inner = (u > 0.0) & (u < 1.0)
        out[u <= 0.0] = np.inf
        v = u[inner]
        if self.alpha == 1.0:
            m = np.where(v > 0.5, np.tan(0.5 * math.pi * (1.0 - v)),
                         1.0 / np.tan(0.5 * math.pi * v))
        elif self.alpha == 2.0:
            m = -math.sqrt(2.0) * ndtri(0.5 * v)
        else:
            m = self._c.abs_isf(v)
        out[inner] = m
        return self.gamma * out

    # -- moments ---------------------------------------------------------------------------------
    def variance(self) -> float:
        """Variance: ``inf`` for α < 2, ``2γ²`` at α = 2.

        Example:
            >>> SymmetricStable(2.0, 3.0).variance(), SymmetricStable(1.9, 1.0).variance()
            (18.0, inf)
        """
        return 2.0 * self.gamma**2 if self.alpha == 2.0 else math.inf

    def mad(self) -> float:
        """Mean absolute deviation ``E|X| = 2γ·Γ(1 − 1/α)/π`` (``inf`` at α = 1).

        [ZA25] Table 1: 1.1284γ (α = 2), 1.1289γ (1.999), 1.1340γ (1.99), 1.1576γ (1.95),
        1.1903γ (1.9), 1.2687γ (1.8).

        Returns:
            The MAD.

        Example:
            >>> round(SymmetricStable(2.0, 1.0).mad(), 4), round(SymmetricStable(1.8, 1.0).mad(), 4)
            (1.1284, 1.2687)
        """
        if self.alpha == 1.0:
            return math.inf
        return 2.0 * self.gamma * math.exp(gammaln(1.0 - 1.0 / self.alpha)) / math.pi

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> SymmetricStable(1.5, 2.0).params()
            {'alpha': 1.5, 'gamma': 2.0}
        """
        return {"alpha": self.alpha, "gamma": self.gamma}

    # -- sampling --------------------------------------------------------------------------------
    def sample(self, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
        """Draw noise with the Chambers–Mallows–Stuck method (docs/math/stable.md §3).

        ``X = γ·sin(αU)/cos(U)^{1/α}·(cos((1−α)U)/W)^{(1−α)/α}`` with ``U = π(V₁ − ½)``
        uniform on (−π/2, π/2) and ``W = −ln(1 − V₂)`` exponential, V₁, V₂ from
        [`RandomSource.uniform`][tabdp.RandomSource.uniform]; ``cos U`` is computed as
        ``sin(π·min(V₁, 1 − V₁))`` so the far tails keep full relative accuracy. α = 1 gives γ·tan
        U, α = 2 gives N(0, 2γ²).

        Args:
            size: Output shape.
            rng: A [`RandomSource`][tabdp.RandomSource] (default: secure), int seed or numpy
                Generator.

        Returns:
            float64 array of draws.

        Example:
            >>> SymmetricStable(1.5, 1.0).sample((2, 3), rng=0).shape
            (2, 3)
        """
        src: RandomSource = as_random_source(rng)
        v1 = src.uniform(size)
        v2 = src.uniform(np.shape(v1))
        al = self.alpha
        uu = math.pi * (v1 - 0.5)
        cos_u = np.sin(math.pi * np.minimum(v1, 1.0 - v1))
        w = -np.log1p(-v2)
        if al == 1.0:
            return self.gamma * np.sin(uu) / cos_u
        x = (np.sin(al * uu) / cos_u ** (1.0 / al)
             * (np.cos((1.0 - al) * uu) / w) ** ((1.0 - al) / al))
        return self.gamma * x

    def sample_inverse_cdf(self, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
        """Draw noise by inverse CDF (a fair sign times the ``|Z|`` quantile of a uniform).

        Slower than [`sample`][tabdp.noise.SymmetricStable.sample] (each draw solves for a quantile)
        but driven by one uniform per draw; both samplers have the same law.

        Args:
            size: Output shape.
            rng: A [`RandomSource`][tabdp.RandomSource] (default: secure), int seed or numpy
                Generator.

        Returns:
            float64 array of draws.

        Example:
            >>> SymmetricStable(1.0, 1.0).sample_inverse_cdf(4, rng=1).shape
            (4,)
        """
        return super().sample(size, rng)


# ---------------------------------------------------------------------------------------------
# privacy loss ε(α, d), d = Δ/γ (γ = 1 units)
# ---------------------------------------------------------------------------------------------
_D_SMALL = 1e-3        # below this, L = −∫ score (no cancellation of ln p(x−d) − ln p(x))
_GLS_T, _GLS_W = np.polynomial.legendre.leggauss(6)   # score quadrature, small d


def _signed(core: _Core, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ln p(y), s(y), s′(y))`` for signed y (p even, s odd, s′ even)."""
    ay = np.abs(y).ravel()
    p, p1, p2, _ = core.evaluate(ay)
    s = p1 / p
    sp = p2 / p - s * s
    shape = np.shape(y)
    lp = np.log(p)
    big = ay >= _X_TAIL
    if big.any():
        lp[big] = core.logpdf(ay[big])
    return lp.reshape(shape), (np.sign(y).ravel() * s).reshape(shape), sp.reshape(shape)


def _loss(core: _Core, y: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``L = ln p(y) − ln p(y + d)`` (the loss at x = y + d), accurate for small d too."""
    y, d = np.broadcast_arrays(np.asarray(y, dtype=np.float64), np.asarray(d, dtype=np.float64))
    out = np.empty(y.shape)
    small = d <= _D_SMALL
    if small.any():
        ys, ds = y[small], d[small]
        pts = ys[:, None] + 0.5 * ds[:, None] * (1.0 + _GLS_T[None, :])
        s = _signed(core, pts)[1]
        out[small] = -0.5 * ds * (s @ _GLS_W)
    big = ~small
    if big.any():
        yb, db = y[big], d[big]
        lp = _signed(core, np.concatenate([yb, yb + db]))[0]
        out[big] = lp[:yb.size] - lp[yb.size:]
    return out


def _far_factors() -> np.ndarray:
    return np.geomspace(1.5, 1e4, 30)


def _search_grid(alpha: float, d: float) -> tuple[np.ndarray, np.ndarray]:
    """docs/math/stable.md §2.1 grids in y = x − d: near grid (sorted) and far grid."""
    r = 12.0 + 2.0 * math.sqrt(max(0.0, math.log(1.0 / (2.0 - alpha))))
    near = np.unique(np.concatenate([np.linspace(d / 2.0, d + r, 120),
                                     np.linspace(max(d / 2.0, d - 3.0), d + 8.0, 45)]))
    far = (d + r) * _far_factors()
    return near - d, far - d


def stable_loss_sup(alpha: float, d: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Exact privacy loss ε = sup_x [ln p(x − d) − ln p(x)] of SaS(α, 1) and its argmax.

    docs/math/stable.md §2.1: L on a grid of 120 points on [d/2, d + R] and 45 on
    [max(d/2, d−3), d + 8]
    (R = 12 + 2√ln(1/(2−α))⁺), a far grid (d + R)·[1.5 … 1e4] that must stay below the grid
    maximum, then bounded Brent (xatol 1e-10, in y = x − d) between the neighbours of the grid
    argmax. Relative accuracy ≈ 1e-12. α = 1 uses the closed form 2·asinh(d/2) with
    x* = (d + √(d² + 4))/2; α = 2 gives ``inf`` for d > 0. By scale invariance ε(α, γ, Δ)
    = ``stable_loss_sup(α, Δ/γ)``.

    Args:
        alpha: Stability index (see `check_alpha`).
        d: Shift(s) d = Δ/γ ≥ 0 (scalar or small vector; ~50 ms per value).

    Returns:
        ``(epsilon, x_star)`` arrays shaped like ``d`` (x* is ``nan`` where undefined).

    Raises:
        InvalidParameterError: For a bad α or negative/non-finite d.
        TabdpInternalError: If the far grid exceeds the near-grid maximum.

    Example:
        >>> eps, x = stable_loss_sup(1.5, 1.0)
        >>> round(float(eps), 12), round(float(x), 4)
        (0.994053076383, 2.7886)
    """
    al = check_alpha(alpha, owner="stable_loss_sup")
    dd = _check_d(d, "stable_loss_sup")
    flat = dd.ravel()
    eps = np.zeros(flat.shape)
    xs = np.full(flat.shape, np.nan)
    if al == 1.0:
        eps = 2.0 * np.arcsinh(0.5 * flat)
        xs = 0.5 * (flat + np.sqrt(flat * flat + 4.0))
    elif al == 2.0:
        eps = np.where(flat > 0, np.inf, 0.0)
    else:
        core = _core(al)
        for i, di in enumerate(flat):
            if di > 0.0:
                eps[i], xs[i] = _sup_by_grid(lambda y, dv: _loss(core, y, dv), al, float(di))
    return eps.reshape(dd.shape), xs.reshape(dd.shape)


def _sup_by_grid(loss: Any, alpha: float, d: float) -> tuple[float, float]:
    """docs/math/stable.md §2.1 algorithm for sup_y loss(y, d), y = x − d; returns (ε, x*).

    ``loss(y, d)`` must be vectorized in y. Grid of 120 + 45 points, far grid (must stay
    below), bounded Brent (xatol 1e-10) between the neighbours of the grid argmax.
    """
    near, far = _search_grid(alpha, d)
    vals = loss(np.concatenate([near, far]), d)
    vn, vf = vals[:near.size], vals[near.size:]
    k = int(np.argmax(vn))
    if vf.max() >= vn[k]:
        raise TabdpInternalError(
            f"stable_loss_sup: the far grid exceeds the near-grid maximum (alpha={alpha}, "
            f"d={d}); the loss is not unimodal as assumed.")
    lo, hi = near[max(k - 1, 0)], near[min(k + 1, near.size - 1)]
    res = minimize_scalar(lambda y: -float(loss(np.array([y]), d)[0]), bounds=(lo, hi),
                          method="bounded", options={"xatol": 1e-10, "maxiter": 500})
    y = float(res.x)
    best = float(loss(np.array([y]), d)[0])
    if vn[k] > best:                   # the grid point itself is better (flat top): keep it
        y, best = float(near[k]), float(vn[k])
    return best, y + d


def stable_epsilon(alpha: float, d: ArrayLike) -> np.ndarray | float:
    """Exact pure-DP ε of the SaS mechanism at shift d = Δ/γ (see `stable_loss_sup`).

    For many values use `stable_epsilon_table` (conservative, vectorized).

    Args:
        alpha: Stability index (see `check_alpha`).
        d: Shift(s) d = Δ/γ ≥ 0.

    Returns:
        ε as a float for scalar ``d``, else an array.

    Example:
        >>> round(stable_epsilon(1.0, 1.0), 5), round(stable_epsilon(1.5, 1.0), 5)
        (0.96242, 0.99405)
    """
    eps = stable_loss_sup(alpha, d)[0]
    return float(eps) if np.ndim(d) == 0 else eps


def _check_d(d: ArrayLike, owner: str) -> np.ndarray:
    dd = np.asarray(d, dtype=np.float64)
    if not np.all(np.isfinite(dd)) or np.any(dd < 0):
        bad = dd[~(np.isfinite(dd) & (dd >= 0))].ravel()[:3].tolist()
        raise InvalidParameterError(
            f"{owner}: the shift d = Delta/gamma must be finite and >= 0; got {bad}.\n"
            "Hint: pass per-record sensitivities divided by the noise scale gamma.")
    return dd


@functools.lru_cache(maxsize=64)
def stable_score_sup(alpha: float) -> tuple[float, float]:
    """``S = sup_x |d/dx ln p(x)|`` for SaS(α, 1) and where it is attained.

    By the mean value theorem ε(d) ≤ d·S for every d, and ε(d) = d·S·(1 − O(d²)) as d → 0.
    α = 1: S = 1 at x = 1; α = 2: ``inf`` (the Gaussian score is unbounded).

    Args:
        alpha: Stability index (see `check_alpha`).

    Returns:
        ``(S, x_S)``.

    Example:
        >>> s, x = stable_score_sup(1.0)
        >>> s, x
        (1.0, 1.0)
    """
    al = check_alpha(alpha, owner="stable_score_sup")
    if al == 1.0:
        return 1.0, 1.0
    if al == 2.0:
        return math.inf, math.inf
    core = _core(al)
    grid = np.linspace(0.2, 40.0, 400)
    s = -_signed(core, grid)[1]
    k = int(np.argmax(s))
    res = minimize_scalar(lambda x: float(_signed(core, np.array([x]))[1][0]),
                          bounds=(grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]),
                          method="bounded", options={"xatol": 1e-10})
    x = float(res.x)
    return max(float(-res.fun), float(s[k])), x


# ---------------------------------------------------------------------------------------------
# conservative interpolation table of ε(d)
# ---------------------------------------------------------------------------------------------
_T_MIN, _T_MAX = math.log(1e-6), math.log(1e9)


class _Surrogate:
    """Cubic-Hermite stand-in for ln p and the score on [0, 20] (only to locate the argmax)."""

    def __init__(self, core: _Core) -> None:
        self.core = core
        self.x = np.linspace(0.0, _X_TAIL, 801)
        lp, s, sp = _signed(core, self.x)
        self.lp, self.s, self.sp = lp, s, sp
        self.h = self.x[1] - self.x[0]

    def _herm(self, y: np.ndarray, f: np.ndarray, df: np.ndarray) -> np.ndarray:
        i = np.clip((y / self.h).astype(np.int64), 0, self.x.size - 2)
        s = y / self.h - i
        h00, h10 = (1 + 2 * s) * (1 - s) ** 2, s * (1 - s) ** 2
        h01, h11 = s * s * (3 - 2 * s), s * s * (s - 1)
        return h00 * f[i] + h10 * self.h * df[i] + h01 * f[i + 1] + h11 * self.h * df[i + 1]

    def logpdf(self, y: np.ndarray) -> np.ndarray:
        ay = np.abs(y)
        out = np.empty(ay.shape)
        big = ay >= _X_TAIL
        out[~big] = self._herm(ay[~big], self.lp, self.s)
        if big.any():
            out[big] = self.core.logpdf(ay[big])
        return out

    def score(self, y: np.ndarray) -> np.ndarray:
        ay = np.abs(y)
        out = np.empty(ay.shape)
        big = ay >= _X_TAIL
        out[~big] = self._herm(ay[~big], self.s, self.sp)
        if big.any():
            out[big] = _signed(self.core, ay[big])[1]
        return np.sign(y) * out

    def loss(self, y: np.ndarray, d: np.ndarray) -> np.ndarray:
        small = d <= _D_SMALL
        with np.errstate(invalid="ignore"):
            diff = self.logpdf(y) - self.logpdf(y + d)
        return np.where(small, -d * self.score(y + 0.5 * d), diff)


def _solve_argmax(core: _Core, d: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                  y0: np.ndarray) -> np.ndarray:
    """Vectorized safeguarded Newton for L′(y) = s(y) − s(y + d) = 0 in [lo, hi]."""
    y = np.clip(y0, lo, hi)
    lo, hi = lo.copy(), hi.copy()
    active = np.ones(d.shape, dtype=bool)
    for _ in range(60):
        ya, da = y[active], d[active]
        n = ya.size
        _, s, sp = _signed(core, np.concatenate([ya, ya + da]))
        g = s[:n] - s[n:]                     # decreasing through 0 at the maximum
        dg = sp[:n] - sp[n:]
        lo_a = np.where(g > 0, ya, lo[active])
        hi_a = np.where(g > 0, hi[active], ya)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = g / dg
        yn = ya - step
        bad = ~((yn >= lo_a) & (yn <= hi_a)) | ~np.isfinite(yn)
        yn = np.where(bad, 0.5 * (lo_a + hi_a), yn)
        lo[active], hi[active] = lo_a, hi_a
        y[active] = yn
        done = (~bad & (np.abs(step) <= 1e-13 * np.maximum(1.0, np.abs(ya)))) | (
            hi_a - lo_a <= 1e-14 * np.maximum(1.0, np.abs(ya)))
        idx = np.flatnonzero(active)
        active[idx[done]] = False
        if not active.any():
            break
    return y


def _eps_data(core: _Core, d: np.ndarray, surrogate: _Surrogate | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ε(d), dε/dd, d²ε/dd² and y* = x* − d for a vector of d > 0 (fast exact path)."""
    al = core.alpha
    sur = surrogate or _surrogate(al)
    r = 12.0 + 2.0 * math.sqrt(max(0.0, math.log(1.0 / (2.0 - al))))
    # grids of docs/math/stable.md §2.1 (y = x − d), evaluated with the surrogate to bracket the max
    g1 = np.linspace(0.0, 1.0, 120)[None, :]
    g2 = np.linspace(0.0, 1.0, 45)[None, :]
    dd = d[:, None]
    near = np.concatenate([dd / 2 + g1 * (dd / 2 + r),
                           np.maximum(dd / 2, dd - 3.0) + g2 * (dd + 8.0 - np.maximum(dd / 2,
                                                                                     dd - 3.0))],
                          axis=1)
    near = np.sort(near, axis=1) - dd
    far = (dd + r) * _far_factors()[None, :] - dd
    dn = np.broadcast_to(dd, near.shape)
    vn = sur.loss(near.ravel(), dn.ravel()).reshape(near.shape)
    vf = sur.loss(far.ravel(), np.broadcast_to(dd, far.shape).ravel()).reshape(far.shape)
    k = np.argmax(vn, axis=1)
    rows = np.arange(d.size)
    if np.any(vf.max(axis=1) >= vn[rows, k] + 1e-9 * np.abs(vn[rows, k])):
        raise TabdpInternalError(
            f"stable epsilon table (alpha={al}): the far grid exceeds the near-grid maximum; "
            "the privacy loss is not unimodal as assumed.")
    lo = near[rows, np.maximum(k - 1, 0)]
    hi = near[rows, np.minimum(k + 1, near.shape[1] - 1)]
    y = near[rows, k].copy()
    # For d <= 1e-3, L(y) = −d·s(y + d/2) − (d³/24)·s''(y + d/2) + …: the maximum is at
    # y = x_S − d/2 + O(d²), and L there is within a relative O(d⁴) <= 1e-12 of the sup. Newton
    # on L' = s(y) − s(y + d) ~ d·s' would amplify the rounding of the score by 1/d.
    small = d <= _D_SMALL
    if small.any():
        y[small] = stable_score_sup(al)[1] - 0.5 * d[small]
    big = ~small
    if big.any():
        y[big] = _solve_argmax(core, d[big], lo[big], hi[big], y[big])
    eps = _loss(core, y, d)
    _, s, sp = _signed(core, np.concatenate([y, y + d]))
    n = d.size
    d1 = -s[:n]
    with np.errstate(divide="ignore", invalid="ignore"):
        d2 = -sp[:n] * sp[n:] / (sp[:n] - sp[n:])
    d2 = np.where(np.isfinite(d2), d2, 0.0)
    return eps, d1, d2, y


def _log_derivs(d: np.ndarray, eps: np.ndarray, d1: np.ndarray, d2: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The function f = ln ε and its first two derivatives in t = ln d."""
    f1 = d * d1 / eps
    f2 = f1 * (1.0 - f1) + d * d * d2 / eps
    return np.log(eps), f1, f2


@dataclass(frozen=True)
class EpsilonTable:
    """Conservative, vectorized ε(d) of SaS(α, 1) for any number of shifts d = Δ/γ.

    Built by `stable_epsilon_table`. For 1 < α < 2: piecewise quintic Hermite
    interpolation of ln ε in ln d on [1e-6, ~1e9] (values and two derivatives from the exact
    argmax; the first by the envelope theorem, dε/dd = −(p′/p)(x* − d)), on intervals of width
    1/4 in ln d halved where needed, raised by a margin certified at the midpoint of every
    interval (twice the worst midpoint error plus 2e-12 for the accuracy of the exact ε); below
    1e-6 the mean-value bound ε ≤ d·S (S = sup|p′/p|); above the table the asymptote
    ε ≤ (α+1)·ln d + ln(p(0)/c₁), c₁ = Γ(α+1)·sin(πα/2)/π, which ε approaches from below
    (ε(d) = ln p(0) − ln p(d) + O(d⁻²) and the second Bergström term makes −ln p(d) fall short
    of its leading term). Every value is ≥ the exact ε and ≤ ε·(1 + ``rtol``).

    Attributes:
        alpha: Stability index.
        rtol: Certified relative tightness (≤ `EPS_TABLE_RTOL`).

    Example:
        >>> tab = stable_epsilon_table(1.0)
        >>> round(float(tab(1.0)), 5)
        0.96242
    """

    alpha: float
    rtol: float
    hf: float = 1.0                     # fine cell width in t = ln d
    cell_map: np.ndarray | None = None  # fine cell -> interval
    k0: np.ndarray | None = None        # interval start, in fine cells
    klen: np.ndarray | None = None      # interval length, in fine cells
    coef: np.ndarray | None = None      # (6, n) quintic coefficients in τ ∈ [0, 1]
    log_margin: float = 0.0
    slope_bound: float = 0.0            # S·(1 + margin) below the table
    asym_c: float = 0.0
    d_min: float = 1e-6
    d_max: float = 1e9

    def __call__(self, d: ArrayLike) -> np.ndarray:
        """ε at shifts d = Δ/γ (vectorized; ~0.05 µs per value).

        Args:
            d: Shifts ≥ 0 (absolute values are used).

        Returns:
            ε values (0 at d = 0).

        Example:
            >>> stable_epsilon_table(2.0)([0.0, 1.0]).tolist()
            [0.0, inf]
        """
        x = np.abs(np.asarray(d, dtype=np.float64))
        if self.alpha == 1.0:
            return 2.0 * np.arcsinh(0.5 * x)
        if self.alpha == 2.0:
            return np.where(x > 0, np.inf, 0.0)
        if x.size > _EVAL_CHUNK:        # blocks keep the temporaries in cache
            flat = x.ravel()
            out = np.empty(flat.shape)
            for s in range(0, flat.size, _EVAL_CHUNK):
                out[s:s + _EVAL_CHUNK] = self._eval(flat[s:s + _EVAL_CHUNK])
            return out.reshape(x.shape)
        return self._eval(x)

    def _eval(self, x0: np.ndarray) -> np.ndarray:
        assert self.coef is not None and self.cell_map is not None
        x = np.atleast_1d(x0)
        assert self.k0 is not None and self.klen is not None
        xc = np.clip(x, self.d_min, self.d_max)
        u = np.log(xc / self.d_min) / self.hf
        j = np.minimum(u.astype(np.int64), self.cell_map.size - 1)
        i = self.cell_map[j]
        tau = (u - self.k0[i]) / self.klen[i]
        c = self.coef
        poly = c[5][i]
        for m in (4, 3, 2, 1, 0):
            poly = poly * tau + c[m][i]
        out = np.exp(poly + self.log_margin)
        below = x < self.d_min
        if below.any():
            out[below] = x[below] * self.slope_bound
        above = x > self.d_max
        if above.any():
            out[above] = ((self.alpha + 1.0) * np.log(x[above]) + self.asym_c) * (1.0 + 2e-12)
        return out.reshape(np.shape(x0))


_TAB_LEVELS = 5          # interval widths 1/4 … 1/128 in ln d
_TAB_SPLIT = 1.5e-10     # split an interval whose check-point error exceeds this
_EVAL_CHUNK = 1 << 16


def _exact_rtol(core: _Core) -> float:
    """Relative accuracy of the exact ε and of S.

    2e-12, plus the a²-fold rounding growth of the score integrals as α → 1 (a = α/(α−1); up
    to ~5e-10 measured at α = 1.001).
    """
    return 2e-12 + 1e-15 * core.a * core.a


def _quintic(fa: np.ndarray, fb: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Coefficients (6, n) in τ of the quintic Hermite interpolant; fa/fb = (f, f′, f″)."""
    c0, c1, c2 = fa[0], fa[1] * h, 0.5 * fa[2] * h * h
    a_ = fb[0] - (c0 + c1 + c2)
    b_ = fb[1] * h - (c1 + 2.0 * c2)
    c_ = fb[2] * h * h - 2.0 * c2
    return np.stack([c0, c1, c2, 10 * a_ - 4 * b_ + 0.5 * c_, -15 * a_ + 7 * b_ - c_,
                     6 * a_ - 3 * b_ + 0.5 * c_])


def _build_table(alpha: float) -> EpsilonTable:
    core = _core(alpha)
    sur = _Surrogate(core)
    fine = 2 ** (_TAB_LEVELS + 2)      # the smallest intervals still have quarter-point nodes
    hf = 0.25 / fine
    n0 = math.ceil((_T_MAX - _T_MIN) / 0.25)
    data: dict[int, np.ndarray] = {}

    def compute(ks: set[int]) -> None:
        new = sorted(k for k in ks if k not in data)
        if not new:
            return
        dv = np.exp(_T_MIN + hf * np.asarray(new, dtype=np.float64))
        eps, d1, d2, _ = _eps_data(core, dv, sur)
        f, f1, f2 = _log_derivs(dv, eps, d1, d2)
        for k, a, b, c in zip(new, f, f1, f2, strict=True):
            data[k] = np.array([a, b, c])

    todo = [(fine * i, fine) for i in range(n0)]
    final: list[tuple[int, int, float]] = []
    level = 0
    while todo:
        compute({k + (ln * q) // 4 for k, ln in todo for q in range(5)})
        widths = np.array([ln for _, ln in todo], dtype=np.float64)
        fa = np.stack([data[k] for k, _ in todo], axis=1)
        fb = np.stack([data[k + ln] for k, ln in todo], axis=1)
        cf = _quintic(fa, fb, widths * hf)
        err = np.zeros(len(todo))
        # certification at τ = 1/4, 1/2, 3/4: the error of a quintic Hermite interpolant is
        # f⁽⁶⁾(ξ)h⁶τ³(1−τ)³/720, largest in the middle unless f⁽⁶⁾ changes fast inside
        for q in (1, 2, 3):
            poly = cf[5]
            for m in (4, 3, 2, 1, 0):
                poly = poly * (q / 4.0) + cf[m]
            ref = np.array([data[k + (ln * q) // 4][0] for k, ln in todo])
            err = np.maximum(err, np.abs(poly - ref))
        nxt = []
        for (k, ln), e in zip(todo, err, strict=True):
            if e > _TAB_SPLIT and level < _TAB_LEVELS:
                nxt += [(k, ln // 2), (k + ln // 2, ln // 2)]
            else:
                final.append((k, ln, float(e)))
        todo, level = nxt, level + 1
    final.sort()
    k0s = np.array([k for k, _, _ in final], dtype=np.int64)
    lns = np.array([ln for _, ln, _ in final], dtype=np.int64)
    worst = max(e for _, _, e in final)
    fa = np.stack([data[k] for k in k0s], axis=1)
    fb = np.stack([data[k + ln] for k, ln in zip(k0s, lns, strict=True)], axis=1)
    coef = _quintic(fa, fb, lns * hf)
    cell_map = np.repeat(np.arange(k0s.size), lns)
    acc = _exact_rtol(core)
    log_margin = 2.0 * worst + acc
    s_sup, _ = stable_score_sup(alpha)
    return EpsilonTable(alpha=alpha, rtol=math.expm1(log_margin + worst + acc), hf=hf,
                        cell_map=cell_map, k0=k0s.astype(np.float64),
                        klen=lns.astype(np.float64), coef=coef, log_margin=log_margin,
                        slope_bound=s_sup * (1.0 + acc),
                        asym_c=math.log(core.p0) - core.log_b1, d_min=math.exp(_T_MIN),
                        d_max=math.exp(_T_MIN + hf * int(k0s[-1] + lns[-1])))


@functools.lru_cache(maxsize=32)
def stable_epsilon_table(alpha: float) -> EpsilonTable:
    """The cached conservative ε table of SaS(α) (built once per α, about 1 s).

    Args:
        alpha: Stability index (see `check_alpha`).

    Returns:
        An `EpsilonTable`; call it on shifts d = Δ/γ.

    Raises:
        TabdpInternalError: If the certified tightness exceeds `EPS_TABLE_RTOL`.

    Example:
        >>> round(float(stable_epsilon_table(1.0)(2.0)), 6)   # 2 asinh(1)
        1.762747
    """
    al = check_alpha(alpha, owner="stable_epsilon_table")
    if al in (1.0, 2.0):
        return EpsilonTable(alpha=al, rtol=0.0)
    tab = _build_table(al)
    if tab.rtol > EPS_TABLE_RTOL:
        raise TabdpInternalError(
            f"stable_epsilon_table(alpha={al}): certified tightness {tab.rtol:.3g} exceeds "
            f"{EPS_TABLE_RTOL:g}.")
    return tab


@functools.lru_cache(maxsize=64)
def _surrogate(alpha: float) -> _Surrogate:
    return _Surrogate(_core(alpha))


def stable_shift_for_epsilon(alpha: float, epsilon: float, verify: bool = True) -> float:
    """The shift d = Δ/γ at which the SaS(α) mechanism's exact ε equals ``epsilon``.

    ε is strictly increasing in d (docs/math/stable.md §2.1) and ln ε is concave in ln d (its slope
    falls from 1 to 0), so Newton on ln d started from the lower bound ln(ε/S) (ε(d) ≤ d·S, S =
    sup|p′/p|) converges monotonically; each step uses the exact argmax x*(d) and
    dε/dd = −(p′/p)(x* − d). α = 1: d = 2·sinh(ε/2). The result is verified with
    `stable_loss_sup` (grid + Brent, docs/math/stable.md §2.1) unless ``verify=False``.

    Args:
        alpha: Stability index in [1, 2) (α = 2 is not pure DP).
        epsilon: Target ε > 0.
        verify: Re-check ε(d) with the independent grid + Brent algorithm.

    Returns:
        d > 0 (calibrate with γ = Δ/d).

    Raises:
        InvalidParameterError: For α = 2 or a bad ε.
        TabdpInternalError: If the verification disagrees (a bug).

    Example:
        >>> round(1.0 / stable_shift_for_epsilon(1.0, 1.0), 10)    # γ for Δ = ε = 1
        0.9595173757
    """
    al = check_alpha(alpha, owner="stable_shift_for_epsilon")
    eps = check_real("epsilon", epsilon, owner="stable_shift_for_epsilon", gt=0.0,
                     hint="epsilon is the pure-DP privacy loss to calibrate to, e.g. 1.0")
    if al == 2.0:
        raise InvalidParameterError(
            "stable_shift_for_epsilon: alpha = 2 is the Gaussian mechanism, which has no "
            "pure-DP epsilon (epsilon = inf for every Delta > 0); allowed are 1 <= alpha <= "
            f"{ALPHA_MAX}.\nHint: use alpha <= {ALPHA_MAX}, or calibrate the Gaussian in zCDP.")
    if al == 1.0:
        return 2.0 * math.sinh(0.5 * eps)
    core = _core(al)
    sur = _surrogate(al)
    s_sup, _ = stable_score_sup(al)
    t = math.log(eps / s_sup)          # ln d_lo: ε(d_lo) <= eps
    target = math.log(eps)
    for _ in range(100):
        d = np.array([math.exp(t)])
        e, d1, _, _ = _eps_data(core, d, sur)
        g = math.log(float(e[0])) - target
        slope = float(d[0] * d1[0] / e[0])
        step = -g / slope
        t += step
        if abs(step) <= 1e-14 * max(1.0, abs(t)):
            break
    else:  # pragma: no cover - Newton on a concave function does not stall
        raise TabdpInternalError(f"stable_shift_for_epsilon did not converge (alpha={al}).")
    d_star = math.exp(t)
    if verify:
        check = float(stable_loss_sup(al, d_star)[0])
        if abs(check / eps - 1.0) > 1e-9:
            raise TabdpInternalError(
                f"stable_shift_for_epsilon(alpha={al}, epsilon={eps}): verification gives "
                f"{check!r} at d={d_star!r}.")
    return d_star
