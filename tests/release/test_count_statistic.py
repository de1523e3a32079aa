"""A count table's statistic follows ``plan.count_rows`` and is stated publicly (review r51).

With ``input.unit`` the run caps each unit's rows in a count cell at ``plan.count_rows`` (1:
distinct units); the summaries and the manifest state that definition from the spec alone.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import polars as pl
import pytest
from _specs import release_spec, run_quiet, table, write_release

from tabdp import cli
from tabdp.release.runner import plan_summary
from tabdp.release.spec import load_spec
from tabdp.report.html import render_summary_html


def _spec(folder: Path, *, unit: bool, count_rows: int | None,
          mechanism: str | None = None) -> Path:
    # unit u has u % 4 + 1 rows in county "a" and one row in "b": rows per unit per cell 1..4
    rows = [{"id": u, "county": "a"} for u in range(40) for _ in range(u % 4 + 1)]
    rows += [{"id": u, "county": "b"} for u in range(0, 40, 2)]
    plan = "" if count_rows is None else f"[plan]\ncount_rows = {count_rows}"
    spec = release_spec(table("n", ["county"], mechanism, kind="count"), name="cnt",
                        release_extra="delta = 1e-9", input_extra='unit = "id"' if unit else "",
                        domains={"county": ["a", "b", "c"]}, seed=7, sections=plan)
    return write_release(folder, pl.DataFrame(rows), spec)


@pytest.mark.parametrize(("unit", "count_rows", "want"), [
    (True, None, "number of distinct id units per cell"),
    (True, 1, "number of distinct id units per cell"),
    (True, 2, "number of rows, at most 2 per id per cell"),
    (False, None, "number of rows"),
    (False, 2, "number of rows"),
])
def test_summary_states_the_count_statistic(tmp_path: Path, unit: bool, count_rows: int | None,
                                            want: str) -> None:
    summary = plan_summary(load_spec(_spec(tmp_path, unit=unit, count_rows=count_rows)))
    (t,) = summary["tables"]
    assert t["statistic"] == want
    page = render_summary_html(summary)
    assert f"count: {want}<" in page and "count of records" not in page


def test_published_count_counts_capped_rows(tmp_path: Path) -> None:
    """count_rows = 2: each unit counts min(rows, 2) in a cell (noise ~0: sigma = 1e-3)."""
    spec = _spec(tmp_path, unit=True, count_rows=2,
                 mechanism='{ family = "discrete_gaussian", sigma = 0.001 }')
    run_quiet(spec)
    d = pl.read_parquet(tmp_path / "d.parquet")
    capped = (d.group_by("county", "id").len().group_by("county")
              .agg(pl.col("len").clip(upper_bound=2).sum().alias("want")))
    pub = tmp_path / "out" / "public"
    got = pl.read_parquet(pub / "n.parquet").join(capped, on="county", how="left").fill_null(0)
    assert got["estimate"].to_list() == got["want"].to_list()
    assert got.filter(pl.col("county") == "a")["want"].item() != d.filter(
        pl.col("county") == "a").height          # the cap changed the statistic
    manifest = json.loads((pub / "manifest.json").read_text())
    summary = json.loads((pub / "summary.json").read_text())
    want = "number of rows, at most 2 per id per cell"
    assert manifest["tables"][0]["statistic"] == want
    assert summary["tables"][0]["statistic"] == want
    assert want in (pub / "summary.html").read_text()


def test_tabdp_plan_prints_the_count_statistic(tmp_path: Path) -> None:
    spec = _spec(tmp_path, unit=True, count_rows=2)
    out = io.StringIO()
    assert cli.main(["plan", str(spec)], stdout=out, stderr=io.StringIO()) == 0
    assert "n: count (number of rows, at most 2 per id per cell) by county" in out.getvalue()


def test_max_cells_is_part_of_the_statistic(tmp_path: Path) -> None:
    """With a unit and ``input.max_cells`` a unit counts in at most that many cells."""
    spec = _spec(tmp_path, unit=True, count_rows=None)
    spec.write_text(spec.read_text().replace('unit = "id"', 'unit = "id"\nmax_cells = 1'))
    t = plan_summary(load_spec(spec))["tables"][0]
    assert t["statistic"] == ("number of distinct id units per cell; each id counted in at "
                              "most 1 cell(s) of the table (its largest)")
