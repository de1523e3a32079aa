"""Conversions between privacy guarantees: Gaussian DP, zCDP and (ε, δ)-DP.

All functions are vectorized over their first argument and data-independent (they apply to public
policy values as well as to confidential per-record losses).

* :func:`gdp_delta` / :func:`gdp_epsilon`: the exact (ε, δ) profile of a Gaussian shift of
  μ standard deviations (Balle & Wang 2018; Dong, Roth & Su 2019). A mechanism whose output is
  a Gaussian shifted by at most μ·σ — the Gaussian mechanism, and the transformation mechanisms
  in transformed space — satisfies exactly these (ε, δ) pairs, and compositions of such
  mechanisms are again a Gaussian shift with μ² = Σ μᵢ² (= 2 Σ ρᵢ).
* :func:`zcdp_epsilon`: the (ε, δ) implied by ρ-zCDP alone, via the conversion of Canonne,
  Kamath & Steinke (2020, Prop. 12) optimized over the Rényi order, never worse than the classic
  ρ + 2·sqrt(ρ·ln(1/δ)) (Bun & Steinke 2016, Prop. 1.3).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_ndtr, ndtr

from tabdp._validation import check_real

__all__ = ["gdp_delta", "gdp_epsilon", "zcdp_epsilon", "check_dp_delta"]


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
                      hint="δ is the probability mass allowed to escape the ε bound; agencies "
                           "use values far below 1/n, e.g. delta=1e-9")


def gdp_delta(mu: ArrayLike, epsilon: float) -> np.ndarray:
    """Exact δ(ε) of a Gaussian shift by μ standard deviations.

    δ = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2), the second term evaluated in log space.

    Args:
        mu: Shifts in units of the noise standard deviation (Δ/σ), ≥ 0.
        epsilon: ε ≥ 0.

    Returns:
        δ for each μ (0 where μ = 0, 1 where μ = ∞).

    Example:
        >>> round(float(gdp_delta(1.0, 0.0)), 6)   # total variation of N(0,1) vs N(1,1)
        0.382925
    """
    m = np.asarray(mu, dtype=np.float64)
    eps = float(epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = -eps / m + m / 2.0
        b = -eps / m - m / 2.0
        out = ndtr(a) - np.exp(eps + log_ndtr(b))
    out = np.where(m <= 0.0, 0.0, out)
    out = np.where(np.isinf(m), 1.0, out)
    return np.clip(out, 0.0, 1.0)


def gdp_epsilon(mu: ArrayLike, delta: float) -> np.ndarray:
    """Smallest ε with :func:`gdp_delta` (μ, ε) ≤ δ (exact (ε, δ) of a Gaussian shift).

    Vectorized bisection on ε (δ(ε) is decreasing); the result is rounded up, so it is a valid
    guarantee, tight to about 1e-12 relative.

    Args:
        mu: Shifts in standard deviations, ≥ 0 (``inf`` allowed).
        delta: δ in (0, 1).

    Returns:
        ε for each μ (0 where μ is small enough that δ(0) ≤ δ, ``inf`` where μ = ∞).

    Example:
        >>> # The Gaussian scale of seed 004 at ε=1, δ=1e-4 (MATH.md §4.3): μ = 1/3.18570299
        >>> round(float(gdp_epsilon(1 / 3.18570299, 1e-4)), 6)
        1.0
    """
    d = check_dp_delta(delta, "gdp_epsilon")
    m = np.atleast_1d(np.asarray(mu, dtype=np.float64)).astype(np.float64)
    shape = np.shape(np.asarray(mu))
    out = np.zeros(m.shape)
    finite = np.isfinite(m) & (m > 0)
    out[np.isinf(m)] = np.inf
    if np.any(finite):
        mm = m[finite]
        need = gdp_delta(mm, 0.0) > d
        lo = np.zeros(mm.shape)
        # An upper bracket: the classic bound eps = mu^2/2 + mu*sqrt(2 ln(1.25/δ)) is valid.
        hi = mm * mm / 2.0 + mm * math.sqrt(2.0 * math.log(1.25 / d)) + 1.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            ok = _gdp_delta_vec(mm, mid) <= d
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid)
            if np.all(hi - lo <= 1e-13 * np.maximum(hi, 1e-300)):
                break
        out[finite] = np.where(need, hi, 0.0)
    return out.reshape(shape) if shape else out.reshape(())


def _gdp_delta_vec(mu: np.ndarray, eps: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = -eps / mu + mu / 2.0
        b = -eps / mu - mu / 2.0
        return ndtr(a) - np.exp(eps + log_ndtr(b))


def _cks(rho: np.ndarray, alpha: np.ndarray, log_inv_delta: float) -> np.ndarray:
    am1 = alpha - 1.0
    return alpha * rho + (log_inv_delta + am1 * np.log1p(-1.0 / alpha) - np.log(alpha)) / am1


_BLOCK = 1 << 15


def _cks_min(rr: np.ndarray, lid: float) -> np.ndarray:
    """min over α of the CKS bound (golden section on ln(α − 1) over [−12, 40]), capped by the
    classic bound. Any α gives a valid bound: the search only affects tightness. 60 steps
    leave the order within 52·0.618**60 ≈ 1e-11 of the optimum in ln(α − 1), where the bound
    is flat to second order (a relative excess far below 1e-15)."""
    classic = rr + 2.0 * np.sqrt(rr * lid)
    a = np.full(rr.shape, -12.0)
    b = np.full(rr.shape, 40.0)
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c = b - g * (b - a)
    e = a + g * (b - a)
    fc = _cks(rr, 1.0 + np.exp(c), lid)
    fe = _cks(rr, 1.0 + np.exp(e), lid)
    for _ in range(60):
        left = fc < fe  # the minimum lies in [a, e]
        b = np.where(left, e, b)
        a = np.where(left, a, c)
        c_next = np.where(left, b - g * (b - a), e)
        e_next = np.where(left, c, a + g * (b - a))
        fresh = _cks(rr, 1.0 + np.exp(np.where(left, c_next, e_next)), lid)
        fc, fe = np.where(left, fresh, fe), np.where(left, fc, fresh)
        c, e = c_next, e_next
    return np.maximum(np.minimum(np.minimum(fc, fe), classic), 0.0)


def zcdp_epsilon(rho: ArrayLike, delta: float) -> np.ndarray:
    """ε such that ρ-zCDP implies (ε, δ)-DP (Canonne–Kamath–Steinke conversion).

    For each ρ, ε = min over Rényi orders α > 1 of
    α·ρ + (ln(1/δ) + (α−1)·ln(1−1/α) − ln α)/(α−1), found by golden-section search on ln(α−1);
    any α gives a valid bound, so the search only affects tightness. The result is never above
    the classic ρ + 2·sqrt(ρ·ln(1/δ)).

    Args:
        rho: zCDP losses ≥ 0 (``inf`` allowed).
        delta: δ in (0, 1).

    Returns:
        ε for each ρ (0 where ρ = 0, ``inf`` where ρ = ∞).

    Example:
        >>> e = float(zcdp_epsilon(0.5, 1e-6))
        >>> e < 0.5 + 2 * math.sqrt(0.5 * math.log(1e6))
        True
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
        lid = math.log(1.0 / d)

        def work(lo: int, hi: int) -> None:
            # cache-sized blocks: the search makes ~150 elementwise passes over its arrays
            for b in range(lo, hi, _BLOCK):
                e = min(b + _BLOCK, hi)
                res[b:e] = _cks_min(rr[b:e], lid)

        n = rr.shape[0]
        workers = min(os.cpu_count() or 1, 8)
        if n < 4 * _BLOCK or workers == 1:
            work(0, n)
        else:  # numpy releases the GIL in elementwise code
            bounds = np.linspace(0, n, workers + 1).astype(int)
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(work, bounds[:-1], bounds[1:]))
        out[ok] = res
    return out.reshape(shape)
