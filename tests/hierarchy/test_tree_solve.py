"""The structured solve (the inner tree's recursion inside the outer one) equals a dense GLS.

Estimates, variances of every level pair and the full covariance of every outer node's vector,
to 1e-9, on random products of two trees with a full key set (the structured path), including
outer nodes whose children do not share a covariance (weights varying by cell), unmeasured
cells, and a deep, wide inner tree (three levels below the root, hundreds of leaves); and with
finest cells absent from the key set (the inner tree's recursion at every outer leaf, on its
present cells; dense matrices above), including whole inner subtrees absent in an outer leaf
and an outer leaf with no cell.
"""

from __future__ import annotations

import numpy as np
import pytest

from tabdp.exceptions import InvalidParameterError
from tabdp.hierarchy import Tree, dense_gls, solve


def _rtree(rng: np.random.Generator, depth: int, kids: int = 4) -> Tree:
    parents = []
    n = 1
    for _ in range(depth):
        k = rng.integers(1, kids, size=n)
        parents.append(np.repeat(np.arange(n), k))
        n = int(k.sum())
    return Tree.from_parents(parents)


def _meas(rng: np.random.Generator, o: Tree, i: Tree, k: int, p: float = 0.6,
          constant: float = 0.5) -> dict:
    meas = {}
    for a in range(o.depth + 1):
        for b in range(i.depth + 1):
            if (a, b) == (o.depth, i.depth) or rng.random() < p:
                w = rng.uniform(0.2, 3.0, size=(o.sizes[a], i.sizes[b]))
                if rng.random() < constant:
                    w[:] = w[0, 0]  # one mechanism per level: siblings share a covariance
                if (a, b) != (o.depth, i.depth):
                    w[rng.random(w.shape) < 0.2] = 0.0  # cells not measured
                meas[(a, b)] = (rng.normal(size=(o.sizes[a], i.sizes[b], k)), w)
    return meas


def _check(o: Tree, i: Tree, meas: dict, k: int, method: str = "tree",
           present: np.ndarray | None = None) -> float:
    if present is None:
        present = np.ones((o.sizes[-1], i.sizes[-1]), dtype=bool)
    res = solve(o, i, present, meas, method=method)  # type: ignore[arg-type]
    x, cov = dense_gls(o, i, present, meas)
    d = i.sizes[-1]
    keep = np.flatnonzero(present.reshape(-1))
    err = float(np.abs(res.x[-1].reshape(-1, k)[keep] - x).max(initial=0.0))
    assert np.all(res.x[-1][~present] == 0.0)   # absent cells: exactly 0
    covs = res.cov
    for a in range(o.depth + 1):
        po = o.indicator(a)
        agg = np.kron(po, np.eye(d))[:, keep]
        node = agg @ cov @ agg.T          # every outer node's vector, all at once
        for b in range(i.depth + 1):
            q = i.indicator(b)
            est = np.kron(po, q)[:, keep] @ x
            err = max(err, float(np.abs(res.estimate(a, b).reshape(-1, k) - est)
                                 .max(initial=0.0)))
            full = np.stack([np.sum((q @ node[u * d:(u + 1) * d, u * d:(u + 1) * d]) * q,
                                    axis=1) for u in range(o.sizes[a])])
            err = max(err, float(np.abs(res.variance(a, b) - full).max(initial=0.0)))
        for u in range(o.sizes[a]):
            blk = node[u * d:(u + 1) * d, u * d:(u + 1) * d]
            err = max(err, float(np.abs(covs[a][u] - blk).max(initial=0.0)))
    return err


@pytest.mark.parametrize("seed", range(40))
def test_tree_solve_equals_dense_gls(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    o = _rtree(rng, int(rng.integers(0, 4)))
    i = _rtree(rng, int(rng.integers(0, 4)))
    meas = _meas(rng, o, i, 3)
    assert _check(o, i, meas, 3) < 1e-9


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (3-6 s)
def test_deep_wide_inner_tree_equals_dense_gls() -> None:
    rng = np.random.default_rng(7)
    # industries: all -> 8 sectors -> 40 subsectors -> 320 six-digit codes
    sec = np.repeat(np.arange(8), 5)
    six = np.sort(np.concatenate([np.arange(40), rng.integers(0, 40, 280)]))
    inner = Tree.from_parents([np.zeros(8, dtype=np.int64), sec, six])
    assert inner.sizes == [1, 8, 40, 320]
    outer = Tree.from_parents([[0, 0], [0, 0, 0, 1, 1]])  # nation, 2 states, 5 counties
    meas = {}
    sig = {(2, 3): 2.0, (1, 3): 4.0, (2, 1): 3.0, (1, 2): 5.0, (0, 3): 6.0, (0, 0): 1.0}
    for (a, b), s in sig.items():
        shape = (outer.sizes[a], inner.sizes[b])
        meas[(a, b)] = (rng.normal(size=shape + (2,)), np.full(shape, 1 / s**2))
    assert _check(outer, inner, meas, 2) < 1e-9
    # a county with its own weights: the first state's children no longer share a covariance
    meas[(2, 3)][1][1] *= 3.0
    meas[(1, 2)][1][0, 5] = 0.0  # and a cell not measured
    assert _check(outer, inner, meas, 2) < 1e-9


def test_tree_and_dense_paths_agree_and_covariances_alone() -> None:
    rng = np.random.default_rng(5)
    o = _rtree(rng, 3, kids=5)
    i = _rtree(rng, 2, kids=5)
    meas = _meas(rng, o, i, 0, p=0.8)
    present = np.ones((o.sizes[-1], i.sizes[-1]), dtype=bool)
    for pres in (present, _absent(rng, o, i)):
        rt = solve(o, i, pres, meas, method="tree")
        rd = solve(o, i, pres, meas, method="dense")
        assert rt.x[-1].shape == (o.sizes[-1], i.sizes[-1], 0)
        for a in range(o.depth + 1):
            for b in range(i.depth + 1):
                np.testing.assert_allclose(rt.variance(a, b), rd.variance(a, b), rtol=0,
                                           atol=1e-10)


def _absent(rng: np.random.Generator, o: Tree, i: Tree, share: float = 0.3) -> np.ndarray:
    present = rng.random((o.sizes[-1], i.sizes[-1])) >= share
    if i.depth >= 1 and o.sizes[-1] > 1:
        # a whole inner subtree (the first node of level 1) absent in one outer leaf
        present[int(rng.integers(o.sizes[-1])), i.leaf_ancestor(1) == 0] = False
    if o.sizes[-1] > 2:
        present[int(rng.integers(o.sizes[-1]))] = False   # an outer leaf with no cell
    return present


@pytest.mark.parametrize("seed", range(40))
def test_absent_cells_tree_solve_equals_dense_gls(seed: int) -> None:
    rng = np.random.default_rng(5000 + seed)
    o = _rtree(rng, int(rng.integers(0, 4)))
    i = _rtree(rng, int(rng.integers(0, 4)))
    meas = _meas(rng, o, i, 2)
    present = _absent(rng, o, i)
    assert _check(o, i, meas, 2, present=present) < 1e-9
    assert _check(o, i, meas, 2, method="dense", present=present) < 1e-9


@pytest.mark.slow
def test_absent_cells_deep_wide_inner_tree_equals_dense_gls() -> None:
    rng = np.random.default_rng(8)
    sec = np.repeat(np.arange(8), 5)
    six = np.sort(np.concatenate([np.arange(40), rng.integers(0, 40, 280)]))
    inner = Tree.from_parents([np.zeros(8, dtype=np.int64), sec, six])
    outer = Tree.from_parents([[0, 0], [0, 0, 0, 1, 1]])
    present = _absent(rng, outer, inner, 0.3)
    meas = {}
    sig = {(2, 3): 2.0, (1, 3): 4.0, (2, 1): 3.0, (1, 2): 5.0, (0, 3): 6.0, (0, 0): 1.0}
    for (a, b), s in sig.items():
        shape = (outer.sizes[a], inner.sizes[b])
        meas[(a, b)] = (rng.normal(size=shape + (2,)), np.full(shape, 1 / s**2))
    meas[(1, 2)][1][0, 5] = 0.0  # a cell not measured
    assert _check(outer, inner, meas, 2, present=present) < 1e-9
    # the same key set repeated in two counties (a shared pattern) and absent weights of 0
    present[1] = present[0]
    meas[(2, 3)][1][~present] = 0.0
    assert _check(outer, inner, meas, 2, present=present) < 1e-9


def test_tree_method_needs_present_cells_measured() -> None:
    o = Tree.from_parents([[0, 0]])
    i = Tree.from_parents([[0, 0]])
    present = np.ones((2, 2), dtype=bool)
    present[1, 1] = False
    w = np.ones((2, 2))
    w[1, 1] = 0.0      # absent: needs no measurement
    meas = {(1, 1): (np.zeros((2, 2, 1)), w), (0, 0): (np.ones((1, 1, 1)), np.ones((1, 1)))}
    res = solve(o, i, present, meas, method="tree")
    assert res.x[-1][1, 1, 0] == 0.0 and res.variance(1, 1)[1, 1] == 0.0
    w2 = np.ones((2, 2))
    w2[0, 1] = 0.0     # present but not measured at the finest level
    meas2 = {(1, 1): (np.zeros((2, 2, 1)), w2)}
    with pytest.raises(InvalidParameterError, match="method='tree' needs every present"):
        solve(o, i, present, meas2, method="tree")
