"""A privacy unit with rows in several finest cells is one contributor at every cell.

Tau-Argus is given the unit as its holding variable, with holding-level rules, and tabdp's
own cell statistics count and rank units (the real engine: the ``sdc`` extra).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import polars as pl
import pytest

from tabdp.compare.core import _table_micro
from tabdp.compare.sdc import SdcOptions, _cell_stats, build_dim, protect


class _H:
    levels = ("state", "county")
    mapping = pl.DataFrame({"state": ["01", "01"], "county": ["01001", "01003"]})


def _dims() -> list:
    return [build_dim("county", [], {"g": _H}), build_dim("ind", ["11"], {})]


def _r73() -> pl.LazyFrame:
    # firm F: 900 + 550 in two counties (72.5% of the state x sector cell, its largest part
    # 45%); a: 100; b: 150 + 150 in one county (one contribution of 300)
    return pl.LazyFrame({"firm": ["F", "F", "a", "b", "b"],
                         "county": ["01001", "01003", "01001", "01003", "01003"],
                         "ind": ["11", "11", "11", "11", "11"],
                         "pay": [900.0, 550.0, 100.0, 150.0, 150.0]})


def _micro(unit: str | None = "firm", lf: pl.LazyFrame | None = None,
           kind: str = "sum") -> tuple[pl.DataFrame, int, str | None]:
    lf = _r73() if lf is None else lf
    if unit is None:
        from tabdp.release.runner import ROW_ID

        lf = lf.with_columns(pl.int_range(pl.len()).alias(ROW_ID))
    t = NS(kind=kind, measures=["pay"] if kind == "sum" else [])
    return _table_micro(NS(input=NS(unit=unit)), lf, t, ["county", "ind"], _dims())


def _cell(cells: pl.DataFrame, county: str, ind: str = "11") -> dict:
    rows = cells.filter((pl.col("county") == county) & (pl.col("ind") == ind)).to_dicts()
    assert len(rows) == 1
    return rows[0]


def test_cell_statistics_count_and_rank_units_at_every_cell() -> None:
    data, spanning, unit = _micro()
    assert spanning == 1 and unit is not None
    stats = _cell_stats(data, ["county", "ind"], "pay", _dims(), unit)
    state = _cell(stats, "01")
    # three units (F, a, b), not four parts; F's parts are one contribution of 1450
    assert (state["value"], state["freq"], state["x1"], state["x2"]) == (1850.0, 3, 1450.0,
                                                                         300.0)
    assert _cell(stats, "Total", "Total")["freq"] == 3
    c1 = _cell(stats, "01001")
    assert (c1["freq"], c1["x1"], c1["x2"]) == (2, 900.0, 100.0)
    # without the unit: the parts (the judgement before the fix)
    rows = _cell_stats(data.drop(unit), ["county", "ind"], "pay", _dims())
    assert (_cell(rows, "01")["freq"], _cell(rows, "01")["x1"]) == (4, 900.0)
    # the values are the same sums either way
    assert stats.sort(["county", "ind"])["value"].to_list() == rows.sort(
        ["county", "ind"])["value"].to_list()


# origin: review r73 (Tau-Argus judged a unit's parts as separate contributors at margins:
# F, 72.5% of the state x sector cell as 900 + 550, was published under nk=1,60)
def test_r73_a_firm_dominating_a_margin_through_two_counties_is_suppressed(
        tmp_path: Path) -> None:
    pytest.importorskip("pytauargus")
    data, _, unit = _micro()
    tab = protect(data, ["county", "ind"], "pay", _dims(),
                  SdcOptions(p=None, nk=(1, 60), secondary="OPT"), workdir=tmp_path,
                  unit=unit)
    state = _cell(tab.cells, "01")
    assert state["status"] == "U" and not state["published"]
    assert tab.holding
    # the (1,60) rule's protection, for the unit: 1450 / 0.60 - 1850 = 566.7
    assert state["upl"] == pytest.approx(567.0, abs=1.0)
    assert (state["freq"], state["x1"]) == (3, 1450.0)


def test_a_unit_in_two_finest_cells_counts_once_in_the_frequency_rule(
        tmp_path: Path) -> None:
    pytest.importorskip("pytauargus")
    opts = SdcOptions(p=None, freq=4, secondary="OPT")
    for kind, resp in (("sum", "pay"), ("count", "count")):
        data, _, unit = _micro(kind=kind)
        tab = protect(data, ["county", "ind"], resp, _dims(), opts, count=kind == "count",
                      workdir=tmp_path / kind, unit=unit)
        state = _cell(tab.cells, "01")
        # F, a and b: 3 units < 4 (4 rows: the margin was safe before the fix)
        assert state["status"] == "U", kind
        assert state["freq"] == 3, kind


def test_units_that_never_span_finest_cells_change_nothing(tmp_path: Path) -> None:
    pytest.importorskip("pytauargus")
    # F's two rows are in one county: every unit is in one finest cell
    lf = _r73().with_columns(pl.when(pl.col("firm") == "F").then(pl.lit("01001"))
                             .otherwise(pl.col("county")).alias("county"))
    opts = SdcOptions(p=10, nk=(1, 60), freq=3, secondary="OPT")
    data, spanning, unit = _micro(lf=lf)
    assert spanning == 0 and unit is not None
    with_unit = protect(data, ["county", "ind"], "pay", _dims(), opts,
                        workdir=tmp_path / "unit", unit=unit)
    assert not with_unit.holding
    # the same rows without a unit column: Tau-Argus' run before units were passed on
    before = protect(data.drop(unit), ["county", "ind"], "pay", _dims(), opts,
                     workdir=tmp_path / "rows")
    assert with_unit.cells.equals(before.cells)
    assert "tabdp_unit" not in (tmp_path / "unit" / "job" / "tau" / "micro.rda").read_text(
        encoding="utf-8")


def test_holding_rules_fill_the_individual_places() -> None:
    o = SdcOptions(p=10, nk=(2, 85), freq=3)
    assert o.rules(holding=True) == ("P(0,0)|P(0,0)|P(10,1)|P(0,0)|NK(0,0)|NK(0,0)|NK(2,85)|"
                                     "NK(0,0)|FREQ(0,0)|FREQ(3,10)")
    assert o.rules(count=True, holding=True) == "FREQ(0,0)|FREQ(3,10)"
    assert o.rules() == "P(10,1)|NK(2,85)|FREQ(3,10)"


def test_tau_argus_and_the_report_judge_the_same_units(tmp_path: Path) -> None:
    # firms with establishments in several counties: Tau-Argus' primary cells are exactly the
    # cells whose per-unit statistics (the report's freq, x1, x2) fail a rule
    pytest.importorskip("pytauargus")
    from tabdp.datasets.synth import county_to_state, generate_establishments

    est = generate_establishments(400, seed=7, n_states=2, counties_per_state=4)

    class H:
        levels = ("state", "county")
        mapping = county_to_state(n_states=2, counties_per_state=4)

    dims = [build_dim("county", [], {"g": H}),
            build_dim("naics2", est["naics2"].unique().to_list(), {})]
    t = NS(kind="sum", measures=["payroll"])
    data, spanning, unit = _table_micro(NS(input=NS(unit="firm_id")), est.lazy(), t,
                                        ["county", "naics2"], dims)
    assert spanning > 10
    tab = protect(data, ["county", "naics2"], "payroll", dims,
                  SdcOptions(p=10, nk=(2, 85), freq=3, secondary="OPT"), workdir=tmp_path,
                  unit=unit)
    assert tab.holding
    c = tab.cells.filter(pl.col("freq") > 0)
    v, x1, x2, f = (c[k].to_numpy() for k in ("value", "x1", "x2", "freq"))
    fails = (0.1 * x1 > v - x1 - x2 + 1e-6) | (x1 + x2 > 0.85 * v + 1e-6) | (f < 3)
    assert (fails == (c["status"] == "U").to_numpy()).all()
    # and some margin is primary only because a unit's parts are one contributor
    rows = _cell_stats(data.drop(unit), ["county", "naics2"], "payroll", dims)
    by_rows = c.select(["county", "naics2", "status"]).join(rows, on=["county", "naics2"])
    old = ((0.1 * pl.col("x1") > pl.col("value") - pl.col("x1") - pl.col("x2") + 1e-6)
           | (pl.col("x1") + pl.col("x2") > 0.85 * pl.col("value") + 1e-6)
           | (pl.col("freq") < 3))
    assert by_rows.filter(~old & (pl.col("status") == "U")).height > 0


# origin: review r84 (the traditional side read every row whose codes were in the domains,
# also those of combinations outside the table's keys file, which the DP release leaves out
# of every level: the national truth the DP estimate was scored against included them)
def test_rows_outside_the_keys_file_are_in_no_cell_of_the_traditional_table(
        tmp_path: Path) -> None:
    keys = tmp_path / "keys.csv"
    pl.DataFrame({"county": ["01001"], "ind": ["11"]}).write_csv(keys)
    spec = NS(input=NS(unit="firm"),
              domains={"county": pl.Series(["01001", "01003"]), "ind": pl.Series(["11"])})
    t = NS(kind="sum", measures=["pay"], keys_file=keys)
    data, _, unit = _table_micro(spec, _r73(), t, ["county", "ind"], _dims())
    # only the rows of county 01001 (F's 900 and a's 100): 01003 x 11 is not in the key set
    assert data["county"].unique().to_list() == ["01001"]
    assert data["pay"].sum() == 1000.0
    cells = _cell_stats(data, ["county", "ind"], "pay", _dims(), unit)
    assert _cell(cells, "Total", "Total")["value"] == 1000.0
