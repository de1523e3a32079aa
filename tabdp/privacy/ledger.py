"""The session ledger: what was released, and what it cost each unit.

Each [`QueryRecord`][tabdp.privacy.QueryRecord] holds the public description of one release
(mechanism, parameters, key set size, level) and its confidential per-unit losses. Per-unit losses
of independent releases add up (Rényi and max divergences compose additively), so a unit's total ρ
is the sum over queries of the sum over the cells it touches of that query's policy at its Δ in the
cell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import polars as pl

from tabdp._numeric import (
    add_up,
    add_up_any,
    add_up_fresh,
    add_up_into,
    any_nonzero,
    filled,
    increasing,
    on_slices,
    work_pool,
    work_threads,
)
from tabdp.exceptions import ColumnTypeError, InvalidParameterError
from tabdp.mechanisms import Mechanism

if TYPE_CHECKING:
    from tabdp.privacy.session import Session

__all__ = ["QueryRecord", "UnitLosses", "Charges", "DenseLedger", "UnitLedger", "ReplayLedger",
           "ReportSource", "ReportSpill",
           "loss_components", "sorted_positions", "sorted_search",
           "sorted_positions_or_misses",
           "strictly_increasing"]

#: Record sizes at which public policy curves are tabulated.
POLICY_GRID = [0.0] + [10.0**k for k in range(0, 9)]

#: Parquet options of the CONFIDENTIAL per-record report (every engine but Spark's writer):
#: zstd at level 1 writes it about 1.6x faster than Polars' default level for the same size
#: (10M rows: 0.60 s against 0.98 s, 194 MB against 193 MB).
PER_RECORD_PARQUET: dict[str, Any] = {"compression": "zstd", "compression_level": 1}

#: Rows per row group of the per-record report a streaming release sinks (Polars' own choice
#: for it; stated, so that `tabdp.report.loss_statistics` reads the file in slices of whole
#: row groups, each decoded once, without reading the footer: pyarrow's reader costs the run
#: about 0.1-0.3 CPU-s and 35 MB to import; docs/performance.md, "Stop 67").
PER_RECORD_ROW_GROUP = 100_000


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
        """Check that ``guarantee`` is known and that approximate losses carry (ε, δ)."""
        if self.guarantee not in ("gaussian", "zcdp", "approx"):
            raise ValueError(f"UnitLosses.guarantee must be gaussian/zcdp/approx; got "
                             f"{self.guarantee!r}")
        if self.guarantee == "approx" and (self.eps_a is None or self.delta_a is None):
            raise ValueError("approximate-DP losses need eps_a and delta_a")

    @staticmethod
    def guarantee_of(mechanism: Mechanism) -> str:
        """The composition class of a mechanism's losses (see `guarantee`).

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
        bounds: PUBLIC contribution bounds enforced by the release: ``max_cells`` (cells a
            unit contributes to) and ``max_rows`` (rows a unit counts in one cell); ``None``
            where unbounded.

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
    bounds: dict[str, Any] = field(default_factory=dict)

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
            "contribution_bounds": {"max_cells": self.bounds.get("max_cells"),
                                    "max_rows": self.bounds.get("max_rows")},
            "policy_curve": self.policy_curve(),
        }

    def curve_entry(self) -> tuple[Any, int, float | None]:
        """``(mechanism, charges, cap)`` of this release for a worst-case total curve.

        A unit pays the policy once per measure (once for a joint mechanism) in each of at most
        ``max_cells`` cells (1 when unbounded: the curve then assumes one cell); a count's
        sensitivity is capped at ``max_rows``.

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> QueryRecord(1, "q1", "count", ("count",), ("c",), Gaussian(1.0), {}, 0.9,
            ...             "error", None, bounds={"max_cells": 3, "max_rows": 2}).curve_entry()
            (Gaussian(sigma=1.0), 3, 2.0)
        """
        per_cell = 1 if getattr(self.mechanism, "joint", False) else len(self.measures)
        cells = self.bounds.get("max_cells") or 1
        rows = self.bounds.get("max_rows")
        cap = float(rows) if rows is not None and self.kind != "sum" else None
        return self.mechanism, per_cell * int(cells), cap

    @property
    def bounded(self) -> bool:
        """Whether the release enforces the bounds a worst-case curve needs.

        These are the cells per unit, and the rows per unit for count-like releases.

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> QueryRecord(1, "q1", "sum", ("x",), ("c",), Gaussian(1.0), {}, 0.9, "error",
            ...             None, bounds={"max_cells": 1}).bounded
            True
        """
        if self.bounds.get("max_cells") is None:
            return False
        return self.kind == "sum" or self.bounds.get("max_rows") is not None


def _grid_value(g: Any) -> Any:
    return float(g) if isinstance(g, (int, float, np.integer, np.floating)) else g


def _num(x: float) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def dense(a: Any) -> np.ndarray:
    """``a`` as float64 in one block of memory: a constant view written out as an array.

    Row mode's count charges every row the same losses, held as read-only views of one value
    (`numpy.broadcast_to`, no memory per row; `tabdp.frame._engine._constant_rows`). Polars
    copies such a strided view element by element (0.6 CPU-s for 10M rows against 0.01 for
    ``numpy.full``): whatever hands losses to Polars writes them out first, with the same
    values (0.0 as ``numpy.zeros``). Other arrays are returned as they are.

    Example:
        >>> v = np.broadcast_to(np.float64(0.5), (3,))
        >>> d = dense(v)
        >>> d.tolist(), bool(d.flags.c_contiguous), dense(d) is d
        ([0.5, 0.5, 0.5], True, True)
    """
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 1 or a.size < 2 or a.strides[0] != 0:
        return a
    return filled(a.size, a[0])  # (written by slices on the threads)


class Deferred(MutableMapping[str, np.ndarray]):
    """Currency → array, each computed when first read and then kept.

    The per-currency arrays of `Charges` whose all-admitted totals were computed with them
    (`Charges.totals`): when nothing reads them (no budget, no lifetime ledger), they are never
    held; a reader gets the doubles an up-front computation gives (``compute`` evaluates the
    same per-row function).

    Args:
        keys: The currencies, in order.
        compute: ``compute(currency)``: that currency's array.

    Example:
        >>> d = Deferred(["x"], lambda c: np.ones(2))
        >>> list(d), d["x"].tolist(), "y" in d
        (['x'], [1.0, 1.0], False)
    """

    def __init__(self, keys: Iterable[str], compute: Callable[[str], np.ndarray]) -> None:
        """Keys known now; values computed on first read."""
        self._keys = list(keys)
        self._compute = compute
        self._got: dict[str, np.ndarray] = {}

    def __getitem__(self, k: str) -> np.ndarray:
        if k not in self._keys:
            raise KeyError(k)
        if k not in self._got:
            self._got[k] = self._compute(k)
        return self._got[k]

    def __setitem__(self, k: str, v: np.ndarray) -> None:
        if k not in self._keys:
            self._keys.append(k)
        self._got[k] = v

    def __delitem__(self, k: str) -> None:
        self._keys.remove(k)
        self._got.pop(k, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._keys))

    def __len__(self) -> int:
        return len(self._keys)


@dataclass
class Charges:
    """The losses one query would charge, per unit and *currency*, before the budget filter.

    A currency is what a unit's size is measured in: each summed measure (its own unit), the
    joint measures of a vector mechanism (``"a+b"``), or ``"rows"`` for counts, medians and
    quantiles. Arrays are aligned with `units`.

    Attributes:
        units: Unit ids (a Polars Series), or row ids (int64 numpy array) in row mode.
        rho: Currency → ρ per unit (summed over the cells it touches).
        epsilon: Currency → pure ε per unit.
        size: Currency → the unit's largest absolute contribution to a cell.
        guarantee: Composition class (see `UnitLosses.guarantee`).
        eps_a: Currency → approximate-DP ε per unit (``"approx"`` only).
        delta_a: Currency → approximate-DP δ per unit (``"approx"`` only).
        totals: Kind (``rho``, ``epsilon``, ``size``; ``eps_a``, ``delta_a`` if
            ``"approx"``) → the totals over the currencies that `losses` returns when every
            unit is admitted, when computed with the charges (the same doubles; the
            per-currency arrays may then be `Deferred`), else ``None``.

    Example:
        >>> ch = Charges(np.array([0, 1]), {"x": np.array([0.5, 2.0])},
        ...              {"x": np.array([np.inf, np.inf])}, {"x": np.array([1.0, 4.0])})
        >>> ch.losses({"x": np.array([True, False])}).rho.tolist()
        [0.5]
    """

    units: Any
    rho: MutableMapping[str, np.ndarray]
    epsilon: MutableMapping[str, np.ndarray]
    size: MutableMapping[str, np.ndarray]
    guarantee: str = "zcdp"
    eps_a: MutableMapping[str, np.ndarray] | None = None
    delta_a: MutableMapping[str, np.ndarray] | None = None
    totals: dict[str, np.ndarray] | None = None

    @property
    def n(self) -> int:
        """Number of units charged.

        Example:
            >>> Charges(np.array([3]), {"x": np.ones(1)}, {"x": np.ones(1)}, {"x": np.ones(1)}).n
            1
        """
        return len(self.units)

    @property
    def currencies(self) -> list[str]:
        """The currencies charged.

        Example:
            >>> Charges(np.zeros(0), {"rows": np.zeros(0)}, {}, {}).currencies
            ['rows']
        """
        return list(self.rho)

    def losses(self, admitted: dict[str, np.ndarray]) -> UnitLosses:
        """Per-unit losses of the admitted charges (units with no admitted charge omitted).

        Args:
            admitted: Currency → boolean mask over units.

        Returns:
            The losses the query records.

        Example:
            >>> ch = Charges(np.array([0]), {"x": np.ones(1), "y": np.ones(1)},
            ...              {"x": np.ones(1), "y": np.ones(1)},
            ...              {"x": np.ones(1), "y": 2 * np.ones(1)})
            >>> ch.losses({"x": np.array([True]), "y": np.array([False])}).size.tolist()
            [1.0]
        """
        n = self.n
        approx = self.guarantee == "approx"
        if all(bool(admitted[c].all()) for c in self.currencies):
            if self.totals is not None:  # added up with the charges (the same doubles)
                t = self.totals
                return UnitLosses(self.units, t["rho"], t["epsilon"], t["size"],
                                  self.guarantee, t.get("eps_a"), t.get("delta_a"))
            # nobody left out (no budget, or all within it): plain sums, no masking
            parts = {k: getattr(self, k) for k in ("rho", "epsilon", "size", "eps_a", "delta_a")}
            # one currency: its arrays as they are (never written in place); several: the
            # first two added (or their maximum) into a new array, then the others into it

            def total(k: str) -> np.ndarray:
                vals = [np.asarray(v, dtype=np.float64) for v in parts[k].values()]
                if k == "size":
                    out = np.zeros(n) if not vals else vals[0] if len(vals) == 1 else \
                        np.maximum(vals[0], vals[1])
                    for v in vals[2:]:
                        np.maximum(out, v, out=out)
                    return out
                # each addition rounded up: never below the exact sum (`add_up`)
                out = np.zeros(n) if not vals else vals[0] if len(vals) == 1 else \
                    add_up(vals[0], vals[1])
                for v in vals[2:]:
                    add_up_into(out, v)
                return out

            kinds = ["rho", "epsilon", "size", *(["eps_a", "delta_a"] if approx else [])]
            # the totals are independent whole-array NumPy work (which releases the GIL): with
            # several currencies of many units they are added side by side on the engine's
            # threads, each giving the doubles of a sequential evaluation
            workers = (min(work_threads(), len(kinds))
                       if len(self.currencies) > 1 and n >= 1 << 16 else 1)
            if workers > 1:
                with work_pool(workers) as pool:
                    tot = dict(zip(kinds, pool.map(total, kinds), strict=True))
            else:
                tot = {k: total(k) for k in kinds}
            return UnitLosses(self.units, tot["rho"], tot["epsilon"], tot["size"],
                              self.guarantee, tot.get("eps_a"), tot.get("delta_a"))
        # some units left out of some currency: each total adds a currency's charge where it
        # was admitted and 0.0 where it was not (`add_up(t, 0.0)`; sizes: the maximum with
        # 0.0). Computed as the whole-array add (or maximum) of the charges themselves, then
        # the few left-out positions set to what adding 0.0 to their earlier totals gives:
        # the same doubles as adding ``np.where(ok, charge, 0.0)``, without a fresh array of
        # every unit per currency and kind (page faults cost more than the arithmetic here);
        # a currency that left out more than an eighth of the units adds the masked charges
        if approx:
            assert self.eps_a is not None and self.delta_a is not None
        summed = ["rho", "epsilon", *(["eps_a", "delta_a"] if approx else [])]
        any_ok = np.zeros(n, dtype=bool)
        acc: dict[str, np.ndarray] = {}
        for c in self.currencies:
            ok = np.broadcast_to(np.asarray(admitted[c], dtype=bool), (n,))
            any_ok |= ok
            out = None if bool(ok.all()) else np.flatnonzero(~ok)
            # many left out: the masked charges themselves (gathering and resetting that many
            # positions would cost more than one masked array per kind)
            masked = out is not None and out.size > n // 8
            for k in (*summed, "size"):
                v = np.asarray(getattr(self, k)[c], dtype=np.float64)
                if masked:
                    v = np.where(ok, v, 0.0)
                if k not in acc:
                    # the first currency: ``0.0 + v`` (``max(0.0, v)``) as a new array, the
                    # doubles `add_up` of a zero array gives (adding to 0.0 is exact; -0.0
                    # becomes 0.0 alike) in one pass instead of a zero array and its check
                    acc[k] = np.maximum(0.0, v) if k == "size" else np.add(0.0, v)
                    if out is not None and not masked:  # a left-out unit: 0.0 + 0.0
                        acc[k][out] = 0.0
                    continue
                kept = None if out is None or masked else acc[k][out]
                if k == "size":
                    np.maximum(acc[k], v, out=acc[k])
                else:
                    add_up_into(acc[k], v)
                if kept is not None:  # a left-out unit adds 0.0 (the maximum with 0.0)
                    acc[k][out] = (np.maximum(kept, 0.0) if k == "size"
                                   else add_up(kept, np.zeros(kept.size)))
        for k in (*summed, "size"):  # no currency (a query charging none): zeros
            acc.setdefault(k, np.zeros(n))
        if bool(any_ok.all()):  # every unit kept in some currency: no gather
            return UnitLosses(self.units, acc["rho"], acc["epsilon"], acc["size"],
                              self.guarantee, acc.get("eps_a"), acc.get("delta_a"))
        units = self.units[any_ok] if isinstance(self.units, np.ndarray) else \
            self.units.filter(pl.Series(any_ok))
        return UnitLosses(units, acc["rho"][any_ok], acc["epsilon"][any_ok],
                          acc["size"][any_ok], self.guarantee,
                          acc["eps_a"][any_ok] if approx else None,
                          acc["delta_a"][any_ok] if approx else None)


class DenseLedger:
    """Per-unit running totals for row mode: arrays indexed by row id.

    Example:
        >>> led = DenseLedger()
        >>> led.add(np.array([2]), {"rho": np.array([0.5])}, {"size": np.array([3.0])})
        >>> led.lookup(np.array([0, 2]), ["rho", "size"])["rho"].tolist()
        [0.0, 0.5]
    """

    def __init__(self) -> None:
        """An empty ledger."""
        self.arrays: dict[str, np.ndarray] = {}
        self.n = 0
        #: Row mode: the rows the session's releases read (`cover`: the frame layer, when it
        #: binds them), all of which the report lists; ``None``: the rows charged so far.
        self.rows: int | None = None
        #: Columns whose array is also held outside the ledger (a release's losses taken as
        #: the first totals, a frame returned by `frame`, a twin column): never written in
        #: place, but replaced by a new array when a release adds to them (`_owned`).
        self._shared: set[str] = set()

    @property
    def covered(self) -> int:
        """The rows the report lists: those the releases read, else those charged so far.

        Example:
            >>> led = DenseLedger()
            >>> led.add(np.array([1]), {"rho": np.ones(1)}, {})
            >>> led.covered, (setattr(led, "rows", 5), led.covered)[1]
            (2, 5)
        """
        return self.rows if self.rows is not None else self.n

    def cover(self, n_rows: int) -> None:
        """Row mode: the report lists the ``n_rows`` rows the releases read (set once).

        Args:
            n_rows: The rows bound by the session's first release.

        Example:
            >>> led = DenseLedger()
            >>> led.cover(5); led.cover(7); led.covered
            5
        """
        if self.rows is None:
            self.rows = n_rows

    def _grow(self, n: int) -> None:
        if n > self.n:
            for k, a in self.arrays.items():
                self.arrays[k] = np.concatenate([a, np.zeros(n - self.n)])
            self._shared.clear()  # every array is a new one
            self.n = n

    def _owned(self, k: str) -> np.ndarray:
        """Column ``k``'s array, to be written in place: copied first if it is shared."""
        if k in self._shared:
            self.arrays[k] = self.arrays[k].copy()
            self._shared.discard(k)
        return self.arrays[k]

    def lookup(self, units: Any, cols: list[str]) -> dict[str, np.ndarray]:
        """Current totals of ``cols`` for ``units`` (0 where never charged).

        Example:
            >>> DenseLedger().lookup(np.array([1]), ["rho"])["rho"].tolist()
            [0.0]
        """
        ids = np.asarray(units, dtype=np.int64)
        out = {}
        for c in cols:
            a = self.arrays.get(c)
            if a is None or ids.size == 0:
                out[c] = np.zeros(ids.size)
            else:
                inside = ids < a.size
                v = np.zeros(ids.size)
                v[inside] = a[ids[inside]]
                out[c] = v
        return out

    def add(self, units: Any, sums: dict[str, np.ndarray], maxes: dict[str, np.ndarray]) -> None:
        """Add ``sums`` and take the maximum with ``maxes``, per unit (ids unique in a call).

        Example:
            >>> led = DenseLedger()
            >>> led.add(np.array([0]), {"rho": np.ones(1)}, {})
            >>> led.add(np.array([0]), {"rho": np.ones(1)}, {})
            >>> led.arrays["rho"].tolist()
            [2.0]
        """
        ids = np.asarray(units, dtype=np.int64)
        if ids.size:
            self._grow(int(ids.max()) + 1)
        # a column never charged reads as 0 (`lookup`, `frame`'s callers): an all-zero sum
        # into it (e.g. the approximate-DP parts of a zCDP release) allocates nothing
        sums = {k: v for k, v in sums.items() if k in self.arrays or any_nonzero(v)}
        fresh = {k for k in sums if k not in self.arrays}
        fresh_max = {k for k in maxes if k not in self.arrays and k not in sums}
        # ids are unique within one call (one entry per unit); a contiguous increasing run
        # (row mode over all rows) is a slice: no gather/scatter over millions of rows
        lo = int(ids[0]) if ids.size else 0
        run = bool(ids.size) and int(ids[-1]) - lo + 1 == ids.size and increasing(ids)
        at: Any = slice(lo, lo + ids.size) if run else ids
        # every row at once (row mode's releases): a fresh column takes the release's own
        # array as its totals when that array is what ``0.0 + v`` (or the maximum with 0.0)
        # gives bit for bit, and a column added to is replaced by a new array instead of a
        # copy written over: no array of every row allocated and filled for nothing (the
        # page faults cost more than the arithmetic here)
        whole = run and lo == 0 and ids.size == self.n
        for k in [*fresh, *fresh_max]:
            v = sums[k] if k in fresh else maxes[k]
            if whole and _plain(v, self.n):
                self.arrays[k] = v
                self._shared.add(k)
            elif whole and k in fresh:
                self.arrays[k] = np.add(0.0, v)  # 0.0 + v: exact
            elif whole:
                self.arrays[k] = np.maximum(0.0, v)
            else:
                self.arrays[k] = np.zeros(self.n)
                if k in fresh:
                    self.arrays[k][at] += v  # 0.0 + v: exact
                else:  # (``at`` may be ids: a gather, so no ``out=``)
                    self.arrays[k][at] = np.maximum(self.arrays[k][at], v)
        # rounded up (`add_up`): a total is never below the exact sum of its losses; an
        # all-zero column adds nothing, and a column whose values and totals are another's
        # (ρ_z is ρ in a zCDP release) takes that one's result
        shared = [k for k, v in sums.items() if any(v is w for j, w in sums.items() if j != k)]
        old = {k: self.arrays[k][at] for k in shared}
        # twins decided before any total changes: over a run, ``old`` holds views of the
        # totals, which the additions below update in place (review R18-3)
        twins: dict[str, str] = {}
        done: dict[str, np.ndarray] = {}
        for k, v in sums.items():
            if k in fresh:
                continue
            twin = _twin(done, sums, old, k)
            if twin is not None:
                twins[k] = twin
            done[k] = v
        for k, v in sums.items():
            if k in fresh:
                continue
            if k in twins:
                if whole:  # the same array for both (shared: neither is written in place)
                    self.arrays[k] = self.arrays[twins[k]]
                    self._shared.update((k, twins[k]))
                else:
                    self._owned(k)[at] = self.arrays[twins[k]][at]
            elif any_nonzero(v):
                if whole and k in self._shared:
                    self.arrays[k] = add_up_fresh(self.arrays[k], v)
                    self._shared.discard(k)
                else:
                    add_up_into(self._owned(k), v, at)
        for k, v in maxes.items():
            if k in fresh_max:
                continue
            if whole and k in self._shared:
                self.arrays[k] = _max_fresh(self.arrays[k], v)
                self._shared.discard(k)
            elif run:
                a = self._owned(k)[at]
                np.maximum(a, v, out=a)
            else:
                a = self._owned(k)
                a[at] = np.maximum(a[at], v)

    def frame(self, n_rows: int) -> pl.DataFrame:
        """All rows 0..n_rows-1 with their totals (0 where never charged).

        Example:
            >>> DenseLedger().frame(2)["unit"].to_list()
            [0, 1]
        """
        self._grow(n_rows)
        # the frame's columns are the arrays themselves (Polars takes NumPy's buffers without
        # a copy): a later release replaces them rather than writing the frame's values
        self._shared.update(self.arrays)
        return pl.DataFrame({"unit": pl.Series("unit", _row_numbers(n_rows), dtype=pl.Int64),
                             **{k: pl.Series(k, dense(a[:n_rows]), dtype=pl.Float64)
                                for k, a in self.arrays.items()}})


def _row_numbers(n: int) -> np.ndarray:
    """``numpy.arange(n)`` (int64), written by slices on the threads (`on_slices`)."""
    out = np.empty(n, dtype=np.int64)

    def run(lo: int, hi: int) -> None:
        out[lo:hi] = np.arange(lo, hi, dtype=np.int64)

    on_slices(n, run)
    return out


def strictly_increasing(a: np.ndarray) -> bool:
    """Whether ``a`` is strictly increasing (sorted and distinct).

    Example:
        >>> strictly_increasing(np.array([1, 2, 2]))
        False
    """
    return increasing(a)


def sorted_search(keys: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``query`` is in ``keys``, both strictly increasing Int64: ``(pos, hit)``.

    A merge join over the two sorted columns (Polars, told they are sorted once checked by the
    caller): at 10M ids about half the CPU of a binary search per id and a tenth of a hash
    join. ``pos`` is 0 where ``hit`` is False.

    Args:
        keys: Sorted distinct int64 ids.
        query: Sorted distinct int64 ids.

    Returns:
        ``(pos, hit)``: ``keys[pos[hit]] == query[hit]``.

    Example:
        >>> pos, hit = sorted_search(np.array([1, 3, 5]), np.array([2, 3, 5]))
        >>> pos.tolist(), hit.tolist()
        ([0, 1, 2], [False, True, True])
    """
    ks = pl.Series("u", keys, dtype=pl.Int64).set_sorted()
    qs = pl.Series("u", query, dtype=pl.Int64).set_sorted()
    got = pl.DataFrame({"u": qs}).join(
        pl.DataFrame({"u": ks, "__i": pl.int_range(len(ks), dtype=pl.Int64, eager=True)}),
        on="u", how="left", maintain_order="left")["__i"]
    return got.fill_null(0).to_numpy(), got.is_not_null().to_numpy()


def sorted_positions_or_misses(keys: pl.Series,
                               units: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(pos, hit)`` of ``units`` in ``keys`` when both are strictly increasing Int64 ids.

    ``None`` otherwise (nulls, another dtype, unsorted): the caller joins.

    Example:
        >>> pos, hit = sorted_positions_or_misses(pl.Series([1, 3]), pl.Series([3, 4]))
        >>> pos.tolist(), hit.tolist()
        ([1, 0], [True, False])
    """
    if not (isinstance(units, pl.Series) and keys.dtype == pl.Int64
            and units.dtype == pl.Int64) or keys.null_count() or units.null_count():
        return None
    k, u = keys.to_numpy(), units.to_numpy()
    if not (strictly_increasing(k) and strictly_increasing(u)):
        return None
    return sorted_search(k, u)


def sorted_positions(keys: pl.Series, units: Any) -> np.ndarray | None:
    """Where each of ``units`` is in ``keys``, when a merge of sorted ids can tell; else ``None``.

    Both Int64 without nulls, ``keys`` and ``units`` strictly increasing (sorted, distinct)
    and every unit found: then ``keys[pos] == units``. Otherwise ``None`` (the caller joins).
    The per-record report places each query's losses on the session ledger's units this way
    (both sorted by unit in unit mode): a linear pass instead of a hash join of every unit.

    Args:
        keys: The ledger's unit ids.
        units: A query's unit ids.

    Returns:
        Int64 positions into ``keys``, aligned with ``units``, or ``None``.

    Example:
        >>> sorted_positions(pl.Series([1, 3, 5]), pl.Series([3, 5])).tolist()
        [1, 2]
        >>> sorted_positions(pl.Series([1, 3, 5]), pl.Series([2])) is None
        True
    """
    got = sorted_positions_or_misses(keys, units)
    if got is None or not got[1].all():
        return None
    return got[0]


def _merge_sorted(table: pl.DataFrame, new: pl.DataFrame, maxes: set[str]) -> pl.DataFrame:
    """Per-unit totals of two tables sorted by distinct Int64 ids: sums added, maxima taken.

    Each sum is ``table + new`` (a missing value counts 0.0), the double the group-by of
    [`UnitLedger.add`][tabdp.privacy.ledger.UnitLedger.add] computes; maxima ignore NaN as
    Polars' ``max`` does. Columns in the group-by's order (sums, then maxima).

    Example:
        >>> t = pl.DataFrame({"unit": [1, 3], "rho": [0.5, 1.0]})
        >>> n = pl.DataFrame({"unit": [2, 3], "rho": [0.25, 0.25]})
        >>> _merge_sorted(t, n, set())["rho"].to_list()
        [0.5, 0.25, 1.25]
    """
    tu, nu = table["unit"].to_numpy(), new["unit"].to_numpy()
    pos, hit = sorted_search(tu, nu)
    fresh = ~hit
    k = int(fresh.sum())
    # both sides sorted and distinct: the merged ids are the table's with the new units
    # inserted at their binary-search positions (no sort of the merged ids); each side is
    # laid onto the merged ids (0.0 where it has no row) and a column is one contiguous
    # add (or maximum) over them, then the few units on one side only get that side's
    # value as it is (as a merge gives them). No gather or scatter per column by positions.
    n_t = tu.size
    ins = np.searchsorted(tu, nu[fresh])  # empty when every unit is in the table
    units = np.insert(tu, ins, nu[fresh]) if k else tu
    fpos = ins + np.arange(k)  # new's units not in the table, in the merged ids
    n = units.size
    # which merged positions hold a row of each side (boolean masks: filling a column
    # through one is a linear pass, several times cheaper than a scatter by positions)
    in_t: np.ndarray | None = None
    if k:
        in_t = np.ones(n, dtype=bool)
        in_t[fpos] = False
    only_t = np.ones(n_t, dtype=bool)
    only_t[pos[hit]] = False
    only = np.flatnonzero(only_t)  # the table's units new did not charge
    only_at = only + np.searchsorted(ins, only, side="right")  # shifted by the inserts
    in_n: np.ndarray | None = None
    if n != nu.size:  # some merged units are not new's
        in_n = np.ones(n, dtype=bool)
        in_n[only_at] = False
    names = [c for c in dict.fromkeys([*table.columns, *new.columns]) if c != "unit"]
    is_max = [c for c in names if _is_max_col(c)]
    cols = [*(c for c in names if not _is_max_col(c)), *is_max]
    out: dict[str, np.ndarray] = {}
    seen: dict[str, tuple[np.ndarray | None, np.ndarray]] = {}  # sums merged: (x, y)
    for c in cols:
        x = (table[c].fill_null(0.0).to_numpy().astype(np.float64, copy=False)
             if c in table.columns else None)
        y = new[c].fill_null(0.0).to_numpy() if c in new.columns else None
        if y is not None and not _is_max_col(c):
            same = _merged_twin(seen, x, y)
            if same is not None:  # the same two columns as a sum already merged (``rho_z``
                # of a zCDP release is ``rho``): the same doubles, no second merge
                out[c] = out[same]
                continue
            seen[c] = (x, y)
            if x is not None and not _bits(y).any() and not bool(np.signbit(x).any()):
                # nothing added (``eps_a``, ``delta_a``, ``rho_g`` of a zCDP release): each
                # total ``x + 0.0`` is x itself (x holds no -0.0), laid onto the merged ids
                # (the units new to the table get 0.0, the merge's ``0.0 + 0.0``)
                if in_t is None:
                    out[c] = x
                else:
                    out[c] = np.zeros(n)
                    out[c][in_t] = x
                continue
        if y is None:
            assert x is not None
            if in_t is None:
                out[c] = np.array(x, dtype=np.float64)
            else:
                out[c] = np.zeros(n)
                out[c][in_t] = x
            continue
        if x is None:
            xe = np.zeros(n)
        elif in_t is None:
            xe = x
        else:
            xe = np.zeros(n)
            xe[in_t] = x
        if in_n is None:
            ye = y
        else:
            ye = np.zeros(n)
            ye[in_n] = y
        if xe is x:  # the table's own column: a new array
            v = (np.fmax if _is_max_col(c) else add_up)(xe, ye)
        else:  # an array of this merge's own: added in place (no second fresh array; on a
            # loaded machine a fresh 10M-double array costs more in page faults than the add)
            v = xe
            if _is_max_col(c):
                np.fmax(v, ye, out=v)
            else:
                add_up_into(v, ye)
        if k:
            v[fpos] = y[fresh]
        if only.size:
            v[only_at] = 0.0 if x is None else x[only]
        out[c] = v
    return pl.DataFrame({"unit": pl.Series("unit", units, dtype=pl.Int64),
                         **{c: pl.Series(c, v, dtype=pl.Float64) for c, v in out.items()}})


def _bits(a: np.ndarray) -> np.ndarray:
    """The bits of a float64 array (an int64 view: equal bits, not equal values)."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two float64 arrays hold the same doubles bit for bit (-0.0 is not 0.0)."""
    if a is b:
        return True
    if a.shape != b.shape:
        return False
    ia, ib = _bits(a), _bits(b)
    head = min(ia.size, 1024)  # most columns differ early: a cheap look first
    return bool(np.array_equal(ia[:head], ib[:head])) and bool(np.array_equal(ia, ib))


def _merged_twin(seen: dict[str, tuple[np.ndarray | None, np.ndarray]], x: np.ndarray | None,
                 y: np.ndarray) -> str | None:
    """A sum column already merged by `_merge_sorted` from the same two columns, bit for bit.

    A merged sum depends only on its two columns (and the ids, common to every column), so
    such a column's result is this one's.

    Example:
        >>> a = np.array([0.5, 1.0])
        >>> _merged_twin({"rho": (a, a)}, a.copy(), a.copy())
        'rho'
        >>> _merged_twin({"rho": (a, a)}, a.copy(), -a) is None
        True
    """
    for j, (xj, yj) in seen.items():
        if (xj is None) != (x is None):
            continue
        if _same_bits(yj, y) and (x is None or _same_bits(xj, x)):  # type: ignore[arg-type]
            return j
    return None


def _plain(v: Any, n: int) -> bool:
    """Whether ``v`` may be a ledger's first totals as it is, without a copy.

    ``0.0 + v`` and the maximum of 0.0 and ``v`` give ``v`` bit for bit: a float64 array of
    ``n`` values in one block of memory, without a sign bit set (no -0.0) and without NaN.
    """
    if not (isinstance(v, np.ndarray) and v.dtype == np.float64 and v.shape == (n,)
            and bool(v.flags.c_contiguous)):
        return False
    bad: list[bool] = []

    def check(lo: int, hi: int) -> None:  # (slices on the threads)
        part = v[lo:hi]
        if bool(np.signbit(part).any()) or bool(np.isnan(part).any()):
            bad.append(True)

    on_slices(n, check)
    return not bad


def _max_fresh(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``numpy.maximum(a, v)`` of two arrays of one length, a new array written by slices."""
    out = np.empty(a.shape)

    def run(lo: int, hi: int) -> None:  # (on the threads, each its own slice)
        np.maximum(a[lo:hi], v[lo:hi], out=out[lo:hi])

    on_slices(a.size, run)
    return out


def _twin(done: dict[str, np.ndarray], sums: dict[str, Any], old: dict[str, np.ndarray],
          k: str) -> str | None:
    """A column already added whose new values are ``sums[k]`` and whose totals equal k's."""
    v = sums[k]
    for j in done:
        if sums[j] is v and j in old and k in old and np.array_equal(old[j], old[k]):
            return j
    return None


def _add_up_expr(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """`tabdp._numeric.add_up` as a Polars expression (the same doubles)."""
    expr: pl.Expr = add_up_any(a, b, lambda c, x, y: pl.when(c).then(x).otherwise(y))
    return expr


def _group_totals(frame: pl.DataFrame, sums: list[str], maxes: list[str]) -> pl.DataFrame:
    """Per unit of ``frame`` (sorted by unit; at most two rows per unit): sums and maxima.

    A unit's two rows (its total so far and a release's losses) are added with `add_up`
    (symmetric: the same double in either order); nulls count 0.0.
    """
    g = frame.group_by("unit", maintain_order=True).agg(
        pl.len().alias("__n"),
        *[pl.col(c).fill_null(0.0).min().alias(f"__lo:{c}") for c in sums],
        *[pl.col(c).fill_null(0.0).max().alias(c) for c in [*sums, *maxes]])
    if bool((g["__n"] > 2).any()):  # pragma: no cover - ids are unique per release
        raise AssertionError("a ledger merge saw a unit more than twice")
    return g.select("unit", *[
        pl.when(pl.col("__n") > 1).then(_add_up_expr(pl.col(f"__lo:{c}"), pl.col(c)))
        .otherwise(pl.col(c)).alias(c) for c in sums], *maxes)


def id_kind(dtype: Any) -> str:
    """The kind of a unit id's Polars dtype: ``"integer"``, ``"text"`` or ``"other"``.

    Ids of one kind are one id across a session's releases (`common_ids`): integers of any
    width, and text whether the column is String, Categorical or Enum.

    Example:
        >>> id_kind(pl.Int32), id_kind(pl.Categorical()), id_kind(pl.Float64)
        ('integer', 'text', 'other')
    """
    if dtype.is_integer():
        return "integer"
    if dtype == pl.String or isinstance(dtype, (pl.Categorical, pl.Enum)):
        return "text"
    return "other"


def common_ids(old: pl.Series, new: Any) -> tuple[pl.Series, Any]:
    """Unit ids of two releases made comparable (one id, one account), or refused.

    Text ids (String, Categorical, Enum) are compared as text and integer ids of any width
    as integers (Polars' join widens them), as a lifetime ledger keys them; ids of other
    kinds (text against numbers, floats against integers) are refused: the session could
    not tell whether ``"7"`` and ``7`` are one unit. Decided from the dtypes alone.

    Example:
        >>> a, b = common_ids(pl.Series(["1"]), pl.Series(["1"], dtype=pl.Categorical))
        >>> a.dtype, b.dtype
        (String, String)
    """
    if not isinstance(new, pl.Series) or old.dtype == new.dtype or pl.Null in (
            old.dtype, new.dtype) or (id_kind(old.dtype) == id_kind(new.dtype) == "integer"):
        return old, new
    if id_kind(old.dtype) == id_kind(new.dtype) == "text":
        return old.cast(pl.String), new.cast(pl.String)
    raise ColumnTypeError(
        f"the unit column's ids are {new.dtype} in this release and {old.dtype} in an earlier "
        "release of the session; a session matches units by id across releases, so their "
        "kinds must agree (integers of any width, or text: String, Categorical or Enum). "
        "Nothing was drawn or recorded.\nHint: cast the unit column to one type (e.g. Int64 "
        "or String) in every frame the session releases.")


class UnitLedger:
    """Per-unit running totals for unit mode: a Polars table keyed by unit id.

    Example:
        >>> led = UnitLedger()
        >>> led.add(pl.Series(["a", "b"]), {"rho": np.array([0.5, 1.0])}, {})
        >>> led.add(pl.Series(["b"]), {"rho": np.array([1.0])}, {})
        >>> led.lookup(pl.Series(["b", "z"]), ["rho"])["rho"].tolist()
        [2.0, 0.0]
    """

    def __init__(self) -> None:
        """An empty ledger."""
        self.table: pl.DataFrame | None = None

    def lookup(self, units: Any, cols: list[str]) -> dict[str, np.ndarray]:
        """Current totals of ``cols`` for ``units`` (0 where never charged).

        Example:
            >>> UnitLedger().lookup(pl.Series([1]), ["rho"])["rho"].tolist()
            [0.0]
        """
        n = len(units)
        have = [c for c in cols if self.table is not None and c in self.table.columns]
        out = {c: np.zeros(n) for c in cols if c not in have}
        if have:
            assert self.table is not None
            pos = sorted_positions_or_misses(self.table["unit"], units)
            if pos is not None:  # both sorted by unit (unit mode): a merge join, no hash
                at, hit = pos
                for c in have:
                    if not hit.any():  # (an empty table too: nothing to take from)
                        out[c] = np.zeros(n)
                        continue
                    v = self.table[c].fill_null(0.0).to_numpy().take(at)
                    v[~hit] = 0.0
                    out[c] = v
                return out
            t_unit, units = common_ids(self.table["unit"], units)
            got = pl.DataFrame({"unit": units}).join(
                self.table.select("unit", *have).with_columns(t_unit), on="unit", how="left",
                nulls_equal=True, maintain_order="left")
            out |= {c: got[c].fill_null(0.0).to_numpy() for c in have}
        return out

    def add(self, units: Any, sums: dict[str, np.ndarray], maxes: dict[str, np.ndarray]) -> None:
        """Add ``sums`` and take the maximum with ``maxes``, per unit (table sorted by unit).

        The table is kept sorted by unit id (nulls last), so merging a query's charges is a
        linear group-by over sorted keys and the table's order never depends on the input's
        row order.

        Example:
            >>> led = UnitLedger()
            >>> led.add(pl.Series([7]), {}, {"size": np.array([2.0])})
            >>> led.table["size"].to_list()
            [2.0]
        """
        new = pl.DataFrame({"unit": units, **{k: pl.Series(k, dense(v), dtype=pl.Float64)
                                              for k, v in [*sums.items(), *maxes.items()]}})
        u = new["unit"]
        strict = u.is_sorted(nulls_last=True) and bool(
            u.slice(1).ne_missing(u.slice(0, max(len(u) - 1, 0))).all())
        if self.table is None and strict:  # already one row per unit, in order
            self.table = new
            return
        if self.table is None:
            self.table = _group_totals(new.sort("unit", nulls_last=True, maintain_order=True),
                                       list(sums), list(maxes))
            return
        if (strict and new.height == self.table.height
                and u.equals(self.table["unit"], null_equal=True)):
            # the same units in the same (sorted) order, e.g. a second release of the same
            # input: add and take maxima column by column (a merge would sort both again)
            # sums rounded up in numpy (`add_up`; zero columns and twins as in DenseLedger)
            old = {k: self.table[k].to_numpy() for k in sums if k in self.table.columns}
            added: dict[str, np.ndarray] = {}
            for k, v in sums.items():
                if k not in old:
                    added[k] = dense(v)
                    continue
                twin = _twin(added, sums, old, k)
                added[k] = (added[twin] if twin is not None
                            else add_up(old[k], v) if v.any() else old[k])
            both = self.table.hstack(new.select(*maxes).rename(lambda c: f"__new:{c}"))
            self.table = both.with_columns(
                *[pl.Series(k, v, dtype=pl.Float64) for k, v in added.items()],
                *[pl.max_horizontal(k, f"__new:{k}") if k in self.table.columns
                  else pl.col(f"__new:{k}").alias(k) for k in maxes]).drop(
                [f"__new:{k}" for k in maxes])
            return
        t_unit, u = common_ids(self.table["unit"], u)
        if t_unit.dtype != self.table["unit"].dtype:  # text ids: kept as String from now on
            self.table = self.table.with_columns(t_unit)
        new = new.with_columns(u)
        if (strict and u.dtype == pl.Int64 and t_unit.dtype == pl.Int64
                and not u.null_count() and not t_unit.null_count()):
            # two sorted tables of distinct integer ids (e.g. queries charging different
            # units): a merge by binary search, the same doubles as the group-by below
            self.table = _merge_sorted(self.table, new, set(maxes))
            return
        cols = set(self.table.columns) | set(new.columns)
        both = pl.concat([self.table, new], how="diagonal_relaxed")
        sum_cols = [c for c in both.columns if c != "unit" and not _is_max_col(c)]
        max_cols = [c for c in both.columns if _is_max_col(c)]
        assert set(sum_cols) | set(max_cols) | {"unit"} == cols
        self.table = _group_totals(both.sort("unit", nulls_last=True, maintain_order=True),
                                   sum_cols, max_cols)

    def frame(self) -> pl.DataFrame:
        """The table (unit first).

        Example:
            >>> UnitLedger().frame().columns
            ['unit']
        """
        if self.table is None:
            return pl.DataFrame({"unit": []})
        return self.table


def loss_components(losses: UnitLosses, zero_view: bool = False) -> dict[str, np.ndarray]:
    """The loss components one query adds to its units' running totals.

    ``rho``, ``epsilon`` and ``size`` as recorded; ``rho_z`` / ``rho_g`` the ρ of zCDP and of
    Gaussian-shift releases; ``eps_a`` / ``delta_a`` the approximate-DP parts (zero for other
    releases). The ledger sums them per unit (``size``: the maximum).

    Args:
        losses: One query's admitted per-unit losses.
        zero_view: The zero components as a read-only view of one 0.0
            (`numpy.broadcast_to`), for a reader that only reads them (`DenseLedger.add`,
            which adds nothing for them): no array of every unit, whose pages a check for
            nonzero values would fault in one by one.

    Returns:
        Component name → float64 array aligned with ``losses.units``.

    Example:
        >>> u = UnitLosses(np.array([0]), np.array([0.5]), np.array([np.inf]), np.array([2.0]))
        >>> float(loss_components(u)["rho_z"][0])
        0.5
    """
    n = losses.n
    zero = np.broadcast_to(np.float64(0.0), (n,)) if zero_view else np.zeros(n)
    approx = losses.guarantee == "approx"
    return {
        "rho": np.asarray(losses.rho, dtype=np.float64),
        "epsilon": np.asarray(losses.epsilon, dtype=np.float64),
        "size": np.asarray(losses.size, dtype=np.float64),
        "rho_z": zero if approx else np.asarray(losses.rho, dtype=np.float64),
        "rho_g": np.asarray(losses.rho, dtype=np.float64) if losses.guarantee == "gaussian"
        else zero,
        "eps_a": np.asarray(losses.eps_a, dtype=np.float64) if approx else zero,
        "delta_a": np.asarray(losses.delta_a, dtype=np.float64) if approx else zero,
    }


class ReportSource(Protocol):
    """The engine's side of a `ReplayLedger`: the per-record report, recomputed from the data.

    A replay ledger keeps the releases' definitions; the engine that ran them (streaming
    Polars, `tabdp.frame._stream`) computes the report from the input. The ledger holds one
    `ReportSource` (given with each release, `ReplayLedger.install`) and asks it for the
    report: nothing is planted on the ledger from outside.

    Example:
        >>> class Empty:
        ...     def replay(self, ledger, session, delta): return pl.LazyFrame()
        ...     def collect(self, ledger, session, delta): return pl.DataFrame()
        ...     def sink(self, ledger, session, delta, path, rename=None): pass
        ...     def summary(self, ledger, session, qs): return {"units": 0, "rho_max": None}
        >>> led = ReplayLedger()
        >>> led.install("program", None, Empty())
        >>> from tabdp.privacy.session import Session
        >>> led.rho_summary(Session(), [0.5])
        {'units': 0, 'rho_max': None}
    """

    def replay(self, ledger: ReplayLedger, session: Session,
               delta: float | None) -> pl.LazyFrame:
        """The CONFIDENTIAL per-record report as a lazy plan over the session's rows."""
        ...  # pragma: no cover - protocol

    def collect(self, ledger: ReplayLedger, session: Session,
                delta: float | None) -> pl.DataFrame:
        """The report, collected, after checking the input still holds the releases' rows."""
        ...  # pragma: no cover - protocol

    def sink(self, ledger: ReplayLedger, session: Session, delta: float | None,
             path: str | PathLike[str], rename: dict[str, str] | None = None) -> None:
        """Write the report to Parquet (checked like `collect`), never whole in memory."""
        ...  # pragma: no cover - protocol

    def summary(self, ledger: ReplayLedger, session: Session,
                qs: list[float]) -> dict[str, int | float | None]:
        """CONFIDENTIAL statistics of the records' total ρ (units, max, quantiles ``qs``)."""
        ...  # pragma: no cover - protocol


class ReportSpill(Protocol):
    """CONFIDENTIAL report rows a releases' pass wrote to disk (the engine's), kept for the report.

    The ledger keeps one at a time and closes the one it replaces; the engine reads it
    (`tabdp.frame._stream`'s ``_Spill``).

    Example:
        >>> class Spill:
        ...     def close(self): print("removed")
        >>> led = ReplayLedger()
        >>> led.keep_spill(Spill())
        >>> led.spill.close()
        removed
    """

    def close(self) -> None:
        """Remove the rows written (idempotent)."""
        ...  # pragma: no cover - protocol


class ReplayLedger:
    """Row mode without per-row state (``Session(streaming=True)``): a ledger of definitions.

    In row mode a record's loss in a release is a function of its own values and the release's
    public definition (key set, rules, mechanism), and whether the budget admitted it depends
    only on its earlier losses. So the ledger keeps each release's definition (a *program*,
    built by `tabdp.frame._stream`) and recomputes every record's running totals from the
    data whenever they are needed: at the next release (for the budget filter) and for the
    per-record report. Its memory does not grow with the number of rows; the session's
    fingerprints guarantee that every release reads the same rows.

    Attributes:
        programs: The releases' definitions, in release order.
        source: The lazy input of the last release (the rows the report is computed from).
        reports: The engine's `ReportSource` (``None`` before the first release).

    Example:
        >>> from tabdp.privacy.session import Session
        >>> led = ReplayLedger()
        >>> led.per_record(Session(), None).columns
        ['row', 'rho', 'epsilon', 'size']
    """

    engine = "polars"
    #: The report is recomputed from the data (`tabdp.Report` asks the ledger for it).
    reports_itself = True

    def __init__(self) -> None:
        """An empty ledger."""
        self.programs: list[Any] = []
        self.source: Any = None
        self.reports: ReportSource | None = None
        #: (file, releases) of the last per-record report written (reused by ``rho_summary``)
        self.written: tuple[Path, int] | None = None
        #: the report rows a releases' pass wrote (the engine's; used once by ``sink``)
        self.spill: ReportSpill | None = None
        #: The δ of the report the caller declared it writes after the next releases
        #: (``expect_report``), as a 1-tuple; None: none declared
        self.report_delta: tuple[float | None] | None = None
        #: CONFIDENTIAL: the positions in ``programs`` of the releases whose own pass found
        #: every row it read in a cell of the key set (the engine's; its report then needs no
        #: lookup of the keys: the rows it replays are the same rows, bound by the session)
        self.whole: set[int] = set()

    def install(self, program: Any, source: Any, reports: ReportSource) -> None:
        """Record a release: its definition, the input the report is computed from, the engine.

        Args:
            program: The release's public definition (the engine's program).
            source: The release's lazy input (the rows the report is computed from).
            reports: The engine's report source.

        Example:
            >>> led = ReplayLedger()
            >>> led.install("p", None, None)  # an engine passes its ReportSource
            >>> led.programs
            ['p']
        """
        self.programs.append(program)
        self.source = source
        self.reports = reports

    def keep_spill(self, spill: ReportSpill | None) -> None:
        """Keep the report rows a releases' pass wrote (the engine's; ``None``: none kept).

        Example:
            >>> led = ReplayLedger()
            >>> led.keep_spill(None)
            >>> led.spill is None
            True
        """
        self.spill = spill

    def expect_report(self, delta: float | None) -> None:
        """Declare that ``sink`` will be asked for the report at ``delta`` after the next releases.

        The releases' pass then keeps the report's own columns as it replays them (ε at
        ``delta`` computed there, not the four components it comes from), and ``sink`` at
        that δ reads and encodes them as they are (after the same check that the input
        still holds the rows the releases read). A report at another δ is recomputed from
        the input, as any report after further releases is.

        Args:
            delta: The δ of the report's ``epsilon_delta`` column, in (0, 1) (None: no such
                column).

        Raises:
            InvalidParameterError: ``delta`` is not a number in (0, 1) (checked here, as
                `tabdp.Report` checks it, not in the releases' pass, which computes ε at it).

        Example:
            >>> led = ReplayLedger()
            >>> led.expect_report(1e-9)
            >>> led.report_delta
            (1e-09,)
        """
        from tabdp.privacy.conversions import check_dp_delta

        # normalised as `tabdp.Report` normalises its δ, which `sink` compares with this one
        self.report_delta = (None if delta is None
                             else check_dp_delta(delta, "ReplayLedger.expect_report"),)

    def note_written(self, path: Path, releases: int) -> None:
        """Note the per-record report file the engine wrote after ``releases`` releases.

        Example:
            >>> from pathlib import Path
            >>> led = ReplayLedger()
            >>> led.note_written(Path("r.parquet"), 0)
            >>> led.written[0].name, led.written[1]
            ('r.parquet', 0)
        """
        self.written = (path, releases)

    def lookup(self, units: Any, cols: list[str]) -> dict[str, np.ndarray]:
        """Totals of ``cols`` for ``units``: zeros before any release (nothing is charged).

        After a release the totals exist only as a recomputation from the data, which a
        streaming release performs itself (it passes ``lookup=`` to ``Session.admit``).

        Raises:
            InvalidParameterError: The session has releases.

        Example:
            >>> ReplayLedger().lookup(np.array([0, 1]), ["rho"])["rho"].tolist()
            [0.0, 0.0]
        """
        if self.programs:
            raise InvalidParameterError(
                "a streaming session (Session(streaming=True)) holds no per-row totals: they "
                "are recomputed from the data by each release.\nHint: pass lookup= to "
                "Session.admit, or use Session(streaming=False) for an in-memory ledger.")
        n = len(units)
        return {c: np.zeros(n) for c in cols}

    def per_record(self, session: Session, delta: float | None) -> pl.DataFrame:
        """CONFIDENTIAL per-record report, recomputed from the data (see ``Report.per_record``).

        Example:
            >>> from tabdp.privacy.session import Session
            >>> ReplayLedger().per_record(Session(), 1e-9).columns[-1]
            'epsilon_delta'
        """
        if not self.programs or self.reports is None:
            cols = ["row", "rho", "epsilon", "size", *(["epsilon_delta"] if delta else [])]
            return pl.DataFrame({c: pl.Series(c, [], dtype=pl.Int64 if c == "row"
                                              else pl.Float64) for c in cols})
        return self.reports.collect(self, session, delta)

    def write_per_record(self, session: Session, delta: float | None,
                         path: str | PathLike[str],
                         rename: dict[str, str] | None = None) -> None:
        """Write the CONFIDENTIAL per-record report to Parquet, batch by batch from the data.

        Example:
            >>> import tempfile, pathlib
            >>> from tabdp.privacy.session import Session
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.parquet"
            >>> ReplayLedger().write_per_record(Session(), None, p)
            >>> pl.read_parquet(p).columns
            ['row', 'rho', 'epsilon', 'size']
        """
        if self.programs and self.reports is not None:
            self.reports.sink(self, session, delta, path, rename)
            return
        frame = self.per_record(session, delta)
        frame.rename(rename or {}).write_parquet(Path(path), **PER_RECORD_PARQUET)

    def rho_summary(self, session: Session, qs: list[float]
                    ) -> dict[str, int | float | None]:
        """CONFIDENTIAL statistics of the records' total ρ (units, max, quantiles).

        Example:
            >>> from tabdp.privacy.session import Session
            >>> ReplayLedger().rho_summary(Session(), [0.5])["units"]
            0
        """
        if not self.programs or self.reports is None:
            return {"units": 0, "rho_max": None}
        return dict(self.reports.summary(self, session, qs))


def _is_max_col(c: str) -> bool:
    return c == "size" or c.startswith("size@")
