"""The individual filter: which units a query's charges leave within their budget.

One pure function, `individual_filter`, used by every engine: the in-memory and streaming
Polars engines call it on a release's (or a batch's) charges, Spark calls it inside its pandas
UDFs on batches of units, [`Session.admit`][tabdp.Session.admit] is a thin wrapper that
reads the earlier losses from the session's ledger, and a lifetime budget is the same filter
over the stored losses plus this run's. A constant budget's decision is also written
as one generic expression (`constant_admits`) that Spark evaluates as a column expression; the
operations (and so the doubles) are the same.

The decision for a unit reads only that unit's charges and earlier losses (never another
unit's), so the filter adds no dependence between records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from tabdp._numeric import add_up, add_up_any
from tabdp.privacy.budget import Budget
from tabdp.privacy.ledger import Charges

__all__ = ["individual_filter", "constant_admits", "prior_columns", "Prior"]

#: The units' earlier losses: ``{column: array aligned with charges.units}``, or a function
#: ``(units, columns) -> that mapping`` (a ledger's ``lookup``: it is asked only for the
#: columns the budget reads).
Prior = Mapping[str, np.ndarray] | Callable[[Any, list[str]], Mapping[str, np.ndarray]]

_T = TypeVar("_T")


def prior_columns(budget: Budget | None, currencies: Sequence[str]) -> list[str]:
    """The ledger columns `individual_filter` reads for a query charging ``currencies``.

    Args:
        budget: The session's budget (``None``: no column is read).
        currencies: The query's currencies, in query order.

    Returns:
        ``["rho"]`` under a constant budget; under a curve budget ``rho@<c>`` and ``size@<c>``
        per currency, then ``rho`` (read by a cap on the total).

    Example:
        >>> prior_columns(Budget(1.0), ["x"])
        ['rho']
        >>> prior_columns(Budget({"x": {1.0: 1.0}}), ["x"])
        ['rho@x', 'size@x', 'rho']
    """
    if budget is None:
        return []
    if not budget.per_currency:
        return ["rho"]
    return [*[f"{k}@{c}" for c in currencies for k in ("rho", "size")], "rho"]


def constant_admits(limit: Any, rho: Sequence[_T], prior_rho: _T, zero: _T,
                    where: Any = np.where) -> Any:
    """A constant budget's decision, for any array or column type with ``+`` and ``<=``.

    The query's ρ summed over currencies in currency order, added to the unit's earlier total,
    compared with the limit. Each addition rounds up where it is inexact
    (`tabdp._numeric.add_up_any`), so the total compared is never below the exact sum of the
    losses; a ledger adds exactly these doubles, so a recorded total never exceeds the budget,
    in exact arithmetic too. A NaN loss is never within it.
    Numpy arrays and Spark columns (where NaN orders above every number) give the same decision.

    Args:
        limit: The budget's constant ρ (a float, or a literal column).
        rho: The query's ρ per currency, aligned with the units.
        prior_rho: The units' earlier total ρ.
        zero: The sum of no currency (``np.zeros(n)``, ``F.lit(0.0)``).
        where: ``where(condition, x, y)`` for the type (``np.where`` for arrays; Spark:
            ``lambda c, x, y: F.when(c, x).otherwise(y)``).

    Returns:
        The admitted mask (or boolean column).

    Example:
        >>> constant_admits(1.0, [np.array([0.5, 0.75])], np.array([0.5, 0.5]),
        ...                 np.zeros(2)).tolist()
        [True, False]
    """
    def add(a: Any, b: Any) -> Any:
        return add_up(a, b) if isinstance(a, np.ndarray) else add_up_any(a, b, where)

    new: Any = zero
    for i, r in enumerate(rho):
        new = r if i == 0 else add(new, r)  # 0 + r is r: exact
    if isinstance(prior_rho, np.ndarray) and isinstance(new, np.ndarray) and isinstance(
            limit, (int, float)) and prior_rho.shape == new.shape and prior_rho.ndim == 1 and (
            prior_rho.dtype == np.float64 and new.dtype == np.float64):
        # (float64 only: `add_up` adds in float64, and a float32 sum, or an integer array's
        # in-place product, would not be the doubles it compares)
        return _admits_sum(float(limit), prior_rho, new)
    return add(prior_rho, new) <= limit


def _admits_sum(limit: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``add_up(a, b) <= limit``, the rounded-up sum computed only where it can decide.

    ``add_up`` gives ``s = fl(a + b)`` or, where that is below the exact sum, ``s`` times
    ``1 + 2**-52``; for ``s >= 0`` that is at most ``s·(1 + 2**-50)``. So a unit with
    ``s > limit`` is over the budget, one with ``s >= 0`` and ``s·(1 + 2**-50) <= limit``
    within it, and only the rest (a sum at the limit's last bits, a negative sum) needs the
    exact rounded-up sum: the same booleans as ``add_up(a, b) <= limit`` for every unit (NaN:
    never within), at two passes instead of add_up's eight.

    Example:
        >>> _admits_sum(1.0, np.array([0.5, 0.75, 1.0]), np.array([0.5, 0.5, 2.0**-60])).tolist()
        [True, False, False]
    """
    with np.errstate(all="ignore"):
        s = a + b
        ok = s <= limit
        sure = s >= 0.0
        np.multiply(s, 1.0 + 2.0**-50, out=s)  # (in place: no second array of every unit)
        sure &= s <= limit
    unsure = np.flatnonzero(ok & ~sure)
    if unsure.size:
        ok[unsure] = add_up(a[unsure], b[unsure]) <= limit
    return ok


def _within_curve(b: Budget, currency: str, total: np.ndarray, size: np.ndarray
                  ) -> np.ndarray:
    """``total <= b.limit(size, currency)``, the curve evaluated only where it can decide.

    No limit is below the curve's least (`Budget.least_limit`): a unit whose total is within it
    is within its limit at any size that is not NaN (whose limit is NaN: never within). The
    same booleans as evaluating the curve for every unit.

    Example:
        >>> b = Budget({1.0: 0.5, 100.0: 2.0})
        >>> _within_curve(b, "x", np.array([0.4, 1.0, 1.0, 0.4]),
        ...               np.array([5.0, 100.0, 1.0, np.nan])).tolist()
        [True, True, False, False]
    """
    ok = (total <= b.least_limit(currency)) & ~np.isnan(size)
    rest = np.flatnonzero(~ok)
    if rest.size:
        ok[rest] = total[rest] <= b.limit(size[rest], currency)
    return ok


def individual_filter(budget: Budget | None, charges: Charges, prior: Prior
                      ) -> dict[str, np.ndarray]:
    """Apply a budget as an individual filter to a query's charges (a pure function).

    A unit is admitted when its loss after the query stays within its limit: under a constant
    budget, its total ρ over all currencies (admitted or left out of the whole query); under a
    curve budget, per currency, its ρ in that currency against the curve at its size there (the
    largest contribution so far, this query included), and then, with a cap on the total, the
    currencies that still fit in query order. A NaN loss is never within a limit.

    Args:
        budget: The public budget (``None``: every unit is admitted).
        charges: The query's charges per unit and currency.
        prior: The units' earlier losses, aligned with ``charges.units``: the columns
            `prior_columns` names (a mapping, or ``lookup(units, columns)``).

    Returns:
        Currency → boolean mask over ``charges.units`` (True: admitted).

    Example:
        >>> ch = Charges(np.array([0, 1]), {"x": np.array([0.5, 2.0])},
        ...              {"x": np.full(2, np.inf)}, {"x": np.array([1.0, 4.0])})
        >>> individual_filter(Budget(1.0), ch, {"rho": np.zeros(2)})["x"].tolist()
        [True, False]
    """
    n = charges.n
    if budget is None or n == 0:
        return {c: np.ones(n, dtype=bool) for c in charges.currencies}

    def look(cols: list[str]) -> Mapping[str, np.ndarray]:
        return prior(charges.units, cols) if callable(prior) else prior

    b = budget
    if not b.per_currency:
        old = look(["rho"])["rho"]
        assert b.constant is not None  # not per currency: a constant budget
        ok = constant_admits(b.constant, [charges.rho[c] for c in charges.currencies], old,
                             np.zeros(n))
        return {c: ok for c in charges.currencies}
    out = {}
    for c in charges.currencies:
        prev = look([f"rho@{c}", f"size@{c}"])
        size = np.maximum(prev[f"size@{c}"], charges.size[c])
        total = add_up(prev[f"rho@{c}"], charges.rho[c])
        out[c] = _within_curve(b, c, total, size)
    if b.total is not None:
        # the cap on the total over currencies, admitted currencies in query order; the
        # ledger sums in another order, so the cap is checked 4 ulps inside (never above)
        run = np.array(look(["rho"])["rho"], dtype=np.float64, copy=True)
        cap = b.total * (1.0 - 2.0**-50)
        for c in charges.currencies:
            after = add_up(run, charges.rho[c])
            fits = out[c] & (after <= cap)
            run = np.where(fits, after, run)
            out[c] = fits
    return out
