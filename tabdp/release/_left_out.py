"""What the budget leaves out, in words, from the spec alone: the left-out sizes of a plan.

Split from `tabdp.release._plan` (its size): the sizes a budget (or a lifetime budget) leaves
out of each table, found on a grid from the policies and the budget curves, and the public
sentences stating them. Everything follows from the spec and public metadata only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from tabdp._numeric import mul_up
from tabdp.mechanisms import Mechanism
from tabdp.privacy.budget import joint_currency
from tabdp.release._levels import _measured_labels, _released_measures, _table_mechanism
from tabdp.release.spec import ReleaseSpec


def _measure_mechanism(mechanism: Mechanism, m: str) -> Mechanism:
    if getattr(mechanism, "joint", False):
        # joint mechanisms (VectorSubbotin) have one; the base Mechanism does not declare it
        return mechanism.measure_mechanism(m)  # type: ignore[attr-defined]
    return mechanism


def _key_count(spec: ReleaseSpec, cols: Sequence[str], keys_file: Path | None = None) -> int:
    if keys_file is not None:
        return _read_table(keys_file).unique().height
    n = 1
    for c in cols:
        n *= len(spec.domains[c])
    return n


def _read_table(path: Path) -> pl.DataFrame:
    from tabdp.release.spec.files import read_table_file  # author mode: read safely

    return read_table_file(path)


#: Points per decade of the grid of sizes where the plan looks for left-out units.
_LEFT_OUT_PER_DECADE = 40
#: The smallest positive size searched: the engine's fixed-point step (a float measure's values
#: are summed on the ``2**-24`` grid, an integer measure's are whole), so no unit contributes a
#: positive amount below it.
_SEARCH_FROM = 2.0**-24
#: The largest size a unit can contribute to one cell when no public bound limits it: the engine
#: sums a unit's rows exactly in 128-bit fixed point, so a sum stays below ``2**127``.
_ENGINE_MAX_SIZE = 2.0**127
#: The engine's clamp of every measure value (``tabdp.frame._engine.MAX_ABS``: ``±2**64``).
_VALUE_CLAMP = 2.0**64


def _largest_sizes(spec: ReleaseSpec, releases: Sequence[tuple[str, Mapping[str, Any]]]
                   ) -> dict[str, float]:
    """Per summed currency: the largest size a unit can contribute to a cell (public).

    From the spec alone. Row mode (no ``input.unit``: each row is a unit): the measure's declared
    bound ``max(|low|, |high|)`` (``input.bounds``), else the engine's clamp of every value to
    ``±2**64``. With a unit, its rows in a cell add up (their number is not public): the engine's
    128-bit sums, `_ENGINE_MAX_SIZE`. A joint currency: the weighted norm of its measures' largest
    sizes.
    """
    def one(m: str) -> float:
        if spec.input.unit is not None:
            return _ENGINE_MAX_SIZE
        b = spec.input.bounds.get(m)
        return _VALUE_CLAMP if b is None else min(max(abs(float(b[0])), abs(float(b[1]))),
                                                  _VALUE_CLAMP)

    from tabdp.privacy.budget import ROWS_CURRENCY

    out: dict[str, float] = {}
    for _, charge in releases:
        for c, ch in charge.items():
            if c == ROWS_CURRENCY:  # counts: the size is the rows counted (plan.count_rows)
                continue
            mech = ch.mechanism
            if not getattr(mech, "joint", False):
                out[c] = one(c)
                continue
            ms = c.split("+")
            r = float(mech.r)
            big = [one(m) / float(mech.weight(m)) for m in ms]
            with np.errstate(over="ignore"):
                top = float(np.sum(np.abs(big) ** r) ** (1.0 / r)) if r != 1.0 else float(
                    np.sum(big))
            out[c] = min(top, float(np.finfo(np.float64).max))
    return out


def _size_grid(top: float, plan_sizes: np.ndarray) -> np.ndarray:
    """Sizes from `_SEARCH_FROM` to ``top`` (both included) and the plan's, up to top."""
    start = min(_SEARCH_FROM, top)  # a declared bound below 2**-24: searched up to it only
    lo, hi = math.log10(start), math.log10(top)
    n = max(2, math.ceil((hi - lo) * _LEFT_OUT_PER_DECADE) + 1)
    pts = np.minimum(10.0 ** np.linspace(lo, hi, n), top)
    return np.unique(np.concatenate([pts, [start, top],
                                     plan_sizes[plan_sizes <= top]]))


class _Charge(NamedTuple):
    """A release's planned ρ in one currency.

    ``k`` times the policy at the size (or at ``rows`` rows for counts, whatever the size).
    """

    mechanism: Any
    k: int
    rows: float | None = None

    def __call__(self, sizes: np.ndarray) -> np.ndarray:
        at = sizes if self.rows is None else np.full(np.shape(sizes), self.rows)
        rho = np.asarray(self.mechanism.rho(at), dtype=np.float64)
        # k times, rounded up (`mul_up`; review R18-1): never below the exact product
        return rho if self.k == 1 else np.zeros_like(rho) if self.k == 0 else mul_up(
            rho, float(self.k))


def _released_charges(spec: ReleaseSpec) -> list[tuple[str, dict[str, _Charge]]]:
    """Per release in run order (each table, then its direct rollups): currency → charge.

    A unit touches at most ``max_cells`` cells of a table (1 without a bound); counts charge
    at ``plan.count_rows`` rows.
    """
    from tabdp.privacy.budget import ROWS_CURRENCY

    cells = spec.input.max_cells or 1
    out = []
    for t in spec.tables:
        names = [t.name, *[f"{t.name}__{r.label}" for r in t.rollups if r.direct]]
        for name, label in zip(names, _measured_labels(t), strict=True):
            mech = _table_mechanism(t, label if t.shares else None)
            if t.kind == "count":
                charge = {ROWS_CURRENCY: _Charge(mech, cells, float(spec.plan.count_rows))}
            elif getattr(mech, "joint", False):
                charge = {joint_currency(t.measures): _Charge(mech, cells)}
            else:
                charge = {m: _Charge(_measure_mechanism(mech, m), cells)
                          for m in _released_measures(t)}
            out.append((name, charge))
    return out


def _several_cells(spec: ReleaseSpec) -> dict[str, bool]:
    """Per release of `_released_charges`: whether it has more than one cell (public)."""
    out = {}
    for t in spec.tables:
        out[t.name] = _key_count(spec, t.by, t.keys_file) > 1
        for r in t.rollups:
            if r.direct:  # a level not in the domains (a hierarchy's): several, to be safe
                out[f"{t.name}__{r.label}"] = (not all(c in spec.domains for c in r.by)
                                               or _key_count(spec, r.by) > 1)
    return out


def _cell_counts(spec: ReleaseSpec) -> dict[str, float]:
    """Per release of `_released_charges`: its number of cells (public; ``inf``: not known)."""
    out: dict[str, float] = {}
    for t in spec.tables:
        out[t.name] = float(_key_count(spec, t.by, t.keys_file))
        for r in t.rollups:
            if r.direct:
                out[f"{t.name}__{r.label}"] = (float(_key_count(spec, r.by))
                                               if all(c in spec.domains for c in r.by)
                                               else math.inf)
    return out


def _cells_reached(spec: ReleaseSpec) -> dict[str, float]:
    """Per release: the most cells of it a unit can reach (public; ``inf``: not known).

    Row mode: 1; ``input.max_cells`` where set; else every cell of the release.
    """
    cells = _cell_counts(spec)
    if spec.input.unit is None:
        return dict.fromkeys(cells, 1.0)
    if spec.input.max_cells is not None:
        return {k: min(float(spec.input.max_cells), v) for k, v in cells.items()}
    return cells


def _worst_charges(spec: ReleaseSpec, releases: Sequence[tuple[str, Mapping[str, _Charge]]],
                   tops: Mapping[str, float]) -> list[dict[str, float]]:
    """Per release: currency → the most ρ a unit can be charged there (public, spec alone).

    In every cell it can reach (`_cells_reached`) at the largest size it can contribute
    (`_largest_sizes`; counts: ``plan.count_rows`` rows).
    """
    reach = _cells_reached(spec)
    out = []
    for name, charge in releases:
        one = {}
        for c, ch in charge.items():
            at = np.array([ch.rows if ch.rows is not None else tops[c]])
            rho = float(_Charge(ch.mechanism, 1, ch.rows)(at)[0])
            one[c] = rho * reach[name] if rho > 0 else 0.0
        out.append(one)
    return out


def left_out_sizes(spec: ReleaseSpec) -> list[dict[str, Any]]:
    """Public: per released table and currency, the record sizes the budget leaves out.

    From the spec and the public curves alone (no data): a unit contributing ``size`` of a
    measure to ``max_cells`` cells (1 without a bound) of every table releasing that measure,
    and nothing of any other measure (counts: ``plan.count_rows`` rows per cell), is followed
    through the tables in the spec's order; each table's individual filter admits it while its
    loss so far plus the table's stays within the budget (under a curve budget: in that
    measure's own currency, at that size), and a unit left out of a table pays nothing there.
    Units that contribute more elsewhere (a constant budget sums every currency) or to more
    cells are left out at smaller sizes.

    Sizes are searched from `_SEARCH_FROM` (the engine's smallest positive
    contribution) to the largest size a unit can contribute to a cell (``searched_up_to``): in
    row mode the measure's declared bound (``input.bounds``), else ``2**64`` (the engine clamps
    every value to ``±2**64``); with a unit, whose rows in a cell add up, ``2**127`` (the
    engine's 128-bit exact sums). A grid of 40 points per decade locates the sizes left out and
    bisection refines both ends of every range of them.

    Args:
        spec: A validated spec.

    Returns:
        Rows ``{"table", "currency", "left_out_from", "all_above", "left_out_at",
        "plan_sizes_left_out", "searched_from", "searched_up_to"}``: the smallest size left out
        (``None``: no size up to ``searched_up_to``; counts: ``0`` when a unit with
        ``plan.count_rows`` rows is left out, and no ``left_out_at`` / ``searched_*`` keys),
        whether every larger size up to ``searched_up_to`` is left out too, the ranges
        ``[first, last]`` of sizes left out (``last`` is ``searched_up_to`` for a range open
        upward), and the spec's ``plan.record_sizes`` that are left out; for sizes (not
        counts), also ``limit_shared_with``: under a constant budget, the other currencies
        this release or an earlier one charges (a unit also charged there is left out at
        smaller sizes; ``[]`` under a curve budget), and ``cells_unbounded``: a unit may
        contribute to more cells than the one assumed (``input.unit`` without
        ``input.max_cells``). Counts kept as planned have them too, set only where such a unit
        can be left out: the most it can be charged (every cell it can reach, at the largest
        size it can contribute) by this release and the earlier ones passes the budget (a
        constant budget: in every currency; a curve: in ``rows``, at each number of rows up to
        ``plan.count_rows``). Every row also has ``assumes_charged_in``: the earlier releases
        whose planned charge the sizes left out assume (those charging the same currency;
        under a constant budget also the count tables): a unit charged less there (outside
        their cells) is left out of this release only at larger sizes, if at all, where every
        size above the first one left out is left out; otherwise also above or between the
        sizes left out. Empty without a budget.

    Example:
        >>> from tabdp.release.spec import load_spec
        >>> import tabdp, pathlib
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> rows = left_out_sizes(load_spec(root / "examples" / "cbp_release.toml"))
        >>> r = rows[-1]
        >>> r["table"], f"{r['left_out_from']:.2g}", r["all_above"], r["searched_up_to"] == 2**127
        ('state_naics6_payroll', '5.4e+16', True, True)
        >>> r["assumes_charged_in"]
        ['county_naics2_payroll']
    """
    if spec.budget is None:
        return []
    from tabdp.privacy.budget import ROWS_CURRENCY, Budget

    b = Budget(spec.budget.rho)
    releases = _released_charges(spec)
    plan_sizes = np.asarray(sorted(float(x) for x in spec.plan.record_sizes), dtype=np.float64)
    tops = _largest_sizes(spec, releases)
    rows_at = float(spec.plan.count_rows)
    out: list[dict[str, Any]] = []
    focus = list(dict.fromkeys(c for _, ch in releases for c in ch))

    def simulate(f: str, sizes: np.ndarray) -> dict[str, np.ndarray]:
        """Per release charging currency f: left out at ``sizes`` in f (0 elsewhere)."""
        spent: dict[str, np.ndarray] = {}
        left: dict[str, np.ndarray] = {}
        zero = np.zeros_like(sizes)
        for name, charge in releases:
            new = {c: (fn(sizes) if c == f else fn(zero)) for c, fn in charge.items()}
            if not b.per_currency:
                tot = sum(new.values(), zero)
                old = spent.get("*", zero)
                ok = old + tot <= float(b.limit(1.0))
                spent["*"] = np.where(ok, old + tot, old)
                oks = dict.fromkeys(new, ok)
            else:
                oks = {}
                for c, v in new.items():
                    size = sizes if c == f else (np.full_like(sizes, rows_at)
                                                 if c == ROWS_CURRENCY else zero)
                    old = spent.get(c, zero)
                    oks[c] = old + v <= b.limit(size, c)
                    spent[c] = np.where(oks[c], old + v, old)
            if f in oks:
                left[name] = ~oks[f]
        return left

    found: dict[tuple[str, str], np.ndarray] = {}
    spans: dict[tuple[str, str], list[list[float]]] = {}
    grids: dict[str, np.ndarray] = {}

    def edge(f: str, name: str, lo_s: float, hi_s: float) -> tuple[float, float]:
        """Bisection between two grid sizes on either side of a change: (last, first) size."""
        was = bool(simulate(f, np.array([lo_s]))[name][0])
        for _ in range(80):
            mid = 0.5 * (lo_s + hi_s)
            if mid in (lo_s, hi_s):
                break
            if bool(simulate(f, np.array([mid]))[name][0]) == was:
                lo_s = mid
            else:
                hi_s = mid
        return lo_s, hi_s

    for f in focus:
        grid = grids[f] = (_size_grid(tops[f], plan_sizes) if f != ROWS_CURRENCY
                           else np.array([rows_at]))
        for name, mask in simulate(f, grid).items():
            found[(name, f)] = mask
            if f == ROWS_CURRENCY:
                continue
            # runs of sizes left out on the grid; each end refined by bisection (the first
            # size left out, the last size left out before sizes are kept again)
            runs = []
            flips = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
            for i0, i1 in zip(np.r_[0, flips], np.r_[flips, mask.size], strict=True):
                if not mask[i0]:
                    continue
                start = float(grid[0]) if i0 == 0 else edge(f, name, float(grid[i0 - 1]),
                                                            float(grid[i0]))[1]
                end = tops[f] if i1 == mask.size else edge(f, name, float(grid[i1 - 1]),
                                                           float(grid[i1]))[0]
                runs.append([start, end])
            spans[(name, f)] = runs
    # under a constant budget every currency counts against one limit: the currencies other
    # than c charged by this release or an earlier one (units also charged there are left out
    # at smaller sizes than the rows state); under a curve budget none
    before: set[str] = set()
    unbounded = spec.input.unit is not None and spec.input.max_cells is None
    many = _several_cells(spec)
    cells_unbounded = False
    # counts (review r52): a unit beyond the plan (in more cells, or charged in other
    # currencies under a constant budget) can be left out only if the most it can be charged
    # by this release and the earlier ones (in the budget's scope) passes the limit
    worst = _worst_charges(spec, releases, tops)
    reach = _cells_reached(spec)
    worst_all = 0.0                      # constant budget: every currency
    rows_n = np.arange(1.0, float(spec.plan.count_rows) + 1.0)
    worst_rows = np.zeros_like(rows_n)   # curve budget: the rows currency, per rows counted
    rows_many = False                    # a rows-charging release so far has several cells
    # review rev63p: the earlier releases whose planned charge a size left out assumes (the
    # same currency; under a constant budget also the count tables, charged at their rows):
    # a unit absent from them is charged less and kept at larger sizes
    earlier: list[tuple[str, set[str]]] = []
    for (name, charge), most in zip(releases, worst, strict=True):
        before |= set(charge)
        earlier.append((name, set(charge)))
        # a unit in several cells of this table or an earlier one pays more than planned
        cells_unbounded = cells_unbounded or (unbounded and many.get(name, True))
        worst_all += sum(most.values())
        if ROWS_CURRENCY in charge:
            rows_many = rows_many or (unbounded and many.get(name, True))
            per_cell = np.asarray(_Charge(charge[ROWS_CURRENCY].mechanism, 1)(rows_n),
                                  dtype=np.float64)
            with np.errstate(over="ignore", invalid="ignore"):
                worst_rows = worst_rows + np.where(per_cell > 0, per_cell * reach[name], 0.0)
        for c in charge:
            lo = found[(name, c)]
            shared = [] if b.per_currency else sorted(before - {c})
            assumed = [n for n, cs in earlier[:-1]
                       if c in cs or (not b.per_currency and ROWS_CURRENCY in cs)]
            if c == ROWS_CURRENCY:  # the size is the rows counted, not the measure's size
                left = bool(lo[0])
                cells_c = cells_unbounded if not b.per_currency else rows_many
                if b.per_currency:
                    can = bool(np.any(worst_rows > b.limit(rows_n, c)))
                else:
                    can = worst_all > float(b.limit(1.0))
                beyond = not left and (bool(shared) or cells_c) and can
                out.append({"table": name, "currency": c, "left_out_from": 0.0 if left else None,
                            "all_above": left, "count_rows": spec.plan.count_rows,
                            "plan_sizes_left_out": [],
                            "limit_shared_with": shared if beyond else [],
                            "cells_unbounded": cells_c and beyond,
                            "assumes_charged_in": assumed})
                continue
            runs = spans[(name, c)]
            in_plan = [float(x) for x, bad in zip(grids[c], lo, strict=True)
                       if bad and x in set(plan_sizes.tolist())]
            out.append({"table": name, "currency": c,
                        "left_out_from": runs[0][0] if runs else None,
                        "all_above": len(runs) == 1 and bool(lo[-1]),
                        "left_out_at": runs, "plan_sizes_left_out": in_plan,
                        "searched_from": min(_SEARCH_FROM, tops[c]),
                        "searched_up_to": tops[c],
                        "limit_shared_with": shared, "cells_unbounded": cells_unbounded,
                        "assumes_charged_in": assumed})
    return out


#: What a statement that sizes are kept assumes (review r37: "no unit ... is left out" was
#: stated of a table that left out a unit contributing to two of its cells).
_AS_PLANNED = (" (as planned: contributing to one cell of each table releasing it, or "
               "max_cells cells where bounded, and to nothing else; a unit contributing to more "
               "cells, or also to other tables under a budget that adds their losses, can be "
               "left out at smaller sizes)")


def left_out_sizes_in_words(rows: Sequence[Mapping[str, Any]], unit: str = "unit"
                            ) -> list[str]:
    """Plain-language statements of `left_out_sizes()` (public).

    A table from which no size is left out is stated with the largest size searched
    (``searched_up_to``: the most a unit can contribute to a cell). Where the sizes left out
    are not every size from a threshold up (``all_above`` false), the statement lists the
    ranges left out (``left_out_at``) and says that the other sizes are kept.

    Args:
        rows: Rows of `left_out_sizes()`.
        unit: The privacy unit's name, as the statements call it.

    Returns:
        One statement per table and currency (counts: only when a unit is left out).

    Example:
        >>> got = left_out_sizes_in_words([{"table": "t", "currency": "x",
        ...     "left_out_from": 1e6, "all_above": True, "plan_sizes_left_out": [1e6]},
        ...     {"table": "u", "currency": "x", "left_out_from": None, "all_above": False,
        ...      "plan_sizes_left_out": [], "searched_up_to": 2.0**64}])
        >>> got[0][:55]
        't: a unit contributing more than about 1e+06 of x to a '
        >>> got[1][:97]
        'u: no unit contributing up to 1.84e+19 of x to a cell (the most it can contribute) \
is left out of'
        >>> got[1][97:]
        ' this table by the budget (as planned: contributing to one cell of each table ...)'
        >>> left_out_sizes_in_words([{"table": "t", "currency": "x", "left_out_from": 0.3,
        ...     "all_above": False, "left_out_at": [[0.3, 1.5], [7e10, 1e12]],
        ...     "plan_sizes_left_out": [], "searched_from": 2**-24, "searched_up_to": 1e12}])[0]
        't: a unit contributing about 0.3 to 1.5 or more than about 7e+10 of x to a cell is \
left out of this table by the budget (its values are missing from the published totals); other \
sizes are kept (as planned: ...)'
    """
    lines = []
    a = "an" if unit[:1].lower() in "aeio" else "a"
    for r in rows:
        first = r["left_out_from"]
        top = r.get("searched_up_to")
        if first is None:
            if r["currency"] == "rows":
                lines += _count_beyond_plan(r, unit)
            elif top is not None:
                lines.append(f"{r['table']}: no {unit} contributing up to {top:.3g} of "
                             f"{r['currency']} to a cell (the most it can contribute) is left "
                             f"out of this table by the budget{_AS_PLANNED}"
                             f"{_elsewhere(r, unit, cells=False)}")
            continue
        if r["currency"] == "rows":
            lines.append(f"{r['table']}: {a} {unit} counted {r.get('count_rows', 1)} row(s) in a "
                         f"cell is left out of this table by the budget{_assumed(r, unit)}")
            continue
        floor = float(r.get("searched_from") or 0.0)
        runs = r.get("left_out_at")
        if r["all_above"] or not runs:
            runs = [[first, top]]
        parts = []
        for lo, hi in runs:
            open_end = r["all_above"] or top is None or hi >= top
            if lo <= floor:
                parts.append("any positive amount" if open_end
                             else f"any positive amount up to about {hi:.3g}")
            elif open_end:
                parts.append(f"more than about {lo:.3g}")
            else:
                parts.append(f"about {lo:.3g} to {hi:.3g}")
        what = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]
        if r["all_above"]:
            kept = ""
        elif r.get("left_out_at") is None:  # no intervals given: say only what is known
            kept = "; not every larger size is left out"
        elif top is not None and runs[-1][1] < top:
            kept = (f"; other sizes up to {top:.3g} (the most it can contribute) are kept"
                    f"{_AS_PLANNED}")
        else:
            kept = f"; other sizes are kept{_AS_PLANNED}"
        lines.append(f"{r['table']}: {a} {unit} contributing {what} of {r['currency']} to a "
                     "cell is left out of this table by the budget (its values are missing "
                     f"from the published totals){_assumed(r, unit)}{kept}"
                     f"{_elsewhere(r, unit, cells=_AS_PLANNED not in kept)}")
    return lines


def _assumed(row: Mapping[str, Any], unit: str) -> str:
    """The condition of a size left out: the earlier releases it is assumed charged in (public).

    The sizes left out of a release are those of a unit charged as planned by the earlier
    releases of ``assumes_charged_in`` too (`left_out_sizes`); a unit absent from them (its
    rows outside their cells) is charged less and is left out only at larger sizes, or not at
    all (review rev63p: "a unit contributing more than about 5.41e+16 ... is left out" was
    stated of a table that kept a unit of 1e17 absent from the earlier table). Empty when no
    earlier release is assumed.

    Example:
        >>> _assumed({"assumes_charged_in": ["t1", "t2"]}, "unit")[:62]
        ', when it is also charged as planned by t1, t2, released befor'
        >>> _assumed({"assumes_charged_in": []}, "unit")
        ''
        >>> _assumed({"assumes_charged_in": ["t1"], "all_above": False}, "unit")[-60:]
        ' too (also above or between the sizes stated), or not at all'
    """
    names = list(row.get("assumes_charged_in") or [])
    if not names:
        return ""
    a = "an" if unit[:1].lower() in "aeio" else "a"
    # sizes left out other than all those above one (review rev63d): where the planned unit is
    # kept above or between the sizes stated, an earlier release left it out and did not charge
    # it; a unit absent from the release before that is charged there, and can then be left
    # out of this one at those sizes
    where = ("only at larger sizes, if at all" if row.get("all_above", True) else
             "at other sizes too (also above or between the sizes stated), or not at all")
    return (f", when it is also charged as planned by {', '.join(names)}, released before it "
            "(the same size there; the planned rows in a count table); "
            f"{a} {unit} charged less there (e.g. outside their cells) is left out {where}")


def _count_beyond_plan(row: Mapping[str, Any], unit: str) -> list[str]:
    """A count table's caveat: units beyond the plan it can leave out (public; review r52).

    From the row's spec-derived fields alone (`left_out_sizes`: set only when the most such a
    unit can be charged passes the budget): a unit counted in more cells than planned
    (``cells_unbounded``), or also charged in other currencies under a constant budget
    (``limit_shared_with``). Empty when neither can leave a unit out.
    """
    a = "an" if unit[:1].lower() in "aeio" else "a"
    parts = []
    if row.get("cells_unbounded"):
        parts.append("in more than one cell of a table (input.max_cells is not set)")
    shared = list(row.get("limit_shared_with") or [])
    if shared:
        parts.append(f"also charged in {', '.join(shared)} by this table or an earlier one (the "
                     "constant budget adds its losses in every currency)")
    if not parts:
        return []
    k = row.get("count_rows", 1)
    return [f"{row['table']}: no {unit} counted at most {k} row(s) in a cell is left out of this "
            "count table by the budget as planned (counted in one cell of each table, or "
            f"max_cells cells where bounded, and charged nothing else); {a} {unit} "
            + ", or ".join(parts) + ("," if len(parts) > 1 else "")
            + " can be left out (it is then missing from the published counts)"]


def _elsewhere(row: Mapping[str, Any], unit: str, *, cells: bool) -> str:
    """The caveat of a `left_out_sizes` row on units charged beyond the planned one (public).

    From the row's spec-derived fields alone: under a constant budget, the other currencies
    charged by this table or an earlier one (``limit_shared_with``); with ``cells``, a unit in
    more cells of a table than assumed (``cells_unbounded``: no ``input.max_cells``). Empty
    when neither applies (a single-currency release, a curve budget, bounded cells).
    """
    a = "an" if unit[:1].lower() in "aeio" else "a"
    parts = []
    shared = list(row.get("limit_shared_with") or [])
    if shared:
        names = ", ".join(shared)
        parts.append(f"also charged in {names} by this table or an earlier one (the constant "
                     "budget adds its losses in every currency)")
    if cells and row.get("cells_unbounded"):
        parts.append("contributing to more than one cell of a table (input.max_cells is not "
                     "set)")
    if not parts:
        return ""
    return f"; {a} {unit} " + " or ".join(parts) + " is left out at smaller sizes"


#: The public statement of what left-out units do to the published tables.
LEFT_OUT_BIAS_TEXT = (
    "The budget is enforced as an individual filter: a unit whose loss would pass its budget "
    "is left out of a table (the table is still published, without its contributions). "
    "Left-out units' contributions are missing from the published values (a bias, "
    "downward for counts and for sums of non-negative values), and the published sd and moe "
    "do not include that bias. Which record sizes a budget can leave out follows from the "
    "public curves alone (listed per table); how many units were left out is known only to "
    "the curator.")


#: The public statement of what units left out by a lifetime ledger (``[ledger]``, or a
#: dataset's ledger) do to the published tables: the same words whether or not any unit was
#: left out (it follows from the spec alone).
LIFETIME_LEFT_OUT_BIAS_TEXT = (
    "The series' lifetime budget is enforced as an individual filter too: a unit whose loss "
    "over the series' releases (its losses in earlier releases, kept in the confidential "
    "ledger, plus this release's) would pass the lifetime budget is left out of a table (the "
    "table is still published, without its contributions). Left-out units' contributions "
    "are missing from the published values (a bias, downward for counts and for sums of "
    "non-negative values), and the published sd and moe do not include that bias. Which "
    "units the lifetime budget leaves out depends on their confidential losses in earlier "
    "releases; how many units were left out is known only to the curator.")


def left_out_bias_in_words(spec: Any, sizes: list[dict[str, Any]] | None = None,
                           unit: str = "unit") -> list[str]:
    """PUBLIC: what the spec's individual filters can leave out, and the bias, in words.

    From the spec alone, never from data: the same sentences whether or not a unit was left
    out. A ``[budget]`` gives `LEFT_OUT_BIAS_TEXT` and the record sizes it leaves out (from the
    public curves); a lifetime ledger (``[ledger]``, or the dataset's) gives
    `LIFETIME_LEFT_OUT_BIAS_TEXT`. Neither: no sentence.

    Args:
        spec: The release spec (its ``budget`` and ``ledger`` are read).
        sizes: `left_out_sizes` of the spec (``None``: computed).
        unit: What a unit is called.

    Returns:
        The sentences (``summary.json`` ``left_out_in_words``).

    Example:
        >>> import types
        >>> spec = types.SimpleNamespace(budget=None, ledger=types.SimpleNamespace())
        >>> left_out_bias_in_words(spec, []) == [LIFETIME_LEFT_OUT_BIAS_TEXT]
        True
        >>> left_out_bias_in_words(types.SimpleNamespace(budget=None, ledger=None), [])
        []
    """
    lines: list[str] = []
    if spec.budget is not None:
        rows = left_out_sizes(spec) if sizes is None else sizes
        lines += [LEFT_OUT_BIAS_TEXT, *left_out_sizes_in_words(rows, unit)]
    if getattr(spec, "ledger", None) is not None:
        lines.append(LIFETIME_LEFT_OUT_BIAS_TEXT)
    return lines
