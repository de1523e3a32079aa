"""Consistent hierarchical tables from released levels: the Python entry point.

[`consistent`][tabdp.hierarchy.consistent] takes released tables of one measure set at several
levels of a geography × industry hierarchy (the table itself and its directly released
rollups), and returns every requested level as the GLS (best linear unbiased) consistent
estimate: every parent equals the sum of its children, and, unrounded, every level is at least
as accurate as its own release alone and as the rollup. Rounded to a ``grid`` (or ``integer``),
a cell also carries the rounding error of the finest cells below it: unbiased, and off by less
than one step along each rounding block, it adds ``grid²/6`` per block range below the cell
on average (one range for a cell of one classification; docs/hierarchy.md, "Rounding and
additivity to the last digit"), which can make a cross-classified level slightly less
accurate than its direct release ("When the direct release is better"). It reads only the
released cells and public parameters (mechanisms, hierarchies, key sets): it is
post-processing and costs no privacy.

Example:
    >>> import polars as pl
    >>> from tabdp.mechanisms import Gaussian
    >>> geo = pl.DataFrame({"state": ["X", "X", "Y"], "county": ["a", "b", "c"]})
    >>> county = pl.DataFrame({"county": ["a", "b", "c"], "jobs": [10.0, 20.0, 5.0],
    ...                        "jobs_sd": [1.0, 1.0, 1.0]})
    >>> state = pl.DataFrame({"state": ["X", "Y"], "jobs": [33.0, 5.0], "jobs_sd": [1.0, 1.0]})
    >>> out = consistent({("county",): county, ("state",): state}, measures=["jobs"],
    ...                  hierarchies={"geo": geo}, mechanisms=Gaussian(sigma=1.0))
    >>> out[("state",)]["jobs"].round(6).to_list(), out[("county",)]["jobs"].round(6).to_list()
    ([32.0, 5.0], [11.0, 21.0, 5.0])
    >>> round(out[("state",)]["jobs_sd"][0], 6)    # sqrt(1 / (1 + 1/2))
    0.816497

    With ``nonnegative=True`` the estimate is clamped, while the interval stays the unbiased
    estimate's (county c: -2.5 ∓ 1.16, raised to 0):

    >>> neg = {("county",): county.with_columns(jobs=pl.Series([10.0, 20.0, -2.5])),
    ...        ("state",): state.with_columns(jobs=pl.Series([33.0, -2.5]))}
    >>> nn = consistent(neg, measures=["jobs"], hierarchies={"geo": geo},
    ...                 mechanisms=Gaussian(sigma=1.0), nonnegative=True)[("county",)]
    >>> nn["jobs"][2], nn["jobs_lower"][2], nn["jobs_upper"][2]
    (0.0, 0.0, 0.0)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from scipy.special import ndtr, ndtri

from tabdp._validation import check_level
from tabdp.exceptions import InvalidParameterError
from tabdp.hierarchy.gls import GLSResult, Tree, solve
from tabdp.hierarchy.margins import (
    UNIFORM,
    NoiseLaw,
    chebyshev_margin,
    gauss_margin,
    group_block,
    margins,
    noise_law,
    rounding_radius,
)
from tabdp.mechanisms import DEFAULT_LEVEL, Mechanism
from tabdp.mechanisms.discrete import DiscreteAdditiveMechanism
from tabdp.mechanisms.transformation import TransformationMechanism
from tabdp.noise.exact import UNIFORM_BITS

__all__ = ["consistent", "Product", "cell_weights", "expected_margin", "METHOD_GAUSSIAN",
           "METHOD_STABLE", "METHOD_CERTIFIED", "METHOD_NORMAL"]

METHOD_GAUSSIAN = "exact: Gaussian (linear combination of Gaussian errors)"
METHOD_STABLE = ("exact: symmetric alpha-stable (stability: scale (Σ|w_j γ_j|^α)^(1/α) of the "
                 "estimator's weights w_j)")
METHOD_CERTIFIED = ("certified: coverage at least the level for every cell (the law of the "
                    "weighted sum of the measured cells' errors, from the estimator's rows: "
                    "characteristic-function inversion with bounded errors, the rounding to the "
                    "grid bounded; Gauss's inequality for laws without a closed-form "
                    "characteristic function)")
#: The former name (the normal approximation it described is no longer used: review r84).
METHOD_NORMAL = METHOD_CERTIFIED

Level = tuple[str, ...]


@dataclass
class _Axis:
    """One hierarchy used by the levels: its level names (coarse→fine, root excluded)."""

    name: str
    levels: list[str]            # columns, coarse → fine (root "all" is level 0, not listed)
    codes: list[pl.Series]       # codes per level 1.. in node order
    tree: Tree

    def level_of(self, col: str | None) -> int:
        return 0 if col is None else self.levels.index(col) + 1


def _build_axis(name: str, mapping: pl.DataFrame, cols: list[str]) -> _Axis:
    """Tree of a hierarchy mapping (columns coarse → fine) truncated at ``cols[-1]``."""
    m = mapping.select(cols).unique()
    for j in range(1, len(cols)):
        fine, coarse = cols[j], cols[j - 1]
        bad = m.group_by(fine).agg(pl.col(coarse).n_unique().alias("n")).filter(pl.col("n") > 1)
        if bad.height:
            raise InvalidParameterError(
                f"consistent: hierarchy {name!r} maps some {fine!r} codes to more than one "
                f"{coarse!r} code, e.g. {bad[fine].head(5).to_list()}.\nHint: each code must "
                "have exactly one parent.")
    codes: list[pl.Series] = []
    parents: list[np.ndarray] = []
    prev: pl.DataFrame | None = None
    for j, c in enumerate(cols):
        lv = m.select(cols[: j + 1]).unique()
        if prev is None:
            lv = lv.sort(c)
            parents.append(np.zeros(lv.height, dtype=np.int64))
        else:
            lv = lv.join(prev.select(cols[j - 1], "__tabdp_i"), on=cols[j - 1], how="left")
            lv = lv.sort("__tabdp_i", c)
            parents.append(lv["__tabdp_i"].to_numpy().astype(np.int64))
            lv = lv.drop("__tabdp_i")
        lv = lv.with_row_index("__tabdp_i")
        codes.append(lv[c])
        prev = lv
    return _Axis(name, list(cols), codes, Tree.from_parents(parents))


@dataclass
class Product:
    """The product of two hierarchies that the levels of a consistent table live on.

    Built by [`consistent`][tabdp.hierarchy.consistent] (and the planning functions) from the
    public hierarchy mappings and the finest level's key set.

    Attributes:
        outer: The hierarchy with more leaves (solved as the tree).
        inner: The other (its leaves form the vector of each outer node).
        present: Which finest cells exist (outer leaves × inner leaves).
    """

    outer: _Axis
    inner: _Axis
    present: np.ndarray

    @staticmethod
    def build(levels: Sequence[Sequence[str]], keys: pl.DataFrame,
              hierarchies: Mapping[str, pl.DataFrame]) -> Product:
        """The product for these levels, from the finest key set and the hierarchies.

        Args:
            levels: Levels (tuples of key columns); the finest is the longest.
            keys: The finest level's key set (exactly its columns).
            hierarchies: Name → mapping, one column per level, coarse to fine.

        Returns:
            The product.

        Example:
            >>> import polars as pl
            >>> p = Product.build([("c",), ()], pl.DataFrame({"c": ["a", "b"]}), {})
            >>> p.pair(("c",)), p.pair(()), p.present.shape
            ((1, 0), (0, 0), (2, 1))
        """
        lv = [_level_key(x, "a level") for x in levels]
        return _product(lv, keys, max(lv, key=len), dict(hierarchies))

    def aggregate(self, level: Sequence[str], fin: np.ndarray) -> np.ndarray:
        """Sums of finest-cell values ``(outer leaves, inner leaves, ...)`` at a level.

        Args:
            level: The level's columns.
            fin: Values of the finest cells in solver order (trailing axes kept).

        Returns:
            ``(n_outer nodes, n_inner nodes, ...)`` at the level (``keys(level)`` order).

        Example:
            >>> import numpy as np, polars as pl
            >>> p = Product.build([("c",), ()], pl.DataFrame({"c": ["a", "b"]}), {})
            >>> p.aggregate((), np.array([[1.0], [2.0]])).tolist()
            [[3.0]]
        """
        return _aggregate(self, *self.pair(level), fin)

    def pair(self, level: Sequence[str]) -> tuple[int, int]:
        """(outer level, inner level) of a level given by its columns."""
        o = [c for c in level if c in self.outer.levels]
        i = [c for c in level if c in self.inner.levels]
        return self.outer.level_of(o[0] if o else None), self.inner.level_of(i[0] if i else None)

    def keys(self, level: Sequence[str]) -> pl.DataFrame:
        """All cells of a level (cross product of the two trees' nodes), in solver order."""
        a, b = self.pair(level)
        cols: list[pl.DataFrame] = []
        no, ni = self.outer.tree.sizes[a], self.inner.tree.sizes[b]
        if a:
            s = self.outer.codes[a - 1]
            cols.append(pl.DataFrame([s.gather(np.repeat(np.arange(no), ni))]))
        if b:
            s = self.inner.codes[b - 1]
            cols.append(pl.DataFrame([s.gather(np.tile(np.arange(ni), no))]))
        if not cols:
            return pl.DataFrame()
        return pl.concat(cols, how="horizontal").select(list(level))

    def index(self, level: Sequence[str], frame: pl.DataFrame,
              missing_ok: bool = False) -> np.ndarray:
        """Flat cell index (outer node × n_inner + inner node) of each row of ``frame``.

        Rows with a code that is not in the hierarchy raise, or get -1 with ``missing_ok``.
        """
        a, b = self.pair(level)
        ni = self.inner.tree.sizes[b]
        n = frame.height
        oi = np.zeros(n, dtype=np.int64)
        ii = np.zeros(n, dtype=np.int64)
        for axis, lv, out in ((self.outer, a, oi), (self.inner, b, ii)):
            if lv == 0:
                continue
            col = axis.levels[lv - 1]
            codes = axis.codes[lv - 1]
            lut = pl.DataFrame({col: codes, "__tabdp_j": np.arange(codes.len())})
            try:
                f = frame.select(pl.col(col).cast(codes.dtype, strict=True))
            except Exception:  # noqa: BLE001 - any Polars cast failure
                raise InvalidParameterError(
                    f"consistent: column {col!r} has dtype {frame.schema[col]}, which cannot be "
                    f"cast to the hierarchy's {codes.dtype}.\nHint: use the same code type in "
                    "the released tables and the hierarchy.") from None
            j = f.join(lut, on=col, how="left", maintain_order="left")["__tabdp_j"]
            if j.null_count() and missing_ok:
                j = j.fill_null(-(1 << 40))
            elif j.null_count():
                miss = f.filter(j.is_null())[col].head(5).to_list()
                raise InvalidParameterError(
                    f"consistent: {j.null_count()} {col!r} code(s) of a released table are not "
                    f"in hierarchy {axis.name!r}, e.g. {miss}.\nHint: complete the hierarchy.")
            out[:] = j.to_numpy()
        flat = oi * ni + ii
        return np.where((oi < 0) | (ii < 0), -1, flat) if missing_ok else flat


def _product(levels: Sequence[Level], finest: pl.DataFrame, finest_level: Level,
             hierarchies: Mapping[str, pl.DataFrame]) -> Product:
    used: dict[str, list[str]] = {}
    for hname, mp in hierarchies.items():
        if not isinstance(mp, pl.DataFrame):
            raise InvalidParameterError(
                f"consistent: hierarchies[{hname!r}] must be a Polars DataFrame with one column "
                f"per level, coarse to fine; got {type(mp).__name__}.")
    axes: list[_Axis] = []
    for c in finest_level:
        h = _owner(c, levels, hierarchies)
        if h is None:  # a flat classification: one level under "all", codes from the key set
            axes.append(_build_axis(c, finest.select(c).unique(), [c]))
            continue
        mp = hierarchies[h]
        cols = mp.columns[: mp.columns.index(c) + 1]
        used[h] = cols
        axes.append(_build_axis(h, mp, cols))
    for lv in levels:
        for c in lv:
            ax = [x for x in axes if c in x.levels]
            if not ax:
                hint = "every level must be a coarsening of the finest one."
                for h, cols in used.items():
                    mp = hierarchies[h]
                    if c in mp.columns and mp.columns.index(c) >= len(cols) and (
                            mp.group_by(cols[-1]).agg(pl.col(c).n_unique().alias("n"))
                            ["n"].max() == 1):
                        # listed after the finest column but coarser than it (each finest
                        # code under one code of it): the columns were given fine to coarse
                        order = [c] + [x for x in mp.columns if x != c]
                        hint = (f"hierarchies[{h!r}] lists {c!r} after {cols[-1]!r}, and its "
                                f"columns are read coarse to fine, but each {cols[-1]!r} code "
                                f"is under one {c!r} code: pass hierarchies={{{h!r}: "
                                f"frame.select({order!r})}} (frame: the mapping passed).")
                raise InvalidParameterError(
                    f"consistent: column {c!r} of level {list(lv)} is neither a column of the "
                    f"finest level {list(finest_level)} nor a coarser level of its "
                    f"hierarchies.\nHint: {hint}")
        if len({x.name for c in lv for x in axes if c in x.levels}) != len(lv):
            raise InvalidParameterError(
                f"consistent: level {list(lv)} names two columns of one hierarchy.\nHint: one "
                "column per hierarchy (e.g. ['state', 'naics2']).")
    if len(axes) > 2:
        raise InvalidParameterError(
            f"consistent: the finest level {list(finest_level)} has {len(axes)} classifications;"
            " at most two (e.g. geography × industry) are supported.\nHint: solve each value "
            "of the third classification separately.")
    while len(axes) < 2:
        axes.append(_Axis("__tabdp_all", [], [], Tree.from_parents([])))
    if axes[0].tree.sizes[-1] < axes[1].tree.sizes[-1]:
        axes.reverse()
    prod = Product(axes[0], axes[1], np.zeros(0, dtype=bool))
    idx = prod.index(finest_level, finest)
    present = np.zeros(axes[0].tree.sizes[-1] * axes[1].tree.sizes[-1], dtype=bool)
    present[idx] = True
    prod.present = present.reshape(axes[0].tree.sizes[-1], axes[1].tree.sizes[-1])
    return prod


def _owner(col: str, levels: Sequence[Level], hierarchies: Mapping[str, pl.DataFrame]
           ) -> str | None:
    """The hierarchy whose tree the finest column ``col`` is solved on (None: a flat one).

    Alternative hierarchies may share ``col`` (two groupings of the same codes): the first
    that holds, at or above ``col``, every column of ``levels`` that one of them holds.
    """
    cands = [h for h, mp in hierarchies.items() if col in mp.columns]
    if len(cands) <= 1:
        return cands[0] if cands else None
    used = {c for lv in levels for c in lv if any(c in hierarchies[h].columns for h in cands)}
    for h in cands:
        cols = hierarchies[h].columns
        if used <= set(cols[: cols.index(col) + 1]):
            return h
    raise InvalidParameterError(
        f"consistent: the levels {sorted(used)} over {col!r} are spread over the alternative "
        f"hierarchies {cands}, which share {col!r}; a consistent estimate is solved on one "
        "tree per classification.\nHint: solve the levels of each hierarchy separately.")


def cell_weights(mechanism: Mechanism, measure: str) -> tuple[float, str, float]:
    """Public noise spread of one released cell: ``(var_or_scale², law kind, alpha)``.

    Additive mechanisms only (the noise law does not depend on the data): the noise variance,
    or for symmetric α-stable noise with α < 2 (no variance) the squared scale γ², used as the
    GLS weight ``1/γ²``.

    Args:
        mechanism: The mechanism that released the level.
        measure: The measure (a joint mechanism is split per measure).

    Returns:
        ``(v, kind, alpha)`` with ``kind`` one of ``"gaussian"``, ``"stable"``, ``"other"``.

    Raises:
        InvalidParameterError: For a transformation mechanism or a non-mechanism.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> cell_weights(Gaussian(sigma=2.0), "x")
        (4.0, 'gaussian', 2.0)
    """
    if not isinstance(mechanism, Mechanism):
        raise InvalidParameterError(
            f"consistent: mechanisms must be tabdp mechanisms; got {mechanism!r}.")
    mech: Any = mechanism
    if getattr(mech, "joint", False) and hasattr(mech, "measure_mechanism"):
        mech = mech.measure_mechanism(measure)
    if isinstance(mech, TransformationMechanism):
        raise InvalidParameterError(
            f"consistent: measure {measure!r} was released by {mech!r}, a transformation "
            "mechanism whose error variance depends on the true value; the GLS weights must "
            "come from public information only.\nHint: release the measured levels with an "
            "additive mechanism (Gaussian, Laplace, ExpPolyLog, ...) for a consistent table.")
    law = mech.sum_law()
    if law.kind == "stable" and law.alpha < 2.0:
        g = float(law.noise.gamma)
        _check_weight(mech, g * g, "squared scale")
        return g * g, "stable", float(law.alpha)
    var = float(law.noise.variance())
    if not (math.isfinite(var) and var > 0.0):
        raise InvalidParameterError(
            f"consistent: the noise of {mech!r} has variance {var!r}; GLS weights need a "
            "finite positive variance.\nHint: use a mechanism with finite variance.")
    _check_weight(mech, var, "variance")
    return var, ("gaussian" if law.kind == "gaussian" else "other"), 2.0


def _check_weight(mech: Any, spread: float, what: str) -> None:
    """Refuse a spread whose GLS weight ``1/spread`` leaves the solve no room (review 62m).

    The solve adds weights over up to billions of cells: a weight above ``2**960`` (a noise sd
    below about 3e-145) can overflow there. Below about 1e-154 the weight itself was ``inf``,
    and the table came out with sd 0 and margins 0 (or a false "not identified" error).
    """
    if not spread >= _MIN_SPREAD:
        raise InvalidParameterError(
            f"consistent: the noise of {mech!r} has {what} {spread!r}; its GLS weight "
            f"1/{what} needs a {what} of at least 2**-960 (about 1e-289) to stay a finite "
            "number in the solve.\nHint: release the measure in a smaller unit (the values and "
            "the noise scale multiplied by, e.g., 1e100).")


#: Smallest variance (or squared scale) of a measured level's noise: weights up to 2**960.
_MIN_SPREAD = 2.0**-960


def _level_key(level: Any, what: str) -> Level:
    if isinstance(level, str) or not isinstance(level, (tuple, list)):
        raise InvalidParameterError(
            f"consistent: {what} must be a tuple of column names, e.g. ('state', 'naics2') or "
            f"() for the national total; got {level!r}.")
    return tuple(str(c) for c in level)


def consistent(released: Mapping[Level, pl.DataFrame], *, measures: Sequence[str],
               hierarchies: Mapping[str, pl.DataFrame],
               mechanisms: Mechanism | Mapping[Level, Mechanism],
               outputs: Sequence[Level] | None = None, level: float = DEFAULT_LEVEL,
               grid: float | Mapping[str, float] | None = None, nonnegative: bool = False,
               integer: bool = False,
               output_keys: Mapping[Level, pl.DataFrame] | None = None
               ) -> dict[Level, pl.DataFrame]:
    """The consistent (GLS) estimate of a hierarchy of released tables. Post-processing.

    Each entry of ``released`` is a table released directly at one level of a product of at
    most two hierarchies (e.g. ``("county", "naics2")``, ``("state", "naics2")``, ``()``); one
    of them, the *finest*, has the finest column of each hierarchy used, and its rows are the
    public key set of the finest cells. The result gives each level of ``outputs`` (default:
    the released levels) with, per measure ``m``: ``m`` (the GLS estimate: every cell is the
    sum of the estimated finest cells under it), ``m_sd`` (exact sd of the estimate: the
    linear estimator's, plus the variance of the rounding to ``grid`` where there is one;
    ``inf`` for α-stable noise), ``m_moe`` (half-width of the ``level`` interval: from the exact law
    for Gaussian noise, and α-stable by stability; for every other law a margin certified to
    cover at least ``level`` in every cell, from the law of the cell's error: see
    `tabdp.hierarchy.margins`), ``m_lower``, ``m_upper`` (``m ∓ m_moe``; see
    ``nonnegative``), and with ``nonnegative`` ``m_centre`` (the unbiased estimate the interval
    is centred on; the publication rules judge cv, C and S on it).

    The GLS weights are ``1/variance`` of each level's noise, from its mechanism alone (α-stable
    noise: ``1/γ²``); the released ``m_sd`` columns are not read. A cell of a measured level
    that is missing from its table is treated as not measured.

    Options (post-processing of the finest cells, after which every level is again the sum of
    its finest cells):

    * ``grid``: finest cells rounded to multiples of ``grid`` without bias (up with
      probability equal to the fractional part), systematically along each block (one code of
      the classification with fewer codes, down the other's leaves in tree order): every range
      of a block is off by less than one step, counted in whole steps; every level is then an
      exact integer multiple of ``grid``, and parents equal the sums of their children exactly
      (in whole steps). The published doubles add float64's rounding: a cell is off from its
      unrounded estimate by less than one step plus ``2**-51`` of its magnitude (under
      ``1 + 2**-11`` steps within ``2**40`` steps of 0; beyond ``2**53`` steps, where float64
      cannot hold every multiple of the step, by several steps). The finest cells' magnitudes
      must add up to less than ``2**61`` steps: a table beyond is returned unrounded. The sd and the
      margins include the rounding (variance ``grid²/6`` on average per block range below a
      cell: e.g. 30 counties at sd 2 under a state released at sd 3: 2.92 on grid 1, 2.89
      without, 3.0 for the state's direct release; independent rounding of the 30 counties
      gave 3.66). A grid coarser than about a tenth of the noise's sd (refused in a release
      spec) leaves the errors on a coarse lattice and makes the coverage uneven from cell to
      cell (a level's average stays near ``level``); with discrete mechanisms and an integer
      grid every published error is a whole number and the margins are the whole part of
      the certified margin: at least ``level`` in every cell, not randomized.
    * ``nonnegative``: finest cells below 0 set to 0 (biased upwards: the bias adds up at
      coarse levels). ``m_sd``, ``m_moe``, ``m_lower`` and ``m_upper`` stay those of the
      unbiased consistent estimate, i.e. of the same call without ``nonnegative``, so the
      interval does not contain the (clamped) estimate where the bias exceeds the margin;
      its ends are raised to 0 where negative (the option says the true values are ``≥ 0``,
      so this keeps the coverage).
    * ``integer``: finest cells rounded to whole numbers (implies ``grid = 1``).

    Args:
        released: Level (tuple of key columns) → released table (key columns, ``m`` and
            ``m_sd`` per measure).
        measures: Measures to make consistent.
        hierarchies: Name → mapping DataFrame with one column per level, coarse to fine (e.g.
            ``state, county``). A key column in no hierarchy is a flat classification whose
            only coarser level is "all".
        mechanisms: The mechanism of every level, or level → mechanism.
        outputs: Levels to return (released or not). Default: the released levels.
        level: Confidence level of the margins.
        grid: Optional rounding step of the finest cells (exact additivity), one for every
            measure or measure → step.
        nonnegative: Clamp negative finest cells to 0 (sd and interval: the unbiased
            estimate's, ends raised to 0).
        integer: Round finest cells to whole numbers.
        output_keys: Optional level → key frame: the rows of that output, in that order (a key
            with no existing finest cell below it, or a code not in the hierarchies, gets 0
            with sd 0).

    Returns:
        Level → frame with the level's keys (``output_keys`` if given; else a released level
        keeps its table's rows and order, and another level lists every combination of codes
        with at least one existing finest cell below it, sorted) and the measure columns.

    Raises:
        InvalidParameterError: For levels that are not coarsenings of one finest level, a
            finest cell that is not measured, missing columns or mechanisms, or a
            transformation mechanism.

    Example:
        >>> import polars as pl
        >>> from tabdp.mechanisms import Gaussian
        >>> t = pl.DataFrame({"c": ["a", "b"], "n": [1.4, 2.2], "n_sd": [1.0, 1.0]})
        >>> nat = pl.DataFrame({"n": [4.0], "n_sd": [1.0]})
        >>> out = consistent({("c",): t, (): nat}, measures=["n"], hierarchies={},
        ...                  mechanisms=Gaussian(sigma=1.0), grid=0.1)
        >>> out[("c",)]["n"].to_list(), out[()]["n"].to_list()
        ([1.5, 2.3], [3.8])
    """
    lv = check_level(level)
    if not isinstance(released, Mapping) or not released:
        raise InvalidParameterError(
            "consistent: released must be a non-empty dict level -> released table; got "
            f"{released!r}.")
    levels = [_level_key(k, "a key of released") for k in released]
    frames = dict(zip(levels, released.values(), strict=True))
    meas = list(measures)
    if isinstance(measures, str) or not meas:
        raise InvalidParameterError(
            f"consistent: measures must be a non-empty list of names; got {measures!r}.")
    for key, f in frames.items():
        if not isinstance(f, pl.DataFrame):
            raise InvalidParameterError(
                f"consistent: released[{key!r}] must be a Polars DataFrame; got "
                f"{type(f).__name__}.")
        need = [c for c in (*key, *meas) if c not in f.columns]
        if need:
            raise InvalidParameterError(
                f"consistent: released[{key!r}] lacks the column(s) {need}; it has {f.columns}."
                "\nHint: pass released tables (key columns and one column per measure).")
        if key and f.select(key).n_unique() != f.height:
            raise InvalidParameterError(
                f"consistent: released[{key!r}] has duplicate keys.\nHint: one row per cell.")
    grids: dict[str, float | None] = {}
    for m in meas:
        g = grid.get(m) if isinstance(grid, Mapping) else grid
        if g is not None and not (isinstance(g, (int, float)) and math.isfinite(g) and g > 0):
            raise InvalidParameterError(
                f"consistent: grid must be a number > 0 (or measure -> number); got {g!r} for "
                f"{m!r}.")
        if integer:
            g = 1.0 if g is None else g
            if g != 1.0:
                raise InvalidParameterError(
                    f"consistent: integer=True rounds to whole numbers; got grid={g!r} for "
                    f"{m!r}.\nHint: drop grid or set it to 1.0.")
        grids[m] = None if g is None else float(g)
    # the finest level: the one with the most columns whose every column is the finest used
    finest_level = max(levels, key=len)
    hier = dict(hierarchies) if isinstance(hierarchies, Mapping) else {}
    outs = [_level_key(o, "an output level") for o in outputs] if outputs is not None \
        else levels
    for o in outs:  # validates the columns (the trees: of the measured and output levels)
        _product([*levels, o], frames[finest_level], finest_level, hier)
    prod = _product([*levels, *outs], frames[finest_level], finest_level, hier)
    fa, fb = prod.pair(finest_level)
    if (fa, fb) != (prod.outer.tree.depth, prod.inner.tree.depth):
        raise InvalidParameterError(
            f"consistent: level {list(finest_level)} is not the finest of the levels given.")
    mech_of: dict[Level, Mechanism] = {}
    for key in levels:
        if isinstance(mechanisms, Mapping):
            mm = mechanisms.get(key, mechanisms.get(tuple(sorted(key))))
            if mm is None:
                raise InvalidParameterError(
                    f"consistent: no mechanism for level {key!r}; mechanisms has "
                    f"{sorted(map(str, mechanisms))}.")
            mech_of[key] = mm
        else:
            mech_of[key] = mechanisms
    result: dict[Level, dict[str, Any]] = {o: {} for o in outs}
    methods: dict[str, str] = {}
    certified_memo: dict[tuple[Any, ...], dict[Level, np.ndarray]] = {}
    for m in meas:
        spreads = {k: cell_weights(mech_of[k], m) for k in levels}
        kinds = {s[1] for s in spreads.values()}
        alphas = {s[2] for s in spreads.values()}
        if kinds == {"stable"} and len(alphas) == 1:
            kind = "stable"
        elif kinds == {"gaussian"}:
            kind = "gaussian"
        elif "stable" in kinds:
            raise InvalidParameterError(
                f"consistent: measure {m!r} mixes α-stable noise with other laws (or several "
                "α); the weighted sum has no usable law.\nHint: release every level with the "
                "same α.")
        else:
            kind = "other"
        methods[m] = {"gaussian": METHOD_GAUSSIAN, "stable": METHOD_STABLE,
                      "other": METHOD_CERTIFIED}[kind]
        ms: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for key in levels:
            a, b = prod.pair(key)
            shape = (prod.outer.tree.sizes[a], prod.inner.tree.sizes[b])
            y = np.zeros(shape[0] * shape[1])
            w = np.zeros(shape[0] * shape[1])
            f = frames[key]
            vals = f[m].cast(pl.Float64).to_numpy()
            if not np.all(np.isfinite(vals)):
                raise InvalidParameterError(
                    f"consistent: released[{key!r}] column {m!r} has null, NaN or infinite "
                    "values.\nHint: pass the released estimates unchanged (before flagging).")
            idx = prod.index(key, f, missing_ok=True) if key else \
                np.zeros(f.height, dtype=np.int64)
            ok = idx >= 0
            y[idx[ok]] = vals[ok]
            # beyond 2**40 grid steps a release's grid keeps 40 significant bits (its spacing
            # doubles at each binade): there it may be off by more than its noise, which the
            # weight says (else the solve would push that error into the small cells)
            w[idx[ok]] = 1.0 / (spreads[key][0] + _coarse_grid_variance(vals[ok], grids[m]))
            ms[(a, b)] = (y.reshape(*shape, 1), w.reshape(shape))
        res = solve(prod.outer.tree, prod.inner.tree, prod.present, ms)
        # fin_u: the unbiased GLS finest cells; fin: the published ones (clamped with
        # nonnegative). The intervals are centred on the unbiased estimate (rounded like the
        # published one, with the same uniforms): those of the table without nonnegative
        fin_u = res.x[-1][:, :, 0]
        fin = np.maximum(fin_u, 0.0) if nonnegative else fin_u
        ints: np.ndarray | None = None
        ints_u: np.ndarray | None = None
        grid_m = grids[m]
        if grid_m is not None:
            # unbiased rounding, systematic along each block (`_block_round`): the finest
            # estimates of one parent often share their fractional part (the GLS correction
            # is shared), so rounding each to the nearest would add up to n/2 at the parent,
            # and rounding them independently adds n/6 grid² of variance to a cell of n
            # finest cells; along a block, every range of cells is off by less than one step
            # (in whole steps; the doubles add up to 2**-51 of the value, docstring)
            # a table whose finest estimates reach 2**61 grid steps (or are not finite) is
            # published unrounded: the rounding counts in int64, and refusing would let one
            # huge noisy value stop the release (it is post-processing of the noisy values, and
            # at that size a step is below 2**-62 of the value)
            if _roundable(fin / grid_m, prod.present) and _roundable(fin_u / grid_m,
                                                                      prod.present):
                uni = _released_uniforms(ms, m, (fin.shape[1],))
                ints = _block_round(fin / grid_m, uni, prod.present)
                ints_u = _block_round(fin_u / grid_m, uni, prod.present) if nonnegative \
                    else ints
            else:
                grid_m = None
        stable_scale: dict[Level, np.ndarray] = {}
        if kind == "stable":
            stable_scale = _stable_scales(prod, ms, {k: math.sqrt(spreads[k][0]) for k in levels},
                                          levels, outs, alphas.pop())
        one = next(iter(mech_of.values()))
        certified: dict[Level, np.ndarray] = {}
        if kind == "other":
            laws = {k: noise_law(mech_of[k], m) for k in levels}
            lat = grid_m is not None and float(grid_m).is_integer() and all(
                isinstance(mm, DiscreteAdditiveMechanism) for mm in mech_of.values())
            # the certified margins depend on the weights, the laws and the grid, never on the
            # released values: measures that share them share one computation (a table of 150
            # measures released alike: one instead of 150)
            memo_key = (tuple(laws[k] for k in levels), grid_m, lat,
                        tuple((p, w.shape, w.tobytes()) for p, (_y, w) in sorted(ms.items())))
            if memo_key not in certified_memo:
                certified_memo[memo_key] = _certified(prod, ms, laws, levels, outs, lv, grid_m,
                                                      lattice=lat)
            certified = certified_memo[memo_key]
        # integer-valued noise (discrete mechanisms release integer targets) and an integer
        # grid: every published error is a whole number (the margin is chosen on the lattice)
        lattice = grid_m is not None and float(grid_m).is_integer() and all(
            isinstance(mm, DiscreteAdditiveMechanism) for mm in mech_of.values())
        for o in outs:
            a, b = prod.pair(o)
            if ints is not None and ints_u is not None and grid_m is not None:
                est = _from_units(_aggregate(prod, a, b, ints), grid_m)
                centre = _from_units(_aggregate(prod, a, b, ints_u), grid_m) \
                    if nonnegative else est
            else:
                est = _aggregate(prod, a, b, fin)
                centre = _aggregate(prod, a, b, fin_u) if nonnegative else est
            var = res.variance(a, b)
            if grids[m] is not None:
                # beyond 2**40 grid steps a cell's release and its parents' share one coarse
                # spacing, so their rounding errors are nearly one error, which the solve
                # counted as independent: its variance is at least that rounding's (s²/12 at
                # the published value; 0 within 2**40 steps, where nothing changes)
                var = np.maximum(var, _coarse_grid_variance(np.asarray(est).reshape(var.shape),
                                                            grids[m]))
            if kind == "stable":
                mech: Any = one
                if getattr(mech, "joint", False):
                    mech = mech.measure_mechanism(m)
                noise = mech.sum_law().noise
                sd = np.full(var.shape, math.inf)
                moe = float(noise.interval_halfwidth(lv)) / float(noise.gamma) * \
                    stable_scale[o]
            else:
                # the sd of the published estimate: the estimator's variance and that of the
                # stochastic rounding of the finest cells below the cell (as in the margin)
                rvar = None if grid_m is None else _round_variance(prod, a, b, grid_m)
                sd = np.sqrt(var if rvar is None else var + rvar)
                if kind == "other":
                    moe = certified[o].reshape(var.shape)
                else:
                    moe = _margin(prod, a, b, var, lv, rvar, lattice and ints_u is not None,
                                  _lattice_uniforms(ints_u, m, a, b, var.shape)
                                  if lattice and ints_u is not None else None)
            moe = np.asarray(moe).reshape(var.shape)
            lower = centre - moe
            upper = centre + moe
            if nonnegative:
                # the true value is >= 0: raising negative ends to 0 keeps the coverage
                lower = np.maximum(lower, 0.0)
                upper = np.maximum(upper, 0.0)
            result[o][m] = (est.reshape(-1), sd.reshape(-1), moe.reshape(-1),
                            lower.reshape(-1), upper.reshape(-1), centre.reshape(-1))
    out: dict[Level, pl.DataFrame] = {}
    given = dict(output_keys or {})
    for o in outs:
        if o in given:
            keys = given[o].select(o) if o else pl.DataFrame()
        elif o in frames:
            keys = frames[o].select(o)
        else:
            n_fin = prod.aggregate(o, prod.present.astype(np.int64)).reshape(-1)
            keys = prod.keys(o).filter(pl.Series(n_fin > 0)).sort(list(o)) if o else \
                pl.DataFrame()
        idx = prod.index(o, keys, missing_ok=True) if o else np.zeros(1, dtype=np.int64)
        known = idx >= 0
        cols: list[pl.Series] = []
        for m in meas:
            est, sd, moe, lo, hi, ctr = result[o][m]
            e = np.where(known, est[idx], 0.0)
            s = np.where(known, sd[idx], 0.0)
            h = np.where(known, moe[idx], 0.0)
            cols += [pl.Series(m, e), pl.Series(f"{m}_sd", s), pl.Series(f"{m}_moe", h),
                     pl.Series(f"{m}_lower", np.where(known, lo[idx], 0.0)),
                     pl.Series(f"{m}_upper", np.where(known, hi[idx], 0.0))]
            if nonnegative:  # the unbiased estimate the reliability is judged on (publish)
                cols.append(pl.Series(f"{m}_centre", np.where(known, ctr[idx], 0.0)))
        body = pl.DataFrame(cols)
        out[o] = pl.concat([keys, body], how="horizontal") if o else body
    return out


def _margin(prod: Product, a: int, b: int, var: np.ndarray, level: float,
            rvar: np.ndarray | None, lattice: bool,
            uniforms: np.ndarray | None = None) -> np.ndarray:
    """Half-width of the interval, with the rounding of the finest cells to the grid.

    The finest cells are rounded to the grid without bias (`_block_round`: up with
    probability equal to the fractional part, systematically along each block): a cell's
    rounding error has mean 0 and variance ``rvar`` (`_round_variance`, ``grid²/6`` per block
    range below it on average), beside the estimator's ``var`` (not negligible at coarse
    levels when the sd is a few grid steps); the normal margin is ``z·sd_t`` with
    ``sd_t² = var + rvar``.

    On the integer lattice (integer noise, integer grid) every error is a whole number ``E``
    and a margin ``h`` covers exactly when ``|E| ≤ h``: the coverage can only take the values
    ``c(h) = P(|E| ≤ h)``, several points apart when the sd is a few units. ``E`` is taken
    to follow the *lattice normal* law of variance ``sd_t²``, ``P(E = k) ∝ exp(−k²/2sd_t²)``
    (exact for discrete Gaussian noise, and for the stochastic rounding of a normal error):
    ``c(h)`` is its sum over ``|k| ≤ h`` (``_lattice_cover``), which for ``sd_t ≥ 3`` equals
    ``P(|N| ≤ h + 1/2)`` with ``N`` normal of variance ``sd_t² − 1/12`` to 1e-5 (Sheppard's
    correction: the plain continuity correction with variance ``sd_t²`` over-covered, 0.918
    instead of 0.900 at an sd of 0.9). The margin is then randomized
    between the two whole numbers around the level: with ``h`` the smallest whole number with
    ``c(h) ≥ level``, it is ``h`` with probability ``π = (level − c(h−1)) / (c(h) − c(h−1))``
    and ``h − 1`` otherwise, so that the coverage is the level (``uniforms``: one uniform per
    cell, from the released values alone; see ``_lattice_uniforms``; or ``(cells..., k)`` for
    ``k`` draws at once). Where ``h = 0`` the margin is 0 (coverage at least the level).
    """
    z = float(ndtri(0.5 + 0.5 * level))
    if rvar is None:
        return z * np.sqrt(var)
    sd_t = np.sqrt(var + rvar)
    if not lattice:
        return z * sd_t
    safe = np.where(var > 0, sd_t, 1.0)
    # the law depends on the sd alone, and cells often share one (one mechanism per level)
    sd_u, inv = np.unique(safe.reshape(-1), return_inverse=True)
    inv = inv.reshape(safe.shape)
    hi_u = _lattice_quantile(sd_u, level)
    hi = np.where(var > 0, hi_u[inv], 0.0)
    if uniforms is None:
        return hi
    c_hi = _lattice_cover(hi_u, sd_u)[inv]
    c_lo = np.where(hi >= 1, np.where(hi_u >= 1, _lattice_cover(hi_u - 1.0, sd_u), 0.0)[inv],
                    0.0)
    gap = np.where(c_hi > c_lo, c_hi - c_lo, 1.0)
    pi = np.clip((level - c_lo) / gap, 0.0, 1.0)
    if uniforms.size != hi.size:  # several draws at once: uniforms (cells..., k)
        u = uniforms.reshape(hi.shape + (-1,))
        return np.where((hi[..., None] >= 1) & (u >= pi[..., None]), hi[..., None] - 1.0,
                        hi[..., None])
    return np.where((hi >= 1) & (uniforms.reshape(hi.shape) >= pi), hi - 1.0, hi)


#: Below this sd the lattice normal law is summed term by term (above, Sheppard's correction
#: agrees with the sum to 1e-5).
_LATTICE_SD = 3.0
_LATTICE_K = 40   # terms |k| ≤ 40: exp(−k²/2sd²) < 1e-38 beyond, for sd < 3


def _lattice_terms(sd: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Weights ``exp(−k²/2sd²)`` for ``k = 0..K`` and the normaliser ``Σ_{k∈ℤ}``."""
    w = [np.exp(-0.5 * (k / sd) ** 2) for k in range(_LATTICE_K + 1)]
    return w, w[0] + 2.0 * np.sum(w[1:], axis=0)


def _lattice_cover(h: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``P(|E| ≤ h)`` for the lattice normal law ``P(E = k) ∝ exp(−k²/2sd²)`` (``sd > 0``).

    For ``sd ≥ 3``: ``P(|N| ≤ h + 1/2)`` with ``N`` normal of variance ``sd² − 1/12``
    (Sheppard's correction, equal to the sum to 1e-5); below, the sum itself.
    """
    h = np.asarray(h, dtype=np.float64)
    sd = np.broadcast_to(np.asarray(sd, dtype=np.float64), h.shape)
    big = sd >= _LATTICE_SD
    out = np.empty(h.shape)
    out[big] = 2.0 * ndtr((h[big] + 0.5) / np.sqrt(sd[big] ** 2 - 1.0 / 12.0)) - 1.0
    if np.any(~big):
        hs = h[~big]
        w, tot = _lattice_terms(sd[~big])
        acc = np.where(hs >= 0, w[0], 0.0)
        for k in range(1, _LATTICE_K + 1):
            acc += np.where(hs >= k, 2.0 * w[k], 0.0)
        out[~big] = acc / tot
    return out


def expected_margin(sd: Any, level: float = DEFAULT_LEVEL, *,
                    lattice: bool = False) -> np.ndarray:
    """The mean published margin of error of a consistent cell whose published sd is ``sd``.

    Public planning quantity (review r78: the plan stated the whole-budget mechanism's margin
    for a consistent table's cells). Off the integer lattice the published margin is
    ``z·sd`` (exact for Gaussian noise, the normal approximation otherwise). On it (discrete
    mechanisms, integer grid) it is ``h`` or ``h − 1``, randomized so that the coverage is the
    level (see `consistent`): its mean is ``h − (1 − π)``.

    Args:
        sd: Published sd(s) (rounding variance included, as ``expected_sd`` gives them).
        level: Confidence level.
        lattice: Integer noise on an integer grid.

    Returns:
        The mean margin, shaped like ``sd`` (0 where ``sd`` is 0).

    Example:
        >>> round(float(expected_margin(10.0, 0.9)), 4)
        16.4485
        >>> 15.0 < float(expected_margin(10.0, 0.9, lattice=True)) < 17.0
        True
        >>> expected_margin([0.0, 0.2], 0.9, lattice=True).tolist()  # 0: P(E = 0) >= 0.9
        [0.0, 0.0]
    """
    sd = np.asarray(sd, dtype=np.float64)
    check_level(level)
    if not lattice:
        return float(ndtri(0.5 + 0.5 * level)) * sd
    shape, sd = sd.shape, sd.reshape(-1)
    safe = np.where(sd > 0, sd, 1.0)
    hi = _lattice_quantile(safe, level)
    c_hi = _lattice_cover(hi, safe)
    c_lo = np.where(hi >= 1, _lattice_cover(np.maximum(hi - 1.0, 0.0), safe), 0.0)
    pi = np.clip((level - c_lo) / np.where(c_hi > c_lo, c_hi - c_lo, 1.0), 0.0, 1.0)
    return np.where(sd > 0, np.where(hi >= 1, hi - (1.0 - pi), hi), 0.0).reshape(shape)


def _lattice_quantile(sd: np.ndarray, level: float) -> np.ndarray:
    """The smallest whole ``h ≥ 0`` with ``P(|E| ≤ h) ≥ level`` (lattice normal law)."""
    sd = np.asarray(sd, dtype=np.float64)
    z = float(ndtri(0.5 + 0.5 * level))
    sh = np.sqrt(np.maximum(sd ** 2 - 1.0 / 12.0, 1e-300))
    h = np.maximum(np.ceil(z * sh - 0.5 - 1e-12), 0.0)
    small = sd < _LATTICE_SD
    if np.any(small):
        w, tot = _lattice_terms(sd[small])
        acc = w[0] / tot
        hs = np.where(acc >= level, 0.0, np.inf)
        for k in range(1, _LATTICE_K + 1):
            acc = acc + 2.0 * w[k] / tot
            hs = np.where(np.isinf(hs) & (acc >= level), float(k), hs)
        h[small] = hs
    return h


def _released_uniforms(ms: Mapping[tuple[int, int], tuple[np.ndarray, np.ndarray]],
                       measure: str, shape: tuple[int, ...]) -> np.ndarray:
    """Uniforms for the stochastic rounding of the finest cells, from the released values.

    The seed is a hash of the released cells of every measured level (and the measure): the
    rounding is post-processing, reproducible by any engine and by
    [`consistent_from_release`][tabdp.hierarchy.consistent_from_release], and independent of
    the fractional parts it rounds (a fresh draw of the noise gives fresh uniforms).
    """
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(ms):
        y = ms[key][0]
        h.update(f"\x00{key[0]}\x00{key[1]}\x00".encode())
        h.update(np.ascontiguousarray(np.asarray(y, dtype=np.float64) + 0.0,  # -0.0 -> 0.0
                                      dtype="<f8").tobytes())
    h.update(f"\x00round\x00{measure}".encode())
    seed = int.from_bytes(h.digest(), "little")
    return np.random.Generator(np.random.PCG64(seed)).random(shape)


def _roundable(scaled: np.ndarray, present: np.ndarray) -> bool:
    """Whether `_block_round` and the int64 sums of its output can take ``scaled``.

    Every present finest value finite, and their magnitudes adding to less than 2**61 grid
    steps: the rounded cells and every sum of them stay within int64.

    Example:
        >>> ok = np.ones((2, 1), dtype=bool)
        >>> _roundable(np.array([[1.5], [-2.0]]), ok), _roundable(np.array([[2.0**62], [0.0]]), ok)
        (True, False)
    """
    with np.errstate(invalid="ignore", over="ignore"):
        mags = np.abs(np.where(present, scaled, 0.0))
        return bool(np.all(np.isfinite(mags))) and float(mags.sum()) < 2.0**61


def _block_round(scaled: np.ndarray, uniforms: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Unbiased rounding of the finest cells, systematic along each block, as int64.

    A block is one column of ``scaled`` (one leaf of the inner classification, the one with
    fewer leaves), read down the outer classification's leaves in tree order, where every
    node's leaves are contiguous. With ``f`` the fractional parts (0 for absent cells),
    ``S`` their running sum down the column and ``u`` the column's uniform, a cell is rounded up
    by ``⌊S + u⌋ − ⌊S − f + u⌋`` (0 or 1): up with probability ``f`` (unbiased), and the cells
    of any contiguous range of a column are rounded up ``⌊S_end + u⌋ − ⌊S_start + u⌋`` times,
    off from their fractional mass by less than one (systematic sampling). A cell of the
    table (outer node A, inner node B) is a union of one such range per inner leaf of B, the
    blocks' uniforms independent: its rounding error has variance ``{M}(1 − {M})`` summed
    over those ranges (``M`` a range's fractional mass), at most what independent rounding
    of its cells gives and ``grid²/6`` per range on average over ``{M}`` (`_round_variance`).

    Example:
        >>> x = np.array([[0.5], [0.5], [0.25], [0.75]])
        >>> _block_round(x, np.array([0.6]), np.ones((4, 1), dtype=bool)).ravel().tolist()
        [1, 0, 0, 1]
    """
    if not _roundable(scaled, present):
        raise InvalidParameterError(
            "consistent: a finest estimate is 2**62 grid steps or more (or not finite), beyond "
            "the whole numbers the rounding counts in (the caller publishes such a table "
            "unrounded).\nHint: check _roundable first.")
    low = np.floor(scaled)
    f = np.where(present, scaled - low, 0.0)
    # running sums down each column in extended precision (where the platform has it): a
    # range's count telescopes exactly whatever the rounding of the sums
    run = np.cumsum(f.astype(np.longdouble), axis=0)
    u = np.asarray(uniforms, dtype=np.longdouble).reshape(1, -1)
    top = np.floor(run + u)
    before = np.vstack([np.floor(u), top[:-1]])
    up = (top - before).astype(np.int64)
    return np.where(present, low.astype(np.int64) + up, 0)


def _round_variance(prod: Product, a: int, b: int, grid: float) -> np.ndarray:
    """Variance of the rounding error of the cells of level ``(a, b)`` (`_block_round`).

    ``grid²/6`` per inner leaf below the cell whose range of outer leaves holds a present
    finest cell: the average of ``{M}(1 − {M})`` over a range's fractional mass ``M`` (a
    margin that does not depend on the fractional parts, as before: post-processing the
    published consistent levels gives the same margins).
    """
    # present finest cells per (outer node at a, inner leaf): a range holding one is counted
    per_range = _aggregate(prod, a, prod.inner.tree.depth, prod.present.astype(np.float64))
    # then summed over the inner leaves below each cell (the outer axis is already at a)
    ranges = _aggregate(prod, prod.outer.tree.depth, b, (per_range > 0).astype(np.float64))
    return ranges * (grid * grid / 6.0)


def _lattice_uniforms(ints: np.ndarray, measure: str, a: int, b: int,
                      shape: tuple[int, ...]) -> np.ndarray:
    """Uniforms for the randomized lattice margins, from the released values alone.

    The seed is a hash of the rounded finest estimates (a function of the released cells and
    public parameters, so the margins stay post-processing and reproducible, by any engine and
    by [`consistent_from_release`][tabdp.hierarchy.consistent_from_release]), the measure and
    the level pair. The hash changes with every draw of the noise, so over draws each cell's
    uniform is effectively independent of its own error.
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(np.ascontiguousarray(ints, dtype="<i8").tobytes())
    h.update(f"\x00{measure}\x00{a}\x00{b}".encode())
    seed = int.from_bytes(h.digest(), "little")
    return np.random.Generator(np.random.PCG64(seed)).random(shape)


def _coarse_grid_variance(values: np.ndarray, grid: float | None) -> np.ndarray:
    """Variance of a release's rounding where its public grid is coarser than its step.

    A release on a grid of step ``g`` (`tabdp.noise.exact.UniformGrid`) is on the multiples of
    ``g`` up to ``2**40·g`` and keeps 40 significant bits beyond: a value in
    ``[2**(39+j)·g, 2**(40+j)·g)`` is on a spacing ``s = 2**j·g``, so it is off from the
    noisy value by up to ``s/2``: variance ``s²/12`` (uniform). 0 in the uniform part (where
    the rounding's ``g²/12`` is negligible beside the noise: the grid is at most a tenth of its
    sd) and without a grid.

    Example:
        >>> _coarse_grid_variance(np.array([5.0, 2.0**41 + 3.0, 2.0**50]), 1.0).tolist()
        [0.0, 1.3333333333333333, 349525.3333333333]
    """
    v = np.abs(np.asarray(values, dtype=np.float64))
    out = np.zeros(v.shape)
    if grid is None:
        return out
    big = v >= 2.0**UNIFORM_BITS * grid
    if np.any(big):
        j = np.floor(np.log2(v[big] / grid)) - (UNIFORM_BITS - 1)
        out[big] = (np.exp2(j) * grid) ** 2 / 12.0
    return out


def _aggregate(prod: Product, a: int, b: int, fin: np.ndarray) -> np.ndarray:
    """Sums of the finest cells ``(outer leaves, d)`` at level (a, b): leaves are contiguous."""
    out = fin
    for axis, (tree, lv) in enumerate(((prod.outer.tree, a), (prod.inner.tree, b))):
        if lv == tree.depth:
            continue
        anc = tree.leaf_ancestor(lv)
        st = np.searchsorted(anc, np.arange(tree.sizes[lv]), side="left")
        out = np.add.reduceat(out, st, axis=axis)
    return out


def _from_units(units: np.ndarray, grid: float) -> np.ndarray:
    """Values of integer multiples of ``grid``: the double nearest to each decimal value.

    A step whose reciprocal is a whole number (0.1, 0.01) divides by it (``23 / 10`` is the
    double nearest 2.3, ``23 * 0.1`` is not); other steps multiply.
    """
    inv = 1.0 / grid
    if inv >= 1.0 and abs(inv - round(inv)) < 1e-9 * inv:
        return units.astype(np.float64) / float(round(inv))
    return units.astype(np.float64) * grid


def _stable_scales(prod: Product, ms: Mapping[tuple[int, int], tuple[np.ndarray, np.ndarray]],
                   gammas: Mapping[Level, float], levels: Sequence[Level],
                   outs: Sequence[Level], alpha: float, chunk: int = 256
                   ) -> dict[Level, np.ndarray]:
    """Scale (Σ_j |L_cj γ_j|^α)^(1/α) of each output cell's error (α-stable noise).

    The estimator is linear, ``x̂_c = Σ_j L_cj y_j``; its error ``Σ_j L_cj e_j`` with independent
    ``e_j ~ SαS(γ_j)`` is SαS with that scale (stability). ``L`` is obtained column by column by
    solving with unit right-hand sides (cost: cells × measurements / chunk solves).
    """
    cols: list[tuple[tuple[int, int], int, float]] = []
    for key in levels:
        pair = prod.pair(key)
        _, w = ms[pair]
        for j in np.flatnonzero(w.reshape(-1) > 0).tolist():
            cols.append((pair, j, gammas[key]))
    acc = {o: np.zeros((prod.outer.tree.sizes[prod.pair(o)[0]],
                        prod.inner.tree.sizes[prod.pair(o)[1]])) for o in outs}
    for s0 in range(0, len(cols), chunk):
        part = cols[s0:s0 + chunk]
        k = len(part)
        unit: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for pair, (_y, w) in ms.items():
            unit[pair] = (np.zeros(w.shape + (k,)), w)
        gam = np.empty(k)
        for c, (pair, j, g) in enumerate(part):
            ya = unit[pair][0].reshape(-1, k)
            ya[j, c] = 1.0
            gam[c] = g
        res: GLSResult = solve(prod.outer.tree, prod.inner.tree, prod.present, unit)
        for o in outs:
            a, b = prod.pair(o)
            acc[o] += np.sum(np.abs(res.estimate(a, b) * gam) ** alpha, axis=2)
    return {o: v.reshape(-1) ** (1.0 / alpha) for o, v in acc.items()}


#: Output cells per batched solve of the estimator's rows (`_estimator_rows`).
_ROWS_CHUNK = 256
#: Largest work of `_certified`'s exact margins (distinct estimator rows of an output level
#: times the finest level's cells: about 2 CPU-s at the limit); beyond it, `_sd_margin`.
_EXACT_WORK = 10**7


def _sd_margin(sd: np.ndarray, level: float, continuous: bool) -> np.ndarray:
    """A margin from the exact sd alone, valid for every law of a consistent table's error.

    Continuous noise: every law is symmetric and unimodal, so is their weighted sum
    (Wintner), and Gauss's inequality holds (`gauss_margin`: ``k = 2/(3·sqrt(1 − level))``,
    2.11 sd at 90%, 2.98 at 95%; ``√3·level`` below 2/3). Discrete noise (a lattice law, to
    which Gauss's inequality does not apply as such): Chebyshev's (`chebyshev_margin`:
    ``k = 1/sqrt(1 − level)``, 3.16 sd at 90%, 4.47 at 95%).

    Example:
        >>> _sd_margin(np.array([1.0]), 0.9, False).round(4).tolist()
        [3.1623]
    """
    if continuous:
        return np.asarray(gauss_margin(sd, level))
    return chebyshev_margin(sd, level)


def _estimator_rows(prod: Product, ms: Mapping[tuple[int, int], tuple[np.ndarray, np.ndarray]],
                    o: Level, cells: np.ndarray
                    ) -> dict[tuple[int, int], np.ndarray]:
    """Rows ``L_c`` of the GLS estimator for the output cells ``cells`` of level ``o``.

    ``x̂_c = Σ_j L_cj y_j``; with ``P = AᵀWA`` (symmetric), ``L_c = 1_cᵀP⁻¹AᵀW``: solving
    with the finest measurements ``1_c / w`` (every present finest cell is measured at the
    finest level) gives ``u = P⁻¹1_c``, and ``L_cj = w_j·Σ_{i ≤ j} u_i`` (the estimate of the
    measured cell ``j`` from that solve, times its weight). Returns measured pair →
    ``(cells of the pair, len(cells))``.
    """
    a, b = prod.pair(o)
    k = cells.size
    ni = prod.inner.tree.sizes[b]
    uo, vi = cells // ni, cells % ni
    ao = prod.outer.tree.leaf_ancestor(a)
    bi = prod.inner.tree.leaf_ancestor(b)
    fa, fb = prod.outer.tree.depth, prod.inner.tree.depth
    w_fin = ms[(fa, fb)][1]
    below = (ao[:, None, None] == uo[None, None, :]) & (bi[None, :, None] == vi[None, None, :])
    below &= prod.present[:, :, None]
    safe = np.where(w_fin > 0, w_fin, 1.0)
    unit: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {
        pair: (np.zeros(w.shape + (k,)), w) for pair, (_y, w) in ms.items()}
    unit[(fa, fb)] = (below / safe[:, :, None], w_fin)
    res: GLSResult = solve(prod.outer.tree, prod.inner.tree, prod.present, unit)
    return {pair: (w[:, :, None] * res.estimate(*pair)).reshape(-1, k)
            for pair, (_y, w) in ms.items()}


def _certified(prod: Product, ms: Mapping[tuple[int, int], tuple[np.ndarray, np.ndarray]],
               laws: Mapping[Level, NoiseLaw], levels: Sequence[Level],
               outs: Sequence[Level], level: float, grid: float | None, *,
               lattice: bool) -> dict[Level, np.ndarray]:
    """Certified margins of every output cell (non-Gaussian noise; `tabdp.hierarchy.margins`).

    The noise part from the exact law of ``Σ_j L_cj e_j`` (the estimator's row, grouped by
    law); with a grid, plus the Hoeffding radius of the output rounding at probability
    ``eta_r`` (taken from the level the noise must reach). On the integer lattice (discrete
    noise, integer grid: every published error is a whole number) the margin is rounded down.
    """
    eta_r = 0.0 if grid is None else min(1e-5, 1e-3 * (1.0 - level))
    generic = any(lw.family == "generic" for lw in laws.values())
    continuous = all(lw.continuous for lw in laws.values())
    pairs = {prod.pair(k): laws[k] for k in levels}
    orbit_o, orbit_i = _orbits(prod, ms)
    out: dict[Level, np.ndarray] = {}
    for o in outs:
        a, b = prod.pair(o)
        n = prod.outer.tree.sizes[a] * prod.inner.tree.sizes[b]
        ranges = np.zeros(n) if grid is None else np.round(
            _round_variance(prod, a, b, grid).reshape(-1) / (grid * grid / 6.0))
        # one rounding range: the rounding is in the law (a uniform term, exact); several:
        # Hoeffding's radius at probability eta_r, added
        has = _aggregate(prod, a, b, prod.present.astype(np.float64)).reshape(-1) > 0
        # cells in one orbit of the table's automorphisms share their weights (permuted):
        # one row per orbit
        cls = (orbit_o[a][:, None] * (int(orbit_i[b].max()) + 1)
               + orbit_i[b][None, :]).reshape(-1)
        cls = np.where(has, cls, -1)
        uq, first, inv = np.unique(cls, return_index=True, return_inverse=True)
        reps = first[uq >= 0]
        # the exact law needs each orbit's estimator row (a solve over the whole table): past
        # `_EXACT_WORK` (orbits times finest cells, from the key set alone) a bound from the
        # exact sd instead, valid for any law (`_sd_margin`)
        bounded = generic or reps.size * prod.present.size > _EXACT_WORK
        one = (ranges == 1) & (not bounded)
        moe = np.zeros(n)
        if bounded:
            res0 = solve(prod.outer.tree, prod.inner.tree, prod.present,
                         {p: (np.zeros(w.shape + (0,)), w) for p, (_y, w) in ms.items()})
            moe = _sd_margin(np.sqrt(res0.variance(a, b).reshape(-1)), level + eta_r,
                             continuous)
        else:
            got = np.zeros(uq.size)
            rep_moe = np.zeros(reps.size)
            for s0 in range(0, reps.size, _ROWS_CHUNK):
                part = reps[s0:s0 + _ROWS_CHUNK]
                rows = _estimator_rows(prod, ms, o, part)
                plist = list(rows)
                terms = group_block([pairs[p] for p in plist], [rows[p] for p in plist])
                single = one[part]
                if grid is not None:
                    terms = [t + [(UNIFORM, float(grid), 1)] if s1 else t
                             for t, s1 in zip(terms, single.tolist(), strict=True)]
                x = np.zeros(part.size)
                if np.any(single):
                    x[single] = margins([t for t, s1 in zip(terms, single, strict=True) if s1],
                                        level)
                if np.any(~single):
                    x[~single] = margins([t for t, s1 in zip(terms, single, strict=True)
                                          if not s1], level, eta_r)
                rep_moe[s0:s0 + part.size] = x
            got[uq >= 0] = rep_moe
            moe = np.where(has, got[inv.reshape(-1)], 0.0)
        if grid is not None:
            moe = np.where(one, moe + 0.5 * grid,
                           moe + rounding_radius(np.where(one, 0.0, ranges), grid, eta_r))
            if lattice:   # whole-number errors: |E| ≤ moe holds for the whole part too
                moe = np.floor(moe + 1e-9)
        out[o] = moe
    return out

def _tree_orbits(tree: Tree, data: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Orbit id of every node under the automorphisms of a tree with node data.

    ``data[l]``: one row per node of level ``l``. Bottom-up, a node's label is its data and
    the sorted labels of its children (isomorphic subtrees, AHU); top-down, two nodes are in
    one orbit when their labels agree and their parents are in one orbit (siblings of equal
    label can be swapped, and an automorphism of the parents carries the rest).
    """
    depth = tree.depth
    labels: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * (depth + 1)
    for lv in range(depth, -1, -1):
        n = tree.sizes[lv]
        rows = np.ascontiguousarray(data[lv]).reshape(n, -1)
        keys: list[bytes] = [rows[u].tobytes() for u in range(n)]
        if lv < depth:
            par = tree.parent[lv + 1]
            kids: list[list[int]] = [[] for _ in range(n)]
            for c, pa in enumerate(par.tolist()):
                kids[pa].append(int(labels[lv + 1][c]))
            keys = [k + np.array(sorted(kd), dtype=np.int64).tobytes() + b"|"
                    for k, kd in zip(keys, kids, strict=True)]
        ids: dict[bytes, int] = {}
        labels[lv] = np.array([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)
    orbits: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
    for lv in range(1, depth + 1):
        par = tree.parent[lv]
        pair = labels[lv] * (int(orbits[-1].max()) + 1) + orbits[-1][par]
        orbits.append(np.unique(pair, return_inverse=True)[1].reshape(-1).astype(np.int64))
    return orbits


def _orbits(prod: Product, ms: Mapping[tuple[int, int], tuple[np.ndarray, np.ndarray]]
            ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Orbits of the outer nodes (inner tree fixed) and of the inner nodes (outer fixed).

    An automorphism of the outer tree that keeps every measured weight and the presence of
    every finest cell (node data: its weights at every measured level, and at the leaves its
    presence row) maps each output cell's estimator row to a permutation of another's; the
    same for the inner tree, and for their compositions: the cells ``(u, v)`` with ``u`` and
    ``v`` in the same orbits share one law of the error.
    """
    ot, it = prod.outer.tree, prod.inner.tree
    od: list[list[np.ndarray]] = [[] for _ in range(ot.depth + 1)]
    idd: list[list[np.ndarray]] = [[] for _ in range(it.depth + 1)]
    for (a, b), (_y, w) in sorted(ms.items()):
        od[a].append(np.full((w.shape[0], 1), float(b)))
        od[a].append(w)
        idd[b].append(np.full((w.shape[1], 1), float(a)))
        idd[b].append(w.T)
    od[ot.depth].append(prod.present.astype(np.float64))
    idd[it.depth].append(prod.present.T.astype(np.float64))
    odata = [np.hstack(x) if x else np.zeros((ot.sizes[lv], 0)) for lv, x in enumerate(od)]
    idata = [np.hstack(x) if x else np.zeros((it.sizes[lv], 0)) for lv, x in enumerate(idd)]
    return _tree_orbits(ot, odata), _tree_orbits(it, idata)
