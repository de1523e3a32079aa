"""Certified float64 quantile tables: proven bounds from Arb ball arithmetic (exact-rounding §4.5).

For a symmetric law whose standardized two-sided tail ``T(x) = P(|Z| > x)`` can be evaluated in
Arb ball arithmetic (python-flint) as a power series, `CertifiedIsf` gives float64 bounds
``lo <= m(u) <= hi`` on the exact quantile ``m = T⁻¹`` that are **proven**, whatever the accuracy
of the law's float64 special functions (which only supply starting guesses):

* Nodes: ``u_j = 2**e·(1 + j·2**-K)`` for ``u < 1/2`` (region A, binades ``e`` in ``[-64, -1)``)
  and ``v_j = 2**e·(1 + j·2**-K)`` with ``v = 1 − u`` for ``u >= 1/2`` (region B, binades
  ``[-53, 0)``; ``1 − u`` is exact there, and the small-``v`` binades resolve the centre, where
  laws with a cusp at 0 have unbounded derivatives).
* Node values: ``x_j = m(u_j)`` is enclosed by interval Newton in Arb: a ball ``X`` with
  ``x − (T(x) − u_j)/T′(X) ⊆ X`` contains the unique root (``T′ = −2f < 0``).
* Coefficients: the Taylor series of ``m`` at the node is the series reversion of
  ``T(x_j + t) − T(x_j)``, evaluated with the ball ``x_j``: ``a_n ∋ m⁽ⁿ⁾(u_j)/n!``.
* Remainder: the same reversion evaluated on the ball ``X_j ⊇ [x_{j+1}, x_j]`` (the whole node
  interval's image) encloses ``m⁽ᵈ⁺¹⁾(u)/(d + 1)!`` for **every** u of the interval, since Arb's
  operations are inclusion-monotone; so ``|m(u) − T_d(t)| <= sup|a_{d+1}(X_j)|·hᵈ⁺¹``.
* Float64: ``ã_n`` = the ball's midpoint rounded to double; the rounding and the ball radii are
  added to the remainder. Coefficients are stored scaled, ``b_n = a_n·hⁿ``, and evaluated in
  the exact ``τ = t/h`` (``t = u − u_j`` or ``v − v_j``); Horner's rule errs by at most
  ``γ_{2d}·Σ|b_n|τⁿ`` (Higham eq. 5.3); ``64u·Σ|b_n|`` covers it and the final roundings, and
  is added to the node's stored bound ``rem_j`` (docs/exact-rounding.md §4.5).

Nothing is trusted but IEEE arithmetic and Arb's ball semantics (its enclosures are proofs);
a node whose root cannot be certified gives an infinite remainder: its cells go to the exact
path. Tables are built one binade at a time on first use and shared by all laws with the same
shape (cached by key).

Example:
    >>> tab = CertifiedIsf(("laplace",), _laplace_tail, _laplace_density, _laplace_guess)
    >>> lo, hi = tab.point_bounds(np.array([0.25, 0.75]))
    >>> bool(lo[0] <= np.log(4.0) <= hi[0]) and bool(lo[1] <= -np.log(0.75) <= hi[1])
    True
    >>> bool(np.all(hi - lo < 1e-12)), tab.failures
    (True, 0)
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import numpy as np

from tabdp import _cache
from tabdp.noise.rounding._core import QuantileBounds

__all__ = ["CertifiedIsf", "certified_table", "arb_context", "arb_point_tail", "NodeRegion",
           "CertifiedBounds", "ArbShape"]

_U = 2.0**-53
#: Working precision of the table builds (bits).
_PREC = 160
#: Binades: region A (u < 1/2) and region B (v = 1 − u <= 1/2).
_A_SPEC = (-64, -1)
_B_SPEC = (-53, 0)
_LOCK = threading.RLock()


@contextlib.contextmanager
def arb_context(prec: int, cap: int) -> Iterator[Any]:
    """Set python-flint's global precision and series length, restoring them afterwards.

    Example:
        >>> with arb_context(100, 3) as flint:
        ...     flint.ctx.prec
        100
    """
    import flint

    with _LOCK:
        old = flint.ctx.prec, flint.ctx.cap
        flint.ctx.prec, flint.ctx.cap = prec, cap
        try:
            yield flint
        finally:
            flint.ctx.prec, flint.ctx.cap = old


def arb_point_tail(tail: Callable[..., Any], x: Any, central: bool = False) -> Any:
    """``T(x)`` (or ``1 − T(x)`` with ``central``) as an ``arb`` ball, at the current precision.

    Example:
        >>> with arb_context(80, 1) as flint:
        ...     t = arb_point_tail(_laplace_tail, flint.arb(1))
        >>> abs(float(t.mid()) - math.exp(-1)) < 1e-15
        True
    """
    from flint import arb_series, ctx

    def form(central_: bool) -> Any:
        try:
            c = tail(arb_series([x]), central_).coeffs()
        except (ValueError, ZeroDivisionError):
            c = []
        return c[0] if c else type(x)("nan")

    t = form(central)
    # A form can lose most of its bits where its value is not small (e.g. I_v(a, b) at the
    # median, v within 1e-45 of 1, for a beta law with tiny b): then one minus the other form is
    # used if it is tighter (both are enclosures). Small values are left alone: their other form
    # would cancel, and may be slow (I_w near w = 1).
    if not t.is_finite() or (abs(t) > 2.0**-8
                             and t.rel_accuracy_bits() < min(96, ctx.prec - 32)):
        other = 1 - form(not central)
        if other.is_finite() and (not t.is_finite() or other.rad() < t.rad()):
            t = other
    return t


def _upper_float(b: Any) -> float:
    """A float64 >= every point of the ball ``b`` (``inf`` if it is not finite)."""
    if not b.is_finite():
        return math.inf
    v = float(b.upper())
    return v + abs(v) * 2.0**-50 + 2.0**-1070


class NodeRegion:
    """Node coefficients on binary nodes ``2**e·(1 + j·2**-K)``, ``e_lo <= e < e_hi``, ``j < 2**K``.

    One region of a `CertifiedIsf` (A: variable u, B: variable v = 1 − u); also the layout
    of the Gaussian's Taylor tables (``tabdp.noise.gaussian``).
    """

    def __init__(self, e_lo: int, e_hi: int, kbits: int, degree: int) -> None:
        """Lay out the nodes of binades ``e_lo..e_hi`` (``2**kbits`` per binade)."""
        self.e_lo, self.e_hi, self.kbits, self.degree = e_lo, e_hi, kbits, degree
        per = 1 << kbits
        size = (e_hi - e_lo) * per
        self.shift = 52 - kbits
        self.off = (1023 + e_lo) << kbits
        self.mask = np.int64(-(1 << self.shift))
        self.coef = np.zeros((degree + 1, size))
        self.rem = np.full(size, np.inf)
        self.built = np.zeros(e_hi - e_lo, dtype=bool)
        #: per binade: 1/h = 2**(K − e), exact; scaled offsets τ = t/h lie in [0, 1)
        self.inv_h = np.ldexp(1.0, kbits - np.arange(e_lo, e_hi))

    def locate(self, w: np.ndarray, clip: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Node indices and exact offsets ``t = w − w_j`` for positive doubles ``w`` in range.

        ``w_j`` is ``w`` with its low ``52 − K`` significand bits cleared, so ``w_j <= w < 2w_j``
        and ``t`` is exact (Sterbenz). With ``clip`` the indices are clipped into the table (for
        w out of range, whose results the caller discards).
        """
        bits = np.ascontiguousarray(w, dtype=np.float64).view(np.int64)
        idx = np.right_shift(bits, self.shift) - self.off
        if clip:
            np.clip(idx, 0, self.rem.size - 1, out=idx)
        t = np.bitwise_and(bits, self.mask).view(np.float64)
        return idx, np.subtract(w, t)

    def evaluate(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(value, bound)``: ``|m − value| <= bound`` at each w (built binades only).

        ``value`` is Horner's rule on the node's scaled coefficients ``b_n = a_n·hⁿ`` in the
        exact ``τ = t/h ∈ [0, 1)`` (a power-of-two scaling: the coefficients of m in u grow like
        ``u⁻ⁿ`` and would overflow far in the tail); ``bound`` is the node's ``rem`` (Taylor
        remainder, coefficient balls and roundings, plus the Horner error bound ``64u·Σ|b_n|``,
        all rounded up when the binade was built).
        """
        idx, t = self.locate(w)
        t *= self.inv_h[idx >> self.kbits]
        d = self.degree
        coef = self.coef
        val = coef[d, idx]
        for n in range(d - 1, -1, -1):
            val *= t
            val += coef[n, idx]
        return val, self.rem[idx]


class CertifiedIsf:
    """Proven float64 bounds on the quantile ``m(u) = T⁻¹(u)`` of a standardized law.

    Args:
        key: Cache key (law and shape parameters).
        tail: ``tail(xs, central)``: on a python-flint ``arb_series``, the two-sided tail
            ``T(x) = P(|Z| > x)`` of the standardized law (``x > 0``), or ``1 − T(x)`` when
            ``central`` is true (computed without cancellation), correct on balls.
        density: The density ``−T′`` of ``|Z|`` on ``arb_series`` (elementary functions only:
            it is evaluated on wide balls for the remainder bounds).
        guess: Float64 approximation of ``m(u)`` (only a starting point; may be inaccurate).
        kbits: Nodes per binade ``2**kbits``.
        degree: Taylor degree d.

    Example:
        >>> tab = CertifiedIsf(("laplace",), _laplace_tail, _laplace_density, _laplace_guess)
        >>> lo, hi = tab.bounds(np.array([0.5]), np.array([0.5 + 2**-53]))
        >>> bool(lo[0] <= math.log(2.0) <= hi[0] and hi[0] - lo[0] < 1e-12)
        True
    """

    def __init__(self, key: Hashable, tail: Callable[[Any], Any], density: Callable[[Any], Any],
                 guess: Callable[[np.ndarray], np.ndarray], kbits: int = 6,
                 degree: int = 12, nsub: int = 4) -> None:
        """Keep the law's shape functions; the table is built (or loaded) on first use."""
        self.key, self.tail, self.density, self.guess = key, tail, density, guess
        self.nsub = nsub
        self.kbits, self.degree = kbits, degree
        self.regions = {"A": NodeRegion(*_A_SPEC, kbits, degree),
                        "B": NodeRegion(*_B_SPEC, kbits, degree)}
        #: nodes whose root could not be certified (their pieces decide nothing)
        self.failures = 0
        #: whether binades go through the on-disk cache (:mod:`tabdp._cache`): set for the laws'
        #: own tables (:func:`certified_table` with ``persist``), whose key determines the law
        self.persist = False

    # -- the on-disk cache (docs/exact-rounding.md §4.7) -----------------------------------------
    def _cache_params(self, name: str, b: int) -> dict[str, Any]:
        reg = self.regions[name]
        key = self.key if isinstance(self.key, tuple) else (self.key,)
        return {"table": "certified", "key": [v if isinstance(v, (str, int, float, bool)) else
                                              repr(v) for v in key],
                "region": name, "spec": [reg.e_lo, reg.e_hi, reg.kbits, reg.degree],
                "nsub": self.nsub, "prec": _PREC, "binade": b, "env": _cache.build_env()}

    def _fill(self, name: str, b: int) -> None:
        """Binade ``b`` of region ``name`` from the disk cache if verified, else built (stored)."""
        if not self.persist:
            self._build(name, b)
            return
        reg = self.regions[name]
        per = 1 << reg.kbits
        params = self._cache_params(name, b)
        got = _cache.load_table("certified", params,
                                lambda arr: self.verify_binade(name, b, arr))
        sl = slice(b * per, (b + 1) * per)
        if got is not None:
            reg.coef[:, sl] = got["coef"]
            reg.rem[sl] = got["rem"]
            self.failures += int(got["failures"])
            reg.built[b] = True
            return
        _cache.STATS["build"] += 1
        before = self.failures
        self._build(name, b)
        _cache.store_table("certified", params, {
            "coef": reg.coef[:, sl], "rem": reg.rem[sl],
            "failures": np.array(self.failures - before, dtype=np.int64)})

    def verify_binade(self, name: str, b: int, arr: dict[str, np.ndarray],
                      nodes: int = 16) -> bool:
        """The certificate check of a stored binade (docs/exact-rounding.md §4.7).

        Shapes, dtypes and signs first: coefficients finite where the bound is finite, bounds
        ``>= 0`` (``inf`` marks an uncertified node), the failure count within the number of
        infinite bounds. Then at ``nodes`` nodes (the first, the last, others chosen by the content
        hash, all of them when ``nodes >= 2**K``; nodes with an infinite bound are sound whatever
        their coefficients and are skipped) and at offsets ``τ = 0`` and ``τ = 1/2``: with
        ``P = Σ b̃_n τⁿ`` evaluated in Arb from the stored doubles and the stored bound ``r``, the
        law's own tail (`arb_point_tail`, as in the build, at the build's precision) proves
        ``P − r <= m(w) <= P + r``: ``T(P − r) >= u >= T(P + r)`` in region A,
        ``C(P − r) <= v <= C(P + r)`` in region B (``C = 1 − T``); a lower end ``<= 0`` holds
        trivially.

        Example:
            >>> tab = CertifiedIsf(("laplace",), _laplace_tail, _laplace_density, _laplace_guess)
            >>> _ = tab.point_bounds(np.array([0.3]))            # builds region A's last binade
            >>> reg = tab.regions["A"]
            >>> b = int(np.flatnonzero(reg.built)[0])
            >>> sl = slice(b * 64, (b + 1) * 64)
            >>> arr = {"coef": reg.coef[:, sl].copy(), "rem": reg.rem[sl].copy(),
            ...        "failures": np.array(0)}
            >>> tab.verify_binade("A", b, arr)
            True
            >>> arr["rem"][:] = arr["rem"] / 1e3                 # bounds 1000 times too tight
            >>> tab.verify_binade("A", b, arr, nodes=1)
            False
        """
        from flint import arb

        reg = self.regions[name]
        per = 1 << reg.kbits
        d = reg.degree
        coef, rem, fails = arr.get("coef"), arr.get("rem"), arr.get("failures")
        if (coef is None or rem is None or fails is None or coef.dtype != np.float64
                or rem.dtype != np.float64 or coef.shape != (d + 1, per) or rem.shape != (per,)
                or fails.shape != () or fails.dtype.kind not in "iu"):
            return False
        fin = np.isfinite(rem)
        if (np.any(np.isnan(rem)) or np.any(rem < 0.0) or not np.all(np.isfinite(coef[:, fin]))
                or not 0 <= int(fails) <= int(np.count_nonzero(~fin))):
            return False
        e = reg.e_lo + b
        picks = ([0] if nodes <= 1 else list(range(per)) if nodes >= per
                 else _cache.sample_indices(arr, per, nodes))
        with np.errstate(all="ignore"), arb_context(_PREC, d + 2) as flint:
            for j in picks:
                if not fin[j]:
                    continue
                for tau in (0.0, 0.5):
                    w = 2.0**e * (1.0 + (j + tau) / per)           # exact
                    if name == "B" and w > 0.5:
                        continue                                     # not used (u < 1/2 is A)
                    val = arb(0)
                    for n in range(d, -1, -1):
                        val = val * tau + arb(float(coef[n, j]))
                    r = arb(float(rem[j]))
                    lo, hi = val - r, val + r
                    target = flint.arb(w)
                    if name == "A":
                        if lo > 0 and not arb_point_tail(self.tail, lo) >= target:
                            return False
                        if not arb_point_tail(self.tail, hi) <= target:
                            return False
                    else:
                        if lo > 0 and not arb_point_tail(self.tail, lo, True) <= target:
                            return False
                        if not arb_point_tail(self.tail, hi, True) >= target:
                            return False
        return True

    # -- building --------------------------------------------------------------------------------
    def _dens(self, flint: Any, x: Any, n: int) -> list[Any]:
        """The first n Taylor coefficients of the density ``−T′`` at the ball x."""
        try:
            ser = self.density(flint.arb_series([x, 1], prec=n))
        except (ValueError, ZeroDivisionError):   # e.g. a ball too wide for a series division
            return [flint.arb("nan")] * n
        if ser.prec < n:        # truncated (python-flint's global cap changed): never pad
            return [flint.arb("nan")] * n
        c = ser.coeffs()
        return (c + [flint.arb(0)] * n)[:n]     # Arb drops trailing coefficients that are 0

    def _root(self, flint: Any, target: Any, x: float, central: bool) -> Any:
        """A certified ball containing the root of ``T(x) = target``, or None.

        With ``central`` the equation is ``1 − T(x) = target``. Point Newton steps from the float
        guess, then one interval Newton step proves the enclosure.
        """
        arb = flint.arb
        if not (math.isfinite(x) and x > 0.0):
            return None
        xa = arb(x)
        for _ in range(12):                               # Newton at the midpoint
            t0 = arb_point_tail(self.tail, xa, central)
            f0 = self._dens(flint, xa, 1)[0]
            if not (t0.is_finite() and f0.is_finite() and f0 > 0):
                return None
            step = (t0 - target if central else target - t0) / f0
            new = arb((xa - step).mid())
            if not new > 0:
                new = arb((xa / 2).mid())
            # converged, or the step is below the tail's own uncertainty
            done = (abs(float((step / xa).mid())) < 2.0**-(flint.ctx.prec - 40)
                    or not abs(step.mid()) > 4 * step.rad())
            xa = new
            if done:
                break
        t0 = arb_point_tail(self.tail, xa, central)
        resid = t0 - target if central else target - t0
        f0 = self._dens(flint, xa, 1)[0]
        if not (resid.is_finite() and f0 > 0):
            return None
        # the ball must hold the point Newton step and its uncertainty (the tail's ball radius)
        r = arb(_upper_float(abs(resid / f0)) * 2.0 + abs(float(xa.mid())) * 2.0**-(
            flint.ctx.prec - 48))
        for _ in range(8):                                # interval Newton
            ball = arb(xa.mid(), r.mid())
            if not ball > 0:
                return None
            fb = self._dens(flint, ball, 1)[0]
            if not fb > 0:
                return None
            n = xa - resid / fb
            if ball.contains(n):
                return n
            r = r * 16
        return None

    def _series(self, flint: Any, x: Any) -> list[Any] | None:
        """Coefficients ``[x, a_1, …, a_{d+1}]`` of ``m`` at ``T(x)`` (x a ball), or None.

        ``T(x + t) − T(x) = −Σ f_k·t^{k+1}/(k + 1)`` with ``f_k`` the density's coefficients; its
        series reversion gives m's (inclusion-monotone in x: valid for every point of the ball).
        """
        arb_series = flint.arb_series
        d = self.degree
        f = self._dens(flint, x, d + 1)
        if not all(v.is_finite() for v in f) or not f[0] > 0:
            return None
        c = [flint.arb(0)] + [-f[k] / (k + 1) for k in range(d + 1)]
        rser = arb_series(c, prec=d + 2).reversion()
        if rser.prec < d + 2:
            return None
        rev = rser.coeffs()
        rev = (rev + [flint.arb(0)] * (d + 2))[: d + 2]
        if not all(v.is_finite() for v in rev):
            return None
        return [x, *rev[1:]]

    def _remainder(self, flint: Any, piece: Any, h: Any) -> Any:
        """An upper bound of ``|m⁽ᵈ⁺¹⁾/(d + 1)!|·hᵈ⁺¹`` over the ball ``piece`` (None if unbounded).

        The ball is cut into ``nsub`` sub-balls (tighter enclosures) and the maximum is taken.
        """
        arb = flint.arb
        lo, hi = piece.lower(), piece.upper()
        if not lo > 0:
            return None
        best = 0.0
        k = self.nsub
        for i in range(k):
            sub = (lo + (hi - lo) * i / k).union(lo + (hi - lo) * (i + 1) / k)
            ser = self._series(flint, sub)
            if ser is None:
                return None
            best = max(best, _upper_float(abs(ser[self.degree + 1]) * h ** (self.degree + 1)))
        return arb(best) if math.isfinite(best) else None

    def _build(self, name: str, b: int) -> None:
        reg = self.regions[name]
        per = 1 << reg.kbits
        e = reg.e_lo + b
        d = reg.degree
        w = np.ldexp(1.0 + np.arange(per + 1) / per, e)        # nodes and the next binade's first
        u_float = w if name == "A" else 1.0 - w
        with np.errstate(all="ignore"):
            guesses = np.asarray(self.guess(np.asarray(u_float, dtype=np.float64)), dtype=float)
        coef = np.zeros((d + 1, per))
        rem = np.full(per, np.inf)
        with np.errstate(over="ignore", invalid="ignore"), arb_context(_PREC, d + 2) as flint:
            arb = flint.arb
            if flint.ctx.cap != d + 2 or flint.ctx.prec != _PREC:   # defence in depth
                raise RuntimeError("python-flint context changed during a certified build")
            if name == "B" and not np.all((guesses > 0) & np.isfinite(guesses)):
                # near the centre 1 − u is not a double: start from m ≈ v/(2f(0)) instead
                f0 = self._dens(flint, arb(2.0**-600), 1)[0]
                if f0 > 0:
                    fix = w / float(f0.mid())
                    guesses = np.where((guesses > 0) & np.isfinite(guesses), guesses, fix)
            roots: list[Any] = []
            for j in range(per + 1):
                root = self._root(flint, arb(float(w[j])), float(guesses[j]), name == "B")
                # (region B's top binade is used at v = 1/2 only: its other nodes do not count)
                if root is None and j < per and (name == "A" or w[j] <= 0.5):
                    self.failures += 1
                roots.append(root)
            h = arb(2) ** (e - reg.kbits)
            sign = 1 if name == "A" else -1                     # d/dv = −d/du
            for j in range(per):
                x0, x1 = roots[j], roots[j + 1]
                if x0 is None or x1 is None:
                    continue
                at = self._series(flint, x0)
                top = self._remainder(flint, x0.union(x1), h)
                if at is None or top is None:
                    continue
                total = top
                hn = arb(1)
                for n in range(d + 1):
                    a = at[n] * (sign**n) * hn              # b_n = a_n·hⁿ (exact scaling)
                    f = float(a.mid())
                    coef[n, j] = f
                    total += a.rad() + abs(a.mid() - arb(f))
                    hn = hn * h
                rem[j] = _upper_float(total)
        # the Horner bound, per node (τ < 1): the float sum mag errs by at most (d + 1)u
        # relative, so 64u·mag >= 64u(1 − 13u)·Σ|b_n|τⁿ >= (γ_2d + 3u)·Σ|b_n|τⁿ for d <= 12
        mag = np.zeros(per)
        for n in range(d, -1, -1):
            mag = mag + np.abs(coef[n])
        bound = (rem + mag * (64.0 * _U * (1.0 + 2.0**-40)) + 2.0**-1060) * (1.0 + 2.0**-50)
        sl = slice(b * per, (b + 1) * per)
        reg.coef[:, sl] = coef
        reg.rem[sl] = np.where(np.isfinite(rem), bound, np.inf)
        reg.built[b] = True

    def _ensure(self, name: str, w: np.ndarray) -> None:
        reg = self.regions[name]
        if w.size == 0:
            return
        b = (w.view(np.int64) >> 52) - (1023 + reg.e_lo)
        np.clip(b, 0, reg.e_hi - reg.e_lo - 1, out=b)
        if reg.built[b].all():                                  # the common case: cheap check
            return
        for bb in np.unique(b):
            if not reg.built[bb]:
                with _LOCK:
                    if not reg.built[bb]:
                        self._fill(name, int(bb))

    # -- evaluation ------------------------------------------------------------------------------
    def point_bounds(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``lo <= m(u) <= hi`` at each double ``u`` (1-D).

        ``m(1) = 0``; ``m(0) = inf``; for ``0 < u < 2**-64`` the bounds are
        ``(lower bound of m(2**-64), inf)`` (m is monotone). (Every double u < 1 has
        ``1 − u >= 2**-53``, region B's smallest node.) NaN gives NaN; u outside ``[0, 1]`` and
        uncertified nodes give ``(0, inf)``.

        Example:
            >>> tab = CertifiedIsf(("laplace",), _laplace_tail, _laplace_density, _laplace_guess)
            >>> lo, hi = tab.point_bounds(np.array([1.0, 0.0]))
            >>> lo.tolist(), hi.tolist()
            ([0.0, inf], [0.0, inf])
        """
        u = np.asarray(u, dtype=np.float64).reshape(-1)
        lo = np.full(u.shape, np.nan)
        hi = np.full(u.shape, np.nan)
        with np.errstate(all="ignore"):
            in_a = (u >= 2.0**_A_SPEC[0]) & (u < 0.5)
            v = 1.0 - u                                         # exact for u >= 1/2
            in_b = (u >= 0.5) & (v >= 2.0**_B_SPEC[0])
            for name, sel, w in (("A", in_a, u), ("B", in_b, v)):
                i = np.flatnonzero(sel)
                if i.size:
                    ww = np.ascontiguousarray(w[i])
                    self._ensure(name, ww)
                    val, bound = self.regions[name].evaluate(ww)
                    lo[i] = val - bound
                    hi[i] = val + bound
            low = np.flatnonzero((u > 0.0) & (u < 2.0**_A_SPEC[0]))
            if low.size:
                lo[low] = self.point_bounds(np.array([2.0**_A_SPEC[0]]))[0][0]
                hi[low] = np.inf
            lo[u == 1.0] = hi[u == 1.0] = 0.0
            lo[u == 0.0] = hi[u == 0.0] = np.inf
            bad = ~(lo <= hi)                                   # NaN or an uncertified node
            lo = np.where(bad & ~np.isnan(u), 0.0, np.maximum(lo, 0.0))
            hi = np.where(bad & ~np.isnan(u), np.inf, hi)
        return lo, hi

    def bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``lo <= m(u) <= hi`` for every u in ``[u_lo, u_hi]`` (m decreases in u).

        Example:
            >>> tab = CertifiedIsf(("laplace",), _laplace_tail, _laplace_density, _laplace_guess)
            >>> lo, hi = tab.bounds(np.array([0.1]), np.array([0.2]))
            >>> bool(lo[0] <= math.log(5.0) and math.log(10.0) <= hi[0])
            True
        """
        u_lo, u_hi = np.broadcast_arrays(np.asarray(u_lo, dtype=np.float64),
                                         np.asarray(u_hi, dtype=np.float64))
        u_lo, u_hi = u_lo.reshape(-1), u_hi.reshape(-1)
        both = np.concatenate([u_hi, u_lo])
        lo, hi = self.point_bounds(both)
        n = u_lo.size
        return lo[:n], hi[n:]


def _laplace_tail(xs: Any, central: bool = False) -> Any:
    """``P(|Z| > x) = e^{-x}`` (``1 − e^{-x}`` with ``central``): the docstrings' example law."""
    return -((-xs).exp() - 1) if central else (-xs).exp()


def _laplace_density(xs: Any) -> Any:
    """The example law's density ``e^{-x}``."""
    return (-xs).exp()


def _laplace_guess(u: np.ndarray) -> np.ndarray:
    """The example law's float quantile ``−ln u``."""
    return -np.log(u)


_TABLES: dict[Hashable, CertifiedIsf] = {}


def certified_table(key: Hashable, tail: Callable[[Any], Any], density: Callable[[Any], Any],
                    guess: Callable[[np.ndarray], np.ndarray], kbits: int = 6,
                    nsub: int = 4, persist: bool = False) -> CertifiedIsf:
    """The shared `CertifiedIsf` for ``key`` (created on first use).

    With ``persist`` (the laws' own tables, whose key determines tail and density) its binades go
    through the on-disk cache of `tabdp._cache`, verified on load.

    Example:
        >>> t1 = certified_table(("doc-laplace",), _laplace_tail, _laplace_density, _laplace_guess)
        >>> t1 is certified_table(("doc-laplace",), None, None, None)
        True
    """
    with _LOCK:
        tab = _TABLES.get(key)
        if tab is None:
            tab = _TABLES[key] = CertifiedIsf(key, tail, density, guess, kbits=kbits, nsub=nsub)
        if persist:
            tab.persist = True
        return tab


class ArbShape:
    """What `CertifiedBounds` needs from a law: its standardized shape in Arb.

    A law composed with certified tables inherits this mixin and implements ``_arb_unit`` (the
    scale that standardizes it), ``_arb_key`` (cache key of the standardized shape: law name and
    shape parameters), ``_arb_tail`` (standardized two-sided tail ``P(|Z/unit| > x)`` on a
    python-flint ``arb_series``; ``1 −`` it, without cancellation, with ``central``; correct on
    balls) and ``_arb_density`` (density of ``|Z/unit|``, ``−`` the derivative of the tail, from
    elementary functions only: it is evaluated on wide balls). ``_arb_kbits`` and ``_arb_nsub``
    tune the table (docs/exact-rounding.md §4.5).

    Example:
        >>> from tabdp.noise import StudentT
        >>> StudentT(df=3.0)._arb_kbits(), StudentT(df=3.0)._arb_nsub()
        (6, 4)
    """

    def _arb_unit(self) -> float:
        raise NotImplementedError  # pragma: no cover - every certified law implements it

    def _arb_key(self) -> tuple[Any, ...]:
        raise NotImplementedError  # pragma: no cover - every certified law implements it

    def _arb_tail(self, xs: Any, central: bool = False) -> Any:
        raise NotImplementedError  # pragma: no cover - every certified law implements it

    def _arb_density(self, xs: Any) -> Any:
        raise NotImplementedError  # pragma: no cover - every certified law implements it

    def _arb_kbits(self) -> int:
        """Certified-table nodes per binade, ``2**kbits``: 6, or 8 for very heavy tails.

        (m growing like ``u^{-k}`` with large k makes the ball remainders loose; docs §4.5.)
        """
        return 6

    def _arb_nsub(self) -> int:
        """Sub-balls per node interval for the Taylor remainder: 4.

        (Fewer where a density evaluation on a ball is costly and the remainder has room to
        spare; docs §4.5.)
        """
        return 4


class CertifiedBounds(QuantileBounds):
    """Proven float64 bounds from the law's certified table, times its ``unit`` (outwards).

    The table is shared by all laws with the same ``_arb_key()`` and persisted in the on-disk
    cache; it is built one binade at a time on first use.

    Args:
        law: A law with an `ArbShape` (and the float64 quantile ``_abs_isf``).

    Example:
        >>> from tabdp.noise import GeneralizedGaussian
        >>> b = CertifiedBounds(GeneralizedGaussian(sigma=1.0, p=1.0))     # Laplace(1)
        >>> lo, hi = b.bounds(np.array([0.5]), np.array([0.5]))
        >>> bool(lo[0] <= math.log(2.0) <= hi[0])
        True
    """

    certified = True

    def __init__(self, law: Any) -> None:
        """Bounds for ``law`` (an `ArbShape`)."""
        self.law = law

    def table(self) -> CertifiedIsf:
        """The law's shared table (created on first use; binades are built lazily).

        Example:
            >>> from tabdp.noise import StudentT
            >>> t = CertifiedBounds(StudentT(df=3.0)).table()
            >>> t is CertifiedBounds(StudentT(df=3.0, scale=2.0)).table()
            True
        """
        law = self.law
        unit = law._arb_unit()
        return certified_table(law._arb_key(), law._arb_tail, law._arb_density,
                               lambda u: law._abs_isf(u) / unit, kbits=law._arb_kbits(),
                               nsub=law._arb_nsub(), persist=True)

    def bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The table's bounds on ``[u_lo, u_hi]``, times ``unit`` and widened outwards by 4 ulps.

        Arguments and result as in `QuantileBounds.bounds`.

        Example:
            >>> from tabdp.noise import StudentT
            >>> lo, hi = CertifiedBounds(StudentT(df=1.0)).bounds(np.array([0.5]), np.array([0.5]))
            >>> bool(lo[0] <= 1.0 <= hi[0])                                 # Cauchy median
            True
        """
        u_lo = np.asarray(u_lo, dtype=np.float64)
        u_hi = np.asarray(u_hi, dtype=np.float64)
        unit = self.law._arb_unit()
        tab = self.table()
        lo, hi = tab.bounds(u_lo.reshape(-1), u_hi.reshape(-1))
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            lo = np.maximum(lo * unit * (1.0 - 4.0 * _U) - 2.0**-1070, 0.0)
            hi = hi * unit * (1.0 + 4.0 * _U) + 2.0**-1070
        return lo.reshape(u_lo.shape), np.where(np.isnan(hi), np.inf, hi).reshape(u_lo.shape)
