"""Tests of the transformation mechanisms (seed 001 §4, Alg. 1, Thm 4.4, 4.9; MATH.md §1.2–1.3).

References are computed independently of the implementation: Gauss–Hermite_e quadrature (exact
for the polynomial estimators), adaptive quadrature split at the kink of sign(x)|x|^k, exact
rational arithmetic, and numerical Rényi divergences.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss
from scipy import integrate, optimize, stats
from scipy.special import ndtr, ndtri

from tabdp.exceptions import DataValidationError, InvalidParameterError
from tabdp.mechanisms import (
    Gaussian,
    LogTransform,
    Mechanism,
    ReleasedValues,
    RootTransform,
    TransformationMechanism,
)
from tabdp.rng import RandomSource

EMPLOYEES = [5, 5, 10, 20, 30, 10000]  # seed 001, Table 1 / Example 2.16

_X, _W = hermegauss(120)
_W = _W / math.sqrt(2.0 * math.pi)  # weights of E[h(Z)], Z ~ N(0, 1)


def gh_mean_var(fn, v: float, sigma: float) -> tuple[float, float]:
    """Mean and variance of fn(v + σZ) by 120-node Gauss–Hermite_e quadrature."""
    vals = fn(v + sigma * _X)
    m = float(np.sum(_W * vals))
    return m, float(np.sum(_W * (vals - m) ** 2))


def quad_mean_var(fn, v: float, sigma: float) -> tuple[float, float]:
    """Mean and variance of fn(v + σZ) by adaptive quadrature, split at the kink x = 0."""
    t = v / sigma
    lim = 12.0 + 2.0 * math.sqrt(2.0 * 30)
    phi = lambda z: math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)  # noqa: E731
    pieces = [(-lim, -t), (-t, lim)] if t < lim else [(-lim, lim)]
    opts = {"epsabs": 0.0, "epsrel": 1e-11, "limit": 500}

    def integral(h):
        return sum(integrate.quad(h, lo, hi, **opts)[0] for lo, hi in pieces)

    g = lambda z: float(fn(np.array(v + sigma * z)))  # noqa: E731
    m = integral(lambda z: g(z) * phi(z))
    return m, integral(lambda z: (g(z) - m) ** 2 * phi(z))


def sign_pow(x, k: float):
    x = np.asarray(x, dtype=np.float64)
    return np.sign(x) * np.abs(x) ** k


def mean_estimator(k: int, sigma: float, a: float):
    """σ^k He_k(x/σ) − a via numpy's HermiteE series (independent of the implementation)."""
    coef = np.zeros(k + 1)
    coef[k] = 1.0
    return lambda x: sigma**k * np.polynomial.hermite_e.hermeval(np.asarray(x) / sigma, coef) - a


def f_ext(m: TransformationMechanism, x):
    """The map f extended to ℝ (inverse of the median estimator plus a), to recover ṽ."""
    x = np.asarray(x, dtype=np.float64)
    if isinstance(m, LogTransform):
        return np.log(x)
    return sign_pow(x, 1.0 / m.k)


# ------------------------------------------------------------------------------------------------
# Seed 001 examples
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("estimator", ["mean", "median"])
def test_example_4_6_fourth_root(estimator):
    m = RootTransform(k=4, sigma=2.0, offset=0.0, estimator=estimator)
    rho = m.rho(EMPLOYEES)
    assert rho.round(4).tolist() == [0.2795, 0.2795, 0.3953, 0.5590, 0.6847, 12.5]
    assert rho.round(1).tolist() == [0.3, 0.3, 0.4, 0.6, 0.7, 12.5]
    np.testing.assert_allclose(rho, np.sqrt(EMPLOYEES) / 8.0, rtol=1e-14)
    # 10000^(1/4)/8 = 12.5, reported rounded up (pow within an ulp): never below, 1e-13 above
    assert 12.5 <= rho[-1] <= 12.5 * (1 + 1e-13)


@pytest.mark.parametrize("estimator", ["mean", "median"])
def test_example_4_8_log(estimator):
    m = LogTransform(sigma=2.0, offset=1.0, estimator=estimator)
    rho = m.rho(EMPLOYEES)
    assert rho.round(1).tolist() == [0.4, 0.4, 0.7, 1.2, 1.5, 10.6]
    np.testing.assert_allclose(rho, np.log(1.0 + np.array(EMPLOYEES)) ** 2 / 8.0, rtol=1e-14)
    # ln(10001)²/8 = 10.60403 (MATH.md prints 10.6036, which is ln(10000)²/8 = 10.60380 rounded
    # inconsistently; the seed only states ≈ 10.6).
    assert rho[-1] == pytest.approx(math.log(10001.0) ** 2 / 8.0, rel=1e-15)
    assert round(float(rho[-1]), 3) == 10.604


# ------------------------------------------------------------------------------------------------
# Policy functions
# ------------------------------------------------------------------------------------------------
POLICY_CASES = [
    RootTransform(k=1, sigma=1.3),
    RootTransform(k=1.5, sigma=0.7, offset=0.5, estimator="median"),
    RootTransform(k=2, sigma=2.0, offset=3.0),
    RootTransform(k=3, sigma=1.0, offset=1e4),
    RootTransform(k=4, sigma=2.0),
    RootTransform(k=7.5, sigma=0.2, offset=2.0, estimator="median"),
    LogTransform(sigma=2.0, offset=1.0),
    LogTransform(sigma=0.3, offset=0.1, estimator="median"),
    LogTransform(sigma=1.0, offset=50.0),
]


def f_plain(m: TransformationMechanism, x):
    return np.log(x) if isinstance(m, LogTransform) else np.asarray(x, dtype=float) ** (1.0 / m.k)


@pytest.mark.parametrize("m", POLICY_CASES, ids=repr)
def test_policy_matches_general_formula_and_is_monotone(m):
    a = m.offset
    delta = np.geomspace(1e-3 * max(a, 1.0), 1e12, 200)
    expected = (f_plain(m, delta + a) - f_plain(m, a)) ** 2 / (2.0 * m.sigma**2)
    np.testing.assert_allclose(m.rho(delta), expected, rtol=1e-9)
    assert np.all(np.diff(m.rho(delta)) > 0)
    assert float(m.rho(0.0)) == 0.0
    np.testing.assert_array_equal(m.rho(-delta), m.rho(delta))
    assert float(m.rho(np.inf)) == np.inf
    np.testing.assert_array_equal(m.epsilon([0.0, 1e-300, 5.0]), [0.0, np.inf, np.inf])


@pytest.mark.parametrize("m", POLICY_CASES, ids=repr)
def test_policy_has_no_cancellation_for_tiny_delta(m):
    d, a, s2 = 1e-12, m.offset, m.sigma**2
    if isinstance(m, LogTransform):
        lead = (d / a) ** 2 / (2 * s2)
    elif a == 0.0:
        lead = d ** (2.0 / m.k) / (2 * s2)
    else:
        lead = (a ** (1.0 / m.k - 1.0) * d / m.k) ** 2 / (2 * s2)  # f'(a)²Δ²/(2σ²)
    assert float(m.rho(d)) == pytest.approx(lead, rel=1e-9, abs=0.0)


def test_policy_of_identity_root_is_gaussian():
    d = np.array([0.0, 0.1, 3.0, 1e6])
    np.testing.assert_allclose(RootTransform(k=1, sigma=2.0).rho(d), Gaussian(sigma=2.0).rho(d),
                               rtol=1e-15)
    np.testing.assert_allclose(RootTransform(k=1, sigma=2.0, offset=7.0).rho(d),
                               Gaussian(sigma=2.0).rho(d), rtol=1e-12)


def test_policy_extreme_inputs_stay_finite_and_accurate():
    # Δ/a overflows, and (k = 1) expm1(ln(1 + Δ/a)/k) overflows although the gap does not
    m = RootTransform(k=1, sigma=1.0, offset=1e-310)
    # rounded up by the error bound of e^(lk + ln a/k) with |ln a| = 714: ~6e-12 relative
    assert float(m.rho(1e150)) == pytest.approx(1e300 / 2, rel=2e-11)
    m = RootTransform(k=2, sigma=1.0, offset=1e-300)
    assert float(m.rho(1e300)) == pytest.approx(1e300 / 2, rel=2e-11)
    m = LogTransform(sigma=1.0, offset=1e-300)
    assert float(m.rho(1e300)) == pytest.approx((600 * math.log(10)) ** 2 / 2, rel=1e-12)


# ------------------------------------------------------------------------------------------------
# Privacy: numerical Rényi divergences of neighbouring output distributions
# ------------------------------------------------------------------------------------------------
def renyi_gaussians(mu1: float, mu2: float, sigma: float, alpha: float) -> float:
    """D_α(N(μ1, σ²) ‖ N(μ2, σ²)) by quadrature: (α−1)⁻¹ ln ∫ p^α q^(1−α)."""
    c = math.log(sigma) + 0.5 * math.log(2.0 * math.pi)

    def log_integrand(x):
        lp = -0.5 * ((x - mu1) / sigma) ** 2 - c
        lq = -0.5 * ((x - mu2) / sigma) ** 2 - c
        return alpha * lp + (1.0 - alpha) * lq

    span = abs(mu1 - mu2) * alpha + 10 * sigma
    res = optimize.minimize_scalar(lambda x: -log_integrand(x),
                                   bounds=(min(mu1, mu2) - span, max(mu1, mu2) + span),
                                   method="bounded", options={"xatol": 1e-10 * sigma})
    x0, l0 = float(res.x), float(log_integrand(res.x))
    val = integrate.quad(lambda x: math.exp(log_integrand(x) - l0), x0 - 40 * sigma,
                         x0 + 40 * sigma, points=[x0], epsabs=0.0, epsrel=1e-10, limit=200)[0]
    return (l0 + math.log(val)) / (alpha - 1.0)


PRIVACY_CASES = [
    RootTransform(k=4, sigma=2.0),
    RootTransform(k=2.5, sigma=1.5, offset=3.0, estimator="median"),
    RootTransform(k=2, sigma=30.0, offset=1.0),
    LogTransform(sigma=2.0, offset=1.0),
    LogTransform(sigma=0.5, offset=10.0, estimator="median"),
]


@pytest.mark.parametrize("m", PRIVACY_CASES, ids=repr)
def test_renyi_divergence_bounded_by_policy_and_tight_at_zero(m):
    for delta in (0.5, 10.0, 1e4, 1e6):
        rho = float(m.rho(delta))
        for q in (0.0, 1.0, 100.0, 1e5):
            mu1, mu2 = (float(x) for x in m.transform([q, q + delta]))
            for alpha in (2.0, 8.0):
                d12 = renyi_gaussians(mu1, mu2, m.sigma, alpha)
                d21 = renyi_gaussians(mu2, mu1, m.sigma, alpha)
                assert max(d12, d21) <= alpha * rho * (1 + 1e-7) + 1e-12
                if q == 0.0:
                    assert d12 == pytest.approx(alpha * rho, rel=1e-6)
                    assert d21 == pytest.approx(alpha * rho, rel=1e-6)


# ------------------------------------------------------------------------------------------------
# Estimators: unbiasedness
# ------------------------------------------------------------------------------------------------
ROOT_GRID = [(k, q, a, s) for k in (1, 2, 3, 4, 5, 8) for q in (0.0, 0.7, 13.0, 2500.0)
             for a, s in ((0.0, 0.5), (1.5, 2.0))]


@pytest.mark.parametrize("k,q,a,sigma", ROOT_GRID)
def test_root_mean_estimator_is_exactly_unbiased(k, q, a, sigma):
    m = RootTransform(k=k, sigma=sigma, offset=a)
    v = float(m.transform([q])[0])
    # the implementation's estimator agrees with the HermiteE polynomial
    xs = v + sigma * _X
    ref = mean_estimator(k, sigma, a)(xs)
    np.testing.assert_allclose(m.estimate(xs), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
    mean, _ = gh_mean_var(m.estimate, v, sigma)
    scale = float(np.sum(_W * np.abs(m.estimate(xs)))) + a + 1.0
    assert abs(mean - q) <= 1e-11 * scale


@pytest.mark.parametrize("q,a,sigma", [(0.0, 1.0, 0.3), (5.0, 1.0, 2.0), (1e4, 0.5, 1.0),
                                       (3.0, 100.0, 0.05)])
def test_log_mean_estimator_is_unbiased(q, a, sigma):
    m = LogTransform(sigma=sigma, offset=a)
    mean, _ = gh_mean_var(m.estimate, float(m.transform([q])[0]), sigma)
    assert mean == pytest.approx(q, rel=1e-10, abs=1e-10 * a)


MEDIAN_CASES = [RootTransform(k=k, sigma=s, offset=a, estimator="median")
                for k, s, a in ((1, 1.0, 0.0), (2, 0.7, 0.0), (2.5, 1.2, 3.0), (3, 2.0, 0.0),
                                (4, 1.0, 0.5), (6, 0.3, 0.0))] + [
    LogTransform(sigma=0.8, offset=1.0, estimator="median"),
    LogTransform(sigma=2.0, offset=0.1, estimator="median")]


@pytest.mark.parametrize("m", MEDIAN_CASES, ids=repr)
def test_median_estimator_is_median_unbiased(m):
    lim = 20.0 if isinstance(m, LogTransform) else 50.0
    grid = np.linspace(-lim, lim, 20001)
    g = m.median_estimate(grid)
    assert np.all(np.diff(g) > 0)  # strictly increasing on ℝ (even k included)
    np.testing.assert_array_equal(m.estimate(grid), g)
    for q in (0.0, 0.3, 7.0, 900.0):
        v = float(m.transform([q])[0])
        assert float(m.median_estimate([v])[0]) == pytest.approx(q, rel=1e-12, abs=1e-12)
        # P(g(v + σZ) <= q) by quadrature: locate the crossing, integrate the density up to it
        z_star = optimize.brentq(
            lambda z, v=v, q=q: float(m.median_estimate([v + m.sigma * z])[0]) - q,
            -10.0, 10.0, xtol=1e-14)
        p = integrate.quad(stats.norm.pdf, -np.inf, z_star)[0]
        assert p == pytest.approx(0.5, abs=1e-10)
        assert ndtr(z_star) == pytest.approx(0.5, abs=1e-10)


def test_median_estimator_is_not_mean_unbiased_and_vice_versa():
    q, s = 2.0, 1.0
    med = RootTransform(k=4, sigma=s, estimator="median")
    mean = RootTransform(k=4, sigma=s, estimator="mean")
    v = float(med.transform([q])[0])
    assert gh_mean_var(med.estimate, v, s)[0] - q > 1.0  # sizeable upward bias
    assert float(mean.estimate([v])[0]) != pytest.approx(q, rel=1e-3)  # g_mean(v) != q


# ------------------------------------------------------------------------------------------------
# Exact standard deviations
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k,q,a,sigma", ROOT_GRID)
def test_root_mean_sd_equals_quadrature_variance(k, q, a, sigma):
    m = RootTransform(k=k, sigma=sigma, offset=a)
    _, var = gh_mean_var(mean_estimator(k, sigma, a), float(m.transform([q])[0]), sigma)
    assert float(m.sd_at([q])[0]) ** 2 == pytest.approx(var, rel=1e-10)


@pytest.mark.parametrize("q,a,sigma", [(0.0, 0.0, 1.0), (3.0, 0.5, 2.0), (1e6, 1.0, 0.1),
                                       (42.0, 0.0, 7.0)])
def test_root_mean_sd_closed_forms_k2_k4(q, a, sigma):
    x = q + a
    var2 = 2 * sigma**4 + 4 * sigma**2 * x
    var4 = (24 * sigma**8 + 96 * sigma**6 * x**0.5 + 72 * sigma**4 * x
            + 16 * sigma**2 * x**1.5)
    assert float(RootTransform(k=2, sigma=sigma, offset=a).sd_at(q)) ** 2 == pytest.approx(
        var2, rel=1e-13)
    assert float(RootTransform(k=4, sigma=sigma, offset=a).sd_at(q)) ** 2 == pytest.approx(
        var4, rel=1e-13)
    assert float(RootTransform(k=1, sigma=sigma, offset=a).sd_at(q)) == sigma


@pytest.mark.parametrize("k", [1, 3, 5, 7])
@pytest.mark.parametrize("q,a,sigma", [(0.0, 0.0, 1.0), (0.2, 0.0, 1.5), (10.0, 1.0, 0.6),
                                       (5000.0, 0.0, 0.9)])
def test_root_median_sd_odd_k_equals_quadrature(k, q, a, sigma):
    m = RootTransform(k=k, sigma=sigma, offset=a, estimator="median")
    _, var = gh_mean_var(lambda x: x**k - a, float(m.transform([q])[0]), sigma)  # exact
    assert float(m.sd_at([q])[0]) ** 2 == pytest.approx(var, rel=1e-10)


@pytest.mark.parametrize("k", [2, 4, 6, 2.5, 1.5, 3.7])
@pytest.mark.parametrize("q,a,sigma", [(0.0, 0.0, 1.0), (0.05, 0.0, 0.8), (1.0, 0.5, 1.0),
                                       (40.0, 0.0, 1.3), (300.0, 2.0, 0.4)])
def test_root_median_sd_nonsmooth_equals_adaptive_quadrature(k, q, a, sigma):
    # even k: Var[X^k] + 4·M_k(−v)·(E[X^k] − M_k(−v)) (a plus sign); fractional k: quadrature
    m = RootTransform(k=k, sigma=sigma, offset=a, estimator="median")
    _, var = quad_mean_var(lambda x: sign_pow(x, k) - a, float(m.transform([q])[0]), sigma)
    assert float(m.sd_at([q])[0]) ** 2 == pytest.approx(var, rel=1e-8)


def test_even_k_median_variance_is_larger_than_plain_power():
    # the sign flip of the negative part adds variance: the correction term is positive
    q, s = 0.0, 1.0
    med = RootTransform(k=2, sigma=s, estimator="median")
    _, var_plain = gh_mean_var(lambda x: x**2, 0.0, s)  # Var[Z²] = 2
    assert float(med.sd_at(q)) ** 2 == pytest.approx(3.0, rel=1e-14)  # E[Z⁴] − 0 = 3
    assert var_plain == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize("q,a,sigma", [(0.0, 1.0, 0.3), (5.0, 1.0, 2.0), (1e4, 0.5, 1.0)])
def test_log_sd_equals_closed_form_and_quadrature(q, a, sigma):
    s2 = sigma**2
    mean_m = LogTransform(sigma=sigma, offset=a)
    med_m = LogTransform(sigma=sigma, offset=a, estimator="median")
    v = math.log(q + a)
    sd_mean, sd_med = float(mean_m.sd_at([q])[0]), float(med_m.sd_at([q])[0])
    assert sd_mean == pytest.approx(math.sqrt(math.expm1(s2)) * (q + a), rel=1e-14)
    assert sd_med**2 == pytest.approx(math.expm1(s2) * math.exp(s2) * (q + a) ** 2, rel=1e-13)
    assert sd_mean**2 == pytest.approx(gh_mean_var(mean_m.estimate, v, sigma)[1], rel=1e-10)
    assert sd_med**2 == pytest.approx(gh_mean_var(med_m.estimate, v, sigma)[1], rel=1e-10)


def test_log_sd_large_sigma_does_not_overflow_needlessly():
    m = LogTransform(sigma=30.0, offset=1.0)  # e^{σ²} = e^900 overflows, sd = e^450·(q+a)
    assert float(m.sd_at(0.0)) == pytest.approx(math.exp(450.0), rel=1e-12)


def test_sd_shape_and_vectorization():
    m = RootTransform(k=2.5, sigma=1.0, estimator="median")
    q = np.array([[0.0, 1.0], [10.0, 1e6]])
    sd = m.sd_at(q)
    assert sd.shape == (2, 2)
    np.testing.assert_allclose(sd.ravel(), [float(m.sd_at(x)) for x in q.ravel()], rtol=1e-14)
    assert np.all(np.diff(sd.ravel()) > 0)


def exact_hermite(k: int, s: Fraction, x: Fraction) -> float:
    """σ^k He_k(x/σ) = Σ_m (−1)^m k!/(m!(k−2m)!2^m) σ^{2m} x^{k−2m}, in exact arithmetic."""
    return float(sum((-1) ** j * Fraction(math.factorial(k), math.factorial(j)
                                          * math.factorial(k - 2 * j) * 2**j)
                     * s ** (2 * j) * x ** (k - 2 * j) for j in range(k // 2 + 1)))


def test_k60_mean_estimator_has_no_overflow():
    k, sigma, x = 60, 1e-5, 10.0  # He_60(x/σ) = He_60(1e6) ~ 1e360 would overflow
    m = RootTransform(k=k, sigma=sigma)
    got = float(m.estimate([x])[0])
    assert np.isfinite(got)
    assert got == pytest.approx(exact_hermite(k, Fraction(1, 100000), Fraction(10)), rel=1e-13)
    # a larger σ: the estimate stays finite; sd stays finite at a large cell
    m2 = RootTransform(k=k, sigma=0.05)
    assert float(m2.estimate([3.0])[0]) == pytest.approx(
        exact_hermite(k, Fraction(1, 20), Fraction(3)), rel=1e-12)
    for mm in (m2, RootTransform(k=k, sigma=0.05, estimator="median")):
        sd = mm.sd_at([0.0, 1e6, 1e300])
        assert np.all(np.isfinite(sd)) and np.all(sd > 0)
    # sd at v = x: leading term k·σ·x^{k−1}
    assert float(m.sd_at([x**k])[0]) == pytest.approx(k * sigma * x ** (k - 1), rel=1e-6)


# ------------------------------------------------------------------------------------------------
# Sampler, intervals and releases
# ------------------------------------------------------------------------------------------------
N_DRAWS = 20000
SAMPLER_CASES = [
    RootTransform(k=4, sigma=0.8, estimator="median"),
    RootTransform(k=2.5, sigma=0.5, offset=2.0, estimator="median"),
    RootTransform(k=3, sigma=1.0, offset=0.0),
    LogTransform(sigma=0.3, offset=1.0, estimator="median"),
    LogTransform(sigma=1.0, offset=1.0),
]


def recover_noise(m: TransformationMechanism, r: ReleasedValues) -> np.ndarray:
    """ṽ from a release: via the median estimate, or via the interval for mean estimators.

    The interval is ``f⁻¹(ṽ ± h) − a`` with ``h = zσ`` plus half the transformed-space grid.
    """
    z = float(ndtri(0.5 + 0.5 * r.level))
    if m.estimator == "median":
        return f_ext(m, r.estimate + m.offset)
    return f_ext(m, r.upper + m.offset) - z * m.sigma - 0.5 * r.grid


@pytest.mark.parametrize("m", SAMPLER_CASES, ids=repr)
def test_sampler_ks_and_power(m):
    q = np.linspace(0.0, 500.0, N_DRAWS)
    r = m.release_table(q, rng=RandomSource(seed=20240917), level=0.9)
    vt = recover_noise(m, r)
    if m.estimator == "mean":  # the estimate is the mean estimator at the same draw
        assert np.max(np.abs(r.estimate - m.estimate(vt)) / m.sd_at(q)) < 1e-8
    u = (vt - m.transform(q)) / m.sigma
    assert stats.kstest(u, "norm").pvalue > 1e-6
    assert stats.kstest(u / 0.7, "norm").pvalue < 1e-6
    assert stats.kstest(u / 1.3, "norm").pvalue < 1e-6


COVERAGE_CASES = [
    (RootTransform(k=4, sigma=1.0), 0.0),
    (RootTransform(k=4, sigma=1.0), 300.0),
    (RootTransform(k=2, sigma=2.0, offset=1.0, estimator="median"), 5.0),
    (RootTransform(k=2.5, sigma=0.7, estimator="median"), 50.0),
    (LogTransform(sigma=0.5, offset=1.0), 0.0),
    (LogTransform(sigma=0.5, offset=1.0, estimator="median"), 1000.0),
]


@pytest.mark.parametrize("m,q", COVERAGE_CASES, ids=repr)
@pytest.mark.parametrize("level", [0.9, 0.5])
def test_release_coverage_unbiasedness_and_consistency(m, q, level):
    seed = 7 + int(q) + int(100 * level)
    r = m.release_table(np.full(N_DRAWS, q), rng=seed, level=level)
    assert r.level == level
    for arr in (r.estimate, r.sd, r.moe, r.lower, r.upper):
        assert arr.shape == (N_DRAWS,) and np.all(np.isfinite(arr))
    assert np.all(r.lower < r.upper)
    np.testing.assert_allclose(r.moe, (r.upper - r.lower) / 2, rtol=1e-9)
    # plug-in sd at the clipped median-unbiased estimate
    q_hat = np.maximum(m.median_estimate(f_ext(m, r.lower + m.offset)
                                         + ndtri(0.5 + 0.5 * level) * m.sigma
                                         + 0.5 * r.grid), 0.0)
    np.testing.assert_allclose(r.sd, m.sd_at(q_hat), rtol=1e-7)
    # coverage: at least ``level`` (interval widened by half a grid step for the rounding of ṽ),
    # at most P(|Z| <= z + g/σ) (|rounded − exact| <= g/2 on each side)
    cover = np.mean((r.lower <= q) & (q <= r.upper))
    tol = 4 * math.sqrt(level * (1 - level) / N_DRAWS)
    z = float(ndtri(0.5 + 0.5 * level))
    assert level - tol <= cover <= 2 * stats.norm.cdf(z + r.grid / m.sigma) - 1 + tol
    if m.estimator == "mean":
        se = float(m.sd_at(q)) / math.sqrt(N_DRAWS)
        assert abs(np.mean(r.estimate) - q) <= 5 * se
    else:
        assert abs(np.mean(r.estimate <= q) - 0.5) <= 4 * math.sqrt(0.25 / N_DRAWS)
    # the sample variance matches the exact variance within 5 of its own standard errors
    dev = r.estimate - np.mean(r.estimate)
    s2, m4 = np.mean(dev**2), np.mean(dev**4)
    assert abs(s2 - float(m.sd_at(q)) ** 2) <= 5 * math.sqrt((m4 - s2**2) / N_DRAWS)


def test_release_is_reproducible_and_release_matches_release_table():
    m = RootTransform(k=4, sigma=1.0)
    q = [0.0, 10.0, 1e5]
    r1, r2 = m.release_table(q, rng=3), m.release_table(q, rng=3)
    np.testing.assert_array_equal(r1.estimate, r2.estimate)
    np.testing.assert_array_equal(m.release(q, rng=3), r1.estimate)
    assert isinstance(m, Mechanism)
    assert m.release_table([], rng=1).estimate.shape == (0,)


def test_identity_root_release_is_gaussian_with_exact_interval():
    m = RootTransform(k=1, sigma=2.0, offset=5.0)
    r = m.release_table([1.0, 2.0], rng=11, level=0.95)
    # exact quantile plus half the default grid step (0.01 for sigma 2)
    np.testing.assert_allclose(r.moe, 1.959963984540054 * 2.0 + 0.005, rtol=1e-12)
    np.testing.assert_allclose(r.sd, 2.0)
    np.testing.assert_allclose((r.lower + r.upper) / 2, r.estimate, rtol=1e-12)


@pytest.mark.parametrize("m", SAMPLER_CASES + [RootTransform(k=1, sigma=3.0)], ids=repr)
def test_moe_at_is_central_half_width(m):
    q = np.array([0.0, 0.5, 20.0, 3000.0])
    z = float(ndtri(0.95))
    v = m.transform(q)
    h = z * m.sigma + 0.5 * m.default_grid()  # the release's interval is widened by half a step
    expected = (m.median_estimate(v + h) - m.median_estimate(v - h)) / 2
    np.testing.assert_allclose(m.moe_at(q, level=0.9), expected, rtol=1e-12)
    np.testing.assert_allclose(m.moe_at(q), expected, rtol=1e-12)  # default level 0.9


def test_moe_has_no_cancellation():
    # ((v+h)² − (v−h)²)/2 = 2vh exactly; naive subtraction loses ~8 digits here
    # (h = zσ plus half the default transformed-space grid, which is 1% of σ or less)
    m = RootTransform(k=2, sigma=1e-3, estimator="median")
    z = float(ndtri(0.95))
    v = 1e6
    h = z * 1e-3 + 0.5 * m.default_grid()
    assert float(m.moe_at([v**2])[0]) == pytest.approx(2 * v * h, rel=1e-13)
    m = RootTransform(k=3, sigma=1e-4, offset=0.0)
    h = z * 1e-4 + 0.5 * m.default_grid()
    assert float(m.moe_at([1e15])[0]) == pytest.approx(3 * 1e10 * h + h**3, rel=1e-12)
    lm = LogTransform(sigma=1e-9, offset=1.0)
    h = z * 1e-9 + 0.5 * lm.default_grid()
    assert float(lm.moe_at([99.0])[0]) == pytest.approx(100 * math.sinh(h), rel=1e-12, abs=0)


def test_log_moe_at_is_median_half_width():
    m = LogTransform(sigma=0.6, offset=1.0)
    q = 200.0
    r = m.release_table(np.full(N_DRAWS, q), rng=5)
    assert abs(np.mean(r.moe <= float(m.moe_at([q])[0])) - 0.5) <= 4 * math.sqrt(0.25 / N_DRAWS)


# ------------------------------------------------------------------------------------------------
# Parameters, metadata and validation
# ------------------------------------------------------------------------------------------------
def test_metadata():
    m = RootTransform(k=4, sigma=2.0)
    assert isinstance(m, TransformationMechanism)
    assert (m.family, m.pure, m.requires_nonnegative, m.unbiased) == (
        "root", False, True, "mean")
    assert m.params() == {"k": 4.0, "sigma": 2.0, "offset": 0.0, "estimator": "mean"}
    assert "1/k" in m.policy_formula
    d = m.to_dict()
    assert d["class"] == "RootTransform" and d["policy_rho"] == m.policy_formula
    assert m == RootTransform(k=4.0, sigma=2, offset=0)
    assert m != RootTransform(k=4, sigma=2.0, estimator="median")
    assert hash(m) == hash(RootTransform(k=4, sigma=2.0))
    assert repr(m) == "RootTransform(k=4.0, sigma=2.0, offset=0.0, estimator='mean')"
    lm = LogTransform(sigma=1.0, offset=2.0, estimator="median")
    assert (lm.family, lm.unbiased) == ("log", "median")
    assert lm.params() == {"sigma": 1.0, "offset": 2.0, "estimator": "median"}
    assert "ln" in lm.policy_formula


@pytest.mark.parametrize("factory,needles", [
    (lambda: RootTransform(k=4, sigma=0.0), ["sigma", "0.0"]),
    (lambda: RootTransform(k=4, sigma=-1.5), ["sigma", "-1.5"]),
    (lambda: RootTransform(k=4, sigma=float("nan")), ["sigma", "nan"]),
    (lambda: RootTransform(k=2, sigma=1.0, offset=-0.5), ["offset", "-0.5"]),
    (lambda: RootTransform(k=0.5, sigma=1.0), ["k", "0.5"]),
    (lambda: RootTransform(k=0, sigma=1.0, estimator="median"), ["k", "0"]),
    (lambda: RootTransform(k=2.5, sigma=1.0), ["k=2.5", "median"]),
    (lambda: RootTransform(k=2.5, sigma=1.0, estimator="mean"), ["k=2.5", "median"]),
    (lambda: RootTransform(k=2, sigma=1.0, estimator="mode"), ["estimator", "'mode'"]),
    (lambda: RootTransform(k=2, sigma=1.0, estimator=None), ["estimator", "None"]),
    (lambda: LogTransform(sigma=1.0, offset=0.0), ["offset", "0.0"]),
    (lambda: LogTransform(sigma=1.0, offset=-2.0), ["offset", "-2.0"]),
    (lambda: LogTransform(sigma=-1.0, offset=1.0), ["sigma", "-1.0"]),
    (lambda: LogTransform(sigma=1.0, offset=1.0, estimator="Median"), ["estimator", "'Median'"]),
])
def test_bad_parameters(factory, needles):
    with pytest.raises(InvalidParameterError) as info:
        factory()
    assert isinstance(info.value, ValueError)
    for needle in needles:
        assert needle in str(info.value)


def test_fractional_k_median_is_allowed():
    m = RootTransform(k=2.5, sigma=1.0, estimator="median")
    assert m.params()["k"] == 2.5


@pytest.mark.parametrize("m", [RootTransform(k=2, sigma=1.0), LogTransform(sigma=1.0, offset=1.0)],
                         ids=repr)
def test_bad_values(m):
    for bad in ([1.0, -0.5], [np.nan], [np.inf]):
        for call in (lambda v: m.release_table(v, rng=0), lambda v: m.release(v, rng=0),
                     m.sd_at, m.moe_at, m.transform):
            with pytest.raises(DataValidationError):
                call(bad)
    with pytest.raises(InvalidParameterError, match="level"):
        m.release_table([1.0], rng=0, level=1.0)
    with pytest.raises(InvalidParameterError, match="level"):
        m.moe_at([1.0], level=0.0)


@pytest.mark.parametrize(("make", "fix"), [
    (lambda: LogTransform(sigma=0.5, offset=0.0), "e.g. offset = 1.0"),
    (lambda: RootTransform(k=2, sigma=0.5, offset=-1.0), "offset = 0.0 is the usual choice"),
])
def test_offset_refusal_names_the_parameter_to_set(make, fix) -> None:
    """The offset refusals name ``offset``, the parameter and spec key to set.

    Review rev66w: the hints said "a = 1 is the usual choice" (the paper's name), and
    ``a = 1`` in a spec is an unknown key.
    """
    with pytest.raises(InvalidParameterError) as err:
        make()
    hint = str(err.value).split("Hint:", 1)[1]
    assert fix in hint, str(err.value)
    assert "a = " not in hint, str(err.value)
