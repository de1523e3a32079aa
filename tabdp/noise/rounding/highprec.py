"""High-precision (mpmath) tails for the exact path, and certified Arb tails (exact rounding).

The exact path of `tabdp.noise.exact.round_noisy` decides the few cells that float64 cannot
by comparing the cell's uniform with the exact tail ``P(|Z| > h)`` at a breakpoint. A law supplies
that tail through one of these strategies (held by its `Rounding`):

* `MpTail`: the law's closed-form mpmath tail ``law._mp_sf(x, mp)``; or, with
  ``quadrature=True``, the integral of its exact log-density ``law._mp_logpdf(x, mp)`` by
  `mp_quad_checked` (the fallback for a law with no closed form).
* `ArbTail`: as `MpTail`, plus certified Arb balls of the standardized tail
  (``law._arb_unit()``, ``law._arb_tail(xs, central)``), which the exact path prefers.

Quantiles ``m`` with ``P(|Z| > m) = u`` come from ``abs_isf`` (a closed form given by the law) or
`solve_abs_isf` (bracketed Illinois iteration on the tail).

Example:
    >>> import mpmath
    >>> from tabdp.noise import Laplace
    >>> t = MpTail(Laplace(scale=1.0))
    >>> float(t.mp_sf(mpmath.mpf(1), mpmath.mp))                      # e^-1 / 2
    0.18393972058572117
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tabdp.exceptions import TabdpInternalError

__all__ = ["mp_quad_checked", "quadrature_points", "solve_abs_isf", "MpTail", "ArbTail"]


def mp_quad_checked(log_f: Any, points: list[Any], mp: Any) -> Any:
    """``∫ exp(log_f)`` over ``points`` by ``mp.quad``, with its error estimate checked.

    mpmath's tanh-sinh rule treats integrand values below about ``2**-mp.prec`` as zero (an
    absolute threshold), which silently ruins tails of size 1e-100 and below. So every piece
    ``[a, b]`` is integrated as ``exp(L)·∫_0^{b−a} exp(log_f(a + τ) − L) dτ`` with ``L`` the
    largest of ``log_f`` at the ends and midpoint (O(1) integrand, abscissas near 0). The sum is
    recomputed with every finite piece halved until the summed error estimate is below
    ``2**-(mp.prec - 24)`` of the value; otherwise
    [`TabdpInternalError`][tabdp.exceptions.TabdpInternalError] is raised (never a silently
    inaccurate value).

    Args:
        log_f: Log of the integrand (mpmath function of one ``mpf``; ``-inf`` allowed).
        points: Increasing split points (the last may be ``mp.inf``).
        mp: The mpmath context.

    Returns:
        The integral.

    Raises:
        TabdpInternalError: If the requested accuracy is not reached.

    Example:
        >>> import mpmath
        >>> v = mp_quad_checked(lambda t: -t - 500, [mpmath.mpf(0), mpmath.inf], mpmath.mp)
        >>> abs(float(v * mpmath.exp(500)) - 1.0) < 1e-15
        True
    """
    pts = list(points)
    tol = mp.mpf(2) ** (-mp.prec + 24)
    total = err_total = mp.zero
    for _attempt in range(5):
        total = err_total = mp.zero
        for a, b in zip(pts[:-1], pts[1:], strict=True):
            if mp.isinf(b):
                width = mp.inf
                ref = log_f(a)
            else:
                width = b - a
                ref = max(log_f(a), log_f(b), log_f(a + width / 2))
            if mp.isinf(ref) and ref < 0:
                continue

            def g(t: Any, a: Any = a, ref: Any = ref) -> Any:
                return mp.exp(log_f(a + t) - ref)

            val, err = mp.quad(g, [0, width], error=True)
            scale = mp.exp(ref)
            total += val * scale
            err_total += err * scale
        if err_total <= tol * abs(total):
            return total
        new = [pts[0]]
        for a, b in zip(pts[:-1], pts[1:], strict=True):
            new.extend([b] if mp.isinf(b) else [(a + b) / 2, b])
        pts = new
    raise TabdpInternalError(
        f"high-precision quadrature did not reach 2^-{mp.prec - 24} relative accuracy "
        f"(estimate {mp.nstr(err_total, 3)} for value {mp.nstr(total, 10)})")


def quadrature_points(abs_isf: Callable[[np.ndarray], np.ndarray], x: Any, mp: Any) -> list[Any]:
    """Split points for quadrature of the tail beyond ``x``: float ``|Z|`` quantiles.

    Args:
        abs_isf: The law's float64 ``|Z|`` quantile.
        x: The lower end (an ``mpf``).
        mp: The mpmath context.

    Returns:
        Increasing points from ``x`` to ``mp.inf``.

    Example:
        >>> import mpmath
        >>> pts = quadrature_points(lambda u: -np.log(u), mpmath.mpf(0), mpmath.mp)
        >>> float(pts[1]) > 0, pts[-1] == mpmath.inf
        (True, True)
    """
    us = np.asarray([0.5, 1e-2, 1e-4, 1e-8, 1e-16, 1e-32, 1e-64, 1e-128, 1e-256])
    with np.errstate(all="ignore"):
        qs = abs_isf(us)
    pts = [x] + [mp.mpf(float(v)) for v in qs if np.isfinite(v) and mp.mpf(float(v)) > x]
    return [*sorted(set(pts)), mp.inf]


def solve_abs_isf(sf: Callable[[Any, Any], Any], abs_isf: Callable[[np.ndarray], np.ndarray],
                  u: Any, mp: Any) -> Any:
    """The exact ``|Z|`` quantile ``m`` with ``2·sf(m) = u``, in working precision.

    Solves by a bracketed Illinois (regula falsi) iteration on ``ln``-tails, started from the
    float64 quantile ``abs_isf``.

    Args:
        sf: ``P(Z > x)`` in mpmath (``sf(x, mp)``).
        abs_isf: The float64 ``|Z|`` quantile (starting guess).
        u: Two-sided tail mass in (0, 1], an ``mpf``.
        mp: The mpmath context.

    Returns:
        ``m`` as an ``mpf`` (relative accuracy about ``2**-(mp.prec - 8)``).

    Example:
        >>> import mpmath
        >>> m = solve_abs_isf(lambda x, mp: mp.exp(-x) / 2, lambda u: -np.log(u),
        ...                   mpmath.mpf("0.5"), mpmath.mp)
        >>> abs(float(m) - math.log(2.0)) < 1e-15
        True
    """
    u = mp.mpf(u)
    if u >= 1:
        return mp.zero
    target = mp.log(u)

    def f(m: Any) -> Any:
        return mp.log(2 * sf(m, mp)) - target

    with np.errstate(all="ignore"):
        g = float(abs_isf(np.asarray([max(float(u), 1e-308)]))[0])
    a = mp.mpf(g) if math.isfinite(g) and g > 0 else mp.mpf(1)
    b = a
    fa = f(a)
    if fa > 0:       # tail too heavy at a: the root is beyond
        b, fb = a * 2, f(a * 2)
        while fb > 0:
            a, fa = b, fb
            b, fb = b * 2, f(b * 2)
    else:
        b, fb = a, fa
        a = a / 2
        fa = f(a)
        while fa < 0 and a > mp.mpf(2) ** (-mp.prec - 1100):
            b, fb = a, fa
            a = a / 2
            fa = f(a)
        if fa < 0:
            return mp.zero
    tol = mp.mpf(2) ** (-mp.prec + 4)
    side = 0
    for _ in range(20 * mp.prec):
        c = (a * fb - b * fa) / (fb - fa) if fb != fa else (a + b) / 2
        if not (a < c < b):
            c = (a + b) / 2
        fc = f(c)
        if fc == 0:
            return c
        if fc > 0:
            a, fa = c, fc
            if side == 1:
                fb /= 2
            side = 1
        else:
            b, fb = c, fc
            if side == -1:
                fa /= 2
            side = -1
        if b - a <= tol * b:
            break
    return (a + b) / 2


class MpTail:
    """The law's exact tail in mpmath: closed form (``law._mp_sf``) or quadrature.

    The law's hooks (documented here once; each law's docstring gives its formula) take an
    ``mpf`` ``x`` and the mpmath context ``mp`` and return an ``mpf`` at the working precision
    ``mp.prec``: ``law._mp_sf(x, mp)`` is ``P(Z > x)`` for ``x >= 0``, ``law._mp_logpdf(x, mp)``
    the log density at ``x``.

    Args:
        law: The noise law.
        quadrature: Integrate ``law._mp_logpdf(x, mp)`` (no closed-form tail).
        abs_isf: Closed-form exact quantile ``(u, mp) -> m``; default `solve_abs_isf`.

    Example:
        >>> import mpmath
        >>> from tabdp.noise import StudentT
        >>> m = MpTail(StudentT(df=1.0)).mp_abs_isf(mpmath.mpf("0.5"), mpmath.mp)   # Cauchy: 1
        >>> abs(float(m) - 1.0) < 1e-12
        True
    """

    #: No certified Arb tail (:class:`ArbTail` has one).
    arb = False

    def __init__(self, law: Any, *, quadrature: bool = False,
                 abs_isf: Callable[[Any, Any], Any] | None = None) -> None:
        """The exact tail of ``law``."""
        self.law = law
        self.quadrature = quadrature
        self._abs_isf = abs_isf

    def mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x)`` for ``x >= 0`` in working precision ``mp.prec`` (mpmath).

        Arguments and result as in `tabdp.noise.rounding.Rounding.mp_sf`.

        Example:
            >>> import mpmath
            >>> from tabdp.noise import Gaussian
            >>> round(float(MpTail(Gaussian(2.0)).mp_sf(mpmath.mpf(2), mpmath.mp)), 6)
            0.158655
        """
        law = self.law
        if self.quadrature:
            return mp_quad_checked(lambda t: law._mp_logpdf(t, mp),
                                   quadrature_points(law._abs_isf, x, mp), mp)
        return law._mp_sf(x, mp)

    def mp_abs_isf(self, u: Any, mp: Any) -> Any:
        """The exact ``|Z|`` quantile (closed form, or `solve_abs_isf` on `mp_sf`).

        Arguments and result as in `tabdp.noise.rounding.Rounding.mp_abs_isf`.

        Example:
            >>> import mpmath
            >>> from tabdp.noise import Laplace
            >>> float(MpTail(Laplace(2.0)).mp_abs_isf(mpmath.mpf(1), mpmath.mp))
            0.0
        """
        if self._abs_isf is not None:
            return self._abs_isf(u, mp)
        return solve_abs_isf(self.mp_sf, self.law._abs_isf, u, mp)

    def arb_unit(self) -> float:  # pragma: no cover - only called when arb
        """Not available: this tail has no Arb form."""
        raise NotImplementedError(f"{type(self.law).__name__} has no Arb tail")

    def arb_tail(self, xs: Any, central: bool = False) -> Any:  # pragma: no cover - idem
        """Not available: this tail has no Arb form."""
        raise NotImplementedError(f"{type(self.law).__name__} has no Arb tail")


class ArbTail(MpTail):
    """Certified Arb tails (``law._arb_unit()``, ``law._arb_tail``) plus the mpmath tail.

    The exact path evaluates tails in ball arithmetic (python-flint) and falls back to
    `MpTail.mp_sf` where a ball is not finite.

    Example:
        >>> from tabdp.noise import Logistic
        >>> ArbTail(Logistic(scale=3.0)).arb_unit()
        3.0
    """

    arb = True

    def arb_unit(self) -> float:
        """The scale that standardizes the law (``Z/unit`` has the tabulated shape).

        Example:
            >>> from tabdp.noise import Laplace
            >>> ArbTail(Laplace(2.0)).arb_unit()
            2.0
        """
        return float(self.law._arb_unit())

    def arb_tail(self, xs: Any, central: bool = False) -> Any:
        """Standardized two-sided tail ``P(|Z/unit| > x)`` on an ``arb_series``.

        Args:
            xs: The argument series.
            central: Return ``1 −`` the tail, without cancellation.

        Returns:
            The tail series (correct on balls).

        Example:
            >>> import flint
            >>> from tabdp.noise import Laplace
            >>> t = ArbTail(Laplace(1.0)).arb_tail(flint.arb_series([flint.arb(1)]))
            >>> round(float(t.coeffs()[0].mid()), 6)
            0.367879
        """
        return self.law._arb_tail(xs, central)
