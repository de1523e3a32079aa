"""The budget's left-out sizes are stated with the earlier tables they assume (review rev63p).

A table's threshold is computed for a unit charged as planned by the earlier tables of the
same currency too. The public words used to state it unconditionally ("a unit contributing
more than about X ... is left out"), although a unit absent from the earlier table is charged
less and kept above X: in the bundled demo, a unit of $1e17 of payroll outside every county
cell was kept in state_naics6_payroll, whose words said units above 5.41e16 are left out.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from _specs import release_spec, run_quiet, table, write_release

from tabdp.release.runner import plan_summary
from tabdp.release.spec import load_spec

# sigma 790, budget rho <= 1: one table leaves out sizes above sqrt(2) x 790 = 1.12e3, a
# second table of the same measure (after the first charged as much) above 790
SECOND = ("p2: a unit contributing more than about 790 of payroll to a cell is left out of "
          "this table by the budget (its values are missing from the published totals), when "
          "it is also charged as planned by p1, released before it (the same size there; the "
          "planned rows in a count table); a unit charged less there (e.g. outside their "
          "cells) is left out only at larger sizes, if at all")


def _spec(folder: Path, payroll: float, tables: tuple[tuple[str, str, float], ...]) -> Path:
    """Payroll tables (name, by, sigma) under a budget of rho 1, of units 0-10 of one size.

    Ids 0-9 in county "a", id 10 outside the county cells ("zz"); all in state "s".
    """
    return write_release(
        folder, pl.DataFrame({"id": list(range(11)), "county": ["a"] * 10 + ["zz"],
                              "state": ["s"] * 11, "payroll": [payroll] * 11}),
        release_spec(*(table(n, [by], f'{{ family = "gaussian", sigma = {sig!r} }}',
                             measures=["payroll"]) for n, by, sig in tables),
                     name="b", input_extra='unit = "id"\nnegatives = "error"',
                     domains={"county": ["a"], "state": ["s"]},
                     budget='rho = { "1" = 1.0, "1e9" = 1.0 }', seed=3))


def test_left_out_words_name_the_earlier_tables_they_assume(tmp_path: Path) -> None:
    # ids 0-9 in both tables; id 10 outside p1's cells (county "zz"), in p2's state cell
    spec = _spec(tmp_path, 1000.0, (("p1", "county", 790.0), ("p2", "state", 790.0)))
    plan = plan_summary(load_spec(spec))
    rows = {r["table"]: r for r in plan["left_out_sizes"]}
    assert rows["p1"]["assumes_charged_in"] == []
    assert rows["p2"]["assumes_charged_in"] == ["p1"]
    words = plan["left_out_in_words"]
    # the first table is decided before any other charge: no condition
    assert any(w.startswith("p1: a unit contributing more than about 1.12e+03 of payroll")
               and "charged as planned by" not in w for w in words)
    assert SECOND in words
    # the run: ids 0-9 (1,000 in both tables, above 790) are left out of p2; id 10, of the
    # same size but absent from p1, is kept, as the condition says
    run_quiet(spec)
    conf = json.loads((tmp_path / "out/confidential/confidential.json").read_text())
    assert conf["releases"]["p2"]["left_out_by_budget"]["units"] == 10
    losses = pl.read_parquet(tmp_path / "out/confidential/per_record_losses.parquet")
    rho = dict(zip(losses["id"].to_list(), losses["rho"].to_list(), strict=True))
    assert rho[10] > 0.5 and rho[0] == rho[10]   # charged once each: p1 for 0-9, p2 for 10
    pub = json.loads((tmp_path / "out/public/summary.json").read_text())
    assert SECOND in pub["left_out_in_words"]


def test_sizes_left_out_in_several_ranges_are_not_said_to_move_only_up(tmp_path: Path) -> None:
    """Review rev63d: "left out only at larger sizes" was false between two ranges.

    p1, p2 and p3 charge a unit of size s 0.5, 0.6 and 0.5 x (s / 1000)² under a budget of 1.
    A unit in all three (as planned) is left out of p2 from about 953 (1.1 x (s/1000)² > 1),
    and of p3 at about 791 to 953 and above 1,000 (kept between: p2 did not charge it). A unit
    of 980 absent from p1 is kept in p2 and left out of p3 (0.6 + 0.5 x 0.96 > 1), at a size
    the planned unit is kept at: it is not "left out only at larger sizes".
    """
    folder = tmp_path
    spec = _spec(folder, 980.0, (("p1", "county", 1000.0), ("p2", "state", 1000.0 / 1.2 ** 0.5),
                                 ("p3", "state", 1000.0)))
    plan = plan_summary(load_spec(spec))
    p3 = next(r for r in plan["left_out_sizes"] if r["table"] == "p3")
    assert len(p3["left_out_at"]) == 2
    assert p3["left_out_at"][0][1] < 980.0 < p3["left_out_at"][1][0]   # 980: planned kept
    run_quiet(spec)
    conf = json.loads((folder / "out/confidential/confidential.json").read_text())
    assert conf["releases"]["p3"]["left_out_by_budget"]["units"] == 1   # id 10, absent from p1
    words = next(w for w in plan["left_out_in_words"] if w.startswith("p3:"))
    assert "left out only at larger sizes" not in words
    assert ("a unit charged less there (e.g. outside their cells) is left out at other sizes "
            "too (also above or between the sizes stated), or not at all") in words
