"""Releases at exact totals (issue 13, "Exact totals" and "no data-dependent failures").

The engine hands the mechanisms :class:`tabdp.mechanisms.ExactTotals` (fixed-point totals that
need not be doubles). Every mechanism must release the exact ``round_grid(T + Z)`` (or
``round_grid(f(T + a) + σZ)``, or ``T + Z`` in integers) for the exact T, never for fl(T); and no
release may raise, warn or print anything that depends on the magnitude of the data.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import polars as pl
import pytest

import tabdp
import tabdp.mechanisms as mech
from tabdp.mechanisms import ExactTotals
from tabdp.noise import Laplace as LaplaceNoise
from tabdp.noise.exact import UniformGrid, round_noisy
from tabdp.rng import RandomSource

_TWO63 = 1 << 63


# -- the ideal release, computed independently in high precision -----------------------------------
def _noise_interval(noise: Any, w: int, scale: float, mp: Any) -> tuple[Any, Any]:
    """Bounds on ``scale·Z`` that the cell's 64-bit word ``w`` leaves open (exact quantile)."""
    positive = w >= _TWO63
    j = w & (_TWO63 - 1)
    u_lo = mp.mpf(j) / mp.mpf(2) ** 63
    u_hi = mp.mpf(j + 1) / mp.mpf(2) ** 63
    m_big = noise.rounding.mp_abs_isf(u_lo, mp) if j > 0 else mp.inf    # m decreases in u
    m_small = noise.rounding.mp_abs_isf(u_hi, mp)
    sm = mp.mpf(scale)
    if positive:
        return sm * m_small, sm * m_big
    return -sm * m_big, -sm * m_small


def _mpf(x: Fraction, mp: Any) -> Any:
    return mp.mpf(x.numerator) / x.denominator


def _grid_index(grid: UniformGrid, x: Any, mp: Any) -> int:
    """Index of the grid value nearest the real ``x`` (exact breakpoints; ``x`` off them)."""
    k = int(grid._index(np.array([float(x / grid.step)]))[0])
    while x > _mpf(grid.breakpoint(k), mp):
        k += 1
    while x <= _mpf(grid.breakpoint(k - 1), mp):
        k -= 1
    return k


def _ideal_index(grid: UniformGrid, x_lo: Any, x_hi: Any, mp: Any) -> int | None:
    """Grid index of the rounding of every x in the interval, if it is the same for all."""
    k_lo = _grid_index(grid, x_lo, mp)
    return k_lo if k_lo == _grid_index(grid, x_hi, mp) else None


def _near_breakpoint_totals(noise: Any, words: np.ndarray, grid: UniformGrid, scale: float,
                            f: Callable[[Any, Any, bool], Any], base: int) -> list[int]:
    """Integer totals near ``base`` whose exact and float64 values straddle a grid breakpoint.

    The breakpoint is for the cell's own noise: a release at fl(T) would round wrongly.
    """
    out = []
    with mpmath.workprec(300):
        mp = mpmath.mp
        for w in words.tolist():
            lo, hi = _noise_interval(noise, int(w), scale, mp)
            z = (lo + hi) / 2
            k = _grid_index(grid, f(mp.mpf(base), mp, False) + z, mp)
            b = _mpf(grid.breakpoint(k), mp)                  # a breakpoint near f(base) + z
            t0 = int(mp.floor(f(b - z, mp, True)))              # f(t0) + z < b < f(t0 + 1) + z
            r0 = t0 % 256
            out.append(t0 if r0 >= 129 else t0 + 1 if 1 <= (t0 + 1) % 256 <= 127 else t0)
    return out


def _identity(x: Any, mp: Any, inverse: bool) -> Any:
    return x


@pytest.mark.parametrize("mechanism", [mech.Gaussian(sigma=10 * 2.0**21),
                                       mech.Laplace(scale=10 * 2.0**21)], ids=repr)
def test_additive_release_is_the_ideal_rounding_of_the_exact_total(mechanism: Any) -> None:
    # Totals near 2**60 + 1 (not doubles: ulp(2**60) = 256) placed so that fl(T) + Z and T + Z
    # round differently for the cell's own random bits; g = 2**21 keeps them in the uniform part.
    g, n, seed = 2.0**21, 48, 11
    words = RandomSource(seed=seed).bits(n)
    grid = UniformGrid(g)
    totals = _near_breakpoint_totals(mechanism.noise, words, grid, 1.0, _identity, 2**60 + 1)
    assert sum(t % 256 != 0 for t in totals) >= n - 2          # (almost) none is a double
    exact = mechanism.release_table(ExactTotals(totals), rng=RandomSource(seed=seed), grid=g)
    floats = mechanism.release_table(np.array([float(t) for t in totals]),
                                     rng=RandomSource(seed=seed), grid=g)
    decided = wrong = 0
    with mpmath.workprec(300):
        mp = mpmath.mp
        for i, w in enumerate(words.tolist()):
            lo, hi = _noise_interval(mechanism.noise, int(w), 1.0, mp)
            k = _ideal_index(grid, mp.mpf(totals[i]) + lo, mp.mpf(totals[i]) + hi, mp)
            if k is None:
                continue
            decided += 1
            assert exact.estimate[i] == k * g, i
            wrong += floats.estimate[i] != k * g
    assert decided >= n - 2
    assert wrong >= n // 3            # the float64 totals do round wrongly: the test is sensitive
    # neighbours T + Δ with a tiny Δ = 2**-30 (scale_bits 30): the same ideal rounding
    nb = ExactTotals([(t << 30) + 1 for t in totals], scale_bits=30)
    assert np.array_equal(mechanism.release_table(nb, rng=RandomSource(seed=seed),
                                                  grid=g).estimate, exact.estimate)


def _log(x: Any, mp: Any, inverse: bool) -> Any:
    return mp.exp(x) - 1 if inverse else mp.log(x + 1)


def test_log_transform_release_is_the_ideal_rounding_of_the_exact_total() -> None:
    # ṽ = round(ln(T + 1) + σZ) with ln(T + 1) ≈ 41.6: beyond 2**40 steps, so the grid's
    # relative part (40 bits); totals are placed within 1 of f⁻¹(breakpoint − σZ), closer than
    # fl(T) is to T.
    m = mech.LogTransform(sigma=2.0**-50, offset=1.0, estimator="median")
    g, n, seed = 2.0**-54, 24, 5
    words = RandomSource(seed=seed).bits(n)
    noise = mech.Gaussian(1.0).noise
    grid = UniformGrid(g)
    totals = _near_breakpoint_totals(noise, words, grid, m.sigma, _log, 2**60 + 1)
    r = m.release_table(ExactTotals(totals), rng=RandomSource(seed=seed), grid=g)
    rf = m.release_table(np.array([float(t) for t in totals]), rng=RandomSource(seed=seed),
                         grid=g)
    decided = wrong = 0
    with mpmath.workprec(300):
        mp = mpmath.mp
        for i, w in enumerate(words.tolist()):
            lo, hi = _noise_interval(noise, int(w), m.sigma, mp)
            v = mp.log(mp.mpf(totals[i]) + 1)
            k = _ideal_index(grid, v + lo, v + hi, mp)
            if k is None:
                continue
            decided += 1
            want = m.median_estimate(grid.values(np.array([k])))[0]
            assert r.estimate[i] == want, i
            wrong += rf.estimate[i] != want
    assert decided >= n - 2
    assert wrong >= n // 3


@pytest.mark.parametrize("mechanism", [mech.DiscreteGaussian(3.0), mech.DiscreteLaplace(2.0)],
                         ids=repr)
def test_discrete_release_adds_integer_noise_to_the_exact_total(mechanism: Any) -> None:
    n, seed = 200, 3
    z = mechanism.release_table(ExactTotals([0] * n), rng=RandomSource(seed=seed)).estimate
    for t in (2**60 + 1, 2**100 + 12345, -(2**90) - 7, 5):
        got = mechanism.release_table(ExactTotals([t] * n), rng=RandomSource(seed=seed))
        assert got.estimate.tolist() == [float(t + int(zz)) for zz in z], t   # exact, then fl
        g10 = mechanism.release_table(ExactTotals([t] * n), rng=RandomSource(seed=seed), grid=10)
        assert g10.estimate.tolist() == [float(round(Fraction(t + int(zz), 10)) * 10)
                                         for zz in z]
    # a fractional exact total is rounded half to even before the noise (a public rule)
    half = mechanism.release_table(ExactTotals([5, 7, -5], scale_bits=1), rng=RandomSource(seed=1))
    base = mechanism.release_table(ExactTotals([2, 4, -2]), rng=RandomSource(seed=1))
    assert np.array_equal(half.estimate, base.estimate)


def test_float_sum_distinguisher_no_longer_works() -> None:
    # Issue 13: a record charged ρ = 5e-13 moved the released value by whole ulps. Here T and
    # T' = T + Δ (Δ = 2**-30, σ = Δ/1e-6, so ρ = Δ²/(2σ²) = 5e-13) sit just below a breakpoint
    # b = 2**45 − 16 of the grid 32; fl(T) = b but fl(T') = b − 2**-8.
    g, n = 32.0, 600
    sigma = 2.0**-30 / 1e-6
    m = mech.Gaussian(sigma=sigma)
    assert math.isclose(float(m.rho(2.0**-30)), 5e-13, rel_tol=1e-9)
    b = Fraction(2**45 - 16)
    t1 = b - Fraction(1, 2**9) + Fraction(1, 2**31)
    t2 = t1 - Fraction(1, 2**30)
    s = 31
    e1 = ExactTotals([int(t1 * 2**s)] * n, scale_bits=s)
    e2 = ExactTotals([int(t2 * 2**s)] * n, scale_bits=s)
    assert e1.approx[0] == float(b) and e2.approx[0] == float(b) - 2.0**-8
    # float totals: P(above b) is 1/2 under T and ~1e-5 under T' (a perfect distinguisher)
    f1 = m.release_table(e1.approx, rng=RandomSource(seed=9), grid=g).estimate
    f2 = m.release_table(e2.approx, rng=RandomSource(seed=9), grid=g).estimate
    up = float(b + 16)
    assert np.mean(f1 == up) > 0.4 and np.mean(f2 == up) < 0.01
    # exact totals: P(above b) = P(Z > 2**-9 − 2**-31) ≈ 1.8% under both, identical draws
    x1 = m.release_table(e1, rng=RandomSource(seed=9), grid=g).estimate
    x2 = m.release_table(e2, rng=RandomSource(seed=9), grid=g).estimate
    assert np.array_equal(x1, x2)
    p = 0.5 * math.erfc((2.0**-9 - 2.0**-31) / sigma / math.sqrt(2.0))
    k = int(np.sum(x1 == up))
    assert abs(k - n * p) <= 5.5 * math.sqrt(n * p * (1 - p)) + 1, (k, n * p)
    assert set(np.unique(x1).tolist()) <= {up, float(b - 16)}


_ALL = [mech.Gaussian(2.0), mech.Laplace(3.0), mech.GeneralizedGaussian(1.0, 0.5),
        mech.ExpPolyLog(1.0, 1.0, 4.0), mech.UnitSplitting(10.0, 2.0),
        mech.SymmetricStable(1.5, 1.0), mech.Logistic(1.0), mech.Subbotin(2.0, 1.5),
        mech.DiscreteGaussian(2.0), mech.DiscreteLaplace(2.0),
        mech.LogTransform(0.1, 1.0), mech.RootTransform(2, 1.0),
        mech.RootTransform(2.5, 1.0, 1.0, "median")]


@pytest.mark.parametrize("mechanism", _ALL, ids=repr)
def test_huge_and_negative_totals_release_silently(mechanism: Any) -> None:
    totals = ExactTotals([3 * 10**18, -(3 * 10**18), 2**126 + 1, 0, 7], scale_bits=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for grid in (None, 1.0) if not isinstance(mechanism, mech.TransformationMechanism) \
                else (None, 1e-6):
            r = mechanism.release_table(totals, rng=RandomSource(seed=2), grid=grid)
            assert np.all(np.isfinite(r.estimate)) and np.all(np.isfinite(r.moe))
    if isinstance(mechanism, mech.TransformationMechanism):
        assert r.estimate[1] < 1e3                      # the negative total is released as 0
    else:
        assert abs(r.estimate[0] - 3e18) <= 3e18 * 2.0**-39 + 1e3


def test_grid_beyond_the_uniform_part_is_fixed_and_exact() -> None:
    g = UniformGrid(1.0)
    # indices are consecutive; values double their spacing per binade from 2**40
    ks = [2**40 - 1, 2**40, 2**40 + 1, 2**40 + 2**39 - 1, 2**40 + 2**39, 2**45 + 3]
    vals = [g.value(k) for k in ks]
    assert vals[:3] == [2**40 - 1, 2**40, 2**40 + 2] and vals[4] == 2**41
    assert vals[3] == 2**41 - 2
    for k in ks:
        assert g.value(k) < g.breakpoint(k) < g.value(k + 1)
        assert g.value(-k) == -g.value(k)
    # the float index of doubles is the exact rounding to the nearest grid value
    rng = np.random.default_rng(0)
    ys = np.concatenate([rng.uniform(2.0**39, 2.0**43, 400), [2.0**40 - 0.5, 2.0**40 + 1.0,
                         2.0**40 + 0.75, 3e18, 1e300]])
    idx = g._index(ys)
    for y, k in zip(ys.tolist(), idx.tolist(), strict=True):
        k = int(k)
        fy = Fraction(y)
        assert g.breakpoint(k - 1) <= fy <= g.breakpoint(k), y
    assert np.array_equal(g.values(idx.astype(np.int64)),
                          np.array([float(g.value(int(k))) for k in idx]))


@pytest.mark.parametrize("c", [2.0**40 - 3.0, 2.0**40 + 5.0, 3.3e12, 3e18, -1e25])
def test_fast_path_agrees_with_exact_path_beyond_the_uniform_part(c: float) -> None:
    law = LaplaceNoise(3.0e6)
    a = round_noisy(law, np.full(300, c), 1.0, rng=RandomSource(seed=4))
    b = round_noisy(law, np.full(300, c), 1.0, rng=RandomSource(seed=4), fast_path=False)
    assert np.array_equal(a.index, b.index) and np.array_equal(a.values, b.values)
    assert a.fallbacks <= 3


# -- the accessor hands the exact totals to the mechanism, on every engine ---------------------
def test_accessor_hands_the_exact_totals_to_the_mechanism(to_engine: Callable[[Any], Any]
                                                          ) -> None:
    """Totals that are not doubles reach the mechanism exactly, whatever the input form.

    2**60 + 1 and 2**60 + 3 from Int64 rows, 2**40 + 2**-20 from float rows; the release is the
    one of those exact totals (a direct ``release_table`` of them with the same seed).
    """
    seen: dict[str, Any] = {}

    class Spy(mech.Gaussian):
        def release_table(self, values, rng=None, level=0.9,  # type: ignore[no-untyped-def]
                          grid=None):
            seen.setdefault("totals", []).append(values)
            return super().release_table(values, rng, level, grid)

    df = pl.DataFrame({"c": ["a", "a", "b", "b", "b"],
                       "n": [2**60, 1, 2**60, 1, 2],
                       "x": [2.0**40, 2.0**-20, 1.5, -0.25, 0.0]})
    keys = tabdp.KeySet.from_dict(c=["a", "b", "z"])
    s = tabdp.Session(seed=4)
    out = to_engine(df).dp.sum(["n", "x"], by="c", keys=keys, mechanism=Spy(sigma=2.0),
                               session=s, negatives="allow")
    n_tot, x_tot = seen["totals"]
    assert (n_tot.numer, n_tot.scale_bits) == ([2**60 + 1, 2**60 + 3, 0], 0)
    assert [Fraction(v, 2**x_tot.scale_bits) for v in x_tot.numer] == \
        [Fraction(2**40) + Fraction(1, 2**20), Fraction(5, 4), Fraction(0)]
    # the accessor releases an integer measure on the integer grid (its default when the
    # mechanism's own default grid is finer): the direct release uses the grid it recorded
    assert s.records[-1].grid["n"] == 1
    direct = mech.Gaussian(sigma=2.0).release_table(n_tot, rng=RandomSource(seed=4), grid=1.0)
    from _engines import as_polars  # a PySpark Column answers every attribute: no hasattr

    est = as_polars(out)["n"].to_list()
    assert est == direct.estimate.tolist()
