"""Per-record privacy budgets: a public limit on each unit's PRzCDP loss ρ, enforced as a filter.

A budget is enforced as an *individual privacy filter* (Feldman and Zrnic, "Individual Privacy
Accounting via a Rényi Filter", NeurIPS 2021, arXiv:2008.11193): before a query's noise is drawn,
every unit whose loss would pass its limit is left out of that query (its contributions are
dropped from the cells it would have charged); the query itself always runs. Whether a unit is
left out depends only on that unit's own data and on public inputs, never on other units, so
neighbouring datasets differ only in that one unit's participation, and the unit's total loss
over the session never passes its limit.

Two kinds of limits:

* A **constant** ``Budget(1.0)``: every unit's total ρ over all releases of the session.
* A **curve** ``Budget({1e3: 0.5, 1e7: 10.0})``: a limit that grows with the unit's *size*, given
  at a few sizes and interpolated linearly in log(size) (constant beyond the end points). Sizes
  never mix currencies: each *currency* (each summed measure, in its own unit; ``"rows"`` for
  counts, medians and quantiles, whose sensitivity is a number of rows) has its own ledger and
  its own size: the unit's largest absolute contribution to a released cell of that currency.
  A plain curve applies to every currency separately; ``Budget({"payroll": {...},
  "rows": {...}})`` gives one curve per currency (``"*"`` for the others). A unit's guarantee is
  then the sum over currencies of the curve at its size there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError

__all__ = ["Budget", "ROWS_CURRENCY", "joint_currency"]

#: Currency of releases whose sensitivity is a number of rows (counts, medians, quantiles).
ROWS_CURRENCY = "rows"


def joint_currency(measures: Sequence[str]) -> str:
    """The currency of a joint (vector) release of several measures: their sorted names.

    The name does not depend on the order the measures are given in, so a joint release of
    ``["y", "x"]`` is charged against the same curve as one of ``["x", "y"]`` (review R15:
    another order used to open a fresh limit).

    Args:
        measures: The measure names released together.

    Returns:
        The names, sorted and joined by ``"+"``.

    Example:
        >>> joint_currency(["payroll", "employment"])
        'employment+payroll'
    """
    return "+".join(sorted(measures))


class _Curve:
    """One size → ρ curve (linear in log size, constant beyond the end points)."""

    def __init__(self, rho: Mapping[float, float], where: str) -> None:
        if not rho:
            raise InvalidParameterError(
                f"Budget{where}: a curve needs at least one {{size: rho}} point; got {{}}.\n"
                "Hint: Budget({1e3: 0.5, 1e7: 10.0}) or a constant Budget(1.0).")
        pts = sorted(
            (check_real("size", s, owner=f"Budget curve{where}", gt=0.0),
             check_real(f"rho at size {s}", r, owner=f"Budget curve{where}", gt=0.0))
            for s, r in rho.items())
        self.sizes = np.array([p[0] for p in pts])
        self.limits = np.array([p[1] for p in pts])
        if np.any(np.diff(self.sizes) == 0):
            raise InvalidParameterError(
                f"Budget{where}: sizes must be distinct; got {list(rho)}.")
        if np.any(np.diff(self.limits) < 0):
            raise InvalidParameterError(
                f"Budget{where}: limits must not decrease with size (a larger unit may not get "
                "a smaller budget); got "
                f"{dict(zip(self.sizes.tolist(), self.limits.tolist(), strict=True))}."
                "\nHint: give non-decreasing limits, e.g. {1e3: 0.5, 1e7: 10.0}.")

    def limit(self, size: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            ls = np.log(np.maximum(size, 1e-300))
        return np.interp(ls, np.log(self.sizes), self.limits)

    def to_dict(self) -> dict[str, Any]:
        return {"points": [[float(s), float(r)] for s, r in
                           zip(self.sizes, self.limits, strict=True)],
                "interpolation": "linear in log(size), constant beyond the end points"}

    def __repr__(self) -> str:
        inner = ", ".join(f"{s:g}: {r:g}" for s, r in zip(self.sizes, self.limits, strict=True))
        return f"{{{inner}}}"


class Budget:
    """A public per-record limit on PRzCDP loss ρ, enforced as an individual filter.

    Args:
        rho: A number (every unit's total ρ), a curve ``{size: rho_limit}`` applied to each
            currency separately, or ``{currency: curve}`` (currencies: measure names, ``"rows"``
            for counts / medians / quantiles, ``"*"`` for any other). Sizes > 0, limits > 0 and
            non-decreasing in size.
        total: With curves: an optional cap on a unit's total ρ over all currencies (curves
            alone bound each currency, so a unit's total is at most the sum of its currencies'
            limits; ``total`` bounds it whatever measures are released).

    Example:
        >>> b = Budget({1e3: 0.5, 1e7: 10.0})
        >>> b.limit([1.0, 1e3, 1e5, 1e7, 1e9]).round(3).tolist()
        [0.5, 0.5, 5.25, 10.0, 10.0]
        >>> float(Budget(2.0).limit(1e9))
        2.0
        >>> b = Budget({"payroll": {1e3: 0.5, 1e7: 10.0}, "rows": {1: 0.5}})
        >>> b.limit([1e5], "rows").tolist()
        [0.5]
    """

    def __init__(self, rho: float | Mapping[Any, Any], total: float | None = None) -> None:
        """Check and normalize ``rho`` (a constant or curves) and ``total``."""
        self.curves: dict[str, _Curve] | None = None
        self.total: float | None = None
        if isinstance(rho, Mapping):
            if rho and all(isinstance(k, str) for k in rho):
                curves = {}
                for key, c in rho.items():
                    if not isinstance(c, Mapping):
                        raise InvalidParameterError(
                            f"Budget: the curve for {key!r} must be a {{size: rho}} mapping; got "
                            f"{type(c).__name__}.\nHint: Budget({{'payroll': {{1e3: 0.5, 1e7: "
                            "10.0}, 'rows': {1: 0.5}}).")
                    # a joint currency 'b+a' is the same as 'a+b' (joint_currency)
                    cur = joint_currency(key.split("+")) if "+" in key else key
                    if cur in curves:
                        raise InvalidParameterError(
                            f"Budget: two curves for the joint currency {cur!r} (the order of "
                            f"the measures in a joint currency does not matter); got "
                            f"{sorted(k for k in rho if k != key)} and {key!r}.\nHint: give "
                            f"one curve for {cur!r}.")
                    curves[cur] = _Curve(c, f"[{key!r}]")
                self.curves = curves
            else:
                self.curves = {"*": _Curve(rho, "")}
            self.constant: float | None = None
            first = next(iter(self.curves.values()))
            self.sizes, self.limits = first.sizes, first.limits
        else:
            self.constant = check_real("rho", rho, owner="Budget", gt=0.0,
                                       hint="a per-record zCDP limit such as Budget(1.0)")
            self.sizes = np.array([1.0])
            self.limits = np.array([self.constant])
        if total is not None:
            if self.curves is None:
                raise InvalidParameterError(
                    "Budget: total= caps the sum over currencies of a curve budget; a constant "
                    "budget is already a total.\nHint: Budget(1.0), or Budget({1e3: 0.5, 1e7: "
                    "10.0}, total=12.0).")
            self.total = check_real("total", total, owner="Budget", gt=0.0,
                                    hint="a cap on a unit's total rho over all currencies")

    @property
    def per_currency(self) -> bool:
        """Whether limits depend on per-currency sizes (curves) rather than a total.

        Example:
            >>> Budget(1.0).per_currency, Budget({1.0: 1.0}).per_currency
            (False, True)
        """
        return self.curves is not None

    def curve_for(self, currency: str) -> _Curve:
        """The curve of a currency (its own, else ``"*"``).

        Raises:
            InvalidParameterError: The budget has no curve for the currency (a data-free error,
                raised before any data is read).

        Example:
            >>> Budget({1e3: 1.0}).curve_for("payroll")
            {1000: 1}
        """
        assert self.curves is not None
        c = self.curves.get(currency, self.curves.get("*"))
        if c is None:
            raise InvalidParameterError(
                f"Budget: no curve for {currency!r}; the budget has curves for "
                f"{sorted(self.curves)}.\nHint: add {currency!r} (or '*' for every other "
                "currency) to the budget; counts, medians and quantiles use 'rows'.")
        return c

    def limit(self, size: ArrayLike, currency: str = "*") -> np.ndarray:
        """The ρ limit for units of the given sizes (in ``currency``).

        Args:
            size: Unit sizes (largest absolute contribution to a released cell of the currency).
            currency: A measure name or ``"rows"`` (ignored for constant budgets).

        Returns:
            Limits, one per size.

        Example:
            >>> Budget(1.0).limit([0.0, 5.0]).tolist()
            [1.0, 1.0]
        """
        s = np.abs(np.asarray(size, dtype=np.float64))
        if self.constant is not None:
            return np.full(s.shape, self.constant)
        return self.curve_for(currency).limit(s)

    def least_limit(self, currency: str = "*") -> float:
        """The smallest limit `limit` gives in ``currency`` at any size (not NaN).

        A curve's limits do not decrease with size and are constant beyond its end points, so
        its first point's limit is at most its limit at every size: a loss within it is within
        the limit whatever the unit's size (the individual filter decides most units without
        evaluating the curve).

        Args:
            currency: A measure name or ``"rows"`` (ignored for constant budgets).

        Returns:
            The least limit.

        Example:
            >>> Budget({1e3: 0.5, 1e7: 10.0}).least_limit("payroll")
            0.5
            >>> Budget(2.0).least_limit()
            2.0
        """
        if self.constant is not None:
            return float(self.constant)
        return float(self.curve_for(currency).limits[0])

    def to_dict(self) -> dict[str, Any]:
        """Public description of the budget.

        Returns:
            A JSON-serializable dict.

        Example:
            >>> Budget(1.0).to_dict()
            {'kind': 'constant', 'rho': 1.0, 'enforcement': 'individual filter'}
        """
        if self.constant is not None:
            return {"kind": "constant", "rho": self.constant, "enforcement": "individual filter"}
        assert self.curves is not None
        extra = {} if self.total is None else {"total": self.total}
        if list(self.curves) == ["*"]:
            return {"kind": "curve", **self.curves["*"].to_dict(),
                    "applies_to": ("each currency separately (each measure; rows for counts; a "
                                   "joint release of several measures: their sorted names "
                                   "joined by '+')"),
                    **extra, "enforcement": "individual filter"}
        return {"kind": "curves", "curves": {k: c.to_dict() for k, c in self.curves.items()},
                **extra, "enforcement": "individual filter"}

    def __repr__(self) -> str:
        """The budget as it would be written in Python."""
        if self.constant is not None:
            return f"Budget({self.constant!r})"
        assert self.curves is not None
        tail = "" if self.total is None else f", total={self.total!r}"
        if list(self.curves) == ["*"]:
            return f"Budget({self.curves['*']!r}{tail})"
        inner = ", ".join(f"{k!r}: {c!r}" for k, c in self.curves.items())
        return f"Budget({{{inner}}}{tail})"

    @staticmethod
    def coerce(value: Any) -> Budget | None:
        """Accept ``None``, a [`Budget`][tabdp.Budget], a number or a mapping.

        Args:
            value: What the caller passed as ``budget``.

        Returns:
            A Budget or None.

        Example:
            >>> Budget.coerce(0.5)
            Budget(0.5)
        """
        if value is None or isinstance(value, Budget):
            return value
        if isinstance(value, (int, float, Mapping)) and not isinstance(value, bool):
            return Budget(value)
        raise InvalidParameterError(
            f"budget must be None, a number, a {{size: rho}} mapping or tabdp.Budget; got "
            f"{type(value).__name__}.")


def _finite_or_none(x: float) -> float | None:
    return None if not math.isfinite(x) else x
