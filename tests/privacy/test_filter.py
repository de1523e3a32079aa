"""The individual filter (`tabdp.privacy.filter`): its shortcuts decide as the full rule does."""

from __future__ import annotations

import numpy as np
import pytest

from tabdp.privacy.budget import Budget
from tabdp.privacy.filter import _within_curve


@pytest.mark.parametrize("seed", range(6))
def test_a_curve_is_evaluated_only_where_it_can_decide_with_the_same_answers(seed: int) -> None:
    """`_within_curve` gives ``total <= limit(size)`` for every unit, at and around every limit.

    Random non-decreasing curves (flat stretches included), sizes below, between, on and
    beyond the points, 0, negative, inf and NaN; totals on the least limit, one ulp either
    side of each unit's own limit, NaN and inf.
    """
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 6))
    sizes = np.sort(rng.choice(np.logspace(-2, 9, 200), k, replace=False))
    limits = np.maximum.accumulate(rng.choice([0.1, 0.5, 0.5, 2.0, 7.5, 40.0], k))
    b = Budget(dict(zip(sizes.tolist(), limits.tolist(), strict=True)))
    n = 4000
    size = np.concatenate([rng.choice(sizes, 500), 10.0 ** rng.uniform(-4, 11, n - 508),
                           [0.0, -5.0, -1e12, np.inf, -np.inf, np.nan, np.nan, 1e-320]])
    own = b.limit(size, "x")
    pick = rng.integers(0, 5, n)  # each unit's total: one of five kinds
    total = np.select(
        [pick == 0, pick == 1, pick == 2, pick == 3],
        [np.full(n, limits[0]), np.nextafter(own, np.inf), np.nextafter(own, -np.inf), own],
        rng.uniform(0.0, 2 * limits[-1], n))
    total[rng.choice(n, 20, replace=False)] = np.nan
    total[rng.choice(n, 20, replace=False)] = np.inf
    want = total <= b.limit(size, "x")
    got = _within_curve(b, "x", total, size)
    assert got.dtype == bool and got.shape == want.shape
    assert np.array_equal(got, want)
    # the least limit is the curve's minimum over every size
    assert b.least_limit("x") == float(np.nanmin(b.limit(size, "x")))


def test_a_constant_budgets_least_limit_is_the_constant() -> None:
    assert Budget(0.7).least_limit("anything") == 0.7
