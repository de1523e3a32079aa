"""Smooth sensitivity of medians and quantiles (MATH.md §3.1), against brute force.

The brute force uses only the definitions: on an integer grid, every multiset of size n is a node,
replacing one value is an edge, distances are breadth-first (unweighted shortest paths), LS is the
largest change of the order statistic over all neighbours and SS = max_{D′} LS(D′)·e^{−γ·d(D,D′)}.
Restricting neighbours to the grid is exact for integer data: extreme replacements are lo, hi or
existing values.
"""

from __future__ import annotations

import itertools
import math
from functools import cache

import numpy as np
import pytest
from _loop import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from tabdp.exceptions import DataValidationError, InvalidParameterError
from tabdp.sensitivity import (
    group_sort,
    grouped_quantile,
    quantile_rank,
    smooth_sensitivity_grouped,
    smooth_sensitivity_median,
    smooth_sensitivity_quantile,
)

QS = [0.5, 0.25, 0.9, 0.0, 1.0]


# -- brute force --------------------------------------------------------------------------------
@cache
def multiset_graph(n: int, levels: int) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """All multisets of size n over {0..levels−1} and their replacement distances (BFS)."""
    nodes = list(itertools.combinations_with_replacement(range(levels), n))
    index = {m: i for i, m in enumerate(nodes)}
    rows, cols = [], []
    for i, m in enumerate(nodes):
        for j in range(n):
            for v in range(levels):
                nb = tuple(sorted(m[:j] + (v,) + m[j + 1:]))
                if nb != m:
                    rows.append(i)
                    cols.append(index[nb])
    adj = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(nodes), len(nodes)))
    dist = shortest_path(adj, unweighted=True, directed=False)
    return nodes, dist


def brute_ss(n: int, levels: int, q: float, gamma: float) -> tuple[list, np.ndarray, np.ndarray]:
    nodes, dist = multiset_graph(n, levels)
    r = int(quantile_rank(n, q))
    qv = np.array([m[r - 1] for m in nodes], dtype=float)
    ls = np.zeros(len(nodes))
    for i in range(len(nodes)):
        nb = dist[i] == 1
        ls[i] = np.max(np.abs(qv[nb] - qv[i])) if nb.any() else 0.0
    ss = np.max(ls[None, :] * np.exp(-gamma * dist), axis=1)
    return nodes, ls, ss


def direct_formula(values: np.ndarray, q: float, gamma: float, lo: float, hi: float) -> float:
    """MATH.md §3.1 literally: max over k of e^{−kγ} max_t (x_{m+t} − x_{m+t−k−1}), O(n²)."""
    x = np.sort(np.clip(values, lo, hi))
    n = x.size
    m = int(quantile_rank(n, q))

    def xi(i: int) -> float:
        return lo if i < 1 else hi if i > n else float(x[i - 1])

    best = 0.0
    for k in range(n + 1):
        inner = max(xi(m + t) - xi(m + t - k - 1) for t in range(k + 2))
        best = max(best, math.exp(-k * gamma) * inner)
    return best


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("q", QS)
def test_against_brute_force_over_all_neighbours(n: int, q: float) -> None:
    levels = 6                                  # grid {0, …, 5}
    for gamma, (lo, step) in [(0.3, (0.0, 1.0)), (1.0, (10.0, 0.5))]:
        nodes, ls, ss = brute_ss(n, levels, q, gamma)
        hi = lo + step * (levels - 1)
        for i, m in enumerate(nodes):
            vals = lo + step * np.array(m, dtype=float)
            got = smooth_sensitivity_quantile(vals, q, gamma, (lo, hi))
            assert got == pytest.approx(step * ss[i], rel=1e-12, abs=1e-12), (m, q, gamma)
            if gamma == 0.3:   # the k = 0 term is the local sensitivity
                assert smooth_sensitivity_quantile(vals, q, 1e3, (lo, hi)) == pytest.approx(
                    step * ls[i], rel=1e-12, abs=1e-300)


def test_brute_force_is_sharp() -> None:
    """The brute force distinguishes the median from neighbouring ranks (guards the harness)."""
    _, _, ss_med = brute_ss(4, 6, 0.5, 0.3)
    _, _, ss_up = brute_ss(4, 6, 0.75, 0.3)
    assert not np.allclose(ss_med, ss_up)


def test_empty_group_and_single_value() -> None:
    assert smooth_sensitivity_median([], 0.2, (0.0, 10.0)) == 10.0
    assert smooth_sensitivity_quantile([], 0.9, 5.0, (-2.0, 3.0)) == 5.0
    for x in (0.0, 2.0, 7.5, 10.0):
        exp = max(x, 10.0 - x, 10.0 * math.exp(-0.2))
        assert smooth_sensitivity_median([x], 0.2, (0.0, 10.0)) == pytest.approx(exp, rel=1e-14)
    assert smooth_sensitivity_median([1.0, 2.0], 0.0 + 1.0, (1.0, 1.0)) == 0.0   # lo == hi


def test_clipping_to_bounds() -> None:
    raw = [-5.0, 1.0, 2.0, 3.0, 400.0]
    assert smooth_sensitivity_median(raw, 0.4, (0.0, 10.0)) == smooth_sensitivity_median(
        [0.0, 1.0, 2.0, 3.0, 10.0], 0.4, (0.0, 10.0))
    assert grouped_quantile([-5.0, 400.0], [0, 1, 2], 0.5, (0.0, 10.0)).tolist() == [0.0, 10.0]


# -- the fast algorithm = the formula --------------------------------------------------------------
finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=examples(250, 60), deadline=None)
@given(values=st.lists(finite, max_size=40), q=st.sampled_from(QS + [0.1, 0.33, 0.75]),
       gamma=st.sampled_from([1e-3, 0.05, 0.3, 1.0, 4.0]))
def test_divide_and_conquer_equals_formula(values: list[float], q: float, gamma: float) -> None:
    lo, hi = -500.0, 800.0
    got = smooth_sensitivity_quantile(values, q, gamma, (lo, hi))
    assert got == pytest.approx(direct_formula(np.array(values), q, gamma, lo, hi),
                                rel=1e-12, abs=1e-300)


def test_divide_and_conquer_equals_formula_on_heavy_data() -> None:
    rng = np.random.default_rng(5)
    for _ in range(60):
        n = int(rng.integers(0, 300))
        vals = np.round(rng.lognormal(3, rng.uniform(0.1, 3), n), int(rng.integers(0, 3)))
        q = float(rng.choice([0.5, 0.1, 0.9, 0.99]))
        g = float(rng.choice([0.005, 0.05, 0.5]))
        got = smooth_sensitivity_quantile(vals, q, g, (0.0, 1e3))
        assert got == pytest.approx(direct_formula(vals, q, g, 0.0, 1e3), rel=1e-12)


# -- the properties the mechanisms rely on ---------------------------------------------------------
@settings(max_examples=examples(300, 75), deadline=None)
@given(values=st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=30),
       q=st.sampled_from(QS + [0.1, 0.75]), gamma=st.sampled_from([0.01, 0.1, 0.5, 2.0]),
       data=st.data())
def test_smoothness_and_upper_bound_properties(values: list[float], q: float, gamma: float,
                                               data: st.DataObject) -> None:
    lo, hi = 0.0, 100.0
    j = data.draw(st.integers(0, len(values) - 1))
    new = data.draw(st.one_of(st.sampled_from([lo, hi, *values]), st.floats(lo, hi)))
    other = list(values)
    other[j] = new
    ss, ss2 = (smooth_sensitivity_quantile(v, q, gamma, (lo, hi)) for v in (values, other))
    assert ss > 0 and ss2 > 0
    assert ss2 <= ss * math.exp(gamma) * (1 + 1e-12)
    assert ss <= ss2 * math.exp(gamma) * (1 + 1e-12)
    q1, q2 = (float(grouped_quantile(np.sort(v), [0, len(v)], q, (lo, hi))[0])
              for v in (values, other))
    assert abs(q1 - q2) <= min(ss, ss2) * (1 + 1e-12)


# -- ranks and grouped interface -------------------------------------------------------------------
def test_quantile_rank_definition() -> None:
    assert quantile_rank([0, 1, 2, 3, 4, 5], 0.5).tolist() == [0, 1, 1, 2, 2, 3]
    assert int(quantile_rank(100, 0.07)) == 7 and int(quantile_rank(100, 0.071)) == 8
    assert quantile_rank([1, 7], 0.0).tolist() == [1, 1]
    assert quantile_rank([1, 7], 1.0).tolist() == [1, 7]
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        q = float(np.round(rng.uniform(), int(rng.integers(1, 4))))
        x = np.sort(rng.normal(size=n))
        r = int(quantile_rank(n, q))
        assert x[r - 1] == np.quantile(x, q, method="inverted_cdf")


def test_grouped_equals_single_groups_and_group_sort() -> None:
    rng = np.random.default_rng(11)
    sizes = [0, 3, 0, 1, 17, 2, 0, 250, 0]
    codes = np.repeat(np.arange(len(sizes)), sizes)
    vals = rng.lognormal(5, 1.5, codes.size)
    perm = rng.permutation(codes.size)
    sv, off = group_sort(vals[perm], codes[perm], len(sizes))
    assert off.tolist() == np.concatenate([[0], np.cumsum(sizes)]).tolist()
    for q in (0.5, 0.9):
        ss = smooth_sensitivity_grouped(sv, off, q, 0.1, (0.0, 5e3))
        med = grouped_quantile(sv, off, q, (0.0, 5e3))
        for g in range(len(sizes)):
            part = vals[codes == g]
            assert ss[g] == smooth_sensitivity_quantile(part, q, 0.1, (0.0, 5e3))
            exp = (np.quantile(np.clip(part, 0, 5e3), q, method="inverted_cdf") if part.size
                   else 0.0)
            assert med[g] == exp


def test_grouped_on_large_and_adversarial_inputs() -> None:
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 40_000, 600_000)
    vals = rng.lognormal(10, 1, codes.size)
    sv, off = group_sort(vals, codes, 40_000)
    ss = smooth_sensitivity_grouped(sv, off, 0.5, 0.05, (0.0, 1e7))
    assert np.all(ss > 0)
    # one big group of ties: no early stop before k ≈ n/2 (its speed is a benchmark's business)
    big = np.full(200_000, 5.0)
    val = smooth_sensitivity_grouped(big, np.array([0, big.size]), 0.5, 1e-4, (0.0, 10.0))[0]
    assert val == pytest.approx(5.0 * math.exp(-1e-4 * (100_000 - 1)), rel=1e-9)


# -- errors ----------------------------------------------------------------------------------------
def test_errors() -> None:
    with pytest.raises(InvalidParameterError, match="gamma must be finite and > 0"):
        smooth_sensitivity_median([1.0], 0.0, (0.0, 1.0))
    with pytest.raises(InvalidParameterError, match="upper bound"):
        smooth_sensitivity_median([1.0], 0.1, (2.0, 1.0))
    with pytest.raises(InvalidParameterError, match="bounds must be a pair"):
        smooth_sensitivity_median([1.0], 0.1, 5.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="q must be finite and >= 0"):
        smooth_sensitivity_quantile([1.0], 1.5, 0.1, (0.0, 1.0))
    with pytest.raises(DataValidationError, match="NaN or infinite"):
        smooth_sensitivity_median([1.0, math.nan], 0.1, (0.0, 1.0))
    with pytest.raises(InvalidParameterError, match="sorted ascending"):
        smooth_sensitivity_grouped([2.0, 1.0], [0, 2], 0.5, 0.1, (0.0, 3.0))
    # a drop across a group boundary is fine
    assert smooth_sensitivity_grouped([2.0, 1.0], [0, 1, 2], 0.5, 0.1, (0.0, 3.0)).shape == (2,)
    with pytest.raises(InvalidParameterError, match="offsets must start at 0"):
        smooth_sensitivity_grouped([1.0, 2.0], [0, 1], 0.5, 0.1, (0.0, 3.0))
    with pytest.raises(InvalidParameterError, match="codes must lie in"):
        group_sort([1.0], [3], 2)
    with pytest.raises(InvalidParameterError, match="n must be >= 0"):
        quantile_rank(-1, 0.5)


# -- add/remove neighbours (the project's relation) ------------------------------------------------
def _check_add_remove(values: list[float], y: float, q: float, gamma: float, lo: float,
                      hi: float) -> None:
    bigger = sorted([*values, y])
    ss, ss2 = (smooth_sensitivity_quantile(v, q, gamma, (lo, hi)) for v in (values, bigger))
    q1, q2 = (float(grouped_quantile(np.sort(v), [0, len(v)], q, (lo, hi))[0])
              for v in (values, bigger))
    assert math.exp(-gamma) * (1 - 1e-12) <= ss2 / ss <= math.exp(gamma) * (1 + 1e-12)
    assert abs(q1 - q2) <= min(ss, ss2) * (1 + 1e-12)


@pytest.mark.parametrize("q", [0.5, 0.25, 0.9, 0.0, 1.0])
def test_properties_hold_for_add_remove_neighbours_exhaustively(q: float) -> None:
    for n in range(0, 5):
        for m in itertools.combinations_with_replacement(range(5), n):
            for y in range(5):
                _check_add_remove([float(v) for v in m], float(y), q, 0.4, 0.0, 4.0)


@settings(max_examples=examples(200, 50), deadline=None)
@given(values=st.lists(st.floats(0, 100, allow_nan=False), max_size=30),
       y=st.floats(-10, 110, allow_nan=False), q=st.sampled_from(QS + [0.1, 0.75]),
       gamma=st.sampled_from([0.01, 0.1, 0.5, 2.0]))
def test_properties_hold_for_add_remove_neighbours(values: list[float], y: float, q: float,
                                                   gamma: float) -> None:
    _check_add_remove(values, y, q, gamma, 0.0, 100.0)
