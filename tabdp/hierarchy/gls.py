"""Generalized least squares on a product of two trees: the consistent (BLUE) estimate.

The cells of a release are indexed by a node ``u`` of an *outer* tree (e.g. geography: nation →
state → county) and a node ``v`` of an *inner* tree (e.g. industry: all → sector → 6-digit
code). The unknowns are the finest cells ``x[g, i]`` (``g`` an outer leaf, ``i`` an inner leaf)
that exist (a public presence mask: structurally absent cells are not unknowns and are 0). A
measured cell ``(u, v)`` is ``y = Σ_{g ≤ u, i ≤ v} x[g, i] + e`` with independent noise of known
variance (from public parameters only). The GLS estimate minimises
``Σ w·(y − Σ x)²`` with ``w = 1 / variance``; every published cell, measured or not, is the sum of
the estimated finest cells under it, so every parent equals the sum of its children.

Algorithm (exact; Cumings-Menon and Zhuravlev, "Least Squares Estimation for Hierarchical Data",
2024, arXiv 2404.13164, in the vector-node form): each outer node ``u`` carries the vector
``x_u`` of its inner-leaf totals (``d`` entries), and the constraint ``x_u = Σ_children x_c`` is
a tree. The measurements at ``u`` are inner aggregates ``B_u x_u``.

* Upward pass (leaves to root): the estimate of ``x_u`` from the measurements inside the subtree
  of ``u`` alone, with its covariance: at a leaf ``Σ↑ = (BᵀWB)⁻¹``, ``x↑ = Σ↑BᵀWy``; at an
  inner node, the children's estimates add up to ``z = Σ x↑_c`` with covariance ``S = Σ Σ↑_c``
  (independent subtrees), combined with the node's own measurements:
  ``Σ↑ = (S⁻¹ + BᵀWB)⁻¹``, ``x↑ = Σ↑(S⁻¹z + BᵀWy)``.
* Downward pass (root to leaves): the root's final estimate is its upward one; a child's final
  estimate is ``x_c = x↑_c + Σ↑_c S⁻¹(x_u − z)`` (the parent's correction shared in proportion
  to the children's covariances, so the children add up to the parent exactly), with covariance
  ``Σ_c = Σ↑_c + Σ↑_c (S⁻¹ Σ_u S⁻¹ − S⁻¹) Σ↑_c``.

Both passes do a fixed number of ``d × d`` products per outer node, batched per level: the cost
is ``O(n_outer · d³)``, linear in the number of cells for a given inner tree; the inner tree is
the one with fewer leaves. The covariance of every outer node's vector is exact, so the variance
of any published cell ``(u, v)`` is ``q_vᵀ Σ_u q_v``.

Example:
    >>> import numpy as np
    >>> geo = Tree.from_parents([[0, 0]])          # a root with two leaves
    >>> ind = Tree.from_parents([])                # a single inner cell
    >>> present = np.ones((2, 1), dtype=bool)
    >>> y = {(1, 0): (np.array([[[10.0]], [[20.0]]]), np.ones((2, 1))),
    ...      (0, 0): (np.array([[[33.0]]]), np.ones((1, 1)))}
    >>> res = solve(geo, ind, present, y)
    >>> res.estimate(1, 0)[:, 0, 0].round(6).tolist(), round(float(res.estimate(0, 0)[0, 0, 0]), 6)
    ([11.0, 21.0], 32.0)
    >>> res.variance(0, 0).round(6).tolist()   # 1 / (1 + 1/2)
    [[0.666667]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tabdp.exceptions import InvalidParameterError

__all__ = ["Tree", "GLSResult", "solve", "dense_gls"]


@dataclass(frozen=True)
class Tree:
    """A rooted tree with levels: level 0 is the root (one node), the last level the leaves.

    Nodes of each level are numbered so that the children of a node are contiguous and in the
    order of their parents (``parent[l]`` is non-decreasing): sums over children are then
    ``np.add.reduceat`` over contiguous blocks.

    Attributes:
        parent: ``parent[l]`` (``l >= 1``) maps each node of level ``l`` to its parent's index in
            level ``l - 1``; ``parent[0]`` is empty.

    Example:
        >>> t = Tree.from_parents([[0, 0], [0, 0, 1]])   # root, 2 states, 3 counties
        >>> t.depth, t.sizes, t.leaf_ancestor(1).tolist()
        (2, [1, 2, 3], [0, 0, 1])
    """

    parent: tuple[np.ndarray, ...]
    _starts: tuple[np.ndarray, ...] = field(repr=False, compare=False, default=())

    @staticmethod
    def from_parents(parents: Sequence[Sequence[int] | np.ndarray]) -> Tree:
        """Build a tree from the parent arrays of levels 1.. (each non-decreasing, onto).

        Args:
            parents: For each level below the root, the parent index of each node.

        Returns:
            The tree.

        Raises:
            InvalidParameterError: If a parent array is not non-decreasing or skips a parent.

        Example:
            >>> Tree.from_parents([[0, 0, 0]]).sizes
            [1, 3]
        """
        arrs: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        starts: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        n_prev = 1
        for lv, p in enumerate(parents, start=1):
            a = np.asarray(p, dtype=np.int64).reshape(-1)
            if a.size == 0 or np.any(np.diff(a) < 0) or a[0] != 0 or a[-1] != n_prev - 1 \
                    or np.any(np.diff(a) > 1):
                raise InvalidParameterError(
                    f"Tree: level {lv} parent array must be non-decreasing and cover every node "
                    f"of level {lv - 1} (0..{n_prev - 1}); got {a.tolist()[:10]}.\nHint: sort "
                    "the nodes of each level by their parent; every node needs a child.")
            arrs.append(a)
            starts.append(np.searchsorted(a, np.arange(n_prev), side="left"))
            n_prev = a.size
        return Tree(tuple(arrs), tuple(starts))

    @property
    def depth(self) -> int:
        """Index of the leaf level (0 for a single-node tree)."""
        return len(self.parent) - 1

    @property
    def sizes(self) -> list[int]:
        """Number of nodes per level."""
        return [1] + [int(p.size) for p in self.parent[1:]]

    def starts(self, level: int) -> np.ndarray:
        """First child (in level ``level``) of each node of level ``level - 1``."""
        return self._starts[level]

    def leaf_ancestor(self, level: int) -> np.ndarray:
        """Index, in level ``level``, of the ancestor of each leaf."""
        a = np.arange(self.sizes[-1])
        for lv in range(self.depth, level, -1):
            a = self.parent[lv][a]
        return a

    def indicator(self, level: int) -> np.ndarray:
        """The 0/1 matrix (nodes of ``level`` × leaves): which leaves lie under each node."""
        q = np.zeros((self.sizes[level], self.sizes[-1]))
        q[self.leaf_ancestor(level), np.arange(self.sizes[-1])] = 1.0
        return q


Measurements = Mapping[tuple[int, int], tuple[np.ndarray, np.ndarray]]


@dataclass
class GLSResult:
    """Consistent estimates and exact covariances on a product of two trees.

    Attributes:
        outer: The outer tree.
        inner: The inner tree.
        x: Per outer level, the estimates of each node's inner-leaf vector,
            shape ``(n_nodes, d, k)`` (``k`` right-hand sides).
        cov: Per outer level, the covariance of each node's inner-leaf vector, ``(n_nodes, d, d)``.
    """

    outer: Tree
    inner: Tree
    x: list[np.ndarray]
    cov: list[np.ndarray]

    def estimate(self, a: int, b: int) -> np.ndarray:
        """Estimates of the cells (outer level ``a``, inner level ``b``): ``(n_a, n_b, k)``.

        Every cell is the sum of the finest estimates under it (so parents are sums of
        children). Example: see the module docstring.
        """
        q = self.inner.indicator(b)
        return np.einsum("bi,aik->abk", q, self.x[a])

    def variance(self, a: int, b: int) -> np.ndarray:
        """Exact variances of the cell estimates at (``a``, ``b``): ``(n_a, n_b)``.

        Example: see the module docstring.
        """
        q = self.inner.indicator(b)
        return np.maximum(np.einsum("bi,uij,bj->ub", q, self.cov[a], q), 0.0)


def _chol_inv(m: np.ndarray, what: str) -> np.ndarray:
    """Inverse of a batch of symmetric positive definite matrices (refuses singular ones)."""
    try:
        c = np.linalg.cholesky(m)
    except np.linalg.LinAlgError:
        raise InvalidParameterError(
            f"consistent estimate: the {what} is not identified by the measured levels (a "
            "finest cell is not measured at the finest level and no other measurement pins it "
            "down).\nHint: measure the table's own (finest) level; every existing finest cell "
            "must be released there.") from None
    eye = np.broadcast_to(np.eye(m.shape[-1]), m.shape)
    ci = np.linalg.solve(c, eye)
    return np.swapaxes(ci, -1, -2) @ ci


def _own(inner: Tree, a: int, n_a: int, d: int, meas: Measurements, k: int,
         mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BᵀWB (n_a, d, d) and BᵀWy (n_a, d, k) of the measurements at outer level ``a``."""
    info = np.zeros((n_a, d, d))
    vec = np.zeros((n_a, d, k))
    for (aa, b), (y, w) in meas.items():
        if aa != a:
            continue
        anc = inner.leaf_ancestor(b)
        # B = Q_b restricted to the present leaves: (Q_bᵀ W Q_b)_ij = w[anc_i] if anc_i == anc_j
        same = anc[:, None] == anc[None, :]
        wl = w[:, anc]  # (n_a, d)
        info += np.where(same[None], wl[:, :, None], 0.0)
        vec += (w[:, :, None] * y)[:, anc, :]
    m2 = mask[:, :, None] & mask[:, None, :]
    info = np.where(m2, info, 0.0)
    vec = np.where(mask[:, :, None], vec, 0.0)
    return info, vec


def solve(outer: Tree, inner: Tree, present: np.ndarray, meas: Measurements) -> GLSResult:
    """The GLS (BLUE) consistent estimate on a product of two trees, with exact covariances.

    Args:
        outer: Outer tree (any depth); its leaves index the rows of ``present``.
        inner: Inner tree; its leaves index the columns of ``present`` (``d`` leaves).
        present: Boolean ``(outer leaves, d)``: which finest cells exist (public key set).
        meas: ``(outer level a, inner level b) → (y, w)``: ``y`` the measured values
            ``(n_a, n_b, k)`` (``k`` right-hand sides, e.g. simulations), ``w`` the precision
            weights ``1/variance`` ``(n_a, n_b)``, 0 where a cell is not measured.

    Returns:
        The [`GLSResult`][tabdp.hierarchy.gls.GLSResult].

    Raises:
        InvalidParameterError: If a finest cell is not identified by the measurements, or the
            shapes disagree.

    Example:
        >>> import numpy as np
        >>> geo = Tree.from_parents([[0, 0]]); ind = Tree.from_parents([[0, 0]])
        >>> present = np.ones((2, 2), dtype=bool)
        >>> y = np.array([[[1.0], [2.0]], [[3.0], [4.0]]])
        >>> res = solve(geo, ind, present, {(1, 1): (y, np.ones((2, 2)))})
        >>> float(res.estimate(0, 0)[0, 0, 0])
        10.0
    """
    d = inner.sizes[-1]
    n_leaves = outer.sizes[-1]
    present = np.asarray(present, dtype=bool)
    if present.shape != (n_leaves, d):
        raise InvalidParameterError(
            f"solve: present must have shape (outer leaves, inner leaves) = {(n_leaves, d)}; "
            f"got {present.shape}.")
    k = 0
    for (a, b), (y, w) in meas.items():
        if not (0 <= a <= outer.depth and 0 <= b <= inner.depth):
            raise InvalidParameterError(f"solve: level pair {(a, b)} is outside the trees.")
        want = (outer.sizes[a], inner.sizes[b])
        if y.shape[:2] != want or w.shape != want:
            raise InvalidParameterError(
                f"solve: measurement {(a, b)} must have y of shape {want} + (k,) and w of shape "
                f"{want}; got {y.shape} and {w.shape}.")
        k = y.shape[2]
    masks = [present]
    for a in range(outer.depth, 0, -1):
        m = np.logical_or.reduceat(masks[0], outer.starts(a), axis=0)
        masks.insert(0, m)
    eye = np.eye(d)
    up_x: list[np.ndarray] = [np.empty(0)] * (outer.depth + 1)
    up_c: list[np.ndarray] = [np.empty(0)] * (outer.depth + 1)
    z_l: list[np.ndarray] = [np.empty(0)] * (outer.depth + 1)
    sinv_l: list[np.ndarray] = [np.empty(0)] * (outer.depth + 1)
    for a in range(outer.depth, -1, -1):
        n_a = outer.sizes[a]
        mask = masks[a]
        absent = np.where(~mask[:, :, None] & (eye[None] > 0), 1.0, 0.0)
        info, vec = _own(inner, a, n_a, d, meas, k, mask)
        if a == outer.depth:
            cov = _chol_inv(info + absent, "finest level")
            x = cov @ vec
        else:
            st = outer.starts(a + 1)
            z = np.add.reduceat(up_x[a + 1], st, axis=0)
            s = np.add.reduceat(up_c[a + 1], st, axis=0)
            sinv = _chol_inv(s + absent, "sum of children")
            cov = _chol_inv(sinv + info, f"outer level {a}")
            x = cov @ (sinv @ z + vec)
            z_l[a], sinv_l[a] = z, sinv
        m2 = mask[:, :, None] & mask[:, None, :]
        up_c[a] = np.where(m2, cov, 0.0)
        up_x[a] = np.where(mask[:, :, None], x, 0.0)
    fx = [up_x[0]]
    fc = [up_c[0]]
    for a in range(1, outer.depth + 1):
        par = outer.parent[a]
        sinv = sinv_l[a - 1]
        g = sinv @ (fx[a - 1] - z_l[a - 1])
        gm = sinv @ fc[a - 1] @ sinv - sinv
        cu = up_c[a]
        fx.append(up_x[a] + cu @ g[par])
        c = cu + cu @ gm[par] @ cu
        fc.append(0.5 * (c + np.swapaxes(c, -1, -2)))
    return GLSResult(outer, inner, fx, fc)


def dense_gls(outer: Tree, inner: Tree, present: np.ndarray,
              meas: Measurements) -> tuple[np.ndarray, np.ndarray]:
    """Reference GLS by dense linear algebra (tests only): finest estimates and covariance.

    Args:
        outer: Outer tree.
        inner: Inner tree.
        present: Presence mask of the finest cells.
        meas: Measurements as for [`solve`][tabdp.hierarchy.gls.solve].

    Returns:
        ``(x, cov)``: the present finest cells in row-major order ``(n_present, k)`` and their
        covariance ``(n_present, n_present)``.

    Example:
        >>> import numpy as np
        >>> t = Tree.from_parents([[0, 0]]); one = Tree.from_parents([])
        >>> x, c = dense_gls(t, one, np.ones((2, 1), bool),
        ...                  {(1, 0): (np.array([[[1.0]], [[2.0]]]), np.ones((2, 1)))})
        >>> x[:, 0].tolist()
        [1.0, 2.0]
    """
    idx = np.flatnonzero(present.reshape(-1))
    rows, ys, ws = [], [], []
    for (a, b), (y, w) in meas.items():
        po = outer.indicator(a)
        qi = inner.indicator(b)
        full = np.einsum("ag,bi->abgi", po, qi).reshape(po.shape[0] * qi.shape[0], -1)[:, idx]
        rows.append(full)
        ys.append(y.reshape(po.shape[0] * qi.shape[0], -1))
        ws.append(w.reshape(-1))
    a_mat = np.vstack(rows)
    yv = np.vstack(ys)
    wv = np.concatenate(ws)
    h = a_mat.T @ (wv[:, None] * a_mat)
    cov = np.linalg.inv(h)
    return cov @ (a_mat.T @ (wv[:, None] * yv)), cov
