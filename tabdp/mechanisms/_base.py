"""The mechanism contract: policy functions, release, estimators and their uncertainty.

A mechanism turns exact cell values ``q`` (sums or counts of one query) into released estimates.
Its guarantee is stated per record as a *policy function* of the record's per-record
sensitivity Δ (the absolute contribution of a unit to a cell, docs/math/policies.md §1):

* ``rho(delta)``: PRzCDP loss ρ(Δ) (Rényi divergence of order α is at most α·ρ(Δ));
* ``epsilon(delta)``: PRDP loss ε(Δ) (max-divergence), ``inf`` where the mechanism is not pure.

Both are vectorized and data-independent formulas (public); their values at actual records are
confidential. [`Mechanism.release_table`][tabdp.mechanisms.Mechanism.release_table] returns the
estimate with its standard deviation and margin of error.

Floating-point safety (docs/exact-rounding.md): the continuous mechanisms release the exact
mechanism output rounded to a public grid (``grid=``; ``None`` is each mechanism's documented
default), drawn by `tabdp.noise.exact.round_noisy`. Nothing else is ever released.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from tabdp._deprecation import wrap_sensitivity_methods
from tabdp._numeric import ZCDP_ULPS, inflate
from tabdp._params import ByParams
from tabdp._validation import check_level
from tabdp.exceptions import DataValidationError, InvalidParameterError
from tabdp.mechanisms._totals import ExactTotals
from tabdp.rng import as_random_source

__all__ = ["Mechanism", "ReleasedValues", "LawOfSums", "pure_to_zcdp", "not_pure", "DEFAULT_LEVEL",
           "check_level"]

#: Default confidence level of margins of error (the US Census standard of 90%).
DEFAULT_LEVEL = 0.9


def pure_to_zcdp(epsilon: ArrayLike) -> np.ndarray:
    """Convert a PRDP loss ε to the PRzCDP loss ε·tanh(ε/2) (docs/math/policies.md §2).

    Args:
        epsilon: PRDP losses (``inf`` allowed).

    Returns:
        PRzCDP losses, ``inf`` where ε is ``inf``.

    Example:
        >>> round(float(pure_to_zcdp(1.0)), 6)
        0.462117
    """
    e = np.asarray(epsilon, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = e * np.tanh(0.5 * e)
    # rounded up (tanh within 2 ulps, one product): never below the exact ε·tanh(ε/2); an
    # infinite ε gives inf · tanh(±inf) = inf here already, and `inflate` keeps inf
    return inflate(out, ZCDP_ULPS, e > 0)


def not_pure(sensitivity: ArrayLike) -> np.ndarray:
    """PRDP policy of a mechanism with no pure guarantee: ``inf`` for Δ > 0, 0 at Δ = 0.

    Args:
        sensitivity: Per-record sensitivities.

    Returns:
        ``inf`` where |Δ| > 0, else 0.

    Example:
        >>> not_pure([0.0, 2.0]).tolist()
        [0.0, inf]
    """
    d = np.abs(np.asarray(sensitivity, dtype=np.float64))
    return np.where(d > 0, np.inf, 0.0)


@dataclass(frozen=True)
class ReleasedValues:
    """Estimates of one measure with their uncertainty, one entry per cell.

    Attributes:
        estimate: The released estimates.
        sd: Standard deviation of each estimate (plug-in where it depends on the true value;
            ``inf`` where it does not exist).
        moe: Margin of error at ``level``: half-width of the exact central confidence interval.
        lower: Lower end of that interval.
        upper: Upper end of that interval.
        level: Confidence level.
        grid: The public grid the estimates (or, for transformation mechanisms, the noisy
            transformed values) were rounded to: its step g (the multiples of g up to
            ``2**40·g`` in magnitude, 40 significant bits in units of g beyond; see
            docs/exact-rounding.md §5), a label such as ``'relative-36-bit'``, or ``None`` for
            mechanisms without rounding (discrete noise).
        fallbacks: Number of cells whose rounding was decided by the high-precision path
            (typically 0). CONFIDENTIAL: whether a cell falls back depends on its exact centre
            (how close it lies to a grid breakpoint), not only on the released value, so the
            count is kept out of public summaries (the release workflow puts it in the
            confidential folder).

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> r = Gaussian(sigma=1.0).release_table([10.0, 20.0], rng=0)
        >>> r.estimate.shape, float(r.sd[0]), r.grid
        ((2,), 1.0, 0.01)
    """

    estimate: np.ndarray
    sd: np.ndarray
    moe: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    level: float
    grid: float | str | None = None
    fallbacks: int = 0


@dataclass(frozen=True)
class LawOfSums:
    """The law of the error of a sum of n cells released by one additive mechanism.

    What [`Mechanism.sum_law`][tabdp.mechanisms.Mechanism.sum_law] returns and
    [`sum_error_law`][tabdp.release.sum_error_law] turns into margins of error: the error of a sum
    of n cells is the n-fold convolution of the cell noise, and ``kind`` names the exact method for
    it.

    Attributes:
        kind: ``"gaussian"`` (``z·scale·√n``), ``"stable"`` (``n^(1/alpha)`` times the one-cell
            margin), ``"laplace"`` / ``"logistic"`` (closed-form characteristic function with
            scale ``scale``), ``"integer"`` (exact law on the integer lattice) or ``"lattice"``
            (numerical n-fold convolution of the density).
        noise: The noise law of one cell.
        scale: σ (``"gaussian"``) or the scale b (``"laplace"``, ``"logistic"``); unused otherwise.
        alpha: Stability index (``"stable"``); unused otherwise.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> law = Gaussian(sigma=2.0).sum_law()
        >>> law.kind, law.scale
        ('gaussian', 2.0)
    """

    kind: Literal["gaussian", "stable", "laplace", "logistic", "integer", "lattice"]
    noise: Any
    scale: float = 1.0
    alpha: float = 2.0


class Mechanism(ByParams, ABC):
    """Base class of all tabdp mechanisms.

    Subclasses implement [`rho`][tabdp.mechanisms.Mechanism.rho],
    [`epsilon`][tabdp.mechanisms.Mechanism.epsilon],
    [`release_table`][tabdp.mechanisms.Mechanism.release_table],
    [`sd_at`][tabdp.mechanisms.Mechanism.sd_at] and [`params`][tabdp.mechanisms.Mechanism.params].

    Example:
        >>> from tabdp.mechanisms import Laplace
        >>> m = Laplace(scale=2.0)
        >>> float(m.epsilon(1.0)), m.pure
        (0.5, True)
    """

    #: Family name used in reports and specs.
    family: str = "mechanism"
    #: Whether the mechanism is pure (finite PRDP ε).
    pure: bool = False
    #: Whether cell totals must be non-negative (transformation mechanisms).
    requires_nonnegative: bool = False
    #: Whether estimates are unbiased for the true value in the mean (vs. median) sense.
    unbiased: str = "mean"
    #: Text of the PRzCDP policy formula, for the public summary.
    policy_formula: str = ""
    #: Whether neighbouring outputs are a Gaussian shift of μ = sqrt(2·ρ(Δ)) standard deviations
    #: (Gaussian noise, in value or transformed space): its (ε, δ) profile is then exactly the
    #: Gaussian one, and such losses compose exactly (μ² add up).
    gaussian_dp: bool = False
    #: Per-cell δ of mechanisms whose only guarantee is approximate DP (no pure ε, no zCDP ρ):
    #: their per-record loss is accounted as ``approx_epsilon(Δ, dp_delta)`` with δ = dp_delta
    #: per cell touched. ``None`` for mechanisms with a pure or zCDP guarantee.
    dp_delta: float | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Subclasses' ``rho``/``epsilon`` accept the old keyword ``delta`` for one release."""
        super().__init_subclass__(**kwargs)
        wrap_sensitivity_methods(cls)

    @abstractmethod
    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRzCDP policy ρ(Δ), vectorized over Δ ≥ 0.

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> Gaussian(sigma=1.0).rho([0.0, 2.0]).tolist()
            [0.0, 2.0]
        """

    @abstractmethod
    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRDP policy ε(Δ), vectorized; ``inf`` for Δ > 0 if the mechanism is not pure.

        Example:
            >>> from tabdp.mechanisms import Laplace
            >>> Laplace(scale=2.0).epsilon([1.0, 4.0]).tolist()
            [0.5, 2.0]
        """

    @abstractmethod
    def release_table(self, values: ArrayLike, rng: Any = None,
                      level: float = DEFAULT_LEVEL, grid: Any = None) -> ReleasedValues:
        """Release noisy estimates of ``values`` with sd, moe and interval.

        Continuous mechanisms round the exact output to a public ``grid`` (None: the mechanism's
        default grid, see [`default_grid`][tabdp.mechanisms.Mechanism.default_grid]) and widen the
        interval by half a grid step.

        Example:
            >>> from tabdp.mechanisms import Laplace
            >>> r = Laplace(scale=1.0).release_table([5.0], rng=0)
            >>> bool(r.lower[0] < r.estimate[0] < r.upper[0])
            True
        """

    @abstractmethod
    def sd_at(self, values: ArrayLike) -> np.ndarray:
        """Exact standard deviation of the estimator when the true values are ``values``.

        Example:
            >>> from tabdp.mechanisms import LogTransform
            >>> import math
            >>> sd = LogTransform(sigma=0.1, offset=1.0).sd_at([99.0])[0]
            >>> round(float(sd), 6) == round(math.sqrt(math.expm1(0.01)) * 100.0, 6)
            True
        """

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Public parameters of the mechanism.

        Example:
            >>> from tabdp.mechanisms import UnitSplitting
            >>> UnitSplitting(threshold=10.0, sigma=1.0).params()
            {'threshold': 10.0, 'sigma': 1.0}
        """

    # -- shared behaviour ---------------------------------------------------------------------
    def check_releasable(self) -> None:
        """Check, from the public parameters alone, that this mechanism can draw its noise.

        Releases call it before any data is read, so that a parameter outside the range the
        noise can be drawn in is refused as such (never as a failure on the data). The base
        class accepts every mechanism; additive mechanisms check their noise scale
        ([`AdditiveMechanism.check_releasable`][tabdp.mechanisms.AdditiveMechanism.check_releasable]),
        transformation mechanisms their σ.

        Raises:
            InvalidParameterError: If the noise cannot be drawn with these parameters.

        Example:
            >>> from tabdp.mechanisms import UnitSplitting
            >>> UnitSplitting(threshold=10.0, sigma=1.0).check_releasable()
        """
        return None

    def sum_law(self) -> LawOfSums:
        """The law of the error of a sum of released cells (additive mechanisms only).

        Rollups use it for the margin of error of a total of released cells. The base class has
        none: a mechanism whose cell errors are not iid additive noise raises.

        Returns:
            The [`LawOfSums`][tabdp.mechanisms.LawOfSums] of this mechanism's noise.

        Raises:
            InvalidParameterError: If sums of this mechanism's cells have no fixed law.

        Example:
            >>> from tabdp.mechanisms import Laplace
            >>> Laplace(scale=1.5).sum_law().kind
            'laplace'
        """
        raise InvalidParameterError(
            "mechanism must be an additive tabdp mechanism (Gaussian, Laplace, "
            "GeneralizedGaussian, ExpPolyLog, UnitSplitting, Logistic, Subbotin, SymmetricStable, "
            f"DiscreteGaussian, DiscreteLaplace); got {self!r} of type "
            f"{type(self).__name__}.\nHint: pass the mechanism that released the measure.")

    def for_counts(self) -> Mechanism:
        """The mechanism a count is released with when its grid is integral: by default itself.

        Counts are integer queries; mechanisms with an exact integer counterpart of the same
        guarantee (``Gaussian`` → ``DiscreteGaussian``, ``Laplace`` → ``DiscreteLaplace``)
        return it, so that no floating point reaches the count.

        Returns:
            The mechanism to release counts with.

        Example:
            >>> from tabdp.mechanisms import Gaussian, LogTransform
            >>> Gaussian(3.0).for_counts()
            DiscreteGaussian(sigma=3.0)
            >>> LogTransform(sigma=0.5, offset=1.0).for_counts()
            LogTransform(sigma=0.5, offset=1.0, estimator='mean')
        """
        return self

    def approx_epsilon(self, sensitivity: ArrayLike, delta: float) -> np.ndarray:
        """Per-record (ε, δ)-DP policy: the ε this mechanism gives a record of sensitivity Δ at δ.

        The default is exact for Gaussian-shift mechanisms (`gaussian_dp`, via
        [`gdp_epsilon`][tabdp.privacy.conversions.gdp_epsilon]) and otherwise the better of the pure
        ε(Δ) and the zCDP conversion of ρ(Δ); mechanisms with a closed form override it.

        Args:
            sensitivity: Per-record sensitivities Δ ≥ 0.
            delta: δ in (0, 1).

        Returns:
            ε(Δ) at δ (``inf`` where no (ε, δ) guarantee holds).

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> round(float(Gaussian(sigma=3.18570299).approx_epsilon(1.0, 1e-4)), 6)
            1.0
        """
        from tabdp.privacy.conversions import check_dp_delta, gdp_epsilon, zcdp_epsilon

        dd = check_dp_delta(delta, f"{type(self).__name__}.approx_epsilon")
        d = np.abs(np.asarray(sensitivity, dtype=np.float64))
        rho = np.asarray(self.rho(d), dtype=np.float64)
        if self.gaussian_dp:
            return gdp_epsilon(np.sqrt(2.0 * rho), dd)
        eps = np.asarray(self.epsilon(d), dtype=np.float64)
        return np.minimum(eps, zcdp_epsilon(rho, dd))

    def approx_policy(self, sensitivity: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """(ε, δ) charged per cell by mechanisms accounted in approximate DP only.

        Args:
            sensitivity: Per-record sensitivities Δ ≥ 0.

        Returns:
            ``(epsilon, delta)`` arrays: ``approx_epsilon(Δ, dp_delta)`` and ``dp_delta`` where
            Δ > 0 (0 and 0 at Δ = 0); both 0 when `dp_delta` is ``None``.

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> Gaussian(sigma=1.0).approx_policy([2.0])[1].tolist()
            [0.0]
        """
        d = np.abs(np.asarray(sensitivity, dtype=np.float64))
        if self.dp_delta is None:
            z = np.zeros(d.shape)
            return z, z.copy()
        pos = d > 0
        eps = np.where(pos, self.approx_epsilon(d, self.dp_delta), 0.0)
        return eps, np.where(pos, self.dp_delta, 0.0)

    def release(self, values: ArrayLike, rng: Any = None, grid: Any = None) -> np.ndarray:
        """Release noisy estimates of ``values`` (one independent draw per value).

        Args:
            values: Exact query values (cell totals), 1-D.
            rng: A [`RandomSource`][tabdp.RandomSource] (default: secure OS randomness), or an int
                seed / numpy Generator for tests.
            grid: Public rounding grid of the release (a positive step); None: the mechanism's
                documented default ([`default_grid`][tabdp.mechanisms.Mechanism.default_grid]).

        Returns:
            The estimates, a float64 array shaped like ``values``.

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> Gaussian(sigma=1.0).release([0.0, 5.0], rng=1, grid=0.5).tolist()[0] % 0.5
            0.0
        """
        if grid is None:  # subclasses without rounding (discrete noise) take no grid argument
            return self.release_table(values, rng).estimate
        return self.release_table(values, rng, grid=grid).estimate

    def default_grid(self) -> Any:
        """The public grid used when ``grid=None`` (None for mechanisms that need none).

        Continuous mechanisms override this (docs/exact-rounding.md, "Default grids").

        Returns:
            A grid step, a `tabdp.noise.exact.Grid`, or None.

        Example:
            >>> from tabdp.mechanisms import Laplace
            >>> Laplace(scale=100.0).default_grid()     # largest power of 10 <= 0.02·sd
            1.0
        """
        return None

    def moe_at(self, values: ArrayLike, level: float = DEFAULT_LEVEL) -> np.ndarray:
        """Expected margin of error (interval half-width) at true values, for planning.

        Additive and transformation mechanisms override it; their margins include half a step of
        the release's grid (``grid=`` argument, default grid by default).

        Args:
            values: Hypothetical true cell values.
            level: Confidence level.

        Returns:
            Half-widths, one per value.

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> round(float(Gaussian(sigma=1.0).moe_at([100.0])[0]), 3)   # 1.645 + 0.01/2
            1.65
        """
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """Public description: family, parameters, guarantee and policy formula.

        Returns:
            A JSON-serializable dict.

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> Gaussian(sigma=2.0).to_dict()["family"]
            'gaussian'
        """
        return {
            "family": self.family,
            "class": type(self).__name__,
            "params": self.params(),
            "pure": self.pure,
            "unbiased": self.unbiased,
            "requires_nonnegative": self.requires_nonnegative,
            "policy_rho": self.policy_formula,
            "gaussian_dp": self.gaussian_dp,
            "dp_delta_per_cell": self.dp_delta,
        }

    def _prepare(self, values: ArrayLike) -> np.ndarray:
        q = np.asarray(values, dtype=np.float64)
        if q.ndim != 1:
            q = q.reshape(-1)
        if not np.all(np.isfinite(q)):
            bad = int((~np.isfinite(q)).sum())
            raise DataValidationError(
                f"{type(self).__name__}.release: {bad} value(s) are NaN or infinite.\n"
                "Hint: clean the input or choose a null policy before releasing.")
        if self.requires_nonnegative and np.any(q < 0):
            bad = int((q < 0).sum())
            raise DataValidationError(
                f"{type(self).__name__}.release: {bad} value(s) are negative; this "
                "transformation mechanism needs non-negative totals (q + offset >= 0).\n"
                "Hint: release signed measures with an additive mechanism (Gaussian, "
                "ExpPolyLog), or split them into non-negative parts.")
        return q

    def _centres(self, values: Any) -> tuple[np.ndarray, np.ndarray | None,
                                             Callable[[int, Any], Any] | None]:
        """Float64 centres, their error bounds and the exact centres for exact rounding.

        An [`ExactTotals`][tabdp.mechanisms.ExactTotals] gives its nearest doubles, its error bounds
        and its exact values (``round_noisy(..., center_error=, exact_center=)`` then rounds
        ``T + Z`` for the exact T); it is finite by construction, so nothing is refused. Float64
        values are exact centres (validated by `_prepare`).
        """
        if isinstance(values, ExactTotals):
            q = np.array(values.approx, dtype=np.float64)
            if values.exact_everywhere:
                return q, None, None
            return q, np.array(values.error, dtype=np.float64), values.mp
        return self._prepare(values), None, None


def _draw_rng(rng: Any) -> Any:
    return as_random_source(rng)
