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


def test_constant_budget_decides_like_the_rounded_up_sum_and_adds_only_near_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`constant_admits` on arrays: the booleans of ``add_up(prior, new) <= limit``, exactly.

    It computes the rounded-up sum only where the plain sum cannot decide (within a few ulps
    below the limit, or negative): sums at the limit's last bits, inexact sums rounding down
    to the limit, -0.0, subnormal, infinite and NaN losses and an infinite limit all decide as
    the definition does.
    """
    import tabdp.privacy.filter as filt
    from tabdp._numeric import add_up

    seen = {"n": 0}

    def counted(a, b):
        seen["n"] += np.size(a)
        return add_up(a, b)

    rng = np.random.default_rng(64)
    for limit in (1.0, 0.3, 1e-300, 7.5e300, np.inf):
        n = 20_000
        prior = rng.uniform(0.0, 1.5 * limit if np.isfinite(limit) else 1.0, n)
        new = np.abs(rng.normal(0.0, 0.1 * (limit if np.isfinite(limit) else 1.0), n))
        edge = rng.random(n) < 0.3  # sums at the limit: the limit split, plus a few ulps
        if np.isfinite(limit):
            part = rng.uniform(0.0, limit, n)
            prior[edge] = part[edge]
            new[edge] = (limit - part[edge]) + rng.choice([-1, 0, 1, 2], n)[edge] * \
                np.spacing(limit) * rng.choice([0.0, 0.25, 0.5, 1.0], n)[edge]
        new[rng.random(n) < 0.01] = 2.0**-60 * (limit if np.isfinite(limit) else 1.0)
        for v, share in ((np.nan, 0.01), (np.inf, 0.01), (-0.0, 0.02), (5e-324, 0.02)):
            new[rng.random(n) < share] = v
            prior[rng.random(n) < share] = v
        want = add_up(prior, new) <= limit
        monkeypatch.setattr(filt, "add_up", counted)
        seen["n"] = 0
        got = filt.constant_admits(limit, [new], prior, np.zeros(n))
        monkeypatch.setattr(filt, "add_up", add_up)
        assert got.dtype == bool and np.array_equal(got, want), limit
        # the rounded-up sum only for the units the plain sum leaves undecided
        assert seen["n"] < n // 2, (limit, seen["n"])
        # several currencies: their sum rounded up first, as before
        two = filt.constant_admits(limit, [new * 0.5, new * 0.5], prior, np.zeros(n))
        assert np.array_equal(two, add_up(prior, add_up(new * 0.5, new * 0.5)) <= limit)


def test_constant_budget_decides_float32_and_integer_losses_as_the_rounded_up_double_sum(
        ) -> None:
    """Losses that are not float64: the decision of ``add_up`` (float64) itself.

    The plain-sum shortcut added float32 arrays in float32 (0.5 + (0.5 + 2**-24) rounded to
    1.0: a unit over a budget of 1.0 admitted) and multiplied integer arrays in place (a
    NumPy casting error); `add_up` converts both to float64 first.
    """
    from tabdp._numeric import add_up
    from tabdp.privacy.filter import constant_admits

    prior = np.array([0.5, 0.25], dtype=np.float32)
    new = np.array([0.5 + 2.0**-24, 0.5], dtype=np.float32)
    want = add_up(prior, new) <= 1.0
    assert want.tolist() == [False, True]
    assert constant_admits(1.0, [new], prior, np.zeros(2)).tolist() == want.tolist()
    ints = constant_admits(3.0, [np.array([1, 3])], np.array([2, 0]), np.zeros(2))
    assert ints.tolist() == (add_up(np.array([2, 0]), np.array([1, 3])) <= 3.0).tolist()
