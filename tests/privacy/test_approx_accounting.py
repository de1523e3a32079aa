"""(ε, δ) statements: Gaussian-DP and zCDP conversions, and per-record (ε, δ) in reports.

The conversions are checked against closed forms, brute force and direct hockey-stick
integrals of composed privacy-loss distributions; the ledger's composition of approximate-DP
releases is checked by hand on small frames (every backend).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import mpmath as mp
import numpy as np
import polars as pl
import pytest
from numpy.typing import ArrayLike
from scipy import integrate, stats

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms.additive import AdditiveMechanism
from tabdp.noise import Laplace as LaplaceNoise
from tabdp.privacy import conversions
from tabdp.privacy.accounting import epsilon_at
from tabdp.privacy.conversions import _cks, _cks_min, gdp_delta, gdp_epsilon, zcdp_epsilon

KEYS = tabdp.KeySet.from_dict(c=["a", "b"])


def _pl(frame: Any) -> pl.DataFrame:
    from _engines import as_polars  # pandas, Polars or PySpark

    return as_polars(frame)


# ---------------------------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------------------------
def _hockey_gauss(mu: float, eps: float) -> float:
    """δ(ε) of N(0,1) vs N(mu,1) by quadrature, split at the crossing of the loss at ε."""
    p = stats.norm(0.0, 1.0)
    q = stats.norm(mu, 1.0)
    # ln q/p(x) = mu x - mu^2/2 >= eps  <=>  x >= eps/mu + mu/2
    x0 = eps / mu + mu / 2.0
    val, _ = integrate.quad(lambda x: q.pdf(x) - math.exp(eps) * p.pdf(x), x0, np.inf,
                            epsabs=1e-15, epsrel=1e-12)
    return val


@pytest.mark.parametrize("mu,eps", [(0.1, 0.0), (0.5, 0.3), (1.0, 1.0), (3.0, 2.0), (0.3, 1.5)])
def test_gdp_delta_is_the_hockey_stick_integral(mu, eps):
    assert gdp_delta(mu, eps) == pytest.approx(_hockey_gauss(mu, eps), rel=1e-8, abs=1e-15)


def test_gdp_epsilon_reproduces_the_balle_wang_scale_of_seed_004():
    # MATH.md §4.3: at Δ=1, ε=1, δ=1e-4 the minimal Gaussian σ is 3.18570299
    assert float(gdp_epsilon(1 / 3.18570299, 1e-4)) == pytest.approx(1.0, abs=2e-8)


def test_gdp_epsilon_inverts_gdp_delta_and_is_monotone():
    mu = np.array([1e-3, 0.05, 0.2, 1.0, 4.0, 20.0])
    for delta in (1e-12, 1e-6, 1e-2):
        eps = gdp_epsilon(mu, delta)
        assert np.all(np.diff(eps) >= 0)
        for m, e in zip(mu, eps, strict=True):
            if e > 0:
                assert float(gdp_delta(m, e)) <= delta * (1 + 1e-9)
                assert float(gdp_delta(m, e * (1 - 1e-9))) > delta * (1 - 1e-6)
            else:
                assert float(gdp_delta(m, 0.0)) <= delta
    assert gdp_epsilon([0.0, np.inf], 1e-6).tolist() == [0.0, math.inf]


def test_zcdp_epsilon_brute_force_and_classic_bound():
    rho = np.array([1e-6, 1e-3, 0.1, 0.5, 3.0, 50.0])
    for delta in (1e-10, 1e-5):
        got = zcdp_epsilon(rho, delta)
        lid = math.log(1 / delta)
        alpha = 1 + np.exp(np.linspace(-12, 40, 400_001))
        for r, e in zip(rho, got, strict=True):
            f = alpha * r + (lid + (alpha - 1) * np.log1p(-1 / alpha) - np.log(alpha)) / (alpha - 1)
            assert e == pytest.approx(f.min(), rel=1e-7)
            assert e <= r + 2 * math.sqrt(r * lid)
    assert zcdp_epsilon([0.0, math.inf], 1e-6).tolist() == [0.0, math.inf]


def _golden_cks_min(rr: np.ndarray, lid: float) -> np.ndarray:
    """The golden-section search the Newton solve replaced (60 steps on ln(alpha - 1))."""
    classic = rr + 2.0 * np.sqrt(rr * lid)
    a, b = np.full(rr.shape, -12.0), np.full(rr.shape, 40.0)
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c, e = b - g * (b - a), a + g * (b - a)
    fc, fe = _cks(rr, 1.0 + np.exp(c), lid), _cks(rr, 1.0 + np.exp(e), lid)
    for _ in range(60):
        left = fc < fe
        b, a = np.where(left, e, b), np.where(left, a, c)
        c_next = np.where(left, b - g * (b - a), e)
        e_next = np.where(left, c, a + g * (b - a))
        fresh = _cks(rr, 1.0 + np.exp(np.where(left, c_next, e_next)), lid)
        fc, fe = np.where(left, fresh, fe), np.where(left, fc, fresh)
        c, e = c_next, e_next
    return np.maximum(np.minimum(np.minimum(fc, fe), classic), 0.0)


@pytest.mark.parametrize("delta", [1e-5, 1e-9, 1e-100, 5e-324])
def test_zcdp_newton_solve_matches_the_golden_search_and_has_converged(
        delta: float, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    rho = np.concatenate([np.exp(rng.uniform(math.log(1e-8), math.log(1e12), 50_000)),
                          [1e-8, 1e-3, 0.125, 1.0, 50.0, 150.0, 1e6, 1e12]])
    lid = -math.log(delta)
    new, old = _cks_min(rho, lid), _golden_cks_min(rho, lid)
    # the same minimum: within a few ulps (both are then rounded up by 1e-13)
    assert np.all(np.abs(new - old) <= 2e-15 * old)
    # converged: more Newton steps (from the table's start and from the plain one) move no
    # answer by more than an ulp or two
    monkeypatch.setattr(conversions, "_CKS_STEPS", 40)
    monkeypatch.setattr(conversions, "_CKS_REFINE", 40)
    assert np.all(np.abs(_cks_min(rho, lid) - new) <= 1e-15 * new)


def _plain_cks_min(rr: np.ndarray, lid: float, steps: int = 40) -> np.ndarray:
    """The Newton solve from the plain start alone (no table), converged, with the round-up."""
    t = conversions._cks_newton(rr, lid, np.minimum(0.5 * (math.log(lid) - np.log(rr)), 40.0),
                                steps, -12.0, 40.0)
    alpha = 1.0 + np.exp(t)
    am1 = alpha - 1.0
    lf, la = np.log1p(-1.0 / alpha), np.log(alpha)
    bound = alpha * rr + (lid + am1 * lf - la) / am1
    terms = alpha * rr + (lid - am1 * lf + la) / am1
    classic = (rr + 2.0 * np.sqrt(rr * lid)) * (1.0 + 1e-13)
    return np.maximum(np.minimum(bound + 1e-13 * terms, classic), 0.0), terms


@pytest.mark.parametrize("delta", [1e-5, 1e-9, 1e-100, 5e-324, 0.5, 1 - 1e-12])
def test_zcdp_table_start_gives_the_plain_solve_everywhere(delta: float) -> None:
    # ρ over the whole table, its edges (where the start switches) and beyond, and the clip
    # points t = -12 and t = 40: the same ε as the plain converged solve, to a few ulps of
    # the bound's terms (ε near 0 is a cancellation of terms of ~L: its own ulps mean nothing)
    lid = -math.log(delta)
    rng = np.random.default_rng(11)
    lo, tab = conversions._cks_table(lid)
    hi = lo + conversions._CKS_H * (tab.size - 1)
    edges = np.array([lo, hi, lo + conversions._CKS_H, hi - conversions._CKS_H])
    ln_rho = np.concatenate([rng.uniform(lo - 30.0, hi + 30.0, 200_000),
                             edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf)])
    rho = np.exp(ln_rho)
    rho = rho[np.isfinite(rho) & (rho > 0)]
    got = _cks_min(rho, lid, 1e-13)
    want, terms = _plain_cks_min(rho, lid)
    assert np.all(np.abs(got - want) <= 4e-16 * terms + 2e-15 * want)


def test_zcdp_epsilon_of_a_value_does_not_depend_on_the_others() -> None:
    rng = np.random.default_rng(5)
    rho = np.exp(rng.uniform(math.log(1e-300), math.log(1e300), 5_000))
    together = zcdp_epsilon(rho, 1e-9)
    alone = np.array([zcdp_epsilon(np.array([r]), 1e-9)[0] for r in rho[:500]])
    np.testing.assert_array_equal(together[:500], alone)
    # a batch that mixes values inside and outside the table: the same doubles
    np.testing.assert_array_equal(zcdp_epsilon(rho[::-1], 1e-9), together[::-1])


@pytest.mark.parametrize("delta", [1 - 2**-53, 1 - 1e-12, 0.9, 0.5, 1e-3, 1e-9, 1e-12,
                                   1e-100, 1e-300, 2.2250738585072014e-308, 5e-324])
def test_zcdp_table_holds_the_converged_roots(delta: float) -> None:
    # every point of the table is the root the plain start reaches after many steps (review
    # r68: the table's roots start nearer, at the smaller root of h's two terms, and take
    # fewer steps), including δ near 1, where ln(1 + x) = L puts the root far below the
    # plain start, and subnormal δ
    lid = -math.log(delta)
    conversions._cks_table.cache_clear()
    lo, tab = conversions._cks_table(lid)
    u = lo + conversions._CKS_H * np.arange(tab.size)
    with np.errstate(over="ignore", divide="ignore"):
        want = conversions._cks_newton(np.exp(u), lid, 0.5 * (math.log(lid) - u), 400,
                                       -80.0, 80.0)
    assert np.all(np.abs(tab - want) <= 4e-16 * np.maximum(np.abs(want), 1.0))


def test_zcdp_epsilon_at_a_new_delta_builds_a_small_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # `epsilon_at` converts once per distinct remaining δ (δ less each record's approximate
    # δ): with many distinct values, every conversion of one value builds a table for its δ.
    # The table's cost must stay near a plain solve of a few hundred values, not 400,000
    # Newton evaluations (6914 points times 60 steps: 30 times the plain path per δ; review
    # r68)
    evaluations: list[int] = []
    real = conversions._cks_newton

    def counted(rr: np.ndarray, lid: float, t: np.ndarray, steps: int, lo: float,
                hi: float) -> np.ndarray:
        evaluations.append(int(np.size(t)) * steps)
        return real(rr, lid, t, steps, lo, hi)

    monkeypatch.setattr(conversions, "_cks_newton", counted)
    conversions._cks_table.cache_clear()
    zcdp_epsilon(np.array([0.3]), 1.2345e-7)
    assert sum(evaluations) <= 10_000
    evaluations.clear()
    zcdp_epsilon(np.array([0.3]), 1.2345e-7)  # the table is kept: a plain value's steps
    assert sum(evaluations) == conversions._CKS_REFINE


def test_zcdp_table_start_fails_the_check_when_the_table_is_wrong(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the agreement test above can fail: a table whose roots are off by 0.2 in t, with no
    # refinement step, gives ε visibly above the plain solve's
    lid = -math.log(1e-9)
    lo, tab = conversions._cks_table(lid)
    monkeypatch.setattr(conversions, "_cks_table", lambda _lid: (lo, tab + 0.2))
    monkeypatch.setattr(conversions, "_CKS_REFINE", 0)
    rho = np.exp(np.linspace(lo + 40.0, lo + 90.0, 1000))
    got = _cks_min(rho, lid, 1e-13)
    want, terms = _plain_cks_min(rho, lid)
    assert np.max((got - want) / want) > 1e-6
    assert np.all(got >= want * (1 - 1e-15))  # any α is valid: a worse α never lowers ε


def test_zcdp_conversion_is_valid_for_the_gaussian():
    # the Gaussian with rho = mu^2/2 is rho-zCDP: the generic conversion may never beat its
    # exact profile
    mu = np.array([0.01, 0.3, 1.0, 3.0])
    for delta in (1e-9, 1e-4):
        assert np.all(zcdp_epsilon(mu**2 / 2, delta) >= gdp_epsilon(mu, delta) - 1e-12)


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-3, float("nan"), "1e-6"])
def test_bad_delta_is_refused(bad):
    with pytest.raises(InvalidParameterError, match="delta"):
        zcdp_epsilon(1.0, bad)
    with pytest.raises(InvalidParameterError, match="delta"):
        gdp_epsilon(1.0, bad)


# ---------------------------------------------------------------------------------------------
# Mechanisms' approx_epsilon
# ---------------------------------------------------------------------------------------------
def test_laplace_approx_epsilon_closed_form_and_hockey_stick():
    b, delta = 2.0, 1e-3
    lap = mech.Laplace(scale=b)
    eps = float(lap.approx_epsilon(3.0, delta))
    assert eps == pytest.approx(3.0 / b + 2 * math.log1p(-delta))
    # δ(ε) of Lap(0,b) vs Lap(3,b) at that ε is exactly δ
    p, q = stats.laplace(0, b), stats.laplace(3.0, b)
    pts = sorted({0.0, 3.0, b * (eps + 3.0 / b) / 2})
    val = sum(integrate.quad(lambda x: max(q.pdf(x) - math.exp(eps) * p.pdf(x), 0.0), lo, hi,
                             epsabs=1e-14)[0]
              for lo, hi in zip([-np.inf, *pts], [*pts, np.inf], strict=True))
    assert val == pytest.approx(delta, rel=1e-6)
    assert float(lap.approx_epsilon(0.0, delta)) == 0.0


def test_transformation_mechanisms_use_the_exact_gaussian_profile():
    m = mech.LogTransform(sigma=0.5, offset=1.0)
    d = np.array([0.0, 1.0, 1e3])
    np.testing.assert_allclose(m.approx_epsilon(d, 1e-6),
                               gdp_epsilon(np.sqrt(2 * m.rho(d)), 1e-6), rtol=0, atol=0)
    assert m.gaussian_dp and mech.Gaussian(1.0).gaussian_dp
    assert not mech.Laplace(1.0).gaussian_dp


# ---------------------------------------------------------------------------------------------
# Composition in reports
# ---------------------------------------------------------------------------------------------
ROWS = {"c": ["a", "b", "a", "z"], "x": [3.0, -4.0, 0.0, 9.0], "u": [1, 2, 1, 3]}


def test_report_epsilon_delta_for_gaussian_releases_is_exact(make_frame):
    s = tabdp.Session(seed=1)
    f = make_frame(ROWS)
    f.dp.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(2.0), session=s, negatives="allow")
    # a non-integer grid keeps the continuous Gaussian (Gaussian-DP accounting)
    f.dp.count(by="c", keys=KEYS, mechanism=mech.Gaussian(1.0), grid=0.1, session=s)
    pr = _pl(s.report(delta=1e-6).per_record)
    assert pr.columns == ["row", "rho", "epsilon", "size", "epsilon_delta", "rho_q1_sum",
                          "rho_q2_count"]
    # composition of Gaussian shifts: mu^2 = 2 * total rho, exact profile
    expected = gdp_epsilon(np.sqrt(2 * pr["rho"].to_numpy()), 1e-6)
    np.testing.assert_allclose(pr["epsilon_delta"].to_numpy(), expected, rtol=1e-10, atol=0)
    assert np.all(pr["epsilon_delta"].to_numpy() >= expected * (1 - 1e-13))  # rounded up
    assert pr["epsilon_delta"][3] == 0.0  # the row outside the key set


def _composed_delta(b: float, d_lap: float, mu: float, eps: float) -> float:
    """Exact δ(ε) of (Laplace(b) shifted by d_lap) ⊗ (Gaussian shifted by mu sd).

    δ(ε) = E_P[(1 − e^{ε − L})⁺] with L = L_lap + L_gauss independent; given L_lap = l the
    Gaussian part is gdp_delta(mu, ε − l), which holds for any real threshold.
    """
    def g(t: float) -> float:
        a = -t / mu + mu / 2
        c = -t / mu - mu / 2
        return float(stats.norm.cdf(a) - math.exp(t + stats.norm.logcdf(c)))
    p = stats.laplace(0, b)
    # δ = E_Q[(1 − e^{ε − ln(q/p)})⁺] with Q = Lap(d, b); reflecting x → d − x turns it into
    # E_P[...] of ln(p/q)(x) = (|x − d| − |x|)/b: +d/b for x < 0, −d/b for x > d, linear between
    left = p.cdf(0.0) * g(eps - d_lap / b)
    right = p.sf(d_lap) * g(eps + d_lap / b)
    mid, _ = integrate.quad(lambda x: p.pdf(x) * g(eps - (d_lap - 2 * x) / b), 0.0, d_lap,
                            epsabs=1e-15, epsrel=1e-11)
    return left + right + mid


def test_composed_delta_helper_matches_direct_integration():
    # the helper itself, against a Monte Carlo estimate of E_Q[(1 − e^{ε − L})⁺] with the
    # privacy loss L = ln q/p computed directly from the product densities
    b, d, mu, eps = 1.5, 1.0, 0.8, 0.9
    rng = np.random.default_rng(11)
    n = 2_000_000
    x = d + rng.laplace(0.0, b, n)
    y = mu + rng.standard_normal(n)
    loss = (np.abs(x) - np.abs(x - d)) / b + (mu * y - mu * mu / 2)
    vals = np.maximum(1.0 - np.exp(eps - loss), 0.0)
    est, se = vals.mean(), vals.std() / math.sqrt(n)
    assert abs(_composed_delta(b, d, mu, eps) - est) < 5 * se
    # and reduces to the pure Laplace profile when the Gaussian part vanishes
    assert _composed_delta(b, d, 1e-9, d / b) == pytest.approx(0.0, abs=1e-9)


def test_report_epsilon_delta_for_laplace_plus_gaussian_is_valid_and_reasonably_tight():
    rows = {"c": ["a"], "x": [2.0]}
    s = tabdp.Session(seed=2)
    f = pl.DataFrame(rows)
    f.dp.sum("x", by="c", keys=KEYS, mechanism=mech.Laplace(4.0), session=s)
    f.dp.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(3.0), session=s)
    delta = 1e-6
    eps = float(s.report(delta=delta).per_record["epsilon_delta"][0])
    # the claim holds for the actual composed pair (Laplace shift 2, Gaussian shift 2/3 sd)
    got = _composed_delta(4.0, 2.0, 2.0 / 3.0, eps)
    assert got <= delta
    # and is not loose by more than a modest factor in ε (the zCDP route is used for mixes)
    assert _composed_delta(4.0, 2.0, 2.0 / 3.0, 0.5 * eps) > delta
    # never above the pure+Gaussian basic composition nor above the zCDP conversion of rho
    rho = float(s.report().per_record["rho"][0])
    assert eps <= float(zcdp_epsilon(rho, delta)) + 1e-12


class _ApproxOnly(AdditiveMechanism):
    """A test mechanism with only an approximate-DP guarantee: ε(Δ) = Δ at δ = 1e-8 per cell."""

    family = "approx_test"

    def __init__(self) -> None:
        super().__init__(LaplaceNoise(1.0))
        self.dp_delta = 1e-8

    def rho(self, delta: ArrayLike) -> np.ndarray:
        d = np.abs(np.asarray(delta, dtype=np.float64))
        return np.where(d > 0, np.inf, 0.0)

    def epsilon(self, delta: ArrayLike) -> np.ndarray:
        return self.rho(delta)

    def approx_epsilon(self, sensitivity: ArrayLike, delta: float) -> np.ndarray:
        assert delta == 1e-8
        return np.abs(np.asarray(sensitivity, dtype=np.float64))

    def params(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize("unit", [None, "u"])
def test_approx_only_releases_compose_basically_with_zcdp_ones(make_frame, unit):
    s = tabdp.Session(seed=3, unit=unit)
    f = make_frame({"c": ["a", "b", "a", "z"], "x": [3.0, -4.0, 0.5, 9.0], "y": [1.0, 0, 2, 5],
                    "u": [1, 2, 1, 3]})
    f.dp.sum(["x", "y"], by="c", keys=KEYS, mechanism=_ApproxOnly(), session=s, negatives="allow")
    # a non-integer grid keeps the continuous Gaussian (Gaussian-DP accounting)
    f.dp.count(by="c", keys=KEYS, mechanism=mech.Gaussian(1.0), grid=0.1, session=s)
    rep = s.report(delta=1e-6)
    pr = _pl(rep.per_record)
    key = "row" if unit is None else "u"
    got = dict(zip(pr[key].to_list(), pr["epsilon_delta"].to_list(), strict=True))
    # per unit: sum over (cell, measure) of |contribution| at 1e-8 each, plus the exact
    # Gaussian-DP ε of its count part at the remaining δ
    if unit is None:
        cases = {0: (3.0 + 1.0, 2, 1.0), 1: (4.0, 1, 1.0), 2: (0.5 + 2.0, 2, 1.0), 3: (0, 0, 0)}
    else:
        # unit 1 has two rows in cell a: contributions x=3.5, y=3, count 2
        cases = {1: (3.5 + 3.0, 2, 2.0), 2: (4.0, 1, 1.0)}
    for k, (ea, cells, count) in cases.items():
        if cells == 0:
            assert got[k] == 0.0
            continue
        conv = float(gdp_epsilon(count, 1e-6 - cells * 1e-8))  # mu = count / sigma
        assert got[k] == pytest.approx(ea + conv, rel=1e-12)
    assert pr["rho"].to_list()[0] == math.inf
    # with delta below what the approximate parts need, no (ε, δ) statement holds
    pr2 = _pl(s.report(delta=1.5e-8).per_record)
    touched = pr2.filter(pl.col("rho") > 0)
    two_cells = [v for v, k in zip(touched["epsilon_delta"], touched[key], strict=True)
                 if cases.get(k, (0, 0, 0))[1] == 2]
    assert all(v == math.inf for v in two_cells)


def test_public_total_curve_states_epsilon_delta():
    s = tabdp.Session(seed=4)
    f = pl.DataFrame({"c": ["a"], "x": [1.0]})
    f.dp.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(2.0), session=s)
    f.dp.sum("x", by="c", keys=KEYS, mechanism=_ApproxOnly(), session=s)
    d = s.report(delta=1e-6).to_dict()
    assert d["session"]["delta"] == 1e-6
    row = {r["delta"]: r for r in d["total_policy_curve"]}[10.0]
    expected = 10.0 + float(gdp_epsilon(10.0 / 2.0, 1e-6 - 1e-8))
    assert row["epsilon_delta"] == pytest.approx(expected, rel=1e-12)
    assert row["rho"] is None  # no zCDP guarantee once an approximate-DP release is included
    q2 = d["queries"][1]["policy_curve"]
    assert {r["delta"]: r["epsilon_at_dp_delta"] for r in q2}[10.0] == 10.0
    assert d["queries"][1]["mechanism"]["dp_delta_per_cell"] == 1e-8


def test_epsilon_at_one_delta_path_gives_the_per_delta_paths_doubles() -> None:
    # `epsilon_at` takes a path without the per-δ grouping when no unit has an approximate
    # δ; each unit's ε must be the doubles the grouped path gives it (where some other unit
    # has a δ_a, its own δ_a = 0 goes through the grouping with the same remaining δ)
    rng = np.random.default_rng(20261207)
    n = 4000
    rz = np.exp(rng.uniform(-30.0, 8.0, n))
    rz[:50] = 0.0
    rz[50:60] = np.inf
    rg = np.where(rng.random(n) < 0.3, rz, rz * rng.uniform(0.0, 0.99, n))
    pure = np.where(rng.random(n) < 0.5, np.inf, rng.uniform(0.0, 30.0, n))
    for eps_a in (np.zeros(n), np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0, 2, n))):
        fast = epsilon_at(1e-9, rz, rg, eps_a, np.zeros(n), pure)
        # one more unit with an approximate δ sends every unit through the grouped path
        grouped = epsilon_at(1e-9, np.append(rz, 1.0), np.append(rg, 0.0),
                             np.append(eps_a, 1.0), np.append(np.zeros(n), 1e-12),
                             np.append(pure, np.inf))[:n]
        np.testing.assert_array_equal(fast.view(np.int64), grouped.view(np.int64))
        # and each unit alone gives its own double (elementwise)
        for i in rng.choice(n, 40, replace=False):
            one = epsilon_at(1e-9, rz[i:i + 1], rg[i:i + 1], eps_a[i:i + 1], np.zeros(1),
                             pure[i:i + 1])
            assert one.view(np.int64)[0] == fast.view(np.int64)[i]


def test_epsilon_at_refuses_bad_delta():
    z = np.zeros(1)
    with pytest.raises(InvalidParameterError):
        epsilon_at(0.0, z, z, z, z, z)
    with pytest.raises(InvalidParameterError):
        tabdp.Session().report(delta=2.0)


@pytest.mark.parametrize("which", range(5))
@pytest.mark.parametrize("shape", [(1,), (2,), (3, 1), ()])
def test_epsilon_at_refuses_components_of_different_shapes(which, shape):
    # numpy broadcast a pure ε of one value (or a column of shape (3, 1)) against three
    # units' ρ without a word: a statement for units whose values were never given
    r = np.array([0.1, 0.2, 0.3])
    parts = [r, r, np.zeros(3), np.zeros(3), np.full(3, np.inf)]
    parts[which] = np.resize(parts[which], shape)
    for approx in (False, True):  # both paths (with an approximate δ somewhere, or none)
        if approx and which != 3:
            parts[3] = np.array([0.0, 1e-12, 0.0])
        with pytest.raises(InvalidParameterError, match="one shape") as got:
            epsilon_at(1e-6, *parts)
        assert isinstance(got.value, ValueError)
        msg = str(got.value)
        name = ("rho_z", "rho_g", "eps_a", "delta_a", "epsilon")[which]
        assert f"{name} {shape}" in msg and "(3,)" in msg and "Hint:" in msg


@pytest.mark.parametrize("unit", [None, "u"])
def test_smooth_sensitivity_laplace_medians_are_accounted_in_approximate_dp(unit):
    s = tabdp.Session(seed=5, unit=unit)
    f = pl.DataFrame({"c": ["a", "a", "a", "b"], "x": [1.0, 2.0, 3.0, 4.0], "u": [1, 1, 2, 3]})
    f.dp.median("x", by="c", keys=KEYS, bounds=(0.0, 10.0), epsilon=0.5, noise="laplace",
                delta=1e-7, session=s)
    pr = s.report(delta=1e-5).per_record
    key = "row" if unit is None else "u"
    got = dict(zip(pr[key].to_list(), pr["epsilon_delta"].to_list(), strict=True))
    assert pr["rho"].to_list() == [math.inf] * pr.height  # no zCDP guarantee
    if unit is None:
        assert set(got.values()) == {0.5}  # one row each: (ε, δ) = (0.5, 1e-7) ≤ 1e-5
    else:
        # unit 1 has 2 rows in cell a: group privacy (2ε, 2 e^{ε₁} δ): ε = ε₁ + ε₂ with ε₂ the
        # pure-DP noise scale behind sd and moe (issue 13), δ from the value's (ε₁, δ) only
        from tabdp.mechanisms.smooth import split_epsilon

        eps1 = split_epsilon("laplace", 0.5, delta=1e-7)[0]
        assert got == {1: 1.0, 2: 0.5, 3: 0.5}
        tight = _pl(s.report(delta=2 * math.exp(eps1) * 1e-7 * 0.999).per_record)
        assert tight.filter(pl.col("u") == 1)["epsilon_delta"][0] == math.inf
        ok = _pl(s.report(delta=2 * math.exp(eps1) * 1e-7 * 1.001).per_record)
        assert ok.filter(pl.col("u") == 1)["epsilon_delta"][0] == pytest.approx(1.0)


def _exact_min(rho: float, log_inv_delta: float) -> mp.mpf:
    """Exact minimum over α of the CKS bound (bisection on its optimality condition)."""
    with mp.workprec(200):
        r, lid = mp.mpf(rho), mp.mpf(log_inv_delta)
        lo, hi = mp.mpf(-700), mp.mpf(700)
        for _ in range(400):  # h(t) = ρe^{2t} + ln(1 + e^t) − L is increasing in t = ln(α − 1)
            mid = (lo + hi) / 2
            if r * mp.e ** (2 * mid) + mp.log1p(mp.e ** mid) - lid > 0:
                hi = mid
            else:
                lo = mid
        x = mp.e ** lo
        a = 1 + x
        return a * r + (lid + x * mp.log(1 - 1 / a) - mp.log(a)) / x


# origin: review R7
@pytest.mark.parametrize(("delta", "rho"), [
    (1e-9, 1.359140914229525e-18),      # returned 0.0 against an exact 2.4e-25
    (1e-9, 1.3591409142295417e-18),     # 9.82e-24 against 1.04e-23
    (1e-5, 1.3591409142911025e-10),     # 2.88e-20 against 2.98e-20
    (0.5, 0.3857558938179633),          # 4.4e-16 against 5.2e-16
    (1e-5, 1.3920316196402416e-10),     # 1.9889522200571930e-07 against ...980e-07
])
def test_zcdp_epsilon_is_valid_where_epsilon_is_near_zero(delta: float, rho: float) -> None:
    exact = _exact_min(rho, -math.log(delta))
    assert exact > 0
    assert mp.mpf(float(zcdp_epsilon(rho, delta))) >= exact


# origin: review R7
@pytest.mark.parametrize("delta", [0.5, 1e-5, 1e-9, 1e-30])
def test_zcdp_epsilon_is_valid_on_a_grid_around_the_zero_crossing(delta: float) -> None:
    lid = -math.log(delta)
    # ε = 0 near ρ = e^(1 − 2L)/2 (where ρ(1 + 2x) = −ln(1 − 1/α) at the optimum)
    rho0 = math.exp(1.0 - 2.0 * lid) / 2.0
    rhos = rho0 * np.exp(np.random.default_rng(5).uniform(-1.0, 3.0, 120))
    eps = zcdp_epsilon(rhos, delta)
    bad = [(float(r), float(e)) for r, e in zip(rhos, eps, strict=True)
           if mp.mpf(float(e)) < _exact_min(float(r), lid)]
    assert bad == []
    # and still tight: within 1e-12 relative (plus a tiny absolute) of the exact minimum, where
    # the optimal α − 1 ≈ e^(L − 1/2) is inside the solve's domain ln(α − 1) ≤ 40
    if lid - 0.5 > 39.0:
        return
    for r, e in zip(rhos[:20], eps[:20], strict=True):
        exact = max(_exact_min(float(r), lid), 0)
        assert float(e) <= float(exact) * (1 + 1e-12) + 1e-13 * lid / math.exp(lid - 0.5) * 10


# origin: review R7
@pytest.mark.parametrize("delta", [1e-5, 5e-324, 1 - 2**-53])
def test_zcdp_epsilon_warns_nothing_for_rho_at_the_top_of_the_double_range(delta: float) -> None:
    # a record's ρ is confidential: no RuntimeWarning may reveal that one overflowed (main
    # warned "overflow encountered in multiply" from the Newton slope, the classic bound and
    # the CKS evaluation); the answer is ≥ ρ (the CKS bound is at least αρ) or inf
    rho = np.array([1e307, 9e307, 1e308, 1.7976931348623157e308])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eps = zcdp_epsilon(rho, delta)
    assert np.all(eps >= rho)
    assert not np.any(np.isnan(eps))
