"""The PolyPlace distribution and its privacy (MATH.md §3.2–3.3, seed 002 Def 6, Lemmas 7–15).

Exact checks use adaptive quadrature split at the breakpoint ±s/α; the privacy check of Lemma 9
evaluates the log-density ratio of neighbouring releases on a grid that contains every kink and
extends far into the tails; sampler checks are fixed-seed KS tests at p ≤ 1e-6 with a power check
against ±30 % scale.
"""

from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import pytest
from scipy import integrate

import tabdp
import tabdp.noise
from tabdp.exceptions import InvalidParameterError
from tabdp.noise import Laplace, PolyPlace
from tabdp.rng import RandomSource

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _stats import assert_ks_fits, assert_power, scaled_cdfs  # noqa: E402

ALPHAS = [1.05, 1.5, 2.0, 2.5, 3.0, 10.0, 100.0, 1e4]
C1 = 2.0 * (17.0 - 3.0 * math.e) / math.e   # Cor 14 first-order coefficient (MATH.md §3.3)


def def6_pdf(x: float, s: float, a: float) -> float:
    """Seed 002 Definition 6 (as restored in MATH.md §3.2), written out independently."""
    n = a / (2.0 * (2.0 * ((a - 1.0) / a) ** a + a - 1.0) * s)
    u = abs(x) / s
    if u < 1.0 / a:
        return n * (a - 1.0) * (1.0 - u) ** (a - 1.0)
    return n * (a + 1.0) * (1.0 - 1.0 / a**2) ** a * (1.0 + u) ** (-a - 1.0)


def tail_integral(pp: PolyPlace, x0: float, power: int = 0) -> float:
    """∫_{x0}^∞ x^power f(x) dx by quadrature, split at the breakpoint and at decades of s."""
    b = pp.s / pp.alpha
    pts = sorted({x0, *[p for p in (b, pp.s, 10 * pp.s, 1e3 * pp.s) if p > x0]})

    def f(x: float) -> float:
        return x**power * float(pp.pdf(x))

    total = 0.0
    for lo, hi in zip(pts[:-1], pts[1:], strict=True):
        total += integrate.quad(f, lo, hi, epsabs=0.0, epsrel=1e-13, limit=200)[0]
    total += integrate.quad(f, pts[-1], np.inf, epsabs=0.0, epsrel=1e-13, limit=400)[0]
    return total


# -- density, cdf, quantiles ----------------------------------------------------------------------
@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("s", [0.3, 10.0])
def test_density_integrates_to_one(s: float, alpha: float) -> None:
    pp = PolyPlace(s, alpha)
    assert 2.0 * tail_integral(pp, 0.0) == pytest.approx(1.0, abs=1e-10)


@pytest.mark.parametrize("alpha", [1.5, 3.0, 10.0, 1e3])
def test_density_matches_definition_6(alpha: float) -> None:
    pp = PolyPlace(2.0, alpha)
    xs = np.concatenate([np.linspace(-5, 5, 101), [2.0 / alpha, -2.0 / alpha, 0.0, 40.0]])
    ref = np.array([def6_pdf(x, 2.0, alpha) for x in xs])
    np.testing.assert_allclose(pp.pdf(xs), ref, rtol=1e-11, atol=1e-300)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_continuity_at_breakpoint(alpha: float) -> None:
    pp = PolyPlace(3.0, alpha)
    b = 3.0 / alpha
    log_n = math.log(alpha / (2 * 3.0 * pp._dd))
    inner = log_n + math.log(alpha - 1) + (alpha - 1) * math.log1p(-1 / alpha)
    outer = (log_n + math.log1p(alpha)
             + alpha * math.log1p(-1 / alpha**2) - (alpha + 1) * math.log1p(1 / alpha))
    assert inner == pytest.approx(outer, abs=1e-12)        # the two branches meet
    l1, l2 = pp.logpdf([b * (1 - 1e-12), b * (1 + 1e-12)])
    assert abs(l1 - l2) < 1e-9
    assert float(pp.logpdf(b)) == pytest.approx(outer, abs=1e-12)
    t1, t2 = pp.sf([b * (1 - 1e-13), b * (1 + 1e-13)])
    assert abs(t1 - t2) < 1e-12


@pytest.mark.parametrize("alpha", [1.05, 2.5, 10.0, 1e4])
def test_sf_matches_integrated_density(alpha: float) -> None:
    pp = PolyPlace(1.0, alpha)
    for x0 in [0.0, 0.3 / alpha, 1.0 / alpha, 2.0 / alpha, 0.5, 3.0]:
        exact = tail_integral(pp, x0)
        if exact < 1e-250:
            continue
        assert float(pp.sf(x0)) == pytest.approx(exact, rel=1e-9)
        assert float(pp.cdf(-x0)) == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("alpha", ALPHAS + [1e6])
def test_cdf_ppf_round_trip_to_extreme_tails(alpha: float) -> None:
    pp = PolyPlace(2.0, alpha)
    q = np.concatenate([np.logspace(-300, -1, 60), [0.2, 0.3, 0.45, 0.4999999, 0.5]])
    x = pp.ppf(q)
    assert np.all(np.isfinite(x)) and np.all(np.diff(x) >= 0)
    np.testing.assert_allclose(pp.cdf(x), q, rtol=1e-10)
    np.testing.assert_allclose(pp.sf(pp.isf(q)), q, rtol=1e-10)   # upper tail by symmetry
    np.testing.assert_allclose(pp.logsf(pp.isf(q[:3])), np.log(q[:3]), rtol=1e-12)
    assert float(pp.ppf(0.0)) == -math.inf and float(pp.ppf(1.0)) == math.inf
    assert float(pp.ppf(0.5)) == 0.0


def test_logsf_beyond_underflow() -> None:
    pp = PolyPlace(1.0, 1e4)
    # closed form: ln(1/2) + ln((α+1)C/D) − α·ln(1+u)
    a = 1e4
    dd = 2 * (1 - 1 / a) ** a + a - 1
    ref = (math.log(0.5) + math.log1p(a) + a * math.log1p(-1 / a**2) - math.log(dd)
           - a * math.log(3.0))
    assert float(pp.logsf(2.0)) == pytest.approx(ref, rel=1e-12)
    assert float(pp.sf(2.0)) == 0.0     # underflows, but logsf does not


# -- variance (Lemma 13), Cor 14, Lemma 15 ---------------------------------------------------------
@pytest.mark.parametrize("alpha", [2.2, 2.5, 3.0, 5.0, 10.0, 50.0, 1000.0])
def test_variance_by_integration_equals_lemma_13(alpha: float) -> None:
    pp = PolyPlace(1.7, alpha)
    numeric = 2.0 * tail_integral(pp, 0.0, power=2)
    assert pp.variance() == pytest.approx(numeric, rel=1e-8)


def test_variance_infinite_for_alpha_at_most_two_and_laplace_limit() -> None:
    assert PolyPlace(1.0, 2.0).variance() == math.inf
    assert PolyPlace(1.0, 1.5).std() == math.inf
    for a in (1e4, 1e6):
        assert PolyPlace(3.0, a).variance() == pytest.approx(2 * 9.0 / a**2, rel=5 / a)


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_corollary_14_first_order_expansion(eps: float) -> None:
    errs = []
    for g_rel in (1e-2, 1e-3, 1e-4):
        g = g_rel * eps
        var = PolyPlace(1.0 / g, eps / g).variance()       # SS = 1
        coef = (var - 2.0 / eps**2) * eps**3 / g
        errs.append(abs(coef - C1))
        assert abs(coef - C1) <= 20.0 * g_rel            # O(γ/ε) remainder
        assert var > 2.0 / eps**2                         # above the Laplace value (c₁ > 0)
    assert errs[1] < errs[0] / 5 and errs[2] < errs[1] / 5  # converges linearly


def test_lemma_15_convergence_to_laplace() -> None:
    eps, a = 1.0, 2.0
    lap = Laplace(a / eps)
    xs = np.linspace(-30, 30, 3001)
    prev = math.inf
    for g in (1e-1, 1e-2, 1e-3, 1e-4):
        pp = PolyPlace(a / g, eps / g)
        err = float(np.max(np.abs(pp.pdf(xs) - lap.pdf(xs))))
        cdf_err = float(np.max(np.abs(pp.cdf(xs) - lap.cdf(xs))))
        assert err < 0.25 * g and err < prev / 5        # O(γ) pointwise convergence
        assert cdf_err < 0.2 * g
        prev = err
    assert prev < 1e-4


# -- Lemma 12 identity -----------------------------------------------------------------------------
@pytest.mark.parametrize("s,alpha", [(10.0, 10.0), (1.0, 1.3), (0.5, 4.0), (1e3, 200.0)])
def test_lemma_12_infinitesimal_privacy_loss(s: float, alpha: float) -> None:
    b = s / alpha
    xs = np.concatenate([np.linspace(0.05, 0.95, 7) * b, np.array([1.1, 2.0, 5.0, 50.0]) * b,
                         [3 * s, 30 * s]])
    xs = np.concatenate([xs, -xs])
    for x in xs:
        h = 1e-6 * min(abs(x), abs(abs(x) - b))
        pp = PolyPlace(s, alpha)
        dx = (float(pp.logpdf(x + h)) - float(pp.logpdf(x - h))) / (2 * h)
        hl = 1e-6
        ds = (float(PolyPlace(s * math.exp(hl), alpha).logpdf(x))
              - float(PolyPlace(s * math.exp(-hl), alpha).logpdf(x))) / (2 * hl)
        assert abs(dx) + abs(ds) / s == pytest.approx(alpha / s, rel=1e-6)


# -- Lemma 9: numerical pure-DP check --------------------------------------------------------------
def max_log_ratio(eps: float, gamma: float, lam: float, dq: float) -> float:
    """max_x |ln f_{s,α}(x) − ln f_{s′,α}(x − Δq)| with SS = 1, SS′ = e^λ (MATH.md §5 recipe)."""
    s, s2, a = 1.0 / gamma, math.exp(lam) / gamma, eps / gamma
    p, p2 = PolyPlace(s, a), PolyPlace(s2, a)
    kinks = np.array([0.0, dq, s / a, -s / a, dq + s2 / a, dq - s2 / a])
    tiny = np.array([0.0, 1e-12, -1e-12, 1e-9, -1e-9])
    scale = max(s, s2)
    tails = np.geomspace(1e-3, 1e13, 800) * scale
    xs = np.concatenate([(kinks[:, None] + tiny[None, :] * scale).ravel(),
                         np.linspace(-30, 30, 6001) * s / a, tails, -tails])
    return float(np.max(np.abs(p.logpdf(xs) - p2.logpdf(xs - dq))))


@pytest.mark.parametrize("eps,gamma", [(1.0, 0.1), (1.0, 0.6), (0.5, 0.45), (2.0, 0.05)])
def test_lemma_9_polyplace_mechanism_is_eps_dp(eps: float, gamma: float) -> None:
    rng = np.random.default_rng(int(eps * 1000 + gamma * 100))
    pairs = [(lam, sign * min(1.0, math.exp(lam)))
             for lam in (-gamma, 0.0, gamma) for sign in (-1.0, 1.0)]
    for _ in range(40):
        lam = rng.uniform(-gamma, gamma)
        pairs.append((lam, rng.uniform(-1, 1) * min(1.0, math.exp(lam))))
    losses = [max_log_ratio(eps, gamma, lam, dq) for lam, dq in pairs]
    assert max(losses) <= eps * (1 + 1e-9)
    assert max(losses) >= 0.9 * eps                      # the bound is tight


def test_lemma_9_check_has_power() -> None:
    """The same check flags a shift larger than the smooth sensitivity allows."""
    assert max_log_ratio(1.0, 0.1, 0.0, 1.5) > 1.2
    assert max_log_ratio(1.0, 0.1, 2 * 0.1, 1.0) > 1.0 + 1e-3   # SS ratio beyond e^γ


# -- sampler ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("s,alpha", [(10.0, 10.0), (2.0, 1.5), (0.5, 1e4), (1.0, 2.5)])
def test_sampler_ks_and_power(s: float, alpha: float) -> None:
    pp = PolyPlace(s, alpha)
    x = pp.sample(20_000, rng=RandomSource(seed=20240611))
    assert x.shape == (20_000,)
    assert_ks_fits(x, pp.cdf)
    assert_power(x, scaled_cdfs(pp.cdf))


def test_sampler_shapes_and_symmetry() -> None:
    pp = PolyPlace(1.0, 5.0)
    assert pp.sample((3, 4), rng=1).shape == (3, 4)
    x = pp.sample(40_000, rng=2)
    assert abs(float(np.mean(x > 0)) - 0.5) < 0.02
    assert np.mean(np.abs(x) < 1.0 / 5.0) == pytest.approx(1 - 2 * float(pp.sf(0.2)), abs=0.02)


# -- API -------------------------------------------------------------------------------------------
def test_public_names() -> None:
    assert tabdp.noise.PolyPlace is PolyPlace
    with pytest.warns(DeprecationWarning, match=r"tabdp.mechanisms.PolyPlace is deprecated"):
        assert tabdp.mechanisms.PolyPlace is PolyPlace  # the old path, for one release
    pp = tabdp.noise.PolyPlace(s=10.0, alpha=10.0)
    for name in ("pdf", "cdf", "ppf", "sample", "variance", "logpdf", "sf", "isf", "std"):
        assert callable(getattr(pp, name))
    assert pp == PolyPlace(10.0, 10.0) and hash(pp) == hash(PolyPlace(10.0, 10.0))
    assert repr(pp) == "PolyPlace(s=10.0, alpha=10.0)"


@pytest.mark.parametrize("kw,needle", [
    ({"s": 0.0, "alpha": 2.0}, "s must be finite and > 0"),
    ({"s": -1.0, "alpha": 2.0}, "got -1.0"),
    ({"s": 1.0, "alpha": 1.0}, "alpha must be finite and > 1"),
    ({"s": 1.0, "alpha": math.nan}, "alpha"),
    ({"s": "a", "alpha": 2.0}, "must be a real number"),
])
def test_invalid_parameters(kw: dict, needle: str) -> None:
    with pytest.raises(InvalidParameterError, match="PolyPlace noise") as err:
        PolyPlace(**kw)
    assert needle in str(err.value) and "Hint:" in str(err.value)
