"""Taylor tables of the Gaussian ``|Z|`` quantile: proven float64 bounds (exact rounding, §4.1).

The Gaussian's fast path evaluates no special function in float64: cubic Taylor expansions at
2560 nodes for ``u >= 2**-10``, quartic at 1728 nodes below, computed once in mpmath (and kept in
the on-disk cache of `tabdp._cache`), with the remainder bounded by the monotone next
derivative (docs/exact-rounding.md §4.1). `GaussianTaylorBounds` serves the Gaussian and
(scaled) the symmetric stable law at α = 2.

Example:
    >>> lo, hi = GaussianTaylorBounds(1.0).bounds(np.array([0.05]), np.array([0.05]))
    >>> bool(lo[0] < 1.959963984540054 < hi[0])
    True
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from tabdp import _cache
from tabdp._lazy_scipy import LazyModule
from tabdp.exceptions import TabdpInternalError
from tabdp.noise.rounding._core import UNIT_ROUNDOFF, QuantileBounds
from tabdp.noise.rounding.certified import NodeRegion

if TYPE_CHECKING:
    import mpmath
    import scipy.special as special
else:  # imported on first use, never by a Spark worker that unpickles a mechanism
    mpmath = LazyModule("mpmath")
    special = LazyModule("scipy.special")

__all__ = ["GaussianTaylorBounds", "gaussian_table"]

_U = UNIT_ROUNDOFF


# -- the Gaussian |Z| quantile as Taylor tables (exact rounding; docs/exact-rounding.md §4.1) ------
#: mpmath precision of the table nodes (bits).
_TABLE_PREC = 80
#: Relative widening that covers a handful of float64 roundings of a final bound (2**-48 = 32u).
_WIDEN = 2.0**-48
#: The two tables: (first binade e, last binade + 1, bits per binade K, Taylor degree d). Nodes
#: ``u0 = 2**e·(1 + j·2**-K)``; the fast path's cells (u >= 2**-10) use the first, the tails
#: (2**-64 <= u < 2**-10, about 0.1% of the cells) the second.
_CENTRE_SPEC = (-10, 0, 8, 3)
_TAIL_SPEC = (-64, -10, 5, 4)
#: Smallest u with a table node; below it the bounds are (m(2**-64) lower bound, inf).
_U_TABLE_MIN = 2.0**-64
_U_CENTRE_MIN = 2.0**-10
#: Arb precision of the certificate check of a cached binade (bits).
_CHECK_PREC = 128


def _deriv_polys(n: int) -> list[list[int]]:
    """Coefficients (ascending powers) of ``P_1..P_n``: ``dᵏx/dpᵏ = P_k(x)/φ(x)ᵏ``, ``x = Φ⁻¹(p)``.

    ``P_1 = 1`` and ``P_{k+1} = P_k′ + k·x·P_k``; every ``P_k`` has non-negative coefficients
    and the parity of ``k − 1``.

    Example:
        >>> _deriv_polys(4)
        [[1], [0, 1], [1, 0, 2], [0, 7, 0, 6]]
    """
    polys = [[1]]
    for k in range(1, n):
        p = polys[-1]
        q = [0] * (len(p) + 1)
        for i in range(1, len(p)):
            q[i - 1] += i * p[i]
        for i, a in enumerate(p):
            q[i + 1] += k * a
        while len(q) > 1 and q[-1] == 0:
            q.pop()
        polys.append(q)
    return polys


class _TaylorTable(NodeRegion):
    """Degree-d Taylor expansions of ``m(u) = −Φ⁻¹(u/2)`` (σ = 1) at binary nodes, with bounds.

    Nodes ``u0 = 2**e·(1 + j·2**-K)`` for binades ``e_lo <= e < e_hi`` and ``j < 2**K`` (the
    layout and node lookup of `tabdp.noise.rounding.certified.NodeRegion`). Per node: the
    coefficients ``a_n = m⁽ⁿ⁾(u0)/n!`` rounded to double (``coef[n]``), and ``rem``, an upper
    bound on ``|m⁽ᵈ⁺¹⁾(u0)|·hᵈ⁺¹/(d + 1)!`` (``h = 2**(e − K)``), which bounds the Taylor
    remainder on the whole node interval because ``|m⁽ᵈ⁺¹⁾|`` decreases in u. Computed in mpmath
    on first use, one binade at a time. Proof and error budget: docs/exact-rounding.md §4.1.
    """

    def __init__(self, e_lo: int, e_hi: int, kbits: int, degree: int,
                 persist: str | None = None) -> None:
        super().__init__(e_lo, e_hi, kbits, degree)
        per = 1 << kbits
        self.rem = np.zeros(self.rem.size)
        self.h = np.repeat(np.ldexp(1.0, np.arange(e_lo, e_hi) - kbits), per)
        #: sign of m^(d+1) (+1: the remainder is >= 0, m >= T_d)
        self.rem_sign = 1 if (degree + 1) % 2 == 0 else -1
        self._polys = _deriv_polys(degree + 1)
        #: name of the table in the on-disk cache (:mod:`tabdp._cache`); None: memory only
        self.persist = persist

    def ensure(self, binades: np.ndarray | None = None) -> None:
        """Build the given binades (indices ``e − e_lo``; all if None) if not built yet."""
        todo = np.flatnonzero(~self.built) if binades is None else \
            [int(b) for b in np.unique(binades) if not self.built[b]]
        for b in todo:
            self._fill(int(b))

    # -- the on-disk cache (docs/exact-rounding.md §4.7) -------------------------------------------
    def _cache_params(self, b: int) -> dict[str, Any]:
        return {"table": "gaussian-taylor", "name": self.persist,
                "spec": [self.e_lo, self.e_hi, self.kbits, self.degree], "prec": _TABLE_PREC,
                "binade": b, "env": _cache.build_env()}

    def _fill(self, b: int) -> None:
        """Binade ``b`` from the disk cache if there and verified, else built (and stored)."""
        if self.persist is None:
            self._build(b)
            return
        params = self._cache_params(b)
        got = _cache.load_table("gaussian", params, lambda arr: self.verify_binade(b, arr))
        sl = slice(b << self.kbits, (b + 1) << self.kbits)
        if got is not None:
            self.coef[:, sl] = got["coef"]
            self.rem[sl] = got["rem"]
            self.built[b] = True
            return
        _cache.STATS["build"] += 1
        self._build(b)
        _cache.store_table("gaussian", params, {"coef": self.coef[:, sl], "rem": self.rem[sl]})

    def verify_binade(self, b: int, arr: dict[str, np.ndarray], nodes: int = 4) -> bool:
        """The certificate check of a stored binade (docs/exact-rounding.md §4.7).

        Shapes and signs first (coefficients finite, remainders finite and >= 0). Then, at
        ``nodes`` nodes (the first, the last, others chosen by the content hash; all of them when
        ``nodes >= 2**K``) and at offsets ``t = 0`` and ``t = h/2``, the claim the bounds rest
        on, evaluated at 128 bits from the stored doubles: with ``P(t) = Σ ã_n tⁿ`` and
        ``S = Σ |ã_n| tⁿ``,
        ``P − 40u·S − R⁻ <= m(u₀ + t) <= P + 40u·S + R⁺`` (``R`` on the side of the remainder's
        sign), checked as ``erfc(lo/√2) >= u >= erfc(hi/√2)`` (m decreases) in mpmath at 128 bits
        (the build's own predicate, its Newton steps on ``erfc``, at a higher precision).

        Example:
            >>> tab = _TaylorTable(*_TAIL_SPEC)
            >>> tab.ensure(np.array([0]))
            >>> good = {"coef": tab.coef[:, :32].copy(), "rem": tab.rem[:32].copy()}
            >>> tab.verify_binade(0, good)
            True
            >>> good["coef"][0, 0] *= 1.0 + 2.0**-20          # one node value 1e-6 off
            >>> tab.verify_binade(0, good, nodes=1)
            False
        """
        per = 1 << self.kbits
        d = self.degree
        coef, rem = arr.get("coef"), arr.get("rem")
        if (coef is None or rem is None or coef.dtype != np.float64 or rem.dtype != np.float64
                or coef.shape != (d + 1, per) or rem.shape != (per,)
                or not (np.all(np.isfinite(coef)) and np.all(np.isfinite(rem))
                        and np.all(rem >= 0.0))):
            return False
        e = self.e_lo + b
        h = 2.0 ** (e - self.kbits)
        picks = ([0] if nodes <= 1 else list(range(per)) if nodes >= per
                 else _cache.sample_indices(arr, per, nodes))
        with mpmath.workprec(_CHECK_PREC):
            mp = mpmath.mp
            inv_s2 = 1 / mp.sqrt(2)
            for j in picks:
                u0 = 2.0**e * (1.0 + j / per)
                for t in (0.0, h / 2):
                    tm = mp.mpf(t)
                    val = mp.mpf(0)
                    mag = mp.mpf(0)
                    for n in range(d, -1, -1):      # error ~2**-126 relative, inside the slack
                        val = val * tm + mp.mpf(float(coef[n, j]))
                        mag = mag * tm + abs(mp.mpf(float(coef[n, j])))
                    slack = mag * (40.0 * _U)
                    r = mp.mpf(float(rem[j]))
                    lo = val - slack - (r if self.rem_sign < 0 else 0)
                    hi = val + slack + (r if self.rem_sign > 0 else 0)
                    u = mp.mpf(u0) + tm                        # exact: u0 + t is a double
                    # the build's predicate: the two-sided tail erfc(m/√2) at 128 bits
                    if lo > 0 and not mp.erfc(lo * inv_s2) >= u:
                        return False
                    if not mp.erfc(hi * inv_s2) <= u:
                        return False
        return True

    def _build(self, b: int) -> None:
        per = 1 << self.kbits
        e = self.e_lo + b
        u0 = np.ldexp(1.0 + np.arange(per) / per, e)
        guess = -special.ndtri(0.5 * u0)
        d = self.degree
        mf = np.empty(per)
        phif = np.empty(per)
        with mpmath.workprec(_TABLE_PREC):
            mp = mpmath.mp
            inv_s2 = 1 / mp.sqrt(2)
            c_phi = 1 / mp.sqrt(2 * mp.pi)
            tiny = mp.mpf(2) ** -45
            for j in range(per):
                p = mp.mpf(float(u0[j])) / 2                   # exact
                m = mp.mpf(float(guess[j]))
                for _ in range(8):                             # Newton on Q(m) = p
                    phi = c_phi * mp.exp(-m * m / 2)
                    step = (mp.erfc(m * inv_s2) / 2 - p) / phi
                    m += step
                    if abs(step) <= tiny * m:
                        break
                else:
                    raise TabdpInternalError(f"Gaussian quantile table: no convergence at {u0[j]}")
                # φ at the new m: φ·e^{−m·s − s²/2}, to first order (error < (m·s)² < 2^-80)
                phi *= 1 - (m - step) * step - step * step / 2
                mf[j] = float(m)
                phif[j] = float(phi)
        # a_n = ±P_n(m)/((2φ)^n·n!) in float64 (at most 23 roundings: relative error < 32u)
        rows = np.empty((d + 2, per))
        rows[0] = mf
        inv = 1.0 / (2.0 * phif)
        scale = np.ones(per)
        for n in range(1, d + 2):
            scale = scale * inv / n
            pn = np.zeros(per)
            for cf in reversed(self._polys[n - 1]):
                pn = pn * mf + cf
            val = pn * scale
            rows[n] = val if n % 2 == 0 else -val
        # remainder bound |a_{d+1}|·h^{d+1}, rounded up (h^{d+1} is a power of 2: exact)
        rows[d + 1] = np.abs(rows[d + 1]) * np.ldexp(1.0 + 2.0**-30, (e - self.kbits) * (d + 1))
        sl = slice(b * per, (b + 1) * per)
        self.coef[:, sl] = rows[: d + 1]
        self.rem[sl] = rows[d + 1]                              # rounded up
        self.built[b] = True

    def bounds(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` with ``lo <= m(u) <= hi`` (σ = 1) for u in the table's range (1-D)."""
        b = (u.view(np.int64) >> 52) - (1023 + self.e_lo)
        self.ensure(np.clip(b, 0, self.e_hi - self.e_lo - 1))
        idx, t = self.locate(u)
        d = self.degree
        a = self.coef[:, idx]
        val = a[d].copy()
        mag = np.abs(a[d])
        for n in range(d - 1, -1, -1):
            val *= t
            val += a[n]
            mag *= t
            mag += np.abs(a[n])
        # Horner (γ_2d <= 8.1u), the coefficients (32u) and the 3 roundings below: 64u·Σ|a_n|tⁿ
        err = mag * (64.0 * _U)
        err += 2.0**-1060
        rem = self.rem[idx]
        if self.rem_sign > 0:
            return val - err, (val + rem) + err
        return (val - rem) - err, val + err


_TABLES: dict[str, _TaylorTable] = {}


def _table(name: str) -> _TaylorTable:
    """The centre (``u >= 2**-10``) or tail table, created on first use."""
    tab = _TABLES.get(name)
    if tab is None:
        tab = _TABLES[name] = _TaylorTable(*(_CENTRE_SPEC if name == "centre" else _TAIL_SPEC),
                                           persist=name)
    return tab


def _std_bounds(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``lo <= m(u) <= hi`` for σ = 1 and every element of the 1-D float array ``u``.

    Centre table for ``2**-10 <= u < 1``, tail table for ``2**-64 <= u < 2**-10``; ``m(1) = 0``;
    below ``2**-64``: ``(lower bound of m(2**-64), inf)`` (m decreases); NaN for NaN or u > 1.
    """
    lo = np.full(u.shape, np.nan)
    hi = np.full(u.shape, np.nan)
    for name, sel in (("centre", (u >= _U_CENTRE_MIN) & (u < 1.0)),
                      ("tail", (u >= _U_TABLE_MIN) & (u < _U_CENTRE_MIN))):
        i = np.flatnonzero(sel)
        if i.size:
            lo[i], hi[i] = _table(name).bounds(u[i])
    one = u == 1.0
    lo[one] = hi[one] = 0.0
    below = np.flatnonzero(u < _U_TABLE_MIN)
    if below.size:
        lo[below] = _table("tail").bounds(np.array([_U_TABLE_MIN]))[0][0]
        hi[below] = np.inf
    return lo, hi


@functools.lru_cache(maxsize=64)
def _centre_scaled(sigma: float) -> tuple[tuple[np.ndarray, ...], float]:
    """σ-scaled coefficients of the centre table and the fast path's radius (a scalar).

    ``rad >= max over nodes of σ·rem + 64u·Σ|c_n|hⁿ + 2**-53·|c_1|``: the Taylor remainder,
    Horner's and the coefficients' rounding, and the drop of m over ``[u, u + 2**-53]``.
    """
    tab = _table("centre")
    tab.ensure()
    coef = tuple(np.ascontiguousarray(sigma * tab.coef[n]) for n in range(tab.degree + 1))
    mag = np.zeros_like(tab.h)
    for n in range(tab.degree, -1, -1):
        mag = mag * tab.h + np.abs(coef[n])
    rad = sigma * tab.rem + 64.0 * _U * mag + 2.0**-53 * np.abs(coef[1])
    return coef, float(np.max(rad)) * (1.0 + 2.0**-40)


def gaussian_table(name: str) -> _TaylorTable:
    """The centre (``"centre"``: ``u >= 2**-10``) or ``"tail"`` table, created on first use.

    Args:
        name: ``"centre"`` or ``"tail"``.

    Returns:
        The shared table.

    Example:
        >>> gaussian_table("centre") is gaussian_table("centre")
        True
    """
    return _table(name)


class GaussianTaylorBounds(QuantileBounds):
    """Proven bounds on the N(0, σ²) ``|Z|`` quantile from the Taylor tables.

    Args:
        sigma: The standard deviation σ.

    Example:
        >>> mid, rad = GaussianTaylorBounds(2.0).fine(np.array([0.05]))
        >>> bool(abs(mid[0] - 2 * 1.959963984540054) <= rad < 1e-9)
        True
    """

    def __init__(self, sigma: float) -> None:
        """Bounds for N(0, ``sigma``²)."""
        self.sigma = sigma

    def bounds(self, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Proven bounds on the exact ``|Z|`` quantile over ``[u_lo, u_hi]`` from Taylor tables.

        ``hi`` bounds ``m(u_lo)`` and ``lo`` bounds ``m(u_hi)`` (m decreases), each from the
        cubic (``u >= 2**-10``) or quartic (``2**-64 <= u < 2**-10``) Taylor expansion at the
        table node below u, with its remainder bounded by the monotone next derivative and the
        float64 error of the evaluation bounded a priori (docs/exact-rounding.md §4.1). No
        special function is evaluated in float64. Below ``2**-64`` (never reached by
        `tabdp.noise.exact.round_noisy`, whose uniforms are at least ``2**-63``) the upper
        bound is ``inf``.

        Arguments and result as in `QuantileBounds.bounds`.

        Example:
            >>> lo, hi = GaussianTaylorBounds(1.0).bounds(np.array([0.05]), np.array([0.05]))
            >>> bool(lo[0] < 1.959963984540054 < hi[0])
            True
        """
        u_lo = np.asarray(u_lo, dtype=np.float64)
        u_hi = np.asarray(u_hi, dtype=np.float64)
        shape = np.broadcast(u_lo, u_hi).shape
        ul = np.broadcast_to(u_lo, shape).ravel()
        uh = np.broadcast_to(u_hi, shape).ravel()
        with np.errstate(all="ignore"):
            lo = _std_bounds(uh)[0]
            hi = _std_bounds(ul)[1]
            lo = np.maximum(lo, 0.0) * self.sigma      # m >= 0; NaN stays NaN
            lo *= 1.0 - _WIDEN
            hi = hi * self.sigma
            hi *= 1.0 + _WIDEN
        return lo.reshape(shape), hi.reshape(shape)

    def fine(self, u_lo: np.ndarray) -> tuple[np.ndarray, float]:
        """Fast-path bounds: ``|m(u) − mid| <= rad`` for all u in ``[u_lo, u_lo + 2**-53]``.

        For ``u_lo`` a multiple of ``2**-53`` in ``[2**-10, 1)``: the σ-scaled cubic Taylor
        expansion at the node below ``u_lo`` (4 gathers and 6 arithmetic passes, no special
        function); ``rad`` is one proven constant for all cells (at most ``2.5e-11·σ``, see
        `_centre_scaled`). Other ``u_lo`` give meaningless (finite) values.

        Args:
            u_lo: Lower ends, multiples of ``2**-53`` in ``[2**-10, 1)``.

        Returns:
            ``(mid, rad)``: a new array and a float.

        Example:
            >>> mid, rad = GaussianTaylorBounds(1.0).fine(np.array([0.05]))
            >>> bool(abs(mid[0] - 1.959963984540054) <= rad < 1e-10)
            True
        """
        coef, rad = _centre_scaled(self.sigma)
        tab = _table("centre")
        idx, t = tab.locate(u_lo, clip=False)
        d = tab.degree
        val = np.take(coef[d], idx, mode="clip")
        tmp = np.take(coef[d - 1], idx, mode="clip")
        for n in range(d - 1, -1, -1):
            if n < d - 1:
                np.take(coef[n], idx, out=tmp, mode="clip")
            val *= t
            val += tmp
        return val, rad
