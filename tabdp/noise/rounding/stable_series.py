"""Certified SaS(α) density series and tails in Arb, 1 < α < 2 (docs/exact-rounding.md §4.6).

Standard law (γ = 1, characteristic function ``exp(−|t|^α)``): ``g = 2f`` is the density of
``|Z|``, ``T(x) = P(|Z| > x)`` and ``C(x) = 1 − T(x)``. Three representations, each with a
rigorous truncation bound, give Arb balls that contain the exact values (for every point of an
argument ball); the certified quantile tables (`tabdp.noise.rounding.certified`) and the
exact path use them. Float64 estimates only choose the representation, the number of terms and
the working precision; they never enter a bound.

* **Maclaurin** (``y = x²``, entire): ``g(x) = Σ_k A_k·y^k`` with
  ``A_k = (2/(πα))·(−1)^k·Γ((2k+1)/α)/(2k)!`` and ``C(x) = x·Σ_k A_k·y^k/(2k + 1)``. For
  ``k >= K`` the term ratio is at most ``q_K = (s_K + 1)^λ·Y/(α(2K + 2))`` on ``|z|² <= Y``
  (``s_K = (2K+1)/α``, ``λ = 2/α − 1``; Wendel's inequality ``Γ(s+λ)/Γ(s) <= s^λ``, and the
  bound decreases in K), so the tail is at most ``|A_K|·Y^K/(1 − q_K)``; Taylor coefficients of
  the tail by Cauchy's estimate on a disk of radius ``ρ``. The terms grow to ``2^S`` times the
  sum before they decrease (``S ≈ x^{α/(α−1)}`` bits): the working precision is raised by S.
* **Bergström** (``w = x^{−α}``): ``g(x) = x⁻¹·Σ_{n>=1} G_n·w^n`` with
  ``G_n = (2/π)·(−1)^{n+1}·Γ(αn+1)/n!·sin(παn/2)`` and ``T(x) = Σ_{n>=1} G_n·w^n/(αn)``.
  Divergent for α > 1, but its remainder is bounded: the Fourier integral
  ``f(z) = (1/2π)∫ e^{izt − |t|^α} dt`` rotated to the rays ``arg t = ±φ``, ``φ = π/(2α)``
  (where ``Re t^α >= 0``, so ``|e^{−v} − Σ_{n<N} (−v)^n/n!| <= |v|^N/N!``), gives
  ``|R_N^g(z)| <= 2Γ(αN+1)/(π·N!·D^{αN+1})`` for ``|z − x| <= ρ``, ``D = x·sin φ − ρ``, and, by
  integrating, ``|R_N^T(x)| <= 2Γ(αN)/(π·N!·sin φ·(x sin φ)^{αN})``.
* **Anchored Taylor** (α < 1.1 near x = 1, where neither converges usefully): ``g(c + s) =
  Σ_j a_j·s^j`` with ``a_j`` from the Maclaurin series (balls, with their truncation bounds) and
  ``|a_j| <= M/R^j``, ``M = (2/π)(e^R + e^{R−1}/(1 − R)) >= sup_{|Im z| <= R} |g(z)|``
  (``|g(z)| <= (2/π)∫₀^∞ e^{|Im z|·t − t^α} dt``, split at t = 1), R = 0.9; T by integrating
  from ``T(c)``.

Example:
    >>> from tabdp.noise.rounding.certified import arb_context
    >>> ev = StableArb(1.5)
    >>> with arb_context(120, 2) as flint:
    ...     t = ev.tail(flint.arb(1), central=False)
    >>> round(float(t.mid()), 12)                     # P(|Z| > 1) for SaS(1.5, 1)
    0.487315951201
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import gammaln

__all__ = ["StableArb", "register_float_estimates"]

#: ``alpha -> (log_g, log_t)``: float64 estimates of ``ln g`` and ``ln T`` of the standard law,
#: registered by :mod:`tabdp.noise.stable` (the law owns its float64 integrator; this module
#: never imports it, so the dependency goes one way: law -> rounding layer).
_FLOAT_ESTIMATES: Callable[[float], tuple[Callable[[float], float],
                                          Callable[[float], float]]] | None = None


def register_float_estimates(
        factory: Callable[[float], tuple[Callable[[float], float], Callable[[float], float]]]
) -> None:
    """Register the float64 ``(ln g, ln T)`` estimates used by default (planning only).

    Called once by `tabdp.noise.stable` at import. The estimates only choose the series,
    the number of terms and the working precision; they never enter a bound.

    Args:
        factory: ``alpha -> (log_g, log_t)``, functions of a float ``x > 0``.

    Example:
        >>> import tabdp.noise.stable                  # registers its estimates on import
        >>> _FLOAT_ESTIMATES is not None
        True
    """
    global _FLOAT_ESTIMATES
    _FLOAT_ESTIMATES = factory

_LN2 = math.log(2.0)
#: Budgets of the Maclaurin series (cancellation bits, terms) and of the Bergström series.
_MAC_BITS = 900
_MAC_TERMS = 5000
_BERG_TERMS = 5000
#: Cauchy radius for the Maclaurin coefficients' truncation bounds, and the anchors' radius.
_RHO_MAC = 0.25
_R_ANCHOR = 0.9
#: Reach of an anchor (|x − c| <= this; ratio 1/2 against R).
_ANCHOR_REACH = 0.45
#: Crude-bound radius for re-expanding Maclaurin coefficients over a wide ball.
_RHO_WIDE = 0.45
_K_ARR = np.arange(_MAC_TERMS, dtype=np.float64)
_N_ARR = np.arange(1, _BERG_TERMS, dtype=np.float64)


def _lg2(v: float) -> float:
    return math.lgamma(v) / _LN2


def _crude_m(y: float) -> float:
    """Upper bound (float, rounded up) of ``sup_{|Im z| <= y} |g(z)|`` for y < 1, any α >= 1."""
    return (2.0 / math.pi) * (math.exp(y) + math.exp(y - 1.0) / (1.0 - y)) * (1.0 + 2.0**-40)


class StableArb:
    """Ball-arithmetic evaluation of the standard SaS(α) ``g``, ``T`` and ``C`` (1 < α < 2).

    Args:
        alpha: Stability index in (1, 2).
        log_g: Float64 estimate of ``ln g(x)`` (planning only).
        log_t: Float64 estimate of ``ln T(x)`` (planning only).

    Methods take and return python-flint balls at the current precision (``flint.ctx.prec``),
    raising it internally where a series cancels; a result that cannot be certified to about
    that precision is a NaN ball (callers then fall back or fail the node).

    Example:
        >>> from tabdp.noise.rounding.certified import arb_context
        >>> ev = StableArb(1.5)
        >>> with arb_context(120, 3) as flint:
        ...     c = ev.density(flint.arb(2), 3)
        >>> [round(float(v.mid()), 10) for v in c]        # g(2 + t) = 2f(2 + t)
        [0.1690792463, -0.1684693913, 0.0754677704]
    """

    def __init__(self, alpha: float, log_g: Callable[[float], float] | None = None,
                 log_t: Callable[[float], float] | None = None) -> None:
        """Check ``alpha`` (1 < α < 2) and keep the optional float estimates of the law."""
        if not 1.0 < alpha < 2.0:
            raise ValueError(f"StableArb: alpha = {alpha!r} must be in (1, 2)")
        self.alpha = alpha
        self.lam = 2.0 / alpha - 1.0
        self.phi = math.pi / (2.0 * alpha)
        self.sinphi = math.sin(self.phi)
        if log_g is None or log_t is None:
            if _FLOAT_ESTIMATES is None:
                raise ValueError("StableArb: no float64 estimates registered; import "
                                 "tabdp.noise.stable or pass log_g and log_t")
            log_g, log_t = _FLOAT_ESTIMATES(alpha)
        self._log_g, self._log_t = log_g, log_t
        self._coef: dict[tuple[str, int], list[Any]] = {}
        self._polys: dict[tuple[str, int, int], Any] = {}
        self._plans: dict[tuple[Any, ...], Any] = {}
        self._floor: float | None = None
        self._anchor_c: float | None = None
        self._anchors: dict[int, tuple[Any, list[Any], Any, int]] = {}

    # -- float planning (memoized on x rounded to 1/32 binade: plans are heuristics) -----------
    @staticmethod
    def _key(x: float, up: bool) -> float:
        """X rounded to a 1/32-binade grid (up or down): the memo key of a plan."""
        if not 0 < x < math.inf:
            return x
        e = math.log2(x) * 32
        return 2.0 ** ((math.ceil(e) if up else math.floor(e)) / 32)

    def _memo(self, key: tuple[Any, ...], fn: Callable[[], Any]) -> Any:
        try:
            return self._plans[key]
        except KeyError:
            v = self._plans[key] = fn()
            return v

    def _l2g(self, x: float) -> float:
        xk = self._key(x, True)
        return self._memo(("g", xk), lambda: self._log_g(xk) / _LN2)

    def _l2t(self, x: float) -> float:
        xk = self._key(x, True)
        return self._memo(("t", xk), lambda: self._log_t(xk) / _LN2)

    def _l2c(self, x: float) -> float:
        xk = self._key(x, False)

        def f() -> float:
            lt = self._log_t(xk)
            if lt < 0:
                return math.log2(-math.expm1(lt))
            # T rounds to 1: C ≈ g(0)·x, g(0) = 2Γ(1/α)/(πα)
            return math.log2(2.0 * math.gamma(1.0 / self.alpha) / (math.pi * self.alpha) * xk)

        return self._memo(("c", xk), f)

    def _mac_plan(self, x: float, lv: float, p: int, n: int,
                  central: bool) -> tuple[int, int, float] | None:
        """(K, S, ρ) for the Maclaurin series at ``|z| <= x`` (value scale ``2**lv``), or None.

        ρ is the Cauchy radius of the truncation bound for n > 1 coefficients (0 for values).
        """
        a, lam = self.alpha, self.lam
        k = _K_ARR
        s = (2 * k + 1) / a
        lt = (math.log2(2.0 / (math.pi * a)) + (gammaln(s) - gammaln(2 * k + 1)) / _LN2
              - (np.log2(2 * k + 1) if central else 0.0))
        if central and x > 0:
            lt = lt + math.log2(x)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            lx0 = 2.0 * np.log2(x)
            grow = (s + 1.0) ** lam / (a * (2 * k + 2))
        for rho in ((_RHO_MAC, _RHO_MAC / 4, _RHO_MAC / 16) if n > 1 else (0.0,)):
            xr = x + rho
            ly = 2.0 * math.log2(xr)
            # coefficient j of the truncation is (tail)/rho**j; its scale about 2**lv/max(1,x)**j
            need = lv - p - 8.0
            if n > 1:
                need += (n - 1) * (math.log2(rho) - max(0.0, math.log2(max(x, 1e-300))))
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                q = grow * (xr * xr)
                ok = (k >= 1) & (q <= 0.97) & (lt + k * ly - np.log2(1.0 - q) <= need)
            hit = np.flatnonzero(ok)
            if not hit.size:
                continue
            kk = int(hit[0])
            big = float(np.max(lt[: kk + 1] + k[: kk + 1] * lx0)) if x > 0 else float(lt[0])
            if big - lv > _MAC_BITS:
                return None
            return kk, max(0, math.ceil(big - lv)), rho
        return None

    def _berg_plan(self, x: float, lv: float, p: int,
                   n: int) -> tuple[int, float, int] | None:
        """(N, ρ, S) for the Bergström series at x (a ball's lower end), or None.

        ``n = 0``: the tail T; otherwise n Taylor coefficients of g (Cauchy radius ρ).
        """
        a, sp = self.alpha, self.sinphi
        if not x > 0:
            return None
        lx = math.log2(x)
        c0 = math.log2(2.0 / math.pi)
        nn = _N_ARR
        with np.errstate(divide="ignore"):
            lsin = np.log2(np.abs(np.sin(np.pi * a * nn / 2.0)))
        if n == 0:
            terms = c0 + (gammaln(a * nn) - gammaln(nn + 1)) / _LN2 + lsin - a * nn * lx
        else:
            terms = c0 + (gammaln(a * nn + 1) - gammaln(nn + 1)) / _LN2 + lsin - (a * nn + 1) * lx
        best: tuple[int, float, int] | None = None
        for kap in ((0.0,) if n == 0 else (sp / 8, sp / 32, sp / 128)):
            need = lv - p - 8.0
            if n == 0:
                lb = (c0 + (gammaln(a * nn) - gammaln(nn + 1)) / _LN2 - math.log2(sp)
                      - a * nn * (lx + math.log2(sp)))
            else:
                ld = math.log2(x * sp - kap * x)
                lb = c0 + (gammaln(a * nn + 1) - gammaln(nn + 1)) / _LN2 - (a * nn + 1) * ld
                need += (n - 1) * math.log2(kap)                  # ρ^j against x^j
            hit = np.flatnonzero(lb <= need)
            if hit.size:
                big_n = int(nn[hit[0]])
                cancel = max(0, math.ceil(float(np.max(terms[: hit[0] + 1])) - lv))
                if best is None or big_n < best[0]:
                    best = (big_n, kap * x, cancel)
        return best

    def _berg_floor(self) -> float:
        """Below this x the Bergström series reaches not even 64 bits (a planning shortcut)."""
        if self._floor is None:
            x = 0.25
            while x < 1e6 and self._berg_plan(x, self._l2t(x), 64, 0) is None:
                x *= 2.0**0.125
            self._floor = x / 2.0**0.125
        return self._floor

    # -- cached coefficients -------------------------------------------------------------------
    def _coefs(self, kind: str, wp: int, count: int) -> list[Any]:
        """A_k (kind "A") or G_n (kind "G", index n − 1) at precision wp, at least ``count``."""
        from flint import arb

        key = (kind, wp)
        have = self._coef.setdefault(key, [])
        if len(have) >= count:
            return have
        a = arb(self.alpha)
        pi = arb.pi()
        for i in range(len(have), count):
            if kind == "A":
                s = (2 * i + 1) / a
                v = 2 / (pi * a) * s.gamma() / arb(2 * i + 1).gamma()
                have.append(-v if i % 2 else v)
            else:
                nn = i + 1
                v = 2 / pi * (a * nn + 1).gamma() / arb(nn + 1).gamma() * (a * nn / 2).sin_pi()
                have.append(v if nn % 2 else -v)
        return have

    def _poly(self, kind: str, wp: int, k: int) -> Any:
        """The truncated series as an ``arb_poly`` (cached).

        Kinds: "A" (g in y), "B" (C/x in y), "G" (x·g in w, no constant term), "H" (T in w).
        """
        from flint import arb, arb_poly

        key = (kind, wp, k)
        pol = self._polys.get(key)
        if pol is None:
            if kind in ("A", "B"):
                c = self._coefs("A", wp, k)[:k]
                if kind == "B":
                    c = [v / (2 * j + 1) for j, v in enumerate(c)]
            else:
                a = arb(self.alpha)
                c = self._coefs("G", wp, k)[: k - 1]
                if kind == "H":
                    c = [g / (a * (j + 1)) for j, g in enumerate(c)]
                c = [arb(0), *c]                               # G_n multiplies w^n, n >= 1
            pol = self._polys[key] = arb_poly(c)
        return pol

    @staticmethod
    def _taylor_at(pol: Any, z0: Any, n: int) -> list[Any]:
        """``[P(z0), P′(z0), …, P^{(n−1)}(z0)/(n−1)!]`` by repeated synthetic division."""
        from flint import arb, arb_poly

        lin = arb_poly([-z0, 1])
        out = []
        for _ in range(n):
            pol, r = divmod(pol, lin)
            rc = r.coeffs()
            out.append(rc[0] if rc else arb(0))
        return out

    # -- Taylor composition --------------------------------------------------------------------
    @staticmethod
    def _compose(d: list[Any], inner: list[Any], n: int) -> list[Any]:
        """Coefficients of ``Σ_i d_i·h(t)^i`` (n of them) for ``h = inner[0]·t + inner[1]·t² …``."""
        from flint import arb, arb_series

        if n == 1:
            return [d[0]]
        res = arb_series(d[:n], prec=n)(arb_series([arb(0), *inner[: n - 1]], prec=n))
        if res.prec < n:        # truncated by python-flint's global cap: never pad (unsound)
            raise ValueError("series truncated by flint.ctx.cap")
        ser = res.coeffs()
        return (ser + [arb(0)] * n)[:n]

    # -- Maclaurin -----------------------------------------------------------------------------
    def _mac_tail_bound(self, wp: int, k: int, ysq: Any) -> Any:
        """``|A_K|·Y^K/(1 − q_K)``: the Maclaurin tail on ``|z|² <= Y`` (upper arb, or inf)."""
        from flint import arb

        a = arb(self.alpha)
        s = (2 * k + 1) / a
        q = (s + 1) ** (2 / a - 1) * ysq / (a * (2 * k + 2))           # λ = 2/α − 1 in Arb
        if not q < 1:
            return arb("inf")
        return abs(self._coefs("A", wp, k + 1)[k]) * ysq**k / (1 - q)

    def _mac(self, x: Any, n: int, central: bool, p: int) -> list[Any] | None:
        """Maclaurin: the first n coefficients of g(x + t), or ``[C(x)]`` with ``central``."""
        import flint
        from flint import arb

        xh = float(abs(x).upper())
        if not xh > 0:
            return None
        xk = self._key(xh, True)                         # plan for a slightly larger |x|
        lv = self._l2c(xh) if central else self._l2g(xh)
        plan = self._memo(("mac", xk, p, n, central),
                          lambda: self._mac_plan(xk, lv, p, n, central))
        if plan is None:
            return None
        k, s, rho_f = plan
        k = 1 << max(6, k.bit_length())                  # power of two: shared polynomials
        wp = 64 * ((p + s + 96) // 64 + 1)
        old = flint.ctx.prec
        flint.ctx.prec = wp
        try:
            xb = arb(x)
            xm = arb(abs(x).upper())
            y0 = xb * xb
            if central:
                # C(x) = x·Σ A_k y^k/(2k+1) (the integral of g); B_k/B_{k-1} <= the A ratio
                pol = self._poly("B", wp, k)
                tb = self._mac_tail_bound(wp, k, xm * xm) * xm / (2 * k + 1)
                if not tb.is_finite():
                    return None
                return [xb * pol(y0) + arb(0, tb.upper())]
            d = self._taylor_at(self._poly("A", wp, k), y0, n)
            ser = self._compose(d, [2 * xb, arb(1)], n)          # y(x + t) − y(x) = 2xt + t²
            rho = arb(rho_f) if n > 1 else arb(1)
            tb = self._mac_tail_bound(wp, k, (xm + rho) ** 2 if n > 1 else xm * xm)
            if not tb.is_finite():
                return None
            return [v + arb(0, (tb / rho**i).upper()) for i, v in enumerate(ser)]
        finally:
            flint.ctx.prec = old

    def _berg_disk_bound(self, xc: float, rad: float) -> float | None:
        """An upper bound of ``|g(z)|`` on ``|z − xc| <= rad`` from the Bergström series.

        ``Σ_{n<N} |G_n|·(xc − rad)^{−αn−1}`` plus the remainder bound with
        ``D = xc·sin φ − rad`` (module docstring), evaluated in Arb and rounded up; None where
        that is not finite or D <= 0.
        """
        import flint
        from flint import arb

        if not xc * self.sinphi - rad > 0:
            return None
        a = self.alpha
        nn = _N_ARR[:400]
        d_f = xc * self.sinphi - rad
        lb = (gammaln(a * nn + 1) - gammaln(nn + 1)) / _LN2 - (a * nn + 1) * math.log2(d_f)
        big_n = int(nn[int(np.argmin(lb))])
        old = flint.ctx.prec
        flint.ctx.prec = 64
        try:
            aa = arb(a)
            pi = arb.pi()
            d = arb(xc) * (pi / (2 * aa)).sin() - arb(rad)
            y = arb(xc) - arb(rad)
            if not (d > 0 and y > 0):
                return None
            d, y = arb(d.lower()), arb(y.lower())          # smaller D and |z| bound more
            tot = arb(0)
            for k in range(1, big_n):
                tot += abs(2 / pi * (aa * k + 1).gamma() / arb(k + 1).gamma()
                           * (aa * k / 2).sin_pi()) * y ** (-(aa * k) - 1)
            kk = arb(big_n)
            tot += 2 * (aa * kk + 1).gamma() / (pi * (kk + 1).gamma() * d ** (aa * kk + 1))
            v = float(tot.upper())
        finally:
            flint.ctx.prec = old
        return v * (1 + 2.0**-40) if math.isfinite(v) else None

    def _wide(self, x: Any, n: int, p: int) -> list[Any] | None:
        """Coefficients of g over a ball ``[x_c ± r]``, re-expanded from its exact centre.

        Direct evaluation on a ball would multiply the Maclaurin series' cancellation (2**S), or
        the slow decay of the other series near their limits, by the ball's width. Instead the
        first L coefficients ``d_j`` at the centre (exact point) are computed and
        ``Σ_{j<L} d_j·C(j, i)·δ^{j−i}`` is evaluated on ``δ ∈ [−r, r]``; the rest is at most
        ``M·C(L, i)·r^{L−i}/R^L/(1 − q)`` with ``|d_j| <= M/R^j`` (Cauchy on ``|z − x_c| <= R``)
        and ``q = (L + 1)/(L + 1 − i)·r/R`` dominating the ratio of consecutive terms. (R, M):
        (0.45, the crude bound of the module docstring) or (x_c·sin φ/4, the Bergström series'
        absolute sum plus its remainder), whichever needs fewer terms.
        """
        import flint
        from flint import arb, arb_poly

        r = float(x.rad()) * (1 + 2.0**-40)
        xc = float(x.mid())
        if not (r > 0 and xc > 0):
            return None
        xm = max(xc, 1.0)
        lg = self._l2g(float(x.upper()))
        # the ball spreads the values by about r/x: aim 10 bits below that (p for narrow balls)
        bits = min(p, math.ceil(-math.log2(r / xm)) + 10)
        pw = min(p, bits + 40)
        cands = [(_RHO_WIDE, _crude_m(_RHO_WIDE))]
        # per 1/32-binade bin [x_k, x_k·2^(1/32)) holding the centre: R = x_k·sin φ/4, and M on
        # the disk of centre x_k and radius R + 1.01·(bin width), which contains |z − x_c| <= R
        xk = self._key(xc, False)
        if xk <= xc < xk * 2.0 ** (1 / 32):
            rb = xk * self.sinphi / 4
            mb = self._memo(("disk", xk), lambda: self._berg_disk_bound(
                xk, rb + 1.01 * xk * (2.0 ** (1 / 32) - 1)))
            if mb is not None:
                cands.append((rb, mb))
        best: tuple[int, float, float] | None = None
        for rw, m in cands:
            if not r < rw / 3:
                continue
            big_l = n + 2
            while big_l < 300:
                tail = (math.log2(m) + (big_l - n + 1) * math.log2(r / rw)
                        - (n - 1) * math.log2(rw) + math.log2(math.comb(big_l, n - 1) + 1) + 1)
                if tail <= lg - (n - 1) * math.log2(xm) - bits:
                    break
                big_l += 2
            if big_l < 300 and (best is None or big_l < best[0]):
                best = (big_l, rw, m)
        if best is None:
            return None
        big_l, rw, m = best
        old, oldcap = flint.ctx.prec, flint.ctx.cap
        flint.ctx.cap = max(oldcap, big_l + 2)
        try:
            flint.ctx.prec = pw
            d = self._point_density(arb(x.mid()), big_l, pw)
            flint.ctx.prec = old
            if d is None:
                return None
            shifted = self._taylor_at(arb_poly(d), arb(0, r), n)    # Σ_j d_j·C(j, i)·δ^{j−i}
            out = []
            for i in range(n):
                q = (big_l + 1) / (big_l + 1 - i) * r / rw
                if not q < 1:
                    return None
                # in Arb (upper end): r**L and rw**L leave the double range far in the tail
                e = (arb(m) * math.comb(big_l, i) * arb(r) ** (big_l - i) / arb(rw) ** big_l
                     / (1 - arb(q) * (1 + arb(2) ** -40)))
                out.append(shifted[i] + arb(0, e.upper()))
            return out
        finally:
            flint.ctx.prec, flint.ctx.cap = old, oldcap

    # -- Bergström -----------------------------------------------------------------------------
    def _berg(self, x: Any, n: int, p: int) -> list[Any] | None:
        """Bergström: the first n coefficients of g(x + t) (n >= 1), or ``[T(x)]`` (n = 0)."""
        import flint
        from flint import arb, arb_series

        xl = float(x.lower())
        if not xl >= self._berg_floor():
            return None
        xk = self._key(xl, False)                        # plan for a slightly smaller x
        lv = self._l2t(xl) if n == 0 else self._l2g(float(x.upper()))
        plan = self._memo(("berg", xk, p, n), lambda: self._berg_plan(xk, lv, p, n))
        if plan is not None and n > 0:
            plan = (plan[0], plan[1] / xk * xl, plan[2])  # ρ = κ·x for this ball
        if plan is None:
            return None
        nn, rho_f, cancel = plan
        kp = 1 << max(5, nn.bit_length())                  # the cached polynomial's length
        k = nn                                             # terms n = 1 … N − 1, bound at N
        old = flint.ctx.prec
        wp = 64 * ((p + cancel + 64) // 64 + 1)
        flint.ctx.prec = wp
        try:
            a = arb(self.alpha)
            pi = arb.pi()
            sp = (pi / (2 * a)).sin()
            xlo = arb(x.lower())
            kk = arb(k)
            if n == 0:
                pol = self._poly("H", wp, kp).truncate(k)
                bound = (2 * (a * kk).gamma()
                         / (pi * (kk + 1).gamma() * sp * (xlo * sp) ** (a * kk)))
                return [pol(arb(x) ** (-a)) + arb(0, bound.upper())]
            wser = arb_series([arb(x), 1], prec=n) ** (-a)
            if wser.prec < n:
                raise ValueError("series truncated by flint.ctx.cap")
            ws = (wser.coeffs() + [arb(0)] * n)[:n]
            d = self._taylor_at(self._poly("G", wp, kp).truncate(k), ws[0], n)
            ser = self._compose(d, ws[1:], n)
            prod = arb_series(ser, prec=n) / arb_series([arb(x), 1], prec=n)
            if prod.prec < n:
                raise ValueError("series truncated by flint.ctx.cap")
            ser = (prod.coeffs() + [arb(0)] * n)[:n]
            rho = arb(rho_f)
            dd = xlo * sp - rho
            if not dd > 0:
                return None
            bound = 2 * (a * kk + 1).gamma() / (pi * (kk + 1).gamma() * dd ** (a * kk + 1))
            return [v + arb(0, (bound / rho**i if i else bound).upper())
                    for i, v in enumerate(ser)]
        finally:
            flint.ctx.prec = old

    # -- anchored Taylor series ----------------------------------------------------------------
    def _anchor_center(self) -> float:
        """The anchor c: 0.9 times the largest x (step 0.01) where the Maclaurin series is cheap."""
        if self._anchor_c is None:
            x = 0.3
            while x < 60.0:
                if self._mac_plan(x + 0.01, self._l2g(x + 0.01), 400, 1, False) is None:
                    break
                x += 0.01
            self._anchor_c = round(0.9 * x, 2)
        return self._anchor_c

    def _anchor(self, p: int) -> tuple[Any, list[Any], Any, int] | None:
        """(c, [a_j], C(c), J) at the working precision for target p (cached)."""
        import flint
        from flint import arb, arb_poly

        wp = 64 * ((p + 160) // 64 + 1)
        got = self._anchors.get(wp)
        if got is not None:
            return got
        c = self._anchor_center()
        lv = self._l2g(c)
        m = _crude_m(_R_ANCHOR)
        # J: M·(1/2)^J relative to g(c), plus 14 derivative orders
        big_j = int(math.ceil(p + math.log2(m) - lv)) + 40
        old, oldcap = flint.ctx.prec, flint.ctx.cap
        flint.ctx.prec, flint.ctx.cap = wp, max(oldcap, big_j + 2)
        try:
            cb = arb(c)
            # Maclaurin terms A_k·C(2k, j)·c^(2k−j) for j < J: K from the ratio test per j
            k = 64
            while True:
                plan_ok = self._anchor_k_ok(c, k, big_j, wp, lv)
                if plan_ok or k > 1 << 15:
                    break
                k *= 2
            if not plan_ok:
                return None
            coefs = self._coefs("A", wp, k)[:k]
            pol = arb_poly(coefs)
            shifted = pol(arb_poly([cb * cb, 2 * cb, 1])).coeffs()[:big_j]
            shifted = (shifted + [arb(0)] * big_j)[:big_j]
            a_err = self._anchor_k_err(cb, k, big_j, wp)
            if a_err is None:
                return None
            aj = [v + arb(0, e.upper()) for v, e in zip(shifted, a_err, strict=True)]
            cc = self._mac(cb, 1, True, wp - 32)
            if cc is None:
                return None
            got = (cb, aj, cc[0], big_j)
        finally:
            flint.ctx.prec, flint.ctx.cap = old, oldcap
        self._anchors[wp] = got
        return got

    def _anchor_k_ok(self, c: float, k: int, big_j: int, wp: int, lv: float) -> bool:
        a, lam = self.alpha, self.lam
        s = (2 * k + 1) / a
        for j in (0, big_j // 2, big_j - 1):
            if 2 * k + 1 - j <= 0:
                return False
            q = ((s + 1.0) ** lam * c * c / (a * (2 * k + 2))
                 * (2 * k + 2) * (2 * k + 1) / ((2 * k + 2 - j) * (2 * k + 1 - j)))
            if not q < 0.97:
                return False
            lt = (math.log2(2 / (math.pi * a)) + _lg2(s) - _lg2(2 * k + 1)
                  + math.log2(math.comb(2 * k, j)) + (2 * k - j) * math.log2(c))
            if lt - math.log2(1 - q) > lv - wp - 40 - j * math.log2(_R_ANCHOR):
                return False
        return True

    def _anchor_k_err(self, cb: Any, k: int, big_j: int, wp: int) -> list[Any] | None:
        """Truncation bounds of the anchor coefficients a_j, j < J (ratio test per j)."""
        from flint import arb

        a = arb(self.alpha)
        s = (2 * k + 1) / a
        base = (s + 1) ** (2 / a - 1) * cb * cb / (a * (2 * k + 2))
        ak = abs(self._coefs("A", wp, k + 1)[k])
        out = []
        for j in range(big_j):
            if 2 * k + 1 - j <= 0:
                return None
            q = base * (2 * k + 2) * (2 * k + 1) / ((2 * k + 2 - j) * (2 * k + 1 - j))
            if not q < 1:
                return None
            out.append(ak * math.comb(2 * k, j) * cb ** (2 * k - j) / (1 - q))
        return out

    def _anch(self, x: Any, n: int, p: int, central: bool) -> list[Any] | None:
        """Anchored Taylor: coefficients of g(x + t), or [T(x)] / [C(x)] with n = 0."""
        import flint
        from flint import arb

        c = self._anchor_center()
        if not (abs(float(x.lower()) - c) <= _ANCHOR_REACH
                and abs(float(x.upper()) - c) <= _ANCHOR_REACH):
            return None
        got = self._anchor(p)
        if got is None:
            return None
        cb, aj, cc, big_j = got
        from flint import arb_poly

        old, oldcap = flint.ctx.prec, flint.ctx.cap
        flint.ctx.prec, flint.ctx.cap = 64 * ((p + 96) // 64 + 1), max(oldcap, big_j + 2)
        try:
            # all bounds in Arb (upper ends): ratio**J underflows double for J > 1000
            s = arb(x) - cb
            r0 = arb(abs(s).upper())                        # >= |x − c| on the whole ball
            m = arb(_crude_m(_R_ANCHOR))
            big_r = arb(_R_ANCHOR)
            ratio = r0 / big_r
            if not ratio < 1:
                return None
            if n == 0:
                integ = arb_poly([arb(0)] + [v / (j + 1) for j, v in enumerate(aj)])
                e = m * r0 * ratio**big_j / ((big_j + 1) * (1 - ratio))
                v = integ(s) + arb(0, e.upper())
                # T(x) = T(c) − ∫_c^x g = 1 − C(c) − ∫;  C(x) = C(c) + ∫
                return [cc + v] if central else [1 - cc - v]
            ser = self._taylor_at(arb_poly(aj), s, n)
            out = []
            for i in range(n):
                q = arb(big_j + 1) / (big_j + 1 - i) * ratio
                if not q < 1:
                    return None
                e = m * math.comb(big_j, i) * r0 ** (big_j - i) / big_r**big_j / (1 - q)
                out.append(ser[i] + arb(0, e.upper()))
            return out
        finally:
            flint.ctx.prec, flint.ctx.cap = old, oldcap

    # -- public --------------------------------------------------------------------------------
    def density(self, x: Any, n: int) -> list[Any]:
        """The first n Taylor coefficients of ``g`` at every point of the ball ``x > 0``.

        Example:
            >>> from tabdp.noise.rounding.certified import arb_context
            >>> with arb_context(100, 1) as flint:
            ...     g0 = StableArb(1.5).density(flint.arb(0.5), 1)[0]
            >>> round(float(g0.mid()), 12)                     # 2·f(0.5)
            0.524593680708
        """
        from flint import arb, ctx

        p = ctx.prec
        if not x > 0:
            return [arb("nan")] * n
        # the series are evaluated at exact points only: on a ball (even of radius 2**-150) the
        # Maclaurin series' cancellation, or the others' slow decay near their limits, would
        # amplify the radius; balls are re-expanded from their centre (_wide)
        out = self._point_density(x, n, p) if x.rad() == 0 else self._wide(x, n, p)
        return out if out is not None else [arb("nan")] * n

    def _point_density(self, x: Any, n: int, p: int) -> list[Any] | None:
        """Coefficients of g at an exact point: Bergström, else Maclaurin, else the anchor."""
        for method in ("berg", "mac", "anch"):
            if method == "berg":
                out = self._berg(x, n, p)
            elif method == "mac":
                out = self._mac(x, n, False, p)
            else:
                out = self._anch(x, n, p, False)
            # a finite but loose value (e.g. the anchor far above the tables' precision) is not
            # taken: the next method, or None (the exact path then falls back to mpmath)
            if (out is not None and all(v.is_finite() for v in out)
                    and _accurate(out[0], p, x)):
                return out
        return None

    def tail(self, x: Any, central: bool) -> Any:
        """``T(x)`` (``C(x) = 1 − T(x)`` with ``central``) at every point of the ball ``x > 0``.

        A wide ball is handled by monotonicity (T decreases): the hull of the end values.

        Example:
            >>> from tabdp.noise.rounding.certified import arb_context
            >>> with arb_context(100, 1) as flint:
            ...     c = StableArb(1.5).tail(flint.arb(0.5), central=True)
            >>> round(float(c.mid()), 12)                      # P(|Z| <= 0.5)
            0.278808452963
        """
        from flint import arb, ctx

        p = ctx.prec
        if not x > 0:
            return arb("nan")
        if float(x.rad()) > float(abs(x.mid())) * 2.0**-(p // 2):
            lo, hi = self.tail(arb(x.lower()), central), self.tail(arb(x.upper()), central)
            return lo.union(hi)
        t = self._tail_point(x, central, p)
        return t if t is not None else arb("nan")

    def _tail_point(self, x: Any, central: bool, p: int) -> Any | None:
        from flint import arb

        xf = float(x.mid())
        # Bergström (T directly): preferred where it converges; C = 1 − T there (T < 1/2)
        got = self._berg(x, 0, p)
        if got is not None and got[0].is_finite():
            t = got[0]
            out = 1 - t if central else t
            if _accurate(out, p, x):
                return out
        # Maclaurin (C directly): T = 1 − C needs −log2 T more bits
        lt = self._l2t(xf)
        extra = 0 if central else max(0, int(math.ceil(-lt)) + 8)
        if x.rad() == 0:
            got = self._mac(x, 1, True, p + extra)
        else:                                   # C increases: the hull of its end values
            lo = self._mac(arb(x.lower()), 1, True, p + extra)
            hi = self._mac(arb(x.upper()), 1, True, p + extra)
            got = None if lo is None or hi is None else [lo[0].union(hi[0])]
        if got is not None and got[0].is_finite():
            out = got[0] if central else 1 - got[0]
            if _accurate(out, p, x):
                return out
        got = self._anch(x, 0, p + extra, central)
        if got is not None and got[0].is_finite() and _accurate(got[0], p, x):
            return got[0]
        return None


def _accurate(v: Any, p: int, x: Any = None) -> bool:
    """Whether a result ball is accurate enough to be taken at target precision p.

    It must keep ``p − 64`` bits (16 at least), or as many as its argument ball allows
    (a root ball of radius 2⁻¹⁵⁰ cannot give more), less 64.
    """
    need = max(16, p - 64)
    if x is not None and x.rad() != 0:
        need = min(need, max(16, x.rel_accuracy_bits() - 64))
    return bool(v.rel_accuracy_bits() >= need)
