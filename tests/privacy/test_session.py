"""Sessions, the ledger and reports: per-record losses, composition, budgets, public summary.

Every test taking ``make_frame`` runs once per engine (pandas, Polars, lazy, streaming).
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

import numpy as np
import pandas as pd
import polars as pl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import UsabilityWarning

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _engines import as_engine  # noqa: E402
from _loop import examples  # noqa: E402

# Nearly noiseless releases read the true totals. sigma=1e-6, not smaller: its default grid 1e-8
# is the finest float64 holds exactly for totals up to 1.1e4 (docs/exact-rounding.md).
TINY = mech.Gaussian(sigma=1e-6)
KEYS = tabdp.KeySet.from_dict(c=["a", "b"])


def _pl(frame):
    from _engines import as_polars  # pandas, Polars or PySpark

    return as_polars(frame)


# ---------------------------------------------------------------------------------------------
# Per-record report, one row per record (unit=None)
# ---------------------------------------------------------------------------------------------
ROWS = {"c": ["a", "b", "a", "z", "b"], "x": [3.0, -4.0, 0.0, 9.0, 2.5], "y": [1, 2, 3, 4, 5]}


def test_per_record_rows_sum_of_measures(make_frame, out_type):
    g = mech.Gaussian(sigma=2.0)
    s = tabdp.Session(seed=1)
    make_frame(ROWS).dp.sum(["x", "y"], by="c", keys=KEYS, mechanism=g, session=s,
                            negatives="allow")
    pr = s.report().per_record
    assert type(pr) is out_type  # pandas releases → pandas report
    pr = _pl(pr)
    assert pr.columns == ["row", "rho", "epsilon", "size", "rho_q1_sum"]
    assert pr["row"].to_list() == [0, 1, 2, 3, 4]
    # rho = sum over measures of rho(|value|); the row outside the keys ("z") pays nothing
    expected = [(9 + 1) / 8, (16 + 4) / 8, (0 + 9) / 8, 0.0, (6.25 + 25) / 8]
    np.testing.assert_allclose(pr["rho"].to_numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(pr["rho_q1_sum"].to_numpy(), expected, rtol=1e-12)
    assert pr["size"].to_list() == [3.0, 4.0, 3.0, 0.0, 5.0]
    assert pr["epsilon"].to_list() == [math.inf, math.inf, math.inf, 0.0, math.inf]


def test_per_record_count_and_composition(make_frame):
    g = mech.Gaussian(sigma=2.0)
    lap = mech.Laplace(scale=4.0)
    s = tabdp.Session(seed=2)
    f = make_frame(ROWS)
    f.dp.count(by="c", keys=KEYS, mechanism=g, session=s)
    f.dp.sum("x", by="c", keys=KEYS, mechanism=lap, session=s, name="pay", negatives="allow")
    f.dp.count(by="c", keys=KEYS, mechanism=lap, session=s)
    pr = _pl(s.report().per_record)
    assert pr.columns == ["row", "rho", "epsilon", "size", "rho_q1_count", "rho_pay",
                          "rho_q3_count"]
    inside = np.array([1.0, 1.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(pr["rho_q1_count"].to_numpy(), inside * 1 / 8)
    x = np.abs(np.array(ROWS["x"])) * inside
    np.testing.assert_allclose(pr["rho_pay"].to_numpy(), lap.rho(x))
    np.testing.assert_allclose(pr["rho_q3_count"].to_numpy(), inside * float(lap.rho(1.0)))
    # losses compose: rho adds up; epsilon adds up, inf once a Gaussian touched the record
    np.testing.assert_allclose(pr["rho"].to_numpy(),
                               inside / 8 + lap.rho(x) + inside * float(lap.rho(1.0)))
    assert pr["epsilon"].to_list() == [math.inf, math.inf, math.inf, 0.0, math.inf]
    # pure-only session: epsilon is the sum of the epsilons
    s2 = tabdp.Session(seed=2)
    f.dp.sum("x", by="c", keys=KEYS, mechanism=lap, session=s2, negatives="allow")
    f.dp.count(by="c", keys=KEYS, mechanism=lap, session=s2)
    pr2 = _pl(s2.report().per_record)
    np.testing.assert_allclose(pr2["epsilon"].to_numpy(), x / 4.0 + inside * 0.25)
    np.testing.assert_allclose(pr2["rho"].to_numpy(),
                               lap.rho(x) + inside * float(lap.rho(1.0)))
    assert pr2["size"].to_list() == [3.0, 4.0, 1.0, 0.0, 2.5]


def test_session_with_row_units_refuses_a_frame_of_another_length(make_frame):
    s = tabdp.Session(seed=3)
    make_frame(ROWS).dp.count(by="c", keys=KEYS, mechanism=TINY, session=s)
    shorter = make_frame({k: v[:4] for k, v in ROWS.items()})
    with pytest.raises(tabdp.InvalidParameterError) as info:
        shorter.dp.count(by="c", keys=KEYS, mechanism=TINY, session=s)
    # the message names the problem but no row count (confidential: review R1)
    assert "number of rows" in str(info.value)
    assert "5" not in str(info.value) and "4" not in str(info.value)
    assert len(s.records) == 1
    assert len(_pl(s.report().per_record)) == 5


def test_custom_names(make_frame):
    s = tabdp.Session(seed=4)
    make_frame(ROWS).dp.count(by="c", keys=KEYS, mechanism=TINY, session=s, name="n_2024")
    make_frame(ROWS).dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s, negatives="allow")
    assert _pl(s.report().per_record).columns[-2:] == ["rho_n_2024", "rho_q2_sum"]
    assert [q["name"] for q in s.report().to_dict()["queries"]] == ["n_2024", "q2_sum"]


# ---------------------------------------------------------------------------------------------
# Units spanning several rows and cells (hand-computed)
# ---------------------------------------------------------------------------------------------
UNITS = {
    "estab_id": ["E1", "E1", "E1", "E2", "E2", "E2", "E3", "E3", "E4"],
    "c": ["a", "a", "b", "a", "b", "b", "z", "b", "z"],
    "x": [10.0, 5.0, 7.0, -3.0, 4.0, -4.0, 100.0, 2.0, 1.0],
    "emp": [1, 1, 2, 1, 1, 1, 5, 1, 1],
}


def _by_unit(pr, col):
    pr = _pl(pr)
    return dict(zip(pr["estab_id"].to_list(), pr[col].to_list(), strict=True))


def test_unit_losses_hand_computed(make_frame, out_type):
    g = mech.Gaussian(sigma=2.0)  # rho(D) = D^2 / 8
    lap = mech.Laplace(scale=1.0)  # eps(D) = D
    s = tabdp.Session(unit="estab_id", seed=5)
    f = make_frame(UNITS)
    o = _pl(f.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s, name="truth",
                     negatives="allow"))
    np.testing.assert_allclose(o["x"].to_numpy(), [12.0, 9.0], atol=1e-4)
    f.dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s, name="pay", negatives="allow")
    f.dp.count(by="c", keys=KEYS, mechanism=g, session=s, name="n")
    f.dp.sum(["x", "emp"], by="c", keys=KEYS, mechanism=lap, session=s, name="lap",
             negatives="allow")
    pr = s.report().per_record
    assert type(pr) is out_type
    assert list(_pl(pr).columns) == ["estab_id", "rho", "epsilon", "size", "rho_truth",
                                     "rho_pay", "rho_n", "rho_lap"]
    # E1: a 10+5=15, b 7.  E2: a -3, b 4-4=0.  E3: b 2 (its "z" row is outside).  E4: outside.
    pay = _by_unit(pr, "rho_pay")
    assert pay["E1"] == pytest.approx((15**2 + 7**2) / 8)
    assert pay["E2"] == pytest.approx(9 / 8)
    assert pay["E3"] == pytest.approx(4 / 8)
    # counts: a unit's delta in a cell is its number of rows there
    n = _by_unit(pr, "rho_n")
    assert n["E1"] == pytest.approx((4 + 1) / 8)
    assert n["E2"] == pytest.approx((1 + 4) / 8)
    assert n["E3"] == pytest.approx(1 / 8)
    # two measures, pure mechanism: x deltas and emp deltas (E1 emp: a 2, b 2; E2: a 1, b 2)
    lap_rho = _by_unit(pr, "rho_lap")
    for u, deltas in {"E1": [15, 7, 2, 2], "E2": [3, 0, 1, 2], "E3": [2, 1]}.items():
        assert lap_rho[u] == pytest.approx(float(lap.rho(np.array(deltas, float)).sum()))
    total = _by_unit(pr, "rho")
    for u in ("E1", "E2", "E3"):
        parts = [_by_unit(pr, f"rho_{q}")[u] for q in ("truth", "pay", "n", "lap")]
        assert total[u] == pytest.approx(sum(parts), rel=1e-12)
    size = _by_unit(pr, "size")
    assert (size["E1"], size["E2"], size["E3"]) == (15.0, 3.0, 2.0)  # E2 in b: 4-4
    eps = _by_unit(pr, "epsilon")
    assert eps["E1"] == math.inf
    # a unit whose rows are all outside the key set pays nothing
    assert _by_unit(pr, "rho").get("E4", 0.0) == 0.0
    conf = s.report().confidential_summary()
    assert conf["queries"][0]["rows_outside_keys"] == 2
    assert conf["units"] == len(_pl(pr))


def test_epsilon_of_a_pure_unit_session(make_frame):
    lap = mech.Laplace(scale=2.0)
    s = tabdp.Session(unit="estab_id", seed=6)
    f = make_frame(UNITS)
    f.dp.sum("x", by="c", keys=KEYS, mechanism=lap, session=s, negatives="allow")
    f.dp.count(by="c", keys=KEYS, mechanism=lap, session=s)
    eps = _by_unit(s.report().per_record, "epsilon")
    assert eps["E1"] == pytest.approx((15 + 7) / 2 + (2 + 1) / 2)
    assert eps["E2"] == pytest.approx((3 + 0) / 2 + (1 + 2) / 2)
    assert eps["E3"] == pytest.approx(2 / 2 + 1 / 2)


def test_same_unit_across_two_frames_composes_by_id(make_frame):
    g = mech.Gaussian(sigma=1.0)
    s = tabdp.Session(unit="estab_id", seed=7)
    make_frame(UNITS).dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s, name="q1",
                             negatives="allow")
    other = {"estab_id": ["E3", "E5", "E1"], "c": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]}
    make_frame(other).dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s, name="q2",
                             negatives="allow")
    pr = s.report().per_record
    q1, q2, tot = _by_unit(pr, "rho_q1"), _by_unit(pr, "rho_q2"), _by_unit(pr, "rho")
    assert q1["E1"] == pytest.approx((225 + 49) / 2) and q2["E1"] == pytest.approx(4.5)
    assert tot["E1"] == pytest.approx((225 + 49) / 2 + 4.5)
    assert tot["E3"] == pytest.approx(2.0 + 0.5)
    assert q1["E5"] == 0.0 and tot["E5"] == pytest.approx(2.0)
    assert tot["E2"] == pytest.approx(4.5) and q2["E2"] == 0.0
    assert _by_unit(pr, "size")["E1"] == 15.0


@pytest.mark.parametrize("budget", [None, 1e9])
def test_unit_ids_of_different_dtypes_across_frames(budget, engine, to_engine):
    """Ids are matched by value across frames: Int32 vs Int64, pandas vs Polars strings.

    The first frame of each session is in the engine's form, the second as written (on Spark,
    whose sessions run every release on Spark, both are Spark frames).
    """
    def second(frame):
        return to_engine(frame) if engine == "spark" else frame

    g = mech.Gaussian(sigma=1.0)
    s = tabdp.Session(unit="u", seed=8, budget=budget)
    to_engine(pl.DataFrame({"u": [1, 2], "c": ["a", "b"], "x": [1.0, 2.0]},
                           schema_overrides={"u": pl.Int32})).dp.sum(
        "x", by="c", keys=KEYS, mechanism=g, session=s)
    second(pl.DataFrame({"u": [1, 3], "c": ["a", "b"], "x": [3.0, 2.0]})).dp.sum(
        "x", by="c", keys=KEYS, mechanism=g, session=s)
    pr = _pl(s.report().per_record).sort("u")
    assert pr["u"].to_list() == [1, 2, 3]
    np.testing.assert_allclose(pr["rho"].to_numpy(), [0.5 + 4.5, 2.0, 2.0])
    s2 = tabdp.Session(unit="u", seed=8, budget=budget)
    to_engine(pd.DataFrame({"u": ["p", "q"], "c": ["a", "b"], "x": [1.0, 2.0]})).dp.sum(
        "x", by="c", keys=KEYS, mechanism=g, session=s2)
    second(pl.DataFrame({"u": ["p", "r"], "c": ["a", "b"], "x": [3.0, 2.0]})).dp.sum(
        "x", by="c", keys=KEYS, mechanism=g, session=s2)
    pr2 = _pl(s2.report().per_record).sort("u")
    assert pr2["u"].to_list() == ["p", "q", "r"]
    np.testing.assert_allclose(pr2["rho"].to_numpy(), [0.5 + 4.5, 2.0, 2.0])


# ---------------------------------------------------------------------------------------------
# Public part of the report
# ---------------------------------------------------------------------------------------------
# Transformation mechanisms need non-negative contributions: the workload uses |x|.
DATASET_A = {**UNITS, "x": [abs(v) for v in UNITS["x"]]}
DATASET_B = {
    "estab_id": ["X9", "X9", "Y1", "Y2", "Y3"],
    "c": ["b", "b", "z", "a", "a"],
    "x": [1e6, 3.0, 2.0, 0.5, None],
    "emp": [400, 1, 0, 7, 2],
}


def _run_public_workload(frame, unit):
    s = tabdp.Session(unit=unit, seed=11, budget={1e3: 1e6, 1e7: 1e9})
    kw = dict(by="c", keys=KEYS, session=s)
    # sigma = 0.3: cv floor 0.307 >= 0.3; the warning comes from the parameters (any data)
    with pytest.warns(UsabilityWarning, match=r"dp\.sum: the log transform with sigma = 0\.3"):
        frame.dp.sum(["x", "emp"], mechanism=mech.LogTransform(sigma=0.3, offset=1000.0),
                     nulls="zero", **kw)
    frame.dp.count(mechanism=mech.Gaussian(sigma=2.0), **kw)
    frame.dp.sum("x", mechanism=mech.Laplace(scale=50.0), level=0.95, nulls="drop",
                 name="lap", **kw)
    frame.dp.sum("emp", mechanism=mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0), **kw)
    return s


@pytest.mark.parametrize("unit", ["estab_id", None])
def test_public_summary_does_not_depend_on_the_data(make_frame, unit):
    a = _run_public_workload(make_frame({**DATASET_A, "x": [*DATASET_A["x"][:-1], None]}), unit)
    b = _run_public_workload(make_frame(DATASET_B), unit)
    # the runs differ in what they computed from records...
    ca, cb = a.report().confidential_summary(), b.report().confidential_summary()
    assert ca["queries"][0]["rows_read"] == 9 and cb["queries"][0]["rows_read"] == 5
    assert ca["rho_max"] != cb["rho_max"]
    # ...but not in their public part
    da, db = a.report().to_dict(), b.report().to_dict()
    assert da == db
    text = json.dumps(da, allow_nan=False)
    assert json.loads(text) == da
    for word in ("rows_read", "rows_outside", "rho_max", "missing_values", "E1", "X9"):
        assert word not in text


def test_public_summary_contents(make_frame):
    s = _run_public_workload(make_frame(DATASET_A), "estab_id")
    d = s.report().to_dict()
    assert d["tabdp_version"] == tabdp.__version__
    assert d["session"]["unit"] == "estab_id"
    assert "NOT FOR PRODUCTION" in d["session"]["randomness"]
    assert d["session"]["budget"]["kind"] == "curve"
    assert [q["name"] for q in d["queries"]] == ["q1_sum", "q2_count", "lap", "q4_sum"]
    q1, q2, q3, _ = d["queries"]
    assert q1["mechanism"]["family"] == mech.LogTransform(sigma=0.3, offset=1000.0).family
    assert q1["mechanism"]["params"]["sigma"] == 0.3
    assert q1["mechanism"]["params"]["offset"] == 1000.0
    assert q1["measures"] == ["x", "emp"] and q1["by"] == ["c"]
    assert q1["null_policy"] == "zero" and q3["null_policy"] == "drop"
    assert q1["keys"]["size"] == len(KEYS) and q1["keys"]["columns"] == ["c"]
    assert q1["protects_cell_existence"] is True
    # counts are released with the exact integer counterpart of the Gaussian asked for
    assert q2["mechanism"] == {**q2["mechanism"], "family": "discrete_gaussian",
                               "params": {"sigma": 2.0}, "pure": False}
    assert q3["moe_level"] == 0.95 and q2["moe_level"] == 0.9
    # policy curves are the mechanisms' public formulas on a fixed grid
    g = mech.DiscreteGaussian(sigma=2.0)
    for row in q2["policy_curve"]:
        assert row["rho"] == pytest.approx(float(g.rho(row["delta"])))
        assert row["epsilon"] is None if row["delta"] > 0 else row["epsilon"] == 0.0
    lap = mech.Laplace(scale=50.0)
    for row in q3["policy_curve"]:
        assert row["epsilon"] == pytest.approx(float(lap.epsilon(row["delta"])))
    # total curve: each measure of each query counted once
    tot = {r["delta"]: r["rho"] for r in d["total_policy_curve"]}
    log = mech.LogTransform(sigma=0.3, offset=1000.0)
    epl = mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)
    for delta, rho in tot.items():
        want = 2 * log.rho(delta) + g.rho(delta) + lap.rho(delta) + epl.rho(delta)
        assert rho == pytest.approx(float(want), rel=1e-9)


def test_secure_session_summary():
    s = tabdp.Session()
    assert isinstance(s.rng, tabdp.RandomSource) and s.rng.secure
    assert s.report().to_dict()["session"]["randomness"] == "secure (OS CSPRNG)"
    assert "NOT FOR PRODUCTION" not in json.dumps(s.report().to_dict())
    assert not tabdp.Session(seed=0).rng.secure


# ---------------------------------------------------------------------------------------------
# Budgets
# ---------------------------------------------------------------------------------------------
def _left_out(s):
    return s.report().confidential_summary()["queries"][-1]["units_left_out_by_budget"]


def test_constant_budget_leaves_units_out_of_the_second_query(make_frame):
    """A budget is an individual filter: the query runs, units past their limit are left out."""
    s = tabdp.Session(seed=12, budget=0.8)
    f = make_frame(ROWS)
    first = _pl(f.dp.count(by="c", keys=KEYS, mechanism=mech.Gaussian(sigma=1.0), session=s))
    report_before = _pl(s.report().per_record)
    # every unit inside the key set would reach 1.0 > 0.8: all four are left out, no error
    second = _pl(f.dp.count(by="c", keys=KEYS, mechanism=mech.Gaussian(sigma=1.0), session=s))
    assert second.columns == first.columns and second.height == 2
    assert _pl(s.report().per_record).select("row", "rho").equals(
        report_before.select("row", "rho"))
    assert _pl(s.report().per_record)["rho_q2_count"].to_list() == [0.0] * 5
    assert _left_out(s) == 4
    # its released counts are of the admitted units only (none): the same as an empty frame's
    empty = _pl(make_frame({"c": ["z"], "x": [1.0], "y": [1]}).dp.count(
        by="c", keys=KEYS, mechanism=mech.Gaussian(sigma=1.0), session=tabdp.Session(seed=99)))
    assert empty.height == 2
    # a cheaper query still fits
    f.dp.count(by="c", keys=KEYS, mechanism=mech.Gaussian(sigma=2.0), session=s)
    np.testing.assert_allclose(_pl(s.report().per_record)["rho"].to_numpy(),
                               [0.625, 0.625, 0.625, 0.0, 0.625])
    assert _left_out(s) == 0


def test_units_left_out_contribute_nothing_to_the_totals(make_frame):
    """Rows with |x| = 3 and 4 would pay 9/8 and 2 > 1.0.

    They are dropped from their cells, the rest is released, and the output is exactly that of the
    data without them (same seed, same noise).
    """
    s = tabdp.Session(seed=13, budget=1.0)
    out = _pl(make_frame(ROWS).dp.sum("x", by="c", keys=KEYS,
                                      mechanism=mech.Gaussian(sigma=2.0), session=s,
                                      negatives="allow"))
    pr = _pl(s.report().per_record)
    np.testing.assert_allclose(pr["rho"].to_numpy(), [0.0, 0.0, 0.0, 0.0, 6.25 / 8])
    without = {k: [v for i, v in enumerate(vals) if i not in (0, 1)] for k, vals in ROWS.items()}
    ref = _pl(make_frame(without).dp.sum("x", by="c", keys=KEYS,
                                         mechanism=mech.Gaussian(sigma=2.0),
                                         session=tabdp.Session(seed=13), negatives="allow"))
    assert out.equals(ref)
    assert _left_out(s) == 2


def test_curve_budget_allows_large_units_more(make_frame):
    big = {"c": ["a", "b", "a"], "x": [1e5, 10.0, 500.0]}
    g = mech.Gaussian(sigma=math.sqrt(1e10 / 8))  # rho(1e5) = 4
    curve = {1e3: 0.5, 1e7: 10.0}  # limit at size 1e5: 0.5 + 9.5 / 2 = 5.25
    s = tabdp.Session(seed=14, budget=curve)
    make_frame(big).dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s)
    assert _pl(s.report().per_record)["rho"][0] == pytest.approx(4.0)
    assert _left_out(s) == 0
    # the same query under a constant budget of 0.5 leaves the large row out
    s2 = tabdp.Session(seed=14, budget=0.5)
    make_frame(big).dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s2)
    assert _pl(s2.report().per_record)["rho"][0] == 0.0 and _left_out(s2) == 1
    # the curve still binds small records: a record of size 1e3 may spend only 0.5
    small = {"c": ["a", "b"], "x": [1e3, 1.0]}
    g_small = mech.Gaussian(sigma=1e3 / math.sqrt(1.2))  # rho(1e3) = 0.6 > 0.5
    s3 = tabdp.Session(seed=14, budget=curve)
    make_frame(small).dp.sum("x", by="c", keys=KEYS, mechanism=g_small, session=s3)
    np.testing.assert_allclose(_pl(s3.report().per_record)["rho"].to_numpy(),
                               [0.0, float(g_small.rho(1.0))])
    # and a second query would take the large unit past its curve limit: it is left out
    make_frame(big).dp.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(
        sigma=math.sqrt(1e10 / 4)), session=s, name="again")
    pr = _pl(s.report().per_record)
    assert pr["rho_again"][0] == 0.0 and pr["rho"][0] == pytest.approx(4.0)
    assert len(s.records) == 2


def test_curve_budgets_never_mix_currencies(make_frame):
    """A count charges rows, a sum dollars.

    Each against its own curve and size, so the order of the queries does not change which units are
    left out.
    """
    data = {"c": ["a", "a", "b"], "x": [2e6, 10.0, 3.0]}
    curve = {1.0: 0.5, 1e7: 20.0}
    g = mech.Gaussian(sigma=math.sqrt(1e12 / 2))  # rho(1e6) = 1
    outs = []
    for order in (("sum", "count"), ("count", "sum")):
        s = tabdp.Session(seed=1, budget=curve)
        for q in order:
            if q == "sum":
                make_frame(data).dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s,
                                        name="s")
            else:
                make_frame(data).dp.count(by="c", keys=KEYS, mechanism=mech.Gaussian(1.0),
                                          session=s, name="n")
        pr = _pl(s.report().per_record)
        outs.append((pr["rho_s"].to_list(), pr["rho_n"].to_list()))
    assert outs[0] == outs[1]
    # the count's rho = 0.5 per row fits the rows curve at 1 row; the big row's dollars fit
    assert outs[0][1] == [0.5, 0.5, 0.5]
    assert outs[0][0][0] == pytest.approx(4.0)


def test_per_currency_budget_curves(make_frame):
    b = tabdp.Budget({"x": {1.0: 10.0}, "rows": {1.0: 0.1}})
    s = tabdp.Session(seed=2, budget=b)
    make_frame(ROWS).dp.count(by="c", keys=KEYS, mechanism=mech.Gaussian(1.0), session=s)
    assert _left_out(s) == 4  # 0.5 > 0.1 rows budget
    make_frame(ROWS).dp.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0), session=s,
                            negatives="allow")
    assert _left_out(s) == 0
    with pytest.raises(tabdp.InvalidParameterError, match="no curve for 'y'"):
        make_frame(ROWS).dp.sum("y", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0),
                                session=s, negatives="allow")


def test_unit_budget_across_frames(make_frame):
    s = tabdp.Session(unit="estab_id", seed=15, budget=30.0)
    g = mech.Gaussian(sigma=2.0)
    make_frame(UNITS).dp.count(by="c", keys=KEYS, mechanism=g, session=s)  # E1 pays 0.625
    other = {"estab_id": ["E1", "E9"], "c": ["a", "a"], "x": [15.0, 1.0]}
    make_frame(other).dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s)  # E1: +28.125
    make_frame(other).dp.sum("x", by="c", keys=KEYS, mechanism=g, session=s, name="third")
    pr = _pl(s.report().per_record)
    e1 = pr.filter(pl.col("estab_id") == "E1")
    assert e1["rho"][0] == pytest.approx(28.75) and e1["rho_third"][0] == 0.0
    e9 = pr.filter(pl.col("estab_id") == "E9")
    assert e9["rho_third"][0] == pytest.approx(0.125)
    assert len(s.records) == 3 and _left_out(s) == 1


@pytest.mark.parametrize("bad", [0.0, -1.0, {}, {1e3: 0.0}, {-1.0: 1.0}, "1.0", True,
                                 float("inf")])
def test_bad_budgets(bad):
    with pytest.raises(tabdp.InvalidParameterError):
        tabdp.Session(budget=bad)


def test_budget_curve_values():
    b = tabdp.Budget({1e3: 0.5, 1e7: 10.0})
    np.testing.assert_allclose(b.limit([0.0, 1e3, 1e5, 1e7, 1e9]), [0.5, 0.5, 5.25, 10.0, 10.0])
    assert tabdp.Budget(2.0).limit([0.0, 1e12]).tolist() == [2.0, 2.0]


@pytest.mark.parametrize("kw", [dict(unit=""), dict(unit=3), dict(seed=-1), dict(seed=1.5),
                                dict(seed="1")])
def test_bad_session_arguments(kw):
    with pytest.raises(tabdp.InvalidParameterError):
        tabdp.Session(**kw)


# ---------------------------------------------------------------------------------------------
# One-off sessions, seeds
# ---------------------------------------------------------------------------------------------
def test_one_off_release_and_last_session(make_frame, out_type):
    f = make_frame(ROWS)
    out = f.dp.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(sigma=1.0), negatives="allow")
    s1 = tabdp.last_session()
    assert isinstance(s1, tabdp.Session) and len(s1.records) == 1
    assert s1.rng.secure
    rep = s1.report()
    assert type(rep.per_record) is out_type and len(_pl(rep.per_record)) == 5
    assert rep.to_dict()["queries"][0]["kind"] == "sum"
    assert type(out) is out_type
    # a call with an explicit session does not replace it; the next one-off does
    f.dp.count(by="c", keys=KEYS, mechanism=TINY, session=tabdp.Session(seed=0))
    assert tabdp.last_session() is s1
    f.dp.count(by="c", keys=KEYS, mechanism=TINY)
    s2 = tabdp.last_session()
    assert s2 is not s1 and s2.report().to_dict()["queries"][0]["kind"] == "count"


def _release(frame, seed):
    s = tabdp.Session(seed=seed)
    a = _pl(frame.dp.sum(["x", "y"], by="c", keys=KEYS, mechanism=mech.Gaussian(1.0),
                         session=s, negatives="allow"))
    b = _pl(frame.dp.count(by="c", keys=KEYS, mechanism=mech.Laplace(1.0), session=s))
    return a, b


def test_seeded_sessions_are_reproducible(make_frame):
    f = make_frame(ROWS)
    a1, b1 = _release(f, 42)
    a2, b2 = _release(f, 42)
    assert a1.equals(a2) and b1.equals(b2)
    a3, b3 = _release(f, 43)
    assert not a3["x"].equals(a1["x"]) and not b3["count"].equals(b1["count"])


def test_seeded_noise_is_backend_independent(engine, tmp_path):
    """The same seed gives the same release on every engine as on Polars."""

    def frame(kind):
        return as_engine(pd.DataFrame(ROWS), kind, tmp_path)

    outs = [_pl(frame(k).dp.sum("x", by=["c"], keys=KEYS, mechanism=mech.Gaussian(1.0),
                                session=tabdp.Session(seed=9), negatives="allow"))
            for k in (engine, "polars")]
    assert outs[0].equals(outs[1])


def test_secure_sessions_differ(make_frame):
    f = make_frame(ROWS)
    outs = [_pl(f.dp.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0),
                         session=tabdp.Session(), negatives="allow")) for _ in range(2)]
    assert not outs[0]["x"].equals(outs[1]["x"])


# ---------------------------------------------------------------------------------------------
# Property: recorded losses match the neighbouring-dataset definition
# ---------------------------------------------------------------------------------------------
KEY_DOMAIN = ["a", "b", None]  # a null key is a public cell like any other
DATA_KEYS = ["a", "b", "z", None]  # "z" is outside the key set
PKEYS = tabdp.KeySet.from_dict(c=KEY_DOMAIN)
G3 = mech.Gaussian(sigma=3.0)


@st.composite
def small_frames(draw):
    n = draw(st.integers(1, 9))
    col = lambda s: draw(st.lists(s, min_size=n, max_size=n))  # noqa: E731
    return {"u": col(st.integers(0, 3)), "c": col(st.sampled_from(DATA_KEYS)),
            "x": [float(v) for v in col(st.integers(-40, 40))],
            "y": [float(v) for v in col(st.sampled_from([0, 1, 250, 1000]))]}


def _true_cells(data: dict) -> pl.DataFrame:
    """Cell totals computed independently with plain Polars, in key-set order."""
    df = pl.DataFrame(data, schema={"u": pl.Int64, "c": pl.String, "x": pl.Float64,
                                    "y": pl.Float64})
    agg = df.group_by("c").agg(pl.col("x").sum(), pl.col("y").sum(), pl.len().alias("n"))
    keys = pl.DataFrame({"c": KEY_DOMAIN}, schema={"c": pl.String})
    return (keys.join(agg, on="c", how="left", nulls_equal=True, maintain_order="left")
            .with_columns(pl.col("x", "y").fill_null(0.0),
                          pl.col("n").fill_null(0).cast(pl.Float64)))


@pytest.mark.parametrize("unit", [None, "u"])
def test_recorded_loss_matches_neighbouring_datasets(make_frame, unit, engine):
    """30 random small frames (4 on Spark: about 4 s) and a fixed one.

    The fixed frame: unit 0 in cell "a" and the null cell, unit 1 only outside the key set.
    """

    @settings(max_examples=4 if engine == "spark" else examples(30, 10), deadline=None)
    @given(data=small_frames())
    @example(data={"u": [0, 0, 1, 2, 2], "c": ["a", None, "z", "b", "b"],
                   "x": [-40.0, 5.0, 30.0, 0.0, 7.0], "y": [1000.0, 0.0, 250.0, 1.0, 0.0]})
    def check(data: dict) -> None:
        s = tabdp.Session(unit=unit, seed=0)
        f = make_frame(data, dtypes={"c": pl.String})
        o = _pl(f.dp.sum(["x", "y"], by="c", keys=PKEYS, mechanism=TINY, session=s, name="t",
                         negatives="allow"))
        f.dp.sum(["x", "y"], by="c", keys=PKEYS, mechanism=G3, session=s, name="g",
                 negatives="allow")
        f.dp.count(by="c", keys=PKEYS, mechanism=G3, session=s, name="n")
        full = _true_cells(data)
        np.testing.assert_allclose(o["x"].to_numpy(), full["x"].to_numpy(), atol=1e-4)
        np.testing.assert_allclose(o["y"].to_numpy(), full["y"].to_numpy(), atol=1e-4)
        pr = _pl(s.report().per_record)
        n = len(data["x"])
        if unit is None:
            assert pr["row"].to_list() == list(range(n))
            groups = {i: [i] for i in range(n)}
            rec = {i: pr.row(i, named=True) for i in range(n)}
        else:
            groups = {}
            for i, u in enumerate(data["u"]):
                groups.setdefault(u, []).append(i)
            rec = {r["u"]: r for r in pr.iter_rows(named=True)}
            assert set(rec) <= set(groups)
        zero = {"rho": 0.0, "size": 0.0, "rho_t": 0.0, "rho_g": 0.0, "rho_n": 0.0}
        for who, rows in groups.items():
            neighbour = {k: [v for i, v in enumerate(vals) if i not in rows]
                         for k, vals in data.items()}
            d = full.select("x", "y", "n").to_numpy() - _true_cells(neighbour).select(
                "x", "y", "n").to_numpy()
            d = np.abs(d)
            r = rec.get(who, zero)
            assert d.max() <= r["size"] + 1e-9
            assert r["rho_g"] == pytest.approx(float(G3.rho(d[:, :2]).sum()), rel=1e-9, abs=1e-12)
            assert r["rho_n"] == pytest.approx(float(G3.rho(d[:, 2]).sum()), rel=1e-9, abs=1e-12)
            assert r["rho_t"] == pytest.approx(float(TINY.rho(d[:, :2]).sum()), rel=1e-9,
                                               abs=1e-12)
            assert r["rho"] == pytest.approx(r["rho_t"] + r["rho_g"] + r["rho_n"], rel=1e-12)

    check()


@pytest.mark.parametrize("unit", [None, "u"])
def test_track_cells_gives_the_worst_loss_per_cell(unit, to_engine):
    df = to_engine(pl.DataFrame({"u": [1, 1, 2, 3, 3], "c": ["a", "a", "a", "b", "z"],
                                 "x": [2.0, 3.0, 1.0, 4.0, 100.0]}))
    keys = tabdp.KeySet.from_dict(c=["a", "b", "c"])
    s = tabdp.Session(unit=unit, seed=0)
    s.track_cells = True
    g = mech.Gaussian(sigma=2.0)
    df.dp.sum("x", by="c", keys=keys, mechanism=g, session=s)
    cells = {r["c"]: r for r in s.records[0].cells.to_dicts()}
    # cell z is outside the key set; cell c has no data
    assert set(cells) == {"a", "b"}
    worst_a = 5.0 if unit else 3.0            # unit 1 contributes 2 + 3 in cell a
    assert cells["a"]["worst_size"] == worst_a
    assert cells["a"]["worst_rho"] == pytest.approx(float(g.rho(worst_a)))
    assert cells["a"]["units"] == (2 if unit else 3)
    assert cells["b"]["worst_rho"] == pytest.approx(float(g.rho(4.0)))
    # the worst per cell is the per-record maximum of that query
    assert max(c["worst_rho"] for c in cells.values()) == pytest.approx(
        _pl(s.report().per_record)["rho_q1_sum"].max())
    # off by default
    s2 = tabdp.Session(seed=0)
    df.dp.sum("x", by="c", keys=keys, mechanism=g, session=s2)
    assert s2.records[0].cells is None


def test_per_record_report_with_text_ids_and_no_unit_charged(make_frame):
    """No unit charged yet: an empty per-record report with the unit column's dtype."""
    s = tabdp.Session(unit="u", seed=0)
    make_frame({"u": ["p", "q"], "c": ["z", "z"], "x": [1.0, 2.0]}).dp.sum(
        "x", by="c", keys=KEYS, mechanism=TINY, session=s)
    report = s.report().per_record
    pr = _pl(report)
    assert pr.height == 0 and pr.columns == ["u", "rho", "epsilon", "size", "rho_q1_sum"]
    if isinstance(report, pl.DataFrame):
        assert pr.schema["u"] == pl.String


# Nearly noiseless (sigma=1e-4: its default grid 1e-6 is the finest float64 holds exactly for the
# totals up to 1e6 released below; docs/exact-rounding.md). Estimates are checked to 100 sigma.
NEARLY_NOISELESS = mech.Gaussian(sigma=1e-4)


# -- the public summary published the seed (which regenerates the noise) -------------------------
def test_public_summary_does_not_contain_the_seed():
    s = tabdp.Session(seed=987654321)
    pl.DataFrame({"c": ["a"], "x": [1.0]}).dp.sum("x", by="c", keys=KEYS,
                                                  mechanism=NEARLY_NOISELESS, session=s)
    public = json.dumps(s.report().to_dict())
    assert "987654321" not in public
    assert "NOT FOR PRODUCTION" in public
    assert s.report().confidential_summary()["seed"] == 987654321


def test_joint_currency_names_do_not_depend_on_the_order() -> None:
    """R15-4: a joint currency's name does not depend on the order of its measures.

    A curve for 'y+x' is the curve of 'x+y'; two curves for one joint currency are refused
    (the order of the measures in a joint release used to open a fresh limit).
    """
    from tabdp.exceptions import InvalidParameterError
    from tabdp.privacy.budget import Budget, joint_currency

    assert joint_currency(["y", "x"]) == joint_currency(["x", "y"]) == "x+y"
    b = Budget({"y+x": {1.0: 0.25}, "rows": {1.0: 1.0}})
    assert b.limit([5.0], "x+y").tolist() == [0.25]
    assert sorted(b.to_dict()["curves"]) == ["rows", "x+y"]
    with pytest.raises(InvalidParameterError, match="two curves for the joint currency 'x\\+y'"):
        Budget({"x+y": {1.0: 0.25}, "y+x": {1.0: 0.5}})
