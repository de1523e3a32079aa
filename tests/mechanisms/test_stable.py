"""The symmetric α-stable (SaS) noise law and mechanism (MATH.md §2, seed 000).

Reference values:

* ``MP_REF``: density and survival function from 20-digit mpmath quadrature of the Zolotarev
  integrals (independently cross-checked against the Fourier inversion integral split at the
  half-periods of cos(xt)), computed offline (mpmath is not a test dependency);
* the small-x series and the Bergström tail series, re-implemented here independently;
* ``scipy.stats.levy_stable`` where MATH.md says it is accurate;
* the Cauchy / Gaussian closed forms at α = 1 / 2;
* MATH.md §2.2 ε and calibration tables, seed 000 Table 1 (MAD), Cor 26/27 (Figure 9).

Sampler checks are fixed-seed KS tests at p ≤ 1e-6 with a ±30 % scale power check
(``tests/_stats.py``), run against a fast interpolant of the exact CDF (itself checked).
"""

from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import pytest
from scipy import stats

from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms.stable import SymmetricStable, sum_gamma
from tabdp.noise import stable as st
from tabdp.noise.stable import SymmetricStable as SaS

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _stats import assert_ks_fits, assert_power, scaled_cdfs  # noqa: E402

MP_REF = {
    (1.001, 'pdf'): [
        (0.1, 0.31503568280183903816), (0.3, 0.29198171567109849593), (0.5, 0.2546946676780183189),
        (1.0, 0.15927987176910896356),
    ],
    (1.001, 'sf'): [
        (0.1, 0.46828752047644200366), (0.3, 0.40725713939150229239), (0.5, 0.35244671431568347727),
    ],
    (1.01, 'pdf'): [
        (0.3, 0.29157200828191295267), (1.0, 0.16039775646783984018),
        (2.5, 0.044083378216574813551), (5.0, 0.01217013312711123786),
        (10.0, 0.0031025613086846992553), (18.5, 0.00090598396079925426452),
        (30.0, 0.00034325163763996927011),
    ],
    (1.01, 'sf'): [
        (0.3, 0.40752905389318723975), (1.0, 0.24978287169858366422), (2.5, 0.11992583768013059932),
        (5.0, 0.06165905507584225253), (10.0, 0.030872687239702759382),
        (18.5, 0.016612407305760068559), (30.0, 0.010197656082092317083),
    ],
    (1.2, 'pdf'): [
        (0.3, 0.2841935111413255611), (1.0, 0.1809653744081691231), (2.5, 0.047064102185106548511),
        (5.0, 0.010498945454991378802), (10.0, 0.0022034104706648837345),
        (18.5, 0.00055677240388110046975), (30.0, 0.00019029258283862957),
    ],
    (1.2, 'sf'): [
        (0.3, 0.41172189234730127685), (1.0, 0.24663218873659036457), (2.5, 0.09903331681701845585),
        (5.0, 0.042285439635577413892), (10.0, 0.017967918672921245526),
        (18.5, 0.0084848056578582431021), (30.0, 0.0047253620374205896223),
    ],
    (1.5, 'pdf'): [
        (0.3, 0.27799930590477954459), (1.0, 0.20203815960784013039),
        (2.5, 0.051148894530671766313), (5.0, 0.0071117360476548068412),
        (10.0, 0.0010477760249294404612), (18.5, 0.00021161792670996872256),
        (30.0, 0.000061890805710833009085),
    ],
    (1.5, 'sf'): [
        (0.3, 0.4147373000639385004), (1.0, 0.2436579756007295355), (2.5, 0.071810735264384409258),
        (5.0, 0.020669087140116190791), (10.0, 0.0066398091977684705287),
        (18.5, 0.0025579540309784531735), (30.0, 0.0012258302773189738928),
    ],
    (1.9, 'pdf'): [
        (0.3, 0.2758190455757327635), (1.0, 0.21712710038776166512), (2.5, 0.057441103666277817123),
        (5.0, 0.0019200011872612878128), (10.0, 0.00013087000143228325718),
        (18.5, 0.000019999782874777393724), (30.0, 4.8079391957431835334e-6),
    ],
    (1.9, 'sf'): [
        (0.3, 0.41593006454879154171), (1.0, 0.24051545605237562228),
        (2.5, 0.044171653989830229147), (5.0, 0.0031868434434721441019),
        (10.0, 0.00064351797815823571233), (18.5, 0.00019097954292521359775),
        (30.0, 0.000075338478632888673747),
    ],
    (1.99, 'pdf'): [
        (0.3, 0.27581239427898433902), (1.0, 0.21945322934999362989),
        (2.5, 0.058961566534928872543), (5.0, 0.0006835133263129273027),
        (10.0, 0.00001158435054065160479), (18.5, 1.6707683752580480394e-6),
        (30.0, 3.8487266472236900409e-7),
    ],
    (1.99, 'sf'): [
        (0.3, 0.4159973279254148141), (1.0, 0.23982638921324283451), (2.5, 0.039091681390697221925),
        (5.0, 0.00048215496520033748337), (10.0, 0.000054369089073784409256),
        (18.5, 0.000015250988227269886703), (30.0, 5.7625574935332877815e-6),
    ],
    (1.999, 'pdf'): [
        (0.3, 0.27581786121844723299), (1.0, 0.21967153762896583525),
        (2.5, 0.059113415820618549471), (5.0, 0.00055847951431538724084),
        (10.0, 1.1440116765337332556e-6), (18.5, 1.6406365123729939655e-7),
        (30.0, 3.7633082062130104708e-8),
    ],
    (1.999, 'sf'): [
        (0.3, 0.41600156860985188747), (1.0, 0.23975769160180996888),
        (2.5, 0.038603911833314001902), (5.0, 0.00023115647655517338224),
        (10.0, 5.3452807120121348856e-6), (18.5, 1.4910499642321715806e-6),
        (30.0, 5.6097428880210186637e-7),
    ],
    (1.9999, 'pdf'): [
        (0.3, 0.27581846405608179015), (1.0, 0.2196932353584258564), (2.5, 0.059128594203238879604),
        (5.0, 0.00054596204577344559794), (10.0, 1.1426102833032738765e-7),
        (18.5, 1.6376498799667275285e-8), (30.0, 3.7548641179859990683e-9),
    ],
    (1.9999, 'sf'): [
        (0.3, 0.41600196994628569603), (1.0, 0.23975082412104583784),
        (2.5, 0.038555331487680857503), (5.0, 0.000206242190110668078),
        (10.0, 5.3362023286043047133e-7), (18.5, 1.4876858371805824282e-7),
        (30.0, 5.5946816687865492031e-8),
    ],
}

EPS_TABLE = {1.0: 0.96242, 1.2: 0.92365, 1.5: 0.99405, 1.8: 1.24877, 1.9: 1.45550,
             1.99: 2.08475, 1.999: 2.59456}
GAMMA_TABLE = {1.0: 0.9595173757, 1.2: 0.9200428658, 1.5: 0.9938762864, 1.8: 1.2545741788,
               1.9: 1.4658061998, 1.99: 2.1100355502}
SEED_TABLE_1 = {2.0: 1.1284, 1.999: 1.1289, 1.99: 1.1340, 1.95: 1.1576, 1.9: 1.1903,
                1.8: 1.2687}


def series_pdf(alpha: float, x: float, terms: int = 60) -> float:
    """Small-x series (000 Lemma 23 with the 1/π of MATH.md), written out independently."""
    tot = 0.0
    for j in range(terms):
        tot += (-1) ** j * math.exp(math.lgamma((2 * j + 1) / alpha) - math.lgamma(2 * j + 1)) \
            * x ** (2 * j)
    return tot / (math.pi * alpha)


def bergstrom_pdf(alpha: float, x: float, terms: int = 40) -> float:
    """Bergström tail series with the 1/k! (MATH.md §2.1), independently."""
    tot = 0.0
    for k in range(1, terms + 1):
        c = math.exp(math.lgamma(alpha * k + 1) - math.lgamma(k + 1))
        tot += (-1) ** (k + 1) * c * math.sin(k * math.pi * alpha / 2) * x ** (-alpha * k - 1)
    return tot / math.pi


def fast_cdf(z: SaS):
    """Linear interpolant of the exact CDF (|x| ≤ 400γ), exact beyond; error checked below."""
    g = z.gamma
    half = np.sinh(np.linspace(0.0, math.asinh(400.0 / 0.05), 3000)) * 0.05 * g
    grid = np.concatenate([-half[::-1], half[1:]])
    vals = z.cdf(grid)

    def cdf(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = np.interp(x, grid, vals)
        far = np.abs(x) > grid[-1]
        if far.any():
            out[far] = z.cdf(x[far])
        return out

    return cdf


# -- density ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(MP_REF))
def test_density_and_sf_match_mpmath(key: tuple[float, str]) -> None:
    alpha, which = key
    z = SaS(alpha, 1.0)
    x = np.array([p for p, _ in MP_REF[key]])
    ref = np.array([v for _, v in MP_REF[key]])
    got = z.pdf(x) if which == "pdf" else z.sf(x)
    np.testing.assert_allclose(got, ref, rtol=2e-13)
    # scale family: p(x/γ)/γ
    z3 = SaS(alpha, 3.0)
    got3 = 3.0 * z3.pdf(3.0 * x) if which == "pdf" else z3.sf(3.0 * x)
    np.testing.assert_allclose(got3, ref, rtol=2e-13)


@pytest.mark.parametrize("alpha", [1.001, 1.2, 1.5, 1.8, 1.99, 1.9999])
def test_density_matches_small_x_series_and_p0(alpha: float) -> None:
    z = SaS(alpha, 1.0)
    assert float(z.pdf(0.0)) == pytest.approx(math.gamma(1 + 1 / alpha) / math.pi, rel=1e-14)
    xs = np.array([1e-8, 1e-4, 0.01, 0.05, 0.1, 0.15, 0.2, 0.3])   # > 0.1: integral path
    ref = [series_pdf(alpha, x) for x in xs]
    np.testing.assert_allclose(z.pdf(xs), ref, rtol=1e-13)


@pytest.mark.parametrize("alpha", [1.01, 1.2, 1.5, 1.8, 1.9])
def test_density_matches_bergstrom_series(alpha: float) -> None:
    z = SaS(alpha, 1.0)
    xs = np.array([14.0, 17.0, 19.9, 25.0, 1e3, 1e6, 1e50])   # < 20: integral path
    ref = [bergstrom_pdf(alpha, x) for x in xs]
    np.testing.assert_allclose(z.pdf(xs), ref, rtol=1e-13)
    lead = math.gamma(alpha + 1) * math.sin(math.pi * alpha / 2) / math.pi
    assert float(z.logpdf(1e250)) == pytest.approx(math.log(lead) - (alpha + 1) * 250 *
                                                   math.log(10), rel=1e-14)


@pytest.mark.parametrize("alpha", [1.2, 1.5, 1.8])
def test_density_matches_scipy_where_scipy_is_accurate(alpha: float) -> None:
    xs = np.array([0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0])
    got = SaS(alpha, 2.0).pdf(2.0 * xs) * 2.0
    ref = stats.levy_stable.pdf(xs, alpha, 0.0)
    np.testing.assert_allclose(got, ref, rtol=1e-8)


def test_closed_forms_at_the_ends() -> None:
    xs = np.array([-50.0, -1.0, 0.0, 0.3, 2.0, 1e8])
    c = SaS(1.0, 2.0)
    np.testing.assert_allclose(c.pdf(xs), stats.cauchy.pdf(xs, scale=2.0), rtol=1e-14)
    np.testing.assert_allclose(c.cdf(xs), stats.cauchy.cdf(xs, scale=2.0), rtol=1e-14)
    g = SaS(2.0, 2.0)                       # N(0, 2γ²): σ = √2·γ
    sig = math.sqrt(2.0) * 2.0
    np.testing.assert_allclose(g.pdf(xs[:-1]), stats.norm.pdf(xs[:-1], scale=sig), rtol=1e-12)
    np.testing.assert_allclose(g.sf(xs[:-1]), stats.norm.sf(xs[:-1], scale=sig), rtol=1e-13)
    assert g.variance() == 2.0 * 4.0 and g.std() == pytest.approx(sig)
    # continuity of the family at the ends of the supported range
    x = np.array([0.0, 0.5, 1.0, 3.0])
    np.testing.assert_allclose(SaS(1.001, 1.0).pdf(x), SaS(1.0, 1.0).pdf(x), rtol=2e-3)
    np.testing.assert_allclose(SaS(1.9999, 1.0).pdf(x), SaS(2.0, 1.0).pdf(x), rtol=1e-3)


def _gl_integral(f, a: float, b: float, n: int = 400) -> float:
    """Composite 10-point Gauss–Legendre on a log-spaced partition of [a, b], a > 0."""
    edges = np.geomspace(a, b, n + 1)
    t, w = np.polynomial.legendre.leggauss(10)
    mid, half = 0.5 * (edges[1:] + edges[:-1]), 0.5 * (edges[1:] - edges[:-1])
    x = (mid[:, None] + half[:, None] * t).ravel()
    return float((f(x).reshape(-1, 10) * (half[:, None] * w)).sum())


@pytest.mark.parametrize("alpha", [1.1, 1.5, 1.9, 1.999])
def test_normalization_and_sf_against_integrated_density(alpha: float) -> None:
    z = SaS(alpha, 1.0)
    lo = 1e-9 * float(z.pdf(0.0))             # ∫_0^1e-9 p ≈ 1e-9 p(0)
    for a, b in [(1e-9, 0.3), (0.3, 2.0), (2.0, 19.0), (19.0, 500.0)]:
        integral = _gl_integral(z.pdf, a, b, n=60)
        assert integral == pytest.approx(float(z.sf(a) - z.sf(b)), rel=1e-12, abs=1e-16)
    total = lo + _gl_integral(z.pdf, 1e-9, 1e4, n=400) + float(z.sf(1e4))
    assert total == pytest.approx(0.5, rel=1e-12)
    assert float(z.sf(0.0)) == 0.5 and float(z.cdf(0.0)) == 0.5


@pytest.mark.parametrize("alpha", [1.0, 1.001, 1.3, 1.5, 1.9, 1.9999, 2.0])
def test_cdf_ppf_round_trip(alpha: float) -> None:
    z = SaS(alpha, 1.7)
    q = np.concatenate([np.logspace(-300, -1, 40), [0.2, 0.3, 0.45, 0.4999999, 0.5]])
    if alpha == 2.0:
        q = q[q > 1e-250]
    x = z.ppf(q)
    assert np.all(np.isfinite(x)) and np.all(np.diff(x) >= 0)
    np.testing.assert_allclose(z.cdf(x), q, rtol=1e-12)
    np.testing.assert_allclose(z.sf(z.isf(q)), q, rtol=1e-12)
    xs = np.array([0.0, 1e-6, 0.01, 0.7, 2.0, 3.0, 30.0, 40.0])
    np.testing.assert_allclose(z.ppf(z.cdf(-xs)), -xs, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(z.isf(z.sf(xs)), xs, rtol=1e-11, atol=1e-13)
    assert float(z.ppf(0.0)) == -math.inf and float(z.ppf(1.0)) == math.inf


def test_logsf_in_the_far_tail() -> None:
    z = SaS(1.5, 1.0)
    lead = 2 * math.gamma(1.5) * math.sin(0.75 * math.pi) / math.pi / 2   # P(Z > x) ~ c x^-α
    assert float(z.logsf(1e200)) == pytest.approx(math.log(lead) - 1.5 * 200 * math.log(10),
                                                  rel=1e-14)
    assert float(z.sf(30.0)) == pytest.approx(math.exp(float(z.logsf(30.0))), rel=1e-14)


# -- sampling and the MAD -------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [1.0, 1.3, 1.7, 1.95, 2.0])
def test_cms_sampler_ks_and_power(alpha: float) -> None:
    z = SaS(alpha, 2.0)
    cdf = fast_cdf(z)
    probe = np.random.default_rng(1).standard_cauchy(300) * 3
    np.testing.assert_allclose(cdf(probe), z.cdf(probe), atol=2e-6)
    x = z.sample(20_000, rng=20240611 + int(alpha * 100))
    assert_ks_fits(x, cdf)
    assert_power(x, scaled_cdfs(cdf))


@pytest.mark.parametrize("alpha", [1.2, 1.8])
def test_inverse_cdf_sampler_ks_and_power(alpha: float) -> None:
    z = SaS(alpha, 0.5)
    cdf = fast_cdf(z)
    x = z.sample_inverse_cdf(20_000, rng=7 + int(alpha * 10))
    assert_ks_fits(x, cdf)
    assert_power(x, scaled_cdfs(cdf))


@pytest.mark.parametrize("alpha,gamma", [(1.3, 1.0), (1.8, 2.0), (1.95, 0.5)])
def test_mad_formula_and_monte_carlo(alpha: float, gamma: float) -> None:
    z = SaS(alpha, gamma)
    # E|X| = 2∫_0^∞ P(Z > x) dx (quadrature, tail beyond 1e6γ from the leading power term)
    tail = 2 * math.gamma(alpha) * math.sin(math.pi * alpha / 2) / math.pi / 2 \
        * (1e6 * gamma) ** (1 - alpha) * gamma**alpha / (alpha - 1)
    quad = 2 * (1e-9 * gamma * 0.5 + _gl_integral(z.sf, 1e-9 * gamma, 1e6 * gamma, n=300)
                + tail)
    assert z.mad() == pytest.approx(quad, rel=1e-8)
    # Monte Carlo: the plain mean of |X| within 5 s.e., and the truncated mean E min(|X|, c)
    # (finite variance, so its s.e. is trustworthy) against quadrature of 2·sf on [0, c].
    x = np.abs(z.sample(400_000, rng=99))
    se = x.std() / math.sqrt(x.size)
    assert abs(x.mean() - z.mad()) <= 5 * se
    c = 10.0 * gamma
    tm = np.minimum(x, c)
    exact_tm = 2 * (1e-9 * gamma * 0.5 + _gl_integral(z.sf, 1e-9 * gamma, c, n=60))
    assert abs(tm.mean() - exact_tm) <= 5 * tm.std() / math.sqrt(tm.size)


def test_seed_table_1_mad() -> None:
    for alpha, mad in SEED_TABLE_1.items():
        assert round(SaS(alpha, 1.0).mad(), 4) == mad
    assert SaS(1.0, 1.0).mad() == math.inf
    assert SaS(2.0, 1.0).mad() == pytest.approx(2 / math.sqrt(math.pi), rel=1e-15)


@pytest.mark.parametrize("alpha", [1.0, 1.5, 1.9, 2.0])
def test_stability_of_sums(alpha: float) -> None:
    z = SaS(alpha, 1.0)
    draws = z.sample((3, 20_000), rng=314 + int(10 * alpha)).sum(axis=0)
    m = SymmetricStable(alpha, 1.0)
    agg = m.aggregate(3)
    assert agg.gamma == pytest.approx(3 ** (1 / alpha), rel=1e-15)
    cdf = fast_cdf(agg.noise)
    assert_ks_fits(draws, cdf)
    assert_power(draws, scaled_cdfs(cdf))
    w = np.array([2.0, -1.0, 0.5])
    assert m.aggregate(w).gamma == pytest.approx(
        sum_gamma(alpha, np.abs(w)), rel=1e-15)
    assert m.aggregate(w).gamma == pytest.approx(
        float(np.sum(np.abs(w) ** alpha)) ** (1 / alpha), rel=1e-14)
    assert m.moe_of_sum(3, 0.9) == pytest.approx(agg.noise.interval_halfwidth(0.9), rel=1e-15)


# -- privacy loss ---------------------------------------------------------------------------------
def test_epsilon_reference_values() -> None:
    for alpha, eps in EPS_TABLE.items():
        assert round(st.stable_epsilon(alpha, 1.0), 5) == eps
    eps, x = st.stable_loss_sup(1.5, 1.0)
    assert float(eps) == pytest.approx(0.994053076383, abs=5e-13)
    assert float(x) == pytest.approx(2.7886, abs=5e-5)
    assert float(st.stable_loss_sup(2.0, 1.0)[0]) == math.inf
    assert float(st.stable_loss_sup(1.5, 0.0)[0]) == 0.0


def test_generic_sup_algorithm_reproduces_cauchy_closed_form() -> None:
    # MATH.md's grid + Brent algorithm applied to the Cauchy log density (α = 1)
    def loss(y: np.ndarray, d: float) -> np.ndarray:
        return np.log1p((y + d) ** 2) - np.log1p(y * y)

    for d in [1e-3, 0.1, 1.0, 3.0, 15.0, 1e3, 1e6]:
        eps, x = st._sup_by_grid(loss, 1.0, d)
        assert eps == pytest.approx(2 * math.asinh(d / 2), rel=1e-13)
        assert x == pytest.approx((d + math.sqrt(d * d + 4)) / 2, rel=1e-7)
    e = st.stable_loss_sup(1.0, [0.5, 2.0])[0]
    np.testing.assert_allclose(e, 2 * np.arcsinh([0.25, 1.0]), rtol=1e-15)


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (2-4 s)
def test_epsilon_strictly_increasing_in_d() -> None:
    d = np.geomspace(0.01, 100, 60)
    eps = st.stable_epsilon(1.5, d)
    assert np.all(np.diff(eps) > 0)
    tab = st.stable_epsilon_table(1.5)
    dd = np.geomspace(1e-8, 1e12, 200_001)
    assert np.all(np.diff(tab(dd)) > 0)


def test_figure_9_cauchy_asymptotes_and_corrected_cor_27() -> None:
    delta = 1.0
    big = np.array([1e2, 1e3, 1e4])          # γ → ∞: ε ≈ Δ/γ (000 Cor 26)
    r_big = [float(SymmetricStable(1.0, g).epsilon(delta)) * g / delta for g in big]
    assert abs(r_big[-1] - 1) < 1e-8 and abs(r_big[0] - 1) > abs(r_big[-1] - 1)
    small = [1e-2, 1e-4, 1e-6]               # γ → 0: ε ≈ 2·ln(Δ/γ) (MATH.md's correction)
    eps = [float(SymmetricStable(1.0, g).epsilon(delta)) for g in small]
    corrected = [2 * math.log(delta / g) for g in small]
    seed = [2 * math.log(math.sqrt(2) * delta / g) for g in small]
    ratios = [e / c for e, c in zip(eps, corrected, strict=True)]
    assert all(abs(r - 1) < 1e-3 for r in ratios) and abs(ratios[-1] - 1) < 1e-11
    # the seed's 2·ln(√2Δ/γ) is off by exactly ln 2 in the limit
    for e, s in zip(eps, seed, strict=True):
        assert s - e == pytest.approx(math.log(2), abs=1e-3)
    # and 2·asinh is exactly the closed form of 000 eq. (73)
    g = 0.37
    eq73 = math.log((math.sqrt(4 * g * g + 1) + 1) / (math.sqrt(4 * g * g + 1) - 1))
    assert float(SymmetricStable(1.0, g).epsilon(1.0)) == pytest.approx(eq73, rel=1e-14)


@pytest.mark.parametrize("alpha,d", [(1.5, 0.3), (1.5, 1.0), (1.5, 40.0), (1.99, 1.0),
                                     (1.99, 15.0), (1.0, 2.0)])
def test_pure_dp_numerically_on_a_grid(alpha: float, d: float) -> None:
    """max_x |ln p(x) − ln p(x − Δ)| over a fine grid incl. far tails ≤ ε(Δ), and tight."""
    gamma = 2.0
    mech = SymmetricStable(alpha, gamma)
    delta = d * gamma
    z = mech.noise
    core = np.linspace(-30, 30, 6001) * gamma
    tails = np.geomspace(30, 1e12, 400) * gamma
    xs = np.concatenate([core, tails, -tails, [0.0, delta, delta / 2]])
    loss = np.abs(z.logpdf(xs) - z.logpdf(xs - delta))
    eps = float(mech.epsilon(delta))
    assert loss.max() <= eps + 1e-9
    assert loss.max() >= eps - 1e-4 * eps         # the grid gets close to the sup
    assert float(mech.rho(delta)) == pytest.approx(eps * math.tanh(eps / 2), rel=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [1.001, 1.5, 1.9999])
def test_epsilon_table_is_conservative_and_tight(alpha: float) -> None:
    tab = st.stable_epsilon_table(alpha)
    assert tab.rtol <= st.EPS_TABLE_RTOL
    rng = np.random.default_rng(int(alpha * 1000))
    d = np.exp(rng.uniform(math.log(1e-6), math.log(1e11), 600))
    d = np.concatenate([d, [tab.d_min * 0.999, tab.d_min * 1.001, tab.d_max * 0.999,
                            tab.d_max * 1.001]])
    exact = st._eps_data(st._core(alpha), d)[0]        # fast exact path
    r = tab(d) / exact - 1
    assert r.min() >= 0.0
    assert r.max() <= tab.rtol
    # below the table: the mean-value bound d·S, tight up to O(d²)
    s_sup = st.stable_score_sup(alpha)[0]
    tiny = np.array([1e-12, 1e-9, 3e-7])
    np.testing.assert_allclose(tab(tiny) / (tiny * s_sup), 1.0, rtol=tab.rtol, atol=0)
    assert np.all(tab(tiny) >= tiny * s_sup)
    few = d[::60][:8]
    brent = st.stable_epsilon(alpha, few)             # independent grid + Brent algorithm
    # agreement within the accuracy of the exact ε (≈ 1e-9 at α = 1.001, 2e-12 above 1.05)
    np.testing.assert_allclose(exact[::60][:8], brent, rtol=st._exact_rtol(st._core(alpha)))
    assert np.all(tab(few) >= brent)


def test_epsilon_table_scale_and_speed_sanity() -> None:
    tab = st.stable_epsilon_table(1.5)
    d = np.exp(np.random.default_rng(0).uniform(-20, 25, 1_000_000))
    out = tab(d)
    assert out.shape == d.shape and np.all(np.isfinite(out)) and np.all(out > 0)
    assert float(tab(0.0)) == 0.0
    s, _ = st.stable_score_sup(1.5)
    assert float(tab(1e-9)) == pytest.approx(1e-9 * s, rel=1e-9)   # ε ≈ d·S for small d
    big = 1e15
    assert float(tab(big)) == pytest.approx(2.5 * math.log(big) + tab.asym_c, rel=1e-11)


# -- mechanism ------------------------------------------------------------------------------------
def test_calibration_gamma_table_and_round_trip() -> None:
    for alpha, gamma in GAMMA_TABLE.items():
        m = SymmetricStable.for_epsilon(alpha, 1.0)
        assert m.gamma == pytest.approx(gamma, rel=1e-9)
    m = SymmetricStable.for_epsilon(1.7, 0.5, sensitivity=3.0)
    assert float(st.stable_epsilon(1.7, 3.0 / m.gamma)) == pytest.approx(0.5, rel=1e-11)
    assert float(m.epsilon(3.0)) == pytest.approx(0.5, rel=1e-8)
    assert SymmetricStable.for_epsilon(1.0, 2.0, sensitivity=4.0).gamma == pytest.approx(
        4.0 / (2 * math.sinh(1.0)), rel=1e-15)


@pytest.mark.slow  # 1.5 s, in CI
def test_min_mad_beats_the_math_md_values() -> None:
    mads = {1.5: 1.695, 1.8: 1.592, 1.9: 1.745}
    for alpha, mad in mads.items():
        assert round(SymmetricStable.for_epsilon(alpha, 1.0).mad(), 3) == mad
    best = SymmetricStable.min_mad(1.0, xatol=1e-3)
    assert best.mad() <= min(mads.values())
    assert float(st.stable_epsilon(best.alpha, 1.0 / best.gamma)) == pytest.approx(1.0, rel=1e-9)
    for a in (best.alpha - 0.05, best.alpha + 0.05):
        assert SymmetricStable.for_epsilon(a, 1.0).mad() > best.mad()


def test_release_interface_and_margins() -> None:
    m = SymmetricStable(1.8, 2.0)
    assert m.family == "symmetric_stable" and m.pure and not m.gaussian_dp
    assert m.params() == {"alpha": 1.8, "gamma": 2.0}
    r = m.release_table([1.0, 2.0, 3.0], rng=5, level=0.9, grid=0.5)
    assert r.estimate.shape == (3,) and np.all(np.isinf(r.sd))
    assert np.all(r.estimate == np.round(r.estimate * 2) / 2)     # on the public grid
    h = m.noise.interval_halfwidth(0.9)            # exact |Z| quantile, plus half a grid step
    np.testing.assert_allclose(r.moe, h + 0.25, rtol=1e-15)
    np.testing.assert_allclose(r.upper - r.lower, 2 * r.moe)
    assert float(m.noise.cdf(h) - m.noise.cdf(-h)) == pytest.approx(0.9, rel=1e-12)
    assert m.moe_at([5.0], 0.9)[0] == pytest.approx(h + 0.5 * m.default_grid(), rel=1e-12)
    assert m.release([0.0, 1.0], rng=1).shape == (2,)
    assert m.to_dict()["family"] == "symmetric_stable"
    assert m.mad() == pytest.approx(SaS(1.8, 2.0).mad())
    g = SymmetricStable(2.0, 1.5)
    assert not g.pure and g.gaussian_dp
    assert float(g.epsilon(1.0)) == math.inf and float(g.epsilon(0.0)) == 0.0
    assert float(g.rho(3.0)) == pytest.approx(9.0 / (4 * 1.5**2))
    assert g.noise.std() == pytest.approx(math.sqrt(2) * 1.5)
    # (ε, δ): α = 2 is exactly Gaussian with σ = √2γ; α < 2 never worse than pure ε
    from tabdp.mechanisms import Gaussian
    assert float(g.approx_epsilon(1.0, 1e-6)) == pytest.approx(
        float(Gaussian(math.sqrt(2) * 1.5).approx_epsilon(1.0, 1e-6)), rel=1e-12)
    assert float(m.approx_epsilon(1.0, 1e-6)) <= float(m.epsilon(1.0))


@pytest.mark.parametrize("alpha", [0.5, 1.0005, 1.99995, 2.5, float("nan"), "1.5", True])
def test_bad_alpha_messages(alpha: object) -> None:
    with pytest.raises(InvalidParameterError) as err:
        SymmetricStable(alpha, 1.0)  # type: ignore[arg-type]
    msg = str(err.value)
    assert "alpha" in msg and "1.9999" in msg and repr(alpha)[:4] in msg


@pytest.mark.parametrize("gamma", [0.0, -1.0, float("inf")])
def test_bad_gamma_and_other_messages(gamma: float) -> None:
    with pytest.raises(InvalidParameterError, match="gamma"):
        SymmetricStable(1.5, gamma)
    with pytest.raises(InvalidParameterError, match="not pure"):
        SymmetricStable.for_epsilon(2.0, 1.0)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        SymmetricStable.for_epsilon(1.5, -1.0)
    with pytest.raises(InvalidParameterError, match="alpha_range"):
        SymmetricStable.min_mad(1.0, alpha_range=(1.5, 2.0))
    with pytest.raises(InvalidParameterError, match="d = Delta/gamma"):
        st.stable_epsilon(1.5, -1.0)
    with pytest.raises(InvalidParameterError, match="n_or_weights"):
        SymmetricStable(1.5, 1.0).aggregate(0)
