"""``tabdp compare``'s utility side: which DP file scores a level (no Tau-Argus needed)."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import polars as pl
import pytest

from tabdp.compare.core import _dp_cells, _utility


def _case() -> tuple[NS, dict[str, pl.DataFrame], dict[str, object]]:
    roll = NS(by=["state"], maps={"state": (None, "county")}, label="state", direct=True)
    spec = NS(tables=[NS(name="pay", by=["county"], rollups=[roll])])

    def pub(col: str, keys: list[str], est: list[float], flag: list[str]) -> pl.DataFrame:
        return pl.DataFrame({col: keys, "measure": ["payroll"] * len(keys), "estimate": est,
                             "flag": flag})

    dp = {"pay": pub("county", ["a1", "a2"], [10.0, 20.0], ["", ""]),
          # the rollup of the two noisy counties, and the level's own (direct) release
          "pay__state": pub("state", ["A"], [30.0], [""]),
          "pay__state_direct": pub("state", ["A"], [31.0], [""])}
    # the traditional table's hierarchical dimension: the state's code in the county column
    cells = pl.DataFrame({"county": ["a1", "a2", "A"], "level": ["county", "county", "state"],
                          "value": [10.0, 20.0, 32.0], "freq": [1, 1, 2],
                          "published": [True, True, True], "released": [10.0, 20.0, 32.0]})
    x = {"table": "pay", "by": ["county"], "kind": "sum", "measure": "payroll", "cells": cells,
         "sdc": NS(method="OPT")}
    return spec, dp, x


def test_a_direct_level_is_scored_on_its_direct_release() -> None:
    # review r36 F9: keep="first" took the rollup file, not what a direct level publishes
    spec, dp, x = _case()
    d = _dp_cells(spec, dp, x)
    row = d.filter(pl.col("level") == "state")
    assert row["dp_table"].to_list() == ["pay__state_direct"]
    assert row["estimate"].to_list() == [31.0]


def test_utility_of_a_direct_level_uses_the_direct_estimate() -> None:
    spec, dp, x = _case()
    rows = [r for r in _utility(spec, dp, [x]) if r["level"] == "state" and r["method"] == "DP"]
    assert rows and abs(rows[0]["median_rel_error"] - 1.0 / 32.0) < 1e-12


# origin: review r73 (a privacy unit with rows in several finest cells, e.g. a firm with
# establishments in two counties, was one contributor per finest cell in Tau-Argus' microdata:
# at a coarser cell its parts were separate contributors; a firm holding 72.5% of a state x
# sector cell as 900 + 550 in two counties was published under nk=1,60. compare.json counts
# such units per table; the rows carry the unit, which protect() makes Tau-Argus' holding:
# tests/compare/test_units.py)
def test_units_in_several_finest_cells_are_counted_for_the_curator() -> None:
    from tabdp.compare.core import _table_micro
    from tabdp.compare.sdc import build_dim

    class H:
        levels = ("state", "county")
        mapping = pl.DataFrame({"state": ["01", "01"], "county": ["01001", "01003"]})

    lf = pl.LazyFrame({"firm": ["F", "F", "a", "b", "b"],
                       "county": ["01001", "01003", "01001", "01003", "01003"],
                       "ind": ["11", "11", "11", "11", "11"],
                       "pay": [900.0, 550.0, 100.0, 150.0, 150.0]})
    dims = [build_dim("county", [], {"g": H}), build_dim("ind", ["11"], {})]
    spec = NS(input=NS(unit="firm"))
    t = NS(kind="sum", measures=["pay"])
    data, spanning, unit = _table_micro(spec, lf, t, ["county", "ind"], dims)
    # one row per unit and finest cell: F twice (900, 550), b once (300)
    assert sorted(data["pay"].to_list()) == [100.0, 300.0, 550.0, 900.0]
    assert spanning == 1
    assert unit is not None and sorted(data[unit].to_list()) == ["F", "F", "a", "b"]
    # row mode: every record is in one finest cell
    from tabdp.release.runner import ROW_ID

    data, spanning, unit = _table_micro(NS(input=NS(unit=None)), lf.with_columns(
        pl.int_range(pl.len()).alias(ROW_ID)), t, ["county", "ind"], dims)
    assert spanning == 0 and unit is None and ROW_ID not in data.columns


# origin: review r84 (the factor e^epsilon of the risk figures was exp(min(epsilon, 700)):
# a record with epsilon = 462,118 was stated a factor of 1.014e304, far below its e^epsilon)
def test_the_odds_factor_is_never_below_e_to_the_epsilon() -> None:
    from tabdp.compare.core import _dp_risk

    losses = pl.DataFrame({"rho": [0.5, 3.0, 5e5], "epsilon_delta": [1.0, 20.0, 462_118.0]})
    po = _dp_risk(losses, 1e-9)["posterior_odds_factor"]
    assert po["median"] == pytest.approx(math.exp(20.0))
    assert po["max"] == math.inf


def test_small_area_coverage_scores_both_methods_on_the_same_cells() -> None:
    # review rev63p: the traditional side's coverage counted a county whose only published
    # cell was its total over all industries, a margin the DP spec does not release
    from tabdp.compare.core import _coverage
    from tabdp.compare.sdc import TOTAL, add_levels, build_dim

    class H:
        levels = ("state", "county")
        mapping = pl.DataFrame({"state": ["01", "01"], "county": ["01001", "01003"]})

    dims = [build_dim("county", [], {"g": H}), build_dim("ind", ["11", "22"], {})]
    keys = [("01001", "11"), ("01001", "22"), ("01001", TOTAL),
            ("01003", "11"), ("01003", "22"), ("01003", TOTAL)]
    cells = add_levels(pl.DataFrame({
        "county": [k[0] for k in keys], "ind": [k[1] for k in keys],
        "value": [5.0, 7.0, 12.0, 50.0, 60.0, 110.0], "freq": [1, 1, 2, 9, 9, 18],
        # county 01001: both sector cells withheld, its all-sector total published
        "published": [False, False, True, True, True, True]}), ["county", "ind"], dims)
    cells = cells.with_columns(pl.col("value").alias("released"))
    x = {"table": "pay", "by": ["county", "ind"], "dims": dims, "kind": "sum",
         "measure": "payroll", "cells": cells, "sdc": NS(method="MOD")}
    spec = NS(tables=[NS(name="pay", by=["county", "ind"], rollups=[])])
    dp = {"pay": pl.DataFrame({"county": ["01001", "01001", "01003", "01003"],
                               "ind": ["11", "22", "11", "22"],
                               "measure": ["payroll"] * 4, "estimate": [3.0, 9.0, 52.0, 58.0],
                               "flag": ["C", "C", "", ""]})}
    (row,) = _coverage(spec, dp, [x])
    assert row["areas_with_data"] == 2
    assert row["dp"] == 0.5                 # 01003 only
    assert row["sdc"] == 0.5                # the same cells: 01003 only
    assert row["sdc_all_levels"] == 1.0     # with the county totals the DP spec lacks
    assert row["levels"] == ["county × ind"]
