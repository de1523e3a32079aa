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

Written with ``d × d`` matrices (``method="dense"``) both passes cost ``O(d³)`` per distinct
outer node. The structured path (``method="tree"``, the default where every present finest
cell is measured at the finest level) uses the inner tree too: an outer leaf's precision
``BᵀWB = Σ_b Q_bᵀ diag(w_b) Q_b`` is a *tree precision*, whose inverse is applied, and whose
node variances are obtained, by the scalar two-pass recursion on the inner tree in ``O(d)``.
When the ``m`` children of an outer node share one upward covariance ``P_c⁻¹`` (one mechanism
per level, cross-product key set), ``S⁻¹ = P_c/m``, ``Σ↑ = (P_c/m + BᵀWB)⁻¹`` is again a tree
precision's inverse, the downward correction is the equal share ``(x_u − z)/m`` and the final
covariance is ``(1 − 1/m)P_c⁻¹ + Σ_u/m²``: ``O(d)`` per node, linear in the number of cells.
Only a node whose children do not share a covariance forms ``S`` densely (``O(d²)`` per
distinct child type by tree solves, two ``d × d`` inversions for the node). With cells absent
from the key set (every present finest cell measured at the finest level), each outer leaf is
still a tree precision on its present leaves (absent leaves pinned to 0, leaf variance 0):
``O(d)`` per leaf; the levels above are dense, as their children no longer share a
covariance (``O(d²)`` per leaf, ``O(d³)`` per node above; by elimination no better in general,
see docs/hierarchy.md). The covariance of every outer node's vector is exact, so the variance
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
from typing import Any, Literal

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

    Covariances are stored once per distinct matrix: nodes with the same presence pattern,
    weights and parent share one (``cov_idx[a][u]`` is node ``u``'s index into level ``a``'s
    distinct covariances). They are kept in a structured form (dense matrices, or the inner
    tree's recursion) and made dense only on request (``cov_mats``).

    Attributes:
        outer: The outer tree.
        inner: The inner tree.
        x: Per outer level, the estimates of each node's inner-leaf vector,
            shape ``(n_nodes, d, k)`` (``k`` right-hand sides).
        finals: Per outer level, the distinct covariances: a stack ``(n_distinct, d, d)`` or a
            list of structured covariances.
        cov_idx: Per outer level, each node's index into ``finals``.
    """

    outer: Tree
    inner: Tree
    x: list[np.ndarray]
    finals: list[Any]
    cov_idx: list[np.ndarray]

    @property
    def cov_mats(self) -> list[np.ndarray]:
        """Per outer level, the distinct covariance matrices ``(n_distinct, d, d)`` (dense)."""
        return [f if isinstance(f, np.ndarray) else f.dense_all()
                if isinstance(f, _LeafFinals) else np.stack([c.dense() for c in f])
                for f in self.finals]

    @property
    def cov(self) -> list[np.ndarray]:
        """Per outer level, each node's covariance ``(n_nodes, d, d)`` (expanded: memory!)."""
        return [m[i] for m, i in zip(self.cov_mats, self.cov_idx, strict=True)]

    def estimate(self, a: int, b: int) -> np.ndarray:
        """Estimates of the cells (outer level ``a``, inner level ``b``): ``(n_a, n_b, k)``.

        Every cell is the sum of the finest estimates under it (so parents are sums of
        children). Example: see the module docstring.
        """
        if b == self.inner.depth:
            return self.x[a]
        anc = self.inner.leaf_ancestor(b)
        st = np.searchsorted(anc, np.arange(self.inner.sizes[b]), side="left")
        return np.add.reduceat(self.x[a], st, axis=1)

    def variance(self, a: int, b: int) -> np.ndarray:
        """Exact variances of the cell estimates at (``a``, ``b``): ``(n_a, n_b)``.

        Example: see the module docstring.
        """
        f = self.finals[a]
        if isinstance(f, np.ndarray):
            q = self.inner.indicator(b)
            v = np.einsum("bi,uij,bj->ub", q, f, q)
        elif isinstance(f, _LeafFinals):
            v = f.batch_variance(b)
        else:
            v = np.stack([c.var()[b] for c in f])
        return np.maximum(v, 0.0)[self.cov_idx[a]]


#: Nodes per block of the batched products (bounds the memory of gathered matrices).
_BLOCK = 1 << 15


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
    out = np.swapaxes(ci, -1, -2) @ ci
    return 0.5 * (out + np.swapaxes(out, -1, -2))


def _distinct(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the distinct rows of ``key`` and each row's index into them."""
    n = key.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if np.all(key == key[0]):
        return np.zeros(1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    # a 64-bit hash per row, sorted in one dimension (much faster than sorting rows), then
    # checked exactly: a collision falls back to sorting the rows themselves
    bits = np.ascontiguousarray(key, dtype=np.float64).view(np.uint64)
    mult = np.random.default_rng(0x5EED).integers(1, 2**63, size=bits.shape[1],
                                                   dtype=np.uint64) | np.uint64(1)
    with np.errstate(over="ignore"):
        hsh = (bits * mult).sum(axis=1, dtype=np.uint64)
    _, first, inv = np.unique(hsh, return_index=True, return_inverse=True)
    if not np.array_equal(key[first][inv.reshape(-1)], key):
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return first.astype(np.int64), inv.reshape(-1).astype(np.int64)


def _level_meas(inner: Tree, a: int, meas: Measurements) -> list[tuple[np.ndarray, np.ndarray,
                                                                          np.ndarray]]:
    """(ancestor of each inner leaf, y, w) of the measurements at outer level ``a``."""
    return [(inner.leaf_ancestor(b), y, w) for (aa, b), (y, w) in sorted(meas.items())
            if aa == a]


def _info(inner_anc: list[tuple[np.ndarray, np.ndarray, np.ndarray]], rows: np.ndarray, d: int,
          mask: np.ndarray) -> np.ndarray:
    """BᵀWB of the nodes ``rows`` (masked to their present leaves), ``(len(rows), d, d)``."""
    info = np.zeros((rows.size, d, d))
    for anc, _y, w in inner_anc:
        k_mat = (anc[:, None] == anc[None, :]).reshape(-1).astype(np.float64)  # (d*d,)
        wl = w[rows][:, anc]  # (n, d): the weight of each leaf's cell
        info += (wl[:, :, None] * k_mat.reshape(d, d)[None])
    m = mask[rows]
    info *= m[:, :, None] & m[:, None, :]
    idx = np.arange(d)
    info[:, idx, idx] += ~m  # absent leaves: identity (their entries are zeroed after)
    return info


def _vec(inner_anc: list[tuple[np.ndarray, np.ndarray, np.ndarray]], n: int, d: int, k: int,
         mask: np.ndarray) -> np.ndarray:
    """BᵀWy of every node, ``(n, d, k)`` (0 on absent leaves)."""
    vec = np.zeros((n, d, k))
    for anc, y, w in inner_anc:
        vec += (w[:, :, None] * y)[:, anc, :]
    vec *= mask[:, :, None]
    return vec


def _apply(mats: np.ndarray, idx: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``mats[idx[u]] @ v[u]`` for every node, by blocks (``v``: ``(n, d, k)``)."""
    n = idx.size
    out = np.empty(v.shape)
    if mats.shape[0] == 1:
        return np.einsum("ij,ujk->uik", mats[0], v) if v.size else out
    for s0 in range(0, n, _BLOCK):
        s1 = min(n, s0 + _BLOCK)
        out[s0:s1] = mats[idx[s0:s1]] @ v[s0:s1]
    return out


def _sum_children(mats: np.ndarray, idx: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``Σ_children mats[idx[c]]`` per parent (children contiguous, ``starts`` per parent)."""
    n = idx.size
    n_par = starts.size
    d = mats.shape[-1]
    out = np.zeros((n_par, d, d))
    ends = np.append(starts[1:], n)
    p0 = 0
    while p0 < n_par:
        # parents p0..p1-1 whose children fit in one block (at least one parent)
        p1 = int(np.searchsorted(ends, starts[p0] + _BLOCK, side="right"))
        p1 = max(p1, p0 + 1)
        c0, c1 = int(starts[p0]), int(ends[p1 - 1])
        g = mats[idx[c0:c1]]
        out[p0:p1] = np.add.reduceat(g, starts[p0:p1] - c0, axis=0)
        p0 = p1
    return out


def _outer_level(s: np.ndarray, lm: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                 n_a: int, d: int, mask: np.ndarray, a: int) -> tuple[np.ndarray, np.ndarray]:
    """An outer level's nodes from ``s``, their children's summed covariances: ``(s⁻¹, cov)``.

    ``cov`` combines ``s⁻¹`` with the nodes' own measurements ``lm`` (``_info``); an absent
    coordinate (``~mask``) gets a unit diagonal in ``s`` (changed in place) and loses it again
    in the nodes' own information, and its rows and columns of ``cov`` are zero.
    """
    idx = np.arange(d)
    s[:, idx, idx] += ~mask
    sinv = _chol_inv(s, "sum of children")
    own = _info(lm, np.arange(n_a), d, mask)
    own[:, idx, idx] -= ~mask
    cov = _chol_inv(sinv + own, f"outer level {a}")
    cov *= mask[:, :, None] & mask[:, None, :]
    return sinv, cov


# --------------------------------------------------------------------------------------------
# Structured path: the inner tree's own two-pass recursion (no d × d matrices where the
# children of an outer node share one covariance; see the module docstring).
# --------------------------------------------------------------------------------------------


class _InnerIndex:
    """Cached index arrays of the inner tree: leaf ancestors and leaf blocks per level."""

    def __init__(self, inner: Tree) -> None:
        self.tree = inner
        self.d = inner.sizes[-1]
        self.anc = [inner.leaf_ancestor(b) for b in range(inner.depth + 1)]
        self.lst = [np.searchsorted(self.anc[b], np.arange(inner.sizes[b]), side="left")
                    for b in range(inner.depth + 1)]

    def block_var(self, m: np.ndarray) -> list[np.ndarray]:
        """``diag(Q_b M Q_bᵀ)`` for every inner level ``b`` of a dense ``d × d`` matrix."""
        depth = self.tree.depth
        out: list[np.ndarray] = [np.empty(0)] * (depth + 1)
        cols = np.arange(self.d)
        rows = m                                                   # (n_b, d): row sums
        for b in range(depth, -1, -1):
            if b < depth:
                rows = np.add.reduceat(rows, self.tree.starts(b + 1), axis=0)
            out[b] = np.add.reduceat(rows[self.anc[b], cols], self.lst[b])
        return out

    def prec_dense(self, w: Sequence[np.ndarray]) -> np.ndarray:
        """Dense ``Σ_b Q_bᵀ diag(w_b) Q_b`` (``w[b]``: ``(n_b,)``)."""
        p = np.zeros((self.d, self.d))
        for b, wb in enumerate(w):
            a = self.anc[b]
            p += np.where(a[:, None] == a[None, :], wb[a][:, None], 0.0)
        return p


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den``, 0 where ``den`` is 0 (a subtree without present leaves)."""
    return np.divide(num, den, out=np.zeros(np.broadcast_shapes(num.shape, den.shape)),
                     where=den != 0)


class _TreeCov:
    """A batch of covariances ``P⁻¹`` of inner *tree precisions* ``P = Σ_b Q_bᵀ diag(w_b) Q_b``.

    ``P`` is the information of one measurement per inner node (weight ``w_b``, leaf weights
    positive): ``P⁻¹ r`` is the GLS estimate on the inner tree with leaf data ``r / w_D`` and
    zero data elsewhere, computed by the scalar two-pass recursion in ``O(d)`` per vector, and
    the variance of every inner node total under ``P⁻¹`` comes out of the same recursion.
    Row ``j`` of every weight array is one member of the batch.
    """

    def __init__(self, ix: _InnerIndex, w: list[np.ndarray],
                 present: np.ndarray | None = None) -> None:
        t = ix.tree
        depth = t.depth
        self.ix, self.w = ix, w
        # absent leaves (``present`` False) are pinned to 0: the limit of an infinite leaf
        # weight, i.e. leaf variance 0; ``P⁻¹`` is then the inverse of ``P`` on the present
        # leaves, padded with zeros (a subtree with no present leaf has variance 0)
        self.present = present
        wl = w[depth]
        if present is None:
            self.s_leaf = 1.0 / wl
            self.w_leaf = wl
        else:
            self.s_leaf = np.divide(1.0, wl, out=np.zeros(wl.shape), where=present)
            self.w_leaf = np.where(present, wl, 0.0)
        s: list[np.ndarray] = [np.empty(0)] * (depth + 1)
        big_s: list[np.ndarray] = [np.empty(0)] * (depth + 1)
        s[depth] = self.s_leaf
        for b in range(depth - 1, -1, -1):
            big_s[b] = np.add.reduceat(s[b + 1], t.starts(b + 1), axis=1)
            s[b] = big_s[b] / (1.0 + big_s[b] * w[b])
        self.den = [1.0 + big_s[b] * w[b] for b in range(depth)]
        self.ratio = [np.empty(0)] + [_safe_div(s[b], big_s[b - 1][:, t.parent[b]])
                                      for b in range(1, depth + 1)]
        var = [s[0]]
        for b in range(1, depth + 1):
            sp = big_s[b - 1][:, t.parent[b]]
            inv_sp = _safe_div(np.ones(sp.shape), sp)
            var.append(s[b] + s[b] ** 2 * (var[b - 1][:, t.parent[b]] * inv_sp ** 2 - inv_sp))
        self.var = var

    @property
    def size(self) -> int:
        return int(self.w[0].shape[0])

    @staticmethod
    def _g(arr: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return arr[0][None, :, None] if arr.shape[0] == 1 else arr[idx][:, :, None]

    def apply(self, v: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``P_{idx[u]}⁻¹ v[u]`` for every ``u`` (``v``: ``(n, d, k)``)."""
        t = self.ix.tree
        depth = t.depth
        g = self._g
        tt: list[np.ndarray] = [np.empty(0)] * (depth + 1)
        z: list[np.ndarray] = [np.empty(0)] * (depth + 1)
        tt[depth] = v * g(self.s_leaf, idx)
        for b in range(depth - 1, -1, -1):
            z[b] = np.add.reduceat(tt[b + 1], t.starts(b + 1), axis=1)
            tt[b] = z[b] / g(self.den[b], idx)
        f = tt[0]
        for b in range(1, depth + 1):
            par = t.parent[b]
            f = tt[b] + g(self.ratio[b], idx) * (f - z[b - 1])[:, par]
        return f

    def prec(self, v: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``P_{idx[u]} v[u]`` for every ``u``."""
        ix = self.ix
        depth = ix.tree.depth
        out = self._g(self.w_leaf, idx) * v
        for b in range(depth):
            sums = np.add.reduceat(v, ix.lst[b], axis=1)
            out += (self._g(self.w[b], idx) * sums)[:, ix.anc[b]]
        if self.present is not None:
            out *= self._g(self.present, idx)
        return out

    def dense(self, j: int) -> np.ndarray:
        """Member ``j`` as a dense ``d × d`` matrix (``O(d²)``)."""
        m = self.apply(np.eye(self.ix.d)[None], np.array([j]))[0]
        return 0.5 * (m + m.T)


class _Final:
    """The final covariance of one outer node's inner vector, in a structured form."""

    def var(self) -> list[np.ndarray]:
        """``q_vᵀ Σ q_v`` for every inner node, per inner level."""
        raise NotImplementedError

    def dense(self) -> np.ndarray:
        """``Σ`` as a dense matrix."""
        raise NotImplementedError


class _FTree(_Final):
    def __init__(self, tc: _TreeCov, j: int) -> None:
        self.tc, self.j = tc, j

    def var(self) -> list[np.ndarray]:
        return [v[self.j] for v in self.tc.var]

    def dense(self) -> np.ndarray:
        return self.tc.dense(self.j)


class _FDense(_Final):
    def __init__(self, ix: _InnerIndex, m: np.ndarray) -> None:
        self.ix, self.m = ix, m
        self._var: list[np.ndarray] | None = None

    def var(self) -> list[np.ndarray]:
        if self._var is None:
            self._var = self.ix.block_var(self.m)
        return self._var

    def dense(self) -> np.ndarray:
        return self.m


class _FCombo(_Final):
    """``α·A + β·B`` (a child whose siblings share its covariance: ``(1 − 1/m)Σ↑ + Σ_u/m²``)."""

    def __init__(self, alpha: float, fa: _Final, beta: float, fb: _Final) -> None:
        self.alpha, self.fa, self.beta, self.fb = alpha, fa, beta, fb
        self._var: list[np.ndarray] | None = None

    def var(self) -> list[np.ndarray]:
        if self._var is None:
            self._var = [self.alpha * x + self.beta * y
                         for x, y in zip(self.fa.var(), self.fb.var(), strict=True)]
        return self._var

    def dense(self) -> np.ndarray:
        return self.alpha * self.fa.dense() + self.beta * self.fb.dense()


class _FSandwich(_Final):
    """``C + C G C`` with ``C`` a child's upward covariance, ``G`` its parent's correction."""

    def __init__(self, ix: _InnerIndex, up: _Up, j: int, g: np.ndarray,
                 c: np.ndarray | None = None) -> None:
        self.ix, self.up, self.j, self.g = ix, up, j, g
        self._var = ix.block_var(self._dense(c))

    def var(self) -> list[np.ndarray]:
        return self._var

    def dense(self) -> np.ndarray:
        return self._dense(None)

    def _dense(self, c: np.ndarray | None) -> np.ndarray:
        if c is None:
            c = self.up.dense(self.j)
        if self.j >= 0:
            tc = self.up.tc
            assert tc is not None
            cg = tc.apply(self.g[None], np.array([self.j]))[0]
            cgc = tc.apply(cg.T[None], np.array([self.j]))[0]
        else:
            cgc = c @ self.g @ c
        m = c + cgc
        return 0.5 * (m + m.T)


class _Up:
    """Upward covariances of one outer level.

    Each node has a type: ``j ≥ 0`` for member ``j`` of the tree batch, ``−1 − j`` for the
    dense matrix ``j``.
    """

    def __init__(self, n: int) -> None:
        self.tc: _TreeCov | None = None
        self.mats: list[np.ndarray] = []
        self.tid = np.zeros(n, dtype=np.int64)

    def dense(self, t: int) -> np.ndarray:
        if t >= 0:
            assert self.tc is not None
            return self.tc.dense(t)
        return self.mats[-1 - t]

    def apply(self, v: np.ndarray, tid: np.ndarray) -> np.ndarray:
        out = np.empty(v.shape)
        tr = tid >= 0
        if np.any(tr):
            assert self.tc is not None
            out[tr] = self.tc.apply(v[tr], tid[tr])
        for t in np.unique(tid[~tr]).tolist():
            sel = tid == t
            out[sel] = np.einsum("ij,ujk->uik", self.mats[-1 - t], v[sel])
        return out


def _weights(inner: Tree, n: int, meas: Measurements, a: int) -> list[np.ndarray]:
    """Per inner level, the weights ``(n, n_b)`` of the measurements at outer level ``a``."""
    return [np.asarray(meas[(a, b)][1], dtype=np.float64) if (a, b) in meas
            else np.zeros((n, inner.sizes[b])) for b in range(inner.depth + 1)]


def _solve_tree(outer: Tree, inner: Tree, meas: Measurements, k: int) -> GLSResult:
    """The structured solve (every finest cell present and measured at the finest level)."""
    ix = _InnerIndex(inner)
    d = ix.d
    depth = outer.depth
    full = np.ones((1, d), dtype=bool)
    ups: list[_Up] = [_Up(0)] * (depth + 1)
    up_x: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    z_l: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    m_l: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    shared_l: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    sinv_l: list[dict[int, np.ndarray]] = [{} for _ in range(depth + 1)]
    cache_l: list[dict[int, np.ndarray]] = [{} for _ in range(depth + 1)]  # dense upward covs
    for a in range(depth, -1, -1):
        n_a = outer.sizes[a]
        lm = _level_meas(inner, a, meas)
        vec = _vec(lm, n_a, d, k, np.broadcast_to(full, (n_a, d)))
        wa = _weights(inner, n_a, meas, a)
        up = _Up(n_a)
        if a == depth:
            first, inv = _distinct(np.concatenate(wa, axis=1))
            up.tc = _TreeCov(ix, [w[first] for w in wa])
            up.tid = inv
            x = up.tc.apply(vec, inv)
        else:
            child = ups[a + 1]
            st = outer.starts(a + 1)
            n_c = outer.sizes[a + 1]
            cnt = np.diff(np.append(st, n_c))
            tmin = np.minimum.reduceat(child.tid, st)
            tmax = np.maximum.reduceat(child.tid, st)
            shared = (tmin == tmax) & (tmin >= 0)
            z = np.add.reduceat(up_x[a + 1], st, axis=0)
            x = np.empty((n_a, d, k))
            sh = np.flatnonzero(shared)
            if sh.size:
                tc = child.tc
                assert tc is not None
                j, m = tmin[sh], cnt[sh].astype(np.float64)
                wn = [tc.w[b][j] / m[:, None] + wa[b][sh] for b in range(inner.depth + 1)]
                key = np.concatenate([j[:, None].astype(np.float64), m[:, None]]
                                     + [w[sh] for w in wa], axis=1)
                first, inv = _distinct(key)
                up.tc = _TreeCov(ix, [w[first] for w in wn])
                up.tid[sh] = inv
                rhs = tc.prec(z[sh], j) / m[:, None, None] + vec[sh]
                x[sh] = up.tc.apply(rhs, inv)
            cache = cache_l[a + 1]
            for u in np.flatnonzero(~shared).tolist():
                tids, counts = np.unique(child.tid[st[u]:st[u] + cnt[u]], return_counts=True)
                s = np.zeros((d, d))
                for t, c in zip(tids.tolist(), counts.tolist(), strict=True):
                    if t not in cache:
                        cache[t] = child.dense(t)
                    s += c * cache[t]
                sinv = _chol_inv(s[None], "sum of children")[0]
                cov = _chol_inv((sinv + ix.prec_dense([w[u] for w in wa]))[None],
                                f"outer level {a}")[0]
                up.mats.append(cov)
                up.tid[u] = -len(up.mats)
                sinv_l[a][u] = sinv
                x[u] = cov @ (sinv @ z[u] + vec[u])
            z_l[a], m_l[a], shared_l[a] = z, cnt, shared
        ups[a] = up
        up_x[a] = x
    # downward pass
    root = ups[0]
    t0 = int(root.tid[0])
    finals: list[list[_Final]] = [[_FTree(root.tc, t0) if t0 >= 0 and root.tc is not None
                                   else _FDense(ix, root.dense(t0))]]
    fidx = [np.zeros(1, dtype=np.int64)]
    fx = [up_x[0]]
    for a in range(1, depth + 1):
        par = outer.parent[a]
        up = ups[a]
        n_a = outer.sizes[a]
        shared, cnt, z = shared_l[a - 1], m_l[a - 1], z_l[a - 1]
        corr = fx[a - 1] - z
        sh_c = shared[par]
        x = up_x[a].copy()
        x[sh_c] += corr[par[sh_c]] / cnt[par[sh_c]][:, None, None]
        mx_c = np.flatnonzero(~sh_c)
        gs: dict[int, np.ndarray] = {}
        if mx_c.size:
            g = np.empty((mx_c.size, d, k))
            for u in np.unique(par[mx_c]).tolist():
                sel = par[mx_c] == u
                g[sel] = (sinv_l[a - 1][u] @ corr[u])[None]
                sinv = sinv_l[a - 1][u]
                pm = finals[a - 1][int(fidx[a - 1][u])].dense()
                gs[u] = sinv @ pm @ sinv - sinv
            x[mx_c] += up.apply(g, up.tid[mx_c])
        fx.append(x)
        # final covariances, one per distinct (own upward type, parent's final)
        pf = fidx[a - 1][par]
        key = np.stack([up.tid, pf, np.where(sh_c, -1, par)], axis=1)
        first, inv = _distinct(key)
        fl: list[_Final] = []
        for c in first.tolist():
            u = int(par[c])
            t = int(up.tid[c])
            parent_final = finals[a - 1][int(pf[c])]
            if shared[u]:
                assert up.tc is not None
                mc = float(cnt[u])
                fl.append(_FCombo(1.0 - 1.0 / mc, _FTree(up.tc, t), 1.0 / (mc * mc),
                                  parent_final))
            else:
                fl.append(_FSandwich(ix, up, t, gs[u], cache_l[a].get(t)))
        finals.append(fl)
        fidx.append(inv)
        cache_l[a] = {}
    return GLSResult(outer, inner, fx, finals, fidx)


# --------------------------------------------------------------------------------------------
# Key sets with absent cells: the inner tree's recursion at the outer leaves (one structured
# covariance per leaf pattern), dense d × d matrices above them (see the module docstring).
# --------------------------------------------------------------------------------------------


def _rows_block(d: int) -> int:
    """Nodes per block when each carries a ``d × d`` matrix (about 4M numbers per block)."""
    return max(1, min(_BLOCK, (1 << 22) // max(d * d, 1)))


class _LeafFinals:
    """Final covariances of the outer leaves: ``C + C G C`` per leaf, kept structured.

    ``C`` is the leaf's upward covariance (member ``tid[u]`` of a tree batch), ``G`` its
    parent's correction ``S⁻¹ Σ_p S⁻¹ − S⁻¹`` (``g[par[u]]``, dense ``d × d``). The variance of
    an inner node total ``q`` is ``qᵀCq + (Cq)ᵀG(Cq)``: tree recursions and ``O(d²)`` per node
    and leaf, by blocks of leaves.
    """

    def __init__(self, ix: _InnerIndex, tc: _TreeCov, tid: np.ndarray, par: np.ndarray,
                 g: np.ndarray) -> None:
        self.ix, self.tc, self.tid, self.par, self.g = ix, tc, tid, par, g
        self._var: dict[int, np.ndarray] = {}

    def batch_variance(self, b: int) -> np.ndarray:
        """``(n_leaves, n_b)``: the variance of every inner node of level ``b``, per leaf."""
        if b not in self._var:
            ix = self.ix
            q = np.zeros((ix.d, ix.tree.sizes[b]))
            q[np.arange(ix.d), ix.anc[b]] = 1.0
            n = self.tid.size
            out = self.tc.var[b][self.tid].copy()
            blk = max(1, (1 << 22) // max(ix.d * q.shape[1], 1))
            for s0 in range(0, n, blk):
                s1 = min(n, s0 + blk)
                cq = self.tc.apply(np.broadcast_to(q, (s1 - s0,) + q.shape),
                                   self.tid[s0:s1])
                gcq = _apply(self.g, self.par[s0:s1], cq)
                out[s0:s1] += np.einsum("uin,uin->un", cq, gcq)
            self._var[b] = out
        return self._var[b]

    def dense_all(self) -> np.ndarray:
        """``(n_leaves, d, d)``: every leaf's covariance, dense (tests; memory!)."""
        d = self.ix.d
        c = self.tc.apply(np.broadcast_to(np.eye(d), (self.tid.size, d, d)), self.tid)
        c = 0.5 * (c + np.swapaxes(c, -1, -2))
        m = c + c @ self.g[self.par] @ c
        return 0.5 * (m + np.swapaxes(m, -1, -2))


def _sum_children_tree(tc: _TreeCov, tid: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``Σ_children P⁻¹_{tid[c]}`` per parent, dense, by blocks of whole parents."""
    n = tid.size
    d = tc.ix.d
    out = np.zeros((starts.size, d, d))
    blk = _rows_block(d)
    eye = np.eye(d)
    for s0 in range(0, n, blk):     # a parent split across two blocks adds up both parts
        s1 = min(n, s0 + blk)
        m = tc.apply(np.broadcast_to(eye, (s1 - s0, d, d)), tid[s0:s1])
        owner = np.searchsorted(starts, np.arange(s0, s1), side="right") - 1
        first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        out[owner[first]] += np.add.reduceat(m, first, axis=0)
    return 0.5 * (out + np.swapaxes(out, -1, -2))


def _solve_leaves(outer: Tree, inner: Tree, present: np.ndarray, meas: Measurements,
                  k: int) -> GLSResult:
    """Absent cells: the tree recursion per outer leaf, dense matrices above the leaves.

    Needs every present finest cell measured at the finest level. Every outer leaf's upward
    covariance is the inverse of a tree precision on its present leaves (``O(d)`` per leaf);
    a parent's sum of its children's covariances is formed densely (``O(d²)`` per child) and
    the levels above are the dense vector-node form (``O(d³)`` per node).
    """
    ix = _InnerIndex(inner)
    d = ix.d
    depth = outer.depth
    masks = [present]
    for a in range(depth, 0, -1):
        masks.insert(0, np.logical_or.reduceat(masks[0], outer.starts(a), axis=0))
    n_leaf = outer.sizes[depth]
    wa = _weights(inner, n_leaf, meas, depth)
    vec = _vec(_level_meas(inner, depth, meas), n_leaf, d, k, present)
    first, tid = _distinct(np.concatenate([present.astype(np.float64)] + wa, axis=1))
    tc = _TreeCov(ix, [w[first] for w in wa], present[first])
    up_x: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    up_m: list[np.ndarray] = [np.empty(0)] * (depth + 1)   # dense upward covariances
    z_l: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    sinv_l: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    up_x[depth] = tc.apply(vec, tid)
    for a in range(depth - 1, -1, -1):
        n_a = outer.sizes[a]
        mask = masks[a]
        lm = _level_meas(inner, a, meas)
        st = outer.starts(a + 1)
        z = np.add.reduceat(up_x[a + 1], st, axis=0)
        if a == depth - 1:
            s = _sum_children_tree(tc, tid, st)
        else:
            s = _sum_children(up_m[a + 1], np.arange(outer.sizes[a + 1]), st)
        sinv, cov = _outer_level(s, lm, n_a, d, mask, a)
        x = cov @ (sinv @ z + _vec(lm, n_a, d, k, mask))
        z_l[a], sinv_l[a] = z, sinv
        up_m[a] = cov
        up_x[a] = x * mask[:, :, None]
    fx = [up_x[0]]
    fm: list[Any] = [up_m[0]] if depth else []
    gm = np.zeros((1, d, d))
    par = np.zeros(n_leaf, dtype=np.int64)
    for a in range(1, depth + 1):
        par = outer.parent[a]
        sinv = sinv_l[a - 1]
        g = sinv @ (fx[a - 1] - z_l[a - 1])
        gm = sinv @ fm[a - 1] @ sinv - sinv
        if a < depth:
            c = up_m[a] + up_m[a] @ gm[par] @ up_m[a]
            fm.append(0.5 * (c + np.swapaxes(c, -1, -2)))
            fx.append(up_x[a] + _apply(up_m[a], np.arange(outer.sizes[a]), g[par]))
        else:
            fx.append(up_x[a] + tc.apply(g[par], tid))
    fm.append(_LeafFinals(ix, tc, tid, par, gm))
    return GLSResult(outer, inner, fx, fm,
                     [np.arange(outer.sizes[a]) for a in range(depth)]
                     + [np.arange(n_leaf)])


def solve(outer: Tree, inner: Tree, present: np.ndarray, meas: Measurements, *,
          method: Literal["auto", "tree", "dense"] = "auto") -> GLSResult:
    """The GLS (BLUE) consistent estimate on a product of two trees, with exact covariances.

    Args:
        outer: Outer tree (any depth); its leaves index the rows of ``present``.
        inner: Inner tree; its leaves index the columns of ``present`` (``d`` leaves).
        present: Boolean ``(outer leaves, d)``: which finest cells exist (public key set).
        meas: ``(outer level a, inner level b) → (y, w)``: ``y`` the measured values
            ``(n_a, n_b, k)`` (``k`` right-hand sides, e.g. simulations; ``k = 0`` for the
            covariances alone), ``w`` the precision weights ``1/variance`` ``(n_a, n_b)``, 0
            where a cell is not measured.
        method: ``"tree"``: the inner tree's recursion inside the outer one (needs every
            present finest cell measured at the finest level; with absent cells, the
            recursion at the outer leaves and dense matrices above them); ``"dense"``:
            ``d × d`` matrices per distinct outer node; ``"auto"`` (default): ``"tree"`` where
            it applies. Both are exact.

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
        if y.shape[:2] != want or w.shape != want or y.ndim != 3:
            raise InvalidParameterError(
                f"solve: measurement {(a, b)} must have y of shape {want} + (k,) and w of shape "
                f"{want}; got {y.shape} and {w.shape}.")
        k = y.shape[2]
    fin = meas.get((outer.depth, inner.depth))
    measured = fin is not None and bool(np.all(fin[1][present] > 0))
    tree_ok = measured and bool(present.all())
    if method == "tree" and not measured:
        raise InvalidParameterError(
            "solve: method='tree' needs every present finest cell measured at the finest "
            "level.\nHint: use method='auto'.")
    if method != "dense" and tree_ok:
        return _solve_tree(outer, inner, meas, k)
    if method != "dense" and measured:
        return _solve_leaves(outer, inner, present, meas, k)
    masks = [present]
    for a in range(outer.depth, 0, -1):
        masks.insert(0, np.logical_or.reduceat(masks[0], outer.starts(a), axis=0))
    depth = outer.depth
    up_x: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    up_m: list[np.ndarray] = [np.empty(0)] * (depth + 1)   # distinct covariances
    up_i: list[np.ndarray] = [np.empty(0)] * (depth + 1)   # node -> distinct index
    z_l: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    sinv_l: list[np.ndarray] = [np.empty(0)] * (depth + 1)
    for a in range(depth, -1, -1):
        n_a = outer.sizes[a]
        mask = masks[a]
        lm = _level_meas(inner, a, meas)
        vec = _vec(lm, n_a, d, k, mask)
        if a == depth:
            # distinct (presence, weights) patterns share one inverse
            key = np.concatenate([mask.astype(np.float64)] + [w[:, anc] for anc, _, w in lm],
                                 axis=1)
            first, inv = _distinct(key)
            cov = _chol_inv(_info(lm, first, d, mask), "finest level")
            cov *= mask[first][:, :, None] & mask[first][:, None, :]
            x = _apply(cov, inv, vec)
        else:
            st = outer.starts(a + 1)
            z = np.add.reduceat(up_x[a + 1], st, axis=0)
            s = _sum_children(up_m[a + 1], up_i[a + 1], st)
            sinv, cov = _outer_level(s, lm, n_a, d, mask, a)
            inv = np.arange(n_a)
            x = cov @ (sinv @ z + vec)
            z_l[a], sinv_l[a] = z, sinv
        up_m[a], up_i[a] = cov, inv
        up_x[a] = x * mask[:, :, None]
    fx = [up_x[0]]
    fm = [up_m[0]]
    fi = [up_i[0]]
    for a in range(1, depth + 1):
        par = outer.parent[a]
        sinv = sinv_l[a - 1]
        g = sinv @ (fx[a - 1] - z_l[a - 1])
        pm = fm[a - 1][fi[a - 1]]  # the parents' final covariances
        gm = sinv @ pm @ sinv - sinv
        # a child's final covariance depends on its own distinct matrix and its parent only
        pair = up_i[a] * outer.sizes[a - 1] + par
        first, inv = _distinct(pair[:, None])
        cu = up_m[a][up_i[a][first]]
        c = cu + cu @ gm[par[first]] @ cu
        fm.append(0.5 * (c + np.swapaxes(c, -1, -2)))
        fi.append(inv)
        fx.append(up_x[a] + _apply(up_m[a], up_i[a], g[par]))
    return GLSResult(outer, inner, fx, list(fm), fi)


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
