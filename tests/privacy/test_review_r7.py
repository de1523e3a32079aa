"""Review R7: the zCDP to (ε, δ) conversion stays a valid bound where ε is near 0.

Near ε = 0 the terms of the Canonne–Kamath–Steinke bound (arXiv:2004.00010, Prop. 12) cancel, so
the float evaluation errs by far more than 1e-13 of ε: the returned ε must still be at least the
exact minimum over Rényi orders α > 1, computed here in 200-bit arithmetic.
"""

from __future__ import annotations

import math
import warnings

import mpmath as mp
import numpy as np
import pytest

from tabdp.privacy.conversions import zcdp_epsilon


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
