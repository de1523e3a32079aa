"""The release sequence, written once above the engines: ``plan`` then ``execute``.

``plan`` makes every check of a release that needs no data (arguments, schema, name, key set
against the schema, data rules, fixed-point scales) and returns a `Planned` release; nothing is
read and no noise drawn. ``execute`` runs it over a backend (`tabdp.frame.backends.base.Backend`):

1. the backend reads the records once (snapshot, strict checks, row binding, cells,
   contributions, charges, the individual filter, exact totals, cell audit) and hands back the
   cell totals with small confidential summaries (`tabdp.frame.backends.base.Aggregated`);
2. noise is drawn on the aggregated table, in key order (`tabdp.frame._engine._noisy_table`);
3. the query's record is written and added to the session's ledger by the backend;
4. the table is returned in the caller's library.

Medians and quantiles take the same sequence (`plan_quantile`, `execute_quantile`): the backend
reads the records once (snapshot, checks, row binding, cells, charges, the individual filter)
and hands back each cell's exact clipped quantile and smooth sensitivity
(`tabdp.frame.backends.base.QuantileData`, computed by
`tabdp.frame._quantiles.cell_quantiles`); the pipeline draws the noise, writes the record and
has the backend add it to the ledger.

Which backend runs a release is decided in one place, `tabdp.frame.backends`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tabdp._alloc import warm_heap
from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp._numeric import floats_quiet
from tabdp.exceptions import InvalidParameterError
from tabdp.frame import binding
from tabdp.frame._engine import (
    OUTPUT_SUFFIXES,
    _check_rules,
    _noisy_table,
    _open_release,
    _Opened,
    _prepare_release,
    _release_rules,
    scale_bits,
)
from tabdp.frame._output import (
    LONG_COLUMNS,
    STAT_SUFFIXES,
    Measure,
    assemble,
    check_form,
)
from tabdp.frame._quantiles import GroupPrivacyPolicy, PlannedQuantile, _quantile_args
from tabdp.frame._stream import Planned, check_batch
from tabdp.frame.backends import nan_is_missing, polars_engine
from tabdp.frame.backends.base import Aggregated, Backend, QuantileData
from tabdp.frame.backends.polars import MemoryBackend, StreamingBackend
from tabdp.frame.keys import KeySet, check_cell_keys, pandas_keys
from tabdp.mechanisms import DEFAULT_LEVEL, Mechanism
from tabdp.mechanisms.additive import Gaussian
from tabdp.privacy.ledger import QueryRecord
from tabdp.privacy.session import Session

__all__ = ["Planned", "PlannedQuantile", "plan", "execute", "execute_all", "polars_backend",
           "plan_quantile", "execute_quantile", "quantile_backend"]


def plan(native: Any, session: Session | None, batch: list[Planned] | None = None, *,
         kind: str, measures: str | Sequence[str] | None = None,
         by: str | Sequence[str] | None, keys: KeySet, mechanism: Mechanism | None = None,
         level: float = DEFAULT_LEVEL, nulls: str = "error", name: str | None = None,
         grid: Any = None, negatives: str = DEFAULT_NEGATIVES, max_cells: int | None = None,
         max_rows: int | None = None, form: str = "wide", cv: bool = False,
         stacklevel: int | None = None) -> Planned:
    """Every check of one release (arguments, schema, name, rules): no data read, no noise.

    Args:
        native: The input frame.
        session: The session (``None``: a fresh one-off session).
        batch: The releases planned before this one in the same batch (their names are taken).
        kind: ``"sum"`` or ``"count"``; the other keywords are ``grouped_release``'s.
        measures: Columns to sum.
        by: Group-by columns.
        keys: The public key set.
        mechanism: The mechanism.
        level: Confidence level.
        nulls: The nulls rule.
        name: The release's label.
        grid: The public rounding grid.
        negatives: The negatives rule.
        max_cells: Public bound on a unit's cells.
        max_rows: Public bound on a unit's rows in a cell (counts).
        form: ``"wide"`` or ``"long"``.
        cv: Add ``_cv`` and ``_flag`` columns.
        stacklevel: Where usability warnings point (``warnings.warn``'s, from this call);
            None: the first caller outside tabdp.

    Returns:
        The planned release, for `execute`.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1)
        >>> rel = plan(pl.DataFrame({"c": ["a"]}), s, kind="count", by="c",
        ...            keys=tabdp.KeySet.from_dict(c=["a"]))
        >>> rel.op.name, len(s.records)
        ('q1_count', 0)
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
    if op.backend == "pandas" and pre.by:  # pandas' NaN is its missing value (null)
        keys = pandas_keys(keys, nan_is_missing(op.native))
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


def _confidential(rel: Planned, agg: Aggregated) -> dict[str, Any]:
    """The query's CONFIDENTIAL counters (curator only), in the report's order."""
    return {
        "rows_read": agg.rows_read,
        "rows_outside_keys": agg.rows_outside,
        "cells_with_data_outside_keys": agg.cells_outside,
        "rows_in_released_cells": agg.rows_released,
        "units_left_out_by_budget": agg.units_left_out,
        **agg.left_out,
        **({"unit_cells_dropped_by_max_cells": agg.cells_dropped}
           if rel.pre.max_cells is not None else {}),
        **agg.rule_counts,
    }


@floats_quiet
def execute(rel: Planned, backend: Backend) -> Any:
    """Run one planned release over a backend: aggregate, noise, record, output.

    Args:
        rel: From `plan`.
        backend: The engine (`tabdp.frame.backends.base.Backend`).

    Returns:
        The released table in the caller's library.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1)
        >>> rel = plan(pl.DataFrame({"c": ["a", "a"]}), s, kind="count", by="c",
        ...            keys=tabdp.KeySet.from_dict(c=["a", "b"]))
        >>> execute(rel, MemoryBackend()).height, [r.name for r in s.records]
        (2, ['q1_count'])
    """
    op, pre, kind, keys = rel.op, rel.pre, rel.kind, rel.keys
    sess = op.session
    agg = None
    warm_heap()  # once per process: the batches' arrays reuse heap pages (`tabdp._alloc`)
    try:
        backend.check(rel)  # the engine's refusals from the schema and keys: data-free
        binding.reading(sess)  # the engine's work may touch the data (author mode's rule)
        agg = backend.aggregate(rel)
        n_keys = len(keys) if pre.by else 1
        # Noise: only now, after every check passed.
        binding.phase(sess, op.name, f"drawing noise for {n_keys:,} cells")
        out, fallbacks, grid_used = _noisy_table(
            agg.full, kind, pre.released, rel.bits, pre.mechanism, rel.policy, sess, pre.level,
            pre.grids, keys, pre.by, form=rel.form, cv=rel.cv, key_dtypes=agg.key_dtypes)
        record = QueryRecord(
            index=len(sess.records) + 1, name=op.name, kind=kind, measures=tuple(pre.released),
            by=tuple(pre.by), mechanism=pre.mechanism, keys=keys.to_dict(), level=pre.level,
            nulls=rel.nulls, losses=agg.losses, confidential=_confidential(rel, agg),
            grid=grid_used, fallbacks=fallbacks, cells=agg.cells,
            bounds=({"max_cells": 1, "max_rows": 1} if sess.rows_one_cell else
                    {"max_cells": pre.max_cells, "max_rows": pre.max_rows}))
        backend.record(rel, record, agg)
    finally:
        backend.close(agg)
    if op.one_off:
        sess.set_as_last()
    return backend.output(rel, out)


def polars_backend(rels: list[Planned]) -> Backend:
    """The Polars backend of releases planned together (streaming or in memory).

    Args:
        rels: The releases (one session, one input).

    Returns:
        A `StreamingBackend` for a session without per-row state, else a `MemoryBackend`.

    Example:
        >>> polars_backend([]).engine
        'memory'
    """
    if rels and polars_engine(rels[0].op.session) == "streaming":
        return StreamingBackend(rels)
    return MemoryBackend()


@floats_quiet
def execute_all(rels: Sequence[Planned]) -> list[Any]:
    """Execute releases planned together, in order, each as it would run alone.

    Args:
        rels: From `plan` (one session, one input), in release order.

    Returns:
        The released tables, in order.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1, streaming=True)
        >>> k = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> lf = pl.LazyFrame({"c": ["a", "b", "b"]})
        >>> r1 = plan(lf, s, kind="count", by="c", keys=k, name="n1")
        >>> r2 = plan(lf, s, [r1], kind="count", by="c", keys=k, name="n2")
        >>> [t.height for t in execute_all([r1, r2])], [r.name for r in s.records]
        ([2, 2], ['n1', 'n2'])
    """
    rels = list(rels)
    check_batch(rels)
    backend = polars_backend(rels)
    return [execute(r, backend) for r in rels]


# -- medians and quantiles ----------------------------------------------------------------------
def plan_quantile(native: Any, session: Session | None, *, column: str, q: float, median: bool,
                  by: str | Sequence[str] | None, keys: KeySet, bounds: Any, epsilon: float,
                  noise: str = "polyplace", gamma: float | None = None,
                  delta: float | None = None, uncertainty_share: float | None = None,
                  level: float = DEFAULT_LEVEL, nulls: str = "error", name: str | None = None,
                  grid: Any = None, form: str = "wide", cv: bool = False,
                  opener: Callable[..., _Opened] = _open_release,
                  stacklevel: int | None = None) -> PlannedQuantile:
    """Every check of one median or quantile release: no data read, no noise.

    Args:
        native: The input frame.
        session: The session (``None``: a fresh one-off session).
        column: The measure; the other keywords are ``df.dp.quantile``'s
            (`tabdp.frame.DPAccessor.quantile`).
        q: Quantile level.
        median: Label the output ``_median``.
        by: Group-by columns.
        keys: The public key set.
        bounds: Public ``(low, high)``.
        epsilon: Total ε of the release.
        noise: The noise family.
        gamma: Smoothness γ.
        delta: δ for ``noise="laplace"``.
        uncertainty_share: Share of ε spent on the private noise scale.
        level: Confidence level.
        nulls: The nulls rule.
        name: The release's label.
        grid: Public rounding step.
        form: ``"wide"`` or ``"long"``.
        cv: Add ``_cv`` and ``_flag`` columns.
        opener: How the engine opens the input (session, name, schema; no data read): the
            Polars engines' by default, the Spark engine's for a PySpark frame.
        stacklevel: Where usability warnings point (``warnings.warn``'s, from this call);
            None: the first caller outside tabdp.

    Returns:
        The planned release, for `execute_quantile`.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1)
        >>> rel = plan_quantile(pl.DataFrame({"c": ["a"], "x": [1.0]}), s, column="x", q=0.5,
        ...                     median=True, by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
        ...                     bounds=(0, 10), epsilon=1.0)
        >>> rel.op.name, rel.label, len(s.records)
        ('q1_median', 'x_median', 0)
    """
    qv, lo, hi, by_list, mechanism, level, label, grid = _quantile_args(
        column, q, median, by, keys, bounds, epsilon, noise, gamma, delta, uncertainty_share,
        session, level, nulls, grid, stacklevel=stacklevel)
    form = check_form(form)
    outputs = set(LONG_COLUMNS) if form == "long" else {
        f"{label}{s}" for s in (*OUTPUT_SUFFIXES, *(STAT_SUFFIXES if cv else ()))}
    clash = outputs & set(by_list)
    if clash:
        raise InvalidParameterError(
            f"key column(s) {sorted(clash)} would clash with output columns; rename them first.")
    kind = "median" if median else "quantile"
    op = opener(native, session, name, kind, [column], by_list)
    if getattr(op, "backend", None) == "pandas" and by_list:  # pandas' NaN: its missing value
        keys = pandas_keys(keys, nan_is_missing(op.native))
    if by_list:  # the key set against the schema (refusals of the cells), no data read
        check_cell_keys(op.schema, keys, by_list)
    _check_rules(op.session, "quantile", Gaussian(1.0), nulls, "allow", True)  # any sign
    return PlannedQuantile(op, kind, column, qv, (lo, hi), by_list, keys, mechanism,
                           GroupPrivacyPolicy(mechanism), level, label, grid, nulls, form, cv)


def execute_quantile(rel: PlannedQuantile, backend: Backend) -> Any:
    """Run one planned median or quantile over a backend: cell data, noise, record, output.

    Args:
        rel: From `plan_quantile`.
        backend: The engine (`tabdp.frame.backends.base.Backend`).

    Returns:
        The released table in the caller's library.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1)
        >>> rel = plan_quantile(pl.DataFrame({"c": ["a"], "x": [1.0]}), s, column="x", q=0.5,
        ...                     median=True, by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
        ...                     bounds=(0, 10), epsilon=1.0)
        >>> execute_quantile(rel, MemoryBackend()).columns[:2], [r.name for r in s.records]
        (['c', 'x_median'], ['q1_median'])
    """
    op, keys, by_list = rel.op, rel.keys, rel.by
    sess = op.session
    data: QuantileData | None = None
    warm_heap()  # once per process (`tabdp._alloc`)
    try:
        backend.check(rel)  # the engine's refusals from the schema and keys: data-free
        binding.reading(sess)  # the engine's work may touch the data (author mode's rule)
        data = backend.quantile_data(rel)
        n_keys = len(keys) if by_list else 1
        # the value (ε₁) and the private noise scale (ε₂); _sd and _moe come from the latter
        binding.phase(sess, op.name, f"drawing noise for {n_keys:,} cells")
        rv = rel.mechanism.release_table(data.truth, data.ss, sess.rng, rel.level,
                                         grid=rel.grid)
        out = assemble(keys.to_polars().select(by_list) if by_list else None,
                       [Measure(rel.label, rv.estimate, rv.sd, rv.moe, rv.lower, rv.upper)],
                       form=rel.form, cv=rel.cv, key_dtypes=data.key_dtypes)
        confidential = {
            "rows_read": data.rows_read,
            "rows_outside_keys": data.rows_outside,
            "rows_in_released_cells": data.rows_released,
            "units_left_out_by_budget": data.units_left_out,
            # as a sum's: `left_out_by_table` and `max_left_out` read the share of rows
            "rows_left_out_by_budget": data.rows_left_out,
            "values_clipped_to_bounds": data.clipped,
            **({f"missing_values_{rel.nulls}:{rel.column}": data.missing}
               if rel.nulls != "error" else {}),
        }
        lo, hi = rel.bounds
        record = QueryRecord(
            index=len(sess.records) + 1, name=op.name, kind=rel.kind, measures=(rel.label,),
            by=tuple(by_list), mechanism=rel.policy,  # type: ignore[arg-type]
            keys={**keys.to_dict(), "bounds": [lo, hi], "q": rel.q}, level=rel.level,
            nulls=rel.nulls, losses=data.losses, confidential=confidential)
        backend.record_quantile(rel, record, data)
    finally:
        backend.close(None)
    if op.one_off:
        sess.set_as_last()
    return backend.output(rel, out)


def quantile_backend(rel: PlannedQuantile) -> Backend:
    """The Polars backend of a median or quantile (streaming or in memory).

    Args:
        rel: The planned release.

    Returns:
        A `StreamingBackend` for a session without per-row state, else a `MemoryBackend`.

    Example:
        >>> import polars as pl, tabdp
        >>> rel = plan_quantile(pl.LazyFrame({"c": ["a"], "x": [1.0]}), tabdp.Session(),
        ...                     column="x", q=0.5, median=True, by="c",
        ...                     keys=tabdp.KeySet.from_dict(c=["a"]), bounds=(0, 10), epsilon=1.0)
        >>> quantile_backend(rel).engine
        'streaming'
    """
    return StreamingBackend([]) if polars_engine(rel.op.session) == "streaming" \
        else MemoryBackend()
