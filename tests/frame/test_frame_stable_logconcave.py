"""The SaS, Logistic, Subbotin and vector-Subbotin mechanisms through ``df.dp`` (3 backends).

Checks that the accessor releases with them, that the per-record report accounts for them —
pure ε for SaS and Logistic, (ε, δ) per cell for Subbotin, once per cell at the ℓ_r norm for the
joint vector release — and that joint and per-measure releases differ as the theory says.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import InvalidParameterError, UsabilityWarning
from tabdp.privacy.conversions import gdp_epsilon

KEYS = tabdp.KeySet.from_dict(c=["a", "b"])
DATA = {"c": ["a", "b", "a", "z", "a"], "pay": [3.0, -4.0, 0.5, 9.0, 2.0],
        "emp": [1.0, 2.0, 6.0, 5.0, 0.0], "u": [1, 2, 1, 3, 4]}


def _pl(frame: Any) -> pl.DataFrame:
    from _engines import as_polars  # pandas, Polars or PySpark

    return as_polars(frame)


def _release(make_frame: Any, mechanism: Any, unit: str | None, delta: float | None = 1e-5
             ) -> tuple[pl.DataFrame, pl.DataFrame, tabdp.Session]:
    s = tabdp.Session(seed=7, unit=unit)
    out = make_frame(DATA).dp.sum(["pay", "emp"], by="c", keys=KEYS, mechanism=mechanism,
                                  session=s, negatives="allow")
    return _pl(out), _pl(s.report(delta=delta).per_record), s


def _contrib(unit: str | None) -> dict[Any, list[tuple[float, float]]]:
    """Per unit: its (pay, emp) contribution vector in each released cell."""
    if unit is None:
        return {0: [(3.0, 1.0)], 1: [(-4.0, 2.0)], 2: [(0.5, 6.0)], 3: [], 4: [(2.0, 0.0)]}
    return {1: [(3.5, 7.0)], 2: [(-4.0, 2.0)], 4: [(2.0, 0.0)]}


@pytest.mark.parametrize("unit", [None, "u"])
def test_symmetric_stable_release_and_pure_accounting(make_frame, unit):
    from tabdp.mechanisms.stable import SymmetricStable

    m = SymmetricStable(alpha=1.5, gamma=2.0)
    # infinite variance while sd is published: the accessor warns (from the parameters alone)
    with pytest.warns(UsabilityWarning, match="no finite variance"):
        out, pr, _ = _release(make_frame, m, unit)
    # interval ends added on purpose (issue 16): exact interval, here estimate -+ moe
    assert out.columns == ["c", "pay", "pay_sd", "pay_moe", "pay_lower", "pay_upper",
                           "emp", "emp_sd", "emp_moe", "emp_lower", "emp_upper"]
    assert np.allclose(out["pay_lower"].to_numpy(), (out["pay"] - out["pay_moe"]).to_numpy())
    assert np.allclose(out["pay_upper"].to_numpy(), (out["pay"] + out["pay_moe"]).to_numpy())
    assert out["pay_sd"].to_list() == [math.inf, math.inf]  # infinite variance for α < 2
    # exact |Z| quantile, widened by half of the public rounding grid
    grid = float(m.default_grid())
    assert out["pay_moe"][0] == pytest.approx(m.noise.interval_halfwidth(0.9) + grid / 2)
    assert np.allclose(out["pay"].to_numpy() / grid, np.round(out["pay"].to_numpy() / grid))
    key = "row" if unit is None else "u"
    got = {k: v for k, v in zip(pr[key].to_list(), pr["epsilon"].to_list(), strict=True)}
    for k, cells in _contrib(unit).items():
        expected = sum(float(m.epsilon(abs(a))) + float(m.epsilon(abs(b))) for a, b in cells)
        assert got[k] == pytest.approx(expected, rel=1e-12, abs=0)
    # pure: the (ε, δ) statement never exceeds the pure ε
    assert np.all(pr["epsilon_delta"].to_numpy() <= pr["epsilon"].to_numpy() + 1e-12)


@pytest.mark.parametrize("unit", [None, "u"])
def test_logistic_is_pure_with_eps_delta_over_scale(make_frame, unit):
    from tabdp.mechanisms.logconcave import Logistic

    m = Logistic(scale=2.0)
    _, pr, _ = _release(make_frame, m, unit)
    key = "row" if unit is None else "u"
    got = dict(zip(pr[key].to_list(), pr["epsilon"].to_list(), strict=True))
    for k, cells in _contrib(unit).items():
        assert got[k] == pytest.approx(sum(abs(a) + abs(b) for a, b in cells) / 2.0)


@pytest.mark.parametrize("unit", [None, "u"])
def test_subbotin_per_measure_is_accounted_per_cell_and_measure(make_frame, unit):
    from tabdp.mechanisms.logconcave import Subbotin

    m = Subbotin(r=4.0, scale=3.0, delta=1e-8)
    out, pr, _ = _release(make_frame, m, unit)
    assert out.height == 2
    key = "row" if unit is None else "u"
    got = dict(zip(pr[key].to_list(), pr["epsilon_delta"].to_list(), strict=True))
    for k, cells in _contrib(unit).items():
        touched = [abs(v) for cell in cells for v in cell if v != 0]
        expected = sum(float(m.approx_epsilon(v, 1e-8)) for v in touched)
        assert got[k] == pytest.approx(expected, rel=1e-12, abs=1e-300)
    assert math.isinf(pr["rho"].max())  # no zCDP claim for r = 4


@pytest.mark.parametrize("unit", [None, "u"])
def test_vector_laplace_charges_once_per_cell_at_the_weighted_l1_norm(make_frame, unit):
    from tabdp.mechanisms.logconcave import Subbotin, VectorSubbotin

    w = {"pay": 2.0, "emp": 1.0}
    joint = VectorSubbotin(r=1.0, scale=3.0, weights=w)
    out, pr, s = _release(make_frame, joint, unit)
    key = "row" if unit is None else "u"
    got = dict(zip(pr[key].to_list(), pr["epsilon"].to_list(), strict=True))
    for k, cells in _contrib(unit).items():
        expected = sum((abs(a) / 2.0 + abs(b)) / 3.0 for a, b in cells)
        assert got[k] == pytest.approx(expected, rel=1e-12, abs=1e-300)
    # each measure carries its own noise scale: scale * weight
    assert out["pay_sd"][0] == pytest.approx(2.0 * out["emp_sd"][0])
    assert out["emp_sd"][0] == pytest.approx(Subbotin(1.0, 3.0).noise.std())
    # the public curve counts the joint release once per cell
    curve = {r["delta"]: r for r in s.report(delta=1e-5).to_dict()["total_policy_curve"]}
    assert curve[10.0]["epsilon"] == pytest.approx(10.0 / 3.0)


@pytest.mark.parametrize("unit", [None, "u"])
def test_vector_gaussian_is_accounted_exactly_at_the_weighted_l2_norm(make_frame, unit):
    from tabdp.mechanisms.logconcave import VectorSubbotin

    joint = VectorSubbotin(r=2.0, scale=4.0, weights={"pay": 0.5})
    _, pr, _ = _release(make_frame, joint, unit, delta=1e-6)
    key = "row" if unit is None else "u"
    got = dict(zip(pr[key].to_list(), pr["epsilon_delta"].to_list(), strict=True))
    for k, cells in _contrib(unit).items():
        mu2 = sum(((a / 0.5) ** 2 + b**2) / 16.0 for a, b in cells)
        assert got[k] == pytest.approx(float(gdp_epsilon(math.sqrt(mu2), 1e-6)), rel=1e-12)


def test_vector_subbotin_refuses_shapes_where_seed_004_thm_9_fails():
    from tabdp.mechanisms.logconcave import VectorSubbotin

    # for r not in {1, 2} the loss depends on the direction of the contribution vector, not
    # only on its l_r norm (MATH.md §4.2 Thm 9 does not hold; see docs)
    for r in (1.5, 3.0, 4.0):
        with pytest.raises(InvalidParameterError):
            VectorSubbotin(r=r, scale=1.0, delta=1e-9)


def test_vector_subbotin_weights_must_name_released_measures(make_frame):
    from tabdp.mechanisms.logconcave import VectorSubbotin

    f = make_frame({"c": ["a"], "pay": [1.0]})
    m = VectorSubbotin(r=2.0, scale=1.0, weights={"payrol": 1000.0})
    with pytest.raises(InvalidParameterError, match="payrol"):
        f.dp.sum("pay", by="c", keys=KEYS, mechanism=m, session=tabdp.Session(seed=0))


def test_vector_subbotin_r2_is_gaussian_dp_and_composes_exactly(make_frame):
    from tabdp.mechanisms.logconcave import VectorSubbotin

    f = make_frame({"c": ["a"], "x": [3.0], "y": [4.0]})
    s = tabdp.Session(seed=2)
    f.dp.sum(["x", "y"], by="c", keys=KEYS, mechanism=VectorSubbotin(r=2.0, scale=5.0),
             session=s)
    pr = _pl(s.report(delta=1e-6).per_record)
    # ‖(3,4)‖_2 = 5 = scale: one Gaussian shift of 1 sd
    assert pr["rho"][0] == pytest.approx(0.5)
    assert pr["epsilon_delta"][0] == pytest.approx(float(gdp_epsilon(1.0, 1e-6)), rel=1e-12)


def test_accessor_grid_rounds_estimates_to_the_public_grid(make_frame):
    s = tabdp.Session(seed=9)
    f = make_frame(DATA)
    # grids of at most a tenth of the noise's sd (coarser ones are refused: test_api_grid)
    out = _pl(f.dp.sum(["pay", "emp"], by="c", keys=KEYS, mechanism=mech.Laplace(100.0),
                       session=s, grid={"pay": 10.0}, negatives="allow"))
    assert np.all(np.mod(out["pay"].to_numpy(), 10.0) == 0.0)
    default = float(mech.Laplace(100.0).default_grid())
    emp = out["emp"].to_numpy() / default
    assert np.allclose(emp, np.round(emp))
    cnt = _pl(f.dp.count(by="c", keys=KEYS, mechanism=mech.DiscreteGaussian(60.0), session=s,
                         grid=5))
    assert np.all(np.mod(cnt["count"].to_numpy(), 5.0) == 0.0)
    assert len(s.records) == 2


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), "1", True, {"payroll": 1.0}])
def test_accessor_grid_is_validated_before_anything_is_recorded(make_frame, bad):
    s = tabdp.Session(seed=9)
    with pytest.raises(InvalidParameterError, match="grid"):
        make_frame(DATA).dp.sum("pay", by="c", keys=KEYS, mechanism=mech.Laplace(1.0),
                                session=s, grid=bad)
    assert s.records == []


def test_median_accepts_a_public_grid(make_frame):
    s = tabdp.Session(seed=3)
    out = _pl(make_frame(DATA).dp.median("emp", by="c", keys=KEYS, bounds=(0.0, 100.0),
                                         epsilon=1.0, session=s, grid=0.5))
    assert np.all(np.mod(out["emp_median"].to_numpy(), 0.5) == 0.0)
    with pytest.raises(InvalidParameterError, match="grid"):
        make_frame(DATA).dp.median("emp", by="c", keys=KEYS, bounds=(0.0, 100.0),
                                   epsilon=1.0, session=s, grid=-1.0)
    assert len(s.records) == 1
