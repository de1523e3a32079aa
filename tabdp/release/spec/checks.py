"""Cross-field checks of a parsed spec: names, grids, budgets, rounding, input rules, paths."""

from __future__ import annotations

import math
import os
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tabdp import mechanisms
from tabdp._reserved import REPORT_COLUMNS, RESERVED, is_reserved, report_clash
from tabdp.release.spec.model import (
    BudgetSpec,
    Hierarchy,
    InputSpec,
    LedgerSpec,
    OutputSpec,
    PlanSpec,
    Publication,
    TableSpec,
)
from tabdp.release.spec.schema import (
    NATIONAL,
    RESERVED_COLUMNS,
    ROUND_MOE_SHARE,
    ROW_ID,
    _fail,
    _join,
    _maybe,
    _names,
    _show,
)


def _output_step(mech: Any, grid: Any) -> float | None:
    """The step of a measure's published estimates, where the mechanism fixes one."""
    if isinstance(mech, mechanisms.TransformationMechanism):
        return None  # its grid is in transformed space
    g = grid if grid is not None else mech.default_grid()
    if isinstance(g, (int, float)) and not isinstance(g, bool) and g > 0:
        return float(g)
    if isinstance(mech, (mechanisms.DiscreteGaussian, mechanisms.DiscreteLaplace)):
        return 1.0  # exact integers
    return None


def _round_is_noop(unit: float, step: float | None) -> bool:
    """Whether rounding to ``unit`` leaves estimates on a grid of ``step`` unchanged."""
    if step is None:
        return False
    q = step / unit
    return q >= 1.0 - 1e-9 and abs(q - round(q)) <= 1e-9 * q


def global_round_problem(t: TableSpec, unit: float, plan: PlanSpec, level: float
                         ) -> tuple[str, float, float, float] | None:
    """Whether a global rounding ``unit`` is too coarse for table ``t`` (public quantities only).

    The rule (`ROUND_MOE_SHARE`): the unit must be at most 0.1 x the table's planned
    margin of error at its typical cell total (``calibrate.typical_total`` for a calibrated
    table, else the middle value of ``[plan].cell_totals``, or ``count_totals`` for a count),
    unless rounding to it changes no estimate (a unit dividing the estimates' own grid step,
    such as 1 for exact-integer counts).

    Args:
        t: A parsed table.
        unit: The global rounding unit.
        plan: The spec's ``[plan]``.
        level: The release's confidence level.

    Returns:
        ``None`` if the unit applies; else ``(measure, typical total, moe, largest unit)``
        for the first measure where it is too coarse.

    Example:
        >>> t = TableSpec(name="n", kind="count", measures=(), by=(),
        ...               mechanism=mechanisms.DiscreteGaussian(sigma=2.0))
        >>> global_round_problem(t, 1000.0, PlanSpec(), 0.9)
        ('count', 1000.0, 3.0, 0.30000000000000004)
        >>> global_round_problem(t, 1.0, PlanSpec(), 0.9) is None
        True
    """
    from tabdp.frame import count_mechanism

    totals = plan.count_totals if t.kind == "count" else plan.cell_totals
    typical = (float(t.calibration["typical_total"]) if t.calibration is not None
               else sorted(totals)[len(totals) // 2])
    for m in (t.measures if t.kind == "sum" else ("count",)):
        grid = t.grid.get(m) if isinstance(t.grid, Mapping) else t.grid
        if t.kind == "count":
            mech = count_mechanism(t.mechanism, t.grid)
        elif getattr(t.mechanism, "joint", False):
            mech = t.mechanism.measure_mechanism(m)
        else:
            mech = t.mechanism
        if _round_is_noop(unit, _output_step(mech, grid)):
            continue
        # the plan's margin of error: on the table's own grid when it sets one (review r36 F2)
        moe = float(mech.moe_at(typical, level) if grid is None else
                    mech.moe_at(typical, level, grid=grid))
        if math.isfinite(moe) and unit > ROUND_MOE_SHARE * moe:
            return m, typical, moe, ROUND_MOE_SHARE * moe
    return None


def _check_global_round(tables: Sequence[TableSpec], raw_tables: Sequence[Any],
                        publication: Publication, plan: PlanSpec, level: float) -> None:
    """Refuse a global ``[publication] round`` that is too coarse for a table using it."""
    unit = publication.round
    if unit is None or isinstance(unit, Mapping):
        return
    for i, (t, raw) in enumerate(zip(tables, raw_tables, strict=True)):
        own = raw.get("publication") if isinstance(raw, Mapping) else None
        if isinstance(own, Mapping) and "round" in own:
            continue  # the table sets its own rounding
        problem = global_round_problem(t, float(unit), plan, level)
        if problem is None:
            continue
        m, typical, moe, largest = problem
        what = "a count" if t.kind == "count" else f"measure {m!r}"
        where = ("calibrate.typical_total" if t.calibration is not None else
                 "the middle of [plan]." + ("count_totals" if t.kind == "count"
                                            else "cell_totals"))
        _fail("publication.round",
              f"the global rounding unit {unit:g} also applies to tables[{i}] ({t.name!r}, "
              f"{what}), where it is more than {ROUND_MOE_SHARE:g} x the planned margin of "
              f"error: moe {moe:.4g} at a typical cell total of {typical:g} ({where}). The "
              f"rounding would swamp the noise: estimates below {unit / 2:g} would be "
              f"published as 0, beside an sd and moe that do not include the rounding error.",
              f"set the rounding per table: tables[{i}].publication = {{ round = false }} (no "
              f"rounding) or a unit of at most {largest:.3g}; a global round applies only to "
              f"tables where it is at most {ROUND_MOE_SHARE:g} x that moe (or changes no "
              "estimate, such as 1 for counts).")


# -- entry points -------------------------------------------------------------------------------
def _check_currencies(tables: list[TableSpec], budget: BudgetSpec | None) -> None:
    """Refuse measure names that would mix currencies under a curve budget.

    Under a curve budget each summed measure is a currency of its own and counts are ``rows``:
    a measure named ``rows`` or holding ``+`` (a joint currency) would mix them.
    """
    if budget is None or not isinstance(budget.rho, Mapping):
        return
    for i, t in enumerate(tables):
        for m in t.measures if t.kind == "sum" else ():
            if m == "rows" or "+" in m:
                _fail(f"tables[{i}].measures", f"measure {m!r} would share a budget currency "
                      "with counts ('rows') or with a joint mechanism ('a+b'), mixing units of "
                      "measurement under the curve budget.",
                      "rename the column (e.g. with a derived measure) or use a constant "
                      "budget.")


def _currency_bound(tables: Sequence[TableSpec]) -> int:
    """An upper bound on the number of budget currencies a spec's releases charge.

    Each currency is a summed measure, a joint group of a table's measures (only a table of
    two or more measures can be one) or ``rows`` (counts, medians, quantiles): at most the
    distinct measure names, plus one per table of several measures, plus one.
    """
    measures = {m for t in tables for m in t.measures}
    return len(measures) + sum(1 for t in tables if len(t.measures) > 1) + 1


def _check_max_rho(tables: Sequence[TableSpec], budget: BudgetSpec | None, inp: InputSpec,
                   max_rho: float | None) -> None:
    """Author mode under ``[policy] max_rho``: the run's budget must provably stay within it.

    The individual filter keeps every unit's total ρ within a constant budget, and within its
    curve in each currency under a curve budget (a unit's total is then at most the number of
    currencies times the curve's largest limit). Checked from the spec's text alone.
    """
    if max_rho is None or inp.mode != "author":
        return
    hint = (f"give a [budget] within the curator's cap, e.g. rho = {max_rho:g} (or ask the "
            "curator for a [defaults] budget).")
    if budget is None:
        _fail("budget", f"the curator caps an author-mode run at a per-record rho of "
                        f"{max_rho:g} ([policy] max_rho), so the run needs a budget; the spec "
                        "has none and the curator gives no default.", hint)
    if isinstance(budget.rho, Mapping):
        top = max(budget.rho.values())
        k = _currency_bound(tables)
        if k * top > max_rho * (1.0 + 1e-12):
            _fail("budget.rho", f"the curve budget lets a unit spend up to {top:g} in each of "
                                f"up to {k} currencies of this spec ({k * top:g} in all), above "
                                f"the curator's cap of {max_rho:g} per run ([policy] max_rho).",
                  f"lower the curve so that its largest limit is at most {max_rho / k:g}, or "
                  f"use a constant budget rho <= {max_rho:g}.")
    elif budget.rho > max_rho:
        _fail("budget.rho", f"the budget rho = {budget.rho:g} is above the curator's cap of "
                            f"{max_rho:g} per run ([policy] max_rho).", hint)


def _internal_name(col: str) -> str | None:
    """Why ``col`` may not name a unit, measure or key column (one tabdp adds), or ``None``.

    Refused from the spec's text, before any data is read: the engines would refuse these names
    (or the run's columns would clash with them) only after reading the input. In any letter
    case, as Spark resolves column names without regard to case by default.
    """
    low = col.lower()
    if low == ROW_ID:
        return "is the name of the row id tabdp assigns when each row is a unit"
    if low == NATIONAL:
        return ("is the name of the constant key column tabdp adds for a national (by = []) "
                "table")
    if re.fullmatch(re.escape(NATIONAL) + r"_in[0-9]+", low):
        return ("is the name of a membership column tabdp adds for the direct rollups of a "
                "table (a constant key on the rows in the table's key set)")
    if is_reserved(col):
        return (f"starts with {RESERVED!r}, the prefix of the columns tabdp adds next to the "
                "input's")
    return None


_INTERNAL_RULE = (f"any name is allowed but {NATIONAL!r}, {NATIONAL + '_in<n>'!r} and those "
                  f"starting with {RESERVED!r}, in any letter case: tabdp's own")


def _refuse_internal(path: str, what: str, col: str, example: str) -> None:
    """`_fail` when ``col`` (the ``what`` at ``path``) is one of tabdp's own column names."""
    why = _internal_name(col)
    if why is not None:
        _fail(path, f"{what} {col!r} {why} ({_INTERNAL_RULE}).",
              f"rename the column in the data and the spec (e.g. {example!r}).")


def _file_name_key(name: str) -> str:
    """A file name as a case- and normalization-insensitive file system compares it (or more).

    Canonical caseless matching (NFD, case folding, NFD again): two names with the same key
    can be one file on macOS (APFS: case- and normalization-insensitive) or Windows. It may
    merge a few names that a file system keeps apart (``ß`` and ``ss``): refused, not lost.

    Example:
        >>> _file_name_key("t__\u00c9.parquet") == _file_name_key("t__e\u0301.parquet")
        True
        >>> _file_name_key("t__σ.parquet") == _file_name_key("t__ς.parquet")
        True
    """
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())


def _check_tables(tables: Sequence[TableSpec], inp: InputSpec, budget: BudgetSpec | None
                  ) -> None:
    """Cross-field checks that need a parsed table: names, grids, budgets, output files."""
    files: dict[str, str] = {}
    for i, t in enumerate(tables):
        tp = f"tables[{i}]"
        for j, col in enumerate(t.by):
            _refuse_internal(f"{tp}.by[{j}]", "key column", col, "county")
            if col in RESERVED_COLUMNS:
                _fail(f"{tp}.by[{j}]", f"key column {col!r} has the name of a column of the "
                                       f"public tables ({_names(RESERVED_COLUMNS[:9])}).",
                      "rename the column in the data and the spec (e.g. 'measure_code').")
        for j, r in enumerate(t.rollups):
            for k, col in enumerate(r.by):
                _refuse_internal(f"{tp}.rollups[{j}].by[{k}]", "key column", col, "state")
                if col in RESERVED_COLUMNS:
                    _fail(f"{tp}.rollups[{j}].by[{k}]",
                          f"key column {col!r} has the name of a column of the public tables.",
                          "rename the column in the hierarchy (and the spec).")
        outputs = {f"{m}{suffix}" for m in t.measures
                   for suffix in ("_sd", "_moe", "_lower", "_upper")}
        for j, m in enumerate(t.measures):
            if m in outputs:
                _fail(f"{tp}.measures[{j}]", f"measure {m!r} has the name of another "
                                             "measure's uncertainty column (<measure>_sd, "
                                             "<measure>_moe, <measure>_lower, <measure>_upper).",
                      "rename the column in the data and the spec.")
        if inp.unit is not None and (inp.unit in t.by or inp.unit in t.measures):
            _fail(f"{tp}", f"the unit column {inp.unit!r} (input.unit) is also a key or "
                           "measure of this table.",
                  "group by and sum other columns; the unit column only identifies units.")
        mech = t.mechanism
        if isinstance(mech, (mechanisms.DiscreteGaussian, mechanisms.DiscreteLaplace)):
            steps = (t.grid.values() if isinstance(t.grid, Mapping)
                     else [] if t.grid is None else [t.grid])
            for g in steps:
                if not float(g).is_integer():
                    _fail(f"{tp}.grid", f"{_show(g)} is not a whole number, but "
                                        f"{type(mech).__name__} releases exact integers.",
                          "use a whole-number grid (e.g. 10), or leave grid out.")
        if budget is not None and mech is not None and mech.dp_delta is not None:
            _fail(f"{tp}.mechanism", f"{type(mech).__name__} is accounted in approximate DP "
                                     "only (its per-record ρ is infinite), so a [budget] on ρ "
                                     "cannot bound it.",
                  "remove [budget], or use a mechanism with a zCDP guarantee (gaussian, "
                  "laplace, log, root, subbotin with r = 1 or 2, ...).")
        names = [f"{t.name}.parquet"]
        for r in t.rollups:
            names.append(f"{t.name}__{r.label}.parquet")
            if r.direct and not t.consistent:
                names.append(f"{t.name}__{r.label}_direct.parquet")
        for j, name in enumerate(names):
            # in any letter case and Unicode normalization: on a case-insensitive file system
            # (macOS, Windows) the two would be one file (review r30); APFS also ignores the
            # normalization (é composed or decomposed) and NTFS upper-cases σ and ς alike, which
            # str.lower did not see (review rev66w)
            key = _file_name_key(name)
            if key in files:
                _fail(f"{tp}.rollups", f"two outputs would both be written to {name!r} "
                                       f"({files[key]} and this table's output #{j}; file names "
                                       "are compared in any letter case and Unicode "
                                       "normalization, as case-insensitive file systems "
                                       "compare them).",
                      "rollup file names join the rollup columns with '_': choose rollups "
                      "whose names differ in more than letter case or accents' encoding.")
            files[key] = tp


def _check_report_names(tables: Sequence[TableSpec], inp: InputSpec,
                        ledger: LedgerSpec | None) -> None:
    """The confidential per-record report's columns must not meet (names only, any case).

    The report lists each unit's id under the unit column's name next to ``rho``,
    ``epsilon``, ``size``, ``epsilon_delta``, ``rho_lifetime`` (with a ledger) and one
    ``rho_<release>`` per release: a table's name, ``<table>__<rollup>`` for a direct rollup.
    The run's session refuses such names too, but only once the input is read.
    """
    unit = inp.unit
    if unit is not None and unit.lower() in REPORT_COLUMNS:
        _fail("input.unit", f"the unit column {unit!r} has the name (in any letter case) of a "
                            "column of the confidential per-record report "
                            f"({_names(REPORT_COLUMNS)}), which lists each unit's id under the "
                            "unit column's name.",
              "rename the column in the data and the spec (e.g. 'unit_id').")
    for i, t in enumerate(tables):
        releases = [(f"tables[{i}].name", t.name)] + [
            (f"tables[{i}].rollups[{j}]", f"{t.name}__{r.label}")
            for j, r in enumerate(t.rollups) if r.direct]
        for path, name in releases:
            clash = report_clash(name, unit, ledger is not None)
            if clash is not None:
                _fail(path, f"{clash}.", "rename the table (or, if the two meet, the unit "
                                         "column in the data and the spec).")


def _check_input_rules(tables: Sequence[TableSpec], inp: InputSpec,
                       budget: BudgetSpec | None = None,
                       raw_tables: Sequence[Any] = ()) -> None:
    """Bounds name summed measures; author mode declares every data-quality rule."""
    summed = [m for t in tables if t.kind == "sum" for m in t.measures]
    if inp.unit is not None:
        _refuse_internal("input.unit", "the unit column", inp.unit, "estab_id")
    for i, t in enumerate(tables):
        for j, m in enumerate(t.measures):
            _refuse_internal(f"tables[{i}].measures[{j}]", "measure", m, "payroll")
    for m in inp.bounds:
        if m not in summed:
            _fail(_join("input.bounds", m), f"{m!r} is not a measure of any sum table (measures: "
                                           f"{_names(sorted(set(summed)))}).{_maybe(m, summed)}",
                  "give bounds only for summed measures.")
    if inp.nonfinite == "clamp":
        unbounded = [m for m in dict.fromkeys(summed) if m not in inp.bounds]
        if unbounded:
            _fail("input.bounds", f"has no bounds for measure(s) {_names(unbounded)}, but "
                                  "input.nonfinite = 'clamp' replaces +inf / -inf by the bounds.",
                  "add bounds for every summed measure, or use nonfinite = \"drop\" or "
                  "\"zero\".")
    if inp.mode == "author":
        _refuse_author_rules(tables, inp, budget, raw_tables)


#: Why author mode refuses a strict data-quality rule (the end of each refusal's message).
_AUTHOR_WHY = ("in author mode (input.mode = \"author\") every data-quality rule is declared up "
               "front, so that no value in the data can stop the run")


def author_rule_problems(tables: Sequence[TableSpec], inp: InputSpec,
                         budget: BudgetSpec | None = None,
                         raw_tables: Sequence[Any] = ()) -> list[tuple[str, str, str]]:
    """Every rule of an author-mode spec that would let a value in the data stop the run.

    Read from the spec's text alone (no data is read), so the list never depends on a record.
    Each rule is refused because a strict rule (``'error'``), a missing public bound or a limit
    on what the budget leaves out (``max_left_out``) turns one record's value into a failed
    run, which an author who may not see the data would learn from.

    Args:
        tables: The parsed tables.
        inp: The ``[input]`` section (any mode; curator mode has no problems).
        budget: The ``[budget]`` section, if any.
        raw_tables: The ``[[tables]]`` as written: a table's own ``nulls = "error"`` is listed
            (one that only inherits ``input.nulls`` is fixed with it, so it is not).

    Returns:
        ``(key, what is wrong, the fix)`` per offending key, in spec order.

    Example:
        >>> from tabdp.release.spec.model import InputSpec
        >>> inp = InputSpec(path=None, source="", mode="author", unit="estab_id")
        >>> [key for key, _, _ in author_rule_problems([], inp)]
        ['input.unit_nulls']
    """
    if inp.mode != "author":
        return []
    out: list[tuple[str, str, str]] = []
    if budget is not None and budget.max_left_out is not None:
        out.append(("budget.max_left_out",
                    "makes a run fail on what the budget left out of the data, so the run's "
                    "outcome would depend on single records",
                    "remove budget.max_left_out (the curator sets it in a curator-mode spec)"))
    if inp.unit is not None and inp.unit_nulls == "error":
        out.append(("input.unit_nulls", "is 'error' (the default)",
                    'set input.unit_nulls = "drop"'))
    summed = [m for t in tables if t.kind == "sum" for m in t.measures]
    if not summed:
        return out  # a release of counts only reads no measure values
    if inp.nulls == "error":
        out.append(("input.nulls", "is 'error' (the default)",
                    'set input.nulls = "zero" or "drop"'))
    for i, t in enumerate(tables):
        written = i < len(raw_tables) and isinstance(raw_tables[i], Mapping) \
            and "nulls" in raw_tables[i]
        if t.kind == "sum" and t.nulls == "error" and (written or inp.nulls != "error"):
            out.append((f"tables[{i}].nulls", "is 'error'",
                        'set nulls = "zero" or "drop" (or remove it to use input.nulls)'))
    if inp.negatives == "error":
        out.append(("input.negatives", "is 'error' (the default)",
                    'set input.negatives = "zero", "drop" or "allow" (signed measures, '
                    "additive mechanisms only)"))
    if inp.nonfinite == "error":
        out.append(("input.nonfinite", "is 'error' (the default)",
                    'set input.nonfinite = "drop", "zero" or "clamp"'))
    missing = [m for m in dict.fromkeys(summed) if m not in inp.bounds]
    if missing:
        out.append(("input.bounds", f"has no public bounds for measure(s) {_names(missing)} (a "
                                    "huge value must not be able to stop the release)",
                    "add input.bounds = { " + ", ".join(f"{m} = [0, 1e10]" for m in missing)
                    + " } with bounds known without looking at the data"))
    if inp.negatives == "allow":
        for i, t in enumerate(tables):
            if t.kind == "sum" and getattr(t.mechanism, "requires_nonnegative", False):
                signed = [m for m in t.measures if m in inp.bounds and inp.bounds[m][0] < 0]
                if signed:
                    out.append(("input.negatives",
                                f"is 'allow' and measure(s) {_names(signed)} may be negative "
                                f"(input.bounds), but tables[{i}] uses "
                                f"{type(t.mechanism).__name__}, which needs non-negative "
                                "contributions",
                                'set input.negatives = "zero" or "drop", or lower bounds >= 0'))
                    break
    return out


def _refuse_author_rules(tables: Sequence[TableSpec], inp: InputSpec,
                         budget: BudgetSpec | None, raw_tables: Sequence[Any]) -> None:
    """Author mode: refuse every offending data-quality rule in one error (spec text only)."""
    problems = author_rule_problems(tables, inp, budget, raw_tables)
    if len(problems) == 1:
        key, what, fix = problems[0]
        _fail(key, f"{what}, but {_AUTHOR_WHY}.", f"{fix}.")
    if problems:
        lines = "".join(f"\n  - {key} {what}: {fix}." for key, what, fix in problems)
        _fail("input.mode", f"is 'author', but {len(problems)} keys of this spec would let a "
                            f"value in the data stop the run ({_AUTHOR_WHY}):{lines}",
              "change every key listed above; the list is complete (it is read from the spec "
              "alone, without reading any data).")


def read_paths(inp: InputSpec, hierarchies: Mapping[str, Hierarchy],
               raw_domains: Mapping[str, Any], tables: Sequence[TableSpec], base: Path,
               spec_path: Path | None) -> list[tuple[str, Path]]:
    """What a release reads from disk, as (spec key, path): no output may hold or be inside one.

    A glob input (``*``, ``?``, ``[`` or ``{``) is the folder its first wildcard is in (every
    file it may match is below it).

    Args:
        inp: The ``[input]`` section.
        hierarchies: The hierarchies (their files).
        raw_domains: The ``[domains]`` table as written (domain files).
        tables: The tables (their keys files).
        base: The spec's folder (relative domain files).
        spec_path: The spec file, if any.

    Returns:
        ``(what, path)`` pairs.

    Example:
        >>> from pathlib import Path
        >>> inp = InputSpec(path=Path("/d/y*/p.parquet"), source="/d/y*/p.parquet")
        >>> read_paths(inp, {}, {}, (), Path("/s"), None)
        [('input.path', PosixPath('/d'))]
    """
    read: list[tuple[str, Path]] = []
    src = str(inp.path)
    wild = re.search(r"[*?\[{]", src)
    if inp.path is None:  # input.table: a catalog table, no path of ours
        pass
    elif wild is not None:
        prefix = src[:wild.start()]
        read.append(("input.path", Path(prefix if prefix.endswith("/") else
                                        os.path.dirname(prefix))))
    else:
        read.append(("input.path", inp.path))
    read += [(f"hierarchies.{n}.file", h.file) for n, h in hierarchies.items()]
    for n, v in raw_domains.items():
        if isinstance(v, Mapping) and "file" in v:
            read.append((f"domains.{n}.file", Path(os.path.abspath(base / str(v["file"])))))
    read += [(f"tables[{i}].keys.file", t.keys_file) for i, t in enumerate(tables)
             if t.keys_file is not None]
    if spec_path is not None:
        read.append(("the spec file", Path(spec_path)))
    return read


def _check_paths(output: OutputSpec, inp: InputSpec, hierarchies: Mapping[str, Hierarchy],
                 raw_domains: Mapping[str, Any], domains: Mapping[str, pl.Series],
                 tables: Sequence[TableSpec], base: Path, spec_path: Path | None) -> None:
    """Output folders must not hold or sit inside anything the release reads."""
    read = read_paths(inp, hierarchies, raw_domains, tables, base, spec_path)
    for key in ("public", "confidential", "plan"):
        out = Path(getattr(output, key))
        for what, p in read:
            p = Path(os.path.abspath(p))
            if p == out or out in p.parents or (what == "input.path" and p in out.parents):
                _fail(f"output.{key}", f"the {key} folder {str(out)!r} overlaps {what} "
                                       f"({str(p)!r}): writing the release (or replacing it "
                                       "with --overwrite) would change what the release reads.",
                      "write the outputs to a folder of their own, outside the input.")


def _check_declared_columns(tables: Sequence[TableSpec], inp: InputSpec) -> None:
    """Author mode: the dataset has a declared schema and the spec names only its columns.

    Decided from the configuration and the spec text alone, before anything is read. Without
    a declared schema the files' own dtypes would decide the columns' types, and a file's
    dtypes can follow one record (pandas writes an integer column with one missing value as
    float64), so whether the run fails could depend on that record.
    """
    if not inp.schema:
        _fail("input.dataset", f"the curator's dataset {inp.dataset!r} has no declared schema, "
                               "and author mode (input.mode = \"author\") reads only declared "
                               "columns, in their declared types: the types of the files could "
                               "depend on single records. Nothing was read.",
              f"ask the curator to declare the schema of every column a release uses, in the "
              f"curator configuration: [datasets.{inp.dataset}] schema = {{ <column> = "
              f"\"<dtype>\", ... }}.")
    known = list(inp.schema)
    named: list[tuple[str, str]] = []
    if inp.unit is not None:
        named.append(("input.unit", inp.unit))
    for i, t in enumerate(tables):
        named += [(f"tables[{i}].by", c) for c in t.by]
        named += [(f"tables[{i}].measures", m) for m in t.measures]
    for where, col in named:
        if col not in inp.schema:
            _fail(where, f"column {col!r} is not in the declared schema of dataset "
                         f"{inp.dataset!r} (its columns: {_names(known)}).{_maybe(col, known)}",
                  "use a declared column, or ask the curator to declare it.")
