"""The summary says when a table's published cells do not add up to its rollups (review rev63p).

Rollups add the noisy cells before the publication rules; a rounding unit the grid is not a
multiple of, clamping and withholding then act on each level separately. The bundled demo's
employment table (grid 0.1, rounded to whole persons) published a national total 58 persons
away from the sum of its published county cells while the page said only "derived from this
one by adding noisy cells" (and docs/hierarchy.md: rollups "add up? yes").
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from _specs import release_spec, run_quiet, table, write_release

NOTE = ("The publication rules of this table (rounding to 1) act on each level separately, "
        "after the rollups added the unrounded, unclamped noisy cells: the published cells "
        "need not add up to a published rollup.")


def _run(folder: Path, publication: str, consistent: bool = False) -> Path:
    emp = table("emp", ["county"], '{ family = "gaussian", sigma = 5.0 }',
                measures=["employment"],
                extra=f"grid = 0.1\npublication = {publication}\n"
                      f"{'consistent = true' if consistent else ''}\n"
                      f"[[tables.rollups]]\nby = []\n{'direct = true' if consistent else ''}")
    run_quiet(write_release(
        folder, pl.DataFrame({"county": [f"c{i % 40}" for i in range(200)],
                              "employment": [float(i % 7) for i in range(200)]}),
        release_spec(emp, input_extra='negatives = "error"',
                     domains={"county": [f"c{i}" for i in range(40)]}, seed=12)))
    return folder / "out" / "public"


def test_rounded_rollups_are_said_not_to_add_up(tmp_path: Path) -> None:
    pub = _run(tmp_path, "{ round = 1.0 }")
    cells = pl.read_parquet(pub / "emp.parquet")["estimate"].sum()
    national = pl.read_parquet(pub / "emp__national.parquet")["estimate"][0]
    # the published parts do not add up to the published whole (rounded separately)
    assert national != pytest.approx(cells, abs=1e-9)
    page = (pub / "summary.html").read_text("utf-8")
    assert NOTE in page
    summary = json.loads((pub / "summary.json").read_text("utf-8"))
    assert summary["tables"][0]["publication"]["round"] == 1.0


def test_rollups_that_add_up_get_no_note(tmp_path: Path) -> None:
    pub = _run(tmp_path, "{ round = 0.1 }")   # the grid is a multiple of the unit
    cells = pl.read_parquet(pub / "emp.parquet")["estimate"].sum()
    national = pl.read_parquet(pub / "emp__national.parquet")["estimate"][0]
    assert national == pytest.approx(cells, abs=1e-6)
    page = (pub / "summary.html").read_text("utf-8")
    assert "need not add up to a published rollup" not in page


def test_a_consistent_table_that_withholds_cells_is_said_not_to_add_up(tmp_path: Path) -> None:
    """A consistent table's levels are published each with its withheld cells (review rev63d).

    The spec refuses rounding and clamping level by level for a consistent table, not
    ``suppress_cv``: its withheld cells leave the published county cells short of the published
    national total, while the page said only "every parent equals the sum of its children"
    (the note left out every consistent table).
    """
    pub = _run(tmp_path, "{ suppress_cv = 0.5 }", consistent=True)
    cells = pl.read_parquet(pub / "emp.parquet")
    national = pl.read_parquet(pub / "emp__national.parquet")["estimate"][0]
    assert (cells["flag"] == "S").any()
    assert national != pytest.approx(cells["estimate"].sum(), abs=1e-6)
    page = (pub / "summary.html").read_text("utf-8")
    assert ("The publication rules of this table (withholding cells (flag S)) act on each level "
            "separately, after the consistent estimate made every parent the sum of its "
            "children: the published cells need not add up to a published rollup.") in page
