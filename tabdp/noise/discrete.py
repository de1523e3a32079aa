"""Exact discrete Gaussian and discrete Laplace noise from uniform random bits.

Floating-point noise leaks (Mironov 2012): the set of doubles a float sampler can return depends on
the value it is added to. For counts and other integer queries tabdp therefore adds *integer* noise
drawn **exactly**, with the samplers of Canonne, Kamath & Steinke (2020), "The Discrete Gaussian
for Differential Privacy" (CKS):

* `bernoulli_exp` — Bernoulli(exp(−γ)) for a rational γ ≥ 0 (CKS Algorithm 1);
* `geometric` and `discrete_laplace` — P(k) ∝ exp(−|k|/scale) for a rational scale
  (CKS Algorithm 2);
* `discrete_gaussian` — P(k) ∝ exp(−k²/(2σ²)) for a rational σ (CKS Algorithm 3);
* [`DiscreteLaplaceNoise`][tabdp.noise.DiscreteLaplaceNoise] and
  [`DiscreteGaussianNoise`][tabdp.noise.DiscreteGaussianNoise] — the laws with pmf, cdf/sf,
  variance, interval half-widths and sampling.

**Parameters are exact rationals.** A parameter may be an int, a `fractions.Fraction` or a
float; a float is converted with ``Fraction(x)``, which is exact, so the law sampled is the one of
the *exact binary value* of the float (``0.1`` means 3602879701896397/2**55). No denominator is
ever limited. Scales and σ must lie in ``[MIN_SCALE, MAX_SCALE] = [2**-40, 2**40]``.

**Law descriptions.** The floats returned by `sf` and friends are
accurate to a relative 1e-12 or better (until they underflow). Where a decision must be exact
(the interval half-width must cover at least ``level``; the (ε, δ) accounting of
`tabdp.mechanisms.discrete`), near-ties are settled with high-precision (mpmath) evaluations
of the same sums.

**Exactness argument.** The only randomness is [`RandomSource.bits`][tabdp.RandomSource.bits]
(uniform 64-bit words; their two 32-bit halves, four 16-bit quarters and single bits are also
independent and uniform). From it:

1. a uniform integer on ``[0, m)`` is drawn by rejection from ``w``-bit pieces: w = 16 (the four
   16-bit quarters of a word, for m ≤ 2**8 and for powers of two up to 2**16), 32 (its two halves,
   for m ≤ 2**28) or 64 (whole words). A piece is accepted iff it is below
   ``2**w − (2**w mod m)`` and reduced mod ``m`` (no modulo bias); a power of two ``m ≤ 2**16`` is
   the low bits of a 16-bit piece (nothing rejected);
2. Bernoulli(n/d) is ``uniform[0, d) < n`` when ``d ≤ 2**64``; for larger ``d`` a 64-bit word
   ``W`` is compared with ``P = floor(2**64·n/d)``, the first 64 binary digits of n/d (``W < P``
   → 1, ``W > P`` → 0) and a tie (probability 2**−64) is settled exactly by Bernoulli of the
   remaining fraction ``(2**64·n mod d)/d`` with fresh bits, so P(1) = (P + frac)/2**64 = n/d;
3. CKS Algorithm 1 needs a fresh Bernoulli(γ/K) at step K; it is drawn as the AND of independent
   Bernoulli(1/K) and Bernoulli(γ) draws, which has exactly that law;
4. the vectorized samplers run every rejection loop on whole arrays of pending draws, and each
   output slot keeps the first accepted candidate of *its own* sequence of independent trials, so
   every slot has exactly the CKS law and slots are independent.

All quantities that decide an output are integers (numpy int64/uint64 with overflow bounds
checked before use, Python ints otherwise); no float is involved. A draw of magnitude 2**62 or
more (probability below exp(−2**21) for scales ≤ 2**40) raises `OverflowError` on every
path instead of being released. Where a numerator or denominator would not fit in int64 the
samplers fall back to Python integers: per *distinct* candidate value for the discrete Gaussian
acceptance step (so the cost grows with the number of distinct values, about 15σ, not with the
sample size), element by element for anything rarer. The pure-Python ``reference_*`` functions
implement the three CKS algorithms literally, one draw at a time; the tests check that they and
the vectorized samplers give the same law, and that the vectorized outputs are independent.

The floats in `pmf`, `cdf` and friends
describe the law (for accuracy reports); they never decide a draw.

Example:
    >>> z = discrete_gaussian(3.0, 5, rng=0)
    >>> z.dtype, z.shape
    (dtype('int64'), (5,))
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from numbers import Rational
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp._lazy_scipy import LazyModule
from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.rng import RandomSource, as_random_source

if TYPE_CHECKING:
    import mpmath
    import scipy.special as special
else:  # imported on first use, never by a Spark worker that unpickles a mechanism
    mpmath = LazyModule("mpmath")
    special = LazyModule("scipy.special")

__all__ = [
    "MIN_SCALE",
    "MAX_SCALE",
    "exact_fraction",
    "bernoulli_exp",
    "geometric",
    "discrete_laplace",
    "discrete_gaussian",
    "reference_bernoulli_exp",
    "reference_discrete_laplace",
    "reference_discrete_gaussian",
    "DiscreteLaplaceNoise",
    "DiscreteGaussianNoise",
]

#: Largest discrete Laplace scale / discrete Gaussian σ accepted (2**40 ≈ 1.1e12): draws then stay
#: far inside int64 (P(|Z| ≥ 2**62) < exp(−2**21)).
MAX_SCALE = 2**40
#: Smallest discrete Laplace scale / discrete Gaussian σ accepted (2**-40 ≈ 9.1e-13), symmetric to
#: :data:`MAX_SCALE`. Below it the law is a point mass at 0 to within exp(−2**79) anyway, while σ²
#: and 1/scale leave the float range of the law's descriptions (σ² underflows near σ = 1e-154,
#: 1/scale overflows near 5e-309) and would turn them into NaN.
MIN_SCALE = 2.0**-40

_TWO64 = 1 << 64
_I64_MAX = (1 << 63) - 1
_ISQRT_I64 = math.isqrt(_I64_MAX)
#: Integer parts of γ at or above this are handled element by element (never in practice).
_Q_MAX = 1 << 62
#: Draws beyond this magnitude raise (probability < exp(−2**21) for scales ≤ MAX_SCALE).
_OUT_MAX = 1 << 62
_SQRT_2PI = math.sqrt(2.0 * math.pi)
#: Largest table (entries) of the discrete Gaussian's tail sums; beyond it Euler–Maclaurin.
_TABLE_MAX = 1 << 21
#: Decimal digits of the high-precision (mpmath) evaluations that settle near-ties.
_MP_DPS = 60
MP_DPS = _MP_DPS  # public name (tabdp.mechanisms.discrete works at the same precision)
#: High-precision discrete Gaussian tails use Euler–Maclaurin (``_EM_TERMS`` Bernoulli terms) for
#: σ ≥ this and x = m/σ ≤ σ/8: the remainder is then of order (x/(2πσ))**24 ≤ 1e-40 relative.
#: Elsewhere they are summed directly (with a rigorous bound on the neglected terms).
_EM_MIN_SIGMA = 256
_EM_TERMS = 12
#: Relative band around a float tie in which :meth:`interval_halfwidth` decides in high precision
#: (the float tails are accurate to far better than this).
_TIE_BAND = 1e-9

BernFn = Callable[[np.ndarray], np.ndarray]


# ----------------------------------------------------------------------------------------------
# parameters
# ----------------------------------------------------------------------------------------------
def exact_fraction(value: Any, name: str = "value", owner: str = "discrete noise") -> Fraction:
    """Convert an int, float, ``Fraction`` or ``Decimal`` to the *exactly equal* ``Fraction``.

    A float becomes the exact rational value of its binary representation (``Fraction(0.1)`` is
    3602879701896397/2**55, not 1/10): the samplers draw from the law of that exact value.

    Args:
        value: The number.
        name: Parameter name, for messages.
        owner: What the parameter belongs to, for messages.

    Returns:
        The exactly equal fraction.

    Raises:
        InvalidParameterError: For booleans, non-numbers, NaN and infinities.

    Example:
        >>> exact_fraction(0.5), exact_fraction(3)
        (Fraction(1, 2), Fraction(3, 1))
        >>> exact_fraction(0.1) == Fraction(3602879701896397, 2**55)
        True
    """
    if isinstance(value, bool | np.bool_):
        raise InvalidParameterError(f"{owner}: {name} must be a number; got {value!r}.")
    if isinstance(value, int | np.integer):
        return Fraction(int(value))
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, float | np.floating | Decimal):
        finite = value.is_finite() if isinstance(value, Decimal) else bool(np.isfinite(value))
        if not finite:
            raise InvalidParameterError(f"{owner}: {name} must be finite; got {value!r}.")
        if isinstance(value, np.floating) and not isinstance(value, float):
            return Fraction(*(int(v) for v in value.as_integer_ratio()))  # float32, longdouble
        return Fraction(value)
    raise InvalidParameterError(
        f"{owner}: {name} must be an int, float or fractions.Fraction; got {value!r} of type "
        f"{type(value).__name__}.")


def _check_scale(value: Any, name: str, owner: str) -> Fraction:
    f = exact_fraction(value, name, owner)
    if not MIN_SCALE <= f <= MAX_SCALE:
        raise InvalidParameterError(
            f"{owner}: {name} must be between MIN_SCALE = 2**-40 (≈ 9.1e-13) and MAX_SCALE = "
            f"2**40 (≈ 1.1e12); got {value!r}.\nHint: {name} is the noise scale in units of the "
            f"integer query (e.g. {name}=2.0); a scale below 2**-40 would add no noise at all "
            "(use the exact value instead), one above 2**40 would drown any count.")
    return f


def _size(size: int | tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    shape = (int(size),) if isinstance(size, int | np.integer) else tuple(int(s) for s in size)
    if any(s < 0 for s in shape):
        raise InvalidParameterError(f"size must be non-negative; got {size!r}.")
    return shape, int(np.prod(shape)) if shape else 1


# ----------------------------------------------------------------------------------------------
# uniform integers and bits (vectorized)
# ----------------------------------------------------------------------------------------------
def _uniform_below(src: RandomSource, m: int, n: int) -> np.ndarray:
    """``n`` independent uniform integers on ``[0, m)`` as uint64, by rejection (no modulo bias).

    ``m`` is an int in ``[1, 2**64]``. A ``w``-bit piece (w = 16, 32 or 64: the pieces of a word
    are independent and uniform) is accepted iff it is below ``2**w − (2**w mod m)``, the largest
    multiple of ``m``, and then reduced mod ``m``.
    """
    if n == 0 or m == 1:
        return np.zeros(n, np.uint64)
    if m & (m - 1) == 0 and m <= (1 << 16):  # power of two: the low bits, no rejection
        return _draw_width(src, n, 16) & np.uint64(m - 1)
    width = 16 if m <= (1 << 8) else 32 if m <= (1 << 28) else 64
    lim = np.uint64((1 << width) - 1 - (1 << width) % m)
    mod = None if m == _TWO64 else np.uint64(m)
    out = _draw_width(src, n, width)
    bad = np.flatnonzero(out > lim)
    while bad.size:  # redraw the rejected ones only
        w = _draw_width(src, bad.size, width)
        out[bad] = w
        bad = bad[w > lim]
    return out if mod is None else out % mod


def _draw_width(src: RandomSource, k: int, width: int) -> np.ndarray:
    """``k`` independent uniform ``width``-bit integers (16, 32 or 64) as uint64."""
    if width == 64:
        return src.bits(k)
    per = 64 // width
    dt = np.uint16 if width == 16 else np.uint32
    return src.bits((k + per - 1) // per).view(dt)[:k].astype(np.uint64)


def _fair_bits(src: RandomSource, n: int) -> np.ndarray:
    """``n`` independent fair bits (bool), 64 per word."""
    if n == 0:
        return np.zeros(0, bool)
    words = src.bits((n + 63) // 64)
    return np.unpackbits(words.view(np.uint8))[:n].astype(bool)


def _bern_inverse(src: RandomSource, k: int, n: int) -> np.ndarray:
    """``n`` independent Bernoulli(1/k) draws (k >= 1)."""
    if k == 1:
        return np.ones(n, bool)
    if k == 2:
        return _fair_bits(src, n)
    return _uniform_below(src, k, n) == 0


# ----------------------------------------------------------------------------------------------
# CKS Algorithm 1, vectorized
# ----------------------------------------------------------------------------------------------
# In Algorithm 1 every pending draw is at the same step K (all start at K = 1 and move on
# together), so each round draws one Bernoulli(γ/K) for all of them with a common K.
def _bern_exp_minus1(src: RandomSource, n: int) -> np.ndarray:
    """Bernoulli(exp(−1)) × n: Algorithm 1 with γ = 1 (step K=1 always succeeds)."""
    res = np.zeros(n, bool)
    active = np.arange(n)
    k = 2
    while active.size:
        a = _bern_inverse(src, k, active.size)
        if k & 1:
            res[active[~a]] = True  # stopped at an odd K
        active = active[a]
        k += 1
    return res


def _geometric_e(src: RandomSource, n: int) -> np.ndarray:
    """Number of successes of Bernoulli(exp(−1)) before the first failure, × n (int64)."""
    v = np.zeros(n, np.int64)
    active = np.arange(n)
    while active.size:
        active = active[_bern_exp_minus1(src, active.size)]
        v[active] += 1
    return v


def _alg1_frac(src: RandomSource, n: int, bern_f: BernFn) -> np.ndarray:
    """Bernoulli(exp(−f_i)) for f_i in [0, 1] (Algorithm 1), ``bern_f(idx)`` = Bernoulli(f_idx)."""
    res = np.zeros(n, bool)
    active = np.arange(n)
    k = 1
    while active.size:
        a = _bern_inverse(src, k, active.size)  # Bernoulli(1/K) ...
        cand = np.flatnonzero(a)
        if cand.size:
            a[cand] = bern_f(active[cand])  # ... AND Bernoulli(f): Bernoulli(f/K)
        if k & 1:
            res[active[~a]] = True  # stopped at an odd K
        active = active[a]
        k += 1
    return res


def _alg1_int(src: RandomSource, q: np.ndarray) -> np.ndarray:
    """True where all of q_i independent Bernoulli(exp(−1)) draws succeed (q int64 >= 0)."""
    alive = np.ones(q.size, bool)
    rem = q.astype(np.int64, copy=True)
    idx = np.flatnonzero(rem > 0)
    while idx.size:
        b = _bern_exp_minus1(src, idx.size)
        alive[idx[~b]] = False
        idx = idx[b]
        rem[idx] -= 1
        idx = idx[rem[idx] > 0]
    return alive


def _bern_ratio_direct(src: RandomSource, r: np.ndarray | int, d: int) -> BernFn:
    """Bernoulli(r_i/d) as ``uniform[0, d) < r_i`` (d <= 2**64; r an int or uint64 array)."""
    rr: Any = np.uint64(r) if isinstance(r, int) else r.astype(np.uint64, copy=False)

    def f(idx: np.ndarray) -> np.ndarray:
        return _uniform_below(src, d, idx.size) < (rr if isinstance(r, int) else rr[idx])

    return f


def _bern_ratio_lazy(src: RandomSource, p64: np.ndarray, rem_of: Callable[[int], int],
                     d: int) -> BernFn:
    """Bernoulli(r_i/d) for any d: 64 uniform bits vs the first 64 binary digits of r_i/d.

    ``p64[i] = floor(2**64·r_i/d)``; ties are settled exactly with fresh bits (module docstring).
    """

    def f(idx: np.ndarray) -> np.ndarray:
        w = src.bits(idx.size)
        p = p64[idx]
        out = w < p
        for j in np.flatnonzero(w == p).tolist():
            r = rem_of(int(idx[j]))
            out[j] = _ref_bern_rational(src, (r << 64) % d, d)
        return out

    return f


# ----------------------------------------------------------------------------------------------
# reference (scalar, pure Python) implementations of CKS Algorithms 1–3
# ----------------------------------------------------------------------------------------------
def _ref_uniform_below(src: RandomSource, m: int) -> int:
    """Uniform integer on [0, m) from whole 64-bit words, by rejection (any m >= 1)."""
    if m <= 1:
        return 0
    nw = max(1, ((m - 1).bit_length() + 63) // 64)
    span = 1 << (64 * nw)
    limit = span - span % m
    while True:
        w = 0
        for x in src.bits(nw).tolist():
            w = (w << 64) | int(x)
        if w < limit:
            return w % m


def _ref_bern_rational(src: RandomSource, n: int, d: int) -> bool:
    """Bernoulli(n/d), 0 <= n <= d."""
    return _ref_uniform_below(src, d) < n


def _ref_bern_exp(src: RandomSource, n: int, d: int) -> bool:
    """Bernoulli(exp(−n/d)): CKS Algorithm 1, literally."""
    if n <= d:  # γ in [0, 1]
        k = 1
        while _ref_bern_rational(src, n, d * k):
            k += 1
        return k % 2 == 1
    q, r = divmod(n, d)
    i = 0
    while i < q:
        if not _ref_bern_exp(src, 1, 1):
            return False
        i += 1
    return _ref_bern_exp(src, r, d)


def _ref_dlap(src: RandomSource, t: int, s: int, signed: bool = True) -> int:
    """CKS Algorithm 2: discrete Laplace with scale t/s (geometric |.| if ``signed`` is False)."""
    while True:
        u = _ref_uniform_below(src, t)
        if not _ref_bern_exp(src, u, t):
            continue
        v = 0
        while _ref_bern_exp(src, 1, 1):
            v += 1
        y = (u + t * v) // s
        if not signed:
            return y
        b = _ref_uniform_below(src, 2)
        if b == 1 and y == 0:
            continue
        return -y if b else y


def _ref_dgauss(src: RandomSource, sigma: Fraction) -> int:
    """CKS Algorithm 3: discrete Gaussian with parameter σ (σ² = a/b rational)."""
    s2 = sigma * sigma
    a, b = s2.numerator, s2.denominator
    t = sigma.numerator // sigma.denominator + 1
    d = 2 * a * b * t * t
    while True:
        y = _ref_dlap(src, t, 1)
        # γ = (|y| − σ²/t)² / (2σ²) = (|y|·b·t − a)² / (2·a·b·t²)
        if _ref_bern_exp(src, (abs(y) * b * t - a) ** 2, d):
            return y


def reference_bernoulli_exp(gamma: Any, rng: Any = None) -> bool:
    """One Bernoulli(exp(−γ)) draw by CKS Algorithm 1, in pure Python (audit reference).

    Args:
        gamma: γ ≥ 0 (int, float — taken exactly — or ``Fraction``).
        rng: Randomness (default: secure).

    Returns:
        The draw.

    Example:
        >>> isinstance(reference_bernoulli_exp(Fraction(3, 2), rng=1), bool)
        True
    """
    g = exact_fraction(gamma, "gamma", "reference_bernoulli_exp")
    if g < 0:
        raise InvalidParameterError(f"reference_bernoulli_exp: gamma must be >= 0; got {gamma!r}.")
    return bool(_ref_bern_exp(as_random_source(rng), g.numerator, g.denominator))


def reference_discrete_laplace(scale: Any, rng: Any = None) -> int:
    """One discrete Laplace draw by CKS Algorithm 2, in pure Python (audit reference).

    Args:
        scale: Scale t > 0 (P(k) ∝ exp(−|k|/t)), taken exactly.
        rng: Randomness (default: secure).

    Returns:
        The draw.

    Example:
        >>> isinstance(reference_discrete_laplace(2.0, rng=1), int)
        True
    """
    f = _check_scale(scale, "scale", "reference_discrete_laplace")
    return _ref_dlap(as_random_source(rng), f.numerator, f.denominator)


def reference_discrete_gaussian(sigma: Any, rng: Any = None) -> int:
    """One discrete Gaussian draw by CKS Algorithm 3, in pure Python (audit reference).

    Args:
        sigma: σ > 0 (P(k) ∝ exp(−k²/(2σ²))), taken exactly.
        rng: Randomness (default: secure).

    Returns:
        The draw.

    Example:
        >>> isinstance(reference_discrete_gaussian(1.5, rng=1), int)
        True
    """
    f = _check_scale(sigma, "sigma", "reference_discrete_gaussian")
    return _ref_dgauss(as_random_source(rng), f)


# ----------------------------------------------------------------------------------------------
# vectorized samplers
# ----------------------------------------------------------------------------------------------
def _combine(u: np.ndarray, v: np.ndarray, t: int, s: int) -> np.ndarray:
    """floor((u + t·v)/s) in int64, with Python ints where u + t·v would overflow int64."""
    safe = v <= (np.int64(_I64_MAX) - u) // np.int64(t)
    y = np.zeros(u.size, np.int64)
    if s <= _I64_MAX:  # else y = 0 for every x <= _I64_MAX < s
        y[safe] = (u[safe] + np.int64(t) * v[safe]) // np.int64(s)
    for j in np.flatnonzero(~safe).tolist():
        yj = (int(u[j]) + t * int(v[j])) // s
        _check_out(yj)
        y[j] = yj
    if y.size and int(y.max()) >= _OUT_MAX:  # the int64 path too (y >= 0 here)
        _check_out(int(y.max()))
    return y


def _check_out(y: int) -> None:
    """Raise if a draw's magnitude reaches 2**62 (probability < exp(−2**21) at scale <= 2**40)."""
    if abs(y) >= _OUT_MAX:
        raise OverflowError(
            f"discrete noise: a draw reached {y} (magnitude >= 2**62, an event of probability "
            "below exp(-2**21) for scales <= 2**40); no value was released.\nHint: this "
            "indicates a faulty random source; check the RandomSource passed as rng.")


def _dlap_vec(src: RandomSource, t: int, s: int, n: int, signed: bool = True) -> np.ndarray:
    """CKS Algorithm 2 on arrays: n draws of discrete Laplace (or geometric) with scale t/s."""
    out = np.zeros(n, np.int64)
    if t > _I64_MAX:  # only reachable with Fraction inputs: scalar Python fallback
        for i in range(n):
            yi = _ref_dlap(src, t, s, signed)
            _check_out(yi)
            out[i] = yi
        return out
    pending = np.arange(n)
    while pending.size:
        m = pending.size
        if t == 1:  # U = 0 and Bernoulli(exp(0)) = 1
            sel = np.arange(m)
            u = np.zeros(m, np.int64)
        else:
            u_all = _uniform_below(src, t, m)
            d = _alg1_frac(src, m, _bern_ratio_direct(src, u_all, t))  # Bern(exp(−U/t))
            sel = np.flatnonzero(d)
            u = u_all[sel].astype(np.int64)
        v = _geometric_e(src, sel.size)
        y = _combine(u, v, t, s)
        if signed:
            b = _fair_bits(src, sel.size)
            ok = ~(b & (y == 0))
            z = np.where(b, -y, y)
        else:
            ok = np.ones(sel.size, bool)
            z = y
        done = sel[ok]
        out[pending[done]] = z[ok]
        keep = np.ones(m, bool)
        keep[done] = False
        pending = pending[keep]
    return out


def _distinct(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values of a non-negative int64 array and each element's position."""
    ymax = int(y.max())
    if ymax <= 4 * y.size + 4096:
        present = np.zeros(ymax + 1, bool)
        present[y] = True
        pos = np.cumsum(present) - 1
        return np.flatnonzero(present), pos[y]
    vals, inv = np.unique(y, return_inverse=True)
    return vals, inv.reshape(-1)


def _dg_accept(src: RandomSource, y: np.ndarray, a: int, b: int, t: int,
               path: str = "auto") -> np.ndarray:
    """Acceptance step of Algorithm 3: Bernoulli(exp(−(y·b·t − a)²/(2abt²))) for y = |Y| >= 0.

    ``path``: "int64" (numpy integers; needs every quantity below 2**63), "python" (Python ints per
    distinct y, lazy Bernoulli), or "auto" (int64 when the bounds allow it).
    """
    n = y.size
    if n == 0:
        return np.zeros(0, bool)
    c = b * t
    d = 2 * a * b * t * t
    ymax = int(y.max())
    fits = d <= _I64_MAX and a <= _ISQRT_I64 and c * ymax <= _ISQRT_I64 + a
    if path == "int64" and not fits:
        raise ValueError("int64 path requested but the parameters do not fit")
    if fits and path != "python":
        e = np.int64(c) * y - np.int64(a)  # |e| <= isqrt(2**63 - 1)
        num = e * e
        q = num // np.int64(d)
        r = num % np.int64(d)
        alive = _alg1_int(src, q)
        idx = np.flatnonzero(alive)
        alive[idx] = _alg1_frac(src, idx.size, _bern_ratio_direct(src, r[idx], d))
        return alive
    vals, ti = _distinct(y)
    qs: list[int] = []
    rs: list[int] = []
    ps: list[int] = []
    for v in vals.tolist():
        qq, rr = divmod((c * v - a) ** 2, d)
        qs.append(qq)
        rs.append(rr)
        ps.append((rr << 64) // d)
    alive = _bern_exp_split(src, qs, rs, ps, ti, d)
    return alive


def _bern_exp_split(src: RandomSource, qs: list[int], rs: list[int], ps: list[int],
                    ti: np.ndarray, d: int) -> np.ndarray:
    """Bernoulli(exp(−(q + r/d))) for element i with (q, r, p64) = table entry ``ti[i]``.

    exp(−γ) = exp(−1)^q·exp(−r/d): q Bernoulli(exp(−1)) draws (Algorithm 1 for γ > 1), then
    Algorithm 1 on r/d with lazy Bernoulli(r/d) draws. An integer part at or above ``_Q_MAX`` is
    split as ``(_Q_MAX − 1) + rest``: the first part runs vectorized, and the rest (reached with
    probability below exp(−2**61)) is decided by the reference sampler.
    """
    cap = _Q_MAX - 1
    q_tab = np.array([min(q, cap) for q in qs], np.int64)
    p_tab = np.array(ps, np.uint64)
    alive = _alg1_int(src, q_tab[ti])
    idx = np.flatnonzero(alive)
    over = np.array([q > cap for q in qs], bool)[ti[idx]]
    for j in idx[over].tolist():
        k = int(ti[j])
        alive[j] = _ref_bern_exp(src, (qs[k] - cap) * d + rs[k], d)
    idx = idx[~over]
    tidx = ti[idx]
    alive[idx] = _alg1_frac(src, idx.size,
                            _bern_ratio_lazy(src, p_tab[tidx], lambda i: rs[int(tidx[i])], d))
    return alive


def _dgauss_vec(src: RandomSource, sigma: Fraction, n: int, path: str = "auto") -> np.ndarray:
    """CKS Algorithm 3 on arrays: n discrete Gaussian draws with parameter σ."""
    s2 = sigma * sigma
    a, b = s2.numerator, s2.denominator
    t = sigma.numerator // sigma.denominator + 1
    out = np.zeros(n, np.int64)
    pending = np.arange(n)
    while pending.size:
        y = _dlap_vec(src, t, 1, pending.size)
        acc = _dg_accept(src, np.abs(y), a, b, t, path)
        out[pending[acc]] = y[acc]
        pending = pending[~acc]
    return out


def bernoulli_exp(gamma: Any, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
    """Exact Bernoulli(exp(−γ)) draws for a rational γ ≥ 0 (CKS Algorithm 1, vectorized).

    Args:
        gamma: γ ≥ 0: int, ``Fraction`` or float (taken exactly).
        size: Output shape.
        rng: A [`RandomSource`][tabdp.RandomSource] (default: secure), int seed or numpy Generator.

    Returns:
        Boolean array.

    Raises:
        InvalidParameterError: If γ is negative or not a finite number.

    Example:
        >>> x = bernoulli_exp(Fraction(1, 3), 1000, rng=0)
        >>> x.dtype, bool(0.6 < x.mean() < 0.83)
        (dtype('bool'), True)
    """
    g = exact_fraction(gamma, "gamma", "bernoulli_exp")
    if g < 0:
        raise InvalidParameterError(f"bernoulli_exp: gamma must be >= 0; got {gamma!r}.")
    shape, n = _size(size)
    src = as_random_source(rng)
    q, r = divmod(g.numerator, g.denominator)
    d = g.denominator
    if q < _Q_MAX and d <= _TWO64:  # all in uint64: direct Bernoulli(r/d)
        alive = _alg1_int(src, np.full(n, q, np.int64))
        idx = np.flatnonzero(alive)
        alive[idx] = _alg1_frac(src, idx.size, _bern_ratio_direct(src, r, d))
    else:
        alive = _bern_exp_split(src, [q], [r], [(r << 64) // d], np.zeros(n, np.int64), d)
    return alive.reshape(shape)


def geometric(scale: Any, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
    """Exact geometric draws on {0, 1, ...}: P(k) = (1 − e^(−1/scale))·e^(−k/scale).

    This is CKS Algorithm 2 without the sign step (the magnitude ``floor(X/s)`` of a geometric X).

    Args:
        scale: Scale in [2**-40, 2**40], taken exactly.
        size: Output shape.
        rng: Randomness (default: secure).

    Returns:
        int64 array.

    Example:
        >>> int(geometric(1.0, 10, rng=0).min()) >= 0
        True
    """
    f = _check_scale(scale, "scale", "geometric")
    shape, n = _size(size)
    return _dlap_vec(as_random_source(rng), f.numerator, f.denominator, n,
                     signed=False).reshape(shape)


def discrete_laplace(scale: Any, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
    """Exact discrete Laplace draws: P(k) ∝ exp(−|k|/scale) on the integers (CKS Algorithm 2).

    Args:
        scale: Scale in [2**-40, 2**40], taken exactly (a float means its exact binary value).
        size: Output shape.
        rng: Randomness (default: secure).

    Returns:
        int64 array.

    Example:
        >>> discrete_laplace(2.0, (2, 3), rng=0).shape
        (2, 3)
    """
    f = _check_scale(scale, "scale", "discrete_laplace")
    shape, n = _size(size)
    return _dlap_vec(as_random_source(rng), f.numerator, f.denominator, n).reshape(shape)


def discrete_gaussian(sigma: Any, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
    """Exact discrete Gaussian draws: P(k) ∝ exp(−k²/(2σ²)) on the integers (CKS Algorithm 3).

    Args:
        sigma: σ in [2**-40, 2**40], taken exactly (a float means its exact binary value).
        size: Output shape.
        rng: Randomness (default: secure).

    Returns:
        int64 array.

    Example:
        >>> discrete_gaussian(0.5, 4, rng=0).dtype
        dtype('int64')
    """
    f = _check_scale(sigma, "sigma", "discrete_gaussian")
    shape, n = _size(size)
    return _dgauss_vec(as_random_source(rng), f, n).reshape(shape)


# ----------------------------------------------------------------------------------------------
# the noise laws
# ----------------------------------------------------------------------------------------------
_EM_COEF: dict[int, list[Any]] = {}


def _em_coefficients() -> list[Any]:
    """B_2k/(2k)! for k = 1.._EM_TERMS at the current mpmath precision (cached)."""
    key = mpmath.mp.prec
    if key not in _EM_COEF:
        _EM_COEF[key] = [mpmath.bernoulli(2 * k) / mpmath.factorial(2 * k)
                         for k in range(1, _EM_TERMS + 1)]
    return _EM_COEF[key]


def _param_dict(name: str, value: Fraction) -> dict[str, Any]:
    out: dict[str, Any] = {name: float(value)}
    if Fraction(float(value)) != value:
        out[f"{name}_exact"] = f"{value.numerator}/{value.denominator}"
    return out



def _on_integers(xf: np.ndarray, v: np.ndarray) -> np.ndarray:
    """A log mass ``v`` kept on the integers: ``-inf`` at other finite points, NaN at NaN."""
    with np.errstate(invalid="ignore"):
        integer = np.isfinite(xf) & (xf == np.floor(xf))
    return np.where(np.isnan(xf), np.nan, np.where(integer, v, -np.inf))

class _DiscreteNoise:
    """Shared behaviour of the symmetric integer noise laws."""

    name = "discrete"

    def logpmf(self, x: ArrayLike) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def _sf_int(self, k: np.ndarray) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def variance(self) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    def params(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _sample(self, src: RandomSource, n: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _mp_sf_int(self, k: int) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def _mp_coverage(self, h: int) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def pmf(self, x: ArrayLike) -> np.ndarray:
        """Probability mass at ``x`` (0 off the integers).

        Args:
            x: Points.

        Returns:
            Probabilities.

        Example:
            >>> float(DiscreteLaplaceNoise(1.0).pmf(0.5))
            0.0
        """
        with np.errstate(under="ignore"):
            return np.exp(self.logpmf(x))

    def _floor(self, x: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        xf = np.asarray(x, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            k = np.floor(np.clip(xf, -float(2**62), float(2**62)))
        return xf, k

    def sf(self, x: ArrayLike) -> np.ndarray:
        """Survival function ``P(Z > x)`` (exact sums; accurate in the upper tail).

        Args:
            x: Points (any real; the law lives on the integers).

        Returns:
            Tail probabilities.

        Example:
            >>> round(float(DiscreteLaplaceNoise(1.0).sf(-0.5)), 6)   # P(Z >= 0) = 1/(1+p)
            0.731059
        """
        xf, k = self._floor(x)
        kk = np.nan_to_num(k).astype(np.int64)
        pos = kk >= 0
        out = np.where(pos, self._sf_int(np.where(pos, kk, 0)),
                       1.0 - self._sf_int(np.where(pos, 0, -kk - 1)))
        return np.where(np.isnan(xf), np.nan, out)

    def cdf(self, x: ArrayLike) -> np.ndarray:
        """Distribution function ``P(Z <= x)`` (accurate in the lower tail by symmetry).

        Args:
            x: Points.

        Returns:
            Probabilities.

        Example:
            >>> round(float(DiscreteGaussianNoise(1.0).cdf(0)), 6)
            0.699471
        """
        xf, k = self._floor(x)
        kk = np.nan_to_num(k).astype(np.int64)
        neg = kk < 0
        out = np.where(neg, self._sf_int(np.where(neg, -kk - 1, 0)),
                       1.0 - self._sf_int(np.where(neg, 0, kk)))
        return np.where(np.isnan(xf), np.nan, out)

    def std(self) -> float:
        """Standard deviation.

        Example:
            >>> round(DiscreteGaussianNoise(10.0).std(), 9)
            10.0
        """
        return float(math.sqrt(self.variance()))

    def interval_halfwidth(self, level: float) -> int:
        """Smallest integer ``h`` with ``P(|Z| <= h) >= level`` (coverage is at least ``level``).

        The coverage is guaranteed: a float comparison decides clear cases, and whenever the float
        coverage is within a relative 1e-9 of the tail ``1 − level`` the exact coverage is computed
        in high precision (60 digits, mpmath) and compared with the exact binary value of
        ``level``; a difference below 1e-40 counts as *not* covered (the larger ``h`` is taken).

        Args:
            level: Coverage in (0, 1), e.g. 0.9.

        Returns:
            The half-width, an int.

        Example:
            >>> DiscreteGaussianNoise(1.0).interval_halfwidth(0.9)
            2
        """
        lv = check_real("level", level, owner=f"{type(self).__name__}.interval_halfwidth",
                        gt=0.0, lt=1.0, hint="use e.g. level=0.9 for a 90% interval")
        tail = 1.0 - lv

        def ok(h: int) -> bool:  # P(|Z| > h) = 2·P(Z > h) <= 1 − level
            out2 = 2.0 * float(self._sf_int(np.array([h], np.int64))[0])
            if out2 <= tail * (1.0 - _TIE_BAND):
                return True
            if out2 >= tail * (1.0 + _TIE_BAND):
                return False
            return self._covers_exactly(h, lv)

        h = max(0, self._halfwidth_guess(tail))
        while not ok(h):
            h += 1
        while h > 0 and ok(h - 1):
            h -= 1
        return h

    def _covers_exactly(self, h: int, level: float) -> bool:
        """Whether ``P(|Z| <= h) >= level`` in 60-digit arithmetic (ties within 1e-40: False)."""
        with mpmath.workdps(_MP_DPS):
            gap = self._mp_coverage(h) - mpmath.mpf(level)
            return bool(gap > mpmath.mpf(10) ** -40)

    def _halfwidth_guess(self, tail: float) -> int:  # pragma: no cover - overridden
        return 0

    def sample(self, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
        """Draw exact noise (see the module docstring for the exactness argument).

        Args:
            size: Output shape.
            rng: A [`RandomSource`][tabdp.RandomSource] (default: secure), int seed or numpy
                Generator.

        Returns:
            int64 array.

        Example:
            >>> DiscreteLaplaceNoise(1.0).sample(3, rng=0).dtype
            dtype('int64')
        """
        shape, n = _size(size)
        return self._sample(as_random_source(rng), n).reshape(shape)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _DiscreteNoise) and type(self) is type(other) and (
            self.params() == other.params())

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.params().items()))))


class DiscreteLaplaceNoise(_DiscreteNoise):
    """Discrete Laplace law on the integers: P(k) = (1−p)/(1+p)·p^|k| with p = exp(−1/scale).

    Args:
        scale: Scale in [2**-40, 2**40]: int, ``Fraction`` or float (taken exactly: the law
            sampled is the one of the float's exact binary value).

    Example:
        >>> z = DiscreteLaplaceNoise(scale=2.0)
        >>> round(z.variance(), 6)     # 2p/(1-p)^2, p = exp(-1/2)
        7.835396
    """

    name = "discrete_laplace"

    def __init__(self, scale: Any) -> None:
        """Check ``scale`` and keep it as an exact rational."""
        self.scale_exact = _check_scale(scale, "scale", "DiscreteLaplaceNoise")
        self.scale = float(self.scale_exact)
        self._inv = 1.0 / self.scale
        self._p = math.exp(-self._inv)
        self._log1mp = math.log(-math.expm1(-self._inv))  # log(1 − p)
        self._log1pp = math.log1p(self._p)

    def logpmf(self, x: ArrayLike) -> np.ndarray:
        """Log mass: log((1−p)/(1+p)) − |x|/scale on the integers, −inf elsewhere.

        Args:
            x: Points.

        Returns:
            Log probabilities.

        Example:
            >>> round(float(DiscreteLaplaceNoise(1.0).logpmf(0)), 6)
            -0.771937
        """
        xf = np.asarray(x, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            v = self._log1mp - self._log1pp - np.abs(xf) * self._inv
        return _on_integers(xf, v)

    def _sf_int(self, k: np.ndarray) -> np.ndarray:
        with np.errstate(under="ignore"):
            return np.exp(-(np.asarray(k, np.float64) + 1.0) * self._inv - self._log1pp)

    def variance(self) -> float:
        """Variance 2p/(1−p)², p = exp(−1/scale) (closed form).

        Example:
            >>> round(DiscreteLaplaceNoise(1.0).variance(), 6)
            1.841347
        """
        one_minus_p = -math.expm1(-self._inv)
        return 2.0 * self._p / (one_minus_p * one_minus_p)

    def _halfwidth_guess(self, tail: float) -> int:
        # 2 p^(h+1)/(1+p) <= tail  <=>  h + 1 >= scale·log(2/(tail·(1+p)))
        g = self.scale * (math.log(2.0 / tail) - self._log1pp)
        return int(min(math.ceil(g) - 1, 2**62))

    def _mp_scale(self) -> Any:
        """The exact scale as an mpf at the current mpmath precision."""
        return mpmath.mpf(self.scale_exact.numerator) / self.scale_exact.denominator

    def _mp_sf_int(self, k: int) -> Any:
        """``P(Z > k)`` for an integer ``k`` at the current mpmath precision (closed form)."""
        inv = 1 / self._mp_scale()
        p = mpmath.exp(-inv)
        if k >= 0:  # p^(k+1)/(1+p)
            return mpmath.exp(-(k + 1) * inv) / (1 + p)
        return 1 - mpmath.exp(k * inv) / (1 + p)  # 1 − P(Z >= −k)

    def _mp_coverage(self, h: int) -> Any:
        """``P(|Z| <= h) = ((1−p) + 2p(1−p^h))/(1+p)`` without cancellation (mpmath)."""
        inv = 1 / self._mp_scale()
        p = mpmath.exp(-inv)
        return (-mpmath.expm1(-inv) - 2 * p * mpmath.expm1(-h * inv)) / (1 + p)

    def _sample(self, src: RandomSource, n: int) -> np.ndarray:
        return _dlap_vec(src, self.scale_exact.numerator, self.scale_exact.denominator, n)

    def params(self) -> dict[str, Any]:
        """Public parameters (``scale``; ``scale_exact`` too when it is not a float).

        Example:
            >>> DiscreteLaplaceNoise(2.0).params()
            {'scale': 2.0}
            >>> DiscreteLaplaceNoise(Fraction(1, 3)).params()["scale_exact"]
            '1/3'
        """
        return _param_dict("scale", self.scale_exact)


class DiscreteGaussianNoise(_DiscreteNoise):
    """Discrete Gaussian law on the integers: P(k) ∝ exp(−k²/(2σ²)) (CKS 2020).

    σ is the *parameter* of the law; its standard deviation is slightly below σ for σ < 1 and
    equal to σ to double precision for σ ≥ 2
    ([`variance`][tabdp.noise.DiscreteGaussianNoise.variance]).

    Args:
        sigma: σ in [2**-40, 2**40]: int, ``Fraction`` or float (taken exactly).

    Example:
        >>> z = DiscreteGaussianNoise(sigma=0.5)
        >>> round(z.std(), 6), round(float(z.pmf(0)), 6)
        (0.463695, 0.786571)
    """

    name = "discrete_gaussian"

    def __init__(self, sigma: Any) -> None:
        """Check ``sigma`` and keep it (and σ²) as exact rationals."""
        self.sigma_exact = _check_scale(sigma, "sigma", "DiscreteGaussianNoise")
        self.sigma = float(self.sigma_exact)
        self.sigma2_exact = self.sigma_exact * self.sigma_exact
        self._s2 = float(self.sigma2_exact)
        self._length = math.ceil(39.0 * self.sigma) + 2  # f(y) underflows beyond 38.6σ
        self._table = self._length <= _TABLE_MAX
        self._tab: tuple[np.ndarray, np.ndarray] | None = None
        self._mp_cache: dict[int, tuple[Any, Any, Any]] = {}
        if self.sigma >= 1.0:  # Poisson summation: Σ_Z f = σ√(2π)·(1 + 2Σ_k exp(−2π²σ²k²))
            theta = sum(math.exp(-2.0 * (math.pi * self.sigma * k) ** 2) for k in range(1, 4))
            self._norm = self.sigma * _SQRT_2PI * (1.0 + 2.0 * theta)
        else:  # direct summation (terms below 1e-330 beyond 39σ)
            y = np.arange(1, self._length + 1, dtype=np.float64)
            with np.errstate(under="ignore"):
                self._norm = 1.0 + 2.0 * math.fsum(np.exp(-(y * y) / (2.0 * self._s2)).tolist())
        self._lognorm = math.log(self._norm)

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        """f(y) = exp(−y²/(2σ²)) and T(m) = Σ_{y ≥ m} f(y) for y, m in 0..39σ (built on demand)."""
        if self._tab is None:
            y = np.arange(self._length + 1, dtype=np.float64)
            with np.errstate(under="ignore"):
                f = np.exp(-(y * y) / (2.0 * self._s2))
            # summed from the far tail in extended precision: accurate tails
            tail = np.cumsum(f[::-1].astype(np.longdouble))[::-1].astype(np.float64)
            self._tab = (f, np.append(tail, 0.0))
        return self._tab

    def _tail(self, m: np.ndarray) -> np.ndarray:
        """T(m) = Σ_{y ≥ m} exp(−y²/(2σ²)) for integers m >= 0."""
        m = np.asarray(m, np.int64)
        if self._table:
            tail = self._tables()[1]
            return tail[np.clip(m, 0, tail.size - 1)]
        # Euler–Maclaurin (σ > 5e4): ∫ + f/2 − f'/12 + f'''/720 − f^(5)/30240; later terms and
        # the remainder are below 1e-25 relative.
        s = self.sigma
        x = m.astype(np.float64) / s
        with np.errstate(under="ignore", over="ignore", invalid="ignore"):
            f = np.exp(-0.5 * x * x)
            he3 = x**3 - 3.0 * x
            he5 = x**5 - 10.0 * x**3 + 15.0 * x
            corr = 0.5 + x / (12.0 * s) - he3 / (720.0 * s**3) + he5 / (30240.0 * s**5)
            out = s * _SQRT_2PI * special.ndtr(-x) + f * corr
        return np.where(x > 40.0, 0.0, out)

    def logpmf(self, x: ArrayLike) -> np.ndarray:
        """Log mass −x²/(2σ²) − log N on the integers (N the normalizer), −inf elsewhere.

        Args:
            x: Points.

        Returns:
            Log probabilities.

        Example:
            >>> round(float(DiscreteGaussianNoise(1.0).logpmf(1)), 6)
            -1.418939
        """
        xf = np.asarray(x, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            v = -(xf * xf) / (2.0 * self._s2) - self._lognorm
        return _on_integers(xf, v)

    def _sf_int(self, k: np.ndarray) -> np.ndarray:
        return self._tail(np.asarray(k, np.int64) + 1) / self._norm

    def variance(self) -> float:
        """Variance Σk²·P(k): direct summation (σ ≤ 5e4), else Poisson summation (= σ²).

        Example:
            >>> round(DiscreteGaussianNoise(1.0).variance(), 9)
            0.999999789
        """
        if self._table:
            f = self._tables()[0]
            y = np.arange(f.size, dtype=np.float64)
            return float(2.0 * np.sum(y * y * f) / self._norm)
        return self._s2

    def _halfwidth_guess(self, tail: float) -> int:
        return int(math.floor(self.sigma * -float(special.ndtri(0.5 * tail))))

    # -- high precision (mpmath) -------------------------------------------------------------
    def _mp_consts(self) -> tuple[Any, Any, Any]:
        """σ, σ² and the normalizer N = Σ_Z exp(−y²/(2σ²)) at the current mpmath precision."""
        key = mpmath.mp.prec
        hit = self._mp_cache.get(key)
        if hit is None:
            s = mpmath.mpf(self.sigma_exact.numerator) / self.sigma_exact.denominator
            s2 = mpmath.mpf(self.sigma2_exact.numerator) / self.sigma2_exact.denominator
            if self.sigma >= 1.0:  # Poisson summation (exact; terms k > 3 below 1e-137)
                pi2 = mpmath.pi**2
                theta = mpmath.fsum(mpmath.exp(-2 * pi2 * s2 * k * k) for k in range(1, 4))
                norm = s * mpmath.sqrt(2 * mpmath.pi) * (1 + 2 * theta)
            else:
                norm = 1 + 2 * self._mp_tail_direct(1, s2)
            hit = (s, s2, norm)
            self._mp_cache[key] = hit
        return hit

    @staticmethod
    def _mp_tail_direct(m: int, s2: Any) -> Any:
        """Σ_{y ≥ m} exp(−y²/(2σ²)) for m >= 0 by direct summation (neglected part bounded)."""
        two_s2 = 2 * s2
        term = mpmath.exp(-mpmath.mpf(m * m) / two_s2)
        ratio = mpmath.exp(-mpmath.mpf(2 * m + 1) / two_s2)  # f(y+1)/f(y) at y = m
        q = mpmath.exp(-2 / two_s2)  # the ratio shrinks by q at each step
        tol = mpmath.ldexp(1, -(mpmath.mp.prec + 8))
        tot = mpmath.mpf(0)
        while True:
            tot += term
            term *= ratio
            ratio *= q
            # later terms decrease at least geometrically with ratio <= ratio: rest <= term/(1−r)
            if ratio < 1 and term <= tot * tol * (1 - ratio):
                return tot

    def _mp_tail(self, m: int) -> Any:
        """T(m) = Σ_{y ≥ m} exp(−y²/(2σ²)) for an integer m >= 0 (current mpmath precision)."""
        s, s2, _ = self._mp_consts()
        if self.sigma < _EM_MIN_SIGMA or 8 * m > s2:
            return self._mp_tail_direct(m, s2)
        # Euler–Maclaurin: ∫_m^∞ f + f(m)/2 − Σ_k B_2k/(2k)!·f^(2k−1)(m), with
        # f^(j)(m) = (−1/σ)^j He_j(x) f(m), x = m/σ.
        x = mpmath.mpf(m) / s
        f = mpmath.exp(-x * x / 2)
        tot = s * mpmath.sqrt(2 * mpmath.pi) * mpmath.ncdf(-x) + f / 2
        he_prev, he = mpmath.mpf(1), x  # He_0, He_1
        inv_s = 1 / s
        inv_s2 = inv_s * inv_s
        pw = inv_s * f  # σ^−j·f(m)
        tol = mpmath.ldexp(tot, -(mpmath.mp.prec + 8))
        for k, coef in enumerate(_em_coefficients(), start=1):
            j = 2 * k - 1
            term = coef * pw * he
            tot += term
            if abs(term) < tol and k >= 2:  # the terms shrink like (x/(2πσ))²: negligible
                break
            # advance He_j -> He_{j+2}: He_{n+1} = x He_n − n He_{n−1}
            he_next = x * he - j * he_prev
            he_prev, he = he_next, x * he_next - (j + 1) * he
            pw *= inv_s2
        return tot

    def _mp_sf_int(self, k: int) -> Any:
        """``P(Z > k)`` for an integer ``k`` at the current mpmath precision."""
        norm = self._mp_consts()[2]
        if k >= 0:
            return self._mp_tail(k + 1) / norm
        return 1 - self._mp_tail(-k) / norm  # 1 − P(Z >= −k)

    def _mp_coverage(self, h: int) -> Any:
        """``P(|Z| <= h) = 1 − 2·T(h+1)/N`` (mpmath)."""
        norm = self._mp_consts()[2]
        return 1 - 2 * self._mp_tail(h + 1) / norm

    def _sample(self, src: RandomSource, n: int) -> np.ndarray:
        return _dgauss_vec(src, self.sigma_exact, n)

    def params(self) -> dict[str, Any]:
        """Public parameters (``sigma``; ``sigma_exact`` too when it is not a float).

        Example:
            >>> DiscreteGaussianNoise(1.5).params()
            {'sigma': 1.5}
        """
        return _param_dict("sigma", self.sigma_exact)
