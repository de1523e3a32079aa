"""Planning a release, before any data is read: the plan summary and ``tabdp plan``.

Everything here follows from the spec and public metadata only: key counts, mechanisms,
grids, expected errors, policy curves, the budget check and the sizes the budget leaves out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tabdp._numeric import add_up, mul_up
from tabdp.exceptions import (
    TabdpError,
)
from tabdp.mechanisms import Mechanism
from tabdp.planning import spec_outlook, spec_usability_issues, upper_3g
from tabdp.privacy.ledger import UnitLosses
from tabdp.privacy.session import total_policy_curve
from tabdp.release._left_out import (
    _Charge,
    _key_count,
    _measure_mechanism,
    _released_charges,
    left_out_bias_in_words,
    left_out_sizes,
)
from tabdp.release._levels import (
    _measured_labels,
    _released_measures,
    _table_mechanism,
    total_curve_description,
)
from tabdp.release._staging import (
    _check_target,
    _finite,
    _json,
    _Staging,
    clean_stale_staging,
)
from tabdp.release.publish import COLUMN_DOCS, FLAG_CODES
from tabdp.release.spec import ReleaseSpec, RollupSpec, TableSpec

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


def _charges(mechanism: Mechanism, t: TableSpec) -> int:
    return 1 if getattr(mechanism, "joint", False) else len(_released_measures(t))


def _file_name(t: TableSpec, r: RollupSpec | None = None, direct: bool = False) -> str:
    if r is None:
        return f"{t.name}.parquet"
    return f"{t.name}__{r.label}{'_direct' if direct else ''}.parquet"


def _expected_error(mech: Mechanism, totals: Sequence[float], level: float,
                    grid: float | None = None) -> list[dict[str, float | None]]:
    """Expected sd and margin of error at hypothetical totals, on the table's own grid.

    ``grid`` is the step the run rounds to (`_planned_grid`): the margin of error includes half
    of it exactly as the run's does (``None``: the mechanism's default grid, or a grid that is
    not a step, such as a relative grid).
    """
    x = np.asarray(totals, dtype=np.float64)
    sd = mech.sd_at(x)
    # the base moe_at takes no grid (mechanisms without a step grid)
    moe = mech.moe_at(x, level) if grid is None else mech.moe_at(  # type: ignore[call-arg]
        x, level, grid=grid)
    rows = []
    for t, s, e in zip(x, np.broadcast_to(sd, x.shape), np.broadcast_to(moe, x.shape),
                       strict=True):
        # a tiny planned total overflows the ratio (None: infinite), silently: a warning here
        # printed tabdp's install path to an author-mode plan's stderr (review r74)
        with np.errstate(all="ignore"):
            rel = _finite(e / t) if t > 0 else None
        rows.append({"total": float(t), "sd": _finite(s), "moe": _finite(e), "rel_moe": rel})
    return rows


def _published_error(rows: list[dict[str, float | None]], cons: Mapping[str, Any] | None,
                     measure: str) -> list[dict[str, float | None]]:
    """A consistent table's cells are published from the consistent estimate (review r78).

    Their sd and margin are the estimate's (the plan's ``expected_sd`` of the table's own
    level, median cell; the margin as `consistent` publishes it), not those of the
    whole-budget mechanism's direct release, which the plan stated before: e.g. +18 % on the
    margin of an exponential-polylog payroll table (normal margin z x sd, not the noise law's).
    """
    own = ((cons or {}).get("expected_sd") or {}).get(measure)
    if not own:  # not consistent, or no sd (alpha-stable noise)
        return rows
    sd, moe = own[0]["sd_median"], own[0]["moe_median"]
    return [{**r, "sd": sd, "moe": moe,
             "rel_moe": _finite(moe / t) if (t := float(r["total"] or 0.0)) > 0 else None}
            for r in rows]


def _rollup_methods(mech: Mechanism, measures: Sequence[str], level: float) -> dict[str, str]:
    """The public description of how rollup margins of error are computed, per measure."""
    from tabdp.release.rollup import sum_error_method

    out = {}
    for m in measures:
        mm = _measure_mechanism(mech, m)
        try:
            method = sum_error_method(mm)
        except TabdpError:
            method = ("normal approximation (plug-in sd; errors of transformation mechanisms "
                      "are not identically distributed)")
        out[m] = method
    return out


def statistic_in_words(kind: str, measures: Sequence[str], unit: str | None,
                       count_rows: int, max_cells: int | None = None) -> str:
    """PUBLIC: what a table's cells count or add up, from the spec alone.

    A count with a unit (``input.unit``) counts at most ``plan.count_rows`` rows per unit in a
    cell (the engine caps each unit's rows there; the Python API's ``df.dp.count`` counts
    every row unless ``max_rows=`` is given): with ``count_rows = 1`` it is the number of
    distinct units.

    Args:
        kind: ``"count"`` or ``"sum"``.
        measures: The summed measures (sums).
        unit: The spec's ``input.unit`` column (``None``: each row is a unit).
        count_rows: The spec's ``plan.count_rows``.
        max_cells: The spec's ``input.max_cells`` (with a unit: each unit's contributions to
            at most that many cells of a table are kept, its largest; the rest are left out).

    Returns:
        The definition (``summary.json`` / ``manifest.json`` tables' ``statistic``).

    Example:
        >>> statistic_in_words("count", [], "id", 1)
        'number of distinct id units per cell'
        >>> statistic_in_words("count", [], "id", 2)
        'number of rows, at most 2 per id per cell'
        >>> statistic_in_words("count", [], None, 2)
        'number of rows'
        >>> statistic_in_words("sum", ["payroll", "employment"], "id", 1)
        'sum of payroll, employment'
        >>> statistic_in_words("sum", ["payroll"], "id", 1, max_cells=2)
        'sum of payroll; each id counted in at most 2 cell(s) of the table (its largest)'
    """
    cap = (f"; each {unit} counted in at most {max_cells} cell(s) of the table (its largest)"
           if unit is not None and max_cells is not None else "")
    if kind != "count":
        return "sum of " + ", ".join(measures) + cap
    if unit is None:
        return "number of rows"
    if count_rows == 1:
        return f"number of distinct {unit} units per cell" + cap
    return f"number of rows, at most {count_rows} per {unit} per cell" + cap


def rollup_statistic_in_words(kind: str, measures: Sequence[str], unit: str | None,
                              count_rows: int, *, direct: bool = False,
                              consistent: bool = False, max_cells: int | None = None) -> str:
    """PUBLIC: what a rollup's cells add up, from the spec alone (review r52).

    A rollup adds the table's cells: a sum, or a count of rows, is the same statistic at the
    coarser level, but a count with a unit counts a unit once in each of the table's cells it
    is in (not once in the rollup's cell). A directly released rollup (``direct``, not
    consistent) is its own release by its own keys: the table's statistic at its level.

    Args:
        kind: ``"count"`` or ``"sum"``.
        measures: The summed measures (sums).
        unit: The spec's ``input.unit`` column (``None``: each row is a unit).
        count_rows: The spec's ``plan.count_rows``.
        direct: The ``_direct`` file of a ``direct = true`` rollup.
        consistent: The table is ``consistent = true`` with direct rollups (every level adds
            up its finest cells, estimated with the direct releases, which count at most
            ``count_rows`` rows of a unit per cell of their own level).
        max_cells: The spec's ``input.max_cells`` (as `statistic_in_words`).

    Returns:
        The definition (``rollups``' ``statistic`` / ``direct_statistic``).

    Example:
        >>> rollup_statistic_in_words("count", [], "id", 1)[:70]
        "sum over the table's cells of the number of distinct id units per cell"
        >>> rollup_statistic_in_words("count", [], "id", 2)
        "sum over the table's cells of the number of rows, at most 2 per id per cell of the table"
        >>> rollup_statistic_in_words("count", [], "id", 1, direct=True)
        'number of distinct id units per cell'
        >>> rollup_statistic_in_words("sum", ["payroll"], "id", 1)
        'sum of payroll'
    """
    base = statistic_in_words(kind, measures, unit, count_rows, max_cells)
    if kind != "count" or unit is None or (direct and not consistent):
        return base
    cap = base[base.index(";"):] if ";" in base else ""
    a = "an" if unit[:1].lower() in "aeiou" else "a"
    if count_rows == 1:
        words = (f"sum over the table's cells of the number of distinct {unit} units per cell: "
                 f"{a} {unit} in several of the table's cells counts once in each")
    else:
        words = (f"sum over the table's cells of the number of rows, at most {count_rows} per "
                 f"{unit} per cell of the table")
    if consistent:
        words += (" (the consistent estimate also uses the table's direct releases, which "
                  f"count at most {count_rows} row(s) of {a} {unit} per cell of their own level: "
                  f"where {a} {unit} is in several of the table's cells, it mixes the two "
                  "counts and can fall outside both)")
    return words + cap


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


#: Why a seeded (``--test-seed``) run's outputs must not be published.
SEEDED_REASON = ("This folder comes from a seeded test run (tabdp run --test-seed): its noise "
                 "can be reproduced by anyone who learns the seed, so its tables protect no "
                 "one. Do not publish any file of this folder.")


def mark_not_for_publication(summary: dict[str, Any], reason: str, text: str) -> None:
    """Mark a (plan) summary not for publication, for ``reason`` (a code) said in ``text``.

    The one way outputs are marked (a seeded run by `plan_summary`; ``tabdp compare``'s DP
    side by `run_release`'s internal ``_not_for_publication``): the manifest, the summary, its
    page and the `NOT_FOR_PUBLICATION` file of the public folder all follow from the summary,
    written in the same staging as the tables.

    Example:
        >>> s = {"not_for_publication": False, "not_for_publication_reasons": []}
        >>> mark_not_for_publication(s, "comparison_copy", "A copy.")
        >>> s["not_for_publication"], s["not_for_publication_reasons"][0]["reason"]
        (True, 'comparison_copy')
    """
    summary["not_for_publication"] = True
    summary.setdefault("not_for_publication_reasons", []).append(
        {"reason": reason, "text": text})


def not_for_publication_text(summary: Mapping[str, Any]) -> str:
    """The text of the `NOT_FOR_PUBLICATION` file of a marked summary: every reason.

    Example:
        >>> print(not_for_publication_text({"not_for_publication_reasons": [
        ...     {"reason": "comparison_copy", "text": "A copy."}]}), end="")
        NOT FOR PUBLICATION
        <BLANKLINE>
        A copy.
    """
    texts = [r["text"] for r in summary.get("not_for_publication_reasons") or []]
    return "NOT FOR PUBLICATION\n\n" + "\n\n".join(texts or ["Do not publish this folder."]
                                                     ) + "\n"

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
    from tabdp.release._consistent import consistent_outlook

    outlook = {o["table"]: o for o in spec_outlook(spec, consistent_outlook)}
    issues = spec_usability_issues(spec)
    unit = "unit" if spec.input.unit else "record"
    entries: list[tuple[Mechanism, int]] = []
    rows = float(spec.plan.count_rows)
    # A unit touches at most max_cells cells of a table (enforced with a unit; one cell per
    # table for row units) and counts at most plan.count_rows rows in a count cell (enforced).
    cells = spec.input.max_cells or 1
    for t in spec.tables:
        # a consistent table with shares: the table's own release uses its level's mechanism
        mech = _table_mechanism(t, _measured_labels(t)[0] if t.shares else None)
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
        if t.shares:
            # each measured level has its own mechanism (its share of the targets)
            lvl = [_table_mechanism(t, lb) for lb in _measured_labels(t)]
            level_entries: list[Any] = [(_AtRows(m_, rows), k) if t.kind == "count" else (m_, k)
                                        for m_ in lvl]
            entries += level_entries
            per_table_all = total_policy_curve(level_entries, sizes, delta)
        else:
            entries += [entry] * (1 + len(direct))
            per_table_all = total_policy_curve([(entry[0], k * (1 + len(direct)))], sizes,
                                               delta)
        per_table = total_policy_curve([entry], sizes, delta)
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
        cons: dict[str, Any] | None = None
        if t.consistent:
            from tabdp.release._consistent import plan_consistent

            cons = plan_consistent(spec, t, _table_mechanism(t), measures, {
                lb: _table_mechanism(t, lb) for lb in _measured_labels(t)} if t.shares else None,
                grid=grid)
        for r in t.rollups:
            rollups.append({
                "by": list(r.by), "label": r.label, "file": _file_name(t, r),
                "cells": _key_count(spec, r.by) if all(c in spec.domains for c in r.by) else None,
                "moe_method": (cons["methods"] if cons is not None
                               else _rollup_methods(mech, measures, level)),
                "statistic": rollup_statistic_in_words(
                    t.kind, measures, spec.input.unit, spec.plan.count_rows,
                    consistent=cons is not None and any(x.direct for x in t.rollups),
                    max_cells=spec.input.max_cells),
                "direct": r.direct,
                "direct_file": (_file_name(t, r, direct=True) if r.direct and cons is None
                                else None),
                "direct_statistic": (rollup_statistic_in_words(
                    t.kind, measures, spec.input.unit, spec.plan.count_rows, direct=True,
                    max_cells=spec.input.max_cells)
                    if r.direct and cons is None else None),
            })
        tables.append({
            "name": t.name, "kind": t.kind, "measures": measures, "by": list(t.by),
            "statistic": statistic_in_words(t.kind, measures, spec.input.unit,
                                            spec.plan.count_rows, spec.input.max_cells),
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
            "expected_error": {m: _published_error(_expected_error(
                _measure_mechanism(mech, m),
                spec.plan.count_totals if t.kind == "count" else spec.plan.cell_totals, level,
                grid[m] if isinstance(grid[m], float) else None), cons, m) for m in measures},
            "rollups": rollups,
            **({"consistent": cons} if cons is not None else {}),
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
            **({"forecast_by_level": outlook[t.name]["consistent_levels"]}
               if "consistent_levels" in outlook[t.name] else {}),
            "usability_issues": outlook[t.name]["issues"],
        })
    summary = {
        "tabdp_version": __version__,
        "release": {"name": spec.release.name, "title": spec.release.title,
                    "description": spec.release.description, "level": level,
                    "delta": delta},
        "unit": spec.input.unit or "row",
        "randomness": ("secure (OS CSPRNG)" if spec.seed is None else
                       "seeded: NOT FOR PRODUCTION (the seed is in the confidential folder)"),
        # marked below for a seeded run (tabdp compare's DP side: the same way, in run_release)
        "not_for_publication": False,
        "not_for_publication_reasons": [],
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
        "total_policy_curve_description": total_curve_description(spec),
        "budget_check": _budget_check(spec, total),
        "left_out_sizes": (lo_sizes := left_out_sizes(spec)),
        "left_out_in_words": left_out_bias_in_words(spec, lo_sizes, unit),
        "guarantee_in_words": release_guarantee_in_words(spec, unit),
        **({"lifetime": public_lifetime(spec, total, unit)} if spec.ledger is not None else {}),
        "usability_issues": [{"path": p, "message": m} for p, m in issues],
        "flag_codes": dict(FLAG_CODES),
        "columns": dict(COLUMN_DOCS),
    }
    if spec.seed is not None:
        mark_not_for_publication(summary, "seeded_test_run", SEEDED_REASON)
    return summary


def public_lifetime(spec: Any, total_curve: list[dict[str, Any]] | None = None,
                    unit: str = "unit", history: list[dict[str, Any]] | None = None,
                    this_curve: dict[str, Any] | None = None) -> dict[str, Any]:
    """PUBLIC: the series, its lifetime budget and the lifetime guarantee in words.

    Computed from the spec (``[ledger]``'s series and lifetime budget, the release's public
    policy curves) and, given ``history``, the past releases' names and public curves as
    their ledger entries record them — never from the ledger's per-unit contents:
    ``tabdp validate`` and ``tabdp plan`` (no ledger opened) state the cap and the filter; a
    release's ``summary.json`` / ``summary.html`` state the same, and how much a unit of a
    few sizes has lost at most over the past releases and this one, identical on
    neighbouring datasets.

    Args:
        spec: The release spec (with ``[ledger]``).
        total_curve: The release's total policy curve (rows ``{"delta": size, "rho": ...}``:
            a unit's worst-case ρ in one release like this one); ``None``: computed.
        unit: What a unit is called.
        history: The ledger's past releases (`tabdp.Ledger.releases_public`); ``None``: not
            stated (no ledger opened).
        this_curve: This release's recorded curves (`lifetime_curve`); ``None``: computed.

    Returns:
        ``{"series", "lifetime_budget", "guarantee_in_words", "enforcement"}``, and with
        ``history`` ``"releases"`` (the names, this one last) and ``"bound_over_releases"``
        (rows ``{"delta", "rho", "bound_by"}``); the history's sentences are in
        ``guarantee_in_words``, after the first.

    Example:
        >>> import types
        >>> spec = types.SimpleNamespace(
        ...     ledger=types.SimpleNamespace(series="cbp", lifetime_budget=2.0),
        ...     release=types.SimpleNamespace(name="cbp_2026", delta=None))
        >>> pub = public_lifetime(spec, [{"delta": 1e3, "rho": 0.5}], "establishment")
        >>> pub["series"], pub["guarantee_in_words"][1][-60:]
        ('cbp', 'leaves it out of the tables that would take it past rho = 2.')
    """
    from tabdp.privacy.budget import Budget

    led = spec.ledger
    budget = Budget.coerce(led.lifetime_budget)
    assert budget is not None
    if total_curve is None:
        total_curve = plan_summary(spec)["total_policy_curve"]
    words = lifetime_in_words(spec, total_curve, unit)
    out: dict[str, Any] = {"series": led.series, "lifetime_budget": budget.to_dict()}
    if history is not None:
        from tabdp.privacy.lifetime import history_in_words

        rels = [{"release": r["release"] if r.get("release") is not None else f"#{r['seq']}",
                 "curve": r.get("curve")} for r in history]
        rels.append({"release": spec.release.name,
                     "curve": this_curve if this_curve is not None
                     else lifetime_curve(spec, total_curve)})
        said, bound = history_in_words(led.series, budget, rels, unit, current=True)
        words = [words[0], *said, *words[1:]]
        out |= {"releases": [r["release"] for r in rels], "bound_over_releases": bound}
    return {**out, "guarantee_in_words": words,
            "enforcement": "individual filter over the series' releases"}


def lifetime_curve(spec: ReleaseSpec, total_curve: list[dict[str, Any]]) -> dict[str, Any]:
    """PUBLIC: the curves a release's ledger entry records (the plan's, from the spec alone).

    The plan's total policy curve and, per currency, the same sum over the release's tables
    (`_released_charges`: each measure at its size, counts at ``plan.count_rows`` rows), at
    the plan's record sizes, and which units they bound.

    Args:
        spec: The release spec.
        total_curve: The plan's ``total_policy_curve``.

    Returns:
        [`release_curve`][tabdp.privacy.lifetime.release_curve]'s form.

    Example:
        >>> from tabdp.release.spec import load_spec
        >>> import tabdp, pathlib
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> spec = load_spec(root / "examples" / "cbp_release.toml")
        >>> c = lifetime_curve(spec, plan_summary(spec)["total_policy_curve"])
        >>> sorted(c["currencies"])[:2], c["holds_for"][:38]
        (['employment', 'payroll'], 'units contributing to one cell of each')
    """
    from tabdp.privacy.lifetime import release_curve

    sizes = np.array([float(s) for s in spec.plan.record_sizes])
    per: dict[str, dict[str, Any]] = {}
    for _, charge in _released_charges(spec):
        for c, ch in charge.items():
            got = per.setdefault(c, {"rows": ch.rows, "rho": np.zeros_like(sizes)})
            got["rho"] = add_up(got["rho"], ch(sizes))
            if ch.rows is not None:
                got["rows"] = max(got["rows"] or 0.0, ch.rows)
    return release_curve(
        total_curve,
        {c: {"rows": v["rows"], "curve": [
            {"delta": float(d), "rho": float(r) if math.isfinite(r) else None}
            for d, r in zip(sizes, v["rho"], strict=True)]} for c, v in per.items()},
        _curves_hold_for(spec))


def _curve_cap(b: Any, per: dict[str, Any], s: float, rho: float) -> tuple[float, int]:
    """The lifetime cap on a unit's total ρ at size ``s`` and the releases charged in full.

    A constant budget caps the total (``k·rho <= cap``). A curve budget caps each currency
    ``c`` at its limit at the unit's size there, and the filter decides per currency: the cap
    is the sum of the limits of the release's currencies (rounded up; at most ``total``), and
    a release like this one is charged in full while every currency stays within its limit
    (``k = min_c floor(limit_c / rho_c)``, and ``floor(total / rho)`` with a ``total``).
    Without per-currency curves (none recorded), the generic curve at ``s``.

    Example:
        >>> from tabdp.privacy.budget import Budget
        >>> _curve_cap(Budget(2.0), {}, 1e3, 0.5)
        (2.0, 3)
    """
    from tabdp.privacy.lifetime import currency_limit

    def full(cap: float, r: float) -> int:  # rounded down, with room for rounding
        return math.floor(cap / r * (1 - 1e-12))

    if b.constant is not None or not per:
        cap = float(b.constant) if b.constant is not None else float(b.limit([s])[0])
        return cap, full(cap, rho)
    cap, ks = 0.0, []
    for name, part in per.items():
        limit, r_c = currency_limit(b, name, part, s)
        cap = float(add_up(np.array([cap]), np.array([limit]))[0])
        if math.isfinite(r_c) and r_c > 0 and math.isfinite(limit):
            ks.append(full(limit, r_c))
    if b.total is not None:
        cap = min(cap, float(b.total))
        ks.append(full(float(b.total), rho))
    return cap, min(ks) if ks else (full(cap, rho) if math.isfinite(cap) else 0)


def lifetime_in_words(spec: Any, total_curve: list[dict[str, Any]],
                      unit: str = "unit") -> list[str]:
    """PUBLIC: the lifetime guarantee of the spec's release series, in sentences.

    From the lifetime budget and the release's total policy curve only (bounds rounded up;
    release counts rounded down).

    Args:
        spec: The release spec (with ``[ledger]``).
        total_curve: The release's total policy curve (``{"delta": size, "rho": ...}`` rows).
        unit: What a unit is called.

    Returns:
        The sentences: the bound over the series, then, at a few record sizes, how many
        releases like this one a unit is charged in full before the filter leaves it out.

    Example:
        >>> import types
        >>> spec = types.SimpleNamespace(
        ...     ledger=types.SimpleNamespace(series="cbp", lifetime_budget=2.0),
        ...     release=types.SimpleNamespace(name="cbp_2026", delta=None))
        >>> w = lifetime_in_words(spec, [{"delta": 1e3, "rho": 0.5}], "establishment")
        >>> w[0]
        "Over the releases of the series 'cbp' (this one, 'cbp_2026', included), every \
establishment loses at most rho = 2 in all (zCDP): the series' lifetime budget."
        >>> w[1][:78]
        'an establishment of size 1,000 (at most rho = 0.5 in one release like this one'
    """
    from tabdp.privacy.budget import Budget

    led = spec.ledger
    b = Budget.coerce(led.lifetime_budget)
    assert b is not None
    delta = spec.release.delta
    a = "an" if unit[:1].lower() in "aeio" else "a"  # "a unit", "an establishment"
    head = (f"Over the releases of the series {led.series!r} (this one, "
            f"{spec.release.name!r}, included), ")
    rows = [r for r in total_curve if r.get("rho") is not None]
    sizes = _few([float(r["delta"]) for r in rows])
    lines = []
    if b.constant is not None:
        lines.append(f"{head}every {unit} {_eps_words(float(b.constant), None, delta)} in all "
                     "(zCDP): the series' lifetime budget.")
    else:
        lines.append(f"{head}{a} {unit} loses, in each currency it contributes to (each "
                     "summed measure; rows for counts, medians and quantiles; a joint release of "
                     "several measures: their names joined by '+'), at most the lifetime "
                     "budget curve "
                     "at its size in that currency (zCDP); its loss over the series is at most "
                     "the sum of those limits over its currencies:")
    # a curve budget bounds each currency at the unit's size there (the rows a count curve
    # assumes): the cap on a unit's total is the sum over the release's currencies of their
    # limits (and ``total``), never the generic curve at one size
    per = lifetime_curve(spec, total_curve)["currencies"] if b.constant is None else {}
    for r in rows:
        s, rho = float(r["delta"]), float(r["rho"])
        if s not in sizes:
            continue
        if not (math.isfinite(rho) and rho > 0):
            continue
        cap, k = _curve_cap(b, per, s, rho)
        what = (f"{a} {unit} of size {_size_text(s)} (at most rho = {upper_3g(rho)} in one "
                "release like this one, contributing that size to a cell of every table)")
        over = "" if b.constant is not None else (
            f" loses at most rho = {upper_3g(cap)} over the series, and")
        past = (f"rho = {upper_3g(cap)}" if b.constant is not None or not per
                else "its lifetime budget in a currency")
        if k >= 1:
            lines.append(f"{what}{over} is charged in full in at least {k} release(s) like "
                         "this one; after that, the filter leaves it out of the tables that "
                         f"would take it past {past}.")
        else:
            lines.append(f"{what}{over} would pass its lifetime budget in one such release: "
                         f"the filter leaves it out of the tables that would take it past "
                         f"{past}.")
    if b.total is not None:
        lines.append(f"and every {unit} loses at most rho = {upper_3g(b.total)} in all.")
    lines.append(f"An individual filter (Feldman and Zrnic, arXiv:2008.11193) enforces it: a "
                 f"{unit} is left out of any table that would take its loss over the series "
                 "past its lifetime budget, however many releases it is in. Stated from the "
                 "public budget and curves alone.")
    return lines


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


def _up(a: float, b: float) -> float:
    """``a + b`` rounded up (`tabdp._numeric.add_up` on two floats)."""
    return float(add_up(np.array([a]), np.array([b]))[0])


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
        # totals over tables rounded up (`add_up`, `mul_up`): never below the exact sum
        # (review R18-1)
        rho = 0.0
        for _, ch in per[c]:
            rho = _up(rho, float(ch(np.array([size]))[0]))
        eps = 0.0
        for _, ch in per[c]:
            at_s = size if ch.rows is None else ch.rows
            e = float(np.asarray(ch.mechanism.epsilon(np.array([at_s])))[0])
            eps = _up(eps, e if ch.k == 1 else 0.0 if ch.k == 0 else float(
                mul_up(np.array([e]), float(ch.k))[0]))
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
                rho = _up(rho, r)
                eps_tot = _up(eps_tot, e) if e is not None and eps_tot is not None else None
            if ROWS_CURRENCY in per:
                r, e = at(ROWS_CURRENCY, float(spec.plan.count_rows))
                rho = _up(rho, r)
                eps_tot = _up(eps_tot, e) if e is not None and eps_tot is not None else None
            what = " and ".join(f"{c} {_size_text(s)}" for c, s in parts)
            rows = (f" (and {spec.plan.count_rows} row(s) per count cell)"
                    if ROWS_CURRENCY in per else "")
            lines.append(f"{a} {unit} with {what}{rows} {_eps_words(rho, eps_tot, delta)}"
                         f"{note} over the whole release (each measure's loss at its own size)")
    lines.append("In these sentences losses in different currencies are never added at one "
                 "number: a unit's total is the sum of its losses in each currency, each at its "
                 "size there. Only the plan's pessimistic total (the \"total\" curve and the "
                 "budget check) adds every currency's loss at the same number: a bound for a "
                 "unit whose contribution is that number in every currency, so the budget check "
                 "is conservative; the budget itself is enforced on each unit's actual losses.")
    return lines


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

    Raises:
        InvalidParameterError: The folder exists without ``overwrite``, is a symbolic link,
            or cannot be created, or a staging folder next to it cannot safely be removed.

    Warns:
        RolledForwardWarning: Curator mode: the clean-up put a killed run's complete plan
            folder in place (see `clean_stale_staging`).

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
    author = spec.input.mode == "author"  # a roll-forward's notice names server folders
    clean_stale_staging([target], author=author)
    _check_target(target, overwrite, "plan", author=author)
    summary = plan_summary(spec)
    summary["kind"] = "plan"
    with _Staging([target], overwrite) as (tmp,):
        (tmp / "plan.json").write_text(_json(summary), encoding="utf-8")
        (tmp / "plan.html").write_text(render_summary_html(summary), encoding="utf-8")
    return target


def _curves_hold_for(spec: ReleaseSpec) -> str:
    """Which units the planned curves bound (public: it follows from the spec)."""
    if spec.input.unit is None or spec.input.max_cells is not None:
        return "every unit"
    text = ("units contributing to one cell of each table (input.max_cells is not set: a unit "
            "in k cells of a table pays up to k times that table's curve)")
    if spec.budget is not None:
        text += "; the budget bounds every unit's total"
    return text
