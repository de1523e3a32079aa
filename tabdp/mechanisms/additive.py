"""Additive mechanisms: release ``q + Z`` with Z from a fixed symmetric noise law.

The release is ``round_grid(q + Z)``: the exact sum rounded to a public grid (ties to even), drawn
by `tabdp.noise.exact.round_noisy`, so floating point cannot leak through it
(docs/exact-rounding.md). Default grid (``grid=None``): the largest power of ten ``<= 0.02·sd`` of
the noise (``0.02·1.4826·MAD`` where the sd is infinite), so rounding moves no estimate within
``2**40`` steps of 0 by more than 1% of its standard deviation (beyond, the grid keeps 40
significant bits and moves a value by up to ``2**-40`` of its magnitude, which can exceed the
sd). The estimate is mean- and median-unbiased up to the rounding (at most half a grid step;
negligible at the default grid); its standard deviation is the noise's, and the margin of error
is the exact ``|Z|`` quantile plus half a grid step (``|estimate|·2**-40`` beyond ``2**40``
steps; docs/math/policies.md §3, §4; docs/math/additive.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp import noise as _noise
from tabdp import registry
from tabdp._numeric import ceil_snap, div_up, half_square_up, inflate, mul_up
from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms._base import (
    DEFAULT_LEVEL,
    LawOfSums,
    Mechanism,
    ReleasedValues,
    check_level,
    not_pure,
    pure_to_zcdp,
)
from tabdp.noise import NoiseDistribution
from tabdp.noise import exact as _exact

__all__ = [
    "NOISE_QUARTILE_RANGE",
    "check_noise_range",
    "AdditiveMechanism",
    "Gaussian",
    "Laplace",
    "GeneralizedGaussian",
    "ExpPolyLog",
    "UnitSplitting",
]


#: The typical size of the noise (its upper quartile) a release can draw: from 2**-960 (below
#: it, the exact rounding's relative error budgets meet subnormal intermediates,
#: `tabdp.noise.exact`) to 2**500 (above it, the variance and the tails computed for the sd,
#: the margin of error and the grid overflow a double).
NOISE_QUARTILE_RANGE = (2.0**-960, 2.0**500)


def check_noise_range(noise: NoiseDistribution, owner: str, name: str, value: float,
                      what: str = "") -> None:
    """Refuse noise whose typical size is outside `NOISE_QUARTILE_RANGE` (public parameters).

    Every noise law of an additive mechanism scales with its scale parameter, so the allowed
    range of the parameter follows from the law's upper quartile: it is stated in the message.

    Args:
        noise: The noise law.
        owner: The mechanism's name, for the message.
        name: Its scale parameter (``sigma``, ``scale``, ``gamma``).
        value: The parameter's value (the noise law's scale: ``scale * weight`` for a weighted
            measure).
        what: Extra words after the parameter (e.g. ``" x weights['x'] = 1e-300"``).

    Raises:
        InvalidParameterError: If the noise's upper quartile is below 2**-960 or above 2**500,
            or its standard deviation overflows a double.

    Example:
        >>> from tabdp import noise
        >>> check_noise_range(noise.Gaussian(1.0), "Gaussian", "sigma", 1.0)
        >>> try:
        ...     check_noise_range(noise.Gaussian(1e-300), "Gaussian", "sigma", 1e-300)
        ... except Exception as e:
        ...     print(str(e)[:60])
        Gaussian: sigma=1e-300 is too small to draw noise with: the
    """
    lo, hi = NOISE_QUARTILE_RANGE
    try:
        typical = float(noise.isf(0.25))
    except (OverflowError, ZeroDivisionError, FloatingPointError):
        typical = math.inf
    sd_overflows = False
    if lo <= typical <= hi:
        try:
            _exact.noise_spread(noise)  # the sd (or MAD) behind the default grid and the sd
            return
        except (OverflowError, ZeroDivisionError, FloatingPointError):
            sd_overflows = True
    small = typical < lo
    ratio = typical / value if math.isfinite(typical) and typical > 0 else math.nan
    allowed = (f"{name} between about {lo / ratio:.3g} and {hi / ratio:.3g}"
               if math.isfinite(ratio) and ratio > 0 and not sd_overflows else
               f"a smaller {name}" if not small else f"a larger {name}")
    size = f"{typical:.3g}" if math.isfinite(typical) else "beyond the double range"
    why = ("its standard deviation overflows a double (above 1.8e308)" if sd_overflows else
           f"the noise's typical size (its upper quartile) is {size}, "
           f"{'below' if small else 'above'} what exact rounding supports (an upper quartile "
           f"between 2**-960 ~ {lo:.3g} and 2**500 ~ {hi:.3g})")
    raise InvalidParameterError(
        f"{owner}: {name}={value!r}{what} is too {'small' if small else 'large'} to draw noise "
        f"with: {why}; allowed here: {allowed}.\n"
        f"Hint: choose {name} of an ordinary magnitude for the measure; to release a measure of "
        "extreme magnitude, rescale it (e.g. thousands of dollars) and give the noise in those "
        "units.")


def _delta(sensitivity: ArrayLike) -> np.ndarray:
    d = np.abs(np.asarray(sensitivity, dtype=np.float64))
    return d


class AdditiveMechanism(Mechanism):
    """Release ``q + Z`` for a symmetric noise law Z; subclasses give the policy.

    Args:
        noise: The noise distribution.

    Example:
        >>> m = Laplace(scale=1.0)
        >>> isinstance(m, AdditiveMechanism), m.noise.variance()
        (True, 2.0)
    """

    unbiased = "mean"

    def __init__(self, noise: NoiseDistribution) -> None:
        """Add ``noise`` (a public noise law) to each released value."""
        self.noise = noise

    def check_releasable(self) -> None:
        """Refuse a noise scale the release cannot draw with (public parameters only).

        The noise's upper quartile must lie in `NOISE_QUARTILE_RANGE` (2**-960 to 2**500) and
        its standard deviation must be a double; releases call this before any data is read.

        Raises:
            InvalidParameterError: With the scale parameter, its value and its allowed range.

        Example:
            >>> Gaussian(sigma=2.0).check_releasable()
            >>> try:
            ...     Gaussian(sigma=1e300).check_releasable()
            ... except Exception as e:
            ...     print(str(e)[:58])
            Gaussian: sigma=1e+300 is too large to draw noise with: th
        """
        params = self.noise.params()
        name = next((k for k in ("sigma", "scale", "gamma") if k in params), "scale")
        check_noise_range(self.noise, type(self).__name__, name, float(params.get(name, 1.0)))

    def sum_law(self) -> LawOfSums:
        """The law of a sum of released cells: numerical n-fold convolution of the noise density.

        Example:
            >>> from tabdp.mechanisms import ExpPolyLog
            >>> ExpPolyLog(sigma=1.0, a=2.0, d=4.0).sum_law().kind
            'lattice'
        """
        return LawOfSums("lattice", self.noise)

    def default_grid(self) -> float:
        """Default public grid: the largest power of ten ``<= 0.02·spread`` of the noise.

        The spread is the noise's standard deviation, or ``1.4826·MAD`` (the median of ``|Z|``)
        where the variance is infinite; half a grid step is then at most 1% of it.

        Returns:
            The grid step.

        Example:
            >>> Gaussian(sigma=2.0).default_grid(), Laplace(scale=100.0).default_grid()
            (0.01, 1.0)
        """
        return _exact.default_grid(_exact.noise_spread(self.noise))

    def release_table(self, values: ArrayLike, rng: Any = None,
                      level: float = DEFAULT_LEVEL, grid: float | None = None) -> ReleasedValues:
        """Release ``round_grid(values + Z)`` with sd and exact margins of error.

        Args:
            values: Exact cell values: an [`ExactTotals`][tabdp.mechanisms.ExactTotals] (the release
                is then ``round_grid(T + Z)`` for the exact totals T, not their float64 values) or
                float64 values (taken as exact).
            rng: Randomness (default: secure).
            level: Confidence level of the margin of error.
            grid: Public grid step of the estimates (e.g. 1.0 for counts, 1000.0 for thousands
                of dollars); None:
                [`default_grid`][tabdp.mechanisms.AdditiveMechanism.default_grid]. Estimates are the
                float64 nearest ``k·grid`` (exactly ``k·grid`` for whole-number grids below 2**53);
                beyond ``2**40·grid`` the grid keeps 40 significant bits (docs/exact-rounding.md
                §5).

        Returns:
            Estimates with sd, moe (the exact noise quantile plus half a grid step) and interval.

        Raises:
            InvalidParameterError: For a non-positive or non-finite grid (never for large data).

        Example:
            >>> r = Gaussian(sigma=2.0).release_table([1.0, 2.0, 3.0], rng=3, level=0.95, grid=1.0)
            >>> round(float(r.moe[0]), 3), bool(np.all(r.estimate == np.round(r.estimate)))
            (4.42, True)
        """
        level = check_level(level)
        self.check_releasable()
        q, cerr, exact = self._centres(values)
        g = self.default_grid() if grid is None else grid
        draw = _exact.round_noisy(self.noise, q, g, rng, center_error=cerr, exact_center=exact,
                                  owner=f"{type(self).__name__}.release")
        est = draw.values
        sd = np.full(q.shape, self.noise.std())
        h = self.noise.interval_halfwidth(level) + draw.grid.halfstep(est)
        return ReleasedValues(est, sd, h, est - h, est + h, level, grid=draw.grid.describe(),
                              fallbacks=draw.fallbacks)

    def sd_at(self, values: ArrayLike) -> np.ndarray:
        """Standard deviation of the estimate: the noise's, whatever the true value.

        The rounding to the grid is not included (it moves the estimate by at most half a grid
        step; at grids up to a tenth of the sd, the coarsest a release spec accepts, it adds under
        0.05% to the sd, for estimates within ``2**40`` steps of 0; beyond, it moves them by up to
        ``2**-40`` of their magnitude, which can exceed the sd).

        Args:
            values: True values (only their shape matters).

        Returns:
            Standard deviations.

        Example:
            >>> Gaussian(sigma=2.0).sd_at([1.0, 1e9]).tolist()
            [2.0, 2.0]
        """
        return np.full(np.shape(np.asarray(values, dtype=np.float64)), self.noise.std())

    def moe_at(self, values: ArrayLike, level: float = DEFAULT_LEVEL,
               grid: float | None = None) -> np.ndarray:
        """Margin of error (exact noise quantile plus half a grid step), the same for every cell.

        Args:
            values: True values (only their shape matters).
            level: Confidence level.
            grid: The release's grid step (None:
                [`default_grid`][tabdp.mechanisms.AdditiveMechanism.default_grid]).

        Returns:
            Half-widths.

        Example:
            >>> round(float(Laplace(scale=1.0).moe_at([0.0], 0.9)[0]), 4)   # 2.3026 + 0.01/2
            2.3076
        """
        g = _exact.as_grid(self.default_grid() if grid is None else grid, "moe_at")
        h = self.noise.interval_halfwidth(check_level(level))
        shape = np.shape(np.asarray(values, dtype=np.float64))
        return np.full(shape, h) + g.halfstep(np.zeros(shape))

    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRzCDP policy; for pure mechanisms ε(Δ)·tanh(ε(Δ)/2).

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            ρ(Δ).

        Example:
            >>> round(float(Laplace(scale=1.0).rho(1.0)), 6)
            0.462117
        """
        return pure_to_zcdp(self.epsilon(sensitivity))

    def params(self) -> dict[str, Any]:  # pragma: no cover - overridden
        """Public parameters (by default the noise's).

        Example:
            >>> Laplace(scale=2.0).params()
            {'scale': 2.0}
        """
        return self.noise.params()

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:  # pragma: no cover - overridden
        """PRDP policy ε(Δ); each subclass gives its own.

        Example:
            >>> Laplace(scale=1.0).epsilon([2.0]).tolist()
            [2.0]
        """
        raise NotImplementedError


@registry.mechanism('gaussian', tags=('spec', 'calibrate', 'additive'), rank=1)
class Gaussian(AdditiveMechanism):
    """Gaussian mechanism: ``q + N(0, sigma²)``; PRzCDP ρ(Δ) = Δ²/(2σ²), not pure.

    This is also the identity transformation mechanism ([FCD+24] Def 2.8, Thm 4.4).

    Args:
        sigma: Noise standard deviation, > 0.

    Example:
        >>> m = Gaussian(sigma=2.0)
        >>> float(m.rho(4.0)), float(m.epsilon(4.0)), float(m.epsilon(0.0))
        (2.0, inf, 0.0)
    """

    policy_formula = "rho(D) = D^2 / (2 sigma^2)"
    gaussian_dp = True

    def __init__(self, sigma: float) -> None:
        """Check ``sigma`` and build the Gaussian noise law."""
        self.sigma = check_real("sigma", sigma, owner="Gaussian", gt=0.0,
                                hint="sigma is the noise standard deviation, e.g. sigma=2.0")
        super().__init__(_noise.Gaussian(self.sigma))

    def sum_law(self) -> LawOfSums:
        """The law of a sum of released cells: Gaussian, σ·√n.

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> Gaussian(sigma=1.0).sum_law().kind
            'gaussian'
        """
        return LawOfSums("gaussian", self.noise, self.sigma)

    def for_counts(self) -> Mechanism:
        """The exact integer counterpart for counts: ``DiscreteGaussian(σ)`` (same ρ = Δ²/(2σ²)).

        Example:
            >>> Gaussian(sigma=3.0).for_counts()
            DiscreteGaussian(sigma=3.0)
        """
        from tabdp.mechanisms.discrete import DiscreteGaussian

        return DiscreteGaussian(self.sigma) if type(self) is Gaussian else self

    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """ρ(Δ) = Δ²/(2σ²).

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRzCDP losses.

        Example:
            >>> float(Gaussian(sigma=1.0).rho(1.0))
            0.5
        """
        # (Δ/σ)²/2 rounded up (Δ² and σ² under/overflow where Δ/σ does not); exact stays exact
        return half_square_up(div_up(_delta(sensitivity), self.sigma))

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """``inf`` for Δ > 0 (the Gaussian mechanism has no pure guarantee), 0 at Δ = 0.

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> Gaussian(sigma=1.0).epsilon([0.0, 1.0]).tolist()
            [0.0, inf]
        """
        return not_pure(sensitivity)

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> Gaussian(sigma=1.5).params()
            {'sigma': 1.5}
        """
        return {"sigma": self.sigma}


@registry.mechanism('laplace', tags=('spec', 'calibrate', 'additive'), rank=2)
class Laplace(AdditiveMechanism):
    """Laplace mechanism: ``q + Laplace(scale)``; PRDP ε(Δ) = Δ/scale.

    Args:
        scale: Laplace scale b > 0 (standard deviation √2·b).

    Example:
        >>> float(Laplace(scale=4.0).epsilon(2.0))
        0.5
    """

    pure = True
    policy_formula = "eps(D) = D / scale; rho = eps * tanh(eps / 2)"

    def __init__(self, scale: float) -> None:
        """Check ``scale`` and build the Laplace noise law."""
        self.scale = check_real("scale", scale, owner="Laplace", gt=0.0)
        super().__init__(_noise.Laplace(self.scale))

    def sum_law(self) -> LawOfSums:
        """The law of a sum of released cells: closed-form characteristic function 1/(1 + b²t²).

        Example:
            >>> from tabdp.mechanisms import Laplace
            >>> Laplace(scale=1.0).sum_law().kind
            'laplace'
        """
        return LawOfSums("laplace", self.noise, self.scale)

    def for_counts(self) -> Mechanism:
        """The exact integer counterpart for counts: ``DiscreteLaplace(b)`` (same ε = Δ/b).

        Example:
            >>> Laplace(scale=2.0).for_counts()
            DiscreteLaplace(scale=2.0)
        """
        from tabdp.mechanisms.discrete import DiscreteLaplace

        return DiscreteLaplace(self.scale) if type(self) is Laplace else self

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """ε(Δ) = Δ/scale.

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> float(Laplace(scale=1.0).epsilon(3.0))
            3.0
        """
        return div_up(_delta(sensitivity), self.scale)

    def approx_epsilon(self, sensitivity: ArrayLike, delta: float) -> np.ndarray:
        """Exact (ε, δ) policy: ε = max(Δ/b + 2·ln(1−δ), 0), docs/math/log-concave.md §3.

        Args:
            sensitivity: Per-record sensitivities.
            delta: δ in (0, 1).

        Returns:
            ε(Δ) at δ.

        Example:
            >>> round(float(Laplace(scale=0.99980003).approx_epsilon(1.0, 1e-4)), 6)
            1.0
        """
        from tabdp.privacy.approx import epsilon_for_scale
        from tabdp.privacy.conversions import check_dp_delta

        dd = check_dp_delta(delta, "Laplace.approx_epsilon")
        # the closed form, rounded up by a bound on its rounding error
        return epsilon_for_scale("laplace", self.scale, dd, _delta(sensitivity))

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> Laplace(scale=1.0).params()
            {'scale': 1.0}
        """
        return {"scale": self.scale}


@registry.mechanism('generalized_gaussian', tags=('spec', 'calibrate', 'additive'), rank=3)
class GeneralizedGaussian(AdditiveMechanism):
    """Generalized Gaussian mechanism, density ∝ exp(-(|z|/σ)^p), 0 < p ≤ 1 ([FCD+24] Cor 5.6).

    PRDP ε(Δ) = (Δ/σ)^p: for p = 1/2 the loss grows like √Δ.

    Args:
        sigma: Scale σ > 0.
        p: Shape, 0 < p ≤ 1 (p = 1 is Laplace with scale σ).

    Example:
        >>> m = GeneralizedGaussian(sigma=1.0, p=0.5)
        >>> float(m.epsilon(4.0))
        2.0
    """

    pure = True
    policy_formula = "eps(D) = (D / sigma)^p; rho = eps * tanh(eps / 2)"

    def __init__(self, sigma: float, p: float) -> None:
        """Check ``sigma`` and ``0 < p <= 1`` and build the noise law."""
        self.sigma = check_real("sigma", sigma, owner="GeneralizedGaussian", gt=0.0)
        self.p = check_real("p", p, owner="GeneralizedGaussian", gt=0.0, le=1.0,
                            hint="the per-record guarantee (Finley et al. 2024) needs 0 < p <= 1; "
                                 "p = 0.5 gives a loss growing like sqrt(D)")
        super().__init__(_noise.GeneralizedGaussian(self.sigma, self.p))

    def sum_law(self) -> LawOfSums:
        """The law of a sum of released cells: Laplace's for p = 1, else numerical convolution.

        Example:
            >>> from tabdp.mechanisms import GeneralizedGaussian
            >>> GeneralizedGaussian(sigma=1.0, p=1.0).sum_law().kind
            'laplace'
        """
        return (LawOfSums("laplace", self.noise, self.sigma) if self.p == 1.0
                else LawOfSums("lattice", self.noise))

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """ε(Δ) = (Δ/σ)^p.

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> float(GeneralizedGaussian(sigma=4.0, p=0.5).epsilon(16.0))
            2.0
        """
        x = div_up(_delta(sensitivity), self.sigma)
        if self.p == 1.0:
            return x
        with np.errstate(over="ignore"):
            return inflate(x ** self.p, 4.0)   # pow within 1 ulp, increasing in x

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> GeneralizedGaussian(sigma=1.0, p=0.5).params()
            {'sigma': 1.0, 'p': 0.5}
        """
        return {"sigma": self.sigma, "p": self.p}


@registry.mechanism('exp_polylog', tags=('spec', 'calibrate', 'additive'), rank=4)
class ExpPolyLog(AdditiveMechanism):
    """Exponential polylogarithmic mechanism, density ∝ exp(-d·(ln(|z|/σ + a))^p) (Cor 5.7).

    PRDP ε(Δ) = d·[(ln(Δ/σ + a))^p − (ln a)^p]: for p = 1 the loss grows like d·ln Δ, the slowest
    scaling in the toolkit.

    Args:
        sigma: Scale σ > 0.
        a: Offset inside the logarithm; needs a ≥ e^(p−1) (and a > 1 when p > 1).
        d: Decay; d > 1 when p = 1, d > 0 when p > 1. The variance is finite only for p = 1 with
            d > 3, and for every d when p > 1.
        p: Power of the logarithm, ≥ 1 (closed forms for p = 1 and 2, numerics otherwise).

    Example:
        >>> m = ExpPolyLog(sigma=1.0, a=1.0, d=4.0)
        >>> round(float(m.epsilon(99.0)), 4)   # 4 ln(100)
        18.4207
    """

    pure = True
    policy_formula = "eps(D) = d [ (ln(D/sigma + a))^p - (ln a)^p ]; rho = eps * tanh(eps / 2)"

    def __init__(self, sigma: float, a: float, d: float, p: float = 1.0) -> None:
        """Build the noise law, which checks the parameters."""
        # The noise law validates the parameters (σ > 0, p ≥ 1, d > 1 for p = 1, a ≥ e^(p−1)
        # so that the policy below holds, a > 1 for p > 1, no overflow).
        noise = _noise.ExpPolyLog(sigma, a, d, p)
        self.sigma, self.a, self.d, self.p = noise.sigma, noise.a, noise.d, noise.p
        super().__init__(noise)

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """ε(Δ) evaluated without cancellation for small Δ (docs/math/policies.md §4).

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> e = float(ExpPolyLog(sigma=1.0, a=3.0, d=1.0, p=2.0).epsilon(1e-12))
            >>> abs(e / (2 * math.log(3.0) * 1e-12 / 3.0) - 1.0) < 1e-9   # ~ 2 d ln(a) D/(sigma a)
            True
        """
        dd = _delta(sensitivity)
        sa = self.sigma * self.a
        h = np.log1p(dd if sa == 1.0 else dd / sa)  # x / 1.0 is x: the same doubles
        if self.p == 1.0:   # rounded up: a few roundings, log1p's condition number <= 1
            return inflate(self.d * h, 16.0, dd > 0)
        l0 = math.log(self.a)
        y = self.p * np.log1p(h / l0)
        # expm1 of y amplifies the error of y by about y: rounded up accordingly
        with np.errstate(over="ignore"):
            return inflate(self.d * l0**self.p * np.expm1(y), 16.0 * (3.0 + y), dd > 0)

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> ExpPolyLog(sigma=1.0, a=1.0, d=4.0).params()
            {'sigma': 1.0, 'a': 1.0, 'd': 4.0, 'p': 1.0}
        """
        return {"sigma": self.sigma, "a": self.a, "d": self.d, "p": self.p}


@registry.mechanism('unit_splitting', tags=('spec', 'calibrate', 'additive'), rank=7)
class UnitSplitting(AdditiveMechanism):
    """Unit splitting with Gaussian noise: the baseline of [FCD+24] §2.5 (Ex. 2.16).

    Each unit is split into A = max(1, ⌈Δ/τ⌉) rows of at most τ; the Gaussian sum over the split
    rows has sensitivity τ, so each row costs ρ₀ = τ²/(2σ²) and the unit pays ρ₀·A². The released
    value is the same ``q + N(0, σ²)``; only the accounting differs (always ≥ the Gaussian's
    Δ²/(2σ²)). A unit with Δ = 0 in a cell it has rows in still counts as one row.

    Args:
        threshold: Split threshold τ > 0.
        sigma: Noise standard deviation, > 0.

    Example:
        >>> m = UnitSplitting(threshold=10.0, sigma=50 ** 0.5)
        >>> m.rho([5, 5, 10, 20, 30, 10000]).round(6).tolist()
        [1.0, 1.0, 1.0, 4.0, 9.0, 1000000.0]
    """

    gaussian_dp = True
    policy_formula = "rho(D) = tau^2 / (2 sigma^2) * max(1, ceil(D / tau))^2"

    def __init__(self, threshold: float, sigma: float) -> None:
        """Check ``threshold`` and ``sigma`` and build the Gaussian noise law."""
        self.threshold = check_real("threshold", threshold, owner="UnitSplitting", gt=0.0)
        self.sigma = check_real("sigma", sigma, owner="UnitSplitting", gt=0.0)
        super().__init__(_noise.Gaussian(self.sigma))

    def sum_law(self) -> LawOfSums:
        """The law of a sum of released cells: Gaussian, σ·√n.

        Example:
            >>> from tabdp.mechanisms import UnitSplitting
            >>> UnitSplitting(threshold=10.0, sigma=1.0).sum_law().kind
            'gaussian'
        """
        return LawOfSums("gaussian", self.noise, self.sigma)

    def rows(self, sensitivity: ArrayLike) -> np.ndarray:
        """Number of split rows A(Δ) = max(1, ⌈Δ/τ⌉).

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            Row counts (float).

        Example:
            >>> UnitSplitting(threshold=0.7, sigma=1.0).rows([2.1]).tolist()
            [3.0]
        """
        return np.maximum(1.0, ceil_snap(_delta(sensitivity) / self.threshold))

    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """ρ(Δ) = τ²/(2σ²)·A(Δ)².

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRzCDP losses.

        Example:
            >>> float(UnitSplitting(threshold=1.0, sigma=1.0).rho(2.5))
            4.5
        """
        d = _delta(sensitivity)
        a = self.rows(d)
        # (τ/σ)² a²/2 rounded up (no under/overflow of τ², σ²); exact stays exact
        split = half_square_up(mul_up(a, float(div_up(self.threshold, self.sigma))))
        # never below the Gaussian's own loss Δ²/(2σ²) (the snapped ceiling may count a few
        # ulps less than Δ/τ rows)
        return np.maximum(split, half_square_up(div_up(d, self.sigma)))

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """``inf`` (Gaussian noise is not pure).

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses (all ``inf``).

        Example:
            >>> UnitSplitting(threshold=1.0, sigma=1.0).epsilon([3.0]).tolist()
            [inf]
        """
        return np.full(np.shape(_delta(sensitivity)), np.inf)

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> UnitSplitting(threshold=10.0, sigma=2.0).params()
            {'threshold': 10.0, 'sigma': 2.0}
        """
        return {"threshold": self.threshold, "sigma": self.sigma}
