"""Regression tests for bugs found in review (each failed before its fix)."""

from __future__ import annotations

import copy
import decimal
import json

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech

# Nearly noiseless (sigma=1e-4: its default grid 1e-6 is the finest float64 holds exactly for the
# totals up to 1e6 released below; docs/exact-rounding.md). Estimates are checked to 100 sigma.
TINY = mech.Gaussian(sigma=1e-4)
KEYS = tabdp.KeySet.from_dict(c=["a", "b"])


def _state(session: tabdp.Session) -> tuple[int, object]:
    return len(session.records), copy.deepcopy(session.rng._gen.bit_generator.state)


# -- aggregation cache reused after an in-place change of a Polars DataFrame ---------------------
@pytest.mark.parametrize("unit", [None, "u"])
def test_in_place_change_of_a_polars_frame_is_not_served_from_the_cache(unit):
    df = pl.DataFrame({"u": [1, 2, 3], "c": ["a", "a", "b"], "x": [1e6, 1.0, 2.0]})
    s = tabdp.Session(unit=unit, seed=0)
    df.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s, name="before")
    df[0, "x"] = 1.0  # in place: same object, other data
    out = df.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s, name="after")
    # the release is of the current data...
    np.testing.assert_allclose(out["x"].to_numpy(), [2.0, 2.0], atol=1e-2)
    # ...and the accounting is of what was released
    pr = s.report().per_record.sort("row" if unit is None else "u")
    np.testing.assert_allclose(pr["rho_after"].to_numpy(), TINY.rho([1.0, 1.0, 2.0]))


def test_count_after_in_place_key_change_is_recounted():
    df = pl.DataFrame({"c": ["a", "a", "b"], "x": [1.0, 1.0, 2.0]})
    s = tabdp.Session(seed=0)
    df.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s)
    df[0, "c"] = "z"  # row 0 now falls outside the key set
    out = df.dp.count(by="c", keys=KEYS, mechanism=TINY, session=s, name="n")
    np.testing.assert_allclose(out["count"].to_numpy(), [1.0, 1.0], atol=1e-2)
    np.testing.assert_allclose(s.report().per_record["rho_n"].to_numpy(),
                               [0.0, float(TINY.rho(1.0)), float(TINY.rho(1.0))])


# -- a LazyFrame that yields other rows on each evaluation ---------------------------------------
def _shifty_lazy_frame() -> pl.LazyFrame:
    """A plan giving all rows when first evaluated (validation) and fewer afterwards."""
    base = pl.DataFrame({"c": ["a", "a", "b", "b"], "x": [1.0, 2.0, 3.0, 4.0]})
    calls = {"n": 0}

    def shrink(df: pl.DataFrame) -> pl.DataFrame:
        calls["n"] += 1
        return df if calls["n"] == 1 else df.head(2)

    return base.lazy().map_batches(shrink, schema=base.schema, predicate_pushdown=False,
                                   projection_pushdown=False, slice_pushdown=False,
                                   streamable=False)


@pytest.mark.parametrize("kind", ["sum", "count"])
def test_lazy_frame_changing_between_passes_is_refused_before_noise(kind):
    s = tabdp.Session(seed=0)
    before = _state(s)
    lf = _shifty_lazy_frame()
    with pytest.raises(tabdp.DataValidationError, match="changed between the passes"):
        if kind == "sum":
            lf.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s)
        else:
            lf.dp.count(by="c", keys=KEYS, mechanism=TINY, session=s)
    assert _state(s) == before


# -- Decimal measures were truncated to integers when placed on a cross-product key set ----------
def test_decimal_sums_are_not_truncated():
    df = pl.DataFrame({"c": ["a", "a", "b"],
                       "x": [decimal.Decimal("1.25"), decimal.Decimal("2.50"),
                             decimal.Decimal("0.75")]},
                      schema={"c": pl.String, "x": pl.Decimal(10, 2)})
    out = df.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=tabdp.Session(seed=0))
    np.testing.assert_allclose(out["x"].to_numpy(), [3.75, 0.75], atol=1e-2)


# -- NaN unit ids (Polars float ids) silently merged distinct units ------------------------------
def test_nan_unit_ids_are_refused_like_nulls():
    df = pl.DataFrame({"u": [1.0, float("nan"), float("nan")], "c": ["a", "a", "a"],
                       "x": [1.0, 100.0, -100.0]})
    s = tabdp.Session(unit="u", seed=0)
    before = _state(s)
    with pytest.raises(tabdp.DataValidationError, match="2 null or NaN id"):
        df.dp.sum("x", by="c", keys=KEYS, mechanism=TINY, session=s)
    assert _state(s) == before


# -- the public summary published the seed (which regenerates the noise) -------------------------
def test_public_summary_does_not_contain_the_seed():
    s = tabdp.Session(seed=987654321)
    pl.DataFrame({"c": ["a"], "x": [1.0]}).dp.sum("x", by="c", keys=KEYS, mechanism=TINY,
                                                  session=s)
    public = json.dumps(s.report().to_dict())
    assert "987654321" not in public
    assert "NOT FOR PRODUCTION" in public
    assert s.report().confidential_summary()["seed"] == 987654321


# -- an output column named like a key column overwrote the key ---------------------------------
@pytest.mark.parametrize("kind,key", [("sum", "x_sd"), ("count", "count"), ("sum", "x_moe")])
def test_output_names_clashing_with_keys_are_refused(kind, key):
    df = pl.DataFrame({key: ["a", "b"], "x": [1.0, 2.0]})
    keys = tabdp.KeySet.from_dict({key: ["a", "b"]})
    s = tabdp.Session(seed=0)
    before = _state(s)
    with pytest.raises(tabdp.InvalidParameterError, match="rename the key"):
        if kind == "sum":
            df.dp.sum("x", by=key, keys=keys, mechanism=TINY, session=s)
        else:
            df.dp.count(by=key, keys=keys, mechanism=TINY, session=s)
    assert _state(s) == before


# -- a NaN loss passed the budget check (NaN > limit is False) -----------------------------------
def test_budget_check_treats_a_nan_loss_as_over_the_budget():
    from tabdp.privacy.ledger import UnitLosses

    s = tabdp.Session(budget=1.0)
    losses = UnitLosses(None, np.array([0.1, np.nan]), np.array([np.inf, np.inf]),
                        np.array([1.0, 2.0]))
    with pytest.raises(tabdp.BudgetExceededError, match="row 1"):
        s.check_budget(losses)
