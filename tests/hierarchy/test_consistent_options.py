"""Issue 30 follow-ups: biased options in a spec, post-processing of a finished run, Spark."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tabdp.exceptions import InvalidParameterError, SpecError
from tabdp.hierarchy import consistent_from_release
from tabdp.release import plan_summary
from tabdp.release.runner import run_release
from tabdp.release.spec import parse_spec
from tests.hierarchy.test_spec_consistent import _estimates, _spec


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (3-6 s)
def test_nonnegative_integer_options_are_applied_and_flagged(tmp_path: Path) -> None:
    spec = parse_spec(_spec(tmp_path, nonnegative=True, integer=True), tmp_path)
    assert spec.tables[0].nonnegative and spec.tables[0].integer
    res = run_release(spec, test_seed=True)
    pub = Path(res.public)
    cn = pl.read_parquet(pub / "cn.parquet")
    assert cn["estimate"].min() >= 0.0
    assert (cn["estimate"] == cn["estimate"].round(0)).all()
    for f in ("cn", "cn__state_naics2", "cn__county", "cn__state", "cn__national"):
        flags = pl.read_parquet(pub / f"{f}.parquet")["flag"].to_list()
        assert flags and all(fl.endswith("B") for fl in flags), f
    # still additive: the nation is the sum of the clamped finest cells
    nat = _estimates(pl.read_parquet(pub / "cn__national.parquet"), [])
    assert nat["estimate"][0] == cn["estimate"].sum()
    summary = json.loads((pub / "summary.json").read_text())
    cons = summary["tables"][0]["consistent"]
    assert cons["options"] == ["nonnegative", "integer"]
    assert cons["biased_post_processing"].startswith("biased post-processing")
    assert "B" in summary["flag_codes"]
    # the unbiased default has negative finest cells on this data: the option did something
    res0 = run_release(parse_spec(_spec(tmp_path / "d"), tmp_path), test_seed=True)
    cn0 = pl.read_parquet(Path(res0.public) / "cn.parquet")
    assert cn0["estimate"].min() < 0.0
    assert not any("B" in f for f in cn0["flag"].to_list())
    assert plan_summary(parse_spec(_spec(tmp_path), tmp_path))["tables"][0][
        "consistent"]["biased_post_processing"] is None


@pytest.mark.parametrize(("table", "match"), [
    ({"consistent": False, "rollups": [], "nonnegative": True}, "no consistent = true"),
    ({"integer": True, "grid": 2.0}, "integer = true rounds to whole numbers"),
    ({"nonnegative": "yes"}, "nonnegative"),
])
def test_option_refusals(tmp_path: Path, table: dict[str, object], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_spec(_spec(tmp_path, **table), tmp_path)


@pytest.mark.parametrize("opts", [{}, {"shares": {"county_naics2": 0.9, "state_naics2": 0.05,
                                                  "county": 0.05}}])
def test_consistent_from_release_equals_the_in_run_tables(tmp_path: Path,
                                                          opts: dict[str, object]) -> None:
    """Post-processing of a finished run's public files = the in-run consistent tables."""
    cons = run_release(parse_spec(_spec(tmp_path / "c", **opts), tmp_path), test_seed=True)
    cpub = Path(cons.public)
    if not opts:
        # the same spec without consistent: the same releases, published with _direct files
        plain = run_release(parse_spec(_spec(tmp_path / "p", consistent=False), tmp_path),
                            test_seed=True)
        direct = pl.read_parquet(Path(plain.public) / "cn__county_direct.parquet")
        assert direct.height == 300
        folders = [Path(plain.public), cpub]
    else:  # shares: the level mechanisms come from the summary
        folders = [cpub]
    for folder in folders:
        got = consistent_from_release(folder)
        assert set(got) == {"cn", "cn__state_naics2", "cn__naics2", "cn__county", "cn__state",
                            "cn__national"}
        for name, frame in got.items():
            want = pl.read_parquet(cpub / f"{name}.parquet")
            assert frame.columns == want.columns
            assert frame.equals(want), (folder, name)


def test_consistent_from_release_refuses_unknown(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="no summary.json"):
        consistent_from_release(tmp_path)


def test_outlook_uses_each_level_and_the_consistent_sd(tmp_path: Path) -> None:
    """spec_outlook: a consistent table's forecast is its published cells' (issue 30)."""
    from tabdp.planning import _cells, _stochastically_rounded_rows, flag_curve, spec_outlook

    shares = {"county_naics2": 0.9, "state_naics2": 0.05, "county": 0.05}
    spec = parse_spec(_spec(tmp_path, shares=shares), tmp_path)
    t = spec.tables[0]
    from tabdp.release._consistent import consistent_outlook

    out = spec_outlook(spec, consistent_outlook)[0]
    summ = plan_summary(spec)["tables"][0]
    cons = summ["consistent"]["expected_sd"]["count"]
    assert summ["forecast_by_level"] == out["consistent_levels"]
    assert summ["forecast"] == out["flag_curve"]
    levels = {r["level"]: r for r in out["consistent_levels"]}
    assert set(levels) == {r["level"] for r in cons}
    totals = spec.plan.count_totals
    cv = t.publication.cv_flag
    for r in cons:
        assert levels[r["level"]]["sd"] == pytest.approx(r["sd_median"])
        # on the table's grid (1), stochastically rounded as `consistent` publishes it
        assert levels[r["level"]]["flag_curve"] == _stochastically_rounded_rows(
            r["sd_median"], 1.0, _cells(totals), cv)
    assert out["flag_curve"] == levels["county_naics2"]["flag_curve"]
    # the finest level's share (0.9) gives it a larger sd than the whole budget's sigma = 3
    assert levels["county_naics2"]["sd"] > 3.0
    old = flag_curve(t.mechanism, totals, cv_flag=cv)
    assert any(n["p_flagged"] > o["p_flagged"] for n, o in zip(out["flag_curve"], old,
                                                              strict=True))
    # the state x sector level, measured with its own share, is far more accurate than a cell
    assert levels["state_naics2"]["sd"] < 3.0 / 0.05 ** 0.5
    # a table that is not consistent keeps the mechanism's curve
    plain = parse_spec(_spec(tmp_path, consistent=False), tmp_path)
    o2 = spec_outlook(plain, consistent_outlook)[0]
    assert "consistent_levels" not in o2
    # released as discrete Gaussian counts (grid 1): forecast with that law (review rev63p)
    assert o2["flag_curve"] == flag_curve(plain.tables[0].mechanism.for_counts(), totals,
                                          cv_flag=cv)
    # the library's flag_curve of a count follows the same rule (stop 63)
    assert o2["flag_curve"] == flag_curve(plain.tables[0].mechanism, totals, cv_flag=cv,
                                          count=True)


def test_html_summary_states_the_consistent_estimate(tmp_path: Path) -> None:
    from tabdp.report.html import render_summary_html

    shares = {"county_naics2": 0.9, "state_naics2": 0.05, "county": 0.05}
    spec = parse_spec(_spec(tmp_path, shares=shares, nonnegative=True), tmp_path)
    summary = plan_summary(spec)
    page = render_summary_html(summary)
    assert "<h4>Consistent levels</h4>" in page
    assert "are the <strong>consistent estimate</strong>" in page
    assert "post-processing of the released levels, with no extra privacy cost" in page
    section = page.split("<h4>Consistent levels</h4>")[1].split("</section>")[0]
    for lb in shares:
        assert f"<code>{lb}</code>" in section
    assert "90" in section and "expected sd (median)" in section
    rows = summary["tables"][0]["consistent"]["expected_sd"]["count"]
    assert len(rows) == 6 and all(f"<code>{r['level']}</code>" in section for r in rows)
    assert "biased post-processing: nonnegative" in section
    # no longer only under "Other settings"
    other = page.split("<h4>Other settings</h4>")
    assert len(other) == 1 or "expected_sd" not in other[1].split("</section>")[0]


@pytest.mark.parametrize(("sigma", "refused"), [(3.0, True), (100.0, False)])
def test_integer_without_a_grid_is_checked_against_the_default_grid(
        tmp_path: Path, sigma: float, refused: bool) -> None:
    """Spec integer = true, no grid: refused before data where the default grid is not 1.

    The run publishes on the mechanism's default grid (0.01 for sigma 3), which the consistent
    step refused only after the data had been read and released (review fc64).
    """
    spec = _spec(tmp_path, integer=True, mechanism={"family": "gaussian", "sigma": sigma})
    del spec["tables"][0]["grid"]
    if refused:
        with pytest.raises(SpecError, match="default grid 0.01"):
            parse_spec(spec, tmp_path)
    else:
        parsed = parse_spec(spec, tmp_path)
        res = run_release(parsed, test_seed=True)
        cn = pl.read_parquet(Path(res.public) / "cn.parquet")
        assert (cn["estimate"] == cn["estimate"].round(0)).all()


def test_integer_with_a_per_measure_grid_checks_the_measures_it_leaves_out(
        tmp_path: Path) -> None:
    """Spec integer = true, a grid naming one measure of two: the other's default grid is checked.

    The measure left out is published on the mechanism's default grid (0.1 for sigma 20),
    which the consistent step refused only after the data had been read (review rev64r).
    """
    base = {"kind": "sum", "measures": ["employment", "payroll"], "integer": True,
            "mechanism": {"family": "gaussian", "sigma": 20.0}}
    with pytest.raises(SpecError, match="leaves measure 'payroll' out.*default grid 0.1"):
        parse_spec(_spec(tmp_path, **base, grid={"employment": 1.0}), tmp_path)
    both = parse_spec(_spec(tmp_path, **base, grid={"employment": 1.0, "payroll": 1.0}),
                      tmp_path)
    assert both.tables[0].integer
