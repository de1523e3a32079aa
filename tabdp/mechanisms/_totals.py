"""Exact cell totals handed from the frame layer to the mechanisms.

A cell total is summed exactly inside the engine, in fixed point: every value is an integer
multiple of ``2**-scale_bits`` (integer measures with ``scale_bits = 0``), so the total is an
integer numerator, independent of the order of summation. The mechanisms receive the totals as
an [`ExactTotals`][tabdp.mechanisms.ExactTotals]: a float64 view (``approx``, the nearest double of
each total, with an error bound ``error``) for everything that only needs a close value, and the
exact rationals ([`ExactTotals.fraction`][tabdp.mechanisms.ExactTotals.fraction],
[`ExactTotals.mp`][tabdp.mechanisms.ExactTotals.mp]) for the places where the released value depends
on the centre exactly (exact rounding of ``total + noise``).

Why it matters: two neighbouring datasets differ by one unit's contribution ``Δ``. If the total
were rounded to float64 before the noise is added, the released centres could differ by
``Δ + ulp(total)``: a unit whose ``Δ`` is far below ``ulp(total)`` would move the output by a
whole ulp while being charged for ``Δ`` (Casacuberta, Shoemate, Vadhan and Wagaman, "Widespread
Underestimation of Sensitivity in Differentially Private Libraries and How to Fix It", CCS 2022,
arXiv:2207.10635). With exact centres the released distribution moves by exactly ``Δ``.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["ExactTotals"]


def pl_int64() -> Any:
    import polars as pl

    return pl.Int64


def pl_float64() -> Any:
    import polars as pl

    return pl.Float64


def _nearest(k: int, scale_bits: int) -> tuple[float, float]:
    """The float64 nearest ``k·2**-scale_bits`` and a safe bound on its error."""
    f = Fraction(k, 1 << scale_bits)
    x = float(f)  # correctly rounded (Fraction.__float__ divides exactly)
    if Fraction(x) == f:
        return x, 0.0
    err = abs(float(Fraction(x) - f))
    return x, float(np.nextafter(err, np.inf))  # safe against the rounding of the subtraction


class ExactTotals:
    """Exact totals ``numer[i] · 2**-scale_bits`` with their nearest float64 values.

    Args:
        numer: Integer numerators (Python ints of any size), one per cell.
        scale_bits: The fixed-point scale: total i is ``numer[i] / 2**scale_bits`` (``>= 0``).

    Example:
        >>> t = ExactTotals([3, 2**80 + 1], scale_bits=1)
        >>> t.approx.tolist(), t.fraction(0)
        ([1.5, 6.044629098073146e+23], Fraction(3, 2))
        >>> bool(t.error[0] == 0.0), bool(t.error[1] > 0.0), len(t)
        (True, True, 2)
        >>> np.asarray(t).dtype.name
        'float64'
    """

    __array_priority__ = 1000

    def __init__(self, numer: Sequence[int] | Any, scale_bits: int = 0) -> None:
        if isinstance(scale_bits, bool) or not isinstance(scale_bits, int) or scale_bits < 0:
            raise ValueError(f"ExactTotals: scale_bits must be an int >= 0; got {scale_bits!r}")
        self.scale_bits = scale_bits
        self._numer_py: list[int] | None = None
        self._series: Any = None
        if hasattr(numer, "dtype") and hasattr(numer, "to_list") and hasattr(numer, "abs"):
            # a Polars integer Series (Int128 from the engine): only totals beyond 2**53 go
            # through Python integers
            series: Any = numer
            self._series = series
            n = len(series)
            small = (series.abs() < (1 << 53)).fill_null(True).to_numpy()
            approx = np.zeros(n)
            vals = series.cast(pl_float64(), strict=False).fill_null(0.0).to_numpy()
            approx[small] = vals[small] * (2.0 ** -scale_bits)
            error = np.zeros(n)
            big = np.flatnonzero(~small)
            if big.size:
                bigvals = series.gather(big).to_list()
                for b, k in zip(big, bigvals, strict=True):
                    approx[b], error[b] = _nearest(int(k), scale_bits)
            self.approx, self.error = approx, error
            return
        self._numer_py = [int(v) for v in numer]
        n = len(self._numer_py)
        approx = np.empty(n)
        error = np.zeros(n)
        for i, k in enumerate(self._numer_py):
            approx[i], error[i] = _nearest(k, scale_bits)
        self.approx = approx
        self.error = error

    @property
    def numer(self) -> list[int]:
        """The integer numerators (Python ints).

        Example:
            >>> ExactTotals([5, -3], 1).numer
            [5, -3]
        """
        if self._numer_py is None:
            self._numer_py = [int(v) if v is not None else 0 for v in self._series.to_list()]
        return self._numer_py

    def int64_numer(self, bound: int) -> np.ndarray | None:
        """The numerators as an int64 array if every one lies in ``[-bound, bound]``, else None.

        ``bound`` must be below ``2**63``. Read from the engine's integer column without Python
        integers (None where they were given as Python integers, or any is out of range).

        Args:
            bound: The largest magnitude accepted.

        Returns:
            The numerators (missing ones 0, as `numer`), or None.

        Example:
            >>> import polars as pl
            >>> ExactTotals(pl.Series([5, None, -3], dtype=pl.Int128)).int64_numer(2**61).tolist()
            [5, 0, -3]
            >>> ExactTotals([5]).int64_numer(2**61) is None
            True
        """
        s = self._series
        if s is None or not s.dtype.is_signed_integer():
            return None
        s = s.fill_null(0)
        if len(s) and not bool(((s >= -bound) & (s <= bound)).all()):
            return None
        return np.asarray(s.cast(pl_int64()).to_numpy(), dtype=np.int64)

    @classmethod
    def from_floats(cls, values: Any) -> ExactTotals:
        """Totals that are already exact doubles (each float64 is a dyadic rational).

        Args:
            values: Finite float64 values.

        Returns:
            The exact totals of those doubles.

        Example:
            >>> ExactTotals.from_floats([0.5, 3.0]).fraction(0)
            Fraction(1, 2)
        """
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(v)):
            raise ValueError("ExactTotals.from_floats: values must be finite")
        fr = [Fraction(float(x)) for x in v]
        bits = max((f.denominator.bit_length() - 1 for f in fr), default=0)
        return cls([f.numerator * ((1 << bits) // f.denominator) for f in fr], bits)

    def __len__(self) -> int:
        return int(self.approx.size)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.approx if dtype is None else self.approx.astype(dtype)

    @property
    def exact_everywhere(self) -> bool:
        """Whether every total is exactly its float64 value.

        Example:
            >>> ExactTotals([1, 2]).exact_everywhere
            True
        """
        return not bool(np.any(self.error))

    def fraction(self, i: int) -> Fraction:
        """Total ``i`` as an exact rational.

        Args:
            i: Cell index.

        Returns:
            The exact total.

        Example:
            >>> ExactTotals([-7], 2).fraction(0)
            Fraction(-7, 4)
        """
        return Fraction(self._at(i), 1 << self.scale_bits)

    def mp(self, i: int, mp: Any) -> Any:
        """Total ``i`` as an mpmath number at ``mp``'s working precision (correctly rounded).

        Args:
            i: Cell index.
            mp: An mpmath context.

        Returns:
            An ``mpf`` within half an ulp of the working precision of the exact total.

        Example:
            >>> import mpmath
            >>> with mpmath.workprec(100):
            ...     ExactTotals([2**70 + 1], 1).mp(0, mpmath.mp) * 2 == 2**70 + 1
            True
        """
        return mp.mpf(self._at(i)) / mp.mpf(2) ** self.scale_bits

    def _at(self, i: int) -> int:
        if self._numer_py is not None:
            return self._numer_py[i]
        v = self._series[int(i)]
        return 0 if v is None else int(v)

    def __repr__(self) -> str:
        return f"ExactTotals(n={len(self)}, scale_bits={self.scale_bits})"
