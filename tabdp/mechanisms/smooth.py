"""Smooth-sensitivity mechanisms ``q(D) + SS^γ(D)·Z`` for medians, quantiles (docs/math/smooth.md).

A release adds to each exact value ``q`` noise proportional to its γ-smooth sensitivity ``SS``
([`sensitivity`][tabdp.sensitivity]). Four noise families are supported; the unit law ``Z`` (noise
per unit of SS) and its condition on γ are:

============  =====================================================  ==========================
family        noise per unit SS                                       valid for
============  =====================================================  ==========================
polyplace     PolyPlace(s = 1/γ, α = ε/γ) ([HT24] Thm 8)             0 < γ < ε (std finite for
                                                                      γ < ε/2)
student_t     T_d/ν, ν = 2√d(ε − γ(d+1))/(d+1) (Bun–Steinke)          γ < ε/(d+1); std needs d > 2
cauchy        (c+1)/(ε − γ(c+1))·Y, Y generalized Cauchy (NRS)        γ < ε/(c+1); std needs c > 3
laplace       Laplace(scale 1/(ε − γ·ln(2/δ))) (NRS, approximate)     γ < ε/ln(2/δ)
============  =====================================================  ==========================

PolyPlace, Student's t and the generalized Cauchy give **pure ε-DP** per release; Laplace with
smooth sensitivity gives only **(ε, δ)-DP**. The shapes d and c are chosen by bounded
minimization of the standard deviation per unit SS unless given.

γ itself must be fixed **before** looking at the data: smaller γ makes the noise law better (it
tends to Laplace with scale SS/ε as γ → 0) but makes SS larger (it tends to the global
sensitivity ``hi − lo``). [`choose_gamma`][tabdp.mechanisms.smooth.choose_gamma] resolves the
trade-off on a public grid using a public guess of the data (group size and spread);
[`default_gamma`][tabdp.mechanisms.smooth.default_gamma] is the rule used when nothing is known.

The guarantee holds for the neighbour relation under which ``SS`` is a γ-smooth upper bound on
the local sensitivity; the smooth sensitivities of [`sensitivity`][tabdp.sensitivity] are, for both
replacement and add/remove neighbours (see that module).

Floating-point safety (docs/exact-rounding.md): releases are ``round_grid(q + SS·Z)``, the exact
value rounded to a public grid by `tabdp.noise.exact.round_noisy`. The noise scale SS is
data-dependent, so no uniform grid can be derived from it without leaking it: the default grid
(``grid=None``) is a `tabdp.noise.exact.RelativeGrid`, a fixed public set of numbers with
B significant bits: B = 32 for polyplace and laplace noise (rounding moves a value by at most
``2**-32 ≈ 2.3e-10`` of its magnitude), B = 24 for the heavy-tailed student_t and cauchy baselines
(``≈ 6e-8``; their float64 quantiles carry a looser error bound, and a finer relative grid would
send most noise-dominated cells to the slow path). A public uniform step (e.g. ``grid=1.0`` for
whole dollars, or one derived from the public bounds) can be passed instead and is preferable when
the bounds are narrow relative to their magnitude.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtri

from tabdp import registry
from tabdp._deprecation import renamed_argument
from tabdp._lazy_scipy import brentq, minimize_scalar, quad
from tabdp._validation import check_int, check_real
from tabdp.exceptions import DataValidationError, InvalidParameterError
from tabdp.mechanisms._base import DEFAULT_LEVEL, ReleasedValues, check_level, pure_to_zcdp
from tabdp.noise import NoiseDistribution
from tabdp.noise import exact as _exact
from tabdp.noise.gaussian import Laplace
from tabdp.noise.polyplace import PolyPlace
from tabdp.noise.smooth_baselines import GeneralizedCauchy, StudentT
from tabdp.rng import as_random_source

__all__ = [
    "NOISE_FAMILIES",
    "RELATIVE_GRID_BITS",
    "SmoothSensitivityMechanism",
    "SmoothSensitivityRelease",
    "split_epsilon",
    "scale_adjusted_coverage",
    "scale_adjusted_halfwidth",
    "LOG_SCALE_GRID",
    "LOG_SS_SLACK",
    "DEFAULT_LOG_SCALE_NOISE",
    "gamma_limit",
    "optimal_shape",
    "std_per_unit_ss",
    "unit_noise",
    "default_gamma",
    "choose_gamma",
    "std_vs_gamma",
]

#: Noise families accepted by :class:`SmoothSensitivityMechanism` (the noise laws tagged
#: "smooth" in :mod:`tabdp.registry`).
NOISE_FAMILIES = registry.names("noise", tag="smooth")
#: Default δ of the (approximate) Laplace-with-smooth-sensitivity baseline.
DEFAULT_DELTA = 1e-5
#: Largest shape searched for d (Student t) and c (Cauchy): the optima are below ~5.
_SHAPE_CAP = 50.0
#: Significant bits of the default relative output grid, per noise family (see module docstring).
RELATIVE_GRID_BITS = {"polyplace": 32, "laplace": 32, "student_t": 24, "cauchy": 24}
#: Public γ grid of :func:`choose_gamma`, as fractions of ε.
DEFAULT_GAMMA_FRACTIONS = np.geomspace(1e-3, 0.5, 46)


# -- parameter checks ---------------------------------------------------------------------------
def _check_noise(noise: Any) -> str:
    if not isinstance(noise, str) or noise.lower() not in NOISE_FAMILIES:
        raise InvalidParameterError(
            f"smooth-sensitivity noise must be one of {', '.join(NOISE_FAMILIES)}; got "
            f"{noise!r}.\nHint: use noise='polyplace' (pure ε-DP, smallest error).")
    return noise.lower()


def _check_eps(epsilon: Any) -> float:
    return check_real("epsilon", epsilon, owner="smooth-sensitivity mechanism", gt=0.0,
                      hint="epsilon is the privacy budget of one release, e.g. epsilon=1.0")


def _check_delta(noise: str, delta: Any) -> float | None:
    if noise != "laplace":
        if delta is not None:
            raise InvalidParameterError(
                f"smooth-sensitivity mechanism: delta applies only to noise='laplace' (approximate "
                f"DP); got delta={delta!r} with noise={noise!r}.\nHint: drop delta; {noise} "
                "noise is pure ε-DP.")
        return None
    d = DEFAULT_DELTA if delta is None else delta
    return check_real("delta", d, owner="Laplace smooth-sensitivity mechanism", gt=0.0, lt=1.0,
                      hint="delta is the additive δ of (ε, δ)-DP, e.g. delta=1e-5")


def gamma_limit(noise: str, epsilon: float, delta: float | None = None,
                finite_std: bool = False) -> float:
    """Supremum of the smoothness γ for which ``noise`` gives a private release at ``epsilon``.

    Args:
        noise: One of [`NOISE_FAMILIES`][tabdp.mechanisms.smooth.NOISE_FAMILIES].
        epsilon: Privacy budget ε > 0.
        delta: δ for ``noise='laplace'`` (default 1e-5); must be None otherwise.
        finite_std: Limit for a finite standard deviation instead (PolyPlace ε/2, t ε/3,
            Cauchy ε/4).

    Returns:
        The limit (γ must be strictly below it).

    Example:
        >>> gamma_limit("polyplace", 1.0), gamma_limit("student_t", 1.0, finite_std=True)
        (1.0, 0.3333333333333333)
        >>> round(gamma_limit("laplace", 1.0, delta=1e-5), 4)    # ε/ln(2/δ)
        0.0819
    """
    noise = _check_noise(noise)
    eps = _check_eps(epsilon)
    dl = _check_delta(noise, delta)
    if noise == "polyplace":
        return eps / 2.0 if finite_std else eps
    if noise == "student_t":   # γ < ε/(d+1), d > 0 (d > 2 for a finite std)
        return eps / 3.0 if finite_std else eps
    if noise == "cauchy":      # γ < ε/(c+1), c > 1 (c > 3 for a finite std)
        return eps / 4.0 if finite_std else eps / 2.0
    assert dl is not None
    return eps / (math.log(2.0) - math.log(dl))   # ln(2/δ); 2/δ overflows for subnormal δ


def _check_gamma(noise: str, epsilon: float, gamma: Any, delta: float | None) -> float:
    lim = gamma_limit(noise, epsilon, delta)
    return check_real("gamma", gamma, owner=f"smooth-sensitivity mechanism ({noise})", gt=0.0,
                      lt=lim, hint=f"{noise} noise needs 0 < gamma < {lim:.6g} at epsilon="
                      f"{epsilon:g}; choose it with tabdp.mechanisms.smooth.choose_gamma")


# -- standard deviations per unit SS ------------------------------------------------------------
def _t_std(d: float, eps: float, gamma: float) -> float:
    room = eps - gamma * (d + 1.0)
    if d <= 2.0 or room <= 0.0:
        return math.inf
    return (d + 1.0) / (2.0 * math.sqrt(d - 2.0) * room)


def _cauchy_std(c: float, eps: float, gamma: float) -> float:
    room = eps - gamma * (c + 1.0)
    if c <= 3.0 or room <= 0.0:
        return math.inf
    return (c + 1.0) / (room * math.sqrt(2.0 * math.cos(2.0 * math.pi / c) + 1.0))


def optimal_shape(noise: str, epsilon: float, gamma: float) -> float:
    """Shape d (Student t) or c (Cauchy) minimizing the std per unit SS (bounded Brent search).

    Searches d ∈ (2, ε/γ − 1) and c ∈ (3, ε/γ − 1) (capped at 50; the optima are below ~5).

    Args:
        noise: ``"student_t"`` or ``"cauchy"``.
        epsilon: Privacy budget ε.
        gamma: Smoothness γ; needs γ < ε/3 (t) or γ < ε/4 (Cauchy) for a finite std.

    Returns:
        The optimal shape.

    Raises:
        InvalidParameterError: If no shape gives a finite standard deviation.

    Example:
        >>> d, c = optimal_shape("student_t", 1.0, 0.1), optimal_shape("cauchy", 1.0, 0.1)
        >>> round(d, 5), round(c, 5)
        (3.21954, 3.98574)
    """
    noise = _check_noise(noise)
    eps = _check_eps(epsilon)
    if noise not in ("student_t", "cauchy"):
        raise InvalidParameterError(
            f"optimal_shape: only student_t (d) and cauchy (c) have a shape; got {noise!r}.")
    gamma = check_real("gamma", gamma, owner=f"optimal_shape ({noise})", gt=0.0)
    low, fun = (2.0, _t_std) if noise == "student_t" else (3.0, _cauchy_std)
    high = min(eps / gamma - 1.0, _SHAPE_CAP)
    if high <= low:
        lim = gamma_limit(noise, eps, finite_std=True)
        raise InvalidParameterError(
            f"optimal_shape: {noise} noise has no finite standard deviation at epsilon={eps:g}, "
            f"gamma={gamma:g} (needs gamma < {lim:.6g}).\nHint: use a smaller gamma or "
            "noise='polyplace'.")
    res = minimize_scalar(lambda z: math.log(fun(z, eps, gamma)), bounds=(low, high),
                          method="bounded", options={"xatol": 1e-11})
    return float(res.x)


def unit_noise(noise: str, epsilon: float, gamma: float, *, delta: float | None = None,
               shape: float | None = None) -> NoiseDistribution:
    """The noise law per unit of smooth sensitivity (the release adds ``SS·Z``).

    Args:
        noise: One of [`NOISE_FAMILIES`][tabdp.mechanisms.smooth.NOISE_FAMILIES].
        epsilon: Privacy budget ε > 0.
        gamma: Smoothness γ within [`gamma_limit`][tabdp.mechanisms.smooth.gamma_limit].
        delta: δ for ``noise='laplace'`` (default 1e-5).
        shape: d (Student t) or c (Cauchy); default:
            [`optimal_shape`][tabdp.mechanisms.smooth.optimal_shape].

    Returns:
        A [`tabdp.noise.NoiseDistribution`][tabdp.noise.NoiseDistribution].

    Example:
        >>> unit_noise("polyplace", 1.0, 0.1)
        PolyPlace(s=10.0, alpha=10.0)
        >>> round(unit_noise("laplace", 1.0, 0.05).std(), 6)
        3.629014
    """
    noise = _check_noise(noise)
    eps = _check_eps(epsilon)
    dl = _check_delta(noise, delta)
    gamma = _check_gamma(noise, eps, gamma, dl)
    if noise == "polyplace":
        if shape is not None:
            raise InvalidParameterError("unit_noise: polyplace has no shape parameter "
                                        f"(alpha = epsilon/gamma); got shape={shape!r}.")
        return PolyPlace(s=1.0 / gamma, alpha=eps / gamma)
    if noise == "laplace":
        if shape is not None:
            raise InvalidParameterError(f"unit_noise: laplace has no shape; got shape={shape!r}.")
        assert dl is not None
        return Laplace(scale=1.0 / (eps - gamma * (math.log(2.0) - math.log(dl))))
    if shape is None:
        shape = optimal_shape(noise, eps, gamma)
    low = 0.0 if noise == "student_t" else 1.0
    name = "d" if noise == "student_t" else "c"
    z = check_real(f"shape ({name})", shape, owner=f"{noise} smooth-sensitivity noise", gt=low,
                   lt=eps / gamma - 1.0,
                   hint=f"privacy needs gamma < epsilon/({name}+1); leave shape=None for the "
                        "std-optimal value")
    room = eps - gamma * (z + 1.0)
    if noise == "student_t":
        nu = 2.0 * math.sqrt(z) * room / (z + 1.0)
        return StudentT(df=z, scale=1.0 / nu)
    return GeneralizedCauchy(c=z, scale=(z + 1.0) / room)


def std_per_unit_ss(noise: str, epsilon: float, gamma: float, *, delta: float | None = None,
                    shape: float | None = None) -> float:
    """Standard deviation of the noise per unit of smooth sensitivity (docs/math/smooth.md §4).

    Args:
        noise: One of [`NOISE_FAMILIES`][tabdp.mechanisms.smooth.NOISE_FAMILIES].
        epsilon: Privacy budget ε > 0.
        gamma: Smoothness γ within [`gamma_limit`][tabdp.mechanisms.smooth.gamma_limit].
        delta: δ for ``noise='laplace'`` (default 1e-5).
        shape: d or c for the baselines (default: the std-optimal one).

    Returns:
        The std per unit SS (``inf`` where it does not exist).

    Example:
        >>> [round(std_per_unit_ss(f, 1.0, 0.1), 6) for f in ("polyplace", "student_t", "cauchy")]
        [1.687487, 3.305025, 9.999477]
    """
    return unit_noise(noise, epsilon, gamma, delta=delta, shape=shape).std()


# -- choosing γ before seeing data --------------------------------------------------------------
def default_gamma(noise: str, epsilon: float, delta: float | None = None) -> float:
    """The data-free default γ: a fixed fraction of ε (or of the family's limit).

    Rule: γ = ε/3 for polyplace, γ = 0.15·ε for student_t and cauchy, and γ = ε/(2·ln(2/δ)) (half
    the limit) for laplace. These fractions minimize the worst ratio of ``SS_γ × std per unit SS``
    to its best value over a panel of stand-in groups (n = 10 … 1000, spreads 0.3 % … 10 % of the
    range): small groups are dominated by the padded bounds and need a large γ, large groups gain
    from a large γ because their smooth sensitivity falls like 1/γ. With a public guess of the
    group size and spread, [`choose_gamma`][tabdp.mechanisms.smooth.choose_gamma] does better.

    Args:
        noise: One of [`NOISE_FAMILIES`][tabdp.mechanisms.smooth.NOISE_FAMILIES].
        epsilon: Privacy budget ε > 0.
        delta: δ for ``noise='laplace'`` (default 1e-5).

    Returns:
        γ.

    Example:
        >>> round(default_gamma("polyplace", 1.0), 6), default_gamma("student_t", 1.0)
        (0.333333, 0.15)
        >>> round(default_gamma("laplace", 1.0), 5)
        0.04096
    """
    noise = _check_noise(noise)
    eps = _check_eps(epsilon)
    if noise == "laplace":
        return 0.5 * gamma_limit(noise, eps, delta)
    _check_delta(noise, delta)
    return eps / 3.0 if noise == "polyplace" else 0.15 * eps


def _prototype(bounds: tuple[float, float], n: int, spread: float | None,
               center: float | None) -> np.ndarray:
    lo, hi = bounds
    c = 0.5 * (lo + hi) if center is None else center
    sd = (hi - lo) / 6.0 if spread is None else spread
    z = ndtri((np.arange(n) + 0.5) / n)
    return np.clip(c + sd * z, lo, hi)


def choose_gamma(epsilon: float, noise: str = "polyplace", *, bounds: tuple[float, float],
                 n: int | None = None, spread: float | None = None, center: float | None = None,
                 prototype: ArrayLike | None = None, q: float = 0.5,
                 delta: float | None = None, grid: ArrayLike | None = None,
                 objective: str = "sd") -> float:
    """Pick γ on a public grid from a public guess of the data (before seeing the data).

    Rule: build a public stand-in group — ``prototype`` if given, else ``n`` values at the
    normal quantiles ``center + spread·Φ⁻¹((i − ½)/n)`` clipped to ``bounds`` (defaults: the
    midpoint of the bounds and spread (hi − lo)/6) — compute its γ-smooth sensitivity ``SS_γ``
    for every γ on the grid (default ``ε·geomspace(1e-3, 0.5, 46)``, cut at the family's limit)
    and return the γ minimizing ``SS_γ × (std per unit SS)`` (``objective='sd'``) or
    ``SS_γ × (90% margin of error per unit SS)`` (``objective='moe'``). Only public inputs are
    used, so the choice costs no privacy budget.

    Args:
        epsilon: Privacy budget ε of the release.
        noise: One of [`NOISE_FAMILIES`][tabdp.mechanisms.smooth.NOISE_FAMILIES].
        bounds: Public range ``(lo, hi)`` of the values.
        n: Public guess of the group size (needed unless ``prototype`` is given).
        spread: Public guess of the values' standard deviation.
        center: Public guess of the values' centre.
        prototype: A public stand-in sample (e.g. last year's published microdata or synthetic
            data); overrides n/spread/center.
        q: Quantile level (0.5: median).
        delta: δ for ``noise='laplace'``.
        grid: Candidate γ values (absolute, not fractions).
        objective: ``"sd"`` or ``"moe"``.

    Returns:
        The chosen γ.

    Raises:
        InvalidParameterError: If no grid point is valid for the family.

    Example:
        >>> g_small = choose_gamma(1.0, bounds=(0.0, 1e6), n=20, spread=2e4, center=5e4)
        >>> g_large = choose_gamma(1.0, bounds=(0.0, 1e6), n=2000, spread=2e4, center=5e4)
        >>> bool(g_small > g_large)          # small groups need a larger γ
        True
    """
    from tabdp.sensitivity.smooth import check_bounds, smooth_sensitivity_quantile

    noise = _check_noise(noise)
    eps = _check_eps(epsilon)
    dl = _check_delta(noise, delta)
    lo, hi = check_bounds(bounds, "choose_gamma")
    if objective not in ("sd", "moe"):
        raise InvalidParameterError(
            f"choose_gamma: objective must be 'sd' or 'moe'; got {objective!r}.")
    if prototype is not None:
        proto = np.asarray(prototype, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(proto)):
            raise DataValidationError("choose_gamma: prototype holds NaN or infinite values.")
    else:
        if n is None:
            raise InvalidParameterError(
                "choose_gamma: give a public guess of the group size n (or a prototype sample)."
                "\nHint: e.g. n=50 for a typical county × industry cell.")
        nn = check_int("n", n, owner="choose_gamma", ge=1)
        sp = None if spread is None else check_real("spread", spread, owner="choose_gamma",
                                                    gt=0.0)
        ce = None if center is None else check_real("center", center, owner="choose_gamma")
        proto = _prototype((lo, hi), nn, sp, ce)
    limit = gamma_limit(noise, eps, dl, finite_std=objective == "sd")
    cand = eps * DEFAULT_GAMMA_FRACTIONS if grid is None else np.asarray(grid, dtype=np.float64)
    cand = np.unique(cand[(cand > 0) & (cand < limit) & np.isfinite(cand)])
    if noise in ("student_t", "cauchy") and objective == "moe":
        cand = cand[cand < gamma_limit(noise, eps, finite_std=True)]  # shapes are std-optimal
    if cand.size == 0:
        raise InvalidParameterError(
            f"choose_gamma: no grid value is valid for {noise} at epsilon={eps:g} (need "
            f"0 < gamma < {limit:.6g}).\nHint: pass grid=None for the default grid.")
    best, best_g = math.inf, float(cand[0])
    for g in cand:
        unit = unit_noise(noise, eps, float(g), delta=dl)
        per = unit.std() if objective == "sd" else unit.interval_halfwidth(0.9)
        val = per * smooth_sensitivity_quantile(proto, q, float(g), (lo, hi))
        if val < best:
            best, best_g = val, float(g)
    return best_g


# -- the mechanism ------------------------------------------------------------------------------
def _finite_values(values: ArrayLike) -> np.ndarray:
    """The cell values as a flat float64 array (they are clipped quantiles: always finite)."""
    q = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(q)):
        raise DataValidationError(
            "smooth-sensitivity release: values must be finite.\nHint: clip values to the "
            "public bounds before computing quantiles.")
    return q


class _ByParams:
    """Representation, equality and hash from the public parameters (``params()``)."""

    family: str

    def params(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.params().items() if v is not None)
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return False
        return self.params() == other.params()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(self.params().items())))


@registry.mechanism('smooth_sensitivity', tags=('smooth',), rank=14)
class SmoothSensitivityMechanism(_ByParams):
    """Release ``q + SS·Z`` with a smooth-sensitivity noise law (ε-DP per release).

    Args:
        noise: ``"polyplace"`` (default), ``"student_t"``, ``"cauchy"`` or ``"laplace"``.
        epsilon: Privacy budget ε of one release.
        gamma: Smoothness γ; default [`default_gamma`][tabdp.mechanisms.smooth.default_gamma]. Must
            be fixed before seeing data.
        delta: δ of ``noise='laplace'`` (default 1e-5); not allowed for the pure families.
        shape: d (Student t) or c (Cauchy); default the std-optimal one.

    Attributes:
        unit: The noise law per unit SS.
        pure: Whether the guarantee is pure ε-DP (False only for laplace).

    Example:
        >>> m = SmoothSensitivityMechanism("polyplace", epsilon=1.0, gamma=0.1)
        >>> m.unit, round(float(m.sd(2.0)), 6)
        (PolyPlace(s=10.0, alpha=10.0), 3.374974)
        >>> est = m.release([100.0, 200.0], ss=[2.0, 5.0], rng=1)
        >>> est.shape, float(m.epsilon(1.0)), round(float(m.rho(1.0)), 6)
        ((2,), 1.0, 0.462117)
    """

    unbiased = "mean"

    def __init__(self, noise: str = "polyplace", epsilon: float = 1.0,
                 gamma: float | None = None, *, delta: float | None = None,
                 shape: float | None = None) -> None:
        """Check the noise family and privacy parameters; derive ``gamma`` if not given."""
        self.noise = _check_noise(noise)
        self.eps = _check_eps(epsilon)
        self.delta = _check_delta(self.noise, delta)
        g = default_gamma(self.noise, self.eps, self.delta) if gamma is None else gamma
        self.gamma = _check_gamma(self.noise, self.eps, g, self.delta)
        if self.noise in ("student_t", "cauchy") and shape is None:
            shape = optimal_shape(self.noise, self.eps, self.gamma)
        self.unit = unit_noise(self.noise, self.eps, self.gamma, delta=self.delta, shape=shape)
        self.shape = None if shape is None else float(shape)
        self.pure = self.noise != "laplace"

    # -- guarantee ------------------------------------------------------------------------------
    @renamed_argument("delta", "sensitivity")
    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRDP policy: the constant ε for any per-record sensitivity Δ > 0, 0 at Δ = 0.

        For ``noise='laplace'`` (only (ε, δ)-DP) it is ``inf`` for Δ > 0; see
        [`guarantee`][tabdp.mechanisms.SmoothSensitivityMechanism.guarantee].

        Args:
            sensitivity: Per-record sensitivities Δ.

        Returns:
            ε(Δ).

        Example:
            >>> SmoothSensitivityMechanism(epsilon=0.5).epsilon([0.0, 3.0]).tolist()
            [0.0, 0.5]
        """
        d = np.abs(np.asarray(sensitivity, dtype=np.float64))
        return np.where(d > 0, self.eps if self.pure else np.inf, 0.0)

    @renamed_argument("delta", "sensitivity")
    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRzCDP policy ε·tanh(ε/2) for Δ > 0 (``inf`` for the approximate laplace family).

        Args:
            sensitivity: Per-record sensitivities Δ.

        Returns:
            ρ(Δ).

        Example:
            >>> round(float(SmoothSensitivityMechanism(epsilon=1.0).rho(2.0)), 6)
            0.462117
        """
        return pure_to_zcdp(self.epsilon(sensitivity))

    def guarantee(self) -> dict[str, Any]:
        """The per-release guarantee: ``{"type": "pure"|"approximate", "epsilon", "delta"}``.

        Example:
            >>> SmoothSensitivityMechanism("laplace", 1.0, 0.05).guarantee()
            {'type': 'approximate', 'epsilon': 1.0, 'delta': 1e-05}
        """
        return {"type": "pure" if self.pure else "approximate", "epsilon": self.eps,
                "delta": 0.0 if self.pure else self.delta}

    # -- error ----------------------------------------------------------------------------------
    def _ss(self, ss: ArrayLike) -> np.ndarray:
        s = np.asarray(ss, dtype=np.float64)
        if not np.all(np.isfinite(s)) or np.any(s < 0):
            raise DataValidationError(
                "smooth-sensitivity release: ss must be finite and >= 0 (one per value).\n"
                "Hint: compute it with tabdp.sensitivity.smooth_sensitivity_grouped.")
        return s

    def sd(self, ss: ArrayLike) -> np.ndarray:
        """Standard deviation of the released value: ``SS × std per unit SS`` (may be inf).

        Args:
            ss: Smooth sensitivities.

        Returns:
            Standard deviations.

        Example:
            >>> round(float(SmoothSensitivityMechanism("student_t", 1.0, 0.1).sd(1.0)), 6)
            3.305025
        """
        return self._ss(ss) * self.unit.std()

    def moe(self, ss: ArrayLike, level: float = DEFAULT_LEVEL) -> np.ndarray:
        """Margin of error: half-width of the exact central noise interval, ``SS × quantile``.

        Args:
            ss: Smooth sensitivities.
            level: Confidence level.

        Returns:
            Half-widths.

        Example:
            >>> m = SmoothSensitivityMechanism("polyplace", 1.0, 0.1)
            >>> bool(m.moe(1.0, 0.9) > 0)
            True
        """
        return self._ss(ss) * self.unit.interval_halfwidth(check_level(level))

    # -- release --------------------------------------------------------------------------------
    def default_grid(self) -> _exact.Grid:
        """The default public grid: a `RelativeGrid`.

        32 significant bits for polyplace and laplace noise, 24 for student_t and cauchy
        (`RELATIVE_GRID_BITS`). A uniform default would have to be derived from the
        data-dependent SS, which would leak it; the relative grid is a fixed public set.

        Returns:
            The grid.

        Example:
            >>> SmoothSensitivityMechanism(epsilon=1.0).default_grid()
            RelativeGrid(32)
            >>> SmoothSensitivityMechanism("cauchy", epsilon=1.0).default_grid()
            RelativeGrid(24)
        """
        return _exact.RelativeGrid(RELATIVE_GRID_BITS[self.noise])

    def release(self, values: ArrayLike, ss: ArrayLike, rng: Any = None,
                grid: Any = None) -> np.ndarray:
        """Release ``round_grid(values + ss·Z)`` (one independent draw per value).

        Args:
            values: Exact query values (e.g. group medians), 1-D.
            ss: Their γ-smooth sensitivities at this mechanism's γ (same shape).
            rng: Randomness (default: secure).
            grid: Public grid: a positive step, a `tabdp.noise.exact.Grid`, or None for
                [`default_grid`][tabdp.mechanisms.SmoothSensitivityMechanism.default_grid].

        Returns:
            The noisy values.

        Example:
            >>> m = SmoothSensitivityMechanism("cauchy", 1.0, 0.1)
            >>> m.release([1.0, 2.0], [0.0, 0.0], rng=0).tolist()   # SS = 0: nothing to hide
            [1.0, 2.0]
        """
        return self.release_table(values, ss, rng, grid=grid).estimate

    def release_table(self, values: ArrayLike, ss: ArrayLike, rng: Any = None,
                      level: float = DEFAULT_LEVEL, grid: Any = None) -> ReleasedValues:
        """Release with standard deviations, margins of error and intervals.

        Args:
            values: Exact query values, 1-D.
            ss: Their smooth sensitivities (same shape).
            rng: Randomness (default: secure).
            level: Confidence level of the margins of error.
            grid: Public grid (see
                [`release`][tabdp.mechanisms.SmoothSensitivityMechanism.release]); margins are
                widened by half a grid step.

        Returns:
            [`tabdp.mechanisms.ReleasedValues`][tabdp.mechanisms.ReleasedValues].

        Example:
            >>> m = SmoothSensitivityMechanism("polyplace", 1.0, 0.1)
            >>> r = m.release_table([10.0], [1.0], rng=3)
            >>> round(float(r.sd[0]), 6), bool(r.lower[0] < r.estimate[0] < r.upper[0]), r.grid
            (1.687487, True, 'relative-32-bit')
        """
        level = check_level(level)
        q = _finite_values(values)
        s = self._ss(ss).reshape(-1)
        if s.shape != q.shape:
            raise InvalidParameterError(
                f"smooth-sensitivity release: values and ss must have the same length; got "
                f"{q.size} and {s.size}.")
        g = self.default_grid() if grid is None else grid
        draw = _exact.round_noisy(self.unit, q, g, rng, scale=s,
                                  owner="SmoothSensitivityMechanism.release")
        est = draw.values
        sd = s * self.unit.std()
        h = s * self.unit.interval_halfwidth(level) + draw.grid.halfstep(est)
        return ReleasedValues(est, sd, h, est - h, est + h, level, grid=draw.grid.describe(),
                              fallbacks=draw.fallbacks)

    # -- description ----------------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> SmoothSensitivityMechanism("polyplace", 1.0, 0.1).params()
            {'noise': 'polyplace', 'epsilon': 1.0, 'gamma': 0.1, 'delta': None, 'shape': None}
        """
        return {"noise": self.noise, "epsilon": self.eps, "gamma": self.gamma,
                "delta": self.delta, "shape": self.shape}

    def to_dict(self) -> dict[str, Any]:
        """Public description: family, parameters, unit noise law and guarantee.

        Example:
            >>> SmoothSensitivityMechanism("student_t", 1.0, 0.1).to_dict()["unit_noise"]["name"]
            'student_t'
        """
        return {"family": self.family, "class": type(self).__name__, "params": self.params(),
                "unit_noise": {"name": self.unit.name, **self.unit.params()},
                "pure": self.pure, "unbiased": self.unbiased, "guarantee": self.guarantee()}


# -- the release with a private noise scale -----------------------------------------------------
#: Default Laplace scale of the released log noise scale: by default the scale estimate gets
#: ε₂ = γ/DEFAULT_LOG_SCALE_NOISE = 2γ (see :func:`split_epsilon`).
DEFAULT_LOG_SCALE_NOISE = 0.5
#: Public grid (natural-log units) the noisy ln SS is rounded to: 2**-20, a relative resolution of
#: about 1e-6 in the published standard deviation.
LOG_SCALE_GRID = 2.0**-20
#: Public slack added to γ as the sensitivity of the computed ln SS: it covers the floating-point
#: error of SS and of its logarithm (below 1e-12 in absolute terms), so the float centre of the
#: Laplace draw has sensitivity at most γ + LOG_SS_SLACK between neighbours.
LOG_SS_SLACK = 1e-9
#: Length (in units of the Laplace scale) of the integration range of the moe's coverage.
_COVERAGE_SPAN = 60.0
#: Largest ln h searched by :func:`scale_adjusted_halfwidth` (e^709 is near the float64 limit).
_LOG_H_MAX = 709.0


def _check_share(share: Any) -> float:
    return check_real("uncertainty_share", share, owner="smooth-sensitivity release", gt=0.0,
                      lt=1.0, hint="uncertainty_share is the fraction of epsilon spent on the "
                                   "private estimate of the noise scale (the published sd and "
                                   "moe), e.g. 0.4; leave it None for the default (2·gamma)")


def split_epsilon(noise: str, epsilon: float, gamma: float | None = None,
                  uncertainty_share: float | None = None,
                  delta: float | None = None) -> tuple[float, float, float]:
    """Split a release's ε into the value's ε₁ and the noise scale's ε₂; pick γ.

    A smooth-sensitivity release publishes two private things per cell: the value
    ``q + SS·Z`` (ε₁-DP) and a noisy ``ln SS`` from which its sd and moe are computed (ε₂-DP,
    Laplace noise of scale ``b = γ/ε₂`` on the log scale). ``epsilon = ε₁ + ε₂``.

    Rule:

    * ``uncertainty_share`` given: ``ε₂ = share·ε``, ``ε₁ = ε − ε₂``; γ defaults to
      [`default_gamma`][tabdp.mechanisms.smooth.default_gamma] at ε₁.
    * otherwise ``ε₂ = 2γ`` (``b = 1/2``: the published sd is within a factor 2 of the true one
      with probability 1 − e^{−2 ln 2} = 3/4). With the default γ (the
      [`default_gamma`][tabdp.mechanisms.smooth.default_gamma] fraction r of ε₁) this gives
      ``ε₁ = ε/(1 + 2r)``: 60% of ε for PolyPlace (γ = 0.2·ε, ε₂ = 0.4·ε), 77% for student_t and
      cauchy, 92% for laplace at δ = 1e-5. With a given γ, ``ε₁ = ε − 2γ``.

    γ must then be valid for the value's noise family at ε₁
    ([`gamma_limit`][tabdp.mechanisms.smooth.gamma_limit]).

    Args:
        noise: One of [`NOISE_FAMILIES`][tabdp.mechanisms.smooth.NOISE_FAMILIES].
        epsilon: Total ε of the release (per row and cell).
        gamma: Smoothness γ, fixed before seeing the data (default: see above).
        uncertainty_share: Fraction of ε for the noise scale, in (0, 1) (default: ``2γ/ε``).
        delta: δ for ``noise='laplace'``.

    Returns:
        ``(ε₁, ε₂, γ)``.

    Raises:
        InvalidParameterError: For invalid parameters, or a γ that leaves no valid ε₁.

    Example:
        >>> [round(v, 6) for v in split_epsilon("polyplace", 1.0)]
        [0.6, 0.4, 0.2]
        >>> [round(v, 6) for v in split_epsilon("polyplace", 1.0, gamma=0.05)]
        [0.9, 0.1, 0.05]
        >>> [round(v, 6) for v in split_epsilon("student_t", 2.0, uncertainty_share=0.25)]
        [1.5, 0.5, 0.225]
    """
    noise = _check_noise(noise)
    eps = _check_eps(epsilon)
    dl = _check_delta(noise, delta)
    if uncertainty_share is not None:
        share = _check_share(uncertainty_share)
        eps2 = share * eps
        eps1 = eps - eps2
        how = f"uncertainty_share={share:g}"
    elif gamma is None:
        r = default_gamma(noise, 1.0, dl)
        eps1 = eps / (1.0 + 2.0 * r)
        eps2 = eps - eps1
        how = "the default split"
    else:
        g = check_real("gamma", gamma, owner=f"smooth-sensitivity release ({noise})", gt=0.0,
                       hint="gamma is the smoothness parameter, e.g. gamma = epsilon/10")
        eps2 = g / DEFAULT_LOG_SCALE_NOISE   # 2γ
        if not eps2 < eps:
            raise InvalidParameterError(
                f"smooth-sensitivity release ({noise}): gamma={g:g} leaves no budget for the "
                f"value: by default the private noise scale takes 2·gamma = {eps2:g} of "
                f"epsilon={eps:g}.\nHint: use a smaller gamma, or pass uncertainty_share (e.g. "
                "0.3) to set the split yourself.")
        eps1 = eps - eps2
        how = "the default split (2·gamma for the noise scale)"
    if gamma is None:
        g = default_gamma(noise, eps1, dl)
    else:
        lim = gamma_limit(noise, eps1, dl)
        g = check_real("gamma", gamma, owner=f"smooth-sensitivity release ({noise})", gt=0.0,
                       lt=lim, hint=f"{noise} noise needs 0 < gamma < {lim:.6g} at the value's "
                       f"epsilon {eps1:.6g} (= epsilon {eps:g} minus the noise scale's "
                       f"{eps2:.6g} under {how}); choose it with "
                       "tabdp.mechanisms.smooth.choose_gamma")
    return eps1, eps2, g


def scale_adjusted_coverage(unit: NoiseDistribution, halfwidth: float, log_noise: float) -> float:
    """Coverage ``E_W P(|Z| ≤ e^W·h)`` of a margin ``h`` scaled by a noisy noise scale.

    The published moe is ``e^{ln SS + W}·h`` with ``W ~ Laplace(b)`` independent of ``Z``; the
    interval ``estimate ± moe`` covers the true value with this probability, whatever the data.

    Args:
        unit: The unit noise law Z (noise per unit SS).
        halfwidth: ``h`` (margin per unit of the estimated scale).
        log_noise: ``b``, the Laplace scale of W (0: the scale is known).

    Returns:
        The coverage.

    Example:
        >>> u = unit_noise("polyplace", 1.0, 0.1)
        >>> h = u.interval_halfwidth(0.9)
        >>> round(scale_adjusted_coverage(u, h, 0.0), 9), scale_adjusted_coverage(u, h, 0.5) < 0.9
        (0.9, True)
    """
    h = float(halfwidth)
    b = float(log_noise)

    def covered_log(a: float) -> float:   # P(|Z| <= e^a), without overflow
        if a > 709.0:
            return 1.0 - 2.0 * float(unit.sf(math.inf))
        if a < -745.0:
            return 0.0
        return 1.0 - 2.0 * float(unit.sf(math.exp(a)))

    if h <= 0.0:
        return 0.0
    lh = math.log(h)
    if b == 0.0:
        return covered_log(lh)

    def f(u: float) -> float:
        w = b * u
        return 0.5 * (covered_log(lh + w) + covered_log(lh - w)) * math.exp(-u)

    # u = |W|/b is Exp(1); beyond 60 the weight e^{-u} is below 1e-26. The break point is where
    # e^{b·u}·h crosses 1 (the integrand's bend).
    val, _ = quad(f, 0.0, _COVERAGE_SPAN, epsabs=1e-14, epsrel=1e-13, limit=500,
                  points=[min(abs(lh) / b, _COVERAGE_SPAN / 2)])
    return float(val)


def scale_adjusted_halfwidth(unit: NoiseDistribution, level: float, log_noise: float) -> float:
    """The margin per unit of estimated scale whose coverage (scale error included) is ``level``.

    Solves ``scale_adjusted_coverage(unit, h, b) = level`` for ``h`` (Brent's method on ln h,
    to about 1e-12 relative). ``b = 0`` gives ``unit.interval_halfwidth(level)``.

    Args:
        unit: The unit noise law Z.
        level: Coverage in (0, 1).
        log_noise: Laplace scale ``b`` of the log-scale estimate's error.

    Returns:
        ``h`` (``inf`` if the level needs a margin beyond float64, for an extreme ``b``).

    Example:
        >>> u = unit_noise("polyplace", 0.6, 0.2)
        >>> h = scale_adjusted_halfwidth(u, 0.9, 0.5)
        >>> bool(h > u.interval_halfwidth(0.9)), round(scale_adjusted_coverage(u, h, 0.5), 9)
        (True, 0.9)
    """
    level = check_level(level)
    b = check_real("log_noise", log_noise, owner="scale_adjusted_halfwidth", ge=0.0)
    h0 = unit.interval_halfwidth(level)
    if b == 0.0:
        return float(h0)

    def gap(lh: float) -> float:
        return scale_adjusted_coverage(unit, math.exp(lh), b) - level

    lo = hi = math.log(h0)
    step = 1.0
    while gap(hi) < 0.0:
        if hi >= _LOG_H_MAX:   # the level needs a margin beyond float64 (b far too large)
            return math.inf
        hi, step = min(hi + step, _LOG_H_MAX), 2.0 * step
    step = 1.0
    while gap(lo) > 0.0:
        lo, step = lo - step, 2.0 * step
    return math.exp(brentq(gap, lo, hi, xtol=1e-13, rtol=4 * 2.0**-52))


@functools.lru_cache(maxsize=256)
def _cached_halfwidth(unit: NoiseDistribution, level: float, log_noise: float) -> float:
    # laws hash and compare by their parameters; public inputs only
    return scale_adjusted_halfwidth(unit, level, log_noise)


class SmoothSensitivityRelease(_ByParams):
    """A smooth-sensitivity release whose published uncertainty is private too.

    Per cell it publishes the value ``round(q + SS·Z)`` (ε₁-DP:
    [`SmoothSensitivityMechanism`][tabdp.mechanisms.SmoothSensitivityMechanism] at ε₁) and, from a
    second private release, its standard deviation and margin of error:

    * ``L = round(ln SS + W)`` on the public grid `LOG_SCALE_GRID`, with
      ``W ~ Laplace(b)``, ``b = (γ + LOG_SS_SLACK)/ε₂``. ``ln SS`` changes by at most γ between
      neighbouring datasets (SS is γ-smooth), so ``L`` is ε₂-DP (Laplace mechanism), drawn with
      exact rounding.
    * ``sd = std(Z)·e^L``: an estimate of the noise's standard deviation whose logarithm is off
      by ``W`` (Laplace(b), median 0: within a factor ``e^t`` with probability ``1 − e^{−t/b}``).
    * ``moe = h*·e^{L + grid/2} + (half a value-grid step)``, with ``h*`` from
      `scale_adjusted_halfwidth`: the interval ``estimate ± moe`` covers the true value
      with probability at least ``level`` on every dataset, over both draws (the scale's error is
      accounted for, not plugged in).

    Nothing else depends on SS. The release is (ε₁ + ε₂)-DP per row (pure, except for
    ``noise='laplace'``: (ε₁ + ε₂, δ)); [`split_epsilon`][tabdp.mechanisms.smooth.split_epsilon]
    sets ε₁, ε₂ and γ.

    Args:
        noise: ``"polyplace"`` (default), ``"student_t"``, ``"cauchy"`` or ``"laplace"``.
        epsilon: Total ε of the release (value and noise scale together).
        gamma: Smoothness γ (default: see [`split_epsilon`][tabdp.mechanisms.smooth.split_epsilon]).
        uncertainty_share: Fraction of ε spent on the noise scale (default ``2γ/ε``).
        delta: δ of ``noise='laplace'``.
        shape: d (Student t) or c (Cauchy).

    Attributes:
        value: The value's
            [`SmoothSensitivityMechanism`][tabdp.mechanisms.SmoothSensitivityMechanism] (at ε₁).
        eps: Total ε.
        eps_value: ε₁.
        eps_scale: ε₂.
        gamma: γ.
        log_noise: ``b``, the Laplace scale of the log-scale estimate.

    Example:
        >>> r = SmoothSensitivityRelease("polyplace", epsilon=1.0)
        >>> round(r.eps_value, 6), round(r.eps_scale, 6), round(r.gamma, 6), round(r.log_noise, 6)
        (0.6, 0.4, 0.2, 0.5)
        >>> t = r.release_table([10.0, 10.0], [1.0, 1.0], rng=4)
        >>> bool(t.sd[0] != t.sd[1])                     # the sd is drawn, not SS times a constant
        True
    """

    family = SmoothSensitivityMechanism.family
    unbiased = "mean"

    def __init__(self, noise: str = "polyplace", epsilon: float = 1.0,
                 gamma: float | None = None, *, uncertainty_share: float | None = None,
                 delta: float | None = None, shape: float | None = None) -> None:
        """Split ``epsilon`` between the value and the scale release, then check both."""
        eps1, eps2, g = split_epsilon(noise, epsilon, gamma, uncertainty_share, delta)
        self.value = SmoothSensitivityMechanism(noise, eps1, g, delta=delta, shape=shape)
        self.noise = self.value.noise
        self.eps = float(epsilon)
        self.eps_value = eps1
        self.eps_scale = eps2
        self.gamma = self.value.gamma
        self.delta = self.value.delta
        self.pure = self.value.pure
        self.uncertainty_share = None if uncertainty_share is None else float(uncertainty_share)
        self.log_noise = (self.gamma + LOG_SS_SLACK) / eps2
        self.log_law = Laplace(scale=self.log_noise)

    # -- uncertainty ----------------------------------------------------------------------------
    def moe_factor(self, level: float = DEFAULT_LEVEL) -> float:
        """``h*``: the moe per unit of ``e^L`` (coverage ``level`` with the scale's error).

        Args:
            level: Confidence level.

        Returns:
            The factor (cached per unit law, level and b).

        Example:
            >>> r = SmoothSensitivityRelease(epsilon=1.0)
            >>> bool(r.moe_factor(0.9) > r.value.unit.interval_halfwidth(0.9))
            True
        """
        return _cached_halfwidth(self.value.unit, check_level(level), self.log_noise)

    def release_log_scale(self, ss: ArrayLike, rng: Any = None) -> np.ndarray:
        """Release ``round(ln SS + Laplace(b))`` on `LOG_SCALE_GRID` (ε₂-DP per row).

        Args:
            ss: Smooth sensitivities (> 0, finite; floor them at a public constant).
            rng: Randomness (default: secure).

        Returns:
            The noisy log scales.

        Example:
            >>> r = SmoothSensitivityRelease(epsilon=1.0)
            >>> v = r.release_log_scale([1.0, 100.0], rng=0)
            >>> bool(v[1] > v[0]), bool(np.all(np.round(v / LOG_SCALE_GRID) * LOG_SCALE_GRID == v))
            (True, True)
        """
        s = np.asarray(ss, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise InvalidParameterError(
                "smooth-sensitivity release: ss must be finite and > 0 (one per value).\n"
                "Hint: floor it at a public constant (tabdp.frame._quantiles.SS_FLOOR).")
        draw = _exact.round_noisy(self.log_law, np.log(s), LOG_SCALE_GRID, rng,
                                  owner="SmoothSensitivityRelease.release_log_scale")
        return draw.values

    def sd_from_log_scale(self, log_scale: ArrayLike) -> np.ndarray:
        """Published sd ``std(Z)·e^L`` (``inf`` where Z has no finite sd).

        Args:
            log_scale: Released log scales L.

        Returns:
            Standard deviations.

        Example:
            >>> r = SmoothSensitivityRelease("student_t", epsilon=1.0)
            >>> float(r.sd_from_log_scale([0.0])[0]) == r.value.unit.std()
            True
        """
        L = np.asarray(log_scale, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            return np.exp(L) * self.value.unit.std()

    def moe_from_log_scale(self, log_scale: ArrayLike, level: float = DEFAULT_LEVEL) -> np.ndarray:
        """Published noise margin ``h*·e^{L + grid/2}`` (without the value grid's half step).

        Args:
            log_scale: Released log scales L.
            level: Confidence level.

        Returns:
            Margins.

        Example:
            >>> r = SmoothSensitivityRelease(epsilon=1.0)
            >>> bool(r.moe_from_log_scale([0.0])[0] > r.moe_factor(0.9))
            True
        """
        L = np.asarray(log_scale, dtype=np.float64)
        with np.errstate(over="ignore"):
            return np.exp(L + 0.5 * LOG_SCALE_GRID) * self.moe_factor(level)

    def check_grid(self, grid: Any, bounds: tuple[float, float], ss_max: float) -> _exact.Grid:
        """Validate the value grid against public magnitudes only (never the data).

        The release's outputs are at most ``max(|lo|, |hi|) + ss_max·q`` in size, ``q`` the
        ``1 − 1e-9`` quantile of |Z|, for any data: checking against that bound up front means the
        data-dependent check inside the sampler can never refuse.

        Args:
            grid: Public grid (None:
                [`default_grid`][tabdp.mechanisms.SmoothSensitivityMechanism.default_grid]).
            bounds: Public ``(lo, hi)``.
            ss_max: Public upper bound on SS (e.g. ``max(hi − lo, floor)``).

        Returns:
            The grid.

        Example:
            >>> r = SmoothSensitivityRelease(epsilon=1.0)
            >>> r.check_grid(10.0, (0.0, 1e9), 1e9)      # PolyPlace's far tail: up to 5e12
            UniformGrid(10.0)
            >>> r.check_grid(None, (0.0, 1e9), 1e9)
            RelativeGrid(32)
        """
        g = self.value.default_grid() if grid is None else grid
        mag = _exact.grid_magnitude(self.value.unit,
                                    np.array([abs(bounds[0]), abs(bounds[1])], dtype=np.float64),
                                    np.array([ss_max], dtype=np.float64))
        grid_ = _exact.as_grid(g, "smooth-sensitivity release")
        if isinstance(grid_, _exact.UniformGrid) and not math.isfinite(mag):
            raise InvalidParameterError(
                f"smooth-sensitivity release: a uniform grid (grid={grid!r}) needs outputs of "
                f"bounded size, but bounds {tuple(bounds)!r} allow outputs beyond float64.\nHint: "
                "use grid=None (the relative grid) or narrower public bounds.")
        return _exact.check_grid(grid_, mag, "smooth-sensitivity release")

    def release_table(self, values: ArrayLike, ss: ArrayLike, rng: Any = None,
                      level: float = DEFAULT_LEVEL, grid: Any = None) -> ReleasedValues:
        """Release values, and sd and moe computed only from the private log scale.

        The value draws come first from ``rng`` (as the
        base class's [`release_table`][tabdp.mechanisms.SmoothSensitivityMechanism.release_table]),
        then one log-scale draw per cell.

        Args:
            values: Exact query values, 1-D.
            ss: Their smooth sensitivities (> 0).
            rng: Randomness (default: secure).
            level: Confidence level of the margins of error.
            grid: Public grid of the values.

        Returns:
            [`tabdp.mechanisms.ReleasedValues`][tabdp.mechanisms.ReleasedValues].

        Example:
            >>> r = SmoothSensitivityRelease("polyplace", 1.0)
            >>> t = r.release_table([10.0], [1.0], rng=3)
            >>> bool(t.lower[0] < t.estimate[0] < t.upper[0]), t.grid
            (True, 'relative-32-bit')
        """
        level = check_level(level)
        q = _finite_values(values)
        s = self.value._ss(ss).reshape(-1)
        if s.shape != q.shape:
            raise InvalidParameterError(
                f"smooth-sensitivity release: values and ss must have the same length; got "
                f"{q.size} and {s.size}.")
        src = as_random_source(rng)  # one source: the value draws, then the log-scale draws
        g = self.value.default_grid() if grid is None else grid
        draw = _exact.round_noisy(self.value.unit, q, g, src, scale=s,
                                  owner="SmoothSensitivityRelease.release")
        est = draw.values
        L = self.release_log_scale(s, src)
        sd = self.sd_from_log_scale(L)
        h = self.moe_from_log_scale(L, level) + draw.grid.halfstep(est)
        return ReleasedValues(est, sd, h, est - h, est + h, level, grid=draw.grid.describe(),
                              fallbacks=draw.fallbacks)

    # -- guarantee and description --------------------------------------------------------------
    def guarantee(self) -> dict[str, Any]:
        """Per-row guarantee of the whole release (value and noise scale).

        Example:
            >>> SmoothSensitivityRelease("laplace", 1.0, uncertainty_share=0.1).guarantee()
            {'type': 'approximate', 'epsilon': 1.0, 'delta': 1e-05}
        """
        return {"type": "pure" if self.pure else "approximate", "epsilon": self.eps,
                "delta": 0.0 if self.pure else self.delta}

    def params(self) -> dict[str, Any]:
        """Public parameters (``epsilon`` is the total; the split is in `to_dict`).

        Example:
            >>> SmoothSensitivityRelease("polyplace", 1.0, 0.1).params()["uncertainty_share"]
            0.2
        """
        return {"noise": self.noise, "epsilon": self.eps, "gamma": self.gamma,
                "delta": self.delta, "shape": self.value.shape,
                "uncertainty_share": self.eps_scale / self.eps}

    def to_dict(self) -> dict[str, Any]:
        """Public description: the value's mechanism, the noise-scale release and the guarantee.

        Example:
            >>> d = SmoothSensitivityRelease("polyplace", 1.0, 0.1).to_dict()
            >>> d["value"]["params"]["epsilon"], d["uncertainty"]["epsilon"]
            (0.8, 0.2)
        """
        return {"family": self.family, "class": type(self).__name__, "params": self.params(),
                "unit_noise": {"name": self.value.unit.name, **self.value.unit.params()},
                "pure": self.pure, "unbiased": self.unbiased, "guarantee": self.guarantee(),
                "value": self.value.to_dict(),
                "uncertainty": {
                    "method": "sd and moe from ln SS + Laplace(b) rounded to a public grid",
                    "epsilon": self.eps_scale, "log_noise_scale": self.log_noise,
                    "log_grid": LOG_SCALE_GRID, "sensitivity_slack": LOG_SS_SLACK,
                    "moe_coverage": "at least the level on every dataset, over both draws"}}


# -- Figure 1 of [HT24] -----------------------------------------------------------------------
def std_vs_gamma(epsilon: float = 1.0, gammas: ArrayLike | None = None,
                 delta: float = DEFAULT_DELTA) -> dict[str, np.ndarray]:
    """Standard deviation per unit SS against γ for every family (data of [HT24] Figure 1).

    Baseline shapes are the std-optimal ones at each γ; entries are ``nan`` where a family has no
    finite standard deviation at that γ. ``laplace_global`` is √2/ε: Laplace noise scaled to the
    global sensitivity (hi − lo) instead of SS — the γ → 0 limit of PolyPlace, shown dashed in the
    figure.

    Args:
        epsilon: Privacy budget ε.
        gammas: γ values (default 200 points on (0, ε/2)).
        delta: δ of the Laplace-with-SS curve.

    Returns:
        ``{"gamma", "polyplace", "student_t", "cauchy", "laplace", "laplace_global"}`` →
        arrays of equal length (e.g. ``pandas.DataFrame(result)`` plots directly).

    Example:
        >>> out = std_vs_gamma(1.0, [0.05, 0.1, 0.3])
        >>> [round(float(v), 6) for v in out["polyplace"][:2]], float(out["laplace"][1])
        ([1.539066, 1.687487], nan)
    """
    eps = _check_eps(epsilon)
    g = (np.linspace(0.0, eps / 2.0, 201)[1:-1] if gammas is None
         else np.asarray(gammas, dtype=np.float64).reshape(-1))
    out: dict[str, np.ndarray] = {"gamma": g.copy()}
    for fam in NOISE_FAMILIES:
        vals = np.full(g.size, np.nan)
        dl = delta if fam == "laplace" else None
        lim = gamma_limit(fam, eps, dl, finite_std=True)
        for i, gi in enumerate(g):
            if 0.0 < gi < lim:
                v = std_per_unit_ss(fam, eps, float(gi), delta=dl)
                vals[i] = v if math.isfinite(v) else np.nan
        out[fam] = vals
    out["laplace_global"] = np.full(g.size, math.sqrt(2.0) / eps)
    return out
