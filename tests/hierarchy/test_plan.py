"""Planning consistent tables: expected sd equals the estimator's, and the budget split."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from tabdp.hierarchy import (
    calibrated_shares,
    consistent,
    expected_sd,
    gaussian_shares,
    plan_split,
)
from tabdp.mechanisms import Gaussian

GEO = pl.DataFrame({"state": [f"s{i // 6}" for i in range(30)],
                    "county": [f"c{i:02d}" for i in range(30)]})
SECTORS = [f"n{j}" for j in range(8)]
KEYS = GEO.select("county").join(pl.DataFrame({"naics": SECTORS}), how="cross")
MEASURED = [("county", "naics"), ("state", "naics"), ("county",)]
OUTS = [*MEASURED, ("state",), ()]


def test_expected_sd_is_the_estimators_sd() -> None:
    mechs = {MEASURED[0]: Gaussian(sigma=3.0), MEASURED[1]: Gaussian(sigma=5.0),
             MEASURED[2]: Gaussian(sigma=4.0)}
    sds = expected_sd(KEYS, MEASURED, hierarchies={"geo": GEO}, mechanisms=mechs, outputs=OUTS)
    rng = np.random.default_rng(0)
    rel = {}
    for lv in MEASURED:
        k = sds[lv].select(lv)
        rel[lv] = k.with_columns(x=pl.Series(rng.normal(size=k.height)), x_sd=pl.lit(1.0))
    out = consistent(rel, measures=["x"], hierarchies={"geo": GEO}, mechanisms=mechs,
                     outputs=OUTS)
    for o in OUTS:
        if o:
            j = out[o].join(sds[o], on=list(o))
            assert np.allclose(j["x_sd"], j["sd"], rtol=1e-12)
        else:
            assert out[o]["x_sd"][0] == pytest.approx(sds[o]["sd"][0], rel=1e-12)


def test_plan_split_beats_equal_and_keeps_the_finest_level() -> None:
    rng = np.random.default_rng(1)
    expected = KEYS.with_columns(total=pl.Series(rng.gamma(1.0, 12.0, KEYS.height)))
    p = plan_split(KEYS, MEASURED, hierarchies={"geo": GEO}, expected=expected,
                   mechanism_at=gaussian_shares(3.0), cv=0.3, step=0.05, outputs=OUTS)
    assert sum(p.shares.values()) == pytest.approx(1.0)
    assert p.objective >= p.equal_objective
    assert p.usable[MEASURED[0]] > p.equal_usable[MEASURED[0]]
    # the finest level's planned RMSE within 5% of spending everything there
    var = {lv: 9.0 / f for lv, f in p.shares.items() if f > 0}
    sds = expected_sd(KEYS, [lv for lv in MEASURED if p.shares[lv] > 0],
                      hierarchies={"geo": GEO},
                      mechanisms={lv: Gaussian(sigma=math.sqrt(v)) for lv, v in var.items()},
                      outputs=[MEASURED[0]])
    rmse = math.sqrt(float((sds[MEASURED[0]]["sd"] ** 2).mean()))
    assert rmse <= 1.05 * 3.0 * (1 + 1e-9)
    # a coarse level measured gains over the rollup plan
    assert p.shares[MEASURED[1]] > 0 or p.shares[MEASURED[2]] > 0


def test_calibrated_shares_scale_the_loss() -> None:
    at = calibrated_shares("gaussian", {1.0: 0.4}, 10.0)
    for f in (1.0, 0.5, 0.1):
        assert float(at(f).rho(1.0)) == pytest.approx(0.4 * f, rel=1e-6)
