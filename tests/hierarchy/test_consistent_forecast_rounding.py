"""A consistent table's forecast follows the unbiased rounding of its published cells (fc64).

`consistent` rounds the finest GLS cells to the table's grid without bias (up with
probability equal to the fractional part): a cell summing one range of a rounding block (every
finest cell, every cell of one classification) is published as ``g·⌊(q + E)/g + U⌋``. The plan
forecast the unrounded law of the same sd: discrete Gaussian counts (σ = 2, grid 1) were
forecast 50.0% negative at a total of 0, where 40% are (0 absorbs mass from both sides).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tabdp.hierarchy import consistent
from tabdp.hierarchy.plan import expected_sd
from tabdp.mechanisms import DiscreteGaussian, Gaussian
from tabdp.planning import _cells, _flag_rows, _stochastically_rounded_rows

S, C = 40, 50                                       # 40 states x 50 counties
GEO = pl.DataFrame({"state": [f"s{i}" for i in range(S) for _ in range(C)],
                    "county": [f"s{i}c{j}" for i in range(S) for j in range(C)]})
LEVELS = [("county",), ("state",), ()]
MECH = DiscreteGaussian(sigma=2.0)
SEEDS = range(20)                                   # 40,000 released finest cells
#: 4 sd of a share over 40,000 cells; the unrounded law is off by 0.029 to 0.1 below
TOL = 0.01


def _released(x: float, nonnegative: bool = False) -> np.ndarray:
    """(estimate, sd) of every consistent county cell over SEEDS releases, each county x."""
    rows = []
    keys = {("county",): GEO.select("county"),
            ("state",): GEO.select("state").unique(maintain_order=True), (): pl.DataFrame()}
    truth = {("county",): np.full(S * C, x), ("state",): np.full(S, x * C),
             (): np.full(1, x * S * C)}
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        rel = {}
        for lv in LEVELS:
            r = MECH.release_table(truth[lv], rng=rng, level=0.9)
            body = pl.DataFrame({"n": r.estimate, "n_sd": r.sd})
            rel[lv] = pl.concat([keys[lv], body], how="horizontal") if lv else body
        out = consistent(rel, measures=["n"], hierarchies={"geo": GEO}, mechanisms=MECH,
                         grid=1.0, nonnegative=nonnegative)
        rows.append(out[("county",)].select("n", "n_sd").to_numpy())
    return np.vstack(rows)


def _county_sd() -> float:
    sds = expected_sd(GEO.select("county"), LEVELS, hierarchies={"geo": GEO}, mechanisms=MECH,
                      outputs=LEVELS, grid=1.0)
    return float(np.median(sds[("county",)]["sd"].to_numpy()))


@pytest.mark.parametrize("x", [0.0, 1.0, 3.0])
def test_consistent_forecast_matches_the_stochastically_rounded_cells(x: float) -> None:
    a = _released(x)
    neg = float(np.mean(a[:, 0] < 0))
    with np.errstate(divide="ignore"):
        flagged = float(np.mean(a[:, 1] / np.abs(a[:, 0]) >= 0.3))
    sd = _county_sd()
    (row,) = _stochastically_rounded_rows(sd, 1.0, _cells([x]), 0.3)
    assert row["p_negative"] == pytest.approx(neg, abs=TOL)
    assert row["p_flagged"] == pytest.approx(flagged, abs=TOL)
    # the old forecast (unrounded normal law of the same sd) fails this tolerance
    (old,) = _flag_rows(Gaussian(sigma=sd), None, _cells([x]), 0.3)
    assert abs(old["p_negative"] - neg) > TOL


def test_consistent_forecast_with_nonnegative_has_no_negative_cells() -> None:
    a = _released(0.0, nonnegative=True)
    assert float(np.min(a[:, 0])) >= 0.0
    (row,) = _stochastically_rounded_rows(_county_sd(), 1.0, _cells([0.0]), 0.3,
                                          nonnegative=True)
    assert row["p_negative"] == 0.0


def test_spec_outlook_of_a_nonnegative_consistent_table_has_no_negatives(
        tmp_path: Path) -> None:
    from tabdp.planning import spec_outlook
    from tabdp.release._consistent import consistent_outlook
    from tabdp.release.spec import parse_spec
    from tests.hierarchy.test_spec_consistent import _spec

    spec = parse_spec(_spec(tmp_path, nonnegative=True), tmp_path)
    out = spec_outlook(spec, consistent_outlook)[0]
    assert all(r["p_negative"] == 0.0 for lv in out["consistent_levels"]
               for r in lv["flag_curve"])
    plain = spec_outlook(parse_spec(_spec(tmp_path), tmp_path), consistent_outlook)[0]
    assert plain["flag_curve"][0]["p_negative"] > 0.0
