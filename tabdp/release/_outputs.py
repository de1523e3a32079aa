"""What a run publishes and keeps: the manifest, the summary, the confidential report.

Also the left-out report of the budget's individual filter and the published usability.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tabdp.exceptions import (
    DataValidationError,
)
from tabdp.frame import LONG_COLUMNS, STAT_SUFFIXES, WIDE_SUFFIXES
from tabdp.privacy.session import Session
from tabdp.release._input import NATIONAL, declared_schema
from tabdp.release.spec import ReleaseSpec


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


def left_out_by_table(session: Session) -> dict[str, dict[str, Any]]:
    """CONFIDENTIAL: per release of ``session``, what the budget's individual filter left out.

    A unit whose loss would pass its budget is left out of a table (its rows and values are
    dropped from the cells; the table is still released): totals miss what was left out (a
    bias, downward for counts and for sums of non-negative values), and the published sd /
    moe do not include that bias. Per release: ``units`` and ``rows`` left out,
    ``rows_share`` (of the rows in released cells, counted before the filter) and, for sums,
    per measure the exact ``left_out`` amount, the ``total`` in released cells and their
    ``share``. ``max_share`` is the largest of these shares in absolute value (a signed
    measure's share may be negative). Counts, medians and quantiles have the share of rows
    alone (a median's rows are its values in released cells; every engine records them as
    a sum's, so `check_left_out` applies to them alike).

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
        # a signed measure's share (net left out over net total) may be negative: its size
        # is what the limit compares (docs/privacy-semantics.md, `budget.max_left_out`)
        shares = [abs(x) for x in [rows_share, *[v["share"] for v in measures.values()]]
                  if x is not None]
        out[r.name] = {"units": int(c["units_left_out_by_budget"]), "rows": rows,
                       "rows_in_released_cells": rows_in, "rows_share": rows_share,
                       "measures": measures, "max_share": max(shares) if shares else None}
    return out


def left_out_in_words(left_out: Mapping[str, Mapping[str, Any]], *,
                      by: str = "the budget") -> list[str]:
    """CONFIDENTIAL: one line per table with units left out by the budget (curator only).

    Args:
        left_out: From `left_out_by_table()`.
        by: What left them out (`left_out_filters`: ``"the lifetime budget"`` with a
            ledger alone).

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
        lines.append(f"{name}: {v['units']:,} units{rows_txt} left out by {by}"
                     + (f"; left out: {meas}" if meas else ""))
    return lines


def left_out_filters(spec: Any) -> str | None:
    """What a spec's individual filters are called (``None``: the spec has none).

    A ``[budget]`` and a lifetime ledger (``[ledger]``, or the dataset's) are both individual
    filters: a unit whose loss would pass either is left out of a table.

    Args:
        spec: The release spec (its ``budget`` and ``ledger`` are read).

    Returns:
        ``"the budget"``, ``"the lifetime budget"``, ``"the budget or the lifetime budget"``
        or ``None``.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> left_out_filters(NS(budget=None, ledger=NS()))
        'the lifetime budget'
        >>> left_out_filters(NS(budget=None, ledger=None)) is None
        True
    """
    budget = spec.budget is not None
    ledger = getattr(spec, "ledger", None) is not None
    if budget and ledger:
        return "the budget or the lifetime budget"
    if ledger:
        return "the lifetime budget"
    return "the budget" if budget else None


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

    def __init__(self, over: Mapping[str, float], limit: float,
                 key: str = "budget.max_left_out", by: str = "the budget") -> None:
        """Name the tables whose largest left-out share passed ``limit`` (set at ``key``)."""
        shown = ", ".join(f"{k} ({v:.2%})" for k, v in over.items())
        super().__init__(
            f"{by} left out more than {key} = {limit:g} of the rows or of a measure of: "
            f"{shown}. Nothing was written.\nHint: raise the budget for the record sizes left "
            "out (tabdp plan lists them), lower the tables' losses, or raise "
            f"{key}.",
            confidential={"tables_over_limit": dict(over), "max_left_out": limit})


def check_left_out(spec: Any, left_out: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse a curator run whose filters left out more than ``max_left_out``.

    ``budget.max_left_out``, or ``ledger.max_left_out`` (`max_left_out`): the share of a
    table's rows or of any measure left out by the budget and the lifetime budget.

    Args:
        spec: The release spec (its ``budget`` and ``input.mode`` are read).
        left_out: From `left_out_by_table()`.

    Raises:
        LeftOutError: A table's largest left-out share (rows or a measure) passed the limit.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> spec = NS(budget=NS(max_left_out=0.1), input=NS(mode="curator"), ledger=None)
        >>> check_left_out(spec, {"t": {"max_share": 0.05}})
        >>> check_left_out(spec, {"t": {"max_share": 0.5}})
        Traceback (most recent call last):
        ...
        tabdp.release._outputs.LeftOutError: the budget left out more ...
    """
    limit, key = max_left_out(spec)
    if limit is None or spec.input.mode != "curator":
        return
    over = {k: float(v["max_share"]) for k, v in left_out.items()
            if v.get("max_share") is not None and v["max_share"] > limit}
    if over:
        raise LeftOutError(over, limit, key, left_out_filters(spec) or "the budget")


def max_left_out(spec: Any) -> tuple[float | None, str]:
    """The spec's limit on the share its filters leave out, and the key that sets it.

    ``budget.max_left_out``, else ``ledger.max_left_out`` (a spec sets it in one section
    only); the limit applies to what the budget and the lifetime budget leave out together.

    Args:
        spec: The release spec (its ``budget`` and ``ledger`` are read).

    Returns:
        ``(limit, key)``; ``(None, "budget.max_left_out")`` when neither is set.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> max_left_out(NS(budget=None, ledger=NS(max_left_out=0.1)))
        (0.1, 'ledger.max_left_out')
    """
    if spec.budget is not None and spec.budget.max_left_out is not None:
        return float(spec.budget.max_left_out), "budget.max_left_out"
    led = getattr(spec, "ledger", None)
    if led is not None and getattr(led, "max_left_out", None) is not None:
        return float(led.max_left_out), "ledger.max_left_out"
    return None, "budget.max_left_out"


def publishable_in_words(usable: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[str]:
    """Plain-language shares of publishable cells, one sentence per table and measure.

    Args:
        usable: ``{table: {measure: {"cells", "publishable_share", "flagged_share",
            "withheld_share", "negative_share"}}}``
            ([`published_usability`][tabdp.planning.published_usability] per table; a missing
            ``withheld_share`` counts as 0).

    Returns:
        The sentences (post-processing of the published flags only): publishable, flagged
        ``C``, withheld ``S`` and negative ``N`` shares, each of all the cells (withheld cells
        are counted as withheld only).

    Example:
        >>> publishable_in_words({"pay": {"payroll": {"cells": 4.0, "publishable_share": 0.5,
        ...                                           "flagged_share": 0.25,
        ...                                           "withheld_share": 0.25,
        ...                                           "negative_share": 0.0}}})[0][58:]
        'C, S or X); 25% are flagged low reliability (C), 25% withheld (S), 0% negative (N)'
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
                       f"low reliability (C), {u.get('withheld_share', 0.0):.0%} withheld (S), "
                       f"{u['negative_share']:.0%} negative (N)")
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
        "not_for_publication_reasons": summary["not_for_publication_reasons"],
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
        "tables": [{k: t[k] for k in ("name", "kind", "statistic", "measures", "by", "cells",
                                      "keys", "file",
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
                  input_schema: Mapping[str, str], caught: Sequence[Any],
                  rho_stats: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """CONFIDENTIAL ``confidential.json``.

    ``rho_stats``: the records' loss statistics when the caller has them
    (``LossStatistics.rho_summary`` of the per-record file), else the session's.
    """
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
            # review rev63p: values beyond ±2**64 are clamped by the engine; the count was
            # computed but never reached the curator (a 1e30 payroll was published as 2**64)
            "values_clamped_to_2^64": {k.split(":", 1)[1]: v for k, v in c.items()
                                       if k.startswith("values_clamped_to_2^64:")},
        }
    for name, lo in left_out_by_table(session).items():
        releases[name]["left_out_by_budget"] = lo
    summary = (dict(rho_stats) if rho_stats is not None else
               session.report(delta=spec.release.delta).confidential_summary())
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
        # the lifetime ledger's warnings as it opened (before the data), then the data
        # pass's: those of the run's own thread (`tabdp._warnroute`), never another thread's
        "warnings": [*getattr(session.lifetime, "open_warnings", []),
                     *[str(w.message) for w in caught]],
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
        keys_txt = [c for c in keys if c != NATIONAL and not c.startswith(f"{NATIONAL}_in")]
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
