"""The consistent tables' rounding of the finest cells: unbiased, and tight along each block.

`_block_round` rounds the finest cells systematically down each column (one code of the
classification with fewer codes, read down the other classification's leaves in tree order),
with one uniform per column. Checked here: each cell is rounded up with probability equal to
its fractional part (binomial tests, p <= 1e-6, with the power to reject a rounding that is
off); every contiguous range of a column is off by less than one step whatever the uniform;
a margin's rounding variance is the sum over its ranges of ``{M}(1 - {M})`` (``M`` a range's
fractional mass), never above independent rounding's ``sum f(1 - f)``; and its average over the
fractional parts is the ``grid²/6`` per range that `_round_variance` publishes.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy.stats import binomtest, chi2

from tabdp.hierarchy.consistent import Product, _block_round, _round_variance

P_REJECT = 1e-6


def _product() -> Product:
    geo = pl.DataFrame({"state": ["s1"] * 4 + ["s2"] * 3 + ["s3"] * 5,
                        "county": [f"k{i:02d}" for i in range(12)]})
    keys = geo.select("county").join(pl.DataFrame({"ind": ["a", "b", "c"]}), how="cross")
    keys = keys.filter(~((pl.col("county") == "k05") & (pl.col("ind") == "b")))  # one absent
    return Product.build([("county", "ind"), ("state", "ind"), ("state",), ("ind",), ()], keys,
                         {"geo": geo})


def _draws(scaled: np.ndarray, present: np.ndarray, k: int, seed: int) -> np.ndarray:
    u = np.random.default_rng(seed).random((k, scaled.shape[1]))
    return np.stack([_block_round(scaled, u[i], present) for i in range(k)])


def test_blocks_are_the_classification_with_fewer_codes() -> None:
    prod = _product()
    assert prod.present.shape == (12, 3) and int(prod.present.sum()) == 35


def test_each_cell_is_rounded_up_with_probability_its_fraction() -> None:
    prod = _product()
    rng = np.random.default_rng(11)
    scaled = rng.normal(0.0, 20.0, prod.present.shape)
    k = 40_000
    ints = _draws(scaled, prod.present, k, 12)
    low = np.floor(scaled)
    assert np.all((ints == low) | (ints == low + 1) | ~prod.present)
    assert np.all(ints[:, ~prod.present] == 0)
    ups = (ints - low).sum(axis=0)
    frac = scaled - low
    worst = min(binomtest(int(ups[i, j]), k, float(frac[i, j])).pvalue
                for i, j in zip(*np.nonzero(prod.present), strict=True))
    assert worst > P_REJECT
    # power: the same draws reject a rounding up with probability 30% off the fraction
    off = np.clip(frac * 1.3, 1e-3, 1 - 1e-3)
    rejected = min(binomtest(int(ups[i, j]), k, float(off[i, j])).pvalue
                   for i, j in zip(*np.nonzero(prod.present), strict=True))
    assert rejected < P_REJECT


def test_every_range_of_a_column_is_off_by_less_than_one() -> None:
    prod = _product()
    rng = np.random.default_rng(5)
    scaled = np.where(prod.present, rng.uniform(-50, 50, prod.present.shape), 0.0)
    for u in (*np.linspace(0.0, 1.0, 11)[:-1], *rng.random(30)):
        ints = _block_round(scaled, np.full(3, u), prod.present)
        for j in range(3):
            err = np.concatenate([[0.0], np.cumsum(ints[:, j] - scaled[:, j])])
            # every range i..k: err[k] - err[i]
            spread = err[:, None] - err[None, :]
            assert np.abs(spread).max() < 1.0


def test_margin_variance_is_the_sum_over_ranges_and_at_most_independent() -> None:
    prod = _product()
    rng = np.random.default_rng(21)
    scaled = np.where(prod.present, rng.uniform(0, 30, prod.present.shape), 0.0)
    k = 40_000
    ints = _draws(scaled, prod.present, k, 22).astype(np.float64)
    frac = np.where(prod.present, scaled - np.floor(scaled), 0.0)
    for lv in [("state", "ind"), ("state",), ("ind",), ()]:
        a, b = prod.pair(lv)
        err = np.stack([prod.aggregate(lv, ints[i] - scaled) for i in range(k)])
        ranges = prod.aggregate(("state", "ind") if "state" in lv else ("ind",), frac) \
            if lv else prod.aggregate(("ind",), frac)
        mass = ranges - np.floor(ranges)
        exact = mass * (1 - mass)
        # sum the ranges' variances into the level's cells
        if lv == ("state",):
            exact = exact.sum(axis=1, keepdims=True)
        elif lv == ():
            exact = exact.sum(axis=1, keepdims=True)
        exact = exact.reshape(err.shape[1:])
        independent = prod.aggregate(lv, frac * (1 - frac)).reshape(err.shape[1:])
        assert np.all(exact <= independent + 1e-12)
        emp = err.var(axis=0)
        # the sample variance of k draws: (k - 1) s² / σ² ~ chi² (k - 1) (the errors are
        # bounded, and their law is close to two-point; a loose two-sided check at p 1e-6)
        lo = chi2.ppf(P_REJECT / 2, k - 1) / (k - 1)
        hi = chi2.isf(P_REJECT / 2, k - 1) / (k - 1)
        ok = exact > 0.01
        ratio = emp[ok] / exact[ok]
        assert np.all((ratio > lo * 0.9) & (ratio < hi * 1.1)), (lv, ratio)
        # power: independent rounding's variance is rejected where it differs by 30%
        far = ok & (independent > 1.3 * exact)
        if far.any():
            assert np.any(emp[far] / independent[far] < lo * 0.9), lv
    # published: grid²/6 per range below the cell (ranges with a present cell)
    assert _round_variance(prod, *prod.pair(()), 1.0).item() == pytest.approx(3 / 6)
    assert _round_variance(prod, *prod.pair(("state",)), 2.0).ravel().tolist() == \
        pytest.approx([3 * 4 / 6] * 3)
    rv = _round_variance(prod, *prod.pair(("county", "ind")), 1.0)
    assert rv.ravel().tolist() == pytest.approx((prod.present / 6.0).ravel().tolist())


def test_published_variance_is_the_average_over_fractions() -> None:
    """Over draws of the fractional parts (the noise's), a range's {M}(1 - {M}) averages 1/6."""
    rng = np.random.default_rng(3)
    prod = _product()
    k = 20_000
    vals = []
    for _ in range(k):
        frac = rng.random(prod.present.shape) * prod.present
        m = frac[:, 0].sum()  # one column, the whole nation's range of it
        vals.append((m - np.floor(m)) * (1 - (m - np.floor(m))))
    mean, sd = float(np.mean(vals)), float(np.std(vals)) / np.sqrt(k)
    assert abs(mean - 1 / 6) < 5.0 * sd
