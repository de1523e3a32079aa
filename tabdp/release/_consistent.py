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
from tabdp.hierarchy import consistent, expected_sd
from tabdp.hierarchy.consistent import METHOD_GAUSSIAN, METHOD_NORMAL, METHOD_STABLE, cell_weights
from tabdp.mechanisms import Mechanism
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
                      output_keys=keys)


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
    return {"gaussian": METHOD_GAUSSIAN, "stable": METHOD_STABLE, "other": METHOD_NORMAL}[kind]


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
                    level_mechs: Mapping[str, Mechanism] | None = None) -> dict[str, Any]:
    """The plan's view of a consistent table: expected sd per level, from public inputs only.

    Args:
        spec: The spec.
        t: A table with ``consistent = true``.
        mech: Its mechanism.
        measures: Its released measures.
        level_mechs: With ``shares``: measured level label → its mechanism.

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
    out: dict[str, Any] = {
        "measured": labels,
        "shares": dict(t.shares) or None,
        "methods": {m: consistent_method(mech, m) for m in measures},
        "expected_sd": {},
    }
    for m in measures:
        try:
            sds = expected_sd(keys, measured, hierarchies=_hierarchies(spec), mechanisms=mechs,
                              outputs=outs, measure=m)
        except InvalidParameterError:
            out["expected_sd"][m] = None
            continue
        var1 = cell_weights(mech, m)[0]  # the rollup plan: every target on the table
        fin = sds[tuple(t.by)]
        rows = []
        for o in outs:
            s = sds[o]["sd"].to_numpy()
            # the rollup plan: sd of the sum of the finest cells below each cell
            n_fin = _finest_counts(keys, o, t.by, spec)
            rows.append({"level": "_".join(o) if o else "national", "cells": int(s.size),
                         "sd_median": float(np.median(s)) if s.size else 0.0,
                         "sd_max": float(np.max(s)) if s.size else 0.0,
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
            if col in h.levels:
                fine = next(c for c in by if c in h.levels)
                m = h.mapping.select(fine, col).unique()
                m = m.with_columns(pl.col(fine).cast(frame.schema[fine], strict=False))
                frame = frame.join(m, on=fine, how="left")
                break
    if not level:
        return np.array([float(frame.height)])
    return frame.group_by(list(level)).len()["len"].cast(pl.Float64).to_numpy()
