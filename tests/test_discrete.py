"""Exact discrete samplers (CKS 2020) and the DiscreteGaussian / DiscreteLaplace mechanisms.

Sampler checks are deterministic (fixed seeds): a χ² goodness-of-fit test on the integer grid (or
on bins for large scales) with tail bins merged so that every expected count is ≥ 5, rejecting only
at p ≤ 1e-6, plus a power check: the same sample must *reject* the law with scale × 0.7 and × 1.3.
Privacy checks sum the exact laws numerically (Rényi divergence, max log-ratio, hockey stick).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import tabdp.noise.discrete as dn
from tabdp.exceptions import DataValidationError, InvalidParameterError
from tabdp.mechanisms.discrete import DiscreteGaussian, DiscreteLaplace
from tabdp.noise.discrete import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    bernoulli_exp,
    discrete_gaussian,
    discrete_laplace,
    exact_fraction,
    geometric,
    reference_bernoulli_exp,
    reference_discrete_gaussian,
    reference_discrete_laplace,
)
from tabdp.privacy.conversions import zcdp_epsilon
from tabdp.rng import RandomSource

P_REJECT = 1e-6
Cdf = Callable[[np.ndarray], np.ndarray]


# ----------------------------------------------------------------------------------------------
# χ² helpers
# ----------------------------------------------------------------------------------------------
def chi2_pvalue(sample: np.ndarray, cdf: Cdf, edges: np.ndarray) -> float:
    """χ² p-value of integers against ``cdf`` on bins (-inf, e0], (e0, e1], ..., (e_m, inf).

    Bins with expected count below 5 are merged into their neighbour (tails merged inward).
    """
    x = np.asarray(sample).ravel()
    n = x.size
    edges = np.unique(np.asarray(edges, dtype=np.int64))
    c = np.concatenate([[0.0], np.asarray(cdf(edges.astype(np.float64)), np.float64), [1.0]])
    probs = np.diff(c)
    counts = np.bincount(np.searchsorted(edges, x, side="left"), minlength=edges.size + 1)
    exp_, obs = [], []
    acc_e, acc_o = 0.0, 0
    for p, o in zip(probs, counts, strict=True):
        acc_e += p * n
        acc_o += int(o)
        if acc_e >= 5.0:
            exp_.append(acc_e)
            obs.append(acc_o)
            acc_e, acc_o = 0.0, 0
    if exp_:
        exp_[-1] += acc_e
        obs[-1] += acc_o
    e = np.array(exp_)
    o = np.array(obs, np.float64)
    assert e.size >= 2, "too few bins for a chi-square test"
    e *= o.sum() / e.sum()  # float rounding of the cdf only
    return float(stats.chisquare(o, e).pvalue)


def grid_edges(std: float, center: float = 0.0, bins: int = 400) -> np.ndarray:
    """Integer edges: every integer for small laws, ``bins`` even steps over ±8 sd otherwise."""
    lo, hi = math.floor(center - 8 * std - 3), math.ceil(center + 8 * std + 3)
    if hi - lo <= bins:
        return np.arange(lo, hi + 1)
    return np.unique(np.round(np.linspace(lo, hi, bins + 1))).astype(np.int64)


def assert_fits(sample: np.ndarray, cdf: Cdf, edges: np.ndarray) -> float:
    """Assert the χ² test does not reject ``cdf`` (p > 1e-6)."""
    p = chi2_pvalue(sample, cdf, edges)
    assert p > P_REJECT, f"chi-square rejects the sampler: p = {p:.3g} (n = {np.size(sample)})"
    return p


def assert_power(sample: np.ndarray, wrong: dict[str, Cdf], edges: np.ndarray) -> None:
    """Assert the χ² test rejects every wrong law (p <= 1e-6)."""
    for name, cdf in wrong.items():
        p = chi2_pvalue(sample, cdf, edges)
        assert p <= P_REJECT, f"no power: wrong law {name} not rejected (p = {p:.3g})"


def two_sample_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """χ² test of homogeneity of two integer samples (values with < 5 expected pooled in tails)."""
    vals = np.unique(np.concatenate([a, b]))
    ca = np.array([(a == v).sum() for v in vals], np.float64)
    cb = np.array([(b == v).sum() for v in vals], np.float64)
    tot = ca + cb
    keep = tot * min(a.size, b.size) / (a.size + b.size) >= 5
    table = np.array([np.append(ca[keep], ca[~keep].sum()), np.append(cb[keep], cb[~keep].sum())])
    table = table[:, table.sum(axis=0) > 0]
    return float(stats.chi2_contingency(table, correction=False).pvalue)


def test_chi2_helpers_have_power_and_accept() -> None:
    x = np.random.default_rng(5).poisson(4.0, 20_000)
    edges = np.arange(0, 20)
    assert assert_fits(x, lambda k: stats.poisson.cdf(k, 4.0), edges) > P_REJECT
    with pytest.raises(AssertionError, match="rejects"):
        assert_fits(x, lambda k: stats.poisson.cdf(k, 4.4), edges)
    with pytest.raises(AssertionError, match="no power"):
        assert_power(x, {"right": lambda k: stats.poisson.cdf(k, 4.0)}, edges)
    y = np.random.default_rng(6).poisson(4.0, 5_000)
    assert two_sample_pvalue(x, y) > P_REJECT
    assert two_sample_pvalue(x, y + 1) <= P_REJECT


# ----------------------------------------------------------------------------------------------
# parameters: exact conversion
# ----------------------------------------------------------------------------------------------
def test_float_to_fraction_is_exact() -> None:
    assert exact_fraction(0.1) == Fraction(3602879701896397, 2**55) == Fraction(0.1)
    assert exact_fraction(0.1) != Fraction(1, 10)
    assert exact_fraction(np.float64(0.7)) == Fraction(0.7)
    assert exact_fraction(np.float32(0.1)) == Fraction(float(np.float32(0.1)))
    third = np.longdouble(1) / np.longdouble(3)  # extended precision kept, not rounded to float
    assert exact_fraction(third) == Fraction(*(int(v) for v in third.as_integer_ratio()))
    assert exact_fraction(Fraction(7, 3)) == Fraction(7, 3)
    assert exact_fraction(np.int64(5)) == 5
    # the samplers hold the exact value of the float, not a rounded one
    z = DiscreteLaplaceNoise(0.1)
    assert z.scale_exact == Fraction(0.1) and z.params() == {"scale": 0.1}
    g = DiscreteGaussianNoise(0.7)
    assert g.sigma2_exact == Fraction(0.7) ** 2 != Fraction(49, 100)
    assert g.sigma2_exact.denominator == 2**104  # far outside int64: the Python-int path
    assert DiscreteGaussianNoise(Fraction(1, 3)).params() == {"sigma": 1 / 3, "sigma_exact": "1/3"}
    for bad in (True, "1", float("nan"), float("inf"), None, 1j):
        with pytest.raises(InvalidParameterError):
            exact_fraction(bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 2.0**40 * 1.01, "2"])
def test_invalid_scales_refused(bad: object) -> None:
    with pytest.raises(InvalidParameterError):
        DiscreteGaussianNoise(bad)
    with pytest.raises(InvalidParameterError):
        DiscreteLaplace(bad)
    with pytest.raises(InvalidParameterError):
        discrete_gaussian(bad, 3, rng=0)


def test_invalid_gamma_and_size() -> None:
    with pytest.raises(InvalidParameterError):
        bernoulli_exp(-0.5, 3, rng=0)
    with pytest.raises(InvalidParameterError):
        reference_bernoulli_exp(Fraction(-1, 2), rng=0)
    with pytest.raises(InvalidParameterError):
        discrete_laplace(1.0, -1, rng=0)
    assert discrete_laplace(1.0, 0, rng=0).shape == (0,)
    assert discrete_gaussian(1.0, (2, 0), rng=0).shape == (2, 0)


# ----------------------------------------------------------------------------------------------
# uniform integers and Bernoulli draws
# ----------------------------------------------------------------------------------------------
class ScriptedSource(RandomSource):
    """A seeded source that first returns scripted 64-bit words (to force rare branches)."""

    def __init__(self, words: list[int], seed: int = 0) -> None:
        super().__init__(seed=seed)
        self.queue = [np.uint64(w) for w in words]

    def bits(self, size: int) -> np.ndarray:
        """The queued words first, then seeded ones."""
        n = int(size)
        take = self.queue[:n]
        self.queue = self.queue[n:]
        rest = super().bits(n - len(take)) if n > len(take) else np.zeros(0, np.uint64)
        return np.concatenate([np.array(take, np.uint64), rest])


def test_uniform_below_rejects_the_biased_top() -> None:
    m = 2**63 + 1  # 64-bit words; 2**64 mod m = 2**63 - 1, so words above 2**63 are rejected
    src = ScriptedSource([2**63 + 5, 7])
    assert dn._uniform_below(src, m, 1).tolist() == [7]
    src = ScriptedSource([2**63, 7])  # the largest accepted word
    assert dn._uniform_below(src, m, 1).tolist() == [2**63]
    # 32-bit pieces: m = 3·2**26 + 1 -> limit 2**32 - 1 - (2**32 mod m)
    m = 3 * 2**26 + 1
    lim = 2**32 - 1 - 2**32 % m
    src = ScriptedSource([lim + 1, 5])  # rejected, then the next word's piece (5) accepted
    assert dn._uniform_below(src, m, 1).tolist() == [5]
    src = ScriptedSource([(9 << 32) | lim])  # two pieces of one word: both accepted
    assert dn._uniform_below(src, m, 2).tolist() == [lim % m, 9]
    assert dn._ref_uniform_below(ScriptedSource([2**63 + 5, 7]), 2**63 + 1) == 7


@pytest.mark.parametrize("m", [3, 7, 255, 256, 1000, 3 * 2**26 + 1, 2**40 + 3, 2**64])
def test_uniform_below_is_uniform(m: int) -> None:
    x = dn._uniform_below(RandomSource(seed=m % 1000), m, 60_000)
    assert x.dtype == np.uint64
    assert int(x.max()) < m
    bins = min(m, 50)
    # bin by floor(x·bins/m) exactly (Python ints); each bin has an exact probability
    idx = np.array([(int(v) * bins) // m for v in x])
    edges_mass = [(-(-(k * m) // bins)) for k in range(bins + 1)]  # ceil(k m / bins)
    pairs = zip(edges_mass[:-1], edges_mass[1:], strict=True)
    probs = np.array([(hi - lo) / m for lo, hi in pairs])
    obs = np.bincount(idx, minlength=bins)
    p = stats.chisquare(obs, probs * x.size).pvalue
    assert p > P_REJECT


def test_lazy_bernoulli_ties_are_resolved_exactly() -> None:
    d = 3  # r/d = 1/3: first 64 binary digits P = floor(2**64/3), remainder (2**64 mod 3)/3 = 1/3
    p64 = (1 << 64) // 3
    n = 30_000
    f = dn._bern_ratio_lazy
    src = ScriptedSource([p64 - 1] * n)
    assert f(src, np.full(n, p64, np.uint64), lambda i: 1, d)(np.arange(n)).all()
    src = ScriptedSource([p64 + 1] * n)
    assert not f(src, np.full(n, p64, np.uint64), lambda i: 1, d)(np.arange(n)).any()
    src = ScriptedSource([p64] * n, seed=11)  # every draw ties: settled by Bernoulli(1/3)
    k = int(f(src, np.full(n, p64, np.uint64), lambda i: 1, d)(np.arange(n)).sum())
    assert stats.binomtest(k, n, 1 / 3).pvalue > P_REJECT
    assert stats.binomtest(k, n, 0.3).pvalue <= P_REJECT


GAMMAS = [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(3, 2), Fraction(0.7),
          Fraction(5, 2), Fraction(7), Fraction(10**30 + 1, 10**29), Fraction(1, 2**70 + 1)]


@pytest.mark.parametrize("gamma", GAMMAS, ids=[str(g)[:12] for g in GAMMAS])
def test_bernoulli_exp_frequencies(gamma: Fraction) -> None:
    n = 200_000
    x = bernoulli_exp(gamma, n, rng=RandomSource(seed=gamma.numerator % 997))
    k = int(x.sum())
    p = math.exp(-gamma)
    if gamma == 0:
        assert k == n
        return
    assert stats.binomtest(k, n, p).pvalue > P_REJECT
    if 0.1 <= gamma <= 3:  # power: a 5% error in γ is detected
        assert stats.binomtest(k, n, math.exp(-1.05 * gamma)).pvalue <= P_REJECT


def test_bernoulli_exp_huge_gamma_and_float_gamma() -> None:
    assert not bernoulli_exp(2**63, 20, rng=1).any()  # integer part beyond int64: split path
    assert bernoulli_exp(0.0, 5, rng=1).all()
    x = bernoulli_exp(0.25, 100_000, rng=2)  # float gamma, exact 1/4
    assert stats.binomtest(int(x.sum()), x.size, math.exp(-0.25)).pvalue > P_REJECT


def test_reference_bernoulli_matches() -> None:
    src = RandomSource(seed=4)
    k = sum(reference_bernoulli_exp(Fraction(4, 3), src) for _ in range(6_000))
    assert stats.binomtest(k, 6_000, math.exp(-4 / 3)).pvalue > P_REJECT


# ----------------------------------------------------------------------------------------------
# discrete Laplace / geometric
# ----------------------------------------------------------------------------------------------
def dlap_cdf(scale: float) -> Cdf:
    """CDF of the discrete Laplace law."""
    return DiscreteLaplaceNoise(scale).cdf


def geom_cdf(scale: float) -> Cdf:
    """CDF of the geometric law P(k) = (1 - e^(-1/scale)) e^(-k/scale)."""
    def cdf(k: np.ndarray) -> np.ndarray:
        k = np.floor(np.asarray(k, np.float64))
        return np.where(k < 0, 0.0, -np.expm1(-(k + 1) / scale))

    return cdf


DLAP_SCALES = [0.5, 1.0, 3.0, 1 / 0.7, Fraction(7, 3), 1000.0]


@pytest.mark.parametrize("scale", DLAP_SCALES, ids=[str(s) for s in DLAP_SCALES])
def test_discrete_laplace_law(scale: float) -> None:
    law = DiscreteLaplaceNoise(scale)
    n = 100_000
    x = law.sample(n, rng=RandomSource(seed=17))
    assert x.dtype == np.int64
    edges = grid_edges(law.std())
    assert_fits(x, law.cdf, edges)
    s = float(scale)
    assert_power(x, {"x0.7": dlap_cdf(0.7 * s), "x1.3": dlap_cdf(1.3 * s)}, edges)


@pytest.mark.parametrize("scale", [0.5, 2.0, 1 / 0.7])
def test_geometric_law(scale: float) -> None:
    x = geometric(scale, 100_000, rng=3)
    assert x.min() >= 0
    edges = np.arange(0, math.ceil(30 * scale) + 2)
    assert_fits(x, geom_cdf(scale), edges)
    assert_power(x, {"x0.7": geom_cdf(0.7 * scale), "x1.3": geom_cdf(1.3 * scale)}, edges)


def test_discrete_laplace_huge_numerator_fallback() -> None:
    # t = 2**64 + 1 > int64: the scalar Python-int path (only reachable with Fraction input)
    scale = Fraction(2**64 + 1, 2**63)
    law = DiscreteLaplaceNoise(scale)
    x = law.sample(8_000, rng=5)
    edges = grid_edges(law.std())
    assert_fits(x, law.cdf, edges)
    assert_power(x, {"x0.7": dlap_cdf(1.4), "x1.3": dlap_cdf(2.6)}, edges)


def test_combine_overflow_fallback() -> None:
    u = np.array([3, 3], np.int64)
    v = np.array([1, 2**40], np.int64)
    t, s = 2**30, 2**20
    y = dn._combine(u, v, t, s)  # 3 + 2**70 overflows int64: Python ints for that element
    assert y.tolist() == [(3 + t) // s, (3 + t * 2**40) // s]
    assert dn._combine(u, np.array([1, 2], np.int64), 5, 2**64).tolist() == [0, 0]
    with pytest.raises(OverflowError, match="2\\*\\*62"):
        dn._combine(u, v, t, 1)


def test_vectorized_matches_reference_discrete_laplace() -> None:
    src = RandomSource(seed=8)
    ref = np.array([reference_discrete_laplace(1.5, src) for _ in range(12_000)])
    vec = discrete_laplace(1.5, 100_000, rng=9)
    assert two_sample_pvalue(ref, vec) > P_REJECT
    law = DiscreteLaplaceNoise(1.5)
    assert_fits(ref, law.cdf, grid_edges(law.std()))
    assert two_sample_pvalue(ref, discrete_laplace(1.95, 100_000, rng=9)) <= P_REJECT


# ----------------------------------------------------------------------------------------------
# discrete Gaussian
# ----------------------------------------------------------------------------------------------
def dg_cdf(sigma: float) -> Cdf:
    """CDF of the discrete Gaussian law."""
    return DiscreteGaussianNoise(sigma).cdf


DG_SIGMAS = [0.5, 1.0, 3.0, 0.7, 3.18570299, 1e3, 1000.3]


@pytest.mark.parametrize("sigma", DG_SIGMAS, ids=[str(s) for s in DG_SIGMAS])
def test_discrete_gaussian_law(sigma: float) -> None:
    law = DiscreteGaussianNoise(sigma)
    n = 100_000
    x = law.sample(n, rng=RandomSource(seed=23))
    assert x.dtype == np.int64
    edges = grid_edges(law.std())
    assert_fits(x, law.cdf, edges)
    assert_power(x, {"x0.7": dg_cdf(0.7 * sigma), "x1.3": dg_cdf(1.3 * sigma)}, edges)


@pytest.mark.parametrize("path", ["int64", "python"])
def test_discrete_gaussian_both_paths(path: str) -> None:
    x = dn._dgauss_vec(RandomSource(seed=31), Fraction(3), 60_000, path=path)
    edges = grid_edges(3.0)
    assert_fits(x, dg_cdf(3.0), edges)
    assert_power(x, {"x0.7": dg_cdf(2.1), "x1.3": dg_cdf(3.9)}, edges)


def test_discrete_gaussian_split_of_huge_integer_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Force the "integer part >= _Q_MAX" split on common values (in production it needs γ >= 2**62)
    monkeypatch.setattr(dn, "_Q_MAX", 3)
    x = dn._dgauss_vec(RandomSource(seed=37), Fraction(0.5), 60_000, path="python")
    edges = grid_edges(0.5)
    assert_fits(x, dg_cdf(0.5), edges)
    assert_power(x, {"x0.7": dg_cdf(0.35), "x1.3": dg_cdf(0.65)}, edges)
    y = bernoulli_exp(Fraction(9, 2), 100_000, rng=38)  # q = 4 >= 3: split path
    assert stats.binomtest(int(y.sum()), y.size, math.exp(-4.5)).pvalue > P_REJECT


def test_discrete_gaussian_int64_path_refuses_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match="int64"):
        dn._dg_accept(RandomSource(seed=1), np.array([1], np.int64), 2**80, 1, 2**40, "int64")


def test_discrete_gaussian_tiny_sigma() -> None:
    # γ(±1) ≈ 5e19 > 2**62: proposals ±1 go through the split path and are rejected
    assert not discrete_gaussian(1e-10, 2_000, rng=3).any()


def test_vectorized_matches_reference_discrete_gaussian() -> None:
    src = RandomSource(seed=41)
    ref = np.array([reference_discrete_gaussian(1.3, src) for _ in range(10_000)])
    vec = discrete_gaussian(1.3, 100_000, rng=42)
    assert two_sample_pvalue(ref, vec) > P_REJECT
    law = DiscreteGaussianNoise(1.3)
    assert_fits(ref, law.cdf, grid_edges(law.std()))
    assert two_sample_pvalue(ref, discrete_gaussian(1.69, 100_000, rng=42)) <= P_REJECT


def test_determinism_under_seed() -> None:
    a = discrete_gaussian(2.5, 1000, rng=RandomSource(seed=5))
    b = discrete_gaussian(2.5, 1000, rng=RandomSource(seed=5))
    c = discrete_gaussian(2.5, 1000, rng=RandomSource(seed=6))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(discrete_laplace(0.9, 50, rng=7), discrete_laplace(0.9, 50, rng=7))
    assert discrete_laplace(1.0, 10, rng=None).dtype == np.int64  # secure source works


# ----------------------------------------------------------------------------------------------
# the laws: pmf, cdf/sf, variance, half-widths
# ----------------------------------------------------------------------------------------------
def exact_pmf_dg(sigma: float, ys: np.ndarray) -> np.ndarray:
    """Discrete Gaussian pmf on ``ys`` normalized by math.fsum."""
    w = [math.exp(-(int(y) ** 2) / (2 * sigma * sigma)) for y in ys]
    s = math.fsum(w)
    return np.array(w) / s


@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.5, 40.0])
def test_dg_pmf_cdf_sf_variance(sigma: float) -> None:
    law = DiscreteGaussianNoise(sigma)
    L = math.ceil(40 * sigma) + 5
    ys = np.arange(-L, L + 1)
    pmf = exact_pmf_dg(sigma, ys)
    np.testing.assert_allclose(law.pmf(ys), pmf, rtol=1e-12, atol=0)
    assert math.isclose(float(np.sum(law.pmf(ys))), 1.0, rel_tol=1e-13)
    var = math.fsum(float(y) ** 2 * p for y, p in zip(ys, pmf, strict=True))
    assert math.isclose(law.variance(), var, rel_tol=1e-12)
    for k in [-L, -3, -1, 0, 1, 2, int(3 * sigma), int(10 * sigma)]:
        sf = math.fsum(pmf[ys > k])
        cdf = math.fsum(pmf[ys <= k])
        assert math.isclose(float(law.sf(k)), sf, rel_tol=1e-11, abs_tol=1e-300)
        assert math.isclose(float(law.cdf(k)), cdf, rel_tol=1e-11, abs_tol=1e-300)
        assert float(law.sf(k + 0.5)) == float(law.sf(k))  # lives on the integers
    assert float(law.pmf(0.5)) == 0.0 and float(law.logpmf(np.inf)) == -np.inf
    assert np.isnan(law.cdf(np.nan)) and float(law.cdf(np.inf)) == 1.0
    assert float(law.sf(-np.inf)) == 1.0


def test_dg_large_sigma_euler_maclaurin_matches_direct_sums() -> None:
    sigma = 6e4  # beyond the table: Euler–Maclaurin tails and Poisson normalizer
    law = DiscreteGaussianNoise(sigma)
    assert not law._table
    y = np.arange(0, math.ceil(40 * sigma), dtype=np.float64)
    f = np.exp(-(y * y) / (2 * sigma * sigma))
    tail = np.cumsum(f[::-1].astype(np.longdouble))[::-1]
    norm = 2 * float(tail[0]) - 1
    for k in [0, 1, 1000, 60_000, 150_000, 400_000]:
        assert math.isclose(float(law.sf(k)), float(tail[k + 1]) / norm, rel_tol=1e-10)
    assert law.variance() == sigma**2
    h = law.interval_halfwidth(0.9)
    assert 1.0 - 2.0 * float(tail[h + 1]) / norm >= 0.9 > 1.0 - 2.0 * float(tail[h]) / norm


def test_dl_pmf_cdf_variance() -> None:
    for scale in (0.4, 1.0, 7.5):
        law = DiscreteLaplaceNoise(scale)
        ys = np.arange(-int(60 * scale) - 10, int(60 * scale) + 11)
        w = np.exp(-np.abs(ys) / scale)
        pmf = w / math.fsum(w)
        np.testing.assert_allclose(law.pmf(ys), pmf, rtol=1e-12)
        var = math.fsum(float(y) ** 2 * p for y, p in zip(ys, pmf, strict=True))
        assert math.isclose(law.variance(), var, rel_tol=1e-10)
        for k in (-5, -1, 0, 3, 20):
            assert math.isclose(float(law.sf(k)), math.fsum(pmf[ys > k]), rel_tol=1e-10)
            assert math.isclose(float(law.cdf(k)), math.fsum(pmf[ys <= k]), rel_tol=1e-10)
        assert float(law.sf(1e6)) == 0.0 and float(law.cdf(-1e6)) == 0.0


@pytest.mark.parametrize("law", [DiscreteGaussianNoise(0.4), DiscreteGaussianNoise(1.0),
                                 DiscreteGaussianNoise(7.3), DiscreteLaplaceNoise(0.3),
                                 DiscreteLaplaceNoise(2.0), DiscreteGaussianNoise(1e3)],
                         ids=repr)
@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.999])
def test_interval_halfwidth_is_smallest_covering(law: object, level: float) -> None:
    h = law.interval_halfwidth(level)
    assert isinstance(h, int) and h >= 0
    inside = lambda m: 1.0 - 2.0 * float(law.sf(m))  # noqa: E731  P(|Z| <= m)
    assert inside(h) >= level
    if h > 0:
        assert inside(h - 1) < level
    with pytest.raises(InvalidParameterError):
        law.interval_halfwidth(1.0)


def test_noise_repr_eq_hash() -> None:
    assert DiscreteGaussianNoise(2.0) == DiscreteGaussianNoise(2)
    assert DiscreteGaussianNoise(2.0) != DiscreteLaplaceNoise(2.0)
    assert hash(DiscreteLaplaceNoise(1.5)) == hash(DiscreteLaplaceNoise(1.5))
    assert repr(DiscreteLaplaceNoise(1.5)) == "DiscreteLaplaceNoise(scale=1.5)"


# ----------------------------------------------------------------------------------------------
# mechanisms: policies and privacy checks by exact summation
# ----------------------------------------------------------------------------------------------
def test_policies() -> None:
    m = DiscreteGaussian(sigma=2.0)
    assert m.rho([0, 1, 2, 3]).tolist() == [0.0, 1 / 8, 0.5, 9 / 8]
    assert m.rho([0.5, 1.0000001, np.inf]).tolist() == [np.inf] * 3
    assert m.epsilon([0, 1]).tolist() == [0.0, np.inf]
    assert not m.pure and not m.gaussian_dp and m.dp_delta is None
    assert m.family == "discrete_gaussian" and "integer" in m.policy_formula
    lap = DiscreteLaplace(scale=4.0)
    assert lap.epsilon([0, 1, 8, 2.5]).tolist() == [0.0, 0.25, 2.0, np.inf]
    assert math.isclose(float(lap.rho(1)), 0.25 * math.tanh(0.125), rel_tol=1e-15)
    assert math.isinf(float(lap.rho(0.5))) and lap.pure and lap.family == "discrete_laplace"
    d = lap.to_dict()
    assert d["class"] == "DiscreteLaplace" and d["params"] == {"scale": 4.0} and d["pure"]
    assert DiscreteGaussian(1.5).to_dict()["params"] == {"sigma": 1.5}
    assert DiscreteGaussian(2.0) == DiscreteGaussian(2)
    assert repr(lap) == "DiscreteLaplace(scale=4.0)"


def renyi(law: DiscreteGaussianNoise, shift: int, alpha: float) -> float:
    """Rényi divergence D_α(law ‖ law shifted by ``shift``) by exact summation."""
    L = math.ceil(60 * law.sigma) + 60 + shift
    ys = np.arange(-L, L + 1, dtype=np.float64)
    lp = law.logpmf(ys)
    lq = law.logpmf(ys - shift)
    return float(logsumexp(alpha * lp + (1 - alpha) * lq)) / (alpha - 1)


@pytest.mark.parametrize("sigma", [0.4, 0.7, 1.0, 3.0])
@pytest.mark.parametrize("alpha", [2.0, 8.0])
def test_dg_renyi_within_rho(sigma: float, alpha: float) -> None:
    m = DiscreteGaussian(sigma)
    for shift in (1, 2, 3):
        div = renyi(m.noise, shift, alpha)
        bound = alpha * float(m.rho(shift))
        assert div <= bound * (1 + 1e-12), (shift, div, bound)
        assert div > 0.5 * bound  # and not vacuous


@pytest.mark.parametrize("scale", [0.3, 1.0, 2.5, 1 / 0.7])
def test_dl_max_log_ratio_is_epsilon(scale: float) -> None:
    m = DiscreteLaplace(scale)
    ys = np.arange(-200, 201, dtype=np.float64)
    for shift in (1, 2, 5):
        ratio = np.abs(m.noise.logpmf(ys) - m.noise.logpmf(ys - shift))
        assert math.isclose(float(ratio.max()), float(m.epsilon(shift)), rel_tol=1e-12)


def hockey_stick(law: DiscreteGaussianNoise, shift: int, eps: float) -> float:
    """Σ_y max(0, P(y) − e^ε P(y − Δ)), every term computed from the log-pmfs (no cancellation)."""
    L = math.ceil(45 * law.sigma) + 60 + shift
    ys = np.arange(-L, L + 1, dtype=np.float64)
    lp = law.logpmf(ys)
    lq = law.logpmf(ys - shift) + eps
    gap = lq - lp
    with np.errstate(under="ignore"):
        terms = np.where(gap < 0, np.exp(lp) * -np.expm1(np.minimum(gap, 0.0)), 0.0)
    return math.fsum(terms.tolist())


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_dg_approx_epsilon_exact(sigma: float, delta: float) -> None:
    m = DiscreteGaussian(sigma)
    shifts = np.array([1, 2, 3])
    eps = m.approx_epsilon(shifts, delta)
    zc = zcdp_epsilon(m.rho(shifts), delta)
    assert np.all(eps <= zc)
    for shift, e in zip(shifts.tolist(), eps.tolist(), strict=True):
        assert hockey_stick(m.noise, shift, e) <= delta
        assert math.isclose(float(m.delta_at(shift, e)), hockey_stick(m.noise, shift, e),
                            rel_tol=1e-6, abs_tol=1e-300)
        if e > 0:  # tight: a slightly smaller ε breaks δ
            assert hockey_stick(m.noise, shift, e * (1 - 1e-4)) > delta
    out = m.approx_epsilon([0.0, 0.5, 2.0], delta)
    assert out[0] == 0.0 and math.isinf(out[1]) and out[2] == eps[1]


def test_dg_approx_epsilon_large_shift_and_tiny_delta() -> None:
    m = DiscreteGaussian(1.0)
    e = m.approx_epsilon([40], 1e-12)  # ρ = 800: tails far in the underflow range
    assert np.isfinite(e).all() and hockey_stick(m.noise, 40, float(e[0])) <= 1e-12
    tiny = m.approx_epsilon([1], 1e-300)  # below the exact range: zCDP conversion only
    assert float(tiny[0]) == float(zcdp_epsilon(0.5, 1e-300))
    with pytest.raises(InvalidParameterError):
        m.approx_epsilon([1], 0.0)


def test_dg_delta_at_vs_continuous() -> None:
    m = DiscreteGaussian(20.0)  # large σ: close to the continuous Gaussian's exact profile
    from tabdp.privacy.conversions import gdp_delta

    assert math.isclose(float(m.delta_at(1, 0.1)), float(gdp_delta(1 / 20, 0.1)), rel_tol=1e-3)
    assert float(m.delta_at(0.5, 0.1)) == 1.0 and float(m.delta_at(0, 0.1)) == 0.0


# ----------------------------------------------------------------------------------------------
# mechanisms: release
# ----------------------------------------------------------------------------------------------
MECHS = [DiscreteGaussian(2.0), DiscreteGaussian(0.7), DiscreteLaplace(1.5), DiscreteLaplace(0.3)]


@pytest.mark.parametrize("m", MECHS, ids=repr)
def test_release_integers_and_table(m: DiscreteGaussian | DiscreteLaplace) -> None:
    q = np.array([0.0, 5.0, -12.0, 2.0**52, -(2.0**52) + 1])
    r = m.release_table(q, rng=3, level=0.9)
    assert r.estimate.dtype == np.float64
    assert np.all(r.estimate == np.round(r.estimate))
    h = m.noise.interval_halfwidth(0.9)
    assert np.all(r.moe == h) and np.all(r.upper - r.estimate == h)
    assert np.all(r.estimate - r.lower == h) and r.level == 0.9
    assert np.allclose(r.sd, m.noise.std()) and np.allclose(m.sd_at(q), m.noise.std())
    assert np.all(m.moe_at(q, 0.9) == h)
    # exact integer arithmetic: the noise is recovered exactly from the estimate
    z = m.noise.sample(q.size, rng=3)
    assert np.array_equal(r.estimate.astype(np.int64) - q.astype(np.int64), z)
    assert np.array_equal(m.release(q, rng=3), r.estimate)  # deterministic under a seed


@pytest.mark.parametrize("m", MECHS[:3], ids=repr)
def test_release_coverage_at_least_level(m: DiscreteGaussian | DiscreteLaplace) -> None:
    n = 40_000
    level = 0.9
    q = np.full(n, 100.0)
    r = m.release_table(q, rng=RandomSource(seed=12), level=level)
    cover = float(np.mean((r.lower <= q) & (q <= r.upper)))
    exact = 1.0 - 2.0 * float(m.noise.sf(m.noise.interval_halfwidth(level)))
    assert exact >= level
    assert abs(cover - exact) < 6 * math.sqrt(exact * (1 - exact) / n)


def test_release_refuses_non_integers_before_drawing() -> None:
    m = DiscreteGaussian(1.0)
    src = RandomSource(seed=1)
    state = dict(src._gen.bit_generator.state)
    with pytest.raises(DataValidationError, match=r"2 value\(s\) are not integers") as err:
        m.release_table([1.0, 2.5, 3.0, -0.25], rng=src)
    msg = str(err.value)
    assert "Hint" in msg and "integer measure" in msg and "continuous mechanism" in msg
    assert "round" in msg
    assert src._gen.bit_generator.state == state  # nothing was drawn
    with pytest.raises(DataValidationError, match="2\\*\\*53"):
        DiscreteLaplace(1.0).release_table([2.0**53], rng=1)
    with pytest.raises(DataValidationError, match="NaN"):
        DiscreteLaplace(1.0).release_table([np.nan, 1.0], rng=1)
    with pytest.raises(InvalidParameterError):
        m.release_table([1.0], rng=1, level=1.5)
