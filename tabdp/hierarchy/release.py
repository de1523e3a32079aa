"""The consistent estimate of a finished run, from its public outputs only.

[`consistent_from_release`][tabdp.hierarchy.consistent_from_release] reads a run's public folder
(the published tables, ``summary.json`` for the mechanisms and publication rules,
``manifest.json`` for the hierarchies) and returns every level of a table as the GLS consistent
estimate of the levels the run released directly. Post-processing: it reads nothing else, so it
costs no privacy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from tabdp import mechanisms as _mechanisms
from tabdp.exceptions import InvalidParameterError
from tabdp.hierarchy.consistent import consistent
from tabdp.mechanisms import Mechanism

__all__ = ["consistent_from_release"]


def _mechanism(d: Mapping[str, Any]) -> Mechanism:
    cls = getattr(_mechanisms, str(d.get("class", "")), None)
    if cls is None:
        raise InvalidParameterError(
            f"consistent_from_release: the summary names the mechanism class "
            f"{d.get('class')!r}, which tabdp.mechanisms does not have.\nHint: read the run "
            "with the tabdp version that wrote it.")
    m: Mechanism = cls(**dict(d.get("params", {})))
    return m


def _wide(long: pl.DataFrame, keys: list[str], measures: list[str],
          measured: bool) -> pl.DataFrame:
    """Published long form → wide (keys, m, m_sd); measured levels drop withheld cells."""
    out: pl.DataFrame | None = None
    for m in measures:
        part = long.filter(pl.col("measure") == m).select(
            *keys, pl.col("estimate").alias(m), pl.col("sd").alias(f"{m}_sd"))
        if measured:
            part = part.filter(pl.col(m).is_not_null())
        out = part if out is None else (out.join(part, on=keys, how="full", coalesce=True)
                                        if keys else pl.concat([out, part], how="horizontal"))
    assert out is not None
    return out


def _hierarchies(folder: Path) -> dict[str, pl.DataFrame]:
    manifest = json.loads((folder / "manifest.json").read_text())
    spec = (manifest.get("spec") or {}).get("content") or {}
    out = {}
    for name, h in (spec.get("hierarchies") or {}).items():
        levels = list(h["levels"])
        out[name] = pl.read_csv(h["file"], infer_schema=False).select(levels)
    return out


def consistent_from_release(output_folder: str | Path, table: str | None = None, *,
                            hierarchies: Mapping[str, pl.DataFrame] | None = None,
                            nonnegative: bool | None = None, integer: bool | None = None
                            ) -> dict[str, pl.DataFrame]:
    """The consistent estimate of a finished run's table, from its public outputs only.

    The measured levels are the table and its ``direct = true`` rollups: their ``_direct``
    files in a run without ``consistent``, their published files in a consistent run (already
    consistent: the result is the same). Their mechanisms come from ``summary.json`` (the
    table's, or each level's under ``consistent.mechanisms``), and every level is published
    with the table's grid and publication rules, in the long form of the run's files. On a run
    of the same spec and seed without ``consistent = true``, the result equals the files a run
    with ``consistent = true`` publishes, provided no cell of a measured level was withheld
    (``suppress_cv``): a withheld cell is not measured here, while the run used its value.
    A consistent run with ``nonnegative = true`` is refused: its published levels hold the
    clamped estimates, from which the unbiased estimate that the intervals are centred on
    cannot be recovered (use the run without ``consistent``).

    Args:
        output_folder: The run's public folder.
        table: The table's name (default: the only table with ``direct = true`` rollups).
        hierarchies: Name → public mapping (one column per level, coarse to fine). Default:
            the files the run's spec names (recorded in ``manifest.json``).
        nonnegative: Clamp negative finest cells to 0 (biased; cells flagged ``B``).
            Default: the run's ``nonnegative`` option for a consistent table, else ``False``.
        integer: Round finest cells to whole numbers (biased; flagged ``B``). Default as
            ``nonnegative``.

    Returns:
        File name without ``.parquet`` (``cn``, ``cn__state``, ...) → the published table of
        that level.

    Raises:
        InvalidParameterError: The folder is not a run's public folder, the table is unknown
            or has no direct rollup, a finest cell is withheld, or the table is consistent
            with ``nonnegative = true`` in the run.

    Example:
        >>> consistent_from_release.__name__
        'consistent_from_release'
    """
    from tabdp.release.publish import publish
    from tabdp.release.spec import Publication

    folder = Path(output_folder)
    if not (folder / "summary.json").is_file():
        raise InvalidParameterError(
            f"consistent_from_release: {str(folder)!r} has no summary.json.\nHint: pass the "
            "public output folder of a finished run.")
    summary = json.loads((folder / "summary.json").read_text())
    tables = [t for t in summary.get("tables", [])
              if any(r.get("direct") for r in t.get("rollups", []))]
    names = [t["name"] for t in summary.get("tables", [])]
    if table is None:
        if len(tables) != 1:
            raise InvalidParameterError(
                "consistent_from_release: pass table=...; tables with direct rollups in this "
                f"run: {[t['name'] for t in tables]}.")
        t = tables[0]
    else:
        found = [x for x in tables if x["name"] == table]
        if not found:
            raise InvalidParameterError(
                f"consistent_from_release: table {table!r} is not a table of this run with "
                f"direct = true rollups; the run's tables: {names}.\nHint: the consistent "
                "estimate combines levels released directly.")
        t = found[0]
    measures = list(t["measures"]) or ["count"]
    by = list(t["by"])
    cons = t.get("consistent")
    hier = dict(hierarchies) if hierarchies is not None else _hierarchies(folder)
    stem = t["file"].removesuffix(".parquet")
    measured_files = {tuple(by): t["file"]}
    for r in t["rollups"]:
        if r["direct"]:
            measured_files[tuple(r["by"])] = r["direct_file"] or r["file"]
    released = {lv: _wide(pl.read_parquet(folder / f), list(lv), measures, True)
                for lv, f in measured_files.items()}
    if cons is not None and cons.get("mechanisms"):
        labels = dict(zip(cons["measured"], measured_files, strict=True))
        mechs: Mechanism | dict[tuple[str, ...], Mechanism] = {
            labels[lb]: _mechanism(d) for lb, d in cons["mechanisms"].items()}
    else:
        mechs = _mechanism(t["mechanism"])
    opts = (cons or {}).get("options") or []
    if cons is not None and "nonnegative" in opts:
        # the published levels hold the clamped estimates; the unbiased consistent estimate
        # (the intervals' centre) cannot be recovered from them
        raise InvalidParameterError(
            f"consistent_from_release: table {t['name']!r} of this run is consistent with "
            "nonnegative = true; its published levels hold the clamped (biased) estimates, "
            "not the released values, and re-solving from them would centre the intervals on "
            "the clamped values.\nHint: use the public folder of a run of the same spec and "
            "seed without consistent = true (its _direct files hold the released levels).")
    nonneg = ("nonnegative" in opts) if nonnegative is None else nonnegative
    integ = ("integer" in opts) if integer is None else integer
    outs = {tuple(by): stem, **{tuple(r["by"]): r["file"].removesuffix(".parquet")
                                for r in t["rollups"]}}
    keys = {lv: pl.read_parquet(folder / f"{f}.parquet").filter(
        pl.col("measure") == measures[0]).select(list(lv)) for lv, f in outs.items() if lv}
    grid = {m: float(g) for m, g in t["grid"].items() if isinstance(g, (int, float))}
    level = float(summary["release"]["level"])
    levels = consistent(released, measures=measures, hierarchies=hier, mechanisms=mechs,
                        outputs=list(outs), level=level, grid=grid or None,
                        nonnegative=nonneg, integer=integ, output_keys=keys)
    p = t["publication"]
    rules = Publication(cv_flag=p["cv_flag"], suppress_cv=p["suppress_cv"],
                        negative=p["negative"], round=p["round"])
    result = {}
    for lv, name in outs.items():
        pub = publish(levels[lv], keys=list(lv), measures=measures, rules=rules, grid=grid)
        if nonneg or integ:
            pub = pub.with_columns(pl.col("flag") + pl.lit("B"))
        result[name] = pub
    return result
