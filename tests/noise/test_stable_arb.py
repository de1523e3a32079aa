"""Certified SaS(α) series in Arb (tabdp.noise.rounding.stable_series; docs/exact-rounding.md §4.6).

Checked against two independent implementations: the float64 density and tail of
:mod:`tabdp.noise.stable` (Nolan's integrals, 1e-13) at many points, and Nolan's tail integral
in mpmath (``_mp_sf``) at a few. Plus: coverage (no gap between the three representations over
the whole range at table precision), ball semantics on wide balls, the Bergström remainder bound
against the true error, and power checks (a wrong coefficient or a dropped remainder is caught).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from tabdp.noise.rounding.certified import arb_context
from tabdp.noise.rounding.stable_series import StableArb
from tabdp.noise.stable import SymmetricStable, _core

ALPHAS = [1.001, 1.05, 1.1, 1.5, 1.9, 1.9999]
XS = [1e-8, 0.01, 0.3, 0.9, 1.0, 1.1, 1.6, 2.5, 4.0, 8.0, 12.0, 20.0, 35.0, 60.0, 1e3, 1e8]


def _float_refs(alpha: float, x: float) -> tuple[float, float]:
    """(g, T) from the float64 implementation (density of |Z| and two-sided tail)."""
    core = _core(alpha)
    g = 2.0 * math.exp(float(core.logpdf(np.array([x]))[0]))
    t = math.exp(float(core.log_tail(np.array([x]))[0]))
    return g, t


def _rel(b: object, ref: float) -> float:
    return abs(float(b.mid()) / ref - 1.0)  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("alpha", ALPHAS)
def test_values_match_the_float_implementation_with_tight_balls(alpha: float) -> None:
    """g, T and C at 200 bits: the float64 code's values to 1e-12, in 190-bit balls.

    (For the tail, the smaller of T and C must be tight; T + C must contain 1.)
    """
    ev = StableArb(alpha)
    bad = []
    for x in XS:
        g_ref, t_ref = _float_refs(alpha, x)
        with arb_context(200, 3) as flint:
            xa = flint.arb(x)
            g = ev.density(xa, 3)
            t = ev.tail(xa, central=False)
            c = ev.tail(xa, central=True)
            ok = (all(v.is_finite() for v in g) and t.is_finite() and c.is_finite()
                  and (t + c).overlaps(flint.arb(1)))
            if not ok:
                bad.append((x, "not finite or T + C != 1"))
                continue
            if _rel(g[0], g_ref) > 1e-12 or _rel(t, t_ref) > 1e-12:
                bad.append((x, _rel(g[0], g_ref), _rel(t, t_ref)))
            # the form that is small is the accurate one
            small = t if t_ref < 0.5 else c
            if min(g[0].rel_accuracy_bits(), small.rel_accuracy_bits()) < 190:
                bad.append((x, "loose", g[0].rel_accuracy_bits(), small.rel_accuracy_bits()))
    assert not bad, bad


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [1.001, 1.5, 1.9999])
def test_tails_contain_nolans_integral_in_mpmath(alpha: float) -> None:
    """The tail balls (140 bits) contain ``2·_mp_sf`` (Nolan's integral, 150-bit mpmath)."""
    law = SymmetricStable(alpha, 1.0)
    ev = StableArb(alpha)
    for x in (0.5, 1.02, 7.0, 45.0):
        with mpmath.workprec(150):
            ref = 2 * law._mp_sf(mpmath.mpf(x), mpmath.mp)
        with arb_context(140, 1) as flint:
            t = ev.tail(flint.arb(x), central=False)
            lo, hi = t.lower(), t.upper()
        with mpmath.workprec(150):
            slack = ref * mpmath.mpf(2) ** -120               # the reference's own error
            assert mpmath.mpf(lo.str(60, radius=False)) <= ref + slack, (x, t, ref)
            assert ref - slack <= mpmath.mpf(hi.str(60, radius=False)), (x, t, ref)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [1.001, 1.01, 1.05, 1.1, 1.2, 1.5, 1.8, 1.99, 1.9999])
def test_the_three_series_cover_every_x_at_table_precision(alpha: float) -> None:
    """No gap: 13 density coefficients and both tail forms are finite at 160 bits.

    On a log grid of x from 1e-6 to 1e12 and a fine grid around x = 1 (where the anchor is
    needed for α < 1.1).
    """
    ev = StableArb(alpha)
    grid = np.concatenate([np.geomspace(1e-6, 1e12, 60), np.linspace(0.8, 2.5, 35)])
    bad = []
    with arb_context(160, 14) as flint:
        for x in grid.tolist():
            xa = flint.arb(x)
            if not all(v.is_finite() for v in ev.density(xa, 13)):
                bad.append(("density", x))
            for central in (False, True):
                if not ev.tail(xa, central).is_finite():
                    bad.append(("tail", central, x))
    assert not bad, bad


@pytest.mark.slow
def test_the_anchor_is_what_covers_alpha_near_one_at_x_one() -> None:
    """At α = 1.001, x = 1 only the anchored series gets there (and matches the float code)."""
    ev = StableArb(1.001)
    with arb_context(160, 14) as flint:
        x = flint.arb(1.0)
        assert ev._mac(x, 13, False, 160) is None
        assert ev._berg(x, 13, 160) is None
        got = ev._anch(x, 13, 160, False)
        assert got is not None and all(v.is_finite() for v in got)
    g_ref, _ = _float_refs(1.001, 1.0)
    assert _rel(got[0], g_ref) < 1e-12


@pytest.mark.slow
@pytest.mark.parametrize(("alpha", "x"), [(1.5, 0.7), (1.5, 6.0), (1.5, 30.0), (1.001, 1.0),
                                          (1.05, 1.5), (1.9999, 20.0), (1.9999, 300.0)])
def test_density_coefficients_are_the_derivatives_of_the_tail(alpha: float, x: float) -> None:
    """``g = −T′`` and ``g_k = g_{k−1}′/k`` (k = 1 … 12), by central differences at 400 bits.

    With h = 1e-30·x the difference quotient errs by about h² relative; the check is 1e-40
    relative to the coefficient scale ``g·max(1, x)^{−k}``. The cases cover the Maclaurin,
    Bergström and anchored series.
    """
    ev = StableArb(alpha)
    with arb_context(400, 14) as flint:
        xa = flint.arb(x)
        h = flint.arb(x) * flint.arb(10) ** -30
        g = ev.density(xa, 13)
        up, dn = ev.density(xa + h, 13), ev.density(xa - h, 13)
        t_up, t_dn = ev.tail(xa + h, False), ev.tail(xa - h, False)
        scale = abs(g[0].mid())
        tol = flint.arb(10) ** -40 * scale
        assert abs(-(t_up - t_dn) / (2 * h) - g[0]).upper() <= tol.upper()
        for k in range(1, 13):
            fd = (up[k - 1] - dn[k - 1]) / (2 * h * k)
            assert abs(fd - g[k]).upper() <= (tol / max(1.0, x) ** k).upper(), (k, fd, g[k])


@pytest.mark.slow
@pytest.mark.parametrize(("alpha", "x"), [(1.5, 0.7), (1.5, 6.0), (1.5, 30.0), (1.001, 0.97),
                                          (1.9999, 20.0), (1.9999, 300.0)])
def test_density_on_a_wide_ball_contains_its_points(alpha: float, x: float) -> None:
    """Ball semantics: g's coefficients on ``[x ± x/300]`` contain those at 9 of its points.

    The points are evaluated exactly; the cases cover each representation.
    """
    ev = StableArb(alpha)
    with arb_context(160, 14) as flint:
        ball = flint.arb(x, x / 300)
        wide = ev.density(ball, 13)
        assert all(v.is_finite() for v in wide)
        for y in np.linspace(x - x / 300, x + x / 300, 9).tolist():
            pts = ev.density(flint.arb(y), 13)
            for i, (w, p) in enumerate(zip(wide, pts, strict=True)):
                assert w.contains(p), (y, i, w, p)
        # and the tail on a ball is the hull of its ends (T decreases)
        t = ev.tail(ball, central=False)
        for y in (x - x / 300, x + x / 300):
            assert t.contains(ev.tail(flint.arb(y), central=False))


@pytest.mark.parametrize("alpha", [1.3, 1.7])
def test_bergstrom_remainder_bound_holds_and_is_not_vacuous(alpha: float) -> None:
    """The Bergström tail remainder bound holds for N = 2 … 30 and is not vacuous.

    ``|T(x) − Σ_{n<N} H_n x^{−αn}|`` (truth: the 400-bit evaluator) at x = 15 and 40 never
    exceeds the bound, and the bound is within 2**40 of the true error at its best N.
    """
    ev = StableArb(alpha)
    a = alpha
    sp = math.sin(math.pi / (2 * a))
    for x in (15.0, 40.0):
        with arb_context(400, 1) as flint:
            truth = ev.tail(flint.arb(x), central=False)
            assert truth.rel_accuracy_bits() > 250
            coefs = ev._coefs("G", 448, 40)
            part = flint.arb(0)
            ratios = []
            for n in range(1, 31):
                an = flint.arb(a) * n                      # α·n in Arb (not in float64)
                part += coefs[n - 1] / an * flint.arb(x) ** (-an)
                big_n = n + 1
                bound = (2 * math.exp(math.lgamma(a * big_n) - math.lgamma(big_n + 1))
                         / (math.pi * sp * (x * sp) ** (a * big_n)))
                err = float(abs(truth - part).upper())
                assert err <= bound * (1 + 1e-9), (x, n, err, bound)
                if err > 1e-100:
                    ratios.append(bound / err)
            assert min(ratios) < 2.0**40, (x, min(ratios))


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (2-4 s)
def test_a_wrong_coefficient_is_caught() -> None:
    """Power: one Bergström coefficient 1e-10 off makes the tail ball miss Nolan's integral.

    At x = 100 (mpmath, 120 bits, with 2**-100 of slack); the correct evaluator's ball meets it.
    """
    law = SymmetricStable(1.5, 1.0)
    with mpmath.workprec(120):
        ref = 2 * law._mp_sf(mpmath.mpf(100), mpmath.mp)
    with arb_context(140, 1) as flint:
        window = flint.arb(mpmath.nstr(ref, 40)) * (1 + flint.arb(0, 2.0**-100))
        assert StableArb(1.5).tail(flint.arb(100.0), central=False).overlaps(window)
        bad = StableArb(1.5)
        coefs = bad._coefs("G", 256, 64)           # the working precision at 140 bits
        coefs[0] = coefs[0] * (1 + flint.arb(1e-10))
        t_bad = bad.tail(flint.arb(100.0), central=False)
        assert t_bad.is_finite() and not t_bad.overlaps(window)


def test_a_dropped_remainder_is_caught() -> None:
    """Power: a 40-term Maclaurin sum at x = 3 misses the truth without its truncation bound.

    With the bound added the ball meets the truth.
    """
    ev = StableArb(1.5)
    with arb_context(300, 1) as flint:
        truth = ev.tail(flint.arb(3.0), central=True)
        wp = 448
        pol = ev._poly("B", wp, 40)                       # 40 terms: truncation ~1e-15
        short = flint.arb(3.0) * pol(flint.arb(9.0))
        assert not short.overlaps(truth)
        tb = ev._mac_tail_bound(wp, 40, flint.arb(9.0)) * 3 / 81
        assert (short + flint.arb(0, tb.upper())).overlaps(truth)


def test_rejects_alpha_outside_the_open_interval() -> None:
    """α = 1 and α = 2 have closed forms; the series need 1 < α < 2."""
    for alpha in (1.0, 2.0, 0.5):
        with pytest.raises(ValueError, match="alpha"):
            StableArb(alpha)
