"""A table's own grid (review r36 F2/F3): the plan states it, and a coarse one is refused.

The grid is the set the exact noisy value is sampled on. The plan's margins of error include half
of the table's step exactly as the run's do, and a spec may not set a grid coarser than a tenth
of the noise's sd (the published sd then stays the error's sd and the estimate unbiased; coarse
rounding is ``publication.round``'s, flagged R).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tabdp.exceptions import SpecError
from tabdp.mechanisms import DiscreteGaussian, Gaussian
from tabdp.release import plan_summary
from tabdp.release.runner import run_release
from tabdp.release.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, *tables: dict[str, Any]) -> dict[str, Any]:
    return {
        "release": {"name": "g", "level": 0.9},
        "input": {"path": str(ROOT / "data" / "cbp_sample.parquet"), "unit": "estab_id"},
        "hierarchies": {"geo": {"file": str(ROOT / "data" / "hierarchies" / "geography.csv"),
                                "levels": ["state", "county"]}},
        "output": {"public": str(tmp_path / "pub"), "confidential": str(tmp_path / "conf")},
        "randomness": {"seed": 3},
        "plan": {"cell_totals": [10.0, 1e6], "count_totals": [3, 100]},
        "tables": list(tables),
    }


#: The coarsest grids allowed: a tenth of the noise's sd (their defaults are 10 and None).
PAY = {"name": "pay", "measures": ["payroll"], "by": ["state"],
       "mechanism": {"family": "gaussian", "sigma": 1000.0}, "grid": 100.0}
CNT = {"name": "cnt", "kind": "count", "by": ["state"],
       "mechanism": {"family": "discrete_gaussian", "sigma": 40.0}, "grid": 4}


def test_plan_states_the_run_margin_of_error_on_the_tables_grid(tmp_path: Path) -> None:
    """F2: the plan's expected moe and sd are the ones a seeded run publishes."""
    spec = parse_spec(_spec(tmp_path, PAY, CNT), tmp_path)
    plan = {t["name"]: t for t in plan_summary(spec)["tables"]}
    pub = Path(run_release(spec, test_seed=True).public)
    for name, measure in (("pay", "payroll"), ("cnt", "count")):
        out = pl.read_parquet(pub / f"{name}.parquet").filter(pl.col("measure") == measure)
        moe = out["moe"].drop_nulls().unique().to_list()
        sd = out["sd"].drop_nulls().unique().to_list()
        assert len(moe) == 1 and len(sd) == 1, (name, moe, sd)
        for row in plan[name]["expected_error"][measure]:
            assert row["moe"] == pytest.approx(moe[0], rel=1e-12), (name, row)
            assert row["sd"] == pytest.approx(sd[0], rel=1e-12), (name, row)
    # half of the table's own step, not of the default grid's
    assert plan["pay"]["expected_error"]["payroll"][0]["moe"] == pytest.approx(
        float(Gaussian(1000.0).moe_at([0.0], 0.9, grid=100.0)[0]))
    assert plan["cnt"]["expected_error"]["count"][0]["moe"] == float(
        DiscreteGaussian(40.0).moe_at([0.0], 0.9)[0]) + 2.0


@pytest.mark.parametrize(("table", "ok"), [
    ({**PAY, "grid": 100.0}, True),                       # exactly sd/10
    ({**PAY, "grid": 100.001}, False),
    ({**PAY, "grid": 1e7, "mechanism": {"family": "gaussian", "sigma": 3e6}}, False),
    ({**CNT, "grid": 4}, True),
    ({**CNT, "grid": 5}, False),
    ({**CNT, "grid": 10, "mechanism": {"family": "discrete_gaussian", "sigma": 2.0}}, False),
    ({**CNT, "grid": 1, "mechanism": {"family": "discrete_gaussian", "sigma": 0.5}}, True),
    ({**CNT, "grid": 0.5, "mechanism": {"family": "gaussian", "sigma": 3.0}}, False),
    ({**CNT, "grid": 2, "mechanism": {"family": "discrete_laplace", "scale": 10.0}}, False),
    ({**PAY, "grid": 1e5, "mechanism": {"family": "laplace", "scale": 1e6}}, True),
])
def test_grid_coarser_than_a_tenth_of_the_noise_sd_is_refused(
        tmp_path: Path, table: dict[str, Any], ok: bool) -> None:
    """F3: refused at validation, naming the limit and publication.round as the way to round."""
    data = _spec(tmp_path, table)
    if ok:
        parse_spec(data, tmp_path)
        return
    with pytest.raises(SpecError, match=r"too coarse.*0\.1 x the noise's sd") as info:
        parse_spec(data, tmp_path)
    assert info.value.path == "tables[0].grid"
    assert "publication.round" in str(info.value)


@pytest.mark.parametrize(("mech", "grid", "truth"), [
    (DiscreteGaussian(20.0), 2, 3.0),
    (Gaussian(3e6), 3e5, 3e6),
])
def test_published_sd_is_the_error_sd_at_the_coarsest_allowed_grid(
        mech: Any, grid: float, truth: float) -> None:
    """At grid = sd/10 the stated sd is the estimate's (within 0.05%) and the bias negligible.

    A small seeded simulation: 4000 releases of one cell; the empirical sd of the estimate
    matches the published one to sampling error, and the mean error is within 4 standard errors
    of 0 (before the fix a grid of 10 x sd/2 here gave a bias of about -1 sd, review r36 F3).
    """
    n = 4000
    r = mech.release_table(np.full(n, truth), rng=11, grid=grid)
    err = r.estimate - truth
    stated = float(r.sd[0])
    assert np.std(err, ddof=1) == pytest.approx(stated, rel=4.0 / np.sqrt(2 * n))
    assert abs(float(np.mean(err))) < 4.0 * stated / np.sqrt(n)


def test_global_round_check_uses_the_planned_moe_on_the_tables_grid(tmp_path: Path) -> None:
    """F2: a global round is checked against the plan's moe (68 = 66 + 4/2 here), not 66."""
    data = {**_spec(tmp_path, CNT), "publication": {"round": 6.7}}
    spec = parse_spec(data, tmp_path)  # 6.7 <= 0.1 x 68; refused against 0.1 x 66 before
    assert spec.publication.round == 6.7
    with pytest.raises(SpecError, match="publication.round"):
        parse_spec({**data, "publication": {"round": 6.9}}, tmp_path)


def test_the_planned_errors_at_extreme_totals_warn_nothing() -> None:
    """A planned total of 5e-324 overflows the relative margin: None (infinite), no warning.

    The warning NumPy printed for it named tabdp's install path on an author-mode plan's
    stderr (review r74). The ratio is the same as before where it is finite.
    """
    import warnings

    from tabdp.release._plan import _expected_error

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = _expected_error(Gaussian(2.0), [1e308, 5e-324, 10.0], 0.9)
    assert rows[1]["rel_moe"] is None and rows[1]["moe"] is not None
    assert rows[2]["rel_moe"] == rows[2]["moe"] / 10.0
