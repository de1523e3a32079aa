"""The column dictionary's rounding bound holds beyond 2**40 grid steps (stop 63).

The public column text said the rounding to the grid moves an estimate by at most half a grid
step, a step being at most a tenth of the sd, so its bias is negligible beside the sd. Beyond
``2**40 x grid`` the grid keeps 40 significant bits (docs/exact-rounding.md §5): a payroll cell
of 3e18 released with Laplace noise of scale 1000 (sd 1414) on a grid of 100 lands on a spacing
of 2**15 x 100 = 3,276,800, so the rounding moves it by up to 1.6e6, a thousand sds. The text
now states the condition and the bound beyond it, and the published moe includes that bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from _specs import release_spec, run_quiet, table, write_release

TOTAL = 3e18
GRID = 100.0
SCALE = 1000.0


def _run(folder: Path) -> Path:
    run_quiet(write_release(
        folder, pl.DataFrame({"county": ["a", "b", "a"], "payroll": [TOTAL, 5.0, 7.0]}),
        release_spec(table("pay", ["county"], f'{{ family = "laplace", scale = {SCALE} }}',
                           measures=["payroll"], extra=f"grid = {GRID}"),
                     input_extra='negatives = "error"', domains={"county": ["a", "b"]}, seed=5)))
    return folder / "out" / "public"


def test_the_stated_rounding_bound_holds_beyond_2_40_grid_steps(tmp_path: Path) -> None:
    public = _run(tmp_path)
    t = pl.read_parquet(public / "pay.parquet").sort("county")
    est, sd, moe = t["estimate"][0], t["sd"][0], t["moe"][0]
    assert abs(est) > 2.0**40 * GRID
    spacing = 2.0**15 * GRID                          # 3e16 grid steps: [2**54, 2**55)
    assert est % spacing == 0.0                       # on the grid's 40-significant-bit part
    # the old statement's bound (half a step <= sd / 20) cannot hold for every draw here: the
    # published values are 3.3e6 apart, 2,300 sds
    assert spacing / 2 > 1000 * sd
    # the bound stated beyond 2**40 x grid: at most 2**-40 of the magnitude, plus the noise
    # (|Z| <= 40 scales but with probability e**-40)
    assert abs(est - TOTAL) <= abs(est) * 2.0**-40 + 40 * SCALE
    # ... and the published moe includes it
    assert moe >= abs(est) * 2.0**-40
    # the public column dictionary (summary.json, summary.html) states the condition and bound
    summary = json.loads((public / "summary.json").read_text("utf-8"))
    for column in ("estimate", "sd"):
        text = summary["columns"][column]
        assert "2^40 x grid" in text and "2^-40 of" in text, column
        assert "can exceed the sd" in text, column
    page = (public / "summary.html").read_text("utf-8")
    assert "2^40 x grid" in page
