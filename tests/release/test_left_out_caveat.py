"""The budget's left-out words say when units charged elsewhere are left out earlier (r51).

Under a constant budget every currency counts against one limit: a unit charged payroll by
one table is left out of an employment table at smaller sizes than the employment-only
threshold. The public words say so, from the spec alone, and only where it applies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pytest
from _specs import release_spec, run_quiet, table, write_release

from tabdp.release.runner import plan_summary
from tabdp.release.spec import load_spec

CAVEAT = ("; a unit also charged in payroll by this table or an earlier one (the constant "
          "budget adds its losses in every currency) is left out at smaller sizes")
BASE = ("a unit contributing more than about 1.12e+03 of {m} to a cell is left out of this table "
        "by the budget (its values are missing from the published totals)")


def _spec(folder: Path, *, budget: str = "rho = 1.0", unit: str = 'unit = "id"',
          second: bool = True, counties: Sequence[str] = ("a",)) -> Path:
    data = pl.DataFrame({"id": list(range(10)), "county": ["a"] * 10, "payroll": [1000.0] * 10,
                         "employment": [1000.0] * 10})
    tables = [table(m[0], ["county"], '{ family = "gaussian", sigma = 790.0 }', measures=[m])
              for m in ("payroll", "employment")[:2 if second else 1]]
    spec = release_spec(*tables, name="b",
                        input_extra="\n".join(filter(None, [unit, 'negatives = "error"'])),
                        domains={"county": counties}, budget=budget, seed=3)
    return write_release(folder, data, spec)


def test_constant_budget_other_currency_caveat(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    words = plan_summary(load_spec(spec))["left_out_in_words"]
    # the first table is decided before any other charge: its words are unchanged
    assert f"p: {BASE.format(m='payroll')}" in words
    assert f"e: {BASE.format(m='employment')}{CAVEAT}" in words
    # the run: every unit (1,000 of each, far below 1.12e3) is left out of e, as the words warn
    run_quiet(spec)
    conf = json.loads((tmp_path / "out/confidential/confidential.json").read_text())
    assert conf["releases"]["e"]["left_out_by_budget"]["units"] == 10
    assert conf["releases"]["p"]["left_out_by_budget"]["units"] == 0
    pub = tmp_path / "out" / "public"
    summary = json.loads((pub / "summary.json").read_text())
    assert summary["left_out_in_words"] == words
    assert "also charged in payroll by this table or an earlier one" in (
        pub / "summary.html").read_text()


@pytest.mark.parametrize(("kw", "caveat"), [
    # one table, one currency: the words are those of before
    ({"second": False}, False),
    ({"second": False, "unit": ""}, False),
    ({"second": False, "unit": 'unit = "id"\nmax_cells = 1', "counties": ["a", "b"]}, False),
    # a curve budget limits each currency apart: no currency caveat
    ({"budget": 'rho = { "1" = 1.0, "1e9" = 1.0 }'}, False),
    # several cells a unit may contribute to (no max_cells): the cells caveat
    ({"second": False, "counties": ["a", "b"]}, True),
])
def test_caveat_only_where_it_applies(tmp_path: Path, kw: dict[str, object],
                                      caveat: bool) -> None:
    words = plan_summary(load_spec(_spec(tmp_path, **kw)))["left_out_in_words"]  # type: ignore[arg-type]
    lines = [w for w in words if w.startswith(("p: ", "e: "))]
    assert lines and not any("also charged in" in w for w in lines)
    unit = "unit" if kw.get("unit", 'unit = "id"') else "record"
    want = f"p: {BASE.format(m='payroll')}".replace("a unit", f"a {unit}")
    cells = (f"; a {unit} contributing to more than one cell of a table (input.max_cells is "
             "not set) is left out at smaller sizes")
    assert lines[0] == want + (cells if caveat else "")
