"""Calibration at extreme parameters: huge Δ, tiny σ, ε → 0 — safe answers or a clear refusal.

Safety is checked against exact arithmetic in mpmath: the Gaussian δ(ε) of Balle & Wang (2018,
Thm 8), the Laplace and Logistic closed forms, the Subbotin_r criterion of seed 004 Lemma 1
(references in ``tests/_mp_refs.py``), and ρ(Δ) = Δ²/(2σ²) for Gaussian-type policies.
"""

from __future__ import annotations

import math
import pathlib
import sys
import warnings

import mpmath as mp
import numpy as np
import pytest

from tabdp.calibrate import FAMILIES, calibrate, compare_families
from tabdp.exceptions import CalibrationError, InvalidParameterError
from tabdp.mechanisms import Gaussian, Subbotin, UnitSplitting
from tabdp.mechanisms.stable import SymmetricStable
from tabdp.mechanisms.transformation import LogTransform, RootTransform
from tabdp.privacy.approx import delta_for_scale, epsilon_for_scale, min_scale

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _mp_refs import gauss_delta, laplace_delta, logistic_delta, subbotin_delta  # noqa: E402

_REF = {
    ("gaussian", None): lambda b, e: gauss_delta(b, e),
    ("laplace", None): laplace_delta,
    ("logistic", None): logistic_delta,
    ("subbotin", 1.5): lambda b, e: subbotin_delta(b, e, 1.5),
    ("subbotin", 3.0): lambda b, e: subbotin_delta(b, e, 3.0),
}
_FAMS = list(_REF)


# -------------------------------------------------------------------------------------------------
# Gaussian-type policies: (Δ/σ)²/2, not Δ²/(2σ²)
# -------------------------------------------------------------------------------------------------
def test_gaussian_type_rho_does_not_underflow_when_delta_and_sigma_are_tiny() -> None:
    # Δ² underflowed to 0 (ρ = 0, or NaN for the transformations) although Δ/σ = 1
    # (losses round up: outside the range of the error-free checks, by a few units in the last
    # place, so the exact 1/2 and 1/4 may be reported a few doubles above, never below)
    for got, exact in ((Gaussian(sigma=1e-300).rho(1e-300), 0.5),
                       (Subbotin(r=2.0, scale=1e-300).rho(1e-300), 0.5),
                       (SymmetricStable(2.0, 1e-300).rho(1e-300), 0.25),
                       (UnitSplitting(threshold=1e-300, sigma=1e-300).rho(1e-300), 0.5)):
        assert exact <= float(got) <= exact * (1.0 + 1e-14), (float(got), exact)
    got = float(LogTransform(sigma=1e-200, offset=1.0).rho(1e-200))
    assert got == pytest.approx(0.5, rel=1e-12)
    got = float(RootTransform(k=1, sigma=1e-300, offset=0.0).rho(1e-300))
    assert got == pytest.approx(0.5, rel=1e-12)
    # and Δ² no longer overflows where Δ/σ is ordinary
    assert float(Gaussian(sigma=1e200).rho(2e200)) == 2.0


# -------------------------------------------------------------------------------------------------
# calibrate: every result meets its targets exactly, or a CalibrationError says why not
# -------------------------------------------------------------------------------------------------
_EXTREME_TARGETS = [
    ({1e200: 0.5}, 1e6), ({1e300: 0.5}, 1e6), ({1.0: 1e-300}, 1.0), ({1e-300: 1.0}, 0.0),
    ({1.0: 1e300}, 1.0), ({1e-300: 1e-300}, 0.0), ({1e3: 1e-10, 1e300: 1e-10}, 1e6),
    ({1.7e308: 0.5}, 0.0), ({1.0: 5e-324}, 1.0),
]


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("targets,typical", _EXTREME_TARGETS)
def test_calibrate_meets_extreme_targets_or_refuses_clearly(
        family: str, targets: dict[float, float], typical: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no stray overflow warnings either
        try:
            res = calibrate(family, targets, typical_total=typical)
        except CalibrationError as exc:
            assert f"calibrate({family!r})" in str(exc) and "Hint:" in str(exc)
            return
    for size, target in targets.items():  # (decreasing targets are refused: issue 28,
        # test_compare_families_survives_extreme_targets)
        got = float(res.mechanism.rho(size))
        assert got <= target, (size, got, target)
        if family == "gaussian":                 # exact: Δ²/(2σ²) in mpmath
            sigma = mp.mpf(res.mechanism.params()["sigma"])
            assert mp.mpf(size) ** 2 / (2 * sigma**2) <= target * (1 + 4 * 2.0**-52)


def test_compare_families_survives_extreme_targets() -> None:
    # extreme but not decreasing: a tiny loss at an enormous size (the same at 1e3)
    comp = compare_families({1e3: 1e-10, 1e300: 1e-10}, typical_total=1e6)
    assert comp.results or comp.failed                   # ranks what works, lists the rest
    for r in comp.results:
        assert float(r.mechanism.rho(1e300)) <= 1e-10
        assert float(r.mechanism.rho(1e3)) <= 1e-10
    # decreasing targets are refused before any family is tried (issue 28)
    with pytest.raises(InvalidParameterError, match="targets decrease with record size"):
        compare_families({1e3: 0.5, 1e300: 1e-10}, typical_total=1e6)


# -------------------------------------------------------------------------------------------------
# approx: huge Δ, tiny σ (huge Δ/σ), ε → 0
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family,r", _FAMS)
@pytest.mark.parametrize("eps", [1e-300, 1e-100, 1e-12, 1e-3])
def test_min_scale_as_epsilon_goes_to_zero_is_safe(family: str, r: float | None,
                                                   eps: float) -> None:
    for delta in (1e-6, 1e-12):
        s = min_scale(family, eps, delta, r=r)
        assert _REF[(family, r)](1 / s, eps) <= delta
    # ε → 0 converges to the ε = 0 scale (total variation δ), from below
    s0 = min_scale(family, 0.0, 1e-6, r=r)
    assert min_scale(family, eps, 1e-6, r=r) <= s0 * (1 + 1e-12)


@pytest.mark.parametrize("family,r", _FAMS)
def test_min_scale_at_huge_and_tiny_sensitivity(family: str, r: float | None) -> None:
    for sens in (1e-300, 1e300):
        s = min_scale(family, 1.0, 1e-6, sens, r=r)
        assert _REF[(family, r)](sens / s, 1.0) <= 1e-6
    if family in ("laplace", "logistic"):                 # scale ≈ Δ: still representable
        assert math.isfinite(min_scale(family, 1.0, 1e-6, 1e308, r=r))
    else:                                                 # scale ≈ 4Δ: beyond the doubles
        with pytest.raises(CalibrationError, match="exceeds the largest double"):
            min_scale(family, 1.0, 1e-6, 1e308, r=r)


@pytest.mark.parametrize("family,r", _FAMS)
def test_epsilon_and_delta_for_scale_at_extreme_sensitivity_over_scale(
        family: str, r: float | None) -> None:
    bs = [1e-300, 1e-200, 1e150, 1e300, 1e308]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eps = epsilon_for_scale(family, 1.0, 1e-6, bs, r=r)
        dlt = delta_for_scale(family, 1.0, 1.0, bs, r=r)
    assert not np.any(np.isnan(eps)) and not np.any(np.isnan(dlt))
    for b, e, d in zip(bs, eps.tolist(), dlt.tolist(), strict=True):
        if b < 1.0:
            assert e == 0.0 and d <= 1e-300                  # Δ/σ tiny: nothing to protect
            assert _REF[(family, r)](b, 0.0) <= 1e-6
        else:
            assert d == 1.0                                  # Δ/σ huge: δ(1) = 1 to rounding
            assert e >= 0.5 * min(b, 1e300) or math.isinf(e)  # ε at least of the order Δ/σ
            if math.isfinite(e) and b < 1e200 and family in ("laplace", "logistic"):
                assert _REF[(family, r)](b, e) <= 1e-6


def testsubbotin_delta_for_scale_had_nan_where_x_to_the_r_overflows() -> None:
    # b = 1e-300, ε = 1: the crossing point is u = 1e150 and u³ overflows
    got = delta_for_scale("subbotin", 1.0, 1.0, [1e-300, 1e150], r=3.0)
    assert got.tolist() == [5e-324, 1.0]
