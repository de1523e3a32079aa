"""Per-record privacy budgets: a public limit on each unit's total PRzCDP loss ρ.

A budget is either a constant ρ_max for every unit, or a *curve*: a limit that depends on the
unit's size s (its largest absolute contribution to any released cell), given at a few sizes and
interpolated linearly in log(s) (constant beyond the end points). Curves are how slowly scaling
guarantees are budgeted: "records of size 1,000 at most ρ = 0.5, records of size 10^7 at most
ρ = 10".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError

__all__ = ["Budget"]


class Budget:
    """A public per-record limit on total PRzCDP loss ρ.

    Args:
        rho: Either a number (the same limit for every unit) or a mapping ``{size: rho_limit}``
            with at least one entry; sizes > 0, limits > 0.

    Example:
        >>> b = Budget({1e3: 0.5, 1e7: 10.0})
        >>> b.limit([1.0, 1e3, 1e5, 1e7, 1e9]).round(3).tolist()
        [0.5, 0.5, 5.25, 10.0, 10.0]
        >>> float(Budget(2.0).limit(1e9))
        2.0
    """

    def __init__(self, rho: float | Mapping[float, float]) -> None:
        if isinstance(rho, Mapping):
            if not rho:
                raise InvalidParameterError(
                    "Budget: a curve needs at least one {size: rho} point; got {}.\n"
                    "Hint: Budget({1e3: 0.5, 1e7: 10.0}) or a constant Budget(1.0).")
            pts = sorted(
                (check_real("size", s, owner="Budget curve", gt=0.0),
                 check_real(f"rho at size {s}", r, owner="Budget curve", gt=0.0))
                for s, r in rho.items())
            self.sizes = np.array([p[0] for p in pts])
            self.limits = np.array([p[1] for p in pts])
            if np.any(np.diff(self.sizes) == 0):
                raise InvalidParameterError(f"Budget: sizes must be distinct; got {list(rho)}.")
            self.constant: float | None = None
        else:
            self.constant = check_real("rho", rho, owner="Budget", gt=0.0,
                                       hint="a per-record zCDP limit such as Budget(1.0)")
            self.sizes = np.array([1.0])
            self.limits = np.array([self.constant])

    def limit(self, size: ArrayLike) -> np.ndarray:
        """The ρ limit for units of the given sizes.

        Args:
            size: Unit sizes (largest absolute contribution to a released cell).

        Returns:
            Limits, one per size.

        Example:
            >>> Budget(1.0).limit([0.0, 5.0]).tolist()
            [1.0, 1.0]
        """
        s = np.abs(np.asarray(size, dtype=np.float64))
        if self.constant is not None:
            return np.full(s.shape, self.constant)
        with np.errstate(divide="ignore"):
            ls = np.log(np.maximum(s, 1e-300))
        return np.interp(ls, np.log(self.sizes), self.limits)

    def to_dict(self) -> dict[str, Any]:
        """Public description of the budget.

        Returns:
            A JSON-serializable dict.

        Example:
            >>> Budget(1.0).to_dict()
            {'kind': 'constant', 'rho': 1.0}
        """
        if self.constant is not None:
            return {"kind": "constant", "rho": self.constant}
        return {"kind": "curve", "points": [[float(s), float(r)] for s, r in
                                            zip(self.sizes, self.limits, strict=True)],
                "interpolation": "linear in log(size), constant beyond the end points"}

    def __repr__(self) -> str:
        if self.constant is not None:
            return f"Budget({self.constant!r})"
        inner = ", ".join(f"{s:g}: {r:g}" for s, r in zip(self.sizes, self.limits, strict=True))
        return f"Budget({{{inner}}})"

    @staticmethod
    def coerce(value: Any) -> Budget | None:
        """Accept ``None``, a :class:`Budget`, a number or a mapping.

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
