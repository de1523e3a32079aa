"""Parsers of ``[[tables]]``: mechanisms, calibration, grids, rollups and allowed keys."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tabdp import mechanisms, registry
from tabdp.calibrate import calibrate
from tabdp.exceptions import SpecError, TabdpError
from tabdp.release.spec.files import _file_path, _read_frame, _shown, align_keys
from tabdp.release.spec.model import (
    Hierarchy,
    InputSpec,
    Publication,
    ReleaseInfo,
    RollupSpec,
    TableSpec,
    classifications,
)
from tabdp.release.spec.schema import (
    _CALIBRATE_KEYS,
    _KINDS,
    _NULLS,
    _OBJECTIVES,
    _ROLLUP_KEYS,
    _TABLE_KEYS,
    _TABLE_NAME,
    CALIBRATION_FAMILIES,
    MECHANISM_FAMILIES,
    SPEC_KEYS,
    _bool,
    _enum,
    _fail,
    _join,
    _maybe,
    _names,
    _number,
    _per_measure,
    _refuse_fall,
    _show,
    _size_curve,
    _str_list,
    _string,
    _table,
    _tname,
)
from tabdp.release.spec.sections import _parse_publication


# -- tables -------------------------------------------------------------------------------------
def _mechanism_error_path(path: str, err: Exception, given: Sequence[str]) -> str:
    match = re.match(r"^\w+: (\w+)", str(err))
    if match and match.group(1) in given:
        return _join(path, match.group(1))
    return path


_CALL = re.compile(r"\b([A-Z][A-Za-z0-9]*)\(((?:\s*\w+\s*=\s*[^,()]+,?)+)\)")
_KWARG = re.compile(r"(?<![=<>!\w])(\w+)=(?!=)")


def spec_keys_hint(text: str) -> str:
    r"""Rewrite a Python-style hint as spec keys.

    ``Cls(r=3.0, delta=1e-9)`` becomes ``{ family = "...", r = 3.0, delta = 1e-9 }``,
    ``sigma=2.0`` becomes ``sigma = 2.0`` and "pass x" becomes "add x".

    Only the ``Hint:`` line is rewritten; the rest of the message is kept as it is.

    Args:
        text: An error message.

    Returns:
        The message with its hint in spec terms.

    Example:
        >>> spec_keys_hint("bad.\nHint: pass delta, e.g. Subbotin(r=3.0, delta=1e-9).")
        'bad.\nHint: add delta, e.g. { family = "subbotin", r = 3.0, delta = 1e-9 }.'
        >>> spec_keys_hint("sigma must be > 0.\nHint: e.g. sigma=2.0")
        'sigma must be > 0.\nHint: e.g. sigma = 2.0'
    """
    if "Hint:" not in text:
        return text
    head, hint = text.split("Hint:", 1)
    families = {v: k for k, v in MECHANISM_FAMILIES.items()}

    def call(m: re.Match[str]) -> str:
        family = families.get(m.group(1))
        if family is None:
            return m.group(0)
        args = ", ".join(a.strip().replace("=", " = ", 1) for a in m.group(2).split(","))
        return f'{{ family = "{family}", {args} }}'

    hint = _CALL.sub(call, hint)
    hint = _KWARG.sub(r"\1 = ", hint)
    hint = re.sub(r"\bpass (\w+)", r"add \1", hint)
    return f"{head}Hint:{hint}"


def _with_hint(err: Exception, hint: str) -> str:
    text = str(err)
    return spec_keys_hint(text) if "Hint" in text else f"{text}\nHint: {hint}"


def _parse_mechanism(raw: Any, path: str, kind: str, measures: tuple[str, ...]
                     ) -> tuple[Any, dict[str, Any]]:
    families = tuple(MECHANISM_FAMILIES)
    if not isinstance(raw, Mapping):
        _fail(path, f"must be a table with a family and its parameters; got {_show(raw)} "
                    f"({_tname(raw)}).", 'e.g. mechanism = { family = "exp_polylog", '
                                         'sigma = 1.1e6, a = 1.0, d = 5.1, p = 1.0 }.')
    if "family" not in raw:
        _fail(path, f"missing required key 'family' in {path} (got {_show(dict(raw))}).",
              f"add family = one of {', '.join(families)}.")
    family = registry.canonical(raw["family"])
    fp = _join(path, "family")
    if family is None or family not in MECHANISM_FAMILIES:
        family = raw["family"]
        maybe = ""
        if isinstance(family, str):
            by_class = {v.lower(): k for k, v in MECHANISM_FAMILIES.items()}
            alias = by_class.get(family.lower())
            maybe = f" Did you mean {alias!r}?" if alias else _maybe(family, families)
        _fail(fp, f"unknown mechanism family {_show(family)}.{maybe} Allowed: "
                  f"{', '.join(families)}.", "use one of the allowed family names.")
    cls = getattr(mechanisms, MECHANISM_FAMILIES[family])
    params = [p for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names = [p.name for p in params]
    kwargs = {k: v for k, v in raw.items() if k != "family"}
    for key, value in kwargs.items():
        if key not in names:
            _fail(_join(path, key), f"unknown parameter {key!r} (value {_show(value)}) for "
                                    f"family {family!r} ({cls.__name__}).{_maybe(key, names)} "
                                    f"Allowed: family, {', '.join(names)}.",
                  f"fix the spelling or remove it; see help(tabdp.mechanisms.{cls.__name__}).")
    missing = [p.name for p in params if p.default is p.empty and p.name not in kwargs]
    if missing:
        _fail(path, f"family {family!r} ({cls.__name__}) needs parameter(s) {_names(missing)}; "
                    f"got {_show(dict(raw))}.",
              f"add {', '.join(f'{m} = ...' for m in missing)}; see "
              f"help(tabdp.mechanisms.{cls.__name__}).")
    if family == "vector_subbotin":
        if kind != "sum":
            _fail(fp, f"family 'vector_subbotin' releases the measures of a sum table jointly; "
                      f"this table has kind {kind!r}.",
                  "use it on a kind = \"sum\" table, or pick another family for the count.")
        weights = kwargs.get("weights")
        if isinstance(weights, Mapping):
            for key in weights:
                if key not in measures:
                    _fail(_join(_join(path, "weights"), str(key)),
                          f"weight given for {key!r}, which is not a measure of this table "
                          f"(measures: {_names(measures)}).{_maybe(str(key), measures)}",
                          "give weights only for the table's measures (others get weight 1).")
    try:
        mech = cls(**kwargs)
    except (TabdpError, TypeError, ValueError) as err:
        raise SpecError(_mechanism_error_path(path, err, list(kwargs)),
                        f"invalid {family!r} mechanism {_show(dict(raw))}: "
                        + _with_hint(err, f"fix the parameters of {cls.__name__}.")) from err
    return mech, {**raw, "family": family}


def _check_releasable(mech: Any, path: str, raw: Mapping[str, Any]) -> None:
    """A noise scale the run cannot draw at is a spec error (before any data is read)."""
    try:
        mech.check_releasable()
    except TabdpError as err:
        given = [k for k in raw if k != "family"] if path.endswith(".mechanism") else []
        raise SpecError(_mechanism_error_path(path, err, given),
                        f"invalid {raw.get('family', type(mech).__name__)!r} mechanism "
                        f"{_show(dict(raw))}: "
                        + _with_hint(err, f"fix the parameters of {type(mech).__name__}.")
                        ) from err


def _parse_calibrate(raw: Any, path: str, level: float) -> tuple[dict[str, Any], Any]:
    d = _table(raw, path, allowed=_CALIBRATE_KEYS,
               required=("family", "targets", "typical_total"),
               example='{ family = "log", targets = { "1e3" = 0.5 }, typical_total = 1e6 }')
    family = _enum(registry.canonical(d["family"]) or d["family"], _join(path, "family"),
                   CALIBRATION_FAMILIES, "calibration searches one of these families.")
    targets = _size_curve(d["targets"], _join(path, "targets"), what="targets",
                          hint='record size -> largest rho allowed for it, e.g. '
                               'targets = { "1e3" = 0.5, "1e7" = 10.0 }.')
    _refuse_decreasing_targets(d["targets"], targets, _join(path, "targets"))
    typical = _number(d["typical_total"], _join(path, "typical_total"),
                      what="typical_total", ge=0.0,
                      hint="the true total of a typical cell, e.g. typical_total = 1e6.")
    fixed: dict[str, Any] = {}
    if "fixed" in d:
        if not isinstance(d["fixed"], Mapping):
            _fail(_join(path, "fixed"), f"must be a table of pinned parameters; got "
                                        f"{_show(d['fixed'])} ({_tname(d['fixed'])}).",
                  "e.g. fixed = { offset = 1000.0 }.")
        fixed = dict(d["fixed"])
    objective = _enum(d.get("objective", "auto"), _join(path, "objective"), _OBJECTIVES,
                      "'auto' minimizes the sd (or the moe where the sd is infinite), 'sd' or "
                      "'moe' ask for one of them.")
    try:
        result = calibrate(family, targets, typical, level=level, objective=objective, **fixed)
    except TabdpError as err:
        raise SpecError(path, "calibration failed: "
                              + _with_hint(err, "change the targets or pinned parameters.")
                        ) from err
    calibration = {"family": family, "targets": targets, "typical_total": typical,
                   "fixed": fixed, "objective": objective}
    return calibration, result.mechanism


def _refuse_decreasing_targets(raw: Mapping[str, Any], targets: Mapping[float, float],
                               path: str) -> None:
    """Calibration targets must not decrease with the record size (see tabdp.calibrate)."""
    _refuse_fall(raw, targets, path, lambda k0, r0, k1, r1: (
        f"the target at size {k1!r} (rho = {r1:g}) is below the target at the smaller size "
        f"{k0!r} (rho = {r0:g}): a larger record would be allowed less loss. Every "
        f"mechanism's loss increases with the record size, so the target at {k1!r} would bind "
        f"and force noise holding records of that size to rho = {r1:g}; records of size "
        f"{k0!r} would lose far less than {r0:g}, and typical cells would get far more noise "
        "than intended.",
        "give larger sizes larger (or equal) targets, e.g. targets = { \"1e3\" = 0.5, "
        "\"1e7\" = 10.0 }; for one limit at every size, give a single target at the largest "
        "plausible size."))


def _parse_grid(raw: Any, path: str, kind: str, measures: tuple[str, ...]
                ) -> float | dict[str, float]:
    hint = "a rounding unit > 0 such as grid = 1000.0, or per measure grid = { payroll = 1000.0 }."
    if isinstance(raw, Mapping):
        names = measures if kind == "sum" else ("count",)
        return _per_measure(raw, path, names, what="the grid step", hint=hint)
    return _number(raw, path, what="the grid", gt=0.0, hint=hint)


def _parse_rollups(raw: Any, path: str, by: tuple[str, ...],
                   hierarchies: Mapping[str, Hierarchy]) -> tuple[RollupSpec, ...]:
    if not isinstance(raw, list):
        _fail(path, f"must be an array of tables ([[tables.rollups]]); got {_show(raw)} "
                    f"({_tname(raw)}).", 'e.g. rollups = [{ by = ["state"] }].')
    derivable: dict[str, tuple[str, str]] = {}
    for h in hierarchies.values():
        inside = [i for i, lv in enumerate(h.levels) if lv in by]
        if inside:
            finest = max(inside)
            for lv in h.levels[:finest]:
                if lv not in by:  # a level shared by alternative hierarchies: the first
                    # (shared levels map alike in every hierarchy holding them)
                    derivable.setdefault(lv, (h.name, h.levels[finest]))
    usable = list(by) + sorted(derivable)
    out: list[RollupSpec] = []
    seen: dict[frozenset[str], int] = {}
    for j, item in enumerate(raw):
        rp = f"{path}[{j}]"
        d = _table(item, rp, allowed=_ROLLUP_KEYS, required=("by",), example='by = ["state"]')
        bp = _join(rp, "by")
        rby = _str_list(d["by"], bp, what="rollup by", nonempty=False,
                        hint=f"columns from {_names(usable)}; [] is the national total.")
        direct = False
        if "direct" in d:
            direct = _bool(d["direct"], _join(rp, "direct"),
                           "true also releases this level directly (more budget).")
        maps: dict[str, tuple[str, str]] = {}
        for col in rby:
            if col in by:
                continue
            if col not in derivable:
                _fail(bp, f"rollup column {col!r} is neither a by column of the table "
                          f"({_names(by)}) nor a coarser level of a hierarchy whose finer level "
                          f"is in by.{_maybe(col, usable)}",
                      f"use columns from {_names(usable)}, or add a hierarchy that maps a by "
                      f"column to {col!r}.")
            maps[col] = derivable[col]
        key = frozenset(rby)
        if key == frozenset(by):
            _fail(bp, f"rollup {_show(list(rby))} is the table's own grouping {_show(list(by))};"
                      " a rollup must be coarser.",
                  "remove it: the table is already released by these columns.")
        if key in seen:
            _fail(bp, f"rollup {_show(list(rby))} repeats rollups[{seen[key]}].",
                  "remove the duplicate rollup.")
        seen[key] = j
        out.append(RollupSpec(by=rby, direct=direct, maps=maps))
    return tuple(out)


def _parse_keys(raw: Any, path: str, base: Path, by: tuple[str, ...],
                domains: Mapping[str, pl.Series]) -> Path:
    d = _table(raw, path, allowed=SPEC_KEYS["tables[].keys"], required=("file",),
               example='{ file = "allowed.parquet" }')
    fp = _join(path, "file")
    file = _file_path(d["file"], fp, base, "keys")
    frame = _read_frame(file, fp, "keys", d["file"])
    if set(frame.columns) != set(by) or len(frame.columns) != len(by):
        _fail(fp, f"the keys file {_shown(file)!r} has columns {_names(frame.columns)}; it must "
                  f"have exactly the table's by columns {_names(by)}.",
              "write one column per by column (any order) and nothing else.")
    for col in by:
        n = frame[col].null_count()
        if n:
            _fail(fp, f"column {col!r} of the keys file {_shown(file)!r} has {n} null value(s).",
                  "every allowed key combination must be complete.")
    dup = frame.filter(frame.is_duplicated())
    if dup.height:
        _fail(fp, f"the keys file {_shown(file)!r} repeats key combinations, e.g. "
                  f"{_show(dup.row(0, named=True))} ({dup.height} duplicate rows).",
              "list each allowed combination once (e.g. df.unique()).")
    try:
        frame = align_keys(frame, domains)
    except pl.exceptions.PolarsError as err:
        _fail(fp, f"the keys file {_shown(file)!r} has values that do not convert to the types "
                  f"of the key domains ({err}).",
              "use the domains' types in the keys file (CSV files are read as text; write a "
              "Parquet keys file to keep other types).")
    for col in by:
        if col in domains and frame.schema[col] == domains[col].dtype:
            bad = frame[col].filter(~frame[col].is_in(domains[col].implode()))
            if bad.len():
                _fail(fp, f"column {col!r} of the keys file {_shown(file)!r} holds {bad[0]!r}, "
                          f"which is not in the domain of {col!r}.",
                      f"fix the keys file or the domain of {col!r}.")
    return file


def _parse_table(raw: Any, i: int, base: Path, release: ReleaseInfo, inp: InputSpec,
                 domains: Mapping[str, pl.Series], hierarchies: Mapping[str, Hierarchy],
                 publication: Publication) -> TableSpec:
    tp = f"tables[{i}]"
    d = _table(raw, tp, allowed=_TABLE_KEYS, required=("name", "by"),
               example='name = "county_payroll", measures = ["payroll"], by = ["county"]')
    name = _string(d["name"], f"{tp}.name", what="the table name", pattern=_TABLE_NAME,
                   rule="use only letters, digits and '_'",
                   hint='e.g. name = "county_naics2"; it names the output files.')
    if "__" in name:
        _fail(f"{tp}.name", f"table name {name!r} contains '__', which output file names use "
                            "as a separator.", "use single underscores.")
    kind = _enum(d.get("kind", "sum"), f"{tp}.kind", _KINDS,
                 "'sum' adds up measures, 'count' counts units.")
    measures: tuple[str, ...] = ()
    if kind == "sum":
        if "measures" not in d:
            _fail(tp, f"missing required key 'measures' in {tp} (a sum table).",
                  'add measures = ["payroll"], or set kind = "count".')
        measures = _str_list(d["measures"], f"{tp}.measures", what="measures", nonempty=True,
                             hint='the columns to add up, e.g. measures = ["payroll"].')
    elif "measures" in d:
        _fail(f"{tp}.measures", f"a count table has no measures; got {_show(d['measures'])}.",
              "remove measures, or set kind = \"sum\".")
    by = _str_list(d["by"], f"{tp}.by", what="by", nonempty=False,
                   hint='key columns, e.g. by = ["county", "naics2"]; [] for one national cell.')
    both = [m for m in measures if m in by]
    if both:
        _fail(f"{tp}.measures", f"column(s) {_names(both)} are both measures and by columns.",
              "a column is either summed or grouped by, not both.")
    keys_file = None
    if "keys" in d:
        keys_file = _parse_keys(d["keys"], f"{tp}.keys", base, by, domains)
    else:
        for col in by:
            if col not in domains:
                _fail(f"{tp}.by", f"by column {col!r} has no public domain (known domains: "
                                  f"{_names(sorted(domains))}).{_maybe(col, sorted(domains))}",
                      f"add {col} = [...] in the [domains] section, make {col!r} a "
                      "hierarchy level, or give the table keys = { file = ... } with the "
                      "allowed combinations.")
    calibration = None
    if "mechanism" in d and "calibrate" in d:
        _fail(tp, "give either mechanism or calibrate, not both; got both.",
              "remove one: mechanism fixes the parameters, calibrate derives them from targets.")
    if "mechanism" in d:
        mech, raw_mech = _parse_mechanism(d["mechanism"], f"{tp}.mechanism", kind, measures)
    elif "calibrate" in d:
        calibration, mech = _parse_calibrate(d["calibrate"], f"{tp}.calibrate", release.level)
        raw_mech = {"family": calibration["family"], **mech.params()}
    elif kind == "count":
        count_family, count_params = registry.COUNT_DEFAULT
        mech = registry.get(count_family).cls(**count_params)
        raw_mech = {"family": count_family, **count_params}
    else:
        _fail(tp, "a sum table needs a mechanism or a calibrate table; got neither.",
              'add calibrate = { family = "exp_polylog", targets = { "2.5e5" = 0.5, '
              '"2e10" = 50.0 }, typical_total = 1e7, fixed = { p = 1 } } (rho 0.5 for a unit '
              'contributing 250,000 to a cell, 50 at 2e10, as in examples/cbp_release.toml), '
              'or a mechanism = { family = ..., ... }; `tabdp plan` shows the losses and '
              'errors of either.')
    _check_releasable(mech, f"{tp}.mechanism" if "mechanism" in d else f"{tp}.calibrate",
                      raw_mech)
    grid = _parse_grid(d["grid"], f"{tp}.grid", kind, measures) if "grid" in d else None
    nulls = inp.nulls
    if "nulls" in d:
        nulls = _enum(d["nulls"], f"{tp}.nulls", _NULLS,
                      "'error' refuses nulls, 'zero' treats them as 0, 'drop' drops the row.")
    pub = publication
    if "publication" in d:
        pub = _parse_publication(d["publication"], f"{tp}.publication", publication,
                                 measures if kind == "sum" else ("count",))
    rollups: tuple[RollupSpec, ...] = ()
    if "rollups" in d:
        rollups = _parse_rollups(d["rollups"], f"{tp}.rollups", by, hierarchies)
    consistent = False
    if "consistent" in d:
        consistent = _bool(d["consistent"], f"{tp}.consistent",
                           "true publishes the table and its direct rollups as one consistent "
                           "set (GLS).")
    if consistent:
        _check_consistent(tp, mech, by, rollups, pub, hierarchies)
    shares: dict[str, float] = {}
    level_mechs: dict[str, Any] = {}
    if "shares" in d:
        if not consistent:
            _fail(f"{tp}.shares", "shares split the targets across the measured levels of a "
                                  "consistent table; this table has no consistent = true.",
                  "add consistent = true, or remove shares.")
        shares, level_mechs = _parse_shares(d["shares"], f"{tp}.shares", by, rollups, mech,
                                            calibration, release.level)
        for lb, m in level_mechs.items():
            _check_releasable(m, _join(f"{tp}.shares", lb), {"family": raw_mech["family"],
                                                              **m.params()})
    opts = {o: _parse_option(d, o, tp, consistent, grid) for o in ("nonnegative", "integer")}
    if opts["integer"] and not isinstance(grid, (int, float)):
        # the measures the grid leaves out (all of them without one) are published on their
        # mechanisms' default grids (review rev64r: a per-measure grid naming one measure)
        names = [m for m in (measures if kind == "sum" and measures else ("count",))
                 if grid is None or m not in grid]
        _check_integer_default_grid(tp, [mech, *level_mechs.values()], names,
                                    partial=grid is not None)
    if grid is not None:
        checked: list[tuple[str | None, Any]] = [(None, mech), *level_mechs.items()]
        for level_label, level_mech in checked:
            _check_grid_fineness(grid, f"{tp}.grid", level_mech, kind, measures, d["grid"],
                                 level_label)
    return TableSpec(name=name, kind=kind, measures=measures, by=by, mechanism=mech,
                     calibration=calibration, keys_file=keys_file, grid=grid, nulls=nulls,
                     publication=pub, rollups=rollups, raw_mechanism=raw_mech,
                     consistent=consistent, shares=shares, level_mechanisms=level_mechs,
                     nonnegative=opts["nonnegative"], integer=opts["integer"])


def _check_grid_fineness(grid: float | Mapping[str, float], path: str, mech: Any, kind: str,
                         measures: Sequence[str], raw: Any, level: str | None) -> None:
    """Refuse a table grid coarser than a tenth of the noise's spread (review r36 F2/F3).

    The one check (`tabdp.frame.coarse_grid`, also the Python API's), in the spec's words.
    """
    from tabdp.frame import coarse_grid

    problem = coarse_grid(grid, mech, kind, measures, shown=_show(raw), level=level,
                          leave="leave grid out", round_with="publication.round = {step}")
    if problem is not None:
        _fail(path, *problem)


def _parse_option(d: Mapping[str, Any], key: str, tp: str, consistent: bool,
                  grid: float | Mapping[str, float] | None) -> bool:
    """``nonnegative`` / ``integer`` on a consistent table (biased post-processing)."""
    if key not in d:
        return False
    what = ("true sets negative consistent finest cells to 0" if key == "nonnegative" else
            "true rounds the consistent finest cells to whole numbers")
    on = _bool(d[key], f"{tp}.{key}", what + " (biased post-processing, flagged B).")
    if on and not consistent:
        _fail(f"{tp}.{key}", f"{key} = true post-processes the finest cells of a consistent "
                             "table; this table has no consistent = true.",
              f"add consistent = true, or remove {key}.")
    if on and key == "integer" and grid is not None:
        steps = list(grid.values()) if isinstance(grid, Mapping) else [grid]
        if any(float(g) != 1.0 for g in steps):
            _fail(f"{tp}.integer", f"integer = true rounds to whole numbers; the table's grid "
                                   f"is {_show(grid)}.", "set grid = 1.0, or remove integer.")
    return on


def _check_integer_default_grid(tp: str, mechs: Sequence[Any], names: Sequence[str], *,
                                partial: bool = False) -> None:
    """``integer = true``: the default grid of every mechanism must be 1 for ``names``.

    ``partial``: the table has a per-measure grid that leaves ``names`` out (else no grid).
    The run publishes a consistent table's measures that ``grid`` leaves out (all of them when
    the spec has no grid) on its mechanisms' default grids, and the whole-number rounding needs
    a grid of 1; refused here, before any data is read, rather than by the consistent step
    after the release.
    """
    for m in mechs:
        for name in names:
            one = m.measure_mechanism(name) if getattr(m, "joint", False) else m
            g = one.default_grid()
            step = float(g) if isinstance(g, (int, float)) and not isinstance(g, bool) else None
            if step is not None and step != 1.0:
                left = (f"the table's grid leaves measure {name!r} out" if partial else
                        "the table leaves grid out")
                _fail(f"{tp}.integer",
                      f"integer = true rounds to whole numbers; {left}, so its estimates are "
                      f"on the mechanism's default grid {_show(step)}.",
                      f"set {name} = 1.0 in grid, or remove integer." if partial else
                      "set grid = 1.0, or remove integer.")


def _parse_shares(raw: Any, path: str, by: tuple[str, ...], rollups: tuple[RollupSpec, ...],
                  mech: Any, calibration: Mapping[str, Any] | None, level: float
                  ) -> tuple[dict[str, float], dict[str, Any]]:
    """``shares = { level label = share }`` over the measured levels, and their mechanisms.

    A level given share f gets the mechanism whose per-record loss is f times the table's at
    every record size: ``sigma / sqrt(f)`` for the (discrete) Gaussian, or a calibration to f
    times the targets for a calibrate table.
    """
    import math

    labels = ["_".join(by) if by else "national"] + [r.label for r in rollups if r.direct]
    hint = ("one share per measured level (the table's own and each direct rollup's), summing "
            f"to 1, e.g. shares = {{ {', '.join(f'{lb} = ...' for lb in labels)} }}.")
    if not isinstance(raw, Mapping):
        _fail(path, f"must be a table level label -> share; got {_show(raw)}.", hint)
    if sorted(map(str, raw)) != sorted(labels):
        _fail(path, f"must name exactly the measured levels {_names(labels)}; got "
                    f"{_names(sorted(map(str, raw)))}.", hint)
    shares = {str(k): _number(v, _join(path, str(k)), what="a share", gt=0.0, hint=hint)
              for k, v in raw.items()}
    if any(v > 1.0 for v in shares.values()) or abs(sum(shares.values()) - 1.0) > 1e-9:
        _fail(path, f"shares must be at most 1 and sum to 1; got {shares} (sum "
                    f"{sum(shares.values())!r}).", hint)
    out: dict[str, Any] = {}
    for lb, f in shares.items():
        if calibration is not None:
            targets = {s: r * f for s, r in calibration["targets"].items()}
            out[lb] = calibrate(calibration["family"], targets, calibration["typical_total"],
                                level=level, objective=calibration.get("objective", "auto"),
                                **dict(calibration.get("fixed") or {})).mechanism
        elif isinstance(mech, (mechanisms.Gaussian, mechanisms.DiscreteGaussian)):
            out[lb] = type(mech)(sigma=float(mech.params()["sigma"]) / math.sqrt(f))
        else:
            _fail(path, f"shares need a calibrate table or a (discrete) Gaussian mechanism, "
                        f"whose loss scales with a share; got {type(mech).__name__}.",
                  "use calibrate = { ... } (each level is calibrated to its share of the "
                  "targets) or family = \"gaussian\".")
    return shares, out


def _check_consistent(tp: str, mech: Any, by: tuple[str, ...], rollups: tuple[RollupSpec, ...],
                      pub: Publication, hierarchies: Mapping[str, Hierarchy]) -> None:
    """What a consistent table needs: direct levels, an additive mechanism, additive rules."""
    path = f"{tp}.consistent"
    if not any(r.direct for r in rollups):
        _fail(path, "consistent = true needs at least one rollup with direct = true (the "
                    "levels released directly are what the consistent estimate combines); got "
                    "none.", 'add direct = true to a rollup, e.g. { by = ["state"], '
                    "direct = true }, or remove consistent.")
    if isinstance(mech, mechanisms.TransformationMechanism):
        _fail(path, f"a consistent table needs an additive mechanism (its noise variance is "
                    f"public); {type(mech).__name__} has an error that depends on the true "
                    "value.", 'use e.g. family = "gaussian", "exp_polylog" or "laplace", or '
                    "remove consistent.")
    if pub.round is not None:
        _fail(f"{tp}.publication.round", "rounding each level to publication.round would "
                                         "break the additivity of a consistent table.",
              "remove publication.round for this table (its estimates are on the table's grid, "
              "and every parent is the exact sum of its children).")
    if pub.negative == "clamp":
        _fail(f"{tp}.publication.negative", "clamping negative cells to 0 level by level would "
                                            "break the additivity of a consistent table.",
              'use negative = "flag" for this table.')
    owners = {c for c in by for h in hierarchies.values() if c in h.levels}
    flat = [c for c in by if c not in owners]
    # a classification: the hierarchies linked by shared levels (alternatives of one another)
    group = classifications(hierarchies)
    classes = {group[h.name] for h in hierarchies.values() for c in by if c in h.levels}
    n_class = len(classes) + len(flat)
    if n_class > 2:
        _fail(f"{tp}.by", f"a consistent table has at most two classifications (e.g. geography "
                          f"x industry); by {_show(list(by))} has {n_class}.",
              "remove consistent, or split the table by the third column.")
    levels = {c for lv in (by, *[r.by for r in rollups]) for c in lv}
    for cls in sorted(classes):
        members = [h for h in hierarchies.values() if group[h.name] == cls]
        used = {c for c in levels if any(c in h.levels for h in members)}
        if len(members) > 1 and not any(used <= set(h.levels) for h in members):
            _fail(f"{tp}.rollups", f"a consistent table's levels of one classification must "
                                   f"all be in one hierarchy (its GLS estimate is on one tree); "
                                   f"levels {_show(sorted(used))} are spread over the "
                                   f"alternative hierarchies "
                                   f"{_show(sorted(h.name for h in members))}.",
                  "remove consistent, or release the levels of each alternative hierarchy "
                  "in a consistent table of its own.")

