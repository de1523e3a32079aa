"""``consistent = true`` in a release spec: the table and its direct rollups as one set.

The run releases the table and every ``direct = true`` rollup as before (each charged to every
unit in it); then, instead of publishing the rollups as sums and the direct levels in
``_direct`` files, it publishes every level (the table's own file and ``<table>__<level>``) from
the GLS consistent estimate of [`tabdp.hierarchy.consistent`][tabdp.hierarchy.consistent]:
post-processing, no further privacy cost. The plan states the expected sd per level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from tabdp.exceptions import InvalidParameterError
from tabdp.hierarchy import certified_margins, consistent, expected_sd
from tabdp.hierarchy.consistent import (
    METHOD_CERTIFIED,
    METHOD_GAUSSIAN,
    METHOD_STABLE,
    cell_weights,
    expected_margin,
)
from tabdp.mechanisms import DiscreteAdditiveMechanism, Mechanism
from tabdp.release.spec import ReleaseSpec, TableSpec, read_keys


def _hierarchies(spec: ReleaseSpec) -> dict[str, pl.DataFrame]:
    return {h.name: h.mapping.select(list(h.levels)) for h in spec.hierarchies.values()}


def consistent_levels(spec: ReleaseSpec, t: TableSpec,
                      mech: Mechanism | Mapping[tuple[str, ...], Mechanism],
                      measures: Sequence[str],
                      wide: pl.DataFrame, direct: Mapping[tuple[str, ...], pl.DataFrame],
                      targets: Mapping[str, pl.DataFrame | None], level: float,
                      grid: Mapping[str, Any]) -> dict[tuple[str, ...], pl.DataFrame]:
    """Every level of a consistent table (wide frames: keys, m, m_sd, m_moe, m_lower, m_upper).

    Args:
        spec: The spec (hierarchies).
        t: The table (``consistent = true``).
        mech: Its mechanism (every level released with it), or level ``by`` → mechanism.
        measures: The released measures.
        wide: The table's release.
        direct: Rollup ``by`` → its direct release.
        targets: Rollup label → target keys (``None``: the keys reached from the table).
        level: Confidence level.
        grid: Measure → grid step of the published estimates (exact additivity on it).

    Returns:
        ``by`` → wide frame, for the table and every rollup.

    Example:
        >>> consistent_levels.__name__
        'consistent_levels'
    """
    released = {tuple(t.by): wide, **{tuple(k): v for k, v in direct.items()}}
    outs = [tuple(t.by), *[tuple(r.by) for r in t.rollups]]
    keys = {tuple(r.by): tk for r in t.rollups if not r.direct
            and (tk := targets.get(r.label)) is not None}
    g = {m: float(v) for m, v in grid.items() if isinstance(v, (int, float))}
    return consistent(released, measures=list(measures), hierarchies=_hierarchies(spec),
                      mechanisms=mech, outputs=outs, level=level, grid=g or None,
                      output_keys=keys, nonnegative=t.nonnegative, integer=t.integer)


def biased_options(t: TableSpec) -> list[str]:
    """The biased post-processing options of a consistent table (public, from the spec).

    Args:
        t: A table.

    Returns:
        ``"nonnegative"`` and/or ``"integer"`` where the spec asks for them.

    Example:
        >>> from tabdp.release.spec import TableSpec
        >>> biased_options(TableSpec(name="t", kind="count", measures=(), by=("c",),
        ...                          consistent=True, integer=True))
        ['integer']
    """
    return [o for o in ("nonnegative", "integer") if getattr(t, o)]


def flag_biased(public: pl.DataFrame) -> pl.DataFrame:
    """Add the flag ``B`` (biased post-processing) to every cell of a published table.

    Args:
        public: A published (long) table.

    Returns:
        The table with ``B`` appended to every ``flag``.

    Example:
        >>> flag_biased(pl.DataFrame({"flag": ["", "C"]}))["flag"].to_list()
        ['B', 'CB']
    """
    return public.with_columns(pl.col("flag") + pl.lit("B"))


def consistent_method(mech: Mechanism, measure: str) -> str:
    """How the margins of a consistent table's cells are computed (public).

    Args:
        mech: The table's mechanism.
        measure: The measure.

    Returns:
        The method description.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> consistent_method(Gaussian(sigma=1.0), "x").startswith("exact: Gaussian")
        True
    """
    kind = cell_weights(mech, measure)[1]
    return {"gaussian": METHOD_GAUSSIAN, "stable": METHOD_STABLE, "other": METHOD_CERTIFIED}[kind]


def table_grid(t: TableSpec, mech: Mechanism, measures: Sequence[str]) -> dict[str, Any]:
    """The public grid step of each measure of a table (the summary's ``grid``).

    The table's ``grid``, else the mechanism's default grid, else 1 (discrete mechanisms).

    Args:
        t: A table.
        mech: Its mechanism.
        measures: Its released measures.

    Returns:
        Measure → grid step (a number, or a label such as a relative grid).

    Example:
        >>> from tabdp.mechanisms import DiscreteGaussian
        >>> from tabdp.release.spec import TableSpec
        >>> table_grid(TableSpec(name="t", kind="count", measures=(), by=("c",)),
        ...            DiscreteGaussian(sigma=2.0), ["count"])
        {'count': 1.0}
    """
    out: dict[str, Any] = {}
    for m in measures:
        g = t.grid.get(m) if isinstance(t.grid, Mapping) else t.grid
        if g is None:
            mm: Any = mech
            if getattr(mm, "joint", False):
                mm = mm.measure_mechanism(m)
            g = mm.default_grid()
        if g is None:  # discrete mechanisms: exact integers
            g = 1.0
        out[m] = float(g) if isinstance(g, (int, float)) else g
    return out


def _table_key_frame(spec: ReleaseSpec, t: TableSpec) -> pl.DataFrame:
    if t.keys_file is not None:
        return read_keys(t.keys_file, t.by, spec.domains)
    frame = pl.DataFrame()
    for c in t.by:
        col = pl.DataFrame({c: spec.domains[c]})
        frame = col if frame.width == 0 else frame.join(col, how="cross")
    return frame


def plan_consistent(spec: ReleaseSpec, t: TableSpec, mech: Mechanism,
                    measures: Sequence[str],
                    level_mechs: Mapping[str, Mechanism] | None = None,
                    grid: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The plan's view of a consistent table: expected sd per level, from public inputs only.

    The expected sd is the published estimate's: on a grid, it includes the variance of the
    stochastic rounding of the finest cells (as the published ``sd`` does).

    Args:
        spec: The spec.
        t: A table with ``consistent = true``.
        mech: Its mechanism.
        measures: Its released measures.
        level_mechs: With ``shares``: measured level label → its mechanism.
        grid: Measure → the table's public grid step (default: `table_grid`).

    Returns:
        ``{"measured": [labels], "shares": {label: share} or None, "methods": {measure: str},
        "expected_sd": {measure: [{"level", "cells", "sd_median", "sd_max",
        "rollup_sd_median"}]}}`` (``expected_sd`` is ``None`` for α-stable noise, which has no
        sd). ``rollup_sd_median`` is the rollup plan's: every target spent on the table.

    Example:
        >>> plan_consistent.__name__
        'plan_consistent'
    """
    measured = [tuple(t.by), *[tuple(r.by) for r in t.rollups if r.direct]]
    outs = [tuple(t.by), *[tuple(r.by) for r in t.rollups]]
    keys = _table_key_frame(spec, t)
    labels = ["_".join(b) if b else "national" for b in measured]
    mechs: Mechanism | dict[tuple[str, ...], Mechanism] = mech
    if level_mechs:
        mechs = {b: level_mechs[lb] for b, lb in zip(measured, labels, strict=True)}
    opts = biased_options(t)
    out: dict[str, Any] = {
        "measured": labels,
        "options": opts,
        "biased_post_processing": (
            f"biased post-processing: {' and '.join(opts)} (the finest consistent cells "
            + ("set to 0 where negative" if "nonnegative" in opts else "")
            + (" and " if len(opts) == 2 else "")
            + ("rounded to whole numbers" if "integer" in opts else "")
            + "); every cell is flagged B; sd, moe, lower and upper are those of the "
            "unbiased consistent estimate (the rounding's variance included"
            + ("; the same table without nonnegative, ends raised to 0 where negative: an "
               "interval need not contain the clamped estimate" if "nonnegative" in opts
               else "") + ")"
            if opts else None),
        "shares": dict(t.shares) or None,
        # the mechanism of each measured level (public; post-processing of a finished run
        # reads it: tabdp.hierarchy.consistent_from_release)
        "mechanisms": {lb: (level_mechs[lb] if level_mechs else mech).to_dict()
                       for lb in labels},
        "methods": {m: consistent_method(mech, m) for m in measures},
        "expected_sd": {},
    }
    grids = table_grid(t, mech, measures) if grid is None else dict(grid)
    for m in measures:
        g = grids.get(m)
        try:
            sds = expected_sd(keys, measured, hierarchies=_hierarchies(spec), mechanisms=mechs,
                              outputs=outs, measure=m,
                              grid=float(g) if isinstance(g, (int, float)) else None)
        except InvalidParameterError:
            out["expected_sd"][m] = None
            continue
        var1 = cell_weights(mech, m)[0]  # the rollup plan: every target on the table
        # non-Gaussian noise: the certified margins, which depend on public inputs only
        cert = certified_margins(keys, measured, hierarchies=_hierarchies(spec),
                                 mechanisms=mechs, outputs=outs, measure=m,
                                 grid=float(g) if isinstance(g, (int, float)) else None,
                                 level=spec.release.level)
        # the published margin's method: on the integer lattice (discrete noise, whole grid)
        # the whole part of the certified margin, else z x sd (as `consistent` publishes it)
        lattice = isinstance(g, (int, float)) and float(g).is_integer() and all(
            isinstance(x, DiscreteAdditiveMechanism)
            for x in ((level_mechs or {}).values() or [mech]))
        fin = sds[tuple(t.by)]
        rows = []
        for o in outs:
            s = sds[o]["sd"].to_numpy()
            # the rollup plan: sd of the sum of the finest cells below each cell
            n_fin = _finest_counts(keys, o, t.by, spec)
            rows.append({"level": "_".join(o) if o else "national", "cells": int(s.size),
                         "sd_median": float(np.median(s)) if s.size else 0.0,
                         "sd_max": float(np.max(s)) if s.size else 0.0,
                         "moe_median": float(np.median(cert[o])) if cert is not None
                         and s.size else float(expected_margin(
                             float(np.median(s)) if s.size else 0.0, spec.release.level,
                             lattice=lattice)),
                         "rollup_sd_median": float(np.median(np.sqrt(n_fin * var1)))
                         if n_fin.size else 0.0})
        del fin
        out["expected_sd"][m] = rows
    return out


def _finest_counts(keys: pl.DataFrame, level: tuple[str, ...], by: Sequence[str],
                   spec: ReleaseSpec) -> np.ndarray:
    """Number of finest cells below each cell of ``level`` that has at least one."""
    frame = keys
    for col in level:
        if col in frame.columns:
            continue
        for h in spec.hierarchies.values():
            # the hierarchy that maps a by column to col (alternative hierarchies may share
            # col and hold different finer levels; shared levels map alike in each)
            if col in h.levels and any(c in h.levels for c in by):
                fine = next(c for c in by if c in h.levels)
                m = h.mapping.select(fine, col).unique()
                m = m.with_columns(pl.col(fine).cast(frame.schema[fine], strict=False))
                frame = frame.join(m, on=fine, how="left")
                break
    if not level:
        return np.array([float(frame.height)])
    return frame.group_by(list(level)).len()["len"].cast(pl.Float64).to_numpy()


def consistent_outlook(spec: ReleaseSpec, t: TableSpec, totals: Sequence[float],
                       cv_flag: float | None) -> dict[str, Any] | None:
    """Flag forecasts of a consistent table's published cells, level by level (public).

    A published cell of a consistent table is the GLS estimate, not one level's release: its
    forecast uses the estimate's expected sd at that level (median over the level's cells,
    from each measured level's own mechanism under ``shares``), as a Gaussian error of that sd
    (exact for Gaussian mechanisms; the normal approximation otherwise), on the table's grid
    with the unbiased (stochastic) rounding the consistent estimate publishes
    (`tabdp.planning._stochastically_rounded_rows`: exact for a cell summing one range of a
    rounding block, e.g. every finest cell; the lattice and variance of the rounding of a
    cell summing several, its law approximated), never negative with ``nonnegative``.

    Args:
        spec: The spec.
        t: A consistent table.
        totals: Planned cell totals.
        cv_flag: The flag threshold.

    Returns:
        ``{"flag_curve": the table's own cells', "levels": [{"level", "sd", "flag_curve"}]}``,
        or ``None`` (no sd: α-stable noise, or a table that is not consistent).

    Example:
        >>> consistent_outlook.__name__
        'consistent_outlook'
    """
    from tabdp.planning import _cells, _stochastically_rounded_rows

    if not t.consistent:
        return None
    from tabdp.release._levels import _measured_labels, _released_measures, _table_mechanism

    measures = _released_measures(t)
    lm = {lb: _table_mechanism(t, lb) for lb in _measured_labels(t)} if t.shares else None
    plan = plan_consistent(spec, t, _table_mechanism(t), measures, lm)
    rows = plan["expected_sd"].get(measures[0])
    if not rows:
        return None
    levels = []
    q = _cells(list(totals))
    # the grid the finest cells are rounded to without bias (`consistent`: integer = true
    # rounds to whole numbers); a label (a relative grid) is not a step: unrounded
    g = 1.0 if t.integer else table_grid(t, _table_mechanism(t), measures).get(measures[0])
    step = float(g) if isinstance(g, (int, float)) and not isinstance(g, bool) else None
    for r in rows:
        sd = float(r["sd_median"])
        # published cells are on the grid, stochastically rounded (not nearest-point rounded):
        # an empty cell's estimate is 0 more often, negative less often than the unrounded
        # law says (review fc64: discrete Gaussian counts, sd 2 on grid 1, 50.0% forecast
        # negative at a total of 0, 41% are); with nonnegative, never negative
        fc = _stochastically_rounded_rows(sd, step, q, cv_flag, nonnegative=bool(
            t.nonnegative)) if sd > 0 else None
        levels.append({"level": r["level"], "sd": sd, "flag_curve": fc})
    return {"flag_curve": levels[0]["flag_curve"], "levels": levels}
