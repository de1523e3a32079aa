"""Release planning from public inputs: targets on a whole loss curve, forecasts, frontier, split.

[`calibrate`][tabdp.calibrate.calibrate] meets per-record loss targets at a few record sizes for one
family and one typical cell. An agency planning a release asks more: *which* mechanism, with which
parameters, publishes the most usable cells of the tables it plans, at a guarantee it can state
in words for every record size? This module answers from **public inputs only** — nothing here
reads confidential data:

* a *target curve*: the largest loss allowed at a few record sizes (anchors), as PRzCDP ρ or as
  pure ε, interpolated linearly in log(size) between the anchors.
  [`calibrate_to_curve`][tabdp.planning.calibrate_to_curve] meets it on the whole curve, checked on
  a dense grid of sizes between the anchors (not only at them), raising the noise scale if a
  family's policy bulges above the interpolation;
* a *declared distribution of cells*: the true totals of the cells a table will hold, e.g. the
  totals of a prior public release, or counts of establishments per cell times a public mean
  record size ([`cells_from_counts`][tabdp.planning.cells_from_counts]).

From these, [`forecast`][tabdp.planning.forecast] predicts the share of cells that will be flagged
(published coefficient of variation ``cv = sd / |estimate|`` at or above the flag threshold),
negative or without finite variance; [`plan_table`][tabdp.planning.plan_table] chooses the family
and its parameters that maximise the share of usable cells (ties: smallest error of the table's
total); [`frontier`][tabdp.planning.frontier] traces the trade-off between the loss allowed at the
largest record and the share of usable cells; [`split_budget`][tabdp.planning.split_budget] divides
a release-level budget between tables; [`usability_issues`][tabdp.planning.usability_issues] and
[`warn_usability`][tabdp.planning.warn_usability] say when a configuration cannot be usable.

The forecasts are exact expectations over the noise (closed-form CDFs for additive and discrete
mechanisms, on the public grid their estimates are rounded to, with a count's exact integer
counterpart where a count is released with it; 256 stratified normal quantiles for
transformation mechanisms, each rounded to the grid in transformed space the release rounds
the noisy transformed value to). They are expectations:
the realized share of a table of n cells scatters around them by about √(p(1 − p)/n).

Example:
    >>> from tabdp.planning import plan_table
    >>> cells = [0.0, 2e5, 1e6, 5e6, 2e7, 1e8, 5e8]
    >>> plan = plan_table({2.5e5: 0.5, 2e10: 50.0}, cells, families=["exp_polylog", "log"])
    >>> plan.family, round(plan.forecast.usable_share, 2)
    ('exp_polylog', 0.58)
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtr, ndtri

from tabdp._deprecation import renamed_argument
from tabdp._validation import check_cv_threshold, check_real
from tabdp.calibrate import CalibrationResult, calibrate
from tabdp.exceptions import CalibrationError, InvalidParameterError, UsabilityWarning
from tabdp.mechanisms import DEFAULT_LEVEL, Mechanism, pure_to_zcdp
from tabdp.mechanisms.additive import AdditiveMechanism
from tabdp.mechanisms.discrete import DiscreteAdditiveMechanism
from tabdp.mechanisms.transformation import LogTransform, TransformationMechanism

if TYPE_CHECKING:
    from tabdp.mechanisms.smooth import SmoothSensitivityRelease

__all__ = [
    "PLAN_FAMILIES",
    "ACCESSOR_CV_FLAG",
    "TargetCurve",
    "Forecast",
    "TablePlan",
    "FrontierPoint",
    "TableInput",
    "BudgetSplit",
    "cells_from_counts",
    "calibrate_to_curve",
    "forecast",
    "plan_table",
    "frontier",
    "split_budget",
    "cv_floor",
    "usability_issues",
    "warn_usability",
    "flag_curve",
    "guarantee_in_words",
    "spec_usability_issues",
    "warn_spec_usability",
    "spec_outlook",
    "published_usability",
]

#: Families :func:`plan_table` tries by default (unit splitting never beats the Gaussian).
PLAN_FAMILIES: tuple[str, ...] = (
    "exp_polylog", "log", "root", "generalized_gaussian", "laplace", "gaussian")
#: Flag threshold the ``.dp`` accessor checks its mechanism against (it publishes no flags;
#: 0.3 is the usual threshold of low reliability, and the release workflow's default).
ACCESSOR_CV_FLAG = 0.3
_PURE_FAMILIES = ("exp_polylog", "generalized_gaussian", "laplace")
_GRID_POINTS = 2001
_QUAD_NODES = 256
_CHUNK = 4096


# -- target curves ------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetCurve:
    """Largest per-record loss allowed as a function of record size.

    Given at anchors (record size → limit) and interpolated linearly in log(size) between them;
    beyond the anchors the nearest anchor's limit applies. ``kind`` says whether the limits are
    PRzCDP ρ or pure (PRDP) ε; a pure ε limit is the ρ limit ε·tanh(ε/2) for pure mechanisms
    (the conversion is increasing, so the two statements are equivalent for them).

    Attributes:
        sizes: Anchor record sizes, increasing.
        limits: Loss limits at the anchors (non-decreasing: a larger record may not be promised
            a smaller loss, since every policy increases with size).
        kind: ``"rho"`` or ``"epsilon"``.

    Example:
        >>> c = TargetCurve.from_mapping({1e3: 0.5, 1e7: 10.0})
        >>> float(c.at(1e5))      # halfway in log(size)
        5.25
        >>> c.grid(5).tolist()
        [1000.0, 10000.0, 100000.0, 1000000.0, 10000000.0]
    """

    sizes: tuple[float, ...]
    limits: tuple[float, ...]
    kind: str = "rho"

    @classmethod
    def from_mapping(cls, targets: Mapping[float, float] | TargetCurve,
                     kind: str = "rho") -> TargetCurve:
        """Validate ``{size: limit}`` and build the curve.

        Args:
            targets: Record size (> 0) → largest loss allowed (> 0), or a curve (returned as is).
            kind: ``"rho"`` (PRzCDP) or ``"epsilon"`` (pure PRDP).

        Returns:
            The curve.

        Raises:
            InvalidParameterError: Empty or malformed targets, an unknown ``kind``, or limits
                that decrease with size.

        Example:
            >>> TargetCurve.from_mapping({10: 1.0}, kind="epsilon").kind
            'epsilon'
        """
        if isinstance(targets, TargetCurve):
            return targets
        if kind not in ("rho", "epsilon"):
            raise InvalidParameterError(
                f"planning: kind must be 'rho' or 'epsilon'; got {kind!r}.\nHint: 'rho' for "
                "PRzCDP targets, 'epsilon' for pure (PRDP) targets.")
        if not isinstance(targets, Mapping) or not targets:
            raise InvalidParameterError(
                f"planning: targets must be a non-empty mapping from record size to the largest "
                f"loss allowed; got {targets!r}.\nHint: e.g. {{2.5e5: 0.5, 2e10: 50.0}}.")
        pairs = sorted(
            (check_real("record size (a key of targets)", s, owner="planning", gt=0.0),
             check_real("target loss", v, owner="planning", gt=0.0))
            for s, v in targets.items())
        sizes = tuple(p[0] for p in pairs)
        limits = tuple(p[1] for p in pairs)
        if len(set(sizes)) != len(sizes):
            raise InvalidParameterError(
                f"planning: targets name the same record size twice ({list(sizes)}).\n"
                "Hint: give one limit per size.")
        for i in range(1, len(limits)):
            if limits[i] < limits[i - 1]:
                raise InvalidParameterError(
                    f"planning: the target at size {sizes[i]:g} ({limits[i]:g}) is below the "
                    f"target at the smaller size {sizes[i - 1]:g} ({limits[i - 1]:g}); every "
                    "policy increases with size, so the curve must not decrease.\nHint: raise "
                    "the larger size's limit or lower the smaller one's.")
        return cls(sizes, limits, kind)

    @renamed_argument("delta", "sensitivity")
    def at(self, sensitivity: ArrayLike) -> np.ndarray:
        """Limit at record sizes ``sensitivity`` (log-linear between anchors, flat beyond).

        Example:
            >>> TargetCurve.from_mapping({1.0: 1.0}).at([0.5, 2.0]).tolist()
            [1.0, 1.0]
        """
        d = np.asarray(sensitivity, dtype=np.float64)
        return np.interp(np.log(d), np.log(self.sizes), self.limits)

    @renamed_argument("delta", "sensitivity")
    def rho_at(self, sensitivity: ArrayLike) -> np.ndarray:
        """The limit as PRzCDP ρ (ε limits converted by ε·tanh(ε/2)).

        Example:
            >>> round(float(TargetCurve.from_mapping({1.0: 2.0}, "epsilon").rho_at(1.0)), 4)
            1.5232
        """
        v = self.at(sensitivity)
        return pure_to_zcdp(v) if self.kind == "epsilon" else v

    def rho_anchors(self) -> dict[float, float]:
        """The anchors as ``{size: ρ limit}`` (what [`calibrate`][tabdp.calibrate.calibrate] takes).

        Example:
            >>> TargetCurve.from_mapping({1.0: 0.5}).rho_anchors()
            {1.0: 0.5}
        """
        return {s: float(r) for s, r in zip(self.sizes, self.rho_at(self.sizes), strict=True)}

    def grid(self, n: int = _GRID_POINTS) -> np.ndarray:
        """Dense grid of sizes between the smallest and largest anchor (anchors included).

        Example:
            >>> TargetCurve.from_mapping({1.0: 0.5, 100.0: 1.0}).grid(3).tolist()
            [1.0, 10.0, 100.0]
        """
        g = np.geomspace(self.sizes[0], self.sizes[-1], n) if len(self.sizes) > 1 else \
            np.array(self.sizes)
        return np.unique(np.concatenate([g, np.array(self.sizes)]))

    @renamed_argument("delta", "sensitivity")
    def loss_of(self, mechanism: Mechanism, sensitivity: ArrayLike) -> np.ndarray:
        """The mechanism's loss at ``sensitivity`` in this curve's kind (ρ or ε).

        Example:
            >>> from tabdp.mechanisms import Laplace
            >>> TargetCurve.from_mapping({1.0: 1.0}, "epsilon").loss_of(Laplace(1.0), 2.0)
            array(2.)
        """
        with np.errstate(all="ignore"):
            if self.kind == "epsilon":
                return np.asarray(mechanism.epsilon(sensitivity), dtype=np.float64)
            return np.asarray(mechanism.rho(sensitivity), dtype=np.float64)

    def worst_ratio(self, mechanism: Mechanism, n: int = _GRID_POINTS) -> tuple[float, float]:
        """Largest loss/limit ratio of ``mechanism`` on the dense grid, and the size attaining it.

        A ratio ≤ 1 means the mechanism meets the whole curve between the anchors.

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> c = TargetCurve.from_mapping({1.0: 0.5, 10.0: 50.0})
            >>> r, at = c.worst_ratio(Gaussian(sigma=1.0))
            >>> round(r, 3), at
            (1.0, 1.0)
        """
        g = np.unique(np.concatenate([self.grid(n), _jumps(mechanism, self.sizes[0],
                                                            self.sizes[-1])]))
        ratio = self.loss_of(mechanism, g) / self.at(g)
        i = int(np.argmax(ratio))
        return float(ratio[i]), float(g[i])

    def describe(self) -> str:
        """The anchors in words.

        Example:
            >>> TargetCurve.from_mapping({1e3: 0.5, 1e7: 10.0}).describe()
            'size 1000: rho <= 0.5; size 1e+07: rho <= 10'
        """
        sym = "rho" if self.kind == "rho" else "epsilon"
        return "; ".join(f"size {s:g}: {sym} <= {v:g}" for s, v in
                         zip(self.sizes, self.limits, strict=True))


def _jumps(mech: Mechanism, lo: float, hi: float) -> np.ndarray:
    """Sizes just past the jumps of a step policy (unit splitting: multiples of its threshold).

    A step policy is largest just right of each jump, which a grid can miss; continuous
    policies have no jumps.
    """
    tau = mech.params().get("threshold") if type(mech).__name__ == "UnitSplitting" else None
    if tau is None:
        return np.zeros(0)
    n = np.arange(max(1.0, math.floor(lo / tau)), min(math.floor(hi / tau), 1e5) + 1.0)
    x = n * tau
    x = np.concatenate([x, x * (1.0 + 2.0**-40)])
    return x[(x >= lo) & (x <= hi)]


def _scale_name(mech: Mechanism) -> str:
    params = mech.params()
    for name in ("sigma", "scale", "gamma"):
        if name in params:
            return name
    raise InvalidParameterError(  # pragma: no cover - every calibrated family has one
        f"planning: {mech!r} has no scale parameter to raise.")


def _rescaled(mech: Mechanism, factor: float) -> Mechanism:
    params = dict(mech.params())
    name = _scale_name(mech)
    params[name] = params[name] * factor
    return type(mech)(**params)


def calibrate_to_curve(family: str, targets: Mapping[float, float] | TargetCurve,
                       typical_total: float, *, kind: str = "rho",
                       level: float = DEFAULT_LEVEL, objective: str = "auto",
                       grid_points: int = _GRID_POINTS, **fixed: Any) -> CalibrationResult:
    """Calibrate one family so its loss stays below the target curve at every size between anchors.

    Runs [`calibrate`][tabdp.calibrate.calibrate] on the anchors, then checks the policy on
    ``grid_points`` log-spaced sizes between the smallest and largest anchor; where it exceeds the
    log-linear interpolation of the limits, the scale is raised (bisection) until it does not.
    Policies that are convex in log(size) (all the shipped continuous families) never need it; unit
    splitting, whose loss jumps at multiples of its threshold, may.

    Args:
        family: A family name of [`tabdp.calibrate.FAMILIES`][tabdp.calibrate.FAMILIES].
        targets: Record size → largest loss, or a [`TargetCurve`][tabdp.planning.TargetCurve].
        typical_total: True total of a typical cell (the error is minimized there).
        kind: ``"rho"`` or ``"epsilon"`` (pure targets: only the pure families ``exp_polylog``,
            ``generalized_gaussian`` and ``laplace`` can meet them).
        level: Confidence level of margins of error.
        objective: As for [`tabdp.calibrate`][tabdp.calibrate.calibrate].
        grid_points: Number of sizes checked between the anchors.
        **fixed: Pinned parameters, as for [`tabdp.calibrate`][tabdp.calibrate.calibrate].

    Returns:
        The calibration result; ``notes`` say if the scale had to be raised.

    Raises:
        CalibrationError: Pure ε targets for a family without pure DP, or as
            [`tabdp.calibrate`][tabdp.calibrate.calibrate].
        InvalidParameterError: Malformed targets.

    Example:
        >>> res = calibrate_to_curve("exp_polylog", {2.5e5: 1.0, 2e10: 50.0}, 1e7,
        ...                          kind="epsilon", p=1)
        >>> c = TargetCurve.from_mapping({2.5e5: 1.0, 2e10: 50.0}, "epsilon")
        >>> c.worst_ratio(res.mechanism)[0] <= 1.0
        True
    """
    curve = TargetCurve.from_mapping(targets, kind)
    if curve.kind == "epsilon":
        from tabdp.calibrate import _canonical_family

        canon = _canonical_family(family)
        if canon not in _PURE_FAMILIES:
            raise CalibrationError(
                f"calibrate_to_curve({family!r}): the targets are pure epsilon, but this family "
                "has no pure-DP guarantee (its epsilon is infinite).\nHint: use one of "
                f"{', '.join(_PURE_FAMILIES)}, or give the targets as rho (kind='rho').")
    res = calibrate(family, curve.rho_anchors(), typical_total, level=level,
                    objective=objective, **fixed)
    ratio, where = curve.worst_ratio(res.mechanism, grid_points)
    if ratio <= 1.0:
        return res
    lo, hi = 1.0, 2.0
    while curve.worst_ratio(_rescaled(res.mechanism, hi), grid_points)[0] > 1.0:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:  # pragma: no cover - policies decrease in the scale
            raise CalibrationError(
                f"calibrate_to_curve({family!r}): could not meet the curve by raising the scale.")
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if curve.worst_ratio(_rescaled(res.mechanism, mid), grid_points)[0] > 1.0:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.0 + 1e-9:
            break
    mech = _rescaled(res.mechanism, hi)
    q = np.array([res.typical_total])
    with np.errstate(all="ignore"):
        sd = float(mech.sd_at(q)[0])
        moe = float(mech.moe_at(q, res.level)[0])
    achieved = {d: float(mech.rho(d)) for d in res.targets}
    note = (f"between the anchors the policy exceeded the interpolated curve by a factor "
            f"{ratio:.4g} (at size {where:g}); the scale was raised x{hi:.6g} to meet it "
            f"on {grid_points} sizes")
    return dataclasses.replace(
        res, mechanism=mech, params=MappingProxyType(dict(mech.params())),
        achieved=MappingProxyType(achieved), sd=sd, moe=moe,
        binding=(), notes=(*res.notes, note))


# -- declared cells -----------------------------------------------------------------------------
def cells_from_counts(counts: ArrayLike, mean_record: float) -> np.ndarray:
    """Planned cell totals from public counts of records per cell and a public mean record size.

    A planning assumption, not a fact about the data: the total of a cell of ``n`` records is
    taken as ``n × mean_record``. Better, where a prior public release published totals, pass
    those totals to [`forecast`][tabdp.planning.forecast] directly.

    Args:
        counts: Records per cell (≥ 0), e.g. establishments per county × sector in a prior
            public release; empty cells included.
        mean_record: Mean contribution of a record (> 0), e.g. mean payroll per establishment.

    Returns:
        Planned totals, one per cell.

    Example:
        >>> cells_from_counts([0, 3, 10], 2.5e5).tolist()
        [0.0, 750000.0, 2500000.0]
    """
    c = np.asarray(counts, dtype=np.float64).ravel()
    if c.size == 0 or not np.all(np.isfinite(c)) or np.any(c < 0):
        raise InvalidParameterError(
            "cells_from_counts: counts must be a non-empty list of finite numbers >= 0 (records "
            "per cell).\nHint: include empty cells as 0.")
    m = check_real("mean_record", mean_record, owner="cells_from_counts", gt=0.0)
    return c * m


def _cells(cell_totals: ArrayLike) -> np.ndarray:
    c = np.asarray(cell_totals, dtype=np.float64).ravel()
    if c.size == 0:
        raise InvalidParameterError(
            "planning: cell_totals is empty.\nHint: give the planned true totals of the table's "
            "cells (e.g. a prior public release's totals), empty cells as 0.")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise InvalidParameterError(
            "planning: cell_totals must be finite and >= 0 (planned true totals of the cells).\n"
            "Hint: use cells_from_counts(counts, mean_record) to build them from counts.")
    return c


# -- forecasts ----------------------------------------------------------------------------------
def _probabilities(mech: Mechanism, q: np.ndarray, cv_flag: float, grid: float | None = None
                   ) -> tuple[np.ndarray, np.ndarray, bool]:
    """P(published cv >= cv_flag), P(estimate < 0) per cell, and whether the sd is finite.

    ``grid``: the public grid an additive mechanism's estimate is rounded to (the estimate is
    ``k·grid``, the multiple nearest ``q + Z``): a negative estimate then needs
    ``q + Z < −grid/2``, and a flag ``|k·grid| <= sd/cv_flag``. ``None``: the unrounded
    estimate (review rev63p: the demo's payroll forecast said 49.8% of cells of $1,000 are
    published negative; on its grid of $10,000, 48.9% are). A discrete mechanism's integral
    grid ``k > 1`` too, with its ties to the even multiple (review rev63d: a discrete Gaussian
    σ = 20 count on a grid of 2 was forecast 47.0% negative at a total of 1; 45.1% are).
    A transformation mechanism's ``grid`` is in transformed space: each quantile of the noisy
    transformed value is rounded to it before the estimator, as the release does.
    """
    if isinstance(mech, DiscreteAdditiveMechanism):
        s = float(mech.noise.std())
        t = s / cv_flag
        qi = np.round(q)
        # an integral grid k > 1: the estimate is q + Z rounded to the nearest multiple of k,
        # ties to the even multiple (`DiscreteAdditiveMechanism.release_table`); k = 1: q + Z
        k = (int(grid) if grid is not None and math.isfinite(grid) and grid > 1
             and float(grid).is_integer() else 1)
        # flagged: |m·k| <= t for the published m·k, i.e. |m| <= M, i.e. |q + Z| <= top
        big_m = math.floor(t / k)
        top = big_m * k + k // 2 - (1 if k % 2 == 0 and big_m % 2 == 1 else 0)
        flag = (np.asarray(mech.noise.cdf(top - qi))
                - np.asarray(mech.noise.cdf(-top - qi - 1.0)))
        # negative: q + Z below -k/2 (a tie at -k/2 goes to 0, the even multiple)
        neg = np.asarray(mech.noise.cdf(-(k // 2) - qi - 1.0))
        return np.clip(flag, 0.0, 1.0), np.clip(neg, 0.0, 1.0), True
    if isinstance(mech, AdditiveMechanism):
        with np.errstate(all="ignore"):
            s = float(mech.sd_at(np.zeros(1))[0])
        noise = mech.noise
        g = grid if grid is not None and math.isfinite(grid) and grid > 0 else None
        neg = np.asarray(noise.cdf(-q if g is None else -q - 0.5 * g), dtype=np.float64)
        if not math.isfinite(s):
            return np.ones_like(q), neg, False
        t = s / cv_flag
        if g is not None:  # flagged: |k| <= floor(t / g), i.e. q + Z within (K + 1/2) steps
            t = (math.floor(t / g) + 0.5) * g
        flag = np.asarray(noise.cdf(t - q)) - np.asarray(noise.cdf(-t - q))
        return np.clip(flag, 0.0, 1.0), neg, True
    if isinstance(mech, TransformationMechanism):
        z = ndtri((np.arange(_QUAD_NODES) + 0.5) / _QUAD_NODES)
        flag = np.empty_like(q)
        neg = np.empty_like(q)
        step = max(1, _CHUNK * 64 // _QUAD_NODES)
        # the release rounds the noisy TRANSFORMED value to its grid before the estimator
        # (`TransformationMechanism.release_table`: ṽ = round_grid(f(q + a) + σZ)); beyond
        # 2**40 steps the grid's spacing doubles per binade (at most 2**-40 of ṽ: ignored)
        tg = grid if grid is not None and math.isfinite(grid) and grid > 0 else None
        for i in range(0, q.size, step):
            qq = q[i:i + step]
            v = mech.transform(qq)[:, None] + mech.sigma * z[None, :]
            if tg is not None:
                v = np.round(v / tg) * tg
            with np.errstate(all="ignore"):
                est = mech.estimate(v)
                qhat = np.maximum(mech.median_estimate(v), 0.0)
                sd = mech.sd_at(qhat)
                cv = np.where(est != 0.0, sd / np.abs(est), np.inf)
            flag[i:i + step] = np.mean(cv >= cv_flag, axis=1)
            neg[i:i + step] = np.mean(est < 0.0, axis=1)
        return flag, neg, True
    raise InvalidParameterError(
        f"forecast: no forecast for {type(mech).__name__}; forecasts cover additive, discrete and "
        "transformation mechanisms.\nHint: simulate with mechanism.release_table on planned "
        "totals instead.")


@dataclass(frozen=True)
class Forecast:
    """Expected publication outcome of one table, from planned cell totals (public inputs).

    Attributes:
        cells: Number of cells.
        flagged_share: Expected share of cells flagged low-reliability (published
            ``cv >= cv_flag``, or no finite sd).
        usable_share: ``1 − flagged_share``.
        negative_share: Expected share of cells with a negative estimate.
        expected_flagged: Expected number of flagged cells.
        expected_negative: Expected number of negative estimates.
        median_relative_sd: Median over cells with a positive total of sd / total.
        total_sd: Standard deviation of the sum of all cells (a rollup to the table's total).
        finite_sd: Whether the mechanism has a finite standard deviation.
        cv_flag: The flag threshold.
        per_cell_flag: Probability that each cell is flagged (same order as the input).

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> f = forecast(Gaussian(sigma=1.0), [0.0, 100.0])
        >>> f.flagged_share, round(f.negative_share, 3)
        (0.5, 0.25)
    """

    cells: int
    flagged_share: float
    usable_share: float
    negative_share: float
    expected_flagged: float
    expected_negative: float
    median_relative_sd: float
    total_sd: float
    finite_sd: bool
    cv_flag: float
    per_cell_flag: np.ndarray = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (without the per-cell probabilities).

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> sorted(forecast(Gaussian(sigma=1.0), [5.0]).to_dict())[:3]
            ['cells', 'cv_flag', 'expected_flagged']
        """
        d = dataclasses.asdict(self)
        d.pop("per_cell_flag")
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in d.items()}


def _grid_arg(grid: Any, owner: str) -> float | None:
    """A caller's grid step: ``None`` or a positive finite number."""
    if grid is None:
        return None
    if isinstance(grid, bool) or not isinstance(grid, (int, float, np.integer, np.floating)):
        raise InvalidParameterError(
            f"{owner}: grid must be a positive number (a grid step) or None; got "
            f"{type(grid).__name__}.\nHint: pass the step the table's estimates are rounded "
            "to, e.g. grid=1.0, or leave it out for the mechanism's default grid.")
    return check_real("grid", float(grid), owner=owner, gt=0.0)


def forecast(mechanism: Mechanism, cell_totals: ArrayLike, *,
             cv_flag: float = 0.3, grid: float | None = None,
             count: bool = False) -> Forecast:
    """Forecast the flagged, usable and negative shares of a table from planned cell totals.

    The shares are those of the cells as released: a continuous additive mechanism's estimate
    is the point of the public grid nearest the noisy value (a cell is published negative only
    when the noisy value is below ``−grid/2``, flagged when ``|estimate| <= sd / cv_flag`` on
    the grid), and a count on an integral grid is drawn from its mechanism's exact integer
    counterpart (``Gaussian(σ)`` → ``DiscreteGaussian(σ)``), as a release spec's plan
    forecasts them. A transformation mechanism (log, root) publishes its estimator of the noisy
    TRANSFORMED value rounded to its grid in transformed space (``grid``, default its
    ``default_grid()``), and is forecast so.

    Args:
        mechanism: The mechanism the table will use.
        cell_totals: Planned true totals of the table's cells (≥ 0; empty cells as 0), from
            public inputs only (a prior public release, or
            [`cells_from_counts`][tabdp.planning.cells_from_counts]).
        cv_flag: The publication rule's flag threshold (cells with ``cv >= cv_flag`` are
            flagged).
        grid: The grid step the estimates are rounded to (``None``: the mechanism's default
            grid, what ``release_table`` and a release spec use; the ``.dp`` accessor rounds
            integer measures and counts to 1 where that default is finer: pass ``grid=1.0``).
            For a transformation mechanism, the step of the noisy transformed value.
        count: Whether the cells are counts (released with the mechanism's integer counterpart
            on an integral or default grid, `Mechanism.for_counts`).

    Returns:
        A [`Forecast`][tabdp.planning.Forecast].

    Raises:
        InvalidParameterError: Malformed cell totals, threshold or grid, or a mechanism type
            without a forecast.

    Example:
        >>> from tabdp.mechanisms import ExpPolyLog, Gaussian, Laplace
        >>> m = ExpPolyLog(sigma=1.1e6, a=1.0, d=5.1)
        >>> f = forecast(m, [0.0, 1e6, 1e7, 1e8])
        >>> [round(float(p), 2) for p in f.per_cell_flag]
        [0.99, 0.96, 0.0, 0.0]

        A cell of 3 under Laplace noise of scale 10 on a grid of 1 is published negative when
        ``3 + Z < −0.5`` (the unrounded law says 0.370); a count of 1 planned with
        ``Gaussian(3)`` is drawn as a discrete Gaussian count (the continuous law says 0.369):

        >>> round(forecast(Laplace(scale=10.0), [3.0], grid=1.0).negative_share, 3)
        0.352
        >>> round(forecast(Gaussian(sigma=3.0), [1.0], count=True).negative_share, 3)
        0.31
    """
    q = _cells(cell_totals)
    thr = check_cv_threshold("cv_flag", cv_flag, owner="forecast")
    mech, g = _released_law(mechanism, _grid_arg(grid, "forecast"), count)
    flag, neg, finite = _probabilities(mech, q, thr, g)
    with np.errstate(all="ignore"):
        sd = np.asarray(mech.sd_at(q), dtype=np.float64)
    pos = q > 0
    rel = float(np.median(sd[pos] / q[pos])) if np.any(pos) else math.inf
    total_sd = float(np.sqrt(np.sum(sd**2)))
    fs = float(np.mean(flag))
    return Forecast(cells=int(q.size), flagged_share=fs, usable_share=1.0 - fs,
                    negative_share=float(np.mean(neg)), expected_flagged=float(np.sum(flag)),
                    expected_negative=float(np.sum(neg)), median_relative_sd=rel,
                    total_sd=total_sd, finite_sd=finite, cv_flag=thr, per_cell_flag=flag)


# -- usability warnings -------------------------------------------------------------------------
def cv_floor(mechanism: Mechanism | SmoothSensitivityRelease) -> float:
    """Smallest coefficient of variation the mechanism can reach, however large the cell.

    The log transform's sd grows in proportion to the total: its cv tends to √(e^{σ²} − 1) (mean
    estimator; the median estimator's is e^{σ²/2} times that), so no cell gets below it; the
    published cv, computed at the estimate, is about e^{σ²/2} times higher still for the mean
    estimator. Every other shipped mechanism's cv tends to 0.

    Args:
        mechanism: Any mechanism.

    Returns:
        The floor (0.0 where cells large enough are always precise).

    Example:
        >>> from tabdp.mechanisms import LogTransform
        >>> round(cv_floor(LogTransform(sigma=0.3, offset=1e5)), 3)
        0.307
    """
    if isinstance(mechanism, LogTransform):
        s2 = mechanism.sigma**2
        f = math.sqrt(math.expm1(s2)) if s2 < 700 else math.inf
        if mechanism.estimator == "median":
            f *= math.exp(0.5 * s2) if s2 < 1400 else math.inf
        return f
    return 0.0


def usability_issues(mechanism: Mechanism | SmoothSensitivityRelease, *,
                     cv_flag: float | None = 0.3,
                     publishes_sd: bool = True,
                     calibration: CalibrationResult | None = None) -> list[str]:
    """Reasons a configuration cannot publish usable estimates (empty list: none found).

    Checked: a cv floor ([`cv_floor`][tabdp.planning.cv_floor]) at or above the flag threshold
    (every cell flagged); noise without a finite mean or variance while sd and margins of error are
    published; calibrated parameters at the edge of their search range (from the calibration's
    notes).

    Args:
        mechanism: The mechanism (or a smooth-sensitivity release).
        cv_flag: The flag threshold (None: flags disabled, the floor is not checked).
        publishes_sd: Whether sd/cv are published (tables and the accessor publish them).
        calibration: The calibration that produced the mechanism, if any.

    Returns:
        One message per problem, each saying what to change.

    Example:
        >>> from tabdp.mechanisms import LogTransform
        >>> usability_issues(LogTransform(sigma=0.3, offset=1e5))[0][:60]
        'the log transform with sigma = 0.3 has a coefficient of vari'
    """
    out: list[str] = []
    if cv_flag is not None:
        cv_flag = check_cv_threshold("cv_flag", cv_flag, owner="usability_issues")
    floor = cv_floor(mechanism)
    if cv_flag is not None and floor >= cv_flag:
        sig = getattr(mechanism, "sigma", float("nan"))
        out.append(
            f"the log transform with sigma = {sig:g} has a coefficient of variation floor "
            f"sqrt(exp(sigma^2) - 1) = {floor:.3g} >= the flag threshold {cv_flag:g}: every cell "
            f"will be flagged, however large. Fix: lower sigma to {_sigma_below(cv_flag)} or "
            "less, or use a family whose relative error vanishes for large cells (exp_polylog, "
            "root).")
    p = mechanism.params()
    name = type(mechanism).__name__
    no_mean = no_var = False
    if name == "ExpPolyLog" and float(p.get("p", 1.0)) == 1.0:
        no_mean = float(p["d"]) <= 2.0
        no_var = float(p["d"]) <= 3.0
    elif name == "SymmetricStable":
        alpha = float(p.get("alpha", 2.0))
        no_mean = alpha <= 1.0
        no_var = alpha < 2.0
    elif name in ("StudentT", "GeneralizedCauchy"):  # pragma: no cover - not table mechanisms
        no_var = True
    if publishes_sd and (no_mean or no_var):
        what = "no finite mean (nor variance)" if no_mean else "no finite variance"
        out.append(
            f"{mechanism!r} has noise with {what}: the published sd and cv are infinite (flag "
            "'X') and estimates are " + ("not unbiased" if no_mean else "unbiased but erratic")
            + ". Fix: " + ("for exp_polylog with p = 1 use d > 3 (calibrate does when its "
                           "objective is 'sd')" if name == "ExpPolyLog" else
                           "use alpha = 2 (Gaussian noise) or a family with finite variance "
                           "(gaussian, laplace, exp_polylog with d > 3)")
            + ", or publish margins of error only.")
    if calibration is not None:
        for note in calibration.notes:
            if "edge of the search" in note or "edge of the searched" in note:
                out.append(f"calibration: {note}. Fix: pin that parameter, or change the "
                           "targets or the family.")
    return out


def warn_usability(mechanism: Mechanism | SmoothSensitivityRelease, *,
                   cv_flag: float | None = 0.3,
                   publishes_sd: bool = True, calibration: CalibrationResult | None = None,
                   context: str = "", stacklevel: int = 2) -> list[str]:
    """Emit a `UsabilityWarning` per [`usability_issues`][tabdp.planning.usability_issues] found.

    Meant for ``tabdp validate``/``plan`` and the ``.dp`` accessor: the messages depend only on
    public parameters, never on data.

    Args:
        mechanism: The mechanism (or a smooth-sensitivity release).
        cv_flag: The flag threshold (None: flags disabled).
        publishes_sd: Whether sd/cv are published.
        calibration: The calibration that produced the mechanism, if any.
        context: Prefix naming where the mechanism is used (e.g. ``"tables[0]"``).
        stacklevel: Passed to `warnings.warn` (plus one for this function).

    Returns:
        The messages warned about.

    Example:
        >>> import warnings
        >>> from tabdp.mechanisms import LogTransform
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     _ = warn_usability(LogTransform(sigma=0.3, offset=1e5), context="tables[0]")
        >>> w[0].category.__name__, str(w[0].message)[:15]
        ('UsabilityWarning', 'tables[0]: the ')
    """
    msgs = usability_issues(mechanism, cv_flag=cv_flag, publishes_sd=publishes_sd,
                            calibration=calibration)
    for m in msgs:
        warnings.warn(f"{context}: {m}" if context else m, UsabilityWarning,
                      stacklevel=stacklevel + 1)
    return msgs


# -- choosing a family --------------------------------------------------------------------------
@dataclass(frozen=True)
class TablePlan:
    """The configuration `plan_table` recommends for one table, with the alternatives.

    Attributes:
        family: The chosen family.
        calibration: Its calibration (mechanism, parameters, losses at the anchors).
        forecast: Its forecast on the declared cells.
        curve: The target curve met (on the whole range between anchors).
        candidates: One row per configuration tried (family, typical total, mechanism,
            usable/flagged/negative shares, total sd, or the failure), best first.
        issues: [`usability_issues`][tabdp.planning.usability_issues] of the chosen configuration.

    Example:
        >>> p = plan_table({1e3: 0.5, 1e7: 10.0}, [1e4, 1e6], families=["laplace"])
        >>> p.family, len(p.candidates)
        ('laplace', 1)
    """

    family: str
    calibration: CalibrationResult
    forecast: Forecast
    curve: TargetCurve
    candidates: tuple[dict[str, Any], ...]
    issues: tuple[str, ...] = ()

    @property
    def mechanism(self) -> Mechanism:
        """The recommended mechanism.

        Example:
            >>> plan_table({1.0: 1.0}, [10.0], families=["gaussian"]).mechanism
            Gaussian(sigma=0.7071067811865479)
        """
        return self.calibration.mechanism

    def explain(self) -> str:
        """Plain-text account: targets, choice, forecast, alternatives.

        Example:
            >>> print(plan_table({1.0: 1.0}, [10.0], families=["gaussian"]).explain())
            ... # doctest: +ELLIPSIS
            Targets (whole curve between anchors): size 1: rho <= 1
            Recommended: gaussian, Gaussian(sigma=0.707...)
            ...
        """
        f = self.forecast
        lines = [f"Targets (whole curve between anchors): {self.curve.describe()}",
                 f"Recommended: {self.family}, {self.mechanism!r}",
                 f"  forecast over {f.cells} cells: {100 * f.usable_share:.1f}% usable, "
                 f"{100 * f.flagged_share:.1f}% flagged (cv >= {f.cv_flag:g}), "
                 f"{100 * f.negative_share:.1f}% negative; median sd/total "
                 f"{f.median_relative_sd:.3g}; sd of the table total {f.total_sd:.4g}",
                 "Configurations tried (best first):"]
        for c in self.candidates:
            if "error" in c:
                lines.append(f"  {c['family']:<20} failed: {c['error']}")
            else:
                lines.append(f"  {c['family']:<20} usable {100 * c['usable_share']:5.1f}%  "
                             f"negative {100 * c['negative_share']:5.1f}%  "
                             f"total sd {c['total_sd']:.4g}  {c['mechanism']}")
        if self.issues:
            lines.append("Warnings:")
            lines += [f"  - {m}" for m in self.issues]
        return "\n".join(lines)


def _score(f: Forecast) -> tuple[float, float]:
    return (-round(f.usable_share, 9), f.total_sd if math.isfinite(f.total_sd) else math.inf)


def plan_table(targets: Mapping[float, float] | TargetCurve, cell_totals: ArrayLike, *,
               kind: str = "rho", families: Sequence[str] | None = None,
               cv_flag: float = 0.3, level: float = DEFAULT_LEVEL,
               fixed: Mapping[str, Mapping[str, Any]] | None = None) -> TablePlan:
    """Choose the family and parameters that publish the most usable cells within the targets.

    For each family, [`calibrate_to_curve`][tabdp.planning.calibrate_to_curve] is run with the
    typical total set to the 25th, 50th and 75th percentile of the positive planned totals
    (transformation mechanisms' error depends on it), and each calibration is forecast on all the
    declared cells. The winner has the largest expected share of usable cells (cv below
    ``cv_flag``), then the smallest sd of the table's total.

    Args:
        targets: Record size → largest loss (ρ, or ε with ``kind="epsilon"``), or a curve.
        cell_totals: Planned true totals of the table's cells (public inputs).
        kind: ``"rho"`` or ``"epsilon"``.
        families: Families to try (default [`PLAN_FAMILIES`][tabdp.planning.PLAN_FAMILIES]; pure ε
            targets skip the families without pure DP).
        cv_flag: The flag threshold.
        level: Confidence level of margins of error.
        fixed: Pinned parameters per family, e.g. ``{"exp_polylog": {"p": 1}}``.

    Returns:
        A [`TablePlan`][tabdp.planning.TablePlan].

    Raises:
        CalibrationError: If no family could be calibrated.
        InvalidParameterError: Malformed targets or cells.

    Example:
        >>> plan = plan_table({2.5e5: 0.5, 2e10: 50.0}, [1e6, 1e7, 1e8],
        ...                   families=["exp_polylog", "log", "gaussian"])
        >>> [c["family"] for c in plan.candidates][0], plan.forecast.cells
        ('exp_polylog', 3)
    """
    curve = TargetCurve.from_mapping(targets, kind)
    q = _cells(cell_totals)
    fams = list(PLAN_FAMILIES if families is None else families)
    if curve.kind == "epsilon" and families is None:
        fams = [f for f in fams if f in _PURE_FAMILIES]
    pos = q[q > 0]
    typicals = sorted({float(np.quantile(pos, p)) for p in (0.25, 0.5, 0.75)}) if pos.size \
        else [0.0]
    rows: list[tuple[tuple[float, float], dict[str, Any], CalibrationResult, Forecast]] = []
    failed: list[dict[str, Any]] = []
    for fam in fams:
        pins = dict((fixed or {}).get(fam, {}))
        seen: set[Any] = set()
        for tt in typicals:
            try:
                res = calibrate_to_curve(fam, curve, tt, level=level, **pins)
            except CalibrationError as exc:
                failed.append({"family": fam, "typical_total": tt,
                               "error": str(exc).splitlines()[0]})
                continue
            key = repr(res.mechanism)
            if key in seen:
                continue
            seen.add(key)
            fc = forecast(res.mechanism, q, cv_flag=cv_flag)
            row = {"family": fam, "typical_total": tt, "mechanism": key,
                   "usable_share": fc.usable_share, "flagged_share": fc.flagged_share,
                   "negative_share": fc.negative_share, "total_sd": fc.total_sd,
                   "median_relative_sd": fc.median_relative_sd}
            rows.append((_score(fc), row, res, fc))
    if not rows:
        raise CalibrationError("plan_table: no family could be calibrated:\n" + "\n".join(
            f"{f['family']}: {f['error']}" for f in failed))
    rows.sort(key=lambda r: r[0])
    _, _, best, fc = rows[0]
    issues = usability_issues(best.mechanism, cv_flag=cv_flag, calibration=best)
    return TablePlan(family=best.family, calibration=best, forecast=fc, curve=curve,
                     candidates=tuple([r[1] for r in rows] + failed), issues=tuple(issues))


# -- frontier -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FrontierPoint:
    """One point of the loss-at-the-largest-record vs usable-share trade-off.

    Attributes:
        largest_limit: Loss allowed at the largest anchor (ρ or ε, as the curve).
        usable_share: Forecast share of usable cells.
        flagged_share: Forecast share of flagged cells.
        negative_share: Forecast share of negative estimates.
        median_relative_sd: Median sd / total over cells with a positive total.
        mechanism: The calibrated mechanism.

    Example:
        >>> pts = frontier({2.5e5: 0.5, 2e10: 50.0}, [1e6, 1e7], [10.0, 50.0])
        >>> [p.largest_limit for p in pts]
        [10.0, 50.0]
    """

    largest_limit: float
    usable_share: float
    flagged_share: float
    negative_share: float
    median_relative_sd: float
    mechanism: Mechanism


def frontier(targets: Mapping[float, float] | TargetCurve, cell_totals: ArrayLike,
             largest_limits: Sequence[float], *, kind: str = "rho",
             family: str = "exp_polylog", cv_flag: float = 0.3,
             **fixed: Any) -> list[FrontierPoint]:
    """Trace the share of usable cells as the loss allowed at the largest record varies.

    The other anchors keep their limits; the largest anchor's limit takes each value of
    ``largest_limits`` (each at least the next anchor's limit) and the family is calibrated to
    the whole curve. The knee of the resulting curve is where loosening the largest record's
    guarantee stops buying usable cells.

    Args:
        targets: The anchors (the largest one's limit is replaced).
        cell_totals: Planned true totals of the table's cells.
        largest_limits: Limits to try at the largest anchor.
        kind: ``"rho"`` or ``"epsilon"``.
        family: The family (default ``exp_polylog``; ``p = 1`` is pinned for it unless ``p``
            is given).
        cv_flag: The flag threshold.
        **fixed: Pinned parameters of the family.

    Returns:
        One [`FrontierPoint`][tabdp.planning.FrontierPoint] per limit, in the order given.

    Raises:
        InvalidParameterError: A limit below the next anchor's, or malformed input.
        CalibrationError: As [`calibrate_to_curve`][tabdp.planning.calibrate_to_curve].

    Example:
        >>> pts = frontier({2.5e5: 0.5, 2e10: 50.0}, [5e5, 2e6, 1e7, 1e8], [5.0, 50.0, 500.0])
        >>> [round(p.usable_share, 2) for p in pts]
        [0.01, 0.61, 0.75]
    """
    curve = TargetCurve.from_mapping(targets, kind)
    q = _cells(cell_totals)
    if family == "exp_polylog" and "p" not in fixed:
        fixed = {**fixed, "p": 1}
    out = []
    for lim in largest_limits:
        anchors = dict(zip(curve.sizes, curve.limits, strict=True))
        anchors[curve.sizes[-1]] = check_real("largest limit", lim, owner="frontier", gt=0.0)
        c = TargetCurve.from_mapping(anchors, curve.kind)
        pos = q[q > 0]
        tt = float(np.median(pos)) if pos.size else 0.0
        res = calibrate_to_curve(family, c, tt, **fixed)
        fc = forecast(res.mechanism, q, cv_flag=cv_flag)
        out.append(FrontierPoint(float(lim), fc.usable_share, fc.flagged_share,
                                 fc.negative_share, fc.median_relative_sd, res.mechanism))
    return out


# -- splitting a release budget -----------------------------------------------------------------
@dataclass(frozen=True)
class TableInput:
    """One table of a planned release, for [`split_budget`][tabdp.planning.split_budget].

    Attributes:
        sizes: The table's record sizes (in its measure's units) at the release's anchor
            positions, e.g. ``(2.5e5, 2e10)`` dollars for "median" and "largest plausible"
            establishment of a payroll table, ``(5, 2.5e5)`` for employment.
        cell_totals: Planned true totals of its cells.
        family: Its mechanism family.
        fixed: Pinned parameters (default for exp_polylog: ``{"p": 1}``).

    Example:
        >>> TableInput((5.0, 2.5e5), [10.0, 100.0]).family
        'exp_polylog'
    """

    sizes: tuple[float, ...]
    cell_totals: Any
    family: str = "exp_polylog"
    fixed: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class BudgetSplit:
    """A release budget divided between tables.

    Attributes:
        shares: Fraction of the release budget given to each table (summing to 1).
        plans: Each table's targets, mechanism and forecast, as a
            [`TablePlan`][tabdp.planning.TablePlan].
        objective: ``"maxmin"`` or ``"mean"``.
        value: The objective's value (smallest, or cell-weighted mean, usable share).

    Example:
        >>> s = split_budget([0.5, 50.0], {"pay": TableInput((2.5e5, 2e10), [1e6, 1e7])},
        ...                  steps=0)
        >>> s.shares
        {'pay': 1.0}
    """

    shares: dict[str, float]
    plans: dict[str, TablePlan]
    objective: str
    value: float


def split_budget(release_limits: Sequence[float], tables: Mapping[str, TableInput], *,
                 kind: str = "rho", objective: str = "maxmin", cv_flag: float = 0.3,
                 fixed_cost: float = 0.0, steps: int = 40) -> BudgetSplit:
    """Divide a release-level per-record budget between tables to keep them all usable.

    Per-record losses add up across tables (zCDP composition for ρ, basic composition for pure
    ε), so giving table t the share w_t of the release's limits at every anchor position
    (Σ w_t = 1) meets the release-level targets. ``fixed_cost`` is subtracted first (e.g. a count
    table's ρ = 1/(2σ²), paid by every record whatever its size). The shares are then moved,
    step by step, from the table that has the most to spare to the one that needs it most: for
    ``"maxmin"`` from the table with the largest forecast usable share to the smallest, for
    ``"mean"`` wherever the cell-weighted mean usable share rises; the step halves when a move
    does not help.

    Args:
        release_limits: Release-level loss limits at the anchor positions (increasing), e.g.
            ``[2.0, 200.0]`` for "median establishment ρ ≤ 2, largest ρ ≤ 200 over the release".
        tables: Table name → [`TableInput`][tabdp.planning.TableInput] (its sizes at the same anchor
            positions).
        kind: ``"rho"`` or ``"epsilon"``.
        objective: ``"maxmin"`` (default) or ``"mean"``.
        cv_flag: The flag threshold.
        fixed_cost: Loss paid before the split at every anchor position (≥ 0, below every
            limit).
        steps: Number of improvement steps (0: equal shares).

    Returns:
        A [`BudgetSplit`][tabdp.planning.BudgetSplit].

    Raises:
        InvalidParameterError: Malformed input (sizes of the wrong length, a fixed cost at or
            above a limit, an unknown objective).

    Example:
        >>> tabs = {"payroll": TableInput((2.5e5, 2e10), [0.0, 2e6, 1e7, 1e8]),
        ...         "employment": TableInput((5.0, 2.5e5), [0.0, 10.0, 50.0, 400.0])}
        >>> s = split_budget([1.0, 100.0], tabs, steps=10)
        >>> round(sum(s.shares.values()), 9), sorted(s.plans)
        (1.0, ['employment', 'payroll'])
    """
    if objective not in ("maxmin", "mean"):
        raise InvalidParameterError(
            f"split_budget: objective must be 'maxmin' or 'mean'; got {objective!r}.")
    if not tables:
        raise InvalidParameterError("split_budget: tables is empty.\nHint: give at least one.")
    lims = np.array([check_real("release limit", v, owner="split_budget", gt=0.0)
                     for v in release_limits])
    fc = check_real("fixed_cost", fixed_cost, owner="split_budget", ge=0.0)
    if np.any(lims <= fc):
        raise InvalidParameterError(
            f"split_budget: fixed_cost {fc:g} leaves nothing of the limits {lims.tolist()}.\n"
            "Hint: lower the fixed cost (e.g. a count table's noise) or raise the limits.")
    avail = lims - fc
    names = list(tables)
    for n in names:
        if len(tables[n].sizes) != lims.size:
            raise InvalidParameterError(
                f"split_budget: table {n!r} gives {len(tables[n].sizes)} sizes for "
                f"{lims.size} release limits.\nHint: one size per anchor position.")
    cells = {n: _cells(tables[n].cell_totals) for n in names}

    def plan_for(n: str, w: float) -> TablePlan:
        t = tables[n]
        fam = t.family
        pins = dict(t.fixed if t.fixed is not None else ({"p": 1} if fam == "exp_polylog"
                                                          else {}))
        return plan_table(dict(zip(t.sizes, (w * avail).tolist(), strict=True)), cells[n],
                          kind=kind, families=[fam], cv_flag=cv_flag, fixed={fam: pins})

    def value(plans: dict[str, TablePlan]) -> float:
        us = {n: p.forecast.usable_share for n, p in plans.items()}
        if objective == "maxmin":
            return min(us.values())
        tot = sum(cells[n].size for n in names)
        return sum(us[n] * cells[n].size for n in names) / tot

    w = {n: 1.0 / len(names) for n in names}
    plans = {n: plan_for(n, w[n]) for n in names}
    best = value(plans)
    eta = 0.5 / len(names)
    for _ in range(steps if len(names) > 1 else 0):
        us = {n: plans[n].forecast.usable_share for n in names}
        src = max(names, key=lambda n: us[n])
        dst = min(names, key=lambda n: us[n])
        if src == dst:
            break
        move = min(eta, w[src] * 0.5)
        trial_w = dict(w)
        trial_w[src] -= move
        trial_w[dst] += move
        trial = dict(plans)
        trial[src] = plan_for(src, trial_w[src])
        trial[dst] = plan_for(dst, trial_w[dst])
        v = value(trial)
        if v > best + 1e-12:
            w, plans, best = trial_w, trial, v
        else:
            eta *= 0.5
            if eta < 1e-3:
                break
    return BudgetSplit(shares=w, plans=plans, objective=objective, value=best)



# -- helpers for plan summaries -----------------------------------------------------------------
def flag_curve(mechanism: Mechanism, totals: Sequence[float], *,
               cv_flag: float | None = 0.3, grid: float | None = None,
               count: bool = False) -> list[dict[str, Any]]:
    """Probability that a cell of each planned total is flagged or negative (for ``tabdp plan``).

    Public: depends only on the mechanism, the grid and the planned totals (e.g.
    ``[plan].cell_totals``). The law is the one the cells are released with, as in
    [`forecast`][tabdp.planning.forecast]: a count's exact integer counterpart on an integral
    grid, a continuous additive estimate rounded to its grid.

    Args:
        mechanism: The table's mechanism.
        totals: Planned cell totals (≥ 0).
        cv_flag: The flag threshold (None: flags disabled; ``p_flagged`` is then None).
        grid: The public grid step a continuous additive mechanism's estimates are rounded to
            (None: the mechanism's default grid, as ``release_table``); discrete mechanisms are
            on their integers, or the multiples of an integral grid > 1; a transformation
            mechanism's is the step of the noisy transformed value (in transformed space).
        count: Whether the cells are counts (released with the mechanism's integer counterpart
            on an integral or default grid, `Mechanism.for_counts`).

    Returns:
        One ``{"total", "p_flagged", "p_negative"}`` per total.

    Raises:
        InvalidParameterError: Malformed totals, threshold or grid, or a mechanism type
            without a forecast.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> [r["p_flagged"] for r in flag_curve(Gaussian(sigma=1.0), [0.0, 100.0])]
        [1.0, 0.0]
        >>> [r["p_negative"] for r in flag_curve(Gaussian(sigma=3.0), [1.0], count=True)]
        [0.307715]
    """
    q = _cells(list(totals))
    step = _grid_arg(grid, "flag_curve")
    return _flag_rows(*_released_law(mechanism, step, count), q, cv_flag)


def _flag_rows(mechanism: Mechanism, grid: float | None, q: np.ndarray,
               cv_flag: float | None) -> list[dict[str, Any]]:
    """`flag_curve`'s rows for a law already resolved by `_released_law` (grid None: unrounded)."""
    flag, neg, _ = _probabilities(mechanism, q, 0.3 if cv_flag is None else cv_flag, grid)
    return [{"total": float(t), "p_flagged": None if cv_flag is None else float(round(f, 6)),
             "p_negative": float(round(n, 6))} for t, f, n in zip(q, flag, neg, strict=True)]


def _uniform_smoothed_cdf(t: np.ndarray, s: float, g: float) -> np.ndarray:
    """``P(E + g·U < t)`` for ``E ~ N(0, s²)`` and ``U`` uniform on [0, 1), independent.

    ``(s/g)·(ψ(t/s) − ψ((t − g)/s))`` with ``ψ(z) = z·Φ(z) + φ(z)`` (the integral of Φ),
    evaluated on the side where ψ is small (``ψ(z) = z + ψ(−z)``): no cancellation.
    """
    t = np.asarray(t, dtype=np.float64)
    if s <= 0.0:
        return np.clip(t / g, 0.0, 1.0)

    def psi(z: np.ndarray) -> np.ndarray:
        return z * ndtr(z) + np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)

    a, b = t / s, (t - g) / s
    low = (s / g) * (psi(a) - psi(b))
    high = 1.0 + (s / g) * (psi(-a) - psi(-b))
    return np.clip(np.where(b > 0, high, low), 0.0, 1.0)


def _stochastically_rounded_rows(sd: float, grid: float | None, q: np.ndarray,
                                 cv_flag: float | None, nonnegative: bool = False
                                 ) -> list[dict[str, Any]]:
    """`flag_curve`'s rows for a consistent table's published cells (normal error of sd ``sd``).

    A consistent table's finest cells are rounded to ``grid`` without bias (up with
    probability equal to the fractional part: `tabdp.hierarchy.consistent`), and every
    coarser cell is the sum of its finest cells: a cell summing one range of a rounding block
    (every finest cell, and every cell of a table of one classification) is published as
    ``grid·⌊(q + E)/grid + U⌋``, ``U`` uniform, ``E`` the estimator's error (normal, variance
    ``sd² − grid²/6``: ``sd``, the published sd, includes the rounding's ``grid²/6`` per range).
    A cell summing several ranges is forecast alike, the other ranges' rounding taken as
    normal noise in ``E`` (its variance is ``grid²/6`` each): the lattice and the variance are
    the published cell's, its law is not exactly. A negative estimate needs ``q + E + grid·U
    < 0``, a flag ``|published| <= sd / cv_flag``. With ``nonnegative`` the published cells are
    never negative (flags are judged on the unbiased estimate). ``grid`` None: unrounded.
    ``sd`` must be > 0.
    """
    thr = 0.3 if cv_flag is None else cv_flag
    if grid is None or not (math.isfinite(grid) and grid > 0):
        from tabdp.mechanisms import Gaussian

        flag, neg, _ = _probabilities(Gaussian(sigma=sd), q, thr, None)
    else:
        g = float(grid)
        s = math.sqrt(max(sd * sd - g * g / 6.0, 0.0))
        k = math.floor(sd / thr / g)          # flagged: |m·grid| <= sd / cv_flag, |m| <= k
        flag = _uniform_smoothed_cdf((k + 1) * g - q, s, g) - _uniform_smoothed_cdf(
            -k * g - q, s, g)
        neg = _uniform_smoothed_cdf(-q, s, g)
    if nonnegative:
        neg = np.zeros_like(q)
    return [{"total": float(t), "p_flagged": None if cv_flag is None else float(round(f, 6)),
             "p_negative": float(round(n, 6))} for t, f, n in zip(q, np.clip(flag, 0.0, 1.0),
                                                                   neg, strict=True)]


#: Relative float noise `upper_3g` tolerates: a bound at most this far above its nearest
#: 3-significant-digit number is shown as that number. The accounting rounds every loss up by
#: a few units in the last place (``add_up``, ``mul_up``), so an exact 0.02 is computed as
#: 0.02000000000000001; rounding that up to 3 digits would print 0.0201.
UPPER_3G_RTOL = 1e-9


def _sigma_below(cv_flag: float) -> str:
    """A log-transform sigma, rounded DOWN to 4 significant digits, whose cv floor is below.

    The threshold is ``sqrt(ln(1 + cv_flag**2))`` (0.29356... for 0.3): the printed value
    must itself work, so it is rounded down, never to nearest (0.294 would still be flagged).
    """
    t = math.sqrt(math.log1p(cv_flag**2))
    step = 10.0 ** (math.floor(math.log10(t)) - 3)
    k = math.floor(t / step)
    while k > 0 and math.sqrt(math.expm1(float(f"{k * step:.4g}") ** 2)) >= cv_flag:
        k -= 1
    return f"{k * step:.4g}"


def upper_3g(x: float) -> str:
    """An upper bound shown with 3 significant digits, rounded up (never below ``x``/(1+1e-9)).

    Guarantees say "at most": ``f"{1.625:.3g}"`` is ``'1.62'``, which a unit losing exactly
    1.625 exceeds; this shows ``'1.63'``. A bound exceeding its nearest 3-digit number only by
    float noise (at most `UPPER_3G_RTOL` = 1e-9 relative, the accounting's own rounding up) is
    shown as that number: an exact 0.02 computed as 0.02000000000000001 shows ``'0.02'``, not
    ``'0.0201'``. The shown number is thus never below the bound by more than a relative 1e-9.

    Args:
        x: The bound.

    Returns:
        The text: the smallest 3-significant-digit number at least ``x / (1 + 1e-9)`` (``x``
        itself when it is zero or not finite), formatted like ``:.3g``.

    Example:
        >>> upper_3g(1.625), upper_3g(0.5), upper_3g(12.55), upper_3g(0.0), upper_3g(1e-13)
        ('1.63', '0.5', '12.6', '0', '1e-13')
        >>> upper_3g(0.020000000000000004), upper_3g(5.000000000000001e-07), upper_3g(150.125)
        ('0.02', '5e-07', '151')
    """
    x = float(x)
    if x == 0.0 or not math.isfinite(x):
        return f"{x:.3g}"
    shown = f"{x:.3g}"
    if float(shown) >= x or (x > 0 and float(shown) * (1.0 + UPPER_3G_RTOL) >= x):
        return shown
    step = 10.0 ** (math.floor(math.log10(abs(x))) - 2)
    k = math.ceil(x / step)
    while float(f"{k * step:.3g}") < x:
        k += 1
    return f"{k * step:.3g}"


def guarantee_in_words(mechanism: Mechanism, sizes: Sequence[float], *, unit: str = "",
                       charges: int = 1) -> list[str]:
    """Plain-language statements of the per-record guarantee at a few record sizes.

    Args:
        mechanism: The mechanism.
        sizes: Record sizes (in the measure's units) to describe.
        unit: Unit label placed before the size (e.g. ``"$"``) or after it (e.g.
            ``" employees"``, when it starts with a space).
        charges: How many times a record is charged (e.g. 2 with a direct rollup).

    Returns:
        One sentence per size.

    Example:
        >>> from tabdp.mechanisms import ExpPolyLog
        >>> guarantee_in_words(ExpPolyLog(sigma=1.1e6, a=1.0, d=5.1), [2.5e5], unit="$")[0]
        'a record of size $250,000 loses at most rho = 0.501 (pure epsilon = 1.05)'
    """
    out = []
    for s in sizes:
        size = float(s)
        with np.errstate(all="ignore"):
            rho = charges * float(mechanism.rho(size))
            eps = charges * float(mechanism.epsilon(size))
        shown = f"{size:,.0f}" if size >= 1 and size == round(size) else f"{size:g}"
        label = f"{shown}{unit}" if unit.startswith(" ") else f"{unit}{shown}"
        tail = f" (pure epsilon = {upper_3g(eps)})" if math.isfinite(eps) else ""
        out.append(f"a record of size {label} loses at most rho = {upper_3g(rho)}{tail}")
    return out


def spec_usability_issues(spec: Any) -> list[tuple[str, str]]:
    """Usability problems of every table of a release spec, as ``(key path, message)`` pairs.

    For ``tabdp validate`` / ``tabdp plan``: public parameters only (the spec's mechanisms,
    calibrations and publication rules), no data. Calibrated tables are re-calibrated (cheap,
    deterministic) to recover the calibration's notes about search-range edges.

    Args:
        spec: A validated [`tabdp.release.spec.ReleaseSpec`][tabdp.release.ReleaseSpec].

    Returns:
        One pair per problem; empty when every table can publish usable cells.

    Example:
        >>> import pathlib, tabdp
        >>> from tabdp.release.spec import load_spec
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> spec_usability_issues(load_spec(root / "examples" / "cbp_release.toml"))
        []
    """
    out: list[tuple[str, str]] = []
    for i, t in enumerate(spec.tables):
        mech = t.mechanism
        if mech is None:  # pragma: no cover - validated specs always have one
            continue
        cal = None
        if t.calibration is not None:
            c = t.calibration
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    cal = calibrate(c["family"], c["targets"], c["typical_total"],
                                    level=spec.release.level,
                                    objective=c.get("objective", "auto"),
                                    **dict(c.get("fixed") or {}))
                except CalibrationError:  # pragma: no cover - the spec parsed
                    cal = None
        cv = t.publication.cv_flag
        cv = None if cv is False else cv
        path = f"tables[{i}]" + (".calibrate" if t.calibration is not None else ".mechanism")
        for msg in usability_issues(mech, cv_flag=cv, publishes_sd=True, calibration=cal):
            out.append((path, msg))
        if (t.kind == "count" and getattr(t, "consistent", False) and spec.input.unit
                and any(r.direct for r in t.rollups)):
            out.append((f"tables[{i}].consistent", CONSISTENT_UNIT_COUNT.format(
                unit=spec.input.unit)))
    return out


#: A consistent count table with a privacy unit and direct rollups (from the spec alone).
CONSISTENT_UNIT_COUNT = (
    "a consistent count with a unit ({unit}) counts a unit once in each finest cell it has "
    "rows in, and a direct rollup counts it once in its own coarser cell: where a unit has rows "
    "in several finest cells of one rollup cell (a firm in several counties of a state), the "
    "two count different things and the consistent estimate mixes them (its finest cells and "
    "levels then estimate neither exactly). It is exact when every unit is in one finest cell "
    "(establishment data keyed by establishment). Fix: key the unit so that each is in one "
    "finest cell, or drop consistent (or the direct rollups) for this table.")


def warn_spec_usability(spec: Any) -> list[tuple[str, str]]:
    """Emit a [`UsabilityWarning`][tabdp.exceptions.UsabilityWarning] per `spec_usability_issues`.

    Args:
        spec: A validated release spec.

    Returns:
        The problems warned about.

    Example:
        >>> import pathlib, tabdp
        >>> from tabdp.release.spec import load_spec
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> warn_spec_usability(load_spec(root / "examples" / "cbp_release.toml"))
        []
    """
    found = spec_usability_issues(spec)
    for path, msg in found:
        warnings.warn(f"{path}: {msg}", UsabilityWarning, stacklevel=2)
    return found


def _integral_step(step: Any) -> bool:
    """Whether a grid step is a whole number >= 1 (a count on it keeps integer noise)."""
    return (isinstance(step, (int, float)) and not isinstance(step, bool)
            and math.isfinite(float(step)) and float(step) >= 1 and float(step).is_integer())


def _released_law(mechanism: Mechanism, grid: float | None, count: bool
                  ) -> tuple[Mechanism, float | None]:
    """The law a table's cells are drawn from, and the grid its continuous estimates land on.

    The one rule of every forecast here ([`forecast`][tabdp.planning.forecast],
    [`flag_curve`][tabdp.planning.flag_curve] and a spec's plan):

    * a count (``count``) on an integral grid (or none) is released with its mechanism's exact
      integer counterpart (`Mechanism.for_counts`, as `tabdp.frame._engine.count_mechanism`:
      ``Gaussian(σ)`` → ``DiscreteGaussian(σ)``; review rev63p: a Gaussian σ = 3 count table
      forecast 37% of its 1-unit cells negative; released as discrete Gaussian counts, 31% are);
    * a continuous additive mechanism's estimate is the grid point nearest the noisy value, on
      ``grid`` or, where it is ``None``, the mechanism's default grid (what ``release_table``
      and a release spec use);
    * discrete mechanisms are on their integers, or on the multiples of an integral grid
      above 1 (ties to the even multiple);
    * a transformation mechanism (log, root) rounds the noisy TRANSFORMED value
      ``f(q + a) + σZ`` to ``grid`` (or its default grid, the largest power of ten
      ``<= 0.02·σ``) and publishes the estimator of that rounded value (its
      ``release_table``; no rounding after the back-transform): the returned grid is that
      transformed-space step (review fc64: a root table, k = 2, σ = 1, on a grid of 0.1 was
      forecast 50.0% negative at a total of 0; 48.1% are).

    Args:
        mechanism: The mechanism the table is planned with.
        grid: The table's grid step (``None``: the mechanism's default).
        count: Whether the table is a count.

    Returns:
        ``(mechanism drawn from, grid step or None)``.
    """
    mech = mechanism
    if count and (grid is None or _integral_step(grid)):
        mech = mech.for_counts()
    if isinstance(mech, DiscreteAdditiveMechanism):
        # on its integers, or the multiples of an integral grid > 1 (review rev63d: a count's
        # integer counterpart on a grid of 5 publishes multiples of 5; forecast as integers)
        return mech, (float(grid) if grid is not None and _integral_step(grid)
                      and float(grid) > 1 else None)
    if isinstance(mech, TransformationMechanism):
        return mech, float(mech.default_grid() if grid is None else grid)
    if not isinstance(mech, AdditiveMechanism):
        return mech, None
    return mech, float(mech.default_grid() if grid is None else grid)


def _table_law(t: Any) -> tuple[Any, float | None]:
    """`_released_law` of a spec table: its mechanism and grid (one step, or one per measure).

    A table whose measures land on different grids is forecast unrounded (grid ``None``): one
    curve per table cannot follow each.
    """
    mech = getattr(t, "mechanism", None)
    if mech is None:
        return None, None
    count = getattr(t, "kind", None) == "count"
    g = getattr(t, "grid", None)
    if not isinstance(g, Mapping):
        return _released_law(mech, None if g is None else float(g), count)
    if count:
        step = g.get("count")
        return _released_law(mech, None if step is None else float(step), count)
    steps: set[float | None] = {float(v) for v in g.values() if v is not None}
    if set(getattr(t, "measures", ()) or ()) - set(g):
        steps.add(None)
    grids = {_released_law(mech, s, False)[1] for s in steps or {None}}
    return mech, grids.pop() if len(grids) == 1 else None


def spec_outlook(spec: Any, consistent_outlook: Callable[..., dict[str, Any] | None] | None = None
                 ) -> list[dict[str, Any]]:
    """Per-table forecasts for a plan summary.

    The flag and negative probabilities by planned cell total, and the guarantee in words at
    the plan's record sizes.

    Public: uses the spec's mechanisms, publication rules and ``[plan]`` sizes only. Count
    tables use ``plan.count_totals`` and a record size of one row per unit.

    Args:
        spec: A validated release spec.
        consistent_outlook: For consistent tables, ``consistent_outlook(spec, table, totals,
            cv_flag)`` giving ``{"flag_curve", "levels"}`` of the published (consistent) cells
            (the release workflow passes its own; ``None``: every table is forecast from its
            whole-budget mechanism).

    Returns:
        One ``{"table", "flag_curve", "guarantee", "issues"}`` per table. A consistent table's
        ``flag_curve`` is that of its published cells (the consistent estimate's expected sd
        at the finest level, each measured level with its own mechanism under ``shares``), and
        ``consistent_levels`` lists ``{"level", "sd", "flag_curve"}`` for every level.

    Example:
        >>> import pathlib, tabdp
        >>> from tabdp.release.spec import load_spec
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> o = spec_outlook(load_spec(root / "examples" / "cbp_release.toml"))
        >>> o[0]["table"], o[0]["flag_curve"][-1]["p_flagged"]
        ('county_naics2_payroll', 0.0)
    """
    issues = spec_usability_issues(spec)
    out = []
    for i, t in enumerate(spec.tables):
        count = t.kind == "count"
        totals = spec.plan.count_totals if count else spec.plan.cell_totals
        cv = t.publication.cv_flag
        cv = None if cv is False else cv
        try:
            fc = _flag_rows(*_table_law(t), _cells(list(totals)), cv)
        except InvalidParameterError:
            fc = None
        levels = None
        if getattr(t, "consistent", False) and consistent_outlook is not None:
            # published cells are the consistent estimate: each level's expected sd (from
            # each measured level's own mechanism under shares), not the whole-budget one's
            cons = consistent_outlook(spec, t, totals, cv)
            if cons is not None:
                fc, levels = cons["flag_curve"], cons["levels"]
        sizes = [1.0] if count else list(spec.plan.record_sizes)
        out.append({"table": t.name, "flag_curve": fc,
                    "guarantee": guarantee_in_words(t.mechanism, sizes),
                    "issues": [m for p, m in issues if p.startswith(f"tables[{i}]")],
                    **({"consistent_levels": levels} if levels is not None else {})})
    return out


def published_usability(table: Any) -> dict[str, dict[str, float]]:
    """Share of publishable cells of a published table, per measure, from its flags only.

    Post-processing of the public output (the ``flag`` column of
    [`publish`][tabdp.release.publish]): a cell is publishable when it carries none of the flags
    ``C`` (low reliability), ``S`` (withheld) or ``X`` (no finite variance). Safe for the public
    summary. Shares are of all the measure's cells; a withheld cell (``S``) counts as withheld
    only, never as flagged ``C`` or negative ``N`` (a withheld estimate reveals nothing of its
    value; tables published before withheld cells lost those flags are counted the same way).

    Args:
        table: A published long table (Polars DataFrame with ``measure`` and ``flag``).

    Returns:
        ``{measure: {"cells", "publishable_share", "flagged_share", "withheld_share",
        "negative_share"}}``.

    Example:
        >>> import polars as pl
        >>> t = pl.DataFrame({"measure": ["x", "x", "x", "x"], "flag": ["", "C", "S", None]})
        >>> u = published_usability(t)["x"]
        >>> u["publishable_share"], u["flagged_share"], u["withheld_share"]
        (0.5, 0.25, 0.25)
    """
    import polars as pl

    out: dict[str, dict[str, float]] = {}
    df = table if isinstance(table, pl.DataFrame) else pl.DataFrame(table)
    for (m,), part in df.group_by(["measure"], maintain_order=True):
        fl = part["flag"].fill_null("")
        n = part.height
        bad = fl.str.contains("[CSX]")
        withheld = fl.str.contains("S")
        # shares as sum / n: the mean of a boolean Series, typed as a number
        out[str(m)] = {
            "cells": float(n),
            "publishable_share": 1.0 - int(bad.sum()) / n if n else math.nan,
            "flagged_share": int((fl.str.contains("C") & ~withheld).sum()) / n if n else math.nan,
            "withheld_share": int(withheld.sum()) / n if n else math.nan,
            "negative_share": int((fl.str.contains("N") & ~withheld).sum()) / n if n else math.nan}
    return out
