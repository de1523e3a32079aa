"""Count tables' left-out words, and what a count table's rollups count (review r52).

A count charges each unit at most ``plan.count_rows`` rows per cell, so a unit counted in one
cell of each table is never left out at planned sizes; but one counted in more cells (no
``input.max_cells``), or also charged in other currencies under a constant budget, can be: the
public words say so for the count table, from the spec alone, and only when the most such a
unit can be charged passes the budget. A rollup adds the table's cells (a unit in several of
them counts once in each); a direct rollup counts at its own level: the summaries and the
manifest say which.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from _specs import release_spec, run_quiet, table, write_release

from tabdp.release._left_out import LEFT_OUT_BIAS_TEXT
from tabdp.release.runner import plan_summary
from tabdp.release.spec import load_spec

SUM_TABLE = table("p", ["county"], '{ family = "gaussian", sigma = 790.0 }',
                  measures=["payroll"])


def _spec(folder: Path, *, budget: str = "rho = 5.0", unit: str = 'unit = "id"',
          counties: int = 40, sum_first: bool = False, sigma: float = 1.0) -> Path:
    """Unit 0 has a row in every county; units 1..9 one row in county c0."""
    names = [f"c{i}" for i in range(counties)]
    rows = [{"id": 0, "county": c, "payroll": 10.0} for c in names]
    rows += [{"id": u, "county": "c0", "payroll": 10.0} for u in range(1, 10)]
    count = table("n", ["county"], f'{{ family = "discrete_gaussian", sigma = {sigma} }}',
                  kind="count")
    bounds = "bounds = { payroll = [0, 100] }" if sum_first else ""
    spec = release_spec(*([SUM_TABLE] if sum_first else []), count, name="lo",
                        input_extra="\n".join(filter(None, [unit, 'negatives = "error"',
                                                             bounds])),
                        domains={"county": names}, budget=budget, seed=3)
    return write_release(folder, pl.DataFrame(rows), spec)


CELLS = "in more than one cell of a table (input.max_cells is not set)"
SHARED = ("also charged in payroll by this table or an earlier one (the constant budget adds "
          "its losses in every currency)")
HEAD = ("n: no unit counted at most 1 row(s) in a cell is left out of this count table by the "
        "budget as planned (counted in one cell of each table, or max_cells cells where "
        "bounded, and charged nothing else); a unit ")
TAIL = " can be left out (it is then missing from the published counts)"


def _count_lines(words: list[str]) -> list[str]:
    return [w for w in words if w.startswith("n: ")]


def test_count_table_states_units_beyond_the_plan(tmp_path: Path) -> None:
    """The D_many case: a unit counted in 40 cells (rho 0.5 each) passes a constant budget 5."""
    spec = _spec(tmp_path)
    summary = plan_summary(load_spec(spec))
    (row,) = [r for r in summary["left_out_sizes"] if r["currency"] == "rows"]
    assert row["left_out_from"] is None and row["cells_unbounded"] is True
    assert row["limit_shared_with"] == []
    assert _count_lines(summary["left_out_in_words"]) == [HEAD + CELLS + TAIL]
    # the run: unit 0 is left out of the count, as the words warn
    run_quiet(spec)
    conf = json.loads((tmp_path / "out/confidential/confidential.json").read_text())
    assert conf["releases"]["n"]["left_out_by_budget"]["units"] == 1
    pub = tmp_path / "out" / "public"
    public = json.loads((pub / "summary.json").read_text())
    assert public["left_out_in_words"] == summary["left_out_in_words"]
    assert (HEAD + CELLS + TAIL).replace("'", "&#x27;") in (pub / "summary.html").read_text()


def test_count_after_a_sum_under_a_constant_budget(tmp_path: Path) -> None:
    """Both ways beyond the plan: more cells, and payroll charged earlier (one limit)."""
    summary = plan_summary(load_spec(_spec(tmp_path, sum_first=True)))
    (row,) = [r for r in summary["left_out_sizes"] if r["currency"] == "rows"]
    assert row["limit_shared_with"] == ["payroll"]
    assert _count_lines(summary["left_out_in_words"]) == [
        HEAD + CELLS + ", or " + SHARED + "," + TAIL]


def test_count_after_a_sum_with_bounded_cells(tmp_path: Path) -> None:
    """max_cells = 1: only the currency caveat (the payroll table can charge up to its bound)."""
    summary = plan_summary(load_spec(_spec(tmp_path, sum_first=True, budget="rho = 0.6",
                                           unit='unit = "id"\nmax_cells = 1')))
    assert _count_lines(summary["left_out_in_words"]) == [HEAD + SHARED + TAIL]


@pytest.mark.parametrize("kw", [
    {"unit": ""},                                          # row mode: one cell per table
    {"unit": 'unit = "id"\nmax_cells = 1'},                # bounded cells, one table
    {"counties": 4},                                       # 4 cells x 0.5 <= 5: never passes
    # row mode: a record's payroll is at most its bound 100 (rho 0.008) and it is in one
    # cell: 0.008 + 0.5 stays within 1 (with a unit, its rows' payroll adds up without bound)
    {"unit": "", "sum_first": True, "budget": "rho = 1.0"},
    # a curve budget limits the rows currency apart: payroll charged first does not count,
    # and 4 cells x 0.5 stay within the curve's 5 at 1 row
    {"counties": 4, "sum_first": True, "budget": 'rho = { "1" = 5.0, "1e9" = 5.0 }'},
])
def test_nothing_new_where_counts_cannot_be_left_out(tmp_path: Path,
                                                      kw: dict[str, object]) -> None:
    summary = plan_summary(load_spec(_spec(tmp_path, **kw)))  # type: ignore[arg-type]
    (row,) = [r for r in summary["left_out_sizes"] if r["currency"] == "rows"]
    assert row["left_out_from"] is None
    assert not row["cells_unbounded"] and row["limit_shared_with"] == []
    assert _count_lines(summary["left_out_in_words"]) == []
    if not kw.get("sum_first"):
        assert summary["left_out_in_words"] == [LEFT_OUT_BIAS_TEXT]


def test_row_mode_count_after_a_sum(tmp_path: Path) -> None:
    """Row mode, constant budget 0.5: a count alone (0.5) is kept, with payroll it is not."""
    summary = plan_summary(load_spec(_spec(tmp_path, unit="", sum_first=True,
                                           budget="rho = 0.5")))
    assert _count_lines(summary["left_out_in_words"]) == [
        (HEAD + SHARED + TAIL).replace("unit", "record")]


def test_curve_budget_counts_the_rows_currency_alone(tmp_path: Path) -> None:
    """Under a curve: 40 cells x 0.5 pass the rows limit 5; payroll is never named."""
    summary = plan_summary(load_spec(_spec(
        tmp_path, sum_first=True, budget='rho = { "1" = 5.0, "1e9" = 5.0 }')))
    assert _count_lines(summary["left_out_in_words"]) == [HEAD + CELLS + TAIL]


def _rollup_spec(folder: Path, count_rows: int) -> Path:
    """Unit 1: 3 rows in (A, x), 2 in (A, y); unit 2: 1 row in (A, x); unit 3: 4 in (B, x)."""
    rows = [(1, "A", "x")] * 3 + [(1, "A", "y")] * 2 + [(2, "A", "x")] + [(3, "B", "x")] * 4
    spec = release_spec(
        table("t", ["g", "h"], '{ family = "discrete_gaussian", sigma = 0.001 }', kind="count",
              extra="[[tables.rollups]]\nby = [\"g\"]\ndirect = true\n"
                    "[[tables.rollups]]\nby = []\ndirect = true"),
        input_extra='unit = "id"', domains={"g": ["A", "B"], "h": ["x", "y"]}, seed=1,
        sections=f"[plan]\ncount_rows = {count_rows}")
    return write_release(folder, pl.DataFrame(rows, schema=["id", "g", "h"], orient="row"),
                         spec)


@pytest.mark.parametrize(("count_rows", "stat", "roll"), [
    (1, "number of distinct id units per cell",
     "sum over the table's cells of the number of distinct id units per cell: an id in several "
     "of the table's cells counts once in each"),
    (2, "number of rows, at most 2 per id per cell",
     "sum over the table's cells of the number of rows, at most 2 per id per cell of the table"),
])
def test_rollups_state_what_they_count(tmp_path: Path, count_rows: int, stat: str,
                                       roll: str) -> None:
    """Near-zero noise: the published rollups and direct rollups match their stated words."""
    spec = _rollup_spec(tmp_path, count_rows)
    run_quiet(spec)
    d = pl.read_parquet(tmp_path / "d.parquet")
    pub = tmp_path / "out" / "public"

    def capped(by: list[str]) -> dict[tuple[object, ...], int]:
        """The statistic at ``by``: each id's rows there, capped at count_rows."""
        g = d.group_by([*by, "id"]).len().with_columns(pl.col("len").clip(upper_bound=count_rows))
        if not by:
            return {(): int(g["len"].sum())}
        s = g.group_by(by).agg(pl.col("len").sum())
        return {tuple(r[:-1]): int(r[-1]) for r in s.rows()}

    def published(name: str, by: list[str]) -> dict[tuple[object, ...], int]:
        f = pl.read_parquet(pub / f"{name}.parquet")
        return {tuple(r[:-1]): round(r[-1]) for r in f.select([*by, "estimate"]).rows()
                if round(r[-1]) != 0}

    cells = capped(["g", "h"])
    assert published("t", ["g", "h"]) == cells
    # a rollup adds the table's cells; a direct rollup is the statistic at its own level
    by_g: dict[tuple[object, ...], int] = {}
    for k, v in cells.items():
        by_g[k[:1]] = by_g.get(k[:1], 0) + v
    assert published("t__g", ["g"]) == by_g
    assert published("t__national", []) == {(): sum(cells.values())}
    assert published("t__g_direct", ["g"]) == capped(["g"])
    assert published("t__national_direct", []) == capped([])
    assert capped([]) != {(): sum(cells.values())}  # the two definitions differ here
    summary = json.loads((pub / "summary.json").read_text())
    manifest = json.loads((pub / "manifest.json").read_text())
    for doc in (summary, manifest):
        (t,) = doc["tables"]
        assert t["statistic"] == stat
        assert [r["statistic"] for r in t["rollups"]] == [roll, roll]
        assert [r["direct_statistic"] for r in t["rollups"]] == [stat, stat]
    page = (pub / "summary.html").read_text()
    assert roll.replace("'", "&#x27;") in page and f"({stat})" in page


def test_rollups_of_sums_and_row_counts_keep_the_statistic(tmp_path: Path) -> None:
    """Without a unit a count of rows adds up: its rollups state the table's statistic."""
    spec = _spec(tmp_path, unit="", counties=4)
    text = spec.read_text().replace('by = ["county"]\nmechanism = { family = "discrete',
                                    'by = ["county"]\nrollups = [{ by = [] }]\n'
                                    'mechanism = { family = "discrete')
    spec.write_text(text)
    (t,) = plan_summary(load_spec(spec))["tables"]
    assert [r["statistic"] for r in t["rollups"]] == ["number of rows"]
    assert [r["direct_statistic"] for r in t["rollups"]] == [None]


def test_consistent_rollups_name_the_direct_definition(tmp_path: Path) -> None:
    """A consistent table mixes the sums with direct releases: its rollups' words say so."""
    spec = _rollup_spec(tmp_path, 1)
    spec.write_text(spec.read_text().replace('by = ["g", "h"]\n', 'by = ["g", "h"]\n'
                                             'consistent = true\ngrid = 1e-4\n')
                    .replace('family = "discrete_gaussian"', 'family = "gaussian"'))
    (t,) = plan_summary(load_spec(spec))["tables"]
    assert t["statistic"] == "number of distinct id units per cell"
    for r in t["rollups"]:
        assert r["statistic"].endswith(
            "(the consistent estimate also uses the table's direct releases, which count at "
            "most 1 row(s) of an id per cell of their own level: where an id is in several of "
            "the table's cells, it mixes the two counts and can fall outside both)")
        assert r["direct_statistic"] is None and r["direct_file"] is None
