"""Alternative hierarchies: two groupings of the same codes in one release spec.

Agencies publish one variable under several classifications (NAICS sectors and a custom
grouping of the same 6-digit codes; NACE and a national aggregation). A spec may declare two
hierarchies that share levels when the shared levels are one public domain (the same codes, of
the same type) and map alike; rollups then reach the levels of either, consistent tables solve
on one tree per classification, and ``tabdp compare`` refuses them (its traditional side
protects a column through one hierarchy only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tabdp.exceptions import InvalidParameterError, SpecError
from tabdp.hierarchy.consistent import consistent
from tabdp.mechanisms import Gaussian
from tabdp.release.runner import run_release
from tabdp.release.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
NAICS = ROOT / "data" / "hierarchies" / "naics.csv"
GEO = ROOT / "data" / "hierarchies" / "geography.csv"
GOODS = {"11", "21", "23", "31", "32", "33"}
TRADE = {"42", "44", "45", "48", "49"}


def _group(naics2: str) -> str:
    return "goods" if naics2 in GOODS else "trade" if naics2 in TRADE else "services"


def _alt_file(folder: Path, *, drop: int = 0, mid: bool = False) -> Path:
    """A grouping of the bundled 6-digit codes: group > naics6 (or naics2 > group2 > naics6)."""
    m = pl.read_csv(NAICS, infer_schema=False)
    m = m.with_columns(pl.col("naics2").map_elements(_group, return_dtype=pl.String)
                       .alias("group"))
    if mid:  # a level between the shared naics2 and naics6
        m = m.with_columns((pl.col("naics2") + "-" + pl.col("group")).alias("group2"))
    m = m.head(m.height - drop)
    path = folder / f"alt_{drop}_{int(mid)}.csv"
    m.select(["naics2", "group2", "naics6"] if mid else ["group", "naics6"]).write_csv(path)
    return path


def _spec(tmp_path: Path, alt: dict[str, Any], table: dict[str, Any]) -> dict[str, Any]:
    return {
        "release": {"name": "alt", "level": 0.9},
        "input": {"path": str(ROOT / "data" / "cbp_sample.parquet"), "unit": "estab_id"},
        "hierarchies": {"geo": {"file": str(GEO), "levels": ["state", "county"]},
                        "industry": {"file": str(NAICS),
                                     "levels": ["naics2", "naics3", "naics4", "naics6"]},
                        "grouping": alt},
        "output": {"public": str(tmp_path / "pub"), "confidential": str(tmp_path / "conf")},
        "randomness": {"seed": 11},
        "tables": [table],
    }


def _count_table(**extra: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": "cn", "kind": "count", "by": ["state", "naics6"],
                         "mechanism": {"family": "gaussian", "sigma": 2.0}, "grid": 0.01,
                         "rollups": [{"by": ["naics2"]}, {"by": ["group"]},
                                     {"by": ["state", "group"]}, {"by": []}]}
    t.update(extra)
    return t


def test_spec_accepts_a_grouping_sharing_the_finest_level(tmp_path: Path) -> None:
    spec = parse_spec(_spec(tmp_path, {"file": str(_alt_file(tmp_path)),
                                       "levels": ["group", "naics6"]}, _count_table()), tmp_path)
    maps = [dict(r.maps) for r in spec.tables[0].rollups]
    assert maps[0] == {"naics2": ("industry", "naics6")}
    assert maps[1] == {"group": ("grouping", "naics6")}
    assert maps[2] == {"group": ("grouping", "naics6")}
    assert spec.domains["group"].to_list() == ["goods", "services", "trade"]
    assert spec.domains["naics6"].len() == pl.read_csv(NAICS, infer_schema=False)[
        "naics6"].n_unique()


def test_rollups_of_both_groupings_add_up_to_the_released_cells(tmp_path: Path) -> None:
    alt = _alt_file(tmp_path)
    res = run_release(parse_spec(_spec(tmp_path, {"file": str(alt),
                                                  "levels": ["group", "naics6"]},
                                       _count_table()), tmp_path), test_seed=True)
    pub = Path(res.public)
    cells = pl.read_parquet(pub / "cn.parquet").select("state", "naics6", "estimate")
    mapping = pl.read_csv(alt, infer_schema=False).join(
        pl.read_csv(NAICS, infer_schema=False).select("naics2", "naics6"), on="naics6")
    cells = cells.join(mapping, on="naics6", how="left")
    assert cells["group"].null_count() == 0
    for file, keys in (("cn__naics2", ["naics2"]), ("cn__group", ["group"]),
                       ("cn__state_group", ["state", "group"])):
        lv = pl.read_parquet(pub / f"{file}.parquet")
        want = cells.group_by(keys).agg(pl.col("estimate").sum().alias("want"))
        j = lv.join(want, on=keys, how="left")
        assert j.height == lv.height and j["want"].null_count() == 0, file
        np.testing.assert_allclose(j["estimate"].to_numpy(), j["want"].to_numpy(), rtol=1e-9,
                                   atol=1e-6, err_msg=file)
    nat = pl.read_parquet(pub / "cn__national.parquet")["estimate"][0]
    assert nat == pytest.approx(cells["estimate"].sum(), rel=1e-9)
    groups = pl.read_parquet(pub / "cn__group.parquet")
    assert sorted(groups["group"].to_list()) == ["goods", "services", "trade"]


@pytest.mark.parametrize(("case", "message"), [
    ("missing_code", "different codes"),
    ("dtype", "codes of type"),
    ("order", "another order"),
    ("mapping", "differently"),
])
def test_spec_refuses_groupings_that_disagree(tmp_path: Path, case: str, message: str) -> None:
    if case == "missing_code":
        alt = {"file": str(_alt_file(tmp_path, drop=1)), "levels": ["group", "naics6"]}
    elif case == "dtype":
        m = pl.read_csv(_alt_file(tmp_path), infer_schema=False)
        path = tmp_path / "alt_int.parquet"
        m.with_columns(pl.col("naics6").cast(pl.Int64)).write_parquet(path)
        alt = {"file": str(path), "levels": ["group", "naics6"]}
    elif case == "order":
        # two levels in one-to-one correspondence: valid hierarchies in either order
        path = tmp_path / "codes.csv"
        pl.DataFrame({"code": ["1", "2"], "label": ["one", "two"]}).write_csv(path)
        alt = {"file": str(path), "levels": ["label", "code"]}
        spec = _spec(tmp_path, alt, _count_table())
        spec["hierarchies"] = {"coded": {"file": str(path), "levels": ["code", "label"]},
                               **spec["hierarchies"]}
        with pytest.raises(SpecError, match=message) as err:
            parse_spec(spec, tmp_path)
        assert "hierarchies.grouping" in str(err.value)
        return
    else:
        m = pl.read_csv(_alt_file(tmp_path, mid=True), infer_schema=False)
        # one 6-digit code moved to another sector in the alternative grouping
        first = m["naics6"][0]
        m = m.with_columns(pl.when(pl.col("naics6") == first).then(pl.lit("21"))
                           .otherwise(pl.col("naics2")).alias("naics2"))
        m = m.with_columns(pl.when(pl.col("naics6") == first).then(pl.lit("21-goods"))
                           .otherwise(pl.col("group2")).alias("group2"))
        path = tmp_path / "alt_mapping.csv"
        m.write_csv(path)
        alt = {"file": str(path), "levels": ["naics2", "group2", "naics6"]}
    with pytest.raises(SpecError, match=message) as err:
        parse_spec(_spec(tmp_path, alt, _count_table()), tmp_path)
    assert "hierarchies.grouping" in str(err.value)


def test_a_grouping_sharing_two_levels_that_map_alike_is_accepted(tmp_path: Path) -> None:
    alt = {"file": str(_alt_file(tmp_path, mid=True)), "levels": ["naics2", "group2", "naics6"]}
    t = _count_table(rollups=[{"by": ["naics2"]}, {"by": ["group2"]}, {"by": ["naics3"]}])
    spec = parse_spec(_spec(tmp_path, alt, t), tmp_path)
    maps = [dict(r.maps) for r in spec.tables[0].rollups]
    assert maps == [{"naics2": ("industry", "naics6")}, {"group2": ("grouping", "naics6")},
                    {"naics3": ("industry", "naics6")}]


def test_consistent_table_solves_on_the_grouping_it_uses(tmp_path: Path) -> None:
    alt = {"file": str(_alt_file(tmp_path)), "levels": ["group", "naics6"]}
    t = _count_table(consistent=True, grid=1.0,
                     rollups=[{"by": ["state", "group"], "direct": True}, {"by": ["group"]},
                              {"by": []}])
    res = run_release(parse_spec(_spec(tmp_path, alt, t), tmp_path), test_seed=True)
    pub = Path(res.public)
    cells = pl.read_parquet(pub / "cn.parquet").select("state", "naics6", "estimate")
    cells = cells.join(pl.read_csv(alt["file"], infer_schema=False), on="naics6")
    for file, keys in (("cn__state_group", ["state", "group"]), ("cn__group", ["group"])):
        lv = pl.read_parquet(pub / f"{file}.parquet")
        want = cells.group_by(keys).agg(pl.col("estimate").sum().alias("want"))
        j = lv.join(want, on=keys, how="left")
        assert (j["estimate"] == j["want"]).all(), file


def test_consistent_table_refuses_levels_spread_over_two_groupings(tmp_path: Path) -> None:
    alt = {"file": str(_alt_file(tmp_path)), "levels": ["group", "naics6"]}
    t = _count_table(consistent=True, grid=1.0,
                     rollups=[{"by": ["state", "group"], "direct": True}, {"by": ["naics2"]}])
    with pytest.raises(SpecError, match="alternative hierarchies") as err:
        parse_spec(_spec(tmp_path, alt, t), tmp_path)
    assert "tables[0].rollups" in str(err.value) and "'group'" in str(err.value)


def test_consistent_api_picks_the_tree_holding_every_level() -> None:
    codes = pl.DataFrame({"leaf": ["a", "b", "c", "d"]})
    h1 = codes.with_columns(pl.Series("top", ["x", "x", "y", "y"])).select("top", "leaf")
    h2 = codes.with_columns(pl.Series("alt", ["p", "q", "q", "q"])).select("alt", "leaf")
    leaf = codes.with_columns(pl.Series("v", [1.0, 2.0, 3.0, 4.0]))
    alt = pl.DataFrame({"alt": ["p", "q"], "v": [1.5, 8.5]})
    out = consistent({("leaf",): leaf, ("alt",): alt}, measures=["v"],
                     hierarchies={"h1": h1, "h2": h2}, mechanisms=Gaussian(sigma=1.0))
    # p = a alone: a is pulled towards 1.5, and the q cells towards 8.5 (b + c + d = 9)
    a = out[("leaf",)].filter(pl.col("leaf") == "a")["v"][0]
    assert a == pytest.approx(1.25)
    assert out[("alt",)]["v"].sum() == pytest.approx(out[("leaf",)]["v"].sum())
    top = pl.DataFrame({"top": ["x", "y"], "v": [3.0, 7.0]})
    with pytest.raises(InvalidParameterError, match="alternative hierarchies"):
        consistent({("leaf",): leaf, ("alt",): alt, ("top",): top}, measures=["v"],
                   hierarchies={"h1": h1, "h2": h2}, mechanisms=Gaussian(sigma=1.0))


def test_compare_refuses_alternative_hierarchies(tmp_path: Path) -> None:
    from tabdp.compare.core import _refuse_alternatives

    spec = parse_spec(_spec(tmp_path, {"file": str(_alt_file(tmp_path)),
                                       "levels": ["group", "naics6"]}, _count_table()), tmp_path)
    with pytest.raises(SpecError, match="alternative hierarchies: level 'naics6'"):
        _refuse_alternatives(spec)


def test_plan_of_a_consistent_table_on_a_grouping_sharing_a_coarse_level(tmp_path: Path) -> None:
    """A consistent table on a grouping sharing a coarse level with another hierarchy: planned.

    naics2 is in both hierarchies, the table's group2 only in the grouping (the plan looked for
    the by column in the first hierarchy holding naics2).
    """
    from tabdp.release import plan_summary

    alt = {"file": str(_alt_file(tmp_path, mid=True)), "levels": ["naics2", "group2", "naics6"]}
    t = _count_table(by=["state", "group2"], consistent=True, grid=1.0,
                     rollups=[{"by": ["naics2"], "direct": True}, {"by": ["state", "naics2"]},
                              {"by": []}])
    summary = plan_summary(parse_spec(_spec(tmp_path, alt, t), tmp_path))
    cons = summary["tables"][0]["consistent"]
    assert cons["measured"] == ["state_group2", "naics2"]
    levels = [row["level"] for row in cons["expected_sd"]["count"]]
    assert levels == ["state_group2", "naics2", "state_naics2", "national"]


def _chain(tmp_path: Path, *, agree: bool) -> dict[str, Any]:
    """A chain: industry (naics2 … naics6), grp (group > naics2) and alt (group > naics6).

    Each pair shares one level at most; only the paths naics6 → naics2 → group (industry, grp)
    and naics6 → group (alt) can disagree (review r52: the 11 codes moved to services in alt).
    """
    m = pl.read_csv(NAICS, infer_schema=False).with_columns(
        pl.col("naics2").map_elements(_group, return_dtype=pl.String).alias("group"))
    m.select("group", "naics2").unique().write_csv(tmp_path / "grp.csv")
    alt = m if agree else m.with_columns(
        pl.when(pl.col("naics2") == "11").then(pl.lit("services")).otherwise(pl.col("group"))
        .alias("group"))
    alt.select("group", "naics6").write_csv(tmp_path / "alt.csv")
    spec = _spec(tmp_path, {"file": str(tmp_path / "grp.csv"), "levels": ["group", "naics2"]},
                 _count_table(by=["naics6"], rollups=[{"by": ["group"]}]))
    spec["hierarchies"]["alt"] = {"file": str(tmp_path / "alt.csv"),
                                  "levels": ["group", "naics6"]}
    return spec


def test_a_chain_of_groupings_must_agree_on_every_path(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="two meanings") as err:
        parse_spec(_chain(tmp_path, agree=False), tmp_path)
    msg = str(err.value)
    assert "'group'" in msg and "'11" in msg and "hierarchies.alt.file" in msg
    spec = parse_spec(_chain(tmp_path, agree=True), tmp_path)
    assert [dict(r.maps) for r in spec.tables[0].rollups] == [{"group": ("alt", "naics6")}]
