"""The session ledger: what was released, and what it cost each unit.

Each :class:`QueryRecord` holds the public description of one release (mechanism, parameters,
key set size, level) and its confidential per-unit losses. Per-unit losses of independent
releases add up (Rényi and max divergences compose additively), so a unit's total ρ is the sum
over queries of the sum over the cells it touches of that query's policy at its Δ in the cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from tabdp.mechanisms._base import Mechanism

__all__ = ["QueryRecord", "UnitLosses"]

#: Record sizes at which public policy curves are tabulated.
POLICY_GRID = [0.0] + [10.0**k for k in range(0, 9)]


@dataclass(frozen=True)
class UnitLosses:
    """Confidential per-unit losses of one query.

    Attributes:
        units: Unit ids (a Polars Series): the unit column's values, or the row ids (positions
            in the frame as read) when each row is a unit.
        rho: PRzCDP loss per unit (``inf`` for units touched by an approximate-DP-only release).
        epsilon: PRDP loss per unit (``inf`` where not pure).
        size: Largest absolute contribution of the unit to a released cell.
        guarantee: How the query's losses compose: ``"gaussian"`` (Gaussian-shift mechanisms:
            exact (ε, δ) from μ² = 2ρ), ``"zcdp"`` (pure or zCDP mechanisms) or ``"approx"``
            (approximate DP only: the loss is ``eps_a`` at ``delta_a``).
        eps_a: Approximate-DP ε per unit (sum over the cells it touches), ``"approx"`` only.
        delta_a: Approximate-DP δ per unit (per-cell δ times cells touched), ``"approx"`` only.

    Example:
        >>> import polars as pl
        >>> UnitLosses(pl.Series([0, 1]), np.zeros(2), np.zeros(2), np.ones(2)).n
        2
    """

    units: Any
    rho: np.ndarray
    epsilon: np.ndarray
    size: np.ndarray
    guarantee: str = "zcdp"
    eps_a: np.ndarray | None = None
    delta_a: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.guarantee not in ("gaussian", "zcdp", "approx"):
            raise ValueError(f"UnitLosses.guarantee must be gaussian/zcdp/approx; got "
                             f"{self.guarantee!r}")
        if self.guarantee == "approx" and (self.eps_a is None or self.delta_a is None):
            raise ValueError("approximate-DP losses need eps_a and delta_a")

    @staticmethod
    def guarantee_of(mechanism: Mechanism) -> str:
        """The composition class of a mechanism's losses (see :attr:`guarantee`).

        Args:
            mechanism: The mechanism.

        Returns:
            ``"approx"``, ``"gaussian"`` or ``"zcdp"``.

        Example:
            >>> from tabdp.mechanisms import Gaussian, Laplace
            >>> UnitLosses.guarantee_of(Gaussian(1.0)), UnitLosses.guarantee_of(Laplace(1.0))
            ('gaussian', 'zcdp')
        """
        if mechanism.dp_delta is not None:
            return "approx"
        return "gaussian" if mechanism.gaussian_dp else "zcdp"

    @property
    def n(self) -> int:
        """Number of units.

        Example:
            >>> UnitLosses(pl.Series([0, 1, 2]), np.zeros(3), np.zeros(3), np.zeros(3)).n
            3
        """
        return int(self.rho.shape[0])


@dataclass(frozen=True)
class QueryRecord:
    """One release recorded in a session.

    Attributes:
        index: Position in the session (1-based).
        name: Label (used in per-record column names ``rho_<name>``).
        kind: ``"sum"`` or ``"count"``.
        measures: Released measure columns (``("count",)`` for counts).
        by: Group-by columns.
        mechanism: The mechanism (public).
        keys: Public description of the key set.
        level: Confidence level of margins of error.
        nulls: Null policy used.
        losses: Confidential per-unit losses.
        confidential: Confidential counts (rows read, dropped outside keys, nulls handled...).
        grid: Public grid each measure was rounded to (step or label; ``None`` for none).
        fallbacks: CONFIDENTIAL: per measure, the number of cells whose exact rounding needed
            the high-precision path (it depends on how close exact values lie to breakpoints).
        cells: CONFIDENTIAL per-cell audit (when the session tracks cells): key columns,
            ``worst_rho`` (largest loss of one unit in the cell), ``worst_size`` and ``units``.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> r = QueryRecord(1, "q1", "count", ("count",), ("c",), Gaussian(1.0),
        ...                 {"size": 3}, 0.9, "error", None)
        >>> r.public()["mechanism"]["family"]
        'gaussian'
    """

    index: int
    name: str
    kind: str
    measures: tuple[str, ...]
    by: tuple[str, ...]
    mechanism: Mechanism
    keys: dict[str, Any]
    level: float
    nulls: str
    losses: UnitLosses | None
    confidential: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, Any] = field(default_factory=dict)
    fallbacks: dict[str, int] = field(default_factory=dict)
    cells: Any = None

    def policy_curve(self) -> list[dict[str, float | None]]:
        """Public policy curve of this query: ρ and ε at record sizes 0, 1, 10, ..., 1e8.

        A unit contributing Δ to each released measure of a cell pays the listed value once per
        measure (the curve shown is per measure cell); with a joint (vector) mechanism it pays
        it once per cell, Δ being the norm of its weighted contribution vector.

        Returns:
            Rows ``{"delta", "rho", "epsilon"}`` (``None`` for an infinite ε); mechanisms
            accounted in approximate DP add ``"epsilon_at_dp_delta"`` (their ε per cell at
            their per-cell δ).

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> r = QueryRecord(1, "q1", "count", ("count",), ("c",), Gaussian(1.0), {}, 0.9,
            ...                 "error", None)
            >>> r.policy_curve()[1]
            {'delta': 1.0, 'rho': 0.5, 'epsilon': None}
        """
        d = np.array(POLICY_GRID)
        rho = self.mechanism.rho(d)
        eps = self.mechanism.epsilon(d)
        rows: list[dict[str, float | None]] = [
            {"delta": float(x), "rho": _num(r), "epsilon": _num(e)}
            for x, r, e in zip(d, rho, eps, strict=True)]
        if self.mechanism.dp_delta is not None:
            ea, _ = self.mechanism.approx_policy(d)
            for row, v in zip(rows, ea, strict=True):
                row["epsilon_at_dp_delta"] = _num(v)
        return rows

    def public(self) -> dict[str, Any]:
        """Public, data-independent description of the release.

        Returns:
            A JSON-serializable dict.

        Example:
            >>> from tabdp.mechanisms import Laplace
            >>> QueryRecord(1, "q1", "count", ("count",), ("c",), Laplace(1.0), {}, 0.9,
            ...             "error", None).public()["kind"]
            'count'
        """
        return {
            "index": self.index,
            "name": self.name,
            "kind": self.kind,
            "measures": list(self.measures),
            "by": list(self.by),
            "keys": dict(self.keys),
            "protects_cell_existence": not self.keys.get("keys_from_data", False),
            "mechanism": self.mechanism.to_dict(),
            "moe_level": self.level,
            "null_policy": self.nulls,
            "grid": {m: _grid_value(g) for m, g in self.grid.items()},
            "policy_curve": self.policy_curve(),
        }


def _grid_value(g: Any) -> Any:
    return float(g) if isinstance(g, (int, float, np.integer, np.floating)) else g


def _num(x: float) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None
