"""δ at the edge of floating point: every (ε, δ) answer is safe down to the smallest double.

Each returned ε, scale or δ is checked against the true hockey-stick divergence evaluated in
mpmath at high precision: the Gaussian of Balle & Wang (2018, Thm 8), the closed forms of
Laplace and Logistic noise, the Subbotin_r criterion (seed 004 Lemma 1), and the zCDP
conversion of Canonne, Kamath & Steinke (2020, Prop. 12) used by ``zcdp_epsilon``. "Safe" means
the true δ at the returned answer is ≤ the requested δ; "tight" that a slightly smaller answer
(1e-9 relative) is not safe, or wastes less than 1e-9 relative of δ.
"""

from __future__ import annotations

import math
import pathlib
import sys
from collections.abc import Callable

import mpmath as mp
import numpy as np
import pytest

from tabdp.exceptions import CalibrationError, InvalidParameterError
from tabdp.mechanisms import Subbotin
from tabdp.mechanisms.smooth import gamma_limit
from tabdp.noise.logconcave import subbotin_center_quantile
from tabdp.privacy.accounting import epsilon_at
from tabdp.privacy.approx import (
    DELTA_FLOOR_GENERIC,
    choose_subbotin_r,
    delta_for_scale,
    epsilon_for_scale,
    min_scale,
)
from tabdp.privacy.conversions import gdp_delta, gdp_epsilon, gdp_log_delta, zcdp_epsilon

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _mp_refs import (  # noqa: E402
    cks_log_delta,
    gauss_delta,
    laplace_delta,
    logistic_delta,
    subbotin_delta,
)

#: From ordinary values down to the smallest positive double (subnormals below 2.2e-308).
DELTAS = [1e-2, 1e-6, 1e-50, 1e-200, 1e-300, 2e-308, 1e-310, 1e-315, 1e-320, 5e-324]
TINY = 5e-324


def _safe_and_tight_eps(true_delta: Callable[[float], mp.mpf], eps: float, delta: float) -> None:
    """δ(ε) ≤ δ, and ε is not wasteful: δ(ε·(1 − 1e-9)) > δ or δ(ε) ≥ δ·(1 − 1e-9)."""
    got = true_delta(eps)
    assert got <= delta, (eps, delta, float(got / delta))
    if eps > 0:
        assert true_delta(eps * (1 - 1e-9)) > delta or got >= delta * (1 - 1e-9), (eps, delta)


# -------------------------------------------------------------------------------------------------
# Gaussian
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mu", [1e-120, 1e-8, 0.0265, 0.3, 1.0, 3.0, 30.0])
@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.5, 1.0, 8.0])
def test_gdp_log_delta_is_a_tight_upper_bound_at_every_magnitude(mu: float, eps: float) -> None:
    true = gauss_delta(mu, eps)
    if true <= 0 or mp.log(true) < -5000:
        return
    got = float(gdp_log_delta(mu, eps))
    assert got >= mp.log(true)                       # never below the true ln δ
    assert got - mp.log(true) <= 2e-10                # the 1e-10 margin plus rounding
    d = float(gdp_delta(mu, eps))
    assert d >= true and (d <= true * (1 + 1e-9) + TINY)


def test_gdp_log_delta_reaches_the_subnormal_range_exactly() -> None:
    # σ = 37.69 at ε = 1: the old float evaluation reported it safe for δ = 1e-315, but its
    # true δ is 4e-314.
    sigma = 37.69038670275656                         # the old min_scale("gaussian", 1, 1e-315)
    true = gauss_delta(1 / sigma, 1.0)
    assert 3.9e-314 < true < 4.2e-314
    assert float(gdp_log_delta(1 / sigma, 1.0)) == pytest.approx(float(mp.log(true)), abs=2e-10)
    assert float(gdp_log_delta(1 / sigma, 1.0)) > math.log(1e-315)


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0, 5.0])
def test_gaussian_min_scale_is_safe_and_tight_down_to_the_smallest_double(
        delta: float, eps: float) -> None:
    if eps == 0.0 and delta < 1e-308:       # σ = 1/(δ·sqrt(2π)) + ... exceeds the double range
        with pytest.raises(CalibrationError, match="double"):
            min_scale("gaussian", eps, delta)
        return
    s = min_scale("gaussian", eps, delta)
    assert gauss_delta(1 / s, eps) <= delta
    assert gauss_delta(1 / (s * (1 - 1e-9)), eps) > delta          # tight to 1e-9


def test_gaussian_min_scale_is_no_longer_stuck_below_1e_315() -> None:
    scales = [min_scale("gaussian", 1.0, d) for d in DELTAS]
    assert all(a < b for a, b in zip(scales[:-1], scales[1:], strict=True))   # strictly growing
    assert min_scale("gaussian", 1.0, 1e-315) > 37.7
    assert min_scale("gaussian", 1.0, TINY) == pytest.approx(38.29056, rel=1e-6)


@pytest.mark.parametrize("delta", DELTAS)
def test_gaussian_epsilon_for_scale_and_gdp_epsilon_are_safe_and_tight(delta: float) -> None:
    bs = [1e-250, 1e-12, 0.02, 1 / 37.69, 0.3, 1.0, 4.0, 40.0]
    eps = epsilon_for_scale("gaussian", 1.0, delta, bs)
    np.testing.assert_array_equal(eps, gdp_epsilon(np.array(bs), delta))
    for b, e in zip(bs, eps.tolist(), strict=True):
        if e == 0.0:
            assert gauss_delta(b, 0.0) <= delta
            continue
        _safe_and_tight_eps(lambda x, b=b: gauss_delta(b, x), e, delta)


def test_gaussian_epsilon_for_scale_many_values_are_verified() -> None:
    # beyond 4096 distinct values the interpolated solution is verified in log space
    rng = np.random.default_rng(7)
    b = rng.uniform(0.01, 3.0, 6000)
    for delta in (1e-9, 1e-300, TINY):
        eps = epsilon_for_scale("gaussian", 1.0, delta, b)
        exact = gdp_epsilon(b, delta)
        assert np.all(eps >= exact * (1 - 1e-12))
        np.testing.assert_allclose(eps, exact, rtol=1e-8)
        for i in rng.choice(b.size, 8, replace=False):
            assert gauss_delta(b[i], eps[i]) <= delta


def test_gaussian_delta_for_scale_rounds_up_in_the_subnormal_range() -> None:
    for b, eps in [(1 / 37.69, 1.0), (1 / 38.3, 1.0), (0.02, 0.75)]:
        got = float(delta_for_scale("gaussian", 1.0, eps, b))
        true = gauss_delta(b, eps)
        assert true <= got <= true * (1 + 1e-9) + 2 * TINY      # 2 subnormal units at most


def test_accounting_statement_at_a_subnormal_delta() -> None:
    r = np.array([0.5 / 37.69**2])
    z = np.zeros(1)
    got = epsilon_at(1e-315, r, r, z, z, np.array([np.inf]))
    assert math.isfinite(got[0])
    assert got[0] == float(gdp_epsilon(1 / 37.69, 1e-315))
    assert gauss_delta(1 / 37.69, got[0]) <= 1e-315


# -------------------------------------------------------------------------------------------------
# zCDP → (ε, δ)
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("delta", [1e-2, 1e-9, 1e-300, 1e-310, 1e-320, TINY])
def test_zcdp_epsilon_is_finite_safe_and_tight_down_to_the_smallest_double(delta: float) -> None:
    rhos = np.array([1e-12, 1e-3, 0.1, 1.0, 10.0, 1e4])
    eps = zcdp_epsilon(rhos, delta)
    assert np.all(np.isfinite(eps))
    ln_d = mp.log(delta)
    for rho, e in zip(rhos.tolist(), eps.tolist(), strict=True):
        if e == 0.0:
            assert cks_log_delta(rho, 0.0) <= ln_d
            continue
        assert cks_log_delta(rho, e) <= ln_d
        assert cks_log_delta(rho, e * (1 - 1e-9)) > ln_d


def test_gdp_epsilon_and_zcdp_epsilon_were_infinite_for_subnormal_delta() -> None:
    # the old float code: ln(1/δ) with 1/δ = inf
    assert math.isfinite(float(gdp_epsilon(0.1, 1e-310)))
    assert float(zcdp_epsilon(0.01, 1e-310)) == pytest.approx(
        float(zcdp_epsilon(0.01, 1e-300)), rel=0.02)


# -------------------------------------------------------------------------------------------------
# Laplace and Logistic (closed forms)
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family,true", [("laplace", laplace_delta),
                                         ("logistic", logistic_delta)])
@pytest.mark.parametrize("delta", [0.5, 1e-2, 4e-17, 1e-300, 1e-310, TINY, 1 - 2**-53])
def test_closed_forms_are_rounded_toward_privacy(
        family: str, true: Callable[[float, float], mp.mpf], delta: float) -> None:
    for eps in (1e-10, 0.3, 1.0, 7.0):
        s = min_scale(family, eps, delta)
        assert true(1 / s, eps) <= delta
        for b in (1e-300, 1e-17, 0.5, 1.0, 3.0, 40.0):
            e = float(epsilon_for_scale(family, 1.0, delta, b))
            assert true(b, e) <= delta, (b, e)
            assert float(delta_for_scale(family, 1.0, eps, b)) >= true(b, eps)
    # Laplace at δ = 4e-17, Δ/b = 1: 1 − 8e-17 rounded to nearest is the double below 1, whose
    # true δ is 5.6e-17: rounding up matters.
    if family == "laplace" and delta == 4e-17:
        assert 1.0 + 2.0 * math.log1p(-delta) < 1.0
        assert true(1.0, 1.0 + 2.0 * math.log1p(-delta)) > delta
        assert float(epsilon_for_scale("laplace", 1.0, delta, 1.0)) >= 1.0


@pytest.mark.parametrize("family", ["laplace", "logistic", "gaussian"])
def test_a_scale_beyond_the_double_range_is_refused(family: str) -> None:
    eps, delta, sens = (0.0, TINY, 1.0) if family != "gaussian" else (1.0, 1e-10, 1e308)
    with pytest.raises(CalibrationError, match="exceeds the largest double"):
        min_scale(family, eps, delta, sens)


# -------------------------------------------------------------------------------------------------
# Subbotin r ∉ {1, 2}: a documented floor, safe above it
# -------------------------------------------------------------------------------------------------
def test_subbotin_refuses_delta_below_the_floor_and_names_it() -> None:
    assert DELTA_FLOOR_GENERIC == 1e-300
    msg = r"below 1e-300, the smallest delta supported for Subbotin noise with r=3.0"
    with pytest.raises(InvalidParameterError, match=msg):
        min_scale("subbotin", 1.0, 1e-301, r=3.0)
    with pytest.raises(InvalidParameterError, match=msg):
        epsilon_for_scale("subbotin", 10.0, TINY, [1.0], r=3.0)
    with pytest.raises(InvalidParameterError, match=msg):
        Subbotin(r=3.0, scale=10.0, delta=1e-310)
    with pytest.raises(InvalidParameterError, match="below 1e-300"):
        choose_subbotin_r(1.0, 1e-320, 1.0)
    # r = 1 and r = 2 have no floor
    assert math.isfinite(min_scale("subbotin", 1.0, TINY, r=2.0))
    assert math.isfinite(min_scale("subbotin", 1.0, TINY, r=1.0))
    assert min_scale("subbotin", 1.0, 1e-300, r=3.0) > 0


@pytest.mark.parametrize("r", [1.5, 3.0, 7.5])
@pytest.mark.parametrize("delta", [1e-2, 1e-9, 1e-300])
def test_subbotin_answers_are_safe_down_to_the_floor(r: float, delta: float) -> None:
    for eps in (0.1, 1.0):
        s = min_scale("subbotin", eps, delta, r=r)
        assert subbotin_delta(1 / s, eps, r) <= delta
        assert subbotin_delta(1 / (s * (1 - 1e-9)), eps, r) > delta       # tight to 1e-9
        e = float(epsilon_for_scale("subbotin", 1.0, delta, 1.3 / s, r=r))
        assert subbotin_delta(1.3 / s, e, r) <= delta
        assert subbotin_delta(1.3 / s, e * (1 - 1e-9), r) > delta


@pytest.mark.parametrize("r", [1.5, 3.0, 7.5])
def test_subbotin_epsilon_is_safe_for_tiny_sensitivity_over_scale(r: float) -> None:
    # Δ/scale far below the rounding of the crossing point: the mass S(u − b) − S(u) once lost
    # b entirely (true δ up to 2500× the requested one).
    bs = [1e-19, 1e-17, 1e-15, 1e-12]
    eps = epsilon_for_scale("subbotin", 1.0, 1e-20, bs, r=r)
    for b, e in zip(bs, eps.tolist(), strict=True):
        assert subbotin_delta(b, e, r) <= 1e-20, (b, e)
        assert subbotin_delta(b, e * (1 - 1e-9), r) > 1e-20


def test_quotient_above_is_exact() -> None:
    """The exact sign of Δ/scale − fl(Δ/scale) (Dekker), against exact rationals."""
    from fractions import Fraction

    from tabdp.privacy.approx import _quotient_above

    rng = np.random.default_rng(11)
    d = np.concatenate([np.exp(rng.uniform(-40, 40, 3000)), [1.0, 3.0, 2.0**-24, 1e-300]])
    for s in (1.0, 3.0, 0.7, 1e-5, 7.123456789e12, 2.0**-30):
        b = d / s
        got = _quotient_above(d, s, b)
        for x, bq, g in zip(d.tolist(), b.tolist(), got.tolist(), strict=True):
            exact_above = Fraction(x) / Fraction(s) > Fraction(bq)
            assert g == exact_above or (g and abs(bq * s) <= 1e-250), (x, s, bq)
    # a scale whose split overflows (s·(2**27 + 1) > 1.8e308): every value is reported above
    # (safe); before, NaN in the error term reported none of them (review r23)
    for s in (1.5e300, 1e301):
        dd = np.exp(rng.uniform(600.0, 660.0, 200))  # below 1e290: not caught by |d|
        assert np.all(_quotient_above(dd, s, dd / s))


def _subbotin_certified(b: float, e: float, r: float, delta: float) -> None:
    """ε = e at b = Δ/scale is valid (exact δ(e) ≤ δ, 80 digits) and within 1e-9 of exact."""
    if e == 0.0:
        assert subbotin_delta(b, 0.0, r) <= delta, (b, r, delta)
        return
    assert subbotin_delta(b, e, r) <= delta, (b, e, r, delta)              # never below
    assert subbotin_delta(b, e * (1 - 1e-9), r) > delta, (b, e, r, delta)  # within 1e-9


@pytest.mark.parametrize("r", [1.5, 3.0, 7.5])
@pytest.mark.parametrize("delta", [1e-3, 1e-9])
def test_subbotin_epsilon_is_certified_near_the_threshold_and_far(r: float, delta: float) -> None:
    """Issue 29 item 6: the reported ε is never below the exact one, and within 1e-9 of it.

    At the ε = 0 threshold b0 of the total variation and its neighbouring doubles (ε tiny, or 0
    where the exact total variation is ≤ δ), moderate shifts and huge ε (the bracket path above
    1e6). The float solver alone (margin δ·(1 − 1e-7)) was about 1e-8 above the exact ε, and up
    to 1e-6 above it near b0: these failed.
    """
    b0 = 2.0 * float(subbotin_center_quantile(r, delta))
    bs = [b0 * (1 - 1e-9), float(np.nextafter(b0, 0.0)), b0, float(np.nextafter(b0, np.inf)),
          b0 * (1 + 1e-9), b0 * (1 + 1e-6), b0 * 1.01, 1.0, 7.0, 2.0 * 1e6 ** (1 / r) + 10.0]
    eps = epsilon_for_scale("subbotin", 1.0, delta, bs, r=r)
    for b, e in zip(bs, eps.tolist(), strict=True):
        _subbotin_certified(b, e, r, delta)
    assert eps[-1] > 1e6 and eps[-4] > 0.0


@pytest.mark.slow
@pytest.mark.parametrize("r", [1.5, 3.0])
def test_subbotin_epsilon_certified_on_the_interpolated_path(r: float) -> None:
    """Above 4,096 distinct values (grid + spline start), every value is still Arb-verified."""
    rng = np.random.default_rng(29)
    bs = np.exp(rng.uniform(math.log(1e-3), math.log(30.0), 6000))
    eps = epsilon_for_scale("subbotin", 1.0, 1e-6, bs, r=r)
    for i in rng.choice(bs.size, 6, replace=False).tolist():
        _subbotin_certified(float(bs[i]), float(eps[i]), r, 1e-6)


@pytest.mark.parametrize("r", [1.5, 3.0, 7.5])
def test_subbotin_delta_for_scale_is_certified_and_tight(r: float) -> None:
    """δ(ε) reported by delta_for_scale: never below the exact one, within 1e-9 of it."""
    for b, eps in [(0.5, 0.1), (1.0, 1.0), (3.0, 2.0), (0.01, 0.0)]:
        got = float(delta_for_scale("subbotin", 1.0, eps, b, r=r))
        ex = subbotin_delta(b, eps, r)
        assert ex <= got <= ex * (1 + 1e-9), (b, eps, got, ex)


def testsubbotin_delta_for_scale_is_an_upper_bound_in_the_far_tail() -> None:
    for r, b, eps in [(3.0, 1.0, 60.0), (1.5, 0.5, 12.0), (7.5, 1.0, 8.0)]:
        got = float(delta_for_scale("subbotin", 1.0, eps, b, r=r))
        assert got >= subbotin_delta(b, eps, r)


# -------------------------------------------------------------------------------------------------
# other users of δ
# -------------------------------------------------------------------------------------------------
def test_smooth_laplace_gamma_limit_at_a_subnormal_delta() -> None:
    # ε/ln(2/δ), where 2/δ overflowed
    assert gamma_limit("laplace", 1.0, delta=TINY) == pytest.approx(
        1.0 / (math.log(2.0) - math.log(TINY)), rel=1e-15)


@pytest.mark.parametrize("family, r", [("gaussian", None), ("subbotin", 3.0), ("laplace", None),
                                       ("logistic", None)])
def test_a_values_epsilon_does_not_depend_on_the_other_values(family: str, r: float | None
                                                              ) -> None:
    """ε at δ of one sensitivity is the same double alone and among thousands of others.

    A per-record loss must be a function of the record's own values (and the public
    parameters): the same in a whole table, in a streaming batch or a Spark batch. The Gaussian
    path once interpolated a grid whose nodes followed the values present above 4,096 distinct
    values (1.6e-11 relative apart), and the certified Subbotin path took its start from that
    grid and certified ε = 0 at the largest value present (1.3e-12 apart).
    """
    rng = np.random.default_rng(1)
    # the draws that showed the Subbotin start's dependence (the fourth array of this stream)
    others = [rng.uniform(0.5, hi, 5000) for hi in (3.0, 8.0, 13.0, 3.0)]
    x = np.array([1.2345678, 0.0123, 3.0000001])
    alone = [float(epsilon_for_scale(family, 1.0, 1e-6, x[i:i + 1], r=r)[0])
             for i in range(x.size)]
    for i, xi in enumerate(x.tolist()):
        for other in others:
            got = float(epsilon_for_scale(family, 1.0, 1e-6, np.r_[xi, other], r=r)[0])
            assert got == alone[i], (family, xi, got, alone[i])


def test_a_records_certified_shift_follows_its_own_sensitivity() -> None:
    """Two sensitivities whose quotients round to the same double keep their own ε.

    The shift certified for Subbotin r ∉ {1, 2} is Δ/scale rounded, or the next double where
    the exact quotient lies above it; it was decided per distinct rounded value, so one record
    whose quotient rounds down moved another record's ε.
    """
    from tabdp.privacy.approx import _quotient_above

    s, d0 = 3.0, 7.0
    d1 = float(np.nextafter(d0, np.inf))
    assert d0 / s == d1 / s  # both quotients round to the same double
    # d1's exact quotient lies above the rounding, d0's does not
    assert _quotient_above(np.array([d0, d1]), s, np.array([d0 / s] * 2)).tolist() == [
        False, True]
    e0, e1 = (float(epsilon_for_scale("subbotin", s, 1e-6, [d], r=3.0)[0]) for d in (d0, d1))
    e_both = epsilon_for_scale("subbotin", s, 1e-6, [d0, d1], r=3.0)
    assert e_both.tolist() == [e0, e1]
    assert e0 <= e1
