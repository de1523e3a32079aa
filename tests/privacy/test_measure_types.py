"""Wide and exact measure dtypes (Int128, UInt128, Decimal): totals neither wrap nor truncate.

Clamping is counted confidentially and no error depends on a record's value.
"""

from __future__ import annotations

import decimal
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


POLARS_ENGINES = pytest.mark.parametrize("engine", ["polars", "lazy", "streaming"])


KEY1 = tabdp.KeySet.from_dict(c=["a"])


# -- 4. Exact totals of 128-bit integer measures ------------------------------------------------
@POLARS_ENGINES
def test_int128_measure_total_cannot_wrap(to_engine: Callable[[Any], Any]) -> None:
    big = 2**126
    df = to_engine(pl.DataFrame({"c": ["a", "a"], "x": pl.Series([big, big], dtype=pl.Int128)}))
    s = tabdp.Session(seed=1, mode="author")
    out = df.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s,
                    nulls="zero", negatives="allow")
    # the total of two non-negative values is not negative (it wrapped to -2**127 before):
    # 128-bit integers are clamped to the public bound 2**64 like floats
    assert out["x"][0] > 0
    # and the charged sensitivity is what the total moves when one row is removed
    per = s.report().per_record
    one = to_engine(pl.DataFrame({"c": ["a"], "x": pl.Series([big], dtype=pl.Int128)}))
    out1 = one.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0),
                      session=tabdp.Session(seed=1, mode="author"), nulls="zero", negatives="allow")
    moved = abs(out["x"][0] - out1["x"][0])
    assert moved <= 1.0001 * per["size"].max()


# origin: review R1 (issue 13)
@POLARS_ENGINES
@pytest.mark.skipif(not hasattr(pl, "UInt128"), reason="this Polars has no UInt128")
def test_uint128_measure_no_data_dependent_error_in_author_mode(
        to_engine: Callable[[Any], Any]) -> None:
    # a UInt128 above 2**127 raised a Polars cast error quoting the value (author mode)
    seen = []
    for v in (1, 2**127 + 5):
        df = to_engine(pl.DataFrame({"c": ["a"], "x": pl.Series([v], dtype=pl.UInt128)}))
        s = tabdp.Session(mode="author")
        out = df.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s,
                        nulls="zero", negatives="allow")
        seen.append((out.columns, out.dtypes, out.height))
    assert seen[0] == seen[1]


# origin: review R1 (issue 13)
@POLARS_ENGINES
def test_int128_clamp_counted_confidentially(to_engine: Callable[[Any], Any]) -> None:
    df = to_engine(pl.DataFrame({"c": ["a", "a", "a"],
                                 "x": pl.Series([2**70, -(2**70), 5], dtype=pl.Int128)}))
    s = tabdp.Session(seed=1)
    df.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s, negatives="allow")
    q = s.report().confidential_summary()["queries"][0]
    assert q["values_clamped_to_2^64:x"] == 2
    size = s.report().per_record["size"].to_list()
    assert size[2] == 5.0
    # charged at 2**64 (rounded one ulp up, as every charge above 2**53)
    assert all(2.0**64 <= v <= 2.0**64 * (1 + 1e-15) for v in size[:2])


# Nearly noiseless (sigma=1e-4: its default grid 1e-6 is the finest float64 holds exactly for the
# totals up to 1e6 released below; docs/exact-rounding.md). Estimates are checked to 100 sigma.
TINY = mech.Gaussian(sigma=1e-4)


KEYS = tabdp.KeySet.from_dict(c=["a", "b"])


# -- Decimal measures were truncated to integers when placed on a cross-product key set ----------
@pytest.mark.parametrize("engine", ["polars", "lazy", "streaming"])
def test_decimal_sums_are_not_truncated(to_engine):
    df = pl.DataFrame({"c": ["a", "a", "b"],
                       "x": [decimal.Decimal("1.25"), decimal.Decimal("2.50"),
                             decimal.Decimal("0.75")]},
                      schema={"c": pl.String, "x": pl.Decimal(10, 2)})
    out = to_engine(df).dp.sum("x", by="c", keys=KEYS, mechanism=TINY,
                               session=tabdp.Session(seed=0))
    np.testing.assert_allclose(out["x"].to_numpy(), [3.75, 0.75], atol=1e-2)


# origin: review r77. Polars (and Spark) order NaN above every number, so ``NaN.abs() > 2**64``
# held and a NaN measure value handled by ``nulls="zero"`` / ``"drop"`` was also counted in the
# confidential summary as a value clamped to 2**64 (on Polars and Spark inputs; pandas turns NaN
# into null). Every engine (the ``engine`` fixture; Spark's run is marked ``spark``)
@pytest.mark.parametrize("nulls", ["zero", "drop"])
def test_nan_measure_is_missing_not_clamped(to_engine: Callable[[Any], Any], nulls: str) -> None:
    df = pl.DataFrame({"c": ["a", "a", "b", "b"], "x": [float("nan"), 1.0, 3e20, 2.0]})
    s = tabdp.Session(seed=1)
    to_engine(df).dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s, nulls=nulls)
    q = s.report().confidential_summary()["queries"][0]
    assert q[f"missing_values_{nulls}:x"] == 1
    assert q["values_clamped_to_2^64:x"] == 1  # 3e20 only
