"""The Polars backends of the release pipeline: in memory (pandas, Polars) and streaming.

* `MemoryBackend`: one snapshot of the input per release (shared by a later release of the same
  frame with the same grouping), per-unit arrays for the charges and the individual filter, the
  session's in-memory ledger (`tabdp.privacy.ledger.DenseLedger` / ``UnitLedger``).
* `StreamingBackend`: row mode without per-row state: each release one lazy plan over the input
  that replays the session's earlier releases (`tabdp.frame._stream`), the ledger the releases'
  public definitions (`tabdp.privacy.ledger.ReplayLedger`).

Both implement `tabdp.frame.backends.base.Backend`; the sequence around them (noise, the
query's record, the one-off session) is `tabdp.frame.pipeline.execute`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import polars as pl

from tabdp._numeric import small_pages
from tabdp._reserved import RESERVED
from tabdp.frame import binding
from tabdp.frame._engine import (
    _CELL,
    _ROWS,
    FP,
    ROW_ID,
    UnitOrder,
    _attach_cells,
    _bound_contributions,
    _cell_stats,
    _cells,
    _charges,
    _fingerprint,
    _fp_columns,
    _missing_unit,
    _output_dtypes,
    _rule_counts,
    _Rules,
    _Snapshot,
    _sort_units,
    _strict_checks,
    _take_snapshot,
    _unit_snapshot,
    cell_stats_keys,
    cell_worst,
    cells_of,
    left_out_counts,
    per_unit,
    row_ids,
)
from tabdp.frame._output import to_native
from tabdp.frame._quantiles import PlannedQuantile, cell_quantiles
from tabdp.frame._stream import (
    _P,
    InBatch,
    Planned,
    _fingerprinted,
    _install,
    _Offload,
    _read_input,
    _release_query,
    _replayed,
    _require_bound,
    _Spill,
    _streamed,
    _unfiltered,
    _with_row_ids,
    cell_sets,
    count_from_kept,
    keep_aggregation,
    pass_fingerprints,
    release_queries,
    stream_aggregate,
    streaming_quantile_data,
)
from tabdp.frame.backends.base import Aggregated, QuantileData
from tabdp.frame.keys import KeySet
from tabdp.privacy.budget import ROWS_CURRENCY
from tabdp.privacy.ledger import Charges, QueryRecord, ReplayLedger

__all__ = ["MemoryBackend", "StreamingBackend", "mark_members", "unit_partitions"]

#: Unit mode: peak bytes per input row of one pass (the (unit, cell) group-by, the charges
#: and the work around them): about 225 measured at 10M rows once the (unit, cell) table is no
#: longer sorted (docs/performance.md, "Third pass"), with a margin.
BYTES_PER_ROW = 250
#: Unit mode: the share of the available memory one pass may take before the units are
#: read in partitions (the rest: the ledger, the records and everything else on the machine).
PASS_SHARE = 0.25


def _available_bytes() -> int | None:
    """The memory available to new allocations (Linux ``MemAvailable``), or ``None``."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def mark_members(lf: pl.LazyFrame, keys: KeySet, col: str) -> pl.LazyFrame:
    """Add ``col``: ``"all"`` on the rows a release by ``keys`` puts in a cell, else null.

    The engine's own cell matching (the releases' ``_cells``: text as text, other keys in a
    common dtype chosen from the two schemas, a key or value that does not convert exactly in
    no cell, nulls equal), so a row is marked exactly when a release of the key set counts
    it. Decided from the schemas and the public keys alone; the input's row order is kept.

    Args:
        lf: The input.
        keys: The public key set (its columns are the keys compared).
        col: The column to add (replaced if the input has one).

    Returns:
        ``lf`` with ``col`` (String).

    Raises:
        ColumnTypeError: Key dtypes that cannot be compared with the data's (as a release).

    Example:
        >>> lf = pl.LazyFrame({"c": ["a", "b", None]})
        >>> ks = KeySet.from_dict(c=["a"])
        >>> mark_members(lf, ks, "in").collect()["in"].to_list()
        ['all', None, None]
    """
    tmp = f"{RESERVED}_member_cell"
    lf = lf.drop(col, strict=False)
    marked = _cells(lf, lf.collect_schema(), keys, list(keys.columns), tmp, ordered=True)
    assert isinstance(marked, pl.LazyFrame)
    return marked.with_columns(
        pl.when(pl.col(tmp).is_not_null()).then(pl.lit("all", dtype=pl.String))
        .otherwise(pl.lit(None, dtype=pl.String)).alias(col)).drop(tmp)


def unit_partitions(op: Any, sess: Any) -> int:
    """Unit mode: the passes over the input of one release (each over one part of the units).

    The session's ``unit_partitions``, else 1 unless the input's rows at `BYTES_PER_ROW` each
    would take more than `PASS_SHARE` of the memory available (then enough parts for each to
    fit, at most 64). The number changes time and memory only, never a table, loss or report.

    Args:
        op: The opened release (``op.native``, ``op.lf``).
        sess: The session.

    Returns:
        The number of partitions (≥ 1).

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(unit="u", unit_partitions=3)
        >>> unit_partitions(None, s)
        3
    """
    if sess.unit_partitions is not None:
        return int(sess.unit_partitions)
    avail = _available_bytes()
    if avail is None:
        return 1
    native = op.native
    if isinstance(native, pl.DataFrame) or hasattr(native, "shape"):
        rows = int(native.shape[0])
    else:  # a LazyFrame: Parquet and IPC scans count their rows from metadata; other plans
        # are evaluated once per session (the count is kept with the frame)
        state = binding.of(sess)
        known = state.rows_estimate
        if known is not None and known[0] is native:
            rows = known[1]
        else:
            rows = int(op.lf.select(pl.len()).collect(engine="streaming").item())
            state.rows_estimate = (native, rows)
    need = rows * BYTES_PER_ROW
    return max(1, min(64, -(-need // max(int(avail * PASS_SHARE), 1))))


class _Part(NamedTuple):
    """One pass's share of a release (all of it, or one partition of the units)."""

    charges: Charges | None         # moved out by `MemoryBackend.aggregate`
    admitted: dict[str, np.ndarray] | None
    totals: pl.DataFrame            # __cell, measures, __rows: exact sums of admitted rows
    before: dict[str, Any]          # measure -> exact total before the filter
    after: dict[str, Any]           # measure -> exact total after it
    rows_left: int
    rows_outside: int
    outside_keys: pl.DataFrame | None
    rows_released: int
    units_left_out: int
    cells_dropped: int
    cells: pl.DataFrame | None      # unit mode with keys: a cell_worst partial


def _joined_charges(charges: list[Charges], admitted: list[dict[str, np.ndarray]]
                    ) -> tuple[Charges, dict[str, np.ndarray]]:
    """The partitions' charges and decisions as one pass holds them: sorted by unit, nulls last.

    Each partition's units are sorted and distinct from the others', and each unit's values are
    computed from its own rows only, so sorting the concatenation gives one pass's arrays. The
    lists are emptied on the way (each part is freed once copied).
    """
    if len(charges) == 1:
        return charges.pop(), admitted.pop()
    first = charges[0]
    units = pl.concat([c.units for c in charges], rechunk=True)
    order = units.arg_sort(nulls_last=True).to_numpy()
    units = units.gather(order)
    fields = {k: list(getattr(first, k)) for k in ("rho", "epsilon", "size", "eps_a", "delta_a")
              if getattr(first, k) is not None}
    out: dict[str, dict[str, np.ndarray]] = {k: {} for k in fields}
    for k, curs in fields.items():
        for cur in curs:
            out[k][cur] = np.concatenate([getattr(c, k)[cur] for c in charges])[order]
            for c in charges:  # free the part's array
                del getattr(c, k)[cur]
    guarantee = first.guarantee
    charges.clear()
    ok = {cur: np.concatenate([a[cur] for a in admitted])[order] for cur in admitted[0]}
    admitted.clear()
    joined = Charges(units, out["rho"], out["epsilon"], out["size"], guarantee,
                     out.get("eps_a"), out.get("delta_a"))
    return joined, ok


def _joined_cells(parts: list[pl.DataFrame], by: list[str], keys: Any,
                  dtypes: dict[str, Any]) -> pl.DataFrame:
    """Unit mode: the per-cell audit from the partitions' partials (`cell_stats_keys`)."""
    if by:
        return cell_stats_keys(parts, by, keys, dtypes)
    have = [p for p in parts if p.height]
    if not have:
        return parts[0]
    return pl.concat(have).select(pl.col("worst_rho").max(), pl.col("worst_size").max(),
                                  pl.col("units").sum())


class _PolarsOutput:
    """The table in the caller's library (pandas in, pandas out; Polars otherwise)."""

    def check(self, rel: Planned | PlannedQuantile) -> None:
        """Nothing beyond the pipeline's own checks (Polars' cell matching is the pipeline's).

        Args:
            rel: The planned release.
        """

    def output(self, rel: Planned | PlannedQuantile, table: pl.DataFrame) -> Any:
        """The released table in the caller's library.

        Args:
            rel: The planned release.
            table: The released table (Polars).

        Returns:
            A pandas or Polars DataFrame.
        """
        op = rel.op
        return to_native(table, op.native, op.backend, rel.by)

    def close(self, agg: Aggregated | None) -> None:
        """Nothing is held outside Python's memory.

        Args:
            agg: Ignored.
        """


def _whole_totals(memo: dict[str, pl.DataFrame] | None,
                  cols: list[str]) -> pl.DataFrame | None:
    """Per-cell totals of ``cols`` kept by an earlier release of the same snapshot, or None."""
    for have in (memo or {}).values():
        if set(cols) <= set(have.columns):
            return have.select(_CELL, *cols)
    return None


#: In-memory releases: when at most 1 row in this many of a pass's (unit, cell) rows was left
#: out by the individual filter, and the rows are the snapshot's as read, the cell totals are
#: the totals of the rows as read (computed once per snapshot and kept) minus the left-out
#: rows' (`_left_out`, `_minus`), not a second group-by of the rows with the left-out ones
#: zeroed. Both are exact integer sums (measures in fixed point, Int128; rows, Int64), so the
#: tables are the same bit for bit either way; only the time differs.
FEW_LEFT_OUT = 8
#: Prefix of the left-out totals' columns while they are subtracted (`_minus`).
_LOST = f"{RESERVED}_lost"


def _left_out(gone: pl.DataFrame, outs: list[pl.Series], cols: list[list[str]],
              value_cols: list[str]) -> pl.DataFrame:
    """Per-cell exact totals of what the individual filter took out of ``value_cols``.

    ``gone`` holds the rows some currency left out; ``outs[i]`` (aligned with ``gone``) marks
    the rows currency ``i`` left out, and ``cols[i]`` the columns it zeroes there. A column
    no currency zeroes (a sum's rows) loses nothing and is not in the result. Measures (every
    column but ``_ROWS``) are summed as Int128 (`exact_sum`).

    Example:
        >>> g = pl.DataFrame({"__tabdp_cell": [0, 0, 1], "x": [5, 7, -2], "r": [1, 2, 1]})
        >>> out = _left_out(g, [pl.Series([True, False, True])], [["x"]], ["x", "r"])
        >>> out.sort("__tabdp_cell").rows()
        [(0, 5), (1, -2)]
    """
    exprs = []
    for c in value_cols:
        masks = [o for o, cs in zip(outs, cols, strict=True) if c in cs]
        if not masks:
            continue
        mask = masks[0]
        for m in masks[1:]:
            mask = mask | m
        exprs.append(pl.when(mask).then(pl.col(c)).otherwise(pl.lit(0).cast(gone.schema[c]))
                     .alias(c))
    return gone.select(_CELL, *exprs).group_by(_CELL).agg(
        exact_sum(c) for c in value_cols if c in {e.meta.output_name() for e in exprs})


def exact_sum(col: str) -> pl.Expr:
    """The exact sum of a snapshot's column: a measure's as Int128, ``_ROWS`` as it is (Int64).

    A row-mode snapshot holds a measure's fixed-point values as Int64 when they fit
    (`tabdp.frame._engine._snapshot_plan`), Int128 otherwise: summed as Int128 either way (128
    bits hold any sum of 2**63 values below 2**64), so a total and its dtype are the same
    whatever width the snapshot gave the column.

    Example:
        >>> df = pl.DataFrame({"x": pl.Series([2**62, 2**62, 2**62], dtype=pl.Int64)})
        >>> df.select(exact_sum("x")).item() == 3 * 2**62, df.select(exact_sum("x")).dtypes
        (True, [Int128])
    """
    return pl.col(col).sum() if col == _ROWS else pl.col(col).cast(pl.Int128).sum()


def _minus(totals: pl.DataFrame, lost: pl.DataFrame, value_cols: list[str]) -> pl.DataFrame:
    """``totals`` (per cell) minus ``lost`` (per cell, some of the columns): exact integers.

    Example:
        >>> t = pl.DataFrame({"__tabdp_cell": [0, 1], "x": [12, 3], "r": [3, 1]})
        >>> lost = pl.DataFrame({"__tabdp_cell": [1], "x": [3]})
        >>> _minus(t, lost, ["x", "r"]).rows()
        [(0, 12, 3), (1, 0, 1)]
    """
    # the left-out totals under reserved names while joined (no measure starts with them)
    sub = {c: f"{_LOST}{i}" for i, c in enumerate(lost.columns) if c != _CELL}
    lost = lost.select(pl.col(_CELL).cast(totals.schema[_CELL]),
                       *[pl.col(c).alias(n) for c, n in sub.items()])
    return totals.join(lost, on=_CELL, how="left", maintain_order="left").select(
        _CELL, *[(pl.col(c) - pl.col(sub[c]).fill_null(0)).alias(c) if c in sub
                 else pl.col(c) for c in value_cols])


def _exact_sums(frame: pl.DataFrame, measures: list[str]) -> dict[str, Any]:
    """Each measure's exact total over ``frame`` (`exact_sum`), as Python integers.

    A lazy streaming plan: a 64-bit column is widened batch by batch, not copied whole as
    Int128 (an eager cast of 10M rows writes 160 MB).

    Example:
        >>> _exact_sums(pl.DataFrame({"x": [2**62, 2**62]}), ["x"]) == {"x": 2**63}
        True
    """
    if not measures:
        return {}
    return frame.lazy().select(exact_sum(m) for m in measures).collect(
        engine="streaming").row(0, named=True)


class MemoryBackend(_PolarsOutput):
    """The in-memory Polars engine: a snapshot, per-unit arrays, the in-memory ledger.

    Example:
        >>> MemoryBackend().engine
        'memory'
    """

    engine = "memory"

    def aggregate(self, rel: Planned) -> Aggregated:
        """Snapshot, checks, cells, charges, the individual filter, exact totals and the audit.

        NumPy's per-row arrays are allocated without huge pages (`tabdp._numeric.small_pages`).

        Args:
            rel: The planned release.

        Returns:
            The cell totals and the confidential summaries; ``state`` holds the charges and
            the filter's decisions for `record`.
        """
        with small_pages():
            return self._aggregate(rel)

    def _aggregate(self, rel: Planned) -> Aggregated:
        op, pre, kind, keys, rules = rel.op, rel.pre, rel.kind, rel.keys, rel.rules
        measure_list, by_list, mechanism = pre.measures, pre.by, pre.mechanism
        sess, qname = op.session, op.name
        unit = sess.unit
        uid = unit if unit is not None else ROW_ID
        unit_mode = unit is not None and unit != ROW_ID
        n_parts = unit_partitions(op, sess) if unit_mode else 1
        needs_nonneg = bool(mechanism.requires_nonnegative) and kind == "sum"
        count_neg = needs_nonneg and rules.negatives == "allow"

        # 1. The input, read once (or once per partition of the units: each partition holds
        # its units complete, so their charges, the filter's decisions and their contributions
        # are those of one pass; cell totals are exact sums over the partitions).
        binding.phase(sess, qname, "reading and aggregating the input")
        parts: list[_Part] = []
        charge_parts: list[Charges] = []
        admitted_parts: list[dict[str, np.ndarray]] = []
        counts: dict[str, int] = {}
        neg_contrib: dict[str, int] = {m: 0 for m in measure_list} if count_neg else {}
        rows_read = 0
        for p in range(n_parts):
            if n_parts == 1:
                snap = _take_snapshot(op, by_list, measure_list, rules, keys)
            else:
                assert unit is not None
                snap = _unit_snapshot(op, unit, by_list, measure_list, rules, keys,
                                      part=(p, n_parts))
            rows_read += snap.rows_read
            for k, v in snap.counts.items():
                counts[k] = counts.get(k, 0) + v
            for m in neg_contrib:
                neg_contrib[m] += sum(int((d[m] < 0).sum())
                                      for d in (snap.data, snap.outside) if d is not None)
            if n_parts == 1:
                _strict_checks(counts, measure_list, unit, rules, needs_nonneg, neg_contrib)
                if unit is None:
                    binding.of(sess).bind_rows(snap.rows_read, snap.fingerprints)
            pt = self._part(rel, snap, uid, first=p == 0)
            del snap
            assert pt.charges is not None and pt.admitted is not None
            charge_parts.append(pt.charges)
            admitted_parts.append(pt.admitted)
            parts.append(pt._replace(charges=None, admitted=None))
            del pt
        if n_parts > 1:  # the same checks on the same counts, once every partition was read
            _strict_checks(counts, measure_list, unit, rules, needs_nonneg, neg_contrib)

        # 2. The partitions' charges and decisions as one pass would hold them (sorted by unit)
        charges, admitted = _joined_charges(charge_parts, admitted_parts)
        losses = charges.losses(admitted)
        value_cols = [*measure_list, _ROWS]
        n_keys = len(keys) if by_list else 1
        totals = parts[0].totals if n_parts == 1 else pl.concat(
            [pt.totals for pt in parts]).group_by(_CELL).agg(pl.col(c).sum() for c in value_cols)
        full = pl.DataFrame({_CELL: pl.int_range(n_keys, dtype=pl.Int64, eager=True)}).join(
            totals.with_columns(pl.col(_CELL).cast(pl.Int64)), on=_CELL, how="left",
            maintain_order="left")
        before = {m: sum(int(pt.before[m] or 0) for pt in parts) for m in measure_list}
        left = {m: sum(int(pt.before[m] or 0) - int(pt.after[m] or 0) for pt in parts)
                for m in measure_list}
        left_out_info = left_out_counts(kind, measure_list, rel.bits, before, left,
                                        sum(pt.rows_left for pt in parts))
        cells = None
        if sess.track_cells:
            cells = (_joined_cells([pt.cells for pt in parts if pt.cells is not None], by_list,
                                   keys, {c: op.schema[c] for c in by_list})
                     if unit_mode else parts[0].cells)
        outside_keys = [pt.outside_keys for pt in parts if pt.outside_keys is not None]
        return Aggregated(
            full=full, key_dtypes=_output_dtypes(op, sess, measure_list),
            rows_read=rows_read, rows_outside=sum(pt.rows_outside for pt in parts),
            cells_outside=(pl.concat(outside_keys).unique().height
                           if by_list and outside_keys else 0),
            rows_released=sum(pt.rows_released for pt in parts),
            units_left_out=sum(pt.units_left_out for pt in parts), left_out=left_out_info,
            cells_dropped=sum(pt.cells_dropped for pt in parts),
            rule_counts=_rule_counts(counts, measure_list, rel.nulls, rules),
            cells=cells, losses=losses, state=(charges, admitted))

    @staticmethod
    def _part(rel: Planned, snap: _Snapshot, uid: str, first: bool) -> _Part:
        """Cells, bounds, charges, the individual filter and exact totals of one snapshot.

        In unit mode with partitions, ``snap`` holds some units complete; a unit's charges and
        the filter's decision on them read only its own rows and ledger entries. The phase is
        reported for the ``first`` partition only (the number of partitions may follow the
        input's size: the phases shown must not).
        """
        op, pre, kind, keys, policy, bits = (rel.op, rel.pre, rel.kind, rel.keys, rel.policy,
                                             rel.bits)
        measure_list, by_list = pre.measures, pre.by
        sess, qname = op.session, op.name
        # Cells of the public key set.
        data = cells_of(snap, keys, by_list, uid)
        # units whose rows were all dropped by a rule contribute nothing and pay nothing
        if snap.outside is None:  # (one filter: the frame is copied once)
            inside = data.filter(pl.col(_CELL).is_not_null() & (pl.col(_ROWS) > 0))
            # (a snapshot without key columns kept its rows outside the key set with them)
            outside = data.filter(pl.col(_CELL).is_null()) if snap.strays is None \
                else snap.strays
        else:  # unit mode: the snapshot kept the rows outside the key set apart
            some = data[_ROWS] > 0  # (a copy of the table only if a rule dropped rows)
            inside = data if some.all(ignore_nulls=False) is True else data.filter(some)
            outside = snap.outside
        del data
        # rows outside the key set that no rule dropped: a row a rule dropped (nulls="drop",
        # negatives="drop") is counted by that rule's counter only, as a median's (each row
        # read is counted once: outside the key set, dropped by a rule, or in a released cell)
        outside = outside.filter(pl.col(_ROWS) > 0)
        rows_outside = int(outside[_ROWS].sum() or 0)
        outside_keys = outside.select(by_list).unique() if by_list else None
        del outside
        inside, cells_dropped = _bound_contributions(inside, uid, not snap.per_row, kind,
                                                     measure_list, bits, pre.max_cells,
                                                     pre.max_rows)

        # Per-unit losses and the individual filter.
        if first:
            binding.phase(sess, qname, "accounting per-record losses")
        order = None
        if not snap.per_row:  # the snapshot's order, unless a rule or bound dropped rows
            order = (snap.order if snap.order is not None and inside.height == snap.data.height
                     else UnitOrder(inside[uid], inside[_CELL], len(keys) if by_list else 1))
        # no budget or lifetime ledger: the filter admits every row without reading a
        # currency's charges, so row mode totals them over the currencies as it computes them;
        # a row-mode count charges every row alike: one value each, no arrays of every row
        # (every reader of the charges and losses here reads them, none writes in place)
        charges, cell_rho, cell_size = _charges(
            inside, uid, snap.per_row, policy, kind, bits, cells=sess.track_cells, order=order,
            totals=sess.budget is None and getattr(sess, "lifetime", None) is None,
            constant=True, ids=row_ids(snap, inside) if snap.per_row else None)
        admitted = sess.admit(charges)
        left_out = np.zeros(charges.n, dtype=bool)
        for ok in admitted.values():
            left_out |= ~ok

        # Exact totals of the admitted contributions. Per currency that left units out: its
        # rows left out and the columns it zeroes there (its measures; a count's: the rows).
        value_cols = [*measure_list, _ROWS]
        outs: list[tuple[pl.Series, list[str]]] = []
        row_ok = None  # per inside row: admitted for every currency (for the cell audit)
        for cur, ms in policy.currencies():
            ok = admitted[cur]
            if ok.all():
                continue
            if snap.per_row:
                out_rows = pl.Series(~ok)  # charges are aligned with the inside rows
            else:
                out_rows = inside[uid].is_in(charges.units.filter(pl.Series(~ok)).implode(),
                                             nulls_equal=True)
            row_ok = ~out_rows if row_ok is None else row_ok & ~out_rows
            outs.append((out_rows, ms if ms else [_ROWS]))
        # the snapshot's rows as they are (no rule or bound changed them): their cell totals
        # are kept for the next release of the same snapshot (row mode: of the same cells,
        # `cells_of`; its rows inside the key set are a function of those cells)
        as_read = (snap.totals is not None
                   and (snap.per_row or inside.height == snap.data.height)
                   and not (kind == "count" and pre.max_rows is not None))
        gone = None if row_ok is None else inside.filter(~row_ok)  # the rows left out
        # few rows left out: the totals of the rows as read minus the left-out rows' (exact:
        # fixed-point Int128 and Int64 sums) instead of a second group-by of masked rows
        subtract = (as_read and gone is not None
                    and gone.height * FEW_LEFT_OUT <= inside.height)
        work = inside
        if not subtract:
            for out_rows, cols in outs:
                work = work.with_columns(
                    pl.when(out_rows).then(pl.lit(0).cast(work.schema[c])).otherwise(pl.col(c))
                    .alias(c) for c in cols)
        # what the filter left out (confidential): exact totals before and after it
        before = _exact_sums(inside, measure_list)
        lost = None
        if subtract:
            assert gone is not None and row_ok is not None
            lost = _left_out(gone, [o.filter(~row_ok) for o, _ in outs],
                             [c for _, c in outs], value_cols)
            # a measure no currency zeroed (per-measure currencies) lost nothing: not in `lost`
            lost_ms = [m for m in measure_list if m in lost.columns]
            sums = lost.select(exact_sum(m) for m in lost_ms).row(0, named=True) \
                if lost_ms else {}
            after = {m: int(before[m] or 0) - int(sums.get(m) or 0) for m in measure_list}
        else:
            after = before if work is inside else _exact_sums(work, measure_list)
        rows_left = 0 if gone is None else int(gone[_ROWS].sum() or 0)
        del gone
        whole = as_read and (row_ok is None or subtract)
        totals = _whole_totals(snap.totals, value_cols) if whole else None
        if totals is None:
            # (a lazy plan: Polars' eager group-by of a frame of many chunks copies them,
            # about three times the CPU at 10M rows; the sums are exact either way)
            totals = work.lazy().group_by(_CELL).agg(exact_sum(c) for c in value_cols) \
                .collect(engine="streaming")
            if whole:
                assert snap.totals is not None
                snap.totals[",".join(value_cols)] = totals
        if lost is not None:
            totals = _minus(totals, lost, value_cols)
        del work, lost

        # Worst loss per cell (confidential), for the release workflow's audit report.
        cells = None
        if sess.track_cells:
            keep_mask = np.ones(inside.height, dtype=bool) if row_ok is None else \
                row_ok.to_numpy()
            kept = inside.filter(pl.Series(keep_mask))
            if snap.outside is not None and by_list:  # unit mode: per cell index (partial)
                cells = cell_worst(kept[_CELL], cell_rho[keep_mask], cell_size[keep_mask])
            else:
                cells = _cell_stats(kept, by_list, cell_rho[keep_mask], cell_size[keep_mask],
                                    keys, {c: op.schema[c] for c in by_list})
        return _Part(charges, admitted, totals, before, after, rows_left, rows_outside,
                     outside_keys, int(inside[_ROWS].sum() or 0), int(left_out.sum()),
                     cells_dropped, cells)

    def record(self, rel: Planned, record: QueryRecord, agg: Aggregated) -> None:
        """Add the admitted losses to the in-memory ledger and the release to the records.

        Args:
            rel: The planned release.
            record: The query's record.
            agg: From `aggregate` (its charges and the filter's decisions).
        """
        charges, admitted = agg.state
        with small_pages():  # the ledger's per-row arrays (`aggregate`)
            rel.op.session.record_release(record, rel.op.backend, charges, admitted)

    def quantile_data(self, rel: PlannedQuantile) -> QuantileData:
        """A median's pass: one evaluation of the input, checks, cells, charges and filter.

        Args:
            rel: The planned median or quantile.

        Returns:
            Each cell's exact quantile and smooth sensitivity with the confidential counts;
            ``state`` holds the charges and the filter's decisions for `record_quantile`.
        """
        op, column, by_list, keys, nulls = rel.op, rel.column, rel.by, rel.keys, rel.nulls
        sess, policy = op.session, rel.policy
        unit = sess.unit
        uid = unit if unit is not None else ROW_ID
        # One evaluation of the input: ids, keys, the values and their flags.
        binding.phase(sess, op.name, "reading and aggregating the input")
        x = pl.col(column).cast(pl.Float64)
        flags = {f"missing:{column}": x.is_null() | x.is_nan(),
                 f"inf:{column}": x.is_infinite().fill_null(False)}
        lf = op.lf
        if unit is None:
            lf = lf.with_row_index(ROW_ID)
            fps = [_fingerprint(c, op.schema[c])
                   for c in _fp_columns(op.schema, [*by_list, column],
                                        binding.of(sess).bound_columns())]
        else:
            fps = []
            flags[f"null:{unit}"] = _missing_unit(op.schema, unit)
        data = lf.select(pl.col(uid), *[pl.col(c) for c in by_list], x.alias(column),
                         *[e.alias(f"{RESERVED}_{k}") for k, e in flags.items()],
                         *fps).collect()
        counts = {k: int(data[f"{RESERVED}_{k}"].sum()) for k in flags}
        rules = _Rules(nulls, "allow", sess.mode)
        _strict_checks(counts, [column], unit, rules, False, {})
        n_rows = data.height
        if unit is None:
            fp = {c[len(FP):]: int(data[c].sum() or 0) for c in data.columns if c.startswith(FP)}
            binding.of(sess).bind_rows(n_rows, fp)
        # Declared rules: ±inf counts as missing (author mode; curator mode refused it above),
        # missing values are 0 ("zero") or their rows dropped ("drop"); rows without a unit id
        # are dropped (author mode).
        missing = pl.col(f"{RESERVED}_missing:{column}") | pl.col(f"{RESERVED}_inf:{column}")
        keep = pl.lit(True)
        if nulls == "drop":
            keep = keep & ~missing
        if unit is not None:
            keep = keep & ~pl.col(f"{RESERVED}_null:{unit}")
        data = (data.with_columns(pl.when(missing).then(0.0).otherwise(pl.col(column))
                                  .alias(column))
                .filter(keep).drop([*[f"{RESERVED}_{k}" for k in flags],
                                    *[c for c in data.columns if c.startswith(FP)]]))
        data = _attach_cells(data, keys, by_list)
        outside = int(data[_CELL].is_null().sum())
        inside = data.filter(pl.col(_CELL).is_not_null())

        # Per-unit losses: Δ = rows of the unit in the cell; ε(Δ) = Δ·(ε₁ + ε₂) (group
        # privacy), then the session's budget as an individual filter (units left out are
        # dropped from their cells).
        approx = policy.dp_delta is not None
        # (unit, cell) pairs sorted by unit then cell: a unit's losses are summed left to
        # right in key-set order, whatever the input's row order (as sums and counts do)
        pairs = inside.group_by(uid, _CELL, maintain_order=True).agg(
            pl.len().alias(f"{RESERVED}_len"))  # not "len": a unit column may have that name
        if unit is not None:
            pairs = _sort_units(pairs, uid, len(keys) if by_list else 1)
        k = pairs[f"{RESERVED}_len"].cast(pl.Float64).to_numpy()
        ea, da = policy.approx_policy(k)
        u, per = per_unit(pairs[uid], {
            "rho": np.asarray(policy.rho(k), dtype=np.float64),
            "epsilon": np.asarray(policy.epsilon(k), dtype=np.float64), "size": k,
            "eps_a": np.asarray(ea, dtype=np.float64),
            "delta_a": np.asarray(da, dtype=np.float64)},
            lambda c: c == "size")
        units = u.cast(pl.Int64).to_numpy() if unit is None else u
        arrays = {c: {ROWS_CURRENCY: per[c]}
                  for c in ("rho", "epsilon", "size", "eps_a", "delta_a")}
        charges = Charges(units, arrays["rho"], arrays["epsilon"], arrays["size"],
                          "approx" if approx else "zcdp",
                          arrays["eps_a"] if approx else None,
                          arrays["delta_a"] if approx else None)
        admitted = sess.admit(charges)
        losses = charges.losses(admitted)
        ok = admitted[ROWS_CURRENCY]
        n_left_out = int((~ok).sum())
        rows_in = inside.height  # rows in released cells before the filter (as a sum's)
        if n_left_out:
            gone = u.filter(pl.Series(~ok))
            inside = inside.filter(~pl.col(uid).is_in(gone.implode(), nulls_equal=True))
        values = inside[column].to_numpy()
        truth, ss, clipped = cell_quantiles(inside[_CELL].to_numpy(), values,
                                            len(keys) if by_list else 1, rel.q,
                                            rel.mechanism.gamma, rel.bounds)
        return QuantileData(truth, ss, dict(op.schema), n_rows, outside, rows_in,
                            n_left_out, rows_in - int(values.size), clipped,
                            counts[f"missing:{column}"], losses, state=(charges, admitted))

    def record_quantile(self, rel: PlannedQuantile, record: QueryRecord,
                        data: QuantileData) -> None:
        """Add the admitted losses to the in-memory ledger and the release to the records.

        Args:
            rel: The planned median or quantile.
            record: The query's record.
            data: From `quantile_data` (its charges and the filter's decisions).
        """
        charges, admitted = data.state
        rel.op.session.record_release(record, rel.op.backend, charges, admitted)


def _new_spill(op: Any) -> _Spill | None:
    """A `_Spill` for a releases' pass whose replay runs anyway (a budget or a cell audit).

    The replay that gives the admission flags gives every record's running totals too: they
    are written as it goes, for the per-record report (no second replay of every program). A
    session without a budget or cell audit runs no replay in its passes: none then.
    """
    sess = op.session
    if sess.budget is None and not sess.track_cells:
        return None
    try:
        # the report the caller declared it writes next (its δ): the files hold its columns
        spill = _Spill(getattr(sess.ledger, "report_delta", None))
    except OSError:  # no temporary folder: the report replays (review R18-7)
        return None
    spill.source = op.lf
    return spill


def _spilled_read(ledger: ReplayLedger, spill: _Spill | None,
                  read: Any) -> list[pl.DataFrame]:
    """Run a pass (``read()``: its aggregations) and keep its `_Spill` as the ledger's."""
    try:
        grouped = read()
    except BaseException:
        if spill is not None:
            spill.close()
        raise
    if spill is not None:
        if ledger.spill is not None:
            ledger.spill.close()
        spill.rows = int(grouped[0][f"{_P}n"].sum() or 0) if grouped else 0
        ledger.keep_spill(spill)
    return list(grouped)


class StreamingBackend(_PolarsOutput):
    """Polars streaming, row mode without per-row state: one replaying pass per batch.

    The releases executed together are replayed in **one pass** over the input: one lazy plan
    with every release's cells and contributions and one batch function replaying the session's
    earlier releases and the batch's in order (each release's admissions depend only on the
    releases before it). Releases over the same cells share one group-by. Polars' streaming
    engine runs one group-by of a query at a time, and would hold every row of the shared plan
    (about 200 bytes a row) for the later ones; so the replaying pass aggregates the first set
    of cells with its group-by, and the batch function aggregates the other sets' releases
    batch by batch (`tabdp.frame._stream.InBatch`: the same aggregations, over the rows and
    fresh admission flags of the same evaluation of the input, added up over the batches). A
    batch without a replay (no budget or cell audit) runs one query per release, each its own
    evaluation of the input, for the same reason (every query fingerprints the rows it read).
    Each release's checks, noise and record then follow in order, as if it ran alone: the same
    tables, noise and per-record losses. A release run alone (or one the batch does not hold,
    or one of a later set when no batch reached the batch function: an empty input) has its
    own pass.

    Args:
        rels: The releases executed together (one session, one input): the columns every
            release fingerprints are those any of them reads.

    Example:
        >>> StreamingBackend([]).engine
        'streaming'
    """

    engine = "streaming"

    def __init__(self, rels: list[Planned]) -> None:
        """Fingerprint the columns any of ``rels`` reads (checked by every release)."""
        self._fp_cols = _fingerprinted(rels[0].op.session, rels) if rels else []
        self._rels = list(rels)
        #: id(release) -> (its program index, its aggregation, the pass's fingerprints where the
        #: aggregation holds none), from the batch's one pass
        self._fetched: dict[int, tuple[int, pl.DataFrame, dict[str, int] | None]] | None = None

    def _prefetch(self) -> None:
        """Aggregate every release of the batch in one pass (before the first is executed)."""
        rels = self._rels
        op = rels[0].op
        sess = op.session
        ledger = sess.ledger
        assert isinstance(ledger, ReplayLedger)
        k0 = len(ledger.programs)
        programs = [*ledger.programs, *[r.program for r in rels]]
        ks = list(range(k0, k0 + len(rels)))
        _require_bound(sess, op.schema)
        spill = _new_spill(op)
        # Polars' streaming engine runs one group-by of a query at a time: where the batch
        # function runs (a budget or a cell audit), the first set of cells is aggregated by
        # the pass's group-by and the other sets' releases in the batch function (`InBatch`),
        # batch by batch, from the rows and flags of the pass's one evaluation of the input
        replays = not _unfiltered(sess)
        sets = cell_sets(rels) if replays else [list(range(len(rels)))]
        in_batch = InBatch(sess, rels, ks, sets[1:]) if len(sets) > 1 else None
        # the batch function's side work (the later sets' group-by, the spill's file) on a
        # thread of its own, while the batch function goes on (`_Offload`)
        offload = _Offload() if spill is not None or in_batch is not None else None
        for side in (spill, in_batch):
            if side is not None:
                side.offload = offload
        plan = _replayed(sess, _with_row_ids(op.lf, op.schema), op.schema, programs, False,
                         None, frozenset(ks), sess.track_cells, spill, in_batch=in_batch)
        # releases over the same cells share one group-by; each query fingerprints the rows
        # it read (an input evaluated once per query may differ between evaluations)
        first = [rels[i] for i in sets[0]]
        ks0 = [ks[i] for i in sets[0]]
        queries, split = release_queries(sess, plan, first, ks0, self._fp_cols)

        def collect() -> list[pl.DataFrame]:
            try:
                if replays or len(queries) == 1:
                    got = pl.collect_all(queries, engine="streaming")
                else:
                    # without a replay (no budget or cell audit: a query per release), each
                    # query is its own evaluation of the input: collected together, every row
                    # of the shared plan would be held for all group-bys but one (1.5 GB at
                    # 10M rows, for 0.3 s saved)
                    got = [pl.collect_all([q], engine="streaming")[0] for q in queries]
                if offload is not None:
                    offload.drain()  # every batch's side work done (its first error raised)
            finally:
                if offload is not None:
                    offload.close()
            return split(got)

        grouped = _spilled_read(ledger, spill,
                                lambda: _read_input(sess, collect, report=False))
        self._fetched = {id(r): (k, g, None)
                         for r, k, g in zip(first, ks0, grouped, strict=True)}
        later = in_batch.frames() if in_batch is not None else None
        if in_batch is None or later is None:
            # (None: no batch reached the batch function, an empty input; each release of the
            # later sets then has a pass of its own)
            return
        # the rows of the one evaluation, which the first set's aggregation fingerprinted
        fps = pass_fingerprints(grouped[0], self._fp_cols)
        rest = sorted(i for group in sets[1:] for i in group)
        self._fetched.update({id(rels[i]): (ks[i], g, fps)
                              for i, g in zip(rest, later, strict=True)})

    def aggregate(self, rel: Planned) -> Aggregated:
        """The release's group-by over the input, replaying the earlier releases' filter.

        From the batch's one pass when ``rel`` is one of its releases and every release before
        it in the batch was recorded; else from a pass of its own.

        Args:
            rel: The planned release.

        Returns:
            The cell totals and the confidential summaries.
        """
        op = rel.op
        sess = op.session
        ledger = sess.ledger
        assert isinstance(ledger, ReplayLedger)
        binding.phase(sess, op.name, "reading and aggregating the input (streaming)")
        if self._fetched is None and len(self._rels) > 1 and self._rels[0] is rel:
            self._prefetch()
        fetched = (self._fetched or {}).get(id(rel))
        if fetched is not None and fetched[0] == len(ledger.programs):
            # the releases before it were recorded (their programs are the ledger's last ones)
            k, grouped, fps = fetched
            del self._fetched[id(rel)]  # type: ignore[union-attr]
            return stream_aggregate(rel, grouped, k, self._fp_cols, fps)
        programs = [*ledger.programs, rel.program]
        k = len(programs) - 1
        _require_bound(sess, op.schema)
        # a count of the cells the last release aggregated: its row counts (no pass)
        kept = count_from_kept(rel, k, self._fp_cols)
        if kept is not None:
            return stream_aggregate(rel, kept, k, self._fp_cols)
        spill = _new_spill(op)
        plan = _replayed(sess, _with_row_ids(op.lf, op.schema), op.schema, programs, False,
                         None, k, sess.track_cells, spill)
        query = _release_query(sess, plan, rel, k, self._fp_cols)
        grouped = _spilled_read(ledger, spill,
                                lambda: [_read_input(sess, _streamed(query), report=False)])[0]
        keep_aggregation(rel, grouped, k, self._fp_cols)
        return stream_aggregate(rel, grouped, k, self._fp_cols)

    def record(self, rel: Planned, record: QueryRecord, agg: Aggregated) -> None:
        """Install the release's public definition in the replay ledger; add the record.

        Args:
            rel: The planned release.
            record: The query's record.
            agg: From `aggregate`: whether every row read was in a cell (the ledger replays
                the release when losses are needed).
        """
        ledger = rel.op.session.ledger
        assert isinstance(ledger, ReplayLedger)
        _install(ledger, rel.program, rel.op.lf)
        if rel.pre.by and agg.rows_outside == 0:
            # every row the pass read that no rule dropped was in a cell: so is every such row
            # a later replay reads (the session binds the same rows, key columns included); a
            # row a rule dropped contributes nothing, whatever its cell (``_P r<j>`` is 0)
            ledger.whole.add(len(ledger.programs) - 1)
        rel.op.session.record_release(record, rel.op.backend)

    def quantile_data(self, rel: PlannedQuantile) -> QuantileData:
        """A median's pass: one lazy plan replaying the earlier releases' filter.

        Its charges are a count's (each row the nulls rule keeps pays the group-privacy
        policy at Δ = 1 row); only the admitted values of released cells come back.

        Args:
            rel: The planned median or quantile.

        Returns:
            Each cell's exact quantile and smooth sensitivity with the confidential counts;
            ``state`` installs the release's definition in the replay ledger.
        """
        op = rel.op
        binding.phase(op.session, op.name, "reading the input (streaming)")
        codes, values, n_rows, outside, rows_in, n_left_out, rows_left, counts, commit = \
            streaming_quantile_data(op, rel.column, rel.by, rel.keys, rel.nulls, rel.policy)
        truth, ss, clipped = cell_quantiles(codes, values, len(rel.keys) if rel.by else 1,
                                            rel.q, rel.mechanism.gamma, rel.bounds)
        return QuantileData(truth, ss, dict(op.schema), n_rows, outside, rows_in, n_left_out,
                            rows_left, clipped, counts[f"missing:{rel.column}"], None,
                            state=commit)

    def record_quantile(self, rel: PlannedQuantile, record: QueryRecord,
                        data: QuantileData) -> None:
        """Install the release's definition in the replay ledger; add the record.

        Args:
            rel: The planned median or quantile.
            record: The query's record.
            data: From `quantile_data`.
        """
        data.state()
        rel.op.session.record_release(record, rel.op.backend)
