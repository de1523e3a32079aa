"""Exact discrete samplers (CKS 2020) and the DiscreteGaussian / DiscreteLaplace mechanisms.

Sampler checks are deterministic (fixed seeds): a χ² goodness-of-fit test on the integer grid (or
on bins for large scales) with tail bins merged so that every expected count is ≥ 5, rejecting only
at p ≤ 1e-6, plus a power check: the same sample must *reject* the law with scale × 0.7 and × 1.3.
Privacy checks sum the exact laws numerically (Rényi divergence, max log-ratio, hockey stick);
accounting, half-widths and (ε, δ) are checked against independent exact references (fractions, or
mpmath at 50–80 digits), never against the library's own float sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import tabdp.mechanisms as mech
import tabdp.mechanisms.discrete as dn_mech
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


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 2.0**40 * 1.01, "2",
                                 1e-154, 5e-324, 2.0**-41, Fraction(1, 2**40 + 1)])
def test_invalid_scales_refused(bad: object) -> None:
    with pytest.raises(InvalidParameterError):
        DiscreteGaussianNoise(bad)
    with pytest.raises(InvalidParameterError):
        DiscreteLaplace(bad)
    with pytest.raises(InvalidParameterError):
        discrete_gaussian(bad, 3, rng=0)
    finite = isinstance(bad, float | Fraction) and math.isfinite(bad)
    with pytest.raises(InvalidParameterError, match=r"2\*\*-40" if finite else None):
        DiscreteLaplaceNoise(bad)


@pytest.mark.parametrize("law", [DiscreteGaussianNoise(dn.MIN_SCALE),
                                 DiscreteLaplaceNoise(dn.MIN_SCALE),
                                 DiscreteGaussianNoise(Fraction(1, 2**40)),
                                 DiscreteGaussianNoise(1e-12), DiscreteLaplaceNoise(1e-12)],
                         ids=repr)
def test_smallest_scales_are_well_defined(
        law: DiscreteGaussianNoise | DiscreteLaplaceNoise) -> None:
    # below MIN_SCALE σ² underflowed (σ ≲ 1e-154) and 1/scale overflowed (5e-324): NaN laws
    assert dn.MIN_SCALE == 2.0**-40
    ys = np.arange(-3, 4)
    pmf = law.pmf(ys)
    assert not np.isnan(pmf).any() and pmf.tolist() == [0, 0, 0, 1, 0, 0, 0]
    assert law.sf(0) == 0.0 and law.cdf(-1) == 0.0 and law.cdf(0) == 1.0
    assert law.variance() == 0.0 and law.std() == 0.0
    assert law.interval_halfwidth(0.999) == 0
    assert not law.sample(1000, rng=1).any()


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


# Fraction(2**70 + 1, 3·2**69 + 7) ≈ 2/3 has a denominator above 2**64: the lazy Bernoulli path,
# tested with power like the others (a γ near 0 would be indistinguishable from γ = 0).
GAMMAS = [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(3, 2), Fraction(0.7),
          Fraction(5, 2), Fraction(7), Fraction(10**30 + 1, 10**29),
          Fraction(2**70 + 1, 3 * 2**69 + 7)]


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
        assert stats.binomtest(k, n, math.exp(-0.95 * gamma)).pvalue <= P_REJECT


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


def test_combine_guard_on_the_int64_path() -> None:
    # 3·((2**63 − 1)//3) = 2**63 − 2 fits int64 (no Python fallback) but exceeds 2**62
    with pytest.raises(OverflowError, match="2\\*\\*62"):
        dn._combine(np.array([0], np.int64), np.array([(2**63 - 1) // 3], np.int64), 3, 1)
    with pytest.raises(OverflowError, match="2\\*\\*62"):
        dn._combine(np.array([0, 5], np.int64), np.array([1, 2**61], np.int64), 2, 1)
    edge = dn._combine(np.array([2**62 - 1 - 6], np.int64), np.array([2], np.int64), 3, 1)
    assert edge.tolist() == [2**62 - 1]  # the largest value allowed




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


# The pure-Python references cost ~100 µs a draw, so they get ~10k draws; the parameters are
# chosen to cover the paths that differ most from the references: a scale t/s with s > 1 (the
# rejection on U/t and floor((U + tV)/s)), and σ = 0.7, whose σ² has denominator 2**104 (the
# Python-int acceptance step with lazy 64-bit Bernoulli draws).
REF_CASES = [("laplace", Fraction(7, 3), 12_000), ("gaussian", 0.7, 10_000)]


@pytest.mark.parametrize(("kind", "param", "n_ref"), REF_CASES, ids=["laplace-7/3", "gauss-0.7"])
def test_vectorized_matches_reference(kind: str, param: float, n_ref: int) -> None:
    ref_fn = reference_discrete_laplace if kind == "laplace" else reference_discrete_gaussian
    vec_fn = discrete_laplace if kind == "laplace" else discrete_gaussian
    law_of = DiscreteLaplaceNoise if kind == "laplace" else DiscreteGaussianNoise
    src = RandomSource(seed=8)
    ref = np.array([ref_fn(param, src) for _ in range(n_ref)])
    vec = vec_fn(param, 200_000, rng=9)
    law = law_of(param)
    edges = grid_edges(law.std())
    # the same law: neither the two-sample test nor the fits to the exact law reject ...
    assert two_sample_pvalue(ref, vec) > P_REJECT
    assert_fits(ref, law.cdf, edges)
    assert_fits(vec, law.cdf, edges)
    # ... and both comparisons have power: a 10% error in the parameter is detected either way
    s = float(param)
    for f in (0.9, 1.1):
        assert two_sample_pvalue(ref, vec_fn(s * f, 200_000, rng=10)) <= P_REJECT
    assert_power(ref, {"x0.9": law_of(0.9 * s).cdf, "x1.1": law_of(1.1 * s).cdf}, edges)


@pytest.mark.parametrize("draw", [lambda r: discrete_gaussian(0.5, 300_000, rng=r),
                                  lambda r: discrete_gaussian(Fraction(1, 3), 300_000, rng=r),
                                  lambda r: discrete_laplace(0.3, 300_000, rng=r)],
                         ids=["gauss-0.5", "gauss-1/3", "laplace-0.3"])
def test_slots_are_independent(draw: Callable[[RandomSource], np.ndarray]) -> None:
    # Every output slot must keep its own sequence of trials: a χ² test of independence on the
    # pairs of consecutive outputs (values clipped to [-2, 2]) at small scales, where most draws
    # need several rounds of the vectorized rejection loops.
    x = draw(RandomSource(seed=99))
    def table(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        t = np.zeros((5, 5))
        np.add.at(t, (np.clip(a, -2, 2) + 2, np.clip(b, -2, 2) + 2), 1)
        return t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]

    pairs = table(x[0::2], x[1::2])
    assert pairs.shape[0] >= 3
    assert stats.chi2_contingency(pairs, correction=False).pvalue > P_REJECT
    shifted = table(x[1:-1:2], x[2::2])  # the other pairing
    assert stats.chi2_contingency(shifted, correction=False).pvalue > P_REJECT
    # position in the batch does not matter either (four quarters, same law)
    quarters = np.stack([np.bincount(np.clip(q, -2, 2) + 2, minlength=5)
                         for q in np.array_split(x, 4)]).astype(np.float64)
    quarters = quarters[:, quarters.sum(axis=0) > 0]
    assert stats.chi2_contingency(quarters, correction=False).pvalue > P_REJECT
    # power: the test rejects pairs made dependent by sorting each pair
    srt = np.sort(x.reshape(-1, 2), axis=1)
    dep = table(srt[:, 0], srt[:, 1])
    assert stats.chi2_contingency(dep, correction=False).pvalue <= P_REJECT


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


_COVERAGE: dict[str, list[mpmath.mpf]] = {}


def exact_coverages(law: DiscreteGaussianNoise | DiscreteLaplaceNoise) -> list[mpmath.mpf]:
    """P(|Z| <= h) for h = 0, 1, ...

    While below 1 − 1e-20, by direct summation of the exact pmf in 50-digit arithmetic (independent
    of the library's sums; cached per law).
    """
    key = repr(law)
    if key not in _COVERAGE:
        with mpmath.workdps(50):
            if isinstance(law, DiscreteLaplaceNoise):
                sc = law.scale_exact
                p = mpmath.exp(-mpmath.mpf(sc.denominator) / sc.numerator)
                c0 = (1 - p) / (1 + p)
                size = int(60 * law.scale) + 30
                w = [c0 * p**k for k in range(size)]
            else:
                s2 = mpmath.mpf(law.sigma2_exact.numerator) / law.sigma2_exact.denominator
                size = int(45 * law.sigma) + 30
                w = [mpmath.exp(-mpmath.mpf(k * k) / (2 * s2)) for k in range(size)]
                norm = w[0] + 2 * mpmath.fsum(w[1:])
                w = [x / norm for x in w]
            cov, acc = [], w[0]
            for k in range(1, size):
                cov.append(acc)
                if acc > 1 - mpmath.mpf(10) ** -20:
                    break
                acc += 2 * w[k]
        _COVERAGE[key] = cov
    return _COVERAGE[key]


def smallest_covering(cov: list[mpmath.mpf], level: float) -> int:
    """The exact answer: the smallest h with P(|Z| <= h) >= level (level's exact binary value)."""
    lv = mpmath.mpf(level)
    return next(h for h, c in enumerate(cov) if c >= lv)


COVER_LAWS = [DiscreteGaussianNoise(0.4), DiscreteGaussianNoise(1.0), DiscreteGaussianNoise(7.3),
              DiscreteGaussianNoise(Fraction(1, 3)), DiscreteGaussianNoise(40.0),
              DiscreteLaplaceNoise(0.3), DiscreteLaplaceNoise(2.0),
              DiscreteLaplaceNoise(0.9102392266268374), DiscreteLaplaceNoise(Fraction(7, 3))]


@pytest.mark.parametrize("law", COVER_LAWS, ids=repr)
def test_interval_halfwidth_is_smallest_covering(law: object) -> None:
    cov = exact_coverages(law)
    for level in (0.5, 0.9, 0.95, 0.999, 0.123456789):
        h = law.interval_halfwidth(level)
        assert isinstance(h, int) and h >= 0
        assert cov[h] >= mpmath.mpf(level)  # covers (exactly) ...
        assert h == smallest_covering(cov, level)  # ... and is the smallest that does
    with pytest.raises(InvalidParameterError):
        law.interval_halfwidth(1.0)


@pytest.mark.parametrize("law", COVER_LAWS, ids=repr)
def test_interval_halfwidth_settles_near_ties_exactly(law: object) -> None:
    # levels at (and one double either side of) the exact coverages: the float comparison alone
    # cannot tell them apart; the half-width must still cover exactly and be the smallest
    cov = exact_coverages(law)
    for h in range(0, min(len(cov), 300), max(1, len(cov) // 25)):
        c = float(cov[h])
        if not 0.0 < c < 1.0:
            continue
        for level in (c, math.nextafter(c, 0.0), math.nextafter(c, 1.0)):
            if level >= 1.0:
                continue
            got = law.interval_halfwidth(level)
            assert got == smallest_covering(cov, level), (h, level, got)
            assert cov[got] >= mpmath.mpf(level)


def test_interval_halfwidth_reported_case() -> None:
    # was 0, whose exact coverage is 0.5 − 1.5e-17 (reviewer's case), and its float neighbours
    law = DiscreteLaplaceNoise(0.9102392266268374)
    assert law.interval_halfwidth(0.5) == 1
    sc = 1 / math.log(3)  # P(|Z| <= 0) = (1 − p)/(1 + p) = 1/2 exactly at p = 1/3
    for step in range(-30, 31):
        x = sc
        for _ in range(abs(step)):
            x = math.nextafter(x, math.inf if step > 0 else 0.0)
        lw = DiscreteLaplaceNoise(x)
        h = lw.interval_halfwidth(0.5)
        assert exact_coverages(lw)[h] >= mpmath.mpf(0.5)


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
    with mpmath.workdps(40):
        exact_rho = mpmath.mpf(0.25) * mpmath.tanh(mpmath.mpf(0.125))
        assert exact_rho <= float(lap.rho(1)) <= exact_rho * (1 + mpmath.mpf(1e-14))
    assert math.isinf(float(lap.rho(0.5))) and lap.pure and lap.family == "discrete_laplace"
    d = lap.to_dict()
    assert d["class"] == "DiscreteLaplace" and d["params"] == {"scale": 4.0} and d["pure"]
    assert DiscreteGaussian(1.5).to_dict()["params"] == {"sigma": 1.5}
    assert DiscreteGaussian(2.0) == DiscreteGaussian(2)
    assert repr(lap) == "DiscreteLaplace(scale=4.0)"


ROUND_SCALES = [3.0, 0.1, 1 / 0.7, 7.3, 1e-3, Fraction(1, 3), Fraction(1, 31),
                Fraction(10**20 + 1, 10**19), 2.0**-40, 2.0**40,
                *np.random.default_rng(3).uniform(0.01, 100.0, 12).tolist()]
ROUND_DELTAS = np.array([0.0, 1.0, 2.0, 3.0, 7.0, 10.0, 12345.0, 2.0**52 + 1, 1e300, 2.5])


@pytest.mark.parametrize("scale", ROUND_SCALES, ids=[str(s)[:10] for s in ROUND_SCALES])
def test_policies_are_rounded_up(scale: float | Fraction) -> None:
    ex = exact_fraction(scale)
    lap, dg = DiscreteLaplace(scale), DiscreteGaussian(scale)
    eps, rho, lrho = lap.epsilon(ROUND_DELTAS), dg.rho(ROUND_DELTAS), lap.rho(ROUND_DELTAS)
    assert math.isinf(eps[-1]) and math.isinf(rho[-1]) and math.isinf(lrho[-1])  # Δ = 2.5
    for i, d in enumerate(ROUND_DELTAS[:-1].tolist()):
        # ε = Δ/scale: the smallest double >= the exact rational
        e_exact = Fraction(int(d)) / ex
        e = float(eps[i])
        assert e == float(lap.epsilon(d))  # same value alone and in an array
        if math.isinf(e):
            assert e_exact > Fraction(np.finfo(np.float64).max)
        else:
            assert Fraction(e) >= e_exact
            assert e == 0.0 or Fraction(math.nextafter(e, 0.0)) < e_exact
        # ρ = Δ²/(2σ²): never below; the smallest double for a Fraction σ, a few ulps for a double
        r_exact = Fraction(int(d)) ** 2 / (2 * ex * ex)
        r = float(rho[i])
        assert r == float(dg.rho(d))
        if math.isinf(r):
            assert r_exact > Fraction(np.finfo(np.float64).max) / 2
        else:
            assert Fraction(r) >= r_exact
            if Fraction(float(ex)) != ex:  # exact fractions: the smallest double
                assert r == 0.0 or Fraction(math.nextafter(r, 0.0)) < r_exact
            else:
                assert r <= float(r_exact) * (1 + 2.0**-50)
        # ρ of the discrete Laplace: ε·tanh(ε/2) at the exact ε, never below
        lr = float(lrho[i])
        if math.isfinite(lr) and lr > 0:
            with mpmath.workdps(50):
                em = mpmath.mpf(e_exact.numerator) / e_exact.denominator
                x = em * mpmath.tanh(em / 2)
                assert x <= lr <= x * (1 + mpmath.mpf(1e-14))


def test_reported_rounding_cases() -> None:
    assert Fraction(float(DiscreteLaplace(3).epsilon(1))) > Fraction(1, 3)  # was 0.333...33 < 1/3
    assert float(DiscreteGaussian(Fraction(1, 31)).rho(1)) == 480.5  # was 480.49999999999994
    assert DiscreteLaplace(4.0).epsilon([1, 8]).tolist() == [0.25, 2.0]  # exact values stay exact
    assert DiscreteGaussian(0.5).rho(3).tolist() == 18.0


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


def em_delta_reference(sigma: float, shift: int, eps: float) -> mpmath.mpf:
    """δ(ε) of the discrete Gaussian with large σ at 80 digits.

    Euler–Maclaurin tails with 11 Bernoulli terms (written independently of the library:
    mpmath.hermite, exact threshold).
    """
    with mpmath.workdps(80):
        s = mpmath.mpf(Fraction(sigma).numerator) / Fraction(sigma).denominator

        def tail(m: int) -> mpmath.mpf:  # Σ_{y >= m} exp(−y²/(2σ²))
            x = mpmath.mpf(m) / s
            f = mpmath.exp(-x * x / 2)
            tot = s * mpmath.sqrt(2 * mpmath.pi) * mpmath.ncdf(-x) + f / 2
            for k in range(1, 12):
                j = 2 * k - 1
                he = mpmath.hermite(j, x / mpmath.sqrt(2)) * mpmath.power(2, -mpmath.mpf(j) / 2)
                tot -= mpmath.bernoulli(2 * k) / mpmath.factorial(2 * k) * (-1 / s) ** j * he * f
            return tot

        norm = 2 * tail(0) - 1
        k1 = math.floor(Fraction(eps) * Fraction(sigma) ** 2 / shift - Fraction(shift, 2))

        def sf(k: int) -> mpmath.mpf:  # P(Z > k)
            return tail(k + 1) / norm if k >= 0 else 1 - tail(-k) / norm

        return sf(k1) - mpmath.exp(mpmath.mpf(eps)) * sf(k1 + shift)


@pytest.mark.parametrize("sigma", [1e6, 1e9, 2.0**40])
def test_dg_approx_epsilon_large_sigma_never_understates_delta(sigma: float) -> None:
    # δ = a − b cancels (a/δ grows like σ/Δ) and the tails come from Euler–Maclaurin: the float
    # evaluation understated δ by up to 0.6% (σ = 2**40), so the returned ε was not valid
    m = DiscreteGaussian(sigma)
    for delta in (1e-20, 1e-16):
        eps = m.approx_epsilon([1, 3], delta)
        for shift, e in zip((1, 3), eps.tolist(), strict=True):
            ref = em_delta_reference(sigma, shift, e)
            assert ref <= delta, (shift, delta, e, ref / delta)
            assert ref >= delta * (1 - 1e-6)  # and tight
            got = float(m.delta_at(shift, e))
            assert ref <= got <= ref * (1 + mpmath.mpf(1e-9))


def direct_delta_reference(sigma: float | Fraction, shift: int, eps: float) -> mpmath.mpf:
    """δ(ε) = Σ_z max(0, P(z) − e^ε·P(z + Δ)) for σ <= 1, by direct summation at 60 digits."""
    with mpmath.workdps(60):
        s2 = Fraction(sigma) ** 2
        s2m = mpmath.mpf(s2.numerator) / s2.denominator
        zs = range(-80, 200)
        w = {z: mpmath.exp(-mpmath.mpf(z * z) / (2 * s2m)) for z in range(-80, 200 + shift)}
        norm = mpmath.fsum(w[z] for z in zs)
        ee = mpmath.exp(mpmath.mpf(eps))
        terms = [w[z] - ee * w[z + shift] for z in zs]
        return mpmath.fsum(t for t in terms if t > 0) / norm


def test_dg_delta_at_threshold_on_an_integer() -> None:
    # at ε = ℓ(z0) the threshold εσ²/Δ − Δ/2 is the integer z0 and its float value may fall on the
    # wrong side; at small σ the term at z0 then dominates δ (1e-256 against 1e-292 computed)
    for sigma in (0.3, 0.7, Fraction(1, 3)):
        m = DiscreteGaussian(sigma)
        s2 = Fraction(sigma) ** 2
        for shift in (1, 2, 5):
            for z0 in (0, 1, 3, 10):
                e0 = float((z0 + Fraction(shift, 2)) * shift / s2)
                for e in (e0, math.nextafter(e0, 0.0), math.nextafter(e0, math.inf)):
                    ref = direct_delta_reference(sigma, shift, e)
                    got = float(m.delta_at(shift, e))
                    assert ref <= got, (sigma, shift, z0, e)
                    if ref > 1e-300:
                        assert got <= ref * (1 + mpmath.mpf(1e-6)), (sigma, shift, z0, e)


@pytest.mark.parametrize("bad", [float("nan"), -0.1, float("inf"), "1", None])
def test_dg_delta_at_validates_epsilon(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="epsilon"):
        DiscreteGaussian(1.0).delta_at(1, bad)


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
    # no magnitude limit any more (a refusal would reveal a large total): exact integers
    big = DiscreteLaplace(1.0).release_table([2.0**53, 3e18], rng=1).estimate
    assert abs(big[0] - 2.0**53) < 100 and abs(big[1] - 3e18) < 1e3
    with pytest.raises(DataValidationError, match="NaN"):
        DiscreteLaplace(1.0).release_table([np.nan, 1.0], rng=1)
    with pytest.raises(InvalidParameterError):
        m.release_table([1.0], rng=1, level=1.5)


# ----------------------------------------------------------------------------------------------
# mechanisms: grids and the int64 guard
# ----------------------------------------------------------------------------------------------
def test_round_to_multiple_ties_to_even() -> None:
    x = np.array([-25, -15, -5, 5, 15, 25, 14, 16, -16, 0, -1, 9], np.int64)
    got = dn_mech._round_to_multiple(x, 10).tolist()
    assert got == [-20, -20, 0, 0, 20, 20, 10, 20, -20, 0, 0, 10]
    big = np.array([2**62 + 2**53 - 1, -(2**62) - 2**53 + 1], np.int64)  # no int64 overflow
    assert dn_mech._round_to_multiple(big, 2**53).tolist() == [2**62 + 2**53, -(2**62) - 2**53]


@pytest.mark.parametrize("m", [DiscreteGaussian(3.0), DiscreteLaplace(Fraction(7, 3))], ids=repr)
def test_release_on_a_grid(m: DiscreteGaussian | DiscreteLaplace) -> None:
    q = np.arange(-60.0, 60.0) * 7
    base = m.release_table(q, rng=5, level=0.9)
    h = m.noise.interval_halfwidth(0.9)
    assert base.grid is None and np.all(base.moe == h)
    for exact_grid in (None, 1, 1.0, np.int64(1)):  # the exact integers, bit for bit
        r = m.release_table(q, rng=5, level=0.9, grid=exact_grid)
        assert np.array_equal(r.estimate, base.estimate) and r.grid is None
        assert np.all(r.moe == h)
    ints = base.estimate.astype(np.int64).tolist()
    for k in (2, 3, 10, 10.0, np.int64(4), Fraction(5)):
        kk = int(k)
        r = m.release_table(q, rng=5, level=0.9, grid=k)
        # round(Fraction) rounds half to even: the nearest multiple of k, ties to the even one
        want = [round(Fraction(v, kk)) * kk for v in ints]
        assert r.estimate.tolist() == want and r.grid == float(kk)
        assert np.all(r.moe == h + kk / 2) and np.all(r.upper - r.estimate == h + kk / 2)
        assert np.all(r.estimate - r.lower == h + kk / 2)
        assert np.all(m.moe_at(q, 0.9, grid=k) == h + kk / 2)
        assert np.array_equal(m.release(q, rng=5, grid=k), r.estimate)  # the base release
    assert np.array_equal(m.release(q, rng=5), base.estimate)
    assert np.all(m.moe_at(q, 0.9, grid=None) == h)


@pytest.mark.parametrize("bad", [0.5, 0, -2, 2.5, float("nan"), float("inf"), True, "10",
                                 2**60, Fraction(5, 2), 1e300, [10]])
def test_release_refuses_non_integer_grids_before_drawing(bad: object) -> None:
    m = DiscreteGaussian(2.0)
    src = RandomSource(seed=1)
    state = dict(src._gen.bit_generator.state)
    with pytest.raises(InvalidParameterError, match="integers") as err:
        m.release_table([1.0, 2.0], rng=src, grid=bad)
    assert "Hint" in str(err.value) and repr(bad) in str(err.value)
    assert src._gen.bit_generator.state == state  # nothing was drawn
    with pytest.raises(InvalidParameterError, match="grid"):
        m.moe_at([1.0], 0.9, grid=bad)


def test_release_grid_interval_covers() -> None:
    m = DiscreteGaussian(2.0)
    n, level, k = 40_000, 0.9, 5
    q = np.full(n, 101.0)
    r = m.release_table(q, rng=RandomSource(seed=13), level=level, grid=k)
    assert np.all(r.estimate % k == 0)
    assert float(np.mean((r.lower <= q) & (q <= r.upper))) >= level


def test_release_adds_huge_draws_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # A draw that would leave int64 (no correct source gives one) is added in Python integers:
    # nothing wraps and nothing is refused (the old OverflowError is gone on purpose).
    m = DiscreteLaplace(1.0)
    huge = 2**63 - 2**52
    monkeypatch.setattr(m.noise, "sample", lambda size, rng=None: np.full(size, huge, np.int64))
    got = m.release_table([2.0**53 - 1], rng=1).estimate
    assert got.tolist() == [float(2**53 - 1 + huge)]
    monkeypatch.setattr(m.noise, "sample", lambda size, rng=None: np.full(size, -huge, np.int64))
    got = m.release_table([-(2.0**53) + 1], rng=1, grid=10).estimate
    assert got.tolist() == [float(round(Fraction(-(2**53) + 1 - huge, 10)) * 10)]


# -- counts default to exact integer noise -----------------------------------------------------

@pytest.mark.parametrize("given, grid, want", [
    (None, None, mech.DiscreteGaussian(2.0)),
    (mech.Gaussian(3.0), None, mech.DiscreteGaussian(3.0)),
    (mech.Laplace(2.5), None, mech.DiscreteLaplace(2.5)),
    (mech.Gaussian(30.0), 3, mech.DiscreteGaussian(30.0)),  # at most a tenth of the sd
    (mech.Gaussian(3.0), 0.25, mech.Gaussian(3.0)),
    (mech.Laplace(2.5), {"count": 0.25}, mech.Laplace(2.5)),
])
def test_counts_use_exact_integer_noise(given, grid, want):
    import polars as pl

    import tabdp

    df = pl.DataFrame({"c": ["a", "a", "b", "b", "b"]})
    keys = tabdp.KeySet.from_dict(c=["a", "b", "z"])
    s = tabdp.Session(seed=7)
    out = df.dp.count(by="c", keys=keys, mechanism=given, grid=grid, session=s)
    assert s.records[0].mechanism == want
    est = out["count"].to_numpy()
    if isinstance(want, (mech.DiscreteGaussian, mech.DiscreteLaplace)):
        step = 1 if grid is None else grid
        assert np.all(est == np.round(est / step) * step)
        # the guarantee recorded is the discrete law's: ρ(1) = 1/(2σ²), ε(1) = 1/t
        assert s.report().per_record["rho"][0] == pytest.approx(float(want.rho(1.0)))
    else:
        assert s.records[0].mechanism.family == given.family


@pytest.mark.parametrize("cls", [mech.DiscreteGaussian, mech.DiscreteLaplace])
def test_release_table_engine_totals_equal_python_ints(cls: Callable[..., object]) -> None:
    """Engine Int128 totals (the int64 fast path) release what Python integers release.

    Same seed, same estimates; a total beyond 2**61 and a missing one take the exact path and
    agree too.
    """
    import polars as pl

    from tabdp.mechanisms import ExactTotals

    m = cls(3.0)
    for vals in ([0, 5, -7, 2**61, -(2**61)], [1, 2**61 + 1, None, -4]):
        col = ExactTotals(pl.Series(vals, dtype=pl.Int128))
        ints = ExactTotals([0 if v is None else v for v in vals])
        fast = col.int64_numer(2**61)
        assert (fast is not None) == (max(abs(v or 0) for v in vals) <= 2**61)
        a = m.release_table(col, rng=7, level=0.9)  # type: ignore[attr-defined]
        b = m.release_table(ints, rng=7, level=0.9)  # type: ignore[attr-defined]
        assert a.estimate.tolist() == b.estimate.tolist()
        assert a.moe.tolist() == b.moe.tolist()
    assert ExactTotals(pl.Series([1, None, -3], dtype=pl.Int64)).int64_numer(2**61).tolist() \
        == [1, 0, -3]
