"""Parsers of the spec's sections other than ``[[tables]]``.

``[release]``, ``[input]``, ``[domains]``, ``[hierarchies]``, ``[budget]``, ``[randomness]``,
``[output]``, ``[publication]``, ``[plan]``, and the author-mode defaults and output folders.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl

from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp.release.curator_config import CuratorConfig, DatasetDecl
from tabdp.release.spec.files import _file_path, _frame_column, _read_frame, _resolve, _shown
from tabdp.release.spec.model import (
    BudgetSpec,
    Hierarchy,
    InputSpec,
    LedgerSpec,
    OutputSpec,
    PlanSpec,
    Publication,
    ReleaseInfo,
    classifications,
)
from tabdp.release.spec.schema import (
    _DOMAIN_FILE_KEYS,
    _HIERARCHY_KEYS,
    _INPUT_KEYS,
    _MODES,
    _NEGATIVE_RULES,
    _NEGATIVES,
    _NONFINITE,
    _NULLS,
    _OUTPUT_FOLDERS,
    _OUTPUT_KEYS,
    _PLAN_KEYS,
    _PUBLICATION_KEYS,
    _RELEASE_KEYS,
    _RELEASE_NAME,
    _TABLE_NAME,
    _TABLE_REF,
    _UNIT_NULLS,
    SPEC_KEYS,
    _article,
    _bool,
    _cv,
    _enum,
    _fail,
    _join,
    _maybe,
    _names,
    _number,
    _per_measure,
    _show,
    _size_curve,
    _str_list,
    _string,
    _table,
    _tname,
)


# -- sections -----------------------------------------------------------------------------------
def _parse_release(raw: Any) -> ReleaseInfo:
    d = _table(raw, "release", allowed=_RELEASE_KEYS, required=("name",),
               example='name = "cbp_2026"')
    name = _string(d["name"], "release.name", what="the release name", pattern=_RELEASE_NAME,
                   rule="use only letters, digits, '_', '-' and '.'",
                   hint='e.g. name = "cbp_2026"; it names the output files.')
    texts = {}
    for key in ("title", "description"):
        if key in d:
            if not isinstance(d[key], str):
                _fail(f"release.{key}", f"must be a string; got {_show(d[key])} "
                                        f"({_tname(d[key])}).", f'e.g. {key} = "..."')
            texts[key] = d[key]
    level = 0.9
    if "level" in d:
        level = _number(d["level"], "release.level", what="the confidence level", gt=0.0,
                        lt=1.0, hint="e.g. level = 0.9 for 90% margins of error.")
    delta = None
    if "delta" in d:
        delta = _number(d["delta"], "release.delta", what="delta", gt=0.0, lt=1.0,
                        hint="δ of the (ε, δ) statements, e.g. delta = 1e-9.")
        from tabdp.privacy.conversions import statement_delta_problem

        if (why := statement_delta_problem(delta)) is not None:
            _fail("release.delta", f"{why}.", "use a δ far below 1 / (the number of units), "
                                              "e.g. delta = 1e-9, or remove delta.")
    return ReleaseInfo(name=name, level=level, delta=delta, **texts)


def _dataset_source(decl: DatasetDecl) -> tuple[Path | None, str]:
    """The path and scan source of a curator-declared dataset (a folder is read whole)."""
    if decl.path is None:
        return None, str(decl.table)
    if decl.path.is_dir():
        return decl.path, f"{decl.path}/**/*.parquet"
    return decl.path, str(decl.path)


def _parse_input(raw: Any, base: Path, curator: CuratorConfig | None = None) -> InputSpec:
    d = _table(raw, "input", allowed=_INPUT_KEYS, example='dataset = "cbp_2026"')
    mode = _enum(d.get("mode", "curator"), "input.mode", _MODES,
                 "'curator' (default) allows strict data-quality errors; 'author' requires "
                 "every data-quality rule to be declared so the data can never stop the run.")
    table = None
    path: Path | None = None
    dataset: DatasetDecl | None = None
    given = [k for k in ("path", "table", "dataset") if k in d]
    if mode == "author":
        # The author names nothing on the server: a dataset the curator declares, by name.
        # Decided here from the text alone, before anything is read: whether a path, a glob or
        # a partition folder resolves could depend on the records (docs/privacy-semantics.md).
        if curator is None:
            _fail("input.mode", "an author-mode spec (input.mode = \"author\") needs the "
                                "curator's configuration, which declares the datasets and "
                                "public metadata files it may name; none was given.",
                  "ask the curator for the configuration file and pass it with "
                  "--curator CONFIG (or the environment variable TABDP_CURATOR).")
        for key in ("path", "table", "hive_partitioning"):
            if key in d:
                _fail(f"input.{key}", "is not allowed in author mode (input.mode = "
                                      "\"author\"): the author names no path, glob, "
                                      "partition or table; the curator's configuration "
                                      "declares the datasets and how they are read.",
                      'name a dataset of the curator configuration: [input] dataset = '
                      '"<name>" (ask the curator for the names).')
        if "dataset" not in d:
            _fail("input", "an author-mode spec needs dataset = \"<name>\" (a dataset of the "
                           "curator configuration); got none.",
                  'add dataset = "<name>"; the curator configuration lists the names.')
    elif len(given) != 1:
        _fail("input", "needs exactly one of 'path' (Parquet files), 'table' (a Spark catalog "
                       "table) and 'dataset' (a dataset of the curator configuration); got "
                       f"{_names(given) if given else 'none'}.",
              'add path = "data.parquet", or table = "db.name" for tabdp run --engine spark.')
    if "dataset" in d:
        name = _string(d["dataset"], "input.dataset", what="the dataset name",
                       hint='the name of a dataset of the curator configuration, e.g. '
                            'dataset = "cbp_2026".')
        if curator is None:
            _fail("input.dataset", f"names the dataset {name!r} of a curator configuration, "
                                   "but none was given.",
                  "pass the curator's configuration with --curator CONFIG (or "
                  "TABDP_CURATOR), or give input.path.")
        if name not in curator.datasets:
            known = sorted(curator.datasets)
            _fail("input.dataset", f"{name!r} is not a dataset of the curator configuration "
                                   f"(its datasets: {_names(known) if known else 'none'})."
                                   f"{_maybe(name, known)}",
                  "use one of the declared names, or ask the curator to declare the dataset.")
        dataset = curator.datasets[name]
        path, source = _dataset_source(dataset)
        table = dataset.table
        text = name
    elif "table" in d:
        table = _string(d["table"], "input.table", what="the table name",
                        pattern=_TABLE_REF, rule="one to three names (letters, digits, '_') "
                        "separated by dots",
                        hint='name a table of the Spark catalog, e.g. table = "lake.cbp_2026"; '
                             "it is read by tabdp run --engine spark.")
        if "hive_partitioning" in d:
            _fail("input.hive_partitioning", "applies to Parquet files (input.path), not to "
                                             f"a catalog table (input.table = {table!r}).",
                  "remove input.hive_partitioning: the catalog knows the table's partitions.")
        text = table
        source = table
    else:
        text = _string(d["path"], "input.path", what="the input path",
                       hint="a Parquet file, a folder of Parquet files or a glob such as "
                            "'data/*.parquet', absolute or relative to the spec's folder.")
        path = _resolve(base, text)
        if "*" in text:
            source = str(path)
        elif path.is_dir():
            source = f"{path}/**/*.parquet"
        else:
            source = str(path)
    hive = dataset.hive_partitioning if dataset is not None else None
    if "hive_partitioning" in d:
        hive = _bool(d["hive_partitioning"], "input.hive_partitioning",
                     "true, false, or omit it for Polars' automatic detection.")
    unit = None
    if "unit" in d:
        unit = _string(d["unit"], "input.unit", what="the unit column",
                       hint="name the privacy-unit column (e.g. unit = \"estab_id\"), or omit it "
                            "when each row is a unit.")
    if dataset is not None and dataset.unit is not None:
        unit = _dataset_unit(dataset, unit)
    nulls = _enum(d.get("nulls", "error"), "input.nulls", _NULLS,
                  "'error' refuses nulls, 'zero' treats them as 0, 'drop' drops the row.")
    negatives = _enum(d.get("negatives", DEFAULT_NEGATIVES), "input.negatives", _NEGATIVES,
                      "'error' refuses negative values, 'allow' keeps signed values, 'zero' "
                      "clips them to 0, 'drop' drops the row.")
    nonfinite = _enum(d.get("nonfinite", "error"), "input.nonfinite", _NONFINITE,
                      "'error' refuses +inf / -inf values, 'zero' treats them as 0, 'drop' drops "
                      "the row, 'clamp' replaces them by the measure's bounds (input.bounds).")
    unit_nulls = _enum(d.get("unit_nulls", "error"), "input.unit_nulls", _UNIT_NULLS,
                       "'error' refuses rows without a unit id, 'drop' drops them.")
    bounds: dict[str, tuple[float, float]] = {}
    if "bounds" in d:
        bounds = _parse_bounds(d["bounds"], "input.bounds")
    if nonfinite == "clamp" and not bounds:
        _fail("input.nonfinite", "'clamp' replaces +inf / -inf by the measure's public bounds, "
                                 "but input.bounds is not set.",
              'add input.bounds = { payroll = [0, 1e10] } (one entry per summed measure), or '
              'use nonfinite = "drop" or "zero".')
    max_cells = None
    if "max_cells" in d:
        v = d["max_cells"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            _fail("input.max_cells", f"must be a whole number >= 1; got {_show(v)} "
                                     f"({_tname(v)}).",
                  "e.g. max_cells = 10: the cells one unit may contribute to in each table.")
        if unit is None:
            _fail("input.max_cells", "bounds the cells of a multi-row unit, but input.unit is "
                                     "not set (each row is in one cell already).",
                  "set input.unit, or remove input.max_cells.")
        max_cells = int(v)
    return InputSpec(path=path, source=source, hive_partitioning=hive, unit=unit, nulls=nulls,
                     negatives=negatives, mode=mode, nonfinite=nonfinite, bounds=bounds,
                     unit_nulls=unit_nulls, max_cells=max_cells, table=table,
                     dataset=dataset.name if dataset is not None else None,
                     schema=dict(dataset.schema) if dataset is not None else {})


def _dataset_unit(dataset: DatasetDecl, unit: str | None) -> str:
    """The unit of a spec naming a dataset whose privacy unit the curator fixes.

    Omitted: the dataset's unit (inherited). Named: it must be exactly the dataset's: a finer
    unit (or rows) would charge each part of a unit separately, and the unit's loss would no
    longer be bounded by the budget the curator publishes. Decided from the text alone; the
    unit column's name is public.
    """
    assert dataset.unit is not None
    if unit is not None and unit != dataset.unit:
        _fail("input.unit", f"the curator fixes the privacy unit of dataset {dataset.name!r} to "
                            f"the column {dataset.unit!r}; got unit = {unit!r}. A different "
                            "unit would charge parts of one unit separately, so the unit's "
                            "loss would not be bounded by the budget. Nothing was read.",
              f'remove input.unit (the dataset\'s unit is used), or write unit = '
              f'"{dataset.unit}".')
    return dataset.unit


def _dataset_ledger(curator: CuratorConfig | None, inp: InputSpec, output: OutputSpec,
                    spec_ledger: LedgerSpec | None) -> LedgerSpec | None:
    """The ledger of a run: the spec's ``[ledger]``, or its dataset's (curator configuration).

    A spec naming a dataset that the curator gives a ``ledger`` is charged to it (author and
    curator mode alike), through the same ``[ledger]`` machinery; its series and lifetime
    budget are the ledger's own (recorded at ``tabdp ledger init``). With ``[policy]
    require_ledger``, an author-mode spec on a dataset without one is refused. Data-free.
    """
    if curator is None or inp.dataset is None:
        return spec_ledger
    decl = curator.datasets[inp.dataset]
    if decl.ledger is None:
        if inp.mode == "author" and curator.require_ledger:
            _fail("input.dataset", f"the curator configuration charges every author-mode run "
                                   f"to a lifetime ledger ([policy] require_ledger = true), "
                                   f"and dataset {inp.dataset!r} has none. Nothing was read.",
                  "ask the curator to give the dataset a ledger (ledger = \"<folder>\" in its "
                  "[datasets] entry, created by `tabdp ledger init`).")
        return spec_ledger
    if spec_ledger is not None:
        _fail("ledger", f"dataset {inp.dataset!r} has a lifetime ledger in the curator "
                        "configuration, which every run naming it is charged to; a second "
                        "ledger in the spec is not allowed.",
              "remove [ledger] from the spec.")
    for key, folder in (("public", output.public), ("confidential", output.confidential),
                        ("plan", output.plan)):
        if folder is None:
            continue
        led, out = decl.ledger, Path(folder)
        if led == out or out in led.parents or led in out.parents:
            _fail("output", f"the {key} output folder overlaps the lifetime ledger of dataset "
                            f"{inp.dataset!r} (kept by the curator).",
                  "use output folders outside the ledger's folder.")
    # the series' public terms (name, lifetime budget) for the statement every output gives
    from tabdp.exceptions import LedgerError
    from tabdp.privacy.lifetime import budget_from_spec, ledger_terms
    from tabdp.release.curator_config import dataset_ledger_error

    try:
        series, budget = ledger_terms(decl.ledger)
    except LedgerError as err:
        raise dataset_ledger_error(inp.dataset, err) from None
    return LedgerSpec(path=decl.ledger, series=series, lifetime_budget=budget_from_spec(budget),
                      dataset=inp.dataset)


def _parse_bounds(raw: Any, path: str) -> dict[str, tuple[float, float]]:
    hint = ("public bounds per measure, e.g. bounds = { payroll = [0, 1e10], employment = "
            "[0, 1e6] }; they must not be derived from the data.")
    if not isinstance(raw, Mapping) or not raw:
        _fail(path, f"must be a non-empty table of measure = [low, high]; got {_show(raw)} "
                    f"({_tname(raw)}).", hint)
    out: dict[str, tuple[float, float]] = {}
    for key, value in raw.items():
        kp = _join(path, str(key))
        if not isinstance(value, list) or len(value) != 2:
            _fail(kp, f"must be an array [low, high] of two numbers; got {_show(value)} "
                      f"({_tname(value)}).", hint)
        lo = _number(value[0], f"{kp}[0]", what="the lower bound", hint=hint)
        hi = _number(value[1], f"{kp}[1]", what="the upper bound", hint=hint)
        if not lo < hi:
            _fail(kp, f"the lower bound must be below the upper bound; got {_show(value)}.", hint)
        out[str(key)] = (lo, hi)
    return out


def _parse_domains(raw: Any, base: Path) -> dict[str, pl.Series]:
    if not isinstance(raw, Mapping):
        _fail("domains", f"must be a table of key column -> values; got {_show(raw)} "
                         f"({_tname(raw)}).", 'e.g. [domains] naics2 = ["11", "21"].')
    out: dict[str, pl.Series] = {}
    for key, value in raw.items():
        dp = _join("domains", key)
        if not isinstance(key, str) or not key:
            _fail(dp, f"a domain needs a non-empty column name; got {_show(key)}.",
                  "name the key column.")
        if isinstance(value, list):
            out[key] = _inline_domain(key, value, dp)
        elif isinstance(value, Mapping):
            d = _table(value, dp, allowed=_DOMAIN_FILE_KEYS, required=("file",),
                       example='{ file = "codes.csv", column = "code" }')
            written = d["file"]
            file = _file_path(written, _join(dp, "file"), base, "domain")
            column = key
            if "column" in d:
                column = _string(d["column"], _join(dp, "column"), what="the domain column",
                                 hint="name the column of the file holding the codes.")
            frame = _read_frame(file, _join(dp, "file"), "domain", written)
            series = _frame_column(frame, column, _join(dp, "column"), file)
            if series.null_count():
                _fail(_join(dp, "file"), f"column {column!r} of {_shown(file)!r} holds "
                                         f"{series.null_count()} null value(s).",
                      "remove the empty entries from the domain file.")
            series = series.unique(maintain_order=True).rename(key)
            if series.len() == 0:
                _fail(_join(dp, "file"), f"the domain file {_shown(file)!r} has no rows.",
                      "list at least one value.")
            out[key] = series
        else:
            _fail(dp, f"must be an array of values or a table {{ file = ..., column = ... }}; "
                      f"got {_show(value)} ({_tname(value)}).",
                  f'e.g. {key} = ["a", "b"] or {key} = {{ file = "codes.csv" }}.')
    return out


_DOMAIN_DTYPES = {"string": pl.String, "integer": pl.Int64, "boolean": pl.Boolean}


def _inline_domain(key: str, values: list[Any], path: str) -> pl.Series:
    hint = f'list the public values once each, all strings, integers or booleans, e.g. {key} = ' \
           '["a", "b"].'
    if not values:
        _fail(path, "a domain must list at least one value; got [].", hint)
    kinds = []
    for j, item in enumerate(values):
        kind = _tname(item)
        if kind not in _DOMAIN_DTYPES:
            _fail(f"{path}[{j}]", f"domain values must be strings, integers or booleans; got "
                                  f"{_show(item)} ({kind}).", hint)
        kinds.append(kind)
    if len(set(kinds)) > 1:
        j = next(j for j, k in enumerate(kinds) if k != kinds[0])
        _fail(path, f"domain values must all have one type; {_show(values[0])} is "
                    f"{_article(kinds[0])} {kinds[0]} but {_show(values[j])} is "
                    f"{_article(kinds[j])} {kinds[j]}.", hint)
    seen: set[Any] = set()
    for item in values:
        if item in seen:
            _fail(path, f"domain lists {item!r} twice.", "remove the duplicate value.")
        seen.add(item)
    return pl.Series(key, values, dtype=_DOMAIN_DTYPES[kinds[0]])


def _parse_hierarchies(raw: Any, base: Path, domains: dict[str, pl.Series]
                       ) -> dict[str, Hierarchy]:
    if not isinstance(raw, Mapping):
        _fail("hierarchies", f"must be a table of named hierarchies; got {_show(raw)} "
                             f"({_tname(raw)}).",
              'write [hierarchies.geo] with file = "geo.csv" and levels = ["state", "county"].')
    out: dict[str, Hierarchy] = {}
    owner: dict[str, str] = {}
    for name, value in raw.items():
        hp = _join("hierarchies", name)
        if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
            _fail(hp, f"hierarchy name {name!r} is not allowed: use letters, digits and '_'.",
                  "rename the hierarchy, e.g. [hierarchies.geo].")
        d = _table(value, hp, allowed=_HIERARCHY_KEYS, required=_HIERARCHY_KEYS,
                   example='file = "geo.csv", levels = ["state", "county"]')
        fp, lp = _join(hp, "file"), _join(hp, "levels")
        file = _file_path(d["file"], fp, base, "hierarchy")
        levels = _str_list(d["levels"], lp, what="levels", nonempty=True,
                           hint='columns of the mapping file, coarsest first, e.g. '
                                'levels = ["state", "county"].')
        for level in levels:
            if level in domains and level not in owner:
                _fail(lp, f"level {level!r} also has a domain in [domains].",
                      f"remove domains.{level}: a hierarchy level's domain is the distinct "
                      "codes of the mapping file.")
        frame = _read_frame(file, fp, "hierarchy", d["file"])
        missing = [lv for lv in levels if lv not in frame.columns]
        if missing:
            _fail(lp, f"level(s) {_names(missing)} are not columns of {_shown(file)!r}; its "
                      f"columns are {_names(frame.columns)}.{_maybe(missing[0], frame.columns)}",
                  "fix the levels or the file's header.")
        mapping = frame.select(levels)
        for level in levels:
            dtype = mapping.schema[level]
            if not (dtype == pl.String or dtype.is_integer() or dtype == pl.Boolean
                    or isinstance(dtype, (pl.Categorical, pl.Enum))):
                _fail(fp, f"level {level!r} of {_shown(file)!r} has type {dtype}; codes must be "
                          "strings or integers.", "store the codes as text or integers.")
            nulls = mapping[level].null_count()
            if nulls:
                _fail(fp, f"level {level!r} of {_shown(file)!r} has {nulls} empty (null) "
                          "value(s).", "every row must give a code at every level.")
        if mapping.height == 0:
            _fail(fp, f"the hierarchy file {_shown(file)!r} has no rows.",
                  "give one row per finest code with its codes at every level.")
        mapping = mapping.unique(maintain_order=True)
        for coarse, fine in zip(levels, levels[1:], strict=False):
            bad = _several_parents(mapping, coarse, fine)
            if bad.height:
                code, parents = bad.row(0)
                what = (f"{fine!r} code {code!r} maps to several {coarse!r} codes "
                        f"{_show(parents)} in {_shown(file)!r} ({bad.height} such code(s)); "
                        "each finer code must map to exactly one coarser code")
                order = _coarsest_first(mapping, levels)
                if order is not None:  # the levels were listed in another order (public file)
                    _fail(lp, f"the levels are not listed coarsest first: got "
                              f"{_show(list(levels))}, so {fine!r} is read as finer than "
                              f"{coarse!r}, but {fine!r} code {code!r} is on rows of "
                              f"{len(parents)} {coarse!r} codes (e.g. {_show(parents[:3])}) in "
                              f"{_shown(file)!r}; in the "
                              f"order {_show(order)} every code has one parent.",
                          f"write levels = {json.dumps(order)} in [hierarchies.{name}] "
                          "(coarsest first).")
                _fail(fp, f"{what}.",
                      f"fix the file so that each {fine!r} code is on rows of one {coarse!r} "
                      f"code only (e.g. {fine!r} {code!r} is on rows with {coarse!r} "
                      f"{_show(parents[:5])}), or list only levels that nest.")
        for other in {owner[lv] for lv in levels if lv in owner}:
            _check_alternative(out[other], name, levels, mapping, fp)
        for level in levels:
            owner.setdefault(level, name)
            domains[level] = mapping[level].unique(maintain_order=True).sort()
        out[name] = Hierarchy(name=name, file=file, levels=levels, mapping=mapping)
    _check_classifications(out)
    return out


def _several_parents(mapping: pl.DataFrame, coarse: str, fine: str) -> pl.DataFrame:
    """The ``fine`` codes of a mapping with more than one ``coarse`` code (sorted ``parents``)."""
    return (mapping.select(coarse, fine).unique()
            .group_by(fine).agg(pl.col(coarse).sort().alias("parents"))
            .filter(pl.col("parents").list.len() > 1).sort(fine))


def _coarsest_first(mapping: pl.DataFrame, levels: Sequence[str]) -> list[str] | None:
    """The levels in an order that nests (fewest codes first), if it differs and nests."""
    order = sorted(levels, key=lambda lv: mapping[lv].n_unique())
    if order == list(levels):
        return None
    for coarse, fine in zip(order, order[1:], strict=False):
        if _several_parents(mapping, coarse, fine).height:
            return None
    return order


def _check_classifications(hierarchies: Mapping[str, Hierarchy]) -> None:
    """Alternative hierarchies linked through others: every level still means one thing.

    Two hierarchies sharing levels are checked pairwise (`_check_alternative`); three or more
    linked in a chain (industry: naics2 … naics6; a grouping of naics2; a grouping of naics6)
    can still give one level two meanings through different paths. From each level, every
    coarser level reachable through the hierarchies' maps (each a function, finer to coarser)
    is followed along every path, and the paths must agree code by code (the frame keyed by
    the level's codes never grows: each step is a join with a function).
    """
    group = classifications(hierarchies)
    for cls in dict.fromkeys(group.values()):
        members = [h for h in hierarchies.values() if group[h.name] == cls]
        if len(members) < 3:
            continue
        for start in dict.fromkeys(lv for h in members for lv in h.levels):
            reached = pl.DataFrame({start: next(
                h.mapping[start] for h in members if start in h.levels).unique()})
            via: dict[str, str] = {}
            grew = True
            while grew:
                grew = False
                for h in members:
                    for k, fine in enumerate(h.levels):
                        if fine not in reached.columns:
                            continue
                        for coarse in h.levels[:k]:
                            step = h.mapping.select(fine, coarse).unique()
                            if coarse not in reached.columns:
                                reached = reached.join(step, on=fine, how="left")
                                via[coarse] = h.name
                                grew = True
                                continue
                            got = reached.join(step, on=fine, how="left", suffix="__other")
                            bad = got.filter(pl.col(coarse).ne_missing(pl.col(f"{coarse}__other")))
                            if bad.height:
                                code, one = bad[start][0], bad[coarse][0]
                                two, path = bad[f"{coarse}__other"][0], via.get(coarse, start)
                                _fail(f"hierarchies.{h.name}.file",
                                      f"the alternative hierarchies "
                                      f"{_show(sorted(x.name for x in members))} give level "
                                      f"{coarse!r} two meanings: {start!r} code {code!r} maps "
                                      f"to {coarse!r} {one!r} through {path!r} and {two!r} "
                                      f"through {h.name!r} ({bad.height} such code(s)).",
                                      "make every path between two levels map alike (e.g. a "
                                      "6-digit code under the same group whether reached "
                                      "directly or through its sector), or rename a level in "
                                      "one of the hierarchies.")


def _check_alternative(first: Hierarchy, name: str, levels: Sequence[str],
                       mapping: pl.DataFrame, fp: str) -> None:
    """An alternative hierarchy sharing levels with ``first``: the same codes, the same maps.

    Two hierarchies may share levels (e.g. NAICS sectors and a custom grouping of the same
    6-digit codes): each shared level must have the same codes, of the same type, in both
    mapping files (its public domain), and two shared levels must be in the same order and
    map the same way in both, so that a rollup between them means one thing.
    """
    shared = [lv for lv in levels if lv in first.levels]
    where = f"hierarchies {first.name!r} and {name!r}"
    for lv in shared:
        a, b = first.mapping[lv], mapping[lv]
        if a.dtype != b.dtype:
            _fail(fp, f"level {lv!r} is in {where} with codes of type {a.dtype} and "
                      f"{b.dtype}.", "store the shared level's codes with one type in both "
                      "mapping files.")
        sa, sb = set(a.unique().to_list()), set(b.unique().to_list())
        if sa != sb:
            only = sorted(sa ^ sb, key=str)
            side = first.name if only[0] in sa else name
            _fail(fp, f"level {lv!r} is in {where} with different codes: {len(only)} code(s) "
                      f"in one only, e.g. {only[0]!r} (only in {side!r}).",
                  "a shared level is one public domain: give it the same codes in both "
                  "mapping files, or rename the level in one of them.")
    order = [lv for lv in first.levels if lv in shared]
    if order != list(shared):
        _fail(fp, f"levels {_show(list(shared))} are in {where} in another order "
                  f"({_show(order)} in {first.name!r}).",
              "list shared levels in the same order, coarsest first, in both hierarchies.")
    for coarse, fine in zip(shared, shared[1:], strict=False):
        mine = mapping.select(fine, coarse).unique().sort(fine)
        theirs = first.mapping.select(fine, coarse).unique().sort(fine)
        if not mine.equals(theirs):
            diff = mine.join(theirs, on=fine, suffix="_other").filter(
                pl.col(coarse) != pl.col(f"{coarse}_other"))
            code = diff[fine][0] if diff.height else mine[fine][0]
            _fail(fp, f"{where} map {fine!r} to {coarse!r} differently (e.g. {fine!r} code "
                      f"{code!r}).", "shared levels must map the same way in both "
                      "hierarchies; fix one mapping file or rename the level in one of them.")


def _parse_budget(raw: Any) -> BudgetSpec:
    d = _table(raw, "budget", allowed=SPEC_KEYS["budget"], required=("rho",), example="rho = 2.0")
    hint = ('a number such as rho = 2.0, or a curve of record size -> limit such as '
            'rho = { "1e3" = 0.5, "1e7" = 10.0 }.')
    value = d["rho"]
    max_left_out = None
    if "max_left_out" in d:
        max_left_out = _number(
            d["max_left_out"], "budget.max_left_out", what="the largest share left out", ge=0.0,
            lt=1.0, hint="a share such as max_left_out = 0.05 (at most 5% of a table's rows "
            "or of any measure left out by the budget), or remove it for no limit.")
    if isinstance(value, Mapping):
        return BudgetSpec(rho=_size_curve(value, "budget.rho", what="the budget curve",
                                          hint=hint, nondecreasing=True), max_left_out=max_left_out)
    return BudgetSpec(rho=_number(value, "budget.rho", what="the budget rho", gt=0.0, hint=hint),
                      max_left_out=max_left_out)


def _parse_ledger(raw: Any, base: Path, output: OutputSpec, inp: InputSpec) -> LedgerSpec:
    """``[ledger]``: the lifetime ledger of a release series (data-free checks only)."""
    d = _table(raw, "ledger", allowed=SPEC_KEYS["ledger"],
               required=("path", "series", "lifetime_budget"),
               example='path = "ledger/cbp", series = "cbp-annual", lifetime_budget = 8.0')
    if inp.mode == "author":
        _fail("ledger", "an author-mode spec may not name a ledger: the author names nothing on "
                        "the server, and a series' ledger is the curator's.",
              "remove [ledger] (lifetime ledgers are for curator-mode specs).")
    if inp.unit is None:
        _fail("ledger", "a lifetime ledger needs input.unit: without it each row is a unit "
                        "identified by its position in this run's input, which does not "
                        "identify the same record in another run.",
              'set input.unit = "<stable id column>" (e.g. "estab_id"), the same in every run.')
    path = _resolve(base, _string(d["path"], "ledger.path", what="the ledger folder",
                                  hint='a folder path relative to the spec, e.g. "ledger/cbp".'))
    for key in _OUTPUT_FOLDERS:
        folder = getattr(output, key)
        if path == folder or path.is_relative_to(folder) or folder.is_relative_to(path):
            _fail("ledger.path", f"the ledger {str(path)!r} overlaps the {key} output folder "
                                 f"{str(folder)!r}: the ledger is confidential and lasts across "
                                 "runs (an output folder is published or replaced).",
                  "keep the ledger in a folder of its own, outside every output folder.")
    series = _string(d["series"], "ledger.series", what="the series' name",
                     hint='e.g. series = "cbp-annual" (the same in every run).')
    hint = ('a number such as lifetime_budget = 8.0, or a curve of record size -> limit such '
            'as lifetime_budget = { "1e3" = 2.0, "1e7" = 20.0 }.')
    value = d["lifetime_budget"]
    budget: float | dict[float, float]
    if isinstance(value, Mapping):
        budget = _size_curve(value, "ledger.lifetime_budget", what="the lifetime budget curve",
                             hint=hint, nondecreasing=True)
    else:
        budget = _number(value, "ledger.lifetime_budget", what="the lifetime budget", gt=0.0,
                         hint=hint)
    max_left_out = None
    if "max_left_out" in d:
        max_left_out = _number(
            d["max_left_out"], "ledger.max_left_out", what="the largest share left out",
            ge=0.0, lt=1.0, hint="a share such as max_left_out = 0.05 (at most 5% of a table's "
            "rows or of any measure left out by the lifetime budget), or remove it for no "
            "limit.")
    return LedgerSpec(path=path, series=series, lifetime_budget=budget,
                      max_left_out=max_left_out)


def _parse_seed(raw: Any) -> int | None:
    d = _table(raw, "randomness", allowed=SPEC_KEYS["randomness"], example="seed = 12345")
    if "seed" not in d:
        return None
    seed = d["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        _fail("randomness.seed", f"must be a non-negative integer; got {_show(seed)} "
                                 f"({_tname(seed)}).",
              "e.g. seed = 12345 (for tests only), or remove [randomness] for secure randomness.")
    return seed


def _parse_output(raw: Any, base: Path) -> OutputSpec:
    d = _table(raw, "output", allowed=_OUTPUT_KEYS, required=("public", "confidential"),
               example='public = "out/public", confidential = "out/confidential"')
    folders = {}
    form = "long"
    if "form" in d:
        form = d["form"]
        if not isinstance(form, str) or form not in ("long", "wide"):
            _fail("output.form", f"must be \"long\" or \"wide\"; got {_show(form)} "
                                 f"({_tname(form)}).",
                  'form = "long" (one row per cell and measure: measure, estimate, sd, moe, '
                  'lower, upper, cv, flag; the default) or form = "wide" (one row per cell: '
                  "m, m_sd, m_moe, m_lower, m_upper, m_cv, m_flag per measure).")
    for key in _OUTPUT_FOLDERS:
        if key in d:
            text = _string(d[key], f"output.{key}", what=f"the {key} folder",
                           hint="a folder path, absolute or relative to the spec's folder.")
            folders[key] = _resolve(base, text)
    public, confidential = folders["public"], folders["confidential"]
    plan = folders.get("plan", public.parent / "plan")

    def nested(a: Path, b: Path) -> bool:
        return a == b or a.is_relative_to(b) or b.is_relative_to(a)

    if nested(public, confidential):
        how = "is the same folder as" if public == confidential else "is nested with"
        _fail("output.confidential",
              f"the confidential folder {str(confidential)!r} {how} the public folder "
              f"{str(public)!r}.",
              "use two separate folders (e.g. out/public and out/confidential) so the "
              "confidential report can never be published by accident.")
    for key, other in (("public", public), ("confidential", confidential)):
        if nested(plan, other):
            default = "" if "plan" in d else " (the default: a folder 'plan' next to public)"
            _fail("output.plan", f"the plan folder {str(plan)!r}{default} overlaps the {key} "
                                 f"folder {str(other)!r}.",
                  "set output.plan to a separate folder.")
    return OutputSpec(public=public, confidential=confidential, plan=plan, form=form)


def _parse_publication(raw: Any, path: str, base: Publication,
                       measures: Sequence[str] | None = None) -> Publication:
    d = _table(raw, path, allowed=_PUBLICATION_KEYS, example="{ cv_flag = 0.3 }")
    changes: dict[str, Any] = {}
    if "round" in d:
        rp = _join(path, "round")
        hint = ("a public rounding unit > 0, e.g. round = 1000.0"
                + ("" if measures is None else ", or per measure round = { payroll = 1000.0 }")
                + ", or round = false for none.")
        value = d["round"]
        if value is False:  # no rounding (a table's way out of a global round)
            changes["round"] = None
        elif isinstance(value, Mapping):
            if measures is None:
                _fail(rp, f"must be a number in [publication] (per-measure units go in a "
                          f"table's publication); got {_show(value)}.", hint)
            changes["round"] = _per_measure(value, rp, measures, what="the rounding unit",
                                            hint=hint)
        else:
            changes["round"] = _number(value, rp, what="the rounding unit", gt=0.0, hint=hint)
    for key in ("cv_flag", "suppress_cv"):
        if key in d:
            changes[key] = _cv(d[key], _join(path, key))
    if "negative" in d:
        changes["negative"] = _enum(d["negative"], _join(path, "negative"), _NEGATIVE_RULES,
                                    "'flag' keeps the signed estimate and flags it 'N'; 'clamp' "
                                    "publishes 0 and flags it 'N'.")
    return replace(base, **changes)


def _parse_plan(raw: Any) -> PlanSpec:
    d = _table(raw, "plan", allowed=_PLAN_KEYS, example="cell_totals = [10, 1000]")
    changes: dict[str, Any] = {}
    for key in _PLAN_KEYS:
        if key not in d:
            continue
        if key == "count_rows":
            value = d[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                _fail("plan.count_rows", f"must be a whole number >= 1; got {_show(value)} "
                                         f"({_tname(value)}).",
                      "the number of rows one unit contributes to a count cell in the "
                      "planned curves, e.g. count_rows = 1 (one row per establishment).")
            changes[key] = value
            continue
        kp = f"plan.{key}"
        hint = f"a non-empty array of sizes > 0, e.g. {key} = [1, 100, 1e4, 1e6]."
        value = d[key]
        if not isinstance(value, list) or not value:
            _fail(kp, f"must be a non-empty array of numbers; got {_show(value)} "
                      f"({_tname(value)}).", hint)
        changes[key] = tuple(_number(v, f"{kp}[{j}]", what="a size", gt=0.0, hint=hint)
                             for j, v in enumerate(value))
    return replace(PlanSpec(), **changes)


def _author_mode(data: Mapping[str, Any]) -> bool:
    inp = data.get("input")
    return isinstance(inp, Mapping) and inp.get("mode") == "author"


def _with_defaults(data: Mapping[str, Any], curator: CuratorConfig) -> dict[str, Any]:
    """An author-mode spec with the curator's defaults for what it leaves out."""
    out = dict(data)
    defaults = curator.defaults
    if "budget" in defaults and "budget" not in out:
        out["budget"] = copy.deepcopy(dict(defaults["budget"]))
    release = out.get("release")
    if isinstance(release, Mapping):
        extra = {k: defaults[k] for k in ("level", "delta") if k in defaults and k not in release}
        if extra:
            out["release"] = {**release, **extra}
    return out


def _author_output(raw: Any, curator: CuratorConfig, release: ReleaseInfo) -> OutputSpec:
    """Author mode: the outputs go under the curator's output root, by release name."""
    if raw is None:
        raw = {}
    d = _table(raw, "output", allowed=_OUTPUT_KEYS, example='form = "long"')
    for key in _OUTPUT_FOLDERS:
        if key in d:
            _fail(f"output.{key}", "is not allowed in author mode (input.mode = \"author\"): "
                                   "the author names no server folder; the outputs go to the "
                                   "curator's output root, in a folder named after "
                                   "release.name.",
                  f"remove output.{key} (output.form may stay).")
    if curator.output_root is None:
        _fail("output", "the curator configuration declares no output root ([output] root), "
                        "so an author-mode release has nowhere to go.",
              "ask the curator to add [output] root = \"...\" to the configuration.")
    if release.name.startswith("."):
        _fail("release.name", f"names the output folder under the curator's output root in "
                              f"author mode, so it must not start with '.'; got "
                              f"{release.name!r}.",
              'start it with a letter or digit, e.g. name = "cbp_2026".')
    form = "long"
    if "form" in d:
        form = _enum(d["form"], "output.form", ("long", "wide"),
                     'form = "long" (one row per cell and measure) or "wide" (one row per '
                     'cell).')
    top = curator.output_root / release.name
    return OutputSpec(public=top / "public", confidential=top / "confidential",
                      plan=top / "plan", form=form)
