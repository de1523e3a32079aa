"""The contract every noise distribution in tabdp follows.

A :class:`NoiseDistribution` is a symmetric continuous law centred at 0 with
``logpdf``/``pdf``, ``cdf``/``sf``, ``ppf``/``isf``, ``variance``/``std`` and a vectorized
inverse-CDF sampler ``sample(size, rng)``. Subclasses implement ``logpdf``, ``_abs_isf`` (the
magnitude whose two-sided tail mass is ``u``: ``P(|Z| > m) = u``), ``sf`` for ``x >= 0``
(``_sf_pos``) and ``variance``; everything else follows by symmetry, which keeps tails accurate
(no ``1 - cdf`` cancellation).

Exact rounding (:mod:`tabdp.noise.exact`) needs two more things from a law, both with safe
defaults:

* ``_mp_sf(x, mp)``: ``P(Z > x)`` for ``x >= 0`` in arbitrary precision (mpmath), accurate to
  the working precision ``mp.prec``. The default integrates ``_mp_logpdf`` (which a law then has
  to provide) with ``mp.quad``; a law with neither cannot be released exactly and is refused.
* ``_isf_bounds(u_lo, u_hi)``: float64 bounds ``lo <= m(u) <= hi`` for every ``u`` in
  ``[u_lo, u_hi]``, where ``m(u)`` is the exact ``|Z|`` quantile (``P(|Z| > m) = u``). The default
  uses ``_abs_isf`` widened by the relative error bound ``_isf_rel_error`` (class attribute
  ``_isf_rtol``); a law that declares no bound gets ``(0, inf)``, i.e. every draw is decided by the
  slower high-precision path, which is still exact.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from tabdp.rng import RandomSource, as_random_source

__all__ = ["NoiseDistribution", "mp_quad_checked"]

#: Unit roundoff of float64 (2**-53).
_U = 2.0**-53


def mp_quad_checked(log_f: Any, points: list[Any], mp: Any) -> Any:
    """``∫ exp(log_f)`` over ``points`` by ``mp.quad``, with its error estimate checked.

    mpmath's tanh-sinh rule treats integrand values below about ``2**-mp.prec`` as zero (an
    absolute threshold), which silently ruins tails of size 1e-100 and below. So every piece
    ``[a, b]`` is integrated as ``exp(L)·∫_0^{b−a} exp(log_f(a + τ) − L) dτ`` with ``L`` the
    largest of ``log_f`` at the ends and midpoint (O(1) integrand, abscissas near 0). The sum is
    recomputed with every finite piece halved until the summed error estimate is below
    ``2**-(mp.prec - 24)`` of the value; otherwise :class:`tabdp.exceptions.TabdpInternalError`
    is raised (never a silently inaccurate value).

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
    from tabdp.exceptions import TabdpInternalError

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


class NoiseDistribution(ABC):
    """A symmetric, continuous noise law centred at 0.

    Example:
        >>> from tabdp.noise import Gaussian
        >>> g = Gaussian(sigma=2.0)
        >>> float(g.cdf(0.0)), float(g.std())
        (0.5, 2.0)
    """

    #: Short name used in reports.
    name: str = "noise"
    #: Relative error bound of the float64 ``_abs_isf`` (|computed − exact| <= rtol·computed), used
    #: by the default :meth:`_isf_bounds`; ``None`` when the law declares no bound (exact rounding
    #: then decides every draw in high precision). See ``docs/exact-rounding.md``.
    _isf_rtol: ClassVar[float | None] = None
    #: True for laws whose float64 quantile bounds come from certified tables (python-flint/Arb;
    #: ``tabdp.noise._certified``): they provide ``_arb_unit``, ``_arb_key``, ``_arb_tail`` and
    #: ``_arb_density``, and the exact path evaluates their tails in ball arithmetic.
    _arb_certified: bool = False
    #: True for laws with a proven fast path of their own that still provide ``_arb_tail`` and
    #: ``_arb_unit`` for the exact path (Gaussian, Laplace, Logistic).
    _arb_exact_tail: ClassVar[bool] = False

    # -- to implement -------------------------------------------------------------------------
    @abstractmethod
    def logpdf(self, x: ArrayLike) -> np.ndarray:
        """Log density at ``x`` (vectorized).

        Example:
            >>> from tabdp.noise import Laplace
            >>> round(float(Laplace(scale=1.0).logpdf(0.0)), 6)
            -0.693147
        """

    @abstractmethod
    def _sf_pos(self, x: np.ndarray) -> np.ndarray:
        """Survival function ``P(Z > x)`` for ``x >= 0`` (accurate in the tail)."""

    @abstractmethod
    def _abs_isf(self, u: np.ndarray) -> np.ndarray:
        """Magnitude ``m >= 0`` with ``P(|Z| > m) = u`` for ``u`` in (0, 1]."""

    @abstractmethod
    def variance(self) -> float:
        """Variance (``inf`` when it does not exist).

        Example:
            >>> from tabdp.noise import ExpPolyLog
            >>> ExpPolyLog(sigma=1.0, a=1.0, d=3.0).variance()
            inf
        """

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Public parameters, for reports.

        Example:
            >>> from tabdp.noise import Gaussian
            >>> Gaussian(sigma=1.0).params()
            {'sigma': 1.0}
        """

    # -- derived ------------------------------------------------------------------------------
    def pdf(self, x: ArrayLike) -> np.ndarray:
        """Density at ``x``.

        Args:
            x: Points.

        Returns:
            Density values.

        Example:
            >>> from tabdp.noise import Laplace
            >>> float(Laplace(scale=1.0).pdf(0.0))
            0.5
        """
        return np.exp(self.logpdf(x))

    def sf(self, x: ArrayLike) -> np.ndarray:
        """Survival function ``P(Z > x)``.

        Args:
            x: Points.

        Returns:
            Tail probabilities.

        Example:
            >>> from tabdp.noise import Laplace
            >>> round(float(Laplace(scale=1.0).sf(1.0)), 6)
            0.18394
        """
        x = np.asarray(x, dtype=np.float64)
        ax = np.abs(x)
        s = self._sf_pos(ax)
        return np.where(x >= 0, s, 1.0 - s)

    def cdf(self, x: ArrayLike) -> np.ndarray:
        """Distribution function ``P(Z <= x)``.

        Args:
            x: Points.

        Returns:
            Probabilities.

        Example:
            >>> from tabdp.noise import Laplace
            >>> float(Laplace(scale=1.0).cdf(0.0))
            0.5
        """
        x = np.asarray(x, dtype=np.float64)
        return self.sf(-x)

    def ppf(self, q: ArrayLike) -> np.ndarray:
        """Quantile function (inverse of :meth:`cdf`).

        Args:
            q: Probabilities in (0, 1).

        Returns:
            Quantiles; ``-inf``/``inf`` at 0/1.

        Example:
            >>> from tabdp.noise import Gaussian
            >>> round(float(Gaussian(sigma=1.0).ppf(0.95)), 4)
            1.6449
        """
        q = np.asarray(q, dtype=np.float64)
        tail = np.minimum(q, 1.0 - q)  # mass on the far side
        with np.errstate(divide="ignore", invalid="ignore"):
            m = self._abs_isf(np.clip(2.0 * tail, 0.0, 1.0))
        m = np.where(tail <= 0.0, np.inf, m)
        out = np.where(q >= 0.5, m, -m)
        return np.where(np.isnan(q) | (q < 0) | (q > 1), np.nan, out)

    def isf(self, q: ArrayLike) -> np.ndarray:
        """Inverse survival function: ``x`` with ``P(Z > x) = q``.

        Args:
            q: Tail probabilities in (0, 1).

        Returns:
            Points.

        Example:
            >>> from tabdp.noise import Gaussian
            >>> round(float(Gaussian(sigma=1.0).isf(0.05)), 4)
            1.6449
        """
        return -self.ppf(q)

    def std(self) -> float:
        """Standard deviation (``inf`` when the variance is infinite).

        Example:
            >>> from tabdp.noise import Laplace
            >>> round(Laplace(scale=1.0).std(), 6)
            1.414214
        """
        return float(np.sqrt(self.variance()))

    def interval_halfwidth(self, level: float) -> float:
        """Half-width ``h`` of the central interval: ``P(|Z| <= h) = level``.

        Args:
            level: Coverage in (0, 1), e.g. 0.9.

        Returns:
            The half-width (exact quantile of ``|Z|``).

        Example:
            >>> from tabdp.noise import Gaussian
            >>> round(Gaussian(sigma=1.0).interval_halfwidth(0.9), 4)
            1.6449
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(self._abs_isf(np.asarray([1.0 - level]))[0])

    def sample(self, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
        """Draw noise by inverse CDF: a fair sign times the ``|Z|`` quantile of a uniform.

        These are plain float64 draws, for exploration and tests. Releases never add them to
        data: mechanisms release exactly rounded values (:func:`tabdp.noise.exact.round_noisy`),
        because ``q + sample()`` in floating point can leak ``q`` (docs/exact-rounding.md).

        Args:
            size: Output shape.
            rng: A :class:`tabdp.RandomSource` (default: secure), int seed or numpy Generator.

        Returns:
            float64 array of draws.

        Example:
            >>> from tabdp.noise import Laplace
            >>> Laplace(scale=1.0).sample(5, rng=0).shape
            (5,)
        """
        src: RandomSource = as_random_source(rng)
        u = src.uniform(size)
        return src.signs(np.shape(u)) * self._abs_isf(u)

    # -- exact rounding hooks (tabdp.noise.exact) ----------------------------------------------
    def _isf_rel_error(self, u: np.ndarray, m: np.ndarray) -> np.ndarray | float | None:
        """Relative error bound of ``_abs_isf(u) = m`` (default: the constant ``_isf_rtol``).

        Laws whose accuracy varies (e.g. with the magnitude of an exponent) override this and
        return an array. ``None`` means "no bound": every draw takes the high-precision path.
        """
        return self._isf_rtol

    def _isf_bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Float64 bounds ``lo <= m(u) <= hi`` for all ``u`` in ``[u_lo, u_hi]`` (exact m).

        ``m(u)`` is the exact magnitude with ``P(|Z| > m) = u``; it decreases in ``u``. The default
        evaluates ``_abs_isf`` once, at ``u_lo`` (the largest magnitude), widens it by twice the
        relative error bound, and bounds the decrease over the interval by the mean value theorem:
        ``m(u_lo) − m(u_hi) <= (u_hi − u_lo) / (2 f(hi))`` since the density ``f`` is
        non-increasing in ``|z|`` (every law here is unimodal) and ``|Z|`` has density ``2f``; a
        factor 2 of slack covers the float64 error of ``logpdf``. Cells whose bounds are not finite
        get ``(0, inf)`` and go to the exact path.

        Args:
            u_lo: Lower ends of the uniform intervals (float64, in [0, 1]).
            u_hi: Upper ends (``u_hi >= u_lo``).

        Returns:
            ``(lo, hi)`` float64 arrays.

        Example:
            >>> from tabdp.noise import StudentT
            >>> lo, hi = StudentT(df=3.0)._isf_bounds(np.array([0.1]), np.array([0.1 + 1e-16]))
            >>> bool(lo[0] <= float(StudentT(df=3.0)._abs_isf(np.array([0.1]))[0]) <= hi[0])
            True
        """
        u_lo = np.asarray(u_lo, dtype=np.float64)
        u_hi = np.asarray(u_hi, dtype=np.float64)
        if self._arb_certified:
            return self._certified_bounds(u_lo, u_hi)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            m = self._abs_isf(u_lo)
            rt = self._isf_rel_error(u_lo, m)
            if rt is None:
                return np.zeros_like(u_lo), np.full_like(u_lo, np.inf)
            w = 2.0 * np.asarray(rt, dtype=np.float64) + 4.0 * _U
            hi = m * (1.0 + w)
            dens = np.exp(self.logpdf(hi))
            lo = m * (1.0 - w) - (u_hi - u_lo) / dens * (1.0 + 8.0 * _U)
        ok = np.isfinite(hi) & np.isfinite(lo) & (w < 0.25)
        return np.where(ok, np.maximum(lo, 0.0), 0.0), np.where(ok, hi, np.inf)

    # -- certified tables (tabdp.noise._certified; docs/exact-rounding.md §4.5) -----------------
    def _arb_unit(self) -> float:
        """The scale that standardizes the law (``Z/unit`` has the tabulated shape)."""
        raise NotImplementedError  # pragma: no cover - only called when _arb_certified

    def _arb_key(self) -> tuple[Any, ...]:
        """Cache key of the standardized shape (law name and shape parameters)."""
        raise NotImplementedError  # pragma: no cover - only called when _arb_certified

    def _arb_kbits(self) -> int:
        """Certified-table nodes per binade, ``2**kbits``: 6, or 8 for very heavy tails.

        An ``m`` growing like ``u^{-k}`` with large k makes the ball remainders loose (docs §4.5).
        """
        return 6

    def _arb_nsub(self) -> int:
        """Sub-balls per node interval for the Taylor remainder.

        4; fewer where a density evaluation on a ball is costly and the remainder has room to
        spare (docs §4.5).
        """
        return 4

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        """Standardized two-sided tail ``P(|Z/unit| > x)`` on a python-flint ``arb_series``.

        With ``central``, ``1 −`` that, without cancellation. Correct on balls.
        """
        raise NotImplementedError  # pragma: no cover - only called when _arb_certified

    def _arb_density(self, xs: Any) -> Any:
        """Density of ``|Z/unit|`` (``−`` the derivative of :meth:`_arb_tail`) on an ``arb_series``.

        From elementary functions only: it is evaluated on wide balls.
        """
        raise NotImplementedError  # pragma: no cover - only called when _arb_certified

    def _arb_tail_available(self) -> bool:
        """Whether :meth:`_arb_tail` and :meth:`_arb_unit` exist.

        The exact path then evaluates tails in ball arithmetic (certified) instead of mpmath.
        """
        return self._arb_certified or self._arb_exact_tail

    def _certified_bounds(self, u_lo: np.ndarray,
                          u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Proven bounds from the law's certified table, times ``unit`` (rounded outwards)."""
        from tabdp.noise._certified import certified_table

        unit = self._arb_unit()
        tab = certified_table(self._arb_key(), self._arb_tail, self._arb_density,
                              lambda u: self._abs_isf(u) / unit, kbits=self._arb_kbits(),
                              nsub=self._arb_nsub(), persist=True)
        lo, hi = tab.bounds(u_lo.reshape(-1), u_hi.reshape(-1))
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            lo = np.maximum(lo * unit * (1.0 - 4.0 * _U) - 2.0**-1070, 0.0)
            hi = hi * unit * (1.0 + 4.0 * _U) + 2.0**-1070
        return lo.reshape(u_lo.shape), np.where(np.isnan(hi), np.inf, hi).reshape(u_lo.shape)

    def _isf_fine(self, u_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray | float]:
        """Fast-path bounds ``|m(u) − mid| <= rad`` for all u in ``[u_lo, u_lo + 2**-53]``.

        Called by :func:`tabdp.noise.exact.round_noisy` for almost every draw, with ``u_lo`` a
        multiple of ``2**-53`` in ``[2**-10, 1)`` (results for other ``u_lo`` are discarded).
        ``mid`` must be a new array (the caller overwrites it); ``rad`` may be an array or one
        float for all cells. The default converts :meth:`_isf_bounds` rigorously; laws override
        it with a cheaper bound (Gaussian, Laplace). It is used only when defined at least as
        deep in the class hierarchy as ``_isf_bounds``.

        Args:
            u_lo: Lower ends, multiples of ``2**-53`` in ``[2**-10, 1)``.

        Returns:
            ``(mid, rad)``.

        Example:
            >>> from tabdp.noise import StudentT
            >>> mid, rad = StudentT(df=3.0)._isf_fine(np.array([0.5]))
            >>> bool(0 < rad[0] < 1e-9 * mid[0])
            True
        """
        from tabdp.noise.exact import _mid_rad

        u_lo = np.asarray(u_lo, dtype=np.float64)
        return _mid_rad(*self._isf_bounds(u_lo, u_lo + 2.0**-53))

    def _mp_logpdf(self, x: Any, mp: Any) -> Any:
        """Exact log density at ``x`` in mpmath (optional hook used by the default ``_mp_sf``)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no high-precision tail: implement _mp_sf(x, mp) (or "
            "_mp_logpdf(x, mp)) to release it with exact rounding; see docs/exact-rounding.md.")

    def _mp_quad_points(self, x: Any, mp: Any) -> list[Any]:
        """Split points for quadrature of the tail beyond ``x``: float ``|Z|`` quantiles."""
        us = np.asarray([0.5, 1e-2, 1e-4, 1e-8, 1e-16, 1e-32, 1e-64, 1e-128, 1e-256])
        with np.errstate(all="ignore"):
            qs = self._abs_isf(us)
        pts = [x] + [mp.mpf(float(v)) for v in qs if np.isfinite(v) and mp.mpf(float(v)) > x]
        return [*sorted(set(pts)), mp.inf]

    def _mp_sf(self, x: Any, mp: Any) -> Any:
        """``P(Z > x)`` for ``x >= 0`` in working precision ``mp.prec`` (mpmath).

        The default integrates ``exp(_mp_logpdf)`` from ``x`` to infinity with ``mp.quad``, split
        at float quantiles of ``|Z|``. Laws with closed forms override it.

        Args:
            x: A non-negative ``mpf``.
            mp: The mpmath context (``mpmath.mp``).

        Returns:
            The tail probability as an ``mpf``.

        Example:
            >>> import mpmath
            >>> from tabdp.noise import Laplace
            >>> float(Laplace(scale=1.0)._mp_sf(mpmath.mpf(1), mpmath.mp))   # e^-1 / 2
            0.18393972058572117
        """
        self._mp_logpdf(x, mp)  # raises NotImplementedError when the law has no exact density
        return mp_quad_checked(lambda t: self._mp_logpdf(t, mp), self._mp_quad_points(x, mp), mp)

    def _mp_abs_isf(self, u: Any, mp: Any) -> Any:
        """The exact ``|Z|`` quantile ``m`` with ``P(|Z| > m) = u`` in working precision (mpmath).

        The default solves ``2·_mp_sf(m) = u`` by a bracketed Illinois (regula falsi) iteration on
        ``ln``-tails, started from the float64 quantile; laws with closed forms override it.

        Args:
            u: Two-sided tail mass in (0, 1], an ``mpf``.
            mp: The mpmath context.

        Returns:
            ``m`` as an ``mpf`` (relative accuracy about ``2**-(mp.prec - 8)``).

        Example:
            >>> import mpmath
            >>> from tabdp.noise import StudentT
            >>> m = StudentT(df=1.0)._mp_abs_isf(mpmath.mpf("0.5"), mpmath.mp)   # Cauchy: 1
            >>> abs(float(m) - 1.0) < 1e-12
            True
        """
        u = mp.mpf(u)
        if u >= 1:
            return mp.zero
        target = mp.log(u)

        def f(m: Any) -> Any:
            return mp.log(2 * self._mp_sf(m, mp)) - target

        with np.errstate(all="ignore"):
            g = float(self._abs_isf(np.asarray([max(float(u), 1e-308)]))[0])
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

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.params() == other.params()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.params().items()))))
