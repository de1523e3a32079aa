"""Planning consistent hierarchical tables: expected error per level, and the budget split.

Before any data: the sd of every cell of the consistent estimate depends only on the key set,
the hierarchies and the noise of each measured level, so it is computed exactly
([`expected_sd`][tabdp.hierarchy.plan.expected_sd]). A record is charged at every level that is
measured (one cell per level), so its loss is the sum of the levels' losses; splitting the
per-record targets across the measured levels (share ``f_l`` of every target to level ``l``,
``Σ f_l = 1``) keeps the same per-record loss as spending everything on one level.
[`plan_split`][tabdp.hierarchy.plan.plan_split] searches the shares that maximise the usable
cells (cv = sd / expected total at most a threshold), averaged over the published levels, and
compares with the equal split.

Example:
    >>> import polars as pl
    >>> from tabdp.mechanisms import Gaussian
    >>> keys = pl.DataFrame({"county": ["a", "b", "c"]})
    >>> geo = pl.DataFrame({"state": ["X", "X", "Y"], "county": ["a", "b", "c"]})
    >>> sd = expected_sd(keys, [("county",), ("state",)], hierarchies={"geo": geo},
    ...                  mechanisms=Gaussian(sigma=1.0))
    >>> sd[("state",)]["sd"].round(4).to_list()
    [0.8165, 0.7071]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tabdp.exceptions import InvalidParameterError
from tabdp.hierarchy.consistent import (
    Level,
    Product,
    _aggregate,
    _certified,
    _level_key,
    _product,
    _round_variance,
    cell_weights,
)
from tabdp.hierarchy.gls import solve
from tabdp.hierarchy.margins import noise_law
from tabdp.mechanisms import Gaussian, Mechanism
from tabdp.mechanisms.discrete import DiscreteAdditiveMechanism

__all__ = ["expected_sd", "certified_margins", "plan_split", "SplitPlan", "gaussian_shares",
           "calibrated_shares"]


def _setup(keys: pl.DataFrame, measured: Sequence[Level], outputs: Sequence[Level] | None,
           hierarchies: Mapping[str, pl.DataFrame]) -> tuple[Product, list[Level], list[Level]]:
    levels = [_level_key(lv, "a measured level") for lv in measured]
    if not levels:
        raise InvalidParameterError("plan: measured must name at least one level.")
    finest = max(levels, key=len)
    if sorted(keys.columns) != sorted(finest):
        raise InvalidParameterError(
            f"plan: keys must have exactly the finest level's columns {list(finest)}; got "
            f"{keys.columns}.")
    outs = [_level_key(o, "an output level") for o in outputs] if outputs is not None \
        else levels
    prod = _product([*levels, *outs], keys, finest, dict(hierarchies))
    return prod, levels, outs


def _sd(prod: Product, levels: Sequence[Level], var: Mapping[Level, float],
        outs: Sequence[Level]) -> dict[Level, np.ndarray]:
    """Exact sd of every cell of each output level (cells in ``prod.keys`` order)."""
    ms = {}
    for lv in levels:
        a, b = prod.pair(lv)
        shape = (prod.outer.tree.sizes[a], prod.inner.tree.sizes[b])
        ms[(a, b)] = (np.zeros(shape + (0,)), np.full(shape, 1.0 / var[lv]))
    res = solve(prod.outer.tree, prod.inner.tree, prod.present, ms)
    return {o: np.sqrt(res.variance(*prod.pair(o))).reshape(-1) for o in outs}


def expected_sd(keys: pl.DataFrame, measured: Sequence[Level], *,
                hierarchies: Mapping[str, pl.DataFrame],
                mechanisms: Mechanism | Mapping[Level, Mechanism],
                outputs: Sequence[Level] | None = None,
                measure: str = "value", grid: float | None = None
                ) -> dict[Level, pl.DataFrame]:
    """Exact sd of every cell of the consistent estimate, from public inputs only.

    With ``grid``, the sd of the published estimate on that grid: the estimator's variance
    plus that of the unbiased rounding of the finest cells below the cell, ``grid²/6`` per
    range of finest cells it sums along a rounding block (one range for a cell of one
    classification, one per finest code of the other classification below it otherwise; as
    [`consistent`][tabdp.hierarchy.consistent] publishes it).

    Args:
        keys: The finest level's key set (its columns are the finest level).
        measured: The levels released directly (the finest among them).
        hierarchies: Name → mapping, one column per level, coarse to fine.
        mechanisms: Mechanism of every measured level, or level → mechanism (finite variance).
        outputs: Levels to report (default: the measured ones).
        measure: Measure name for a joint mechanism.
        grid: Optional rounding step of the finest cells (``consistent``'s ``grid``).

    Returns:
        Level → frame of its keys (every combination of codes) and ``sd``.

    Raises:
        InvalidParameterError: For levels that do not fit the keys and hierarchies, or a
            mechanism without a finite variance (α-stable: see ``consistent``).

    Example:
        >>> import polars as pl
        >>> from tabdp.mechanisms import Gaussian
        >>> keys = pl.DataFrame({"c": ["a", "b"]})
        >>> expected_sd(keys, [("c",), ()], hierarchies={},
        ...             mechanisms=Gaussian(sigma=1.0))[()]["sd"].round(4).to_list()
        [0.8165]
        >>> expected_sd(keys, [("c",), ()], hierarchies={}, mechanisms=Gaussian(sigma=1.0),
        ...             grid=1.0)[()]["sd"].round(4).to_list()    # sqrt(2/3 + 1/6)
        [0.9129]
    """
    if grid is not None and not (isinstance(grid, (int, float)) and math.isfinite(grid)
                                 and grid > 0):
        raise InvalidParameterError(f"expected_sd: grid must be a number > 0; got {grid!r}.")
    prod, levels, outs = _setup(keys, measured, outputs, hierarchies)
    var: dict[Level, float] = {}
    for lv in levels:
        mech = mechanisms[lv] if isinstance(mechanisms, Mapping) else mechanisms
        v, kind, _ = cell_weights(mech, measure)
        if kind == "stable":
            raise InvalidParameterError(
                "expected_sd: α-stable noise has no sd; plan with consistent() margins "
                "instead.")
        var[lv] = v
    sds = _sd(prod, levels, var, outs)
    out = {}
    for o in outs:
        k = prod.keys(o)
        sd = sds[o]
        if grid is not None:
            rvar = _round_variance(prod, *prod.pair(o), float(grid)).reshape(-1)
            sd = np.sqrt(sd * sd + rvar)
        body = pl.DataFrame({"sd": sd})
        out[o] = (pl.concat([k, body], how="horizontal") if o else body)
    return out


def certified_margins(keys: pl.DataFrame, measured: Sequence[Level], *,
                      hierarchies: Mapping[str, pl.DataFrame],
                      mechanisms: Mechanism | Mapping[Level, Mechanism],
                      outputs: Sequence[Level] | None = None, measure: str = "value",
                      grid: float | None = None, level: float = 0.9
                      ) -> dict[Level, np.ndarray] | None:
    """The margins a consistent table publishes under non-Gaussian noise, from public inputs.

    They depend on the key set, hierarchies, mechanisms, grid and level only (not on the
    data), so the plan states them exactly (see `tabdp.hierarchy.margins`).

    Args:
        keys: The finest level's key set.
        measured: The levels released directly.
        hierarchies: Name → mapping.
        mechanisms: Mechanism of every measured level, or level → mechanism.
        outputs: Levels to report (default: the measured ones).
        measure: Measure name for a joint mechanism.
        grid: Optional rounding step of the finest cells.
        level: Confidence level.

    Returns:
        Level → the margin of every cell (``expected_sd``'s order), or None where the noise
        is Gaussian at every level (the margin is then ``z·sd``: `expected_margin`).

    Example:
        >>> import polars as pl
        >>> from tabdp.mechanisms import Laplace
        >>> keys = pl.DataFrame({"c": ["a", "b"]})
        >>> m = certified_margins(keys, [("c",)], hierarchies={}, mechanisms=Laplace(scale=1.0),
        ...                       level=0.95)
        >>> 2.9957 <= float(m[("c",)][0]) < 2.9957 * 1.02     # b·ln(20)
        True
    """
    prod, levels, outs = _setup(keys, measured, outputs, hierarchies)
    mech = {lv: mechanisms[lv] if isinstance(mechanisms, Mapping) else mechanisms
            for lv in levels}
    kinds = {cell_weights(m, measure)[1] for m in mech.values()}
    if kinds == {"gaussian"} or "stable" in kinds:
        return None
    laws = {lv: noise_law(m, measure) for lv, m in mech.items()}
    ms = {}
    for lv in levels:
        a, b = prod.pair(lv)
        shape = (prod.outer.tree.sizes[a], prod.inner.tree.sizes[b])
        ms[(a, b)] = (np.zeros(shape + (0,)), np.full(shape, 1.0 / laws[lv].var))
    lattice = grid is not None and float(grid).is_integer() and all(
        isinstance(m, DiscreteAdditiveMechanism) for m in mech.values())
    return _certified(prod, ms, laws, levels, outs, level,
                      None if grid is None else float(grid), lattice=lattice)


@dataclass(frozen=True)
class SplitPlan:
    """The planned split of the per-record targets across measured levels.

    Attributes:
        shares: Level → share of every per-record target spent there (they sum to 1; 0: the
            level is not measured).
        usable: Level → share of its cells whose planned cv is at most the threshold.
        equal_usable: The same for the equal split.
        objective: Mean usable share over the output levels (planned split).
        equal_objective: The same for the equal split.
        mechanisms: Level → the mechanism for its share (measured levels only).
    """

    shares: dict[Level, float]
    usable: dict[Level, float]
    equal_usable: dict[Level, float]
    objective: float
    equal_objective: float
    mechanisms: dict[Level, Any]


def gaussian_shares(sigma: float) -> Callable[[float], Mechanism]:
    """Mechanism for a share ``f`` of a Gaussian budget: ``Gaussian(σ/√f)`` (ρ scales by f).

    Args:
        sigma: The σ that spends the whole per-record target on one level.

    Returns:
        share → mechanism.

    Example:
        >>> gaussian_shares(2.0)(0.25).sigma
        4.0
    """
    return lambda f: Gaussian(sigma=sigma / math.sqrt(f))


def calibrated_shares(family: str, targets: Mapping[float, float], typical_total: float,
                      **fixed: Any) -> Callable[[float], Mechanism]:
    """Mechanism for a share ``f`` of per-record targets: calibrated to ``f × targets``.

    Args:
        family: A [`calibrate`][tabdp.calibrate.calibrate] family (additive, e.g.
            ``"exp_polylog"``, ``"gaussian"``).
        targets: Record size → PRzCDP loss of the whole release.
        typical_total: Typical cell total for the calibration's error objective.
        **fixed: Pinned parameters.

    Returns:
        share → mechanism (cached per share).

    Example:
        >>> m = calibrated_shares("gaussian", {1.0: 0.5}, 10.0)(0.5)
        >>> round(float(m.rho(1.0)), 6)
        0.25
    """
    from tabdp.calibrate import calibrate

    cache: dict[float, Mechanism] = {}

    def at(f: float) -> Mechanism:
        key = round(f, 12)
        if key not in cache:
            cache[key] = calibrate(family, {s: r * f for s, r in targets.items()},
                                   typical_total, **fixed).mechanism
        return cache[key]

    return at


def _compositions(n: int, k: int, first: int) -> list[tuple[int, ...]]:
    """All ways to write n as an ordered sum of k integers >= 0, entry ``first`` >= 1."""
    out = []
    for cut in itertools.combinations_with_replacement(range(n + 1), k - 1):
        b = (0, *cut, n)
        c = tuple(b[j + 1] - b[j] for j in range(k))
        if c[first] >= 1:
            out.append(c)
    return out


def plan_split(keys: pl.DataFrame, measured: Sequence[Level], *,
               hierarchies: Mapping[str, pl.DataFrame],
               mechanism_at: Callable[[float], Mechanism], expected: pl.DataFrame,
               cv: float = 0.3, step: float = 0.05, outputs: Sequence[Level] | None = None,
               max_finest_loss: float | None = 0.05, measure: str = "value") -> SplitPlan:
    """Split per-record targets across measured levels to maximise usable cells.

    A cell is usable when its planned cv, the exact sd of the consistent estimate over its
    expected total, is at most ``cv``; the objective is the share of usable cells averaged over
    the output levels (each level counts equally). Every split of 1 into the measured levels in
    multiples of ``step`` is tried, including splits that give a coarser level nothing (it is
    then not measured, only summed). With ``max_finest_loss``, only splits whose finest level
    keeps its accuracy are admitted: the root mean square of its planned sds at most
    ``1 + max_finest_loss`` times the one it has when every target is spent there (the rollup
    plan), so the coarser levels gain without the finest cells losing more than that.

    Args:
        keys: The finest key set.
        measured: Levels released directly (the finest among them).
        hierarchies: Name → mapping, coarse to fine.
        mechanism_at: Share → mechanism of a level given that share of every target (e.g.
            [`gaussian_shares`][tabdp.hierarchy.plan.gaussian_shares]).
        expected: Public forecast of the finest cells: the key columns and ``total``; coarser
            totals are its sums.
        cv: Usability threshold.
        step: Grid of the shares.
        outputs: Levels whose usable cells count (default: the measured levels).
        max_finest_loss: Largest relative increase of the finest level's planned RMSE over the
            rollup plan (``None``: no constraint).
        measure: Measure name for a joint mechanism.

    Returns:
        The [`SplitPlan`][tabdp.hierarchy.plan.SplitPlan]. When no split on the grid meets the
        constraint, the rollup plan itself (every target on the finest level).

    Raises:
        InvalidParameterError: For a bad step, cv or forecast.

    Example:
        >>> import polars as pl
        >>> keys = pl.DataFrame({"c": ["a", "b", "c", "d"]})
        >>> exp = keys.with_columns(pl.lit(4.0).alias("total"))
        >>> p = plan_split(keys, [("c",), ()], hierarchies={}, expected=exp,
        ...                mechanism_at=gaussian_shares(1.0), step=0.1, max_finest_loss=None)
        >>> p.shares[("c",)], p.usable, p.equal_usable[("c",)]
        (0.6, {('c',): 1.0, (): 1.0}, 0.0)
        >>> plan_split(keys, [("c",), ()], hierarchies={}, expected=exp,
        ...            mechanism_at=gaussian_shares(1.0), step=0.1).shares[("c",)]
        0.9
    """
    if not (0.0 < step <= 0.5) or abs(1.0 / step - round(1.0 / step)) > 1e-9:
        raise InvalidParameterError(
            f"plan_split: step must divide 1 (e.g. 0.05, 0.1); got {step!r}.")
    if not (cv > 0.0):
        raise InvalidParameterError(f"plan_split: cv must be > 0; got {cv!r}.")
    prod, levels, outs = _setup(keys, measured, outputs, hierarchies)
    finest = max(levels, key=len)
    if "total" not in expected.columns:
        raise InvalidParameterError(
            f"plan_split: expected must have a 'total' column; got {expected.columns}.")
    idx = prod.index(finest, expected) if finest else np.zeros(1, dtype=np.int64)
    flat = np.zeros(prod.present.size)
    flat[idx] = expected["total"].cast(pl.Float64).to_numpy()
    fin = flat.reshape(prod.present.shape)
    totals = {o: np.abs(_aggregate(prod, *prod.pair(o), fin)).reshape(-1) for o in outs}
    n = int(round(1.0 / step))

    fin_ok = prod.present.reshape(-1)
    if max_finest_loss is not None and not (max_finest_loss >= 0.0):
        raise InvalidParameterError(
            f"plan_split: max_finest_loss must be >= 0 or None; got {max_finest_loss!r}.")
    ref_var = cell_weights(mechanism_at(1.0), measure)[0]
    ref = math.sqrt(float(np.mean(_sd(prod, [finest], {finest: ref_var}, [finest])[finest][
        fin_ok] ** 2)))

    def evaluate(shares: Sequence[float]) -> tuple[float, float, dict[Level, float]]:
        var = {}
        for lv, f in zip(levels, shares, strict=True):
            var[lv] = cell_weights(mechanism_at(f), measure)[0] if f > 0 else math.inf
        sds = _sd(prod, [lv for lv in levels if var[lv] < math.inf], var,
                  list(dict.fromkeys([*outs, finest])))
        if max_finest_loss is not None:
            rm = math.sqrt(float(np.mean(sds[finest][fin_ok] ** 2)))
            if rm > (1.0 + max_finest_loss) * ref * (1.0 + 1e-12):
                return -math.inf, -math.inf, {}
        use = {o: float(np.mean(sds[o] <= cv * totals[o])) for o in outs}
        # tie-break: the mean log cv of the cells with a positive total (smaller is better)
        logs = [float(np.mean(np.log(sds[o][totals[o] > 0] / totals[o][totals[o] > 0])))
                for o in outs if np.any(totals[o] > 0)]
        return float(np.mean(list(use.values()))), -float(np.mean(logs)) if logs else 0.0, use

    eq = [1.0 / len(levels)] * len(levels)
    saved = max_finest_loss
    max_finest_loss = None
    eq_obj, eq_tie, eq_use = evaluate(eq)
    rollup = tuple(1.0 if lv == finest else 0.0 for lv in levels)
    r_obj, r_tie, r_use = evaluate(rollup)
    max_finest_loss = saved
    best: tuple[float, float, tuple[float, ...], dict[Level, float]] = (
        (eq_obj, eq_tie, tuple(eq), eq_use) if saved is None or
        evaluate(eq)[0] > -math.inf else (r_obj, r_tie, rollup, r_use))
    for comp in _compositions(n, len(levels), levels.index(finest)):
        shares = tuple(c / n for c in comp)
        obj, tie, use = evaluate(shares)
        if (obj, tie) > best[:2]:
            best = (obj, tie, shares, use)
    obj, _, shares, use = best
    return SplitPlan(dict(zip(levels, shares, strict=True)), use, eq_use, obj, eq_obj,
                     {lv: mechanism_at(f) for lv, f in zip(levels, shares, strict=True)
                      if f > 0})
