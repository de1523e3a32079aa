"""Numerical privacy checks of the additive mechanisms (MATH.md §1.1, §1.2, §5).

* PRDP (∞-Rényi): on a grid that contains the kinks 0 and Δ, a dense band around them and
  geometric tails out to ~1e15 noise scales, sup |ln f(x) − ln f(x − Δ)| ≤ ε(Δ)·(1 + 1e-9), and the
  sup is attained (Thm 5.4/5.5: at z = Δ), so the policy is tight. Far-tail behaviour is checked
  through the asymptotic slope of ln f.
* PRzCDP: D_α(N_q ‖ N_q′) = ln ∫ f(x)^α f(x − Δ)^{1−α} dx / (α − 1), by composite Gauss–Legendre on
  cells graded geometrically towards 0, Δ and the Gaussian peak αΔ (checked against a second node
  count, and against closed forms for Gaussian and Laplace), is ≤ α·ρ(Δ).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms.additive import (
    ExpPolyLog,
    Gaussian,
    GeneralizedGaussian,
    Laplace,
    UnitSplitting,
)

DELTAS = [0.1, 1.0, 10.0, 1e3, 1e5]
ALPHAS = np.array([1.5, 2.0, 8.0])
EPS_MACH = np.finfo(np.float64).eps

PURE = [
    ("laplace", lambda: Laplace(scale=1.3)),
    ("gg-p0.3", lambda: GeneralizedGaussian(sigma=0.8, p=0.3)),
    ("gg-p0.5", lambda: GeneralizedGaussian(sigma=2.0, p=0.5)),
    ("gg-p1", lambda: GeneralizedGaussian(sigma=0.8, p=1.0)),
    ("epl1-d2", lambda: ExpPolyLog(sigma=1.5, a=1.0, d=2.0, p=1.0)),
    ("epl1-d4", lambda: ExpPolyLog(sigma=1.0, a=3.0, d=4.0, p=1.0)),
    ("epl2-d1", lambda: ExpPolyLog(sigma=1.0, a=math.e, d=1.0, p=2.0)),
    ("epl2-d3", lambda: ExpPolyLog(sigma=2.0, a=5.0, d=3.0, p=2.0)),
    ("epl1.5-d1", lambda: ExpPolyLog(sigma=1.0, a=2.0, d=1.0, p=1.5)),
]
PURE_IDS = [p[0] for p in PURE]
PURE_MAKERS = [p[1] for p in PURE]


def _scale(mech) -> float:
    return float(mech.noise.interval_halfwidth(0.5))


# ------------------------------------------------------------------------------------------
# PRDP: sup of the log density ratio
# ------------------------------------------------------------------------------------------
def log_ratio_grid(delta: float, scale: float) -> np.ndarray:
    g = scale * np.geomspace(1e-12, 1e15, 800)
    dense = np.linspace(-3.0 * delta - 10.0 * scale, 4.0 * delta + 10.0 * scale, 4001)
    parts = [c + s * g for c in (0.0, delta) for s in (-1.0, 1.0)]
    return np.unique(np.concatenate([*parts, dense, [0.0, delta, 0.5 * delta]]))


def sup_log_ratio(logf, delta: float, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|ln f(x) − ln f(x − Δ)| and a bound on its rounding error at each grid point."""
    with np.errstate(over="ignore", invalid="ignore"):
        a, b = logf(x), logf(x - delta)
    return np.abs(a - b), 4.0 * EPS_MACH * (np.abs(a) + np.abs(b))


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("make", PURE_MAKERS, ids=PURE_IDS)
def test_prdp_sup_equals_policy(make, delta):
    mech = make()
    eps = float(mech.epsilon(delta))
    assert 0.0 < eps < math.inf
    scale = _scale(mech)
    x = log_ratio_grid(delta, scale)
    lr, rnd = sup_log_ratio(mech.noise.logpdf, delta, x)
    # never above the policy (up to rounding of the two log densities)
    excess = lr - eps * (1.0 + 1e-9) - rnd
    assert np.all(excess <= 0.0), (x[np.argmax(excess)], lr.max(), eps)
    # the grid is meaningful (rounding ≪ 1e-9 ε) far into the tails
    ok = rnd <= 1e-10 * eps
    assert np.max(np.abs(x[ok])) >= 100.0 * (delta + scale)
    # tight: attained at z = Δ (Thm 5.4/5.5) and nowhere exceeded
    at_kink = abs(float(mech.noise.logpdf(delta) - mech.noise.logpdf(0.0)))
    assert at_kink == pytest.approx(eps, rel=1e-9)
    assert lr[ok].max() >= eps * (1.0 - 1e-6)
    # asymptotic slope: beyond the grid the log ratio tends to Δ·|d ln f/dx| at ±∞
    big = float(np.max(x[ok]))
    with np.errstate(over="ignore"):
        slope = abs(float(mech.noise.logpdf(big) - mech.noise.logpdf(big * (1 + 1e-3)))) / (
            1e-3 * big)
    if isinstance(mech, Laplace) or (isinstance(mech, GeneralizedGaussian) and mech.p == 1.0):
        assert delta * slope == pytest.approx(eps, rel=1e-6)  # sup also attained at ±∞
    else:
        assert delta * slope < 0.5 * eps  # heavy tails: the ratio dies out


def test_gaussian_has_no_pure_guarantee():
    mech = Gaussian(sigma=1.5)
    assert mech.epsilon([0.0, 1.0]).tolist() == [0.0, math.inf]
    x = np.array([0.0, 10.0, 1e3, 1e6])
    lr, _ = sup_log_ratio(mech.noise.logpdf, 2.0, x)
    np.testing.assert_allclose(lr, np.abs(2.0 * (2 * x - 2.0) / (2 * 1.5**2)), rtol=1e-9)
    assert np.all(np.diff(lr[1:]) > 0)  # unbounded: ε = ∞ is right


# ------------------------------------------------------------------------------------------
# PRzCDP: Rényi divergences
# ------------------------------------------------------------------------------------------
def renyi_divergences(logf, delta: float, alphas: np.ndarray, scale: float,
                      nodes: int = 20) -> np.ndarray:
    """D_α(f ‖ f(· − Δ)) for each α, by composite Gauss–Legendre on graded cells."""
    centers = np.concatenate([[0.0, delta], alphas * delta, (1.0 - alphas) * delta])
    g = scale * np.geomspace(1e-12, 1e30, 450)
    pts = np.unique(np.concatenate([centers, *[c + s * g for c in centers for s in (-1, 1)]]))
    gx, gw = np.polynomial.legendre.leggauss(nodes)
    half = 0.5 * np.diff(pts)
    x = (0.5 * (pts[1:] + pts[:-1]))[:, None] + half[:, None] * gx
    w = half[:, None] * gw
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        la, lb = logf(x), logf(x - delta)
        lr = la - lb
        out = []
        for alpha in alphas:
            if np.max(np.abs((alpha - 1.0) * lr)) <= 30.0:
                # ∫ f·(e^{(α−1)(ln f − ln f′)} − 1) avoids the cancellation in ln(1 + small)
                j = float(np.sum(w * np.exp(la) * np.expm1((alpha - 1.0) * lr)))
                out.append(math.log1p(j) / (alpha - 1.0))
            else:
                h = alpha * la + (1.0 - alpha) * lb
                top = float(np.max(h))
                i = float(np.sum(w * np.exp(h - top)))
                out.append((math.log(i) + top) / (alpha - 1.0))
    return np.asarray(out)


def _renyi_checked(mech, delta: float) -> np.ndarray:
    scale = _scale(mech)
    d20 = renyi_divergences(mech.noise.logpdf, delta, ALPHAS, scale, 20)
    d30 = renyi_divergences(mech.noise.logpdf, delta, ALPHAS, scale, 30)
    np.testing.assert_allclose(d20, d30, rtol=1e-10, atol=1e-15)  # quadrature converged
    return d20


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("make", PURE_MAKERS, ids=PURE_IDS)
def test_renyi_divergence_within_zcdp_policy(make, delta):
    mech = make()
    d = _renyi_checked(mech, delta)
    rho = float(mech.rho(delta))
    eps = float(mech.epsilon(delta))
    assert rho == pytest.approx(eps * math.tanh(eps / 2.0), rel=1e-14)  # Lemma 5.2
    assert np.all(d > 0.0)
    assert np.all(d <= ALPHAS * rho * (1.0 + 1e-9) + 1e-15), (d, ALPHAS * rho)
    assert np.all(d <= eps * (1.0 + 1e-9))  # and never above the max-divergence
    assert np.all(np.diff(d) > 0)  # D_α increases with α


@pytest.mark.parametrize("delta", DELTAS)
def test_laplace_renyi_matches_closed_form(delta):
    mech = Laplace(scale=1.3)
    d = _renyi_checked(mech, delta)
    e = delta / 1.3
    want = [np.logaddexp(math.log(a / (2 * a - 1)) + (a - 1) * e,
                         math.log((a - 1) / (2 * a - 1)) - a * e) / (a - 1) for a in ALPHAS]
    np.testing.assert_allclose(d, want, rtol=1e-10)


@pytest.mark.parametrize("delta", DELTAS)
def test_gaussian_renyi_is_exactly_alpha_rho(delta):
    sigma = 1.5
    mech = Gaussian(sigma=sigma)
    d = _renyi_checked(mech, delta)
    exact = ALPHAS * delta**2 / (2 * sigma**2)
    np.testing.assert_allclose(d, exact, rtol=1e-9)
    np.testing.assert_allclose(ALPHAS * mech.rho(delta), exact, rtol=1e-15)


# ------------------------------------------------------------------------------------------
# unit splitting (seed 001 §2.5, Ex. 2.16)
# ------------------------------------------------------------------------------------------
def test_unit_splitting_example_2_16():
    mech = UnitSplitting(threshold=10.0, sigma=math.sqrt(50.0))
    employees = [5, 5, 10, 20, 30, 10000]
    assert mech.rows(employees).tolist() == [1, 1, 1, 2, 3, 1000]
    np.testing.assert_allclose(mech.rho(employees), [1, 1, 1, 4, 9, 1e6], rtol=1e-12)
    assert mech.epsilon(employees).tolist() == [math.inf] * 6


def test_unit_splitting_float_pitfall():
    assert 2.1 / 0.7 == 3.0000000000000004 and math.ceil(2.1 / 0.7) == 4
    mech = UnitSplitting(threshold=0.7, sigma=1.0)
    assert mech.rows([2.1]).tolist() == [3.0]
    assert float(mech.rho(2.1)) == pytest.approx(0.7**2 / 2 * 9, rel=1e-14)
    # snapping is only for rounding noise: a real excess still costs a row
    assert mech.rows([2.1 * (1 + 1e-6), 0.0, 0.7, 0.7000001]).tolist() == [4.0, 1.0, 1.0, 2.0]


@pytest.mark.parametrize("delta", [3.0, 10.0, 25.0, 1e3])
def test_unit_splitting_renyi_within_policy(delta):
    sigma, tau = math.sqrt(50.0), 10.0
    mech = UnitSplitting(threshold=tau, sigma=sigma)
    d = _renyi_checked(mech, delta)
    np.testing.assert_allclose(d, ALPHAS * delta**2 / (2 * sigma**2), rtol=1e-9)
    rho = float(mech.rho(delta))
    assert np.all(d <= ALPHAS * rho * (1 + 1e-9))
    if delta % tau == 0:  # whole rows: the accounting is exact
        assert rho == pytest.approx(delta**2 / (2 * sigma**2), rel=1e-14)


# ------------------------------------------------------------------------------------------
# the convexity condition a ≥ e^(p−1) matters (MATH.md §1.2)
# ------------------------------------------------------------------------------------------
def _polylog_sup(a: float, d: float, p: float, delta: float, sigma: float = 1.0):
    """sup_x |ln f(x) − ln f(x − Δ)| straight from the unnormalized density formula."""
    def logf(x):
        return -d * np.log(np.abs(x) / sigma + a) ** p

    x = log_ratio_grid(delta, sigma)
    x = np.unique(np.concatenate([x, np.linspace(-50, 50, 200_001)]))
    lr, _ = sup_log_ratio(logf, delta, x)
    formula = d * (math.log(delta / sigma + a) ** p - math.log(a) ** p)
    return float(lr.max()), float(x[np.argmax(lr)]), formula


def test_exp_polylog_policy_fails_without_convexity():
    sup, where, formula = _polylog_sup(a=1.2, d=1.0, p=3.0, delta=0.5)
    assert sup > 1.01 * formula          # the stated policy would be false
    # the sup is interior: the window [x − Δ, x] straddles |z| = e^(p−1) − a ≈ 6.19, where the
    # exponent stops being convex (ln(|z| + a) = p − 1), not the kinks 0 and Δ
    assert 5.0 < min(abs(where), abs(where - 0.5)) < 7.5
    with pytest.raises(InvalidParameterError, match="a must be"):
        ExpPolyLog(sigma=1.0, a=1.2, d=1.0, p=3.0)


def test_exp_polylog_policy_holds_at_convexity_boundary():
    a = math.exp(2.0)  # a = e^(p−1) for p = 3: allowed, and the formula is exact
    sup, where, formula = _polylog_sup(a=a, d=1.0, p=3.0, delta=0.5)
    assert sup == pytest.approx(formula, rel=1e-9)
    mech = ExpPolyLog(sigma=1.0, a=a, d=1.0, p=3.0)
    assert float(mech.epsilon(0.5)) == pytest.approx(formula, rel=1e-13)
