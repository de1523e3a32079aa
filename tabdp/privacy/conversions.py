"""Conversions between privacy guarantees: Gaussian DP, zCDP and (ε, δ)-DP.

All functions are vectorized over their first argument and data-independent (they apply to public
policy values as well as to confidential per-record losses).

* [`gdp_delta`][tabdp.privacy.conversions.gdp_delta] /
  [`gdp_epsilon`][tabdp.privacy.conversions.gdp_epsilon]: the exact (ε, δ) profile of a Gaussian
  shift of μ standard deviations (Balle & Wang 2018; Dong, Roth & Su 2019). A mechanism whose output
  is a Gaussian shifted by at most μ·σ — the Gaussian mechanism, and the transformation mechanisms
  in transformed space — satisfies exactly these (ε, δ) pairs, and compositions of such mechanisms
  are again a Gaussian shift with μ² = Σ μᵢ² (= 2 Σ ρᵢ).
* [`zcdp_epsilon`][tabdp.privacy.conversions.zcdp_epsilon]: the (ε, δ) implied by ρ-zCDP alone, via
  the conversion of Canonne, Kamath & Steinke (2020, Prop. 12) optimized over the Rényi order, never
  worse than the classic ρ + 2·sqrt(ρ·ln(1/δ)) (Bun & Steinke 2016, Prop. 1.3).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import erf, erfcx, log_ndtr

from tabdp._numeric import work_pool, work_threads
from tabdp._validation import check_real

__all__ = ["gdp_delta", "gdp_log_delta", "gdp_epsilon", "zcdp_epsilon", "check_dp_delta",
           "MAX_STATEMENT_DELTA", "statement_delta_problem"]

#: The largest δ of a release's (ε, δ) statements (`release.delta` of a spec, refused above;
#: ``Report(delta=...)``, warned above). An (ε, δ) guarantee allows, for example, publishing a
#: record's data outright with probability δ, so a statement at a larger δ protects little.
MAX_STATEMENT_DELTA = 1e-3


def statement_delta_problem(delta: float) -> str | None:
    """Why ``delta`` is too large for the (ε, δ) statements of a release, or ``None``.

    Args:
        delta: The δ (already checked to be in (0, 1)).

    Returns:
        A sentence giving the value and the allowed range, or ``None`` when δ ≤
        `MAX_STATEMENT_DELTA`.

    Example:
        >>> statement_delta_problem(1e-9) is None, statement_delta_problem(0.5)[:24]
        (True, 'delta = 0.5 is above 1e-0')
    """
    if delta <= MAX_STATEMENT_DELTA:
        return None
    return (f"delta = {delta:g} is above {MAX_STATEMENT_DELTA:g}: the (ε, δ) statements need δ "
            f"in (0, {MAX_STATEMENT_DELTA:g}]. An (ε, δ) guarantee allows, for example, "
            "publishing a record's data outright with probability δ, so at this δ it protects "
            "little")


def check_dp_delta(delta: float, owner: str) -> float:
    """Validate a DP δ in (0, 1).

    Args:
        delta: The δ.
        owner: What it belongs to (for the message).

    Returns:
        δ as a float.

    Example:
        >>> check_dp_delta(1e-6, "report")
        1e-06
    """
    return check_real("delta", delta, owner=owner, gt=0.0, lt=1.0,
                      hint="δ is the additive allowance of the (ε, δ) bound (every outcome's "
                           "probability changes at most by the factor e^ε, plus δ); agencies "
                           "use values far below 1/n, e.g. delta=1e-9")


#: Every log-δ of a Gaussian shift is reported this much above the computed value (relative
#: 1e-10 in δ): it covers the floating point error of :func:`_gdp_log_delta` (below ~1e-12 in
#: ln δ for every δ a double can hold) so that decisions taken on it are never on the unsafe side.
_LOG_MARGIN = 1e-10
_SQRT2 = math.sqrt(2.0)
_LN_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_LN_PHI0 = -_LN_SQRT_2PI
_SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)
#: (2j + 1)!! for the asymptotic series of 1 − s·M(s), j = 0..11.
_ODD_FACT = np.cumprod(np.arange(1.0, 24.0, 2.0))


def _mills(t: np.ndarray) -> np.ndarray:
    """Mills ratio M(t) = Φ(−t)/φ(t) = sqrt(π/2)·erfcx(t/√2), to rounding for every real t."""
    return _SQRT_HALF_PI * erfcx(t / _SQRT2)


def _one_minus_s_mills(s: np.ndarray) -> np.ndarray:
    """−M′(s) = 1 − s·M(s) > 0 for s ≥ 0, relative error below ~5e-14.

    Direct for s ≤ 20 (the cancellation costs a factor s²); above, the asymptotic series
    Σ_{k≥1} (−1)^{k+1}(2k−1)!!/s^{2k} truncated at 12 terms (error below 1e-20 relative).
    """
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        direct = 1.0 - s * _mills(np.minimum(s, 20.0))
        inv2 = 1.0 / (s * s)
        acc = np.zeros(np.shape(s))                 # Horner: Σ_j (−1)^j (2j+1)!!/s^{2j}
        for k in range(_ODD_FACT.size - 1, -1, -1):
            acc = ((-1.0) ** k) * _ODD_FACT[k] + acc * inv2
        series = acc * inv2
    return np.where(s <= 20.0, direct, series)


def _gdp_log_delta(t: np.ndarray, h: np.ndarray, eps: np.ndarray | float) -> np.ndarray:
    """Natural log of δ(ε) of a Gaussian shift by h > 0 standard deviations, t = ε/h − h/2.

    δ = Φ(−t) − e^ε·Φ(−t − h). Both terms are never formed when t ≥ 0: with the Mills ratio M,
    ``e^ε·φ(t + h) = φ(t)`` makes δ = φ(t)·(M(t) − M(t + h)) exactly, and the difference is the
    integral of 1 − s·M(s) over [t, t + h] (8-point Gauss–Legendre when h ≤ max(t, 1)/4, where
    it is exact to rounding; directly otherwise, where M(t + h) ≤ 0.8·M(t)). So ln δ is accurate
    to about 1e-12 absolute at every δ a double can hold, subnormal δ included, and far below.
    For t < 0 (ε < h²/2, where δ is not small against the mass below):
    δ = P(−t − h < Z < −t) − (e^ε − 1)·Φ(−t − h), the mass from erf (no cancellation); for
    h < 1e-100 the bound δ ≤ φ(0)·h is used.
    """
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        out = np.full(np.broadcast(t, h, eps).shape, -np.inf)
        t, h, eps = (np.broadcast_to(np.asarray(v, dtype=np.float64), out.shape)
                     for v in (t, h, eps))
        pos = t >= 0.0
        fin = pos & np.isfinite(t)
        if np.any(fin):
            tt, hh = t[fin], h[fin]
            short = hh <= 0.25 * np.maximum(tt, 1.0)
            diff = np.empty(tt.shape)
            if np.any(short):
                ts, hs = tt[short], hh[short]
                mid, half = ts + 0.5 * hs, 0.5 * hs
                tot = np.zeros(ts.shape)
                for x, w in zip(_GL_X, _GL_W, strict=True):
                    tot += w * _one_minus_s_mills(mid + half * x)
                diff[short] = tot * half
            far = ~short
            if np.any(far):
                tf = tt[far]
                diff[far] = _mills(tf) - _mills(tf + hh[far])
            out[fin] = -0.5 * tt * tt - _LN_SQRT_2PI + np.log(diff)
        neg = ~pos & ~np.isnan(t)
        if np.any(neg):
            tn, hn, en = t[neg], h[neg], eps[neg]
            a, zb = -tn, tn + hn                       # δ = Φ(a) − e^ε Φ(−zb), a > 0, zb > 0
            mass = 0.5 * (erf(a / _SQRT2) + erf(zb / _SQRT2))
            ln_phib = log_ndtr(-zb)
            extra = np.where(en <= 1.0, np.expm1(np.minimum(en, 1.0)) * np.exp(ln_phib),
                             np.exp(en + ln_phib) - np.exp(ln_phib))
            val = np.log(mass - extra)
            tiny = hn < 1e-100                         # δ ≤ φ(0)·h (erf of tiny numbers)
            out[neg] = np.where(tiny, _LN_PHI0 + np.log(hn), val)
        out = np.where(np.isinf(h) & (h > 0), 0.0, out)
        return np.where(h > 0.0, out, -np.inf)


def _gdp_t(mu: np.ndarray, eps: np.ndarray | float) -> np.ndarray:
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return eps / mu - 0.5 * mu


def gdp_log_delta(mu: ArrayLike, epsilon: float) -> np.ndarray:
    """Upper bound on ln δ(ε) of a Gaussian shift by μ standard deviations (vectorized over μ).

    The exact ln δ (see [`gdp_delta`][tabdp.privacy.conversions.gdp_delta]), evaluated without
    forming δ, so it stays accurate where δ underflows or is subnormal, plus a margin of 1e-10 that
    covers its rounding error: the result is never below the true ln δ.

    Args:
        mu: Shifts in units of the noise standard deviation (Δ/σ), ≥ 0.
        epsilon: ε ≥ 0.

    Returns:
        ln δ for each μ (``-inf`` where μ = 0, 0 where μ = ∞).

    Example:
        >>> round(float(gdp_log_delta(1 / 37.7, 1.0)), 3)     # δ ≈ 2.9e-314, subnormal
        -721.955
    """
    m = np.asarray(mu, dtype=np.float64)
    eps = np.float64(epsilon)
    return np.minimum(_gdp_log_delta(_gdp_t(m, eps), m, eps) + _LOG_MARGIN, 0.0)


def gdp_delta(mu: ArrayLike, epsilon: float) -> np.ndarray:
    """δ(ε) of a Gaussian shift by μ standard deviations, rounded up.

    δ = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Balle & Wang 2018, Thm 8), computed in log space
    ([`gdp_log_delta`][tabdp.privacy.conversions.gdp_log_delta]) and rounded up: never below the
    exact δ, above it by at most 1e-10 relative (two units in the last place for subnormal δ).

    Args:
        mu: Shifts in units of the noise standard deviation (Δ/σ), ≥ 0.
        epsilon: ε ≥ 0.

    Returns:
        δ for each μ (0 where μ = 0, 1 where μ = ∞).

    Example:
        >>> round(float(gdp_delta(1.0, 0.0)), 6)   # total variation of N(0,1) vs N(1,1)
        0.382925
    """
    with np.errstate(under="ignore"):
        lnd = gdp_log_delta(mu, epsilon)
        out = np.where(np.isneginf(lnd), 0.0, np.nextafter(np.exp(lnd), np.inf))
    return np.clip(out, 0.0, 1.0)


def _gdp_log_delta_vec(mu: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Upper bound on ln δ at pairs (μ, ε) (elementwise; μ > 0 finite)."""
    return _gdp_log_delta(_gdp_t(mu, eps), mu, eps) + _LOG_MARGIN


def _gdp_eps_solve(mu: np.ndarray, ln_delta: float,
                   start: np.ndarray | None = None) -> np.ndarray:
    """Smallest ε ≥ 0 with ``gdp_log_delta(μ, ε) ≤ ln δ`` for finite μ > 0, to ~1e-12 relative.

    Safeguarded Newton on ε (d ln δ/dε = −e^ε·Φ(−ε/μ − μ/2)/δ) inside a bracket whose upper end
    always verifies; the verified end is returned, so the answer is a valid ε.
    """
    def lnd(e: np.ndarray, m: np.ndarray) -> np.ndarray:
        return _gdp_log_delta(_gdp_t(m, e), m, e) + _LOG_MARGIN

    out = np.zeros(mu.shape)
    need = lnd(np.zeros(mu.shape), mu) > ln_delta
    idx = np.flatnonzero(need)
    if idx.size == 0:
        return out
    m = mu[idx]
    with np.errstate(over="ignore", invalid="ignore"):
        # the classic bound μ²/2 + μ·sqrt(2 ln(1.25/δ)) (verified below; doubled if it fails)
        hi = 0.5 * m * m + m * math.sqrt(2.0 * (math.log(1.25) - ln_delta))
    for _ in range(1100):                       # make the upper end verify (doubling)
        bad = np.isfinite(hi) & ~(lnd(hi, m) <= ln_delta)
        if not np.any(bad):
            break
        hi = np.where(bad, 2.0 * hi, hi)
    lo = np.zeros(m.shape)
    x = hi.copy() if start is None else np.clip(np.asarray(start, dtype=np.float64)[idx], 0, hi)
    x = np.where(np.isfinite(x), x, hi)
    act = np.flatnonzero(np.isfinite(hi))
    for _ in range(200):
        if act.size == 0:
            break
        xa, ma = x[act], m[act]
        with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
            ta = _gdp_t(ma, xa)
            la = _gdp_log_delta(ta, ma, xa) + _LOG_MARGIN
            ok = la <= ln_delta
            lo_a = np.where(ok, lo[act], np.maximum(lo[act], xa))
            hi_a = np.where(ok, np.minimum(hi[act], xa), hi[act])
            slope = np.exp(xa + log_ndtr(-(ta + ma)) - la)      # −d ln δ/dε
            xn = xa + (la - ln_delta) / slope
            # step a little past the Newton point (up from the unsafe side, down from the safe
            # side) so that both ends of the bracket close in on the root
            xn = xn + np.where(ok, -1.0, 1.0) * (4e-13 * np.abs(xn) + 1e-300)
        done = (hi_a - lo_a <= 1e-12 * hi_a) | (hi_a <= 0.0)
        outside = ~np.isfinite(xn) | (xn <= lo_a) | (xn >= hi_a)
        xn = np.where(outside, 0.5 * (lo_a + hi_a), xn)
        lo[act], hi[act], x[act] = lo_a, hi_a, xn
        act = act[~done]
    out[idx] = hi
    return out


def gdp_epsilon(mu: ArrayLike, delta: float) -> np.ndarray:
    """Smallest ε with `gdp_delta` (μ, ε) ≤ δ (exact (ε, δ) of a Gaussian shift).

    Vectorized safeguarded Newton on ε against the log-space δ of
    [`gdp_log_delta`][tabdp.privacy.conversions.gdp_log_delta], so every δ in (0, 1) a double can
    hold works, down to the smallest subnormal 5e-324. The result is a verified upper end of the
    search: a valid guarantee, above the exact ε by about 1e-12 relative at most (plus the 1e-10
    relative margin in δ of [`gdp_log_delta`][tabdp.privacy.conversions.gdp_log_delta]).

    Args:
        mu: Shifts in standard deviations, ≥ 0 (``inf`` allowed).
        delta: δ in (0, 1).

    Returns:
        ε for each μ (0 where μ is small enough that δ(0) ≤ δ, ``inf`` where μ = ∞ or where ε
        exceeds the double range).

    Example:
        >>> # Gaussian scale at ε=1, δ=1e-4 (docs/math/log-concave.md §3): μ = 1/3.18570299
        >>> round(float(gdp_epsilon(1 / 3.18570299, 1e-4)), 6)
        1.0
        >>> round(float(gdp_epsilon(1 / 37.7, 5e-324)), 6)   # the smallest positive double
        1.015681
    """
    d = check_dp_delta(delta, "gdp_epsilon")
    m = np.atleast_1d(np.asarray(mu, dtype=np.float64)).astype(np.float64)
    shape = np.shape(np.asarray(mu))
    out = np.zeros(m.shape)
    finite = np.isfinite(m) & (m > 0)
    out[np.isinf(m)] = np.inf
    if np.any(finite):
        out[finite] = _gdp_eps_solve(m[finite], math.log(d))
    return out.reshape(shape) if shape else out.reshape(())


def _cks(rho: np.ndarray, alpha: np.ndarray, log_inv_delta: float) -> np.ndarray:
    am1 = alpha - 1.0
    return alpha * rho + (log_inv_delta + am1 * np.log1p(-1.0 / alpha) - np.log(alpha)) / am1


_BLOCK = 1 << 15
#: Newton steps of :func:`_cks_min` from the plain start, for ρ outside its table (converged to
#: an ulp or two after 6 on the tests' grid).
_CKS_STEPS = 8
#: `_cks_table`'s grid: ln ρ from ln L + the first to ln L + the second, in steps of `_CKS_H`
#: (1/8: the linear interpolation is within about 2e-4 of the root, which two Newton steps
#: take to the last ulps; a table is built per δ, so its cost, about 870 points, counts where
#: the values come with many distinct δ: `epsilon_at` converts per remaining δ; review r68).
_CKS_SPAN = (-82.0, 26.0)
_CKS_H = 1.0 / 8
#: Newton steps of a table's roots from their start (`_cks_table`: converged to the last ulp
#: after 8 on every δ of the tests).
_CKS_TABLE_STEPS = 10
#: Newton steps of :func:`_cks_min` from the table's interpolated start (converged: one step
#: leaves t within about 5e-12 of the root, two within a few ulps).
_CKS_REFINE = 2
#: zcdp_epsilon rounds every answer up by this much relative to the sum of the magnitudes of
#: the bound's terms (float error: a few ulps of that sum, ~1e-15).
_ZCDP_ROUND_UP = 1e-13


def _cks_newton(rr: np.ndarray, lid: float, t: np.ndarray, steps: int, lo: float,
                hi: float) -> np.ndarray:
    """``steps`` Newton steps on h(t) = ρe^{2t} + ln(1 + e^t) − L, each clipped to [lo, hi]."""
    for _ in range(steps):
        x = np.exp(t)
        h = rr * x * x + np.log1p(x) - lid
        slope = 2.0 * rr * x * x + x / (1.0 + x)
        t = np.clip(t - h / slope, lo, hi)
    return t


@functools.lru_cache(maxsize=256)
def _cks_table(lid: float) -> tuple[float, np.ndarray]:
    """The roots of h on a fixed grid of ln ρ (`_CKS_SPAN`, `_CKS_H`), not clipped to [−12, 40].

    Returns the grid's first ln ρ and the root t at each point (`_CKS_TABLE_STEPS` Newton
    steps within [−80, 80], converged to the last ulp). Each starts where h ≥ 0, at the
    smaller of the roots of its two terms alone: ρx² = L (t = ln sqrt(L/ρ), the plain start)
    and ln(1 + x) = L (t = ln(e^L − 1), where the plain start is far above the root: ρ large
    and L small), from where Newton's method moves monotonically down to the root. The root
    is a smooth function of ln ρ, so a linear interpolation between two points is within
    about 2e-4 of it; `_cks_min` takes that as its start. The table depends on L alone: a
    value's start never depends on the other values passed with it. A table is built once
    per δ (about 870 points; the last 256 are kept).

    Example:
        >>> lo, t = _cks_table(-math.log(1e-9))
        >>> t.size, round(lo, 3)
        (866, -78.969)
    """
    lo = math.log(lid) + _CKS_SPAN[0]
    n = int(round((_CKS_SPAN[1] - _CKS_SPAN[0]) / _CKS_H)) + 2
    u = lo + _CKS_H * np.arange(n)
    # ln(e^L − 1) = L + ln(1 − e^−L), without overflow for L up to 745 (δ subnormal)
    t_log = lid + math.log(-math.expm1(-lid))
    start = np.minimum(0.5 * (math.log(lid) - u), t_log)
    with np.errstate(over="ignore", divide="ignore"):
        t = _cks_newton(np.exp(u), lid, start, _CKS_TABLE_STEPS, -80.0, 80.0)
    t.flags.writeable = False
    return lo, t


def _cks_min(rr: np.ndarray, lid: float, slack: float = 0.0) -> np.ndarray:
    """Minimum over α of the CKS bound, capped by the classic bound.

    With ``slack`` > 0 the CKS value is rounded up by ``slack`` times the sum of its terms'
    magnitudes (and the classic one by ``slack`` relative): a valid bound despite float error.

    With x = α − 1 the bound is f = αρ + L/x + ln(1 − 1/α) − ln(α)/x (L = ln 1/δ), whose
    derivative in α is ρ − (L − ln α)/x²: f is smallest where h = ρx² + ln(1 + x) − L = 0.
    In t = ln x, h is increasing and convex (h' = 2ρx² + x/(1 + x), h'' = 4ρx² + x/(1 + x)²).
    Where ln ρ is inside `_cks_table`'s grid, the root is started from the table's linear
    interpolation and refined by `_CKS_REFINE` Newton steps (quadratic convergence from
    within about 2e-4: the same t to a few ulps as the plain solve, in about 40% of its time),
    then clipped to [−12, 40] (the clipped plain solve converges to the clipped root: the same
    point). Elsewhere, Newton's method is started where h ≥ 0 (t₀ = ln sqrt(L/ρ):
    h(t₀) = ln(1 + x₀) ≥ 0) and moves monotonically down to the root, quadratically near it,
    in `_CKS_STEPS` steps kept in [−12, 40] (the domain of the earlier search). Any α gives a
    valid bound: the solve only affects tightness. About 15 times faster than the
    golden-section search it replaced first (about 60 steps with three transcendental
    functions each), with the same answers to a few ulps where ε is not near 0 (near 0 the
    terms cancel, and the answers agree to a few ulps of the terms' sum).
    """
    # ρ near the top of the double range overflows to ε = inf, the documented answer: no
    # warning (ρ is confidential; errstate is per thread, so it is set here)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        classic = rr + 2.0 * np.sqrt(rr * lid)
        lr = np.log(rr)
        lo, tab = _cks_table(lid)
        pos = (lr - lo) * (1.0 / _CKS_H)
        cell = np.floor(pos)
        inside = (cell >= 0.0) & (cell < tab.size - 1)  # NaN (never here) falls outside
        i = np.where(inside, cell, 0.0).astype(np.intp)
        frac = pos - i
        t = tab[i] + frac * (tab[i + 1] - tab[i])
        t = np.clip(_cks_newton(rr, lid, t, _CKS_REFINE, -80.0, 80.0), -12.0, 40.0)
        if not inside.all():
            out = ~inside
            t[out] = _cks_newton(rr[out], lid, np.minimum(0.5 * (math.log(lid) - lr[out]), 40.0),
                                 _CKS_STEPS, -12.0, 40.0)
        alpha = 1.0 + np.exp(t)
        am1 = alpha - 1.0
        # _cks's operations, with its logarithms kept for the round-up below
        log_frac, log_alpha = np.log1p(-1.0 / alpha), np.log(alpha)
        bound = alpha * rr + (lid + am1 * log_frac - log_alpha) / am1
        if slack:
            # the float error of the bound is a few ulps of the sum of its terms' magnitudes,
            # which near ε = 0 is far above ε itself (the terms cancel): round up by that sum
            terms = alpha * rr + (lid - am1 * log_frac + log_alpha) / am1
            bound = bound + slack * terms
            classic = classic * (1.0 + slack)
        return np.maximum(np.minimum(bound, classic), 0.0)


def zcdp_epsilon(rho: ArrayLike, delta: float) -> np.ndarray:
    """ε such that ρ-zCDP implies (ε, δ)-DP (Canonne–Kamath–Steinke conversion).

    For each ρ, ε = min over Rényi orders α > 1 of
    α·ρ + (ln(1/δ) + (α−1)·ln(1−1/α) − ln α)/(α−1), found by Newton's method on the condition
    for the minimum (in ln(α−1)); any α gives a valid bound, so the solve only affects
    tightness. The result is never above the classic ρ + 2·sqrt(ρ·ln(1/δ)) (times 1 + 1e-13).
    Every answer is rounded up by 1e-13 times the sum of the magnitudes of the bound's terms,
    which covers the rounding error of the float evaluation even near ε = 0, where the terms
    cancel (a relative round-up of ε would not). ln(1/δ) is taken as −ln δ, so every δ a
    double can hold works, down to the smallest subnormal 5e-324.

    Args:
        rho: zCDP losses ≥ 0 (``inf`` allowed).
        delta: δ in (0, 1).

    Returns:
        ε for each ρ (0 where ρ = 0, ``inf`` where ρ = ∞).

    Example:
        >>> e = float(zcdp_epsilon(0.5, 1e-6))
        >>> e < 0.5 + 2 * math.sqrt(0.5 * math.log(1e6))
        True
        >>> round(float(zcdp_epsilon(0.5, 5e-324)), 6)      # the smallest positive double
        38.964974
    """
    d = check_dp_delta(delta, "zcdp_epsilon")
    r = np.asarray(rho, dtype=np.float64)
    shape = r.shape
    r = np.atleast_1d(r).astype(np.float64)
    out = np.zeros(r.shape)
    out[np.isinf(r)] = np.inf
    ok = np.isfinite(r) & (r > 0)
    if np.any(ok):
        rr = r[ok]
        res = np.empty(rr.shape)
        lid = -math.log(d)   # not log(1/d): 1/d overflows for subnormal d

        def work(lo: int, hi: int) -> None:
            # cache-sized blocks: the solve makes ~80 elementwise passes over its arrays
            for b in range(lo, hi, _BLOCK):
                e = min(b + _BLOCK, hi)
                res[b:e] = _cks_min(rr[b:e], lid, _ZCDP_ROUND_UP)

        n = rr.shape[0]
        workers = min(work_threads(), 8)
        if n < 4 * _BLOCK or workers == 1:
            work(0, n)
        else:  # numpy releases the GIL in elementwise code
            bounds = np.linspace(0, n, workers + 1).astype(int)
            with work_pool(workers) as pool:
                list(pool.map(work, bounds[:-1], bounds[1:]))
        out[ok] = res   # rounded up in _cks_min by the float error of the evaluation
    return out.reshape(shape)
