"""Calibration: choose mechanism parameters from per-record loss targets (the planning use case).

A planner states the largest PRzCDP loss ρ allowed for records of a few sizes Δ, e.g. "records of
size 1,000 lose at most ρ = 0.5 and the largest plausible record (10⁷) at most ρ = 10", and the
size of a typical cell. [`calibrate`][tabdp.calibrate.calibrate] then finds, within one mechanism
family, the parameters that meet every target, ``mechanism.rho(Δ) ≤ ρ`` at each target point, while
making the error of the typical cell as small as possible;
[`compare_families`][tabdp.compare_families] does it for every family and ranks them, so the planner
sees which mechanism suits the targets.

How it works (docs/math/policies.md §4.2, docs/math/transformation.md):

* Every policy is increasing in Δ and decreasing in the scale σ (σ → ∞ drives every loss to 0), and
  every error measure increases with σ. So for fixed shape parameters the best σ is the smallest one
  meeting all targets, in closed form: σ = maxᵢ σᵢ, where σᵢ makes target i hold with equality
  (Gaussian: Δ/√(2ρ); log: log1p(Δ/a)/√(2ρ); roots: ((Δ+a)^{1/k} − a^{1/k})/√(2ρ); pure mechanisms
  first invert ρ = ε·tanh(ε/2) to the PRDP loss ε, then solve their ε(Δ) for σ). The target that
  gives the largest σᵢ is the *binding* one; the others hold with slack.
* Shape parameters (offset a of the transformations, root order k, GG shape p, ExpPolyLog a and d,
  unit-splitting threshold τ) are searched: a grid over log-parameters, then bounded Brent
  refinement around the best grid point (nested for two shape parameters). Any of them can be
  pinned with a keyword (``k=4``, ``p=1``, ``offset=1000``...).
* Objective: the standard deviation of the estimate of a cell whose true total is
  ``typical_total`` (transformation mechanisms' error depends on it). Where that sd is infinite for
  every allowed parameter (ExpPolyLog with p = 1 and a pinned d ≤ 3) the margin of error at
  ``level`` is minimized instead, and the result says so (``objective="moe"`` asks for it always).

Targets can always be met by a large enough σ, so a
[`CalibrationError`][tabdp.exceptions.CalibrationError] means something else: a pinned parameter
outside its valid range, an objective that is infinite or not representable for every allowed
parameter, or targets so strict that σ leaves the range of floating point numbers. The message says
which and how to fix it.

Example:
    >>> from tabdp.calibrate import calibrate
    >>> res = calibrate("log", {1e3: 0.5, 1e7: 10.0}, typical_total=1e6)
    >>> all(res.achieved[d] <= t for d, t in res.targets.items()), res.binding
    (True, (10000000.0,))
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
from scipy.special import log_ndtr

from tabdp import registry
from tabdp._lazy_scipy import brentq, minimize_scalar
from tabdp._numeric import ceil_snap
from tabdp._validation import check_level, check_real, first_fall
from tabdp.exceptions import CalibrationError, InvalidParameterError, TabdpError
from tabdp.mechanisms import DEFAULT_LEVEL, Mechanism
from tabdp.mechanisms.additive import (
    ExpPolyLog,
    Gaussian,
    GeneralizedGaussian,
    Laplace,
    UnitSplitting,
)
from tabdp.mechanisms.transformation import LogTransform, RootTransform

__all__ = ["FAMILIES", "CalibrationResult", "FamilyComparison", "calibrate", "compare_families"]

#: The mechanism families :func:`calibrate` knows, in the order :func:`compare_families` tries them
#: (the families tagged "calibrate" in :mod:`tabdp.registry`).
FAMILIES: tuple[str, ...] = registry.names("mechanism", tag="calibrate")

#: Parameters each family accepts as pinned (canonical name -> accepted spellings).
_PINNABLE: dict[str, dict[str, tuple[str, ...]]] = {
    "gaussian": {},
    "laplace": {},
    "generalized_gaussian": {"p": ("p",)},
    "exp_polylog": {"p": ("p",), "a": ("a", "offset"), "d": ("d",)},
    "root": {"k": ("k",), "offset": ("offset", "a"), "estimator": ("estimator",)},
    "log": {"offset": ("offset", "a"), "estimator": ("estimator",)},
    "unit_splitting": {"threshold": ("threshold", "tau")},
}

_SCALE_NAMES = ("sigma", "scale")
_OBJECTIVES = ("auto", "sd", "moe")

#: Root orders searched when k is not pinned (the log transform is the k -> infinity limit).
_K_MAX = 16
#: Search ranges (natural logs) of the shape parameters.
_GG_P_RANGE = (math.log(0.02), 0.0)
_EPL_D_RANGE = (math.log(1e-4), math.log(1e4))  # d (p > 1), or d - 3 / d - 1 (p = 1)
_EPL_LNA_MAX = 300.0  # ln a ≤ 300 (p > 1)
_OFFSET_DECADES = (-13.0, 9.0)  # offset a from 10^-13 to 10^9 times the problem's scale
_GRID = 33
_XATOL = 1e-7
_BAD = 1e6  # stands for log(inf) inside the optimizer
_REL_BIND = 1e-9  # a target binds when achieved >= target * (1 - 1e-9)
_SPLIT_CANDIDATES = 20000  # split thresholds tried per target size: Δ/n, n = 1..this


# -- problem description ------------------------------------------------------------------------
@dataclass(frozen=True)
class _Problem:
    deltas: np.ndarray  # sorted increasing
    rhos: np.ndarray
    keys: tuple[float, ...]  # original keys in the same order
    typical_total: float
    level: float
    objective: str  # "auto", "sd" or "moe"

    @property
    def scale(self) -> float:
        return max(float(self.deltas.max()), self.typical_total)

    def eps(self) -> np.ndarray:
        return np.array([_eps_from_rho(float(r)) for r in self.rhos])


def _eps_from_rho(rho: float) -> float:
    """PRDP loss ε with ε·tanh(ε/2) = ρ (inverse of `pure_to_zcdp`).

    ε ≥ max(ρ, √(2ρ)) since ε·tanh(ε/2) ≤ min(ε, ε²/2), and ε ≤ ρ + 1 since
    ε·tanh(ε/2) ≥ ε(1 − 2e^{−ε}).
    """
    lo = max(rho, math.sqrt(2.0 * rho))
    hi = rho + 1.0

    def g(e: float) -> float:
        return e * math.tanh(0.5 * e) - rho

    if g(lo) >= 0.0:
        return lo
    return float(brentq(g, lo, hi, xtol=1e-300, rtol=4.0 * np.finfo(float).eps, maxiter=500))


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _fmt_delta(x: float) -> str:
    return f"{x:g}"


def _canonical_family(family: Any) -> str:
    if not isinstance(family, str):
        raise InvalidParameterError(
            f"calibrate: family must be a string; got {family!r} of type "
            f"{type(family).__name__}.\nHint: use one of {', '.join(FAMILIES)}.")
    name = registry.canonical(family, loose=True)
    if name is None or name not in FAMILIES:
        valid = list(FAMILIES) + [f.cls.__name__ for f in registry.families(tag="calibrate")]
        close = difflib.get_close_matches(family, valid, n=1, cutoff=0.6)
        maybe = f" Did you mean {close[0]!r}?" if close else ""
        raise InvalidParameterError(
            f"calibrate: unknown mechanism family {family!r}.{maybe}\n"
            f"Hint: valid families are {', '.join(FAMILIES)} (class names such as "
            "'RootTransform' or 'ExpPolyLog' are accepted too).")
    return name


def _validate_targets(targets: Any, typical_total: Any, level: Any,
                      objective: Any) -> _Problem:
    if not isinstance(targets, Mapping):
        raise InvalidParameterError(
            f"calibrate: targets must be a mapping from record size Δ to the largest PRzCDP "
            f"loss ρ allowed at that size; got {type(targets).__name__}.\n"
            "Hint: e.g. targets={1e3: 0.5, 1e7: 10.0}.")
    if len(targets) == 0:
        raise InvalidParameterError(
            "calibrate: targets is empty; at least one (record size, ρ) pair is needed.\n"
            "Hint: e.g. targets={1e3: 0.5} asks that records of size 1000 lose at most ρ = 0.5.")
    pairs = []
    for key, val in targets.items():
        size = check_real("record size Δ (a key of targets)", key, owner="calibrate", gt=0.0,
                          hint="keys of targets are per-record sensitivities (the size of a "
                               "record's contribution to a cell), which must be finite and > 0")
        rho = check_real(f"target ρ for record size Δ={key!r}", val, owner="calibrate", gt=0.0,
                         hint="each target is the largest PRzCDP loss allowed for records of "
                              "that size: a finite number > 0 (ρ = 0 would need infinite noise)")
        pairs.append((size, rho, key))
    sizes = [p[0] for p in pairs]
    if len(set(sizes)) != len(sizes):
        raise InvalidParameterError(
            f"calibrate: targets name the same record size twice ({sorted(sizes)}).\n"
            "Hint: give one target per size.")
    pairs.sort(key=lambda p: p[0])
    _refuse_decreasing(pairs)
    tt = check_real("typical_total", typical_total, owner="calibrate", ge=0.0,
                    hint="typical_total is the true total of a typical cell (>= 0), used to "
                         "measure the error of the calibrated mechanism")
    lev = check_level(level)
    if objective not in _OBJECTIVES:
        raise InvalidParameterError(
            f"calibrate: objective must be one of {', '.join(map(repr, _OBJECTIVES))}; got "
            f"{objective!r}.\nHint: 'sd' minimizes the standard deviation at typical_total, "
            "'moe' the margin of error at `level`, 'auto' the sd where it is finite.")
    return _Problem(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]),
                    tuple(float(p[0]) for p in pairs), tt, lev, objective)


def _refuse_decreasing(pairs: Sequence[tuple[float, float, Any]]) -> None:
    """Refuse targets that allow a larger record less loss than a smaller one.

    Every policy increases with the record size, so the target at the larger size would bind:
    the noise would have to hold the largest record to the smallest ρ, far more noise than the
    targets intend, while the smaller records get far less loss than their target (the
    smaller-size target is then useless). Equal targets are accepted (the smaller one is
    redundant), as in `TargetCurve`.

    Example:
        >>> _refuse_decreasing([(1e3, 0.5, "1e3"), (1e7, 0.2, "1e7")])
        Traceback (most recent call last):
        ...
        tabdp.exceptions.InvalidParameterError: calibrate: targets decrease with record size: ...
    """
    if (fall := first_fall(pairs)) is not None:
        (s0, r0, _), (s1, r1, _) = fall
        raise InvalidParameterError(
            f"calibrate: targets decrease with record size: size {s1:g} is allowed "
            f"rho = {r1:g}, less than rho = {r0:g} at the smaller size {s0:g}. Every "
            "mechanism's loss increases with the record size, so the larger "
            f"size's target would bind and force noise that holds records of size {s1:g} "
            f"to rho = {r1:g}: records of size {s0:g} would then lose far less than "
            f"{r0:g} and typical cells get far more noise than intended.\nHint: give "
            "larger sizes larger (or equal) targets, e.g. targets = {1e3: 0.5, 1e7: 10.0}; "
            f"for one limit at every size up to {s1:g}, give a single target at {s1:g}.")


def _normalize_fixed(family: str, fixed: Mapping[str, Any]) -> dict[str, Any]:
    allowed = _PINNABLE[family]
    out: dict[str, Any] = {}
    for name, value in fixed.items():
        if name in _SCALE_NAMES:
            raise InvalidParameterError(
                f"calibrate: {name!r} cannot be pinned: it is the scale that calibrate solves "
                f"for (the smallest one meeting every target).\nHint: to check a given "
                f"mechanism, compare mechanism.rho(sizes) with the targets instead.")
        canon = next((c for c, spellings in allowed.items() if name in spellings), None)
        if canon is None:
            accepted = sorted(s for sp in allowed.values() for s in sp)
            what = ", ".join(accepted) if accepted else "nothing (it has no shape parameters)"
            raise InvalidParameterError(
                f"calibrate: family {family!r} has no parameter {name!r} to pin.\n"
                f"Hint: {family!r} accepts {what}.")
        if canon in out:
            raise InvalidParameterError(
                f"calibrate: parameter {canon!r} of {family!r} is pinned twice (as {name!r} and "
                "an alias).\nHint: pin it once.")
        out[canon] = value
    return out


def _pinned_error(family: str, pinned: Mapping[str, Any], err: Exception) -> CalibrationError:
    shown = ", ".join(f"{k}={v!r}" for k, v in pinned.items())
    return CalibrationError(
        f"calibrate({family!r}): the pinned parameters ({shown}) are not valid for this "
        f"family, so no σ can make it meet the targets:\n{err}")


# -- objective and σ bookkeeping ----------------------------------------------------------------
def _error_of(mech: Mechanism, prob: _Problem, kind: str) -> float:
    """Error measure ``kind`` ("sd" or "moe") of ``mech`` at the typical total; inf on failure."""
    q = np.array([prob.typical_total])
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if kind == "sd":
                v = float(mech.sd_at(q)[0])
            else:
                v = float(mech.moe_at(q, prob.level)[0])
    except (TabdpError, ValueError, OverflowError, ZeroDivisionError, FloatingPointError):
        return math.inf
    return v if math.isfinite(v) and v >= 0 else math.inf


def _log_err(mech: Mechanism | None, prob: _Problem, kind: str) -> float:
    if mech is None:
        return _BAD
    v = _error_of(mech, prob, kind)
    if not math.isfinite(v):
        return _BAD
    return math.log(v) if v > 0 else -_BAD


def _build(make: Callable[[float], Mechanism], sigma: float) -> Mechanism | None:
    if not (math.isfinite(sigma) and sigma > 0.0):
        return None
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return make(sigma)
    except (TabdpError, ValueError, OverflowError, ZeroDivisionError):
        return None


def _finalize(make: Callable[[float], Mechanism], sigma: float, prob: _Problem,
              family: str) -> Mechanism:
    """Build the final mechanism, nudging σ up by a few ulps if rounding broke a target."""
    if not (math.isfinite(sigma) and sigma > 0.0):
        raise CalibrationError(
            f"calibrate({family!r}): the targets need a scale σ = {sigma!r}, outside the range "
            "of floating point numbers (targets too strict, or too loose, for these record "
            "sizes).\nHint: check the units of the record sizes and targets.")
    for step in range(80):
        try:
            mech = make(sigma)
        except InvalidParameterError as exc:
            raise CalibrationError(
                f"calibrate({family!r}): the parameters meeting the targets are not usable:\n"
                f"{exc}") from None
        with np.errstate(all="ignore"):
            achieved = np.asarray(mech.rho(prob.deltas), dtype=float)
        if np.all(achieved <= prob.rhos):
            return mech
        sigma = sigma * (1.0 + 2.0 ** (-52 + min(step, 40)))
    wanted = dict(zip(prob.deltas.tolist(), prob.rhos.tolist(), strict=True))
    raise CalibrationError(
        f"calibrate({family!r}): could not meet the targets {wanted!r} "
        f"by increasing σ: the losses reached {achieved.tolist()!r}. Reported losses are "
        "rounded up (never below the exact loss, and never 0 when it is positive), so a "
        "target within a few units in the last place of 0 cannot be met.\n"
        "Hint: ask for targets of at least 1e-300, or check the units of the sizes and targets.")


def _min1d(f: Callable[[float], float], lo: float, hi: float,
           n: int = _GRID) -> tuple[float, float]:
    """Minimize ``f`` on [lo, hi]: grid, then bounded Brent between the best point's neighbours."""
    xs = np.linspace(lo, hi, n)
    fs = np.array([f(float(x)) for x in xs])
    i = int(np.argmin(fs))
    best_x, best_f = float(xs[i]), float(fs[i])
    if best_f >= _BAD:
        return best_x, best_f
    a, b = float(xs[max(i - 1, 0)]), float(xs[min(i + 1, n - 1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = minimize_scalar(f, bounds=(a, b), method="bounded",
                              options={"xatol": _XATOL, "maxiter": 200})
    if float(res.fun) < best_f:
        return float(res.x), float(res.fun)
    return best_x, best_f


def _edge_note(name: str, x: float, lo: float, hi: float, value: float, limit: str) -> list[str]:
    span = hi - lo
    if x <= lo + 1e-3 * span or x >= hi - 1e-3 * span:
        return [f"the best {name} ({_fmt(value)}) is at the edge of the searched range; {limit}"]
    return []


# -- family solvers ----------------------------------------------------------------------------
# Each returns (mechanism, searched parameter names, notes). σ is the smallest meeting all targets.
_Solved = tuple[Mechanism, tuple[str, ...], list[str]]


def _solve_gaussian(prob: _Problem, pinned: dict[str, Any], kind: str) -> _Solved:
    sigma = float(np.max(prob.deltas / np.sqrt(2.0 * prob.rhos)))
    return _finalize(Gaussian, sigma, prob, "gaussian"), (), []


def _solve_laplace(prob: _Problem, pinned: dict[str, Any], kind: str) -> _Solved:
    b = float(np.max(prob.deltas / prob.eps()))
    return _finalize(Laplace, b, prob, "laplace"), (), []


def _solve_gg(prob: _Problem, pinned: dict[str, Any], kind: str) -> _Solved:
    log_eps = np.log(prob.eps())
    log_d = np.log(prob.deltas)

    def sigma_of(p: float) -> float:
        with np.errstate(over="ignore"):
            return float(np.exp(np.max(log_d - log_eps / p)))

    def make_p(p: float) -> Callable[[float], Mechanism]:
        return lambda s: GeneralizedGaussian(sigma=s, p=p)

    if "p" in pinned:
        try:
            GeneralizedGaussian(sigma=1.0, p=pinned["p"])
        except InvalidParameterError as exc:
            raise _pinned_error("generalized_gaussian", pinned, exc) from None
        p = float(pinned["p"])
        return _finalize(make_p(p), sigma_of(p), prob, "generalized_gaussian"), (), []

    def f(lp: float) -> float:
        p = math.exp(lp)
        return _log_err(_build(make_p(p), sigma_of(p)), prob, kind)

    lo, hi = _GG_P_RANGE
    lp, flp = _min1d(f, lo, hi)
    p = min(math.exp(lp), 1.0)
    notes = []
    if f(hi) <= flp:  # the constraint p <= 1 binds
        p = 1.0
        notes.append("the best shape is p = 1, i.e. the Laplace mechanism (p cannot exceed 1)")
    else:
        notes += _edge_note("shape p", lp, lo, hi, p, "shapes p < 0.02 are not searched")
    return _finalize(make_p(p), sigma_of(p), prob, "generalized_gaussian"), ("p",), notes


def _epl_sigma(prob: _Problem, eps: np.ndarray, p: float, a: float, d: float) -> float:
    """Smallest σ with d[(ln(Δ/σ + a))^p − (ln a)^p] ≤ εᵢ at every target."""
    with np.errstate(all="ignore"):
        if p == 1.0:
            h = eps / d
        else:
            l0 = math.log(a)
            h = l0 * np.expm1(np.log1p(eps / (d * l0**p)) / p)
        return float(np.max(prob.deltas / (a * np.expm1(h))))


def _epl_a_note(v: float, vlo: float, vhi: float, a: float, p: float) -> list[str]:
    span = vhi - vlo
    if v <= vlo + 1e-3 * span:
        return [f"the best offset a = {_fmt(a)} is the smallest valid one for p = {p:g} "
                f"(the policy needs a >= e^(p-1) and a > 1)"]
    if v >= vhi - 1e-3 * span:
        return [f"the best offset a = {_fmt(a)} is at the edge of the searched range "
                f"(ln a <= {_EPL_LNA_MAX:g}); for large a, p = 2 behaves like p = 1 with decay "
                "2d*ln(a), and a large decay approaches the Laplace mechanism (compare "
                "family='laplace')"]
    return []


_GL_X, _GL_W = np.polynomial.legendre.leggauss(20)


def _epl2_log_m2(a: float, d: float) -> float:
    """Log of E[(|Z|/σ)²] of ExpPolyLog noise with p = 2, accurate to ~1e-9 for every a, d.

    With S = ln(|Z|/σ + a) − ln a ≥ 0, |Z|/σ = a·expm1(S) and S is a normal law N(μ, τ²),
    μ = 1/(2d) − ln a, τ² = 1/(2d), truncated to [0, ∞) (complete the square in the exponent
    t − d·t² of docs/math/additive.md §3). E[expm1(S)²] is integrated by composite Gauss–Legendre on
    geometric panels, in logs: no cancellation for large d·ln a (where the closed form
    e^{2/d}K_{3/2} − 2a·e^{3/(4d)}K₁ + a²K_{1/2} cancels), no overflow. Used by the search only;
    reported errors come from the mechanism itself.
    """
    l0 = math.log(a)
    tau2 = 0.5 / d
    tau = math.sqrt(tau2)
    mu = tau2 - l0
    peak = max(mu + 2.0 * tau2, 0.5 * (mu + math.sqrt(mu * mu + 8.0 * tau2)))
    width = tau2 / max(abs(mu), tau)
    hi = peak + 40.0 * tau + 10.0 * width
    lo = min(peak, width) * 1e-8
    edges = np.empty(41)
    edges[0] = 0.0
    edges[1:] = np.geomspace(lo, hi, 40)
    h = 0.5 * np.diff(edges)[:, None]
    x = h * (_GL_X + 1.0) + edges[:-1, None]
    with np.errstate(all="ignore"):
        ell = 2.0 * np.log(np.expm1(x)) - (x - mu) ** 2 / (2.0 * tau2) + np.log(h * _GL_W)
    m = float(ell.max())
    if not math.isfinite(m):
        return math.inf
    log_num = m + math.log(float(np.exp(ell - m).sum()))
    log_z = math.log(tau) + 0.5 * math.log(2.0 * math.pi) + float(log_ndtr(mu / tau))
    return 2.0 * l0 + log_num - log_z


def _solve_epl_p(prob: _Problem, eps: np.ndarray, p: float, pinned: dict[str, Any],
                 kind: str) -> _Solved:
    def make(a: float, d: float) -> Callable[[float], Mechanism]:
        return lambda s: ExpPolyLog(sigma=s, a=a, d=d, p=p)

    def err(a: float, d: float) -> float:
        sigma = _epl_sigma(prob, eps, p, a, d)
        if p == 2.0 and kind == "sd":  # fast, accurate variance for the search
            if not (math.isfinite(sigma) and sigma > 0.0):
                return _BAD
            v = math.log(sigma) + 0.5 * _epl2_log_m2(a, d)
            return v if math.isfinite(v) and v < 700.0 else _BAD
        return _log_err(_build(make(a, d), sigma), prob, kind)

    notes: list[str] = []
    searched: list[str] = []
    # d: searched as d = floor + e^u
    if p == 1.0:
        d_floor = 3.0 if kind == "sd" else 1.0
    else:
        d_floor = 0.0
    dlo, dhi = _EPL_D_RANGE

    def d_of(u: float) -> float:
        return d_floor + math.exp(u)

    if p == 1.0:
        # the law depends on σ·a only: a is redundant, use a = 1 unless pinned
        a = float(pinned.get("a", 1.0))
        if "a" not in pinned:
            notes.append("for p = 1 the noise law depends on σ·a only, so a = 1 is used "
                         "(pinning another a rescales σ and changes nothing else)")
        if "d" in pinned:
            d = float(pinned["d"])
        else:
            u, _ = _min1d(lambda u: err(a, d_of(u)), dlo, dhi)
            d = d_of(u)
            searched.append("d")
            notes += _edge_note("decay d", u, dlo, dhi, d,
                                "large d approaches the Laplace mechanism")
        return _finalize(make(a, d), _epl_sigma(prob, eps, p, a, d), prob,
                         "exp_polylog"), tuple(searched), notes
    # p > 1: ln a in [max(p-1, tiny), 300], searched as log(ln a); d > 0 as log d
    l0_min = max(p - 1.0, 1e-6)
    vlo, vhi = math.log(l0_min), math.log(_EPL_LNA_MAX)

    def a_of(v: float) -> float:
        return max(math.exp(math.exp(v)), math.exp(p - 1.0))

    if "a" in pinned and "d" in pinned:
        a, d = float(pinned["a"]), float(pinned["d"])
    elif "a" in pinned:
        a = float(pinned["a"])
        u, _ = _min1d(lambda u: err(a, d_of(u)), dlo, dhi)
        d = d_of(u)
        searched.append("d")
        notes += _edge_note("decay d", u, dlo, dhi, d, "consider pinning another p")
    elif "d" in pinned:
        d = float(pinned["d"])
        v, _ = _min1d(lambda v: err(a_of(v), d), vlo, vhi)
        a = a_of(v)
        searched.append("a")
        notes += _epl_a_note(v, vlo, vhi, a, p)
    else:
        inner: dict[float, float] = {}
        n_grid = _GRID if p == 2.0 else 9  # general p uses slow quadrature

        def outer(v: float) -> float:
            u, fu = _min1d(lambda u: err(a_of(v), d_of(u)), dlo, dhi, n_grid)
            inner[v] = u
            return fu

        v, _ = _min1d(outer, vlo, vhi, max(n_grid // 2, 9))
        if v not in inner:
            outer(v)
        a, d = a_of(v), d_of(inner[v])
        searched += ["a", "d"]
        notes += _epl_a_note(v, vlo, vhi, a, p)
    return _finalize(make(a, d), _epl_sigma(prob, eps, p, a, d), prob,
                     "exp_polylog"), tuple(searched), notes


def _solve_epl(prob: _Problem, pinned: dict[str, Any], kind: str) -> _Solved:
    # validate the pinned values with a trial construction
    trial_p = [float(pinned["p"])] if "p" in pinned else [1.0, 2.0]
    if "p" in pinned:
        try:
            p0 = check_real("p", pinned["p"], owner="ExpPolyLog", ge=1.0,
                            hint="p = 1 (loss ~ d ln D) or p = 2 have closed forms")
        except InvalidParameterError as exc:
            raise _pinned_error("exp_polylog", pinned, exc) from None
        trial_p = [p0]
    for name in ("a", "d"):
        if name in pinned:
            try:
                check_real(name, pinned[name], owner="ExpPolyLog", gt=0.0)
            except InvalidParameterError as exc:
                raise _pinned_error("exp_polylog", pinned, exc) from None
    usable: list[float] = []
    reasons: list[str] = []
    for p in trial_p:
        a = float(pinned.get("a", math.exp(p - 1.0) if p == 1.0 else math.exp(max(p - 1, 1.0))))
        d = float(pinned.get("d", 4.0))
        try:
            ExpPolyLog(sigma=1.0, a=a, d=d, p=p)
        except InvalidParameterError as exc:
            reasons.append(f"p={p:g}: {exc}")
            continue
        usable.append(p)
    if not usable:
        raise _pinned_error("exp_polylog", pinned, InvalidParameterError("\n".join(reasons)))
    eps = prob.eps()
    best: _Solved | None = None
    best_err = math.inf
    for p in usable:
        try:
            sol = _solve_epl_p(prob, eps, p, pinned, kind)
        except CalibrationError as exc:
            reasons.append(f"p={p:g}: {exc}")
            continue
        e = _error_of(sol[0], prob, kind)
        if best is None or e < best_err:
            best, best_err = sol, e
    if best is None:
        raise CalibrationError("calibrate('exp_polylog'): no usable p:\n" + "\n".join(reasons))
    mech, searched, notes = best
    if "p" not in pinned:
        searched = ("p", *searched)
        p_best = float(mech.params()["p"])
        notes = [f"p searched over {{1, 2}} (closed forms); p = {p_best:g} is better for these "
                 "targets; other p >= 1 can be pinned"] + notes
        notes += [f"not possible with the pinned parameters: {r.splitlines()[0]}"
                  for r in reasons]
    return mech, searched, notes


def _offset_range(prob: _Problem) -> tuple[float, float]:
    s = math.log10(prob.scale)
    return ((s + _OFFSET_DECADES[0]) * math.log(10.0), (s + _OFFSET_DECADES[1]) * math.log(10.0))


def _root_sigma(prob: _Problem, k: float, a: float) -> float:
    with np.errstate(all="ignore"):
        if a == 0.0:
            gap = prob.deltas ** (1.0 / k)
        else:
            gap = a ** (1.0 / k) * np.expm1(np.log1p(prob.deltas / a) / k)
        return float(np.max(gap / np.sqrt(2.0 * prob.rhos)))


def _solve_root(prob: _Problem, pinned: dict[str, Any], kind: str) -> _Solved:
    estimator = pinned.get("estimator", "mean")
    try:
        RootTransform(k=pinned.get("k", 1), sigma=1.0, offset=pinned.get("offset", 0.0),
                      estimator=estimator)
    except InvalidParameterError as exc:
        raise _pinned_error("root", pinned, exc) from None
    notes: list[str] = []
    if "estimator" not in pinned:
        notes.append("estimator 'mean' (mean-unbiased, integer k) is used; pin "
                     "estimator='median' for median-unbiased estimates and real k")

    def make(k: float, a: float) -> Callable[[float], Mechanism]:
        return lambda s: RootTransform(k=k, sigma=s, offset=a, estimator=estimator)

    def err(k: float, a: float) -> float:
        return _log_err(_build(make(k, a), _root_sigma(prob, k, a)), prob, kind)

    lo, hi = _offset_range(prob)

    def best_offset(k: float, n: int = _GRID) -> tuple[float, float, list[str]]:
        if "offset" in pinned:
            a = float(pinned["offset"])
            return a, err(k, a), []
        if k == 1.0:
            return 0.0, err(k, 0.0), []
        la, fa = _min1d(lambda la: err(k, math.exp(la)), lo, hi, n)
        f0 = err(k, 0.0)
        if f0 <= fa:
            return 0.0, f0, []
        return math.exp(la), fa, _edge_note(
            "offset", la, lo, hi, math.exp(la),
            "a large offset makes the root nearly linear (Gaussian-like)")

    searched: list[str] = [] if "offset" in pinned else ["offset"]
    if "k" in pinned:
        k = float(pinned["k"])
        a, _, more = best_offset(k)
        if k == 1.0 and "offset" not in pinned:
            searched = []
            notes.append("k = 1 is the Gaussian mechanism; the offset has no effect (0 used)")
        notes += more
        return _finalize(make(k, a), _root_sigma(prob, k, a), prob, "root"), tuple(searched), notes
    searched.insert(0, "k")
    if estimator == "mean":
        cands = [(k, *best_offset(float(k))) for k in range(1, _K_MAX + 1)]
        k_best, a, fbest, more = min(cands, key=lambda c: c[2])
        k = float(k_best)
        if k_best == _K_MAX:
            more = more + [f"k = {_K_MAX} is the largest root order searched; the log "
                           "transform is the k -> infinity limit (try family='log')"]
    else:
        inner: dict[float, tuple[float, list[str]]] = {}

        def outer(k: float) -> float:
            a, fa, mo = best_offset(k, 17)
            inner[k] = (a, mo)
            return fa

        k, _ = _min1d(outer, 1.0, float(_K_MAX), _K_MAX)
        if k not in inner:
            outer(k)
        a, more = inner[k]
        more = more + _edge_note("root order k", k, 1.0, float(_K_MAX), k,
                                 "the log transform is the k -> infinity limit")
    if k == 1.0:
        a = 0.0
        searched = ["k"]
        more = ["k = 1 (the Gaussian mechanism) is best for these targets"]
    return (_finalize(make(k, a), _root_sigma(prob, k, a), prob, "root"), tuple(searched),
            notes + more)


def _log_sigma(prob: _Problem, a: float) -> float:
    with np.errstate(all="ignore"):
        return float(np.max(np.log1p(prob.deltas / a) / np.sqrt(2.0 * prob.rhos)))


def _solve_log(prob: _Problem, pinned: dict[str, Any], kind: str) -> _Solved:
    estimator = pinned.get("estimator", "mean")
    try:
        LogTransform(sigma=1.0, offset=pinned.get("offset", 1.0), estimator=estimator)
    except InvalidParameterError as exc:
        raise _pinned_error("log", pinned, exc) from None
    notes: list[str] = []
    if "estimator" not in pinned:
        notes.append("estimator 'mean' (mean-unbiased) is used; pin estimator='median' for "
                     "median-unbiased estimates")

    def make(a: float) -> Callable[[float], Mechanism]:
        return lambda s: LogTransform(sigma=s, offset=a, estimator=estimator)

    if "offset" in pinned:
        a = float(pinned["offset"])
        return _finalize(make(a), _log_sigma(prob, a), prob, "log"), (), notes
    lo, hi = _offset_range(prob)
    la, _ = _min1d(lambda la: _log_err(_build(make(math.exp(la)),
                                              _log_sigma(prob, math.exp(la))), prob, kind),
                   lo, hi)
    a = math.exp(la)
    notes += _edge_note("offset", la, lo, hi, a,
                        "a very large offset approaches the Gaussian mechanism "
                        "(try family='gaussian')")
    return _finalize(make(a), _log_sigma(prob, a), prob, "log"), ("offset",), notes


def _split_sigma(prob: _Problem, tau: np.ndarray) -> np.ndarray:
    """σ needed for each threshold in ``tau`` (vectorized): maxᵢ τ·A(Δᵢ)/√(2ρᵢ)."""
    rows = np.maximum(1.0, ceil_snap(prob.deltas[None, :] / tau[:, None]))
    return np.max(tau[:, None] * rows / np.sqrt(2.0 * prob.rhos)[None, :], axis=1)


def _solve_split(prob: _Problem, pinned: dict[str, Any], kind: str) -> _Solved:
    if "threshold" in pinned:
        try:
            UnitSplitting(threshold=pinned["threshold"], sigma=1.0)
        except InvalidParameterError as exc:
            raise _pinned_error("unit_splitting", pinned, exc) from None
        tau = float(pinned["threshold"])
        sigma = float(_split_sigma(prob, np.array([tau]))[0])
        return (_finalize(lambda s: UnitSplitting(threshold=tau, sigma=s), sigma, prob,
                          "unit_splitting"), (), [])
    # σ(τ) is piecewise increasing in τ between the breakpoints Δᵢ/n: its minimum is at one
    m = prob.deltas.size
    n_max = int(min(_SPLIT_CANDIDATES, max(50, 2_000_000 // (m * m))))
    n = np.arange(1, n_max + 1, dtype=float)
    cands = np.unique((prob.deltas[:, None] / n[None, :]).ravel())[::-1]  # decreasing τ
    sig = _split_sigma(prob, cands)
    smin = float(sig.min())
    j = int(np.argmax(sig <= smin * (1.0 + 1e-12)))  # largest τ attaining the minimum
    tau = float(cands[j])
    sigma = float(sig[j])
    gauss = float(np.max(prob.deltas / np.sqrt(2.0 * prob.rhos)))
    notes = ["unit splitting never beats the Gaussian mechanism (its loss is >= Δ²/(2σ²)); "
             "the threshold chosen is the largest one giving the smallest noise"]
    if sigma <= gauss * (1.0 + 1e-9):
        notes[0] += ", here the Gaussian mechanism's σ"
    return (_finalize(lambda s: UnitSplitting(threshold=tau, sigma=s), sigma, prob,
                      "unit_splitting"), ("threshold",), notes)


_SOLVERS: dict[str, Callable[[_Problem, dict[str, Any], str], _Solved]] = {
    "gaussian": _solve_gaussian,
    "laplace": _solve_laplace,
    "generalized_gaussian": _solve_gg,
    "exp_polylog": _solve_epl,
    "root": _solve_root,
    "log": _solve_log,
    "unit_splitting": _solve_split,
}


# -- results ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CalibrationResult:
    """The calibrated mechanism of one family, with how it meets the targets and its error.

    Attributes:
        family: Canonical family name (one of [`FAMILIES`][tabdp.calibrate.FAMILIES]).
        mechanism: The calibrated mechanism instance, ready to release.
        params: Its public parameters (``mechanism.params()``).
        targets: The targets, record size Δ → largest PRzCDP ρ allowed.
        achieved: The mechanism's loss ``mechanism.rho(Δ)`` at each target size (≤ the target).
        binding: The record sizes whose target holds with equality (they fix σ).
        sd: Standard deviation of the estimate of a cell with true total ``typical_total``
            (``inf`` if it does not exist).
        moe: Margin of error (interval half-width) at ``level`` for that cell.
        level: Confidence level of ``moe``.
        objective: ``"sd"`` or ``"moe"``: the error measure that was minimized.
        typical_total: The typical cell total the error refers to.
        searched: Shape parameters that were optimized (σ is always solved for).
        pinned: Parameters the caller fixed.
        notes: Remarks on the solution (implied targets, edges of search ranges, fallbacks).

    Example:
        >>> res = calibrate("gaussian", {1e3: 0.5}, typical_total=1e5)
        >>> res.mechanism, res.binding, res.objective, res.error
        (Gaussian(sigma=1000.0), (1000.0,), 'sd', 1000.0)
    """

    family: str
    mechanism: Mechanism
    params: Mapping[str, Any]
    targets: Mapping[float, float]
    achieved: Mapping[float, float]
    binding: tuple[float, ...]
    sd: float
    moe: float
    level: float
    objective: str
    typical_total: float
    searched: tuple[str, ...] = ()
    pinned: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def error(self) -> float:
        """The minimized error measure: ``sd`` or ``moe`` according to `objective`.

        Example:
            >>> calibrate("laplace", {1.0: 10.0}, typical_total=0.0).error > 0
            True
        """
        return self.sd if self.objective == "sd" else self.moe

    def explain(self) -> str:
        """Human-readable account of the calibration: mechanism, objective, losses vs targets.

        Returns:
            Multi-line text.

        Example:
            >>> text = calibrate("gaussian", {1e3: 0.5, 1e7: 10.0}, 1e6).explain()
            >>> print(text.splitlines()[0])
            Calibrated gaussian mechanism: Gaussian(sigma=2236067.97749979)
            >>> print(text.splitlines()[1])  # doctest: +NORMALIZE_WHITESPACE
            Objective: minimize the standard deviation of the estimate of a cell
            with true total 1e+06
        """
        pct = f"{100 * self.level:g}%"
        what = ("the standard deviation" if self.objective == "sd"
                else f"the {pct} margin of error")
        lines = [f"Calibrated {self.family} mechanism: {self.mechanism!r}",
                 f"Objective: minimize {what} of the estimate of a cell with true total "
                 f"{self.typical_total:g}",
                 f"  sd = {_fmt(self.sd)}, {pct} margin of error = {_fmt(self.moe)}"]
        if self.searched:
            lines.append("  searched: " + ", ".join(self.searched) + " (and the scale σ)")
        else:
            lines.append("  searched: the scale σ only")
        if self.pinned:
            lines.append("  pinned: " + ", ".join(f"{k}={v!r}" for k, v in self.pinned.items()))
        lines.append("Per-record PRzCDP loss at the target sizes:")
        w = max(12, *(len(_fmt_delta(d)) for d in self.targets))
        lines.append(f"  {'size Δ':>{w}}  {'target ρ':>12}  {'achieved ρ':>12}  status")
        for d, t in self.targets.items():
            got = self.achieved[d]
            if d in self.binding:
                status = "binding"
            elif got > 0 and t / got < 1.01:
                status = f"slack ({100 * (1 - got / t):.2g}% below target)"
            else:
                status = f"slack (x{t / got:.3g})" if got > 0 else "slack"
            lines.append(f"  {_fmt_delta(d):>{w}}  {_fmt(t):>12}  {_fmt(got):>12}  {status}")
        if self.notes:
            lines.append("Notes:")
            lines += [f"  - {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        """Same as [`explain`][tabdp.CalibrationResult.explain]."""
        return self.explain()


@dataclass(frozen=True)
class FamilyComparison:
    """The best calibration of each family for the same targets, sorted by error (best first).

    Attributes:
        results: One [`CalibrationResult`][tabdp.CalibrationResult] per family that could be
            calibrated, best first.
        failed: Families that could not be calibrated, with the reason.
        sort_by: ``"sd"`` (then ``moe``) or ``"moe"``: the ranking key.
        typical_total: The typical cell total the errors refer to.
        level: Confidence level of the margins of error.

    Example:
        >>> cmp = compare_families({1e3: 0.5}, 1e3, families=["gaussian", "laplace"])
        >>> [r.family for r in cmp], cmp.best.family
        (['gaussian', 'laplace'], 'gaussian')
    """

    results: tuple[CalibrationResult, ...]
    failed: Mapping[str, str]
    sort_by: str
    typical_total: float
    level: float

    @property
    def best(self) -> CalibrationResult:
        """The result with the smallest error.

        Example:
            >>> compare_families({1.0: 1.0}, 0.0, families=["gaussian"]).best.family
            'gaussian'
        """
        return self.results[0]

    def __iter__(self) -> Iterator[CalibrationResult]:
        """Iterate over the results, best first."""
        return iter(self.results)

    def __len__(self) -> int:
        """Number of families calibrated."""
        return len(self.results)

    def __getitem__(self, i: int) -> CalibrationResult:
        """The ``i``-th best result."""
        return self.results[i]

    def to_rows(self) -> list[dict[str, Any]]:
        """One dict per family (best first), e.g. for ``pandas.DataFrame(cmp.to_rows())``.

        Returns:
            Rows with keys rank, family, mechanism, sd, moe, objective, binding, params.

        Example:
            >>> rows = compare_families({1e3: 0.5}, 1e3, families=["gaussian"]).to_rows()
            >>> rows[0]["family"], rows[0]["sd"], rows[0]["binding"]
            ('gaussian', 1000.0, (1000.0,))
        """
        return [{"rank": i + 1, "family": r.family, "mechanism": repr(r.mechanism),
                 "sd": r.sd, "moe": r.moe, "objective": r.objective, "binding": r.binding,
                 "params": dict(r.params)} for i, r in enumerate(self.results)]

    def to_text(self) -> str:
        """A plain-text table of the ranking (and of the families that failed).

        Returns:
            Multi-line text.

        Example:
            >>> print(compare_families({1e3: 0.5}, 1e3, families=["gaussian"]).to_text())
            ... # doctest: +ELLIPSIS
            rank  family ...
               1  gaussian ...
        """
        pct = f"moe({100 * self.level:g}%)"
        head = f"{'rank':>4}  {'family':<20}  {'sd':>11}  {pct:>11}  {'binding Δ':>11}  mechanism"
        lines = [head]
        for i, r in enumerate(self.results):
            bind = ",".join(_fmt_delta(b) for b in r.binding)
            lines.append(f"{i + 1:>4}  {r.family:<20}  {_fmt(r.sd):>11}  {_fmt(r.moe):>11}  "
                         f"{bind:>11}  {r.mechanism!r}")
        for fam, why in self.failed.items():
            first = why.splitlines()[0] if why else ""
            lines.append(f"   -  {fam:<20}  failed: {first}")
        return "\n".join(lines)

    def __str__(self) -> str:
        """Same as [`to_text`][tabdp.FamilyComparison.to_text]."""
        return self.to_text()


# -- public API ---------------------------------------------------------------------------------
def _run(family: str, prob: _Problem, fixed: Mapping[str, Any]) -> CalibrationResult:
    pinned = _normalize_fixed(family, fixed)
    solver = _SOLVERS[family]
    try:
        return _run_solver(family, prob, pinned, solver)
    except (OverflowError, ZeroDivisionError, FloatingPointError) as exc:
        # extreme record sizes or targets: parameters outside the range of doubles
        raise CalibrationError(
            f"calibrate({family!r}): the parameters meeting these targets lie outside the range "
            f"of floating point numbers ({type(exc).__name__}: {exc}); record sizes "
            f"{[_fmt_delta(float(d)) for d in prob.deltas]}, targets "
            f"{[_fmt(float(r)) for r in prob.rhos]}.\nHint: check the units of the record "
            "sizes and targets (e.g. express money in thousands), or use another family "
            "(compare_families shows which work).") from None


def _run_solver(family: str, prob: _Problem, pinned: dict[str, Any],
                solver: Callable[[_Problem, dict[str, Any], str], _Solved]) -> CalibrationResult:
    notes: list[str] = []
    kind = "moe" if prob.objective == "moe" else "sd"
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        mech, searched, more = solver(prob, pinned, kind)
    sd = _error_of(mech, prob, "sd")
    moe = _error_of(mech, prob, "moe")
    if kind == "sd" and not math.isfinite(sd):
        if prob.objective == "sd":
            raise CalibrationError(
                f"calibrate({family!r}): the standard deviation at typical_total="
                f"{prob.typical_total:g} is infinite (or overflows) for every allowed parameter "
                f"({mech!r}).\nHint: use objective='moe' (margin of error), or pin parameters "
                "with a finite variance (ExpPolyLog with p = 1 needs d > 3).")
        kind = "moe"
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            mech, searched, more = solver(prob, pinned, kind)
        sd = _error_of(mech, prob, "sd")
        moe = _error_of(mech, prob, "moe")
        notes.append(f"the standard deviation is infinite (or overflows) for every allowed "
                     f"parameter, so the {100 * prob.level:g}% margin of error was minimized "
                     "instead")
    if kind == "moe" and not math.isfinite(moe):
        raise CalibrationError(
            f"calibrate({family!r}): the error at typical_total={prob.typical_total:g} is not "
            f"representable (overflows) for every allowed parameter ({mech!r}): the targets are "
            "too strict for this family.\nHint: loosen the targets or use another family "
            "(compare_families shows which work).")
    with np.errstate(all="ignore"):
        achieved_arr = np.asarray(mech.rho(prob.deltas), dtype=float)
    binding = tuple(k for k, got, t in zip(prob.keys, achieved_arr, prob.rhos, strict=True)
                    if got >= t * (1.0 - _REL_BIND))
    # targets implied by a stricter target at a larger size
    for i, (d, t) in enumerate(zip(prob.deltas, prob.rhos, strict=True)):
        stricter = [float(prob.deltas[j]) for j in range(i + 1, len(prob.deltas))
                    if prob.rhos[j] <= t]
        if stricter:
            notes.append(f"the target at Δ={_fmt_delta(float(d))} (ρ={_fmt(float(t))}) is implied "
                         f"by the stricter target at the larger size Δ={_fmt_delta(stricter[0])} "
                         "(every policy increases with Δ), so it cannot bind")
    return CalibrationResult(
        family=family,
        mechanism=mech,
        params=MappingProxyType(dict(mech.params())),
        targets=MappingProxyType(dict(zip(prob.keys, map(float, prob.rhos), strict=True))),
        achieved=MappingProxyType(dict(zip(prob.keys, map(float, achieved_arr), strict=True))),
        binding=binding,
        sd=sd,
        moe=moe,
        level=prob.level,
        objective=kind,
        typical_total=prob.typical_total,
        searched=tuple(searched),
        pinned=MappingProxyType(dict(pinned)),
        notes=tuple(list(more) + notes),
    )


def calibrate(family: str, targets: Mapping[float, float], typical_total: float, *,
              level: float = DEFAULT_LEVEL, objective: str = "auto",
              **fixed: Any) -> CalibrationResult:
    """Find the parameters of one mechanism family that meet per-record loss targets best.

    The result meets ``mechanism.rho(Δ) ≤ ρ`` for every target ``Δ: ρ``; its scale σ is the
    smallest that does (so at least one target binds), and its shape parameters minimize the error
    of a cell whose true total is ``typical_total``: the standard deviation of the estimate
    (``objective="auto"`` or ``"sd"``), or the margin of error at ``level`` (``"moe"``, and the
    ``"auto"`` fallback where the sd is infinite for every allowed parameter).

    Shape parameters searched unless pinned through ``**fixed``:

    * ``"gaussian"``, ``"laplace"``: none (closed forms);
    * ``"generalized_gaussian"``: ``p`` in [0.02, 1];
    * ``"exp_polylog"``: ``p`` in {1, 2} (any p ≥ 1 may be pinned), ``d`` (p = 1: d > 3 so the
      variance is finite; with objective "moe" d > 1), ``a`` (p > 1; for p = 1 it is redundant
      with σ and set to 1);
    * ``"root"``: ``k`` (whole numbers 1..16 for ``estimator="mean"``, the default; real k in
      [1, 16] for ``estimator="median"``) and ``offset`` (alias ``a``, including 0);
    * ``"log"``: ``offset`` (alias ``a``); ``estimator`` may be pinned (default "mean");
    * ``"unit_splitting"``: ``threshold`` (alias ``tau``).

    Args:
        family: One of [`FAMILIES`][tabdp.calibrate.FAMILIES], or a class name such as
            ``"RootTransform"`` (case-insensitive).
        targets: Record size Δ (per-record sensitivity, > 0) → largest PRzCDP loss ρ (> 0)
            allowed for records of that size, e.g. ``{1e3: 0.5, 1e7: 10.0}``.
        typical_total: True total of a typical cell (≥ 0); the error is measured there.
        level: Confidence level of margins of error.
        objective: ``"auto"`` (default), ``"sd"`` or ``"moe"``.
        **fixed: Pinned parameters, e.g. ``k=4``, ``p=1``, ``d=5``, ``offset=1000``,
            ``estimator="median"``, ``threshold=10``. The scale σ cannot be pinned.

    Returns:
        A [`CalibrationResult`][tabdp.CalibrationResult]; ``result.explain()`` describes it.

    Raises:
        InvalidParameterError: For malformed input: unknown family, empty targets, sizes or
            targets that are not finite and > 0, negative ``typical_total``, bad ``level`` or
            ``objective``, a parameter the family does not have.
        CalibrationError: When no allowed parameters can work: a pinned parameter outside its
            valid range, an error that is infinite or overflows for every allowed parameter
            (with ``objective="sd"``), or targets needing a σ outside floating point range.

    Example:
        >>> res = calibrate("gaussian", {1e3: 0.5}, typical_total=1e6)
        >>> res.params
        mappingproxy({'sigma': 1000.0})
        >>> res = calibrate("root", {1e3: 0.5, 1e7: 10.0}, typical_total=1e6, k=4)
        >>> float(res.mechanism.rho(1e7)) <= 10.0, res.searched
        (True, ('offset',))
    """
    name = _canonical_family(family)
    prob = _validate_targets(targets, typical_total, level, objective)
    return _run(name, prob, fixed)


def compare_families(targets: Mapping[float, float], typical_total: float,
                     families: Sequence[str] | None = None, *, level: float = DEFAULT_LEVEL,
                     objective: str = "auto",
                     fixed: Mapping[str, Mapping[str, Any]] | None = None) -> FamilyComparison:
    """Calibrate several families for the same targets and rank them by error.

    Args:
        targets: Record size Δ → largest PRzCDP loss ρ allowed (see
            [`calibrate`][tabdp.calibrate.calibrate]).
        typical_total: True total of a typical cell (≥ 0).
        families: Families to try (default: all of [`FAMILIES`][tabdp.calibrate.FAMILIES]).
        level: Confidence level of margins of error.
        objective: ``"auto"``, ``"sd"`` or ``"moe"`` (see [`calibrate`][tabdp.calibrate.calibrate]);
            ``"moe"`` also ranks by margin of error, otherwise results rank by sd, then margin of
            error.
        fixed: Pinned parameters per family, e.g. ``{"root": {"k": 4}}``.

    Returns:
        A [`FamilyComparison`][tabdp.FamilyComparison], best family first; families that could not
        be calibrated are listed in ``failed`` with the reason.

    Raises:
        InvalidParameterError: For malformed targets, an unknown family, or pinned parameters for
            a family not in ``families``.

    Example:
        >>> cmp = compare_families({1e3: 0.5, 1e7: 10.0}, 1e6,
        ...                        families=["gaussian", "log", "laplace"])
        >>> [r.family for r in cmp]
        ['log', 'laplace', 'gaussian']
    """
    prob = _validate_targets(targets, typical_total, level, objective)
    names = [_canonical_family(f) for f in (FAMILIES if families is None else families)]
    if not names:
        raise InvalidParameterError(
            "compare_families: families is empty.\nHint: leave it out to try every family.")
    names = list(dict.fromkeys(names))
    pins: dict[str, Mapping[str, Any]] = {}
    for fam, kw in (fixed or {}).items():
        canon = _canonical_family(fam)
        if canon not in names:
            raise InvalidParameterError(
                f"compare_families: parameters are pinned for {fam!r}, which is not among the "
                f"families compared ({', '.join(names)}).\nHint: add it to families or drop it.")
        pins[canon] = kw
    results: list[CalibrationResult] = []
    failed: dict[str, str] = {}
    for name in names:
        try:
            results.append(_run(name, prob, pins.get(name, {})))
        except CalibrationError as exc:
            failed[name] = str(exc)
    sort_by = "moe" if objective == "moe" else "sd"

    def key(r: CalibrationResult) -> tuple[float, float]:
        return (r.moe, r.sd) if sort_by == "moe" else (r.sd, r.moe)

    results.sort(key=key)
    if not results:
        raise CalibrationError(
            "compare_families: no family could be calibrated:\n"
            + "\n".join(f"{k}: {v}" for k, v in failed.items()))
    return FamilyComparison(tuple(results), MappingProxyType(failed), sort_by,
                            prob.typical_total, prob.level)
