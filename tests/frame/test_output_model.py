"""One output model (issue 18): wide and long forms, cv and flag, key and estimate dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import UsabilityWarning
from tabdp.frame._output import coefficient_of_variation, long_to_wide

KEYS = tabdp.KeySet.from_dict({"county": ["c1", "c2", "c3"]})
DATA = {"county": ["c1", "c1", "c2", "c9"], "payroll": [100.0, 50.0, 7.5, 3.0],
        "emp": [3, 2, -1, 4]}
LONG = ["county", "measure", "estimate", "sd", "moe", "lower", "upper", "cv", "flag"]


def _pl(out):
    from _engines import as_polars  # pandas, Polars or PySpark

    return as_polars(out)


def test_long_and_wide_hold_the_same_numbers(make_frame):
    """Long and wide forms: same numbers, cv and flag from the public values."""
    frame = make_frame(DATA)
    args = dict(by="county", keys=KEYS, mechanism=mech.Gaussian(sigma=20.0), negatives="allow")
    wide = _pl(frame.dp.sum(["payroll", "emp"], session=tabdp.Session(seed=3), cv=True, **args))
    long = _pl(frame.dp.sum(["payroll", "emp"], session=tabdp.Session(seed=3), form="long",
                            **args))
    assert long.columns == LONG
    assert wide.columns == ["county", *[f"{m}{s}" for m in ("payroll", "emp") for s in
                                        ("", "_sd", "_moe", "_lower", "_upper", "_cv", "_flag")]]
    assert long["measure"].to_list() == ["payroll"] * 3 + ["emp"] * 3
    for m in ("payroll", "emp"):
        part = long.filter(pl.col("measure") == m)
        for c in ("sd", "moe", "lower", "upper", "cv", "flag"):
            assert part[c].to_list() == wide[f"{m}_{c}"].to_list()
        np.testing.assert_array_equal(part["estimate"].to_numpy(), wide[m].to_numpy())
        # cv = sd / |estimate| from the public values; flag C at cv >= 0.3, N when negative
        est = wide[m].cast(pl.Float64).to_numpy()
        cv = 20.0 / np.abs(est)
        np.testing.assert_allclose(wide[f"{m}_cv"].to_numpy(), cv, rtol=1e-15)
        want = [("C" if c >= 0.3 else "") + ("N" if e < 0 else "")
                for c, e in zip(cv, est, strict=True)]
        assert wide[f"{m}_flag"].to_list() == want
    # the CLI's long -> wide reshaping gives the accessor's wide columns back
    assert long_to_wide(long, ["county"]).columns == wide.columns


def test_default_wide_columns_unchanged_and_cv_flag_of_infinite_sd():
    """Default wide columns are unchanged; cv is null and flag X where sd is infinite."""
    df = pl.DataFrame({"county": ["c1"], "x": [1.0]})
    out = df.dp.sum("x", by="county", keys=KEYS, mechanism=mech.Gaussian(sigma=1.0),
                    session=tabdp.Session(seed=0))
    assert out.columns == ["county", "x", "x_sd", "x_moe", "x_lower", "x_upper"]
    np.testing.assert_array_equal(coefficient_of_variation([0.0, 0.0, 2.0], [1.0, 0.0, np.inf]),
                                  [np.inf, 0.0, np.nan])
    cauchy = mech.SymmetricStable(alpha=1.5, gamma=1.0)
    with pytest.warns(UsabilityWarning, match="no finite variance"):
        out = df.dp.sum("x", by="county", keys=KEYS, mechanism=cauchy, form="long",
                        session=tabdp.Session(seed=0))
    assert out["cv"].null_count() == 3 and all("X" in f for f in out["flag"].to_list())


def test_counts_are_integers_unless_the_grid_is_not(make_frame):
    """Counts are Int64 on a whole-number grid, Float64 on a finer one."""
    frame = make_frame(DATA)
    out = _pl(frame.dp.count(by="county", keys=KEYS, session=tabdp.Session(seed=1)))
    assert out.schema["count"] == pl.Int64 and out.schema["count_sd"] == pl.Float64
    out = _pl(frame.dp.count(by="county", keys=KEYS, mechanism=mech.Gaussian(5.0), grid=0.5,
                             session=tabdp.Session(seed=1)))
    assert out.schema["count"] == pl.Float64
    # a continuous mechanism without a grid: a whole-number grid by default
    out = _pl(frame.dp.count(by="county", keys=KEYS, mechanism=mech.Subbotin(r=1.0, scale=1.0),
                             session=tabdp.Session(seed=1), form="long"))
    assert out.schema["estimate"] == pl.Int64


def test_integer_measures_stay_integer(make_frame):
    """Integer measures get a whole-number default grid and Int64 estimates."""
    frame = make_frame(DATA)
    g = mech.Gaussian(sigma=5.0)
    assert g.default_grid() == 0.1  # the float default the integer measure no longer gets
    out = _pl(frame.dp.sum(["payroll", "emp"], by="county", keys=KEYS, mechanism=g,
                           session=tabdp.Session(seed=2), negatives="allow"))
    assert out.schema["emp"] == pl.Int64 and out.schema["payroll"] == pl.Float64
    # moe: z·σ plus half the grid step of 1 (not of 0.1)
    np.testing.assert_allclose(out["emp_moe"].to_numpy(), 1.6448536269514722 * 5.0 + 0.5,
                               rtol=1e-9)
    s = tabdp.Session(seed=2)
    frame.dp.sum("emp", by="county", keys=KEYS, mechanism=g, session=s, negatives="allow")
    assert s.records[-1].grid["emp"] in (1.0, "1", "1.0") or "1" in str(s.records[-1].grid)
    # an explicit grid is kept
    out = _pl(frame.dp.sum("emp", by="county", keys=KEYS, mechanism=g, grid=0.1,
                           session=tabdp.Session(seed=2), negatives="allow"))
    assert out.schema["emp"] == pl.Float64
    # long form mixing an integer and a float measure: Float64 estimates
    out = _pl(frame.dp.sum(["payroll", "emp"], by="county", keys=KEYS, mechanism=g,
                           form="long", session=tabdp.Session(seed=2), negatives="allow"))
    assert out.schema["estimate"] == pl.Float64


def test_key_dtypes_of_the_input_are_kept():
    """Key columns keep the input dtypes: categorical, Enum, Categorical, Int32.

    A categorical's (Enum's) categories are the key set's values in its order: the input's
    may have been taken from the data (their order too), and the key set is the public domain.
    """
    ks = tabdp.KeySet.from_dict(county=["c1", "c2", "c3"])
    pdf = pd.DataFrame({"county": pd.Categorical(["c1", "c2"], categories=["c2", "c1", "c3"]),
                        "x": [1.0, 2.0]})
    out = pdf.dp.sum("x", by="county", keys=ks, mechanism=mech.Gaussian(1.0),
                     session=tabdp.Session(seed=0))
    assert isinstance(out["county"].dtype, pd.CategoricalDtype)
    assert out["county"].cat.categories.tolist() == ["c1", "c2", "c3"]
    assert out["county"].tolist() == ["c1", "c2", "c3"]
    # a key outside the input's categories is among them (the key set is public)
    ks4 = tabdp.KeySet.from_dict(county=["c1", "c2", "c3", "c4"])
    out = pdf.dp.count(by="county", keys=ks4, session=tabdp.Session(seed=0), form="long")
    assert out["county"].cat.categories.tolist() == ["c1", "c2", "c3", "c4"]
    assert out["estimate"].dtype == np.int64
    # an ordered categorical stays ordered, in the key set's order
    ordered = pdf.assign(county=pdf["county"].cat.as_ordered())
    out = ordered.dp.sum("x", by="county", keys=tabdp.KeySet.from_dict(county=["c3", "c1", "c2"]),
                         mechanism=mech.Gaussian(1.0), session=tabdp.Session(seed=0))
    assert out["county"].cat.ordered and out["county"].cat.categories.tolist() == [
        "c3", "c1", "c2"]

    enum = pl.Enum(["c3", "c2", "c1"])
    pdf_pl = pl.DataFrame({"county": ["c1", "c2"], "x": [1.0, 2.0]},
                          schema={"county": enum, "x": pl.Float64})
    for frame in (pdf_pl, pdf_pl.lazy()):
        out = frame.dp.sum("x", by="county", keys=ks, mechanism=mech.Gaussian(1.0),
                           session=tabdp.Session(seed=0))
        assert out.schema["county"] == pl.Enum(["c1", "c2", "c3"])
        assert out["county"].to_list() == ["c1", "c2", "c3"]
    # a Categorical comes back as the key set's Enum (its codes would tell the order in
    # which strings entered the process-wide category map)
    cat = pdf_pl.with_columns(pl.col("county").cast(pl.String).cast(pl.Categorical))
    out = cat.dp.count(by="county", keys=ks, session=tabdp.Session(seed=0))
    assert out.schema["county"] == pl.Enum(["c1", "c2", "c3"])

    ki = tabdp.KeySet.from_dict(county=[6001, 6003])
    for frame in (pl.DataFrame({"county": [6001]}, schema={"county": pl.Int32}),
                  pd.DataFrame({"county": np.array([6001], dtype=np.int32)})):
        out = _pl(frame.dp.count(by="county", keys=ki, session=tabdp.Session(seed=0)))
        assert out.schema["county"] == pl.Int32 and out["county"].to_list() == [6001, 6003]
    # key values that do not fit the input's dtype keep the key set's dtype
    big = tabdp.KeySet.from_dict(county=[6001, 2**40])
    out = pl.DataFrame({"county": [6001]}, schema={"county": pl.Int32}).dp.count(
        by="county", keys=big, session=tabdp.Session(seed=0))
    assert out.schema["county"] == pl.Int64


# origin: review r77
@pytest.mark.parametrize("dtype", ["int64", "Int64", "uint64", "category"])
def test_pandas_integer_keys_beside_a_null_key_stay_exact(dtype):
    """A null key next to integer keys above 2**53: the pandas output publishes each key as itself.

    The output went through pandas' default conversion, which turns an integer column holding a
    null into float64: the key 2**53 + 1 was published as 2**53, next to the cell of 2**53 (two
    rows with one label; the estimates were right). Now such a column is a nullable integer.
    """
    big = 2**53
    pdf = pd.DataFrame({"c": pd.Series([big + 1, big, big + 1]).astype(dtype),
                        "x": [1.0, 2.0, 4.0]})
    keys = tabdp.KeySet.from_dict(c=[big + 1, big, None])
    out = pdf.dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(1e-4),
                     session=tabdp.Session(seed=0))
    assert out["c"].iloc[:2].tolist() == [big + 1, big]
    assert pd.isna(out["c"].iloc[2])
    np.testing.assert_allclose(out["x"].to_numpy(), [5.0, 2.0, 0.0], atol=1e-2)
    if dtype != "category":
        assert str(out["c"].dtype) == ("UInt64" if dtype == "uint64" else "Int64")


def test_quantile_long_form():
    """Medians and quantiles offer the long form and cv/flag columns too."""
    df = pl.DataFrame({"county": ["c1"] * 5, "pay": [1.0, 2.0, 3.0, 4.0, 5.0]})
    out = df.dp.median("pay", by="county", keys=KEYS, bounds=(0.0, 10.0), epsilon=1.0,
                       form="long", session=tabdp.Session(seed=0))
    assert out.columns == LONG and out["measure"].unique().to_list() == ["pay_median"]
    out = df.dp.quantile("pay", 0.9, by="county", keys=KEYS, bounds=(0.0, 10.0), epsilon=1.0,
                         cv=True, session=tabdp.Session(seed=0))
    assert out.columns[-2:] == ["pay_q90_cv", "pay_q90_flag"]


def test_form_and_name_errors():
    """A bad form or a key named like an output column is refused (no data read)."""
    df = pl.DataFrame({"measure": ["c1"], "x": [1.0]})
    ks = tabdp.KeySet.from_dict(measure=["c1"])
    with pytest.raises(tabdp.InvalidParameterError, match="form must be one of"):
        df.dp.sum("x", by="measure", keys=ks, mechanism=mech.Gaussian(1.0), form="tall")
    with pytest.raises(tabdp.InvalidParameterError, match="output column of the long form"):
        df.dp.sum("x", by="measure", keys=ks, mechanism=mech.Gaussian(1.0), form="long")
    df2 = pl.DataFrame({"x_cv": ["c1"], "x": [1.0]})
    with pytest.raises(tabdp.InvalidParameterError, match="x_cv"):
        df2.dp.sum("x", by="x_cv", keys=tabdp.KeySet.from_dict(x_cv=["c1"]),
                   mechanism=mech.Gaussian(1.0), cv=True)
    # the long form has no x_sd column, but the release computes one: the engine's check
    df3 = pl.DataFrame({"x_sd": ["c1"], "x": [1.0]})
    with pytest.raises(tabdp.InvalidParameterError,
                       match=r"of this sum \(outputs: \['x', 'x_sd', .*\]\); the key would be "
                             r"overwritten in the result\.\nHint: rename the key column"):
        df3.dp.sum("x", by="x_sd", keys=tabdp.KeySet.from_dict(x_sd=["c1"]),
                   mechanism=mech.Gaussian(1.0), form="long")


def test_negatives_allowed_are_counted_in_the_confidential_audit(make_frame):
    """Negative values under the allow rule are counted in the confidential audit."""
    s = tabdp.Session(seed=4)
    make_frame(DATA).dp.sum("emp", by="county", keys=KEYS, mechanism=mech.Gaussian(1.0),
                            session=s, negatives="allow")
    assert s.records[-1].confidential["negative_values_allow:emp"] == 1


def test_wide_integer_dtypes_stay_float():
    """Int128 / UInt64 sums may pass the Int64 range: Float64 estimates (decided by dtype)."""
    for dt in (pl.Int128, pl.UInt64):
        df = pl.DataFrame({"county": ["c1"], "x": pl.Series([5], dtype=dt)})
        out = df.dp.sum("x", by="county", keys=KEYS, mechanism=mech.Gaussian(5.0),
                        session=tabdp.Session(seed=0))
        assert out.schema["x"] == pl.Float64
    df = pl.DataFrame({"county": ["c1"], "x": pl.Series([5], dtype=pl.Int32)})
    out = df.dp.sum("x", by="county", keys=KEYS, mechanism=mech.Gaussian(5.0),
                    session=tabdp.Session(seed=0))
    assert out.schema["x"] == pl.Int64


def test_key_categories_come_from_the_key_set_in_every_mode():
    """An Enum / categorical key's output categories are the key set's values, in every mode.

    The input's categories may have been taken from the data (review r86: in curator mode one
    record outside the key set added a category to the published table).
    """
    ks = tabdp.KeySet.from_dict(county=["c1", "c2"])
    enum = pl.Enum(["c9", "c2", "c1", "c7"])   # c9, c7: values only the data would reveal
    df = pl.DataFrame({"county": ["c1", "c9"], "x": [1.0, 2.0]},
                      schema={"county": enum, "x": pl.Float64})
    pdf = df.to_pandas()
    assert pdf["county"].cat.categories.tolist() == ["c9", "c2", "c1", "c7"]
    for frame in (df, pdf):
        s = tabdp.Session(seed=0, mode="author", data=frame)
        out = frame.dp.sum("x", by="county", keys=ks, mechanism=mech.Gaussian(1.0),
                           session=s, nulls="zero", negatives="allow")
        if isinstance(out, pd.DataFrame):
            assert out["county"].cat.categories.tolist() == ["c1", "c2"]
        else:
            assert out.schema["county"] == pl.Enum(["c1", "c2"])
        # curator mode too: the input's categories (c9, c7 only in the data) are not shown
        out = frame.dp.sum("x", by="county", keys=ks, mechanism=mech.Gaussian(1.0),
                           session=tabdp.Session(seed=0), negatives="allow")
        cats = (out["county"].cat.categories.tolist() if isinstance(out, pd.DataFrame)
                else out.schema["county"].categories.to_list())
        assert cats == ["c1", "c2"]


@pytest.mark.parametrize("lib", ["polars", "pandas"])
def test_one_record_outside_the_key_set_adds_no_category(lib: str) -> None:
    """Neighbouring inputs whose categories were taken from the data: the same output dtype."""
    ks = tabdp.KeySet.from_dict(county=["c1", "c2"])
    outs = []
    for rows in (["c1", "c2"], ["c1", "c2", "q"]):
        df = pl.DataFrame({"county": rows, "x": [1.0] * len(rows)})
        df = df.with_columns(pl.col("county").cast(pl.Enum(sorted(set(rows)))))
        frame: Any = df.to_pandas() if lib == "pandas" else df
        out = frame.dp.sum("x", by="county", keys=ks, mechanism=mech.Gaussian(1.0),
                           session=tabdp.Session(seed=0))
        outs.append(out["county"].dtype if lib == "pandas" else out.schema["county"])
    assert outs[0] == outs[1]


def test_int64_estimate_beyond_the_range_is_clamped_and_flagged():
    """Review r36 F4: an Int64 estimate outside the Int64 range stays Int64, clamped, flag L.

    It was null without a flag (the pandas column silently became float64) while lower, upper,
    moe and cv stayed numbers. The dtype follows the curator's declaration only.
    """
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    top = 2**63 - 1024

    def run(emp: list[int], form: str = "wide") -> pd.DataFrame:
        cur = tabdp.Curator(seed=1)
        cur.add("d", pd.DataFrame({"id": [1, 2, 3], "c": ["a", "a", "b"], "emp": emp}),
                schema={"id": "Int64", "c": "String", "emp": "Int64"}, unit="id")
        return cur.author_session("d").sum("emp", by="c", keys=keys,
                                           mechanism=mech.Laplace(scale=1.0), nulls="zero",
                                           negatives="allow", cv=True, form=form)

    small, big = run([5, 7, 3]), run([5, 2**63 - 1, 3])   # a: 2**63 + 4, past Int64
    assert str(small["emp"].dtype) == str(big["emp"].dtype) == "int64"
    assert big["emp"].tolist()[0] == top and big["emp_flag"].tolist()[0].endswith("L")
    assert big["emp_upper"].iloc[0] > top and big["emp"].iloc[1] == small["emp"].iloc[1]
    assert "L" not in "".join(small["emp_flag"]) and "L" not in big["emp_flag"].iloc[1]
    long = run([5, 2**63 - 1, 3], form="long")
    assert str(long["estimate"].dtype) == "int64" and long["estimate"].iloc[0] == top
    assert long["flag"].iloc[0].endswith("L")
    # below the range too; a NaN is null, flagged L
    from tabdp.frame._output import Measure, assemble

    m = Measure("x", [-1e19, float("nan"), 4.0], [1.0] * 3, [1.6] * 3, [-1e19, 0.0, 2.4],
                [-1e19, 0.0, 5.6], integral=True)
    out = assemble(pl.DataFrame({"k": ["a", "b", "c"]}), [m], cv=True)
    assert out.schema["x"] == pl.Int64 and out["x"].to_list() == [-top, None, 4]
    assert out["x_flag"].to_list() == ["NL", "L", ""]
