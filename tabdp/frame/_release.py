"""The grouped release (``df.dp.sum`` / ``df.dp.count``): in-memory or streaming.

The steps are in `tabdp.frame._engine` (its docstring describes the data flow); a
streaming session (row mode without per-row state) runs them as one lazy plan in
`tabdp.frame._stream`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp.exceptions import InvalidParameterError
from tabdp.frame._engine import (
    _ALL,
    _CELL,
    _ROWS,
    ROW_ID,
    _bound_contributions,
    _cell_stats,
    _charges,
    _noisy_table,
    _open_release,
    _output_dtypes,
    _prepare_release,
    _release_rules,
    _rule_counts,
    _strict_checks,
    _take_snapshot,
    cells_of,
    check_cell_keys,
    left_out_counts,
    scale_bits,
)
from tabdp.frame._output import check_form, to_native
from tabdp.frame._requests import accessor_request
from tabdp.frame._stream import Planned, check_batch, streaming_releases
from tabdp.frame.backends import polars_engine
from tabdp.frame.keys import KeySet
from tabdp.mechanisms._base import DEFAULT_LEVEL, Mechanism
from tabdp.privacy.ledger import QueryRecord
from tabdp.privacy.session import Session

__all__ = ["grouped_release", "planned_releases", "execute_planned"]


# -- the release ------------------------------------------------------------------------------
def grouped_release(native: Any, *, kind: str, measures: str | Sequence[str] | None,
                    by: str | Sequence[str] | None, keys: KeySet, mechanism: Mechanism | None,
                    session: Session | None = None, level: float = DEFAULT_LEVEL,
                    nulls: str = "error", name: str | None = None, grid: Any = None,
                    negatives: str = DEFAULT_NEGATIVES, max_cells: int | None = None,
                    max_rows: int | None = None, form: str = "wide", cv: bool = False) -> Any:
    """Release noisy sums or counts of ``native`` grouped by ``by`` over the key set ``keys``.

    This is the implementation behind ``df.dp.sum`` and ``df.dp.count``; see those for the
    user documentation and the module docstring for the data flow.

    Args:
        native: A pandas DataFrame, Polars DataFrame or Polars LazyFrame.
        kind: ``"sum"`` or ``"count"``.
        measures: Columns to sum (ignored for counts).
        by: Group-by columns (exactly the key set's columns).
        keys: The public key set.
        mechanism: The mechanism (``None``: the default count mechanism; sums need one).
        session: Session to record in (default: a fresh one, see
            [`last_session`][tabdp.last_session]).
        level: Confidence level of the margins of error.
        nulls: ``"error"``, ``"zero"`` or ``"drop"``.
        name: Label of the release in the session.
        grid: Public rounding grid: a step, ``{measure: step}``, or ``None`` (defaults).
        negatives: Rule for negative values: ``"error"`` (the default, `tabdp._defaults.NEGATIVES`,
            as in a spec), ``"allow"``, ``"zero"`` or ``"drop"``.
        max_cells: Public bound on the cells one unit contributes to (unit mode): a unit's
            contributions to further cells are dropped, keeping its largest (ties: key-set
            order). ``None``: unbounded. Each row is in one cell in row mode.
        max_rows: Public bound on the rows one unit counts in one cell (counts): a unit's
            count contribution is capped there. ``None``: unbounded (1 in row mode).
        form: ``"wide"`` (default) or ``"long"`` (`tabdp.frame._output`).
        cv: Wide form: add ``_cv`` and ``_flag`` columns (the long form always has them).

    Returns:
        A frame of the caller's library: keys (in the input's dtypes), then per measure the
        estimate (Int64 for counts and integer measures on a whole-number grid), ``_sd``,
        ``_moe``, ``_lower`` and ``_upper`` columns (the interval is the mechanism's exact
        ``level`` interval: asymmetric for transformation mechanisms, estimate ∓ moe for
        additive ones); one row per key. ``form="long"``: keys, ``measure``, ``estimate``,
        ``sd``, ``moe``, ``lower``, ``upper``, ``cv``, ``flag``.

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"c": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]})
        >>> out = grouped_release(df, kind="sum", measures=["x"], by=["c"],
        ...                       keys=tabdp.KeySet.from_dict(c=["a", "b", "z"]),
        ...                       mechanism=tabdp.mechanisms.Gaussian(1.0),
        ...                       session=tabdp.Session(seed=0))
        >>> out.columns, out.height
        (['c', 'x', 'x_sd', 'x_moe', 'x_lower', 'x_upper'], 3)
    """
    rel = _plan(native, session, None, kind=kind, measures=measures, by=by, keys=keys,
                mechanism=mechanism, level=level, nulls=nulls, name=name, grid=grid,
                negatives=negatives, max_cells=max_cells, max_rows=max_rows, form=form, cv=cv,
                stacklevel=7)  # accessor method, author_call, its closure
    return execute_planned([rel])[0]


def _plan(native: Any, session: Session | None, batch: list[Planned] | None, *, kind: str,
          measures: str | Sequence[str] | None = None, by: str | Sequence[str] | None,
          keys: KeySet, mechanism: Mechanism | None = None, level: float = DEFAULT_LEVEL,
          nulls: str = "error", name: str | None = None, grid: Any = None,
          negatives: str = DEFAULT_NEGATIVES, max_cells: int | None = None,
          max_rows: int | None = None, form: str = "wide", cv: bool = False,
          stacklevel: int = 4) -> Planned:
    """Every check of one release (arguments, schema, name, rules): no data read, no noise.

    ``batch``: the releases planned before this one in the same batch (their names are taken).
    """
    pre = _prepare_release(kind, measures, by, keys, mechanism, session, level, nulls, grid,
                           max_cells, max_rows, stacklevel=stacklevel)
    form = check_form(form)
    if batch and name is None:  # the default label after the batch's earlier releases
        sess0 = batch[0].op.session
        taken = {r.name for r in sess0.records} | {r.op.name for r in batch}
        i = len(sess0.records) + len(batch) + 1
        while f"q{i}_{kind}" in taken:
            i += 1
        name = f"q{i}_{kind}"
    op = _open_release(native, session, name, kind, pre.measures, pre.by)
    if batch and op.name in {r.op.name for r in batch}:
        raise InvalidParameterError(
            f"name {op.name!r} is used twice in the releases planned together; names label the "
            "per-record report columns.\nHint: give each release its own name.")
    if pre.by:  # the key set against the schema (refusals of the cells), no data read
        check_cell_keys(op.schema, keys, pre.by)
    rules, policy = _release_rules(op.session, kind, pre.mechanism, nulls, negatives,
                                   pre.measures)
    bits = {m: scale_bits(op.schema[m]) for m in pre.measures}
    return Planned(op, pre, kind, keys, rules, policy, bits, nulls, form, cv)


def planned_releases(native: Any, session: Session,
                     requests: Sequence[Mapping[str, Any]]) -> list[Planned]:
    """Plan several releases of one input in one session, every check before any data is read.

    Args:
        native: The input (a pandas DataFrame, Polars DataFrame or LazyFrame).
        session: The session all the releases are recorded in.
        requests: One mapping per release, in release order, with the keyword arguments of
            `grouped_release` (``kind``, ``measures``, ``by``, ``keys``, ``mechanism``,
            ``level``, ``nulls``, ``name``, ``grid``, ``negatives``, ``max_cells``,
            ``max_rows``, ``form``, ``cv``).

    Returns:
        The planned releases, for `execute_planned`.

    Raises:
        InvalidParameterError: A release's arguments, or two releases with one name (nothing
            is read and nothing is recorded).

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1)
        >>> k = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> rels = planned_releases(pl.DataFrame({"c": ["a"], "x": [1.0]}), s, [
        ...     dict(kind="count", by="c", keys=k), dict(kind="count", by="c", keys=k)])
        >>> [r.op.name for r in rels], len(s.records)
        (['q1_count', 'q2_count'], 0)
    """
    if not isinstance(session, Session):
        raise InvalidParameterError(
            f"releases planned together need a session; got {type(session).__name__}.\n"
            "Hint: pass session=tabdp.Session(...).")
    batch: list[Planned] = []
    for req in requests:  # the accessor's output-name checks and integer grids, as one by one
        batch.append(_plan(native, session, batch, **accessor_request(native, session, req)))
    return batch


def execute_planned(rels: Sequence[Planned]) -> list[Any]:
    """Execute planned releases in order, each as it would run alone.

    A streaming session (row mode without per-row state) runs each release as one lazy plan
    over the input (`tabdp.frame._stream.streaming_releases`); other sessions take a
    snapshot per release (a sum then a count of the same frame and key set share one). Every
    table, noise draw and per-record loss is the one the releases give one by one, in this
    order; names taken since planning are refused before anything runs.

    Args:
        rels: Releases from `planned_releases`, in release order.

    Returns:
        The released tables, in order.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1, streaming=True)
        >>> k = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> lf = pl.LazyFrame({"c": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]})
        >>> outs = execute_planned(planned_releases(lf, s, [
        ...     dict(kind="count", by="c", keys=k, name="n"),
        ...     dict(kind="sum", measures="x", by="c", keys=k, name="x",
        ...          mechanism=tabdp.mechanisms.Gaussian(2.0))]))
        >>> [o.columns[1] for o in outs], [r.name for r in s.records]
        (['count', 'x'], ['n', 'x'])
    """
    rels = list(rels)
    check_batch(rels)
    if rels and polars_engine(rels[0].op.session) == "streaming":
        return streaming_releases(rels)
    return [_in_memory_release(r) for r in rels]


def _in_memory_release(rel: Planned) -> Any:
    """One release with the in-memory engine (a snapshot of the input, per-unit arrays)."""
    op, pre, kind, keys, rules, policy, bits = (rel.op, rel.pre, rel.kind, rel.keys, rel.rules,
                                                rel.policy, rel.bits)
    nulls, form, cv = rel.nulls, rel.form, rel.cv
    measure_list, by_list, mechanism, level = pre.measures, pre.by, pre.mechanism, pre.level
    released, grids, max_cells, max_rows = pre.released, pre.grids, pre.max_cells, pre.max_rows
    sess, qname = op.session, op.name
    unit = sess.unit
    uid = unit if unit is not None else ROW_ID

    # 1. One snapshot of the input.
    sess.phase(qname, "reading and aggregating the input")
    snap = _take_snapshot(op, by_list, measure_list, rules, keys)
    data = snap.data
    parts = [data] if snap.outside is None else [data, snap.outside]
    needs_nonneg = bool(mechanism.requires_nonnegative) and kind == "sum"
    neg_contrib = ({m: sum(int((d[m] < 0).sum()) for d in parts) for m in measure_list}
                   if needs_nonneg and rules.negatives == "allow" else {})
    _strict_checks(snap.counts, measure_list, unit, rules, needs_nonneg, neg_contrib)
    if unit is None:
        sess.bind_rows(snap.rows_read, snap.fingerprints)

    # 2. Cells of the public key set.
    data = cells_of(snap, keys, by_list, uid)
    if snap.outside is None:
        inside = data.filter(pl.col(_CELL).is_not_null())
        outside = data.filter(pl.col(_CELL).is_null())
    else:  # unit mode: the snapshot kept the rows outside the key set apart
        inside, outside = data, snap.outside
    rows_outside = int(outside[_ALL].sum() or 0)
    # units whose rows were all dropped by a rule contribute nothing and pay nothing
    inside = inside.filter(pl.col(_ROWS) > 0)
    inside, cells_dropped = _bound_contributions(inside, uid, not snap.per_row, kind,
                                                 measure_list, bits, max_cells, max_rows)

    # 3. Per-unit losses and the individual filter.
    sess.phase(qname, "accounting per-record losses")
    charges, cell_rho, cell_size = _charges(inside, uid, snap.per_row, policy, kind, bits)
    admitted = sess.admit(charges)
    losses = charges.losses(admitted)
    left_out = np.zeros(charges.n, dtype=bool)
    for ok in admitted.values():
        left_out |= ~ok

    # 4. Exact totals of the admitted contributions.
    work = inside
    row_ok = None  # per inside row: admitted for every currency (for the cell audit)
    for cur, ms in policy.currencies():
        ok = admitted[cur]
        if ok.all():
            continue
        if snap.per_row:
            out_rows = pl.Series(~ok)  # charges are aligned with the inside rows
        else:
            out_rows = work[uid].is_in(charges.units.filter(pl.Series(~ok)).implode(),
                                       nulls_equal=True)
        row_ok = ~out_rows if row_ok is None else row_ok & ~out_rows
        work = work.with_columns(
            pl.when(out_rows).then(pl.lit(0).cast(work.schema[c])).otherwise(pl.col(c)).alias(c)
            for c in (ms if ms else [_ROWS]))
    value_cols = [*measure_list, _ROWS]
    n_keys = len(keys) if by_list else 1
    # what the filter left out (confidential): exact totals before and after it
    before = inside.select(pl.col(m).sum() for m in measure_list).row(0, named=True) \
        if measure_list else {}
    after = work.select(pl.col(m).sum() for m in measure_list).row(0, named=True) \
        if measure_list else {}
    rows_left = 0 if row_ok is None else int(
        inside.filter(~row_ok)[_ROWS].sum() or 0)
    left_out_info = left_out_counts(
        kind, measure_list, bits, before,
        {m: int(before[m] or 0) - int(after[m] or 0) for m in measure_list}, rows_left)
    totals = work.group_by(_CELL).agg(pl.col(c).sum() for c in value_cols)
    full = pl.DataFrame({_CELL: pl.int_range(n_keys, dtype=pl.Int64, eager=True)}).join(
        totals.with_columns(pl.col(_CELL).cast(pl.Int64)), on=_CELL, how="left",
        maintain_order="left")

    # Worst loss per cell (confidential), for the release workflow's audit report.
    cells = None
    if sess.track_cells:
        keep_mask = np.ones(inside.height, dtype=bool) if row_ok is None else row_ok.to_numpy()
        cells = _cell_stats(inside.filter(pl.Series(keep_mask)), by_list,
                            cell_rho[keep_mask], cell_size[keep_mask], keys,
                            {c: op.schema[c] for c in by_list})

    # 5. Noise: only now, after every check passed.
    sess.phase(qname, f"drawing noise for {n_keys:,} cells")
    out, fallbacks, grid_used = _noisy_table(
        full, kind, released, bits, mechanism, policy, sess, level, grids, keys, by_list,
        form=form, cv=cv, key_dtypes=_output_dtypes(op, sess, measure_list))

    confidential = {
        "rows_read": snap.rows_read,
        "rows_outside_keys": rows_outside,
        "cells_with_data_outside_keys": int(
            outside.select(by_list).unique().height if by_list else 0),
        "rows_in_released_cells": int(inside[_ROWS].sum() or 0),
        "units_left_out_by_budget": int(left_out.sum()),
        **left_out_info,
        **({"unit_cells_dropped_by_max_cells": cells_dropped} if max_cells is not None else {}),
        **_rule_counts(snap.counts, measure_list, nulls, rules),
    }
    record = QueryRecord(
        index=len(sess.records) + 1, name=qname, kind=kind, measures=tuple(released),
        by=tuple(by_list), mechanism=mechanism, keys=keys.to_dict(), level=level, nulls=nulls,
        losses=losses, confidential=confidential, grid=grid_used, fallbacks=fallbacks,
        cells=cells, bounds=({"max_cells": 1, "max_rows": 1} if sess.rows_one_cell else
                             {"max_cells": max_cells, "max_rows": max_rows}))
    sess.record_release(record, op.backend, charges, admitted)
    if op.one_off:
        sess.set_as_last()
    return to_native(out, op.native, op.backend, by_list, author=sess.mode == "author")
