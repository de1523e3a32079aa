"""Disclosure audit of a suppressed (or rounded) release by linear programming.

An intruder sees every published cell of every table and knows how the tables add up (each
margin is the sum of its children, along every hierarchy) and that the cells are non-negative.
For a withheld cell the smallest and largest values consistent with all of that are two linear
programmes (the classic audit of Tau-Argus, sdcTable's attacker problems). `audit_system()`
solves them with HiGHS (``scipy.optimize.linprog(method="highs")``) after splitting the
withheld cells into independent groups (connected components of the additivity constraints),
and fixes without a solver every cell that one equation alone pins exactly.

The results are confidential: they are built from the true values.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from tabdp.compare.sdc import Dim


@dataclass
class AuditResult:
    """Intervals an intruder derives for the audited cells.

    Attributes:
        targets: The audited variables (indices).
        lower: The smallest feasible value of each target.
        upper: The largest feasible value of each target (``inf``: unbounded).
        exact: Targets pinned by a single equation (found without a solver).
        n_lp: Linear programmes solved.
        components: Independent groups of withheld cells.
        largest_component: Cells in the largest group.
        seconds: Wall time.
        skipped: Programmes not solved: their optimum was proved by a bound (propagated
            through the equations) that an earlier programme's solution attains.
    """

    targets: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    exact: np.ndarray
    n_lp: int
    components: int
    largest_component: int
    seconds: float
    skipped: int = 0


def hierarchical_constraints(dims: Sequence[Dim]) -> sp.csr_matrix:
    """The additivity equations of a hierarchical table (``A @ x == 0``).

    Cells are numbered in row-major order of the dimensions' ``codes``
    (``np.ravel_multi_index``). For every dimension, every parent code and every choice of
    codes in the other dimensions there is one row: parent − Σ children = 0.

    Args:
        dims: The table's dimensions.

    Returns:
        A sparse matrix with one column per cell.

    Example:
        >>> from tabdp.compare.sdc import build_dim
        >>> a = hierarchical_constraints([build_dim("k", ["a", "b"], {})])
        >>> a.toarray().tolist()
        [[1.0, -1.0, -1.0]]
    """
    shape = tuple(len(d.codes) for d in dims)
    n = int(np.prod(shape))
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    r0 = 0
    for k, d in enumerate(dims):
        pos = {c: i for i, c in enumerate(d.codes)}
        others = [np.arange(s) for j, s in enumerate(shape) if j != k]
        grid = (np.stack(np.meshgrid(*others, indexing="ij"), -1).reshape(-1, len(others))
                if others else np.zeros((1, 0), dtype=np.int64))
        m = grid.shape[0]
        for parent, kids in d.children.items():
            if not kids:
                continue
            members = [(pos[parent], 1.0)] + [(pos[c], -1.0) for c in kids]
            for code_idx, coef in members:
                full = np.insert(grid, k, code_idx, axis=1)
                cols.append(np.asarray(np.ravel_multi_index(tuple(full.T), shape)))
                rows.append(r0 + np.arange(m))
                vals.append(np.full(m, coef))
            r0 += m
    if not rows:
        return sp.csr_matrix((0, n))
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(r0, n))


def audit_system(a: Any, values: np.ndarray, published: np.ndarray,
                 targets: np.ndarray, lb: np.ndarray | float = 0.0,
                 ub: np.ndarray | float = np.inf) -> AuditResult:
    """Smallest and largest feasible value of each target cell.

    The unknowns are the cells that are not ``published`` (their true ``values`` are used
    only to form the right-hand sides from the published cells, and as the answer for cells
    pinned exactly). For a rounded table pass ``published`` all false and the rounding
    intervals as ``lb``/``ub``.

    Args:
        a: Equations ``a @ x == 0`` over all cells, a SciPy sparse matrix (e.g.
            `hierarchical_constraints()`, several tables stacked on shared columns).
        values: The published (or true) value of every cell.
        published: Which cells the intruder sees exactly.
        targets: Cells to audit (withheld ones).
        lb: A-priori lower bound of every cell (default 0: non-negativity).
        ub: A-priori upper bound (default none).

    Returns:
        The intervals.

    Example:
        >>> import numpy as np, scipy.sparse as sp
        >>> a = sp.csr_matrix(np.array([[1.0, -1.0, -1.0]]))   # total = a + b
        >>> r = audit_system(a, np.array([10.0, 4.0, 6.0]), np.array([True, False, False]),
        ...                  np.array([1, 2]))
        >>> r.lower.tolist(), r.upper.tolist()
        ([0.0, 0.0], [10.0, 10.0])
    """
    t0 = time.perf_counter()
    a = sp.csr_matrix(a).astype(np.float64)
    n = a.shape[1]
    values = np.asarray(values, dtype=np.float64)
    published = np.asarray(published, dtype=bool)
    targets = np.asarray(targets, dtype=np.int64)
    lbv = np.broadcast_to(np.asarray(lb, dtype=np.float64), (n,)).copy()
    ubv = np.broadcast_to(np.asarray(ub, dtype=np.float64), (n,)).copy()
    scale = float(np.max(np.abs(values[np.isfinite(values)]), initial=1.0)) or 1.0
    unknown = ~published
    unk_idx = np.flatnonzero(unknown)
    pos = np.full(n, -1, dtype=np.int64)
    pos[unk_idx] = np.arange(unk_idx.size)
    au = a[:, unk_idx].tocsr()
    b = -(a[:, published] @ values[published]) / scale
    keep = np.diff(au.indptr) > 0
    au = au[keep]
    b = b[keep]
    lo_s = lbv[unk_idx] / scale
    hi_s = ubv[unk_idx] / scale
    lower = np.full(targets.size, np.nan)
    upper = np.full(targets.size, np.nan)
    tpos = pos[targets]
    # cells pinned by one equation in which they are the only unknown
    exact_mask = np.zeros(unk_idx.size, dtype=bool)
    if au.shape[0]:
        single = np.diff(au.indptr) == 1
        if single.any():
            exact_mask[au[single].indices] = True
    n_comp, labels = _components(au, unk_idx.size)
    sizes = np.bincount(labels, minlength=n_comp) if unk_idx.size else np.zeros(0, int)
    n_lp = 0
    n_skipped = 0
    au_csc = au.tocsc()
    want = np.zeros(unk_idx.size, dtype=bool)
    want[tpos[tpos >= 0]] = True
    for comp in np.unique(labels[want]) if unk_idx.size else []:
        members = np.flatnonzero(labels == comp)
        todo = members[want[members] & ~exact_mask[members]]
        if todo.size == 0:
            continue
        rows = np.unique(au_csc[:, members].indices)
        sub = au[rows][:, members]
        bsub = b[rows]
        # each group in its own units: HiGHS' tolerances are absolute, so a group of small
        # cells solved in units of the largest cell of the table would lose them
        f = float(np.max(np.abs(bsub), initial=0.0))
        fin = np.concatenate([lo_s[members], hi_s[members]])
        f = max(f, float(np.max(np.abs(fin[np.isfinite(fin)]), initial=0.0))) or 1.0
        bsub = bsub / f
        plo, phi = propagate_bounds(sub, bsub, lo_s[members] / f, hi_s[members] / f)
        solver = _Solver(sub, bsub, plo, phi)
        local = {int(v): i for i, v in enumerate(members)}
        for v in todo:
            j = local[int(v)]
            lo_v, hi_v, k = solver.range_of(j, plo[j], phi[j])
            n_lp += k
            n_skipped += 2 - k
            sel = tpos == v
            lower[sel] = lo_v * scale * f
            upper[sel] = hi_v * scale * f
    ex = exact_mask[np.maximum(tpos, 0)] & (tpos >= 0)
    lower[ex] = values[targets[ex]]
    upper[ex] = values[targets[ex]]
    return AuditResult(targets, lower, upper, targets[ex], n_lp, int(n_comp),
                       int(sizes.max(initial=0)), time.perf_counter() - t0, n_skipped)


def propagate_bounds(a: Any, b: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                     rounds: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Tighten the bounds of ``{x: a x = b, lo <= x <= hi}`` by propagation along each row.

    For each equation and each of its variables, the other variables' bounds bound this one;
    repeated until nothing changes (or ``rounds``). The results are valid outer bounds of
    every variable's feasible range (each LP optimum lies inside them): when a feasible point
    reaches one, that side of the range is known without solving its programme.

    Args:
        a: The equations (SciPy sparse).
        b: Their right-hand sides.
        lo: Lower bounds (may be ``-inf``).
        hi: Upper bounds (may be ``inf``).
        rounds: Most passes over the equations.

    Returns:
        The tightened ``(lo, hi)``.

    Example:
        >>> import numpy as np, scipy.sparse as sp
        >>> a = sp.csr_matrix(np.array([[1.0, 1.0]]))          # x0 + x1 = 10
        >>> lo, hi = propagate_bounds(a, np.array([10.0]), np.zeros(2), np.full(2, np.inf))
        >>> hi.tolist()
        [10.0, 10.0]
    """
    coo = sp.coo_matrix(a)
    r, c, d = coo.row, coo.col, coo.data.astype(np.float64)
    lo = np.asarray(lo, dtype=np.float64).copy()
    hi = np.asarray(hi, dtype=np.float64).copy()
    m = coo.shape[0]
    if m == 0 or d.size == 0:
        return lo, hi
    pos = d > 0
    for _ in range(rounds):
        with np.errstate(invalid="ignore", over="ignore"):
            tmin = np.where(pos, d * lo[c], d * hi[c])      # each term's smallest value
            tmax = np.where(pos, d * hi[c], d * lo[c])
        fmin, fmax = np.isfinite(tmin), np.isfinite(tmax)
        smin = np.bincount(r, np.where(fmin, tmin, 0.0), m)
        smax = np.bincount(r, np.where(fmax, tmax, 0.0), m)
        nmin = np.bincount(r, ~fmin, m)
        nmax = np.bincount(r, ~fmax, m)
        # the other terms of the row: sum of their smallest (largest) values
        rmin = np.where(nmin[r] - ~fmin > 0, -np.inf, smin[r] - np.where(fmin, tmin, 0.0))
        rmax = np.where(nmax[r] - ~fmax > 0, np.inf, smax[r] - np.where(fmax, tmax, 0.0))
        ax_lo, ax_hi = b[r] - rmax, b[r] - rmin                # bounds of d * x
        with np.errstate(invalid="ignore"):
            new_lo = np.where(pos, ax_lo / d, ax_hi / d)
            new_hi = np.where(pos, ax_hi / d, ax_lo / d)
        lo2, hi2 = lo.copy(), hi.copy()
        np.maximum.at(lo2, c, np.nan_to_num(new_lo, nan=-np.inf))
        np.minimum.at(hi2, c, np.nan_to_num(new_hi, nan=np.inf))
        hi2 = np.maximum(hi2, lo2)        # round-off on a variable pinned exactly
        gain = np.abs(np.concatenate([lo2 - lo, hi2 - hi]))
        gain = gain[np.isfinite(gain)]
        changed = bool((np.isfinite(lo2) != np.isfinite(lo)).any()
                       or (np.isfinite(hi2) != np.isfinite(hi)).any())
        lo, hi = lo2, hi2
        if not changed and float(gain.max(initial=0.0)) <= 1e-12:
            break
    return lo, hi


def _components(au: sp.csr_matrix, n: int) -> tuple[int, np.ndarray]:
    """Connected components of the unknowns (two are linked when an equation holds both)."""
    from scipy.sparse.csgraph import connected_components

    if n == 0:
        return 0, np.zeros(0, dtype=np.int64)
    m = au.shape[0]
    inc = sp.csr_matrix((np.ones(au.nnz), au.indices, au.indptr), shape=(m, n))
    graph: Any = (sp.bmat([[None, inc], [inc.T, None]], format="csr") if m
                  else sp.csr_matrix((n, n)))
    k, lab = connected_components(graph, directed=False)
    lab = lab[m:] if m else lab
    # renumber to the components the unknowns use
    uniq, lab2 = np.unique(lab, return_inverse=True)
    return int(uniq.size), lab2.astype(np.int64)


class _Solver:
    """min and max of one variable over ``{x: a x = b, lo <= x <= hi}``, one model reused.

    Uses the HiGHS bindings SciPy ships (``scipy.optimize._highspy``, SciPy >= 1.15): the
    model is passed once and each objective is a change of one cost, so HiGHS' simplex starts
    from the previous basis. Without them, ``scipy.optimize.linprog(method="highs")`` solves
    every programme from scratch (same answers, slower).
    """

    def __init__(self, a: sp.csr_matrix, b: np.ndarray, lo: np.ndarray, hi: np.ndarray
                 ) -> None:
        self.a, self.b, self.lo, self.hi = a, b, lo, hi
        self.prev: int | None = None
        self.h: Any = None
        self.seen_lo: np.ndarray | None = None
        self.seen_hi: np.ndarray | None = None
        try:
            from scipy.optimize._highspy import _core
        except ImportError:  # pragma: no cover - SciPy < 1.15
            return
        self.core = _core
        h = _core._Highs()
        for k, v in (("output_flag", False), ("presolve", "off"), ("threads", 1)):
            h.setOptionValue(k, v)
        lp = _core.HighsLp()
        csc = sp.csc_matrix(a)
        lp.num_col_, lp.num_row_ = csc.shape[1], csc.shape[0]
        lp.col_cost_ = np.zeros(csc.shape[1])
        lp.col_lower_ = np.asarray(lo, dtype=np.float64)
        lp.col_upper_ = np.where(np.isfinite(hi), hi, _core.kHighsInf)
        lp.row_lower_ = np.asarray(b, dtype=np.float64)
        lp.row_upper_ = np.asarray(b, dtype=np.float64)
        lp.a_matrix_.format_ = _core.MatrixFormat.kColwise
        lp.a_matrix_.start_ = csc.indptr
        lp.a_matrix_.index_ = csc.indices
        lp.a_matrix_.value_ = csc.data
        h.passModel(lp)
        self.h = h

    def range_of(self, j: int, lo_j: float = -np.inf, hi_j: float = np.inf
                 ) -> tuple[float, float, int]:
        """The smallest and largest feasible value of variable ``j`` (``inf`` if unbounded).

        ``lo_j``/``hi_j`` are valid outer bounds of its range (`propagate_bounds()`): a side
        that an earlier solution already reaches is returned without solving. Also returns
        the number of programmes solved (0 to 2).
        """
        if self.h is None:
            a, b = self._linprog(j)
            return a, b, 2
        h, core = self.h, self.core
        out: list[float] = []
        solved = 0
        for sign in (1.0, -1.0):
            bound = lo_j if sign > 0 else hi_j
            if (self.seen_lo is not None and self.seen_hi is not None
                    and np.isfinite(bound)):
                reach = self.seen_lo[j] if sign > 0 else self.seen_hi[j]
                if abs(reach - bound) <= 1e-9 * max(1.0, abs(bound)):
                    out.append(bound)
                    continue
            if self.prev is not None:
                h.changeColCost(self.prev, 0.0)
            self.prev = j
            h.changeColCost(j, sign)
            h.run()
            solved += 1
            st = h.getModelStatus()
            if st == core.HighsModelStatus.kOptimal:
                out.append(sign * float(h.getInfo().objective_function_value))
                self._saw(h)
            elif st in (core.HighsModelStatus.kUnbounded,
                        core.HighsModelStatus.kUnboundedOrInfeasible):
                out.append(-sign * np.inf)
            else:
                h.clearSolver()        # a failed warm start: solve this one from scratch
                h.run()
                ok = h.getModelStatus() == core.HighsModelStatus.kOptimal
                out.append(sign * float(h.getInfo().objective_function_value) if ok
                           else np.nan)
                if ok:
                    self._saw(h)
        return out[0], out[1], solved

    def _saw(self, h: Any) -> None:
        """Keep the range of values the optimal solutions so far have reached."""
        x = np.asarray(h.getSolution().col_value, dtype=np.float64)
        if self.seen_lo is None or self.seen_hi is None:
            self.seen_lo, self.seen_hi = x.copy(), x.copy()
        else:
            np.minimum(self.seen_lo, x, out=self.seen_lo)
            np.maximum(self.seen_hi, x, out=self.seen_hi)

    def _linprog(self, j: int) -> tuple[float, float]:
        from scipy.optimize import linprog

        c = np.zeros(self.a.shape[1])
        c[j] = 1.0
        bounds: Any = [(float(lo), float(hi) if np.isfinite(hi) else None)
                       for lo, hi in zip(self.lo.tolist(), self.hi.tolist(), strict=True)]
        a_eq: Any = self.a
        out = []
        for sign in (1.0, -1.0):
            res = linprog(sign * c, A_eq=a_eq, b_eq=self.b, bounds=bounds, method="highs")
            if res.status == 3:
                out.append(-sign * np.inf)
            elif res.status != 0:
                out.append(np.nan)
            else:
                fun = res.fun
                out.append(sign * float(fun) if fun is not None else np.nan)
        return out[0], out[1]
