"""Exact and statistical checks of the noise laws (MATH.md §1.4, §1.5, §5).

Exact checks use adaptive quadrature (``scipy.integrate.quad``) split at the law's own quantiles;
for the exponential polylog family the integrals are taken in the log variable
s = ln(|z|/σ + a) − ln a, where the integrand is smooth and decays fast (MATH.md §1.5). Sampler
checks are fixed-seed KS tests at p ≤ 1e-6 together with a power check against ±30 % scale.
"""

from __future__ import annotations

import math
import pathlib
import sys
from collections.abc import Callable

import numpy as np
import pytest
from scipy import integrate, stats

from tabdp.exceptions import InvalidParameterError
from tabdp.noise.exp_polylog import ExpPolyLog
from tabdp.noise.gaussian import Gaussian, Laplace
from tabdp.noise.generalized_gaussian import GeneralizedGaussian
from tabdp.rng import RandomSource

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _stats import assert_ks_fits, assert_power, scaled_cdfs, self_test  # noqa: E402

E = math.e

# (id, factory) — factories so each test gets a fresh instance (fresh lazy tables).
CASES: list[tuple[str, Callable[[], object]]] = [
    ("gauss-1.5", lambda: Gaussian(sigma=1.5)),
    ("laplace-0.7", lambda: Laplace(scale=0.7)),
    *[(f"gg-p{p}", (lambda p=p: GeneralizedGaussian(sigma=1.3, p=p)))
      for p in (0.25, 0.5, 1.0, 2.0)],
    *[(f"epl1-d{d}-a{a}", (lambda d=d, a=a: ExpPolyLog(sigma=2.0, a=a, d=d, p=1.0)))
      for d in (2.5, 4.0, 6.0) for a in (1.0, 3.0)],
    *[(f"epl2-d{d}-a{a:.3g}", (lambda d=d, a=a: ExpPolyLog(sigma=0.5, a=a, d=d, p=2.0)))
      for d in (0.5, 1.0, 3.0) for a in (E, 5.0)],
    ("epl1.5-d0.5-a2", lambda: ExpPolyLog(sigma=1.0, a=2.0, d=0.5, p=1.5)),
    ("epl1.5-d2-a3", lambda: ExpPolyLog(sigma=3.0, a=3.0, d=2.0, p=1.5)),
    ("epl3-d0.2-a8", lambda: ExpPolyLog(sigma=2.0, a=8.0, d=0.2, p=3.0)),
    ("epl3-d1-a10", lambda: ExpPolyLog(sigma=1.0, a=10.0, d=1.0, p=3.0)),
]
IDS = [c[0] for c in CASES]
FACTORIES = [c[1] for c in CASES]

#: two-sided tail masses at which integrals are split (down to 1e-18)
SPLIT_U = [0.5, 0.2, 0.05, 1e-2, 1e-3] + [10.0 ** -k for k in range(4, 19, 2)]


def _is_epl(dist: object) -> bool:
    return isinstance(dist, ExpPolyLog)


def absq(dist, u: float) -> float:
    """Magnitude m with P(|Z| > m) = u (public API; exact for tiny u, unlike 1 − level)."""
    return float(dist.isf(0.5 * u))


def abs_moment(dist, g: Callable[[np.ndarray], np.ndarray], upto_u: float = 0.0) -> float:
    """``E[g(|Z|); P(|Z| > |z|) >= upto_u]`` = 2∫_0^m g(z) f(z) dz by split quadrature."""
    ms = [0.0] + [absq(dist, u) for u in SPLIT_U if u > upto_u]
    last = np.inf if upto_u == 0.0 else absq(dist, upto_u)
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        if _is_epl(dist):
            sa = dist.sigma * dist.a
            ss = [float(np.log1p(m / sa)) for m in ms]
            s_last = float(np.log1p(last / sa)) if np.isfinite(last) else 3.0 * ss[-1] + 60.0

            def fs(s: float) -> float:
                z = sa * math.expm1(s) if s < 700 else math.inf
                if not math.isfinite(z):
                    return 0.0
                return 2.0 * float(dist.pdf(z)) * sa * math.exp(s) * float(g(np.float64(z)))

            for lo, hi in zip(ss, [*ss[1:], s_last], strict=True):
                total += integrate.quad(fs, lo, hi, epsabs=0.0, epsrel=1e-13, limit=200)[0]
        elif isinstance(dist, GeneralizedGaussian) and dist.p < 1.0:
            # w = (z/σ)^p removes the cusp at 0 and the stretched-exponential tail
            sig, p = dist.sigma, dist.p
            ws = [(m / sig) ** p for m in ms]
            w_last = (last / sig) ** p

            def fw(w: float) -> float:
                z = sig * w ** (1.0 / p)
                jac = sig / p * w ** (1.0 / p - 1.0)
                return 2.0 * float(dist.pdf(z)) * jac * float(g(np.float64(z)))

            for lo, hi in zip(ws, [*ws[1:], w_last], strict=True):
                total += integrate.quad(fw, lo, hi, epsabs=0.0, epsrel=1e-13, limit=200)[0]
        else:
            def fz(z: float) -> float:
                return 2.0 * float(dist.pdf(z)) * float(g(np.float64(z)))

            for lo, hi in zip(ms, [*ms[1:], last], strict=True):
                total += integrate.quad(fz, lo, hi, epsabs=0.0, epsrel=1e-13, limit=200)[0]
    return total


# ------------------------------------------------------------------------------------------
# exact checks, every family
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_density_integrates_to_one(make):
    dist = make()
    assert abs(abs_moment(dist, lambda z: 1.0) - 1.0) < 1e-11


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_variance_matches_quadrature(make):
    dist = make()
    v = dist.variance()
    if math.isinf(v):
        # infinite variance (ExpPolyLog p = 1, d <= 3): the truncated 2nd moment keeps growing
        assert dist.p == 1.0 and dist.d <= 3.0
        m6 = abs_moment(dist, lambda z: z * z, upto_u=1e-6)
        m12 = abs_moment(dist, lambda z: z * z, upto_u=1e-12)
        assert m12 > 10.0 * m6
    else:
        q = abs_moment(dist, lambda z: z * z)
        assert q == pytest.approx(v, rel=1e-9)
        assert dist.std() == pytest.approx(math.sqrt(q), rel=1e-9)


QS = np.array([1e-15, 1e-12, 1e-8, 1e-4, 0.01, 0.1, 0.25, 0.4, 0.49, 0.5 - 1e-9])


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_quantile_roundtrip_including_extreme_tails(make):
    dist = make()
    x = dist.ppf(QS)
    assert np.all(np.diff(x) > 0)
    np.testing.assert_allclose(dist.cdf(x), QS, rtol=1e-11, atol=0)
    xu = dist.isf(QS)
    np.testing.assert_allclose(dist.sf(xu), QS, rtol=1e-11, atol=0)
    np.testing.assert_allclose(xu, -x, rtol=1e-13)  # symmetry of the quantiles
    assert float(dist.ppf(0.5)) == 0.0
    assert dist.ppf([0.0, 1.0]).tolist() == [-np.inf, np.inf]
    assert float(dist.cdf(0.0)) == 0.5


def _grid(dist) -> np.ndarray:
    m = np.array([absq(dist, u) for u in [0.9, 0.5, 0.1, 1e-3, 1e-6, 1e-12]])
    return np.concatenate([-m[::-1], [0.0], m])


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_sf_cdf_and_symmetry(make):
    dist = make()
    x = _grid(dist)
    np.testing.assert_allclose(dist.sf(x) + dist.cdf(x), 1.0, rtol=0, atol=2e-16)
    np.testing.assert_array_equal(dist.cdf(-x), dist.sf(x))
    np.testing.assert_array_equal(dist.pdf(-x), dist.pdf(x))
    np.testing.assert_array_equal(dist.logpdf(-x), dist.logpdf(x))
    assert np.all(np.diff(dist.cdf(x)) > 0)
    assert float(dist.sf(np.inf)) == 0.0 and float(dist.cdf(-np.inf)) == 0.0


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_pdf_is_derivative_of_cdf(make):
    dist = make()
    m = np.array([absq(dist, u) for u in [0.6, 0.2, 0.02, 1e-4, 1e-8, 1e-12]])
    x = -m  # left tail: cdf = P(Z <= x) is accurate there
    h = 1e-6 * np.abs(x)
    deriv = (dist.cdf(x + h) - dist.cdf(x - h)) / (2.0 * h)
    np.testing.assert_allclose(deriv, dist.pdf(x), rtol=1e-6)


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_interval_halfwidth_is_exact_abs_quantile(make):
    dist = make()
    for level in (0.5, 0.9, 0.95, 0.99, 1.0 - 1e-9):
        h = dist.interval_halfwidth(level)
        assert 2.0 * float(dist.sf(h)) == pytest.approx(1.0 - level, rel=1e-11)
        assert float(dist.cdf(h) - dist.cdf(-h)) == pytest.approx(level, rel=1e-14)
        assert h == pytest.approx(float(dist.isf((1.0 - level) / 2.0)), rel=1e-14)


# ------------------------------------------------------------------------------------------
# agreement with scipy.stats
# ------------------------------------------------------------------------------------------
def _check_against(dist, ref, var: float) -> None:
    x = np.concatenate([-np.geomspace(1e-3, 30, 15)[::-1], [0.0], np.geomspace(1e-3, 30, 15)])
    np.testing.assert_allclose(dist.logpdf(x), ref.logpdf(x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(dist.cdf(x), ref.cdf(x), rtol=1e-12, atol=0)
    np.testing.assert_allclose(dist.sf(x), ref.sf(x), rtol=1e-12, atol=0)
    q = np.array([1e-12, 1e-6, 0.01, 0.3, 0.5, 0.7, 0.99])
    np.testing.assert_allclose(dist.ppf(q), ref.ppf(q), rtol=1e-10, atol=1e-15)
    assert dist.variance() == pytest.approx(var, rel=1e-13)


def test_gaussian_and_laplace_match_scipy():
    _check_against(Gaussian(sigma=1.7), stats.norm(scale=1.7), 1.7**2)
    _check_against(Laplace(scale=0.6), stats.laplace(scale=0.6), 2 * 0.36)
    assert Gaussian(1.0).interval_halfwidth(0.9) == pytest.approx(1.6448536269514722, rel=1e-15)
    assert Laplace(1.0).interval_halfwidth(0.9) == pytest.approx(math.log(10.0), rel=1e-15)


@pytest.mark.parametrize("p", [0.25, 0.5, 1.0, 2.0, 3.5])
def test_generalized_gaussian_matches_scipy_gennorm(p):
    sigma = 0.9
    ref = stats.gennorm(beta=p, scale=sigma)
    _check_against(GeneralizedGaussian(sigma=sigma, p=p), ref, float(ref.var()))
    var = sigma**2 * math.gamma(3.0 / p) / math.gamma(1.0 / p)
    assert GeneralizedGaussian(sigma=sigma, p=p).variance() == pytest.approx(var, rel=1e-13)


def test_generalized_gaussian_special_cases():
    x = np.linspace(-8, 8, 33)
    # p = 1 is Laplace(σ); p = 2 is N(0, σ²/2)
    np.testing.assert_allclose(GeneralizedGaussian(2.0, 1.0).cdf(x), Laplace(2.0).cdf(x),
                               rtol=1e-14)
    np.testing.assert_allclose(GeneralizedGaussian(2.0, 2.0).sf(x),
                               Gaussian(2.0 / math.sqrt(2.0)).sf(x), rtol=1e-13)
    # variance via lgamma does not overflow for tiny p; Γ(3/p) itself would
    assert GeneralizedGaussian(1.0, 0.01).variance() == math.inf
    v = GeneralizedGaussian(1e-100, 0.05).variance()
    assert v == pytest.approx(math.exp(math.lgamma(60) - math.lgamma(20) - 460.517018598809136),
                              rel=1e-12)
    with pytest.raises(InvalidParameterError, match="p must be"):
        GeneralizedGaussian(1.0, 0.0)
    with pytest.raises(InvalidParameterError, match="sigma must be"):
        GeneralizedGaussian(-1.0, 0.5)
    assert GeneralizedGaussian(1.0, 0.5).params() == {"sigma": 1.0, "p": 0.5}


# ------------------------------------------------------------------------------------------
# exponential polylog: formulas of MATH.md §1.5
# ------------------------------------------------------------------------------------------
EPL_PARAMS = [(2.0, 1.0, 4.0, 1.0), (0.5, 3.0, 2.5, 1.0), (0.5, E, 0.5, 2.0), (1.5, 5.0, 3.0, 2.0),
              (1.0, 2.0, 0.5, 1.5), (2.0, 8.0, 0.2, 3.0), (1.0, 30.0, 0.7, 2.5)]


@pytest.mark.parametrize("sigma,a,d,p", EPL_PARAMS)
def test_exp_polylog_density_shape(sigma, a, d, p):
    dist = ExpPolyLog(sigma=sigma, a=a, d=d, p=p)
    x = np.array([0.0, 1e-9, 0.3, 1.0, 7.0, 1e3, 1e8, 1e30])
    want = -d * (np.log(x / sigma + a) ** p - math.log(a) ** p)
    np.testing.assert_allclose(dist.logpdf(x) - dist.logpdf(0.0), want, rtol=1e-12, atol=1e-13)


def test_exp_polylog_p1_closed_forms():
    # MATH.md §1.5 [CORRECTED]: d = 4, a = σ = 1 gives variance 1, not the seed's 2.5
    assert ExpPolyLog(sigma=1.0, a=1.0, d=4.0).variance() == 1.0
    seed_text = 1.0 * 1.0 * (4 - 1) * (1 / (4 - 3) - 1 / (4 - 2) + 1 / (4 - 1))
    assert seed_text == pytest.approx(2.5)
    assert abs_moment(ExpPolyLog(sigma=1.0, a=1.0, d=4.0), lambda z: z * z) == pytest.approx(1.0,
                                                                                          rel=1e-10)
    sigma, a, d = 2.0, 3.0, 6.0
    dist = ExpPolyLog(sigma=sigma, a=a, d=d)
    assert dist.variance() == pytest.approx(2 * sigma**2 * a**2 / ((d - 2) * (d - 3)), rel=1e-15)
    z = np.array([0.0, 0.5, 3.0, 100.0, 1e6])
    np.testing.assert_allclose(dist.pdf(z), (d - 1) / (2 * sigma) * a ** (d - 1)
                               * (z / sigma + a) ** (-d), rtol=1e-13)
    np.testing.assert_allclose(dist.cdf(z), 0.5 + 0.5 * (1 - (1 + z / (sigma * a)) ** (1 - d)),
                               rtol=1e-15)
    q = np.array([0.6, 0.9, 0.999])
    r = 2 * np.abs(q - 0.5)
    np.testing.assert_allclose(dist.ppf(q), sigma * a * ((1 - r) ** (-1 / (d - 1)) - 1),
                               rtol=1e-13)
    assert math.isinf(ExpPolyLog(sigma=1.0, a=1.0, d=3.0).variance())


def test_exp_polylog_p2_closed_forms():
    from scipy.special import ndtr, ndtri

    sigma, a, d = 1.5, 5.0, 1.0
    dist = ExpPolyLog(sigma=sigma, a=a, d=d, p=2.0)

    def kappa(x, c):
        return ndtr(math.sqrt(2 * d) * (np.log(x) - c / d))

    k = 1 - kappa(a, 0.5)
    z = np.array([0.0, 0.4, 2.0, 30.0])
    u = z / sigma + a
    pdf = math.sqrt(d) * np.exp(-d * np.log(u) ** 2) / (2 * sigma * math.exp(1 / (4 * d))
                                                        * math.sqrt(math.pi) * k)
    np.testing.assert_allclose(dist.pdf(z), pdf, rtol=1e-13)
    np.testing.assert_allclose(dist.cdf(z), 0.5 + 0.5 * (kappa(u, 0.5) - kappa(a, 0.5)) / k,
                               rtol=1e-13)
    q = np.array([0.55, 0.8, 0.99])
    r = 2 * np.abs(q - 0.5)
    w = ndtri(r * k + kappa(a, 0.5))
    z_q = sigma * (np.exp(w / math.sqrt(2 * d) + 1 / (2 * d)) - a)
    np.testing.assert_allclose(dist.ppf(q), z_q, rtol=1e-10)
    var = sigma**2 * ((math.exp(2 / d) * (1 - kappa(a, 1.5)) - 2 * a * math.exp(3 / (4 * d))
                       * (1 - kappa(a, 1.0))) / k + a**2)
    assert dist.variance() == pytest.approx(var, rel=1e-12)


def test_exp_polylog_p2_large_offset_is_stable():
    # 1 − κ(a, ½) underflows in double for a = e^30, d = 3 if computed as 1 − ndtr(...)
    dist = ExpPolyLog(sigma=1.0, a=math.exp(30.0), d=3.0, p=2.0)
    assert math.isfinite(float(dist.logpdf(0.0)))
    q = np.array([1e-15, 1e-6, 0.3])
    np.testing.assert_allclose(dist.cdf(dist.ppf(q)), q, rtol=1e-10)
    # the closed-form variance cancels (≈ a²(1 − ...)); it must agree with quadrature
    assert dist.variance() == pytest.approx(dist._variance_quadrature(), rel=1e-9)
    assert dist.variance() == pytest.approx(abs_moment(dist, lambda z: z * z), rel=1e-8)


@pytest.mark.parametrize("sigma,a,d", [(1.0, 5.0, 1.0), (0.5, 3.0, 3.0), (2.0, 5.0, 0.5)])
def test_exp_polylog_p2_closed_forms_agree_with_general_path(sigma, a, d):
    closed = ExpPolyLog(sigma=sigma, a=a, d=d, p=2.0)
    general = ExpPolyLog(sigma=sigma, a=a, d=d, p=2.0 + 1e-9)
    assert closed._quad1 is None and general._quad1 is not None  # really two code paths
    # the laws differ by O(1e-9·d·t²·ln t) in log density, t = ln(|x|/σ + a): stay where t is small
    x = np.array([0.0, 0.1, 1.0, 10.0, 1e3])
    np.testing.assert_allclose(general.logpdf(x), closed.logpdf(x), rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(general.sf(x), closed.sf(x), rtol=1e-6)
    u = np.array([1.0, 0.5, 1e-2, 1e-6, 1e-12])
    np.testing.assert_allclose(general._abs_isf(u), closed._abs_isf(u), rtol=1e-7)
    assert general.variance() == pytest.approx(closed.variance(), rel=1e-6)


def test_exp_polylog_general_path_against_direct_quadrature():
    """Normalizer and tail of the tabulated path vs. plain quad of exp(t − d t^p) in t."""
    sigma, a, d, p = 1.0, 3.0, 1.0, 1.5
    dist = ExpPolyLog(sigma=sigma, a=a, d=d, p=p)
    lo = math.log(a)

    def g(t: float) -> float:
        return math.exp(t - d * t**p)

    i1 = integrate.quad(g, lo, np.inf, epsabs=0, epsrel=1e-13, limit=200)[0]
    assert float(dist.logpdf(0.0)) == pytest.approx(-d * lo**p - math.log(2 * sigma * i1),
                                                    rel=1e-12)
    for x in (0.5, 5.0, 50.0, 5e3):
        t = math.log(x / sigma + a)
        tail = integrate.quad(g, t, np.inf, epsabs=0, epsrel=1e-13, limit=200)[0]
        assert float(dist.sf(x)) == pytest.approx(0.5 * tail / i1, rel=1e-11)


def test_exp_polylog_far_tail_beyond_table():
    dist = ExpPolyLog(sigma=1.0, a=3.0, d=1.0, p=1.5)
    for q in (1e-20, 1e-40, 1e-100):
        x = float(dist.isf(q))
        assert math.isfinite(x)
        assert float(dist.sf(x)) == pytest.approx(q, rel=1e-10)
    assert float(dist.sf(1e300)) < 1e-100


def test_exp_polylog_table_is_lazy_and_cached():
    assert ExpPolyLog(sigma=1.0, a=1.0, d=3.0)._table1 is None
    assert ExpPolyLog(sigma=1.0, a=3.0, d=1.0, p=2.0)._table1 is None
    dist = ExpPolyLog(sigma=1.0, a=3.0, d=1.0, p=1.5)
    first = dist._table
    dist.sample(10, rng=RandomSource(seed=1))
    dist.cdf([0.1, 2.0])
    assert dist._table is first


def test_exp_polylog_validation_and_params():
    p = ExpPolyLog(sigma=2, a=3, d=4).params()
    assert p == {"sigma": 2.0, "a": 3.0, "d": 4.0, "p": 1.0}
    assert all(type(v) is float for v in p.values())
    with pytest.raises(InvalidParameterError, match="d must be"):
        ExpPolyLog(sigma=1.0, a=1.0, d=1.0)            # p = 1 needs d > 1
    with pytest.raises(InvalidParameterError, match="d must be"):
        ExpPolyLog(sigma=1.0, a=3.0, d=0.0, p=2.0)     # p > 1 needs d > 0
    with pytest.raises(InvalidParameterError, match="a must be") as err:
        ExpPolyLog(sigma=1.0, a=2.5, d=1.0, p=2.0)     # a >= e^(p-1) = e
    assert "use a = 1" not in str(err.value) and "at least that" in str(err.value)  # p = 2
    with pytest.raises(InvalidParameterError, match="a must be"):
        ExpPolyLog(sigma=1.0, a=1.2, d=1.0, p=3.0)
    with pytest.raises(InvalidParameterError, match="a must be"):
        ExpPolyLog(sigma=1.0, a=0.5, d=2.0)            # p = 1 needs a >= 1
    with pytest.raises(InvalidParameterError, match="p must be"):
        ExpPolyLog(sigma=1.0, a=1.0, d=2.0, p=0.5)
    with pytest.raises(InvalidParameterError, match="sigma must be"):
        ExpPolyLog(sigma=0.0, a=1.0, d=2.0)
    with pytest.raises(InvalidParameterError, match="sigma must be"):
        ExpPolyLog(sigma=float("nan"), a=1.0, d=2.0)


@pytest.mark.parametrize("sigma,a,d,p", [
    (1.0, 1.0, 1.01, 1.0),      # 1e-12 tail quantile is σa·(1e12^(1/0.01) − 1): overflows
    (1.0, 1.0, 1.0005, 1.0),    # even the median overflows
    (1.0, 1.1, 0.5, 1.05),      # t* ≈ 4e5 (MATH.md §1.5 pitfall)
    (1.0, 2.0, 1.0, 1.0 + 1e-9),
    (1.0, 3.0, 0.0005, 2.0),    # p = 2, tiny d
    (1e306, 3.0, 1.0, 2.0),     # the scale alone pushes the 1e-12 quantile past 1.8e308
])
def test_exp_polylog_rejects_overflowing_parameters(sigma, a, d, p):
    with pytest.raises(InvalidParameterError, match="overflows a double"):
        ExpPolyLog(sigma=sigma, a=a, d=d, p=p)


def test_exp_polylog_accepts_borderline_parameters():
    dist = ExpPolyLog(sigma=1.0, a=1.0, d=1.05)        # 1e-12 quantile ≈ 1.2e240
    assert math.isfinite(dist.interval_halfwidth(1.0 - 1e-12))
    assert math.isinf(dist.variance())
    dist = ExpPolyLog(sigma=1.0, a=1.1, d=2.0, p=1.05)
    # E[Z²] is finite but dominated by t = ln(|z|/σ + a) near the mode of 3t − d t^p,
    # t* = (3/(dp))^(1/(p−1)) ≈ 1.25e3, i.e. |z| ≈ e^1250, far beyond doubles: check it in t-space
    d, p, lo = 2.0, 1.05, math.log(1.1)
    t3 = (3.0 / (d * p)) ** (1.0 / (p - 1.0))
    m3 = 3.0 * t3 - d * t3**p

    def second(t: float) -> float:  # (e^t − a)² e^{t − d t^p} / e^{m3}
        return math.expm1(lo - t) ** 2 * math.exp(3.0 * t - d * t**p - m3)

    def first(t: float) -> float:
        return math.exp(t - d * t**p)

    pts = [lo, 1.0, 10.0, 100.0, t3 / 2, t3 - 200, t3 - 50, t3, t3 + 50, t3 + 200, 2 * t3]
    num = sum(integrate.quad(second, x, y, epsabs=0, epsrel=1e-13, limit=200)[0]
              for x, y in zip(pts[:-1], pts[1:], strict=True))
    den = integrate.quad(first, lo, 100.0, epsabs=0, epsrel=1e-13, limit=200)[0]
    assert t3 == pytest.approx(1250.0, rel=0.01)
    assert dist.variance() == pytest.approx(num * math.exp(m3) / den, rel=1e-9)


# ------------------------------------------------------------------------------------------
# samplers: KS fit + power against ±30 % scale
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k,make", list(enumerate(FACTORIES)), ids=IDS)
def test_sampler_ks_and_power(k, make):
    dist = make()
    x = dist.sample(100_000, rng=RandomSource(seed=1000 + k))
    assert x.shape == (100_000,) and x.dtype == np.float64
    assert_ks_fits(x, dist.cdf)
    assert_power(x, scaled_cdfs(dist.cdf))
    # reproducible with the same seed; different with another
    y = dist.sample(5, rng=RandomSource(seed=1000 + k))
    np.testing.assert_array_equal(y, dist.sample(5, rng=RandomSource(seed=1000 + k)))
    assert not np.array_equal(y, dist.sample(5, rng=RandomSource(seed=5000 + k)))


def test_sampler_shape_and_symmetry_of_signs():
    dist = ExpPolyLog(sigma=1.0, a=3.0, d=1.0, p=1.5)
    x = dist.sample((300, 100), rng=RandomSource(seed=7))
    assert x.shape == (300, 100)
    # sign balance: binomial(30000, 1/2) within 6 sd
    assert abs(int((x > 0).sum()) - 15_000) < 6 * math.sqrt(30_000) / 2


def test_stats_helpers_self_test():
    self_test()
