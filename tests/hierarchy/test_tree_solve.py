"""The structured solve (the inner tree's recursion inside the outer one) equals a dense GLS.

Estimates, variances of every level pair and the full covariance of every outer node's vector,
to 1e-9, on random products of two trees with a full key set (the structured path), including
outer nodes whose children do not share a covariance (weights varying by cell), unmeasured
cells, and a deep, wide inner tree (three levels below the root, hundreds of leaves).
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


def _check(o: Tree, i: Tree, meas: dict, k: int, method: str = "tree") -> float:
    present = np.ones((o.sizes[-1], i.sizes[-1]), dtype=bool)
    res = solve(o, i, present, meas, method=method)  # type: ignore[arg-type]
    x, cov = dense_gls(o, i, present, meas)
    d = i.sizes[-1]
    err = float(np.abs(res.x[-1].reshape(-1, k) - x).max())
    covs = res.cov
    for a in range(o.depth + 1):
        po = o.indicator(a)
        for b in range(i.depth + 1):
            agg = np.kron(po, i.indicator(b))
            err = max(err, float(np.abs(res.estimate(a, b).reshape(-1, k) - agg @ x).max()))
            full = np.sum((agg @ cov) * agg, axis=1)
            err = max(err, float(np.abs(res.variance(a, b).reshape(-1) - full).max()))
        agg = np.kron(po, np.eye(d))
        node = agg @ cov @ agg.T
        for u in range(o.sizes[a]):
            blk = node[u * d:(u + 1) * d, u * d:(u + 1) * d]
            err = max(err, float(np.abs(covs[a][u] - blk).max()))
    return err


@pytest.mark.parametrize("seed", range(40))
def test_tree_solve_equals_dense_gls(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    o = _rtree(rng, int(rng.integers(0, 4)))
    i = _rtree(rng, int(rng.integers(0, 4)))
    meas = _meas(rng, o, i, 3)
    assert _check(o, i, meas, 3) < 1e-9


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
    rt = solve(o, i, present, meas, method="tree")
    rd = solve(o, i, present, meas, method="dense")
    assert rt.x[-1].shape == (o.sizes[-1], i.sizes[-1], 0)
    for a in range(o.depth + 1):
        for b in range(i.depth + 1):
            np.testing.assert_allclose(rt.variance(a, b), rd.variance(a, b), rtol=0,
                                       atol=1e-10)


def test_tree_method_needs_full_key_set() -> None:
    o = Tree.from_parents([[0, 0]])
    i = Tree.from_parents([[0, 0]])
    present = np.ones((2, 2), dtype=bool)
    present[1, 1] = False
    meas = {(1, 1): (np.zeros((2, 2, 1)), np.ones((2, 2)))}
    with pytest.raises(InvalidParameterError, match="method='tree' needs every finest cell"):
        solve(o, i, present, meas, method="tree")
    assert solve(o, i, present, meas).x[-1][1, 1, 0] == 0.0  # auto: the dense path
