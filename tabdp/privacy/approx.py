"""Exact (ε, δ) calibration of symmetric log-concave noise ([Vin22], docs/math/log-concave.md).

The mechanism ``q + s·X`` with X from a symmetric log-concave law ``f = e^{−ψ}`` is (ε, δ)-DP at
sensitivity Δ **iff** ``S((t−Δ)/s) − e^ε·S(t/s) ≤ δ`` where ``t/s`` is the crossing point of the
log-density ratio, ``ψ(t/s) − ψ((t−Δ)/s) = ε`` ([Vin22] Lemma 1). The left side is the
hockey-stick divergence δ(ε) of the two neighbouring outputs; it depends on Δ and s only through
``b = Δ/s`` and decreases in s, so the minimal scale is linear in Δ (Lemma 2) and is found by a
one-dimensional search.

Families (``family=``, scale parameterization as in docs/math/log-concave.md):

* ``"laplace"`` — Laplace(scale); closed form s = Δ/(ε − 2·ln(1−δ)) (Thm 3);
* ``"logistic"`` — Logistic(scale); closed form of Thm 4;
* ``"gaussian"`` — N(0, σ²), ``scale = σ``; the analytic condition of Balle & Wang (Thm 5);
* ``"subbotin"`` — scale times a standard Subbotin_r variable, r ≥ 1 (``r=`` required); r = 1 is
  the Laplace and r = 2 the Gaussian case, other r the algorithm of docs/math/log-concave.md §2.

Functions:

* [`min_scale`][tabdp.privacy.approx.min_scale] — the smallest private scale for (ε, δ) at Δ;
* [`epsilon_for_scale`][tabdp.privacy.approx.epsilon_for_scale] — the exact ε(Δ) at δ of a given
  scale, vectorized over an array of sensitivities (the per-record ledger calls it for millions of
  records);
* [`delta_for_scale`][tabdp.privacy.approx.delta_for_scale] — the exact δ(ε) (hockey-stick
  divergence), vectorized;
* `subbotin_mse` and
  [`choose_subbotin_r`][tabdp.privacy.approx.choose_subbotin_r] — the choice of r of [Vin22] eq.
  (5): ``r* = argmin_r s_r(ε, δ, Δ_r)²·Var_r``. (For vector releases it rests on [Vin22] Thm 9,
  which is false for r ≠ 2; see the warning in
  [`choose_subbotin_r`][tabdp.privacy.approx.choose_subbotin_r].)

Every answer is rounded toward privacy: scales up, ε up, δ(ε) up. Edge of floating point:

* Gaussian (and Subbotin r = 2): every δ in (0, 1) a double can hold, down to 5e-324. δ(ε) is
  evaluated as ln δ ([`gdp_log_delta`][tabdp.privacy.conversions.gdp_log_delta], exact to ~1e-12,
  used with a 1e-10 margin), so subnormal δ are as exact as any other.
* Laplace, Logistic: exact closed forms for every δ, rounded up by a bound on their float
  error (a few units in the last place); the pure case δ = 0 keeps the correctly rounded 1/ε.
* Subbotin r ∉ {1, 2}: δ ≥ [`DELTA_FLOOR_GENERIC`][tabdp.privacy.approx.DELTA_FLOOR_GENERIC] =
  1e-300 (below it [`InvalidParameterError`][tabdp.exceptions.InvalidParameterError] names the
  floor). ε, the minimal scale and δ(ε) (above 1e-290) are *certified* in Arb ball arithmetic
  (python-flint): the float algorithm gives a start, Newton steps on the exact δ(ε) refine it,
  and a value is kept only where Arb proves δ(ε) ≤ δ (``_ArbHockey``, ``_eps_certified``):
  never below the exact ε, within ~3e-10 of it.
* Every ε is a function of its own Δ/scale and the public parameters only, never of the other
  values computed with it.
* A minimal scale beyond the double range raises
  [`CalibrationError`][tabdp.exceptions.CalibrationError].

Example:
    >>> round(min_scale("gaussian", 1.0, 1e-4), 6), round(min_scale("subbotin", 1.0, 1e-4, r=3), 6)
    (3.185703, 5.877443)
    >>> round(float(epsilon_for_scale("logistic", 0.98421439, 1e-4)), 6)
    1.0
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import erf, erfc, gammaincc, gammainccinv, log_ndtr

from tabdp._lazy_scipy import brentq
from tabdp._validation import check_real
from tabdp.exceptions import CalibrationError, InvalidParameterError
from tabdp.noise.logconcave import (
    check_subbotin_r,
    subbotin_center_mass,
    subbotin_center_quantile,
    subbotin_log_norm,
    subbotin_variance,
)
from tabdp.privacy.conversions import (
    _gdp_eps_solve,
    gdp_delta,
    gdp_log_delta,
)

__all__ = [
    "FAMILIES",
    "DELTA_FLOOR_GENERIC",
    "min_scale",
    "epsilon_for_scale",
    "delta_for_scale",
    "subbotin_mse",
    "choose_subbotin_r",
    "SubbotinChoice",
    "SubbotinCandidate",
    "DEFAULT_R_GRID",
]

#: Noise families known to the calibration functions.
FAMILIES: tuple[str, ...] = ("laplace", "logistic", "gaussian", "subbotin")

#: The grid of [Vin22] §4.1: r = 1, 1.5, 2, …, 14.
DEFAULT_R_GRID: tuple[float, ...] = tuple(1.0 + 0.5 * i for i in range(27))

_SQRT2 = math.sqrt(2.0)
#: The scale search stays within exp(±709): normal doubles with a finite reciprocal.
_LN_SCALE_MAX = 709.0
#: Unit roundoff bound used to round closed forms toward privacy (2^-52).
_U = 2.0**-52
_GL_X, _GL_W = np.polynomial.legendre.leggauss(12)
#: Above this ε the bracket bound b + S⁻¹(δ) is returned (valid, within ~0.1 %; see _eps_bound).
_EPS_HUGE = 1e6
#: Smallest δ accepted for Subbotin_r with r ∉ {1, 2} (the generic algorithm works with δ itself,
#: whose tails lose their relative accuracy as they approach the subnormal range ~2.2e-308).
#: Laplace, Logistic and the Gaussian have no floor: every δ > 0 a double can hold works.
DELTA_FLOOR_GENERIC = 1e-300


# -------------------------------------------------------------------------------------------------
# validation
# -------------------------------------------------------------------------------------------------
def _family(family: Any, r: Any, owner: str) -> tuple[str, float | None]:
    """Validate ``family`` and ``r``; return the lower-cased family and r (float or None)."""
    if not isinstance(family, str) or family.lower() not in FAMILIES:
        close = difflib.get_close_matches(str(family).lower(), FAMILIES, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InvalidParameterError(
            f"{owner}: unknown noise family {family!r}; allowed: {', '.join(FAMILIES)}.\n"
            f"Hint: {hint}e.g. {owner}('subbotin', ..., r=4.0) or {owner}('gaussian', ...)")
    fam = family.lower()
    if fam == "subbotin":
        if r is None:
            raise InvalidParameterError(
                f"{owner}: family 'subbotin' needs the shape r (r >= 1); got r=None.\n"
                "Hint: pass r, e.g. r=4.0 (r=1 is Laplace, r=2 is Gaussian); "
                "choose_subbotin_r() evaluates the MSE criterion of Vinterbo 2022 eq. (5).")
        return fam, check_subbotin_r(r, owner)
    if r is not None:
        raise InvalidParameterError(
            f"{owner}: r is only used with family='subbotin'; got family={fam!r} and r={r!r}.\n"
            f"Hint: drop r, or use family='subbotin' with r={r!r}.")
    return fam, None


def _kind(fam: str, r: float | None) -> str:
    """The closed form or algorithm used: laplace, logistic, gaussian or generic (Subbotin)."""
    if fam == "subbotin":
        assert r is not None
        if r == 1.0:
            return "laplace"
        if r == 2.0:
            return "gaussian"
        return "generic"
    return fam


def _check_delta(delta: Any, owner: str) -> float:
    return check_real("delta", delta, owner=owner, ge=0.0, lt=1.0,
                      hint="delta is the probability allowed to escape the eps bound, in [0, 1); "
                           "agencies use values far below 1/n, e.g. delta=1e-9")


def check_generic_floor(delta: float, r: float | None, owner: str) -> None:
    """Refuse 0 < δ < DELTA_FLOOR_GENERIC for Subbotin_r with r ∉ {1, 2}.

    Args:
        delta: The δ of (ε, δ)-DP.
        r: The Subbotin shape (named in the message).
        owner: The caller, named in the message.

    Raises:
        InvalidParameterError: If ``0 < delta < DELTA_FLOOR_GENERIC``.

    Example:
        >>> check_generic_floor(1e-9, 3.0, "Subbotin")   # fine: returns None
    """
    if 0.0 < delta < DELTA_FLOOR_GENERIC:
        raise InvalidParameterError(
            f"{owner}: delta={delta!r} is below {DELTA_FLOOR_GENERIC:g}, the smallest delta "
            f"supported for Subbotin noise with r={r!r} (r not 1 or 2): its calibration works "
            "with delta itself, which loses its relative accuracy near the subnormal range of "
            f"floating point, so no safe answer is guaranteed below {DELTA_FLOOR_GENERIC:g}.\n"
            f"Hint: use delta >= {DELTA_FLOOR_GENERIC:g}, or a family that is exact for every "
            "delta > 0: 'gaussian' (r=2), 'laplace' (r=1) or 'logistic'.")


def _check_epsilon(epsilon: Any, owner: str) -> float:
    return check_real("epsilon", epsilon, owner=owner, ge=0.0,
                      hint="epsilon is the privacy-loss bound, a finite number >= 0, e.g. 1.0")


def _check_scale(scale: Any, owner: str) -> float:
    return check_real("scale", scale, owner=owner, gt=0.0,
                      hint="scale is the noise scale (Gaussian: sigma; Subbotin: the factor "
                           "multiplying a standard Subbotin_r variable), e.g. scale=2.0")


def _sensitivities(sensitivity: ArrayLike, owner: str) -> np.ndarray:
    """Per-record sensitivities as a float array (≥ 0; ``inf`` allowed, NaN refused)."""
    try:
        d = np.asarray(sensitivity, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InvalidParameterError(
            f"{owner}: sensitivity must be a number or an array of numbers >= 0; got "
            f"{sensitivity!r} ({err}).\nHint: pass e.g. sensitivity=1.0 or an array of "
            "per-record sensitivities.") from None
    bad = ~(d >= 0.0)
    if np.any(bad):
        first = float(d[bad].ravel()[0])
        raise InvalidParameterError(
            f"{owner}: sensitivities must be >= 0 (NaN not allowed); got {int(bad.sum())} bad "
            f"value(s), e.g. {first!r}.\nHint: pass absolute contributions |c|, and resolve NaN "
            "before accounting.")
    return d


def _no_pure(fam: str, r: float | None, owner: str) -> InvalidParameterError:
    what = "Gaussian noise" if fam == "gaussian" else f"Subbotin noise with r={r!r} > 1"
    return InvalidParameterError(
        f"{owner}: delta=0 is impossible for {what}: its log-density ratio is unbounded, so it "
        "has no pure (eps, 0) guarantee and the minimal scale grows without bound as delta -> 0 "
        "(Vinterbo 2022 Thm 6).\nHint: use delta > 0 (e.g. delta=1e-9), or a family with pure DP: "
        "'laplace', 'logistic' or 'subbotin' with r=1.")


# -------------------------------------------------------------------------------------------------
# the standard Subbotin_r law, r > 1 (r = 2 evaluated with erf/erfc/log_ndtr)
# -------------------------------------------------------------------------------------------------
class _Law:
    """Tails of the standard Subbotin_r law for the generic algorithm (internal)."""

    def __init__(self, r: float) -> None:
        self.r = r
        self.a = 1.0 / r
        self.gauss = r == 2.0
        self.logc = subbotin_log_norm(r)

    def _w(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return x**self.r / self.r

    def sf(self, x: np.ndarray) -> np.ndarray:
        """S(x) = P(X > x) for x ≥ 0."""
        if self.gauss:
            return 0.5 * erfc(x / _SQRT2)
        return 0.5 * gammaincc(self.a, self._w(x))

    def logsf(self, x: np.ndarray) -> np.ndarray:
        """Log survival ln S(x) for x ≥ 0, accurate far beyond the underflow of S itself.

        For w = x^r/r > 200, ``ln Q(a, w) = −w + a·ln w − ln CF − lnΓ(a)`` with the continued
        fraction of Γ(a, w) evaluated backwards at depth 40 (converged to rounding for w > 200).
        """
        if self.gauss:
            return log_ndtr(-x)
        w = self._w(x)
        far = (w > 200.0) & np.isfinite(w)     # w = ∞ (x^r overflows): ln S = −∞ below
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.log(0.5 * gammaincc(self.a, np.where(far, 0.0, w)))
            if np.any(far):
                wf = w[far]
                a = self.a
                t = wf + 81.0 - a
                for n in range(40, 0, -1):
                    t = wf + (2 * n - 1) - a - n * (n - a) / t
                out[far] = (-wf + a * np.log(wf) - np.log(t) - math.lgamma(a)
                            + math.log(0.5))
            out[np.isinf(w)] = -np.inf
        return out

    def half_p(self, x: np.ndarray) -> np.ndarray:
        """P(0 < X < x) = ½·P(1/r, x^r/r) for x ≥ 0 (accurate for small x)."""
        if self.gauss:
            return 0.5 * erf(x / _SQRT2)
        return 0.5 * subbotin_center_mass(self.r, x)

    def mass(self, u: np.ndarray, b: np.ndarray) -> np.ndarray:
        """P(u − b < X < u) for 0 ≤ u − b on a short interval, by 12-point Gauss–Legendre.

        The width is b itself, not ``u − (u − b)``: for b far below the rounding of u that
        difference loses b, and with it the whole mass.
        """
        mid, half = u - 0.5 * b, 0.5 * b
        tot = np.zeros(np.shape(mid))
        with np.errstate(over="ignore"):
            for t, w in zip(_GL_X, _GL_W, strict=True):
                x = mid + half * t
                tot += w * np.exp(-(x**self.r) / self.r - self.logc)
        return tot * half

    def isf(self, q: float) -> float:
        """The x ≥ 0 with S(x) = q, for q in (0, ½]."""
        if q >= 0.5:
            return 0.0
        return float((self.r * gammainccinv(self.a, 2.0 * q)) ** self.a)

    def b_zero(self, delta: float) -> float:
        """The b = Δ/s at which the total variation P(1/r, (b/2)^r/r) equals δ (ε = 0)."""
        return float(2.0 * subbotin_center_quantile(self.r, delta))


@functools.lru_cache(maxsize=64)
def _law(r: float) -> _Law:
    return _Law(r)


def _g(u: np.ndarray, b: np.ndarray, r: float) -> np.ndarray:
    """Log-density ratio ψ(u) − ψ(u − b) = (|u|^r − |u−b|^r)/r for u ≥ b/2 (no cancellation)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        big = u >= b
        # u >= b: u^r/r·(1 − (1 − b/u)^r)
        fac = -np.expm1(r * np.log1p(-np.where(big, b / u, 0.0)))
        ur = u**r
        direct = ur / r * fac
        logform = np.exp(r * np.log(u) - math.log(r) + np.log(fac))
        out_big = np.where(np.isfinite(ur), direct, logform)
        out_small = (ur - np.abs(b - u) ** r) / r
        return np.where(big, out_big, out_small)


def _gprime(u: np.ndarray, b: np.ndarray, r: float) -> np.ndarray:
    """Derivative of `_g` in u: u^{r−1} − sign(u−b)|u−b|^{r−1}."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        big = u >= b
        um = u ** (r - 1.0)
        out_big = um * -np.expm1((r - 1.0) * np.log1p(-np.where(big, b / u, 0.0)))
        out_small = um + np.abs(b - u) ** (r - 1.0)
        return np.where(big, out_big, out_small)


def _hockey(u: np.ndarray, b: np.ndarray, e: np.ndarray | float,
            law: _Law) -> tuple[np.ndarray, np.ndarray]:
    """``S(u − b) − e^e·S(u)`` and ``ln S(u)`` (u > 0), evaluated without cancellation.

    * u < b: ``S(u−b) = ½ + ½P(b−u)`` and ``e^e S(u) = ½ − ½P(u) + (e^e − 1)S(u)``, so the
      difference is ``½P(b−u) + ½P(u) − expm1(e)·S(u)``.
    * u ≥ b and a short interval (b·ψ'(u) ≤ ½, so e ≤ ½): the mass ``S(u−b) − S(u)`` is
      integrated by Gauss–Legendre instead of subtracting two close tails, and the result is
      ``mass − expm1(e)·S(u)`` — accurate near the ε = 0 threshold, where ε is tiny.
    * otherwise ``S(u − b) − exp(e + ln S(u))``.
    """
    e = np.broadcast_to(np.asarray(e, dtype=np.float64), u.shape)
    lns = law.logsf(u)
    out = np.empty(u.shape)
    big = u >= b
    with np.errstate(over="ignore", invalid="ignore"):
        short = big & (b * u ** (law.r - 1.0) <= 0.5)
        if np.any(short):
            uq, bq = u[short], b[short]
            out[short] = (law.mass(uq, bq)
                          - np.expm1(np.minimum(e[short], 1.0)) * np.exp(lns[short]))
        far = big & ~short
        if np.any(far):
            ub, bb, eb = u[far], b[far], e[far]
            out[far] = law.sf(ub - bb) - np.exp(eb + lns[far])
        small = ~big
        if np.any(small):
            us, bs, es = u[small], b[small], e[small]
            sf_u = np.exp(lns[small])
            # (e^e − 1)·S(u), without overflow of e^e when e is large.
            extra = np.where(es > 1.0, np.exp(es + lns[small]) - sf_u,
                             np.expm1(np.minimum(es, 1.0)) * sf_u)
            out[small] = law.half_p(bs - us) + law.half_p(us) - extra
    return out, lns


# -------------------------------------------------------------------------------------------------
# generic algorithm, vectorized
# -------------------------------------------------------------------------------------------------
def _u_for_eps(b: np.ndarray, eps: float, r: float) -> np.ndarray:
    """Crossing point u = t/s: the root on [b/2, ∞) of g(u) = ε (``inf`` when t = ∞).

    The mean value theorem gives ``b·ψ'(u−b) ≤ g(u) ≤ b·ψ'(u)``, so with c = (ε/b)^{1/(r−1)} the
    root lies in ``[max(b/2, c), b + c]`` (width ≤ b); safeguarded Newton inside that bracket.
    """
    if eps == 0.0:
        return b / 2.0
    return _crossing(b, np.full(b.shape, eps), math.log(eps), r)


def _crossing(b: np.ndarray, eps: np.ndarray, log_eps: Any, r: float) -> np.ndarray:
    """The crossing points g(u) = ε of `_u_for_eps` (``log_eps``: ln ε, a scalar or per b)."""
    with np.errstate(over="ignore", divide="ignore"):
        c = np.exp((log_eps - np.log(b)) / (r - 1.0))
    lo = np.maximum(b / 2.0, c)
    hi = b + c
    with np.errstate(invalid="ignore"):
        x = lo + 0.5 * (hi - lo)      # no overflow near the top of the double range
    out = np.full(b.shape, np.inf)
    idx = np.flatnonzero(np.isfinite(c))
    lo, hi, x, bb, ee = lo[idx], hi[idx], x[idx], b[idx], eps[idx]
    act = np.arange(idx.size)
    for _ in range(200):
        if act.size == 0:
            break
        xa, ba = x[act], bb[act]
        ga = _g(xa, ba, r) - ee[act]
        gp = _gprime(xa, ba, r)
        above = ga >= 0.0
        lo_a = np.where(above, lo[act], xa)
        hi_a = np.where(above, xa, hi[act])
        with np.errstate(divide="ignore", invalid="ignore"):
            step = -ga / gp
        xn = xa + step
        done = (np.abs(step) <= 1e-15 * xa) | (hi_a - lo_a <= 4e-16 * hi_a) | (ga == 0.0)
        outside = ~np.isfinite(xn) | (xn <= lo_a) | (xn >= hi_a)
        xn = np.where(outside, lo_a + 0.5 * (hi_a - lo_a), xn)
        lo[act], hi[act] = lo_a, hi_a
        x[act] = np.where(done, xa, xn)
        act = act[~done]
    out[idx] = x
    return out


def _delta_generic(b: np.ndarray, eps: float, law: _Law) -> np.ndarray:
    """Exact δ(ε) at b = Δ/s for r > 1 (vectorized; b > 0 finite)."""
    u = _u_for_eps(b, eps, law.r)
    # u = ∞: either the crossing point lies beyond the doubles ((ε/b)^{1/(r−1)} overflows; then
    # δ ≤ S(u − b) is below half the smallest double: 0), or the search overflowed (δ ≤ 1).
    with np.errstate(over="ignore", divide="ignore"):
        beyond = ~np.isfinite(np.exp((math.log(eps) - np.log(b)) / (law.r - 1.0))) if eps > 0 \
            else np.zeros(b.shape, dtype=bool)
    out = np.where(beyond, 0.0, 1.0)
    fin = np.isfinite(u)
    if np.any(fin):
        with np.errstate(invalid="ignore"):
            out[fin] = _hockey(u[fin], b[fin], eps, law)[0]
    return np.clip(np.where(np.isnan(out), 1.0, out), 0.0, 1.0)


def _newton_u(b: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray, delta: float,
              law: _Law) -> np.ndarray:
    """Smallest u in [lo, hi] with D(u) = S(u − b) − e^{g(u)}·S(u) ≤ δ (D decreasing).

    Safeguarded Newton on ln D (``D'(u) = −g'(u)·e^{g(u)}·S(u)``) with a maintained bracket
    (``D(lo) > δ ≥ D(hi)``); returns ``hi``, a point where D ≤ δ was verified.
    """
    r = law.r
    ln_delta = math.log(delta)
    lo, hi, x = lo.copy(), hi.copy(), x.copy()
    act = np.arange(b.size)
    for _ in range(300):
        if act.size == 0:
            break
        xa, ba = x[act], b[act]
        g = _g(xa, ba, r)
        d, lns = _hockey(xa, ba, g, law)
        ok = d <= delta
        lo_a = np.where(ok, lo[act], xa)
        hi_a = np.where(ok, xa, hi[act])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            slope = _gprime(xa, ba, r) * np.exp(g + lns)          # −D'(u)
            step = (np.log(d) - ln_delta) * d / slope
        finite = np.isfinite(step)
        small = finite & (np.abs(step) <= 1e-13 * xa)
        done = (ok & small) | (hi_a - lo_a <= 1e-14 * hi_a)
        xn = np.where(finite, xa + step, np.nan)
        # A tiny step from the unsafe side (D flat, within rounding of δ): bisect towards hi.
        outside = ~np.isfinite(xn) | (xn <= lo_a) | (xn >= hi_a) | (~ok & small)
        xn = np.where(outside, lo_a + 0.5 * (hi_a - lo_a), xn)
        lo[act], hi[act], x[act] = lo_a, hi_a, xn
        act = act[~done]
    return hi


def _eps_bound(b: np.ndarray, law: _Law, delta: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """Upper end of the crossing-point bracket and its ε: u = b + S⁻¹(δ)·(1 + 1e-9).

    ``D(u) ≤ S(u − b) ≤ δ``, so ``(g(u), δ)`` always holds: a valid ε, within about 0.1 % of
    the exact one once ε ≳ 1000. It is returned as is where it exceeds ``_EPS_HUGE`` (there
    ``g(u) + ln S(u)`` cancels beyond double precision, and such a loss means no protection).
    """
    hi = b + law.isf(delta) * (1.0 + 1e-9)
    e_hi = _g(hi, b, law.r)
    return hi, np.where(np.isnan(e_hi), np.inf, e_hi), bool(np.any(~(e_hi <= _EPS_HUGE)))


def _eps_direct(b: np.ndarray, delta: float, law: _Law) -> np.ndarray:
    """Exact ε at δ for each b (r > 1), one safeguarded Newton solve per value."""
    eps = np.zeros(b.shape)
    idx = np.flatnonzero(2.0 * law.half_p(b / 2.0) > delta)   # total variation > δ: ε > 0
    if idx.size == 0:
        return eps
    bb = b[idx]
    hi, e_hi, _ = _eps_bound(bb, law, delta)
    huge = e_hi > _EPS_HUGE
    eps[idx[huge]] = e_hi[huge]
    rest = ~huge
    if np.any(rest):
        idx, bb, hi, e_hi = idx[rest], bb[rest], hi[rest], e_hi[rest]
        d, _ = _hockey(hi, bb, e_hi, law)
        for _ in range(60):                           # guard against rounding in isf
            bad = ~(d <= delta)
            if not np.any(bad):
                break
            hi[bad] = hi[bad] * (1.0 + 1e-9)
            d[bad] = _hockey(hi[bad], bb[bad], _g(hi[bad], bb[bad], law.r), law)[0]
        u = _newton_u(bb, bb / 2.0, hi, hi, delta, law)
        # A start that never verified (not seen in practice) gets no finite guarantee.
        eps[idx] = np.where(d <= delta, _g(u, bb, law.r), np.inf)
    return eps


# -------------------------------------------------------------------------------------------------
# certified ε (Arb ball arithmetic): the reported ε is verified, never below the exact one
# -------------------------------------------------------------------------------------------------
#: Working bits of the Arb evaluation beyond those δ and ε themselves need (doubled on demand).
_ARB_GUARD = 80
#: The certified ε is the Newton estimate of the exact one raised by this relative step (and by
#: growing multiples of it until Arb verifies it): about 2e-13 relative, far inside 1e-9.
_CERT_UP = 2.0**-42
#: A verified ε within this relative distance of the Newton estimate of the exact ε is kept
#: (one Arb evaluation per value where the float start is that close).
_CERT_TOL = 2.5e-10
#: The float solver that gives the Arb refinement its start calibrates to δ·(1 − margin).
_START_MARGIN = 1e-9


def _u_for_eps_arr(b: np.ndarray, eps: np.ndarray, r: float) -> np.ndarray:
    """`_u_for_eps` for an array of ε (one per b): float crossing points, starts for Arb."""
    with np.errstate(divide="ignore"):
        return _crossing(b, eps, np.log(eps), r)


class _ArbHockey:
    """Ball-arithmetic (Arb, python-flint) bounds on δ(ε) of Subbotin_r noise at one b (internal).

    ``upper(ε, u0)`` returns a ball containing an upper bound of the exact
    ``δ(ε) = S(u_ε − b) − e^ε·S(u_ε)`` ([Vin22] Lemma 1, u_ε the crossing point ``g(u_ε) = ε``):
    the crossing point is bracketed, ``g(U⁻) < ε < g(U⁺)`` decided in ball arithmetic (g
    increases on [b/2, ∞)), and since S decreases, ``δ(ε) ≤ S(U⁻ − b) − e^ε·S(U⁺)``. S is
    ``½·Q(1/r, x^r/r)`` (Arb's regularized upper incomplete gamma function, with rigorous error
    bounds). Every argument of S is an exact double difference (evaluated at enough bits to be
    exact), so no rounding escapes the balls.
    """

    def __init__(self, b: float, r: float, delta: float) -> None:
        self.b, self.r, self.delta = b, r, delta
        self.bits_delta = max(0, -math.frexp(delta)[1]) + _ARB_GUARD

    def _sf(self, x: Any, ra: Any, aa: Any) -> Any:
        """S at the exact point x (an Arb ball of radius 0)."""
        from flint import arb

        if x == 0:
            return arb(0.5)
        if x > 0:
            return (x**ra / ra).gamma_upper(aa, regularized=1) / 2
        return 1 - ((-x) ** ra / ra).gamma_upper(aa, regularized=1) / 2

    def upper(self, eps: float, u0: float, prec: int) -> tuple[Any, float, float] | None:
        """(ball ⊇ upper bound of δ(ε), e^ε·S(u_ε) as a float, crossing u) or None (undecided)."""
        import flint
        from flint import arb

        b = self.b
        old = flint.ctx.prec
        try:
            # exact differences of doubles need at most ~2,200 bits
            flint.ctx.prec = 2200
            bb = arb(b)
            flint.ctx.prec = prec + max(0, int(math.log2(max(u0, b) / b)) + 1)
            ra, ee = arb(self.r), arb(eps)
            aa = 1 / ra

            def g_and_gp(u: Any) -> tuple[Any, Any]:
                """g(u) and g'(u) at the exact point u (an Arb ball of radius 0)."""
                old2 = flint.ctx.prec
                flint.ctx.prec = 2200
                d = u - bb                     # exact: both are short exact binary numbers
                flint.ctx.prec = old2
                ad = abs(d)
                um = u ** (ra - 1)
                if d == 0:
                    return u * um / ra, um
                sign = 1 if d > 0 else -1
                am = ad ** (ra - 1)
                return (u * um - ad * am) / ra, um - sign * am

            # Newton in ball arithmetic (on midpoints) on g(u) = ε from the float crossing point
            half0 = arb(b / 2.0)
            if eps == 0.0:
                lo = hi = arb(b / 2.0)
            else:
                if not math.isfinite(u0):
                    return None
                gu0, _ = g_and_gp(arb(max(u0, b / 2.0)))
                if abs(float(gu0.mid()) - eps) > 1e-6 * eps:   # a far start: the float solve
                    u0 = float(_u_for_eps_arr(np.array([b]), np.array([eps]), self.r)[0])
                    if not math.isfinite(u0):
                        return None
                uu = arb(max(u0, b / 2.0))
                tol = arb(2.0) ** (16 - flint.ctx.prec)
                for _ in range(60):
                    gu, gp = g_and_gp(uu)
                    step = ((gu - ee) / gp).mid()
                    nxt = arb((uu - step).mid())
                    if nxt < half0:
                        nxt = arb(((uu + half0) / 2).mid())
                    uu = nxt
                    if abs(step) <= tol * uu:
                        break
                # bracket the crossing point at relative width 2^-k, decided in ball arithmetic
                half = arb(b / 2.0)
                k = prec - 16
                for _ in range(12):
                    w = arb(2.0) ** (-k)
                    lo = arb((uu * (1 - w)).mid())
                    hi = arb((uu * (1 + w)).mid())
                    if lo < half:
                        lo = half
                    glo, _ = g_and_gp(lo)
                    ghi, _ = g_and_gp(hi)
                    if (lo == half or glo < ee) and ghi > ee:
                        break
                    k -= 8
                else:
                    return None
            flint.ctx.prec = 2200
            x_lo = arb(lo) - bb
            flint.ctx.prec = prec
            s_lo = self._sf(x_lo, ra, aa)
            s_hi = self._sf(arb(hi), ra, aa)
            term = ee.exp() * s_hi
            return s_lo - term, float(term.mid()), float(lo.mid())
        finally:
            flint.ctx.prec = old

    def delta_upper(self, eps: float, u0: float) -> float:
        """A double ≥ the exact δ(ε) (within ~1e-14 of it), or 1.0 if Arb cannot decide."""
        prec = self.bits_delta + int(math.log2(1.0 + eps)) + 8
        while prec <= 20000:
            res = self.upper(eps, u0, prec)
            if res is not None and res[0].rad() <= 1e-15 * abs(float(res[0].mid())):
                hi = res[0].upper()
                val = float(hi)
                while val < hi:
                    val = float(np.nextafter(val, np.inf))
                return max(val, 0.0)
            prec *= 2
        return 1.0  # pragma: no cover - numerical safety net

    def certified(self, eps0: float, u0: float) -> float:
        """The smallest ε verified from the start ε0 (``inf`` if none): within ~1e-12 of exact.

        Newton on ε from the ball value of δ(ε) (``∂δ/∂ε = −e^ε·S(u_ε)``); each candidate is
        the estimate raised by ``_CERT_UP`` relative (doubled after every failed verification)
        and is kept only where Arb decides ``δ(ε) ≤ δ``.
        """
        from flint import arb

        delta = self.delta
        dball = arb(delta)
        eps, u = eps0, u0
        best, lo_fail = math.inf, -1.0
        grow = 2.0**-36
        up = _CERT_UP
        prec = self.bits_delta + int(math.log2(1.0 + eps0)) + 8
        if eps0 > 0.0:          # a tiny ε is resolved against δ's own bits
            prec += max(0, -math.frexp(eps0)[1])
        for _ in range(100):
            res = self.upper(eps, u, prec)
            if res is None:
                prec *= 2
                if prec > 20000:
                    break
                continue
            dup, slope, u = res
            ok = bool(dup <= dball)
            if not ok and not bool(dup > dball) and dup.rad() > 1e-14 * delta:
                prec *= 2                      # undecided: more bits
                if prec > 20000:
                    break
                continue
            if ok:
                if eps == 0.0:
                    return 0.0
                best = min(best, eps)
            else:
                lo_fail = max(lo_fail, eps)
                up *= 2.0
            if best < math.inf and best - lo_fail <= _CERT_TOL * best:
                return best                    # the exact ε lies in (lo_fail, best]
            est = math.nan
            if slope > 0.0 and math.isfinite(slope):
                est = eps + float((dup - dball).mid()) / slope
                if best < math.inf and best <= est * (1.0 + _CERT_TOL):
                    return best                # verified, and within 2.5e-10 of the estimate
            cand = est * (1.0 + up) if est > 0.0 else (0.0 if eps > 0.0 else 2.0**-1074)
            if not ok and eps > 0.0:
                # growth capped (Newton overshoots where D(ε) is far above δ), cap ×8 per failure
                cand = min(cand, eps * (1.0 + grow))
                grow *= 8.0
            # safeguard: stay strictly inside (lo_fail, best); else bisect, or grow from lo_fail
            if not (lo_fail < cand < best) or math.isnan(est):
                if best < math.inf and lo_fail >= 0.0:
                    cand = 0.5 * (lo_fail + best)
                elif best < math.inf:
                    cand = 0.0 if eps > 0.0 else 0.5 * best
                else:
                    base = max(lo_fail, eps)
                    cand = base * (1.0 + up) if base > 0.0 else 2.0**-1074
            eps = cand
        return best


@functools.lru_cache(maxsize=256)
def _zero_point(delta: float, r: float) -> float:
    """A public b below which ε = 0 is certified at δ (Arb: total variation ≤ δ there); 0 if none.

    The float threshold `_Law.b_zero` lowered by 1e-9 relative, certified once per (δ, r): the
    total variation increases in b, so every b at or below it has ε = 0. Values between it and
    the float threshold are certified one by one.
    """
    bz = _law(r).b_zero(delta) * (1.0 - 1e-9)
    if not (math.isfinite(bz) and bz > 0.0):
        return 0.0
    return bz if _ArbHockey(bz, r, delta).certified(0.0, bz / 2.0) == 0.0 else 0.0


def _eps_certified(b: np.ndarray, delta: float, law: _Law,
                   b_cert: np.ndarray | None = None) -> np.ndarray:
    """Certified ε at δ for distinct finite b > 0 (r ∉ {1, 2}): never below the exact ε.

    The float solver (`_eps_direct`, calibrated to δ·(1 − ``_START_MARGIN``)) gives a start,
    usually within ~1e-9 of the exact ε (its float error reaches ~1e-8 relative in δ). Each
    value is then refined and verified in Arb ball arithmetic (`_ArbHockey`) at the shift
    ``b_cert`` (≥ the exact Δ/scale; default ``nextafter(b, ∞)``; δ(ε) increases in the
    shift): Newton steps on ε (``∂δ/∂ε = −e^ε·S(u_ε)``) from the ball value of δ(ε), the
    estimate raised by 2^-42 relative, and ``δ(ε) ≤ δ`` decided rigorously (the step doubled
    until it is). Values whose float ε is 0 (total variation ≤ δ) are certified at once by the
    largest of them (the total variation increases in b); if that fails, one by one.
    """
    # Every step is a function of each value alone (and of the public δ and r): the start is
    # the per-value Newton solve (never the interpolated grid, whose nodes follow the other
    # values), and ε = 0 is certified once at a public point, not at the largest value present.
    # So a record's ε never depends on the other records' values, and every backend (whole
    # arrays, streaming batches, Spark's pandas batches) reports the same doubles.
    eps_f = _eps_direct(b, delta * (1.0 - _START_MARGIN), law)
    out = eps_f.copy()
    b_up = np.nextafter(b, np.inf) if b_cert is None else b_cert
    zero = eps_f == 0.0
    todo = np.flatnonzero(~zero & np.isfinite(eps_f))
    if np.any(zero):
        bz = _zero_point(delta, law.r)
        below = b_up <= bz
        one_by_one = zero & ~below if bz > 0.0 else zero
        todo = np.sort(np.concatenate([todo, np.flatnonzero(one_by_one)]))
    if todo.size:
        u0 = _u_for_eps_arr(b_up[todo], eps_f[todo], law.r)
        for i, u in zip(todo.tolist(), u0.tolist(), strict=True):
            out[i] = _ArbHockey(float(b_up[i]), law.r, delta).certified(float(eps_f[i]), u)
    return out


def _quotient_above(d: np.ndarray, s: float, b: np.ndarray) -> np.ndarray:
    """Whether the exact quotient d/s exceeds its rounding b = fl(d/s) (b finite, > 0).

    Dekker's exact product b·s = p + e (Veltkamp splitting; no overflow for b·s ≈ d finite
    below ~1e300): d − b·s = (d − p) − e, where d − p is exact (Sterbenz) and the sign of the
    final subtraction is exact. Values outside the split's range (huge, or products below
    1e-250 where the error term may underflow, or a scale from 1e290 on, whose split would
    overflow, or a scale that is not positive, which no mechanism has) are reported as above
    (safe).
    """
    split = 134217729.0  # 2^27 + 1
    with np.errstate(over="ignore", invalid="ignore"):
        p = b * s
        bh = b * split
        bh = bh - (bh - b)
        bl = b - bh
        sh = s * split
        sh = sh - (sh - s)
        sl = s - sh
        e = ((bh * sh - p) + bh * sl + bl * sh) + bl * sl
        out = (d - p) - e > 0.0
        return (out | ~(np.abs(d) < 1e290) | ~(np.abs(b) < 1e290) | ~(np.abs(p) > 1e-250)
                | ~(np.abs(s) < 1e290) | ~np.greater(s, 0.0))


def _unit_eps(kind: str, b: np.ndarray, delta: float, r: float | None,
              b_cert: np.ndarray | None = None) -> np.ndarray:
    """ε at δ for distinct finite b > 0 (closed forms or the generic algorithm).

    ``b_cert`` (generic algorithm): the shifts certified (each ≥ its exact Δ/scale); default
    ``nextafter(b, ∞)``.
    """
    if kind == "laplace":
        # ε = b + 2·ln(1 − δ), plus a bound on its rounding error (b included: it is Δ/s rounded)
        t2 = 2.0 * math.log1p(-delta)
        return np.maximum(b + t2 + 4.0 * _U * (b - t2), 0.0)
    if kind == "logistic":
        # Inverting Thm 4: ε = b + 2·ln(1 − sqrt(δ·(1 − e^{−b}))); sqrt(δ) apart, so a subnormal δ
        # does not lose its digits in the product. Rounded up by a bound on the rounding error.
        with np.errstate(invalid="ignore", divide="ignore"):
            q = math.sqrt(delta) * np.sqrt(-np.expm1(-b))
            t2 = 2.0 * np.log1p(-q)
            e = b + t2 + 8.0 * _U * (b - t2 + q / (1.0 - q))
        return np.maximum(e, 0.0)
    if delta == 0.0:
        return np.full(b.shape, np.inf)
    if kind == "gaussian":
        return _eps_gauss(b, delta)
    law = _law(float(r))  # type: ignore[arg-type]
    return _eps_certified(b, delta, law, b_cert)


def _eps_gauss(b: np.ndarray, delta: float) -> np.ndarray:
    """Gaussian ε at δ for distinct finite b = Δ/σ > 0, exact in log space for every δ > 0.

    The safeguarded Newton solver of [`gdp_epsilon`][tabdp.privacy.conversions.gdp_epsilon] on
    the log-space δ, value by value: each ε is a function of its own b.
    """
    # One solve per value, however many there are: the interpolated grid this once used above
    # a few thousand values made a value's ε follow the other values present (by ~1e-11; and
    # the streaming report's batches differ from a whole array), and cost as much (1.0 against
    # 1.2 CPU-s per million values).
    return _gdp_eps_solve(b, math.log(delta))


def _unit_delta(kind: str, b: np.ndarray, eps: float, r: float | None) -> np.ndarray:
    """δ(ε) for finite b > 0."""
    if kind in ("laplace", "logistic"):
        # Closed forms, rounded up: x = (ε − b)/2 lowered by a bound on its rounding error (b is
        # Δ/s rounded), the result raised by a few units in the last place (and one subnormal).
        with np.errstate(invalid="ignore", divide="ignore", under="ignore"):
            x = 0.5 * (eps - b) - 2.0 * _U * (eps + b)
            if kind == "laplace":
                val = -np.expm1(x) * (1.0 + 4.0 * _U)
            else:   # (1 − e^x)²/(1 − e^{−b}), in logs: the square may underflow
                val = np.exp(2.0 * np.log(-np.expm1(x))
                             - np.log(-np.expm1(-b * (1.0 - 2.0 * _U)))) * (1.0 + 8.0 * _U)
            val = np.nextafter(val, np.inf)
        return np.where(b > eps, np.clip(val, 0.0, 1.0), 0.0)
    if kind == "gaussian":
        return gdp_delta(b, eps)
    law = _law(float(r))  # type: ignore[arg-type]
    d = _delta_generic(b, eps, law)
    low = d < 1e-290
    arb_idx = np.flatnonzero(~low & (d < 1.0))
    if arb_idx.size:
        # the certified value: an Arb upper bound of δ(ε) at b⁺ = nextafter(b, ∞) ≥ Δ/scale
        bu = np.nextafter(b[arb_idx], np.inf)
        u0 = _u_for_eps(bu, eps, law.r) if eps > 0.0 else bu / 2.0
        for i, bi, ui in zip(arb_idx.tolist(), bu.tolist(), u0.tolist(), strict=True):
            d[i] = _ArbHockey(bi, law.r, float(d[i])).delta_upper(eps, ui)
    if np.any(low):
        # δ(ε) ≤ S(u − b) (the first term of the hockey stick), from the log tail: an upper bound
        # where δ itself nears the subnormal range (see DELTA_FLOOR_GENERIC)
        u = _u_for_eps(b[low], eps, law.r)
        with np.errstate(under="ignore", over="ignore", invalid="ignore"):
            bound = np.nextafter(np.exp(law.logsf(np.maximum(u - b[low], 0.0)) + 1e-9), np.inf)
        d[low] = np.where(np.isfinite(u), np.maximum(d[low], bound), 0.0)
    return np.clip(d, 0.0, 1.0)


# -------------------------------------------------------------------------------------------------
# minimal scale
# -------------------------------------------------------------------------------------------------
def _search_log_scale(log_delta_of: Callable[[float], float], delta: float, what: str) -> float:
    """Smallest s with δ(s) ≤ δ (δ(s) decreasing in s); brentq on ln s, rounded up.

    ``log_delta_of(s)`` is ln δ(s) (an upper bound), compared with ln δ: no δ is ever formed,
    so subnormal δ are searched as accurately as any other.
    """
    ln_delta = math.log(delta)

    def f(x: float) -> float:
        # finite for brentq; any value below ln(5e-324) − 1 is as decisive as −inf
        return max(float(log_delta_of(math.exp(x))), -1e6) - ln_delta

    a, fa = 0.0, f(0.0)
    step = 1.0
    b, fb = a, fa
    while True:
        b = a + step if fa > 0.0 else a - step
        if abs(a) >= _LN_SCALE_MAX:
            raise CalibrationError(
                f"min_scale: could not bracket the minimal scale for {what}: it lies beyond "
                f"scale = exp({'+' if b > 0 else '-'}{_LN_SCALE_MAX:g}), outside the range of "
                "normal doubles.\n"
                "Hint: use less extreme epsilon/delta, or express the data in other units.")
        b = max(min(b, _LN_SCALE_MAX), -_LN_SCALE_MAX)
        fb = f(b)
        if (fa > 0.0) != (fb > 0.0):
            break
        a, fa = b, fb
        step *= 2.0
    lo, hi = (a, b) if a < b else (b, a)
    x = brentq(f, lo, hi, xtol=1e-15, rtol=4.0 * np.finfo(float).eps, maxiter=300)
    s = math.exp(x)
    # Round up until the condition is verified (floating point noise only).
    for _ in range(50):
        s *= 1.0 + 1e-12
        if log_delta_of(s) <= ln_delta:
            return s
    raise CalibrationError(  # pragma: no cover - numerical safety net
        f"min_scale: the root found for {what} does not verify (delta({s!r}) > {delta!r}).\n"
        "Hint: this should not happen; please report it with the arguments.")


@functools.lru_cache(maxsize=4096)
def _unit_scale(kind: str, eps: float, delta: float, r: float | None) -> float:
    """Minimal scale at Δ = 1 (Lemma 2: s(ε, δ, Δ) = Δ·s(ε, δ, 1))."""
    # Closed forms: sums of terms of one sign, so a few units in the last place cover rounding
    # (δ > 0; the pure case δ = 0 is the correctly rounded 1/ε of Remark 3, as always).
    up = 1.0 if delta == 0.0 else 1.0 + 16.0 * _U
    if kind == "laplace":
        return 1.0 / (eps - 2.0 * math.log1p(-delta)) * up
    if kind == "logistic":
        # Thm 4: 2·ln((e^{ε/2} + sqrt(δ(e^ε + δ − 1)))/(1 − δ)), evaluated with log1p/expm1
        # (sqrt(δ) apart: δ·δ underflows for subnormal δ).
        root = math.sqrt(delta) * math.sqrt(math.expm1(eps) + delta)
        return 1.0 / (eps + 2.0 * math.log1p(root * math.exp(-0.5 * eps))
                      - 2.0 * math.log1p(-delta)) * up
    if kind == "gaussian":
        return _search_log_scale(lambda s: float(gdp_log_delta(1.0 / s, eps)), delta,
                                 f"gaussian (eps={eps!r}, delta={delta!r})")
    law = _law(float(r))  # type: ignore[arg-type]
    if eps == 0.0:
        # u = b/2: the total variation P(1/r, (b/2)^r/r) = δ in closed form.
        b0 = law.b_zero(delta)
        for _ in range(3):     # Newton on TV(b) = δ with the Arb value (TV'(b) = f(b/2))
            res = _ArbHockey(b0, law.r, delta).upper(0.0, b0 / 2.0, _ARB_GUARD + 1100)
            if res is None:
                break
            dens = math.exp(-((b0 / 2.0) ** law.r) / law.r - law.logc)
            b0 = b0 - (float(res[0].mid()) - delta) / dens
        return _certify_scale(1.0 / b0 * (1.0 + 1e-12), eps, delta, law)

    def log_delta(s: float) -> float:
        d = float(_delta_generic(np.array([1.0 / s]), eps, law)[0])
        return math.log(d) if d > 0.0 else -math.inf

    what = f"subbotin r={r!r} (eps={eps!r}, delta={delta!r})"
    s = _search_log_scale(log_delta, delta * (1.0 - _START_MARGIN), what)
    # the certified scale of ε = 0 is private at every ε ≥ 0 (monotone in ε)
    return min(_certify_scale(s, eps, delta, law), _unit_scale(kind, 0.0, delta, r))


def _certify_scale(s: float, eps: float, delta: float, law: _Law) -> float:
    """Raise the scale s until the certified ε at b = 1/s (`_eps_certified`) is ≤ ε."""
    bump = 1e-12
    for _ in range(200):
        e = float(_eps_certified(np.array([1.0 / s]), delta, law)[0])
        if e <= eps:
            return s
        step = (e - eps) / eps if eps > 0.0 else 0.0
        s *= 1.0 + min(max(step, bump), 1.0)
        bump *= 2.0
    raise CalibrationError(  # pragma: no cover - numerical safety net
        f"min_scale: the Subbotin r={law.r!r} scale for eps={eps!r}, delta={delta!r} could not "
        "be verified in ball arithmetic.\nHint: this should not happen; please report it with "
        "the arguments.")


def min_scale(family: str, epsilon: float, delta: float, sensitivity: float = 1.0,
              r: float | None = None) -> float:
    """Smallest noise scale that makes ``q + scale·X`` (ε, δ)-DP at sensitivity Δ ([Vin22]).

    Laplace and Logistic use the closed forms of Thms 3 and 4, the Gaussian the analytic condition
    of Balle & Wang (bisection on ln σ), Subbotin_r the generic criterion of Lemma 1
    (docs/math/log-concave.md §2); all are calibrated at Δ = 1 and multiplied by Δ (Lemma 2).
    The result is rounded up.

    Args:
        family: ``"laplace"``, ``"logistic"``, ``"gaussian"`` or ``"subbotin"``.
        epsilon: ε ≥ 0 (ε = 0 needs δ > 0).
        delta: δ in [0, 1); δ = 0 (pure DP) only for laplace, logistic and subbotin with r = 1;
            every δ > 0 down to 5e-324, except subbotin r ∉ {1, 2}: δ ≥ 1e-300.
        sensitivity: Δ > 0 (for a vector release: see the Thm 9 warning in
            [`choose_subbotin_r`][tabdp.privacy.approx.choose_subbotin_r]).
        r: Subbotin shape r ≥ 1, required for ``family="subbotin"`` and refused otherwise.

    Returns:
        The minimal scale (Gaussian: σ; Subbotin: the factor multiplying a standard Subbotin_r
        variable).

    Raises:
        InvalidParameterError: On an invalid argument, ε = δ = 0, or δ = 0 for a family without
            pure DP (Thm 6).
        InvalidParameterError: For Subbotin with r ∉ {1, 2} and δ below
            [`DELTA_FLOOR_GENERIC`][tabdp.privacy.approx.DELTA_FLOOR_GENERIC] (1e-300).
        CalibrationError: If the minimal scale exceeds the double range, or the search fails
            (extreme arguments).

    Example:
        >>> round(min_scale("laplace", 1.0, 1e-4), 8), round(min_scale("logistic", 1.0, 1e-4), 8)
        (0.99980003, 0.98421439)
        >>> round(min_scale("subbotin", 1.0, 1e-4, sensitivity=2.0, r=4), 5)   # 2 × 8.743266
        17.48653
    """
    owner = "min_scale"
    fam, rr = _family(family, r, owner)
    eps = _check_epsilon(epsilon, owner)
    dlt = _check_delta(delta, owner)
    sens = check_real("sensitivity", sensitivity, owner=owner, gt=0.0,
                      hint="sensitivity is the largest change Delta of the query, e.g. "
                           "sensitivity=1.0")
    kind = _kind(fam, rr)
    if eps == 0.0 and dlt == 0.0:
        raise InvalidParameterError(
            f"{owner}: epsilon=0 and delta=0 ask for no privacy loss at all, which no noise scale "
            "achieves.\nHint: allow epsilon > 0 (e.g. 1.0) or delta > 0 (e.g. 1e-9).")
    if dlt == 0.0 and kind in ("gaussian", "generic"):
        raise _no_pure(fam, rr, owner)
    if kind == "generic":
        check_generic_floor(dlt, rr, owner)
    out = sens * _unit_scale(kind, eps, dlt, rr)
    if not math.isfinite(out):
        raise CalibrationError(
            f"{owner}: the minimal {fam} scale for epsilon={eps!r}, delta={dlt!r} at "
            f"sensitivity={sens!r} exceeds the largest double (about 1.8e308), so no finite "
            "scale is private.\nHint: allow a larger epsilon or delta, or express the data in "
            "other units (a smaller sensitivity).")
    return out


# -------------------------------------------------------------------------------------------------
# inverses
# -------------------------------------------------------------------------------------------------
def epsilon_for_scale(family: str, scale: float, delta: float, sensitivity: ArrayLike = 1.0,
                      r: float | None = None) -> np.ndarray:
    """Smallest ε such that ``q + scale·X`` is (ε, δ)-DP at each sensitivity Δ (vectorized).

    ε depends on Δ/scale only. Laplace and Logistic invert their closed forms; the Gaussian and
    Subbotin_r use the exact criterion of [Vin22] Lemma 1, solved as one vectorized safeguarded
    Newton iteration on the crossing point u (the condition is ``S(u − b) − e^{g(u)}·S(u) ≤ δ``
    with ``g(u) = ε``, so ε is read off at the solution; no nested root-finding). Distinct values
    of Δ/scale are solved once, each on its own: a value's ε never depends on the other values
    passed with it (so a per-record loss is the same whether computed over a whole table, in
    streaming batches or on Spark). The result is a valid ε, rounded up.

    Args:
        family: ``"laplace"``, ``"logistic"``, ``"gaussian"`` or ``"subbotin"``.
        scale: Noise scale > 0.
        delta: δ in [0, 1). With δ = 0 the answer is the pure ε (laplace, logistic) or ``inf``
            (gaussian, subbotin r > 1: no pure guarantee, Thm 6).
        sensitivity: Per-record sensitivities Δ ≥ 0 (any shape; ``inf`` allowed).
        r: Subbotin shape r ≥ 1 (only with ``family="subbotin"``).

    Returns:
        ε for each Δ, shaped like ``sensitivity`` (0 where Δ = 0 or where the total variation is
        already ≤ δ; ``inf`` where Δ = ∞).

    Raises:
        InvalidParameterError: On invalid arguments (negative or NaN sensitivities included),
            and for Subbotin with r ∉ {1, 2} at δ <
            [`DELTA_FLOOR_GENERIC`][tabdp.privacy.approx.DELTA_FLOOR_GENERIC] (1e-300); the
            Gaussian, Laplace and Logistic take every δ > 0, subnormal ones included.

    Example:
        >>> eps = epsilon_for_scale("subbotin", 5.877443, 1e-4, [0.0, 1.0, 2.0], r=3)
        >>> [round(float(e), 5) for e in eps]
        [0.0, 1.0, 2.30629]
    """
    owner = "epsilon_for_scale"
    fam, rr = _family(family, r, owner)
    s = _check_scale(scale, owner)
    dlt = _check_delta(delta, owner)
    d = _sensitivities(sensitivity, owner)
    kind = _kind(fam, rr)
    if kind == "generic":
        check_generic_floor(dlt, rr, owner)
    out = np.zeros(d.shape)
    flat_d, flat_o = d.reshape(-1), out.reshape(-1)
    flat_o[np.isinf(flat_d)] = np.inf
    pos = np.flatnonzero(np.isfinite(flat_d) & (flat_d > 0.0))
    if pos.size:
        b = flat_d[pos] / s
        with np.errstate(over="ignore"):
            ok = np.isfinite(b)
        flat_o[pos[~ok]] = np.inf
        pos, b = pos[ok], b[ok]
        b_cert = None
        if kind == "generic" and dlt > 0.0:
            # the shift certified for each value: Δ/scale rounded, where the exact quotient is
            # not above it, else the next double (δ(ε) increases in the shift). Decided per
            # value, never per group of equal roundings: a record's ε follows its own Δ alone.
            b = np.where(_quotient_above(flat_d[pos], s, b), np.nextafter(b, np.inf), b)
        ub, inv = np.unique(b, return_inverse=True)
        if kind == "generic" and dlt > 0.0:
            b_cert = ub
        flat_o[pos] = _unit_eps(kind, ub, dlt, rr, b_cert)[inv.reshape(-1)]
    return out


def delta_for_scale(family: str, scale: float, epsilon: float, sensitivity: ArrayLike = 1.0,
                    r: float | None = None) -> np.ndarray:
    """Exact δ(ε) of ``q + scale·X`` at each sensitivity Δ: the hockey-stick divergence.

    δ(ε) = ∫ max(0, p − e^ε·q) for the neighbouring output densities p, q; by [Vin22] Lemma 1
    it equals ``S(u − b) − e^ε·S(u)`` at the crossing point u (b = Δ/scale). Closed forms for
    Laplace (1 − e^{(ε−b)/2}) and Logistic ((1 − e^{(ε−b)/2})²/(1 − e^{−b})), Balle & Wang for
    the Gaussian, the generic algorithm for Subbotin_r.

    Args:
        family: ``"laplace"``, ``"logistic"``, ``"gaussian"`` or ``"subbotin"``.
        scale: Noise scale > 0.
        epsilon: ε ≥ 0.
        sensitivity: Per-record sensitivities Δ ≥ 0 (any shape; ``inf`` allowed).
        r: Subbotin shape r ≥ 1 (only with ``family="subbotin"``).

    Returns:
        δ for each Δ (0 at Δ = 0, 1 at Δ = ∞), shaped like ``sensitivity``, rounded up: never
        below the exact δ (Gaussian: by at most 1e-10 relative, or one subnormal unit; Laplace and
        Logistic: a few units in the last place; Subbotin r ∉ {1, 2}: certified in Arb ball
        arithmetic, within ~1e-14 relative, and where
        its δ(ε) falls below 1e-290 the larger bound S(u − Δ/scale)).

    Raises:
        InvalidParameterError: On invalid arguments.

    Example:
        >>> float(delta_for_scale("laplace", 1.0, 0.0, 2 * math.log(2.0)))   # 1 − e^{−ln 2}
        0.5
        >>> round(float(delta_for_scale("subbotin", 19.003255, 1.0, r=7.5)), 10)
        0.0001
    """
    owner = "delta_for_scale"
    fam, rr = _family(family, r, owner)
    s = _check_scale(scale, owner)
    eps = _check_epsilon(epsilon, owner)
    d = _sensitivities(sensitivity, owner)
    kind = _kind(fam, rr)
    out = np.zeros(d.shape)
    flat_d, flat_o = d.reshape(-1), out.reshape(-1)
    with np.errstate(over="ignore"):
        b_all = flat_d / s
    flat_o[np.isinf(b_all)] = 1.0
    pos = np.flatnonzero(np.isfinite(b_all) & (b_all > 0.0))
    if pos.size:
        ub, inv = np.unique(b_all[pos], return_inverse=True)
        flat_o[pos] = _unit_delta(kind, ub, eps, rr)[inv.reshape(-1)]
    return out


# -------------------------------------------------------------------------------------------------
# choosing r ([Vin22] eq. 5)
# -------------------------------------------------------------------------------------------------
def subbotin_mse(r: float, epsilon: float, delta: float, sensitivity: float) -> float:
    """Per-coordinate MSE ``s_r(ε, δ, Δ)²·Var_r`` of the calibrated Subbotin_r mechanism.

    Args:
        r: Shape r ≥ 1.
        epsilon: ε ≥ 0.
        delta: δ in [0, 1) (δ = 0 only for r = 1).
        sensitivity: Δ > 0, the ℓ_r sensitivity for that r.

    Returns:
        The mean squared error (= variance) of each released coordinate.

    Example:
        >>> round(subbotin_mse(4.0, 1.0, 1e-4, 100 ** 0.25 / 500), 7)   # [Vin22] §4.1, m = 100
        0.002067
    """
    rr = check_subbotin_r(r, "subbotin_mse")
    s = min_scale("subbotin", epsilon, delta, sensitivity, r=rr)
    return s * s * subbotin_variance(rr)


@dataclass(frozen=True)
class SubbotinCandidate:
    """One row of the eq. (5) search: r, its sensitivity Δ_r, minimal scale and MSE.

    Attributes:
        r: Shape.
        sensitivity: Δ_r used for that r.
        scale: Minimal scale s_r(ε, δ, Δ_r).
        mse: Per-coordinate MSE ``scale²·Var_r``.

    Example:
        >>> SubbotinCandidate(2.0, 1.0, 3.0, 9.0).mse
        9.0
    """

    r: float
    sensitivity: float
    scale: float
    mse: float


@dataclass(frozen=True)
class SubbotinChoice:
    """The Subbotin shape chosen by [Vin22] eq. (5), with the whole search table.

    Attributes:
        r: The chosen r* (smallest MSE; the smallest r among ties).
        scale: Its minimal scale s_{r*}(ε, δ, Δ_{r*}).
        mse: Its per-coordinate MSE.
        sensitivity: Δ_{r*}.
        epsilon: ε of the calibration.
        delta: δ of the calibration.
        table: One [`SubbotinCandidate`][tabdp.privacy.approx.SubbotinCandidate] per r of the grid,
            in increasing r.

    Example:
        >>> c = choose_subbotin_r(1.0, 1e-4, lambda r: 100 ** (1 / r), r_grid=[4, 1, 2])
        >>> c.r, [row.r for row in c.table]
        (4.0, [1.0, 2.0, 4.0])
    """

    r: float
    scale: float
    mse: float
    sensitivity: float
    epsilon: float
    delta: float
    table: tuple[SubbotinCandidate, ...]

    def row(self, r: float) -> SubbotinCandidate:
        """The table row of shape ``r``.

        Args:
            r: A shape of the grid.

        Returns:
            Its candidate row.

        Raises:
            KeyError: If ``r`` is not in the grid.

        Example:
            >>> round(choose_subbotin_r(1.0, 1e-4, 1.0, r_grid=[1, 2]).row(1).scale, 8)
            0.99980003
        """
        for cand in self.table:
            if cand.r == float(r):
                return cand
        raise KeyError(f"r={r!r} is not in the grid {[c.r for c in self.table]}")


def choose_subbotin_r(epsilon: float, delta: float,
                      sensitivity: float | Callable[[float], float],
                      r_grid: Iterable[float] | None = None) -> SubbotinChoice:
    """Choose the Subbotin shape minimizing the MSE at (ε, δ) ([Vin22] eq. 5; log-concave.md §4).

    ``r* = argmin_r s_r(ε, δ, Δ_r)²·Var_r`` over a grid, where Δ_r is the sensitivity used for
    shape r. The seed uses the ℓ_r sensitivity of a vector query (Thm 9), e.g. for the mean of n
    rows in an ℓ∞ ball of diameter c in ℝ^m, Δ_r = m^{1/r}·c/n (Thm 10); this function
    reproduces that computation (the §4.1 table) exactly.

    Warning:
        For a *vector* release the calibration is only valid at r = 2 (and, conservatively, at
        r = 1 through pure DP): [Vin22] Thm 9 — iid Subbotin_r noise satisfies the scalar
        condition at the ℓ_r sensitivity — is false for r ≠ 2, since the privacy loss depends on
        the direction of the shift (see [`VectorSubbotin`][tabdp.mechanisms.VectorSubbotin]).
        The seed's r* = 4 at ε = 1, δ = 1e-4, m = 100 actually has δ(1) ≈ 0.0087 for the
        mean-query shift. With a constant Δ (one scalar release) every r is valid.

    Args:
        epsilon: ε ≥ 0.
        delta: δ in (0, 1) (with δ = 0 only r = 1 is private: use ``min_scale("laplace", ...)``).
        sensitivity: Either Δ (the same for every r) or a callable ``r ↦ Δ_r``.
        r_grid: Shapes to try, each ≥ 1; default 1, 1.5, …, 14
            ([`DEFAULT_R_GRID`][tabdp.privacy.approx.DEFAULT_R_GRID]).

    Returns:
        A [`SubbotinChoice`][tabdp.privacy.approx.SubbotinChoice].

    Raises:
        InvalidParameterError: On invalid arguments or a callable returning an invalid Δ_r.

    Example:
        >>> c = choose_subbotin_r(1.0, 1e-4, lambda r: 100 ** (1 / r) / 500)
        >>> c.r, round(c.scale, 7), round(c.mse, 7)          # [Vin22] §4.1, m = 100
        (4.0, 0.0552973, 0.002067)
    """
    owner = "choose_subbotin_r"
    eps = _check_epsilon(epsilon, owner)
    dlt = check_real("delta", delta, owner=owner, gt=0.0, lt=1.0,
                     hint="with delta=0 only r=1 (Laplace) is private, so there is nothing to "
                          "choose: use min_scale('laplace', epsilon, 0.0, sensitivity); else "
                          "pass e.g. delta=1e-9")
    grid_in: Sequence[Any] = DEFAULT_R_GRID if r_grid is None else list(r_grid)
    if len(grid_in) == 0:
        raise InvalidParameterError(
            f"{owner}: r_grid is empty.\nHint: pass shapes >= 1, e.g. r_grid=[1, 1.5, 2, 3, 4], "
            "or leave r_grid=None for the seed's grid 1, 1.5, ..., 14.")
    grid = sorted({check_subbotin_r(x, owner) for x in grid_in})
    for rr in grid:
        if rr not in (1.0, 2.0):
            check_generic_floor(dlt, rr, owner)
    rows = []
    for rr in grid:
        if callable(sensitivity):
            raw = sensitivity(rr)
            sens = check_real("sensitivity(r)", raw, owner=owner, gt=0.0,
                              hint=f"the sensitivity callable must return the l_r sensitivity "
                                   f"Delta_r > 0; it returned {raw!r} at r={rr!r}")
        else:
            sens = check_real("sensitivity", sensitivity, owner=owner, gt=0.0,
                              hint="pass Delta > 0, or a callable r -> Delta_r (e.g. "
                                   "lambda r: m ** (1 / r) * c)")
        s = min_scale("subbotin", eps, dlt, sens, r=rr)
        rows.append(SubbotinCandidate(rr, sens, s, s * s * subbotin_variance(rr)))
    best = min(rows, key=lambda c: c.mse)
    return SubbotinChoice(best.r, best.scale, best.mse, best.sensitivity, eps, dlt, tuple(rows))
