"""High-precision references (mpmath) for the (ε, δ) tests (imported by the test modules).

True hockey-stick divergences δ(ε) of additive noise at b = Δ/scale: the Gaussian of Balle &
Wang (2018, Thm 8), the Laplace and Logistic closed forms (seed 004 Thms 3, 4), Subbotin_r by
the crossing-point criterion of seed 004 Lemma 1, and ln δ of the zCDP conversion of Canonne,
Kamath & Steinke (2020, Prop. 12).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import mpmath as mp

__all__ = ["gauss_delta", "laplace_delta", "logistic_delta", "subbotin_delta", "cks_log_delta"]


def _dps80(f: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``f`` at 80 significant digits (at least), leaving mpmath's global precision alone."""
    @functools.wraps(f)
    def wrapped(*args: Any) -> Any:
        with mp.workdps(max(80, mp.mp.dps)):
            return +f(*args)
    return wrapped

# -------------------------------------------------------------------------------------------------
@_dps80
def gauss_delta(mu: float, eps: float) -> mp.mpf:
    """True δ(ε) of a Gaussian shift by μ standard deviations (Balle & Wang 2018, Thm 8).

    The two terms agree to about |log10 μ| + 330 digits in the worst case (tiny μ, subnormal
    δ): the working precision covers that.
    """
    with mp.workdps(80 + max(0, int(-math.log10(mu))) + 340):
        m, e = mp.mpf(mu), mp.mpf(eps)
        if e == 0:
            return mp.erf(m / (2 * mp.sqrt(2)))
        return +(mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2))


@_dps80
def laplace_delta(b: float, eps: float) -> mp.mpf:
    b, e = mp.mpf(b), mp.mpf(eps)
    return 1 - mp.exp((e - b) / 2) if b > e else mp.mpf(0)


@_dps80
def logistic_delta(b: float, eps: float) -> mp.mpf:
    b, e = mp.mpf(b), mp.mpf(eps)
    return (1 - mp.exp((e - b) / 2)) ** 2 / -mp.expm1(-b) if b > e else mp.mpf(0)


@_dps80
def subbotin_delta(b: float, eps: float, r: float) -> mp.mpf:
    """True δ(ε) of Subbotin_r noise at b = Δ/scale (seed 004 Lemma 1), by bisection on u."""
    b, e, r = mp.mpf(b), mp.mpf(eps), mp.mpf(r)

    def sf(x: mp.mpf) -> mp.mpf:
        if x < 0:
            return 1 - sf(-x)
        return mp.gammainc(1 / r, x**r / r, mp.inf, regularized=True) / 2

    def g(u: mp.mpf) -> mp.mpf:
        return (abs(u) ** r - abs(u - b) ** r) / r

    if e == 0:
        return mp.gammainc(1 / r, 0, (b / 2) ** r / r, regularized=True)
    lo, hi = b / 2, 2 * b + (e / b) ** (1 / (r - 1)) + 10
    for _ in range(500):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if g(mid) < e else (lo, mid)
    u = (lo + hi) / 2
    return sf(u - b) - mp.exp(e) * sf(u)


@_dps80
def cks_log_delta(rho: float, eps: float) -> mp.mpf:
    """Natural log of δ of the CKS conversion at ε: min over α > 1 (golden section on ln(α − 1))."""
    rho, eps = mp.mpf(rho), mp.mpf(eps)

    def f(x: mp.mpf) -> mp.mpf:
        a = 1 + mp.exp(x)
        return (a - 1) * (a * rho - eps) + (a - 1) * mp.log(1 - 1 / a) - mp.log(a)

    lo, hi, g = mp.mpf(-40), mp.mpf(80), (mp.sqrt(5) - 1) / 2
    c, d = hi - g * (hi - lo), lo + g * (hi - lo)
    fc, fd = f(c), f(d)
    for _ in range(250):
        if fc < fd:
            hi, d, fd = d, c, fc
            c = hi - g * (hi - lo)
            fc = f(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + g * (hi - lo)
            fd = f(d)
    return min(fc, fd)
