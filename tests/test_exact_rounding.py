"""Floating-point-safe, exactly rounded noise (tabdp.noise.exact; docs/exact-rounding.md).

Covers: the Mironov-style attack on a naive float sampler and its failure on tabdp's sampler;
the exactly rounded law for every noise distribution (chi-square on grid points for small
scales, KS against the continuous cdf for large scales, each with the ±30% power check); the
high-precision fallback path (forced, and agreeing cell by cell with the fast path); grid
validation and default grids; and the float64 quantile error bounds against mpmath references
down to tail masses of 1e-300. All tests use fixed seeds.
"""

from __future__ import annotations

import math
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import mpmath
import numpy as np
import pytest
from scipy import stats

from tabdp import mechanisms as mech
from tabdp.exceptions import InvalidParameterError
from tabdp.noise import (
    ExpPolyLog,
    Gaussian,
    GeneralizedCauchy,
    GeneralizedGaussian,
    Laplace,
    NoiseDistribution,
    PolyPlace,
    StudentT,
)
from tabdp.noise import exact
from tabdp.noise.exact import RelativeGrid, UniformGrid, default_grid, noise_spread, round_noisy
from tabdp.rng import RandomSource

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _stats import P_REJECT, assert_ks_fits, assert_power, scaled_cdfs  # noqa: E402

# Every noise law in tabdp.noise, as a family of scales: law(scale) has spread proportional to it.
LAWS: dict[str, Callable[[float], NoiseDistribution]] = {
    "gaussian": lambda s: Gaussian(sigma=s),
    "laplace": lambda s: Laplace(scale=s),
    "gen_gaussian_p0.5": lambda s: GeneralizedGaussian(sigma=s, p=0.5),
    "gen_gaussian_p2.5": lambda s: GeneralizedGaussian(sigma=s, p=2.5),
    "exp_polylog_p1": lambda s: ExpPolyLog(sigma=s, a=1.0, d=4.0),
    "exp_polylog_p2": lambda s: ExpPolyLog(sigma=s, a=3.0, d=1.0, p=2.0),
    "exp_polylog_p1.5": lambda s: ExpPolyLog(sigma=s, a=3.0, d=1.0, p=1.5),
    "polyplace": lambda s: PolyPlace(s=s, alpha=10.0),
    "student_t": lambda s: StudentT(df=3.0, scale=s),
    "gen_cauchy": lambda s: GeneralizedCauchy(c=4.0, scale=s),
}
N = 20_000


def law_with_spread(name: str, spread: float) -> tuple[Callable[[float], NoiseDistribution], float]:
    """``(family, s)`` with ``noise_spread(family(s)) == spread``."""
    fam = LAWS[name]
    return fam, spread / noise_spread(fam(1.0))


# ------------------------------------------------------------------------------------------------
# Chi-square on grid points
# ------------------------------------------------------------------------------------------------
def grid_probabilities(law: NoiseDistribution, q: float, g: float,
                       n: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact-law bin edges (in grid index) and probabilities, bins merged to >= 5 expected.

    ``P(k) = P(g(k − ½) < q + Z < g(k + ½))``; returns ``(upper index of each bin, probs)``, the
    last bin open-ended.
    """
    lo = int(math.floor((q + float(law.ppf(1e-4))) / g))
    hi = int(math.ceil((q + float(law.ppf(1 - 1e-4))) / g))
    ks = np.arange(lo, hi + 1)
    cdf = np.concatenate([law.cdf((ks + 0.5) * g - q), [1.0]])
    p = np.diff(np.concatenate([[0.0], cdf]))         # P(k <= lo), P(k = lo+1), ..., P(k > hi)
    uppers = np.concatenate([ks, [np.iinfo(np.int64).max]])
    out_u, out_p, acc = [], [], 0.0
    for u, pk in zip(uppers, p, strict=True):
        acc += pk
        if acc * n >= 5.0:
            out_u.append(u)
            out_p.append(acc)
            acc = 0.0
    out_p[-1] += acc
    out_u[-1] = np.iinfo(np.int64).max
    return np.asarray(out_u), np.asarray(out_p)


def chi2_pvalue(index: np.ndarray, law: NoiseDistribution, q: float, g: float) -> float:
    uppers, probs = grid_probabilities(law, q, g, index.size)
    counts = np.bincount(np.searchsorted(uppers, index, side="left"), minlength=uppers.size)
    return float(stats.chisquare(counts, probs * index.size / probs.sum()).pvalue)


@pytest.mark.parametrize("name", list(LAWS))
@pytest.mark.parametrize("q", [0.0, 0.5, 12.3])
def test_small_scale_released_values_follow_the_exactly_rounded_law(name: str, q: float) -> None:
    fam, s = law_with_spread(name, 3.0)       # spread of 3 grid steps
    g = 1.0
    d = round_noisy(fam(s), np.full(N, q), g, RandomSource(seed=11 + len(name)))
    assert np.array_equal(d.values, d.index.astype(np.float64))  # grid points k·1
    assert chi2_pvalue(d.index, fam(s), q, g) > P_REJECT
    for wrong in (0.7, 1.3):                  # power: the same sample rejects ±30% scales
        assert chi2_pvalue(d.index, fam(s * wrong), q, g) <= P_REJECT, (name, wrong)


@pytest.mark.parametrize("name", list(LAWS))
def test_large_scale_released_values_follow_the_continuous_law(name: str) -> None:
    fam, s = law_with_spread(name, 1000.0)    # default-like grid: 1% of the spread
    law = fam(s)
    q = 5000.0
    d = round_noisy(law, np.full(N, q), 1.0, RandomSource(seed=200 + len(name)))
    z = d.values - q
    assert_ks_fits(z, law.cdf)
    assert_power(z, scaled_cdfs(law.cdf))
    assert d.fallbacks == 0


# ------------------------------------------------------------------------------------------------
# The attack on a naive sampler, and its failure on tabdp's
# ------------------------------------------------------------------------------------------------
def impossible_under_q1(y: np.ndarray) -> np.ndarray:
    """Mironov-style test event for q ∈ {0, 1}: an output in (0, ½) that is not a multiple of 2⁻⁵³.

    Under q = 1 the naive release ``fl(1 + Z)`` can land in (0, ½) only for Z in (−1, −½), whose
    doubles are multiples of 2⁻⁵³, and ``1 + Z`` is then exact (Sterbenz): the event is
    impossible. Under q = 0 the release is ``Z`` itself, a generic double: it happens often.
    """
    scaled = np.ldexp(y, 53)
    return (y > 0) & (y < 0.5) & (scaled != np.rint(scaled))


def test_naive_float_sampler_leaks_the_input() -> None:
    draws = 2000
    gen = np.random.default_rng(20240611)
    y0 = 0.0 + gen.laplace(0.0, 1.0, draws)   # q = 0
    y1 = 1.0 + gen.laplace(0.0, 1.0, draws)   # q = 1 (neighbouring input, sensitivity 1)
    rate0, rate1 = impossible_under_q1(y0).mean(), impossible_under_q1(y1).mean()
    assert rate1 == 0.0            # never under q = 1: ε-DP is violated for every finite ε
    assert rate0 > 0.08            # ~14% of releases under q = 0 prove q = 0
    # the distinguisher "say q = 0 iff the event occurs in a batch of 100 releases" is right
    # in every batch
    assert impossible_under_q1(y0.reshape(20, 100)).any(axis=1).all()
    assert not impossible_under_q1(y1.reshape(20, 100)).any()


def test_tabdp_sampler_defeats_the_distinguisher() -> None:
    draws = 2000
    law = Laplace(scale=1.0)
    # on a whole-number grid the releases for q and q + 1 are exact shifts of each other: with
    # the same random bits every released index moves by exactly one grid step
    d0 = round_noisy(law, np.zeros(draws), 1.0, RandomSource(seed=5))
    d1 = round_noisy(law, np.ones(draws), 1.0, RandomSource(seed=5))
    assert np.array_equal(d1.index - d0.index, np.ones(draws, dtype=np.int64))
    assert not impossible_under_q1(d0.values).any() and not impossible_under_q1(d1.values).any()
    # on the default grid (0.01, not a divisor of 1 in binary) both inputs release points of
    # the same public set {fl(0.01·k)}: no output is possible under one input only, and the test
    # event occurs at rates that only the (private) noise law separates
    g = mech.Laplace(scale=1.0).default_grid()
    assert g == 0.01
    e0 = round_noisy(law, np.zeros(N), g, RandomSource(seed=6))
    e1 = round_noisy(law, np.ones(N), g, RandomSource(seed=7))
    for e in (e0, e1):
        assert np.array_equal(e.values, UniformGrid(g).values(e.index))
    # the exact law gives P(event) for each input; the observed rates match it
    for e, q in ((e0, 0.0), (e1, 1.0)):
        ks = np.arange(1, 50)
        vals = UniformGrid(g).values(ks)
        ks_event = ks[impossible_under_q1(vals)]
        p = float(np.sum(law.cdf((ks_event + 0.5) * g - q) - law.cdf((ks_event - 0.5) * g - q)))
        rate = impossible_under_q1(e.values).mean()
        assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / N)


# ------------------------------------------------------------------------------------------------
# The high-precision path
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(LAWS))
def test_fallback_path_agrees_with_the_fast_path_cell_by_cell(name: str) -> None:
    fam, s = law_with_spread(name, 4.0)
    n = 5 if name == "exp_polylog_p1.5" else 120   # its exact tail is a quadrature (slow)
    centers = np.linspace(-20.0, 20.0, n) + 0.37
    fast = round_noisy(fam(s), centers, 1.0, RandomSource(seed=3))
    slow = round_noisy(fam(s), centers, 1.0, RandomSource(seed=3), fast_path=False)
    assert slow.fallbacks == n and fast.fallbacks < n
    np.testing.assert_array_equal(fast.index, slow.index)


def test_forced_fallbacks_follow_the_exact_law_and_are_counted(monkeypatch) -> None:
    # a deliberately useless error bound (10%) sends most cells to the high-precision path
    monkeypatch.setattr("tabdp.noise.gaussian._LAPLACE_ISF_RTOL", 0.1)
    law = Laplace(scale=3.0)
    n = 3000
    d = round_noisy(law, np.full(n, 0.25), 1.0, RandomSource(seed=17))
    assert d.fallbacks > n // 3
    assert chi2_pvalue(d.index, law, 0.25, 1.0) > P_REJECT
    for wrong in (0.7, 1.3):
        assert chi2_pvalue(d.index, Laplace(scale=3.0 * wrong), 0.25, 1.0) <= P_REJECT
    # the count reaches the release
    r = mech.Laplace(scale=3.0).release_table(np.zeros(200), rng=1, grid=1.0)
    assert r.fallbacks > 0 and r.grid == 1.0
    monkeypatch.undo()
    assert mech.Laplace(scale=3.0).release_table(np.zeros(200), rng=1, grid=1.0).fallbacks == 0


def test_centre_on_a_breakpoint() -> None:
    # q = 2.5 is the breakpoint between 2 and 3: P(release <= 2) = P(Z < 0) = 1/2 exactly
    law = Gaussian(sigma=1.0)
    d = round_noisy(law, np.full(N, 2.5), 1.0, RandomSource(seed=23))
    assert abs(np.mean(d.index <= 2) - 0.5) <= 4 * math.sqrt(0.25 / N)
    # an exact (rational) centre that equals the breakpoint, given through the high-precision
    # hook as for transformation mechanisms: the search treats γ = 0 exactly and terminates
    n = 12
    slow = round_noisy(law, np.full(n, 2.5), 1.0, RandomSource(seed=29),
                       center_error=np.full(n, 1e-15),
                       exact_center=lambda i, mp: mp.mpf(5) / 2, fast_path=False)
    exact_c = round_noisy(law, np.full(n, 2.5), 1.0, RandomSource(seed=29))
    np.testing.assert_array_equal(slow.index, exact_c.index)


def test_transformed_centres_fast_and_slow_agree() -> None:
    q = np.linspace(0.0, 5e4, 150)
    v = np.log(q + 1.0)
    kw: dict[str, Any] = dict(center_error=4e-16 + 2e-15 * np.abs(v),
                              exact_center=lambda i, mp: mp.log(mp.mpf(float(q[i])) + 1))
    fast = round_noisy(Gaussian(0.3), v, 0.001, RandomSource(seed=31), **kw)
    slow = round_noisy(Gaussian(0.3), v, 0.001, RandomSource(seed=31), fast_path=False, **kw)
    np.testing.assert_array_equal(fast.index, slow.index)


def test_relative_grid_and_scales_fast_and_slow_agree() -> None:
    q = np.linspace(-50.0, 50.0, 100)
    s = np.linspace(0.0, 20.0, 100)             # includes a zero scale: round(q) itself
    for grid in (RelativeGrid(24), RelativeGrid(32), UniformGrid(0.25)):
        fast = round_noisy(PolyPlace(s=10.0, alpha=10.0), q, grid, RandomSource(seed=37), scale=s)
        slow = round_noisy(PolyPlace(s=10.0, alpha=10.0), q, grid, RandomSource(seed=37),
                           scale=s, fast_path=False)
        np.testing.assert_array_equal(fast.index, slow.index)
        assert slow.values[0] == grid.values(np.asarray(fast.index[:1]))[0]


class _NoFloatBound(Laplace):
    """Laplace without a float64 quantile bound: the safe default sends every cell to mpmath."""

    _isf_rtol = None

    def _isf_bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return NoiseDistribution._isf_bounds(self, u_lo, u_hi)


class _QuadratureTail(Laplace):
    """Laplace giving only an exact log-density: the default tail integrates it (mp.quad)."""

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        return NoiseDistribution._mp_sf(self, x, mp)

    def _mp_logpdf(self, x: Any, mp: Any) -> Any:
        b = mp.mpf(self.scale)
        return -abs(x) / b - mp.log(2 * b)


class _NoExactTail(NoiseDistribution):
    def logpdf(self, x: Any) -> np.ndarray:
        return -np.abs(np.asarray(x, dtype=np.float64)) - math.log(2.0)

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        return 0.5 * np.exp(-x)

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        return -np.log(u)

    def variance(self) -> float:
        return 2.0

    def params(self) -> dict[str, Any]:
        return {}


def test_extension_contract_safe_defaults() -> None:
    c = np.linspace(0.0, 30.0, 40)
    ref = round_noisy(Laplace(2.0), c, 1.0, RandomSource(seed=41))
    nb = round_noisy(_NoFloatBound(2.0), c, 1.0, RandomSource(seed=41))
    assert nb.fallbacks == c.size
    np.testing.assert_array_equal(nb.index, ref.index)
    qt = round_noisy(_QuadratureTail(2.0), c[:6], 1.0, RandomSource(seed=41), fast_path=False)
    np.testing.assert_array_equal(qt.index, ref.index[:6])
    with pytest.raises(InvalidParameterError, match="no high-precision tail"):
        round_noisy(_NoExactTail(), c, 1.0, RandomSource(seed=41))


# ------------------------------------------------------------------------------------------------
# Grids
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, "1", True, None])
def test_invalid_grids_are_refused(bad: Any) -> None:
    with pytest.raises(InvalidParameterError, match="grid"):
        round_noisy(Laplace(1.0), [0.0], bad, RandomSource(seed=0))
    if bad is not None:  # None means "the default grid" for mechanisms
        with pytest.raises(InvalidParameterError, match="grid"):
            mech.Gaussian(sigma=1.0).release_table([0.0], rng=0, grid=bad)


def test_grid_too_fine_for_float64_is_refused_with_a_fix() -> None:
    m = mech.Gaussian(sigma=1.0)
    with pytest.raises(InvalidParameterError, match=r"too fine.*\n.*Hint: .*grid=1"):
        m.release_table([1e12], rng=0, grid=1e-3)       # needs >= 2^-40·1e12 ≈ 0.9
    assert m.release_table([1e12], rng=0, grid=1.0).estimate[0] % 1.0 == 0.0
    with pytest.raises(InvalidParameterError):
        m.release_table([1e12], rng=0)                  # default grid 0.01 is too fine too
    with pytest.raises(InvalidParameterError, match="bits"):
        RelativeGrid(60)


@pytest.mark.parametrize("name", list(LAWS))
def test_default_grid_is_a_power_of_ten_at_most_two_percent_of_the_spread(name: str) -> None:
    for s in (1e-3, 0.37, 1.0, 55.0, 1e6):
        law = LAWS[name](s)
        g = default_grid(noise_spread(law))
        spread = law.std() if math.isfinite(law.std()) else 1.482602218505602 * float(
            law._abs_isf(np.asarray([0.5]))[0])
        assert 0.002 * spread < g <= 0.02 * spread
        assert g == float(f"1e{round(math.log10(g))}")


def test_mechanism_default_grids() -> None:
    additive = [mech.Gaussian(2.0), mech.Laplace(50.0), mech.GeneralizedGaussian(1.0, 0.5),
                mech.ExpPolyLog(10.0, 1.0, 2.5), mech.UnitSplitting(10.0, 3.0)]
    for m in additive:
        sd = noise_spread(m.noise)
        assert 0.002 * sd < m.default_grid() <= 0.02 * sd
        r = m.release_table(np.linspace(0, 1e4, 50), rng=1)
        assert r.grid == m.default_grid()
        np.testing.assert_allclose(r.moe, m.noise.interval_halfwidth(0.9) + r.grid / 2)
    for t in (mech.LogTransform(sigma=0.2, offset=1.0), mech.RootTransform(k=4, sigma=0.5)):
        assert t.default_grid() == default_grid(t.sigma)
    assert mech.SmoothSensitivityMechanism("polyplace", 1.0).default_grid() == RelativeGrid(32)


def test_outputs_are_multiples_of_the_grid() -> None:
    q = np.linspace(0.0, 2e7, 400)
    r = mech.Laplace(scale=2000.0).release_table(q, rng=3, grid=1000.0)
    assert np.all(r.estimate % 1000.0 == 0.0)            # exactly k·1000 (whole-number grid)
    np.testing.assert_allclose(r.moe, Laplace(2000.0).interval_halfwidth(0.9) + 500.0)
    d = round_noisy(Gaussian(1.0), q[:50], 0.1, RandomSource(seed=4))
    np.testing.assert_array_equal(d.values, d.index.astype(np.float64) * 0.1)  # fl(k·0.1)
    sm = mech.SmoothSensitivityMechanism("student_t", 1.0, 0.1)
    e = sm.release(np.full(50, 1e5), np.full(50, 300.0), rng=5, grid=1.0)
    assert np.all(e == np.round(e))
    # transformation mechanisms: the noisy transformed value is on the transformed-space grid
    lt = mech.LogTransform(sigma=0.2, offset=1.0, estimator="median")
    rt = lt.release_table(np.linspace(0, 1e5, 50), rng=6, grid=0.001)
    k = np.log(rt.estimate + 1.0) / 0.001
    assert np.max(np.abs(k - np.round(k))) < 1e-6
    assert rt.grid == 0.001 and rt.fallbacks == 0


# ------------------------------------------------------------------------------------------------
# Float64 quantile bounds against mpmath
# ------------------------------------------------------------------------------------------------
ERROR_CASES: list[NoiseDistribution] = [
    Gaussian(1.0), Gaussian(37.5), Laplace(1.0), Laplace(0.01),
    GeneralizedGaussian(1.0, 0.1), GeneralizedGaussian(2.0, 0.5), GeneralizedGaussian(1.0, 4.0),
    ExpPolyLog(1.0, 1.0, 1.5), ExpPolyLog(3.0, 1.0, 4.0), ExpPolyLog(1.0, 20.0, 5.0, 2.0),
    ExpPolyLog(1.0, 2.8, 0.3, 2.0), ExpPolyLog(1.0, 1e6, 50.0, 2.0),
    PolyPlace(1.0, 1.05), PolyPlace(10.0, 10.0), PolyPlace(1.0, 1e4),
    StudentT(0.5), StudentT(3.2, 2.0), StudentT(50.0), StudentT(1000.0),
    GeneralizedCauchy(1.5), GeneralizedCauchy(3.98), GeneralizedCauchy(50.0),
]
U_POINTS = np.concatenate([[1e-300, 1e-250, 1e-200, 1e-150, 1e-100, 1e-60, 1e-30, 1e-16, 1e-8,
                            1e-4, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99],
                           1.0 - np.array([1e-4, 1e-8, 1e-12, 2.0**-52])])


def _tail(law: NoiseDistribution, m: float) -> Any:
    return 2 * law._mp_sf(mpmath.mpf(m), mpmath.mp) if m > 0 else mpmath.mpf(1)


@pytest.mark.parametrize("law", ERROR_CASES, ids=repr)
def test_float_quantile_bounds_contain_the_exact_quantile(law: NoiseDistribution) -> None:
    """lo <= m(u) <= hi  ⟺  T(lo) >= u >= T(hi) (T decreasing), T in 170-bit mpmath."""
    mad = float(law._abs_isf(np.asarray([0.5]))[0])
    with np.errstate(all="ignore"):
        lo, hi = law._isf_bounds(U_POINTS, U_POINTS)
        width = U_POINTS * 2.0**-52
        lo2, hi2 = law._isf_bounds(U_POINTS, U_POINTS + width)
    with mpmath.workprec(170):
        for u, a, b, a2 in zip(U_POINTS, lo, hi, lo2, strict=True):
            if not np.isfinite(b):       # beyond the double range: the slow path decides
                continue
            uu = mpmath.mpf(float(u))
            assert _tail(law, a) >= uu >= _tail(law, b), (u, a, b)
            # and over the interval [u, u + u·2^-52] (lower end at its upper end)
            assert _tail(law, a2) >= mpmath.mpf(float(u + u * 2.0**-52)), (u, a2)
            # the bounds are tight enough to decide: width below 1e-8 of max(m, MAD)
            assert b - a <= 1e-8 * max(b, mad), (u, a, b)


@pytest.mark.parametrize("law", ERROR_CASES[:12] + ERROR_CASES[12:15] + ERROR_CASES[-3:], ids=repr)
def test_common_case_hook_bounds_contain_the_exact_quantile(law: NoiseDistribution) -> None:
    """``_isf_bounds_fine(u)`` covers ``[u, u + 2^-53]`` for u >= 2^-10 (the fast path's case)."""
    us = np.ldexp(np.round(np.ldexp(np.concatenate(
        [[2.0**-10, 0.01, 0.1, 0.2699, 0.27, 0.2701], np.linspace(0.3, 1.0, 15)[:-1],
         [1.0 - 2.0**-52, 1.0 - 2.0**-30]]), 53)), -53)
    lo, hi = law._isf_bounds_fine(us)
    with mpmath.workprec(170):
        for u, a, b in zip(us, lo, hi, strict=True):
            assert _tail(law, a) >= mpmath.mpf(float(u)) + mpmath.mpf(2) ** -53, (u, a)
            assert _tail(law, b) <= mpmath.mpf(float(u)), (u, b)


def test_bounds_against_fifty_digit_quantiles() -> None:
    """Direct comparison with 50-digit quantiles (root-finding on the exact tail)."""
    with mpmath.workdps(50):
        for law in (Gaussian(1.0), Laplace(1.0), StudentT(3.0), PolyPlace(10.0, 10.0),
                    ExpPolyLog(1.0, 1.0, 4.0), ExpPolyLog(1.0, 3.0, 1.0, 2.0),
                    GeneralizedGaussian(1.0, 0.5), GeneralizedCauchy(4.0)):
            for u in (1e-300, 1e-100, 1e-10, 0.05, 0.5, 0.999999):
                m = law._mp_abs_isf(mpmath.mpf(u), mpmath.mp)
                lo, hi = law._isf_bounds(np.asarray([u]), np.asarray([u]))
                assert mpmath.mpf(float(lo[0])) <= m <= mpmath.mpf(float(hi[0])), (law, u)


def test_general_p_exp_polylog_bounds_against_the_exact_law() -> None:
    """The tabulated numerics are not the exact law; the bound must cover the exact one."""
    law = ExpPolyLog(1.0, 3.0, 1.0, 1.5)
    us = np.array([1e-280, 1e-40, 1e-3, 0.4, 1.0 - 1e-9])
    lo, hi = law._isf_bounds(us, us)
    with mpmath.workprec(120):
        for u, a, b in zip(us, lo, hi, strict=True):
            uu = mpmath.mpf(float(u))
            assert _tail(law, a) >= uu >= _tail(law, b)


def test_exp_polylog_far_tail_quantile_is_fixed() -> None:
    """Regression: the general-p quantile underflowed beyond ln u ≈ −700 (gave 2e53 at 1e-300)."""
    law = ExpPolyLog(1.0, 3.0, 1.0, 1.5)
    m = law._abs_isf(np.asarray([1e-300]))[0]
    assert float(law.sf(m)) * 2 == pytest.approx(1e-300, rel=1e-10)


def test_student_t_tail_quantile_is_accurate_for_large_df() -> None:
    """Regression: 1 − t was formed for small t (df = 100: relative error 1e-8 at u = 6e-14)."""
    law = StudentT(df=100.0)
    u = 6.3e-14
    m = float(law._abs_isf(np.asarray([u]))[0])
    assert float(-stats.t.ppf(u / 2, 100.0)) == pytest.approx(m, rel=1e-13)
