"""Synthetic CBP-like microdata (``tabdp.datasets.synth``): determinism, schema, domains, units."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tabdp.datasets.synth as synth
from tabdp.datasets.synth import (
    ESTABLISHMENT_COLUMNS,
    QUARTER_COLUMNS,
    SIZE_CLASSES,
    county_domain,
    county_to_state,
    generate_establishment_quarters,
    generate_establishments,
    naics2_domain,
    naics2_of_prefix,
    naics6_domain,
    naics6_to_naics2,
    public_domains,
    size_class_domain,
    size_class_of,
    state_domain,
)
from tabdp.exceptions import InvalidParameterError

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "cbp_sample.parquet"
SAMPLE_ROWS, SAMPLE_SEED = 100_000, 20261121

TEXT = ("state", "county", "naics2", "naics6", "size_class")
DTYPES = {
    "estab_id": pl.Int64, "firm_id": pl.Int64, "quarter": pl.Int8, "employment": pl.Int64,
    "payroll_q1": pl.Float64, "payroll": pl.Float64, "revenue": pl.Float64,
    **{c: pl.String for c in TEXT},
}
# Inclusive employment bounds of each size class.
SIZE_BOUNDS = {"0": (0, 0), "1-4": (1, 4), "5-9": (5, 9), "10-19": (10, 19),
               "20-49": (20, 49), "50-99": (50, 99), "100-249": (100, 249),
               "250-499": (250, 499), "500-999": (500, 999), "1000+": (1000, 10**12)}


@pytest.fixture(scope="module")
def df() -> pl.DataFrame:
    return generate_establishments(200_000, seed=11)


@pytest.fixture(scope="module")
def quarters() -> pl.DataFrame:
    return generate_establishments(20_000, seed=12, unit_rows=True)


# ----------------------------------------------------------------------------- determinism


def test_same_seed_same_frame() -> None:
    a = generate_establishments(5_000, seed=3)
    b = generate_establishments(5_000, seed=3)
    assert a.equals(b)
    assert not a.equals(generate_establishments(5_000, seed=4))
    qa = generate_establishments(2_000, seed=3, unit_rows=True)
    assert qa.equals(generate_establishment_quarters(2_000, seed=3))


def test_seed_none_gives_fresh_valid_data() -> None:
    a, b = generate_establishments(2_000), generate_establishments(2_000)
    assert a.columns == list(ESTABLISHMENT_COLUMNS) and a.height == 2_000
    assert not a.equals(b)


def test_several_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunked generation keeps ids unique, firms shared across chunks and quarters aligned."""
    monkeypatch.setattr(synth, "_CHUNK_ROWS", 1_000)
    e = generate_establishments(3_500, seed=5)
    q = generate_establishments(3_500, seed=5, unit_rows=True)
    assert e["estab_id"].to_list() == list(range(1, 3_501))
    assert generate_establishments(3_500, seed=5).equals(e)
    firm_chunks = e.group_by("firm_id").agg(((pl.col("estab_id") - 1) // 1_000).n_unique())
    assert int(firm_chunks["estab_id"].max()) > 1  # some firm spans chunks
    annual = q.group_by("estab_id").agg(pl.col("payroll", "revenue").sum()).sort("estab_id")
    assert annual["payroll"].equals(e["payroll"]) and annual["revenue"].equals(e["revenue"])


# ----------------------------------------------------------------------------- schema


def test_schema_and_dtypes(df: pl.DataFrame, quarters: pl.DataFrame) -> None:
    assert df.columns == list(ESTABLISHMENT_COLUMNS)
    assert quarters.columns == list(QUARTER_COLUMNS)
    for frame in (df, quarters):
        assert {c: frame.schema[c] for c in frame.columns} == {c: DTYPES[c] for c in frame.columns}
        assert frame.null_count().sum_horizontal().item() == 0
    assert df["estab_id"].is_unique().all()
    assert df["estab_id"].is_sorted()
    pdf = df.head(100).to_pandas()
    assert list(pdf.columns) == list(ESTABLISHMENT_COLUMNS)


def test_empty_frame_keeps_schema() -> None:
    for unit_rows, cols in ((False, ESTABLISHMENT_COLUMNS), (True, QUARTER_COLUMNS)):
        e = generate_establishments(0, seed=1, unit_rows=unit_rows)
        assert e.height == 0 and e.columns == list(cols)
        assert all(e.schema[c] == DTYPES[c] for c in cols)


def test_categorical_uses_public_domains_as_categories() -> None:
    a = generate_establishments(3_000, seed=8, categorical=True, n_states=4,
                                counties_per_state=[3, 5, 7, 9])
    b = generate_establishments(3_000, seed=8, n_states=4, counties_per_state=[3, 5, 7, 9])
    doms = public_domains(4, [3, 5, 7, 9])
    for c in TEXT:
        assert a.schema[c] == pl.Enum(doms[c])
    assert a.with_columns(pl.col(c).cast(pl.String) for c in TEXT).equals(b)
    h = naics6_to_naics2(categorical=True)
    assert h.schema["naics6"] == pl.Enum(naics6_domain())
    joined = a.join(h.rename({"naics2": "sector"}), on="naics6", how="left")
    assert (joined["sector"] == joined["naics2"]).all()
    g = county_to_state(4, [3, 5, 7, 9], categorical=True)
    assert g.schema["county"] == pl.Enum(doms["county"])


# ----------------------------------------------------------------------------- domains


def test_domains_are_fixed_sorted_and_unique() -> None:
    assert len(naics2_domain()) == 19 and naics2_domain() == sorted(set(naics2_domain()))
    assert naics2_domain() == ["11", "21", "22", "23", "31", "42", "44", "48", "51", "52",
                               "53", "54", "55", "56", "61", "62", "71", "72", "81"]
    codes = naics6_domain()
    assert len(codes) == 301 and codes == sorted(set(codes))
    assert all(len(c) == 6 and c.isdigit() for c in codes)
    assert size_class_domain() == list(SIZE_CLASSES)
    assert state_domain() == ["01", "02", "04", "05", "06", "08", "09", "10", "11", "12"]
    assert len(state_domain(51)) == 51
    counties = county_domain()
    assert len(counties) == 300 and counties == sorted(set(counties))
    assert county_domain(2, [1, 2]) == ["01001", "02001", "02003"]
    assert len(county_domain(51, 499)) == 51 * 499
    assert county_domain(51, 499)[-1] == "56997"
    doms = public_domains()
    assert set(doms) == {"state", "county", "naics2", "naics6", "size_class"}
    assert doms["county"] == counties and doms["naics6"] == codes


def test_hierarchies() -> None:
    h = naics6_to_naics2()
    assert h.columns == ["naics6", "naics2"] and h.height == 301
    assert h["naics6"].to_list() == naics6_domain()
    assert set(h["naics2"]) == set(naics2_domain())  # every sector has codes
    assert h["naics2"].to_list() == [naics2_of_prefix(c[:2]) for c in h["naics6"]]
    assert set(h.filter(pl.col("naics2") == "31")["naics6"].str.slice(0, 2)) == {"31", "32", "33"}
    assert naics2_of_prefix("45") == "44" and naics2_of_prefix("49") == "48"
    g = county_to_state(3, [2, 4, 1])
    assert g.columns == ["county", "state"]
    assert g["county"].to_list() == county_domain(3, [2, 4, 1])
    assert (g["county"].str.slice(0, 2) == g["state"]).all()


def test_values_within_public_domains(df: pl.DataFrame) -> None:
    doms = public_domains()
    for c in TEXT:
        assert set(df[c].unique()) <= set(doms[c]), c
    # a sample this large hits every county and sector
    assert df["county"].n_unique() == len(doms["county"])
    assert df["naics2"].n_unique() == len(doms["naics2"])


def test_nesting(df: pl.DataFrame) -> None:
    assert (df["county"].str.slice(0, 2) == df["state"]).all()
    h = naics6_to_naics2().rename({"naics2": "sector"})
    joined = df.join(h, on="naics6", how="left")
    assert (joined["sector"] == joined["naics2"]).all()
    prefix = df["naics6"].str.slice(0, 2).replace({"32": "31", "33": "31", "45": "44", "49": "48"})
    assert (prefix == df["naics2"]).all()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 300), seed=st.integers(0, 2**32), n_states=st.integers(1, 51),
       counties=st.integers(1, 40), unit_rows=st.booleans())
def test_invariants_any_configuration(n: int, seed: int, n_states: int, counties: int,
                                      unit_rows: bool) -> None:
    frame = generate_establishments(n, seed=seed, n_states=n_states,
                                    counties_per_state=counties, unit_rows=unit_rows)
    doms = public_domains(n_states, counties)
    for c in TEXT:
        assert set(frame[c].unique()) <= set(doms[c])
    assert (frame["county"].str.slice(0, 2) == frame["state"]).all()
    assert frame["estab_id"].n_unique() == n
    assert n <= frame.height <= 4 * n
    assert (frame.select(pl.col("employment", "payroll", "revenue")) >= 0).to_numpy().all()


# ----------------------------------------------------------------------------- distributions


def test_non_negative_and_zero_employment(df: pl.DataFrame) -> None:
    num = df.select("employment", "payroll_q1", "payroll", "revenue")
    assert all(v >= 0 for v in num.min().row(0))
    zero = df["employment"] == 0
    assert 0.02 < zero.mean() < 0.04
    assert ((df["payroll"] == 0) == zero).all()  # zero payroll exactly when zero employment
    assert (df["payroll_q1"] <= df["payroll"]).all()
    assert (df.filter(zero)["size_class"] == "0").all()
    assert (df["payroll"] == df["payroll"].round(0)).all()  # whole dollars


def test_heavy_tail_200k(df: pl.DataFrame) -> None:
    emp = df["employment"]
    median = emp.median()
    assert 3 <= median <= 10
    assert emp.max() / median >= 1e3


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (3-6 s)
def test_heavy_tail_1m() -> None:
    emp = generate_establishments(1_000_000, seed=2)["employment"]
    ratio = emp.max() / emp.median()
    assert 1e4 <= ratio <= 1e6
    assert 1e4 <= emp.max() <= 250_000  # default max_employment truncates the tail


def test_size_class_consistent_with_employment(df: pl.DataFrame) -> None:
    assert (df["size_class"].to_numpy() == size_class_of(df["employment"].to_numpy())).all()
    bounds = pl.DataFrame({"size_class": list(SIZE_BOUNDS),
                           "lo": [b[0] for b in SIZE_BOUNDS.values()],
                           "hi": [b[1] for b in SIZE_BOUNDS.values()]})
    j = df.join(bounds, on="size_class", how="left")
    assert j["lo"].null_count() == 0
    assert ((j["employment"] >= j["lo"]) & (j["employment"] <= j["hi"])).all()
    assert set(df["size_class"]) == set(SIZE_CLASSES)


def test_money_is_plausible(df: pl.DataFrame) -> None:
    emp = df.filter(pl.col("employment") > 0)
    wage = (emp["payroll"] / emp["employment"]).median()
    assert 25_000 < wage < 100_000
    ratio = (emp["revenue"] / emp["payroll"]).median()
    assert 2 < ratio < 8
    q1 = (emp["payroll_q1"] / emp["payroll"]).median()
    assert 0.22 < q1 < 0.28
    by_sector = emp.group_by("naics2").agg((pl.col("payroll") / pl.col("employment")).median())
    wages = dict(by_sector.iter_rows())
    assert wages["72"] < wages["54"]  # food service pays less than professional services


def test_uneven_counties_industries_and_firms(df: pl.DataFrame) -> None:
    county_n = df.group_by("county").len()["len"]
    assert county_n.max() > 10 * county_n.median()
    sector_n = df.group_by("naics2").len()["len"]
    assert sector_n.max() > 20 * sector_n.min()
    firm_n = df.group_by("firm_id").len()["len"]
    assert 0.85 < (firm_n == 1).mean() < 0.99  # most firms have one establishment
    assert firm_n.max() >= 100  # ... and a few are large chains
    per_firm = df.group_by("firm_id").agg(pl.len(), pl.col("county", "naics6").n_unique())
    chains = per_firm.filter(pl.col("len") >= 10)
    assert (chains["county"] > 5).all()  # chains spread over counties ...
    assert (chains["naics6"] < chains["len"]).all()  # ... and mostly share an industry


# ----------------------------------------------------------------------------- quarters


def test_quarters_several_rows_per_unit(quarters: pl.DataFrame) -> None:
    per_unit = quarters.group_by("estab_id").agg(pl.len(), pl.col("quarter").sort())
    assert per_unit.height == 20_000
    assert per_unit["len"].min() >= 1 and per_unit["len"].max() == 4
    assert 0.85 < (per_unit["len"] == 4).mean() < 0.95
    assert (per_unit["len"] > 1).mean() > 0.9
    # active quarters are contiguous and in 1..4
    spans = per_unit["quarter"].list
    assert ((spans.max() - spans.min() + 1) == per_unit["len"]).all()
    assert quarters["quarter"].min() >= 1 and quarters["quarter"].max() <= 4
    assert quarters.select("estab_id", "quarter").is_unique().all()


def test_quarters_match_establishments(quarters: pl.DataFrame) -> None:
    e = generate_establishments(20_000, seed=12)
    annual = quarters.group_by("estab_id").agg(
        pl.col("payroll", "revenue").sum(),
        pl.col("employment").sort_by("quarter").first(),
        *(pl.col(c).first() for c in ("firm_id", *TEXT)),
        q1=pl.col("payroll").filter(pl.col("quarter") == 1).sum(),
    ).sort("estab_id")
    for c in ("payroll", "revenue", "employment", "firm_id", *TEXT):
        assert annual[c].equals(e[c]), c
    assert annual["q1"].equals(e["payroll_q1"])
    # attributes are constant within a unit
    assert (quarters.group_by("estab_id").agg(pl.col(*TEXT).n_unique())
            .select(pl.col(*TEXT).max()).row(0) == (1,) * len(TEXT))
    assert ((quarters["employment"] == 0) == (quarters["payroll"] == 0)).all()


# ----------------------------------------------------------------------------- sample file


def test_committed_sample_is_reproducible() -> None:
    assert SAMPLE.stat().st_size < 5_000_000
    meta = pq.read_metadata(SAMPLE).metadata
    assert meta[b"seed"] == str(SAMPLE_SEED).encode() and meta[b"rows"] == b"100000"
    saved = pl.read_parquet(SAMPLE)
    assert saved.equals(generate_establishments(SAMPLE_ROWS, seed=SAMPLE_SEED))
    assert saved.schema == generate_establishments(0).schema


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"n_rows": -1}, "n_rows must be an int >= 0; got -1"),
    ({"n_rows": 2.5}, "n_rows must be an int; got 2.5"),
    ({"n_rows": True}, "n_rows must be an int"),
    ({"seed": -3}, "seed must be an int >= 0; got -3"),
    ({"seed": "7"}, "seed must be an int"),
    ({"n_states": 0}, "n_states must be an int between 1 and 51; got 0"),
    ({"n_states": 52}, "got 52"),
    ({"counties_per_state": 500}, "counties_per_state must be an int between 1 and 499"),
    ({"counties_per_state": [3, 4]}, "counties_per_state has 2 entries but n_states=10"),
    ({"counties_per_state": "30"}, "counties_per_state must be an int or a sequence"),
    ({"n_states": 2, "counties_per_state": [3, 0]}, "counties_per_state[1]"),
    ({"zero_share": 1.0}, "zero_share must be a real number in [0, 1)"),
    ({"zero_share": float("nan")}, "zero_share"),
    ({"part_year_share": -0.1}, "part_year_share"),
    ({"tail_alpha": 0.1}, "tail_alpha must be a real number in [0.5, 5]"),
    ({"max_employment": 10}, "max_employment must be an int >= 100; got 10"),
    ({"unit_rows": 1}, "unit_rows must be True or False"),
    ({"categorical": "yes"}, "categorical must be True or False"),
])
def test_invalid_arguments(kwargs: dict, fragment: str) -> None:
    args = {"n_rows": 10, **kwargs}
    with pytest.raises(InvalidParameterError) as info:
        generate_establishments(args.pop("n_rows"), **args)
    msg = str(info.value)
    assert fragment in msg
    assert msg.startswith("generate_establishments: ") and "\nHint: " in msg
    assert isinstance(info.value, ValueError)


def test_invalid_arguments_other_functions() -> None:
    with pytest.raises(InvalidParameterError, match="n_states"):
        state_domain(0)
    with pytest.raises(InvalidParameterError, match="counties_per_state"):
        county_domain(2, [1])
    with pytest.raises(InvalidParameterError, match="unit_rows cannot be passed"):
        generate_establishment_quarters(10, unit_rows=False)
    with pytest.raises(InvalidParameterError, match="prefix"):
        naics2_of_prefix("99")
    with pytest.raises(InvalidParameterError, match="employment must be >= 0"):
        size_class_of([3, -1])
    with pytest.raises(InvalidParameterError, match="categorical"):
        county_to_state(categorical=None)  # type: ignore[arg-type]


def test_numpy_integer_arguments_accepted() -> None:
    a = generate_establishments(np.int64(50), seed=np.uint32(9), n_states=np.int8(2),
                                counties_per_state=(np.int16(2), 3))
    assert a.equals(generate_establishments(50, seed=9, n_states=2, counties_per_state=[2, 3]))
