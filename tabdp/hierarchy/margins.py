"""Certified margins of error of a consistent table's cells under non-Gaussian noise.

A consistent cell's error (before the output rounding) is a fixed linear combination
``S = Σ_j L_cj e_j`` of the independent noise draws ``e_j`` of the measured cells, with public
weights (the GLS estimator's row ``L_c``) and public laws. Its margin at a level is computed
here from that law, so that ``P(|S| ≤ margin) ≥ level`` holds for the cell itself, not only in
the normal approximation (which under-covers above 90% for Laplace-like noise: review r84).

Method (docs/hierarchy.md, "Uncertainty and the law of the error"):

* **Weights.** Row ``c`` of the estimator is ``L_c = 1_cᵀ P⁻¹ AᵀW`` with ``P = AᵀWA`` symmetric:
  the solve of the finest measurements ``y = 1_c / w`` (``1_c`` the finest cells below the
  cell) gives ``u = P⁻¹1_c``, and ``L_cj = w_j · Σ_{i ≤ j} u_i`` for every measured cell ``j``
  (one batched solve per chunk of output cells).
* **Grouping.** Terms with the same law and the same weight share a factor ``φ(a·t)^n`` of the
  characteristic function. For continuous laws (Gaussian, Laplace, logistic: symmetric
  unimodal) each ``|a|`` is rounded *up* to a relative grid of 1e-3: by Anderson's theorem
  (``P(|R + c| ≤ x)`` is non-increasing in ``|c|`` for ``R`` symmetric unimodal, and sums of
  independent symmetric unimodal laws are symmetric unimodal), the coverage can only fall, so
  the margin stays valid (at most 0.1% wider). Discrete laws group only equal weights (to
  1e-9 relative).
* **Inversion.** ``S`` plus an independent ``N(0, ε²)`` (``ε = 0.005 sd``) has the coverage
  ``C(x) = (2/π)∫₀^∞ φ(t)e^{−ε²t²/2} sin(tx)/t dt``; its trapezoid sum with step ``dt`` is the
  exact coverage of the law wrapped with period ``2π/dt`` (Poisson summation). Three neglected
  terms are bounded, not estimated: the wrapped mass (Chernoff bound on ``|S + εN| ≥ P/2``
  with the exact cumulant generating functions: below 1e-7), the frequencies beyond the last
  one kept (``|φ| ≤ 1`` and the Gaussian factor: below 1e-7), and the smoothing
  (``|εN| ≤ ε·z`` but with probability ``η``, added to the margin). The margin is the
  smallest ``x`` (Newton, then checked) whose lower bound reaches ``level`` plus these
  allowances, plus ``ε·z``.
* **Other laws** (generalized Gaussian p ∉ {1, 2}, exponential-polylog, Subbotin, ...: no
  closed-form characteristic function; all symmetric with a density non-increasing in ``|x|``):
  their sum is symmetric unimodal (Wintner), and Gauss's inequality
  ``P(|S| > k·sd) ≤ 4/(9k²)`` (``k ≥ 2/√3``; ``≤ 1 − k/√3`` below) gives the margin
  ``sd·2/(3√(1−level))`` (``sd·√3·level`` below a level of 2/3; conservative: 2.11 sd at 90%,
  2.98 sd at 95%). Beside a discrete law (a lattice law, no density) Chebyshev's
  ``sd/√(1−level)`` instead.

Everything here reads the public weights, laws and level only: the margin does not depend on
the released values.

Example:
    >>> from tabdp.mechanisms import Laplace
    >>> law = noise_law(Laplace(scale=1.0), "x")
    >>> m = margins([[(law, 1.0, 1)]], 0.95)      # one Laplace term: b·ln(20) = 2.9957
    >>> 2.9957 <= float(m[0]) < 2.9957 * 1.03
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import erfc, ndtri

from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms import Mechanism

__all__ = ["NoiseLaw", "UNIFORM", "noise_law", "group_terms", "group_block", "margins",
           "rounding_radius", "gauss_margin", "chebyshev_margin", "SMOOTH", "BIN"]

#: Smoothing sd (in units of the cell's sd) of the inversion.
SMOOTH = 0.005
#: Relative grid the weights of continuous laws are rounded up to.
BIN = 1e-3
#: Tolerance under which two weights of a discrete law are one (float noise of the solve).
_SAME = 1e-9
#: Bounds of the wrapped mass and of the dropped frequencies.
_ETA_WRAP = 1e-7
_ETA_TRUNC = 1e-7
#: Cells per batch of the inversion.
_CHUNK = 128


@dataclass(frozen=True)
class NoiseLaw:
    """The public law of one measured level's noise, standardised.

    Attributes:
        family: ``"gauss"``, ``"laplace"``, ``"logistic"`` (scale families: a term's weight is
            ``|L|·scale`` on the standard law), ``"dlaplace"`` (parameter t), ``"dgauss"``
            (parameter σ²), ``"generic"`` (symmetric unimodal, Gauss's inequality), or
            ``"uniform"`` (on (−½, ½): the stochastic rounding of a finest cell, see
            `UNIFORM`).
        param: ``scale`` for the scale families, ``t`` or ``σ²`` for the discrete ones, the sd
            for ``"generic"``.
        var: The variance of one draw.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> noise_law(Gaussian(sigma=2.0), "x")
        NoiseLaw(family='gauss', param=2.0, var=4.0)
    """

    family: str
    param: float
    var: float

    @property
    def continuous(self) -> bool:
        """Whether the law has a density (symmetric unimodal)."""
        return self.family in ("gauss", "laplace", "logistic", "generic", "uniform")

    @property
    def scale_family(self) -> bool:
        """Whether a term is a weight times the family's standard member."""
        return self.family in ("gauss", "laplace", "logistic")


def noise_law(mechanism: Mechanism, measure: str) -> NoiseLaw:
    """The [`NoiseLaw`][tabdp.hierarchy.margins.NoiseLaw] of an additive mechanism's noise.

    Args:
        mechanism: The mechanism of a measured level.
        measure: The measure (a joint mechanism is split per measure).

    Returns:
        The law.

    Raises:
        InvalidParameterError: For a mechanism without an additive law.

    Example:
        >>> from tabdp.mechanisms import DiscreteLaplace
        >>> noise_law(DiscreteLaplace(scale=2.0), "x").family
        'dlaplace'
    """
    mech: Any = mechanism
    if getattr(mech, "joint", False) and hasattr(mech, "measure_mechanism"):
        mech = mech.measure_mechanism(measure)
    law = mech.sum_law()
    noise = law.noise
    var = float(noise.variance())
    if law.kind == "gaussian":
        return NoiseLaw("gauss", float(law.scale), var)
    if law.kind in ("laplace", "logistic"):
        return NoiseLaw(law.kind, float(law.scale), var)
    if law.kind == "integer":
        if hasattr(noise, "sigma2_exact"):
            return NoiseLaw("dgauss", float(noise.sigma2_exact), var)
        return NoiseLaw("dlaplace", float(noise.scale_exact), var)
    if law.kind == "lattice":
        return NoiseLaw("generic", math.sqrt(var), var)
    raise InvalidParameterError(
        f"consistent: the noise of {mech!r} (law {law.kind!r}) has no certified margin in a "
        "consistent table.\nHint: use an additive mechanism with finite variance.")


#: Uniform law on (−½, ½) (weight: the grid step). The stochastic rounding of a value y to the
#: grid is, in law, ``round(y + gU)`` (up with probability frac(y)): a cell with one rounding
#: range has the published error ``S + gU + D`` with ``U`` independent of the noise and
#: ``|D| ≤ g/2`` (0 on the integer lattice, where ``P(|S + gU| ≤ h + g/2)`` is the coverage).
UNIFORM = NoiseLaw("uniform", 1.0, 1.0 / 12.0)


# -- laws -------------------------------------------------------------------------------------
def _sign_phi(law: NoiseLaw, s: np.ndarray) -> np.ndarray:
    """Sign of the characteristic function (negative only for the uniform law's sinc)."""
    if law.family == "uniform":
        return np.where(np.sinc(s / (2.0 * math.pi)) < 0, -1.0, 1.0)
    return np.ones(np.shape(s))


def _log_phi(law: NoiseLaw, s: np.ndarray) -> np.ndarray:
    """Log of the (real, positive) characteristic function at ``s = a·t`` (standardised)."""
    f = law.family
    if f == "gauss":
        return -0.5 * s * s
    if f == "uniform":   # sin(s/2)/(s/2), in absolute value
        with np.errstate(divide="ignore"):
            return np.log(np.abs(np.sinc(s / (2.0 * math.pi))))
    if f == "laplace":
        return -np.log1p(s * s)
    if f == "logistic":
        v = np.abs(math.pi * s)
        small = v < 0.1
        vs = np.where(small, v, 0.0)
        v2 = vs * vs
        series = -(v2 / 6.0 - v2**2 / 180.0 + v2**3 / 2835.0)
        vl = np.where(small, 1.0, v)
        big = np.log(vl) - vl - np.log1p(-np.exp(-2.0 * vl)) + math.log(2.0)
        return np.where(small, series, big)
    if f == "dlaplace":
        p = math.exp(-1.0 / law.param)
        q = -math.expm1(-1.0 / law.param)
        sn = np.sin(0.5 * s)
        return 2.0 * math.log(q) - np.log(q * q + 4.0 * p * sn * sn)
    if f == "dgauss":
        s2 = law.param
        r = np.remainder(s + math.pi, 2.0 * math.pi) - math.pi
        if s2 >= 1.0:   # Poisson summation (terms |j| ≥ 3 below e^-177)
            num = sum(np.exp(-0.5 * s2 * (r - 2.0 * math.pi * j) ** 2) for j in range(-2, 3))
            den = sum(math.exp(-0.5 * s2 * (2.0 * math.pi * j) ** 2) for j in range(-2, 3))
        else:           # direct sum over |k| ≤ 10σ + 2 (beyond: below e^-50 relative)
            ks = np.arange(1, int(10.0 * math.sqrt(s2)) + 3, dtype=np.float64)
            wk = np.exp(-0.5 * ks * ks / s2)
            num = 1.0 + 2.0 * np.cos(np.multiply.outer(r, ks)) @ wk
            den = 1.0 + 2.0 * float(wk.sum())
        return np.log(np.maximum(num / den, 1e-300))
    raise AssertionError(f)  # pragma: no cover - generic laws are not inverted


def _cgf(law: NoiseLaw, lam: np.ndarray) -> np.ndarray:
    """Cumulant generating function (upper bound) at ``lam = λ·a``; inf outside its domain."""
    f = law.family
    lam = np.abs(lam)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if f == "gauss":
            return 0.5 * lam * lam
        if f == "uniform":  # log(sinh(λ/2)/(λ/2)) ≤ λ²/24
            return lam * lam / 24.0
        if f == "dgauss":   # the discrete Gaussian is σ²-sub-Gaussian (CKS 2020)
            return 0.5 * law.param * lam * lam
        if f == "laplace":
            return np.where(lam < 1.0, -np.log1p(-np.minimum(lam, 1.0) ** 2), np.inf)
        if f == "logistic":
            v = math.pi * np.minimum(lam, 1.0)
            ok = (lam > 0) & (lam < 1.0)
            out = np.where(ok, np.log(np.where(ok, v, 1.0) / np.sin(np.where(ok, v, 1.0))),
                           np.inf)
            return np.where(lam == 0, 0.0, out)
        if f == "dlaplace":
            p = math.exp(-1.0 / law.param)
            q = -math.expm1(-1.0 / law.param)
            ok = lam < 1.0 / law.param
            le = np.where(ok, lam, 0.0)
            out = 2.0 * math.log(q) - np.log1p(-p * np.exp(le)) - np.log1p(-p * np.exp(-le))
            return np.where(ok, out, np.inf)
    raise AssertionError(f)  # pragma: no cover


def _domain(law: NoiseLaw) -> float:
    """Sup of the standardised λ where the cgf is finite."""
    return {"gauss": math.inf, "dgauss": math.inf, "uniform": math.inf, "laplace": 1.0,
            "logistic": 1.0, "dlaplace": 1.0 / law.param}[law.family]


# -- grouping ---------------------------------------------------------------------------------
Term = tuple[NoiseLaw, float, int]


def group_terms(laws: Sequence[NoiseLaw], weights: Sequence[np.ndarray]) -> list[Term]:
    """One cell's terms ``(law, a, n)``: ``n`` draws of ``law`` with weight ``a`` (``a > 0``).

    ``weights[k]``: the estimator's weights on the cells measured with ``laws[k]``. For a
    scale family ``a = |L|·scale`` on the standard law. Continuous laws (when every law of the
    cell is continuous) round ``a`` up to the relative grid `BIN` (Anderson: conservative);
    otherwise equal weights (to 1e-9) are merged. See `group_block` for many cells at once.

    Example:
        >>> from tabdp.mechanisms import Laplace
        >>> law = noise_law(Laplace(scale=2.0), "x")
        >>> [(round(a, 3), n) for _, a, n in group_terms([law], [np.array([0.5, -0.5, 0.0])])]
        [(1.0, 2)]
    """
    return group_block(laws, [np.asarray(w, dtype=np.float64).reshape(-1, 1)
                              for w in weights])[0]


def _standard(lw: NoiseLaw) -> NoiseLaw:
    """The standard member of a scale family (scale 1)."""
    var = {"gauss": 1.0, "laplace": 2.0, "logistic": math.pi**2 / 3.0}[lw.family]
    return NoiseLaw(lw.family, 1.0, var)


def group_block(laws: Sequence[NoiseLaw], weights: Sequence[np.ndarray]) -> list[list[Term]]:
    """`group_terms` for ``k`` cells at once: ``weights[p]`` has shape ``(cells of p, k)``.

    Example:
        >>> from tabdp.mechanisms import Laplace
        >>> law = noise_law(Laplace(scale=1.0), "x")
        >>> out = group_block([law], [np.array([[1.0, 0.0], [1.0, 3.0]])])
        >>> [[(round(a, 3), n) for _, a, n in t] for t in out]
        [[(1.0, 2)], [(3.0, 1)]]
    """
    k = weights[0].shape[1] if weights else 0
    live = [lw for lw, w in zip(laws, weights, strict=True) if np.any(w != 0)]
    up = all(lw.continuous for lw in live)
    merged: dict[str, tuple[NoiseLaw, list[np.ndarray]]] = {}
    for lw, w in zip(laws, weights, strict=True):
        a = np.abs(np.asarray(w, dtype=np.float64))
        if lw.scale_family:   # one standard law per family: merge the levels' terms
            merged.setdefault(lw.family, (_standard(lw), []))[1].append(a * lw.param)
        else:
            merged.setdefault(f"{lw.family}:{lw.param!r}", (lw, []))[1].append(a)
    step = math.log1p(BIN) if up else math.log1p(_SAME)
    out: list[list[Term]] = [[] for _ in range(k)]
    for lw, parts in merged.values():
        a = np.concatenate(parts, axis=0)            # (n, k)
        n = a.shape[0]
        with np.errstate(divide="ignore"):
            b = np.ceil(np.log(a) / step - (0.0 if up else 0.5))
        b = np.where(a > 0, b, np.inf)
        sb = np.ascontiguousarray(np.sort(b, axis=0).T).ravel()     # cell by cell
        new_run = np.ones(sb.size, dtype=bool)
        new_run[1:] = sb[1:] != sb[:-1]
        new_run[::n] = True
        st = np.flatnonzero(new_run)
        cnt = np.diff(np.append(st, sb.size))
        val = sb[st]
        keep = np.isfinite(val)
        # the bin's top: at least every weight in it (up to float rounding, covered by 1e-12)
        reps = np.exp(val[keep] * step) * (1.0 + 1e-12)
        for c, r, m in zip((st[keep] // n).tolist(), reps.tolist(), cnt[keep].tolist(),
                           strict=True):
            out[c].append((lw, r, m))
    return out


# -- inversion --------------------------------------------------------------------------------
def _smooth_allowance(level: float) -> tuple[float, float]:
    """(η, z) of the smoothing: ``P(|εN| > ε·z) = η``."""
    eta = min(1e-5, 1e-3 * (1.0 - level))
    return eta, float(ndtri(1.0 - 0.5 * eta))


def margins(cells: Sequence[Sequence[Term]], level: float, extra: float = 0.0
            ) -> np.ndarray:
    """Certified margins ``x`` with ``P(|S_c| ≤ x) ≥ level + extra`` for each cell's terms.

    ``S_c = Σ a·X`` over the cell's terms (``n`` independent draws each; a scale family's
    law with scale ``s`` counts as ``a·s`` times its standard member). Cells with no term
    get 0; cells with a ``"generic"`` law get Gauss's bound (`gauss_margin`), or Chebyshev's
    (`chebyshev_margin`) where a discrete law is among their terms.

    Args:
        cells: Per cell, its terms (from `group_terms`).
        level: Confidence level.
        extra: Probability kept aside for other errors (the output rounding), added to the
            level the noise must reach.

    Returns:
        The margins.

    Example:
        >>> from tabdp.mechanisms import Laplace
        >>> law = noise_law(Laplace(scale=1.0), "x")
        >>> # two equal Laplace terms: P(|S| > x) = e^{-x}(1 + x/2); at 90%: x = 3.27181
        >>> x = float(margins([[(law, 1.0, 2)]], 0.9)[0])
        >>> 3.27181 <= x < 3.27181 * 1.02
        True
    """
    out = np.zeros(len(cells))
    # a scale family's term on its standard member (weight times scale)
    cells = [[(_standard(lw), a * lw.param, n) if lw.scale_family and lw.param != 1.0
              else (lw, a, n) for lw, a, n in terms] for terms in cells]
    eta_s, z_s = _smooth_allowance(level)
    target = level + extra + eta_s + _ETA_WRAP + _ETA_TRUNC
    if target >= 1.0:
        raise InvalidParameterError(
            f"consistent: level {level!r} leaves no room for the certified margin's "
            "allowances.\nHint: use a level of at most 0.999.")
    # identical cells share one inversion
    keys: dict[tuple[Any, ...], list[int]] = {}
    for i, terms in enumerate(cells):
        if not terms:
            continue
        key = tuple(sorted((lw.family, lw.param, a, n) for lw, a, n in terms))
        keys.setdefault(key, []).append(i)
    todo: list[tuple[list[int], Sequence[Term]]] = []
    for idx in keys.values():
        terms = cells[idx[0]]
        sd = math.sqrt(sum(n * a * a * lw.var for lw, a, n in terms))
        if any(lw.family == "generic" for lw, _, _ in terms):
            # Gauss's inequality needs every law unimodal with a density; beside a lattice
            # law (discrete noise), Chebyshev's bound, valid for every law (review 62m)
            out[idx] = gauss_margin(sd, level + extra) \
                if all(lw.continuous for lw, _, _ in terms) \
                else chebyshev_margin(sd, level + extra)
            continue
        todo.append((idx, terms))
    for s0 in range(0, len(todo), _CHUNK):
        part = todo[s0:s0 + _CHUNK]
        x = _invert([t for _, t in part], target, z_s)
        for (idx, _), xi in zip(part, x.tolist(), strict=True):
            out[idx] = xi
    return out


def gauss_margin(sd: Any, level: float) -> np.ndarray:
    """Gauss's inequality: a margin for a symmetric unimodal error of standard deviation ``sd``.

    ``P(|S| > k·sd) ≤ 4/(9k²)`` for ``k ≥ 2/√3`` and ``≤ 1 − k/√3`` for ``k ≤ 2/√3``: the
    margin is ``k·sd`` with ``k = 2/(3√(1 − level))`` for a level of at least 2/3, else
    ``k = √3·level`` (the uniform law's own quantile: the bound is tight there).

    Example:
        >>> round(float(gauss_margin(1.0, 0.95)), 4), round(float(gauss_margin(1.0, 0.5)), 4)
        (2.9814, 0.866)
    """
    if level >= 2.0 / 3.0:
        k = 2.0 / (3.0 * math.sqrt(1.0 - level))
    else:
        k = math.sqrt(3.0) * level
    return k * np.asarray(sd, dtype=np.float64)


def chebyshev_margin(sd: Any, level: float) -> np.ndarray:
    """Chebyshev's inequality: a margin for any error of mean 0 and standard deviation ``sd``.

    ``P(|S| ≥ k·sd) ≤ 1/k²``: ``k = 1/√(1 − level)`` (lattice laws, where Gauss's inequality
    does not hold as such).

    Example:
        >>> round(float(chebyshev_margin(1.0, 0.9)), 4)
        3.1623
    """
    return np.asarray(sd, dtype=np.float64) / math.sqrt(1.0 - level)


def _invert(cells: Sequence[Sequence[Term]], target: float, z_s: float) -> np.ndarray:
    """Smallest certified ``x`` per cell (see the module docstring)."""
    c = len(cells)
    sds = np.array([math.sqrt(sum(n * a * a * lw.var for lw, a, n in t)) for t in cells])
    eps = SMOOTH  # in sd units
    # Chernoff radius y with P(|S + εN| ≥ y) ≤ η_wrap, per cell, over a grid of λ
    radius = np.empty(c)
    for i, terms in enumerate(cells):
        sd = sds[i]
        lmax = min(_domain(lw) / (a / sd) for lw, a, _ in terms)
        hi = lmax * (1.0 - 1e-9) if math.isfinite(lmax) else 200.0
        lam = np.geomspace(1e-3, hi, 400)
        kk = 0.5 * (eps * lam) ** 2
        for lw, a, n in terms:
            kk = kk + n * _cgf(lw, lam * (a / sd))
        with np.errstate(invalid="ignore"):
            r = (kk + math.log(2.0 / _ETA_WRAP)) / lam
        radius[i] = float(np.nanmin(np.where(np.isfinite(r), r, np.inf)))
    period = 2.0 * radius
    dt = 2.0 * math.pi / period
    # frequencies: the dropped tail Σ_{m>M} e^{-ε²t²/2}/m · 2/π below η_trunc
    mm = np.ceil(np.sqrt(2.0 * math.log(1.0 / _ETA_TRUNC) + 2.0 * np.log(
        np.maximum(1.0 / (eps * dt), 1.0))) / (eps * dt)).astype(np.int64) + 1
    big_m = int(mm.max())
    m = np.arange(1, big_m + 1, dtype=np.float64)
    t = dt[:, None] * m[None, :]                         # (c, M), sd units
    logw = -0.5 * (eps * t) ** 2
    sign = np.ones(t.shape)
    for i, terms in enumerate(cells):
        for lw, a, n in terms:
            logw[i] += n * _log_phi(lw, t[i] * (a / sds[i]))
            if lw.family == "uniform" and n % 2:
                sign[i] *= _sign_phi(lw, t[i] * (a / sds[i]))
    w = sign * np.exp(logw)
    trunc = (2.0 / math.pi) / (big_m + 1.0) * math.sqrt(math.pi / 2.0) / (eps * dt) * erfc(
        eps * dt * big_m / math.sqrt(2.0))
    goal = target + trunc
    wm = w / m[None, :]

    def cov(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = t * x[:, None]
        return (dt * x / math.pi + (2.0 / math.pi) * np.sum(wm * np.sin(s), axis=1),
                dt / math.pi + (2.0 / math.pi) * dt * np.sum(w * np.cos(s), axis=1))

    lo = np.zeros(c)
    hi = 0.5 * period
    x = np.minimum(np.full(c, 2.5), hi)
    for _ in range(100):
        cv, d = cov(x)
        below = cv < goal
        lo = np.where(below, x, lo)
        hi = np.where(below, hi, x)
        with np.errstate(divide="ignore", invalid="ignore"):
            xn = x - (cv - goal) / d
        bad = ~((xn > lo) & (xn < hi)) | ~np.isfinite(xn)
        xn = np.where(bad, 0.5 * (lo + hi), xn)
        done = np.abs(xn - x) <= 1e-12 * np.maximum(x, 1.0)
        x = xn
        if np.all(done):
            break
    # certify: the returned x reaches the goal (else step up to the bracket's top)
    x = x * (1.0 + 1e-10) + 1e-12
    for _ in range(60):
        cv, _d = cov(x)
        short = cv < goal
        if not np.any(short):
            break
        x = np.where(short, x + 0.5 * (0.5 * period - x) + 1e-9, x)
    cv, _d = cov(x)
    if np.any(cv < goal) or np.any(x > 0.5 * period):
        raise AssertionError("certified margin: no x within the period")  # pragma: no cover
    return (x + eps * z_s) * sds


def rounding_radius(ranges: np.ndarray, grid: float, eta: float) -> np.ndarray:
    """Bound ``r`` of the output rounding error ``R``: ``P(|R| > r) ≤ eta``.

    A cell's rounding error is a sum over its ``k`` block ranges of independent errors (the
    blocks' uniforms), each of mean 0, in an interval of length one step, and less than one
    step in size: ``|R| < k·grid``, and by Hoeffding ``P(|R| ≥ r) ≤ 2e^{−2r²/(k·grid²)}``.

    Example:
        >>> rounding_radius(np.array([0.0, 1.0, 100.0]), 1.0, 1e-5).round(3).tolist()
        [0.0, 1.0, 24.704]
    """
    k = np.asarray(ranges, dtype=np.float64)
    hoeff = grid * np.sqrt(k * math.log(2.0 / eta) / 2.0)
    return np.minimum(k * grid, hoeff)
