"""``consistent = true`` in a release spec (issue 30): files, additivity, accounting, plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tabdp.exceptions import SpecError
from tabdp.hierarchy.consistent import METHOD_CERTIFIED
from tabdp.release import plan_summary
from tabdp.release.runner import run_release
from tabdp.release.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, **table: Any) -> dict[str, Any]:
    t = {"name": "cn", "kind": "count", "by": ["county", "naics2"],
         "mechanism": {"family": "gaussian", "sigma": 3.0}, "grid": 1.0,
         "consistent": True,
         "rollups": [{"by": ["state", "naics2"], "direct": True}, {"by": ["naics2"]},
                     {"by": ["county"], "direct": True}, {"by": ["state"]}, {"by": []}]}
    t.update(table)
    return {
        "release": {"name": "t", "level": 0.9},
        "input": {"path": str(ROOT / "data" / "cbp_sample.parquet"), "unit": "estab_id"},
        "hierarchies": {"geo": {"file": str(ROOT / "data" / "hierarchies" / "geography.csv"),
                                "levels": ["state", "county"]},
                        "industry": {"file": str(ROOT / "data" / "hierarchies" / "naics.csv"),
                                     "levels": ["naics2", "naics3", "naics4", "naics6"]}},
        "output": {"public": str(tmp_path / "pub"), "confidential": str(tmp_path / "conf")},
        "randomness": {"seed": 5},
        "tables": [t],
    }


def _estimates(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    if "measure" in df.columns:
        df = df.filter(pl.col("measure") == "count")
    return df.select(*keys, "estimate")


def test_consistent_release_adds_up_and_keeps_files(tmp_path: Path) -> None:
    spec = parse_spec(_spec(tmp_path), tmp_path)
    res = run_release(spec, test_seed=True)
    names = set(res.files)
    assert "cn.parquet" in names and "cn__state_naics2.parquet" in names
    assert not any(n.endswith("_direct.parquet") for n in names)
    pub = Path(res.public)
    cn = _estimates(pl.read_parquet(pub / "cn.parquet"), ["county", "naics2"])
    geo = pl.read_csv(ROOT / "data" / "hierarchies" / "geography.csv", infer_schema=False)
    cn = cn.join(geo, on="county")
    for file, keys in (("cn__state_naics2", ["state", "naics2"]), ("cn__naics2", ["naics2"]),
                       ("cn__county", ["county"]), ("cn__state", ["state"])):
        lv = _estimates(pl.read_parquet(pub / f"{file}.parquet"), keys)
        s = cn.group_by(keys).agg(pl.col("estimate").sum().alias("s"))
        j = lv.join(s, on=keys, how="left")
        assert (j["estimate"] == j["s"].fill_null(0.0)).all(), file
        assert (lv["estimate"] == lv["estimate"].round(0)).all()
    nat = _estimates(pl.read_parquet(pub / "cn__national.parquet"), [])
    assert nat["estimate"][0] == cn["estimate"].sum()
    # accounting: each unit is charged at every measured level (the table and two direct ones)
    conf = Path(res.confidential)
    per = pl.read_parquet(next(conf.glob("per_record*.parquet")))
    rho_cols = [c for c in per.columns if c.startswith("rho_")]
    assert sorted(rho_cols) == ["rho_cn", "rho_cn__county", "rho_cn__state_naics2"]
    row = per.row(0, named=True)
    assert row["rho_cn"] == pytest.approx(1 / (2 * 9.0))
    assert row["rho_cn__county"] == pytest.approx(1 / (2 * 9.0))


def test_plan_shows_expected_sd_per_level(tmp_path: Path) -> None:
    spec = parse_spec(_spec(tmp_path), tmp_path)
    summary = plan_summary(spec)
    t = summary["tables"][0]
    cons = t["consistent"]
    assert cons["measured"] == ["county_naics2", "state_naics2", "county"]
    rows = {r["level"]: r for r in cons["expected_sd"]["count"]}
    # measured levels: at most their own noise; coarse levels: below the rollup's sd
    assert rows["county_naics2"]["sd_max"] <= 3.0 + 1e-9
    assert rows["state"]["sd_median"] < 0.75 * rows["state"]["rollup_sd_median"]
    assert all(r["direct_file"] is None for r in t["rollups"])
    # a count's noise is an integer law: the exact sd with a normal margin
    assert t["rollups"][0]["moe_method"]["count"] == METHOD_CERTIFIED


@pytest.mark.parametrize(("table", "match"), [
    ({"rollups": [{"by": ["state", "naics2"]}]}, "needs at least one rollup"),
    ({"publication": {"round": 10.0}}, "break the additivity"),
    ({"publication": {"negative": "clamp"}}, "break the additivity"),
    ({"kind": "sum", "measures": ["payroll"],
      "mechanism": {"family": "log", "sigma": 0.3, "offset": 1000.0}, "grid": 0.01},
     "additive mechanism"),
])
def test_refusals(tmp_path: Path, table: dict[str, Any], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_spec(_spec(tmp_path, **table), tmp_path)


def test_shares_split_the_targets(tmp_path: Path) -> None:
    """shares: each measured level its own mechanism; a unit's total loss is unchanged."""
    shares = {"county_naics2": 0.9, "state_naics2": 0.05, "county": 0.05}
    spec = parse_spec(_spec(tmp_path, shares=shares), tmp_path)
    t = spec.tables[0]
    assert t.level_mechanisms["state_naics2"].sigma == pytest.approx(3.0 / 0.05 ** 0.5)
    summary = plan_summary(spec)
    tab = summary["tables"][0]
    assert tab["consistent"]["shares"] == shares
    # the table's curve with its direct levels: the whole target (1 / (2 * 9)) at any size
    curve = tab["table_policy_curve_with_direct_rollups"]
    assert all(p["rho"] == pytest.approx(1 / 18.0, rel=1e-9) for p in curve)
    res = run_release(spec, test_seed=True)
    per = pl.read_parquet(next(Path(res.confidential).glob("per_record*.parquet")))
    row = per.row(0, named=True)
    assert row["rho_cn"] == pytest.approx(0.9 / 18.0)
    assert row["rho_cn__state_naics2"] == pytest.approx(0.05 / 18.0)
    assert row["rho_cn"] + row["rho_cn__state_naics2"] + row["rho_cn__county"] == \
        pytest.approx(1 / 18.0)
    pub = Path(res.public)
    cn = _estimates(pl.read_parquet(pub / "cn.parquet"), ["county", "naics2"])
    nat = _estimates(pl.read_parquet(pub / "cn__national.parquet"), [])
    assert nat["estimate"][0] == cn["estimate"].sum()


@pytest.mark.parametrize(("shares", "match"), [
    ({"county_naics2": 0.9, "state_naics2": 0.1}, "exactly the measured levels"),
    ({"county_naics2": 0.9, "state_naics2": 0.1, "county": 0.1}, "sum to 1"),
])
def test_bad_shares(tmp_path: Path, shares: dict[str, float], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_spec(_spec(tmp_path, shares=shares), tmp_path)


def test_consistent_unit_count_with_direct_rollups_is_flagged(tmp_path: Path) -> None:
    """A unit counted once per finest cell and once per direct rollup cell (review r52).

    Stated from the spec alone (validate, plan, run), only for a count with a unit and a
    direct rollup.
    """
    from tabdp.planning import CONSISTENT_UNIT_COUNT, spec_usability_issues

    found = dict(spec_usability_issues(parse_spec(_spec(tmp_path), tmp_path)))
    assert found["tables[0].consistent"] == CONSISTENT_UNIT_COUNT.format(unit="estab_id")
    row_mode = _spec(tmp_path)
    del row_mode["input"]["unit"]
    assert "tables[0].consistent" not in dict(spec_usability_issues(parse_spec(row_mode,
                                                                               tmp_path)))
    no_direct = _spec(tmp_path, rollups=[{"by": ["state", "naics2"]}, {"by": []}],
                      consistent=False)
    assert "tables[0].consistent" not in dict(spec_usability_issues(parse_spec(no_direct,
                                                                               tmp_path)))
