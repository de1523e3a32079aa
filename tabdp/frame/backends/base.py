"""What every engine provides to the one release pipeline (`tabdp.frame.pipeline`).

A release is planned once (`tabdp.frame.pipeline.plan`: arguments, schema, key set, rules; no
data read) and executed by `tabdp.frame.pipeline.execute` over a `Backend`. The backend runs the
part of the sequence that touches records, in whatever way its engine runs best (a snapshot and
per-unit arrays in memory, one lazy plan per release when streaming, Spark jobs): snapshot,
strict checks, binding rows, cells, contributions, charges, the individual filter
(`tabdp.privacy.filter.individual_filter`), exact totals and the cell audit; for a median or
quantile, the same up to the filter and then each cell's exact quantile and smooth sensitivity
(`QuantileData`). It hands back an
`Aggregated`: the cell totals on the key set and small confidential summaries, nothing as long
as the input. The pipeline then draws the noise (numpy, on the aggregated table), writes the
query's record, asks the backend to add it to the session's ledger (which lives in the
backend's engine) and to return the table in the caller's library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import polars as pl

from tabdp.privacy.ledger import QueryRecord, UnitLosses

if TYPE_CHECKING:
    import numpy as np

    from tabdp.frame._quantiles import PlannedQuantile
    from tabdp.frame._stream import Planned

__all__ = ["Aggregated", "Backend", "QuantileData"]


@dataclass
class Aggregated:
    """What an engine hands back from one release's pass over the records.

    Attributes:
        full: The exact cell totals on the key set: ``__cell`` (key index) or one row per key
            in key order, each released measure and ``__rows`` (nulls where no record is).
        key_dtypes: The output dtypes of the key columns.
        rows_read: CONFIDENTIAL: rows read.
        rows_outside: CONFIDENTIAL: rows outside the key set.
        cells_outside: CONFIDENTIAL: distinct cells with data outside the key set (0 with no
            grouping).
        rows_released: CONFIDENTIAL: rows in released cells (before the filter).
        units_left_out: CONFIDENTIAL: units the individual filter left out.
        left_out: CONFIDENTIAL: what the filter left out (`tabdp.frame._engine.left_out_counts`).
        cells_dropped: CONFIDENTIAL: unit-cells dropped by ``max_cells``.
        rule_counts: CONFIDENTIAL: the data rules' counts (`tabdp.frame._engine._rule_counts`).
        cells: CONFIDENTIAL: the per-cell audit (worst loss per cell), or ``None``.
        losses: The query's admitted per-unit losses, where the engine holds them in memory
            (``None`` when its ledger keeps them in the engine).
        state: The engine's own state for `Backend.record` (charges and filter decisions,
            persisted tables...).

    Example:
        >>> Aggregated(pl.DataFrame(), {}, 0, 0, 0, 0, 0, {}, 0, {}).rows_read
        0
    """

    full: pl.DataFrame
    key_dtypes: dict[str, Any]
    rows_read: int
    rows_outside: int
    cells_outside: int
    rows_released: int
    units_left_out: int
    left_out: dict[str, Any]
    cells_dropped: int
    rule_counts: dict[str, Any]
    cells: pl.DataFrame | None = None
    losses: UnitLosses | None = None
    state: Any = field(default=None, repr=False)


@dataclass
class QuantileData:
    """What an engine hands back from a median's or quantile's pass over the records.

    The backend runs the snapshot, the checks, the row binding, the cells, the charges and the
    individual filter, and computes each cell's exact clipped quantile and smooth sensitivity
    by `tabdp.frame._quantiles.cell_quantiles` (no noise).

    Attributes:
        truth: CONFIDENTIAL: each cell's exact clipped quantile, in key order.
        ss: CONFIDENTIAL: each cell's floored smooth sensitivity.
        key_dtypes: The output dtypes of the key columns (``None``: the key set's own).
        rows_read: CONFIDENTIAL: rows read.
        rows_outside: CONFIDENTIAL: rows outside the key set.
        rows_released: CONFIDENTIAL: rows in released cells (before the filter), as a sum's
            (`Aggregated.rows_released`): the rows the nulls rule keeps whose cell is in the
            key set.
        units_left_out: CONFIDENTIAL: units the individual filter left out.
        rows_left_out: CONFIDENTIAL: rows (values) in released cells of the units the filter
            left out (a sum's ``rows_left_out_by_budget``); ``rows_released - rows_left_out``
            values are the quantiles' input.
        clipped: CONFIDENTIAL: values outside the bounds.
        missing: CONFIDENTIAL: missing values (replaced or dropped by the nulls rule).
        losses: The admitted per-unit losses, where the engine holds them in memory.
        state: The engine's own state for `Backend.record_quantile`.

    Example:
        >>> import numpy as np
        >>> QuantileData(np.zeros(1), np.ones(1), None, 0, 0, 0, 0, 0, 0, 0).rows_read
        0
    """

    truth: np.ndarray
    ss: np.ndarray
    key_dtypes: dict[str, Any] | None
    rows_read: int
    rows_outside: int
    rows_released: int
    units_left_out: int
    rows_left_out: int
    clipped: int
    missing: int
    losses: UnitLosses | None = None
    state: Any = field(default=None, repr=False)


@runtime_checkable
class Backend(Protocol):
    """An engine behind the one release pipeline.

    Attributes:
        engine: ``"memory"``, ``"streaming"`` or ``"spark"`` (`tabdp.frame.backends.Engine`).

    Example:
        >>> from tabdp.frame.backends.polars import MemoryBackend
        >>> isinstance(MemoryBackend(), Backend)
        True
    """

    engine: str

    def check(self, rel: Planned | PlannedQuantile) -> None:
        """The engine's own refusals of a release from the schema and public keys alone.

        Called by the pipeline before the release is handed over (`aggregate`,
        `quantile_data`): whatever the engine refuses without reading data is refused here,
        so an author sees it as itself, not as the generic failure of a read.
        """
        ...  # pragma: no cover - protocol

    def aggregate(self, rel: Planned) -> Aggregated:
        """Read the records once: snapshot, checks, cells, charges, filter, totals, audit."""
        ...  # pragma: no cover - protocol

    def record(self, rel: Planned, record: QueryRecord, agg: Aggregated) -> None:
        """Add the release to the session's ledger (in the engine) and records."""
        ...  # pragma: no cover - protocol

    def quantile_data(self, rel: PlannedQuantile) -> QuantileData:
        """A median's pass: snapshot, checks, cells, charges, filter, per-cell quantiles."""
        ...  # pragma: no cover - protocol

    def record_quantile(self, rel: PlannedQuantile, record: QueryRecord,
                        data: QuantileData) -> None:
        """Add a median's or quantile's release to the session's ledger and records."""
        ...  # pragma: no cover - protocol

    def output(self, rel: Planned | PlannedQuantile, table: pl.DataFrame) -> Any:
        """The released table in the caller's library."""
        ...  # pragma: no cover - protocol

    def close(self, agg: Aggregated | None) -> None:
        """Free what `aggregate` held in the engine (after `record`, or on a failure)."""
        ...  # pragma: no cover - protocol
