"""Frame layer: ``df.dp.sum`` / ``df.dp.count`` over pandas, Polars and Polars lazy; key sets.

Every test taking ``make_frame`` runs once per backend (see ``conftest.py``).
"""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist

import numpy as np
import pandas as pd
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import UsabilityWarning

# Noise far below the totals: estimates read the true totals. (sigma=1e-7, not smaller: its default
# grid 1e-9 is the finest float64 can hold exactly for totals up to 1000; see exact-rounding.md.)
TINY = mech.Gaussian(sigma=1e-7)
TINY_HALF_GRID = 0.5 * TINY.default_grid()
Z90 = 1.6448536269514722  # standard normal 0.95 quantile
Z95 = 1.959963984540054

KEYS = tabdp.KeySet.from_dict({"county": ["c1", "c2", "c3"], "naics": ["11", "21"]})
DATA = {
    "county": ["c1", "c1", "c2", "c3", "c9", "c1"],
    "naics": ["11", "11", "21", "11", "11", "99"],
    "payroll": [100.0, 50.0, 7.5, 1000.0, 999.0, 1.0],
    "emp": [3, 2, 1, 10, 99, 1],
}
# True totals per key, in key-set order: (c1,11) (c1,21) (c2,11) (c2,21) (c3,11) (c3,21).
PAYROLL = [150.0, 0.0, 0.0, 7.5, 1000.0, 0.0]
EMP = [5.0, 0.0, 0.0, 1.0, 10.0, 0.0]
COUNT = [2.0, 0.0, 0.0, 1.0, 1.0, 0.0]


def key_rows(ks: tabdp.KeySet) -> list[tuple]:
    return ks.to_polars().rows()


# ---------------------------------------------------------------------------------------------
# Output schema, key coverage, exact totals
# ---------------------------------------------------------------------------------------------
def test_sum_schema_order_and_true_totals(make_frame, out_type, to_pl):
    s = tabdp.Session(seed=1)
    out = make_frame(DATA).dp.sum(["payroll", "emp"], by=["county", "naics"], keys=KEYS,
                                  mechanism=TINY, session=s)
    assert type(out) is out_type
    o = to_pl(out)
    # interval ends added on purpose (issue 16)
    assert o.columns == ["county", "naics", "payroll", "payroll_sd", "payroll_moe",
                         "payroll_lower", "payroll_upper", "emp", "emp_sd", "emp_moe",
                         "emp_lower", "emp_upper"]
    # every key exactly once, in key-set order, empty cells included
    assert o.select("county", "naics").rows() == key_rows(KEYS)
    np.testing.assert_allclose(o["payroll"].to_numpy(), PAYROLL, atol=1e-6)
    np.testing.assert_allclose(o["emp"].to_numpy(), EMP, atol=1e-6)
    # an integer measure stays integer: its default grid is 1 (issue 18), a float one keeps
    # the mechanism's default grid
    for m, dtype, half_grid in (("payroll", pl.Float64, TINY_HALF_GRID), ("emp", pl.Int64, 0.5)):
        assert o[m].dtype == dtype
        np.testing.assert_allclose(o[f"{m}_sd"].to_numpy(), 1e-7, rtol=1e-12)
        np.testing.assert_allclose(o[f"{m}_moe"].to_numpy(), Z90 * 1e-7 + half_grid,
                                   rtol=1e-7)
        # additive noise: the exact interval is estimate -+ moe
        np.testing.assert_array_equal(o[f"{m}_lower"].to_numpy(),
                                      (o[m] - o[f"{m}_moe"]).to_numpy())
        np.testing.assert_array_equal(o[f"{m}_upper"].to_numpy(),
                                      (o[m] + o[f"{m}_moe"]).to_numpy())
    # empty cells: 0 + noise rounded to the grid (tiny; noise was added, so not all exactly 0)
    empty = o.filter(pl.Series(np.array(PAYROLL) == 0.0))
    assert (empty["payroll"].abs() < 1e-5).all()
    assert (empty["payroll"] != 0.0).any()


def test_rows_outside_keys_are_dropped_and_counted(make_frame, to_pl):
    s = tabdp.Session(seed=2)
    make_frame(DATA).dp.sum("payroll", by=["county", "naics"], keys=KEYS, mechanism=TINY,
                            session=s)
    conf = s.report().confidential_summary()["queries"][0]
    assert conf["rows_outside_keys"] == 2
    assert conf["cells_with_data_outside_keys"] == 2
    assert conf["rows_read"] == 6
    assert conf["rows_in_released_cells"] == 4
    # rows outside the key set cost nothing
    pr = to_pl(s.report().per_record)
    assert pr["rho"].to_list()[4:] == [0.0, 0.0]
    assert pr["size"].to_list()[4:] == [0.0, 0.0]


@pytest.mark.parametrize("unit,budget", [(None, None), ("u", 100.0)])
def test_a_row_dropped_by_a_rule_outside_the_key_set_is_counted_once(make_frame, unit,
                                                                      budget):
    """A row a rule drops is counted by the rule only, never also as outside the key set.

    Before: a sum with ``nulls="drop"`` counted a row with a null measure and keys outside the
    key set both in ``missing_values_drop`` and in ``rows_outside_keys`` (and its keys in
    ``cells_with_data_outside_keys``), so the counts added up to more than the rows read; a
    median counted it once. Every engine, row and unit mode, with and without a budget (the
    engines' filtered and unfiltered paths).
    """
    data = {"u": [1, 1, 2, 3, 3, 4, 5, 6, 7],
            "c": ["a", "a", "b", "z", "z", "a", "z", "y", "w"],
            "x": [1.0, None, 2.0, 3.0, None, 4.0, None, None, -5.0]}
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    s = tabdp.Session(seed=1, unit=unit, budget=budget)
    frame = make_frame(data)
    frame.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s,
                 nulls="drop", negatives="drop", name="s")
    frame.dp.count(by="c", keys=keys, mechanism=mech.Gaussian(1.0), session=s, name="n")
    frame.dp.median("x", by="c", keys=keys, bounds=(-10.0, 10.0), epsilon=1.0, session=s,
                    nulls="drop", name="m")
    q = {r["name"]: r for r in s.report().confidential_summary()["queries"]}
    got = {n: (r["rows_read"], r["rows_outside_keys"], r.get("cells_with_data_outside_keys"),
               r["rows_in_released_cells"], r.get("missing_values_drop:x"),
               r.get("negative_values_drop:x")) for n, r in q.items()}
    # the sum: z's null rows, y's null row and w's negative row are dropped by the rules only
    assert got == {"s": (9, 1, 1, 3, 4, 1), "n": (9, 5, 3, 4, None, None),
                   "m": (9, 2, None, 3, 4, None)}
    for r in got.values():  # each row read is counted once
        assert r[0] == r[1] + r[3] + (r[4] or 0) + (r[5] or 0)


def test_count_schema_and_true_counts(make_frame, out_type, to_pl):
    s = tabdp.Session(seed=3)
    out = make_frame(DATA).dp.count(by=["county", "naics"], keys=KEYS, mechanism=TINY,
                                    session=s)
    assert type(out) is out_type
    o = to_pl(out)
    assert o.columns == ["county", "naics", "count", "count_sd", "count_moe", "count_lower",
                         "count_upper"]  # interval ends: on purpose (issue 16)
    np.testing.assert_array_equal(o["count_upper"].to_numpy(),
                                  (o["count"] + o["count_moe"]).to_numpy())
    assert o.select("county", "naics").rows() == key_rows(KEYS)
    np.testing.assert_allclose(o["count"].to_numpy(), COUNT, atol=1e-6)
    assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 2


def test_single_key_column_as_string_and_key_set_order_kept(make_frame, to_pl):
    ks = tabdp.KeySet.from_dict(county=["c3", "zz", "c1"])  # unusual order, absent key "zz"
    out = make_frame(DATA).dp.sum("payroll", by="county", keys=ks, mechanism=TINY,
                                  session=tabdp.Session(seed=0))
    o = to_pl(out)
    assert o["county"].to_list() == ["c3", "zz", "c1"]
    np.testing.assert_allclose(o["payroll"].to_numpy(), [1000.0, 0.0, 151.0], atol=1e-6)


def test_key_set_with_no_data_at_all(make_frame, to_pl):
    ks = tabdp.KeySet.from_dict(county=["x", "y"])
    s = tabdp.Session(seed=0)
    o = to_pl(make_frame(DATA).dp.count(by="county", keys=ks, mechanism=TINY, session=s))
    assert o["county"].to_list() == ["x", "y"]
    np.testing.assert_allclose(o["count"].to_numpy(), [0.0, 0.0], atol=1e-6)
    assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 6
    assert to_pl(s.report().per_record)["rho"].to_list() == [0.0] * 6


# ---------------------------------------------------------------------------------------------
# sd and moe
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("level, z", [(0.9, Z90), (0.95, Z95)])
def test_gaussian_sd_and_exact_moe(make_frame, to_pl, level, z):
    o = to_pl(make_frame(DATA).dp.sum("payroll", by=["county", "naics"], keys=KEYS,
                                      mechanism=mech.Gaussian(sigma=2.5), level=level,
                                      session=tabdp.Session(seed=4)))
    np.testing.assert_allclose(o["payroll_sd"].to_numpy(), 2.5, rtol=1e-12)
    # exact quantile plus half the default grid step (0.01 for sd 2.5)
    np.testing.assert_allclose(o["payroll_moe"].to_numpy(), z * 2.5 + 0.005, rtol=1e-7)


def test_laplace_sd_and_moe(make_frame, to_pl):
    # a non-integer grid keeps the continuous Laplace law for a count
    o = to_pl(make_frame(DATA).dp.count(by=["county", "naics"], keys=KEYS,
                                        mechanism=mech.Laplace(scale=3.0), grid=0.01,
                                        session=tabdp.Session(seed=5)))
    np.testing.assert_allclose(o["count_sd"].to_numpy(), 3.0 * math.sqrt(2.0), rtol=1e-12)
    # exact quantile plus half the default grid step (0.01 for sd 4.24)
    np.testing.assert_allclose(o["count_moe"].to_numpy(), 3.0 * math.log(10.0) + 0.005,
                               rtol=1e-12)


@pytest.mark.parametrize("mechanism, sd", [(mech.Gaussian(sigma=5.0), 5.0),
                                           (mech.Laplace(scale=2.0), 2.0 * math.sqrt(2.0))])
def test_noise_has_the_stated_sd(make_frame, to_pl, mechanism, sd):
    n = 4000
    ks = tabdp.KeySet.from_dict(cell=list(range(n)))
    data = {"cell": list(range(0, n, 2)), "x": [100.0] * (n // 2)}
    o = to_pl(make_frame(data).dp.sum("x", by="cell", keys=ks, mechanism=mechanism,
                                      session=tabdp.Session(seed=6)))
    truth = np.where(np.arange(n) % 2 == 0, 100.0, 0.0)
    noise = o["x"].to_numpy() - truth
    assert abs(noise.mean()) < 4 * sd / math.sqrt(n)
    assert noise.std() == pytest.approx(sd, rel=0.06)
    np.testing.assert_allclose(o["x_sd"].to_numpy(), sd, rtol=1e-12)
    # coverage of the 90% margin of error
    cover = np.mean(np.abs(noise) <= o["x_moe"].to_numpy())
    assert cover == pytest.approx(0.9, abs=0.025)


def test_transformation_mechanism_plugin_sd(make_frame, to_pl):
    m = mech.LogTransform(sigma=0.3, offset=1000.0)
    with pytest.warns(UsabilityWarning, match=r"floor sqrt\(exp\(sigma\^2\) - 1\) = 0.307"):
        o = to_pl(make_frame(DATA).dp.sum("payroll", by=["county", "naics"], keys=KEYS,
                                          mechanism=m, session=tabdp.Session(seed=7)))
    assert o.columns == ["county", "naics", "payroll", "payroll_sd", "payroll_moe",
                         "payroll_lower", "payroll_upper"]  # ends: on purpose (issue 16)
    # the exact interval of the transformation, f^-1(v -+ h) - a around the noisy transformed
    # value v, h = z*sigma + grid/2: asymmetric (longer above), moe its half-width
    est, lo, hi = (o[c].to_numpy() for c in ("payroll", "payroll_lower", "payroll_upper"))
    assert np.all((lo < est) & (est < hi)) and np.all(hi - est > est - lo)
    np.testing.assert_allclose(o["payroll_moe"].to_numpy(), (hi - lo) / 2, rtol=1e-12)
    z = float(NormalDist().inv_cdf(0.95))
    step = m.default_grid()  # public grid of the noisy transformed value (0.001)
    np.testing.assert_allclose(np.log(hi + 1000.0) - np.log(lo + 1000.0),
                               2 * z * 0.3 + float(step), rtol=1e-9)
    assert o.height == len(KEYS)
    # sd is the plug-in at the estimate: it must equal the mechanism's exact sd there
    est = o["payroll"].to_numpy()
    np.testing.assert_allclose(o["payroll_sd"].to_numpy(),
                               m.sd_at(np.maximum(est, 0.0)), rtol=0.5)
    assert (o["payroll_sd"] > 0).all() and (o["payroll_moe"] > 0).all()


# ---------------------------------------------------------------------------------------------
# KeySet
# ---------------------------------------------------------------------------------------------
def test_keyset_from_dict_cross_product_dict_and_kwargs():
    a = tabdp.KeySet.from_dict({"s": ["01", "02"], "n": ["11", "21", "23"]})
    b = tabdp.KeySet.from_dict(s=["01", "02"], n=["11", "21", "23"])
    c = tabdp.KeySet.from_dict({"s": ["01", "02"]}, n=["11", "21", "23"])
    assert a == b == c
    assert len(a) == 6 and a.columns == ["s", "n"]
    assert key_rows(a) == [("01", "11"), ("01", "21"), ("01", "23"),
                           ("02", "11"), ("02", "21"), ("02", "23")]
    # domains are deduplicated, order kept
    d = tabdp.KeySet.from_dict(x=[3, 1, 3, 2, 1])
    assert key_rows(d) == [(3,), (1,), (2,)]


@pytest.mark.parametrize("bad", [
    lambda: tabdp.KeySet.from_dict(),
    lambda: tabdp.KeySet.from_dict({}),
    lambda: tabdp.KeySet.from_dict(a="abc"),
    lambda: tabdp.KeySet.from_dict(a=5),
    lambda: tabdp.KeySet.from_dict({"a": [1]}, a=[2]),
    lambda: tabdp.KeySet.from_dict(a=[]),
], ids=["none", "empty-dict", "string-domain", "scalar-domain", "twice", "empty-domain"])
def test_keyset_from_dict_errors(bad):
    with pytest.raises(tabdp.InvalidParameterError) as info:
        bad()
    assert isinstance(info.value, ValueError)


def test_keyset_from_frame_dedups(to_engine):
    data = {"s": ["01", "01", "02", "01"], "c": ["001", "001", "003", "005"], "junk": [1, 2, 3, 4]}
    frame = to_engine(pl.DataFrame(data))
    ks = tabdp.KeySet.from_frame(frame, columns=["s", "c"])
    assert ks.columns == ["s", "c"]
    assert key_rows(ks) == [("01", "001"), ("02", "003"), ("01", "005")]
    assert not ks.from_data
    full = tabdp.KeySet.from_frame(frame)
    assert full.columns == ["s", "c", "junk"] and len(full) == 4
    with pytest.raises(tabdp.ColumnNotFoundError) as info:
        tabdp.KeySet.from_frame(frame, columns=["s", "county"])
    assert "county" in str(info.value) and isinstance(info.value, KeyError)


def test_keyset_from_frame_rejects_non_frames():
    with pytest.raises(tabdp.UnsupportedBackendError):
        tabdp.KeySet.from_frame({"a": [1, 2]})


def test_keyset_product_and_project():
    a = tabdp.KeySet.from_dict(s=["01", "02"])
    b = tabdp.KeySet.from_frame(pl.DataFrame({"n": ["11", "21"], "m": ["x", "y"]}))
    p = a * b
    assert p.columns == ["s", "n", "m"]
    assert key_rows(p) == [("01", "11", "x"), ("01", "21", "y"),
                           ("02", "11", "x"), ("02", "21", "y")]
    with pytest.raises(tabdp.InvalidParameterError) as info:
        p * tabdp.KeySet.from_dict(n=["11"])
    assert "n" in str(info.value)
    proj = p.project(["n", "m"])
    assert proj.columns == ["n", "m"] and key_rows(proj) == [("11", "x"), ("21", "y")]
    assert key_rows(p.project(["s"])) == [("01",), ("02",)]
    with pytest.raises(tabdp.ColumnNotFoundError):
        p.project(["zz"])


def test_keyset_from_data_warns_and_is_flagged(make_frame, to_pl):
    frame = make_frame(DATA)
    with pytest.warns(tabdp.PrivacyWarning):
        ks = tabdp.KeySet.from_data(frame, ["county", "naics"])
    assert ks.from_data and len(ks) == 5  # distinct combinations present in the data
    s = tabdp.Session(seed=8)
    o = to_pl(frame.dp.sum("payroll", by=["county", "naics"], keys=ks, mechanism=TINY, session=s))
    assert o.height == 5
    assert sorted(o.select("county", "naics").rows()) == sorted(
        {(c, n) for c, n in zip(DATA["county"], DATA["naics"], strict=True)})
    assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 0
    frame.dp.count(by=["county", "naics"], keys=KEYS, mechanism=TINY, session=s)
    q = s.report().to_dict()["queries"]
    assert q[0]["protects_cell_existence"] is False
    assert q[0]["keys"]["keys_from_data"] is True
    assert q[1]["protects_cell_existence"] is True
    # a product with a data-derived key set is still flagged
    with pytest.warns(tabdp.PrivacyWarning):
        prod = tabdp.KeySet.from_data(frame, ["county"]) * tabdp.KeySet.from_dict(y=[1])
    assert prod.from_data


# ---------------------------------------------------------------------------------------------
# Key dtype alignment
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [pl.Categorical, pl.String])
def test_string_and_categorical_data_keys_match_string_key_set(make_frame, to_pl, dtype):
    s = tabdp.Session(seed=9)
    frame = make_frame(DATA, dtypes={"county": dtype, "naics": dtype})
    o = to_pl(frame.dp.sum("payroll", by=["county", "naics"], keys=KEYS, mechanism=TINY,
                           session=s))
    assert o.select("county", "naics").rows() == key_rows(KEYS)
    np.testing.assert_allclose(o["payroll"].to_numpy(), PAYROLL, atol=1e-6)
    # per-record accounting of rows outside the key set (needs the same key alignment)
    pr = to_pl(s.report().per_record)
    np.testing.assert_allclose(pr["size"].to_numpy(), [100.0, 50.0, 7.5, 1000.0, 0.0, 0.0])


@pytest.mark.parametrize("dtype", [pl.Int32, pl.Int64])
def test_integer_keys(make_frame, to_pl, dtype):
    ks = tabdp.KeySet.from_dict(county=[6001, 6003, 6005])
    data = {"county": [6001, 6001, 6005, 9999], "x": [1.0, 2.0, 4.0, 8.0]}
    s = tabdp.Session(seed=10)
    o = to_pl(make_frame(data, dtypes={"county": dtype}).dp.sum(
        "x", by="county", keys=ks, mechanism=TINY, session=s))
    assert o["county"].to_list() == [6001, 6003, 6005]
    np.testing.assert_allclose(o["x"].to_numpy(), [3.0, 0.0, 4.0], atol=1e-6)
    assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 1
    np.testing.assert_allclose(to_pl(s.report().per_record)["size"].to_numpy(),
                               [1.0, 2.0, 4.0, 0.0])


@pytest.mark.parametrize("data_keys", [["06037", "abc"], ["06037", "6037"]],
                         ids=["not-numeric", "leading-zero"])
def test_string_keys_that_do_not_convert_to_integer_keys(make_frame, snapshot, data_keys):
    ks = tabdp.KeySet.from_dict(county=[6037, 6001])
    s = tabdp.Session(seed=11)
    before = snapshot(s)
    with pytest.raises(tabdp.ColumnTypeError) as info:
        make_frame({"county": data_keys, "x": [1.0, 2.0]}).dp.sum(
            "x", by="county", keys=ks, mechanism=TINY, session=s)
    assert isinstance(info.value, TypeError)
    assert "county" in str(info.value)
    assert snapshot(s) == before


def test_fractional_float_keys_are_not_truncated_into_integer_cells(make_frame, to_pl):
    """A row keyed 1.5 is not in cell 1.

    It falls outside the key set (a data-free rule: the comparison dtype comes from the schemas;
    refusing would reveal the value).
    """
    ks = tabdp.KeySet.from_dict(c=[1, 2])
    s = tabdp.Session(seed=12)
    o = to_pl(make_frame({"c": [1.5, 2.0], "x": [10.0, 20.0]}).dp.sum(
        "x", by="c", keys=ks, mechanism=TINY, session=s))
    np.testing.assert_allclose(o["x"].to_numpy(), [0.0, 20.0], atol=1e-6)
    assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 1
    np.testing.assert_allclose(to_pl(s.report().per_record)["rho"].to_numpy(),
                               [0.0, float(TINY.rho(20.0))])


def test_integer_valued_float_keys_match_integer_key_set(make_frame, to_pl):
    ks = tabdp.KeySet.from_dict(c=[1, 2])
    o = to_pl(make_frame({"c": [1.0, 2.0, 2.0], "x": [10.0, 20.0, 5.0]}).dp.sum(
        "x", by="c", keys=ks, mechanism=TINY, session=tabdp.Session(seed=0)))
    np.testing.assert_allclose(o["x"].to_numpy(), [10.0, 25.0], atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Bad input: right error class, message with column and count, nothing recorded, no noise
# ---------------------------------------------------------------------------------------------
def _session_with_one_release(frame):
    """A seeded session holding one release (a count) of ``frame``."""
    s = tabdp.Session(seed=13)
    frame.dp.count(by=["county", "naics"], keys=KEYS, mechanism=TINY, session=s)
    return s


BAD_VALUES = {
    "null": [1.0, None, None, 4.0],
    "nan": [1.0, float("nan"), float("nan"), 4.0],
    "null+nan": [1.0, None, float("nan"), 4.0],
    "+inf": [1.0, math.inf, math.inf, 4.0],
    "-inf": [1.0, -math.inf, -math.inf, 4.0],
    "+-inf": [1.0, math.inf, -math.inf, 4.0],
}


# Missing values are refused unless a null policy is chosen; infinities under every policy.
BAD_CASES = [(k, "error") for k in BAD_VALUES] + [
    (k, nulls) for k in BAD_VALUES if "inf" in k for nulls in ("zero", "drop")]


@pytest.mark.parametrize("kind, nulls", BAD_CASES)
def test_bad_measure_values_refused(make_frame, snapshot, kind, nulls):
    frame = make_frame({"county": ["c1", "c1", "c2", "c3"], "naics": ["11"] * 4,
                        "payroll": BAD_VALUES[kind], "emp": [1, 2, 3, 4]})
    s = _session_with_one_release(frame)
    before = snapshot(s)
    with pytest.raises(tabdp.DataValidationError) as info:
        frame.dp.sum(["emp", "payroll"], by=["county", "naics"], keys=KEYS, mechanism=TINY,
                     session=s, nulls=nulls)
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    # the message names the column and the rule, never a count (counts are confidential)
    assert "'payroll'" in msg and " 2 " not in msg
    key = "infinite_values:payroll" if "inf" in kind else "missing_values:payroll"
    assert info.value.confidential[key] == 2
    assert "'emp'" not in msg
    assert ("infinite" in msg) == ("inf" in kind)
    assert snapshot(s) == before
    assert len(s.report().to_dict()["queries"]) == 1


def test_non_numeric_measure(make_frame, snapshot):
    frame = make_frame({**DATA, "payroll": ["1", "2", "3", "4", "5", "6"]})
    s = _session_with_one_release(frame)
    before = snapshot(s)
    with pytest.raises(tabdp.ColumnTypeError) as info:
        frame.dp.sum("payroll", by=["county", "naics"], keys=KEYS, mechanism=TINY, session=s)
    assert isinstance(info.value, TypeError)
    assert "'payroll'" in str(info.value)
    assert snapshot(s) == before


def test_missing_column_with_suggestion(make_frame, snapshot):
    s = _session_with_one_release(make_frame(DATA))
    before = snapshot(s)
    with pytest.raises(tabdp.ColumnNotFoundError) as info:
        make_frame(DATA).dp.sum("payrol", by=["county", "naics"], keys=KEYS, mechanism=TINY,
                                session=s)
    assert isinstance(info.value, KeyError)
    assert "'payrol'" in str(info.value) and "did you mean 'payroll'" in str(info.value)
    with pytest.raises(tabdp.ColumnNotFoundError) as info:
        make_frame(DATA).dp.count(by=["county", "naics_code"],
                                  keys=tabdp.KeySet.from_dict(county=["c1"], naics_code=["11"]),
                                  mechanism=TINY, session=s)
    assert "naics_code" in str(info.value)
    assert snapshot(s) == before


def test_missing_unit_column(make_frame):
    s = tabdp.Session(unit="estab_id", seed=0)
    with pytest.raises(tabdp.ColumnNotFoundError) as info:
        make_frame(DATA).dp.count(by=["county", "naics"], keys=KEYS, mechanism=TINY, session=s)
    assert "estab_id" in str(info.value)
    assert len(s.records) == 0


def test_negative_contributions_with_transformation(make_frame, snapshot, to_pl):
    # sigma 0.25 (was 0.3, whose cv floor 0.307 now triggers a UsabilityWarning; the test is
    # about negative contributions, not the noise level)
    m = mech.LogTransform(sigma=0.25, offset=1000.0)
    # cell (c2,21) totals 5 - 2 = 3 >= 0, but removing the +5 row would leave -2: refused.
    keys = ["c1", "c1", "c2", "c2"], ["11", "11", "21", "21"]
    frame = make_frame({"county": keys[0], "naics": keys[1], "net": [5.0, 2.0, 5.0, -2.0]})
    s = _session_with_one_release(frame)
    before = snapshot(s)
    # a signed measure (negatives='allow'): refused for its negative contribution
    with pytest.raises(tabdp.DataValidationError) as info:
        frame.dp.sum("net", by=["county", "naics"], keys=KEYS, mechanism=m, session=s,
                     negatives="allow")
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert "'net'" in msg and "negative rows" in msg and "1 " not in msg
    assert info.value.confidential == {"negative_contributions:net": 1}
    assert snapshot(s) == before
    # the default (negatives='error'): one reason, the negative value (a negative contribution
    # needs one), the same on every engine
    with pytest.raises(tabdp.DataValidationError) as info:
        frame.dp.sum("net", by=["county", "naics"], keys=KEYS, mechanism=m, session=s)
    msg = str(info.value)
    assert "'net'" in msg and "negative values" in msg and "negative rows" not in msg
    assert info.value.confidential == {"negative_values:net": 1}
    assert snapshot(s) == before
    # with non-negative rows, the release goes through and each row's delta is its value
    # (another frame: a session of its own, since row mode binds a session to its frame's rows)
    ok = make_frame({"county": keys[0], "naics": keys[1], "net": [5.0, 2.0, 5.0, 2.0]})
    s2 = tabdp.Session(seed=3)
    o = to_pl(ok.dp.sum("net", by=["county", "naics"], keys=KEYS, mechanism=m, session=s2))
    assert o.height == len(KEYS)
    pr = to_pl(s2.report().per_record)
    np.testing.assert_allclose(pr["rho_q1_sum"].to_numpy(),
                               m.rho(np.array([5.0, 2.0, 5.0, 2.0])))


def test_negative_unit_contributions_with_transformation(make_frame, snapshot, to_pl):
    m = mech.LogTransform(sigma=0.25, offset=1000.0)  # 0.3 would warn (cv floor 0.307)
    s = tabdp.Session(unit="u", seed=3)
    # unit a: +5 and -2 in one cell (contribution 3, allowed); unit b: -1 (refused)
    frame = make_frame({"u": ["a", "a", "b"], "county": ["c1", "c1", "c1"],
                        "naics": ["11", "11", "11"], "net": [5.0, -2.0, 1.0]})
    out = frame.dp.sum("net", by=["county", "naics"], keys=KEYS, mechanism=m, session=s,
                       negatives="allow")
    assert len(to_pl(out)) == len(KEYS)
    before = snapshot(s)
    bad = make_frame({"u": ["a", "b"], "county": ["c1", "c1"], "naics": ["11", "11"],
                      "net": [5.0, -1.0]})
    with pytest.raises(tabdp.DataValidationError, match="unit-cell contribution") as info:
        bad.dp.sum("net", by=["county", "naics"], keys=KEYS, mechanism=m, session=s,
                   negatives="allow")
    assert info.value.confidential == {"negative_contributions:net": 1}
    assert snapshot(s) == before
    # under the default (negatives='error') unit a's -2 is refused as a negative value
    with pytest.raises(tabdp.DataValidationError, match="negative values") as info:
        frame.dp.sum("net", by=["county", "naics"], keys=KEYS, mechanism=m, session=s)
    assert info.value.confidential == {"negative_values:net": 1}
    assert snapshot(s) == before


def test_null_unit_ids(make_frame, snapshot):
    s = tabdp.Session(unit="u", seed=14)
    make_frame({"u": ["a"], "county": ["c1"], "naics": ["11"], "x": [1.0]}).dp.sum(
        "x", by=["county", "naics"], keys=KEYS, mechanism=TINY, session=s)
    before = snapshot(s)
    frame = make_frame({"u": ["a", None, None, "b"], "county": ["c1"] * 4, "naics": ["11"] * 4,
                        "x": [1.0, 2.0, 3.0, 4.0]})
    with pytest.raises(tabdp.DataValidationError) as info:
        frame.dp.sum("x", by=["county", "naics"], keys=KEYS, mechanism=TINY, session=s)
    msg = str(info.value)
    assert "'u'" in msg and " 2 " not in msg
    assert info.value.confidential == {"null_unit_ids:u": 2}
    assert snapshot(s) == before


@pytest.mark.parametrize("call", [
    dict(by=["county"]),
    dict(by=["county", "naics", "emp"]),
    dict(keys=tabdp.KeySet.from_dict(county=["c1"])),
    dict(keys={"county": ["c1"], "naics": ["11"]}),
    dict(mechanism="gaussian"),
    dict(mechanism=mech.Gaussian),
    dict(level=0.0),
    dict(level=1.0),
    dict(level=1.5),
    dict(level=float("nan")),
    dict(level="90%"),
    dict(nulls="ignore"),
    dict(nulls=None),
    dict(session="new"),
    dict(name="bad name!"),
], ids=["by-short", "by-long", "keys-columns", "keys-dict", "mech-str", "mech-class",
        "level0", "level1", "level1.5", "level-nan", "level-str", "nulls-ignore", "nulls-none",
        "session-str", "name"])
def test_bad_arguments(make_frame, snapshot, call):
    s = _session_with_one_release(make_frame(DATA))
    before = snapshot(s)
    kw = dict(by=["county", "naics"], keys=KEYS, mechanism=TINY, session=s)
    kw.update(call)
    with pytest.raises(tabdp.InvalidParameterError) as info:
        make_frame(DATA).dp.sum("payroll", **kw)
    assert isinstance(info.value, ValueError)
    assert snapshot(s) == before


def test_duplicate_release_name_draws_no_noise(make_frame, snapshot):
    s = tabdp.Session(seed=15)
    make_frame(DATA).dp.count(by=["county", "naics"], keys=KEYS, mechanism=TINY, session=s,
                              name="n")
    before = snapshot(s)
    with pytest.raises(tabdp.InvalidParameterError) as info:
        make_frame(DATA).dp.count(by=["county", "naics"], keys=KEYS, mechanism=TINY,
                                  session=s, name="n")
    assert "'n'" in str(info.value)
    assert snapshot(s) == before


def test_unit_column_cannot_be_key_or_measure(make_frame):
    s = tabdp.Session(unit="county", seed=0)
    with pytest.raises(tabdp.InvalidParameterError):
        make_frame(DATA).dp.sum("payroll", by=["county", "naics"], keys=KEYS, mechanism=TINY,
                                session=s)
    assert len(s.records) == 0


def test_not_a_frame():
    with pytest.raises(tabdp.UnsupportedBackendError):
        tabdp.frame._release.grouped_release(
            {"a": [1]}, kind="count", measures=None, by=["a"],
            keys=tabdp.KeySet.from_dict(a=[1]), mechanism=TINY)


@pytest.mark.parametrize("make", [
    lambda: mech.Gaussian(sigma=0.0),
    lambda: mech.Gaussian(sigma=-1.0),
    lambda: mech.Gaussian(sigma=float("nan")),
    lambda: mech.Gaussian(sigma=float("inf")),
    lambda: mech.Gaussian(sigma="2"),
    lambda: mech.Laplace(scale=0.0),
    lambda: mech.GeneralizedGaussian(sigma=1.0, p=2.0),
    lambda: mech.GeneralizedGaussian(sigma=1.0, p=0.0),
    lambda: mech.ExpPolyLog(sigma=1.0, a=1.0, d=1.0),
    lambda: mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0, p=2.0),
    lambda: mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0, p=0.5),
    lambda: mech.UnitSplitting(threshold=0.0, sigma=1.0),
    lambda: mech.LogTransform(sigma=0.0, offset=1.0),
    lambda: mech.LogTransform(sigma=1.0, offset=-1.0),
    lambda: mech.LogTransform(sigma=1.0, offset=1.0, estimator="mode"),
    lambda: mech.RootTransform(k=2.5, sigma=1.0),
    lambda: mech.RootTransform(k=0, sigma=1.0),
    lambda: mech.RootTransform(k=2, sigma=-1.0),
], ids=["g-sigma0", "g-sigma-neg", "g-nan", "g-inf", "g-str", "lap-0", "gg-p2", "gg-p0",
        "epl-d1", "epl-a-small", "epl-p-half", "us-tau0", "log-sigma0", "log-offset-neg",
        "log-estimator", "root-k2.5-mean", "root-k0", "root-sigma-neg"])
def test_invalid_mechanism_parameters(make):
    with pytest.raises(tabdp.InvalidParameterError) as info:
        make()
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------------------------------------
# Explicit null policies
# ---------------------------------------------------------------------------------------------
NULLY = {
    "county": ["c1", "c1", "c2", "c3", "c1"],
    "naics": ["11", "11", "21", "11", "11"],
    "payroll": [100.0, None, 7.5, float("nan"), 50.0],
    "emp": [3.0, 4.0, 1.0, 10.0, 2.0],
}


def test_nulls_zero(make_frame, to_pl):
    s = tabdp.Session(seed=16)
    g = mech.Gaussian(sigma=2.0)
    o = to_pl(make_frame(NULLY).dp.sum(["payroll", "emp"], by=["county", "naics"], keys=KEYS,
                                       mechanism=TINY, session=s, nulls="zero"))
    np.testing.assert_allclose(o["payroll"].to_numpy(), [150.0, 0, 0, 7.5, 0.0, 0], atol=1e-6)
    np.testing.assert_allclose(o["emp"].to_numpy(), [9.0, 0, 0, 1.0, 10.0, 0], atol=1e-6)
    make_frame(NULLY).dp.sum("payroll", by=["county", "naics"], keys=KEYS, mechanism=g,
                             session=s, nulls="zero")
    pr = to_pl(s.report().per_record)
    assert pr["row"].to_list() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(pr["rho_q2_sum"].to_numpy(),
                               g.rho(np.array([100.0, 0.0, 7.5, 0.0, 50.0])))
    conf = s.report().confidential_summary()["queries"]
    assert conf[0]["missing_values_zero:payroll"] == 2
    assert conf[0]["missing_values_zero:emp"] == 0
    assert s.report().to_dict()["queries"][0]["null_policy"] == "zero"


def test_nulls_drop(make_frame, to_pl):
    s = tabdp.Session(seed=17)
    g = mech.Gaussian(sigma=2.0)
    o = to_pl(make_frame(NULLY).dp.sum(["payroll", "emp"], by=["county", "naics"], keys=KEYS,
                                       mechanism=g, session=s, nulls="drop"))
    assert o.height == len(KEYS)
    # a dropped row loses nothing in this query; other rows keep their position
    pr = to_pl(s.report().per_record)
    assert pr["row"].to_list() == [0, 1, 2, 3, 4]
    expected = g.rho(np.array([100.0, 0.0, 7.5, 0.0, 50.0])) + \
        g.rho(np.array([3.0, 0.0, 1.0, 0.0, 2.0]))
    np.testing.assert_allclose(pr["rho"].to_numpy(), expected)
    assert pr["size"].to_list() == [100.0, 0.0, 7.5, 0.0, 50.0]
    conf = s.report().confidential_summary()["queries"][0]
    assert conf["missing_values_drop:payroll"] == 2
    assert conf["rows_in_released_cells"] == 3
    assert s.report().to_dict()["queries"][0]["null_policy"] == "drop"
    # the totals without the dropped rows
    o2 = to_pl(make_frame(NULLY).dp.sum(["payroll", "emp"], by=["county", "naics"], keys=KEYS,
                                        mechanism=TINY, session=s, nulls="drop"))
    np.testing.assert_allclose(o2["payroll"].to_numpy(), [150.0, 0, 0, 7.5, 0, 0], atol=1e-6)
    np.testing.assert_allclose(o2["emp"].to_numpy(), [5.0, 0, 0, 1.0, 0, 0], atol=1e-6)


def test_nulls_drop_with_rows_outside_keys_and_units(make_frame, to_pl):
    s = tabdp.Session(unit="u", seed=18)
    g = mech.Gaussian(sigma=1.0)
    data = {"u": [1, 1, 2, 2, 3], "county": ["c1", "c1", "c1", "c9", "c2"],
            "naics": ["11", "11", "11", "11", "21"], "x": [4.0, None, 3.0, 100.0, None]}
    o = to_pl(make_frame(data).dp.sum("x", by=["county", "naics"], keys=KEYS, mechanism=TINY,
                                      session=s, nulls="drop"))
    np.testing.assert_allclose(o["x"].to_numpy(), [7.0, 0, 0, 0, 0, 0], atol=1e-6)
    make_frame(data).dp.sum("x", by=["county", "naics"], keys=KEYS, mechanism=g, session=s,
                            nulls="drop", name="g")
    pr = to_pl(s.report().per_record).sort("u")
    rho = dict(zip(pr["u"].to_list(), pr["rho_g"].to_list(), strict=True))
    assert rho[1] == pytest.approx(8.0) and rho[2] == pytest.approx(4.5)
    assert rho.get(3, 0.0) == 0.0


def test_int_measures_and_nullable_ints(backend, to_engine, to_pl):
    """Integer measures are summed exactly; a pandas nullable-int NA is a missing value."""
    ks = tabdp.KeySet.from_dict(c=["a", "b"])
    if backend == "pandas":
        frame = pd.DataFrame({"c": ["a", "a", "b"], "x": pd.array([1, None, 5], dtype="Int64")})
    else:
        frame = to_engine(pl.DataFrame({"c": ["a", "a", "b"], "x": [1, None, 5]}))
    with pytest.raises(tabdp.DataValidationError, match="'x' holds missing values"):
        frame.dp.sum("x", by="c", keys=ks, mechanism=TINY, session=tabdp.Session(seed=0))
    o = to_pl(frame.dp.sum("x", by="c", keys=ks, mechanism=TINY, session=tabdp.Session(seed=0),
                           nulls="zero"))
    np.testing.assert_allclose(o["x"].to_numpy(), [1.0, 5.0], atol=1e-6)


def test_empty_frame(backend, to_engine, to_pl):
    ks = tabdp.KeySet.from_dict(c=["a", "b"])
    if backend == "pandas":
        frame = pd.DataFrame({"c": pd.Series([], dtype="str"), "x": pd.Series([], dtype=float)})
    else:
        frame = to_engine(pl.DataFrame({"c": [], "x": []},
                                       schema={"c": pl.String, "x": pl.Float64}))
    s = tabdp.Session(seed=0)
    o = to_pl(frame.dp.sum("x", by="c", keys=ks, mechanism=TINY, session=s))
    assert o["c"].to_list() == ["a", "b"]
    np.testing.assert_allclose(o["x"].to_numpy(), [0.0, 0.0], atol=1e-6)
    assert len(to_pl(s.report().per_record)) == 0


def test_no_warnings_in_normal_use(make_frame):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_frame(DATA).dp.sum("payroll", by=["county", "naics"], keys=KEYS, mechanism=TINY,
                                session=tabdp.Session(seed=0))


# ---------------------------------------------------------------------------------------------
# Null keys, repeated releases of one frame
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows_outside", [False, True])
def test_null_key_cell_is_released_and_charged(make_frame, to_pl, rows_outside):
    """A key set may list a null cell; the rows released in it must pay for it."""
    ks = tabdp.KeySet.from_dict(c=["a", None])
    g = mech.Gaussian(sigma=1.0)
    data = {"c": ["a", None, "a"], "x": [1.0, 2.0, 4.0]}
    if rows_outside:
        data = {"c": [*data["c"], "zz"], "x": [*data["x"], 8.0]}
    s = tabdp.Session(seed=19)
    o = to_pl(make_frame(data).dp.sum("x", by="c", keys=ks, mechanism=TINY, session=s))
    assert o["c"].to_list() == ["a", None]
    np.testing.assert_allclose(o["x"].to_numpy(), [5.0, 2.0], atol=1e-6)
    make_frame(data).dp.sum("x", by="c", keys=ks, mechanism=g, session=s, name="g")
    pr = to_pl(s.report().per_record)
    expected = [0.5, 2.0, 8.0] + ([0.0] if rows_outside else [])
    np.testing.assert_allclose(pr["rho_g"].to_numpy(), expected)


@pytest.mark.parametrize("unit", [None, "u"])
def test_release_of_the_same_frame_twice_matches_fresh_sessions(make_frame, to_pl, unit):
    data = {"u": [1, 1, 2, 3], "c": ["a", "b", "b", "z"], "x": [5.0, 1.0, 3.0, 2.0]}
    ks = tabdp.KeySet.from_dict(c=["a", "b"])
    frame = make_frame(data)
    g = mech.Gaussian(sigma=1.0)
    shared = tabdp.Session(unit=unit, seed=20)
    frame.dp.sum("x", by="c", keys=ks, mechanism=g, session=shared, name="s")
    o = to_pl(frame.dp.count(by="c", keys=ks, mechanism=TINY, session=shared, name="n"))
    np.testing.assert_allclose(o["count"].to_numpy(), [1.0, 2.0], atol=1e-6)
    fresh = tabdp.Session(unit=unit, seed=20)
    frame.dp.count(by="c", keys=ks, mechanism=TINY, session=fresh, name="n")
    a = to_pl(shared.report().per_record).sort(unit or "row")
    b = to_pl(fresh.report().per_record).sort(unit or "row")
    np.testing.assert_allclose(a["rho_n"].to_numpy(), b["rho_n"].to_numpy())
    assert shared.report().confidential_summary()["queries"][1] == \
        fresh.report().confidential_summary()["queries"][0]


def test_null_policy_of_an_earlier_release_does_not_leak_into_a_later_one(make_frame, to_pl):
    """Releasing one frame with nulls='zero' then nulls='drop' must equal a fresh 'drop'."""
    m = mech.UnitSplitting(threshold=10.0, sigma=10.0)  # charges a unit even at delta 0
    ks = tabdp.KeySet.from_dict(c=["a", "b"])
    frame = make_frame({"u": [1, 1, 2], "c": ["a", "b", "b"], "x": [5.0, None, 3.0]})
    shared = tabdp.Session(unit="u", seed=0)
    frame.dp.sum("x", by="c", keys=ks, mechanism=m, session=shared, nulls="zero", name="z")
    frame.dp.sum("x", by="c", keys=ks, mechanism=m, session=shared, nulls="drop", name="d")
    fresh = tabdp.Session(unit="u", seed=0)
    frame.dp.sum("x", by="c", keys=ks, mechanism=m, session=fresh, nulls="drop", name="d")
    a = to_pl(shared.report().per_record).sort("u")
    b = to_pl(fresh.report().per_record).sort("u")
    np.testing.assert_allclose(a["rho_d"].to_numpy(), b["rho_d"].to_numpy())
    np.testing.assert_allclose(b["rho_d"].to_numpy(), [0.5, 0.5])
    assert shared.report().confidential_summary()["queries"][1]["rows_in_released_cells"] == 2


def test_keyset_projection_of_a_cross_product():
    ks = tabdp.KeySet.from_dict(a=[1, 2], b=["x", "y", "z"], c=[True])
    p = ks.project(["b", "a"])
    assert p.columns == ["b", "a"] and len(p) == 6
    assert set(p.to_polars().rows()) == {(b, a) for a in (1, 2) for b in "xyz"}
    assert not p.from_data


@pytest.mark.parametrize("unit", [None, "u"])
def test_same_frame_with_key_sets_of_different_dtypes(make_frame, to_pl, unit):
    """A later release of the same frame with another key dtype is aligned afresh."""
    frame = make_frame({"u": [1, 2, 3], "c": [1.0, 2.0, 2.0], "x": [1.0, 2.0, 3.0]})
    s = tabdp.Session(unit=unit, seed=21)
    for ks in (tabdp.KeySet.from_dict(c=[1, 2]), tabdp.KeySet.from_dict(c=[1.0, 2.0])):
        o = to_pl(frame.dp.sum("x", by="c", keys=ks, mechanism=TINY, session=s))
        np.testing.assert_allclose(o["x"].to_numpy(), [1.0, 5.0], atol=1e-6)
    # Numbers and text are never converted into each other for keys ('06037' vs 6037).
    with pytest.raises(tabdp.ColumnTypeError, match="does not convert between numbers and text"):
        frame.dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["1.0", "2.0"]),
                     mechanism=TINY, session=s)
    assert len(s.records) == 2


def test_pandas_object_column_of_none_is_read_as_polars_reads_nulls():
    # pl.from_pandas infers String for an object column of None only: a key column of
    # missing values was "String in the data" against an integer key set (refused, with an
    # untrue message), and a measure of missing values was called a String column
    ks = tabdp.KeySet.from_dict(county=[1, 2])
    none = pd.Series([None, None], dtype=object)
    keyed = pd.DataFrame({"county": none, "x": [1.0, 2.0]})
    out = keyed.dp.sum("x", by="county", keys=ks, mechanism=TINY, session=tabdp.Session(seed=1))
    same = pl.DataFrame({"county": [None, None], "x": [1.0, 2.0]}).dp.sum(
        "x", by="county", keys=ks, mechanism=TINY, session=tabdp.Session(seed=1))
    assert out["x"].tolist() == same["x"].to_list()  # no row in any key, as in Polars
    measured = pd.DataFrame({"county": [1, 2], "x": none})
    with pytest.raises(tabdp.ColumnTypeError, match="dtype Null .a column of missing values"):
        measured.dp.sum("x", by="county", keys=ks, mechanism=TINY, session=tabdp.Session(seed=1))
