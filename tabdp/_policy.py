"""The per-row privacy policy of one release, in NumPy: what every engine charges a record.

`Policy` gives a release's per-record ρ, ε (and ε_a, δ_a for approximate-DP mechanisms) from a
record's contribution; `magnitudes_up`, `size_and_delta` and `policy_values` turn fixed-point
contributions into the policy's sizes and values. The Polars engine (in memory and streaming)
and Spark's Python workers (`tabdp._spark_worker`) use these same functions, so every backend
charges identical losses. NumPy only: importing this module loads neither pandas nor Polars.

Example:
    >>> import numpy as np
    >>> from tabdp.mechanisms import Laplace
    >>> [round(float(v[0]), 6) for v in Policy(Laplace(scale=1.0), ["x"])(np.array([2.0]))]
    [1.523188, 2.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    from tabdp.mechanisms import Mechanism

#: A count's per-row losses are read from a table of the policy at every whole Δ when every Δ
#: is a whole number below this (`policy_values`).
COUNT_TABLE = 1 << 16


class Policy:
    """Per-record policy of one release: ρ, ε and (approximate-DP mechanisms) ε_a, δ_a.

    A joint (vector) mechanism charges a unit once per cell at the norm of its weighted
    contribution vector; other mechanisms charge once per measure.

    Example:
        >>> from tabdp.mechanisms import Laplace
        >>> p = Policy(Laplace(scale=2.0), ["x"])
        >>> p.currencies(), [round(float(v[0]), 6) for v in p(np.array([4.0]))]
        ([('x', ['x'])], [1.523188, 2.0])
    """

    def __init__(self, mechanism: Mechanism, measures: list[str]) -> None:
        from tabdp.mechanisms.additive import AdditiveMechanism
        from tabdp.privacy.ledger import UnitLosses

        self.mechanism = mechanism
        self.measures = measures
        self.joint = bool(getattr(mechanism, "joint", False)) and len(measures) > 0
        self.approx = mechanism.dp_delta is not None
        self.guarantee = UnitLosses.guarantee_of(mechanism)
        # an additive mechanism that keeps the inherited ρ = pure_to_zcdp(ε): ε computed once
        self.rho_from_epsilon = type(mechanism).rho is AdditiveMechanism.rho

    def currencies(self) -> list[tuple[str, list[str]]]:
        """(currency, measures charged at once) of the release.

        Returns:
            One (currency, measures) pair per currency.
        """
        from tabdp.privacy.budget import ROWS_CURRENCY, joint_currency

        if not self.measures:
            return [(ROWS_CURRENCY, [])]
        if self.joint:
            return [(joint_currency(self.measures), list(self.measures))]
        return [(m, [m]) for m in self.measures]

    def __call__(self, d: np.ndarray) -> tuple[np.ndarray, ...]:
        if self.rho_from_epsilon:  # the same operations as rho(d), with ε evaluated once
            from tabdp.mechanisms import pure_to_zcdp

            e = self.mechanism.epsilon(d)
            r = pure_to_zcdp(e)
        else:
            r, e = self.mechanism.rho(d), self.mechanism.epsilon(d)
        if not self.approx:
            return np.asarray(r, dtype=np.float64), np.asarray(e, dtype=np.float64)
        ea, da = self.mechanism.approx_policy(d)
        return (np.asarray(r, dtype=np.float64), np.asarray(e, dtype=np.float64),
                np.asarray(ea, dtype=np.float64), np.asarray(da, dtype=np.float64))


def magnitudes_up(a: np.ndarray, bits: int) -> np.ndarray:
    """``a``·2**-bits, moved one double up where ``a`` (a float conversion) may have rounded.

    ``a`` holds the float64 conversions of whole magnitudes |v| (fixed point: v·2**bits is an
    integer, here converted to float): an integer below 2**53 converts exactly (to a float
    below 2**53) and one at or above it to a float at or above it (rounding is monotone, 2**53
    is a double), so the float tells which magnitudes were rounded, with no second pass over
    the 128-bit integers. Shared by the Polars engine and Spark's charges.

    Args:
        a: Float conversions of the magnitudes' fixed-point integers (≥ 0).
        bits: The fixed point's fractional bits.

    Returns:
        Magnitudes never below the exact ones (a new array).

    Example:
        >>> up = magnitudes_up(np.array([3.0, 2.0**60]), 1)
        >>> up[0], bool(up[1] == np.nextafter(2.0**59, np.inf))
        (np.float64(1.5), True)
    """
    f = a * (2.0 ** -bits)
    big = np.flatnonzero(a >= 2.0**53)
    if big.size:  # only those moved up (libm's nextafter is a call per value)
        f[big] = np.nextafter(f[big], np.inf)
    return f


def size_and_delta(policy: Policy, ms: list[str], mags: dict[str, np.ndarray],
                   sign: Callable[[str], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a sum currency: its size (largest magnitude) and the Δ its loss is charged at.

    ``mags`` holds each measure's float64 magnitude (never below the exact one), ``sign(m)`` the
    signs of measure ``m`` (read only for a joint policy, whose Δ is the mechanism's norm of the
    signed magnitudes, rounded up). Shared by the Polars engine and the Spark UDF.

    Args:
        policy: The release's policy.
        ms: The measures charged at once (one, or a joint policy's).
        mags: Each measure's magnitudes.
        sign: The signs of a measure's values.

    Returns:
        The rows' sizes and their Δ.

    Example:
        >>> from tabdp.mechanisms import Laplace
        >>> s, d = size_and_delta(Policy(Laplace(scale=1.0), ["x"]), ["x"],
        ...                       {"x": np.array([3.0])}, lambda m: np.ones(1))
        >>> s.tolist(), d.tolist()
        ([3.0], [3.0])
    """
    size = np.zeros(len(mags[ms[0]]))
    for c in mags.values():
        np.maximum(size, c, out=size)
    if not policy.joint:
        return size, mags[ms[0]]
    signed = {m: sign(m) * mags[m] for m in ms}
    delta = np.asarray(policy.mechanism.norm(signed),  # type: ignore[attr-defined]
                       dtype=np.float64)
    # the norm is computed in float64 (a few roundings per measure) and may fall below the exact
    # norm by some ulps: round it up (len(ms) + 8 ulps, above the rounding error of the norm) so
    # no charge is below the exact one (e.g. (2**53 - 1) + 2 was summed to 2**53)
    slack = 1.0 + (len(ms) + 8) * 2.0**-52
    return size, np.where(delta > 0, np.nextafter(delta * slack, np.inf), delta)


def policy_values(policy: Policy, kind: str, delta: np.ndarray) -> tuple[np.ndarray, ...]:
    """The policy's per-row losses (ρ, ε and, if approximate, ε_a, δ_a) at each row's Δ.

    Counts have few distinct Δ (row numbers; all 1 in row mode): each is evaluated once, or,
    for whole Δ below `COUNT_TABLE`, every whole number from the least Δ to the largest once
    and each row's value read from that table (no hashing of the rows). Shared by the Polars
    engine and the Spark UDF.

    Args:
        policy: The release's policy.
        kind: ``"count"`` or a sum's kind.
        delta: Each row's Δ.

    Returns:
        The per-row losses, one array per component.

    Example:
        >>> from tabdp.mechanisms import Laplace
        >>> p = Policy(Laplace(scale=1.0), [])
        >>> [v.tolist() for v in policy_values(p, "count", np.array([1.0, 2.0, 1.0]))][1]
        [1.0, 2.0, 1.0]
    """
    n = len(delta)
    if not n:
        return tuple(np.zeros(0) for _ in range(4 if policy.approx else 2))
    if kind == "count":
        lo, hi = float(delta.min()), float(delta.max())
        if lo == hi:
            return tuple(np.full(n, float(np.asarray(v)[0])) for v in policy(delta[:1]))
        if lo >= 0 and hi < COUNT_TABLE and lo.is_integer():
            pos = delta.astype(np.intp)
            if bool(np.array_equal(pos, delta)):  # whole numbers
                out = []
                for v in policy(np.arange(int(lo), int(hi) + 1, dtype=np.float64)):
                    table = np.zeros(int(hi) + 1)
                    table[int(lo):] = v
                    out.append(table[pos])
                return tuple(out)
        import polars as pl  # only here: a worker's charges rarely reach this branch

        # the distinct values by hashing (np.unique sorts every row), then a binary search
        uniq = np.sort(pl.Series(delta).unique().to_numpy())
        inv = np.searchsorted(uniq, delta)
        return tuple(np.asarray(v)[inv] for v in policy(uniq))
    return policy(delta)


# -- the functions shipped to the workers -------------------------------------------------------
