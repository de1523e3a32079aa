"""Plan and run a release spec: the engine behind ``tabdp plan`` and ``tabdp run``.

A run reads the confidential input once per release (Polars scans it lazily), releases every
table with its mechanism, derives the rollups as post-processing, applies the publication rules
and writes two folders *atomically*: everything is built in temporary folders next to the
targets and renamed into place at the end, so a failure leaves nothing public behind and an
existing output is only replaced with ``overwrite=True``. The input is never modified.

Records, not positions: without ``input.unit`` every row gets a row id (`ROW_ID`) as the
input is read, before any join, filter or sort, and the session follows that id.

Failures: everything checkable without data is checked first (ordinary exceptions). Once the
data has been read, any failure becomes one
[`DataDependentFailure`][tabdp.release.DataDependentFailure] with a fixed message; its details go
only to ``failure.json`` in the confidential folder.

* Public folder: one Parquet per table and rollup (``output.form = "long"``, the default:
  ``keys, measure, estimate, sd, moe, lower, upper, cv, flag``; ``"wide"``: keys, then ``m,
  m_sd, m_moe, m_lower, m_upper, m_cv, m_flag`` per measure; the accessor's output model,
  `tabdp.frame._output`), ``manifest.json``, ``summary.json``, a self-contained
  ``summary.html`` and, for a seeded test run, ``NOT_FOR_PUBLICATION.txt``. Apart from the
  noisy estimates (and what is computed from them: plug-in sd, moe, cv, flags), nothing in it
  depends on the confidential data or on the seed; every file has the manifest's timestamp
  as its modification time.
* Confidential folder (0700, files 0600): ``per_record_losses.parquet`` (each unit's total ρ,
  ε, size, (ε, δ) and per-release ρ; the id column is the unit column, or ``row``),
  ``worst_cells.parquet`` (the largest loss of one unit in each released cell),
  ``confidential.json`` (counts of rows read, outside the key sets, handled by the input rules,
  the seed of a seeded run, the data's schema) and ``confidential_report.html``; after a failed
  run, only ``failure.json``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from tabdp.exceptions import (
    CoverageWarning,
    DataValidationError,
    InvalidParameterError,
    SpecError,
    TabdpError,
)
from tabdp.frame._output import LONG_COLUMNS, STAT_SUFFIXES, WIDE_SUFFIXES, long_to_wide
from tabdp.frame.keys import KeySet
from tabdp.mechanisms import Mechanism
from tabdp.planning import published_usability, spec_outlook, spec_usability_issues, upper_3g
from tabdp.privacy.ledger import PER_RECORD_PARQUET, UnitLosses
from tabdp.privacy.session import Session, total_policy_curve
from tabdp.release._input import scan_input
from tabdp.release.curator_config import SCHEMA_DTYPES
from tabdp.release.publish import COLUMN_DOCS, FLAG_CODES, publish
from tabdp.release.rollup import rollup
from tabdp.release.spec import ReleaseSpec, RollupSpec, TableSpec, read_keys, spec_keys_hint

__all__ = ["ReleaseResult", "plan_summary", "curve_in_words", "publishable_in_words",
           "write_plan", "run_release", "NATIONAL", "ROW_ID", "DataDependentFailure",
           "declared_schema", "clean_stale_staging", "FAILURE_FILE", "NOT_FOR_PUBLICATION"]

#: Name of the constant key column used internally for national (``by = []``) releases.
NATIONAL = "_tabdp_national"
#: Row id column assigned when the input is read, before any join, filter or sort; the
#: privacy unit when the spec has no ``input.unit`` (each row is a unit).
ROW_ID = "__tabdp_row"
#: Name of the row id in the confidential per-record report (position in the input as read).
ROW_LABEL = "row"

Progress = Callable[[int, int, str], None]


def _no_progress(i: int, n: int, what: str) -> None:
    return None


@dataclass
class ReleaseResult:
    """Where a run wrote its outputs.

    Attributes:
        public: The public folder.
        confidential: The confidential folder.
        files: Public file names written.
        tables: Release name → public table (in the spec's ``output.form``: long by
            default), for callers in Python.
        coverage: Curator mode only (empty in author mode): warnings that the input is empty
            or that rows fall outside a table's key set; they depend on the data (for the
            curator's terminal, never for a public file). Counts are in ``confidential.json``.
        left_out: CONFIDENTIAL, curator mode only (empty in author mode): per released table,
            what the budget's individual filter left out (`left_out_by_table()`), as in
            ``confidential.json``.
    """

    public: Path
    confidential: Path
    files: list[str]
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    coverage: list[str] = field(default_factory=list)
    left_out: dict[str, dict[str, Any]] = field(default_factory=dict)


# -- planning (no data) -----------------------------------------------------------------------

def _transformation(mech: Mechanism) -> bool:
    from tabdp.mechanisms.transformation import TransformationMechanism

    return isinstance(mech, TransformationMechanism)


def _planned_grid(t: TableSpec, mech: Mechanism) -> dict[str, Any]:
    """The grid each measure is released on: the spec's, else the mechanism's default.

    This is the grid the plan and the manifest state. It is decided without the data's schema,
    so the accessor's whole-number default for integer columns does not apply to a spec.
    """
    out: dict[str, Any] = {}
    for m in _released_measures(t):
        g = t.grid.get(m) if isinstance(t.grid, Mapping) else t.grid
        if g is None:
            g = _measure_mechanism(mech, m).default_grid()
        out[m] = g if isinstance(g, (int, float)) and not isinstance(g, bool) else None
    return out


def _released_measures(t: TableSpec) -> list[str]:
    return list(t.measures) if t.kind == "sum" else ["count"]


def _charges(mechanism: Mechanism, t: TableSpec) -> int:
    return 1 if getattr(mechanism, "joint", False) else len(_released_measures(t))


def _measure_mechanism(mechanism: Mechanism, m: str) -> Mechanism:
    if getattr(mechanism, "joint", False):
        # joint mechanisms (VectorSubbotin) have one; the base Mechanism does not declare it
        return mechanism.measure_mechanism(m)  # type: ignore[attr-defined]
    return mechanism


def _table_mechanism(t: TableSpec) -> Mechanism:
    """The mechanism actually used (counts: exact integer counterparts, see count_mechanism)."""
    from tabdp.frame import count_mechanism

    if t.kind == "count":
        return count_mechanism(t.mechanism, t.grid)
    return t.mechanism


def _key_count(spec: ReleaseSpec, cols: Sequence[str], keys_file: Path | None = None) -> int:
    if keys_file is not None:
        return _read_table(keys_file).unique().height
    n = 1
    for c in cols:
        n *= len(spec.domains[c])
    return n


def _read_table(path: Path) -> pl.DataFrame:
    if path.suffix.lower() == ".csv":
        return pl.read_csv(path, infer_schema=False)
    return pl.read_parquet(path)


def _file_name(t: TableSpec, r: RollupSpec | None = None, direct: bool = False) -> str:
    if r is None:
        return f"{t.name}.parquet"
    return f"{t.name}__{r.label}{'_direct' if direct else ''}.parquet"


def _expected_error(mech: Mechanism, totals: Sequence[float], level: float
                    ) -> list[dict[str, float | None]]:
    x = np.asarray(totals, dtype=np.float64)
    sd = mech.sd_at(x)
    moe = mech.moe_at(x, level)
    rows = []
    for t, s, e in zip(x, np.broadcast_to(sd, x.shape), np.broadcast_to(moe, x.shape),
                       strict=True):
        rows.append({"total": float(t), "sd": _finite(s), "moe": _finite(e),
                     "rel_moe": _finite(e / t) if t > 0 else None})
    return rows


def _finite(x: Any) -> float | None:
    v = float(x)
    return v if np.isfinite(v) else None


def _rollup_methods(mech: Mechanism, measures: Sequence[str], level: float) -> dict[str, str]:
    """The public description of how rollup margins of error are computed, per measure."""
    from tabdp.release.rollup import sum_error_law

    out = {}
    for m in measures:
        mm = _measure_mechanism(mech, m)
        try:
            _, method = sum_error_law(mm, np.array([2]), level)
        except TabdpError:
            method = ("normal approximation (plug-in sd; errors of transformation mechanisms "
                      "are not identically distributed)")
        out[m] = method
    return out


def _size_text(size: float) -> str:
    return f"{size:,.0f}" if size >= 1 and size == round(size) else f"{size:g}"


def _loss_text(row: Mapping[str, Any], delta: float | None) -> str:
    rho = row.get("rho")
    if rho is None:
        return "has no finite rho bound"
    text = f"loses at most rho = {upper_3g(rho)}"  # bounds: rounded up, never down
    pure, approx = row.get("epsilon"), row.get("epsilon_delta")
    extra = []
    if pure is not None:
        extra.append(f"pure epsilon = {upper_3g(pure)}")
    if approx is not None and (pure is None or approx < 0.99 * pure):
        extra.append(f"epsilon = {upper_3g(approx)} at delta = {delta:g}")
    return text + (f" ({'; '.join(extra)})" if extra else "")


def _few(sizes: Sequence[float], k: int = 4) -> list[float]:
    """At most ``k`` of ``sizes``, spread over the list (first and last included)."""
    s = sorted(float(x) for x in sizes)
    if len(s) <= k:
        return s
    return [s[i] for i in sorted({round(j * (len(s) - 1) / (k - 1)) for j in range(k)})]


def curve_in_words(curve: Sequence[Mapping[str, Any]], delta: float | None, *,
                   unit: str = "record", where: str = "",
                   count_rows: int | None = None) -> list[str]:
    """Plain-language statements of a policy curve, one per record size.

    Public: a policy curve is a function of the mechanisms and record sizes only.

    Args:
        curve: Rows ``{"delta", "rho", "epsilon"[, "epsilon_delta"]}`` (a plan's
            ``table_policy_curve`` or ``total_policy_curve``).
        delta: The release's δ (for ``epsilon_delta``; ``None`` when the curve has none).
        unit: What a record is called (the spec's unit column, or ``"record"``).
        where: Words closing each sentence, e.g. ``" in this table"``.
        count_rows: For count tables: the rows per cell the curve assumes (one sentence,
            whatever the size).

    Returns:
        The sentences.

    Example:
        >>> curve_in_words([{"delta": 1e3, "rho": 0.5, "epsilon": None,
        ...                  "epsilon_delta": 4.1}], 1e-9)
        ['a record of size 1,000 loses at most rho = 0.5 (epsilon = 4.1 at delta = 1e-09)']
    """
    if count_rows is not None and curve:
        return [f"every {unit} (at most {count_rows} row(s) counted per cell) "
                f"{_loss_text(curve[0], delta)}{where}"]
    return [f"a {unit} of size {_size_text(float(r['delta']))} {_loss_text(r, delta)}{where}"
            for r in curve]


class _AtRows:
    """A count mechanism's policy evaluated at a fixed number of rows, whatever the size."""

    def __init__(self, mechanism: Mechanism, rows: float) -> None:
        self.m = mechanism
        self.rows = rows
        self.joint = False
        self.dp_delta = mechanism.dp_delta
        self.gaussian_dp = mechanism.gaussian_dp

    def _at(self, d: Any) -> np.ndarray:
        return np.full(np.shape(d), self.rows)

    def rho(self, d: Any) -> np.ndarray:
        return np.asarray(self.m.rho(self._at(d)), dtype=np.float64)

    def epsilon(self, d: Any) -> np.ndarray:
        return np.asarray(self.m.epsilon(self._at(d)), dtype=np.float64)

    def approx_policy(self, d: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.m.approx_policy(self._at(d))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.m, name)


def plan_summary(spec: ReleaseSpec) -> dict[str, Any]:
    """The public summary of a spec: mechanisms, parameters, policy curves, expected errors.

    Reads no data. ``tabdp plan`` writes it; ``tabdp run`` writes the same content (plus the
    list of files) as ``summary.json``.

    Args:
        spec: A validated spec.

    Returns:
        A JSON-serializable dict (the layout
        [`render_summary_html`][tabdp.report.render_summary_html] renders).

    Example:
        >>> from tabdp.release.spec import load_spec
        >>> from tabdp.release.runner import plan_summary
        >>> import tabdp, pathlib
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> s = plan_summary(load_spec(root / "examples" / "cbp_release.toml"))
        >>> s["tables"][0]["name"], s["total_policy_curve"][0]["delta"]
        ('county_naics2_payroll', 1.0)
    """
    from tabdp._version import __version__

    sizes = list(spec.plan.record_sizes)
    level = spec.release.level
    delta = spec.release.delta
    tables = []
    outlook = {o["table"]: o for o in spec_outlook(spec)}
    issues = spec_usability_issues(spec)
    unit = "unit" if spec.input.unit else "record"
    entries: list[tuple[Mechanism, int]] = []
    rows = float(spec.plan.count_rows)
    # A unit touches at most max_cells cells of a table (enforced with a unit; one cell per
    # table for row units) and counts at most plan.count_rows rows in a count cell (enforced).
    cells = spec.input.max_cells or 1
    for t in spec.tables:
        mech = _table_mechanism(t)
        k = _charges(mech, t) * cells
        measures = _released_measures(t)
        direct = [r for r in t.rollups if r.direct]
        one = total_policy_curve([(mech, 1)], sizes, delta)
        if t.kind == "count":
            # A unit's sensitivity in a count cell is its number of rows there, not its size:
            # the planned curves assume `plan.count_rows` rows whatever the unit's size.
            entry: Any = (_AtRows(mech, rows), k)
        else:
            entry = (mech, k)
        entries += [entry] * (1 + len(direct))
        per_table = total_policy_curve([entry], sizes, delta)
        per_table_all = total_policy_curve([(entry[0], k * (1 + len(direct)))], sizes, delta)
        cal = None
        if t.calibration is not None:
            cal = {
                "family": t.calibration["family"],
                "targets": {str(float(s)): float(r) for s, r in
                            t.calibration["targets"].items()},
                "achieved": {str(float(s)): float(mech.rho(float(s))) for s in
                             t.calibration["targets"]},
                "typical_total": float(t.calibration["typical_total"]),
                "fixed": dict(t.calibration.get("fixed") or {}),
                "objective": t.calibration.get("objective", "auto"),
            }
        grid: dict[str, Any] = {}
        for m in measures:
            g = t.grid.get(m) if isinstance(t.grid, dict) else t.grid
            if g is None:
                g = _measure_mechanism(mech, m).default_grid()
            if g is None:  # discrete mechanisms: exact integers
                g = 1.0
            grid[m] = float(g) if isinstance(g, (int, float)) else g
        rollups = []
        for r in t.rollups:
            rollups.append({
                "by": list(r.by), "label": r.label, "file": _file_name(t, r),
                "cells": _key_count(spec, r.by) if all(c in spec.domains for c in r.by) else None,
                "moe_method": _rollup_methods(mech, measures, level),
                "direct": r.direct,
                "direct_file": _file_name(t, r, direct=True) if r.direct else None,
            })
        tables.append({
            "name": t.name, "kind": t.kind, "measures": measures, "by": list(t.by),
            "cells": _key_count(spec, t.by, t.keys_file),
            "keys": "allowed combinations file" if t.keys_file else "cross product of domains",
            "file": _file_name(t),
            "mechanism": mech.to_dict(),
            "guarantee": UnitLosses.guarantee_of(mech),
            "calibration": cal,
            "grid": grid,
            "grid_applies_to": ("the noisy transformed value (the estimator is applied after "
                                "rounding)" if _transformation(mech) else "the estimate"),
            "null_policy": t.nulls,
            "publication": {"cv_flag": t.publication.cv_flag,
                            "suppress_cv": t.publication.suppress_cv,
                            "negative": t.publication.negative,
                            "round": (dict(t.publication.round)
                                      if isinstance(t.publication.round, Mapping)
                                      else t.publication.round)},
            "policy_curve": one,
            "table_policy_curve": per_table,
            "table_policy_curve_with_direct_rollups": per_table_all,
            "expected_error": {m: _expected_error(
                _measure_mechanism(mech, m),
                spec.plan.count_totals if t.kind == "count" else spec.plan.cell_totals, level)
                for m in measures},
            "rollups": rollups,
            "guarantee_in_words": [
                line for m in (measures if t.kind == "sum" and len(measures) > 1
                               and not getattr(mech, "joint", False) else [None])
                for line in curve_in_words(
                    total_policy_curve(
                        [entry if m is None else (_measure_mechanism(mech, m), cells)],
                        sorted(float(s) for s in t.calibration["targets"])
                        if t.calibration is not None else _few(sizes), delta),
                    delta, unit=unit,
                    where=(f" in this table{_per_cell_note(spec)}" if m is None else
                           f" in this table's {m} cells (size: its {m})"
                           f"{_per_cell_note(spec)}"),
                    count_rows=spec.plan.count_rows if t.kind == "count" else None)],
            "forecast": outlook[t.name]["flag_curve"],
            "usability_issues": outlook[t.name]["issues"],
        })
    return {
        "tabdp_version": __version__,
        "release": {"name": spec.release.name, "title": spec.release.title,
                    "description": spec.release.description, "level": level,
                    "delta": delta},
        "unit": spec.input.unit or "row",
        "randomness": ("secure (OS CSPRNG)" if spec.seed is None else
                       "seeded: NOT FOR PRODUCTION (the seed is in the confidential folder)"),
        "not_for_publication": spec.seed is not None,
        "budget": None if spec.budget is None else _budget_dict(spec),
        "input_policies": {"mode": spec.input.mode, "nulls": spec.input.nulls,
                           "negatives": spec.input.negatives,
                           "nonfinite": spec.input.nonfinite,
                           "bounds": {m: list(b) for m, b in spec.input.bounds.items()},
                           "unit_nulls": spec.input.unit_nulls},
        "record_sizes": [float(s) for s in sizes],
        "count_rows_assumed": spec.plan.count_rows,
        "contribution_bounds": {
            "max_cells_per_table": 1 if spec.input.unit is None else spec.input.max_cells,
            "max_rows_per_count_cell": 1 if spec.input.unit is None else spec.plan.count_rows},
        "curves_hold_for": _curves_hold_for(spec),
        "tables": tables,
        "total_policy_curve": (total := total_policy_curve(entries, sizes, delta)),
        "budget_check": _budget_check(spec, total),
        "left_out_sizes": (lo_sizes := left_out_sizes(spec)),
        "left_out_in_words": ([LEFT_OUT_BIAS_TEXT, *left_out_sizes_in_words(lo_sizes, unit)]
                              if spec.budget is not None else []),
        "guarantee_in_words": release_guarantee_in_words(spec, unit),
        "usability_issues": [{"path": p, "message": m} for p, m in issues],
        "flag_codes": dict(FLAG_CODES),
        "columns": dict(COLUMN_DOCS),
    }


def _budget_check(spec: ReleaseSpec, total: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Planned worst-case total ρ against the budget at each record size (empty without one).

    A size where the planned total is above the limit is not an error (real units rarely
    contribute their size to every cell), but such units may reach their budget at run time.
    """
    if spec.budget is None:
        return []
    from tabdp.privacy.budget import Budget

    b = Budget(spec.budget.rho)
    rows = []
    for row in total:
        limit = float(b.limit(row["delta"]))
        rho = row["rho"]
        rows.append({"delta": row["delta"], "planned_rho": rho, "limit": limit,
                     "exceeds": rho is None or rho > limit})
    return rows


def _per_cell_note(spec: ReleaseSpec) -> str:
    """Words qualifying a one-cell statement where a unit may touch several cells of a table."""
    if spec.input.unit is None:
        return ""  # a row is in one cell of each table
    if spec.input.max_cells is None:
        return (" per cell (input.max_cells is not set: a unit in several cells of a table "
                "loses this in each)")
    return (f" (contributing it to each of up to {spec.input.max_cells} cells of a table: "
            "input.max_cells)")


def _eps_words(rho: float, eps: float | None, delta: float | None) -> str:
    """ρ, and ε: pure where finite, else at δ (ρ-zCDP conversion, an upper bound)."""
    from tabdp.privacy.conversions import zcdp_epsilon

    if not math.isfinite(rho):
        return "has no finite rho bound"
    text = f"loses at most rho = {upper_3g(rho)}"  # bounds: rounded up, never down
    if eps is not None and math.isfinite(eps):
        return text + f" (pure epsilon = {upper_3g(eps)})"
    if delta is not None:
        eps_d = upper_3g(float(zcdp_epsilon(rho, delta)))
        return text + f" (epsilon = {eps_d} at delta = {delta:g})"
    return text


def _measure_sizes(spec: ReleaseSpec, currency: str) -> list[float]:
    """Sizes of a currency's statements: its tables' calibration targets, else plan sizes."""
    pts = sorted({float(s) for t in spec.tables if t.calibration is not None
                  and currency in _released_measures(t) for s in t.calibration["targets"]})
    return pts or _few(spec.plan.record_sizes)


def release_guarantee_in_words(spec: ReleaseSpec, unit: str = "unit") -> list[str]:
    """Public: the whole release's guarantee per currency and per record type, never mixing sizes.

    Losses add over the tables of one currency at one size (a measure's own size, ``rows``
    for counts); across currencies they add each at its own size. Per currency: the loss of a
    unit contributing a size to one cell of every table of that currency. Per record type
    (where every summed measure has calibration targets, as many for each): the i-th target of
    each measure together. Pure ε where finite, else ε at the release's δ.

    Args:
        spec: A validated spec.
        unit: What a unit is called.

    Returns:
        The sentences.

    Example:
        >>> from tabdp.release.spec import load_spec
        >>> import tabdp, pathlib
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> w = release_guarantee_in_words(load_spec(root / "examples" / "cbp_release.toml"),
        ...                                "establishment")
        >>> w[-3][:70]
        'an establishment with payroll 250,000 and employment 5 (and 1 row(s) p'
    """
    from tabdp.privacy.budget import ROWS_CURRENCY

    delta = spec.release.delta
    a = "an" if unit[:1].lower() in "aeio" else "a"
    note = _per_cell_note(spec)
    per: dict[str, list[tuple[str, _Charge]]] = {}
    for name, charge in _released_charges(spec):
        for c, ch in charge.items():
            per.setdefault(c, []).append((name, ch))

    def at(c: str, size: float) -> tuple[float, float | None]:
        rho = sum(float(ch(np.array([size]))[0]) for _, ch in per[c])
        eps = 0.0
        for _, ch in per[c]:
            at_s = size if ch.rows is None else ch.rows
            e = float(np.asarray(ch.mechanism.epsilon(np.array([at_s])))[0]) * ch.k
            eps += e
        return rho, (eps if math.isfinite(eps) else None)

    lines = []
    sizes = {c: _measure_sizes(spec, c) for c in per if c != ROWS_CURRENCY}
    for c, rels in per.items():
        names = list(dict.fromkeys(n for n, _ in rels))
        tables = ", ".join(names)
        each = "this table" if len(names) == 1 else "each of these tables"
        if c == ROWS_CURRENCY:
            rho, eps = at(c, float(spec.plan.count_rows))
            lines.append(f"counts ({tables}): {a} {unit} counted {spec.plan.count_rows} row(s) "
                         f"in a cell of {each} {_eps_words(rho, eps, delta)}{note}")
            continue
        for s in sizes[c]:
            rho, eps = at(c, s)
            lines.append(f"{c} ({tables}): {a} {unit} contributing {_size_text(s)} of {c} to a "
                         f"cell of {each} {_eps_words(rho, eps, delta)}{note}")
    n = {len(v) for v in sizes.values()}
    calibrated = all(any(t.calibration is not None and c in _released_measures(t)
                         for t in spec.tables) for c in sizes)
    if sizes and calibrated and len(n) == 1:
        for i in range(n.pop()):
            parts = [(c, v[i]) for c, v in sizes.items()]
            rho = 0.0
            eps_tot: float | None = 0.0
            for c, s in parts:
                r, e = at(c, s)
                rho += r
                eps_tot = eps_tot + e if e is not None and eps_tot is not None else None
            if ROWS_CURRENCY in per:
                r, e = at(ROWS_CURRENCY, float(spec.plan.count_rows))
                rho += r
                eps_tot = eps_tot + e if e is not None and eps_tot is not None else None
            what = " and ".join(f"{c} {_size_text(s)}" for c, s in parts)
            rows = (f" (and {spec.plan.count_rows} row(s) per count cell)"
                    if ROWS_CURRENCY in per else "")
            lines.append(f"{a} {unit} with {what}{rows} {_eps_words(rho, eps_tot, delta)}"
                         f"{note} over the whole release (each measure's loss at its own size)")
    lines.append("Losses are never added across currencies at one number: a unit's total is "
                 "the sum of its losses in each currency, each at its size there.")
    return lines


#: Sizes where the plan looks for left-out units: 1 to 1e13, 40 points per decade.
_LEFT_OUT_GRID = 10.0 ** np.linspace(0.0, 13.0, 521)


class _Charge(NamedTuple):
    """A release's planned ρ in one currency.

    ``k`` times the policy at the size (or at ``rows`` rows for counts, whatever the size).
    """

    mechanism: Any
    k: int
    rows: float | None = None

    def __call__(self, sizes: np.ndarray) -> np.ndarray:
        at = sizes if self.rows is None else np.full(np.shape(sizes), self.rows)
        return np.asarray(self.mechanism.rho(at), dtype=np.float64) * self.k


def _released_charges(spec: ReleaseSpec) -> list[tuple[str, dict[str, _Charge]]]:
    """Per release in run order (each table, then its direct rollups): currency → charge.

    A unit touches at most ``max_cells`` cells of a table (1 without a bound); counts charge
    at ``plan.count_rows`` rows.
    """
    from tabdp.privacy.budget import ROWS_CURRENCY

    cells = spec.input.max_cells or 1
    out = []
    for t in spec.tables:
        mech = _table_mechanism(t)
        if t.kind == "count":
            charge = {ROWS_CURRENCY: _Charge(mech, cells, float(spec.plan.count_rows))}
        elif getattr(mech, "joint", False):
            charge = {"+".join(t.measures): _Charge(mech, cells)}
        else:
            charge = {m: _Charge(_measure_mechanism(mech, m), cells)
                      for m in _released_measures(t)}
        names = [t.name, *[f"{t.name}__{r.label}" for r in t.rollups if r.direct]]
        out += [(n, charge) for n in names]
    return out


def left_out_sizes(spec: ReleaseSpec) -> list[dict[str, Any]]:
    """Public: per released table and currency, the record sizes the budget leaves out.

    From the public curves alone (no data): a unit contributing ``size`` of a measure to
    ``max_cells`` cells (1 without a bound) of every table releasing that measure, and nothing
    of any other measure (counts: ``plan.count_rows`` rows per cell), is followed through the
    tables in the spec's order; each table's individual filter admits it while its loss so far
    plus the table's stays within the budget (under a curve budget: in that measure's own
    currency, at that size), and a unit left out of a table pays nothing there. Units that
    contribute more elsewhere (a constant budget sums every currency) or to more cells are
    left out at smaller sizes.

    Args:
        spec: A validated spec.

    Returns:
        Rows ``{"table", "currency", "left_out_from", "all_above", "plan_sizes_left_out"}``:
        the smallest size left out (``None``: no size up to 1e13; counts: ``0`` when a unit
        with ``plan.count_rows`` rows is left out), whether every larger size is left out too,
        and the spec's ``plan.record_sizes`` that are left out. Empty without a budget.

    Example:
        >>> from tabdp.release.spec import load_spec
        >>> import tabdp, pathlib
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> rows = left_out_sizes(load_spec(root / "examples" / "cbp_release.toml"))
        >>> rows[0]["table"], rows[0]["currency"], rows[0]["left_out_from"]
        ('county_naics2_payroll', 'payroll', None)
    """
    if spec.budget is None:
        return []
    from tabdp.privacy.budget import ROWS_CURRENCY, Budget

    b = Budget(spec.budget.rho)
    releases = _released_charges(spec)
    plan_sizes = np.asarray(sorted(float(x) for x in spec.plan.record_sizes), dtype=np.float64)
    grid = np.unique(np.concatenate([_LEFT_OUT_GRID, plan_sizes]))
    rows_at = float(spec.plan.count_rows)
    out: list[dict[str, Any]] = []
    focus = list(dict.fromkeys(c for _, ch in releases for c in ch))

    def simulate(f: str, sizes: np.ndarray) -> dict[str, np.ndarray]:
        """Per release charging currency f: left out at ``sizes`` in f (0 elsewhere)."""
        spent: dict[str, np.ndarray] = {}
        left: dict[str, np.ndarray] = {}
        zero = np.zeros_like(sizes)
        for name, charge in releases:
            new = {c: (fn(sizes) if c == f else fn(zero)) for c, fn in charge.items()}
            if not b.per_currency:
                tot = sum(new.values(), zero)
                old = spent.get("*", zero)
                ok = old + tot <= float(b.limit(1.0))
                spent["*"] = np.where(ok, old + tot, old)
                oks = dict.fromkeys(new, ok)
            else:
                oks = {}
                for c, v in new.items():
                    size = sizes if c == f else (np.full_like(sizes, rows_at)
                                                 if c == ROWS_CURRENCY else zero)
                    old = spent.get(c, zero)
                    oks[c] = old + v <= b.limit(size, c)
                    spent[c] = np.where(oks[c], old + v, old)
            if f in oks:
                left[name] = ~oks[f]
        return left

    found: dict[tuple[str, str], np.ndarray] = {}
    first_out: dict[tuple[str, str], float] = {}
    for f in focus:
        for name, mask in simulate(f, grid).items():
            found[(name, f)] = mask
            idx = np.flatnonzero(mask)
            if f == ROWS_CURRENCY or not idx.size:
                continue
            # the threshold between the last size kept and the first left out, by bisection
            lo_s, hi_s = (float(grid[idx[0] - 1]) if idx[0] else 0.0), float(grid[idx[0]])
            for _ in range(80):
                mid = 0.5 * (lo_s + hi_s)
                if mid in (lo_s, hi_s):
                    break
                if simulate(f, np.array([mid]))[name][0]:
                    hi_s = mid
                else:
                    lo_s = mid
            first_out[(name, f)] = hi_s
    for name, charge in releases:
        for c in charge:
            lo = found[(name, c)]
            if c == ROWS_CURRENCY:  # the size is the rows counted, not the measure's size
                left = bool(lo[0])
                out.append({"table": name, "currency": c, "left_out_from": 0.0 if left else None,
                            "all_above": left, "count_rows": spec.plan.count_rows,
                            "plan_sizes_left_out": []})
                continue
            idx = np.flatnonzero(lo)
            first = first_out.get((name, c))
            in_plan = [float(x) for x, bad in zip(grid, lo, strict=True)
                       if bad and x in set(plan_sizes.tolist())]
            out.append({"table": name, "currency": c, "left_out_from": first,
                        "all_above": bool(idx.size and lo[idx[0]:].all()),
                        "plan_sizes_left_out": in_plan})
    return out


def left_out_sizes_in_words(rows: Sequence[Mapping[str, Any]], unit: str = "unit"
                            ) -> list[str]:
    """Plain-language statements of `left_out_sizes()` (public).

    Example:
        >>> got = left_out_sizes_in_words([{"table": "t", "currency": "x",
        ...     "left_out_from": 1e6, "all_above": True, "plan_sizes_left_out": [1e6]}])
        >>> got[0][:55]
        't: a unit contributing more than about 1e+06 of x to a '
    """
    lines = []
    a = "an" if unit[:1].lower() in "aeio" else "a"
    for r in rows:
        first = r["left_out_from"]
        if first is None:
            continue
        if r["currency"] == "rows":
            lines.append(f"{r['table']}: {a} {unit} counted {r.get('count_rows', 1)} row(s) in a "
                         "cell is left out of this table by the budget")
            continue
        where = "" if r["all_above"] else " (and at some larger sizes)"
        lines.append(f"{r['table']}: {a} {unit} contributing more than about {first:.3g} of "
                     f"{r['currency']} to a cell{where} is left out of this table by the "
                     "budget (its values are missing from the published totals)")
    return lines


#: The public statement of what left-out units do to the published tables.
LEFT_OUT_BIAS_TEXT = (
    "The budget is enforced as an individual filter: a unit whose loss would pass its budget "
    "is left out of a table (the table is still published, without its contributions). "
    "Left-out units bias totals downward, and the published sd and moe do not include that "
    "bias. Which record sizes a budget can leave out follows from the public curves alone "
    "(listed per table); how many units were left out is known only to the curator.")


def _budget_dict(spec: ReleaseSpec) -> dict[str, Any]:
    from tabdp.privacy.budget import Budget

    assert spec.budget is not None
    return Budget(spec.budget.rho).to_dict()


def write_plan(spec: ReleaseSpec, out: Path | None = None, *, overwrite: bool = False
               ) -> Path:
    """Write ``plan.json`` and ``plan.html`` (no data is read).

    Args:
        spec: A validated spec.
        out: Folder (default: the spec's ``output.plan``).
        overwrite: Replace an existing plan folder.

    Returns:
        The folder written.

    Example:
        >>> import tabdp, pathlib, tempfile
        >>> from tabdp.release.spec import load_spec
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> spec = load_spec(root / "examples" / "cbp_release.toml")
        >>> d = write_plan(spec, pathlib.Path(tempfile.mkdtemp()) / "plan")
        >>> sorted(p.name for p in d.iterdir())
        ['plan.html', 'plan.json']
    """
    from tabdp.report.html import render_summary_html

    target = Path(out) if out is not None else spec.output.plan
    clean_stale_staging([target])
    _check_target(target, overwrite, "plan")
    summary = plan_summary(spec)
    summary["kind"] = "plan"
    with _Staging([target], overwrite) as (tmp,):
        (tmp / "plan.json").write_text(_json(summary), encoding="utf-8")
        (tmp / "plan.html").write_text(render_summary_html(summary), encoding="utf-8")
    return target


# -- atomic output folders -------------------------------------------------------------------

#: The only file of a confidential folder written by a failed run (see :func:`run_release`).
FAILURE_FILE = "failure.json"
#: Marker file of the public folder of a seeded (test) run.
NOT_FOR_PUBLICATION = "NOT_FOR_PUBLICATION.txt"


def _failure_only(path: Path) -> bool:
    """A folder holding nothing but the failure report of an earlier failed run."""
    try:
        return path.is_dir() and [p.name for p in path.iterdir()] == [FAILURE_FILE]
    except OSError:
        return False


def _check_target(path: Path, overwrite: bool, what: str) -> None:
    if path.exists() and not overwrite and not (what == "confidential" and _failure_only(path)):
        raise InvalidParameterError(
            f"the {what} output folder {str(path)!r} already exists; tabdp never overwrites a "
            "release silently.\nHint: choose a new folder in the spec's [output] section, "
            "remove the old one, or pass --overwrite.")
    if path.exists() and not path.is_dir():
        raise InvalidParameterError(
            f"the {what} output path {str(path)!r} exists and is not a folder.\n"
            "Hint: point [output] at a folder path.")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InvalidParameterError(
                    f"the {what} output folder {str(path)!r} cannot be created: "
                    f"{str(parent)!r} is a file.\nHint: point [output] at a folder path.")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InvalidParameterError(
                    f"the {what} output folder {str(path)!r} cannot be created: "
                    f"{str(parent)!r} is not writable.\nHint: choose a writable location.")
            # os.access says yes to root everywhere (/proc, /sys, read-only mounts): try it
            try:
                probe = tempfile.mkdtemp(prefix=".tabdp-probe-", dir=parent)
                os.rmdir(probe)
            except OSError as err:
                raise InvalidParameterError(
                    f"the {what} output folder {str(path)!r} cannot be created: a folder "
                    f"cannot be made in {str(parent)!r} ({err.strerror or type(err).__name__})."
                    "\nHint: choose a writable location on an ordinary file system.") from None
            break


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user
        return True
    except OSError:
        return True
    return True


def _staging_name(target: Path, kind: str) -> str:
    """Prefix of a staging (``tmp``) or set-aside (``old``) folder: names the run's process."""
    return f".{target.name}.{kind}-{os.getpid()}-"


def clean_stale_staging(targets: Sequence[Path]) -> list[Path]:
    """Remove the staging folders a killed run (``kill -9``, power loss) left next to targets.

    Staging folders are named ``.<target>.tmp-<pid>-<random>`` (and ``.<target>.old-<pid>-...``
    for a previous release set aside during the final swap). A folder whose process is gone is
    stale: a ``tmp`` one is deleted (it may hold confidential data); an ``old`` one is deleted
    when the target exists (the swap had finished), and otherwise refused with a message: it
    is the only copy of the previous release. A folder of a process that is still running (or
    without a process id: older tabdp versions) is refused with a message: tabdp does not
    remove what another run may still be writing.

    Args:
        targets: Output folders of the run.

    Returns:
        The folders removed.

    Raises:
        InvalidParameterError: A staging folder that cannot safely be removed.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> (d / ".public.tmp-999999999-abc").mkdir()
        >>> [p.name for p in clean_stale_staging([d / "public"])]
        ['.public.tmp-999999999-abc']
    """
    removed: list[Path] = []
    for t in targets:
        t = Path(t)
        if not t.parent.is_dir():
            continue
        for kind in ("tmp", "old"):
            for p in sorted(t.parent.glob(f".{t.name}.{kind}-*")):
                rest = p.name[len(f".{t.name}.{kind}-"):]
                pid_text = rest.split("-", 1)[0]
                pid = int(pid_text) if pid_text.isdigit() and "-" in rest else None
                if pid is not None and _pid_alive(pid):
                    raise InvalidParameterError(
                        f"{str(p)!r} is the staging folder of another tabdp run (process "
                        f"{pid}), which is still running; two runs must not write the same "
                        "outputs.\nHint: wait for the other run to finish; if no tabdp run is "
                        "going on (the process id was reused), remove that folder by hand.")
                if pid is None:
                    raise InvalidParameterError(
                        f"{str(p)!r} is a staging folder left by an earlier run that names no "
                        "process, so tabdp cannot tell whether it is still in use.\nHint: if "
                        "no tabdp run is going on, remove it by hand (it may hold "
                        "confidential data).")
                if kind == "old" and not t.exists():
                    raise InvalidParameterError(
                        f"{str(p)!r} holds the previous release of {str(t)!r}, set aside by a "
                        "run that was killed while replacing it; it is now the only copy.\n"
                        f"Hint: restore it (mv {str(p)!r} {str(t)!r}) or remove it, then rerun.")
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def _set_tree(folder: Path, mtime: float | None, dir_mode: int | None,
              file_mode: int | None) -> None:
    """Set modes and modification times of a folder and everything in it."""
    for root, dirs, files in os.walk(folder):
        for f in files:
            fp = Path(root) / f
            if file_mode is not None:
                fp.chmod(file_mode)
            if mtime is not None:
                os.utime(fp, (mtime, mtime))
        for d in dirs:
            if dir_mode is not None:
                (Path(root) / d).chmod(dir_mode)
    for sub in [Path(r) for r, _, _ in os.walk(folder, topdown=False)]:
        if mtime is not None:
            os.utime(sub, (mtime, mtime))
    if dir_mode is not None:
        folder.chmod(dir_mode)


class _Staging:
    """Temporary sibling folders renamed onto the targets only if the block succeeds.

    Staging folders are named after the run's process (see `clean_stale_staging`), so a
    later run can tell a killed run's leftovers from a running one's.
    """

    def __init__(self, targets: Sequence[Path], overwrite: bool,
                 private: Sequence[bool] | None = None) -> None:
        self.targets = [Path(t) for t in targets]
        self.overwrite = overwrite
        self.private = list(private) if private is not None else [False] * len(self.targets)
        self.tmps: list[Path] = []

    def __enter__(self) -> list[Path]:
        self.created: list[Path] = []
        try:
            for t, private in zip(self.targets, self.private, strict=True):
                missing = [p for p in reversed(t.parents) if not p.exists()]
                t.parent.mkdir(parents=True, exist_ok=True)
                self.created += missing
                tmp = Path(tempfile.mkdtemp(prefix=_staging_name(t, "tmp"), dir=t.parent))
                self.tmps.append(tmp)
                if not private:
                    # mkdtemp makes a private (0700) folder: publishable outputs get the
                    # usual permissions; confidential ones stay readable by the owner only.
                    umask = os.umask(0)
                    os.umask(umask)
                    tmp.chmod(0o777 & ~umask)
        except BaseException:
            self._cleanup()
            raise
        return self.tmps

    def _cleanup(self) -> None:
        for tmp in self.tmps:
            shutil.rmtree(tmp, ignore_errors=True)
        # parent folders this run created, if still empty
        for p in sorted(set(getattr(self, "created", [])), key=lambda q: len(q.parts),
                        reverse=True):
            try:
                p.rmdir()
            except OSError:
                pass

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self._cleanup()
            return
        # Swap in: move any old folder aside first, so a failure can restore it.
        moved: list[tuple[Path, Path]] = []
        placed: list[Path] = []
        try:
            for t, tmp, private in zip(self.targets, self.tmps, self.private, strict=True):
                if t.exists():
                    if not (self.overwrite or (private and _failure_only(t))):
                        raise InvalidParameterError(
                            f"the output folder {str(t)!r} appeared while the release was "
                            "running; nothing was written.\nHint: rerun, or pass --overwrite.")
                    old = Path(tempfile.mkdtemp(prefix=_staging_name(t, "old"), dir=t.parent))
                    old.rmdir()
                    t.rename(old)
                    moved.append((t, old))
                tmp.rename(t)
                placed.append(t)
        except BaseException:
            for t in placed:
                shutil.rmtree(t, ignore_errors=True)
            for t, old in moved:
                if not t.exists():
                    old.rename(t)
            self._cleanup()
            raise
        for _, old in moved:
            shutil.rmtree(old, ignore_errors=True)


# -- running ---------------------------------------------------------------------------------

def _json(obj: Any) -> str:
    """JSON text; infinite or NaN numbers are written as null (documented: null = infinite)."""
    return json.dumps(_finite_json(obj), indent=2, sort_keys=False, default=_json_default,
                      allow_nan=False) + "\n"


def _finite_json(obj: Any) -> Any:
    if isinstance(obj, float | np.floating):
        return _finite(obj)
    if isinstance(obj, Mapping):
        return {k: _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite_json(v) for v in obj]
    return obj


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return _finite(x)
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


def _timestamp() -> str:
    """UTC time, or ``SOURCE_DATE_EPOCH`` when set (reproducible outputs)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None and epoch.strip().isdigit():
        t = _dt.datetime.fromtimestamp(int(epoch), tz=_dt.UTC)
    else:
        t = _dt.datetime.now(tz=_dt.UTC)
    return t.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def check_input_present(spec: ReleaseSpec) -> None:
    """Check that the spec's input file, folder or glob exists (nothing is read).

    A data-independent check: the CLI's ``validate`` and ``run`` exit 2 when it fails.

    Args:
        spec: The release spec.

    A catalog table (``input.table``) is checked by ``tabdp run --engine spark`` once Spark
    has started (still before any data is read).

    Raises:
        SpecError: No file matches ``input.path``.

    Example:
        >>> import dataclasses, tempfile, pathlib
        >>> from tabdp.datasets import example_spec_path
        >>> from tabdp.release.spec import load_spec
        >>> spec = load_spec(example_spec_path())
        >>> check_input_present(spec)
        >>> missing = pathlib.Path(tempfile.gettempdir()) / "nope.parquet"
        >>> gone = dataclasses.replace(spec.input, path=missing)
        >>> try:
        ...     check_input_present(dataclasses.replace(spec, input=gone))
        ... except ValueError as err:
        ...     print(str(err).split(":")[0])
        input.path
    """
    src = spec.input.path
    if src is None:
        return
    if spec.input.dataset is not None and spec.input.mode == "author":
        # the curator's dataset: its root is there or not, whatever the records; the message
        # names the dataset, not its server path
        if not src.exists():
            raise SpecError(
                "input.dataset", f"the curator's dataset {spec.input.dataset!r} is not "
                "available on this server. Nothing was read or written.\nHint: ask the "
                "curator (its path in the curator configuration does not exist).")
        return
    if "*" in str(src):
        import glob

        if not glob.glob(str(src), recursive=True):
            raise SpecError(
                "input.path", f"no file matches the input pattern {str(src)!r}. Nothing was "
                "read or written.\nHint: check the pattern; relative paths are resolved "
                "against the spec file's folder.")
    elif not src.exists():
        raise SpecError(
            "input.path", f"input not found: {str(src)!r}. Nothing was read or written.\n"
            "Hint: check the path; relative paths are resolved against the spec file's folder.")


def _measures_used(spec: ReleaseSpec) -> list[str]:
    out: list[str] = []
    for t in spec.tables:
        for m in t.measures if t.kind == "sum" else ():
            if m not in out:
                out.append(m)
    return out


def _input_rules(spec: ReleaseSpec, lf: pl.LazyFrame) -> tuple[pl.LazyFrame, dict[str, Any]]:
    """Apply the spec's declared data-quality rules (one counting pass over the input).

    In order: rows without a unit id (``input.unit_nulls``), ±inf values (``input.nonfinite``),
    public bounds (``input.bounds``: values clamped into them), negative values
    (``input.negatives``). Nulls and NaN are left to the engine (``nulls``). The counts are
    confidential.
    """
    inp = spec.input
    schema = lf.collect_schema()
    measures = [m for m in _measures_used(spec) if m in schema and schema[m].is_numeric()
                and schema[m] != pl.Boolean]
    exprs: dict[str, pl.Expr] = {m: pl.col(m) for m in measures}
    changed: set[str] = set()
    drop: list[pl.Expr] = []
    stats: dict[str, pl.Expr] = {}
    if inp.unit is not None and inp.unit_nulls == "drop" and inp.unit in schema:
        bad = pl.col(inp.unit).is_null()
        if schema[inp.unit].is_float():
            bad = bad | pl.col(inp.unit).is_nan()
        stats["unit_nulls"] = bad.sum()
        drop.append(bad)
    for m in measures:
        if not schema[m].is_float():
            continue
        is_inf = pl.col(m).is_infinite()
        stats[f"inf:{m}"] = is_inf.sum()
        if inp.nonfinite == "zero":
            exprs[m] = pl.when(is_inf).then(0.0).otherwise(exprs[m])
            changed.add(m)
        elif inp.nonfinite == "drop":
            drop.append(is_inf)
    for m, (lo, hi) in inp.bounds.items():
        if m not in exprs:
            continue
        e = exprs[m]
        if schema[m].is_integer() and float(lo).is_integer() and float(hi).is_integer() \
                and abs(lo) < 2.0 ** 63 and abs(hi) < 2.0 ** 63:
            low, high = int(lo), int(hi)
        else:
            e = e.cast(pl.Float64)
            low, high = float(lo), float(hi)  # type: ignore[assignment]
        number = ~pl.col(m).cast(pl.Float64).is_nan()  # Polars orders NaN above every number
        stats[f"below:{m}"] = ((e < low) & number).sum()
        stats[f"above:{m}"] = ((e > high) & number).sum()
        exprs[m] = e.clip(low, high)
        changed.add(m)
    for m in measures:  # counted under every rule, "allow" included (confidential audit)
        stats[f"neg:{m}"] = (exprs[m] < 0).sum()
    if inp.negatives == "drop":
        drop += [exprs[m] < 0 for m in measures]
    if drop:
        stats["dropped"] = pl.any_horizontal(*drop).fill_null(False).sum()
    row = (lf.select(**stats).collect(engine="streaming").row(0, named=True) if stats else {})
    row = {k: int(v or 0) for k, v in row.items()}
    info, neg = _rules_outcome(spec, row, measures, [m for m in inp.bounds if m in exprs])
    if inp.negatives == "zero":
        for m in neg:
            exprs[m] = pl.when(exprs[m] < 0).then(0).otherwise(exprs[m])
            changed.add(m)
    if drop:
        lf = lf.filter(~pl.any_horizontal(*drop).fill_null(False))
    if changed:
        lf = lf.with_columns(exprs[m].alias(m) for m in measures if m in changed)
    return lf, info


def _rules_outcome(spec: ReleaseSpec, row: Mapping[str, int], measures: Sequence[str],
                   bounded: Sequence[str]) -> tuple[dict[str, Any], dict[str, int]]:
    """The confidential counts of the input rules, and their refusals (either engine).

    ``row`` holds the counts of one pass (``inf:<m>``, ``neg:<m>``, ``below:<m>``,
    ``above:<m>``, ``unit_nulls``, ``dropped``). Returns the counts as ``confidential.json``
    shows them and the negative counts per measure.
    """
    inp = spec.input
    inf = {m: row[f"inf:{m}"] for m in measures if row.get(f"inf:{m}")}
    neg = {m: row[f"neg:{m}"] for m in measures if row.get(f"neg:{m}")}
    info: dict[str, Any] = {
        "policy": inp.negatives, "negative_values": neg, "clipped": 0, "dropped": 0,
        "nonfinite": {"policy": inp.nonfinite, "values": inf},
        "bounds": {m: {"below": row.get(f"below:{m}", 0), "above": row.get(f"above:{m}", 0)}
                   for m in bounded},
        "rows_without_unit_id_dropped": row.get("unit_nulls", 0),
        "rows_dropped_by_input_rules": row.get("dropped", 0),
    }
    if inf and inp.nonfinite == "error":
        detail = ", ".join(f"{m!r}: {n}" for m, n in inf.items())
        err = DataValidationError(
            "the input has +inf / -inf values in measure column(s); input.nonfinite is "
            "'error'. Nothing was released or written.\nHint: set input.nonfinite = \"drop\", "
            "\"zero\" or \"clamp\" (with input.bounds).")
        err.confidential = {"infinite_values": dict(inf), "detail": detail}
        raise err
    if neg and inp.negatives == "error":
        detail = ", ".join(f"{m!r}: {n}" for m, n in neg.items())
        err = DataValidationError(
            f"the input has negative values in measure column(s) ({detail}); input.negatives "
            "is 'error'. Nothing was released or written.\nHint: set input.negatives = "
            "\"allow\" for signed measures (additive mechanisms), \"zero\" to clip them to 0 or "
            "\"drop\" to drop those rows (counted in the confidential report).")
        err.confidential = {"negative_values": dict(neg)}
        raise err
    if inp.negatives == "zero":
        info["clipped"] = int(sum(neg.values()))
    if inp.negatives == "drop":
        info["dropped"] = row.get("dropped", 0)
    return info, neg


def _author_key_casts(spec: ReleaseSpec, lf: pl.LazyFrame) -> pl.LazyFrame:
    """Author mode: key columns take their domain's type.

    A value that does not convert becomes null and so falls outside the key set (never an
    error that depends on a value). A number / text mismatch is left alone (the engine refuses
    it from the schema alone).
    """
    schema = lf.collect_schema()
    textual = (pl.String, pl.Categorical, pl.Enum)
    casts = []
    for c in dict.fromkeys(c for t in spec.tables for c in t.by):
        if c not in schema or c not in spec.domains:
            continue
        have, want = schema[c], spec.domains[c].dtype
        if have == want:
            continue
        if (have.is_numeric() and (want == pl.String or isinstance(want, textual))) or \
                (want.is_numeric() and (have == pl.String or isinstance(have, textual))):
            continue
        casts.append(pl.col(c).cast(want, strict=False))
    return lf.with_columns(casts) if casts else lf


def _derived_mapping(spec: ReleaseSpec, h: str, fine: str, col: str) -> pl.DataFrame:
    return spec.hierarchies[h].mapping.select(fine, col).unique(maintain_order=True)


def _rows_kept_one_to_one(spec: ReleaseSpec, schema: Mapping[str, Any],
                          lf: Any = None) -> bool:
    """Whether the hierarchy joins keep one row per input row (public: the mappings only).

    A fine code mapped to two coarse codes would repeat its rows; the in-memory ledger then
    counts the repeated rows as one record (by row id), which a streaming session cannot do.
    The fine codes are compared as the join compares them: converted to the input column's
    dtype (``lf``'s schema, a public fact), where two codes may become one.
    """
    return _mapping_collision(spec, schema, lf) is None


def _mapping_collision(spec: ReleaseSpec, schema: Mapping[str, Any], lf: Any = None,
                       dtypes: Mapping[str, Any] | None = None
                       ) -> tuple[str, str, pl.DataType, list[Any]] | None:
    """The first hierarchy whose fine codes collide once converted for the join, or ``None``.

    Returns (hierarchy, fine column, the input column's dtype, the colliding mapping codes).
    Decided from the spec's mapping files and the input's schema only (public facts). The
    spec already refuses a fine code mapped to two coarse codes; after the conversion to the
    input column's type (``"1001"`` and ``"01001"`` for an ``Int64`` column, ``2**53`` and
    ``2**53 + 1`` for a ``Float64`` one) two fine codes may still become one, and the join would
    then repeat every record holding it.
    """
    if dtypes is None:
        dtypes = lf.collect_schema() if isinstance(lf, pl.LazyFrame) else {}
    for col, (h, fine) in _derived_needs(spec, schema)[0].items():
        fine_codes = _derived_mapping(spec, h, fine, col)[fine]
        if fine not in dtypes:
            continue
        converted = fine_codes.cast(dtypes[fine], strict=False)
        dup = converted.is_duplicated() & converted.is_not_null()
        if bool(dup.any()):
            first = converted.filter(dup)[0]
            codes = fine_codes.filter(converted.eq_missing(first)).to_list()
            return h, fine, dtypes[fine], codes
    return None


def _refuse_mapping_collisions(spec: ReleaseSpec, schema: Mapping[str, Any], lf: Any = None,
                               dtypes: Mapping[str, Any] | None = None) -> None:
    """Refuse, before the data is read, mapping codes that the join's conversion merges."""
    hit = _mapping_collision(spec, schema, lf, dtypes)
    if hit is None:
        return
    h, fine, dtype, codes = hit
    raise SpecError(
        f"hierarchies.{h}", f"the mapping's {fine!r} codes {_show_codes(codes)} become one code "
        f"when converted to the input column's type {dtype} for the join, so every record "
        "with that code would be joined to several coarser codes and counted in several "
        "cells of the rollups.\nHint: store the mapping's codes with the input column's type "
        f"(e.g. {fine!r} as {dtype} without leading zeros), or cast the input column to the "
        "mapping's type in the data first.")


def _show_codes(codes: list[Any]) -> str:
    return ", ".join(repr(c) for c in codes[:4]) + (" ..." if len(codes) > 4 else "")


def _add_derived(spec: ReleaseSpec, lf: pl.LazyFrame, schema: Mapping[str, Any]) -> pl.LazyFrame:
    """Add the derived key columns of direct releases.

    Coarse key columns come from the hierarchies when the input does not have them; national
    releases get a constant key. The joins keep the input's row order (accounting follows the
    row id, but the order is kept anyway).
    """
    need, national = _derived_needs(spec, schema)
    for col, (h, fine) in need.items():
        mapping = _derived_mapping(spec, h, fine, col)
        fine_dtype = lf.collect_schema()[fine]
        mapping = mapping.with_columns(pl.col(fine).cast(fine_dtype, strict=False))
        lf = lf.join(mapping.lazy(), on=fine, how="left", maintain_order="left")
    if national:
        lf = lf.with_columns(pl.lit("all", dtype=pl.String).alias(NATIONAL))
    return lf


def read_input(spec: ReleaseSpec) -> pl.LazyFrame:
    """The input as the Polars engine of `run_release()` reads it, before any release.

    The same steps, in the same code: scan, row ids (without a unit), the declared data-quality
    rules, author-mode key casts and the derived key columns. For curator tools that need the
    confidential rows as the run sees them (``tabdp compare``); nothing is released.

    Args:
        spec: A validated spec.

    Returns:
        A lazy frame of the input rows.

    Example:
        >>> import tabdp, pathlib
        >>> from tabdp.release.spec import load_spec
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> lf = read_input(load_spec(root / "examples" / "cbp_release.toml"))
        >>> "payroll" in lf.collect_schema()
        True
    """
    lf, schema = scan_input(spec)
    if spec.input.unit is None:
        lf = lf.with_row_index(ROW_ID)
    lf, _ = _input_rules(spec, lf)
    if spec.input.mode == "author":
        lf = _author_key_casts(spec, lf)
    return _add_derived(spec, lf, schema)


def _derived_needs(spec: ReleaseSpec, schema: Mapping[str, Any]
                   ) -> tuple[dict[str, tuple[str, str]], bool]:
    """Derived key columns the input lacks (column → (hierarchy, finer column)); national?"""
    need: dict[str, tuple[str, str]] = {}
    national = False
    for t in spec.tables:
        if not t.by:
            national = True
        for r in t.rollups:
            if not r.direct:
                continue
            if not r.by:
                national = True
            for col, (h, fine) in r.maps.items():
                if col not in schema:
                    need[col] = (h, fine)
    return need, national


def _domain_keys(spec: ReleaseSpec, cols: Sequence[str]) -> KeySet:
    if not cols:
        return KeySet.from_dict({NATIONAL: ["all"]})
    return KeySet.from_dict({c: spec.domains[c] for c in cols})


def _table_keys(spec: ReleaseSpec, t: TableSpec) -> KeySet:
    if t.keys_file is not None:
        return KeySet.from_frame(read_keys(t.keys_file, t.by, spec.domains))
    return _domain_keys(spec, t.by)


def _rollup_keys(spec: ReleaseSpec, t: TableSpec, r: RollupSpec, table_keys: KeySet
                 ) -> pl.DataFrame | None:
    """Target keys of a rollup.

    The cross product of the domains, or (allowed-combination tables) the image of the table's
    keys.
    """
    if not r.by:
        return None
    if t.keys_file is None and all(c in spec.domains for c in r.by):
        return _domain_keys(spec, r.by).to_polars()
    img = table_keys.to_polars()
    for col, (h, fine) in r.maps.items():
        m = spec.hierarchies[h].mapping.select(fine, col).unique()
        m = m.with_columns(pl.col(fine).cast(img.schema[fine], strict=False))
        img = img.join(m, on=fine, how="left", maintain_order="left")
    return img.select(list(r.by)).unique(maintain_order=True).sort(list(r.by))


def _curves_hold_for(spec: ReleaseSpec) -> str:
    """Which units the planned curves bound (public: it follows from the spec)."""
    if spec.input.unit is None or spec.input.max_cells is not None:
        return "every unit"
    text = ("units contributing to one cell of each table (input.max_cells is not set: a unit "
            "in k cells of a table pays up to k times that table's curve)")
    if spec.budget is not None:
        text += "; the budget bounds every unit's total"
    return text


def _request(t: TableSpec, mech: Mechanism, by: Sequence[str], keys: KeySet, name: str,
             level: float, spec: ReleaseSpec) -> dict[str, Any]:
    """The accessor arguments of one table; with a unit, the plan's public bounds enforced.

    The bounds: ``input.max_cells`` cells per unit; ``plan.count_rows`` rows per unit in a
    count cell.
    """
    multi = spec.input.unit is not None
    req: dict[str, Any] = dict(
        kind=t.kind, by=list(by) if by else [NATIONAL], keys=keys, mechanism=mech, level=level,
        name=name, grid=_planned_grid(t, mech), max_cells=spec.input.max_cells if multi else None)
    if t.kind == "sum":
        # input.negatives was applied by the input rules (_input_rules): what is left is
        # allowed (a mechanism needing non-negative contributions still refuses negative ones)
        req |= dict(measures=list(t.measures), nulls=t.nulls, negatives="allow")
    else:
        req["max_rows"] = spec.plan.count_rows if multi else None
    return req


def _released_tables(lf: Any, session: Session, requests: list[dict[str, Any]],
                     spark: bool) -> list[pl.DataFrame]:
    """Every table of the release, planned before any is executed.

    Polars: all tables are planned (every argument and schema check) before the input is read,
    then executed in order, one pass over the input each. Spark: one after the other. Public
    tables take the key set's dtypes (the spec's domains), never the input's: the accessor
    returns keys in the data's dtypes (an Enum whose categories may come from the data), which
    a public file must not reflect.
    """
    if spark:
        from tabdp.frame.accessor import DPAccessor
        from tabdp.release._spark_run import to_polars

        dp = DPAccessor(lf)  # what ``lf.dp`` gives, spelled so that type checkers see it
        outs = []
        for req in requests:
            args = {k: v for k, v in req.items() if k not in ("kind", "measures")}
            out = (dp.sum(req["measures"], session=session, **args) if req["kind"] == "sum"
                   else dp.count(session=session, **args))
            outs.append(to_polars(out))  # the table (at most the key set)
    else:
        from tabdp.frame._release import execute_planned, planned_releases

        outs = execute_planned(planned_releases(lf, session, requests))
    tables = []
    for req, out in zip(requests, outs, strict=True):
        key_schema = req["keys"].to_polars().schema
        tables.append(out.with_columns(
            pl.col(c).cast(key_schema[c]) for c in req["by"]
            if c in out.columns and c in key_schema and out.schema[c] != key_schema[c]))
    return tables


def _strip_national(df: pl.DataFrame) -> pl.DataFrame:
    return df.drop(NATIONAL) if NATIONAL in df.columns else df


class DataDependentFailure(DataValidationError):
    """A run stopped after it had read the confidential data.

    Whatever the cause (a value the rules refuse, a schema problem, a budget, a bug triggered
    by a value), the message is always the same: it names no value, count, column or unit, so
    the failure tells its reader only that the run failed. The details are written to
    ``failure.json`` in the confidential folder (`failure_file`), readable by the owner
    only. Nothing public is written.

    Attributes:
        failure_file: Where the details were written, or ``None`` if they could not be.

    Example:
        >>> err = DataDependentFailure(None, Path("conf"))
        >>> isinstance(err, DataValidationError), "data-dependent failure" in str(err)
        (True, True)
    """

    def __init__(self, failure_file: Path | None, confidential: Path) -> None:
        """Point to the confidential ``failure_file`` (``None``: it could not be written)."""
        self.failure_file = failure_file
        where = (f"in {str(failure_file)!r}" if failure_file is not None else
                 f"nowhere: they could not be written to {str(confidential)!r}")
        super().__init__(
            "data-dependent failure: the run stopped after reading the confidential data; "
            "nothing public was written. The details (confidential: never publish them) are "
            f"only {where}.\nHint: the curator reads the cause and its fix there. (Misspelt "
            "or mistyped columns are spec errors that tabdp validate reports before any data "
            'is read; input.mode = "author" only keeps the data\'s values, such as nulls or '
            "negatives, from stopping a run.)")


def _start_time() -> tuple[str, float]:
    """The run's one timestamp: text for the manifest and POSIX seconds for file times."""
    text = _timestamp()
    t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return text, t.timestamp()


def _spec_hints(text: str) -> str:
    r"""Rewrite the engine's Python hints (``nulls='zero'``) as spec keys.

    Example:
        >>> _spec_hints("nulls='error'.\nHint: pass nulls='zero' or negatives='drop'.")
        'input.nulls = "error".\nHint: set input.nulls = "zero" or input.negatives = "drop".'
    """
    import re

    text = text.replace(
        "fix or remove those rows before the release, or use Session(mode='author') where they "
        "count as missing values under the declared nulls= rule.",
        'set input.nonfinite = "drop", "zero" or "clamp" (with input.bounds).')
    text = text.replace("Session(mode='author')", 'input.mode = "author"')
    text = text.replace("the declared nulls= rule", "the declared input.nulls rule")
    text = re.sub(r"\bpass (nulls|negatives)=", r"set \1=", text)
    text = re.sub(r"\b(nulls|negatives|unit_nulls)='(\w+)'", r'input.\1 = "\2"', text)
    text = text.replace("create the session with unit='<id column>'",
                        'set input.unit = "<id column>" in the spec')
    text = text.replace("the session's unit=", "input.unit")
    text = text.replace("use an additive mechanism (Gaussian, ExpPolyLog)",
                        'use an additive family (e.g. family = "gaussian" or "exp_polylog")')
    text = text.replace("fill the ids or drop those rows first (author mode drops them by rule)",
                        'fill the ids, or set input.unit_nulls = "drop" to drop those rows')
    text = text.replace("by=", "the table's by")
    return spec_keys_hint(text)


def _failure_details(err: BaseException, phase: str) -> dict[str, Any]:
    import traceback

    return {
        "CONFIDENTIAL": "details of a failed run: may hold values of individual records; do "
                        "not publish",
        "phase": phase,
        "error": type(err).__name__,
        "message": _spec_hints(str(err)),
        "confidential": getattr(err, "confidential", None),
        "traceback": traceback.format_exception(type(err), err, err.__traceback__),
    }


def _write_failure(spec: ReleaseSpec, details: dict[str, Any], started: str) -> Path | None:
    """Write ``failure.json`` (0600) into the confidential folder (0700), creating it."""
    folder = spec.output.confidential
    try:
        made = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if made:
            folder.chmod(0o700)
        target = folder / FAILURE_FILE
        text = json.dumps(_finite_json({"release": spec.release.name, "started": started,
                                        **details}), indent=2, default=str) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=f".{FAILURE_FILE}.", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target
    except Exception:  # noqa: BLE001 - the failure itself is reported generically
        return None


SPARK_LOG = "spark.log"


def _keep_spark_log(log: Path, confidential: Path) -> None:
    """Move the JVM's log into the confidential folder (if the run made one), else drop it."""
    try:
        if confidential.is_dir():
            shutil.move(log, confidential / SPARK_LOG)
            os.chmod(confidential / SPARK_LOG, 0o600)
        else:
            log.unlink(missing_ok=True)
    except OSError:
        log.unlink(missing_ok=True)


def run_release(spec: ReleaseSpec, *, overwrite: bool = False,
                progress: Progress | None = None, test_seed: bool = False,
                engine: str = "polars", spark: Any = None,
                spark_master: str | None = None) -> ReleaseResult:
    """Run a release: read the input, release every table, derive rollups, write both folders.

    Everything that can be checked without data is checked first (seed, output folders, stale
    staging folders of a killed run, input presence); those errors are ordinary exceptions.
    Once the data has been read, every failure, whatever its cause, becomes one
    [`DataDependentFailure`][tabdp.release.DataDependentFailure] with a fixed message: the details
    go only to ``failure.json`` in the confidential folder, and nothing public is written.

    Args:
        spec: A validated spec.
        overwrite: Replace existing output folders.
        progress: Optional callback ``(step, steps, description)``.
        test_seed: Allow a spec with ``[randomness] seed`` (tests only): the public folder is
            then marked not for publication (``NOT_FOR_PUBLICATION.txt`` and
            ``"not_for_publication": true`` in the manifest and summary).
        engine: ``"polars"`` (one machine) or ``"spark"`` (the input is read and released in
            Spark; the same outputs, see docs/spark.md).
        spark: Spark engine: an existing SparkSession to run in (default: one on
            ``spark_master``, created, or the active one, and stopped at the end if created).
        spark_master: Spark engine: the master URL of the session to create (default
            ``local[2]``).

    Returns:
        The output locations and the public tables.

    Raises:
        SpecError: The spec is seeded and ``test_seed`` is false, or the input is missing
            (``input.table``: under the Polars engine, or not in the Spark catalog), or
            (curator mode, ``input.path``) a column of the spec is missing from the input's
            schema or has a type the release cannot use (read from the Parquet metadata,
            before any data).
        InvalidParameterError: An output folder exists and ``overwrite`` is false, or a
            staging folder of another (or a killed) run cannot safely be removed.
        InvalidParameterError: Also: an unknown engine, or Spark options without the Spark
            engine (or both ``spark`` and ``spark_master``).
        UnsupportedBackendError: The Spark engine without PySpark, or Spark could not start.
        DataDependentFailure: Anything went wrong after the data was read.

    Warns:
        CoverageWarning: Curator mode only: the input is empty, or rows fall outside a
            table's key set (the tables are named; counts only in ``confidential.json``).

    Example:
        >>> import tabdp, pathlib, tempfile
        >>> from tabdp.release.spec import load_spec
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> spec = load_spec(root / "examples" / "cbp_release.toml")
        >>> out = pathlib.Path(tempfile.mkdtemp())
        >>> import dataclasses
        >>> spec = dataclasses.replace(spec, output=dataclasses.replace(
        ...     spec.output, public=out / "public", confidential=out / "confidential"))
        >>> res = run_release(spec)
        >>> (res.public / "manifest.json").exists()
        True
        >>> (res.confidential / "per_record_losses.parquet").exists()
        True
    """
    from tabdp.release._spark_run import check_engine

    report = progress or _no_progress
    check_engine(engine, spark, spark_master)
    if spec.input.table is not None and engine != "spark":
        raise SpecError(
            "input.table", f"the input is the Spark catalog table {spec.input.table!r}, which "
            "only the Spark engine reads. Nothing was read or written.\nHint: run with "
            "--engine spark (run_release(..., engine='spark')), or set input.path to Parquet "
            "files.")
    if spec.seed is not None and not test_seed:
        raise SpecError(
            "randomness.seed",
            "the spec sets a seed, which makes the noise reproducible: anyone who learns it "
            "can remove the noise. Seeded runs are for tests only and tabdp run refuses them "
            "without an explicit flag. Nothing was read or written.\nHint: remove [randomness] "
            "for a release (secure randomness), or pass --test-seed (run_release(..., "
            "test_seed=True)) for a test: its public folder is marked NOT FOR PUBLICATION.")
    targets = [spec.output.public, spec.output.confidential]
    clean_stale_staging(targets)
    _check_target(spec.output.public, overwrite, "public")
    _check_target(spec.output.confidential, overwrite, "confidential")
    started, epoch = _start_time()
    summary = plan_summary(spec)  # validates mechanisms / grids before any data is read
    check_input_present(spec)
    _check_schema_first(spec)
    owned = None
    spark_log: Path | None = None
    if engine == "spark":
        from tabdp.release._spark_run import check_table, start_spark

        if spark is None:
            # the JVM's start-up and log lines (times, host, IP) are the curator's: a log
            # file, moved into the confidential folder at the end (never the terminal)
            fd, name = tempfile.mkstemp(prefix="tabdp-spark-", suffix=".log")
            os.close(fd)
            spark_log = Path(name)
        try:
            if spark is None:
                spark, owned = start_spark(spark_master, log=spark_log)
            if spec.input.table is not None:
                check_table(spark, spec.input.table)
        except BaseException:
            if owned is not None:
                owned.stop()
            if spark_log is not None:
                spark_log.unlink(missing_ok=True)
            raise

    if engine != "spark":
        # data-free: mapping codes the join's conversion merges are refused before any read
        # (the schema and the spec decide it; author mode converts key columns first)
        try:
            lf0, schema0 = scan_input(spec)
        except DataValidationError as err:
            if spec.input.mode != "author":
                raise
            # author mode: the curator's files (their schema, or none matching) are not the
            # author's to see: the generic failure, details in the confidential folder
            fail = _failure_details(err, "reading the input's schema")
            raise DataDependentFailure(_write_failure(spec, fail, started),
                                       spec.output.confidential) from None
        if spec.input.mode == "author":
            lf0 = _author_key_casts(spec, lf0)
        _refuse_mapping_collisions(spec, schema0, lf0)
    details: dict[str, Any] | None = None
    result: ReleaseResult | None = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # PySpark's notice about the pandas version says nothing about the data
            warnings.filterwarnings("ignore", message="PySpark does not yet fully support",
                                    category=FutureWarning)
            if engine == "spark":
                # PySpark 3.5's own notices (py4j sockets left to the garbage collector, the
                # deprecated APIs of distutils and pandas 2 it calls): nothing about the data
                warnings.filterwarnings("ignore", category=ResourceWarning)
                for text in ("distutils Version classes are deprecated",
                             "is_categorical_dtype is deprecated",
                             "The copy keyword is deprecated"):
                    warnings.filterwarnings("ignore", message=text)
            try:
                result = _run_with_data(spec, summary, started, epoch, overwrite, report,
                                        caught, spark if engine == "spark" else None)
            except KeyboardInterrupt:
                raise
            except Exception as err:  # noqa: BLE001 - one generic failure once data was read
                details = _failure_details(err, "after reading the input")
                details["warnings"] = [str(w.message) for w in caught]
    finally:
        if owned is not None:
            owned.stop()
        if spark_log is not None:
            _keep_spark_log(spark_log, spec.output.confidential)
    if details is not None:
        # raised outside the except block: the exception carries no chained details
        raise DataDependentFailure(_write_failure(spec, details, started),
                                   spec.output.confidential)
    assert result is not None
    # Curator mode: the data's owner is told (terminal / Python warning, never a public file)
    # when the input is empty or rows miss a key set. Author mode: nothing (an oracle).
    for text in result.coverage:
        warnings.warn(text, CoverageWarning, stacklevel=2)
    return result


def _check_schema_first(spec: ReleaseSpec) -> None:
    """Curator mode: the spec's columns against the input's schema, before any data is read.

    A misspelt or mistyped column is then a `SpecError` (exit 2), not the generic
    data-dependent failure (see `input_schema`; author mode is checked
    against the curator's declared schema, where one is given).
    """
    from tabdp.release.input_schema import check_spec_input_schema

    check_spec_input_schema(spec)


def declared_schema(spec: ReleaseSpec) -> list[dict[str, Any]]:
    """The input columns the spec reads, with their roles and declared types (no data read).

    Args:
        spec: A validated spec.

    Returns:
        One ``{"name", "role", "type"}`` per column: the unit, key columns (type of their
        public domain), derived keys of direct rollups and measures (with their bounds).

    Example:
        >>> from tabdp.release.spec import load_spec
        >>> import tabdp, pathlib
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> cols = declared_schema(load_spec(root / "examples" / "cbp_release.toml"))
        >>> [(c["name"], c["role"]) for c in cols][:3]
        [('estab_id', 'unit'), ('county', 'key'), ('naics2', 'key')]
    """
    out: dict[str, dict[str, Any]] = {}
    inp = spec.input
    if inp.unit is not None:
        out[inp.unit] = {"name": inp.unit, "role": "unit",
                         "type": "identifier (any type)",
                         "rows_without_id": inp.unit_nulls}
    for t in spec.tables:
        for c in t.by:
            if c in out:
                continue
            if c in spec.domains:
                dtype = str(spec.domains[c].dtype)
            elif t.keys_file is not None:
                dtype = str(read_keys(t.keys_file, t.by, spec.domains).schema[c])
            else:  # pragma: no cover - the spec guarantees a domain or a keys file
                dtype = "unknown"
            out[c] = {"name": c, "role": "key", "type": dtype}
    for t in spec.tables:
        for r in t.rollups:
            if not r.direct:
                continue
            for c, (h, fine) in r.maps.items():
                if c not in out:
                    out[c] = {"name": c, "role": "derived key",
                              "type": str(spec.domains[c].dtype) if c in spec.domains else None,
                              "derived": f"from {fine!r} through hierarchy {h!r} (an input "
                                         "column of that name is used instead if present)"}
    for m in _measures_used(spec):
        if m in out:
            continue
        col: dict[str, Any] = {"name": m, "role": "measure", "type": "numeric"}
        if m in inp.bounds:
            col["bounds"] = list(inp.bounds[m])
        out[m] = col
    return list(out.values())


def _run_with_data(spec: ReleaseSpec, summary: dict[str, Any], started: str, epoch: float,
                   overwrite: bool, report: Progress, caught: list[Any],
                   spark: Any = None) -> ReleaseResult:
    if spark is not None:
        return _run_on_spark(spec, summary, started, epoch, overwrite, report, caught, spark)
    lf, input_schema = scan_input(spec)
    if spec.input.unit is None:
        # Records, not positions: each row gets its id before any join, filter or sort, and
        # the session follows that id.
        lf = lf.with_row_index(ROW_ID)
    lf, negatives = _input_rules(spec, lf)
    if spec.input.mode == "author":
        lf = _author_key_casts(spec, lf)
    _refuse_mapping_collisions(spec, input_schema, lf)  # (checked before the run too)
    lf = _add_derived(spec, lf, input_schema)
    return _release_and_write(spec, summary, started, epoch, overwrite, report, caught, lf,
                              input_schema, negatives)


def _run_on_spark(spec: ReleaseSpec, summary: dict[str, Any], started: str, epoch: float,
                  overwrite: bool, report: Progress, caught: list[Any], spark: Any
                  ) -> ReleaseResult:
    """The Spark engine: the same steps on a Spark DataFrame (docs/spark.md)."""
    from tabdp.release import _spark_run as sr

    inp = spec.input
    sdf, input_schema = sr.read_input(spark, inp.table, inp.path, inp.hive_partitioning,
                                      {c: d.dtype for c, d in spec.domains.items()})
    if inp.mode == "author" and inp.schema:  # the declared types, never the files'
        sdf = sr.declared_casts(sdf, {c: SCHEMA_DTYPES[t] for c, t in inp.schema.items()})
        input_schema = {k: str(v) for k, v in sr.schema_of(sdf).items()}
    persisted = []
    try:
        if inp.unit is None:
            # Records, not positions: rows are numbered as Spark reads them, before any rule,
            # join or filter, and the session follows that id.
            sdf, base = sr.number_rows(sdf, ROW_ID)
            persisted.append(base)
        sdf, row, measures = sr.input_rules(
            sdf, unit=inp.unit, unit_nulls=inp.unit_nulls, nonfinite=inp.nonfinite,
            negatives=inp.negatives, bounds=dict(inp.bounds), measures=_measures_used(spec))
        negatives, _ = _rules_outcome(spec, row, measures,
                                      [m for m in inp.bounds if m in measures])
        if inp.mode == "author":
            sdf = sr.author_key_casts(sdf, [c for t in spec.tables for c in t.by],
                                      dict(spec.domains))
        # (Polars' conversion rules: Spark's own casts may merge other codes too, e.g. text
        # with spaces; see docs/spark.md)
        _refuse_mapping_collisions(spec, input_schema, dtypes=sr.schema_of(sdf))
        need, national = _derived_needs(spec, input_schema)
        sdf = sr.add_derived(
            spark, sdf, {col: spec.hierarchies[h].mapping.select(fine, col)
                         .unique(maintain_order=True) for col, (h, fine) in need.items()},
            NATIONAL if national else None)
        return _release_and_write(spec, summary, started, epoch, overwrite, report, caught,
                                  sdf, input_schema, negatives,
                                  spark=(spark, row.get("rows") if inp.unit is None else None))
    finally:
        for p in persisted:
            p.unpersist()


def _release_and_write(spec: ReleaseSpec, summary: dict[str, Any], started: str, epoch: float,
                       overwrite: bool, report: Progress, caught: list[Any], lf: Any,
                       input_schema: Mapping[str, str], negatives: dict[str, Any],
                       spark: tuple[Any, int | None] | None = None) -> ReleaseResult:
    """Release every table of ``lf`` (a Polars LazyFrame or a Spark DataFrame) and write."""
    from tabdp._version import __version__
    from tabdp.report.html import render_confidential_html, render_summary_html

    # Row mode streams (no per-row state: the ledger is recomputed from the input) when the
    # hierarchy joins keep one row per record; decided from the spec and public mappings only.
    one_to_one = spec.input.unit is None and _rows_kept_one_to_one(spec, input_schema, lf)
    streaming = spark is None and one_to_one
    session = Session(unit=spec.input.unit or ROW_ID, _row_ids=spec.input.unit is None,
                      _rows_one_cell=one_to_one,
                      seed=spec.seed, streaming=streaming,
                      budget=None if spec.budget is None else spec.budget.rho,
                      track_cells=True,
                      # the engine's phases inside a step (the same for every dataset)
                      progress=lambda name, what: report(step, steps, f"{name}: {what}"))
    if spark is not None:
        from tabdp.frame._spark import SparkReplayLedger, SparkUnitLedger

        # Row ids kept one to one by the hierarchy joins: the releases' definitions, replayed
        # in Spark (no per-row state; the report lists the rows the releases read, as a
        # streaming Polars run). Otherwise the ledger is a Spark table (per unit, or per row
        # id, listing every row read).
        if spec.input.unit is None and _rows_kept_one_to_one(spec, input_schema):
            session.use_engine("spark", SparkReplayLedger(spark[0]))
        else:
            session.use_engine("spark", SparkUnitLedger(
                spark[0], row_mode=spec.input.unit is None, rows=spark[1]))
    level = spec.release.level
    # Plan: every table's public definition (key sets, mechanisms, rollup targets) first.
    plans: list[tuple[TableSpec, Mechanism, dict[str, Any]]] = []
    requests: list[dict[str, Any]] = []
    for t in spec.tables:
        mech = _table_mechanism(t)
        keys = _table_keys(spec, t)
        targets = {r.label: _rollup_keys(spec, t, r, keys) for r in t.rollups}
        plans.append((t, mech, targets))
        requests.append(_request(t, mech, t.by, keys, t.name, level, spec))
        for r in t.rollups:
            if r.direct:
                target_keys = targets[r.label]
                dkeys = _domain_keys(spec, r.by) if target_keys is None else \
                    KeySet.from_frame(target_keys)
                requests.append(_request(t, mech, r.by, dkeys, f"{t.name}__{r.label}", level,
                                         spec))
    steps = 1 + sum(len(t.rollups) for t in spec.tables) + 1
    step = 1
    cells = sum(len(req["keys"]) for req in requests)
    report(step, steps, f"releasing {len(requests)} tables ({cells:,} cells)")
    released = iter(_released_tables(lf, session, requests, spark is not None))
    public: dict[str, pl.DataFrame] = {}
    table_keys: dict[str, list[str]] = {}
    for t, mech, targets in plans:
        measures = _released_measures(t)
        wide = _strip_national(next(released))
        # Rollup sums of grid multiples are rounded back to the grid (additive mechanisms only:
        # a transformation mechanism's grid is in transformed space).
        grid = {} if _transformation(mech) else summary_grid(summary, t.name)
        table_keys[_file_name(t)] = list(t.by)
        public[_file_name(t)] = publish(wide, keys=list(t.by), measures=measures,
                                        rules=t.publication, grid=grid)
        mechs = {m: _measure_mechanism(mech, m) for m in measures}
        for r in t.rollups:
            step += 1
            report(step, steps, f"rolling {t.name} up to {r.label}")
            target_keys = targets[r.label]
            maps = {col: spec.hierarchies[h].mapping.select(fine, col).unique()
                    for col, (h, fine) in r.maps.items()}
            with warnings.catch_warnings(record=True) as rollup_caught:
                warnings.simplefilter("always", RuntimeWarning)
                rolled, _methods = rollup(wide, by=list(t.by), measures=measures,
                                          target_by=list(r.by), maps=maps, mechanisms=mechs,
                                          level=level, target_keys=target_keys)
            if any(issubclass(w.category, RuntimeWarning) for w in rollup_caught):
                # The numerical law had to coarsen its grid for this level's cell counts
                # (public: they follow from the key sets): say so next to the method.
                entry = next(e for e in _summary_table(summary, t.name)["rollups"]
                             if e["label"] == r.label)
                entry["moe_method"] = {
                    m: (v + " — at this level the FFT grid had to be coarsened, so the stated "
                        "accuracy is not guaranteed" if v.startswith("numerical") else v)
                    for m, v in entry["moe_method"].items()}
            rolled = rolled.drop("cells") if "cells" in rolled.columns else rolled
            table_keys[_file_name(t, r)] = list(r.by)
            public[_file_name(t, r)] = publish(rolled, keys=list(r.by), measures=measures,
                                               rules=t.publication, grid=grid)
            if r.direct:
                direct = _strip_national(next(released))
                table_keys[_file_name(t, r, direct=True)] = list(r.by)
                public[_file_name(t, r, direct=True)] = publish(
                    direct, keys=list(r.by), measures=measures, rules=t.publication, grid=grid)

    step += 1
    report(step, steps, "writing outputs")
    rep = session.report(delta=spec.release.delta)
    per_record: Any = None
    per_record_view: Any = None
    if not streaming:
        per_record = rep.per_record
        if spec.input.unit is None and ROW_ID in per_record.columns:
            per_record = (per_record.rename({ROW_ID: ROW_LABEL}) if spark is None else
                          per_record.withColumnRenamed(ROW_ID, ROW_LABEL))
        # Reproducible confidential files: units in id order (the engine's order of first
        # sight depends on its parallel group-bys), so two identically seeded runs write the
        # same bytes. (Spark: sorted by Spark as it writes the file; the driver gets a bounded
        # view. A streaming report comes in row-id order: the input's.)
        if spark is None and per_record.width and per_record.height:
            per_record = per_record.sort(per_record.columns[0], nulls_last=True)
        if spark is not None:
            from tabdp.release._spark_run import report_view

            per_record_view = report_view(per_record)
        else:
            per_record_view = per_record
    seeded = spec.seed is not None
    files = [*public, "manifest.json", "summary.json", "summary.html",
             *([NOT_FOR_PUBLICATION] if seeded else [])]
    summary["kind"] = "release"
    summary["files"] = files
    # post-processing of the published flags only (public)
    usable = {name.removesuffix(".parquet"): published_usability(df)
              for name, df in public.items()}
    summary["published_usability"] = usable
    summary["publishable_in_words"] = publishable_in_words(usable)
    if spec.output.form == "wide":  # the same columns, one row per cell
        public = {name: long_to_wide(df, table_keys[name]) for name, df in public.items()}
    manifest = _manifest(spec, summary, started, __version__)
    coverage, coverage_counts = _coverage(session)
    left_out = left_out_by_table(session)
    check_left_out(spec, left_out)  # before anything is written
    worst = _worst_cells(session)
    with _Staging([spec.output.public, spec.output.confidential], overwrite,
                  private=[False, True]) as (pub, conf):
        for name, df in public.items():
            report(step, steps, f"writing outputs: public/{name}")
            df.write_parquet(pub / name, statistics=False)
        (pub / "manifest.json").write_text(_json(manifest), encoding="utf-8")
        (pub / "summary.json").write_text(_json(summary), encoding="utf-8")
        (pub / "summary.html").write_text(render_summary_html(summary), encoding="utf-8")
        if seeded:
            (pub / NOT_FOR_PUBLICATION).write_text(
                "NOT FOR PUBLICATION\n\nThis folder comes from a seeded test run (tabdp run "
                "--test-seed): its noise can be reproduced by anyone who learns the seed, so "
                "its tables protect no one. Do not publish any file of this folder.\n",
                encoding="utf-8")
        report(step, steps, "writing outputs: confidential/per_record_losses.parquet")
        if streaming:  # written by the engine, batch by batch, never held in memory
            rep.write_per_record(conf / "per_record_losses.parquet",
                                 rename={ROW_ID: ROW_LABEL})
            per_record_view = pl.scan_parquet(conf / "per_record_losses.parquet")
        elif spark is None:
            per_record.write_parquet(conf / "per_record_losses.parquet", **PER_RECORD_PARQUET)
        else:  # by Spark's writer, from the Spark ledger, into the staging folder
            from tabdp.release._spark_run import write_single_parquet

            write_single_parquet(per_record, conf / "per_record_losses.parquet",
                                 sort_by=per_record.columns[0])
        # after the per-record file: a streaming session computes its loss statistics from it
        confidential = _confidential(spec, session, negatives, input_schema, caught)
        confidential["coverage"] = {"warnings": coverage, "counts": coverage_counts}
        worst.write_parquet(conf / "worst_cells.parquet")
        (conf / "confidential.json").write_text(_json(confidential), encoding="utf-8")
        (conf / "confidential_report.html").write_text(render_confidential_html({
            "release": summary["release"],
            "unit": spec.input.unit or ROW_LABEL,
            "seed": spec.seed,
            "budget": summary["budget"],
            "per_record": per_record_view,
            # the public curve as planned (count cells at plan.count_rows rows)
            "total_policy_curve": summary["total_policy_curve"],
            "worst_cells": {r.name: _sorted_cells(_strip_national(
                r.cells if r.cells is not None else pl.DataFrame())) for r in session.records},
            "counts": confidential["releases"],
            "left_out": left_out,
            "max_left_out": None if spec.budget is None else spec.budget.max_left_out,
            "top_n": 20,
        }), encoding="utf-8")
        # Hygiene: every public file carries the manifest's one timestamp (no processing
        # time leaks through mtimes); confidential files are the owner's only.
        _set_tree(pub, epoch, None, None)
        _set_tree(conf, None, 0o700, 0o600)
    curator = spec.input.mode == "curator"
    return ReleaseResult(spec.output.public, spec.output.confidential, files,
                         {k.removesuffix(".parquet"): v for k, v in public.items()},
                         coverage if curator else [], left_out if curator else {})


def left_out_by_table(session: Session) -> dict[str, dict[str, Any]]:
    """CONFIDENTIAL: per release of ``session``, what the budget's individual filter left out.

    A unit whose loss would pass its budget is left out of a table (its rows and values are
    dropped from the cells; the table is still released): totals are biased downward by what
    was left out, and the published sd / moe do not include that bias. Per release: ``units``
    and ``rows`` left out, ``rows_share`` (of the rows in released cells) and, for sums, per
    measure the exact ``left_out`` amount, the ``total`` in released cells and their
    ``share``. ``max_share`` is the largest of these shares.

    Args:
        session: The session the tables were released in.

    Returns:
        Release name → its counts (only releases whose engine reports them).

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1, budget=0.5)
        >>> df = pl.DataFrame({"c": ["a", "a", "b"], "x": [1.0, 50.0, 2.0]})
        >>> _ = df.dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
        ...               mechanism=tabdp.mechanisms.Gaussian(40.0), session=s, name="x")
        >>> got = left_out_by_table(s)["x"]
        >>> got["units"], got["rows"], got["measures"]["x"]["share"]
        (1, 1, 0.9433962264150944)
    """
    out: dict[str, dict[str, Any]] = {}
    for r in session.records:
        c = r.confidential
        if "units_left_out_by_budget" not in c:
            continue
        rows_in = int(c.get("rows_in_released_cells") or 0)
        rows = c.get("rows_left_out_by_budget")
        measures = {m: dict(v) for m, v in (c.get("left_out_by_budget") or {}).items()}
        rows_share = None if rows is None else (rows / rows_in if rows_in else 0.0)
        shares = [x for x in [rows_share, *[v["share"] for v in measures.values()]]
                  if x is not None]
        out[r.name] = {"units": int(c["units_left_out_by_budget"]), "rows": rows,
                       "rows_in_released_cells": rows_in, "rows_share": rows_share,
                       "measures": measures, "max_share": max(shares) if shares else None}
    return out


def left_out_in_words(left_out: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """CONFIDENTIAL: one line per table with units left out by the budget (curator only).

    Args:
        left_out: From `left_out_by_table()`.

    Returns:
        The lines (none when no unit was left out).

    Example:
        >>> left_out_in_words({"t": {"units": 3, "rows": 4, "rows_share": 0.04,
        ...     "measures": {"x": {"share": 0.35}}}, "u": {"units": 0}})
        ['t: 3 units (4 rows, 4.00% of its rows) left out by the budget; left out: x 35.00%']
    """
    lines = []
    for name, v in left_out.items():
        if not v.get("units"):
            continue
        rows = v.get("rows")
        rows_txt = "" if rows is None else (
            f" ({rows:,} rows, {100 * (v.get('rows_share') or 0.0):.2f}% of its rows)")
        meas = ", ".join(f"{m} {100 * x['share']:.2f}%" for m, x in v.get("measures", {}).items())
        lines.append(f"{name}: {v['units']:,} units{rows_txt} left out by the budget"
                     + (f"; left out: {meas}" if meas else ""))
    return lines


class LeftOutError(DataValidationError):
    """The budget left out more than ``budget.max_left_out`` of a table (curator mode).

    Raised inside a run after the data was read: it becomes the run's generic
    `DataDependentFailure`; its text and `confidential` details go only to
    ``failure.json``.

    Example:
        >>> err = LeftOutError({"t": 0.5}, 0.1)
        >>> err.confidential["tables_over_limit"]
        {'t': 0.5}
    """

    def __init__(self, over: Mapping[str, float], limit: float) -> None:
        """Name the tables whose largest left-out share passed ``limit``."""
        shown = ", ".join(f"{k} ({v:.2%})" for k, v in over.items())
        super().__init__(
            f"the budget left out more than budget.max_left_out = {limit:g} of the rows or of "
            f"a measure of: {shown}. Nothing was written.\nHint: raise the budget for the "
            "record sizes left out (tabdp plan lists them), lower the tables' losses, or raise "
            "budget.max_left_out.",
            confidential={"tables_over_limit": dict(over), "max_left_out": limit})


def check_left_out(spec: Any, left_out: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse a curator run whose budget left out more than ``budget.max_left_out``.

    Args:
        spec: The release spec (its ``budget`` and ``input.mode`` are read).
        left_out: From `left_out_by_table()`.

    Raises:
        LeftOutError: A table's largest left-out share (rows or a measure) passed the limit.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> spec = NS(budget=NS(max_left_out=0.1), input=NS(mode="curator"))
        >>> check_left_out(spec, {"t": {"max_share": 0.05}})
        >>> check_left_out(spec, {"t": {"max_share": 0.5}})
        Traceback (most recent call last):
        ...
        tabdp.release.runner.LeftOutError: the budget left out more ...
    """
    limit = None if spec.budget is None else spec.budget.max_left_out
    if limit is None or spec.input.mode != "curator":
        return
    over = {k: float(v["max_share"]) for k, v in left_out.items()
            if v.get("max_share") is not None and v["max_share"] > limit}
    if over:
        raise LeftOutError(over, limit)


def publishable_in_words(usable: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[str]:
    """Plain-language shares of publishable cells, one sentence per table and measure.

    Args:
        usable: ``{table: {measure: {"cells", "publishable_share", "flagged_share",
            "negative_share"}}}`` ([`published_usability`][tabdp.planning.published_usability] per
            table).

    Returns:
        The sentences (post-processing of the published flags only).

    Example:
        >>> publishable_in_words({"pay": {"payroll": {"cells": 4.0, "publishable_share": 0.75,
        ...                                           "flagged_share": 0.25,
        ...                                           "negative_share": 0.0}}})[0][:58]
        'pay, payroll: 3 of 4 cells (75%) are publishable (no flag '
    """
    out = []
    for table, measures in usable.items():
        for m, u in measures.items():
            n = int(u["cells"])
            if n == 0:
                out.append(f"{table}, {m}: no cells")
                continue
            k = int(round(u["publishable_share"] * n))
            out.append(f"{table}, {m}: {k:,} of {n:,} cells ({u['publishable_share']:.0%}) are "
                       f"publishable (no flag C, S or X); {u['flagged_share']:.0%} are flagged "
                       f"low reliability (C), {u['negative_share']:.0%} negative (N)")
    return out


def _summary_table(summary: dict[str, Any], table: str) -> dict[str, Any]:
    return next(t for t in summary["tables"] if t["name"] == table)


def summary_grid(summary: dict[str, Any], table: str) -> dict[str, Any]:
    """The public grid of each measure of ``table`` in a plan summary (numbers only).

    Args:
        summary: [`plan_summary`][tabdp.release.plan_summary] output.
        table: Table name.

    Returns:
        Measure → grid step (labels such as relative grids are left out).

    Example:
        >>> summary_grid({"tables": [{"name": "t", "grid": {"x": 1.0, "y": "rel"}}]}, "t")
        {'x': 1.0}
    """
    for t in summary["tables"]:
        if t["name"] == table:
            return {m: g for m, g in t["grid"].items() if isinstance(g, (int, float))}
    return {}


def _manifest(spec: ReleaseSpec, summary: dict[str, Any], started: str, version: str
              ) -> dict[str, Any]:
    import narwhals
    import scipy

    return {
        "tabdp_version": version,
        "release": summary["release"],
        # one timestamp, taken before any data is read (a finish time would tell how long the
        # confidential data took to process); every public file has it as its mtime
        "created": started,
        "not_for_publication": summary["not_for_publication"],
        # The spec without [randomness] (the seed would let anyone remove the noise), and the
        # hash of that redacted canonical form (the hash of the file's bytes covers the seed,
        # and a small seed could be found by trying them all).
        "spec": {"file": spec.path.name if spec.path else None,
                 "sha256_redacted": spec.public_sha256,
                 "hash_of": "canonical JSON (sorted keys, no spaces, UTF-8) of the spec without "
                            "its [randomness] section",
                 "redacted_sections": ["randomness"],
                 "content": spec.public_raw},
        # the declared input schema (what the spec reads and how), never the data's own
        "input": {"columns": declared_schema(spec), "unit": summary["unit"],
                  "policies": summary["input_policies"]},
        "randomness": summary["randomness"],
        "budget": summary["budget"],
        "level": spec.release.level,
        "tables": [{k: t[k] for k in ("name", "kind", "measures", "by", "cells", "keys", "file",
                                      "mechanism", "guarantee", "calibration", "grid",
                                      "grid_applies_to", "null_policy", "publication",
                                      "rollups")}
                   for t in summary["tables"]],
        "files": summary["files"],
        "schema": {"form": spec.output.form,
                   "columns": (["<keys>", *LONG_COLUMNS] if spec.output.form == "long" else
                               ["<keys>", *[f"<m>{x}" for x in (*WIDE_SUFFIXES,
                                                                 *STAT_SUFFIXES)]]),
                   "flag_codes": summary["flag_codes"]},
        "environment": {"python": platform.python_version(), "numpy": np.__version__,
                        "scipy": scipy.__version__, "polars": pl.__version__,
                        "narwhals": narwhals.__version__},
    }


def _confidential(spec: ReleaseSpec, session: Session, negatives: dict[str, Any],
                  input_schema: Mapping[str, str], caught: Sequence[Any]) -> dict[str, Any]:
    releases = {}
    for r in session.records:
        c = dict(r.confidential)
        nulls = {k: v for k, v in c.items() if k.startswith("missing_values")}
        releases[r.name] = {
            "rows_read": c.get("rows_read"),
            "rows_outside_keys": c.get("rows_outside_keys"),
            "cells_with_data_outside_keys": c.get("cells_with_data_outside_keys"),
            "rows_in_released_cells": c.get("rows_in_released_cells"),
            "nulls": {"policy": r.nulls, **nulls},
            "negatives": {"policy": negatives["policy"], "clipped": negatives["clipped"],
                          "dropped": negatives["dropped"]},
            "exact_rounding_fallbacks": dict(r.fallbacks),
        }
    for name, lo in left_out_by_table(session).items():
        releases[name]["left_out_by_budget"] = lo
    summary = session.report(delta=spec.release.delta).confidential_summary()
    return {
        "CONFIDENTIAL": "derived from individual records: do not publish",
        "seed": spec.seed,
        "spec_sha256": spec.sha256,
        "units": summary["units"],
        "rho_max": summary["rho_max"],
        **{k: v for k, v in summary.items() if k.startswith("rho_q")},
        "negative_values_in_input": negatives["negative_values"],
        "input_rules": {k: v for k, v in negatives.items()
                        if k not in ("policy", "negative_values", "clipped", "dropped")},
        # the schema the data actually has (the manifest lists the declared one)
        "input_schema": dict(input_schema),
        "warnings": [str(w.message) for w in caught],
        "releases": releases,
    }


def _coverage(session: Session) -> tuple[list[str], dict[str, Any]]:
    """Curator-facing warnings (tables, no counts) and their confidential counts."""
    texts: list[str] = []
    counts: dict[str, Any] = {}
    records = list(session.records)
    if records and not records[0].confidential.get("rows_read"):
        texts.append("the input has no rows: every published cell is noise around 0. Check "
                     "input.path and the input rules.")
        counts["input_rows"] = 0
    elif records:
        empty: list[str] = []
        partial: list[str] = []
        for r in records:
            c = r.confidential
            if c.get("rows_outside_keys"):
                counts[r.name] = {"rows_outside_keys": c.get("rows_outside_keys"),
                                  "rows_in_released_cells": c.get("rows_in_released_cells")}
                (empty if not c.get("rows_in_released_cells") else partial).append(r.name)
        if empty:
            texts.append(f"no input row falls in the key set of {', '.join(empty)}: every "
                         "published cell there is noise around 0. Check the domains / keys "
                         "files against the input's key values (types and codes).")
        if partial:
            texts.append(f"rows of the input fall outside the key set of {', '.join(partial)} "
                         "and are not released (counts in confidential.json, coverage).")
    return texts, counts


def _sorted_cells(cells: pl.DataFrame) -> pl.DataFrame:
    """A release's cell audit in a reproducible order: worst loss first, ties by key."""
    if cells.height == 0 or "worst_rho" not in cells.columns:
        return cells
    keys = [c for c in cells.columns if c not in ("worst_rho", "worst_size", "units")]
    return cells.sort(["worst_rho", *keys], descending=[True, *[False] * len(keys)],
                      nulls_last=True)


def _worst_cells(session: Session) -> pl.DataFrame:
    """All releases' per-cell audits stacked: release, cell (keys as text), worst loss."""
    parts = []
    for r in session.records:
        cells = r.cells
        if cells is None or cells.height == 0:
            continue
        keys = [c for c in cells.columns if c not in ("worst_rho", "worst_size", "units")]
        keys_txt = [c for c in keys if c != NATIONAL]
        cell = (pl.concat_str([pl.lit(f"{c}=") + pl.col(c).cast(pl.String) for c in keys_txt],
                              separator=", ") if keys_txt else pl.lit("national"))
        parts.append(cells.select(pl.lit(r.name).alias("release"), cell.alias("cell"),
                                  "worst_rho", "worst_size", "units"))
    if not parts:
        return pl.DataFrame(schema={"release": pl.String, "cell": pl.String,
                                    "worst_rho": pl.Float64, "worst_size": pl.Float64,
                                    "units": pl.Int64})
    return pl.concat(parts).sort(["worst_rho", "release", "cell"],
                                 descending=[True, False, False])
