"""Reference for the totals of losses: left-to-right sums rounded up where inexact.

Every total of losses tabdp reports or compares with a budget is a left-to-right sum whose
additions round up where ``fl(a + b)`` is below ``a + b`` (``tabdp._numeric.add_up``): one or
two doubles up, by the product with ``1 + 2**-52``. This reference decides each rounding with
exact rationals, independently of the engine's error-free transformation.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction


def add_up_ref(a: float, b: float) -> float:
    """``fl(a + b)``, times ``1 + 2**-52`` where it is below the exact sum (a, b >= 0)."""
    s = a + b
    if Fraction(s) < Fraction(a) + Fraction(b):
        s *= 1.0 + 2.0**-52
    return s


def sum_up_ref(terms: Iterable[float], start: float | None = None) -> float:
    """Left-to-right sum of ``terms`` by `add_up_ref` (from the first term, or ``start``)."""
    total = start
    for t in terms:
        total = float(t) if total is None else add_up_ref(total, float(t))
    return 0.0 if total is None else total
