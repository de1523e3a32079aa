"""Floating-point-safe, exactly rounded noise (tabdp.noise.exact; docs/exact-rounding.md).

Covers: the Mironov-style attack on naive float samplers (Laplace, Gaussian and other shipped
laws) and its failure on tabdp's releases (uniform and relative grids, per-cell scales, the
mechanism API); the exactly rounded law for every noise distribution (chi-square on grid points
for small scales, KS against the continuous cdf for large scales, each with the ±30% power
check); the high-precision fallback path (forced, and agreeing cell by cell with the fast
path); grid validation and default grids; and the float64 quantile error bounds against mpmath
references down to tail masses of 1e-300. All tests use fixed seeds.
"""

from __future__ import annotations

import math
import os
import pathlib
import sys
from collections.abc import Callable
from fractions import Fraction
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
    Logistic,
    NoiseDistribution,
    PolyPlace,
    StudentT,
    Subbotin,
    SymmetricStable,
    exact,
)
from tabdp.noise.exact import RelativeGrid, UniformGrid, default_grid, noise_spread, round_noisy
from tabdp.noise.rounding import LaplaceBounds, MpTail, RelErrorBounds, Rounding
from tabdp.rng import RandomSource

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
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
    "logistic": lambda s: Logistic(scale=s),
    "subbotin_r1.5": lambda s: Subbotin(r=1.5, scale=s),
    "subbotin_r4": lambda s: Subbotin(r=4.0, scale=s),
    "sas_cauchy": lambda s: SymmetricStable(alpha=1.0, gamma=s),
    "sas_gaussian": lambda s: SymmetricStable(alpha=2.0, gamma=s),
}
# SaS with 1 < alpha < 2 is tested separately (its table builds and its mpmath tail are slow).
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


# -- the same attack on other laws -------------------------------------------------------------
# Naive samplers ``q + Z`` in float64 beyond Laplace: numpy's Gaussian, and tabdp's own plain
# float draws (``NoiseDistribution.sample``, inverse CDF; never used for releases). Every law at
# scale 1 puts a good share of its mass in (0, ½), where the test event lives under q = 0.
def _numpy_normal(sigma: float) -> Callable[[int, int], np.ndarray]:
    return lambda n, seed: np.random.default_rng(seed).normal(0.0, sigma, n)


def _float_sample(name: str) -> Callable[[int, int], np.ndarray]:
    law = LAWS[name](1.0)
    return lambda n, seed: law.sample(n, rng=RandomSource(seed=seed))


# name: (noise sampler, lower bound asserted on the event rate under q = 0). The bounds are
# about half the rates measured with these seeds (n = 20_000), shown on the right.
NAIVE_SAMPLERS: dict[str, tuple[Callable[[int, int], np.ndarray], float]] = {
    "numpy_normal_sigma1": (_numpy_normal(1.0), 0.06),          # 0.128
    "numpy_normal_sigma3": (_numpy_normal(3.0), 0.015),         # 0.035
    "gaussian": (_float_sample("gaussian"), 0.06),              # 0.125
    "logistic": (_float_sample("logistic"), 0.035),             # 0.073
    "student_t": (_float_sample("student_t"), 0.055),           # 0.116
    "gen_gaussian_p0.5": (_float_sample("gen_gaussian_p0.5"), 0.025),  # 0.055
    "gen_gaussian_p2.5": (_float_sample("gen_gaussian_p2.5"), 0.085),  # 0.176
    "gen_cauchy": (_float_sample("gen_cauchy"), 0.07),          # 0.144
    "subbotin_r1.5": (_float_sample("subbotin_r1.5"), 0.06),    # 0.128
    "polyplace": (_float_sample("polyplace"), 0.2),             # 0.412
}
# the laws whose exactly rounded releases are checked against the same statistic
ATTACKED_LAWS = ["gaussian", "laplace", "logistic", "student_t", "gen_gaussian_p0.5",
                 "gen_gaussian_p2.5", "gen_cauchy", "subbotin_r1.5", "polyplace"]


@pytest.mark.parametrize("sampler", list(NAIVE_SAMPLERS))
def test_naive_float_samplers_of_other_laws_leak_the_input(sampler: str) -> None:
    """The low-bit attack is not specific to Laplace: it needs only float64 ``q + Z``.

    For any noise law, ``fl(1 + Z)`` lands in (0, ½) only for Z in (−1, −½], where doubles are
    multiples of 2⁻⁵³ and the sum is exact (Sterbenz): an output in (0, ½) off the 2⁻⁵³ lattice
    is impossible under q = 1. Under q = 0 the output is Z itself, a generic double whose low
    bits are set whenever |Z| < ½ has spare precision: the event occurs at a measured rate, so
    one such output proves q = 0 and no finite ε holds.
    """
    draw, lower = NAIVE_SAMPLERS[sampler]
    n = 20_000
    y0 = 0.0 + draw(n, 20240612)            # q = 0
    y1 = 1.0 + draw(n, 20240613)            # q = 1 (neighbouring input, sensitivity 1)
    in_half = (y1 > 0) & (y1 < 0.5)
    assert in_half.any()                    # q = 1 does reach (0, ½): the check below is not void
    rate0, rate1 = impossible_under_q1(y0).mean(), impossible_under_q1(y1).mean()
    assert rate1 == 0.0, sampler            # impossible under q = 1 ...
    assert rate0 > lower, (sampler, rate0)  # ... and frequent under q = 0
    # "say q = 0 iff the event occurs in a batch of 100 releases": never wrong under q = 1,
    # right in nearly every batch under q = 0 (all 200 but 9 for numpy_normal_sigma3; all otherwise)
    assert not impossible_under_q1(y1.reshape(-1, 100)).any()
    assert impossible_under_q1(y0.reshape(-1, 100)).any(axis=1).mean() >= 0.9


@pytest.mark.parametrize("name", ATTACKED_LAWS)
def test_tabdp_release_defeats_the_low_bit_distinguisher_for_every_law(name: str) -> None:
    """On a dyadic grid (2⁻¹⁰) tabdp's releases for q = 0 and q = 1 differ by exactly 1.

    Every release is ``index·2⁻¹⁰`` exactly, so a release in (0, ½) is always a multiple of 2⁻⁵³:
    the test event has rate 0 under both inputs, although releases in (0, ½) are frequent under
    q = 0 (at the rate the exactly rounded law predicts). With the same random bits the release
    under q = 1 is the release under q = 0 moved by 1 (1024 grid steps), cell by cell: output − q
    has the same law under both inputs, so no output is possible under one input only.
    """
    law = LAWS[name](1.0)
    g, n = 2.0**-10, 20_000
    d0 = round_noisy(law, np.zeros(n), g, RandomSource(seed=61))
    d1 = round_noisy(law, np.ones(n), g, RandomSource(seed=61))
    for d in (d0, d1):
        assert np.array_equal(d.values, d.index.astype(np.float64) * g)   # exactly index·step
        assert np.array_equal(d.values, UniformGrid(g).values(d.index))
        assert not impossible_under_q1(d.values).any()
    assert np.array_equal(d1.index - d0.index, np.full(n, 1024, dtype=np.int64))
    assert np.array_equal(d1.values - 1.0, d0.values)                     # exact (dyadic)
    # not vacuous: q = 0 releases land in (0, ½) often; index k in 1..511 ⟺ g/2 < Z < ½ − g/2
    p = float(law.cdf(0.5 - g / 2) - law.cdf(g / 2))
    rate = ((d0.values > 0) & (d0.values < 0.5)).mean()
    assert p > 0.05 and abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / n), (rate, p)
    # an independent draw under q = 1 also lies on the public grid shifted by q: the fractional
    # parts of (output − q)/g are all 0 for both inputs
    e1 = round_noisy(law, np.ones(n), g, RandomSource(seed=62))
    for d, q in ((d0, 0.0), (e1, 1.0)):
        r = np.ldexp(d.values - q, 10)
        assert np.array_equal(r, np.rint(r))


@pytest.mark.parametrize("name", ATTACKED_LAWS)
def test_on_the_default_grid_the_event_is_possible_under_both_inputs(name: str) -> None:
    """On the 0.01 grid (not dyadic) the test event no longer separates the inputs.

    Both inputs release points of the same public set {fl(0.01·k)}, some of which lie in (0, ½)
    off the 2⁻⁵³ lattice. So the event that proves q = 0 for a naive sampler has positive
    probability under q = 1 as well, and its rate under each input is the one the exactly
    rounded law gives (only the private noise law separates the inputs).
    """
    law = LAWS[name](1.0)
    g, n = 0.01, 20_000
    grid = UniformGrid(g)
    ks = np.arange(1, 50)
    ks_event = ks[impossible_under_q1(grid.values(ks))]
    assert ks_event.size > 10
    for q, seed in ((0.0, 63), (1.0, 64)):
        d = round_noisy(law, np.full(n, q), g, RandomSource(seed=seed))
        assert np.array_equal(d.values, grid.values(d.index))
        assert np.array_equal(d.values, d.index.astype(np.float64) * g)
        p = float(np.sum(law.cdf((ks_event + 0.5) * g - q) - law.cdf((ks_event - 0.5) * g - q)))
        rate = impossible_under_q1(d.values).mean()
        assert rate > 0.0, (q, p)
        assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / n), (q, rate, p)


@pytest.mark.parametrize("m", [mech.Gaussian(1.0), mech.Laplace(1.0), mech.Logistic(1.0),
                               mech.GeneralizedGaussian(1.0, 0.5)], ids=lambda m: type(m).__name__)
def test_mechanism_release_for_neighbouring_inputs_is_an_exact_shift(m: Any) -> None:
    """The public API (``Mechanism.release``) inherits the guarantee.

    On a dyadic grid, the releases of the neighbouring inputs 0 and 1 with the same random bits
    differ by exactly 1 everywhere, and the low-bit event never occurs. On the default grid
    every release is a point of the public grid {fl(step·k)}.
    """
    n = 20_000
    a = m.release(np.zeros(n), rng=65, grid=2.0**-10)
    b = m.release(np.ones(n), rng=65, grid=2.0**-10)
    assert np.array_equal(b - 1.0, a)
    assert not impossible_under_q1(a).any() and not impossible_under_q1(b).any()
    assert ((a > 0) & (a < 0.5)).mean() > 0.05
    step = m.default_grid()
    for q in (0.0, 1.0):
        v = m.release(np.full(n, q), rng=66)
        k = np.rint(v / step).astype(np.int64)
        assert np.array_equal(v, UniformGrid(step).values(k))


NOT_ON_GRID = np.iinfo(np.int64).min


def relative_grid_index(g: RelativeGrid, v: np.ndarray) -> np.ndarray:
    """The index k with ``g.value(k) == v`` exactly (as rationals); NOT_ON_GRID if there is none.

    Candidates come from the public bracket ``g.index_bounds`` (a few indices wide); the match
    itself is decided on Fractions, independently of the float64 ``values``.
    """
    zero = np.zeros(v.size)
    lo, hi, ok = g.index_bounds(v, None, zero, zero)
    assert ok.all() and (hi - lo <= 2).all()
    out = np.full(v.size, NOT_ON_GRID)
    for i, (a, b, x) in enumerate(zip(lo.tolist(), hi.tolist(), v.tolist(), strict=True)):
        hits = [k for k in range(a, b + 1) if g.value(k) == Fraction(x)]
        if hits:
            out[i] = hits[0]
    return out


@pytest.mark.parametrize(("name", "bits"), [
    ("gaussian", 32), ("laplace", 32), ("logistic", 32), ("polyplace", 32),
    ("gen_gaussian_p0.5", 32), ("student_t", 24), ("gen_cauchy", 24)])
def test_relative_grid_with_per_cell_scales_releases_grid_points(name: str, bits: int) -> None:
    """Per-cell scales on a RelativeGrid: every release is exactly ``RelativeGrid.values(index)``.

    Centres span ±1e-3 to ±1e6 (and 0), scales 1e-4 to 1e4 (and 0); with these seeds 50 to 435
    of the 20 000 cells are decided on the exact path, the rest on the fast path. Each release
    has a ``bits``-bit significand, is exactly the rational value of its index, and a zero scale
    releases the nearest grid point to c. Where the grid's relative step is negligible against
    the noise, (release − c)/s follows the law (KS, with power against ±30% scales): the per-cell
    scale is applied, not ignored.
    """
    law = LAWS[name](1.0)
    rng = np.random.default_rng(71 + bits)
    n = 20_000
    c = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-3.0, 6.0, n)
    c[:500] = 0.0
    s = 10.0 ** rng.uniform(-4.0, 4.0, n)
    s[::10] = 0.0
    g = RelativeGrid(bits)
    d = round_noisy(law, c, g, RandomSource(seed=73), scale=s)
    assert np.array_equal(d.values, g.values(d.index))
    assert not np.signbit(d.values[d.values == 0]).any()
    frac, _ = np.frexp(d.values)
    sig = np.ldexp(frac, bits)
    assert np.array_equal(sig, np.rint(sig))                  # at most `bits` significant bits
    assert np.array_equal(relative_grid_index(g, d.values), d.index)   # exact, on rationals
    for k, ci in zip(d.index[s == 0], c[s == 0], strict=True):       # zero scale: round(c)
        dist = abs(g.value(int(k)) - Fraction(float(ci)))
        assert dist <= min(abs(g.value(int(k) + j) - Fraction(float(ci))) for j in (-1, 1))
    noisy = (s > 0) & (s > 1e-3 * np.abs(c))
    assert noisy.sum() > n // 3
    z = (d.values[noisy] - c[noisy]) / s[noisy]
    assert_ks_fits(z, law.cdf)
    assert_power(z, scaled_cdfs(law.cdf))


@pytest.mark.parametrize("noise", ["polyplace", "laplace", "student_t", "cauchy"])
def test_smooth_sensitivity_release_is_on_its_relative_grid(noise: str) -> None:
    """The public smooth-sensitivity API releases points of its (default) RelativeGrid."""
    m = mech.SmoothSensitivityMechanism(noise, 1.0, 0.05)
    g = m.default_grid()
    rng = np.random.default_rng(79)
    n = 5000
    q = rng.uniform(-1e5, 1e5, n)
    ss = 10.0 ** rng.uniform(-2.0, 3.0, n)
    v = m.release(q, ss, rng=81)
    k = relative_grid_index(g, v)
    assert (k != NOT_ON_GRID).all() and np.array_equal(g.values(k), v)
    assert np.mean(np.abs(v - q) > 1e-3 * ss) > 0.9           # noise of size ~ss was added


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


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (3-4 s)
def test_forced_fallbacks_follow_the_exact_law_and_are_counted(monkeypatch) -> None:
    # a deliberately useless error bound (10%) sends most cells to the high-precision path
    monkeypatch.setattr("tabdp.noise.rounding.closed_form.LAPLACE_ISF_RTOL", 0.1)
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

    @property
    def rounding(self) -> Rounding:
        return Rounding(self, RelErrorBounds(self, None), MpTail(self))


class _QuadratureTail(Laplace):
    """Laplace giving only an exact log-density: the fallback tail integrates it (mp.quad)."""

    @property
    def rounding(self) -> Rounding:
        return Rounding(self, LaplaceBounds(self.scale), MpTail(self, quadrature=True))

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
    with pytest.raises(InvalidParameterError, match="no high-precision tail"):
        round_noisy(_NoExactTail(), c, 1.0, RandomSource(seed=41))


@pytest.mark.parametrize("cells", [1, 2, 6])
def test_quadrature_tail_releases_the_closed_form_values(cells: int) -> None:
    """A law giving only its exact log-density (mp.quad tail) releases Laplace's values.

    About 1.5 s of CPU per cell: the local loop checks the first cell, CI the first 1, 2 and
    6 (tests/conftest.py FAST_SUBSETS).
    """
    c = np.linspace(0.0, 30.0, 40)
    ref = round_noisy(Laplace(2.0), c, 1.0, RandomSource(seed=41))
    qt = round_noisy(_QuadratureTail(2.0), c[:cells], 1.0, RandomSource(seed=41),
                     fast_path=False)
    np.testing.assert_array_equal(qt.index, ref.index[:cells])


class _LegacyHooks(NoiseDistribution):
    """Laplace(2) written for the removed inherited contract: ``_mp_sf`` and ``_isf_rtol``."""

    _isf_rtol = 64 * 2.0**-53

    def logpdf(self, x: Any) -> np.ndarray:
        return -np.abs(np.asarray(x, dtype=np.float64)) / 2.0 - math.log(4.0)

    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        return 0.5 * np.exp(-x / 2.0)

    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        return -2.0 * np.log(u)

    def variance(self) -> float:
        return 8.0

    def params(self) -> dict[str, Any]:
        return {}

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        return mp.exp(-x / 2) / 2


def test_removed_hooks_still_release_with_a_deprecation_warning() -> None:
    """A law with the old hooks (no ``rounding``) releases the same values, and is warned."""
    c = np.linspace(0.0, 30.0, 40)
    ref = round_noisy(Laplace(2.0), c, 1.0, RandomSource(seed=41))
    with pytest.warns(DeprecationWarning, match="_LegacyHooks: exact rounding through the hooks"):
        old = round_noisy(_LegacyHooks(), c, 1.0, RandomSource(seed=41))
    np.testing.assert_array_equal(old.index, ref.index)
    assert old.fallbacks == 0


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


def test_no_grid_is_refused_for_large_data() -> None:
    # The grid no longer depends on max|q| (a refusal would reveal a large cell): beyond
    # 2**40·step it keeps 40 significant bits, and every release goes through.
    m = mech.Gaussian(sigma=1.0)
    for g in (1e-3, None):
        r = m.release_table([1e12], rng=0, grid=g)
        step = 0.01 if g is None else g
        assert abs(r.estimate[0] - 1e12) <= 10.0 + 1e12 * 2.0**-40
        assert r.moe[0] >= 1.645 + 1e12 * 2.0**-40 * 0.99 > 1.645 + step
    assert m.release_table([1e12], rng=0, grid=1.0).estimate[0] % 1.0 == 0.0
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
    Logistic(1.0), Logistic(250.0), Subbotin(1.0, 1.0), Subbotin(1.5, 2.0), Subbotin(2.0, 1.0),
    Subbotin(4.0, 1.0), Subbotin(14.0, 3.0), Subbotin(16.0, 1.0),
    SymmetricStable(1.0, 1.0), SymmetricStable(1.0, 40.0), SymmetricStable(2.0, 1.0),
    SymmetricStable(2.0, 7.5),
]
U_POINTS = np.concatenate([[1e-300, 1e-250, 1e-200, 1e-150, 1e-100, 1e-60, 1e-30, 1e-16, 1e-8,
                            1e-4, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99],
                           1.0 - np.array([1e-4, 1e-8, 1e-12, 2.0**-52])])


def _tail(law: NoiseDistribution, m: float) -> Any:
    return 2 * law._mp_sf(mpmath.mpf(m), mpmath.mp) if m > 0 else mpmath.mpf(1)


@pytest.mark.slow
@pytest.mark.parametrize("law", ERROR_CASES, ids=repr)
def test_float_quantile_bounds_contain_the_exact_quantile(law: NoiseDistribution) -> None:
    """Checked as lo <= m(u) <= hi  ⟺  T(lo) >= u >= T(hi) (T decreasing), T in 170-bit mpmath."""
    mad = float(law._abs_isf(np.asarray([0.5]))[0])
    with np.errstate(all="ignore"):
        lo, hi = law.rounding.bounds(U_POINTS, U_POINTS)
        width = U_POINTS * 2.0**-52
        lo2, hi2 = law.rounding.bounds(U_POINTS, U_POINTS + width)
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


@pytest.mark.parametrize("law", [la for la in ERROR_CASES if not isinstance(la, StudentT)],
                         ids=repr)
def test_common_case_hook_bounds_contain_the_exact_quantile(law: NoiseDistribution) -> None:
    """``rounding.fine(u)`` covers ``[u, u + 2^-53]`` for u >= 2^-10 (the fast path's case)."""
    us = np.ldexp(np.round(np.ldexp(np.concatenate(
        [[2.0**-10, 0.01, 0.1, 0.2699, 0.27, 0.2701], np.linspace(0.3, 1.0, 15)[:-1],
         [1.0 - 2.0**-52, 1.0 - 2.0**-30]]), 53)), -53)
    mid, rad = law.rounding.fine(us)
    rad = np.broadcast_to(rad, mid.shape)
    with mpmath.workprec(170):
        for u, a, r in zip(us, mid, rad, strict=True):
            assert _tail(law, a - r) >= mpmath.mpf(float(u)) + mpmath.mpf(2) ** -53, (u, a, r)
            assert _tail(law, a + r) <= mpmath.mpf(float(u)), (u, a, r)


def test_bounds_against_fifty_digit_quantiles() -> None:
    """Direct comparison with 50-digit quantiles (root-finding on the exact tail)."""
    with mpmath.workdps(50):
        for law in (Gaussian(1.0), Laplace(1.0), StudentT(3.0), PolyPlace(10.0, 10.0),
                    ExpPolyLog(1.0, 1.0, 4.0), ExpPolyLog(1.0, 3.0, 1.0, 2.0),
                    GeneralizedGaussian(1.0, 0.5), GeneralizedCauchy(4.0)):
            for u in (1e-300, 1e-100, 1e-10, 0.05, 0.5, 0.999999):
                m = law.rounding.mp_abs_isf(mpmath.mpf(u), mpmath.mp)
                lo, hi = law.rounding.bounds(np.asarray([u]), np.asarray([u]))
                assert mpmath.mpf(float(lo[0])) <= m <= mpmath.mpf(float(hi[0])), (law, u)


@pytest.mark.slow  # 2.3 s, in CI
def test_general_p_exp_polylog_bounds_against_the_exact_law() -> None:
    """The tabulated numerics are not the exact law; the (certified) bound covers the exact one.

    Below 2**-64 (never reached by releases) the upper bound is infinite and the lower bound is
    the certified one at 2**-64.
    """
    law = ExpPolyLog(1.0, 3.0, 1.0, 1.5)
    us = np.array([2.0**-63, 1e-15, 1e-3, 0.4, 1.0 - 1e-9])
    lo, hi = law.rounding.bounds(us, us)
    assert np.all(hi - lo <= 1e-9 * hi)
    with mpmath.workprec(120):
        for u, a, b in zip(us, lo, hi, strict=True):
            uu = mpmath.mpf(float(u))
            assert _tail(law, a) >= uu >= _tail(law, b)
        lo_far, hi_far = law.rounding.bounds(np.array([1e-280]), np.array([1e-280]))
        assert hi_far[0] == np.inf and _tail(law, lo_far[0]) >= mpmath.mpf(2.0**-64)


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


# ------------------------------------------------------------------------------------------------
# The Gaussian's Taylor tables (docs/exact-rounding.md §4.1)
# ------------------------------------------------------------------------------------------------
def _gauss_m(u: Any) -> Any:
    """Exact |Z| quantile of N(0, 1) at tail mass u (mpmath): √2·erfinv(1 − u)."""
    return mpmath.sqrt(2) * mpmath.erfinv(1 - mpmath.mpf(u))


@pytest.mark.parametrize("name", ["centre", "tail"])
def test_gaussian_table_nodes_are_correctly_rounded_quantiles(name: str) -> None:
    """Every node value is within 1.01u of the exact quantile (checked on the exact tail)."""
    from tabdp.noise.rounding.taylor import _table

    tab = _table(name)
    tab.ensure()
    per = 1 << tab.kbits
    u0 = np.concatenate([np.ldexp(1.0 + np.arange(per) / per, e)
                         for e in range(tab.e_lo, tab.e_hi)])
    idx, t = tab.locate(u0)
    np.testing.assert_array_equal(idx, np.arange(u0.size))
    assert not t.any()
    c0 = tab.coef[0]
    with mpmath.workprec(100):
        for u, m in zip(u0, c0, strict=True):
            lo = mpmath.mpf(m) * (1 - mpmath.mpf(1.01) * 2**-53)
            hi = mpmath.mpf(m) * (1 + mpmath.mpf(1.01) * 2**-53)
            uu = mpmath.mpf(float(u))
            assert mpmath.erfc(lo / mpmath.sqrt(2)) >= uu >= mpmath.erfc(hi / mpmath.sqrt(2)), u


@pytest.mark.slow
def test_gaussian_table_derivatives_match_numerical_differentiation() -> None:
    """Taylor coefficients and remainder bounds against mpmath's numerical derivatives."""
    from tabdp.noise.rounding.taylor import _table

    for name, nodes in (("centre", [0, 1, 255, 256, 1000, 2303, 2559]),
                        ("tail", [0, 31, 32, 900, 1727])):
        tab = _table(name)
        tab.ensure()
        d = tab.degree
        for i in nodes:
            b, j = divmod(i, 1 << tab.kbits)
            u0 = math.ldexp(1.0 + j / (1 << tab.kbits), tab.e_lo + b)
            h = math.ldexp(1.0, tab.e_lo + b - tab.kbits)
            with mpmath.workprec(300):
                ders = mpmath.diffs(_gauss_m, mpmath.mpf(u0), d + 1, h=mpmath.mpf(u0) * 1e-30)
                ders = [float(v) for v in ders]
            for n in range(d + 1):
                want = ders[n] / math.factorial(n)
                assert tab.coef[n, i] == pytest.approx(want, rel=1e-12), (name, i, n)
            rem = abs(ders[d + 1]) / math.factorial(d + 1) * h ** (d + 1)
            assert rem <= tab.rem[i] <= rem * (1 + 2e-9), (name, i)     # rounded up by 2^-30
            # the remainder's sign: m^(d+1) >= 0 exactly when d + 1 is even
            assert (ders[d + 1] > 0) == (tab.rem_sign > 0)


@pytest.mark.parametrize("sigma", [1e-3, 1.0, 37.5, 1e6])
def test_gaussian_table_bounds_dense_against_mpmath(sigma: float) -> None:
    """The fast hook over [u, u + 2^-53] and the general bounds over 63-bit tail intervals."""
    law = Gaussian(sigma)
    rng = np.random.default_rng(int(sigma * 1000) % 2**32)
    # the fast path's cells: multiples of 2^-53 in [2^-10, 1), incl. node edges and extremes
    uf = np.ldexp(np.floor(np.ldexp(np.exp(rng.uniform(math.log(2.0**-10), 0.0, 120)), 53)), -53)
    edges = np.array([2.0**-10, 2.0**-10 + 2.0**-53, 2.0**-9 - 2.0**-53, 0.5 - 2.0**-53, 0.5,
                      0.5 + 2.0**-53, 0.25 * (1 + 1 / 256), 0.25 * (1 + 1 / 256) - 2.0**-53,
                      1.0 - 2.0**-9, 1.0 - 2.0**-53])
    uf = np.concatenate([uf, edges])
    mid, rad = law.rounding.fine(uf)
    assert rad < 3e-11 * sigma
    # the tails: exact 63-bit intervals [J, J + 1)·2^-63, J < 2^53
    js = np.concatenate([[1, 2, 3, 2**11, 2**53 - 1, 2**52, 2**52 - 1],
                         np.exp(rng.uniform(0.0, 53 * math.log(2.0), 80)).astype(np.int64)])
    lo, hi = law.rounding.bounds(js * 2.0**-63, (js + 1) * 2.0**-63)
    s = mpmath.mpf(sigma)
    with mpmath.workprec(120):
        def tail(m: float) -> Any:
            return mpmath.erfc(mpmath.mpf(m) / (s * mpmath.sqrt(2))) if m > 0 else mpmath.mpf(1)

        for u, a, r in zip(uf, mid, np.broadcast_to(rad, mid.shape), strict=True):
            uu = mpmath.mpf(float(u))
            assert tail(a - r) >= uu + mpmath.mpf(2) ** -53 and tail(a + r) <= uu, u
        for j, a, b in zip(js, lo, hi, strict=True):
            u_lo, u_hi = mpmath.mpf(int(j)) / 2**63, mpmath.mpf(int(j) + 1) / 2**63
            assert tail(a) >= u_hi and tail(b) <= u_lo, j
            assert j < 2**40 or b - a <= 3e-9 * b, j      # tight where the interval is short
    # outside the tables: valid, and infinite above where round_noisy never looks
    lo, hi = law.rounding.bounds(np.array([0.0, 1e-300, 2.0**-64, 1.0]),
                             np.array([2.0**-63, 1e-300, 2.0**-64, 1.0]))
    assert np.isinf(hi[:2]).all() and np.isfinite(hi[2:]).all() and lo[3] == hi[3] == 0.0
    with mpmath.workprec(120):
        assert tail(lo[0]) >= mpmath.mpf(2) ** -63 and tail(lo[1]) >= mpmath.mpf(1e-300)


# ------------------------------------------------------------------------------------------------
# The fast path's decision rule
# ------------------------------------------------------------------------------------------------
def _round_half_even(x: Fraction) -> int:
    k = math.floor(x + Fraction(1, 2))
    if x + Fraction(1, 2) == k and k % 2:     # a tie: to even
        k -= 1
    return k


def test_mid_rad_contains_the_interval_exactly() -> None:
    """``_mid_rad`` covers [lo, hi] exactly (rationals), incl. subnormal and huge ends."""
    rng = np.random.default_rng(8)
    lo = np.concatenate([rng.standard_normal(300) * 10.0 ** rng.integers(-300, 300, 300),
                         [0.0, -0.0, 5e-324, 1e-310, -1e-310, 1.0, 2.0**1000]])
    hi = lo + np.abs(rng.standard_normal(lo.size)) * np.abs(lo) * 10.0 ** rng.integers(
        -18, 2, lo.size)
    hi[-7:] = [0.0, 1e-320, 5e-324, 2e-310, 3e-310, 1.0 + 2.0**-52, 2.0**1001]
    mid, rad = exact._mid_rad(lo, hi)
    for a, b, m, r in zip(lo, hi, mid, rad, strict=True):
        for v in (a, b):
            assert abs(Fraction(v) - Fraction(m)) <= Fraction(r), (a, b, m, r)


@pytest.mark.parametrize("step", [1.0, 0.1, 1000.0, 2.0**-30, 3.0e-7])
def test_decision_rule_is_exact_on_rationals(step: float) -> None:
    """Where _decide claims a cell, every real x in its error ball rounds to the claimed index.

    Adversarial cases: centres put within tiny distances of rounding breakpoints, huge |x|/g
    (near the 2^51 cut-off), per-cell scales, centre errors, and scalar or array radii.
    """
    rng = np.random.default_rng(int(step * 1e9) % 2**32)
    n = 4000
    m = np.abs(rng.standard_normal(n)) * 10.0 ** rng.integers(-3, 4, n) * step
    rad = m * 10.0 ** rng.uniform(-16, -9, n)
    kk = rng.integers(-10**6, 10**6, n).astype(np.float64)
    kk[:200] = rng.integers(2**48, 2**52, 200) * rng.choice([-1, 1], 200)
    near = rng.uniform(-1, 1, n) * 10.0 ** rng.integers(-17, -8, n)
    c = (kk + 0.5) * step - m + near * np.maximum(m, 1.0)     # x close to a breakpoint
    w = rng.integers(0, 2**64, n, dtype=np.uint64)
    for s, cerr, rr in ((None, None, rad), (None, None, float(np.max(rad[:50]))),
                        (np.abs(rng.standard_normal(n)) * 3.0, None, rad),
                        (None, np.abs(rng.standard_normal(n)) * 1e-15 * np.abs(c), rad)):
        k, ok = np.empty(n), np.empty(n, dtype=bool)
        zn = m.copy()
        r_arr = rr if np.ndim(rr) == 0 else rr.copy()
        exact._decide(w, c, zn, r_arr, s, cerr, 1.0 / step, (1.0 / step) * (1 + 8 * 2.0**-53),
                      k, ok, np.empty(n), np.empty(n), np.empty(n, np.uint64))
        assert 0 < ok.mean() < 1
        g = Fraction(step)
        for i in np.flatnonzero(ok):
            sign = 1 if int(w[i]) >= 2**63 else -1
            si = Fraction(1) if s is None else Fraction(float(s[i]))
            ce = Fraction(0) if cerr is None else Fraction(float(cerr[i]))
            radius = Fraction(float(rr if np.ndim(rr) == 0 else rr[i]))
            for dm in (-radius, radius):
                for dc in (-ce, ce):
                    x = Fraction(float(c[i])) + dc + sign * si * (Fraction(float(m[i])) + dm)
                    assert _round_half_even(x / g) == int(k[i]), (step, i)
        assert not np.signbit(k[ok & (k == 0)]).any()


class _FixedBits(RandomSource):
    """A seeded source whose first draw is the given words (to place U deliberately)."""

    def __init__(self, words: list[int]) -> None:
        super().__init__(seed=99)
        self._first: np.ndarray | None = np.array(words, dtype=np.uint64)

    def bits(self, size: int) -> np.ndarray:
        if self._first is not None:
            out, self._first = self._first, None
            assert out.size == size
            return out
        return super().bits(size)


@pytest.mark.parametrize("law", [Gaussian(1.0), Gaussian(3.0), Laplace(2.0)], ids=repr)
@pytest.mark.parametrize("jbits", [2**62 + 12345, 2**60 + 7, 2**50 + 3])  # u ≈ 0.5, 0.125, 1e-4
def test_cells_straddling_a_breakpoint_take_the_exact_path(law: NoiseDistribution,
                                                           jbits: int) -> None:
    """A breakpoint inside the fast path's float bracket forces the exact path.

    The breakpoint b is put inside the float64 bracket of M but outside the exact interval of M
    that the 63 bits leave open, so the answer is known: ``x = c + S·M`` lies wholly on one side
    of b. The cell must be counted as a fallback and get exactly that index.
    """
    fine = jbits >> 10 >= 2**43
    u_lo, u_hi = jbits * 2.0**-63, (jbits + 1) * 2.0**-63      # exact doubles
    if fine:                               # the fast path's bracket: [u53, u53 + 2^-53]
        mid, rad = law.rounding.fine(np.array([(jbits >> 10) * 2.0**-53]))
    else:                                  # small u: the exact 63-bit interval
        mid, rad = exact._mid_rad(*law.rounding.bounds(np.array([u_lo]), np.array([u_hi])))
    f_lo, f_hi = float(mid[0] - np.max(rad)), float(mid[0] + np.max(rad))
    with mpmath.workprec(200):
        def m_exact(u: float) -> Any:
            if isinstance(law, Laplace):
                return -mpmath.mpf(law.scale) * mpmath.log(mpmath.mpf(u))
            return mpmath.mpf(law.sigma) * _gauss_m(mpmath.mpf(u))

        m_hi, m_lo = m_exact(u_lo), m_exact(u_hi)            # m decreases in u
        b = mpmath.mpf(7.5)                                   # between indices 7 and 8
        cases = 0
        for v, above in (((f_lo + m_lo) / 2, True), ((m_hi + f_hi) / 2, False)):
            if min(abs(v - f_lo), abs(v - f_hi), abs(v - m_lo), abs(v - m_hi)) < 1e-14:
                continue                                      # no room on this side
            for positive in (True, False):
                sign = 1 if positive else -1
                c = float(b - sign * v)                       # x = b where M = v
                x_lo = c + sign * (m_lo if positive else m_hi)
                x_hi = c + sign * (m_hi if positive else m_lo)
                assert x_lo > b or x_hi < b                   # decided by the 63 bits
                want = 8 if x_lo > b else 7
                assert want == (8 if above == positive else 7)
                w = (2**63 if positive else 0) | jbits
                d = round_noisy(law, [c], 1.0, _FixedBits([w]))
                assert d.fallbacks == 1, (positive, v)
                assert d.index[0] == want and d.values[0] == float(want)
                cases += 1
        assert cases >= 2


def test_negative_zero_is_never_released() -> None:
    """The sign of a zero release would reveal the sign of the noise (not a function of x)."""
    for law in (Laplace(0.2), Gaussian(0.2), PolyPlace(0.2, 10.0)):
        for fast in (True, False):
            n = 5000 if fast else 60
            d = round_noisy(law, np.zeros(n), 1.0, RandomSource(seed=12), fast_path=fast)
            zeros = d.values == 0
            assert zeros.sum() > n // 2 and not np.signbit(d.values[zeros]).any()


# ------------------------------------------------------------------------------------------------
# Logistic, Subbotin, symmetric stable: float bounds on dense grids against mpmath
# ------------------------------------------------------------------------------------------------
U_DENSE = np.concatenate([10.0 ** -np.arange(300.0, 0.0, -12.5), [2.0**-63, 2.0**-10],
                          np.linspace(0.05, 0.95, 10), 1.0 - 2.0 ** -np.arange(5.0, 53.0, 6.0)])


@pytest.mark.parametrize("law", [Logistic(1.0), Logistic(1e-3), Subbotin(1.0, 1.0),
                                 Subbotin(1.2, 1.0), Subbotin(2.0, 5.0), Subbotin(3.0, 1.0),
                                 Subbotin(8.0, 1.0), Subbotin(15.9, 2.0),
                                 SymmetricStable(1.0, 1.0), SymmetricStable(2.0, 3.0)], ids=repr)
def test_float_bounds_dense_for_logconcave_and_stable_closed_forms(law: NoiseDistribution) -> None:
    """Bounds over [u, u(1 + 2^-52)] at 44 values of u from 1e-300 to 1 − 2^-47."""
    with np.errstate(all="ignore"):
        lo, hi = law.rounding.bounds(U_DENSE, U_DENSE * (1 + 2.0**-52))
    with mpmath.workprec(200):
        for u, a, b in zip(U_DENSE, lo, hi, strict=True):
            if not np.isfinite(b):
                assert u < 2.0**-63           # only beyond what releases use
                continue
            uu = mpmath.mpf(float(u))
            assert _tail(law, a) >= uu * (1 + mpmath.mpf(2) ** -52) and _tail(law, b) <= uu, u


@pytest.mark.slow
def test_symmetric_stable_float_bounds_against_mpmath() -> None:
    """1 < α < 2: the certified bounds (§4.6) at the release range's extremes, against mpmath.

    Each mpmath tail is a quadrature of about a second; a denser sweep runs with
    TABDP_DENSE_SWEEPS=1 (test_symmetric_stable_dense_sweep).
    """
    law = SymmetricStable(1.5, 2.0)
    us = np.array([2.0**-63, 1e-6, 0.5, 1.0 - 2.0**-30])
    lo, hi = law.rounding.bounds(us, us * (1 + 2.0**-52))
    with mpmath.workprec(100):
        for u, a, b in zip(us, lo, hi, strict=True):
            uu = mpmath.mpf(float(u))
            assert _tail(law, a) >= uu * (1 + mpmath.mpf(2) ** -52) and _tail(law, b) <= uu, u
            assert b - a <= 1e-13 * max(b, 1.0)


@pytest.mark.slow
def test_symmetric_stable_releases_follow_the_law() -> None:
    """SaS(1.5) releases: KS fit with power, no fallback at a 1%-of-spread grid."""
    law = SymmetricStable(1.5, 300.0)
    d = round_noisy(law, np.full(3000, 50.0), 1.0, RandomSource(seed=77))
    assert d.fallbacks == 0
    assert_ks_fits(d.values - 50.0, law.cdf)
    assert_power(d.values - 50.0, scaled_cdfs(law.cdf))


@pytest.mark.skipif(not os.environ.get("TABDP_DENSE_SWEEPS"),
                    reason="dense mpmath sweep of SaS quantile bounds (minutes): set "
                           "TABDP_DENSE_SWEEPS=1")
@pytest.mark.parametrize("alpha", [1.001, 1.01, 1.2, 1.5, 1.9, 1.99, 1.9999])
def test_symmetric_stable_dense_sweep(alpha: float) -> None:
    """SaS bounds against Nolan's integral (opt-in: about a minute per alpha; §4.4, §4.6).

    Also prints how much of the certified width the float quantile's error would use (above 1:
    the float quantile alone could not have been trusted at the table's width).
    """
    law = SymmetricStable(alpha, 1.0)
    us = np.concatenate([[2.0**-63, 1e-15, 1e-12, 1e-9, 1e-6, 1e-4, 1e-3, 2.0**-10, 0.01],
                         np.linspace(0.05, 0.95, 7), [0.99, 0.999, 1.0 - 2.0**-20,
                                                      1.0 - 2.0**-40]])
    lo, hi = law.rounding.bounds(us, us * (1 + 2.0**-52))
    mf = law._abs_isf(us)
    used = 0.0
    with mpmath.workprec(100):
        for u, a, b, m in zip(us, lo, hi, mf, strict=True):
            uu = mpmath.mpf(float(u))
            ta, tb, tm = _tail(law, a), _tail(law, b), _tail(law, m)
            assert ta >= uu * (1 + mpmath.mpf(2) ** -52) and tb <= uu, (alpha, u)
            # the float quantile's error as a fraction of the declared allowance hi − m
            used = max(used, float(abs(tm - uu) / (tm - tb)))
    print(f"alpha={alpha}: the float quantile uses at most {used:.2g} of its declared bound")


# -- regressions from the independent review ----------------------------------------------------

@pytest.mark.parametrize("law", [Gaussian(2.0 ** -1070), Laplace(2.0 ** -1070), Gaussian(1e-300)])
def test_subnormal_noise_scales_are_refused(law: Any) -> None:
    """The fast path's budgets are relative.

    A law at a subnormal scale (with a huge per-cell scale) released wrong indices before this was
    refused.
    """
    with pytest.raises(InvalidParameterError, match="2\\*\\*-960"):
        round_noisy(law, np.full(4, 1e-21), RelativeGrid(24), RandomSource(seed=1),
                    scale=np.full(4, 2.0 ** 1000))


@pytest.mark.parametrize("law", [Gaussian(1.0), Laplace(1.0)])
def test_tiny_per_cell_scales_are_decided_exactly(law: Any) -> None:
    n = 40
    c = np.zeros(n)
    s = np.full(n, 2.0 ** -980)
    g = 2.0 ** -1000
    fast = round_noisy(law, c, g, RandomSource(seed=3), scale=s)
    slow = round_noisy(law, c, g, RandomSource(seed=3), scale=s, fast_path=False)
    np.testing.assert_array_equal(fast.index, slow.index)
    assert fast.fallbacks == n                     # the tiny-scale cells took the exact path
    ok = round_noisy(law, c, 0.01, RandomSource(seed=3), scale=np.ones(n))
    assert ok.fallbacks == 0                       # ordinary scales stay on the fast path


def test_noiseless_exact_tie_goes_to_the_lower_point_and_terminates() -> None:
    """A scale of 0 with an exact centre on a breakpoint used to double the precision forever."""
    out = round_noisy(Gaussian(1.0), [2.5], 1.0, RandomSource(seed=0), scale=[0.0],
                      center_error=[1e-15], exact_center=lambda i, mp: mp.mpf(5) / 2)
    assert out.values.tolist() == [2.0]
    tie = round_noisy(Gaussian(1.0), [-0.5, 1.5], 1.0, RandomSource(seed=0), scale=[0.0, 0.0])
    assert tie.values.tolist() == [-1.0, 1.0]      # ties go down, as documented


def test_fallback_counts_are_not_in_the_public_summary() -> None:
    import polars as pl

    import tabdp

    s = tabdp.Session(seed=1)
    pl.DataFrame({"c": ["a"], "x": [1.0]}).dp.sum("x", by="c",
                                                  keys=tabdp.KeySet.from_dict(c=["a"]),
                                                  mechanism=mech.Gaussian(1.0), session=s)
    assert "fallbacks" not in str(s.report().to_dict())
    assert s.report().confidential_summary()["queries"][0]["exact_rounding_fallbacks"] == {"x": 0}


def test_exact_path_never_builds_huge_fractions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact path no longer builds Fractions of exp(-h**2/2) for h of thousands of sigmas.

    A grid far coarser than the noise used to make it do so (seconds and hundreds of MB per
    cell).
    """
    seen: list[int] = []
    real = exact._frac_of_mpf

    def spy(x: Any) -> Fraction:
        seen.append(abs(int(mpmath.mpf(x).man_exp[1])))
        return real(x)

    monkeypatch.setattr(exact, "_frac_of_mpf", spy)
    for law, g in ((Gaussian(1.0), 2e4), (Gaussian(1e-5), 1.0), (Laplace(1.0), 1e5)):
        slow = round_noisy(law, np.full(30, 0.3), g, RandomSource(seed=5), fast_path=False)
        fast = round_noisy(law, np.full(30, 0.3), g, RandomSource(seed=5))
        np.testing.assert_array_equal(slow.index, fast.index)
    assert max(seen, default=0) < 5000
